//! The store's sessions: a bounded set of connections, each kept busy so that the server
//! ends it (`idle_session_timeout`) only once the process stops tending it, and each
//! reporting its end at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Statement};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::key::AdvisoryKey;
use super::semaphore;
use crate::LockError;

/// How to open a session.
#[derive(Debug, Clone)]
pub(super) struct Connect {
    pub(super) config: Config,
    /// The server ends a session idle for this long.
    pub(super) lease: Duration,
}

/// One connection and the session on it.
#[derive(Debug)]
pub(super) struct Session {
    pub(super) client: Client,
    /// The statements prepared on it, by their text.
    prepared: Mutex<HashMap<String, Statement>>,
    /// Cancelled once the connection is gone, with every hold on it.
    ended: CancellationToken,
    /// What it is lent to.
    usage: Usage,
    /// The advisory keys of the holds on it and of the attempts under way on it, one
    /// entry each: a name is taken on a session that neither holds it nor is taking it.
    keys: Mutex<Vec<AdvisoryKey>>,
    /// The store's signal that a session may have become free to wait on.
    freed: Arc<Notify>,
    /// The store's signal that a permit was announced given back.
    pub(super) released: Arc<Notify>,
    /// The store's work that outlives the call that started it.
    pub(super) background: TaskTracker,
    _slot: OwnedSemaphorePermit,
}

impl Session {
    /// Whether the connection is gone.
    pub(super) fn has_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// A token cancelled once the connection is gone.
    pub(super) fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }

    /// Drops the connection: the server ends the session and frees its locks.
    pub(super) fn end(&self) {
        self.ended.cancel();
    }

    /// The statement `sql`, prepared on this session once, so that each later use is
    /// sent at once, in order with what is sent beside it.
    pub(super) async fn prepare(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.statements().get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).await?;
        self.statements().insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    fn statements(&self) -> MutexGuard<'_, HashMap<String, Statement>> {
        self.prepared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One more hold, of `key`, lives on this session.
    pub(super) fn hold_taken(&self, key: AdvisoryKey) {
        self.keys().push(key);
        self.usage.holds.fetch_add(1, Ordering::SeqCst);
    }

    /// One hold on this session, of `key`, was given back.
    pub(super) fn hold_given_back(&self, key: AdvisoryKey) {
        self.forget(key);
        self.usage.holds.fetch_sub(1, Ordering::SeqCst);
        self.freed.notify_waiters();
    }

    /// Lends it to an attempt to take `key`, unless it holds `key`, is taking it, or
    /// waits.
    fn lend_for_taking(&self, key: AdvisoryKey) -> bool {
        let mut keys = self.keys();
        if keys.contains(&key) || !self.usage.lend_for_attempt() {
            return false;
        }
        keys.push(key);
        true
    }

    fn forget(&self, key: AdvisoryKey) {
        let mut keys = self.keys();
        if let Some(at) = keys.iter().position(|k| *k == key) {
            keys.swap_remove(at);
        }
    }

    fn keys(&self) -> MutexGuard<'_, Vec<AdvisoryKey>> {
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
#[derive(Debug, Clone, Copy)]
enum Lend {
    Attempt { taking: Option<AdvisoryKey> },
    Wait,
}

impl Usage {
    fn lent(lend: Lend) -> Self {
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

/// Every open session of a store, at most `max` of them.
#[derive(Debug)]
pub(super) struct Sessions {
    connect: Connect,
    open: Mutex<Vec<Arc<Session>>>,
    slots: Arc<Semaphore>,
    /// Woken when a session may have become free to wait on.
    freed: Arc<Notify>,
    /// Woken when a permit is announced given back, by any store (every session listens).
    pub(super) released: Arc<Notify>,
    /// Work that outlives the call that started it (an acquire's own task, giving back
    /// a lock whose acquire was dropped).
    pub(super) background: TaskTracker,
}

/// What [`Sessions::for_wait`] lends.
#[derive(Debug)]
pub(super) enum Lent<'a> {
    /// A session to wait on.
    Session(Waiting<'a>),
    /// None yet, but one may have come free.
    Freed,
    /// None, by the deadline.
    Nothing,
}

/// A session lent to statements that never wait (an attempt, a read of `pg_locks`); it is
/// not lent to a wait until this is dropped, nor to another attempt to take the key it
/// is taking.
#[derive(Debug)]
pub(super) struct Serving {
    pub(super) session: Arc<Session>,
    taking: Option<AdvisoryKey>,
}

impl Drop for Serving {
    /// Says the session may be free to wait on if it now serves nothing and holds
    /// nothing (not after every attempt, which would wake every waiter for a session
    /// each time).
    fn drop(&mut self) {
        if let Some(key) = self.taking {
            self.session.forget(key);
        }
        let usage = &self.session.usage;
        let last = usage.attempts.fetch_sub(1, Ordering::SeqCst) == 1;
        if last && usage.holds.load(Ordering::SeqCst) == 0 {
            self.session.freed.notify_waiters();
        }
    }
}

/// A session lent to one wait inside the server; it is free to serve others again once
/// this is dropped.
#[derive(Debug)]
pub(super) struct Waiting<'a> {
    pub(super) session: Arc<Session>,
    sessions: &'a Sessions,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.session.usage.waiting.store(false, Ordering::SeqCst);
        self.sessions.freed.notify_waiters();
    }
}

