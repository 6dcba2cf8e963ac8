//! Bank replicas as real processes (this package's binary) sharing one spawned
//! redis-server or PostgreSQL server: concurrent updates spread over both, one bound on the
//! statements of both, a replica killed while it holds locks, one paused past its lease
//! (between its read and its write, or inside a transaction), replicas that start at once
//! on a fresh database, and a graceful shutdown, which hands the audits over at once.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lock_core::Locker;
use lock_tests::{
    PostgresServer, RedisServer, ValueExt, ZooKeeperServer, eventually, lock_exists, wait_until,
};
use serde_json::Value;
use tokio_postgres::NoTls;

/// The bound of every wait in this file.
const DEADLINE: Duration = Duration::from_secs(30);

/// The server that replicas share their locks and balances on.
trait Shared {
    /// The variable that points a replica at this server, and its value.
    fn env(&self) -> (&'static str, String);

    /// Whether a replica holds the lock of `account`'s balance.
    async fn balance_locked(&self, account: &str) -> bool;
}

impl Shared for RedisServer {
    fn env(&self) -> (&'static str, String) {
        ("REDIS_URL", self.url())
    }

    async fn balance_locked(&self, account: &str) -> bool {
        lock_exists(self, &format!("balance:{account}"))
    }
}

impl Shared for PostgresServer {
    fn env(&self) -> (&'static str, String) {
        ("DATABASE_URL", self.url())
    }

    /// As `pg_locks` shows the lock's advisory key.
    async fn balance_locked(&self, account: &str) -> bool {
        let locker = Locker::postgres(&self.url()).await.unwrap();
        let info = locker.inspect(&format!("balance:{account}")).await.unwrap();
        info.is_some()
    }
}

/// A bank process, killed (SIGKILL) on drop; its output is printed if the test fails.
struct Replica {
    name: &'static str,
    child: Child,
    addr: SocketAddr,
    output: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    /// Starts the binary against `shared` on a free port and waits for its
    /// `listening on http://ADDR` line.
    fn start(name: &'static str, shared: &impl Shared, env: &[(&str, &str)]) -> Replica {
        let mut command = Command::new(env!("CARGO_BIN_EXE_bank"));
        for var in [
            "REDIS_URL",
            "DATABASE_URL",
            "LOCK_URL",
            "BANK_LEASE_MS",
            "BANK_WAIT_MS",
            "BANK_DELAY_MS",
            "BANK_MAX_STATEMENTS",
            "BANK_STATEMENT_DELAY_MS",
            "BANK_UNLOCKED",
            "BANK_AUDIT_INTERVAL_MS",
            "BANK_REPLICA_ID",
        ] {
            command.env_remove(var);
        }
        let mut child = command
            .env("BANK_ADDR", "127.0.0.1:0")
            .envs([shared.env()])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start the bank binary");
        let output = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = mpsc::channel();
        collect(name, child.stdout.take().unwrap(), &output, Some(addr_tx));
        collect(name, child.stderr.take().unwrap(), &output, None);
        let mut replica = Replica {
            name,
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            output,
        };
        replica.addr = addr_rx
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("{name}: no `listening on` line within {DEADLINE:?}"));
        replica
    }

    /// SIGKILL: no shutdown, no release; its locks stay until their leases run out.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Sends the process `signal` (`TERM`, `STOP`, `CONT`).
    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status();
        assert!(sent.unwrap().success(), "{}: kill -{signal}", self.name);
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            for line in self.output.lock().unwrap().iter() {
                eprintln!("[{}] {line}", self.name);
            }
        }
    }
}

/// Keeps the lines of `stream`; sends the address of the `listening on` line to `addr`.
fn collect(
    name: &str,
    stream: impl Read + Send + 'static,
    output: &Arc<Mutex<Vec<String>>>,
    addr: Option<mpsc::Sender<SocketAddr>>,
) {
    let output = output.clone();
    let name = name.to_owned();
    thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if let (Some(tx), Some(rest)) = (&addr, line.strip_prefix("listening on http://")) {
                let parsed = rest.parse().unwrap_or_else(|_| panic!("{name}: {line}"));
                let _ = tx.send(parsed);
            }
            output.lock().unwrap().push(line);
        }
    });
}

