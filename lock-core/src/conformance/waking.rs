//! Waking: a released lock reaches a waiter at once, by a wake-up rather than a poll, after
//! its wake-ups were cut, and however many acquires around it are dropped.

use super::*;

/// A waiter on another `Locker`, for a key whose holder has a long lease, gets the lock
/// soon after its release: the release woke it, where a poll would come later.
pub async fn a_release_wakes_a_waiter_promptly(store: &impl StoreUnderTest) {
    /// Time for the waiter to try, listen and try again; had it not parked by the
    /// release, it takes the lock on an attempt of its own (which passes, proving less).
    /// A waiter parked this long before the release polls no earlier than 600 ms after
    /// it.
    const PARK: Duration = Duration::from_millis(150);
    let [a, b] = two(store).await;
    let held = a
        .lock_with("wake", LockOptions::new().lease(30 * SEC))
        .await
        .unwrap();
    let (asking, asked) = tokio::sync::oneshot::channel();
    let waiter = tokio::spawn(async move {
        asking.send(()).unwrap();
        let guard = b
            .lock_with("wake", LockOptions::new().wait(10 * SEC))
            .await
            .unwrap();
        let got = Instant::now();
        guard.release().await.unwrap();
        got
    });
    asked.await.unwrap();
    // No public signal says a waiter is parked: give it a moment.
    sleep(PARK).await;
    if waiter.is_finished() {
        join(waiter).await;
        panic!("the waiter got a held lock");
    }
    release_and_see_it_woken(held, waiter).await;
}

/// A waiter whose wake-ups were cut (Redis: its `Locker`'s pub/sub connection killed)
/// listens again on its own, and the next release wakes it, well before a poll would.
/// Nothing to check for a store that has no channel to cut.
pub async fn a_waiter_is_woken_after_its_wake_ups_were_cut(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let held = a
        .lock_with("cut", LockOptions::new().lease(30 * SEC))
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let guard = b.lock_with("cut", long_wait()).await.unwrap();
            let got = Instant::now();
            guard.release().await.unwrap();
            got
        }
    });
    if !store.cut_wakeups(&b, "cut").await {
        held.release().await.unwrap();
        join(waiter).await;
        return;
    }
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    release_and_see_it_woken(held, waiter).await;
}

/// For two seconds, 12 tasks over two `Locker`s take one key, hold it 1 to 5 ms and give
/// it back; one acquire in eight is dropped after waiting 0 to 200 ms, as a request cut
/// short drops it. Every task asks again at once, so tasks always wait for the key, and
/// it never stays free for longer than 500 ms: each release hands it on, and a
/// dropped acquire gives up its place without keeping a waiter behind it asleep.
pub async fn a_lock_never_stays_free_while_tasks_wait(store: &impl StoreUnderTest) {
    const TASKS: u32 = 12;
    const CHURN: Duration = Duration::from_secs(2);
    let [a, b] = two(store).await;
    let until = Instant::now() + CHURN;
    // When the key was granted (`true`) or about to be released (`false`).
    let events = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (locker, events) = ([&a, &b][i as usize % 2].clone(), events.clone());
            tokio::spawn(async move {
                let mut round = 0;
                while Instant::now() < until {
                    round += 1;
                    let taken = async {
                        let taken = locker.lock_with("handoff", long_wait()).await;
                        taken.unwrap_or_else(|e| panic!("a waiter never got the key: {e}"))
                    };
                    let cut = (round + i)
                        .is_multiple_of(8)
                        .then(|| (round * 37 + i * 11) % 200);
                    let guard = match cut {
                        None => taken.await,
                        Some(after) => match timeout(after * MS, taken).await {
                            Ok(guard) => guard,
                            Err(_) => continue,
                        },
                    };
                    events.lock().unwrap().push((Instant::now(), true));
                    sleep((1 + round % 5) * MS).await;
                    events.lock().unwrap().push((Instant::now(), false));
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        join(task).await;
    }
    let mut events = std::mem::take(&mut *events.lock().unwrap());
    events.sort_by_key(|&(at, _)| at);
    let handoffs = events.windows(2).filter_map(|pair| match pair {
        [(released, false), (granted, true)] => Some(granted.duration_since(*released)),
        _ => None,
    });
    let (count, longest) =
        handoffs.fold((0, Duration::ZERO), |(n, most), gap| (n + 1, most.max(gap)));
    assert!(count > 10, "the key was handed on only {count} times");
    assert!(
        longest <= PROMPT,
        "the key stayed free for {longest:?} while tasks waited for it (of {count} \
         hand-offs): a release or a dropped acquire left the waiters asleep"
    );
}

/// Releases `held`, and checks that `waiter` (a task that answers when it got the lock)
/// got it well within the safety poll (about 1 s): the release woke it, where a poll
/// would have come later.
async fn release_and_see_it_woken(held: LockGuard, waiter: JoinHandle<Instant>) {
    let released = Instant::now();
    held.release().await.unwrap();
    let got = timeout(PATIENCE, join(waiter))
        .await
        .expect("the waiter never got the released lock");
    let after = got.saturating_duration_since(released);
    assert!(
        after <= PROMPT,
        "the waiter got the lock {after:?} after its release: the release did not wake \
         it (a poll found it; the safety poll is about 1 s)"
    );
}
