//! Locks as PostgreSQL advisory locks, keyed as madelson's DistributedLock keys them,
//! fenced by a counter table: [`PostgresStore`] (feature `postgres`). The locks live in the
//! database the service already runs, and a .NET service using DistributedLock, a Python
//! service using pals and a Rust service using this crate share a lock by its name.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use lock_core::Locker;
//! use lock_core::backend::PostgresStore;
//!
//! let locker = Locker::postgres("postgres://app:secret@10.0.0.5:5432/app").await?;
//! let guard = locker.lock("billing.balance:42").await?;
//! // Strictly greater for every later hold of the key by this crate, across restarts.
//! let fence = guard.fencing_token();
//! # let _ = fence;
//! guard.release().await?;
//!
//! // Or with settings of its own.
//! let store = PostgresStore::builder("postgres://app:secret@10.0.0.5:5432/app")
//!     .max_connections(10)
//!     .session_lease(Duration::from_secs(10))
//!     .build()
//!     .await?;
//! let billing = Locker::builder().store(Arc::new(store)).build().await?;
//! # let _ = billing;
//! # Ok(())
//! # }
//! ```
//!
//! # Keys
//!
//! The lock `K` is the advisory lock that [`KeyMapping::DistributedLock`] gives for `K`
//! (see there), its store key: a .NET service's `new PostgresDistributedLock(new
//! PostgresAdvisoryLockKey("K", allowHashing: true), connectionString)` takes the same
//! lock. An ASCII key of at most 9 characters is a pair of int4 keys
//! (`pg_advisory_lock(int4, int4)`), and a hashed key one bigint; a peer must pass the
//! same form, as the two are different locks. For an explicit advisory key (sqlx's
//! migration lock, hand-written SQL), lock the key that [`AdvisoryKey`] displays (16 hex
//! digits, or `XXXXXXXX,XXXXXXXX`).
//!
//! A Python service using pals shares a lock too: pals' `Locker("billing",
//! url).lock("balance:42")` takes the bigint of SHA-1 of `billing.balance:42`, which is
//! this store's lock `billing.balance:42`. pals hashes every name, so a full name
//! (`app.name`) of at most 9 ASCII characters, or of 16 hex digits, is a different lock
//! on each side, unless the store hashes every key too ([`KeyMapping::Hashed`]).
//!
//! The advisory key is all PostgreSQL knows of a lock, and it has no namespace (the
//! `Locker`'s namespace is a Redis setting). Two applications sharing one database keep
//! their locks apart by keying them apart (a prefix of their own, such as `billing:`,
//! which makes every key longer than 9 characters a hashed one), or by using databases
//! of their own: advisory locks are per database.
//!
//! # Kinds
//!
//! | kind | server side |
//! |---|---|
//! | exclusive, fair, write | `pg_advisory_lock` |
//! | read | `pg_advisory_lock_shared`, on the same advisory key |
//! | semaphore | `pg_try_advisory_lock` of one of the key's permit slots (below) |
//!
//! A wait happens inside the server: `pg_advisory_lock` under `SET lock_timeout`, on a
//! session that holds nothing else, so the server's first-come-first-served queue orders
//! every waiter, foreign ones included, and a release by anyone (`psql`, DistributedLock)
//! wakes the next at once. Exclusive and fair locks are therefore the same. Within one
//! store, one session at most waits on a key, and holders of one key are kept apart
//! locally (a session never blocks itself); a lock that is free is taken in one attempt
//! (`pg_try_advisory_lock`) on any session that is not waiting and holds nothing of that
//! key, so holds of different keys share sessions, and each hold of a key is a
//! `pg_locks` row of its own.
//!
//! ## Semaphores
//!
//! Permit `i` (from 0) of the semaphore `K` is the advisory lock of the bigint whose
//! upper 32 bits are those of [`KeyMapping::Hashed`]'s advisory key for `K#permits` and
//! whose lower 32 bits are `i` (`pg_locks` shows it with `classid` the upper half,
//! `objid` `i`, `objsubid` 1). The count is stored in the `permits` column of the fence
//! table's row of `K` on first use; a handle with another count is refused
//! ([`LockError::Config`]) until the count is changed. An attempt is one statement: it
//! locks that row (`FOR UPDATE`: attempts on one semaphore take turns), counts the slots
//! held in `pg_locks` (every slot, so holders above a lowered count stay counted), takes
//! the first free slot if fewer than the count are held, and draws the fencing token
//! from the same row. A permit lives on its session, as every hold does: a holder that
//! dies frees it.
//!
//! A permit's waiter tries again when a permit is announced given back (this crate's
//! releases send `NOTIFY lock_permits`, and every session of the store `LISTEN`s), and
//! every 250 ms besides: a session that ends frees its slots without a word (as does a
//! release of the key's own advisory lock, which may have kept permits out), and no
//! statement can wait inside the server for whichever of several slots comes free first
//! (waiting on each would take a connection a permit). So a permit freed by a dead
//! holder, or by a foreign client, is found within 250 ms.
//!
//! One key's kinds exclude each other, while readers share with readers and permits with
//! permits: two lock modes cannot say that (a reader stays `pg_advisory_lock_shared` on the
//! key's advisory key, as DistributedLock's is). So each side takes its own lock first and
//! then, in the same statement, looks for the other's in `pg_locks`, giving its own back if
//! it finds one. A permit attempt, having taken its slot, looks for any hold of the key's
//! advisory key; a take of the key's advisory key, once granted, looks for a held slot, but
//! only if the key's row says it has been a semaphore (keys never used as one pay nothing).
//! Were both let in, each one's look would have come before the other's take, though each
//! took before it looked: impossible, since a granted advisory lock is in `pg_locks` for
//! every session at once (the view reads the server's shared lock table). A waiter inside
//! the server that is granted the key's advisory key while a permit is held gives it back
//! and waits again as a permit's waiter does.
//!
//! A foreign client sees the permits as advisory locks on the slots' advisory keys. It may
//! take a free slot below the count with `pg_try_advisory_lock`, which this store counts;
//! but a foreign reader or writer of `K` does not look for permits, so only this store's
//! permits give way to it, not the other way round.
//!
//! # Fencing tokens
//!
//! The statement that takes a lock also draws its token from the fence table
//! ([`PostgresStoreBuilder::fence_table`], created on first use): `INSERT .. ON CONFLICT
//! (name) DO UPDATE SET fence = fence + 1 RETURNING fence`, one row a key (in its `name`
//! column), durable across server restarts. Only this crate's holders draw one: a foreign
//! holder of the same key does not. The row also records the owner token of the hold taken
//! last and its session's pid (`holder`, `held_by`), for `inspect`, and the holder id it
//! was taken with (`holder_id`, such as an election candidate's id), written by the same
//! statement, so that `inspect` on any session, one that holds nothing included, reads it.
//!
//! # Elections
//!
//! An [election](crate::Election)'s leader is the holder of its lock, and its id is the
//! `holder_id` of the lock's row (above), so `leader()` reads it from any process. Each
//! hold taken with a holder id is announced once taken, and again once given back or
//! forced out (`NOTIFY lock_holders`, the key as the payload, sent after the statement
//! that took or freed the lock), and a follower's [`watch`](crate::Election::watch)
//! listens on a connection of its own (`LISTEN lock_holders`): it learns of a new leader
//! in a round trip or two. A leader whose session ends unannounced (a crash, a pause past
//! its lease) is noticed at the follower's next interval. Plain locks announce nothing.
//! The lock is taken a moment before the statement that takes it commits its row: in
//! that moment, should the session have taken the same lock before, `inspect` shows the
//! earlier hold's holder id and token against it.
//!
//! # Sessions
//!
//! A hold lasts as long as its session. The server ends a session idle for longer than
//! the [session lease](PostgresStoreBuilder::session_lease) (`idle_session_timeout`,
//! PostgreSQL 14 or later), and the store sends an empty statement on each of its
//! sessions every third of a lease, so a process that is paused or wedged loses its locks
//! about one lease later. When a session ends (its connection drops, an operator's
//! `pg_terminate_backend`, a server restart or failover), every hold on it reports
//! [`lost`](crate::LockGuard::lost) at once and `with_lock` is cancelled.
//! [`force_unlock`](crate::Locker::force_unlock) ends the sessions that hold the lock,
//! with every other hold on them.
//!
//! A session is trusted only as long as the server has confirmed it: it lives at least
//! one lease from when the latest statement the server answered on it was sent, on this
//! process's monotonic clock. Past that instant without a newer answer, the store ends
//! it: its holds report `lost()`, and [`is_held`](crate::LockGuard::is_held) and
//! `release` answer not held. So a process paused past its lease claims none of its
//! holds once it runs again, and a lock its paused call was granted meanwhile is not
//! handed out (the call asks the server whether the session still lives first, and
//! counts one that does not as a failed attempt).
//!
//! What faults mean (the tests in `tests/tests/postgres.rs` and the torture scenarios):
//!
//! - **A paused server** (`SIGSTOP`): lock calls return by their deadline with
//!   [`Timeout`](crate::LockError::Timeout) (a call that does not wait, within one
//!   lease); a lock a call's statement takes once the server answers is given back.
//!   Once a lease passes with no answer, the store ends its sessions and their holds are
//!   lost. The server, as it resumes, ends every session idle past
//!   `idle_session_timeout` too, so a pause longer than the lease loses every hold
//!   whatever the clients do; a shorter one loses nothing.
//! - **A restarted server** or a failover: every session ends with its connection; the
//!   holds are lost at once, and the fencing tokens, kept in the fence table, go on
//!   rising.
//! - **A paused process**: its sessions go idle and the server ends them one lease
//!   later; when the process runs again, its holds are lost at once.
//!
//! Every statement the store sends is in `sql.rs`, with its parameters and what it
//! answers.
//!
//! # TLS
//!
//! The url's `sslmode` says whether the connections use TLS and how far the server's
//! certificate is checked, as libpq reads it (in either form: `?sslmode=verify-full`, or
//! `sslmode=verify-full` among `key=value` pairs):
//!
//! | `sslmode` | connection | the server's certificate |
//! |---|---|---|
//! | `disable` | plain | |
//! | `prefer` (the default) | TLS if the server offers it, else plain | as `require` |
//! | `require` | TLS | its chain, only if a root certificate is given |
//! | `verify-ca` | TLS | its chain |
//! | `verify-full` | TLS | its chain, and that it is for the url's host |
//!
//! The chain is checked against the authority given to
//! `PostgresStoreBuilder::tls_root_certificate`, else the url's `sslrootcert=<file>` (PEM
//! certificates), else the system's authorities (for `verify-ca` and `verify-full`, or
//! with `sslrootcert=system`). TLS is rustls's, with ring, and needs lock-core's `tls`
//! feature: without it, a url that asks for TLS (`require`, `verify-ca`, `verify-full`,
//! `sslrootcert`) is refused with [`LockError::Config`], and `prefer` connects plainly.
//! Channel binding is not offered (SCRAM authenticates without it, as
//! `channel_binding=prefer` allows); client certificates are not supported.

