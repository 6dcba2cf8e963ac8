//! The conformance suite of `lock_core::conformance`, run against every store of this
//! repository: memory (with leases, and with sessions), one Redis server, RedLock over
//! three, Sentinel and Cluster, a ZooKeeper server, a PostgreSQL server and a MariaDB server. Each `conformance!` line at the bottom makes one module of
//! tests (`memory::exclusion_loses_no_update`, ...).

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{MemoryStore, MySqlStore, PostgresStore, ZooKeeperStore};
use lock_core::conformance::{Followers, Holds, StoreUnderTest};
use lock_core::{Locker, conformance};
use lock_tests::{
    MASTER_NAME, MariaDbServer, PostgresServer, RedisCluster, RedisSentinel, RedisServer, ValueExt,
    ZooKeeperServer, eventually, listening_followers, lock_key, sharded_listening_followers,
    sharded_subscribers, subscribed_lockers,
};

mod common;

/// How long a cut pub/sub connection may take to be opened again.
const RESUBSCRIBED: Duration = Duration::from_secs(10);
/// The lease of the sessions that the paused-holder checks pause a holder past: long
/// enough that a loaded machine keeps them, short enough to outlast in a test.
const SESSION_LEASE: Duration = Duration::from_secs(2);

/// One [`MemoryStore`], shared by every `Locker` of a test.
#[derive(Debug)]
struct Memory {
    store: Arc<MemoryStore>,
}

impl Memory {
    fn new() -> Self {
        Self {
            store: Arc::new(MemoryStore::new()),
        }
    }
}

impl StoreUnderTest for Memory {
    fn name(&self) -> &str {
        "memory"
    }

    fn followers(&self) -> Followers {
        Followers::Told
    }

    async fn locker(&self) -> Locker {
        Locker::builder()
            .store(self.store.clone())
            .build()
            .await
            .expect("a Locker on the shared memory store")
    }
}

/// The same locks in memory, each `Locker` holding them on a session of its own
/// ([`MemoryStore::session`]): the session half of the suite, run on the one store that
/// has both.
#[derive(Debug)]
struct MemorySessions {
    locks: MemoryStore,
}

impl MemorySessions {
    fn new() -> Self {
        Self {
            locks: MemoryStore::new(),
        }
    }
}

impl StoreUnderTest for MemorySessions {
    fn name(&self) -> &str {
        "memory"
    }

    fn followers(&self) -> Followers {
        Followers::Told
    }

    fn holds(&self) -> Holds {
        Holds::Session
    }

    async fn locker(&self) -> Locker {
        Locker::builder()
            .store(Arc::new(self.locks.session()))
            .build()
            .await
            .expect("a Locker on a session of the shared memory store")
    }

    async fn end_session(&self, locker: &Locker) {
        let store: &dyn Any = locker.store().as_ref();
        let session = store
            .downcast_ref::<MemoryStore>()
            .expect("a Locker of this store under test");
        session.end_session().await;
    }

    fn session_lease(&self) -> Option<Duration> {
        Some(SESSION_LEASE)
    }

    /// A Locker on a [`MemoryStore::leased_session`].
    async fn leased_locker(&self) -> Locker {
        Locker::builder()
            .store(Arc::new(self.locks.leased_session(SESSION_LEASE)))
            .build()
            .await
            .expect("a Locker on a leased session of the shared memory store")
    }
}

/// A `redis-server` of the test's own, on a free loopback port; each `Locker` connects to it.
#[derive(Debug)]
struct Redis {
    server: RedisServer,
}

impl Redis {
    fn spawn() -> Self {
        Self {
            server: RedisServer::spawn(),
        }
    }
}

impl StoreUnderTest for Redis {
    fn name(&self) -> &str {
        "redis"
    }

    fn followers(&self) -> Followers {
        Followers::Told
    }

    async fn locker(&self) -> Locker {
        common::connect(&self.server).await
    }

    /// Kills the pub/sub connection (`CLIENT KILL TYPE pubsub`) once the waiter's `Locker`
    /// subscribed, and waits until it has subscribed again.
    async fn cut_wakeups(&self, _locker: &Locker, key: &str) -> bool {
        cut_pub_sub(&self.server, || subscribed_lockers(&self.server, key)).await;
        true
    }

    async fn cut_followers(&self, _locker: &Locker, name: &str) -> bool {
        cut_pub_sub(&self.server, || listening_followers(&self.server, name)).await;
        true
    }
}

