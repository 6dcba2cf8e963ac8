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
//! the rest), the semaphore, holds and permits of one name, a holder paused past its
//! session's lease ([`a_paused_holder_frees_its_lock`] and the rest), and what an operator sees and
//! does ([`inspect_shows_the_holder_of_a_lock_and_who_waits`],
//! [`force_unlock_frees_a_held_lock_and_its_holder_learns_of_it`]), and leader election
//! ([`one_candidate_leads_at_a_time`] and the rest) and at-most-once jobs
//! ([`a_job_held_at_least_a_while_runs_once_per_tick`]). A test of a kind or
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

mod dropping;
mod election;
mod ending;
mod exclusion;
mod fair;
mod inspect;
mod jobs;
mod one_name;
mod paused;
mod read_write;
mod reentrancy;
mod refusals;
mod semaphore;
mod waking;

pub use dropping::*;
pub use election::*;
pub use ending::*;
pub use exclusion::*;
pub use fair::*;
pub use inspect::*;
pub use jobs::*;
pub use one_name::*;
pub use paused::*;
pub use read_write::*;
pub use reentrancy::*;
pub use refusals::*;
pub use semaphore::*;
pub use waking::*;

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

/// How the followers of an election learn who leads
/// ([`Election::watch`](crate::Election::watch)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Followers {
    /// They ask every interval: the store cannot tell them
    /// ([`Store::watch_holders`](crate::backend::Store::watch_holders)'s default).
    Ask,
    /// The store tells them when a leader takes over, resigns or is forced out.
    Told,
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

    /// How the store's followers of an election learn who leads: they ask, unless it
    /// says otherwise. The suite checks that a store that says [`Followers::Told`] tells
    /// them ([`a_follower_is_told_of_each_new_leader`]).
    fn followers(&self) -> Followers {
        Followers::Ask
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

    /// How long a session of the `Locker`s that [`leased_locker`](Self::leased_locker)
    /// makes outlives the last sign of life of the process that opened it: a session
    /// lease, ZooKeeper's session timeout. `None` (the default) when the store's sessions
    /// have none, and the paused-holder checks ([`a_paused_holder_frees_its_lock`] and
    /// the rest) have nothing to check.
    fn session_lease(&self) -> Option<Duration> {
        None
    }

    /// One more `Locker` on the store whose sessions have
    /// [`session_lease`](Self::session_lease), made on the runtime that will run it.
    /// Called only when that is `Some`; the default panics.
    fn leased_locker(&self) -> impl Future<Output = Locker> + Send {
        async {
            panic!("a store whose sessions have a lease must say how to make a Locker on them")
        }
    }

    /// Once a follower of the election `name` on `locker` is told of its leaders by the
    /// store, cuts what tells it (Redis: its pub/sub connection; PostgreSQL: its
    /// listening connection), as a network fault would, and returns once the follower
    /// listens again by itself: `true`. `false` (the default) when the store has no such
    /// channel, and the test has nothing to check.
    fn cut_followers(&self, locker: &Locker, name: &str) -> impl Future<Output = bool> + Send {
        let _ = (locker, name);
        ready(false)
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
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
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
            holds_and_permits_of_one_name_never_overlap,
            an_exclusive_lock_is_not_starved_by_a_busy_semaphore,
            a_paused_holder_frees_its_lock,
            a_resumed_holder_claims_nothing,
            a_call_paused_mid_wait_hands_out_no_lost_guard,
            force_unlock_frees_a_held_lock_and_its_holder_learns_of_it,
            inspect_shows_the_holder_of_a_lock_and_who_waits,
            inspect_counts_readers_and_permits,
            one_candidate_leads_at_a_time,
            the_leader_is_read_by_a_process_holding_nothing,
            a_follower_is_told_of_each_new_leader,
            a_follower_is_told_again_after_its_news_was_cut,
            a_leader_that_ends_is_followed_with_a_higher_token,
            resigning_hands_over_and_dropping_leaves_nothing,
            run_cancels_its_work_when_leadership_is_lost,
            a_job_held_at_least_a_while_runs_once_per_tick,
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

/// Whether the store takes locks of `kind` (tried on a key of its own, and given back).
async fn has_kind(locker: &Locker, kind: LockKind) -> bool {
    let opts = LockOptions::new().kind(kind).wait(Duration::ZERO);
    match locker.lock_with(&format!("has-kind:{kind}"), opts).await {
        Ok(guard) => guard.release().await.is_ok(),
        Err(e) if e.is_unsupported() => false,
        Err(e) => panic!("a {kind} lock: {e}"),
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

/// The task's output, or its panic, raised again here.
async fn join<T>(task: JoinHandle<T>) -> T {
    match task.await {
        Ok(out) => out,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
