//! One `redis-server` process on a free loopback port.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use crate::error::chain;
use crate::{HarnessError, POLL_INTERVAL, ValueExt};

/// The binary [`RedisServer::spawn`] runs, looked up on `PATH`.
pub(crate) const REDIS_SERVER: &str = "redis-server";
/// How long a server may take to answer its first `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connect, read and write timeout of [`RedisServer::cmd`].
const CMD_TIMEOUT: Duration = Duration::from_secs(5);
/// Read timeout of one readiness probe; the loop around it has its own deadline.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How many fresh ports to try when the chosen one gets taken before the server binds it.
const SPAWN_ATTEMPTS: usize = 5;
/// How many random ports to draw when looking for one whose cluster bus port is free too.
const PORT_DRAWS: usize = 100;
/// Cluster nodes also listen on `port + 10000`, so their port must stay below this.
const MAX_CLUSTER_PORT: u16 = u16::MAX - CLUSTER_BUS_OFFSET;
const CLUSTER_BUS_OFFSET: u16 = 10000;
/// Lines of the log quoted in error messages.
const LOG_TAIL_LINES: usize = 30;
const LOG_FILE: &str = "redis.log";

/// Makes temp dir names unique within the process (the pid makes them unique across processes).
static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// A `redis-server` process that this test started, on a free `127.0.0.1` port.
///
/// It runs without persistence (`--save ""`, `--appendonly no`) in its own temp dir, which also
/// holds its log. Dropping it kills the process (`SIGKILL`) and removes the dir; if the thread is
/// panicking, the server log is printed to stderr first, each line prefixed with the port.
///
/// `RedisServer` is `Send + Sync`: share `&RedisServer` between threads freely.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    binary: String,
    args: Vec<OsString>,
    /// `None` once killed. Behind a mutex because `is_running` needs `Child::try_wait`.
    child: Mutex<Option<Child>>,
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
        let mut last_error = HarnessError::NoFreePort;
        for _ in 0..SPAWN_ATTEMPTS {
            let port = free_port(cluster)?;
            let dir = make_dir("redis", port)?;
            let mut server = RedisServer {
                args: args(port, &dir)?,
                port,
                dir,
                binary: binary.to_owned(),
                child: Mutex::new(None),
            };
            match server.start() {
                Ok(()) => return Ok(server),
                // Someone bound the port between our probe and the server's bind: try another.
                // Dropping `server` removes its dir.
                Err(e @ HarnessError::PortInUse { .. }) => last_error = e,
                Err(e) => return Err(e),
            }
        }
        Err(last_error)
    }

    /// The server's TCP port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's socket address, `127.0.0.1:{port}`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The server's URL, `redis://127.0.0.1:{port}/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's temp dir (its working dir, holding its log); removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process id, or `None` once the server was killed or has exited.
    pub fn pid(&self) -> Option<u32> {
        let mut child = self.child();
        let child = child.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// Freezes the server with `SIGSTOP`: it keeps its connections but answers nothing until
    /// [`resume`](Self::resume), so clients with a read timeout see that timeout.
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    #[track_caller]
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Resumes a server frozen by [`pause`](Self::pause) with `SIGCONT`.
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent.
    #[track_caller]
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Kills the server with `SIGKILL` and waits for it to exit; its data is lost.
    ///
    /// The port stays this server's: [`restart`](Self::restart) starts it again there. Killing a
    /// server that is not running does nothing.
    pub fn kill(&mut self) {
        if let Some(mut child) = self
            .child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            // Fails only if it already exited; `wait` reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port with the same arguments and empty data (the
    /// log is kept and appended to), killing it first if it is running; waits for `PING`.
    ///
    /// A cluster node keeps its `nodes.conf`, so it rejoins its cluster with its slots.
    ///
    /// # Panics
    ///
    /// If the server cannot be started again, e.g. because another process took the port.
    #[track_caller]
    pub fn restart(&mut self) {
        if let Err(e) = self.try_restart() {
            panic!(
                "could not restart the test redis-server on port {}: {}",
                self.port,
                chain(&e)
            );
        }
    }

    /// [`restart`](Self::restart) that returns the error instead of panicking.
    pub fn try_restart(&mut self) -> Result<(), HarnessError> {
        self.kill();
        self.start()
    }

    /// Whether the server process is alive (a paused server is alive).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
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
            return Err(HarnessError::NotRunning { port: self.port });
        }
        request(self.port, args, timeout)
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

    /// The server log so far (every run of it, for a restarted server).
    ///
    /// It also holds what the process wrote to stdout and stderr, e.g. a config error.
    pub fn log(&self) -> String {
        fs::read(self.log_path())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spawns the process and waits until it answers `PING`; on failure, leaves it killed.
    fn start(&mut self) -> Result<(), HarnessError> {
        let log_path = self.log_path();
        let log_start = fs::metadata(&log_path).map_or(0, |m| m.len());
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| HarnessError::io(format!("open {}", log_path.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| HarnessError::io(format!("open {}", log_path.display()), e))?;
        let child = Command::new(&self.binary)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| spawn_error(&self.binary, e))?;
        *self.child.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(child);
        let ready = self.wait_ready(log_start);
        if ready.is_err() {
            self.kill();
        }
        ready
    }

    fn wait_ready(&mut self, log_start: u64) -> Result<(), HarnessError> {
        let started = Instant::now();
        loop {
            let (exited, pid) = {
                let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
                let child = child.as_mut().expect("wait_ready runs right after spawn");
                let exited = child
                    .try_wait()
                    .map_err(|e| HarnessError::io("wait for redis-server", e))?;
                (exited, child.id())
            };
            if let Some(status) = exited {
                let log = self.log_since(log_start);
                if log.contains("Address already in use") {
                    return Err(HarnessError::PortInUse { port: self.port });
                }
                return Err(HarnessError::Exited {
                    port: self.port,
                    status,
                    log_tail: tail(&log),
                });
            }
            let pong = request(self.port, &["PING"], PROBE_TIMEOUT)
                .is_ok_and(|reply| reply.as_str() == Some("PONG"));
            if pong {
                // Make sure the PONG came from our process, not from one that took the port.
                match server_pid(self.port) {
                    Some(answering) if answering == pid => return Ok(()),
                    Some(_) => return Err(HarnessError::PortInUse { port: self.port }),
                    None => {}
                }
            }
            if started.elapsed() >= READY_TIMEOUT {
                return Err(HarnessError::NotReady {
                    port: self.port,
                    waited: READY_TIMEOUT,
                    log_tail: tail(&self.log_since(log_start)),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// The log written since byte `start`, i.e. by the current run.
    fn log_since(&self, start: u64) -> String {
        let log = self.log();
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        log.get(start..).unwrap_or(&log).to_owned()
    }

    #[track_caller]
    fn signal(&self, signal: &str) {
        let Some(pid) = self.pid() else {
            panic!(
                "cannot send SIG{signal} to the test redis-server on port {}: it is not running",
                self.port
            );
        };
        send_signal(pid, signal);
    }
}

/// Sends `SIG{signal}` to `pid` with `kill`.
///
/// # Panics
///
/// If the signal cannot be sent.
#[track_caller]
pub(crate) fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("`kill -{signal} {pid}` failed ({status})"),
        Err(e) => panic!("could not run `kill -{signal} {pid}`: {e}"),
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir)
            .finish()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if thread::panicking() {
            print_log(&format!("[redis-server :{}] ", self.port), &self.log_path());
        }
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Prints the log at `path` to stderr, each line prefixed with `prefix`.
pub(crate) fn print_log(prefix: &str, path: &Path) {
    let log = fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let mut out = format!("{prefix}log of {}:\n", path.display());
    for line in log.lines() {
        out.push_str(prefix);
        out.push_str(line);
        out.push('\n');
    }
    // One call, so logs of servers dropped on other threads do not interleave.
    eprint!("{out}");
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
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| HarnessError::io("bind 127.0.0.1:0", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::io("read the address of a bound socket", e))?
            .port();
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

/// Creates `<tmp>/lock-tests-<kind>-<pid>-<n>-<port>`.
pub(crate) fn make_dir(kind: &str, port: u16) -> Result<PathBuf, HarnessError> {
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "lock-tests-{kind}-{}-{n}-{port}",
        std::process::id()
    ));
    let created = match fs::create_dir(&dir) {
        // Left behind by an earlier, killed process that had our pid: it is not in use.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_dir_all(&dir).and_then(|()| fs::create_dir(&dir))
        }
        other => other,
    };
    created.map_err(|e| HarnessError::io(format!("create {}", dir.display()), e))?;
    Ok(dir)
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

/// The last lines of a log, for error messages.
pub(crate) fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    if tail.is_empty() {
        "(empty log)".to_owned()
    } else {
        tail
    }
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
        let dir = make_dir("redis", port).unwrap();
        let mut second = RedisServer {
            args: server_args(port, &dir, false, &[]),
            port,
            dir,
            binary: REDIS_SERVER.to_owned(),
            child: Mutex::new(None),
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

    #[test]
    fn tail_keeps_the_last_lines() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let t = tail(&log);
        assert!(t.starts_with("line 70\n") && t.ends_with("line 99"), "{t}");
        assert_eq!(tail(""), "(empty log)");
    }
}
