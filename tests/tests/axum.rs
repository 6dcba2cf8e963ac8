//! lock-axum end to end: a real axum server on a loopback port, a real HTTP client (hyper),
//! and a real `redis-server` from the harness.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::{Future, pending};
use std::io::Write;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::routing::{get, post};
use axum::{Router, response::IntoResponse};
use http_body::Frame;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lock_axum::{HeldLock, LockLayer, LockRejection};
use lock_core::{LockKind, LockOptions, Locker};
use lock_tests::{RedisServer, TestServer, ValueExt, eventually};
use tokio::sync::{Barrier, mpsc};

/// The bound of every wait on a condition in this file.
const DEADLINE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// helpers

/// Serves `app` on a free loopback port until the test's runtime shuts down.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn connect(server: &RedisServer) -> Locker {
    Locker::builder()
        .url(&server.url())
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap()
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

async fn send(client: &HttpClient, req: Request<Empty<Bytes>>) -> Reply {
    let what = format!("{} {}", req.method(), req.uri());
    let exchange = async {
        let response = client.request(req).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    };
    tokio::time::timeout(DEADLINE, exchange)
        .await
        .unwrap_or_else(|_| panic!("no answer to {what} within {DEADLINE:?}"))
}

fn request(method: Method, addr: SocketAddr, path: &str) -> Request<Empty<Bytes>> {
    Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .body(Empty::new())
        .unwrap()
}

/// Checks that `reply` says to retry after 1 to `most` seconds.
fn assert_retry_after_within(reply: &Reply, most: u64) {
    let retry_after: u64 = reply.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (1..=most).contains(&retry_after),
        "Retry-After: {retry_after}"
    );
}

async fn post_to(client: &HttpClient, addr: SocketAddr, path: &str) -> Reply {
    send(client, request(Method::POST, addr, path)).await
}

/// Polls (one attempt each, ~5 ms apart) until `key` can be taken, up to `deadline`;
/// returns how long that took. The probe lock is released at once.
async fn wait_until_free(locker: &Locker, key: &str, deadline: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if locker.try_lock(key).await.unwrap().is_some() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < deadline,
            "lock {key:?} still held after {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether `key` is held by someone: one attempt from a task of its own, so the answer is
/// never a reentrant acquisition.
async fn is_held(locker: &Locker, key: &str) -> bool {
    let locker = locker.clone();
    let key = key.to_owned();
    tokio::spawn(async move { locker.try_lock(&key).await.unwrap().is_none() })
        .await
        .unwrap()
}

/// A "database" with the classic lost-update race: read, yield for a while, write back.
#[derive(Clone, Default)]
struct Bank {
    balances: Arc<Mutex<HashMap<u64, i64>>>,
    in_flight: Arc<Mutex<HashMap<u64, usize>>>,
    max_in_flight: Arc<Mutex<HashMap<u64, usize>>>,
    handler_runs: Arc<AtomicUsize>,
}

impl Bank {
    async fn deposit(&self, id: u64) -> i64 {
        self.handler_runs.fetch_add(1, Ordering::SeqCst);
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            let n = in_flight.entry(id).or_default();
            *n += 1;
            let mut max = self.max_in_flight.lock().unwrap();
            let m = max.entry(id).or_default();
            *m = (*m).max(*n);
        }
        let read = *self.balances.lock().unwrap().get(&id).unwrap_or(&0);
        // widen the read-modify-write window: without the lock, overlapping requests
        // would each write back `read + 1` and lose each other's updates
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.balances.lock().unwrap().insert(id, read + 1);
        *self.in_flight.lock().unwrap().get_mut(&id).unwrap() -= 1;
        read + 1
    }

    fn balance(&self, id: u64) -> i64 {
        *self.balances.lock().unwrap().get(&id).unwrap_or(&0)
    }

    fn max_in_flight(&self, id: u64) -> usize {
        *self.max_in_flight.lock().unwrap().get(&id).unwrap_or(&0)
    }

    fn runs(&self) -> usize {
        self.handler_runs.load(Ordering::SeqCst)
    }
}

