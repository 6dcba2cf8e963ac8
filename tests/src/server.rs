//! One `redis-server` process on a free loopback port.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use redis::Value;

use crate::daemon::{Kind, ServerProcess, bind_any_port, on_a_free_port};
use crate::error::chain;
use crate::test_server::{Daemon, TestServer};
use crate::{HarnessError, ValueExt};

/// The binary [`RedisServer::spawn`] runs, looked up on `PATH`.
pub(crate) const REDIS_SERVER: &str = "redis-server";
/// How long a server may take to be ready once spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connect, read and write timeout of [`RedisServer::cmd`].
const CMD_TIMEOUT: Duration = Duration::from_secs(5);
/// Read timeout of one readiness probe; the loop around it has its own deadline.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How many random ports to draw when looking for one whose cluster bus port is free too.
const PORT_DRAWS: usize = 100;
/// Cluster nodes also listen on `port + 10000`, so their port must stay below this.
const MAX_CLUSTER_PORT: u16 = u16::MAX - CLUSTER_BUS_OFFSET;
const CLUSTER_BUS_OFFSET: u16 = 10000;
const LOG_FILE: &str = "redis.log";
/// How the harness names a `redis-server`, its temp dir and its log.
const REDIS: Kind = Kind {
    name: REDIS_SERVER,
    dir: "redis",
    tag: REDIS_SERVER,
    log_file: LOG_FILE,
    ready_timeout: READY_TIMEOUT,
    run_as: None,
    forks: false,
};

