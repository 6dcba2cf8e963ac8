//! `read-heavy`: 32 tasks on one key, 95% of their operations reads and 5% writes, each
//! holding the lock 1 ms: the read-write lock against the exclusive lock doing the same
//! operations. The two take turns, a fifth of the time each per round.

use std::time::{Duration, Instant};

use lock_core::{LockKind, LockOptions, Locker};

use super::{ROUNDS, Run};
use crate::measure::{Sample, gather, micros};
use crate::report::Row;

const TASKS: usize = 32;
/// How long each operation holds the lock: the work done under it.
const HOLD: Duration = Duration::from_millis(1);
/// One operation in this many is a write.
const WRITE_EVERY: usize = 20;

/// The two ways the operations lock.
#[derive(Debug, Clone, Copy)]
enum Locking {
    /// Reads take the read side, writes the write side.
    ReadWrite,
    /// Every operation takes the exclusive lock.
    Exclusive,
}

impl Locking {
    fn name(self) -> &'static str {
        match self {
            Self::ReadWrite => "read-write",
            Self::Exclusive => "exclusive",
        }
    }

    fn kind(self, write: bool) -> LockKind {
        match (self, write) {
            (Self::ReadWrite, false) => LockKind::Read,
            (Self::ReadWrite, true) => LockKind::Write,
            (Self::Exclusive, _) => LockKind::Exclusive,
        }
    }
}

pub(crate) async fn run(run: &mut Run<'_>) {
    let locker = run.locker.clone();
    let rows = compare(&locker, "lock-core", run.workers, run.scale.run).await;
    for row in rows {
        run.report.push(row);
    }
}

/// The two lockings on `locker` taking turns for `time` in all, a fifth of it each per
/// round: their rows, the systems named `{system}/read-write` and `{system}/exclusive`.
pub(crate) async fn compare(
    locker: &Locker,
    system: &str,
    workers: usize,
    time: Duration,
) -> Vec<Row> {
    let per_round = time / ROUNDS as u32;
    let lockings = [Locking::ReadWrite, Locking::Exclusive];
    let mut samples: Vec<Sample> = lockings.iter().map(|_| Sample::default()).collect();
    for r in 0..ROUNDS {
        for i in 0..lockings.len() {
            let at = (i + r) % lockings.len();
            let key = format!("rh{workers}:{system}:{r}:{at}");
            samples[at].add(operations(locker, lockings[at], per_round, key).await);
        }
    }
    lockings
        .into_iter()
        .zip(samples)
        .map(|(locking, sample)| {
            let name = format!("{system}/{}", locking.name());
            let mut row = Row::from_sample("read-heavy", &name, workers, &sample);
            row.note = format!(
                "{TASKS} tasks on one key, 1 in {WRITE_EVERY} operations a write, each holding it {HOLD:?}"
            );
            row
        })
        .collect()
}

/// [`TASKS`] tasks operating on `key` for `run`, locking as `locking` says.
async fn operations(locker: &Locker, locking: Locking, run: Duration, key: String) -> Sample {
    let started = Instant::now();
    let deadline = started + run;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (locker, key) = (locker.clone(), key.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut n = t;
                while Instant::now() < deadline {
                    let kind = locking.kind(n % WRITE_EVERY == 0);
                    n += 1;
                    let opts = LockOptions::new().kind(kind).wait(Duration::from_secs(30));
                    let t = Instant::now();
                    let guard = locker.lock_with(&key, opts).await.expect("read-heavy lock");
                    tokio::time::sleep(HOLD).await;
                    guard.release().await.expect("read-heavy release");
                    lat.push(micros(t.elapsed()));
                }
                lat
            })
        })
        .collect();
    gather(started, tasks, "read-heavy task").await
}
