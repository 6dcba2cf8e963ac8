//! Locks as MySQL or MariaDB user locks (`GET_LOCK`), named as madelson's DistributedLock
//! names them, fenced by a counter table: [`MySqlStore`].
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use lock_core::Locker;
//!
//! let locker = Locker::mysql("mysql://app:secret@10.0.0.5:3306/app").await?;
//! let guard = locker.lock("balance:42").await?;
//! // Strictly greater for every later hold of the name by this crate, across restarts.
//! let fence = guard.fencing_token();
//! # let _ = fence;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Names
//!
//! The lock `K` is the user lock that [`NameMapping::DistributedLock`] names for `K` (see
//! there): a name that is lowercase and at most 64 characters as it is, any other cut
//! and hashed. A .NET service's `new MySqlDistributedLock("K", connectionString)` takes
//! the same lock, and so does `SELECT GET_LOCK('k', 10)` by hand for a lowercase `k`;
//! [`NameMapping::lock_name`] gives the name to pass for any other. With
//! [`NameMapping::Exact`], names go to the server as they are (DistributedLock's
//! `exactName: true`). User locks are per server, not per database, and their names are
//! compared byte for byte on MariaDB: nothing else is added to them (the `Locker`'s
//! namespace is a Redis setting), so applications that share a server keep their locks
//! apart by naming them apart.
//!
//! # Kinds
//!
//! | kind | server side |
//! |---|---|
//! | exclusive | `GET_LOCK` / `RELEASE_LOCK` |
//! | fair, read, write, semaphore | unsupported |
//!
//! The server has no shared user lock, so no faithful read lock; and `GET_LOCK` serves
//! its waiters in no promised order, so no fair one. A semaphore would need permits that
//! come back when their holder dies, which user locks give, with a stored count beside
//! them: not written yet.
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
//! # Fencing tokens
//!
//! The statement that takes a lock also draws its token from the fence table
//! ([`MySqlStoreBuilder::fence_table`], InnoDB, created on first use): `INSERT ..
//! SELECT .. WHERE GET_LOCK(..) = 1 ON DUPLICATE KEY UPDATE token =
//! LAST_INSERT_ID(token + 1)`, one row a lock name, durable across server restarts. Only
//! this crate's holders draw one: a foreign holder of the same name does not. The
//! statement calls `GET_LOCK`, which a binary log in `STATEMENT` format cannot replay:
//! use `ROW` or `MIXED` (each server's default).
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
//! (`KILL`, as `IS_USED_LOCK` names it), with every other hold on it.

mod builder;
mod name;
mod operator;
mod session;
mod take;

use std::fmt;
use std::sync::Arc;

use mysql_async::prelude::Queryable;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use builder::{
    DEFAULT_FENCE_TABLE, DEFAULT_MAX_CONNECTIONS, DEFAULT_SESSION_LEASE, MySqlStoreBuilder,
};
pub use name::{MAX_NAME_CHARS, NameMapping};
use session::{Connect, Session};

use crate::backend::session_locks::{self, Server, SessionLocks, Taken};
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
    pub fn end_session(&self) {
        self.0.locks.sessions.end_all();
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
        }));
        store.create_fence_table().await?;
        Ok(store)
    }

    async fn create_fence_table(&self) -> Result<(), LockError> {
        let Some(serving) = self.0.locks.sessions.for_attempt().await? else {
            return Ok(());
        };
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (name VARBINARY(255) PRIMARY KEY, \
             token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
            self.0.fence_table
        );
        serving
            .session
            .run(|conn| Box::pin(conn.query_drop(sql)))
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

/// Every lock is exclusive: the kind is not the server's business.
impl Server for MySqlStore {
    type Key = String;
    type Session = Session;
    type Connector = Connect;

    const NAME: &'static str = "mysql";

    fn locks(&self) -> &SessionLocks<Self> {
        &self.0.locks
    }

    fn key(&self, name: &str) -> Result<String, LockError> {
        self.0.mapping.lock_name(name)
    }

    async fn once(
        &self,
        session: &Session,
        _: &Acquire,
        key: &String,
    ) -> Result<Option<u64>, LockError> {
        take::once(session, &self.0.fence_table, key).await
    }

    async fn wait(
        &self,
        session: &Session,
        request: &Acquire,
        key: &String,
        abandoned: CancellationToken,
    ) -> Result<Option<u64>, LockError> {
        let (connect, table) = (&self.0.locks.sessions.connector, &self.0.fence_table);
        take::wait(session, connect, table, key, request.deadline, abandoned).await
    }

    /// Never called: semaphores are unsupported.
    async fn take_permit(
        &self,
        request: &Acquire,
        _: u32,
        _: CancellationToken,
    ) -> Result<Option<Taken<Self>>, LockError> {
        Err(LockError::Unsupported {
            key: request.key.as_str().into(),
            store: "mysql".into(),
            kind: request.kind,
        })
    }

    async fn unlock(
        &self,
        session: &Session,
        key: &String,
        _: LockKind,
    ) -> Result<bool, LockError> {
        take::unlock(session, key).await
    }
}

impl Store for MySqlStore {
    fn name(&self) -> &str {
        "mysql"
    }

    /// Exclusive only (see the module docs).
    fn supports(&self, kind: LockKind) -> bool {
        kind == LockKind::Exclusive
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        Box::pin(session_locks::acquire(self, request))
    }

    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(session_locks::release(self, hold.token))
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
    /// stacks; and the sessions waiting, foreign ones included, where
    /// `performance_schema` is on (else unknown; this store's other tasks wait behind its
    /// one waiting session, uncounted). No lease left, no fencing token.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        Box::pin(self.inspect_lock(key))
    }

    fn flush(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(self.0.locks.flush())
    }
}
