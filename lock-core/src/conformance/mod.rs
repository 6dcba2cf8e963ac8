//! The conformance suite: the store contract of [`crate::backend`], checked through the
//! public `Locker` API, written once and run against every store, in this repository or
//! out of it (behind lock-core's `conformance` feature).
//!
//! A store proves itself by passing it. Implement [`StoreUnderTest`] for it (its name, as
//! its `Store::name` says, whether its holds are leases or sessions, and how to make one
//! more `Locker` on it), then call [`conformance!`](crate::conformance!) once in a test
//! file of your own, with `lock-core = { features = ["conformance"] }` among its
//! dev-dependencies:
//!
//! ```
//! use std::sync::Arc;
//!
//! use lock_core::Locker;
//! use lock_core::backend::MemoryStore;
//! use lock_core::conformance::StoreUnderTest;
//!
//! /// One store, shared by every `Locker` of a test, as the replicas of a service share one.
//! #[derive(Debug, Default)]
//! struct Memory {
//!     store: Arc<MemoryStore>,
//! }
//!
//! impl StoreUnderTest for Memory {
//!     fn name(&self) -> &str {
//!         "memory"
//!     }
//!
//!     async fn locker(&self) -> Locker {
//!         Locker::builder().store(self.store.clone()).build().await.unwrap()
//!     }
//! }
//!
//! // One `#[test]` per test of the suite, in `mod memory`: `memory::exclusion_loses_no_update`, ...
//! lock_core::conformance!(memory, Memory::default());
//! # fn main() {}
//! ```
//!
//! The second argument is an expression that makes a fresh store under test (it may start
//! a server), evaluated once per test inside the test's runtime.
//!
//! It covers exclusion (a lost-update counter, every one-owner kind mixed), fencing
//! tokens, `try_lock` and `Timeout`, a waiter woken by a release, and again after its
//! wake-ups were cut, a lock handed on at once among dropped acquires, a fair lock's
//! first-come-first-served order, a hold that ends (a lease that runs out, or a session
//! that ends) cancelling `with_lock`, dropped guards and dropped acquires, reentrancy,
//! bad keys and kinds a store lacks; then the read-write lock ([`readers_overlap`] and
//! the rest), the semaphore, and what an operator sees and does
//! ([`inspect_shows_the_holder_of_a_lock_and_who_waits`],
//! [`force_unlock_frees_a_held_lock_and_its_holder_learns_of_it`]). A test of a kind or
//! an operation that the store lacks ([`crate::LockError::Unsupported`], or the `Config`
//! error of [`crate::backend::Store::force_unlock`] and `inspect`) has nothing to check
//! and passes.
//!
//! It asserts no speed: every wait is on a condition, bounded by a deadline generous
//! enough for a loaded machine, and each test by [`TEST_LIMIT`].

use std::future::{Future, ready};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use crate::{DEFAULT_MAX_KEY_LEN, LockError, LockGuard, LockKind, LockOptions, Locker};

mod ending;
mod fair;
mod handoff;
mod inspect;
mod read_write;
mod semaphore;

pub use ending::*;
pub use fair::*;
pub use handoff::*;
pub use inspect::*;
pub use read_write::*;
pub use semaphore::*;

/// Bounds each test: a deadlock or a lost wake-up fails it instead of hanging.
pub const TEST_LIMIT: Duration = Duration::from_secs(30);

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);
/// A lease short enough to run out within a test.
const SHORT_LEASE: Duration = Duration::from_millis(150);
/// Bounds each wait on something that should happen at once (a lease that ran out, a
/// wake-up): generous, so that a loaded machine does not fail the test.
const PATIENCE: Duration = Duration::from_secs(5);
/// How soon a waiter must get a released lock: well within the safety poll (about 1 s),
/// so that only a wake-up can have got it there.
const PROMPT: Duration = Duration::from_millis(500);

