use lock_core::{LockError, distributed_lock};

#[distributed_lock(key = "a:{from}", keys = ["a:{from}", "a:{to}"])]
async fn transfer(from: u64, to: u64) -> Result<(), LockError> {
    let _ = (from, to);
    Ok(())
}

fn main() {}
