//! `#[distributed_lock]` end to end, against a real `redis-server` and in memory.
//!
//! Every scenario takes the `Locker` to use and runs once per backend. Each Redis test
//! spawns its own server and names its locker with `locker = ..`; only
//! `missing_global_locker_is_an_error_then_set_global_works` touches the global locker.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockError, Locker, distributed_lock};
use lock_tests::{RedisServer, ValueExt, eventually};

/// Bounds every scenario: a deadlock or a lost wake-up fails the test instead of hanging.
const SCENARIO: Duration = Duration::from_secs(60);
/// Bounds each wait on a condition.
const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    App(&'static str),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl AppError {
    fn lock_error(self) -> LockError {
        match self {
            AppError::Lock(e) => e,
            AppError::App(what) => panic!("expected a lock error, got the app error {what:?}"),
        }
    }
}

async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(SCENARIO, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: still running after {SCENARIO:?} (deadlock?)"))
}

/// Runs a scenario against a fresh redis-server and against the in-memory backend.
macro_rules! on_both_backends {
    ($($scenario:ident => $redis:ident, $memory:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $redis() {
            let server = RedisServer::spawn();
            let locker = Locker::connect(&server.url()).await.expect("connect");
            bounded(stringify!($redis), $scenario(locker)).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $memory() {
            bounded(stringify!($memory), $scenario(Locker::in_memory())).await;
        }
    )*};
}

on_both_backends! {
    same_id_serializes => same_id_serializes_redis, same_id_serializes_memory;
    different_ids_overlap => different_ids_overlap_redis, different_ids_overlap_memory;
    opposite_transfers_never_deadlock
        => opposite_transfers_never_deadlock_redis, opposite_transfers_never_deadlock_memory;
    nested_call_reenters => nested_call_reenters_redis, nested_call_reenters_memory;
    guard_fencing_token_increases
        => guard_fencing_token_increases_redis, guard_fencing_token_increases_memory;
    method_uses_self_locker => method_uses_self_locker_redis, method_uses_self_locker_memory;
    values_cannot_forge_keys => values_cannot_forge_keys_redis, values_cannot_forge_keys_memory;
    expired_lease_cancels_body
        => expired_lease_cancels_body_redis, expired_lease_cancels_body_memory;
    question_mark_and_return_release
        => question_mark_and_return_release_redis, question_mark_and_return_release_memory;
    mode_read_shares_and_mode_write_excludes
        => mode_read_shares_and_mode_write_excludes_redis, mode_read_shares_and_mode_write_excludes_memory;
    permits_bound_the_calls_inside => permits_bound_the_calls_inside_redis, permits_bound_the_calls_inside_memory;
    keys_with_mode_read_take_each_key_as_a_read
        => keys_with_mode_read_take_each_key_as_a_read_redis, keys_with_mode_read_take_each_key_as_a_read_memory;
}

// ---------------------------------------------------------------------------------------
// Same id: serialized.

/// Tracks how many bodies run at once.
#[derive(Debug, Default)]
struct Occupancy {
    inside: AtomicUsize,
    max: AtomicUsize,
}

impl Occupancy {
    fn enter(&self) -> usize {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        now
    }

    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Default)]
struct Ledger {
    balances: Mutex<HashMap<u64, i64>>,
    occupancy: Occupancy,
}

impl Ledger {
    fn read(&self, id: u64) -> i64 {
        *self.balances.lock().unwrap().get(&id).unwrap_or(&0)
    }

    fn write(&self, id: u64, value: i64) {
        self.balances.lock().unwrap().insert(id, value);
    }
}

/// Read, yield, write: without the lock, concurrent calls lose updates.
#[distributed_lock(key = "counter:{id}", locker = locker, wait = "30s")]
async fn increment(locker: &Locker, id: u64, ledger: &Ledger) -> Result<i64, AppError> {
    ledger.occupancy.enter();
    let value = ledger.read(id);
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    ledger.write(id, value + 1);
    ledger.occupancy.leave();
    Ok(value + 1)
}

