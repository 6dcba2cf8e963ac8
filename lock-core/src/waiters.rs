//! Per-lock registry of the local tasks waiting for a lock to be released.
//!
//! Each waiting task has a [`Waiter`]: a small record in its lock's line, through which
//! everything that can end its wait reaches it (a release's wake-up, a fair hand-over, a
//! local pass) and which it polls for one signal, so a parked task carries a pointer and
//! its poll timer, not a wait queue node per source.
//!
//! A waiter joins before its next attempt, so a release that lands between a failed
//! attempt and the wait still wakes it. Each release wakes one waiter (the one waiting
//! longest among those not woken yet and not being passed the lock); a woken waiter that
//! loses the race to another contender simply waits again, so there is no thundering
//! herd. A fair lock handed over to a waiter by name wakes
//! that waiter alone.
//!
//! A plain lock released while a task of the same `Locker` waits for it can be passed to
//! that task directly: the releasing side claims the longest-waiting local waiter,
//! changes the owner in one command, and hands it the result.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The waiters of one lock.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The lock's key.
    key: Arc<str>,
    /// Its local waiters, first come first, and a wake-up left for the next to join.
    line: Mutex<Line>,
    /// Whether release messages for this lock are being delivered (pub/sub subscribed).
    ready: AtomicBool,
    ready_changed: Notify,
    /// Local waiters, guarded by the registry's mutex.
    count: std::sync::atomic::AtomicUsize,
    /// Fair locks handed over to waiters by name.
    grants: Mutex<Grants>,
    /// Releases in a row that passed the lock to a local waiter.
    streak: AtomicU32,
}

#[derive(Debug, Default)]
struct Line {
    waiters: VecDeque<Arc<Waiter>>,
    /// A release woke nobody (no waiter was in line): the next to join is woken at once.
    permit: bool,
}

/// A task waiting for a lock. A release by the same `Locker` can pass a plain lock to
/// it: the releasing side claims it, changes the lock's owner to [`token`](Self::token)
/// in one command, then reports the outcome here; the waiter either takes the pass, or
/// has meanwhile taken the lock itself, or has given up (then whoever learns last that
/// the lock is the waiter's gives it back).
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) token: Arc<str>,
    /// The waiter's lease, which a pass starts.
    pub(crate) lease: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    pass: Pass,
    /// Something it waits for happened since it last looked.
    signal: bool,
    waker: Option<Waker>,
}

/// How the lock comes to a waiter other than by its own attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// It cannot be passed the lock: a fair waiter (with no hand-over yet), or local
    /// passes are off.
    Off,
    /// A fair lock handed over to it, not taken up yet.
    Granted(Grant),
    /// In line for a pass. `unsure`: a pass to it failed in a way that leaves open
    /// whether the owner changed, so if it gives up it gives back by its token (which
    /// changes nothing if the lock is not its own).
    Waiting { unsure: bool },
    /// Claimed by a release that is changing the owner.
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

impl State {
    /// Marks the signal and takes the waker to wake, once the state is unlocked.
    fn signal(&mut self) -> Option<Waker> {
        self.signal = true;
        self.waker.take()
    }
}

fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

