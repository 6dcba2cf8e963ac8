//! The bank: balances updated by a plain read-modify-write, which the locks make safe.

use std::fmt;
use std::time::Duration;

use lock_core::{LockError, Locker, distributed_lock};
use serde::Serialize;

use crate::Config;
use crate::store::{Read, Store, StoreError, Write};

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
    /// The store refused the read or the write: a newer lock holder had read or written
    /// an account, so this one's lease ran out.
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

/// The bank service. Deposits and withdrawals are locked by the HTTP layer, which hands
/// in the fencing token; transfers lock both accounts themselves.
#[derive(Debug, Clone)]
pub(crate) struct Bank {
    locker: Locker,
    store: Store,
    /// Between reading a balance and writing it back: the other work a real service
    /// does there (a slow database, a call to another service).
    delay: Duration,
    /// `false` with `BANK_UNLOCKED=1`: every update runs without its lock.
    locking: bool,
}

impl Bank {
    /// Locks and balances in the Redis at `config.redis_url`, or in this process.
    pub(crate) async fn open(config: &Config) -> Result<Bank, String> {
        let locker = match &config.redis_url {
            Some(url) => Locker::builder().url(url),
            None => Locker::builder().in_memory(),
        }
        .default_lease(config.lease)
        .default_wait(config.wait)
        .build()
        .await
        .map_err(|e| e.to_string())?;
        let store = match &config.redis_url {
            Some(url) => Store::redis(url).await.map_err(|e| e.to_string())?,
            None => Store::in_memory(),
        };
        Ok(Bank {
            locker,
            store,
            delay: config.delay,
            locking: config.locks,
        })
    }

    pub(crate) fn locker(&self) -> &Locker {
        &self.locker
    }

    pub(crate) async fn balance(&self, id: &AccountId) -> Result<i64, BankError> {
        Ok(self.store.balance(&id.0).await?)
    }

    /// Adds `amount` to the account; the caller holds the lock `balance:{id}` with
    /// fencing token `fence` (or, with locks off, passes [`NO_FENCE`]).
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

    /// Takes `amount` from the account, if it holds that much; locked as [`deposit`].
    ///
    /// [`deposit`]: Self::deposit
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

    /// Moves `amount` from one account to another; returns both new balances.
    pub(crate) async fn transfer(
        &self,
        from: &AccountId,
        to: &AccountId,
        amount: Amount,
    ) -> Result<(i64, i64), BankError> {
        if from == to {
            return Err(BankError::SameAccount);
        }
        if self.locking {
            self.transfer_locked(from, to, amount).await
        } else {
            self.move_funds(from, to, amount, (NO_FENCE, NO_FENCE))
                .await
        }
    }

    /// Both accounts are locked, in one global order, so that transfer(a, b) racing
    /// transfer(b, a), on any replica, cannot deadlock.
    #[distributed_lock(keys = ["balance:{from}", "balance:{to}"], locker = self.locker, guard = lock)]
    async fn transfer_locked(
        &self,
        from: &AccountId,
        to: &AccountId,
        amount: Amount,
    ) -> Result<(i64, i64), BankError> {
        // Each account is written with the token of its own lock.
        let fence = |id: &AccountId| {
            let key = format!("balance:{id}");
            match lock.get(&key) {
                Some(guard) => Ok(guard.fencing_token()),
                None => Err(LockError::NotHeld { key }),
            }
        };
        let fences = (fence(from)?, fence(to)?);
        self.move_funds(from, to, amount, fences).await
    }

    async fn move_funds(
        &self,
        from: &AccountId,
        to: &AccountId,
        amount: Amount,
        (from_fence, to_fence): (u64, u64),
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
    /// token of the lock on it, which the store records; [`BankError::Stale`] if it
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