async fn same_id_serializes(locker: Locker) {
    const TASKS: usize = 8;
    const ROUNDS: usize = 25;
    let ledger = Arc::new(Ledger::default());
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (locker, ledger) = (locker.clone(), ledger.clone());
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    increment(&locker, 7, &ledger).await.expect("increment");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(ledger.read(7), (TASKS * ROUNDS) as i64, "lost updates");
    assert_eq!(ledger.occupancy.max.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------
// Different ids: in parallel.

/// Enters, then waits (still inside) until `want` calls have come in.
#[distributed_lock(key = "parallel:{id}", locker = locker, wait = "5s")]
async fn meet(
    locker: &Locker,
    id: u64,
    arrived: &AtomicUsize,
    occupancy: &Occupancy,
    want: usize,
) -> Result<(), AppError> {
    wait_inside_for_others(arrived, occupancy, want).await
}

/// Counts a call inside, then waits (still inside) until `want` calls have come in.
async fn wait_inside_for_others(
    arrived: &AtomicUsize,
    occupancy: &Occupancy,
    want: usize,
) -> Result<(), AppError> {
    occupancy.enter();
    arrived.fetch_add(1, Ordering::SeqCst);
    let met = tokio::time::timeout(WAIT, async {
        while arrived.load(Ordering::SeqCst) < want {
            tokio::task::yield_now().await;
        }
    })
    .await;
    occupancy.leave();
    met.map_err(|_| AppError::App("the other calls never came in: serialized?"))
}

async fn different_ids_overlap(locker: Locker) {
    const IDS: u64 = 4;
    let arrived = Arc::new(AtomicUsize::new(0));
    let occupancy = Arc::new(Occupancy::default());
    let tasks: Vec<_> = (0..IDS)
        .map(|id| {
            let (locker, arrived, occupancy) = (locker.clone(), arrived.clone(), occupancy.clone());
            tokio::spawn(async move { meet(&locker, id, &arrived, &occupancy, IDS as usize).await })
        })
        .collect();
    for task in tasks {
        task.await
            .expect("task")
            .expect("every call meets the others");
    }
    // No call left before the last one came in: all were inside at once.
    assert_eq!(occupancy.max.load(Ordering::SeqCst), IDS as usize);
}

// ---------------------------------------------------------------------------------------
// keys = [..]: opposite transfers.

#[derive(Debug)]
struct Bank {
    balances: [AtomicI64; 2],
    occupancy: Occupancy,
}

#[distributed_lock(keys = ["account:{from}", "account:{to}"], locker = locker, wait = "30s")]
async fn transfer(
    locker: &Locker,
    from: usize,
    to: usize,
    amount: i64,
    bank: &Bank,
) -> Result<(), AppError> {
    if bank.occupancy.enter() > 1 {
        bank.occupancy.leave();
        return Err(AppError::App("two transfers inside at once"));
    }
    let a = bank.balances[from].load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    let b = bank.balances[to].load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    bank.balances[from].store(a - amount, Ordering::SeqCst);
    bank.balances[to].store(b + amount, Ordering::SeqCst);
    bank.occupancy.leave();
    Ok(())
}

async fn opposite_transfers_never_deadlock(locker: Locker) {
    const TASKS: usize = 16;
    const ROUNDS: usize = 20;
    let bank = Arc::new(Bank {
        balances: [AtomicI64::new(1_000), AtomicI64::new(1_000)],
        occupancy: Occupancy::default(),
    });
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (locker, bank) = (locker.clone(), bank.clone());
            // half go 0 -> 1, half 1 -> 0
            let (from, to) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    transfer(&locker, from, to, 1, &bank)
                        .await
                        .expect("transfer");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    let balances = [0, 1].map(|i| bank.balances[i].load(Ordering::SeqCst));
    assert_eq!(balances, [1_000, 1_000], "as many transfers each way");
    assert_eq!(bank.occupancy.max.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------
// Reentrancy.

#[distributed_lock(key = "reentrant:{id}", locker = locker, wait = "2s", guard = lock)]
async fn outer(locker: &Locker, id: u64) -> Result<(u64, u64), AppError> {
    let inner = inner(locker, id).await?;
    Ok((lock.fencing_token(), inner))
}

#[distributed_lock(key = "reentrant:{id}", locker = locker, wait = "2s", guard = lock)]
async fn inner(locker: &Locker, id: u64) -> Result<u64, AppError> {
    Ok(lock.fencing_token())
}

async fn nested_call_reenters(locker: Locker) {
    let (outer_token, inner_token) = outer(&locker, 5).await.expect("nested call re-enters");
    assert_eq!(
        outer_token, inner_token,
        "a nested hold shares its outer token"
    );

    // Released after the outer call, for another task too.
    let other = locker.clone();
    let free = tokio::spawn(async move { other.try_lock("reentrant:5").await })
        .await
        .expect("task")
        .expect("try_lock");
    assert!(
        free.is_some(),
        "the lock is free after the outer call returned"
    );
}

// ---------------------------------------------------------------------------------------
// guard = name: fencing tokens.

#[distributed_lock(key = "fence:{id}", locker = locker, guard = lock)]
async fn fenced(locker: &Locker, id: u64) -> Result<(String, u64), AppError> {
    Ok((lock.key().to_owned(), lock.fencing_token()))
}

#[distributed_lock(keys = ["fence:{a}", "fence:{b}"], locker = locker, guard = locks)]
async fn fenced_pair(locker: &Locker, a: u64, b: u64) -> Result<(Vec<String>, u64), AppError> {
    Ok((
        locks.keys().map(str::to_owned).collect(),
        locks.fencing_token(),
    ))
}

async fn guard_fencing_token_increases(locker: Locker) {
    let mut last = 0;
    for _ in 0..5 {
        let (key, token) = fenced(&locker, 9).await.expect("fenced");
        assert_eq!(key, "fence:9");
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
    // `keys` binds a MultiGuard: the keys in lock order, the largest token.
    let (keys, token) = fenced_pair(&locker, 9, 1).await.expect("pair");
    assert_eq!(keys, ["fence:1", "fence:9"]);
    assert!(token > last, "token {token} after {last}");
}

// ---------------------------------------------------------------------------------------
// Methods.

#[derive(Debug)]
struct Account {
    locker: Locker,
    account_id: u64,
    notes: Vec<String>,
}

impl Account {
    #[distributed_lock(
        key = "balance:{self.account_id}",
        locker = self.locker,
        wait = "200ms",
        lease = "10s",
        guard = lock
    )]
    async fn settle(&self, note: &str) -> Result<String, AppError> {
        Ok(format!("{} {note}", lock.key()))
    }

    #[distributed_lock(key = "balance:<self.account_id>", locker = self.locker, wait = "200ms")]
    async fn append(&mut self, note: &str) -> Result<usize, AppError> {
        self.notes.push(note.to_owned());
        Ok(self.notes.len())
    }

    #[distributed_lock(key = "balance:{self.account_id}", locker = self.locker.clone())]
    async fn close(self) -> Result<Vec<String>, AppError> {
        Ok(self.notes)
    }
}

async fn method_uses_self_locker(locker: Locker) {
    let mut account = Account {
        locker: locker.clone(),
        account_id: 42,
        notes: Vec::new(),
    };
    assert_eq!(
        account.settle("hello").await.expect("settle"),
        "balance:42 hello"
    );
    assert_eq!(account.append("a").await.expect("append"), 1);

    // Held by another task: the method waits 200 ms, then reports the timeout.
    let other = locker.clone();
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn(async move {
        let guard = other.lock("balance:42").await.expect("lock");
        held_tx.send(()).unwrap();
        let _ = done_rx.await;
        guard.release().await.expect("release");
    });
    held_rx.await.expect("holder took the lock");
    let err = account.settle("late").await.unwrap_err().lock_error();
    assert!(err.is_timeout(), "{err:?}");
    let err = account.append("late").await.unwrap_err().lock_error();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(
        account.notes,
        ["a"],
        "the body did not run without the lock"
    );
    done_tx.send(()).unwrap();
    holder.await.expect("holder");

    assert_eq!(account.append("b").await.expect("append"), 2);
    assert_eq!(account.close().await.expect("close"), ["a", "b"]);
}

// ---------------------------------------------------------------------------------------
// Values are escaped: none makes another template's key.

#[distributed_lock(key = "t:{a}:{b}", locker = locker, wait = "0s", guard = lock)]
async fn t_key(locker: &Locker, a: &str, b: &str) -> Result<String, AppError> {
    Ok(lock.key().to_owned())
}

#[distributed_lock(key = "balance:{id}", locker = locker, wait = "0s", guard = lock)]
async fn balance_key(locker: &Locker, id: &str) -> Result<String, AppError> {
    Ok(lock.key().to_owned())
}

#[distributed_lock(key = "balance:{a}:{b}", locker = locker, wait = "0s", guard = lock)]
async fn balance_pair_key(locker: &Locker, a: u64, b: u64) -> Result<String, AppError> {
    Ok(lock.key().to_owned())
}

async fn values_cannot_forge_keys(locker: Locker) {
    let key = |result: Result<String, AppError>| result.map_err(AppError::lock_error).unwrap();
    // once, both made `t:x:y:z`
    assert_eq!(key(t_key(&locker, "x:y", "z").await), "t:x%3Ay:z");
    assert_eq!(key(t_key(&locker, "x", "y:z").await), "t:x:y%3Az");
    // once, both made `balance:1:2`
    assert_eq!(key(balance_key(&locker, "1:2").await), "balance:1%3A2");
    assert_eq!(key(balance_pair_key(&locker, 1, 2).await), "balance:1:2");
    // an escape in a value is escaped in turn; ordinary values keep their keys
    assert_eq!(key(balance_key(&locker, "%3A").await), "balance:%253A");
    assert_eq!(key(balance_key(&locker, "42").await), "balance:42");

    // While another task holds `balance:{a}:{b}` for 1, 2, `balance:{id}` for "1:2" is
    // another lock, free.
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn({
        let locker = locker.clone();
        async move {
            let guard = locker.lock("balance:1:2").await.expect("lock");
            held_tx.send(()).unwrap();
            let _ = done_rx.await;
            guard.release().await.expect("release");
        }
    });
    held_rx.await.expect("holder took the lock");
    let err = balance_pair_key(&locker, 1, 2)
        .await
        .unwrap_err()
        .lock_error();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(key(balance_key(&locker, "1:2").await), "balance:1%3A2");
    done_tx.send(()).unwrap();
    holder.await.expect("holder");
}

// ---------------------------------------------------------------------------------------
// A lost lock cancels the body.

/// Sets its flag when dropped: tells a cancelled body from one still parked.
#[derive(Debug)]
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug, Default)]
struct Progress {
    started: AtomicBool,
    dropped: Arc<AtomicBool>,
    finished: AtomicBool,
}

/// Parks forever once started: only losing the lock ends it.
async fn park(progress: &Progress) {
    let _drop_flag = SetOnDrop(progress.dropped.clone());
    progress.started.store(true, Ordering::SeqCst);
    std::future::pending::<()>().await;
    progress.finished.store(true, Ordering::SeqCst);
}

#[distributed_lock(key = "balance:{id}", locker = locker, lease = "300ms")]
async fn park_watched(locker: &Locker, id: u64, progress: &Progress) -> Result<(), AppError> {
    park(progress).await;
    Ok(())
}

#[distributed_lock(key = "expiring:{id}", locker = locker, lease = "200ms", watchdog = false)]
async fn park_unwatched(locker: &Locker, id: u64, progress: &Progress) -> Result<(), AppError> {
    park(progress).await;
    Ok(())
}

fn assert_cancelled(result: Result<(), AppError>, progress: &Progress, key: &str) {
    let err = result.unwrap_err().lock_error();
    assert!(err.is_lost(), "{err:?}");
    assert!(
        matches!(&err, LockError::Lost { key: k } if k == key),
        "{err:?}"
    );
    assert!(progress.started.load(Ordering::SeqCst));
    assert!(
        progress.dropped.load(Ordering::SeqCst),
        "the body was dropped"
    );
    assert!(!progress.finished.load(Ordering::SeqCst));
}

/// With the watchdog off, the lease simply runs out under the parked body.
async fn expired_lease_cancels_body(locker: Locker) {
    let progress = Progress::default();
    let result = tokio::time::timeout(WAIT, park_unwatched(&locker, 3, &progress))
        .await
        .expect("the body is cancelled when the lease runs out");
    assert_cancelled(result, &progress, "expiring:3");
}

/// The lock is deleted behind the holder's back: renewal fails, the body is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleted_lock_cancels_body_redis() {
    let server = RedisServer::spawn();
    let locker = Locker::connect(&server.url()).await.expect("connect");
    let progress = Arc::new(Progress::default());
    let call = tokio::spawn({
        let (locker, progress) = (locker.clone(), progress.clone());
        async move { park_watched(&locker, 1, &progress).await }
    });
    eventually(WAIT, "the body to start", || {
        std::future::ready(progress.started.load(Ordering::SeqCst))
    })
    .await;
    let deleted = server.cmd(&["DEL", "lock:{balance:1}"]).expect("DEL");
    assert_eq!(
        deleted.as_int(),
        Some(1),
        "the lock was held in Redis under its key"
    );
    let result = tokio::time::timeout(WAIT, call)
        .await
        .expect("the body is cancelled once the lock is lost")
        .expect("task");
    assert_cancelled(result, &progress, "balance:1");
}

