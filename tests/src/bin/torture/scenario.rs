//! The scenarios: a deployment, a fault and its expected outcome; and one run of a
//! scenario, from starting the servers to judging the ledger.

use std::io;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lock_tests::{PostgresServer, RedisServer, TestServer, ValueExt};

use crate::ledger::{self, Event, KeyTally};
use crate::options::Options;
use crate::promises::{self, BornLost, PausedHolder};
use crate::report::Row;
use crate::store::{self, Deployment, Store};
use crate::worker::{self, Sections};

/// How long workers get to stop once told to, before they count as hung.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the connections are cut, or the pub/sub connections dropped.
const CUT_EVERY: Duration = Duration::from_millis(300);
/// How often the ledger is sampled while a dead holder's locks are waited for.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// How much later than its lifetime (and the store's expiry delay) a dead holder's lock
/// may free, for scheduling.
const FREE_SLACK: Duration = Duration::from_millis(500);

/// What the main process does to the store or to a worker, while the workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Nothing.
    None,
    /// The store frozen (SIGSTOP) for two lifetimes while locks are held, then resumed.
    StorePaused,
    /// The store killed and started again: Redis empty, the others from their data
    /// dirs.
    StoreRestarted,
    /// A worker process killed (SIGKILL) while it holds locks.
    HolderKilled,
    /// A worker process frozen (SIGSTOP) for two lifetimes, then resumed.
    HolderPaused,
    /// Every connection through the proxy cut, again and again, mid-command.
    ConnectionsCut,
    /// Every pub/sub connection dropped (`CLIENT KILL TYPE pubsub`), again and again.
    PubSubDropped,
    /// A cluster master killed; its replica takes over.
    MasterKilled,
    /// A Sentinel failover to the replica.
    Failover,
    /// Two of five RedLock masters paused (a minority), resumed; then three (a majority).
    MinorityThenMajorityPaused,
    /// The leader of a ZooKeeper ensemble killed; the two others elect a new one.
    LeaderKilled,
    /// Every PostgreSQL session holding an advisory lock ended by
    /// `pg_terminate_backend`, as an operator would.
    BackendsTerminated,
    /// Every MariaDB session that holds a lock killed (`KILL`).
    SessionsKilled,
    /// The worker process that leads the election killed (SIGKILL) while the others
    /// campaign.
    ElectedKilled,
    /// The worker process that leads the election frozen (SIGSTOP) for two lifetimes
    /// while the others campaign, then resumed.
    ElectedPaused,
}

impl Fault {
    /// What a guard lost as it is handed out says under this fault: a master's failover
    /// may lose a lock taken on it just before (replication is asynchronous), as the
    /// Sentinel and Cluster docs say; under any other fault it breaks a promise.
    fn born_lost(self) -> BornLost {
        match self {
            Fault::Failover | Fault::MasterKilled => BornLost::Excused(
                "taken on the old master just before the failover, and lost with it \
                 (asynchronous replication)",
            ),
            _ => BornLost::Broken,
        }
    }
}

/// A deployment, a fault and what must hold afterwards.
#[derive(Debug)]
pub(crate) struct Scenario {
    pub(crate) name: &'static str,
    pub(crate) deployment: Deployment,
    pub(crate) fault: Fault,
    pub(crate) sections: Sections,
    /// The expected outcome, beyond what every scenario must show: no lost update, no
    /// token granted twice, every worker stopping when told, progress after the fault,
    /// and the lock's own promises (see [`promises`]): no lock call past its wait, no
    /// guard born lost, no overtaken holder claiming its hold.
    pub(crate) expected: &'static str,
}

