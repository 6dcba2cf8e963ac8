//! The holds this store took.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::key::AdvisoryKey;
use super::session::Session;
use crate::LockKind;
use crate::backend::gates::Pass;

/// One hold: the session it lives on, its advisory key, and its place in the gate.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) session: Arc<Session>,
    pub(super) key: AdvisoryKey,
    pub(super) kind: LockKind,
    /// Given up as soon as the session ends, so that the store's other holders of the
    /// name need not wait for this hold's owner to let go of it. A permit has none.
    _pass: Arc<Mutex<Option<Pass>>>,
    released: CancellationToken,
}

/// Every hold this store took and has not given back, by owner token.
#[derive(Debug, Default)]
pub(super) struct Holds(Mutex<HashMap<Arc<str>, Held>>);

impl Holds {
    /// Records the hold of `token`: the future that resolves when its session ends
    /// before it is given back.
    pub(super) fn insert(
        &self,
        token: &Arc<str>,
        session: Arc<Session>,
        key: AdvisoryKey,
        kind: LockKind,
        pass: Option<Pass>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let released = CancellationToken::new();
        let ended = session.ended();
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
            key,
            kind,
            _pass: pass,
            released,
        };
        self.map().insert(token.clone(), held);
        lost
    }

    /// Whether the hold of `token` lives.
    pub(super) fn is_live(&self, token: &str) -> bool {
        self.map()
            .get(token)
            .is_some_and(|h| !h.session.has_ended())
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
