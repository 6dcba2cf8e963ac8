use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "balance:{id}", locker = url)]
async fn deposit(url: &str, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
