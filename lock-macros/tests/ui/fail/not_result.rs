use lock_core::distributed_lock;

#[distributed_lock(key = "balance:{id}")]
async fn deposit(id: u64) -> Option<u64> {
    Some(id)
}

fn main() {}
