//! The one table that maps a url's scheme to a store, for [`Locker::connect`] and
//! [`LockerBuilder::url`]: a row a store, with the schemes that name it and how its url
//! is handed to its builder, or the feature of lock-core it needs.

use std::future::ready;

use crate::locker::builder::ChosenBy;
use crate::{LockError, Locker, LockerBuilder};

/// Hands a url of its store's schemes to the builder, choosing that store.
type Choose = fn(LockerBuilder, &str) -> LockerBuilder;

/// One store that a url can name: the schemes that name it, lower case, as a url spells
/// them before `://`, and how its url is handed over, or the feature of lock-core it
/// needs while that is off.
type Row = (&'static [&'static str], Result<Choose, &'static str>);

const STORES: &[Row] = &[
    (
        &[
            "redis",
            "rediss",
            "valkey",
            "valkeys",
            "redis+unix",
            "valkey+unix",
            "unix",
        ],
        REDIS,
    ),
    (&["postgres", "postgresql"], POSTGRES),
    (&["mysql", "mariadb"], MYSQL),
    (&["zookeeper"], ZOOKEEPER),
    (&["memory"], Ok(memory)),
];

#[cfg(feature = "redis")]
const REDIS: Result<Choose, &str> = Ok(LockerBuilder::redis_url);
#[cfg(not(feature = "redis"))]
const REDIS: Result<Choose, &str> = Err("redis");
#[cfg(feature = "postgres")]
const POSTGRES: Result<Choose, &str> = Ok(postgres);
#[cfg(not(feature = "postgres"))]
const POSTGRES: Result<Choose, &str> = Err("postgres");
#[cfg(feature = "mysql")]
const MYSQL: Result<Choose, &str> = Ok(mysql);
#[cfg(not(feature = "mysql"))]
const MYSQL: Result<Choose, &str> = Err("mysql");
#[cfg(feature = "zookeeper")]
const ZOOKEEPER: Result<Choose, &str> = Ok(zookeeper);
#[cfg(not(feature = "zookeeper"))]
const ZOOKEEPER: Result<Choose, &str> = Err("zookeeper");

/// How a store other than Redis is chosen by [`LockerBuilder::url`]: alone (a Redis url
/// goes with a pool, and is chosen as the Redis shorthands choose it).
pub(crate) const URL: ChosenBy = ChosenBy {
    method: "url(..)",
    rank: 0,
    refusal: Some(
        "url(..) naming a store other than Redis cannot be combined with pool(..), sentinel(..), cluster(..), redlock(..), zookeeper(..), postgres(..), mysql(..), in_memory() or store(..)",
    ),
};

impl LockerBuilder {
    /// Keep the locks in the store that `url`'s scheme names, with the settings the url
    /// holds and this builder's:
    ///
    /// | scheme | store | feature |
    /// |---|---|---|
    /// | `redis://`, `rediss://`, `valkey://`, `valkeys://`, `redis+unix://`, `valkey+unix://`, `unix://` | one Redis server, as [`RedisStoreBuilder::url`](crate::backend::RedisStoreBuilder::url) takes it (`rediss://` needs `tls` too) | `redis` |
    /// | `postgres://`, `postgresql://` | PostgreSQL, as `Locker::postgres` | `postgres` |
    /// | `mysql://`, `mariadb://` | MySQL or MariaDB, as `Locker::mysql` | `mysql` |
    /// | `zookeeper://[user:password@]host:port[,host:port...][/chroot]` | a ZooKeeper ensemble, as `Locker::zookeeper`, with digest authentication for a user | `zookeeper` |
    /// | `memory://` | this process's memory, as [`in_memory`](Self::in_memory) | none |
    ///
    /// A Redis url goes with a [`pool`](Self::pool), as it always has; any other store's
    /// url is refused beside another store. A scheme whose feature is off, or one that
    /// names no store, is refused by [`build`](Self::build) with [`LockError::Config`]
    /// naming the feature to turn on, or the schemes there are; no error quotes the url,
    /// so none shows a password.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// use lock_core::Locker;
    ///
    /// let url = std::env::var("LOCK_URL").unwrap_or_else(|_| "memory://".into());
    /// let locker = Locker::builder().url(&url).build().await?;
    /// let _guard = locker.lock("job:1").await?;
    ///
    /// let refused = Locker::builder().url("etcd://h:2379").build().await.unwrap_err();
    /// assert!(refused.to_string().contains("etcd"), "{refused}");
    /// # Ok(())
    /// # }
    /// ```
    pub fn url(self, url: &str) -> Self {
        match chooser(STORES, url) {
            Ok(choose) => choose(self, url),
            Err(refused) => self.choose(URL, Box::new(move |_| Box::pin(ready(Err(refused))))),
        }
    }
}

impl Locker {
    /// Connects to the store that `url`'s scheme names, with the default settings: see
    /// [`LockerBuilder::url`] for the schemes. Fails within the store's connect timeout
    /// when its server cannot be reached, naming the address (never the password) and
    /// the cause.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = lock_core::Locker::connect("redis://127.0.0.1:6379/").await?;
    /// # let _ = locker;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<Locker, LockError> {
        Self::builder().url(url).build().await
    }
}

