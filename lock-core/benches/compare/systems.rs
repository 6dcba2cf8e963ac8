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

use std::time::Duration;

use lock_core::{LockGuard, LockOptions, Locker};

use crate::floors::{LEASE, MySqlFloor, PostgresFloor, Raw, ZooKeeperLock};

/// How long a lock-core waiter may wait: longer than any scenario.
const WAIT: Duration = Duration::from_secs(300);

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
