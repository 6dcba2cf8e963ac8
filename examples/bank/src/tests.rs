//! In-process tests: the endpoints over real HTTP on loopback, the store's fencing check,
//! and the demo's locked run. Processes and replicas: `tests/replicas.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode, header};
use axum::response::IntoResponse;
use lock_core::LockOptions;
use lock_tests::RedisServer;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::Barrier;

use crate::demo::{self, Http};
use crate::service::{AccountId, Bank, BankError};
use crate::store::{Read, Store, Write};
use crate::{Config, app};

fn config(redis_url: Option<String>) -> Config {
    Config {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        redis_url,
        lease: lock_core::DEFAULT_LEASE,
        wait: Duration::from_secs(5),
        delay: Duration::from_millis(1),
        locks: true,
    }
}

/// Serves a bank on a free port until the test's runtime ends.
async fn serve(config: Config) -> (Http, Bank) {
    let bank = Bank::open(&config).await.unwrap();
    let listener = TcpListener::bind(config.addr).await.unwrap();
    let http = Http::new(listener.local_addr().unwrap());
    let app = app::router(bank.clone(), &config);
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

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_400_with_a_reason_and_changes_nothing() {
    let (http, _bank) = serve(config(None)).await;
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
    let (http, _bank) = serve(config(None)).await;
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
    let (http, _bank) = serve(config(None)).await;
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

#[tokio::test(flavor = "multi_thread")]
async fn a_held_account_is_423_with_retry_after() {
    let (http, bank) = serve(Config {
        wait: Duration::from_millis(100),
        ..config(None)
    })
    .await;
    let held = bank.locker().lock("balance:alice").await.unwrap();

    let transfer = r#"{"from": "bob", "to": "alice", "amount": 1}"#;
    let (path, body) = ("/accounts/alice/deposit", r#"{"amount": 1}"#);
    for (path, body) in [(path, body), ("/transfers", transfer)] {
        let response = http.send(Method::POST, path, Some(body)).await.unwrap();
        let reply: Value = serde_json::from_slice(response.body()).unwrap();
        assert_error(response.status(), &reply, StatusCode::LOCKED, path);
        let retry_after = response.headers()[header::RETRY_AFTER].to_str().unwrap();
        assert!(retry_after.parse::<u64>().unwrap() >= 1, "{retry_after}");
    }

    held.release().await.unwrap();
    assert_eq!(deposit(&http, "alice", 1).await.0, StatusCode::OK);
    assert_eq!(balance(&http, "alice").await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_down_is_503() {
    let mut redis = RedisServer::spawn();
    let (http, _bank) = serve(config(Some(redis.url()))).await;
    assert_eq!(deposit(&http, "alice", 5).await.0, StatusCode::OK);
    assert_eq!(balance(&http, "alice").await, 5);

    redis.kill();
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
    ] {
        let (status, reply) = call(&http, method, path, body).await;
        assert_error(status, &reply, StatusCode::SERVICE_UNAVAILABLE, path);
    }
}

/// Fencing: a read or a write under an older token than the account has seen changes
/// nothing, and a read records its token.
async fn check_fencing(store: &Store) {
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
            store.balance("a").await.unwrap(),
            store.balance("b").await.unwrap()
        ),
        (30, 0)
    );
    // tokens compare exactly, beyond a double's 53 bits
    assert!(store.write(&[write("c", 1, u64::MAX - 1)]).await.unwrap());
    assert!(!store.write(&[write("c", 2, u64::MAX - 2)]).await.unwrap());
    assert!(store.write(&[write("c", 3, u64::MAX)]).await.unwrap());
    assert_eq!(store.balance("c").await.unwrap(), 3);

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
}

#[tokio::test]
async fn the_store_refuses_stale_fencing_tokens_in_memory() {
    check_fencing(&Store::in_memory()).await;
}

#[tokio::test]
async fn the_store_refuses_stale_fencing_tokens_on_redis() {
    let redis = RedisServer::spawn();
    check_fencing(&Store::redis(&redis.url()).await.unwrap()).await;
}

/// The lease the first holder takes in [`a_stale_holder_cannot_lose_a_deposit`].
const SHORT_LEASE: Duration = Duration::from_millis(200);

/// Two deposits to one account, by holders A and B of its lock, in this order: A reads
/// the balance, then stops past its lease (a held guard whose lease nothing renews); B
/// takes the lock and reads the balance; A writes its result; B writes its own. A is
/// refused (its request answers 409), and the balance holds every deposit acknowledged.
async fn a_stale_holder_cannot_lose_a_deposit(config: Config) {
    let bank = Bank::open(&config).await.unwrap();
    let id = AccountId::parse("alice").unwrap();
    let key = format!("balance:{id}");
    let (a_deposit, b_deposit) = (10, 1);
    // A and B each wait here for the other's step.
    let steps = Arc::new(Barrier::new(2));
    let a = tokio::spawn({
        let (bank, id, key, steps) = (bank.clone(), id.clone(), key.clone(), steps.clone());
        async move {
            let opts = LockOptions::new().lease(SHORT_LEASE).watchdog(false);
            let guard = bank.locker().lock_with(&key, opts).await.unwrap();
            let fence = guard.fencing_token();
            let [balance] = bank.read([(&id, fence)]).await.unwrap(); // 1
            guard.lost().await;
            steps.wait().await; // A's lease ran out
            steps.wait().await; // B has read
            let written = bank.write(&[(&id, balance + a_deposit, fence)]).await; // 3
            steps.wait().await; // A is done
            written
        }
    });
    steps.wait().await;
    let guard = bank.locker().lock(&key).await.unwrap();
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
        bank.balance(&id).await.unwrap(),
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
    a_stale_holder_cannot_lose_a_deposit(config(None)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_holder_cannot_lose_a_deposit_on_redis() {
    let redis = RedisServer::spawn();
    a_stale_holder_cannot_lose_a_deposit(config(Some(redis.url()))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_loses_nothing_with_locks_on() {
    let redis = RedisServer::spawn();
    for url in [None, Some(redis.url())] {
        let run = demo::run(&config(url.clone()), true, 200, 16)
            .await
            .unwrap();
        assert_eq!((run.failed, run.expected), (0, 200), "{url:?}: {run:?}");
        assert_eq!(run.lost(), 0, "{url:?}: {run:?}");
    }
}
