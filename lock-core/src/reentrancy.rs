//! Task-scoped reentrancy: which task holds which lock, per `Locker`.
//!
//! A hold belongs to the tokio task that acquired it (or, outside any task, to the
//! thread running `block_on`, where the future cannot move). Another task waits, even
//! on the same thread. Futures joined inside one task are one task, so they share holds.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::guard::Lease;

/// Who holds a lock, for reentrancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Context {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Context {
    pub(crate) fn current() -> Self {
        tokio::task::try_id().map_or_else(|| Self::Thread(std::thread::current().id()), Self::Task)
    }
}

/// Whether ending a hold gave the lock back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldEnd {
    /// The last hold ended: the lock must be released.
    Outermost,
    /// An outer hold remains.
    Nested,
}

const SHARDS: usize = 16;

/// The leases this `Locker` holds, by lock name; sharded so concurrent acquisitions of
/// different locks rarely meet on a mutex.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    shards: [Mutex<HashMap<Arc<str>, Arc<Lease>>>; SHARDS],
}

impl Holds {
    fn shard(&self, name: &str) -> MutexGuard<'_, HashMap<Arc<str>, Arc<Lease>>> {
        // FNV-1a: the shard needs a spread, not the map's resistance to chosen keys, and
        // each acquisition and release picks one, so a cheap hash pays.
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let i = (h % SHARDS as u64) as usize;
        // Each update is a single insert or remove: a poisoned shard is consistent.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live lease on `name` held by `context`, with one more hold counted.
    pub(crate) fn reenter(&self, name: &str, context: Context) -> Option<Arc<Lease>> {
        let shard = self.shard(name);
        let lease = shard.get(name)?;
        if lease.context != context || !lease.is_active() {
            return None;
        }
        lease.holds.fetch_add(1, Ordering::Relaxed);
        Some(lease.clone())
    }

    pub(crate) fn insert(&self, lease: Arc<Lease>) {
        self.shard(&lease.name).insert(lease.name.clone(), lease);
    }

    /// Ends one hold of `lease`.
    pub(crate) fn end(&self, lease: &Arc<Lease>) -> HoldEnd {
        let mut shard = self.shard(&lease.name);
        if lease.holds.fetch_sub(1, Ordering::Relaxed) > 1 {
            return HoldEnd::Nested;
        }
        // One lookup: the entry's key is a clone of the lease's name (a count, no copy).
        if let Entry::Occupied(held) = shard.entry(lease.name.clone())
            && Arc::ptr_eq(held.get(), lease)
        {
            held.remove();
        }
        HoldEnd::Outermost
    }
}
