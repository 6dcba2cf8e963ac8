//! The Redis stores (feature `redis`, on by default): locks on a single Redis node, the
//! master that Redis Sentinels name, or a Redis Cluster ([`RedisStore`], configured by
//! its [`RedisStoreBuilder`]), and over N independent masters (RedLock:
//! [`RedLockStore`], configured by its [`RedLockStoreBuilder`]). The Redis methods of
//! [`Locker`](crate::Locker) and [`LockerBuilder`](crate::LockerBuilder) (such as
//! [`Locker::cluster`](crate::Locker::cluster), or [`Locker::connect`](crate::Locker::connect)
//! with a `redis://` url) are shorthands for these builders. They need Redis 7.0 or later,
//! or Valkey. What each deployment guarantees, and what it does not, is in the
//! repository's `docs/stores.md`.
//!
//! The Redis client crates the stores are built on are re-exported here ([`redis`],
//! [`bb8`], [`bb8_redis`]), so that a pool given to
//! [`RedisStoreBuilder::pool`] has the versions this crate uses; and so are the defaults
//! of a Redis store's settings (such as [`DEFAULT_NAMESPACE`]).
//!
//! # Settings
//!
//! A [`RedisStoreBuilder`] takes one deployment ([`url`](RedisStoreBuilder::url),
//! [`pool`](RedisStoreBuilder::pool), a url with a pool,
//! [`sentinel(urls, master_name)`](RedisStoreBuilder::sentinel) or
//! [`cluster(seed_urls)`](RedisStoreBuilder::cluster)) and checks every setting in
//! [`build`](RedisStoreBuilder::build) before it connects: a bad one is
//! [`LockError::Config`], saying which. RedLock takes one
//! `RedisStoreBuilder` per master, [`RedLockStore::builder(masters)`](RedLockStore::builder),
//! and turns local hand-overs off on each.
//!
//! # Layout
//!
//! A lock `K` is the key `P{K}` (`P` the namespace, `lock:` unless
//! [set](RedisStoreBuilder::namespace)), holding its owner's token alone, set with a `PX`
//! expiry only while nobody holds it: the layout of redis-py's `Lock`, node-redlock and
//! redsync (their `SET NX PX`), so their clients and ours exclude each other. Its other
//! keys are `P{K}:<suffix>`, in the same hash tag, so that all of them live in one cluster
//! slot. Every script passes every key through `KEYS` and runs by `EVALSHA`. With the
//! default namespace:
//!
//! | key | holds |
//! |---|---|
//! | `lock:{K}` | the holder's token; `read` while readers hold it, for as long as the longest of them; `semaphore` while permits do |
//! | `lock:{K}:fence` | the fencing counter |
//! | `lock:{K}:lockers` | the `Locker`s (processes) with tasks waiting for the lock, oldest first (a sorted set) |
//! | `lock:{K}:released:<id>` | the channel on which the waiting `Locker` `<id>` is woken |
//! | `lock:{K}:queue`, `lock:{K}:places` | a fair lock's line of waiting tokens, and their places |
//! | `lock:{K}:readers` | a read-write lock's readers, each with its own lease: token → when that lease runs out, on the server's clock (a sorted set) |
//! | `lock:{K}:writers` | the writers waiting, with when each began to ask (a hash) |
//! | `lock:{K}:holders`, `lock:{K}:permits` | a semaphore's holders, kept as readers are, and its count |
//! | `lock:{K}:holder_id` | the holder id of an owner that names itself (below) |
//!
//! A release wakes the one `Locker` that has waited longest and still listens, so one
//! process asks again, not all of them. A fair lock uses the same lock key, so fair and
//! exclusive holds of one key exclude each other; a place in its line runs out 5 s after
//! its waiter last asked, so a waiter that died is skipped, and a release hands the lock
//! over to the next in line and tells that waiter's process alone, on its channel. An
//! exclusive lock released while a task of the same `Locker` waits for it is handed over
//! to the longest-waiting such task: one script sets that task's token and draws its
//! fencing token, and no message is sent. After
//! [`local_handovers`](RedisStoreBuilder::local_handovers) such hand-overs in a row (8 by
//! default) the release frees the lock and wakes the next process, so waiters elsewhere
//! get their turn. A read-write lock's writer holds the lock key itself. A lease that ran
//! out is dropped by the next script that looks, and every one of these keys expires once
//! idle. A key used as two kinds is safe (never two holders, never a `WRONGTYPE` reply),
//! but best used as one.
//!
//! An owner that names itself (an [election](crate::Election)'s candidate) keeps its
//! holder id in `P{K}:holder_id`, set with the lock by the same script, given the same
//! expiry, renewed and deleted with it; a plain lock's calls never touch that key. On
//! RedLock each master keeps it so. Each such owner is announced on the channel of the
//! same name as it takes the lock and as it gives it back (or is forced out), and a
//! follower's [`watch`](crate::Election::watch) listens there on a pub/sub connection of
//! its own (on every master, for RedLock): it learns of a new leader in a round trip or
//! two, and of one whose lease ran out unannounced within its interval.
//!
//! # Credentials, TLS and timeouts
//!
//! Credentials go in the url (`redis://user:password@host:6379/`, an ACL user, or
//! `redis://:password@host` for `requirepass`); no error, log line or `Debug` shows the
//! password. With lock-core's `tls` feature, `rediss://` urls connect over TLS (rustls),
//! trusting the system's certificate authorities, or the one given to
//! `RedisStoreBuilder::tls_root_certificate` for a server that a
//! private authority signed (one server and RedLock for now).
//!
//! A command waits for Redis's answer for 500 ms
//! ([`response_timeout`](RedisStoreBuilder::response_timeout)), then its call fails with
//! [`LockError::Backend`]; an acquisition cut short that way
//! gives its lock back in the background. Commands of one `Locker` share one connection
//! per server, so raise the timeout where a slow network, a server busy with slow
//! commands, or tens of thousands of tasks asking at once make answers come later than
//! that.
//!
//! # RedLock
//!
//! Each attempt asks every master at once, giving each a twentieth of the lease to
//! answer. The lock is taken as soon as a majority granted it (a semaphore of `p` permits
//! needs `⌊p·n/(p+1)⌋ + 1` of `n` masters, so that `p + 1` holders can never each have
//! theirs) and it is still valid: until the majority's leases run out, reckoned from when
//! the commands were sent, less an allowance for clock drift (1% of the lease plus 2 ms,
//! [`RedLockStoreBuilder::drift`]). The call does not wait for the other masters; one that
//! grants the lock later keeps it, renewed and released with the rest, so the lock then
//! also survives losing masters of its first majority.
//! [`LockGuard::lease_left`](crate::LockGuard::lease_left) shows what is left of the
//! validity. A grant short of the quorum is released on every master before the next
//! attempt; a call that cannot reach the quorum (too many masters down) fails at once with
//! [`LockError::Quorum`]. Renewals and `extend` need the
//! majority too; a lease that loses it is lost (`lost()` resolves, `with_lock` is
//! cancelled). The fencing token is the largest of the granting masters' counters times
//! the number of masters (plus, for readers and permits, the index of the one that drew
//! it, so that those sharing a lock never get the same one), and the granting masters
//! raise their counters to it, so every later majority, which shares a master with this
//! one, draws a larger one; `inspect` reads an owner's token back from the counters a
//! majority of its masters keep.

