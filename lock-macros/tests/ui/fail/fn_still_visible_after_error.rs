//! On an error the fn is still emitted, so callers see only the one macro error.

use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "balance:{nope}")]
async fn deposit(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

async fn caller() -> Result<u64, LockError> {
    deposit(1).await
}

fn main() {
    let _ = caller;
}
