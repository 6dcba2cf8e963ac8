//! The in-memory store: the same semantics as Redis within one process, on tokio time.
//!
//! [`MemoryStore`] and what it does with a lock are here; the rest is split by concern:
//!
//! - `admission.rs`: the one rule that says whether a caller goes in, for every kind;
//! - `state.rs`: what is kept of each lock (its holders, fair line, waiting writers and
//!   stored count), and how it changes;
//! - `fence.rs`: the fence counter each holder draws its fencing token from;
//! - `wake.rs`: whom a change wakes;
//! - `session.rs`: how holds end (with a lease, or with a session), and the session
//!   handles.

mod admission;
mod fence;
#[cfg(any(feature = "redis", test))]
mod master;
mod session;
mod state;
mod wake;

use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;

use self::session::{Ends, Terms};
use self::state::{Holder, State};
use self::wake::Wake;
use super::release::Release;
use super::store::{
    Acquire, Acquired, Expiry, Hold, HolderChanges, Outcome, Renewal, Store, StoreFuture,
};
use crate::backend::wait::handover::Handover;
use crate::backend::wait::line::{Line, Lines, WhenEmpty};
use crate::backend::wait::{self, Attempt, ClientWait, Joined, Left, StoreClock};
use crate::options::DEFAULT_FENCE_TTL;
use crate::{HolderInfo, LockError, LockInfo, LockKey, LockKind};

/// How many changes of holders a follower may fall behind by before it is told that it
/// missed some (and inspects the lock again, as for any change).
const HOLDER_NEWS: usize = 64;

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
///
/// Its holds are leases, as on Redis. [`session`](Self::session) gives another handle on
/// the same locks whose holds last as long as a session instead, as a session store's
/// (ZooKeeper, a database) do, and [`end_session`](Self::end_session) ends it;
/// [`leased_session`](Self::leased_session) gives one whose session also ends when its
/// runtime stops running for a lease, as a paused process's does: for testing what code
/// on such a store sees.
#[derive(Debug)]
pub struct MemoryStore {
    locks: Arc<Locks>,
    /// How this handle's holds end.
    term: Terms,
}