/// How a store's holds end when their owner no longer keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    /// Leases: a hold runs out unless the watchdog renews it (Redis, memory).
    Lease,
    /// Sessions: a hold lasts as long as the session it was taken on, and ends with it
    /// (ZooKeeper's ephemeral nodes, a database's advisory locks).
    Session,
}

/// A store under test: it makes `Locker`s sharing one store, as the replicas of one
/// service would.
pub trait StoreUnderTest: Send + Sync + 'static {
    /// What the store calls itself (its `Store::name`), which its errors quote.
    fn name(&self) -> &str;

    /// How the store's holds end: leases unless it says otherwise. The suite runs the
    /// lease half of its tests, or their session counterparts.
    fn holds(&self) -> Holds {
        Holds::Lease
    }

    /// One more `Locker` on the store: another replica, with a session of its own on a
    /// session store.
    fn locker(&self) -> impl Future<Output = Locker> + Send;

    /// Ends the session that the holds of `locker` live on, as its connection's death or
    /// its expiry would; its next acquisition opens a new one. Called only when
    /// [`holds`](Self::holds) says [`Holds::Session`]; the default panics.
    fn end_session(&self, locker: &Locker) -> impl Future<Output = ()> + Send {
        let _ = locker;
        async { panic!("a store whose holds are sessions must say how to end one") }
    }

    /// Once a waiter of `locker` for `key` listens for its wake-ups, cuts what delivers
    /// them (Redis: the pub/sub connection), as a network fault would, and returns once
    /// the store listens again by itself: `true`. `false` (the default) when the store
    /// has no such channel, and the test has nothing to check.
    fn cut_wakeups(&self, locker: &Locker, key: &str) -> impl Future<Output = bool> + Send {
        let _ = (locker, key);
        ready(false)
    }
}

/// Instantiates every test of the suite for one store: `conformance!(name, make)` expands
/// to `mod name { .. }` with one `#[test]` per suite test, each running on a runtime of
/// its own, making a fresh store under test with the expression `make`, and running the
/// test on it within [`TEST_LIMIT`](crate::conformance::TEST_LIMIT). See the
/// [module docs](mod@crate::conformance).
#[macro_export]
macro_rules! conformance {
    ($store:ident, $make:expr) => {
        $crate::conformance!(@tests $store, $make;
            exclusion_loses_no_update,
            fencing_tokens_strictly_increase,
            fencing_tokens_increase_past_a_hold_that_ended,
            try_lock_takes_a_free_key_and_not_a_held_one,
            a_wait_for_a_held_key_ends_in_timeout,
            a_release_wakes_a_waiter_promptly,
            a_lock_never_stays_free_while_tasks_wait,
            a_waiter_is_woken_after_its_wake_ups_were_cut,
            holds_end_as_the_store_says,
            a_hold_that_ends_cancels_with_lock,
            a_dropped_guard_frees_the_lock,
            a_dropped_waiting_acquire_leaves_no_lock,
            an_acquire_cut_short_anywhere_leaves_no_lock,
            reentrancy_is_per_task_and_shares_the_token,
            fair_and_exclusive_holds_reenter_each_other,
            a_fair_lock_serves_lockers_in_the_order_they_asked,
            bad_keys_are_refused_before_the_store,
            unsupported_kinds_are_refused_naming_store_and_kind,
            readers_overlap,
            readers_and_writers_exclude_each_other,
            a_waiting_writer_gets_in_while_readers_loop,
            queued_readers_go_in_together_after_a_write,
            an_upgrade_is_refused_at_once,
            a_downgrade_reenters_the_write_hold,
            kinds_of_one_name_exclude_each_other,
            a_crashed_reader_frees_only_its_own_share,
            a_semaphore_never_admits_more_than_its_count,
            a_crashed_holders_permit_is_reclaimed,
            a_semaphore_keeps_its_count,
            permits_are_not_reentrant,
            dropped_guards_of_every_kind_free_their_hold,
            force_unlock_frees_a_held_lock_and_its_holder_learns_of_it,
            inspect_shows_the_holder_of_a_lock_and_who_waits,
            inspect_counts_readers_and_permits,
        );
    };
    (@tests $store:ident, $make:expr; $($test:ident),+ $(,)?) => {
        mod $store {
            #[allow(unused_imports, reason = "for `make`, written where the macro is used")]
            use super::*;

            $(
                #[test]
                fn $test() {
                    $crate::conformance::run(
                        concat!(stringify!($store), "::", stringify!($test)),
                        async {
                            let store = $make;
                            $crate::conformance::$test(&store).await;
                        },
                    );
                }
            )+
        }
    };
}

