//! Leader election: one candidate among many leads, fenced, on any store.
//!
//! An election is an exclusive lock whose holder is the leader and whose store keeps the
//! leader's id beside the hold, so that any process reads who leads. Everything a lock
//! promises carries over: the watchdog keeps the leadership, [`Leadership::lost`] fires
//! when it ends, and each leader's fencing token is greater than every earlier one's.
//!
//! # What each store promises
//!
//! One leader at a time, as far as the store keeps one holder of a lock at a time:
//! - **memory**: exactly, within its process.
//! - **Lease stores** (Redis, RedLock): a leadership lasts while the watchdog renews its
//!   lease. A leader paused past its lease is deposed: another leads once the lease ran
//!   out, and the old one learns it ([`Leadership::lost`]) at its next renewal.
//! - **Session stores** (ZooKeeper, PostgreSQL, MySQL): a leadership lasts as long as the
//!   leader's session. A leader paused past its session's lease is deposed once the
//!   server ends the session, and learns it when it runs again.
//! - **Sentinel and Cluster**: a failover may lose a leadership taken on the old master
//!   just before it, as it may lose a lock (replication is asynchronous): two may lead
//!   until the old leader's next renewal finds its hold gone. **RedLock** keeps it on a
//!   majority of masters, with the same limits as its locks.
//!
//! Where two may lead at once, only the fencing token keeps their writes apart: pass
//! [`Leadership::fencing_token`] with every write, and have the storage refuse an older
//! one than it has seen.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;

use crate::backend::HolderChanges;
use crate::{LockError, LockGuard, LockKey, LockKind, LockOptions, Locker, MAX_HOLDER_ID_LEN};

/// How often [`Election::watch`] asks the store who leads, unless told otherwise.
pub const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// How long [`Election::run`] waits before it campaigns again after the store failed.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// How long each wait of a campaign without a deadline lasts before the next.
const CAMPAIGN_LEG: Duration = Duration::from_secs(3600);

/// One election, by name, among the processes of a store: made by
/// [`Locker::election`]. Cheap to clone; nothing is sent until it is used.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use lock_core::Locker;
///
/// let locker = Locker::in_memory();
/// let election = locker.election("scheduler");
/// let leadership = election.campaign("replica-a").await?;
/// let leader = election.leader().await?.expect("someone leads");
/// assert_eq!(leader.id, "replica-a");
/// assert_eq!(leader.fencing_token, Some(leadership.fencing_token()));
/// leadership.resign().await?;
/// assert_eq!(election.leader().await?, None);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    locker: Locker,
    name: Arc<str>,
    watch_interval: Duration,
}

/// Who leads an election: [`Election::leader`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The id the leader campaigned with (empty for a holder that gave none, such as a
    /// plain lock of the election's name).
    pub id: String,
    /// Its leadership's fencing token, where the store can tell it: every store of this
    /// crate does, but Sentinel after a failover, whose tokens carry the failover epoch
    /// that the leader's connection saw, which Redis does not record.
    pub fencing_token: Option<u64>,
}

impl Election {
    pub(crate) fn new(locker: Locker, name: &str) -> Self {
        Self {
            locker,
            name: name.into(),
            watch_interval: DEFAULT_WATCH_INTERVAL,
        }
    }

    /// The election's name: the lock its leader holds.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This election, with [`watch`](Self::watch) asking the store who leads every
    /// `interval` (default [`DEFAULT_WATCH_INTERVAL`]).
    pub fn watch_interval(mut self, interval: Duration) -> Self {
        self.watch_interval = interval;
        self
    }

    /// Waits, for as long as it takes, until this candidate leads; `id` is what the
    /// others see of it ([`Leader::id`]), at most [`MAX_HOLDER_ID_LEN`] bytes. Dropping
    /// the future leaves nothing behind, as dropping a lock call does.
    pub async fn campaign(&self, id: impl Into<String>) -> Result<Leadership, LockError> {
        self.campaign_with(id, LockOptions::new()).await
    }

