//! Every statement the store sends, each with a header naming its parameters (`$n`, with
//! their types) and what it answers. The other files of the store run these and read
//! their rows; none builds SQL of its own.
//!
//! `table` is always the fence table, whose name the builder checked (ASCII letters,
//! digits and `_`, or `schema.name`), so it is written into the text. A key is the
//! caller's (text); an advisory key, the store key it maps to, "as `pg_locks` shows it"
//! is `classid` and `objid` (int8, each an unsigned 32-bit oid) and `objsubid` (int2: 1
//! for a bigint, 2 for a pair); a semaphore's slots' `classid` is the upper half of every
//! slot's advisory key, shown the same way.

use crate::LockKind;

/// The channel a permit given back, or a semaphore's count stored, is announced on.
const CHANNEL: &str = "lock_permits";

/// Announces that the holders of a key changed, for the followers of an election: on the
/// channel `lock_holders`, with the key as the payload.
/// `$1` the key (text).
/// Answers one row, which nobody reads.
pub(super) const ANNOUNCE_HOLDERS: &str = "SELECT pg_notify('lock_holders', $1)";

/// Listens for the holders of keys announced changed ([`ANNOUNCE_HOLDERS`]).
/// No parameters; answers nothing.
pub(super) const LISTEN_FOR_HOLDERS: &str = "LISTEN lock_holders";

/// How many parameters an advisory key takes: one `int8`, or two `int4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyShape {
    /// `pg_advisory_lock(bigint)`: one parameter.
    Bigint,
    /// `pg_advisory_lock(int4, int4)`: two parameters.
    Pair,
}

/// Whether a statement waits for the lock or makes one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Attempt {
    /// `pg_try_advisory_lock`: never waits.
    Once,
    /// `pg_advisory_lock`: waits in the server's queue, under `lock_timeout`.
    Wait,
}

/// Keeps a session busy, so that the server does not end it as idle.
/// No parameters; answers nothing.
pub(super) const PING: &str = "";

/// Leases a new session and listens on it for permits given back.
/// No parameters; answers nothing. `lease_ms`: the session lease, in milliseconds.
pub(super) fn open_session(lease_ms: u128) -> String {
    format!("SET idle_session_timeout = {lease_ms}; LISTEN {CHANNEL}")
}

/// Creates the fence table if it is missing: one row a key, with its last fencing
/// token (`fence`), its semaphore count (`permits`), and the owner token, backend pid
/// and holder id of the hold taken last (`holder`, `held_by`, `holder_id`).
/// No parameters; answers nothing.
pub(super) fn create_fence_table(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (name text PRIMARY KEY, fence bigint NOT NULL, \
         permits bigint, holder text, held_by int, holder_id text)"
    )
}

/// Adds the columns `permits`, `holder`, `held_by` and `holder_id` to a fence table made
/// without them, and does nothing (no `ALTER TABLE`, which would queue behind every
/// statement on the table) when all four are there.
/// No parameters; answers nothing.
pub(super) fn complete_fence_table(table: &str) -> String {
    format!(
        "DO $$ BEGIN \
         IF (SELECT count(*) FROM pg_attribute WHERE attrelid = '{table}'::regclass \
           AND attname IN ('permits', 'holder', 'held_by', 'holder_id') \
           AND NOT attisdropped) < 4 THEN \
         ALTER TABLE {table} ADD COLUMN IF NOT EXISTS permits bigint, \
           ADD COLUMN IF NOT EXISTS holder text, ADD COLUMN IF NOT EXISTS held_by int, \
           ADD COLUMN IF NOT EXISTS holder_id text; \
         END IF; END $$"
    )
}

/// Takes the advisory lock as `attempt` (shared for a read), and draws its fencing token
/// from `table`, recording there the owner token, the session's pid and the holder id;
/// unless the key's row says it has been a semaphore and one of its permits is held
/// (`pg_locks`, read after the lock was taken): then it gives the lock back.
/// `$1` the key (text), `$2` the owner token (text), `$3` the holder id (text, null for
/// none), `$4` the key's slots' `classid` (int8), `$5` the advisory key (int8), or `$5`,
/// `$6` (int4, int4) for a pair.
/// Answers one row, the fencing token (`fence`, int8), if it took the lock and kept it;
/// no row if it gave it back, or ([`Attempt::Once`]) if the lock is held.
pub(super) fn take(table: &str, shape: KeyShape, kind: LockKind, attempt: Attempt) -> String {
    let (function, unlock) = match (kind, attempt) {
        (LockKind::Read, Attempt::Once) => {
            ("pg_try_advisory_lock_shared", "pg_advisory_unlock_shared")
        }
        (LockKind::Read, Attempt::Wait) => ("pg_advisory_lock_shared", "pg_advisory_unlock_shared"),
        (_, Attempt::Once) => ("pg_try_advisory_lock", "pg_advisory_unlock"),
        (_, Attempt::Wait) => ("pg_advisory_lock", "pg_advisory_unlock"),
    };
    let args = key_args(shape, 5);
    let call = format!("{function}({args})");
    let taken = match attempt {
        Attempt::Once => call,
        Attempt::Wait => format!("{call} IS NOT NULL"),
    };
    let permits_held = permits_held("$4");
    format!(
        "WITH fenced AS (INSERT INTO {table} (name, fence, holder, held_by, holder_id) \
           SELECT $1, 1, $2::text, pg_backend_pid(), $3::text WHERE {taken} \
           ON CONFLICT (name) DO UPDATE SET fence = {table}.fence + 1, \
           holder = excluded.holder, held_by = excluded.held_by, \
           holder_id = excluded.holder_id RETURNING fence, permits) \
         SELECT fence FROM fenced WHERE CASE WHEN permits IS NULL THEN true \
         WHEN NOT EXISTS ({permits_held}) THEN true ELSE NOT {unlock}({args}) END"
    )
}

