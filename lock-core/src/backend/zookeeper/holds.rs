//! The holds this store took: for each owner token, its node and the session it lives on.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::session::{Session, WeakSession};

/// One hold: its node, the session the node lives on, and whether its owner gave it back.
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) session: WeakSession,
    pub(super) path: String,
    released: CancellationToken,
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
        let released = CancellationToken::new();
        let session = session.downgrade();
        let lost = session.clone().lost(path.clone(), released.clone());
        let held = Held {
            session,
            path,
            released,
        };
        self.map().insert(token.clone(), held);
        lost
    }

    /// The hold of `token`, if it was not given back.
    pub(super) fn get(&self, token: &str) -> Option<Held> {
        self.map().get(token).cloned()
    }

    /// Forgets the hold of `token`, whose owner gives it back: its loss is no longer
    /// reported.
    pub(super) fn release(&self, token: &str) -> Option<Held> {
        let held = self.map().remove(token)?;
        held.released.cancel();
        Some(held)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Held>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
