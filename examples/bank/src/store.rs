//! Where the balances live: this process's memory, or Redis (shared by every replica).
//!
//! Reads and writes are separate calls on purpose: a read-modify-write through this store
//! is not atomic, which is what the locks are for. Each write carries the fencing token
//! of the writer's lock, and the store refuses a token older than the last one it
//! accepted for that account, so a writer whose lease ran out cannot overwrite newer data.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::bb8::{Pool, RunError};
use lock_core::bb8_redis::RedisConnectionManager;
use lock_core::redis::{self, RedisError, Script};

/// The check-and-set of [`Store::write`] on Redis.
static WRITE_BALANCES: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(include_str!("write_balances.lua")));

/// The balances.
#[derive(Debug, Clone)]
pub(crate) enum Store {
    Memory(Arc<Mutex<HashMap<String, Account>>>),
    Redis(Pool<RedisConnectionManager>),
}

/// An account as stored: its balance and the fencing token of its last write.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Account {
    balance: i64,
    fence: u64,
}

/// One balance to write, with the fencing token of the writer's lock on that account.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write<'a> {
    pub(crate) id: &'a str,
    pub(crate) balance: i64,
    pub(crate) fence: u64,
}

/// The store could not be reached or answered with an error.
#[derive(Debug)]
pub(crate) struct StoreError(String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "balance store: {}", self.0)
    }
}

impl From<RedisError> for StoreError {
    fn from(e: RedisError) -> Self {
        StoreError(e.to_string())
    }
}

impl From<RunError<RedisError>> for StoreError {
    fn from(e: RunError<RedisError>) -> Self {
        StoreError(e.to_string())
    }
}

impl Store {
    pub(crate) fn in_memory() -> Store {
        Store::Memory(Arc::default())
    }

    /// A pool of connections to the Redis at `url`; connections are made on first use.
    pub(crate) async fn redis(url: &str) -> Result<Store, StoreError> {
        let manager = RedisConnectionManager::new(url)?;
        let pool = Pool::builder()
            .connection_timeout(Duration::from_secs(2))
            .build(manager)
            .await?;
        Ok(Store::Redis(pool))
    }

    /// The balance of account `id`: 0 for an account never written.
    pub(crate) async fn balance(&self, id: &str) -> Result<i64, StoreError> {
        match self {
            Store::Memory(accounts) => Ok(lock(accounts).get(id).map_or(0, |a| a.balance)),
            Store::Redis(pool) => {
                let mut conn = pool.get().await?;
                let balance: Option<i64> = redis::cmd("HGET")
                    .arg(redis_key(id))
                    .arg("balance")
                    .query_async(&mut *conn)
                    .await?;
                Ok(balance.unwrap_or(0))
            }
        }
    }

    /// Writes every balance, or, if some account has already accepted a newer fencing
    /// token, none: `Ok(false)` then.
    pub(crate) async fn write(&self, writes: &[Write<'_>]) -> Result<bool, StoreError> {
        match self {
            Store::Memory(accounts) => {
                let mut accounts = lock(accounts);
                let stale = writes
                    .iter()
                    .any(|w| accounts.get(w.id).is_some_and(|a| w.fence < a.fence));
                if stale {
                    return Ok(false);
                }
                for w in writes {
                    let account = Account {
                        balance: w.balance,
                        fence: w.fence,
                    };
                    accounts.insert(w.id.to_owned(), account);
                }
                Ok(true)
            }
            Store::Redis(pool) => {
                let mut invocation = WRITE_BALANCES.prepare_invoke();
                for w in writes {
                    invocation.key(redis_key(w.id)).arg(w.balance).arg(w.fence);
                }
                let mut conn = pool.get().await?;
                let written: i64 = invocation.invoke_async(&mut *conn).await?;
                Ok(written == 1)
            }
        }
    }
}

/// The hash of account `id` in Redis. Ids are checked (`[A-Za-z0-9_-]`, at most 64 bytes)
/// before they get here.
fn redis_key(id: &str) -> String {
    format!("bank:account:{id}")
}

/// A panic elsewhere cannot leave an account half-written (each write is one insert), so
/// a poisoned map is still good.
fn lock(
    accounts: &Mutex<HashMap<String, Account>>,
) -> std::sync::MutexGuard<'_, HashMap<String, Account>> {
    accounts.lock().unwrap_or_else(PoisonError::into_inner)
}
