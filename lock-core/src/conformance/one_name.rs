//! Holds and permits of one name: a store that keeps the two on different server locks,
//! each looking for the other after taking its own, must never let both in at once, nor
//! keep either side out for as long as the other keeps coming.

use super::*;

/// How long the tasks race.
const RACE: Duration = Duration::from_secs(3);
const SEMAPHORE: &[LockKind] = &[LockKind::Semaphore { permits: 1 }];

/// Holds of each one-holder kind the store has (exclusive, write, read) race permits of
/// a semaphore of the same name, 8 tasks for 3 s: never both inside at once, and both
/// get in.
pub async fn holds_and_permits_of_one_name_never_overlap(store: &impl StoreUnderTest) {
    for kind in [LockKind::Exclusive, LockKind::Write, LockKind::Read] {
        if let Some(lockers) = two_with(store, &[kind, SEMAPHORE[0]]).await {
            race(lockers, kind).await;
        }
    }
}

/// How long an exclusive holder may wait beside a busy semaphore of its name.
const EXCLUSIVE_WAIT: Duration = Duration::from_secs(2);

/// For three seconds, 18 tasks over two `Locker`s cycle the 3 permits of the
/// semaphore `busy` (each holds one for 5 ms, so one is nearly always held), while 2
/// tasks take the name `busy` exclusively every 50 ms, each waiting at most 2 s: every
/// one of those gets the lock, as a waiting writer gets in among readers, never a permit
/// and the lock at once.
pub async fn an_exclusive_lock_is_not_starved_by_a_busy_semaphore(store: &impl StoreUnderTest) {
    let Some(lockers) = two_with(store, SEMAPHORE).await else {
        return; // a store without semaphores: nothing to check
    };
    let permits_inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + RACE;
    let cyclers: Vec<_> = (0..18)
        .map(|i| {
            let permits = lockers[i % 2].semaphore("busy", 3);
            let (inside, overlaps) = (permits_inside.clone(), overlaps.clone());
            tokio::spawn(async move {
                let wait = LockOptions::new().wait(EXCLUSIVE_WAIT * 5);
                while Instant::now() < until {
                    let permit = permits.acquire_with(wait).await.unwrap();
                    if inside.fetch_add(1, Ordering::SeqCst) >= 3 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    sleep(Duration::from_millis(5)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            })
        })
        .collect();
    let exclusive: Vec<_> = (0..2)
        .map(|i| {
            let locker = lockers[i].clone();
            let (inside, overlaps) = (permits_inside.clone(), overlaps.clone());
            tokio::spawn(async move {
                let mut granted = 0;
                while Instant::now() < until {
                    let asked = Instant::now();
                    let guard = locker
                        .lock_with("busy", LockOptions::new().wait(EXCLUSIVE_WAIT))
                        .await
                        .unwrap_or_else(|e| {
                            panic!(
                                "an exclusive lock starved beside a busy semaphore after \
                                 {granted} grants ({:?}): {e}",
                                asked.elapsed()
                            )
                        });
                    if inside.load(Ordering::SeqCst) > 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    granted += 1;
                    guard.release().await.unwrap();
                    sleep(Duration::from_millis(50)).await;
                }
                granted
            })
        })
        .collect();
    for task in exclusive {
        let granted = timeout(RACE + PATIENCE, task)
            .await
            .expect("an exclusive taker never stopped")
            .unwrap();
        assert!(granted > 0, "an exclusive taker never got the lock");
    }
    for task in cyclers {
        timeout(RACE + PATIENCE * 2, task)
            .await
            .expect("a permit cycler never stopped")
            .unwrap();
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a permit beside the exclusive lock, or more than 3 permits"
    );
}

/// For three seconds, 8 tasks over the two `lockers` take the name `race` as `kind` (even
/// tasks) or a permit of the semaphore `race` of 2 (odd ones), hold it 2 ms and give it
/// back, each waiting at most 250 ms: never a hold of `kind` and a permit at once, and
/// both get in along the way (some waits time out while the other side holds). The
/// holds of `kind` start once a first permit is in, so that both sides are inside at
/// some point: that permits keep getting in beside a steady stream of holds is no
/// promise of every store (on MySQL, where those holds wait inside the server, a permit
/// can wait out its wait).
async fn race(lockers: [Locker; 2], kind: LockKind) {
    let inside = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let granted = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let overlaps = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + RACE;
    // Task i takes `kind` if i is even, a permit if odd; on lockers[i / 2 % 2].
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let locker = lockers[i / 2 % 2].clone();
            let (inside, granted, overlaps) = (inside.clone(), granted.clone(), overlaps.clone());
            tokio::spawn(async move {
                let (mine, other) = (i % 2, 1 - i % 2);
                let wait = LockOptions::new().wait(Duration::from_millis(250));
                let permits = locker.semaphore("race", 2);
                if mine == 0 {
                    let permit_in = || ready(granted[1].load(Ordering::SeqCst) > 0);
                    eventually(PATIENCE, "a first permit", permit_in).await;
                }
                while Instant::now() < until {
                    let guard = if mine == 0 {
                        locker.lock_with("race", wait.kind(kind)).await
                    } else {
                        permits.acquire_with(wait).await
                    };
                    let guard = match guard {
                        Ok(guard) => guard,
                        Err(e) if e.is_timeout() => continue, // the other side held it
                        Err(e) => panic!("{e}"),
                    };
                    inside[mine].fetch_add(1, Ordering::SeqCst);
                    if inside[other].load(Ordering::SeqCst) > 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    sleep(Duration::from_millis(2)).await;
                    inside[mine].fetch_sub(1, Ordering::SeqCst);
                    granted[mine].fetch_add(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                    sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    for task in tasks {
        timeout(RACE + PATIENCE, task)
            .await
            .expect("a racer never stopped")
            .unwrap();
    }
    let (holds, permits) = (
        granted[0].load(Ordering::SeqCst),
        granted[1].load(Ordering::SeqCst),
    );
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a hold as {kind} and a permit at once ({holds} holds, {permits} permits)"
    );
    assert!(holds > 0 && permits > 0, "{holds} holds, {permits} permits");
}