/// Runs one test on a runtime of its own (two worker threads, as a small service has),
/// failing it if it runs past [`TEST_LIMIT`].
pub fn run(test: &str, body: impl Future<Output = ()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the test");
    runtime.block_on(async {
        if timeout(TEST_LIMIT, body).await.is_err() {
            panic!("{test} still running after {TEST_LIMIT:?}: a deadlock or a lost wake-up");
        }
    });
}

/// Awaits `cond` every 5 ms until it returns `true`.
///
/// # Panics
///
/// With `timed out after {deadline:?} waiting for {what}` if `cond` is still false after
/// `deadline`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut calls = 0;
/// lock_core::conformance::eventually(std::time::Duration::from_secs(1), "the third call", || {
///     calls += 1;
///     std::future::ready(calls == 3)
/// })
/// .await;
/// # }
/// ```
#[track_caller]
pub fn eventually<F, Fut>(
    deadline: Duration,
    what: &str,
    mut cond: F,
) -> impl Future<Output = ()> + use<F, Fut>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    const POLL_INTERVAL: Duration = Duration::from_millis(5);
    let caller = std::panic::Location::caller();
    let what = what.to_owned();
    async move {
        let started = Instant::now();
        loop {
            if cond().await {
                return;
            }
            if started.elapsed() >= deadline {
                panic!("timed out after {deadline:?} waiting for {what} (at {caller})");
            }
            sleep(POLL_INTERVAL).await;
        }
    }
}

/// Tasks over two `Locker`s take one key many times, each doing a non-atomic read, yield,
/// write of a counter kept outside the store: no update is lost, and no two tasks are
/// ever inside at once. Exclusive holds alone, then mixed with fair ones where the store
/// has them (one lock, whatever the kind).
pub async fn exclusion_loses_no_update(store: &impl StoreUnderTest) {
    let lockers = two(store).await;
    for (i, kinds) in kind_mixes(&lockers[0]).await.iter().enumerate() {
        let seen = contend(&lockers, &format!("counter:{i}"), kinds).await;
        assert_eq!(seen.most_inside, 1, "{kinds:?}: several holders at once");
        assert_eq!(seen.count, seen.acquisitions, "{kinds:?}: lost updates");
    }
}

/// Fencing tokens of one key, recorded while held by tasks over two `Locker`s, strictly
/// increase in the order the lock was taken (exclusive holds, then mixed with fair ones
/// where the store has them).
pub async fn fencing_tokens_strictly_increase(store: &impl StoreUnderTest) {
    let lockers = two(store).await;
    for (i, kinds) in kind_mixes(&lockers[0]).await.iter().enumerate() {
        let seen = contend(&lockers, &format!("fenced:{i}"), kinds).await;
        assert_eq!(seen.tokens.len() as u64, seen.acquisitions);
        if let Some(w) = seen.tokens.windows(2).find(|w| w[0] >= w[1]) {
            panic!("{kinds:?}: fencing token {} followed {}", w[1], w[0]);
        }
    }
}

/// `try_lock` makes one attempt: `Ok(None)` on a key held elsewhere, `Ok(Some)` on a free
/// one.
pub async fn try_lock_takes_a_free_key_and_not_a_held_one(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let held = a.lock("tried").await.unwrap();
    assert!(
        b.try_lock("tried").await.unwrap().is_none(),
        "try_lock took a key held by another Locker"
    );
    let free = b
        .try_lock("free")
        .await
        .unwrap()
        .expect("try_lock of a free key");
    assert_eq!(free.key(), "free");
    free.release().await.unwrap();
    held.release().await.unwrap();
    assert!(free_for(&b, "tried").await, "released, yet not free");
}

