//! A holder whose process is paused, for the session stores' tests: its locks must come
//! free about one session lease later.

use std::future::Future;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{LockOptions, Locker};

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
    let holder = hold_then_pause("paused", lease * 4, make.clone());
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
/// then stops that thread for `pause`, then drops the runtime and the guard. Returns once
/// the lock is held, with the thread to join.
fn hold_then_pause<F>(
    key: &str,
    pause: Duration,
    make: impl FnOnce() -> F + Send + 'static,
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
        drop(runtime);
        drop(guard);
    });
    held_rx
        .recv()
        .expect("the paused holder's thread ended before it held the lock");
    holder
}
