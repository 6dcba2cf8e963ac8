use lock_core::{LockError, distributed_lock};

// `%` starts an escaped value (`%3A` is an escaped `:`), so the text may not hold one.
#[distributed_lock(key = "discount:50%:{id}")]
async fn discount(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
