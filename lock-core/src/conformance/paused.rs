//! A holder whose process is paused, on a store whose sessions have a lease
//! ([`StoreUnderTest::session_lease`]): its locks come free about one lease later, and
//! once it runs again it claims none of them and is handed no guard its session lost
//! meanwhile.
//!
//! Each test pauses one `Locker` by stopping the one thread its runtime runs on, as a
//! paused process stops: none of its tasks runs (no keep-alive, no release). The other
//! `Locker`s run on the test's runtime, which must be a multi-thread one, as
//! [`run`](super::run) makes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::{self, Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, Runtime};
use tokio::task::block_in_place;

use super::{StoreUnderTest, eventually};
use crate::{LockError, LockGuard, LockOptions, Locker};

/// How long another `Locker` waits for the paused holder's lock.
const WAIT: Duration = Duration::from_secs(5);
/// How much later than one lease the paused holder's lock may come free.
const SLACK: Duration = Duration::from_secs(1);
/// How soon after a paused holder runs again its guard must report the loss.
const NOTICED: Duration = Duration::from_millis(500);

/// A paused holder loses its lock about one session lease later: a `Locker` takes a
/// lock, then its runtime stops for four leases; another `Locker` gets the lock within a
/// lease and a second.
pub async fn a_paused_holder_frees_its_lock(store: &impl StoreUnderTest) {
    let Some(lease) = store.session_lease() else {
        return;
    };
    let test = Handle::current();
    let waited = block_in_place(|| {
        thread::scope(|scope| {
            let holder = hold_then_pause(scope, store, "paused", lease * 4, |runtime, guard| {
                drop(runtime);
                drop(guard);
            });
            let waited = test.block_on(async {
                let locker = store.leased_locker().await;
                let asked = Instant::now();
                let guard = locker
                    .lock_with("paused", LockOptions::new().wait(WAIT))
                    .await
                    .expect("the paused holder's lock never came free");
                let waited = asked.elapsed();
                guard.release().await.unwrap();
                waited
            });
            join_thread(holder);
            waited
        })
    });
    assert!(waited <= lease + SLACK, "came free after {waited:?}");
}

/// A holder paused past its session lease claims nothing once it runs again: a `Locker`
/// takes a lock, then its runtime stops for four leases, and meanwhile another `Locker`
/// takes the lock. Once the first runs again, its guard answers `is_held()` false at
/// once, its `lost()` fires within 500 ms and its `release()` says
/// [`LockError::NotHeld`], while the other still holds the lock.
pub async fn a_resumed_holder_claims_nothing(store: &impl StoreUnderTest) {
    let Some(lease) = store.session_lease() else {
        return;
    };
    let test = Handle::current();
    block_in_place(|| {
        thread::scope(|scope| {
            let (taken_tx, taken_rx) = mpsc::channel();
            let holder =
                hold_then_pause(scope, store, "claimed", lease * 4, move |runtime, guard| {
                    taken_rx
                        .recv()
                        .expect("the other Locker never took the lock");
                    runtime.block_on(async {
                        let held = guard.is_held().await;
                        assert!(
                            matches!(held, Ok(false)),
                            "a holder paused past its lease still claims the lock: {held:?}"
                        );
                        tokio::time::timeout(NOTICED, guard.lost())
                            .await
                            .expect("lost() did not fire once the paused holder ran again");
                        let released = guard.release().await;
                        assert!(
                            matches!(released, Err(LockError::NotHeld { .. })),
                            "a holder paused past its lease released the lock: {released:?}"
                        );
                    });
                });
            let guard = test.block_on(async {
                store
                    .leased_locker()
                    .await
                    .lock_with("claimed", LockOptions::new().wait(WAIT))
                    .await
                    .expect("the paused holder's lock never came free")
            });
            taken_tx.send(()).unwrap();
            join_thread(holder);
            test.block_on(async {
                assert!(
                    guard.is_held().await.unwrap(),
                    "the new holder lost the lock"
                );
                guard.release().await.unwrap();
            });
        });
    });
}

