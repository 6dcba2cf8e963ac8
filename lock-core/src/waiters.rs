//! Per-lock registry of the local tasks waiting for a lock to be released.
//!
//! A waiter joins before its next attempt, so a release that lands between a failed
//! attempt and the wait still wakes it. Each release wakes one waiter (the one waiting
//! longest); a woken waiter that loses the race to another contender simply waits again,
//! so there is no thundering herd.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// The waiters of one lock.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// Wakes waiters: one per release, all when wake-ups may have been missed.
    wake: Notify,
    /// Whether release messages for this lock are being delivered (pub/sub subscribed).
    ready: AtomicBool,
    ready_changed: Notify,
    /// Local waiters, guarded by the registry's mutex.
    count: std::sync::atomic::AtomicUsize,
}

impl Slot {
    pub(crate) fn wake(&self) -> &Notify {
        &self.wake
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
        self.ready_changed.notify_waiters();
    }

    /// Waits until release messages are delivered for this lock.
    pub(crate) async fn until_ready(&self) {
        loop {
            let changed = self.ready_changed.notified();
            if self.is_ready() {
                return;
            }
            changed.await;
        }
    }
}

/// Whether a join or leave changed the set of locks that have waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    /// The first waiter of this lock arrived / the last one left.
    Changed,
    Unchanged,
}

/// The registry, one per backend.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    slots: Mutex<HashMap<Arc<str>, Arc<Slot>>>,
}

impl Waiters {
    fn slots(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<Slot>>> {
        // A panic elsewhere cannot leave the map inconsistent: every update is one insert
        // or remove, so a poisoned lock is still safe to use.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a waiter for `key`. `on_edge` runs under the registry's lock, so
    /// subscribe and unsubscribe requests it emits keep the order of joins and leaves.
    pub(crate) fn join(&self, key: &Arc<str>, on_edge: impl FnOnce(Edge)) -> Arc<Slot> {
        let mut slots = self.slots();
        let (slot, edge) = match slots.get(key) {
            Some(slot) => (slot.clone(), Edge::Unchanged),
            None => {
                let slot = Arc::new(Slot::default());
                slots.insert(key.clone(), slot.clone());
                (slot, Edge::Changed)
            }
        };
        slot.count.fetch_add(1, Ordering::Relaxed);
        on_edge(edge);
        slot
    }

    /// Unregisters a waiter of `key`.
    pub(crate) fn leave(&self, key: &Arc<str>, slot: &Arc<Slot>, on_edge: impl FnOnce(Edge)) {
        let mut slots = self.slots();
        if slot.count.fetch_sub(1, Ordering::Relaxed) == 1 {
            if slots.get(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
                slots.remove(key);
            }
            on_edge(Edge::Changed);
        } else {
            on_edge(Edge::Unchanged);
        }
    }

    /// Wakes one waiter of `key`: the lock was released.
    pub(crate) fn wake_one(&self, key: &str) {
        if let Some(slot) = self.slots().get(key) {
            slot.wake.notify_one();
        }
    }

    /// Wakes every waiter of every lock, and marks them not ready: release messages
    /// may have been missed (the pub/sub connection dropped).
    pub(crate) fn wake_all_unready(&self) {
        for slot in self.slots().values() {
            slot.set_ready(false);
            slot.wake.notify_waiters();
        }
    }

    /// Marks `key`'s waiters as receiving release messages.
    pub(crate) fn set_ready(&self, key: &str, ready: bool) {
        if let Some(slot) = self.slots().get(key) {
            slot.set_ready(ready);
        }
    }

    /// The locks that have waiters now.
    pub(crate) fn keys(&self) -> Vec<Arc<str>> {
        self.slots().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_join_and_last_leave_are_edges() {
        let waiters = Waiters::default();
        let key: Arc<str> = "lock:{a}".into();
        let mut edges = Vec::new();
        let a = waiters.join(&key, |e| edges.push(e));
        let b = waiters.join(&key, |e| edges.push(e));
        assert!(Arc::ptr_eq(&a, &b));
        waiters.leave(&key, &a, |e| edges.push(e));
        waiters.leave(&key, &b, |e| edges.push(e));
        assert_eq!(
            edges,
            [
                Edge::Changed,
                Edge::Unchanged,
                Edge::Unchanged,
                Edge::Changed
            ]
        );
        assert!(waiters.keys().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn wake_one_wakes_a_single_waiter() {
        let waiters = Waiters::default();
        let key: Arc<str> = "k".into();
        let slot = waiters.join(&key, |_| {});
        let first = slot.wake().notified();
        let second = slot.wake().notified();
        tokio::pin!(first, second);
        first.as_mut().enable();
        second.as_mut().enable();
        waiters.wake_one("k");
        first.await;
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(20), second)
                .await
                .is_err()
        );
    }
}
