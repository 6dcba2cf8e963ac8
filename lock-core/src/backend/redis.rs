//! The Redis backend.
//!
//! Commands go over one multiplexed connection, opened by the bb8 pool's manager and
//! shared by all tasks (cloning it is cheap and takes no lock); a broken connection is
//! dropped and the next call opens another. Waiters are woken through one dedicated
//! pub/sub connection per `Locker` (see [`Hub`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bb8_redis::RedisConnectionManager;
use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use redis::{RedisError, Script};
use tokio::sync::{Notify, mpsc};

use super::{Attempt, Mode, PLACE_IN_LINE};
use crate::LockError;
use crate::waiters::{AfterPass, Edge, Grant, Slot, Waiter, Waiters};

const ACQUIRE: &str = concat!(
    include_str!("../scripts/fence.lua"),
    include_str!("../scripts/lockers.lua"),
    include_str!("../scripts/acquire.lua")
);
const FAIR: &str = concat!(
    include_str!("../scripts/fence.lua"),
    include_str!("../scripts/lockers.lua"),
    include_str!("../scripts/fair.lua")
);
const PASS: &str = concat!(
    include_str!("../scripts/fence.lua"),
    include_str!("../scripts/pass.lua")
);
const RELEASE: &str = concat!(
    include_str!("../scripts/lockers.lua"),
    include_str!("../scripts/release.lua")
);
const EXTEND: &str = include_str!("../scripts/extend.lua");
const FORWARD: &str = concat!(
    include_str!("../scripts/lockers.lua"),
    include_str!("../scripts/forward.lua")
);

/// Suffix of a lock's fence counter key.
const FENCE_SUFFIX: &str = ":fence";
/// Suffix of a lock's release channel. A `Locker` listens on its own: this suffix, `:`,
/// and the `Locker`'s id; a release wakes one `Locker` there, and a fair lock is handed
/// over to a waiter on its `Locker`'s.
const CHANNEL_SUFFIX: &str = ":released";
/// Suffix of the set of `Locker`s that have tasks waiting for a lock, oldest first.
const LOCKERS_SUFFIX: &str = ":lockers";
/// How long a `Locker` stays in that set unless one of its waiters asks again (each does
/// at least every safety poll); also how long a fair lock's line lasts, which must outlast
/// every place in it.
const WAITING_LOCKER: Duration = Duration::from_secs(PLACE_IN_LINE.as_secs() * 2);
/// Suffix of a fair lock's line of waiting tokens.
const LINE_SUFFIX: &str = ":queue";
/// Suffix of a fair lock's places in line (when each runs out, and its lease).
const PLACES_SUFFIX: &str = ":waiters";
/// Renewals per pipeline.
const RENEW_CHUNK: usize = 512;
/// How long a lock's release channel stays subscribed after its last local waiter left:
/// a lock contended again soon after needs no new subscription, nor the extra attempt
/// that follows one.
const LINGER: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Scripts {
    acquire: Script,
    release: Script,
    extend: Script,
    fair: Script,
    pass: Script,
    forward: Script,
}

/// One call of a script: `EVALSHA` with the keys and arguments written straight into one
/// command (a redis-rs `ScriptInvocation` allocates for each of them, then copies them).
struct Call<'a> {
    script: &'a Script,
    cmd: redis::Cmd,
}

impl<'a> Call<'a> {
    /// `script` on the keys of lock `key` with these `suffixes` (`""`: the lock key).
    fn new(script: &'a Script, key: &str, suffixes: &[&str]) -> Self {
        // Room for the keys, and for the longest arguments (two uuids and five numbers),
        // so that no call grows its buffer.
        let keys: usize = suffixes.iter().map(|s| key.len() + s.len()).sum();
        let mut cmd = redis::Cmd::with_capacity(16, 256 + keys);
        cmd.arg("EVALSHA")
            .arg(script.get_hash())
            .arg(suffixes.len());
        for suffix in suffixes {
            cmd.arg(Suffixed(key, suffix));
        }
        Self { script, cmd }
    }

    fn arg(mut self, arg: impl redis::ToRedisArgs) -> Self {
        self.cmd.arg(arg);
        self
    }

    /// Runs the call. A server that lost its script cache (a restart, `SCRIPT FLUSH`) is
    /// given the script again, and the call is repeated.
    async fn run<T: redis::FromRedisValue>(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> Result<T, RedisError> {
        match self.cmd.query_async(conn).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                // Boxed: loading is rare, and its future would make every call's larger.
                Box::pin(self.script.prepare_invoke().load_async(conn)).await?;
                self.cmd.query_async(conn).await
            }
            reply => reply,
        }
    }
}

