//! RedLock: one lock over N independent Redis masters, held while a quorum of them hold
//! it.
//!
//! Each master is a [`RedisStore`] of its own (connection, scripts, pub/sub hub), and all
//! of them wake the same local [lines](crate::wait::line): a release on any master wakes
//! the waiters here. Waiting is lock-core's client-side wait, with one attempt asking
//! every master at once:
//!
//! - each master gets a twentieth of the lease to answer (as redsync does); a master that
//!   does not is released by token in the background, and is not asked again during this
//!   acquisition, so that a late release can never undo a later grant;
//! - the lock is taken when a quorum granted it and it is still valid: it runs until the
//!   quorum-th latest of their leases (each reckoned from when its command was sent) less
//!   the drift allowance. The other masters' answers are not waited for: one that grants
//!   it late holds the caller's token, which the guard renews and releases everywhere.
//!   Otherwise every master that granted it releases it before the
//!   next attempt;
//! - its fencing token is the largest of the granting masters' tokens (times the number
//!   of masters, plus the index of the one that drew it, so that readers and permits
//!   sharing a lock never get the same one), and those of them whose counter is below
//!   that largest raise it to it (unless a quorum drew it already), so that the next
//!   quorum, which shares a master with this one, draws a larger one. An attempt gives
//!   every master the same seed for a new counter, so that a lock's counters start alike
//!   and need no raise until they drift apart;
//! - renewals, `extend` and `is_held` need the quorum too; a lease that loses it is lost.
//!
//! The quorum is a majority, except for a semaphore of `p` permits, which needs
//! `⌊p·n/(p+1)⌋ + 1` of `n` masters so that `p + 1` holders can never each have theirs.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use super::hub::Listening;
use super::keys::RedisKey;
use super::scripts::{FenceSeed, Seen};
use super::{Asking, CutShort, RedisConfig, RedisStore, Release};
use crate::backend::store::{Acquire, Hold, Outcome, Renewal, Store, StoreFuture};
use crate::kind::Sharing;
use crate::wait::handover::Handover;
use crate::wait::line::{Edge, Line, Lines, WhenEmpty};
use crate::wait::{self, Attempt, ClientWait, Joined, Left};
use crate::{HolderInfo, LockError, LockInfo, LockKey, LockKind};

mod builder;

pub use builder::RedLockStoreBuilder;

/// The share of the lease each master gets to answer an attempt or a renewal.
const PER_MASTER: u32 = 20;

/// How much the clocks of this process and of the masters may drift apart during a
/// lease: it is taken off every lease's validity.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Drift {
    /// The share of the lease.
    per_lease: f64,
    /// And a fixed allowance on top.
    fixed: Duration,
}

impl Drift {
    /// The default: 1% of the lease, plus 2 ms.
    const DEFAULT: Drift = Drift {
        per_lease: 0.01,
        fixed: Duration::from_millis(2),
    };

    fn of(self, lease: Duration) -> Duration {
        lease.mul_f64(self.per_lease) + self.fixed
    }
}

/// Locks over N independent Redis masters (RedLock): each lock is held while a quorum of
/// them hold it (see [`Locker::redlock`](crate::Locker::redlock) for what that gives).
/// Configured and connected by its [builder](RedLockStoreBuilder), over a
/// [`RedisStoreBuilder`](super::RedisStoreBuilder) for each master, and plugged into a
/// [`Locker`](crate::Locker) with [`LockerBuilder::store`](crate::LockerBuilder::store);
/// [`LockerBuilder::redlock`](crate::LockerBuilder::redlock) is a shorthand for the same.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use lock_core::Locker;
/// use lock_core::backend::{RedLockStore, RedisStore};
///
/// let masters = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
///     .map(|url| RedisStore::builder().url(url).namespace("billing:lock:"));
/// let store = RedLockStore::builder(masters).build().await?;
/// let locker = Locker::builder().store(Arc::new(store)).build().await?;
/// let guard = locker.lock("balance:42").await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedLockStore {
    masters: Vec<RedisStore>,
    /// The waiters of this `Locker`, which every master's hub wakes.
    lines: Arc<Lines<Listening>>,
    drift: Drift,
    safety_poll: Duration,
}

