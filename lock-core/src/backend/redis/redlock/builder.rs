//! Configuring RedLock: its masters, each configured as a Redis store of its own, and how
//! far clocks may drift apart.

use std::time::Duration;

use super::{Drift, RedLockStore};
use crate::LockError;
use crate::backend::redis::RedisStoreBuilder;
use crate::backend::redis::deployment::Deployment;

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
        let configs = self
            .masters
            .into_iter()
            .map(|master| {
                // A release on one master cannot hand the lock over on the others.
                let config = master.local_handovers(0).config()?;
                match config.deployment {
                    Deployment::Url(_) | Deployment::Pool { .. } => Ok(config),
                    Deployment::Sentinel(_) | Deployment::Cluster(_) => Err(LockError::Config(
                        "a redlock master is one server, given by url(..) or pool(..), not sentinel(..) or cluster(..)"
                            .into(),
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        RedLockStore::connect(configs, drift).await
    }
}
