//! `uncontended`: one task, lock + release cycles on distinct keys, each call timed too.
//! The systems take turns, a fifth of the cycles each per round.

use std::time::Instant;

use super::{ROUNDS, Run, rows, take_turns};
use crate::measure::{Sample, micros};
use crate::systems::System;

pub(crate) async fn run(run: &mut Run<'_>) {
    let workers = run.workers;
    let per_round = run.scale.cycles / ROUNDS;
    let results = take_turns(&mut run.stats, &run.systems, |system, r| {
        cycles(system, per_round, format!("u{workers}:{r}"))
    })
    .await;
    for row in rows("uncontended", workers, &run.systems, results) {
        run.report.push(row);
    }
}

/// `n` lock + release cycles, one after the other, on the keys `{prefix}:{i}`.
pub(crate) async fn cycles(system: System, n: usize, prefix: String) -> Sample {
    timed_cycles(n, &prefix, async |name| {
        let held = system.acquire(name).await;
        let acquired = Instant::now();
        system.release(held).await;
        acquired
    })
    .await
}

/// `n` runs of `cycle`, one after the other, on the keys `{prefix}:{i}`, each timed: a
/// cycle takes the lock, gives it back, and says when it had taken it.
pub(crate) async fn timed_cycles(
    n: usize,
    prefix: &str,
    mut cycle: impl AsyncFnMut(&str) -> Instant,
) -> Sample {
    let mut sample = Sample {
        ops: n,
        lat: Vec::with_capacity(n),
        acquire: Vec::with_capacity(n),
        release: Vec::with_capacity(n),
        ..Sample::default()
    };
    let started = Instant::now();
    for i in 0..n {
        let name = format!("{prefix}:{i}");
        let t = Instant::now();
        let acquired = cycle(&name).await;
        let done = Instant::now();
        sample.acquire.push(micros(acquired - t));
        sample.release.push(micros(done - acquired));
        sample.lat.push(micros(done - t));
    }
    sample.elapsed = started.elapsed();
    sample
}
