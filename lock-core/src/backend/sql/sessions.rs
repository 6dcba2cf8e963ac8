//! What the database stores (PostgreSQL, MySQL) share about their sessions: a bounded set
//! of them, each either shared by holds and attempts or lent to one wait inside the
//! server, each reporting its end at once, and each kept alive ([`tend`]) and trusted
//! only as long as the server has confirmed it. How a session is opened and pinged is
//! each store's own ([`Connector`], [`Session::ping`]).
//!
//! The server ends a session once it has been idle for its lease, and a session is idle
//! from when the server answered its latest statement, which is after that statement was
//! sent. So a session lives at least one lease from when the latest statement it answered
//! was sent, on this process's monotonic clock: it is *confirmed* until then. Past that,
//! without a newer answer (the process was paused, or the server stopped answering), the
//! server may have ended it, and its holds count as lost: "maybe" is not "yes".

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, MissedTickBehavior, interval_at, sleep_until};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::LockError;

/// What every session of a store tracks, whatever the database; `K` is the store's kind
/// of store key.
#[derive(Debug)]
pub(crate) struct SessionState<K> {
    /// Cancelled once the session is gone, with every hold on it.
    ended: CancellationToken,
    /// What it is lent to.
    usage: Usage,
    /// The store keys of the holds on it and of the attempts under way on it, one entry
    /// each: a lock is taken on a session that neither holds nor is taking its store key.
    store_keys: Mutex<Vec<K>>,
    /// The store's signal that a session may have become free to wait on.
    freed: Arc<Notify>,
    /// The store's work that outlives the call that started it.
    pub(crate) background: TaskTracker,
    /// How long the server keeps the session once it is idle.
    lease: Duration,
    /// When the latest statement the server answered was sent.
    answered: Mutex<Instant>,
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

    /// The server answered a statement sent on the session at `sent`.
    pub(crate) fn answered(&self, sent: Instant) {
        let mut answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        *answered = (*answered).max(sent);
    }

    /// Until when the server keeps the session at least, by its latest answer.
    fn confirmed_until(&self) -> Instant {
        *self.answered.lock().unwrap_or_else(|e| e.into_inner()) + self.lease
    }

    /// Whether the session surely lives: not ended, and confirmed until later than now.
    pub(crate) fn is_confirmed(&self) -> bool {
        self.is_confirmed_for(Duration::ZERO)
    }

    /// Whether the session surely lives for `span` more: not ended, and confirmed until
    /// later than that.
    fn is_confirmed_for(&self, span: Duration) -> bool {
        !self.has_ended() && Instant::now() + span < self.confirmed_until()
    }

    /// How often the session is pinged while it is not waiting: a third of its lease.
    fn ping_period(&self) -> Duration {
        self.lease / 3
    }

    /// One more hold, of `store_key`, lives on this session.
    pub(crate) fn hold_taken(&self, store_key: K) {
        self.store_keys().push(store_key);
        self.usage.holds.fetch_add(1, Ordering::SeqCst);
    }

    /// One hold on this session, of `store_key`, was given back.
    pub(crate) fn hold_given_back(&self, store_key: &K) {
        self.forget(store_key);
        self.usage.holds.fetch_sub(1, Ordering::SeqCst);
        self.freed.notify_waiters();
    }

    /// Lends it to an attempt to take `store_key`, unless it holds `store_key`, is taking
    /// it, or waits.
    fn lend_for_taking(&self, store_key: &K) -> bool
    where
        K: Clone,
    {
        let mut store_keys = self.store_keys();
        if store_keys.contains(store_key) || !self.usage.lend_for_attempt() {
            return false;
        }
        store_keys.push(store_key.clone());
        true
    }

    fn forget(&self, store_key: &K) {
        let mut store_keys = self.store_keys();
        if let Some(at) = store_keys.iter().position(|k| k == store_key) {
            store_keys.swap_remove(at);
        }
    }

    fn store_keys(&self) -> MutexGuard<'_, Vec<K>> {
        self.store_keys.lock().unwrap_or_else(|e| e.into_inner())
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
    /// The store key of a lock.
    type StoreKey: Clone + PartialEq + fmt::Debug + Send + Sync + 'static;

    fn state(&self) -> &SessionState<Self::StoreKey>;

    /// Sends the server a statement that does nothing, and waits for its answer.
    fn ping(&self) -> impl Future<Output = Result<(), LockError>> + Send;

    /// Whether a statement sent on it now goes at once: always, unless its connection
    /// runs one statement at a time and one is in flight.
    fn is_idle(&self) -> bool {
        true
    }
}

/// The store key of the sessions of `C`.
pub(crate) type StoreKeyOf<C> = <<C as Connector>::Session as Session>::StoreKey;

