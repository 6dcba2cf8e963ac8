//! The results: one [`Row`] per system and scenario, printed as they come and at the end as
//! a markdown table; the goals they are held to ([`goals`]); `compare.json` (serde); the
//! handoff latency chart ([`chart`]).

pub(crate) mod chart;
pub(crate) mod goals;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Serialize, Serializer};

use crate::measure::{
    Calls, PostgresStatements, Sample, ZooKeeperRoundTrips, ZooKeeperWork, percentile,
};

/// One line of the table and of `compare.json`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) scenario: &'static str,
    pub(crate) system: String,
    pub(crate) workers: usize,
    pub(crate) ops_per_sec: Option<f64>,
    pub(crate) p50_us: Option<f64>,
    pub(crate) p99_us: Option<f64>,
    /// Commands the client sent per operation (an `EVALSHA` counts once).
    pub(crate) commands_per_op: Option<f64>,
    /// Commands Redis executed per operation, those inside scripts included (table only).
    #[serde(skip)]
    pub(crate) redis_calls_per_op: Option<f64>,
    /// Redis CPU time per operation, µs (`usec` of `INFO commandstats`; table only).
    #[serde(skip)]
    pub(crate) redis_us_per_op: Option<f64>,
    /// Scenario-specific figures (per-call latencies, memory, CPU, lost guards, ...);
    /// `null` in the JSON when there are none.
    #[serde(serialize_with = "null_if_empty")]
    pub(crate) extra: BTreeMap<&'static str, f64>,
    pub(crate) note: String,
}

fn null_if_empty<S: Serializer>(extra: &BTreeMap<&str, f64>, s: S) -> Result<S::Ok, S::Error> {
    if extra.is_empty() {
        s.serialize_none()
    } else {
        extra.serialize(s)
    }
}

impl Row {
    /// A row with no figures yet.
    pub(crate) fn new(scenario: &'static str, system: &str, workers: usize) -> Self {
        Self {
            scenario,
            system: system.to_owned(),
            workers,
            ops_per_sec: None,
            p50_us: None,
            p99_us: None,
            commands_per_op: None,
            redis_calls_per_op: None,
            redis_us_per_op: None,
            extra: BTreeMap::new(),
            note: String::new(),
        }
    }

    /// The rate and latencies of `sample`, and its acquires and releases apart (in `extra`
    /// and the note) when it timed them.
    pub(crate) fn from_sample(
        scenario: &'static str,
        system: &str,
        workers: usize,
        sample: &Sample,
    ) -> Self {
        let mut lat = sample.lat.clone();
        let mut row = Self {
            ops_per_sec: Some(sample.rate()),
            p50_us: percentile(&mut lat, 0.5),
            p99_us: percentile(&mut lat, 0.99),
            ..Self::new(scenario, system, workers)
        };
        if !sample.acquire.is_empty() {
            let (mut acquire, mut release) = (sample.acquire.clone(), sample.release.clone());
            let quantiles = [
                ("acquire_p50_us", percentile(&mut acquire, 0.5)),
                ("acquire_p99_us", percentile(&mut acquire, 0.99)),
                ("release_p50_us", percentile(&mut release, 0.5)),
                ("release_p99_us", percentile(&mut release, 0.99)),
            ];
            let [a50, a99, r50, r99] = quantiles.map(|(_, v)| fmt_us(v));
            row.note = format!("acquire p50/p99 {a50} / {a99} µs, release {r50} / {r99} µs");
            row.extra.extend(
                quantiles
                    .into_iter()
                    .filter_map(|(name, v)| Some((name, v?))),
            );
        }
        row
    }

    /// The commands Redis ran, per operation, `ops` operations.
    pub(crate) fn with_calls(mut self, calls: Calls, ops: usize) -> Self {
        let per_op = |n: u64| (ops > 0).then(|| n as f64 / ops as f64);
        self.commands_per_op = per_op(calls.sent);
        self.redis_calls_per_op = per_op(calls.all);
        self.redis_us_per_op = per_op(calls.server_us);
        self
    }

    pub(crate) fn extra(&self, name: &str) -> Option<f64> {
        self.extra.get(name).copied()
    }
}

/// One handoff row's latencies, for the chart.
#[derive(Debug)]
pub(crate) struct Curve {
    pub(crate) label: String,
    pub(crate) workers: usize,
    /// µs
    pub(crate) lat: Vec<f64>,
}

/// Everything measured in the run.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Median Redis round trip at the start of each runtime, µs, per worker count.
    pub(crate) rtt: BTreeMap<usize, f64>,
    /// ZooKeeper's round trips at the start of the zookeeper scenario, per worker count.
    pub(crate) zookeeper_rtt: BTreeMap<usize, ZooKeeperRoundTrips>,
    /// PostgreSQL's round trip (a prepared `SELECT 1`) at the start of the postgres
    /// scenario, µs, per worker count.
    pub(crate) postgres_rtt: BTreeMap<usize, f64>,
    pub(crate) rows: Vec<Row>,
    pub(crate) curves: Vec<Curve>,
}

