//! Locks on a ZooKeeper ensemble, in Apache Curator's layout, fenced by each node's
//! creation zxid: [`ZooKeeperStore`] (feature `zookeeper`), so that a Java service using
//! Curator and a Rust service using this crate share one lock.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use lock_core::Locker;
//! use lock_core::backend::ZooKeeperStore;
//!
//! // The connect string's chroot (`/app`) holds every node of the store.
//! let locker = Locker::zookeeper("10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181/app").await?;
//! let guard = locker.lock("balance:42").await?;
//! // Strictly greater for every later hold of the key, across leader elections.
//! let fence = guard.fencing_token();
//! # let _ = fence;
//! guard.release().await?;
//!
//! // Or with settings of its own.
//! let store = ZooKeeperStore::builder("10.0.0.1:2181")
//!     .session_timeout(Duration::from_secs(5))
//!     .base_path("/billing/locks")
//!     .build()
//!     .await?;
//! let billing = Locker::builder().store(Arc::new(store)).build().await?;
//! # let _ = billing;
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! With the default [base path](ZooKeeperStoreBuilder::base_path), the lock `K` is the
//! node `/locks/K`, whose path is its store key, within the connect string's chroot if
//! it has one (created, as Curator creates its namespace, if it is missing). Its holders
//! and waiters are its children, each an EPHEMERAL_SEQUENTIAL node of the session that made
//! it; `/locks/K` and its parents are CONTAINER nodes, which the server deletes once they
//! are empty, so an idle lock leaves nothing behind. The names are Curator's, with the
//! uuid that begins the hold's owner token:
//!
//! | kind | node | Curator recipe |
//! |---|---|---|
//! | exclusive, fair | `_c_{uuid}-lock-{seq}` | `InterProcessMutex` |
//! | read | `_c_{uuid}-__READ__{seq}` | `InterProcessReadWriteLock`'s read lock |
//! | write | `_c_{uuid}-__WRIT__{seq}` | `InterProcessReadWriteLock`'s write lock |
//! | semaphore permit | `leases/_c_{uuid}-lease-{seq}`, taken holding `locks/_c_{uuid}-lock-{seq}` | `InterProcessSemaphoreV2` |
//!
//! Every child whose name ends in `lock-`, `__WRIT__`, `__READ__` (or kazoo's `__lock__`
//! and `__rlock__`) and ten digits contends, in the order of those digits. An exclusive,
//! fair or write node holds the lock when it is first; a read node when no other kind is
//! before it, so a reader that asks after a waiting writer waits behind it. A waiter
//! watches only the node it waits for (the one just before it, or a reader's first
//! writer), and is woken by that node's deletion: no polling. The first come are the first
//! served, so exclusive and fair locks are the same recipe.
//!
//! A semaphore's acquirer does what Curator's `InterProcessSemaphoreV2` does, so that
//! Curator's acquirers and ours queue in one line: it takes the mutex `/locks/K/locks`
//! (the exclusive recipe above, on that node), creates its lease, waits, still holding
//! the mutex, until there are no more leases than the count, and releases the mutex. The
//! lease holds its permit until it is deleted. An acquire dropped while it waits deletes
//! its lease and its node under the mutex in the background; one that reaches its
//! deadline deletes them before it returns. The count is stored as the data of
//! `/locks/K` itself, which Curator never reads, on first use (asking with another is
//! [`LockError::Config`]); it goes with the node once the semaphore is idle. Leases and
//! the other kinds of `K` take turns in the order their nodes were made (by creation
//! zxid): a lease waits for the nodes of other kinds made before it, and they for the
//! leases made before them, so a busy semaphore cannot starve a lock of its key, nor
//! busy locks its permits.
//!
//! A hold's fencing token is its node's creation zxid (`czxid`): every later node of the
//! lock is created later, across leader elections too, and any client can read it.
//!
//! # Sharing a lock with Curator and kazoo
//!
//! A Java service shares the lock `K` with `new InterProcessMutex(client, "/locks/K")`
//! (or `InterProcessReadWriteLock` on the same path), on the same ensemble and chroot,
//! and the semaphore `K` of count `n` with `new InterProcessSemaphoreV2(client,
//! "/locks/K", n)`.
//! A kazoo `Lock` on the same path is counted too, but Curator orders the children by the
//! text after their last `lock-`, and kazoo's `__lock__` nodes have none, so a Curator
//! client misorders them; `extra_lock_patterns=["-lock-"]` on the kazoo side does not
//! mend that. Share a lock between kazoo and this store only where no Curator client
//! takes it.
//!
//! # Elections
//!
//! An [election](crate::Election) is laid out as Curator's `LeaderSelector` lays out
//! its own: an `InterProcessMutex` on the election's path whose lock node holds the
//! participant's id as its data (`LeaderSelector` overrides `getLockNodeBytes()`). The
//! election `E` is the lock `E`, at `/locks/E`; a candidate campaigning as `id` creates
//! `_c_{uuid}-lock-{seq}` there, as any exclusive hold does, with the UTF-8 bytes of `id`
//! as its data, and leads while its node is first.
//! [`Election::leader`](crate::Election::leader) and `inspect` read the first node's
//! data, as `LeaderSelector.getLeader()` does. So `new LeaderSelector(client,
//! "/locks/E", listener)` with `setId(id)` campaigns in the same election: one leads at a
//! time across both, and each side names the other's leader. A plain lock's node holds
//! no data, so `inspect` reports no holder id for it (and an empty id for it as a
//! leader); a Curator `InterProcessMutex`'s node holds its client's default data (the
//! local IP address, unless set), which `inspect` reports as its id, as Curator's
//! `getLeader()` would.
//! A follower's [`watch`](crate::Election::watch) keeps a watch on the children of the
//! election's path, set again each time it fires: it learns of a new leader in a round
//! trip or two, whether the last one resigned or its session ended.
//!
//! Curator's `LeaderLatch` is another layout, which does not share an election with this
//! store: its nodes are `_c_{uuid}-latch-{seq}` (holding its id), and it orders every
//! child of its path by the text after its last `latch-`, which puts ours, with none,
//! after all of its own. This store does not count a `latch-` node as a contender, and a
//! latch never waits for ours: a `LeaderLatch` on an election's path would lead beside
//! this store's leader. Use `LeaderSelector` on the Java side.
//!
//! # Keys
//!
//! A key is one znode name as it stands, unless it could not be one: `/` is written
//! `%2F`, and `%` itself `%25` (as [`KeySegment`](crate::KeySegment) escapes), the
//! characters ZooKeeper refuses in a name (U+E000 to U+F8FF, U+FFF0 to U+FFFF) as `%` and
//! the hex of their UTF-8 bytes, and the names `.`, `..` and `zookeeper` as `%2E`,
//! `%2E%2E` and `%7Aookeeper`. So `a/b` is `/locks/a%2Fb`: a Curator client sharing such a
//! lock names that path.
//!
//! # Sessions
//!
//! A hold lasts as long as the store's session: nothing is renewed. The server expires
//! a session its [timeout](ZooKeeperStoreBuilder::session_timeout) after it last heard
//! from the client, so the store hears from it a few times in each timeout (a read of
//! the root node) and keeps when it last sent a request the server answered, on the
//! monotonic clock. Until that instant plus the timeout the session cannot have
//! expired; past it, it may have, whatever the connection says, and the store ends it
//! on its side: every hold on it reports [`lost`](crate::LockGuard::lost) and
//! `with_lock` is cancelled, [`is_held`](crate::LockGuard::is_held) and `release`
//! answer not held, and the session is closed. This holds too for a process that was
//! paused: it learns of the pause as soon as it runs again. A disconnect that ends
//! sooner loses nothing, and until it ends `is_held` answers `true` (the server keeps
//! the node). A hold whose node an operator deleted is lost too. The next acquisition
//! opens a new session, and an acquire whose session is lost while it waits asks again
//! on a new one until its deadline; no guard is handed out on a session past that
//! instant.
//!
//! A lock call returns by its deadline whatever the ensemble does: with a timeout if
//! it has not answered by then (a node its create made later is deleted when the
//! answer comes). With no wait, its one attempt has the session timeout to be answered,
//! or fails with [`LockError::Backend`]. A waiter looks at the lock again each time its
//! connection comes back, so a deletion its watch missed while the connection was down
//! wakes it at once. A release that meets a broken connection sends its delete again
//! on the next one, and answers that the hold was its owner's once its own delete
//! removed the node; otherwise the hold is reported lost.
//!
//! What faults mean, as measured on one machine (a 2 s session timeout and a 1 s wait,
//! and an 8 s timeout on the ensemble; the tests in `tests/tests/zookeeper.rs`):
//!
//! - **A paused server** (`SIGSTOP`): lock calls on a held key and on a free key both
//!   return with a timeout at 1.00 s; holds are reported lost 1.6 to 2.0 s after the
//!   pause (within one timeout of the last answer), with `is_held` answering `false`,
//!   before the server is resumed. Once it is, the next acquisition locks on a new
//!   session with a larger fencing token. A pause shorter than the timeout loses
//!   nothing, and an acquire that gave up meanwhile has its node deleted once the
//!   server answers.
//! - **A killed and restarted server**: a lock call returns with a timeout at 1.00 s
//!   while the server is down, and the same `Locker` locks again once it is back. The
//!   server keeps its sessions across a restart (the harness checks it with a Curator
//!   client), so a restart within the timeout loses no hold; a longer outage loses them
//!   as above.
//! - **A lost leader** (3-node ensemble, the leader killed): every client is cut off
//!   until the new leader serves, 0.5 to 0.6 s after the kill; sessions survive the
//!   election, and a lock passed back and forth between two stores was granted again
//!   0.6 s after its last grant before the kill. An election longer than the timeout
//!   loses every hold, as above.
//!
//! # TLS
//!
//! Not supported: the store connects to the ensemble's plain client port only, whatever
//! lock-core's `tls` feature says. zookeeper-client has TLS (its own `tls` feature,
//! `tcp+tls://` endpoints), but it builds rustls with its default crypto provider,
//! aws-lc-rs, beside the ring that lock-core's other stores use, and asks rustls for the
//! process's default provider: with two compiled in there is none, so its connections
//! (and mysql_async's, which ask the same way) would panic unless lock-core installed a
//! provider for the whole process, which is the application's choice to make. Reach a
//! secure client port through a TLS tunnel (stunnel, a service mesh's sidecar) meanwhile.

