//! Test servers for the distributed-lock workspace: real `redis-server`, ZooKeeper,
//! PostgreSQL and MariaDB processes on free loopback ports, so a test suite never touches a
//! server it did not start (nor the ports 5432 and 3306, where a machine runs its own
//! databases).
//!
//! ```no_run
//! use lock_tests::{RedisCluster, RedisServer, TestServer, ValueExt};
//! use redis::Value;
//!
//! // One server: waits until it answers PING, killed (and its temp dir removed) on drop.
//! // Replies are redis-rs's `Value`s.
//! let server = RedisServer::spawn();
//! assert_eq!(server.cmd(&["SET", "k", "v"]).unwrap().as_str(), Some("OK"));
//! assert_eq!(server.cmd(&["GET", "k"]).unwrap(), Value::BulkString(b"v".to_vec()));
//! let url = server.url(); // "redis://127.0.0.1:{port}/", for the client under test
//! # let _ = url;
//!
//! // Faults: freeze it (clients time out), then let it go; kill it and start it again empty.
//! let mut server = server;
//! server.pause();
//! server.resume();
//! server.kill();
//! server.restart();
//! assert_eq!(server.cmd(&["GET", "k"]).unwrap(), Value::Nil);
//!
//! // Independent masters for RedLock; a 3-master cluster, and one with a replica of each
//! // master; a master with a replica and three sentinels (`failover()` promotes the
//! // replica).
//! let masters = RedisServer::spawn_many(3);
//! let cluster = RedisCluster::spawn();
//! let with_replicas = RedisCluster::spawn_with_replicas();
//! with_replicas.wait_replicated();
//! let sentinel = lock_tests::RedisSentinel::spawn();
//! # let _ = (masters, cluster, with_replicas, sentinel);
//! ```
//!
//! ZooKeeper, standalone or a 3-node ensemble, and Apache Curator's locks in Java processes
//! as peers of the store under test:
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_tests::{CuratorLock, CuratorPeer, TestServer, ZooKeeperEnsemble, ZooKeeperServer};
//!
//! // Serving (`srvr` says `Mode: standalone`) when `spawn` returns; killed on drop.
//! let mut server = ZooKeeperServer::spawn();
//! let connect = server.connect_string(); // "127.0.0.1:{port}", for the client under test
//! let before = server.znode_count(); // `zk_znode_count` of the `mntr` four-letter word
//! server.cli(&["create", "/a", "data"]).unwrap(); // ZooKeeper's own CLI
//! assert_eq!(server.znode_count(), before + 1);
//! server.pause(); // sessions time out
//! server.resume();
//! server.restart(); // same port, same data: znodes and sessions survive
//! assert_eq!(server.znode_count(), before + 1);
//!
//! // Three nodes; kill the leader, and the two others elect a new one.
//! let mut ensemble = ZooKeeperEnsemble::spawn();
//! let leader = ensemble.leader();
//! ensemble.kill(leader);
//! ensemble.wait_quorum();
//!
//! // Curator's `InterProcessMutex` in 3 processes, 50 times each, counting in a file.
//! let peer = CuratorPeer::compile();
//! let counter = peer.dir().join("counter");
//! std::fs::write(&counter, "0").unwrap();
//! let run = peer.spawn(3, &connect, "/locks/k", CuratorLock::Mutex, &counter, 50);
//! run.wait(Duration::from_secs(60)).unwrap();
//! # let _ = ensemble;
//! ```
//!
//! PostgreSQL and MariaDB, each a fresh server in its own temp dir, with its client as the
//! test's own way in:
//!
//! ```no_run
//! use lock_tests::{MariaDbServer, PostgresServer, TestServer};
//!
//! // `initdb`, then `postgres` accepting connections when `spawn` returns; killed on drop.
//! let mut postgres = PostgresServer::spawn();
//! let url = postgres.url(); // "postgres://postgres@127.0.0.1:{port}/postgres"
//! postgres.psql("CREATE TABLE t (n int); INSERT INTO t VALUES (1)").unwrap(); // via `psql`
//! postgres.pause(); // the server and every backend: nothing answers
//! postgres.resume();
//! postgres.restart(); // same port, same data; sessions (and their advisory locks) end
//! assert_eq!(postgres.psql("SELECT count(*) FROM t").unwrap(), "1");
//!
//! // `mariadb-install-db`, then `mariadbd`, with a database `test`.
//! let mut mariadb = MariaDbServer::spawn();
//! let url = mariadb.url(); // "mysql://root@127.0.0.1:{port}/test"
//! mariadb.sql("SELECT GET_LOCK('k', 0)").unwrap(); // via the `mariadb` client
//! mariadb.kill(); // SIGKILL: every session and its locks end; `restart` brings it back
//! # let _ = url;
//! ```
//!
//! Connections through a [`TcpProxy`] can be cut at any moment, mid-command.
//!
//! Tests that look at a lock's keys on the server find them with [`lock_key`] and the
//! helpers beside it ([`lock_exists`], [`lock_holder`], [`subscribed_lockers`],
//! [`sharded_subscribers`]), the one place that knows lock-core's Redis key layout.
//!
//! The harness library is std, with redis-rs to read replies; it reaches the databases
//! through their own command-line clients, `psql` and `mariadb`. The `torture` binary beside
//! it runs lock-core itself, in several processes, under every fault the harness can
//! inject, and checks that no update is lost: `cargo run --release -p lock-tests --bin torture` (`--help` for its
//! options).
//!
//! It needs `redis-server` (and, for a cluster, `redis-cli`) on `PATH`, and for ZooKeeper
//! Debian's `zookeeper` and `libcurator-recipes-java` packages, `java` and `javac`, for
//! PostgreSQL Debian's `postgresql` and for MariaDB its `mariadb-server`; if one is missing,
//! spawning fails with one line that says how to install it. Under root, which `initdb` and
//! `mariadbd` refuse, the database servers run as the `postgres` and `mysql` accounts those
//! packages create. Everything here is safe
//! to use from tests running in parallel threads: each server gets its own ports and temp
//! dir.
//!
//! The four servers share their lifecycle, [`TestServer`]: port, dir, process id, pause and
//! resume, kill and restart, log. When a test panics, every [`RedisServer`],
//! [`ZooKeeperServer`], [`PostgresServer`] and [`MariaDbServer`] it drops prints its log to
//! stderr, each line prefixed with the server's port.
#![deny(missing_docs)]

