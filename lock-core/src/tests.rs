//! The `Locker`'s own semantics on the in-memory store, on paused tokio time so leases,
//! renewals and waits are exact and instant: the watchdog, losses, hand-overs to the
//! next in line, settings, multi-key locks and session holds. What every store must do
//! is the conformance suite's (`crate::conformance`), which runs on this store too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Acquire, Acquired, Hold, MemoryStore, Outcome, Renewal, Store, StoreFuture};
use crate::{LockError, LockKind, LockOptions, Locker};

const SEC: Duration = Duration::from_secs(1);

fn evict(locker: &Locker, key: &str) {
    memory(locker).evict(key);
}

fn memory(locker: &Locker) -> &MemoryStore {
    let store: &dyn std::any::Any = &*locker.inner.store;
    store
        .downcast_ref::<MemoryStore>()
        .expect("in-memory tests only")
}

/// Lets spawned tasks run until `n` fair waiters are in `key`'s line.
async fn until_in_line(locker: &Locker, key: &str, n: usize) {
    for _ in 0..1000 {
        if memory(locker).line_len(key) == n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{n} waiters never got in line");
}

#[tokio::test(start_paused = true)]
async fn only_the_owner_can_release_or_extend() {
    let locker = Locker::in_memory();
    let short = LockOptions::new().lease(SEC).watchdog(false);
    let first = locker.lock_with("k", short).await.unwrap();
    tokio::time::advance(SEC).await;
    let second = tokio::spawn({
        let locker = locker.clone();
        async move {
            locker
                .lock_with("k", LockOptions::new().wait(Duration::ZERO))
                .await
        }
    })
    .await
    .unwrap()
    .expect("an expired lease frees the lock");

    assert!(first.extend(SEC).await.unwrap_err().is_not_held());
    assert!(!first.is_held().await.unwrap());
    assert!(first.release().await.unwrap_err().is_not_held());
    assert!(
        second.is_held().await.unwrap(),
        "the new owner's lock was touched"
    );
    assert!(second.fencing_token() > 0);
}

#[tokio::test(start_paused = true)]
async fn watchdog_keeps_a_short_lease_alive() {
    let locker = Locker::in_memory();
    let guard = locker
        .lock_with("k", LockOptions::new().lease(SEC))
        .await
        .unwrap();
    let lost = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let (lost, signal) = (lost.clone(), guard.lost());
        async move {
            signal.await;
            lost.store(true, Ordering::SeqCst);
        }
    });
    tokio::time::sleep(5 * SEC).await;
    assert!(guard.is_held().await.unwrap());
    assert!(!lost.load(Ordering::SeqCst));
    let other = locker.clone();
    let attempt = tokio::spawn(async move { other.try_lock("k").await.unwrap().is_some() });
    assert!(!attempt.await.unwrap(), "another task got a renewed lock");
}

#[tokio::test(start_paused = true)]
async fn a_shorter_lease_wakes_a_watchdog_asleep_for_a_longer_one() {
    let locker = Locker::in_memory();
    // The watchdog sleeps until this one is due, a third of a minute away...
    let _long = locker
        .lock_with("long", LockOptions::new().lease(60 * SEC))
        .await
        .unwrap();
    tokio::time::sleep(SEC).await;
    // ... and must wake for this one, due in a third of a second.
    let short = locker
        .lock_with("short", LockOptions::new().lease(SEC))
        .await
        .unwrap();
    tokio::time::sleep(5 * SEC).await;
    assert!(short.is_held().await.unwrap(), "the short lease ran out");
}

#[test]
fn the_watchdog_starts_again_on_a_new_runtime() {
    let locker = Locker::in_memory();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    // Its first task runs on a runtime that then shuts down.
    runtime().block_on(async {
        let _held = locker.lock_with("a", LockOptions::new().lease(SEC)).await;
        tokio::time::sleep(SEC / 2).await;
    });
    runtime().block_on(async {
        let guard = locker
            .lock_with("b", LockOptions::new().lease(SEC))
            .await
            .unwrap();
        tokio::time::sleep(5 * SEC).await;
        assert!(
            guard.is_held().await.unwrap(),
            "no watchdog renewed the lease"
        );
    });
}

