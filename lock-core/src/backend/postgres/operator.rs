//! What an operator does: force a lock open, by ending the sessions that hold it.

use super::PostgresStore;
use super::take::failed;
use crate::{LockError, LockKey};

impl PostgresStore {
    /// Ends (`pg_terminate_backend`) every session of this database that holds the
    /// advisory lock of `key`, on a connection of its own: whether any did.
    pub(super) async fn force_unlock_lock(&self, key: &LockKey) -> Result<bool, LockError> {
        let (classid, objid, objsubid) = self.0.mapping.key(key.as_str()).pg_locks();
        let client = self.0.sessions.connect_once().await?;
        let row = client
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_locks \
                 WHERE locktype = 'advisory' AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = $3",
                &[&classid, &objid, &objsubid],
            )
            .await
            .map_err(|e| failed(key.as_str(), "end its holders' sessions", e))?;
        let ended: i64 = row
            .try_get(0)
            .map_err(|e| failed(key.as_str(), "count its holders", e))?;
        Ok(ended > 0)
    }
}
