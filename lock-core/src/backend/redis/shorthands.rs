//! The Redis shorthands of [`Locker`] and [`LockerBuilder`]: each fills in a
//! [`RedisStoreBuilder`] (or a [`RedLockStoreBuilder`] over them) and chooses its store.

use std::fmt;
use std::time::Duration;

use super::{RedLockStore, RedLockStoreBuilder, RedisConnectionManager, RedisStoreBuilder};
use crate::backend::IntoStore;
use crate::backend::redact::redact;
use crate::locker::builder::{ChosenBy, OnlyFor, Shared};
use crate::{LockError, Locker, LockerBuilder};

const URL: ChosenBy = ChosenBy {
    method: "url(..)",
    rank: 5,
    refusal: None,
};

const POOL: ChosenBy = ChosenBy {
    method: "pool(..)",
    rank: 5,
    refusal: None,
};

const SENTINEL: ChosenBy = ChosenBy {
    method: "sentinel(..)",
    rank: 2,
    refusal: Some(
        "sentinel(..) cannot be combined with url(..), pool(..), redlock(..), in_memory() or store(..)",
    ),
};

const CLUSTER: ChosenBy = ChosenBy {
    method: "cluster(..)",
    rank: 1,
    refusal: Some(
        "cluster(..) cannot be combined with url(..), pool(..), sentinel(..), redlock(..), in_memory() or store(..)",
    ),
};

const REDLOCK: ChosenBy = ChosenBy {
    method: "redlock(..)",
    rank: 0,
    refusal: Some(
        "redlock(..) cannot be combined with url(..), pool(..), sentinel(..), in_memory() or store(..)",
    ),
};

const REDLOCK_DRIFT: OnlyFor = OnlyFor {
    method: REDLOCK.method,
    refusal: "redlock_drift(..) applies only to redlock(..)",
};

/// What the Redis shorthands of a [`LockerBuilder`] set: one deployment's settings (which
/// every RedLock master shares too), and RedLock's masters and drift.
#[derive(Default)]
pub(crate) struct Shorthands {
    redis: RedisStoreBuilder,
    masters: Vec<String>,
    drift: Option<(f64, Duration)>,
}

impl Shorthands {
    /// The setting that applies to RedLock only, if it is set.
    pub(crate) fn only_for(&self) -> Option<OnlyFor> {
        self.drift.map(|_| REDLOCK_DRIFT)
    }
}

/// Never shows a password: every url is redacted.
impl fmt::Debug for Shorthands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masters: Vec<_> = self.masters.iter().map(|u| redact(u)).collect();
        f.debug_struct("Shorthands")
            .field("redis", &self.redis)
            .field("masters", &masters)
            .field("drift", &self.drift)
            .finish()
    }
}

/// The deployment's builder that the shorthands filled in, with the fence ttl that
/// [`LockerBuilder::fence_ttl`] set, if it did.
fn deployment(shared: Shared) -> RedisStoreBuilder {
    match shared.fence_ttl {
        Some(d) => shared.redis.redis.fence_ttl(d),
        None => shared.redis.redis,
    }
}

