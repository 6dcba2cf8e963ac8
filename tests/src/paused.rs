//! A holder whose process is paused, for the session stores' tests: its locks must come
//! free about one session lease later.

use std::future::Future;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use lock_core::Locker;

/// Takes `key` on the `Locker` that `make` builds, on a runtime of one thread of its own,
/// then stops that thread for `pause`, as a paused process is stopped (none of its tasks
/// runs: no keep-alive, no release), then drops the runtime and the guard. Returns once
/// the lock is held, with the thread to join.
///
/// ```no_run
/// # let server = lock_tests::PostgresServer::spawn();
/// let url = server.url();
/// let holder = lock_tests::hold_then_pause("paused", std::time::Duration::from_secs(4), move || async move {
///     lock_core::Locker::postgres(&url).await.unwrap()
/// });
/// // .. the lock comes free about one session lease later ..
/// holder.join().unwrap();
/// ```
///
/// # Panics
///
/// On the holder's thread, if the lock cannot be taken; here, if that thread ended first.
pub fn hold_then_pause<F>(
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