pub(crate) const ALL: &[Scenario] = &[
    Scenario {
        name: "steady",
        deployment: Deployment::Single,
        fault: Fault::None,
        sections: Sections::OneSlowHolder,
        expected: "no overlap, no stale write",
    },
    Scenario {
        name: "store-paused",
        deployment: Deployment::Single,
        fault: Fault::StorePaused,
        sections: Sections::OneSlowHolder,
        expected: "holders see their leases lost; stale writes refused",
    },
    Scenario {
        name: "store-restarted",
        deployment: Deployment::Single,
        fault: Fault::StoreRestarted,
        sections: Sections::OneSlowHolder,
        expected: "the store forgets its locks, so one may be granted twice: the older \
                   holder's reads and writes refused; tokens keep rising; locks served again \
                   without restarting a worker",
    },
    Scenario {
        name: "holder-killed",
        deployment: Deployment::Single,
        fault: Fault::HolderKilled,
        // The killed process is surely holding a lock: the slow holder's.
        sections: Sections::OneSlowHolder,
        expected: "its locks free when their lease ends, not later",
    },
    Scenario {
        name: "holder-paused",
        deployment: Deployment::Single,
        fault: Fault::HolderPaused,
        sections: Sections::OneSlowHolder,
        expected: "its writes refused once it resumes; its release frees nothing of others'",
    },
    Scenario {
        name: "connections-cut",
        deployment: Deployment::Proxied,
        fault: Fault::ConnectionsCut,
        sections: Sections::Short,
        expected: "no overlap, no stale write: no lock leaked or granted twice",
    },
    Scenario {
        name: "pubsub-dropped",
        deployment: Deployment::Single,
        fault: Fault::PubSubDropped,
        sections: Sections::Short,
        expected: "no overlap, no stale write; waiters poll, then subscribe again",
    },
    Scenario {
        name: "cluster-master-killed",
        deployment: Deployment::Cluster,
        fault: Fault::MasterKilled,
        sections: Sections::OneSlowHolder,
        expected: "locks served again once the replica takes over",
    },
    Scenario {
        name: "sentinel-failover",
        deployment: Deployment::Sentinel,
        fault: Fault::Failover,
        sections: Sections::OneSlowHolder,
        expected: "locks served by the new master; stale writes refused",
    },
    Scenario {
        name: "redlock-paused",
        deployment: Deployment::RedLock,
        fault: Fault::MinorityThenMajorityPaused,
        sections: Sections::OneSlowHolder,
        expected: "progress with a minority paused; leases lost with a majority paused",
    },
    Scenario {
        name: "zookeeper-server-paused",
        deployment: Deployment::ZooKeeper,
        fault: Fault::StorePaused,
        sections: Sections::OneSlowHolder,
        expected: "holders see their sessions lost; stale writes refused; locks served again \
                   on new sessions without restarting a worker",
    },
    Scenario {
        name: "zookeeper-server-restarted",
        deployment: Deployment::ZooKeeper,
        fault: Fault::StoreRestarted,
        sections: Sections::OneSlowHolder,
        expected: "nodes and sessions survive the restart on disk: a hold whose client comes \
                   back within the session timeout stays held, any other reports lost; \
                   tokens keep rising; locks served again without restarting a worker",
    },
    Scenario {
        name: "zookeeper-leader-killed",
        deployment: Deployment::ZooKeeperEnsemble,
        fault: Fault::LeaderKilled,
        sections: Sections::Short,
        expected: "locks served again once the two others elect a leader",
    },
    Scenario {
        name: "zookeeper-holder-killed",
        deployment: Deployment::ZooKeeper,
        fault: Fault::HolderKilled,
        // The killed process is surely holding a lock: the slow holder's.
        sections: Sections::OneSlowHolder,
        expected: "its locks free when the server expires its session, not later",
    },
    Scenario {
        name: "zookeeper-holder-paused",
        deployment: Deployment::ZooKeeper,
        fault: Fault::HolderPaused,
        sections: Sections::OneSlowHolder,
        expected: "the server expires its session and the next holder goes; its writes \
                   refused once it resumes; its release frees nothing of others'",
    },
    Scenario {
        name: "postgres-backend-terminated",
        deployment: Deployment::Postgres,
        fault: Fault::BackendsTerminated,
        sections: Sections::OneSlowHolder,
        expected: "every hold on an ended session reports lost; stale writes \
                   refused; locks served again on new sessions without restarting a worker",
    },
    Scenario {
        name: "postgres-server-paused",
        deployment: Deployment::Postgres,
        fault: Fault::StorePaused,
        sections: Sections::OneSlowHolder,
        expected: "holders see their sessions lost (the server, frozen past the session \
                   lease, ends them as it resumes); stale writes refused; lock calls return \
                   within their wait while the server answers nothing; locks served again \
                   without restarting a worker",
    },
    Scenario {
        name: "postgres-server-restarted",
        deployment: Deployment::Postgres,
        fault: Fault::StoreRestarted,
        sections: Sections::OneSlowHolder,
        expected: "every hold reports lost; the fence table survives, so tokens keep \
                   rising and the older holder's writes are refused; locks served again \
                   without restarting a worker",
    },
    Scenario {
        name: "postgres-holder-killed",
        deployment: Deployment::Postgres,
        fault: Fault::HolderKilled,
        // The killed process is surely holding a lock: the slow holder's.
        sections: Sections::OneSlowHolder,
        expected: "the server sees its connections close and frees its locks at once",
    },
    Scenario {
        name: "postgres-holder-paused",
        deployment: Deployment::Postgres,
        fault: Fault::HolderPaused,
        sections: Sections::OneSlowHolder,
        expected: "the server ends its idle sessions one lease later and its locks come \
                   free within lease + 1 s; its holds report lost and its writes are refused \
                   once it resumes; its release frees nothing of others'",
    },
    Scenario {
        name: "mariadb-session-killed",
        deployment: Deployment::MariaDb,
        fault: Fault::SessionsKilled,
        sections: Sections::OneSlowHolder,
        expected: "holders see their sessions lost at once; stale writes refused; locks \
                   served again on new sessions without restarting a worker",
    },
    Scenario {
        name: "mariadb-server-paused",
        deployment: Deployment::MariaDb,
        fault: Fault::StorePaused,
        sections: Sections::OneSlowHolder,
        expected: "holders see their sessions lost (frozen past the session lease); stale \
                   writes refused; lock calls return within their wait while the server \
                   answers nothing; locks served again without restarting a worker",
    },
    Scenario {
        name: "mariadb-server-restarted",
        deployment: Deployment::MariaDb,
        fault: Fault::StoreRestarted,
        sections: Sections::OneSlowHolder,
        expected: "every session and its locks gone, holders see it; fencing tokens kept \
                   (durable), so the older holder's writes refused; locks served again",
    },
    Scenario {
        name: "mariadb-holder-killed",
        deployment: Deployment::MariaDb,
        fault: Fault::HolderKilled,
        // The killed process is surely holding a lock: the slow holder's.
        sections: Sections::OneSlowHolder,
        expected: "its locks free at once: the server ends its sessions as their \
                   connections close with the process",
    },
    Scenario {
        name: "mariadb-holder-paused",
        deployment: Deployment::MariaDb,
        fault: Fault::HolderPaused,
        sections: Sections::OneSlowHolder,
        expected: "the server ends its idle sessions one lease later and the next holder \
                   goes; its writes refused once it resumes; its release frees nothing of \
                   others'",
    },
    Scenario {
        name: "election-leader-killed",
        deployment: Deployment::Single,
        fault: Fault::ElectedKilled,
        sections: Sections::Candidate,
        expected: "a follower leads once the killed leader's lease ends, not later; accepted \
                   writes never go back in token order",
    },
    Scenario {
        name: "election-leader-paused",
        deployment: Deployment::Single,
        fault: Fault::ElectedPaused,
        sections: Sections::Candidate,
        expected: "a follower leads once the paused leader's lease ends, not later; the old \
                   leader's late writes refused once it resumes; accepted writes never go \
                   back in token order",
    },
    Scenario {
        name: "zookeeper-election-leader-killed",
        deployment: Deployment::ZooKeeper,
        fault: Fault::ElectedKilled,
        sections: Sections::Candidate,
        expected: "a follower leads once the server expires the killed leader's session, \
                   not later; accepted writes never go back in token order",
    },
    Scenario {
        name: "zookeeper-election-leader-paused",
        deployment: Deployment::ZooKeeper,
        fault: Fault::ElectedPaused,
        sections: Sections::Candidate,
        expected: "a follower leads once the server expires the paused leader's session; \
                   the old leader's late writes refused once it resumes; accepted writes \
                   never go back in token order",
    },
];

