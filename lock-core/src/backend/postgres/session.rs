//! The store's sessions: a bounded set of connections, each kept busy so that the server
//! ends it (`idle_session_timeout`) only once the process stops tending it, and each
//! reporting its end at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_postgres::{Client, Config, NoTls, Statement};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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
    /// How many holds live on it.
    holds: AtomicUsize,
    /// Whether it waits inside the server for a lock, and so can serve nothing else.
    waiting: AtomicBool,
    /// The store's signal that a session may have become free to wait on.
    freed: Arc<Notify>,
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

    /// One more hold lives on this session.
    pub(super) fn hold_taken(&self) {
        self.holds.fetch_add(1, Ordering::SeqCst);
    }

    /// One hold on this session was given back.
    pub(super) fn hold_given_back(&self) {
        self.holds.fetch_sub(1, Ordering::SeqCst);
        self.freed.notify_waiters();
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

/// A session lent to one wait inside the server; it is free to serve others again once
/// this is dropped.
#[derive(Debug)]
pub(super) struct Waiting<'a> {
    pub(super) session: Arc<Session>,
    sessions: &'a Sessions,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.session.waiting.store(false, Ordering::SeqCst);
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
            background: TaskTracker::new(),
        }
    }

    /// A session to make one attempt on, which never waits: any that is not waiting,
    /// or a new one; `None` if every one is waiting and no more may be opened.
    pub(super) async fn for_attempt(&self) -> Result<Option<Arc<Session>>, LockError> {
        if let Some(session) = self
            .live()
            .iter()
            .find(|s| !s.waiting.load(Ordering::SeqCst))
        {
            return Ok(Some(session.clone()));
        }
        match self.slots.clone().try_acquire_owned() {
            Ok(slot) => self.open(slot).await.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// A session to wait inside the server on: one that holds nothing and waits for
    /// nothing, or a new one. When every session is busy and no more may be opened, it
    /// waits until one may have come free ([`Lent::Freed`]: the caller tries again, as a
    /// hold given back may have freed its lock too) or until `deadline`.
    pub(super) async fn for_wait(&self, deadline: Instant) -> Result<Lent<'_>, LockError> {
        let freed = self.freed.notified();
        let mut freed = std::pin::pin!(freed);
        freed.as_mut().enable();
        let idle = self.live().iter().find_map(|s| {
            let idle =
                s.holds.load(Ordering::SeqCst) == 0 && !s.waiting.swap(true, Ordering::SeqCst);
            idle.then(|| s.clone())
        });
        let session = match idle {
            Some(session) => session,
            None => match self.slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let session = self.open(slot).await?;
                    session.waiting.store(true, Ordering::SeqCst);
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

    /// Opens a session, leased, and keeps it busy until it ends.
    async fn open(&self, slot: OwnedSemaphorePermit) -> Result<Arc<Session>, LockError> {
        let (client, connection) = self
            .connect
            .config
            .connect(NoTls)
            .await
            .map_err(cannot_connect)?;
        let ended = CancellationToken::new();
        tokio::spawn(run(connection, ended.clone()));
        let lease = self.connect.lease.as_millis();
        client
            .batch_execute(&format!("SET idle_session_timeout = {lease}"))
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
            holds: AtomicUsize::new(0),
            waiting: AtomicBool::new(false),
            freed: self.freed.clone(),
            background: self.background.clone(),
            _slot: slot,
        });
        tokio::spawn(keep_busy(Arc::downgrade(&session), self.connect.lease / 3));
        self.live().push(session.clone());
        Ok(session)
    }
}

/// Drives the connection until it drops or the session is ended, then says it ended.
async fn run(
    connection: tokio_postgres::Connection<
        tokio_postgres::Socket,
        tokio_postgres::tls::NoTlsStream,
    >,
    ended: CancellationToken,
) {
    tokio::select! {
        _ = connection => {}
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
