//! Configuring a `Locker`: its store and its defaults.

use std::fmt;
use std::mem;
use std::sync::Arc;
use std::time::Duration;

use bb8_redis::RedisConnectionManager;

use super::Locker;
#[cfg(feature = "mysql")]
use crate::backend::MySqlStore;
#[cfg(feature = "postgres")]
use crate::backend::PostgresStore;
#[cfg(feature = "zookeeper")]
use crate::backend::ZooKeeperStore;
use crate::backend::redact::redact;
use crate::backend::{MemoryStore, RedLockStore, RedisStoreBuilder, Store};
use crate::options::{self, DEFAULT_LEASE, DEFAULT_WAIT, Defaults, MIN_LEASE};
use crate::{LockError, key};

/// Configures a [`Locker`]: its store, and the defaults every store shares
/// ([`default_lease`](Self::default_lease), [`default_wait`](Self::default_wait),
/// [`max_key_len`](Self::max_key_len)). A store is the one thing needed: a
/// [`store`](Self::store) of your own or one built by its own builder (such as a
/// [`RedisStore`](crate::backend::RedisStore)), or one of the shorthands that build it
/// here: a Redis [`url`](Self::url), a bb8 [`pool`](Self::pool), the master of Redis
/// [Sentinels](Self::sentinel), a Redis [Cluster](Self::cluster), RedLock over independent
/// [masters](Self::redlock), or [`in_memory`](Self::in_memory).
///
/// The Redis methods are shorthands for those of
/// [`RedisStoreBuilder`] (and of [`RedLockStoreBuilder`](crate::backend::RedLockStoreBuilder)):
/// these two give the same `Locker`.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::Locker;
/// use lock_core::backend::RedisStore;
///
/// let locker = Locker::builder()
///     .url("redis://127.0.0.1:6379/")
///     .namespace("billing:lock:")
///     .default_lease(Duration::from_secs(10))
///     .default_wait(Duration::from_secs(2))
///     .build()
///     .await?;
///
/// let store = RedisStore::builder()
///     .url("redis://127.0.0.1:6379/")
///     .namespace("billing:lock:")
///     .build()
///     .await?;
/// let same = Locker::builder()
///     .store(Arc::new(store))
///     .default_lease(Duration::from_secs(10))
///     .default_wait(Duration::from_secs(2))
///     .build()
///     .await?;
/// # let _ = (locker, same);
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct LockerBuilder {
    /// The stores chosen, each by the method that chose it, once: more than one is
    /// refused, but for a url with a pool.
    chosen: Vec<Choice>,
    /// What the Redis shorthands set: one deployment, or each RedLock master's settings.
    redis: RedisStoreBuilder,
    redlock_drift: Option<(f64, Duration)>,
    /// For Redis and for memory.
    fence_ttl: Option<Duration>,
    default_lease: Option<Duration>,
    default_wait: Option<Duration>,
    max_key_len: Option<usize>,
}

/// A store chosen on a [`LockerBuilder`], by the method that chose it. A Redis
/// deployment's url, pool, sentinels or cluster seeds go to the builder's Redis settings.
enum Choice {
    Url,
    Pool,
    Sentinel,
    Cluster,
    RedLock(Vec<String>),
    InMemory,
    Store(Arc<dyn Store>),
    #[cfg(feature = "zookeeper")]
    ZooKeeper(String),
    #[cfg(feature = "postgres")]
    Postgres(String),
    #[cfg(feature = "mysql")]
    MySql(String),
}

impl Choice {
    /// Which combination with another is refused first: the order in which the builder
    /// has always checked them.
    fn precedence(&self) -> u8 {
        match self {
            Self::RedLock(_) => 0,
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(_) => 0,
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => 0,
            #[cfg(feature = "mysql")]
            Self::MySql(_) => 0,
            Self::Cluster => 1,
            Self::Sentinel => 2,
            Self::Store(_) => 3,
            Self::InMemory => 4,
            Self::Url | Self::Pool => 5,
        }
    }
}

