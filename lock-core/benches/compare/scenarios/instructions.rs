//! `instructions`: the client's instructions per uncontended lock + release cycle, counted
//! by `valgrind --tool=callgrind`, which counts the same whatever else the machine runs.
//!
//! For each system the parent runs `valgrind --tool=callgrind <this program>
//! --instructions-child SYSTEM URL N` twice, with [`WARM_UP`] cycles and with
//! [`WARM_UP`] + [`COUNTED`], and reads the instructions each run collected (every thread
//! of the child: the runtime's, the connection's, the program's start and end); the
//! difference over [`COUNTED`] is one cycle's. The child runs one worker thread, as the
//! `uncontended` row with 1 worker does. Without valgrind on the `PATH` the scenario says
//! so and adds no row.

use std::process::Command;

use super::uncontended;
use crate::report::{Report, Row};
use crate::systems::System;

/// Cycles run before the ones counted, in both runs: connections opened, scripts loaded,
/// caches warm.
const WARM_UP: usize = 200;
/// Cycles counted: the difference between the two runs.
const COUNTED: usize = 2_000;
/// The systems counted.
const SYSTEMS: [&str; 3] = ["lock-core", "raw-fenced", "rslock"];

/// One row per system, from two runs of a child under callgrind.
pub(crate) fn run(url: &str, report: &mut Report) {
    if Command::new("valgrind").arg("--version").output().is_err() {
        println!("instructions: valgrind is not installed; no row");
        return;
    }
    for system in SYSTEMS {
        let (Some(warm), Some(counted)) = (
            collected(system, url, WARM_UP),
            collected(system, url, WARM_UP + COUNTED),
        ) else {
            continue;
        };
        let per_cycle = counted.saturating_sub(warm) as f64 / COUNTED as f64;
        let mut row = Row::new("instructions", system, 1);
        row.extra.insert("client_instructions_per_cycle", per_cycle);
        row.note = format!(
            "{:.1}k client instructions per uncontended cycle (callgrind, {COUNTED} cycles)",
            per_cycle / 1000.0
        );
        report.push(row);
    }
}

/// The instructions callgrind collected in a child that ran `cycles` cycles of `system`;
/// `None` (said on stdout) if it failed.
fn collected(system: &str, url: &str, cycles: usize) -> Option<u64> {
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(exe)
        .args(["--instructions-child", system, url, &cycles.to_string()])
        .output()
        .expect("run valgrind");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // callgrind ends with `==<pid>== Collected : <instructions>`.
    let counted = stderr.lines().find_map(|line| {
        let (_, count) = line.split_once("Collected :")?;
        count.trim().parse().ok()
    });
    if counted.is_none() || !out.status.success() {
        println!("instructions child {system} {cycles} failed: {stderr}");
        return None;
    }
    counted
}

/// `--instructions-child SYSTEM URL N`: `N` uncontended cycles of `SYSTEM`.
pub(crate) fn child(args: &[String]) {
    let [system, url, n] = args else {
        panic!("usage: --instructions-child SYSTEM URL N");
    };
    let n: usize = n.parse().expect("N");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("build the tokio runtime");
    rt.block_on(async {
        let system = System::connect(system, url).await;
        let prefix = format!("instructions:{}", std::process::id());
        uncontended::cycles(system, n, prefix).await;
    });
}