// The layout of this folder:
//
// - [`builder`]: every setting of a Redis store, checked before it connects;
// - [`deployment`]: where the server is (a url, a pool, Sentinel's master, a Cluster),
//   and what each connection is opened to there;
// - [`connection`]: the one multiplexed connection every call shares; [`sentinel`]:
//   finding the master that Redis Sentinel names, at each connect;
// - [`keys`]: where a lock lives (its store keys and wake-up channels);
// - [`scripts`]: the Lua scripts, their calls and their replies; [`routing`]: which
//   node a pipeline of calls goes to, over the Cluster's [`slots`];
// - [`fencing`]: where a fence counter starts, and the failover epoch a token carries;
// - [`asking`]: what every attempt sends besides its keys, and how long a waiter's
//   registrations last;
// - [`exclusive`], [`fair`], [`read_write`] and [`semaphore`]: the lock kinds, each the
//   script calls that take and release it and the replies they read; [`shared`]: what
//   reads and permits, which share a lock, have in common;
// - [`handover`]: what makes a contended exclusive lock fast: a release hands it to a
//   waiter of the same `Locker`, and wakes one waiting `Locker` rather than all;
//   [`giving_back`]: the store's methods that give a lock back that way, or in the
//   background when a call was cut short;
// - [`waiting`]: the hooks of the client-side wait, and what a waiter that leaves gives
//   back;
// - [`hub`]: the pub/sub connection that delivers wake-ups and fair hand-overs, over a
//   [`subscriber`]: to one server, or sharded over a Redis Cluster; [`followers`]: what
//   the followers of an election hear, on connections of their own;
// - [`redlock`]: one lock over N independent masters, each a store of this kind, and its
//   builder; [`master`]: a store of this kind as one of those masters, spoken to
//   through the interface of [`crate::backend::redlock`];
// - [`shorthands`]: the Redis methods of `Locker` and `LockerBuilder`.
//
// This file is the store itself: its settings, its connections, and the methods of
// [`RedisStore`] that send the calls the files above build, but for making one (in
// [`builder`] and [`master`]), giving a lock back ([`giving_back`]) and waiting
// ([`waiting`]).
//
// Waiting is lock-core's client-side wait ([`crate::backend::wait`]): this store makes
// single attempts, and the hub wakes its waiters.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::{FromRedisValue, RedisResult};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::release::Release;
use super::store::{Acquire, Hold, HolderChanges, Outcome, Renewal, Store, StoreFuture};
use crate::backend::wait::line::Lines;
use crate::backend::wait::{self, Attempt};
use crate::{LockError, LockInfo, LockKey, LockKind};

