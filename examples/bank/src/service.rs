//! The bank: balances updated by a plain read-modify-write, which the locks make safe.
//!
//! Each account has a read-write lock, `balance:{id}`. Showing a balance takes its read
//! side, which reads share with each other; changing one takes its write side, which
//! excludes reads and other updates, so no read sees an update halfway. Statements are slow,
//! so a semaphore bounds how many are prepared at once across every replica.
//!
//! A balance, a deposit and a withdrawal run under the lock the HTTP layer took
//! (`app::account_lock`), whose fencing token they are given; a statement and a transfer
//! take their locks here.

use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use lock_core::{LockError, Locker, Semaphore, distributed_lock};
use serde::Serialize;

use crate::audit::Auditor;
use crate::store::{Read, Store, StoreError, Write};
use crate::{Backend, Config, locks};

/// The semaphore that bounds the statements being prepared: one for the whole bank,
/// shared by every replica.
pub(crate) const STATEMENTS: &str = "statements";

/// The name of the read-write lock on account `id`.
pub(crate) fn lock_key(id: &AccountId) -> String {
    format!("balance:{id}")
}

/// An account id: 1 to 64 bytes of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub(crate) struct AccountId(String);

impl AccountId {
    pub(crate) const MAX_LEN: usize = 64;

    pub(crate) fn parse(id: &str) -> Result<AccountId, BankError> {
        let valid = !id.is_empty()
            && id.len() <= Self::MAX_LEN
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if valid {
            Ok(AccountId(id.to_owned()))
        } else {
            Err(BankError::InvalidAccount)
        }
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An amount of money: a positive integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Amount(i64);

impl Amount {
    pub(crate) fn parse(amount: i64) -> Result<Amount, BankError> {
        if amount > 0 {
            Ok(Amount(amount))
        } else {
            Err(BankError::InvalidAmount)
        }
    }
}

/// Why an operation did not happen.
#[derive(Debug)]
pub(crate) enum BankError {
    InvalidAccount,
    InvalidAmount,
    SameAccount,
    Insufficient {
        id: AccountId,
        balance: i64,
        amount: i64,
    },
    Overflow {
        id: AccountId,
    },
    /// No statement permit came free within the wait: as many statements as
    /// `BANK_MAX_STATEMENTS` allows are being prepared, across every replica.
    TooManyStatements {
        /// The longest lease left among the permits' holders.
        retry_after: Option<Duration>,
    },
    /// The store refused a read-modify-write: a newer lock holder had read or written an
    /// account, so this one's lease ran out.
    Stale,
    Lock(LockError),
    Store(StoreError),
}

impl From<LockError> for BankError {
    fn from(e: LockError) -> Self {
        BankError::Lock(e)
    }
}

impl From<StoreError> for BankError {
    fn from(e: StoreError) -> Self {
        BankError::Store(e)
    }
}

/// The fencing token written when locks are off: accepted only by accounts that never
/// saw a real one.
pub(crate) const NO_FENCE: u64 = 0;

/// A balance as read under the read side of the account's lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading {
    pub(crate) balance: i64,
    /// The fencing token of the read lock ([`NO_FENCE`] with locks off).
    pub(crate) fencing_token: u64,
    /// When the balance was read.
    pub(crate) read_at: SystemTime,
}

/// The bank service: see the module docs for who takes which lock.
#[derive(Debug, Clone)]
pub(crate) struct Bank {
    locker: Locker,
    store: Store,
    /// Between reading a balance and writing it back: the other work a real service
    /// does there (a slow database, a call to another service).
    delay: Duration,
    /// At most `BANK_MAX_STATEMENTS` statements prepared at once, across every replica.
    statements: Semaphore,
    /// How long a statement takes to render.
    statement_delay: Duration,
    /// `false` with `BANK_UNLOCKED=1`: every read and update runs without its account lock
    /// (statements stay bounded).
    locking: bool,
    /// How long a request waits for a lock (`BANK_WAIT_MS`).
    wait: Duration,
    /// The bearer token of the `/admin` endpoints (`BANK_ADMIN_TOKEN`).
    admin_token: Option<String>,
    /// This replica's candidacy to audit, and its last audit.
    auditor: Auditor,
}

impl Bank {
    /// Balances where `config.backend` says, locks where `config.lock_url()` does.
    pub(crate) async fn open(config: &Config) -> Result<Bank, String> {
        let store = match &config.backend {
            Backend::Memory => Store::in_memory(),
            Backend::Redis(url) => Store::redis(url).await.map_err(|e| e.to_string())?,
            Backend::Postgres(url) => Store::postgres(url, config.lease)
                .await
                .map_err(|e| e.to_string())?,
        };
        let lock_store = config.lock_store();
        let fenced_by = store
            .fenced_by(&lock_store)
            .await
            .map_err(|e| e.to_string())?;
        if fenced_by != lock_store {
            return Err(format!(
                "the balances in {} are fenced by the locks in {fenced_by}, but this replica's \
                 are in {lock_store}: two lock stores do not exclude each other, and their \
                 fencing tokens do not compare, so give every replica the locks in \
                 {fenced_by} (see the README to move them)",
                config.backend
            ));
        }
        let locker = locks::open(config).await?;
        Bank::on(locker, store, config).await
    }

