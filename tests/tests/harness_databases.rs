//! The database harness: PostgreSQL and MariaDB servers behave as documented.

use std::thread;
use std::time::{Duration, Instant};

use lock_tests::{HarnessError, MariaDbServer, PostgresServer, TestServer, wait_until};

/// The ports of the servers this machine may run for other uses: a test server never has one.
const SYSTEM_PORTS: [u16; 2] = [5432, 3306];
/// How long a query on a paused server waits before it counts as unanswered.
const PAUSED_PROBE: Duration = Duration::from_millis(500);
/// How long a query that sleeps may run before something ends it; the ending is tested.
const SLEEPER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a session may take to show up, or to go away.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How many sessions run the sleeping query.
const SLEEPING: &str = "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'";

// PostgreSQL

#[test]
fn a_postgres_server_serves_on_its_own_port() {
    let started = Instant::now();
    let server = PostgresServer::spawn();
    eprintln!(
        "PostgreSQL accepting connections after {:?}",
        started.elapsed()
    );

    let port = server.port();
    assert!(!SYSTEM_PORTS.contains(&port), "{port}");
    assert_eq!(
        server.url(),
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    );
    assert_eq!(server.addr().to_string(), format!("127.0.0.1:{port}"));
    assert_eq!(server.psql("SELECT 1 + 1").unwrap(), "2");
    assert_eq!(
        server
            .psql("SELECT current_user, current_database()")
            .unwrap(),
        "postgres|postgres"
    );
    assert_eq!(server.psql("SHOW port").unwrap(), port.to_string());
    assert_eq!(server.psql("SHOW listen_addresses").unwrap(), "127.0.0.1");
    assert_eq!(server.psql("SHOW fsync").unwrap(), "off");
    assert_eq!(
        server
            .psql("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            .unwrap(),
        "t"
    );
    // Its unix socket is in its own dir.
    assert!(
        server
            .socket_dir()
            .join(format!(".s.PGSQL.{port}"))
            .exists()
    );
    assert!(server.log().contains("ready to accept connections"));

    let err = server.psql("SELECT * FROM no_such_table").unwrap_err();
    assert!(
        matches!(err, HarnessError::ProcessFailed { .. })
            && err.to_string().contains("no_such_table"),
        "{err}"
    );
}

#[test]
fn a_postgres_restart_keeps_the_port_and_the_data() {
    let mut server = PostgresServer::spawn();
    let port = server.port();
    let pid = server.pid().unwrap();
    server
        .psql("CREATE TABLE kept (n int); INSERT INTO kept VALUES (1), (2), (3)")
        .unwrap();

    server.kill();
    assert!(!server.is_running());
    let err = server.psql("SELECT 1").unwrap_err();
    assert!(
        matches!(err, HarnessError::NotRunning { port: p } if p == port),
        "{err:?}"
    );
    server.kill(); // killing a killed server is a no-op

    let started = Instant::now();
    server.restart();
    eprintln!("PostgreSQL restarted after {:?}", started.elapsed());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), Some(pid));
    assert_eq!(server.psql("SELECT sum(n) FROM kept").unwrap(), "6");

    // A restart of a running server, and its backends, too.
    server.restart();
    assert_eq!(server.psql("SELECT count(*) FROM kept").unwrap(), "3");
}

#[test]
fn a_paused_postgres_answers_nothing_until_resumed() {
    let server = PostgresServer::spawn();
    thread::scope(|s| {
        // A session open before the pause: its backend is a process of its own.
        let sleeper = s.spawn(|| server.psql_with_timeout("SELECT pg_sleep(60)", SLEEPER_TIMEOUT));
        wait_until(SESSION_TIMEOUT, "the sleeping session", || {
            server.psql(SLEEPING).unwrap() == "1"
        });
        let backend: u32 = server
            .psql("SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'")
            .unwrap()
            .parse()
            .unwrap();

        server.pause();
        assert!(server.is_running());
        let err = server
            .psql_with_timeout("SELECT 1", PAUSED_PROBE)
            .unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
        assert_eq!(process_state(server.pid().unwrap()), 'T');
        assert_eq!(process_state(backend), 'T');

        server.resume();
        assert_eq!(server.psql("SELECT 1").unwrap(), "1");
        assert_ne!(process_state(backend), 'T');
        server
            .psql(&format!("SELECT pg_terminate_backend({backend})"))
            .unwrap();
        sleeper.join().unwrap().unwrap_err();
    });
}

/// The state letter of `pid` in `/proc/{pid}/stat`: `T` when stopped.
fn process_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 1..];
    after_name.trim_start().chars().next().unwrap()
}

#[test]
fn a_postgres_session_can_be_terminated() {
    let server = PostgresServer::spawn();
    thread::scope(|s| {
        let sleeper = s.spawn(|| server.psql_with_timeout("SELECT pg_sleep(60)", SLEEPER_TIMEOUT));
        wait_until(SESSION_TIMEOUT, "the sleeping session", || {
            server.psql(SLEEPING).unwrap() == "1"
        });
        let terminated = server
            .psql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE query = 'SELECT pg_sleep(60)'",
            )
            .unwrap();
        assert_eq!(terminated, "t");
        let err = sleeper.join().unwrap().unwrap_err();
        assert!(!err.is_timeout(), "{err:?}");
        assert!(err.to_string().contains("terminating connection"), "{err}");
    });
    assert_eq!(server.psql(SLEEPING).unwrap(), "0");
}

