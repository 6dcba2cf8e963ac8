//! A master, its replica and three Redis Sentinels, each a [`RedisServer`].

use std::thread;
use std::time::{Duration, Instant};

use crate::error::chain;
use crate::server::info_field;
use crate::{HarnessError, POLL_INTERVAL, RedisServer, TestServer, ValueExt};

/// The name the sentinels know the master by.
pub const MASTER_NAME: &str = "locks";
const SENTINELS: usize = 3;
/// How long a master may not answer before a sentinel thinks it down.
const DOWN_AFTER: Duration = Duration::from_secs(1);
/// Deadline for the replica to sync, after a start.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline of a failover.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);

/// A master and its replica, watched by three sentinels (quorum 2, a master is down after
/// 1 s without an answer), all on free loopback ports, torn down on drop.
///
/// [`spawn`](Self::spawn) returns once the replica is in sync and the sentinels answer.
#[derive(Debug)]
pub struct RedisSentinel {
    /// The two data servers: the master at the start, then its replica.
    nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl RedisSentinel {
    /// Starts the master, the replica and the sentinels, and waits until they are ready.
    ///
    /// # Panics
    ///
    /// If they cannot be started, e.g. `redis-server` is not on `PATH`.
    #[track_caller]
    pub fn spawn() -> RedisSentinel {
        match Self::try_spawn() {
            Ok(sentinel) => sentinel,
            Err(e @ HarnessError::BinaryNotFound { .. }) => panic!("{e}"),
            Err(e) => panic!("could not start test sentinels: {}", chain(&e)),
        }
    }

    /// [`spawn`](Self::spawn) that returns the error instead of panicking.
    pub fn try_spawn() -> Result<RedisSentinel, HarnessError> {
        // Without the default 5 s wait for more replicas before a full sync.
        let master = RedisServer::try_spawn_with(&["--repl-diskless-sync-delay", "0"])?;
        let master_port = master.port().to_string();
        let replica = RedisServer::try_spawn_with(&["--replicaof", "127.0.0.1", &master_port])?;
        let nodes = vec![master, replica];
        wait_for(READY_TIMEOUT, "the replica to sync", || {
            let info = nodes[1].cmd(&["INFO", "replication"]).ok()?;
            (info_field(info.as_str()?, "master_link_status")? == "up").then_some(())
        })?;
        let sentinels = (0..SENTINELS)
            .map(|_| RedisServer::spawn_sentinel(MASTER_NAME, nodes[0].port(), DOWN_AFTER))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedisSentinel { nodes, sentinels })
    }

    /// The sentinels' URLs, `redis://127.0.0.1:{port}/`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The two data servers: the master at the start, then its replica.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The data server the sentinels name as master now.
    ///
    /// # Panics
    ///
    /// If no sentinel answers with one of the two.
    pub fn master(&self) -> &RedisServer {
        let port = self.named_master().expect("a sentinel names the master");
        self.node_at(port).expect("the master is one of the two")
    }

    /// Makes the sentinels fail over (`SENTINEL FAILOVER`) and waits until the replica is
    /// the master, every sentinel names it, and the old master has become its replica.
    /// Returns the new master.
    ///
    /// # Panics
    ///
    /// If the failover does not complete within 30 s.
    #[track_caller]
    pub fn failover(&self) -> &RedisServer {
        let old = self.master().port();
        // A sentinel promotes only a replica it has heard from (the master's `INFO` names
        // it, then its own `INFO` must come in): until then it answers `NOGOODSLAVE`.
        let forced = wait_for(FAILOVER_TIMEOUT, "the sentinel to start a failover", || {
            let reply = self.sentinels[0]
                .cmd(&["SENTINEL", "FAILOVER", MASTER_NAME])
                .ok()?;
            (reply.as_str() == Some("OK")).then_some(())
        });
        if let Err(e) = forced {
            panic!("{}", chain(&e));
        }
        let done = wait_for(FAILOVER_TIMEOUT, "the failover", || {
            let new = self.node_at(self.named_master()?)?;
            let all_agree = self
                .sentinels
                .iter()
                .all(|s| port_named_by(s) == Some(new.port()));
            let promoted = role(new)? == "master";
            let demoted = role(self.node_at(old)?)? == "slave";
            (new.port() != old && all_agree && promoted && demoted).then_some(())
        });
        if let Err(e) = done {
            panic!("{}", chain(&e));
        }
        self.master()
    }

    fn named_master(&self) -> Option<u16> {
        self.sentinels.iter().find_map(port_named_by)
    }

    fn node_at(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|n| n.port() == port)
    }
}

/// The port of the master `sentinel` names.
fn port_named_by(sentinel: &RedisServer) -> Option<u16> {
    let reply = sentinel
        .cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])
        .ok()?;
    reply.as_sequence()?.get(1)?.as_str()?.parse().ok()
}

/// `role:` of `INFO replication`: `master` or `slave`.
fn role(server: &RedisServer) -> Option<String> {
    let info = server.cmd(&["INFO", "replication"]).ok()?;
    info_field(info.as_str()?, "role").map(str::to_owned)
}

fn wait_for(
    timeout: Duration,
    what: &str,
    mut ready: impl FnMut() -> Option<()>,
) -> Result<(), HarnessError> {
    let started = Instant::now();
    loop {
        if ready().is_some() {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            return Err(HarnessError::io(
                format!("wait for {what}"),
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("not within {timeout:?}"),
                ),
            ));
        }
        thread::sleep(POLL_INTERVAL);
    }
}
