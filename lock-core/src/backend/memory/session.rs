//! How holds end: with a lease, or with a session of the handle that took them.
//!
//! A store's own handle takes leases, as on Redis; [`MemoryStore::session`] gives another
//! handle on the same locks whose holds last as long as a session of its own, as a
//! session store's (ZooKeeper, a database) do, and [`MemoryStore::end_session`] ends it.
//! [`MemoryStore::leased_session`] gives one whose session also ends when the runtime it
//! was opened on stops keeping it for a lease, as a database session ends when its
//! process stops answering its pings.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior, interval};
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
    Sessions(Arc<Mutex<Session>>),
}

/// One session of a handle whose holds are sessions.
#[derive(Debug, Clone)]
pub(super) struct Session {
    /// Unique in the process: marks the holds taken on it.
    id: u64,
    /// Cancelled when the session ends.
    ended: CancellationToken,
    /// The session's lease, if it has one.
    kept: Option<Arc<Kept>>,
}

/// The lease of a session: it ends once nobody kept it for `lease`.
#[derive(Debug)]
struct Kept {
    lease: Duration,
    /// When the session was last kept; `None` until its first hold.
    last: Mutex<Option<Instant>>,
}

impl Session {
    fn new(lease: Option<Duration>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let kept = lease.map(|lease| {
            Arc::new(Kept {
                lease,
                last: Mutex::new(None),
            })
        });
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            ended: CancellationToken::new(),
            kept,
        }
    }

    fn lease(&self) -> Option<Duration> {
        self.kept.as_ref().map(|kept| kept.lease)
    }

    /// Whether the session's lease ran out at `now`.
    fn expired(&self, now: Instant) -> bool {
        self.left(now).is_some_and(|left| left.is_zero())
    }

    /// The session's lease left at `now`; `None` for a session without one, or one that
    /// was never kept yet.
    fn left(&self, now: Instant) -> Option<Duration> {
        let kept = self.kept.as_ref()?;
        let last = (*kept.last.lock().unwrap_or_else(|e| e.into_inner()))?;
        Some((last + kept.lease).saturating_duration_since(now))
    }

    /// Keeps the session from `now`; says whether this is the first time.
    fn keep(&self, now: Instant) -> bool {
        let Some(kept) = &self.kept else {
            return false;
        };
        let mut last = kept.last.lock().unwrap_or_else(|e| e.into_inner());
        last.replace(now).is_none()
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
    /// With its `session`, or when `ended`, a child of the session's token, is cancelled:
    /// when the session ends or an operator forces the lock open.
    WithSession {
        session: Session,
        ended: CancellationToken,
    },
}

impl Ends {
    pub(super) fn new(term: &Term, now: Instant) -> Self {
        match term {
            Term::Lease(lease) => Ends::At(now + *lease),
            Term::Session(session) => Ends::WithSession {
                session: session.clone(),
                ended: session.ended.child_token(),
            },
        }
    }

    pub(super) fn live(&self, now: Instant) -> bool {
        match self {
            Ends::At(at) => *at > now,
            Ends::WithSession { session, ended } => !ended.is_cancelled() && !session.expired(now),
        }
    }

    /// The lease left: the hold's, or its session's; `None` for a session without one.
    pub(super) fn left(&self, now: Instant) -> Option<Duration> {
        match self {
            Ends::At(at) => Some(at.saturating_duration_since(now)),
            Ends::WithSession { session, .. } => session.left(now),
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
        self.with_sessions(None)
    }

    /// Another handle on this store's locks whose holds last as long as a session of its
    /// own, as with [`session`](Self::session), and whose session also ends once it has
    /// not been kept for `lease`: the runtime that took its first hold keeps it every
    /// third of `lease` (as a database store pings its sessions), so it ends when that
    /// runtime stops running, as a paused process's session does. Others see its holds
    /// end once the lease has passed; the handle's guards report them lost once its
    /// runtime runs again, and its next acquisition opens a new session.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use lock_core::Locker;
    /// use lock_core::backend::MemoryStore;
    ///
    /// let store = MemoryStore::new();
    /// let session = Arc::new(store.leased_session(Duration::from_secs(1)));
    /// let locker = Locker::builder().store(session).build().await?;
    /// let guard = locker.lock("job:1").await?;
    /// tokio::time::sleep(Duration::from_secs(5)).await;
    /// assert!(guard.is_held().await?, "kept while its runtime runs");
    /// # Ok(())
    /// # }
    /// ```
    pub fn leased_session(&self, lease: Duration) -> MemoryStore {
        self.with_sessions(Some(lease))
    }

    fn with_sessions(&self, lease: Option<Duration>) -> MemoryStore {
        Self {
            locks: self.locks.clone(),
            term: Terms::Sessions(Arc::new(Mutex::new(Session::new(lease)))),
        }
    }

    /// Ends this handle's session, as a dropped connection or an expiry would: every
    /// hold taken on it is freed (its waiters are woken) and its guard lost; the next
    /// acquisition opens a new session. Nothing on a store whose holds are leases.
    pub async fn end_session(&self) {
        let Terms::Sessions(sessions) = &self.term else {
            return;
        };
        let current = sessions.lock().unwrap_or_else(|e| e.into_inner()).id;
        self.end(sessions, current);
    }

    /// Ends session `id` of `sessions` if it is still the current one, and frees every
    /// hold taken on it.
    fn end(&self, sessions: &Mutex<Session>, id: u64) {
        let ended = {
            let mut session = sessions.lock().unwrap_or_else(|e| e.into_inner());
            if session.id != id {
                return;
            }
            let next = Session::new(session.lease());
            std::mem::replace(&mut *session, next)
        };
        let holds: Vec<(Arc<str>, String, LockKind)> = self
            .state()
            .entries
            .iter()
            .flat_map(|(key, entry)| {
                let of_session = entry.holders.iter().filter(
                    |h| matches!(&h.ends, Ends::WithSession { session, .. } if session.id == id),
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

    /// How a hold taken now through this handle lasts, asked for with `lease`. A leased
    /// session whose lease ran out is ended first, and the hold goes on the next; a
    /// leased session's first hold starts keeping it, on the caller's runtime.
    pub(super) fn term(&self, lease: Duration) -> Term {
        let Terms::Sessions(sessions) = &self.term else {
            return Term::Lease(lease);
        };
        let now = Instant::now();
        let mut session = sessions.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if session.expired(now) {
            self.end(sessions, session.id);
            session = sessions.lock().unwrap_or_else(|e| e.into_inner()).clone();
        }
        if session.keep(now) {
            let own = MemoryStore {
                locks: self.locks.clone(),
                term: Terms::Leases,
            };
            tokio::spawn(keep(own, Arc::downgrade(sessions), session.clone()));
        }
        Term::Session(session)
    }
}

/// Keeps leased `session` of `sessions` every third of its lease until it ends, through
/// `store`, a handle on the same locks. Once it finds the lease ran out since it last
/// kept it (its runtime did not run meanwhile), it ends the session; it stops when the
/// handle is dropped, and the session then runs out.
async fn keep(store: MemoryStore, sessions: Weak<Mutex<Session>>, session: Session) {
    let Some(lease) = session.lease() else {
        return;
    };
    let mut every = interval(lease / 3);
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = session.ended.cancelled() => return,
            _ = every.tick() => {}
        }
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        let now = Instant::now();
        if session.expired(now) {
            store.end(&sessions, session.id);
            return;
        }
        session.keep(now);
    }
}
