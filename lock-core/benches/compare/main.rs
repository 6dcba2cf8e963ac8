//! lock-core side by side with the raw redis-rs floors and the `rslock` crate, in one
//! process and one run, so that ratios mean something on a noisy machine.
//!
//! Run with: `cargo bench -p lock-core --bench compare` (add `-- --quick`, or set
//! `COMPARE_QUICK=1`, for a run of about a minute; `-- --only handoff,fair-handoff` runs
//! just those scenarios).
//!
//! The program spawns its own `redis-server` (lock-tests), then, on a tokio runtime of 1
//! and then 2 worker threads, measures the Redis round trip and runs every scenario. It
//! prints one markdown table and which goals hold, and writes `compare.json` and
//! `handoff.svg` to `$CARGO_TARGET_DIR/bench/` (default `target/bench/`).
//!
//! - [`systems`]: the locks compared, and how each takes and gives back a lock.
//! - [`floors`]: each store's bare client, the floor for lock-core's store of it.
//! - [`scenarios`]: what each scenario runs, and how much of it ([`scenarios::Scale`]).
//! - [`measure`]: the instruments (round trip, Redis's command counts, latencies, CPU, RSS).
//! - [`report`]: the rows, the table, the goals, `compare.json` and `handoff.svg`.

mod floors;
mod measure;
mod report;
mod scenarios;
mod systems;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lock_tests::RedisServer;

use report::Report;
use scenarios::{SCENARIOS, Scale};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // The memory and instructions scenarios run each measurement in a fresh copy of this
    // program.
    if let Some(at) = args.iter().position(|a| a == "--memory-child") {
        scenarios::memory::child(&args[at + 1..]);
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "--instructions-child") {
        scenarios::instructions::child(&args[at + 1..]);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick")
        || std::env::var("COMPARE_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let scale = if quick { Scale::quick() } else { Scale::full() };
    let only = only(&args);
    let started = Instant::now();

    let server = RedisServer::spawn();
    let url = server.url();
    println!(
        "# lock-core vs raw-fenced vs raw redis-rs vs rslock ({} run)\n",
        if quick { "quick" } else { "full" }
    );
    println!(
        "redis-server on {url} (spawned by lock-tests), {} CPUs",
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
        rt.block_on(scenarios::run(&url, workers, scale, &only, &mut report));
        rt.shutdown_timeout(Duration::from_secs(5));
    }
    if only.contains(&"memory") {
        for workers in [1, 2] {
            scenarios::memory::run(&url, workers, scale, &mut report);
        }
    }
    if only.contains(&"instructions") {
        scenarios::instructions::run(&url, &mut report);
    }

    println!("\n## results\n");
    print!("{}", report.table());
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

/// The scenarios `--only a,b` names, else all of them; exits on a name it does not know.
fn only(args: &[String]) -> Vec<&'static str> {
    let Some(at) = args.iter().position(|a| a == "--only") else {
        return SCENARIOS.to_vec();
    };
    let list = args.get(at + 1).map_or("", String::as_str);
    let mut only = Vec::new();
    for name in list.split(',') {
        match SCENARIOS.iter().find(|s| **s == name) {
            Some(scenario) => only.push(*scenario),
            None => {
                eprintln!(
                    "unknown scenario {name:?}; --only takes a comma-separated list of {SCENARIOS:?}"
                );
                std::process::exit(2);
            }
        }
    }
    only
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