/// A `redis-server` process that this test started, on a free `127.0.0.1` port.
///
/// It runs without persistence (`--save ""`, `--appendonly no`) in its own temp dir, which also
/// holds its log. Dropping it kills the process (`SIGKILL`) and removes the dir; if the thread is
/// panicking, the server log is printed to stderr first, each line prefixed with the port.
/// Its port, process, faults and log are [`TestServer`]'s: [`kill`](TestServer::kill) loses
/// its data, [`restart`](TestServer::restart) starts it empty.
///
/// `RedisServer` is `Send + Sync`: share `&RedisServer` between threads freely.
pub struct RedisServer {
    process: ServerProcess,
    binary: String,
    args: Vec<OsString>,
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`.
    ///
    /// # Panics
    ///
    /// If the server cannot be started: `redis-server` is not on `PATH`, it exited early (the
    /// message quotes its log) or did not answer within 10 s.
    #[track_caller]
    pub fn spawn() -> RedisServer {
        or_panic(Self::try_spawn())
    }

    /// Starts a server and waits until it answers `PING`, or says why it could not.
    pub fn try_spawn() -> Result<RedisServer, HarnessError> {
        Self::spawn_inner(REDIS_SERVER, &[], false)
    }

    /// Starts a server with extra `redis-server` arguments, e.g. `["--maxmemory", "10mb"]`.
    ///
    /// They come after the harness's own arguments, so they override them; do not override
    /// `--port`, `--bind`, `--dir` or `--logfile`.
    ///
    /// # Panics
    ///
    /// As [`spawn`](Self::spawn), e.g. when an argument is invalid.
    #[track_caller]
    pub fn spawn_with(args: &[&str]) -> RedisServer {
        or_panic(Self::try_spawn_with(args))
    }

    /// [`spawn_with`](Self::spawn_with) that returns the error instead of panicking.
    pub fn try_spawn_with(args: &[&str]) -> Result<RedisServer, HarnessError> {
        Self::spawn_inner(REDIS_SERVER, args, false)
    }

    /// Starts a server from another binary, e.g. a path to a specific Redis build or a
    /// compatible server, with extra arguments as in [`spawn_with`](Self::spawn_with).
    ///
    /// A `binary` without a `/` is looked up on `PATH`.
    pub fn try_spawn_from(binary: &str, args: &[&str]) -> Result<RedisServer, HarnessError> {
        Self::spawn_inner(binary, args, false)
    }

    /// Starts `n` independent masters on distinct ports, e.g. for RedLock tests.
    ///
    /// # Panics
    ///
    /// As [`spawn`](Self::spawn).
    #[track_caller]
    pub fn spawn_many(n: usize) -> Vec<RedisServer> {
        (0..n).map(|_| or_panic(Self::try_spawn())).collect()
    }

    /// Starts a Redis Sentinel watching the master at `master_port` as `master_name`,
    /// from a config file in its own dir (a sentinel rewrites its config).
    pub(crate) fn spawn_sentinel(
        master_name: &str,
        master_port: u16,
        down_after: Duration,
    ) -> Result<RedisServer, HarnessError> {
        Self::start_on_free_port(REDIS_SERVER, false, |port, dir| {
            let conf = dir.join("sentinel.conf");
            let down_after_ms = down_after.as_millis();
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {log}\n\
                 sentinel monitor {master_name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {master_name} {down_after_ms}\n\
                 sentinel failover-timeout {master_name} 10000\n",
                dir = dir.display(),
                log = dir.join(LOG_FILE).display(),
            );
            fs::write(&conf, text)
                .map_err(|e| HarnessError::io(format!("write {}", conf.display()), e))?;
            Ok(vec![conf.into(), "--sentinel".into()])
        })
    }

    pub(crate) fn spawn_inner(
        binary: &str,
        extra: &[&str],
        cluster: bool,
    ) -> Result<RedisServer, HarnessError> {
        Self::start_on_free_port(binary, cluster, |port, dir| {
            Ok(server_args(port, dir, cluster, extra))
        })
    }

    /// Starts `binary` with the arguments `args` gives for a free port and its new dir;
    /// tries another port should the chosen one be taken before the server binds it.
    fn start_on_free_port(
        binary: &str,
        cluster: bool,
        args: impl Fn(u16, &Path) -> Result<Vec<OsString>, HarnessError>,
    ) -> Result<RedisServer, HarnessError> {
        on_a_free_port(|| {
            let port = free_port(cluster)?;
            let process = ServerProcess::create(REDIS, port)?;
            let mut server = RedisServer {
                args: args(port, process.dir())?,
                process,
                binary: binary.to_owned(),
            };
            server.start()?;
            Ok(server)
        })
    }

    /// The server's URL, `redis://127.0.0.1:{port}/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port())
    }

    /// Sends one command over a fresh connection and reads the reply, with a 5 s timeout.
    ///
    /// An error reply is `Ok(Value::ServerError(..))`; `Err` means the command could not be
    /// sent or its reply read (e.g. [`HarnessError::NotRunning`] after [`kill`](Self::kill),
    /// or a timeout while [paused](Self::pause)).
    pub fn cmd(&self, args: &[&str]) -> Result<Value, HarnessError> {
        self.cmd_with_timeout(args, CMD_TIMEOUT)
    }

    /// [`cmd`](Self::cmd) with another connect, write and read timeout.
    pub fn cmd_with_timeout(
        &self,
        args: &[&str],
        timeout: Duration,
    ) -> Result<Value, HarnessError> {
        if !self.is_running() {
            // Never connect then: the port may already belong to another test's server.
            return Err(HarnessError::NotRunning { port: self.port() });
        }
        request(self.port(), args, timeout)
    }

    /// How many times the server has run `command` (lowercase, e.g. `"evalsha"`) since it
    /// started or `CONFIG RESETSTAT`, from `INFO commandstats`; 0 if never.
    ///
    /// # Panics
    ///
    /// If the server does not answer.
    pub fn calls(&self, command: &str) -> u64 {
        let info = self
            .cmd(&["INFO", "commandstats"])
            .expect("INFO commandstats");
        let text = info.as_str().unwrap_or_default();
        let prefix = format!("cmdstat_{command}:calls=");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl TestServer for RedisServer {}

impl Daemon for RedisServer {
    fn process(&self) -> &ServerProcess {
        &self.process
    }

    fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// Spawns the process and waits until it answers `PING`; on failure, leaves it killed.
    fn start(&mut self) -> Result<(), HarnessError> {
        let port = self.port();
        self.process.start(
            Command::new(&self.binary).args(&self.args),
            |e| spawn_error(&self.binary, e),
            |_, pid| {
                let pong = request(port, &["PING"], PROBE_TIMEOUT)
                    .is_ok_and(|reply| reply.as_str() == Some("PONG"));
                if !pong {
                    return Ok(false);
                }
                // Make sure the PONG came from our process, not from one that took the port.
                match server_pid(port) {
                    Some(answering) if answering == pid => Ok(true),
                    Some(_) => Err(HarnessError::PortInUse { port }),
                    None => Ok(false),
                }
            },
        )
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.process.debug_as("RedisServer", f)
    }
}

#[track_caller]
fn or_panic<T>(result: Result<T, HarnessError>) -> T {
    match result {
        Ok(value) => value,
        // Already a complete one-line instruction.
        Err(e @ HarnessError::BinaryNotFound { .. }) => panic!("{e}"),
        Err(e) => panic!("could not start a test redis-server: {}", chain(&e)),
    }
}

pub(crate) fn spawn_error(binary: &str, error: io::Error) -> HarnessError {
    if error.kind() == io::ErrorKind::NotFound {
        HarnessError::BinaryNotFound {
            binary: binary.to_owned(),
        }
    } else {
        HarnessError::io(format!("run {binary}"), error)
    }
}

/// A port that was free a moment ago; for a cluster node, one whose bus port is free too.
fn free_port(cluster: bool) -> Result<u16, HarnessError> {
    for _ in 0..PORT_DRAWS {
        let (_listener, port) = bind_any_port()?;
        if !cluster {
            return Ok(port);
        }
        if port < MAX_CLUSTER_PORT
            && TcpListener::bind((Ipv4Addr::LOCALHOST, port + CLUSTER_BUS_OFFSET)).is_ok()
        {
            return Ok(port);
        }
    }
    Err(HarnessError::NoFreePort)
}

fn server_args(port: u16, dir: &Path, cluster: bool, extra: &[&str]) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |flag: &str, value: OsString| {
        args.push(flag.into());
        args.push(value);
    };
    push("--port", port.to_string().into());
    push("--bind", "127.0.0.1".into());
    push("--save", "".into());
    push("--appendonly", "no".into());
    push("--dir", dir.into());
    push("--logfile", dir.join(LOG_FILE).into());
    if cluster {
        push("--cluster-enabled", "yes".into());
        push("--cluster-config-file", dir.join("nodes.conf").into());
        push("--cluster-node-timeout", "2000".into());
    }
    args.extend(extra.iter().map(OsString::from));
    args
}

