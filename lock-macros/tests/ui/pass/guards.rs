//! `guard = name` binds `&LockGuard` with `key`, `&MultiGuard` with `keys`.

use lock_core::{LockError, LockGuard, Locker, MultiGuard, distributed_lock};

#[distributed_lock(key = "one:{id}", locker = locker, guard = lock)]
async fn one(locker: &Locker, id: u64) -> Result<u64, LockError> {
    let lock: &LockGuard = lock;
    Ok(lock.fencing_token())
}

#[distributed_lock(keys = ["balance:{from}", "balance:{to}"], locker = locker, guard = locks)]
async fn transfer(locker: &Locker, from: u64, to: u64) -> Result<Vec<String>, LockError> {
    let locks: &MultiGuard = locks;
    Ok(locks.keys().map(str::to_owned).collect())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locker = Locker::in_memory();
    assert!(one(&locker, 1).await.unwrap() > 0);
    assert_eq!(
        transfer(&locker, 2, 1).await.unwrap(),
        ["balance:1", "balance:2"]
    );
}
