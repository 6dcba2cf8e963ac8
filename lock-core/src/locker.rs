//! The entry point: `Locker`, its builder, and the process-wide default.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bb8_redis::RedisConnectionManager;
use tokio::time::Instant;

use crate::backend::memory::MemoryBackend;
use crate::backend::redis::{RedisBackend, RedisConfig, redact};
use crate::backend::{Attempt, Backend, Mode, PLACE_IN_LINE, WaitTicket};
use crate::guard::{Lease, LockGuard};
use crate::options::{DEFAULT_LEASE, DEFAULT_WAIT, Defaults, MIN_LEASE, Resolved};
use crate::reentrancy::{Context, HoldEnd, Holds};
use crate::watchdog::Watchdog;
use crate::{LockError, LockOptions, key};

/// The namespace every Redis key gets unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "lock:";
/// How long a fence counter is kept, unless told otherwise.
pub const DEFAULT_FENCE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long connecting to Redis may take, unless told otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How many releases of a plain lock in a row may pass it straight to a task of the same
/// `Locker`, unless told otherwise.
pub const DEFAULT_LOCAL_HANDOFFS: u32 = 8;

static GLOBAL: RwLock<Option<Locker>> = RwLock::new(None);

/// Takes and gives back locks. Cheap to clone (an `Arc` inside): make one per process and
/// share it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use lock_core::Locker;
///
/// // `Locker::connect("redis://127.0.0.1/").await?` for Redis; the in-memory backend
/// // has the same semantics within one process.
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
}

pub(crate) struct Inner {
    pub(crate) backend: Backend,
    defaults: Defaults,
    max_key_len: usize,
    holds: Holds,
    pub(crate) watchdog: Watchdog,
    epoch: Instant,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match &self.inner.backend {
            Backend::Redis(_) => "redis",
            Backend::Memory(_) => "memory",
        };
        f.debug_struct("Locker")
            .field("backend", &backend)
            .field("default_lease", &self.inner.defaults.lease)
            .field("default_wait", &self.inner.defaults.wait)
            .finish_non_exhaustive()
    }
}

impl Locker {
    /// Connects to the Redis at `url` (`redis://[user:password@]host[:port][/db]`) with a
    /// bb8 pool and the default settings. Fails within the connect timeout when the
    /// server cannot be reached, naming the address (never the password) and the cause.
    pub async fn connect(url: &str) -> Result<Locker, LockError> {
        Self::builder().url(url).build().await
    }

    /// Starts configuring a `Locker`.
    pub fn builder() -> LockerBuilder {
        LockerBuilder::default()
    }

    /// A `Locker` whose locks live in this process's memory, with the same semantics as
    /// Redis (leases, fencing tokens, wake-ups, errors) on tokio's clock, so
    /// `tokio::time::pause()` applies. For single-process services and for tests.
    pub fn in_memory() -> Locker {
        Self::from_backend(
            Backend::Memory(MemoryBackend::new(DEFAULT_FENCE_TTL)),
            Defaults {
                lease: DEFAULT_LEASE,
                wait: DEFAULT_WAIT,
            },
            key::DEFAULT_MAX_KEY_LEN,
        )
    }

