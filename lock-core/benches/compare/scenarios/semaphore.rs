//! `semaphore`: one task, acquire + release of a semaphore's permit on distinct keys,
//! against the exclusive lock's cycle on distinct keys. The two take turns, a fifth of the
//! cycles each per round.

use std::time::Instant;

use lock_core::Locker;

use super::{ROUNDS, Run};
use crate::measure::{Sample, micros};
use crate::report::Row;

/// The count of each semaphore.
const PERMITS: u32 = 4;

/// What a cycle takes.
#[derive(Debug, Clone, Copy)]
enum Taken {
    Permit,
    Exclusive,
}

impl Taken {
    fn system(self) -> &'static str {
        match self {
            Self::Permit => "lock-core/semaphore",
            Self::Exclusive => "lock-core/exclusive",
        }
    }
}

pub(crate) async fn run(run: &mut Run<'_>) {
    let workers = run.workers;
    let per_round = run.scale.cycles / ROUNDS;
    let taken = [Taken::Permit, Taken::Exclusive];
    let mut samples: Vec<Sample> = taken.iter().map(|_| Sample::default()).collect();
    for r in 0..ROUNDS {
        for i in 0..taken.len() {
            let at = (i + r) % taken.len();
            let prefix = format!("s{workers}:{r}:{at}");
            samples[at].add(cycles(&run.locker, taken[at], per_round, &prefix).await);
        }
    }
    for (taken, sample) in taken.into_iter().zip(samples) {
        let mut row = Row::from_sample("semaphore", taken.system(), workers, &sample);
        row.note = format!(
            "uncontended, distinct keys ({PERMITS} permits each); {}",
            row.note
        );
        run.report.push(row);
    }
}

/// `n` cycles, one after the other, on the keys `{prefix}:{i}`.
async fn cycles(locker: &Locker, taken: Taken, n: usize, prefix: &str) -> Sample {
    let mut sample = Sample {
        ops: n,
        ..Sample::default()
    };
    let started = Instant::now();
    for i in 0..n {
        let key = format!("{prefix}:{i}");
        let t = Instant::now();
        let guard = match taken {
            Taken::Permit => locker.semaphore(&key, PERMITS).acquire().await,
            Taken::Exclusive => locker.lock(&key).await,
        }
        .expect("semaphore cycle: acquire");
        let acquired = Instant::now();
        guard.release().await.expect("semaphore cycle: release");
        let done = Instant::now();
        sample.acquire.push(micros(acquired - t));
        sample.release.push(micros(done - acquired));
        sample.lat.push(micros(done - t));
    }
    sample.elapsed = started.elapsed();
    sample
}
