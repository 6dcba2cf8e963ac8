//! `?` and early `return` behave as written in the fn.

use lock_core::{LockError, Locker, distributed_lock};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Parse(std::num::ParseIntError),
    Empty,
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(e: std::num::ParseIntError) -> Self {
        AppError::Parse(e)
    }
}

#[distributed_lock(key = "parse:{input}", locker = locker)]
async fn parse(locker: &Locker, input: &str) -> Result<u32, AppError> {
    if input.is_empty() {
        return Err(AppError::Empty);
    }
    let n: u32 = input.parse()?;
    if n == 0 {
        return Ok(1);
    }
    Ok(n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locker = Locker::in_memory();
    assert!(matches!(parse(&locker, "").await, Err(AppError::Empty)));
    assert!(matches!(parse(&locker, "x").await, Err(AppError::Parse(_))));
    assert!(matches!(parse(&locker, "0").await, Ok(1)));
    assert!(matches!(parse(&locker, "7").await, Ok(7)));
    let _ = AppError::Lock;
}
