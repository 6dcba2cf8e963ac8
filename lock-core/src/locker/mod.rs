//! The entry point: `Locker`, its builder, and the process-wide default.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::future::Either;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::store::unsupported;
use crate::backend::{Acquire, Acquired, Expiry, MemoryStore, Outcome, Store};
use crate::hold::{Context, Hold};
use crate::options::{DEFAULT_LEASE, DEFAULT_WAIT, Defaults, Resolved};
use crate::reentrancy::Reentry;
use crate::{
    Election, LockError, LockGuard, LockInfo, LockKey, LockKind, LockOptions, Semaphore, key,
    telemetry,
};

pub(crate) mod builder;
pub(crate) mod inner;

pub use builder::LockerBuilder;
use inner::Inner;

static GLOBAL: RwLock<Option<Locker>> = RwLock::new(None);

/// Takes and gives back locks. Cheap to clone (an `Arc` inside): make one per process and
/// share it.
///
/// A `Locker` runs background tasks: a watchdog that renews its guards' leases and, on
/// Redis, a pub/sub listener that wakes its waiters. Dropping its last clone stops them,
/// even while guards it gave are still alive: those guards' leases are no longer renewed,
/// so each is marked lost at once ([`LockGuard::lost`] resolves, a
/// [`scope`](LockGuard::scope) is cancelled), and releasing or dropping one still gives
/// its lock back. Keep the `Locker` for as long as its guards.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use lock_core::Locker;
///
/// // `Locker::connect("redis://127.0.0.1/").await?` for Redis; the in-memory store has
/// // the same semantics within one process.
/// let locker = Locker::in_memory();
///
/// let guard = locker.lock("balance:42").await?;       // waits up to the default 10 s
/// assert!(locker.try_lock("balance:42").await?.is_some(), "same task: re-entered");
/// let other = tokio::spawn({
///     let locker = locker.clone();
///     async move { locker.try_lock("balance:42").await.map(|g| g.is_some()) }
/// });
/// assert!(!other.await.unwrap()?, "another task must wait");
/// guard.release().await?;
///
/// // Or run a future under the lock; it is cancelled if the lease is lost.
/// let balance = locker.with_lock("balance:42", async { 100 + 5 }).await?;
/// assert_eq!(balance, 105);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Locker {
    pub(crate) inner: Arc<Inner>,
    /// Shared by the clones, not by the guards: the last clone dropped closes `inner`.
    _open: Arc<Open>,
}

/// Closes a `Locker`'s background work when its last clone is dropped.
struct Open(Arc<Inner>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("store", &self.inner.store.name())
            .field("default_lease", &self.inner.defaults.lease)
            .field("default_wait", &self.inner.defaults.wait)
            .finish_non_exhaustive()
    }
}

impl Locker {
    /// Starts configuring a `Locker`.
    pub fn builder() -> LockerBuilder {
        LockerBuilder::default()
    }

    /// A `Locker` whose locks live in this process's memory (a [`MemoryStore`]), with the
    /// same semantics as Redis (leases, fencing tokens, wake-ups, errors) on tokio's
    /// clock, so `tokio::time::pause()` applies. For single-process services and for
    /// tests.
    pub fn in_memory() -> Locker {
        let defaults = Defaults {
            lease: DEFAULT_LEASE,
            wait: DEFAULT_WAIT,
        };
        Self::on(
            Arc::new(MemoryStore::new()),
            defaults,
            key::DEFAULT_MAX_KEY_LEN,
        )
    }

    fn on(store: Arc<dyn Store>, defaults: Defaults, max_key_len: usize) -> Locker {
        let inner = Arc::new(Inner::new(store, defaults, max_key_len));
        Locker {
            _open: Arc::new(Open(inner.clone())),
            inner,
        }
    }

    /// Makes `locker` the process-wide default (replacing any earlier one), used where no
    /// locker is named, as by `#[distributed_lock]` without `locker = ..`.
    pub fn set_global(locker: Locker) {
        *GLOBAL.write().unwrap_or_else(|e| e.into_inner()) = Some(locker);
    }