/// RedLock over the masters that the shorthands named, each with the deployment's
/// settings.
fn redlock(mut shared: Shared) -> RedLockStoreBuilder {
    let masters = std::mem::take(&mut shared.redis.masters);
    let drift = shared.redis.drift;
    let redis = deployment(shared);
    let redlock = RedLockStore::builder(masters.iter().map(|url| redis.clone().url(url)));
    match drift {
        Some((per_lease, fixed)) => redlock.drift(per_lease, fixed),
        None => redlock,
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
impl LockerBuilder {
    /// Shorthand for [`RedisStoreBuilder::url`], which [`url`](Self::url) takes a Redis
    /// url to: the Redis server to use. With a [`pool`](Self::pool) too, commands go
    /// through the pool and the url serves the pub/sub connection that wakes waiters.
    pub(crate) fn redis_url(self, url: &str) -> Self {
        self.redis(|redis| redis.url(url)).redis_deployment(URL)
    }

    /// Shorthand for [`RedisStoreBuilder::pool`]: a bb8 pool of Redis connections to use.
    /// Without a [`url`](Self::url) as well, waiters poll instead of being woken at once.
    pub fn pool(self, pool: ::bb8::Pool<RedisConnectionManager>) -> Self {
        self.redis(|redis| redis.pool(pool)).redis_deployment(POOL)
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
        let mut builder = self.choose(REDLOCK, Box::new(|shared| redlock(shared).into_store()));
        builder.shared.redis.masters = urls.collect();
        builder
    }

    /// Shorthand for [`RedLockStoreBuilder::drift`](crate::backend::RedLockStoreBuilder::drift):
    /// how far the clocks of this process and the RedLock masters may drift apart during
    /// a lease (default 1% of the lease plus 2 ms). Only for [`redlock`](Self::redlock).
    pub fn redlock_drift(mut self, per_lease: f64, fixed: Duration) -> Self {
        self.shared.redis.drift = Some((per_lease, fixed));
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
            .redis_deployment(CLUSTER)
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
            .redis_deployment(SENTINEL)
    }

    /// Shorthand for [`RedisStoreBuilder::namespace`]: the prefix of every Redis key
    /// (default `"lock:"`): lock `K` is the key `P{K}`. Braces and control characters are
    /// refused.
    pub fn namespace(self, prefix: &str) -> Self {
        self.redis(|redis| redis.namespace(prefix))
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
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(self, pem: impl Into<Vec<u8>>) -> Self {
        self.redis(|redis| redis.tls_root_certificate(pem))
    }

    /// Shorthand for [`RedisStoreBuilder::safety_poll`]: how long a waiter that Redis
    /// wakes over pub/sub waits for a wake-up before it tries again anyway (default 1 s;
    /// from 10 ms to 4 s).
    pub fn safety_poll(self, d: Duration) -> Self {
        self.redis(|redis| redis.safety_poll(d))
    }

    /// This builder with its Redis settings changed by `set`.
    fn redis(mut self, set: impl FnOnce(RedisStoreBuilder) -> RedisStoreBuilder) -> Self {
        let shorthands = &mut self.shared.redis;
        shorthands.redis = set(std::mem::take(&mut shorthands.redis));
        self
    }

    /// This builder with the Redis deployment it was given chosen by `by`.
    fn redis_deployment(self, by: ChosenBy) -> Self {
        self.choose(by, Box::new(|shared| deployment(shared).into_store()))
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
impl Locker {
    /// Keeps the locks in the Redis Cluster that the nodes at `seed_urls` belong to, with
    /// the default settings (see [`LockerBuilder::cluster`]). Every key of a lock shares
    /// the lock's hash tag (`lock:{K}`, `lock:{K}:fence`, ...), so each lock lives in one
    /// slot and its scripts never cross slots; locks taken together with
    /// [`lock_all`](Self::lock_all) are taken one by one in key order, so they may live
    /// on different nodes. redis-rs's cluster connection sends each command to the node
    /// of its lock, follows `MOVED` and `ASK`, and finds the new master of a slot whose
    /// master failed. Wake-ups travel by sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`): a
    /// release publishes on its lock's own node, where the waiters' `Locker`s subscribe,
    /// and is not broadcast to every node. Needs Redis 7 or later.
    ///
    /// What a cluster does not give: its replication is asynchronous, so a failover of a
    /// master can lose a lock just taken there, as on [Sentinel](Self::sentinel).
    ///
    /// Shorthand for a [`RedisStore`](crate::backend::RedisStore) from its builder's
    /// [`cluster`](crate::backend::RedisStoreBuilder::cluster), plugged in with
    /// [`LockerBuilder::store`].
    pub async fn cluster<I, S>(seed_urls: I) -> Result<Locker, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder().cluster(seed_urls).build().await
    }

    /// Keeps the locks on the master that the Redis Sentinels at `sentinel_urls` name
    /// `master_name`, with the default settings (see [`LockerBuilder::sentinel`]). Each
    /// connection asks the sentinels for the master and checks that the server they name
    /// is one (`ROLE`); after a failover, the first command the old master refuses
    /// (`READONLY`) or that finds it gone makes the connection find the new one, so the
    /// next acquisition works there without restarting the process. The credentials and
    /// database of the first url are used for the master too.
    ///
    /// Fencing tokens carry the failover epoch (Sentinel's config epoch when the
    /// connection found its master) above the master's counter, so every token drawn
    /// after a failover is larger than every token drawn before it, even one whose write
    /// the failover lost (up to 4,095 failovers of the sentinels' masters).
    ///
    /// What Sentinel does not give: Redis replicates asynchronously, so a failover can
    /// lose a lock that was just taken, and let a second holder in while the first still
    /// believes it holds it (its renewals then fail, and [`LockGuard::lost`](crate::LockGuard::lost) fires).
    /// Check the fencing token where the data lives.
    ///
    /// Shorthand for a [`RedisStore`](crate::backend::RedisStore) from its builder's
    /// [`sentinel`](crate::backend::RedisStoreBuilder::sentinel), plugged in with
    /// [`LockerBuilder::store`].
    pub async fn sentinel<I, S>(sentinel_urls: I, master_name: &str) -> Result<Locker, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder()
            .sentinel(sentinel_urls, master_name)
            .build()
            .await
    }

    /// Holds every lock on a quorum of independent Redis masters (RedLock), given as an
    /// odd number of urls, at least 3, with the default settings (see
    /// [`LockerBuilder::redlock`] for the others). Fails unless a majority of them answer
    /// within the connect timeout; the others are used once they answer.
    ///
    /// A lock is taken when a majority of the masters grant it (for a semaphore of `p`
    /// permits, `⌊p·n/(p+1)⌋ + 1` of `n`, so that no more than `p` hold it), each asked at
    /// once and given a twentieth of the lease to answer (the call goes on as soon as a
    /// quorum granted it, without waiting for the others; a master that grants it later
    /// keeps it, renewed and released with the rest); it is valid until the
    /// majority's leases run out, less an allowance for clock drift (1% of the lease plus
    /// 2 ms). A call that cannot reach the quorum fails with [`LockError::Quorum`].
    /// Renewals and [`LockGuard::extend`](crate::LockGuard::extend) need the quorum too; a lease that loses it is
    /// lost. Fair locks are not offered: independent masters could disagree on the order.
    ///
    /// The fencing token is the largest of the granting masters' counters times the
    /// number of masters (plus, for readers and permits, the index of the one that drew
    /// it, so that those sharing a lock never get the same one), and the granting
    /// masters raise their counters to it, so that every later quorum draws a larger
    /// one: strictly increasing as long as no master loses its data (a master restarted
    /// without persistence can repeat tokens, and can let two holders in at once, as
    /// Martin Kleppmann's analysis of RedLock points out). Check the token where the data
    /// lives.
    ///
    /// Shorthand for a [`RedLockStore`](crate::backend::RedLockStore) from its
    /// [builder](crate::backend::RedLockStoreBuilder), plugged in with
    /// [`LockerBuilder::store`].
    pub async fn redlock<I, S>(master_urls: I) -> Result<Locker, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder().redlock(master_urls).build().await
    }
}