/// A wait for a key held elsewhere ends in `Timeout` once the wait is over (not before,
/// and not long after), with the holder's remaining lease as `retry_after` where holds
/// are leases.
pub async fn a_wait_for_a_held_key_ends_in_timeout(store: &impl StoreUnderTest) {
    const WAIT: Duration = Duration::from_millis(200);
    const HOLDER_LEASE: Duration = Duration::from_secs(10);
    let [a, b] = two(store).await;
    let held = a
        .lock_with("busy", LockOptions::new().lease(HOLDER_LEASE))
        .await
        .unwrap();
    let started = Instant::now();
    let err = b
        .lock_with("busy", LockOptions::new().wait(WAIT))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(err.is_timeout(), "expected a timeout, got: {err}");
    assert_eq!(err.key(), Some("busy"));
    assert!(waited >= WAIT, "gave up after {waited:?}, before its wait");
    assert!(waited < WAIT + PATIENCE, "gave up only after {waited:?}");
    if store.holds() == Holds::Lease {
        let retry = err
            .retry_after()
            .expect("a timeout with the holder's lease");
        assert!(
            retry > Duration::ZERO && retry <= HOLDER_LEASE,
            "retry after {retry:?}, for a holder with a {HOLDER_LEASE:?} lease"
        );
    }
    held.release().await.unwrap();
}

/// A waiter on another `Locker`, for a key whose holder has a long lease, gets the lock
/// soon after its release: the release woke it, where a poll would come later.
pub async fn a_release_wakes_a_waiter_promptly(store: &impl StoreUnderTest) {
    /// Time for the waiter to try, listen and try again; had it not parked by the
    /// release, it takes the lock on an attempt of its own (which passes, proving less).
    /// A waiter parked this long before the release polls no earlier than 600 ms after
    /// it.
    const PARK: Duration = Duration::from_millis(150);
    let [a, b] = two(store).await;
    let held = a
        .lock_with("wake", LockOptions::new().lease(30 * SEC))
        .await
        .unwrap();
    let (asking, asked) = tokio::sync::oneshot::channel();
    let waiter = tokio::spawn(async move {
        asking.send(()).unwrap();
        let guard = b
            .lock_with("wake", LockOptions::new().wait(10 * SEC))
            .await
            .unwrap();
        let got = Instant::now();
        guard.release().await.unwrap();
        got
    });
    asked.await.unwrap();
    // No public signal says a waiter is parked: give it a moment.
    sleep(PARK).await;
    if waiter.is_finished() {
        join(waiter).await;
        panic!("the waiter got a held lock");
    }
    release_and_see_it_woken(held, waiter).await;
}

/// A waiter whose wake-ups were cut (Redis: its `Locker`'s pub/sub connection killed)
/// listens again on its own, and the next release wakes it, well before a poll would.
/// Nothing to check for a store that has no channel to cut.
pub async fn a_waiter_is_woken_after_its_wake_ups_were_cut(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let held = a
        .lock_with("cut", LockOptions::new().lease(30 * SEC))
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let guard = b.lock_with("cut", long_wait()).await.unwrap();
            let got = Instant::now();
            guard.release().await.unwrap();
            got
        }
    });
    if !store.cut_wakeups(&b, "cut").await {
        held.release().await.unwrap();
        join(waiter).await;
        return;
    }
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    release_and_see_it_woken(held, waiter).await;
}