mod asking;
mod builder;
mod connection;
mod deployment;
mod exclusive;
mod fair;
mod fencing;
mod followers;
mod giving_back;
mod handover;
mod hub;
mod keys;
mod master;
mod read_write;
mod redlock;
mod routing;
mod scripts;
mod semaphore;
mod sentinel;
mod shared;
mod shorthands;
mod slots;
mod subscriber;
mod waiting;

use asking::{Asking, Attempting, CutShort, millis};
pub use builder::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_LOCAL_HANDOVERS, DEFAULT_NAMESPACE, DEFAULT_RESPONSE_TIMEOUT,
    DEFAULT_SAFETY_POLL, RedisStoreBuilder,
};
use connection::{Conn, Connection, Timeouts};
use deployment::Deployment;
use handover::{OwnWaiters, ReleasePlan};
use hub::{Hub, Listening, Relay};
use keys::{Channels, RedisKey};
pub use redlock::{RedLockStore, RedLockStoreBuilder};

/// The Redis client crates this store is built on, re-exported so your versions match.
pub use ::bb8;
pub use ::bb8_redis;
pub use ::bb8_redis::RedisConnectionManager;
pub use ::redis;
use scripts::{AcquireReply, ScriptCall, Scripts, Seen, Sent};
pub(crate) use shorthands::Shorthands;

/// Renewals per pipeline.
const RENEW_CHUNK: usize = 512;

/// A Redis store's settings, checked by its builder: everything needed to open its
/// connections.
#[derive(Debug)]
struct RedisConfig {
    deployment: Deployment,
    namespace: String,
    fence_ttl: Duration,
    timeouts: Timeouts,
    /// How many releases of an exclusive lock in a row may hand it to a local waiter.
    local_handovers: u32,
    /// How long a waiter with wake-ups waits before trying again anyway.
    safety_poll: Duration,
}

