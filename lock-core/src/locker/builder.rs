//! Configuring a `Locker`: its store and its defaults.
//!
//! The builder knows no store but memory: a store's shorthands (`url(..)`,
//! `zookeeper(..)`, ...) live in its own folder, and fill the one store slot with
//! [`LockerBuilder::choose`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::Locker;
use crate::backend::{IntoStore, MemoryStore, Store, StoreFuture};
use crate::options::{self, DEFAULT_LEASE, DEFAULT_WAIT, Defaults, MIN_LEASE};
use crate::{LockError, key};

/// Configures a [`Locker`]: its store, and the defaults every store shares
/// ([`default_lease`](Self::default_lease), [`default_wait`](Self::default_wait),
/// [`max_key_len`](Self::max_key_len)). A store is the one thing needed: given to
/// [`store`](Self::store), built already or as its builder (such as a
/// [`RedisStore`](crate::backend::RedisStore)'s), or by one of the shorthands that fill
/// in a store's builder: a Redis [`url`](Self::url), a bb8 [`pool`](Self::pool), the
/// master of Redis [Sentinels](Self::sentinel), a Redis [Cluster](Self::cluster),
/// RedLock over independent [masters](Self::redlock), or [`in_memory`](Self::in_memory).
///
/// The Redis methods are shorthands for those of
/// [`RedisStoreBuilder`](crate::backend::RedisStoreBuilder) (and of
/// [`RedLockStoreBuilder`](crate::backend::RedLockStoreBuilder)): these three give the
/// same `Locker`.
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
///     .namespace("billing:lock:");
/// let same = Locker::builder()
///     .store(store.clone())
///     .default_lease(Duration::from_secs(10))
///     .default_wait(Duration::from_secs(2))
///     .build()
///     .await?;
///
/// let store = store.build().await?;
/// let built = Locker::builder()
///     .store(Arc::new(store))
///     .default_lease(Duration::from_secs(10))
///     .default_wait(Duration::from_secs(2))
///     .build()
///     .await?;
/// # let _ = (locker, same, built);
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct LockerBuilder {
    /// The stores chosen, each by the method that chose it, once: more than one is
    /// refused, but for those that go together (a Redis url with a pool).
    chosen: Vec<Chosen>,
    /// The settings that the shorthands of a store fill in, whichever order they come in.
    pub(crate) shared: Shared,
    default_lease: Option<Duration>,
    default_wait: Option<Duration>,
    max_key_len: Option<usize>,
}

/// What the shorthands of a store set on a [`LockerBuilder`] for its store's builder,
/// whichever order they come in, before or after the method that chose the store.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// For Redis and for memory.
    pub(crate) fence_ttl: Option<Duration>,
    #[cfg(feature = "redis")]
    pub(crate) redis: crate::backend::redis::Shorthands,
}

/// Builds a chosen store at [`LockerBuilder::build`], from the settings its shorthands
/// filled in.
pub(crate) type Make =
    Box<dyn FnOnce(Shared) -> StoreFuture<'static, Arc<dyn Store>> + Send + Sync>;

/// A store chosen on a [`LockerBuilder`]: by which method, and how it is built.
struct Chosen {
    by: ChosenBy,
    make: Make,
}

/// The method of a [`LockerBuilder`] that chose a store, and what the builder says when
/// another store is chosen too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChosenBy {
    /// The method, as messages name it, such as `"url(..)"`. Calling it again replaces
    /// its choice.
    pub(crate) method: &'static str,
    /// Which combination with another store is refused first: the lowest rank's. From
    /// 0 to 2, it is refused before a setting that applies to another method only
    /// ([`OnlyFor`]) is; from 3, after.
    pub(crate) rank: u8,
    /// What a combination with a store of the same or a higher rank is refused with;
    /// `None` for the methods that go together (a Redis url and a pool).
    pub(crate) refusal: Option<&'static str>,
}

/// A setting of a [`LockerBuilder`] that applies to the store of one method only, such as
/// a RedLock drift to `redlock(..)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OnlyFor {
    /// The method.
    pub(crate) method: &'static str,
    /// What the setting is refused with for a store chosen by another method.
    pub(crate) refusal: &'static str,
}

/// The rank from which a store's refusal comes after that of a misplaced [`OnlyFor`]
/// setting.
const AFTER_ONLY_FOR: u8 = 3;

const STORE: ChosenBy = ChosenBy {
    method: "store(..)",
    rank: 3,
    refusal: Some("store(..) cannot be combined with in_memory(), url(..) or pool(..)"),
};

const IN_MEMORY: ChosenBy = ChosenBy {
    method: "in_memory()",
    rank: 4,
    refusal: Some("in_memory() cannot be combined with url(..) or pool(..)"),
};

const NO_STORE: &str = "no store: call url(..), pool(..), sentinel(..), cluster(..), redlock(..), in_memory() or store(..) on the builder";

impl fmt::Debug for Chosen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.by.method)
    }
}

