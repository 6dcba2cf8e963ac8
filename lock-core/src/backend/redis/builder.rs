//! Configuring a Redis store: where its server is, and every setting of its own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bb8_redis::RedisConnectionManager;

use super::connection::Timeouts;
use super::deployment::{ClusterSeeds, Deployment};
use super::sentinel::Sentinels;
use super::{RedisConfig, RedisStore};
use crate::backend::redact::redact;
use crate::backend::{IntoStore, Store, StoreFuture};
use crate::{LockError, options};

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

/// Configures a [`RedisStore`]: where its server is (a [`url`](Self::url), a bb8
/// [`pool`](Self::pool), the master of Redis [Sentinels](Self::sentinel), or a Redis
/// [Cluster](Self::cluster)), and every setting of its own. Each of these four chooses
/// the deployment, replacing an earlier choice, except that a url and a pool go together.
/// Every other setting is optional.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::Locker;
/// use lock_core::backend::RedisStore;
///
/// let store = RedisStore::builder()
///     .sentinel(["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"], "locks")
///     .namespace("billing:lock:")
///     .response_timeout(Duration::from_secs(1))
///     .build()
///     .await?;
/// let locker = Locker::builder().store(Arc::new(store)).build().await?;
/// # let _ = locker;
/// # Ok(())
/// # }
/// ```
///
/// A setting out of range is refused by [`build`](Self::build) before anything is
/// connected to, with [`LockError::Config`]:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use lock_core::backend::RedisStore;
///
/// let err = RedisStore::builder()
///     .url("redis://127.0.0.1:1/")
///     .namespace("billing:{lock}:")
///     .build()
///     .await
///     .unwrap_err();
/// assert!(err.is_config(), "{err}");
/// assert!(err.to_string().contains("must not contain braces"), "{err}");
/// # }
/// ```
#[derive(Clone, Default)]
pub struct RedisStoreBuilder {
    target: Option<Target>,
    namespace: Option<String>,
    fence_ttl: Option<Duration>,
    connect_timeout: Option<Duration>,
    response_timeout: Option<Duration>,
    local_handovers: Option<u32>,
    safety_poll: Option<Duration>,
    trust: Trust,
}

/// Where the store's server is, as the builder was told: checked by
/// [`RedisStoreBuilder::build`] into a [`Deployment`].
#[derive(Clone)]
enum Target {
    Url(String),
    Pool {
        pool: bb8::Pool<RedisConnectionManager>,
        url: Option<String>,
    },
    Sentinel {
        urls: Vec<String>,
        master_name: String,
    },
    Cluster(Vec<String>),
}

impl RedisStore {
    /// Starts configuring a Redis store: see [`RedisStoreBuilder`].
    pub fn builder() -> RedisStoreBuilder {
        RedisStoreBuilder::default()
    }
}

impl RedisStoreBuilder {
    /// The Redis server to use (`redis://[user:password@]host[:port][/db]`). With a
    /// [`pool`](Self::pool) too, commands go through the pool and the url serves the
    /// pub/sub connection that wakes waiters.
    pub fn url(mut self, url: &str) -> Self {
        let url = url.to_owned();
        self.target = Some(match self.target {
            Some(Target::Pool { pool, .. }) => Target::Pool {
                pool,
                url: Some(url),
            },
            _ => Target::Url(url),
        });
        self
    }

    /// A bb8 pool of Redis connections to use. Without a [`url`](Self::url) as well,
    /// there is no pub/sub connection, and waiters poll (with backoff, bounded by the
    /// holder's lease) instead of being woken at once.
    ///
    /// The store has the pool's manager open one multiplexed connection and shares it
    /// between all its calls (a multiplexed connection serves many tasks at once); after
    /// it breaks, it opens another the same way.
    pub fn pool(mut self, pool: bb8::Pool<RedisConnectionManager>) -> Self {
        let url = match self.target {
            Some(Target::Url(url)) => Some(url),
            Some(Target::Pool { url, .. }) => url,
            _ => None,
        };
        self.target = Some(Target::Pool { pool, url });
        self
    }