async fn deposit(State(bank): State<Bank>, Path(id): Path<u64>) -> String {
    bank.deposit(id).await.to_string()
}

async fn show(Path(id): Path<u64>, lock: Option<Extension<HeldLock>>) -> String {
    match lock {
        Some(Extension(lock)) => format!("{id} locked as {}", lock.key()),
        None => format!("{id} unlocked"),
    }
}

async fn token(Extension(lock): Extension<HeldLock>) -> String {
    format!("{} {}", lock.key(), lock.fencing_token())
}

/// The bank app: `/accounts/{id}/deposit` (POST) and `/accounts/{id}` (GET, POST), locked
/// per account by `layer`.
fn bank_app(bank: Bank, layer: LockLayer) -> Router {
    Router::new()
        .route("/accounts/{id}/deposit", post(deposit))
        .route("/accounts/{id}", get(show).post(show))
        .route("/accounts/{id}/token", post(token))
        .route_layer(layer)
        .with_state(bank)
}

// ---------------------------------------------------------------------------------------
// serialization

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_posts_to_one_account_serialize() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let bank = Bank::default();
    let addr = serve(bank_app(
        bank.clone(),
        LockLayer::new(locker, "balance:{id}"),
    ))
    .await;
    deposit_concurrently(&bank, &[addr], 1, 25).await;
}

/// Sends `n` concurrent deposits to account `id`, spread over the `addrs` instances, and
/// checks that all succeeded, none was lost and no two ran at once.
async fn deposit_concurrently(bank: &Bank, addrs: &[SocketAddr], id: u64, n: usize) {
    let client = client();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (client, addr) = (client.clone(), addrs[i % addrs.len()]);
            let path = format!("/accounts/{id}/deposit");
            tokio::spawn(async move { post_to(&client, addr, &path).await })
        })
        .collect();
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    }
    let expected = i64::try_from(n).unwrap();
    assert_eq!(
        bank.balance(id),
        expected,
        "lost updates: {}",
        expected - bank.balance(id)
    );
    assert_eq!(
        bank.max_in_flight(id),
        1,
        "two deposits to one account overlapped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_accounts_proceed_in_parallel() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    // Each handler waits at a barrier for the other account's handler: both can only pass
    // if both run at the same time, i.e. the two locks did not serialize them.
    let barrier = Arc::new(Barrier::new(2));
    let app = Router::new()
        .route(
            "/accounts/{id}/deposit",
            post(|State(barrier): State<Arc<Barrier>>| async move {
                match tokio::time::timeout(DEADLINE, barrier.wait()).await {
                    Ok(_) => StatusCode::OK,
                    Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
                }
            }),
        )
        .route_layer(LockLayer::new(locker, "balance:{id}"))
        .with_state(barrier);
    let addr = serve(app).await;
    let client = client();
    let (a, b) = tokio::join!(
        post_to(&client, addr, "/accounts/1/deposit"),
        post_to(&client, addr, "/accounts/2/deposit"),
    );
    assert_eq!(a.status, StatusCode::OK, "{a:?}");
    assert_eq!(b.status, StatusCode::OK, "{b:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_app_instances_on_one_redis_exclude_each_other() {
    let redis = RedisServer::spawn();
    // two replicas: each its own Locker (own pool, own pub/sub connection), one "database"
    let bank = Bank::default();
    let first = serve(bank_app(
        bank.clone(),
        LockLayer::new(connect(&redis).await, "balance:{id}"),
    ))
    .await;
    let second = serve(bank_app(
        bank.clone(),
        LockLayer::new(connect(&redis).await, "balance:{id}"),
    ))
    .await;
    deposit_concurrently(&bank, &[first, second], 5, 24).await;
}

/// With `.fair(true)`, requests waiting for one account are served in the order they
/// came, whichever of two replicas they reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_layer_serves_requests_in_the_order_they_came() {
    let redis = RedisServer::spawn();
    let served = Arc::new(Mutex::new(Vec::new()));
    let app = |locker: Locker| {
        let served = served.clone();
        let record = move |Path((_, turn)): Path<(u64, usize)>| async move {
            served.lock().unwrap().push(turn);
            "ok"
        };
        Router::new()
            .route("/accounts/{id}/turn/{turn}", post(record))
            .route_layer(LockLayer::new(locker, "balance:{id}").fair(true))
    };
    let replicas = [
        serve(app(connect(&redis).await)).await,
        serve(app(connect(&redis).await)).await,
    ];
    let holder = connect(&redis)
        .await
        .lock_with("balance:3", LockOptions::new().fair(true))
        .await
        .unwrap();
    let in_line = || {
        let reply = redis.cmd(&["LLEN", "lock:{balance:3}:queue"]).unwrap();
        reply.as_int().unwrap()
    };
    let mut requests = Vec::new();
    for turn in 0..6 {
        let (client, addr) = (client(), replicas[turn % 2]);
        requests.push(tokio::spawn(async move {
            post_to(&client, addr, &format!("/accounts/3/turn/{turn}")).await
        }));
        lock_tests::eventually(DEADLINE, "the request to get in line", || async {
            in_line() == turn as i64 + 1
        })
        .await;
    }
    holder.release().await.unwrap();
    for r in requests {
        assert_eq!(r.await.unwrap().status, StatusCode::OK);
    }
    assert_eq!(*served.lock().unwrap(), (0..6).collect::<Vec<_>>());
}