impl Scripts {
    /// The fair script's `op` on lock `key`, with the arguments of its header.
    fn fair(&self, key: &str, op: FairOp<'_>, fence_ttl_ms: u64) -> Call<'_> {
        let (name, token, lease_ms, place, locker) = match op {
            FairOp::Acquire {
                token,
                lease,
                place,
                locker,
            } => ("acquire", token, millis(lease), place, locker),
            FairOp::Release { token } => ("release", token, 0, Duration::ZERO, ""),
            FairOp::Leave { token } => ("leave", token, 0, Duration::ZERO, ""),
        };
        let keys = [
            "",
            FENCE_SUFFIX,
            LINE_SUFFIX,
            PLACES_SUFFIX,
            CHANNEL_SUFFIX,
            LOCKERS_SUFFIX,
        ];
        Call::new(&self.fair, key, &keys)
            .arg(name)
            .arg(token)
            .arg(lease_ms)
            .arg(fence_ttl_ms)
            // zero means "do not queue": not rounded up as leases are
            .arg(u64::try_from(place.as_millis()).unwrap_or(u64::MAX))
            .arg(millis(WAITING_LOCKER))
            .arg(locker)
    }
}

/// A key written as one argument from two parts, with no string in between.
struct Suffixed<'a>(&'a str, &'a str);

impl redis::ToRedisArgs for Suffixed<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let mut arg = out.writer_for_next_arg();
        // Writing into a command's buffer cannot fail.
        let _ = arg.write_all(self.0.as_bytes());
        let _ = arg.write_all(self.1.as_bytes());
    }
}

/// What the fair script is asked to do.
#[derive(Debug, Clone, Copy)]
enum FairOp<'a> {
    /// Take the lock, or wait in line for `place`, as a waiter of `locker` (its id).
    Acquire {
        token: &'a str,
        lease: Duration,
        place: Duration,
        locker: &'a str,
    },
    /// Hand the lock to the next in line, or free it.
    Release { token: &'a str },
    /// Leave the line, and pass the lock on if it was handed over meanwhile.
    Leave { token: &'a str },
}

/// How a lock is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GiveBack {
    /// The plain release: compare-and-delete, and wake the process waiting longest;
    /// `own_waits`: tasks of this `Locker` wait too (woken if no other process waits).
    Release { own_waits: bool },
    /// The fair release: to the first in line, or free.
    FairRelease,
    /// A fair waiter leaves the line, and passes the lock on if it was handed over to it.
    Leave,
}

/// How a holder gives a lock back.
enum Plan {
    /// Passed to a local waiter (claimed in the lock's line).
    Pass(Arc<Waiter>),
    GiveBack(GiveBack),
}

/// Everything needed to open connections, from the builder.
#[derive(Debug)]
pub(crate) struct RedisConfig {
    pub(crate) client: Option<redis::Client>,
    pub(crate) pool: bb8::Pool<RedisConnectionManager>,
    pub(crate) address: String,
    pub(crate) namespace: String,
    pub(crate) fence_ttl: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) local_handoffs: u32,
}

#[derive(Debug)]
pub(crate) struct RedisBackend {
    pool: bb8::Pool<RedisConnectionManager>,
    conn: ArcSwapOption<MultiplexedConnection>,
    scripts: Arc<Scripts>,
    reconnecting: tokio::sync::Mutex<()>,
    detached: Arc<Detached>,
    connect_timeout: Duration,
    address: String,
    namespace: String,
    fence_ttl_ms: u64,
    pub(crate) waiters: Arc<Waiters>,
    hub: Option<Hub>,
    /// Names the channel on which fair locks are handed over to this `Locker`'s waiters.
    channels: Channels,
    /// How many releases of a plain lock in a row may pass it to a local waiter.
    local_handoffs: u32,
}

impl RedisBackend {
    /// Opens the first connection (within the connect timeout) and loads the scripts, so
    /// a wrong address or password fails here, with the address and the cause.
    pub(crate) async fn connect(config: RedisConfig) -> Result<Self, LockError> {
        let RedisConfig {
            client,
            pool,
            address,
            namespace,
            fence_ttl,
            connect_timeout,
            local_handoffs,
        } = config;
        let scripts = Arc::new(Scripts {
            acquire: Script::new(ACQUIRE),
            release: Script::new(RELEASE),
            extend: Script::new(EXTEND),
            fair: Script::new(FAIR),
            pass: Script::new(PASS),
            forward: Script::new(FORWARD),
        });
        let waiters = Arc::new(Waiters::default());
        let channels = Channels::new();
        let backend = Self {
            pool,
            conn: ArcSwapOption::empty(),
            reconnecting: tokio::sync::Mutex::new(()),
            detached: Arc::default(),
            connect_timeout,
            scripts,
            hub: client
                .map(|client| Hub::new(client, waiters.clone(), connect_timeout, channels.clone())),
            channels,
            waiters,
            local_handoffs,
            fence_ttl_ms: millis(fence_ttl),
            namespace,
            address,
        };
        let first = tokio::time::timeout(connect_timeout, async {
            let mut conn = backend.conn().await?;
            for script in [
                &backend.scripts.acquire,
                &backend.scripts.release,
                &backend.scripts.extend,
                &backend.scripts.fair,
                &backend.scripts.pass,
                &backend.scripts.forward,
            ] {
                script
                    .prepare_invoke()
                    .load_async(&mut conn)
                    .await
                    .map_err(|e| backend.error("load the lock scripts", e))?;
            }
            Ok::<_, LockError>(())
        })
        .await;
        match first {
            Ok(result) => result?,
            Err(_) => {
                return Err(LockError::backend(
                    format!("cannot connect to redis at {}", backend.address),
                    format!("no answer within {connect_timeout:?}"),
                ));
            }
        }
        Ok(backend)
    }

    /// The shared multiplexed connection, opened from the pool when there is none.
    async fn conn(&self) -> Result<MultiplexedConnection, LockError> {
        Ok(self.conn_and_origin().await?.0)
    }