mod builder;
mod connector;
mod followers;
mod key;
mod operator;
mod semaphore;
mod session;
mod sql;
mod ssl;
mod take;
#[cfg(feature = "tls")]
mod tls;

use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use tokio_util::sync::CancellationToken;

pub use builder::{
    DEFAULT_FENCE_TABLE, DEFAULT_MAX_CONNECTIONS, DEFAULT_SESSION_LEASE, PostgresStoreBuilder,
};
pub use key::{AdvisoryKey, KeyMapping};
use session::{Connect, Session};

use crate::backend::sql::session_locks::{self, Server, SessionLocks, Taken};
use crate::backend::store::{Acquire, Hold, HolderChanges, Outcome, Renewal, Store, StoreFuture};
use crate::{LockError, LockInfo, LockKey, LockKind};

/// Locks as PostgreSQL advisory locks: see the [module docs](crate::backend::postgres)
/// for the keys, the kinds, the fencing tokens and the sessions. Made with
/// [`PostgresStore::builder`], or by [`Locker::postgres`](crate::Locker::postgres).
/// Cheap to clone: clones share the sessions.
#[derive(Clone)]
pub struct PostgresStore(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    locks: SessionLocks<PostgresStore>,
    fence_table: String,
    mapping: KeyMapping,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("fence_table", &self.0.fence_table)
            .field("mapping", &self.0.mapping)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Configures a store on the database of `url`, such as
    /// `"postgres://user:pass@host:5432/db"` (or libpq's `key=value` form). See
    /// [`PostgresStoreBuilder`].
    pub fn builder(url: &str) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(url)
    }

    /// Ends every session of this store, as if each connection dropped: every hold on
    /// them reports [`lost`](crate::LockGuard::lost). The next acquisition opens a new
    /// session.
    pub async fn end_session(&self) {
        self.0.locks.sessions.end_all();
    }

    /// Opens the first session and creates the fence table if it is missing.
    async fn connect(
        connect: Connect,
        max_connections: usize,
        fence_table: String,
        mapping: KeyMapping,
    ) -> Result<Self, LockError> {
        let store = Self(Arc::new(Inner {
            locks: SessionLocks::new(connect, max_connections),
            fence_table,
            mapping,
        }));
        store.create_fence_table().await?;
        Ok(store)
    }

    /// Creates the fence table if it is missing, then adds the columns an earlier version
    /// made it without (`permits`, `holder`, `held_by`, `holder_id`), only if one is
    /// missing: `ALTER TABLE` would wait for every statement under way on the table, and
    /// hold up every later one meanwhile.
    async fn create_fence_table(&self) -> Result<(), LockError> {
        let Some(serving) = self.0.locks.sessions.for_attempt().await? else {
            return Ok(());
        };
        let table = &self.0.fence_table;
        let client = &serving.session.client;
        let create = sql::create_fence_table(table);
        let complete = sql::complete_fence_table(table);
        let created = match client.batch_execute(&create).await {
            Err(e) if !created_meanwhile(&e) => Err(e),
            _ => client.batch_execute(&complete).await,
        };
        created.map_err(|e| {
            LockError::backend(
                format!("postgres: cannot create the fence table {table}"),
                e,
            )
        })
    }

    /// Runs `sql`, which never waits, on a session that is not waiting, or on a
    /// connection of its own when every one is; its error is the lock `key`'s, met while
    /// `doing`.
    async fn query(
        &self,
        key: &LockKey,
        doing: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, LockError> {
        let rows = match self.0.locks.sessions.for_attempt().await? {
            Some(serving) => serving.session.client.query(sql, params).await,
            None => {
                let client = self.0.locks.sessions.connector.once().await?;
                client.query(sql, params).await
            }
        };
        rows.map_err(|e| failed(key, doing, e))
    }
}