/// An operator forces a lock open: another `Locker`'s waiter gets it at once, the
/// holder's guard reports the loss at its next renewal, and a free key reports nothing
/// held. Readers of a read-write lock, where the store has them, are freed alike. Nothing
/// to check for a store that cannot force a lock open.
pub async fn force_unlock_frees_a_held_lock_and_its_holder_learns_of_it(
    store: &impl StoreUnderTest,
) {
    let [holder, operator] = two(store).await;
    let guard = holder
        .lock_with("stuck", LockOptions::new().lease(SHORT_LEASE))
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let operator = operator.clone();
        async move { operator.lock_with("stuck", long_wait()).await }
    });
    match operator.force_unlock("stuck").await {
        Ok(held) => assert!(held, "it was held"),
        Err(e) if e.is_config() => {
            // A store that cannot force a lock open: nothing to check.
            guard.release().await.unwrap();
            join(waiter).await.unwrap().release().await.unwrap();
            return;
        }
        Err(e) => panic!("force_unlock: {e}"),
    }
    let next = timeout(PATIENCE, waiter)
        .await
        .expect("the waiter was not let in")
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > guard.fencing_token());
    timeout(PATIENCE, guard.lost())
        .await
        .expect("the holder never learnt its lock was forced open");
    assert!(guard.is_lost());
    next.release().await.unwrap();
    assert!(
        !operator.force_unlock("stuck").await.unwrap(),
        "it was free"
    );
    assert!(
        operator
            .force_unlock("")
            .await
            .unwrap_err()
            .is_invalid_key()
    );

    if has_kind(&holder, LockKind::Read).await {
        let reader = holder.read("shared").await.unwrap();
        assert!(operator.force_unlock("shared").await.unwrap());
        let writer = operator
            .lock_with(
                "shared",
                LockOptions::new().kind(LockKind::Write).wait(PATIENCE),
            )
            .await
            .expect("a write after the readers were forced out");
        writer.release().await.unwrap();
        drop(reader);
    }
}

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

/// Bad keys (empty, control characters, over the length limit, starting with '}') are
/// refused as `InvalidKey` by every call, before the store: nothing is locked under a
/// similar valid key, such as one a careless store would have made of it.
pub async fn bad_keys_are_refused_before_the_store(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let long = "x".repeat(DEFAULT_MAX_KEY_LEN + 1);
    let cases: [(&str, &[&str]); 6] = [
        ("", &[" ", "_"]),
        ("line\nbreak", &["line", "linebreak", "line break"]),
        ("nul\0byte", &["nul", "nulbyte"]),
        ("del\u{7f}ete", &["del", "delete"]),
        ("}brace", &["brace", "{brace}"]),
        (&long, &[&long[..DEFAULT_MAX_KEY_LEN]]),
    ];
    for (bad, _) in cases {
        let err = a.lock_with(bad, long_wait()).await.unwrap_err();
        assert!(err.is_invalid_key(), "lock_with({bad:?}): {err}");
        let err = a.try_lock(bad).await.unwrap_err();
        assert!(err.is_invalid_key(), "try_lock({bad:?}): {err}");
        let ran = AtomicBool::new(false);
        let body = async { ran.store(true, Ordering::SeqCst) };
        let err = a.with_lock(bad, body).await.unwrap_err();
        assert!(err.is_invalid_key(), "with_lock({bad:?}): {err}");
        assert!(
            !ran.load(Ordering::SeqCst),
            "with_lock({bad:?}) ran its body"
        );
    }
    a.flush().await;
    let similar: Vec<&str> = cases.iter().flat_map(|(_, s)| s.iter().copied()).collect();
    assert_all_free(&[&b], &similar).await;
}

