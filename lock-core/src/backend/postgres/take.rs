//! Taking a lock on the server: one attempt on a shared session, or a wait inside the
//! server on a session of its own, each drawing the fencing token in the same statement
//! that takes the lock.

use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;

use super::key::AdvisoryKey;
use super::session::Session;
use crate::backend::sessions::Session as _;
use crate::{LockError, LockKind};

/// Whether a statement waits for the lock or makes one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Attempt {
    /// `pg_try_advisory_lock`: never waits.
    Once,
    /// `pg_advisory_lock`: waits in the server's queue, under `lock_timeout`.
    Wait,
}

/// One attempt on `session`, which other holds share: its fencing token if it took the
/// lock. A statement that fails may have taken the lock, so its session is ended.
pub(super) async fn once(
    session: &Session,
    table: &str,
    name: &str,
    key: AdvisoryKey,
    kind: LockKind,
) -> Result<Option<u64>, LockError> {
    let sql = take_sql(table, key, kind, Attempt::Once);
    match fence(session, &sql, name, key).await {
        Ok(fence) => Ok(fence),
        Err(e) => {
            session.state().end();
            Err(failed(name, "take it", e))
        }
    }
}

/// Waits inside the server on `session`, which holds nothing else, until `deadline`:
/// its fencing token if it took the lock, or `None` if it was still held then or the wait was `abandoned` (which
/// cancels the statement and retires the session).
pub(super) async fn wait(
    session: &Session,
    table: &str,
    name: &str,
    key: AdvisoryKey,
    kind: LockKind,
    deadline: Instant,
    abandoned: CancellationToken,
) -> Result<Option<u64>, LockError> {
    let left = deadline.saturating_duration_since(Instant::now());
    let timeout = format!("SET lock_timeout = {}", left.as_millis().max(1));
    let sql = take_sql(table, key, kind, Attempt::Wait);
    let waited = {
        let client = &session.client;
        let take = async {
            session.prepare(&sql).await?;
            let (_, fence, _) = tokio::join!(
                client.batch_execute(&timeout),
                fence(session, &sql, name, key),
                client.batch_execute("SET lock_timeout = 0"),
            );
            fence
        };
        let mut take = std::pin::pin!(take);
        tokio::select! {
            outcome = &mut take => Some(outcome),
            () = abandoned.cancelled() => {
                let _ = client.cancel_token().cancel_query(NoTls).await;
                let _ = take.await;
                None
            }
        }
    };
    let Some(outcome) = waited else {
        // A cancel can land after the statement it was sent for, on the next one: this
        // session serves nothing after it.
        retire(session).await;
        return Ok(None);
    };
    match outcome {
        Ok(fence) => Ok(fence),
        Err(e) => {
            // The session holds nothing else: whatever the statement took goes back.
            let unlocked = session
                .client
                .batch_execute("SELECT pg_advisory_unlock_all()")
                .await;
            if unlocked.is_err() {
                session.state().end();
            }
            let gave_up = [SqlState::LOCK_NOT_AVAILABLE, SqlState::QUERY_CANCELED];
            match e.code() {
                Some(code) if gave_up.contains(code) => Ok(None),
                _ => Err(failed(name, "wait for it", e)),
            }
        }
    }
}

/// Gives back whatever a waiting session took, then ends it. The one cancel sent may
/// land on the first try and fail it, never on the second.
async fn retire(session: &Session) {
    for _ in 0..2 {
        let unlocked = session
            .client
            .batch_execute("SELECT pg_advisory_unlock_all()")
            .await;
        if unlocked.is_ok() {
            break;
        }
    }
    session.state().end();
}

/// Gives back one hold of `key` on the session of `client`: whether it held one.
pub(super) async fn unlock(
    client: &Client,
    key: AdvisoryKey,
    kind: LockKind,
) -> Result<bool, tokio_postgres::Error> {
    let function = match kind {
        LockKind::Read => "pg_advisory_unlock_shared",
        _ => "pg_advisory_unlock",
    };
    let sql = format!("SELECT {function}({})", key_args(key, 1));
    let row = match key {
        AdvisoryKey::Bigint(k) => client.query_one(&sql, &[&k]).await?,
        AdvisoryKey::Pair(high, low) => client.query_one(&sql, &[&high, &low]).await?,
    };
    row.try_get(0)
}

/// Takes the lock and, if it was taken, draws the next fencing token of `name`: one
/// statement, one round trip.
async fn fence(
    session: &Session,
    sql: &str,
    name: &str,
    key: AdvisoryKey,
) -> Result<Option<u64>, tokio_postgres::Error> {
    let statement = session.prepare(sql).await?;
    let client = &session.client;
    let rows = match key {
        AdvisoryKey::Bigint(k) => {
            let params: [&(dyn ToSql + Sync); 2] = [&name, &k];
            client.query(&statement, &params).await?
        }
        AdvisoryKey::Pair(high, low) => client.query(&statement, &[&name, &high, &low]).await?,
    };
    match rows.first() {
        Some(row) => {
            let fence: i64 = row.try_get(0)?;
            Ok(Some(u64::try_from(fence).unwrap_or_default()))
        }
        None => Ok(None),
    }
}

/// The statement that takes the lock and draws its token from `table`, as `attempt`.
fn take_sql(table: &str, key: AdvisoryKey, kind: LockKind, attempt: Attempt) -> String {
    let function = match (kind, attempt) {
        (LockKind::Read, Attempt::Once) => "pg_try_advisory_lock_shared",
        (LockKind::Read, Attempt::Wait) => "pg_advisory_lock_shared",
        (_, Attempt::Once) => "pg_try_advisory_lock",
        (_, Attempt::Wait) => "pg_advisory_lock",
    };
    let call = format!("{function}({})", key_args(key, 2));
    let taken = match attempt {
        Attempt::Once => call,
        Attempt::Wait => format!("{call} IS NOT NULL"),
    };
    format!(
        "INSERT INTO {table} (name, fence) SELECT $1, 1 WHERE {taken} \
         ON CONFLICT (name) DO UPDATE SET fence = {table}.fence + 1 RETURNING fence"
    )
}

/// The key's parameters, numbered from `first`.
fn key_args(key: AdvisoryKey, first: usize) -> String {
    match key {
        AdvisoryKey::Bigint(_) => format!("${first}::int8"),
        AdvisoryKey::Pair(..) => format!("${first}::int4, ${}::int4", first + 1),
    }
}

/// The error of a statement about the lock `name` that failed while `doing`.
pub(super) fn failed(name: &str, doing: &str, error: tokio_postgres::Error) -> LockError {
    LockError::backend(format!("postgres lock {name:?}: cannot {doing}"), error)
}
