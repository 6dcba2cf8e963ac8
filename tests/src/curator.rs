//! Apache Curator's lock recipes in Java processes, peers of the Rust store under test.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::daemon::make_dir;
use crate::error::chain;
use crate::process::Captured;
use crate::zookeeper::{FAST_JVM, JAVA, SLF4J_SIMPLE_JAR, check_installed, classpath, java_error};
use crate::{HarnessError, POLL_INTERVAL};

/// The Debian package with Curator's recipes (and, through its dependencies, the rest).
const CURATOR_PACKAGE: &str = "libcurator-recipes-java";
/// Curator and ZooKeeper's client. The manifests' `Class-Path` add what they need (guava,
/// netty, jute, slf4j-api..).
const CURATOR_JARS: &[&str] = &[
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
];
const JAVAC: &str = "javac";
const CLASS: &str = "CuratorPeer";
/// Deadline of the compilation.
const COMPILE_TIMEOUT: Duration = Duration::from_secs(120);
/// The peer: `CuratorPeer <connect> <path> <mutex|write|read|semaphore-N> <counter file>
/// <iterations>`.
const SOURCE: &str = r#"import java.nio.file.*;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.*;
import org.apache.curator.framework.recipes.locks.*;
import org.apache.curator.retry.RetryNTimes;

public class CuratorPeer {
    /** A lock that is taken within 60 s, or not at all. */
    interface Lock {
        /** Takes the lock: what releases it. */
        AutoCloseable acquire() throws Exception;
    }

    static Lock mutex(InterProcessMutex mutex) {
        return () -> {
            if (!mutex.acquire(60, TimeUnit.SECONDS)) {
                throw new IllegalStateException("not acquired within 60 s");
            }
            return mutex::release;
        };
    }

    static Lock semaphore(InterProcessSemaphoreV2 semaphore) {
        return () -> {
            Lease lease = semaphore.acquire(60, TimeUnit.SECONDS);
            if (lease == null) {
                throw new IllegalStateException("no permit within 60 s");
            }
            return lease;
        };
    }

    public static void main(String[] args) throws Exception {
        Path counter = Paths.get(args[3]);
        long iterations = Long.parseLong(args[4]);
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            args[0], 10000, 5000, new RetryNTimes(100, 100));
        client.start();
        InterProcessReadWriteLock readWrite = new InterProcessReadWriteLock(client, args[1]);
        Lock lock = switch (args[2]) {
            case "mutex" -> mutex(new InterProcessMutex(client, args[1]));
            case "write" -> mutex(readWrite.writeLock());
            case "read" -> mutex(readWrite.readLock());
            default -> {
                if (!args[2].startsWith("semaphore-")) {
                    throw new IllegalArgumentException("no lock kind " + args[2]);
                }
                int permits = Integer.parseInt(args[2].substring("semaphore-".length()));
                yield semaphore(new InterProcessSemaphoreV2(client, args[1], permits));
            }
        };
        for (long i = 0; i < iterations; i++) {
            try (AutoCloseable held = lock.acquire()) {
                int value = Integer.parseInt(Files.readString(counter).trim());
                Thread.sleep(1);
                if (args[2].equals("read")) {
                    int again = Integer.parseInt(Files.readString(counter).trim());
                    if (again != value) {
                        throw new IllegalStateException(
                            "the counter went from " + value + " to " + again + " under a read lock");
                    }
                } else {
                    Files.writeString(counter, Integer.toString(value + 1));
                }
            }
        }
        client.close();
        System.exit(0);
    }
}
"#;

/// Which of Curator's locks a [`CuratorPeer`] process takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CuratorLock {
    /// `InterProcessMutex`: each iteration adds 1 to the counter.
    Mutex,
    /// The write side of `InterProcessReadWriteLock`: each iteration adds 1 to the counter.
    Write,
    /// The read side of `InterProcessReadWriteLock`: each iteration reads the counter twice,
    /// 1 ms apart, and the process fails if it changed in between.
    Read,
    /// A permit of `InterProcessSemaphoreV2`: each iteration adds 1 to the counter, which
    /// loses no update only with 1 permit.
    Semaphore {
        /// The semaphore's count.
        permits: u32,
    },
}

impl CuratorLock {
    fn arg(self) -> String {
        match self {
            CuratorLock::Mutex => "mutex".to_owned(),
            CuratorLock::Write => "write".to_owned(),
            CuratorLock::Read => "read".to_owned(),
            CuratorLock::Semaphore { permits } => format!("semaphore-{permits}"),
        }
    }
}

