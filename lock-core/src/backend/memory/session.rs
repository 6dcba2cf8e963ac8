//! How holds end: with a lease, or with a session of the handle that took them.
//!
//! A store's own handle takes leases, as on Redis; [`MemoryStore::session`] gives another
//! handle on the same locks whose holds last as long as a session of its own, as a
//! session store's (ZooKeeper, a database) do, and [`MemoryStore::end_session`] ends it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::MemoryStore;
use crate::LockKind;
use crate::backend::release::Release;
use crate::backend::store::{Acquire, Acquired};

/// How the holds taken through one handle end.
#[derive(Debug)]
pub(super) enum Terms {
    /// Each runs out with its lease unless renewed.
    Leases,
    /// Each lasts as long as the handle's current session; ending it starts the next.
    Sessions(Mutex<Session>),
}

/// One session of a handle whose holds are sessions.
#[derive(Debug, Clone)]
pub(super) struct Session {
    /// Unique in the process: marks the holds taken on it.
    id: u64,
    /// Cancelled when the session ends.
    ended: CancellationToken,
}

impl Session {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            ended: CancellationToken::new(),
        }
    }
}

/// How long one hold lasts: a lease of this length from when it is taken, or a session.
#[derive(Debug, Clone)]
pub(super) enum Term {
    Lease(Duration),
    Session(Session),
}

impl Term {
    /// The lease; `None` for a session.
    pub(super) fn lease(&self) -> Option<Duration> {
        match self {
            Term::Lease(lease) => Some(*lease),
            Term::Session(_) => None,
        }
    }
}

/// When a holder's hold ends, other than by its release.
#[derive(Debug)]
pub(super) enum Ends {
    /// Its lease runs out at this instant.
    At(Instant),
    /// With its session `id`: `ended`, a child of the session's token, is cancelled when
    /// the session ends or an operator forces the lock open.
    WithSession { id: u64, ended: CancellationToken },
}

impl Ends {
    pub(super) fn new(term: &Term, now: Instant) -> Self {
        match term {
            Term::Lease(lease) => Ends::At(now + *lease),
            Term::Session(session) => Ends::WithSession {
                id: session.id,
                ended: session.ended.child_token(),
            },
        }
    }

    pub(super) fn live(&self, now: Instant) -> bool {
        match self {
            Ends::At(at) => *at > now,
            Ends::WithSession { ended, .. } => !ended.is_cancelled(),
        }
    }

    /// The lease left; `None` for a session's hold.
    pub(super) fn left(&self, now: Instant) -> Option<Duration> {
        match self {
            Ends::At(at) => Some(at.saturating_duration_since(now)),
            Ends::WithSession { .. } => None,
        }
    }
}

impl MemoryStore {
    /// Another handle on this store's locks, whose holds last as long as a session of its
    /// own rather than a lease: a `Locker` on it never renews them, and they end when
    /// [`end_session`](Self::end_session) ends the session, as a session store's end with
    /// its connection or its expiry.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// use std::sync::Arc;
    /// use lock_core::Locker;
    /// use lock_core::backend::MemoryStore;
    ///
    /// let store = MemoryStore::new();
    /// let session = Arc::new(store.session());
    /// let a = Locker::builder().store(session.clone()).build().await?;
    /// let b = Locker::builder().store(Arc::new(store)).build().await?;
    /// let guard = a.lock("job:1").await?;
    /// assert_eq!(guard.lease_left(), None, "no lease: it lasts as long as the session");
    ///
    /// session.end_session().await;
    /// guard.lost().await;
    /// assert!(b.try_lock("job:1").await?.is_some(), "the session's holds are freed");
    /// # Ok(())
    /// # }
    /// ```
    pub fn session(&self) -> MemoryStore {
        Self {
            locks: self.locks.clone(),
            term: Terms::Sessions(Mutex::new(Session::new())),
        }
    }

    /// Ends this handle's session, as a dropped connection or an expiry would: every
    /// hold taken on it is freed (its waiters are woken) and its guard lost; the next
    /// acquisition opens a new session. Nothing on a store whose holds are leases.
    pub async fn end_session(&self) {
        let Terms::Sessions(session) = &self.term else {
            return;
        };
        let ended = {
            let mut session = session.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *session, Session::new())
        };
        let holds: Vec<(Arc<str>, String, LockKind)> =
            self.state()
                .entries
                .iter()
                .flat_map(|(key, entry)| {
                    let of_session = entry.holders.iter().filter(
                        |h| matches!(h.ends, Ends::WithSession { id, .. } if id == ended.id),
                    );
                    of_session.map(|h| (key.clone(), h.token.clone(), h.kind))
                })
                .collect();
        for (key, token, kind) in holds {
            self.release(&key, &token, Release::Holder(kind));
        }
        ended.ended.cancel();
    }

    /// `request`'s hold, just taken with `fence` on this handle's session: it is lost when
    /// its session ends or an operator forces the lock open (at once if that happened
    /// already).
    pub(super) fn session_hold(&self, request: &Acquire, fence: u64) -> Acquired {
        let now = Instant::now();
        let ended = self
            .state()
            .entries
            .get(request.key.as_str())
            .and_then(|e| e.holder(&request.token, now))
            .and_then(|h| match &h.ends {
                Ends::WithSession { ended, .. } => Some(ended.clone()),
                Ends::At(_) => None,
            });
        let ended = ended.unwrap_or_else(|| {
            let gone = CancellationToken::new();
            gone.cancel();
            gone
        });
        Acquired::session(fence, ended.cancelled_owned())
    }

    /// How a hold taken now through this handle lasts, asked for with `lease`.
    pub(super) fn term(&self, lease: Duration) -> Term {
        match &self.term {
            Terms::Leases => Term::Lease(lease),
            Terms::Sessions(session) => {
                Term::Session(session.lock().unwrap_or_else(|e| e.into_inner()).clone())
            }
        }
    }
}
