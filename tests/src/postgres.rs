//! A throwaway PostgreSQL server from Debian's `postgresql` package.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::HarnessError;
use crate::certificates::Certificates;
use crate::daemon::{
    Kind, RunAs, ServerProcess, find_binary, free_port, not_installed, on_a_free_port,
};
use crate::error::chain;
use crate::process::Captured;
use crate::test_server::{Daemon, TestServer};

/// The Debian package with `initdb`, `postgres` and `psql`.
const PACKAGE: &str = "postgresql";
/// Where Debian installs each major version's programs: `{PG_LIB}/{version}/bin`.
const PG_LIB: &str = "/usr/lib/postgresql";
/// The superuser `initdb` creates, and the account the server runs as under root.
pub(crate) const SUPERUSER: &str = "postgres";
/// The database `url` names, which `initdb` creates.
const DATABASE: &str = "postgres";
/// Settings for a server that starts fast and forgets at a crash of the machine, not of
/// the process: no fsync, one loopback address, no log collector (stderr is the log).
/// `max_connections` stays at its default, 100, which the stores' tests count on.
const SETTINGS: &[&str] = &[
    "listen_addresses=127.0.0.1",
    "fsync=off",
    "full_page_writes=off",
    "shared_buffers=16MB",
    "max_wal_size=64MB",
    "logging_collector=off",
    "log_line_prefix=%m [%p] ",
];
/// How long `initdb` may take.
const INIT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline of one [`PostgresServer::psql`].
const PSQL_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline of one readiness probe; the loop around it has its own deadline.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The data dir, inside the server's temp dir.
const DATA_DIR: &str = "data";
/// How the harness names a PostgreSQL server, its temp dir and its log, and runs it.
const POSTGRES: Kind = Kind {
    name: "PostgreSQL server",
    dir: "postgres",
    tag: "postgres",
    log_file: "postgres.log",
    ready_timeout: READY_TIMEOUT,
    run_as: Some(RunAs {
        user: SUPERUSER,
        package: PACKAGE,
    }),
    forks: true,
};
/// The client authentication of a server that accepts TLS only: `trust`, over TLS on
/// `127.0.0.1` or over its unix socket.
const TLS_ONLY_HBA: &str = "local all all trust\nhostssl all all 127.0.0.1/32 trust\n";
/// The first line of `postmaster.pid` that says what the server is doing (`ready` when it
/// accepts connections), counted from 0.
const PID_FILE_STATUS_LINE: usize = 7;

/// A PostgreSQL server that this test started, on a free `127.0.0.1` port (never 5432),
/// with its unix socket in its own temp dir, which also holds its data and its log.
///
/// `initdb` makes a fresh cluster (`trust` authentication, superuser `postgres`,
/// `--no-sync`), then `postgres` serves it with `fsync=off` and `full_page_writes=off`:
/// a commit is written to the kernel, not flushed to disk, so it survives
/// [`kill`](Self::kill) and [`restart`](Self::restart), not a crash of the machine, which a
/// test never needs. (`synchronous_commit` stays on: off, a commit could still be in the
/// server's memory when it is killed.) The programs are those of the newest version in
/// `/usr/lib/postgresql/*/bin` (Debian's layout), else on `PATH`. Under root, which
/// `initdb` and `postgres` refuse, both run as the `postgres` account that Debian's
/// package creates, with the temp dir its own.
///
/// Dropping it kills the server and its backends (`SIGKILL`) and removes the dir; if the
/// thread is panicking, the server log is printed to stderr first, each line prefixed with
/// the port. Its port, process, faults and log are [`TestServer`]'s: its dir holds its
/// socket, its data dir `data/` and its log; [`pause`](TestServer::pause) freezes its
/// backends too.
///
/// ```no_run
/// use lock_tests::{PostgresServer, TestServer};
///
/// let mut server = PostgresServer::spawn(); // accepting connections, killed on drop
/// let url = server.url(); // "postgres://postgres@127.0.0.1:{port}/postgres"
/// server.psql("CREATE TABLE t (n int); INSERT INTO t VALUES (7)").unwrap();
/// server.restart(); // same port, same data
/// assert_eq!(server.psql("SELECT n FROM t").unwrap(), "7");
/// # let _ = url;
/// ```
///
/// `PostgresServer` is `Send + Sync`: share `&PostgresServer` between threads freely.
pub struct PostgresServer {
    process: ServerProcess,
    /// The dir of `initdb`, `postgres` and `psql`.
    bin: PathBuf,
    /// The certificates of a server that accepts TLS only.
    tls: Option<Certificates>,
}