impl RedLockStore {
    /// Opens a store on each master of `configs` and connects to them all at once;
    /// fails unless a majority answer within the connect timeout. The others are
    /// connected to when they come back.
    async fn connect(configs: Vec<RedisConfig>, drift: Drift) -> Result<Self, LockError> {
        let lines: Arc<Lines<Listening>> = Arc::default();
        let safety_poll = configs.first().map_or(Duration::ZERO, |c| c.safety_poll);
        let masters: Vec<RedisStore> = configs
            .into_iter()
            .map(|config| RedisStore::new(config, lines.clone()))
            .collect();
        let answers = join_all(masters.iter().map(RedisStore::ready)).await;
        let answered = answers.iter().filter(|a| a.is_ok()).count();
        let needed = majority(masters.len());
        if answered < needed {
            let cause = answers.into_iter().find_map(Result::err);
            return Err(LockError::backend(
                format!(
                    "cannot connect to a majority of the redlock masters: {answered} of {} answered, {needed} needed",
                    masters.len()
                ),
                cause.map_or_else(|| "no answer".to_owned(), |e| e.to_string()),
            ));
        }
        Ok(Self {
            masters,
            lines,
            drift,
            safety_poll,
        })
    }

    /// Asks every master at once, each within `patience`: each one's answer, `None` where
    /// it failed or did not answer in time.
    async fn ask_all<'a, T, F>(
        &'a self,
        patience: Duration,
        ask: impl Fn(&'a RedisStore) -> F,
    ) -> Vec<Option<T>>
    where
        F: Future<Output = Result<T, LockError>>,
    {
        let asks = self
            .masters
            .iter()
            .map(|m| tokio::time::timeout(patience, ask(m)));
        let answers = join_all(asks).await;
        answers.into_iter().map(|a| a.ok()?.ok()).collect()
    }

    /// How long a call other than an attempt or a renewal waits for each master.
    fn patience(&self) -> Duration {
        self.masters[0].connection.connect_timeout()
    }

    /// How many masters must hold a lock of `kind`.
    fn quorum(&self, kind: LockKind) -> usize {
        let n = self.masters.len();
        match kind {
            LockKind::Semaphore { permits } => {
                let p = permits as usize;
                (p * n / (p + 1) + 1).max(majority(n))
            }
            _ => majority(n),
        }
    }

    fn quorum_error(&self, key: &LockKey, acquired: usize, needed: usize) -> LockError {
        LockError::Quorum {
            key: key.to_string(),
            acquired,
            needed,
        }
    }

    /// The instant until which a lock of `kind` held until each of `untils` (one per
    /// master that holds it) is valid: the quorum-th latest, less the drift; `None`
    /// without a quorum.
    fn valid_until(
        &self,
        kind: LockKind,
        lease: Duration,
        untils: &mut [Instant],
    ) -> Option<Instant> {
        let needed = self.quorum(kind);
        if untils.len() < needed {
            return None;
        }
        untils.sort_unstable_by(|a, b| b.cmp(a));
        untils[needed - 1].checked_sub(self.drift.of(lease))
    }

    /// The fencing token of a grant by `granted`: the largest of their tokens, times the
    /// number of masters, plus the index of the master that drew it, so that holders who
    /// share a lock (readers, permits) never get the same one.
    fn fence(&self, granted: &[(usize, u64)]) -> u64 {
        let (i, fence) = granted
            .iter()
            .copied()
            .max_by_key(|&(i, fence)| (fence, i))
            .unwrap_or((0, 0));
        fence
            .saturating_mul(self.masters.len() as u64)
            .saturating_add(i as u64)
    }

    /// Makes the token of a grant by `granted` (the largest of their tokens) the floor of
    /// every later one: each granting master whose counter is below it raises it, unless
    /// a quorum of them drew it already. Any later quorum shares a master with this
    /// one, whose counter then draws above it. Says whether a quorum holds it as floor.
    async fn fence_raised(&self, request: &Acquire, granted: &[(usize, u64)]) -> bool {
        let needed = self.quorum(request.kind);
        let fence = granted.iter().map(|&(_, fence)| fence).max().unwrap_or(0);
        let at_fence = granted.iter().filter(|&&(_, f)| f == fence).count();
        if at_fence >= needed {
            return true;
        }
        let patience = request.lease / PER_MASTER;
        let raises = granted.iter().filter(|&&(_, f)| f < fence).map(|&(i, _)| {
            let raise = self.masters[i].raise_fence(&request.key, fence, request.lease);
            async move { matches!(tokio::time::timeout(patience, raise).await, Ok(Ok(()))) }
        });
        let raised = join_all(raises).await.into_iter().filter(|&r| r).count();
        at_fence + raised >= needed
    }

