//! Every statement the store sends, each with its `?` parameters in order and what it
//! returns. `table` is the fence table's name, checked when the store is built; lock
//! names and counts go as parameters, and only numbers of the store's own (a connection
//! id, a lease in seconds) are written into the text. The fence table has one row a lock
//! name: `name`, `token` (its latest fencing token), for a name that has been a
//! semaphore, `permits` (its count) and `slots` (the highest count it ever had), and of
//! the hold of the name drawn last, `held_by` (its session's connection id, NULL until
//! its token is drawn) and `holder_id` (what its holder calls itself, NULL for none).

/// Creates the fence table if it is missing. No parameters; returns nothing.
pub(super) fn create_fence_table(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (name VARBINARY(255) PRIMARY KEY, \
         token BIGINT UNSIGNED NOT NULL, \
         permits INT UNSIGNED, slots INT UNSIGNED, \
         {HELD_BY}, {HOLDER_ID}) ENGINE=InnoDB"
    )
}

/// The column `held_by`, as created.
pub(super) const HELD_BY: &str = "held_by BIGINT UNSIGNED";

/// The column `holder_id`, as created: at most 255 bytes, kept as they are.
pub(super) const HOLDER_ID: &str = "holder_id VARBINARY(255)";

/// The columns an earlier version made the fence table without: each one's name, and
/// the column as created.
pub(super) const LATER_COLUMNS: [(&str, &str); 2] =
    [("held_by", HELD_BY), ("holder_id", HOLDER_ID)];

/// Which of the [`LATER_COLUMNS`] a fence table has: a table made by an earlier version
/// has neither. `?`: the table's database (text, NULL for the connection's), its name
/// (text). Returns one row a column it has: its name (text).
pub(super) const FENCE_COLUMNS: &str = "SELECT COLUMN_NAME FROM information_schema.COLUMNS \
    WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
    AND COLUMN_NAME IN ('held_by', 'holder_id')";

/// Adds the `columns` (each as created, such as [`HELD_BY`]) to the fence table. No
/// parameters; returns nothing.
pub(super) fn add_columns(table: &str, columns: &[&str]) -> String {
    let added: Vec<String> = columns.iter().map(|c| format!("ADD COLUMN {c}")).collect();
    format!("ALTER TABLE {table} {}", added.join(", "))
}

/// Sets a session's lease: the server ends it once idle for `seconds`. No parameters;
/// returns nothing.
pub(super) fn set_wait_timeout(seconds: u64) -> String {
    format!("SET SESSION wait_timeout = {seconds}")
}

/// Takes a user lock at once if it is free. `?`: the lock name (text). Returns one row,
/// one column: 1 if taken, 0 if not.
pub(super) const GET_LOCK_NOW: &str = "SELECT GET_LOCK(?, 0)";

/// Waits inside the server for a user lock. `?`: the lock name (text), the most seconds
/// to wait (number). Returns one row, one column: 1 if taken, 0 if the time ran out,
/// NULL on an error (the session was killed, say).
pub(super) const GET_LOCK: &str = "SELECT GET_LOCK(?, ?)";

/// Gives back one hold of a user lock. `?`: the lock name (text). Returns one row, one
/// column: 1 if the session held it, 0 if another session does, NULL if nobody does.
pub(super) const RELEASE_LOCK: &str = "SELECT RELEASE_LOCK(?)";

/// Gives back one hold of a user lock, answering nothing. `?`: the lock name (text).
pub(super) const DO_RELEASE_LOCK: &str = "DO RELEASE_LOCK(?)";

/// The holder of a user lock. `?`: the lock name (text). Returns one row, one column:
/// the connection id of the session that holds it, NULL if nobody does.
pub(super) const IS_USED_LOCK: &str = "SELECT IS_USED_LOCK(?)";

/// The holder of a user lock, with its name's row of the fence table. `?`: the lock name
/// (text), twice. Returns one row: the connection id of the session that holds the lock
/// (NULL if nobody does), and the row's `held_by`, `token` and `holder_id` (each NULL if
/// the name has no row).
pub(super) fn holder(table: &str) -> String {
    format!(
        "SELECT IS_USED_LOCK(?), fences.held_by, fences.token, fences.holder_id \
         FROM (SELECT 1) AS one LEFT JOIN {table} AS fences ON fences.name = ?"
    )
}

/// How many sessions wait for a user lock, where the server counts them. `?`: the lock
/// name (text). Returns one row, one column: the count, NULL if `performance_schema` is
/// off; an error without the privilege to read it.
pub(super) const WAITING: &str = "SELECT IF(@@performance_schema, (SELECT COUNT(*) \
    FROM performance_schema.metadata_locks WHERE OBJECT_TYPE = 'USER LEVEL LOCK' \
    AND OBJECT_NAME = ? AND LOCK_STATUS = 'PENDING'), NULL)";

/// Ends the session of the id `connection` at once, whatever it is doing, with every
/// lock it holds; returns before the server freed them. No parameters; returns nothing.
pub(super) fn kill(connection: u64) -> String {
    format!("KILL {connection}")
}

/// Takes a lock at once if it is free and, if it took it, draws its fencing token, as
/// [`take`]. `?`: the lock name (text), the holder id (text or NULL), the lock name again
/// (text), the holder id again.
pub(super) fn take_now(table: &str) -> String {
    take(table, "GET_LOCK(?, 0)")
}

