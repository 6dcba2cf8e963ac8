//! Holds that end without their release, as a crashed or paused owner's do: a lease store
//! lets a lease that is not renewed run out, a session store ends the session. Either way
//! the guard learns it, the body under the lock is cancelled, and the next holder draws a
//! greater fencing token.

use super::*;

/// A store's holds are what it says: a lease store's guard shows the lease left, and a
/// lease that is not renewed runs out; a session store's guard has no lease, outlives any
/// lease, and is lost when its session ends, after which the same `Locker` takes locks
/// again on a new session.
pub async fn holds_end_as_the_store_says(store: &impl StoreUnderTest) {
    let locker = store.locker().await;
    let guard = locker.lock_with("ends", ending(store)).await.unwrap();
    match store.holds() {
        Holds::Lease => {
            let left = guard
                .lease_left()
                .expect("a lease store's hold has a lease");
            assert!(
                left <= SHORT_LEASE,
                "{left:?} left of a {SHORT_LEASE:?} lease"
            );
        }
        Holds::Session => {
            assert_eq!(
                guard.lease_left(),
                None,
                "a session store's hold has no lease"
            );
            sleep(SHORT_LEASE * 3).await;
            assert!(
                guard.is_held().await.unwrap(),
                "a session's hold ran out by itself"
            );
            assert!(!guard.is_lost());
        }
    }
    end_holds(store, &locker).await;
    timeout(PATIENCE, guard.lost())
        .await
        .expect("a hold left to end never ended");
    assert!(
        !guard.is_held().await.unwrap(),
        "an ended hold is still held"
    );
    // A lease store may free a lease a little after its guard counts it lost (RedLock
    // takes a drift allowance off its validity): the release finds it gone, or gives
    // it back.
    if let Err(e) = guard.release().await {
        assert!(e.is_not_held(), "the release of an ended hold: {e}");
    }
    let again = locker
        .lock_with("ends", LockOptions::new().wait(PATIENCE))
        .await
        .expect("the Locker takes the lock again after its hold ended");
    again.release().await.unwrap();
}

/// A holder whose hold ended (its lease ran out, its session ended) is followed by one
/// with a greater token, and can no longer extend or release the lock from under it.
pub async fn fencing_tokens_increase_past_a_hold_that_ended(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let stale = a.lock_with("expiring", ending(store)).await.unwrap();
    end_holds(store, &a).await;
    timeout(PATIENCE, stale.lost())
        .await
        .expect("a hold left to end never ended");
    let next = b
        .lock_with("expiring", LockOptions::new().wait(PATIENCE))
        .await
        .expect("a hold that ended frees the lock");
    assert!(
        next.fencing_token() > stale.fencing_token(),
        "token {} after a lost hold is not above {}",
        next.fencing_token(),
        stale.fencing_token()
    );
    let err = stale.extend(SEC).await.unwrap_err();
    assert!(err.is_not_held(), "a stale owner's extend: {err}");
    assert!(!stale.is_held().await.unwrap(), "a stale owner still holds");
    let err = stale.release().await.unwrap_err();
    assert!(err.is_not_held(), "a stale owner's release: {err}");
    assert!(
        next.is_held().await.unwrap(),
        "a stale owner freed the lock"
    );
    next.release().await.unwrap();
}

/// `with_lock` whose hold ends (its lease runs out, its session ends) under a body that
/// never ends ends in `Lost`, having dropped the body; another `Locker` can take the key
/// afterwards.
pub async fn a_hold_that_ends_cancels_with_lock(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let dropped = Arc::new(AtomicBool::new(false));
    let body = {
        let flag = DropFlag(dropped.clone());
        async move {
            let _flag = flag;
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await;
        }
    };
    let ended = async {
        started.await.expect("the body never ran");
        end_holds(store, &a).await;
    };
    let (outcome, ()) = timeout(PATIENCE, async {
        tokio::join!(a.with_lock_opts("body", ending(store), body), ended)
    })
    .await
    .expect("with_lock outlived its hold");
    let err = outcome.expect_err("a body that never ends ended");
    assert!(err.is_lost(), "expected Lost, got: {err}");
    assert!(dropped.load(Ordering::SeqCst), "the body was not dropped");
    let next = b
        .lock_with("body", LockOptions::new().wait(PATIENCE))
        .await
        .expect("a lost lock is free for another Locker");
    next.release().await.unwrap();
}

/// Sets its flag when dropped.
#[derive(Debug)]
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