#[tokio::test(start_paused = true)]
async fn without_watchdog_the_lease_expires_and_the_guard_is_lost() {
    let locker = Locker::in_memory();
    let guard = locker
        .lock_with("k", LockOptions::new().lease(SEC).watchdog(false))
        .await
        .unwrap();
    let start = Instant::now();
    guard.lost().await;
    assert_eq!(start.elapsed(), SEC);
    assert!(!guard.is_held().await.unwrap());
}

/// Dropping the last clone of a `Locker` stops its watchdog task though a guard lives:
/// the guard is lost at once (a scope under it cancelled), and still gives its lock back.
#[tokio::test(start_paused = true)]
async fn a_locker_dropped_under_a_live_guard_stops_its_watchdog() {
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let locker = Locker::in_memory();
    let store = locker.inner.store.clone();
    let key = crate::LockKey::new("k").unwrap();
    let clone = locker.clone();
    let guard = locker.lock("k").await.unwrap();
    assert_eq!(tasks(), 1, "the watchdog");
    let scoped = guard.scope(std::future::pending::<()>());
    drop(locker);
    assert!(!guard.is_lost(), "a clone still runs the watchdog");
    drop(clone);
    assert!(guard.is_lost());
    assert!(matches!(scoped.await, Err(LockError::Lost { .. })));
    tokio::task::yield_now().await;
    assert_eq!(tasks(), 0, "the watchdog ended");
    // Not renewed any more, but held until its lease ends, and released.
    assert!(store.inspect(&key).await.unwrap().is_some());
    guard.release().await.unwrap();
    assert_eq!(store.inspect(&key).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn deleting_the_key_is_detected_as_loss() {
    let locker = Locker::in_memory();
    let guard = locker
        .lock_with("k", LockOptions::new().lease(3 * SEC))
        .await
        .unwrap();
    let start = Instant::now();
    evict(&locker, "k");
    guard.lost().await;
    // found at the next renewal, a third of the lease later
    assert_eq!(start.elapsed(), SEC);
    assert!(!guard.is_held().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn release_hands_over_at_once_and_timeouts_are_exact() {
    let locker = Locker::in_memory();
    let guard = locker.lock("k").await.unwrap();
    let waiter = tokio::spawn({
        let locker = locker.clone();
        async move {
            let guard = locker.lock("k").await.unwrap();
            (Instant::now(), guard.fencing_token())
        }
    });
    tokio::time::sleep(2 * SEC).await;
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (acquired_at, _) = waiter.await.unwrap();
    assert_eq!(
        acquired_at, released_at,
        "the waiter was not woken by the release"
    );

    let _held = locker.lock("k").await.unwrap();
    let other = locker.clone();
    let start = Instant::now();
    let err = tokio::spawn(async move {
        other
            .lock_with("k", LockOptions::new().wait(2 * SEC))
            .await
            .unwrap_err()
    })
    .await
    .unwrap();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(start.elapsed(), 2 * SEC);
    assert!(err.retry_after().is_some());
}

#[tokio::test(start_paused = true)]
async fn invalid_keys_and_settings_are_refused() {
    let locker = Locker::in_memory();
    for key in ["", "a\u{1}b", &"x".repeat(513)] {
        assert!(locker.lock(key).await.unwrap_err().is_invalid_key());
        assert!(locker.try_lock(key).await.unwrap_err().is_invalid_key());
    }
    let err = locker
        .lock_with("k", LockOptions::new().lease(Duration::from_millis(1)))
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err}");

    let small = Locker::builder()
        .in_memory()
        .max_key_len(4)
        .build()
        .await
        .unwrap();
    assert!(small.lock("abcde").await.unwrap_err().is_invalid_key());
    assert!(small.lock("abcd").await.is_ok());
    assert!(Locker::builder().build().await.unwrap_err().is_config());
    assert!(
        Locker::builder()
            .url("redis://127.0.0.1:1/")
            .namespace("a{b}")
            .build()
            .await
            .unwrap_err()
            .is_config()
    );
    for poll in [Duration::from_millis(9), Duration::from_secs(5)] {
        let err = Locker::builder()
            .url("redis://127.0.0.1:1/")
            .safety_poll(poll)
            .build()
            .await
            .unwrap_err();
        assert!(err.is_config(), "{poll:?}: {err}");
    }
}

#[tokio::test(start_paused = true)]
async fn opposite_multi_key_orders_never_deadlock() {
    let locker = Locker::in_memory();
    let balances = Arc::new(std::sync::Mutex::new([100i64, 100]));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (locker, balances) = (locker.clone(), balances.clone());
        tasks.push(tokio::spawn(async move {
            let (from, to) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
            let keys = [format!("acct:{from}"), format!("acct:{to}")];
            for _ in 0..20 {
                let moved = locker
                    .with_locks(&keys, LockOptions::new().wait(5 * SEC), async {
                        let snapshot = *balances.lock().unwrap();
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        let mut b = balances.lock().unwrap();
                        b[from] = snapshot[from] - 1;
                        b[to] = snapshot[to] + 1;
                    })
                    .await;
                moved.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*balances.lock().unwrap(), [100, 100]);
}

#[tokio::test(start_paused = true)]
async fn lock_all_gives_back_what_it_took_on_failure() {
    let locker = Locker::in_memory();
    let held = tokio::spawn({
        let locker = locker.clone();
        async move {
            let g = locker.lock("b").await.unwrap();
            tokio::time::sleep(10 * SEC).await;
            drop(g);
        }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    let err = locker
        .lock_all(["a", "b"], LockOptions::new().wait(SEC))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let other = locker.clone();
    let a_free = tokio::spawn(async move { other.try_lock("a").await.unwrap().is_some() });
    assert!(
        a_free.await.unwrap(),
        "lock_all kept \"a\" after failing on \"b\""
    );
    assert!(
        locker
            .lock_all(Vec::<String>::new(), LockOptions::new())
            .await
            .unwrap_err()
            .is_config()
    );
    held.abort();
}

#[tokio::test]
async fn the_global_locker_is_set_and_replaced() {
    let first = Locker::in_memory();
    Locker::set_global(first.clone());
    let held = Locker::global().unwrap().lock("global").await.unwrap();
    assert!(Arc::ptr_eq(&Locker::global().unwrap().inner, &first.inner));
    held.release().await.unwrap();
    let second = Locker::in_memory();
    Locker::set_global(second.clone());
    assert!(Arc::ptr_eq(&Locker::global().unwrap().inner, &second.inner));
}

#[tokio::test(start_paused = true)]
async fn released_leases_do_not_pile_up_in_the_watchdog() {
    let locker = Locker::in_memory();
    let first = locker.lock("churn").await.unwrap();
    let first_lease = first.hold_weak();
    first.release().await.unwrap();
    // Paused time never brings the first lease's renewal due: only compaction of
    // released leases can let it go.
    for i in 0..5000 {
        locker
            .lock(&format!("churn:{i}"))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        tokio::task::yield_now().await;
    }
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(
        first_lease.upgrade().is_none(),
        "the watchdog still holds a lease released 5000 acquisitions ago"
    );
}

fn fair() -> LockOptions {
    LockOptions::new().fair(true).wait(60 * SEC)
}

/// One fair attempt, without queueing: whether it got the lock (dropped at once).
async fn try_fair(locker: &Locker, key: &str) -> bool {
    match locker.lock_with(key, fair().wait(Duration::ZERO)).await {
        Ok(_) => true,
        Err(e) if e.is_timeout() => false,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(start_paused = true)]
async fn fair_waiters_are_served_in_the_order_they_asked() {
    let locker = Locker::in_memory();
    let holder = locker.lock_with("k", fair()).await.unwrap();
    let first_token = holder.fencing_token();
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (waiter, served) = (locker.clone(), served.clone());
        tasks.push(tokio::spawn(async move {
            let locker = waiter;
            let guard = locker.lock_with("k", fair()).await.unwrap();
            served
                .lock()
                .unwrap()
                .push((i, Instant::now(), guard.fencing_token()));
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await.unwrap();
            // Asking again at once does not jump the line: the lock went to the next.
            assert!(
                i == 7 || !try_fair(&locker, "k").await,
                "waiter {i} barged back in"
            );
        }));
        until_in_line(&locker, "k", i + 1).await;
    }
    tokio::time::sleep(SEC).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let served = served.lock().unwrap();
    let order: Vec<_> = served.iter().map(|(i, _, _)| *i).collect();
    assert_eq!(order, (0..8).collect::<Vec<_>>());
    // Each was handed the lock the moment the one before released it.
    let (_, first_at, _) = served[0];
    assert_eq!(first_at, released_at);
    for pair in served.windows(2) {
        assert_eq!(pair[1].1 - pair[0].1, Duration::from_millis(5));
        assert!(pair[1].2 > pair[0].2, "fencing tokens must increase");
    }
    assert!(served[0].2 > first_token);
    assert_eq!(memory(&locker).line_len("k"), 0);
}

#[tokio::test(start_paused = true)]
async fn fair_waiters_that_give_up_leave_the_line() {
    let locker = Locker::in_memory();
    let holder = locker.lock_with("k", fair()).await.unwrap();
    let ask = |wait: Duration| {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock_with("k", fair().wait(wait)).await.map(drop) })
    };
    let times_out = ask(SEC);
    until_in_line(&locker, "k", 1).await;
    let dropped = ask(60 * SEC);
    until_in_line(&locker, "k", 2).await;
    let last = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let _guard = locker.lock_with("k", fair()).await.unwrap();
            Instant::now()
        })
    };
    until_in_line(&locker, "k", 3).await;

    let err = times_out.await.unwrap().unwrap_err();
    assert!(err.is_timeout(), "{err}");
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    assert_eq!(
        memory(&locker).line_len("k"),
        1,
        "only the last one still waits"
    );

    let released_at = Instant::now();
    holder.release().await.unwrap();
    assert_eq!(last.await.unwrap(), released_at);
}

/// A store whose holds last as long as a session, as ZooKeeper's ephemeral nodes or a
/// database's advisory locks do: no lease, no renewal; the session's end is reported
/// through each hold's `lost` future. It counts the renewals it is asked for. It never
/// waits: a held key answers `Held` at once.
#[derive(Debug, Default)]
struct SessionStore {
    session: tokio_util::sync::CancellationToken,
    holders: std::sync::Mutex<std::collections::HashMap<String, String>>,
    fences: AtomicU64,
    renewals: AtomicU64,
}

impl SessionStore {
    fn holds(&self, hold: &Hold<'_>) -> bool {
        let holders = self.holders.lock().unwrap();
        !self.session.is_cancelled()
            && holders.get(hold.key.as_str()).map(String::as_str) == Some(hold.token)
    }
}

impl Store for SessionStore {
    fn name(&self) -> &str {
        "session"
    }

    fn supports(&self, kind: LockKind) -> bool {
        kind == LockKind::Exclusive
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        let mut holders = self.holders.lock().unwrap();
        let outcome = if holders.contains_key(request.key.as_str()) {
            Outcome::Held { holder_ttl: None }
        } else {
            holders.insert(request.key.to_string(), request.token.to_string());
            let lost = self.session.clone().cancelled_owned();
            Outcome::Acquired(Acquired::session(
                self.fences.fetch_add(1, Ordering::SeqCst) + 1,
                lost,
            ))
        };
        Box::pin(std::future::ready(Ok(outcome)))
    }

    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        let held = self.holds(hold);
        if held {
            self.holders.lock().unwrap().remove(hold.key.as_str());
        }
        Box::pin(std::future::ready(Ok(held)))
    }

    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(Ok(vec![None; leases.len()])))
    }

    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Ok(self.holds(hold))))
    }
}

