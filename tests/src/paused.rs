//! A holder whose process is paused, for the session stores' tests: its locks must come
//! free about one session lease later, and once it runs again it claims none of them and
//! is handed no guard its session may have lost meanwhile.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{LockError, LockGuard, LockOptions, Locker};

/// How long the second `Locker` waits for the paused holder's lock.
const WAIT: Duration = Duration::from_secs(5);
/// How much later than one lease the lock may come free.
const SLACK: Duration = Duration::from_secs(1);

/// Checks that a paused holder loses its lock about one session `lease` later: a `Locker`
/// made by `make` (whose sessions have that lease) takes a lock on a runtime of one thread
/// of its own, then that thread stops for four leases, as a paused process stops (none of
/// its tasks runs: no keep-alive, no release); another `Locker` made by `make` gets the
/// lock within `lease` + 1 s.
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::Locker;
/// use lock_core::backend::PostgresStore;
///
/// let server = lock_tests::PostgresServer::spawn();
/// let url = server.url();
/// let lease = Duration::from_secs(1);
/// lock_tests::a_paused_holder_frees_its_lock(lease, move || {
///     let url = url.clone();
///     async move {
///         let store = PostgresStore::builder(&url).session_lease(lease).build().await.unwrap();
///         Locker::builder().store(Arc::new(store)).build().await.unwrap()
///     }
/// });
/// ```
///
/// # Panics
///
/// If the lock comes free later than that, or not within 5 s, or cannot be taken.
#[track_caller]
pub fn a_paused_holder_frees_its_lock<M, F>(lease: Duration, make: M)
where
    M: Fn() -> F + Clone + Send + 'static,
    F: Future<Output = Locker>,
{
    let holder = hold_then_pause("paused", lease * 4, make.clone(), |runtime, guard| {
        drop(runtime);
        drop(guard);
    });
    let runtime = tokio::runtime::Runtime::new().expect("a runtime for the waiter");
    let waited = runtime.block_on(async {
        let locker = make().await;
        let asked = Instant::now();
        let guard = locker
            .lock_with("paused", LockOptions::new().wait(WAIT))
            .await
            .expect("the paused holder's lock never came free");
        let waited = asked.elapsed();
        guard.release().await.unwrap();
        waited
    });
    holder.join().expect("the paused holder's thread panicked");
    assert!(waited <= lease + SLACK, "came free after {waited:?}");
}

/// Takes `key` on the `Locker` that `make` builds, on a runtime of one thread of its own,
/// then stops that thread for `pause`, then hands the runtime and the guard to `then`, on
/// that thread. Returns once the lock is held, with the thread to join.
fn hold_then_pause<F>(
    key: &str,
    pause: Duration,
    make: impl FnOnce() -> F + Send + 'static,
    then: impl FnOnce(tokio::runtime::Runtime, LockGuard) + Send + 'static,
) -> thread::JoinHandle<()>
where
    F: Future<Output = Locker>,
{
    let key = key.to_owned();
    let (held_tx, held_rx) = mpsc::channel();
    let holder = thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the paused holder");
        let guard = runtime.block_on(async { make().await.lock(&key).await.unwrap() });
        held_tx.send(()).unwrap();
        thread::sleep(pause);
        then(runtime, guard);
    });
    held_rx
        .recv()
        .expect("the paused holder's thread ended before it held the lock");
    holder
}

/// How soon after a paused holder runs again its guard must report the loss.
const NOTICED: Duration = Duration::from_millis(500);

/// Checks that a holder paused past its session `lease` claims nothing once it runs
/// again: a `Locker` made by `make` takes a lock on a runtime of one thread of its own,
/// which then stops for four leases, as a paused process stops; meanwhile another
/// `Locker` takes the lock. Once the thread runs again, its guard answers `is_held()`
/// false at once, its `lost()` fires within 500 ms and its `release()` says
/// [`LockError::NotHeld`], while the other still holds the lock.
///
/// # Panics
///
/// If the resumed holder still claims the lock, or the other `Locker` cannot take it.
#[track_caller]
pub fn a_resumed_holder_claims_nothing<M, F>(lease: Duration, make: M)
where
    M: Fn() -> F + Clone + Send + 'static,
    F: Future<Output = Locker>,
{
    let (taken_tx, taken_rx) = mpsc::channel();
    let holder = hold_then_pause("claimed", lease * 4, make.clone(), move |runtime, guard| {
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
    let runtime = tokio::runtime::Runtime::new().expect("a runtime for the other holder");
    let guard = runtime.block_on(async {
        make()
            .await
            .lock_with("claimed", LockOptions::new().wait(WAIT))
            .await
            .expect("the paused holder's lock never came free")
    });
    taken_tx.send(()).unwrap();
    let resumed = holder.join();
    runtime.block_on(async {
        assert!(
            guard.is_held().await.unwrap(),
            "the new holder lost the lock"
        );
        guard.release().await.unwrap();
    });
    if let Err(panic) = resumed {
        std::panic::resume_unwind(panic);
    }
}

/// Checks that a process paused in the middle of a lock call is handed no guard its
/// session lost meanwhile: a `Locker` made by `make` waits for a lock that another holds,
/// on a runtime of one thread of its own; that thread stops for three session `lease`s,
/// and meanwhile the other gives the lock back (the server grants it to the paused wait,
/// then ends the idle session a lease later) and takes it again. Once the thread runs
/// again, its call must not return while the other holds the lock, and the guard it
/// returns once the other let go is held and not lost.
///
/// # Panics
///
/// If the resumed call hands out a guard already lost, or while the other holds the lock.
#[track_caller]
pub fn a_call_paused_mid_wait_hands_out_no_lost_guard<M, F>(lease: Duration, make: M)
where
    M: Fn() -> F + Clone + Send + 'static,
    F: Future<Output = Locker>,
{
    let runtime = tokio::runtime::Runtime::new().expect("a runtime for the other holder");
    let locker = runtime.block_on(make());
    let first = runtime.block_on(locker.lock("granted")).unwrap();
    let other_holds = Arc::new(AtomicBool::new(true));
    let (waiting_tx, waiting_rx) = mpsc::channel();
    let (resumed_tx, resumed_rx) = tokio::sync::oneshot::channel();
    let holder = {
        let other_holds = other_holds.clone();
        let make = make.clone();
        thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the paused caller");
            let locker = runtime.block_on(make());
            let call = runtime.spawn(async move {
                let wait = LockOptions::new().wait(lease * 3 + WAIT * 2);
                let guard = locker.lock_with("granted", wait).await?;
                let held = guard.is_held().await? && !guard.is_lost();
                let while_other_holds = other_holds.load(Ordering::SeqCst);
                guard.release().await?;
                Ok::<_, LockError>((held, while_other_holds))
            });
            // Long enough for the call to be waiting inside the server.
            runtime.block_on(async { tokio::time::sleep(lease / 2).await });
            waiting_tx.send(()).unwrap();
            thread::sleep(lease * 3);
            let _ = resumed_tx.send(());
            runtime.block_on(call).expect("the paused call panicked")
        })
    };
    waiting_rx
        .recv()
        .expect("the paused caller's thread ended before it waited");
    runtime.block_on(async {
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
    let (held, while_other_holds) = holder
        .join()
        .expect("the paused caller's thread panicked")
        .expect("the paused call failed");
    assert!(held, "the resumed call handed out a guard already lost");
    assert!(
        !while_other_holds,
        "the resumed call handed out the lock while another held it"
    );
}