/// The error of a statement about the lock `key` that failed while `doing`.
fn failed(key: &LockKey, doing: &str, error: tokio_postgres::Error) -> LockError {
    LockError::failed("postgres", key, doing, error)
}

/// Whether `CREATE TABLE IF NOT EXISTS` failed because another store created the table at
/// the same moment: the server says so on the table's row type (`duplicate_object`), its
/// name (`duplicate_table`) or a catalog's unique index (`unique_violation`), as the two met.
fn created_meanwhile(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    let exists = [
        SqlState::DUPLICATE_OBJECT,
        SqlState::DUPLICATE_TABLE,
        SqlState::UNIQUE_VIOLATION,
    ];
    e.code().is_some_and(|code| exists.contains(code))
}

impl Server for PostgresStore {
    type StoreKey = AdvisoryKey;
    type Session = Session;
    type Connector = Connect;

    const NAME: &'static str = "postgres";

    fn locks(&self) -> &SessionLocks<Self> {
        &self.0.locks
    }

    fn store_key(&self, key: &LockKey) -> Result<AdvisoryKey, LockError> {
        Ok(self.0.mapping.key(key.as_str()))
    }

    /// Gives the lock back at once if a permit of it is held.
    async fn once(
        &self,
        session: &Session,
        request: &Acquire,
        store_key: &AdvisoryKey,
        _: &CancellationToken,
    ) -> Result<Option<u64>, LockError> {
        take::once(session, &self.0.fence_table, request, *store_key).await
    }

