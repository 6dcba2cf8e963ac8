//! Semaphores as permit slots: user locks named from the lock's store key, whose count is
//! stored in the fence table's row of that store key; a permit gives way to a hold of the
//! lock itself, and a hold of the lock itself to a permit. See the
//! [module docs](super#semaphores) for the design.

use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Row, Value};
use tokio_util::sync::CancellationToken;

use super::name::safe_name;
use super::session::Session;
use super::{MySqlStore, failed, sql};
use crate::backend::sql::session_locks::{self, Server as _, Taken};
use crate::backend::sql::sessions::Session as _;
use crate::backend::store::Acquire;
use crate::{LockError, LockKey, LockKind};

/// The most permits a semaphore may have: every attempt looks at each of its slots.
pub const MAX_PERMITS: u32 = 1000;

/// The store key of permit `slot` of the semaphore whose store key is `store_key`:
/// DistributedLock's name for `}store_key#slot`. No valid key starts with `}`, so no
/// lock of a key is a slot.
fn slot_key(store_key: &str, slot: u32) -> String {
    safe_name(&format!("}}{store_key}#{slot}"))
}

/// The store keys of the semaphore `store_key`'s first `slots` slots.
fn slot_keys(store_key: &str, slots: u32) -> Vec<String> {
    (0..slots).map(|slot| slot_key(store_key, slot)).collect()
}

/// A semaphore's row of the fence table.
#[derive(Debug, Clone, Copy)]
struct Count {
    /// Its count, once stored.
    permits: Option<u32>,
    /// How many slots may be held: the highest count it ever had.
    slots: u32,
}

/// What one attempt at a permit did.
enum Attempt {
    /// It took the permit `slot`, with the fencing token `fence`.
    Took { slot: u32, fence: u64 },
    /// Every permit is held, or the lock itself.
    Full,
    /// The semaphore has another count.
    Miscounted(u32),
}

impl MySqlStore {
    /// Takes a permit as [`session_locks::take_permit`] does, each attempt by
    /// [`attempt_permit`](Self::attempt_permit); a permit given back by this store is
    /// told at once.
    pub(super) async fn take_permit(
        &self,
        request: &Acquire,
        permits: u32,
        abandoned: CancellationToken,
    ) -> Result<Option<Taken<Self>>, LockError> {
        let key = &request.key;
        check_permits(key, permits)?;
        let store_key = self.store_key(key)?;
        let released = &self.0.permits_released;
        session_locks::take_permit(self, request, &store_key, released, &abandoned, |session| {
            let store_key = &store_key;
            async move { self.attempt_permit(&session, key, store_key, permits).await }
        })
        .await
    }

    /// Takes a free permit of the semaphore `key` by its `store_key` on `session`, if
    /// fewer than its count hold one and nobody holds the lock itself, storing `permits`
    /// as the count on first use: the permit, `None` if none is free, or
    /// [`LockError::Config`] if another count is stored. A statement that fails may have
    /// taken a slot, so its session is ended.
    async fn attempt_permit(
        &self,
        session: &Arc<Session>,
        key: &LockKey,
        store_key: &str,
        permits: u32,
    ) -> Result<Option<Taken<Self>>, LockError> {
        let (table, owned) = (self.0.fence_table.clone(), store_key.to_owned());
        let attempted = session
            .run(move |conn| Box::pin(attempt(conn, table, owned, permits)))
            .await;
        match attempted {
            Ok(Attempt::Took { slot, fence }) => {
                let kind = LockKind::Semaphore { permits };
                let slot = slot_key(store_key, slot);
                Ok(Some(Taken::new(
                    self,
                    session.clone(),
                    key,
                    &slot,
                    kind,
                    fence,
                )))
            }
            Ok(Attempt::Full) => Ok(None),
            Ok(Attempt::Miscounted(stored)) => Err(LockError::miscounted(key, stored, permits)),
            Err(e) => {
                session.state().end();
                Err(failed(key, "take a permit", e))
            }
        }
    }

    /// The permits of the semaphore `key` free now: its stored count (or `permits`) less
    /// the permits held; none while the lock itself is held.
    pub(super) async fn available_permits(
        &self,
        key: &LockKey,
        permits: u32,
    ) -> Result<u32, LockError> {
        let store_key = self.store_key(key)?;
        let (table, owned) = (self.0.fence_table.clone(), store_key.clone());
        let (stored, held, locked) = self
            .query(key, "count its permits", move |conn| {
                Box::pin(permits_free(conn, table, owned))
            })
            .await?;
        if locked {
            return Ok(0);
        }
        let count = stored.unwrap_or(permits);
        Ok(count.saturating_sub(u32::try_from(held).unwrap_or(u32::MAX)))
    }