/// What the fault did, for the checks.
#[derive(Debug, Default)]
struct Injected {
    faults: u64,
    /// For a killed holder: the longest time a key went without an accepted write.
    longest_stall: Option<Duration>,
    /// For RedLock: the writes accepted while a minority was paused.
    during_minority: Option<u64>,
    /// For a paused holder: its pid, and how long it was paused.
    paused_holder: Option<PausedHolder>,
    /// For a killed holder on PostgreSQL, which frees its locks at once: how many it held
    /// as it was killed.
    killed_holder_locks: Option<u64>,
    /// For a faulted leader: how long after the fault a newer leader took over, if one
    /// did within the wait.
    takeover: Option<Duration>,
}

/// Runs `scenario` and judges what the ledger shows.
pub(crate) fn run(scenario: &'static Scenario, options: &Options) -> Row {
    let started = Instant::now();
    let lifetime = options.lifetime(scenario.deployment);
    let ledger = RedisServer::spawn();
    let mut store = Store::spawn(scenario.deployment);
    let keys: Vec<String> = (0..options.keys).map(|i| format!("account:{i}")).collect();
    let mut workers = Workers::spawn(scenario, options, &store.spec(), &ledger.url(), &keys);
    let pids = workers.pids();

    thread::sleep(options.before);
    if scenario.sections == Sections::OneSlowHolder {
        // The fault comes early in a slow section (once the holder is back in), so that
        // the section outlasts the hold.
        await_new_section(&ledger, &keys[0], lifetime * 4);
        thread::sleep(lifetime / 4);
    }
    let injected = inject(
        scenario,
        &mut store,
        &mut workers,
        &ledger,
        &keys,
        options.after,
        lifetime,
    );
    let before_after = ledger::accepted(&ledger, &keys).expect("read the ledger");
    thread::sleep(options.after);
    let subscribed = subscribers(&mut store);
    let failed_workers = workers.stop();
    let leftover = leftover_locks(&mut store, lifetime);

    let mut row = Row::new(scenario, started.elapsed(), injected.faults);
    for key in &keys {
        row.add(KeyTally::read(&ledger, key).expect("read the ledger"));
    }
    row.sections = ledger::events(&ledger, Event::Section).expect("read the ledger");
    row.losses = ledger::events(&ledger, Event::Lost).expect("read the ledger");
    row.released_gone =
        ledger::events(&ledger, Event::ReleaseFoundItGone).expect("read the ledger");
    let found_gone = ledger::events(&ledger, Event::FoundGone).expect("read the ledger");
    let unreported = ledger::events(&ledger, Event::LossUnreported).expect("read the ledger");
    if found_gone > 0 {
        row.note(format!(
            "{found_gone} holds found gone before their release, {unreported} of them never reported lost"
        ));
    }
    if unreported > 0 {
        row.violation(format!(
            "{unreported} holds on ended sessions never reported lost"
        ));
    }
    for (event, what) in [
        (Event::Timeout, "lock calls timed out"),
        (Event::LockError, "lock calls failed"),
    ] {
        let count = ledger::events(&ledger, event).expect("read the ledger");
        if count > 0 {
            row.note(format!("{count} {what}"));
        }
    }
    let after = row.accepted - before_after;
    if scenario.fault == Fault::PubSubDropped && subscribed < Some(options.processes) {
        row.violation("the workers did not all subscribe again".to_owned());
    }
    if let Some(leftover) = leftover.filter(|&n| n > 0) {
        row.violation(format!(
            "{leftover} locks still held after the workers stopped"
        ));
    }
    let born_lost = scenario.fault.born_lost();
    promises::judge(&mut row, &ledger, &pids, injected.paused_holder, born_lost);
    if let Some(paused) = injected.paused_holder {
        let refused = ledger::refused_writes_of(&ledger, paused.pid).expect("read the ledger");
        row.note(format!(
            "{refused} writes of the paused holder refused by the fence"
        ));
        if refused == 0 {
            row.violation("the fence refused no write of the paused holder".to_owned());
        }
    }
    if scenario.sections == Sections::Candidate {
        judge_election(&mut row, scenario, &ledger, &keys[0], lifetime, &injected);
    }
    judge(
        &mut row,
        scenario,
        lifetime,
        &injected,
        after,
        failed_workers,
    );
    row
}