    /// What the masters that answered an inspection (`seen` by each of them, `None` where
    /// the lock is free) agree on: each holder that as many of them as its kind's quorum
    /// show, with the lease left that this many give it; no fencing token, which no
    /// master records (the guard's is reckoned from the granting masters' counters); the
    /// most `Locker`s that a majority of all masters count as waiting. `None` when no
    /// holder has its quorum.
    fn agreed(&self, seen: &[Option<Seen>]) -> Option<LockInfo> {
        let views: Vec<&Seen> = seen.iter().flatten().collect();
        // Each token any master shows: its kind, and the lease each master gives it.
        let mut leases: HashMap<&str, (Option<LockKind>, Vec<Option<Duration>>)> = HashMap::new();
        for view in &views {
            for (token, left) in &view.holders {
                let (_, lefts) = leases
                    .entry(token)
                    .or_insert_with(|| (view.kind(), Vec::new()));
                lefts.push(*left);
            }
        }
        let mut kind = None;
        let holders: Vec<HolderInfo> = leases
            .into_iter()
            .filter_map(|(token, (held_as, mut lefts))| {
                let needed = self.quorum(held_as.unwrap_or(LockKind::Exclusive));
                if lefts.len() < needed {
                    return None;
                }
                kind = held_as;
                lefts.sort_unstable_by(|a, b| b.cmp(a));
                Some(HolderInfo::new(token, lefts[needed - 1], None))
            })
            .collect();
        if holders.is_empty() {
            return None;
        }
        let mut waiting: Vec<usize> = views.iter().map(|view| view.lockers).collect();
        waiting.sort_unstable_by(|a, b| b.cmp(a));
        let waiting = waiting.get(majority(self.masters.len()) - 1).copied();
        Some(LockInfo::new(kind, holders, waiting))
    }

    /// Gives back, on every master in `granted`, the hold an attempt that fell short took
    /// there, each within its share of the lease, and in the background on the masters
    /// that did not answer (their grant may land later). A master that does not answer in
    /// time is not asked again during this acquisition (its release may land later).
    async fn roll_back(
        &self,
        request: &Acquire,
        granted: &[(usize, u64)],
        rollback: Rollback<'_>,
        tried: &mut Tried,
    ) {
        rollback.release_all_but(granted);
        let patience = request.lease / PER_MASTER;
        let releases = granted.iter().map(|&(i, fence)| async move {
            let hold = Hold {
                key: &request.key,
                token: &request.token,
                kind: request.kind,
                fence,
            };
            let released = tokio::time::timeout(patience, self.masters[i].release(&hold)).await;
            (i, released.is_ok())
        });
        for (i, answered) in join_all(releases).await {
            if !answered {
                tried.stop_asking(i);
            }
        }
        rollback.disarm();
    }
}

/// This process's clock in microseconds: where a new fence counter starts on every master
/// of an attempt alike.
fn clock_us() -> u64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX)
}

/// The masters a majority of `n` is made of.
fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// How a hold of `kind` is released on one master.
fn release_of(kind: LockKind) -> Release {
    match kind {
        LockKind::Exclusive => Release::Exclusive,
        kind => match kind.sharing() {
            Sharing::Owner => Release::Write,
            sharing => Release::Shared(sharing),
        },
    }
}

/// The masters that an acquisition no longer asks: their answer to an earlier attempt
/// was cut short, and the release that followed may land after a new grant.
#[derive(Debug, Default)]
pub(crate) struct Tried {
    not_asked: Vec<usize>,
}

impl Tried {
    fn stop_asking(&mut self, master: usize) {
        if !self.not_asked.contains(&master) {
            self.not_asked.push(master);
        }
    }