type Http = Client<HttpConnector, Full<Bytes>>;

fn http() -> Http {
    Client::builder(TokioExecutor::new()).build_http()
}

/// The status and JSON body of one request's answer; `Err` when the connection fails (the
/// replica died).
async fn send(
    http: &Http,
    method: Method,
    addr: SocketAddr,
    path: &str,
    body: Option<String>,
) -> Result<(StatusCode, Value), String> {
    let response = request(http, method, addr, path, body).await?;
    Ok((response.status(), response.into_body()))
}

/// One request's answer, with its JSON body; `Err` when the connection fails.
async fn request(
    http: &Http,
    method: Method,
    addr: SocketAddr,
    path: &str,
    body: Option<String>,
) -> Result<Response<Value>, String> {
    let request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let exchange = async {
        let response = http.request(request).await.map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        let json = serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))?;
        Ok(Response::from_parts(parts, json))
    };
    tokio::time::timeout(DEADLINE, exchange)
        .await
        .unwrap_or_else(|_| panic!("no answer to {path} from {addr} within {DEADLINE:?}"))
}

async fn balance(http: &Http, addr: SocketAddr, id: &str) -> i64 {
    let path = format!("/accounts/{id}");
    let (status, body) = send(http, Method::GET, addr, &path, None).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    body["balance"].as_i64().unwrap()
}

