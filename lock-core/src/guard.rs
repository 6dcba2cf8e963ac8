//! A held lock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::options::Resolved;
use crate::reentrancy::{Context, HoldEnd};
use crate::{LockError, Locker};

const HELD: u8 = 0;
const RELEASED: u8 = 1;
const LOST: u8 = 2;

/// One acquisition's lease, shared by the guards of a task that re-entered it and by
/// the watchdog.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) name: Arc<str>,
    pub(crate) token: Arc<str>,
    pub(crate) fence: u64,
    pub(crate) context: Context,
    pub(crate) watchdog: bool,
    /// Taken in line: its release hands it to the next in line.
    pub(crate) fair: bool,
    /// Guards alive for this lease; changed under the reentrancy registry's lock.
    pub(crate) holds: std::sync::atomic::AtomicUsize,
    lease_ms: AtomicU64,
    /// When the lease runs out, as nanoseconds since the Locker's epoch; computed from
    /// the moment the acquiring or renewing command was sent, so it errs early.
    expires_at: AtomicU64,
    epoch: Instant,
    state: AtomicU8,
    pub(crate) renewing: AtomicBool,
    changed: Notify,
}

impl Lease {
    /// A lease taken with `opts`, running for `left` from `started` (no later than the
    /// lock was actually taken, so that the local deadline errs early).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: Arc<str>,
        token: Arc<str>,
        fence: u64,
        context: Context,
        opts: &Resolved,
        started: Instant,
        left: Duration,
        epoch: Instant,
    ) -> Self {
        let this = Self {
            name,
            token,
            fence,
            context,
            watchdog: opts.watchdog,
            fair: opts.fair,
            holds: 1.into(),
            lease_ms: AtomicU64::new(0),
            expires_at: AtomicU64::new(0),
            epoch,
            state: AtomicU8::new(HELD),
            renewing: AtomicBool::new(false),
            changed: Notify::new(),
        };
        this.set_lease(opts.lease);
        this.renewed(started, left);
        this
    }

    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms.load(Ordering::Relaxed))
    }

    fn set_lease(&self, lease: Duration) {
        let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        self.lease_ms.store(ms, Ordering::Relaxed);
    }

    pub(crate) fn expires_at(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.expires_at.load(Ordering::Acquire))
    }

    /// `at`, moved back to a multiple of `grid` since the Locker's epoch.
    pub(crate) fn snap_down(&self, at: Instant, grid: Duration) -> Instant {
        let since = at.saturating_duration_since(self.epoch);
        let grid_ns = grid.as_nanos().max(1);
        let snapped = since.as_nanos() - since.as_nanos() % grid_ns;
        self.epoch + Duration::from_nanos(u64::try_from(snapped).unwrap_or(u64::MAX))
    }

    /// Records a successful renewal sent at `sent_at`. Never moves the deadline back.
    pub(crate) fn renewed(&self, sent_at: Instant, lease: Duration) {
        let deadline = (sent_at + lease).saturating_duration_since(self.epoch);
        let nanos = u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX);
        self.expires_at.fetch_max(nanos, Ordering::AcqRel);
    }

    pub(crate) fn is_active(&self) -> bool {
        self.state.load(Ordering::Acquire) == HELD
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.state.load(Ordering::Acquire) == LOST
    }

    /// Marks the lease lost (if it was held) and wakes everything watching it.
    pub(crate) fn mark_lost(&self) {
        if self
            .state
            .compare_exchange(HELD, LOST, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::warn!(key = %self.name, fence = self.fence, "lock lost: its lease ran out before it could be renewed");
            self.changed.notify_waiters();
        }
    }

    /// Marks the lease released (if it was held); the watchdog stops renewing it before
    /// the release is sent, so no renewal can follow the release.
    pub(crate) fn mark_released(&self) -> bool {
        self.state
            .compare_exchange(HELD, RELEASED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Resolves once the lease is lost.
    pub(crate) async fn until_lost(&self) {
        loop {
            let changed = self.changed.notified();
            if self.is_lost() {
                return;
            }
            changed.await;
        }
    }
}

/// Proof that this task holds a lock, returned by [`Locker::lock`] and friends.
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
/// // Pass the fencing token to the storage you write, so it can refuse a write from
/// // an owner whose lease ran out (its token is older).
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
    locker: Locker,
    lease: Arc<Lease>,
    done: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key())
            .field("fencing_token", &self.lease.fence)
            .field("lost", &self.lease.is_lost())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(locker: Locker, lease: Arc<Lease>) -> Self {
        Self {
            locker,
            lease,
            done: false,
        }
    }

    /// The lock's name, as given to the `Locker`.
    pub fn key(&self) -> &str {
        &self.lease.name
    }

    /// A number strictly greater than that of every earlier acquisition of this lock,
    /// by any process. Nested (re-entrant) guards share their outer guard's token.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fence
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
        if !self.lease.is_active() {
            return Err(self.not_held());
        }
        let sent_at = Instant::now();
        let extended = self
            .locker
            .backend()
            .extend(&self.lease.name, &self.lease.token, lease)
            .await?;
        if !extended {
            self.lease.mark_lost();
            return Err(self.not_held());
        }
        self.lease.set_lease(lease);
        self.lease.renewed(sent_at, lease);
        tracing::debug!(key = %self.lease.name, ?lease, "lock extended");
        Ok(())
    }

    /// Asks the backend whether this guard still owns the lock. `false` once the lease
    /// was lost, without asking.
    pub async fn is_held(&self) -> Result<bool, LockError> {
        if !self.lease.is_active() {
            return Ok(false);
        }
        self.locker
            .backend()
            .is_held(&self.lease.name, &self.lease.token)
            .await
    }

    /// Whether the watchdog found the lease lost (no I/O; see
    /// [`is_held`](Self::is_held) to ask the backend).
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// A future that resolves when the lease is lost: renewal failed (the key was
    /// deleted, taken over, or Redis was unreachable) until the lease ran out, or, with
    /// the watchdog off, the lease simply ran out. It never resolves for a lock that is
    /// released normally. It does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let lease = self.lease.clone();
        async move { lease.until_lost().await }
    }

    /// Runs `fut` while the lock is held: if the lease is lost first, `fut` is dropped
    /// and the result is [`LockError::Lost`]. The lock stays held afterwards.
    pub async fn scope<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        tokio::select! {
            biased;
            () = self.lease.until_lost() => Err(LockError::Lost { key: self.key().to_owned() }),
            out = fut => Ok(out),
        }
    }

    /// Gives the lock back and says whether it was still ours: [`LockError::NotHeld`]
    /// when the lease had run out and someone else took the lock (theirs is left
    /// untouched). Releasing a nested guard only ends that hold; the lock goes back when
    /// the outermost guard is released.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        if self.locker.end_hold(&self.lease) == HoldEnd::Nested {
            return Ok(());
        }
        self.stop_renewal();
        let released = self
            .locker
            .backend()
            .release(&self.lease.name, &self.lease.token, self.lease.fair)
            .await?;
        if released {
            tracing::debug!(key = %self.lease.name, fence = self.lease.fence, "lock released");
            Ok(())
        } else {
            Err(self.not_held())
        }
    }

    /// The lease, without keeping it alive.
    #[cfg(test)]
    pub(crate) fn lease_weak(&self) -> std::sync::Weak<Lease> {
        Arc::downgrade(&self.lease)
    }

    fn stop_renewal(&self) {
        if self.lease.mark_released() {
            self.locker.inner.watchdog.released();
        }
    }

    fn not_held(&self) -> LockError {
        LockError::NotHeld {
            key: self.key().to_owned(),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done || self.locker.end_hold(&self.lease) == HoldEnd::Nested {
            return;
        }
        self.stop_renewal();
        tracing::debug!(key = %self.lease.name, fence = self.lease.fence, "lock guard dropped: releasing");
        self.locker.backend().release_detached(
            &self.lease.name,
            &self.lease.token,
            self.lease.fair,
        );
    }
}
