//! The store's sessions. A session is two connections: its own, which holds locks and
//! which the server ends once it is idle for a lease (`wait_timeout`), kept alive while
//! the process runs ([`crate::backend::sql::sessions`]); and its watch, which waits inside the server (`GET_LOCK`) for a
//! marker lock that the session holds, and so learns at once that the session ended,
//! however it ended. The bound and the lending are [`crate::backend::sql::sessions`]'.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, DriverError, Opts, OptsBuilder};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::sql;
use crate::LockError;
use crate::backend::sql::sessions::{self, Connector, SessionState};

/// How to open a session.
#[derive(Debug, Clone)]
pub(crate) struct Connect {
    pub(super) opts: Opts,
    /// The server ends a session idle for this long.
    pub(super) lease: Duration,
}

/// A session: its own connection (gone once the session ended), and its id on the server.
#[derive(Debug)]
pub(crate) struct Session {
    conn: Mutex<Option<Conn>>,
    pub(super) id: u32,
    state: SessionState<String>,
}

impl sessions::Session for Session {
    type StoreKey = String;

    fn state(&self) -> &SessionState<String> {
        &self.state
    }

    /// Whether no statement is in flight on it now.
    fn is_idle(&self) -> bool {
        self.conn.try_lock().is_ok()
    }

    async fn ping(&self) -> Result<(), LockError> {
        self.run(|conn| Box::pin(conn.ping()))
            .await
            .map_err(|e| LockError::backend("mysql: a session did not answer", e))
    }
}

impl Session {
    /// Runs `work` on the connection, one at a time: the connection is not shared by
    /// statements in flight. Once the session ended, `work` does not run, and a statement
    /// in flight when it ends is cut off with its connection. Each answer confirms the
    /// session.
    pub(super) async fn run<T: Send>(
        &self,
        work: impl for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, Result<T, mysql_async::Error>>,
    ) -> Result<T, mysql_async::Error> {
        let ended = self.state.ended();
        let mut conn = self.conn.lock().await;
        let Some(live) = conn.as_mut().filter(|_| !ended.is_cancelled()) else {
            return Err(closed());
        };
        let sent = Instant::now();
        let done = tokio::select! {
            done = work(live) => done,
            () = ended.cancelled() => Err(closed()),
        };
        if ended.is_cancelled() {
            conn.take();
        } else if done.is_ok() {
            self.state.answered(sent);
        }
        done
    }
}

impl Connect {
    /// A connection of its own, for an operator's statement.
    pub(super) async fn once(&self) -> Result<Conn, LockError> {
        Conn::new(self.opts.clone()).await.map_err(cannot_connect)
    }
}

impl Connector for Connect {
    type Session = Session;

    fn lease(&self) -> Duration {
        self.lease
    }

    /// Opens a session, leased, with its marker lock and its watch.
    async fn open(&self, state: SessionState<String>) -> Result<Arc<Session>, LockError> {
        let lease = self.lease.as_secs();
        let mut init = self.opts.init().to_vec();
        init.push(sql::set_wait_timeout(lease));
        let leased = OptsBuilder::from_opts(self.opts.clone())
            .init(init)
            .wait_timeout(Some(lease as usize));
        let mut conn = Conn::new(leased.clone()).await.map_err(cannot_connect)?;
        let watch = Conn::new(leased).await.map_err(cannot_connect)?;
        let marker = format!("lock_core_session_{}", uuid::Uuid::new_v4().simple());
        let marked: Option<Option<i64>> = conn
            .exec_first(sql::GET_LOCK_NOW, (&marker,))
            .await
            .map_err(|e| LockError::backend("mysql: cannot take a session's marker lock", e))?;
        if marked != Some(Some(1)) {
            return Err(LockError::Config(format!(
                "mysql: the session's marker lock {marker} is taken; the server is MySQL \
                 5.7 or MariaDB 10.0.2 or later?"
            )));
        }
        let ended = state.ended();
        let session = Arc::new(Session {
            id: conn.id(),
            conn: Mutex::new(Some(conn)),
            state,
        });
        tokio::spawn(watch_over(watch, marker, lease, ended.clone()));
        tokio::spawn(close_when_ended(Arc::downgrade(&session), ended));
        Ok(session)
    }
}

/// Waits inside the server for the session's `marker`, which it gets once the session
/// ends (`KILL`, its connection dropped, its lease out), then says the session ended. Its
/// own connection failing (a server restart) ends the session too.
async fn watch_over(mut watch: Conn, marker: String, lease: u64, ended: CancellationToken) {
    loop {
        let got: Result<Option<Option<i64>>, _> = tokio::select! {
            got = watch.exec_first(sql::GET_LOCK, (&marker, lease)) => got,
            () = ended.cancelled() => break,
        };
        match got {
            Ok(Some(Some(0))) => continue,
            _ => break,
        }
    }
    ended.cancel();
}

/// Drops the session's connection once it ended, which frees its locks.
async fn close_when_ended(session: Weak<Session>, ended: CancellationToken) {
    ended.cancelled().await;
    if let Some(session) = session.upgrade() {
        session.conn.lock().await.take();
    }
}

/// The error of a statement on a session that ended.
pub(super) fn closed() -> mysql_async::Error {
    DriverError::ConnectionClosed.into()
}

fn cannot_connect(error: mysql_async::Error) -> LockError {
    LockError::backend("mysql: cannot connect", error)
}
