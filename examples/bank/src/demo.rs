//! `cargo run -p bank -- demo`: the same burst of concurrent deposits, over real HTTP, to a
//! bank with its locks on, then to one with its locks off, and what became of them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::service::Bank;
use crate::{Config, app};

const REQUESTS: usize = 2_000;
const CONCURRENCY: usize = 64;
const ACCOUNTS: usize = 4;

/// Runs the demo and prints its table.
pub(crate) async fn main(config: &Config) -> Result<(), String> {
    println!(
        "bank demo: {REQUESTS} deposits of 1, {CONCURRENCY} at a time, to {ACCOUNTS} accounts, \
         over HTTP on loopback; {}",
        config.stores()
    );
    let locked = run(config, true, REQUESTS, CONCURRENCY).await?;
    let unlocked = run(config, false, REQUESTS, CONCURRENCY).await?;
    println!();
    println!(
        "{:<10}{:>9}{:>8}{:>10}{:>8}{:>7}{:>9}{:>9}",
        "locks", "requests", "failed", "expected", "actual", "lost", "p50 ms", "p99 ms"
    );
    for run in [&locked, &unlocked] {
        println!(
            "{:<10}{:>9}{:>8}{:>10}{:>8}{:>7}{:>9.1}{:>9.1}",
            if run.locks { "on" } else { "off" },
            run.requests,
            run.failed,
            run.expected,
            run.actual,
            run.lost(),
            run.p50.as_secs_f64() * 1e3,
            run.p99.as_secs_f64() * 1e3,
        );
    }
    println!();
    println!(
        "with the locks off, {} of {} acknowledged deposits were lost: two requests read the \
         same balance and the second write overwrote the first",
        unlocked.lost(),
        unlocked.expected
    );
    Ok(())
}

/// What became of one burst of deposits.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) locks: bool,
    pub(crate) requests: usize,
    /// Deposits answered with anything but `200`.
    pub(crate) failed: usize,
    /// The money the bank acknowledged: one per `200`.
    pub(crate) expected: i64,
    /// The money in the accounts afterwards.
    pub(crate) actual: i64,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
}

impl Run {
    pub(crate) fn lost(&self) -> i64 {
        self.expected - self.actual
    }
}

/// Serves a bank (locks on or off) on a free loopback port, sends it `requests` deposits
/// of 1, `concurrency` at a time, spread over fresh accounts, and counts the money.
pub(crate) async fn run(
    config: &Config,
    locks: bool,
    requests: usize,
    concurrency: usize,
) -> Result<Run, String> {
    let config = Config {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        locks,
        ..config.clone()
    };
    let bank = Bank::open(&config).await?;
    let listener = TcpListener::bind(config.addr)
        .await
        .map_err(|e| e.to_string())?;
    let http = Http::new(listener.local_addr().map_err(|e| e.to_string())?);
    let (stop, stopped) = oneshot::channel::<()>();
    let server = axum::serve(listener, app::router(bank)).with_graceful_shutdown(async {
        stopped.await.ok();
    });
    let server = tokio::spawn(server.into_future());

    // Fresh accounts, so that a second demo against the same store starts from 0 too.
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let label = if locks { "locked" } else { "unlocked" };
    let accounts: Arc<[String]> = (0..ACCOUNTS)
        .map(|i| format!("demo-{stamp}-{label}-{i}"))
        .collect();

    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (http, accounts, next) = (http.clone(), accounts.clone(), next.clone());
            tokio::spawn(async move {
                let (mut latencies, mut failed) = (Vec::new(), 0);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests {
                        break (latencies, failed);
                    }
                    let path = format!("/accounts/{}/deposit", accounts[i % accounts.len()]);
                    let started = Instant::now();
                    let answer = http.send(Method::POST, &path, Some(r#"{"amount": 1}"#));
                    if !answer.await.is_ok_and(|r| r.status() == StatusCode::OK) {
                        failed += 1;
                    }
                    latencies.push(started.elapsed());
                }
            })
        })
        .collect();
    let (mut latencies, mut failed) = (Vec::with_capacity(requests), 0);
    for worker in workers {
        let (l, f) = worker.await.map_err(|e| e.to_string())?;
        latencies.extend(l);
        failed += f;
    }
    latencies.sort();
    let percentile = |p: usize| {
        latencies
            .get(latencies.len().saturating_sub(1) * p / 100)
            .copied()
            .unwrap_or_default()
    };

    let mut actual = 0;
    for id in accounts.iter() {
        let response = http
            .send(Method::GET, &format!("/accounts/{id}"), None)
            .await?;
        let body: Value = serde_json::from_slice(response.body()).map_err(|e| e.to_string())?;
        actual += body["balance"]
            .as_i64()
            .ok_or_else(|| format!("no balance for {id}: {body}"))?;
    }
    stop.send(()).ok();
    server
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    Ok(Run {
        locks,
        requests,
        failed,
        expected: i64::try_from(requests - failed).unwrap_or(i64::MAX),
        actual,
        p50: percentile(50),
        p99: percentile(99),
    })
}

/// A small HTTP/1 client for one server, with JSON bodies.
#[derive(Debug, Clone)]
pub(crate) struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
}

impl Http {
    pub(crate) fn new(addr: SocketAddr) -> Http {
        Http {
            client: Client::builder(TokioExecutor::new()).build_http(),
            base: format!("http://{addr}"),
        }
    }

    /// Sends a request (with a JSON body if given) and reads the whole answer, within 30 s.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&str>,
    ) -> Result<Response<Bytes>, String> {
        let mut request = self.request(method, path);
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let body = Bytes::from(body.unwrap_or_default().to_owned());
        let request = request.body(Full::new(body)).map_err(|e| e.to_string())?;
        self.send_request(request).await
    }

    /// A request to `path` of the bank, to add headers to.
    pub(crate) fn request(&self, method: Method, path: &str) -> axum::http::request::Builder {
        Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
    }

    /// Sends `request` and reads the whole answer, within 30 s.
    pub(crate) async fn send_request(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Bytes>, String> {
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| e.to_string())?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await.map_err(|e| e.to_string())?;
            Ok(Response::from_parts(parts, body.to_bytes()))
        };
        tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .map_err(|_| format!("no answer from {} within 30s", self.base))?
    }
}
