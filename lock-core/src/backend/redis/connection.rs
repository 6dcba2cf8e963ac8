//! How commands reach Redis: one multiplexed connection, shared by every call of a
//! `Locker` (it serves many tasks at once), opened again after it breaks.
//!
//! This is where deployments differ ([`Source`]): a single node, opened from a url or by
//! a bb8 pool's manager, or the master that Sentinel names, found again after a failover.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bb8_redis::RedisConnectionManager;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ConnectionInfo, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value};

use super::sentinel::Sentinels;
use super::slots::Slots;
use crate::LockError;

/// A connection in hand, for one call: to one server, or to a Redis Cluster (which sends
/// each command to the node of its first key, and follows `MOVED` and `ASK`), with the
/// cluster's slot map as far as it is known. Cloning it is cheap: it is shared.
#[derive(Clone)]
pub(super) enum Conn {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection, Arc<Slots>),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Node(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn, _) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Node(conn) => conn.req_packed_commands(cmd, offset, count),
            Self::Cluster(conn, _) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(conn) => conn.get_db(),
            Self::Cluster(conn, _) => conn.get_db(),
        }
    }
}

/// A connection in hand, and the failover epoch of the master it reaches (Sentinel's
/// config epoch when the connection was opened; 0 elsewhere), which goes into the
/// fencing tokens drawn on it.
#[derive(Clone)]
pub(super) struct InHand {
    pub(super) conn: Conn,
    pub(super) epoch: u64,
}

impl InHand {
    /// A connection to one server that is not behind Sentinel.
    fn node(conn: MultiplexedConnection) -> Self {
        Self {
            conn: Conn::Node(conn),
            epoch: 0,
        }
    }
}

/// Where connections come from.
pub(super) enum Source {
    /// The server of a url.
    Client(Box<redis::Client>),
    /// A bb8 pool's manager (not a checkout: one connection serves every call, and a
    /// checkout would `PING` first).
    Pool(bb8::Pool<RedisConnectionManager>),
    /// The master its sentinels name, confirmed by `ROLE`.
    Sentinel(Arc<Sentinels>),
    /// A Redis Cluster, from its seed nodes.
    Cluster(Box<ClusterClient>),
}

/// Where the pub/sub connection goes: the server of a url, the master its sentinels
/// name, or a Redis Cluster (its seed nodes).
#[derive(Debug, Clone)]
pub(super) enum Endpoint {
    Client(Box<redis::Client>),
    Sentinel(Arc<Sentinels>),
    Cluster(Arc<[ConnectionInfo]>),
}

impl Endpoint {
    /// The failover epoch of the master, as far as is known (0 but on Sentinel).
    pub(super) fn epoch(&self) -> u64 {
        match self {
            Self::Client(_) | Self::Cluster(_) => 0,
            Self::Sentinel(sentinels) => sentinels.epoch(),
        }
    }
}

/// How long opening a connection, and each command's answer, may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
}

/// The shared connection of one `Locker`. Own code, not redis-rs's `ConnectionManager`:
/// that one waits for a reconnect inside each command, so a call could not tell when its
/// command was sent, and a lease must run from then (tests/outage.rs shows the lease lost).
pub(super) struct Connection {
    source: Source,
    shared: Mutex<Option<InHand>>,
    /// One task opens a connection at a time; the others then share it.
    opening: tokio::sync::Mutex<()>,
    timeouts: Timeouts,
    /// Where it goes, for messages (never with a password).
    address: String,
}

impl Connection {
    /// Connections from `source`, each opened within the connect timeout and waiting for
    /// each answer within the response timeout. None is opened before the first call.
    pub(super) fn new(source: Source, address: String, timeouts: Timeouts) -> Self {
        Self {
            source,
            shared: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            timeouts,
            address,
        }
    }

    /// How long opening a connection may take.
    pub(super) fn connect_timeout(&self) -> Duration {
        self.timeouts.connect
    }

    /// Where the connection goes, for messages.
    pub(super) fn address(&self) -> &str {
        &self.address
    }

    fn shared(&self) -> MutexGuard<'_, Option<InHand>> {
        // Every update is one assignment: a poisoned lock still guards a whole value.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shared connection, opened first if need be. Once it returns, a command sent on
    /// it is on its way.
    pub(super) async fn get(&self) -> Result<Conn, LockError> {
        Ok(self.in_hand().await?.conn)
    }

