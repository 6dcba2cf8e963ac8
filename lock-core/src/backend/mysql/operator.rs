//! What an operator sees and does: a lock's holder (`IS_USED_LOCK`) and waiters
//! (`performance_schema.metadata_locks`, where it is on), and forcing a lock open by
//! ending the session that holds it.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::MySqlStore;
use super::take::failed;
use crate::{HolderInfo, LockError, LockInfo, LockKey, LockKind};

/// How many sessions wait for a user lock, where the server counts them.
const WAITING: &str = "SELECT IF(@@performance_schema, (SELECT COUNT(*) \
    FROM performance_schema.metadata_locks WHERE OBJECT_TYPE = 'USER LEVEL LOCK' \
    AND OBJECT_NAME = ? AND LOCK_STATUS = 'PENDING'), NULL)";

impl MySqlStore {
    /// Ends (`KILL`) the session that holds the lock `key`, with every other lock it
    /// holds, on a connection of its own: whether one did.
    pub(super) async fn force_unlock_lock(&self, key: &LockKey) -> Result<bool, LockError> {
        let name = self.0.mapping.lock_name(key.as_str())?;
        let mut conn = self.0.locks.sessions.connector.once().await?;
        let Some(holder) = holder(&mut conn, &name).await? else {
            return Ok(false);
        };
        conn.query_drop(format!("KILL {holder}"))
            .await
            .map_err(|e| failed(&name, "end its holder's session", e))?;
        Ok(true)
    }

    /// The holder of the lock `key` (shown by its connection id, in 8 hex digits), and
    /// how many sessions wait for it where `performance_schema` is on.
    pub(super) async fn inspect_lock(&self, key: &LockKey) -> Result<Option<LockInfo>, LockError> {
        let name = self.0.mapping.lock_name(key.as_str())?;
        let mut conn = self.0.locks.sessions.connector.once().await?;
        let Some(holder) = holder(&mut conn, &name).await? else {
            return Ok(None);
        };
        // Without the privilege to read performance_schema, the count is unknown.
        let waiting: Option<Option<Option<u64>>> = conn.exec_first(WAITING, (&name,)).await.ok();
        let waiting = waiting.flatten().flatten().map(|n| n as usize);
        let holders = vec![HolderInfo::new(&format!("{holder:08x}"), None, None)];
        Ok(Some(LockInfo::new(
            Some(LockKind::Exclusive),
            holders,
            waiting,
        )))
    }
}

/// The connection id of the session that holds the user lock `name`, if any.
async fn holder(conn: &mut Conn, name: &str) -> Result<Option<u64>, LockError> {
    let holder: Option<Option<u64>> = conn
        .exec_first("SELECT IS_USED_LOCK(?)", (name,))
        .await
        .map_err(|e| failed(name, "read IS_USED_LOCK", e))?;
    Ok(holder.flatten())
}