// ---------------------------------------------------------------------------------------
// `?` and `return` behave as written, and the lock is released after either.

fn parse_amount(s: &str) -> Result<i64, AppError> {
    s.parse().map_err(|_| AppError::App("not a number"))
}

#[distributed_lock(key = "checked:{id}", locker = locker, wait = "2s")]
async fn checked(locker: &Locker, id: u64, input: &str) -> Result<i64, AppError> {
    if input.is_empty() {
        return Err(AppError::App("empty"));
    }
    let amount = parse_amount(input)?;
    if amount < 0 {
        return Ok(0);
    }
    Ok(amount * 2)
}

async fn question_mark_and_return_release(locker: Locker) {
    assert!(matches!(
        checked(&locker, 1, "").await,
        Err(AppError::App("empty"))
    ));
    assert!(matches!(
        checked(&locker, 1, "x").await,
        Err(AppError::App("not a number"))
    ));
    assert!(matches!(checked(&locker, 1, "-4").await, Ok(0)));
    assert!(matches!(checked(&locker, 1, "21").await, Ok(42)));
    let other = locker.clone();
    let free = tokio::spawn(async move { other.try_lock("checked:1").await })
        .await
        .expect("task")
        .expect("try_lock");
    assert!(free.is_some(), "released after every kind of return");
}

