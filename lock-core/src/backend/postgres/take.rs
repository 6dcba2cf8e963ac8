//! Taking a lock on the server: one attempt on a shared session, or a wait inside the
//! server on a session of its own, each drawing the fencing token in the same statement
//! that takes the lock.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;

use super::key::AdvisoryKey;
use super::session::Session;
use crate::{LockError, LockKind};

/// Whether a statement waits for the lock or makes one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Attempt {
    /// `pg_try_advisory_lock`: never waits.
    Once,
    /// `pg_advisory_lock`: waits in the server's queue, under `lock_timeout`.
    Wait,
}

/// A lock taken on `session`, with its fencing token. Dropped unclaimed (its acquire
/// was dropped), it gives the lock back in the background.
#[derive(Debug)]
pub(super) struct Taken(Option<(Arc<Session>, AdvisoryKey, LockKind, u64)>);

impl Taken {
    fn new(session: Arc<Session>, key: AdvisoryKey, kind: LockKind, fence: u64) -> Self {
        session.hold_taken();
        Self(Some((session, key, kind, fence)))
    }

    /// The session the hold lives on, and its fencing token: the caller keeps the hold.
    pub(super) fn claim(mut self) -> Option<(Arc<Session>, u64)> {
        self.0.take().map(|(session, _, _, fence)| (session, fence))
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let Some((session, key, kind, _)) = self.0.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let background = session.background.clone();
            background.spawn_on(
                async move {
                    if unlock(&session.client, key, kind).await.is_err() {
                        session.end();
                    }
                    session.hold_given_back();
                },
                &runtime,
            );
        } else {
            session.end();
        }
    }
}

/// One attempt on `session`, which other holds share: the lock, or `None` if it is held.
/// A statement that fails may have taken the lock, so its session is ended.
pub(super) async fn once(
    session: &Arc<Session>,
    table: &str,
    name: &str,
    key: AdvisoryKey,
    kind: LockKind,
) -> Result<Option<Taken>, LockError> {
    let sql = take_sql(table, key, kind, Attempt::Once);
    match fence(session, &sql, name, key).await {
        Ok(fence) => Ok(fence.map(|f| Taken::new(session.clone(), key, kind, f))),
        Err(e) => {
            session.end();
            Err(failed(name, "take it", e))
        }
    }
}

/// Waits inside the server on `session`, which holds nothing else, until `deadline`:
/// the lock, or `None` if it was still held then or the wait was `abandoned` (which
/// cancels the statement and retires the session).
pub(super) async fn wait(
    session: Arc<Session>,
    table: &str,
    name: &str,
    key: AdvisoryKey,
    kind: LockKind,
    deadline: Instant,
    abandoned: CancellationToken,
) -> Result<Option<Taken>, LockError> {
    let left = deadline.saturating_duration_since(Instant::now());
    let timeout = format!("SET lock_timeout = {}", left.as_millis().max(1));
    let sql = take_sql(table, key, kind, Attempt::Wait);
    let waited = {
        let client = &session.client;
        let take = async {
            session.prepare(&sql).await?;
            let (_, fence, _) = tokio::join!(
                client.batch_execute(&timeout),
                fence(&session, &sql, name, key),
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
        retire(&session).await;
        return Ok(None);
    };
    match outcome {
        Ok(Some(fence)) => Ok(Some(Taken::new(session, key, kind, fence))),
        Ok(None) => Ok(None),
        Err(e) => {
            // The session holds nothing else: whatever the statement took goes back.
            let unlocked = session
                .client
                .batch_execute("SELECT pg_advisory_unlock_all()")
                .await;
            if unlocked.is_err() {
                session.end();
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
    session.end();
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

/// The error of an acquire whose task ended without an answer.
pub(super) fn failed_task(name: &str, error: tokio::sync::oneshot::error::RecvError) -> LockError {
    LockError::backend(
        format!("postgres lock {name:?}: the acquire ended early"),
        error,
    )
}
