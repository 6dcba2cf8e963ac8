//! Lock calls across a Redis outage (the server paused with SIGSTOP, then resumed): a
//! lock taken as the server comes back holds a whole lease and is renewed, and no call
//! runs past its wait, whatever the server does meanwhile.

use std::time::Duration;

use common::connect;
use lock_core::{LockError, LockGuard, LockOptions, Locker};
use lock_tests::{RedisServer, TestServer, ValueExt};
use tokio::time::{Instant, sleep};

mod common;

const SEC: Duration = Duration::from_secs(1);
/// How late a lock call may return after its wait, for scheduling.
const SLACK: Duration = Duration::from_millis(250);

/// Cuts `server`'s client connections, then pauses it: the next call of a `Locker` finds
/// its connection dead and opens another, which the server answers only once it runs
/// again.
fn cut_and_pause(server: &RedisServer) {
    let killed = server.cmd(&["CLIENT", "KILL", "TYPE", "normal"]).unwrap();
    assert!(killed.as_int().is_some_and(|n| n > 0), "{killed:?}");
    server.pause();
}

/// Checks, for `span`, that `guard` keeps its lock: not lost, and no other `Locker` can
/// take it.
async fn keeps_its_lock(guard: &LockGuard, other: &Locker, span: Duration) {
    let until = Instant::now() + span;
    while Instant::now() < until {
        assert!(!guard.is_lost(), "the lease was lost");
        let taken = other.try_lock(guard.key()).await.unwrap();
        assert!(taken.is_none(), "another Locker took the lock");
        sleep(SEC / 10).await;
    }
    assert!(guard.is_held().await.unwrap());
}

/// The lease starts when the acquiring command is sent, not when the call began: here
/// the call waits most of a second for a connection to the paused server, and the lock
/// is taken the moment the server comes back.
async fn taken_as_the_server_comes_back(opts: LockOptions) {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    let other = connect(&server).await;
    cut_and_pause(&server);
    let acquiring = tokio::spawn({
        let locker = locker.clone();
        async move { locker.lock_with("k", opts).await }
    });
    // The rest of the outage: shorter than a connect's timeout (1 s), so the connection
    // the call is opening goes through once the server runs again.
    sleep(SEC * 8 / 10).await;
    server.resume();
    let guard = acquiring
        .await
        .unwrap()
        .expect("the lock, once the server is back");
    assert!(!guard.is_lost(), "the lock was handed out already lost");
    keeps_its_lock(&guard, &other, SEC * 5 / 2).await;
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_as_the_server_comes_back_is_not_born_lost() {
    taken_as_the_server_comes_back(LockOptions::new().lease(SEC).wait(5 * SEC)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_taken_as_the_server_comes_back_is_not_born_lost() {
    taken_as_the_server_comes_back(LockOptions::new().lease(SEC).wait(5 * SEC).fair(true)).await;
}

/// Runs `lock_with(name, wait)` and checks that it returned by its deadline.
async fn lock_within(locker: Locker, name: String, wait: Duration) -> LockError {
    let started = Instant::now();
    let result = locker.lock_with(&name, LockOptions::new().wait(wait)).await;
    let took = started.elapsed();
    assert!(took <= wait + SLACK, "a wait of {wait:?} took {took:?}");
    result.expect_err("a lock from a paused server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_waiting_on_a_paused_server_end_at_their_deadline() {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    cut_and_pause(&server);
    // Several calls at once, each waiting for the connection one of them is opening.
    let calls: Vec<_> = (0..4)
        .map(|i| tokio::spawn(lock_within(locker.clone(), format!("k{i}"), 2 * SEC)))
        .collect();
    for call in calls {
        let err = call.await.unwrap();
        assert!(err.is_backend(), "the server never answered, yet: {err}");
    }
    server.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_the_server_stops_answering_ends_at_its_deadline() {
    let server = RedisServer::spawn();
    let holder = connect(&server).await;
    let _held = holder.lock("k").await.unwrap();
    let waiter = tokio::spawn(lock_within(connect(&server).await, "k".into(), 2 * SEC));
    sleep(SEC).await;
    server.pause();
    let err = waiter.await.unwrap();
    server.resume();
    // The attempt the pause caught failed (no answer in time), or the deadline cut it
    // short after the server had said the lock was held.
    assert!(err.is_backend() || err.is_timeout(), "{err}");
}