    fn from_backend(backend: Backend, defaults: Defaults, max_key_len: usize) -> Locker {
        Locker {
            inner: Arc::new(Inner {
                backend,
                defaults,
                max_key_len,
                holds: Holds::default(),
                watchdog: Watchdog::default(),
                epoch: Instant::now(),
            }),
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

    pub(crate) fn backend(&self) -> &Backend {
        &self.inner.backend
    }

    pub(crate) fn max_key_len(&self) -> usize {
        self.inner.max_key_len
    }

    pub(crate) fn default_wait(&self) -> Duration {
        self.inner.defaults.wait
    }

    pub(crate) fn end_hold(&self, lease: &Arc<Lease>) -> HoldEnd {
        self.inner.holds.end(lease)
    }

    /// Takes the lock `key`, waiting up to the default wait (10 s unless configured) for
    /// its holder to release it; [`LockError::Timeout`] after that.
    pub async fn lock(&self, key: &str) -> Result<LockGuard, LockError> {
        self.lock_with(key, LockOptions::new()).await
    }

    /// Takes the lock `key` with the given wait, lease and watchdog settings.
    pub async fn lock_with(&self, key: &str, opts: LockOptions) -> Result<LockGuard, LockError> {
        key::check(key, self.inner.max_key_len)?;
        let opts = opts.resolve(&self.inner.defaults)?;
        let context = Context::current();
        if let Some(lease) = self.inner.holds.reenter(key, context) {
            tracing::trace!(key, "lock re-entered by the task that holds it");
            return Ok(LockGuard::new(self.clone(), lease));
        }
        let acq = Acquisition::new(self, key, context, opts);
        let lease = acq.run().await?;
        // `self` again, through `acq`: a waiting task keeps one copy of it, not two.
        let locker = acq.locker;
        locker.inner.holds.insert(lease.clone());
        // Renewed while the guard lives, or, with the watchdog off, marked lost at its
        // deadline.
        locker.inner.watchdog.watch(&locker.inner, lease.clone());
        Ok(LockGuard::new(locker.clone(), lease))
    }

    /// Makes one attempt at the lock `key`: `Ok(None)` when someone else holds it.
    pub async fn try_lock(&self, key: &str) -> Result<Option<LockGuard>, LockError> {
        match self
            .lock_with(key, LockOptions::new().wait(Duration::ZERO))
            .await
        {
            Ok(guard) => Ok(Some(guard)),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(e),
        }
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
    /// the connection's response timeout.
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
        self.inner.backend.flush().await;
    }
}

/// One call's acquisition: what its attempts and its lease are made of. A task waiting
/// for a lock carries this, its place in line, and a poll timer: the future of a call
/// that waits is kept small, as thousands of them may wait at once.
struct Acquisition<'a> {
    locker: &'a Locker,
    /// The lock's name, borrowed from the caller until a lease needs it.
    name: &'a str,
    token: Arc<str>,
    context: Context,
    opts: Resolved,
    start: Instant,
}

impl<'a> Acquisition<'a> {
    fn new(locker: &'a Locker, name: &'a str, context: Context, opts: Resolved) -> Self {
        Acquisition {
            locker,
            name,
            token: Arc::from(
                &*uuid::Uuid::new_v4()
                    .hyphenated()
                    .encode_lower(&mut uuid::Uuid::encode_buffer()),
            ),
            context,
            opts,
            start: Instant::now(),
        }
    }

    fn backend(&self) -> &Backend {
        &self.locker.inner.backend
    }

    fn deadline(&self) -> Instant {
        self.start + self.opts.wait
    }

