//! The fair lock against real redis-server processes: first come first served across
//! several `Locker`s (replicas), a release that hands the lock to the next in line and
//! wakes it alone, waiters that give up or die, a waiter that missed its message, and
//! mutual exclusion under contention that leaves the line empty. The contract tests every
//! store passes (a fair lock's order, fair and plain holds as one lock) are in the
//! conformance suite (`conformance.rs`, `redis::`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::connect;
use futures_util::StreamExt;
use lock_core::backend::redis::redis::AsyncCommands;
use lock_core::{LockGuard, LockOptions, Locker};
use lock_tests::{RedisServer, ValueExt, eventually, lock_key, subscribed_lockers};
use tokio::task::JoinHandle;
use tokio::time::timeout;

mod common;

const SEC: Duration = Duration::from_secs(1);

fn fair() -> LockOptions {
    LockOptions::new().fair(true).wait(30 * SEC)
}

/// How many waiters are in the line of lock `name`.
fn line_len(server: &RedisServer, name: &str) -> i64 {
    let line = format!("{}:queue", lock_key(name));
    server.cmd(&["LLEN", &line]).unwrap().as_int().unwrap()
}

/// Waits until `n` waiters are in the line of lock `name`.
async fn until_in_line(server: &RedisServer, name: &str, n: i64) {
    eventually(5 * SEC, &format!("{n} waiters in line"), || async {
        line_len(server, name) == n
    })
    .await;
}

/// One fair attempt, without queueing: whether it got the lock (released at once).
async fn try_fair(locker: &Locker, name: &str) -> bool {
    match locker.lock_with(name, fair().wait(Duration::ZERO)).await {
        Ok(guard) => {
            guard.release().await.unwrap();
            true
        }
        Err(e) if e.is_timeout() => false,
        Err(e) => panic!("{e}"),
    }
}

/// A task that waits in line for `name`, then holds it for `hold`.
fn queue_up(
    locker: &Locker,
    name: &'static str,
    hold: Duration,
    then: impl FnOnce(&LockGuard) + Send + 'static,
) -> JoinHandle<()> {
    let locker = locker.clone();
    tokio::spawn(async move {
        let guard = locker.lock_with(name, fair()).await.unwrap();
        then(&guard);
        tokio::time::sleep(hold).await;
        guard.release().await.unwrap();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_across_lockers_are_served_in_the_order_they_asked() {
    let server = RedisServer::spawn();
    let lockers = [
        connect(&server).await,
        connect(&server).await,
        connect(&server).await,
    ];
    let holder = lockers[0].lock_with("fifo", fair()).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..9 {
        let served = served.clone();
        tasks.push(queue_up(
            &lockers[i % 3],
            "fifo",
            Duration::from_millis(20),
            move |g| {
                served.lock().unwrap().push((i, g.fencing_token()));
            },
        ));
        until_in_line(&server, "fifo", i as i64 + 1).await;
    }
    // While they wait, a newcomer's attempt does not jump the line.
    assert!(!try_fair(&lockers[1], "fifo").await);
    holder.release().await.unwrap();
    for t in tasks {
        timeout(10 * SEC, t).await.unwrap().unwrap();
    }
    let served = served.lock().unwrap().clone();
    let order: Vec<_> = served.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..9).collect::<Vec<_>>(), "served out of order");
    assert!(
        served.windows(2).all(|w| w[1].1 > w[0].1),
        "fencing tokens must increase"
    );
    assert_eq!(line_len(&server, "fifo"), 0);
    assert!(try_fair(&lockers[2], "fifo").await);
}

#[tokio::test]
async fn a_release_hands_the_lock_over_and_wakes_the_next_waiter_alone() {
    let server = RedisServer::spawn();
    let lockers = [connect(&server).await, connect(&server).await];
    let holder = lockers[0].lock_with("relay", fair()).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push(queue_up(
            &lockers[i % 2],
            "relay",
            Duration::from_millis(10),
            |_| {},
        ));
        until_in_line(&server, "relay", i as i64 + 1).await;
    }
    // Each waiter tried once; the first on each Locker subscribed and tried again (a
    // try still in flight is within the slack below).
    eventually(5 * SEC, "both Lockers to subscribe", || async {
        subscribed_lockers(&server, "relay") == 2
    })
    .await;
    // A bystander on every release channel of the lock: each hand-over goes to the
    // waiter's Locker alone, and nothing is broadcast on the lock's own channel.
    let client = lock_core::backend::redis::redis::Client::open(server.url()).unwrap();
    let mut bystander = client.get_async_pubsub().await.unwrap();
    bystander
        .psubscribe("lock:{relay}:released*")
        .await
        .unwrap();
    let before = server.calls("evalsha");
    holder.release().await.unwrap();
    for t in tasks {
        timeout(10 * SEC, t).await.unwrap().unwrap();
    }
    let commands = server.calls("evalsha") - before;
    server
        .cmd(&["PUBLISH", "lock:{relay}:released", "end"])
        .unwrap();
    let mut heard = Vec::new();
    let mut messages = bystander.on_message();
    loop {
        let msg = timeout(5 * SEC, messages.next()).await.unwrap().unwrap();
        if msg.get_payload_bytes() == b"end" {
            break;
        }
        heard.push((
            msg.get_channel_name().to_owned(),
            msg.get_payload_bytes().to_vec(),
        ));
    }
    let hand_overs = heard.iter().filter(|(_, payload)| !payload.is_empty());
    assert_eq!(hand_overs.count(), 6, "{heard:?}");
    assert!(
        heard
            .iter()
            .all(|(channel, _)| channel.starts_with("lock:{relay}:released:")),
        "broadcast: {heard:?}"
    );
    // Seven releases, each handing the lock on (the last one freeing it). A waiter that
    // was woken to ask again, or had to poll, would cost one more command each; allow a
    // safety poll or two.
    assert!(
        (7..=9).contains(&commands),
        "{commands} commands for 6 hand-overs"
    );
}

