//! The process behind every test server (Redis, ZooKeeper, PostgreSQL, MariaDB): its port,
//! temp dir, the account it runs as, the processes it forked, its log and its lifecycle.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::chain;
use crate::process::Captured;
use crate::{HarnessError, POLL_INTERVAL};

/// Lines of the log quoted in error messages.
const LOG_TAIL_LINES: usize = 30;
/// Ports of database servers that may run on the machine for other uses (PostgreSQL's and
/// MySQL's defaults): never given to a test database server, so the harness never connects
/// to them.
const SYSTEM_PORTS: &[u16] = &[5432, 3306];
/// How long the processes a killed server forked may take to exit.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes temp dir names unique within the process (the pid makes them unique across processes).
static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// What kind of server a [`ServerProcess`] runs, as its messages and files name it, and how
/// it is run.
#[derive(Clone, Copy)]
pub(crate) struct Kind {
    /// In messages, after "the test": `redis-server`, `ZooKeeper server`.
    pub(crate) name: &'static str,
    /// Its temp dir is `lock-tests-{dir}-..`.
    pub(crate) dir: &'static str,
    /// Each line of its log printed on panic starts with `[{tag} :{port}] `.
    pub(crate) tag: &'static str,
    /// Its log, in its temp dir: what it logs and what it writes to stdout and stderr.
    pub(crate) log_file: &'static str,
    /// How long it may take to be ready once spawned.
    pub(crate) ready_timeout: Duration,
    /// `Some` for a server that refuses to run as root: the account it runs as then.
    pub(crate) run_as: Option<RunAs>,
    /// Whether pause, resume and kill reach the processes it forked too (a PostgreSQL
    /// backend is one per connection).
    pub(crate) forks: bool,
}

/// The account a server runs as when the tests run as root, which `initdb` and `mariadbd`
/// refuse.
#[derive(Clone, Copy)]
pub(crate) struct RunAs {
    /// E.g. `postgres`.
    pub(crate) user: &'static str,
    /// The Debian package that creates `user`.
    pub(crate) package: &'static str,
}

/// The uid and gid of a [`RunAs`] user.
#[derive(Clone, Copy, Debug)]
struct Account {
    uid: u32,
    gid: u32,
}

/// A server process on a `127.0.0.1` port, with its own temp dir that holds its log.
///
/// It is spawned by [`start`](Self::start), any number of times, each run appending to the
/// log. Dropping it kills the process (`SIGKILL`) and, for a kind that
/// [forks](Kind::forks), every process it forked, and removes the dir; if the thread is
/// panicking, the log is printed to stderr first, each line prefixed with the port.
///
/// Public, in a private module, as the servers' [`Daemon`](crate::test_server::Daemon)
/// hands it out; no one outside the crate can name it.
pub struct ServerProcess {
    kind: Kind,
    port: u16,
    dir: PathBuf,
    /// `Some` when the tests run as root and the kind says whom to run as.
    account: Option<Account>,
    /// Where the current run's lines start in the log.
    log_start: u64,
    /// `None` once killed. Behind a mutex because `is_running` needs `Child::try_wait`.
    child: Mutex<Option<Child>>,
    /// Between [`pause`](Self::pause) and [`resume`](Self::resume) or [`kill`](Self::kill).
    paused: AtomicBool,
}