    /// The connection, and whether it was the shared one (which may have died while
    /// idle) rather than one just opened.
    ///
    /// The connection is opened by the pool's manager (so with the pool's address,
    /// credentials and settings) but not checked out of the pool: a multiplexed
    /// connection serves every task at once, and opening it directly reports a refused or
    /// failed connect at once, with its cause, where a pool checkout would wait out its
    /// timeout. One task reconnects at a time; the others then share its connection.
    async fn conn_and_origin(&self) -> Result<(MultiplexedConnection, bool), LockError> {
        if let Some(conn) = &*self.conn.load() {
            return Ok((MultiplexedConnection::clone(conn), true));
        }
        // Boxed: opening a connection takes a future of kilobytes, which every command's
        // future would otherwise carry (and move) for this rare path.
        Box::pin(self.reconnect()).await.map(|conn| (conn, false))
    }

    /// Opens the shared connection, unless another task just did.
    async fn reconnect(&self) -> Result<MultiplexedConnection, LockError> {
        let _one_at_a_time = self.reconnecting.lock().await;
        if let Some(conn) = &*self.conn.load() {
            return Ok(MultiplexedConnection::clone(conn));
        }
        let context = || format!("cannot connect to redis at {}", self.address);
        let conn = tokio::time::timeout(self.connect_timeout, self.pool.dedicated_connection())
            .await
            .map_err(|_| {
                LockError::backend(
                    context(),
                    format!("no answer within {:?}", self.connect_timeout),
                )
            })?
            .map_err(|e| LockError::backend(context(), e))?;
        self.conn.store(Some(Arc::new(conn.clone())));
        Ok(conn)
    }