/// How `url` is handed to its store's builder by `stores`, or why it cannot be.
fn chooser(stores: &[Row], url: &str) -> Result<Choose, LockError> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(LockError::Config(format!(
            "a store url starts with its scheme and `://`, such as `redis://127.0.0.1:6379/`; the schemes are {}",
            known(stores)
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    let Some((_, choose)) = stores
        .iter()
        .find(|(schemes, _)| schemes.contains(&&*scheme))
    else {
        return Err(LockError::Config(format!(
            "no store has the url scheme `{scheme}`; the schemes are {}",
            known(stores)
        )));
    };
    choose.map_err(|feature| {
        LockError::Config(format!(
            "the url scheme `{scheme}` needs lock-core's `{feature}` feature, which is off"
        ))
    })
}

/// Every scheme of `stores`, as a message lists them.
fn known(stores: &[Row]) -> String {
    let schemes: Vec<String> = stores
        .iter()
        .flat_map(|(schemes, _)| schemes.iter())
        .map(|scheme| format!("{scheme}://"))
        .collect();
    schemes.join(", ")
}

/// `memory://`: nothing may follow, so that a url meant for a server is never taken for
/// this process's memory.
fn memory(builder: LockerBuilder, url: &str) -> LockerBuilder {
    if url.len() > "memory://".len() {
        let refused = LockError::Config("a memory:// url takes nothing after `memory://`".into());
        return builder.choose(URL, Box::new(move |_| Box::pin(ready(Err(refused)))));
    }
    builder.memory_by(URL)
}

#[cfg(feature = "postgres")]
fn postgres(builder: LockerBuilder, url: &str) -> LockerBuilder {
    builder.store_by(URL, crate::backend::PostgresStore::builder(url))
}

/// `mariadb://` is spelled `mysql://` for the client.
#[cfg(feature = "mysql")]
fn mysql(builder: LockerBuilder, url: &str) -> LockerBuilder {
    let url = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") => format!("mysql://{rest}"),
        _ => url.to_owned(),
    };
    builder.store_by(URL, crate::backend::MySqlStore::builder(&url))
}

/// `zookeeper://[user:password@]hosts[/chroot]`: the hosts and chroot are the connect
/// string; a user and password, percent-decoded, authenticate with digest.
#[cfg(feature = "zookeeper")]
fn zookeeper(builder: LockerBuilder, url: &str) -> LockerBuilder {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let Some((user_info, connect_string)) = rest.rsplit_once('@') else {
        return builder.store_by(URL, crate::backend::ZooKeeperStore::builder(rest));
    };
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8_lossy()
            .into_owned()
    };
    let (user, password) = user_info.split_once(':').unwrap_or((user_info, ""));
    let store = crate::backend::ZooKeeperStore::builder(connect_string)
        .digest_auth(decode(user), decode(password));
    builder.store_by(URL, store)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error `url` is refused with at `build`.
    async fn refused(url: &str) -> String {
        match Locker::builder().url(url).build().await {
            Ok(_) => panic!("{url} was taken"),
            Err(e) => {
                assert!(e.is_config(), "{e}");
                e.to_string()
            }
        }
    }

    #[tokio::test]
    async fn memory_urls_keep_the_locks_in_memory() {
        let locker = Locker::connect("memory://").await.unwrap();
        assert_eq!(locker.store().name(), "memory");
        let named = refused("memory://shared").await;
        assert!(named.contains("nothing after"), "{named}");
    }

    #[tokio::test]
    async fn an_unknown_scheme_is_refused_listing_the_schemes() {
        let unknown = refused("etcd://user:s3cret@h:2379").await;
        assert!(unknown.contains("`etcd`"), "{unknown}");
        assert!(
            unknown.contains("postgres://") && unknown.contains("memory://"),
            "{unknown}"
        );
        assert!(!unknown.contains("s3cret"), "{unknown}");
        let no_scheme = refused("127.0.0.1:6379").await;
        assert!(no_scheme.contains("redis://"), "{no_scheme}");
    }

    #[tokio::test]
    async fn a_scheme_is_matched_whatever_its_case() {
        let locker = Locker::connect("MEMORY://").await.unwrap();
        assert_eq!(locker.store().name(), "memory");
    }

    #[tokio::test]
    async fn a_store_url_is_refused_beside_another_store() {
        let err = Locker::builder()
            .url("memory://")
            .in_memory()
            .build()
            .await
            .unwrap_err();
        assert!(err.to_string().contains("url(..) naming a store"), "{err}");
    }

    #[tokio::test]
    async fn a_later_url_replaces_an_earlier_one() {
        let locker = Locker::builder()
            .url("etcd://h:1")
            .url("memory://")
            .build()
            .await
            .unwrap();
        assert_eq!(locker.store().name(), "memory");
    }

    #[test]
    fn a_scheme_whose_feature_is_off_names_the_feature() {
        let stores: &[Row] = &[(&["etcd"], Err("etcd"))];
        let Err(off) = chooser(stores, "etcd://me:s3cret@h:2379") else {
            panic!("a store whose feature is off was chosen");
        };
        let off = off.to_string();
        assert!(off.contains("`etcd` feature"), "{off}");
        assert!(!off.contains("s3cret"), "{off}");
    }
}
