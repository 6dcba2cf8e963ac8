//! The benchmark's goals, as lock-core 0.3 set them (BENCHMARKS.md, "The checks the program
//! prints", says why each is where it is), each checked on figures from this one run: ratios
//! between the systems, handoff latencies in the round trips measured beside them, and
//! absolute figures where the goal names one. A goal whose figure the run did not measure
//! says so.

use std::fmt::Write as _;

use super::{Report, Row, fmt_num, fmt_us};

/// The watchdog goal is about this many guards; a run with fewer does not measure it.
const WATCHDOG_GUARDS: f64 = 10_000.0;

/// One goal, for one worker count.
#[derive(Debug)]
struct Goal {
    goal: String,
    workers: usize,
    measured: String,
    verdict: Verdict,
}

#[derive(Debug)]
enum Verdict {
    Holds,
    Misses,
    /// The run did not measure what the goal needs: why, or empty if the scenario did not
    /// run.
    NotMeasured(String),
}

impl Verdict {
    /// Whether a goal holds, from its check of a figure; not measured when the figure is
    /// missing.
    fn of(holds: Option<bool>) -> Self {
        match holds {
            Some(true) => Self::Holds,
            Some(false) => Self::Misses,
            None => Self::NotMeasured(String::new()),
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Holds => f.write_str("yes"),
            Self::Misses => f.write_str("**no**"),
            Self::NotMeasured(why) if why.is_empty() => f.write_str("not measured"),
            Self::NotMeasured(why) => write!(f, "not measured: {why}"),
        }
    }
}