/// Adds to `row` what an election's candidates must show: the fence accepted their
/// writes in token order (no two leaders' writes out of order), and a newer leader took
/// over from the faulted one within its lifetime (and the store's expiry delay) plus
/// [`FREE_SLACK`].
fn judge_election(
    row: &mut Row,
    scenario: &Scenario,
    ledger: &RedisServer,
    election: &str,
    lifetime: Duration,
    injected: &Injected,
) {
    let order = ledger::accepted_order(ledger, election).expect("read the ledger");
    let backwards = order.windows(2).filter(|w| w[1] < w[0]).count();
    let leaders = order.windows(2).filter(|w| w[1] != w[0]).count() + 1;
    row.note(format!(
        "{} writes accepted under {leaders} leaderships in turn",
        order.len()
    ));
    if backwards > 0 {
        row.violation(format!(
            "{backwards} accepted writes went back in token order: two leaders' writes \
             accepted out of order"
        ));
    }
    let within = freed_within(scenario.deployment, lifetime);
    match injected.takeover {
        Some(took) => {
            row.note(format!(
                "a follower took over within {} ms",
                took.as_millis()
            ));
            if took > within {
                row.violation(format!(
                    "a follower took over {} ms after the fault, past {} ms",
                    took.as_millis(),
                    within.as_millis()
                ));
            }
        }
        None => row.violation("no follower took over from the faulted leader".to_owned()),
    }
}

