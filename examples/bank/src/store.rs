//! Where the balances live: this process's memory, or Redis or PostgreSQL (shared by every
//! replica).
//!
//! Reads and writes are separate calls on purpose: a read-modify-write through this store
//! is not atomic, which is what the locks are for. Every access carries the fencing token
//! of the lock on the account, and the account records the newest token that has read or
//! written it.
//!
//! A read-modify-write (under the write side of the account's lock) is refused, at its
//! read or at its write, when the account has seen a newer token. Checking the write alone
//! would not do. A holder whose lease ran out after it read, while a newer holder read the
//! same balance, would still write (its token is newer than the last *write*'s), and the
//! newer holder's write would then overwrite it: a deposit acknowledged, then lost.
//!
//! A balance read for showing it (under the read side) records its token too, never
//! lowering the one recorded, so a read-modify-write older than the read is refused after
//! it; but the read itself is never refused. Readers share the lock, each with a token of
//! its own, so an older reader may well reach the store after a newer one; refusing it
//! would fail a reader that still holds its lock. It can afford not to be refused: it
//! changes no balance, and reads each account in one step, never halfway through an update
//! (each write is atomic). Nor can a recorded read refuse a writer that holds its lock:
//! tokens of one lock increase with every grant, read or write, and a reader with a newer
//! token than a writer's was granted after that writer's hold ended.

pub(crate) mod postgres;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::backend::redis::bb8::{Pool, RunError};
use lock_core::backend::redis::bb8_redis::RedisConnectionManager;
use lock_core::backend::redis::redis::{self, RedisError, Script};

/// The read of [`Store::balance`] on Redis.
static SHOW_BALANCE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(concat!(
        include_str!("fence.lua"),
        include_str!("show_balance.lua")
    ))
});
/// The fenced read of [`Store::read`] on Redis.
static READ_BALANCES: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(concat!(
        include_str!("fence.lua"),
        include_str!("read_balances.lua")
    ))
});
/// The check-and-set of [`Store::write`] on Redis.
static WRITE_BALANCES: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(concat!(
        include_str!("fence.lua"),
        include_str!("write_balances.lua")
    ))
});

/// The balances.
#[derive(Debug, Clone)]
pub(crate) enum Store {
    Memory(Arc<Mutex<HashMap<String, Account>>>),
    Redis(Pool<RedisConnectionManager>),
    Postgres(postgres::Balances),
}

/// An account as stored: its balance and the newest fencing token that has read or
/// written it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Account {
    balance: i64,
    fence: u64,
}

/// One balance to read for a read-modify-write, with the fencing token of the reader's
/// lock (its write side) on that account.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read<'a> {
    pub(crate) id: &'a str,
    pub(crate) fence: u64,
}

/// One balance to write, with the fencing token of the writer's lock on that account.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write<'a> {
    pub(crate) id: &'a str,
    pub(crate) balance: i64,
    pub(crate) fence: u64,
}

