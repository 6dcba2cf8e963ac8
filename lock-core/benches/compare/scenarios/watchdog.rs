//! `watchdog`: lock-core alone. 10,000 guards with a 3 s lease and the watchdog on, held
//! for 15 s: the renewals sent, this process's CPU time meanwhile, and the guards lost.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::{LockGuard, LockOptions, Locker};

use super::Run;
use crate::measure::{Calls, cpu_seconds};
use crate::report::Row;

const LEASE: Duration = Duration::from_secs(3);

pub(crate) async fn run(run: &mut Run<'_>) {
    let workers = run.workers;
    let n = run.scale.watchdog_guards;
    let hold = run.scale.watchdog_hold;
    let locker = Locker::connect(run.url).await.expect("connect lock-core");
    let guards: Vec<LockGuard> = futures_util::stream::iter(0..n)
        .map(|i| {
            let locker = locker.clone();
            async move {
                locker
                    .lock_with(
                        &format!("w{workers}:{i}"),
                        LockOptions::new().lease(LEASE).watchdog(true),
                    )
                    .await
                    .expect("lock-core lock")
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;

    let before = run.stats.read_settled().await;
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    tokio::time::sleep(hold).await;
    let after = run.stats.read_settled().await;
    let window = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    futures_util::stream::iter(guards)
        .for_each_concurrent(64, |guard| async move {
            guard.release().await.expect("lock-core release");
        })
        .await;

    // Every command sent meanwhile is a renewal (an `EVALSHA`).
    let calls = Calls::between(&before, &after, run.system("lock-core").in_script());
    let renewals = calls.sent as usize;
    let cpu_pct = cpu / window * 100.0;
    // Each lease is renewed a third of the way through it.
    let expected = n as f64 / (LEASE.as_secs_f64() / 3.0);
    let mut row = Row::new("watchdog", "lock-core", workers).with_calls(calls, renewals);
    row.ops_per_sec = Some(renewals as f64 / window);
    row.extra.extend([
        ("guards", n as f64),
        ("lease_s", LEASE.as_secs_f64()),
        ("hold_s", hold.as_secs_f64()),
        ("expected_renewals_per_sec", expected),
        ("client_cpu_pct_of_one_core", cpu_pct),
        ("guards_lost", lost as f64),
    ]);
    row.note = format!(
        "{n} guards, {LEASE:?} lease, held {hold:?}: renewals/s sent (expected {expected:.0}), \
         client CPU {cpu_pct:.1}% of one core, {lost} lost"
    );
    run.report.push(row);
}
