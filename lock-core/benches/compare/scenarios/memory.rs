//! `memory`: client memory per held guard and per waiting task, from RSS deltas
//! (`VmRSS` of `/proc/self/status`) of a fresh child process per measurement, so that
//! memory freed by earlier scenarios and kept by the allocator does not hide growth.
//!
//! The parent runs `<this program> --memory-child SYSTEM WHAT URL N WORKERS`, which
//! prints `rss_delta_bytes D` (and, for lock-core's waiters, `future_bytes B`, the size of
//! the `lock_with` future each waiting task carries).

use std::process::Command;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lock_core::{LockOptions, Locker};

use super::Scale;
use crate::measure::{Stats, rss_bytes};
use crate::report::{Report, Row};
use crate::systems::{Held, System};

/// What is measured of each system: the guards it holds, or its tasks waiting for a held
/// lock. `none`'s waiters are bare tokio tasks parked on a `Notify`: the baseline cost of
/// a task.
const MEASUREMENTS: [(&str, &[&str]); 5] = [
    ("lock-core", &["guards", "waiters"]),
    ("raw-fenced", &["guards"]),
    ("raw", &["guards"]),
    ("rslock", &["guards"]),
    ("none", &["waiters"]),
];

/// One row per system, each figure from a child process of its own.
pub(crate) fn run(url: &str, workers: usize, scale: Scale, report: &mut Report) {
    let n = scale.memory_items;
    for (system, kinds) in MEASUREMENTS {
        let mut row = Row::new("memory", system, workers);
        for &what in kinds {
            let Some(child) = measure_in_child(system, what, url, n, workers) else {
                continue;
            };
            let figure = match what {
                "guards" => "bytes_per_guard",
                _ => "bytes_per_waiter",
            };
            row.extra.insert(figure, child.rss_delta as f64 / n as f64);
            if let Some(bytes) = child.future_bytes {
                row.extra.insert("lock_with_future_bytes", bytes as f64);
            }
        }
        if row.extra.is_empty() {
            continue;
        }
        row.extra.insert("items", n as f64);
        row.note = note(&row, n);
        report.push(row);
    }
}

fn note(row: &Row, n: usize) -> String {
    let mut notes = Vec::new();
    if let Some(b) = row.extra("bytes_per_guard") {
        notes.push(format!("{b:.0} B per held guard"));
    }
    if let Some(b) = row.extra("lock_with_future_bytes") {
        notes.push(format!("the lock_with future is {b:.0} B"));
    }
    if let Some(b) = row.extra("bytes_per_waiter") {
        notes.push(if row.system == "none" {
            format!("{b:.0} B per parked tokio task (baseline)")
        } else {
            format!("{b:.0} B per waiting task")
        });
    }
    format!("{} (RSS delta over {n})", notes.join(", "))
}

/// What a child printed.
#[derive(Debug)]
struct ChildOutput {
    rss_delta: i64,
    future_bytes: Option<usize>,
}

/// Runs one measurement in a child process; `None` (said on stdout) if it failed.
fn measure_in_child(
    system: &str,
    what: &str,
    url: &str,
    n: usize,
    workers: usize,
) -> Option<ChildOutput> {
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new(exe)
        .args(["--memory-child", system, what, url])
        .args([n.to_string(), workers.to_string()])
        .output()
        .expect("run the memory child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(rss_delta) = printed(&stdout, "rss_delta_bytes") else {
        println!(
            "memory child {system} {what} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    };
    Some(ChildOutput {
        rss_delta,
        future_bytes: printed(&stdout, "future_bytes"),
    })
}

/// The value of the line `{name} {value}` of `stdout`.
fn printed<T: FromStr>(stdout: &str, name: &str) -> Option<T> {
    stdout.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok())?
    })
}

/// `--memory-child SYSTEM WHAT URL N WORKERS`: one measurement, printed on stdout.
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
    // Time for the last items to settle (and their allocations to show) before RSS is read.
    let settle = Duration::from_millis(500 + n as u64 / 5);
    let delta = rt.block_on(async {
        match (system.as_str(), what.as_str()) {
            (_, "guards") => guards(&System::connect(system, url).await, n, settle).await,
            ("lock-core", "waiters") => lock_core_waiters(url, n, settle).await,
            ("none", "waiters") => parked_tasks(n, settle).await,
            other => panic!("unknown memory measurement {other:?}"),
        }
    });
    println!("rss_delta_bytes {delta}");
    // Do not wait for parked tasks or background releases: the server is private.
    std::process::exit(0);
}

/// Connections opened and scripts loaded before RSS is first read.
async fn warm_up(system: &System) {
    for i in 0..100 {
        let held = system.acquire(&format!("mem:warm:{i}")).await;
        system.release(held).await;
    }
}

/// RSS growth while `system` holds `n` guards.
async fn guards(system: &System, n: usize, settle: Duration) -> i64 {
    warm_up(system).await;
    let before = rss_bytes();
    let held: Vec<Held> = futures_util::stream::iter(0..n)
        .map(|i| async move { system.acquire(&format!("mem:{i}")).await })
        .buffer_unordered(64)
        .collect()
        .await;
    tokio::time::sleep(settle).await;
    let delta = rss_bytes() - before;
    drop(held);
    delta
}

/// RSS growth while `n` tasks wait for a lock that lock-core holds.
async fn lock_core_waiters(url: &str, n: usize, settle: Duration) -> i64 {
    let locker = Locker::connect(url).await.expect("connect");
    let system = System::LockCore(locker.clone());
    warm_up(&system).await;
    let _held = locker.lock("mem:held").await.expect("lock");
    // What each waiting task carries inline: the `lock_with` future.
    let future = locker.lock_with("mem:held", LockOptions::new());
    println!("future_bytes {}", std::mem::size_of_val(&future));
    drop(future);

    let mut stats = Stats::connect(url).await;
    let before = rss_bytes();
    // Waiters arrive 64 at a time, each batch once the previous one's first attempts were
    // answered: 10,000 attempts in flight at once would leave their request buffers in
    // the RSS.
    let mut tasks = Vec::with_capacity(n);
    while tasks.len() < n {
        let batch = (n - tasks.len()).min(64);
        let asked = stats.calls("evalsha").await;
        tasks.extend((0..batch).map(|_| {
            let locker = locker.clone();
            tokio::spawn(async move {
                let wait = LockOptions::new().wait(Duration::from_secs(300));
                let _ = locker.lock_with("mem:held", wait).await;
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

/// RSS growth while `n` bare tasks are parked on a `Notify`.
async fn parked_tasks(n: usize, settle: Duration) -> i64 {
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
