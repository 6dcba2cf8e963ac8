//! RedLock over five `redis-server`s of the test's own: a lock held by a quorum of
//! them, with masters paused (SIGSTOP) or killed under it. The contract tests every store
//! passes are in the conformance suite (`conformance.rs`, `redlock::`); these are the
//! quorum's own.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{RedLockStore, RedisStore};
use lock_core::{LockError, LockGuard, LockOptions, Locker};
use lock_tests::{RedisServer, TestServer, ValueExt, eventually, lock_holder, lock_key};
use tokio::time::{Instant, sleep, timeout};

const MASTERS: usize = 5;
const LEASE: Duration = Duration::from_secs(2);
const WAIT: Duration = Duration::from_secs(5);

async fn redlock(masters: &[RedisServer]) -> Locker {
    Locker::builder()
        .redlock(masters.iter().map(RedisServer::url))
        .default_lease(LEASE)
        .default_wait(WAIT)
        .build()
        .await
        .expect("connect to the test masters")
}

/// Sets exclusive lock `key` on `master` as held by someone else, for 10 s.
fn hold_elsewhere(master: &RedisServer, key: &str) {
    master
        .cmd(&["SET", &lock_key(key), "someone-else", "PX", "10000"])
        .unwrap();
}

/// Releases `guard`, and checks that lock `k` is free on every master of `running`.
async fn released_on(guard: LockGuard, running: &[RedisServer]) {
    guard.release().await.unwrap();
    for master in running {
        assert_eq!(
            lock_holder(master, "k"),
            None,
            "released on every running master"
        );
    }
}

