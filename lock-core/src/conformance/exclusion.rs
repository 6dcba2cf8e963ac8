//! Exclusion: one holder at a time, fencing tokens that only grow, and the answers of a
//! lock call that does not get the lock (`try_lock`'s `None`, a wait's `Timeout`).

use super::*;

/// Tasks over two `Locker`s take one key many times, each doing a non-atomic read, yield,
/// write of a counter kept outside the store: no update is lost, and no two tasks are
/// ever inside at once. Exclusive holds alone, then mixed with fair ones where the store
/// has them (one lock, whatever the kind).
pub async fn exclusion_loses_no_update(store: &impl StoreUnderTest) {
    let lockers = two(store).await;
    for (i, kinds) in kind_mixes(&lockers[0]).await.iter().enumerate() {
        let seen = contend(&lockers, &format!("counter:{i}"), kinds).await;
        assert_eq!(seen.most_inside, 1, "{kinds:?}: several holders at once");
        assert_eq!(seen.count, seen.acquisitions, "{kinds:?}: lost updates");
    }
}

/// Fencing tokens of one key, recorded while held by tasks over two `Locker`s, strictly
/// increase in the order the lock was taken (exclusive holds, then mixed with fair ones
/// where the store has them).
pub async fn fencing_tokens_strictly_increase(store: &impl StoreUnderTest) {
    let lockers = two(store).await;
    for (i, kinds) in kind_mixes(&lockers[0]).await.iter().enumerate() {
        let seen = contend(&lockers, &format!("fenced:{i}"), kinds).await;
        assert_eq!(seen.tokens.len() as u64, seen.acquisitions);
        if let Some(w) = seen.tokens.windows(2).find(|w| w[0] >= w[1]) {
            panic!("{kinds:?}: fencing token {} followed {}", w[1], w[0]);
        }
    }
}

/// `try_lock` makes one attempt: `Ok(None)` on a key held elsewhere, `Ok(Some)` on a free
/// one.
pub async fn try_lock_takes_a_free_key_and_not_a_held_one(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let held = a.lock("tried").await.unwrap();
    assert!(
        b.try_lock("tried").await.unwrap().is_none(),
        "try_lock took a key held by another Locker"
    );
    let free = b
        .try_lock("free")
        .await
        .unwrap()
        .expect("try_lock of a free key");
    assert_eq!(free.key(), "free");
    free.release().await.unwrap();
    held.release().await.unwrap();
    assert!(free_for(&b, "tried").await, "released, yet not free");
}

/// A wait for a key held elsewhere ends in `Timeout` once the wait is over (not before,
/// and not long after), with the holder's remaining lease as `retry_after` where holds
/// are leases.
pub async fn a_wait_for_a_held_key_ends_in_timeout(store: &impl StoreUnderTest) {
    const WAIT: Duration = Duration::from_millis(200);
    const HOLDER_LEASE: Duration = Duration::from_secs(10);
    let [a, b] = two(store).await;
    let held = a
        .lock_with("busy", LockOptions::new().lease(HOLDER_LEASE))
        .await
        .unwrap();
    let started = Instant::now();
    let err = b
        .lock_with("busy", LockOptions::new().wait(WAIT))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(err.is_timeout(), "expected a timeout, got: {err}");
    assert_eq!(err.key(), Some("busy"));
    assert!(waited >= WAIT, "gave up after {waited:?}, before its wait");
    assert!(waited < WAIT + PATIENCE, "gave up only after {waited:?}");
    if store.holds() == Holds::Lease {
        let retry = err
            .retry_after()
            .expect("a timeout with the holder's lease");
        assert!(
            retry > Duration::ZERO && retry <= HOLDER_LEASE,
            "retry after {retry:?}, for a holder with a {HOLDER_LEASE:?} lease"
        );
    }
    held.release().await.unwrap();
}

/// The mixes of one-holder kinds to contend with: exclusive alone, then with fair and
/// with write holds if the store has them (each is one lock with the others).
async fn kind_mixes(locker: &Locker) -> Vec<Vec<LockKind>> {
    let fair = has_kind(locker, LockKind::Fair).await;
    let mut mixes = vec![vec![LockKind::Exclusive]];
    if fair {
        mixes.push(vec![LockKind::Exclusive, LockKind::Fair]);
    }
    if has_kind(locker, LockKind::Write).await {
        let mut mix = vec![LockKind::Exclusive, LockKind::Write];
        if fair {
            mix.push(LockKind::Fair);
        }
        mixes.push(mix);
    }
    mixes
}

/// What tasks contending for one lock saw.
#[derive(Debug)]
struct Contention {
    acquisitions: u64,
    /// The counter the holders incremented, one at a time if the lock held.
    count: u64,
    /// The most holders inside at once.
    most_inside: usize,
    /// The fencing tokens, in the order the lock was taken.
    tokens: Vec<u64>,
}

/// The state contending tasks share, outside the store.
#[derive(Debug, Default)]
struct Shared {
    count: AtomicU64,
    inside: AtomicUsize,
    most_inside: AtomicUsize,
    tokens: Mutex<Vec<u64>>,
}

/// 8 tasks, spread over two `Locker`s and over `kinds`, each take `key` 32 times. While it
/// holds the lock, each records its fencing token, counts itself in and out, and
/// increments a counter with a deliberately non-atomic read, yield, write.
async fn contend(lockers: &[Locker; 2], key: &str, kinds: &[LockKind]) -> Contention {
    const TASKS: usize = 8;
    const ROUNDS: usize = 32;
    let shared = Arc::new(Shared::default());
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (locker, key, shared) = (lockers[i % 2].clone(), key.to_owned(), shared.clone());
        let opts = long_wait().kind(kinds[i / 2 % kinds.len()]);
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locker.lock_with(&key, opts).await.unwrap();
                shared.tokens.lock().unwrap().push(guard.fencing_token());
                let inside = shared.inside.fetch_add(1, Ordering::SeqCst) + 1;
                shared.most_inside.fetch_max(inside, Ordering::SeqCst);
                let seen = shared.count.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                shared.count.store(seen + 1, Ordering::SeqCst);
                shared.inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        join(task).await;
    }
    Contention {
        acquisitions: (TASKS * ROUNDS) as u64,
        count: shared.count.load(Ordering::SeqCst),
        most_inside: shared.most_inside.load(Ordering::SeqCst),
        tokens: std::mem::take(&mut shared.tokens.lock().unwrap()),
    }
}
