//! What an operator sees and does: a lock's holder (`IS_USED_LOCK`, with its hold's
//! fencing token and holder id from the fence table) and waiters
//! (`performance_schema.metadata_locks`, where it is on), or a semaphore's permit
//! holders; and forcing a lock open by ending the sessions that hold it.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::semaphore::permits_held;
use super::{MySqlStore, failed, sql};
use crate::backend::sql::session_locks::Server as _;
use crate::{HolderInfo, LockError, LockInfo, LockKey, LockKind};

impl MySqlStore {
    /// Ends (`KILL`) every session that holds the lock `key` or a permit of the
    /// semaphore `key`, with every other lock each holds, on a connection of its own:
    /// whether any did.
    pub(super) async fn force_unlock_lock(&self, key: &LockKey) -> Result<bool, LockError> {
        let store_key = self.store_key(key)?;
        let mut conn = self.0.locks.sessions.connector.once().await?;
        let mut holders: Vec<u64> = holder(&mut conn, key, &store_key)
            .await?
            .into_iter()
            .collect();
        let permits = permits_held(&mut conn, &self.0.fence_table, &store_key)
            .await
            .map_err(|e| failed(key, "read its permits", e))?;
        if let Some((_, permits)) = permits {
            holders.extend(permits.iter().map(|&(_, holder)| holder));
        }
        holders.sort_unstable();
        holders.dedup();
        for holder in &holders {
            conn.query_drop(sql::kill(*holder))
                .await
                .map_err(|e| failed(key, "end its holder's session", e))?;
        }
        Ok(!holders.is_empty())
    }

    /// The holder of the lock `key` (shown by its connection id, in 8 hex digits, with the
    /// fencing token and holder id the fence table records of its hold, if this crate took
    /// it), and how many sessions wait for it where `performance_schema` is on; or else the
    /// semaphore `key`'s permits held, each shown by its slot's number (in 8 hex digits),
    /// as one session may hold several.
    pub(super) async fn inspect_lock(&self, key: &LockKey) -> Result<Option<LockInfo>, LockError> {
        let store_key = self.store_key(key)?;
        let (table, owned) = (self.0.fence_table.clone(), store_key.clone());
        let holders = self
            .query(key, "read its holders", move |conn| {
                Box::pin(holders(conn, table, owned))
            })
            .await?;
        Ok(match holders {
            Holders::Exclusive {
                holder,
                drawn,
                waiting,
            } => {
                let waiting = waiting.map(|n| n as usize);
                let holders = vec![match drawn {
                    Some(Drawn { token, holder_id }) => {
                        HolderInfo::new(&hex(holder), None, Some(token)).with_holder_id(holder_id)
                    }
                    None => shown(holder),
                }];
                Some(LockInfo::new(Some(LockKind::Exclusive), holders, waiting))
            }
            Holders::Permits(None) => None,
            Holders::Permits(Some((permits, held))) => {
                let holders = held.iter().map(|&(slot, _)| shown(slot.into())).collect();
                let kind = LockKind::Semaphore { permits };
                Some(LockInfo::new(Some(kind), holders, None))
            }
        })
    }
}

/// Who holds a lock, as the server shows it.
enum Holders {
    /// A session holds the lock itself (its connection id), whose hold drew the token
    /// the fence table records if `drawn`; so many sessions wait for it, where the server
    /// counts them.
    Exclusive {
        holder: u64,
        drawn: Option<Drawn>,
        waiting: Option<u64>,
    },
    /// Nobody holds the lock itself: the permits held of its semaphore, as
    /// [`permits_held`] gives them.
    Permits(Option<(u32, Vec<(u32, u64)>)>),
}

/// What the fence table records of the hold of a lock: its fencing token, and what its
/// holder calls itself.
struct Drawn {
    token: u64,
    holder_id: Option<String>,
}

/// The holder of a user lock, and its name's row of the fence table: the holder's
/// connection id, and the row's `held_by`, `token` and `holder_id`.
type HolderRow = (Option<u64>, Option<u64>, Option<u64>, Option<String>);

/// Who holds the store key `store_key`, whose fencing tokens and semaphore's count are in
/// `table`, on `conn`.
async fn holders(
    conn: &mut Conn,
    table: String,
    store_key: String,
) -> Result<Holders, mysql_async::Error> {
    let row: Option<HolderRow> = conn
        .exec_first(sql::holder(&table), (&store_key, &store_key))
        .await?;
    let Some((Some(holder), held_by, token, holder_id)) = row else {
        return Ok(Holders::Permits(
            permits_held(conn, &table, &store_key).await?,
        ));
    };
    let drawn = token
        .filter(|_| held_by == Some(holder))
        .map(|token| Drawn { token, holder_id });
    // Without the privilege to read performance_schema, the count is unknown.
    let waiting: Option<Option<Option<u64>>> =
        conn.exec_first(sql::WAITING, (&store_key,)).await.ok();
    Ok(Holders::Exclusive {
        holder,
        drawn,
        waiting: waiting.flatten().flatten(),
    })
}

/// A holder as `inspect` shows it: a number (a connection id, a slot) in 8 hex digits,
/// in place of a token.
fn shown(number: u64) -> HolderInfo {
    HolderInfo::new(&hex(number), None, None)
}

/// A number (a connection id, a slot) in 8 hex digits, in place of a token.
fn hex(number: u64) -> String {
    format!("{number:08x}")
}

/// The connection id of the session that holds `store_key`, the user lock of `key`, if
/// any.
async fn holder(conn: &mut Conn, key: &LockKey, store_key: &str) -> Result<Option<u64>, LockError> {
    let holder: Option<Option<u64>> = conn
        .exec_first(sql::IS_USED_LOCK, (store_key,))
        .await
        .map_err(|e| failed(key, "read IS_USED_LOCK", e))?;
    Ok(holder.flatten())
}