    /// Keep the locks on the master that these Redis Sentinels name `master_name`,
    /// following it through failovers: see [`Locker::sentinel`](crate::Locker::sentinel).
    pub fn sentinel<I, S>(mut self, sentinel_urls: I, master_name: &str) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls = sentinel_urls.into_iter().map(|u| u.as_ref().to_owned());
        self.target = Some(Target::Sentinel {
            urls: urls.collect(),
            master_name: master_name.to_owned(),
        });
        self
    }

    /// Keep the locks in the Redis Cluster that these seed nodes belong to: see
    /// [`Locker::cluster`](crate::Locker::cluster).
    pub fn cluster<I, S>(mut self, seed_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls = seed_urls.into_iter().map(|u| u.as_ref().to_owned());
        self.target = Some(Target::Cluster(urls.collect()));
        self
    }

    /// The prefix of every store key (default [`"lock:"`](super::DEFAULT_NAMESPACE)):
    /// lock `K` is the key `P{K}`. Braces and control characters are refused.
    pub fn namespace(mut self, prefix: &str) -> Self {
        self.namespace = Some(prefix.to_owned());
        self
    }

    /// How long a lock's fence counter is kept (default 7 days, at least 1 s). Its expiry
    /// is renewed every 64 acquisitions, so an idle lock leaves nothing behind for long.
    /// Tokens stay increasing when a counter expires, however busy its lock: a new
    /// counter starts from the server clock in microseconds.
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
    /// [`LockError::Backend`] (default 500 ms, redis-rs's own; not zero). Commands queue
    /// on one connection per server, so a burst of many thousand first attempts at once,
    /// a server busy with a slow command, or a slow network can take longer than the
    /// default; raise it there. An acquisition that timed out may still have taken its
    /// lock: a release follows it on the same connection, in the background, and should
    /// that fail too, the lock runs out with its lease. Applies to every deployment, a
    /// [`pool`](Self::pool)'s connection included.
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.response_timeout = Some(d);
        self
    }

    /// How many releases of an exclusive lock in a row may hand it straight to a task of
    /// the same `Locker` that waits for it (default 8; 0 turns local hand-overs off). A
    /// local hand-over changes the owner and draws the waiter's fencing token in one
    /// round trip, where a release, its wake-up and the waiter's next attempt take two;
    /// the longest-waiting local task gets it. After this many in a row the lock is freed
    /// for every contender, so tasks of other processes, woken then, get their chance: an
    /// exclusive lock makes no promise of order (a [fair](crate::LockKind::Fair) one
    /// does, and is never handed over this way).
    pub fn local_handovers(mut self, n: u32) -> Self {
        self.local_handovers = Some(n);
        self
    }

    /// Trusts the certificate authority `pem` (a PEM certificate) for `rediss://` urls,
    /// instead of the system's authorities: for servers whose certificate a private
    /// authority signed. Applies to the server of the [`url`](Self::url).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use lock_core::backend::RedisStore;
    ///
    /// let store = RedisStore::builder()
    ///     .url("rediss://redis.internal:6380/")
    ///     .tls_root_certificate(std::fs::read("/etc/redis/ca.crt")?)
    ///     .build()
    ///     .await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
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

    /// Checks the settings, then connects: opens the commands' connection (within the
    /// connect timeout) and loads the scripts, so that a wrong address or password fails
    /// here, with the address and the cause.
    pub async fn build(self) -> Result<RedisStore, LockError> {
        RedisStore::connect(self.config()?).await
    }

    /// Checks the settings, connecting to nothing yet.
    pub(super) fn config(self) -> Result<RedisConfig, LockError> {
        let fence_ttl = options::fence_ttl(self.fence_ttl)?;
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
        let namespace = self
            .namespace
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
        if namespace.contains(['{', '}']) || namespace.chars().any(char::is_control) {
            return Err(LockError::Config(format!(
                "namespace {namespace:?} must not contain braces or control characters"
            )));
        }
        let Some(target) = self.target else {
            return Err(LockError::Config(
                "no redis server: call url(..), pool(..), sentinel(..) or cluster(..) on the builder"
                    .into(),
            ));
        };
        Ok(RedisConfig {
            deployment: target.check(timeouts, &self.trust)?,
            namespace,
            fence_ttl,
            timeouts,
            local_handovers: self.local_handovers.unwrap_or(DEFAULT_LOCAL_HANDOVERS),
            safety_poll,
        })
    }
}

