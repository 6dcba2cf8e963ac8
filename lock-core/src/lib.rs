//! Distributed locks for async Rust services, with fencing tokens, kept in this process's
//! memory, in Redis (one server, Sentinel, a Cluster, or RedLock over independent
//! masters), in ZooKeeper, in PostgreSQL, in MySQL or MariaDB, or in a store of your own
//! behind one contract. Exclusive, fair, read-write, semaphore and multi-key locks; leader
//! election; and jobs that run once however many replicas fire them.
//!
//! Several replicas of a service agree that only one of them touches a resource (an
//! account balance, a job, a file) at a time:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::{LockOptions, Locker};
//!
//! // `Locker::connect(url).await?` in production, with the url of one of the stores
//! // below: the in-memory store has the same semantics within one process.
//! let locker = Locker::in_memory();
//!
//! let guard = locker
//!     .lock_with("balance:42", LockOptions::new().wait(Duration::from_secs(5)))
//!     .await?;
//! // ... read, modify and write the balance, passing guard.fencing_token() along ...
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Stores
//!
//! One url picks the store ([`Locker::connect`], [`LockerBuilder::url`]); each store also
//! has a shorthand on [`Locker`] and [`LockerBuilder`], and a builder of its own for every
//! setting. A store says which [kinds](LockKind) it has; asking for another is
//! [`LockError::Unsupported`].
//!
//! | store | feature | url, shorthand | a hold lasts | kinds |
//! |---|---|---|---|---|
//! | this process's memory, [`MemoryStore`](backend::MemoryStore) | none | `memory://`, [`Locker::in_memory`] | a lease | all |
//! | one Redis server, [`RedisStore`] | `redis` | `redis://`, `rediss://`, `Locker::connect` | a lease | all |
//! | Redis Sentinel's master, a [`RedisStore`] | `redis` | `Locker::sentinel` | a lease | all |
//! | a Redis Cluster, a [`RedisStore`] | `redis` | `Locker::cluster` | a lease | all |
//! | RedLock over independent Redis masters, [`RedLockStore`] | `redis` | `Locker::redlock` | a lease, on a quorum | all but fair |
//! | a ZooKeeper ensemble, in Apache Curator's layout, [`ZooKeeperStore`] | `zookeeper` | `zookeeper://`, `Locker::zookeeper` | its session | all |
//! | PostgreSQL advisory locks, [`PostgresStore`] | `postgres` | `postgres://`, `Locker::postgres` | its session | all |
//! | MySQL or MariaDB `GET_LOCK` user locks, [`MySqlStore`] | `mysql` | `mysql://`, `mariadb://`, `Locker::mysql` | its session | exclusive, semaphore |
//!
//! A lease runs out unless the `Locker`'s watchdog renews it; a session lasts while its
//! client keeps it alive, and the server ends it once the client is silent for its
//! timeout. Either way a hold that ends before its release is **lost**, and its guard
//! says so. The store contract is in [`backend`]; each store's module docs say how its
//! locks are laid out, which other clients share them (redis-py, node-redlock, Curator,
//! madelson's DistributedLock), and what a fault of its server means for its holds.
//!
//! # Features
//!
//! | feature | default | what it brings |
//! |---|---|---|
//! | `redis` | yes | the Redis stores, [`RedisStore`] and [`RedLockStore`], with their client crates (redis-rs, bb8), and the Redis shorthands of `Locker` and `LockerBuilder` |
//! | `macros` | yes | [`#[distributed_lock]`][distributed_lock], re-exported from lock-macros |
//! | `zookeeper` | no | [`ZooKeeperStore`] and `Locker::zookeeper` |
//! | `postgres` | no | [`PostgresStore`] and `Locker::postgres` |
//! | `mysql` | no | [`MySqlStore`] and `Locker::mysql` |
//! | `tls` | no | TLS by rustls (with ring) to the stores that are on: `rediss://` urls, PostgreSQL's `sslmode`, MySQL's `require_ssl`; each builder's `tls_root_certificate` |
//! | `metrics` | no | metrics through the [`metrics`](https://docs.rs/metrics) facade: `lock_acquisitions_total`, `lock_timeouts_total`, `lock_losses_total`, `lock_wait_seconds` and `lock_hold_seconds`, labelled by `kind` and `lock` |
//! | `conformance` | no | [`conformance`], the suite that proves a store keeps the store contract, for the tests of a store of your own |
//!
//! With `default-features = false` and one store's feature, lock-core builds that store's
//! client alone (memory is always there). `tracing` spans and events cover taking,
//! renewing and releasing locks, whatever the features.
//!
//! # How it works
//!
//! What every store shares, with Redis for the examples of what a store does its own way:
//!
//! - On Redis, a lock with key `K` is the string key `lock:{K}` holding its owner's
//!   random token, set with `SET NX PX` (the protocol of redis-py's `Lock`,
//!   node-redlock and redsync). Only the owner's token can release or extend it
//!   (compare-and-delete, compare-and-pexpire, in Lua). Every Lua script gets all its
//!   keys through `KEYS`, and all of a lock's store keys share the hash tag `{K}`, so
//!   they live in one cluster slot.
//! - Each acquisition draws a **fencing token** in the same round trip, strictly
//!   greater than every earlier one for that lock: hand it to your storage, on every
//!   access, so that a holder whose lease ran out cannot overwrite newer data (see
//!   [Fencing](#fencing)). Each store mints it its own way: a counter in Redis's acquire
//!   script, a ZooKeeper node's creation zxid, a counter table in PostgreSQL and MySQL.
//! - A **lease** (30 s by default) bounds how long a crashed owner blocks others. While a
//!   guard lives, the **watchdog** renews it every third of the lease, all due renewals
//!   of a `Locker` in one batch (one pipeline on Redis). If renewal fails until the lease
//!   runs out, the guard is **lost**: [`LockGuard::lost`] resolves and
//!   [`Locker::with_lock`] cancels its future. In a session store the session's timeout
//!   plays the lease's part: the client keeps the session alive, and a hold is lost when
//!   its session ends.
//! - **Waiters** are woken by a release, on Redis through one pub/sub connection per
//!   `Locker`: a release wakes one waiter of the `Locker` that has waited longest (the
//!   others make no attempt); a jittered poll bounded by the holder's lease
//!   ([`RedisStoreBuilder::safety_poll`](backend::RedisStoreBuilder::safety_poll)) is the
//!   safety net for a missed wake-up. A release of an exclusive lock that a task of the
//!   same `Locker` waits for **hands it over** to that task instead, in the same one
//!   round trip (owner and fencing token set by one script, no message), up to
//!   [`local_handovers`](backend::RedisStoreBuilder::local_handovers) times in a row.
//!   ZooKeeper, PostgreSQL and MySQL wait on the server side instead: a watch on the
//!   node ahead, a blocking advisory lock or `GET_LOCK` bounded by the wait.
//! - A **fair** lock ([`LockKind::Fair`]) serves its waiters first come first served,
//!   across every process: they queue in the store (`lock:{K}:queue` on Redis), and a
//!   release hands the lock straight to the next in line and tells that waiter's
//!   `Locker` alone, so exactly one waiter wakes and it need not ask again.
//! - A **read-write lock** ([`Locker::read`], [`Locker::write`]) admits many readers or
//!   one writer. It prefers writers: once a writer waits, readers that ask after it wait
//!   behind it, and those that waited for a writer all go in together when it releases.
//!   On Redis the readers, each with its own lease, are the sorted set
//!   `lock:{K}:readers`, and the lock key holds `read` while they hold it.
//! - A **semaphore** ([`Locker::semaphore`]) admits up to its count of holders, each
//!   with its own token, lease and fencing token; a crashed holder's permit comes back
//!   when its lease runs out, reckoned on the store's clock (Redis `TIME`), or when its
//!   session ends.
//! - Holds are **re-entrant per task**: a task that holds a lock and asks again gets it
//!   at once; another task waits, even on the same thread. A writer that asks to read
//!   gets its own write hold again; a reader that asks to write gets
//!   [`LockError::Upgrade`] at once (two readers upgrading would wait for each other for
//!   ever); permits are not re-entrant.
//! - Dropping a guard, an acquiring future or a `with_lock` future never leaves a lock
//!   behind: the lock is released in the background at once.
//!
//! # Configuring a store
//!
//! Each store owns its settings, on its builder ([`backend`] lists them), plugged into a
//! `Locker` with [`LockerBuilder::store`]; a url holds the settings that fit in one (see
//! [`LockerBuilder::url`]). The Redis stores come with the `redis` feature, on by default;
//! without it, lock-core builds no Redis client. A
//! [`RedisStore`](backend::RedisStore) is configured by
//! its builder (where its server is: a url, a bb8 pool, Sentinel's master or a Cluster;
//! its namespace, timeouts, fence counter expiry, local hand-overs and safety poll), and
//! plugged into a `Locker` with [`LockerBuilder::store`]. The `Locker`'s builder keeps
//! what every store shares: the default lease and wait, and the longest key. Its Redis
//! methods are shorthands for the store's builder, so these two `Locker`s are alike:
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use lock_core::Locker;
//! use lock_core::backend::RedisStore;
//!
//! let store = RedisStore::builder()
//!     .url("redis://127.0.0.1:6379/")
//!     .namespace("billing:lock:")
//!     .response_timeout(Duration::from_secs(1))
//!     .build()
//!     .await?;
//! let locker = Locker::builder()
//!     .store(Arc::new(store))
//!     .default_lease(Duration::from_secs(10))
//!     .build()
//!     .await?;
//!
//! let same = Locker::builder()
//!     .url("redis://127.0.0.1:6379/")
//!     .namespace("billing:lock:")
//!     .response_timeout(Duration::from_secs(1))
//!     .default_lease(Duration::from_secs(10))
//!     .build()
//!     .await?;
//! # let _ = (locker, same);
//! # Ok(())
//! # }
//! ```
//!
//! RedLock is built the same way, by a [`RedLockStore`](backend::RedLockStore)'s builder
//! over one Redis store builder per master, or by [`LockerBuilder::redlock`].
//!
//! # Readers and writers, and semaphores
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use lock_core::Locker;
//!
//! let locker = Locker::in_memory();
//!
//! // Readers share a read-write lock; a writer has it alone.
//! let reader = locker.read("price-list").await?;
//! let other_reader = tokio::spawn({
//!     let locker = locker.clone();
//!     async move { locker.read("price-list").await.map(|g| g.fencing_token()) }
//! });
//! assert!(other_reader.await.unwrap()? > reader.fencing_token());
//! reader.release().await?;
//! let writer = locker.write("price-list").await?;
//! writer.release().await?;
//!
//! // At most two exports at once, across every replica.
//! let exports = locker.semaphore("exports", 2);
//! let permit = exports.acquire().await?;
//! assert_eq!(exports.available().await?, 1);
//! permit.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Leaders, and jobs that run once
//!
//! Work that one replica at a time does for as long as it can (a scheduler, a queue's
//! consumer) elects a leader: [`Locker::election`]. [`Election::run`] campaigns, runs the
//! work while leading, cancels it if the leadership is lost and campaigns again; any
//! process reads who leads with [`Election::leader`] or [`Election::watch`]. A leader's
//! fencing token outranks every earlier leader's, so storage can refuse a deposed
//! leader's late writes.
//!
//! Work that every replica fires on a timer, but that must run once per tick (a nightly
//! report), takes its lock with no wait and holds it at least as long as the replicas'
//! clocks may disagree ([`LockOptions::hold_at_least`]; with the attribute,
//! `#[distributed_lock(key = "job:report", wait = "0s", hold_at_least = "50s")]`). The
//! replica that fires first runs it; the others find it held, and skip it:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::{LockOptions, Locker};
//!
//! let locker = Locker::in_memory();
//! let once = LockOptions::new().wait(Duration::ZERO).hold_at_least(Duration::from_secs(50));
//! let mut minutes = tokio::time::interval(Duration::from_secs(60));
//! for _ in 0..2 {
//!     minutes.tick().await;
//!     let Some(guard) = locker.try_lock_with("job:report", once).await? else {
//!         continue; // another replica runs it this minute
//!     };
//!     // ... make the report, passing guard.fencing_token() along ...
//!     guard.release().await?; // held on until 50 s after it was taken
//! }
//!
//! // One replica at a time sweeps, for as long as it leads.
//! let swept = locker
//!     .election("sweeper")
//!     .run("replica-a", |leadership| {
//!         let fence = leadership.fencing_token();
//!         async move { fence }
//!     })
//!     .await?;
//! # let _ = swept;
//! # Ok(())
//! # }
//! ```
//!
//! # Words
//!
//! One word for each thing, in the code and in these docs:
//!
//! | word | meaning |
//! |---|---|
//! | **key** | What a caller locks, such as `balance:42`; a [`LockKey`] once checked. |
//! | **store** | Where locks live: this process's memory, Redis, ZooKeeper, PostgreSQL, MySQL, or one of your own; a [`backend::Store`]. |
//! | **deployment** | Where a Redis store's server is: one server (a url or a bb8 pool), the master Sentinel names, or a Cluster. RedLock holds each lock on a quorum of independent **masters**, each one server. |
//! | **settings** | How a store is configured, by its own builder ([`backend::RedisStoreBuilder`]); a [`LockerBuilder`] holds only the defaults every store shares, and its Redis methods are **shorthands** for the store's builder. |
//! | **store key** | A store's own name for a lock, which its server knows it by: on Redis the key `lock:{balance:42}`, with `lock:{balance:42}:fence` and others beside it; on ZooKeeper the path of its node, `/locks/balance:42`; on PostgreSQL its advisory key; on MySQL its user lock's name, which `GET_LOCK` takes. A key maps to one store key; the key is what errors and [`LockError::key`] report. |
//! | **kind** | What a hold allows others meanwhile: exclusive, fair, read, write, semaphore ([`LockKind`]). |
//! | **token** | The random id of one acquisition (its owner token): only it releases, extends or renews the hold. |
//! | **fence**, fencing token | A number drawn with each acquisition, strictly greater than every earlier one for its key. |
//! | **hold** | One acquisition, while it lasts; the re-entrant guards of one task share it. |
//! | **reader**, **writer** | A holder of the read or the write side of a read-write lock. |
//! | **election** | Candidates, one of which leads at a time: the **leader** holds the election's lock; its [`Leadership`] is its guard. |
//! | **holder id** | What a holder calls itself, kept by the store beside its hold for anyone to read: a candidate's id. |
//! | **permit** | A hold of a semaphore; its **count** is how many it admits at once. |
//! | **guard** | A [`LockGuard`]: proof of a hold, which releases it when dropped. |
//! | **lease** | How long a hold lasts in a lease store (memory, Redis) unless renewed. |
//! | **session** | What a hold lasts as long as in a session store (ZooKeeper, SQL), which has no lease. |
//! | **watchdog** | The task of a `Locker` that renews its leases, and marks lost those it could not. |
//! | **lost** | A hold whose lease ran out, or whose session ended, before its release. |
//! | **wait** | How long a call waits for a held lock; its **deadline** is when that ends. |
//! | **attempt** | One try at a lock. |
//! | **waiter** | A task waiting for a lock; the waiters of one lock in this process are its **line**. |
//! | **wake-up** | A message telling a waiting `Locker` that the lock may be free. |
//! | **relay** | Sending on a wake-up that found no waiter here, to the next waiting `Locker`. |
//! | **release** | The holder gives the lock back: it goes free, or is handed over. |
//! | **hand-over** | A release that gives the lock straight to a waiter: a fair lock's to the next in its store-wide line, an exclusive lock's to a waiter of the same `Locker` (a local hand-over). |
//! | **leave** | A waiter stops waiting; a fair waiter leaves the store's line, and releases the lock if it was handed over to it meanwhile. |
//!
//! # Where things are
//!
//! - [`Locker`] (`locker/`), with [`Semaphore`] (`semaphore.rs`), a handle on one
//!   semaphore: checks keys, options and kinds, keeps reentrancy
//!   (`reentrancy.rs`) and the holds ([`LockGuard`] in `guard.rs`, the local record in
//!   `hold.rs`, renewed by `watchdog.rs`), and asks its store for the rest, such as
//!   what an operator sees of a lock ([`Locker::inspect`], a [`LockInfo`] in `info.rs`).
//! - The store contract, [`backend::Store`] (`backend/store.rs`, documented in
//!   [`backend`]): take a hold, waiting until a deadline; release it; renew leases;
//!   say whether a hold is still its owner's. Each store says which [`LockKind`]s it
//!   has; asking for another is [`LockError::Unsupported`].
//! - The stores: `backend/redis/` (the store itself in `mod.rs`, and one file per
//!   concern: its settings in `builder.rs`, the deployment, connection, Sentinel,
//!   scripts, which node a call goes to (`routing.rs`, over `slots.rs`), fencing tokens
//!   (`fencing.rs`), keys, the pub/sub hub, each lock kind's script calls, and the
//!   hand-over optimisations; `redlock.rs` holds a lock on a quorum of independent
//!   masters, configured in `redlock/builder.rs`), `backend/memory/`
//!   ([`backend::MemoryStore`]; one file per concern: the admission rule every kind
//!   shares, each lock's state, the fence counter, wake-ups and sessions), and
//!   `backend/zookeeper/`, `backend/postgres/` and `backend/mysql/`, each with its
//!   builder and shorthands in `builder.rs`, the two SQL stores over the session code
//!   they share in `backend/sql/`. One table maps a url's scheme to its store
//!   (`backend/scheme.rs`). How a lock is released, which each maps to its own script or state
//!   change, is `backend/release.rs`. The quorum itself is `backend/redlock/`, over
//!   any masters that implement its interface (`master.rs`). [`LockerBuilder`]
//!   (`locker/builder.rs`) holds the defaults every store shares, and shorthands that
//!   fill in a store's builder.
//! - Waiting on the client side, which Redis and memory share (`wait/`): the local wait
//!   line (`line.rs`), hand-overs (`handover.rs`), and the attempt-and-wait loop
//!   (`mod.rs`). A store that waits on the server side (a blocking `GET_LOCK`, a
//!   ZooKeeper watch) does without it.
//! - A new store is a type implementing [`backend::Store`], plugged in with
//!   [`LockerBuilder::store`]; the [`backend`] docs show a whole one. It proves itself
//!   by running the conformance suite, `lock_core::conformance` (behind the
//!   `conformance` feature), with one line in a test file of its own;
//!   `tests/tests/conformance.rs` runs it on this crate's stores.
//!
//! # Fencing
//!
//! A lease can run out while its holder still works (a long pause, a stopped process, a
//! cut network), and the lock goes to someone else before the old holder notices. The
//! storage the lock protects can refuse the old holder by its fencing token, but only if
//! it checks the token on **every access of a read-modify-write, not only on the final
//! write**. Checking the write alone lets a holder A (token 10) read, stall past its
//! lease, and write after B (token 11) has read the same value: 10 is newer than the last
//! write, so A's write is accepted and A is told it succeeded; then B writes over it, and
//! A's change is lost.
//!
//! Two patterns hold:
//! - **One conditional read-modify-write**: the storage reads, checks and writes in one
//!   step, refusing a token older than the record's (in SQL, `UPDATE .. SET balance =
//!   balance + $1, fence = $2 WHERE id = $3 AND fence <= $2`; on Redis, one Lua script).
//! - **A record of the newest token seen**: the storage keeps, with each record, the
//!   newest token that has read *or* written it, and refuses a read or a write with an
//!   older one:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use std::time::Duration;
//! use lock_core::{LockOptions, Locker};
//!
//! /// A balance, and the newest fencing token that has read or written it.
//! struct Account {
//!     balance: i64,
//!     seen: u64,
//! }
//!
//! impl Account {
//!     /// The balance, unless a newer holder has come by.
//!     fn read(&mut self, token: u64) -> Option<i64> {
//!         if token < self.seen {
//!             return None;
//!         }
//!         self.seen = token;
//!         Some(self.balance)
//!     }
//!
//!     /// Whether the write was accepted.
//!     fn write(&mut self, token: u64, balance: i64) -> bool {
//!         if token < self.seen {
//!             return false;
//!         }
//!         (self.seen, self.balance) = (token, balance);
//!         true
//!     }
//! }
//!
//! let locker = Locker::in_memory();
//! let mut account = Account { balance: 0, seen: 0 };
//!
//! // A reads, then stalls until its lease has run out.
//! let short = LockOptions::new().lease(Duration::from_millis(20)).watchdog(false);
//! let a = locker.lock_with("balance:42", short).await?;
//! let read_by_a = account.read(a.fencing_token()).unwrap();
//! a.lost().await;
//!
//! // B takes the lock and reads; A's late write is refused; B's goes through.
//! let b = locker.lock("balance:42").await?;
//! let read_by_b = account.read(b.fencing_token()).unwrap();
//! assert!(!account.write(a.fencing_token(), read_by_a + 10), "A is stale");
//! assert!(account.write(b.fencing_token(), read_by_b + 1));
//! b.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`RedisStore`]: backend::RedisStore
//! [`RedLockStore`]: backend::RedLockStore
//! [distributed_lock]: distributed_lock
//!
// What the features off by default bring: linked where it is built, and otherwise to its
// page on docs.rs, which builds every feature.
#![cfg_attr(
    feature = "zookeeper",
    doc = "[`ZooKeeperStore`]: backend::ZooKeeperStore"
)]
#![cfg_attr(
    feature = "postgres",
    doc = "[`PostgresStore`]: backend::PostgresStore"
)]
#![cfg_attr(feature = "mysql", doc = "[`MySqlStore`]: backend::MySqlStore")]
#![cfg_attr(feature = "conformance", doc = "[`conformance`]: mod@conformance")]
#![cfg_attr(
    not(feature = "zookeeper"),
    doc = "[`ZooKeeperStore`]: https://docs.rs/lock-core/0.4/lock_core/backend/struct.ZooKeeperStore.html"
)]
#![cfg_attr(
    not(feature = "postgres"),
    doc = "[`PostgresStore`]: https://docs.rs/lock-core/0.4/lock_core/backend/struct.PostgresStore.html"
)]
#![cfg_attr(
    not(feature = "mysql"),
    doc = "[`MySqlStore`]: https://docs.rs/lock-core/0.4/lock_core/backend/struct.MySqlStore.html"
)]
#![cfg_attr(
    not(feature = "conformance"),
    doc = "[`conformance`]: https://docs.rs/lock-core/0.4/lock_core/conformance/index.html"
)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod backend;
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;
mod election;
mod error;
mod guard;
mod hold;
mod info;
mod key;
mod kind;
mod locker;
mod multi;
mod options;
mod reentrancy;
mod semaphore;
mod telemetry;
mod watchdog;