    fn asks(&self, master: usize) -> bool {
        !self.not_asked.contains(&master)
    }
}

/// The masters that may hold the caller's token during an attempt: each from when it is
/// asked until it answers that it does not. Released in the background should the attempt
/// be cut short before it hands the lock over or gives it back.
struct Rollback<'a> {
    store: &'a RedLockStore,
    request: &'a Acquire,
    may_hold: Mutex<Vec<usize>>,
}

impl<'a> Rollback<'a> {
    fn new(store: &'a RedLockStore, request: &'a Acquire) -> Self {
        Self {
            store,
            request,
            may_hold: Mutex::default(),
        }
    }

    fn may_hold(&self) -> MutexGuard<'_, Vec<usize>> {
        // Each update is one push, removal or clear: a poisoned list is still whole.
        self.may_hold.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Master `i` is asked.
    fn asked(&self, i: usize) {
        self.may_hold().push(i);
    }

    /// Master `i` answered that it does not hold the caller's token.
    fn forget(&self, i: usize) {
        self.may_hold().retain(|&m| m != i);
    }

    /// Releases in the background every master that may hold the caller's token but
    /// those of `granted`, which the caller gives back itself.
    fn release_all_but(&self, granted: &[(usize, u64)]) {
        self.may_hold().retain(|&i| {
            let kept = granted.iter().any(|&(g, _)| g == i);
            if !kept {
                self.release_detached(i);
            }
            kept
        });
    }

    /// The attempt handed the lock over, or gave it back: nothing to release. A grant of
    /// a lock handed over that is still to land is the guard's to renew and release.
    fn disarm(&self) {
        self.may_hold().clear();
    }

    fn release_detached(&self, i: usize) {
        let master = &self.store.masters[i];
        let key = master.key(&self.request.key);
        let how = release_of(self.request.kind);
        master.release_detached(&key, &self.request.token, how);
    }
}

impl Drop for Rollback<'_> {
    fn drop(&mut self) {
        for &i in self.may_hold().iter() {
            self.release_detached(i);
        }
    }
}

/// One master's answer to an attempt.
enum Answer {
    Granted {
        fence: u64,
        until: Instant,
    },
    Held(Option<Duration>),
    /// It refused what was asked.
    Refused(LockError),
    /// It failed, or did not answer in time.
    None,
}

/// The answers to an attempt so far.
#[derive(Default)]
struct Tally {
    /// The masters that granted it, each with the token it drew.
    granted: Vec<(usize, u64)>,
    /// When each grant runs out.
    untils: Vec<Instant>,
    /// The shortest lease left among the holders in the way, where known.
    holder_ttl: Option<Duration>,
    /// How many masters answered, granting it or not.
    answered: usize,
    refused: Option<LockError>,
}

impl Tally {
    fn add(&mut self, master: usize, answer: Answer, tried: &mut Tried) {
        match answer {
            Answer::Granted { fence, until } => {
                self.granted.push((master, fence));
                self.untils.push(until);
                self.answered += 1;
            }
            Answer::Held(ttl) => {
                self.holder_ttl = match (self.holder_ttl, ttl) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                self.answered += 1;
            }
            Answer::Refused(e) => self.refused = Some(e),
            Answer::None => tried.stop_asking(master),
        }
    }
}

impl Store for RedLockStore {
    fn name(&self) -> &str {
        "redlock"
    }

