//! The local wait line: the tasks of this process waiting for a lock.
//!
//! Each waiting task has a [`Waiter`]: a small record in its lock's [`Line`], through which
//! everything that can end its wait reaches it (a release's wake-up, a hand-over), and
//! which it polls for one signal, so a parked task carries a pointer and its poll timer,
//! not a wait queue node per source.
//!
//! A waiter joins before its next attempt, so a release that lands between a failed
//! attempt and the wait still wakes it. Each release wakes one waiter (the one waiting
//! longest among those not woken yet and not being handed the lock); a woken waiter that
//! loses the race to another contender simply waits again, so there is no thundering
//! herd. A wake-up that finds nobody in line is kept for the next to join.
//!
//! A hand-over reaches a waiter here too: the line applies the [hand-over state
//! machine](super::handover) to the waiter's record, and wakes it when a transition says
//! so.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use crate::LockKind;

use super::handover::{FairHandover, Handover, HandoverFailed, Leftover, Unclaimed, WakeWaiter};

/// The local waiters of every lock of one store, by the lock's key in that store. Each
/// line also carries what the store attaches to it (`L`).
#[derive(Debug)]
pub(crate) struct Lines<L> {
    lines: Mutex<HashMap<Arc<str>, Arc<Line<L>>>>,
}

