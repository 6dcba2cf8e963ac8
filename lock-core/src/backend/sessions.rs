//! What the database stores (PostgreSQL, MySQL) share about their sessions: a bounded set
//! of them, each either shared by holds and single attempts or lent to one wait inside
//! the server, and each reporting its end at once. How a session is opened and kept alive
//! is each store's own ([`Connector`]).

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::LockError;

/// What every session of a store tracks, whatever the database.
#[derive(Debug)]
pub(crate) struct SessionState {
    /// Cancelled once the session is gone, with every hold on it.
    ended: CancellationToken,
    /// How many holds live on it.
    holds: AtomicUsize,
    /// Whether it waits inside the server for a lock, and so can serve nothing else.
    waiting: AtomicBool,
    /// The store's signal that a session may have become free to wait on.
    freed: Arc<Notify>,
    /// The store's work that outlives the call that started it.
    pub(crate) background: TaskTracker,
    _slot: OwnedSemaphorePermit,
}

impl SessionState {
    /// Whether the session is gone.
    pub(crate) fn has_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// A token cancelled once the session is gone.
    pub(crate) fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }

    /// Says the session is gone: its connection is dropped, and the server frees its locks.
    pub(crate) fn end(&self) {
        self.ended.cancel();
    }

    /// One more hold lives on this session.
    pub(crate) fn hold_taken(&self) {
        self.holds.fetch_add(1, Ordering::SeqCst);
    }

    /// One hold on this session was given back.
    pub(crate) fn hold_given_back(&self) {
        self.holds.fetch_sub(1, Ordering::SeqCst);
        self.freed.notify_waiters();
    }
}

/// A database session of a store: its connection, and its [`SessionState`].
pub(crate) trait Session: fmt::Debug + Send + Sync + 'static {
    fn state(&self) -> &SessionState;

    /// Whether a statement sent on it now goes at once: always, unless its connection
    /// runs one statement at a time and one is in flight.
    fn is_idle(&self) -> bool {
        true
    }
}

/// How a store opens one of its sessions, leased and tended until it ends.
pub(crate) trait Connector: fmt::Debug + Send + Sync {
    type Session: Session;

    /// Opens a session around `state`, whose token it cancels once the connection is gone.
    fn open(
        &self,
        state: SessionState,
    ) -> impl Future<Output = Result<Arc<Self::Session>, LockError>> + Send;
}

/// Every open session of a store, at most `max` of them.
#[derive(Debug)]
pub(crate) struct Sessions<C: Connector> {
    pub(crate) connector: C,
    open: Mutex<Vec<Arc<C::Session>>>,
    slots: Arc<Semaphore>,
    /// Woken when a session may have become free to wait on.
    freed: Arc<Notify>,
    /// Work that outlives the call that started it (an acquire's own task, giving back
    /// a lock whose acquire was dropped).
    pub(crate) background: TaskTracker,
}

/// What [`Sessions::for_wait`] lends.
#[derive(Debug)]
pub(crate) enum Lent<'a, S: Session> {
    /// A session to wait on.
    Session(Waiting<'a, S>),
    /// None yet, but one may have come free.
    Freed,
    /// None, by the deadline.
    Nothing,
}

/// A session lent to one wait inside the server; it is free to serve others again once
/// this is dropped.
#[derive(Debug)]
pub(crate) struct Waiting<'a, S: Session> {
    pub(crate) session: Arc<S>,
    freed: &'a Notify,
}

impl<S: Session> Drop for Waiting<'_, S> {
    fn drop(&mut self) {
        self.session.state().waiting.store(false, Ordering::SeqCst);
        self.freed.notify_waiters();
    }
}

impl<C: Connector> Sessions<C> {
    pub(crate) fn new(connector: C, max: usize) -> Self {
        Self {
            connector,
            open: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(max)),
            freed: Arc::new(Notify::new()),
            background: TaskTracker::new(),
        }
    }

    /// A session to make one attempt on, which never waits: any that is neither waiting
    /// nor busy, else a new one, else any that is not waiting; `None` if every one is
    /// waiting and no more may be opened.
    pub(crate) async fn for_attempt(&self) -> Result<Option<Arc<C::Session>>, LockError> {
        let (idle, any) = {
            let live = self.live();
            let serving = || {
                live.iter()
                    .filter(|s| !s.state().waiting.load(Ordering::SeqCst))
            };
            (
                serving().find(|s| s.is_idle()).cloned(),
                serving().next().cloned(),
            )
        };
        if let Some(session) = idle {
            return Ok(Some(session));
        }
        match self.slots.clone().try_acquire_owned() {
            Ok(slot) => self.open(slot).await.map(Some),
            Err(_) => Ok(any),
        }
    }

    /// A session to wait inside the server on: one that holds nothing and waits for
    /// nothing, or a new one. When every session is busy and no more may be opened, it
    /// waits until one may have come free ([`Lent::Freed`]: the caller tries again, as a
    /// hold given back may have freed its lock too) or until `deadline`.
    pub(crate) async fn for_wait(
        &self,
        deadline: Instant,
    ) -> Result<Lent<'_, C::Session>, LockError> {
        let freed = self.freed.notified();
        let mut freed = std::pin::pin!(freed);
        freed.as_mut().enable();
        let idle = self.live().iter().find_map(|s| {
            let state = s.state();
            let idle = state.holds.load(Ordering::SeqCst) == 0
                && !state.waiting.swap(true, Ordering::SeqCst);
            idle.then(|| s.clone())
        });
        let session = match idle {
            Some(session) => session,
            None => match self.slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let session = self.open(slot).await?;
                    session.state().waiting.store(true, Ordering::SeqCst);
                    session
                }
                Err(_) => {
                    return Ok(match tokio::time::timeout_at(deadline, freed).await {
                        Ok(()) => Lent::Freed,
                        Err(_) => Lent::Nothing,
                    });
                }
            },
        };
        Ok(Lent::Session(Waiting {
            session,
            freed: &self.freed,
        }))
    }

    /// Ends every session, as if each connection dropped.
    pub(crate) fn end_all(&self) {
        for session in self.live().drain(..) {
            session.state().end();
        }
        self.freed.notify_waiters();
    }

    /// The open sessions, the ended ones dropped.
    fn live(&self) -> MutexGuard<'_, Vec<Arc<C::Session>>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let before = open.len();
        open.retain(|s| !s.state().has_ended());
        if open.len() < before {
            self.freed.notify_waiters();
        }
        open
    }

    /// Opens a session in `slot`.
    async fn open(&self, slot: OwnedSemaphorePermit) -> Result<Arc<C::Session>, LockError> {
        let state = SessionState {
            ended: CancellationToken::new(),
            holds: AtomicUsize::new(0),
            waiting: AtomicBool::new(false),
            freed: self.freed.clone(),
            background: self.background.clone(),
            _slot: slot,
        };
        let session = self.connector.open(state).await?;
        self.live().push(session.clone());
        Ok(session)
    }
}