impl PostgresServer {
    /// Starts a server on a fresh cluster and waits until it accepts connections.
    ///
    /// # Panics
    ///
    /// If the server cannot be started: PostgreSQL is not installed (the message says how to
    /// install it), `initdb` failed or the server exited early (the message quotes its log)
    /// or did not accept connections within 30 s.
    #[track_caller]
    pub fn spawn() -> PostgresServer {
        match Self::try_spawn() {
            Ok(server) => server,
            Err(e) if e.is_binary_not_found() => panic!("{e}"),
            Err(e) => panic!("could not start a test PostgreSQL server: {}", chain(&e)),
        }
    }

    /// [`spawn`](Self::spawn) that returns the error instead of panicking.
    pub fn try_spawn() -> Result<PostgresServer, HarnessError> {
        Self::try_spawn_with(false)
    }

    /// Starts a server that accepts TLS connections only (`ssl = on`, and `hostssl`
    /// lines alone in `pg_hba.conf`), with a certificate for `127.0.0.1` that an authority
    /// of its own signed ([`certificates`](Self::certificates), made with `openssl` in its
    /// dir). [`url`](Self::url) connects to it over TLS: libpq's default, `sslmode=prefer`,
    /// uses TLS when the server offers it.
    ///
    /// # Panics
    ///
    /// As [`spawn`](Self::spawn), and if `openssl` is not installed or fails.
    #[track_caller]
    pub fn spawn_tls_only() -> PostgresServer {
        match Self::try_spawn_with(true) {
            Ok(server) => server,
            Err(e) if e.is_binary_not_found() => panic!("{e}"),
            Err(e) => panic!("could not start a test PostgreSQL server: {}", chain(&e)),
        }
    }

    fn try_spawn_with(tls_only: bool) -> Result<PostgresServer, HarnessError> {
        let bin = bin_dir()?;
        on_a_free_port(|| {
            let process = ServerProcess::create(POSTGRES, free_port()?)?;
            let tls = tls_only
                .then(|| Certificates::make_with(process.dir(), |program| process.command(program)))
                .transpose()?;
            let mut server = PostgresServer {
                process,
                bin: bin.clone(),
                tls,
            };
            server.init()?;
            server.start()?;
            Ok(server)
        })
    }

    /// The certificates of a server [that accepts TLS only](Self::spawn_tls_only).
    pub fn certificates(&self) -> Option<&Certificates> {
        self.tls.as_ref()
    }

    /// The URL of the `postgres` database as the superuser, over TCP, without a password
    /// (`trust`): `postgres://postgres@127.0.0.1:{port}/postgres`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{SUPERUSER}@127.0.0.1:{}/{DATABASE}",
            self.port()
        )
    }

    /// The dir of the server's unix socket, `.s.PGSQL.{port}` (its temp dir), for a client
    /// that connects with `host={socket_dir}`.
    pub fn socket_dir(&self) -> &Path {
        self.process.dir()
    }

    /// Runs `sql` (one or more `;`-separated statements) with `psql` on the `postgres`
    /// database as the superuser, over TCP in a new session, with a 10 s deadline; returns
    /// what the statements printed, rows one a line, columns separated by `|`, without
    /// headers, and without the trailing newline.
    ///
    /// ```no_run
    /// # let server = lock_tests::PostgresServer::spawn();
    /// assert_eq!(server.psql("SELECT 1, 'a'").unwrap(), "1|a");
    /// let locks = server.psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'");
    /// server.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
    ///              WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'")
    ///     .unwrap();
    /// # let _ = locks;
    /// ```
    ///
    /// `Err` is [`HarnessError::ProcessFailed`] when a statement fails (its output has the
    /// `ERROR:` line) or the deadline passes (e.g. while [paused](Self::pause):
    /// [`HarnessError::is_timeout`] is true then), and [`HarnessError::NotRunning`] after
    /// [`kill`](Self::kill).
    pub fn psql(&self, sql: &str) -> Result<String, HarnessError> {
        self.psql_with_timeout(sql, PSQL_TIMEOUT)
    }

    /// [`psql`](Self::psql) with another deadline.
    pub fn psql_with_timeout(&self, sql: &str, timeout: Duration) -> Result<String, HarnessError> {
        if !self.is_running() {
            // Never connect then: the port may already belong to another test's server.
            return Err(HarnessError::NotRunning { port: self.port() });
        }
        psql(&self.bin, self.port(), sql, timeout)
    }

    fn data_dir(&self) -> PathBuf {
        self.process.dir().join(DATA_DIR)
    }

    /// Makes the cluster in `data/`; for a server that accepts TLS only, with a
    /// `pg_hba.conf` that says so.
    fn init(&self) -> Result<(), HarnessError> {
        let mut initdb = self.process.command(&self.bin.join("initdb"));
        initdb.arg("--pgdata").arg(self.data_dir()).args([
            "--username",
            SUPERUSER,
            "--auth=trust",
            "--no-sync",
            "--encoding=UTF8",
            "--locale=C",
        ]);
        self.process.setup(initdb, INIT_TIMEOUT, PACKAGE)?;
        if self.tls.is_none() {
            return Ok(());
        }
        let hba = self.data_dir().join("pg_hba.conf");
        fs::write(&hba, TLS_ONLY_HBA)
            .map_err(|e| HarnessError::io(format!("write {}", hba.display()), e))
    }
}