impl ServerProcess {
    /// A server on `port`, with a new temp dir, not started yet. When the tests run as root
    /// and the kind [runs as](Kind::run_as) another account, the dir is that account's.
    pub(crate) fn create(kind: Kind, port: u16) -> Result<ServerProcess, HarnessError> {
        let mut process = ServerProcess {
            kind,
            port,
            dir: make_dir(kind.dir, port)?,
            account: None,
            log_start: 0,
            child: Mutex::new(None),
            paused: AtomicBool::new(false),
        };
        let Some(run_as) = kind.run_as else {
            return Ok(process);
        };
        // The dir is created with our effective uid: 0 is root.
        let owner = fs::metadata(&process.dir)
            .map_err(|e| HarnessError::io(format!("stat {}", process.dir.display()), e))?
            .uid();
        if owner != 0 {
            return Ok(process);
        }
        let account = account(run_as.user).ok_or_else(|| HarnessError::NotInstalled {
            missing: format!(
                "no user {} to run {} as (it refuses to run as root)",
                run_as.user, kind.tag
            ),
            package: run_as.package,
        })?;
        std::os::unix::fs::chown(&process.dir, Some(account.uid), Some(account.gid))
            .map_err(|e| HarnessError::io(format!("chown {}", process.dir.display()), e))?;
        process.account = Some(account);
        Ok(process)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:{port}`.
    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(self.kind.log_file)
    }

    /// The log so far, of every run (with what the setup commands printed).
    pub(crate) fn log(&self) -> String {
        fs::read(self.log_path())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// The log written by the current run.
    pub(crate) fn run_log(&self) -> String {
        let log = self.log();
        let start = usize::try_from(self.log_start).unwrap_or(usize::MAX);
        log.get(start..).unwrap_or(&log).to_owned()
    }

    /// The process id, or `None` once killed or exited.
    pub(crate) fn pid(&self) -> Option<u32> {
        let mut child = self.child();
        let child = child.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    pub(crate) fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Whether it is frozen by [`pause`](Self::pause).
    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Sends `SIGSTOP` (to the processes it forked too, for a kind that forks).
    ///
    /// # Panics
    ///
    /// If the process is not running or the signal cannot be sent.
    #[track_caller]
    pub(crate) fn pause(&self) {
        self.signal("STOP");
        self.paused.store(true, Ordering::Relaxed);
    }

    /// Sends `SIGCONT` (to the processes it forked too, for a kind that forks).
    ///
    /// # Panics
    ///
    /// As [`pause`](Self::pause).
    #[track_caller]
    pub(crate) fn resume(&self) {
        self.signal("CONT");
        self.paused.store(false, Ordering::Relaxed);
    }

    /// Kills the process with `SIGKILL` and waits for it to exit, and for a kind that forks,
    /// until every process it forked is gone too; nothing if it is not running.
    pub(crate) fn kill(&mut self) {
        *self.paused.get_mut() = false;
        let Some(mut child) = self
            .child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        let forked = if self.kind.forks {
            children(child.id())
        } else {
            Vec::new()
        };
        // Fails only if it already exited; `wait` reaps it either way.
        let _ = child.kill();
        let _ = child.wait();
        signal_quietly(&forked, "KILL");
        // Until they are gone, they may hold the server's shared memory or files, and a
        // restarted server would refuse to start.
        let started = Instant::now();
        while forked.iter().any(|&pid| is_alive(pid)) && started.elapsed() < REAP_TIMEOUT {
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// `program` as the server's account, in its dir.
    pub(crate) fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command.current_dir(&self.dir);
        if let Some(account) = self.account {
            // std drops root's supplementary groups before it sets the uid.
            command.gid(account.gid).uid(account.uid);
        }
        command
    }

    /// Runs a setup command (`initdb`, `mariadb-install-db`) to its end, within `timeout`,
    /// and appends what it printed to the log; `package` installs it.
    pub(crate) fn setup(
        &self,
        mut command: Command,
        timeout: Duration,
        package: &'static str,
    ) -> Result<(), HarnessError> {
        let what = command.get_program().to_string_lossy().into_owned();
        let run = Captured::spawn(&mut command, what, |program, e| {
            not_installed(program, e, package)
        })?;
        let output = run.wait(Instant::now() + timeout);
        let text = match &output {
            Ok(text) => text.as_str(),
            Err(HarnessError::ProcessFailed { output, .. }) => output.as_str(),
            Err(_) => "",
        };
        self.open_log().and_then(|mut log| {
            log.write_all(text.as_bytes())
                .map_err(|e| HarnessError::io(format!("write {}", self.log_path().display()), e))
        })?;
        output.map(drop)
    }

    /// Spawns `command` with its stdout and stderr appended to the log (`spawn_error` says
    /// why it could not be), then calls `ready` with the process and its id every 5 ms until
    /// it says the server is ready, the process exits or the kind's ready timeout passes. On
    /// failure, leaves it killed; [`HarnessError::PortInUse`] if another process has the port.
    pub(crate) fn start(
        &mut self,
        command: &mut Command,
        spawn_error: impl FnOnce(io::Error) -> HarnessError,
        ready: impl FnMut(&ServerProcess, u32) -> Result<bool, HarnessError>,
    ) -> Result<(), HarnessError> {
        self.log_start = fs::metadata(self.log_path()).map_or(0, |m| m.len());
        let child = command
            .stdin(Stdio::null())
            .stdout(self.open_log()?)
            .stderr(self.open_log()?)
            .spawn()
            .map_err(spawn_error)?;
        *self.child.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(child);
        let started = self.wait_ready(ready);
        if started.is_err() {
            self.kill();
        }
        started
    }

    /// Panics with why the server could not be restarted.
    #[track_caller]
    pub(crate) fn restart_failed(&self, error: &HarnessError) -> ! {
        panic!(
            "could not restart the test {} on port {}: {}",
            self.kind.name,
            self.port,
            chain(error)
        );
    }

    /// Formats the server as `{name} { port, pid, dir }`.
    pub(crate) fn debug_as(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir)
            .finish()
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn open_log(&self) -> Result<File, HarnessError> {
        let path = self.log_path();
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| HarnessError::io(format!("open {}", path.display()), e))
    }

    fn wait_ready(
        &mut self,
        mut ready: impl FnMut(&ServerProcess, u32) -> Result<bool, HarnessError>,
    ) -> Result<(), HarnessError> {
        let started = Instant::now();
        loop {
            let pid = self.check_alive()?;
            if ready(self, pid)? {
                return Ok(());
            }
            if started.elapsed() >= self.kind.ready_timeout {
                return Err(HarnessError::NotReady {
                    port: self.port,
                    waited: self.kind.ready_timeout,
                    log_tail: tail(&self.run_log()),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// The process id while the process runs; why it exited otherwise.
    fn check_alive(&mut self) -> Result<u32, HarnessError> {
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        let child = child.as_mut().expect("wait_ready runs right after spawn");
        let exited = child
            .try_wait()
            .map_err(|e| HarnessError::io(format!("wait for the test {}", self.kind.name), e))?;
        let Some(status) = exited else {
            return Ok(child.id());
        };
        let log = self.run_log();
        if log.contains("Address already in use") {
            return Err(HarnessError::PortInUse { port: self.port });
        }
        Err(HarnessError::Exited {
            port: self.port,
            status,
            log_tail: tail(&log),
        })
    }

    /// Prints the log to stderr, each line prefixed with `[{tag} :{port}] `.
    fn print_log(&self) {
        let prefix = format!("[{} :{}] ", self.kind.tag, self.port);
        let mut out = format!("{prefix}log of {}:\n", self.log_path().display());
        for line in self.log().lines() {
            out.push_str(&prefix);
            out.push_str(line);
            out.push('\n');
        }
        // One call, so logs of servers dropped on other threads do not interleave.
        eprint!("{out}");
    }

    #[track_caller]
    fn signal(&self, signal: &str) {
        let Some(pid) = self.pid() else {
            panic!(
                "cannot send SIG{signal} to the test {} on port {}: it is not running",
                self.kind.name, self.port
            );
        };
        if !self.kind.forks {
            send_signal(pid, signal);
        } else if signal == "CONT" {
            // The children first: a resumed server must find them resumed.
            signal_quietly(&children(pid), signal);
            send_signal(pid, signal);
        } else {
            // The server first, so that it forks no child we would miss.
            send_signal(pid, signal);
            signal_quietly(&children(pid), signal);
        }
    }
}

impl fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.debug_as("ServerProcess", f)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if thread::panicking() {
            self.print_log();
        }
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
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

/// A program that could not be run: not installed (`package` installs it), or another
/// I/O error.
pub(crate) fn not_installed(
    program: &str,
    error: io::Error,
    package: &'static str,
) -> HarnessError {
    if error.kind() == io::ErrorKind::NotFound {
        HarnessError::NotInstalled {
            missing: format!("{program} not found"),
            package,
        }
    } else {
        HarnessError::io(format!("run {program}"), error)
    }
}

/// How many fresh ports to try when the chosen one gets taken before the server binds it.
const SPAWN_ATTEMPTS: usize = 5;

/// Calls `start` (which starts a server on a port it draws) again while it fails with
/// [`HarnessError::PortInUse`]: someone bound the port between the draw and the server's
/// bind. Each failed try's server is dropped, which frees its dir; after
/// `SPAWN_ATTEMPTS` tries, the last such error.
pub(crate) fn on_a_free_port<T>(
    mut start: impl FnMut() -> Result<T, HarnessError>,
) -> Result<T, HarnessError> {
    let mut last_error = HarnessError::NoFreePort;
    for _ in 0..SPAWN_ATTEMPTS {
        match start() {
            Err(e @ HarnessError::PortInUse { .. }) => last_error = e,
            other => return other,
        }
    }
    Err(last_error)
}

/// A port for a database server that was free a moment ago, none of [`SYSTEM_PORTS`].
pub(crate) fn free_port() -> Result<u16, HarnessError> {
    // Held open together, so that the next draw is another port.
    let mut listeners = Vec::new();
    loop {
        let (listener, port) = bind_any_port()?;
        if !SYSTEM_PORTS.contains(&port) {
            return Ok(port);
        }
        listeners.push(listener);
    }
}

/// A listener on `127.0.0.1` and a port the OS chose, which stays free while it is held.
pub(crate) fn bind_any_port() -> Result<(TcpListener, u16), HarnessError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| HarnessError::io("bind 127.0.0.1:0", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| HarnessError::io("read the address of a bound socket", e))?
        .port();
    Ok((listener, port))
}

/// The first of `names` that is a file in one of `dirs`, or on `PATH`.
pub(crate) fn find_binary(names: &[&str], dirs: &[&Path]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let on_path: Vec<PathBuf> = std::env::split_paths(&path).collect();
    let dirs = dirs.iter().map(|d| d.to_path_buf()).chain(on_path);
    let dirs: Vec<PathBuf> = dirs.collect();
    names.iter().find_map(|name| {
        dirs.iter()
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// Sends `SIG{signal}` to `pid` with `kill`.
///
/// # Panics
///
/// If the signal cannot be sent.
#[track_caller]
fn send_signal(pid: u32, signal: &str) {
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

/// Sends `SIG{signal}` to each of `pids` that still exists.
fn signal_quietly(pids: &[u32], signal: &str) {
    if pids.is_empty() {
        return;
    }
    // Fails for a process that exited meanwhile, which needs no signal.
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids.iter().map(u32::to_string))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The last lines of a log, for error messages.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    if tail.is_empty() {
        "(empty log)".to_owned()
    } else {
        tail
    }
}

/// The uid and gid of `user`, from `/etc/passwd`.
fn account(user: &str) -> Option<Account> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != user {
            return None;
        }
        let _password = fields.next()?;
        Some(Account {
            uid: fields.next()?.parse().ok()?,
            gid: fields.next()?.parse().ok()?,
        })
    })
}

/// The processes whose parent is `pid`, from `/proc` (none where there is no `/proc`).
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&candidate| stat(candidate).is_some_and(|(_, parent)| parent == pid))
        .collect()
}

/// The state and parent of `pid`, from `/proc/{pid}/stat`.
fn stat(pid: u32) -> Option<(char, u32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ..`; `comm` may hold spaces and parentheses.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// Whether `pid` runs: it exists and is not a zombie.
fn is_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z' && state != 'X')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let t = tail(&log);
        assert!(t.starts_with("line 70\n") && t.ends_with("line 99"), "{t}");
        assert_eq!(tail(""), "(empty log)");
    }

    #[test]
    fn free_ports_are_never_the_system_servers() {
        for _ in 0..50 {
            let port = free_port().unwrap();
            assert!(!SYSTEM_PORTS.contains(&port), "{port}");
        }
    }

    #[test]
    fn accounts_come_from_passwd() {
        let root = account("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(account("lock-tests-no-such-user").is_none());
    }

    #[test]
    fn a_missing_program_names_its_package() {
        let err = not_installed(
            "/usr/lib/postgresql/15/bin/initdb",
            io::Error::from(io::ErrorKind::NotFound),
            "postgresql",
        );
        assert!(err.is_binary_not_found(), "{err:?}");
        assert_eq!(
            err.to_string(),
            "/usr/lib/postgresql/15/bin/initdb not found: install it with \
             \"apt-get install -y postgresql\" (Debian/Ubuntu)"
        );
    }

    #[test]
    fn children_and_their_state() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let me = std::process::id();
        assert!(children(me).contains(&child.id()));
        assert!(is_alive(child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_alive(child.id()));
    }
}
