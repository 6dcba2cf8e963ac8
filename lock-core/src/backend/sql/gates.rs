//! The local gates, one per store key (as it displays), that keep a session store's own
//! holders of one lock apart: a database session never blocks itself (its locks stack),
//! so two local holders of one lock must not both reach the server; and the turn to be
//! the store's one session waiting on a lock inside the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedMutexGuard, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use crate::LockKind;

/// A local holder's place in its lock's gate: shared for a read, sole for any other kind.
#[derive(Debug)]
pub(crate) enum Pass {
    Shared { _guard: OwnedRwLockReadGuard<()> },
    Sole { _guard: OwnedRwLockWriteGuard<()> },
}

/// One store key's gate, and the right to be the one session of this store waiting on it.
#[derive(Debug, Default)]
struct Gate {
    holders: Arc<RwLock<()>>,
    waiter: Arc<tokio::sync::Mutex<()>>,
}

/// Every store key's gate.
#[derive(Debug, Default)]
pub(crate) struct Gates(Mutex<HashMap<String, Gate>>);

impl Gates {
    /// Waits for a place among the local holders of `store_key`, as `kind` asks.
    pub(crate) async fn enter(&self, store_key: &str, kind: LockKind) -> Pass {
        let holders = self.gate(store_key, |g| g.holders.clone());
        match kind {
            LockKind::Read => Pass::Shared {
                _guard: holders.read_owned().await,
            },
            _ => Pass::Sole {
                _guard: holders.write_owned().await,
            },
        }
    }

    /// Waits to be the one waiter of this store on `store_key` inside the server.
    pub(crate) async fn wait_turn(&self, store_key: &str) -> OwnedMutexGuard<()> {
        self.gate(store_key, |g| g.waiter.clone())
            .lock_owned()
            .await
    }

    /// Forgets the gates nobody uses.
    pub(crate) fn tidy(&self) {
        let mut gates = self.0.lock().unwrap_or_else(|e| e.into_inner());
        gates.retain(|_, g| Arc::strong_count(&g.holders) > 1 || Arc::strong_count(&g.waiter) > 1);
    }

    fn gate<T>(&self, store_key: &str, part: impl FnOnce(&Gate) -> T) -> T {
        let mut gates = self.0.lock().unwrap_or_else(|e| e.into_inner());
        part(gates.entry(store_key.to_owned()).or_default())
    }
}