impl fmt::Debug for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url => f.write_str("Url"),
            Self::Pool => f.write_str("Pool"),
            Self::Sentinel => f.write_str("Sentinel"),
            Self::Cluster => f.write_str("Cluster"),
            Self::RedLock(urls) => {
                let urls: Vec<_> = urls.iter().map(|u| redact(u)).collect();
                f.debug_tuple("RedLock").field(&urls).finish()
            }
            Self::InMemory => f.write_str("InMemory"),
            Self::Store(store) => f.debug_tuple("Store").field(&store.name()).finish(),
            #[cfg(feature = "zookeeper")]
            Self::ZooKeeper(connect_string) => {
                f.debug_tuple("ZooKeeper").field(connect_string).finish()
            }
            #[cfg(feature = "postgres")]
            Self::Postgres(url) => f.debug_tuple("Postgres").field(&redact(url)).finish(),
            #[cfg(feature = "mysql")]
            Self::MySql(url) => f.debug_tuple("MySql").field(&redact(url)).finish(),
        }
    }
}

/// Never shows a password: every url is redacted.
impl fmt::Debug for LockerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockerBuilder")
            .field("chosen", &self.chosen)
            .field("redis", &self.redis)
            .field("redlock_drift", &self.redlock_drift)
            .field("fence_ttl", &self.fence_ttl)
            .field("default_lease", &self.default_lease)
            .field("default_wait", &self.default_wait)
            .field("max_key_len", &self.max_key_len)
            .finish()
    }
}

impl LockerBuilder {
    /// Shorthand for [`RedisStoreBuilder::url`]: the Redis server to use. With a
    /// [`pool`](Self::pool) too, commands go through the pool and the url serves the
    /// pub/sub connection that wakes waiters.
    pub fn url(self, url: &str) -> Self {
        self.redis(|redis| redis.url(url)).choose(Choice::Url)
    }

    /// Shorthand for [`RedisStoreBuilder::pool`]: a bb8 pool of Redis connections to use.
    /// Without a [`url`](Self::url) as well, waiters poll instead of being woken at once.
    pub fn pool(self, pool: bb8::Pool<RedisConnectionManager>) -> Self {
        self.redis(|redis| redis.pool(pool)).choose(Choice::Pool)
    }

    /// Hold every lock on a quorum of these independent Redis masters (RedLock; an odd
    /// number of them, at least 3): see [`Locker::redlock`]. Shorthand for
    /// [`RedLockStore::builder`] over one [`RedisStoreBuilder`] per url, each with this
    /// builder's Redis settings.
    pub fn redlock<I, S>(self, master_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls = master_urls.into_iter().map(|u| u.as_ref().to_owned());
        self.choose(Choice::RedLock(urls.collect()))
    }

    /// Shorthand for [`RedLockStoreBuilder::drift`](crate::backend::RedLockStoreBuilder::drift):
    /// how far the clocks of this process and the RedLock masters may drift apart during
    /// a lease (default 1% of the lease plus 2 ms). Only for [`redlock`](Self::redlock).
    pub fn redlock_drift(mut self, per_lease: f64, fixed: Duration) -> Self {
        self.redlock_drift = Some((per_lease, fixed));
        self
    }

    /// Shorthand for [`RedisStoreBuilder::cluster`]: keep the locks in the Redis Cluster
    /// that these seed nodes belong to (see [`Locker::cluster`]).
    pub fn cluster<I, S>(self, seed_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.redis(|redis| redis.cluster(seed_urls))
            .choose(Choice::Cluster)
    }

