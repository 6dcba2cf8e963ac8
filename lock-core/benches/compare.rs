//! lock-core side by side with the raw redis-rs floor and the `rslock` crate, in one
//! process and one run, so that ratios mean something on a noisy machine (issue 6).
//!
//! Run with: `cargo bench -p lock-core --bench compare` (add `-- --quick`, or set
//! `COMPARE_QUICK=1`, for a run of about a minute; `-- --only handoff,fair-handoff` runs
//! just those scenarios).
//!
//! The program spawns its own `redis-server` (lock-tests), measures the Redis round trip,
//! runs every scenario on a tokio runtime of 1 and then 2 worker threads, prints one
//! markdown table and which goals hold, and writes `compare.json` and `handoff.svg` to
//! `$CARGO_TARGET_DIR/bench/` (default `target/bench/`).
//!
//! Systems: `lock-core` (this crate), `raw` (one redis-rs `MultiplexedConnection` sending
//! `SET NX PX` and an `EVALSHA` compare-and-delete: the floor), `rslock` (crates.io, its
//! default settings) and `none` (no lock) where that is meaningful.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lock_axum::LockLayer;
use lock_core::redis::aio::MultiplexedConnection;
use lock_core::redis::{self, Script};
use lock_core::{LockGuard, LockOptions, Locker};
use lock_tests::RedisServer;
use tokio::sync::watch;

/// The compare-and-delete of the raw floor (and of redis-py, node-redlock, redsync).
const RAW_RELEASE: &str = r#"if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0"#;

/// Commands that each system runs only inside its Lua scripts. `INFO commandstats` counts
/// those too; subtracting them leaves the commands the client sent.
const CORE_IN_SCRIPT: &[&str] = &[
    "set", "time", "incr", "pexpire", "get", "del", "publish", "pttl", "zadd", "zpopmin",
];
const FAIR_IN_SCRIPT: &[&str] = &[
    "set", "time", "incr", "pexpire", "get", "del", "publish", "pttl", "hget", "lpop", "hdel",
    "hset", "rpush", "lrem", "zadd", "zpopmin",
];
const RAW_IN_SCRIPT: &[&str] = &["get", "del"];
const RSLOCK_IN_SCRIPT: &[&str] = &["get", "del"];

const LEASE: Duration = Duration::from_secs(30);
const PARALLEL_TASKS: usize = 32;
const HANDOFF_TASKS: usize = 8;
const HTTP_CONNECTIONS: usize = 64;
const WATCHDOG_LEASE: Duration = Duration::from_secs(3);
/// How long a handoff task holds the lock. Without a hold, the previous holder's next
/// attempt (made the moment it sees someone else acquire) races that holder's release
/// and wins: a retry-based lock would get a wake-up from the harness for free.
const HANDOFF_HOLD: Duration = Duration::from_millis(1);
/// Every scenario, in the order they run.
const SCENARIOS: &[&str] = &[
    "uncontended",
    "parallel",
    "handoff",
    "fair-handoff",
    "watchdog",
    "axum",
    "memory",
];

/// How much work each scenario does.
#[derive(Debug, Clone, Copy)]
struct Scale {
    rtt_samples: usize,
    cycles: usize,
    run: Duration,
    handoffs: usize,
    handoff_cap: Duration,
    watchdog_guards: usize,
    hold: Duration,
    memory_items: usize,
}

impl Scale {
    fn full() -> Self {
        Self {
            rtt_samples: 5_000,
            cycles: 20_000,
            run: Duration::from_secs(5),
            handoffs: 2_000,
            handoff_cap: Duration::from_secs(60),
            watchdog_guards: 10_000,
            hold: Duration::from_secs(15),
            memory_items: 10_000,
        }
    }