    /// Runs `op` on the shared connection. If that connection turns out dead (the
    /// server restarted or the network dropped it while it was idle), runs `op` once more
    /// on a fresh one. Only operations that are safe to repeat come here: the acquire
    /// script recognises its own token, extend and reads are idempotent. A timeout is
    /// not retried: the first request may still run.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn would keep a second copy of its arguments in every attempt's future"
    )]
    fn run<T, F, Fut>(&self, what: &str, op: F) -> impl Future<Output = Result<T, LockError>>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        async move {
            let (conn, shared) = self.conn_and_origin().await?;
            match op(conn).await {
                Ok(value) => Ok(value),
                Err(e) if shared && e.is_connection_dropped() && !e.is_timeout() => {
                    tracing::debug!(error = %e, "shared redis connection is dead; retrying on a fresh one");
                    self.conn.store(None);
                    let conn = self.conn().await?;
                    op(conn).await.map_err(|e| self.error(what, e))
                }
                Err(e) => Err(self.error(what, e)),
            }
        }
    }

    /// Wraps a command failure; forgets the shared connection when it is broken.
    fn error(&self, what: &str, e: RedisError) -> LockError {
        if e.is_unrecoverable_error() || e.is_connection_dropped() || e.is_io_error() {
            self.conn.store(None);
        }
        LockError::backend(format!("{what} on redis at {}", self.address), e)
    }

    /// The lock's key, `P{N}`.
    pub(crate) fn lock_key(&self, name: &str) -> String {
        let mut key = String::with_capacity(self.namespace.len() + name.len() + 2);
        self.write_lock_key(&mut key, name);
        key
    }

    fn write_lock_key(&self, key: &mut String, name: &str) {
        key.clear();
        key.push_str(&self.namespace);
        key.push('{');
        key.push_str(name);
        key.push('}');
    }

    /// One attempt at lock `name`. The script call is built before the future, so the
    /// future (boxed by the caller, once per attempt) holds it once.
    pub(crate) fn try_acquire<'a>(
        self: &'a Arc<Self>,
        name: &str,
        token: &'a str,
        lease: Duration,
        mode: Mode,
    ) -> impl Future<Output = Result<Attempt, LockError>> + Send + 'a {
        let key = self.lock_key(name);
        // The counter must outlive every lease drawn from it.
        let fence_ttl_ms = self.fence_ttl_ms.max(millis(lease));
        let call = match mode {
            Mode::Plain { waits } => {
                let keys = ["", FENCE_SUFFIX, LOCKERS_SUFFIX];
                Call::new(&self.scripts.acquire, &key, &keys)
                    .arg(token)
                    .arg(millis(lease))
                    .arg(fence_ttl_ms)
                    .arg(if waits { self.listening_id() } else { "" })
                    .arg(millis(WAITING_LOCKER))
            }
            Mode::Fair { place } => self.scripts.fair(
                &key,
                FairOp::Acquire {
                    token,
                    lease,
                    place,
                    locker: &self.channels.id,
                },
                fence_ttl_ms,
            ),
        };
        async move {
            let (key, call) = (&key, &call);
            self.run("acquire", |conn| {
                // If this future is dropped while the script is in flight, or the reply
                // is lost, the lock may have been taken (or a place in line): give it
                // back by token, on the same connection so that runs after the acquire.
                let mut pending = PendingAcquire {
                    backend: self,
                    conn,
                    key,
                    token,
                    fair: mode.is_fair(),
                    armed: true,
                };
                async move {
                    let attempt = if mode.is_fair() {
                        let reply: (i64, i64, i64) = call.run(&mut pending.conn).await?;
                        fair_attempt(reply)
                    } else {
                        plain_attempt(call.run(&mut pending.conn).await?)
                    };
                    pending.disarm();
                    Ok(attempt)
                }
            })
            .await
        }
    }

    /// Releases if `token` owns `name`. Not retried on a fresh connection: had the first
    /// attempt gone through, the retry would report the lock as not held.
    ///
    /// A plain lock that a task of this `Locker` waits for is passed to that task (see
    /// [`pass`](Self::pass)). The pass runs in the background, so it is seen through even
    /// if this call is dropped, and a waiter is never left claimed.
    pub(crate) async fn release(
        self: &Arc<Self>,
        name: &str,
        token: &str,
        fair: bool,
    ) -> Result<bool, LockError> {
        let key = self.lock_key(name);
        let passer = match self.plan(&key, fair) {
            Plan::Pass(passer) => passer,
            Plan::GiveBack(how) => return self.give_back(&key, token, how).await,
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (this, token) = (self.clone(), token.to_owned());
        self.detached.spawn(name, async move {
            let _ = tx.send(this.pass(&key, &token, &passer).await);
        });
        rx.await.unwrap_or_else(|_| {
            Err(LockError::backend(
                format!("release on redis at {}", self.address),
                "the runtime is shutting down",
            ))
        })
    }

    /// Releases in a background task; used when a guard is dropped.
    pub(crate) fn release_detached(self: &Arc<Self>, name: &str, token: &str, fair: bool) {
        let key = self.lock_key(name);
        match self.plan(&key, fair) {
            Plan::Pass(passer) => {
                let (this, token) = (self.clone(), token.to_owned());
                self.detached.spawn(name, async move {
                    let _ = this.pass(&key, &token, &passer).await;
                });
            }
            Plan::GiveBack(how) => self.give_back_detached(key, token, how),
        }
    }

    /// Releases lock `key` (not name) in a background task, with no pass: for a lock
    /// passed to a waiter that gave up before taking it.
    pub(crate) fn release_key_detached(self: &Arc<Self>, key: &str, token: &str) {
        self.give_back_detached(key.to_owned(), token, self.plain_release(key));
    }

    /// Takes a fair waiter out of the line of lock `key` (not name) in a background
    /// task, passing the lock on if it was handed over to it; used when it gives up.
    pub(crate) fn leave_key_detached(self: &Arc<Self>, key: &str, token: &str) {
        self.give_back_detached(key.to_owned(), token, GiveBack::Leave);
    }

    /// Whether plain waiters can be passed the lock by this `Locker`'s releases.
    pub(crate) fn passes_locally(&self) -> bool {
        self.local_handoffs > 0
    }

    /// How the holder of lock `key` gives it back: a plain lock goes to a local waiter
    /// if one can be passed it, else it is freed. One look at the lock's slot serves both.
    fn plan(&self, key: &str, fair: bool) -> Plan {
        if fair {
            return Plan::GiveBack(GiveBack::FairRelease);
        }
        let slot = self.waiters.slot(key);
        if self.local_handoffs > 0
            && let Some(slot) = slot.as_ref()
            && let Some(passer) = slot.claim_passer(self.local_handoffs)
        {
            return Plan::Pass(passer);
        }
        Plan::GiveBack(self.release_seeing(slot.as_deref()))
    }

    /// The plain release of lock `key`, with no pass.
    fn plain_release(&self, key: &str) -> GiveBack {
        self.release_seeing(self.waiters.slot(key).as_deref())
    }

    /// The plain release of a lock whose local waiters, if any, are in `slot`: they are
    /// woken by the release too (when no other process waits), if they listen at all.
    fn release_seeing(&self, slot: Option<&Slot>) -> GiveBack {
        GiveBack::Release {
            own_waits: self.hub.is_some() && slot.is_some_and(Slot::has_waiters),
        }
    }

    /// Passes lock `key` from its holder `token` to the local waiter `passer`, in one
    /// command, and tells the waiter. Says whether `token` held the lock. A waiter that
    /// gave up meanwhile gets nothing: the lock is then freed, waking every contender.
    async fn pass(&self, key: &str, token: &str, passer: &Waiter) -> Result<bool, LockError> {
        // The counter must outlive every lease drawn from it.
        let fence_ttl_ms = self.fence_ttl_ms.max(millis(passer.lease));
        let sent_at = tokio::time::Instant::now();
        let reply = async {
            let mut conn = self.conn().await?;
            Call::new(&self.scripts.pass, key, &["", FENCE_SUFFIX])
                .arg(token)
                .arg(&*passer.token)
                .arg(millis(passer.lease))
                .arg(fence_ttl_ms)
                .run::<u64>(&mut conn)
                .await
                .map_err(|e| self.error("release", e))
        }
        .await;
        match reply {
            Ok(0) => {
                passer.not_passed(false);
                Ok(false)
            }
            Ok(fence) => {
                tracing::trace!(key, fence, "lock passed to a local waiter");
                if passer.passed(fence, sent_at) == AfterPass::GiveBack
                    && let Err(e) = self
                        .give_back(key, &passer.token, self.plain_release(key))
                        .await
                {
                    tracing::warn!(key, error = %e, "could not free a lock passed to a waiter that gave up; the lease will expire");
                }
                Ok(true)
            }
            Err(e) => {
                // It may have run: should the waiter give up, it frees what it may hold.
                passer.not_passed(true);
                Err(e)
            }
        }
    }

    /// Gives lock `key` back as `how` says, on the shared connection.
    async fn give_back(&self, key: &str, token: &str, how: GiveBack) -> Result<bool, LockError> {
        let mut conn = self.conn().await?;
        self.give_back_on(&mut conn, key, token, how)
            .await
            .map_err(|e| self.error("release", e))
    }

    /// Gives lock `key` back on `conn`, if `token` holds it (or, leaving, takes `token`
    /// out of its line); says whether `token` held it.
    async fn give_back_on(
        &self,
        conn: &mut MultiplexedConnection,
        key: &str,
        token: &str,
        how: GiveBack,
    ) -> Result<bool, RedisError> {
        let call = match how {
            GiveBack::Release { own_waits } => {
                let keys = ["", LOCKERS_SUFFIX, CHANNEL_SUFFIX];
                Call::new(&self.scripts.release, key, &keys)
                    .arg(token)
                    .arg(self.listening_id())
                    .arg(if own_waits { "1" } else { "0" })
                    .arg(millis(WAITING_LOCKER))
            }
            GiveBack::FairRelease => {
                self.scripts
                    .fair(key, FairOp::Release { token }, self.fence_ttl_ms)
            }
            GiveBack::Leave => self
                .scripts
                .fair(key, FairOp::Leave { token }, self.fence_ttl_ms),
        };
        let reply: i64 = call.run(conn).await?;
        Ok(reply == 1)
    }

    /// Passes on, in the background, a wake-up for lock `key` that found no local waiter.
    fn forward_detached(self: &Arc<Self>, key: &str) {
        self.spare_a_poll(
            key,
            "pass on a wake-up",
            |backend, key, mut conn| async move {
                Call::new(
                    &backend.scripts.forward,
                    &key,
                    &[LOCKERS_SUFFIX, CHANNEL_SUFFIX],
                )
                .arg(&*backend.channels.id)
                .run(&mut conn)
                .await
            },
        );
    }

    /// Runs `op` for lock `key` in the background, on the shared connection. A failure is
    /// only logged: these calls spare some waiter a poll, and the poll still comes.
    fn spare_a_poll<F, Fut>(self: &Arc<Self>, key: &str, what: &'static str, op: F)
    where
        F: Fn(Arc<Self>, String, MultiplexedConnection) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<i64, RedisError>> + Send + 'static,
    {
        let (backend, key) = (self.clone(), key.to_owned());
        self.detached.spawn(&key.clone(), async move {
            let done = backend
                .run(what, |conn| op(backend.clone(), key.clone(), conn))
                .await;
            if let Err(e) = done {
                tracing::debug!(key = %key, error = %e, "could not {what}; waiters poll");
            }
        });
    }

    /// This `Locker`'s id, under which a release can wake it; empty without pub/sub.
    fn listening_id(&self) -> &str {
        if self.hub.is_some() {
            &self.channels.id
        } else {
            ""
        }
    }

    fn give_back_detached(self: &Arc<Self>, key: String, token: &str, how: GiveBack) {
        let backend = self.clone();
        let token = token.to_owned();
        self.detached.spawn(&key.clone(), async move {
            if let Err(e) = backend.give_back(&key, &token, how).await {
                tracing::warn!(key = %key, error = %e, "background release failed; the lease will expire");
            }
        });
    }

    /// Waits until every background release has been answered.
    pub(crate) async fn flush(&self) {
        self.detached.idle().await;
    }

    pub(crate) async fn extend(
        &self,
        name: &str,
        token: &str,
        lease: Duration,
    ) -> Result<bool, LockError> {
        let key = &self.lock_key(name);
        let reply: i64 = self
            .run("extend", |mut conn| async move {
                Call::new(&self.scripts.extend, key, &[""])
                    .arg(token)
                    .arg(millis(lease))
                    .run(&mut conn)
                    .await
            })
            .await?;
        Ok(reply == 1)
    }

    pub(crate) async fn is_held(&self, name: &str, token: &str) -> Result<bool, LockError> {
        let key = &self.lock_key(name);
        let owner: Option<String> = self
            .run("read the owner", |mut conn| async move {
                redis::cmd("GET").arg(key).query_async(&mut conn).await
            })
            .await?;
        Ok(owner.as_deref() == Some(token))
    }

    /// Renews many leases with pipelined compare-and-pexpire calls: one write per chunk,
    /// not one round trip per lease. The result says, per lease, whether it is still ours.
    pub(crate) async fn renew_many(
        &self,
        items: &[(&str, &str, Duration)],
    ) -> Result<Vec<bool>, LockError> {
        self.run("renew leases", |conn| self.renew_on(conn, items))
            .await
    }

    async fn renew_on(
        &self,
        mut conn: MultiplexedConnection,
        items: &[(&str, &str, Duration)],
    ) -> Result<Vec<bool>, RedisError> {
        let mut held = Vec::with_capacity(items.len());
        let mut key = String::new();
        for chunk in items.chunks(RENEW_CHUNK) {
            let mut pipe = redis::pipe();
            for (name, token, lease) in chunk {
                self.write_lock_key(&mut key, name);
                pipe.cmd("EVALSHA")
                    .arg(self.scripts.extend.get_hash())
                    .arg(1)
                    .arg(&key)
                    .arg(*token)
                    .arg(millis(*lease));
            }
            let reply: Vec<i64> = match pipe.query_async(&mut conn).await {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    // The server lost its script cache (a restart, SCRIPT FLUSH): load, retry.
                    self.scripts
                        .extend
                        .prepare_invoke()
                        .load_async(&mut conn)
                        .await?;
                    pipe.query_async(&mut conn).await?
                }
                reply => reply?,
            };
            held.extend(reply.into_iter().map(|r| r == 1));
        }
        Ok(held)
    }

    /// Registers a waiter for `name` and makes sure release messages for it are delivered.
    /// Also says whether it joined waiters that were already receiving them.
    pub(crate) fn join(self: &Arc<Self>, name: &str) -> (Arc<Slot>, bool) {
        let key: Arc<str> = self.lock_key(name).into();
        let mut joined_others = false;
        let slot = match &self.hub {
            Some(hub) => {
                hub.ensure_running(Arc::downgrade(self));
                self.waiters.join(&key, |edge| match edge {
                    Edge::Changed => hub.send(HubCmd::Subscribe(key.clone())),
                    Edge::Unchanged => joined_others = true,
                })
            }
            None => self.waiters.join(&key, |_| {}),
        };
        let subscribed = joined_others && slot.is_ready();
        (slot, subscribed)
    }

    /// Unregisters a waiter of `slot`'s lock. When the last local one leaves without the
    /// lock (`gave_up`), this `Locker` is taken out of the lock's waiting `Locker`s, so
    /// that no release wakes it for nothing.
    pub(crate) fn leave(self: &Arc<Self>, slot: &Arc<Slot>, gave_up: bool) {
        let key = slot.key();
        let mut last = false;
        self.waiters.leave(slot, self.hub.is_some(), |edge| {
            if let (Some(hub), Edge::Changed) = (&self.hub, edge) {
                hub.send(HubCmd::Idle(key.clone()));
                last = true;
            }
        });
        if last && gave_up {
            self.spare_a_poll(
                key,
                "leave the waiting lockers",
                |backend, key, mut conn| async move {
                    redis::cmd("ZREM")
                        .arg(format!("{key}{LOCKERS_SUFFIX}"))
                        .arg(&*backend.channels.id)
                        .query_async(&mut conn)
                        .await
                },
            );
        }
    }

    /// Whether waiters can count on release messages (a url was given for pub/sub).
    pub(crate) fn has_pubsub(&self) -> bool {
        self.hub.is_some()
    }
}

