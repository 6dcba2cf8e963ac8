//! The systems compared, and how each takes and gives back a lock.
//!
//! - `lock-core`: this crate, through its public API only: `Locker::lock_with` and
//!   `LockGuard::release`, default 30 s lease with the watchdog on; its fair lock too.
//! - `raw-fenced`: the floor for what lock-core does. One redis-rs `MultiplexedConnection`;
//!   one script does `SET NX PX` and, when it set the key, `INCR` of a fencing counter
//!   beside it; the release is a compare-and-delete script.
//! - `raw`: the floor of any Redis lock, with no fencing token: `SET NX PX` and the same
//!   compare-and-delete.
//! - `rslock`: the crate from crates.io with its default settings.
//! - `zookeeper-client`: that crate's own lock (`Client::lock`, in Curator's layout), the
//!   client lock-core's ZooKeeper store is built on, with the lock node's `czxid` read
//!   as its fencing token.
//! - `tokio-postgres`: the floor for lock-core's PostgreSQL store. One tokio-postgres
//!   connection and two statements prepared on it: the store's own take, in one
//!   statement (`pg_try_advisory_lock` and, when it took the lock, the fence upsert
//!   `INSERT .. ON CONFLICT DO UPDATE .. RETURNING`), and `pg_advisory_unlock`. It polls
//!   with no sleep; its waiting form, one connection per task, waits inside the server
//!   instead (`pg_advisory_lock` in place of `pg_try_advisory_lock`), as the store does.
//! - `mysql-floor`: the floor for lock-core's MySQL store waiting for a lock, one
//!   mysql_async connection per task: the store's own take, in one statement
//!   (`GET_LOCK` with a long timeout inside the fence `INSERT .. SELECT .. ON DUPLICATE
//!   KEY UPDATE`), and `RELEASE_LOCK`. (Its uncontended floor lives in the `mysql`
//!   scenario.)
//! - `none`: takes nothing and gives back nothing, for the baselines.
//!
//! raw and raw-fenced have no wake-up: a waiter tries again at once (`yield_now`, no sleep),
//! the lowest latency polling can give, and its cost in commands.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::postgres::{AdvisoryKey, KeyMapping};
use lock_core::backend::redis::redis::aio::MultiplexedConnection;
use lock_core::backend::redis::redis::{self, Script};
use lock_core::{LockGuard, LockOptions, Locker};
use mysql_async::prelude::Queryable;
use zookeeper_client as zk;

/// The lease of raw, raw-fenced and rslock; lock-core's default lease is the same.
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// How long a lock-core waiter may wait: longer than any scenario.
const WAIT: Duration = Duration::from_secs(300);

/// raw-fenced's acquire: the key if free, then a fencing token from the counter beside it.
/// Returns the token, or nil when the lock is held.
const RAW_FENCED_ACQUIRE: &str = r#"if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false"#;

/// The compare-and-delete of raw and raw-fenced (and of redis-py, node-redlock, redsync).
const RAW_RELEASE: &str = r#"if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0"#;

/// A lock under test.
#[derive(Debug, Clone)]
pub(crate) enum System {
    LockCore(Locker),
    /// lock-core's fair lock: `LockOptions::fair(true)`.
    Fair(Locker),
    RawFenced(Raw),
    Raw(Raw),
    Rslock(rslock::LockManager),
    ZooKeeperClient(ZooKeeperLock),
    PostgresFloor(PostgresFloor),
    /// The floor waiting inside the server: a session never blocks itself, so each task
    /// needs a connection of its own.
    PostgresFloorWaiting(PostgresFloor),
    /// The MySQL floor waiting inside the server, one connection per task.
    MySqlFloorWaiting(MySqlFloor),
    None,
}

/// A lock taken by a [`System`], to give back to it.
#[derive(Debug)]
pub(crate) enum Held {
    LockCore(LockGuard),
    Raw {
        key: String,
        token: String,
    },
    Rslock(rslock::Lock),
    /// The path of a zookeeper-client lock's node.
    ZooKeeperClient(String),
    /// The advisory key a `tokio-postgres` floor holds.
    PostgresFloor(i64),
    /// The user lock a MySQL floor holds.
    MySqlFloor(String),
    None,
}

impl System {
    pub(crate) async fn lock_core(url: &str) -> Self {
        Self::LockCore(Locker::connect(url).await.expect("connect lock-core"))
    }

    pub(crate) async fn raw_fenced(url: &str) -> Self {
        Self::RawFenced(Raw::connect(url).await)
    }

