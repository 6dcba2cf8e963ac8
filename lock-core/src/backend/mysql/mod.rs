//! Locks as MySQL or MariaDB user locks (`GET_LOCK`), named as madelson's DistributedLock
//! names them, fenced by a counter table: [`MySqlStore`] (feature `mysql`). The locks live in
//! the database the service already runs, and a .NET service using DistributedLock shares
//! them by their names.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use lock_core::Locker;
//!
//! let locker = Locker::mysql("mysql://app:secret@10.0.0.5:3306/app").await?;
//! let guard = locker.lock("balance:42").await?;
//! // Strictly greater for every later hold of the key by this crate, across restarts.
//! let fence = guard.fencing_token();
//! # let _ = fence;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Every statement the store sends is in `sql.rs`, each with its parameters and what it
//! returns.
//!
//! # TLS
//!
//! The url says whether the connections use TLS and how far the server's certificate is
//! checked, as mysql_async reads it: `require_ssl=true` asks for TLS, checking the
//! certificate's chain and that it is for the url's host; `verify_ca=false` checks
//! neither, `verify_identity=false` not the host. The chain is checked against the
//! authority given to `MySqlStoreBuilder::tls_root_certificate`, else the authorities
//! built in (webpki-roots', unless `built_in_roots=false`). TLS is rustls's, with ring,
//! and needs lock-core's `tls` feature: without it, a url with `require_ssl=true` is
//! refused with [`LockError::Config`]. mysql_async asks rustls for the process's default
//! crypto provider: should another crate of the application build rustls with a second
//! provider (aws-lc-rs, rustls's default), there is none until the application installs
//! one at start, such as `rustls::crypto::ring::default_provider().install_default()`.
//!
//! # Names
//!
//! The lock `K` is the user lock that [`NameMapping::DistributedLock`] names for `K` (see
//! there), whose name is its store key: a key that is lowercase and at most 64
//! characters as it is, any other cut and hashed. A .NET service's `new
//! MySqlDistributedLock("K", connectionString)` takes the same lock, and so does `SELECT
//! GET_LOCK('k', 10)` by hand for a lowercase `k`; [`NameMapping::lock_name`] gives the
//! name to pass for any other. With [`NameMapping::Exact`], keys go to the server as
//! they are (DistributedLock's `exactName: true`). User locks are per server, not per
//! database, and their names are compared byte for byte on MariaDB: nothing else is
//! added to them (the `Locker`'s namespace is a Redis setting), so applications that
//! share a server keep their locks apart by keying them apart.
//!
//! # Kinds
//!
//! | kind | server side |
//! |---|---|
//! | exclusive | `GET_LOCK` / `RELEASE_LOCK` |
//! | semaphore | a `GET_LOCK` of one of the name's permit slots, its count in the fence table |
//! | fair, read, write | unsupported |
//!
//! The server has no shared user lock, so no faithful read lock; and `GET_LOCK` serves
//! its waiters in no promised order, so no fair one.
//!
//! A wait happens inside the server: `GET_LOCK` with the time left, on a session that
//! holds nothing else, so a release by anyone (the `mariadb` client, DistributedLock)
//! wakes it at once. Within one store, one session at most waits on a name, and holders
//! of one name are kept apart locally (a session's `GET_LOCK`s stack, so it never blocks
//! itself); a lock that is free is taken in one attempt (`GET_LOCK(name, 0)`) on a
//! session that is not waiting, so holds share sessions. MariaDB takes `GET_LOCK`'s
//! timeout to the microsecond; MySQL rounds it to whole seconds, so there a wait that
//! gives up early is followed by another, and one may end up to half a second late. The
//! store is tested against MariaDB 10.11.
//!
//! ## Semaphores
//!
//! Permit `i` (from 0) of the semaphore `K` is the user lock that
//! [`NameMapping::DistributedLock`] names for `}L#i`, where `L` is `K`'s lock name
//! (`}jobs#0` for `jobs`): no key starts with `}`, so no lock of a key is a slot. The
//! count is stored in the `permits` column of the fence table's row of `L` on first use,
//! and `slots` keeps the highest count it ever had; a handle with another count is
//! refused ([`LockError::Config`]) until the count is changed, and a count above
//! [`MAX_PERMITS`] is refused, as every attempt looks at each slot. An attempt reads the
//! row, finds the first slot below the count that nobody holds (`IS_USED_LOCK`), takes
//! it only if it is still free (a session's `GET_LOCK`s of one name stack, so it must
//! not take a slot it holds already), and then, in the statement that draws the fencing
//! token, counts every slot held, its own included (holders above a lowered count stay
//! counted), and looks for a hold of `L`: if more than the count hold a slot, or `L` is
//! held, it gives its slot back. A permit lives on its session, as every hold does: a
//! holder that dies frees it.
//!
//! A hold of `L` looks for permits in the same way: the statement that takes `L` draws
//! no fencing token from a row with `slots` set (it answers with insert id 0), and a
//! second statement draws it only if no slot is held. Each side takes its own lock
//! first and then looks for the other's, so two that overlap cannot both stay: the
//! later look sees the earlier take. While slots are held, a hold of `L` that may still
//! wait keeps `L`, so that new permits keep out and the held ones drain, as readers do
//! before a waiting writer, and looks again each time this store gives a permit back
//! and every 250 ms, until its deadline, when it gives `L` back. So a busy semaphore
//! never starves its name's exclusive lock.
//!
//! A permit's waiter tries again each time this store gives a permit back, and every
//! 250 ms besides: a session that ends frees its slots without a word, as does another
//! process's release, and no statement can wait inside the server for whichever of
//! several slots comes free first. So a permit freed by a dead holder, or by another
//! process, is found within 250 ms. A foreign client sees the permits as user locks; one
//! that takes a free slot below the count is counted.
//!
//! The other way round there is no such promise: a waiter for `L` waits inside the
//! server, which hands `L` to it the moment `L` is given back, while a permit's waiter
//! only finds `L` free between two holds. Beside a steady stream of holds of `L`, from
//! several waiters at once, a permit can wait out its whole wait.
//!
//! # Fencing tokens
//!
//! The statement that takes a lock also draws its token from the fence table
//! ([`MySqlStoreBuilder::fence_table`], InnoDB, created on first use): `INSERT ..
//! SELECT .. WHERE GET_LOCK(..) = 1 ON DUPLICATE KEY UPDATE token =
//! LAST_INSERT_ID(token + 1)`, one row a lock name (a semaphore's permits draw from the
//! row of its name), durable across server restarts. Only
//! this crate's holders draw one: a foreign holder of the same name does not. The
//! statement calls `GET_LOCK`, which a binary log in `STATEMENT` format cannot replay:
//! use `ROW` or `MIXED` (each server's default).
//!
//! The same statement records, in the row, the connection id of the session that drew
//! the token (`held_by`) and the holder id it was taken with (`holder_id`, such as an
//! election candidate's id), so that `inspect` on any session, one that holds nothing
//! included, reads the holder's fencing token and holder id when `IS_USED_LOCK` names
//! that session. A fence table made by an earlier version gains the two columns on
//! first use. The lock is taken a moment before the statement that takes it commits its
//! row: in that moment, should the session have taken the same lock before, `inspect`
//! shows the earlier hold's holder id and token against it.
//!
//! MySQL has no way to tell another session that a row or a lock changed (no
//! `LISTEN`/`NOTIFY`), so a follower's [`watch`](crate::Election::watch) of an election
//! asks who leads every [interval](crate::Election::watch_interval) (1 s by default),
//! and learns of a new leader within that interval and a round trip.
//!
//! # Sessions
//!
//! A hold lasts as long as its session. The server ends a session idle for longer than
//! the [session lease](MySqlStoreBuilder::session_lease) (`wait_timeout`), and the store
//! pings each of its sessions every third of a lease, so a process that is paused or
//! wedged loses its locks about one lease later. Each session holds a marker lock of its
//! own, which a second connection waits for inside the server: when the session ends
//! (its connection drops, an operator's `KILL`, its lease out, a server restart), that
//! wait returns at once, and every hold on the session reports
//! [`lost`](crate::LockGuard::lost) and `with_lock` is cancelled.
//! [`force_unlock`](crate::Locker::force_unlock) ends the session that holds the lock
//! and each that holds one of its permits (`KILL`, as `IS_USED_LOCK` names them), with
//! every other hold on them.
//!
//! A session is trusted only as long as the server has confirmed it: it lives at least
//! one lease from when the latest statement the server answered on it was sent, on this
//! process's monotonic clock. Past that instant without a newer answer, the store ends
//! it (drops its connection): its holds report `lost()`, and
//! [`is_held`](crate::LockGuard::is_held) and `release` answer not held. So a process
//! paused past its lease claims none of its holds once it runs again, and a lock its
//! paused call was granted meanwhile is not handed out (the call asks the server whether
//! the session still lives first, and counts one that does not as a failed attempt).
//!
//! What faults mean (the tests in `tests/tests/mysql.rs` and the torture scenarios):
//!
//! - **A paused server** (`SIGSTOP`): lock calls return by their deadline with
//!   [`Timeout`](crate::LockError::Timeout) (a call that does not wait, within one
//!   lease); a lock a call's statement takes once the server answers is given back.
//!   Unlike PostgreSQL, MariaDB 10.11 did not end the sessions as it resumed: in the
//!   torture run of a server paused for two leases, before the store ended sessions
//!   itself, every session lived on (the server read the pings that reached it during
//!   the pause) and no hold was lost. Now the store ends them once a lease passes with
//!   no answer, so a pause longer than the lease loses every hold, as on PostgreSQL; a
//!   shorter one loses nothing.
//! - **A restarted server**: every session ends with its connection; the holds are
//!   lost at once, and the fencing tokens, kept in the fence table, go on rising.
//! - **A paused process**: its sessions go idle and the server ends them one lease
//!   later; when the process runs again, its holds are lost at once.

