use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "balance:{self.id}")]
async fn deposit(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