    /// Shorthand for [`RedisStoreBuilder::sentinel`]: keep the locks on the master that
    /// these Redis Sentinels name `master_name`, following it through failovers (see
    /// [`Locker::sentinel`]).
    pub fn sentinel<I, S>(self, sentinel_urls: I, master_name: &str) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.redis(|redis| redis.sentinel(sentinel_urls, master_name))
            .choose(Choice::Sentinel)
    }

    /// Keep the locks in this process's memory (see [`Locker::in_memory`]).
    pub fn in_memory(self) -> Self {
        self.choose(Choice::InMemory)
    }

    /// Keep the locks on the ZooKeeper ensemble of `connect_string` (see
    /// [`Locker::zookeeper`]). Shorthand for
    /// [`ZooKeeperStore::builder`](crate::backend::ZooKeeperStore::builder) with its default
    /// settings; build the store yourself for others.
    #[cfg(feature = "zookeeper")]
    pub fn zookeeper(self, connect_string: &str) -> Self {
        self.choose(Choice::ZooKeeper(connect_string.to_owned()))
    }

    /// Keep the locks as advisory locks in the PostgreSQL database of `url` (see
    /// [`Locker::postgres`]). Shorthand for
    /// [`PostgresStore::builder`](crate::backend::PostgresStore::builder) with its default
    /// settings; build the store yourself for others.
    #[cfg(feature = "postgres")]
    pub fn postgres(self, url: &str) -> Self {
        self.choose(Choice::Postgres(url.to_owned()))
    }

    /// Keep the locks as `GET_LOCK` user locks on the MySQL or MariaDB server of `url`
    /// (see [`Locker::mysql`]). Shorthand for
    /// [`MySqlStore::builder`](crate::backend::MySqlStore::builder) with its default
    /// settings; build the store yourself for others.
    #[cfg(feature = "mysql")]
    pub fn mysql(self, url: &str) -> Self {
        self.choose(Choice::MySql(url.to_owned()))
    }

    /// Keep the locks in `store`: one built by its own builder (a
    /// [`RedisStore`](crate::backend::RedisStore), a [`RedLockStore`]), a [`MemoryStore`]
    /// shared with other `Locker`s, or one of your own (see [`crate::backend`]).
    pub fn store(self, store: Arc<dyn Store>) -> Self {
        self.choose(Choice::Store(store))
    }

    /// Shorthand for [`RedisStoreBuilder::namespace`]: the prefix of every Redis key
    /// (default `"lock:"`): lock `K` is the key `P{K}`. Braces and control characters are
    /// refused.
    pub fn namespace(self, prefix: &str) -> Self {
        self.redis(|redis| redis.namespace(prefix))
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

    /// How long a lock's fence counter is kept (default 7 days, at least 1 s), in Redis
    /// or in memory: shorthand for [`RedisStoreBuilder::fence_ttl`] and
    /// [`MemoryStore::with_fence_ttl`].
    pub fn fence_ttl(mut self, d: Duration) -> Self {
        self.fence_ttl = Some(d);
        self
    }

    /// Shorthand for [`RedisStoreBuilder::connect_timeout`]: how long connecting to Redis
    /// may take (default 5 s).
    pub fn connect_timeout(self, d: Duration) -> Self {
        self.redis(|redis| redis.connect_timeout(d))
    }

    /// Shorthand for [`RedisStoreBuilder::response_timeout`]: how long a command may wait
    /// for Redis's answer before its call fails with [`LockError::Backend`] (default
    /// 500 ms). An acquisition that timed out may still have taken its lock: a release
    /// follows it in the background, and should that fail too, the lock runs out with
    /// its lease.
    pub fn response_timeout(self, d: Duration) -> Self {
        self.redis(|redis| redis.response_timeout(d))
    }

    /// Shorthand for [`RedisStoreBuilder::local_handovers`]: how many releases of an
    /// exclusive lock in a row may hand it straight to a task of this `Locker` that waits
    /// for it (default 8; 0 turns local hand-overs off). The in-memory store has no use
    /// for it.
    pub fn local_handovers(self, n: u32) -> Self {
        self.redis(|redis| redis.local_handovers(n))
    }

    /// Shorthand for [`RedisStoreBuilder::tls_root_certificate`]: trusts the certificate
    /// authority `pem` (a PEM certificate) for `rediss://` urls, instead of the system's
    /// authorities. Applies to [`url`](Self::url) and [`redlock`](Self::redlock).
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(self, pem: impl Into<Vec<u8>>) -> Self {
        self.redis(|redis| redis.tls_root_certificate(pem))
    }

    /// Shorthand for [`RedisStoreBuilder::safety_poll`]: how long a waiter that Redis
    /// wakes over pub/sub waits for a wake-up before it tries again anyway (default 1 s;
    /// from 10 ms to 4 s).
    pub fn safety_poll(self, d: Duration) -> Self {
        self.redis(|redis| redis.safety_poll(d))
    }

    /// Checks the settings and builds the store (connecting, for Redis).
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
        let redis = match self.fence_ttl {
            Some(d) => self.redis.fence_ttl(d),
            None => self.redis,
        };
        let store: Arc<dyn Store> = match sole(self.chosen, self.redlock_drift)? {
            Choice::RedLock(urls) => {
                let masters = urls.iter().map(|url| redis.clone().url(url));
                let mut redlock = RedLockStore::builder(masters);
                if let Some((per_lease, fixed)) = self.redlock_drift {
                    redlock = redlock.drift(per_lease, fixed);
                }
                Arc::new(redlock.build().await?)
            }
            Choice::Url | Choice::Pool | Choice::Sentinel | Choice::Cluster => {
                Arc::new(redis.build().await?)
            }
            Choice::InMemory => {
                let fence_ttl = options::fence_ttl(self.fence_ttl)?;
                Arc::new(MemoryStore::with_fence_ttl(fence_ttl))
            }
            Choice::Store(store) => store,
            #[cfg(feature = "zookeeper")]
            Choice::ZooKeeper(connect_string) => {
                Arc::new(ZooKeeperStore::builder(&connect_string).build().await?)
            }
            #[cfg(feature = "postgres")]
            Choice::Postgres(url) => Arc::new(PostgresStore::builder(&url).build().await?),
            #[cfg(feature = "mysql")]
            Choice::MySql(url) => Arc::new(MySqlStore::builder(&url).build().await?),
        };
        Ok(Locker::on(store, defaults, max_key_len))
    }

    /// This builder with its Redis settings changed by `set`.
    fn redis(mut self, set: impl FnOnce(RedisStoreBuilder) -> RedisStoreBuilder) -> Self {
        self.redis = set(self.redis);
        self
    }

    /// This builder with `choice` chosen, in place of an earlier choice of the same
    /// method.
    fn choose(mut self, choice: Choice) -> Self {
        let method = mem::discriminant(&choice);
        self.chosen.retain(|c| mem::discriminant(c) != method);
        self.chosen.push(choice);
        self
    }
}