/// One update, and what it does to the balances when it succeeds.
#[derive(Debug, Clone)]
enum Op {
    Deposit(&'static str, i64),
    Withdraw(&'static str, i64),
    Transfer(&'static str, &'static str, i64),
}

impl Op {
    async fn send(&self, http: &Http, addr: SocketAddr) -> Result<(StatusCode, Value), String> {
        let (path, body) = match *self {
            Op::Deposit(id, amount) => (
                format!("/accounts/{id}/deposit"),
                format!(r#"{{"amount": {amount}}}"#),
            ),
            Op::Withdraw(id, amount) => (
                format!("/accounts/{id}/withdraw"),
                format!(r#"{{"amount": {amount}}}"#),
            ),
            Op::Transfer(from, to, amount) => (
                "/transfers".to_owned(),
                format!(r#"{{"from": "{from}", "to": "{to}", "amount": {amount}}}"#),
            ),
        };
        send(http, Method::POST, addr, &path, Some(body)).await
    }

    fn apply(&self, ledger: &mut HashMap<&'static str, i64>) {
        match *self {
            Op::Deposit(id, amount) => *ledger.entry(id).or_default() += amount,
            Op::Withdraw(id, amount) => *ledger.entry(id).or_default() -= amount,
            Op::Transfer(from, to, amount) => {
                *ledger.entry(from).or_default() -= amount;
                *ledger.entry(to).or_default() += amount;
            }
        }
    }
}

/// Sends `ops` (op `i` to `replicas[i % len]`), `concurrency` at a time; returns the ops
/// that succeeded. Any answer but `200`, or `409 insufficient funds` for a withdrawal or a
/// transfer, fails the test.
async fn run(http: &Http, replicas: &[SocketAddr], ops: Vec<Op>, concurrency: usize) -> Vec<Op> {
    let ops = Arc::new(ops);
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (http, ops, next, replicas) =
                (http.clone(), ops.clone(), next.clone(), replicas.to_vec());
            tokio::spawn(async move {
                let mut done = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(op) = ops.get(i) else { break done };
                    let addr = replicas[i % replicas.len()];
                    let (status, body) = op.send(&http, addr).await.unwrap();
                    match status {
                        StatusCode::OK => done.push(op.clone()),
                        StatusCode::CONFLICT
                            if !matches!(op, Op::Deposit(..))
                                && body["error"] == "insufficient funds" => {}
                        _ => panic!("{op:?} on {addr}: {status} {body}"),
                    }
                }
            })
        })
        .collect();
    let mut done = Vec::new();
    for worker in workers {
        done.extend(worker.await.unwrap());
    }
    done
}

/// How many statement permits are held, on every replica together.
fn statement_permits_held(redis: &RedisServer) -> i64 {
    let holders = redis.cmd(&["ZCARD", "lock:{statements}:holders"]).unwrap();
    holders.as_int().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_keep_every_balance_exact() {
    keep_every_balance_exact(&RedisServer::spawn(), &[]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_keep_every_balance_exact_on_postgres() {
    keep_every_balance_exact(&PostgresServer::spawn(), &[]).await;
}

/// `LOCK_URL` puts the locks in Redis, `DATABASE_URL` the balances in PostgreSQL.
#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_keep_every_balance_exact_with_locks_in_redis_and_balances_in_postgres() {
    let redis = RedisServer::spawn();
    let lock_url = redis.url();
    keep_every_balance_exact(&PostgresServer::spawn(), &[("LOCK_URL", &lock_url)]).await;
}

/// `LOCK_URL` puts the locks in ZooKeeper, `DATABASE_URL` the balances in PostgreSQL.
#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_keep_every_balance_exact_with_locks_in_zookeeper_and_balances_in_postgres() {
    let zookeeper = ZooKeeperServer::spawn();
    let lock_url = format!("zookeeper://{}", zookeeper.connect_string());
    keep_every_balance_exact(&PostgresServer::spawn(), &[("LOCK_URL", &lock_url)]).await;
}

/// Two replicas on `shared`, with the variables `env` besides.
async fn keep_every_balance_exact(shared: &impl Shared, env: &[(&str, &str)]) {
    let a = Replica::start("a", shared, env);
    let b = Replica::start("b", shared, env);
    let (replicas, http) = ([a.addr, b.addr], http());

    const ACCOUNTS: [&str; 4] = ["alice", "bob", "carol", "dave"];
    const SEED: i64 = 1_000;
    let seeds = ACCOUNTS.map(|id| Op::Deposit(id, SEED)).to_vec();
    assert_eq!(run(&http, &replicas, seeds, 4).await.len(), 4);

    // Deposits, withdrawals (some beyond the balance), and transfers both ways between
    // the same accounts, alternating between the replicas.
    let ops: Vec<Op> = (0..400)
        .map(|i| {
            let x = ACCOUNTS[i % 4];
            let y = ACCOUNTS[(i + 1 + (i / 4) % 3) % 4];
            let amount = i64::try_from(1 + i % 97).unwrap();
            match (i / 2) % 4 {
                0 => Op::Deposit(x, amount),
                1 => Op::Withdraw(x, amount * 3),
                2 => Op::Transfer(x, y, amount * 2),
                _ => Op::Transfer(y, x, amount * 2),
            }
        })
        .collect();
    let done = run(&http, &replicas, ops, 32).await;

    let mut ledger = HashMap::new();
    done.iter().for_each(|op| op.apply(&mut ledger));
    let mut total = 0;
    for id in ACCOUNTS {
        let expected = SEED + ledger.get(id).copied().unwrap_or(0);
        for addr in replicas {
            assert_eq!(balance(&http, addr, id).await, expected, "{id} on {addr}");
        }
        total += expected;
    }
    let flows: i64 = done
        .iter()
        .map(|op| match *op {
            Op::Deposit(_, amount) => amount,
            Op::Withdraw(_, amount) => -amount,
            Op::Transfer(..) => 0,
        })
        .sum();
    assert_eq!(
        total,
        4 * SEED + flows,
        "transfers create or destroy no money"
    );
    let transfers = done.iter().filter(|op| matches!(op, Op::Transfer(..)));
    assert!(transfers.count() > 0, "some transfers went through");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_share_one_bound_on_statements() {
    let redis = RedisServer::spawn();
    let env = [
        ("BANK_MAX_STATEMENTS", "2"),
        // the statements in flight outlast the test
        ("BANK_STATEMENT_DELAY_MS", "600000"),
        ("BANK_WAIT_MS", "200"),
    ];
    let a = Replica::start("a", &redis, &env);
    let b = Replica::start("b", &redis, &env);
    let http = http();

    // One statement in flight on each replica takes both permits.
    let in_flight = [a.addr, b.addr].map(|addr| {
        let http = http.clone();
        tokio::spawn(
            async move { send(&http, Method::GET, addr, "/accounts/x/statement", None).await },
        )
    });
    eventually(
        DEADLINE,
        "a statement in flight on each replica",
        || async { statement_permits_held(&redis) == 2 },
    )
    .await;
    // Each replica has one statement in flight: were the bound per replica, each would
    // take a second.
    for addr in [a.addr, b.addr] {
        let path = "/accounts/y/statement";
        let response = request(&http, Method::GET, addr, path, None).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::LOCKED,
            "{:?}",
            response.body()
        );
        let retry_after = &response.headers()[header::RETRY_AFTER];
        let retry_after: u64 = retry_after.to_str().unwrap().parse().unwrap();
        assert!(retry_after >= 1, "{addr}: Retry-After: {retry_after}");
        assert_eq!(
            balance(&http, addr, "y").await,
            0,
            "balances are not bounded"
        );
    }
    assert_eq!(statement_permits_held(&redis), 2);
    in_flight.iter().for_each(|statement| statement.abort());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_replica_blocks_its_accounts_only_for_its_lease() {
    killed_replica_blocks_its_accounts_only_for_its_lease(&RedisServer::spawn()).await;
}

/// On PostgreSQL, the server ends the killed replica's sessions as their connections drop,
/// so its locks come free at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_replica_blocks_its_accounts_only_for_its_lease_on_postgres() {
    killed_replica_blocks_its_accounts_only_for_its_lease(&PostgresServer::spawn()).await;
}

async fn killed_replica_blocks_its_accounts_only_for_its_lease(shared: &impl Shared) {
    let lease = ("BANK_LEASE_MS", "1500");
    // Every update on `stuck` stops for a minute between reading and writing.
    let mut stuck = Replica::start("stuck", shared, &[lease, ("BANK_DELAY_MS", "60000")]);
    let live = Replica::start("live", shared, &[lease]);
    let http = http();
    let seeds = ["x", "y", "z"].map(|id| Op::Deposit(id, 100)).to_vec();
    assert_eq!(run(&http, &[live.addr], seeds, 3).await.len(), 3);

    let doomed = [Op::Deposit("x", 5), Op::Transfer("y", "z", 7)].map(|op| {
        let (http, addr) = (http.clone(), stuck.addr);
        tokio::spawn(async move { op.send(&http, addr).await })
    });
    eventually(DEADLINE, "the stuck replica to hold x, y and z", || async {
        for id in ["x", "y", "z"] {
            if !shared.balance_locked(id).await {
                return false;
            }
        }
        true
    })
    .await;

    // Updates of the same accounts on the live replica: they wait for the locks.
    let ops: Vec<Op> = (0..30)
        .map(|i| match i % 3 {
            0 => Op::Deposit("x", 1),
            1 => Op::Transfer("x", "y", 2),
            _ => Op::Transfer("z", "x", 3),
        })
        .collect();
    let load = {
        let (http, addr) = (http.clone(), live.addr);
        tokio::spawn(async move { run(&http, &[addr], ops, 8).await })
    };
    stuck.kill();
    let killed = Instant::now();
    for request in doomed {
        let answer = request.await.unwrap();
        assert!(
            answer.is_err(),
            "no answer from a killed replica: {answer:?}"
        );
    }
    let done = load.await.unwrap();
    println!(
        "the live replica finished {:?} after the kill",
        killed.elapsed()
    );
    assert_eq!(done.len(), 30, "every update on the live replica succeeded");

    let mut ledger = HashMap::new();
    done.iter().for_each(|op| op.apply(&mut ledger));
    for id in ["x", "y", "z"] {
        let expected = 100 + ledger.get(id).copied().unwrap_or(0);
        assert_eq!(balance(&http, live.addr, id).await, expected, "{id}");
    }
    eventually(DEADLINE, "every lock to be free", || async {
        for id in ["x", "y", "z"] {
            if shared.balance_locked(id).await {
                return false;
            }
        }
        true
    })
    .await;
}

/// A replica paused (SIGSTOP) between reading a balance and writing it back, past the
/// lease of the session that holds its lock: the server ends that session, another replica
/// updates the account, and once resumed, the paused one's update is refused, with an
/// error for its client, never a success that loses a deposit.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_replica_cannot_write_once_its_lease_ran_out_on_postgres() {
    let postgres = PostgresServer::spawn();
    let lease = ("BANK_LEASE_MS", "1000");
    let paused = Replica::start("paused", &postgres, &[lease, ("BANK_DELAY_MS", "2000")]);
    let live = Replica::start("live", &postgres, &[lease]);
    let http = http();
    let request = {
        let (http, addr) = (http.clone(), paused.addr);
        tokio::spawn(async move { Op::Deposit("x", 5).send(&http, addr).await })
    };
    eventually(DEADLINE, "the deposit to hold its lock", || async {
        postgres.balance_locked("x").await
    })
    .await;
    paused.signal("STOP");
    eventually(DEADLINE, "the server to end the paused session", || async {
        !postgres.balance_locked("x").await
    })
    .await;
    let (status, body) = Op::Deposit("x", 1).send(&http, live.addr).await.unwrap();
    assert_eq!(
        (status, body["balance"].as_i64()),
        (StatusCode::OK, Some(1))
    );

    paused.signal("CONT");
    let (status, body) = request.await.unwrap().unwrap();
    assert!(
        status == StatusCode::CONFLICT || status == StatusCode::SERVICE_UNAVAILABLE,
        "the paused deposit: {status} {body}"
    );
    assert!(
        body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{body}"
    );
    assert_eq!(balance(&http, live.addr, "x").await, 1);
    assert_eq!(balance(&http, paused.addr, "x").await, 1);
}

/// A replica paused (SIGSTOP) inside the transaction of its fenced read, with the row of
/// the account locked: the server ends that transaction once it has sat idle for the
/// lease, so another replica still updates the account, and the paused one's deposit
/// fails with an error for its client once it is resumed.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_paused_inside_a_transaction_keeps_no_row_locked_on_postgres() {
    let postgres = PostgresServer::spawn();
    let lease = ("BANK_LEASE_MS", "1000");
    let paused = Replica::start("paused", &postgres, &[lease]);
    let live = Replica::start("live", &postgres, &[lease]);
    let http = http();
    let (status, body) = Op::Deposit("x", 10).send(&http, live.addr).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");

    // The test holds the row of x, so that the paused replica's read waits for it inside
    // its transaction, which, paused, it cannot end.
    let (mut client, connection) = tokio_postgres::connect(&postgres.url(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let holding = client.transaction().await.unwrap();
    let row = "SELECT 1 FROM bank_accounts WHERE id = 'x' FOR UPDATE";
    holding.execute(row, &[]).await.unwrap();
    let request = {
        let (http, addr) = (http.clone(), paused.addr);
        tokio::spawn(async move { Op::Deposit("x", 5).send(&http, addr).await })
    };
    eventually(
        DEADLINE,
        "the paused replica's read to wait for the row",
        || async {
            let waiting = postgres.psql(
                "SELECT count(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO bank_accounts%'",
            );
            waiting.unwrap() == "1"
        },
    )
    .await;
    paused.signal("STOP");
    holding.commit().await.unwrap();

    let (status, body) = Op::Deposit("x", 1).send(&http, live.addr).await.unwrap();
    assert_eq!(
        (status, body["balance"].as_i64()),
        (StatusCode::OK, Some(11))
    );
    paused.signal("CONT");
    let (status, body) = request.await.unwrap().unwrap();
    assert!(
        status == StatusCode::CONFLICT || status == StatusCode::SERVICE_UNAVAILABLE,
        "the paused deposit: {status} {body}"
    );
    assert_eq!(balance(&http, live.addr, "x").await, 11);
}

/// Two replicas started at the same moment on a fresh database: both create the tables
/// they need (the balances' and the locks' fences), neither fails for the other's doing
/// so, and they share the balances.
#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_start_at_once_on_a_fresh_database() {
    let postgres = PostgresServer::spawn();
    let (a, b) = thread::scope(|s| {
        let a = s.spawn(|| Replica::start("a", &postgres, &[]));
        let b = s.spawn(|| Replica::start("b", &postgres, &[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    let http = http();
    let (status, body) = Op::Deposit("x", 7).send(&http, a.addr).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(balance(&http, b.addr, "x").await, 7);
    let stored = postgres.psql("SELECT balance FROM bank_accounts WHERE id = 'x'");
    assert_eq!(stored.unwrap(), "7");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_finishes_the_request_in_flight_and_releases_its_lock() {
    let redis = RedisServer::spawn();
    let mut replica = Replica::start("replica", &redis, &[("BANK_DELAY_MS", "500")]);
    let http = http();
    let request = {
        let (http, addr) = (http.clone(), replica.addr);
        tokio::spawn(async move { Op::Deposit("x", 5).send(&http, addr).await })
    };
    eventually(DEADLINE, "the deposit to hold its lock", || async {
        redis.balance_locked("x").await
    })
    .await;

    replica.signal("TERM");
    let (status, body) = request.await.unwrap().unwrap();
    assert_eq!(
        (status, body["balance"].as_i64()),
        (StatusCode::OK, Some(5))
    );
    wait_until(DEADLINE, "the replica to exit", || {
        replica.child.try_wait().unwrap().is_some()
    });
    assert!(replica.child.wait().unwrap().success());
    let stored = redis.cmd(&["HGET", "bank:account:x", "balance"]).unwrap();
    assert_eq!(stored.as_str(), Some("5"));
    // released at shutdown, not left to its 30 s lease
    assert!(!redis.balance_locked("x").await);
}

/// SIGTERM on the replica that audits: it gives its leadership back as it stops, so the
/// other leads and audits at once, not once the leader's lease (two minutes, beyond the
/// deadline) ran out.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_on_the_auditing_replica_hands_the_audits_over_at_once() {
    let redis = RedisServer::spawn();
    let settings = [
        ("BANK_LEASE_MS", "120000"),
        ("BANK_AUDIT_INTERVAL_MS", "100"),
    ];
    let mut replicas = ["a", "b"].map(|id| {
        let env = [settings[0], settings[1], ("BANK_REPLICA_ID", id)];
        Replica::start(id, &redis, &env)
    });
    let http = http();
    let report = |addr| {
        let http = http.clone();
        async move {
            let (status, body) = send(&http, Method::GET, addr, "/audit", None)
                .await
                .unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            body
        }
    };
    eventually(DEADLINE, "a replica to audit", || async {
        report(replicas[0].addr).await["leading"] == true
            || report(replicas[1].addr).await["leading"] == true
    })
    .await;
    let leader = usize::from(report(replicas[1].addr).await["leading"] == true);
    let follower = replicas[1 - leader].addr;
    let before = report(follower).await;
    assert_eq!(before["last_audit"], Value::Null, "{before}");

    replicas[leader].signal("TERM");
    wait_until(DEADLINE, "the leader to exit", || {
        replicas[leader].child.try_wait().unwrap().is_some()
    });
    assert!(replicas[leader].child.wait().unwrap().success());
    eventually(
        DEADLINE,
        "the other replica to take over and audit",
        || async {
            let now = report(follower).await;
            now["leader"]["id"] == before["replica"] && !now["last_audit"].is_null()
        },
    )
    .await;
}