// ---------------------------------------------------------------------------------------
// methods, contention, backend failure

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_passes_unlocked_by_default() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let layer = LockLayer::new(locker.clone(), "balance:{id}").wait(Duration::ZERO);
    let addr = serve(bank_app(Bank::default(), layer)).await;
    let client = client();

    // free: POST takes the lock, GET does not
    let reply = post_to(&client, addr, "/accounts/3").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "3 locked as balance:3")
    );
    let reply = send(&client, request(Method::GET, addr, "/accounts/3")).await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "3 unlocked")
    );

    // held elsewhere: GET still passes, POST is refused
    let _held = locker.lock("balance:3").await.unwrap();
    let reply = send(&client, request(Method::GET, addr, "/accounts/3")).await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "3 unlocked")
    );
    let reply = post_to(&client, addr, "/accounts/3").await;
    assert_eq!(reply.status, StatusCode::LOCKED, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_can_be_configured() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let layer = LockLayer::new(locker.clone(), "balance:{id}")
        .wait(Duration::ZERO)
        .methods([Method::GET]);
    let addr = serve(bank_app(Bank::default(), layer)).await;
    let client = client();
    let _held = locker.lock("balance:4").await.unwrap();
    let reply = send(&client, request(Method::GET, addr, "/accounts/4")).await;
    assert_eq!(reply.status, StatusCode::LOCKED, "{reply:?}");
    let reply = post_to(&client, addr, "/accounts/4").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "4 unlocked")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_gives_423_with_a_sane_retry_after() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let bank = Bank::default();
    let layer = LockLayer::new(locker.clone(), "balance:{id}").wait(Duration::from_millis(200));
    let addr = serve(bank_app(bank.clone(), layer)).await;
    let client = client();

    let lease = Duration::from_secs(8);
    let _held = locker
        .lock_with("balance:6", LockOptions::new().lease(lease))
        .await
        .unwrap();
    let reply = post_to(&client, addr, "/accounts/6/deposit").await;
    assert_eq!(reply.status, StatusCode::LOCKED, "{reply:?}");
    assert_retry_after_within(&reply, 8);
    assert_eq!(reply.headers["content-type"], "text/plain; charset=utf-8");
    assert!(!reply.body.is_empty());
    assert_eq!(bank.runs(), 0, "the handler ran without the lock");

    // wait(ZERO) rejects at once, with the same answer
    let layer = LockLayer::new(locker.clone(), "balance:{id}").wait(Duration::ZERO);
    let addr = serve(bank_app(bank.clone(), layer)).await;
    let reply = post_to(&client, addr, "/accounts/6/deposit").await;
    assert_eq!(reply.status, StatusCode::LOCKED, "{reply:?}");
    assert!(reply.headers.contains_key("retry-after"));
    assert_eq!(bank.runs(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_status_and_response_are_configurable() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let _held = locker.lock("balance:8").await.unwrap();
    let client = client();

    for status in [StatusCode::CONFLICT, StatusCode::TOO_MANY_REQUESTS] {
        let layer = LockLayer::new(locker.clone(), "balance:{id}")
            .wait(Duration::ZERO)
            .on_contended(status);
        let addr = serve(bank_app(Bank::default(), layer)).await;
        let reply = post_to(&client, addr, "/accounts/8/deposit").await;
        assert_eq!(reply.status, status, "{reply:?}");
        assert!(reply.headers.contains_key("retry-after"), "{reply:?}");
    }

    let layer = LockLayer::new(locker.clone(), "balance:{id}")
        .wait(Duration::ZERO)
        .error_handler(|rejection: LockRejection| {
            let busy = matches!(rejection, LockRejection::Contended { .. });
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("custom busy={busy}"),
            )
                .into_response()
        });
    let addr = serve(bank_app(Bank::default(), layer)).await;
    let reply = post_to(&client, addr, "/accounts/8/deposit").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "custom busy=true")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_down_gives_503_and_the_handler_does_not_run() {
    let mut redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let bank = Bank::default();
    let layer = LockLayer::new(locker, "balance:{id}").wait(Duration::from_secs(1));
    let addr = serve(bank_app(bank.clone(), layer)).await;
    let client = client();

    let reply = post_to(&client, addr, "/accounts/1/deposit").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(bank.runs(), 1);

    redis.kill();
    for _ in 0..2 {
        let reply = post_to(&client, addr, "/accounts/1/deposit").await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
        assert!(
            !reply.body.contains("127.0.0.1"),
            "leaks the backend: {reply:?}"
        );
    }
    assert_eq!(bank.runs(), 1, "the handler ran without the lock");
    // safe methods still pass
    let reply = send(&client, request(Method::GET, addr, "/accounts/1")).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

// ---------------------------------------------------------------------------------------
// key material

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_header_or_query_placeholder_gives_400() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let bank = Bank::default();
    let app = Router::new()
        .route("/accounts/{id}/deposit", post(deposit))
        .route_layer(LockLayer::new(
            locker,
            "tenant:{header.x-tenant}:{query.region}:{id}",
        ))
        .with_state(bank.clone());
    let addr = serve(app).await;
    let client = client();

    let with_tenant = |path: &str| {
        let mut req = request(Method::POST, addr, path);
        req.headers_mut()
            .insert("x-tenant", "acme".parse().unwrap());
        req
    };
    let reply = send(&client, with_tenant("/accounts/1/deposit?region=eu")).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");

    let reply = post_to(&client, addr, "/accounts/1/deposit?region=eu").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::BAD_REQUEST, "missing header `x-tenant`")
    );
    for path in [
        "/accounts/1/deposit",
        "/accounts/1/deposit?region=",
        "/accounts/1/deposit?other=eu",
    ] {
        let reply = send(&client, with_tenant(path)).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (StatusCode::BAD_REQUEST, "missing query parameter `region`"),
            "{path}"
        );
    }
    assert_eq!(bank.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_or_control_character_value_gives_400() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let bank = Bank::default();
    let app = Router::new()
        .route("/accounts/{id}/deposit", post(deposit))
        .route("/docs/{name}", post(|| async { "ran" }))
        .route_layer(LockLayer::new(
            locker.clone(),
            "doc:{header.x-tenant}:{name}",
        ))
        .with_state(bank.clone());
    let addr = serve(app).await;
    let client = client();

    let doc = |name: &str, tenant: &str| {
        let mut req = request(Method::POST, addr, &format!("/docs/{name}"));
        req.headers_mut()
            .insert("x-tenant", tenant.parse().unwrap());
        req
    };
    let reply = send(&client, doc("readme", "acme")).await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ran"));
    // The layer releases after the response is sent: wait for that release to land
    // before counting, or it would count as a lock taken by a refused request.
    eventually(DEADLINE, "the first request's release", || async {
        locker.inspect("doc:acme:readme").await.unwrap().is_none()
    })
    .await;
    // From here on every request is refused before it reaches Redis: no lock is taken.
    let scripts_run = redis.calls("evalsha");

    // a 10 kB header: refused by lock-core's key validation, not echoed back
    let reply = send(&client, doc("readme", &"a".repeat(10 * 1024))).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{reply:?}");
    assert!(reply.body.starts_with("invalid lock key"), "{}", reply.body);
    assert!(
        reply.body.len() < 200,
        "the reason is short: {} bytes",
        reply.body.len()
    );

    // percent-decoded values holding control characters or braces
    for (name, reason) in [
        (
            "a%01b",
            "path parameter `name` contains a control character",
        ),
        (
            "a%0Ab",
            "path parameter `name` contains a control character",
        ),
        ("x%7D%3Afence", "path parameter `name` contains a brace"),
        ("%7Bother%7D", "path parameter `name` contains a brace"),
    ] {
        let reply = send(&client, doc(name, "acme")).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (StatusCode::BAD_REQUEST, reason),
            "{name}"
        );
    }
    let reply = send(&client, doc("readme", "ac\tme")).await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (
            StatusCode::BAD_REQUEST,
            "header `x-tenant` contains a control character"
        )
    );
    assert_eq!(
        redis.calls("evalsha"),
        scripts_run,
        "a refused request took a lock"
    );
}