/// Each kind beyond exclusive and fair is either taken (a store that has it) or refused
/// as `Unsupported`, naming the store and the kind, with nothing locked; never another
/// error, never a panic.
pub async fn unsupported_kinds_are_refused_naming_store_and_kind(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let kinds = [
        LockKind::Read,
        LockKind::Write,
        LockKind::Semaphore { permits: 2 },
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        let key = format!("kind:{i}");
        let opts = LockOptions::new().kind(kind).wait(PATIENCE);
        let taken = tokio::spawn({
            let (a, key) = (a.clone(), key.clone());
            async move {
                let guard = a.lock_with(&key, opts).await?;
                let kind = guard.kind();
                guard.release().await?;
                Ok::<_, LockError>(kind)
            }
        })
        .await
        .unwrap_or_else(|e| panic!("a {kind} lock on {}: {e}", store.name()));
        let err = match taken {
            Ok(held) => {
                assert_eq!(held, kind, "asked for a {kind} lock");
                continue;
            }
            Err(err) => err,
        };
        let LockError::Unsupported {
            store: named,
            kind: asked,
            ..
        } = &err
        else {
            panic!(
                "a {kind} lock on {}: expected it or Unsupported, got: {err}",
                store.name()
            );
        };
        assert_eq!((named.as_str(), *asked), (store.name(), kind));
        assert_eq!(err.key(), Some(key.as_str()));
        let message = err.to_string();
        for name in [store.name(), &kind.to_string()] {
            assert!(message.contains(name), "{message:?} does not name {name:?}");
        }
        assert!(
            free_for(&b, &key).await,
            "a refused {kind} lock left a hold"
        );
    }
}

/// Two `Locker`s on the store: two replicas.
async fn two(store: &impl StoreUnderTest) -> [Locker; 2] {
    [store.locker().await, store.locker().await]
}

/// Two `Locker`s on the store, if it has every one of `kinds`.
async fn two_with(store: &impl StoreUnderTest, kinds: &[LockKind]) -> Option<[Locker; 2]> {
    let lockers = two(store).await;
    for &kind in kinds {
        if !has_kind(&lockers[0], kind).await {
            return None;
        }
    }
    Some(lockers)
}

/// The mixes of one-holder kinds to contend with: exclusive alone, then with fair and
/// with write holds if the store has them (each is one lock with the others).
async fn kind_mixes(locker: &Locker) -> Vec<Vec<LockKind>> {
    let fair = has_kind(locker, LockKind::Fair).await;
    let mut mixes = vec![vec![LockKind::Exclusive]];
    if fair {
        mixes.push(vec![LockKind::Exclusive, LockKind::Fair]);
    }
    if has_kind(locker, LockKind::Write).await {
        let mut mix = vec![LockKind::Exclusive, LockKind::Write];
        if fair {
            mix.push(LockKind::Fair);
        }
        mixes.push(mix);
    }
    mixes
}

/// Whether the store takes locks of `kind` (tried on a key of its own, and given back).
async fn has_kind(locker: &Locker, kind: LockKind) -> bool {
    let opts = LockOptions::new().kind(kind).wait(Duration::ZERO);
    match locker.lock_with(&format!("has-kind:{kind}"), opts).await {
        Ok(guard) => guard.release().await.is_ok(),
        Err(e) if e.is_unsupported() => false,
        Err(e) => panic!("a {kind} lock: {e}"),
    }
}

/// What tasks contending for one lock saw.
#[derive(Debug)]
struct Contention {
    acquisitions: u64,
    /// The counter the holders incremented, one at a time if the lock held.
    count: u64,
    /// The most holders inside at once.
    most_inside: usize,
    /// The fencing tokens, in the order the lock was taken.
    tokens: Vec<u64>,
}

/// The state contending tasks share, outside the store.
#[derive(Debug, Default)]
struct Shared {
    count: AtomicU64,
    inside: AtomicUsize,
    most_inside: AtomicUsize,
    tokens: Mutex<Vec<u64>>,
}

/// 8 tasks, spread over two `Locker`s and over `kinds`, each take `key` 32 times. While it
/// holds the lock, each records its fencing token, counts itself in and out, and
/// increments a counter with a deliberately non-atomic read, yield, write.
async fn contend(lockers: &[Locker; 2], key: &str, kinds: &[LockKind]) -> Contention {
    const TASKS: usize = 8;
    const ROUNDS: usize = 32;
    let shared = Arc::new(Shared::default());
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (locker, key, shared) = (lockers[i % 2].clone(), key.to_owned(), shared.clone());
        let opts = long_wait().kind(kinds[i / 2 % kinds.len()]);
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = locker.lock_with(&key, opts).await.unwrap();
                shared.tokens.lock().unwrap().push(guard.fencing_token());
                let inside = shared.inside.fetch_add(1, Ordering::SeqCst) + 1;
                shared.most_inside.fetch_max(inside, Ordering::SeqCst);
                let seen = shared.count.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                shared.count.store(seen + 1, Ordering::SeqCst);
                shared.inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        join(task).await;
    }
    Contention {
        acquisitions: (TASKS * ROUNDS) as u64,
        count: shared.count.load(Ordering::SeqCst),
        most_inside: shared.most_inside.load(Ordering::SeqCst),
        tokens: std::mem::take(&mut shared.tokens.lock().unwrap()),
    }
}

