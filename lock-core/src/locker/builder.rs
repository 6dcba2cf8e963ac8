//! Configuring a `Locker`: its store and its defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bb8_redis::RedisConnectionManager;

use super::Locker;
use crate::backend::redis::{
    ClusterSeeds, Drift, RedLockStore, RedisConfig, RedisStore, Sentinels, Timeouts, redact,
};
use crate::backend::{MemoryStore, Store};
use crate::options::{DEFAULT_FENCE_TTL, DEFAULT_LEASE, DEFAULT_WAIT, Defaults, MIN_LEASE};
use crate::{LockError, key};

/// The namespace every Redis key gets unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "lock:";
/// How long connecting to Redis may take, unless told otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a command may wait for Redis's answer, unless told otherwise (redis-rs's own
/// default).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
/// How many releases of an exclusive lock in a row may hand it straight to a task of the
/// same `Locker`, unless told otherwise.
pub const DEFAULT_LOCAL_HANDOVERS: u32 = 8;
/// How long a waiter woken over pub/sub waits before trying again anyway, unless told
/// otherwise.
pub const DEFAULT_SAFETY_POLL: Duration = Duration::from_secs(1);
/// The shortest safety poll accepted.
const MIN_SAFETY_POLL: Duration = Duration::from_millis(10);
/// The longest safety poll accepted: a fair waiter asks again at least this often to
/// keep its place in line.
const MAX_SAFETY_POLL: Duration = Duration::from_secs(4);

/// Configures a [`Locker`]. Every setting is optional except a store: a Redis
/// [`url`](Self::url), a bb8 [`pool`](Self::pool), the master of Redis
/// [Sentinels](Self::sentinel), a Redis [Cluster](Self::cluster), RedLock over independent
/// [masters](Self::redlock), [`in_memory`](Self::in_memory), or a [`store`](Self::store)
/// of your own.
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
    redlock: Option<Vec<String>>,
    redlock_drift: Option<Drift>,
    sentinel: Option<(Vec<String>, String)>,
    cluster: Option<Vec<String>>,
    in_memory: bool,
    store: Option<Arc<dyn Store>>,
    namespace: Option<String>,
    default_lease: Option<Duration>,
    default_wait: Option<Duration>,
    max_key_len: Option<usize>,
    fence_ttl: Option<Duration>,
    connect_timeout: Option<Duration>,
    response_timeout: Option<Duration>,
    local_handovers: Option<u32>,
    safety_poll: Option<Duration>,
    trust: Trust,
}

