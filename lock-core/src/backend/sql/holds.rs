//! The holds a session store (PostgreSQL, MySQL) took, each on a session of its own kind
//! under a store key of its own kind.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::LockKind;
use crate::backend::sql::gates::Pass;
use crate::backend::sql::sessions::Session;

/// One hold: the session it lives on, its store key, and its place in the gate.
#[derive(Debug)]
pub(crate) struct Held<S, K> {
    pub(crate) session: Arc<S>,
    pub(crate) store_key: K,
    pub(crate) kind: LockKind,
    /// Given up as soon as the session ends, so that the store's other holders of the
    /// store key need not wait for this hold's owner to let go of it. A permit has none.
    _pass: Arc<Mutex<Option<Pass>>>,
    released: CancellationToken,
}

/// Every hold this store took and has not given back, by owner token.
#[derive(Debug)]
pub(crate) struct Holds<S, K>(Mutex<HashMap<Arc<str>, Held<S, K>>>);

impl<S, K> Default for Holds<S, K> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<S: Session, K> Holds<S, K> {
    /// Records the hold of `token`: the future that resolves when its session ends
    /// before it is given back.
    pub(crate) fn insert(
        &self,
        token: &Arc<str>,
        session: Arc<S>,
        store_key: K,
        kind: LockKind,
        pass: Option<Pass>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let released = CancellationToken::new();
        let ended = session.state().ended();
        let pass = Arc::new(Mutex::new(pass));
        let lost = {
            let released = released.clone();
            let pass = pass.clone();
            async move {
                tokio::select! {
                    () = ended.cancelled() => {
                        pass.lock().unwrap_or_else(|e| e.into_inner()).take();
                    }
                    () = released.cancelled() => std::future::pending().await,
                }
            }
        };
        let held = Held {
            session,
            store_key,
            kind,
            _pass: pass,
            released,
        };
        self.map().insert(token.clone(), held);
        lost
    }

    /// Whether the hold of `token` surely lives: its session is confirmed alive.
    pub(crate) fn is_live(&self, token: &str) -> bool {
        self.map()
            .get(token)
            .is_some_and(|h| h.session.state().is_confirmed())
    }

    /// Forgets the hold of `token`, whose owner gives it back: its loss is no longer
    /// reported.
    pub(crate) fn release(&self, token: &str) -> Option<Held<S, K>> {
        let held = self.map().remove(token)?;
        held.released.cancel();
        Some(held)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Held<S, K>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