// ---------------------------------------------------------------------------------------
// The global locker (the only test that touches it).

#[distributed_lock(key = "global:{id}", guard = lock)]
async fn with_global(id: u64) -> Result<u64, AppError> {
    Ok(lock.fencing_token())
}

#[tokio::test]
async fn missing_global_locker_is_an_error_then_set_global_works() {
    let err = with_global(1).await.unwrap_err().lock_error();
    assert!(
        matches!(&err, LockError::Config(msg) if msg.contains("Locker::set_global")),
        "{err:?}"
    );
    Locker::set_global(Locker::in_memory());
    let first = with_global(1).await.expect("global locker");
    assert!(with_global(1).await.expect("global locker") > first);
}

#[distributed_lock(key = "job:{id}", locker = locker, mode = "fair", wait = "30s")]
async fn run_in_turn(
    locker: &Locker,
    id: u64,
    turn: usize,
    served: Arc<Mutex<Vec<usize>>>,
) -> Result<(), LockError> {
    served.lock().unwrap().push(turn);
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}

/// `mode = "fair"` queues calls: they run in the order they asked, across two Lockers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_fair_runs_calls_in_the_order_they_came() {
    let server = RedisServer::spawn();
    let lockers = [
        Locker::connect(&server.url()).await.expect("connect"),
        Locker::connect(&server.url()).await.expect("connect"),
    ];
    let in_line = || {
        let reply = server.cmd(&["LLEN", "lock:{job:7}:queue"]).unwrap();
        reply.as_int().unwrap()
    };
    let served = Arc::new(Mutex::new(Vec::new()));
    let holder = lockers[0]
        .lock_with("job:7", lock_core::LockOptions::new().fair(true))
        .await
        .unwrap();
    let mut calls = Vec::new();
    for turn in 0..6 {
        let (locker, served) = (lockers[turn % 2].clone(), served.clone());
        calls.push(tokio::spawn(async move {
            run_in_turn(&locker, 7, turn, served).await
        }));
        eventually(WAIT, "the call to get in line", || async {
            in_line() == turn as i64 + 1
        })
        .await;
    }
    holder.release().await.unwrap();
    for call in calls {
        bounded("a fair call", call).await.unwrap().unwrap();
    }
    assert_eq!(*served.lock().unwrap(), (0..6).collect::<Vec<_>>());
}