    /// Stores `permits` as the count of the semaphore `key`, and tells this store's
    /// waiters: a raised count may let one in.
    pub(super) async fn store_permits(&self, key: &LockKey, permits: u32) -> Result<(), LockError> {
        check_permits(key, permits)?;
        let store_key = self.store_key(key)?;
        let statement = sql::store_count(&self.0.fence_table);
        let params = (store_key.clone(), permits, permits, permits, permits);
        self.query(key, "store its count", move |conn| {
            Box::pin(conn.exec_drop(statement, params))
        })
        .await?;
        self.0.permits_released.notify_waiters();
        Ok(())
    }
}

/// The semaphore `store_key`'s stored count and its permits held, each as its slot and the
/// connection id of its holder, on `conn`: `None` if it is not a semaphore or no permit is
/// held.
pub(super) async fn permits_held(
    conn: &mut Conn,
    table: &str,
    store_key: &str,
) -> Result<Option<(u32, Vec<(u32, u64)>)>, mysql_async::Error> {
    let Some(Count {
        permits: Some(permits),
        slots,
    }) = read_count(conn, table, store_key).await?
    else {
        return Ok(None);
    };
    let by_slot = holders_by_slot(conn, &slot_keys(store_key, slots)).await?;
    let held: Vec<_> = (0..)
        .zip(by_slot)
        .filter_map(|(slot, holder)| Some((slot, holder?)))
        .collect();
    Ok((!held.is_empty()).then_some((permits, held)))
}

/// The semaphore `store_key`'s stored count, if any; how many of its slots are held; and
/// whether the lock itself is held.
async fn permits_free(
    conn: &mut Conn,
    table: String,
    store_key: String,
) -> Result<(Option<u32>, usize, bool), mysql_async::Error> {
    let count = read_count(conn, &table, &store_key).await?;
    let slot_keys = slot_keys(&store_key, count.map_or(0, |count| count.slots));
    let held = holders_by_slot(conn, &slot_keys).await?;
    let locked: Option<Option<u64>> = conn.exec_first(sql::IS_USED_LOCK, (&store_key,)).await?;
    let stored = count.and_then(|count| count.permits);
    Ok((
        stored,
        held.iter().flatten().count(),
        locked.flatten().is_some(),
    ))
}

/// Refuses a count this store cannot keep.
fn check_permits(key: &LockKey, permits: u32) -> Result<(), LockError> {
    if permits > MAX_PERMITS {
        return Err(LockError::Config(format!(
            "semaphore {:?}: a mysql semaphore has at most {MAX_PERMITS} permits, not {permits}",
            key.as_str()
        )));
    }
    Ok(())
}

/// One attempt at a permit of the semaphore `store_key` on `conn`: reads its count (storing
/// `permits` on first use), looks for a free slot below it, takes it if it is still free,
/// and then, in the statement that draws the fencing token, counts every slot held (its
/// own included) and looks for a hold of the lock itself; if either is too many,
/// gives the slot back.
async fn attempt(
    conn: &mut Conn,
    table: String,
    store_key: String,
    permits: u32,
) -> Result<Attempt, mysql_async::Error> {
    let mut count = read_count(conn, &table, &store_key).await?;
    if count.and_then(|count| count.permits).is_none() {
        store_first_count(conn, &table, &store_key, permits).await?;
        count = read_count(conn, &table, &store_key).await?;
    }
    let Some(count) = count else {
        return Ok(Attempt::Full);
    };
    match count.permits {
        Some(stored) if stored != permits => return Ok(Attempt::Miscounted(stored)),
        _ => {}
    }
    let slot_keys = slot_keys(&store_key, count.slots);
    let Some(slot) = take_free_slot(conn, &slot_keys, &store_key, permits).await? else {
        return Ok(Attempt::Full);
    };
    let statement = sql::fence_permit(&table, slot_keys.len());
    let mut params = vec![Value::from(&store_key), Value::from(&store_key)];
    params.extend(slot_keys.iter().map(Value::from));
    conn.exec_drop(statement, Params::Positional(params))
        .await?;
    if conn.affected_rows() == 1 {
        let fence = conn.last_insert_id().unwrap_or_default();
        return Ok(Attempt::Took { slot, fence });
    }
    conn.exec_drop(sql::DO_RELEASE_LOCK, (&slot_keys[slot as usize],))
        .await?;
    Ok(Attempt::Full)
}

