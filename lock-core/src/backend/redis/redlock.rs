//! RedLock over Redis masters: the store this crate offers for one lock over N
//! independent Redis servers, each a [`RedisStore`] of its own spoken to as a
//! [master](super::master). The quorum itself is [`crate::backend::redlock`]'s.
//!
//! Each master keeps a lock as a Redis store does: an owner that names itself (an
//! election's candidate) keeps its holder id in `P{K}:holder_id` beside the lock key, on
//! every master that grants it, renewed and deleted with the hold there.

use std::future::Future;

use tokio::time::Instant;

use super::RedisStore;
use crate::backend::redlock::RedLock;
use crate::backend::store::{Acquire, Hold, HolderChanges, Outcome, Renewal, Store, StoreFuture};
use crate::{LockInfo, LockKey, LockKind};

mod builder;

pub use builder::RedLockStoreBuilder;

/// Locks over N independent Redis masters (RedLock): each lock is held while a quorum of
/// them hold it (see [`Locker::redlock`](crate::Locker::redlock) for what that gives).
/// Configured and connected by its [builder](RedLockStoreBuilder), over a
/// [`RedisStoreBuilder`](super::RedisStoreBuilder) for each master, and plugged into a
/// [`Locker`](crate::Locker) with [`LockerBuilder::store`](crate::LockerBuilder::store);
/// [`LockerBuilder::redlock`](crate::LockerBuilder::redlock) is a shorthand for the same.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use lock_core::Locker;
/// use lock_core::backend::{RedLockStore, RedisStore};
///
/// let masters = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
///     .map(|url| RedisStore::builder().url(url).namespace("billing:lock:"));
/// let store = RedLockStore::builder(masters).build().await?;
/// let locker = Locker::builder().store(Arc::new(store)).build().await?;
/// let guard = locker.lock("balance:42").await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedLockStore(RedLock<RedisStore>);

impl Store for RedLockStore {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn supports(&self, kind: LockKind) -> bool {
        self.0.supports(kind)
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        self.0.acquire(request)
    }

    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        self.0.release(hold)
    }

    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        self.0.renew(leases)
    }

    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        self.0.is_held(hold)
    }

    fn available<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, u32> {
        self.0.available(key, permits)
    }

    fn set_permits<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, ()> {
        self.0.set_permits(key, permits)
    }

    fn force_unlock<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, bool> {
        self.0.force_unlock(key)
    }

    /// What [`Locker::inspect`](crate::Locker::inspect) reports on RedLock: every master
    /// is asked, and a majority must answer ([`LockError::Quorum`](crate::LockError::Quorum)
    /// otherwise). A holder is shown when as many masters as its kind's quorum show it
    /// (those its guard needs), with the lease left that this many of them still give it
    /// (without the guard's drift allowance). An owner shows its guard's fencing token,
    /// read back from the fence counters that this many of those masters keep alike (the
    /// granting masters drew it, or were raised to it): `None` should fewer keep it (a
    /// counter ran out, or its master did not answer); readers and permits show none,
    /// their tokens being recorded by no master. An owner that named itself shows its
    /// holder id, which each master keeps in `P{K}:holder_id` beside the lock key.
    /// `waiting` is the most `Locker`s that a majority of the masters count. The kind as
    /// on [Redis](super::RedisStore).
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        self.0.inspect(key)
    }

    /// A pub/sub connection to every master, on which each announces the owners that
    /// name themselves (as on [Redis](super::RedisStore)); a majority must set theirs.
    fn watch_holders<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, HolderChanges> {
        self.0.watch_holders(key)
    }

    fn flush(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.0.flush()
    }

    fn close(&self) {
        self.0.close();
    }
}