mod builder;
mod name;
mod operator;
mod semaphore;
mod session;
mod sql;
mod take;

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use builder::{
    DEFAULT_FENCE_TABLE, DEFAULT_MAX_CONNECTIONS, DEFAULT_SESSION_LEASE, MySqlStoreBuilder,
};
pub use name::{MAX_NAME_CHARS, NameMapping};
pub use semaphore::MAX_PERMITS;
use session::{Connect, Session};

use crate::backend::sql::session_locks::{self, Server, SessionLocks, Taken};
use crate::backend::store::{Acquire, Hold, Outcome, Renewal, Store, StoreFuture};
use crate::{LockError, LockInfo, LockKey, LockKind};

/// Locks as MySQL or MariaDB user locks: see the [module docs](crate::backend::mysql)
/// for the names, the kinds, the fencing tokens and the sessions. Made with
/// [`MySqlStore::builder`], or by [`Locker::mysql`](crate::Locker::mysql). Cheap to
/// clone: clones share the sessions.
#[derive(Clone)]
pub struct MySqlStore(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    locks: SessionLocks<MySqlStore>,
    fence_table: String,
    mapping: NameMapping,
    /// Told each time a permit of this store is given back.
    permits_released: Notify,
}

impl fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlStore")
            .field("fence_table", &self.0.fence_table)
            .field("mapping", &self.0.mapping)
            .finish_non_exhaustive()
    }
}