// ---------------------------------------------------------------------------------------
// mode = "read" / "write", permits = N.

/// Reads the document: enters, then waits (still inside) until `want` readers have come in.
#[distributed_lock(key = "doc:{id}", locker = locker, mode = "read", wait = "5s")]
async fn read_doc(
    locker: &Locker,
    id: u64,
    arrived: &AtomicUsize,
    occupancy: &Occupancy,
    want: usize,
) -> Result<(), AppError> {
    wait_inside_for_others(arrived, occupancy, want).await
}

/// Writes the document, waiting for the lock.
#[distributed_lock(key = "doc:{id}", locker = locker, mode = "write", wait = "10s")]
async fn write_doc(locker: &Locker, id: u64, ledger: &Ledger) -> Result<(), AppError> {
    bump(id, ledger).await
}

/// Writes the document if the lock is free now.
#[distributed_lock(key = "doc:{id}", locker = locker, mode = "write", wait = "0s")]
async fn write_doc_at_once(locker: &Locker, id: u64, ledger: &Ledger) -> Result<(), AppError> {
    bump(id, ledger).await
}

/// Adds one to the document's counter with a deliberately non-atomic read, yield, write.
async fn bump(id: u64, ledger: &Ledger) -> Result<(), AppError> {
    let inside = ledger.occupancy.enter();
    let seen = ledger.read(id);
    tokio::task::yield_now().await;
    ledger.write(id, seen + 1);
    ledger.occupancy.leave();
    if inside > 1 {
        return Err(AppError::App("a writer beside another holder"));
    }
    Ok(())
}

