//! `writer-wait`: 16 tasks read one key in a loop, each read holding it [`READ_HOLD`] and
//! overlapping the others, so the key is never free; a writer asks for the write side
//! again and again, and its wait is timed. Writers are preferred: once the writer waits,
//! readers that ask after it wait behind it, so its wait is about one read's hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_core::{LockKind, LockOptions};

use super::Run;
use crate::measure::{Sample, micros};
use crate::report::Row;

const READERS: usize = 16;
/// How long each read holds the lock.
pub(crate) const READ_HOLD: Duration = Duration::from_millis(5);
/// How long the writer holds it, and lets the readers run between two writes.
const WRITE_HOLD: Duration = Duration::from_millis(1);
const BETWEEN_WRITES: Duration = Duration::from_millis(10);

pub(crate) async fn run(run: &mut Run<'_>) {
    let workers = run.workers;
    let writes = run.scale.handoffs / 10;
    let key = format!("ww{workers}");
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (locker, key, stop) = (run.locker.clone(), key.clone(), stop.clone());
            tokio::spawn(async move {
                // Spread out, so that the reads overlap rather than start together.
                tokio::time::sleep(READ_HOLD * r as u32 / READERS as u32).await;
                while !stop.load(Ordering::Relaxed) {
                    let opts = LockOptions::new()
                        .kind(LockKind::Read)
                        .wait(Duration::from_secs(30));
                    let guard = locker
                        .lock_with(&key, opts)
                        .await
                        .expect("writer-wait read");
                    tokio::time::sleep(READ_HOLD).await;
                    guard.release().await.expect("writer-wait read release");
                }
            })
        })
        .collect();
    tokio::time::sleep(READ_HOLD * 2).await;
    let mut sample = Sample {
        ops: writes,
        ..Sample::default()
    };
    let started = Instant::now();
    for _ in 0..writes {
        tokio::time::sleep(BETWEEN_WRITES).await;
        let t = Instant::now();
        let opts = LockOptions::new()
            .kind(LockKind::Write)
            .wait(Duration::from_secs(30));
        let guard = run
            .locker
            .lock_with(&key, opts)
            .await
            .expect("writer-wait write");
        sample.lat.push(micros(t.elapsed()));
        tokio::time::sleep(WRITE_HOLD).await;
        guard.release().await.expect("writer-wait write release");
    }
    sample.elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.await.expect("writer-wait reader");
    }
    let mut row = Row::from_sample("writer-wait", "lock-core", workers, &sample);
    row.extra.insert("read_hold_us", micros(READ_HOLD));
    row.note = format!(
        "the writer's wait, {writes} writes, under {READERS} looping readers each holding {READ_HOLD:?}"
    );
    run.report.push(row);
}