// ---------------------------------------------------------------------------------------
// the handler's view

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_lock_extractor_sees_increasing_fencing_tokens() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let addr = serve(bank_app(
        Bank::default(),
        LockLayer::new(locker.clone(), "balance:{id}"),
    ))
    .await;
    let client = client();

    let mut last = 0;
    for i in 0..5 {
        // interleave a manual acquisition: the counter is per lock, shared by every holder
        if i == 2 {
            let guard = locker.lock("balance:7").await.unwrap();
            assert!(guard.fencing_token() > last);
            last = guard.fencing_token();
            guard.release().await.unwrap();
        }
        let reply = post_to(&client, addr, "/accounts/7/token").await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        let (key, token) = reply.body.split_once(' ').unwrap();
        assert_eq!(key, "balance:7");
        let token: u64 = token.parse().unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
}

/// A path parameter holding a `:` or a `%` is escaped in the key, so `balance:{id}` with
/// `1:2` is not `balance:{a}:{b}` with 1 and 2; ordinary values keep their keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_are_escaped_so_none_forges_another_key() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let held = || post(|Extension(lock): Extension<HeldLock>| async move { lock.key().to_owned() });
    let app = Router::new()
        .route("/accounts/{id}", held())
        .route_layer(LockLayer::new(locker.clone(), "balance:{id}"))
        .merge(
            Router::new()
                .route("/pairs/{a}/{b}", held())
                .route_layer(LockLayer::new(locker, "balance:{a}:{b}")),
        );
    let addr = serve(app).await;
    let client = client();
    for (path, key) in [
        ("/accounts/1%3A2", "balance:1%3A2"),
        ("/pairs/1/2", "balance:1:2"),
        ("/accounts/50%25", "balance:50%25"),
        ("/accounts/%253A", "balance:%253A"),
        ("/accounts/42", "balance:42"),
    ] {
        let reply = post_to(&client, addr, path).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (StatusCode::OK, key),
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_with_state_nested_routers_and_router_layer() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let client = client();

    // nested: the outer router's parameter is visible too
    let accounts = Router::new()
        .route(
            "/accounts/{id}",
            post(|Extension(lock): Extension<HeldLock>| async move { lock.key().to_owned() }),
        )
        .route_layer(LockLayer::new(locker.clone(), "t:{tenant}:{id}"));
    let app = Router::new().nest("/tenants/{tenant}", accounts);
    let addr = serve(app).await;
    let reply = post_to(&client, addr, "/tenants/acme/accounts/5").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "t:acme:5")
    );

    // Router::layer: parameters are there for matched routes, but the fallback is
    // layered as well, so an unknown path answers 400 instead of 404
    let app = Router::new()
        .route("/accounts/{id}", post(show))
        .layer(LockLayer::new(locker.clone(), "balance:{id}"));
    let addr = serve(app).await;
    let reply = post_to(&client, addr, "/accounts/5").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "5 locked as balance:5")
    );
    let reply = post_to(&client, addr, "/nowhere").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{reply:?}");

    // route_layer leaves unknown paths alone
    let addr = serve(bank_app(
        Bank::default(),
        LockLayer::new(locker, "balance:{id}"),
    ))
    .await;
    let reply = post_to(&client, addr, "/nowhere").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{reply:?}");
}