/// Three `redis-server`s of the test's own, each `Locker` holding its locks on a quorum of
/// them (RedLock).
#[derive(Debug)]
struct RedLock {
    masters: Vec<RedisServer>,
}

impl RedLock {
    fn spawn() -> Self {
        Self {
            masters: RedisServer::spawn_many(3),
        }
    }
}

impl StoreUnderTest for RedLock {
    fn name(&self) -> &str {
        "redlock"
    }

    fn followers(&self) -> Followers {
        Followers::Told
    }

    async fn locker(&self) -> Locker {
        Locker::redlock(self.masters.iter().map(RedisServer::url))
            .await
            .expect("connect to the test redlock masters")
    }

    /// On every master.
    async fn cut_followers(&self, _locker: &Locker, name: &str) -> bool {
        for master in &self.masters {
            cut_pub_sub(master, || listening_followers(master, name)).await;
        }
        true
    }
}

/// A master with a replica and three sentinels of the test's own; each `Locker` finds the
/// master through the sentinels.
#[derive(Debug)]
struct Sentinel {
    topology: RedisSentinel,
}

impl Sentinel {
    fn spawn() -> Self {
        Self {
            topology: RedisSentinel::spawn(),
        }
    }
}

impl StoreUnderTest for Sentinel {
    fn name(&self) -> &str {
        "redis"
    }

    fn followers(&self) -> Followers {
        Followers::Told
    }

    async fn locker(&self) -> Locker {
        Locker::sentinel(self.topology.sentinel_urls(), MASTER_NAME)
            .await
            .expect("connect through the test sentinels")
    }
}

/// A Redis Cluster of three masters of the test's own; each `Locker` is given every node
/// as a seed.
#[derive(Debug)]
struct Cluster {
    cluster: RedisCluster,
}

impl Cluster {
    fn spawn() -> Self {
        Self {
            cluster: RedisCluster::spawn(),
        }
    }
}

impl StoreUnderTest for Cluster {
    fn name(&self) -> &str {
        "redis"
    }

    fn followers(&self) -> Followers {
        Followers::Told
    }

    async fn locker(&self) -> Locker {
        Locker::cluster(self.cluster.urls())
            .await
            .expect("connect to the test cluster")
    }

    /// Kills the pub/sub connection to the lock's node once the waiter's `Locker`
    /// subscribed there (sharded channels), and waits until it has subscribed again.
    async fn cut_wakeups(&self, _locker: &Locker, key: &str) -> bool {
        let node = &self.cluster.nodes()[self.cluster.node_for_key(&lock_key(key))];
        cut_pub_sub(node, || sharded_subscribers(node, key)).await;
        true
    }

    async fn cut_followers(&self, _locker: &Locker, name: &str) -> bool {
        let node = &self.cluster.nodes()[self.cluster.node_for_key(&lock_key(name))];
        cut_pub_sub(node, || sharded_listening_followers(node, name)).await;
        true
    }
}

/// A standalone ZooKeeper server of the test's own; each `Locker` opens a session of its
/// own on it.
#[derive(Debug)]
struct ZooKeeper {
    server: ZooKeeperServer,
}

impl ZooKeeper {
    fn spawn() -> Self {
        Self {
            server: ZooKeeperServer::spawn(),
        }
    }
}

impl StoreUnderTest for ZooKeeper {
    fn name(&self) -> &str {
        "zookeeper"
    }

    fn followers(&self) -> Followers {
        Followers::Told
    }

    fn holds(&self) -> Holds {
        Holds::Session
    }

    async fn locker(&self) -> Locker {
        Locker::zookeeper(&self.server.connect_string())
            .await
            .expect("connect to the test zookeeper server")
    }

    /// Closes the session ([`ZooKeeperStore::end_session`]).
    async fn end_session(&self, locker: &Locker) {
        let store: &dyn Any = locker.store().as_ref();
        let store = store
            .downcast_ref::<ZooKeeperStore>()
            .expect("a Locker of this store under test");
        store.end_session().await;
    }

    fn session_lease(&self) -> Option<Duration> {
        Some(SESSION_LEASE)
    }

    async fn leased_locker(&self) -> Locker {
        let store =
            ZooKeeperStore::builder(&self.server.connect_string()).session_timeout(SESSION_LEASE);
        Locker::builder()
            .store(store)
            .build()
            .await
            .expect("connect to the test zookeeper server")
    }
}

/// A PostgreSQL server of the test's own; each `Locker` opens sessions of its own on it.
#[derive(Debug)]
struct Postgres {
    server: PostgresServer,
}

