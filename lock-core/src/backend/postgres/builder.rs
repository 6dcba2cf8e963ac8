//! Configuring a PostgreSQL store: its database, and every setting of its own.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Config;

use super::PostgresStore;
use super::connector::{Tls, connector};
use super::key::KeyMapping;
use super::session::Connect;
use super::ssl::Ssl;
use crate::backend::sql::check_table;
use crate::backend::{IntoStore, Store, StoreFuture};
use crate::locker::builder::ChosenBy;
use crate::{LockError, Locker, LockerBuilder};

/// How many connections a store opens at most, unless told otherwise: five services'
/// stores fit in a server's default `max_connections` (100) with room to spare.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10;
/// The table the fencing tokens are counted in, unless told otherwise.
pub const DEFAULT_FENCE_TABLE: &str = "lock_fences";
/// How long a holding session may stay idle before the server ends it, unless told
/// otherwise.
pub const DEFAULT_SESSION_LEASE: Duration = Duration::from_secs(30);

/// Configures a [`PostgresStore`]: the database it connects to (given to
/// [`PostgresStore::builder`]), and every setting of its own, each optional.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::Locker;
/// use lock_core::backend::PostgresStore;
/// use lock_core::backend::postgres::KeyMapping;
///
/// let store = PostgresStore::builder("postgres://billing:s3cret@10.0.0.5:5432/billing")
///     .max_connections(4)
///     .fence_table("billing.lock_fences")
///     .key_mapping(KeyMapping::DistributedLock)
///     .session_lease(Duration::from_secs(10))
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
/// use lock_core::backend::PostgresStore;
///
/// let err = PostgresStore::builder("postgres://127.0.0.1:1/db")
///     .fence_table("fences; DROP TABLE accounts")
///     .build()
///     .await
///     .unwrap_err();
/// assert!(err.is_config(), "{err}");
/// assert!(err.to_string().contains("fence table"), "{err}");
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresStoreBuilder {
    url: String,
    max_connections: usize,
    fence_table: String,
    key_mapping: KeyMapping,
    session_lease: Duration,
    #[cfg(feature = "tls")]
    tls_root_certificate: Option<Vec<u8>>,
}

impl PostgresStoreBuilder {
    pub(super) fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            fence_table: DEFAULT_FENCE_TABLE.to_owned(),
            key_mapping: KeyMapping::default(),
            session_lease: DEFAULT_SESSION_LEASE,
            #[cfg(feature = "tls")]
            tls_root_certificate: None,
        }
    }

    /// How many connections the store opens at most ([`DEFAULT_MAX_CONNECTIONS`] unless
    /// told otherwise). Holds of different keys share them, but two holds of one key
    /// never share one (so that each is a row of `pg_locks`): the store holds at most
    /// this many reads of one key at once. A connection waiting inside the server for
    /// a lock holds nothing else. When no connection can take a lock, a further acquire
    /// waits for one to come free, until its deadline.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// The table that counts each lock's fencing tokens and stores each semaphore's count
    /// ([`DEFAULT_FENCE_TABLE`] unless told otherwise), created on first use: a name, or
    /// `schema.name`, of ASCII letters, digits and `_`.
    pub fn fence_table(mut self, table: impl Into<String>) -> Self {
        self.fence_table = table.into();
        self
    }

    /// How a lock's key becomes its advisory key ([`KeyMapping::DistributedLock`]
    /// unless told otherwise).
    pub fn key_mapping(mut self, mapping: KeyMapping) -> Self {
        self.key_mapping = mapping;
        self
    }

    /// How long a session may stay idle before the server ends it, with its holds
    /// (`idle_session_timeout`; [`DEFAULT_SESSION_LEASE`] unless told otherwise). The
    /// store keeps its sessions busy while it runs, so a holder that is paused or wedged
    /// loses its locks about one lease later. At least 1 s.
    pub fn session_lease(mut self, lease: Duration) -> Self {
        self.session_lease = lease;
        self
    }

    /// Trusts the certificate authority `pem` (one or more PEM certificates) for the
    /// server's certificate, in place of the url's `sslrootcert` and of the system's
    /// authorities: for a server whose certificate a private authority signed. The url's
    /// `sslmode` says how far the certificate is checked (see the
    /// [module docs](crate::backend::postgres#tls)); `prefer` and `require` check its chain
    /// against this authority, as libpq's do once a root certificate is given.
    /// `sslmode=disable` with an authority is refused.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use lock_core::backend::PostgresStore;
    ///
    /// let store = PostgresStore::builder("postgres://app@db.internal/app?sslmode=verify-full")
    ///     .tls_root_certificate(std::fs::read("/etc/postgresql/ca.crt")?)
    ///     .build()
    ///     .await?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificate = Some(pem.into());
        self
    }

    /// Checks the settings, then connects and creates the fence table if it is missing,
    /// so that a wrong address or password fails here, with the cause.
    pub async fn build(self) -> Result<PostgresStore, LockError> {
        let (config, tls) = self.check()?;
        let connect = Connect {
            config,
            tls,
            lease: self.session_lease,
            released: Arc::default(),
        };
        PostgresStore::connect(
            connect,
            self.max_connections,
            self.fence_table,
            self.key_mapping,
        )
        .await
    }

    fn check(&self) -> Result<(Config, Tls), LockError> {
        let (url, ssl) = Ssl::take(&self.url)?;
        let mut config = Config::from_str(&url)
            .map_err(|e| LockError::Config(format!("postgres url is not valid: {e}")))?;
        config.ssl_mode(ssl.mode.negotiated());
        if self.max_connections == 0 {
            return Err(LockError::Config(
                "postgres max_connections must be at least 1".into(),
            ));
        }
        if self.session_lease < Duration::from_secs(1)
            || self.session_lease.as_millis() > i32::MAX as u128
        {
            return Err(LockError::Config(format!(
                "postgres session lease {:?} is out of range (1 s to about 24 days)",
                self.session_lease
            )));
        }
        check_table("postgres", &self.fence_table, "schema.name")?;
        let tls = connector(&self.trusting(ssl)?)?;
        Ok((config, tls))
    }

    /// `ssl`, trusting the authority given to
    /// [`tls_root_certificate`](Self::tls_root_certificate) if any.
    #[cfg(feature = "tls")]
    fn trusting(&self, mut ssl: Ssl) -> Result<Ssl, LockError> {
        use super::ssl::{Root, SslMode};
        let Some(pem) = &self.tls_root_certificate else {
            return Ok(ssl);
        };
        if ssl.mode == SslMode::Disable {
            return Err(LockError::Config(
                "postgres tls_root_certificate is given, but the url says sslmode=disable".into(),
            ));
        }
        ssl.root = Some(Root::Pem(pem.clone()));
        Ok(ssl)
    }

    /// `ssl`: without the `tls` feature, no authority can be given.
    #[cfg(not(feature = "tls"))]
    fn trusting(&self, ssl: Ssl) -> Result<Ssl, LockError> {
        Ok(ssl)
    }
}

