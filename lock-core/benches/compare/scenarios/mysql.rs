//! `mysql`: lock-core's MySQL store beside a hand-written mysql_async floor, on a MariaDB
//! spawned for the scenario (lock-tests, `innodb_flush_log_at_trx_commit=2`).
//!
//! - `uncontended` rows `lock-core/mysql` and `mysql-floor`: lock + release cycles on
//!   distinct names, taking turns over [`ROUNDS`] rounds. The floor is what a careful
//!   hand-written client does on one connection: `GET_LOCK(name, 0)`, the fence upsert
//!   (`INSERT .. ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)`), then
//!   `RELEASE_LOCK(name)`: three round trips, no lost-hold detection, no waiting.
//! - `handoff` rows: the relay of [`super::handoff`], lock-core with one `Locker` and
//!   with 8, and `mysql-floor/8-connections`, the floor waiting inside the server (one
//!   connection per task: a session's `GET_LOCK`s of one name stack), held to the
//!   server's round trip (`SELECT 1`) measured beside them.

use std::time::Instant;

use lock_core::Locker;
use lock_tests::MariaDbServer;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::handoff::{TASKS, relay, relay_row};
use super::uncontended::{cycles, timed_cycles};
use super::{ROUNDS, Run};
use crate::floors::MySqlFloor;
use crate::measure::{Sample, micros, percentile};
use crate::report::Row;
use crate::systems::System;

/// The floor's fence table.
const FLOOR_FENCES: &str = MySqlFloor::TABLE;

pub(crate) async fn run(run: &mut Run<'_>) {
    let workers = run.workers;
    let server = MariaDbServer::spawn();
    let url = server.url();
    let mut floor = Conn::from_url(url.as_str())
        .await
        .expect("connect the floor to mariadb");
    floor
        .query_drop(format!(
            "CREATE TABLE {FLOOR_FENCES} (name VARBINARY(255) PRIMARY KEY, \
             token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB"
        ))
        .await
        .expect("create the floor's fence table");
    let rtt = round_trip(&mut floor, run.scale.rtt_samples / 5).await;
    println!(
        "mariadb on {url} (spawned by lock-tests): round trip (SELECT 1, median of {}) {rtt:.1} µs",
        run.scale.rtt_samples / 5
    );
    let locker = Locker::mysql(&url)
        .await
        .expect("connect lock-core to mariadb");

    let per_round = run.scale.zookeeper_cycles / ROUNDS;
    let mut ours = Sample::default();
    let mut theirs = Sample::default();
    cycles(
        System::LockCore(locker.clone()),
        10,
        format!("m{workers}:warmup"),
    )
    .await;
    floor_cycles(&mut floor, 10, &format!("f{workers}:warmup")).await;
    for r in 0..ROUNDS {
        let prefix = format!("m{workers}:{r}");
        ours.add(cycles(System::LockCore(locker.clone()), per_round, prefix).await);
        theirs.add(floor_cycles(&mut floor, per_round, &format!("f{workers}:{r}")).await);
    }
    for (name, sample, note) in [
        (
            "lock-core/mysql",
            &ours,
            "GET_LOCK and the fence in one statement, RELEASE_LOCK",
        ),
        (
            "mysql-floor",
            &theirs,
            "GET_LOCK, fence upsert, RELEASE_LOCK: 3 statements",
        ),
    ] {
        let mut row = Row::from_sample("uncontended", name, workers, sample);
        row.extra.insert("rtt_us", rtt);
        if let Some(p50) = percentile(&mut sample.lat.clone(), 0.5) {
            row.extra.insert("p50_in_rtts", p50 / rtt);
        }
        row.note = note.to_owned();
        run.report.push(row);
    }

    let mut lockers = Vec::with_capacity(TASKS);
    let mut floors = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        let locker = Locker::mysql(&url).await.expect("connect lock-core");
        lockers.push(System::LockCore(locker));
        floors.push(System::MySqlFloorWaiting(MySqlFloor::connect(&url).await));
    }
    let rows = [
        (
            "lock-core/mysql",
            vec![System::LockCore(locker.clone()); TASKS],
            "8 tasks share one Locker",
        ),
        (
            "lock-core/mysql/8-lockers",
            lockers,
            "one Locker per task, as 8 replicas would",
        ),
        (
            "mysql-floor/8-connections",
            floors,
            "the floor waiting inside the server, one connection per task",
        ),
    ];
    let scale = run.scale.zookeeper();
    for (i, (system, tasks, note)) in rows.into_iter().enumerate() {
        let rtt = round_trip(&mut floor, run.scale.rtt_samples / 5).await;
        let relay = relay(tasks, scale, &format!("h{workers}:m{i}")).await;
        let row = relay_row("handoff", system, workers, scale, rtt, &relay, note);
        run.report.push(row);
    }
}

/// The server's round trip: the median of `samples` `SELECT 1`s, µs.
async fn round_trip(conn: &mut Conn, samples: usize) -> f64 {
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let _: Option<i64> = conn.query_first("SELECT 1").await.expect("SELECT 1");
        times.push(micros(t.elapsed()));
    }
    percentile(&mut times, 0.5).unwrap_or_default()
}

/// `n` cycles of the floor on the names `{prefix}:{i}`.
async fn floor_cycles(conn: &mut Conn, n: usize, prefix: &str) -> Sample {
    let upsert = format!(
        "INSERT INTO {FLOOR_FENCES} (name, token) VALUES (?, LAST_INSERT_ID(1)) \
         ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)"
    );
    timed_cycles(n, prefix, async |name| {
        let got: Option<i64> = conn
            .exec_first("SELECT GET_LOCK(?, 0)", (name,))
            .await
            .expect("GET_LOCK");
        assert_eq!(got, Some(1), "the floor's lock {name} was taken");
        conn.exec_drop(&upsert, (name,))
            .await
            .expect("fence upsert");
        assert!(conn.last_insert_id().is_some_and(|f| f > 0), "no fence");
        let acquired = Instant::now();
        let _: Option<i64> = conn
            .exec_first("SELECT RELEASE_LOCK(?)", (name,))
            .await
            .expect("RELEASE_LOCK");
        acquired
    })
    .await
}