    /// Every kind but the fair lock: N independent lines could disagree on its order.
    fn supports(&self, kind: LockKind) -> bool {
        kind != LockKind::Fair
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        Box::pin(wait::acquire(self, request))
    }

    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let answers = self.ask_all(self.patience(), |m| m.release(hold)).await;
            let released = answers.iter().filter(|a| **a == Some(true)).count();
            let answered = answers.iter().flatten().count();
            let needed = self.quorum(hold.kind);
            if answered < needed {
                return Err(self.quorum_error(hold.key, released, needed));
            }
            Ok(released >= needed)
        })
    }

    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        Box::pin(async move {
            let patience = leases
                .iter()
                .map(|r| r.lease / PER_MASTER)
                .min()
                .unwrap_or_default();
            let sent_at = Instant::now();
            let answers = self.ask_all(patience, |m| m.renew(leases)).await;
            let unanswered = answers.iter().filter(|a| a.is_none()).count();
            let mut decided = 0;
            let renewed: Vec<Option<Instant>> = leases
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let mut untils: Vec<Instant> =
                        answers.iter().flatten().filter_map(|a| a[i]).collect();
                    let needed = self.quorum(r.hold.kind);
                    let held = untils.len();
                    if let Some(until) = self.valid_until(r.hold.kind, r.lease, &mut untils) {
                        decided += 1;
                        Some(until)
                    } else if held + unanswered < needed {
                        // No longer held by a quorum, whatever the others say.
                        decided += 1;
                        None
                    } else {
                        // Undecided: the lease keeps its deadline (a renewal never moves
                        // it back) and is asked again at its next check.
                        Some(sent_at)
                    }
                })
                .collect();
            if decided == 0 && !leases.is_empty() {
                let needed = self.quorum(leases[0].hold.kind);
                return Err(self.quorum_error(
                    leases[0].hold.key,
                    self.masters.len() - unanswered,
                    needed,
                ));
            }
            Ok(renewed)
        })
    }

    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let answers = self.ask_all(self.patience(), |m| m.is_held(hold)).await;
            let held = answers.iter().filter(|a| **a == Some(true)).count();
            let answered = answers.iter().flatten().count();
            let needed = self.quorum(hold.kind);
            if held < needed && answered < needed {
                return Err(self.quorum_error(hold.key, held, needed));
            }
            Ok(held >= needed)
        })
    }

    /// On every master; a quorum must answer.
    fn force_unlock<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let answers = self.ask_all(self.patience(), |m| m.force_unlock(key)).await;
            let held = answers.iter().filter(|a| **a == Some(true)).count();
            let answered = answers.iter().flatten().count();
            let needed = majority(self.masters.len());
            if answered < needed {
                return Err(self.quorum_error(key, answered, needed));
            }
            Ok(held > 0)
        })
    }

    /// On every master; a majority must answer. See `agreed` for what they must agree on.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        Box::pin(async move {
            let answers = self.ask_all(self.patience(), |m| m.seen(key)).await;
            let seen: Vec<Option<Seen>> = answers.into_iter().flatten().collect();
            let needed = majority(self.masters.len());
            if seen.len() < needed {
                return Err(self.quorum_error(key, seen.len(), needed));
            }
            Ok(self.agreed(&seen))
        })
    }

    fn available<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, u32> {
        Box::pin(async move {
            let answers = self
                .ask_all(self.patience(), |m| m.available(key, permits))
                .await;
            let mut free: Vec<u32> = answers.into_iter().flatten().collect();
            let needed = self.quorum(LockKind::Semaphore { permits });
            if free.len() < needed {
                return Err(self.quorum_error(key, free.len(), needed));
            }
            // A permit is free when a quorum could grant it.
            free.sort_unstable_by(|a, b| b.cmp(a));
            Ok(free[needed - 1])
        })
    }

    fn set_permits<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let answers = self
                .ask_all(self.patience(), |m| m.set_permits(key, permits))
                .await;
            let set = answers.iter().flatten().count();
            let needed = self.quorum(LockKind::Semaphore { permits });
            if set < needed {
                return Err(self.quorum_error(key, set, needed));
            }
            Ok(())
        })
    }

    fn flush(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            join_all(self.masters.iter().map(|m| m.flush())).await;
        })
    }

    fn close(&self) {
        self.masters.iter().for_each(RedisStore::close);
    }
}

impl ClientWait for RedLockStore {
    type Listening = Listening;
    type Tried = Tried;