    fn quick() -> Self {
        Self {
            rtt_samples: 1_000,
            cycles: 2_000,
            run: Duration::from_secs(1),
            handoffs: 200,
            handoff_cap: Duration::from_secs(8),
            watchdog_guards: 2_000,
            hold: Duration::from_secs(4),
            memory_items: 2_000,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--memory-child") {
        memory::child(&args[at + 1..]);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick")
        || std::env::var("COMPARE_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let scale = if quick { Scale::quick() } else { Scale::full() };
    let only: Vec<&str> = match args.iter().position(|a| a == "--only") {
        Some(at) => args
            .get(at + 1)
            .map(|list| list.split(',').collect())
            .unwrap_or_default(),
        None => SCENARIOS.to_vec(),
    };
    if let Some(unknown) = only.iter().find(|s| !SCENARIOS.contains(s)) {
        eprintln!(
            "unknown scenario {unknown:?}; --only takes a comma-separated list of {SCENARIOS:?}"
        );
        std::process::exit(2);
    }
    let started = Instant::now();

    let server = RedisServer::spawn();
    println!(
        "# lock-core vs raw redis-rs vs rslock ({} run)\n",
        if quick { "quick" } else { "full" }
    );
    println!(
        "redis-server on {} (spawned by lock-tests), {} CPUs",
        server.url(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let mut report = Report::default();
    for workers in [1, 2] {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .expect("build the tokio runtime");
        println!("\n## tokio runtime: multi_thread, worker_threads = {workers}");
        rt.block_on(run_all(&server, workers, scale, &only, &mut report));
        rt.shutdown_timeout(Duration::from_secs(5));
    }
    if only.contains(&"memory") {
        for workers in [1, 2] {
            memory::run(&server, workers, scale, &mut report);
        }
    }

    println!("\n## results\n");
    print!("{}", report.markdown());
    println!();
    print!("{}", report.goals());

    let dir = out_dir();
    std::fs::create_dir_all(&dir).expect("create the output dir");
    let json = dir.join("compare.json");
    std::fs::write(&json, report.json()).expect("write compare.json");
    let svg = dir.join("handoff.svg");
    std::fs::write(&svg, report.svg()).expect("write handoff.svg");
    println!(
        "\nwrote {} and {} in {:.0?}",
        json.display(),
        svg.display(),
        started.elapsed()
    );
}

/// `$CARGO_TARGET_DIR/bench`, else the `target/bench` this executable was built in.
fn out_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("bench");
    }
    // target/<profile>/deps/compare-<hash>
    let exe = std::env::current_exe().expect("current exe");
    exe.ancestors()
        .nth(3)
        .map_or_else(|| PathBuf::from("target"), PathBuf::from)
        .join("bench")
}

async fn run_all(
    server: &RedisServer,
    workers: usize,
    scale: Scale,
    only: &[&str],
    report: &mut Report,
) {
    let url = server.url();
    let mut stats = Stats::connect(&url).await;
    let rtt = measure_rtt(&url, scale.rtt_samples).await;
    println!(
        "redis round trip (PING, median of {}): {rtt:.1} µs",
        scale.rtt_samples
    );
    report.rtt.insert(workers, rtt);

    let locker = Locker::connect(&url).await.expect("connect lock-core");
    let raw_conn = Raw::connect(&url).await;
    let manager = rslock::LockManager::new(vec![url.clone()]);
    let core = Sys::Core(locker.clone());
    let raw = Sys::Raw(raw_conn.clone());
    let rslock = Sys::Rslock(manager.clone());
    // Warm up: connections opened, scripts loaded, before anything is counted.
    for sys in [&core, &raw, &rslock] {
        for i in 0..100 {
            let held = sys.acquire(&format!("warmup:{workers}:{i}")).await;
            sys.release(held).await;
        }
    }

    // 1. uncontended, and 2. parallel: the systems take turns, a round each, so that a
    // change in the machine's load falls on all of them alike.
    let systems = [&core, &raw, &rslock];
    let in_script = systems.map(Sys::in_script);
    if only.contains(&"uncontended") {
        let per_round = scale.cycles / ROUNDS;
        let results = interleaved(&mut stats, &in_script, |i, r| {
            uncontended(systems[i].clone(), per_round, format!("u{workers}:{r}"))
        })
        .await;
        for (sys, (sample, calls)) in systems.iter().zip(results) {
            report.push(sample.row("uncontended", sys.name(), workers, calls));
        }
    }
    if only.contains(&"parallel") {
        let per_round = scale.run / ROUNDS as u32;
        let results = interleaved(&mut stats, &in_script, |i, r| {
            parallel(systems[i].clone(), per_round, format!("p{workers}:{r}"))
        })
        .await;
        for (sys, (sample, calls)) in systems.iter().zip(results) {
            report.push(sample.row("parallel", sys.name(), workers, calls));
        }
    }

    // 3. forced handoff, and 4. the same with the fair lock
    let mut lockers = Vec::new();
    for _ in 0..HANDOFF_TASKS {
        lockers.push(Locker::connect(&url).await.expect("connect lock-core"));
    }
    let each = |sys: fn(Locker) -> Sys| lockers.iter().cloned().map(sys).collect::<Vec<_>>();
    let handoffs: [(&str, &str, Vec<Sys>, &str); 6] = [
        (
            "handoff",
            "lock-core",
            vec![core.clone(); HANDOFF_TASKS],
            "8 tasks share one Locker",
        ),
        (
            "handoff",
            "lock-core/8-lockers",
            each(Sys::Core),
            "one Locker per task, as 8 replicas would",
        ),
        (
            "handoff",
            "raw",
            vec![raw.clone(); HANDOFF_TASKS],
            "no wake-up: polls SET NX with no sleep",
        ),
        (
            "handoff",
            "rslock",
            vec![rslock.clone(); HANDOFF_TASKS],
            "default retry: 3 tries, 0-200 ms random delay",
        ),
        (
            "fair-handoff",
            "lock-core",
            vec![Sys::Fair(locker.clone()); HANDOFF_TASKS],
            "fair lock; 8 tasks share one Locker",
        ),
        (
            "fair-handoff",
            "lock-core/8-lockers",
            each(Sys::Fair),
            "fair lock; one Locker per task",
        ),
    ];
    for (scenario, name, systems, note) in handoffs {
        if !only.contains(&scenario) {
            continue;
        }
        let in_script = systems[0].in_script();
        // The round trip right beside the row, which its p50 is held to: the machine's
        // speed drifts within a run.
        let row_rtt = measure_rtt(&url, scale.rtt_samples / 5).await;
        let before = stats.snapshot().await;
        let run = handoff(systems, scale, &format!("h{workers}:{scenario}:{name}")).await;
        let calls = stats.delta(&before, in_script).await;
        let mut row = run.sample.row(scenario, name, workers, calls);
        row.extra.push(("rtt_us", row_rtt));
        row.extra.push(("acquisitions", run.sample.ops as f64));
        row.extra.push(("fifo_overtakings", run.overtakings as f64));
        let _ = write!(
            row.note,
            "{note}; served out of asking order {} times",
            run.overtakings
        );
        if run.cut_short {
            let _ = write!(
                row.note,
                "; stopped at the {:?} cap after {} acquisitions",
                scale.handoff_cap, run.sample.ops
            );
        }
        let label = match scenario {
            "fair-handoff" => format!("{name} fair"),
            _ => name.to_owned(),
        };
        report
            .handoff_latencies
            .push((label, workers, run.sample.lat.clone()));
        report.push(row);
    }

    // 5. watchdog at scale
    if only.contains(&"watchdog") {
        report.push(watchdog(&url, &mut stats, workers, scale).await);
    }

    // 6. axum, taking turns as above
    let apps = [
        ("lock-core", App::Core, CORE_IN_SCRIPT),
        ("raw", App::Raw, RAW_IN_SCRIPT),
        ("rslock", App::Rslock, RSLOCK_IN_SCRIPT),
        ("none", App::None, &[][..]),
    ];
    if only.contains(&"axum") {
        let in_script = apps.map(|(_, _, in_script)| in_script);
        let per_round = scale.run / ROUNDS as u32;
        let results = interleaved(&mut stats, &in_script, |i, _| {
            http_load(apps[i].1, &locker, &raw_conn, &manager, per_round)
        })
        .await;
        for ((name, app, _), (sample, calls)) in apps.into_iter().zip(results) {
            let mut row = sample.row("axum", name, workers, calls);
            row.note = match app {
                App::Core => "LockLayer on the route",
                App::Raw => "handler sends SET NX PX + EVALSHA itself",
                App::Rslock => "handler locks and unlocks with rslock",
                App::None => "no lock",
            }
            .to_owned();
            report.push(row);
        }
    }
}

async fn measure_rtt(url: &str, samples: usize) -> f64 {
    let client = redis::Client::open(url).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut lat = Vec::with_capacity(samples);
    for _ in 0..samples / 10 {
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .expect("PING");
    }
    for _ in 0..samples {
        let t = Instant::now();
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .expect("PING");
        lat.push(micros(t.elapsed()));
    }
    percentile(&mut lat, 0.5)
}

/// `INFO commandstats` over a connection of its own.
#[derive(Debug)]
struct Stats {
    conn: MultiplexedConnection,
}

/// What Redis ran for the client between two snapshots.
#[derive(Debug, Clone, Copy, Default)]
struct Calls {
    /// Every command Redis executed, those run inside Lua scripts included.
    all: u64,
    /// Commands the client sent (an `EVALSHA` counts once).
    sent: u64,
    /// Redis CPU time spent on the commands sent (scripts include their inner calls), µs.
    server_us: u64,
}

impl Calls {
    fn add(&mut self, other: Calls) {
        self.all += other.all;
        self.sent += other.sent;
        self.server_us += other.server_us;
    }
}

impl Stats {
    async fn connect(url: &str) -> Self {
        let client = redis::Client::open(url).expect("redis url");
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        Self { conn }
    }

    /// Calls and µs per command name.
    async fn snapshot(&mut self) -> BTreeMap<String, (u64, u64)> {
        // Let background work of the previous step (dropped guards' releases) land first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.read().await
    }

    /// How many `command` calls Redis has run, now.
    async fn calls(&mut self, command: &str) -> u64 {
        self.read()
            .await
            .get(command)
            .map_or(0, |(calls, _)| *calls)
    }

    async fn read(&mut self) -> BTreeMap<String, (u64, u64)> {
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.conn)
            .await
            .expect("INFO commandstats");
        text.lines()
            .filter_map(|line| {
                let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |key: &str| -> Option<u64> {
                    fields
                        .split(',')
                        .find_map(|f| f.strip_prefix(key))?
                        .parse()
                        .ok()
                };
                Some((name.to_owned(), (field("calls=")?, field("usec=")?)))
            })
            .collect()
    }

    async fn delta(&mut self, before: &BTreeMap<String, (u64, u64)>, in_script: &[&str]) -> Calls {
        let after = self.snapshot().await;
        Self::between(before, &after, in_script)
    }

    /// What Redis ran from `before` to `after`.
    fn between(
        before: &BTreeMap<String, (u64, u64)>,
        after: &BTreeMap<String, (u64, u64)>,
        in_script: &[&str],
    ) -> Calls {
        let mut calls = Calls::default();
        for (name, (n, us)) in after {
            if name == "info" {
                continue;
            }
            let (n0, us0) = before.get(name).copied().unwrap_or_default();
            calls.all += n - n0;
            if !in_script.contains(&name.as_str()) {
                calls.sent += n - n0;
                calls.server_us += us - us0;
            }
        }
        calls
    }
}

/// A lock implementation under test.
#[derive(Debug, Clone)]
enum Sys {
    Core(Locker),
    /// lock-core's fair lock.
    Fair(Locker),
    Raw(Raw),
    Rslock(rslock::LockManager),
}

#[derive(Debug)]
enum Held {
    Core(LockGuard),
    Raw { key: String, token: String },
    Rslock(rslock::Lock),
}

impl Sys {
    fn name(&self) -> &'static str {
        match self {
            Sys::Core(_) | Sys::Fair(_) => "lock-core",
            Sys::Raw(_) => "raw",
            Sys::Rslock(_) => "rslock",
        }
    }

    fn in_script(&self) -> &'static [&'static str] {
        match self {
            Sys::Core(_) => CORE_IN_SCRIPT,
            Sys::Fair(_) => FAIR_IN_SCRIPT,
            Sys::Raw(_) => RAW_IN_SCRIPT,
            Sys::Rslock(_) => RSLOCK_IN_SCRIPT,
        }
    }

