//! Distributed locks for async Rust services, with Redis as the shared arbiter.
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
//! // `Locker::connect("redis://127.0.0.1/").await?` in production: the in-memory
//! // backend has the same semantics within one process.
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
//! # How it works
//!
//! - A lock `N` is the Redis string key `lock:{N}` holding its owner's random token,
//!   set with `SET NX PX` (the protocol of redis-py's `Lock`, node-redlock and redsync).
//!   Only the owner's token can release or extend it (compare-and-delete,
//!   compare-and-pexpire, in Lua). Every Lua script gets all its keys through `KEYS`,
//!   and all of a lock's keys share the hash tag `{N}`, so they live in one cluster slot.
//! - Each acquisition draws a **fencing token** in the same round trip, strictly
//!   greater than every earlier one for that lock: hand it to your storage so a writer
//!   whose lease ran out cannot overwrite newer data.
//! - A **lease** (30 s by default) bounds how long a crashed owner blocks others. While a
//!   guard lives, the **watchdog** renews it every third of the lease, pipelining all
//!   due renewals of a `Locker` in one batch. If renewal fails until the lease runs out,
//!   the guard is **lost**: [`LockGuard::lost`] resolves and [`Locker::with_lock`]
//!   cancels its future.
//! - **Waiters** are woken by the release script's `PUBLISH`, through one pub/sub
//!   connection per `Locker`: a release wakes one waiter of the `Locker` that has waited
//!   longest (the others make no attempt); a jittered poll bounded by the holder's lease
//!   is the safety net for a missed message. A release whose `Locker`
//!   has a task waiting for the lock **passes** it to that task instead, in the same
//!   one round trip (owner and fencing token set by one script, no message), up to
//!   [`LockerBuilder::local_handoffs`] times in a row.
//! - A **fair** lock ([`LockOptions::fair`]) serves its waiters first come first served,
//!   across every process: they queue in Redis (`lock:{N}:queue`), and a release hands
//!   the lock straight to the next in line and tells that waiter's `Locker` alone, so
//!   exactly one waiter wakes and it need not ask again.
//! - Holds are **re-entrant per task**: a task that holds a lock and asks again gets it
//!   at once; another task waits, even on the same thread.
//! - Dropping a guard, an acquiring future or a `with_lock` future never leaves a lock
//!   behind: the lock is released in the background at once.

#![deny(missing_docs)]

mod backend;
mod error;
mod guard;
mod key;
mod locker;
mod multi;
mod options;
mod reentrancy;
mod waiters;
mod watchdog;

#[cfg(test)]
mod tests;

pub use error::LockError;
pub use guard::LockGuard;
pub use key::{DEFAULT_MAX_KEY_LEN, LockKey};
pub use locker::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_FENCE_TTL, DEFAULT_LOCAL_HANDOFFS, DEFAULT_NAMESPACE, Locker,
    LockerBuilder,
};
pub use multi::MultiGuard;
pub use options::{DEFAULT_LEASE, DEFAULT_WAIT, LockOptions, MIN_LEASE};

/// The Redis client crates this crate is built on, re-exported so your versions match.
pub use bb8;
pub use bb8_redis;
pub use bb8_redis::RedisConnectionManager;
pub use redis;

#[cfg(feature = "macros")]
pub use lock_macros::distributed_lock;

/// What `#[distributed_lock]` expands to. Not public API: no stability guarantees.
#[doc(hidden)]
pub mod __private {
    pub use crate::{LockError, LockGuard, LockOptions, Locker, MultiGuard};
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