    async fn attempt<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
        tried: &'a mut Tried,
    ) -> Result<Attempt, LockError> {
        let patience = request.lease / PER_MASTER;
        let asking = Asking {
            seed: FenceSeed::Given(clock_us()),
            cut_short: CutShort::LeftToCaller,
        };
        let rollback = Rollback::new(self, request);
        let asks = self.masters.iter().enumerate().map(|(i, master)| {
            let asked = tried.asks(i);
            let rollback = &rollback;
            async move {
                if !asked {
                    return (i, Answer::None);
                }
                rollback.asked(i);
                let attempt = master.attempt_asking(request, waits_for, asking);
                let answer = tokio::time::timeout(patience, attempt).await;
                let answer = match answer {
                    Ok(Ok(Attempt::Acquired { fence, until })) => Answer::Granted { fence, until },
                    Ok(Ok(Attempt::Held { ttl, .. })) => {
                        rollback.forget(i);
                        Answer::Held(ttl)
                    }
                    Ok(Err(e)) if e.is_backend() => {
                        tracing::debug!(key = %request.key, error = %e, "a redlock master failed");
                        Answer::None
                    }
                    // Refused for what was asked (a semaphore of another count): every
                    // master refuses it alike.
                    Ok(Err(e)) => {
                        rollback.forget(i);
                        Answer::Refused(e)
                    }
                    Err(_) => Answer::None,
                };
                (i, answer)
            }
        });
        let mut asks: FuturesUnordered<_> = asks.collect();
        let needed = self.quorum(request.kind);
        let mut tally = Tally::default();
        // Until a quorum granted: the others' answers are not waited for. A late grant
        // holds the caller's token, and the guard renews and releases on every master.
        while tally.granted.len() < needed
            && let Some((i, answer)) = asks.next().await
        {
            tally.add(i, answer, tried);
        }
        if tally.refused.is_none()
            && let Some(until) = self.valid_until(request.kind, request.lease, &mut tally.untils)
            && self.fence_raised(request, &tally.granted).await
            && until > Instant::now()
        {
            rollback.disarm();
            return Ok(Attempt::Acquired {
                fence: self.fence(&tally.granted),
                until,
            });
        }
        // Every answer, so that every grant is given back.
        while let Some((i, answer)) = asks.next().await {
            tally.add(i, answer, tried);
        }
        let Tally {
            granted,
            holder_ttl,
            answered,
            refused,
            ..
        } = tally;
        drop(asks);
        self.roll_back(request, &granted, rollback, tried).await;
        if let Some(e) = refused {
            return Err(e);
        }
        let can_answer = self.masters.len() - tried.not_asked.len();
        if answered < needed || can_answer < needed {
            return Err(self.quorum_error(&request.key, granted.len(), needed));
        }
        Ok(Attempt::Held {
            ttl: holder_ttl,
            clock: None,
        })
    }

    fn join(&self, request: &Acquire) -> Joined<Listening> {
        let key = self.masters[0].key(&request.key);
        let hubs = || self.masters.iter().filter_map(|m| m.hub.as_ref());
        hubs().for_each(|hub| hub.ensure_running());
        let line = self.lines.join(key.shared(), |edge| {
            if edge == Edge::Changed {
                hubs().for_each(|hub| hub.subscribe(key.shared().clone()));
            }
        });
        // Each master wakes one waiting `Locker`, not necessarily this one: try again
        // once in line.
        Joined {
            line,
            already_listening: false,
        }
    }

    fn handover(&self, _kind: LockKind) -> Handover {
        Handover::Off
    }

    /// At most a safety poll: the masters' hubs share the line's readiness, and one
    /// whose master is gone may never set it.
    fn until_listening(
        &self,
        line: &Line<Listening>,
        limit: Duration,
    ) -> impl Future<Output = ()> + Send {
        let limit = limit.min(self.safety_poll);
        async move {
            let _ = tokio::time::timeout(limit, line.listening.until_ready()).await;
        }
    }

    fn poll_interval(
        &self,
        holder_ttl: Option<Duration>,
        line: &Line<Listening>,
        failed: u32,
    ) -> Duration {
        self.masters[0].poll_interval(holder_ttl, line, failed)
    }

    fn left(&self, left: Left<'_, Listening>) {
        let key = RedisKey::from_redis(left.line.key());
        for master in &self.masters {
            master.leave_store_line(&key, &left);
        }
        let mut last = false;
        self.lines.leave(left.line, WhenEmpty::Linger, |edge| {
            if edge == Edge::Changed {
                let hubs = self.masters.iter().filter_map(|m| m.hub.as_ref());
                hubs.for_each(|hub| hub.idle(key.shared().clone()));
                last = true;
            }
        });
        if last && !left.held {
            for master in &self.masters {
                master.stop_waiting_detached(&key);
            }
        }
    }
}
