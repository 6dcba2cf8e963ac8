//! The in-memory store: the same semantics as Redis within one process, on tokio time.

use std::collections::{HashMap, VecDeque};
use std::future::{Future, ready};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::store::{Acquire, Acquired, Expiry, Hold, Outcome, Renewal, Store, StoreFuture};
use crate::kind::Sharing;
use crate::options::DEFAULT_FENCE_TTL;
use crate::semaphore::miscounted;
use crate::wait::handover::{FairHandOver, Handover};
use crate::wait::line::{Line, Lines, WhenEmpty};
use crate::wait::{self, Attempt, ClientWait, Joined, Left, StoreClock};
use crate::{HolderInfo, LockError, LockInfo, LockKey, LockKind};

mod master;

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
/// (ZooKeeper, a database) do, and [`end_session`](Self::end_session) ends it: for
/// testing what code on such a store sees.
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
    /// The zero of the clock that attempts and hand-overs report.
    epoch: Instant,
}

/// How the holds taken through one handle end.
#[derive(Debug)]
enum Terms {
    /// Each runs out with its lease unless renewed.
    Leases,
    /// Each lasts as long as the handle's current session; ending it starts the next.
    Sessions(Mutex<Session>),
}

/// One session of a handle whose holds are sessions.
#[derive(Debug, Clone)]
struct Session {
    /// Unique in the process: marks the holds taken on it.
    id: u64,
    /// Cancelled when the session ends.
    ended: CancellationToken,
}

impl Session {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            ended: CancellationToken::new(),
        }
    }
}

/// How long one hold lasts: a lease of this length from when it is taken, or a session.
#[derive(Debug, Clone)]
enum Term {
    Lease(Duration),
    Session(Session),
}

/// When a holder's hold ends, other than by its release.
#[derive(Debug)]
enum Ends {
    /// Its lease runs out at this instant.
    At(Instant),
    /// With its session `id`: `ended`, a child of the session's token, is cancelled when
    /// the session ends or an operator forces the lock open.
    WithSession { id: u64, ended: CancellationToken },
}

impl Ends {
    fn new(term: &Term, now: Instant) -> Self {
        match term {
            Term::Lease(lease) => Ends::At(now + *lease),
            Term::Session(session) => Ends::WithSession {
                id: session.id,
                ended: session.ended.child_token(),
            },
        }
    }

    fn live(&self, now: Instant) -> bool {
        match self {
            Ends::At(at) => *at > now,
            Ends::WithSession { ended, .. } => !ended.is_cancelled(),
        }
    }

    /// The lease left; `None` for a session's hold.
    fn left(&self, now: Instant) -> Option<Duration> {
        match self {
            Ends::At(at) => Some(at.saturating_duration_since(now)),
            Ends::WithSession { .. } => None,
        }
    }
}

/// One lock's state: its holders, its fence counter, and who waits for it in the store.
#[derive(Debug)]
struct Entry {
    /// One owner (exclusive, fair or write), or readers, or permit holders. A holder whose
    /// lease ran out is dropped as soon as it is looked at.
    holders: Vec<Holder>,
    fence: u64,
    fence_expires_at: Instant,
    /// Fair waiters, first come first. A place here lasts until its waiter leaves (its
    /// drop sees to that), so unlike on Redis it needs no expiry.
    line: VecDeque<Place>,
    /// Writers waiting for the read-write lock, with when each began to ask: a reader
    /// that asked later waits for them. Each stays until it takes the lock or leaves.
    writers: Vec<(Box<str>, Instant)>,
    /// A semaphore's count, stored on first use; forgotten with the fence counter once
    /// nobody holds a permit.
    permits: Option<u32>,
}

#[derive(Debug)]
struct Place {
    token: Box<str>,
    term: Term,
}

#[derive(Debug)]
struct Holder {
    token: String,
    kind: LockKind,
    ends: Ends,
    fence: u64,
}

impl Holder {
    /// The instant an attempt reports its hold to run until: a session's hold is
    /// reported as a session by `Store::acquire`, which drops this instant.
    fn until(&self, now: Instant) -> Instant {
        match self.ends {
            Ends::At(at) => at,
            Ends::WithSession { .. } => now,
        }
    }
}

/// A hand-over to deliver once the state's lock is dropped.
type HandedOver = (Box<str>, FairHandOver);

