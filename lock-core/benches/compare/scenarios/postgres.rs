//! `postgres`: lock-core's PostgreSQL store beside a hand-written tokio-postgres floor, on
//! a PostgreSQL spawned for the scenario (lock-tests: `fsync=off`, loopback).
//!
//! - `uncontended` rows `lock-core/postgres` and `tokio-postgres`: the cycles of
//!   [`super::uncontended`], the two taking turns over [`ROUNDS`] rounds; then, untimed,
//!   a hundred cycles more each with every statement logged, to count what a cycle sends.
//! - `handoff` rows: the relay of [`super::handoff`], lock-core with one `Locker` and with
//!   8, and the floor waiting inside the server on 8 connections, each held to
//!   PostgreSQL's round trip (a prepared `SELECT 1`) measured beside it; then, untimed,
//!   fifty acquisitions more with every statement logged, to count what one sends.
//! - `read-heavy` rows `lock-core/postgres/read-write` and `.../exclusive`: the operations
//!   of [`super::read_heavy`] on one `Locker`.

use lock_core::Locker;
use lock_tests::{PostgresServer, TestServer};

use super::handoff::{TASKS, relay, relay_row};
use super::uncontended::cycles;
use super::{ROUNDS, Run, Scale, read_heavy};
use crate::floors::PostgresFloor;
use crate::measure::{PostgresStatements, Sample, postgres_round_trip};
use crate::report::Row;
use crate::systems::System;

/// The cycles each system runs with every statement logged, to count what a cycle sends.
const COUNTED_CYCLES: usize = 100;
/// The same for the handoff rows: acquisitions.
const COUNTED_HANDOFFS: usize = 50;

pub(crate) async fn run(run: &mut Run<'_>) {
    let workers = run.workers;
    let server = PostgresServer::spawn();
    let url = server.url();
    let scale = run.scale;
    let rtt = postgres_round_trip(&url, scale.rtt_samples).await;
    println!(
        "postgres on {} (spawned by lock-tests, fsync=off): round trip (prepared SELECT 1, median of {}) {rtt:.1} µs",
        server.addr(),
        scale.rtt_samples
    );
    run.report.postgres_rtt.insert(workers, rtt);

    let locker = Locker::postgres(&url)
        .await
        .expect("connect lock-core to postgres");
    let systems = [
        ("lock-core/postgres", System::LockCore(locker.clone())),
        (
            "tokio-postgres",
            System::PostgresFloor(PostgresFloor::connect(&url).await),
        ),
    ];
    uncontended(run, &server, &systems).await;

    let mut lockers = Vec::with_capacity(TASKS);
    let mut floors = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        let locker = Locker::postgres(&url).await.expect("connect lock-core");
        lockers.push(System::LockCore(locker));
        floors.push(System::PostgresFloorWaiting(
            PostgresFloor::connect(&url).await,
        ));
    }
    let rows = [
        (
            "lock-core/postgres",
            vec![System::LockCore(locker.clone()); TASKS],
            "8 tasks share one Locker",
        ),
        (
            "lock-core/postgres/8-lockers",
            lockers,
            "one Locker per task, as 8 replicas would",
        ),
        (
            "tokio-postgres/8-connections",
            floors,
            "the floor waiting inside the server, one connection per task",
        ),
    ];
    for (system, tasks, note) in rows {
        let rtt = postgres_round_trip(&url, scale.rtt_samples / 5).await;
        let name = format!("pg-handoff-{workers}:{system}");
        let timed = relay(tasks.clone(), scale, &name).await;
        let mut row = relay_row("handoff", system, workers, scale, rtt, &timed, note);
        let counted_scale = Scale {
            handoffs: COUNTED_HANDOFFS,
            ..scale
        };
        let mut acquisitions = 0;
        let counting = async {
            acquisitions = relay(tasks, counted_scale, &name).await.acquisitions;
        };
        let statements = PostgresStatements::count(&server, counting).await;
        statements.describe(&mut row, acquisitions);
        run.report.push(row);
    }

    let rows = read_heavy::compare(&locker, "lock-core/postgres", workers, scale.run).await;
    for row in rows {
        run.report.push(row);
    }
}

/// The uncontended cycles of `systems`, taking turns over [`ROUNDS`] rounds, a row each
/// with the statements a cycle sends.
async fn uncontended(run: &mut Run<'_>, server: &PostgresServer, systems: &[(&str, System)]) {
    let workers = run.workers;
    for (_, system) in systems {
        cycles(system.clone(), 10, format!("pg-u{workers}:warmup")).await;
    }
    let per_round = run.scale.cycles / ROUNDS;
    let mut totals: Vec<Sample> = systems.iter().map(|_| Sample::default()).collect();
    for r in 0..ROUNDS {
        for i in 0..systems.len() {
            let at = (i + r) % systems.len();
            let prefix = format!("pg-u{workers}:{r}:{at}");
            totals[at].add(cycles(systems[at].1.clone(), per_round, prefix).await);
        }
    }
    for ((name, system), sample) in systems.iter().zip(totals) {
        let prefix = format!("pg-u{workers}:counted");
        let counting = async {
            cycles(system.clone(), COUNTED_CYCLES, prefix).await;
        };
        let statements = PostgresStatements::count(server, counting).await;
        let mut row = Row::from_sample("uncontended", name, workers, &sample);
        statements.describe(&mut row, COUNTED_CYCLES);
        run.report.push(row);
    }
}