/// Adds to `row` every check that failed.
fn judge(
    row: &mut Row,
    scenario: &Scenario,
    lifetime: Duration,
    injected: &Injected,
    after: u64,
    failed_workers: Vec<String>,
) {
    for failed in failed_workers {
        row.violation(failed);
    }
    if row.lost_updates > 0 {
        row.violation(format!("{} updates lost", row.lost_updates));
    }
    if row.granted_twice > 0 {
        row.violation(format!("{} tokens granted twice", row.granted_twice));
    }
    if after == 0 {
        row.violation("no write accepted after the fault".to_owned());
    }
    let clean = matches!(
        scenario.fault,
        Fault::None | Fault::ConnectionsCut | Fault::PubSubDropped
    );
    if clean && row.overlaps > 0 {
        row.violation(format!("{} overlaps", row.overlaps));
    }
    if clean && row.refused + row.refused_reads > 0 {
        let stale = row.refused + row.refused_reads;
        row.violation(format!("{stale} stale reads or writes"));
    }
    if row.refused_reads > 0 {
        row.note(format!("{} stale reads refused", row.refused_reads));
    }
    // On PostgreSQL every fault but a kill ends sessions that a live worker holds on.
    let sessions_end =
        scenario.deployment == Deployment::Postgres && scenario.fault != Fault::HolderKilled;
    let holds_run_out = matches!(
        scenario.fault,
        Fault::StorePaused | Fault::MinorityThenMajorityPaused | Fault::SessionsKilled
    ) || sessions_end;
    if holds_run_out && row.losses == 0 {
        row.violation("no holder saw its hold lost".to_owned());
    }
    if scenario.fault == Fault::BackendsTerminated && injected.faults == 0 {
        row.violation("no session held a lock to terminate".to_owned());
    }
    let slow_holder_overtaken = match scenario.fault {
        Fault::StorePaused | Fault::HolderPaused | Fault::BackendsTerminated => true,
        Fault::StoreRestarted => scenario.deployment.restart_ends_holds(),
        _ => false,
    };
    if slow_holder_overtaken && row.refused == 0 {
        row.violation("the slow holder's late write was not refused".to_owned());
    }
    if row.released_gone > 0 {
        row.note(format!(
            "{} releases found the lock gone",
            row.released_gone
        ));
    }
    if scenario.fault == Fault::HolderPaused && row.released_gone == 0 {
        row.violation("the slow holder's release did not find the lock gone".to_owned());
    }
    if let Some(stall) = injected.longest_stall {
        row.note(format!("locks freed within {} ms", stall.as_millis()));
        if stall > freed_within(scenario.deployment, lifetime) {
            row.violation(format!(
                "a key went {} ms without a write, more than a lifetime",
                stall.as_millis()
            ));
        }
        match injected.killed_holder_locks {
            // PostgreSQL frees a killed process's locks as its connections close.
            Some(0) => row.violation("the killed process held no lock".to_owned()),
            Some(held) => row.note(format!("the killed process held {held} locks")),
            // The faulted holder's key waits out what was left of its hold: its lease,
            // renewed a third of a lease before at the latest, or its session, which the
            // client keeps alive as often; unless the server ends the session with the
            // process's connections (MariaDB).
            None if stall < lifetime / 2 && !scenario.deployment.frees_with_the_process() => {
                row.violation(format!(
                    "no key waited for a hold to run out ({} ms): the first worker held no lock",
                    stall.as_millis()
                ));
            }
            None => {}
        }
    }
    if let Some(during) = injected.during_minority {
        row.note(format!("{during} writes with a minority paused"));
        if during == 0 {
            row.violation("no progress with a minority paused".to_owned());
        }
    }
}

