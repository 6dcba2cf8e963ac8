//! The holds this store took, and the local gates that keep this store's own holders of
//! one name apart: a session never blocks itself, so two local holders of one key must
//! not both reach the server.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedMutexGuard, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};
use tokio_util::sync::CancellationToken;

use super::key::AdvisoryKey;
use super::session::Session;
use crate::LockKind;

/// A local holder's place in its name's gate: shared for a read, sole for any other kind.
#[derive(Debug)]
pub(super) enum Pass {
    Shared { _guard: OwnedRwLockReadGuard<()> },
    Sole { _guard: OwnedRwLockWriteGuard<()> },
}

/// One name's gate, and the right to be the one session of this store waiting on it.
#[derive(Debug, Default)]
struct Gate {
    holders: Arc<RwLock<()>>,
    waiter: Arc<tokio::sync::Mutex<()>>,
}

/// Every name's gate.
#[derive(Debug, Default)]
pub(super) struct Gates(Mutex<HashMap<String, Gate>>);

impl Gates {
    /// Waits for a place among the local holders of `name`, as `kind` asks.
    pub(super) async fn enter(&self, name: &str, kind: LockKind) -> Pass {
        let holders = self.gate(name, |g| g.holders.clone());
        match kind {
            LockKind::Read => Pass::Shared {
                _guard: holders.read_owned().await,
            },
            _ => Pass::Sole {
                _guard: holders.write_owned().await,
            },
        }
    }

    /// Waits to be the one waiter of this store on `name` inside the server.
    pub(super) async fn wait_turn(&self, name: &str) -> OwnedMutexGuard<()> {
        self.gate(name, |g| g.waiter.clone()).lock_owned().await
    }

    /// Forgets the gates nobody uses.
    pub(super) fn tidy(&self) {
        let mut gates = self.0.lock().unwrap_or_else(|e| e.into_inner());
        gates.retain(|_, g| Arc::strong_count(&g.holders) > 1 || Arc::strong_count(&g.waiter) > 1);
    }

    fn gate<T>(&self, name: &str, part: impl FnOnce(&Gate) -> T) -> T {
        let mut gates = self.0.lock().unwrap_or_else(|e| e.into_inner());
        part(gates.entry(name.to_owned()).or_default())
    }
}

/// One hold: the session it lives on, its advisory key, and its place in the gate.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) session: Arc<Session>,
    pub(super) key: AdvisoryKey,
    pub(super) kind: LockKind,
    /// Given up as soon as the session ends, so that the store's other holders of the
    /// name need not wait for this hold's owner to let go of it.
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
        pass: Pass,
    ) -> impl Future<Output = ()> + Send + 'static {
        let released = CancellationToken::new();
        let ended = session.ended();
        let pass = Arc::new(Mutex::new(Some(pass)));
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
