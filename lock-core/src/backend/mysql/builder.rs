//! Configuring a MySQL/MariaDB store: its server, and every setting of its own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use mysql_async::Opts;
#[cfg(feature = "tls")]
use mysql_async::OptsBuilder;

use super::MySqlStore;
use super::name::NameMapping;
use super::session::Connect;
use crate::backend::sql::check_table;
use crate::backend::{IntoStore, Store, StoreFuture};
use crate::locker::builder::ChosenBy;
use crate::{LockError, Locker, LockerBuilder};

/// How many connections a store opens at most, unless told otherwise: ten sessions of
/// two connections each, so that five services' stores fit in a server's default
/// `max_connections` (151) with room to spare.
pub const DEFAULT_MAX_CONNECTIONS: usize = 20;
/// The table the fencing tokens are counted in, unless told otherwise.
pub const DEFAULT_FENCE_TABLE: &str = "lock_fences";
/// How long a holding session may stay idle before the server ends it, unless told
/// otherwise.
pub const DEFAULT_SESSION_LEASE: Duration = Duration::from_secs(30);

/// Configures a [`MySqlStore`]: the server it connects to (given to
/// [`MySqlStore::builder`]), and every setting of its own, each optional.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::Locker;
/// use lock_core::backend::MySqlStore;
/// use lock_core::backend::mysql::NameMapping;
///
/// let store = MySqlStore::builder("mysql://billing:s3cret@10.0.0.5:3306/billing")
///     .max_connections(8)
///     .fence_table("billing.lock_fences")
///     .name_mapping(NameMapping::DistributedLock)
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
/// use std::time::Duration;
/// use lock_core::backend::MySqlStore;
///
/// let err = MySqlStore::builder("mysql://127.0.0.1:1/db")
///     .session_lease(Duration::from_millis(1500))
///     .build()
///     .await
///     .unwrap_err();
/// assert!(err.is_config(), "{err}");
/// assert!(err.to_string().contains("whole seconds"), "{err}");
/// # }
/// ```
#[derive(Clone)]
pub struct MySqlStoreBuilder {
    url: String,
    max_connections: usize,
    fence_table: String,
    name_mapping: NameMapping,
    session_lease: Duration,
    #[cfg(feature = "tls")]
    tls_root_certificate: Option<Vec<u8>>,
}

impl MySqlStoreBuilder {
    pub(super) fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            fence_table: DEFAULT_FENCE_TABLE.to_owned(),
            name_mapping: NameMapping::default(),
            session_lease: DEFAULT_SESSION_LEASE,
            #[cfg(feature = "tls")]
            tls_root_certificate: None,
        }
    }

    /// How many connections the store's sessions open at most
    /// ([`DEFAULT_MAX_CONNECTIONS`] unless told otherwise; at least 2). A session is two
    /// connections, its own and the one that watches it, so the store opens at most half
    /// as many sessions. Holds share them; a session waiting inside the server for a lock
    /// holds nothing else. When every one is busy waiting, a further acquire waits for one
    /// to come free, until its deadline. `force_unlock`, `inspect` and giving up a wait
    /// open one short-lived connection more each.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// The InnoDB table that counts each lock's fencing tokens ([`DEFAULT_FENCE_TABLE`]
    /// unless told otherwise), created on first use: a name, or `database.name`, of ASCII
    /// letters, digits and `_`.
    pub fn fence_table(mut self, table: impl Into<String>) -> Self {
        self.fence_table = table.into();
        self
    }

    /// How a lock's key becomes its `GET_LOCK` name ([`NameMapping::DistributedLock`]
    /// unless told otherwise).
    pub fn name_mapping(mut self, mapping: NameMapping) -> Self {
        self.name_mapping = mapping;
        self
    }

    /// How long a session may stay idle before the server ends it, with its holds
    /// (`wait_timeout`; [`DEFAULT_SESSION_LEASE`] unless told otherwise). The store keeps
    /// its sessions busy while it runs, so a holder that is paused or wedged loses its
    /// locks about one lease later. Whole seconds, at least 1, as `wait_timeout` is.
    pub fn session_lease(mut self, lease: Duration) -> Self {
        self.session_lease = lease;
        self
    }

    /// Trusts the certificate authority `pem` (one or more PEM certificates) for the
    /// server's certificate, in place of the authorities built in (webpki-roots'): for a
    /// server whose certificate a private authority signed. The url asks for TLS
    /// (`require_ssl=true`) and says how far the certificate is checked (see the
    /// [module docs](crate::backend::mysql#tls)); an authority for a url that does not
    /// ask for TLS is refused.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use lock_core::backend::MySqlStore;
    ///
    /// let store = MySqlStore::builder("mysql://app@db.internal/app?require_ssl=true")
    ///     .tls_root_certificate(std::fs::read("/etc/mysql/ca.crt")?)
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
    pub async fn build(self) -> Result<MySqlStore, LockError> {
        let opts = self.check()?;
        let connect = Connect {
            opts,
            lease: self.session_lease,
        };
        MySqlStore::connect(
            connect,
            self.max_connections / 2,
            self.fence_table,
            self.name_mapping,
        )
        .await
    }

    fn check(&self) -> Result<Opts, LockError> {
        let opts = Opts::from_url(&self.url)
            .map_err(|e| LockError::Config(format!("mysql url is not valid: {e}")))?;
        if self.max_connections < 2 {
            return Err(LockError::Config(
                "mysql max_connections must be at least 2 (a session is two connections)".into(),
            ));
        }
        let lease = self.session_lease;
        if lease < Duration::from_secs(1)
            || lease.subsec_nanos() != 0
            || lease.as_secs() > 31_536_000
        {
            return Err(LockError::Config(format!(
                "mysql session lease {lease:?} must be whole seconds, from 1 s to a year \
                 (wait_timeout's range)"
            )));
        }
        check_table("mysql", &self.fence_table, "database.name")?;
        self.trusting(opts)
    }

    /// `opts`, trusting the authority given to
    /// [`tls_root_certificate`](Self::tls_root_certificate) if any.
    #[cfg(feature = "tls")]
    fn trusting(&self, opts: Opts) -> Result<Opts, LockError> {
        let Some(pem) = &self.tls_root_certificate else {
            return Ok(opts);
        };
        let Some(ssl) = opts.ssl_opts() else {
            return Err(LockError::Config(
                "mysql tls_root_certificate is given, but the url does not ask for TLS \
                 (require_ssl=true)"
                    .into(),
            ));
        };
        crate::backend::tls::certificates(pem, "the mysql tls root certificate")?;
        let ssl = ssl
            .clone()
            .with_root_certs(vec![pem.clone().into()])
            .with_disable_built_in_roots(true);
        Ok(OptsBuilder::from_opts(opts).ssl_opts(ssl).into())
    }

    /// `opts`; `Config` if the url asks for TLS, which needs the `tls` feature.
    #[cfg(not(feature = "tls"))]
    fn trusting(&self, opts: Opts) -> Result<Opts, LockError> {
        match opts.ssl_opts() {
            Some(_) => Err(LockError::Config(
                "mysql require_ssl=true needs TLS, which needs lock-core's `tls` feature".into(),
            )),
            None => Ok(opts),
        }
    }
}

