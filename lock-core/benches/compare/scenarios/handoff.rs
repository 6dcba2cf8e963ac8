//! `handoff` and `fair-handoff`: 8 tasks on one lock, each holding it for [`HOLD`]. After
//! releasing, a task waits until another one has acquired, so every acquisition is a
//! handoff; its latency runs from the release being sent to the next acquire returning.
//! A row also gives it from the release's reply to the next acquire returning: the release
//! had reached the server by then.
//!
//! Each acquire call also takes a ticket from a counter as it starts, so that a row can
//! count the acquisitions served after one whose call started later: 0 for a lock that
//! serves first come first served. Calls start about a hold apart (a task asks again once
//! someone else has taken the lock), so only a call held up for longer than that between
//! its ticket and Redis could be miscounted. The first round, whose calls start at once,
//! is not counted.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::Locker;
use tokio::sync::watch;

use super::{Run, Scale};
use crate::measure::{Calls, Sample, percentile, round_trip};
use crate::report::{Curve, Row, fmt_us};
use crate::systems::System;

/// Tasks contending for the lock.
pub(crate) const TASKS: usize = 8;

/// How long a task holds the lock. Without a hold, the previous holder's next attempt
/// (made the moment it sees someone else acquire) races that holder's release and wins: a
/// retry-based lock would get a wake-up from the harness for free.
const HOLD: Duration = Duration::from_millis(1);

/// `handoff`: lock-core with one `Locker` and with 8, and the polling floors and rslock.
pub(crate) async fn run(run: &mut Run<'_>) {
    let lockers = connect_lockers(run.url).await;
    let rows: [(&str, Vec<System>, &str); 5] = [
        (
            "lock-core",
            vec![System::LockCore(run.locker.clone()); TASKS],
            "8 tasks share one Locker",
        ),
        (
            "lock-core/8-lockers",
            lockers.into_iter().map(System::LockCore).collect(),
            "one Locker per task, as 8 replicas would",
        ),
        (
            "raw-fenced",
            vec![run.system("raw-fenced"); TASKS],
            "no wake-up: polls the fenced acquire script with no sleep",
        ),
        (
            "raw",
            vec![run.system("raw"); TASKS],
            "no wake-up: polls SET NX with no sleep",
        ),
        (
            "rslock",
            vec![run.system("rslock"); TASKS],
            "default retry: 3 tries, 0-200 ms random delay",
        ),
    ];
    for (system, tasks, note) in rows {
        measure_row(run, "handoff", system, tasks, note).await;
    }
}

/// `fair-handoff`: lock-core's fair lock, with one `Locker` and with 8.
pub(crate) async fn run_fair(run: &mut Run<'_>) {
    let lockers = connect_lockers(run.url).await;
    let rows: [(&str, Vec<System>, &str); 2] = [
        (
            "lock-core",
            vec![System::Fair(run.locker.clone()); TASKS],
            "fair lock; 8 tasks share one Locker",
        ),
        (
            "lock-core/8-lockers",
            lockers.into_iter().map(System::Fair).collect(),
            "fair lock; one Locker per task",
        ),
    ];
    for (system, tasks, note) in rows {
        measure_row(run, "fair-handoff", system, tasks, note).await;
    }
}

/// A `Locker` per task, each with its own connections, as 8 replicas would have.
async fn connect_lockers(url: &str) -> Vec<Locker> {
    let mut lockers = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        lockers.push(Locker::connect(url).await.expect("connect lock-core"));
    }
    lockers
}

/// Runs one row, `tasks` (one [`System`] per task) taking turns on one lock, and reports
/// it with the round trip measured just before it, which its goals are held to: the
/// machine's speed drifts within a run.
async fn measure_row(
    run: &mut Run<'_>,
    scenario: &'static str,
    system: &str,
    tasks: Vec<System>,
    note: &str,
) {
    let workers = run.workers;
    let in_script = tasks[0].in_script();
    let rtt = round_trip(run.url, run.scale.rtt_samples / 5).await;
    let before = run.stats.read_settled().await;
    let relay = relay(tasks, run.scale, &format!("h{workers}:{scenario}:{system}")).await;
    let after = run.stats.read_settled().await;
    let calls = Calls::between(&before, &after, in_script);

    // Commands are divided by every acquisition, those that drain the queue after the
    // last counted one included.
    let row = relay_row(scenario, system, workers, run.scale, rtt, &relay, note)
        .with_calls(calls, relay.acquisitions);
    let label = match scenario {
        "fair-handoff" => format!("{system} fair"),
        _ => system.to_owned(),
    };
    run.report.curves.push(Curve {
        label,
        workers,
        lat: relay.sample.lat.clone(),
    });
    run.report.push(row);
}

/// The row of a handoff run `relay`, with the round trip measured beside it.
pub(crate) fn relay_row(
    scenario: &'static str,
    system: &str,
    workers: usize,
    scale: Scale,
    rtt: f64,
    relay: &Relay,
    note: &str,
) -> Row {
    let mut row = Row::from_sample(scenario, system, workers, &relay.sample);
    let counted = relay.sample.ops;
    let after_reply = percentile(&mut relay.after_reply.clone(), 0.5);
    row.extra.insert("rtt_us", rtt);
    row.extra.insert("acquisitions", counted as f64);
    row.extra
        .insert("fifo_overtakings", relay.overtakings as f64);
    if let Some(p50) = after_reply {
        row.extra.insert("after_release_reply_p50_us", p50);
    }
    row.note = format!(
        "{note}; p50 {} µs after the release's reply; served out of asking order {} times",
        fmt_us(after_reply),
        relay.overtakings
    );
    if counted < scale.handoffs {
        row.note += &format!(
            "; stopped at the {:?} cap after {counted} acquisitions",
            scale.handoff_cap
        );
    }
    row
}

