//! The semaphore: never more holders than its count, a permit reclaimed from a holder
//! that stopped renewing, the count stored and checked.

use tokio::time::timeout_at;

use super::*;

const SEMAPHORE: &[LockKind] = &[LockKind::Semaphore { permits: 1 }];

/// 32 tasks over two `Locker`s take permits of a semaphore of 3, again and again: never
/// more than 3 inside at once, and at some point 3 at once. Each grant draws a fencing
/// token greater than every earlier one.
///
/// A holder holds 1 ms, but not before 3 have been inside at once (or 5 s have passed):
/// a store whose grants take longer than 1 ms still shows that it lets its count in, and
/// one that never does fails after the wait.
pub async fn a_semaphore_never_admits_more_than_its_count(store: &impl StoreUnderTest) {
    const TASKS: usize = 32;
    const ROUNDS: usize = 8;
    const PERMITS: u32 = 3;
    let Some(lockers) = two_with(store, SEMAPHORE).await else {
        return; // a store without these kinds: nothing to check
    };
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(tokio::sync::watch::Sender::new(0));
    let all_in_by = Instant::now() + PATIENCE;
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let pool = lockers[i % 2].semaphore("pool", PERMITS);
            let (inside, most, tokens) = (inside.clone(), most.clone(), tokens.clone());
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let permit = pool.acquire_with(long_wait()).await.unwrap();
                    assert_eq!(permit.kind(), LockKind::Semaphore { permits: PERMITS });
                    tokens.lock().unwrap().push(permit.fencing_token());
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.send_if_modified(|most| {
                        let higher = now > *most;
                        *most = (*most).max(now);
                        higher
                    });
                    let mut seen = most.subscribe();
                    let all_in = seen.wait_for(|&most| most >= PERMITS as usize);
                    let _ = timeout_at(all_in_by, all_in).await;
                    sleep(MS).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        join(task).await;
    }
    let most = *most.borrow();
    assert!(
        most <= PERMITS as usize,
        "{most} holders of {PERMITS} permits"
    );
    assert_eq!(
        most, PERMITS as usize,
        "the permits were never all used at once"
    );
    let mut tokens = std::mem::take(&mut *tokens.lock().unwrap());
    let drawn = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), drawn, "two grants shared a fencing token");
}

/// A permit whose holder crashed (its lease runs out unrenewed, or its session ends) is
/// taken by a waiter soon after, with a greater fencing token.
pub async fn a_crashed_holders_permit_is_reclaimed(store: &impl StoreUnderTest) {
    let Some([a, b]) = two_with(store, SEMAPHORE).await else {
        return; // a store without these kinds: nothing to check
    };
    let stale = a
        .semaphore("jobs", 1)
        .acquire_with(ending(store))
        .await
        .unwrap();
    let waiting = b.semaphore("jobs", 1);
    let started = Instant::now();
    let (permit, ()) = tokio::join!(
        waiting.acquire_with(LockOptions::new().wait(PATIENCE)),
        end_holds(store, &a),
    );
    let permit = permit.expect("the crashed holder's permit was not reclaimed");
    let took = started.elapsed();
    assert!(
        took <= SHORT_LEASE + Duration::from_millis(1500),
        "reclaimed after {took:?}"
    );
    assert!(permit.fencing_token() > stale.fencing_token());
    assert!(stale.release().await.unwrap_err().is_not_held());
    permit.release().await.unwrap();
}

/// The count is stored on first use: asking with another is `Config` naming both numbers;
/// `set_permits` changes it, and lowering it keeps the holders above it until they
/// release. `available` counts free permits, and a semaphore never used has the handle's.
pub async fn a_semaphore_keeps_its_count(store: &impl StoreUnderTest) {
    let Some([a, b]) = two_with(store, SEMAPHORE).await else {
        return; // a store without these kinds: nothing to check
    };
    let three = a.semaphore("slots", 3);
    assert_eq!(three.available().await.unwrap(), 3, "never used");
    let held: Vec<_> = [
        three.acquire().await.unwrap(),
        three.acquire().await.unwrap(),
    ]
    .into();
    assert_eq!(three.available().await.unwrap(), 1);

    let five = b.semaphore("slots", 5);
    let err = five.acquire().await.unwrap_err();
    assert!(err.is_config(), "{err}");
    let message = err.to_string();
    assert!(message.contains('3') && message.contains('5'), "{message}");
    assert!(five.try_acquire().await.unwrap_err().is_config());

    // Lowered under the holders: they keep their permits, and none is granted until
    // fewer than the new count hold one.
    five.set_permits(1).await.unwrap();
    assert_eq!(five.permits(), 1);
    assert_eq!(five.available().await.unwrap(), 0);
    assert!(five.try_acquire().await.unwrap().is_none());
    let mut held = held.into_iter();
    held.next().unwrap().release().await.unwrap();
    assert!(
        five.try_acquire().await.unwrap().is_none(),
        "one still holds"
    );
    held.next().unwrap().release().await.unwrap();
    let permit = five.try_acquire().await.unwrap().expect("a permit of 1");
    // The old handle's count is now the wrong one.
    assert!(three.try_acquire().await.unwrap_err().is_config());
    permit.release().await.unwrap();

    let zero = a.semaphore("none", 0);
    assert!(zero.acquire().await.unwrap_err().is_config());
    let opts = LockOptions::new().kind(LockKind::Semaphore { permits: 0 });
    assert!(a.lock_with("none", opts).await.unwrap_err().is_config());
}

/// Permits are not re-entrant: a task that asks twice takes two, each with its own
/// token.
pub async fn permits_are_not_reentrant(store: &impl StoreUnderTest) {
    let Some([a, _]) = two_with(store, SEMAPHORE).await else {
        return; // a store without these kinds: nothing to check
    };
    let pair = a.semaphore("pair", 2);
    let first = pair.acquire().await.unwrap();
    let second = pair.acquire().await.unwrap();
    assert!(second.fencing_token() > first.fencing_token());
    assert!(
        pair.try_acquire().await.unwrap().is_none(),
        "a third permit"
    );
    first.release().await.unwrap();
    second.release().await.unwrap();
    assert_eq!(pair.available().await.unwrap(), 2);
}

/// A dropped guard of every kind gives its hold back at once: the next asker gets in
/// without waiting for a lease to run out.
pub async fn dropped_guards_of_every_kind_free_their_hold(store: &impl StoreUnderTest) {
    let Some([a, b]) = two_with(store, SEMAPHORE).await else {
        return; // a store without these kinds: nothing to check
    };
    let kinds = [
        LockKind::Exclusive,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
        LockKind::Semaphore { permits: 1 },
    ];
    // A kind that every other excludes.
    let next = if has_kind(&b, LockKind::Write).await {
        LockKind::Write
    } else {
        LockKind::Exclusive
    };
    for (i, kind) in kinds.into_iter().enumerate() {
        if !has_kind(&a, kind).await {
            continue;
        }
        let key = format!("dropped:{i}");
        // A lease much longer than the wait: only a release lets the next one in.
        let opts = LockOptions::new().kind(kind).lease(60 * SEC);
        drop(a.lock_with(&key, opts).await.unwrap());
        let next = b
            .lock_with(&key, opts.kind(next).wait(PATIENCE))
            .await
            .unwrap_or_else(|e| panic!("a dropped {kind} guard kept its hold: {e}"));
        next.release().await.unwrap();
    }
}