#[tokio::test(start_paused = true)]
async fn a_session_hold_outlives_any_lease_and_is_lost_with_its_session() {
    let store = Arc::new(SessionStore::default());
    let locker = Locker::builder()
        .store(store.clone())
        .build()
        .await
        .unwrap();
    let guard = locker
        .lock_with("job", LockOptions::new().lease(SEC))
        .await
        .unwrap();
    let finished = Arc::new(AtomicBool::new(false));
    let body = {
        let finished = finished.clone();
        async move {
            tokio::time::sleep(60 * SEC).await;
            finished.store(true, Ordering::SeqCst);
        }
    };
    let session_end = async {
        tokio::time::sleep(30 * SEC).await;
        assert!(
            !guard.is_lost(),
            "a session hold was lost with no session end"
        );
        assert!(guard.is_held().await.unwrap());
        store.session.cancel();
    };
    let (result, ()) = tokio::join!(guard.scope(body), session_end);
    assert!(result.unwrap_err().is_lost());
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body ran on after the session ended"
    );
    assert_eq!(
        store.renewals.load(Ordering::SeqCst),
        0,
        "a session hold was renewed"
    );
}

/// A store that does not implement `inspect` says so, naming itself, once the key passed.
#[tokio::test]
async fn a_store_without_inspect_says_so() {
    let store = Arc::new(SessionStore::default());
    let locker = Locker::builder().store(store).build().await.unwrap();
    let err = locker.inspect("job").await.unwrap_err();
    assert!(err.is_config(), "{err}");
    assert!(
        err.to_string()
            .contains("the session store cannot inspect a lock"),
        "{err}"
    );
    assert!(locker.inspect("").await.unwrap_err().is_invalid_key());
}

