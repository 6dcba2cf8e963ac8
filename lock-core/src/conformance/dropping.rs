//! Dropped guards and dropped acquires: whatever they held or were about to take goes
//! back.

use super::*;

/// A dropped guard releases its lock, and so does a `with_lock` dropped while its body
/// runs: once its `Locker` is flushed, another takes it.
pub async fn a_dropped_guard_frees_the_lock(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let held = LockOptions::new().lease(30 * SEC);
    let guard = a.lock_with("dropped", held).await.unwrap();
    assert!(!free_for(&b, "dropped").await, "held, yet free");
    drop(guard);
    a.flush().await;
    assert!(
        free_for(&b, "dropped").await,
        "a dropped guard kept its lock"
    );
    assert!(
        free_for(&a, "dropped").await,
        "a dropped guard kept its lock"
    );

    let (entered, body_runs) = tokio::sync::oneshot::channel();
    let body = async move {
        entered.send(()).unwrap();
        std::future::pending::<()>().await;
    };
    let mut with_lock = Box::pin(a.with_lock_opts("dropped", held, body));
    tokio::select! {
        outcome = &mut with_lock => panic!("with_lock of a body that never ends ended: {outcome:?}"),
        runs = body_runs => runs.expect("the body never ran"),
    }
    assert!(!free_for(&b, "dropped").await, "its body runs, yet free");
    drop(with_lock);
    a.flush().await;
    assert!(
        free_for(&b, "dropped").await,
        "a dropped with_lock kept its lock"
    );
}

/// An acquire dropped while it waits (cut by a timeout, or its task aborted, on the
/// holder's `Locker` or another, and aborted as the holder releases) leaves no lock
/// behind.
pub async fn a_dropped_waiting_acquire_leaves_no_lock(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    for (round, waiter) in [&a, &b].into_iter().enumerate() {
        let key = format!("abandoned:{round}");
        let held = a.lock(&key).await.unwrap();
        let cut = spawn_waiter(waiter, &key, Some(100 * MS));
        assert!(!join(cut).await, "an acquire of a held lock returned");
        let task = spawn_waiter(waiter, &key, None);
        sleep(50 * MS).await; // time to start waiting: no public signal says it is
        task.abort();
        assert!(join_aborted(task).await.is_none(), "the waiter was not cut");
        held.release().await.unwrap();
        assert_all_free(&[&a, &b], &[&key]).await;
    }
    // Aborted as the holder releases: whatever the waiter got by then goes back.
    for round in 0..12 {
        let key = format!("raced:{round}");
        let held = a.lock(&key).await.unwrap();
        let task = spawn_waiter([&a, &b][round % 2], &key, None);
        sleep((round as u32 % 4) * 10 * MS).await;
        let ((), released) = tokio::join!(async { task.abort() }, held.release());
        released.unwrap();
        join_aborted(task).await;
        assert_all_free(&[&a, &b], &[&key]).await;
    }
}

/// An uncontended acquire cut short at many points (after 0, 1, 2 .. ms, or after 0, 1,
/// 2 .. polls) leaves no lock behind once its `Locker` is flushed.
pub async fn an_acquire_cut_short_anywhere_leaves_no_lock(store: &impl StoreUnderTest) {
    const CUTS: u32 = 12;
    let [a, b] = two(store).await;
    let mut keys = Vec::new();
    for cut in 0..CUTS {
        let key = format!("cut:{cut}ms");
        if let Ok(taken) = timeout(cut * MS, a.lock(&key)).await {
            drop(taken.unwrap());
        }
        keys.push(key);
        let key = format!("cut:{cut}polls");
        if let Some(taken) = poll_at_most(cut, a.lock(&key)).await {
            drop(taken.unwrap());
        }
        keys.push(key);
    }
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_all_free(&[&a, &b], &keys).await;
}

/// Polls `fut` at most `polls` times, yielding between them, and drops it if it is still
/// pending: cuts an acquire short after a given number of steps.
async fn poll_at_most<F: Future>(polls: u32, fut: F) -> Option<F::Output> {
    let mut fut = pin!(fut);
    for _ in 0..polls {
        let step = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
        if let Poll::Ready(out) = step {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}

/// The output of a task that may have been aborted: `None` if it was.
async fn join_aborted<T>(task: JoinHandle<T>) -> Option<T> {
    match task.await {
        Ok(out) => Some(out),
        Err(e) if e.is_cancelled() => None,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