impl fmt::Debug for LockerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockerBuilder")
            .field("url", &self.url.as_deref().map(redact))
            .field("pool", &self.pool.is_some())
            .field(
                "redlock",
                &self
                    .redlock
                    .as_ref()
                    .map(|urls| urls.iter().map(|u| redact(u)).collect::<Vec<_>>()),
            )
            .field("redlock_drift", &self.redlock_drift)
            .field(
                "cluster",
                &self
                    .cluster
                    .as_ref()
                    .map(|urls| urls.iter().map(|u| redact(u)).collect::<Vec<_>>()),
            )
            .field(
                "sentinel",
                &self.sentinel.as_ref().map(|(urls, name)| {
                    let urls: Vec<_> = urls.iter().map(|u| redact(u)).collect();
                    (urls, name.clone())
                }),
            )
            .field("in_memory", &self.in_memory)
            .field("store", &self.store.as_ref().map(|s| s.name().to_owned()))
            .field("namespace", &self.namespace)
            .field("default_lease", &self.default_lease)
            .field("default_wait", &self.default_wait)
            .field("max_key_len", &self.max_key_len)
            .field("fence_ttl", &self.fence_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("local_handovers", &self.local_handovers)
            .field("safety_poll", &self.safety_poll)
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

    /// Hold every lock on a quorum of these independent Redis masters (RedLock; an odd
    /// number of them, at least 3): see [`Locker::redlock`].
    pub fn redlock<I, S>(mut self, master_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls = master_urls.into_iter().map(|u| u.as_ref().to_owned());
        self.redlock = Some(urls.collect());
        self
    }

    /// How far the clocks of this process and the RedLock masters may drift apart during
    /// a lease: `per_lease` of the lease plus `fixed` is taken off every lease's validity
    /// (default 1% of the lease plus 2 ms). Only for [`redlock`](Self::redlock).
    pub fn redlock_drift(mut self, per_lease: f64, fixed: Duration) -> Self {
        self.redlock_drift = Some(Drift { per_lease, fixed });
        self
    }

    /// Keep the locks in the Redis Cluster that these seed nodes belong to: see
    /// [`Locker::cluster`].
    pub fn cluster<I, S>(mut self, seed_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls = seed_urls.into_iter().map(|u| u.as_ref().to_owned());
        self.cluster = Some(urls.collect());
        self
    }

    /// Keep the locks on the master that these Redis Sentinels name `master_name`,
    /// following it through failovers: see [`Locker::sentinel`].
    pub fn sentinel<I, S>(mut self, sentinel_urls: I, master_name: &str) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls = sentinel_urls.into_iter().map(|u| u.as_ref().to_owned());
        self.sentinel = Some((urls.collect(), master_name.to_owned()));
        self
    }

    /// Keep the locks in this process's memory (see [`Locker::in_memory`]).
    pub fn in_memory(mut self) -> Self {
        self.in_memory = true;
        self
    }

    /// Keep the locks in `store`: one of your own (see [`crate::backend`]), or a
    /// [`MemoryStore`] shared with other `Locker`s.
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The prefix of every Redis key (default `"lock:"`): lock `K` is the key `P{K}`.
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

    /// The longest lock key accepted, in bytes (default 512).
    pub fn max_key_len(mut self, bytes: usize) -> Self {
        self.max_key_len = Some(bytes);
        self
    }

    /// How long a lock's fence counter is kept (default 7 days), in Redis or in memory.
    /// Its expiry is renewed every 64 acquisitions, so an idle lock leaves nothing
    /// behind for long. Tokens stay increasing when a counter expires, however busy its
    /// lock: a new counter starts from the server clock in microseconds.
    pub fn fence_ttl(mut self, d: Duration) -> Self {
        self.fence_ttl = Some(d);
        self
    }

    /// How long connecting to Redis may take (default 5 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = Some(d);
        self
    }

    /// How long a command may wait for Redis's answer before its call fails with
    /// [`LockError::Backend`] (default 500 ms, redis-rs's own). Commands queue on one
    /// connection per server, so a burst of many thousand first attempts at once, a
    /// server busy with a slow command, or a slow network can take longer than the
    /// default; raise it there. An acquisition that timed out may still have taken its
    /// lock: a release follows it on the same connection, in the background, and should
    /// that fail too, the lock runs out with its lease. Applies to every Redis
    /// deployment, a [`pool`](Self::pool)'s connection included.
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.response_timeout = Some(d);
        self
    }

    /// How many releases of an exclusive lock in a row may hand it straight to a task of
    /// this `Locker` that waits for it (default 8; 0 turns local hand-overs off). On
    /// Redis, a local hand-over changes the owner and draws the waiter's fencing token in
    /// one round trip, where a release, its wake-up and the waiter's next attempt take
    /// two; the longest-waiting local task gets it. After this many in a row the lock is
    /// freed for every contender, so tasks of other processes, woken then, get their
    /// chance: an exclusive lock makes no promise of order (a
    /// [fair](crate::LockKind::Fair) one does, and is never handed over this way). The
    /// in-memory store has no use for it.
    pub fn local_handovers(mut self, n: u32) -> Self {
        self.local_handovers = Some(n);
        self
    }

    /// Trusts the certificate authority `pem` (a PEM certificate) for `rediss://` urls,
    /// instead of the system's authorities: for servers whose certificate a private
    /// authority signed. Applies to [`url`](Self::url) and [`redlock`](Self::redlock).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use lock_core::Locker;
    ///
    /// let locker = Locker::builder()
    ///     .url("rediss://redis.internal:6380/")
    ///     .tls_root_certificate(std::fs::read("/etc/redis/ca.crt")?)
    ///     .build()
    ///     .await?;
    /// # let _ = locker;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.trust.root = Some(pem.into());
        self
    }

    /// How long a waiter that Redis wakes over pub/sub waits for a wake-up before it tries
    /// again anyway, as a safety net for a wake-up that was lost (default 1 s, jittered
    /// down by up to a quarter; from 10 ms to 4 s). A waiter is never later than its
    /// holder's lease, and a waiter without wake-ups backs off from 5 ms up to this.
    pub fn safety_poll(mut self, d: Duration) -> Self {
        self.safety_poll = Some(d);
        self
    }

    /// Checks the settings and, for Redis, connects.
    pub async fn build(self) -> Result<Locker, LockError> {
        let trust = self.trust.clone();
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
        let safety_poll = self.safety_poll.unwrap_or(DEFAULT_SAFETY_POLL);
        if !(MIN_SAFETY_POLL..=MAX_SAFETY_POLL).contains(&safety_poll) {
            return Err(LockError::Config(format!(
                "safety poll must be from {MIN_SAFETY_POLL:?} to {MAX_SAFETY_POLL:?}, got {safety_poll:?}"
            )));
        }
        let timeouts = Timeouts {
            connect: self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            response: self.response_timeout.unwrap_or(DEFAULT_RESPONSE_TIMEOUT),
        };
        if timeouts.response.is_zero() {
            return Err(LockError::Config(
                "response timeout must not be zero".into(),
            ));
        }
        let local_handovers = self.local_handovers.unwrap_or(DEFAULT_LOCAL_HANDOVERS);
        let redis = self.url.is_some() || self.pool.is_some();
        if let Some(urls) = self.redlock {
            if redis
                || self.in_memory
                || self.store.is_some()
                || self.sentinel.is_some()
                || self.cluster.is_some()
            {
                return Err(LockError::Config(
                    "redlock(..) cannot be combined with url(..), pool(..), sentinel(..), in_memory() or store(..)"
                        .into(),
                ));
            }
            if urls.len() < 3 || urls.len() % 2 == 0 {
                return Err(LockError::Config(format!(
                    "redlock needs an odd number of masters, at least 3; got {}",
                    urls.len()
                )));
            }
            let drift = self.redlock_drift.unwrap_or(Drift::DEFAULT);
            if !(0.0..0.5).contains(&drift.per_lease) {
                return Err(LockError::Config(format!(
                    "redlock drift must be from 0 to less than half the lease, got {}",
                    drift.per_lease
                )));
            }
            let configs = urls
                .into_iter()
                .map(|url| {
                    redis_config(
                        Some(url),
                        None,
                        self.namespace.clone(),
                        fence_ttl,
                        timeouts,
                        // A release on one master cannot hand the lock over on the others.
                        0,
                        safety_poll,
                    )
                    .and_then(|config| trust.apply(config))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let store = RedLockStore::connect(configs, drift).await?;
            return Ok(Locker::on(Arc::new(store), defaults, max_key_len));
        }
        // What every Redis deployment shares; its server is set apart.
        let namespace = self.namespace.clone();
        let shared = || {
            let (url, pool) = (None, None);
            let namespace = namespace.clone();
            redis_config(
                url,
                pool,
                namespace,
                fence_ttl,
                timeouts,
                local_handovers,
                safety_poll,
            )
        };
        if let Some(urls) = self.cluster {
            if redis || self.in_memory || self.store.is_some() || self.sentinel.is_some() {
                return Err(LockError::Config(
                    "cluster(..) cannot be combined with url(..), pool(..), sentinel(..), redlock(..), in_memory() or store(..)"
                        .into(),
                ));
            }
            let shown: Vec<String> = urls.iter().map(|u| redact(u)).collect();
            let config = RedisConfig {
                cluster: Some(cluster_seeds(&urls, timeouts)?),
                address: format!("the cluster of {}", shown.join(", ")),
                ..shared()?
            };
            return on_redis(config, defaults, max_key_len).await;
        }
        if let Some((urls, master_name)) = self.sentinel {
            if redis || self.in_memory || self.store.is_some() {
                return Err(LockError::Config(
                    "sentinel(..) cannot be combined with url(..), pool(..), redlock(..), in_memory() or store(..)"
                        .into(),
                ));
            }
            let sentinels = Sentinels::new(&urls, &master_name, timeouts.connect)?;
            let config = RedisConfig {
                address: sentinels.describe(),
                sentinel: Some(Arc::new(sentinels)),
                ..shared()?
            };
            return on_redis(config, defaults, max_key_len).await;
        }
        if self.redlock_drift.is_some() {
            return Err(LockError::Config(
                "redlock_drift(..) applies only to redlock(..)".into(),
            ));
        }
        let store: Arc<dyn Store> = match (self.store, self.in_memory, redis) {
            (Some(store), false, false) => store,
            (Some(_), _, _) => {
                return Err(LockError::Config(
                    "store(..) cannot be combined with in_memory(), url(..) or pool(..)".into(),
                ));
            }
            (None, true, false) => Arc::new(MemoryStore::with_fence_ttl(fence_ttl)),
            (None, true, true) => {
                return Err(LockError::Config(
                    "in_memory() cannot be combined with url(..) or pool(..)".into(),
                ));
            }
            (None, false, false) => {
                return Err(LockError::Config(
                    "no store: call url(..), pool(..), sentinel(..), cluster(..), redlock(..), in_memory() or store(..) on the builder"
                        .into(),
                ));
            }
            (None, false, true) => {
                let config = redis_config(
                    self.url,
                    self.pool,
                    self.namespace,
                    fence_ttl,
                    timeouts,
                    local_handovers,
                    safety_poll,
                )?;
                Arc::new(RedisStore::connect(trust.apply(config)?).await?)
            }
        };
        Ok(Locker::on(store, defaults, max_key_len))
    }
}

/// The certificate authority that `rediss://` urls are checked against: one given to
/// [`LockerBuilder::tls_root_certificate`], or else the system's.
#[derive(Debug, Clone, Default)]
struct Trust {
    #[cfg(feature = "tls")]
    root: Option<Vec<u8>>,
}

impl Trust {
    /// `config`, its server's client trusting this authority.
    #[cfg(feature = "tls")]
    fn apply(&self, mut config: RedisConfig) -> Result<RedisConfig, LockError> {
        let (Some(root), Some(client)) = (&self.root, &config.client) else {
            return Ok(config);
        };
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root.clone()),
        };
        let info = client.get_connection_info().clone();
        let client = redis::Client::build_with_tls(info, certificates)
            .map_err(|e| LockError::Config(format!("tls root certificate: {e}")))?;
        config.client = Some(client);
        Ok(config)
    }

    /// `config` as it is: without the `tls` feature, no authority is given.
    #[cfg(not(feature = "tls"))]
    fn apply(&self, config: RedisConfig) -> Result<RedisConfig, LockError> {
        Ok(config)
    }
}