    /// Takes `key`, waiting for it by each system's own means.
    async fn acquire(&self, key: &str) -> Held {
        match self {
            Sys::Core(locker) => Held::Core(
                locker
                    .lock_with(key, LockOptions::new().wait(Duration::from_secs(300)))
                    .await
                    .expect("lock-core lock"),
            ),
            Sys::Fair(locker) => Held::Core(
                locker
                    .lock_with(
                        key,
                        LockOptions::new().wait(Duration::from_secs(300)).fair(true),
                    )
                    .await
                    .expect("lock-core fair lock"),
            ),
            Sys::Raw(raw) => {
                let key = format!("raw:{{{key}}}");
                let token = token();
                while !raw.try_acquire(&key, &token).await {
                    tokio::task::yield_now().await;
                }
                Held::Raw { key, token }
            }
            Sys::Rslock(manager) => Held::Rslock(
                manager
                    .acquire_no_guard(format!("rslock:{{{key}}}").as_str(), LEASE)
                    .await
                    .expect("rslock acquire"),
            ),
        }
    }

    async fn release(&self, held: Held) {
        match (self, held) {
            (_, Held::Core(guard)) => guard.release().await.expect("lock-core release"),
            (Sys::Raw(raw), Held::Raw { key, token }) => raw.release(&key, &token).await,
            (_, Held::Rslock(lock)) => lock.release().await,
            _ => unreachable!("held by another system"),
        }
    }
}

fn token() -> String {
    format!("{:032x}", fastrand::u128(..))
}

/// The floor: what any Redis lock must send at least.
#[derive(Debug, Clone)]
struct Raw {
    conn: MultiplexedConnection,
    release: Arc<Script>,
}

