//! The in-memory store: the same semantics as Redis within one process, on tokio time.

use std::collections::{HashMap, VecDeque};
use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::store::{Acquire, Hold, Outcome, Renewal, Store, StoreFuture};
use crate::options::DEFAULT_FENCE_TTL;
use crate::wait::handover::{FairHandOver, Handover};
use crate::wait::line::{Line, Lines, WhenEmpty};
use crate::wait::{self, Attempt, ClientWait, Joined, Left, StoreClock};
use crate::{LockError, LockKind};

/// Locks kept in this process's memory, with the same semantics as Redis (leases, fencing
/// tokens, wake-ups, fair lines, errors) on tokio's clock, so `tokio::time::pause()`
/// applies. [`Locker::in_memory`](crate::Locker::in_memory) makes one per `Locker`; share
/// one between several `Locker`s, as tests of several replicas do, with
/// [`LockerBuilder::store`](crate::LockerBuilder::store).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use lock_core::Locker;
/// use lock_core::backend::MemoryStore;
///
/// let store = Arc::new(MemoryStore::new());
/// let a = Locker::builder().store(store.clone()).build().await?;
/// let b = Locker::builder().store(store).build().await?;
/// let _held = a.lock("job:1").await?;
/// assert!(b.try_lock("job:1").await?.is_none(), "one store, one holder");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    fence_ttl: Duration,
    lines: Lines<()>,
    /// The zero of the clock that attempts and hand-overs report.
    epoch: Instant,
}

/// One lock's state: its holder, if any, its fence counter, and its fair waiters.
#[derive(Debug)]
struct Entry {
    holder: Option<Holder>,
    fence: u64,
    fence_expires_at: Instant,
    /// Fair waiters, first come first. A place here lasts until its waiter leaves (its
    /// drop sees to that), so unlike on Redis it needs no expiry.
    line: VecDeque<Place>,
}

#[derive(Debug)]
struct Place {
    token: Box<str>,
    lease: Duration,
}

#[derive(Debug)]
struct Holder {
    token: String,
    expires_at: Instant,
}

/// A hand-over to deliver once the state's lock is dropped.
type HandedOver = (Box<str>, FairHandOver);

/// How a lock is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// By its holder, which took it as this kind: an exclusive lock goes free, a fair one
    /// to the next in line.
    Holder(LockKind),
    /// A fair waiter leaves the line, and releases the lock if it was handed over to it.
    Leave,
}

impl Entry {
    fn live_holder(&self, now: Instant) -> Option<&Holder> {
        self.holder.as_ref().filter(|h| h.expires_at > now)
    }

    /// Makes `token` the holder and draws its fencing token.
    fn take(&mut self, token: &str, lease: Duration, now: Instant, fence_ttl: Duration) -> u64 {
        let fresh = self.fence_expires_at <= now;
        if fresh {
            // A counter that expired starts again from the wall clock in microseconds,
            // as the Redis script does, so tokens never go backwards.
            self.fence = self.fence.max(wall_clock_micros());
        }
        self.fence += 1;
        // As on Redis: renewed every 64 tokens (and at least for the lease drawn).
        if fresh || self.fence.is_multiple_of(64) {
            self.fence_expires_at = now + fence_ttl;
        }
        self.fence_expires_at = self.fence_expires_at.max(now + lease);
        self.holder = Some(Holder {
            token: token.to_owned(),
            expires_at: now + lease,
        });
        self.fence
    }

    /// Gives the lock to the first in line, if anyone waits.
    fn hand_over(
        &mut self,
        now: Instant,
        fence_ttl: Duration,
        clock_us: u64,
    ) -> Option<HandedOver> {
        let place = self.line.pop_front()?;
        let fence = self.take(&place.token, place.lease, now, fence_ttl);
        let handover = FairHandOver {
            fence,
            at_us: clock_us,
        };
        Some((place.token, handover))
    }

    fn queue(&mut self, token: &str, lease: Duration) {
        if !self.line.iter().any(|p| &*p.token == token) {
            self.line.push_back(Place {
                token: token.into(),
                lease,
            });
        }
    }
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Arc<str>, Entry>,
    ops_since_sweep: usize,
}

