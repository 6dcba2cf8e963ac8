//! The torture run's short version: each scenario of `torture --short` (worker processes
//! taking locks on a real store while a fault is injected) as a test of its own, which
//! fails with the run's table if any of its checks did.

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Far more than the slowest scenario takes (a Sentinel failover, about 20 s).
const DEADLINE: Duration = Duration::from_secs(180);

/// Runs `torture --short --only scenario` and returns its report.
fn torture(scenario: &str) -> String {
    let mut run = Command::new(env!("CARGO_BIN_EXE_torture"))
        .args(["--short", "--only", scenario])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the torture binary");
    let mut stdout = run.stdout.take().expect("piped");
    let mut stderr = run.stderr.take().expect("piped");
    let read_out = thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).map(|_| out)
    });
    let read_err = thread::spawn(move || {
        let mut err = String::new();
        stderr.read_to_string(&mut err).map(|_| err)
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = run.try_wait().expect("wait for the torture binary") {
            break Some(status);
        }
        if started.elapsed() > DEADLINE {
            let _ = run.kill();
            let _ = run.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let out = read_out.join().unwrap().unwrap_or_default();
    let err = read_err.join().unwrap().unwrap_or_default();
    match status {
        Some(status) if status.success() => {
            println!("{out}");
            out
        }
        Some(status) => panic!("torture {scenario} failed ({status}):\n{out}\n{err}"),
        None => panic!("torture {scenario} ran past {DEADLINE:?}:\n{out}\n{err}"),
    }
}

/// How many late writes of the paused holder the ledger's fence refused, from the note
/// "N writes of the paused holder refused by the fence" in the report.
fn paused_holder_refused(report: &str) -> u64 {
    report
        .lines()
        .flat_map(|line| line.trim_end_matches('.').split("; "))
        .find_map(|note| note.strip_suffix(" writes of the paused holder refused by the fence"))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no refused writes of the paused holder in:\n{report}"))
}

#[test]
fn steady() {
    torture("steady");
}

#[test]
fn store_paused() {
    torture("store-paused");
}

#[test]
fn store_restarted() {
    torture("store-restarted");
}

#[test]
fn holder_killed() {
    torture("holder-killed");
}

#[test]
fn holder_paused() {
    let report = torture("holder-paused");
    assert!(paused_holder_refused(&report) > 0, "{report}");
}

#[test]
fn connections_cut() {
    torture("connections-cut");
}

#[test]
fn pubsub_dropped() {
    torture("pubsub-dropped");
}

#[test]
fn cluster_master_killed() {
    torture("cluster-master-killed");
}

#[test]
fn sentinel_failover() {
    torture("sentinel-failover");
}

#[test]
fn redlock_paused() {
    torture("redlock-paused");
}

#[test]
fn zookeeper_server_paused() {
    torture("zookeeper-server-paused");
}

/// The server restarted from its data dir: sessions and nodes kept, tokens still rising.
#[test]
fn zookeeper_server_restarted() {
    torture("zookeeper-server-restarted");
}

#[test]
fn zookeeper_leader_killed() {
    torture("zookeeper-leader-killed");
}

#[test]
fn zookeeper_holder_killed() {
    torture("zookeeper-holder-killed");
}

/// A holder process paused past the session timeout loses its node to the server, the
/// next holder goes, and the paused holder's fenced write is refused.
#[test]
fn zookeeper_holder_paused() {
    let report = torture("zookeeper-holder-paused");
    assert!(paused_holder_refused(&report) > 0, "{report}");
}

#[test]
fn mariadb_session_killed() {
    torture("mariadb-session-killed");
}

/// The server frozen past the session lease: holders see their sessions lost, no lock
/// call runs past its wait, and locks are served again once it resumes.
#[test]
fn mariadb_server_paused() {
    torture("mariadb-server-paused");
}

#[test]
fn mariadb_server_restarted() {
    torture("mariadb-server-restarted");
}

#[test]
fn mariadb_holder_killed() {
    torture("mariadb-holder-killed");
}

/// A holder process paused past its session lease loses its sessions to the server, the
/// next holder goes, and the paused holder's fenced write is refused.
#[test]
fn mariadb_holder_paused() {
    let report = torture("mariadb-holder-paused");
    assert!(paused_holder_refused(&report) > 0, "{report}");
}

#[test]
fn postgres_backend_terminated() {
    torture("postgres-backend-terminated");
}

/// The server and its backends frozen past the session lease: holders see their sessions
/// lost, no lock call runs past its wait, and locks are served again once it resumes.
#[test]
fn postgres_server_paused() {
    torture("postgres-server-paused");
}

#[test]
fn postgres_server_restarted() {
    torture("postgres-server-restarted");
}

#[test]
fn postgres_holder_killed() {
    torture("postgres-holder-killed");
}

/// A holder process paused past its session lease loses its sessions to the server, its
/// locks come free within lease + 1 s, and its fenced writes are refused once it resumes.
#[test]
fn postgres_holder_paused() {
    let report = torture("postgres-holder-paused");
    assert!(paused_holder_refused(&report) > 0, "{report}");
}

/// The leading candidate killed: a follower takes over once its lease ends, and the
/// fence accepts the leaders' writes in token order.
#[test]
fn election_leader_killed() {
    torture("election-leader-killed");
}

/// The leading candidate paused past its lease: a follower takes over, and the old
/// leader's late write is refused once it resumes.
#[test]
fn election_leader_paused() {
    let report = torture("election-leader-paused");
    assert!(paused_holder_refused(&report) > 0, "{report}");
}

/// The leading candidate killed: a follower takes over once the server expires its
/// session.
#[test]
fn zookeeper_election_leader_killed() {
    torture("zookeeper-election-leader-killed");
}

/// The leading candidate paused past its session timeout: a follower takes over, and the
/// old leader's late write is refused once it resumes.
#[test]
fn zookeeper_election_leader_paused() {
    let report = torture("zookeeper-election-leader-paused");
    assert!(paused_holder_refused(&report) > 0, "{report}");
}

/// Every scenario has its test above.
#[test]
fn every_scenario_is_tested() {
    let out = Command::new(env!("CARGO_BIN_EXE_torture"))
        .arg("--list")
        .output()
        .expect("run the torture binary");
    assert!(out.status.success(), "{out:?}");
    let listed = String::from_utf8(out.stdout).unwrap();
    let tested = [
        "steady",
        "store-paused",
        "store-restarted",
        "holder-killed",
        "holder-paused",
        "connections-cut",
        "pubsub-dropped",
        "cluster-master-killed",
        "sentinel-failover",
        "redlock-paused",
        "zookeeper-server-paused",
        "zookeeper-server-restarted",
        "zookeeper-leader-killed",
        "zookeeper-holder-killed",
        "zookeeper-holder-paused",
        "postgres-backend-terminated",
        "postgres-server-paused",
        "postgres-server-restarted",
        "postgres-holder-killed",
        "postgres-holder-paused",
        "mariadb-session-killed",
        "mariadb-server-paused",
        "mariadb-server-restarted",
        "mariadb-holder-killed",
        "mariadb-holder-paused",
        "election-leader-killed",
        "election-leader-paused",
        "zookeeper-election-leader-killed",
        "zookeeper-election-leader-paused",
    ];
    assert_eq!(listed.lines().collect::<Vec<_>>(), tested);
}

#[test]
fn an_unknown_scenario_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_torture"))
        .args(["--only", "no-such-scenario"])
        .output()
        .expect("run the torture binary");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no scenario is named \"no-such-scenario\""),
        "{err}"
    );
}
