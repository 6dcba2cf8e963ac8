//! The MySQL store, on MariaDB, against what the conformance suite cannot show: the
//! `mariadb` command-line client sharing a lock under DistributedLock's name, sessions
//! ended by `KILL` or a server restart (fencing tokens kept), permits coming back from a
//! killed session and counted with a foreign client's, calls that end by their deadline
//! while the server is silent, a fenced counter that loses no update while holders are
//! killed, and a fence table of an earlier version gaining the holder's columns.

#[path = "common/fence_table.rs"]
mod fence_table;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::backend::mysql::NameMapping;
use lock_core::{LockOptions, Locker};
use lock_tests::{MariaDbServer, TcpProxy, TestServer};
use mysql_async::prelude::Queryable;
use tokio::time::{Instant, timeout};

/// Bounds each wait for something that should happen at once.
const PATIENCE: Duration = Duration::from_secs(5);

/// DistributedLock's published vectors: a name, and the `GET_LOCK` name it maps to; and a
/// lowercase name, used as it is.
fn published() -> [(String, String); 3] {
    [
        ("ABC".into(), "abczj4qr6tvn4a3kmgq4bukhowqyfrlxsb3".into()),
        (
            "x".repeat(65),
            format!("{}gkd2zq6c6ey6mhs45clqg7vij6ycgo43", "x".repeat(32)),
        ),
        ("orders".into(), "orders".into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_holding_the_mapped_name_makes_us_wait_and_the_other_way_round() {
    let server = Arc::new(MariaDbServer::spawn());
    let locker = Locker::mysql(&server.url()).await.unwrap();
    for (name, mapped) in published() {
        assert_eq!(
            NameMapping::DistributedLock.lock_name(&name).unwrap(),
            mapped
        );
        // The client takes the mapped name, lets it go after a second, and stays on.
        let cli = {
            let (server, mapped) = (server.clone(), mapped.clone());
            std::thread::spawn(move || {
                server.sql(&format!(
                    "SELECT GET_LOCK('{mapped}', 0); SELECT SLEEP(1); \
                     SELECT RELEASE_LOCK('{mapped}'); SELECT SLEEP(4)"
                ))
            })
        };
        lock_tests::eventually(PATIENCE, "the client to hold the lock", || async {
            locker.inspect(&name).await.unwrap().is_some()
        })
        .await;
        assert!(
            locker.try_lock(&name).await.unwrap().is_none(),
            "{name}: taken beside the client"
        );
        let guard = locker
            .lock_with(&name, LockOptions::new().wait(PATIENCE))
            .await
            .unwrap();
        assert!(
            !cli.is_finished(),
            "{name}: got only when the client's session ended, not at its RELEASE_LOCK"
        );
        let taken = server
            .sql(&format!("SELECT GET_LOCK('{mapped}', 0)"))
            .unwrap();
        assert_eq!(
            taken, "0",
            "{name}: the client took {mapped} beside our hold"
        );
        guard.release().await.unwrap();
        let taken = server
            .sql(&format!("SELECT GET_LOCK('{mapped}', 0)"))
            .unwrap();
        assert_eq!(taken, "1", "{name}: {mapped} still held after our release");
        let printed = cli.join().unwrap().unwrap();
        assert!(printed.starts_with("1\n"), "{name}: {printed:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_loses_every_hold_on_it_at_once() {
    let server = MariaDbServer::spawn();
    let locker = Locker::mysql(&server.url()).await.unwrap();
    let first = locker.lock("ledger:1").await.unwrap();
    let second = locker.lock("ledger:2").await.unwrap();
    let holders = server
        .sql("SELECT IS_USED_LOCK('ledger:1'), IS_USED_LOCK('ledger:2')")
        .unwrap();
    let (one, two) = holders.split_once('\t').unwrap();
    assert_eq!(one, two, "the two holds share one session");
    server.sql(&format!("KILL {one}")).unwrap();
    // Well within a lease (30 s) and before the first keep-alive ping (10 s): the
    // session's watch saw it end.
    for guard in [&first, &second] {
        timeout(PATIENCE, guard.lost())
            .await
            .expect("a hold on a killed session never reported lost");
        assert!(!guard.is_held().await.unwrap());
    }
    let again = locker.lock("ledger:1").await.unwrap();
    assert!(again.fencing_token() > first.fencing_token());
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_loses_every_hold_and_keeps_the_fencing_tokens() {
    let mut server = MariaDbServer::spawn();
    let locker = Locker::mysql(&server.url()).await.unwrap();
    let guard = locker.lock("restarted").await.unwrap();
    server.restart();
    timeout(PATIENCE, guard.lost())
        .await
        .expect("a hold across a server restart never reported lost");
    let again = locker
        .lock_with("restarted", LockOptions::new().wait(PATIENCE))
        .await
        .unwrap();
    assert!(again.fencing_token() > guard.fencing_token());
    again.release().await.unwrap();
}

/// Permits are user locks on the name's slots: a session killed by an operator gives its
/// permits back to a waiter in another store, and a foreign client is kept apart from
/// them both ways: its hold of the name's own lock keeps permits out, and a slot it takes
/// counts as a permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_of_a_killed_session_come_back_and_a_foreign_client_counts() {
    let server = MariaDbServer::spawn();
    let [a, b] = [
        Locker::mysql(&server.url()).await.unwrap(),
        Locker::mysql(&server.url()).await.unwrap(),
    ];
    let held = [
        a.semaphore("jobs", 2).acquire().await.unwrap(),
        a.semaphore("jobs", 2).acquire().await.unwrap(),
    ];
    let jobs = b.semaphore("jobs", 2);
    assert!(
        jobs.try_acquire().await.unwrap().is_none(),
        "a third permit"
    );
    let holder = server.sql("SELECT IS_USED_LOCK('}jobs#0')").unwrap();
    server.sql(&format!("KILL {holder}")).unwrap();
    let permit = jobs
        .acquire_with(LockOptions::new().wait(PATIENCE))
        .await
        .expect("the killed session's permit never came back");
    for stale in &held {
        timeout(PATIENCE, stale.lost())
            .await
            .expect("a permit on a killed session never reported lost");
        assert!(permit.fencing_token() > stale.fencing_token());
    }

    let mut foreign = mysql_async::Conn::new(mysql_async::Opts::from_url(&server.url()).unwrap())
        .await
        .unwrap();
    let took = |name: &'static str| format!("SELECT GET_LOCK('{name}', 0)");
    let taken: Option<i64> = foreign.query_first(took("}jobs#1")).await.unwrap();
    assert_eq!(taken, Some(1));
    assert_eq!(
        jobs.available().await.unwrap(),
        0,
        "the foreign slot is a permit"
    );
    assert!(
        jobs.try_acquire().await.unwrap().is_none(),
        "a third permit"
    );
    permit.release().await.unwrap();
    foreign
        .query_drop("DO RELEASE_LOCK('}jobs#1')")
        .await
        .unwrap();

    let taken: Option<i64> = foreign.query_first(took("jobs")).await.unwrap();
    assert_eq!(taken, Some(1));
    assert!(
        jobs.try_acquire().await.unwrap().is_none(),
        "a permit beside the foreign hold of the name"
    );
    foreign.query_drop("DO RELEASE_LOCK('jobs')").await.unwrap();
    let permit = jobs.try_acquire().await.unwrap().expect("a free permit");
    permit.release().await.unwrap();
    foreign.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_by_their_deadline_while_the_server_is_paused() {
    let server = MariaDbServer::spawn();
    let url = server.url();
    lock_tests::calls_end_by_their_deadline_while_the_server_is_silent(
        || Locker::mysql(&url),
        || server.pause(),
        || server.resume(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_by_their_deadline_while_the_network_is_silent() {
    let server = MariaDbServer::spawn();
    let proxy = TcpProxy::start(server.addr()).unwrap();
    let url = server
        .url()
        .replace(&server.addr().to_string(), &proxy.addr().to_string());
    lock_tests::calls_end_by_their_deadline_while_the_server_is_silent(
        || Locker::mysql(&url),
        || proxy.stall(),
        || proxy.resume(),
    )
    .await;
}

/// Holders on two `Locker`s increment a counter kept in the database, fenced (each holder
/// hands the counter its token, and its write is taken only while that token is the
/// counter's latest), while an operator kills the holding session again and again:
/// every write the database accepted counts, none is lost, and killed holders' late
/// writes are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_counter_loses_no_update_while_holders_are_killed() {
    const RUN: Duration = Duration::from_secs(3);
    const TASKS: usize = 4;
    let server = MariaDbServer::spawn();
    server
        .sql(
            "CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL, fence bigint NOT NULL); \
              INSERT INTO counter VALUES (1, 0, 0)",
        )
        .unwrap();
    let pool = mysql_async::Pool::new(server.url().as_str());
    let lockers = [
        Locker::mysql(&server.url()).await.unwrap(),
        Locker::mysql(&server.url()).await.unwrap(),
    ];
    let accepted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + RUN;
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let locker = lockers[i % 2].clone();
            let (pool, accepted, refused) = (pool.clone(), accepted.clone(), refused.clone());
            tokio::spawn(async move {
                let mut conn = pool.get_conn().await.unwrap();
                while Instant::now() < until {
                    let Ok(guard) = locker
                        .lock_with("counter", LockOptions::new().wait(PATIENCE))
                        .await
                    else {
                        continue; // its session was killed as it took the lock
                    };
                    let fence = guard.fencing_token();
                    // The resource learns the holder's token first, then takes writes
                    // under that token alone: a killed holder's late write is refused.
                    conn.exec_drop(
                        "UPDATE counter SET fence = ? WHERE id = 1 AND fence < ?",
                        (fence, fence),
                    )
                    .await
                    .unwrap();
                    let n: u64 = conn
                        .query_first("SELECT n FROM counter WHERE id = 1")
                        .await
                        .unwrap()
                        .unwrap();
                    tokio::task::yield_now().await;
                    conn.exec_drop(
                        "UPDATE counter SET n = ? WHERE id = 1 AND fence = ?",
                        (n + 1, fence),
                    )
                    .await
                    .unwrap();
                    match conn.affected_rows() {
                        1 => accepted.fetch_add(1, Ordering::SeqCst),
                        _ => refused.fetch_add(1, Ordering::SeqCst),
                    };
                    let _ = guard.release().await;
                }
            })
        })
        .collect();
    let operator = Locker::mysql(&server.url()).await.unwrap();
    let mut kills = 0;
    while Instant::now() < until {
        kills += u32::from(operator.force_unlock("counter").await.unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for task in tasks {
        timeout(PATIENCE * 2, task).await.unwrap().unwrap();
    }
    let n = server.sql("SELECT n FROM counter").unwrap();
    let accepted = accepted.load(Ordering::SeqCst);
    assert!(kills > 0, "no holder was ever killed");
    assert!(accepted > 0, "no write was accepted");
    assert_eq!(
        n,
        accepted.to_string(),
        "lost updates ({} refused, {kills} kills)",
        refused.load(Ordering::SeqCst)
    );
    pool.disconnect().await.unwrap();
}

/// A fence table made by an earlier version (a name, a token, a semaphore's count and
/// slots) gains the columns this one keeps (the holder's session and id) and keeps its
/// tokens: a process holding nothing reads a leader's id and fencing token from it, and a
/// plain lock taken later shows none of the leader's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_table_of_an_earlier_version_gains_the_holders_columns() {
    let server = MariaDbServer::spawn();
    server
        .sql(
            "CREATE TABLE lock_fences (name VARBINARY(255) PRIMARY KEY, \
             token BIGINT UNSIGNED NOT NULL, permits INT UNSIGNED, slots INT UNSIGNED) \
             ENGINE=InnoDB; INSERT INTO lock_fences (name, token) VALUES ('ledger', 41)",
        )
        .unwrap();
    let candidate = Locker::mysql(&server.url()).await.unwrap();
    let reader = Locker::mysql(&server.url()).await.unwrap();
    fence_table::an_upgraded_fence_table_names_its_leader(&candidate, &reader).await;
}
