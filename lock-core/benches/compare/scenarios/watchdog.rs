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
    let guards = Guards::take(&locker, n, &format!("w{workers}")).await;
    let before = run.stats.read_settled().await;
    let held = guards.hold(hold).await;
    let after = run.stats.read_settled().await;
    guards.release().await;

    // Every command sent meanwhile is a renewal (an `EVALSHA`).
    let calls = Calls::between(&before, &after, run.system("lock-core").in_script());
    let renewals = calls.sent as usize;
    let mut row = Row::new("watchdog", "lock-core", workers).with_calls(calls, renewals);
    row.ops_per_sec = Some(renewals as f64 / held.window);
    held.describe(
        &mut row,
        n,
        hold,
        &format!("renewals/s sent (expected {:.0})", expected(n)),
    );
    run.report.push(row);
}

/// Renewals expected per second: each lease is renewed a third of the way through it.
fn expected(guards: usize) -> f64 {
    guards as f64 / (LEASE.as_secs_f64() / 3.0)
}

/// What holding the guards cost.
pub(crate) struct Held {
    /// How long they were held, in seconds.
    window: f64,
    /// This process's CPU time meanwhile, in % of one core.
    cpu_pct: f64,
    /// Guards whose lease was lost.
    lost: usize,
}

impl Held {
    /// Puts the figures in `row`'s extra fields and its note, after `what` the row's
    /// rate is.
    pub(crate) fn describe(&self, row: &mut Row, n: usize, hold: Duration, what: &str) {
        row.extra.extend([
            ("guards", n as f64),
            ("lease_s", LEASE.as_secs_f64()),
            ("hold_s", hold.as_secs_f64()),
            ("expected_renewals_per_sec", expected(n)),
            ("client_cpu_pct_of_one_core", self.cpu_pct),
            ("guards_lost", self.lost as f64),
        ]);
        let (cpu_pct, lost) = (self.cpu_pct, self.lost);
        row.note = format!(
            "{n} guards, {LEASE:?} lease, held {hold:?}: {what}, \
             client CPU {cpu_pct:.1}% of one core, {lost} lost"
        );
    }
}

/// Guards with the watchdog on.
pub(crate) struct Guards(Vec<LockGuard>);

impl Guards {
    /// Takes `n` locks named `<prefix>:<i>` on `locker`.
    pub(crate) async fn take(locker: &Locker, n: usize, prefix: &str) -> Guards {
        let guards = futures_util::stream::iter(0..n)
            .map(|i| {
                let locker = locker.clone();
                async move {
                    locker
                        .lock_with(
                            &format!("{prefix}:{i}"),
                            LockOptions::new().lease(LEASE).watchdog(true),
                        )
                        .await
                        .expect("lock-core lock")
                }
            })
            .buffer_unordered(64)
            .collect()
            .await;
        Guards(guards)
    }

    /// Holds them for `hold`: what that cost.
    pub(crate) async fn hold(&self, hold: Duration) -> Held {
        let cpu_before = cpu_seconds();
        let started = Instant::now();
        tokio::time::sleep(hold).await;
        let window = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu_before;
        Held {
            window,
            cpu_pct: cpu / window * 100.0,
            lost: self.0.iter().filter(|g| g.is_lost()).count(),
        }
    }

    pub(crate) async fn release(self) {
        futures_util::stream::iter(self.0)
            .for_each_concurrent(64, |guard| async move {
                guard.release().await.expect("lock-core release");
            })
            .await;
    }
}
