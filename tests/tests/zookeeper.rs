//! The ZooKeeper store against what only ZooKeeper has: Curator clients sharing its locks,
//! sessions that outlive a cut connection or end with a paused server, containers the
//! server reaps. What every store does is the conformance suite's.

use std::fs;
use std::future::ready;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::ZooKeeperStore;
use lock_core::{LockKind, LockOptions, Locker};
use lock_tests::{
    CuratorLock, CuratorPeer, TcpProxy, TestServer, ZooKeeperEnsemble, ZooKeeperServer, eventually,
    wait_until,
};
use tokio::time::{Instant, sleep, timeout};

/// A session timeout short enough for a test to outlast.
const SESSION: Duration = Duration::from_secs(2);
/// Deadline of a Curator run: JVM start, connect, and every iteration.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
const ITERATIONS: u32 = 40;
/// How long the container reaper may take to delete 15,000 containers.
const REAPED: Duration = Duration::from_secs(180);
/// Bounds each wait for an acquirer to start waiting, or for work to get under way.
const PATIENCE: Duration = Duration::from_secs(10);

async fn locker(connect: &str, session_timeout: Duration) -> Locker {
    let store = ZooKeeperStore::builder(connect)
        .session_timeout(session_timeout)
        .build()
        .await
        .expect("connect to the test zookeeper server");
    Locker::builder()
        .store(Arc::new(store))
        .build()
        .await
        .unwrap()
}

/// Waits until `locker.inspect(key)` counts `n` acquirers waiting for `key`.
async fn until_waiting(locker: &Locker, key: &str, n: usize) {
    eventually(PATIENCE, &format!("{n} waiting for {key}"), || {
        let (locker, key) = (locker.clone(), key.to_owned());
        async move {
            let info = locker.inspect(&key).await.ok().flatten();
            info.and_then(|info| info.waiting) == Some(n)
        }
    })
    .await;
}

