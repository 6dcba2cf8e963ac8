//! RedLock: one lock over N independent masters, held while a quorum of them hold it.
//!
//! Each master is a store of its own (a Redis store for
//! [`RedLockStore`](crate::backend::RedLockStore): connection, scripts, pub/sub hub),
//! spoken to through the small interface of [`master`], and all
//! of them wake the same local [lines](crate::backend::wait::line): a release on any master wakes
//! the waiters here. Waiting is lock-core's client-side wait, with one attempt asking
//! every master at once ([`attempt`]):
//!
//! - each master gets a twentieth of the lease to answer (as redsync does); a master that
//!   does not is released by token in the background, and is not asked again during this
//!   acquisition, so that a late release can never undo a later grant;
//! - the lock is taken when a quorum granted it and it is still valid: it runs until the
//!   quorum-th latest of their leases (each reckoned from when its command was sent) less
//!   the drift allowance. The other masters' answers are not waited for, but their asks
//!   go on in the background until each answers or its share of the lease runs out: one
//!   that grants it late holds the caller's token, which the guard renews and releases
//!   everywhere.
//!   Otherwise every master that granted it releases it before the next attempt;
//! - its fencing token is reckoned from the granting masters' tokens ([`fence`]), and an
//!   owner's is read back from their counters by `inspect`;
//! - a holder id (what an election's candidate calls itself) is kept by each master
//!   beside its hold, as [`Acquire::holder_id`] asks of a store, and `inspect` reports
//!   the one they keep for the holder's token;
//! - renewals, `extend` and `is_held` need the quorum too; a lease that loses it is lost.
//!
//! The quorum is a majority, except for a semaphore of `p` permits, which needs
//! `⌊p·n/(p+1)⌋ + 1` of `n` masters so that `p + 1` holders can never each have theirs
//! ([`quorum`]).
//!
//! The masters are any stores that implement [`Master`]: a [`Store`] with
//! what one lock over several stores needs besides (the module docs of [`master`] say
//! why `Store` alone is not enough). Nothing here knows which store they are:
//! [`RedLockStore`](crate::backend::RedLockStore), over Redis masters, is the one this
//! crate offers, and the quorum is tested over memory masters.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, ready};
use futures_util::stream::{self, StreamExt, select_all};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::store::{Acquire, Hold, HolderChanges, Outcome, Renewal, Store, StoreFuture};
use crate::backend::wait::handover::Handover;
use crate::backend::wait::line::{Edge, Line, Lines, WhenEmpty};
use crate::backend::wait::{self, Attempt, ClientWait, Joined, Left};
use crate::{LockError, LockInfo, LockKey, LockKind};

mod attempt;
mod fence;
pub(crate) mod master;
mod quorum;

use master::{LastWaiter, Master};
pub(crate) use quorum::majority;

/// Whether a master's watch on a lock's holders still watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watching {
    Yes,
    No,
}

/// The share of the lease each master gets to answer an attempt or a renewal.
const PER_MASTER: u32 = 20;

/// How much the clocks of this process and of the masters may drift apart during a
/// lease: it is taken off every lease's validity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Drift {
    /// The share of the lease.
    pub(crate) per_lease: f64,
    /// And a fixed allowance on top.
    pub(crate) fixed: Duration,
}

impl Drift {
    /// The default: 1% of the lease, plus 2 ms.
    pub(crate) const DEFAULT: Drift = Drift {
        per_lease: 0.01,
        fixed: Duration::from_millis(2),
    };

    fn of(self, lease: Duration) -> Duration {
        lease.mul_f64(self.per_lease) + self.fixed
    }
}

/// How RedLock waits for its masters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) drift: Drift,
    /// How long a call other than an attempt or a renewal waits for each master.
    pub(crate) patience: Duration,
    /// The longest a waiter waits for wake-ups to be delivered before it tries again.
    pub(crate) safety_poll: Duration,
}

/// One lock over the masters `M`, held while a quorum of them hold it.
pub(crate) struct RedLock<M: Master> {
    masters: Arc<[M]>,
    /// The waiters of this `Locker`, which every master wakes.
    lines: Arc<Lines<M::Listening>>,
    settings: Settings,
    /// Work that outlives the attempt that started it: the masters' asks, and releases.
    background: TaskTracker,
}

/// Its masters.
impl<M: Master> fmt::Debug for RedLock<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLock")
            .field("masters", &self.masters)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<M: Master> RedLock<M> {
    /// RedLock over `masters`, which wake the waiters of `lines`.
    pub(crate) fn new(
        masters: Vec<M>,
        lines: Arc<Lines<M::Listening>>,
        settings: Settings,
    ) -> Self {
        Self {
            masters: masters.into(),
            lines,
            settings,
            background: TaskTracker::new(),
        }
    }

    /// Master `i`, for tests that change it behind RedLock's back.
    #[cfg(test)]
    pub(crate) fn master(&self, i: usize) -> &M {
        &self.masters[i]
    }

    /// Releases `hold` on master `i` in the background, counted for [`Store::flush`]: it
    /// may hold what an attempt took and did not keep.
    fn release_detached(&self, i: usize, hold: OwnedHold) {
        let masters = self.masters.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("no tokio runtime to release a lock in");
            return;
        };
        self.background.spawn_on(
            async move {
                if let Err(e) = masters[i].release(&hold.as_hold()).await {
                    tracing::warn!(key = %hold.key, error = %e, "background release failed; the lease will expire");
                }
            },
            &runtime,
        );
    }
}

/// A hold to give back in the background.
#[derive(Debug, Clone)]
struct OwnedHold {
    key: LockKey,
    token: Arc<str>,
    kind: LockKind,
    /// Its fencing token on the master, where known (no store releases by it).
    fence: u64,
    holder_id: Option<Arc<str>>,
}