/// Gives a lock back by token if an acquire was cut short after it was sent.
struct PendingAcquire<'a> {
    backend: &'a Arc<RedisBackend>,
    conn: MultiplexedConnection,
    key: &'a str,
    token: &'a str,
    /// A fair attempt leaves the line (giving back a lock handed over); a plain one
    /// releases.
    fair: bool,
    armed: bool,
}

impl PendingAcquire<'_> {
    /// The reply came: nothing to give back.
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for PendingAcquire<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let backend = self.backend.clone();
        let mut conn = self.conn.clone();
        let how = if self.fair {
            GiveBack::Leave
        } else {
            self.backend.plain_release(self.key)
        };
        let (key, token) = (self.key.to_owned(), self.token.to_owned());
        self.backend.detached.spawn(self.key, async move {
            if let Err(e) = backend.give_back_on(&mut conn, &key, &token, how).await {
                tracing::warn!(key = %key, error = %e, "could not give back an interrupted acquire; the lease will expire");
            }
        });
    }
}

/// Background releases (of dropped guards, of interrupted acquires), counted so that
/// [`Locker::flush`](crate::Locker::flush) can wait for them.
#[derive(Debug, Default)]
struct Detached {
    pending: AtomicUsize,
    idle: Notify,
}

impl Detached {
    fn spawn(self: &Arc<Self>, key: &str, fut: impl Future<Output = ()> + Send + 'static) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %key, "no tokio runtime to release the lock in; the lease will expire");
            return;
        };
        self.pending.fetch_add(1, Ordering::AcqRel);
        let this = self.clone();
        handle.spawn(async move {
            fut.await;
            if this.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                this.idle.notify_waiters();
            }
        });
    }

    async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// The acquire script's reply, one integer: the fence when taken; minus one minus the
