//! The basic shape: a free fn, the key built from an argument, an error type that
//! converts from `LockError`.

use lock_core::{LockError, Locker, distributed_lock};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

#[distributed_lock(key = "balance:{id}", locker = locker, wait = "5s")]
async fn deposit(locker: &Locker, id: u64, amount: i64) -> Result<i64, AppError> {
    Ok(id as i64 + amount)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locker = Locker::in_memory();
    assert_eq!(deposit(&locker, 1, 41).await.unwrap(), 42);
    let _ = AppError::Lock;
}
