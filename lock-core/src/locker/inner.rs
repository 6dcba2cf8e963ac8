//! What a `Locker`'s clones and its guards share.

use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::backend::{Renewal, Store, store};
use crate::hold::Hold;
use crate::options::Defaults;
use crate::reentrancy::{HoldEnd, Holds};
use crate::watchdog::Watchdog;
use crate::{LockError, LockKey, LockKind, MIN_LEASE, telemetry};

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

    /// Gives `hold` back to the store, and says whether it was still ours. A hold that
    /// must last a while yet ([`hold_at_least`](crate::LockOptions::hold_at_least)) is
    /// left to end then: a lease is set to run out at that time; a session's hold is
    /// released by a task of its own at that time.
    pub(crate) async fn give_back(&self, hold: &Arc<Hold>) -> Result<bool, LockError> {
        let Some(rest) = hold.kept_for() else {
            let released = self.store.release(&hold.for_store()).await;
            return released.map_err(|e| e.about(&hold.key));
        };
        if hold.is_session() {
            if hold.is_lost() {
                return Ok(false);
            }
            let (store, hold) = (self.store.clone(), hold.clone());
            tokio::spawn(async move {
                tokio::time::sleep(rest).await;
                if let Err(e) = store.release(&hold.for_store()).await {
                    tracing::warn!(key = %hold.key, error = %e, "release after hold_at_least failed");
                }
            });
            return Ok(true);
        }
        let renewal = [Renewal {
            hold: hold.for_store(),
            lease: rest.max(MIN_LEASE),
        }];
        let renewed = self.store.renew(&renewal).await;
        let renewed = renewed.map_err(|e| e.about(&hold.key))?;
        Ok(renewed.first().copied().flatten().is_some())
    }

    /// Gives `hold` back in the background (its guard was dropped).
    pub(crate) fn release_detached(self: &Arc<Self>, hold: Arc<Hold>) {
        let (key, fence, inner) = (hold.key.clone(), hold.fence, self.clone());
        self.in_background(&key, fence, async move {
            inner.give_back(&hold).await.map(drop)
        });
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
        let (store, shown) = (self.store.clone(), key.clone());
        self.in_background(&shown, fence, async move {
            let hold = store::Hold {
                key: &key,
                token: &token,
                kind,
                fence,
                holder_id: holder_id.as_deref(),
            };
            store.release(&hold).await.map(drop)
        });
    }

    /// Runs `release`, a release of the hold of `key` with token `fence`, in the
    /// background, where [`flush`](Self::flush) waits for it; a failure is logged.
    fn in_background(
        &self,
        key: &LockKey,
        fence: u64,
        release: impl Future<Output = Result<(), LockError>> + Send + 'static,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %key, "no tokio runtime to release the lock in; its hold will expire");
            return;
        };
        let span = tracing::debug_span!("lock_release", key = %key, fence);
        let release = async move {
            if let Err(e) = release.await {
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