mod builder;
mod heartbeat;
mod holds;
mod operator;
mod path;
mod recipe;
mod semaphore;
mod session;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::time::{Instant, timeout_at};
use tokio_util::task::TaskTracker;
use zookeeper_client as zk;

pub use builder::{DEFAULT_BASE_PATH, DEFAULT_SESSION_TIMEOUT, ZooKeeperStoreBuilder};
use holds::Holds;
use session::{Connect, Sessions};

use crate::backend::store::{Acquire, Hold, HolderChanges, Outcome, Renewal, Store, StoreFuture};
use crate::{LockError, LockInfo, LockKey, LockKind};

/// Locks on a ZooKeeper ensemble, in Apache Curator's layout: see the
/// [module docs](crate::backend::zookeeper) for the layout, the keys and the sessions.
/// Made with [`ZooKeeperStore::builder`], or by [`Locker::zookeeper`](crate::Locker::zookeeper).
/// Cheap to clone: clones share the session.
#[derive(Clone)]
pub struct ZooKeeperStore(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    sessions: Sessions,
    base_path: String,
    holds: Holds,
    /// Work that outlives the call that started it (deleting the node of an acquire cut
    /// short).
    background: TaskTracker,
}

impl fmt::Debug for ZooKeeperStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperStore")
            .field("connect_string", &self.0.sessions.connect_string())
            .field("base_path", &self.0.base_path)
            .finish_non_exhaustive()
    }
}

