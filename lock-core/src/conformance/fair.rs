//! The fair lock: first come, first served across `Locker`s.

use super::*;

/// Waiters for a fair lock, each on a `Locker` of its own and each asking once the one
/// before it waits (as [`Locker::inspect`] counts waiters), are served in the order they
/// asked, with increasing fencing tokens. A holder that asks again at once after its
/// release does not jump the line: the lock went to the next in line, which holds it
/// until that try has been made; the last one's try finds the line empty and the lock
/// free.
pub async fn a_fair_lock_serves_lockers_in_the_order_they_asked(store: &impl StoreUnderTest) {
    const WAITERS: usize = 4;
    let fair = LockOptions::new().kind(LockKind::Fair);
    let holder = store.locker().await;
    if !has_kind(&holder, LockKind::Fair).await {
        return; // a store without fair locks: nothing to check
    }
    let held = holder.lock_with("fifo", fair).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    // Each waiter releases only once the one before it has tried again.
    let (first_may_release, mut may_release) = tokio::sync::oneshot::channel();
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let (locker, served) = (store.locker().await, served.clone());
        let (tried_again, next_may_release) = tokio::sync::oneshot::channel();
        let mine = std::mem::replace(&mut may_release, next_may_release);
        waiters.push(tokio::spawn(async move {
            let guard = locker.lock_with("fifo", fair.wait(10 * SEC)).await.unwrap();
            served.lock().unwrap().push((i, guard.fencing_token()));
            mine.await.expect("the one before never tried again");
            guard.release().await.unwrap();
            let again = locker.try_lock_with("fifo", fair).await.unwrap();
            if i + 1 < WAITERS {
                assert!(
                    again.is_none(),
                    "waiter {i} jumped the line after its release"
                );
            } else {
                let again = again.expect("the line is empty: the lock is free");
                again.release().await.unwrap();
            }
            let _ = tried_again.send(());
        }));
        eventually(PATIENCE, &format!("waiter {i} in line"), || async {
            waiters_of(&holder, "fifo").await == i + 1
        })
        .await;
    }
    let first = held.fencing_token();
    held.release().await.unwrap();
    let again = holder.try_lock_with("fifo", fair).await.unwrap();
    assert!(
        again.is_none(),
        "the holder jumped the line after its release"
    );
    first_may_release.send(()).unwrap();
    for waiter in waiters {
        timeout(PATIENCE, join(waiter))
            .await
            .expect("a waiter in line was never served");
    }
    let served = served.lock().unwrap().clone();
    let order: Vec<usize> = served.iter().map(|&(i, _)| i).collect();
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "served out of order"
    );
    let tokens: Vec<u64> = [first]
        .into_iter()
        .chain(served.iter().map(|&(_, token)| token))
        .collect();
    assert!(
        tokens.windows(2).all(|w| w[1] > w[0]),
        "fencing tokens did not increase along the line: {tokens:?}"
    );
}

/// How many wait for `key`, as `inspect` counts them. A store with fair locks counts its
/// waiters: nothing else tells the suite that one waits in line.
async fn waiters_of(locker: &Locker, key: &str) -> usize {
    let info = match locker.inspect(key).await {
        Ok(info) => info,
        Err(e) => panic!("a store with fair locks must let inspect count its waiters: {e}"),
    };
    let info = info.expect("the lock is held");
    info.waiting
        .expect("a store with fair locks must let inspect count its waiters")
}