/// A `Locker` paused in the middle of a lock call is handed no guard its session lost
/// meanwhile: it waits for a lock that another holds, and its runtime stops for three
/// session leases; meanwhile the other gives the lock back (a store that grants to
/// waiters grants it to the paused wait, then ends the silent session a lease later) and
/// takes it again. Once the first runs again, its call must not return while the other
/// holds the lock, and the guard it returns once the other let go is held and not lost.
pub async fn a_call_paused_mid_wait_hands_out_no_lost_guard(store: &impl StoreUnderTest) {
    let Some(lease) = store.session_lease() else {
        return;
    };
    let locker = store.leased_locker().await;
    let first = locker.lock("granted").await.unwrap();
    let other_holds = &AtomicBool::new(true);
    let test = Handle::current();
    let (held, while_other_holds) = block_in_place(|| {
        thread::scope(|scope| {
            let (pause_tx, pause_rx) = tokio::sync::oneshot::channel();
            let (paused_tx, paused_rx) = mpsc::channel();
            let (resumed_tx, resumed_rx) = tokio::sync::oneshot::channel();
            let caller = scope.spawn(move || {
                let runtime = own_runtime();
                let call = async {
                    let locker = store.leased_locker().await;
                    let wait = LockOptions::new().wait(lease * 3 + WAIT * 2);
                    let guard = locker.lock_with("granted", wait).await?;
                    let held = guard.is_held().await? && !guard.is_lost();
                    let while_other_holds = other_holds.load(Ordering::SeqCst);
                    guard.release().await?;
                    Ok::<_, LockError>((held, while_other_holds))
                };
                let mut call = std::pin::pin!(call);
                let ended = runtime.block_on(async {
                    tokio::select! {
                        ended = call.as_mut() => Some(ended),
                        _ = pause_rx => None,
                    }
                });
                assert!(
                    ended.is_none(),
                    "the call did not wait for the held lock: {ended:?}"
                );
                paused_tx.send(()).unwrap();
                thread::sleep(lease * 3);
                let _ = resumed_tx.send(());
                runtime.block_on(call)
            });
            test.block_on(until_waiting(&locker, "granted", lease / 2));
            let _ = pause_tx.send(());
            paused_rx
                .recv()
                .expect("the paused caller's thread ended before it waited");
            test.block_on(async {
                first.release().await.unwrap();
                let again = locker
                    .lock_with("granted", LockOptions::new().wait(lease + WAIT))
                    .await
                    .expect("the paused caller's session kept the lock");
                resumed_rx
                    .await
                    .expect("the paused caller's thread ended before it ran again");
                // Time for the resumed call to hand out what it was granted while paused.
                tokio::time::sleep(NOTICED).await;
                other_holds.store(false, Ordering::SeqCst);
                again.release().await.unwrap();
            });
            join_thread(caller).expect("the paused call failed")
        })
    });
    assert!(held, "the resumed call handed out a guard already lost");
    assert!(
        !while_other_holds,
        "the resumed call handed out the lock while another held it"
    );
}

/// Takes `key` on a `Locker` of `store`, on a runtime of one thread of its own, then
/// stops that thread for `pause`, then hands the runtime and the guard to `then`, on
/// that thread. Returns once the lock is held, with the thread to join.
fn hold_then_pause<'scope, S: StoreUnderTest>(
    scope: &'scope Scope<'scope, '_>,
    store: &'scope S,
    key: &'scope str,
    pause: Duration,
    then: impl FnOnce(Runtime, LockGuard) + Send + 'scope,
) -> ScopedJoinHandle<'scope, ()> {
    let (held_tx, held_rx) = mpsc::channel();
    let holder = scope.spawn(move || {
        let runtime = own_runtime();
        let guard =
            runtime.block_on(async { store.leased_locker().await.lock(key).await.unwrap() });
        held_tx.send(()).unwrap();
        thread::sleep(pause);
        then(runtime, guard);
    });
    held_rx
        .recv()
        .expect("the paused holder's thread ended before it held the lock");
    holder
}

/// Returns once `locker`'s store counts a task waiting for `key`, within [`WAIT`]; where
/// it counts none, once a waiter has had `otherwise` to get there.
pub(super) async fn until_waiting(locker: &Locker, key: &str, otherwise: Duration) {
    let waiting = || async {
        let info = locker.inspect(key).await.ok().flatten();
        info.and_then(|info| info.waiting)
    };
    if waiting().await.is_none() {
        tokio::time::sleep(otherwise).await;
        return;
    }
    let counted = || async { waiting().await.is_some_and(|n| n >= 1) };
    eventually(WAIT, "the call to wait for the lock", counted).await;
}

/// A runtime of one thread, the one it is made on: stopping that thread stops it.
fn own_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the paused Locker")
}

/// The thread's output, or its panic, raised again here.
fn join_thread<T>(thread: ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}