impl State {
    /// Forgets locks that are free and whose fence counter expired, once the map has
    /// seen as many acquisitions as it has entries (amortised O(1) per acquisition).
    fn sweep(&mut self, now: Instant) {
        self.ops_since_sweep += 1;
        if self.ops_since_sweep < self.entries.len().max(1024) {
            return;
        }
        self.ops_since_sweep = 0;
        self.entries.retain(|_, e| {
            e.live_holder(now).is_some() || e.fence_expires_at > now || !e.line.is_empty()
        });
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store whose fence counters are kept 7 days after their last use.
    pub fn new() -> Self {
        Self::with_fence_ttl(DEFAULT_FENCE_TTL)
    }

    /// An empty store whose fence counters are kept `fence_ttl` after their last use.
    pub fn with_fence_ttl(fence_ttl: Duration) -> Self {
        Self {
            state: Mutex::default(),
            fence_ttl,
            lines: Lines::default(),
            epoch: Instant::now(),
        }
    }

    fn clock_us(&self, now: Instant) -> u64 {
        u64::try_from((now - self.epoch).as_micros()).unwrap_or(u64::MAX)
    }

    /// Wakes whoever a release concerns: the waiter it was handed to, or one waiter.
    fn announce(&self, key: &str, handed: Option<HandedOver>) {
        match handed {
            Some((token, handover)) => self.lines.deliver(key, &token, handover),
            None => {
                self.lines.wake_one(key);
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update below is completed before the guard drops, so a panic elsewhere
        // cannot leave a half-written entry.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One attempt at `request`; a fair caller that waits (`waits_for` not zero) queues if
    /// the lock is held.
    fn try_acquire(&self, request: &Acquire, waits_for: Duration) -> Result<Attempt, LockError> {
        let waits = !waits_for.is_zero();
        let (key, token, lease) = (request.key.shared(), &*request.token, request.lease);
        let now = Instant::now();
        let clock = StoreClock {
            sent_at: now,
            us: self.clock_us(now),
        };
        let fence_ttl = self.fence_ttl;
        let mut handed = None;
        let attempt = {
            let mut state = self.state();
            state.sweep(now);
            let entry = state.entries.entry(key.clone()).or_insert_with(|| Entry {
                holder: None,
                fence: 0,
                fence_expires_at: now,
                line: VecDeque::new(),
            });
            let holder = entry
                .live_holder(now)
                .map(|h| (h.token == token, h.expires_at));
            match (request.kind, holder) {
                // Handed over to this fair waiter before it saw the hand-over.
                (LockKind::Fair, Some((true, expires_at))) => Attempt::Acquired {
                    fence: entry.fence,
                    until: expires_at,
                },
                (LockKind::Exclusive | LockKind::Fair, Some((_, expires_at))) => {
                    let fair = request.kind == LockKind::Fair;
                    if fair && waits {
                        entry.queue(token, lease);
                    }
                    Attempt::Held {
                        ttl: Some(expires_at - now),
                        clock: fair.then_some(clock),
                    }
                }
                (LockKind::Exclusive, None) => Attempt::Acquired {
                    fence: entry.take(token, lease, now, fence_ttl),
                    until: now + lease,
                },
                (LockKind::Fair, None) => match entry.line.front() {
                    Some(first) if &*first.token != token => {
                        // Free, with someone ahead of the caller: it is theirs.
                        let first_lease = first.lease;
                        handed = entry.hand_over(now, fence_ttl, clock.us);
                        if waits {
                            entry.queue(token, lease);
                        }
                        Attempt::Held {
                            ttl: Some(first_lease),
                            clock: Some(clock),
                        }
                    }
                    first => {
                        if first.is_some() {
                            entry.line.pop_front();
                        }
                        Attempt::Acquired {
                            fence: entry.take(token, lease, now, fence_ttl),
                            until: now + lease,
                        }
                    }
                },
                (kind, _) => return Err(self.unsupported(request, kind)),
            }
        };
        if handed.is_some() {
            self.announce(key, handed);
        }
        Ok(attempt)
    }

    fn unsupported(&self, request: &Acquire, kind: LockKind) -> LockError {
        LockError::Unsupported {
            key: request.key.to_string(),
            store: self.name().to_owned(),
            kind,
        }
    }

    /// Releases `key` as `how` says, if `token` holds it (or leaves its line); says
    /// whether `token` held it. A released lock goes to the first in line (fair) or is
    /// freed, waking one waiter.
    fn release(&self, key: &str, token: &str, how: Release) -> bool {
        let now = Instant::now();
        let clock_us = self.clock_us(now);
        let handed = {
            let mut state = self.state();
            let Some(e) = state.entries.get_mut(key) else {
                return false;
            };
            if how == Release::Leave {
                e.line.retain(|p| &*p.token != token);
            }
            if e.live_holder(now).is_none_or(|h| h.token != token) {
                return false;
            }
            let handed = match how {
                Release::Holder(LockKind::Exclusive) => None,
                Release::Holder(_) | Release::Leave => e.hand_over(now, self.fence_ttl, clock_us),
            };
            if handed.is_none() {
                e.holder = None;
            }
            handed
        };
        self.announce(key, handed);
        true
    }

    fn extend(&self, key: &str, token: &str, lease: Duration) -> Option<Instant> {
        let now = Instant::now();
        let mut state = self.state();
        let holder = state
            .entries
            .get_mut(key)
            .and_then(|e| e.holder.as_mut())
            .filter(|h| h.expires_at > now && h.token == token)?;
        holder.expires_at = now + lease;
        Some(holder.expires_at)
    }

    fn holds(&self, key: &str, token: &str) -> bool {
        let now = Instant::now();
        self.state()
            .entries
            .get(key)
            .and_then(|e| e.live_holder(now))
            .is_some_and(|h| h.token == token)
    }

    /// How many fair waiters are in `key`'s line.
    #[cfg(test)]
    pub(crate) fn line_len(&self, key: &str) -> usize {
        self.state().entries.get(key).map_or(0, |e| e.line.len())
    }

    /// Forcibly forgets `key`'s holder, as if its lock were deleted behind its back.
    #[cfg(test)]
    pub(crate) fn evict(&self, key: &str) {
        if let Some(e) = self.state().entries.get_mut(key) {
            e.holder = None;
        }
    }
}

impl Store for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    fn supports(&self, kind: LockKind) -> bool {
        matches!(kind, LockKind::Exclusive | LockKind::Fair)
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        Box::pin(wait::acquire(self, request))
    }

    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        let released = self.release(hold.key.as_str(), hold.token, Release::Holder(hold.kind));
        Box::pin(ready(Ok(released)))
    }

    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        let renewed = leases
            .iter()
            .map(|r| self.extend(r.hold.key.as_str(), r.hold.token, r.lease))
            .collect();
        Box::pin(ready(Ok(renewed)))
    }

    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(ready(Ok(self.holds(hold.key.as_str(), hold.token))))
    }
}