    /// Takes the lock: one attempt, then, if it is held, waits for releases (or, for a
    /// fair lock, its turn) until the deadline. One body, not one per phase, and an
    /// async block rather than an async fn: an async fn keeps each argument in its
    /// future for its whole life beside the copy its body works with.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn would keep a second copy of `self` in every waiting task"
    )]
    fn run(&self) -> impl Future<Output = Result<Arc<Lease>, LockError>> + Send + '_ {
        async move {
            // The uncontended path: one round trip, nothing registered.
            let (mut holder_ttl, clock_us) = match self.attempt(self.start).await? {
                Attempt::Acquired { fence, left } => {
                    return Ok(self.granted(fence, self.start, left));
                }
                Attempt::Held { ttl, clock_us } => (ttl, clock_us),
            };
            if self.opts.wait.is_zero() {
                return Err(timeout(self.name, self.start, holder_ttl));
            }
            // The latest attempt's send time and the backend's clock it read (a fair
            // attempt): a hand-over is reckoned against them.
            let mut clock = clock_us.map(|us| (self.start, us));
            tracing::debug!(key = %self.name, wait = ?self.opts.wait, "lock held: waiting");
            // A fair waiter is in line from here on; the ticket takes it out of the line
            // if it ends without the lock.
            let mut ticket =
                self.backend()
                    .wait_for(self.name, &self.token, self.opts.lease, self.opts.fair);
            // Subscribed before the next attempt, so no release can slip between the
            // attempt and the wait. Boxed, as it is awaited once: the parked task needs no
            // room for it.
            let limit = self.deadline().saturating_duration_since(Instant::now());
            Box::pin(ticket.until_ready(limit)).await;
            loop {
                if let (Some(grant), Some((sent_at, clock_us))) = (ticket.take_grant(), clock) {
                    // Handed over at `at_us` on the backend's clock: that long after the
                    // latest attempt was sent, at the earliest. A hand-over older than that
                    // attempt is stale (the attempt would have found the lock ours): its
                    // lease already ran out.
                    if let Some(after) = grant.at_us.checked_sub(clock_us) {
                        let started = sent_at + Duration::from_micros(after);
                        ticket.succeeded();
                        return Ok(self.granted(grant.fence, started, None));
                    }
                }
                if let Some((fence, sent_at)) = ticket.take_pass() {
                    // Passed by a release of this Locker, sent at `sent_at`.
                    ticket.succeeded();
                    return Ok(self.granted(fence, sent_at, None));
                }
                // Not right after joining waiters that were being told of releases.
                if !std::mem::take(&mut ticket.joined_subscribed) {
                    let sent_at = Instant::now();
                    match self.attempt(sent_at).await? {
                        Attempt::Acquired { fence, left } => {
                            ticket.succeeded();
                            return Ok(self.granted(fence, sent_at, left));
                        }
                        Attempt::Held { ttl, clock_us } => {
                            holder_ttl = ttl;
                            clock = clock_us.map(|us| (sent_at, us));
                        }
                    }
                    ticket.failed += 1;
                }
                let Some(nap) = self.nap(holder_ttl, &ticket) else {
                    return Err(timeout(self.name, self.start, holder_ttl));
                };
                // Until signalled, or the poll is due.
                let signal = std::future::poll_fn(|cx| ticket.poll_signal(cx));
                if tokio::time::timeout(nap, signal).await.is_err() {
                    tracing::trace!(key = %self.name, "poll due");
                }
            }
        }
    }

    /// How long to wait before the next attempt; `None` once the deadline has passed.
    fn nap(&self, holder_ttl: Option<Duration>, ticket: &WaitTicket<'_>) -> Option<Duration> {
        let left = self.deadline().checked_duration_since(Instant::now())?;
        if left.is_zero() {
            return None;
        }
        Some(self.backend().poll_interval(holder_ttl, ticket).min(left))
    }

    /// One attempt sent at `now`. A fair waiter keeps its place in line while it waits,
    /// never past its deadline. The Redis call is boxed: its future is large, and a task
    /// waiting between attempts should not carry room for it.
    async fn attempt(&self, now: Instant) -> Result<Attempt, LockError> {
        let deadline = self.deadline();
        let mode = if self.opts.fair {
            Mode::Fair {
                place: deadline.saturating_duration_since(now).min(PLACE_IN_LINE),
            }
        } else {
            Mode::Plain {
                waits: now < deadline,
            }
        };
        let backend = self.backend();
        Box::pin(backend.try_acquire(self.name, &self.token, self.opts.lease, mode)).await
    }

    /// The lease of the lock taken, running for `left` (a whole lease unless said) from
    /// `started`.
    fn granted(&self, fence: u64, started: Instant, left: Option<Duration>) -> Arc<Lease> {
        tracing::debug!(key = %self.name, fence, "lock acquired");
        Arc::new(Lease::new(
            self.name.into(),
            self.token.clone(),
            fence,
            self.context,
            &self.opts,
            started,
            left.unwrap_or(self.opts.lease),
            self.locker.inner.epoch,
        ))
    }
}

