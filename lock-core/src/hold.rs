//! A hold as this process knows it: shared by the guards of a task that re-entered it
//! and by the watchdog.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::store::{self, Acquire};
use crate::options::Resolved;
use crate::{LockKey, LockKind, telemetry};

/// Who holds a lock, for reentrancy: the tokio task that acquired it, or, outside any
/// task, the thread running `block_on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Context {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Context {
    pub(crate) fn current() -> Self {
        tokio::task::try_id().map_or_else(|| Self::Thread(std::thread::current().id()), Self::Task)
    }
}

const HELD: u8 = 0;
const RELEASED: u8 = 1;
const LOST: u8 = 2;

/// One acquisition: its identity in the store, and whether it is still held, released or
/// lost. For a lease store it also keeps the lease, which the watchdog renews.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) key: LockKey,
    pub(crate) token: Arc<str>,
    pub(crate) fence: u64,
    pub(crate) kind: LockKind,
    /// What the holder calls itself, for the store to renew and release with the hold.
    pub(crate) holder_id: Option<Arc<str>>,
    /// What the lock is, for metrics and traces ([`crate::LockOptions::label`]).
    pub(crate) label: Option<&'static str>,
    /// When it was taken.
    pub(crate) taken_at: Instant,
    pub(crate) context: Context,
    /// Renewed while it lasts (lease stores); otherwise only marked lost at its deadline.
    pub(crate) watchdog: bool,
    /// How long after `taken_at` a release leaves it held ([`crate::LockOptions::hold_at_least`]).
    hold_at_least: Duration,
    /// A session store's hold: it has no lease.
    session: bool,
    /// Guards alive for this hold; changed under the reentrancy registry's lock.
    pub(crate) holds: AtomicUsize,
    lease_ms: AtomicU64,
    /// When the lease runs out, as nanoseconds since `clock_zero`; reckoned from when the
    /// acquiring or renewing command was sent, so it errs early. Unused for a session.
    expires_at: AtomicU64,
    clock_zero: Instant,
    state: AtomicU8,
    /// A renewal of it is in flight.
    pub(crate) renewing: AtomicBool,
    changed: Notify,
}

impl Hold {
    /// The hold `request` took for `context`, with fencing token `fence`, kept as `opts`
    /// say; its lease (for a lease store) runs until `until`.
    pub(crate) fn new(
        request: Acquire,
        fence: u64,
        context: Context,
        until: Option<Instant>,
        clock_zero: Instant,
        opts: &Resolved,
    ) -> Self {
        let this = Self {
            key: request.key,
            token: request.token,
            fence,
            kind: request.kind,
            holder_id: request.holder_id,
            label: opts.label,
            taken_at: Instant::now(),
            context,
            watchdog: opts.watchdog,
            hold_at_least: opts.hold_at_least,
            session: until.is_none(),
            holds: 1.into(),
            lease_ms: AtomicU64::new(0),
            expires_at: AtomicU64::new(0),
            clock_zero,
            state: AtomicU8::new(HELD),
            renewing: AtomicBool::new(false),
            changed: Notify::new(),
        };
        this.set_lease(request.lease);
        if let Some(until) = until {
            this.renewed(until);
        }
        this
    }

    /// How long a release now must leave it held: what is left of its
    /// [`hold_at_least`](crate::LockOptions::hold_at_least), if anything.
    pub(crate) fn kept_for(&self) -> Option<Duration> {
        let rest = self.hold_at_least.checked_sub(self.taken_at.elapsed())?;
        Some(rest).filter(|rest| !rest.is_zero())
    }

    /// Whether it lasts as long as a session rather than a lease.
    pub(crate) fn is_session(&self) -> bool {
        self.session
    }

    /// The hold, as the store knows it.
    pub(crate) fn for_store(&self) -> store::Hold<'_> {
        store::Hold {
            key: &self.key,
            token: &self.token,
            kind: self.kind,
            fence: self.fence,
            holder_id: self.holder_id.as_deref(),
        }
    }

    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms.load(Ordering::Relaxed))
    }

    pub(crate) fn set_lease(&self, lease: Duration) {
        let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        self.lease_ms.store(ms, Ordering::Relaxed);
    }

    pub(crate) fn expires_at(&self) -> Instant {
        self.clock_zero + Duration::from_nanos(self.expires_at.load(Ordering::Acquire))
    }

    /// How long the lease still runs; `None` for a session's hold.
    pub(crate) fn lease_left(&self) -> Option<Duration> {
        (!self.session).then(|| self.expires_at().saturating_duration_since(Instant::now()))
    }

    /// `at`, moved back to a multiple of `grid` since the Locker's clock zero.
    pub(crate) fn snap_down(&self, at: Instant, grid: Duration) -> Instant {
        let since = at.saturating_duration_since(self.clock_zero);
        let grid_ns = grid.as_nanos().max(1);
        let snapped = since.as_nanos() - since.as_nanos() % grid_ns;
        self.clock_zero + Duration::from_nanos(u64::try_from(snapped).unwrap_or(u64::MAX))
    }

    /// Records that the lease runs until `until`. Never moves the deadline back.
    pub(crate) fn renewed(&self, until: Instant) {
        let deadline = until.saturating_duration_since(self.clock_zero);
        let nanos = u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX);
        self.expires_at.fetch_max(nanos, Ordering::AcqRel);
    }

    pub(crate) fn is_active(&self) -> bool {
        self.state.load(Ordering::Acquire) == HELD
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.state.load(Ordering::Acquire) == LOST
    }

    /// Marks the hold lost (if it was held) and wakes everything watching it.
    pub(crate) fn mark_lost(&self) {
        if self
            .state
            .compare_exchange(HELD, LOST, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            telemetry::lost(&self.key, self.kind, self.label, self.fence);
            self.changed.notify_waiters();
        }
    }

    /// Marks the hold released (if it was held); the watchdog stops renewing it before
    /// the release is sent, so no renewal can follow the release.
    pub(crate) fn mark_released(&self) -> bool {
        let released = self
            .state
            .compare_exchange(HELD, RELEASED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if released {
            self.changed.notify_waiters();
        }
        released
    }

    /// Resolves once the hold is lost.
    pub(crate) async fn until_lost(&self) {
        loop {
            let changed = self.changed.notified();
            if self.is_lost() {
                return;
            }
            changed.await;
        }
    }

    /// Resolves once the hold is released or lost.
    pub(crate) async fn until_over(&self) {
        loop {
            let changed = self.changed.notified();
            if !self.is_active() {
                return;
            }
            changed.await;
        }
    }
}