impl ZooKeeperStore {
    /// Configures a store on the ensemble of `connect_string`: `host:port` pairs,
    /// comma-separated, with an optional chroot suffix (`"10.0.0.1:2181,10.0.0.2:2181/app"`).
    /// See [`ZooKeeperStoreBuilder`].
    pub fn builder(connect_string: &str) -> ZooKeeperStoreBuilder {
        ZooKeeperStoreBuilder::new(connect_string)
    }

    /// Opens the first session, so that a wrong address fails at once.
    async fn connect(connect: Connect, base_path: String) -> Result<Self, LockError> {
        let store = Self(Arc::new(Inner {
            sessions: Sessions::new(connect),
            base_path,
            holds: Holds::default(),
            background: TaskTracker::new(),
        }));
        store.0.sessions.current().await?;
        Ok(store)
    }

    /// The store key of the lock `key`: the path of its node.
    fn store_key(&self, key: &LockKey) -> String {
        path::store_key(&self.0.base_path, key)
    }

    /// Asks for the lock of `request` until an attempt answers, on a new session each
    /// time the last was lost while it asked.
    async fn attempts(&self, request: &Acquire) -> Result<Outcome, LockError> {
        loop {
            let session = self.0.sessions.current().await?;
            let attempt = match request.kind {
                LockKind::Semaphore { permits } => {
                    self.acquire_permit(&session, request, permits).await
                }
                _ => self.lock(&session, request).await,
            };
            match attempt {
                Err(_) if !session.is_live() && Instant::now() < request.deadline => {}
                attempt => return attempt,
            }
        }
    }