/// Locks in one Redis deployment: a single server, the master that Redis Sentinels name,
/// or a Redis Cluster. Configured and connected by its [builder](RedisStoreBuilder), and
/// plugged into a [`Locker`](crate::Locker) with
/// [`LockerBuilder::store`](crate::LockerBuilder::store); the Redis methods of
/// [`LockerBuilder`](crate::LockerBuilder) are shorthands for the same.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::Locker;
/// use lock_core::backend::RedisStore;
///
/// let store = RedisStore::builder()
///     .url("redis://127.0.0.1:6379/")
///     .namespace("billing:lock:")
///     .build()
///     .await?;
/// let locker = Locker::builder()
///     .store(Arc::new(store))
///     .default_lease(Duration::from_secs(10))
///     .build()
///     .await?;
/// let guard = locker.lock("balance:42").await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
///
/// Cheap to clone (an `Arc` inside), so background work can own one.
#[derive(Clone)]
pub struct RedisStore(Arc<Inner>);

/// What the clones of a [`RedisStore`] share.
#[derive(Debug)]
struct Inner {
    connection: Connection,
    scripts: Scripts,
    namespace: String,
    fence_ttl_ms: u64,
    lines: Arc<Lines<Listening>>,
    /// Delivers wake-ups; none without a url (then waiters poll).
    hub: Option<Hub>,
    /// The channels on which this `Locker` is woken and handed fair locks.
    channels: Channels,
    local_handovers: u32,
    safety_poll: Duration,
    /// Work that outlives the call that started it (releasing for an acquire cut short).
    background: TaskTracker,
}