impl Target {
    /// The deployment, its urls checked (and opened with `trust`).
    fn check(self, timeouts: Timeouts, trust: &Trust) -> Result<Deployment, LockError> {
        Ok(match self {
            Self::Url(url) => Deployment::Url(trust.open(&url)?),
            Self::Pool { pool, url } => Deployment::Pool {
                pool,
                wake_ups: url.map(|url| trust.open(&url)).transpose()?,
            },
            Self::Sentinel { urls, master_name } => {
                let sentinels = Sentinels::new(&urls, &master_name, timeouts.connect)?;
                Deployment::Sentinel(Arc::new(sentinels))
            }
            Self::Cluster(urls) => {
                Deployment::Cluster(Box::new(ClusterSeeds::new(&urls, timeouts)?))
            }
        })
    }
}

/// Never shows a password: every url is redacted.
impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RedisStoreBuilder");
        d.field("deployment", &self.target)
            .field("namespace", &self.namespace)
            .field("fence_ttl", &self.fence_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("local_handovers", &self.local_handovers)
            .field("safety_poll", &self.safety_poll);
        #[cfg(feature = "tls")]
        d.field("tls_root_certificate", &self.trust.root.is_some());
        d.finish()
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |urls: &[String]| urls.iter().map(|u| redact(u)).collect::<Vec<_>>();
        match self {
            Self::Url(url) => f.debug_tuple("Url").field(&redact(url)).finish(),
            Self::Pool { url, .. } => f
                .debug_struct("Pool")
                .field("url", &url.as_deref().map(redact))
                .finish_non_exhaustive(),
            Self::Sentinel { urls, master_name } => f
                .debug_struct("Sentinel")
                .field("urls", &redacted(urls))
                .field("master_name", master_name)
                .finish(),
            Self::Cluster(urls) => f.debug_tuple("Cluster").field(&redacted(urls)).finish(),
        }
    }
}

/// The certificate authority that `rediss://` urls are checked against: one given to
/// [`RedisStoreBuilder::tls_root_certificate`], or else the system's.
#[derive(Clone, Default)]
struct Trust {
    #[cfg(feature = "tls")]
    root: Option<Vec<u8>>,
}

impl Trust {
    /// The client of the server at `url`, trusting this authority.
    fn open(&self, url: &str) -> Result<redis::Client, LockError> {
        let client = redis::Client::open(url)
            .map_err(|e| LockError::Config(format!("invalid redis url {}: {e}", redact(url))))?;
        self.trusted(client)
    }

    /// `client`, trusting this authority.
    #[cfg(feature = "tls")]
    fn trusted(&self, client: redis::Client) -> Result<redis::Client, LockError> {
        let Some(root) = &self.root else {
            return Ok(client);
        };
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root.clone()),
        };
        let info = client.get_connection_info().clone();
        redis::Client::build_with_tls(info, certificates)
            .map_err(|e| LockError::Config(format!("tls root certificate: {e}")))
    }

    /// `client` as it is: without the `tls` feature, no authority is given.
    #[cfg(not(feature = "tls"))]
    fn trusted(&self, client: redis::Client) -> Result<redis::Client, LockError> {
        Ok(client)
    }
}

impl IntoStore for RedisStoreBuilder {
    fn into_store(self) -> StoreFuture<'static, Arc<dyn Store>> {
        Box::pin(async move {
            let store: Arc<dyn Store> = Arc::new(self.build().await?);
            Ok(store)
        })
    }
}
