//! What an operator sees and does: a lock's holders and waiters as `pg_locks` shows
//! them, and forcing a lock open by ending the sessions that hold it.

use tokio_postgres::Row;

use super::PostgresStore;
use super::take::failed;
use crate::{HolderInfo, LockError, LockInfo, LockKey, LockKind};

/// The rows of `pg_locks` for one advisory key in this database.
const THE_KEYS_LOCKS: &str = "locktype = 'advisory' \
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
    AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = $3";

impl PostgresStore {
    /// Ends (`pg_terminate_backend`) every session of this database that holds the
    /// advisory lock of `key`, on a connection of its own: whether any did.
    pub(super) async fn force_unlock_lock(&self, key: &LockKey) -> Result<bool, LockError> {
        let (classid, objid, objsubid) = self.0.mapping.key(key.as_str()).pg_locks();
        let client = self.0.sessions.connect_once().await?;
        let sql = format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE granted AND {THE_KEYS_LOCKS}"
        );
        let row = client
            .query_one(&sql, &[&classid, &objid, &objsubid])
            .await
            .map_err(|e| failed(key.as_str(), "end its holders' sessions", e))?;
        let ended: i64 = row
            .try_get(0)
            .map_err(|e| failed(key.as_str(), "count its holders", e))?;
        Ok(ended > 0)
    }

    /// The holders of the advisory lock of `key` (each shown by its backend's pid, in 8
    /// hex digits), whether they share it, and how many sessions wait for it.
    pub(super) async fn inspect_lock(&self, key: &LockKey) -> Result<Option<LockInfo>, LockError> {
        let (classid, objid, objsubid) = self.0.mapping.key(key.as_str()).pg_locks();
        let sql = format!("SELECT pid, mode, granted FROM pg_locks WHERE {THE_KEYS_LOCKS}");
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&classid, &objid, &objsubid];
        let rows = match self.0.sessions.for_attempt().await? {
            Some(serving) => serving.session.client.query(&sql, &params).await,
            None => {
                self.0
                    .sessions
                    .connect_once()
                    .await?
                    .query(&sql, &params)
                    .await
            }
        };
        let rows = rows.map_err(|e| failed(key.as_str(), "read pg_locks", e))?;
        lock_info(&rows).map_err(|e| failed(key.as_str(), "read pg_locks", e))
    }
}

/// What the rows of `pg_locks` for one key say.
fn lock_info(rows: &[Row]) -> Result<Option<LockInfo>, tokio_postgres::Error> {
    let mut holders = Vec::new();
    let mut shared = false;
    let mut waiting = 0;
    for row in rows {
        if !row.try_get::<_, bool>("granted")? {
            waiting += 1;
            continue;
        }
        let pid: i32 = row.try_get("pid")?;
        shared |= row.try_get::<_, &str>("mode")? == "ShareLock";
        holders.push(HolderInfo::new(&format!("{pid:08x}"), None, None));
    }
    if holders.is_empty() {
        return Ok(None);
    }
    let kind = if shared {
        LockKind::Read
    } else {
        LockKind::Exclusive
    };
    Ok(Some(LockInfo::new(Some(kind), holders, Some(waiting))))
}