/// Where its server is, never with a password.
impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("address", &self.0.connection.address())
            .field("namespace", &self.0.namespace)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Opens the commands' connection (within the connect timeout) and loads the scripts,
    /// so that a wrong address or password fails here, with the address and the cause.
    async fn connect(config: RedisConfig) -> Result<Self, LockError> {
        let store = Self::new(config, Arc::default());
        store.ready().await?;
        Ok(store)
    }

    /// A store on the server of `config`, whose hub wakes the waiters of `lines`; no
    /// connection is opened yet.
    fn new(config: RedisConfig, lines: Arc<Lines<Listening>>) -> Self {
        let RedisConfig {
            deployment,
            namespace,
            fence_ttl,
            timeouts,
            local_handovers,
            safety_poll,
        } = config;
        let (address, publish) = (deployment.address(), deployment.publish());
        let (source, endpoint) = deployment.connections();
        let connection = Connection::new(source, address, timeouts);
        let channels = Channels::new();
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| {
            let me = me.clone();
            let relay: Relay = Arc::new(move |key: &str| {
                if let Some(inner) = me.upgrade() {
                    RedisStore(inner).relay_detached(&RedisKey::from_redis(key));
                }
            });
            Inner {
                connection,
                scripts: Scripts::new(publish),
                namespace,
                fence_ttl_ms: millis(fence_ttl),
                hub: endpoint.map(|endpoint| {
                    Hub::new(
                        endpoint,
                        lines.clone(),
                        timeouts.connect,
                        channels.clone(),
                        relay,
                    )
                }),
                lines,
                channels,
                local_handovers,
                safety_poll,
                background: TaskTracker::new(),
            }
        });
        RedisStore(inner)
    }

    /// Opens the commands' connection and loads the scripts, within the connect timeout.
    pub(crate) async fn ready(&self) -> Result<(), LockError> {
        let connect_timeout = self.0.connection.connect_timeout();
        match tokio::time::timeout(connect_timeout, self.load_scripts()).await {
            Ok(result) => result,
            Err(_) => Err(LockError::backend(
                format!("cannot connect to redis at {}", self.0.connection.address()),
                format!("no answer within {connect_timeout:?}"),
            )),
        }
    }

    async fn load_scripts(&self) -> Result<(), LockError> {
        let mut conn = self.0.connection.get().await?;
        for script in self.0.scripts.all() {
            script
                .load(&mut conn)
                .await
                .map_err(|e| self.0.connection.error("load the lock scripts", e))?;
        }
        Ok(())
    }

    /// The lock's key in Redis.
    fn key(&self, key: &LockKey) -> RedisKey {
        RedisKey::new(&self.0.namespace, key)
    }

    /// How long the fence counter is kept: at least as long as a lease drawn from it.
    fn fence_ttl_ms(&self, lease: Duration) -> u64 {
        self.0.fence_ttl_ms.max(millis(lease))
    }

    /// Runs `work` in the background, counted for [`Store::flush`]; `what` it does is
    /// for the warning if there is no runtime to run it on.
    fn spawn(&self, what: &str, work: impl Future<Output = ()> + Send + 'static) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.0.background.spawn_on(work, &runtime);
            }
            Err(_) => tracing::warn!("no tokio runtime to {what} in"),
        }
    }

    /// Releases lock `key` on `conn` as `how` says, if `token` holds it (or, leaving,
    /// takes it out of the line); says whether `token` held it.
    async fn release_on(
        &self,
        conn: &mut Conn,
        key: &RedisKey,
        token: &str,
        how: Release,
    ) -> redis::RedisResult<bool> {
        let call = match how {
            // Not a holder that named itself (those release in `release_exclusive`): a
            // holder id left by an acquire cut short names a token that no longer holds
            // the lock, and runs out with its lease.
            Release::Holder(LockKind::Exclusive) => {
                let own_waiters = self.own_waiters(self.0.lines.get(key.as_str()).as_deref());
                return self
                    .free_exclusive(conn, key, token, false, own_waiters)
                    .await;
            }
            Release::Holder(LockKind::Fair) => fair::release_call(
                &self.0.scripts.fair_release,
                key,
                token,
                self.0.fence_ttl_ms,
            ),
            Release::Leave => {
                fair::release_call(&self.0.scripts.fair_leave, key, token, self.0.fence_ttl_ms)
            }
            Release::Holder(LockKind::Write) => {
                read_write::write_release_call(&self.0.scripts, key, token)
            }
            Release::Holder(kind @ (LockKind::Read | LockKind::Semaphore { .. })) => {
                shared::release_call(&self.0.scripts, key, token, kind.sharing())
            }
        };
        call.invoke_async(conn).await
    }

    /// Sends `call`, an acquire script's, for `token` on lock `key`: its reply, and how it
    /// was [`Sent`]. Should the call be cut short or its reply lost, the lock, or a place
    /// in line, may have been taken: it is then released as `how` says, unless
    /// `cut_short` leaves that to the caller.
    async fn send_acquire<T: FromRedisValue>(
        &self,
        key: &RedisKey,
        token: &str,
        call: &ScriptCall<'_>,
        how: Release,
        cut_short: CutShort,
    ) -> Result<(T, Sent), LockError> {
        let pending = PendingAcquire {
            store: self,
            key,
            token,
            how,
            armed: cut_short == CutShort::Release,
        };
        let sent = self
            .0
            .connection
            .run_in_hand("acquire", |mut in_hand| async move {
                let sent = Sent {
                    at: Instant::now(),
                    epoch: in_hand.epoch,
                };
                let reply: T = call.invoke_async(&mut in_hand.conn).await?;
                Ok((reply, sent))
            })
            .await?;
        pending.disarm();
        Ok(sent)
    }

    /// Renews `leases` (of locks `keys`) on `conn` with compare-and-pexpire calls, a
    /// pipeline per chunk, not a round trip per lease: for each, until when it runs, if it
    /// is still its owner's.
    async fn renew_on(
        &self,
        conn: &mut Conn,
        leases: &[Renewal<'_>],
        keys: &[RedisKey],
    ) -> redis::RedisResult<Vec<Option<Instant>>> {
        let mut renewed = Vec::with_capacity(leases.len());
        for (leases, keys) in leases.chunks(RENEW_CHUNK).zip(keys.chunks(RENEW_CHUNK)) {
            let calls: Vec<_> = leases
                .iter()
                .zip(keys)
                .map(|(r, key)| {
                    let sharing = r.hold.kind.sharing();
                    let holders = shared::holders(sharing, key);
                    let named = r.hold.holder_id.is_some();
                    let mut call = self.0.scripts.extend.key_named(named, key.as_str());
                    match holders {
                        Some(holders) => call.key(holders),
                        None => call.key(key.as_str()),
                    };
                    if named {
                        call.key(key.holder_id());
                    }
                    call.arg(r.hold.token)
                        .arg(millis(r.lease))
                        .arg(shared::mark(sharing));
                    call
                })
                .collect();
            // Each lease runs from here, with the connection in hand.
            let sent_at = Instant::now();
            let held: Vec<bool> = routing::pipelined(conn, &self.0.scripts.extend, calls).await?;
            let until = held.into_iter().zip(leases);
            renewed.extend(until.map(|(held, r)| held.then_some(sent_at + r.lease)));
        }
        Ok(renewed)
    }

    /// One attempt at the lock (see [`ClientWait::attempt`]), asking as `asking` says.
    /// Should its call be cut short, what it may have taken is released as its holder
    /// would release it (a writer's also stops waiting), unless that is left to the
    /// caller.
    async fn attempt_asking(
        &self,
        request: &Acquire,
        waits_for: Duration,
        asking: Asking,
    ) -> Result<Attempt, LockError> {
        let key = self.key(&request.key);
        let attempting = Attempting {
            request,
            waits_for,
            fence_ttl_ms: self.fence_ttl_ms(request.lease),
            listening_id: self.listening_id(),
            seed: asking.seed,
        };
        let scripts = &self.0.scripts;
        let call = match request.kind {
            LockKind::Fair => return self.attempt_fair(&key, &attempting).await,
            LockKind::Exclusive => exclusive::acquire_call(scripts, &key, &attempting),
            LockKind::Read => read_write::read_acquire_call(scripts, &key, &attempting),
            LockKind::Write => read_write::write_acquire_call(scripts, &key, &attempting),
            LockKind::Semaphore { permits } => {
                semaphore::acquire_call(scripts, &key, &attempting, permits)
            }
        };
        let how = Release::Holder(request.kind);
        let (reply, sent) = self
            .send_acquire::<AcquireReply>(&key, &request.token, &call, how, asking.cut_short)
            .await?;
        reply.attempt(request, sent)
    }

    /// One attempt at fair lock `key`. Cut short, it leaves the line, releasing the lock
    /// should it be its own.
    async fn attempt_fair(
        &self,
        key: &RedisKey,
        attempting: &Attempting<'_>,
    ) -> Result<Attempt, LockError> {
        let call = fair::acquire_call(&self.0.scripts, key, attempting, self.0.channels.id());
        let token = &attempting.request.token;
        let (reply, sent) = self
            .send_acquire(key, token, &call, Release::Leave, CutShort::Release)
            .await?;
        Ok(fair::attempt(reply, sent))
    }

    /// Releases exclusive lock `key` if `token` holds it (with its holder id, if `named`):
    /// to a local waiter when one can be handed it, else free, waking one waiting
    /// `Locker`. Not retried on a fresh connection: had the first attempt gone through,
    /// the retry would report the lock as not held.
    async fn release_exclusive(
        &self,
        key: &RedisKey,
        token: &str,
        named: bool,
    ) -> Result<bool, LockError> {
        match self.plan_release(key, named) {
            ReleasePlan::Handover(claim) => {
                let span = tracing::debug_span!("lock_handover");
                self.hand_over(key, token, claim).instrument(span).await
            }
            ReleasePlan::Free(own_waiters) => {
                let mut conn = self.0.connection.get().await?;
                self.free_exclusive(&mut conn, key, token, named, own_waiters)
                    .await
                    .map_err(|e| self.0.connection.error("release", e))
            }
        }
    }

    /// Frees exclusive lock `key` on `conn` if `token` holds it (with its holder id, if
    /// `named`), and wakes the `Locker` that has waited longest (this one's waiters too,
    /// behind the others, if `own_waiters` say they listen). Says whether `token` held it.
    async fn free_exclusive(
        &self,
        conn: &mut Conn,
        key: &RedisKey,
        token: &str,
        named: bool,
        own_waiters: OwnWaiters,
    ) -> RedisResult<bool> {
        let call = exclusive::release_call(
            &self.0.scripts,
            key,
            token,
            named,
            self.listening_id(),
            own_waiters,
        );
        call.invoke_async(conn).await
    }

    /// Free permits of semaphore `key`, whose handle asks with `permits`.
    async fn available_permits(&self, key: &LockKey, permits: u32) -> Result<u32, LockError> {
        let key = self.key(key);
        let call = semaphore::permits_call(&self.0.scripts, &key, permits);
        self.0
            .connection
            .run("count free permits", |mut conn| {
                let call = &call;
                async move { call.invoke_async(&mut conn).await }
            })
            .await
    }

    /// Stores `permits` as semaphore `key`'s count, kept as long as its fence counter.
    async fn store_permits(&self, key: &LockKey, permits: u32) -> Result<(), LockError> {
        let key = self.key(key);
        let fence_ttl_ms = self.fence_ttl_ms(Duration::ZERO);
        let call = semaphore::set_permits_call(&self.0.scripts, &key, permits, fence_ttl_ms);
        let _: i64 = self
            .0
            .connection
            .run("set a semaphore's count", |mut conn| {
                let call = &call;
                async move { call.invoke_async(&mut conn).await }
            })
            .await?;
        Ok(())
    }

    /// Who holds lock `key` on this server, if anyone, read in one call that changes
    /// nothing. An owner's fencing token is kept only while the master has had no
    /// failover (epoch 0): after one, the owner's token carries the epoch its own
    /// connection saw, which the server does not record.
    async fn seen(&self, key: &LockKey) -> Result<Option<Seen>, LockError> {
        let key = self.key(key);
        let mut call = self.0.scripts.inspect.key(key.as_str());
        call.key(key.fence())
            .key(key.readers())
            .key(key.holders())
            .key(key.permits())
            .key(key.lockers())
            .key(key.holder_id());
        self.0
            .connection
            .run_in_hand("inspect a lock", |mut in_hand| {
                let call = &call;
                async move {
                    let seen: Option<Seen> = call.invoke_async(&mut in_hand.conn).await?;
                    Ok(seen.map(|mut seen| {
                        if in_hand.epoch != 0 {
                            seen.fence = None;
                        }
                        seen
                    }))
                }
            })
            .await
    }

    /// This `Locker`'s id, under which a release can wake it; empty without pub/sub.
    fn listening_id(&self) -> &str {
        if self.0.hub.is_some() {
            self.0.channels.id()
        } else {
            ""
        }
    }
}

