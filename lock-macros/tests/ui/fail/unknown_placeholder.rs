use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "balance:{account}")]
async fn deposit(id: u64, amount: i64) -> Result<i64, LockError> {
    Ok(id as i64 + amount)
}

fn main() {}