/// Bounds the next [`take`] that waits: it fails with `lock_not_available` after
/// `timeout_ms` milliseconds.
/// No parameters; answers nothing.
pub(super) fn lock_timeout(timeout_ms: u128) -> String {
    format!("SET lock_timeout = {timeout_ms}")
}

/// Lifts the bound [`lock_timeout`] set.
/// No parameters; answers nothing.
pub(super) const NO_LOCK_TIMEOUT: &str = "SET lock_timeout = 0";

/// Gives back every advisory lock the session holds.
/// No parameters; answers one row, which nobody reads.
pub(super) const UNLOCK_ALL: &str = "SELECT pg_advisory_unlock_all()";

/// Gives back one hold of an advisory key of the `kind` given (shared for a read), and
/// announces a permit given back on the channel every session listens on.
/// `$1` the advisory key (int8), or `$1`, `$2` (int4, int4) for a pair.
/// Answers one row: whether the session held it (bool), and for a permit the
/// announcement's empty result besides.
pub(super) fn unlock(shape: KeyShape, kind: LockKind) -> String {
    let function = match kind {
        LockKind::Read => "pg_advisory_unlock_shared",
        _ => "pg_advisory_unlock",
    };
    let announce = match kind {
        LockKind::Semaphore { .. } => format!(", pg_notify('{CHANNEL}', '')"),
        _ => String::new(),
    };
    format!("SELECT {function}({}){announce}", key_args(shape, 1))
}

/// Takes a free permit slot of a semaphore whose count is stored, if fewer than the count
/// are held and the count is `$2`; gives it back at once if anyone holds the key's own
/// advisory key; and draws the fencing token from the key's row, which it locks (`FOR
/// UPDATE`) so that attempts on one semaphore take turns.
/// `$1` the key (text), `$2` the count asked with (int8), `$3` the upper half of the
/// slots' advisory keys (int8, signed), `$4` the slots' `classid` (int8), `$5`, `$6`,
/// `$7` the key's advisory key as `pg_locks` shows it.
/// Answers no row if no count is stored; else one row: the stored count (`permits`,
/// int8), and the fencing token and the slot taken (int8, int8), each null if none was.
pub(super) fn take_permit(table: &str) -> String {
    let held = permits_held("$4");
    let names_lock = key_locks(5);
    format!(
        "WITH stored AS MATERIALIZED (SELECT permits FROM {table} \
         WHERE name = $1 AND permits IS NOT NULL FOR UPDATE), \
         held AS MATERIALIZED ({held}), \
         free AS MATERIALIZED (SELECT slot FROM stored, generate_series(0, \
             CASE WHEN stored.permits = $2::int8 AND (SELECT count(*) FROM held) < $2 \
             THEN (SELECT count(*) FROM held) ELSE -1 END) AS slot \
           WHERE CASE WHEN slot NOT IN (SELECT slot FROM held) \
             THEN pg_try_advisory_lock(($3::int8 << 32) | slot) ELSE false END \
           LIMIT 1), \
         clear AS MATERIALIZED (SELECT slot FROM free \
           WHERE CASE WHEN EXISTS (SELECT FROM pg_locks WHERE granted AND {names_lock}) \
             THEN NOT pg_advisory_unlock(($3::int8 << 32) | slot) ELSE true END), \
         taken AS (UPDATE {table} SET fence = {table}.fence + 1 FROM clear \
           WHERE {table}.name = $1 RETURNING {table}.fence, clear.slot) \
         SELECT stored.permits, taken.fence, taken.slot FROM stored LEFT JOIN taken ON true"
    )
}