/// holder's lease left when held (zero: no lease).
fn plain_attempt(reply: i64) -> Attempt {
    match u64::try_from(reply) {
        Ok(0) => Attempt::Held {
            ttl: None,
            clock_us: None,
        },
        Ok(fence) => Attempt::Acquired { fence, left: None },
        Err(_) => Attempt::Held {
            ttl: Some(Duration::from_millis((-1 - reply).unsigned_abs())),
            clock_us: None,
        },
    }
}

/// The fair script's reply to an acquire: taken (1) with the fence and, for a lock handed
/// over earlier, the lease it still has; or not (0) with the holder's lease left and the
/// server clock.
fn fair_attempt((acquired, value, clock): (i64, i64, i64)) -> Attempt {
    if acquired == 1 {
        Attempt::Acquired {
            fence: u64::try_from(value).unwrap_or_default(),
            left: u64::try_from(clock).ok().map(Duration::from_millis),
        }
    } else {
        Attempt::Held {
            ttl: u64::try_from(value).ok().map(Duration::from_millis),
            clock_us: u64::try_from(clock).ok(),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Strips the user name and password from a Redis URL, for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://***@{}", &url[..scheme_end], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[derive(Debug)]
enum HubCmd {
    Subscribe(Arc<str>),
    /// The last local waiter left: unsubscribe after [`LINGER`] unless one comes back.
    Idle(Arc<str>),
}

/// The pub/sub side of a `Locker`: one task owning one dedicated pub/sub connection,
/// subscribed to the release channel of every lock that has local waiters (or had, until
/// a moment ago: see [`LINGER`]). It runs only
/// while there is something to wait for, reconnects with backoff, and when the
/// connection drops it wakes every waiter, since messages may have been missed.
#[derive(Debug)]
struct Hub {
    client: redis::Client,
    waiters: Arc<Waiters>,
    connect_timeout: Duration,
    channels: Channels,
    tx: Mutex<Option<mpsc::UnboundedSender<HubCmd>>>,
}

impl Hub {
    fn new(
        client: redis::Client,
        waiters: Arc<Waiters>,
        connect_timeout: Duration,
        channels: Channels,
    ) -> Self {
        Self {
            client,
            waiters,
            connect_timeout,
            channels,
            tx: Mutex::new(None),
        }
    }

    /// Starts the hub task if it is not running (first use, or its runtime is gone).
    /// `backend` passes on wake-ups that find no waiter.
    fn ensure_running(&self, backend: Weak<RedisBackend>) {
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if tx.as_ref().is_some_and(|tx| !tx.is_closed()) {
            return;
        }
        let (new_tx, rx) = mpsc::unbounded_channel();
        // Locks that already have slots (from a hub that died with its runtime).
        for (key, busy) in self.waiters.keys() {
            let _ = new_tx.send(HubCmd::Subscribe(key.clone()));
            if !busy {
                let _ = new_tx.send(HubCmd::Idle(key));
            }
        }
        tokio::spawn(run_hub(
            self.client.clone(),
            self.waiters.clone(),
            self.connect_timeout,
            self.channels.clone(),
            backend,
            rx,
        ));
        *tx = Some(new_tx);
    }

    fn send(&self, cmd: HubCmd) {
        if let Some(tx) = &*self.tx.lock().unwrap_or_else(|e| e.into_inner()) {
            // A closed hub is restarted, with every current key, by the next waiter.
            let _ = tx.send(cmd);
        }
    }
}

/// The channel a `Locker` listens to for a lock: its own, on which a release wakes it and
/// a fair lock is handed over to its waiters (so a release wakes one process, not every
/// one that waits for the lock).
#[derive(Debug, Clone)]
struct Channels {
    id: Arc<str>,
    /// `:released:<id>`.
    own_suffix: Arc<str>,
}

impl Channels {
    fn new() -> Self {
        let id = format!("{:016x}", fastrand::u64(..));
        Self {
            own_suffix: format!("{CHANNEL_SUFFIX}:{id}").into(),
            id: id.into(),
        }
    }

    /// This `Locker`'s channel of lock `key`.
    fn of(&self, key: &str) -> String {
        format!("{key}{}", self.own_suffix)
    }

    /// The lock whose channel this is.
    fn key_of<'a>(&self, channel: &'a str) -> Option<&'a str> {
        channel.strip_suffix(&*self.own_suffix)
    }
}

enum HubEvent {
    Cmd(Option<HubCmd>),
    Message(Option<redis::Msg>),
    Retry,
    Lingered,
}

async fn run_hub(
    client: redis::Client,
    waiters: Arc<Waiters>,
    connect_timeout: Duration,
    channels: Channels,
    backend: Weak<RedisBackend>,
    mut rx: mpsc::UnboundedReceiver<HubCmd>,
) {
    const MIN_BACKOFF: Duration = Duration::from_millis(50);
    let mut desired: HashSet<Arc<str>> = HashSet::new();
    // Idle locks in the order they fell idle, and when each last did: an entry whose
    // time is not the latest is stale.
    let mut idle: VecDeque<(tokio::time::Instant, Arc<str>)> = VecDeque::new();
    let mut idle_since: HashMap<Arc<str>, tokio::time::Instant> = HashMap::new();
    let mut sink: Option<PubSubSink> = None;
    let mut stream: Option<PubSubStream> = None;
    let mut backoff = MIN_BACKOFF;
    loop {
        if sink.is_none() && !desired.is_empty() {
            match connect_pubsub(&client, connect_timeout, &channels, &desired).await {
                Ok((new_sink, new_stream)) => {
                    tracing::debug!(channels = desired.len(), "pub/sub connected");
                    for key in &desired {
                        waiters.set_ready(key, true);
                    }
                    sink = Some(new_sink);
                    stream = Some(new_stream);
                    backoff = MIN_BACKOFF;
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "pub/sub connection failed; waiters poll until it is back");
                }
            }
        }
        let event = tokio::select! {
            cmd = rx.recv() => HubEvent::Cmd(cmd),
            msg = async { stream.as_mut()?.next().await }, if stream.is_some() => HubEvent::Message(msg),
            () = tokio::time::sleep(backoff), if sink.is_none() && !desired.is_empty() => HubEvent::Retry,
            () = lingered(idle.front().map(|(at, _)| *at)), if !idle.is_empty() => HubEvent::Lingered,
        };
        match event {
            HubEvent::Cmd(None) => return,
            HubEvent::Cmd(Some(HubCmd::Subscribe(key))) => {
                if let Some(s) = &mut sink {
                    match s.subscribe(&channels.of(&key)).await {
                        Ok(()) => waiters.set_ready(&key, true),
                        Err(e) => {
                            tracing::warn!(error = %e, "pub/sub subscribe failed; reconnecting");
                            (sink, stream) = (None, None);
                            waiters.wake_all_unready();
                        }
                    }
                }
                desired.insert(key);
            }
            HubEvent::Cmd(Some(HubCmd::Idle(key))) => {
                let now = tokio::time::Instant::now();
                idle_since.insert(key.clone(), now);
                idle.push_back((now, key));
            }
            HubEvent::Lingered => {
                let now = tokio::time::Instant::now();
                while idle
                    .front()
                    .is_some_and(|(since, _)| *since + LINGER <= now)
                {
                    let Some((since, key)) = idle.pop_front() else {
                        break;
                    };
                    if idle_since.get(&key) != Some(&since) {
                        continue;
                    }
                    idle_since.remove(&key);
                    // A waiter that came back keeps the subscription.
                    if !waiters.remove_if_idle(&key) {
                        continue;
                    }
                    desired.remove(&key);
                    if let Some(s) = &mut sink
                        && let Err(e) = s.unsubscribe(&channels.of(&key)).await
                    {
                        tracing::warn!(error = %e, "pub/sub unsubscribe failed; reconnecting");
                        (sink, stream) = (None, None);
                        waiters.wake_all_unready();
                    }
                }
            }
            HubEvent::Message(Some(msg)) => {
                if let Some(key) = channels.key_of(msg.get_channel_name()) {
                    match hand_over(msg.get_payload_bytes()) {
                        Some((token, grant)) => waiters.deliver(key, token, grant),
                        None => {
                            if !waiters.wake_one(key)
                                && let Some(backend) = backend.upgrade()
                            {
                                backend.forward_detached(key);
                            }
                        }
                    }
                }
            }
            HubEvent::Message(None) => {
                tracing::warn!("pub/sub connection lost; reconnecting");
                (sink, stream) = (None, None);
                waiters.wake_all_unready();
            }
            HubEvent::Retry => backoff = (backoff * 2).min(Duration::from_secs(2)),
        }
    }
}

