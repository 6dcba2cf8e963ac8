//! A memory store as one of RedLock's masters ([`Master`]): the quorum, on tokio's
//! clock, with nothing to connect to. Each master's lease handle is one; its holds
//! are leases.
//!
//! Its wake-ups go to its own lines, not RedLock's: RedLock's waiters poll, at the
//! holder's expiry.

use std::future::{Future, ready};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::MemoryStore;
use crate::backend::redlock::master::{Holders, LastWaiter, Master};
use crate::backend::store::Acquire;
use crate::backend::wait::{Attempt, Left};
use crate::kind::Sharing;
use crate::{LockError, LockKey};

/// When a fence counter is raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Raise {
    /// Whatever it holds.
    Always,
    /// Only if it ran out: a new counter starts at the value given.
    IfRanOut,
}

impl MemoryStore {
    /// Raises lock `key`'s fence counter to at least `fence`, as `when` says; a counter
    /// that ran out is kept from now, for at least `lease`, as a new one.
    fn raise_counter(&self, key: &Arc<str>, fence: u64, lease: Duration, when: Raise) {
        let now = Instant::now();
        let mut state = self.state();
        let entry = state.entry(key, now);
        if when == Raise::IfRanOut && !entry.fence.expired(now) {
            return;
        }
        entry
            .fence
            .raise(now, fence, self.locks.fence_ttl.max(lease));
    }
}

impl Master for MemoryStore {
    /// Never cut short: it answers at once.
    fn attempt_seeded<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
        seed: u64,
    ) -> impl Future<Output = Result<Attempt, LockError>> + Send + 'a {
        self.raise_counter(request.key.shared(), seed, request.lease, Raise::IfRanOut);
        ready(self.try_acquire(request, waits_for))
    }

    fn raise_fence<'a>(
        &'a self,
        key: &'a LockKey,
        fence: u64,
        lease: Duration,
    ) -> impl Future<Output = Result<(), LockError>> + Send + 'a {
        self.raise_counter(key.shared(), fence, lease, Raise::Always);
        ready(Ok(()))
    }

    /// The tasks waiting in its own lines count as waiting.
    fn holders<'a>(
        &'a self,
        key: &'a LockKey,
    ) -> impl Future<Output = Result<Option<Holders>, LockError>> + Send + 'a {
        let now = Instant::now();
        let holders = self.inspect(key.as_str()).map(|info| {
            let state = self.state();
            let entry = state.entries.get(key.as_str());
            let live = entry.map(|e| {
                let live = e.holders.iter().filter(|h| h.ends.live(now));
                live.map(|h| (h.token.clone(), h.ends.left(now))).collect()
            });
            // An owner's counter and id, as a Redis master keeps them.
            let owner = info.kind.is_some_and(|k| k.sharing() == Sharing::Owner);
            let owner_id = info.holders.into_iter().next().and_then(|h| h.holder_id);
            Holders {
                kind: info.kind,
                holders: live.unwrap_or_default(),
                waiting: info.waiting.unwrap_or_default(),
                fence: entry.filter(|_| owner).and_then(|e| e.fence.kept(now)),
                holder_id: owner_id.filter(|_| owner),
            }
        });
        ready(Ok(holders))
    }

    fn line_key(&self, key: &LockKey) -> Arc<str> {
        key.shared().clone()
    }

    fn ready_to_listen(&self) {}

    fn listen(&self, _line_key: &Arc<str>) {}

    fn leave_line(&self, left: &Left<'_, ()>) {
        self.leave_store_line(left);
    }

    fn stop_listening(&self, _line_key: &Arc<str>, _last: LastWaiter) {}
}

#[cfg(test)]
mod tests;
