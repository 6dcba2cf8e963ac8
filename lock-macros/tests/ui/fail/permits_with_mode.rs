use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "pool", mode = "read", permits = 3)]
async fn export(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
