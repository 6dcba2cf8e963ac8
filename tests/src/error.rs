//! The harness error type.

use std::error::Error;
use std::fmt;
use std::io;
use std::process::ExitStatus;
use std::time::Duration;

/// Why the harness could not start, reach or drive a test server.
///
/// The messages are meant to be read in a failing test's output: they name the port and, when
/// the server died, end with the last lines of its log.
#[derive(Debug)]
#[non_exhaustive]
pub enum HarnessError {
    /// The server binary (`redis-server`, or `redis-cli` for a cluster) is not on `PATH`.
    BinaryNotFound {
        /// The program that could not be found.
        binary: String,
    },
    /// A program or jar that ZooKeeper or a Curator peer needs is missing, e.g. `java` or
    /// Debian's `/usr/share/java/zookeeper.jar`.
    NotInstalled {
        /// What is missing, e.g. "java not found on PATH".
        missing: String,
        /// The Debian package that installs it.
        package: &'static str,
    },
    /// An I/O operation failed; `context` says which one.
    Io {
        /// What the harness was doing, e.g. "connect to 127.0.0.1:40123".
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The server process exited before it was ready (a Redis server answers `PING`, a
    /// ZooKeeper server `srvr` with its mode).
    Exited {
        /// The port it was started on.
        port: u16,
        /// Its exit status.
        status: ExitStatus,
        /// The last lines of its log.
        log_tail: String,
    },
    /// The server was not ready before the deadline.
    NotReady {
        /// The port it was started on.
        port: u16,
        /// How long the harness waited.
        waited: Duration,
        /// The last lines of its log.
        log_tail: String,
    },
    /// The port was taken by another process before the server could bind it.
    PortInUse {
        /// The port that was taken.
        port: u16,
    },
    /// No suitable free loopback port was found.
    NoFreePort,
    /// The command needs a running server, but this one was killed.
    NotRunning {
        /// The server's port.
        port: u16,
    },
    /// A reply could not be read: the connection failed or timed out, or the server sent
    /// bytes that are not RESP; `context` says which reply.
    Reply {
        /// What the harness was reading, e.g. "read the reply to GET from 127.0.0.1:40123".
        context: String,
        /// The underlying error.
        source: redis::RedisError,
    },
    /// `redis-cli --cluster create` failed.
    ClusterCreate {
        /// Its exit status, `None` if it was killed after the deadline.
        status: Option<ExitStatus>,
        /// What it printed (stdout and stderr).
        output: String,
    },
    /// The cluster did not reach `cluster_state:ok` with every slot served before the deadline.
    ClusterNotReady {
        /// How long the harness waited.
        waited: Duration,
        /// What the last check saw.
        detail: String,
    },
    /// A ZooKeeper ensemble had no leader serving, with every running node following it,
    /// before the deadline.
    NoQuorum {
        /// How long the harness waited.
        waited: Duration,
        /// What each node said last.
        detail: String,
    },
    /// A helper process (`javac`, a Curator peer, the ZooKeeper CLI) failed or did not finish
    /// in time.
    ProcessFailed {
        /// Which process, e.g. "Curator peer 2 of 3".
        what: String,
        /// Its exit status, `None` if it was killed after the deadline.
        status: Option<ExitStatus>,
        /// What it printed (stdout and stderr).
        output: String,
    },
}

impl HarnessError {
    /// Whether this is an I/O timeout, e.g. a read from a paused server, or a helper process
    /// (`psql`, the `mariadb` client) that did not finish by its deadline.
    pub fn is_timeout(&self) -> bool {
        match self {
            HarnessError::ProcessFailed { status: None, .. } => true,
            HarnessError::Io { source, .. } => {
                matches!(
                    source.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                )
            }
            HarnessError::Reply { source, .. } => source.is_timeout(),
            _ => false,
        }
    }

    /// Whether the binary was not found on `PATH`, or another program or jar the server needs
    /// is not installed.
    pub fn is_binary_not_found(&self) -> bool {
        matches!(
            self,
            HarnessError::BinaryNotFound { .. } | HarnessError::NotInstalled { .. }
        )
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HarnessError::BinaryNotFound { binary } => write!(
                f,
                "{binary} not found on PATH: install it with \"apt-get install -y redis-server\" \
                 (Debian/Ubuntu) or \"brew install redis\" (macOS)"
            ),
            HarnessError::NotInstalled { missing, package } => write!(
                f,
                "{missing}: install it with \"apt-get install -y {package}\" (Debian/Ubuntu)"
            ),
            HarnessError::Io { context, .. } | HarnessError::Reply { context, .. } => {
                write!(f, "failed to {context}")
            }
            HarnessError::Exited {
                port,
                status,
                log_tail,
            } => write!(
                f,
                "the server on port {port} exited ({status}) before it was ready; \
                 last lines of its log:\n{log_tail}"
            ),
            HarnessError::NotReady {
                port,
                waited,
                log_tail,
            } => write!(
                f,
                "the server on port {port} was not ready within {waited:?}; \
                 last lines of its log:\n{log_tail}"
            ),
            HarnessError::PortInUse { port } => {
                write!(f, "port {port} was taken before the server could bind it")
            }
            HarnessError::NoFreePort => write!(f, "found no free loopback port"),
            HarnessError::NotRunning { port } => {
                write!(
                    f,
                    "the server on port {port} is not running (it was killed)"
                )
            }
            HarnessError::ClusterCreate { status, output } => {
                match status {
                    Some(status) => write!(f, "redis-cli --cluster create failed ({status})")?,
                    None => write!(f, "redis-cli --cluster create did not finish in time")?,
                }
                write!(f, "; its output:\n{output}")
            }
            HarnessError::ClusterNotReady { waited, detail } => write!(
                f,
                "cluster did not serve all 16384 slots with cluster_state:ok within {waited:?}: \
                 {detail}"
            ),
            HarnessError::NoQuorum { waited, detail } => write!(
                f,
                "the ZooKeeper ensemble had no leader with every running node following it \
                 within {waited:?}: {detail}"
            ),
            HarnessError::ProcessFailed {
                what,
                status,
                output,
            } => {
                match status {
                    Some(status) => write!(f, "{what} failed ({status})")?,
                    None => write!(f, "{what} did not finish in time")?,
                }
                write!(f, "; its output:\n{output}")
            }
        }
    }
}

impl Error for HarnessError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            HarnessError::Io { source, .. } => Some(source),
            HarnessError::Reply { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The error and its sources on one line, `a: b: c`, for panic messages.
pub(crate) fn chain(err: &dyn Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
