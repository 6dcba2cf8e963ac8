//! What a database server of the harness (PostgreSQL, MariaDB) has in common: its temp dir,
//! the account it runs as, its process and the processes it forked, and its log.

use std::fs::{self, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::process::Captured;
use crate::server::{make_dir, print_log, send_signal, tail};
use crate::{HarnessError, POLL_INTERVAL};

/// Ports of database servers that may run on the machine for other uses (PostgreSQL's and
/// MySQL's defaults): never given to a test server, so the harness never connects to them.
const SYSTEM_PORTS: &[u16] = &[5432, 3306];
/// How long the processes a killed server forked may take to exit.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// The account a server runs as when the tests run as root, which `initdb` and `mariadbd`
/// refuse.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Account {
    uid: u32,
    gid: u32,
}

/// One database server process in its own temp dir, which holds its data and its log.
///
/// Dropping it kills the process and every process it forked, and removes the dir; if the
/// thread is panicking, the log is printed to stderr first, each line prefixed with
/// `[{name} :{port}] `.
#[derive(Debug)]
pub(crate) struct Daemon {
    /// The server binary's name, e.g. `postgres`, for messages and the log's prefix.
    name: &'static str,
    port: u16,
    dir: PathBuf,
    /// `Some` when the tests run as root: the server's own account.
    account: Option<Account>,
    /// `None` once killed. Behind a mutex because `pid` needs `Child::try_wait`.
    child: Mutex<Option<Child>>,
}

impl Daemon {
    /// A server named `name` on `port`, with its new temp dir; when the tests run as root,
    /// the dir belongs to `user` (e.g. `postgres`), the account the server will run as, which
    /// Debian's `package` creates.
    pub(crate) fn create(
        name: &'static str,
        port: u16,
        user: &str,
        package: &'static str,
    ) -> Result<Daemon, HarnessError> {
        let dir = make_dir(name, port)?;
        let mut daemon = Daemon {
            name,
            port,
            dir,
            account: None,
            child: Mutex::new(None),
        };
        // The dir is created with our effective uid: 0 is root.
        let owner = fs::metadata(&daemon.dir)
            .map_err(|e| HarnessError::io(format!("stat {}", daemon.dir.display()), e))?
            .uid();
        if owner != 0 {
            return Ok(daemon);
        }
        let account = account(user).ok_or_else(|| HarnessError::NotInstalled {
            missing: format!("no user {user} to run {name} as (it refuses to run as root)"),
            package,
        })?;
        std::os::unix::fs::chown(&daemon.dir, Some(account.uid), Some(account.gid))
            .map_err(|e| HarnessError::io(format!("chown {}", daemon.dir.display()), e))?;
        daemon.account = Some(account);
        Ok(daemon)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
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
    /// and appends what it printed to the log.
    pub(crate) fn setup(
        &self,
        mut command: Command,
        timeout: Duration,
        package: &'static str,
    ) -> Result<(), HarnessError> {
        let what = command.get_program().to_string_lossy().into_owned();
        let run = Captured::spawn_mapped(&mut command, what, |program, e| {
            not_installed(program, e, package)
        })?;
        let output = run.wait(Instant::now() + timeout);
        let text = match &output {
            Ok(text) => text.as_str(),
            Err(HarnessError::ProcessFailed { output, .. }) => output.as_str(),
            Err(_) => "",
        };
        self.append_log(text)?;
        output.map(drop)
    }

    fn append_log(&self, text: &str) -> Result<(), HarnessError> {
        use std::io::Write;
        let path = self.log_path();
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut log| log.write_all(text.as_bytes()))
            .map_err(|e| HarnessError::io(format!("write {}", path.display()), e))
    }