impl Report {
    /// The goals table: every goal, for 1 and then 2 workers.
    pub(crate) fn goals(&self) -> String {
        let mut out = String::from(
            "## goals (ratios from this run)\n\n\
             | goal | workers | measured | holds |\n|---|---:|---|---|\n",
        );
        for workers in [1, 2] {
            for g in self.goals_for(workers) {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    g.goal, g.workers, g.measured, g.verdict
                );
            }
        }
        out
    }

    fn goals_for(&self, workers: usize) -> Vec<Goal> {
        let mut goals = Vec::new();
        let mut goal = |goal: &str, measured: String, verdict: Verdict| {
            goals.push(Goal {
                goal: goal.to_owned(),
                workers,
                measured,
                verdict,
            });
        };
        let find = |scenario: &str, system: &str| self.find(scenario, system, workers);
        // lock-core's rate over `system`'s in `scenario`.
        let ratio = |scenario: &str, system: &str| {
            Some(find(scenario, "lock-core")?.ops_per_sec? / find(scenario, system)?.ops_per_sec?)
        };

        // Uncontended and parallel: against the floor that does lock-core's work; the
        // ratios to raw and rslock beside it, for information. Parallel is bound by
        // Redis's CPU, which the protocol's extra work (wake-ups, expiring fence counters)
        // caps at about 0.79×.
        for (scenario, floor) in [("uncontended", 0.80), ("parallel", 0.70)] {
            let r = ratio(scenario, "raw-fenced");
            goal(
                &format!("{scenario} ≥ {floor:.2}× raw-fenced"),
                format!(
                    "{} (no goal: {} raw, {} rslock)",
                    times(r),
                    times(ratio(scenario, "raw")),
                    times(ratio(scenario, "rslock"))
                ),
                Verdict::of(r.map(|r| r >= floor)),
            );
        }

        let h = find("handoff", "lock-core");
        let (measured, p50) = self.p50_in_rtts(h, workers);
        goal(
            "handoff on one Locker: p50 ≤ 3 RTT",
            measured,
            Verdict::of(p50.map(|r| r <= 3.0)),
        );
        let p99 = h.and_then(|h| h.p99_us);
        goal(
            "handoff on one Locker: p99 ≤ 1 ms",
            format!("{} µs", fmt_us(p99)),
            Verdict::of(p99.map(|p| p <= 1000.0)),
        );
        let sent = h.and_then(|h| h.commands_per_op);
        goal(
            "handoff on one Locker: ≤ 4 commands sent per acquisition",
            format!(
                "{} sent ({} run by Redis incl. in-script)",
                fmt_num(sent, 2),
                fmt_num(h.and_then(|h| h.redis_calls_per_op), 2)
            ),
            Verdict::of(sent.map(|c| c <= 4.0)),
        );

        let (measured, p50) = self.p50_in_rtts(find("handoff", "lock-core/8-lockers"), workers);
        goal(
            "handoff across 8 Lockers: p50 ≤ 4 RTT",
            measured,
            Verdict::of(p50.map(|r| r <= 4.0)),
        );

        for (system, lockers) in [
            ("lock-core", "one Locker"),
            ("lock-core/8-lockers", "8 Lockers"),
        ] {
            let h = find("fair-handoff", system);
            let overtakings = h.and_then(|h| h.extra("fifo_overtakings"));
            goal(
                &format!("fair handoff ({lockers}): FIFO held"),
                format!(
                    "served out of asking order {} times in {} acquisitions",
                    fmt_num(overtakings, 0),
                    fmt_num(h.and_then(|h| h.extra("acquisitions")), 0)
                ),
                Verdict::of(overtakings.map(|n| n == 0.0)),
            );
            let (measured, p50) = self.p50_in_rtts(h, workers);
            goal(
                &format!("fair handoff ({lockers}): p50 ≤ 4 RTT"),
                measured,
                Verdict::of(p50.map(|r| r <= 4.0)),
            );
        }

        let w = find("watchdog", "lock-core");
        let figure = |name: &str| w.and_then(|w| w.extra(name));
        let (guards, cpu, lost) = (
            figure("guards"),
            figure("client_cpu_pct_of_one_core"),
            figure("guards_lost"),
        );
        let verdict = match guards.zip(cpu).zip(lost) {
            Some(((guards, _), _)) if guards < WATCHDOG_GUARDS => {
                Verdict::NotMeasured(format!("{guards:.0} guards, not {WATCHDOG_GUARDS:.0}"))
            }
            Some(((_, cpu), lost)) => Verdict::of(Some(cpu < 5.0 && lost == 0.0)),
            None => Verdict::of(None),
        };
        goal(
            "watchdog: 10k guards renewed on < 5% of a core, 0 lost",
            format!(
                "{}% of a core ({} renewals/s), {} lost of {} guards",
                fmt_num(cpu, 1),
                fmt_num(w.and_then(|w| w.ops_per_sec), 0),
                fmt_num(lost, 0),
                fmt_num(guards, 0)
            ),
            verdict,
        );

        let rate = |scenario: &str, system: &str| find(scenario, system)?.ops_per_sec;
        let over_exclusive = |scenario: &str, system: &str| {
            Some(rate(scenario, system)? / rate(scenario, "lock-core/exclusive")?)
        };
        let r = over_exclusive("read-heavy", "lock-core/read-write");
        goal(
            "read-heavy: read-write lock ≥ 4× the exclusive lock",
            times(r),
            Verdict::of(r.map(|r| r >= 4.0)),
        );
        let r = over_exclusive("semaphore", "lock-core/semaphore");
        goal(
            "semaphore cycle ≥ 0.8× the exclusive lock's",
            times(r),
            Verdict::of(r.map(|r| r >= 0.8)),
        );
        let w = find("writer-wait", "lock-core");
        let p99 = w.and_then(|w| w.p99_us);
        let hold = w.and_then(|w| w.extra("read_hold_us"));
        goal(
            "writer wait under 16 looping readers: p99 ≤ 2× a read's hold",
            format!("p99 {} µs; a read holds {} µs", fmt_us(p99), fmt_us(hold)),
            Verdict::of(p99.zip(hold).map(|(p99, hold)| p99 <= 2.0 * hold)),
        );

        let r = ratio("axum", "raw-fenced");
        goal(
            "axum layer ≥ 0.70× the hand-written fenced route",
            format!(
                "{} (no goal: {} rslock)",
                times(r),
                times(ratio("axum", "rslock"))
            ),
            Verdict::of(r.map(|r| r >= 0.70)),
        );

        for masters in [3, 5] {
            let ours = find("uncontended", &format!("lock-core/redlock-{masters}"));
            let theirs = find("uncontended", &format!("rslock/redlock-{masters}"));
            let r = ours
                .and_then(|o| o.ops_per_sec)
                .zip(theirs.and_then(|t| t.ops_per_sec))
                .map(|(o, t)| o / t);
            goal(
                &format!("RedLock over {masters} masters, uncontended ≥ 0.80× rslock's"),
                times(r),
                Verdict::of(r.map(|r| r >= 0.80)),
            );
        }
        let (measured, p50) = self.p50_in_rtts(find("handoff", "lock-core/cluster"), workers);
        goal(
            "handoff on a 3-master cluster (8 Lockers): p50 ≤ 4 RTT",
            measured,
            Verdict::of(p50.map(|r| r <= 4.0)),
        );

        let rate = |system: &str| find("uncontended", system)?.ops_per_sec;
        let r = rate("lock-core/zookeeper")
            .zip(rate("zookeeper-client"))
            .map(|(ours, theirs)| ours / theirs);
        goal(
            "ZooKeeper: uncontended ≥ 1.0× zookeeper-client's lock",
            times(r),
            Verdict::of(r.map(|r| r >= 1.0)),
        );
        for (system, lockers, peer) in [
            ("lock-core/zookeeper", "one Locker", "zookeeper-client"),
            (
                "lock-core/zookeeper/8-lockers",
                "8 Lockers",
                "zookeeper-client/8-sessions",
            ),
        ] {
            let (measured, p50) = after_reply_in_rtts(find("handoff", system));
            let (theirs, _) = after_reply_in_rtts(find("handoff", peer));
            goal(
                &format!("ZooKeeper handoff ({lockers}): p50 ≤ 2 RTT after the release's reply"),
                format!("{measured} (no goal: {peer} {theirs})"),
                Verdict::of(p50.map(|r| r <= 2.0)),
            );
        }

        let r = rate("lock-core/postgres")
            .zip(rate("tokio-postgres"))
            .map(|(ours, floor)| ours / floor);
        goal(
            "PostgreSQL: uncontended ≥ 0.90× hand-written tokio-postgres",
            times(r),
            Verdict::of(r.map(|r| r >= 0.9)),
        );
        let floor = "tokio-postgres/8-connections";
        let (theirs, _) = self.p50_in_rtts(find("handoff", floor), workers);
        for (system, lockers) in [
            ("lock-core/postgres", "one Locker"),
            ("lock-core/postgres/8-lockers", "8 Lockers"),
        ] {
            let (measured, p50) = self.p50_in_rtts(find("handoff", system), workers);
            goal(
                &format!("PostgreSQL handoff ({lockers}): p50 ≤ 3 RTT"),
                format!("{measured} (no goal: {floor} {theirs})"),
                Verdict::of(p50.map(|r| r <= 3.0)),
            );
        }

        let per_guard = find("memory", "lock-core").and_then(|m| m.extra("bytes_per_guard"));
        goal(
            "memory ≤ 1 KiB per held guard",
            format!("{} B", fmt_num(per_guard, 0)),
            Verdict::of(per_guard.map(|b| b <= 1024.0)),
        );
        let per_waiter = find("memory", "lock-core").and_then(|m| m.extra("bytes_per_waiter"));
        let per_task = find("memory", "none").and_then(|m| m.extra("bytes_per_waiter"));
        let net = per_waiter.zip(per_task).map(|(w, t)| w - t);
        goal(
            "memory ≤ 768 B per waiting task, net of the task itself",
            format!(
                "{} B ({} B with the task; a bare parked task: {} B)",
                fmt_num(net, 0),
                fmt_num(per_waiter, 0),
                fmt_num(per_task, 0)
            ),
            Verdict::of(net.map(|b| b <= 768.0)),
        );
        goals
    }

    /// A handoff row's p50, as measured and in round trips: the one measured beside the
    /// row, else the runtime's.
    fn p50_in_rtts(&self, row: Option<&Row>, workers: usize) -> (String, Option<f64>) {
        let p50 = row.and_then(|r| r.p50_us);
        let rtt = row
            .and_then(|r| r.extra("rtt_us"))
            .or_else(|| self.rtt.get(&workers).copied());
        let in_rtts = p50.zip(rtt).map(|(p, rtt)| p / rtt);
        let measured = format!(
            "{} µs = {} RTT ({} µs)",
            fmt_us(p50),
            fmt_num(in_rtts, 2),
            fmt_num(rtt, 1)
        );
        (measured, in_rtts)
    }
}

/// A ZooKeeper handoff row's p50 from the release's reply, as measured and in the read
/// round trips measured beside the row, with its p50 from the release being sent.
fn after_reply_in_rtts(row: Option<&Row>) -> (String, Option<f64>) {
    let p50 = row.and_then(|r| r.extra("after_release_reply_p50_us"));
    let rtt = row.and_then(|r| r.extra("rtt_us"));
    let in_rtts = p50.zip(rtt).map(|(p, rtt)| p / rtt);
    let measured = format!(
        "{} µs = {} RTT ({} µs); {} µs from the release sent",
        fmt_us(p50),
        fmt_num(in_rtts, 2),
        fmt_num(rtt, 1),
        fmt_us(row.and_then(|r| r.p50_us)),
    );
    (measured, in_rtts)
}

/// A ratio: `0.95×`.
fn times(r: Option<f64>) -> String {
    fmt_num(r, 2) + "×"
}
