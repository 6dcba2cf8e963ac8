//! The process behind every test server: its port, temp dir, log and lifecycle.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::chain;
use crate::{HarnessError, POLL_INTERVAL};

/// How long a server may take to be ready once spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines of the log quoted in error messages.
const LOG_TAIL_LINES: usize = 30;

/// Makes temp dir names unique within the process (the pid makes them unique across processes).
static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// What kind of server a [`ServerProcess`] runs, as its messages and files name it.
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
}

/// A server process on a `127.0.0.1` port, with its own temp dir that holds its log.
///
/// It is spawned by [`start`](Self::start), any number of times, each run appending to the
/// log. Dropping it kills the process (`SIGKILL`) and removes the dir; if the thread is
/// panicking, the log is printed to stderr first, each line prefixed with the port.
pub(crate) struct ServerProcess {
    kind: Kind,
    port: u16,
    dir: PathBuf,
    /// `None` once killed. Behind a mutex because `is_running` needs `Child::try_wait`.
    child: Mutex<Option<Child>>,
}

impl ServerProcess {
    /// A server on `port`, with a new temp dir, not started yet.
    pub(crate) fn create(kind: Kind, port: u16) -> Result<ServerProcess, HarnessError> {
        Ok(ServerProcess {
            kind,
            port,
            dir: make_dir(kind.dir, port)?,
            child: Mutex::new(None),
        })
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

    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join(self.kind.log_file)
    }

    /// The log so far, of every run.
    pub(crate) fn log(&self) -> String {
        fs::read(self.log_path())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
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

    /// Sends `SIGSTOP`.
    ///
    /// # Panics
    ///
    /// If the process is not running or the signal cannot be sent.
    #[track_caller]
    pub(crate) fn pause(&self) {
        self.signal("STOP");
    }

    /// Sends `SIGCONT`.
    ///
    /// # Panics
    ///
    /// As [`pause`](Self::pause).
    #[track_caller]
    pub(crate) fn resume(&self) {
        self.signal("CONT");
    }

    /// Kills the process with `SIGKILL` and waits for it to exit; nothing if it is not running.
    pub(crate) fn kill(&mut self) {
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

    /// Spawns `command` with its stdout and stderr appended to the log (`spawn_error` says
    /// why it could not be), then calls `ready` with the process and its id every 5 ms until
    /// it says the server is ready, the process exits or 10 s pass. On failure, leaves it
    /// killed; [`HarnessError::PortInUse`] if another process has the port.
    pub(crate) fn start(
        &mut self,
        command: &mut Command,
        spawn_error: impl FnOnce(io::Error) -> HarnessError,
        ready: impl FnMut(&ServerProcess, u32) -> Result<bool, HarnessError>,
    ) -> Result<(), HarnessError> {
        let log_start = fs::metadata(self.log_path()).map_or(0, |m| m.len());
        let child = command
            .stdin(Stdio::null())
            .stdout(self.open_log()?)
            .stderr(self.open_log()?)
            .spawn()
            .map_err(spawn_error)?;
        *self.child.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(child);
        let started = self.wait_ready(log_start, ready);
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
        log_start: u64,
        mut ready: impl FnMut(&ServerProcess, u32) -> Result<bool, HarnessError>,
    ) -> Result<(), HarnessError> {
        let started = Instant::now();
        loop {
            let pid = self.check_alive(log_start)?;
            if ready(self, pid)? {
                return Ok(());
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

    /// The process id while the process runs; why it exited otherwise.
    fn check_alive(&mut self, log_start: u64) -> Result<u32, HarnessError> {
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        let child = child.as_mut().expect("wait_ready runs right after spawn");
        let exited = child
            .try_wait()
            .map_err(|e| HarnessError::io(format!("wait for the test {}", self.kind.name), e))?;
        let Some(status) = exited else {
            return Ok(child.id());
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

    /// The log written since byte `start`, i.e. by the current run.
    fn log_since(&self, start: u64) -> String {
        let log = self.log();
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        log.get(start..).unwrap_or(&log).to_owned()
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
        send_signal(pid, signal);
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
}
