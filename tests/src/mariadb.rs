//! A throwaway MariaDB server from Debian's `mariadb-server` package.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::HarnessError;
use crate::certificates::Certificates;
use crate::daemon::{
    Kind, RunAs, ServerProcess, find_binary, free_port, not_installed, on_a_free_port,
};
use crate::error::chain;
use crate::postgres::same_dir;
use crate::process::Captured;
use crate::test_server::{Daemon, TestServer};

/// The Debian package with `mariadbd`, `mariadb-install-db` and (through its dependencies)
/// the `mariadb` client.
const PACKAGE: &str = "mariadb-server";
/// Where Debian installs `mariadbd`, which is not on a normal user's `PATH`.
const SBIN: &str = "/usr/sbin";
/// The account the server runs as under root.
const SERVER_USER: &str = "mysql";
/// The user `url` names: `mariadb-install-db` makes `root@127.0.0.1` with no password.
const USER: &str = "root";
/// The database `url` names, which the harness creates.
const DATABASE: &str = "test";
/// Settings for a server that starts fast: small InnoDB buffers and redo log, the redo log
/// written at each commit but flushed once a second (what a commit wrote survives
/// [`MariaDbServer::kill`], not a crash of the machine), no binary log, no host name lookups.
const SETTINGS: &[&str] = &[
    "--innodb-buffer-pool-size=16M",
    "--innodb-log-file-size=8M",
    "--innodb-log-buffer-size=1M",
    "--innodb-flush-log-at-trx-commit=2",
    "--innodb-temp-data-file-path=ibtmp1:1M:autoextend",
    "--skip-log-bin",
    "--skip-name-resolve",
    "--loose-skip-feedback",
];
/// How long `mariadb-install-db` may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline of one [`MariaDbServer::sql`].
const SQL_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline of one readiness probe; the loop around it has its own deadline.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The data dir, inside the server's temp dir.
const DATA_DIR: &str = "data";
const SOCKET: &str = "mariadb.sock";
/// What the server logs once it accepts connections.
const READY_LINE: &str = "ready for connections";
/// How the harness names a MariaDB server, its temp dir and its log, and runs it.
const MARIADB: Kind = Kind {
    name: "MariaDB server",
    dir: "mariadbd",
    tag: "mariadbd",
    log_file: "mariadbd.log",
    ready_timeout: READY_TIMEOUT,
    run_as: Some(RunAs {
        user: SERVER_USER,
        package: PACKAGE,
    }),
    forks: true,
};

/// A MariaDB server that this test started, on a free `127.0.0.1` port (never 3306), with its
/// unix socket, pid file, data and log in its own temp dir.
///
/// `mariadb-install-db` makes fresh system tables (no `test` database of its own; `root`
/// with no password, `normal` authentication), then `mariadbd` serves them on `127.0.0.1`
/// only, with small InnoDB buffers and `innodb_flush_log_at_trx_commit=2`: what a
/// transaction committed survives [`kill`](Self::kill) and [`restart`](Self::restart) (the
/// kernel keeps it), not a crash of the machine. Grants are checked as on any server, so
/// `KILL`, users and `GET_LOCK` behave as in production. The harness creates the database
/// `test`, which [`url`](Self::url) names. No option file is read (`--no-defaults`), by the
/// server or by the client. Under root, which `mariadbd` refuses, both setup and server run
/// as the `mysql` account that Debian's package creates, with the temp dir its own.
///
/// Dropping it kills the server (`SIGKILL`) and removes the dir; if the thread is
/// panicking, the server log is printed to stderr first, each line prefixed with the port.
/// Its port, process, faults and log are [`TestServer`]'s: its dir holds its socket, pid
/// file, data dir `data/` and log.
///
/// ```no_run
/// use lock_tests::{MariaDbServer, TestServer};
///
/// let mut server = MariaDbServer::spawn(); // accepting connections, killed on drop
/// let url = server.url(); // "mysql://root@127.0.0.1:{port}/test"
/// server.sql("CREATE TABLE t (n int); INSERT INTO t VALUES (7)").unwrap();
/// server.restart(); // same port, same data
/// assert_eq!(server.sql("SELECT n FROM t").unwrap(), "7");
/// # let _ = url;
/// ```
///
/// `MariaDbServer` is `Send + Sync`: share `&MariaDbServer` between threads freely.
pub struct MariaDbServer {
    process: ServerProcess,
    /// `mariadbd`.
    server: PathBuf,
    /// The `mariadb` client.
    client: PathBuf,
    /// The certificates of a server that accepts TLS only.
    tls: Option<Certificates>,
}

