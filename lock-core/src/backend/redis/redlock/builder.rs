//! Configuring RedLock: its masters, each configured as a Redis store of its own, and how
//! far clocks may drift apart.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use super::RedLockStore;
use crate::LockError;
use crate::backend::redis::{RedisStore, RedisStoreBuilder};
use crate::backend::redlock::{Drift, RedLock, Settings, majority};
use crate::backend::{IntoStore, Store, StoreFuture};

/// Configures a [`RedLockStore`]: its masters, an odd number of them, at least 3, each a
/// [`RedisStoreBuilder`] with the [`url`](RedisStoreBuilder::url) (or the
/// [`pool`](RedisStoreBuilder::pool)) of one independent Redis server and the settings
/// it keeps there; and how far clocks may [`drift`](Self::drift) apart.
///
/// Give every master the same settings: RedLock waits as the first master's safety poll
/// and connect timeout say. Local hand-overs are off on every master: a release on one
/// master cannot hand the lock over on the others.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::Locker;
/// use lock_core::backend::{RedLockStore, RedisStore};
///
/// let settings = RedisStore::builder()
///     .namespace("billing:lock:")
///     .connect_timeout(Duration::from_secs(1));
/// let urls = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"];
/// let store = RedLockStore::builder(urls.map(|url| settings.clone().url(url)))
///     .drift(0.02, Duration::from_millis(5))
///     .build()
///     .await?;
/// let locker = Locker::builder().store(Arc::new(store)).build().await?;
/// # let _ = locker;
/// # Ok(())
/// # }
/// ```
///
/// Too few masters, or an even number, are refused before anything is connected to:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use lock_core::backend::{RedLockStore, RedisStore};
///
/// let masters = ["redis://127.0.0.1:1", "redis://127.0.0.1:2"];
/// let err = RedLockStore::builder(masters.map(|url| RedisStore::builder().url(url)))
///     .build()
///     .await
///     .unwrap_err();
/// assert!(err.is_config(), "{err}");
/// assert!(err.to_string().contains("an odd number of masters"), "{err}");
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedLockStoreBuilder {
    masters: Vec<RedisStoreBuilder>,
    drift: Option<Drift>,
}

impl RedLockStore {
    /// Starts configuring RedLock over `masters`: see [`RedLockStoreBuilder`].
    pub fn builder(masters: impl IntoIterator<Item = RedisStoreBuilder>) -> RedLockStoreBuilder {
        RedLockStoreBuilder {
            masters: masters.into_iter().collect(),
            drift: None,
        }
    }
}

impl RedLockStoreBuilder {
    /// How far the clocks of this process and the masters may drift apart during a
    /// lease: `per_lease` of the lease (from 0 to less than a half) plus `fixed` is taken
    /// off every lease's validity (default 1% of the lease plus 2 ms).
    pub fn drift(mut self, per_lease: f64, fixed: Duration) -> Self {
        self.drift = Some(Drift { per_lease, fixed });
        self
    }

    /// Checks the settings, then connects to every master at once; fails unless a
    /// majority answer within the connect timeout. The others are connected to when they
    /// come back.
    pub async fn build(self) -> Result<RedLockStore, LockError> {
        let n = self.masters.len();
        if n < 3 || n.is_multiple_of(2) {
            return Err(LockError::Config(format!(
                "redlock needs an odd number of masters, at least 3; got {n}"
            )));
        }
        let drift = self.drift.unwrap_or(Drift::DEFAULT);
        if !(0.0..0.5).contains(&drift.per_lease) {
            return Err(LockError::Config(format!(
                "redlock drift must be from 0 to less than half the lease, got {}",
                drift.per_lease
            )));
        }
        let lines = Arc::default();
        let masters = self
            .masters
            .into_iter()
            .map(|master| RedisStore::redlock_master(master, &lines))
            .collect::<Result<Vec<_>, _>>()?;
        let settings = Settings {
            drift,
            patience: masters[0].connect_timeout(),
            safety_poll: masters[0].safety_poll(),
        };
        connect(&masters).await?;
        Ok(RedLockStore(RedLock::new(masters, lines, settings)))
    }
}

/// Connects to every master at once; fails unless a majority answer within the connect
/// timeout. The others are connected to when they come back.
async fn connect(masters: &[RedisStore]) -> Result<(), LockError> {
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
    Ok(())
}

impl IntoStore for RedLockStoreBuilder {
    fn into_store(self) -> StoreFuture<'static, Arc<dyn Store>> {
        Box::pin(async move {
            let store: Arc<dyn Store> = Arc::new(self.build().await?);
            Ok(store)
        })
    }
}