impl ClientWait for MemoryStore {
    type Listening = ();

    fn attempt<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
    ) -> impl Future<Output = Result<Attempt, LockError>> + Send + 'a {
        ready(self.try_acquire(request, waits_for))
    }

    fn join(&self, request: &Acquire) -> Joined<()> {
        Joined {
            line: self.lines.join(request.key.shared(), |_| {}),
            already_listening: false,
        }
    }

    /// A release here wakes a waiter, which takes the lock at once: there is nothing to
    /// gain from handing it over.
    fn handover(&self, _kind: LockKind) -> Handover {
        Handover::Off
    }

    /// Releases always wake: nothing to wait for.
    fn until_listening(
        &self,
        _line: &Line<()>,
        _limit: Duration,
    ) -> impl Future<Output = ()> + Send {
        ready(())
    }

    /// The holder's expiry is exact and releases always wake.
    fn poll_interval(
        &self,
        holder_ttl: Option<Duration>,
        _line: &Line<()>,
        _failed: u32,
    ) -> Duration {
        holder_ttl.unwrap_or(Duration::from_secs(1))
    }

    fn left(&self, left: Left<'_, ()>) {
        if left.kind == LockKind::Fair && !left.held {
            self.release(left.line.key(), left.token, Release::Leave);
        }
        self.lines.leave(left.line, WhenEmpty::Remove, |_| {});
    }
}