impl Store for RedisStore {
    fn name(&self) -> &str {
        "redis"
    }

    /// Every kind.
    fn supports(&self, _kind: LockKind) -> bool {
        true
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        Box::pin(wait::acquire(self, request))
    }

    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let key = self.key(hold.key);
            match hold.kind {
                LockKind::Exclusive => {
                    let named = hold.holder_id.is_some();
                    self.release_exclusive(&key, hold.token, named).await
                }
                kind => {
                    let mut conn = self.0.connection.get().await?;
                    self.release_on(&mut conn, &key, hold.token, Release::Holder(kind))
                        .await
                        .map_err(|e| self.0.connection.error("release", e))
                }
            }
        })
    }

    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        Box::pin(async move {
            let keys: Vec<RedisKey> = leases.iter().map(|r| self.key(r.hold.key)).collect();
            self.0
                .connection
                .run("renew leases", |mut conn| {
                    let keys = &keys;
                    async move { self.renew_on(&mut conn, leases, keys).await }
                })
                .await
        })
    }

    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let key = self.key(hold.key);
            let sharing = hold.kind.sharing();
            let holders = shared::holders(sharing, &key);
            let mut call = self.0.scripts.held.key(key.as_str());
            match holders {
                Some(holders) => call.key(holders),
                None => call.key(key.as_str()),
            };
            call.arg(hold.token).arg(shared::mark(sharing));
            self.0
                .connection
                .run("ask whether a lock is held", |mut conn| {
                    let call = &call;
                    async move { call.invoke_async(&mut conn).await }
                })
                .await
        })
    }

    fn force_unlock<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let key = self.key(key);
            let mut call = self.0.scripts.force_unlock.key(key.as_str());
            call.key(key.readers())
                .key(key.holders())
                .key(key.holder_id())
                .key(key.lockers())
                .key(key.channel());
            self.0
                .connection
                .run("force a lock open", |mut conn| {
                    let call = &call;
                    async move { call.invoke_async(&mut conn).await }
                })
                .await
        })
    }

    /// What [`Locker::inspect`](crate::Locker::inspect) reports on Redis (one server,
    /// Sentinel, Cluster; one read-only script on the lock's keys, which share its hash
    /// tag): the readers of a read hold and the permits in use of a semaphore, each with
    /// its lease left (server clock), and the semaphore's stored count as its `permits`;
    /// but no fencing token for them, which Redis does not keep per holder. A hold by one
    /// owner shows as the kind its token's mark names (every owner token is a random UUID
    /// and a mark, `:x`, `:f` or `:w`; `None` for a token of lock-core 0.1, without one),
    /// with its lease left and, as its fencing token, the lock's fence counter, which is
    /// the owner's own: nothing draws a token from it while an owner holds the lock but
    /// the script that made it the owner (`None` should the counter have run out). On
    /// Sentinel that token is shown only while the master has had no failover (its epoch
    /// is 0): after one, a holder's token carries the epoch its own connection saw, which
    /// Redis does not record. `waiting` counts the `Locker`s registered to be woken: not
    /// their tasks, not a `Locker` that polls without wake-ups, and not one just woken
    /// until its waiter asks again. An owner that named itself shows its holder id, kept
    /// in `P{K}:holder_id` beside the lock key, which holds its token alone.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        Box::pin(async move { Ok(self.seen(key).await?.map(Seen::info)) })
    }

    /// A pub/sub connection of its own, on which each owner that names itself (an
    /// election's candidate) is announced as it takes the lock and as it gives it back or
    /// is forced out (see the `followers` module); not a lease that runs out.
    fn watch_holders<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, HolderChanges> {
        Box::pin(self.watch_named_holders(key))
    }

    fn available<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, u32> {
        Box::pin(self.available_permits(key, permits))
    }

    fn set_permits<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, ()> {
        Box::pin(self.store_permits(key, permits))
    }

    fn flush(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.0.background.close();
            self.0.background.wait().await;
            self.0.background.reopen();
        })
    }

    fn close(&self) {
        if let Some(hub) = &self.0.hub {
            hub.stop();
        }
    }
}

/// Releases a lock by token unless the acquire it guards comes to an answer: if that
/// acquire's future is dropped (its call cut short), or it fails (its reply lost), the
/// lock, or a place in line, may have been taken. Armed around the whole attempt, retry
/// included, so the release is sent after everything the attempt sent: on the same
/// connection, or after it died.
struct PendingAcquire<'a> {
    store: &'a RedisStore,
    key: &'a RedisKey,
    token: &'a str,
    how: Release,
    armed: bool,
}

impl PendingAcquire<'_> {
    /// The attempt came to an answer: nothing to release.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for PendingAcquire<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.store.release_detached(self.key, self.token, self.how);
        }
    }
}