/// Never shows a password: every url is redacted.
impl fmt::Debug for LockerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockerBuilder")
            .field("chosen", &self.chosen)
            .field("shared", &self.shared)
            .field("default_lease", &self.default_lease)
            .field("default_wait", &self.default_wait)
            .field("max_key_len", &self.max_key_len)
            .finish()
    }
}

impl LockerBuilder {
    /// Keep the locks in this process's memory (see [`Locker::in_memory`]).
    pub fn in_memory(self) -> Self {
        self.memory_by(IN_MEMORY)
    }

    /// Keep the locks in `store`: a store built already, in an `Arc` (a
    /// [`RedisStore`](crate::backend::RedisStore), a [`MemoryStore`] shared with other
    /// `Locker`s, one of your own: see [`crate::backend`]), or a store's builder (such as
    /// a [`RedisStoreBuilder`](crate::backend::RedisStoreBuilder)), which
    /// [`build`](Self::build) builds. See [`IntoStore`].
    pub fn store(self, store: impl IntoStore) -> Self {
        self.store_by(STORE, store)
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
    /// or in memory: shorthand for
    /// [`RedisStoreBuilder::fence_ttl`](crate::backend::RedisStoreBuilder::fence_ttl) and
    /// [`MemoryStore::with_fence_ttl`].
    pub fn fence_ttl(mut self, d: Duration) -> Self {
        self.shared.fence_ttl = Some(d);
        self
    }

    /// Checks the settings and builds the store (connecting, for a store on a server).
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
        let only_for = self.shared.only_for();
        let chosen = sole(self.chosen, only_for)?;
        let store = (chosen.make)(self.shared).await?;
        Ok(Locker::on(store, defaults, max_key_len))
    }

    /// This builder with a store in this process's memory chosen by `by`.
    pub(crate) fn memory_by(self, by: ChosenBy) -> Self {
        self.choose(
            by,
            Box::new(|shared: Shared| {
                Box::pin(async move {
                    let fence_ttl = options::fence_ttl(shared.fence_ttl)?;
                    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_fence_ttl(fence_ttl));
                    Ok(store)
                })
            }),
        )
    }

    /// This builder with `store` chosen by the shorthand `by`.
    pub(crate) fn store_by(self, by: ChosenBy, store: impl IntoStore) -> Self {
        self.choose(by, Box::new(move |_| store.into_store()))
    }

    /// This builder with the store that `make` builds chosen by `by`, in place of an
    /// earlier choice of the same method.
    pub(crate) fn choose(mut self, by: ChosenBy, make: Make) -> Self {
        self.chosen.retain(|c| c.by.method != by.method);
        self.chosen.push(Chosen { by, make });
        self
    }
}

impl Shared {
    /// The setting that applies to one method's store only, if one is set.
    fn only_for(&self) -> Option<OnlyFor> {
        #[cfg(feature = "redis")]
        if let Some(only_for) = self.redis.only_for() {
            return Some(only_for);
        }
        None
    }
}

/// The one store of `chosen`, or the error a combination that cannot be made gives (a
/// url and a pool go together); an `only_for` setting is refused for another method's
/// store.
fn sole(mut chosen: Vec<Chosen>, only_for: Option<OnlyFor>) -> Result<Chosen, LockError> {
    chosen.sort_by_key(|c| c.by.rank);
    let combined = chosen.len() > 1;
    let refuse = |message: &str| Err(LockError::Config(message.into()));
    let Some(first) = chosen.into_iter().next() else {
        return refuse(NO_STORE);
    };
    if let (true, Some(refusal)) = (combined, first.by.refusal)
        && first.by.rank < AFTER_ONLY_FOR
    {
        return refuse(refusal);
    }
    if let Some(only_for) = only_for
        && only_for.method != first.by.method
    {
        return refuse(only_for.refusal);
    }
    if let (true, Some(refusal)) = (combined, first.by.refusal) {
        return refuse(refusal);
    }
    Ok(first)
}

#[cfg(all(test, feature = "redis"))]
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
    async fn a_stores_builder_is_built_by_build() {
        use crate::backend::{RedLockStore, RedisStore};

        let url = "redis://127.0.0.1:1/";
        let redis = RedisStore::builder().url(url).namespace("a{b}");
        let braces = refused(Locker::builder().store(redis)).await;
        assert!(braces.contains("must not contain braces"), "{braces}");
        let masters = [url, url].map(|url| RedisStore::builder().url(url));
        let redlock = refused(Locker::builder().store(RedLockStore::builder(masters))).await;
        assert!(redlock.contains("an odd number of masters"), "{redlock}");
        let memory = Locker::builder().store(Arc::new(MemoryStore::new()));
        let locker = memory.build().await.expect("a store built already");
        assert_eq!(locker.store().name(), "memory");
    }

    #[test]
    fn a_builder_goes_to_other_threads() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<LockerBuilder>();
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