fn read_counter(path: &Path) -> u64 {
    fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

/// Takes the lock `key` as `kind` `ITERATIONS` times, as the Curator peers do theirs: a
/// writer adds 1 to the counter file; a reader checks that it does not change under it.
async fn count_under(locker: Locker, key: &str, kind: LockKind, counter: &Path) {
    let wait = LockOptions::new().kind(kind).wait(Duration::from_secs(60));
    for _ in 0..ITERATIONS {
        let guard = locker.lock_with(key, wait).await.unwrap();
        let value = read_counter(counter);
        sleep(Duration::from_millis(1)).await;
        if kind == LockKind::Read {
            assert_eq!(read_counter(counter), value, "written under a read lock");
        } else {
            fs::write(counter, (value + 1).to_string()).unwrap();
        }
        guard.release().await.unwrap();
    }
}

/// Curator processes and lock-core `Locker`s (each a session of its own) add to one
/// counter under one lock, `/locks/shared` (readers check that it does not change under
/// them): none is lost, so no two writers ever held it at once.
async fn curator_shares(curator: CuratorLock, ours: LockKind) {
    let server = ZooKeeperServer::spawn();
    let peer = CuratorPeer::compile();
    let counter = peer.dir().join("counter");
    fs::write(&counter, "0").unwrap();
    let connect = server.connect_string();
    let run = peer.spawn(3, &connect, "/locks/shared", curator, &counter, ITERATIONS);
    let mut ours_tasks = Vec::new();
    for _ in 0..3 {
        let locker = locker(&connect, Duration::from_secs(10)).await;
        let counter = counter.clone();
        ours_tasks.push(tokio::spawn(async move {
            count_under(locker, "shared", ours, &counter).await;
        }));
    }
    for task in ours_tasks {
        task.await.unwrap();
    }
    tokio::task::spawn_blocking(move || run.wait(RUN_TIMEOUT))
        .await
        .unwrap()
        .expect("the Curator peers failed");
    let writers = 3 * (u64::from(curator != CuratorLock::Read) + u64::from(ours != LockKind::Read));
    let updates = writers * u64::from(ITERATIONS);
    assert_eq!(read_counter(&counter), updates, "an update was lost");
}

#[tokio::test(flavor = "multi_thread")]
async fn curator_mutexes_and_ours_exclude_each_other() {
    curator_shares(CuratorLock::Mutex, LockKind::Exclusive).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn curator_write_locks_and_ours_exclude_each_other() {
    curator_shares(CuratorLock::Write, LockKind::Write).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn curator_read_locks_and_our_write_locks_exclude_each_other() {
    curator_shares(CuratorLock::Read, LockKind::Write).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn curator_write_locks_and_our_read_locks_exclude_each_other() {
    curator_shares(CuratorLock::Write, LockKind::Read).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn curator_semaphores_and_ours_exclude_each_other() {
    let one = CuratorLock::Semaphore { permits: 1 };
    curator_shares(one, LockKind::Semaphore { permits: 1 }).await;
}

/// A semaphore of 1 that one of ours holds, a Curator acquirer waiting for it (holding
/// the mutex on `{path}/locks`, its lease made), and one of ours asking after it: once
/// the permit is given back, the Curator acquirer takes it, then ours, each well before
/// our wait's deadline. Neither waits for the other: ours queues at the mutex behind the
/// Curator acquirer, as Curator's own would.
#[tokio::test(flavor = "multi_thread")]
async fn a_curator_acquirer_and_ours_wait_for_a_permit_in_turn() {
    const WAIT: Duration = Duration::from_secs(30);
    let server = ZooKeeperServer::spawn();
    let peer = CuratorPeer::compile();
    let counter = peer.dir().join("counter");
    fs::write(&counter, "0").unwrap();
    let connect = server.connect_string();
    let (holder, asking) = (
        locker(&connect, SESSION).await,
        locker(&connect, SESSION).await,
    );
    let permit = holder.semaphore("turns", 1).acquire().await.unwrap();
    let one = CuratorLock::Semaphore { permits: 1 };
    let run = peer.spawn(1, &connect, "/locks/turns", one, &counter, 1);
    let server = Arc::new(server);
    tokio::task::spawn_blocking({
        let server = server.clone();
        move || {
            wait_until(RUN_TIMEOUT, "the Curator acquirer's lease", || {
                let leases = server.cli(&["ls", "/locks/turns/leases"]);
                leases.is_ok_and(|leases| leases.matches("-lease-").count() == 2)
            });
        }
    })
    .await
    .unwrap();
    let ours = tokio::spawn(async move {
        let wait = LockOptions::new().wait(WAIT);
        asking.semaphore("turns", 1).acquire_with(wait).await
    });
    until_waiting(&holder, "turns", 2).await;
    let (released, first_token) = (Instant::now(), permit.fencing_token());
    permit.release().await.unwrap();
    let curator = tokio::task::spawn_blocking(move || run.wait(WAIT / 2));
    curator
        .await
        .unwrap()
        .expect("the Curator acquirer did not get the permit in time");
    assert_eq!(read_counter(&counter), 1);
    let next = timeout(WAIT / 2, ours)
        .await
        .expect("ours did not get the permit in time")
        .unwrap()
        .unwrap();
    eprintln!("both in {:?} after the release", released.elapsed());
    assert!(next.fencing_token() > first_token);
    next.release().await.unwrap();
}

/// How many times each candidate leads in the race of Curator's and our candidates.
const LEADERSHIPS: u32 = 50;

/// Campaigns as `id` in the election `name` `LEADERSHIPS` times, as the Curator
/// participants do: each time it leads, `leader()` names it, and it adds 1 to the counter
/// file before it resigns.
async fn lead_under(locker: Locker, name: &str, id: String, counter: &Path) {
    let election = locker.election(name);
    let wait = LockOptions::new().wait(Duration::from_secs(60));
    for _ in 0..LEADERSHIPS {
        let leadership = election.campaign_with(&*id, wait).await.unwrap();
        let leader = election.leader().await.unwrap().expect("someone leads");
        assert_eq!(leader.id, id, "another is named while {id} leads");
        assert_eq!(leader.fencing_token, Some(leadership.fencing_token()));
        let value = read_counter(counter);
        sleep(Duration::from_millis(1)).await;
        fs::write(counter, (value + 1).to_string()).unwrap();
        leadership.resign().await.unwrap();
    }
}

/// Curator `LeaderSelector` participants and our candidates (each a session of its own)
/// campaign in one election, `/locks/elected`, and each leader adds 1 to one counter: none
/// is lost over the 300 leaderships, so no two ever led at once, and each side's leader
/// was the first node by the other side's reckoning too (each checks that its own
/// `leader()`, or `getLeader()`, names it).
#[tokio::test(flavor = "multi_thread")]
async fn curator_leader_selectors_and_our_election_elect_one_leader_at_a_time() {
    let server = ZooKeeperServer::spawn();
    let peer = CuratorPeer::compile();
    let counter = peer.dir().join("counter");
    fs::write(&counter, "0").unwrap();
    let connect = server.connect_string();
    let (path, selector) = ("/locks/elected", CuratorLock::LeaderSelector);
    let run = peer.spawn(3, &connect, path, selector, &counter, LEADERSHIPS);
    // Ours join once Curator's lead, lest they be done before the JVMs are up.
    // (A leader may be writing it: anything but the "0" it began with will do.)
    let started = counter.clone();
    eventually(RUN_TIMEOUT, "a Curator participant to lead", move || {
        ready(fs::read_to_string(&started).is_ok_and(|count| count != "0"))
    })
    .await;
    let mut ours = Vec::new();
    for i in 0..3 {
        let locker = locker(&connect, Duration::from_secs(10)).await;
        let counter = counter.clone();
        ours.push(tokio::spawn(async move {
            lead_under(locker, "elected", format!("ours-{i}"), &counter).await;
        }));
    }
    for candidate in ours {
        candidate.await.unwrap();
    }
    tokio::task::spawn_blocking(move || run.wait(RUN_TIMEOUT))
        .await
        .unwrap()
        .expect("the Curator participants failed");
    let leaderships = 6 * u64::from(LEADERSHIPS);
    assert_eq!(read_counter(&counter), leaderships, "two led at once");
}

/// While our candidate leads, Curator's `getLeader()` names it; a Curator participant
/// queued behind it leads once it resigns, with a greater fencing token, and our
/// `leader()` names that participant by its id.
#[tokio::test(flavor = "multi_thread")]
async fn curator_and_our_election_name_each_others_leader() {
    let server = ZooKeeperServer::spawn();
    let peer = CuratorPeer::compile();
    let connect = server.connect_string();
    let (ours, follower) = (
        locker(&connect, SESSION).await,
        locker(&connect, SESSION).await,
    );
    let leadership = ours.election("named").campaign("ours").await.unwrap();
    let named = tokio::task::block_in_place(|| peer.leader(&connect, "/locks/named"));
    assert_eq!(
        named.unwrap(),
        "ours",
        "Curator's getLeader(), ours leading"
    );

    let announce = peer.dir().join("leading");
    let run = peer.lead(&connect, "/locks/named", &announce);
    eventually(RUN_TIMEOUT, "the Curator participant to campaign", || {
        let follower = follower.clone();
        async move {
            let info = follower.inspect("named").await.ok().flatten();
            info.and_then(|info| info.waiting) == Some(1)
        }
    })
    .await;
    let ours_token = leadership.fencing_token();
    leadership.resign().await.unwrap();
    let announced = announce.clone();
    eventually(PATIENCE, "the Curator participant to lead", move || {
        ready(announced.exists())
    })
    .await;
    let curator = fs::read_to_string(&announce).unwrap();
    let leader = follower.election("named").leader().await.unwrap();
    let leader = leader.expect("the Curator participant leads");
    assert_eq!(leader.id, curator);
    assert!(leader.fencing_token.expect("the leader's fencing token") > ours_token);

    fs::remove_file(&announce).unwrap();
    tokio::task::spawn_blocking(move || run.wait(RUN_TIMEOUT))
        .await
        .unwrap()
        .expect("the Curator participant failed");
    assert_eq!(follower.election("named").leader().await.unwrap(), None);
}

/// A chroot in the connect string that does not exist yet is created, as Curator creates
/// its namespace, and the locks live under it.
#[tokio::test(flavor = "multi_thread")]
async fn a_chroot_is_created_and_holds_the_locks() {
    let server = ZooKeeperServer::spawn();
    let locker = locker(&format!("{}/app/one", server.connect_string()), SESSION).await;
    let guard = locker.lock("a/b").await.unwrap();
    let listed = server.cli(&["ls", "/app/one/locks/a%2Fb"]).unwrap();
    assert!(listed.contains("-lock-"), "{listed}");
    guard.release().await.unwrap();
}

/// A base path whose parent only a `digest` user may write to: a store without the
/// credentials cannot lock there, one with them can.
#[tokio::test(flavor = "multi_thread")]
async fn a_digest_user_locks_where_its_acl_allows() {
    // base64(sha1("billing:s3cret")), as ZooKeeper's DigestAuthenticationProvider stores it
    const DIGEST: &str = "huqOekxEaTIxelU/Ym4wPlZrjpU=";
    let server = ZooKeeperServer::spawn();
    let acl = format!("digest:billing:{DIGEST}:cdrwa");
    server.cli(&["create", "/billing", "", &acl]).unwrap();
    let store = |auth: Option<&str>| {
        let builder = ZooKeeperStore::builder(&server.connect_string()).base_path("/billing/locks");
        let builder = match auth {
            Some(password) => builder.digest_auth("billing", password),
            None => builder,
        };
        async move {
            let store = builder.build().await.unwrap();
            Locker::builder()
                .store(Arc::new(store))
                .build()
                .await
                .unwrap()
        }
    };
    for refused in [store(None).await, store(Some("guess")).await] {
        let err = refused.lock("job").await.unwrap_err();
        let cause = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("not authorized"), "{err}");
    }
    let guard = store(Some("s3cret")).await.lock("job").await.unwrap();
    guard.release().await.unwrap();
}

/// A semaphore forced open loses its permits' holders, and its waiter, which keeps its
/// lease, takes the freed permit.
#[tokio::test(flavor = "multi_thread")]
async fn a_semaphore_forced_open_lets_its_waiter_in() {
    let server = ZooKeeperServer::spawn();
    let (holder, waiting) = (
        locker(&server.connect_string(), SESSION).await,
        locker(&server.connect_string(), SESSION).await,
    );
    let permit = holder.semaphore("pool", 1).acquire().await.unwrap();
    let waiter = tokio::spawn(async move {
        let wait = LockOptions::new().wait(Duration::from_secs(20));
        waiting.semaphore("pool", 1).acquire_with(wait).await
    });
    until_waiting(&holder, "pool", 1).await;
    let info = holder
        .inspect("pool")
        .await
        .unwrap()
        .expect("a permit is out");
    assert_eq!((info.holders.len(), info.waiting), (1, Some(1)), "{info:?}");
    assert!(holder.force_unlock("pool").await.unwrap());
    timeout(Duration::from_secs(2), permit.lost())
        .await
        .expect("the holder never learnt of it");
    let next = timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter was not let in")
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > permit.fencing_token());
    next.release().await.unwrap();
}

/// A server paused past the session timeout: the client declares the session lost
/// itself, every hold on it reports `lost()`, and once the server is back the same
/// `Locker` opens a new session and locks again, with a larger fencing token; a waiter
/// whose session was lost while it waited asks again on a new one, and gets the lock.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_paused_past_the_session_timeout_loses_every_hold() {
    let server = ZooKeeperServer::spawn();
    let (locker, other) = (
        locker(&server.connect_string(), SESSION).await,
        locker(&server.connect_string(), SESSION).await,
    );
    let guard = locker.lock("paused").await.unwrap();
    let read = locker.read("paused:shared").await.unwrap();
    let waiter = tokio::spawn(async move {
        let wait = LockOptions::new().wait(Duration::from_secs(30));
        other.lock_with("paused", wait).await
    });
    until_waiting(&locker, "paused", 1).await;
    server.pause();
    let paused = Instant::now();
    timeout(2 * SESSION + Duration::from_secs(1), guard.lost())
        .await
        .expect("the hold outlived its session");
    timeout(Duration::from_secs(1), read.lost())
        .await
        .expect("the read outlived its session");
    eprintln!("lost {:?} after the pause", paused.elapsed());
    server.resume();
    let waited = waiter
        .await
        .unwrap()
        .expect("the waiter whose session was lost got the lock");
    let waited_token = waited.fencing_token();
    assert!(waited_token > guard.fencing_token());
    waited.release().await.unwrap();
    let next = locker
        .lock_with("paused", LockOptions::new().wait(Duration::from_secs(20)))
        .await
        .expect("a Locker whose session was lost locks again");
    assert!(next.fencing_token() > waited_token);
    next.release().await.unwrap();
}

/// On a 3-node ensemble, the leader is killed while locks are held and asked for: work
/// goes on after the election, no two holders ever overlap (a lost-update counter), and
/// each lock's fencing tokens keep rising.
#[tokio::test(flavor = "multi_thread")]
async fn work_goes_on_when_the_leader_is_killed() {
    const WORKERS: usize = 4;
    const KEYS: usize = 2;
    let mut ensemble = ZooKeeperEnsemble::spawn();
    let connect = ensemble.connect_string();
    let counters: Arc<Vec<std::sync::Mutex<(u64, u64)>>> =
        Arc::new((0..KEYS).map(|_| std::sync::Mutex::default()).collect());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for i in 0..WORKERS {
        let locker = locker(&connect, Duration::from_secs(10)).await;
        let (counters, stop) = (counters.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut done = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let key = (i + done as usize) % KEYS;
                let wait = LockOptions::new().wait(Duration::from_secs(30));
                let guard = locker
                    .lock_with(&format!("work:{key}"), wait)
                    .await
                    .unwrap();
                let (value, token) = *counters[key].lock().unwrap();
                assert!(
                    guard.fencing_token() > token,
                    "a fencing token did not rise"
                );
                sleep(Duration::from_millis(2)).await;
                *counters[key].lock().unwrap() = (value + 1, guard.fencing_token());
                guard.release().await.unwrap();
                done += 1;
            }
            done
        }));
    }
    let total = |counters: &[std::sync::Mutex<(u64, u64)>]| -> u64 {
        counters.iter().map(|c| c.lock().unwrap().0).sum()
    };
    eventually(PATIENCE, "work under way before the kill", || {
        let counters = counters.clone();
        async move { total(&counters) >= 50 }
    })
    .await;
    let before = total(&counters);
    let leader = ensemble.leader();
    ensemble.kill(leader);
    eprintln!("killed node {leader} after {before} updates");
    let moving = Instant::now();
    while total(&counters) < before + 50 {
        assert!(
            moving.elapsed() < Duration::from_secs(30),
            "work stopped after the election"
        );
        sleep(Duration::from_millis(50)).await;
    }
    eprintln!("50 more updates {:?} after the kill", moving.elapsed());
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut done = 0;
    for worker in workers {
        done += worker.await.unwrap();
    }
    assert_eq!(total(&counters), done, "an update was lost");
}