#[cfg(test)]
mod tests;

/// The examples of this crate's README, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use election::{DEFAULT_WATCH_INTERVAL, Election, Leader, Leadership};
pub use error::LockError;
pub use guard::LockGuard;
pub use info::{HolderInfo, LockInfo, MAX_HOLDER_ID_LEN};
pub use key::{DEFAULT_MAX_KEY_LEN, KeySegment, LockKey};
pub use kind::LockKind;
pub use locker::{Locker, LockerBuilder};
pub use multi::MultiGuard;
pub use options::{DEFAULT_FENCE_TTL, DEFAULT_LEASE, DEFAULT_WAIT, LockOptions, MIN_LEASE};
pub use semaphore::Semaphore;

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use lock_macros::distributed_lock;

/// What `#[distributed_lock]` expands to. Not public API: no stability guarantees.
#[doc(hidden)]
pub mod __private {
    pub use crate::{KeySegment, LockError, LockGuard, LockKind, LockOptions, Locker, MultiGuard};
    pub use std::time::Duration;

    /// The locker set with [`Locker::set_global`], or the error saying how to set one.
    pub fn global() -> Result<Locker, LockError> {
        Locker::global().ok_or_else(|| {
            LockError::Config("no locker: pass locker = .. or call Locker::set_global first".into())
        })
    }

