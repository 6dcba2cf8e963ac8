//! The lifecycle that every test server shares, written once over its [`ServerProcess`].

use std::net::SocketAddr;
use std::path::Path;

use crate::HarnessError;
use crate::daemon::ServerProcess;

/// The lifecycle of a test server, the same for [`RedisServer`](crate::RedisServer),
/// [`ZooKeeperServer`](crate::ZooKeeperServer), [`PostgresServer`](crate::PostgresServer)
/// and [`MariaDbServer`](crate::MariaDbServer): where it listens, its process and its log,
/// and the faults a test injects, [`pause`](Self::pause) and [`resume`](Self::resume),
/// [`kill`](Self::kill) and [`restart`](Self::restart).
///
/// What a restart keeps depends on the server:
///
/// - a `redis-server` runs without persistence: it starts again empty, with the same
///   arguments; a cluster node keeps its `nodes.conf`, so it rejoins its cluster with its
///   slots;
/// - ZooKeeper starts again from its data dir: znodes and sessions survive (a session
///   expires if its client does not come back within its timeout);
/// - PostgreSQL and MariaDB recover their data dir as after a crash: committed data
///   survives, connections and the session locks on them (advisory locks, `GET_LOCK`) do
///   not.
///
/// ```no_run
/// use lock_tests::{PostgresServer, RedisServer, TestServer};
///
/// // Any server, e.g. to freeze every store of a test at once.
/// fn freeze(servers: &[&dyn TestServer]) {
///     for server in servers {
///         server.pause();
///     }
/// }
/// let (redis, postgres) = (RedisServer::spawn(), PostgresServer::spawn());
/// freeze(&[&redis, &postgres]);
/// ```
///
/// Only the harness's servers implement it.
pub trait TestServer: Daemon {
    /// The port the server listens on for clients, on `127.0.0.1`.
    fn port(&self) -> u16 {
        self.process().port()
    }

    /// The server's socket address, `127.0.0.1:{port}`.
    fn addr(&self) -> SocketAddr {
        self.process().addr()
    }

    /// The server's temp dir, its working dir: its log and whatever else it keeps (see the
    /// server's own docs); removed on drop.
    fn dir(&self) -> &Path {
        self.process().dir()
    }

    /// The id of the server's process (PostgreSQL's postmaster), or `None` once the server
    /// was killed or has exited.
    fn pid(&self) -> Option<u32> {
        self.process().pid()
    }

    /// Whether the server process is alive (a paused server is alive).
    fn is_running(&self) -> bool {
        self.process().is_running()
    }

    /// Freezes the server with `SIGSTOP`, with every process it forked (PostgreSQL's
    /// backends): it keeps its connections but answers nothing, not even a new connection,
    /// until [`resume`](Self::resume), so its clients see their read timeouts and
    /// ZooKeeper's clients their sessions time out.
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    #[track_caller]
    fn pause(&self) {
        self.process().pause();
    }

    /// Resumes a server frozen by [`pause`](Self::pause) with `SIGCONT`.
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    #[track_caller]
    fn resume(&self) {
        self.process().resume();
    }

    /// Kills the server with `SIGKILL`, as a crash would, and waits until it and every
    /// process it forked are gone: every connection drops. The port and dir stay this
    /// server's: [`restart`](Self::restart) starts it again there. Killing a server that is
    /// not running does nothing.
    fn kill(&mut self) {
        self.process_mut().kill();
    }

    /// Kills the server if it is running and starts it again on the same port, with the
    /// same arguments and dir (what survives: see [`TestServer`]); waits until it is ready,
    /// as its `spawn` does (a node of a [`ZooKeeperEnsemble`](crate::ZooKeeperEnsemble),
    /// until it listens). The log is kept and appended to.
    ///
    /// # Panics
    ///
    /// If the server cannot be started again, e.g. because another process took the port.
    #[track_caller]
    fn restart(&mut self) {
        if let Err(e) = self.try_restart() {
            self.process().restart_failed(&e);
        }
    }

    /// [`restart`](Self::restart) that returns the error instead of panicking.
    fn try_restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        self.start()
    }

    /// The server log so far, of every run (a restarted server appends to it), with what
    /// the process wrote to stdout and stderr, e.g. a config error; for PostgreSQL and
    /// MariaDB, what `initdb` or `mariadb-install-db` printed comes first.
    fn log(&self) -> String {
        self.process().log()
    }
}

/// What a server gives [`TestServer`] to work with. It is not exported, so no type outside
/// the harness can implement `TestServer`.
pub trait Daemon {
    /// The server's process.
    fn process(&self) -> &ServerProcess;

    /// The server's process, to kill or start it.
    fn process_mut(&mut self) -> &mut ServerProcess;

    /// Spawns the server's process and waits until it is ready; on failure, leaves it
    /// killed.
    fn start(&mut self) -> Result<(), HarnessError>;
}