impl Raw {
    async fn connect(url: &str) -> Self {
        let client = redis::Client::open(url).expect("redis url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let release = Script::new(RAW_RELEASE);
        release
            .prepare_invoke()
            .load_async(&mut conn)
            .await
            .expect("SCRIPT LOAD");
        Self {
            conn,
            release: Arc::new(release),
        }
    }

    async fn try_acquire(&self, key: &str, token: &str) -> bool {
        let mut conn = self.conn.clone();
        let reply: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(LEASE.as_millis() as u64)
            .query_async(&mut conn)
            .await
            .expect("SET NX PX");
        reply.is_some()
    }

    async fn release(&self, key: &str, token: &str) {
        let mut conn = self.conn.clone();
        let _: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke_async(&mut conn)
            .await
            .expect("EVALSHA release");
    }
}

/// Operations done, the time they took, and per-operation latencies in µs.
#[derive(Debug, Default)]
struct Sample {
    ops: usize,
    elapsed: Duration,
    lat: Vec<f64>,
    /// The latencies of each call, acquire and release, where an operation is both.
    calls: Option<[Vec<f64>; 2]>,
    /// Operations the Redis commands are divided by, when not `ops`.
    counted: Option<usize>,
}

impl Sample {
    /// Adds another run of the same system: its operations, time and latencies.
    fn add(&mut self, other: Sample) {
        self.counted = match (self.counted, other.counted) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(self.ops) + b.unwrap_or(other.ops)),
        };
        self.ops += other.ops;
        self.elapsed += other.elapsed;
        self.lat.extend(other.lat);
        if let Some([acquire, release]) = other.calls {
            let [a, r] = self.calls.get_or_insert_default();
            a.extend(acquire);
            r.extend(release);
        }
    }

    fn row(&self, scenario: &'static str, system: &str, workers: usize, calls: Calls) -> Row {
        let mut lat = self.lat.clone();
        let counted = self.counted.unwrap_or(self.ops);
        let per_op = |n: u64| (counted > 0).then(|| n as f64 / counted as f64);
        let mut extra = Vec::new();
        let mut note = String::new();
        if let Some([acquire, release]) = &self.calls {
            let (mut acquire, mut release) = (acquire.clone(), release.clone());
            let quantiles = [
                percentile(&mut acquire, 0.5),
                percentile(&mut acquire, 0.99),
                percentile(&mut release, 0.5),
                percentile(&mut release, 0.99),
            ];
            note = format!(
                "acquire p50/p99 {} / {} µs, release {} / {} µs",
                fmt_us(Some(quantiles[0])),
                fmt_us(Some(quantiles[1])),
                fmt_us(Some(quantiles[2])),
                fmt_us(Some(quantiles[3])),
            );
            let names = [
                "acquire_p50_us",
                "acquire_p99_us",
                "release_p50_us",
                "release_p99_us",
            ];
            extra = names.into_iter().zip(quantiles).collect();
        }
        Row {
            ops_per_sec: Some(self.ops as f64 / self.elapsed.as_secs_f64()),
            p50_us: (!lat.is_empty()).then(|| percentile(&mut lat, 0.5)),
            p99_us: (!lat.is_empty()).then(|| percentile(&mut lat, 0.99)),
            commands_per_op: per_op(calls.sent),
            redis_calls_per_op: per_op(calls.all),
            redis_us_per_op: per_op(calls.server_us),
            extra,
            note,
            ..Row::empty(scenario, system, Some(workers))
        }
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The `q` quantile (nearest rank) of `values`; sorts them.
fn percentile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// Rounds the uncontended, parallel and axum runs are split into, the systems taking
/// turns.
const ROUNDS: usize = 5;

/// Runs `round(i, r)` for each system `i` in turn (Redis runs `in_script[i]` inside its
/// scripts), [`ROUNDS`] times, each round in a new order: each system's rounds summed,
/// with the commands Redis ran for them.
async fn interleaved<F, Fut>(
    stats: &mut Stats,
    in_script: &[&[&str]],
    round: F,
) -> Vec<(Sample, Calls)>
where
    F: Fn(usize, usize) -> Fut,
    Fut: Future<Output = Sample>,
{
    let n = in_script.len();
    let mut results: Vec<(Sample, Calls)> = (0..n).map(|_| Default::default()).collect();
    // Earlier steps' background work lands first; then the rounds run back to back, as
    // one continuous run would (a pause before each round made the round after it run
    // differently, and not alike for every system).
    let mut before = stats.snapshot().await;
    for r in 0..ROUNDS {
        for i in 0..n {
            let at = (i + r) % n;
            let sample = round(at, r).await;
            let after = stats.read().await;
            let calls = Stats::between(&before, &after, in_script[at]);
            before = after;
            let (total, total_calls) = &mut results[at];
            total.add(sample);
            total_calls.add(calls);
        }
    }
    results
}

/// One task, `n` lock + release cycles on distinct keys; each call timed too.
async fn uncontended(sys: Sys, n: usize, prefix: String) -> Sample {
    let mut lat = Vec::with_capacity(n);
    let [mut acquire, mut release] = [(); 2].map(|()| Vec::with_capacity(n));
    let started = Instant::now();
    for i in 0..n {
        let key = format!("{prefix}:{i}");
        let t = Instant::now();
        let held = sys.acquire(&key).await;
        let acquired = Instant::now();
        sys.release(held).await;
        let done = Instant::now();
        acquire.push(micros(acquired - t));
        release.push(micros(done - acquired));
        lat.push(micros(done - t));
    }
    Sample {
        ops: n,
        elapsed: started.elapsed(),
        lat,
        calls: Some([acquire, release]),
        counted: None,
    }
}

/// 32 tasks, each cycling on its own key, for `run`.
async fn parallel(sys: Sys, run: Duration, prefix: String) -> Sample {
    let started = Instant::now();
    let deadline = started + run;
    let tasks: Vec<_> = (0..PARALLEL_TASKS)
        .map(|t| {
            let sys = sys.clone();
            let key = format!("{prefix}:{t}");
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let held = sys.acquire(&key).await;
                    sys.release(held).await;
                    lat.push(micros(t.elapsed()));
                }
                lat
            })
        })
        .collect();
    gather(started, tasks, "parallel task").await
}

/// Joins tasks that each return their latencies: one sample, timed from `started`.
async fn gather(
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<Vec<f64>>>,
    what: &str,
) -> Sample {
    let mut sample = Sample::default();
    for task in tasks {
        sample.lat.extend(task.await.expect(what));
    }
    sample.elapsed = started.elapsed();
    sample.ops = sample.lat.len();
    sample
}

/// Shared state of a handoff run.
#[derive(Debug)]
struct Relay {
    /// Acquisitions so far, and whether the run is over.
    progress: watch::Sender<(usize, bool)>,
    /// Numbers the acquire calls in the order they start.
    tickets: AtomicUsize,
    /// The highest ticket served so far, and how many acquisitions were served after a
    /// later ticket (changed under `progress`'s lock).
    served: std::sync::Mutex<(Option<usize>, usize)>,
    /// When the last release was sent, in ns since `epoch`; 0 when none is pending.
    released_at: AtomicU64,
    epoch: Instant,
    /// Every acquisition, those after the end included (for commands per acquisition).
    all: AtomicUsize,
}

/// What a handoff run measured.
struct Handoff {
    sample: Sample,
    /// The time cap cut it short.
    cut_short: bool,
    /// Acquisitions served after one whose acquire call started later: 0 for a lock that
    /// serves first come first served. Each call takes a ticket as it starts; calls start
    /// about a hold apart (a task asks again once someone else took the lock), so only a
    /// call held up for longer than that between its ticket and Redis could be miscounted.
    overtakings: usize,
}

/// 8 tasks on one key, each holding it for [`HANDOFF_HOLD`]. After releasing, a task
/// waits until another one has acquired, so every acquisition is a handoff; latency is
/// from the release being sent to the next acquire returning.
async fn handoff(systems: Vec<Sys>, scale: Scale, key: &str) -> Handoff {
    let (progress, _) = watch::channel((0, false));
    let relay = Arc::new(Relay {
        tickets: AtomicUsize::new(0),
        served: std::sync::Mutex::new((None, 0)),
        progress,
        released_at: AtomicU64::new(0),
        epoch: Instant::now(),
        all: AtomicUsize::new(0),
    });
    let started = Instant::now();
    let tasks: Vec<_> = systems
        .into_iter()
        .map(|sys| {
            let relay = relay.clone();
            let key = key.to_owned();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut seen = relay.progress.subscribe();
                loop {
                    let ticket = relay.tickets.fetch_add(1, Ordering::AcqRel);
                    let held = sys.acquire(&key).await;
                    let now = relay.epoch.elapsed().as_nanos() as u64;
                    relay.all.fetch_add(1, Ordering::Relaxed);
                    let sent = relay.released_at.swap(0, Ordering::AcqRel);
                    let mut mine = 0;
                    let mut over = false;
                    relay.progress.send_modify(|(count, stop)| {
                        if !*stop {
                            *count += 1;
                            if sent != 0 {
                                lat.push((now - sent) as f64 / 1e3);
                            }
                            // The first round's calls all start at once: not counted.
                            if *count > HANDOFF_TASKS {
                                let mut served = relay.served.lock().unwrap();
                                if served.0.is_some_and(|highest| ticket < highest) {
                                    served.1 += 1;
                                }
                                served.0 = served.0.max(Some(ticket));
                            }
                            if *count >= scale.handoffs || started.elapsed() > scale.handoff_cap {
                                *stop = true;
                            }
                        }
                        mine = *count;
                        over = *stop;
                    });
                    tokio::time::sleep(HANDOFF_HOLD).await;
                    relay
                        .released_at
                        .store(relay.epoch.elapsed().as_nanos() as u64, Ordering::Release);
                    sys.release(held).await;
                    if over {
                        return lat;
                    }
                    // Wait until someone else has taken it.
                    let _ = seen.wait_for(|(count, stop)| *count > mine || *stop).await;
                    if seen.borrow().1 {
                        // The others may still be queued on the lock: let them drain.
                        continue;
                    }
                }
            })
        })
        .collect();
    let mut lat = Vec::new();
    let mut elapsed = None;
    let mut stop_rx = relay.progress.subscribe();
    let _ = stop_rx.wait_for(|(_, stop)| *stop).await;
    elapsed.get_or_insert(started.elapsed());
    for task in tasks {
        lat.extend(task.await.expect("handoff task"));
    }
    let ops = relay.progress.borrow().0;
    let overtakings = relay.served.lock().unwrap().1;
    Handoff {
        sample: Sample {
            ops,
            elapsed: elapsed.unwrap_or_default(),
            lat,
            calls: None,
            counted: Some(relay.all.load(Ordering::Relaxed)),
        },
        cut_short: ops < scale.handoffs,
        overtakings,
    }
}