/// Four readers are inside at once; a writer gets in only while none is, and writers keep
/// every update.
async fn mode_read_shares_and_mode_write_excludes(locker: Locker) {
    const READERS: usize = 4;
    let arrived = Arc::new(AtomicUsize::new(0));
    let occupancy = Arc::new(Occupancy::default());
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (locker, arrived, occupancy) = (locker.clone(), arrived.clone(), occupancy.clone());
            tokio::spawn(async move { read_doc(&locker, 1, &arrived, &occupancy, READERS).await })
        })
        .collect();
    for reader in readers {
        reader
            .await
            .expect("task")
            .expect("every reader meets the others");
    }
    assert_eq!(occupancy.max.load(Ordering::SeqCst), READERS);

    // A held read keeps the writer out; once it is released, the writer goes in.
    let read = locker.read("doc:2").await.unwrap();
    let ledger = Arc::new(Ledger::default());
    let try_write = || {
        let (locker, ledger) = (locker.clone(), ledger.clone());
        tokio::spawn(async move { write_doc_at_once(&locker, 2, &ledger).await })
    };
    let refused = try_write().await.expect("task").unwrap_err().lock_error();
    assert!(refused.is_timeout(), "{refused:?}");
    assert_eq!(ledger.read(2), 0, "the writer went in beside a reader");
    read.release().await.unwrap();
    try_write()
        .await
        .expect("task")
        .expect("the writer, once the reader left");
    assert_eq!(ledger.read(2), 1);

    // Writers exclude each other: no update lost.
    let writers: Vec<_> = (0..8)
        .map(|_| {
            let (locker, ledger) = (locker.clone(), ledger.clone());
            tokio::spawn(async move { write_doc(&locker, 3, &ledger).await })
        })
        .collect();
    for writer in writers {
        writer.await.expect("task").expect("a writer");
    }
    assert_eq!(ledger.read(3), 8, "updates lost");
}