/// Every account's balance added up, as the auditor reads it ([`Store::totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// How many accounts the store keeps (an account read once is kept, at 0).
    pub(crate) accounts: u64,
    /// The sum of their balances: wider than a balance, which it may outgrow.
    pub(crate) total: i128,
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

    /// The table `bank_accounts` in the database at `url`, created if it is missing; a
    /// transaction idle for `lease` is ended.
    pub(crate) async fn postgres(url: &str, lease: Duration) -> Result<Store, StoreError> {
        postgres::Balances::open(url, lease)
            .await
            .map(Store::Postgres)
    }

    /// The lock store whose fencing tokens the balances are compared with: `locks`, unless
    /// another was recorded first, by this replica or another. Balances in memory are
    /// this process's alone, so whatever locks it has are theirs.
    pub(crate) async fn fenced_by(&self, locks: &str) -> Result<String, StoreError> {
        match self {
            Store::Memory(_) => Ok(locks.to_owned()),
            Store::Redis(pool) => {
                let mut conn = pool.get().await?;
                let (recorded,): (String,) = redis::pipe()
                    .atomic()
                    .cmd("SETNX")
                    .arg(FENCED_BY)
                    .arg(locks)
                    .ignore()
                    .cmd("GET")
                    .arg(FENCED_BY)
                    .query_async(&mut *conn)
                    .await?;
                Ok(recorded)
            }
            Store::Postgres(balances) => balances.fenced_by(locks).await,
        }
    }

    /// Whether the store answers: a round trip to its server.
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Store::Memory(_) => Ok(()),
            Store::Redis(pool) => {
                let mut conn = pool.get().await?;
                let _: String = redis::cmd("PING").query_async(&mut *conn).await?;
                Ok(())
            }
            Store::Postgres(balances) => balances.ping().await,
        }
    }

    /// The balance of account `id`, for showing it (0 for an account never written), read
    /// under the read side of its lock with fencing token `fence`, which the account
    /// records unless it has seen a newer one. Never refused: see the module docs.
    pub(crate) async fn balance(&self, id: &str, fence: u64) -> Result<i64, StoreError> {
        match self {
            Store::Memory(accounts) => {
                let mut accounts = lock(accounts);
                let account = accounts.entry(id.to_owned()).or_default();
                account.fence = account.fence.max(fence);
                Ok(account.balance)
            }
            Store::Redis(pool) => {
                let mut invocation = SHOW_BALANCE.prepare_invoke();
                invocation.key(redis_key(id)).arg(fence);
                let mut conn = pool.get().await?;
                let balance: Option<i64> = invocation.invoke_async(&mut *conn).await?;
                Ok(balance.unwrap_or(0))
            }
            Store::Postgres(balances) => balances.balance(id, fence).await,
        }
    }

    /// Reads every balance for a read-modify-write (0 for an account never written), under
    /// the write side of each account's lock, and records each reader's token on its
    /// account; or, if some account has already seen a newer token, reads and records
    /// nothing: `Ok(None)` then.
    pub(crate) async fn read<const N: usize>(
        &self,
        reads: &[Read<'_>; N],
    ) -> Result<Option<[i64; N]>, StoreError> {
        match self {
            Store::Memory(accounts) => {
                let mut accounts = lock(accounts);
                let stale = reads
                    .iter()
                    .any(|r| accounts.get(r.id).is_some_and(|a| r.fence < a.fence));
                if stale {
                    return Ok(None);
                }
                Ok(Some(reads.map(|r| {
                    let account = accounts.entry(r.id.to_owned()).or_default();
                    account.fence = r.fence;
                    account.balance
                })))
            }
            Store::Redis(pool) => {
                let mut invocation = READ_BALANCES.prepare_invoke();
                for r in reads {
                    invocation.key(redis_key(r.id)).arg(r.fence);
                }
                let mut conn = pool.get().await?;
                let balances: Option<Vec<Option<i64>>> =
                    invocation.invoke_async(&mut *conn).await?;
                let Some(balances) = balances else {
                    return Ok(None);
                };
                let balances: Vec<i64> = balances.into_iter().map(|b| b.unwrap_or(0)).collect();
                let balances = balances.try_into().map_err(|b: Vec<i64>| {
                    StoreError(format!("{} balances read for {N} accounts", b.len()))
                })?;
                Ok(Some(balances))
            }
            Store::Postgres(balances) => balances.read(reads).await,
        }
    }

    /// Writes every balance, or, if some account has already seen a newer fencing token
    /// (read or written), none: `Ok(false)` then.
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
            Store::Postgres(balances) => balances.write(writes).await,
        }
    }

    /// Every account's balance added up, read without any account's lock: in memory under
    /// the map's mutex, and on PostgreSQL in one statement, so both are a snapshot; on
    /// Redis account by account (`SCAN`, then each balance), so an update made meanwhile
    /// may be counted half, as a transfer between an account read and one not yet read.
    pub(crate) async fn totals(&self) -> Result<Totals, StoreError> {
        match self {
            Store::Memory(accounts) => {
                let accounts = lock(accounts);
                Ok(Totals {
                    accounts: accounts.len() as u64,
                    total: accounts.values().map(|a| i128::from(a.balance)).sum(),
                })
            }
            Store::Redis(pool) => {
                let mut conn = pool.get().await?;
                // SCAN may answer a key twice: each is counted once
                let mut keys = HashSet::new();
                let mut cursor = 0_u64;
                loop {
                    let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(redis_key("*"))
                        .arg("COUNT")
                        .arg(SCAN_COUNT)
                        .query_async(&mut *conn)
                        .await?;
                    keys.extend(found);
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
                let keys: Vec<String> = keys.into_iter().collect();
                let mut totals = Totals::default();
                for some in keys.chunks(SCAN_COUNT) {
                    let mut pipe = redis::pipe();
                    for key in some {
                        pipe.cmd("HGET").arg(key).arg("balance");
                    }
                    let balances: Vec<Option<i64>> = pipe.query_async(&mut *conn).await?;
                    totals.accounts += balances.len() as u64;
                    totals.total += balances
                        .into_iter()
                        .map(|b| i128::from(b.unwrap_or(0)))
                        .sum::<i128>();
                }
                Ok(totals)
            }
            Store::Postgres(balances) => balances.totals().await,
        }
    }
}

/// How many keys each `SCAN` of [`Store::totals`] asks for, and how many balances each
/// pipeline reads.
const SCAN_COUNT: usize = 1000;

/// The key in Redis of the lock store the balances are fenced by.
const FENCED_BY: &str = "bank:fenced-by";

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