fn timeout(name: &str, start: Instant, holder_ttl: Option<Duration>) -> LockError {
    let waited = start.elapsed();
    tracing::debug!(key = name, ?waited, "lock wait timed out");
    LockError::Timeout {
        key: name.to_owned(),
        waited,
        holder_ttl,
    }
}

/// Configures a [`Locker`]. Every setting is optional except a backend: a Redis
/// [`url`](Self::url), a bb8 [`pool`](Self::pool), or [`in_memory`](Self::in_memory).
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// use lock_core::Locker;
///
/// let locker = Locker::builder()
///     .url("redis://127.0.0.1:6379/")
///     .namespace("billing:lock:")
///     .default_lease(Duration::from_secs(10))
///     .default_wait(Duration::from_secs(2))
///     .build()
///     .await?;
/// # let _ = locker;
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct LockerBuilder {
    url: Option<String>,
    pool: Option<bb8::Pool<RedisConnectionManager>>,
    in_memory: bool,
    namespace: Option<String>,
    default_lease: Option<Duration>,
    default_wait: Option<Duration>,
    max_key_len: Option<usize>,
    fence_ttl: Option<Duration>,
    connect_timeout: Option<Duration>,
    local_handoffs: Option<u32>,
}

impl fmt::Debug for LockerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockerBuilder")
            .field("url", &self.url.as_deref().map(redact))
            .field("pool", &self.pool.is_some())
            .field("in_memory", &self.in_memory)
            .field("namespace", &self.namespace)
            .field("default_lease", &self.default_lease)
            .field("default_wait", &self.default_wait)
            .field("max_key_len", &self.max_key_len)
            .field("fence_ttl", &self.fence_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("local_handoffs", &self.local_handoffs)
            .finish()
    }
}

impl LockerBuilder {
    /// The Redis server to use. With a [`pool`](Self::pool) too, commands go through the
    /// pool and the url serves the pub/sub connection that wakes waiters.
    pub fn url(mut self, url: &str) -> Self {
        self.url = Some(url.to_owned());
        self
    }

    /// A bb8 pool of Redis connections to use. Without a [`url`](Self::url) as well,
    /// there is no pub/sub connection, and waiters poll (with backoff, bounded by the
    /// holder's lease) instead of being woken at once.
    ///
    /// The `Locker` has the pool's manager open one multiplexed connection and shares it
    /// between all its calls (a multiplexed connection serves many tasks at once); after
    /// it breaks, it opens another the same way.
    pub fn pool(mut self, pool: bb8::Pool<RedisConnectionManager>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Keep the locks in this process's memory (see [`Locker::in_memory`]).
    pub fn in_memory(mut self) -> Self {
        self.in_memory = true;
        self
    }

    /// The prefix of every Redis key (default `"lock:"`): lock `N` is the key `P{N}`.
    /// Braces and control characters are refused.
    pub fn namespace(mut self, prefix: &str) -> Self {
        self.namespace = Some(prefix.to_owned());
        self
    }

    /// The lease when a call does not set one (default 30 s).
    pub fn default_lease(mut self, d: Duration) -> Self {
        self.default_lease = Some(d);
        self
    }

    /// The wait when a call does not set one (default 10 s).
    pub fn default_wait(mut self, d: Duration) -> Self {
        self.default_wait = Some(d);
        self
    }

    /// The longest lock name accepted, in bytes (default 512).
    pub fn max_key_len(mut self, bytes: usize) -> Self {
        self.max_key_len = Some(bytes);
        self
    }

    /// How long a lock's fence counter is kept (default 7 days). Its expiry is renewed
    /// every 64 acquisitions, so an idle lock leaves nothing behind for long. Tokens stay
    /// increasing when a counter expires, however busy its lock: a new counter starts
    /// from the server clock in microseconds.
    pub fn fence_ttl(mut self, d: Duration) -> Self {
        self.fence_ttl = Some(d);
        self
    }

    /// How long connecting to Redis may take (default 5 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = Some(d);
        self
    }