// ---------------------------------------------------------------------------------------
// how long the lock is held

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_request_frees_the_lock() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let checker = connect(&redis).await;
    let (entered_tx, mut entered) = mpsc::unbounded_channel::<()>();
    let app = Router::new()
        .route(
            "/accounts/{id}/slow",
            post(move || {
                let entered_tx = entered_tx.clone();
                async move {
                    entered_tx.send(()).unwrap();
                    pending::<()>().await;
                }
            }),
        )
        .route_layer(LockLayer::new(locker, "balance:{id}"));
    let addr = serve(app).await;

    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"POST /accounts/9/slow HTTP/1.1\r\nhost: test\r\ncontent-length: 0\r\n\r\n")
        .unwrap();
    tokio::time::timeout(DEADLINE, entered.recv())
        .await
        .expect("the handler never started")
        .unwrap();
    assert!(
        is_held(&checker, "balance:9").await,
        "the handler runs unlocked"
    );

    drop(stream);
    let freed_after = wait_until_free(&checker, "balance:9", Duration::from_secs(2)).await;
    println!("lock freed {freed_after:?} after the client disconnected");
    assert!(
        freed_after < Duration::from_secs(2),
        "lock freed {freed_after:?} after the disconnect"
    );
}

/// A response body fed by a channel: each message is a frame; the body ends when every
/// sender is gone.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

