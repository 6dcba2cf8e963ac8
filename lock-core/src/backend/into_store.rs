//! What [`LockerBuilder::store`](crate::LockerBuilder::store) takes: a store, or a builder
//! of one.

use std::sync::Arc;

use super::store::{Store, StoreFuture};

/// A store, or what builds one: what [`LockerBuilder::store`](crate::LockerBuilder::store)
/// takes. A store built already comes as an `Arc` (of a store of this crate, of one of
/// your own, or an `Arc<dyn Store>`); a store's builder (such as
/// [`RedisStoreBuilder`](crate::backend::RedisStoreBuilder)) builds it in
/// [`LockerBuilder::build`](crate::LockerBuilder::build), whose error is then the
/// builder's.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use lock_core::Locker;
/// use lock_core::backend::{MemoryStore, Store};
///
/// let shared = Arc::new(MemoryStore::new());
/// let one = Locker::builder().store(shared.clone()).build().await?;
/// let dynamic: Arc<dyn Store> = shared;
/// let other = Locker::builder().store(dynamic).build().await?;
/// let guard = one.lock("report:7").await?;
/// assert!(other.try_lock("report:7").await?.is_none(), "the same store");
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
///
/// A store's builder can be plugged in the same way; this one is built in
/// [`LockerBuilder::build`](crate::LockerBuilder::build):
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use lock_core::Locker;
/// use lock_core::backend::RedisStore;
///
/// let store = RedisStore::builder().url("redis://127.0.0.1:6379/").namespace("billing:");
/// let locker = Locker::builder().store(store).build().await?;
/// # let _ = locker;
/// # Ok(())
/// # }
/// ```
pub trait IntoStore: Send + Sync + 'static {
    /// The store, built (connecting to its server, for a store that has one).
    fn into_store(self) -> StoreFuture<'static, Arc<dyn Store>>;
}

impl IntoStore for Arc<dyn Store> {
    fn into_store(self) -> StoreFuture<'static, Arc<dyn Store>> {
        Box::pin(std::future::ready(Ok(self)))
    }
}

impl<S: Store> IntoStore for Arc<S> {
    fn into_store(self) -> StoreFuture<'static, Arc<dyn Store>> {
        let store: Arc<dyn Store> = self;
        Box::pin(std::future::ready(Ok(store)))
    }
}
