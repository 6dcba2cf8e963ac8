//! The store's sessions: connections the server ends once idle for a lease
//! (`idle_session_timeout`), each listening for permits given back, and each reporting
//! its end at once. The bound, the lending and the keeping alive are
//! [`crate::backend::sql::sessions`]'.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{AsyncMessage, Client, Config, Socket, Statement};
use tokio_util::sync::CancellationToken;

use super::connector::Tls;
use super::key::AdvisoryKey;
use super::sql;
use crate::LockError;
use crate::backend::sql::sessions::{self, Connector, SessionState};

/// How to open a session.
#[derive(Debug, Clone)]
pub(crate) struct Connect {
    pub(super) config: Config,
    /// Opens TLS as the url's `sslmode` says.
    pub(super) tls: Tls,
    /// The server ends a session idle for this long.
    pub(super) lease: Duration,
    /// Woken when a permit is announced given back, by any store (every session listens).
    pub(super) released: Arc<Notify>,
}

/// One connection and the session on it.
#[derive(Debug)]
pub(crate) struct Session {
    pub(super) client: Client,
    /// The statements prepared on it, by their text.
    prepared: Mutex<HashMap<String, Statement>>,
    /// The store's signal that a permit was announced given back.
    pub(super) released: Arc<Notify>,
    state: SessionState<AdvisoryKey>,
}

impl sessions::Session for Session {
    type StoreKey = AdvisoryKey;

    fn state(&self) -> &SessionState<AdvisoryKey> {
        &self.state
    }

    async fn ping(&self) -> Result<(), LockError> {
        self.client
            .batch_execute(sql::PING)
            .await
            .map_err(|e| LockError::backend("postgres: a session did not answer", e))
    }
}

impl Session {
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
}

/// A connection to the server, as tokio-postgres drives it.
type Connection = tokio_postgres::Connection<Socket, <Tls as MakeTlsConnect<Socket>>::Stream>;

impl Connect {
    /// Connects, opening TLS as the url's settings say.
    async fn connect(&self) -> Result<(Client, Connection), LockError> {
        #[cfg_attr(
            not(feature = "tls"),
            expect(clippy::clone_on_copy, reason = "only NoTls is Copy")
        )]
        let tls = self.tls.clone();
        self.config.connect(tls).await.map_err(cannot_connect)
    }

    /// A connection of its own that runs `listen` (a `LISTEN`), and sends the payload of
    /// each notification it gets to the receiver, which ends when the connection does. It
    /// lasts as long as the client returned.
    pub(super) async fn listening(
        &self,
        listen: &str,
    ) -> Result<(Client, mpsc::UnboundedReceiver<String>), LockError> {
        let (client, mut connection) = self.connect().await?;
        let (heard, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(message)) =
                std::future::poll_fn(|cx| connection.poll_message(cx)).await
            {
                if let AsyncMessage::Notification(told) = message {
                    let _ = heard.send(told.payload().to_owned());
                }
            }
        });
        client
            .batch_execute(listen)
            .await
            .map_err(|e| LockError::backend("postgres: cannot listen", e))?;
        Ok((client, rx))
    }

    /// A connection of its own, for an operator's statement.
    pub(super) async fn once(&self) -> Result<Client, LockError> {
        let (client, connection) = self.connect().await?;
        tokio::spawn(connection);
        Ok(client)
    }
}

impl Connector for Connect {
    type Session = Session;

    fn lease(&self) -> Duration {
        self.lease
    }

    /// Opens a session, leased and listening for permits given back.
    async fn open(&self, state: SessionState<AdvisoryKey>) -> Result<Arc<Session>, LockError> {
        let (client, connection) = self.connect().await?;
        tokio::spawn(run(connection, state.ended(), self.released.clone()));
        let lease = self.lease.as_millis();
        client
            .batch_execute(&sql::open_session(lease))
            .await
            .map_err(|e| {
                LockError::backend(
                    "postgres: cannot set idle_session_timeout (PostgreSQL 14 or later is needed)",
                    e,
                )
            })?;
        Ok(Arc::new(Session {
            client,
            prepared: Mutex::default(),
            released: self.released.clone(),
            state,
        }))
    }
}

/// Drives the connection until it drops or the session is ended, then says it ended;
/// wakes `released` on each notification.
async fn run(mut connection: Connection, ended: CancellationToken, released: Arc<Notify>) {
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

fn cannot_connect(error: tokio_postgres::Error) -> LockError {
    LockError::backend("postgres: cannot connect", error)
}