    /// The process-wide default set with [`set_global`](Self::set_global), if any.
    pub fn global() -> Option<Locker> {
        GLOBAL.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The store this `Locker` keeps its locks in. For what only that store does, reach
    /// its type through [`Any`](std::any::Any), which every [`Store`] is:
    ///
    /// ```
    /// use std::any::Any;
    /// use lock_core::Locker;
    /// use lock_core::backend::MemoryStore;
    ///
    /// let locker = Locker::in_memory();
    /// let store: &dyn Any = locker.store().as_ref();
    /// assert!(store.downcast_ref::<MemoryStore>().is_some());
    /// ```
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    pub(crate) fn max_key_len(&self) -> usize {
        self.inner.max_key_len
    }

    pub(crate) fn default_wait(&self) -> Duration {
        self.inner.defaults.wait
    }

    /// Takes the lock `key`, waiting up to the default wait (10 s unless configured) for
    /// its holder to release it; [`LockError::Timeout`] after that.
    pub async fn lock(&self, key: &str) -> Result<LockGuard, LockError> {
        self.lock_with(key, LockOptions::new()).await
    }

    /// Takes the lock `key` with the given wait, lease, watchdog and kind.
    pub fn lock_with(
        &self,
        key: &str,
        opts: LockOptions,
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send + '_ {
        self.lock_as(key, opts, None)
    }

    /// [`lock_with`](Self::lock_with) by a holder that calls itself `holder_id` (checked
    /// by the caller), which the store keeps for whoever inspects the lock.
    pub(crate) fn lock_as(
        &self,
        key: &str,
        opts: LockOptions,
        holder_id: Option<Arc<str>>,
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send + '_ {
        // Checked before the future is made, which so carries only their checked forms.
        let checked = LockKey::with_max_len(key, self.inner.max_key_len)
            .and_then(|key| Ok((key, opts.resolve(&self.inner.defaults)?)));
        let (key, opts) = match checked {
            Ok(checked) => checked,
            Err(e) => return Either::Right(std::future::ready(Err(e))),
        };
        let mut request = Acquire {
            key,
            token: opts.kind.new_token(),
            kind: opts.kind,
            lease: opts.lease,
            holder_id,
            // Both set when the wait starts: at the first poll.
            deadline: Instant::now(),
            since: Instant::now(),
        };
        // What the future needs of the options beyond the request.
        let Resolved { wait, label, .. } = opts;
        let span = tracing::debug_span!("lock_acquire", key = %request.key, kind = ?request.kind, lock = label);
        // A block, not an async fn, which would keep a second copy of the request.
        let acquire = async move {
            let store = &*self.inner.store;
            if !store.supports(request.kind) {
                return Err(unsupported(store, &request.key, request.kind));
            }
            match self
                .inner
                .holds
                .reenter(&request.key, request.kind, Context::current())
            {
                Reentry::Reentered(lease) => {
                    tracing::trace!(key = %request.key, "lock re-entered by the task that holds it");
                    return Ok(LockGuard::new(self.inner.clone(), lease));
                }
                Reentry::Refused { held } => {
                    return Err(LockError::Upgrade {
                        key: request.key.to_string(),
                        held,
                        asked: request.kind,
                    });
                }
                Reentry::NotHeld => {}
            }
            request.since = Instant::now();
            request.deadline = request.since + wait;
            let holder_ttl = loop {
                let outcome = store.acquire(&request).await;
                match outcome.map_err(|e| e.about(&request.key))? {
                    Outcome::Acquired(acquired) if !acquired.ran_out() => {
                        return Ok(self.hold(request, &opts, acquired));
                    }
                    Outcome::Acquired(late) => {
                        // The answer came after the lease it granted ran out (this process
                        // was paused mid-call): the lock may be another's by now.
                        tracing::debug!(key = %request.key, "lock granted with a lease already run out; asking again");
                        self.inner.release_in_background(
                            request.key.clone(),
                            request.token.clone(),
                            request.kind,
                            late.fence,
                            request.holder_id.clone(),
                        );
                        if Instant::now() >= request.deadline {
                            break None;
                        }
                        request.token = request.kind.new_token();
                    }
                    Outcome::Held { holder_ttl } => break holder_ttl,
                }
            };
            let waited = request.since.elapsed();
            if !wait.is_zero() {
                telemetry::timed_out(&request.key, request.kind, label, waited);
            }
            Err(LockError::Timeout {
                key: request.key.to_string(),
                waited,
                holder_ttl,
            })
        };
        Either::Left(acquire.instrument(span))
    }

    /// The guard of the lock `request` took, held by the task that takes it. Its lease
    /// is renewed while the guard lives (or, with the watchdog off, marked lost at its
    /// deadline); a session's end marks it lost.
    fn hold(&self, request: Acquire, opts: &Resolved, acquired: Acquired) -> LockGuard {
        let Acquired { fence, expiry } = acquired;
        let waited = request.since.elapsed();
        let until = match &expiry {
            Expiry::Lease(until) => Some(*until),
            Expiry::Session(_) => None,
        };
        let hold = Arc::new(Hold::new(
            request,
            fence,
            Context::current(),
            until,
            self.inner.clock_zero,
            opts,
        ));
        telemetry::acquired(&hold.key, hold.kind, opts.label, waited);
        self.inner.holds.insert(hold.clone());
        match expiry {
            Expiry::Lease(_) => self.inner.watchdog.watch(hold.clone()),
            Expiry::Session(lost) => {
                let hold = hold.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        () = lost => hold.mark_lost(),
                        () = hold.until_over() => {}
                    }
                });
            }
        }
        LockGuard::new(self.inner.clone(), hold)
    }

    /// Makes one attempt at the lock `key`: `Ok(None)` when someone else holds it.
    pub async fn try_lock(&self, key: &str) -> Result<Option<LockGuard>, LockError> {
        self.try_lock_with(key, LockOptions::new()).await
    }

    /// Makes one attempt at the lock `key` with the lease, watchdog and kind of `opts`
    /// (its wait is ignored): `Ok(None)` when someone else holds it. A task that holds
    /// the lock as a kind that cannot become the one asked for gets
    /// [`LockError::Upgrade`], never `Ok(None)`.
    pub async fn try_lock_with(
        &self,
        key: &str,
        opts: LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        match self.lock_with(key, opts.wait(Duration::ZERO)).await {
            Ok(guard) => Ok(Some(guard)),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Takes the read side of the read-write lock `key`, shared with other readers:
    /// [`lock_with`](Self::lock_with) with [`LockKind::Read`] and the default wait.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = lock_core::Locker::in_memory();
    /// let a = locker.read("report:7").await?;
    /// let b = tokio::spawn({
    ///     let locker = locker.clone();
    ///     async move { locker.read("report:7").await.map(|g| g.fencing_token()) }
    /// });
    /// assert!(b.await.unwrap()? > a.fencing_token(), "two readers at once");
    /// # Ok(())
    /// # }
    /// ```
    pub fn read(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send + '_ {
        self.lock_with(key, LockOptions::new().kind(LockKind::Read))
    }

    /// Takes the write side of the read-write lock `key`, excluding readers and other
    /// writers: [`lock_with`](Self::lock_with) with [`LockKind::Write`] and the default
    /// wait. Readers that ask once a writer waits go in after it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = lock_core::Locker::in_memory();
    /// let write = locker.write("report:7").await?;
    /// // The writer may read too: the same hold, with the same token.
    /// let read = locker.read("report:7").await?;
    /// assert_eq!(read.fencing_token(), write.fencing_token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn write(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<LockGuard, LockError>> + Send + '_ {
        self.lock_with(key, LockOptions::new().kind(LockKind::Write))
    }

    /// The election `name` (a key like any other, checked when it is used): see
    /// [`Election`]. Nothing is sent until it is used.
    pub fn election(&self, name: &str) -> Election {
        Election::new(self.clone(), name)
    }

    /// A handle on the semaphore `key`, which admits `permits` holders at once across
    /// every process: see [`Semaphore`]. Nothing is checked or sent until it is used.
    pub fn semaphore(&self, key: &str, permits: u32) -> Semaphore {
        Semaphore::new(self.clone(), key, permits)
    }

    /// Runs `fut` under the lock `key` (default wait and lease) and releases it after.
    /// If the lease is lost while `fut` runs, `fut` is dropped (cancelled) and the
    /// result is [`LockError::Lost`]. Dropping the returned future releases the lock.
    pub async fn with_lock<F: Future>(&self, key: &str, fut: F) -> Result<F::Output, LockError> {
        self.with_lock_opts(key, LockOptions::new(), fut).await
    }

    /// [`with_lock`](Self::with_lock) with options.
    pub async fn with_lock_opts<F: Future>(
        &self,
        key: &str,
        opts: LockOptions,
        fut: F,
    ) -> Result<F::Output, LockError> {
        let guard = self.lock_with(key, opts).await?;
        let out = guard.scope(fut).await?;
        if let Err(e) = guard.release().await {
            // The work is done and was done under the lock; its result stands.
            tracing::warn!(key, error = %e, "release after with_lock failed");
        }
        Ok(out)
    }

    /// Waits until the locks this `Locker` gives back in the background (for dropped
    /// guards, and for acquisitions cut short after they were sent) have been released.
    /// Call it before the runtime shuts down, after a graceful server shutdown for
    /// instance, so that no lock is left to run out its lease. Each release is bounded by
    /// the connection's [response timeout](LockerBuilder::response_timeout).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = lock_core::Locker::in_memory();
    /// drop(locker.lock("job:1").await?); // released in the background
    /// locker.flush().await;              // ... and now surely released
    /// # Ok(())
    /// # }
    /// ```
    pub async fn flush(&self) {
        self.inner.flush().await;
    }

    /// Frees the lock `key` whoever holds it, and says whether anyone did: an operator's
    /// tool, for a lock whose holder is stuck or gone. Every holder of the key (its owner,
    /// its readers, its permits) loses its hold, and every waiter is woken.
    ///
    /// **This breaks mutual exclusion for a live holder.** It goes on running until its
    /// next renewal (a third of its lease at most) finds the hold gone and its guard
    /// reports the loss ([`LockGuard::lost`] resolves, [`with_lock`](Self::with_lock)
    /// cancels its body); until then it and the next holder run at once, which only a
    /// fencing token checked where the data lives makes safe. No other call releases a
    /// lock but the guard that holds it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = lock_core::Locker::in_memory();
    /// let stuck = locker.lock("job:nightly").await?;
    /// let operator = locker.clone();
    /// assert!(operator.force_unlock("job:nightly").await?);
    /// assert!(!operator.force_unlock("job:nightly").await?, "already free");
    /// # drop(stuck);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock(&self, key: &str) -> Result<bool, LockError> {
        let key = LockKey::with_max_len(key, self.inner.max_key_len)?;
        tracing::warn!(key = %key, "forcing a lock open");
        let forced = self.inner.store.force_unlock(&key).await;
        forced.map_err(|e| e.about(&key))
    }

    /// Who holds the lock `key`, as its store sees it now: `None` when nobody does, else
    /// how it is held, each holder (the first 8 characters of its token, its lease left,
    /// its fencing token) and how many wait for it. An operator's tool, to find out what
    /// a stuck request waits for before [`force_unlock`](Self::force_unlock); it changes
    /// nothing, and the answer may be stale by the time it arrives.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// use lock_core::{LockKind, Locker};
    ///
    /// let locker = Locker::in_memory();
    /// assert_eq!(locker.inspect("job:nightly").await?, None, "free");
    /// let guard = locker.lock("job:nightly").await?;
    /// let info = locker.inspect("job:nightly").await?.expect("held");
    /// assert_eq!(info.kind, Some(LockKind::Exclusive));
    /// let holder = &info.holders[0];
    /// assert_eq!(holder.token_prefix.len(), 8);
    /// assert_eq!(holder.fencing_token, Some(guard.fencing_token()));
    /// assert!(holder.lease_left.unwrap() <= lock_core::DEFAULT_LEASE);
    /// assert_eq!(info.waiting, Some(0));
    /// guard.release().await?;
    /// assert_eq!(locker.inspect("job:nightly").await?, None);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// What each store reports is told on its own `inspect`: [`MemoryStore`]'s,
    /// [`RedisStore`](crate::backend::RedisStore)'s (one server, Sentinel, Cluster),
    /// [`RedLockStore`](crate::backend::RedLockStore)'s,
    /// `ZooKeeperStore`'s,
    /// `PostgresStore`'s and
    /// `MySqlStore`'s (each behind its feature). A store of
    /// your own answers [`LockError::Config`] unless it implements
    /// [`Store::inspect`](crate::backend::Store::inspect).
    pub async fn inspect(&self, key: &str) -> Result<Option<LockInfo>, LockError> {
        let key = LockKey::with_max_len(key, self.inner.max_key_len)?;
        let info = self.inner.store.inspect(&key).await;
        info.map_err(|e| e.about(&key))
    }
}