/// A store whose server is unreachable: every call fails, but an acquire of `up`, which
/// is granted for as long as the store lives.
#[derive(Debug)]
struct UnreachableStore;

fn unreachable() -> LockError {
    LockError::backend("connect to 127.0.0.1:1", "connection refused")
}

impl Store for UnreachableStore {
    fn name(&self) -> &str {
        "unreachable"
    }

    fn supports(&self, kind: LockKind) -> bool {
        kind == LockKind::Exclusive
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        let outcome = if request.key.as_str() == "up" {
            let lost = std::future::pending();
            Ok(Outcome::Acquired(Acquired::session(1, lost)))
        } else {
            Err(unreachable())
        };
        Box::pin(std::future::ready(outcome))
    }

    fn release<'a>(&'a self, _: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Err(unreachable())))
    }

    fn renew<'a>(&'a self, _: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        Box::pin(std::future::ready(Err(unreachable())))
    }

    fn is_held<'a>(&'a self, _: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Err(unreachable())))
    }

    fn force_unlock<'a>(&'a self, _: &'a crate::LockKey) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Err(unreachable())))
    }

    fn inspect<'a>(&'a self, _: &'a crate::LockKey) -> StoreFuture<'a, Option<crate::LockInfo>> {
        Box::pin(std::future::ready(Err(unreachable())))
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_store_call_about_a_key_names_it() {
    let locker = Locker::builder()
        .store(Arc::new(UnreachableStore))
        .build()
        .await
        .unwrap();
    let err = locker.lock("balance:42").await.unwrap_err();
    assert!(err.is_backend());
    assert_eq!(err.key(), Some("balance:42"));
    assert_eq!(err.to_string(), "lock store failed: connect to 127.0.0.1:1");
    let err = locker.inspect("balance:43").await.unwrap_err();
    assert_eq!(err.key(), Some("balance:43"));
    let err = locker.force_unlock("balance:44").await.unwrap_err();
    assert_eq!(err.key(), Some("balance:44"));

    let guard = locker.lock("up").await.unwrap();
    assert_eq!(guard.is_held().await.unwrap_err().key(), Some("up"));
    let err = guard.extend(SEC).await.unwrap_err();
    assert_eq!(err.key(), Some("up"));
    assert_eq!(guard.release().await.unwrap_err().key(), Some("up"));
}

/// A memory store whose first grant answers only once `late` has passed, as when the
/// process that asked was paused mid-call.
#[derive(Debug)]
struct LateStore {
    memory: Arc<MemoryStore>,
    late: Duration,
    answered: AtomicBool,
    acquires: AtomicU64,
}

impl LateStore {
    fn new(memory: Arc<MemoryStore>, late: Duration) -> Self {
        Self {
            memory,
            late,
            answered: AtomicBool::new(false),
            acquires: AtomicU64::new(0),
        }
    }
}

impl Store for LateStore {
    fn name(&self) -> &str {
        "late"
    }

    fn supports(&self, kind: LockKind) -> bool {
        self.memory.supports(kind)
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        Box::pin(async move {
            self.acquires.fetch_add(1, Ordering::SeqCst);
            let outcome = self.memory.acquire(request).await?;
            if !self.answered.swap(true, Ordering::SeqCst) {
                tokio::time::sleep(self.late).await;
            }
            Ok(outcome)
        })
    }

    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        self.memory.release(hold)
    }

    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        self.memory.renew(leases)
    }

    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        self.memory.is_held(hold)
    }
}

