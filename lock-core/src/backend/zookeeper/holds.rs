//! The holds this store took: for each owner token, its node and the session it lives on.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::session::{Session, WeakSession};

/// How far its owner got in giving a hold back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Return {
    /// Not asked to, or it failed: a loss of the hold is its guard's to report.
    Kept,
    /// Its release is under way: a loss met meanwhile waits for how it ends.
    Giving,
    /// Its release deleted its node.
    Given,
}

/// One hold: its node, the session the node lives on, and how far its owner got in
/// giving it back.
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) session: WeakSession,
    pub(super) path: String,
    giving: watch::Sender<Return>,
}

/// Every hold this store took and has not given back, by owner token.
#[derive(Debug, Default)]
pub(super) struct Holds(Mutex<HashMap<Arc<str>, Held>>);

impl Holds {
    /// Records the hold of `token` on the node at `path`: the future that resolves when
    /// it is lost other than by its release.
    pub(super) fn insert(
        &self,
        token: &Arc<str>,
        session: Session,
        path: String,
    ) -> impl Future<Output = ()> + Send + 'static {
        let giving = watch::Sender::new(Return::Kept);
        let session = session.downgrade();
        let lost = lost(session.clone(), path.clone(), giving.clone());
        let held = Held {
            session,
            path,
            giving,
        };
        self.map().insert(token.clone(), held);
        lost
    }

    /// The hold of `token`, if it was not given back.
    pub(super) fn get(&self, token: &str) -> Option<Held> {
        self.map().get(token).cloned()
    }

    /// The hold of `token`, whose owner begins to give it back: a loss met from now on
    /// is reported only if the release does not delete its node ([`settle`](Self::settle)).
    pub(super) fn give(&self, token: &str) -> Option<Held> {
        let held = self.get(token)?;
        held.giving.send_replace(Return::Giving);
        Some(held)
    }

    /// Forgets the hold of `token`, whose release ended: its loss is no longer reported
    /// if the release deleted its node (`given`), and is otherwise.
    pub(super) fn settle(&self, token: &str, given: bool) {
        if let Some(held) = self.map().remove(token) {
            let settled = if given { Return::Given } else { Return::Kept };
            held.giving.send_replace(settled);
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Held>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Resolves when the node at `path` is gone other than by its owner's release
/// (`giving`): deleted by an operator, or with the session. A loss met while its owner
/// gives it back is the release's to report, unless the release fails.
async fn lost(session: WeakSession, path: String, giving: watch::Sender<Return>) {
    session.gone(&path).await;
    let mut giving = giving.subscribe();
    let settled = giving.wait_for(|r| *r != Return::Giving).await.map(|r| *r);
    if settled.is_ok_and(|r| r == Return::Given) {
        std::future::pending::<()>().await;
    }
}
