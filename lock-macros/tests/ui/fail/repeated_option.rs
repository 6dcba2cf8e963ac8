use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "balance:{id}", wait = "5s", lease = "30s", wait = "1s")]
async fn deposit(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