    /// Runs `work` in the background, if there is a runtime to run it on.
    fn background(&self, work: impl Future<Output = ()> + Send + 'static) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.0.background.spawn_on(work, &runtime);
        }
    }
}

impl Store for ZooKeeperStore {
    fn name(&self) -> &str {
        "zookeeper"
    }

    /// Every kind: exclusive, fair, read and write on Curator's lock recipes, and
    /// semaphores on its `InterProcessSemaphoreV2`.
    fn supports(&self, _kind: LockKind) -> bool {
        true
    }

    /// Returns by `request.deadline` whatever the ensemble does: [`Outcome::Held`] if it
    /// has not answered by then (the node of a take it completes later is deleted then).
    /// With no wait, the one attempt has the session timeout to complete.
    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        Box::pin(async move {
            let waits = request.deadline > request.since;
            let until = if waits {
                request.deadline
            } else {
                Instant::now() + self.0.sessions.timeout()
            };
            match timeout_at(until, self.attempts(request)).await {
                Ok(outcome) => outcome,
                Err(_) if waits => Ok(Outcome::Held { holder_ttl: None }),
                Err(_) => Err(failed(&request.key, "be answered", zk::Error::Timeout)),
            }
        })
    }

    /// Deletes the hold's node, on a new connection if the one it was sent on broke:
    /// `true` once its own delete is known to have removed the node. A loss of the hold
    /// met meanwhile is reported only if it answers otherwise.
    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let Some(held) = self.0.holds.give(hold.token) else {
                return Ok(false);
            };
            let deleted = match held.session.upgrade() {
                Some(session) => recipe::delete(&session, &held.path).await,
                None => Ok(false),
            };
            self.0.holds.settle(hold.token, matches!(deleted, Ok(true)));
            deleted.map_err(|e| failed(hold.key, "delete its node", e))
        })
    }

    /// Nothing to renew: every hold is a session's.
    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        Box::pin(std::future::ready(Ok(vec![None; leases.len()])))
    }

    /// Asks the server whether the hold's node is still its session's. `false`, without
    /// asking, once the session was not heard from for its timeout (the server may have
    /// expired it), and if the server does not answer before then; `true` without asking
    /// while the connection is down and the session was heard from since.
    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let Some(held) = self.0.holds.get(hold.token) else {
                return Ok(false);
            };
            let Some(session) = held.session.upgrade() else {
                return Ok(false);
            };
            if session.is_disconnected() {
                return Ok(true);
            }
            let checked = timeout_at(session.heard.until(), session.client.check_stat(&held.path));
            match checked.await {
                Err(_) => Ok(false),
                Ok(Ok(stat)) => {
                    let owner = session.client.session_id().0;
                    Ok(stat.is_some_and(|s| s.ephemeral_owner == owner) && session.is_live())
                }
                Ok(Err(e)) if session::cut_short(&e) => Ok(session.is_live()),
                Ok(Err(_)) if !session.is_live() => Ok(false),
                Ok(Err(e)) => Err(failed(hold.key, "read its node", e)),
            }
        })
    }

    fn available<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, u32> {
        Box::pin(self.available_permits(key, permits))
    }

    fn set_permits<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, ()> {
        Box::pin(self.store_permits(key, permits))
    }

    fn force_unlock<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, bool> {
        Box::pin(self.force_unlock_lock(key))
    }

    /// The lock's children, then each holder's node: each holder with its creation zxid
    /// as its fencing token, the text of its data as its holder id (none if empty: see
    /// [Elections](crate::backend::zookeeper#elections)), and no lease (the hold lasts as
    /// long as its session). The kind as its node's name says it: exclusive for a fair
    /// lock too, whose nodes are the same, or a semaphore with its stored count.
    /// `waiting` counts the nodes queued behind the holders (every client's, Curator's
    /// included), or the leases beyond a semaphore's count.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        Box::pin(self.inspect_lock(key))
    }

    /// A watch on the lock's children, set again each time it fires (see
    /// [`Store::watch_holders`]): a follower of an election hears of a new leader in a
    /// round trip, a leader's session that ended included.
    fn watch_holders<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, HolderChanges> {
        Box::pin(self.watch_lock(key))
    }

    fn flush(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.0.background.close();
            self.0.background.wait().await;
            self.0.background.reopen();
        })
    }
}

/// The error of a call to the ensemble about the lock `key` that failed while `doing`.
fn failed(key: &LockKey, doing: &str, error: zk::Error) -> LockError {
    LockError::failed("zookeeper", key, doing, error)
}