impl Postgres {
    fn spawn() -> Self {
        Self {
            server: PostgresServer::spawn(),
        }
    }
}

impl StoreUnderTest for Postgres {
    fn name(&self) -> &str {
        "postgres"
    }

    fn followers(&self) -> Followers {
        Followers::Told
    }

    fn holds(&self) -> Holds {
        Holds::Session
    }

    async fn locker(&self) -> Locker {
        Locker::postgres(&self.server.url())
            .await
            .expect("connect to the test postgres server")
    }

    /// Drops the store's connections ([`PostgresStore::end_session`]).
    async fn end_session(&self, locker: &Locker) {
        let store: &dyn Any = locker.store().as_ref();
        let store = store
            .downcast_ref::<PostgresStore>()
            .expect("a Locker of this store under test");
        store.end_session().await;
    }

    fn session_lease(&self) -> Option<Duration> {
        Some(SESSION_LEASE)
    }

    async fn leased_locker(&self) -> Locker {
        let store = PostgresStore::builder(&self.server.url()).session_lease(SESSION_LEASE);
        Locker::builder()
            .store(store)
            .build()
            .await
            .expect("connect to the test postgres server")
    }

    /// Ends the follower's listening connection (`pg_terminate_backend`).
    async fn cut_followers(&self, _locker: &Locker, _name: &str) -> bool {
        let listening = || {
            let count = self.server.psql(&format!("SELECT count(*) {LISTENING}"));
            std::future::ready(count.unwrap().trim() == "1")
        };
        eventually(RESUBSCRIBED, "the follower to listen", listening).await;
        let cut = self
            .server
            .psql(&format!(
                "SELECT count(pg_terminate_backend(pid)) {LISTENING}"
            ))
            .unwrap();
        assert_eq!(cut.trim(), "1", "the follower's connection was not cut");
        eventually(RESUBSCRIBED, "the follower to listen again", listening).await;
        true
    }
}

/// A MariaDB server of the test's own; each `Locker` opens sessions of its own on it.
#[derive(Debug)]
struct MariaDb {
    server: MariaDbServer,
}

impl MariaDb {
    fn spawn() -> Self {
        Self {
            server: MariaDbServer::spawn(),
        }
    }
}

impl StoreUnderTest for MariaDb {
    fn name(&self) -> &str {
        "mysql"
    }

    fn holds(&self) -> Holds {
        Holds::Session
    }

    async fn locker(&self) -> Locker {
        Locker::mysql(&self.server.url())
            .await
            .expect("connect to the test mariadb server")
    }

    /// Drops the store's connections ([`MySqlStore::end_session`]).
    async fn end_session(&self, locker: &Locker) {
        let store: &dyn Any = locker.store().as_ref();
        let store = store
            .downcast_ref::<MySqlStore>()
            .expect("a Locker of this store under test");
        store.end_session().await;
    }

    fn session_lease(&self) -> Option<Duration> {
        Some(SESSION_LEASE)
    }

    async fn leased_locker(&self) -> Locker {
        let store = MySqlStore::builder(&self.server.url()).session_lease(SESSION_LEASE);
        Locker::builder()
            .store(store)
            .build()
            .await
            .expect("connect to the test mariadb server")
    }
}

/// The sessions of a PostgreSQL server that listen for the holders of elections, as a
/// `FROM` clause.
const LISTENING: &str = "FROM pg_stat_activity WHERE query = 'LISTEN lock_holders'";

/// Once one connection listens on `server` for what `subscribers` counts (a lock's
/// wake-ups, an election's leaders), kills the pub/sub connections there, then waits
/// until it listens again.
async fn cut_pub_sub(server: &RedisServer, subscribers: impl Fn() -> usize) {
    let listening = || std::future::ready(subscribers() == 1);
    eventually(RESUBSCRIBED, "a subscriber", listening).await;
    let cut = server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).unwrap();
    assert_eq!(cut.as_int(), Some(1), "the pub/sub connection was not cut");
    eventually(RESUBSCRIBED, "the subscriber to subscribe again", listening).await;
}

conformance!(memory, Memory::new());
conformance!(memory_sessions, MemorySessions::new());
conformance!(redis, Redis::spawn());
conformance!(redlock, RedLock::spawn());
conformance!(sentinel, Sentinel::spawn());
conformance!(cluster, Cluster::spawn());
conformance!(zookeeper, ZooKeeper::spawn());
conformance!(postgres, Postgres::spawn());
conformance!(mariadb, MariaDb::spawn());
