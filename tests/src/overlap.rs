//! Holds of one kind and permits of one name, racing from two `Locker`s, for the database
//! stores' tests: a store that keeps the two on different server locks, each looking for
//! the other after taking its own, must never let both in at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LockKind, LockOptions, Locker};
use tokio::time::{Instant, timeout};

/// How long the tasks race.
const RACE: Duration = Duration::from_secs(3);
/// How long after the race a task may take to stop.
const PATIENCE: Duration = Duration::from_secs(5);

/// For three seconds, 8 tasks over the two `lockers` take the name `race` as `kind` (even
/// tasks) or a permit of the semaphore `race` of 2 (odd ones), hold it 2 ms and give it
/// back, each waiting at most 50 ms: never a hold of `kind` and a permit at once, and
/// both get in along the way (some waits time out while the other side holds).
pub async fn holds_and_permits_of_one_name_never_overlap(lockers: [Locker; 2], kind: LockKind) {
    let inside = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let granted = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let overlaps = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + RACE;
    // Task i takes `kind` if i is even, a permit if odd; on lockers[i / 2 % 2].
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let locker = lockers[i / 2 % 2].clone();
            let (inside, granted, overlaps) = (inside.clone(), granted.clone(), overlaps.clone());
            tokio::spawn(async move {
                let (mine, other) = (i % 2, 1 - i % 2);
                let wait = LockOptions::new().wait(Duration::from_millis(50));
                let permits = locker.semaphore("race", 2);
                while Instant::now() < until {
                    let guard = if mine == 0 {
                        locker.lock_with("race", wait.kind(kind)).await
                    } else {
                        permits.acquire_with(wait).await
                    };
                    let guard = match guard {
                        Ok(guard) => guard,
                        Err(e) if e.is_timeout() => continue, // the other side held it
                        Err(e) => panic!("{e}"),
                    };
                    inside[mine].fetch_add(1, Ordering::SeqCst);
                    if inside[other].load(Ordering::SeqCst) > 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside[mine].fetch_sub(1, Ordering::SeqCst);
                    granted[mine].fetch_add(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    for task in tasks {
        timeout(RACE + PATIENCE, task)
            .await
            .expect("a racer never stopped")
            .unwrap();
    }
    let (holds, permits) = (
        granted[0].load(Ordering::SeqCst),
        granted[1].load(Ordering::SeqCst),
    );
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a hold as {kind} and a permit at once ({holds} holds, {permits} permits)"
    );
    assert!(holds > 0 && permits > 0, "{holds} holds, {permits} permits");
}
