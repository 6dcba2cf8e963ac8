//! Waiting at scale, measured: a hundred thousand tasks wait for a thousand held locks on
//! a real Redis, then are all cancelled. The server keeps no subscription and no set of
//! waiting `Locker`s, and the client no task and no memory for any of them, counted by an
//! allocator that tracks every byte this test binary holds.

use std::alloc::System;
use std::time::Duration;

use cap::Cap;
use lock_core::{LockError, LockOptions, Locker};
use lock_tests::{RedisServer, eventually};

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

const SEC: Duration = Duration::from_secs(1);
const KEYS: usize = 1_000;
const WAITERS: usize = 100_000;
/// Waiters started at a time.
const STEP: usize = 5_000;
/// What may stay allocated once every waiter of a crowd is gone: tables and buffers grown
/// for a crowd and kept (how much varies with how the bursts fell), never a share per
/// waiter. It is 10 bytes a waiter, below anything a waiter owns (a key's name alone is
/// more), so a leak per waiter shows.
const LEFT_BEHIND: usize = 1 << 20;

/// How many items the server lists in answer to `what` (channels, keys).
fn count(server: &RedisServer, what: &[&str]) -> usize {
    server.cmd(what).unwrap().as_sequence().unwrap().len()
}

/// How many tasks the runtime runs.
fn tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Starts [`WAITERS`] waiters on `waiter` for the [`KEYS`] locks held elsewhere, waits
/// until each lock's channel is subscribed, then cancels them all and waits until the
/// server has no subscription or set of waiting `Locker`s left, and the runtime no more
/// tasks than `tasks_before` and the waiting `Locker`'s own two (its pub/sub task and its
/// connection's, kept for its next wait). Returns the bytes allocated while they waited.
async fn crowd(server: &RedisServer, waiter: &Locker, tasks_before: usize) -> usize {
    let channels = || count(server, &["PUBSUB", "CHANNELS", "lock:{scale:*:released:*"]);
    let waiting_sets = || count(server, &["KEYS", "lock:{scale:*}:lockers"]);
    // In steps, each once the server has seen the step before try: a hundred thousand
    // first attempts at once would queue on the connection past its response timeout
    // (500 ms unless `LockerBuilder::response_timeout` says otherwise), and fail their
    // calls.
    let mut waiting = Vec::with_capacity(WAITERS);
    for start in (0..WAITERS).step_by(STEP) {
        let tried = server.calls("evalsha");
        for i in start..start + STEP {
            let waiter = waiter.clone();
            waiting.push(tokio::spawn(async move {
                let wait = LockOptions::new().wait(120 * SEC);
                waiter.lock_with(&format!("scale:{}", i % KEYS), wait).await
            }));
        }
        eventually(30 * SEC, "a step of waiters to try", || {
            std::future::ready(server.calls("evalsha") >= tried + STEP as u64)
        })
        .await;
    }
    eventually(60 * SEC, "every key's channel to be subscribed", || {
        std::future::ready(channels() == KEYS)
    })
    .await;
    assert_eq!(waiting_sets(), KEYS);
    let bytes_waiting = ALLOCATOR.allocated();

    for task in &waiting {
        task.abort();
    }
    for task in waiting {
        match task.await {
            Err(e) if e.is_cancelled() => {}
            // A poll that got no answer within the connection's response timeout, on a
            // loaded machine, ends its call with the store's error: it has left too.
            Ok(Err(LockError::Backend { .. })) => {}
            other => panic!("a waiter ended with {other:?} instead of being cancelled"),
        }
    }
    eventually(30 * SEC, "every channel to be unsubscribed", || {
        std::future::ready(channels() == 0)
    })
    .await;
    eventually(30 * SEC, "every set of waiting Lockers to be left", || {
        std::future::ready(waiting_sets() == 0)
    })
    .await;
    eventually(30 * SEC, "the waiters' tasks to end", || {
        std::future::ready(tasks() <= tasks_before + 2)
    })
    .await;
    bytes_waiting
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_cancelled_waiters_leave_nothing_behind() {
    let server = RedisServer::spawn();
    // The longest safety poll: every wait is mostly the wake-up machinery's.
    let connect = || {
        Locker::builder()
            .url(&server.url())
            .safety_poll(4 * SEC)
            .build()
    };
    let (holder, waiter) = (connect().await.unwrap(), connect().await.unwrap());
    let mut held = Vec::with_capacity(KEYS);
    for k in 0..KEYS {
        held.push(holder.lock(&format!("scale:{k}")).await.unwrap());
    }
    let (tasks_before, bytes_before) = (tasks(), ALLOCATOR.allocated());

    let bytes_waiting = crowd(&server, &waiter, tasks_before).await;
    let bytes_after = ALLOCATOR.allocated();
    // A second crowd mostly reuses what the first grew.
    crowd(&server, &waiter, tasks_before).await;
    let bytes_after_again = ALLOCATOR.allocated();
    println!(
        "{WAITERS} waiters over {KEYS} keys: {} bytes each while waiting; once all were \
         cancelled, {} bytes more than before, and {} more after a second crowd",
        (bytes_waiting - bytes_before) / WAITERS,
        bytes_after.saturating_sub(bytes_before),
        bytes_after_again.saturating_sub(bytes_after),
    );
    assert!(
        bytes_after <= bytes_before + LEFT_BEHIND,
        "{} bytes left behind by {WAITERS} cancelled waiters",
        bytes_after - bytes_before
    );
    assert!(
        bytes_after_again <= bytes_after + LEFT_BEHIND,
        "{} bytes more left behind by a second crowd",
        bytes_after_again - bytes_after
    );
    for guard in held {
        guard.release().await.unwrap();
    }
}