impl MariaDbServer {
    /// Starts a server on fresh system tables, waits until it accepts connections, and
    /// creates the database `test`.
    ///
    /// # Panics
    ///
    /// If the server cannot be started: MariaDB is not installed (the message says how to
    /// install it), `mariadb-install-db` failed or the server exited early (the message
    /// quotes its log) or did not accept connections within 30 s.
    #[track_caller]
    pub fn spawn() -> MariaDbServer {
        match Self::try_spawn() {
            Ok(server) => server,
            Err(e) if e.is_binary_not_found() => panic!("{e}"),
            Err(e) => panic!("could not start a test MariaDB server: {}", chain(&e)),
        }
    }

    /// [`spawn`](Self::spawn) that returns the error instead of panicking.
    pub fn try_spawn() -> Result<MariaDbServer, HarnessError> {
        Self::try_spawn_with(false)
    }

    /// Starts a server that accepts TLS connections only (`require_secure_transport=ON`),
    /// with a certificate for `127.0.0.1` that an authority of its own signed
    /// ([`certificates`](Self::certificates), made with `openssl` in its dir).
    /// [`sql`](Self::sql) reaches it over TLS; a client of [`url`](Self::url) needs
    /// `require_ssl=true`.
    ///
    /// # Panics
    ///
    /// As [`spawn`](Self::spawn), and if `openssl` is not installed or fails.
    #[track_caller]
    pub fn spawn_tls_only() -> MariaDbServer {
        match Self::try_spawn_with(true) {
            Ok(server) => server,
            Err(e) if e.is_binary_not_found() => panic!("{e}"),
            Err(e) => panic!("could not start a test MariaDB server: {}", chain(&e)),
        }
    }

    fn try_spawn_with(tls_only: bool) -> Result<MariaDbServer, HarnessError> {
        let server = binary(&["mariadbd", "mysqld"])?;
        let install = binary(&["mariadb-install-db", "mysql_install_db"])?;
        let client = binary(&["mariadb", "mysql"])?;
        let db = on_a_free_port(|| {
            let process = ServerProcess::create(MARIADB, free_port()?)?;
            let tls = tls_only
                .then(|| Certificates::make_with(process.dir(), |program| process.command(program)))
                .transpose()?;
            let mut db = MariaDbServer {
                process,
                server: server.clone(),
                client: client.clone(),
                tls,
            };
            db.install(&install)?;
            db.start()?;
            Ok(db)
        })?;
        db.sql_in(None, &format!("CREATE DATABASE {DATABASE}"), SQL_TIMEOUT)?;
        Ok(db)
    }

    /// The certificates of a server [that accepts TLS only](Self::spawn_tls_only).
    pub fn certificates(&self) -> Option<&Certificates> {
        self.tls.as_ref()
    }

    /// The URL of the database `test` as `root`, over TCP, without a password:
    /// `mysql://root@127.0.0.1:{port}/test`.
    pub fn url(&self) -> String {
        format!("mysql://{USER}@127.0.0.1:{}/{DATABASE}", self.port())
    }

    /// The server's unix socket, `mariadb.sock` in its temp dir.
    pub fn socket(&self) -> PathBuf {
        self.process.dir().join(SOCKET)
    }

