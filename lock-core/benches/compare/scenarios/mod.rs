//! The scenarios, in the order they run, and how much work each does.
//!
//! All but `memory` and `instructions` run on the runtime of [`run`], once with 1 worker
//! thread and once with 2; those two run each of their measurements in a child process
//! of its own.

pub(crate) mod axum;
pub(crate) mod handoff;
pub(crate) mod instructions;
pub(crate) mod memory;
pub(crate) mod mysql;
pub(crate) mod parallel;
pub(crate) mod postgres;
pub(crate) mod read_heavy;
pub(crate) mod scale_out;
pub(crate) mod semaphore;
pub(crate) mod uncontended;
pub(crate) mod watchdog;
pub(crate) mod writer_wait;
pub(crate) mod zookeeper;

use std::time::Duration;

use lock_core::Locker;

use crate::measure::{self, Calls, Sample, Stats};
use crate::report::{Report, Row};
use crate::systems::System;

/// Every scenario, in the order they run.
pub(crate) const SCENARIOS: &[&str] = &[
    "uncontended",
    "parallel",
    "handoff",
    "fair-handoff",
    "read-heavy",
    "semaphore",
    "writer-wait",
    "watchdog",
    "axum",
    "scale-out",
    "zookeeper",
    "mysql",
    "postgres",
    "memory",
    "instructions",
];

/// How much work each scenario does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scale {
    /// `PING`s for the round trip at the start of a runtime (a fifth as many beside each
    /// handoff row).
    pub(crate) rtt_samples: usize,
    /// Uncontended lock + release cycles per system.
    pub(crate) cycles: usize,
    /// How long each system runs in parallel and axum.
    pub(crate) run: Duration,
    /// Acquisitions per handoff row, and the time they may take at most.
    pub(crate) handoffs: usize,
    pub(crate) handoff_cap: Duration,
    /// Guards the watchdog renews, and for how long.
    pub(crate) watchdog_guards: usize,
    pub(crate) watchdog_hold: Duration,
    /// Guards held, or tasks waiting, per memory measurement.
    pub(crate) memory_items: usize,
    /// The zookeeper scenario's uncontended cycles per system, acquisitions per handoff
    /// row, and read-heavy time: ZooKeeper fsyncs every write.
    pub(crate) zookeeper_cycles: usize,
    pub(crate) zookeeper_handoffs: usize,
    pub(crate) zookeeper_run: Duration,
}

impl Scale {
    pub(crate) fn full() -> Self {
        Self {
            rtt_samples: 5_000,
            cycles: 20_000,
            run: Duration::from_secs(5),
            handoffs: 2_000,
            handoff_cap: Duration::from_secs(60),
            watchdog_guards: 10_000,
            watchdog_hold: Duration::from_secs(15),
            memory_items: 10_000,
            zookeeper_cycles: 1_000,
            zookeeper_handoffs: 500,
            zookeeper_run: Duration::from_secs(5),
        }
    }

    pub(crate) fn quick() -> Self {
        Self {
            rtt_samples: 1_000,
            cycles: 2_000,
            run: Duration::from_secs(1),
            handoffs: 200,
            handoff_cap: Duration::from_secs(8),
            watchdog_guards: 2_000,
            watchdog_hold: Duration::from_secs(4),
            memory_items: 2_000,
            zookeeper_cycles: 100,
            zookeeper_handoffs: 50,
            zookeeper_run: Duration::from_millis(500),
        }
    }

    /// This scale with the zookeeper scenario's handoffs.
    pub(crate) fn zookeeper(self) -> Self {
        Self {
            handoffs: self.zookeeper_handoffs,
            ..self
        }
    }
}

/// What the scenarios of one runtime share.
#[derive(Debug)]
pub(crate) struct Run<'a> {
    pub(crate) url: &'a str,
    pub(crate) workers: usize,
    pub(crate) scale: Scale,
    pub(crate) stats: Stats,
    pub(crate) report: &'a mut Report,
    /// lock-core's `Locker` on this runtime.
    pub(crate) locker: Locker,
    /// The systems compared, each connected once on this runtime: lock-core (on
    /// `locker`), raw-fenced, raw, rslock.
    pub(crate) systems: [System; 4],
}