/// A connection cut and opened again within the session timeout loses nothing: the hold
/// stays its owner's, another `Locker` still cannot take it, and a waiter on the cut
/// connection is still woken by its watch, which the server set again on the reconnect.
#[tokio::test(flavor = "multi_thread")]
async fn a_cut_shorter_than_the_session_timeout_loses_nothing() {
    let server = ZooKeeperServer::spawn();
    let proxy = TcpProxy::start(server.addr()).unwrap();
    let through_proxy = locker(&proxy.addr().to_string(), SESSION).await;
    let other = locker(&server.connect_string(), SESSION).await;
    let guard = through_proxy.lock("cut").await.unwrap();
    let blocking = other.lock("cut:waited").await.unwrap();
    let waiter = tokio::spawn({
        let through_proxy = through_proxy.clone();
        async move {
            let wait = LockOptions::new().wait(Duration::from_secs(20));
            through_proxy.lock_with("cut:waited", wait).await
        }
    });
    until_waiting(&other, "cut:waited", 1).await;
    assert!(proxy.cut() >= 1, "no connection to cut");
    assert!(guard.is_held().await.unwrap(), "held while reconnecting");
    sleep(SESSION * 2).await;
    assert!(!guard.is_lost(), "a short cut lost the hold");
    assert!(guard.is_held().await.unwrap());
    assert!(other.try_lock("cut").await.unwrap().is_none());
    guard.release().await.unwrap();
    assert!(other.try_lock("cut").await.unwrap().is_some());

    assert!(!waiter.is_finished(), "the waiter got a held lock");
    blocking.release().await.unwrap();
    let woken = timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter's watch did not survive the cut")
        .unwrap()
        .unwrap();
    woken.release().await.unwrap();
}

