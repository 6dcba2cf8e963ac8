//! What the database stores (PostgreSQL, MySQL) share about their sessions: a bounded set
//! of them, each either shared by holds and attempts or lent to one wait inside the
//! server, and each reporting its end at once. How a session is opened and kept alive
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

/// What every session of a store tracks, whatever the database; `K` is the store's lock
/// on the server.
#[derive(Debug)]
pub(crate) struct SessionState<K> {
    /// Cancelled once the session is gone, with every hold on it.
    ended: CancellationToken,
    /// What it is lent to.
    usage: Usage,
    /// The locks of the holds on it and of the attempts under way on it, one entry each:
    /// a lock is taken on a session that neither holds it nor is taking it.
    keys: Mutex<Vec<K>>,
    /// The store's signal that a session may have become free to wait on.
    freed: Arc<Notify>,
    /// The store's work that outlives the call that started it.
    pub(crate) background: TaskTracker,
    _slot: OwnedSemaphorePermit,
}

impl<K: PartialEq> SessionState<K> {
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

    /// One more hold, of `key`, lives on this session.
    pub(crate) fn hold_taken(&self, key: K) {
        self.keys().push(key);
        self.usage.holds.fetch_add(1, Ordering::SeqCst);
    }

    /// One hold on this session, of `key`, was given back.
    pub(crate) fn hold_given_back(&self, key: &K) {
        self.forget(key);
        self.usage.holds.fetch_sub(1, Ordering::SeqCst);
        self.freed.notify_waiters();
    }

    /// Lends it to an attempt to take `key`, unless it holds `key`, is taking it, or
    /// waits.
    fn lend_for_taking(&self, key: &K) -> bool
    where
        K: Clone,
    {
        let mut keys = self.keys();
        if keys.contains(key) || !self.usage.lend_for_attempt() {
            return false;
        }
        keys.push(key.clone());
        true
    }

    fn forget(&self, key: &K) {
        let mut keys = self.keys();
        if let Some(at) = keys.iter().position(|k| k == key) {
            keys.swap_remove(at);
        }
    }

    fn keys(&self) -> MutexGuard<'_, Vec<K>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a session is lent to. A connection runs one statement at a time, so a statement
/// sent behind a wait inside the server waits with it: a session waiting is lent to
/// nothing else, and a session serving an attempt (or holding a lock) is not lent to a
/// wait.
#[derive(Debug, Default)]
struct Usage {
    /// How many holds live on it.
    holds: AtomicUsize,
    /// How many statements that never wait are under way on it, or about to be sent.
    attempts: AtomicUsize,
    /// Whether it waits inside the server for a lock.
    waiting: AtomicBool,
}

/// What a new session is first lent to.
#[derive(Debug, Clone)]
enum Lend<K> {
    Attempt { taking: Option<K> },
    Wait,
}

impl Usage {
    fn lent<K>(lend: &Lend<K>) -> Self {
        Self {
            holds: AtomicUsize::new(0),
            attempts: AtomicUsize::new(matches!(lend, Lend::Attempt { .. }).into()),
            waiting: AtomicBool::new(matches!(lend, Lend::Wait)),
        }
    }

    /// Lends it to one more statement that never waits, unless it is waiting.
    fn lend_for_attempt(&self) -> bool {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        if !self.waiting.load(Ordering::SeqCst) {
            return true;
        }
        self.attempts.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// Lends it to a wait, if it holds nothing, waits for nothing and serves no attempt.
    /// Each side marks itself before it reads the other's mark, so an attempt and a wait
    /// never both get it.
    fn lend_for_wait(&self) -> bool {
        if self.holds.load(Ordering::SeqCst) != 0 || self.waiting.swap(true, Ordering::SeqCst) {
            return false;
        }
        if self.attempts.load(Ordering::SeqCst) == 0 {
            return true;
        }
        self.waiting.store(false, Ordering::SeqCst);
        false
    }
}

/// A database session of a store: its connection, and its [`SessionState`].
pub(crate) trait Session: fmt::Debug + Send + Sync + 'static {
    /// A lock on the server.
    type Key: Clone + PartialEq + fmt::Debug + Send + Sync + 'static;

    fn state(&self) -> &SessionState<Self::Key>;

    /// Whether a statement sent on it now goes at once: always, unless its connection
    /// runs one statement at a time and one is in flight.
    fn is_idle(&self) -> bool {
        true
    }
}

/// The lock on the server of the sessions of `C`.
pub(crate) type KeyOf<C> = <<C as Connector>::Session as Session>::Key;

/// How a store opens one of its sessions, leased and tended until it ends.
pub(crate) trait Connector: fmt::Debug + Send + Sync {
    type Session: Session;

