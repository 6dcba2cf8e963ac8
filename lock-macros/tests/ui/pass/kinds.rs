//! `mode = "read"` and `"write"` take the two sides of a read-write lock, over one key or
//! several; `permits = N` takes a semaphore's permit.

use lock_core::{LockError, LockKind, Locker, distributed_lock};

#[distributed_lock(key = "doc:{id}", locker = locker, mode = "read", guard = lock)]
async fn read(locker: &Locker, id: u64) -> Result<LockKind, LockError> {
    Ok(lock.kind())
}

#[distributed_lock(key = "doc:{id}", locker = locker, mode = "write", guard = lock)]
async fn write(locker: &Locker, id: u64) -> Result<LockKind, LockError> {
    Ok(lock.kind())
}

#[distributed_lock(keys = ["doc:{a}", "doc:{b}"], locker = locker, mode = "read", guard = locks)]
async fn read_both(locker: &Locker, a: u64, b: u64) -> Result<Vec<LockKind>, LockError> {
    Ok(locks.guards().iter().map(|g| g.kind()).collect())
}

#[distributed_lock(key = "exports", locker = locker, permits = 2, guard = permit)]
async fn export(locker: &Locker) -> Result<LockKind, LockError> {
    Ok(permit.kind())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locker = Locker::in_memory();
    assert_eq!(read(&locker, 1).await.unwrap(), LockKind::Read);
    assert_eq!(write(&locker, 1).await.unwrap(), LockKind::Write);
    assert_eq!(
        read_both(&locker, 1, 2).await.unwrap(),
        [LockKind::Read, LockKind::Read]
    );
    assert_eq!(
        export(&locker).await.unwrap(),
        LockKind::Semaphore { permits: 2 }
    );
}