/// The hand-over a fair release names in its message, `"<token> <fence> <server us>"`;
/// `None` for a release that freed the lock (an empty message).
fn hand_over(payload: &[u8]) -> Option<(&str, Grant)> {
    let mut parts = std::str::from_utf8(payload).ok()?.split(' ');
    let (token, fence, at_us) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let grant = Grant {
        fence: fence.parse().ok()?,
        at_us: at_us.parse().ok()?,
    };
    Some((token, grant))
}

/// Resolves when the lock that fell idle at `since` has lingered long enough.
async fn lingered(since: Option<tokio::time::Instant>) {
    if let Some(since) = since {
        tokio::time::sleep_until(since + LINGER).await;
    }
}

async fn connect_pubsub(
    client: &redis::Client,
    connect_timeout: Duration,
    channels: &Channels,
    keys: &HashSet<Arc<str>>,
) -> Result<(PubSubSink, PubSubStream), RedisError> {
    let connect = async {
        let (mut sink, stream) = client.get_async_pubsub().await?.split();
        let names: Vec<String> = keys.iter().map(|k| channels.of(k)).collect();
        sink.subscribe(&names).await?;
        Ok((sink, stream))
    };
    tokio::time::timeout(connect_timeout, connect)
        .await
        .unwrap_or_else(|_| {
            Err(RedisError::from((
                redis::ErrorKind::Io,
                "pub/sub connect timed out",
            )))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_over_messages_name_their_waiter() {
        let grant = Grant {
            fence: 1_795_403_503_165_794,
            at_us: 1_795_403_503_519_585,
        };
        assert_eq!(
            hand_over(b"6f1c 1795403503165794 1795403503519585"),
            Some(("6f1c", grant))
        );
        for freed in [&b""[..], b"6f1c", b"6f1c 1 x", b"6f1c 1 2 3", b"\xff 1 2"] {
            assert_eq!(hand_over(freed), None, "{freed:?}");
        }
    }

    #[test]
    fn a_lock_is_found_from_its_lockers_channel() {
        let channels = Channels::new();
        let own = channels.of("lock:{a:released}");
        assert_eq!(own, format!("lock:{{a:released}}:released:{}", channels.id));
        assert_eq!(channels.key_of(&own), Some("lock:{a:released}"));
        let other = Channels::new().of("lock:{a}");
        assert_eq!(channels.key_of(&other), None, "another Locker's channel");
        assert_eq!(channels.key_of("lock:{a}:released"), None);
    }

    #[test]
    fn redact_hides_credentials() {
        assert_eq!(
            redact("redis://user:secret@db.internal:6380/2"),
            "redis://***@db.internal:6380/2"
        );
        assert_eq!(redact("redis://:p@ss@h:1"), "redis://***@h:1");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
