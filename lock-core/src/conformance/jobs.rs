//! At-most-once jobs ([`LockOptions::hold_at_least`]): a job that every replica fires at
//! the same tick runs once, however late (up to the hold) one of them fires it.

use super::*;

/// How long each run of the job keeps its lock.
const HOLD: Duration = Duration::from_millis(800);
/// How late the second replica fires each tick: well within the hold.
const LATE: Duration = Duration::from_millis(300);

/// Two replicas fire a job each tick, the second `LATE` after the first (each in turn),
/// with no wait: the first runs it and releases at once, the hold keeps it held, the
/// second skips it. Once the hold has passed, the job is free for the next tick.
pub async fn a_job_held_at_least_a_while_runs_once_per_tick(store: &impl StoreUnderTest) {
    let replicas = two(store).await;
    let once = LockOptions::new().wait(Duration::ZERO).hold_at_least(HOLD);
    let runs = Arc::new(AtomicUsize::new(0));
    for tick in 0..3 {
        let (early, late) = (&replicas[tick % 2], &replicas[(tick + 1) % 2]);
        let fire = |locker: &Locker, after: Duration| {
            let (locker, runs) = (locker.clone(), runs.clone());
            tokio::spawn(async move {
                sleep(after).await;
                if let Some(guard) = locker.try_lock_with("job", once).await.unwrap() {
                    runs.fetch_add(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        };
        let fired = Instant::now();
        let (first, second) = (fire(early, Duration::ZERO), fire(late, LATE));
        join(first).await;
        join(second).await;
        if fired.elapsed() < HOLD {
            assert_eq!(
                runs.load(Ordering::SeqCst),
                tick + 1,
                "tick {tick}: the job ran twice, or not at all"
            );
        }
        eventually(
            HOLD + PATIENCE,
            "the job's lock to be free after its hold",
            || free_for(early, "job"),
        )
        .await;
        assert!(
            fired.elapsed() >= HOLD,
            "the job's lock was freed before its hold passed"
        );
    }
}