    /// Runs `query` (one or more `;`-separated statements) with the `mariadb` client on the
    /// database `test` as `root`, over TCP in a new session, with a 10 s deadline; returns
    /// what the statements printed, rows one a line, columns separated by tabs, without
    /// column names, and without the trailing newline.
    ///
    /// ```no_run
    /// # let server = lock_tests::MariaDbServer::spawn();
    /// assert_eq!(server.sql("SELECT 1, 'a'").unwrap(), "1\ta");
    /// let holder = server.sql("SELECT IS_USED_LOCK('k')").unwrap(); // "NULL" when free
    /// # let _ = holder;
    /// ```
    ///
    /// `Err` is [`HarnessError::ProcessFailed`] when a statement fails (its output has the
    /// `ERROR` line) or the deadline passes (e.g. while [paused](Self::pause):
    /// [`HarnessError::is_timeout`] is true then), and [`HarnessError::NotRunning`] after
    /// [`kill`](Self::kill).
    pub fn sql(&self, query: &str) -> Result<String, HarnessError> {
        self.sql_with_timeout(query, SQL_TIMEOUT)
    }

    /// [`sql`](Self::sql) with another deadline.
    pub fn sql_with_timeout(&self, query: &str, timeout: Duration) -> Result<String, HarnessError> {
        if !self.is_running() {
            // Never connect then: the port may already belong to another test's server.
            return Err(HarnessError::NotRunning { port: self.port() });
        }
        self.sql_in(Some(DATABASE), query, timeout)
    }

    fn data_dir(&self) -> PathBuf {
        self.process.dir().join(DATA_DIR)
    }

    /// Makes the system tables in `data/`.
    fn install(&self, install: &Path) -> Result<(), HarnessError> {
        let mut command = self.process.command(install);
        command
            // First, as the script requires.
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.data_dir().display()))
            // Passed on to `mariadbd --bootstrap`, as `--innodb-log-file-size` below: its
            // temporary tables in its own dir, for a server that starts removes every
            // `#sql*` file in its tmpdir, another's too.
            .arg(format!("--tmpdir={}", self.process.dir().display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
                // A small redo log from the start.
                "--innodb-log-file-size=8M",
            ]);
        self.process.setup(command, INSTALL_TIMEOUT, PACKAGE)
    }

    /// Runs `query` in `database` with [`sql`].
    fn sql_in(
        &self,
        database: Option<&str>,
        query: &str,
        timeout: Duration,
    ) -> Result<String, HarnessError> {
        let authority = self.tls.as_ref().map(Certificates::authority);
        let client = Client {
            program: &self.client,
            port: self.port(),
            authority: authority.as_deref(),
        };
        client.sql(database, query, timeout)
    }
}

impl TestServer for MariaDbServer {}

impl Daemon for MariaDbServer {
    fn process(&self) -> &ServerProcess {
        &self.process
    }

    fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// Spawns `mariadbd` and waits until it accepts connections; on failure, leaves it
    /// killed.
    fn start(&mut self) -> Result<(), HarnessError> {
        let dir = self.process.dir().to_path_buf();
        let mut server = self.process.command(&self.server);
        server
            // First, as the server requires.
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.data_dir().display()))
            .arg(format!("--port={}", self.port()))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", dir.join(SOCKET).display()))
            .arg(format!("--pid-file={}", dir.join("mariadbd.pid").display()))
            // Its own, as in `install`.
            .arg(format!("--tmpdir={}", dir.display()))
            .args(SETTINGS);
        if let Some(tls) = &self.tls {
            server
                .arg(format!("--ssl-cert={}", tls.certificate().display()))
                .arg(format!("--ssl-key={}", tls.key().display()))
                .arg(format!("--ssl-ca={}", tls.authority().display()))
                .arg("--require-secure-transport=ON");
        }
        // Without `--log-error`, the log goes to stderr, which is the log file.
        let program = self.server.to_string_lossy().into_owned();
        let authority = self.tls.as_ref().map(Certificates::authority);
        let client = &self.client;
        let data_dir = self.data_dir();
        self.process.start(
            &mut server,
            |e| not_installed(&program, e, PACKAGE),
            |process, _| {
                // It logs that line once it listens; it exits if it cannot bind its port.
                if !process.run_log().contains(READY_LINE) {
                    return Ok(false);
                }
                // And a client gets an answer over TCP, from our data dir.
                let port = process.port();
                let client = Client {
                    program: client,
                    port,
                    authority: authority.as_deref(),
                };
                match client.sql(None, "SELECT @@datadir", PROBE_TIMEOUT) {
                    Ok(dir) if same_dir(Path::new(&dir), &data_dir) => Ok(true),
                    Ok(_) => Err(HarnessError::PortInUse { port }),
                    Err(_) => Ok(false),
                }
            },
        )
    }
}