/// One command over a fresh connection to `127.0.0.1:port`.
pub(crate) fn request(port: u16, args: &[&str], timeout: Duration) -> Result<Value, HarnessError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let name = args.first().copied().unwrap_or_default();
    let stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| HarnessError::io(format!("connect to {addr}"), e))?;
    let configure = stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .and_then(|()| stream.set_nodelay(true));
    configure.map_err(|e| HarnessError::io(format!("configure the connection to {addr}"), e))?;
    (&stream)
        .write_all(&redis::Cmd::new().arg(args).get_packed_command())
        .map_err(|e| HarnessError::io(format!("send {name} to {addr}"), e))?;
    redis::Parser::new()
        .parse_value(&stream)
        .map_err(|source| HarnessError::Reply {
            context: format!("read the reply to {name} from {addr}"),
            source,
        })
}

/// The `process_id` in `INFO server` of whatever answers on `port`.
fn server_pid(port: u16) -> Option<u32> {
    let info = request(port, &["INFO", "server"], PROBE_TIMEOUT).ok()?;
    info_field(info.as_str()?, "process_id")?.parse().ok()
}

/// The value of `field:value` in an `INFO`-style reply.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<RedisServer>();
    }

    #[test]
    fn missing_binary_panics_with_one_line() {
        let payload = std::panic::catch_unwind(|| {
            or_panic(RedisServer::spawn_inner(
                "redis-server-lock-tests-missing",
                &[],
                false,
            ))
        })
        .expect_err("spawning a missing binary must panic");
        let message = payload
            .downcast_ref::<String>()
            .expect("panic payload is a String");
        assert_eq!(
            message,
            "redis-server-lock-tests-missing not found on PATH: install it with \
             \"apt-get install -y redis-server\" (Debian/Ubuntu) or \"brew install redis\" (macOS)"
        );
    }

    #[test]
    fn default_binary_message_is_the_documented_line() {
        let e = HarnessError::BinaryNotFound {
            binary: REDIS_SERVER.to_owned(),
        };
        assert_eq!(
            e.to_string(),
            "redis-server not found on PATH: install it with \"apt-get install -y redis-server\" \
             (Debian/Ubuntu) or \"brew install redis\" (macOS)"
        );
    }

    #[test]
    fn a_taken_port_is_detected_not_mistaken_for_ours() {
        let first = RedisServer::spawn();
        let port = first.port();
        let process = ServerProcess::create(REDIS, port).unwrap();
        let mut second = RedisServer {
            args: server_args(port, process.dir(), false, &[]),
            process,
            binary: REDIS_SERVER.to_owned(),
        };
        // `first` answers PING on that port, but it is not `second`'s process.
        let err = second.start().unwrap_err();
        assert!(
            matches!(err, HarnessError::PortInUse { port: p } if p == port),
            "{err:?}"
        );
        assert!(!second.is_running());
        assert_eq!(first.cmd(&["PING"]).unwrap().as_str(), Some("PONG"));
    }

    #[test]
    fn cluster_ports_leave_room_for_the_bus() {
        for _ in 0..20 {
            let port = free_port(true).unwrap();
            assert!(port < MAX_CLUSTER_PORT, "{port}");
        }
    }

    #[test]
    fn info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\nprocess_id:42\r\nprocess_supervised:no\r\n";
        assert_eq!(info_field(info, "process_id"), Some("42"));
        assert_eq!(info_field(info, "process"), None);
        assert_eq!(info_field(info, "missing"), None);
    }
}