    /// What `locker = ..` accepts.
    #[diagnostic::on_unimplemented(
        message = "`locker = ..` must be a `Locker` (or `&Locker`, `Arc<Locker>`), not `{Self}`",
        label = "not a `Locker`"
    )]
    pub trait AsLocker {
        /// The locker.
        fn as_locker(&self) -> &Locker;
    }

    impl AsLocker for Locker {
        fn as_locker(&self) -> &Locker {
            self
        }
    }

    impl<T: AsLocker + ?Sized> AsLocker for &T {
        fn as_locker(&self) -> &Locker {
            (**self).as_locker()
        }
    }

    impl<T: AsLocker + ?Sized> AsLocker for std::sync::Arc<T> {
        fn as_locker(&self) -> &Locker {
            (**self).as_locker()
        }
    }

    impl<T: AsLocker + ?Sized> AsLocker for Box<T> {
        fn as_locker(&self) -> &Locker {
            (**self).as_locker()
        }
    }

    /// An owned handle to the locker of `locker = ..`.
    pub fn locker<L: AsLocker + ?Sized>(locker: &L) -> Locker {
        locker.as_locker().clone()
    }

    /// Releases after the body ran: its result stands even if the release fails.
    pub async fn release(guard: LockGuard) {
        let key = guard.key().to_owned();
        if let Err(e) = guard.release().await {
            tracing::warn!(key, error = %e, "release after #[distributed_lock] failed");
        }
    }

    /// [`release`] for several locks.
    pub async fn release_all(guards: MultiGuard) {
        if let Err(e) = guards.release().await {
            tracing::warn!(error = %e, "release after #[distributed_lock] failed");
        }
    }
}