    /// Opens a session around `state`, whose token it cancels once the connection is gone.
    fn open(
        &self,
        state: SessionState<KeyOf<Self>>,
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

/// A session lent to statements that never wait (an attempt, a read of the server's
/// locks); it is not lent to a wait until this is dropped, nor to another attempt to
/// take the lock it is taking.
#[derive(Debug)]
pub(crate) struct Serving<S: Session> {
    pub(crate) session: Arc<S>,
    taking: Option<S::Key>,
}

impl<S: Session> Drop for Serving<S> {
    /// Says the session may be free to wait on if it now serves nothing and holds
    /// nothing (not after every attempt, which would wake every waiter for a session
    /// each time).
    fn drop(&mut self) {
        let state = self.session.state();
        if let Some(key) = &self.taking {
            state.forget(key);
        }
        let usage = &state.usage;
        let last = usage.attempts.fetch_sub(1, Ordering::SeqCst) == 1;
        if last && usage.holds.load(Ordering::SeqCst) == 0 {
            state.freed.notify_waiters();
        }
    }
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
        self.session
            .state()
            .usage
            .waiting
            .store(false, Ordering::SeqCst);
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

    /// A session to send statements on that never wait: any that is not waiting (an
    /// idle one first), or a new one; `None` if every one is waiting and no more may be
    /// opened.
    pub(crate) async fn for_attempt(&self) -> Result<Option<Serving<C::Session>>, LockError> {
        self.serve(None).await
    }

    /// A session to attempt to take `key` on, as [`for_attempt`](Self::for_attempt),
    /// that neither holds `key` nor is taking it: two holds of one lock never stack on
    /// one session, so each is the server's hold of its own, and a waiting writer keeps
    /// out every new reader (a server grants a session a lock it holds already without
    /// queueing it). `None` also when every session holds `key` and no more may be
    /// opened.
    pub(crate) async fn for_taking(
        &self,
        key: KeyOf<C>,
    ) -> Result<Option<Serving<C::Session>>, LockError> {
        self.serve(Some(key)).await
    }

    /// An idle session that can be lent, else a new one, else a busy one that can be
    /// lent (a statement on it queues behind the one in flight).
    async fn serve(
        &self,
        taking: Option<KeyOf<C>>,
    ) -> Result<Option<Serving<C::Session>>, LockError> {
        let lend = |s: &Arc<C::Session>| match &taking {
            Some(key) => s.state().lend_for_taking(key),
            None => s.state().usage.lend_for_attempt(),
        };
        let idle = self.live().iter().find(|s| s.is_idle() && lend(s)).cloned();
        let session = match idle {
            Some(session) => session,
            None => match self.slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let lent = Lend::Attempt {
                        taking: taking.clone(),
                    };
                    self.open(slot, lent).await?
                }
                Err(_) => match self.live().iter().find(|s| lend(s)).cloned() {
                    Some(session) => session,
                    None => return Ok(None),
                },
            },
        };
        Ok(Some(Serving { session, taking }))
    }

    /// A session to wait inside the server on: one that holds nothing, waits for
    /// nothing and serves no attempt, or a new one. When every session is busy and no
    /// more may be opened, it waits until one may have come free ([`Lent::Freed`]: the
    /// caller tries again, as a hold given back may have freed its lock too) or until
    /// `deadline`.
    pub(crate) async fn for_wait(
        &self,
        deadline: Instant,
    ) -> Result<Lent<'_, C::Session>, LockError> {
        let freed = self.freed.notified();
        let mut freed = std::pin::pin!(freed);
        freed.as_mut().enable();
        let idle = self
            .live()
            .iter()
            .find(|s| s.state().usage.lend_for_wait())
            .cloned();
        let session = match idle {
            Some(session) => session,
            None => match self.slots.clone().try_acquire_owned() {
                Ok(slot) => self.open(slot, Lend::Wait).await?,
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

    /// Opens a session in `slot`, lent as `lend` before any other caller can see it.
    async fn open(
        &self,
        slot: OwnedSemaphorePermit,
        lend: Lend<KeyOf<C>>,
    ) -> Result<Arc<C::Session>, LockError> {
        let state = SessionState {
            ended: CancellationToken::new(),
            usage: Usage::lent(&lend),
            keys: Mutex::new(match lend {
                Lend::Attempt { taking } => taking.into_iter().collect(),
                Lend::Wait => Vec::new(),
            }),
            freed: self.freed.clone(),
            background: self.background.clone(),
            _slot: slot,
        };
        let session = self.connector.open(state).await?;
        self.live().push(session.clone());
        Ok(session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_serving_an_attempt_is_not_lent_to_a_wait() {
        let usage = Usage::default();
        assert!(usage.lend_for_attempt());
        assert!(
            !usage.lend_for_wait(),
            "a wait lent a session an attempt is on"
        );
        usage.attempts.fetch_sub(1, Ordering::SeqCst);
        assert!(usage.lend_for_wait());
    }

    #[test]
    fn a_waiting_session_serves_nothing_else() {
        let usage = Usage::default();
        assert!(usage.lend_for_wait());
        assert!(!usage.lend_for_attempt(), "an attempt queued behind a wait");
        assert!(!usage.lend_for_wait(), "two waits on one session");
        usage.waiting.store(false, Ordering::SeqCst);
        assert!(usage.lend_for_attempt());
    }

    #[test]
    fn a_session_holding_a_lock_is_not_lent_to_a_wait() {
        let usage = Usage::default();
        usage.holds.fetch_add(1, Ordering::SeqCst);
        assert!(!usage.lend_for_wait());
        assert!(usage.lend_for_attempt(), "holds share sessions");
    }
}