impl MySqlStore {
    /// Configures a store on the server of `url`, such as
    /// `"mysql://user:pass@host:3306/db"`. See [`MySqlStoreBuilder`].
    pub fn builder(url: &str) -> MySqlStoreBuilder {
        MySqlStoreBuilder::new(url)
    }

    /// Ends every session of this store, as if each connection dropped: every hold on
    /// them reports [`lost`](crate::LockGuard::lost). The next acquisition opens a new
    /// session.
    pub async fn end_session(&self) {
        self.0.locks.sessions.end_all();
    }

    /// Runs `work`, statements that never wait, on a session that is not waiting, or on
    /// a connection of its own when every one is; its error is the lock `key`'s, met
    /// while `doing`.
    async fn query<T: Send>(
        &self,
        key: &LockKey,
        doing: &str,
        work: impl for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, Result<T, mysql_async::Error>>,
    ) -> Result<T, LockError> {
        let done = match self.0.locks.sessions.for_attempt().await? {
            Some(serving) => serving.session.run(work).await,
            None => {
                let mut conn = self.0.locks.sessions.connector.once().await?;
                work(&mut conn).await
            }
        };
        done.map_err(|e| failed(key, doing, e))
    }

    /// Opens the first session and creates the fence table if it is missing.
    async fn connect(
        connect: Connect,
        max_sessions: usize,
        fence_table: String,
        mapping: NameMapping,
    ) -> Result<Self, LockError> {
        let store = Self(Arc::new(Inner {
            locks: SessionLocks::new(connect, max_sessions),
            fence_table,
            mapping,
            permits_released: Notify::new(),
        }));
        store.create_fence_table().await?;
        Ok(store)
    }

