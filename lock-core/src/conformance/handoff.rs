//! Handing a lock on: a freed lock goes to one of its waiters at once, however many
//! acquires around it are dropped.

use super::*;

/// For two seconds, 12 tasks over two `Locker`s take one key, hold it 1 to 5 ms and give
/// it back; one acquire in eight is dropped after waiting 0 to 200 ms, as a request cut
/// short drops it. Every task asks again at once, so tasks always wait for the key, and
/// it never stays free for longer than [`PROMPT`]: each release hands it on, and a
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