/// A grant that arrives after its lease ran out is no guard: the lock may be another's
/// by then. The call asks again while its wait lasts, and waits for whoever took it.
#[tokio::test(start_paused = true)]
async fn a_grant_answered_after_its_lease_is_asked_again() {
    let memory = Arc::new(MemoryStore::new());
    let late = Arc::new(LateStore::new(memory.clone(), 2 * SEC));
    let paused = Locker::builder().store(late.clone()).build().await.unwrap();
    let other = Locker::builder().store(memory).build().await.unwrap();

    let call = tokio::spawn(async move {
        let options = LockOptions::new().lease(SEC).wait(10 * SEC);
        let guard = paused.lock_with("job", options).await?;
        Ok::<_, LockError>((
            guard.is_lost(),
            guard.is_held().await?,
            guard.fencing_token(),
        ))
    });
    tokio::time::sleep(SEC + SEC / 2).await;
    let taker = other.lock("job").await.unwrap();
    tokio::time::sleep(SEC).await;
    assert!(
        !call.is_finished(),
        "a guard was handed out while another holds the lock"
    );
    let taken = taker.fencing_token();
    taker.release().await.unwrap();

    let (lost, held, fence) = call.await.unwrap().unwrap();
    assert!(!lost && held, "the guard handed out was lost already");
    assert!(fence > taken);
    assert_eq!(late.acquires.load(Ordering::SeqCst), 2);
}

