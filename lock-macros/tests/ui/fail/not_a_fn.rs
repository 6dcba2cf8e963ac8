use lock_core::distributed_lock;

#[distributed_lock(key = "balance")]
struct Balance(u64);

fn main() {}
