//! `Semaphore`: a handle on a lock of kind [`LockKind::Semaphore`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::backend::store::unsupported;
use crate::options::check_permits;
use crate::{LockError, LockGuard, LockKey, LockKind, LockOptions, Locker};

/// A semaphore: at most its count of holders at once, across every process that shares
/// the store. Each permit is a [`LockGuard`] with its own token, lease (renewed by the
/// watchdog) and fencing token; a crashed holder's permit comes back when its lease runs
/// out. Permits are not re-entrant: a task that asks twice takes two.
///
/// Made by [`Locker::semaphore`]; cheap to clone (clones share the count).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let locker = lock_core::Locker::in_memory();
/// let exports = locker.semaphore("exports", 2);
///
/// let first = exports.acquire().await?;
/// let second = exports.acquire().await?;
/// assert!(exports.try_acquire().await?.is_none(), "both permits are taken");
/// assert_eq!(exports.available().await?, 0);
///
/// first.release().await?;
/// assert_eq!(exports.available().await?, 1);
/// # drop(second);
/// # Ok(())
/// # }
/// ```
///
/// The count is stored with the semaphore on first use, and kept while it is in use (and
/// for as long as its fencing counter after that). Asking with another count is
/// [`LockError::Config`] naming both; [`set_permits`](Self::set_permits) changes it.
#[derive(Clone)]
pub struct Semaphore {
    locker: Locker,
    key: Arc<str>,
    permits: Arc<AtomicU32>,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("key", &self.key)
            .field("permits", &self.permits())
            .field("locker", &self.locker)
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(locker: Locker, key: &str, permits: u32) -> Self {
        Self {
            locker,
            key: key.into(),
            permits: Arc::new(AtomicU32::new(permits)),
        }
    }

    /// The semaphore's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The count this handle asks with: the one it was made with, or the last it set.
    pub fn permits(&self) -> u32 {
        self.permits.load(Ordering::Relaxed)
    }

    /// The kind this handle's permits are taken as.
    pub fn kind(&self) -> LockKind {
        LockKind::Semaphore {
            permits: self.permits(),
        }
    }

    /// Takes a permit, waiting up to the default wait for one to come free;
    /// [`LockError::Timeout`] after that.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        self.acquire_with(LockOptions::new()).await
    }

    /// Takes a permit with the wait, lease and watchdog of `opts`; the handle's kind
    /// replaces any kind `opts` carries.
    pub async fn acquire_with(&self, opts: LockOptions) -> Result<LockGuard, LockError> {
        self.locker
            .lock_with(&self.key, opts.kind(self.kind()))
            .await
    }

    /// Makes one attempt at a permit: `Ok(None)` when all are taken.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        self.locker
            .try_lock_with(&self.key, LockOptions::new().kind(self.kind()))
            .await
    }

    /// How many permits are free now: the stored count (or this handle's, for a
    /// semaphore not in use) less the live holders'; 0 while the key is held as another
    /// kind of lock. A snapshot: another process may take one the next moment.
    pub async fn available(&self) -> Result<u32, LockError> {
        let key = self.checked_key(self.permits())?;
        self.locker
            .inner
            .store
            .available(&key, self.permits())
            .await
            .map_err(|e| e.about(&key))
    }

    /// Stores `permits` as the semaphore's count, for every process, and makes this
    /// handle (and its clones) ask with it from now on. Holders above a lowered count
    /// keep their permits until they release them; no new permit is granted until fewer
    /// hold one than the new count. A raised count wakes waiters at once.
    pub async fn set_permits(&self, permits: u32) -> Result<(), LockError> {
        let key = self.checked_key(permits)?;
        let set = self.locker.inner.store.set_permits(&key, permits).await;
        set.map_err(|e| e.about(&key))?;
        self.permits.store(permits, Ordering::Relaxed);
        Ok(())
    }

    /// The key, checked, for a call with `permits`: a usable count, on a store that has
    /// semaphores.
    fn checked_key(&self, permits: u32) -> Result<LockKey, LockError> {
        let key = LockKey::with_max_len(&self.key, self.locker.max_key_len())?;
        check_permits(permits)?;
        let store = &*self.locker.inner.store;
        let kind = LockKind::Semaphore { permits };
        if !store.supports(kind) {
            return Err(unsupported(store, &key, kind));
        }
        Ok(key)
    }
}
