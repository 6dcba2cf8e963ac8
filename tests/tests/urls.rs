//! One url picks the store: `Locker::connect` on each store's schemes, against servers of
//! the test's own, shares its locks with a `Locker` made by the store's own constructor;
//! no error shows a url's password.

use lock_core::{LockError, Locker};
use lock_tests::{MariaDbServer, PostgresServer, ZooKeeperServer};

/// `url` with its scheme replaced by `scheme`.
fn with_scheme(url: &str, scheme: &str) -> String {
    let (_, rest) = url.split_once("://").expect("a url");
    format!("{scheme}://{rest}")
}

/// Takes a lock on `by_url` and checks that `peer` sees it held, then free once released.
async fn shares_locks(by_url: &Locker, peer: &Locker, store: &str) {
    assert_eq!(by_url.store().name(), store);
    let guard = by_url.lock("shared:1").await.unwrap();
    assert!(
        peer.try_lock("shared:1").await.unwrap().is_none(),
        "the peer took a lock held through the url"
    );
    guard.release().await.unwrap();
    let again = peer.try_lock("shared:1").await.unwrap();
    again
        .expect("the released lock stayed held")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_and_postgresql_urls_lock_in_postgres() {
    let server = PostgresServer::spawn();
    let peer = Locker::postgres(&server.url()).await.unwrap();
    for scheme in ["postgres", "postgresql"] {
        let by_url = Locker::connect(&with_scheme(&server.url(), scheme))
            .await
            .unwrap();
        shares_locks(&by_url, &peer, "postgres").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_and_mariadb_urls_lock_in_mysql() {
    let server = MariaDbServer::spawn();
    let peer = Locker::mysql(&server.url()).await.unwrap();
    for scheme in ["mysql", "mariadb"] {
        let by_url = Locker::connect(&with_scheme(&server.url(), scheme))
            .await
            .unwrap();
        shares_locks(&by_url, &peer, "mysql").await;
    }
}

/// `zookeeper://hosts/chroot`: the locks live under the chroot, where a `Locker` on the
/// same connect string finds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_url_names_the_ensemble_and_its_chroot() {
    let server = ZooKeeperServer::spawn();
    let chrooted = format!("{}/app", server.connect_string());
    let peer = Locker::zookeeper(&chrooted).await.unwrap();
    let by_url = Locker::connect(&format!("zookeeper://{chrooted}"))
        .await
        .unwrap();
    shares_locks(&by_url, &peer, "zookeeper").await;
    let guard = by_url.lock("listed").await.unwrap();
    let listed = server.cli(&["ls", "/app/locks/listed"]).unwrap();
    assert!(listed.contains("-lock-"), "{listed}");
    guard.release().await.unwrap();
}

/// `zookeeper://user:password@hosts/chroot`: the user and password, percent-decoded,
/// authenticate with digest, and a chroot only that user may write to takes its locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_url_with_a_user_authenticates_with_digest() {
    // base64(sha1("billing:s3:cr@t")), as ZooKeeper's DigestAuthenticationProvider stores it
    const DIGEST: &str = "4ClGgi4Fgfw7RBxbPfDLN17ch8Q=";
    let server = ZooKeeperServer::spawn();
    let acl = format!("digest:billing:{DIGEST}:cdrwa");
    server.cli(&["create", "/billing", "", &acl]).unwrap();
    let hosts = server.connect_string();
    for refused in [
        format!("zookeeper://{hosts}/billing"),
        format!("zookeeper://billing:guess@{hosts}/billing"),
    ] {
        let locker = Locker::connect(&refused).await.unwrap();
        let err = locker.lock("job").await.unwrap_err();
        let cause = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("not authorized"), "{err}");
    }
    let url = format!("zookeeper://billing:s3%3Acr%40t@{hosts}/billing");
    let locker = Locker::connect(&url).await.unwrap();
    locker.lock("job").await.unwrap().release().await.unwrap();
}

/// A database that cannot be reached is refused naming where, never the password.
#[tokio::test]
async fn no_error_shows_a_urls_password() {
    for url in [
        "postgres://me:s3cret@127.0.0.1:1/db",
        "mysql://me:s3cret@127.0.0.1:1/db",
        "mariadb://me:s3cret@127.0.0.1:1/db",
    ] {
        let err: LockError = Locker::connect(url).await.unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(err.is_backend(), "{url}: {shown}");
        assert!(!shown.contains("s3cret"), "{url}: {shown}");
    }
}