impl Run<'_> {
    /// The system called `name` among [`Run::systems`].
    pub(crate) fn system(&self, name: &str) -> System {
        self.systems
            .iter()
            .find(|s| s.name() == name)
            .unwrap_or_else(|| panic!("no system {name:?}"))
            .clone()
    }
}

/// Runs the scenarios of `only` but memory and instructions on the current runtime, of `workers` threads.
pub(crate) async fn run(
    url: &str,
    workers: usize,
    scale: Scale,
    only: &[&str],
    report: &mut Report,
) {
    let rtt = measure::round_trip(url, scale.rtt_samples).await;
    println!(
        "redis round trip (PING, median of {}): {rtt:.1} µs",
        scale.rtt_samples
    );
    report.rtt.insert(workers, rtt);

    let locker = Locker::connect(url).await.expect("connect lock-core");
    let systems = [
        System::LockCore(locker.clone()),
        System::raw_fenced(url).await,
        System::raw(url).await,
        System::rslock(url),
    ];
    // Connections opened and scripts loaded before anything is counted.
    for system in &systems {
        for i in 0..100 {
            let held = system.acquire(&format!("warmup:{workers}:{i}")).await;
            system.release(held).await;
        }
    }
    let mut run = Run {
        url,
        workers,
        scale,
        stats: Stats::connect(url).await,
        report,
        locker,
        systems,
    };

    if only.contains(&"uncontended") {
        uncontended::run(&mut run).await;
    }
    if only.contains(&"parallel") {
        parallel::run(&mut run).await;
    }
    if only.contains(&"handoff") {
        handoff::run(&mut run).await;
    }
    if only.contains(&"fair-handoff") {
        handoff::run_fair(&mut run).await;
    }
    if only.contains(&"read-heavy") {
        read_heavy::run(&mut run).await;
    }
    if only.contains(&"semaphore") {
        semaphore::run(&mut run).await;
    }
    if only.contains(&"writer-wait") {
        writer_wait::run(&mut run).await;
    }
    if only.contains(&"watchdog") {
        watchdog::run(&mut run).await;
    }
    if only.contains(&"axum") {
        axum::run(&mut run).await;
    }
    if only.contains(&"scale-out") {
        scale_out::run(&mut run).await;
    }
    if only.contains(&"zookeeper") {
        zookeeper::run(&mut run).await;
    }
    if only.contains(&"mysql") {
        mysql::run(&mut run).await;
    }
    if only.contains(&"postgres") {
        postgres::run(&mut run).await;
    }
}

/// Rounds that uncontended, parallel and axum are split into, the systems taking turns.
pub(crate) const ROUNDS: usize = 5;

/// Runs `round(system, r)` for each of `systems` in turn, [`ROUNDS`] times, each round in
/// a new order, so that a change in the machine's load falls on all of them alike. Returns
/// each system's rounds summed, with the commands Redis ran for them.
pub(crate) async fn take_turns<F, Fut>(
    stats: &mut Stats,
    systems: &[System],
    round: F,
) -> Vec<(Sample, Calls)>
where
    F: Fn(System, usize) -> Fut,
    Fut: Future<Output = Sample>,
{
    let n = systems.len();
    let mut results: Vec<(Sample, Calls)> = (0..n).map(|_| Default::default()).collect();
    // Earlier steps' background work lands first; then the rounds run back to back, as
    // one continuous run would (a pause before each round made the round after it run
    // differently, and not alike for every system).
    let mut before = stats.read_settled().await;
    for r in 0..ROUNDS {
        for i in 0..n {
            let at = (i + r) % n;
            let sample = round(systems[at].clone(), r).await;
            let after = stats.read().await;
            let calls = Calls::between(&before, &after, systems[at].in_script());
            before = after;
            let (total, total_calls) = &mut results[at];
            total.add(sample);
            total_calls.add(calls);
        }
    }
    results
}

/// The rows of a scenario whose systems took turns: one per system, its commands counted
/// per operation.
pub(crate) fn rows(
    scenario: &'static str,
    workers: usize,
    systems: &[System],
    results: Vec<(Sample, Calls)>,
) -> Vec<Row> {
    systems
        .iter()
        .zip(results)
        .map(|(system, (sample, calls))| {
            Row::from_sample(scenario, system.name(), workers, &sample)
                .with_calls(calls, sample.ops)
        })
        .collect()
}