mod certificates;
mod cluster;
mod curator;
mod daemon;
mod deadline;
mod error;
mod keys;
mod mariadb;
mod postgres;
mod process;
mod proxy;
mod reply;
mod sentinel;
mod server;
mod test_server;
mod zookeeper;

use std::thread;
use std::time::{Duration, Instant};

pub use certificates::Certificates;
pub use cluster::RedisCluster;
pub use curator::{CuratorLock, CuratorPeer, CuratorRun};
pub use deadline::{DEADLINE_SLACK, calls_end_by_their_deadline_while_the_server_is_silent};
pub use error::HarnessError;
pub use keys::{
    listening_followers, lock_exists, lock_holder, lock_key, sharded_listening_followers,
    sharded_subscribers, subscribed_lockers,
};
/// Awaits a condition until it holds, as [`wait_until`] does for synchronous tests.
pub use lock_core::conformance::eventually;
pub use mariadb::MariaDbServer;
pub use postgres::PostgresServer;
pub use proxy::TcpProxy;
pub use reply::ValueExt;
pub use sentinel::{MASTER_NAME, RedisSentinel};
pub use server::RedisServer;
pub use test_server::TestServer;
pub use zookeeper::{ZooKeeperEnsemble, ZooKeeperServer};

/// The interval of every poll in the harness.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// Calls `cond` every 5 ms until it returns `true`.
///
/// A helper for synchronous tests that wait for something to happen.
///
/// # Panics
///
/// With `timed out after {deadline:?} waiting for {what}` if `cond` is still false after
/// `deadline`.
///
/// ```
/// let mut calls = 0;
/// lock_tests::wait_until(std::time::Duration::from_secs(1), "the third call", || {
///     calls += 1;
///     calls == 3
/// });
/// ```
#[track_caller]
pub fn wait_until(deadline: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let started = Instant::now();
    loop {
        if cond() {
            return;
        }
        if started.elapsed() >= deadline {
            panic!("timed out after {deadline:?} waiting for {what}");
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// The workspace README's Rust examples, compiled (and, unless marked `no_run`, run) by
/// `cargo test -p lock-tests --doc`, so that an example the API no longer matches fails
/// here, not in a reader's hands.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