/// What a handoff run measured.
#[derive(Debug)]
pub(crate) struct Relay {
    /// The acquisitions counted, their latencies (µs), and the time until the last one.
    sample: Sample,
    /// The same latencies from the reply to the release before each, µs; negative when the
    /// acquire returned before the releasing task saw that reply.
    after_reply: Vec<f64>,
    /// Every acquisition, those after the end (draining the queue) included.
    pub(crate) acquisitions: usize,
    /// Acquisitions served after one whose acquire call started later.
    overtakings: usize,
}

/// The state the tasks of a handoff run share.
#[derive(Debug)]
struct Baton {
    progress: watch::Sender<Progress>,
    /// Numbers the acquire calls in the order they start.
    tickets: AtomicUsize,
    order: Mutex<Order>,
    /// When the last release was sent, in ns since `epoch`; 0 when none is pending.
    released_at: AtomicU64,
    epoch: Instant,
    /// Every acquisition, those after the end included.
    acquisitions: AtomicUsize,
}

/// What a task of a handoff run timed, in ns since [`Baton::epoch`] (latencies in µs).
#[derive(Debug, Default)]
struct Times {
    /// From the release before each acquisition it made to the acquisition.
    lat: Vec<f64>,
    /// Its counted acquisitions, by number (the first counted is 1), and when each was made.
    acquired: Vec<(usize, u64)>,
    /// When the reply came to its release of each of them.
    replied: HashMap<usize, u64>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    /// Acquisitions counted so far.
    counted: usize,
    /// The run is over: acquisitions from now on drain the queue and are not counted.
    over: bool,
}

/// The tickets served so far.
#[derive(Debug, Default)]
struct Order {
    highest: Option<usize>,
    /// Tickets served after a later one.
    overtakings: usize,
}

impl Order {
    fn serve(&mut self, ticket: usize) {
        if self.highest.is_some_and(|highest| ticket < highest) {
            self.overtakings += 1;
        }
        self.highest = self.highest.max(Some(ticket));
    }
}

impl Baton {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// One task per system of `tasks`, passing the lock `name` from one to the next until
/// `scale.handoffs` acquisitions or `scale.handoff_cap`.
pub(crate) async fn relay(tasks: Vec<System>, scale: Scale, name: &str) -> Relay {
    let baton = Arc::new(Baton {
        progress: watch::Sender::new(Progress::default()),
        tickets: AtomicUsize::new(0),
        order: Mutex::new(Order::default()),
        released_at: AtomicU64::new(0),
        epoch: Instant::now(),
        acquisitions: AtomicUsize::new(0),
    });
    let started = Instant::now();
    let tasks: Vec<_> = tasks
        .into_iter()
        .map(|system| {
            let baton = baton.clone();
            let name = name.to_owned();
            tokio::spawn(async move {
                let mut times = Times::default();
                let mut seen = baton.progress.subscribe();
                loop {
                    let ticket = baton.tickets.fetch_add(1, Ordering::AcqRel);
                    let held = system.acquire(&name).await;
                    let acquired_at = baton.now_ns();
                    baton.acquisitions.fetch_add(1, Ordering::Relaxed);
                    let released_at = baton.released_at.swap(0, Ordering::AcqRel);
                    let mut progress = Progress::default();
                    let mut number = None;
                    baton.progress.send_modify(|p| {
                        if !p.over {
                            p.counted += 1;
                            number = Some(p.counted);
                            times.acquired.push((p.counted, acquired_at));
                            if released_at != 0 {
                                times.lat.push((acquired_at - released_at) as f64 / 1e3);
                            }
                            if p.counted > TASKS {
                                baton.order.lock().unwrap().serve(ticket);
                            }
                            p.over = p.counted >= scale.handoffs
                                || started.elapsed() > scale.handoff_cap;
                        }
                        progress = *p;
                    });

                    tokio::time::sleep(HOLD).await;
                    baton.released_at.store(baton.now_ns(), Ordering::Release);
                    system.release(held).await;
                    if let Some(number) = number {
                        times.replied.insert(number, baton.now_ns());
                    }
                    if progress.over {
                        return times;
                    }
                    // Wait until someone else has taken it. Once the run is over, each
                    // task takes it once more, so that those queued on it drain.
                    let _ = seen
                        .wait_for(|p| p.counted > progress.counted || p.over)
                        .await;
                }
            })
        })
        .collect();

    let _ = baton.progress.subscribe().wait_for(|p| p.over).await;
    let elapsed = started.elapsed();
    let mut times = Times::default();
    for task in tasks {
        let task = task.await.expect("handoff task");
        times.lat.extend(task.lat);
        times.acquired.extend(task.acquired);
        times.replied.extend(task.replied);
    }
    let after_reply = times
        .acquired
        .iter()
        .filter_map(|&(number, acquired_at)| {
            let replied_at = *times.replied.get(&number.checked_sub(1)?)?;
            Some((acquired_at as f64 - replied_at as f64) / 1e3)
        })
        .collect();
    let counted = baton.progress.borrow().counted;
    let overtakings = baton.order.lock().unwrap().overtakings;
    Relay {
        sample: Sample {
            ops: counted,
            elapsed,
            lat: times.lat,
            ..Sample::default()
        },
        after_reply,
        acquisitions: baton.acquisitions.load(Ordering::Relaxed),
        overtakings,
    }
}
