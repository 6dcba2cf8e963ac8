//! Docs, other attributes and `#[tracing::instrument]` (above or below) are kept.

#![deny(missing_docs)]
//! A crate that documents everything.

use lock_core::{LockError, Locker, distributed_lock};

/// Instrumented, then locked.
#[tracing::instrument(skip(locker))]
#[distributed_lock(key = "a:{id}", locker = locker)]
#[must_use = "check the result"]
pub async fn above(locker: &Locker, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

/// Locked, then instrumented.
#[distributed_lock(key = "b:{id}", locker = locker)]
#[tracing::instrument(skip(locker), err)]
pub async fn below(locker: &Locker, id: u64) -> Result<u64, LockError> {
    #![allow(clippy::needless_return)]
    return Ok(id);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locker = Locker::in_memory();
    assert_eq!(above(&locker, 1).await.unwrap(), 1);
    assert_eq!(below(&locker, 2).await.unwrap(), 2);
}