    /// Spawns the server with stdout and stderr appended to its log; returns the log's length
    /// before, where this run's lines start.
    pub(crate) fn spawn(
        &mut self,
        mut command: Command,
        package: &'static str,
    ) -> Result<u64, HarnessError> {
        let log_path = self.log_path();
        let log_start = fs::metadata(&log_path).map_or(0, |m| m.len());
        let open = || {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .map_err(|e| HarnessError::io(format!("open {}", log_path.display()), e))
        };
        let program = command.get_program().to_string_lossy().into_owned();
        let child = command
            .stdin(Stdio::null())
            .stdout(open()?)
            .stderr(open()?)
            .spawn()
            .map_err(|e| not_installed(&program, e, package))?;
        *self.child.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(child);
        Ok(log_start)
    }

    /// `Ok` while the process runs (or was killed on purpose); why it exited otherwise:
    /// [`HarnessError::PortInUse`] if its log says its port was taken.
    pub(crate) fn check_alive(&mut self, log_start: u64) -> Result<(), HarnessError> {
        let exited = match self.child.get_mut().unwrap_or_else(|e| e.into_inner()) {
            Some(child) => child
                .try_wait()
                .map_err(|e| HarnessError::io(format!("wait for {}", self.name), e))?,
            None => None,
        };
        let Some(status) = exited else {
            return Ok(());
        };
        let log = self.log_since(log_start);
        if log.contains("Address already in use") {
            return Err(HarnessError::PortInUse { port: self.port });
        }
        Err(HarnessError::Exited {
            port: self.port,
            status,
            log_tail: tail(&log),
        })
    }

    /// The error of a server not ready after `waited`.
    pub(crate) fn not_ready(&self, log_start: u64, waited: Duration) -> HarnessError {
        HarnessError::NotReady {
            port: self.port,
            waited,
            log_tail: tail(&self.log_since(log_start)),
        }
    }

    /// The process id, or `None` once the server was killed or has exited.
    pub(crate) fn pid(&self) -> Option<u32> {
        let mut child = self.child();
        let child = child.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// Sends `SIG{signal}` to the server and every process it forked (a PostgreSQL backend
    /// is one per connection).
    ///
    /// # Panics
    ///
    /// If the server is not running or the signal cannot be sent to it.
    #[track_caller]
    pub(crate) fn signal_all(&self, signal: &str) {
        let Some(pid) = self.pid() else {
            panic!(
                "cannot send SIG{signal} to the test {} on port {}: it is not running",
                self.name, self.port
            );
        };
        if signal == "CONT" {
            // The children first: a resumed server must find them resumed.
            signal_quietly(&children(pid), signal);
            send_signal(pid, signal);
        } else {
            // The server first, so that it forks no child we would miss.
            send_signal(pid, signal);
            signal_quietly(&children(pid), signal);
        }
    }

    /// Kills the server and every process it forked with `SIGKILL`, and waits until they
    /// are gone. Killing a server that is not running does nothing.
    pub(crate) fn kill(&mut self) {
        let Some(mut child) = self
            .child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        let forked = children(child.id());
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

    /// The log so far (every run, with what the setup commands printed).
    pub(crate) fn log(&self) -> String {
        fs::read(self.log_path())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// The log written since byte `start`, i.e. by the current run.
    pub(crate) fn log_since(&self, start: u64) -> String {
        let log = self.log();
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        log.get(start..).unwrap_or(&log).to_owned()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(format!("{}.log", self.name))
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if thread::panicking() {
            print_log(
                &format!("[{} :{}] ", self.name, self.port),
                &self.log_path(),
            );
        }
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
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

/// A port that was free a moment ago, none of [`SYSTEM_PORTS`].
pub(crate) fn free_port() -> Result<u16, HarnessError> {
    // Held open together, so that the next draw is another port.
    let mut listeners = Vec::new();
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| HarnessError::io("bind 127.0.0.1:0", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::io("read the address of a bound socket", e))?
            .port();
        if !SYSTEM_PORTS.contains(&port) {
            return Ok(port);
        }
        listeners.push(listener);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