/// With no wait left, a grant answered after its lease is a timeout.
#[tokio::test(start_paused = true)]
async fn a_late_grant_with_no_wait_left_is_a_timeout() {
    let late = Arc::new(LateStore::new(Arc::new(MemoryStore::new()), 2 * SEC));
    let locker = Locker::builder().store(late.clone()).build().await.unwrap();
    let tried = locker
        .try_lock_with("job", LockOptions::new().lease(SEC))
        .await;
    assert!(matches!(tried, Ok(None)), "{tried:?}");
    assert_eq!(late.acquires.load(Ordering::SeqCst), 1);
}

/// An election's name is checked as a key, a candidate's id for what every store can
/// keep; both before the store is asked.
#[tokio::test]
async fn bad_election_names_and_ids_are_refused() {
    let locker = Locker::in_memory();
    let err = locker.election("").campaign("a").await.unwrap_err();
    assert!(err.is_invalid_key(), "{err}");
    let long = "x".repeat(crate::MAX_HOLDER_ID_LEN + 1);
    let err = locker.election("e").campaign(long).await.unwrap_err();
    assert!(
        err.is_config() && err.to_string().contains("at most 255 bytes"),
        "{err}"
    );
    let err = locker.election("e").campaign("a\0b").await.unwrap_err();
    assert!(err.is_config() && err.to_string().contains("NUL"), "{err}");
    assert_eq!(locker.inspect("e").await.unwrap(), None);
    let err = locker.election("").leader().await.unwrap_err();
    assert!(err.is_invalid_key(), "{err}");
}