impl fmt::Debug for MariaDbServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.process.debug_as("MariaDbServer", f)
    }
}

/// The `mariadb` client, on `127.0.0.1:port` as root: over TLS, trusting `authority`, if
/// given.
struct Client<'a> {
    program: &'a Path,
    port: u16,
    authority: Option<&'a Path>,
}

impl Client<'_> {
    /// Runs `query` in `database`.
    fn sql(
        &self,
        database: Option<&str>,
        query: &str,
        timeout: Duration,
    ) -> Result<String, HarnessError> {
        let mut command = Command::new(self.program);
        command
            // First, as the client requires: no option file, so no system socket or user.
            .arg("--no-defaults")
            .args(["--protocol=TCP", "--host=127.0.0.1"])
            .arg(format!("--port={}", self.port))
            .arg(format!("--user={USER}"))
            .args(["--batch", "--skip-column-names", "--raw"])
            .arg(format!("--connect-timeout={}", timeout.as_secs().max(1)))
            .arg(format!("--execute={query}"))
            .args(database);
        if let Some(authority) = self.authority {
            command.arg(format!("--ssl-ca={}", authority.display()));
        }
        let what = format!("mariadb -e {query:?}");
        let run = Captured::spawn(&mut command, what, |program, e| {
            not_installed(program, e, PACKAGE)
        })?;
        let (stdout, _warnings) = run.wait_split(Instant::now() + timeout)?;
        Ok(stdout.strip_suffix('\n').unwrap_or(&stdout).to_owned())
    }
}

/// The first of `names` in `/usr/sbin` or on `PATH`.
fn binary(names: &[&str]) -> Result<PathBuf, HarnessError> {
    find_binary(names, &[Path::new(SBIN)]).ok_or_else(|| HarnessError::NotInstalled {
        missing: format!("{} not found in {SBIN} or on PATH", names[0]),
        package: PACKAGE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<MariaDbServer>();
    }

    #[test]
    fn a_taken_port_is_detected_not_mistaken_for_ours() {
        let first = MariaDbServer::spawn();
        let port = first.port();
        let mut second = MariaDbServer {
            process: ServerProcess::create(MARIADB, port).unwrap(),
            server: first.server.clone(),
            client: first.client.clone(),
            tls: None,
        };
        second
            .install(&binary(&["mariadb-install-db"]).unwrap())
            .unwrap();
        let err = second.start().unwrap_err();
        assert!(
            matches!(err, HarnessError::PortInUse { port: p } if p == port),
            "{err:?}"
        );
        assert!(!second.is_running());
        assert_eq!(first.sql("SELECT 1").unwrap(), "1");
    }

    #[test]
    fn a_missing_program_names_the_package() {
        let err = binary(&["mariadbd-lock-tests-missing"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "mariadbd-lock-tests-missing not found in /usr/sbin or on PATH: install it with \
             \"apt-get install -y mariadb-server\" (Debian/Ubuntu)"
        );
    }
}