/// Injects the scenario's fault and returns once it is over (the store running again);
/// a fault that repeats does so for `span`.
fn inject(
    scenario: &Scenario,
    store: &mut Store,
    workers: &mut Workers,
    ledger: &RedisServer,
    keys: &[String],
    span: Duration,
    lifetime: Duration,
) -> Injected {
    let two_lifetimes = lifetime * 2;
    let once = Injected {
        faults: 1,
        ..Injected::default()
    };
    match scenario.fault {
        Fault::None => Injected::default(),
        Fault::StorePaused => {
            store.pause();
            thread::sleep(two_lifetimes);
            store.resume();
            once
        }
        Fault::StoreRestarted => {
            store.restart();
            once
        }
        Fault::HolderKilled => {
            let killed_holder_locks = match store {
                Store::Postgres(server) => Some(locks_held_by(server, workers.first_pid())),
                _ => None,
            };
            let pid = workers.kill_first();
            ledger::forget_process(ledger, keys, pid).expect("clear the dead process");
            Injected {
                longest_stall: Some(longest_stall(
                    ledger,
                    keys,
                    freed_within(scenario.deployment, lifetime) + FREE_SLACK,
                )),
                killed_holder_locks,
                ..once
            }
        }
        Fault::HolderPaused => {
            let pid = workers.signal_first("STOP");
            let paused = Instant::now();
            // On PostgreSQL the server ends the paused process's idle sessions, and their
            // locks come free, within the pause.
            let longest_stall = match store {
                Store::Postgres(_) => Some(longest_stall(ledger, keys, two_lifetimes)),
                _ => {
                    thread::sleep(two_lifetimes);
                    None
                }
            };
            workers.signal_first("CONT");
            Injected {
                paused_holder: Some(PausedHolder {
                    pid,
                    span: paused.elapsed(),
                }),
                longest_stall,
                ..once
            }
        }
        Fault::ConnectionsCut => {
            let Store::Proxied(_, proxy) = store else {
                panic!("connections are cut through the proxy");
            };
            repeat(span, || proxy.cut() > 0)
        }
        Fault::PubSubDropped => {
            let server = store.server();
            repeat(span, || {
                let killed = server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
                killed.is_ok_and(|k| k.as_int().is_some_and(|n| n > 0))
            })
        }
        Fault::MasterKilled => {
            let Store::Cluster(cluster) = store else {
                panic!("a master is killed in a cluster");
            };
            cluster.node_mut(0).kill();
            once
        }
        Fault::Failover => {
            let Store::Sentinel(sentinel) = store else {
                panic!("a failover needs sentinels");
            };
            sentinel.failover();
            once
        }
        Fault::MinorityThenMajorityPaused => {
            let Store::RedLock(masters) = store else {
                panic!("RedLock masters are paused");
            };
            let before = ledger::accepted(ledger, keys).expect("read the ledger");
            pause_for(&masters[..2], two_lifetimes);
            let during = ledger::accepted(ledger, keys).expect("read the ledger") - before;
            pause_for(&masters[..3], two_lifetimes);
            Injected {
                faults: 2,
                during_minority: Some(during),
                ..Injected::default()
            }
        }
        Fault::LeaderKilled => {
            let Store::ZooKeeperEnsemble(ensemble) = store else {
                panic!("a leader is killed in a ZooKeeper ensemble");
            };
            let leader = ensemble.leader();
            ensemble.kill(leader);
            ensemble.wait_quorum();
            once
        }
        Fault::BackendsTerminated => {
            let ended = store
                .postgres()
                .psql(
                    "SELECT count(pg_terminate_backend(pid)) FROM (SELECT DISTINCT pid \
                     FROM pg_locks WHERE locktype = 'advisory' AND granted) AS holders",
                )
                .expect("terminate the holding sessions");
            Injected {
                faults: ended.parse().expect("a count of sessions"),
                ..Injected::default()
            }
        }
        Fault::SessionsKilled => {
            let Store::MariaDb(server) = store else {
                panic!("sessions are killed on MariaDB");
            };
            Injected {
                faults: kill_holders(server, keys),
                ..Injected::default()
            }
        }
        Fault::ElectedKilled => {
            let (pid, token) = await_leader(ledger, &keys[0], two_lifetimes);
            workers.kill(pid);
            let within = freed_within(scenario.deployment, lifetime) + FREE_SLACK;
            Injected {
                takeover: await_takeover(ledger, &keys[0], token, within),
                ..once
            }
        }
        Fault::ElectedPaused => {
            let (pid, token) = await_leader(ledger, &keys[0], two_lifetimes);
            workers.signal(pid, "STOP");
            let paused = Instant::now();
            let takeover = await_takeover(ledger, &keys[0], token, two_lifetimes);
            thread::sleep(two_lifetimes.saturating_sub(paused.elapsed()));
            workers.signal(pid, "CONT");
            Injected {
                paused_holder: Some(PausedHolder {
                    pid,
                    span: paused.elapsed(),
                }),
                takeover,
                ..once
            }
        }
    }
}

