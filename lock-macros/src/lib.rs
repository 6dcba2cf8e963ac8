//! `#[distributed_lock]`: run an `async fn` under a distributed lock whose key is built
//! from its arguments.
//!
//! The lock is taken through a `lock_core::Locker`, so it lives in whichever store that
//! `Locker` keeps its locks in: this process's memory, Redis (one server, Sentinel, a
//! Cluster, RedLock), ZooKeeper, PostgreSQL, MySQL or MariaDB, or a store of your own.
//! Every kind works where the store has it: exclusive, fair, read-write, semaphore, and
//! several keys at once.
//!
//! Use it through `lock-core` (feature `macros`, on by default), as
//! `lock_core::distributed_lock`: the expansion refers to `::lock_core`.
#![deny(missing_docs)]

use proc_macro::TokenStream;

mod attr;
mod expand;
mod template;

/// The examples of this crate's README, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Runs an `async fn` under a distributed lock whose key is built from its arguments.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
///
/// use lock_core::{LockError, Locker, distributed_lock};
///
/// #[derive(Debug)]
/// enum AppError {
///     Lock(LockError),
///     Insufficient { balance: i64 },
/// }
///
/// impl From<LockError> for AppError {
///     fn from(e: LockError) -> Self {
///         AppError::Lock(e)
///     }
/// }
///
/// struct Bank {
///     locker: Locker,
///     balances: Mutex<HashMap<u64, i64>>,
/// }
///
/// impl Bank {
///     /// Two calls for the same account never interleave, whichever replica runs them.
///     #[distributed_lock(key = "balance:{id}", locker = self.locker, wait = "5s")]
///     async fn withdraw(&self, id: u64, amount: i64) -> Result<i64, AppError> {
///         let balance = self.balance(id);
///         if balance < amount {
///             return Err(AppError::Insufficient { balance });
///         }
///         tokio::task::yield_now().await; // a slow store: the lock keeps others out
///         self.balances.lock().unwrap().insert(id, balance - amount);
///         Ok(balance - amount)
///     }
///
///     fn balance(&self, id: u64) -> i64 {
///         self.balances.lock().unwrap().get(&id).copied().unwrap_or(100)
///     }
/// }
///
/// // No `locker = ..`: the process-wide locker set with `Locker::set_global`.
/// // `guard = lock` binds `lock: &LockGuard` (`&MultiGuard` with `keys`).
/// #[distributed_lock(keys = ["balance:{from}", "balance:{to}"], guard = lock)]
/// async fn audit(from: u64, to: u64) -> Result<u64, LockError> {
///     Ok(lock.fencing_token())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), AppError> {
/// // In production `Locker::connect(url).await?`, with the url of a Redis server, a
/// // ZooKeeper ensemble, a PostgreSQL or a MySQL database.
/// let locker = Locker::in_memory();
/// let bank = Bank { locker: locker.clone(), balances: Mutex::default() };
/// assert_eq!(bank.withdraw(7, 30).await?, 70);
/// assert!(matches!(bank.withdraw(7, 80).await, Err(AppError::Insufficient { balance: 70 })));
///
/// // without a global locker, a runtime error (not a panic)
/// assert!(audit(1, 2).await.unwrap_err().to_string().contains("no locker"));
/// Locker::set_global(locker);
/// let first = audit(1, 2).await?;
/// assert!(audit(2, 1).await? > first);
/// # Ok(())
/// # }
/// ```
///
/// # Arguments
///
/// - `key = "balance:{id}"`: the lock's name, a template over the fn's parameters:
///   `{arg}`, `{arg.field.path}`, `{self.field}` (tuple fields too: `{pair.0}`), each
///   formatted with `Display`. `<arg>` is an alias of `{arg}`; `{{` and `}}` are literal
///   braces. Or `keys = ["balance:{from}", "balance:{to}"]`: several locks, taken together
///   without deadlock (de-duplicated and taken in one global order, whatever the order of
///   the arguments). Exactly one of `key` and `keys` is required.
///
///   A placeholder is a whole `:`-separated segment of the template (`balance:{id}`,
///   `{tenant}:x:{id}`; not `balance-{id}` or `{a}{b}`), the text holds no `%`, and each
///   value is written escaped, `%` as `%25`, `:` as `%3A`, `{` as `%7B` and `}` as `%7D`
///   (by `lock_core::KeySegment`), so that no value can pass for part of another key:
///   `balance:{id}` with the id `"1:2"` locks `balance:1%3A2`, not the key of
///   `balance:{a}:{b}` with 1 and 2. A value without those characters is written as it is.
/// - `locker = <expr>`: the `Locker` (or `&Locker`, `Arc<Locker>`, ..), any expression over
///   the parameters, e.g. `self.locker` or `state.locker`. Default: the one set with
///   `Locker::set_global`; if none is, the fn returns `LockError::Config` (converted into
///   its error type).
/// - `wait = "5s"`, `lease = "30s"`: how long to wait for the lock and how long each lease
///   runs (`"250ms"`, `"5s"`, `"2m"`, `"1h"`, `"1m30s"`); default: the locker's.
/// - `hold_at_least = "30s"`: keep the lock held until that long after it was taken, even
///   when the body finishes sooner (`LockOptions::hold_at_least`); with `wait = "0s"`, a
///   job that every replica fires at once runs once, as the replicas that ask later find
///   it held and skip it.
/// - `watchdog = false`: do not renew the lease while the body runs.
/// - `mode = "read"` or `mode = "write"`: the read side (shared with other readers) or the
///   write side of a read-write lock (`LockKind::Read`, `LockKind::Write`); with `keys =
///   [..]`, every key in that kind. `mode = "fair"`: an exclusive lock that serves its
///   waiters first come first served across every process (`LockOptions::fair`). Without
///   `mode`, the lock is exclusive (`LockKind::Exclusive`).
/// - `permits = 3`: a permit of the semaphore `key`, which admits 3 holders at once
///   (`LockKind::Semaphore { permits: 3 }`). Not with `mode` or `keys`, and not 0.
/// - `guard = name`: binds `name: &LockGuard` in the body (`&MultiGuard` with `keys`), e.g.
///   for its fencing token.
/// - `crate = "path"`: where `lock_core` is, for crates that re-export it.
///
/// # What it does
///
/// The fn keeps its signature, attributes, docs and visibility. It must be `async` and
/// return a `Result<T, E>` with `E: From<LockError>`. Its body runs under the lock, as with
/// `Locker::with_lock`: `?`, `return` and references to arguments behave as written; if
/// the lock cannot be taken the fn returns `Err(LockError::..into())` without running the
/// body; if the lease is lost while the body runs, the body is cancelled (dropped) and the
/// fn returns `Err(LockError::Lost { .. }.into())`. Nested calls on a lock the task already
/// holds re-enter instead of deadlocking. The returned future is `Send` when the body is.
///
/// Mistakes are compile errors at the offending token: a fn that is not `async` or does not
/// return a `Result`, a placeholder that names no parameter or is not a whole segment, a `%`
/// in a template's text, a malformed template, a bad duration, a missing, unknown or
/// repeated option, `permits = 0`, or `permits` with `mode` or `keys`.
#[proc_macro_attribute]
pub fn distributed_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(attr.into(), item.into()).into()
}
