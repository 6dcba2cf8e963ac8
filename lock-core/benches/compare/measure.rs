//! The instruments: the Redis round trip, the commands Redis ran (`INFO commandstats`),
//! latency samples and their quantiles, this process's CPU time and resident memory.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lock_core::redis::{self, aio::MultiplexedConnection};

use crate::systems::connection;

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
