//! A Redis Cluster of 3 masters, with or without a replica each, made of [`RedisServer`]s.

use std::fs::{self, File};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::chain;
use crate::server::{REDIS_SERVER, info_field, spawn_error};
use crate::{HarnessError, POLL_INTERVAL, RedisServer, TestServer, ValueExt};

/// Masters in the cluster.
const MASTERS: usize = 3;
const SLOTS: &str = "16384";
/// Deadline of `redis-cli --cluster create`.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline for every node to report `cluster_state:ok` after the create.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of one `CLUSTER INFO` probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
const REDIS_CLI: &str = "redis-cli";

/// A Redis Cluster of 3 masters (and, from [`spawn_with_replicas`](Self::spawn_with_replicas),
/// a replica of each) that this test started, each a [`RedisServer`] with
/// `--cluster-enabled yes` on a free port whose cluster bus port (`port + 10000`) was free
/// too.
///
/// [`spawn`](Self::spawn) returns once every node reports `cluster_state:ok` with all 16384
/// slots assigned. Dropping the cluster drops its nodes (see [`RedisServer`]).
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, joins them with `redis-cli --cluster create`, and waits until the
    /// cluster serves every slot.
    ///
    /// # Panics
    ///
    /// If the cluster cannot be started, e.g. `redis-server` or `redis-cli` is not on `PATH`.
    #[track_caller]
    pub fn spawn() -> RedisCluster {
        match Self::try_spawn() {
            Ok(cluster) => cluster,
            Err(e @ HarnessError::BinaryNotFound { .. }) => panic!("{e}"),
            Err(e) => panic!("could not start a test redis cluster: {}", chain(&e)),
        }
    }

    /// [`spawn`](Self::spawn) that returns the error instead of panicking.
    pub fn try_spawn() -> Result<RedisCluster, HarnessError> {
        Self::spawn_inner(REDIS_SERVER, REDIS_CLI, 0)
    }

    /// A cluster of 3 masters and a replica of each (6 nodes), which keeps serving the
    /// slots it still can while a master is down (`cluster-require-full-coverage no`), and
    /// promotes a dead master's replica (`cluster-node-timeout` 2 s). The first three of
    /// [`nodes`](Self::nodes) are the masters at the start.
    ///
    /// # Panics
    ///
    /// As [`spawn`](Self::spawn).
    #[track_caller]
    pub fn spawn_with_replicas() -> RedisCluster {
        match Self::spawn_inner(REDIS_SERVER, REDIS_CLI, 1) {
            Ok(cluster) => cluster,
            Err(e @ HarnessError::BinaryNotFound { .. }) => panic!("{e}"),
            Err(e) => panic!("could not start a test redis cluster: {}", chain(&e)),
        }
    }

    fn spawn_inner(server: &str, cli: &str, replicas: usize) -> Result<RedisCluster, HarnessError> {
        // Serve the slots it still can while a master is down, and let a replica take
        // over however long ago it last heard from its master.
        let failover: &[&str] = if replicas > 0 {
            &[
                "--cluster-require-full-coverage",
                "no",
                "--cluster-replica-validity-factor",
                "0",
                "--repl-diskless-sync-delay",
                "0",
            ]
        } else {
            &[]
        };
        let nodes = (0..MASTERS * (1 + replicas))
            .map(|_| RedisServer::spawn_inner(server, failover, true))
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = RedisCluster { nodes };
        cluster.create(cli, replicas)?;
        cluster.try_wait_ok(READY_TIMEOUT)?;
        cluster.wait_replicas_in_sync(READY_TIMEOUT)?;
        Ok(cluster)
    }

    /// Waits until every replica has acknowledged every write its master made so far
    /// (replication is asynchronous: a master killed before that loses them). Replicas
    /// acknowledge once a second.
    ///
    /// # Panics
    ///
    /// If they have not within 10 s.
    #[track_caller]
    pub fn wait_replicated(&self) {
        const REPLICATION_TIMEOUT: Duration = Duration::from_secs(10);
        let started = Instant::now();
        while !self
            .nodes
            .iter()
            .all(|node| replicas_caught_up(node).unwrap_or(false))
        {
            assert!(
                started.elapsed() < REPLICATION_TIMEOUT,
                "the replicas did not catch up within {REPLICATION_TIMEOUT:?}"
            );
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits until every replica has its master's data and follows it, so that a write
    /// made from then on reaches it.
    fn wait_replicas_in_sync(&self, timeout: Duration) -> Result<(), HarnessError> {
        let started = Instant::now();
        loop {
            let behind: Vec<u16> = self
                .nodes
                .iter()
                .filter(|node| {
                    let info = node.cmd_with_timeout(&["INFO", "replication"], PROBE_TIMEOUT);
                    let info = info.ok().and_then(|r| r.as_str().map(str::to_owned));
                    let info = info.as_deref().unwrap_or_default();
                    info_field(info, "role") == Some("slave")
                        && info_field(info, "master_link_status") != Some("up")
                })
                .map(RedisServer::port)
                .collect();
            if behind.is_empty() {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                return Err(HarnessError::ClusterNotReady {
                    waited: timeout,
                    detail: format!("replicas not in sync on ports {behind:?}"),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// The nodes, in the order given to `redis-cli --cluster create`.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`, e.g. to [`kill`](RedisServer::kill) or [`restart`](RedisServer::restart) it.
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// The nodes' URLs, `redis://127.0.0.1:{port}/`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The index in [`nodes`](Self::nodes) of the node that serves `key`'s slot, as the first
    /// running node sees it.
    ///
    /// # Panics
    ///
    /// If no node is running or the answer does not name one of the nodes.
    #[track_caller]
    pub fn node_for_key(&self, key: &str) -> usize {
        let node = self
            .nodes
            .iter()
            .find(|node| node.is_running())
            .expect("no cluster node is running");
        let slot = node
            .cmd(&["CLUSTER", "KEYSLOT", key])
            .ok()
            .and_then(|reply| reply.as_int())
            .unwrap_or_else(|| panic!("CLUSTER KEYSLOT {key:?} failed on port {}", node.port()));
        let slots = node.cmd(&["CLUSTER", "SLOTS"]).unwrap_or_else(|e| {
            panic!(
                "CLUSTER SLOTS failed on port {}: {}",
                node.port(),
                chain(&e)
            )
        });
        // Each entry: [first slot, last slot, [ip, port, id, ..] of the master, replicas..].
        let port = slots
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|range| range.as_sequence())
            .find(|range| {
                let first = range.first().and_then(|r| r.as_int());
                let last = range.get(1).and_then(|r| r.as_int());
                matches!((first, last), (Some(a), Some(b)) if (a..=b).contains(&slot))
            })
            .and_then(|range| range.get(2)?.as_sequence()?.get(1)?.as_int())
            .unwrap_or_else(|| panic!("no node serves slot {slot} (key {key:?}): {slots:?}"));
        self.nodes
            .iter()
            .position(|node| i64::from(node.port()) == port)
            .unwrap_or_else(|| panic!("slot {slot} is served by port {port}, not by this cluster"))
    }

    /// Waits until every running node reports `cluster_state:ok`, 16384 slots assigned and
    /// ok, and knows every node; e.g. after restarting a node.
    pub fn try_wait_ok(&self, timeout: Duration) -> Result<(), HarnessError> {
        let started = Instant::now();
        loop {
            let problems: Vec<String> = self
                .nodes
                .iter()
                .filter(|node| node.is_running())
                .filter_map(|node| self.node_problem(node))
                .collect();
            if problems.is_empty() {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                return Err(HarnessError::ClusterNotReady {
                    waited: timeout,
                    detail: problems.join("; "),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// What keeps `node` from being ready, or `None` if it is.
    fn node_problem(&self, node: &RedisServer) -> Option<String> {
        let port = node.port();
        let info = match node.cmd_with_timeout(&["CLUSTER", "INFO"], PROBE_TIMEOUT) {
            Ok(reply) => match reply.as_str() {
                Some(info) => info.to_owned(),
                None => return Some(format!("port {port}: CLUSTER INFO replied {reply:?}")),
            },
            Err(e) => return Some(format!("port {port}: {}", chain(&e))),
        };
        let nodes = self.nodes.len().to_string();
        let expected = [
            ("cluster_state", "ok"),
            ("cluster_slots_assigned", SLOTS),
            ("cluster_slots_ok", SLOTS),
            ("cluster_known_nodes", nodes.as_str()),
        ];
        let wrong: Vec<String> = expected
            .iter()
            .filter(|(field, want)| info_field(&info, field) != Some(want))
            .map(|(field, _)| format!("{field}:{}", info_field(&info, field).unwrap_or("?")))
            .collect();
        (!wrong.is_empty()).then(|| format!("port {port}: {}", wrong.join(" ")))
    }

    /// Runs `redis-cli --cluster create` over the nodes, bounded by [`CREATE_TIMEOUT`].
    fn create(&self, cli: &str, replicas: usize) -> Result<(), HarnessError> {
        let out_path = self.nodes[0].dir().join("cluster-create.log");
        let open = || {
            File::create(&out_path)
                .and_then(|out| Ok((out.try_clone()?, out)))
                .map_err(|e| HarnessError::io(format!("create {}", out_path.display()), e))
        };
        let (stdout, stderr) = open()?;
        let mut child = Command::new(cli)
            .args(["--cluster", "create"])
            .args(
                self.nodes
                    .iter()
                    .map(|node| format!("127.0.0.1:{}", node.port())),
            )
            .args(["--cluster-replicas", &replicas.to_string()])
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| spawn_error(cli, e))?;
        let output = || {
            fs::read(&out_path)
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .unwrap_or_default()
        };
        let started = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(HarnessError::ClusterCreate {
                        status: Some(status),
                        output: output(),
                    });
                }
                Ok(None) if started.elapsed() < CREATE_TIMEOUT => thread::sleep(POLL_INTERVAL),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(HarnessError::ClusterCreate {
                        status: None,
                        output: output(),
                    });
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(HarnessError::io(format!("wait for {cli}"), e));
                }
            }
        }
    }
}

/// Whether every replica of `node` (none, if it is not a running master) has acknowledged
/// all of its writes; `None` if `INFO` fails.
fn replicas_caught_up(node: &RedisServer) -> Option<bool> {
    if !node.is_running() {
        return Some(true);
    }
    let info = node
        .cmd_with_timeout(&["INFO", "replication"], PROBE_TIMEOUT)
        .ok()?;
    let info = info.as_str()?;
    if info_field(info, "role") != Some("master") {
        return Some(true);
    }
    let written: u64 = info_field(info, "master_repl_offset")?.parse().ok()?;
    // `slave0:ip=..,port=..,state=online,offset=299,lag=0`
    let acked = info
        .lines()
        .filter(|line| line.starts_with("slave"))
        .map(|line| {
            line.split(',')
                .find_map(|field| field.strip_prefix("offset="))
                .and_then(|offset| offset.parse::<u64>().ok())
        });
    Some(
        acked
            .into_iter()
            .all(|offset| offset.is_some_and(|o| o >= written)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_redis_cli_is_reported() {
        let err = RedisCluster::spawn_inner(REDIS_SERVER, "redis-cli-lock-tests-missing", 0)
            .expect_err("a missing redis-cli must fail");
        assert!(err.is_binary_not_found(), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("redis-cli-lock-tests-missing not found on PATH: install it with"),
            "{err}"
        );
    }
}