    /// Creates the fence table if it is missing, then adds the columns an earlier version
    /// made it without ([`sql::LATER_COLUMNS`]), only if one is missing: `ALTER TABLE`
    /// would wait for every statement under way on the table, and hold up every later one
    /// meanwhile.
    async fn create_fence_table(&self) -> Result<(), LockError> {
        let Some(serving) = self.0.locks.sessions.for_attempt().await? else {
            return Ok(());
        };
        let table = self.0.fence_table.clone();
        serving
            .session
            .run(|conn| Box::pin(create_fence_table(conn, table)))
            .await
            .map_err(|e| {
                LockError::backend(
                    format!(
                        "mysql: cannot create the fence table {}",
                        self.0.fence_table
                    ),
                    e,
                )
            })
    }
}

impl Server for MySqlStore {
    type StoreKey = String;
    type Session = Session;
    type Connector = Connect;

    const NAME: &'static str = "mysql";

    fn locks(&self) -> &SessionLocks<Self> {
        &self.0.locks
    }

    fn store_key(&self, key: &LockKey) -> Result<String, LockError> {
        self.0.mapping.lock_name(key.as_str())
    }

    /// Keeps the lock while permits of it are held, until they are given back or
    /// the request's deadline ([`take::drain_permits`]).
    async fn once(
        &self,
        session: &Session,
        request: &Acquire,
        store_key: &String,
        abandoned: &CancellationToken,
    ) -> Result<Option<u64>, LockError> {
        let (table, released) = (&self.0.fence_table, &self.0.permits_released);
        take::once(session, table, request, store_key, released, abandoned).await
    }

    async fn wait(
        &self,
        session: &Session,
        request: &Acquire,
        store_key: &String,
        abandoned: CancellationToken,
    ) -> Result<Option<u64>, LockError> {
        let (connect, table) = (&self.0.locks.sessions.connector, &self.0.fence_table);
        let released = &self.0.permits_released;
        take::wait(
            session, connect, table, request, store_key, released, abandoned,
        )
        .await
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
        store_key: &String,
        kind: LockKind,
    ) -> Result<bool, LockError> {
        let freed = take::unlock(session, key, store_key).await;
        if let LockKind::Semaphore { .. } = kind {
            self.0.permits_released.notify_waiters();
        }
        freed
    }
}

impl Store for MySqlStore {
    fn name(&self) -> &str {
        "mysql"
    }

    /// Exclusive and semaphore (see the module docs).
    fn supports(&self, kind: LockKind) -> bool {
        matches!(kind, LockKind::Exclusive | LockKind::Semaphore { .. })
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        Box::pin(session_locks::acquire(self, request))
    }

    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(session_locks::release(self, hold))
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

    fn force_unlock<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, bool> {
        Box::pin(self.force_unlock_lock(key))
    }

    /// As the server shows the lock: its holding session by its connection id (in 8 hex
    /// digits, in place of a token), as one exclusive holder however many holds it
    /// stacks, with the fencing token and the holder id (an election leader's id) of its
    /// hold as the fence table records them, so any session reads them (none for a
    /// foreign holder); and the sessions waiting, foreign ones included, where
    /// `performance_schema` is on (else unknown; this store's other tasks wait behind its
    /// one waiting session, uncounted). A semaphore shows its stored count and one holder
    /// per permit slot held, by the slot's number, without a fencing token. No lease left.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        Box::pin(self.inspect_lock(key))
    }

    fn flush(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.0.locks.flush())
    }
}

/// Creates the fence table `table` on `conn` if it is missing, and adds the
/// [`sql::LATER_COLUMNS`] it lacks.
async fn create_fence_table(conn: &mut Conn, table: String) -> Result<(), mysql_async::Error> {
    conn.query_drop(sql::create_fence_table(&table)).await?;
    let (database, name) = match table.split_once('.') {
        Some((database, name)) => (Some(database), name),
        None => (None, table.as_str()),
    };
    let present: Vec<String> = conn.exec(sql::FENCE_COLUMNS, (database, name)).await?;
    let missing: Vec<&str> = sql::LATER_COLUMNS
        .iter()
        .filter(|(column, _)| !present.iter().any(|p| p.eq_ignore_ascii_case(column)))
        .map(|&(_, created)| created)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    match conn.query_drop(sql::add_columns(&table, &missing)).await {
        // ER_DUP_FIELDNAME: another store added them at the same moment.
        Err(mysql_async::Error::Server(e)) if e.code == 1060 => Ok(()),
        added => added,
    }
}

/// The error of a statement about the lock `key` that failed while `doing`.
fn failed(key: &LockKey, doing: &str, error: mysql_async::Error) -> LockError {
    LockError::failed("mysql", key, doing, error)
}