/// The locks, shared by a store and its session handles.
#[derive(Debug)]
struct Locks {
    state: Mutex<State>,
    fence_ttl: Duration,
    lines: Lines<()>,
    /// Each lock whose holders changed (a hold taken or given back), for the followers
    /// of an election ([`Store::watch_holders`]).
    holders_changed: broadcast::Sender<Arc<str>>,
    /// The zero of the clock that attempts and hand-overs report.
    clock_zero: Instant,
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
        let locks = Locks {
            state: Mutex::default(),
            fence_ttl,
            lines: Lines::default(),
            holders_changed: broadcast::Sender::new(HOLDER_NEWS),
            clock_zero: Instant::now(),
        };
        Self {
            locks: Arc::new(locks),
            term: Terms::Leases,
        }
    }

    fn clock_us(&self, now: Instant) -> u64 {
        u64::try_from((now - self.locks.clock_zero).as_micros()).unwrap_or(u64::MAX)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update below is completed before the guard drops, so a panic elsewhere
        // cannot leave a half-written entry.
        self.locks.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One attempt at `request`, as the admission rule decides; a caller that waits
    /// (`waits_for` not zero) and does not go in queues (a fair one in line, a writer
    /// among the waiting writers).
    fn try_acquire(&self, request: &Acquire, waits_for: Duration) -> Result<Attempt, LockError> {
        let (key, token) = (request.key.shared(), &*request.token);
        let term = self.term(request.lease);
        let now = Instant::now();
        let clock = StoreClock {
            sent_at: now,
            us: self.clock_us(now),
        };
        let fence_ttl = self.locks.fence_ttl;
        let fair = request.kind == LockKind::Fair;
        let mut wake = Wake::Nobody;
        let attempt = {
            let mut state = self.state();
            state.sweep(now);
            let entry = state.entry(key, now);
            if let LockKind::Semaphore { permits } = request.kind {
                let count = *entry.permits.get_or_insert(permits);
                if count != permits {
                    return Err(LockError::miscounted(&request.key, count, permits));
                }
            }
            let handed_over = if fair { entry.holder(token, now) } else { None };
            if let Some(own) = handed_over {
                // Handed over to this waiter before it saw the hand-over.
                own.acquired(now)
            } else if admission::admits(entry, request) {
                entry.stop_waiting(request);
                let taken = entry
                    .take(
                        token,
                        request.holder_id.as_ref(),
                        request.kind,
                        &term,
                        now,
                        fence_ttl,
                    )
                    .acquired(now);
                self.tell_holders_changed(key);
                taken
            } else {
                if fair && entry.holders.is_empty() {
                    // Free, with someone ahead of the caller: it is theirs.
                    if let Some(handed) = entry.hand_over(now, fence_ttl, clock.us) {
                        wake = Wake::HandedOver(handed);
                    }
                }
                if !waits_for.is_zero() {
                    entry.wait(request, &term);
                }
                Attempt::Held {
                    ttl: entry.longest_lease(now),
                    clock: fair.then_some(clock),
                }
            }
        };
        self.announce(key, wake);
        Ok(attempt)
    }

    /// Releases `key` as `how` says, if `token` holds it (or leaves its line); says
    /// whether `token` held it, and wakes whom the release concerns.
    fn release(&self, key: &str, token: &str, how: Release) -> bool {
        let now = Instant::now();
        let clock_us = self.clock_us(now);
        let wake = {
            let mut state = self.state();
            let Some(e) = state.entries.get_mut(key) else {
                return false;
            };
            if how == Release::Leave {
                e.line.retain(|p| &*p.token != token);
            }
            e.prune(now);
            let Some(at) = e.holders.iter().position(|h| h.token == token) else {
                return false;
            };
            let released = e.holders.swap_remove(at);
            Wake::after_release(e, how, released.kind, now, self.locks.fence_ttl, clock_us)
        };
        self.tell_holders_changed(key);
        self.announce(key, wake);
        true
    }

    /// Frees `key` whoever holds it, waking every waiter; says whether anyone did.
    fn force_unlock(&self, key: &str) -> bool {
        let now = Instant::now();
        {
            let mut state = self.state();
            let Some(e) = state.entries.get_mut(key) else {
                return false;
            };
            e.prune(now);
            if e.holders.is_empty() {
                return false;
            }
            for holder in e.holders.drain(..) {
                if let Ends::WithSession { ended, .. } = holder.ends {
                    ended.cancel();
                }
            }
        }
        self.tell_holders_changed(key);
        self.announce(key, Wake::All);
        true
    }

    /// Tells the followers watching `key` that its holders changed (if any watch).
    fn tell_holders_changed(&self, key: &str) {
        if self.locks.holders_changed.receiver_count() > 0 {
            let _ = self.locks.holders_changed.send(key.into());
        }
    }

    /// A stream that yields each time `key`'s holders change (or when news of changes
    /// was lost, too many coming at once).
    fn holder_changes(&self, key: &LockKey) -> HolderChanges {
        let told = self.locks.holders_changed.subscribe();
        let key = key.shared().clone();
        let changes = futures_util::stream::unfold(told, move |mut told| {
            let key = key.clone();
            async move {
                loop {
                    match told.recv().await {
                        Ok(changed) if changed == key => return Some(((), told)),
                        Ok(_) => {}
                        Err(RecvError::Lagged(_)) => return Some(((), told)),
                        Err(RecvError::Closed) => return None,
                    }
                }
            }
        });
        Box::pin(changes)
    }

    /// Who holds `key` now, and how many tasks wait for it.
    fn inspect(&self, key: &str) -> Option<LockInfo> {
        let now = Instant::now();
        let (kind, holders) = {
            let state = self.state();
            let e = state.entries.get(key)?;
            let live: Vec<&Holder> = e.holders.iter().filter(|h| h.ends.live(now)).collect();
            let kind = match live.first()?.kind {
                LockKind::Semaphore { permits } => LockKind::Semaphore {
                    permits: e.permits.unwrap_or(permits),
                },
                kind => kind,
            };
            let holders = live
                .iter()
                .map(|h| {
                    HolderInfo::new(&h.token, h.ends.left(now), Some(h.fence))
                        .with_holder_id(h.holder_id.as_deref())
                })
                .collect();
            (kind, holders)
        };
        let waiting = self.locks.lines.get(key).map_or(0, |line| line.waiting());
        Some(LockInfo::new(Some(kind), holders, Some(waiting)))
    }

    /// Takes writer `token` out of those waiting for `key`, which gave up: the readers
    /// waiting behind it may go in, and the next writer.
    fn stop_waiting_to_write(&self, key: &str, token: &str) {
        let wake = {
            let mut state = self.state();
            match state.entries.get_mut(key) {
                Some(e) if e.writers.iter().any(|(t, _)| &**t == token) => {
                    e.stop_waiting_to_write(token);
                    Wake::AfterWrite(e.next_writer())
                }
                _ => Wake::Nobody,
            }
        };
        self.announce(key, wake);
    }

    /// Sets the lease of `token`'s hold on `key` to run `lease` from now, if it is still
    /// held; a session's hold has no lease, and lasts as it is.
    fn extend(&self, key: &str, token: &str, lease: Duration) -> Option<Instant> {
        let now = Instant::now();
        let mut state = self.state();
        let holder = state
            .entries
            .get_mut(key)?
            .holders
            .iter_mut()
            .find(|h| h.token == token && h.ends.live(now))?;
        if let Ends::At(at) = &mut holder.ends {
            *at = now + lease;
        }
        Some(now + lease)
    }

    fn holds(&self, key: &str, token: &str) -> bool {
        let now = Instant::now();
        self.state()
            .entries
            .get(key)
            .is_some_and(|e| e.holder(token, now).is_some())
    }

    /// Free permits of semaphore `key`, whose handle asks with `permits`.
    fn available(&self, key: &str, permits: u32) -> u32 {
        let now = Instant::now();
        let mut state = self.state();
        let Some(e) = state.entries.get_mut(key) else {
            return permits;
        };
        e.prune(now);
        admission::free_permits(e, permits)
    }

    /// Stores `permits` as semaphore `key`'s count, kept as long as its fence counter.
    fn set_permits(&self, key: &Arc<str>, permits: u32) {
        let now = Instant::now();
        {
            let mut state = self.state();
            let entry = state.entry(key, now);
            entry.permits = Some(permits);
            entry.fence.keep(now, self.locks.fence_ttl);
        }
        // A raised count may admit several waiters.
        self.announce(key, Wake::All);
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
            e.holders.clear();
        }
    }
}