/// What `compare.json` holds.
#[derive(Serialize)]
struct Json<'a> {
    /// The round trip measured with 1 worker at the start.
    rtt_us: Option<f64>,
    rows: &'a [Row],
}

impl Report {
    /// Adds `row`, and prints it as progress.
    pub(crate) fn push(&mut self, row: Row) {
        println!(
            "{:<12} {:<20} workers={} ops/s={} p50={}µs p99={}µs sent/op={} {}",
            row.scenario,
            row.system,
            row.workers,
            fmt_num(row.ops_per_sec, 0),
            fmt_us(row.p50_us),
            fmt_us(row.p99_us),
            fmt_num(row.commands_per_op, 2),
            row.note
        );
        self.rows.push(row);
    }

    pub(crate) fn find(&self, scenario: &str, system: &str, workers: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.scenario == scenario && r.system == system && r.workers == workers)
    }

    /// The round trips, and every row, as markdown.
    pub(crate) fn table(&self) -> String {
        let mut out = String::new();
        for (workers, rtt) in &self.rtt {
            let _ = writeln!(
                out,
                "Redis round trip (PING, median), {workers} worker(s): {rtt:.1} µs  "
            );
        }
        for (workers, rtt) in &self.zookeeper_rtt {
            let _ = writeln!(
                out,
                "ZooKeeper round trip (median), {workers} worker(s): {:.1} µs to read (exists), {:.1} µs to write (setData, fsynced)  ",
                rtt.read, rtt.write
            );
        }
        for (workers, rtt) in &self.postgres_rtt {
            let _ = writeln!(
                out,
                "PostgreSQL round trip (prepared SELECT 1, median), {workers} worker(s): {rtt:.1} µs  "
            );
        }
        out.push_str(
            "\n| scenario | system | workers | ops/s | p50 µs | p99 µs | cmds sent/op | redis calls/op | redis µs/op | notes |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.scenario,
                r.system,
                r.workers,
                fmt_num(r.ops_per_sec, 0),
                fmt_us(r.p50_us),
                fmt_us(r.p99_us),
                fmt_num(r.commands_per_op, 2),
                fmt_num(r.redis_calls_per_op, 2),
                fmt_num(r.redis_us_per_op, 1),
                r.note
            );
        }
        out
    }

    /// `compare.json`: `{"rtt_us": .., "rows": [..]}`.
    pub(crate) fn json(&self) -> String {
        let json = Json {
            rtt_us: self
                .rtt
                .get(&1)
                .or_else(|| self.rtt.values().next())
                .copied(),
            rows: &self.rows,
        };
        serde_json::to_string_pretty(&json).expect("serialize compare.json") + "\n"
    }
}

/// `v` with `decimals` decimals, or `–`.
pub(crate) fn fmt_num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.decimals$}"))
}

/// A duration in µs: whole from 100 µs up, else with one decimal.
pub(crate) fn fmt_us(v: Option<f64>) -> String {
    fmt_num(v, if v.is_some_and(|v| v >= 100.0) { 0 } else { 1 })
}

impl ZooKeeperWork {
    /// Puts this work, per operation of `ops`, in `row`: the requests as the commands sent,
    /// writes and fsyncs in `extra` and the note.
    pub(crate) fn describe(&self, row: &mut Row, ops: usize) {
        let per_op = |n: f64| n / ops.max(1) as f64;
        row.commands_per_op = Some(per_op(self.requests));
        let figures = [
            ("zk_writes_per_op", per_op(self.writes)),
            ("zk_fsyncs_per_op", per_op(self.fsyncs)),
            ("zk_fsync_ms_per_op", per_op(self.fsync_ms)),
        ];
        row.extra.extend(figures);
        let [writes, fsyncs, fsync_ms] = figures.map(|(_, v)| v);
        let note =
            format!("ZooKeeper per op: {writes:.2} writes, {fsyncs:.2} fsyncs ({fsync_ms:.1} ms)");
        row.note = [note, std::mem::take(&mut row.note)]
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
    }
}

impl PostgresStatements {
    /// Puts these statements, per operation of `ops`, in `row`: in `extra` and the note.
    pub(crate) fn describe(&self, row: &mut Row, ops: usize) {
        let per_op = |n: f64| n / ops.max(1) as f64;
        let figures = [
            ("pg_parses_per_op", per_op(self.parses)),
            ("pg_executes_per_op", per_op(self.executes)),
            ("pg_simple_queries_per_op", per_op(self.simple)),
        ];
        row.extra.extend(figures);
        let [parses, executes, simple] = figures.map(|(_, v)| v);
        let note = format!(
            "PostgreSQL per op: {parses:.2} parses, {executes:.2} executes, {simple:.2} simple queries"
        );
        row.note = [note, std::mem::take(&mut row.note)]
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
    }
}
