//! Per-lock registry of the local tasks waiting for a lock to be released.
//!
//! A waiter joins before its next attempt, so a release that lands between a failed
//! attempt and the wait still wakes it. Each release wakes one waiter (the one waiting
//! longest); a woken waiter that loses the race to another contender simply waits again,
//! so there is no thundering herd. A fair lock handed over to a waiter by name wakes
//! that waiter alone.
//!
//! A plain lock released while a task of the same `Locker` waits for it can be passed to
//! that task directly (see [`Passer`]): the releasing side claims the longest-waiting
//! local waiter, changes the owner in one command, and hands it the result.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

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
    /// Fair locks handed over to waiters by name.
    grants: Mutex<Grants>,
    /// Plain waiters a local release may pass the lock to, longest waiting first.
    passable: Mutex<VecDeque<Arc<Passer>>>,
    /// Releases in a row that passed the lock to a local waiter.
    streak: AtomicU32,
}

/// A plain waiter that a release by the same `Locker` can pass the lock to, with the
/// state of that pass. The releasing side claims it, changes the lock's owner to
/// [`token`](Self::token) in one command, then reports the outcome here; the waiter either
/// takes the pass, or has meanwhile taken the lock itself, or has given up (then whoever
/// learns last that the lock is the waiter's gives it back).
#[derive(Debug)]
pub(crate) struct Passer {
    pub(crate) token: Arc<str>,
    /// The waiter's lease, which a pass starts.
    pub(crate) lease: Duration,
    state: Mutex<Pass>,
    notify: Notify,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// In its lock's line of passable waiters. `unsure`: a pass to it failed in a way
    /// that leaves open whether the owner changed, so if it gives up it gives back by
    /// its token (which changes nothing if the lock is not its own).
    Waiting { unsure: bool },
    /// Taken out of the line by a release that is changing the owner.
    Claimed,
    /// The lock is the waiter's, with this fencing token, since the change was sent.
    Passed { fence: u64, sent_at: Instant },
    /// The waiter holds the lock (taken, or passed and taken up): nothing more to do.
    Done,
    /// The waiter gave up while claimed: the release gives back what it passed.
    Abandoned,
}

/// What the releasing side must do after it reported a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterPass {
    /// Nothing: the waiter has it, or will take it up.
    Nothing,
    /// Give the lock back by the waiter's token: it gave up.
    GiveBack,
}

/// What a waiter that gives up must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnGiveUp {
    Nothing,
    /// Give the lock back by its token: it was passed and never taken up.
    GiveBack,
}

impl Passer {
    fn state(&self) -> MutexGuard<'_, Pass> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notified when a pass comes, or a claimed pass fell through.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }

    /// The pass, if it came: the fencing token, and when the change was sent (the
    /// earliest the lease can have started). Taken once.
    pub(crate) fn take(&self) -> Option<(u64, Instant)> {
        let mut state = self.state();
        match *state {
            Pass::Passed { fence, sent_at } => {
                *state = Pass::Done;
                Some((fence, sent_at))
            }
            _ => None,
        }
    }

    /// The waiter took the lock itself: a pass now in flight needs nothing more.
    pub(crate) fn done(&self) {
        *self.state() = Pass::Done;
    }

    /// The releasing side passed the lock: owner changed, fencing token `fence`.
    pub(crate) fn passed(&self, fence: u64, sent_at: Instant) -> AfterPass {
        let mut state = self.state();
        match *state {
            Pass::Claimed => {
                *state = Pass::Passed { fence, sent_at };
                self.notify.notify_one();
                AfterPass::Nothing
            }
            Pass::Abandoned => {
                *state = Pass::Done;
                AfterPass::GiveBack
            }
            // Done: it took the lock under its own token meanwhile. Waiting and Passed
            // cannot happen: only the claimant reports.
            _ => AfterPass::Nothing,
        }
    }