/// Never shows the password.
impl fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("PostgresStoreBuilder");
        d.field("url", &crate::backend::redact::redact(&self.url))
            .field("max_connections", &self.max_connections)
            .field("fence_table", &self.fence_table)
            .field("key_mapping", &self.key_mapping)
            .field("session_lease", &self.session_lease);
        #[cfg(feature = "tls")]
        d.field("tls_root_certificate", &self.tls_root_certificate.is_some());
        d.finish()
    }
}

impl IntoStore for PostgresStoreBuilder {
    fn into_store(self) -> StoreFuture<'static, Arc<dyn Store>> {
        Box::pin(async move {
            let store: Arc<dyn Store> = Arc::new(self.build().await?);
            Ok(store)
        })
    }
}

const POSTGRES: ChosenBy = ChosenBy {
    method: "postgres(..)",
    rank: 0,
    refusal: Some(
        "postgres(..) cannot be combined with url(..), pool(..), sentinel(..), cluster(..), redlock(..), zookeeper(..), in_memory() or store(..)",
    ),
};

#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
impl LockerBuilder {
    /// Keep the locks as advisory locks in the PostgreSQL database of `url` (see
    /// [`Locker::postgres`]). Shorthand for [`PostgresStore::builder`] with its default
    /// settings, given to [`store`](LockerBuilder::store); give it a builder for others.
    pub fn postgres(self, url: &str) -> Self {
        self.store_by(POSTGRES, PostgresStore::builder(url))
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
impl Locker {
    /// Keeps the locks as advisory locks in the PostgreSQL database of `url` (such as
    /// `"postgres://user:pass@host:5432/db"`), keyed as madelson's DistributedLock keys
    /// them, so that a .NET service's `PostgresDistributedLock` on the name `K` shares the
    /// lock `K`. Holds last as long as their session, which the server ends once it is
    /// idle for a lease (30 s); fencing tokens come from a counter table. See
    /// [`crate::backend::postgres`].
    ///
    /// Shorthand for a [`PostgresStore`](crate::backend::PostgresStore) with its default
    /// settings, plugged in with [`LockerBuilder::store`](crate::LockerBuilder::store).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = lock_core::Locker::postgres("postgres://app:secret@10.0.0.5:5432/app").await?;
    /// let guard = locker.lock("report:7").await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn postgres(url: &str) -> Result<Locker, LockError> {
        LockerBuilder::default().postgres(url).build().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "tls")]
    #[test]
    fn tls_settings_that_cannot_work_are_refused() {
        let builder = |url: &str| PostgresStoreBuilder::new(url);
        let refused = [
            (
                builder("postgres://h/db?sslmode=disable").tls_root_certificate("x"),
                "sslmode=disable",
            ),
            (builder("postgres://h/db").tls_root_certificate("x"), "PEM"),
            (
                builder("postgres://h/db?sslmode=verify-ca&sslrootcert=/lock-core/none.pem"),
                "cannot be read",
            ),
        ];
        for (bad, says) in refused {
            let err = bad.check().unwrap_err();
            assert!(err.is_config() && err.to_string().contains(says), "{err}");
        }
        assert!(builder("postgres://h/db?sslmode=require").check().is_ok());
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn a_mode_that_needs_tls_needs_the_tls_feature() {
        for url in [
            "postgres://h/db?sslmode=require",
            "host=h sslmode=verify-full",
            "postgres://h/db?sslrootcert=/ca.pem",
        ] {
            let err = PostgresStoreBuilder::new(url).check().unwrap_err();
            assert!(err.to_string().contains("`tls` feature"), "{url}: {err}");
        }
        assert!(PostgresStoreBuilder::new("postgres://h/db").check().is_ok());
    }

    #[test]
    fn the_password_is_never_shown() {
        let builder = PostgresStoreBuilder::new("postgres://me:s3cret@h:5432/db");
        let shown = format!("{builder:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
