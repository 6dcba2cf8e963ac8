//! The locks against real redis-server processes, as only one Redis server shows them:
//! ownership, the watchdog, loss, the fence counter, wake-ups and what they cost,
//! cancellation, reentrancy and bad input without a round trip, the keys a lock leaves,
//! and a server that pauses, dies and comes back. The contract tests every store passes
//! are in the conformance suite (`conformance.rs`, `redis::`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::connect;
use lock_core::backend::RedisStore;
use lock_core::{LockError, LockGuard, LockKind, LockOptions, Locker};
use lock_tests::{
    RedisServer, TestServer, ValueExt, eventually, lock_exists, lock_key, subscribed_lockers,
};
use tokio::time::{Instant, timeout};

mod common;

const SEC: Duration = Duration::from_secs(1);

/// A Locker whose waiters try again unwoken only every 3 to 4 s, so that a test counting
/// commands over a shorter span sees no safety poll.
async fn connect_quiet(server: &RedisServer) -> Locker {
    Locker::builder()
        .url(&server.url())
        .safety_poll(4 * SEC)
        .build()
        .await
        .expect("connect to the test server")
}

/// How many EVALSHA calls (acquire, release, extend) the server has run.
fn evalsha_calls(server: &RedisServer) -> u64 {
    server.calls("evalsha")
}

/// Whether another task (so: no reentrancy) could take `name` right now.
async fn free_for_others(locker: &Locker, name: &str) -> bool {
    let (locker, name) = (locker.clone(), name.to_owned());
    tokio::spawn(async move { locker.try_lock(&name).await.unwrap().is_some() })
        .await
        .unwrap()
}

