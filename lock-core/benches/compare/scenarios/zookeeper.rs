//! `zookeeper`: lock-core's ZooKeeper store beside zookeeper-client's own lock, on a
//! standalone ZooKeeper spawned for the scenario (lock-tests, with the server's default
//! `forceSync=yes`: every write is fsynced before it is answered).
//!
//! - `uncontended` rows `lock-core/zookeeper` and `zookeeper-client`: the cycles of
//!   [`super::uncontended`], the two taking turns over [`ROUNDS`] rounds.
//! - `handoff` rows: the relay of [`super::handoff`], lock-core with one `Locker` and with
//!   8, zookeeper-client with one session and with 8. Each is held to ZooKeeper's read
//!   round trip measured beside it, from the release's reply.
//! - `read-heavy` rows `lock-core/zookeeper/read-write` and `.../exclusive`: the
//!   operations of [`super::read_heavy`] on one `Locker`; zookeeper-client has no
//!   read-write lock.
//!
//! Every row but read-heavy's counts what the server did for it (`mntr`): requests, writes
//! and fsyncs. The handoff and read-heavy rows start once the server has reaped the empty
//! lock nodes of the rows before them.

use std::time::{Duration, Instant};

use lock_core::Locker;
use lock_tests::ZooKeeperServer;

use super::handoff::{TASKS, relay, relay_row};
use super::uncontended::cycles;
use super::{ROUNDS, Run, read_heavy};
use crate::floors::ZooKeeperLock;
use crate::measure::{Sample, ZooKeeperRoundTrips, ZooKeeperWork};
use crate::report::Row;
use crate::systems::System;

pub(crate) async fn run(run: &mut Run<'_>) {
    let workers = run.workers;
    let server = ZooKeeperServer::spawn();
    let connect = server.connect_string();
    let scale = run.scale;
    let round_trips = ZooKeeperRoundTrips::measure(&connect, scale.rtt_samples / 5).await;
    println!(
        "zookeeper on {connect} (spawned by lock-tests, forceSync=yes): round trip (median of {}) {:.1} µs to read (exists), {:.1} µs to write (setData, fsynced)",
        scale.rtt_samples / 5,
        round_trips.read,
        round_trips.write
    );
    run.report.zookeeper_rtt.insert(workers, round_trips);

    let locker = Locker::zookeeper(&connect)
        .await
        .expect("connect lock-core to zookeeper");
    let peer = System::ZooKeeperClient(ZooKeeperLock::connect(&connect).await);
    let systems = [
        ("lock-core/zookeeper", System::LockCore(locker.clone())),
        ("zookeeper-client", peer.clone()),
    ];
    uncontended(run, &server, &systems).await;

    let mut lockers = Vec::with_capacity(TASKS);
    let mut clients = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        let locker = Locker::zookeeper(&connect)
            .await
            .expect("connect lock-core");
        lockers.push(System::LockCore(locker));
        clients.push(System::ZooKeeperClient(
            ZooKeeperLock::connect(&connect).await,
        ));
    }
    let rows = [
        (
            "lock-core/zookeeper",
            vec![System::LockCore(locker.clone()); TASKS],
            "8 tasks share one Locker",
        ),
        (
            "lock-core/zookeeper/8-lockers",
            lockers,
            "one Locker per task, as 8 replicas would",
        ),
        (
            "zookeeper-client",
            vec![peer; TASKS],
            "8 tasks share one session",
        ),
        (
            "zookeeper-client/8-sessions",
            clients,
            "one session per task",
        ),
    ];
    for (i, (system, tasks, note)) in rows.into_iter().enumerate() {
        let name = format!("h{workers}:z{i}");
        handoff(run, &server, &connect, system, tasks, &name, note).await;
    }

    reaped(&server).await;
    let rows =
        read_heavy::compare(&locker, "lock-core/zookeeper", workers, scale.zookeeper_run).await;
    for row in rows {
        run.report.push(row);
    }
}

/// The uncontended cycles of `systems`, taking turns over [`ROUNDS`] rounds, a row each
/// with what the server did for it.
async fn uncontended(run: &mut Run<'_>, server: &ZooKeeperServer, systems: &[(&str, System)]) {
    let workers = run.workers;
    for (_, system) in systems {
        cycles(system.clone(), 10, format!("z{workers}:warmup")).await;
    }
    let per_round = run.scale.zookeeper_cycles / ROUNDS;
    let mut totals: Vec<(Sample, ZooKeeperWork)> =
        systems.iter().map(|_| Default::default()).collect();
    for r in 0..ROUNDS {
        for i in 0..systems.len() {
            let at = (i + r) % systems.len();
            let before = ZooKeeperWork::read(server);
            let sample = cycles(systems[at].1.clone(), per_round, format!("z{workers}:{r}")).await;
            let work = ZooKeeperWork::read(server).since(before);
            totals[at].0.add(sample);
            totals[at].1.add(work);
        }
    }
    for ((name, _), (sample, work)) in systems.iter().zip(totals) {
        let mut row = Row::from_sample("uncontended", name, workers, &sample);
        work.describe(&mut row, sample.ops);
        run.report.push(row);
    }
}

/// One handoff row, `tasks` passing the lock `name`, held to the read round trip measured
/// beside it.
async fn handoff(
    run: &mut Run<'_>,
    server: &ZooKeeperServer,
    connect: &str,
    system: &str,
    tasks: Vec<System>,
    name: &str,
    note: &str,
) {
    let workers = run.workers;
    let rtt = ZooKeeperRoundTrips::measure(connect, run.scale.rtt_samples / 5)
        .await
        .read;
    let scale = run.scale.zookeeper();
    reaped(server).await;
    let before = ZooKeeperWork::read(server);
    let relay = relay(tasks, scale, name).await;
    let work = ZooKeeperWork::read(server).since(before);
    let mut row = relay_row("handoff", system, workers, scale, rtt, &relay, note);
    work.describe(&mut row, relay.acquisitions);
    run.report.push(row);
}

/// Waits until `server` has deleted the empty lock nodes (CONTAINERs) that the rows before
/// left: its reaper deletes only so many per interval, and those deletes are writes that
/// would otherwise land in the next row. Done once its znode count holds still for 300 ms,
/// or after 60 s.
async fn reaped(server: &ZooKeeperServer) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut count = server.znode_count();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = server.znode_count();
        if now == count {
            return;
        }
        count = now;
    }
}
