//! `parallel`: 32 tasks, each cycling lock + release on its own key. The systems take
//! turns, a fifth of the time each per round.

use std::time::{Duration, Instant};

use super::{ROUNDS, Run, rows, take_turns};
use crate::measure::{Sample, gather, micros};
use crate::systems::System;

const TASKS: usize = 32;

pub(crate) async fn run(run: &mut Run<'_>) {
    let workers = run.workers;
    let per_round = run.scale.run / ROUNDS as u32;
    let results = take_turns(&mut run.stats, &run.systems, |system, r| {
        cycles(system, per_round, format!("p{workers}:{r}"))
    })
    .await;
    for row in rows("parallel", workers, &run.systems, results) {
        run.report.push(row);
    }
}

/// [`TASKS`] tasks cycling for `run`, task `t` on the key `{prefix}:{t}`.
async fn cycles(system: System, run: Duration, prefix: String) -> Sample {
    let started = Instant::now();
    let deadline = started + run;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let system = system.clone();
            let name = format!("{prefix}:{t}");
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let held = system.acquire(&name).await;
                    system.release(held).await;
                    lat.push(micros(t.elapsed()));
                }
                lat
            })
        })
        .collect();
    gather(started, tasks, "parallel task").await
}
