//! The lock store of a scenario: the servers this process starts and faults, and the
//! spec a worker connects with (`redis=URL`, `cluster=URL,...`, `sentinel=URL,...`,
//! `redlock=URL,...`, `zookeeper=HOST:PORT,...`, `postgres=URL`, `mysql=URL`).

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{MySqlStore, PostgresStore, ZooKeeperStore};
use lock_core::{LockError, Locker};
use lock_tests::{
    MASTER_NAME, MariaDbServer, PostgresServer, RedisCluster, RedisSentinel, RedisServer, TcpProxy,
    TestServer, ZooKeeperEnsemble, ZooKeeperServer,
};

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
    /// One ZooKeeper server.
    ZooKeeper,
    /// A 3-node ZooKeeper ensemble.
    ZooKeeperEnsemble,
    /// One PostgreSQL server.
    Postgres,
    /// One MariaDB, its holds `GET_LOCK`s on leased sessions.
    MariaDb,
}

impl Deployment {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Deployment::Single => "redis",
            Deployment::Proxied => "redis, proxied",
            Deployment::Cluster => "cluster 3+3",
            Deployment::Sentinel => "sentinel",
            Deployment::RedLock => "redlock 5",
            Deployment::ZooKeeper => "zookeeper",
            Deployment::ZooKeeperEnsemble => "zookeeper 3",
            Deployment::Postgres => "postgres",
            Deployment::MariaDb => "mariadb",
        }
    }

    /// How much later than its lifetime the servers may free a silent holder's hold:
    /// Redis expires a lease on time, ZooKeeper expires sessions in batches, once a tick
    /// (500 ms on the harness's servers). PostgreSQL ends an idle session on time, but
    /// its store promises no more than lease + 1 s, the slack included. MariaDB ends a session idle for `wait_timeout` whole seconds, checked
    /// as the second turns.
    pub(crate) fn expiry_delay(self) -> Duration {
        match self {
            Deployment::MariaDb => Duration::from_secs(1),
            _ if self.has_sessions() => Duration::from_millis(500),
            _ => Duration::ZERO,
        }
    }

    /// Whether a restart of the server ends every hold: Redis starts empty, PostgreSQL
    /// and MariaDB lose every session; ZooKeeper keeps its nodes and sessions on disk, so
    /// a client that comes back within its session timeout keeps its holds.
    pub(crate) fn restart_ends_holds(self) -> bool {
        !matches!(self, Deployment::ZooKeeper | Deployment::ZooKeeperEnsemble)
    }

    /// Whether a killed process's holds free at once: MariaDB ends a session whose
    /// connection closed, and the kernel closes a killed process's connections.
    pub(crate) fn frees_with_the_process(self) -> bool {
        self == Deployment::MariaDb
    }

    /// Whether a hold lasts as long as its session (ZooKeeper's, PostgreSQL's or
    /// MariaDB's, which the server ends once idle for the session lease), rather than a
    /// lease.
    pub(crate) fn has_sessions(self) -> bool {
        matches!(
            self,
            Deployment::ZooKeeper
                | Deployment::ZooKeeperEnsemble
                | Deployment::Postgres
                | Deployment::MariaDb
        )
    }
}