impl Waiter {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ready once something happened since the last time it was: a release woke this
    /// waiter, a hand-over or a pass came, or a claimed pass fell through. One that
    /// came while the waiter was not polling is kept, so none is missed.
    pub(crate) fn poll_signal(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.state();
        if std::mem::take(&mut state.signal) {
            return Poll::Ready(());
        }
        if !state
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            state.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Wakes this waiter.
    fn wake(&self) {
        let waker = self.state().signal();
        wake(waker);
    }

    /// A fair lock was handed over to this waiter.
    fn granted(&self, grant: Grant) {
        let mut state = self.state();
        state.pass = Pass::Granted(grant);
        let waker = state.signal();
        drop(state);
        wake(waker);
    }

    /// The hand-over of a fair lock to this waiter, if it came. Taken once.
    pub(crate) fn take_grant(&self) -> Option<Grant> {
        let mut state = self.state();
        match state.pass {
            Pass::Granted(grant) => {
                state.pass = Pass::Off;
                Some(grant)
            }
            _ => None,
        }
    }

    /// The pass, if it came: the fencing token, and when the change was sent (the
    /// earliest the lease can have started). Taken once.
    pub(crate) fn take_pass(&self) -> Option<(u64, Instant)> {
        let mut state = self.state();
        match state.pass {
            Pass::Passed { fence, sent_at } => {
                state.pass = Pass::Done;
                Some((fence, sent_at))
            }
            _ => None,
        }
    }

    /// The waiter took the lock itself: a pass now in flight needs nothing more.
    pub(crate) fn done(&self) {
        let mut state = self.state();
        if !matches!(state.pass, Pass::Off | Pass::Granted(_)) {
            state.pass = Pass::Done;
        }
    }

    /// The releasing side passed the lock: owner changed, fencing token `fence`.
    pub(crate) fn passed(&self, fence: u64, sent_at: Instant) -> AfterPass {
        let mut state = self.state();
        match state.pass {
            Pass::Claimed => {
                state.pass = Pass::Passed { fence, sent_at };
                let waker = state.signal();
                drop(state);
                wake(waker);
                AfterPass::Nothing
            }
            Pass::Abandoned => {
                state.pass = Pass::Done;
                AfterPass::GiveBack
            }
            // Done: it took the lock under its own token meanwhile. The others cannot
            // happen: only the claimant reports.
            _ => AfterPass::Nothing,
        }
    }

    /// The releasing side could not pass the lock (it no longer held it, or, `unsure`,
    /// the command failed without an answer): the waiter is in line again, in its place,
    /// and tries for itself.
    pub(crate) fn not_passed(&self, unsure: bool) {
        let mut state = self.state();
        if state.pass == Pass::Claimed {
            state.pass = Pass::Waiting { unsure };
            let waker = state.signal();
            drop(state);
            wake(waker);
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

/// Hand-overs of one lock: to the local fair waiters, and the latest few that found no
/// local waiter by that name (yet: its message can overtake the reply to the attempt that
/// put it in line; or never: it went to another process).
#[derive(Debug, Default)]
struct Grants {
    waiting: HashMap<Arc<str>, Arc<Waiter>>,
    unclaimed: VecDeque<(Box<str>, Grant)>,
}

/// How many unclaimed hand-overs a lock keeps.
const UNCLAIMED: usize = 16;

impl Slot {
    fn new(key: Arc<str>) -> Self {
        Slot {
            key,
            line: Mutex::default(),
            ready: AtomicBool::new(false),
            ready_changed: Notify::new(),
            count: std::sync::atomic::AtomicUsize::new(0),
            grants: Mutex::default(),
            streak: AtomicU32::new(0),
        }
    }

    /// The lock's key.
    pub(crate) fn key(&self) -> &Arc<str> {
        &self.key
    }

    fn line(&self) -> MutexGuard<'_, Line> {
        self.line.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts a waiter (`token`, asking for `lease`) in line: one that a local release can
    /// be `passable` to, or one only woken. A wake-up left by a release that found
    /// nobody in line wakes it at once.
    pub(crate) fn join_line(
        &self,
        token: Arc<str>,
        lease: Duration,
        passable: bool,
    ) -> Arc<Waiter> {
        let mut line = self.line();
        let waiter = Arc::new(Waiter {
            token,
            lease,
            state: Mutex::new(State {
                pass: if passable {
                    Pass::Waiting { unsure: false }
                } else {
                    Pass::Off
                },
                signal: std::mem::take(&mut line.permit),
                waker: None,
            }),
        });
        line.waiters.push_back(waiter.clone());
        waiter
    }

    /// Takes `waiter` out of the line, without the lock: [`OnGiveUp`] says whether it
    /// must give back a lock passed to it.
    pub(crate) fn leave_line(&self, waiter: &Arc<Waiter>) -> OnGiveUp {
        let mut line = self.line();
        line.waiters.retain(|w| !Arc::ptr_eq(w, waiter));
        let mut state = waiter.state();
        match state.pass {
            Pass::Waiting { unsure } => {
                state.pass = Pass::Done;
                if unsure {
                    OnGiveUp::GiveBack
                } else {
                    OnGiveUp::Nothing
                }
            }
            Pass::Claimed => {
                state.pass = Pass::Abandoned;
                OnGiveUp::Nothing
            }
            Pass::Passed { .. } => {
                state.pass = Pass::Done;
                OnGiveUp::GiveBack
            }
            Pass::Off | Pass::Granted(_) | Pass::Done | Pass::Abandoned => OnGiveUp::Nothing,
        }
    }

    /// Wakes the longest-waiting waiter not yet woken and not being passed the lock;
    /// with nobody in line, leaves the wake-up for the next to join.
    fn wake_one(&self) {
        let mut line = self.line();
        if line.waiters.is_empty() {
            line.permit = true;
            return;
        }
        for waiter in &line.waiters {
            let mut state = waiter.state();
            if !state.signal && !matches!(state.pass, Pass::Claimed | Pass::Passed { .. }) {
                let waker = state.signal();
                drop(state);
                drop(line);
                wake(waker);
                return;
            }
        }
    }

    /// Wakes every waiter in line: release messages may have been missed.
    fn wake_all(&self) {
        let line = self.line();
        for waiter in &line.waiters {
            waiter.wake();
        }
    }

    /// Claims the longest-waiting local waiter for a pass, unless `max` passes in a row
    /// were made already: then the lock is to be freed for every contender, and the
    /// count starts again.
    pub(crate) fn claim_passer(&self, max: u32) -> Option<Arc<Waiter>> {
        if self.streak.load(Ordering::Relaxed) >= max {
            self.streak.store(0, Ordering::Relaxed);
            return None;
        }
        let line = self.line();
        for waiter in &line.waiters {
            let mut state = waiter.state();
            if matches!(state.pass, Pass::Waiting { .. }) {
                state.pass = Pass::Claimed;
                drop(state);
                self.streak.fetch_add(1, Ordering::Relaxed);
                return Some(waiter.clone());
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

    /// Registers the fair `waiter` for its hand-over (which may already be here).
    pub(crate) fn expect_grant(&self, waiter: &Arc<Waiter>) {
        let mut grants = self.grants();
        let token = &waiter.token;
        if let Some(i) = grants.unclaimed.iter().position(|(t, _)| **t == **token)
            && let Some((_, grant)) = grants.unclaimed.remove(i)
        {
            waiter.granted(grant);
        }
        grants.waiting.insert(token.clone(), waiter.clone());
    }

    /// Unregisters the fair waiter `token`.
    pub(crate) fn forget_grant(&self, token: &str) {
        self.grants().waiting.remove(token);
    }

    fn deliver(&self, token: &str, grant: Grant) {
        let mut grants = self.grants();
        match grants.waiting.get(token) {
            Some(waiter) => waiter.granted(grant),
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
                let slot = Arc::new(Slot::new(key.clone()));
                slots.insert(key.clone(), slot.clone());
                (slot, Edge::Changed)
            }
        };
        slot.count.fetch_add(1, Ordering::Relaxed);
        on_edge(edge);
        slot
    }

    /// Unregisters a waiter of `slot`'s lock. The last one out removes the slot, unless
    /// it is to `linger`: then the slot stays (and keeps receiving release messages)
    /// until [`remove_if_idle`](Self::remove_if_idle).
    pub(crate) fn leave(&self, slot: &Arc<Slot>, linger: bool, on_edge: impl FnOnce(Edge)) {
        let mut slots = self.slots();
        if slot.count.fetch_sub(1, Ordering::Relaxed) == 1 {
            if !linger && slots.get(slot.key()).is_some_and(|s| Arc::ptr_eq(s, slot)) {
                slots.remove(slot.key());
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
        slot.wake_one();
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
            slot.wake_all();
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
        waiters.leave(&a, false, |e| edges.push(e));
        waiters.leave(&b, false, |e| edges.push(e));
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
        waiters.leave(&a, true, |e| assert_eq!(e, Edge::Changed));
        assert_eq!(waiters.keys(), [(key.clone(), false)]);
        // A waiter coming back finds the same slot: no new subscription.
        let b = waiters.join(&key, |e| assert_eq!(e, Edge::Unchanged));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!waiters.remove_if_idle("k"), "removed a slot with a waiter");
        waiters.leave(&b, true, |_| {});
        assert!(waiters.remove_if_idle("k"));
        assert!(waiters.keys().is_empty());
    }

    /// Whether `waiter` has a signal, consuming it.
    fn signalled(waiter: &Waiter) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        waiter.poll_signal(&mut cx).is_ready()
    }

    #[test]
    fn a_hand_over_reaches_its_waiter_even_before_it_registers() {
        let waiters = Waiters::default();
        let key: Arc<str> = "k".into();
        let slot = waiters.join(&key, |_| {});
        let lease = Duration::from_secs(30);
        let fair = |token: &str| {
            let waiter = slot.join_line(token.into(), lease, false);
            slot.expect_grant(&waiter);
            waiter
        };
        let grant = |fence| Grant { fence, at_us: 7 };
        let a = fair("a");
        waiters.deliver("k", "a", grant(1));
        assert!(signalled(&a), "a hand-over wakes its waiter");
        assert_eq!(a.take_grant(), Some(grant(1)));
        assert_eq!(a.take_grant(), None);
        // Delivered before "b" registered: kept for it, among the latest few.
        waiters.deliver("k", "b", grant(2));
        for fence in 3..3 + UNCLAIMED as u64 - 1 {
            waiters.deliver("k", "elsewhere", grant(fence));
        }
        let b = fair("b");
        assert!(signalled(&b));
        assert_eq!(b.take_grant(), Some(grant(2)));
        // Older than the latest few: gone.
        waiters.deliver("k", "c", grant(100));
        for fence in 0..UNCLAIMED as u64 {
            waiters.deliver("k", "elsewhere", grant(fence));
        }
        let c = fair("c");
        assert!(!signalled(&c));
        assert_eq!(c.take_grant(), None);
    }

    #[test]
    fn a_pass_goes_to_the_longest_waiting_and_whoever_learns_last_frees_an_orphan() {
        let slot = Slot::new("k".into());
        let lease = Duration::from_secs(30);
        let [a, b, c] = ["a", "b", "c"].map(|t| slot.join_line(t.into(), lease, true));
        let now = Instant::now();

        // Claimed first come first; passed and taken up once.
        let claimed = slot.claim_passer(8).unwrap();
        assert!(Arc::ptr_eq(&claimed, &a));
        assert_eq!(a.take_pass(), None, "nothing passed yet");
        assert_eq!(a.passed(7, now), AfterPass::Nothing);
        assert!(signalled(&a), "a pass wakes its waiter");
        assert_eq!(a.take_pass(), Some((7, now)));
        assert_eq!(a.take_pass(), None);
        assert_eq!(slot.leave_line(&a), OnGiveUp::Nothing, "it holds the lock");

        // Gave up while claimed: the releasing side frees what it passed.
        assert!(Arc::ptr_eq(&slot.claim_passer(8).unwrap(), &b));
        assert_eq!(slot.leave_line(&b), OnGiveUp::Nothing);
        assert_eq!(b.passed(8, now), AfterPass::GiveBack);

        // A pass that fell through leaves the waiter first in line, woken to try for
        // itself; unsure, it frees what it may hold should it give up.
        assert!(Arc::ptr_eq(&slot.claim_passer(8).unwrap(), &c));
        c.not_passed(true);
        assert!(signalled(&c));
        assert!(Arc::ptr_eq(&slot.claim_passer(8).unwrap(), &c));
        assert_eq!(c.passed(9, now), AfterPass::Nothing);
        assert_eq!(
            slot.leave_line(&c),
            OnGiveUp::GiveBack,
            "passed, never taken"
        );
        assert!(slot.claim_passer(8).is_none(), "nobody left in line");

        // Took the lock by its own attempt: a pass in flight needs nothing more.
        let d = slot.join_line("d".into(), lease, true);
        assert!(Arc::ptr_eq(&slot.claim_passer(8).unwrap(), &d));
        d.done();
        assert_eq!(d.passed(10, now), AfterPass::Nothing);
        assert_eq!(slot.leave_line(&d), OnGiveUp::Nothing);

        // Only passable waiters are passed the lock.
        let e = slot.join_line("e".into(), lease, false);
        assert!(slot.claim_passer(8).is_none(), "passed to a fair waiter");
        assert_eq!(slot.leave_line(&e), OnGiveUp::Nothing);
    }

    #[test]
    fn passes_in_a_row_are_bounded() {
        let slot = Slot::new("k".into());
        let lease = Duration::from_secs(30);
        for i in 0..4 {
            slot.join_line(i.to_string().into(), lease, true);
        }
        assert!(slot.claim_passer(2).is_some());
        assert!(slot.claim_passer(2).is_some());
        assert!(slot.claim_passer(2).is_none(), "a third pass in a row");
        assert!(slot.claim_passer(2).is_some(), "the count starts again");
        assert!(slot.claim_passer(0).is_none(), "passing turned off");
    }

    #[test]
    fn a_release_wakes_the_longest_waiting_waiter_not_woken_yet() {
        let waiters = Waiters::default();
        let key: Arc<str> = "k".into();
        let slot = waiters.join(&key, |_| {});
        let lease = Duration::from_secs(30);
        let [a, b, c] = ["a", "b", "c"].map(|t| slot.join_line(t.into(), lease, true));
        assert!(waiters.wake_one("k"), "the lock has waiters");
        assert!(signalled(&a));
        assert!(!signalled(&b) && !signalled(&c), "one release, one waiter");
        // Woken but not looking yet (between two waits): the next release goes on.
        assert!(waiters.wake_one("k"));
        assert!(waiters.wake_one("k"));
        assert!(signalled(&a));
        assert!(signalled(&b));
        assert!(!signalled(&c));
        // One being passed the lock is not woken.
        assert!(Arc::ptr_eq(&slot.claim_passer(8).unwrap(), &a));
        waiters.wake_one("k");
        assert!(!signalled(&a));
        assert!(signalled(&b));
        // A wake-up reaches a parked waiter through its task's waker.
        waiters.wake_one("k");
        let woke = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let waker = Waker::from(Arc::new(Flag(woke.clone())));
        assert!(c.poll_signal(&mut Context::from_waker(&waker)).is_pending());
        waiters.wake_one("k");
        assert!(woke.load(Ordering::SeqCst), "the parked task was woken");
        assert!(signalled(&b) && signalled(&c));
        // Lost connection: everyone is woken.
        waiters.wake_all_unready();
        assert!(signalled(&b) && signalled(&c));
        assert!(!slot.is_ready());
    }

    #[test]
    fn a_wake_up_with_nobody_in_line_goes_to_the_next_to_join() {
        let waiters = Waiters::default();
        let key: Arc<str> = "k".into();
        let slot = waiters.join(&key, |_| {});
        let lease = Duration::from_secs(30);
        let a = slot.join_line("a".into(), lease, true);
        assert_eq!(slot.leave_line(&a), OnGiveUp::Nothing);
        waiters.leave(&slot, true, |_| {});
        assert!(!waiters.wake_one("k"), "no waiter left");
        let slot = waiters.join(&key, |_| {});
        let b = slot.join_line("b".into(), lease, true);
        assert!(signalled(&b), "the wake-up was kept for it");
        let c = slot.join_line("c".into(), lease, true);
        assert!(!signalled(&c), "kept once");
    }
}