/// Stores a semaphore's count on first use: only where none is stored yet.
/// `$1` the key (text), `$2` the count (int8).
/// Answers the rows affected: 1 if it stored the count, 0 if one was stored.
pub(super) fn store_first_count(table: &str) -> String {
    format!(
        "INSERT INTO {table} (name, fence, permits) VALUES ($1, 0, $2) \
         ON CONFLICT (name) DO UPDATE SET permits = $2 WHERE {table}.permits IS NULL"
    )
}

/// Stores a semaphore's count, whatever was stored, and announces it on the channel every
/// session listens on (a raised count may let a waiter in).
/// `$1` the key (text), `$2` the count (int8).
/// Answers one row: the count stored (`permits`, int8).
pub(super) fn store_count(table: &str) -> String {
    format!(
        "WITH stored AS (INSERT INTO {table} (name, fence, permits) VALUES ($1, 0, $2) \
         ON CONFLICT (name) DO UPDATE SET permits = $2 RETURNING permits) \
         SELECT stored.permits FROM stored, pg_notify('{CHANNEL}', '')"
    )
}

/// Counts a semaphore's permits: stored and held.
/// `$1` the key (text), `$2` the slots' `classid` (int8), `$3`, `$4`, `$5` the key's
/// advisory key as `pg_locks` shows it.
/// Answers one row: the stored count (int8, null if none), the permits held by anyone
/// (int8), and whether anyone holds the key's own advisory key (bool).
pub(super) fn count_permits(table: &str) -> String {
    let held = permits_held("$2");
    let names_lock = key_locks(3);
    format!(
        "SELECT (SELECT permits FROM {table} WHERE name = $1), \
         (SELECT count(*) FROM ({held}) AS held), \
         EXISTS (SELECT FROM pg_locks WHERE granted AND {names_lock})"
    )
}

/// A semaphore's stored count, and the slots of its permits held.
/// `$1` the key (text), `$2` the slots' `classid` (int8).
/// Answers one row a permit held, by anyone: the stored count (`permits`, int8) and the
/// slot's number (`slot`, int8); no row if none is held or no count is stored.
pub(super) fn inspect_permits(table: &str) -> String {
    let held = permits_held("$2");
    format!(
        "SELECT stored.permits, held.slot FROM {table} AS stored, ({held}) AS held \
         WHERE stored.name = $1 AND stored.permits IS NOT NULL"
    )
}

/// The sessions that hold or wait for an advisory key, each with its key's row of the
/// fence table.
/// `$1`, `$2`, `$3` the advisory key as `pg_locks` shows it, `$4` the key (text).
/// Answers one row a session holding or waiting: its backend's pid (`pid`, int4), its
/// lock mode (`mode`, text: `ShareLock` for a shared hold), whether it holds it
/// (`granted`, bool), and the row's `holder` (text), `held_by` (int4), `fence` (int8)
/// and `holder_id` (text), each null if the key has no row.
pub(super) fn inspect(table: &str) -> String {
    format!(
        "SELECT pid, mode, granted, holder, held_by, fence, holder_id \
         FROM pg_locks LEFT JOIN {table} AS fences ON fences.name = $4 WHERE {}",
        key_locks(1)
    )
}

/// Ends (`pg_terminate_backend`) every session of the database that holds an advisory
/// key or a permit of the semaphore of the same key.
/// `$1`, `$2`, `$3` the advisory key as `pg_locks` shows it, `$4` the slots' `classid`
/// (int8).
/// Answers one row: how many sessions it ended (int8).
pub(super) fn force_unlock() -> String {
    let permits = permits_held("$4");
    let names_lock = key_locks(1);
    format!(
        "SELECT count(pg_terminate_backend(pid)) FROM (\
         SELECT pid FROM pg_locks WHERE granted AND {names_lock} \
         UNION SELECT pid FROM ({permits}) AS permits) AS holders"
    )
}

/// A condition on the rows of `pg_locks`: those of one advisory key in this database,
/// given as `pg_locks` shows it in the parameters numbered from `first`.
fn key_locks(first: usize) -> String {
    format!(
        "locktype = 'advisory' \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND classid::int8 = ${first} AND objid::int8 = ${} AND objsubid = ${}",
        first + 1,
        first + 2
    )
}

/// A query for the permits held of one semaphore, whose slots' `classid` is the
/// parameter `classid` (such as `$4`): one row a slot held, its number (`slot`, int8)
/// and its holder's pid (`pid`, int4).
fn permits_held(classid: &str) -> String {
    format!(
        "SELECT objid::int8 AS slot, pid FROM pg_locks \
         WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND classid::int8 = {classid} \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
}

/// An advisory key's arguments to an advisory lock function, as parameters numbered
/// from `first`.
fn key_args(shape: KeyShape, first: usize) -> String {
    match shape {
        KeyShape::Bigint => format!("${first}::int8"),
        KeyShape::Pair => format!("${first}::int4, ${}::int4", first + 1),
    }
}
