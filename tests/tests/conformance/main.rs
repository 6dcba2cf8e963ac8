//! The conformance suite: the store contract of `lock_core::backend`, checked through the
//! public `Locker` API, written once and run against every store.
//!
//! Each test in [`suite`] is generic over a [`StoreUnderTest`]: something that makes
//! `Locker`s sharing one store, as the replicas of one service would. The suite covers
//! exclusion (a lost-update counter), fencing tokens, `try_lock` and `Timeout`, a waiter
//! woken by a release, lease loss cancelling `with_lock`, dropped guards and dropped
//! acquires, reentrancy, bad keys, and kinds a store lacks; then the read-write lock
//! ([`suite::read_write`]) and the semaphore ([`suite::semaphore`]), skipped for a store
//! that lacks them, and what an operator sees of a lock ([`suite::inspect`]). It asserts no speed: every wait
//! is on a condition, bounded by a deadline, and each test by [`suite::TEST_LIMIT`].
//!
//! # How a store joins
//!
//! Implement [`StoreUnderTest`] for it (its name, as its `Store::name` says, and how to make
//! one more `Locker` on it), then add one line at the bottom of this file:
//!
//! ```ignore
//! conformance!(etcd, Etcd::spawn());
//! ```
//!
//! The first argument names the module of its tests (`etcd::exclusion_loses_no_update`,
//! ...); the second is an expression that makes a fresh store under test, evaluated once
//! per test inside the test's runtime. The suite is how a store proves itself: a store
//! that passes it keeps every promise of the contract the `Locker` relies on.

use std::sync::Arc;

use lock_core::Locker;
use lock_core::backend::MemoryStore;
use lock_tests::{MASTER_NAME, RedisCluster, RedisSentinel, RedisServer};

mod suite;

use suite::{StoreUnderTest, conformance};

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

    async fn locker(&self) -> Locker {
        Locker::builder()
            .store(self.store.clone())
            .build()
            .await
            .expect("a Locker on the shared memory store")
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

    async fn locker(&self) -> Locker {
        Locker::connect(&self.server.url())
            .await
            .expect("connect to the test redis-server")
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

    async fn locker(&self) -> Locker {
        Locker::redlock(self.masters.iter().map(RedisServer::url))
            .await
            .expect("connect to the test redlock masters")
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

    async fn locker(&self) -> Locker {
        Locker::cluster(self.cluster.urls())
            .await
            .expect("connect to the test cluster")
    }
}

conformance!(memory, Memory::new());
conformance!(redis, Redis::spawn());
conformance!(redlock, RedLock::spawn());
conformance!(sentinel, Sentinel::spawn());
conformance!(cluster, Cluster::spawn());