/// How a store opens one of its sessions, leased and [tended](tend) until it ends.
pub(crate) trait Connector: fmt::Debug + Send + Sync {
    type Session: Session;

    /// How long the server keeps one of its sessions once it is idle.
    fn lease(&self) -> Duration;

    /// Opens a session around `state`, whose token it cancels once the connection is gone.
    fn open(
        &self,
        state: SessionState<StoreKeyOf<Self>>,
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
    taking: Option<S::StoreKey>,
}

impl<S: Session> Drop for Serving<S> {
    /// Says the session may be free to wait on if it now serves nothing and holds
    /// nothing (not after every attempt, which would wake every waiter for a session
    /// each time).
    fn drop(&mut self) {
        let state = self.session.state();
        if let Some(store_key) = &self.taking {
            state.forget(store_key);
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

    /// A session to attempt to take `store_key` on, as [`for_attempt`](Self::for_attempt),
    /// that neither holds `store_key` nor is taking it: two holds of one lock never stack on
    /// one session, so each is the server's hold of its own, and a waiting writer keeps
    /// out every new reader (a server grants a session a lock it holds already without
    /// queueing it). `None` also when every session holds `store_key` and no more may be
    /// opened.
    pub(crate) async fn for_taking(
        &self,
        store_key: StoreKeyOf<C>,
    ) -> Result<Option<Serving<C::Session>>, LockError> {
        self.serve(Some(store_key)).await
    }

    /// An idle session that can be lent, else a new one, else a busy one that can be
    /// lent (a statement on it queues behind the one in flight).
    async fn serve(
        &self,
        taking: Option<StoreKeyOf<C>>,
    ) -> Result<Option<Serving<C::Session>>, LockError> {
        let lend = |s: &Arc<C::Session>| match &taking {
            Some(store_key) => s.state().lend_for_taking(store_key),
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

    /// Opens a session in `slot`, lent as `lend` before any other caller can see it;
    /// fails if the server does not let it in within a lease.
    async fn open(
        &self,
        slot: OwnedSemaphorePermit,
        lend: Lend<StoreKeyOf<C>>,
    ) -> Result<Arc<C::Session>, LockError> {
        let lease = self.connector.lease();
        let state = SessionState {
            ended: CancellationToken::new(),
            usage: Usage::lent(&lend),
            store_keys: Mutex::new(match lend {
                Lend::Attempt { taking } => taking.into_iter().collect(),
                Lend::Wait => Vec::new(),
            }),
            freed: self.freed.clone(),
            background: self.background.clone(),
            lease,
            answered: Mutex::new(Instant::now()),
            _slot: slot,
        };
        let opened = tokio::time::timeout(lease, self.connector.open(state)).await;
        let session = opened.map_err(|_| {
            LockError::backend(
                "cannot open a session",
                format!("the server did not answer within the session lease, {lease:?}"),
            )
        })??;
        tokio::spawn(tend(Arc::downgrade(&session)));
        self.live().push(session.clone());
        Ok(session)
    }
}

/// Asks the server whether `session` lives, unless it is confirmed already for as long
/// as a ping now would confirm it less one ping period (so that its next ping has as
/// long to be answered as in steady use): whether it does. One that does not answer is
/// ended.
pub(crate) async fn confirm<S: Session>(session: &S) -> bool {
    let state = session.state();
    if state.is_confirmed_for(state.lease - state.ping_period()) {
        return true;
    }
    let sent = Instant::now();
    if session.ping().await.is_err() {
        state.end();
        return false;
    }
    state.answered(sent);
    state.is_confirmed()
}

/// Keeps `session` alive while this process runs, so that the server ends it only one
/// lease after the process stops: a ping sent every third of its lease (or as soon as
/// the last is answered, if that took longer), each answer confirming it. Ends it once
/// its lease passed unconfirmed (the process was paused, or the server stopped
/// answering), which marks its holds lost at once; but not while it is lent to a wait
/// inside the server, which keeps it busy there and holds nothing.
async fn tend<S: Session>(session: Weak<S>) {
    let Some((ended, period)) = session
        .upgrade()
        .map(|s| (s.state().ended(), s.state().ping_period()))
    else {
        return;
    };
    let mut beats = interval_at(Instant::now() + period, period);
    beats.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = beats.tick() => {}
            () = ended.cancelled() => return,
        }
        let Some(session) = session.upgrade() else {
            return;
        };
        let state = session.state();
        if state.usage.waiting.load(Ordering::SeqCst) {
            continue;
        }
        let sent = Instant::now();
        let answered = tokio::select! {
            answered = session.ping() => answered.is_ok(),
            () = sleep_until(state.confirmed_until()) => false,
        };
        if !answered {
            state.end();
            return;
        }
        state.answered(sent);
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
