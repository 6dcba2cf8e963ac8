//! The returned future is `Send` when the body is, so it can be spawned.

use lock_core::{LockError, Locker, distributed_lock};

#[distributed_lock(key = "job:{id}", locker = locker, guard = lock)]
async fn job(locker: Locker, id: u64) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    Ok(lock.fencing_token())
}

#[distributed_lock(keys = ["a:{id}", "b:{id}"], locker = locker)]
async fn both(locker: &Locker, id: u64) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    Ok(id)
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locker = Locker::in_memory();
    let spawned = tokio::spawn(job(locker.clone(), 1));
    assert!(spawned.await.unwrap().unwrap() > 0);
    assert_eq!(assert_send(both(&locker, 2)).await.unwrap(), 2);
}
