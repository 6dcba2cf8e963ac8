//! The ZooKeeper harness: servers, ensembles and Curator peers behave as documented.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use lock_tests::{
    CuratorLock, CuratorPeer, HarnessError, TestServer, ZooKeeperEnsemble, ZooKeeperServer,
    wait_until,
};

/// Deadline of a Curator run: JVM start, connect, and every iteration.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// Deadline of the container reaper, which runs every 100 ms.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

fn counter_in(peer: &CuratorPeer) -> std::path::PathBuf {
    let counter = peer.dir().join("counter");
    fs::write(&counter, "0").unwrap();
    counter
}

fn read_counter(path: &Path) -> u64 {
    fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

#[test]
fn a_zookeeper_server_serves_on_its_own_port() {
    let started = Instant::now();
    let server = ZooKeeperServer::spawn();
    eprintln!("standalone ZooKeeper serving after {:?}", started.elapsed());

    assert_ne!(server.port(), 2181);
    assert_eq!(
        server.connect_string(),
        format!("127.0.0.1:{}", server.port())
    );
    assert_eq!(server.mode().as_deref(), Some("standalone"));
    assert_eq!(server.four_letter("ruok").unwrap(), "imok");
    let conf = server.four_letter("conf").unwrap();
    assert!(conf.contains("tickTime=500"), "{conf}");
}

#[test]
fn znode_count_follows_creates_and_deletes() {
    let server = ZooKeeperServer::spawn();
    let before = server.znode_count();

    assert_eq!(server.cli(&["create", "/a", "x"]).unwrap(), "Created /a");
    assert_eq!(server.znode_count(), before + 1);
    let err = server.cli(&["create", "/a", "x"]).unwrap_err();
    assert!(
        matches!(err, HarnessError::ProcessFailed { .. })
            && err.to_string().contains("Node already exists"),
        "{err}"
    );
    server.cli(&["delete", "/a"]).unwrap();
    assert_eq!(server.znode_count(), before);
}

#[test]
fn a_zookeeper_restart_keeps_the_port_and_the_znodes() {
    let mut server = ZooKeeperServer::spawn();
    let port = server.port();
    let pid = server.pid().unwrap();
    server.cli(&["create", "/kept", "data"]).unwrap();
    let count = server.znode_count();

    server.kill();
    assert!(!server.is_running());
    let err = server.four_letter("ruok").unwrap_err();
    assert!(
        matches!(err, HarnessError::NotRunning { port: p } if p == port),
        "{err:?}"
    );
    server.kill(); // killing a killed server is a no-op

    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), Some(pid));
    assert_eq!(server.mode().as_deref(), Some("standalone"));
    assert_eq!(server.znode_count(), count);
    assert_eq!(server.cli(&["get", "/kept"]).unwrap(), "data");
}