/// Waits inside the server for a lock and, if it took it, draws its fencing token, as
/// [`take`]. `?`: the lock name (text), the holder id (text or NULL), the lock name again
/// (text), the most seconds to wait (number), the holder id again.
pub(super) fn take_waiting(table: &str) -> String {
    take(table, "GET_LOCK(?, ?)")
}

/// The statement that takes a lock by `get_lock` and, if it took it, draws its fencing
/// token from `table`, recording beside it the session's connection id (`held_by`) and
/// the holder id: one statement, one round trip. `?`: the lock name (the row's), the
/// holder id, then `get_lock`'s, then the holder id again. Returns no rows; 0 affected
/// rows if it did not take the lock, else the token as its insert id
/// (`LAST_INSERT_ID(expr)`). The row of a name that has been a semaphore (its `slots`
/// set) answers with insert id 0 instead, and its `held_by` is NULL, as its permits must
/// be looked for before the lock counts as taken ([`fence_unless_permits`]).
fn take(table: &str, get_lock: &str) -> String {
    format!(
        "INSERT INTO {table} (name, token, held_by, holder_id) \
         SELECT ?, LAST_INSERT_ID(1), CONNECTION_ID(), ? FROM DUAL WHERE {get_lock} = 1 \
         ON DUPLICATE KEY UPDATE \
         held_by = IF({table}.slots IS NULL, CONNECTION_ID(), NULL), holder_id = ?, \
         token = IF({table}.slots IS NULL, \
         LAST_INSERT_ID({table}.token + 1), {table}.token + 1 + LAST_INSERT_ID(0))"
    )
}

/// A semaphore's row of the fence table. `?`: the lock name (text). Returns no row if
/// it has none, else one: `permits` (its count, NULL until stored) and `slots` (NULL if
/// it never was a semaphore).
pub(super) fn read_count(table: &str) -> String {
    format!("SELECT permits, slots FROM {table} WHERE name = ?")
}

/// Stores a semaphore's count, whatever it was, raising `slots` to it. `?`: the lock
/// name (text), then the count (number) four times. Returns nothing.
pub(super) fn store_count(table: &str) -> String {
    format!(
        "INSERT INTO {table} (name, token, permits, slots) VALUES (?, 0, ?, ?) \
         ON DUPLICATE KEY UPDATE slots = GREATEST(COALESCE(slots, 0), ?), permits = ?"
    )
}

/// Stores a semaphore's count unless one is stored already. `?`: the lock name (text),
/// then the count (number) four times. Returns nothing.
pub(super) fn store_first_count(table: &str) -> String {
    format!(
        "INSERT INTO {table} (name, token, permits, slots) VALUES (?, 0, ?, ?) \
         ON DUPLICATE KEY UPDATE \
         slots = IF(permits IS NULL, GREATEST(COALESCE(slots, 0), ?), slots), \
         permits = COALESCE(permits, ?)"
    )
}

/// The holders of `slots` user locks, at least one. `?`: each lock's name (text).
/// Returns one row, a column per lock: the connection id of its holder, NULL if nobody
/// holds it.
pub(super) fn holders(slots: usize) -> String {
    let probes = vec!["IS_USED_LOCK(?)"; slots].join(", ");
    format!("SELECT {probes}")
}

/// Takes a semaphore's slot at once if both it and the name's own lock are free, so
/// that no slot is taken while a hold of the name waits for the permits to drain. `?`:
/// the slot's name (text), the lock name (text), the slot's name again (text). Returns
/// one row, one column: 1 if taken, else 0.
pub(super) const TAKE_FREE_SLOT: &str =
    "SELECT IF(IS_FREE_LOCK(?) AND IS_FREE_LOCK(?), GET_LOCK(?, 0), 0)";

/// Draws the fencing token of a permit just taken, if the semaphore's count is stored,
/// nobody holds the name's own lock, and at most the count of its `slots` slots are held,
/// the taker's own included. `?`: the lock name (text), the lock name again (text), then
/// each slot's name (text). Returns no rows; 1 affected row and the token as its insert
/// id if drawn, else 0 affected rows.
pub(super) fn fence_permit(table: &str, slots: usize) -> String {
    format!(
        "UPDATE {table} SET token = LAST_INSERT_ID(token + 1) \
         WHERE name = ? AND permits IS NOT NULL AND IS_USED_LOCK(?) IS NULL AND {} <= permits",
        held(slots)
    )
}

/// Draws the fencing token of a lock just taken on a name that has been a semaphore, if
/// none of its `slots` slots is held, recording the session's connection id beside it.
/// `?`: the lock name (text), then each slot's name (text). Returns no rows; 1 affected
/// row and the token as its insert id if drawn, else 0 affected rows.
pub(super) fn fence_unless_permits(table: &str, slots: usize) -> String {
    format!(
        "UPDATE {table} SET token = LAST_INSERT_ID(token + 1), held_by = CONNECTION_ID() \
         WHERE name = ? AND {} = 0",
        held(slots)
    )
}

/// How many of `slots` user locks are held, as an expression over `slots` parameters:
/// each lock's name (text).
fn held(slots: usize) -> String {
    if slots == 0 {
        return "0".into();
    }
    vec!["(IS_USED_LOCK(?) IS NOT NULL)"; slots].join(" + ")
}