/// The running servers of a deployment.
pub(crate) enum Store {
    Single(RedisServer),
    Proxied(RedisServer, TcpProxy),
    Cluster(RedisCluster),
    Sentinel(RedisSentinel),
    RedLock(Vec<RedisServer>),
    ZooKeeper(ZooKeeperServer),
    ZooKeeperEnsemble(ZooKeeperEnsemble),
    Postgres(PostgresServer),
    MariaDb(MariaDbServer),
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
            Deployment::ZooKeeper => Store::ZooKeeper(ZooKeeperServer::spawn()),
            Deployment::ZooKeeperEnsemble => Store::ZooKeeperEnsemble(ZooKeeperEnsemble::spawn()),
            Deployment::Postgres => Store::Postgres(PostgresServer::spawn()),
            Deployment::MariaDb => Store::MariaDb(MariaDbServer::spawn()),
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
            Store::ZooKeeper(server) => format!("zookeeper={}", server.connect_string()),
            Store::ZooKeeperEnsemble(ensemble) => {
                format!("zookeeper={}", ensemble.connect_string())
            }
            Store::Postgres(server) => format!("postgres={}", server.url()),
            Store::MariaDb(server) => format!("mysql={}", server.url()),
        }
    }

    /// The one server of a single-node Redis deployment.
    pub(crate) fn server(&mut self) -> &mut RedisServer {
        match self {
            Store::Single(server) | Store::Proxied(server, _) => server,
            _ => panic!("the fault needs a single-node Redis store"),
        }
    }

    /// Kills the one server of a single-node deployment and starts it again: Redis empty,
    /// PostgreSQL with its tables (the fence table) and without its sessions, MariaDB
    /// from its data dir (its sessions and their locks gone), ZooKeeper from its data dir
    /// (its nodes and sessions kept).
    pub(crate) fn restart(&mut self) {
        match self {
            Store::Postgres(server) => server.restart(),
            Store::MariaDb(server) => server.restart(),
            Store::ZooKeeper(server) => server.restart(),
            other => other.server().restart(),
        }
    }

    /// The server of a PostgreSQL deployment.
    pub(crate) fn postgres(&self) -> &PostgresServer {
        match self {
            Store::Postgres(server) => server,
            _ => panic!("the fault needs a PostgreSQL store"),
        }
    }

    /// Freezes the one server of a single-node deployment (SIGSTOP; PostgreSQL's
    /// backends with it).
    pub(crate) fn pause(&self) {
        match self {
            Store::Single(server) | Store::Proxied(server, _) => server.pause(),
            Store::ZooKeeper(server) => server.pause(),
            Store::Postgres(server) => server.pause(),
            Store::MariaDb(server) => server.pause(),
            _ => panic!("the fault needs a single-node store"),
        }
    }

    /// Resumes the server that [`pause`](Self::pause) froze (SIGCONT).
    pub(crate) fn resume(&self) {
        match self {
            Store::Single(server) | Store::Proxied(server, _) => server.resume(),
            Store::ZooKeeper(server) => server.resume(),
            Store::Postgres(server) => server.resume(),
            Store::MariaDb(server) => server.resume(),
            _ => panic!("the fault needs a single-node store"),
        }
    }
}

/// A worker's `Locker` for `spec`, whose holds outlive a silent holder by `lifetime`: its
/// leases on Redis (which also bound its calls where a store could otherwise hang, a
/// paused server), its session timeout on ZooKeeper, its session lease on PostgreSQL and
/// MySQL.
pub(crate) async fn connect(spec: &str, lifetime: Duration) -> Result<Locker, LockError> {
    let (kind, addresses) = spec
        .split_once('=')
        .ok_or_else(|| LockError::Config(format!("not a store spec: {spec:?}")))?;
    let builder = Locker::builder().default_lease(lifetime);
    let builder = match kind {
        "postgres" => {
            let url = format!(
                "{addresses}?application_name={}",
                worker_name(std::process::id())
            );
            let store = PostgresStore::builder(&url)
                .session_lease(lifetime)
                .build()
                .await?;
            builder.store(Arc::new(store))
        }
        "zookeeper" => {
            let store = ZooKeeperStore::builder(addresses)
                .session_timeout(lifetime)
                .build()
                .await?;
            builder.store(Arc::new(store))
        }
        "mysql" => {
            let store = MySqlStore::builder(addresses)
                .session_lease(lifetime)
                .build()
                .await?;
            builder.store(Arc::new(store))
        }
        redis => {
            let builder = builder.connect_timeout(lifetime);
            let urls: Vec<&str> = addresses.split(',').collect();
            match redis {
                "redis" => builder.url(urls[0]),
                "cluster" => builder.cluster(urls),
                "sentinel" => builder.sentinel(urls, MASTER_NAME),
                "redlock" => builder.redlock(urls),
                other => return Err(LockError::Config(format!("no store is called {other:?}"))),
            }
        }
    };
    builder.build().await
}

/// The `application_name` of the PostgreSQL sessions of the worker process `pid`, by which
/// the main process finds them in `pg_stat_activity`.
pub(crate) fn worker_name(pid: u32) -> String {
    format!("torture-worker-{pid}")
}

/// Whether a worker on `spec` learns that a hold is gone without asking the server
/// (`LockGuard::is_held` costs no round trip), so that it can check every hold it ends:
/// on PostgreSQL a hold lives as long as its session, which the store watches.
pub(crate) fn knows_its_holds(spec: &str) -> bool {
    spec.starts_with("postgres=")
}