/// Waits until someone leads `election` (at most `timeout`) and returns the newest
/// leader's pid and token.
fn await_leader(ledger: &RedisServer, election: &str, timeout: Duration) -> (u32, u64) {
    let started = Instant::now();
    loop {
        if let Some(leader) = ledger::newest_leader(ledger, election).expect("read the ledger") {
            return leader;
        }
        assert!(
            started.elapsed() < timeout,
            "nobody led the election within {timeout:?}"
        );
        thread::sleep(SAMPLE_EVERY);
    }
}

/// Waits until a leader newer than `token` took over `election`, for at most `timeout`:
/// how long that took, or `None` if none did.
fn await_takeover(
    ledger: &RedisServer,
    election: &str,
    token: u64,
    timeout: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        let newest = ledger::newest_leader(ledger, election).expect("read the ledger");
        if newest.is_some_and(|(_, newest)| newest > token) {
            return Some(started.elapsed());
        }
        thread::sleep(SAMPLE_EVERY);
    }
    None
}

/// Kills (`KILL`) the session that holds each of `keys` on `server`: how many it killed.
fn kill_holders(server: &lock_tests::MariaDbServer, keys: &[String]) -> u64 {
    let mut killed = 0;
    for key in keys {
        let holder = server
            .sql(&format!("SELECT IS_USED_LOCK('{key}')"))
            .expect("ask for the holder");
        if holder != "NULL" && server.sql(&format!("KILL {holder}")).is_ok() {
            killed += 1;
        }
    }
    killed
}

/// How many advisory locks the sessions of the worker process `pid` hold.
fn locks_held_by(server: &PostgresServer, pid: u32) -> u64 {
    let held = server
        .psql(&format!(
            "SELECT count(*) FROM pg_locks JOIN pg_stat_activity USING (pid) \
             WHERE locktype = 'advisory' AND granted AND application_name = '{}'",
            store::worker_name(pid)
        ))
        .expect("count the worker's locks");
    held.parse().expect("a count of locks")
}

/// How long a dead holder's locks on `deployment` may stay held, at most.
fn freed_within(deployment: Deployment, lifetime: Duration) -> Duration {
    lifetime + deployment.expiry_delay() + FREE_SLACK
}

/// How many pub/sub connections a single-node Redis has.
fn subscribers(store: &mut Store) -> Option<usize> {
    let Store::Single(server) = store else {
        return None;
    };
    let clients = server.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]).ok()?;
    Some(clients.as_str()?.lines().count())
}

/// How many locks a single-node Redis still holds a lease after everyone stopped (a lock
/// key is `P{K}`, the only kind of key that ends with its hash tag), or PostgreSQL's
/// sessions still hold.
fn leftover_locks(store: &mut Store, lease: Duration) -> Option<usize> {
    if let Store::Postgres(server) = store {
        thread::sleep(lease);
        let held = server
            .psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
            .ok()?;
        return held.parse().ok();
    }
    let (Store::Single(server) | Store::Proxied(server, _)) = store else {
        return None;
    };
    thread::sleep(lease);
    let keys = server.cmd(&["KEYS", "*}"]).ok()?;
    Some(keys.as_sequence()?.len())
}

/// Waits until `key` is written, as it is at the end of every section.
fn await_new_section(ledger: &RedisServer, key: &str, timeout: Duration) {
    let accepted = || {
        KeyTally::read(ledger, key)
            .expect("read the ledger")
            .accepted
    };
    let (before, started) = (accepted(), Instant::now());
    while accepted() == before && started.elapsed() < timeout {
        thread::sleep(SAMPLE_EVERY);
    }
}

/// Calls `fault` every [`CUT_EVERY`] for `span`, counting the calls that did something.
fn repeat(span: Duration, mut fault: impl FnMut() -> bool) -> Injected {
    let until = Instant::now() + span;
    let mut faults = 0;
    while Instant::now() < until {
        thread::sleep(CUT_EVERY);
        faults += u64::from(fault());
    }
    Injected {
        faults,
        ..Injected::default()
    }
}