/// A small Java program on Apache Curator 5 (Debian's `libcurator-recipes-java`), compiled
/// with `javac` in its own temp dir, that takes a Curator lock in a loop: the other side of
/// interoperability tests.
///
/// Each process connects to ZooKeeper, then, `iterations` times, acquires the lock (within
/// 60 s), reads the integer in a counter file, sleeps 1 ms, writes it back plus 1 (or, under
/// a [`CuratorLock::Read`] lock, checks that it did not change), and releases. Processes of
/// the Rust store under test that update the same file the same way under the same path
/// make a lost-update counter: it ends at the sum of all iterations only if no two writers
/// ever overlapped.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_tests::{CuratorLock, CuratorPeer, ZooKeeperServer};
///
/// let server = ZooKeeperServer::spawn();
/// let peer = CuratorPeer::compile();
/// let counter = peer.dir().join("counter");
/// std::fs::write(&counter, "0").unwrap();
/// let connect = server.connect_string();
/// let run = peer.spawn(3, &connect, "/locks/k", CuratorLock::Mutex, &counter, 50);
/// run.wait(Duration::from_secs(60)).unwrap();
/// assert_eq!(std::fs::read_to_string(&counter).unwrap(), "150");
/// ```
///
/// Dropping it removes its dir.
pub struct CuratorPeer {
    dir: PathBuf,
}

impl CuratorPeer {
    /// Writes the program into a new temp dir and compiles it.
    ///
    /// # Panics
    ///
    /// If it cannot: `javac` or Curator is not installed (the message says how to install
    /// it), or the compilation fails.
    #[track_caller]
    pub fn compile() -> CuratorPeer {
        match Self::try_compile() {
            Ok(peer) => peer,
            // Already a complete one-line instruction.
            Err(e) if e.is_binary_not_found() => panic!("{e}"),
            Err(e) => panic!("could not compile the Curator peer: {}", chain(&e)),
        }
    }

    /// [`compile`](Self::compile) that returns the error instead of panicking.
    pub fn try_compile() -> Result<CuratorPeer, HarnessError> {
        check_installed(CURATOR_JARS, CURATOR_PACKAGE)?;
        let peer = CuratorPeer {
            dir: make_dir("curator", 0)?,
        };
        let source = peer.dir.join(format!("{CLASS}.java"));
        fs::write(&source, SOURCE)
            .map_err(|e| HarnessError::io(format!("write {}", source.display()), e))?;
        let javac = Captured::spawn(
            Command::new(JAVAC)
                .args(["-nowarn", "-d"])
                .arg(&peer.dir)
                .args(["-cp", &classpath(CURATOR_JARS)])
                .arg(&source),
            format!("javac {}", source.display()),
            java_error,
        )?;
        javac.wait(Instant::now() + COMPILE_TIMEOUT)?;
        Ok(peer)
    }

    /// The temp dir that holds the program, e.g. for the counter file; removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts `processes` peers that each take the lock at `path` on the ZooKeeper at
    /// `connect` `iterations` times, counting in the file `counter` (which must hold an
    /// integer).
    ///
    /// # Panics
    ///
    /// If a process cannot be started.
    #[track_caller]
    pub fn spawn(
        &self,
        processes: usize,
        connect: &str,
        path: &str,
        lock: CuratorLock,
        counter: &Path,
        iterations: u32,
    ) -> CuratorRun {
        let classpath = format!(
            "{}:{}",
            self.dir.display(),
            classpath(&[CURATOR_JARS, &[SLF4J_SIMPLE_JAR]].concat())
        );
        let processes = (0..processes)
            .map(|i| {
                let mut command = Command::new(JAVA);
                command
                    .args(FAST_JVM)
                    .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
                    .args(["-cp", &classpath, CLASS, connect, path, &lock.arg()])
                    .arg(counter)
                    .arg(iterations.to_string());
                let what = format!(
                    "Curator peer {} of {processes} ({} on {path})",
                    i + 1,
                    lock.arg()
                );
                Captured::spawn(&mut command, what, java_error)
                    .unwrap_or_else(|e| panic!("{}", chain(&e)))
            })
            .collect();
        CuratorRun { processes }
    }
}

impl fmt::Debug for CuratorPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CuratorPeer")
            .field("dir", &self.dir)
            .finish()
    }
}

impl Drop for CuratorPeer {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Curator peer processes started by [`CuratorPeer::spawn`]; dropping it kills those still
/// running.
pub struct CuratorRun {
    processes: Vec<Captured>,
}

impl CuratorRun {
    /// Waits until every process has exited successfully, or one failed, or `timeout`
    /// passed; then kills those still running.
    ///
    /// `Err` is [`HarnessError::ProcessFailed`] for the first process that failed (or,
    /// at the deadline, one still running), with its exit status and what it printed (a
    /// Java stack trace, Curator's warnings).
    pub fn wait(mut self, timeout: Duration) -> Result<(), HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut running = Vec::with_capacity(self.processes.len());
            for mut process in self.processes.drain(..) {
                if process.has_exited()? {
                    process.finish()?;
                } else {
                    running.push(process);
                }
            }
            self.processes = running;
            match self.processes.first_mut() {
                None => return Ok(()),
                Some(process) if Instant::now() >= deadline => return process.finish().map(drop),
                Some(_) => thread::sleep(POLL_INTERVAL),
            }
        }
    }
}

impl fmt::Debug for CuratorRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CuratorRun")
            .field("processes", &self.processes.len())
            .finish()
    }
}