    /// The releasing side could not pass the lock (it no longer held it, or, `unsure`,
    /// the command failed without an answer): the waiter goes back to the head of the
    /// line and tries for itself.
    pub(crate) fn not_passed(self: &Arc<Self>, slot: &Slot, unsure: bool) {
        let mut line = slot.passable();
        let mut state = self.state();
        if *state == Pass::Claimed {
            *state = Pass::Waiting { unsure };
            line.push_front(self.clone());
            self.notify.notify_one();
        }
    }

    /// The waiter leaves `slot` without the lock: [`OnGiveUp`] says whether it must give
    /// back a lock passed to it.
    pub(crate) fn give_up(self: &Arc<Self>, slot: &Slot) -> OnGiveUp {
        let mut line = slot.passable();
        let mut state = self.state();
        match *state {
            Pass::Waiting { unsure } => {
                line.retain(|p| !Arc::ptr_eq(p, self));
                *state = Pass::Done;
                if unsure {
                    OnGiveUp::GiveBack
                } else {
                    OnGiveUp::Nothing
                }
            }
            Pass::Claimed => {
                *state = Pass::Abandoned;
                OnGiveUp::Nothing
            }
            Pass::Passed { .. } => {
                *state = Pass::Done;
                OnGiveUp::GiveBack
            }
            Pass::Done | Pass::Abandoned => OnGiveUp::Nothing,
        }
    }
}

/// A fair lock handed over to a waiter: its fencing token, and the backend's clock (in
/// microseconds) at the hand-over, from which the waiter reckons when its lease started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) fence: u64,
    pub(crate) at_us: u64,
}

/// Where a fair waiter receives its hand-over.
#[derive(Debug, Default)]
pub(crate) struct GrantCell {
    grant: Mutex<Option<Grant>>,
    notify: Notify,
}

impl GrantCell {
    /// The hand-over, once it came.
    pub(crate) fn take(&self) -> Option<Grant> {
        self.grant.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Notified when the hand-over comes.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }

    fn put(&self, grant: Grant) {
        *self.grant.lock().unwrap_or_else(|e| e.into_inner()) = Some(grant);
        self.notify.notify_one();
    }
}

/// Hand-overs of one lock: to the local fair waiters, and the latest few that found no
/// local waiter by that name (yet: its message can overtake the reply to the attempt that
/// put it in line; or never: it went to another process).
#[derive(Debug, Default)]
struct Grants {
    waiting: HashMap<Box<str>, Arc<GrantCell>>,
    unclaimed: VecDeque<(Box<str>, Grant)>,
}

/// How many unclaimed hand-overs a lock keeps.
const UNCLAIMED: usize = 16;

impl Slot {
    pub(crate) fn wake(&self) -> &Notify {
        &self.wake
    }

    fn passable(&self) -> MutexGuard<'_, VecDeque<Arc<Passer>>> {
        self.passable.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts a plain waiter (`token`, asking for `lease`) in line for a local pass.
    pub(crate) fn join_passable(&self, token: Arc<str>, lease: Duration) -> Arc<Passer> {
        let passer = Arc::new(Passer {
            token,
            lease,
            state: Mutex::new(Pass::Waiting { unsure: false }),
            notify: Notify::new(),
        });
        self.passable().push_back(passer.clone());
        passer
    }

    /// Claims the longest-waiting local waiter for a pass, unless `max` passes in a row
    /// were made already: then the lock is to be freed for every contender, and the
    /// count starts again.
    pub(crate) fn claim_passer(&self, max: u32) -> Option<Arc<Passer>> {
        if self.streak.load(Ordering::Relaxed) >= max {
            self.streak.store(0, Ordering::Relaxed);
            return None;
        }
        let mut line = self.passable();
        while let Some(passer) = line.pop_front() {
            let mut state = passer.state();
            if matches!(*state, Pass::Waiting { .. }) {
                *state = Pass::Claimed;
                drop(state);
                self.streak.fetch_add(1, Ordering::Relaxed);
                return Some(passer);
            }
        }
        self.streak.store(0, Ordering::Relaxed);
        None
    }

    /// Whether tasks of this `Locker` wait for the lock.
    pub(crate) fn has_waiters(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
        self.ready_changed.notify_waiters();
    }

