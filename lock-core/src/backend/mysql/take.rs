//! Taking a lock on the server: one attempt on a shared session, or a wait inside the
//! server on a session of its own, each drawing the fencing token, and recording the
//! holder id beside it, in the statement that takes the lock.

use mysql_async::Params;
use mysql_async::prelude::Queryable;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::session::{Connect, Session};
use super::{failed, semaphore, sql};
use crate::backend::sql::session_locks;
use crate::backend::sql::sessions::Session as _;
use crate::backend::store::Acquire;
use crate::{LockError, LockKey};

/// One attempt on `session`, which other holds share, on the lock of `request` by its
/// `store_key`: its fencing token if it took it. Taken while permits of the lock are
/// held, the lock is kept until they are given back, the request's deadline or
/// `abandoned` ([`drain_permits`]). A statement that fails may have taken the lock, so
/// its session is ended.
pub(super) async fn once(
    session: &Session,
    table: &str,
    request: &Acquire,
    store_key: &str,
    permits_released: &Notify,
    abandoned: &CancellationToken,
) -> Result<Option<u64>, LockError> {
    let deadline = request.deadline;
    let statement = sql::take_now(table);
    let holder_id = request.holder_id.as_deref();
    let params = (store_key, holder_id, store_key, holder_id).into();
    let took = match fence(session, statement, params).await {
        Ok(Took::Fenced(fence)) => Ok(Some(fence)),
        Ok(Took::Nothing) => Ok(None),
        Ok(Took::OnASemaphore) => {
            drain_permits(
                session,
                table,
                store_key,
                deadline,
                permits_released,
                abandoned,
            )
            .await
        }
        Err(e) => Err(e),
    };
    took.map_err(|e| {
        session.state().end();
        failed(&request.key, "take it", e)
    })
}

/// Waits inside the server (`GET_LOCK` with the time left) on `session`, which holds
/// nothing else, until the deadline of `request`: the fencing token if it took its lock
/// by its `store_key`, or `None` if it was still held then or the wait was `abandoned`,
/// which ends the session (`KILL`, from a connection of its own) so that the server
/// takes nothing for it. Taken while permits of the lock are held, the lock is kept
/// until they are given back ([`drain_permits`]).
pub(super) async fn wait(
    session: &Session,
    connect: &Connect,
    table: &str,
    request: &Acquire,
    store_key: &str,
    permits_released: &Notify,
    abandoned: CancellationToken,
) -> Result<Option<u64>, LockError> {
    let deadline = request.deadline;
    let left = deadline.saturating_duration_since(Instant::now());
    let seconds = left.as_secs_f64().max(0.001);
    let statement = sql::take_waiting(table);
    let holder_id = request.holder_id.as_deref();
    let params = (store_key, holder_id, store_key, seconds, holder_id).into();
    let waited = tokio::select! {
        waited = fence(session, statement, params) => waited,
        () = abandoned.cancelled() => {
            kill(connect, session).await;
            return Ok(None);
        }
    };
    let took = match waited {
        Ok(Took::Fenced(fence)) => Ok(Some(fence)),
        Ok(Took::Nothing) => Ok(None),
        Ok(Took::OnASemaphore) => {
            drain_permits(
                session,
                table,
                store_key,
                deadline,
                permits_released,
                &abandoned,
            )
            .await
        }
        Err(e) => Err(e),
    };
    took.map_err(|e| {
        // The session holds nothing else: ending it gives back whatever it took.
        session.state().end();
        failed(&request.key, "wait for it", e)
    })
}

/// Holds `store_key`, taken on `session` while permits of its lock are held, until they
/// are given back: a permit sees the lock held and keeps out, so the holders drain, as
/// readers do before a waiting writer. The fencing token then; `None`, the lock given
/// back, if permits are still held at `deadline` or the wait is `abandoned`. It looks
/// again each time this store gives a permit back, or after
/// [`POLL`](session_locks::POLL).
pub(super) async fn drain_permits(
    session: &Session,
    table: &str,
    store_key: &str,
    deadline: Instant,
    permits_released: &Notify,
    abandoned: &CancellationToken,
) -> Result<Option<u64>, mysql_async::Error> {
    loop {
        let released = permits_released.notified();
        let mut released = std::pin::pin!(released);
        released.as_mut().enable();
        if let Some(fence) = semaphore::fence_unless_permits(session, table, store_key).await? {
            return Ok(Some(fence));
        }
        if !session_locks::retry(released, deadline, abandoned).await {
            give_back(session, store_key).await?;
            return Ok(None);
        }
    }
}

/// Gives back the store key `store_key` that `session` holds.
async fn give_back(session: &Session, store_key: &str) -> Result<(), mysql_async::Error> {
    let owned = store_key.to_owned();
    session
        .run(move |conn| Box::pin(conn.exec_drop(sql::DO_RELEASE_LOCK, (owned,))))
        .await
}

/// Ends `session` on the server at once (`KILL`), whatever it is doing, and here. Returns
/// once its watch saw it end, which is once the server freed its locks: `KILL` itself
/// returns before that.
async fn kill(connect: &Connect, session: &Session) {
    let ended = session.state().ended();
    if let Ok(mut conn) = connect.once().await
        && conn.query_drop(sql::kill(session.id.into())).await.is_ok()
    {
        let _ = tokio::time::timeout(connect.lease, ended.cancelled()).await;
    }
    session.state().end();
}

/// Gives back one hold of `store_key` (the lock `key`, or a slot of its permits) on
/// `session`: whether it held one.
pub(super) async fn unlock(
    session: &Session,
    key: &LockKey,
    store_key: &str,
) -> Result<bool, LockError> {
    let owned = store_key.to_owned();
    let released: Option<Option<i64>> = session
        .run(move |conn| Box::pin(conn.exec_first(sql::RELEASE_LOCK, (owned,))))
        .await
        .map_err(|e| failed(key, "release it", e))?;
    Ok(released == Some(Some(1)))
}

/// What a statement of [`sql::take_now`] or [`sql::take_waiting`] did.
enum Took {
    /// It did not take the lock.
    Nothing,
    /// It took the lock, with this fencing token.
    Fenced(u64),
    /// It took a lock that has been a semaphore, and drew no token: a permit of it may be
    /// held.
    OnASemaphore,
}

/// Runs `statement` (of [`sql::take_now`] or [`sql::take_waiting`]) with `params` on
/// `session`.
async fn fence(
    session: &Session,
    statement: String,
    params: Params,
) -> Result<Took, mysql_async::Error> {
    session
        .run(move |conn| {
            Box::pin(async move {
                conn.exec_drop(statement, params).await?;
                Ok(match (conn.affected_rows(), conn.last_insert_id()) {
                    (0, _) => Took::Nothing,
                    (_, None | Some(0)) => Took::OnASemaphore,
                    (_, Some(fence)) => Took::Fenced(fence),
                })
            })
        })
        .await
}