/// Exports with at most two calls inside at once.
#[distributed_lock(key = "exports", locker = locker, permits = 2, wait = "10s")]
async fn export(locker: &Locker, occupancy: &Occupancy) -> Result<(), AppError> {
    occupancy.enter();
    tokio::time::sleep(Duration::from_millis(2)).await;
    occupancy.leave();
    Ok(())
}

/// Sixteen calls of a `permits = 2` fn: never more than two inside, and two at some point.
async fn permits_bound_the_calls_inside(locker: Locker) {
    let occupancy = Arc::new(Occupancy::default());
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let (locker, occupancy) = (locker.clone(), occupancy.clone());
            tokio::spawn(async move { export(&locker, &occupancy).await })
        })
        .collect();
    for call in calls {
        call.await.expect("task").expect("an export");
    }
    assert_eq!(occupancy.max.load(Ordering::SeqCst), 2);
}

/// Reads two documents together.
#[distributed_lock(keys = ["doc:{a}", "doc:{b}"], locker = locker, mode = "read", guard = locks)]
async fn read_pair(
    locker: &Locker,
    a: u64,
    b: u64,
    inside: Arc<tokio::sync::Barrier>,
) -> Result<(), AppError> {
    assert!(
        locks
            .guards()
            .iter()
            .all(|g| g.kind() == lock_core::LockKind::Read)
    );
    inside.wait().await; // holding both
    inside.wait().await; // the test has looked
    Ok(())
}

/// `keys = [..]` with `mode = "read"`: while the fn runs, another reader of one key gets
/// in and a writer does not.
async fn keys_with_mode_read_take_each_key_as_a_read(locker: Locker) {
    let inside = Arc::new(tokio::sync::Barrier::new(2));
    let call = tokio::spawn({
        let (locker, inside) = (locker.clone(), inside.clone());
        async move { read_pair(&locker, 4, 5, inside).await }
    });
    inside.wait().await;
    let other = locker.clone();
    let (read, write) = tokio::spawn(async move {
        let opts = |kind| lock_core::LockOptions::new().kind(kind);
        let read = other
            .try_lock_with("doc:5", opts(lock_core::LockKind::Read))
            .await
            .unwrap();
        let write = other
            .try_lock_with("doc:4", opts(lock_core::LockKind::Write))
            .await
            .unwrap();
        (read.is_some(), write.is_some())
    })
    .await
    .unwrap();
    inside.wait().await;
    call.await.expect("task").expect("the pair read");
    assert!(read, "another reader was kept out");
    assert!(!write, "a writer got in beside the readers");
}

// ---------------------------------------------------------------------------------------
// `hold_at_least` with `wait = "0s"`: a job fired by every replica runs once per hold.

#[distributed_lock(key = "job:{name}", locker = locker, wait = "0s", hold_at_least = "30s")]
async fn nightly(locker: &Locker, name: &str, runs: &AtomicUsize) -> Result<(), AppError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_job_held_at_least_30s_runs_once_until_they_passed() {
    let replica = Locker::in_memory();
    let runs = AtomicUsize::new(0);
    nightly(&replica, "report", &runs).await.unwrap();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let skipped = nightly(&replica, "report", &runs).await.unwrap_err();
    assert!(skipped.lock_error().is_timeout());
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the job ran twice within its hold"
    );
    tokio::time::sleep(Duration::from_secs(11)).await;
    nightly(&replica, "report", &runs).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