fn pause_for(servers: &[RedisServer], span: Duration) {
    servers.iter().for_each(RedisServer::pause);
    thread::sleep(span);
    servers.iter().for_each(RedisServer::resume);
}

/// Samples the accepted writes of each key for `span` and returns the longest time one
/// went without a new one (to the end of `span` if it never had one).
fn longest_stall(ledger: &RedisServer, keys: &[String], span: Duration) -> Duration {
    let started = Instant::now();
    let read = || {
        keys.iter()
            .map(|key| {
                KeyTally::read(ledger, key)
                    .expect("read the ledger")
                    .accepted
            })
            .collect::<Vec<_>>()
    };
    let mut last = read();
    let mut changed = vec![started; keys.len()];
    let mut longest = Duration::ZERO;
    while started.elapsed() < span {
        thread::sleep(SAMPLE_EVERY);
        let now = Instant::now();
        for ((last, changed), accepted) in last.iter_mut().zip(&mut changed).zip(read()) {
            if accepted != *last {
                longest = longest.max(now - *changed);
                (*last, *changed) = (accepted, now);
            }
        }
    }
    let end = Instant::now();
    changed
        .iter()
        .fold(longest, |longest, changed| longest.max(end - *changed))
}

/// The worker processes, each told to stop by closing its stdin.
struct Workers {
    children: Vec<Child>,
    /// The first worker, once killed.
    killed: Option<u32>,
}

impl Workers {
    fn spawn(
        scenario: &Scenario,
        options: &Options,
        store: &str,
        ledger: &str,
        keys: &[String],
    ) -> Workers {
        let exe = std::env::current_exe().expect("the torture binary's path");
        let children = (0..options.processes)
            .map(|i| {
                let args = worker::Args {
                    store: store.to_owned(),
                    ledger: ledger.to_owned(),
                    tasks: options.tasks,
                    keys: keys.to_vec(),
                    lifetime: options.lifetime(scenario.deployment),
                    sections: scenario.sections,
                    index: i as u64,
                };
                Command::new(&exe)
                    .args(args.to_command_line())
                    .stdin(Stdio::piped())
                    .spawn()
                    .expect("start a worker process")
            })
            .collect();
        Workers {
            children,
            killed: None,
        }
    }

    /// Every worker's pid, in order.
    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// The first worker's pid.
    fn first_pid(&self) -> u32 {
        self.children[0].id()
    }

    /// Kills the first worker with SIGKILL and returns its pid.
    fn kill_first(&mut self) -> u32 {
        let pid = self.first_pid();
        self.kill(pid);
        pid
    }

    /// Kills the worker `pid` with SIGKILL.
    fn kill(&mut self, pid: u32) {
        let child = self
            .children
            .iter_mut()
            .find(|child| child.id() == pid)
            .expect("a worker of this run");
        child.kill().expect("kill the worker");
        child.wait().expect("reap the worker");
        self.killed = Some(pid);
    }

    /// Sends `SIG{signal}` to the first worker and returns its pid.
    fn signal_first(&self, signal: &str) -> u32 {
        let pid = self.first_pid();
        self.signal(pid, signal);
        pid
    }

    /// Sends `SIG{signal}` to the worker `pid`.
    fn signal(&self, pid: u32, signal: &str) {
        assert!(
            self.pids().contains(&pid),
            "{pid} is not a worker of this run"
        );
        let status = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "could not send SIG{signal} to the worker {pid}"
        );
    }

    /// Tells every worker to stop and waits for it; returns what went wrong with any.
    fn stop(mut self) -> Vec<String> {
        for child in &mut self.children {
            drop(child.stdin.take());
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut failed = Vec::new();
        for child in &mut self.children {
            if Some(child.id()) == self.killed {
                continue;
            }
            match wait(child, deadline) {
                Ok(Some(status)) if status.success() => {}
                Ok(Some(status)) => failed.push(format!("a worker exited with {status}")),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    failed.push(format!(
                        "a worker hung for {STOP_TIMEOUT:?} once told to stop"
                    ));
                }
                Err(e) => failed.push(format!("could not wait for a worker: {e}")),
            }
        }
        failed
    }
}

/// Waits for `child` until `deadline`: `None` if it is still running then.
fn wait(child: &mut Child, deadline: Instant) -> io::Result<Option<std::process::ExitStatus>> {
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        thread::sleep(SAMPLE_EVERY);
    }
    child.try_wait()
}
