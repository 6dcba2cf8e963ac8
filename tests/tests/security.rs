//! Credentials: a password in a Redis url never shows in an error or in `Debug`, and a
//! server that asks for one (`requirepass`, an ACL user) is reached with it, both by the
//! commands' connection and by the pub/sub connection that wakes waiters; a server that
//! speaks TLS is reached over `rediss://`, trusting the authority that signed it.

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

use lock_core::backend::{RedLockStore, RedisStore};
use lock_core::{LockError, Locker};
use lock_tests::{Certificates, RedisServer, TestServer, ValueExt, lock_holder};

#[path = "common/wake.rs"]
mod wake;

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
    let store = RedisStore::builder().url(&unreachable);
    assert!(!format!("{store:?}").contains("pw-closed"), "{store:?}");
    let redlock = RedLockStore::builder([store.clone(), store.clone(), store]);
    assert!(!format!("{redlock:?}").contains("pw-closed"), "{redlock:?}");
}

/// Locks on a server that needs a password, and a waiter woken by a release: the pub/sub
/// connection authenticated too, or the waiter would wait for the safety poll.
async fn locks_and_wake_ups_work(locker: &Locker, other: &Locker) {
    wake::a_release_wakes_the_waiter(locker, other, "k", SAFETY_POLL).await;
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
    let store = RedisStore::builder().url(&url).build().await.unwrap();
    assert!(!format!("{store:?}").contains(PASSWORD), "{store:?}");
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

/// A server that also speaks TLS on `tls_port`, with `certificates`.
fn tls_server(certificates: &Certificates, tls_port: u16) -> RedisServer {
    let file = |path: PathBuf| path.display().to_string();
    RedisServer::spawn_with(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &file(certificates.certificate()),
        "--tls-key-file",
        &file(certificates.key()),
        "--tls-ca-cert-file",
        &file(certificates.authority()),
        "--tls-auth-clients",
        "no",
    ])
}

/// A port no one listens on now.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_server_is_reached_over_rediss_trusting_its_authority() {
    let dir = std::env::temp_dir().join(format!(
        "lock-tests-tls-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let certificates = Certificates::make(&dir);
    let tls_port = free_port();
    let server = tls_server(&certificates, tls_port);
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let authority = certificates.authority_pem();
    let connect = || {
        Locker::builder()
            .url(&url)
            .tls_root_certificate(authority.clone())
            .safety_poll(SAFETY_POLL)
            .build()
    };
    let (locker, other) = (connect().await.unwrap(), connect().await.unwrap());
    locks_and_wake_ups_work(&locker, &other).await;
    // The Lockers' connections are on the TLS port (each one's commands, and the waiter's
    // pub/sub); on the plain one only the harness's own, which asks.
    let clients = server.cmd(&["CLIENT", "LIST"]).unwrap();
    let clients = clients.as_str().unwrap_or_default();
    let on = |port: u16| {
        let laddr = format!(" laddr=127.0.0.1:{port} ");
        clients.lines().filter(|l| l.contains(&laddr)).count()
    };
    assert!(on(tls_port) >= 3, "{clients}");
    assert_eq!(on(server.port()), 1, "{clients}");

    // Without the authority, the server's certificate is not trusted.
    let untrusted = Locker::builder()
        .url(&url)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await;
    let err = untrusted.unwrap_err();
    assert!(err.is_backend(), "{err}");
    let cause = std::error::Error::source(&err).map(ToString::to_string);
    let cause = cause.unwrap_or_default().to_lowercase();
    assert!(cause.contains("certificate"), "{err}: {cause}");
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An owner's token, as the lock key holds it, is a random (version 4) UUID, 122 random
/// bits, one per acquisition, and the mark of its kind. Nothing releases a lock but the
/// guard that holds it.
#[tokio::test]
async fn tokens_carry_122_random_bits() {
    let server = RedisServer::spawn();
    let locker = Locker::connect(&server.url()).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let guard = locker.lock("k").await.unwrap();
        let token = lock_holder(&server, "k").expect("the owner's token");
        let (uuid, mark) = token.split_once(':').expect("a kind's mark");
        assert_eq!(mark, "x", "exclusive: {token}");
        let hex: String = uuid.chars().filter(|&c| c != '-').collect();
        assert_eq!(hex.len(), 32, "{token}");
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{token}");
        // Version 4 (random), variant RFC 4122: 6 fixed bits, 122 random.
        assert_eq!(&hex[12..13], "4", "{token}");
        assert!(matches!(&hex[16..17], "8" | "9" | "a" | "b"), "{token}");
        assert!(!seen.contains(&token), "a token came back: {token}");
        seen.push(token);
        guard.release().await.unwrap();
    }
}