/// Takes the first of the slots `slot_keys` below `permits` that nobody holds, while fewer
/// than `permits` of them are held and nobody holds the lock itself, `store_key`: its
/// number, or `None`. A slot is taken only if still free when its statement runs, as a
/// session's `GET_LOCK`s of one store key stack; and none while `store_key` is held, so
/// a holder of `store_key` waiting for the permits to drain never sees a slot held by an
/// attempt bound to fail.
async fn take_free_slot(
    conn: &mut Conn,
    slot_keys: &[String],
    store_key: &str,
    permits: u32,
) -> Result<Option<u32>, mysql_async::Error> {
    for _ in slot_keys {
        let held = holders_by_slot(conn, slot_keys).await?;
        if held.iter().flatten().count() >= permits as usize {
            return Ok(None);
        }
        let free = |slot: &u32| held.get(*slot as usize).is_some_and(Option::is_none);
        let Some(slot) = (0..permits).find(free) else {
            return Ok(None);
        };
        let slot_key = &slot_keys[slot as usize];
        let took: Option<Option<i64>> = conn
            .exec_first(sql::TAKE_FREE_SLOT, (slot_key, store_key, slot_key))
            .await?;
        if took == Some(Some(1)) {
            return Ok(Some(slot));
        }
    }
    Ok(None)
}

/// Stores `permits` as the count of the semaphore `store_key`, unless one is stored already.
async fn store_first_count(
    conn: &mut Conn,
    table: &str,
    store_key: &str,
    permits: u32,
) -> Result<(), mysql_async::Error> {
    let statement = sql::store_first_count(table);
    conn.exec_drop(statement, (store_key, permits, permits, permits, permits))
        .await
}

/// The row of the store key `store_key` in the fence table, if it has one.
async fn read_count(
    conn: &mut Conn,
    table: &str,
    store_key: &str,
) -> Result<Option<Count>, mysql_async::Error> {
    let statement = sql::read_count(table);
    let row: Option<(Option<u32>, Option<u32>)> = conn.exec_first(statement, (store_key,)).await?;
    Ok(row.map(|(permits, slots)| Count {
        permits,
        slots: slots.unwrap_or(0),
    }))
}

/// The connection id of the holder of each of the slots `slot_keys`.
async fn holders_by_slot(
    conn: &mut Conn,
    slot_keys: &[String],
) -> Result<Vec<Option<u64>>, mysql_async::Error> {
    if slot_keys.is_empty() {
        return Ok(Vec::new());
    }
    let statement = sql::holders(slot_keys.len());
    let params = slot_keys.iter().map(Value::from).collect();
    let row: Option<Row> = conn
        .exec_first(statement, Params::Positional(params))
        .await?;
    let values = row.map(Row::unwrap).unwrap_or_default();
    values
        .into_iter()
        .map(mysql_async::from_value_opt::<Option<u64>>)
        .collect::<Result<_, _>>()
        .map_err(|e| mysql_async::Error::Other(e.into()))
}

/// After a take of `store_key`, a lock that has been a semaphore: draws the fencing
/// token, in a statement that first makes sure no permit of it is held; `None` if one is
/// (the lock is still held).
pub(super) async fn fence_unless_permits(
    session: &Session,
    table: &str,
    store_key: &str,
) -> Result<Option<u64>, mysql_async::Error> {
    let (table, store_key) = (table.to_owned(), store_key.to_owned());
    session
        .run(move |conn| {
            Box::pin(async move {
                let slots = read_count(conn, &table, &store_key)
                    .await?
                    .map_or(0, |count| count.slots);
                let slot_keys = slot_keys(&store_key, slots);
                let statement = sql::fence_unless_permits(&table, slot_keys.len());
                let mut params = vec![Value::from(&store_key)];
                params.extend(slot_keys.iter().map(Value::from));
                conn.exec_drop(statement, Params::Positional(params))
                    .await?;
                Ok((conn.affected_rows() == 1).then(|| conn.last_insert_id().unwrap_or_default()))
            })
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_named_apart_from_every_key() {
        assert_eq!(slot_key("jobs", 0), "}jobs#0");
        assert_eq!(slot_key("jobs", 12), "}jobs#12");
        let long = safe_name(&"J".repeat(80));
        let slot = slot_key(&long, 999);
        assert!(
            slot.starts_with('}') && slot.chars().count() <= 64,
            "{slot}"
        );
        assert_ne!(slot_key(&long, 998), slot);
    }
}
