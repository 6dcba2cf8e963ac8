//! A release that wakes a waiter of another `Locker`, for the suites that check wake-ups
//! on a deployment of their own.

use std::time::Duration;

use lock_core::{LockOptions, Locker};
use tokio::time::{Instant, timeout};

/// `holder` takes lock `name`, a task of `waiter` waits for it, and the release lets the
/// waiter in well before `safety_poll`, the interval at which it would try again unwoken:
/// the release woke it.
pub(crate) async fn a_release_wakes_the_waiter(
    holder: &Locker,
    waiter: &Locker,
    name: &str,
    safety_poll: Duration,
) {
    let held = holder
        .lock_with(name, LockOptions::new().lease(Duration::from_secs(30)))
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let (waiter, name) = (waiter.clone(), name.to_owned());
        async move {
            let guard = waiter.lock(&name).await.unwrap();
            let got = Instant::now();
            guard.release().await.unwrap();
            got
        }
    });
    // Registered to be woken, as the store shows it.
    lock_tests::eventually(safety_poll, "the waiter to wait", || async {
        let info = holder.inspect(name).await.unwrap();
        info.and_then(|info| info.waiting) >= Some(1)
    })
    .await;
    assert!(!waiting.is_finished(), "{name}: the waiter got a held lock");
    let released = Instant::now();
    held.release().await.unwrap();
    let got = timeout(safety_poll * 2, waiting).await.unwrap().unwrap();
    let after = got.saturating_duration_since(released);
    assert!(
        after < safety_poll / 4,
        "{name}: the waiter got the lock {after:?} after its release, not woken by it"
    );
}
