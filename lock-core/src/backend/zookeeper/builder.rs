//! Configuring a ZooKeeper store: where its ensemble is, and every setting of its own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::ZooKeeperStore;
use super::session::Connect;
use crate::backend::{IntoStore, Store, StoreFuture};
use crate::locker::builder::ChosenBy;
use crate::{LockError, Locker, LockerBuilder};

/// How long a session outlives its connection, unless told otherwise.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// The node the locks live under, unless told otherwise: Curator's own examples' choice.
pub const DEFAULT_BASE_PATH: &str = "/locks";

/// Configures a [`ZooKeeperStore`]: the ensemble it connects to (given to
/// [`ZooKeeperStore::builder`]), and every setting of its own, each optional.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::Locker;
/// use lock_core::backend::ZooKeeperStore;
///
/// let store = ZooKeeperStore::builder("10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181/billing")
///     .session_timeout(Duration::from_secs(6))
///     .base_path("/app/locks")
///     .digest_auth("billing", "s3cret")
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
/// use lock_core::backend::ZooKeeperStore;
///
/// let err = ZooKeeperStore::builder("127.0.0.1:1")
///     .base_path("locks/")
///     .build()
///     .await
///     .unwrap_err();
/// assert!(err.is_config(), "{err}");
/// assert!(err.to_string().contains("base path"), "{err}");
/// # }
/// ```
#[derive(Clone)]
pub struct ZooKeeperStoreBuilder {
    connect_string: String,
    session_timeout: Duration,
    base_path: String,
    digest: Option<(String, String)>,
}

impl ZooKeeperStoreBuilder {
    pub(super) fn new(connect_string: &str) -> Self {
        Self {
            connect_string: connect_string.to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            base_path: DEFAULT_BASE_PATH.to_owned(),
            digest: None,
        }
    }

    /// How long the session outlives a lost connection ([`DEFAULT_SESSION_TIMEOUT`]
    /// unless told otherwise; the server may bound it between 2 and 20 of its ticks).
    /// A holder cut off for longer loses its holds: the server deletes their nodes, and
    /// the store declares the session lost itself once the server has not answered it
    /// for the timeout (see [Sessions](crate::backend::zookeeper#sessions)). With no wait, it also bounds a
    /// lock call's one attempt. It is also how long a dead holder keeps its lock.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// The node the locks live under, within the connect string's chroot if it has one
    /// ([`DEFAULT_BASE_PATH`] unless told otherwise): the lock `K` is the node
    /// `{base_path}/K`. An absolute path, without a trailing `/` (except `/` itself).
    pub fn base_path(mut self, path: impl Into<String>) -> Self {
        self.base_path = path.into();
        self
    }

    /// Authenticates the session with ZooKeeper's `digest` scheme, as `user:password`
    /// (Curator's `authorization("digest", ...)`), for an ensemble whose ACLs on the
    /// base path require it. The nodes the store creates are open to everyone
    /// (`world:anyone`, Curator's default), so that other clients can queue beside them.
    pub fn digest_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.digest = Some((user.into(), password.into()));
        self
    }

    /// Checks the settings, then opens a session (within the session timeout), so that
    /// a wrong address or password fails here, with the address and the cause.
    pub async fn build(self) -> Result<ZooKeeperStore, LockError> {
        self.check()?;
        let Self {
            connect_string,
            session_timeout,
            base_path,
            digest,
        } = self;
        let connect = Connect {
            connect_string,
            session_timeout,
            digest,
        };
        ZooKeeperStore::connect(connect, base_path).await
    }

    fn check(&self) -> Result<(), LockError> {
        if self.connect_string.trim().is_empty() {
            return Err(LockError::Config(
                "the zookeeper connect string is empty".into(),
            ));
        }
        let millis = self.session_timeout.as_millis();
        if millis == 0 || millis > i32::MAX as u128 {
            return Err(LockError::Config(format!(
                "zookeeper session timeout {:?} is out of range (1 ms to about 24 days)",
                self.session_timeout
            )));
        }
        check_base_path(&self.base_path)
    }
}

