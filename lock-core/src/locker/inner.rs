//! What a `Locker`'s clones and its guards share.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::backend::Store;
use crate::lease::Lease;
use crate::options::Defaults;
use crate::reentrancy::{HoldEnd, Holds};
use crate::telemetry;
use crate::watchdog::Watchdog;

/// One `Locker`: its store, its settings, and the holds it keeps.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) defaults: Defaults,
    pub(crate) max_key_len: usize,
    pub(crate) holds: Holds,
    pub(crate) watchdog: Watchdog,
    /// Releases of dropped guards, under way.
    pub(crate) background: TaskTracker,
    /// The zero of the leases' clocks.
    pub(crate) epoch: Instant,
}

impl Inner {
    pub(crate) fn new(store: Arc<dyn Store>, defaults: Defaults, max_key_len: usize) -> Self {
        Self {
            watchdog: Watchdog::new(store.clone()),
            store,
            defaults,
            max_key_len,
            holds: Holds::default(),
            background: TaskTracker::new(),
            epoch: Instant::now(),
        }
    }

    /// Ends one guard's hold of `lease`; for the last, stops its renewal. Says whether
    /// the lock is now to be released.
    pub(crate) fn end_hold(&self, lease: &Arc<Lease>) -> HoldEnd {
        let end = self.holds.end(lease);
        if end == HoldEnd::Outermost && lease.mark_released() {
            let held = lease.taken_at.elapsed();
            telemetry::released(&lease.key, lease.kind, lease.label, held);
            // The watchdog stops renewing before the release is sent, so no renewal can
            // follow the release.
            self.watchdog.released();
        }
        end
    }

    /// Releases `lease` in the background (its guard was dropped).
    pub(crate) fn release_detached(&self, lease: Arc<Lease>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %lease.key, "no tokio runtime to release the lock in; its lease will expire");
            return;
        };
        let store = self.store.clone();
        let span = tracing::debug_span!("lock_release", key = %lease.key, fence = lease.fence);
        let release = async move {
            if let Err(e) = store.release(&lease.hold()).await {
                tracing::warn!(error = %e, "background release failed; the lease will expire");
            }
        };
        self.background.spawn_on(release.instrument(span), &runtime);
    }

    /// The last `Locker` clone is gone: stops the watchdog, which marks the holds still
    /// alive lost, and the store's background tasks. The guards can still release.
    pub(crate) fn close(&self) {
        self.watchdog.close();
        self.store.close();
    }

    /// Waits until the releases started in the background so far have been answered.
    pub(crate) async fn flush(&self) {
        self.background.close();
        self.background.wait().await;
        self.background.reopen();
        self.store.flush().await;
    }
}