/// An app whose handler streams a body; the test gets each request's body sender.
fn streaming_app(
    locker: Locker,
    hold: bool,
) -> (Router, mpsc::UnboundedReceiver<mpsc::Sender<Bytes>>) {
    let (senders_tx, senders) = mpsc::unbounded_channel();
    let app = Router::new()
        .route(
            "/reports/{id}",
            post(move || {
                let senders_tx = senders_tx.clone();
                async move {
                    let (tx, rx) = mpsc::channel(1);
                    senders_tx.send(tx).unwrap();
                    Body::new(ChannelBody(rx))
                }
            }),
        )
        .route_layer(LockLayer::new(locker, "report:{id}").hold_until_body_end(hold));
    (app, senders)
}

/// Awaits `fut` up to [`DEADLINE`]; it must yield `Some`.
async fn recv_within<T>(fut: impl Future<Output = Option<T>>) -> T {
    tokio::time::timeout(DEADLINE, fut)
        .await
        .expect("timed out")
        .expect("channel closed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_until_body_end_holds_across_a_streaming_body() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let checker = connect(&redis).await;
    let client = client();

    let (app, mut senders) = streaming_app(locker.clone(), true);
    let addr = serve(app).await;
    let response = client.request(request(Method::POST, addr, "/reports/1"));
    let response = tokio::time::timeout(DEADLINE, response)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let tx = recv_within(senders.recv()).await;
    let mut body = response.into_body();

    // the head is out, the body is not: still held, across frames
    assert!(
        is_held(&checker, "report:1").await,
        "released before the body was sent"
    );
    for chunk in ["one,", "two,"] {
        tx.send(Bytes::from(chunk)).await.unwrap();
        let frame = recv_within(body.frame()).await.unwrap();
        assert_eq!(frame.into_data().unwrap(), chunk);
        assert!(is_held(&checker, "report:1").await, "released mid-body");
    }
    // end of body: released
    drop(tx);
    assert!(
        recv_within(async { Some(body.frame().await) })
            .await
            .is_none()
    );
    wait_until_free(&checker, "report:1", DEADLINE).await;

    // by default the lock goes when the response is produced, with the body still open
    let (app, mut senders) = streaming_app(locker, false);
    let addr = serve(app).await;
    let response = client.request(request(Method::POST, addr, "/reports/2"));
    let response = tokio::time::timeout(DEADLINE, response)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let tx = recv_within(senders.recv()).await;
    wait_until_free(&checker, "report:2", DEADLINE).await;
    drop((tx, response));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_mid_handler_stops_the_handler_with_503() {
    let server = RedisServer::spawn();
    let locker = connect(&server).await;
    let (started_tx, mut started_rx) = mpsc::channel::<()>(1);
    let finished = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/jobs/{id}/run",
            post({
                let finished = finished.clone();
                move || async move {
                    started_tx.send(()).await.unwrap();
                    tokio::time::sleep(DEADLINE).await;
                    finished.fetch_add(1, Ordering::SeqCst);
                    "done"
                }
            }),
        )
        .route_layer(LockLayer::new(locker, "job:{id}").lease(Duration::from_secs(1)));
    let addr = serve(app).await;
    let client = client();
    let reply = tokio::spawn(async move { post_to(&client, addr, "/jobs/7/run").await });
    recv_within(started_rx.recv()).await;
    // behind the holder's back: the watchdog finds the key gone at its next renewal
    server.cmd(&["DEL", "lock:{job:7}"]).unwrap();
    let reply = reply.await.unwrap();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert!(reply.body.contains("lost"), "{reply:?}");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the handler ran on unlocked"
    );
}

