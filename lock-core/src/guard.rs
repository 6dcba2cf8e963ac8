//! A held lock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::backend::Renewal;
use crate::hold::Hold;
use crate::locker::inner::Inner;
use crate::reentrancy::HoldEnd;
use crate::{LockError, LockKind};

/// Proof that this task holds a lock, returned by [`Locker::lock`](crate::Locker::lock) and
/// friends.
///
/// While the guard lives the watchdog keeps renewing its lease (unless turned off with
/// [`LockOptions::watchdog`](crate::LockOptions::watchdog)). Give the lock back with
/// [`release`](Self::release) to learn whether it was still held; dropping the guard
/// releases it too, in the background and at once, without waiting for the lease.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use lock_core::Locker;
///
/// let locker = Locker::in_memory();
/// let guard = locker.lock("invoice:1042").await?;
/// // Pass the fencing token to the storage on every access, so it can refuse an owner
/// // whose lease ran out (its token is older).
/// let token = guard.fencing_token();
/// assert!(guard.is_held().await?);
/// guard.release().await?;
///
/// let next = locker.lock("invoice:1042").await?;
/// assert!(next.fencing_token() > token);
/// # Ok(())
/// # }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    inner: Arc<Inner>,
    hold: Arc<Hold>,
    done: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key())
            .field("kind", &self.hold.kind)
            .field("fencing_token", &self.hold.fence)
            .field("lost", &self.hold.is_lost())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(inner: Arc<Inner>, hold: Arc<Hold>) -> Self {
        Self {
            inner,
            hold,
            done: false,
        }
    }

    /// The lock's key, as given to the `Locker`.
    pub fn key(&self) -> &str {
        self.hold.key.as_str()
    }

    /// The kind of the hold. A re-entrant guard shares its outer guard's hold, and says
    /// its kind.
    pub fn kind(&self) -> LockKind {
        self.hold.kind
    }

    /// A number strictly greater than that of every earlier acquisition of this lock,
    /// by any process. Nested (re-entrant) guards share their outer guard's token.
    ///
    /// Pass it to the storage the lock protects on every access, reads included, so
    /// that it can refuse a holder whose lease ran out: see the
    /// [crate docs on fencing](crate#fencing).
    pub fn fencing_token(&self) -> u64 {
        self.hold.fence
    }

    /// How long the lease still runs, as this process reckons it: from when the command
    /// that took or last renewed it was sent, so it errs early (on RedLock, less the
    /// drift allowance). Zero once it ran out; `None` for a hold that lasts as long as a
    /// session rather than a lease.
    pub fn lease_left(&self) -> Option<Duration> {
        self.hold.lease_left()
    }

    /// Sets the lease to run `lease` from now (and, while the watchdog is on, renews it
    /// by that much from then on). Fails with [`LockError::NotHeld`] when the lock is no
    /// longer ours, which also marks the guard lost.
    pub async fn extend(&self, lease: Duration) -> Result<(), LockError> {
        if lease < crate::options::MIN_LEASE {
            return Err(LockError::Config(format!(
                "lease must be at least {:?}, got {lease:?}",
                crate::options::MIN_LEASE
            )));
        }
        if !self.hold.is_active() {
            return Err(self.not_held());
        }
        let renewal = [Renewal {
            hold: self.hold.for_store(),
            lease,
        }];
        let renewed = self
            .inner
            .store
            .renew(&renewal)
            .await
            .map_err(|e| e.about(&self.hold.key))?;
        let Some(until) = renewed.first().copied().flatten() else {
            self.hold.mark_lost();
            return Err(self.not_held());
        };
        self.hold.set_lease(lease);
        self.hold.renewed(until);
        tracing::debug!(key = %self.hold.key, ?lease, "lock extended");
        Ok(())
    }

    /// Asks the store whether this guard still owns the lock. `false` once the lease
    /// was lost, without asking.
    pub async fn is_held(&self) -> Result<bool, LockError> {
        if !self.hold.is_active() {
            return Ok(false);
        }
        self.inner
            .store
            .is_held(&self.hold.for_store())
            .await
            .map_err(|e| e.about(&self.hold.key))
    }

    /// Whether the watchdog found the lease lost, or the store the session ended (no
    /// I/O; see [`is_held`](Self::is_held) to ask the store).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// A future that resolves when the lease is lost: renewal failed (the key was
    /// deleted, taken over, or the store was unreachable) until the lease ran out, or,
    /// with the watchdog off, the lease simply ran out; or a session store's session
    /// ended. It never resolves for a lock that is released normally. It does not borrow
    /// the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let lease = self.hold.clone();
        async move { lease.until_lost().await }
    }

    /// Runs `fut` while the lock is held: if the lease is lost first, `fut` is dropped
    /// and the result is [`LockError::Lost`]. The lock stays held afterwards.
    pub async fn scope<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        tokio::select! {
            biased;
            () = self.hold.until_lost() => Err(LockError::Lost { key: self.key().to_owned() }),
            out = fut => Ok(out),
        }
    }

    /// Gives the lock back and says whether it was still ours: [`LockError::NotHeld`]
    /// when the lease had run out and someone else took the lock (theirs is left
    /// untouched). Releasing a nested guard only ends that hold; the lock goes back when
    /// the outermost guard is released.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        if self.inner.end_hold(&self.hold) == HoldEnd::Nested {
            return Ok(());
        }
        let span =
            tracing::debug_span!("lock_release", key = %self.hold.key, fence = self.hold.fence);
        let released = async {
            let released = self.inner.give_back(&self.hold).await;
            if let Ok(true) = released {
                tracing::debug!("lock released");
            }
            released
        };
        if released.instrument(span).await? {
            Ok(())
        } else {
            Err(self.not_held())
        }
    }

    /// The lease, without keeping it alive.
    #[cfg(test)]
    pub(crate) fn hold_weak(&self) -> std::sync::Weak<Hold> {
        Arc::downgrade(&self.hold)
    }

    fn not_held(&self) -> LockError {
        LockError::NotHeld {
            key: self.key().to_owned(),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done || self.inner.end_hold(&self.hold) == HoldEnd::Nested {
            return;
        }
        tracing::debug!(key = %self.hold.key, fence = self.hold.fence, "lock guard dropped: releasing");
        self.inner.release_detached(self.hold.clone());
    }
}
