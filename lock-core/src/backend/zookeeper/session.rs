//! The session the holds live on: opened on first use, watched for its loss (its end,
//! or no word from the server for its timeout: see [`heartbeat`](super::heartbeat)), and
//! opened again by the next acquisition once it is lost.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::ZooKeeperStore;
use super::heartbeat::{self, Heard};
use crate::LockError;

/// How to open a session: where the ensemble is, for how long a session outlives its
/// connection, and as whom.
#[derive(Clone)]
pub(super) struct Connect {
    pub(super) connect_string: String,
    pub(super) session_timeout: Duration,
    /// `(user, password)` for ZooKeeper's `digest` scheme.
    pub(super) digest: Option<(String, String)>,
}

/// Never shows the password.
impl fmt::Debug for Connect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connect")
            .field("connect_string", &self.connect_string)
            .field("session_timeout", &self.session_timeout)
            .field("user", &self.digest.as_ref().map(|(user, _)| user))
            .finish()
    }
}

/// How many times in a row a call is sent again after the connection broke under it.
/// Each time waits for a reconnect first, so only a connection that breaks again and
/// again uses them up.
pub(super) const RETRIES: u32 = 8;

/// Whether `error` says that the connection broke under a call (lost, reset, silent
/// past its timeout), rather than what the server answered: the call may or may not
/// have been applied, and the session may live on.
pub(super) fn cut_short(error: &zk::Error) -> bool {
    matches!(
        error,
        zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Custom(_)
    )
}

/// The store's current session, if one is open.
#[derive(Debug)]
pub(super) struct Sessions {
    connect: Connect,
    current: Arc<Current>,
}

/// The live session, if one is open.
type Current = tokio::sync::Mutex<Option<Session>>;

