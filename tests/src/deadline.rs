//! A server that stops answering (paused, or behind a network gone silent), for every
//! store's tests: a lock call still returns by its deadline.

use std::future::Future;
use std::time::{Duration, Instant};

use lock_core::{LockError, LockOptions, Locker};

/// How long the calls wait.
const WAIT: Duration = Duration::from_secs(1);
/// How much later than its wait a call may return: scheduling on a busy machine, not the
/// store's own slack (a few milliseconds).
pub const DEADLINE_SLACK: Duration = Duration::from_millis(250);

/// Checks that lock calls return by their deadline while the server answers nothing: a
/// `Locker` made by `make` holds one lock, and a second `Locker` asks for it with a wait
/// of 1 s; 200 ms later `pause` silences the server (`SIGSTOP`, or a
/// [`TcpProxy`](crate::TcpProxy) that stalls), and the second asks for a free lock with a
/// wait of 1 s. Each call returns [`LockError::Timeout`] (or [`LockError::Backend`])
/// within 1 s and [`DEADLINE_SLACK`], though the server stays silent for 3 s. Once
/// `resume` has run, the free lock can be taken again.
///
/// ```no_run
/// # async fn run() {
/// use lock_tests::TestServer;
///
/// let server = lock_tests::PostgresServer::spawn();
/// let url = server.url();
/// lock_tests::calls_end_by_their_deadline_while_the_server_is_silent(
///     || lock_core::Locker::postgres(&url),
///     || server.pause(),
///     || server.resume(),
/// )
/// .await;
/// # }
/// ```
///
/// # Panics
///
/// If a call returns late, takes a lock, or fails other than by a timeout or the store;
/// or if the store does not serve again once resumed.
pub async fn calls_end_by_their_deadline_while_the_server_is_silent<M, F>(
    make: M,
    pause: impl FnOnce(),
    resume: impl FnOnce(),
) where
    M: Fn() -> F,
    F: Future<Output = Result<Locker, LockError>>,
{
    let holder = make().await.expect("a Locker to hold the lock");
    let waiter = make().await.expect("a Locker to wait");
    let held = holder.lock("deadline:held").await.unwrap();
    let call = |key| {
        let waiter = waiter.clone();
        async move {
            let asked = Instant::now();
            let outcome = waiter.lock_with(key, LockOptions::new().wait(WAIT)).await;
            (key, outcome.map(drop), asked.elapsed())
        }
    };
    // The held key's call is answered before the server goes silent, and waits on; the
    // free key's is sent once it is.
    let silenced = async {
        tokio::time::sleep(WAIT / 5).await;
        pause();
        let silent_until = Instant::now() + 3 * WAIT;
        let free_call = call("deadline:free").await;
        tokio::time::sleep_until(silent_until.into()).await;
        resume();
        free_call
    };
    let (held_call, free_call) = tokio::join!(call("deadline:held"), silenced);
    for (key, outcome, took) in [held_call, free_call] {
        assert!(
            took <= WAIT + DEADLINE_SLACK,
            "a call for {key} with a wait of {WAIT:?} took {took:?} while the server was silent"
        );
        assert!(
            matches!(
                outcome,
                Err(LockError::Timeout { .. } | LockError::Backend { .. })
            ),
            "a call for {key} while the server was silent: {outcome:?}"
        );
    }
    let again = waiter
        .lock_with("deadline:free", LockOptions::new().wait(10 * WAIT))
        .await
        .expect("the store did not serve again once the server resumed");
    again.release().await.unwrap();
    drop(held);
}
