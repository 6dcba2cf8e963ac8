//! The PostgreSQL store against what the conformance suite cannot show: a foreign client
//! sharing a lock by DistributedLock's key, sessions ended by the server or its restart
//! (fencing tokens kept), calls that end by their deadline while the server is silent;
//! many tasks within the connection bound; and a name's reads and permits kept apart,
//! with what that rests on.

#[path = "common/fence_table.rs"]
mod fence_table;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::backend::PostgresStore;
use lock_core::backend::postgres::{AdvisoryKey, KeyMapping};
use lock_core::{LockKind, LockOptions, Locker};
use lock_tests::{PostgresServer, TcpProxy, TestServer, eventually};
use tokio::time::{Instant, timeout};
use tokio_postgres::{Client, NoTls};

/// Bounds each wait for something that should happen at once.
const PATIENCE: Duration = Duration::from_secs(5);

/// A client of the server's own, as a .NET or Python service would hold a lock.
async fn foreign(server: &PostgresServer) -> Client {
    let (client, connection) = tokio_postgres::connect(&server.url(), NoTls)
        .await
        .expect("connect to the test postgres server");
    tokio::spawn(connection);
    client
}

/// The statement that locks `key` as a peer would, with `function` (`pg_advisory_lock`...).
fn call(function: &str, key: AdvisoryKey) -> String {
    match key {
        AdvisoryKey::Bigint(k) => format!("SELECT {function}({k}::int8)::text"),
        AdvisoryKey::Pair(high, low) => format!("SELECT {function}({high}, {low})::text"),
        other => panic!("no peer statement for {other:?}"),
    }
}

/// A `Locker` on a store of at most `max` connections to `server`.
async fn bounded_locker(server: &PostgresServer, max: usize) -> Locker {
    let store = PostgresStore::builder(&server.url())
        .max_connections(max)
        .build()
        .await
        .unwrap();
    Locker::builder()
        .store(Arc::new(store))
        .build()
        .await
        .unwrap()
}

