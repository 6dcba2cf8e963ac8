//! The instruments: the Redis round trip, the commands Redis ran (`INFO commandstats`),
//! the ZooKeeper round trips and what ZooKeeper did (`mntr`), the PostgreSQL round trip
//! and the statements PostgreSQL was sent (its log), latency samples and their quantiles,
//! this process's CPU time and resident memory.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lock_core::backend::redis::redis::{self, aio::MultiplexedConnection};
use lock_tests::{PostgresServer, TestServer, ZooKeeperServer};
use zookeeper_client as zk;

use crate::floors::connection;

/// `d` in µs (from whole nanoseconds, so that 180.277 µs prints as such).
pub(crate) fn micros(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e3
}

/// The `q` quantile (nearest rank) of `values`, which it sorts; `None` when there are none.
pub(crate) fn percentile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64 * q).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

/// The median of `samples` `PING`s sent one after the other, µs, after a tenth as many
/// unmeasured ones.
pub(crate) async fn round_trip(url: &str, samples: usize) -> f64 {
    let mut conn = connection(url).await;
    for _ in 0..samples / 10 {
        ping(&mut conn).await;
    }
    let mut lat = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        ping(&mut conn).await;
        lat.push(micros(t.elapsed()));
    }
    percentile(&mut lat, 0.5).unwrap_or(f64::NAN)
}

async fn ping(conn: &mut MultiplexedConnection) {
    let _: String = redis::cmd("PING").query_async(conn).await.expect("PING");
}

/// ZooKeeper's round trips, each the median of `samples` calls one after the other on a
/// session of its own, after a tenth as many unmeasured ones, µs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ZooKeeperRoundTrips {
    /// A read: `exists` of `/`.
    pub(crate) read: f64,
    /// A write: `setData` of one node, which the server logs, and fsyncs, before it answers.
    pub(crate) write: f64,
}

impl ZooKeeperRoundTrips {
    pub(crate) async fn measure(connect_string: &str, samples: usize) -> Self {
        let client = zk::Client::connect(connect_string)
            .await
            .expect("connect to zookeeper");
        let node = "/round-trip";
        client
            .create(
                node,
                &[],
                &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
            )
            .await
            .expect("create the round trip's node");
        let read = median(samples, || async {
            client.check_stat("/").await.expect("exists /");
        })
        .await;
        let write = median(samples, || async {
            client.set_data(node, b"x", None).await.expect("setData");
        })
        .await;
        client
            .delete(node, None)
            .await
            .expect("delete the round trip's node");
        Self { read, write }
    }
}

/// The median latency of `samples` calls of `op` one after the other, µs, after a tenth as
/// many unmeasured ones.
async fn median<F, Fut>(samples: usize, op: F) -> f64
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    for _ in 0..samples / 10 {
        op().await;
    }
    let mut lat = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        op().await;
        lat.push(micros(t.elapsed()));
    }
    percentile(&mut lat, 0.5).unwrap_or(f64::NAN)
}

/// What a ZooKeeper server did, from the counters of its `mntr`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ZooKeeperWork {
    /// Requests it received (`zk_packets_received`).
    pub(crate) requests: f64,
    /// Writes it applied (`zk_cnt_updatelatency`).
    pub(crate) writes: f64,
    /// Times it fsynced its transaction log (`zk_cnt_fsynctime`), and the ms they took, each
    /// counted in whole ms (`zk_sum_fsynctime`).
    pub(crate) fsyncs: f64,
    pub(crate) fsync_ms: f64,
}

impl ZooKeeperWork {
    pub(crate) fn read(server: &ZooKeeperServer) -> Self {
        let mntr = server.four_letter("mntr").expect("mntr");
        let counter = |name: &str| -> f64 {
            mntr.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('\t'))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in mntr"))
        };
        Self {
            requests: counter("zk_packets_received"),
            writes: counter("zk_cnt_updatelatency"),
            fsyncs: counter("zk_cnt_fsynctime"),
            fsync_ms: counter("zk_sum_fsynctime"),
        }
    }

    /// What the server did from `before` to `self`, the `mntr` that read `self` left out.
    pub(crate) fn since(self, before: Self) -> Self {
        Self {
            requests: self.requests - before.requests - 1.0,
            writes: self.writes - before.writes,
            fsyncs: self.fsyncs - before.fsyncs,
            fsync_ms: self.fsync_ms - before.fsync_ms,
        }
    }

    pub(crate) fn add(&mut self, other: Self) {
        self.requests += other.requests;
        self.writes += other.writes;
        self.fsyncs += other.fsyncs;
        self.fsync_ms += other.fsync_ms;
    }
}

/// The median of `samples` runs of a prepared `SELECT 1` (one round trip each: bind,
/// execute, sync), one after the other on a connection of its own, µs, after a tenth as
/// many unmeasured ones.
pub(crate) async fn postgres_round_trip(url: &str, samples: usize) -> f64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to postgres");
    let connection = tokio::spawn(connection);
    let select = client.prepare("SELECT 1").await.expect("prepare SELECT 1");
    let rtt = median(samples, || async {
        client.query_one(&select, &[]).await.expect("SELECT 1");
    })
    .await;
    drop(client);
    let _ = connection.await;
    rtt
}

/// What a PostgreSQL server was sent while some work ran, read from its log with every
/// statement logged (`log_min_duration_statement = 0`, set for that work only): each
/// message of the extended protocol is a line of its own.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PostgresStatements {
    /// Statements prepared (`parse`): tokio-postgres waits for each one's reply, one round
    /// trip, before it uses it.
    pub(crate) parses: f64,
    /// Prepared statements run (`execute`, after their `bind`): a round trip each, unless
    /// pipelined.
    pub(crate) executes: f64,
    /// Simple queries (`statement:`): a round trip each, unless pipelined.
    pub(crate) simple: f64,
}