impl Store for MemoryStore {
    fn name(&self) -> &str {
        "memory"
    }

    /// Every kind.
    fn supports(&self, _kind: LockKind) -> bool {
        true
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        Box::pin(async move {
            match wait::acquire(self, request).await? {
                Outcome::Acquired(Acquired {
                    fence,
                    expiry: Expiry::Lease(_),
                }) if matches!(self.term, Terms::Sessions(_)) => {
                    Ok(Outcome::Acquired(self.session_hold(request, fence)))
                }
                outcome => Ok(outcome),
            }
        })
    }

    fn available<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, u32> {
        Box::pin(ready(Ok(self.available(key.as_str(), permits))))
    }

    fn set_permits<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, ()> {
        self.set_permits(key.shared(), permits);
        Box::pin(ready(Ok(())))
    }

    fn force_unlock<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Ok(self.force_unlock(key.as_str()))))
    }

    /// What [`Locker::inspect`](crate::Locker::inspect) reports in memory: everything.
    /// The kind as taken, each holder's lease left and fencing token, and the tasks
    /// waiting for the lock (of every `Locker` sharing the store) as `waiting`.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        Box::pin(ready(Ok(self.inspect(key.as_str()))))
    }

    /// Told of every hold of the lock taken or given back, and of `force_unlock`; not of
    /// a lease that runs out or a session that ends.
    fn watch_holders<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, HolderChanges> {
        Box::pin(ready(Ok(self.holder_changes(key))))
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
    type Tried = ();

    fn attempt<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
        _tried: &'a mut (),
    ) -> impl Future<Output = Result<Attempt, LockError>> + Send + 'a {
        ready(self.try_acquire(request, waits_for))
    }

    fn join(&self, request: &Acquire) -> Joined<()> {
        Joined {
            line: self.locks.lines.join(request.key.shared(), |_| {}),
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
        self.leave_store_line(&left);
        self.locks.lines.leave(left.line, WhenEmpty::Remove, |_| {});
    }
}

impl MemoryStore {
    /// What a waiter that gave up leaves behind in the store: a fair waiter's place in
    /// line (and a lock handed over to it meanwhile), a writer's among the waiting
    /// writers.
    fn leave_store_line(&self, left: &Left<'_, ()>) {
        if left.held {
            return;
        }
        match left.kind {
            LockKind::Fair => {
                self.release(left.line.key(), left.token, Release::Leave);
            }
            LockKind::Write | LockKind::Exclusive => {
                self.stop_waiting_to_write(left.line.key(), left.token);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