#[tokio::test]
async fn watchdog_keeps_a_one_second_lease_for_five_seconds() {
    let server = RedisServer::spawn();
    let (a, b) = (connect(&server).await, connect(&server).await);
    let guard = a
        .lock_with("kept", LockOptions::new().lease(SEC))
        .await
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < 5 * SEC {
        assert!(
            b.try_lock("kept").await.unwrap().is_none(),
            "taken over at {:?}",
            started.elapsed()
        );
        let pttl = server
            .cmd(&["PTTL", &lock_key("kept")])
            .unwrap()
            .as_int()
            .unwrap();
        assert!(
            pttl > 0,
            "lease ran down to {pttl} at {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(!guard.is_lost());
    assert!(guard.is_held().await.unwrap());
    guard.release().await.unwrap();
    assert!(!lock_exists(&server, "kept"));
}

#[tokio::test]
async fn deleting_the_key_behind_the_guard_is_detected_as_loss() {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    let guard = locker
        .lock_with("deleted", LockOptions::new().lease(SEC))
        .await
        .unwrap();
    server.cmd(&["DEL", &lock_key("deleted")]).unwrap();
    timeout(3 * SEC, guard.lost())
        .await
        .expect("loss not detected");
    assert!(!guard.is_held().await.unwrap());

    // with_lock drops its body when that happens
    let finished = Arc::new(AtomicBool::new(false));
    let body = {
        let finished = finished.clone();
        async move {
            tokio::time::sleep(30 * SEC).await;
            finished.store(true, Ordering::SeqCst);
        }
    };
    let deleter = async {
        eventually(3 * SEC, "the lock to be taken", || async {
            lock_exists(&server, "body")
        })
        .await;
        server.cmd(&["DEL", &lock_key("body")]).unwrap();
    };
    let (result, ()) = tokio::join!(
        timeout(
            5 * SEC,
            locker.with_lock_opts("body", LockOptions::new().lease(SEC), body)
        ),
        deleter
    );
    assert!(
        result
            .expect("the body was not cancelled")
            .unwrap_err()
            .is_lost()
    );
    assert!(!finished.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_server_paused_past_the_lease_means_the_lock_is_lost() {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    let guard = locker
        .lock_with("paused", LockOptions::new().lease(SEC))
        .await
        .unwrap();
    server.pause();
    let detected = timeout(3 * SEC, guard.lost()).await;
    server.resume();
    detected.expect("loss not detected while the server was paused");
    assert!(guard.is_lost());
    assert!(!guard.is_held().await.unwrap());
    // The Locker carries on once the server answers again.
    let next = locker
        .lock_with("paused", LockOptions::new().wait(5 * SEC))
        .await
        .unwrap();
    assert!(next.fencing_token() > guard.fencing_token());
}

/// Each answer is waited for as long as the response timeout: a server that answers late,
/// within it, serves the call; past it, the call fails with a backend error, and the lock
/// that the unanswered acquire took is given back once the server runs again.
#[tokio::test]
async fn the_response_timeout_bounds_each_answer() {
    let server = RedisServer::spawn();
    let patient = Locker::builder()
        .url(&server.url())
        .response_timeout(10 * SEC)
        .build()
        .await
        .expect("connect to the test server");
    let hasty = connect(&server).await;
    server.pause();
    let late = tokio::spawn({
        let patient = patient.clone();
        async move { patient.try_lock("late").await }
    });
    let started = Instant::now();
    let err = hasty.try_lock("hasty").await.unwrap_err();
    let waited = started.elapsed();
    server.resume();
    assert!(err.is_backend(), "{err}");
    assert!(
        (Duration::from_millis(400)..5 * SEC).contains(&waited),
        "the default response timeout is 500 ms; waited {waited:?}"
    );
    let guard = late
        .await
        .unwrap()
        .expect("answered late, within the response timeout");
    assert!(guard.is_some(), "the late answer granted the lock");
    eventually(
        3 * SEC,
        "the timed-out acquire's lock to be given back",
        || async { !lock_exists(&server, "hasty") },
    )
    .await;
    assert!(free_for_others(&hasty, "hasty").await);
    let zero = Locker::builder()
        .url(&server.url())
        .response_timeout(Duration::ZERO)
        .build()
        .await
        .unwrap_err();
    assert!(zero.to_string().contains("response timeout"), "{zero}");
}

#[tokio::test]
async fn fencing_tokens_survive_a_server_restart() {
    let mut server = RedisServer::spawn();
    let locker = connect(&server).await;
    let before = locker.lock("restarted").await.unwrap().fencing_token();
    server.kill();
    server.restart();
    let after = async {
        loop {
            if let Ok(guard) = locker.lock("restarted").await {
                return guard.fencing_token();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let after = timeout(10 * SEC, after)
        .await
        .expect("no lock after the restart");
    assert!(
        after > before,
        "token {after} after the restart is not above {before}"
    );
}

#[tokio::test]
async fn a_release_wakes_the_waiter_without_polling_and_waiters_do_not_hammer() {
    let server = RedisServer::spawn();
    let (a, b) = (connect(&server).await, connect(&server).await);

    // The waiter tries once, subscribes, tries again, then naps at least 0.75 s before
    // a safety poll. Released after that second try, it can only get the lock within
    // the next 0.75 s if the release message wakes it.
    let held = a.lock("handoff").await.unwrap();
    let before = evalsha_calls(&server);
    let waiter = spawn_waiter(b.clone(), "handoff");
    eventually(5 * SEC, "the waiter to subscribe and try again", || async {
        subscribed_lockers(&server, "handoff") == 1 && evalsha_calls(&server) - before >= 2
    })
    .await;
    let held = release_to(held, waiter, "the waiter").await;

    // While the lock stays held, a waiter only polls as a safety net.
    let waiter = spawn_waiter(a.clone(), "handoff");
    eventually(5 * SEC, "the second waiter to subscribe", || async {
        subscribed_lockers(&server, "handoff") == 1
    })
    .await;
    let before = evalsha_calls(&server);
    tokio::time::sleep(3 * SEC).await;
    let attempts = evalsha_calls(&server) - before;
    assert!(attempts <= 5, "the waiter made {attempts} attempts in 3 s");
    held.release().await.unwrap();
    let (_, last) = timeout(5 * SEC, waiter).await.unwrap().unwrap();
    last.release().await.unwrap();
    eventually(5 * SEC, "the waiters to unsubscribe", || async {
        subscribed_lockers(&server, "handoff") == 0
    })
    .await;
}

#[tokio::test]
async fn dropping_an_acquire_in_flight_leaves_no_lock() {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    locker
        .lock("warm-up")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Paused, the server holds the acquire unanswered; the future is dropped while it is
    // in flight. The give-back follows it on the same connection once the server runs.
    server.pause();
    let attempt = timeout(Duration::from_millis(100), locker.lock("in-flight")).await;
    assert!(attempt.is_err(), "the acquire should still be in flight");
    server.resume();
    eventually(3 * SEC, "the server to answer again", || async {
        server.cmd(&["PING"]).is_ok()
    })
    .await;
    eventually(
        3 * SEC,
        "the interrupted acquire's lock to be given back",
        || async { !lock_exists(&server, "in-flight") },
    )
    .await;
    assert!(free_for_others(&locker, "in-flight").await);
}

#[tokio::test]
async fn reentrancy_is_per_task_and_costs_no_round_trip() {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    let outer = locker.lock("nested").await.unwrap();
    let before = evalsha_calls(&server);
    let inner = locker
        .try_lock("nested")
        .await
        .unwrap()
        .expect("same task re-enters");
    let seven = locker
        .with_lock("nested", async {
            locker.with_lock("nested", async { 7 }).await
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seven, 7);
    assert_eq!(
        evalsha_calls(&server),
        before,
        "re-entering went to the server"
    );
    assert_eq!(inner.fencing_token(), outer.fencing_token());

    assert!(
        !free_for_others(&locker, "nested").await,
        "another task got in"
    );
    inner.release().await.unwrap();
    assert!(
        lock_exists(&server, "nested"),
        "an inner release gave the lock back"
    );
    outer.release().await.unwrap();
    assert!(!lock_exists(&server, "nested"));
    assert!(free_for_others(&locker, "nested").await);
}

#[tokio::test]
async fn invalid_keys_are_refused_before_any_io() {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    let before = evalsha_calls(&server);
    for key in ["", "line\nbreak", "}open", &"x".repeat(513)] {
        let err = locker.lock(key).await.unwrap_err();
        assert!(err.is_invalid_key(), "{key:?}: {err}");
    }
    assert_eq!(evalsha_calls(&server), before);
}

/// A store built by `RedisStore::builder()` and plugged in with `store(..)` keeps its
/// locks where the shorthands of `LockerBuilder` with the same settings do.
#[tokio::test]
async fn a_redis_store_from_its_own_builder_plugs_into_a_locker() {
    let server = RedisServer::spawn();
    let store = RedisStore::builder()
        .url(&server.url())
        .namespace("billing:")
        .safety_poll(2 * SEC)
        .build()
        .await
        .expect("connect to the test server");
    let locker = Locker::builder()
        .store(Arc::new(store))
        .default_wait(SEC)
        .build()
        .await
        .unwrap();
    let shorthand = Locker::builder()
        .url(&server.url())
        .namespace("billing:")
        .build()
        .await
        .unwrap();

    let guard = locker.lock("balance:42").await.unwrap();
    let key = "billing:{balance:42}";
    assert_eq!(server.cmd(&["EXISTS", key]).unwrap().as_int(), Some(1));
    assert!(
        !lock_exists(&server, "balance:42"),
        "the namespace was not applied"
    );
    let elsewhere = shorthand.try_lock("balance:42").await.unwrap();
    assert!(elsewhere.is_none(), "two holders");
    guard.release().await.unwrap();
    assert_eq!(server.cmd(&["EXISTS", key]).unwrap().as_int(), Some(0));
    assert!(shorthand.try_lock("balance:42").await.unwrap().is_some());
}

/// A setting out of range on the store's builder is `LockError::Config`, saying which,
/// before anything is connected to.
#[tokio::test]
async fn a_bad_setting_on_the_redis_store_builder_is_a_config_error() {
    let server = RedisServer::spawn();
    let url = server.url();
    let on_server = || RedisStore::builder().url(&url);
    let cases = [
        (on_server().namespace("a{b}"), "must not contain braces"),
        (on_server().safety_poll(5 * SEC), "safety poll must be from"),
        (
            on_server().response_timeout(Duration::ZERO),
            "response timeout",
        ),
        (
            on_server().fence_ttl(Duration::from_millis(10)),
            "fence ttl must be at least 1s",
        ),
        (
            RedisStore::builder().url("redis://127.0.0.1:notaport"),
            "invalid redis url",
        ),
        (
            RedisStore::builder().sentinel(Vec::<String>::new(), "m"),
            "sentinel needs at least one url",
        ),
        (
            RedisStore::builder().cluster(Vec::<String>::new()),
            "cluster needs at least one seed url",
        ),
        (
            RedisStore::builder().namespace("billing:"),
            "no redis server",
        ),
    ];
    for (builder, says) in cases {
        let shown = format!("{builder:?}");
        match builder.build().await {
            Err(LockError::Config(message)) => {
                assert!(message.contains(says), "{shown}: {message}");
            }
            other => panic!("{shown}: {other:?}"),
        }
    }
    let scripts_loaded = || server.calls("script|load");
    assert_eq!(
        scripts_loaded(),
        0,
        "a refused store connected to the server"
    );
    on_server()
        .build()
        .await
        .expect("the same url, with good settings");
    assert!(
        scripts_loaded() > 0,
        "a store that connects loads its scripts"
    );
}

#[tokio::test]
async fn connecting_to_a_dead_port_fails_plainly() {
    let mut server = RedisServer::spawn();
    let port = server.port();
    server.kill();
    let url = format!("redis://user:hunter2@127.0.0.1:{port}/");
    let started = Instant::now();
    let err = Locker::builder()
        .url(&url)
        .connect_timeout(2 * SEC)
        .build()
        .await
        .unwrap_err();
    assert!(started.elapsed() < 5 * SEC, "took {:?}", started.elapsed());
    assert!(err.is_backend(), "{err}");
    let message = format!("{err} / {err:?}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(!message.contains("hunter2"), "password in {message}");
}

#[tokio::test]
async fn a_killed_and_restarted_server_is_picked_up_again() {
    let mut server = RedisServer::spawn();
    let (a, b) = (connect(&server).await, connect(&server).await);
    a.lock("before").await.unwrap().release().await.unwrap();

    server.kill();
    let err = timeout(5 * SEC, a.lock("during"))
        .await
        .expect("no answer")
        .unwrap_err();
    assert!(err.is_backend(), "{err}");

    server.restart();
    let relock = async {
        loop {
            match a.lock("after").await {
                Ok(guard) => return guard,
                Err(e) => assert!(e.is_backend(), "{e}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let held = timeout(10 * SEC, relock)
        .await
        .expect("the lock never worked again");

    // wake-ups work again too: the pub/sub connection was re-established
    let waiter = tokio::spawn(async move {
        b.lock_with("after", LockOptions::new().wait(20 * SEC))
            .await
            .map(|g| g.fencing_token())
    });
    eventually(10 * SEC, "the waiter to subscribe", || async {
        subscribed_lockers(&server, "after") == 1
    })
    .await;
    held.release().await.unwrap();
    timeout(5 * SEC, waiter).await.unwrap().unwrap().unwrap();
}

/// Dropping a `Locker` while its guard lives stops its tasks: its pub/sub connection
/// closes, the guard is lost at once, and its lease, no longer renewed, runs out on the
/// server; the guard's release then finds the lock gone.
#[tokio::test]
async fn a_locker_dropped_under_a_live_guard_stops_its_tasks() {
    let server = RedisServer::spawn();
    let pubsub_connections = || {
        let clients = server.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]).unwrap();
        clients.as_str().unwrap().lines().count()
    };
    let locker = connect(&server).await;
    let guard = locker
        .lock_with("dropped", LockOptions::new().lease(SEC))
        .await
        .unwrap();
    let waiter = locker.clone();
    let waited = tokio::spawn(async move {
        let wait = LockOptions::new().wait(SEC / 2);
        waiter.lock_with("dropped", wait).await.map(drop)
    });
    eventually(10 * SEC, "the waiter to subscribe", || async {
        subscribed_lockers(&server, "dropped") == 1
    })
    .await;
    assert!(waited.await.unwrap().is_err(), "the waiter got a held lock");
    assert_eq!(pubsub_connections(), 1);

    drop(locker);
    assert!(guard.is_lost());
    eventually(5 * SEC, "the pub/sub connection to close", || async {
        pubsub_connections() == 0
    })
    .await;
    let renewals = evalsha_calls(&server);
    eventually(3 * SEC, "the unrenewed lease to run out", || async {
        !lock_exists(&server, "dropped")
    })
    .await;
    assert_eq!(evalsha_calls(&server), renewals, "renewed after the drop");
    assert!(matches!(
        guard.release().await,
        Err(lock_core::LockError::NotHeld { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_transfers_never_deadlock() {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    let moved = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (locker, moved) = (locker.clone(), moved.clone());
        tasks.push(tokio::spawn(async move {
            let keys = if i % 2 == 0 {
                ["acct:a", "acct:b"]
            } else {
                ["acct:b", "acct:a"]
            };
            for _ in 0..10 {
                locker
                    .with_locks(keys, LockOptions::new().wait(20 * SEC), async {
                        moved.fetch_add(1, Ordering::SeqCst);
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    timeout(60 * SEC, async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("deadlock");
    assert_eq!(moved.load(Ordering::SeqCst), 160);
}

#[tokio::test]
async fn a_locker_on_a_bare_pool_polls_instead_of_subscribing() {
    let server = RedisServer::spawn();
    let locker = common::deaf_locker(&server).await;
    let held = locker.lock("pooled").await.unwrap();
    let waiter = tokio::spawn({
        let locker = locker.clone();
        async move {
            locker
                .lock_with("pooled", LockOptions::new().wait(10 * SEC))
                .await
                .map(drop)
        }
    });
    // it waits without a subscription, then finds the lock free by polling
    eventually(3 * SEC, "the waiter to try at least twice", || async {
        evalsha_calls(&server) >= 3
    })
    .await;
    assert_eq!(subscribed_lockers(&server, "pooled"), 0);
    held.release().await.unwrap();
    timeout(5 * SEC, waiter).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn a_wait_ends_at_its_deadline_with_the_holders_lease() {
    let server = RedisServer::spawn();
    let (a, b) = (connect(&server).await, connect(&server).await);
    let _held = a
        .lock_with("busy", LockOptions::new().lease(10 * SEC))
        .await
        .unwrap();
    let wait = Duration::from_millis(400);
    let started = Instant::now();
    let err = b
        .lock_with("busy", LockOptions::new().wait(wait))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(err.is_timeout(), "{err}");
    // the naps are cut at the deadline, then one last attempt: a round trip late at most
    assert!(waited >= wait, "gave up early, after {waited:?}");
    assert!(waited < wait + SEC, "gave up late, after {waited:?}");
    let ttl = err.retry_after().expect("the holder's remaining lease");
    assert!(ttl > 8 * SEC && ttl <= 10 * SEC, "holder ttl {ttl:?}");
}

#[tokio::test]
async fn flush_waits_for_the_releases_of_dropped_guards() {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    let names: Vec<String> = (0..8).map(|i| format!("flushed:{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(locker.lock(name).await.unwrap());
    }
    // Paused, the server leaves the background releases unanswered: flush must wait.
    server.pause();
    drop(guards);
    let early = timeout(Duration::from_millis(200), locker.flush()).await;
    server.resume();
    assert!(
        early.is_err(),
        "flush returned while the releases were still in flight"
    );
    timeout(5 * SEC, locker.flush())
        .await
        .expect("flush never returned");
    for name in &names {
        assert!(
            !lock_exists(&server, name),
            "{name} is still locked after flush"
        );
    }
}

/// A lock contended again soon after its last waiter left reuses the subscription; one
/// left alone is unsubscribed a moment later.
#[tokio::test]
async fn a_subscription_lingers_for_a_lock_contended_again_soon() {
    let server = RedisServer::spawn();
    let (a, b) = (connect(&server).await, connect(&server).await);
    for round in 0..3 {
        let held = a.lock("busy").await.unwrap();
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.lock("busy").await.map(drop) }
        });
        eventually(5 * SEC, "the waiter to subscribe", || async {
            subscribed_lockers(&server, "busy") == 1
        })
        .await;
        held.release().await.unwrap();
        timeout(5 * SEC, waiter).await.unwrap().unwrap().unwrap();
        assert_eq!(
            server.calls("subscribe"),
            1,
            "round {round} subscribed again"
        );
    }
    eventually(5 * SEC, "the idle lock to be unsubscribed", || async {
        subscribed_lockers(&server, "busy") == 0
    })
    .await;
    assert_eq!(server.calls("unsubscribe"), 1);
}

/// The fence counter's expiry is renewed every 64 tokens, not on each acquisition (a
/// renewal costs Redis as much as the rest of an acquisition).
#[tokio::test]
async fn the_fence_counter_expiry_is_renewed_every_64_tokens() {
    let server = RedisServer::spawn();
    let locker = Locker::builder()
        .url(&server.url())
        .fence_ttl(600 * SEC)
        .build()
        .await
        .unwrap();
    let counter = format!("{}:fence", lock_key("renewed"));
    let pttl = || server.cmd(&["PTTL", &counter]).unwrap().as_int().unwrap();
    let mut token = locker.lock("renewed").await.unwrap();
    assert!(pttl() > 500_000, "a new counter gets the whole expiry");
    server.cmd(&["PEXPIRE", &counter, "100000"]).unwrap();
    while (token.fencing_token() + 1) % 64 != 0 {
        token.release().await.unwrap();
        token = locker.lock("renewed").await.unwrap();
        assert!(pttl() <= 100_000, "renewed before the 64th token");
    }
    token.release().await.unwrap();
    let renewing = locker.lock("renewed").await.unwrap();
    assert_eq!(renewing.fencing_token() % 64, 0);
    assert!(
        pttl() > 500_000,
        "not renewed at token {}",
        renewing.fencing_token()
    );
}

/// Three tasks of `locker` queue, one after the other, for lock `name` while it is held;
/// each takes it in turn and releases it at once. Returns the order they got it in,
/// the fencing tokens (the holder's first), and how many releases were published.
async fn relay(server: &RedisServer, locker: &Locker, name: &str) -> (Vec<usize>, Vec<u64>, u64) {
    let holder = locker.lock(name).await.unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let before = evalsha_calls(server);
        let (locker, owned, got) = (locker.clone(), name.to_owned(), got.clone());
        tasks.push(tokio::spawn(async move {
            let guard = locker
                .lock_with(&owned, LockOptions::new().wait(10 * SEC))
                .await
                .unwrap();
            got.lock().unwrap().push((i, guard.fencing_token()));
            guard.release().await.unwrap();
        }));
        // Its attempt answered, it is in line before the next one's (same connection).
        eventually(5 * SEC, "the waiter to try and subscribe", || async {
            evalsha_calls(server) > before && subscribed_lockers(server, name) == 1
        })
        .await;
    }
    let published = server.calls("publish");
    let mut fences = vec![holder.fencing_token()];
    holder.release().await.unwrap();
    for t in tasks {
        timeout(10 * SEC, t).await.unwrap().unwrap();
    }
    let got = got.lock().unwrap().clone();
    fences.extend(got.iter().map(|(_, fence)| fence));
    let order = got.into_iter().map(|(i, _)| i).collect();
    (order, fences, server.calls("publish") - published)
}

/// A release passes a plain lock straight to the longest-waiting task of its own Locker
/// (no message, no wake-up, no second attempt), at most `local_handovers` times in a row.
#[tokio::test]
async fn a_release_passes_the_lock_to_a_local_waiter() {
    let server = RedisServer::spawn();
    for (passes, published) in [(8, 0), (1, 1), (0, 3)] {
        let locker = Locker::builder()
            .url(&server.url())
            .local_handovers(passes)
            .build()
            .await
            .unwrap();
        let name = format!("passed:{passes}");
        let (order, fences, publishes) = relay(&server, &locker, &name).await;
        assert_eq!(
            order,
            [0, 1, 2],
            "{passes} passes: not first come first served"
        );
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "{passes} passes: fencing tokens {fences:?}"
        );
        // Each release that freed the lock while tasks of its Locker waited woke one;
        // the last one, with nobody left waiting, woke nobody.
        assert_eq!(publishes, published, "with {passes} passes in a row");
        assert!(!lock_exists(&server, &name));
    }
}

/// A waiter that the lock was passed to, but that is dropped before it takes it up,
/// frees it; so does one dropped while the pass is in flight.
#[tokio::test]
async fn a_lock_passed_to_a_waiter_that_is_gone_is_freed() {
    let server = RedisServer::spawn();
    let locker = connect_quiet(&server).await;
    for in_flight in [false, true] {
        let holder = locker.lock("orphan").await.unwrap();
        // The waiter runs until told to stop; then it is no longer polled (it cannot take
        // up a pass) until told to drop.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (drop_it, dropped) = tokio::sync::oneshot::channel::<()>();
        let before = evalsha_calls(&server);
        let waiter = tokio::spawn({
            let locker = locker.clone();
            async move {
                let wait = locker.lock_with("orphan", LockOptions::new().wait(30 * SEC));
                tokio::pin!(wait);
                tokio::select! {
                    _ = &mut wait => panic!("the waiter got a held lock"),
                    _ = stopped => {}
                }
                dropped.await.unwrap();
            }
        });
        eventually(5 * SEC, "the waiter to try and subscribe", || async {
            evalsha_calls(&server) - before >= 2 && subscribed_lockers(&server, "orphan") == 1
        })
        .await;
        stop.send(()).unwrap();
        if in_flight {
            // The release claims the waiter and sends the pass; the server holds it while
            // the waiter is dropped.
            server.pause();
            let mut release = Box::pin(holder.release());
            assert!(
                futures_util::FutureExt::now_or_never(&mut release).is_none(),
                "released with the server paused"
            );
            drop_it.send(()).unwrap();
            waiter.await.unwrap();
            server.resume();
            timeout(5 * SEC, release).await.unwrap().unwrap();
        } else {
            let passes = evalsha_calls(&server);
            holder.release().await.unwrap();
            assert_eq!(evalsha_calls(&server) - passes, 1);
            assert!(lock_exists(&server, "orphan"), "passed on, so still held");
            drop_it.send(()).unwrap();
            waiter.await.unwrap();
        }
        eventually(3 * SEC, "the orphaned lock to be freed", || async {
            !lock_exists(&server, "orphan")
        })
        .await;
        assert!(free_for_others(&locker, "orphan").await);
    }
}

/// The Lockers waiting for lock `name`, oldest first.
fn waiting_lockers(server: &RedisServer, name: &str) -> usize {
    let set = format!("{}:lockers", lock_key(name));
    let reply = server.cmd(&["ZCARD", &set]).unwrap();
    usize::try_from(reply.as_int().unwrap()).unwrap()
}

/// A release wakes one process, the one that has waited longest, not every one: the
/// others make no attempt until their turn.
#[tokio::test]
async fn a_release_wakes_the_locker_waiting_longest_and_no_other() {
    let server = RedisServer::spawn();
    let holder_locker = connect(&server).await;
    let held = holder_locker.lock("turns").await.unwrap();
    let opts = LockOptions::new().wait(30 * SEC);
    one_wake_up_per_turn(&server, "turns", opts, held, |i| {
        waiting_lockers(&server, "turns") == i + 1 && subscribed_lockers(&server, "turns") == i + 1
    })
    .await;
    assert_eq!(waiting_lockers(&server, "turns"), 0);
    let held = holder_locker.lock("turns").await.unwrap();
    held.release().await.unwrap();
}

/// Three tasks, each on a `Locker` of its own, wait for `name` with `opts`, one after the
/// other (each in line, as `in_line(i)` says, before the next asks); then `held` is
/// released. Each turn costs one release and one attempt (the waiters not woken make
/// none), and the waiters get the lock in the order they asked.
async fn one_wake_up_per_turn(
    server: &RedisServer,
    name: &str,
    opts: LockOptions,
    held: LockGuard,
    in_line: impl Fn(usize) -> bool,
) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut turns = Vec::new();
    for i in 0..3 {
        let locker = connect_quiet(server).await;
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let (got, name) = (got.clone(), name.to_owned());
        let task = tokio::spawn(async move {
            let guard = locker.lock_with(&name, opts).await.unwrap();
            got.lock().unwrap().push(i);
            released.await.unwrap();
            guard.release().await.unwrap();
        });
        eventually(5 * SEC, "the waiter to be in line", || async { in_line(i) }).await;
        turns.push((release, task));
    }
    let before = evalsha_calls(server);
    held.release().await.unwrap();
    for (i, (release, task)) in turns.into_iter().enumerate() {
        eventually(5 * SEC, "the next in turn to take the lock", || async {
            got.lock().unwrap().len() == i + 1
        })
        .await;
        // One release and one attempt per turn: the Lockers not woken did not ask.
        assert_eq!(
            evalsha_calls(server) - before,
            2 * (i as u64 + 1),
            "turn {i}"
        );
        release.send(()).unwrap();
        timeout(5 * SEC, task).await.unwrap().unwrap();
    }
    assert_eq!(
        *got.lock().unwrap(),
        [0, 1, 2],
        "not the longest waiting first"
    );
}

/// A task of `locker` waiting up to 30 s for `name`: when it got it, and its guard.
fn spawn_waiter(locker: Locker, name: &str) -> tokio::task::JoinHandle<(Instant, LockGuard)> {
    let name = name.to_owned();
    tokio::spawn(async move {
        let guard = locker
            .lock_with(&name, LockOptions::new().wait(30 * SEC))
            .await
            .unwrap();
        (Instant::now(), guard)
    })
}

/// Releases `held` and returns the guard `waiter` gets, which it must get at once (a
/// safety poll comes 0.75 s at the earliest): the release woke it.
async fn release_to(
    held: LockGuard,
    waiter: tokio::task::JoinHandle<(Instant, LockGuard)>,
    woken: &str,
) -> LockGuard {
    let released_at = Instant::now();
    held.release().await.unwrap();
    let (acquired_at, guard) = timeout(5 * SEC, waiter).await.unwrap().unwrap();
    assert!(
        acquired_at - released_at < Duration::from_millis(300),
        "{woken} was woken by a poll, not by the release"
    );
    guard
}

/// A Locker that is gone, and one whose waiter gave up, are passed over: the release
/// wakes the live waiter at once.
#[tokio::test]
async fn a_release_passes_over_lockers_that_are_gone_or_gave_up() {
    let server = RedisServer::spawn();
    let (a, b, c) = (
        connect(&server).await,
        connect(&server).await,
        connect(&server).await,
    );
    let held = a.lock("skip").await.unwrap();
    // A Locker that died while waiting: first in the set, and nobody listens for it.
    let set = format!("{}:lockers", lock_key("skip"));
    server
        .cmd(&["ZADD", &set, "0", "00000000deadbeef"])
        .unwrap();
    // A waiter that gives up takes its Locker out of the set.
    let gave_up = b
        .lock_with("skip", LockOptions::new().wait(Duration::from_millis(300)))
        .await;
    assert!(gave_up.unwrap_err().is_timeout());
    eventually(
        5 * SEC,
        "the Locker that gave up to leave the set",
        || async { waiting_lockers(&server, "skip") == 1 },
    )
    .await;
    let waiter = spawn_waiter(c, "skip");
    eventually(5 * SEC, "the live waiter to be in line", || async {
        waiting_lockers(&server, "skip") == 2 && subscribed_lockers(&server, "skip") == 1
    })
    .await;
    let guard = release_to(held, waiter, "the live waiter").await;
    assert_eq!(waiting_lockers(&server, "skip"), 0);
    guard.release().await.unwrap();
}

/// A wake-up that reaches a Locker still listening but with nobody left waiting is
/// passed on to the next waiting Locker, not lost.
#[tokio::test]
async fn a_wake_up_that_finds_nobody_is_passed_on() {
    let server = RedisServer::spawn();
    let (a, b, c) = (
        connect(&server).await,
        connect(&server).await,
        connect_quiet(&server).await,
    );
    let held = a.lock("relayed").await.unwrap();
    // b waits, gives up, and keeps listening a moment (its subscription lingers); put it
    // back first in the set, as if a release had raced its leaving.
    let gave_up = b
        .lock_with(
            "relayed",
            LockOptions::new().wait(Duration::from_millis(100)),
        )
        .await;
    assert!(gave_up.unwrap_err().is_timeout());
    let pattern = format!("{}:released:*", lock_key("relayed"));
    let channels = server.cmd(&["PUBSUB", "CHANNELS", &pattern]).unwrap();
    let channel = channels.as_sequence().unwrap()[0]
        .as_str()
        .unwrap()
        .to_owned();
    let b_id = channel.rsplit(':').next().unwrap().to_owned();
    let set = format!("{}:lockers", lock_key("relayed"));
    eventually(5 * SEC, "b to leave the set", || async {
        waiting_lockers(&server, "relayed") == 0
    })
    .await;
    server.cmd(&["ZADD", &set, "0", &b_id]).unwrap();
    let waiter = spawn_waiter(c, "relayed");
    eventually(5 * SEC, "c to be in line behind b", || async {
        waiting_lockers(&server, "relayed") == 2 && subscribed_lockers(&server, "relayed") == 2
    })
    .await;
    let before = evalsha_calls(&server);
    let guard = release_to(held, waiter, "c, behind b,").await;
    // The release, b passing it on, and c's attempt.
    assert_eq!(evalsha_calls(&server) - before, 3);
    guard.release().await.unwrap();
}

/// A writer waiting behind readers on the same `Locker` is woken by the last read's
/// release, not by the safety poll (here 3 to 4 s) nor by the last attempt its deadline
/// makes (2 s): 150 times in a row, under 16 readers whose reads overlap, it gets in
/// before half its wait is over. Its wait may begin just as the last reader leaves, whose
/// release wakes only the waiters already in line: a writer joining then must try again
/// before it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_waiting_writer_is_woken_by_the_last_read_not_by_the_poll() {
    const READERS: u32 = 16;
    const READ_HOLD: Duration = Duration::from_millis(5);
    let server = RedisServer::spawn();
    let locker = connect_quiet(&server).await;
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (locker, stop) = (locker.clone(), stop.clone());
            tokio::spawn(async move {
                tokio::time::sleep(READ_HOLD * r / READERS).await;
                while !stop.load(Ordering::Relaxed) {
                    let read = locker.read("rw").await.unwrap();
                    tokio::time::sleep(READ_HOLD).await;
                    read.release().await.unwrap();
                }
            })
        })
        .collect();
    for i in 0..150 {
        tokio::time::sleep(2 * READ_HOLD).await;
        let wait = 2 * SEC;
        let opts = LockOptions::new().kind(LockKind::Write).wait(wait);
        let asked = Instant::now();
        let write = locker.lock_with("rw", opts).await.unwrap();
        let waited = asked.elapsed();
        assert!(
            waited < wait / 2,
            "write {i} got in after {waited:?}: the wake-up was lost"
        );
        write.release().await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.await.unwrap();
    }
}

/// A leader's holder id is a key of its own beside the lock key, which holds the owner's
/// token alone: set with the lock, renewed with it, gone with its release. A plain lock
/// makes none.
#[tokio::test]
async fn a_holder_id_is_kept_beside_the_lock_and_goes_with_it() {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    let id_key = format!("{}:holder_id", lock_key("led"));
    let has_id_key = || keys_of(&server, "led").iter().any(|(k, _)| *k == id_key);

    let plain = locker.lock("led").await.unwrap();
    assert!(!has_id_key(), "a plain lock made a holder id");
    plain.release().await.unwrap();

    let opts = LockOptions::new().lease(SEC);
    let leadership = locker
        .election("led")
        .campaign_with("replica-a", opts)
        .await
        .unwrap();
    let owner = server.cmd(&["GET", &lock_key("led")]).unwrap();
    let owner = owner.as_str().unwrap().to_owned();
    assert!(owner.ends_with(":x"), "the lock key holds {owner:?}");
    let kept = server.cmd(&["GET", &id_key]).unwrap();
    assert_eq!(kept.as_str(), Some(format!("{owner}\nreplica-a").as_str()));
    // Three leases on, the watchdog has renewed both.
    tokio::time::sleep(3 * SEC).await;
    let pttl = server.cmd(&["PTTL", &id_key]).unwrap().as_int().unwrap();
    assert!(pttl > 0, "the holder id ran out: {pttl}");
    leadership.resign().await.unwrap();
    assert!(!has_id_key(), "the holder id outlived its lock");
}

/// The keys of lock `name` on `server` (its store key and those beside it), with each
/// one's expiry in ms (-1: none).
fn keys_of(server: &RedisServer, name: &str) -> Vec<(String, i64)> {
    let pattern = format!("{}*", lock_key(name));
    let keys = server.cmd(&["KEYS", &pattern]).unwrap();
    let keys: Vec<String> = keys
        .as_sequence()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    keys.into_iter()
        .map(|k| {
            let ttl = server.cmd(&["PTTL", &k]).unwrap().as_int().unwrap();
            (k, ttl)
        })
        .collect()
}

/// Every key a read-write lock or a semaphore leaves behind expires once the lock is idle:
/// the holders' sets and the lock key go with the last release, the waiting writers'
/// hash and the set of waiting `Locker`s run out (10 s after the last waiter asked), the
/// semaphore's count and the fence counters with the fence counter's expiry (here 1 s).
/// Then another count is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_and_a_semaphore_leave_no_key_without_expiry() {
    let server = RedisServer::spawn();
    let locker = Locker::builder()
        .url(&server.url())
        .fence_ttl(SEC)
        .default_lease(SEC)
        .build()
        .await
        .unwrap();
    // A writer that waited behind a reader, and readers.
    let read = locker.read("idle").await.unwrap();
    let waiting_writer = tokio::spawn({
        let locker = locker.clone();
        async move { locker.write("idle").await.unwrap().release().await.unwrap() }
    });
    eventually(5 * SEC, "the writer waits", || async {
        keys_of(&server, "idle")
            .iter()
            .any(|(k, _)| k.ends_with(":writers"))
    })
    .await;
    read.release().await.unwrap();
    waiting_writer.await.unwrap();
    // A semaphore used and left.
    let pool = locker.semaphore("pool", 3);
    pool.acquire().await.unwrap().release().await.unwrap();
    for name in ["idle", "pool"] {
        for (key, ttl) in keys_of(&server, name) {
            assert!(ttl > 0, "{key} has no expiry ({ttl})");
        }
    }
    assert!(!lock_exists(&server, "idle") && !lock_exists(&server, "pool"));
    eventually(15 * SEC, "every key of the idle locks is gone", || async {
        keys_of(&server, "idle").is_empty() && keys_of(&server, "pool").is_empty()
    })
    .await;
    let other_count = locker.semaphore("pool", 5);
    other_count
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// A write release wakes the writer that has waited longest, alone: the other waiting
/// writers, each on a `Locker` of its own, make no attempt until their turn, and the
/// writers go in the order they asked.
#[tokio::test]
async fn a_write_release_wakes_the_writer_waiting_longest_and_no_other() {
    let server = RedisServer::spawn();
    let holder_locker = connect(&server).await;
    let held = holder_locker.write("pages").await.unwrap();
    let waiting_writers = || {
        let reply = server.cmd(&["HLEN", "lock:{pages}:writers"]).unwrap();
        usize::try_from(reply.as_int().unwrap()).unwrap()
    };
    let opts = LockOptions::new().kind(LockKind::Write).wait(30 * SEC);
    one_wake_up_per_turn(&server, "pages", opts, held, |i| {
        waiting_writers() == i + 1 && subscribed_lockers(&server, "pages") == i + 1
    })
    .await;
    assert_eq!(waiting_writers(), 0);
}

/// A writer on a `Locker` without wake-ups (a bare pool) still keeps the readers that ask
/// after it out, is never registered under an empty `Locker` id, and gets in by polling.
#[tokio::test]
async fn a_writer_without_wake_ups_still_goes_ahead_of_later_readers() {
    let server = RedisServer::spawn();
    let deaf = common::deaf_locker(&server).await;
    let other = connect(&server).await;
    let read = other.read("deaf-rw").await.unwrap();
    let writer = tokio::spawn({
        let deaf = deaf.clone();
        async move {
            let opts = LockOptions::new().kind(LockKind::Write).wait(10 * SEC);
            deaf.lock_with("deaf-rw", opts).await.map(drop)
        }
    });
    eventually(5 * SEC, "the writer to wait", || async {
        let reply = server.cmd(&["HLEN", "lock:{deaf-rw}:writers"]).unwrap();
        reply.as_int() == Some(1)
    })
    .await;
    let later_reader = tokio::spawn({
        let other = other.clone();
        async move {
            let opts = LockOptions::new().kind(LockKind::Read);
            other
                .try_lock_with("deaf-rw", opts)
                .await
                .unwrap()
                .is_none()
        }
    });
    assert!(
        later_reader.await.unwrap(),
        "a later reader went ahead of the writer"
    );
    let empty_id = server
        .cmd(&["ZSCORE", "lock:{deaf-rw}:lockers", ""])
        .unwrap();
    assert!(
        empty_id.as_int().is_none() && empty_id.as_str().is_none(),
        "{empty_id:?}"
    );
    read.release().await.unwrap();
    timeout(5 * SEC, writer).await.unwrap().unwrap().unwrap();
}

/// What `inspect` shows on one server, beyond what the conformance suite asks of every
/// store: a hold by one owner has the kind its token's mark names and the
/// guard's fencing token, also once handed over to a waiter of the same `Locker` or to the
/// next in a fair lock's line; readers have no fencing token; `waiting` counts `Locker`s,
/// not their tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_what_the_store_keys_record() {
    let server = RedisServer::spawn();
    let (a, b) = (connect(&server).await, connect(&server).await);
    let held = a.lock("owned").await.unwrap();
    assert_eq!(
        owner_fence(&b, "owned", LockKind::Exclusive).await,
        Some(held.fencing_token())
    );

    // Two tasks of b (each lets the lock go at once) and one of a wait: two `Locker`s.
    let asked_before = evalsha_calls(&server);
    let waiters = [(); 2].map(|()| {
        let b = b.clone();
        tokio::spawn(async move {
            let opts = LockOptions::new().wait(30 * SEC);
            b.lock_with("owned", opts).await.unwrap().release().await
        })
    });
    let local = spawn_waiter(a.clone(), "owned");
    // Each waiter's first attempt registers its `Locker` to be woken; nothing else runs a
    // script meanwhile (the holder's first renewal is 10 s away).
    eventually(5 * SEC, "all three waiters to ask", || {
        std::future::ready(evalsha_calls(&server) >= asked_before + 3)
    })
    .await;
    assert_eq!(waiting(&b, "owned").await, Some(2), "tasks were counted");
    // Handed over to a's waiter, with a token drawn as the owner changed.
    let local = release_to(held, local, "a's waiter").await;
    assert_eq!(
        owner_fence(&b, "owned", LockKind::Exclusive).await,
        Some(local.fencing_token())
    );
    local.release().await.unwrap();
    for waiter in waiters {
        timeout(5 * SEC, waiter).await.unwrap().unwrap().unwrap();
    }
    assert_eq!(b.inspect("owned").await.unwrap(), None);

    let fair = LockOptions::new().kind(LockKind::Fair);
    let first = a.lock_with("fair", fair).await.unwrap();
    let next = tokio::spawn({
        let b = b.clone();
        async move { b.lock_with("fair", fair.wait(30 * SEC)).await.unwrap() }
    });
    eventually(5 * SEC, "the fair waiter to queue", || async {
        waiting(&a, "fair").await == Some(1)
    })
    .await;
    first.release().await.unwrap();
    let next = timeout(5 * SEC, next).await.unwrap().unwrap();
    assert_eq!(
        owner_fence(&a, "fair", LockKind::Fair).await,
        Some(next.fencing_token())
    );
    next.release().await.unwrap();

    let reader = a.read("doc").await.unwrap();
    let info = b.inspect("doc").await.unwrap().expect("read");
    assert_eq!(info.kind, Some(LockKind::Read));
    assert_eq!(info.holders[0].fencing_token, None, "not kept per reader");
    reader.release().await.unwrap();
}

/// The fencing token `inspect` shows for the one owner of `name`, which holds it as
/// `kind` (its token's mark says so).
async fn owner_fence(locker: &Locker, name: &str, kind: LockKind) -> Option<u64> {
    let info = locker.inspect(name).await.unwrap().expect("held");
    assert_eq!(info.kind, Some(kind), "{info:?}");
    let [holder] = &info.holders[..] else {
        panic!("one owner, not {info:?}");
    };
    holder.fencing_token
}

/// How many `Locker`s `inspect` shows waiting for `name`.
async fn waiting(locker: &Locker, name: &str) -> Option<usize> {
    let info = locker.inspect(name).await.unwrap();
    info.and_then(|info| info.waiting)
}
