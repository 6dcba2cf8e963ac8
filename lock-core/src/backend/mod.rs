//! The store contract: where locks live, behind one trait.
//!
//! A [`Locker`](crate::Locker) keeps its locks in a [`Store`]: Redis ([`RedisStore`], or
//! [`RedLockStore`] over independent masters; with the `redis` feature, on by default),
//! this process's memory ([`MemoryStore`]),
//! a ZooKeeper ensemble (`ZooKeeperStore`, with the `zookeeper` feature), a PostgreSQL
//! database (`PostgresStore`, with the `postgres` feature), a MySQL or MariaDB server
//! (`MySqlStore`, with the `mysql` feature), or one of your
//! own, plugged in with [`LockerBuilder::store`](crate::LockerBuilder::store), as an `Arc`
//! or as its builder (see [`IntoStore`]).
//! Each store owns its settings: a Redis store's are on its [builder](RedisStoreBuilder),
//! and the Redis methods of [`LockerBuilder`](crate::LockerBuilder) are shorthands for
//! it. One url picks any store by its scheme ([`LockerBuilder::url`](crate::LockerBuilder::url),
//! [`Locker::connect`](crate::Locker::connect)), in one table (`scheme.rs`).
//! The `Locker` does everything that is the same for every store (checking keys, options
//! and kinds, reentrancy, guards, the watchdog that renews leases, releasing dropped
//! guards, bounding every call by its wait); the store takes, keeps and gives back holds.
//!
//! **Unstable**: this contract may change in any release before 1.0.
//!
//! A store of your own, here a toy that keeps its locks in a map and polls for a held
//! one (a real one would talk to etcd or DynamoDB):
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use std::time::Duration;
//!
//! use lock_core::backend::{Acquire, Acquired, Hold, Outcome, Renewal, Store, StoreFuture};
//! use lock_core::{LockKind, Locker};
//! use tokio::time::Instant;
//!
//! #[derive(Debug, Default)]
//! struct MapStore {
//!     /// key -> (owner token, lease deadline); and the last fencing token drawn.
//!     locks: Mutex<(HashMap<String, (String, Instant)>, u64)>,
//! }
//!
//! impl MapStore {
//!     /// One attempt: the fencing token if taken, else how long the holder's lease runs.
//!     fn try_take(&self, request: &Acquire) -> Result<(u64, Instant), Duration> {
//!         let mut guard = self.locks.lock().unwrap();
//!         let (locks, fence) = &mut *guard;
//!         let now = Instant::now();
//!         match locks.get(request.key.as_str()) {
//!             Some((_, until)) if *until > now => Err(*until - now),
//!             _ => {
//!                 *fence += 1;
//!                 let until = now + request.lease;
//!                 locks.insert(request.key.to_string(), (request.token.to_string(), until));
//!                 Ok((*fence, until))
//!             }
//!         }
//!     }
//! }
//!
//! impl Store for MapStore {
//!     fn name(&self) -> &str {
//!         "map"
//!     }
//!
//!     fn supports(&self, kind: LockKind) -> bool {
//!         kind == LockKind::Exclusive
//!     }
//!
//!     fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
//!         Box::pin(async move {
//!             loop {
//!                 let holder_ttl = match self.try_take(request) {
//!                     Ok((fence, until)) => return Ok(Outcome::Acquired(Acquired::lease(fence, until))),
//!                     Err(ttl) => ttl,
//!                 };
//!                 if Instant::now() >= request.deadline {
//!                     return Ok(Outcome::Held { holder_ttl: Some(holder_ttl) });
//!                 }
//!                 let poll = Instant::now() + Duration::from_millis(10);
//!                 tokio::time::sleep_until(poll.min(request.deadline)).await;
//!             }
//!         })
//!     }
//!
//!     fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
//!         let mut guard = self.locks.lock().unwrap();
//!         let owned = guard.0.get(hold.key.as_str()).is_some_and(|(token, until)| {
//!             token == hold.token && *until > Instant::now()
//!         });
//!         if owned {
//!             guard.0.remove(hold.key.as_str());
//!         }
//!         Box::pin(std::future::ready(Ok(owned)))
//!     }
//!
//!     fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
//!         let mut guard = self.locks.lock().unwrap();
//!         let now = Instant::now();
//!         let renewed = leases
//!             .iter()
//!             .map(|r| match guard.0.get_mut(r.hold.key.as_str()) {
//!                 Some((token, until)) if token == r.hold.token && *until > now => {
//!                     *until = now + r.lease;
//!                     Some(*until)
//!                 }
//!                 _ => None,
//!             })
//!             .collect();
//!         Box::pin(std::future::ready(Ok(renewed)))
//!     }
//!
//!     fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
//!         let guard = self.locks.lock().unwrap();
//!         let held = guard.0.get(hold.key.as_str()).is_some_and(|(token, until)| {
//!             token == hold.token && *until > Instant::now()
//!         });
//!         Box::pin(std::future::ready(Ok(held)))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! let locker = Locker::builder().store(std::sync::Arc::new(MapStore::default())).build().await?;
//! let guard = locker.lock("report:7").await?;
//! assert_eq!(guard.fencing_token(), 1);
//! guard.release().await?;
//! // A kind the store lacks is refused, naming the store and the kind.
//! let err = locker.read("report:7").await.unwrap_err();
//! assert!(err.is_unsupported(), "{err}");
//! assert_eq!(err.to_string(), r#"lock "report:7": the map store does not support read locks"#);
//! # Ok(())
//! # }
//! ```
//!
//! # What a store promises
//!
//! - **Exclusion** as its kinds define it, and a **fencing token** with every
//!   acquisition, strictly greater than every earlier one for that key, minted the store's
//!   own way (Redis: a counter in the acquire script; ZooKeeper: the node's creation zxid;
//!   SQL: a sequence).
//! - **Ownership by token**: only the acquisition's [`token`](Acquire::token) releases,
//!   renews or is told it holds.
//! - **Waiting until the deadline, and not past it**: [`acquire`](Store::acquire) returns
//!   by [`Acquire::deadline`] with the lock or with [`Outcome::Held`]; at or after the
//!   deadline it makes exactly one attempt. It waits as suits it: on the server side (a
//!   blocking `GET_LOCK`, a ZooKeeper watch on the node before its own) or on the client
//!   side (Redis: a pub/sub wake-up, with a poll as the safety net). The `Locker` cuts
//!   short an acquire that runs on well past the deadline, and answers
//!   [`LockError::Backend`](crate::LockError::Backend).
//! - **Cancellation safety**: dropping an acquire's future leaves no lock behind; whatever
//!   it may have taken is given back by token.
//! - **A hold that ends is reported**: a lease store's holds run out unless
//!   [renewed](Store::renew) (the `Locker`'s watchdog renews them, in batches); a session
//!   store's holds live as long as its session, and it reports the session's end through
//!   the future given to [`Acquired::session`].
//! - **The holder id**: a holder that names itself ([`Acquire::holder_id`], an election's
//!   candidate) is named, with its fencing token, by [`inspect`](Store::inspect) from any
//!   process, so that an election's leader can be read by a process that holds nothing.
//! - **Kinds**: [`supports`](Store::supports) says which
//!   [`LockKind`](crate::LockKind)s it has. The `Locker` never asks it for another: the
//!   caller gets [`LockError::Unsupported`](crate::LockError::Unsupported).
//!
//! # The rules each kind keeps, on Redis and in memory
//!
//! Both stores of this crate decide the same things, Redis in its Lua scripts
//! (`src/scripts/`) and memory in `backend/memory/`. On each side one rule decides who
//! goes in for every kind: `admits` in `admission.lua`, prepended to every script that
//! takes a lock, and `admits` in `admission.rs`, with the same parameter (what the hold
//! takes of the lock, and who may wait ahead of it). A change to one rule changes both
//! sides of its row.
//!
//! | rule | Redis | memory |
//! |---|---|---|
//! | **exclusive** is taken when nobody holds the name, as any kind | `admission.lua`: `admits`; `acquire.lua` | `admission.rs`: `admits` |
//! | **fair** is taken when nobody holds the name and the caller is first in line (or the line is empty); a caller that waits takes a place at the back; a release, or a free lock found with a line, hands it to the first in line, drawing that waiter's fencing token | `admission.lua`: `admits`; `fair_acquire.lua`, `fair_release.lua`, `fair_leave.lua` (over `fair_line.lua`) | `admission.rs`: `admits`; `state.rs`: `Entry::wait`, `Entry::hand_over`; `mod.rs`: `try_acquire`; `wake.rs`: `Wake::after_release` |
//! | **read** is taken when no other kind holds the name and no writer that began to ask no later than the reader waits | `admission.lua`: `admits`; `read_acquire.lua`: `writer_ahead` | `admission.rs`: `admits`; `state.rs`: `Entry::writer_waiting_since` |
//! | **write** is taken when nobody holds the name; a writer that waits is counted among the waiting writers with when it began to ask, until it takes the lock or leaves | `admission.lua`: `admits`; `write_acquire.lua`, `write_release.lua` | `admission.rs`: `admits`; `state.rs`: `Entry::wait`, `Entry::stop_waiting`; `mod.rs`: `stop_waiting_to_write` |
//! | **permit** is taken while fewer than the stored count hold one and no other kind holds the name; the count is stored on first use, and asking with another is `Config` | `admission.lua`: `admits`; `permit_acquire.lua`, `set_permits.lua`, `permits.lua` | `admission.rs`: `admits`, `free_permits`; `mod.rs`: `try_acquire`, `set_permits`, `available` |
//! | **fencing token**: each holder draws the counter plus one as it is made a holder; a counter that ran out starts again from the wall clock in microseconds; its expiry is renewed every 64 tokens, and lasts at least the lease drawn | `fence.lua` | `fence.rs`: `Fence::draw` |
//! | **wake-ups**: an exclusive release wakes one waiting `Locker`; a write's release, or the last read's, wakes every waiter but the writers, and the writer that has waited longest; another read's wakes nobody; a permit's wakes one | `release.lua`, `write_release.lua`, `shared_release.lua` | `wake.rs`: `Wake::after_release` |
//! | **forced open**: every holder goes, every waiter is woken | `force_unlock.lua` | `mod.rs`: `force_unlock` |

pub(crate) mod fence;
mod into_store;
pub(crate) mod memory;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod mysql;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
pub(crate) mod redact;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(any(feature = "redis", test))]
pub(crate) mod redlock;
pub(crate) mod release;
mod scheme;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod sql;
pub(crate) mod store;
#[cfg(all(feature = "tls", any(feature = "postgres", feature = "mysql")))]
pub(crate) mod tls;
pub(crate) mod wait;
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub mod zookeeper;

pub use into_store::IntoStore;
pub use memory::MemoryStore;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use mysql::{MySqlStore, MySqlStoreBuilder};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PostgresStore, PostgresStoreBuilder};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::{RedLockStore, RedLockStoreBuilder, RedisStore, RedisStoreBuilder};
pub use store::{
    Acquire, Acquired, Expiry, Hold, HolderChanges, Outcome, Renewal, Store, StoreFuture,
};
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use zookeeper::{ZooKeeperStore, ZooKeeperStoreBuilder};