/// Whom a change of a lock's state wakes, once the state's lock is dropped.
#[derive(Debug)]
enum Wake {
    Nobody,
    /// One waiter: one holder went, and one more can come in.
    One,
    /// Every waiter: a change that concerns them all.
    All,
    /// Every waiter but the writers, and the writer that has waited longest: a write, or
    /// the last read, was released.
    AfterWrite(Option<Box<str>>),
    /// The first fair waiter, handed the lock.
    HandedOver(HandedOver),
}

/// How a lock is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// By its holder, which took it as this kind: an exclusive lock goes free, a fair one
    /// to the next in line, a write or a last read wakes every waiter but the writers and
    /// the writer that has waited longest, a permit one.
    Holder(LockKind),
    /// A fair waiter leaves the line, and releases the lock if it was handed over to it.
    Leave,
}

impl Entry {
    fn new(now: Instant) -> Self {
        Self {
            holders: Vec::new(),
            fence: 0,
            fence_expires_at: now,
            line: VecDeque::new(),
            writers: Vec::new(),
            permits: None,
        }
    }

    /// Drops the holders whose lease ran out, and a stored count whose semaphore has been
    /// idle as long as its fence counter.
    fn prune(&mut self, now: Instant) {
        self.holders.retain(|h| h.ends.live(now));
        if self.holders.is_empty() && self.fence_expires_at <= now {
            self.permits = None;
        }
    }

    /// The live holder `token`.
    fn holder(&self, token: &str, now: Instant) -> Option<&Holder> {
        self.holders
            .iter()
            .find(|h| h.token == token && h.ends.live(now))
    }

    /// The longest lease left among the holders (all in the way of whoever asks); `None`
    /// if there are none, or one of them holds for a session.
    fn longest_lease(&self, now: Instant) -> Option<Duration> {
        let mut longest = None;
        for holder in &self.holders {
            longest = longest.max(Some(holder.ends.left(now)?));
        }
        longest
    }

    /// Whether a holder of another sharing than `sharing` holds the lock.
    fn held_otherwise(&self, sharing: Sharing) -> bool {
        self.holders.iter().any(|h| h.kind.sharing() != sharing)
    }