impl Sessions {
    pub(super) fn new(connect: Connect, max: usize) -> Self {
        Self {
            connect,
            open: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(max)),
            freed: Arc::new(Notify::new()),
            released: Arc::new(Notify::new()),
            background: TaskTracker::new(),
        }
    }

    /// A session to send statements on that never wait: any that is not waiting, or a
    /// new one; `None` if every one is waiting and no more may be opened.
    pub(super) async fn for_attempt(&self) -> Result<Option<Serving>, LockError> {
        self.serve(None).await
    }

    /// A session to attempt to take `key` on, as [`for_attempt`](Self::for_attempt),
    /// that neither holds `key` nor is taking it: two holds of one name never stack on
    /// one session, so each is a `pg_locks` row of its own, and a waiting writer keeps
    /// out every new reader (the server grants a session a lock it holds already
    /// without queueing it). `None` also when every session holds `key` and no more
    /// may be opened.
    pub(super) async fn for_taking(&self, key: AdvisoryKey) -> Result<Option<Serving>, LockError> {
        self.serve(Some(key)).await
    }

    async fn serve(&self, taking: Option<AdvisoryKey>) -> Result<Option<Serving>, LockError> {
        let lent = self
            .live()
            .iter()
            .find(|s| match taking {
                Some(key) => s.lend_for_taking(key),
                None => s.usage.lend_for_attempt(),
            })
            .cloned();
        let session = match lent {
            Some(session) => session,
            None => match self.slots.clone().try_acquire_owned() {
                Ok(slot) => self.open(slot, Lend::Attempt { taking }).await?,
                Err(_) => return Ok(None),
            },
        };
        Ok(Some(Serving { session, taking }))
    }

    /// A session to wait inside the server on: one that holds nothing and waits for
    /// nothing, or a new one. When every session is busy and no more may be opened, it
    /// waits until one may have come free ([`Lent::Freed`]: the caller tries again, as a
    /// hold given back may have freed its lock too) or until `deadline`.
    pub(super) async fn for_wait(&self, deadline: Instant) -> Result<Lent<'_>, LockError> {
        let freed = self.freed.notified();
        let mut freed = std::pin::pin!(freed);
        freed.as_mut().enable();
        let idle = self
            .live()
            .iter()
            .find(|s| s.usage.lend_for_wait())
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
            sessions: self,
        }))
    }

    /// Ends every session, as if each connection dropped.
    pub(super) fn end_all(&self) {
        for session in self.live().drain(..) {
            session.end();
        }
        self.freed.notify_waiters();
    }

    /// A connection of its own, for an operator's statement.
    pub(super) async fn connect_once(&self) -> Result<Client, LockError> {
        let (client, connection) = self
            .connect
            .config
            .connect(NoTls)
            .await
            .map_err(cannot_connect)?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// The open sessions, the ended ones dropped.
    fn live(&self) -> MutexGuard<'_, Vec<Arc<Session>>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let before = open.len();
        open.retain(|s| !s.has_ended());
        if open.len() < before {
            self.freed.notify_waiters();
        }
        open
    }

    /// Opens a session, leased, lent as `lend` before any other caller can see it, and
    /// keeps it busy until it ends.
    async fn open(
        &self,
        slot: OwnedSemaphorePermit,
        lend: Lend,
    ) -> Result<Arc<Session>, LockError> {
        let (client, connection) = self
            .connect
            .config
            .connect(NoTls)
            .await
            .map_err(cannot_connect)?;
        let ended = CancellationToken::new();
        tokio::spawn(run(connection, ended.clone(), self.released.clone()));
        let lease = self.connect.lease.as_millis();
        client
            .batch_execute(&format!(
                "SET idle_session_timeout = {lease}; LISTEN {}",
                semaphore::CHANNEL
            ))
            .await
            .map_err(|e| {
                LockError::backend(
                    "postgres: cannot set idle_session_timeout (PostgreSQL 14 or later is needed)",
                    e,
                )
            })?;
        let session = Arc::new(Session {
            client,
            prepared: Mutex::default(),
            ended,
            usage: Usage::lent(lend),
            keys: Mutex::new(match lend {
                Lend::Attempt { taking } => taking.into_iter().collect(),
                Lend::Wait => Vec::new(),
            }),
            freed: self.freed.clone(),
            released: self.released.clone(),
            background: self.background.clone(),
            _slot: slot,
        });
        tokio::spawn(keep_busy(Arc::downgrade(&session), self.connect.lease / 3));
        self.live().push(session.clone());
        Ok(session)
    }
}

/// Drives the connection until it drops or the session is ended, then says it ended;
/// wakes `released` on each notification.
async fn run(
    mut connection: tokio_postgres::Connection<
        tokio_postgres::Socket,
        tokio_postgres::tls::NoTlsStream,
    >,
    ended: CancellationToken,
    released: Arc<Notify>,
) {
    let messages = async {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notification(_) = message {
                released.notify_waiters();
            }
        }
    };
    tokio::select! {
        () = messages => {}
        () = ended.cancelled() => {}
    }
    ended.cancel();
}

/// Sends a statement every `period`, so that the server sees the session busy as long as
/// this process runs, and ends it one lease after the process stops.
async fn keep_busy(session: std::sync::Weak<Session>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(session) = session.upgrade() else {
            return;
        };
        if session.has_ended() || session.client.batch_execute("").await.is_err() {
            return;
        }
    }
}

fn cannot_connect(error: tokio_postgres::Error) -> LockError {
    LockError::backend("postgres: cannot connect", error)
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