impl Sessions {
    pub(super) fn new(connect: Connect) -> Self {
        Self {
            connect,
            current: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    pub(super) fn connect_string(&self) -> &str {
        &self.connect.connect_string
    }

    /// How long a session outlives its connection, as asked of the server.
    pub(super) fn timeout(&self) -> Duration {
        self.connect.session_timeout
    }

    /// The live session, opening a new one if there is none or the last was lost.
    pub(super) async fn current(&self) -> Result<Session, LockError> {
        let mut current = self.current.lock().await;
        if let Some(session) = current.as_ref().filter(|s| s.is_live()) {
            return Ok(session.clone());
        }
        let session = Session::open(&self.connect).await?;
        *current = Some(session.clone());
        tokio::spawn(forget_once_ended(
            Arc::downgrade(&self.current),
            session.ended.clone(),
        ));
        Ok(session)
    }

    /// Ends the live session: its holds are lost at once, and the session is closed
    /// (the server deletes its nodes) as soon as the waits on it have returned.
    async fn end(&self) {
        if let Some(session) = self.current.lock().await.take() {
            session.ended.cancel();
        }
    }
}

/// One ZooKeeper session. It is closed once the store and every call under way are done
/// with it: holds keep only a [`WeakSession`].
#[derive(Debug, Clone)]
pub(super) struct Session {
    pub(super) client: Arc<zk::Client>,
    /// Cancelled once the session is lost: expired, closed, or not heard from for its
    /// timeout.
    pub(super) ended: CancellationToken,
    /// When the server last answered for it.
    pub(super) heard: Heard,
}

impl Session {
    /// Connects, and watches the new session until it is lost.
    async fn open(connect: &Connect) -> Result<Self, LockError> {
        let since = Instant::now();
        let mut connector = zk::Client::connector()
            .with_session_timeout(connect.session_timeout)
            .with_connection_timeout(connect.session_timeout);
        if let Some((user, password)) = &connect.digest {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let client = connector
            .connect(&connect.connect_string)
            .await
            .map_err(|e| unreachable(connect, e))?;
        ensure_chroot(&client)
            .await
            .map_err(|e| unreachable(connect, e))?;
        let ended = CancellationToken::new();
        tokio::spawn(watch(client.state_watcher(), ended.clone()));
        let client = Arc::new(client);
        let heard = heartbeat::start(&client, since, ended.clone());
        Ok(Self {
            client,
            ended,
            heard,
        })
    }

    /// A handle on this session that does not keep it open.
    pub(super) fn downgrade(&self) -> WeakSession {
        WeakSession {
            client: Arc::downgrade(&self.client),
            ended: self.ended.clone(),
            heard: self.heard.clone(),
        }
    }

    /// Whether the session still holds its nodes, by what is known here: not ended, and
    /// heard from within its timeout.
    pub(super) fn is_live(&self) -> bool {
        !self.ended.is_cancelled() && !self.client.state().is_terminated() && self.heard.is_fresh()
    }

    /// Whether the connection is down for now (the session may still live).
    pub(super) fn is_disconnected(&self) -> bool {
        self.client.state() == zk::SessionState::Disconnected
    }

    /// Runs `op`, and again each time the connection broke under it, once it is back
    /// (up to [`RETRIES`] times in a row); [`zk::Error::SessionExpired`] once the session
    /// is lost.
    pub(super) async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T, zk::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, zk::Error>>,
    {
        let mut retries = 0;
        loop {
            match op().await {
                Err(e) if cut_short(&e) && retries < RETRIES => {
                    retries += 1;
                    self.reconnected().await?;
                }
                result => return result,
            }
        }
    }

    /// A future that resolves when the connection next comes back (or the session ends):
    /// made before a read, it tells that a watch set by that read may have missed an
    /// event while the connection was down.
    pub(super) fn next_connect(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut states = self.client.state_watcher();
        async move {
            loop {
                let state = states.changed().await;
                if is_connected(state) || state.is_terminated() {
                    return;
                }
            }
        }
    }

    /// Returns once the connection is up, or fails once the session is lost.
    pub(super) async fn reconnected(&self) -> Result<(), zk::Error> {
        let mut states = self.client.state_watcher();
        loop {
            match states.state() {
                state if is_connected(state) => return Ok(()),
                state if state.is_terminated() => return Err(zk::Error::SessionExpired),
                _ => {}
            }
            tokio::select! {
                _ = states.changed() => {}
                () = self.ended.cancelled() => return Err(zk::Error::SessionExpired),
            }
        }
    }
}

/// Whether the client is connected in `state`.
fn is_connected(state: zk::SessionState) -> bool {
    matches!(
        state,
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
    )
}

/// A session as a hold keeps it: without keeping it open.
#[derive(Debug, Clone)]
pub(super) struct WeakSession {
    client: Weak<zk::Client>,
    ended: CancellationToken,
    heard: Heard,
}

impl WeakSession {
    /// The session, if it is [live](Session::is_live).
    pub(super) fn upgrade(&self) -> Option<Session> {
        let session = Session {
            client: self.client.upgrade()?,
            ended: self.ended.clone(),
            heard: self.heard.clone(),
        };
        session.is_live().then_some(session)
    }

    /// Resolves when the node at `path` is gone: deleted (by anyone), or with the
    /// session.
    pub(super) async fn gone(&self, path: &str) {
        tokio::select! {
            () = self.ended.cancelled() => {}
            () = self.deleted(path) => {}
        }
    }

    /// Resolves when the node at `path` is deleted, or the session is gone. It looks
    /// again each time the connection comes back, lest its watch missed the deletion.
    async fn deleted(&self, path: &str) {
        loop {
            let Some(session) = self.upgrade() else {
                return;
            };
            let reconnect = session.next_connect();
            let watched = session
                .retry(|| session.client.check_and_watch_stat(path))
                .await;
            drop(session);
            match watched {
                Ok((Some(_), watcher)) => tokio::select! {
                    event = watcher.changed() => {
                        if event.event_type == zk::EventType::NodeDeleted
                            || event.session_state.is_terminated()
                        {
                            return;
                        }
                    }
                    () = reconnect => {}
                },
                Ok((None, _)) | Err(_) => return,
            }
        }
    }
}

/// Drops the store's handle on the session of `ended` once it ends, so that the session
/// is closed (and the server deletes its nodes) as soon as the calls under way on it are
/// done with it, rather than kept open by the client until the store's next call.
async fn forget_once_ended(current: Weak<Current>, ended: CancellationToken) {
    ended.cancelled().await;
    let Some(current) = current.upgrade() else {
        return;
    };
    let mut current = current.lock().await;
    if current.as_ref().is_some_and(|s| s.ended.is_cancelled()) {
        *current = None;
    }
}

/// Cancels `ended` once the session reaches a state it never leaves.
async fn watch(mut states: zk::StateWatcher, ended: CancellationToken) {
    loop {
        let state = states.state();
        if state.is_terminated() {
            tracing::warn!(%state, "zookeeper session lost");
            ended.cancel();
            return;
        }
        tokio::select! {
            _ = states.changed() => {}
            () = ended.cancelled() => return,
        }
    }
}

/// Creates the connect string's chroot if it is missing, as Curator creates its
/// namespace: a persistent node (with its parents), open to every client.
async fn ensure_chroot(client: &zk::Client) -> Result<(), zk::Error> {
    let chroot = client.path();
    if chroot == "/" {
        return Ok(());
    }
    let Ok(root) = client.clone().chroot("/") else {
        return Ok(());
    };
    if root.check_stat(chroot).await?.is_none() {
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        root.mkdir(chroot, &persistent).await?;
    }
    Ok(())
}

/// The error of a session that could not be opened.
fn unreachable(connect: &Connect, error: zk::Error) -> LockError {
    LockError::backend(
        format!(
            "cannot open a zookeeper session at {}",
            connect.connect_string
        ),
        error,
    )
}

impl ZooKeeperStore {
    /// Ends this store's session now, as its expiry would: every hold on it reports
    /// [`lost`](crate::LockGuard::lost) at once, and the session is closed as soon as the
    /// calls under way on it have returned, so the server deletes its nodes then rather
    /// than a session timeout later. The next acquisition opens a new session.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// use std::sync::Arc;
    /// use lock_core::Locker;
    /// use lock_core::backend::ZooKeeperStore;
    ///
    /// let store = Arc::new(ZooKeeperStore::builder("127.0.0.1:2181").build().await?);
    /// let locker = Locker::builder().store(store.clone()).build().await?;
    /// let guard = locker.lock("job:1").await?;
    /// store.end_session().await;
    /// guard.lost().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn end_session(&self) {
        self.0.sessions.end().await;
    }
}