/// 10,000 guards with a 3 s lease held for 15 s: renewals sent, client CPU, guards lost.
async fn watchdog(url: &str, stats: &mut Stats, workers: usize, scale: Scale) -> Row {
    let locker = Locker::connect(url).await.expect("connect lock-core");
    let n = scale.watchdog_guards;
    let guards: Vec<LockGuard> = futures_util::stream::iter(0..n)
        .map(|i| {
            let locker = locker.clone();
            async move {
                locker
                    .lock_with(
                        &format!("w{workers}:{i}"),
                        LockOptions::new().lease(WATCHDOG_LEASE).watchdog(true),
                    )
                    .await
                    .expect("lock-core lock")
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let before = stats.snapshot().await;
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    tokio::time::sleep(scale.hold).await;
    let calls = stats.delta(&before, CORE_IN_SCRIPT).await;
    let window = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    futures_util::stream::iter(guards)
        .for_each_concurrent(64, |guard| async move {
            guard.release().await.expect("lock-core release");
        })
        .await;

    let renewals = calls.sent as f64;
    let cpu_pct = cpu / window * 100.0;
    let expected = n as f64 / (WATCHDOG_LEASE.as_secs_f64() / 3.0);
    Row {
        ops_per_sec: Some(renewals / window),
        commands_per_op: (renewals > 0.0).then_some(1.0),
        redis_calls_per_op: (renewals > 0.0).then(|| calls.all as f64 / renewals),
        redis_us_per_op: (renewals > 0.0).then(|| calls.server_us as f64 / renewals),
        extra: vec![
            ("guards", n as f64),
            ("lease_s", WATCHDOG_LEASE.as_secs_f64()),
            ("hold_s", scale.hold.as_secs_f64()),
            ("expected_renewals_per_sec", expected),
            ("client_cpu_pct_of_one_core", cpu_pct),
            ("guards_lost", lost as f64),
        ],
        note: format!(
            "{n} guards, {:?} lease, held {:?}: renewals/s sent (expected {expected:.0}), \
             client CPU {cpu_pct:.1}% of one core, {lost} lost",
            WATCHDOG_LEASE, scale.hold
        ),
        ..Row::empty("watchdog", "lock-core", Some(workers))
    }
}

/// User + system CPU time of this process, from `/proc/self/stat` (USER_HZ = 100).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); `fields[0]` is field 3.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

const ROUTE: &str = "/accounts/{id}/deposit";

#[derive(Debug, Clone, Copy)]
enum App {
    Core,
    Raw,
    Rslock,
    None,
}

async fn ok() -> &'static str {
    "ok"
}

/// The hand-written route: the same two Redis calls as the layer, in the handler.
async fn raw_deposit(State(raw): State<Raw>, Path(id): Path<u64>) -> (StatusCode, &'static str) {
    let key = format!("rawhttp:{{{id}}}");
    let token = token();
    if !raw.try_acquire(&key, &token).await {
        return (StatusCode::LOCKED, "locked");
    }
    let body = ok().await;
    raw.release(&key, &token).await;
    (StatusCode::OK, body)
}

async fn rslock_deposit(
    State(manager): State<rslock::LockManager>,
    Path(id): Path<u64>,
) -> (StatusCode, &'static str) {
    let key = format!("rslockhttp:{{{id}}}");
    match manager.lock(key.as_str(), LEASE).await {
        Ok(lock) => {
            let body = ok().await;
            lock.release().await;
            (StatusCode::OK, body)
        }
        Err(_) => (StatusCode::LOCKED, "locked"),
    }
}

/// Distinct account ids across all HTTP runs.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// 64 loopback HTTP/1.1 connections posting to distinct accounts for `run`.
async fn http_load(
    app: App,
    locker: &Locker,
    raw: &Raw,
    manager: &rslock::LockManager,
    run: Duration,
) -> Sample {
    let router = match app {
        App::Core => Router::new()
            .route(ROUTE, post(ok))
            .route_layer(LockLayer::new(locker.clone(), "bench:{id}")),
        App::Raw => Router::new()
            .route(ROUTE, post(raw_deposit))
            .with_state(raw.clone()),
        App::Rslock => Router::new()
            .route(ROUTE, post(rslock_deposit))
            .with_state(manager.clone()),
        App::None => Router::new().route(ROUTE, post(ok)),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local addr");
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(HTTP_CONNECTIONS)
        .build_http();

    let started = Instant::now();
    let deadline = started + run;
    let tasks: Vec<_> = (0..HTTP_CONNECTIONS)
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
                    assert_eq!(response.status(), StatusCode::OK, "{app:?} route");
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

/// Client memory per held guard and per waiting task, from RSS deltas
/// (`VmRSS` in `/proc/self/status`) of a fresh child process per measurement, so that
/// memory freed by earlier scenarios and kept by the allocator does not hide growth.
mod memory {
    use super::*;

    const KINDS: [(&str, &str); 5] = [
        ("lock-core", "guards"),
        ("raw", "guards"),
        ("rslock", "guards"),
        ("lock-core", "waiters"),
        ("none", "waiters"),
    ];

    pub(crate) fn run(server: &RedisServer, workers: usize, scale: Scale, report: &mut Report) {
        let exe = std::env::current_exe().expect("current exe");
        let n = scale.memory_items;
        let mut per: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        for (system, what) in KINDS {
            let out = std::process::Command::new(&exe)
                .args(["--memory-child", system, what, &server.url()])
                .args([n.to_string(), workers.to_string()])
                .output()
                .expect("run the memory child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            if let Some(bytes) = stdout
                .lines()
                .find_map(|l| l.strip_prefix("future_bytes "))
                .and_then(|v| v.trim().parse::<f64>().ok())
            {
                per.insert((system, "future"), bytes);
            }
            let delta = stdout
                .lines()
                .find_map(|l| l.strip_prefix("rss_delta_bytes "))
                .and_then(|v| v.trim().parse::<f64>().ok());
            match delta {
                Some(delta) => {
                    per.insert((system, what), delta / n as f64);
                }
                None => println!(
                    "memory child {system} {what} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
        for system in ["lock-core", "raw", "rslock", "none"] {
            let guard = per.get(&(system, "guards")).copied();
            let waiter = per.get(&(system, "waiters")).copied();
            if guard.is_none() && waiter.is_none() {
                continue;
            }
            let mut row = Row::empty("memory", system, Some(workers));
            let mut notes = Vec::new();
            row.extra.push(("items", n as f64));
            if let Some(b) = guard {
                row.extra.push(("bytes_per_guard", b));
                notes.push(format!("{b:.0} B per held guard"));
            }
            if let Some(b) = per.get(&(system, "future")) {
                row.extra.push(("lock_with_future_bytes", *b));
                notes.push(format!("the lock_with future is {b:.0} B"));
            }
            if let Some(b) = waiter {
                row.extra.push(("bytes_per_waiter", b));
                notes.push(if system == "none" {
                    format!("{b:.0} B per parked tokio task (baseline)")
                } else {
                    format!("{b:.0} B per waiting task")
                });
            }
            row.note = format!("{} (RSS delta over {n})", notes.join(", "));
            report.push(row);
        }
    }

    fn rss_bytes() -> i64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// `--memory-child SYSTEM WHAT URL N WORKERS`: prints `rss_delta_bytes D`.
    pub(crate) fn child(args: &[String]) {
        let [system, what, url, n, workers] = args else {
            panic!("usage: --memory-child SYSTEM WHAT URL N WORKERS");
        };
        let n: usize = n.parse().expect("N");
        let workers: usize = workers.parse().expect("WORKERS");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .expect("build the tokio runtime");
        let settle = Duration::from_millis(500 + n as u64 / 5);
        let delta = rt.block_on(async {
            match (system.as_str(), what.as_str()) {
                ("lock-core", "guards") => {
                    let locker = Locker::connect(url).await.expect("connect");
                    let sys = Sys::Core(locker);
                    warm_up(&sys).await;
                    let before = rss_bytes();
                    let guards = hold_many(&sys, n).await;
                    tokio::time::sleep(settle).await;
                    let delta = rss_bytes() - before;
                    drop(guards);
                    delta
                }
                ("raw", "guards") => {
                    let sys = Sys::Raw(Raw::connect(url).await);
                    warm_up(&sys).await;
                    let before = rss_bytes();
                    let guards = hold_many(&sys, n).await;
                    tokio::time::sleep(settle).await;
                    let delta = rss_bytes() - before;
                    drop(guards);
                    delta
                }
                ("rslock", "guards") => {
                    let sys = Sys::Rslock(rslock::LockManager::new(vec![url.clone()]));
                    warm_up(&sys).await;
                    let before = rss_bytes();
                    let guards = hold_many(&sys, n).await;
                    tokio::time::sleep(settle).await;
                    let delta = rss_bytes() - before;
                    drop(guards);
                    delta
                }
                ("lock-core", "waiters") => {
                    let locker = Locker::connect(url).await.expect("connect");
                    warm_up(&Sys::Core(locker.clone())).await;
                    let _held = locker.lock("mem:held").await.expect("lock");
                    // What each waiting task carries inline: the `lock_with` future.
                    let future = locker.lock_with("mem:held", LockOptions::new());
                    println!("future_bytes {}", std::mem::size_of_val(&future));
                    drop(future);
                    let mut stats = Stats::connect(url).await;
                    let before = rss_bytes();
                    // Waiters arrive 64 at a time, as guards are taken, each batch once
                    // the previous one's first attempts were answered: 10,000 attempts
                    // in flight at once would leave their request buffers in the RSS.
                    let mut tasks = Vec::with_capacity(n);
                    while tasks.len() < n {
                        let batch = (n - tasks.len()).min(64);
                        let asked = stats.calls("evalsha").await;
                        tasks.extend((0..batch).map(|_| {
                            let locker = locker.clone();
                            tokio::spawn(async move {
                                let _ = locker
                                    .lock_with(
                                        "mem:held",
                                        LockOptions::new().wait(Duration::from_secs(300)),
                                    )
                                    .await;
                            })
                        }));
                        while stats.calls("evalsha").await < asked + batch as u64 {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    tokio::time::sleep(settle).await;
                    let delta = rss_bytes() - before;
                    drop(tasks);
                    delta
                }
                ("none", "waiters") => {
                    let notify = Arc::new(tokio::sync::Notify::new());
                    let before = rss_bytes();
                    let tasks: Vec<_> = (0..n)
                        .map(|_| {
                            let notify = notify.clone();
                            tokio::spawn(async move { notify.notified().await })
                        })
                        .collect();
                    tokio::time::sleep(settle).await;
                    let delta = rss_bytes() - before;
                    drop(tasks);
                    delta
                }
                other => panic!("unknown memory measurement {other:?}"),
            }
        });
        println!("rss_delta_bytes {delta}");
        // Do not wait for parked tasks or background releases: the server is private.
        std::process::exit(0);
    }

    async fn warm_up(sys: &Sys) {
        for i in 0..100 {
            let held = sys.acquire(&format!("mem:warm:{i}")).await;
            sys.release(held).await;
        }
    }

    async fn hold_many(sys: &Sys, n: usize) -> Vec<Held> {
        futures_util::stream::iter(0..n)
            .map(|i| async move { sys.acquire(&format!("mem:{i}")).await })
            .buffer_unordered(64)
            .collect()
            .await
    }
}

/// One line of the table and of the JSON.
#[derive(Debug, Clone)]
struct Row {
    scenario: &'static str,
    system: String,
    workers: Option<usize>,
    ops_per_sec: Option<f64>,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    /// Commands the client sent per operation.
    commands_per_op: Option<f64>,
    /// Commands Redis executed per operation, those inside scripts included.
    redis_calls_per_op: Option<f64>,
    /// Redis CPU time per operation, µs (`usec` of `INFO commandstats`).
    redis_us_per_op: Option<f64>,
    /// Scenario-specific figures (memory, CPU, lost guards).
    extra: Vec<(&'static str, f64)>,
    note: String,
}

impl Row {
    fn empty(scenario: &'static str, system: &str, workers: Option<usize>) -> Row {
        Row {
            scenario,
            system: system.to_owned(),
            workers,
            ops_per_sec: None,
            p50_us: None,
            p99_us: None,
            commands_per_op: None,
            redis_calls_per_op: None,
            redis_us_per_op: None,
            extra: Vec::new(),
            note: String::new(),
        }
    }

    fn extra(&self, name: &str) -> Option<f64> {
        self.extra.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }
}

#[derive(Debug, Default)]
struct Report {
    /// Median Redis round trip, µs, per worker count.
    rtt: BTreeMap<usize, f64>,
    rows: Vec<Row>,
    /// (system, workers, handoff latencies in µs), for the chart.
    handoff_latencies: Vec<(String, usize, Vec<f64>)>,
}

fn fmt_num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.decimals$}"))
}

fn fmt_us(v: Option<f64>) -> String {
    fmt_num(v, if v.is_some_and(|v| v >= 100.0) { 0 } else { 1 })
}

fn json_num(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.3}"),
        _ => "null".to_owned(),
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Report {
    fn push(&mut self, row: Row) {
        println!(
            "{:<12} {:<20} workers={} ops/s={} p50={}µs p99={}µs sent/op={} {}",
            row.scenario,
            row.system,
            fmt_num(row.workers.map(|w| w as f64), 0),
            fmt_num(row.ops_per_sec, 0),
            fmt_us(row.p50_us),
            fmt_us(row.p99_us),
            fmt_num(row.commands_per_op, 2),
            row.note
        );
        self.rows.push(row);
    }

    fn find(&self, scenario: &str, system: &str, workers: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.scenario == scenario && r.system == system && r.workers == Some(workers))
    }

    fn markdown(&self) -> String {
        let mut out = String::new();
        for (workers, rtt) in &self.rtt {
            let _ = writeln!(
                out,
                "Redis round trip (PING, median), {workers} worker(s): {rtt:.1} µs  "
            );
        }
        out.push('\n');
        out.push_str(
            "| scenario | system | workers | ops/s | p50 µs | p99 µs | cmds sent/op | redis calls/op | redis µs/op | notes |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.scenario,
                r.system,
                fmt_num(r.workers.map(|w| w as f64), 0),
                fmt_num(r.ops_per_sec, 0),
                fmt_us(r.p50_us),
                fmt_us(r.p99_us),
                fmt_num(r.commands_per_op, 2),
                fmt_num(r.redis_calls_per_op, 2),
                fmt_num(r.redis_us_per_op, 1),
                r.note
            );
        }
        out
    }

    fn json(&self) -> String {
        let rtt = self.rtt.get(&1).or_else(|| self.rtt.values().next());
        let mut out = format!("{{\"rtt_us\": {}, \"rows\": [", json_num(rtt.copied()));
        for (i, r) in self.rows.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let extra = if r.extra.is_empty() {
                "null".to_owned()
            } else {
                let fields: Vec<String> = r
                    .extra
                    .iter()
                    .map(|(k, v)| format!("{}: {}", json_str(k), json_num(Some(*v))))
                    .collect();
                format!("{{{}}}", fields.join(", "))
            };
            let _ = write!(
                out,
                "\n  {{\"scenario\": {}, \"system\": {}, \"workers\": {}, \"ops_per_sec\": {}, \
                 \"p50_us\": {}, \"p99_us\": {}, \"commands_per_op\": {}, \"extra\": {}, \"note\": {}}}",
                json_str(r.scenario),
                json_str(&r.system),
                r.workers
                    .map_or_else(|| "null".to_owned(), |w| w.to_string()),
                json_num(r.ops_per_sec),
                json_num(r.p50_us),
                json_num(r.p99_us),
                json_num(r.commands_per_op),
                extra,
                json_str(&r.note),
            );
        }
        out.push_str("\n]}\n");
        out
    }

    /// Which goals of issue 6 hold, from ratios measured in this run.
    fn goals(&self) -> String {
        let mut out = String::from(
            "## goals (ratios from this run)\n\n\
             | # | goal | workers | measured | holds |\n|---|---|---:|---|---|\n",
        );
        let mut line =
            |n: &str, goal: &str, workers: usize, measured: String, holds: Option<bool>| {
                let verdict = match holds {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "not measured",
                };
                let _ = writeln!(out, "| {n} | {goal} | {workers} | {measured} | {verdict} |");
            };
        let ratio = |a: Option<&Row>, b: Option<&Row>| -> Option<f64> {
            Some(a?.ops_per_sec? / b?.ops_per_sec?)
        };
        let show = |v: Option<f64>, unit: &str| fmt_num(v, 2) + unit;
        for workers in [1, 2] {
            let rtt = self.rtt.get(&workers).copied();
            let core = |s: &str| self.find(s, "lock-core", workers);
            // A handoff row's p50, as measured and in round trips (the one measured
            // beside the row).
            let p50_in_rtts = |h: Option<&Row>| {
                let p50 = h.and_then(|h| h.p50_us);
                let row_rtt = h.and_then(|h| h.extra("rtt_us")).or(rtt);
                let ratio = p50.zip(row_rtt).map(|(p, rtt)| p / rtt);
                (
                    format!(
                        "{} µs = {} ({} µs)",
                        fmt_us(p50),
                        show(ratio, "× RTT"),
                        fmt_num(row_rtt, 1)
                    ),
                    ratio,
                )
            };

            let r = ratio(
                core("uncontended"),
                self.find("uncontended", "raw", workers),
            );
            line(
                "1",
                "uncontended ≥ 0.95× raw",
                workers,
                show(r, "×"),
                r.map(|r| r >= 0.95),
            );

            let r = ratio(core("parallel"), self.find("parallel", "raw", workers));
            line(
                "2",
                "parallel ≥ 0.9× raw",
                workers,
                show(r, "×"),
                r.map(|r| r >= 0.9),
            );
            let r = ratio(core("parallel"), self.find("parallel", "rslock", workers));
            line(
                "2",
                "parallel ≥ 1.2× rslock",
                workers,
                show(r, "×"),
                r.map(|r| r >= 1.2),
            );

            for system in ["lock-core", "lock-core/8-lockers"] {
                let h = self.find("handoff", system, workers);
                let label = if system == "lock-core" {
                    ""
                } else {
                    " (8 Lockers)"
                };
                let (measured, p50) = p50_in_rtts(h);
                line(
                    "3",
                    &format!("handoff p50 ≤ 3× RTT{label}"),
                    workers,
                    measured,
                    p50.map(|r| r <= 3.0),
                );
                let p99 = h.and_then(|h| h.p99_us);
                line(
                    "3",
                    &format!("handoff p99 ≤ 1 ms{label}"),
                    workers,
                    format!("{} µs", fmt_us(p99)),
                    p99.map(|p| p <= 1000.0),
                );
                let cmds = h.and_then(|h| h.commands_per_op);
                line(
                    "3",
                    &format!("handoff ≤ 4 commands per acquisition{label}"),
                    workers,
                    format!(
                        "{} sent ({} run by Redis incl. in-script)",
                        fmt_num(cmds, 2),
                        fmt_num(h.and_then(|h| h.redis_calls_per_op), 2)
                    ),
                    cmds.map(|c| c <= 4.0),
                );
            }

            for system in ["lock-core", "lock-core/8-lockers"] {
                let h = self.find("fair-handoff", system, workers);
                let label = if system == "lock-core" {
                    ""
                } else {
                    " (8 Lockers)"
                };
                let overtakings = h.and_then(|h| h.extra("fifo_overtakings"));
                line(
                    "4",
                    &format!("fair handoff: FIFO held{label}"),
                    workers,
                    format!(
                        "served out of asking order {} times in {} acquisitions",
                        fmt_num(overtakings, 0),
                        fmt_num(h.and_then(|h| h.extra("acquisitions")), 0)
                    ),
                    overtakings.map(|n| n == 0.0),
                );
                let (measured, p50) = p50_in_rtts(h);
                line(
                    "4",
                    &format!("fair handoff p50 ≤ 4× RTT{label}"),
                    workers,
                    measured,
                    p50.map(|r| r <= 4.0),
                );
            }

            let w = core("watchdog");
            let lost = w.and_then(|w| w.extra("guards_lost"));
            line(
                "5",
                "watchdog: no guard lost",
                workers,
                format!("{} lost", fmt_num(lost, 0)),
                lost.map(|l| l == 0.0),
            );
            let cpu = w.and_then(|w| w.extra("client_cpu_pct_of_one_core"));
            line(
                "5",
                "watchdog: client CPU < 5% of one core",
                workers,
                format!(
                    "{}% ({} renewals/s)",
                    fmt_num(cpu, 1),
                    fmt_num(w.and_then(|w| w.ops_per_sec), 0)
                ),
                cpu.map(|c| c < 5.0),
            );

            let r = ratio(core("axum"), self.find("axum", "raw", workers));
            line(
                "6",
                "axum layer ≥ 0.85× hand-written route",
                workers,
                show(r, "×"),
                r.map(|r| r >= 0.85),
            );

            let m = core("memory");
            let guard = m.and_then(|m| m.extra("bytes_per_guard"));
            line(
                "7",
                "memory ≤ 1 KiB per held guard",
                workers,
                format!("{} B", fmt_num(guard, 0)),
                guard.map(|b| b <= 1024.0),
            );
            let waiter = m.and_then(|m| m.extra("bytes_per_waiter"));
            let task = self
                .find("memory", "none", workers)
                .and_then(|m| m.extra("bytes_per_waiter"));
            line(
                "7",
                "memory ≤ 512 B per waiting task",
                workers,
                format!(
                    "{} B (a bare parked task: {} B)",
                    fmt_num(waiter, 0),
                    fmt_num(task, 0)
                ),
                waiter.map(|b| b <= 512.0),
            );
            let net = waiter.zip(task).map(|(w, t)| w - t);
            line(
                "7",
                "memory ≤ 512 B per waiter, net of the task itself",
                workers,
                format!("{} B", fmt_num(net, 0)),
                net.map(|b| b <= 512.0),
            );
        }
        out
    }

    /// The handoff latency distributions (CDF, log time axis) as a small SVG.
    fn svg(&self) -> String {
        const W: f64 = 820.0;
        const H: f64 = 440.0;
        const LEFT: f64 = 60.0;
        const RIGHT: f64 = 250.0;
        const TOP: f64 = 40.0;
        const BOTTOM: f64 = 50.0;
        let all: Vec<f64> = self
            .handoff_latencies
            .iter()
            .flat_map(|(_, _, l)| l.iter().copied())
            .filter(|v| *v > 0.0)
            .collect();
        let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = all.iter().copied().fold(0.0, f64::max);
        let (d0, d1) = if all.is_empty() {
            (1, 6)
        } else {
            (
                lo.log10().floor() as i32,
                (hi.log10().ceil() as i32).max(lo.log10().floor() as i32 + 1),
            )
        };
        let pw = W - LEFT - RIGHT;
        let ph = H - TOP - BOTTOM;
        let x = |us: f64| LEFT + (us.max(1e-3).log10() - d0 as f64) / (d1 - d0) as f64 * pw;
        let y = |q: f64| TOP + (1.0 - q) * ph;

        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="22" font-size="14">Handoff latency (release sent → next acquire returns), CDF; dashed: 1 worker, solid: 2</text>"#
        );
        for d in d0..=d1 {
            let gx = x(10f64.powi(d));
            let label = match d {
                d if d < 3 => format!("{} µs", 10u64.pow(d.max(0) as u32)),
                d if d < 6 => format!("{} ms", 10u64.pow((d - 3) as u32)),
                d => format!("{} s", 10u64.pow((d - 6) as u32)),
            };
            let _ = writeln!(
                s,
                r##"<line x1="{gx:.1}" y1="{TOP}" x2="{gx:.1}" y2="{:.1}" stroke="#ddd"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
                TOP + ph,
                TOP + ph + 18.0
            );
        }
        for q in [0.0, 0.25, 0.5, 0.75, 1.0] {
            let gy = y(q);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{q}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                gy + 4.0
            );
        }
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">latency (log scale)</text>"##,
            LEFT + pw / 2.0,
            H - 10.0
        );
        if let Some(rtt) = self.rtt.get(&2).or_else(|| self.rtt.get(&1)) {
            for (v, label) in [(3.0 * rtt, "3× RTT"), (1000.0, "1 ms")] {
                let gx = x(v);
                let _ = writeln!(
                    s,
                    r##"<line x1="{gx:.1}" y1="{TOP}" x2="{gx:.1}" y2="{:.1}" stroke="#888" stroke-dasharray="2 3"/><text x="{gx:.1}" y="{:.1}" fill="#666" text-anchor="middle">{label}</text>"##,
                    TOP + ph,
                    TOP - 4.0
                );
            }
        }
        let color = |system: &str| match system {
            "lock-core" => "#1f77b4",
            "lock-core/8-lockers" => "#17becf",
            "lock-core fair" => "#9467bd",
            "lock-core/8-lockers fair" => "#e377c2",
            "raw" => "#2ca02c",
            "rslock" => "#d62728",
            _ => "#7f7f7f",
        };
        let mut legend_y = TOP + 10.0;
        for (system, workers, lat) in &self.handoff_latencies {
            if lat.is_empty() {
                continue;
            }
            let mut sorted = lat.clone();
            sorted.sort_by(f64::total_cmp);
            let n = sorted.len();
            let step = (n / 300).max(1);
            let mut points = String::new();
            for i in (0..n).step_by(step).chain([n - 1]) {
                let _ = write!(
                    points,
                    "{:.1},{:.1} ",
                    x(sorted[i]),
                    y((i + 1) as f64 / n as f64)
                );
            }
            let dash = if *workers == 1 {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let c = color(system);
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{points}"/>"#
            );
            let lx = LEFT + pw + 15.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{legend_y:.1}" x2="{:.1}" y2="{legend_y:.1}" stroke="{c}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{system}, {workers}w</text>"#,
                lx + 25.0,
                lx + 30.0,
                legend_y + 4.0
            );
            legend_y += 18.0;
        }
        s.push_str("</svg>\n");
        s
    }
}