#[test]
fn a_zookeeper_restart_keeps_the_sessions() {
    let mut server = ZooKeeperServer::spawn();
    let peer = CuratorPeer::compile();
    let counter = counter_in(&peer);
    // Locks until dropped, on one session.
    let _run = peer.spawn(
        1,
        &server.connect_string(),
        "/locks/k",
        CuratorLock::Mutex,
        &counter,
        u32::MAX,
    );
    // Once it has counted, the peer has its session: the server no longer only promised it.
    wait_until(RUN_TIMEOUT, "the peer's first count", || {
        let count = fs::read_to_string(&counter).ok();
        count
            .and_then(|c| c.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    });
    let before = session_ids(&server);
    assert_eq!(before.len(), 1, "{before:?}");

    server.restart();
    // A session the server forgot would be expired, and Curator would open another.
    wait_until(RUN_TIMEOUT, "the peer back on its session", || {
        session_ids(&server) == before
    });
}

/// The session ids of the clients connected now, from `cons`.
fn session_ids(server: &ZooKeeperServer) -> Vec<String> {
    let cons = server.four_letter("cons").unwrap();
    cons.split("sid=")
        .skip(1)
        .filter_map(|rest| rest.split([',', ')']).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_paused_zookeeper_answers_nothing_until_resumed() {
    let server = ZooKeeperServer::spawn();
    server.pause();
    assert!(server.is_running());
    assert_eq!(server.mode(), None);
    let err = server.four_letter("ruok").unwrap_err();
    assert!(err.is_timeout(), "{err:?}");

    server.resume();
    assert_eq!(server.four_letter("ruok").unwrap(), "imok");
    assert_eq!(server.mode().as_deref(), Some("standalone"));
}

#[test]
fn curator_mutex_processes_lose_no_update_and_leave_nothing_behind() {
    let server = ZooKeeperServer::spawn();
    let before = server.znode_count();
    let peer = CuratorPeer::compile();
    let counter = counter_in(&peer);

    let run = peer.spawn(
        3,
        &server.connect_string(),
        "/locks/counter",
        CuratorLock::Mutex,
        &counter,
        50,
    );
    run.wait(RUN_TIMEOUT).unwrap();
    assert_eq!(read_counter(&counter), 150);

    // `/locks` and `/locks/counter` are containers: the reaper deletes them once empty.
    wait_until(REAP_TIMEOUT, "the empty lock containers to go", || {
        server.znode_count() == before
    });
}

#[test]
fn curator_readers_see_no_write_under_their_lock() {
    let server = ZooKeeperServer::spawn();
    let peer = CuratorPeer::compile();
    let counter = counter_in(&peer);
    let connect = server.connect_string();

    let writers = peer.spawn(2, &connect, "/rw", CuratorLock::Write, &counter, 30);
    let readers = peer.spawn(2, &connect, "/rw", CuratorLock::Read, &counter, 30);
    writers.wait(RUN_TIMEOUT).unwrap();
    readers.wait(RUN_TIMEOUT).unwrap();
    assert_eq!(read_counter(&counter), 60);
}

#[test]
fn curator_leader_selectors_lead_one_at_a_time_and_name_their_leader() {
    let server = ZooKeeperServer::spawn();
    let peer = CuratorPeer::compile();
    let counter = counter_in(&peer);
    let connect = server.connect_string();
    let path = "/locks/elected";

    let selector = CuratorLock::LeaderSelector;
    let run = peer.spawn(3, &connect, path, selector, &counter, 30);
    run.wait(RUN_TIMEOUT).unwrap();
    assert_eq!(read_counter(&counter), 90);

    let announce = peer.dir().join("leading");
    let leading = peer.lead(&connect, path, &announce);
    wait_until(RUN_TIMEOUT, "the participant to lead", || announce.exists());
    let id = fs::read_to_string(&announce).unwrap();
    assert!(id.starts_with("curator-"), "{id}");
    assert_eq!(peer.leader(&connect, path).unwrap(), id);
    fs::remove_file(&announce).unwrap();
    leading.wait(RUN_TIMEOUT).unwrap();
    assert_eq!(peer.leader(&connect, path).unwrap(), "", "nobody leads");
}

#[test]
fn a_failing_peer_reports_its_exit_and_stack_trace() {
    let server = ZooKeeperServer::spawn();
    let peer = CuratorPeer::compile();
    let missing = peer.dir().join("no-such-counter");

    let run = peer.spawn(
        1,
        &server.connect_string(),
        "/locks/k",
        CuratorLock::Mutex,
        &missing,
        1,
    );
    let err = run.wait(RUN_TIMEOUT).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("Curator peer 1 of 1 (mutex on /locks/k) failed (exit status: 1)"),
        "{message}"
    );
    assert!(message.contains("NoSuchFileException"), "{message}");
}

#[test]
fn a_peer_still_running_at_the_deadline_is_killed_and_reported() {
    let peer = CuratorPeer::compile();
    let counter = counter_in(&peer);

    // Nothing listens on port 1: the peer retries its connection for seconds.
    let run = peer.spawn(
        1,
        "127.0.0.1:1",
        "/locks/k",
        CuratorLock::Mutex,
        &counter,
        1,
    );
    let err = run.wait(Duration::from_millis(500)).unwrap_err();
    assert!(
        matches!(err, HarnessError::ProcessFailed { status: None, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("Curator peer 1 of 1 (mutex on /locks/k) did not finish in time"),
        "{err}"
    );
}

#[test]
fn an_ensemble_elects_a_new_leader_when_its_leader_dies() {
    let started = Instant::now();
    let mut ensemble = ZooKeeperEnsemble::spawn();
    eprintln!("ZooKeeper ensemble serving after {:?}", started.elapsed());

    let ports: Vec<String> = ensemble
        .nodes()
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.port()))
        .collect();
    assert_eq!(ensemble.connect_string(), ports.join(","));
    let old = ensemble.leader();
    let mut modes: Vec<String> = ensemble
        .nodes()
        .iter()
        .map(|node| node.mode().unwrap())
        .collect();
    modes.sort();
    assert_eq!(modes, ["follower", "follower", "leader"]);
    let follower = (old + 1) % 3;
    ensemble.nodes()[follower]
        .cli(&["create", "/replicated", "x"])
        .unwrap();

    ensemble.kill(old);
    ensemble.wait_quorum();
    let new = ensemble.leader();
    assert_ne!(new, old);
    assert_eq!(
        ensemble.nodes()[new].cli(&["get", "/replicated"]).unwrap(),
        "x"
    );

    ensemble.restart(old);
    ensemble.wait_quorum();
    assert_eq!(ensemble.nodes()[old].mode().as_deref(), Some("follower"));
    assert_eq!(ensemble.leader(), new);
}

#[test]
fn a_paused_leader_is_replaced_and_follows_once_resumed() {
    let ensemble = ZooKeeperEnsemble::spawn();
    let old = ensemble.leader();

    ensemble.pause(old);
    ensemble.wait_quorum(); // the other two, once they gave up on it
    let new = ensemble.leader();
    assert_ne!(new, old);

    ensemble.resume(old);
    ensemble.wait_quorum();
    assert_eq!(ensemble.nodes()[old].mode().as_deref(), Some("follower"));
}
