//! Reentrancy: a task that holds a lock takes it again at once, with the same fencing
//! token.

use super::*;

/// A task that holds a lock takes it again at once, with the same fencing token; the lock
/// stays held, from other tasks of the same `Locker` too, until the outer guard goes.
pub async fn reentrancy_is_per_task_and_shares_the_token(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let outer = a.lock("nested").await.unwrap();
    let inner = a
        .try_lock("nested")
        .await
        .unwrap()
        .expect("the task that holds a lock takes it again at once");
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    let once_more = LockOptions::new().wait(Duration::ZERO);
    let seven = a.with_lock_opts("nested", once_more, async { 7 }).await;
    assert_eq!(seven.unwrap(), 7, "with_lock re-enters too");
    assert!(!free_for(&a, "nested").await, "another task got in");
    assert!(!free_for(&b, "nested").await, "another Locker got in");
    inner.release().await.unwrap();
    assert!(
        !free_for(&b, "nested").await,
        "releasing the inner guard gave the lock back"
    );
    outer.release().await.unwrap();
    assert!(
        free_for(&a, "nested").await,
        "the outer release kept the lock"
    );
    assert!(
        free_for(&b, "nested").await,
        "the outer release kept the lock"
    );
}

/// Fair and exclusive holds of one key are one lock: a task holding it as one kind takes
/// it again as the other (and a fair hold as fair), at once and with the same token. (A store without fair locks
/// has nothing to check here.)
pub async fn fair_and_exclusive_holds_reenter_each_other(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    if !has_kind(&a, LockKind::Fair).await {
        return; // a store without fair locks: nothing to re-enter
    }
    let kinds = [
        (LockKind::Fair, LockKind::Exclusive),
        (LockKind::Exclusive, LockKind::Fair),
        (LockKind::Fair, LockKind::Fair),
    ];
    for (first, then) in kinds {
        let outer = a
            .lock_with("one-lock", LockOptions::new().kind(first))
            .await
            .unwrap();
        let inner = a
            .lock_with(
                "one-lock",
                LockOptions::new().kind(then).wait(Duration::ZERO),
            )
            .await
            .unwrap_or_else(|e| panic!("a {first} hold re-entered as {then}: {e}"));
        assert_eq!(inner.fencing_token(), outer.fencing_token());
        assert!(!free_for(&b, "one-lock").await, "another Locker got in");
        inner.release().await.unwrap();
        assert!(
            !free_for(&b, "one-lock").await,
            "the inner release freed it"
        );
        outer.release().await.unwrap();
        assert!(free_for(&b, "one-lock").await, "the outer release kept it");
    }
}