async fn until_free_on(master: &RedisServer, key: &str) {
    eventually(Duration::from_secs(5), "the master let the lock go", || {
        std::future::ready(lock_holder(master, key).is_none())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takes_a_lock_with_two_masters_paused_and_releases_it_everywhere() {
    let masters = RedisServer::spawn_many(MASTERS);
    let locker = redlock(&masters).await;
    let other = redlock(&masters).await;
    masters[0].pause();
    masters[1].pause();

    let guard = locker.lock("k").await.unwrap();
    let token = lock_holder(&masters[2], "k").expect("held on a running master");
    for master in &masters[2..] {
        assert_eq!(lock_holder(master, "k").as_deref(), Some(&*token));
    }
    assert!(other.try_lock("k").await.unwrap().is_none(), "two holders");
    assert!(guard.is_held().await.unwrap());
    released_on(guard, &masters[2..]).await;

    // The paused masters run the attempt they were sent once they resume, and then the
    // release that followed it.
    masters[0].resume();
    masters[1].resume();
    for master in &masters[..2] {
        until_free_on(master, "k").await;
    }
    assert!(other.try_lock("k").await.unwrap().is_some());
}

/// An attempt goes on once a quorum granted the lock, but the masters that grant it later
/// keep their grant: the guard renews it there too, so the lock survives losing masters
/// of the quorum that first granted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_grants_are_kept_and_renewed() {
    let masters = RedisServer::spawn_many(MASTERS);
    let locker = redlock(&masters).await;
    masters[3].pause();
    masters[4].pause();
    let guard = locker.lock("k").await.unwrap();
    let token = lock_holder(&masters[0], "k").expect("held on the first quorum");
    // Every master's ask is sent, even once the quorum answered: the paused masters run
    // theirs as they resume. Generous, for a loaded machine.
    masters[3].resume();
    masters[4].resume();
    for master in &masters[3..] {
        eventually(
            Duration::from_secs(30),
            "the late master to grant it",
            || std::future::ready(lock_holder(master, "k").as_deref() == Some(&*token)),
        )
        .await;
    }

    // Two of the first quorum gone: the late masters make the quorum, for lease after
    // lease.
    masters[0].pause();
    masters[1].pause();
    let until = Instant::now() + LEASE * 2;
    while Instant::now() < until {
        assert!(
            !guard.is_lost(),
            "the lock was lost with two masters paused"
        );
        sleep(LEASE / 4).await;
    }
    assert!(guard.is_held().await.unwrap());
    released_on(guard, &masters[2..]).await;
    masters[0].resume();
    masters[1].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_at_once_with_quorum_when_three_masters_are_down() {
    let mut masters = RedisServer::spawn_many(MASTERS);
    let locker = redlock(&masters).await;
    masters[0].kill();
    masters[1].kill();
    masters[2].pause();

    let started = Instant::now();
    let err = locker.lock("k").await.unwrap_err();
    match &err {
        LockError::Quorum {
            key,
            acquired,
            needed,
        } => {
            assert_eq!(key, "k");
            assert_eq!((*acquired, *needed), (2, 3), "{err}");
        }
        other => panic!("expected a quorum error, got {other}"),
    }
    assert!(err.is_quorum());
    assert!(
        started.elapsed() < WAIT / 2,
        "waited {:?} for a quorum that could not be had",
        started.elapsed()
    );
    // What the two running masters granted was given back.
    for master in &masters[3..] {
        assert_eq!(lock_holder(master, "k"), None);
    }
    masters[2].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_grant_is_rolled_back_on_every_master() {
    let masters = RedisServer::spawn_many(MASTERS);
    let locker = redlock(&masters).await;
    // Held elsewhere on two masters; a third does not answer: the two others grant it,
    // short of the three needed.
    hold_elsewhere(&masters[0], "k");
    hold_elsewhere(&masters[1], "k");
    masters[4].pause();

    let quick = LockOptions::new().wait(Duration::from_millis(300));
    let err = locker.lock_with("k", quick).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    // An attempt the deadline cut short gives back what it took in the background.
    locker.flush().await;
    assert_eq!(lock_holder(&masters[2], "k"), None, "kept on master 2");
    assert_eq!(lock_holder(&masters[3], "k"), None, "kept on master 3");
    for master in &masters[..2] {
        assert_eq!(lock_holder(master, "k").as_deref(), Some("someone-else"));
    }
    masters[4].resume();
    until_free_on(&masters[4], "k").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_validity_is_the_lease_less_the_time_taken_and_the_drift() {
    // A 10 s lease: each master has 500 ms to answer, and the drift is 102 ms.
    const LEASE: Duration = Duration::from_secs(10);
    const DRIFT: Duration = Duration::from_millis(102);
    // The third grant of the quorum comes this late: its master is paused until then.
    const SLOW: Duration = Duration::from_millis(150);
    let masters = Arc::new(RedisServer::spawn_many(MASTERS));
    let locker = redlock(&masters).await;
    for master in &masters[..3] {
        master.pause();
    }
    let resumer = tokio::spawn({
        let masters = masters.clone();
        async move {
            sleep(SLOW).await;
            masters[2].resume();
        }
    });
    let started = Instant::now();
    let options = LockOptions::new().lease(LEASE).watchdog(false);
    let guard = locker.lock_with("k", options).await.unwrap();
    resumer.await.unwrap();
    let left = guard.lease_left().expect("a lease");
    let took = started.elapsed();
    assert!(took >= SLOW, "took {took:?}");
    // The leases run from when the commands were sent, as the attempt began: the time
    // the quorum took to answer, and the drift, are gone.
    assert!(
        left <= LEASE - DRIFT - SLOW + Duration::from_millis(5),
        "{left:?} left after {took:?}: more than the lease less the time taken and the drift"
    );
    assert!(left > LEASE / 2, "{left:?} left");
    guard.release().await.unwrap();
    masters[0].resume();
    masters[1].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_loses_its_quorum_is_lost() {
    let masters = RedisServer::spawn_many(MASTERS);
    let locker = redlock(&masters).await;
    let guard = locker.lock("k").await.unwrap();
    masters[0].pause();
    masters[1].pause();
    masters[2].pause();

    timeout(LEASE * 2, guard.lost())
        .await
        .expect("the lease outlived its quorum");
    assert!(guard.is_lost());
    for master in &masters[..3] {
        master.resume();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_is_cancelled_when_the_quorum_is_lost() {
    let masters = RedisServer::spawn_many(MASTERS);
    let locker = redlock(&masters).await;
    let body = tokio::spawn({
        let locker = locker.clone();
        async move { locker.with_lock("k", std::future::pending::<()>()).await }
    });
    eventually(
        Duration::from_secs(5),
        "the body runs under the lock",
        || std::future::ready(lock_holder(&masters[3], "k").is_some()),
    )
    .await;
    masters[0].pause();
    masters[1].pause();
    masters[2].pause();
    let ended = timeout(LEASE * 2, body)
        .await
        .expect("the body outlived the quorum")
        .unwrap();
    assert!(ended.unwrap_err().is_lost());
    for master in &masters[..3] {
        master.resume();
    }
}

/// Each master's counter starts where the test puts it; the quorum changes every round
/// (two masters paused in turn). Tokens still increase: a grant raises the counters of
/// its masters to its token, and every later quorum shares a master with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_across_changing_quorums() {
    let masters = RedisServer::spawn_many(MASTERS);
    let locker = redlock(&masters).await;
    for (i, master) in masters.iter().enumerate() {
        let start = if i == 4 { "5000" } else { "1000" };
        master.cmd(&["SET", "lock:{k}:fence", start]).unwrap();
    }
    let mut tokens = Vec::new();
    for round in 0..MASTERS {
        let paused = [round, (round + 1) % MASTERS];
        for &i in &paused {
            masters[i].pause();
        }
        let guard = locker.lock("k").await.unwrap();
        tokens.push(guard.fencing_token());
        guard.release().await.unwrap();
        for &i in &paused {
            masters[i].resume();
        }
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens went back: {tokens:?}"
    );
}

/// A semaphore of 2 permits over 5 masters needs 4 of them (⌊2·5/3⌋ + 1), so that no
/// three holders can each have a quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_needs_a_larger_quorum() {
    let masters = RedisServer::spawn_many(MASTERS);
    let locker = redlock(&masters).await;
    let two = locker.semaphore("slots", 2);
    let permits = [two.acquire().await.unwrap(), two.acquire().await.unwrap()];
    assert!(two.try_acquire().await.unwrap().is_none(), "a third permit");
    drop(permits);
    locker.flush().await;

    masters[0].pause();
    masters[1].pause();
    let err = two.acquire().await.unwrap_err();
    assert!(
        matches!(
            err,
            LockError::Quorum {
                acquired: 3,
                needed: 4,
                ..
            }
        ),
        "{err}"
    );
    // An exclusive lock still has its majority.
    locker.lock("k").await.unwrap().release().await.unwrap();
    masters[0].resume();
    masters[1].resume();
}

/// RedLock built by its own builder, one `RedisStoreBuilder` per master, and plugged in
/// with `store(..)`: each master keeps the lock under the namespace its builder gave.
#[tokio::test]
async fn a_redlock_store_from_its_own_builder_plugs_into_a_locker() {
    let masters = RedisServer::spawn_many(3);
    let settings = RedisStore::builder().namespace("billing:");
    let store = RedLockStore::builder(masters.iter().map(|m| settings.clone().url(&m.url())))
        .drift(0.02, Duration::from_millis(5))
        .build()
        .await
        .expect("connect to the test masters");
    let locker = Locker::builder()
        .store(Arc::new(store))
        .default_lease(LEASE)
        .build()
        .await
        .unwrap();

    let guard = locker.lock("k").await.unwrap();
    for master in &masters {
        let held = master.cmd(&["GET", "billing:{k}"]).unwrap();
        assert!(held.as_str().is_some(), "not held on a master");
    }
    let left = guard.lease_left().unwrap();
    let at_most = LEASE - LEASE.mul_f64(0.02) - Duration::from_millis(5);
    assert!(
        left <= at_most,
        "the drift was not taken off: {left:?} left"
    );
    guard.release().await.unwrap();
}

/// The RedLock builder's own checks: an odd number of masters, at least 3; a drift under
/// half the lease; each master one server.
#[tokio::test]
async fn a_bad_setting_on_the_redlock_store_builder_is_a_config_error() {
    let masters = RedisServer::spawn_many(3);
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let on = |urls: &[String]| {
        RedLockStore::builder(urls.iter().map(|url| RedisStore::builder().url(url)))
    };
    let one_a_cluster = urls[..2]
        .iter()
        .map(|url| RedisStore::builder().url(url))
        .chain([RedisStore::builder().cluster([&urls[2]])]);
    let cases = [
        (
            on(&urls[..2]),
            "an odd number of masters, at least 3; got 2",
        ),
        (
            on(&urls[..1]),
            "an odd number of masters, at least 3; got 1",
        ),
        (
            on(&urls).drift(0.5, Duration::ZERO),
            "redlock drift must be from 0",
        ),
        (
            RedLockStore::builder(one_a_cluster),
            "a redlock master is one server",
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
}
