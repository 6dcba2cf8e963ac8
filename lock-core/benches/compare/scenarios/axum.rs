//! `axum`: a `POST /accounts/{id}/deposit` route on a loopback port, 64 concurrent
//! HTTP/1.1 connections posting to distinct accounts. lock-core's route is locked by
//! `LockLayer`; every other system's is the hand-written route, whose handler takes the
//! account's lock and gives it back itself; `none`'s takes nothing. The systems take
//! turns, a fifth of the time each per round.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lock_axum::LockLayer;

use super::{ROUNDS, Run, rows, take_turns};
use crate::measure::{Sample, gather, micros};
use crate::systems::System;

const ROUTE: &str = "/accounts/{id}/deposit";
const CONNECTIONS: usize = 64;

/// Distinct account ids across all the runs.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

pub(crate) async fn run(run: &mut Run<'_>) {
    let workers = run.workers;
    let per_round = run.scale.run / ROUNDS as u32;
    let mut systems = run.systems.to_vec();
    systems.push(System::None);
    let results = take_turns(&mut run.stats, &systems, |system, _| {
        load(system, per_round)
    })
    .await;
    for mut row in rows("axum", workers, &systems, results) {
        row.note = match row.system.as_str() {
            "lock-core" => "LockLayer on the route",
            "raw-fenced" => "handler sends the fenced acquire script + EVALSHA itself",
            "raw" => "handler sends SET NX PX + EVALSHA itself",
            "rslock" => "handler locks and unlocks with rslock",
            _ => "no lock",
        }
        .to_owned();
        run.report.push(row);
    }
}

fn router(system: System) -> Router {
    match system {
        System::LockCore(locker) => Router::new()
            .route(ROUTE, post(ok))
            .route_layer(LockLayer::new(locker, "bench:{id}")),
        system => Router::new()
            .route(ROUTE, post(hand_written))
            .with_state(system),
    }
}

async fn ok() -> &'static str {
    "ok"
}

/// The hand-written route: the handler takes the account's lock, answers as `ok` does,
/// and gives the lock back. Every request is on an account of its own, so it never waits.
async fn hand_written(State(system): State<System>, Path(id): Path<u64>) -> &'static str {
    let held = system.acquire(&format!("http:{id}")).await;
    let body = ok().await;
    system.release(held).await;
    body
}

/// [`CONNECTIONS`] loopback HTTP/1.1 connections posting to `system`'s route for `run`.
async fn load(system: System, run: Duration) -> Sample {
    let name = system.name();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local addr");
    let router = router(system);
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(CONNECTIONS)
        .build_http();

    let started = Instant::now();
    let deadline = started + run;
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                    let request = Request::post(format!("http://{addr}/accounts/{id}/deposit"))
                        .body(Empty::new())
                        .expect("request");
                    let t = Instant::now();
                    let response = client.request(request).await.expect("HTTP request");
                    assert_eq!(response.status(), StatusCode::OK, "{name} route");
                    response.into_body().collect().await.expect("HTTP body");
                    lat.push(micros(t.elapsed()));
                }
                lat
            })
        })
        .collect();
    let sample = gather(started, tasks, "HTTP client task").await;
    server.abort();
    sample
}
