//! What a `Locker`'s clones and its guards share.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::backend::{Store, store};
use crate::hold::Hold;
use crate::options::Defaults;
use crate::reentrancy::{HoldEnd, Holds};
use crate::watchdog::Watchdog;
use crate::{LockKey, LockKind, telemetry};

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
    /// The zero of the holds' lease clocks.
    pub(crate) clock_zero: Instant,
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
            clock_zero: Instant::now(),
        }
    }

    /// Ends one guard's hold of `hold`; for the last, stops its renewal. Says whether
    /// the lock is now to be released.
    pub(crate) fn end_hold(&self, hold: &Arc<Hold>) -> HoldEnd {
        let end = self.holds.end(hold);
        if end == HoldEnd::Outermost && hold.mark_released() {
            let held = hold.taken_at.elapsed();
            telemetry::released(&hold.key, hold.kind, hold.label, held);
            // The watchdog stops renewing before the release is sent, so no renewal can
            // follow the release.
            self.watchdog.released();
        }
        end
    }

    /// Releases `hold` in the background (its guard was dropped).
    pub(crate) fn release_detached(&self, hold: Arc<Hold>) {
        self.release_in_background(
            hold.key.clone(),
            hold.token.clone(),
            hold.kind,
            hold.fence,
            hold.holder_id.clone(),
        );
    }

    /// Releases, in the background, the hold of `key` by the owner `token` (calling
    /// itself `holder_id`).
    pub(crate) fn release_in_background(
        &self,
        key: LockKey,
        token: Arc<str>,
        kind: LockKind,
        fence: u64,
        holder_id: Option<Arc<str>>,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %key, "no tokio runtime to release the lock in; its hold will expire");
            return;
        };
        let store = self.store.clone();
        let span = tracing::debug_span!("lock_release", key = %key, fence);
        let release = async move {
            let hold = store::Hold {
                key: &key,
                token: &token,
                kind,
                fence,
                holder_id: holder_id.as_deref(),
            };
            if let Err(e) = store.release(&hold).await {
                tracing::warn!(error = %e, "background release failed; the hold will expire");
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