    /// Makes `token` a holder, as `kind`, for `term`, and draws its fencing token.
    fn take(
        &mut self,
        token: &str,
        kind: LockKind,
        term: &Term,
        now: Instant,
        fence_ttl: Duration,
    ) -> u64 {
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
        if let Term::Lease(lease) = term {
            self.fence_expires_at = self.fence_expires_at.max(now + *lease);
        }
        self.holders.push(Holder {
            token: token.to_owned(),
            kind,
            ends: Ends::new(term, now),
            fence: self.fence,
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
        let fence = self.take(&place.token, LockKind::Fair, &place.term, now, fence_ttl);
        tracing::debug!(fence, "lock handed over to the next in line");
        let handover = FairHandOver {
            fence,
            at_us: clock_us,
        };
        Some((place.token, handover))
    }

    fn queue(&mut self, token: &str, term: &Term) {
        if !self.line.iter().any(|p| &*p.token == token) {
            self.line.push_back(Place {
                token: token.into(),
                term: term.clone(),
            });
        }
    }

    /// Counts writer `token`, which began to ask at `since`, among those waiting.
    fn wait_to_write(&mut self, token: &str, since: Instant) {
        if !self.writers.iter().any(|(t, _)| &**t == token) {
            self.writers.push((token.into(), since));
        }
    }

    /// Whether a writer that began to ask no later than `since` waits.
    fn writer_waiting_since(&self, since: Instant) -> bool {
        self.writers.iter().any(|&(_, at)| at <= since)
    }

    /// The writer that has waited longest.
    fn next_writer(&self) -> Option<Box<str>> {
        let (token, _) = self.writers.iter().min_by_key(|(_, since)| *since)?;
        Some(token.clone())
    }

    /// Takes writer `token` out of those waiting.
    fn stop_waiting_to_write(&mut self, token: &str) {
        self.writers.retain(|(t, _)| &**t != token);
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
            e.holders.iter().any(|h| h.ends.live(now))
                || e.fence_expires_at > now
                || !e.line.is_empty()
                || !e.writers.is_empty()
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
        let locks = Locks {
            state: Mutex::default(),
            fence_ttl,
            lines: Lines::default(),
            epoch: Instant::now(),
        };
        Self {
            locks: Arc::new(locks),
            term: Terms::Leases,
        }
    }

    /// Another handle on this store's locks, whose holds last as long as a session of its
    /// own rather than a lease: a `Locker` on it never renews them, and they end when
    /// [`end_session`](Self::end_session) ends the session, as a session store's end with
    /// its connection or its expiry.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// use std::sync::Arc;
    /// use lock_core::Locker;
    /// use lock_core::backend::MemoryStore;
    ///
    /// let store = MemoryStore::new();
    /// let session = Arc::new(store.session());
    /// let a = Locker::builder().store(session.clone()).build().await?;
    /// let b = Locker::builder().store(Arc::new(store)).build().await?;
    /// let guard = a.lock("job:1").await?;
    /// assert_eq!(guard.lease_left(), None, "no lease: it lasts as long as the session");
    ///
    /// session.end_session();
    /// guard.lost().await;
    /// assert!(b.try_lock("job:1").await?.is_some(), "the session's holds are freed");
    /// # Ok(())
    /// # }
    /// ```
    pub fn session(&self) -> MemoryStore {
        Self {
            locks: self.locks.clone(),
            term: Terms::Sessions(Mutex::new(Session::new())),
        }
    }

    /// Ends this handle's session, as a dropped connection or an expiry would: every
    /// hold taken on it is freed (its waiters are woken) and its guard lost; the next
    /// acquisition opens a new session. Nothing on a store whose holds are leases.
    pub fn end_session(&self) {
        let Terms::Sessions(session) = &self.term else {
            return;
        };
        let ended = {
            let mut session = session.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *session, Session::new())
        };
        let holds: Vec<(Arc<str>, String, LockKind)> =
            self.state()
                .entries
                .iter()
                .flat_map(|(key, entry)| {
                    let of_session = entry.holders.iter().filter(
                        |h| matches!(h.ends, Ends::WithSession { id, .. } if id == ended.id),
                    );
                    of_session.map(|h| (key.clone(), h.token.clone(), h.kind))
                })
                .collect();
        for (key, token, kind) in holds {
            self.release(&key, &token, Release::Holder(kind));
        }
        ended.ended.cancel();
    }

    /// `request`'s hold, just taken with `fence` on this handle's session: it is lost when
    /// its session ends or an operator forces the lock open (at once if that happened
    /// already).
    fn session_hold(&self, request: &Acquire, fence: u64) -> Acquired {
        let now = Instant::now();
        let ended = self
            .state()
            .entries
            .get(request.key.as_str())
            .and_then(|e| e.holder(&request.token, now))
            .and_then(|h| match &h.ends {
                Ends::WithSession { ended, .. } => Some(ended.clone()),
                Ends::At(_) => None,
            });
        let ended = ended.unwrap_or_else(|| {
            let gone = CancellationToken::new();
            gone.cancel();
            gone
        });
        Acquired::session(fence, ended.cancelled_owned())
    }

    /// How a hold taken now through this handle lasts, asked for with `lease`.
    fn term(&self, lease: Duration) -> Term {
        match &self.term {
            Terms::Leases => Term::Lease(lease),
            Terms::Sessions(session) => {
                Term::Session(session.lock().unwrap_or_else(|e| e.into_inner()).clone())
            }
        }
    }

    fn clock_us(&self, now: Instant) -> u64 {
        u64::try_from((now - self.locks.epoch).as_micros()).unwrap_or(u64::MAX)
    }

    /// Wakes whom a change of `key`'s state concerns.
    fn announce(&self, key: &str, wake: Wake) {
        match wake {
            Wake::Nobody => {}
            Wake::One => {
                self.locks.lines.wake_one(key);
            }
            Wake::All => self.locks.lines.wake_all(key),
            Wake::AfterWrite(next) => self.locks.lines.wake_after_write(key, next.as_deref()),
            Wake::HandedOver((token, handover)) => self.locks.lines.deliver(key, &token, handover),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update below is completed before the guard drops, so a panic elsewhere
        // cannot leave a half-written entry.
        self.locks.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One attempt at `request`; a caller that waits (`waits_for` not zero) queues if the
    /// lock is held (a fair one in line, a writer among the waiting writers).
    fn try_acquire(&self, request: &Acquire, waits_for: Duration) -> Result<Attempt, LockError> {
        let waits = !waits_for.is_zero();
        let (key, token) = (request.key.shared(), &*request.token);
        let term = self.term(request.lease);
        let now = Instant::now();
        let clock = StoreClock {
            sent_at: now,
            us: self.clock_us(now),
        };
        let fence_ttl = self.locks.fence_ttl;
        let mut wake = Wake::Nobody;
        let attempt = {
            let mut state = self.state();
            state.sweep(now);
            let entry = state
                .entries
                .entry(key.clone())
                .or_insert_with(|| Entry::new(now));
            entry.prune(now);
            let held = |entry: &Entry| Attempt::Held {
                ttl: entry.longest_lease(now),
                clock: None,
            };
            let take = |entry: &mut Entry| {
                let fence = entry.take(token, request.kind, &term, now, fence_ttl);
                let until = entry.holder(token, now).map_or(now, |h| h.until(now));
                Attempt::Acquired { fence, until }
            };
            match request.kind {
                LockKind::Exclusive if entry.holders.is_empty() => take(entry),
                LockKind::Exclusive => held(entry),
                LockKind::Fair => {
                    let (attempt, handed) =
                        Self::try_fair(entry, token, &term, waits, clock, fence_ttl);
                    if let Some(handed) = handed {
                        wake = Wake::HandedOver(handed);
                    }
                    attempt
                }
                LockKind::Read => {
                    if entry.held_otherwise(Sharing::Read)
                        || entry.writer_waiting_since(request.since)
                    {
                        held(entry)
                    } else {
                        take(entry)
                    }
                }
                LockKind::Write => {
                    if entry.holders.is_empty() {
                        entry.stop_waiting_to_write(token);
                        take(entry)
                    } else {
                        if waits {
                            entry.wait_to_write(token, request.since);
                        }
                        held(entry)
                    }
                }
                LockKind::Semaphore { permits } => {
                    let count = *entry.permits.get_or_insert(permits);
                    if count != permits {
                        return Err(miscounted(&request.key, count, permits));
                    }
                    let taken = u32::try_from(entry.holders.len()).unwrap_or(u32::MAX);
                    if entry.held_otherwise(Sharing::Permit) || taken >= count {
                        held(entry)
                    } else {
                        take(entry)
                    }
                }
            }
        };
        self.announce(key, wake);
        Ok(attempt)
    }

    /// One attempt at a fair lock on `entry`: the attempt, and a hand-over to the first
    /// in line that a free lock makes.
    fn try_fair(
        entry: &mut Entry,
        token: &str,
        term: &Term,
        waits: bool,
        clock: StoreClock,
        fence_ttl: Duration,
    ) -> (Attempt, Option<HandedOver>) {
        let now = clock.sent_at;
        if let Some(own) = entry.holder(token, now) {
            // Handed over to this waiter before it saw the hand-over.
            let attempt = Attempt::Acquired {
                fence: entry.fence,
                until: own.until(now),
            };
            return (attempt, None);
        }
        if !entry.holders.is_empty() {
            if waits {
                entry.queue(token, term);
            }
            let attempt = Attempt::Held {
                ttl: entry.longest_lease(now),
                clock: Some(clock),
            };
            return (attempt, None);
        }
        match entry.line.front() {
            Some(first) if &*first.token != token => {
                // Free, with someone ahead of the caller: it is theirs.
                let first_lease = match first.term {
                    Term::Lease(lease) => Some(lease),
                    Term::Session(_) => None,
                };
                let handed = entry.hand_over(now, fence_ttl, clock.us);
                if waits {
                    entry.queue(token, term);
                }
                let attempt = Attempt::Held {
                    ttl: first_lease,
                    clock: Some(clock),
                };
                (attempt, handed)
            }
            first => {
                if first.is_some() {
                    entry.line.pop_front();
                }
                let fence = entry.take(token, LockKind::Fair, term, now, fence_ttl);
                let until = entry.holder(token, now).map_or(now, |h| h.until(now));
                (Attempt::Acquired { fence, until }, None)
            }
        }
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
            match (how, released.kind) {
                (Release::Holder(LockKind::Exclusive), _) => Wake::One,
                (Release::Holder(LockKind::Fair) | Release::Leave, _) => {
                    match e.hand_over(now, self.locks.fence_ttl, clock_us) {
                        Some(handed) => Wake::HandedOver(handed),
                        None => Wake::One,
                    }
                }
                (_, LockKind::Read) if !e.holders.is_empty() => Wake::Nobody,
                (_, LockKind::Semaphore { .. }) => Wake::One,
                _ => Wake::AfterWrite(e.next_writer()),
            }
        };
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
        self.announce(key, Wake::All);
        true
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
                .map(|h| HolderInfo::new(&h.token, h.ends.left(now), Some(h.fence)))
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
        if e.held_otherwise(Sharing::Permit) {
            return 0;
        }
        let taken = u32::try_from(e.holders.len()).unwrap_or(u32::MAX);
        e.permits.unwrap_or(permits).saturating_sub(taken)
    }

    /// Stores `permits` as semaphore `key`'s count, kept as long as its fence counter.
    fn set_permits(&self, key: &Arc<str>, permits: u32) {
        let now = Instant::now();
        {
            let mut state = self.state();
            let entry = state
                .entries
                .entry(key.clone())
                .or_insert_with(|| Entry::new(now));
            entry.prune(now);
            entry.permits = Some(permits);
            entry.fence_expires_at = entry.fence_expires_at.max(now + self.locks.fence_ttl);
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

    /// Everything: the kind as taken, each holder's lease left and fencing token, and the
    /// tasks waiting.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        Box::pin(ready(Ok(self.inspect(key.as_str()))))
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
        if !left.held {
            match left.kind {
                LockKind::Fair => {
                    self.release(left.line.key(), left.token, Release::Leave);
                }
                LockKind::Write => self.stop_waiting_to_write(left.line.key(), left.token),
                _ => {}
            }
        }
        self.locks.lines.leave(left.line, WhenEmpty::Remove, |_| {});
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

    const SEC: Duration = Duration::from_secs(1);

    /// One attempt by `token` at "k" as `kind`, by a caller that began to ask at `since`
    /// and waits a second more.
    fn asked_at(m: &MemoryStore, token: &str, kind: LockKind, since: Instant) -> Attempt {
        let request = Acquire {
            key: LockKey::new("k").unwrap(),
            token: token.into(),
            kind,
            lease: SEC * 10,
            deadline: Instant::now() + SEC,
            since,
        };
        m.try_acquire(&request, SEC).unwrap()
    }

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
            since: Instant::now(),
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

    #[tokio::test(start_paused = true)]
    async fn readers_that_ask_after_a_waiting_writer_go_in_after_it() {
        use LockKind::{Read, Write};
        let m = MemoryStore::new();
        let ms = Duration::from_millis(1);
        let t0 = Instant::now();
        acquired(asked_at(&m, "r1", Read, t0));
        acquired(asked_at(&m, "r2", Read, t0));
        tokio::time::advance(ms).await;
        let writer_since = Instant::now();
        assert!(matches!(
            asked_at(&m, "w", Write, writer_since),
            Attempt::Held { .. }
        ));
        tokio::time::advance(ms).await;
        let late = Instant::now();
        assert!(
            matches!(asked_at(&m, "r3", Read, late), Attempt::Held { .. }),
            "a reader went in ahead of a waiting writer"
        );
        assert!(release(&m, "r1", Read));
        assert!(matches!(
            asked_at(&m, "w", Write, writer_since),
            Attempt::Held { .. }
        ));
        assert!(release(&m, "r2", Read));
        acquired(asked_at(&m, "w", Write, writer_since));
        assert!(matches!(
            asked_at(&m, "r3", Read, late),
            Attempt::Held { .. }
        ));
        assert!(release(&m, "w", Write));
        acquired(asked_at(&m, "r3", Read, late));
    }

    #[tokio::test(start_paused = true)]
    async fn readers_queued_behind_a_write_go_in_together_before_a_later_writer() {
        use LockKind::{Read, Write};
        let m = MemoryStore::new();
        let ms = Duration::from_millis(1);
        acquired(asked_at(&m, "w1", Write, Instant::now()));
        tokio::time::advance(ms).await;
        let readers_since = Instant::now();
        for reader in ["r1", "r2"] {
            assert!(matches!(
                asked_at(&m, reader, Read, readers_since),
                Attempt::Held { .. }
            ));
        }
        tokio::time::advance(ms).await;
        let w2_since = Instant::now();
        assert!(matches!(
            asked_at(&m, "w2", Write, w2_since),
            Attempt::Held { .. }
        ));
        assert!(release(&m, "w1", Write));
        let f1 = acquired(asked_at(&m, "r1", Read, readers_since));
        let f2 = acquired(asked_at(&m, "r2", Read, readers_since));
        assert!(f2 > f1, "each read draws its own fencing token");
        assert!(matches!(
            asked_at(&m, "w2", Write, w2_since),
            Attempt::Held { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn inspect_shows_each_holder_with_its_lease_and_fence_and_the_tasks_waiting() {
        use LockKind::{Read, Write};
        let m = MemoryStore::with_fence_ttl(SEC * 60);
        let ms = Duration::from_millis;
        assert_eq!(m.inspect("k"), None, "never taken");

        let token = "0123456789abcdef";
        let fence = acquired(attempt(&m, "k", token, SEC * 2, Write, Duration::ZERO));
        tokio::time::advance(ms(500)).await;
        let writer = Acquire {
            key: LockKey::new("k").unwrap(),
            token: "w2".into(),
            kind: Write,
            lease: SEC,
            deadline: Instant::now() + SEC,
            since: Instant::now(),
        };
        let waiting = m.join(&writer).line;
        let info = m.inspect("k").unwrap();
        let holder = HolderInfo::new(token, Some(ms(1500)), Some(fence));
        assert_eq!(info, LockInfo::new(Some(Write), vec![holder], Some(1)));
        assert_eq!(info.holders[0].token_prefix, "01234567");
        m.locks.lines.leave(&waiting, WhenEmpty::Remove, |_| {});
        tokio::time::advance(ms(1500)).await;
        assert_eq!(m.inspect("k"), None, "its lease ran out");

        let f1 = acquired(asked_at(&m, "r1", Read, Instant::now()));
        tokio::time::advance(ms(100)).await;
        let f2 = acquired(asked_at(&m, "r2", Read, Instant::now()));
        let readers = vec![
            HolderInfo::new("r1", Some(ms(9900)), Some(f1)),
            HolderInfo::new("r2", Some(SEC * 10), Some(f2)),
        ];
        let info = m.inspect("k").unwrap();
        assert_eq!(info, LockInfo::new(Some(Read), readers, Some(0)));
        assert!(release(&m, "r1", Read) && release(&m, "r2", Read));
        assert_eq!(m.inspect("k"), None, "released");

        // A semaphore shows its stored count, not the one its holders asked with.
        acquired(asked_at(
            &m,
            "p",
            LockKind::Semaphore { permits: 3 },
            Instant::now(),
        ));
        m.set_permits(&Arc::from("k"), 5);
        let info = m.inspect("k").unwrap();
        assert_eq!(info.kind, Some(LockKind::Semaphore { permits: 5 }));
        assert_eq!(info.holders.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_semaphore_admits_its_count_and_keeps_it() {
        let m = MemoryStore::with_fence_ttl(SEC * 60);
        let three = LockKind::Semaphore { permits: 3 };
        let fences: Vec<u64> = ["a", "b", "c"]
            .iter()
            .map(|t| acquired(asked_at(&m, t, three, Instant::now())))
            .collect();
        assert!(fences.windows(2).all(|w| w[0] < w[1]));
        assert!(matches!(
            asked_at(&m, "d", three, Instant::now()),
            Attempt::Held { .. }
        ));
        assert_eq!(m.available("k", 3), 0);
        let request = Acquire {
            key: LockKey::new("k").unwrap(),
            token: "e".into(),
            kind: LockKind::Semaphore { permits: 5 },
            lease: SEC,
            deadline: Instant::now(),
            since: Instant::now(),
        };
        let err = m.try_acquire(&request, Duration::ZERO).unwrap_err();
        assert!(
            err.is_config() && err.to_string().contains("has 3 permits"),
            "{err}"
        );
        // Lowered: the holders keep their permits; none is granted under the new count.
        m.set_permits(&Arc::from("k"), 2);
        let two = LockKind::Semaphore { permits: 2 };
        assert!(release(&m, "a", three));
        assert_eq!(m.available("k", 2), 0);
        assert!(matches!(
            asked_at(&m, "d", two, Instant::now()),
            Attempt::Held { .. }
        ));
        assert!(release(&m, "b", three));
        acquired(asked_at(&m, "d", two, Instant::now()));
        // Unused for as long as its fence counter is kept: the count is forgotten.
        tokio::time::advance(SEC * 61).await;
        assert_eq!(m.available("k", 7), 7);
        acquired(asked_at(
            &m,
            "e",
            LockKind::Semaphore { permits: 7 },
            Instant::now(),
        ));
    }
}