    /// How many releases of a plain lock in a row may pass it straight to a task of this
    /// `Locker` that waits for it (default 8; 0 turns passing off). On Redis, a pass
    /// changes the owner and draws the waiter's fencing token in one round trip, where a
    /// release, its wake-up and the waiter's next attempt take two; the longest-waiting
    /// local task gets it. After this many passes in a row the lock is freed for every
    /// contender, so tasks of other processes, woken then, get their chance: a plain lock
    /// makes no promise of order (a [fair](crate::LockOptions::fair) one does, and is
    /// never passed this way). The in-memory backend has no use for it.
    pub fn local_handoffs(mut self, n: u32) -> Self {
        self.local_handoffs = Some(n);
        self
    }

    /// Checks the settings and, for Redis, connects.
    pub async fn build(self) -> Result<Locker, LockError> {
        let defaults = Defaults {
            lease: self.default_lease.unwrap_or(DEFAULT_LEASE),
            wait: self.default_wait.unwrap_or(DEFAULT_WAIT),
        };
        if defaults.lease < MIN_LEASE {
            return Err(LockError::Config(format!(
                "default lease must be at least {MIN_LEASE:?}, got {:?}",
                defaults.lease
            )));
        }
        let max_key_len = self.max_key_len.unwrap_or(key::DEFAULT_MAX_KEY_LEN);
        if max_key_len == 0 {
            return Err(LockError::Config(
                "max key length must be at least 1".into(),
            ));
        }
        let fence_ttl = self.fence_ttl.unwrap_or(DEFAULT_FENCE_TTL);
        if fence_ttl < Duration::from_secs(1) {
            return Err(LockError::Config(format!(
                "fence ttl must be at least 1s, got {fence_ttl:?}"
            )));
        }
        let namespace = self
            .namespace
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
        if namespace.contains(['{', '}']) || namespace.chars().any(char::is_control) {
            return Err(LockError::Config(format!(
                "namespace {namespace:?} must not contain braces or control characters"
            )));
        }
        let connect_timeout = self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);

        let backend = match (self.in_memory, self.url, self.pool) {
            (true, None, None) => Backend::Memory(MemoryBackend::new(fence_ttl)),
            (true, _, _) => {
                return Err(LockError::Config(
                    "in_memory() cannot be combined with url(..) or pool(..)".into(),
                ));
            }
            (false, None, None) => {
                return Err(LockError::Config(
                    "no backend: call url(..), pool(..) or in_memory() on the builder".into(),
                ));
            }
            (false, url, pool) => {
                let client = url
                    .as_deref()
                    .map(|url| {
                        redis::Client::open(url).map_err(|e| {
                            LockError::Config(format!("invalid redis url {}: {e}", redact(url)))
                        })
                    })
                    .transpose()?;
                let address = client.as_ref().map_or_else(
                    || "the pooled server".to_owned(),
                    |c| c.get_connection_info().addr().to_string(),
                );
                let pool = match (pool, &client) {
                    (Some(pool), _) => pool,
                    (None, client) => {
                        let info = client
                            .as_ref()
                            .map(|c| c.get_connection_info().clone())
                            .ok_or_else(|| LockError::Config("no redis url".into()))?;
                        let manager = RedisConnectionManager::new(info)
                            .map_err(|e| LockError::Config(format!("invalid redis url: {e}")))?;
                        bb8::Pool::builder()
                            .max_size(1)
                            .connection_timeout(connect_timeout)
                            .build_unchecked(manager)
                    }
                };
                Backend::Redis(Arc::new(
                    RedisBackend::connect(RedisConfig {
                        client,
                        pool,
                        address,
                        namespace,
                        fence_ttl,
                        connect_timeout,
                        local_handoffs: self.local_handoffs.unwrap_or(DEFAULT_LOCAL_HANDOFFS),
                    })
                    .await?,
                ))
            }
        };
        Ok(Locker::from_backend(backend, defaults, max_key_len))
    }
}
