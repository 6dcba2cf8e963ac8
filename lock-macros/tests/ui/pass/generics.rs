//! Generic fns with bounds and where-clauses; a `Result` alias; patterns in parameters.

use std::fmt::Display;

use lock_core::{LockError, Locker, distributed_lock};

type Result<T, E = LockError> = std::result::Result<T, E>;

#[distributed_lock(key = "item:{id}", locker = locker)]
async fn fetch<I, T>(locker: &Locker, id: I, default: T) -> Result<T>
where
    I: Display + Send,
    T: Clone + Send,
{
    Ok(default.clone())
}

#[distributed_lock(key = "pair:{a}:{b}", locker = locker)]
async fn pair(
    locker: &Locker,
    (a, b): (u8, u8),
) -> Result<u16, Box<dyn std::error::Error + Send + Sync>> {
    Ok(u16::from(a) + u16::from(b))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locker = Locker::in_memory();
    assert_eq!(fetch(&locker, "x", 5).await.unwrap(), 5);
    assert_eq!(pair(&locker, (1, 2)).await.unwrap(), 3);
}
