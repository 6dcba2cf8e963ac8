//! Semaphores as permit slots: advisory locks of one bigint each, derived from the key,
//! whose count is stored in the fence table's row of the key; each attempt gives way to
//! a hold of the key's own advisory lock. See the [module docs](super#semaphores) for
//! the design.

use tokio_postgres::types::ToSql;
use tokio_util::sync::CancellationToken;

use super::key::{AdvisoryKey, KeyMapping};
use super::session::Session;
use super::{PostgresStore, failed, sql};
use crate::backend::sql::session_locks::{self, Taken};
use crate::backend::sql::sessions::Session as _;
use crate::backend::store::Acquire;
use crate::{LockError, LockKey, LockKind};

/// The slots of one semaphore.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slots {
    /// The upper 32 bits of every slot's key.
    high: i32,
}

impl Slots {
    /// The slots of the semaphore `key`.
    pub(super) fn of(key: &str) -> Self {
        let high = match KeyMapping::Hashed.key(&format!("{key}#permits")) {
            AdvisoryKey::Bigint(bigint) => (bigint >> 32) as i32,
            AdvisoryKey::Pair(high, _) => high,
        };
        Self { high }
    }

    /// The store key of slot `slot`.
    fn store_key(self, slot: u32) -> AdvisoryKey {
        AdvisoryKey::Bigint((i64::from(self.high) << 32) | i64::from(slot))
    }

    /// The slots' upper half as `pg_locks` shows it: an unsigned 32-bit oid.
    pub(super) fn classid(self) -> i64 {
        i64::from(self.high as u32)
    }
}

impl PostgresStore {
    /// Takes a permit as [`session_locks::take_permit`] does, each attempt by
    /// [`attempt_permit`](Self::attempt_permit); a permit given back by any store on the
    /// database is announced (`NOTIFY`).
    pub(super) async fn take_permit(
        &self,
        request: &Acquire,
        permits: u32,
        abandoned: CancellationToken,
    ) -> Result<Option<Taken<Self>>, LockError> {
        let key = &request.key;
        let slots = Slots::of(key.as_str());
        let gate = self.0.mapping.key(key.as_str()).to_string();
        let released = &self.0.locks.sessions.connector.released;
        session_locks::take_permit(
            self,
            request,
            &gate,
            released,
            &abandoned,
            |session| async move { self.attempt_permit(&session, key, slots, permits).await },
        )
        .await
    }

    /// Takes a free permit on `session` if fewer than the stored count are held and
    /// nobody holds the key's own advisory lock, storing `permits` as the count on first
    /// use: the permit, `None` if none is free, or [`LockError::Config`] if another count
    /// is stored. A statement that fails may have taken a slot, so its session is ended.
    async fn attempt_permit(
        &self,
        session: &std::sync::Arc<Session>,
        key: &LockKey,
        slots: Slots,
        permits: u32,
    ) -> Result<Option<Taken<Self>>, LockError> {
        let sql = sql::take_permit(&self.0.fence_table);
        let store_count = sql::store_first_count(&self.0.fence_table);
        let key_str = key.as_str();
        let asked = i64::from(permits);
        let high = i64::from(slots.high);
        let classid = slots.classid();
        let (lock_classid, lock_objid, lock_objsubid) = self.0.mapping.key(key_str).pg_locks();
        let params: [&(dyn ToSql + Sync); 7] = [
            &key_str,
            &asked,
            &high,
            &classid,
            &lock_classid,
            &lock_objid,
            &lock_objsubid,
        ];
        let attempt = async {
            let statement = session.prepare(&sql).await?;
            let mut rows = session.client.query(&statement, &params).await?;
            if rows.is_empty() {
                let store = session.prepare(&store_count).await?;
                session.client.execute(&store, &params[..2]).await?;
                rows = session.client.query(&statement, &params).await?;
            }
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let stored: i64 = row.try_get(0)?;
            let fence: Option<i64> = row.try_get(1)?;
            let slot: Option<i64> = row.try_get(2)?;
            Ok(Some((stored, fence.zip(slot))))
        };
        let attempted: Result<_, tokio_postgres::Error> = attempt.await;
        let (stored, taken) = match attempted {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(None),
            Err(e) => {
                session.state().end();
                return Err(failed(key, "take a permit", e));
            }
        };
        if let Some((fence, slot)) = taken {
            let slot = u32::try_from(slot).unwrap_or_default();
            let fence = u64::try_from(fence).unwrap_or_default();
            let kind = LockKind::Semaphore { permits };
            let slot_key = slots.store_key(slot);
            let session = session.clone();
            return Ok(Some(Taken::new(self, session, key, &slot_key, kind, fence)));
        }
        if stored != asked {
            let stored = u32::try_from(stored).unwrap_or(u32::MAX);
            return Err(LockError::miscounted(key, stored, permits));
        }
        Ok(None)
    }

    /// The permits of the semaphore `key` free now: its stored count (or `permits`) less
    /// the permits held; none while the key's own advisory lock is held.
    pub(super) async fn available_permits(
        &self,
        key: &LockKey,
        permits: u32,
    ) -> Result<u32, LockError> {
        let sql = sql::count_permits(&self.0.fence_table);
        let key_str = key.as_str();
        let classid = Slots::of(key_str).classid();
        let (lock_classid, lock_objid, lock_objsubid) = self.0.mapping.key(key_str).pg_locks();
        let params: [&(dyn ToSql + Sync); 5] = [
            &key_str,
            &classid,
            &lock_classid,
            &lock_objid,
            &lock_objsubid,
        ];
        let rows = self.query(key, "count its permits", &sql, &params).await?;
        let read = |row: &tokio_postgres::Row| {
            Ok::<_, tokio_postgres::Error>((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
        };
        let (stored, held, locked): (Option<i64>, i64, bool) = match rows.first().map(read) {
            Some(Ok(row)) => row,
            Some(Err(e)) => return Err(failed(key, "count its permits", e)),
            None => (None, 0, false),
        };
        if locked {
            return Ok(0);
        }
        let count = stored.map_or(i64::from(permits), |stored| stored);
        Ok(u32::try_from(count.saturating_sub(held).max(0)).unwrap_or(u32::MAX))
    }

    /// Stores `permits` as the count of the semaphore `key`, and announces it: a raised
    /// count may let a waiter in.
    pub(super) async fn store_permits(&self, key: &LockKey, permits: u32) -> Result<(), LockError> {
        let sql = sql::store_count(&self.0.fence_table);
        let key_str = key.as_str();
        self.query(
            key,
            "store its count",
            &sql,
            &[&key_str, &i64::from(permits)],
        )
        .await?;
        Ok(())
    }

    /// The holders of the semaphore `key`'s permits, each shown by its slot's number (in
    /// 8 hex digits, in place of a token), and its stored count: `None` if none is held.
    pub(super) async fn inspect_permits(
        &self,
        key: &LockKey,
    ) -> Result<Option<(u32, Vec<String>)>, LockError> {
        let sql = sql::inspect_permits(&self.0.fence_table);
        let key_str = key.as_str();
        let classid = Slots::of(key_str).classid();
        let rows = self
            .query(key, "read pg_locks", &sql, &[&key_str, &classid])
            .await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let read = |e| failed(key, "read pg_locks", e);
        let stored: i64 = first.try_get(0).map_err(read)?;
        let mut slots = Vec::with_capacity(rows.len());
        for row in &rows {
            let slot: i64 = row.try_get(1).map_err(read)?;
            slots.push(format!("{slot:08x}"));
        }
        Ok(Some((u32::try_from(stored).unwrap_or(u32::MAX), slots)))
    }
}
