//! What an operator sees and does: a lock's holders and waiters as `pg_locks` shows
//! them, and forcing a lock open by ending the sessions that hold it.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::semaphore::Slots;
use super::{PostgresStore, failed, sql};
use crate::{HolderInfo, LockError, LockInfo, LockKey, LockKind};

impl PostgresStore {
    /// Ends (`pg_terminate_backend`) every session of this database that holds the
    /// advisory lock of `key` or a permit of the semaphore `key`, on a connection of its
    /// own: whether any did.
    pub(super) async fn force_unlock_lock(&self, key: &LockKey) -> Result<bool, LockError> {
        let (classid, objid, objsubid) = self.0.mapping.key(key.as_str()).pg_locks();
        let slots = Slots::of(key.as_str()).classid();
        let client = self.0.locks.sessions.connector.once().await?;
        let row = client
            .query_one(&sql::force_unlock(), &[&classid, &objid, &objsubid, &slots])
            .await
            .map_err(|e| failed(key, "end its holders' sessions", e))?;
        let ended: i64 = row
            .try_get(0)
            .map_err(|e| failed(key, "count its holders", e))?;
        Ok(ended > 0)
    }

    /// The holders of the advisory lock of `key`, whether they share it, and how many
    /// sessions wait for it (see [`lock_info`]); or else the holders of the semaphore
    /// `key`'s permits.
    pub(super) async fn inspect_lock(&self, key: &LockKey) -> Result<Option<LockInfo>, LockError> {
        let (classid, objid, objsubid) = self.0.mapping.key(key.as_str()).pg_locks();
        let sql = sql::inspect(&self.0.fence_table);
        let key_str = key.as_str();
        let params: [&(dyn ToSql + Sync); 4] = [&classid, &objid, &objsubid, &key_str];
        let rows = self.query(key, "read pg_locks", &sql, &params).await?;
        let info = lock_info(&rows).map_err(|e| failed(key, "read pg_locks", e))?;
        if info.is_some() {
            return Ok(info);
        }
        let Some((permits, slots)) = self.inspect_permits(key).await? else {
            return Ok(None);
        };
        let holders = slots
            .iter()
            .map(|slot| HolderInfo::new(slot, None, None))
            .collect();
        let kind = LockKind::Semaphore { permits };
        Ok(Some(LockInfo::new(Some(kind), holders, None)))
    }
}

/// What the rows of `pg_locks` for one advisory key say, each joined with the fence
/// table's row of its key: each holding session is one holder (this store never stacks
/// two holds of a lock on one session). The session that took the lock last through this
/// crate, as the fence table records it, shows the owner token, the fencing token and the
/// holder id of its hold, and the kind it was taken as; any other session is shown by its
/// backend's pid (in 8 hex digits), a shared hold as a read and any other as exclusive.
fn lock_info(rows: &[Row]) -> Result<Option<LockInfo>, tokio_postgres::Error> {
    let mut holders = Vec::new();
    let mut kind = None;
    let mut waiting = 0;
    for row in rows {
        if !row.try_get::<_, bool>("granted")? {
            waiting += 1;
            continue;
        }
        let pid: i32 = row.try_get("pid")?;
        let shared = row.try_get::<_, &str>("mode")? == "ShareLock";
        let recorded = (row.try_get::<_, Option<i32>>("held_by")? == Some(pid))
            .then(|| row.try_get::<_, Option<&str>>("holder"))
            .transpose()?
            .flatten();
        let (holder, held_as) = match recorded {
            Some(token) => {
                let fence: i64 = row.try_get("fence")?;
                let fence = u64::try_from(fence).ok();
                let holder_id: Option<&str> = row.try_get("holder_id")?;
                (
                    HolderInfo::new(token, None, fence).with_holder_id(holder_id),
                    LockKind::of_owner_token(token),
                )
            }
            None => (HolderInfo::new(&format!("{pid:08x}"), None, None), None),
        };
        holders.push(holder);
        kind = Some(match (shared, held_as) {
            (true, _) => LockKind::Read,
            (false, Some(held_as)) => held_as,
            (false, None) => LockKind::Exclusive,
        });
    }
    if holders.is_empty() {
        return Ok(None);
    }
    Ok(Some(LockInfo::new(kind, holders, Some(waiting))))
}