/// A base path must be absolute, with no empty, `.` or `..` segment, and no trailing
/// `/` unless it is `/`.
fn check_base_path(path: &str) -> Result<(), LockError> {
    let bad = |why: &str| {
        Err(LockError::Config(format!(
            "zookeeper base path {path:?} {why}"
        )))
    };
    let Some(rest) = path.strip_prefix('/') else {
        return bad("must start with '/'");
    };
    if rest.is_empty() {
        return Ok(());
    }
    if rest
        .split('/')
        .any(|segment| matches!(segment, "" | "." | ".."))
    {
        return bad("has an empty, '.' or '..' segment");
    }
    if path.chars().any(|c| c.is_control()) {
        return bad("has a control character");
    }
    Ok(())
}

/// Never shows the password.
impl fmt::Debug for ZooKeeperStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperStoreBuilder")
            .field("connect_string", &self.connect_string)
            .field("session_timeout", &self.session_timeout)
            .field("base_path", &self.base_path)
            .field("user", &self.digest.as_ref().map(|(user, _)| user))
            .finish()
    }
}

impl IntoStore for ZooKeeperStoreBuilder {
    fn into_store(self) -> StoreFuture<'static, Arc<dyn Store>> {
        Box::pin(async move {
            let store: Arc<dyn Store> = Arc::new(self.build().await?);
            Ok(store)
        })
    }
}

const ZOOKEEPER: ChosenBy = ChosenBy {
    method: "zookeeper(..)",
    rank: 0,
    refusal: Some(
        "zookeeper(..) cannot be combined with url(..), pool(..), sentinel(..), cluster(..), redlock(..), in_memory() or store(..)",
    ),
};

#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
impl LockerBuilder {
    /// Keep the locks on the ZooKeeper ensemble of `connect_string` (see
    /// [`Locker::zookeeper`]). Shorthand for [`ZooKeeperStore::builder`] with its default
    /// settings, given to [`store`](LockerBuilder::store); give it a builder for others.
    pub fn zookeeper(self, connect_string: &str) -> Self {
        self.store_by(ZOOKEEPER, ZooKeeperStore::builder(connect_string))
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
impl Locker {
    /// Keeps the locks on the ZooKeeper ensemble of `connect_string` (`host:port` pairs,
    /// comma-separated, with an optional chroot suffix such as `/app`), in Apache
    /// Curator's layout, so that a Java service's `InterProcessMutex` on `/locks/K`
    /// shares the lock `K`. Holds last as long as the session (10 s past a lost
    /// connection); fencing tokens are the nodes' creation zxids. See
    /// [`crate::backend::zookeeper`].
    ///
    /// Shorthand for a [`ZooKeeperStore`](crate::backend::ZooKeeperStore) with its default
    /// settings, plugged in with [`LockerBuilder::store`](crate::LockerBuilder::store).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = lock_core::Locker::zookeeper("127.0.0.1:2181,127.0.0.1:2182/app").await?;
    /// let guard = locker.lock("report:7").await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn zookeeper(connect_string: &str) -> Result<Locker, LockError> {
        LockerBuilder::default()
            .zookeeper(connect_string)
            .build()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_paths_must_be_absolute_and_plain() {
        for good in ["/", "/locks", "/app/locks"] {
            check_base_path(good).unwrap();
        }
        for bad in ["", "locks", "/locks/", "/a//b", "/a/./b", "/.."] {
            let err = check_base_path(bad).unwrap_err();
            assert!(err.is_config(), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_password_is_never_shown() {
        let builder = ZooKeeperStoreBuilder::new("h:1").digest_auth("me", "s3cret");
        let shown = format!("{builder:?}");
        assert!(shown.contains("me") && !shown.contains("s3cret"), "{shown}");
    }
}