    /// [`campaign`](Self::campaign) with the lease, watchdog and wait of `opts`: with a
    /// wait, [`LockError::Timeout`] once it passes; without one, no deadline. The kind is
    /// always exclusive.
    pub async fn campaign_with(
        &self,
        id: impl Into<String>,
        opts: LockOptions,
    ) -> Result<Leadership, LockError> {
        let id: Arc<str> = check_id(id.into())?.into();
        let opts = opts.kind(LockKind::Exclusive);
        let guard = if opts.wait.is_some() {
            self.locker
                .lock_as(&self.name, opts, Some(id.clone()))
                .await?
        } else {
            loop {
                let leg = opts.wait(CAMPAIGN_LEG);
                match self.locker.lock_as(&self.name, leg, Some(id.clone())).await {
                    Err(e) if e.is_timeout() => continue,
                    taken => break taken?,
                }
            }
        };
        tracing::info!(election = %self.name, id = %id, fence = guard.fencing_token(), "leading");
        Ok(Leadership { guard, id })
    }

    /// Who leads now, as the store sees it, asked from any process, candidate or not:
    /// `None` when nobody does.
    pub async fn leader(&self) -> Result<Option<Leader>, LockError> {
        let Some(info) = self.locker.inspect(&self.name).await? else {
            return Ok(None);
        };
        let Some(holder) = info.holders.into_iter().next() else {
            return Ok(None);
        };
        Ok(Some(Leader {
            id: holder.holder_id.unwrap_or_default(),
            fencing_token: holder.fencing_token,
        }))
    }

    /// Who leads, kept current: the receiver holds the leader as last seen and changes
    /// when another leads or none does. A task asks the store who leads whenever the
    /// store tells of a change ([`Store::watch_holders`](crate::backend::Store::watch_holders)),
    /// and every [`watch_interval`](Self::watch_interval) besides. Where the store tells
    /// (memory, Redis, RedLock, ZooKeeper, PostgreSQL), a follower learns of a leader
    /// taking over, resigning or forced out within a few round trips; of one whose lease
    /// ran out, or whose session ended, within the interval (but on ZooKeeper, which
    /// tells of that too). On MySQL, which cannot tell, a follower learns of every change
    /// within the interval. It stops once every receiver is dropped. A failed ask keeps
    /// the last answer and is logged, and a watch the store could not set is set again
    /// at the next round.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, whose task it spawns.
    pub fn watch(&self) -> watch::Receiver<Option<Leader>> {
        let (tx, rx) = watch::channel(None);
        let election = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(election.watch_interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            let mut changes = None;
            loop {
                if changes.is_none() {
                    changes = election.watch_holders().await;
                }
                match election.leader().await {
                    Ok(leader) => {
                        tx.send_if_modified(|seen| {
                            let changed = *seen != leader;
                            *seen = leader;
                            changed
                        });
                    }
                    Err(e) => {
                        tracing::warn!(election = %election.name, error = %e, "could not learn who leads")
                    }
                }
                let told = async {
                    match &mut changes {
                        Some(changes) => changes.next().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = tx.closed() => return,
                    news = told => if news.is_none() {
                        changes = None;
                    },
                    _ = ticks.tick() => {}
                }
            }
        });
        rx
    }

    /// A watch on who holds the election's lock, set before it is read; none should the
    /// store fail to set it (the next round tries again, and the interval still applies).
    async fn watch_holders(&self) -> Option<HolderChanges> {
        let key = LockKey::with_max_len(&self.name, self.locker.max_key_len());
        let watched = match key {
            Ok(key) => self.locker.store().watch_holders(&key).await,
            Err(e) => Err(e),
        };
        watched
            .inspect_err(
                |e| tracing::warn!(election = %self.name, error = %e, "could not watch who leads"),
            )
            .ok()
    }

