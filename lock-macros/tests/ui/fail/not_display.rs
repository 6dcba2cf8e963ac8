use lock_core::{LockError, distributed_lock};

struct AccountId(u64);

#[distributed_lock(key = "balance:{id}")]
async fn deposit(id: AccountId) -> Result<u64, LockError> {
    Ok(id.0)
}

fn main() {}
