use lock_core::{LockError, distributed_lock};

#[distributed_lock(wait = "5s")]
async fn deposit(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
