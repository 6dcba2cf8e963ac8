use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "balance:{id}", mode = "read")]
async fn balance(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
