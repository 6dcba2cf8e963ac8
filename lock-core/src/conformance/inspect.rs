//! What an operator sees and does: `Locker::inspect`, who holds a lock as its store sees
//! it, and `Locker::force_unlock`. A store may not know every field of what `inspect`
//! shows (the kind of a hold by one owner, a holder's fencing token, the waiters); what it
//! reports must be true.

use crate::{HolderInfo, LockInfo};

use super::*;

/// A lease long enough to outlast the test, and short enough to tell from the default.
const LEASE: Duration = Duration::from_secs(20);

/// A free key shows nothing; a held one, its one holder (a token's prefix, the lease left,
/// the guard's fencing token where the store reports it), then the other `Locker`'s
/// waiter where the store counts waiters; released, nothing again. A bad key is refused.
pub async fn inspect_shows_the_holder_of_a_lock_and_who_waits(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    if !inspects(&a).await {
        return; // a store that cannot inspect a lock: nothing to check
    }
    assert_eq!(b.inspect("inspected").await.unwrap(), None, "never taken");
    let guard = a
        .lock_with("inspected", LockOptions::new().lease(LEASE))
        .await
        .unwrap();
    let info = b.inspect("inspected").await.unwrap().expect("held");
    assert_eq!(info.kind, Some(LockKind::Exclusive), "{info:?}");
    let [holder] = &info.holders[..] else {
        panic!("one owner, not {info:?}");
    };
    assert_holder(holder, LEASE, &[guard.fencing_token()]);

    let waiter = spawn_waiter(&b, "inspected", None);
    if info.waiting.is_some() {
        eventually(PATIENCE, "the waiter counted", || async {
            waiting(&a, "inspected").await >= 1
        })
        .await;
    }
    guard.release().await.unwrap();
    assert!(join(waiter).await, "the waiter never got the lock");
    b.flush().await;
    assert_eq!(a.inspect("inspected").await.unwrap(), None, "released");

    for bad in [String::new(), "x".repeat(DEFAULT_MAX_KEY_LEN + 1)] {
        let err = a.inspect(&bad).await.unwrap_err();
        assert!(err.is_invalid_key(), "{err}");
    }
}

/// Readers show as a read hold with one holder each, a semaphore as its stored count with
/// one holder per permit in use, a writer as one owner; each as it comes and goes.
pub async fn inspect_counts_readers_and_permits(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    if !inspects(&a).await {
        return; // a store that cannot inspect a lock: nothing to check
    }
    if has_kind(&a, LockKind::Read).await {
        inspect_readers_and_a_writer(&a, &b).await;
    }
    if has_kind(&a, LockKind::Semaphore { permits: 1 }).await {
        inspect_permits(&a, &b).await;
    }
}

/// Three readers, shown as they come and go, then a writer.
async fn inspect_readers_and_a_writer(a: &Locker, b: &Locker) {
    // Each reader in a task of its own: a task that reads again re-enters its first read.
    let mut readers = Vec::new();
    for locker in [a, b, a] {
        let locker = locker.clone();
        readers.push(
            join(tokio::spawn(
                async move { locker.read("doc").await.unwrap() },
            ))
            .await,
        );
    }
    let tokens: Vec<u64> = readers.iter().map(|r| r.fencing_token()).collect();
    let info = b.inspect("doc").await.unwrap().expect("read");
    assert_eq!(info.kind, Some(LockKind::Read), "{info:?}");
    assert_eq!(info.holders.len(), 3, "{info:?}");
    for holder in &info.holders {
        assert_holder(holder, crate::DEFAULT_LEASE, &tokens);
    }
    assert_distinct(&info);
    readers.pop().unwrap().release().await.unwrap();
    let info = b.inspect("doc").await.unwrap().expect("read");
    assert_eq!(info.holders.len(), 2, "{info:?}");
    for reader in readers {
        reader.release().await.unwrap();
    }
    assert_eq!(b.inspect("doc").await.unwrap(), None, "every reader left");

    let writer = b.write("doc").await.unwrap();
    let info = a.inspect("doc").await.unwrap().expect("written");
    assert_eq!(info.kind, Some(LockKind::Write), "{info:?}");
    let [holder] = &info.holders[..] else {
        panic!("one writer, not {info:?}");
    };
    assert_holder(holder, crate::DEFAULT_LEASE, &[writer.fencing_token()]);
    writer.release().await.unwrap();
}