    fn grants(&self) -> MutexGuard<'_, Grants> {
        self.grants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the fair waiter `token` for its hand-over (which may already be here).
    pub(crate) fn expect_grant(&self, token: &str) -> Arc<GrantCell> {
        let mut grants = self.grants();
        let cell = Arc::new(GrantCell::default());
        if let Some(i) = grants.unclaimed.iter().position(|(t, _)| &**t == token)
            && let Some((_, grant)) = grants.unclaimed.remove(i)
        {
            cell.put(grant);
        }
        grants.waiting.insert(token.into(), cell.clone());
        cell
    }

    /// Unregisters the fair waiter `token`.
    pub(crate) fn forget_grant(&self, token: &str) {
        self.grants().waiting.remove(token);
    }

    fn deliver(&self, token: &str, grant: Grant) {
        let mut grants = self.grants();
        match grants.waiting.get(token) {
            Some(cell) => cell.put(grant),
            None => {
                if grants.unclaimed.len() == UNCLAIMED {
                    grants.unclaimed.pop_front();
                }
                grants.unclaimed.push_back((token.into(), grant));
            }
        }
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

    /// Unregisters a waiter of `key`. The last one out removes the lock's slot, unless
    /// it is to `linger`: then the slot stays (and keeps receiving release messages)
    /// until [`remove_if_idle`](Self::remove_if_idle).
    pub(crate) fn leave(
        &self,
        key: &Arc<str>,
        slot: &Arc<Slot>,
        linger: bool,
        on_edge: impl FnOnce(Edge),
    ) {
        let mut slots = self.slots();
        if slot.count.fetch_sub(1, Ordering::Relaxed) == 1 {
            if !linger && slots.get(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
                slots.remove(key);
            }
            on_edge(Edge::Changed);
        } else {
            on_edge(Edge::Unchanged);
        }
    }

    /// Removes `key`'s slot if no waiter is in it; says whether it is gone.
    pub(crate) fn remove_if_idle(&self, key: &str) -> bool {
        let mut slots = self.slots();
        match slots.get(key) {
            Some(slot) if slot.count.load(Ordering::Relaxed) > 0 => false,
            _ => {
                slots.remove(key);
                true
            }
        }
    }

    /// The slot of `key`, if it has one.
    pub(crate) fn slot(&self, key: &str) -> Option<Arc<Slot>> {
        self.slots().get(key).cloned()
    }

    /// Wakes one waiter of `key`: the lock was released. Says whether `key` has a waiter
    /// (one between two waits takes the wake-up when it next waits; so does one joining
    /// a lingering slot right after its failed attempt).
    pub(crate) fn wake_one(&self, key: &str) -> bool {
        let slots = self.slots();
        let Some(slot) = slots.get(key) else {
            return false;
        };
        slot.wake.notify_one();
        slot.has_waiters()
    }

    /// Hands `key` over to its local fair waiter `token`, waking that waiter alone.
    pub(crate) fn deliver(&self, key: &str, token: &str, grant: Grant) {
        if let Some(slot) = self.slots().get(key) {
            slot.deliver(token, grant);
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

    /// The locks that have slots now, and whether each has waiters.
    pub(crate) fn keys(&self) -> Vec<(Arc<str>, bool)> {
        self.slots()
            .iter()
            .map(|(key, slot)| (key.clone(), slot.count.load(Ordering::Relaxed) > 0))
            .collect()
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
        waiters.leave(&key, &a, false, |e| edges.push(e));
        waiters.leave(&key, &b, false, |e| edges.push(e));
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

    #[test]
    fn a_lingering_slot_stays_until_removed_while_idle() {
        let waiters = Waiters::default();
        let key: Arc<str> = "k".into();
        let a = waiters.join(&key, |_| {});
        waiters.leave(&key, &a, true, |e| assert_eq!(e, Edge::Changed));
        assert_eq!(waiters.keys(), [(key.clone(), false)]);
        // A waiter coming back finds the same slot: no new subscription.
        let b = waiters.join(&key, |e| assert_eq!(e, Edge::Unchanged));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!waiters.remove_if_idle("k"), "removed a slot with a waiter");
        waiters.leave(&key, &b, true, |_| {});
        assert!(waiters.remove_if_idle("k"));
        assert!(waiters.keys().is_empty());
    }

    #[test]
    fn a_hand_over_reaches_its_waiter_even_before_it_registers() {
        let waiters = Waiters::default();
        let key: Arc<str> = "k".into();
        let slot = waiters.join(&key, |_| {});
        let grant = |fence| Grant { fence, at_us: 7 };
        let a = slot.expect_grant("a");
        waiters.deliver("k", "a", grant(1));
        assert_eq!(a.take(), Some(grant(1)));
        assert_eq!(a.take(), None);
        // Delivered before "b" registered: kept for it, among the latest few.
        waiters.deliver("k", "b", grant(2));
        for fence in 3..3 + UNCLAIMED as u64 - 1 {
            waiters.deliver("k", "elsewhere", grant(fence));
        }
        assert_eq!(slot.expect_grant("b").take(), Some(grant(2)));
        // Older than the latest few: gone.
        waiters.deliver("k", "c", grant(100));
        for fence in 0..UNCLAIMED as u64 {
            waiters.deliver("k", "elsewhere", grant(fence));
        }
        assert_eq!(slot.expect_grant("c").take(), None);
    }

    #[test]
    fn a_pass_goes_to_the_longest_waiting_and_whoever_learns_last_frees_an_orphan() {
        let slot = Slot::default();
        let lease = std::time::Duration::from_secs(30);
        let [a, b, c] = ["a", "b", "c"].map(|t| slot.join_passable(t.into(), lease));
        let now = Instant::now();

        // Claimed first come first; passed and taken up once.
        let claimed = slot.claim_passer(8).unwrap();
        assert!(Arc::ptr_eq(&claimed, &a));
        assert_eq!(a.take(), None, "nothing passed yet");
        assert_eq!(a.passed(7, now), AfterPass::Nothing);
        assert_eq!(a.take(), Some((7, now)));
        assert_eq!(a.take(), None);
        assert_eq!(a.give_up(&slot), OnGiveUp::Nothing, "it holds the lock");

        // Gave up while claimed: the releasing side frees what it passed.
        assert!(Arc::ptr_eq(&slot.claim_passer(8).unwrap(), &b));
        assert_eq!(b.give_up(&slot), OnGiveUp::Nothing);
        assert_eq!(b.passed(8, now), AfterPass::GiveBack);

        // A pass that fell through puts the waiter back first in line; unsure, it frees
        // what it may hold should it give up.
        assert!(Arc::ptr_eq(&slot.claim_passer(8).unwrap(), &c));
        c.not_passed(&slot, true);
        assert!(Arc::ptr_eq(&slot.claim_passer(8).unwrap(), &c));
        assert_eq!(c.passed(9, now), AfterPass::Nothing);
        assert_eq!(c.give_up(&slot), OnGiveUp::GiveBack, "passed, never taken");
        assert!(slot.claim_passer(8).is_none(), "nobody left in line");

        // Took the lock by its own attempt: a pass in flight needs nothing more.
        let d = slot.join_passable("d".into(), lease);
        assert!(Arc::ptr_eq(&slot.claim_passer(8).unwrap(), &d));
        d.done();
        assert_eq!(d.passed(10, now), AfterPass::Nothing);
        assert_eq!(d.give_up(&slot), OnGiveUp::Nothing);
    }

    #[test]
    fn passes_in_a_row_are_bounded() {
        let slot = Slot::default();
        let lease = std::time::Duration::from_secs(30);
        for i in 0..4 {
            slot.join_passable(i.to_string().into(), lease);
        }
        assert!(slot.claim_passer(2).is_some());
        assert!(slot.claim_passer(2).is_some());
        assert!(slot.claim_passer(2).is_none(), "a third pass in a row");
        assert!(slot.claim_passer(2).is_some(), "the count starts again");
        assert!(slot.claim_passer(0).is_none(), "passing turned off");
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
