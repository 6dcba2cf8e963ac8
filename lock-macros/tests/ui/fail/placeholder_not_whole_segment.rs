use lock_core::{LockError, distributed_lock};

// Text joined to a value: `balance-{id}` with "1" and `balance{id}` with "-1" make one key.
#[distributed_lock(key = "balance-{id}")]
async fn deposit(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

// `{a}{b}` makes one key of "1", "23" and "12", "3".
#[distributed_lock(keys = ["pair:{a}:{b}", "pair:{a}{b}"])]
async fn pair(a: u64, b: u64) -> Result<u64, LockError> {
    Ok(a + b)
}

fn main() {}
