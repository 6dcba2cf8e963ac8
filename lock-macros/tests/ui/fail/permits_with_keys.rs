use lock_core::{LockError, distributed_lock};

#[distributed_lock(keys = ["a:{id}", "b:{id}"], permits = 2)]
async fn export(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