    /// [`get`](Self::get), with the failover epoch of the master it reaches.
    pub(super) async fn in_hand(&self) -> Result<InHand, LockError> {
        if let Some(in_hand) = self.shared().clone() {
            return Ok(in_hand);
        }
        // Boxed: opening is rare, and inline its state would be part of every command's
        // future.
        Box::pin(self.open()).await
    }

    /// Opens the shared connection, unless another task just did. A refused connect is
    /// reported at once, with its cause.
    async fn open(&self) -> Result<InHand, LockError> {
        let _one_at_a_time = self.opening.lock().await;
        if let Some(in_hand) = self.shared().clone() {
            return Ok(in_hand);
        }
        let opening = async {
            let in_hand = match &self.source {
                Source::Client(client) => {
                    InHand::node(client.get_multiplexed_async_connection().await?)
                }
                Source::Pool(pool) => InHand::node(pool.dedicated_connection().await?),
                Source::Sentinel(sentinels) => {
                    let (conn, epoch) = sentinels.master_connection().await?;
                    InHand {
                        conn: Conn::Node(conn),
                        epoch,
                    }
                }
                // The cluster's client was built with the response timeout.
                Source::Cluster(cluster) => InHand {
                    conn: Conn::Cluster(cluster.get_async_connection().await?, Arc::default()),
                    epoch: 0,
                },
            };
            Ok(in_hand)
        };
        let context = || format!("cannot connect to redis at {}", self.address);
        let mut in_hand = tokio::time::timeout(self.timeouts.connect, opening)
            .await
            .map_err(|_| {
                let cause = format!("no answer within {:?}", self.timeouts.connect);
                LockError::backend(context(), cause)
            })?
            .map_err(|e: RedisError| LockError::backend(context(), e))?;
        if let Conn::Node(conn) = &mut in_hand.conn {
            conn.set_response_timeout(self.timeouts.response);
        }
        *self.shared() = Some(in_hand.clone());
        Ok(in_hand)
    }

    /// Runs `op` on the shared connection. If that connection turns out dead (the
    /// server restarted or the network dropped it while it was idle) or no longer on the
    /// master (a failover demoted it: `READONLY`), runs `op` once more on a fresh one.
    /// Only calls that are safe to repeat come here: the acquire scripts recognise their
    /// own token, extend and reads are idempotent. A timeout is not retried: the first
    /// request may still run.
    pub(super) async fn run<T, F, Fut>(&self, what: &str, op: F) -> Result<T, LockError>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        self.run_in_hand(what, |in_hand| op(in_hand.conn)).await
    }

    /// [`run`](Self::run), giving `op` the failover epoch of the master too.
    pub(super) async fn run_in_hand<T, F, Fut>(&self, what: &str, op: F) -> Result<T, LockError>
    where
        F: Fn(InHand) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let conn = self.in_hand().await?;
        let e = match op(conn).await {
            Ok(value) => return Ok(value),
            Err(e) if (e.is_connection_dropped() && !e.is_timeout()) || is_read_only(&e) => e,
            Err(e) => return Err(self.error(what, e)),
        };
        tracing::debug!(error = %e, "redis connection is dead; retrying on a fresh one");
        self.forget_broken(&e);
        let conn = self.in_hand().await?;
        op(conn).await.map_err(|e| self.error(what, e))
    }

    /// Wraps a failure of `what`; forgets the shared connection when it is broken.
    pub(super) fn error(&self, what: &str, e: RedisError) -> LockError {
        self.forget_broken(&e);
        LockError::backend(format!("{what} on redis at {}", self.address), e)
    }

    /// A connection that `e` shows broken, or no longer answering, is opened again by the
    /// next call.
    fn forget_broken(&self, e: &RedisError) {
        let broken = e.is_unrecoverable_error() || e.is_connection_dropped() || e.is_io_error();
        if broken || is_read_only(e) {
            *self.shared() = None;
        }
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match self.source {
            Source::Client(_) => "url",
            Source::Pool(_) => "pool",
            Source::Sentinel(_) => "sentinel",
            Source::Cluster(_) => "cluster",
        };
        f.debug_struct("Connection")
            .field("source", &source)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// A write refused by a replica: the connection is on a master that a failover demoted.
fn is_read_only(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(ServerErrorKind::ReadOnly) || e.code() == Some("READONLY")
}