    pub(crate) async fn raw(url: &str) -> Self {
        Self::Raw(Raw::connect(url).await)
    }

    pub(crate) fn rslock(url: &str) -> Self {
        Self::Rslock(rslock::LockManager::new(vec![url.to_owned()]))
    }

    /// The system called `name`, connected to `url`.
    pub(crate) async fn connect(name: &str, url: &str) -> Self {
        match name {
            "lock-core" => Self::lock_core(url).await,
            "raw-fenced" => Self::raw_fenced(url).await,
            "raw" => Self::raw(url).await,
            "rslock" => Self::rslock(url),
            "none" => Self::None,
            other => panic!("unknown system {other:?}"),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::LockCore(_) | Self::Fair(_) => "lock-core",
            Self::RawFenced(_) => "raw-fenced",
            Self::Raw(_) => "raw",
            Self::Rslock(_) => "rslock",
            Self::ZooKeeperClient(_) => "zookeeper-client",
            Self::PostgresFloor(_) | Self::PostgresFloorWaiting(_) => "tokio-postgres",
            Self::MySqlFloorWaiting(_) => "mysql-floor",
            Self::None => "none",
        }
    }

    /// The commands Redis runs only inside this system's Lua scripts. `INFO commandstats`
    /// counts those too; leaving them out leaves the commands the client sent.
    pub(crate) fn in_script(&self) -> &'static [&'static str] {
        match self {
            Self::LockCore(_) => &[
                "set", "time", "incr", "pexpire", "get", "del", "publish", "pttl", "zadd",
                "zpopmin",
            ],
            Self::Fair(_) => &[
                "set", "time", "incr", "pexpire", "get", "del", "publish", "pttl", "hget", "lpop",
                "hdel", "hset", "rpush", "lrem", "zadd", "zpopmin",
            ],
            Self::RawFenced(_) => &["set", "incr", "get", "del"],
            Self::Raw(_) | Self::Rslock(_) => &["get", "del"],
            Self::ZooKeeperClient(_)
            | Self::PostgresFloor(_)
            | Self::PostgresFloorWaiting(_)
            | Self::MySqlFloorWaiting(_)
            | Self::None => &[],
        }
    }

    /// Takes the lock named `name`, waiting for it by the system's own means.
    pub(crate) async fn acquire(&self, name: &str) -> Held {
        match self {
            Self::LockCore(locker) => Held::LockCore(
                locker
                    .lock_with(name, LockOptions::new().wait(WAIT))
                    .await
                    .expect("lock-core lock"),
            ),
            Self::Fair(locker) => Held::LockCore(
                locker
                    .lock_with(name, LockOptions::new().wait(WAIT).fair(true))
                    .await
                    .expect("lock-core fair lock"),
            ),
            Self::RawFenced(raw) => {
                let key = format!("raw-fenced:{{{name}}}");
                let fence = format!("{key}:fence");
                let token = token();
                while raw.try_acquire_fenced(&key, &fence, &token).await.is_none() {
                    tokio::task::yield_now().await;
                }
                Held::Raw { key, token }
            }
            Self::Raw(raw) => {
                let key = format!("raw:{{{name}}}");
                let token = token();
                while !raw.try_acquire(&key, &token).await {
                    tokio::task::yield_now().await;
                }
                Held::Raw { key, token }
            }
            Self::Rslock(manager) => Held::Rslock(
                manager
                    .acquire_no_guard(format!("rslock:{{{name}}}").as_str(), LEASE)
                    .await
                    .expect("rslock acquire"),
            ),
            Self::ZooKeeperClient(lock) => Held::ZooKeeperClient(lock.acquire(name).await),
            Self::PostgresFloor(floor) => {
                let key = PostgresFloor::key(name);
                while !floor.try_acquire(name, key).await {
                    tokio::task::yield_now().await;
                }
                Held::PostgresFloor(key)
            }
            Self::PostgresFloorWaiting(floor) => {
                let key = PostgresFloor::key(name);
                floor.acquire_waiting(name, key).await;
                Held::PostgresFloor(key)
            }
            Self::MySqlFloorWaiting(floor) => {
                floor.acquire_waiting(name).await;
                Held::MySqlFloor(name.to_owned())
            }
            Self::None => Held::None,
        }
    }

    /// Gives back a lock this system took.
    pub(crate) async fn release(&self, held: Held) {
        match (self, held) {
            (Self::LockCore(_) | Self::Fair(_), Held::LockCore(guard)) => {
                guard.release().await.expect("lock-core release");
            }
            (Self::RawFenced(raw) | Self::Raw(raw), Held::Raw { key, token }) => {
                raw.release(&key, &token).await;
            }
            (Self::Rslock(_), Held::Rslock(lock)) => lock.release().await,
            (Self::ZooKeeperClient(lock), Held::ZooKeeperClient(path)) => lock.release(&path).await,
            (
                Self::PostgresFloor(floor) | Self::PostgresFloorWaiting(floor),
                Held::PostgresFloor(key),
            ) => floor.release(key).await,
            (Self::MySqlFloorWaiting(floor), Held::MySqlFloor(name)) => floor.release(&name).await,
            (Self::None, Held::None) => {}
            (system, held) => unreachable!("{held:?} given back to {}", system.name()),
        }
    }
}