// ---------------------------------------------------------------------------------------
// the read-write layer

/// A document route under `LockLayer::read_write`: GET waits at `readers` while holding
/// its read lock (when given), PUT counts the writers inside.
fn document_app(
    layer: LockLayer,
    readers: Option<Arc<Barrier>>,
    writers: Arc<AtomicUsize>,
) -> Router {
    let read = move || {
        let readers = readers.clone();
        async move {
            if let Some(readers) = readers {
                tokio::time::timeout(DEADLINE, readers.wait())
                    .await
                    .expect("the other reader never came in");
            }
            "the document"
        }
    };
    let write = move || {
        let writers = writers.clone();
        async move {
            let inside = writers.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::task::yield_now().await;
            writers.fetch_sub(1, Ordering::SeqCst);
            inside.to_string()
        }
    };
    Router::new()
        .route("/docs/{id}", get(read).put(write))
        .route_layer(layer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_layer_lets_reads_share_and_writes_exclude() {
    let redis = RedisServer::spawn();
    let locker = connect(&redis).await;
    let client = client();

    // Two GETs of one document are inside the handler at once: each waits for the other.
    let readers = Arc::new(Barrier::new(2));
    let layer = LockLayer::read_write(locker.clone(), "doc:{id}");
    let addr = serve(document_app(layer, Some(readers), Arc::default())).await;
    let gets = [0, 1].map(|_| {
        let client = client.clone();
        tokio::spawn(async move { send(&client, request(Method::GET, addr, "/docs/1")).await })
    });
    for get in gets {
        assert_eq!(get.await.unwrap().status, StatusCode::OK);
    }

    // A PUT waits for a held read, and is turned away at the end of its wait with the
    // reader's lease left as Retry-After.
    let layer = LockLayer::read_write(locker.clone(), "doc:{id}").wait(Duration::from_millis(200));
    let addr = serve(document_app(layer, None, Arc::default())).await;
    let lease = Duration::from_secs(8);
    let read = locker
        .lock_with(
            "doc:2",
            LockOptions::new().kind(LockKind::Read).lease(lease),
        )
        .await
        .unwrap();
    let reply = send(&client, request(Method::GET, addr, "/docs/2")).await;
    assert_eq!(reply.status, StatusCode::OK, "a read waited for a read");
    let reply = send(&client, request(Method::PUT, addr, "/docs/2")).await;
    assert_eq!(reply.status, StatusCode::LOCKED, "{reply:?}");
    assert_retry_after_within(&reply, 8);
    read.release().await.unwrap();
    let reply = send(&client, request(Method::PUT, addr, "/docs/2")).await;
    assert_eq!(reply.status, StatusCode::OK);

    // A held write turns GETs away too.
    let write = locker.write("doc:3").await.unwrap();
    let reply = send(&client, request(Method::GET, addr, "/docs/3")).await;
    assert_eq!(reply.status, StatusCode::LOCKED, "{reply:?}");
    write.release().await.unwrap();

    // PUTs exclude each other: never two writers inside.
    let writers = Arc::new(AtomicUsize::new(0));
    let layer = LockLayer::read_write(locker.clone(), "doc:{id}");
    let addr = serve(document_app(layer, None, writers)).await;
    let puts: Vec<_> = (0..16)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { send(&client, request(Method::PUT, addr, "/docs/4")).await })
        })
        .collect();
    for put in puts {
        let reply = put.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "1", "two writers inside at once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_layer_locks_only_the_methods_it_is_given() {
    let locker = Locker::in_memory();
    let client = client();
    let layer = LockLayer::read_write(locker.clone(), "doc:{id}")
        .methods([Method::PUT])
        .wait(Duration::ZERO);
    let addr = serve(document_app(layer, None, Arc::default())).await;
    let write = locker.write("doc:5").await.unwrap();
    let reply = send(&client, request(Method::GET, addr, "/docs/5")).await;
    assert_eq!(reply.status, StatusCode::OK, "GET took a lock");
    let reply = send(&client, request(Method::PUT, addr, "/docs/5")).await;
    assert_eq!(reply.status, StatusCode::LOCKED);
    write.release().await.unwrap();
}

#[test]
fn a_read_write_layer_refuses_bad_templates_and_fairness() {
    let locker = Locker::in_memory();
    let err = LockLayer::try_read_write(locker.clone(), "doc:{id").unwrap_err();
    assert!(err.to_string().contains("doc:{id"), "{err}");
    let panicked =
        std::panic::catch_unwind(|| LockLayer::read_write(Locker::in_memory(), "doc:{id"));
    assert!(panicked.is_err(), "a bad template was accepted");
    let fair = std::panic::catch_unwind(|| {
        LockLayer::read_write(Locker::in_memory(), "doc:{id}").fair(true)
    });
    let message = fair.unwrap_err();
    let message = message
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| message.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert!(message.contains("read-write"), "{message}");
    // fair(false) on a read-write layer changes nothing; fair(true) on an exclusive one is fine
    let _ = LockLayer::read_write(locker.clone(), "doc:{id}").fair(false);
    let _ = LockLayer::new(locker, "doc:{id}").fair(true);
}