    async fn wait(
        &self,
        session: &Session,
        request: &Acquire,
        store_key: &AdvisoryKey,
        abandoned: CancellationToken,
    ) -> Result<Option<u64>, LockError> {
        take::wait(session, &self.0.fence_table, request, *store_key, abandoned).await
    }

    async fn take_permit(
        &self,
        request: &Acquire,
        permits: u32,
        abandoned: CancellationToken,
    ) -> Result<Option<Taken<Self>>, LockError> {
        self.take_permit(request, permits, abandoned).await
    }

    async fn unlock(
        &self,
        session: &Session,
        key: &LockKey,
        store_key: &AdvisoryKey,
        kind: LockKind,
    ) -> Result<bool, LockError> {
        take::unlock(session, *store_key, kind)
            .await
            .map_err(|e| failed(key, "release it", e))
    }
}

impl Store for PostgresStore {
    fn name(&self) -> &str {
        "postgres"
    }

    /// Every kind (see the module docs).
    fn supports(&self, _kind: LockKind) -> bool {
        true
    }

    /// A hold taken with a holder id is announced to the followers of its election.
    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        Box::pin(async move {
            let outcome = session_locks::acquire(self, request).await?;
            if request.holder_id.is_some() && matches!(outcome, Outcome::Acquired(_)) {
                self.announce_holders(&request.key).await;
            }
            Ok(outcome)
        })
    }

    /// A hold taken with a holder id is announced given back.
    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let released = session_locks::release(self, hold).await?;
            if released && hold.holder_id.is_some() {
                self.announce_holders(hold.key).await;
            }
            Ok(released)
        })
    }

    /// The stored count (or `permits`) less the permits held, by anyone.
    fn available<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, u32> {
        Box::pin(self.available_permits(key, permits))
    }

    fn set_permits<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, ()> {
        Box::pin(self.store_permits(key, permits))
    }

    /// Nothing to renew: every hold is a session's.
    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        Box::pin(std::future::ready(Ok(vec![None; leases.len()])))
    }

    /// Whether the hold's session lives.
    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(std::future::ready(Ok(self.0.locks.is_held(hold.token))))
    }

    /// Announced to the followers of an election, as a release is.
    fn force_unlock<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let forced = self.force_unlock_lock(key).await?;
            if forced {
                self.announce_holders(key).await;
            }
            Ok(forced)
        })
    }

    /// As `pg_locks` shows the lock: each holding session is one holder (this crate never
    /// stacks two holds of a key on one session). The one that took it last through
    /// this crate shows its owner token, its fencing token, its holder id (an election
    /// leader's id) and its kind, as the fence table records them, so any session reads
    /// them; any other by its backend's pid (in 8 hex digits, in place of a token), a
    /// shared hold as a read and any other as exclusive. Then the sessions waiting, foreign ones included (this store's other tasks wait behind its one
    /// waiting session, uncounted). A semaphore shows its stored count and one holder
    /// per permit slot held, by the slot's number. No lease left.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        Box::pin(self.inspect_lock(key))
    }

    /// A connection of its own that listens for the holds taken and given back with a
    /// holder id (see the [module docs](crate::backend::postgres#elections)); not for a
    /// session that ends unannounced.
    fn watch_holders<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, HolderChanges> {
        Box::pin(self.watch_named_holders(key))
    }

    fn flush(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.0.locks.flush())
    }
}