/// Never shows the password.
impl fmt::Debug for MySqlStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("MySqlStoreBuilder");
        d.field("url", &crate::backend::redact::redact(&self.url))
            .field("max_connections", &self.max_connections)
            .field("fence_table", &self.fence_table)
            .field("name_mapping", &self.name_mapping)
            .field("session_lease", &self.session_lease);
        #[cfg(feature = "tls")]
        d.field("tls_root_certificate", &self.tls_root_certificate.is_some());
        d.finish()
    }
}

impl IntoStore for MySqlStoreBuilder {
    fn into_store(self) -> StoreFuture<'static, Arc<dyn Store>> {
        Box::pin(async move {
            let store: Arc<dyn Store> = Arc::new(self.build().await?);
            Ok(store)
        })
    }
}

const MYSQL: ChosenBy = ChosenBy {
    method: "mysql(..)",
    rank: 0,
    refusal: Some(
        "mysql(..) cannot be combined with url(..), pool(..), sentinel(..), cluster(..), redlock(..), zookeeper(..), postgres(..), in_memory() or store(..)",
    ),
};

#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
impl LockerBuilder {
    /// Keep the locks as `GET_LOCK` user locks on the MySQL or MariaDB server of `url`
    /// (see [`Locker::mysql`]). Shorthand for [`MySqlStore::builder`] with its default
    /// settings, given to [`store`](LockerBuilder::store); give it a builder for others.
    pub fn mysql(self, url: &str) -> Self {
        self.store_by(MYSQL, MySqlStore::builder(url))
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
impl Locker {
    /// Keeps the locks as `GET_LOCK` user locks on the MySQL or MariaDB server of `url`
    /// (such as `"mysql://user:pass@host:3306/db"`), named as madelson's DistributedLock
    /// names them, so that a .NET service's `MySqlDistributedLock` on the name `K` shares
    /// the lock `K`. Holds last as long as their session, which the server ends once it is
    /// idle for a lease (30 s); fencing tokens come from a counter table. See
    /// [`crate::backend::mysql`].
    ///
    /// Shorthand for a [`MySqlStore`](crate::backend::MySqlStore) with its default
    /// settings, plugged in with [`LockerBuilder::store`](crate::LockerBuilder::store).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = lock_core::Locker::mysql("mysql://app:secret@10.0.0.5:3306/app").await?;
    /// let guard = locker.lock("report:7").await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn mysql(url: &str) -> Result<Locker, LockError> {
        LockerBuilder::default().mysql(url).build().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_out_of_range_are_refused() {
        let builder = MySqlStoreBuilder::new("mysql://root@127.0.0.1:1/db");
        assert!(builder.check().is_ok());
        for bad in [
            builder.clone().max_connections(1),
            builder.clone().session_lease(Duration::from_millis(500)),
            builder.clone().session_lease(Duration::from_millis(2500)),
            builder.clone().fence_table("f;drop"),
            MySqlStoreBuilder::new("postgres://h/db"),
        ] {
            assert!(bad.check().unwrap_err().is_config(), "{bad:?}");
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_root_certificate_needs_a_url_asking_for_tls_and_a_pem_certificate() {
        let plain = MySqlStoreBuilder::new("mysql://root@127.0.0.1:1/db");
        let err = plain.tls_root_certificate("x").check().unwrap_err();
        assert!(err.to_string().contains("require_ssl=true"), "{err}");
        let tls = MySqlStoreBuilder::new("mysql://root@127.0.0.1:1/db?require_ssl=true");
        let err = tls.clone().tls_root_certificate("x").check().unwrap_err();
        assert!(err.to_string().contains("PEM"), "{err}");
        assert!(tls.check().unwrap().ssl_opts().is_some());
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn a_url_asking_for_tls_needs_the_tls_feature() {
        let tls = MySqlStoreBuilder::new("mysql://root@127.0.0.1:1/db?require_ssl=true");
        let err = tls.check().unwrap_err();
        assert!(err.to_string().contains("`tls` feature"), "{err}");
    }

    #[test]
    fn the_password_is_never_shown() {
        let builder = MySqlStoreBuilder::new("mysql://me:s3cret@h:3306/db");
        let shown = format!("{builder:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