/// An owner token: 128 random bits in hex.
fn token() -> String {
    format!("{:032x}", fastrand::u128(..))
}

/// A redis-rs `MultiplexedConnection` with the floors' scripts loaded.
#[derive(Debug, Clone)]
pub(crate) struct Raw {
    conn: MultiplexedConnection,
    fenced_acquire: Arc<Script>,
    release: Arc<Script>,
}

impl Raw {
    async fn connect(url: &str) -> Self {
        let mut conn = connection(url).await;
        let fenced_acquire = Script::new(RAW_FENCED_ACQUIRE);
        let release = Script::new(RAW_RELEASE);
        for script in [&fenced_acquire, &release] {
            script
                .prepare_invoke()
                .load_async(&mut conn)
                .await
                .expect("SCRIPT LOAD");
        }
        Self {
            conn,
            fenced_acquire: Arc::new(fenced_acquire),
            release: Arc::new(release),
        }
    }

    /// `SET key token NX PX lease`: whether it set the key.
    async fn try_acquire(&self, key: &str, token: &str) -> bool {
        let reply: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(LEASE.as_millis() as u64)
            .query_async(&mut self.conn.clone())
            .await
            .expect("SET NX PX");
        reply.is_some()
    }

    /// The same `SET` and an `INCR` of `fence`, in one script: the fencing token, if it set
    /// the key.
    async fn try_acquire_fenced(&self, key: &str, fence: &str, token: &str) -> Option<u64> {
        self.fenced_acquire
            .key(key)
            .key(fence)
            .arg(token)
            .arg(LEASE.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await
            .expect("EVALSHA fenced acquire")
    }

    /// Deletes `key` if it still holds `token`.
    async fn release(&self, key: &str, token: &str) {
        let _: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await
            .expect("EVALSHA release");
    }
}

/// zookeeper-client's lock on one session: the lock `name` is the node
/// `/zookeeper-client/{name}`, its contenders `_c_{uuid}-lock-{seq}` under it, as
/// Curator's `InterProcessMutex` lays them out.
#[derive(Debug, Clone)]
pub(crate) struct ZooKeeperLock {
    client: zk::Client,
}

impl ZooKeeperLock {
    pub(crate) async fn connect(connect_string: &str) -> Self {
        Self {
            client: zk::Client::connect(connect_string)
                .await
                .expect("connect zookeeper-client"),
        }
    }

    /// Waits for the lock `name` by the crate's own means (a watch on the node before its
    /// own), then reads its node's `czxid`, the fencing token: the path of its node.
    ///
    /// The crate's guard deletes the node in the background when dropped, after the
    /// release below has deleted it already; so it is forgotten instead.
    async fn acquire(&self, name: &str) -> String {
        let dir = format!("/zookeeper-client/{name}");
        let prefix = zk::LockPrefix::new_curator(&dir, "lock-").expect("lock prefix");
        let options = zk::LockOptions::new(zk::Acls::anyone_all())
            .with_ancestor_options(zk::CreateMode::Container.with_acls(zk::Acls::anyone_all()))
            .expect("lock options");
        let lock = self
            .client
            .lock(prefix, &[], options)
            .await
            .expect("zookeeper-client lock");
        let path = lock.lock_path().to_owned();
        std::mem::forget(lock);
        let stat = self
            .client
            .check_stat(&path)
            .await
            .expect("zookeeper-client: read the lock node")
            .expect("zookeeper-client: the lock node exists");
        std::hint::black_box(stat.czxid);
        path
    }