/// The one store of `chosen`, or the error a combination that cannot be made has always
/// given (a url and a pool go together); a `redlock_drift` is only for RedLock.
fn sole(
    mut chosen: Vec<Choice>,
    redlock_drift: Option<(f64, Duration)>,
) -> Result<Choice, LockError> {
    chosen.sort_by_key(Choice::precedence);
    let combined = chosen.len() > 1;
    let refuse = |message: &str| Err(LockError::Config(message.into()));
    match chosen.into_iter().next() {
        Some(Choice::RedLock(_)) if combined => refuse(
            "redlock(..) cannot be combined with url(..), pool(..), sentinel(..), in_memory() or store(..)",
        ),
        Some(Choice::Cluster) if combined => refuse(
            "cluster(..) cannot be combined with url(..), pool(..), sentinel(..), redlock(..), in_memory() or store(..)",
        ),
        Some(Choice::Sentinel) if combined => refuse(
            "sentinel(..) cannot be combined with url(..), pool(..), redlock(..), in_memory() or store(..)",
        ),
        #[cfg(feature = "zookeeper")]
        Some(Choice::ZooKeeper(_)) if combined => refuse(
            "zookeeper(..) cannot be combined with url(..), pool(..), sentinel(..), cluster(..), redlock(..), in_memory() or store(..)",
        ),
        #[cfg(feature = "postgres")]
        Some(Choice::Postgres(_)) if combined => refuse(
            "postgres(..) cannot be combined with url(..), pool(..), sentinel(..), cluster(..), redlock(..), zookeeper(..), in_memory() or store(..)",
        ),
        #[cfg(feature = "mysql")]
        Some(Choice::MySql(_)) if combined => refuse(
            "mysql(..) cannot be combined with url(..), pool(..), sentinel(..), cluster(..), redlock(..), zookeeper(..), postgres(..), in_memory() or store(..)",
        ),
        Some(choice @ Choice::RedLock(_)) => Ok(choice),
        _ if redlock_drift.is_some() => refuse("redlock_drift(..) applies only to redlock(..)"),
        Some(Choice::Store(_)) if combined => {
            refuse("store(..) cannot be combined with in_memory(), url(..) or pool(..)")
        }
        Some(Choice::InMemory) if combined => {
            refuse("in_memory() cannot be combined with url(..) or pool(..)")
        }
        Some(choice) => Ok(choice),
        None => refuse(
            "no store: call url(..), pool(..), sentinel(..), cluster(..), redlock(..), in_memory() or store(..) on the builder",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of the `Config` error that `builder` gives, before it connects.
    async fn refused(builder: LockerBuilder) -> String {
        match builder.build().await {
            Err(LockError::Config(message)) => message,
            other => panic!("not a config error: {other:?}"),
        }
    }

    #[tokio::test]
    async fn two_stores_are_refused_as_they_always_were() {
        let url = "redis://127.0.0.1:1/";
        let masters = [url, url, url];
        let memory = || Arc::new(MemoryStore::new());
        let cases = [
            (
                Locker::builder().url(url).redlock(masters),
                "redlock(..) cannot be combined with url(..), pool(..), sentinel(..), in_memory() or store(..)",
            ),
            (
                Locker::builder().cluster([url]).redlock(masters),
                "redlock(..) cannot be combined with url(..), pool(..), sentinel(..), in_memory() or store(..)",
            ),
            (
                Locker::builder().cluster([url]).url(url),
                "cluster(..) cannot be combined with url(..), pool(..), sentinel(..), redlock(..), in_memory() or store(..)",
            ),
            (
                Locker::builder().in_memory().sentinel([url], "m"),
                "sentinel(..) cannot be combined with url(..), pool(..), redlock(..), in_memory() or store(..)",
            ),
            (
                Locker::builder()
                    .in_memory()
                    .redlock_drift(0.01, Duration::ZERO),
                "redlock_drift(..) applies only to redlock(..)",
            ),
            (
                Locker::builder().store(memory()).in_memory(),
                "store(..) cannot be combined with in_memory(), url(..) or pool(..)",
            ),
            (
                Locker::builder().url(url).in_memory(),
                "in_memory() cannot be combined with url(..) or pool(..)",
            ),
            (
                Locker::builder().namespace("billing:"),
                "no store: call url(..), pool(..), sentinel(..), cluster(..), redlock(..), in_memory() or store(..) on the builder",
            ),
        ];
        for (builder, says) in cases {
            let shown = format!("{builder:?}");
            assert_eq!(refused(builder).await, says, "{shown}");
        }
    }

    #[tokio::test]
    async fn the_shorthands_fill_in_the_stores_builders() {
        let url = "redis://127.0.0.1:1/";
        let braces = refused(Locker::builder().url(url).namespace("a{b}")).await;
        assert!(braces.contains("must not contain braces"), "{braces}");
        let masters = refused(Locker::builder().redlock([url, url])).await;
        assert!(masters.contains("an odd number of masters"), "{masters}");
        let drift = Locker::builder()
            .redlock([url, url, url])
            .redlock_drift(0.5, Duration::ZERO);
        let drift = refused(drift).await;
        assert!(drift.contains("redlock drift must be from 0"), "{drift}");
        let fence = Locker::builder()
            .in_memory()
            .fence_ttl(Duration::from_millis(10));
        let fence = refused(fence).await;
        assert!(fence.contains("fence ttl must be at least 1s"), "{fence}");
    }
}