/// A `Locker` on the Redis deployment of `config`, once connected.
async fn on_redis(
    config: RedisConfig,
    defaults: Defaults,
    max_key_len: usize,
) -> Result<Locker, LockError> {
    let store = RedisStore::connect(config).await?;
    Ok(Locker::on(Arc::new(store), defaults, max_key_len))
}

/// The client of the Redis Cluster that the nodes at `urls` belong to, and the nodes
/// themselves, for the pub/sub connection.
fn cluster_seeds(urls: &[String], timeouts: Timeouts) -> Result<ClusterSeeds, LockError> {
    if urls.is_empty() {
        return Err(LockError::Config(
            "cluster needs at least one seed url".into(),
        ));
    }
    let invalid = |url: &str, e: redis::RedisError| {
        LockError::Config(format!("invalid cluster url {}: {e}", redact(url)))
    };
    let nodes = urls
        .iter()
        .map(|url| {
            redis::IntoConnectionInfo::into_connection_info(url.as_str())
                .map_err(|e| invalid(url, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let client = redis::cluster::ClusterClient::builder(urls.iter().map(String::as_str))
        .connection_timeout(timeouts.connect)
        .response_timeout(timeouts.response)
        .build()
        .map_err(|e| invalid(&urls[0], e))?;
    Ok(ClusterSeeds { client, nodes })
}

/// Checks the Redis settings.
fn redis_config(
    url: Option<String>,
    pool: Option<bb8::Pool<RedisConnectionManager>>,
    namespace: Option<String>,
    fence_ttl: Duration,
    timeouts: Timeouts,
    local_handovers: u32,
    safety_poll: Duration,
) -> Result<RedisConfig, LockError> {
    let namespace = namespace.unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
    if namespace.contains(['{', '}']) || namespace.chars().any(char::is_control) {
        return Err(LockError::Config(format!(
            "namespace {namespace:?} must not contain braces or control characters"
        )));
    }
    let client = url
        .as_deref()
        .map(|url| {
            redis::Client::open(url)
                .map_err(|e| LockError::Config(format!("invalid redis url {}: {e}", redact(url))))
        })
        .transpose()?;
    let address = client.as_ref().map_or_else(
        || "the pooled server".to_owned(),
        |c| c.get_connection_info().addr().to_string(),
    );
    Ok(RedisConfig {
        client,
        pool,
        sentinel: None,
        cluster: None,
        address,
        namespace,
        fence_ttl,
        timeouts,
        local_handovers,
        safety_poll,
    })
}
