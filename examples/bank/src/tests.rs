//! In-process tests: the endpoints over real HTTP on loopback, the store's fencing check,
//! the balances' table on PostgreSQL, and the demo's locked run. Processes and replicas:
//! `tests/replicas.rs`.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, Response, StatusCode, header};
use axum::response::IntoResponse;
use lock_core::backend::MemoryStore;
use lock_core::{LockGuard, LockKind, LockOptions, Locker};
use lock_tests::{PostgresServer, RedisServer, TestServer, ZooKeeperServer, eventually};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Barrier;

use crate::audit::{self, ELECTION};
use crate::demo::{self, Http};
use crate::service::{AccountId, Bank, BankError, NO_FENCE, STATEMENTS, lock_key};
use crate::store::postgres::CREATE_TABLE;
use crate::store::{Read, Store, Write};
use crate::{Backend, Config, app};

/// The bound of every wait on a condition in this file.
const DEADLINE: Duration = Duration::from_secs(30);

fn config(backend: Backend) -> Config {
    Config {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        backend,
        lock_url: None,
        lease: lock_core::DEFAULT_LEASE,
        wait: Duration::from_secs(5),
        delay: Duration::from_millis(1),
        max_statements: NonZeroU32::new(2).unwrap(),
        statement_delay: Duration::from_millis(1),
        locks: true,
        admin_token: None,
        audit_interval: Duration::from_secs(10),
        replica_id: "replica".to_owned(),
    }
}