async fn run(client: &Client, sql: &str) -> String {
    let row = client.query_one(sql, &[]).await.expect(sql);
    row.get::<_, Option<String>>(0).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_holder_of_distributed_locks_key_makes_us_wait_and_the_other_way_round() {
    let server = PostgresServer::spawn();
    let locker = Locker::postgres(&server.url()).await.unwrap();
    let peer = foreign(&server).await;
    // A hashed name (one bigint), and a short ASCII one (a pair of int4 keys).
    for name in ["MyLockName", "orders"] {
        let key = KeyMapping::DistributedLock.key(name);
        run(&peer, &call("pg_advisory_lock", key)).await;
        assert!(
            locker.try_lock(name).await.unwrap().is_none(),
            "{name}: taken beside a peer"
        );
        let waiter = {
            let (locker, name) = (locker.clone(), name.to_owned());
            tokio::spawn(async move {
                let guard = locker
                    .lock_with(&name, LockOptions::new().wait(PATIENCE))
                    .await;
                (Instant::now(), guard.unwrap())
            })
        };
        eventually(
            PATIENCE,
            &format!("{name}: our waiter in Postgres's queue"),
            || {
                let (locker, name) = (locker.clone(), name.to_owned());
                async move {
                    let info = locker.inspect(&name).await.ok().flatten();
                    info.and_then(|info| info.waiting) == Some(1)
                }
            },
        )
        .await;
        let released = Instant::now();
        assert_eq!(run(&peer, &call("pg_advisory_unlock", key)).await, "true");
        let (got, guard) = waiter.await.unwrap();
        assert!(
            got - released < Duration::from_millis(500),
            "{name}: woken {:?} after a foreign release",
            got - released
        );
        assert_eq!(
            run(&peer, &call("pg_try_advisory_lock", key)).await,
            "false",
            "{name}"
        );
        guard.release().await.unwrap();
        assert_eq!(
            run(&peer, &call("pg_try_advisory_lock", key)).await,
            "true",
            "{name}"
        );
        run(&peer, &call("pg_advisory_unlock", key)).await;
    }
}

/// The `psql` binary as the foreign client: it takes the advisory key of a hashed name,
/// holds it until the test lets it go on (by a second key the test holds), and unlocks
/// it; our waiter, queued in Postgres behind it, gets the lock on that unlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_psql_holds_makes_us_wait_until_psql_unlocks_it() {
    let server = Arc::new(PostgresServer::spawn());
    let locker = Locker::postgres(&server.url()).await.unwrap();
    let name = "billing.balance:42";
    let AdvisoryKey::Bigint(key) = KeyMapping::DistributedLock.key(name) else {
        panic!("{name} is a hashed name, one bigint");
    };
    let go_on = AdvisoryKey::Bigint(42);
    let peer = foreign(&server).await;
    run(&peer, &call("pg_advisory_lock", go_on)).await;
    let psql = {
        let server = server.clone();
        std::thread::spawn(move || {
            server.psql_with_timeout(
                &format!(
                    "SELECT pg_advisory_lock({key}::int8); SELECT pg_advisory_lock(42::int8); \
                     SELECT pg_advisory_unlock({key}::int8)"
                ),
                Duration::from_secs(30),
            )
        })
    };
    eventually(PATIENCE, "psql to hold the lock", || {
        let locker = locker.clone();
        async move { locker.inspect(name).await.ok().flatten().is_some() }
    })
    .await;
    assert!(
        locker.try_lock(name).await.unwrap().is_none(),
        "taken beside psql"
    );
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .lock_with(name, LockOptions::new().wait(PATIENCE * 2))
                .await
        })
    };
    eventually(PATIENCE, "our waiter in Postgres's queue", || {
        let locker = locker.clone();
        async move {
            let info = locker.inspect(name).await.ok().flatten();
            info.and_then(|info| info.waiting) == Some(1)
        }
    })
    .await;
    run(&peer, &call("pg_advisory_unlock", go_on)).await;
    let guard = timeout(PATIENCE, waiter)
        .await
        .expect("psql's unlock never woke our waiter")
        .unwrap()
        .unwrap();
    let printed = psql.join().unwrap().unwrap();
    assert_eq!(
        printed.lines().last(),
        Some("t"),
        "psql's unlock: {printed:?}"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_backend_loses_every_hold_on_it_at_once() {
    let server = PostgresServer::spawn();
    let locker = Locker::postgres(&server.url()).await.unwrap();
    let first = locker.lock("ledger:1").await.unwrap();
    let second = locker.lock("ledger:2").await.unwrap();
    let terminated = server
        .psql(
            "SELECT count(pg_terminate_backend(pid)) FROM (SELECT DISTINCT pid FROM pg_locks \
             WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()) AS holders",
        )
        .unwrap();
    assert_eq!(terminated.trim(), "1", "the two holds share one session");
    for guard in [&first, &second] {
        timeout(PATIENCE, guard.lost())
            .await
            .expect("a hold on a terminated session never reported lost");
        assert!(!guard.is_held().await.unwrap());
    }
    let again = locker.lock("ledger:1").await.unwrap();
    assert!(again.fencing_token() > first.fencing_token());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_by_their_deadline_while_the_server_is_paused() {
    let server = PostgresServer::spawn();
    let url = server.url();
    lock_tests::calls_end_by_their_deadline_while_the_server_is_silent(
        || Locker::postgres(&url),
        || server.pause(),
        || server.resume(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_end_by_their_deadline_while_the_network_is_silent() {
    let server = PostgresServer::spawn();
    let proxy = TcpProxy::start(server.addr()).unwrap();
    let url = server
        .url()
        .replace(&server.addr().to_string(), &proxy.addr().to_string());
    lock_tests::calls_end_by_their_deadline_while_the_server_is_silent(
        || Locker::postgres(&url),
        || proxy.stall(),
        || proxy.resume(),
    )
    .await;
}

/// At scale, 1,000 tasks waiting on 100 keys, each held in turn, never open more
/// connections than the bound. (How soon a release wakes the next is the benchmark's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_on_many_keys_stay_within_the_connection_bound() {
    const MAX: usize = 3;
    const KEYS: usize = 100;
    const TASKS: usize = 1_000;
    let server = Arc::new(PostgresServer::spawn());
    let locker = bounded_locker(&server, MAX).await;
    let peak = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (server, peak, done) = (server.clone(), peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let open = server
                    .psql(
                        "SELECT count(*) FROM pg_stat_activity \
                         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                    )
                    .unwrap();
                let open: usize = open.trim().parse().unwrap();
                peak.fetch_max(open, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let inside: Arc<Vec<AtomicUsize>> = Arc::new((0..KEYS).map(|_| Default::default()).collect());
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (locker, inside) = (locker.clone(), inside.clone());
            tokio::spawn(async move {
                let key = i % KEYS;
                let wait = LockOptions::new().wait(Duration::from_secs(20));
                let guard = locker
                    .lock_with(&format!("many:{key}"), wait)
                    .await
                    .unwrap();
                let before = inside[key].fetch_add(1, Ordering::SeqCst);
                assert_eq!(before, 0, "two holders of many:{key}");
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside[key].fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            })
        })
        .collect();
    for task in tasks {
        timeout(Duration::from_secs(30), task)
            .await
            .expect("a task never got its lock")
            .unwrap();
    }
    done.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        peak <= MAX,
        "{peak} connections open, beyond the bound of {MAX}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_locks_published_keys_are_the_advisory_locks_we_take() {
    let server = PostgresServer::spawn();
    let locker = Locker::postgres(&server.url()).await.unwrap();
    let han = "漢".repeat(18);
    for (name, key) in [
        ("MyLockName", 4062898426641073528_i64),
        (han.as_str(), -5707277204051710361),
    ] {
        let guard = locker.lock(name).await.unwrap();
        let taken = server
            .psql(&format!("SELECT pg_try_advisory_lock({key}::int8)"))
            .unwrap();
        assert_eq!(taken.trim(), "f", "{name}: psql took {key} beside our hold");
        guard.release().await.unwrap();
        let taken = server
            .psql(&format!("SELECT pg_try_advisory_lock({key}::int8)"))
            .unwrap();
        assert_eq!(
            taken.trim(),
            "t",
            "{name}: {key} still held after our release"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_loses_every_hold_and_keeps_the_fencing_tokens() {
    let mut server = PostgresServer::spawn();
    let locker = Locker::postgres(&server.url()).await.unwrap();
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

/// What keeps a name's reads and permits apart: a lock that `pg_try_advisory_lock`
/// granted is in `pg_locks` for every other session as soon as the call returns (the
/// view reads the server's shared lock table, and an advisory lock never takes the
/// session-local fast path).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_advisory_lock_is_in_pg_locks_for_every_session_at_once() {
    let server = PostgresServer::spawn();
    let (taker, looker) = (foreign(&server).await, foreign(&server).await);
    let seen = "SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND granted \
                AND classid = 0 AND objid = 77 AND objsubid = 1";
    for _ in 0..200 {
        assert_eq!(
            run(&taker, "SELECT pg_try_advisory_lock(77)::text").await,
            "true"
        );
        assert_eq!(
            run(&looker, seen).await,
            "1",
            "a granted lock not yet shown"
        );
        assert_eq!(
            run(&taker, "SELECT pg_advisory_unlock(77)::text").await,
            "true"
        );
        assert_eq!(run(&looker, seen).await, "0", "a freed lock still shown");
    }
}

/// A fence table made by an earlier version (a name and a fence) gains the columns this
/// one keeps (a semaphore's count, the last holder), and keeps its tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_table_of_an_earlier_version_gains_the_new_columns() {
    let server = PostgresServer::spawn();
    let peer = foreign(&server).await;
    peer.batch_execute(
        "CREATE TABLE lock_fences (name text PRIMARY KEY, fence bigint NOT NULL); \
         INSERT INTO lock_fences VALUES ('ledger', 41)",
    )
    .await
    .unwrap();
    let locker = Locker::postgres(&server.url()).await.unwrap();
    let guard = locker.lock("ledger").await.unwrap();
    assert_eq!(guard.fencing_token(), 42);
    let info = locker.inspect("ledger").await.unwrap().expect("held");
    assert_eq!(info.holders[0].fencing_token, Some(42), "{info:?}");
    guard.release().await.unwrap();
    let permit = locker.semaphore("pool", 2).acquire().await.unwrap();
    let count = "SELECT permits::text FROM lock_fences WHERE name = 'pool'";
    assert_eq!(run(&peer, count).await, "2");
    permit.release().await.unwrap();
}

/// A fence table made by the version before holder ids (a name, a fence, a count, the
/// last holder) gains their column: a process holding nothing reads a leader's id and
/// fencing token from it, and a plain lock taken later shows none of the leader's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_table_without_holder_ids_gains_their_column() {
    let server = PostgresServer::spawn();
    let peer = foreign(&server).await;
    peer.batch_execute(
        "CREATE TABLE lock_fences (name text PRIMARY KEY, fence bigint NOT NULL, \
         permits bigint, holder text, held_by int); \
         INSERT INTO lock_fences (name, fence) VALUES ('ledger', 41)",
    )
    .await
    .unwrap();
    let candidate = Locker::postgres(&server.url()).await.unwrap();
    let reader = Locker::postgres(&server.url()).await.unwrap();
    fence_table::an_upgraded_fence_table_names_its_leader(&candidate, &reader).await;
}

/// Two holds of one name never share a session, so a store holds at most its connection
/// bound of reads of one name at once: the further readers wait for a session to come
/// free, and all get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_one_name_beyond_the_connection_bound_wait_their_turn() {
    const MAX: usize = 2;
    const READERS: usize = 6;
    let server = PostgresServer::spawn();
    let locker = bounded_locker(&server, MAX).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..READERS)
        .map(|_| {
            let (locker, inside, peak) = (locker.clone(), inside.clone(), peak.clone());
            tokio::spawn(async move {
                let read = LockOptions::new().kind(LockKind::Read).wait(PATIENCE);
                let guard = locker.lock_with("doc", read).await.unwrap();
                peak.fetch_max(inside.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            })
        })
        .collect();
    for task in tasks {
        timeout(PATIENCE * 2, task)
            .await
            .expect("a reader never got in")
            .unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        peak <= MAX,
        "{peak} reads of one name at once on {MAX} connections"
    );
}