#[test]
fn two_postgres_servers_in_parallel_do_not_collide() {
    let servers: Vec<PostgresServer> = thread::scope(|s| {
        let spawns: Vec<_> = (0..2).map(|_| s.spawn(PostgresServer::spawn)).collect();
        spawns.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (a, b) = (&servers[0], &servers[1]);
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    a.psql("CREATE TABLE only_in_a (n int)").unwrap();
    let in_b = "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'";
    assert_eq!(a.psql(in_b).unwrap(), "1");
    assert_eq!(b.psql(in_b).unwrap(), "0");
}

// MariaDB

#[test]
fn a_mariadb_server_serves_on_its_own_port() {
    let started = Instant::now();
    let server = MariaDbServer::spawn();
    eprintln!(
        "MariaDB accepting connections after {:?}",
        started.elapsed()
    );

    let port = server.port();
    assert!(!SYSTEM_PORTS.contains(&port), "{port}");
    assert_eq!(server.url(), format!("mysql://root@127.0.0.1:{port}/test"));
    assert_eq!(server.addr().to_string(), format!("127.0.0.1:{port}"));
    assert_eq!(server.sql("SELECT 1 + 1").unwrap(), "2");
    assert_eq!(
        server.sql("SELECT current_user(), database()").unwrap(),
        "root@127.0.0.1\ttest"
    );
    assert_eq!(server.sql("SELECT @@port").unwrap(), port.to_string());
    assert_eq!(server.sql("SELECT @@bind_address").unwrap(), "127.0.0.1");
    assert_eq!(
        server
            .sql("SELECT @@innodb_flush_log_at_trx_commit")
            .unwrap(),
        "2"
    );
    assert_eq!(
        server.sql("SELECT @@socket").unwrap(),
        server.socket().display().to_string()
    );
    assert!(server.socket().exists());
    assert!(server.log().contains("ready for connections"));

    let err = server.sql("SELECT * FROM no_such_table").unwrap_err();
    assert!(
        matches!(err, HarnessError::ProcessFailed { .. })
            && err.to_string().contains("no_such_table"),
        "{err}"
    );
}

#[test]
fn a_mariadb_restart_keeps_the_port_and_the_data() {
    let mut server = MariaDbServer::spawn();
    let port = server.port();
    let pid = server.pid().unwrap();
    server
        .sql("CREATE TABLE kept (n int) ENGINE=InnoDB; INSERT INTO kept VALUES (1), (2), (3)")
        .unwrap();

    server.kill();
    assert!(!server.is_running());
    let err = server.sql("SELECT 1").unwrap_err();
    assert!(
        matches!(err, HarnessError::NotRunning { port: p } if p == port),
        "{err:?}"
    );
    server.kill(); // killing a killed server is a no-op

    let started = Instant::now();
    server.restart();
    eprintln!("MariaDB restarted after {:?}", started.elapsed());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), Some(pid));
    assert_eq!(server.sql("SELECT sum(n) FROM kept").unwrap(), "6");

    server.restart();
    assert_eq!(server.sql("SELECT count(*) FROM kept").unwrap(), "3");
}

#[test]
fn a_paused_mariadb_answers_nothing_until_resumed() {
    let server = MariaDbServer::spawn();
    server.pause();
    assert!(server.is_running());
    let err = server
        .sql_with_timeout("SELECT 1", PAUSED_PROBE)
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(process_state(server.pid().unwrap()), 'T');

    server.resume();
    assert_eq!(server.sql("SELECT 1").unwrap(), "1");
}

#[test]
fn a_mariadb_session_holding_a_lock_can_be_killed() {
    let server = MariaDbServer::spawn();
    let holder = "SELECT IS_USED_LOCK('k') IS NOT NULL";
    thread::scope(|s| {
        let sleeper = s.spawn(|| {
            server.sql_with_timeout("SELECT GET_LOCK('k', 0); SELECT SLEEP(60)", SLEEPER_TIMEOUT)
        });
        wait_until(SESSION_TIMEOUT, "the session holding k", || {
            server.sql(holder).unwrap() == "1"
        });
        // `KILL` of another user's session needs the privilege, from the grant tables.
        let id = server.sql("SELECT IS_USED_LOCK('k')").unwrap();
        server.sql(&format!("KILL {id}")).unwrap();
        let err = sleeper.join().unwrap().unwrap_err();
        assert!(!err.is_timeout(), "{err:?}");
    });
    wait_until(SESSION_TIMEOUT, "k free", || {
        server.sql(holder).unwrap() == "0"
    });
}

#[test]
fn two_mariadb_servers_in_parallel_do_not_collide() {
    let servers: Vec<MariaDbServer> = thread::scope(|s| {
        let spawns: Vec<_> = (0..2).map(|_| s.spawn(MariaDbServer::spawn)).collect();
        spawns.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (a, b) = (&servers[0], &servers[1]);
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    a.sql("CREATE TABLE only_in_a (n int)").unwrap();
    let in_b = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'only_in_a'";
    assert_eq!(a.sql(in_b).unwrap(), "1");
    assert_eq!(b.sql(in_b).unwrap(), "0");
}