/// Two permits of a semaphore of 3, one holder each.
async fn inspect_permits(a: &Locker, b: &Locker) {
    let pool = a.semaphore("pool", 3);
    let permits = [pool.acquire().await.unwrap(), pool.acquire().await.unwrap()];
    let info = b.inspect("pool").await.unwrap().expect("permits in use");
    assert_eq!(
        info.kind,
        Some(LockKind::Semaphore { permits: 3 }),
        "{info:?}"
    );
    assert_eq!(info.holders.len(), 2, "{info:?}");
    assert_distinct(&info);
    for permit in permits {
        permit.release().await.unwrap();
    }
    assert_eq!(
        b.inspect("pool").await.unwrap(),
        None,
        "every permit given back"
    );
}

/// A holder as shown: the first 8 characters of an owner token (a v4 UUID, whose first 8
/// are hex digits), a lease left within `lease`, and one of `tokens` as its fencing token
/// where the store reports one.
fn assert_holder(holder: &HolderInfo, lease: Duration, tokens: &[u64]) {
    let prefix = &holder.token_prefix;
    assert!(
        prefix.len() == 8 && prefix.bytes().all(|b| b.is_ascii_hexdigit()),
        "{prefix:?} is not a token's prefix"
    );
    if let Some(left) = holder.lease_left {
        assert!(
            left > Duration::ZERO && left <= lease,
            "{left:?} left of {lease:?}"
        );
    }
    if let Some(fence) = holder.fencing_token {
        assert!(tokens.contains(&fence), "{fence} is not one of {tokens:?}");
    }
}

/// Each holder shows a token of its own.
fn assert_distinct(info: &LockInfo) {
    let mut prefixes: Vec<&str> = info.holders.iter().map(|h| &*h.token_prefix).collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    assert_eq!(prefixes.len(), info.holders.len(), "{info:?}");
}

/// Whether the store can inspect a lock: a store that cannot answers `Config`.
async fn inspects(locker: &Locker) -> bool {
    match locker.inspect("inspects").await {
        Ok(_) => true,
        Err(e) if e.is_config() => false,
        Err(e) => panic!("inspect: {e}"),
    }
}

async fn waiting(locker: &Locker, key: &str) -> usize {
    let info = locker.inspect(key).await.unwrap();
    info.and_then(|info| info.waiting).unwrap_or(0)
}

/// An operator forces a lock open: another `Locker`'s waiter gets it at once, the
/// holder's guard reports the loss at its next renewal, and a free key reports nothing
/// held. Readers of a read-write lock, where the store has them, are freed alike. Nothing
/// to check for a store that cannot force a lock open.
pub async fn force_unlock_frees_a_held_lock_and_its_holder_learns_of_it(
    store: &impl StoreUnderTest,
) {
    let [holder, operator] = two(store).await;
    let guard = holder
        .lock_with("stuck", LockOptions::new().lease(SHORT_LEASE))
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let operator = operator.clone();
        async move { operator.lock_with("stuck", long_wait()).await }
    });
    match operator.force_unlock("stuck").await {
        Ok(held) => assert!(held, "it was held"),
        Err(e) if e.is_config() => {
            // A store that cannot force a lock open: nothing to check.
            guard.release().await.unwrap();
            join(waiter).await.unwrap().release().await.unwrap();
            return;
        }
        Err(e) => panic!("force_unlock: {e}"),
    }
    let next = timeout(PATIENCE, waiter)
        .await
        .expect("the waiter was not let in")
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > guard.fencing_token());
    timeout(PATIENCE, guard.lost())
        .await
        .expect("the holder never learnt its lock was forced open");
    assert!(guard.is_lost());
    next.release().await.unwrap();
    assert!(
        !operator.force_unlock("stuck").await.unwrap(),
        "it was free"
    );
    assert!(
        operator
            .force_unlock("")
            .await
            .unwrap_err()
            .is_invalid_key()
    );

    if has_kind(&holder, LockKind::Read).await {
        let reader = holder.read("shared").await.unwrap();
        assert!(operator.force_unlock("shared").await.unwrap());
        let writer = operator
            .lock_with(
                "shared",
                LockOptions::new().kind(LockKind::Write).wait(PATIENCE),
            )
            .await
            .expect("a write after the readers were forced out");
        writer.release().await.unwrap();
        drop(reader);
    }
}