impl TestServer for PostgresServer {}

impl Daemon for PostgresServer {
    fn process(&self) -> &ServerProcess {
        &self.process
    }

    fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// Spawns `postgres` and waits until it accepts connections; on failure, leaves it
    /// killed.
    fn start(&mut self) -> Result<(), HarnessError> {
        let mut postgres = self.process.command(&self.bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(self.data_dir())
            .arg("-p")
            .arg(self.port().to_string())
            .arg("-k")
            .arg(self.process.dir());
        for setting in SETTINGS {
            postgres.args(["-c", setting]);
        }
        if let Some(tls) = &self.tls {
            postgres.args(["-c", "ssl=on"]);
            postgres
                .arg("-c")
                .arg(format!("ssl_cert_file={}", tls.certificate().display()));
            postgres
                .arg("-c")
                .arg(format!("ssl_key_file={}", tls.key().display()));
        }
        let bin = &self.bin;
        let data_dir = self.data_dir();
        let pid_file = data_dir.join("postmaster.pid");
        self.process.start(
            &mut postgres,
            |e| not_installed(&bin.join("postgres").to_string_lossy(), e, PACKAGE),
            |process, _| {
                // The postmaster says `ready` in its pid file once it accepts connections; it
                // exits if it cannot bind its one address, so the port is its own then.
                let status = fs::read_to_string(&pid_file).unwrap_or_default();
                let says_ready = status
                    .lines()
                    .nth(PID_FILE_STATUS_LINE)
                    .is_some_and(|line| line.trim() == "ready");
                if !says_ready {
                    return Ok(false);
                }
                // And a client gets an answer over TCP, from our data dir.
                let port = process.port();
                match psql(bin, port, "SHOW data_directory", PROBE_TIMEOUT) {
                    Ok(dir) if same_dir(Path::new(&dir), &data_dir) => Ok(true),
                    Ok(_) => Err(HarnessError::PortInUse { port }),
                    Err(_) => Ok(false),
                }
            },
        )
    }
}

impl fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.process.debug_as("PostgresServer", f)
    }
}

/// The dir of the newest PostgreSQL in `/usr/lib/postgresql/*/bin`, else of `initdb` on
/// `PATH`.
fn bin_dir() -> Result<PathBuf, HarnessError> {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(PG_LIB)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    find_binary(&["initdb"], &[])
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
        .ok_or_else(|| HarnessError::NotInstalled {
            missing: format!("initdb not found in {PG_LIB}/*/bin or on PATH"),
            package: PACKAGE,
        })
}

/// Runs `sql` with `psql` on `127.0.0.1:port` as the superuser.
fn psql(bin: &Path, port: u16, sql: &str, timeout: Duration) -> Result<String, HarnessError> {
    let mut command = Command::new(bin.join("psql"));
    command
        .args(["--no-psqlrc", "--quiet", "--no-align", "--tuples-only"])
        .args(["--set", "ON_ERROR_STOP=1"])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--username", SUPERUSER, "--dbname", DATABASE])
        .args(["--command", sql])
        // No password prompt, ever: authentication is `trust`.
        .arg("--no-password")
        .env("PGCONNECT_TIMEOUT", timeout.as_secs().max(1).to_string());
    let run = Captured::spawn(&mut command, format!("psql -c {sql:?}"), |program, e| {
        not_installed(program, e, PACKAGE)
    })?;
    let (stdout, _notices) = run.wait_split(Instant::now() + timeout)?;
    Ok(stdout.strip_suffix('\n').unwrap_or(&stdout).to_owned())
}

/// Whether `a` and `b` are the same dir, symbolic links resolved.
pub(crate) fn same_dir(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<PostgresServer>();
    }

    #[test]
    fn a_taken_port_is_detected_not_mistaken_for_ours() {
        let first = PostgresServer::spawn();
        let port = first.port();
        let mut second = PostgresServer {
            process: ServerProcess::create(POSTGRES, port).unwrap(),
            bin: first.bin.clone(),
            tls: None,
        };
        second.init().unwrap();
        let err = second.start().unwrap_err();
        assert!(
            matches!(err, HarnessError::PortInUse { port: p } if p == port),
            "{err:?}"
        );
        assert!(!second.is_running());
        assert_eq!(first.psql("SELECT 1").unwrap(), "1");
    }

    #[test]
    fn the_newest_version_is_found_without_naming_it() {
        let bin = bin_dir().unwrap();
        assert!(bin.join("postgres").is_file(), "{}", bin.display());
    }
}