    /// A replica with the locks of `locker` and the balances of `store`, as `config`
    /// says: [`open`](Self::open) once both are open; tests give two replicas one store.
    pub(crate) async fn on(locker: Locker, store: Store, config: &Config) -> Result<Bank, String> {
        // A semaphore keeps the count it was first used with (for as long as its fence
        // counter, days): storing ours makes a changed BANK_MAX_STATEMENTS apply. A replica
        // started earlier with another count then gets LockError::Config (a 503) for its
        // statements until it is restarted with this one.
        let permits = config.max_statements.get();
        let statements = locker.semaphore(STATEMENTS, permits);
        statements
            .set_permits(permits)
            .await
            .map_err(|e| e.to_string())?;
        let auditor = Auditor::new(&locker, &config.replica_id, config.audit_interval);
        Ok(Bank {
            locker,
            store,
            delay: config.delay,
            statements,
            statement_delay: config.statement_delay,
            locking: config.locks,
            wait: config.wait,
            admin_token: config.admin_token.clone(),
            auditor,
        })
    }

    pub(crate) fn locker(&self) -> &Locker {
        &self.locker
    }

    /// Where the balances live.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// This replica's auditor, which [`Auditor::spawn`] starts.
    pub(crate) fn auditor(&self) -> &Auditor {
        &self.auditor
    }

    /// Whether requests take their account locks (`false` with `BANK_UNLOCKED=1`).
    pub(crate) fn locking(&self) -> bool {
        self.locking
    }

    /// How long a request waits for a lock before `423 Locked`.
    pub(crate) fn wait(&self) -> Duration {
        self.wait
    }

    /// The bearer token of the `/admin` endpoints, if they are on.
    pub(crate) fn admin_token(&self) -> Option<&str> {
        self.admin_token.as_deref()
    }

    /// The balance of the account, read under the read side of its lock.
    pub(crate) async fn balance(&self, id: &AccountId) -> Result<Reading, BankError> {
        if !self.locking {
            return self.show(id, NO_FENCE).await;
        }
        let guard = self.locker.read(&lock_key(id)).await?;
        let outcome = guard.scope(self.show(id, guard.fencing_token())).await;
        release(guard.release()).await;
        // the lock lost while reading, or the read's own outcome
        outcome?
    }

    /// Reads the balance for showing it, with fencing token `fence`, that of the read side
    /// of the account's lock the caller holds: see [`Store::balance`].
    pub(crate) async fn show(&self, id: &AccountId, fence: u64) -> Result<Reading, BankError> {
        let balance = self.store.balance(&id.0, fence).await?;
        Ok(Reading {
            balance,
            fencing_token: fence,
            read_at: SystemTime::now(),
        })
    }

    /// The account's statement: its balance, read as [`balance`](Self::balance) reads it,
    /// then rendered, which is slow; the read lock is given back first, so that updates
    /// do not wait for the rendering. A permit of the semaphore [`STATEMENTS`] is held
    /// throughout, waiting for one up to the lock wait (`BANK_WAIT_MS`):
    /// [`BankError::TooManyStatements`] when none comes free.
    pub(crate) async fn statement(&self, id: &AccountId) -> Result<Reading, BankError> {
        let permit = match self.statements.acquire().await {
            Ok(permit) => permit,
            Err(e) if e.is_timeout() => {
                let retry_after = e.retry_after();
                return Err(BankError::TooManyStatements { retry_after });
            }
            Err(e) => return Err(e.into()),
        };
        let prepare = async {
            let reading = self.balance(id).await?;
            tokio::time::sleep(self.statement_delay).await;
            Ok(reading)
        };
        let outcome = permit.scope(prepare).await;
        release(permit.release()).await;
        outcome?
    }

    /// Adds `amount` to the account, whose lock's write side the caller holds with
    /// fencing token `fence`.
    pub(crate) async fn deposit(
        &self,
        id: &AccountId,
        amount: Amount,
        fence: u64,
    ) -> Result<i64, BankError> {
        self.update(id, fence, |balance| {
            balance
                .checked_add(amount.0)
                .ok_or_else(|| BankError::Overflow { id: id.clone() })
        })
        .await
    }

