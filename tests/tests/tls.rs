//! TLS to the database stores: a server that accepts TLS only is reached over TLS,
//! trusting the authority that signed its certificate (given to the builder, or as
//! PostgreSQL's `sslrootcert`); a plain connection to it is refused by the server, and a
//! certificate that another authority signed is refused by the client.

use std::path::PathBuf;
use std::sync::Arc;

use lock_core::backend::{MySqlStore, PostgresStore};
use lock_core::{LockError, Locker};
use lock_tests::{Certificates, MariaDbServer, PostgresServer, TestServer};

/// The error and its causes, one a line, in lower case.
fn causes(err: &LockError) -> String {
    let mut shown = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(e) = cause {
        shown = format!("{shown}\n{e}");
        cause = e.source();
    }
    shown.to_lowercase()
}

/// Takes a lock and gives it back through `store`'s connections.
async fn locks_through(store: impl lock_core::backend::Store + 'static) {
    let locker = Locker::builder()
        .store(Arc::new(store))
        .build()
        .await
        .unwrap();
    let guard = locker.lock("tls").await.unwrap();
    assert!(guard.is_held().await.unwrap());
    guard.release().await.unwrap();
}

/// An authority of its own, which signed none of the servers' certificates; its dir is
/// removed on drop.
struct OtherAuthority {
    dir: PathBuf,
    certificates: Certificates,
}

impl OtherAuthority {
    fn make(name: &str) -> OtherAuthority {
        let dir = std::env::temp_dir().join(format!(
            "lock-tests-other-authority-{name}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let certificates = Certificates::make(&dir);
        OtherAuthority { dir, certificates }
    }

    fn pem(&self) -> Vec<u8> {
        self.certificates.authority_pem()
    }
}

impl Drop for OtherAuthority {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn authority_of(server_certificates: Option<&Certificates>) -> &Certificates {
    server_certificates.expect("a server that accepts TLS only has certificates")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_locks_over_tls_verifying_the_server() {
    let server = PostgresServer::spawn_tls_only();
    let certificates = authority_of(server.certificates());
    let verify_full = format!("{}?sslmode=verify-full", server.url());
    let store = PostgresStore::builder(&verify_full)
        .tls_root_certificate(certificates.authority_pem())
        .build()
        .await
        .unwrap();
    locks_through(store).await;

    let rootcert = format!(
        "{verify_full}&sslrootcert={}",
        certificates.authority().display()
    );
    locks_through(PostgresStore::builder(&rootcert).build().await.unwrap()).await;
    // The url alone, through the scheme that picks the store.
    let locker = Locker::connect(&rootcert).await.unwrap();
    locker.lock("tls").await.unwrap().release().await.unwrap();

    // Without checking the certificate, as libpq's `require` without a root certificate.
    let require = format!("{}?sslmode=require", server.url());
    locks_through(PostgresStore::builder(&require).build().await.unwrap()).await;

    // The server's every session is over TLS.
    let sessions = server
        .psql("SELECT count(*), bool_and(ssl) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE backend_type = 'client backend'")
        .unwrap();
    assert!(sessions.ends_with("|t"), "{sessions}");
}

#[tokio::test]
async fn postgres_checks_the_host_name_only_for_verify_full() {
    let server = PostgresServer::spawn_tls_only();
    let authority = authority_of(server.certificates()).authority_pem();
    // The certificate is for 127.0.0.1, not for `localhost`.
    let on_localhost = |mode: &str| {
        let url = format!(
            "postgres://postgres@localhost:{}/postgres?sslmode={mode}",
            server.port()
        );
        PostgresStore::builder(&url).tls_root_certificate(authority.clone())
    };
    locks_through(on_localhost("verify-ca").build().await.unwrap()).await;
    let err = on_localhost("verify-full").build().await.unwrap_err();
    assert!(err.is_backend(), "{err}");
    assert!(causes(&err).contains("not valid for name"), "{err:?}");
}

#[tokio::test]
async fn postgres_refuses_a_plain_connection_to_a_tls_only_server() {
    let server = PostgresServer::spawn_tls_only();
    let plain = format!("{}?sslmode=disable", server.url());
    let err = PostgresStore::builder(&plain).build().await.unwrap_err();
    assert!(err.is_backend(), "{err}");
    let causes = causes(&err);
    assert!(
        causes.contains("pg_hba.conf") && causes.contains("no encryption"),
        "{causes}"
    );
}

#[tokio::test]
async fn postgres_refuses_a_certificate_another_authority_signed() {
    let server = PostgresServer::spawn_tls_only();
    let other = OtherAuthority::make("postgres");
    for mode in ["verify-full", "verify-ca", "require", "prefer"] {
        let url = format!("{}?sslmode={mode}", server.url());
        let err = PostgresStore::builder(&url)
            .tls_root_certificate(other.pem())
            .build()
            .await
            .unwrap_err();
        assert!(err.is_backend(), "{mode}: {err}");
        assert!(
            causes(&err).contains("invalid peer certificate"),
            "{mode}: {err:?}"
        );
    }
    let rootcert = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        server.url(),
        other.certificates.authority().display()
    );
    let err = PostgresStore::builder(&rootcert).build().await.unwrap_err();
    assert!(causes(&err).contains("invalid peer certificate"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_locks_over_tls_verifying_the_server() {
    let server = MariaDbServer::spawn_tls_only();
    let certificates = authority_of(server.certificates());
    // `verify_ca` and `verify_identity` are on unless the url turns them off.
    let url = format!("{}?require_ssl=true", server.url());
    let store = MySqlStore::builder(&url)
        .tls_root_certificate(certificates.authority_pem())
        .build()
        .await
        .unwrap();
    locks_through(store).await;
    // Without it, the built-in authorities do not know the server's.
    let err = MySqlStore::builder(&url).build().await.unwrap_err();
    assert!(causes(&err).contains("invalid peer certificate"), "{err:?}");
}

#[tokio::test]
async fn mysql_refuses_a_plain_connection_to_a_tls_only_server() {
    let server = MariaDbServer::spawn_tls_only();
    let err = MySqlStore::builder(&server.url())
        .build()
        .await
        .unwrap_err();
    assert!(err.is_backend(), "{err}");
    // MariaDB says no more than that (MySQL names the insecure transport).
    let causes = causes(&err);
    assert!(
        causes.contains("access denied") || causes.contains("insecure transport"),
        "{causes}"
    );
    // Over TLS, the same user is let in.
    let tls = format!("{}?require_ssl=true", server.url());
    let authority = authority_of(server.certificates()).authority_pem();
    let store = MySqlStore::builder(&tls).tls_root_certificate(authority);
    locks_through(store.build().await.unwrap()).await;
}

#[tokio::test]
async fn mysql_refuses_a_certificate_another_authority_signed() {
    let server = MariaDbServer::spawn_tls_only();
    let other = OtherAuthority::make("mysql");
    let url = format!("{}?require_ssl=true", server.url());
    let err = MySqlStore::builder(&url)
        .tls_root_certificate(other.pem())
        .build()
        .await
        .unwrap_err();
    assert!(err.is_backend(), "{err}");
    assert!(causes(&err).contains("invalid peer certificate"), "{err:?}");
}
