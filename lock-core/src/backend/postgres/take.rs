//! Taking a lock on the server: one attempt on a shared session, or a wait inside the
//! server on a session of its own, each drawing the fencing token in the same statement
//! that takes the lock, and giving the lock back at once, in that statement, if a permit
//! of the lock is held (see the [module docs](super) for why that keeps the kinds apart).

use tokio::time::Instant;
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_util::sync::CancellationToken;

use super::failed;
use super::key::AdvisoryKey;
use super::semaphore::Slots;
use super::session::Session;
use super::sql::{self, Attempt, KeyShape};
use crate::backend::sql::session_locks;
use crate::backend::sql::sessions::Session as _;
use crate::backend::store::Acquire;
use crate::{LockError, LockKind};

/// One attempt on `session`, which other holds share, to take `store_key` as `request` asks:
/// its fencing token, or `None` if it is held. A statement that fails may have taken the
/// lock, so its session is ended.
pub(super) async fn once(
    session: &Session,
    table: &str,
    request: &Acquire,
    store_key: AdvisoryKey,
) -> Result<Option<u64>, LockError> {
    let sql = sql::take(table, shape(store_key), request.kind, Attempt::Once);
    match fence(session, &sql, request, store_key).await {
        Ok(fence) => Ok(fence),
        Err(e) => {
            session.state().end();
            Err(failed(&request.key, "take it", e))
        }
    }
}

/// Waits inside the server on `session`, which holds nothing else, until the request's
/// deadline: its fencing token, or `None` if it was still held then or the wait was `abandoned`
/// (which cancels the statement and retires the session). Each time the lock is granted
/// while a permit of the lock is held, it is given back and waited for again once a
/// permit is announced given back, or after [`POLL`](session_locks::POLL).
pub(super) async fn wait(
    session: &Session,
    table: &str,
    request: &Acquire,
    store_key: AdvisoryKey,
    abandoned: CancellationToken,
) -> Result<Option<u64>, LockError> {
    let sql = sql::take(table, shape(store_key), request.kind, Attempt::Wait);
    let announced = session.released.clone();
    loop {
        let released = announced.notified();
        let mut released = std::pin::pin!(released);
        released.as_mut().enable();
        match wait_once(session, &sql, request, store_key, &abandoned).await? {
            Waited::Taken(fence) => return Ok(Some(fence)),
            Waited::Nothing => return Ok(None),
            Waited::GaveWay => {}
        }
        if !session_locks::retry(released, request.deadline, &abandoned).await {
            return Ok(None);
        }
    }
}

/// What one wait inside the server came to.
enum Waited {
    /// The lock, with its fencing token.
    Taken(u64),
    /// The lock was granted while a permit of the lock was held, and given back.
    GaveWay,
    /// Still held at the deadline, or abandoned.
    Nothing,
}

async fn wait_once(
    session: &Session,
    sql: &str,
    request: &Acquire,
    store_key: AdvisoryKey,
    abandoned: &CancellationToken,
) -> Result<Waited, LockError> {
    let left = request.deadline.saturating_duration_since(Instant::now());
    let timeout = sql::lock_timeout(left.as_millis().max(1));
    let waited = {
        let client = &session.client;
        let take = async {
            session.prepare(sql).await?;
            let (_, fence, _) = tokio::join!(
                client.batch_execute(&timeout),
                fence(session, sql, request, store_key),
                client.batch_execute(sql::NO_LOCK_TIMEOUT),
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
        return Ok(Waited::Nothing);
    };
    match outcome {
        Ok(Some(fence)) => Ok(Waited::Taken(fence)),
        Ok(None) => Ok(Waited::GaveWay),
        Err(e) => {
            // The session holds nothing else: whatever the statement took goes back.
            let unlocked = session.client.batch_execute(sql::UNLOCK_ALL).await;
            if unlocked.is_err() {
                session.state().end();
            }
            let gave_up = [SqlState::LOCK_NOT_AVAILABLE, SqlState::QUERY_CANCELED];
            match e.code() {
                Some(code) if gave_up.contains(code) => Ok(Waited::Nothing),
                _ => Err(failed(&request.key, "wait for it", e)),
            }
        }
    }
}

/// Gives back whatever a waiting session took, then ends it. The one cancel sent may
/// land on the first try and fail it, never on the second.
async fn retire(session: &Session) {
    for _ in 0..2 {
        let unlocked = session.client.batch_execute(sql::UNLOCK_ALL).await;
        if unlocked.is_ok() {
            break;
        }
    }
    session.state().end();
}

/// Gives back one hold of `store_key` on `session`: whether it held one. A permit given
/// back is announced, for the waiters of every store.
pub(super) async fn unlock(
    session: &Session,
    store_key: AdvisoryKey,
    kind: LockKind,
) -> Result<bool, tokio_postgres::Error> {
    let sql = sql::unlock(shape(store_key), kind);
    let statement = session.prepare(&sql).await?;
    let client = &session.client;
    let row = match store_key {
        AdvisoryKey::Bigint(k) => client.query_one(&statement, &[&k]).await?,
        AdvisoryKey::Pair(high, low) => client.query_one(&statement, &[&high, &low]).await?,
    };
    row.try_get(0)
}

/// Takes the lock and, if it was taken and no permit of the lock is held, draws the next
/// fencing token of its key and records the hold's holder id beside it: one statement
/// ([`sql::take`]), one round trip.
async fn fence(
    session: &Session,
    sql: &str,
    request: &Acquire,
    store_key: AdvisoryKey,
) -> Result<Option<u64>, tokio_postgres::Error> {
    let statement = session.prepare(sql).await?;
    let client = &session.client;
    let key = request.key.as_str();
    let token: &str = &request.token;
    let holder_id = request.holder_id.as_deref();
    let slots = Slots::of(key).classid();
    let sent = Instant::now();
    let rows = match store_key {
        AdvisoryKey::Bigint(k) => {
            let params: [&(dyn ToSql + Sync); 5] = [&key, &token, &holder_id, &slots, &k];
            client.query(&statement, &params).await?
        }
        AdvisoryKey::Pair(high, low) => {
            let params: [&(dyn ToSql + Sync); 6] = [&key, &token, &holder_id, &slots, &high, &low];
            client.query(&statement, &params).await?
        }
    };
    session.state().answered(sent);
    match rows.first() {
        Some(row) => {
            let fence: i64 = row.try_get(0)?;
            Ok(Some(u64::try_from(fence).unwrap_or_default()))
        }
        None => Ok(None),
    }
}

/// How many parameters `store_key` takes in a statement.
fn shape(store_key: AdvisoryKey) -> KeyShape {
    match store_key {
        AdvisoryKey::Bigint(_) => KeyShape::Bigint,
        AdvisoryKey::Pair(..) => KeyShape::Pair,
    }
}
