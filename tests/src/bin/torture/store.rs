//! The lock store of a scenario: the servers this process starts and faults, and the
//! spec a worker connects with (`redis=URL`, `cluster=URL,...`, `sentinel=URL,...`,
//! `redlock=URL,...`).

use std::time::Duration;

use lock_core::{LockError, Locker};
use lock_tests::{MASTER_NAME, RedisCluster, RedisSentinel, RedisServer, TcpProxy};

/// How many independent masters a RedLock scenario runs.
pub(crate) const REDLOCK_MASTERS: usize = 5;

/// Which deployment a scenario runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deployment {
    /// One Redis.
    Single,
    /// One Redis, which the workers reach through a proxy that cuts connections.
    Proxied,
    /// Three masters with a replica each.
    Cluster,
    /// A master and a replica watched by three sentinels.
    Sentinel,
    /// Independent masters.
    RedLock,
}

impl Deployment {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Deployment::Single => "redis",
            Deployment::Proxied => "redis, proxied",
            Deployment::Cluster => "cluster 3+3",
            Deployment::Sentinel => "sentinel",
            Deployment::RedLock => "redlock 5",
        }
    }
}

/// The running servers of a deployment.
pub(crate) enum Store {
    Single(RedisServer),
    Proxied(RedisServer, TcpProxy),
    Cluster(RedisCluster),
    Sentinel(RedisSentinel),
    RedLock(Vec<RedisServer>),
}

impl Store {
    pub(crate) fn spawn(deployment: Deployment) -> Store {
        match deployment {
            Deployment::Single => Store::Single(RedisServer::spawn()),
            Deployment::Proxied => {
                let server = RedisServer::spawn();
                let proxy = TcpProxy::start(server.addr()).expect("start the proxy");
                Store::Proxied(server, proxy)
            }
            Deployment::Cluster => {
                let cluster = RedisCluster::spawn_with_replicas();
                cluster.wait_replicated();
                Store::Cluster(cluster)
            }
            Deployment::Sentinel => Store::Sentinel(RedisSentinel::spawn()),
            Deployment::RedLock => Store::RedLock(RedisServer::spawn_many(REDLOCK_MASTERS)),
        }
    }

    /// What a worker passes to [`connect`].
    pub(crate) fn spec(&self) -> String {
        let urls = |servers: &[RedisServer]| {
            servers
                .iter()
                .map(RedisServer::url)
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Store::Single(server) => format!("redis={}", server.url()),
            Store::Proxied(_, proxy) => format!("redis={}", proxy.url()),
            Store::Cluster(cluster) => format!("cluster={}", cluster.urls().join(",")),
            Store::Sentinel(sentinel) => format!("sentinel={}", sentinel.sentinel_urls().join(",")),
            Store::RedLock(masters) => format!("redlock={}", urls(masters)),
        }
    }

    /// The one server of a single-node deployment.
    pub(crate) fn server(&mut self) -> &mut RedisServer {
        match self {
            Store::Single(server) | Store::Proxied(server, _) => server,
            _ => panic!("the fault needs a single-node store"),
        }
    }
}

/// A worker's `Locker` for `spec`, its calls bounded by `lease` where a store could
/// otherwise hang (a paused server).
pub(crate) async fn connect(spec: &str, lease: Duration) -> Result<Locker, LockError> {
    let (kind, urls) = spec
        .split_once('=')
        .ok_or_else(|| LockError::Config(format!("not a store spec: {spec:?}")))?;
    let urls: Vec<&str> = urls.split(',').collect();
    let builder = Locker::builder()
        .default_lease(lease)
        .connect_timeout(lease);
    let builder = match kind {
        "redis" => builder.url(urls[0]),
        "cluster" => builder.cluster(urls),
        "sentinel" => builder.sentinel(urls, MASTER_NAME),
        "redlock" => builder.redlock(urls),
        other => return Err(LockError::Config(format!("no store is called {other:?}"))),
    };
    builder.build().await
}
