//! Taking a lock on the server: one attempt on a shared session, or a wait inside the
//! server on a session of its own, each drawing the fencing token in the statement that
//! takes the lock.

use std::sync::Arc;

use mysql_async::Params;
use mysql_async::prelude::Queryable;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::session::{Connect, Session};
use crate::LockError;
use crate::backend::sessions::Session as _;

/// A lock taken on `session`, with its fencing token. Dropped unclaimed (its acquire
/// was dropped), it gives the lock back in the background.
#[derive(Debug)]
pub(super) struct Taken(Option<(Arc<Session>, String, u64)>);

impl Taken {
    fn new(session: Arc<Session>, name: &str, fence: u64) -> Self {
        session.state().hold_taken();
        Self(Some((session, name.to_owned(), fence)))
    }

    /// The session the hold lives on, and its fencing token: the caller keeps the hold.
    pub(super) fn claim(mut self) -> Option<(Arc<Session>, u64)> {
        self.0.take().map(|(session, _, fence)| (session, fence))
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let Some((session, name, _)) = self.0.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let background = session.state().background.clone();
            background.spawn_on(
                async move {
                    if unlock(&session, &name).await.is_err() {
                        session.state().end();
                    }
                    session.state().hold_given_back();
                },
                &runtime,
            );
        } else {
            session.state().end();
        }
    }
}

/// One attempt on `session`, which other holds share: the lock `name`, or `None` if it is
/// held. A statement that fails may have taken the lock, so its session is ended.
pub(super) async fn once(
    session: Arc<Session>,
    table: &str,
    name: &str,
) -> Result<Option<Taken>, LockError> {
    let sql = take_sql(table, "GET_LOCK(?, 0)");
    match fence(&session, sql, (name, name).into()).await {
        Ok(fence) => Ok(fence.map(|f| Taken::new(session, name, f))),
        Err(e) => {
            session.state().end();
            Err(failed(name, "take it", e))
        }
    }
}

/// Waits inside the server (`GET_LOCK` with the time left) on `session`, which holds
/// nothing else, until `deadline`: the lock `name`, or `None` if it was still held then
/// or the wait was `abandoned`, which ends the session (`KILL`, from a connection of its
/// own) so that the server takes nothing for it.
pub(super) async fn wait(
    session: Arc<Session>,
    connect: &Connect,
    table: &str,
    name: &str,
    deadline: Instant,
    abandoned: CancellationToken,
) -> Result<Option<Taken>, LockError> {
    let left = deadline.saturating_duration_since(Instant::now());
    let seconds = left.as_secs_f64().max(0.001);
    let sql = take_sql(table, "GET_LOCK(?, ?)");
    let waited = tokio::select! {
        waited = fence(&session, sql, (name, name, seconds).into()) => waited,
        () = abandoned.cancelled() => {
            kill(connect, &session).await;
            return Ok(None);
        }
    };
    match waited {
        Ok(fence) => Ok(fence.map(|f| Taken::new(session, name, f))),
        Err(e) => {
            // The session holds nothing else: ending it gives back whatever it took.
            session.state().end();
            Err(failed(name, "wait for it", e))
        }
    }
}

/// Ends `session` on the server at once (`KILL`), whatever it is doing, and here. Returns
/// once its watch saw it end, which is once the server freed its locks: `KILL` itself
/// returns before that.
async fn kill(connect: &Connect, session: &Session) {
    let ended = session.state().ended();
    if let Ok(mut conn) = connect.once().await
        && conn
            .query_drop(format!("KILL {}", session.id))
            .await
            .is_ok()
    {
        let _ = tokio::time::timeout(connect.lease, ended.cancelled()).await;
    }
    session.state().end();
}

/// Gives back one hold of `name` on `session`: whether it held one.
pub(super) async fn unlock(session: &Session, name: &str) -> Result<bool, mysql_async::Error> {
    let name = name.to_owned();
    let released: Option<Option<i64>> = session
        .run(move |conn| Box::pin(conn.exec_first("SELECT RELEASE_LOCK(?)", (name,))))
        .await?;
    Ok(released == Some(Some(1)))
}

/// Runs `sql` (of [`take_sql`]) with `params` on `session`: the fencing token if it took
/// the lock, `None` if it did not.
async fn fence(
    session: &Session,
    sql: String,
    params: Params,
) -> Result<Option<u64>, mysql_async::Error> {
    session
        .run(move |conn| {
            Box::pin(async move {
                conn.exec_drop(sql, params).await?;
                Ok(match conn.affected_rows() {
                    0 => None,
                    _ => Some(conn.last_insert_id().unwrap_or_default()),
                })
            })
        })
        .await
}

/// The statement that takes the lock by `get_lock` and, if it took it, draws its
/// fencing token from `table`: one statement, one round trip. The token is the
/// statement's insert id (`LAST_INSERT_ID(expr)`); no row changes if it was not taken.
fn take_sql(table: &str, get_lock: &str) -> String {
    format!(
        "INSERT INTO {table} (name, token) SELECT ?, LAST_INSERT_ID(1) FROM DUAL \
         WHERE {get_lock} = 1 \
         ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID({table}.token + 1)"
    )
}

/// The error of a statement about the lock `name` that failed while `doing`.
pub(super) fn failed(name: &str, doing: &str, error: mysql_async::Error) -> LockError {
    LockError::backend(format!("mysql lock {name:?}: cannot {doing}"), error)
}

/// The error of an acquire whose task ended without an answer.
pub(super) fn failed_task(name: &str, error: tokio::sync::oneshot::error::RecvError) -> LockError {
    LockError::backend(
        format!("mysql lock {name:?}: the acquire ended early"),
        error,
    )
}