    /// Leads and works: campaigns as `id`, runs `work(&leadership)` while leading, and
    /// returns its output once it finishes still leading (resigning then). If the
    /// leadership is lost first, the work is dropped (cancelled) and the campaign begins
    /// again; should the store fail, it begins again a second later. Other errors (a bad
    /// name or id) are returned. What a background job that only one replica may run
    /// calls:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = lock_core::Locker::in_memory();
    /// let swept = locker
    ///     .election("sweeper")
    ///     .run("replica-a", |leadership| {
    ///         let fence = leadership.fencing_token();
    ///         async move { format!("swept under fence {fence}") }
    ///     })
    ///     .await?;
    /// assert!(swept.starts_with("swept"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<F, Fut>(
        &self,
        id: impl Into<String>,
        work: F,
    ) -> Result<Fut::Output, LockError>
    where
        F: FnMut(&Leadership) -> Fut,
        Fut: Future,
    {
        self.run_with(id, LockOptions::new(), work).await
    }

    /// [`run`](Self::run), each campaign made with `opts` as by
    /// [`campaign_with`](Self::campaign_with).
    pub async fn run_with<F, Fut>(
        &self,
        id: impl Into<String>,
        opts: LockOptions,
        mut work: F,
    ) -> Result<Fut::Output, LockError>
    where
        F: FnMut(&Leadership) -> Fut,
        Fut: Future,
    {
        let id = id.into();
        loop {
            let leadership = match self.campaign_with(id.clone(), opts).await {
                Ok(leadership) => leadership,
                Err(e) if e.is_backend() || e.is_quorum() => {
                    tracing::warn!(election = %self.name, error = %e, "campaign failed; trying again");
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let working = work(&leadership);
            match leadership.guard.scope(working).await {
                Ok(out) => {
                    if let Err(e) = leadership.resign().await {
                        tracing::warn!(election = %self.name, error = %e, "resigning after the work failed");
                    }
                    return Ok(out);
                }
                Err(_) => {
                    tracing::warn!(election = %self.name, "leadership lost; the work was cancelled; campaigning again");
                }
            }
        }
    }
}

/// Refuses an id no store could keep.
fn check_id(id: String) -> Result<String, LockError> {
    if id.len() > MAX_HOLDER_ID_LEN {
        return Err(LockError::Config(format!(
            "a candidate's id is at most {MAX_HOLDER_ID_LEN} bytes, got {}",
            id.len()
        )));
    }
    if id.contains('\0') {
        return Err(LockError::Config(
            "a candidate's id cannot contain a NUL character".into(),
        ));
    }
    Ok(id)
}

/// This process leads an election: proof of it, as a [`LockGuard`] is of a lock.
/// Dropping it resigns (in the background, at once), as dropping a guard releases.
#[derive(Debug)]
#[must_use = "leadership ends as soon as it is dropped"]
pub struct Leadership {
    guard: LockGuard,
    id: Arc<str>,
}

impl Leadership {
    /// The id this candidate campaigned with.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Strictly greater than the fencing token of every earlier leader of this election:
    /// pass it with every write the leader makes, so that the storage refuses a former
    /// leader's late ones (see the [crate docs on fencing](crate#fencing)).
    pub fn fencing_token(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Whether this process still leads, as far as it knows without asking (the
    /// leadership was not found lost).
    pub fn is_leader(&self) -> bool {
        !self.guard.is_lost()
    }

    /// A future that completes when the leadership is lost: its lease ran out, its
    /// session ended, or an operator forced it open with [`Locker::force_unlock`]. It
    /// never completes for a leadership resigned normally, and does not borrow it.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.guard.lost()
    }

    /// Runs `fut` while leading: if the leadership is lost first, `fut` is dropped and
    /// the result is [`LockError::Lost`].
    pub async fn scope<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        self.guard.scope(fut).await
    }

    /// Steps down, so that another candidate leads at once; [`LockError::NotHeld`] when
    /// the leadership had already been lost.
    pub async fn resign(self) -> Result<(), LockError> {
        self.guard.release().await
    }
}
