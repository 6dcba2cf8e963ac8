//! Task-scoped reentrancy: which task holds which lock, per `Locker`.
//!
//! A hold belongs to the tokio task that acquired it (or, outside any task, to the
//! thread running `block_on`, where the future cannot move). Another task waits, even
//! on the same thread. Futures joined inside one task are one task, so they share holds.
//! A task re-enters a hold only as a kind the hold's kind admits
//! ([`LockKind::reenters`](crate::LockKind)): a read hold never becomes a write hold.

use std::hash::BuildHasher;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::hold::{Context, Hold};
use crate::{LockKey, LockKind};

/// Whether ending a hold gave the lock back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldEnd {
    /// The last hold ended: the lock must be released.
    Outermost,
    /// An outer hold remains.
    Nested,
}

/// What a task that asks for a lock finds among its own holds.
#[derive(Debug)]
pub(crate) enum Reentry {
    /// It holds the lock as a kind that admits the one asked for: here is that hold, with
    /// one more guard counted.
    Reentered(Arc<Hold>),
    /// It holds the lock as a kind that the one asked for would wait for: a read hold
    /// asking to write, say. Waiting would wait for itself.
    Refused { held: LockKind },
    /// It does not hold the lock: ask the store.
    NotHeld,
}

/// The holds of a `Locker` that can be re-entered, each found by its key and holder.
/// A table of the holds themselves, found by the key and holder each hold records,
/// rather than a map from (key, holder) to hold, which would store both a second time.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    holds: Mutex<HashTable<Arc<Hold>>>,
    hasher: DefaultHashBuilder,
}

impl Holds {
    fn holds(&self) -> MutexGuard<'_, HashTable<Arc<Hold>>> {
        // Each update is a single insert or remove: a poisoned table is consistent.
        self.holds.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hash(&self, key: &LockKey, context: Context) -> u64 {
        self.hasher.hash_one((key, context))
    }

    /// The live hold of `key` by `context`, if any, and whether it admits a hold of
    /// `kind`.
    pub(crate) fn reenter(&self, key: &LockKey, kind: LockKind, context: Context) -> Reentry {
        let holds = self.holds();
        let hash = self.hash(key, context);
        let Some(hold) = holds.find(hash, |l| l.key == *key && l.context == context) else {
            return Reentry::NotHeld;
        };
        if !hold.is_active() {
            return Reentry::NotHeld;
        }
        if !hold.kind.reenters(kind) {
            return Reentry::Refused { held: hold.kind };
        }
        hold.holds.fetch_add(1, Ordering::Relaxed);
        Reentry::Reentered(hold.clone())
    }

    /// Registers a new hold, if its kind can be re-entered at all.
    pub(crate) fn insert(&self, hold: Arc<Hold>) {
        if !hold.kind.reenters(hold.kind) {
            return;
        }
        let mut holds = self.holds();
        let hash = self.hash(&hold.key, hold.context);
        // A hold of the same key by the same task, ended without our knowing (it was
        // lost), gives way to the new one.
        if let Ok(stale) =
            holds.find_entry(hash, |l| l.key == hold.key && l.context == hold.context)
        {
            stale.remove();
        }
        holds.insert_unique(hash, hold, |l| self.hash(&l.key, l.context));
    }

    /// Ends one guard's hold of `hold`.
    pub(crate) fn end(&self, hold: &Arc<Hold>) -> HoldEnd {
        let mut holds = self.holds();
        if hold.holds.fetch_sub(1, Ordering::Relaxed) > 1 {
            return HoldEnd::Nested;
        }
        let hash = self.hash(&hold.key, hold.context);
        if let Ok(held) = holds.find_entry(hash, |l| Arc::ptr_eq(l, hold)) {
            held.remove();
        }
        HoldEnd::Outermost
    }
}