impl PostgresStatements {
    /// Runs `work` with every statement logged, and counts what it sent.
    pub(crate) async fn count<F: Future<Output = ()>>(server: &PostgresServer, work: F) -> Self {
        let log_statements = |setting: &str| {
            // Two calls: ALTER SYSTEM refuses to run in the transaction of a string of
            // statements.
            for sql in [
                &format!("ALTER SYSTEM {setting}"),
                "SELECT pg_reload_conf()",
            ] {
                server.psql(sql).expect("set log_min_duration_statement");
            }
            // The backends read the new setting before their next statement.
            std::thread::sleep(Duration::from_millis(200));
        };
        log_statements("SET log_min_duration_statement = 0");
        let before = server.log().len();
        work.await;
        let log = server.log();
        log_statements("RESET log_min_duration_statement");
        let logged: Vec<&str> = log[before..]
            .lines()
            .filter_map(|line| line.split_once("LOG:  duration: ")?.1.split_once(" ms  "))
            .map(|(_, what)| what)
            .collect();
        let count = |prefix: &str| logged.iter().filter(|w| w.starts_with(prefix)).count() as f64;
        Self {
            parses: count("parse "),
            executes: count("execute "),
            simple: count("statement: "),
        }
    }
}

/// Operations done, the time they took, and their latencies in µs.
#[derive(Debug, Default)]
pub(crate) struct Sample {
    pub(crate) ops: usize,
    pub(crate) elapsed: Duration,
    pub(crate) lat: Vec<f64>,
    /// Where an operation is an acquire and a release timed apart, their latencies (µs).
    pub(crate) acquire: Vec<f64>,
    pub(crate) release: Vec<f64>,
}

impl Sample {
    /// Adds another run of the same system: its operations, time and latencies.
    pub(crate) fn add(&mut self, other: Sample) {
        self.ops += other.ops;
        self.elapsed += other.elapsed;
        self.lat.extend(other.lat);
        self.acquire.extend(other.acquire);
        self.release.extend(other.release);
    }

    /// Operations per second.
    pub(crate) fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// Joins tasks that each return their latencies: one sample, timed from `started`.
pub(crate) async fn gather(
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<Vec<f64>>>,
    what: &str,
) -> Sample {
    let mut sample = Sample::default();
    for task in tasks {
        sample.lat.extend(task.await.expect(what));
    }
    sample.elapsed = started.elapsed();
    sample.ops = sample.lat.len();
    sample
}

/// Calls and µs per command name, as `INFO commandstats` gives them.
pub(crate) type CommandStats = BTreeMap<String, (u64, u64)>;

/// Reads `INFO commandstats` over a connection of its own.
#[derive(Debug)]
pub(crate) struct Stats {
    conn: MultiplexedConnection,
}

impl Stats {
    pub(crate) async fn connect(url: &str) -> Self {
        Self {
            conn: connection(url).await,
        }
    }

    pub(crate) async fn read(&mut self) -> CommandStats {
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.conn)
            .await
            .expect("INFO commandstats");
        text.lines()
            .filter_map(|line| {
                let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let field = |key: &str| -> Option<u64> {
                    fields
                        .split(',')
                        .find_map(|f| f.strip_prefix(key))?
                        .parse()
                        .ok()
                };
                Some((name.to_owned(), (field("calls=")?, field("usec=")?)))
            })
            .collect()
    }

    /// [`Stats::read`], once the background work of the step before (dropped guards'
    /// releases) has landed.
    pub(crate) async fn read_settled(&mut self) -> CommandStats {
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.read().await
    }

    /// How many times Redis has run `command`, now.
    pub(crate) async fn calls(&mut self, command: &str) -> u64 {
        self.read()
            .await
            .get(command)
            .map_or(0, |(calls, _)| *calls)
    }
}

/// What Redis ran for the client between two reads of [`Stats`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Calls {
    /// Every command Redis executed, those run inside Lua scripts included.
    pub(crate) all: u64,
    /// Commands the client sent (an `EVALSHA` counts once).
    pub(crate) sent: u64,
    /// Redis CPU time spent on the commands sent (scripts include their inner calls), µs.
    pub(crate) server_us: u64,
}

impl Calls {
    /// What Redis ran from `before` to `after`, for a system whose scripts run the commands
    /// `in_script` (the `INFO` calls themselves left out).
    pub(crate) fn between(before: &CommandStats, after: &CommandStats, in_script: &[&str]) -> Self {
        let mut calls = Self::default();
        for (name, (n, us)) in after {
            if name == "info" {
                continue;
            }
            let (n0, us0) = before.get(name).copied().unwrap_or_default();
            calls.all += n - n0;
            if !in_script.contains(&name.as_str()) {
                calls.sent += n - n0;
                calls.server_us += us - us0;
            }
        }
        calls
    }

    pub(crate) fn add(&mut self, other: Calls) {
        self.all += other.all;
        self.sent += other.sent;
        self.server_us += other.server_us;
    }
}

/// User + system CPU time of this process, s, from `/proc/self/stat` (USER_HZ = 100).
pub(crate) fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); `fields[0]` is field 3.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// This process's resident memory, bytes, from `VmRSS` in `/proc/self/status`.
pub(crate) fn rss_bytes() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        .map_or(0, |kb| kb * 1024)
}