fn wall_clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LockKey;

    const SEC: Duration = Duration::from_secs(1);

    /// One attempt by `token` at `key`, for `lease`, as `kind`, by a caller that waits
    /// `waits_for` more (a fair one queues).
    fn attempt(
        m: &MemoryStore,
        key: &str,
        token: &str,
        lease: Duration,
        kind: LockKind,
        waits_for: Duration,
    ) -> Attempt {
        let request = Acquire {
            key: LockKey::new(key).unwrap(),
            token: token.into(),
            kind,
            lease,
            deadline: Instant::now(),
        };
        m.try_acquire(&request, waits_for).unwrap()
    }

    fn exclusive(m: &MemoryStore, token: &str) -> Attempt {
        attempt(m, "k", token, SEC, LockKind::Exclusive, Duration::ZERO)
    }

    fn acquired(a: Attempt) -> u64 {
        match a {
            Attempt::Acquired { fence, .. } => fence,
            Attempt::Held { ttl, .. } => panic!("expected to acquire, held for {ttl:?}"),
        }
    }

    fn release(m: &MemoryStore, token: &str, kind: LockKind) -> bool {
        m.release("k", token, Release::Holder(kind))
    }

    #[tokio::test(start_paused = true)]
    async fn lease_expiry_frees_the_lock_and_fences_increase() {
        let m = MemoryStore::with_fence_ttl(Duration::from_secs(3600));
        let f1 = acquired(exclusive(&m, "a"));
        let Attempt::Held { ttl, .. } = exclusive(&m, "b") else {
            panic!("acquired a held lock");
        };
        assert_eq!(ttl, Some(SEC));
        tokio::time::advance(SEC).await;
        assert!(!m.holds("k", "a"));
        let f2 = acquired(exclusive(&m, "b"));
        assert!(f2 > f1);
        assert!(
            !release(&m, "a", LockKind::Exclusive),
            "a stale owner released"
        );
        assert!(
            m.extend("k", "a", Duration::from_secs(5)).is_none(),
            "a stale owner extended"
        );
        assert!(m.holds("k", "b"));
        assert!(release(&m, "b", LockKind::Exclusive));
    }

    #[tokio::test(start_paused = true)]
    async fn fence_survives_counter_expiry() {
        let m = MemoryStore::with_fence_ttl(Duration::from_secs(10));
        let f1 = acquired(exclusive(&m, "a"));
        assert!(release(&m, "a", LockKind::Exclusive));
        tokio::time::advance(Duration::from_secs(11)).await;
        let f2 = acquired(exclusive(&m, "b"));
        assert!(f2 > f1, "{f2} <= {f1}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_fair_release_hands_the_lock_to_the_first_in_line() {
        let m = MemoryStore::with_fence_ttl(Duration::from_secs(3600));
        let fair =
            |token, lease, waits_for| attempt(&m, "k", token, lease, LockKind::Fair, waits_for);
        let f1 = acquired(fair("a", SEC, SEC));
        for waiter in ["b", "c", "b"] {
            let Attempt::Held { clock, .. } = fair(waiter, SEC * 2, SEC) else {
                panic!("{waiter} jumped the line");
            };
            assert!(clock.is_some());
        }
        // One attempt, not queued: does not jump the line either.
        assert!(matches!(
            fair("d", SEC, Duration::ZERO),
            Attempt::Held { .. }
        ));
        assert!(release(&m, "a", LockKind::Fair));
        assert!(m.holds("k", "b"), "handed to the first in line");
        // b missed the hand-over: asking again finds the lock its own.
        tokio::time::advance(Duration::from_millis(500)).await;
        let Attempt::Acquired { fence, until } = fair("b", SEC * 2, SEC) else {
            panic!("the hand-over was lost");
        };
        assert!(fence > f1);
        assert_eq!(until - Instant::now(), Duration::from_millis(1500));
        // c gives up before its turn; d was never in line: the lock goes free.
        assert!(!m.release("k", "c", Release::Leave));
        assert!(release(&m, "b", LockKind::Fair));
        assert!(!m.holds("k", "c"));
        acquired(exclusive(&m, "d"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_lock_with_a_line_goes_to_its_first() {
        let m = MemoryStore::with_fence_ttl(Duration::from_secs(3600));
        let fair = |token| attempt(&m, "k", token, SEC, LockKind::Fair, SEC);
        acquired(fair("a"));
        assert!(matches!(fair("b"), Attempt::Held { .. }));
        tokio::time::advance(SEC).await; // a's lease runs out
        assert!(matches!(fair("c"), Attempt::Held { .. }));
        assert!(m.holds("k", "b"));
        // b, handed the lock, gives up on it: it goes on to c.
        assert!(m.release("k", "b", Release::Leave));
        assert!(m.holds("k", "c"));
    }
}
