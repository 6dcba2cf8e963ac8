//! Run with: cargo run -p basic
//!
//! Takes a lock on Redis when `REDIS_URL` is set (e.g. `redis://127.0.0.1:6379/`), in
//! memory otherwise, and prints what happens: the holder's fencing token, a second
//! contender that cannot get in, a hand-over once the lock is released, and a lock
//! run around a future.

use std::time::{Duration, Instant};

use lock_core::{LockError, LockOptions, Locker};

#[tokio::main]
async fn main() -> Result<(), LockError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();

    let locker = match std::env::var("REDIS_URL") {
        Ok(url) => {
            let locker = Locker::connect(&url).await?;
            println!("backend: redis ({})", locker_address(&url));
            locker
        }
        Err(_) => {
            println!("backend: in memory (set REDIS_URL to use redis)");
            Locker::in_memory()
        }
    };

    let key = "basic:report";
    let guard = locker
        .lock_with(key, LockOptions::new().lease(Duration::from_secs(5)))
        .await?;
    println!(
        "task A holds {:?} with fencing token {}",
        guard.key(),
        guard.fencing_token()
    );

    // Task B, elsewhere, tries without waiting, then waits for the hand-over.
    let contender = tokio::spawn({
        let locker = locker.clone();
        async move {
            let attempt = locker.try_lock(key).await?;
            println!(
                "task B, one attempt: {}",
                if attempt.is_some() {
                    "got it"
                } else {
                    "held elsewhere"
                }
            );
            let started = Instant::now();
            let guard = locker.lock(key).await?;
            println!(
                "task B got the lock after {:?}, fencing token {}",
                started.elapsed(),
                guard.fencing_token()
            );
            guard.release().await
        }
    });

    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("task A releases");
    guard.release().await?;
    contender.await.expect("task B panicked")?;

    let total = locker
        .with_lock(key, async { (1..=10).sum::<u32>() })
        .await?;
    println!("with_lock ran a future under the lock: sum = {total}");
    Ok(())
}

/// The host and port of a Redis URL, without any credentials.
fn locker_address(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.rsplit_once('@').map_or(rest, |(_, host)| host)
}