/// Options for a hold that the test lets end as a crashed owner's would, with
/// [`end_holds`]: on a lease store, a short lease that is not renewed.
fn ending(store: &impl StoreUnderTest) -> LockOptions {
    match store.holds() {
        Holds::Lease => LockOptions::new().lease(SHORT_LEASE).watchdog(false),
        Holds::Session => LockOptions::new(),
    }
}

/// Ends the holds that `locker` took with [`ending`] options, as a crash would: a lease
/// store's run out by themselves; a session store's session is ended.
async fn end_holds(store: &impl StoreUnderTest, locker: &Locker) {
    if store.holds() == Holds::Session {
        store.end_session(locker).await;
    }
}

/// A wait much longer than any test step.
fn long_wait() -> LockOptions {
    LockOptions::new().wait(10 * SEC)
}

/// A task that waits for `key`, cut short after `cut` if given, and lets the lock go at
/// once if it gets it: whether it got it.
fn spawn_waiter(locker: &Locker, key: &str, cut: Option<Duration>) -> JoinHandle<bool> {
    let (locker, key) = (locker.clone(), key.to_owned());
    tokio::spawn(async move {
        let acquire = locker.lock_with(&key, long_wait());
        let taken = match cut {
            None => acquire.await,
            Some(after) => match timeout(after, acquire).await {
                Ok(taken) => taken,
                Err(_) => return false,
            },
        };
        drop(taken.unwrap());
        true
    })
}

/// Releases `held`, and checks that `waiter` (a task that answers when it got the lock)
/// got it well within the safety poll (about 1 s): the release woke it, where a poll
/// would have come later.
async fn release_and_see_it_woken(held: LockGuard, waiter: JoinHandle<Instant>) {
    let released = Instant::now();
    held.release().await.unwrap();
    let got = timeout(PATIENCE, join(waiter))
        .await
        .expect("the waiter never got the released lock");
    let after = got.saturating_duration_since(released);
    assert!(
        after <= PROMPT,
        "the waiter got the lock {after:?} after its release: the release did not wake \
         it (a poll found it; the safety poll is about 1 s)"
    );
}

/// Whether another task could take `key` on `locker` right now (taken and released).
async fn free_for(locker: &Locker, key: &str) -> bool {
    let (locker, key) = (locker.clone(), key.to_owned());
    join(tokio::spawn(async move {
        let Some(guard) = locker.try_lock(&key).await.unwrap() else {
            return false;
        };
        guard.release().await.unwrap();
        true
    }))
    .await
}

/// Flushes every `Locker` (its background releases are done), then checks that each key
/// is free for each of them.
async fn assert_all_free(lockers: &[&Locker], keys: &[&str]) {
    for locker in lockers {
        locker.flush().await;
    }
    for key in keys {
        for (i, locker) in lockers.iter().enumerate() {
            assert!(
                free_for(locker, key).await,
                "{key:?} left held (Locker {i})"
            );
        }
    }
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

/// The task's output, or its panic, raised again here.
async fn join<T>(task: JoinHandle<T>) -> T {
    match task.await {
        Ok(out) => out,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// The output of a task that may have been aborted: `None` if it was.
async fn join_aborted<T>(task: JoinHandle<T>) -> Option<T> {
    match task.await {
        Ok(out) => Some(out),
        Err(e) if e.is_cancelled() => None,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Sets its flag when dropped.
#[derive(Debug)]
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