/// Serves a bank on a free port until the test's runtime ends.
async fn serve(config: Config) -> (Http, Bank) {
    let bank = Bank::open(&config).await.unwrap();
    let listener = TcpListener::bind(config.addr).await.unwrap();
    let http = Http::new(listener.local_addr().unwrap());
    let app = app::router(bank.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (http, bank)
}

/// The status and JSON body of an answer.
async fn call(http: &Http, method: Method, path: &str, body: Option<&str>) -> (StatusCode, Value) {
    let response = http.send(method, path, body).await.unwrap();
    let json = serde_json::from_slice(response.body())
        .unwrap_or_else(|e| panic!("{path}: the body is not JSON ({e}): {response:?}"));
    (response.status(), json)
}

async fn balance(http: &Http, id: &str) -> i64 {
    let (status, body) = call(http, Method::GET, &format!("/accounts/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["balance"].as_i64().unwrap()
}

async fn deposit(http: &Http, id: &str, amount: i64) -> (StatusCode, Value) {
    let body = format!(r#"{{"amount": {amount}}}"#);
    let path = format!("/accounts/{id}/deposit");
    call(http, Method::POST, &path, Some(&body)).await
}

fn assert_error(status: StatusCode, body: &Value, expected: StatusCode, what: &str) {
    assert_eq!(status, expected, "{what}: {body}");
    let reason = body["error"].as_str().unwrap_or_default();
    assert!(!reason.is_empty(), "{what}: no reason in {body}");
}

/// A `423` with a reason and a `Retry-After` of at least a second.
fn assert_locked(response: &Response<Bytes>, what: &str) {
    let reply: Value = serde_json::from_slice(response.body()).unwrap();
    assert_error(response.status(), &reply, StatusCode::LOCKED, what);
    let retry_after = response.headers()[header::RETRY_AFTER].to_str().unwrap();
    assert!(
        retry_after.parse::<u64>().unwrap() >= 1,
        "{what}: {retry_after}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_400_with_a_reason_and_changes_nothing() {
    let (http, _bank) = serve(config(Backend::Memory)).await;
    let long = "a".repeat(65);
    let post = Method::POST;
    let cases = [
        (post.clone(), "/accounts/alice/deposit", r#"{"amount": 0}"#),
        (post.clone(), "/accounts/alice/deposit", r#"{"amount": -5}"#),
        (
            post.clone(),
            "/accounts/alice/deposit",
            r#"{"amount": 1.5}"#,
        ),
        (
            post.clone(),
            "/accounts/alice/deposit",
            r#"{"amount": "7"}"#,
        ),
        (
            post.clone(),
            "/accounts/alice/deposit",
            r#"{"amount": 1e30}"#,
        ),
        (post.clone(), "/accounts/alice/deposit", r#"{}"#),
        (
            post.clone(),
            "/accounts/alice/deposit",
            r#"{"amount": 1, "x": 2}"#,
        ),
        (post.clone(), "/accounts/alice/deposit", r#"{"amount": 1"#),
        (post.clone(), "/accounts/alice/deposit", "not json"),
        (
            post.clone(),
            "/accounts/alice/withdraw",
            r#"{"amount": -1}"#,
        ),
        (post.clone(), "/accounts/al.ice/deposit", r#"{"amount": 1}"#),
        (post.clone(), "/accounts/a%20b/deposit", r#"{"amount": 1}"#),
        (post.clone(), "/accounts/a%01b/withdraw", r#"{"amount": 1}"#),
        (post.clone(), "/accounts/%FF/deposit", r#"{"amount": 1}"#),
        (Method::GET, "/accounts/%C3%BC", ""),
        (Method::GET, "/accounts/a.b/statement", ""),
        (
            post.clone(),
            "/transfers",
            r#"{"from": "alice", "to": "alice", "amount": 1}"#,
        ),
        (
            post.clone(),
            "/transfers",
            r#"{"from": "alice", "to": "b/b", "amount": 1}"#,
        ),
        (
            post.clone(),
            "/transfers",
            r#"{"from": "", "to": "bob", "amount": 1}"#,
        ),
        (
            post.clone(),
            "/transfers",
            r#"{"from": "alice", "to": "bob", "amount": 0}"#,
        ),
        (
            post.clone(),
            "/transfers",
            r#"{"from": "alice", "amount": 1}"#,
        ),
    ];
    for (method, path, body) in cases {
        let body = (!body.is_empty()).then_some(body);
        let (status, reply) = call(&http, method, path, body).await;
        assert_error(
            status,
            &reply,
            StatusCode::BAD_REQUEST,
            &format!("{path} {body:?}"),
        );
    }
    let too_long = format!("/accounts/{long}/deposit");
    let (status, reply) = call(&http, post, &too_long, Some(r#"{"amount": 1}"#)).await;
    assert_error(status, &reply, StatusCode::BAD_REQUEST, "a 65-byte id");
    let (status, reply) = deposit(&http, &"a".repeat(64), 1).await;
    assert_eq!(status, StatusCode::OK, "a 64-byte id is fine: {reply}");
    assert_eq!(balance(&http, "alice").await, 0);
    assert_eq!(balance(&http, "bob").await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_accounts_have_balance_0_and_unknown_paths_are_404() {
    let (http, _bank) = serve(config(Backend::Memory)).await;
    let (status, body) = call(&http, Method::GET, "/accounts/nobody", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, serde_json::json!({"id": "nobody", "balance": 0}));
    let (status, body) = call(&http, Method::GET, "/accounts/nobody/history", None).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "an unknown path");
    let (status, body) = call(&http, Method::DELETE, "/accounts/nobody", None).await;
    assert_error(status, &body, StatusCode::METHOD_NOT_ALLOWED, "DELETE");
}

#[tokio::test(flavor = "multi_thread")]
async fn overdrafts_are_409_and_change_nothing() {
    let (http, _bank) = serve(config(Backend::Memory)).await;
    assert_eq!(deposit(&http, "alice", 50).await.0, StatusCode::OK);

    let withdraw = r#"{"amount": 80}"#;
    let (status, body) = call(
        &http,
        Method::POST,
        "/accounts/alice/withdraw",
        Some(withdraw),
    )
    .await;
    assert_error(status, &body, StatusCode::CONFLICT, "withdraw 80 of 50");
    assert_eq!(body["error"], "insufficient funds");
    assert_eq!(
        (body["balance"].as_i64(), body["amount"].as_i64()),
        (Some(50), Some(80))
    );

    let transfer = r#"{"from": "alice", "to": "bob", "amount": 60}"#;
    let (status, body) = call(&http, Method::POST, "/transfers", Some(transfer)).await;
    assert_error(status, &body, StatusCode::CONFLICT, "transfer 60 of 50");
    assert_eq!(body["error"], "insufficient funds");
    assert_eq!(
        (balance(&http, "alice").await, balance(&http, "bob").await),
        (50, 0)
    );

    let transfer = r#"{"from": "alice", "to": "bob", "amount": 20}"#;
    let (status, body) = call(&http, Method::POST, "/transfers", Some(transfer)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let expected =
        r#"{"from": {"id": "alice", "balance": 30}, "to": {"id": "bob", "balance": 20}}"#;
    assert_eq!(body, serde_json::from_str::<Value>(expected).unwrap());

    let withdraw = r#"{"amount": 30}"#;
    let (status, body) = call(
        &http,
        Method::POST,
        "/accounts/alice/withdraw",
        Some(withdraw),
    )
    .await;
    assert_eq!(
        (status, body["balance"].as_i64()),
        (StatusCode::OK, Some(0)),
        "{body}"
    );

    let (status, body) = deposit(&http, "bob", i64::MAX).await;
    assert_error(
        status,
        &body,
        StatusCode::CONFLICT,
        "an overflowing deposit",
    );
    assert_eq!(balance(&http, "bob").await, 20);
}

/// The requests that need alice's lock: a read, a deposit, and the transfer `transfer`.
fn on_alice(transfer: &str) -> [(Method, &str, Option<&str>); 3] {
    [
        (Method::GET, "/accounts/alice", None),
        (
            Method::POST,
            "/accounts/alice/deposit",
            Some(r#"{"amount": 1}"#),
        ),
        (Method::POST, "/transfers", Some(transfer)),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_account_is_423_with_retry_after() {
    let (http, bank) = serve(Config {
        wait: Duration::from_millis(100),
        ..config(Backend::Memory)
    })
    .await;
    let requests = on_alice(r#"{"from": "bob", "to": "alice", "amount": 1}"#);
    let key = lock_key(&AccountId::parse("alice").unwrap());
    for held in [LockKind::Read, LockKind::Write] {
        let opts = LockOptions::new().kind(held);
        let guard = bank.locker().lock_with(&key, opts).await.unwrap();
        for (method, path, body) in &requests {
            let response = http.send(method.clone(), path, *body).await.unwrap();
            let what = format!("{method} {path} while held as {held}");
            if held == LockKind::Read && method == Method::GET {
                assert_eq!(response.status(), StatusCode::OK, "{what}: reads share");
            } else {
                assert_locked(&response, &what);
            }
        }
        guard.release().await.unwrap();
    }
    assert_eq!(deposit(&http, "alice", 1).await.0, StatusCode::OK);
    assert_eq!(balance(&http, "alice").await, 1);
}

/// Reads of one account go in together; a deposit waits until the last has gone.
async fn reads_share_an_account_and_a_deposit_waits_for_them(backend: Backend) {
    let (http, bank) = serve(config(backend)).await;
    assert_eq!(deposit(&http, "alice", 5).await.0, StatusCode::OK);
    let key = lock_key(&AccountId::parse("alice").unwrap());
    let read = bank.locker().read(&key).await.unwrap();
    // Were reads exclusive, these would wait the whole 5 s wait, then answer 423.
    assert_eq!(balance(&http, "alice").await, 5);
    let (status, body) = call(&http, Method::GET, "/accounts/alice/statement", None).await;
    assert_eq!(
        (status, body["balance"].as_i64()),
        (StatusCode::OK, Some(5))
    );

    let update = tokio::spawn({
        let http = http.clone();
        async move { deposit(&http, "alice", 1).await }
    });
    // Writers are preferred: once the deposit waits for the write side, a new reader
    // (in a task of its own: this one's read would re-enter) waits behind it.
    eventually(DEADLINE, "the deposit to wait for the read", || {
        let (locker, key) = (bank.locker().clone(), key.clone());
        let read = LockOptions::new().kind(LockKind::Read);
        let attempt = tokio::spawn(async move { locker.try_lock_with(&key, read).await });
        async move { attempt.await.unwrap().unwrap().is_none() }
    })
    .await;
    assert!(
        !update.is_finished(),
        "the deposit went in while a read held"
    );
    read.release().await.unwrap();
    let (status, body) = update.await.unwrap();
    assert_eq!(
        (status, body["balance"].as_i64()),
        (StatusCode::OK, Some(6))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_share_an_account_and_a_deposit_waits_for_them_in_memory() {
    reads_share_an_account_and_a_deposit_waits_for_them(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_share_an_account_and_a_deposit_waits_for_them_on_redis() {
    let redis = RedisServer::spawn();
    reads_share_an_account_and_a_deposit_waits_for_them(Backend::Redis(redis.url())).await;
}

/// With both statement permits held (as two statements in flight hold them), a third
/// statement answers 423 with `Retry-After`; once one is given back, it goes through.
async fn statements_beyond_the_bound_are_423(backend: Backend) {
    let (http, bank) = serve(Config {
        wait: Duration::from_millis(100),
        ..config(backend)
    })
    .await;
    assert_eq!(deposit(&http, "alice", 70).await.0, StatusCode::OK);
    let statements = bank.locker().semaphore(STATEMENTS, 2);
    let first = statements.acquire().await.unwrap();
    let _second = statements.acquire().await.unwrap();

    let path = "/accounts/alice/statement";
    let response = http.send(Method::GET, path, None).await.unwrap();
    assert_locked(&response, "a third statement");
    assert_eq!(
        balance(&http, "alice").await,
        70,
        "balances are not bounded"
    );

    first.release().await.unwrap();
    let (status, body) = call(&http, Method::GET, path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["id"].as_str(), body["balance"].as_i64()),
        (Some("alice"), Some(70))
    );
    let fencing_token = body["fencing_token"].as_u64().unwrap();
    assert!(fencing_token > NO_FENCE, "{body}");
    assert!(body["as_of_unix_ms"].as_u64().unwrap() > 0, "{body}");
    let (_, again) = call(&http, Method::GET, path, None).await;
    let newer = again["fencing_token"].as_u64().unwrap();
    assert!(
        newer > fencing_token,
        "each read draws a newer token: {again}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn statements_beyond_the_bound_are_423_in_memory() {
    statements_beyond_the_bound_are_423(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn statements_beyond_the_bound_are_423_on_redis() {
    let redis = RedisServer::spawn();
    statements_beyond_the_bound_are_423(Backend::Redis(redis.url())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_down_is_503() {
    let mut redis = RedisServer::spawn();
    let (http, _bank) = serve(config(Backend::Redis(redis.url()))).await;
    assert_eq!(deposit(&http, "alice", 5).await.0, StatusCode::OK);
    assert_eq!(balance(&http, "alice").await, 5);

    redis.kill();
    every_request_is_503(&http).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_down_is_503() {
    let mut postgres = PostgresServer::spawn();
    let (http, _bank) = serve(config(Backend::Postgres(postgres.url()))).await;
    assert_eq!(deposit(&http, "alice", 5).await.0, StatusCode::OK);
    assert_eq!(balance(&http, "alice").await, 5);

    postgres.kill();
    every_request_is_503(&http).await;
}

/// Every update and read answers `503` with a reason, the store being down.
async fn every_request_is_503(http: &Http) {
    let transfer = r#"{"from": "alice", "to": "bob", "amount": 1}"#;
    for (method, path, body) in [
        (
            Method::POST,
            "/accounts/alice/deposit",
            Some(r#"{"amount": 1}"#),
        ),
        (
            Method::POST,
            "/accounts/alice/withdraw",
            Some(r#"{"amount": 1}"#),
        ),
        (Method::POST, "/transfers", Some(transfer)),
        (Method::GET, "/accounts/alice", None),
        (Method::GET, "/accounts/alice/statement", None),
    ] {
        let (status, reply) = call(http, method, path, body).await;
        assert_error(status, &reply, StatusCode::SERVICE_UNAVAILABLE, path);
    }
}

/// Fencing: a read-modify-write's read or write under an older token than the account has
/// seen changes nothing, and its read records its token; a read for showing records its
/// token too, never lowering the one recorded, and is never refused. `largest` is the
/// largest token the store keeps.
async fn check_fencing(store: &Store, largest: u64) {
    let write = |id, balance, fence| Write { id, balance, fence };
    let read = |id, fence| Read { id, fence };
    assert!(store.write(&[write("a", 10, 5)]).await.unwrap());
    assert!(
        !store.write(&[write("a", 20, 4)]).await.unwrap(),
        "older token"
    );
    assert!(
        store.write(&[write("a", 30, 5)]).await.unwrap(),
        "same token"
    );
    // all or nothing: "b" is new, "a" refuses
    let both = [write("b", 1, 1), write("a", 40, 3)];
    assert!(!store.write(&both).await.unwrap());
    assert_eq!(
        (
            store.balance("a", NO_FENCE).await.unwrap(),
            store.balance("b", NO_FENCE).await.unwrap()
        ),
        (30, 0)
    );
    // tokens compare exactly, beyond a double's 53 bits
    assert!(store.write(&[write("c", 1, largest - 1)]).await.unwrap());
    assert!(!store.write(&[write("c", 2, largest - 2)]).await.unwrap());
    assert!(store.write(&[write("c", 3, largest)]).await.unwrap());
    assert_eq!(store.balance("c", NO_FENCE).await.unwrap(), 3);

    // a read records its token: from then on, an older one can neither write nor read
    assert_eq!(store.read(&[read("a", 6)]).await.unwrap(), Some([30]));
    assert!(
        !store.write(&[write("a", 50, 5)]).await.unwrap(),
        "older than a read"
    );
    assert_eq!(store.read(&[read("a", 5)]).await.unwrap(), None);
    assert!(
        store.write(&[write("a", 60, 6)]).await.unwrap(),
        "the reader's own token"
    );
    // all or nothing: "d" is new, "a" refuses, and "d" records nothing
    assert_eq!(
        store.read(&[read("d", 9), read("a", 5)]).await.unwrap(),
        None
    );
    assert!(store.write(&[write("d", 7, 8)]).await.unwrap());
    assert_eq!(
        store.read(&[read("d", 8), read("new", 1)]).await.unwrap(),
        Some([7, 0])
    );

    // readers share the lock: an older one may come after a newer one, and is not refused
    assert_eq!(store.balance("d", 10).await.unwrap(), 7);
    assert_eq!(store.balance("d", 9).await.unwrap(), 7, "an older reader");
    assert!(
        !store.write(&[write("d", 1, 9)]).await.unwrap(),
        "older than a read: the older reader did not lower the token recorded"
    );
    assert_eq!(store.read(&[read("d", 9)]).await.unwrap(), None);
    assert!(
        store.write(&[write("d", 8, 11)]).await.unwrap(),
        "a writer after the readers"
    );
    assert_eq!(store.balance("d", NO_FENCE).await.unwrap(), 8);
}

#[tokio::test]
async fn the_store_refuses_stale_fencing_tokens_in_memory() {
    check_fencing(&Store::in_memory(), u64::MAX).await;
}

#[tokio::test]
async fn the_store_refuses_stale_fencing_tokens_on_redis() {
    let redis = RedisServer::spawn();
    check_fencing(&Store::redis(&redis.url()).await.unwrap(), u64::MAX).await;
}

#[tokio::test]
async fn the_store_refuses_stale_fencing_tokens_on_postgres() {
    let postgres = PostgresServer::spawn();
    let store = Store::postgres(&postgres.url(), lock_core::DEFAULT_LEASE)
        .await
        .unwrap();
    let bigint = u64::try_from(i64::MAX).unwrap();
    check_fencing(&store, bigint).await;
    // a token beyond the column is an error, not a write
    let beyond = Write {
        id: "e",
        balance: 1,
        fence: bigint + 1,
    };
    let err = store.write(&[beyond]).await.unwrap_err();
    assert!(err.to_string().contains("bigint"), "{err}");
}

/// Returns once `sessions` sessions of `postgres` wait for a lock in a statement that
/// starts with `statement`.
async fn until_waiting_on_a_lock(postgres: &PostgresServer, statement: &str, sessions: usize) {
    let count = format!(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE wait_event_type = 'Lock' AND query LIKE '{statement}%'"
    );
    eventually(DEADLINE, "the others to wait for the first", || async {
        postgres.psql(&count).unwrap() == sessions.to_string()
    })
    .await;
}

/// Replicas that record their lock store at once on fresh balances all learn the one
/// recorded first: one records it in a transaction left open until the others wait on
/// its row; it commits, and each of them answers its store, not an error.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_recording_their_lock_store_at_once_all_learn_the_first() {
    const OTHERS: usize = 4;
    let postgres = PostgresServer::spawn();
    let url = postgres.url();
    Store::postgres(&url, lock_core::DEFAULT_LEASE)
        .await
        .unwrap();
    let (mut first, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let recording = first.transaction().await.unwrap();
    let insert = "INSERT INTO bank_fenced_by (lock_store) VALUES ('the first')";
    recording.batch_execute(insert).await.unwrap();
    let others: Vec<_> = (0..OTHERS)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let store = Store::postgres(&url, lock_core::DEFAULT_LEASE).await?;
                store.fenced_by("another").await
            })
        })
        .collect();
    until_waiting_on_a_lock(&postgres, "WITH recorded", OTHERS).await;
    recording.commit().await.unwrap();
    for other in others {
        assert_eq!(other.await.unwrap().unwrap(), "the first");
    }
}

/// The table of the balances, as a fresh database gets it from replicas that start at
/// once: each creates it unless it exists, and none fails for another's doing so. Here
/// the first creates it in a transaction left open until the others wait for their turn;
/// it then commits, and they find the table there.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_starting_at_once_create_the_table_on_a_fresh_postgres() {
    const OTHERS: usize = 4;
    let postgres = PostgresServer::spawn();
    let url = postgres.url();
    let (mut first, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let creating = first.transaction().await.unwrap();
    creating.batch_execute(CREATE_TABLE).await.unwrap();
    let others: Vec<_> = (0..OTHERS)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { Store::postgres(&url, lock_core::DEFAULT_LEASE).await })
        })
        .collect();
    until_waiting_on_a_lock(&postgres, "SELECT pg_advisory_xact_lock", OTHERS).await;
    creating.commit().await.unwrap();
    let mut stores = Vec::new();
    for store in others {
        stores.push(store.await.unwrap().unwrap());
    }

    let columns = postgres
        .psql(
            "SELECT column_name, data_type FROM information_schema.columns \
             WHERE table_name = 'bank_accounts' ORDER BY ordinal_position",
        )
        .unwrap();
    assert_eq!(columns, "id|text\nbalance|bigint\nfence|bigint");
    let write = Write {
        id: "alice",
        balance: 5,
        fence: 1,
    };
    assert!(stores[0].write(&[write]).await.unwrap());
    assert_eq!(
        stores[OTHERS - 1].balance("alice", NO_FENCE).await.unwrap(),
        5
    );
}

/// The write side of an account's lock, on a short lease that nothing renews: its holder
/// goes on past it.
fn stale_write() -> LockOptions {
    LockOptions::new()
        .kind(LockKind::Write)
        .lease(Duration::from_millis(200))
        .watchdog(false)
}

/// How a holder's lock goes while it still works.
#[derive(Debug, Clone, Copy)]
enum Stale {
    /// Its lease runs out (a store that leases its holds).
    LeaseRunsOut,
    /// An operator forces it open (on PostgreSQL, whose holds last as long as their
    /// session, this ends the session, as the server does with one idle past its lease).
    ForcedOpen,
}

impl Stale {
    /// Waits until `guard`, a hold of lock `key` taken with [`stale_write`], is lost.
    async fn lose(self, bank: &Bank, key: &str, guard: &LockGuard) {
        if let Stale::ForcedOpen = self {
            assert!(bank.locker().force_unlock(key).await.unwrap());
        }
        guard.lost().await;
    }
}

/// Two deposits to one account, by holders A and B of its lock, in this order: A reads
/// the balance, then stops past its lease (a held guard whose lease nothing renews); B
/// takes the lock and reads the balance; A writes its result; B writes its own. A is
/// refused (its request answers 409), and the balance holds every deposit acknowledged.
async fn a_stale_holder_cannot_lose_a_deposit(config: Config, stale: Stale) {
    let bank = Bank::open(&config).await.unwrap();
    let id = AccountId::parse("alice").unwrap();
    let key = lock_key(&id);
    let (a_deposit, b_deposit) = (10, 1);
    // A and B each wait here for the other's step.
    let steps = Arc::new(Barrier::new(2));
    let a = tokio::spawn({
        let (bank, id, key, steps) = (bank.clone(), id.clone(), key.clone(), steps.clone());
        async move {
            let guard = bank.locker().lock_with(&key, stale_write()).await.unwrap();
            let fence = guard.fencing_token();
            let [balance] = bank.read([(&id, fence)]).await.unwrap(); // 1
            stale.lose(&bank, &key, &guard).await;
            steps.wait().await; // A's lease ran out
            steps.wait().await; // B has read
            let written = bank.write(&[(&id, balance + a_deposit, fence)]).await; // 3
            steps.wait().await; // A is done
            written
        }
    });
    steps.wait().await;
    let guard = bank.locker().write(&key).await.unwrap();
    let fence = guard.fencing_token();
    let [balance] = bank.read([(&id, fence)]).await.unwrap(); // 2
    steps.wait().await;
    steps.wait().await;
    bank.write(&[(&id, balance + b_deposit, fence)])
        .await
        .expect("B's write, under the lock's current holder"); // 4
    guard.release().await.unwrap();

    let a_written = a.await.unwrap();
    let acknowledged = b_deposit + if a_written.is_ok() { a_deposit } else { 0 };
    assert_eq!(
        bank.balance(&id).await.unwrap().balance,
        acknowledged,
        "a deposit was lost"
    );
    let err = a_written.expect_err("A wrote after its lease ran out");
    assert!(matches!(err, BankError::Stale), "{err:?}");
    let response = app::ApiError::from(err).into_response();
    assert_eq!(response.status(), StatusCode::CONFLICT);
}

#[tokio::test(start_paused = true)]
async fn a_stale_holder_cannot_lose_a_deposit_in_memory() {
    a_stale_holder_cannot_lose_a_deposit(config(Backend::Memory), Stale::LeaseRunsOut).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_holder_cannot_lose_a_deposit_on_redis() {
    let redis = RedisServer::spawn();
    let config = config(Backend::Redis(redis.url()));
    a_stale_holder_cannot_lose_a_deposit(config, Stale::LeaseRunsOut).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_holder_cannot_lose_a_deposit_on_postgres() {
    let postgres = PostgresServer::spawn();
    let config = config(Backend::Postgres(postgres.url()));
    a_stale_holder_cannot_lose_a_deposit(config, Stale::ForcedOpen).await;
}

/// A writer reads the balance, then stops past its lease; a reader takes the read side
/// and shows the balance, with a newer token; the writer's write, after that read, is
/// refused.
async fn a_write_after_a_newer_read_is_refused(config: Config, stale: Stale) {
    let bank = Bank::open(&config).await.unwrap();
    let id = AccountId::parse("alice").unwrap();
    let key = lock_key(&id);
    let writer = bank.locker().lock_with(&key, stale_write()).await.unwrap();
    let fence = writer.fencing_token();
    let [balance] = bank.read([(&id, fence)]).await.unwrap();
    stale.lose(&bank, &key, &writer).await;
    // A lost hold is not re-entered: this read takes the read side anew.
    let reading = bank.balance(&id).await.unwrap();
    assert!(reading.fencing_token > fence, "{reading:?} after {fence}");
    let written = bank.write(&[(&id, balance + 10, fence)]).await;
    assert!(matches!(written, Err(BankError::Stale)), "{written:?}");
    assert_eq!(bank.balance(&id).await.unwrap().balance, 0);
}

#[tokio::test(start_paused = true)]
async fn a_write_after_a_newer_read_is_refused_in_memory() {
    a_write_after_a_newer_read_is_refused(config(Backend::Memory), Stale::LeaseRunsOut).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_after_a_newer_read_is_refused_on_redis() {
    let redis = RedisServer::spawn();
    let config = config(Backend::Redis(redis.url()));
    a_write_after_a_newer_read_is_refused(config, Stale::LeaseRunsOut).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_after_a_newer_read_is_refused_on_postgres() {
    let postgres = PostgresServer::spawn();
    let config = config(Backend::Postgres(postgres.url()));
    a_write_after_a_newer_read_is_refused(config, Stale::ForcedOpen).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_loses_nothing_with_locks_on() {
    let redis = RedisServer::spawn();
    let postgres = PostgresServer::spawn();
    for backend in [
        Backend::Memory,
        Backend::Redis(redis.url()),
        Backend::Postgres(postgres.url()),
    ] {
        let run = demo::run(&config(backend.clone()), true, 200, 16)
            .await
            .unwrap();
        assert_eq!((run.failed, run.expected), (0, 200), "{backend}: {run:?}");
        assert_eq!(run.lost(), 0, "{backend}: {run:?}");
    }
}

/// `method /admin/locks/{key}` with `token` as the bearer token, if any.
async fn admin_call(
    http: &Http,
    method: Method,
    key: &str,
    token: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = http.request(method, &format!("/admin/locks/{key}"));
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request.body(Default::default()).unwrap();
    let response = http.send_request(request).await.unwrap();
    let json = serde_json::from_slice(response.body()).unwrap();
    (response.status(), json)
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_endpoints_are_off_without_a_token() {
    let (http, _bank) = serve(config(Backend::Memory)).await;
    for method in [Method::GET, Method::DELETE] {
        let (status, body) =
            admin_call(&http, method.clone(), "balance:alice", Some("guess")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method}: {body}");
    }
}

/// `GET /admin/locks/{key}` with the token: a free lock, then a held one with its holder
/// and the deposit that waits for it, as a write hold. Refused without the token.
async fn an_admin_sees_who_holds_a_lock(backend: Backend) {
    let (http, bank) = serve(Config {
        admin_token: Some("s3cret".into()),
        ..config(backend)
    })
    .await;
    let key = lock_key(&AccountId::parse("alice").unwrap());
    let (status, body) = admin_call(&http, Method::GET, &key, Some("s3cret")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "key": key, "held": false }));

    let write = LockOptions::new().kind(LockKind::Write);
    let held = bank.locker().lock_with(&key, write).await.unwrap();
    for token in [None, Some("wrong")] {
        let (status, body) = admin_call(&http, Method::GET, &key, token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}: {body}");
    }
    let update = tokio::spawn({
        let http = http.clone();
        async move { deposit(&http, "alice", 5).await }
    });
    eventually(DEADLINE, "the deposit to wait", || async {
        let (_, body) = admin_call(&http, Method::GET, &key, Some("s3cret")).await;
        body["waiting"] == 1
    })
    .await;
    let (status, body) = admin_call(&http, Method::GET, &key, Some("s3cret")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["held"], &body["kind"]),
        (&json!(true), &json!("write")),
        "{body}"
    );
    let [holder] = body["holders"].as_array().unwrap().as_slice() else {
        panic!("one writer: {body}");
    };
    assert_eq!(holder["token_prefix"].as_str().unwrap().len(), 8, "{body}");
    let left = holder["lease_left_ms"].as_u64().unwrap();
    assert!(
        left > 0 && u128::from(left) <= lock_core::DEFAULT_LEASE.as_millis(),
        "{body}"
    );
    assert_eq!(holder["fencing_token"], held.fencing_token(), "{body}");

    held.release().await.unwrap();
    let (status, body) = update.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = admin_call(&http, Method::GET, "a%0Ab", Some("s3cret")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_admin_sees_who_holds_a_lock_in_memory() {
    an_admin_sees_who_holds_a_lock(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_admin_sees_who_holds_a_lock_on_redis() {
    let redis = RedisServer::spawn();
    an_admin_sees_who_holds_a_lock(Backend::Redis(redis.url())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_admin_forces_a_stuck_lock_open_with_the_token() {
    let (http, bank) = serve(Config {
        admin_token: Some("s3cret".into()),
        ..config(Backend::Memory)
    })
    .await;
    let key = lock_key(&AccountId::parse("alice").unwrap());
    // Renewed every 100 ms, so that it learns of the loss soon.
    let write = LockOptions::new()
        .kind(LockKind::Write)
        .lease(Duration::from_millis(300));
    let stuck = bank.locker().lock_with(&key, write).await.unwrap();

    for token in [None, Some("wrong"), Some("s3cre"), Some("s3cretx")] {
        let (status, body) = admin_call(&http, Method::DELETE, &key, token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}: {body}");
        assert!(!body.to_string().contains("s3cret"), "{body}");
    }
    assert!(!stuck.is_lost(), "a refused call forced the lock open");

    let (status, body) = admin_call(&http, Method::DELETE, &key, Some("s3cret")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["was_held"], true, "{body}");
    // The account takes deposits again, and the stuck holder learns its lock is gone.
    let (status, body) = call(
        &http,
        Method::POST,
        "/accounts/alice/deposit",
        Some(r#"{"amount": 5}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    tokio::time::timeout(DEADLINE, stuck.lost())
        .await
        .expect("the stuck holder never learnt of it");

    let (status, body) = admin_call(&http, Method::DELETE, &key, Some("s3cret")).await;
    assert_eq!(
        (status, &body["was_held"]),
        (StatusCode::OK, &Value::Bool(false)),
        "{body}"
    );
    let (status, body) = admin_call(&http, Method::DELETE, "a%0Ab", Some("s3cret")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

/// The settings that the variables `vars` give.
fn config_of(vars: &[(&str, &str)]) -> Result<Config, String> {
    Config::from_vars(|name| {
        let found = vars.iter().find(|(var, _)| *var == name);
        found.map(|(_, value)| (*value).to_owned())
    })
}

#[test]
fn lock_url_and_the_balances_url_pick_their_stores_independently() {
    let redis = "redis://:pw@127.0.0.1:1/";
    let postgres = "postgres://bank:pw@127.0.0.1:2/bank";
    let zookeeper = "zookeeper://127.0.0.1:3/bank";
    let cases = [
        (vec![], "memory", "memory://"),
        (vec![("REDIS_URL", redis)], "redis", redis),
        (vec![("DATABASE_URL", postgres)], "postgres", postgres),
        (
            vec![("DATABASE_URL", postgres), ("LOCK_URL", redis)],
            "postgres",
            redis,
        ),
        (
            vec![("DATABASE_URL", postgres), ("LOCK_URL", zookeeper)],
            "postgres",
            zookeeper,
        ),
        (
            vec![("DATABASE_URL", postgres), ("LOCK_URL", "memory://")],
            "postgres",
            "memory://",
        ),
        (
            vec![("REDIS_URL", redis), ("LOCK_URL", zookeeper)],
            "redis",
            zookeeper,
        ),
        (vec![("LOCK_URL", redis)], "memory", redis),
    ];
    for (vars, balances, locks) in cases {
        let config = config_of(&vars).unwrap();
        let stores = config.stores();
        assert!(
            config.backend.to_string().starts_with(balances),
            "{vars:?}: balances in {}",
            config.backend
        );
        assert_eq!(config.lock_url(), locks, "{vars:?}");
        assert!(!stores.contains("pw"), "{vars:?}: {stores}");
    }
    let split = config_of(&[("DATABASE_URL", postgres), ("LOCK_URL", redis)]).unwrap();
    assert_eq!(
        split.stores(),
        "balances in postgres at 127.0.0.1:2/bank, locks in redis at 127.0.0.1:1/"
    );

    let both = config_of(&[("REDIS_URL", redis), ("DATABASE_URL", postgres)]).unwrap_err();
    assert!(both.contains("LOCK_URL"), "{both}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_url_without_a_store_is_refused_at_start() {
    for (url, reason) in [
        ("etcd://127.0.0.1:2379", "etcd"),
        ("mysql://127.0.0.1:3306/bank", "mysql"),
        ("127.0.0.1:6379", "scheme"),
    ] {
        let config = Config {
            lock_url: Some(url.to_owned()),
            ..config(Backend::Memory)
        };
        let refused = Bank::open(&config).await.unwrap_err();
        assert!(refused.contains(reason), "{url}: {refused}");
    }
}

/// Locks in the store at `lock_url`, balances in `backend`: a lock held there, by anyone,
/// keeps every request for its account waiting, then `423` (with `Retry-After` where the
/// store knows the holder's lease); once it is given back, they go through.
async fn the_locks_live_at_the_lock_url(lock_url: String, backend: Backend) {
    let (http, _bank) = serve(Config {
        lock_url: Some(lock_url.clone()),
        wait: Duration::from_millis(100),
        ..config(backend)
    })
    .await;
    assert_eq!(deposit(&http, "alice", 5).await.0, StatusCode::OK);
    let elsewhere = Locker::connect(&lock_url).await.unwrap();
    let key = lock_key(&AccountId::parse("alice").unwrap());
    let held = elsewhere.write(&key).await.unwrap();
    let transfer = r#"{"from": "alice", "to": "bob", "amount": 2}"#;
    let requests = on_alice(transfer);
    for (method, path, body) in &requests {
        let (status, reply) = call(&http, method.clone(), path, *body).await;
        let what = format!("{method} {path} held at {lock_url}");
        assert_error(status, &reply, StatusCode::LOCKED, &what);
    }
    held.release().await.unwrap();
    let (status, body) = call(&http, Method::POST, "/transfers", Some(transfer)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (balance(&http, "alice").await, balance(&http, "bob").await),
        (3, 2)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_in_redis_with_balances_in_postgres() {
    let (redis, postgres) = (RedisServer::spawn(), PostgresServer::spawn());
    the_locks_live_at_the_lock_url(redis.url(), Backend::Postgres(postgres.url())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_in_zookeeper_with_balances_in_postgres() {
    let (zookeeper, postgres) = (ZooKeeperServer::spawn(), PostgresServer::spawn());
    let lock_url = format!("zookeeper://{}", zookeeper.connect_string());
    the_locks_live_at_the_lock_url(lock_url, Backend::Postgres(postgres.url())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_in_zookeeper_with_balances_in_redis() {
    let (zookeeper, redis) = (ZooKeeperServer::spawn(), RedisServer::spawn());
    let lock_url = format!("zookeeper://{}", zookeeper.connect_string());
    the_locks_live_at_the_lock_url(lock_url, Backend::Redis(redis.url())).await;
}

/// PostgreSQL's fenced write (`.. WHERE fence <= $token`) refuses a holder of a Redis
/// lock whose lease ran out, as it does a holder of its own advisory lock.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_holder_cannot_lose_a_deposit_with_locks_in_redis_and_balances_in_postgres() {
    let (redis, postgres) = (RedisServer::spawn(), PostgresServer::spawn());
    let config = Config {
        lock_url: Some(redis.url()),
        ..config(Backend::Postgres(postgres.url()))
    };
    a_stale_holder_cannot_lose_a_deposit(config, Stale::LeaseRunsOut).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_loses_nothing_with_the_locks_apart_from_the_balances() {
    let redis = RedisServer::spawn();
    for lock_url in [redis.url(), "memory://".to_owned()] {
        let postgres = PostgresServer::spawn();
        let config = Config {
            lock_url: Some(lock_url),
            ..config(Backend::Postgres(postgres.url()))
        };
        let run = demo::run(&config, true, 200, 16).await.unwrap();
        let stores = config.stores();
        assert_eq!((run.failed, run.expected), (0, 200), "{stores}: {run:?}");
        assert_eq!(run.lost(), 0, "{stores}: {run:?}");
    }
}

/// `GET /healthz` answers `200` while both stores answer, and `503` naming the one that
/// does not, then both.
#[tokio::test(flavor = "multi_thread")]
async fn healthz_names_the_store_that_does_not_answer() {
    let (mut redis, mut postgres) = (RedisServer::spawn(), PostgresServer::spawn());
    let (http, _bank) = serve(Config {
        lock_url: Some(redis.url()),
        ..config(Backend::Postgres(postgres.url()))
    })
    .await;
    let (status, body) = call(&http, Method::GET, "/healthz", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "locks": "ok", "balances": "ok" }));

    postgres.kill();
    let (status, body) = call(&http, Method::GET, "/healthz", None).await;
    assert_error(
        status,
        &body,
        StatusCode::SERVICE_UNAVAILABLE,
        "postgres down",
    );
    assert_eq!(body["error"], "the balance store does not answer", "{body}");
    assert_eq!(
        (&body["locks"], &body["balances"]),
        (&json!("ok"), &json!("unavailable"))
    );

    redis.kill();
    let (status, body) = call(&http, Method::GET, "/healthz", None).await;
    assert_error(status, &body, StatusCode::SERVICE_UNAVAILABLE, "both down");
    assert_eq!(
        body["error"], "the lock store and the balance store do not answer",
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn healthz_names_the_lock_store_when_only_it_is_down() {
    let mut redis = RedisServer::spawn();
    let (http, _bank) = serve(Config {
        lock_url: Some(redis.url()),
        ..config(Backend::Memory)
    })
    .await;
    redis.kill();
    let (status, body) = call(&http, Method::GET, "/healthz", None).await;
    assert_error(status, &body, StatusCode::SERVICE_UNAVAILABLE, "redis down");
    assert_eq!(body["error"], "the lock store does not answer", "{body}");
    assert_eq!(body["balances"], "ok", "{body}");
}

/// `GET /metrics`: Prometheus text with lock-core's lock metrics, labelled by the
/// templates the locks are named from, never by an account.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_show_the_account_locks_in_prometheus_text() {
    let (http, _bank) = serve(config(Backend::Memory)).await;
    assert_eq!(deposit(&http, "metered", 3).await.0, StatusCode::OK);
    let transfer = r#"{"from": "metered", "to": "bob", "amount": 1}"#;
    let (status, body) = call(&http, Method::POST, "/transfers", Some(transfer)).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let response = http.send(Method::GET, "/metrics", None).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()[header::CONTENT_TYPE].to_str().unwrap();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = std::str::from_utf8(response.body()).unwrap();
    for expected in [
        "# TYPE lock_acquisitions_total counter",
        r#"lock_acquisitions_total{kind="write",lock="balance:{id}"}"#,
        r#"lock_acquisitions_total{kind="write",lock="balance:{from}, balance:{to}"}"#,
        "lock_wait_seconds",
    ] {
        assert!(text.contains(expected), "no {expected:?} in:\n{text}");
    }
    assert!(!text.contains("metered"), "an account in a label:\n{text}");
}

/// The account routes write with the fencing token of the lock the layer took: after a
/// deposit, a holder of an earlier hold of the same lock is refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_layer_fences_the_account_routes_with_its_token() {
    let (http, bank) = serve(config(Backend::Memory)).await;
    let id = AccountId::parse("alice").unwrap();
    let earlier = bank.locker().write(&lock_key(&id)).await.unwrap();
    let fence = earlier.fencing_token();
    earlier.release().await.unwrap();
    assert_eq!(deposit(&http, "alice", 5).await.0, StatusCode::OK);
    let written = bank.write(&[(&id, 0, fence)]).await;
    assert!(matches!(written, Err(BankError::Stale)), "{written:?}");
    assert_eq!(balance(&http, "alice").await, 5);
}

/// Shared balances record the lock store that fences them: a replica restarted with the
/// same one starts, one with locks elsewhere is refused, saying where they must be.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_with_locks_elsewhere_than_the_balances_record_is_refused() {
    let (redis, other_redis, postgres) = (
        RedisServer::spawn(),
        RedisServer::spawn(),
        PostgresServer::spawn(),
    );
    let with_locks = |lock_url: Option<String>, backend: Backend| Config {
        lock_url,
        ..config(backend)
    };
    let on_postgres = Backend::Postgres(postgres.url());
    let on_redis = Backend::Redis(redis.url());
    let cases = [
        (on_postgres.clone(), Some(redis.url()), None),
        (on_redis.clone(), None, Some(other_redis.url())),
    ];
    for (balances, first, other) in cases {
        Bank::open(&with_locks(first.clone(), balances.clone()))
            .await
            .unwrap();
        Bank::open(&with_locks(first.clone(), balances.clone()))
            .await
            .expect("a restart with the same lock store");
        let refused = Bank::open(&with_locks(other, balances.clone()))
            .await
            .unwrap_err();
        let recorded = with_locks(first, balances).lock_store();
        assert!(
            refused.contains(&format!("fenced by the locks in {recorded}")),
            "{refused}"
        );
    }
    let in_memory = Backend::Memory;
    Bank::open(&with_locks(Some(redis.url()), in_memory.clone()))
        .await
        .unwrap();
    Bank::open(&with_locks(None, in_memory))
        .await
        .expect("balances in memory are this process's alone");
}

/// Two replicas of one bank in this process, as two processes on one Redis are: each with
/// a `Locker` of its own on one in-memory lock store, and one in-memory balances' store;
/// `a` and `b` by their replica ids. Their auditors are not started.
async fn two_replicas_in_memory(config: &Config) -> [Bank; 2] {
    let locks = Arc::new(MemoryStore::new());
    let balances = Store::in_memory();
    let mut replicas = Vec::new();
    for id in ["a", "b"] {
        let locker = Locker::builder()
            .store(locks.clone())
            .build()
            .await
            .unwrap();
        let config = Config {
            replica_id: id.to_owned(),
            ..config.clone()
        };
        replicas.push(Bank::on(locker, balances.clone(), &config).await.unwrap());
    }
    replicas.try_into().unwrap()
}

/// A deposit to `id` under the write side of its lock, as the account route makes it.
async fn deposit_locked(bank: &Bank, id: &str, amount: i64) {
    let id = AccountId::parse(id).unwrap();
    let guard = bank.locker().write(&lock_key(&id)).await.unwrap();
    let amount = crate::service::Amount::parse(amount).unwrap();
    bank.deposit(&id, amount, guard.fencing_token())
        .await
        .unwrap();
    guard.release().await.unwrap();
}

/// What `GET /audit` answers on `bank`, asked of its handler.
async fn audit_report(bank: &Bank) -> Value {
    let Json(report) = audit::report(State(bank.clone())).await.unwrap();
    serde_json::to_value(report).unwrap()
}

/// The replica that has audited, and the one that has not, once one has.
async fn until_one_audits(replicas: &[Bank; 2]) -> (&Bank, &Bank) {
    eventually(DEADLINE, "a replica to audit", || async {
        replicas.iter().any(|bank| bank.auditor().last().is_some())
    })
    .await;
    let [a, b] = replicas;
    if a.auditor().last().is_some() {
        (a, b)
    } else {
        (b, a)
    }
}

/// Two replicas on one store: exactly one audits, now and at every interval after, and
/// both name it as the leader; once it stops, the other takes over and audits, with a
/// greater fencing token.
#[tokio::test(start_paused = true)]
async fn one_replica_audits_and_the_other_takes_over_when_it_stops() {
    let interval = Duration::from_secs(10);
    let replicas = two_replicas_in_memory(&Config {
        audit_interval: interval,
        ..config(Backend::Memory)
    })
    .await;
    deposit_locked(&replicas[0], "alice", 70).await;
    deposit_locked(&replicas[1], "bob", 30).await;
    let mut auditing: Vec<_> = replicas
        .iter()
        .map(|bank| bank.auditor().spawn(bank.store().clone()))
        .collect();

    let (leader, follower) = until_one_audits(&replicas).await;
    let audit = leader.auditor().last().unwrap();
    assert_eq!((audit.total, audit.accounts), (100, 2), "{audit:?}");
    assert_eq!(audit.leader, leader.auditor().replica_id());
    assert!(audit.as_of_unix_ms > 0, "{audit:?}");
    let expected_leader = json!({
        "id": leader.auditor().replica_id(),
        "fencing_token": audit.fencing_token,
    });
    for (bank, leading) in [(leader, true), (follower, false)] {
        let report = audit_report(bank).await;
        assert_eq!(report["replica"], bank.auditor().replica_id(), "{report}");
        assert_eq!(report["leader"], expected_leader, "{report}");
        assert_eq!(report["leading"], leading, "{report}");
    }
    assert_eq!(audit_report(follower).await["last_audit"], Value::Null);

    // The leader audits again at the next interval, and sees the new deposit; the
    // follower, intervals later, still has not audited.
    deposit_locked(follower, "carol", 5).await;
    eventually(DEADLINE, "the leader to audit again", || async {
        leader.auditor().last().unwrap().total == 105
    })
    .await;
    tokio::time::sleep(interval * 3).await;
    assert_eq!(follower.auditor().last(), None);
    assert!(!follower.auditor().leading());

    // The leader stops, as its process would: its leadership is given back.
    let leader_index = replicas
        .iter()
        .position(|b| std::ptr::eq(b, leader))
        .unwrap();
    let stopped = auditing.swap_remove(leader_index);
    stopped.abort();
    assert!(stopped.await.unwrap_err().is_cancelled());
    assert!(!leader.auditor().leading());
    eventually(DEADLINE, "the other replica to take over", || async {
        follower.auditor().last().is_some()
    })
    .await;
    let taken_over = follower.auditor().last().unwrap();
    assert_eq!(taken_over.leader, follower.auditor().replica_id());
    assert_eq!((taken_over.total, taken_over.accounts), (105, 3));
    assert!(
        taken_over.fencing_token > audit.fencing_token,
        "{taken_over:?} after {audit:?}"
    );
    let expected_leader = json!({
        "id": follower.auditor().replica_id(),
        "fencing_token": taken_over.fencing_token,
    });
    for bank in [leader, follower] {
        let report = audit_report(bank).await;
        assert_eq!(report["leader"], expected_leader, "{report}");
    }
    let report = audit_report(leader).await;
    assert_eq!(report["leading"], false, "{report}");
    assert_eq!(
        report["last_audit"]["leader"],
        leader.auditor().replica_id(),
        "a stopped replica keeps its last audit: {report}"
    );
}

/// A leader whose leadership is lost (an operator forces the election's lock open) stops
/// auditing at once, and the other replica takes over; the deposed one campaigns again,
/// and leads once the new leader stops.
#[tokio::test(start_paused = true)]
async fn a_deposed_leader_stops_auditing_and_campaigns_again() {
    let interval = Duration::from_secs(10);
    let replicas = two_replicas_in_memory(&Config {
        audit_interval: interval,
        ..config(Backend::Memory)
    })
    .await;
    deposit_locked(&replicas[0], "alice", 7).await;
    let auditing: Vec<_> = replicas
        .iter()
        .map(|bank| bank.auditor().spawn(bank.store().clone()))
        .collect();
    let (deposed, other) = until_one_audits(&replicas).await;
    let first = deposed.auditor().last().unwrap();

    assert!(deposed.locker().force_unlock(ELECTION).await.unwrap());
    eventually(
        DEADLINE,
        "the other to lead, and the deposed to know",
        || async { other.auditor().last().is_some() && !deposed.auditor().leading() },
    )
    .await;
    let second = other.auditor().last().unwrap();
    assert!(second.fencing_token > first.fencing_token, "{second:?}");
    let report = audit_report(deposed).await;
    assert_eq!(
        report["leader"]["id"],
        other.auditor().replica_id(),
        "{report}"
    );
    assert_eq!(report["leading"], false, "{report}");
    // Its audits were cancelled with its leadership: none since, intervals later.
    let last = deposed.auditor().last();
    tokio::time::sleep(interval * 3).await;
    assert_eq!(deposed.auditor().last(), last);
    assert!(!deposed.auditor().leading());

    let other_index = replicas
        .iter()
        .position(|b| std::ptr::eq(b, other))
        .unwrap();
    auditing[other_index].abort();
    eventually(DEADLINE, "the deposed replica to lead again", || async {
        deposed
            .auditor()
            .last()
            .is_some_and(|audit| audit.fencing_token > second.fencing_token)
    })
    .await;
    assert!(deposed.auditor().leading());
}

#[test]
fn the_audit_settings_default_and_bad_ones_are_refused_at_start() {
    let defaults = config_of(&[("HOSTNAME", "web-1")]).unwrap();
    assert_eq!(defaults.audit_interval, Duration::from_secs(10));
    assert_eq!(defaults.replica_id, format!("web-1-{}", std::process::id()));
    let set = config_of(&[
        ("BANK_AUDIT_INTERVAL_MS", "250"),
        ("BANK_REPLICA_ID", "east-2"),
    ])
    .unwrap();
    assert_eq!(set.audit_interval, Duration::from_millis(250));
    assert_eq!(set.replica_id, "east-2");
    assert!(!config_of(&[]).unwrap().replica_id.is_empty());

    let too_long = "r".repeat(256);
    for (var, value, reason) in [
        ("BANK_AUDIT_INTERVAL_MS", "0", "from 1"),
        ("BANK_AUDIT_INTERVAL_MS", "ten", "\"ten\""),
        ("BANK_AUDIT_INTERVAL_MS", "-5", "\"-5\""),
        ("BANK_AUDIT_INTERVAL_MS", "1.5", "\"1.5\""),
        ("BANK_REPLICA_ID", too_long.as_str(), "at most 255 bytes"),
    ] {
        let refused = config_of(&[(var, value)]).unwrap_err();
        assert!(
            refused.starts_with(var) && refused.contains(reason),
            "{var}={value}: {refused}"
        );
    }
    assert!(config_of(&[("BANK_REPLICA_ID", &"r".repeat(255))]).is_ok());
}

/// `Store::totals` adds up every account's balance: none at first, then every account
/// written or read, each once.
async fn the_store_totals_every_balance(store: &Store) {
    let zero = store.totals().await.unwrap();
    assert_eq!((zero.accounts, zero.total), (0, 0));
    let writes = [("alice", i64::MAX, 1), ("bob", 5, 1), ("carol", -2, 1)];
    let writes = writes.map(|(id, balance, fence)| Write { id, balance, fence });
    assert!(store.write(&writes).await.unwrap());
    assert_eq!(store.balance("dave", NO_FENCE).await.unwrap(), 0);
    let totals = store.totals().await.unwrap();
    assert_eq!(totals.accounts, 4);
    assert_eq!(
        totals.total,
        i128::from(i64::MAX) + 3,
        "wider than a balance"
    );
}

#[tokio::test]
async fn the_store_totals_every_balance_in_memory() {
    the_store_totals_every_balance(&Store::in_memory()).await;
}

#[tokio::test]
async fn the_store_totals_every_balance_on_redis() {
    let redis = RedisServer::spawn();
    the_store_totals_every_balance(&Store::redis(&redis.url()).await.unwrap()).await;
}

#[tokio::test]
async fn the_store_totals_every_balance_on_postgres() {
    let postgres = PostgresServer::spawn();
    let store = Store::postgres(&postgres.url(), lock_core::DEFAULT_LEASE)
        .await
        .unwrap();
    the_store_totals_every_balance(&store).await;
}

/// `GET /audit` over HTTP on both of two replicas sharing `backend`, as two processes
/// share it: both name the one that audits, whose audit the other does not have; once it
/// stops, the other names itself and audits.
async fn two_replicas_agree_on_who_audits(backend: Backend) {
    let mut replicas = Vec::new();
    for id in ["a", "b"] {
        let (http, bank) = serve(Config {
            audit_interval: Duration::from_millis(50),
            replica_id: id.to_owned(),
            ..config(backend.clone())
        })
        .await;
        replicas.push((http, bank));
    }
    let (status, _) = deposit(&replicas[0].0, "alice", 12).await;
    assert_eq!(status, StatusCode::OK);
    let replicas: Vec<_> = replicas
        .into_iter()
        .map(|(http, bank)| (http, bank.auditor().spawn(bank.store().clone())))
        .collect();
    let report = |http: Http| async move {
        let (status, body) = call(&http, Method::GET, "/audit", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    };
    eventually(DEADLINE, "a replica to audit", || async {
        for (http, _) in &replicas {
            if !report(http.clone()).await["last_audit"].is_null() {
                return true;
            }
        }
        false
    })
    .await;
    let reports = [
        report(replicas[0].0.clone()).await,
        report(replicas[1].0.clone()).await,
    ];
    let leader = reports.iter().position(|r| r["leading"] == true).unwrap();
    let (led, followed) = (&reports[leader], &reports[1 - leader]);
    let audit = &led["last_audit"];
    assert_eq!(
        (&audit["total"], &audit["accounts"], &audit["leader"]),
        (&json!(12), &json!(1), &led["replica"]),
        "{led}"
    );
    let expected_leader = json!({
        "id": led["replica"],
        "fencing_token": audit["fencing_token"],
    });
    assert_eq!(led["leader"], expected_leader, "{led}");
    assert_eq!(followed["leader"], expected_leader, "{followed}");
    assert_eq!(
        (&followed["leading"], &followed["last_audit"]),
        (&json!(false), &Value::Null),
        "{followed}"
    );

    let (follower, _) = &replicas[1 - leader];
    replicas[leader].1.abort();
    eventually(DEADLINE, "the other replica to take over", || async {
        let now = report(follower.clone()).await;
        now["leading"] == true && now["leader"]["id"] == followed["replica"]
    })
    .await;
    let now = report(follower.clone()).await;
    // it audits at once on taking over, but the answer may have come in between
    eventually(DEADLINE, "the new leader to audit", || async {
        !report(follower.clone()).await["last_audit"].is_null()
    })
    .await;
    let taken_over = report(follower.clone()).await;
    let audit_token = audit["fencing_token"].as_u64().unwrap();
    assert!(
        now["leader"]["fencing_token"].as_u64().unwrap() > audit_token,
        "{now}"
    );
    assert_eq!(
        taken_over["last_audit"]["leader"], followed["replica"],
        "{taken_over}"
    );
    assert_eq!(taken_over["last_audit"]["total"], 12, "{taken_over}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_agree_on_who_audits_on_redis() {
    let redis = RedisServer::spawn();
    two_replicas_agree_on_who_audits(Backend::Redis(redis.url())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_agree_on_who_audits_on_postgres() {
    let postgres = PostgresServer::spawn();
    two_replicas_agree_on_who_audits(Backend::Postgres(postgres.url())).await;
}