    /// Takes `amount` from the account, if it holds that much; as [`deposit`](Self::deposit)
    /// the caller holds the lock.
    pub(crate) async fn withdraw(
        &self,
        id: &AccountId,
        amount: Amount,
        fence: u64,
    ) -> Result<i64, BankError> {
        self.update(id, fence, |balance| take(id, balance, amount))
            .await
    }

    /// The deliberately non-atomic read-modify-write the locks protect: read the balance,
    /// wait a moment, write back what `change` made of it; both with the lock's token.
    async fn update(
        &self,
        id: &AccountId,
        fence: u64,
        change: impl FnOnce(i64) -> Result<i64, BankError>,
    ) -> Result<i64, BankError> {
        let [balance] = self.read([(id, fence)]).await?;
        tokio::time::sleep(self.delay).await;
        let balance = change(balance)?;
        self.write(&[(id, balance, fence)]).await?;
        Ok(balance)
    }

    /// Moves `amount` from one account to another; returns both new balances. With locks
    /// off it runs unlocked, with [`NO_FENCE`].
    pub(crate) async fn transfer(
        &self,
        from: &AccountId,
        to: &AccountId,
        amount: Amount,
    ) -> Result<(i64, i64), BankError> {
        if from == to {
            return Err(BankError::SameAccount);
        }
        if !self.locking {
            return self.move_funds(from, to, amount, [NO_FENCE; 2]).await;
        }
        self.transfer_locked(from, to, amount).await
    }

    /// [`transfer`](Self::transfer) under the write side of both accounts' locks (the keys
    /// of [`lock_key`]), taken together in one global order, so that transfers each way,
    /// on any replica, cannot deadlock; stopped if a lock is lost.
    #[distributed_lock(
        keys = ["balance:{from}", "balance:{to}"],
        locker = self.locker,
        mode = "write",
        guard = locks
    )]
    async fn transfer_locked(
        &self,
        from: &AccountId,
        to: &AccountId,
        amount: Amount,
    ) -> Result<(i64, i64), BankError> {
        let fence = |id| {
            let key = lock_key(id);
            match locks.get(&key) {
                Some(guard) => Ok(guard.fencing_token()),
                None => Err(LockError::NotHeld { key }),
            }
        };
        let fences = [fence(from)?, fence(to)?];
        self.move_funds(from, to, amount, fences).await
    }

    async fn move_funds(
        &self,
        from: &AccountId,
        to: &AccountId,
        amount: Amount,
        [from_fence, to_fence]: [u64; 2],
    ) -> Result<(i64, i64), BankError> {
        let [from_balance, to_balance] = self.read([(from, from_fence), (to, to_fence)]).await?;
        tokio::time::sleep(self.delay).await;
        let from_balance = take(from, from_balance, amount)?;
        let to_balance = to_balance
            .checked_add(amount.0)
            .ok_or_else(|| BankError::Overflow { id: to.clone() })?;
        self.write(&[(from, from_balance, from_fence), (to, to_balance, to_fence)])
            .await?;
        Ok((from_balance, to_balance))
    }

    /// Reads the balances of accounts for a read-modify-write, each with the fencing
    /// token of the write lock on it, which the store records; [`BankError::Stale`] if it
    /// refused a token.
    pub(crate) async fn read<const N: usize>(
        &self,
        reads: [(&AccountId, u64); N],
    ) -> Result<[i64; N], BankError> {
        let reads = reads.map(|(id, fence)| Read { id: &id.0, fence });
        self.store.read(&reads).await?.ok_or(BankError::Stale)
    }

    /// Writes all the balances or none; [`BankError::Stale`] if the store refused a token.
    pub(crate) async fn write(&self, writes: &[(&AccountId, i64, u64)]) -> Result<(), BankError> {
        let writes: Vec<Write<'_>> = writes
            .iter()
            .map(|&(id, balance, fence)| Write {
                id: &id.0,
                balance,
                fence,
            })
            .collect();
        if self.store.write(&writes).await? {
            Ok(())
        } else {
            Err(BankError::Stale)
        }
    }
}

/// Gives a lock back once the work under it is over. That work stands (or was stopped,
/// if the lock was lost) whatever the answer, so a failure is only logged.
async fn release(released: impl Future<Output = Result<(), LockError>>) {
    if let Err(e) = released.await {
        tracing::warn!(error = %e, "giving a lock back failed");
    }
}

fn take(id: &AccountId, balance: i64, amount: Amount) -> Result<i64, BankError> {
    if balance < amount.0 {
        return Err(BankError::Insufficient {
            id: id.clone(),
            balance,
            amount: amount.0,
        });
    }
    Ok(balance - amount.0)
}
