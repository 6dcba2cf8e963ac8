//! The local gates that keep a session store's own holders of one name apart: a
//! database session never blocks itself (its locks stack), so two local holders of one
//! name must not both reach the server; and the turn to be the store's one session
//! waiting on a name inside the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedMutexGuard, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use crate::LockKind;

/// A local holder's place in its name's gate: shared for a read, sole for any other kind.
#[derive(Debug)]
pub(crate) enum Pass {
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
pub(crate) struct Gates(Mutex<HashMap<String, Gate>>);

impl Gates {
    /// Waits for a place among the local holders of `name`, as `kind` asks.
    pub(crate) async fn enter(&self, name: &str, kind: LockKind) -> Pass {
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
    pub(crate) async fn wait_turn(&self, name: &str) -> OwnedMutexGuard<()> {
        self.gate(name, |g| g.waiter.clone()).lock_owned().await
    }

    /// Forgets the gates nobody uses.
    pub(crate) fn tidy(&self) {
        let mut gates = self.0.lock().unwrap_or_else(|e| e.into_inner());
        gates.retain(|_, g| Arc::strong_count(&g.holders) > 1 || Arc::strong_count(&g.waiter) > 1);
    }

    fn gate<T>(&self, name: &str, part: impl FnOnce(&Gate) -> T) -> T {
        let mut gates = self.0.lock().unwrap_or_else(|e| e.into_inner());
        part(gates.entry(name.to_owned()).or_default())
    }
}