#[tokio::test]
async fn waiters_that_give_up_or_die_do_not_hold_up_the_line() {
    let server = RedisServer::spawn();
    let (a, b) = (connect(&server).await, connect(&server).await);
    let holder = a.lock_with("line", fair()).await.unwrap();

    // A waiter that died: its place (200 ms from now, on the server's clock) is never
    // renewed. Were the lock handed to it, it would stay held for its 30 s lease.
    let time = server.cmd(&["TIME"]).unwrap();
    let time = time.as_sequence().unwrap();
    let now_us: u64 = time[0].as_str().unwrap().parse::<u64>().unwrap() * 1_000_000
        + time[1].as_str().unwrap().parse::<u64>().unwrap();
    let place = format!("{}:30000:00000000deadbeef", now_us + 200_000);
    server
        .cmd(&["RPUSH", "lock:{line}:queue", "ghost"])
        .unwrap();
    server
        .cmd(&["HSET", "lock:{line}:places", "ghost", &place])
        .unwrap();

    let gives_up = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock_with("line", fair().wait(Duration::from_millis(300)))
                .await
                .map(drop)
        }
    });
    until_in_line(&server, "line", 2).await;
    let dropped = tokio::spawn({
        let b = b.clone();
        async move { b.lock_with("line", fair()).await.map(drop) }
    });
    until_in_line(&server, "line", 3).await;
    let last = tokio::spawn({
        let a = a.clone();
        async move {
            let guard = a.lock_with("line", fair()).await.unwrap();
            guard.release().await.unwrap();
        }
    });
    until_in_line(&server, "line", 4).await;

    let err = gives_up.await.unwrap().unwrap_err();
    assert!(err.is_timeout(), "{err}");
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    // Both left the line; the ghost stays until it comes up.
    until_in_line(&server, "line", 2).await;

    holder.release().await.unwrap();
    timeout(5 * SEC, last)
        .await
        .expect("the lock went to the dead waiter")
        .unwrap();
    for key in ["lock:{line}:queue", "lock:{line}:places", "lock:{line}"] {
        assert_eq!(
            server.cmd(&["EXISTS", key]).unwrap().as_int(),
            Some(0),
            "{key} left behind"
        );
    }
}

#[tokio::test]
async fn a_waiter_that_missed_its_message_finds_the_lock_handed_to_it() {
    let server = RedisServer::spawn();
    // It never hears the hand-over.
    let deaf = common::deaf_locker(&server).await;
    let locker = connect(&server).await;

    let holder = locker.lock_with("deaf", fair()).await.unwrap();
    let holder_token = holder.fencing_token();
    // The counter vanishes (it expired) before the waiter learns its token: it gets a
    // new one from the clock, still above its predecessor's.
    let counter = "lock:{deaf}:fence";
    let waiter = tokio::spawn({
        let deaf = deaf.clone();
        async move { deaf.lock_with("deaf", fair().lease(SEC)).await.unwrap() }
    });
    until_in_line(&server, "deaf", 1).await;
    holder.release().await.unwrap();
    server.cmd(&["DEL", counter]).unwrap();
    // Handed over at once; the waiter learns it at its next poll, with a 1 s lease
    // already running, which its watchdog then keeps renewed.
    assert!(!try_fair(&locker, "deaf").await);
    let guard = timeout(5 * SEC, waiter).await.unwrap().unwrap();
    assert!(guard.fencing_token() > holder_token);
    tokio::time::sleep(2 * SEC).await;
    assert!(guard.is_held().await.unwrap(), "the watchdog let it go");
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
    assert!(try_fair(&locker, "deaf").await);
}

/// 32 tasks over two Lockers each take fair lock "counter" 16 times and increment a
/// counter stored in Redis with a deliberately non-atomic read, yield, write: no update
/// is lost, and the line is empty once they are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_under_contention() {
    const TASKS: usize = 32;
    const ROUNDS: usize = 16;
    let server = RedisServer::spawn();
    let lockers = [connect(&server).await, connect(&server).await];
    let client = lock_core::backend::redis::redis::Client::open(server.url()).unwrap();
    let mut running = Vec::new();
    for i in 0..TASKS {
        let locker = lockers[i % 2].clone();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        running.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locker.lock_with("counter", fair()).await.unwrap();
                let seen: i64 = conn.get("counter").await.unwrap_or(0);
                tokio::task::yield_now().await;
                let () = conn.set("counter", seen + 1).await.unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    for task in running {
        timeout(60 * SEC, task)
            .await
            .expect("a task still running after a minute")
            .unwrap();
    }
    let total = server.cmd(&["GET", "counter"]).unwrap();
    let total: usize = total.as_str().and_then(|t| t.parse().ok()).unwrap_or(0);
    assert_eq!(total, TASKS * ROUNDS, "lost updates");
    assert_eq!(line_len(&server, "counter"), 0);
}
