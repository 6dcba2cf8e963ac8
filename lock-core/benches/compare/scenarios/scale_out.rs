//! `scale-out`: the deployments beyond one Redis, each on servers of its own,
//! spawned for the scenario.
//!
//! - `uncontended` rows: RedLock over 3 and over 5 masters, lock-core's beside rslock's over
//!   the same masters (rslock's `LockManager` is a RedLock over the urls it is given), and
//!   lock-core on a 3-master Redis Cluster; the systems take turns, as in `uncontended`.
//! - `handoff` row `lock-core/cluster`: the handoff of [`super::handoff`], 8 `Locker`s on
//!   the cluster, its p50 held to the round trip to the node that serves the lock.
//! - `watchdog` row `lock-core/cluster`: the guards of [`super::watchdog`], on the
//!   cluster, whose renewals go one pipeline per node.

use lock_core::Locker;
use lock_tests::{RedisCluster, RedisServer};

use super::handoff::{TASKS, relay, relay_row};
use super::uncontended::cycles;
use super::watchdog::Guards;
use super::{ROUNDS, Run};
use crate::measure::{Sample, round_trip};
use crate::report::Row;
use crate::systems::System;

pub(crate) async fn run(run: &mut Run<'_>) {
    let workers = run.workers;
    for masters in [3, 5] {
        let servers = RedisServer::spawn_many(masters);
        let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
        let ours = Locker::redlock(&urls)
            .await
            .expect("connect lock-core redlock");
        let systems = [
            (
                format!("lock-core/redlock-{masters}"),
                System::LockCore(ours),
            ),
            (
                format!("rslock/redlock-{masters}"),
                System::Rslock(rslock::LockManager::new(urls.clone())),
            ),
        ];
        uncontended(run, &systems, &format!("s{workers}:r{masters}")).await;
    }

    let cluster = RedisCluster::spawn();
    let ours = Locker::cluster(cluster.urls())
        .await
        .expect("connect lock-core cluster");
    let systems = [(
        "lock-core/cluster".to_owned(),
        System::LockCore(ours.clone()),
    )];
    uncontended(run, &systems, &format!("s{workers}:c")).await;

    let mut lockers = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        let locker = Locker::cluster(cluster.urls()).await.expect("connect");
        lockers.push(System::LockCore(locker));
    }
    let name = format!("h{workers}:cluster");
    let node = cluster.node_for_key(&format!("lock:{{{name}}}"));
    let rtt = round_trip(&cluster.nodes()[node].url(), run.scale.rtt_samples / 5).await;
    let relay = relay(lockers, run.scale, &name).await;
    let note = "8 Lockers on a 3-master cluster";
    let row = relay_row(
        "handoff",
        "lock-core/cluster",
        workers,
        run.scale,
        rtt,
        &relay,
        note,
    );
    run.report.push(row);

    let (n, hold) = (run.scale.watchdog_guards, run.scale.watchdog_hold);
    let guards = Guards::take(&ours, n, &format!("w{workers}:c")).await;
    let held = guards.hold(hold).await;
    guards.release().await;
    let mut row = Row::new("watchdog", "lock-core/cluster", workers);
    held.describe(&mut row, n, hold, "renewals sent one pipeline per node");
    run.report.push(row);
}

/// The uncontended cycles of `systems`, taking turns over [`ROUNDS`] rounds, a row each.
async fn uncontended(run: &mut Run<'_>, systems: &[(String, System)], prefix: &str) {
    // Connections opened and scripts loaded before anything is timed.
    for (_, system) in systems {
        cycles(system.clone(), 50, format!("{prefix}:warmup")).await;
    }
    let per_round = run.scale.cycles / ROUNDS / 2;
    let mut totals: Vec<Sample> = systems.iter().map(|_| Sample::default()).collect();
    for r in 0..ROUNDS {
        for i in 0..systems.len() {
            let at = (i + r) % systems.len();
            let (label, system) = &systems[at];
            let sample = cycles(system.clone(), per_round, format!("{prefix}:{label}:{r}")).await;
            totals[at].add(sample);
        }
    }
    for ((label, _), sample) in systems.iter().zip(totals) {
        let row = Row::from_sample("uncontended", label, run.workers, &sample);
        run.report.push(row);
    }
}
