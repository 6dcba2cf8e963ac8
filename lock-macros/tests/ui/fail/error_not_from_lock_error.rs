use lock_core::distributed_lock;

#[derive(Debug)]
struct AppError;

#[distributed_lock(key = "balance:{id}")]
async fn deposit(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