    /// Deletes the lock's node, and waits for the reply.
    async fn release(&self, path: &str) {
        self.client
            .delete(path, None)
            .await
            .expect("zookeeper-client: delete the lock node");
    }
}

/// The `tokio-postgres` floor: one connection, its statements prepared on it once.
#[derive(Debug, Clone)]
pub(crate) struct PostgresFloor {
    client: Arc<tokio_postgres::Client>,
    take: tokio_postgres::Statement,
    wait: tokio_postgres::Statement,
    unlock: tokio_postgres::Statement,
}

impl PostgresFloor {
    /// The floor's fence table, apart from the store's.
    const TABLE: &str = "floor_fences";

    pub(crate) async fn connect(url: &str) -> Self {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect tokio-postgres");
        tokio::spawn(connection);
        let table = Self::TABLE;
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {table} (name text PRIMARY KEY, fence bigint NOT NULL)"
            ))
            .await
            .expect("create the floor's fence table");
        let take_sql = |taken: &str| {
            format!(
                "INSERT INTO {table} (name, fence) SELECT $1, 1 WHERE {taken} \
                 ON CONFLICT (name) DO UPDATE SET fence = {table}.fence + 1 RETURNING fence"
            )
        };
        let take = client
            .prepare(&take_sql("pg_try_advisory_lock($2)"))
            .await
            .expect("prepare the floor's take");
        let wait = client
            .prepare(&take_sql("pg_advisory_lock($2) IS NOT NULL"))
            .await
            .expect("prepare the floor's wait");
        let unlock = client
            .prepare("SELECT pg_advisory_unlock($1)")
            .await
            .expect("prepare the floor's unlock");
        Self {
            client: Arc::new(client),
            take,
            wait,
            unlock,
        }
    }

    /// The lock `name`'s advisory key, as the store maps a long name: one bigint.
    fn key(name: &str) -> i64 {
        match KeyMapping::DistributedLock.key(name) {
            AdvisoryKey::Bigint(key) => key,
            other => panic!("the floor locks names of 10 characters or more, not {other:?}"),
        }
    }

    /// Takes the lock and draws its fencing token in one statement: whether it took it.
    async fn try_acquire(&self, name: &str, key: i64) -> bool {
        let rows = self
            .client
            .query(&self.take, &[&name, &key])
            .await
            .expect("the floor's take");
        let fence: Option<i64> = rows.first().map(|row| row.get(0));
        std::hint::black_box(fence).is_some()
    }

    /// Waits inside the server for the lock and draws its fencing token, in one statement.
    async fn acquire_waiting(&self, name: &str, key: i64) {
        let row = self
            .client
            .query_one(&self.wait, &[&name, &key])
            .await
            .expect("the floor's wait");
        std::hint::black_box(row.get::<_, i64>(0));
    }

    async fn release(&self, key: i64) {
        let row = self
            .client
            .query_one(&self.unlock, &[&key])
            .await
            .expect("the floor's unlock");
        assert!(
            row.get::<_, bool>(0),
            "the floor released a lock it did not hold"
        );
    }
}

/// The MySQL floor waiting inside the server: one mysql_async connection.
#[derive(Debug, Clone)]
pub(crate) struct MySqlFloor {
    conn: Arc<tokio::sync::Mutex<mysql_async::Conn>>,
}

impl MySqlFloor {
    /// The floor's fence table, apart from the store's.
    pub(crate) const TABLE: &str = "floor_fences";

    pub(crate) async fn connect(url: &str) -> Self {
        let conn = mysql_async::Conn::from_url(url)
            .await
            .expect("connect the mysql floor");
        Self {
            conn: Arc::new(tokio::sync::Mutex::new(conn)),
        }
    }

    /// Waits inside the server for the lock `name` and draws its fencing token, in one
    /// statement.
    async fn acquire_waiting(&self, name: &str) {
        let table = Self::TABLE;
        let sql = format!(
            "INSERT INTO {table} (name, token) SELECT ?, LAST_INSERT_ID(1) FROM DUAL \
             WHERE GET_LOCK(?, 300) = 1 \
             ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID({table}.token + 1)"
        );
        let mut conn = self.conn.lock().await;
        conn.exec_drop(sql, (name, name))
            .await
            .expect("the floor's wait");
        let fence = conn.last_insert_id();
        assert!(
            std::hint::black_box(fence).is_some_and(|f| f > 0),
            "no fence"
        );
    }

    async fn release(&self, name: &str) {
        let released: Option<i64> = self
            .conn
            .lock()
            .await
            .exec_first("SELECT RELEASE_LOCK(?)", (name,))
            .await
            .expect("the floor's RELEASE_LOCK");
        assert_eq!(
            released,
            Some(1),
            "the floor released a lock it did not hold"
        );
    }
}

/// A new multiplexed connection to `url`.
pub(crate) async fn connection(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis")
}
