//! Credentials: a password in a Redis url never shows in an error or in `Debug`, and a
//! server that asks for one (`requirepass`, an ACL user) is reached with it, both by the
//! commands' connection and by the pub/sub connection that wakes waiters.

use std::time::Duration;

use lock_core::{LockError, LockOptions, Locker};
use lock_tests::RedisServer;
use tokio::time::{Instant, sleep, timeout};

const SAFETY_POLL: Duration = Duration::from_secs(4);
const PASSWORD: &str = "s3cret-pw";

/// Asserts that neither the message nor the `Debug` of `err` holds `password`.
fn hides(err: &LockError, password: &str) {
    let (shown, debug) = (err.to_string(), format!("{err:?}"));
    assert!(!shown.contains(password), "the password shows in {shown}");
    assert!(!debug.contains(password), "the password shows in {debug}");
}

/// A url of `server` with `user` and `password`.
fn url_with(server: &RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}", server.port())
}

/// A server whose default user needs `PASSWORD`.
fn server_with_password() -> RedisServer {
    let server = RedisServer::spawn();
    server
        .cmd(&["CONFIG", "SET", "requirepass", PASSWORD])
        .unwrap();
    server
}

#[tokio::test]
async fn a_wrong_password_is_refused_without_showing_it() {
    let server = server_with_password();
    let err = Locker::connect(&url_with(&server, "", "wrong-pw"))
        .await
        .unwrap_err();
    assert!(err.is_backend(), "{err}");
    hides(&err, "wrong-pw");
}

#[tokio::test]
async fn passwords_of_unreachable_or_invalid_urls_never_show() {
    let closed = {
        let server = RedisServer::spawn();
        server.port()
    };
    let unreachable = format!("redis://user:pw-closed@127.0.0.1:{closed}");
    let quick = Duration::from_millis(500);
    let single = Locker::builder()
        .url(&unreachable)
        .connect_timeout(quick)
        .build()
        .await;
    hides(&single.unwrap_err(), "pw-closed");
    let redlock = Locker::builder()
        .redlock([&unreachable, &unreachable, &unreachable])
        .connect_timeout(quick)
        .build()
        .await;
    hides(&redlock.unwrap_err(), "pw-closed");
    let cluster = Locker::builder()
        .cluster([&unreachable])
        .connect_timeout(quick)
        .build()
        .await;
    hides(&cluster.unwrap_err(), "pw-closed");
    let sentinel = Locker::builder()
        .sentinel([&unreachable], "mymaster")
        .connect_timeout(quick)
        .build()
        .await;
    hides(&sentinel.unwrap_err(), "pw-closed");

    for invalid in [
        "redis://user:pw-bad@127.0.0.1:notaport",
        "rediss2://user:pw-bad@127.0.0.1:6379",
    ] {
        hides(&Locker::connect(invalid).await.unwrap_err(), "pw-bad");
        let cluster = Locker::cluster([invalid]).await;
        hides(&cluster.unwrap_err(), "pw-bad");
    }

    let builder = Locker::builder().url(&unreachable);
    assert!(!format!("{builder:?}").contains("pw-closed"), "{builder:?}");
}

/// Locks on a server that needs a password, and a waiter woken by a release: the pub/sub
/// connection authenticated too, or the waiter would wait for the safety poll.
async fn locks_and_wake_ups_work(locker: &Locker, other: &Locker) {
    let held = locker
        .lock_with("k", LockOptions::new().lease(Duration::from_secs(30)))
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let other = other.clone();
        async move {
            let guard = other.lock("k").await.unwrap();
            let got = Instant::now();
            guard.release().await.unwrap();
            got
        }
    });
    // No public signal says a waiter is parked: give it a moment.
    sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "the waiter got a held lock");
    let released = Instant::now();
    held.release().await.unwrap();
    let got = timeout(SAFETY_POLL * 2, waiting).await.unwrap().unwrap();
    let after = got.saturating_duration_since(released);
    assert!(
        after < SAFETY_POLL / 4,
        "the waiter got the lock {after:?} after its release, not woken by it"
    );
}

async fn connect(url: &str) -> Locker {
    Locker::builder()
        .url(url)
        .safety_poll(SAFETY_POLL)
        .build()
        .await
        .expect("connect with the password")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_requirepass_is_reached_with_its_password() {
    let server = server_with_password();
    let url = url_with(&server, "", PASSWORD);
    let (locker, other) = (connect(&url).await, connect(&url).await);
    assert!(!format!("{locker:?}").contains(PASSWORD), "{locker:?}");
    locks_and_wake_ups_work(&locker, &other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_is_reached_with_its_name_and_password() {
    let server = RedisServer::spawn();
    server
        .cmd(&[
            "ACL", "SETUSER", "app", "on", ">app-pw", "~*", "&*", "+@all",
        ])
        .unwrap();
    // Nobody gets in without a name and a password.
    server.cmd(&["ACL", "SETUSER", "default", "off"]).unwrap();
    let err = Locker::connect(&server.url()).await.unwrap_err();
    assert!(err.is_backend(), "{err}");

    let url = url_with(&server, "app", "app-pw");
    let (locker, other) = (connect(&url).await, connect(&url).await);
    locks_and_wake_ups_work(&locker, &other).await;
}