/// 10,000 distinct keys locked and released, by 8 tasks at once and every kind in turn,
/// leave nothing behind: the server reaps the empty containers, and the znode count
/// comes back to where it began. (The reaper deletes at most 10,000 containers a minute,
/// ZooKeeper's default, and a semaphore leaves three: its lock's, its leases' and its
/// mutex's.)
#[tokio::test(flavor = "multi_thread")]
async fn released_locks_leave_no_node_behind() {
    const KEYS: usize = 10_000;
    const TASKS: usize = 8;
    let server = Arc::new(ZooKeeperServer::spawn());
    let locker = locker(&server.connect_string(), SESSION).await;
    let before = server.znode_count();
    let kinds = [
        LockKind::Exclusive,
        LockKind::Read,
        LockKind::Write,
        LockKind::Semaphore { permits: 2 },
    ];
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let locker = locker.clone();
            tokio::spawn(async move {
                for i in (task..KEYS).step_by(TASKS) {
                    let kind = LockOptions::new().kind(kinds[i % kinds.len()]);
                    let guard = locker.lock_with(&format!("key/{i}"), kind).await.unwrap();
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let released = Instant::now();
    tokio::task::spawn_blocking(move || {
        wait_until(REAPED, "the containers to be reaped", || {
            server.znode_count() == before
        })
    })
    .await
    .unwrap();
    eprintln!("reaped {:?} after the last release", released.elapsed());
}

/// How far past its deadline a lock call may return.
const LATE: Duration = Duration::from_millis(250);

/// Asks for `key` on `locker`, waiting `wait`: the call must not have taken it (the
/// server does not answer), and must return by the deadline, give or take `LATE`.
async fn gives_up_by_its_deadline(locker: &Locker, key: &str, wait: Duration) -> Duration {
    let asked = Instant::now();
    let answer = timeout(
        wait + PATIENCE,
        locker.lock_with(key, LockOptions::new().wait(wait)),
    )
    .await
    .unwrap_or_else(|_| panic!("the lock call on {key} never returned"));
    let took = asked.elapsed();
    let err = answer.expect_err("a lock taken from a server that does not answer");
    assert!(
        err.is_timeout() || err.is_backend(),
        "{key}: neither a timeout nor a backend error: {err}"
    );
    assert!(
        took <= wait + LATE,
        "{key}: returned {took:?} after a wait of {wait:?}"
    );
    took
}

/// With the server paused for longer than the wait, a lock call on a held key and one on
/// a free key each return by their deadline, rather than once the client gives the
/// session up; so do they with the server killed, and once it is back the lock is taken.
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_call_returns_by_its_deadline_whatever_the_server_does() {
    const WAIT: Duration = Duration::from_secs(1);
    let mut server = ZooKeeperServer::spawn();
    let (holder, asking) = (
        locker(&server.connect_string(), SESSION).await,
        locker(&server.connect_string(), SESSION).await,
    );
    let held = holder.lock("deadline:held").await.unwrap();
    server.pause();
    let paused = Instant::now();
    let (on_held, on_free) = tokio::join!(
        gives_up_by_its_deadline(&asking, "deadline:held", WAIT),
        gives_up_by_its_deadline(&asking, "deadline:free", WAIT),
    );
    eprintln!("paused: held key {on_held:?}, free key {on_free:?}");
    assert!(
        paused.elapsed() < SESSION + WAIT,
        "the server was resumed too late to matter"
    );
    server.resume();
    drop(held);

    server.kill();
    let took = gives_up_by_its_deadline(&asking, "deadline:killed", WAIT).await;
    eprintln!("killed: {took:?}");
    server.restart();
    let wait = LockOptions::new().wait(Duration::from_secs(20));
    let guard = asking.lock_with("deadline:killed", wait).await.unwrap();
    guard.release().await.unwrap();
}

/// A take that the server completes after its call gave up is undone: with the server
/// paused for less than the session timeout, the call returns at its deadline, and once
/// the server is back the node its create made is deleted, so another takes the lock.
#[tokio::test(flavor = "multi_thread")]
async fn a_take_completed_after_its_call_gave_up_is_undone() {
    const LONG_SESSION: Duration = Duration::from_secs(6);
    let server = ZooKeeperServer::spawn();
    let (asking, other) = (
        locker(&server.connect_string(), LONG_SESSION).await,
        locker(&server.connect_string(), LONG_SESSION).await,
    );
    server.pause();
    gives_up_by_its_deadline(&asking, "late", Duration::from_millis(300)).await;
    server.resume();
    eventually(PATIENCE, "the late node to be deleted", || {
        let other = other.clone();
        async move { other.try_lock("late").await.ok().flatten().is_some() }
    })
    .await;
    let listed = server.cli(&["ls", "/locks/late"]).unwrap_or_default();
    assert!(listed.matches("-lock-").count() <= 1, "{listed}");
}

/// With the server paused, a hold is not claimed once the session was not heard from
/// for its timeout: `lost()` fires and `is_held()` answers false by then, before the
/// server is resumed (when the client itself would give the session up only at 7/5 of
/// the timeout).
#[tokio::test(flavor = "multi_thread")]
async fn a_hold_is_not_claimed_past_the_session_timeout() {
    let slack = Duration::from_millis(400);
    let server = ZooKeeperServer::spawn();
    let locker = locker(&server.connect_string(), SESSION).await;
    let guard = locker.lock("unheard").await.unwrap();
    server.pause();
    let paused = Instant::now();
    timeout(SESSION + slack, guard.lost())
        .await
        .expect("the hold outlived its session timeout");
    let lost = paused.elapsed();
    let held = timeout(slack, guard.is_held())
        .await
        .expect("is_held did not answer");
    assert!(!held.unwrap(), "held past the session timeout");
    eprintln!("lost {lost:?} after the pause");
    server.resume();
}

/// A process paused past the session timeout (its clock jumps) claims no hold once it
/// runs again: `is_held()` answers false at once and `lost()` fires, though the server,
/// which kept hearing from the client library's own pings, may keep the session.
#[tokio::test(flavor = "current_thread")]
async fn a_process_paused_past_the_session_timeout_claims_no_hold() {
    let server = ZooKeeperServer::spawn();
    let locker = locker(&server.connect_string(), SESSION).await;
    let guard = locker.lock("asleep").await.unwrap();
    assert!(guard.is_held().await.unwrap());
    tokio::time::pause();
    tokio::time::advance(SESSION + Duration::from_millis(500)).await;
    tokio::time::resume();
    assert!(!guard.is_held().await.unwrap(), "held after the pause");
    timeout(Duration::from_millis(500), guard.lost())
        .await
        .expect("the pause went unnoticed");
    let next = locker
        .lock_with("asleep", LockOptions::new().wait(Duration::from_secs(20)))
        .await
        .expect("locks again on a new session");
    assert!(next.is_held().await.unwrap());
    next.release().await.unwrap();
}

/// On a 3-node ensemble, two `Locker`s pass one lock back and forth while the leader is
/// killed: grants resume within a few seconds of the new leader's election, and no
/// release answers that the hold was not its owner's unless the hold was lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_passed_back_and_forth_survives_a_lost_leader() {
    const LONG_SESSION: Duration = Duration::from_secs(8);
    const RESUMED: Duration = Duration::from_secs(6);
    let mut ensemble = ZooKeeperEnsemble::spawn();
    let connect = ensemble.connect_string();
    let grants = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut relays = Vec::new();
    for _ in 0..2 {
        let locker = locker(&connect, LONG_SESSION).await;
        let (grants, stop) = (grants.clone(), stop.clone());
        relays.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let wait = LockOptions::new().wait(Duration::from_secs(30));
                let Ok(guard) = locker.lock_with("relay", wait).await else {
                    continue;
                };
                grants.lock().unwrap().push(Instant::now());
                let lost = guard.lost();
                sleep(Duration::from_millis(5)).await;
                let released = guard.release().await;
                if let Err(lock_core::LockError::NotHeld { .. }) = released {
                    timeout(Duration::from_secs(1), lost)
                        .await
                        .expect("a release answered not held for a hold never lost");
                }
            }
        }));
    }
    let count = |grants: &std::sync::Mutex<Vec<Instant>>| grants.lock().unwrap().len();
    eventually(PATIENCE, "the lock passed around before the kill", || {
        let grants = grants.clone();
        async move { count(&grants) >= 50 }
    })
    .await;
    let leader = ensemble.leader();
    ensemble.kill(leader);
    let killed = Instant::now();
    let ensemble = tokio::task::spawn_blocking(move || {
        ensemble.wait_quorum();
        ensemble
    })
    .await
    .unwrap();
    let elected = Instant::now();
    eprintln!("new leader {:?} after the kill", elected - killed);
    let resumed = timeout(RESUMED, async {
        loop {
            let after = grants
                .lock()
                .unwrap()
                .iter()
                .filter(|g| **g > elected)
                .count();
            if after >= 10 {
                return;
            }
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let last_before = grants
        .lock()
        .unwrap()
        .iter()
        .rfind(|g| **g <= killed)
        .copied();
    let first_after = grants
        .lock()
        .unwrap()
        .iter()
        .find(|g| **g > killed)
        .copied();
    eprintln!(
        "grants stopped for {:?}",
        first_after.zip(last_before).map(|(a, b)| a - b)
    );
    resumed.expect("grants did not resume after the election");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for relay in relays {
        timeout(Duration::from_secs(40), relay)
            .await
            .expect("a relay did not stop")
            .unwrap();
    }
    drop(ensemble);
}

/// A `Locker` on `connect` whose sessions time out after [`SESSION`].
async fn timed_out(connect: String) -> Locker {
    locker(&connect, SESSION).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_by_their_deadline_while_the_network_is_silent() {
    let server = ZooKeeperServer::spawn();
    let proxy = TcpProxy::start(server.addr()).unwrap();
    let connect = proxy.addr().to_string();
    lock_tests::calls_end_by_their_deadline_while_the_server_is_silent(
        || async { Ok(timed_out(connect.clone()).await) },
        || proxy.stall(),
        || proxy.resume(),
    )
    .await;
}