impl<L> Default for Lines<L> {
    fn default() -> Self {
        Self {
            lines: Mutex::default(),
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

/// What becomes of a line whose last waiter leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WhenEmpty {
    /// It goes.
    Remove,
    /// It stays until [`Lines::remove_if_idle`]: a lock contended again soon finds it
    /// (and whatever delivers its wake-ups) still there.
    Linger,
}

impl<L: Default> Lines<L> {
    fn lines(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<Line<L>>>> {
        // Every update is one insert or remove: a poisoned map is still consistent.
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a waiter in `key`'s line. `on_edge` runs under the registry's lock, so
    /// the subscriptions it asks for keep the order of joins and leaves.
    pub(crate) fn join(&self, key: &Arc<str>, on_edge: impl FnOnce(Edge)) -> Arc<Line<L>> {
        let mut lines = self.lines();
        let (line, edge) = match lines.get(key) {
            Some(line) => (line.clone(), Edge::Unchanged),
            None => {
                let line = Arc::new(Line::new(key.clone()));
                lines.insert(key.clone(), line.clone());
                (line, Edge::Changed)
            }
        };
        line.count.fetch_add(1, Ordering::Relaxed);
        on_edge(edge);
        line
    }

    /// Counts a waiter of `line` out. The last one out removes the line, unless told to
    /// leave it lingering.
    pub(crate) fn leave(
        &self,
        line: &Arc<Line<L>>,
        when_empty: WhenEmpty,
        on_edge: impl FnOnce(Edge),
    ) {
        let mut lines = self.lines();
        if line.count.fetch_sub(1, Ordering::Relaxed) == 1 {
            if when_empty == WhenEmpty::Remove
                && lines.get(line.key()).is_some_and(|l| Arc::ptr_eq(l, line))
            {
                lines.remove(line.key());
            }
            on_edge(Edge::Changed);
        } else {
            on_edge(Edge::Unchanged);
        }
    }

    /// Removes `key`'s line if no waiter is in it; says whether it is gone.
    pub(crate) fn remove_if_idle(&self, key: &str) -> bool {
        let mut lines = self.lines();
        match lines.get(key) {
            Some(line) if line.has_waiters() => false,
            _ => {
                lines.remove(key);
                true
            }
        }
    }

    /// The line of `key`, if it has one.
    pub(crate) fn get(&self, key: &str) -> Option<Arc<Line<L>>> {
        self.lines().get(key).cloned()
    }

    /// Runs `f` on every line.
    pub(crate) fn each(&self, mut f: impl FnMut(&Line<L>)) {
        for line in self.lines().values() {
            f(line);
        }
    }

    /// Hands `key` over to its local fair waiter `token`, waking that waiter alone.
    pub(crate) fn deliver(&self, key: &str, token: &str, handover: FairHandover) {
        if let Some(line) = self.get(key) {
            line.deliver(token, handover);
        }
    }

    /// Wakes one waiter of `key`: the lock was released. Says whether `key` has a waiter
    /// (one between two waits takes the wake-up when it next waits; so does one joining a
    /// lingering line right after its failed attempt).
    pub(crate) fn wake_one(&self, key: &str) -> bool {
        let lines = self.lines();
        let Some(line) = lines.get(key) else {
            return false;
        };
        line.wake_one();
        line.has_waiters()
    }

    /// Wakes every waiter of `key`: a release that may let several in (readers after a
    /// write), or a change that concerns them all.
    pub(crate) fn wake_all(&self, key: &str) {
        if let Some(line) = self.get(key) {
            line.wake_all();
        }
    }

    /// [`Line::wake_after_write`] on `key`'s line.
    pub(crate) fn wake_after_write(&self, key: &str, next: Option<&str>) {
        if let Some(line) = self.get(key) {
            line.wake_after_write(next);
        }
    }

    /// The locks that have lines now, and whether each has waiters.
    pub(crate) fn keys(&self) -> Vec<(Arc<str>, bool)> {
        self.lines()
            .iter()
            .map(|(key, line)| (key.clone(), line.has_waiters()))
            .collect()
    }
}

/// The waiters of one lock, first come first.
#[derive(Debug)]
pub(crate) struct Line<L> {
    key: Arc<str>,
    /// What the store attaches to the line.
    pub(crate) listening: L,
    queue: Mutex<Queue>,
    /// Waiters counted in, under the registry's lock.
    count: AtomicUsize,
    /// Its fair waiters, for their hand-overs.
    fair: Mutex<FairWaiters>,
    /// Releases in a row that handed the lock to a waiter of this line.
    streak: AtomicU32,
}

#[derive(Debug, Default)]
struct Queue {
    waiters: VecDeque<Arc<Waiter>>,
    /// A release woke nobody (no waiter was in line): the next to join is woken at once.
    permit: bool,
}

/// A task waiting for a lock.
#[derive(Debug)]
pub(crate) struct Waiter {
    /// The token it asks for the lock with.
    pub(crate) token: Arc<str>,
    /// The lease it asks for, which a hand-over to it starts.
    pub(crate) lease: Duration,
    /// The kind it asks for: a release after a write wakes one writer, by its token.
    kind: LockKind,
    state: Mutex<WaiterState>,
}

#[derive(Debug)]
pub(super) struct WaiterState {
    handover: Handover,
    /// Something it waits for happened since it last looked.
    signal: bool,
    waker: Option<Waker>,
}

impl WaiterState {
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

/// The fair waiters of one lock, by token, and the hand-overs that came before their
/// waiter.
#[derive(Debug, Default)]
struct FairWaiters {
    waiting: HashMap<Arc<str>, Arc<Waiter>>,
    unclaimed: Unclaimed,
}

impl Waiter {
    fn state(&self) -> MutexGuard<'_, WaiterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a transition of the waiter's hand-over state, and wakes it if told to.
    fn transition<R>(&self, f: impl FnOnce(&mut Handover) -> (R, WakeWaiter)) -> R {
        let mut state = self.state();
        let (out, woken) = f(&mut state.handover);
        let waker = match woken {
            WakeWaiter::Yes => state.signal(),
            WakeWaiter::No => None,
        };
        drop(state);
        wake(waker);
        out
    }

    /// The fair hand-over to this waiter, if it came. Taken once.
    pub(crate) fn take_fair_handover(&self) -> Option<FairHandover> {
        self.state().handover.take_fair()
    }

    /// The local hand-over to this waiter, if it came: the fencing token, and until when
    /// the lease runs. Taken once.
    pub(crate) fn take_local_handover(&self) -> Option<(u64, Instant)> {
        self.state().handover.take_local()
    }

    /// The waiter took the lock itself: a hand-over now in flight needs nothing more.
    pub(crate) fn done(&self) {
        self.state().handover.done();
    }

    /// The releasing side handed the lock over: the owner changed, with fencing token
    /// `fence`, the lease running until `until`.
    pub(crate) fn handed_over(&self, fence: u64, until: Instant) -> Leftover {
        self.transition(|h| h.handed_over(fence, until))
    }

    /// The releasing side could not hand the lock over: the waiter tries for itself.
    pub(crate) fn handover_failed(&self, why: HandoverFailed) {
        self.transition(|h| ((), h.failed(why)));
    }

    /// Ready once something happened since the last time it was: a release woke this
    /// waiter, or a hand-over came or fell through. One that came while the waiter was
    /// not polling is kept, so none is missed.
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

    /// Waits until signalled or until `deadline`, whichever comes first (`Err` then).
    pub(crate) fn wait_until(
        &self,
        deadline: Instant,
    ) -> impl Future<Output = Result<(), tokio::time::error::Elapsed>> + '_ {
        tokio::time::timeout_at(deadline, std::future::poll_fn(|cx| self.poll_signal(cx)))
    }

    /// Wakes this waiter.
    fn wake(&self) {
        let waker = self.state().signal();
        wake(waker);
    }
}

impl<L: Default> Line<L> {
    fn new(key: Arc<str>) -> Self {
        Line {
            key,
            listening: L::default(),
            queue: Mutex::default(),
            count: AtomicUsize::new(0),
            fair: Mutex::default(),
            streak: AtomicU32::new(0),
        }
    }
}

impl<L> Line<L> {
    /// The lock's key in its store.
    pub(crate) fn key(&self) -> &Arc<str> {
        &self.key
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts a waiter (`token`, asking for `lease`) at the end of the line, handed the lock
    /// as `handover` says. A wake-up left by a release that found nobody in line wakes it
    /// at once.
    pub(crate) fn join_line(
        &self,
        token: Arc<str>,
        lease: Duration,
        kind: LockKind,
        handover: Handover,
    ) -> Arc<Waiter> {
        let mut queue = self.queue();
        let waiter = Arc::new(Waiter {
            token,
            lease,
            kind,
            state: Mutex::new(WaiterState {
                handover,
                signal: std::mem::take(&mut queue.permit),
                waker: None,
            }),
        });
        queue.waiters.push_back(waiter.clone());
        waiter
    }

    /// Takes `waiter` out of the line, without the lock (it gave up, or its wait ran
    /// out), or after it took it: [`Leftover`] says whether it must release a lock handed
    /// over to it.
    pub(crate) fn leave_line(&self, waiter: &Arc<Waiter>) -> Leftover {
        self.queue().waiters.retain(|w| !Arc::ptr_eq(w, waiter));
        waiter.state().handover.give_up()
    }

    /// Wakes the longest-waiting waiter not yet woken and not being handed the lock;
    /// with nobody in line, leaves the wake-up for the next to join.
    fn wake_one(&self) {
        let mut queue = self.queue();
        if queue.waiters.is_empty() {
            queue.permit = true;
            return;
        }
        for waiter in &queue.waiters {
            let mut state = waiter.state();
            if !state.signal && !state.handover.is_underway() {
                let waker = state.signal();
                drop(state);
                drop(queue);
                wake(waker);
                return;
            }
        }
    }

    /// Wakes every waiter in line.
    pub(crate) fn wake_all(&self) {
        for waiter in &self.queue().waiters {
            waiter.wake();
        }
    }

    /// Wakes every waiter in line but the writers (a write, or the last read, was
    /// released: every reader may go in), and the writer `next`, if it waits here.
    pub(crate) fn wake_after_write(&self, next: Option<&str>) {
        for waiter in &self.queue().waiters {
            if waiter.kind != LockKind::Write || next == Some(&*waiter.token) {
                waiter.wake();
            }
        }
    }

    /// Whether tasks of this process wait for the lock.
    pub(crate) fn has_waiters(&self) -> bool {
        self.waiting() > 0
    }

    /// How many tasks of this process wait for the lock.
    pub(crate) fn waiting(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Claims the longest-waiting waiter for a local hand-over, unless `max` were made in
    /// a row already: then the lock is to be freed for every contender, and the count
    /// starts again.
    pub(crate) fn claim_for_handover(&self, max: u32) -> Option<Arc<Waiter>> {
        if self.streak.load(Ordering::Relaxed) >= max {
            self.streak.store(0, Ordering::Relaxed);
            return None;
        }
        for waiter in &self.queue().waiters {
            if waiter.state().handover.claim() {
                self.streak.fetch_add(1, Ordering::Relaxed);
                return Some(waiter.clone());
            }
        }
        self.streak.store(0, Ordering::Relaxed);
        None
    }

    fn fair(&self) -> MutexGuard<'_, FairWaiters> {
        self.fair.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the fair `waiter` for its hand-over (which may already be here).
    pub(crate) fn expect_fair_handover(&self, waiter: &Arc<Waiter>) {
        let mut fair = self.fair();
        if let Some(handover) = fair.unclaimed.take(&waiter.token) {
            waiter.transition(|h| ((), h.fair(handover)));
        }
        fair.waiting.insert(waiter.token.clone(), waiter.clone());
    }

    /// Unregisters the fair waiter `token`.
    pub(crate) fn forget_fair_handover(&self, token: &str) {
        self.fair().waiting.remove(token);
    }

    /// Hands the lock over to the fair waiter `token`, or keeps the hand-over for it.
    fn deliver(&self, token: &str, handover: FairHandover) {
        let mut fair = self.fair();
        match fair.waiting.get(token) {
            Some(waiter) => waiter.transition(|h| ((), h.fair(handover))),
            None => fair.unclaimed.keep(token, handover),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Whether `waiter` has a signal, consuming it.
    pub(in crate::backend::wait) fn signalled(waiter: &Waiter) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        waiter.poll_signal(&mut cx).is_ready()
    }

    const LEASE: Duration = Duration::from_secs(30);

    #[test]
    fn first_join_and_last_leave_are_edges() {
        let lines = Lines::<()>::default();
        let key: Arc<str> = "lock:{a}".into();
        let mut edges = Vec::new();
        let a = lines.join(&key, |e| edges.push(e));
        let b = lines.join(&key, |e| edges.push(e));
        assert!(Arc::ptr_eq(&a, &b));
        lines.leave(&a, WhenEmpty::Remove, |e| edges.push(e));
        lines.leave(&b, WhenEmpty::Remove, |e| edges.push(e));
        assert_eq!(
            edges,
            [
                Edge::Changed,
                Edge::Unchanged,
                Edge::Unchanged,
                Edge::Changed
            ]
        );
        assert!(lines.keys().is_empty());
    }

    #[test]
    fn a_lingering_line_stays_until_removed_while_idle() {
        let lines = Lines::<()>::default();
        let key: Arc<str> = "k".into();
        let a = lines.join(&key, |_| {});
        lines.leave(&a, WhenEmpty::Linger, |e| assert_eq!(e, Edge::Changed));
        assert_eq!(lines.keys(), [(key.clone(), false)]);
        // A waiter coming back finds the same line: no new subscription.
        let b = lines.join(&key, |e| assert_eq!(e, Edge::Unchanged));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!lines.remove_if_idle("k"), "removed a line with a waiter");
        lines.leave(&b, WhenEmpty::Linger, |_| {});
        assert!(lines.remove_if_idle("k"));
        assert!(lines.keys().is_empty());
    }

    #[test]
    fn a_release_wakes_the_longest_waiting_waiter_not_woken_yet() {
        let lines = Lines::<()>::default();
        let key: Arc<str> = "k".into();
        let line = lines.join(&key, |_| {});
        let waiting = || Handover::Waiting { may_hold: false };
        let [a, b, c] = ["a", "b", "c"]
            .map(|t| line.join_line(t.into(), LEASE, LockKind::Exclusive, waiting()));
        assert!(lines.wake_one("k"), "the lock has waiters");
        assert!(signalled(&a));
        assert!(!signalled(&b) && !signalled(&c), "one release, one waiter");
        // Woken but not looking yet (between two waits): the next release goes on.
        assert!(lines.wake_one("k"));
        assert!(lines.wake_one("k"));
        assert!(signalled(&a));
        assert!(signalled(&b));
        assert!(!signalled(&c));
        // One being handed the lock is not woken.
        assert!(Arc::ptr_eq(&line.claim_for_handover(8).unwrap(), &a));
        lines.wake_one("k");
        assert!(!signalled(&a));
        assert!(signalled(&b));
        // A wake-up reaches a parked waiter through its task's waker.
        lines.wake_one("k");
        let woke = Arc::new(std::sync::atomic::AtomicBool::new(false));
        struct Flag(Arc<std::sync::atomic::AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let waker = Waker::from(Arc::new(Flag(woke.clone())));
        assert!(c.poll_signal(&mut Context::from_waker(&waker)).is_pending());
        lines.wake_one("k");
        assert!(woke.load(Ordering::SeqCst), "the parked task was woken");
        assert!(signalled(&b) && signalled(&c));
        // Wake-ups missed: everyone is woken.
        lines.each(Line::wake_all);
        assert!(signalled(&b) && signalled(&c));
    }

    #[test]
    fn a_wake_up_with_nobody_in_line_goes_to_the_next_to_join() {
        let lines = Lines::<()>::default();
        let key: Arc<str> = "k".into();
        let line = lines.join(&key, |_| {});
        let waiting = || Handover::Waiting { may_hold: false };
        let a = line.join_line("a".into(), LEASE, LockKind::Exclusive, waiting());
        assert_eq!(line.leave_line(&a), Leftover::Nothing);
        lines.leave(&line, WhenEmpty::Linger, |_| {});
        assert!(!lines.wake_one("k"), "no waiter left");
        let line = lines.join(&key, |_| {});
        let b = line.join_line("b".into(), LEASE, LockKind::Exclusive, waiting());
        assert!(signalled(&b), "the wake-up was kept for it");
        let c = line.join_line("c".into(), LEASE, LockKind::Exclusive, waiting());
        assert!(!signalled(&c), "kept once");
    }
}