impl OwnedHold {
    /// What `request` may hold on a master, drawn as `fence` there.
    fn of(request: &Acquire, fence: u64) -> Self {
        Self {
            key: request.key.clone(),
            token: request.token.clone(),
            kind: request.kind,
            fence,
            holder_id: request.holder_id.clone(),
        }
    }

    fn as_hold(&self) -> Hold<'_> {
        Hold {
            key: &self.key,
            token: &self.token,
            kind: self.kind,
            fence: self.fence,
            holder_id: self.holder_id.as_deref(),
        }
    }
}

impl<M: Master> Store for RedLock<M> {
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
            let needed = self.quorum(hold.kind);
            let answers = self.ask_all(self.settings.patience, |m| m.release(hold));
            let released = answers
                .await
                .of_quorum(hold.key, needed, |&released| released)?;
            Ok(released.into_iter().filter(|&r| r).count() >= needed)
        })
    }

    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        Box::pin(self.renew_on_quorum(leases))
    }

    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let needed = self.quorum(hold.kind);
            let answers = self.ask_all(self.settings.patience, |m| m.is_held(hold));
            let held = answers.await.of_quorum(hold.key, needed, |&held| held)?;
            Ok(held.into_iter().filter(|&h| h).count() >= needed)
        })
    }

    /// On every master; a majority must answer.
    fn force_unlock<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let needed = majority(self.masters.len());
            let answers = self.ask_all(self.settings.patience, |m| m.force_unlock(key));
            let held = answers.await.of_quorum(key, needed, |_| true)?;
            Ok(held.into_iter().any(|h| h))
        })
    }

    /// On every master; a majority must answer. See `agreed` for what they must agree on.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        Box::pin(async move {
            let needed = majority(self.masters.len());
            let answers = self.ask_all(self.settings.patience, |m| m.holders(key));
            let seen = answers.await.of_quorum(key, needed, |_| true)?;
            Ok(self.agreed(&seen))
        })
    }

    /// A watch on every master; a majority must set theirs. It yields whenever one of
    /// them tells of a change, and ends once one of them stops watching (after telling of
    /// it), so that the follower watches every master again.
    fn watch_holders<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, HolderChanges> {
        Box::pin(async move {
            let needed = majority(self.masters.len());
            let answers = self.ask_all(self.settings.patience, |m| m.watch_holders(key));
            let watches = answers.await.of_quorum(key, needed, |_| true)?;
            let told = select_all(watches.into_iter().map(|changes| {
                let watching = changes.map(|()| Watching::Yes);
                watching.chain(stream::once(ready(Watching::No)))
            }));
            let until_one_stops = stream::unfold(Some(told), |told| async {
                let mut told = told?;
                match told.next().await? {
                    Watching::Yes => Some(((), Some(told))),
                    Watching::No => Some(((), None)),
                }
            });
            let changes: HolderChanges = Box::pin(until_one_stops);
            Ok(changes)
        })
    }

    fn available<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, u32> {
        Box::pin(async move {
            let needed = self.quorum(LockKind::Semaphore { permits });
            let answers = self.ask_all(self.settings.patience, |m| m.available(key, permits));
            let mut free = answers.await.of_quorum(key, needed, |_| true)?;
            // A permit is free when a quorum could grant it.
            free.sort_unstable_by(|a, b| b.cmp(a));
            Ok(free[needed - 1])
        })
    }

    fn set_permits<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let needed = self.quorum(LockKind::Semaphore { permits });
            let answers = self.ask_all(self.settings.patience, |m| m.set_permits(key, permits));
            answers.await.of_quorum(key, needed, |_| true)?;
            Ok(())
        })
    }

    /// Its own background work (asks and releases), then each master's.
    fn flush(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.background.close();
            self.background.wait().await;
            self.background.reopen();
            join_all(self.masters.iter().map(|m| m.flush())).await;
        })
    }

    fn close(&self) {
        self.masters.iter().for_each(M::close);
    }
}

impl<M: Master> ClientWait for RedLock<M> {
    type Listening = M::Listening;
    type Tried = attempt::Tried;

    async fn attempt<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
        tried: &'a mut attempt::Tried,
    ) -> Result<Attempt, LockError> {
        self.attempt_on_quorum(request, waits_for, tried).await
    }

    fn join(&self, request: &Acquire) -> Joined<M::Listening> {
        let key = self.masters[0].line_key(&request.key);
        self.masters.iter().for_each(M::ready_to_listen);
        let line = self.lines.join(&key, |edge| {
            if edge == Edge::Changed {
                self.masters.iter().for_each(|m| m.listen(&key));
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

    /// As the first master waits, for at most a safety poll: the masters share the
    /// line's readiness, and one whose master is gone may never set it.
    fn until_listening(
        &self,
        line: &Line<M::Listening>,
        limit: Duration,
    ) -> impl Future<Output = ()> + Send {
        let limit = limit.min(self.settings.safety_poll);
        self.masters[0].until_listening(line, limit)
    }

    fn poll_interval(
        &self,
        holder_ttl: Option<Duration>,
        line: &Line<M::Listening>,
        failed: u32,
    ) -> Duration {
        self.masters[0].poll_interval(holder_ttl, line, failed)
    }

    fn left(&self, left: Left<'_, M::Listening>) {
        for master in self.masters.iter() {
            master.leave_line(&left);
        }
        let last = if left.held {
            LastWaiter::TookIt
        } else {
            LastWaiter::GaveUp
        };
        self.lines.leave(left.line, WhenEmpty::Linger, |edge| {
            if edge == Edge::Changed {
                let key = left.line.key();
                self.masters
                    .iter()
                    .for_each(|m| m.stop_listening(key, last));
            }
        });
    }
}
