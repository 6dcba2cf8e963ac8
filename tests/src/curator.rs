//! Apache Curator's lock recipes in Java processes, peers of the Rust store under test.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
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
/// Deadline of a [`CuratorPeer::leader`] process: JVM start, connect and one read.
const ASK_TIMEOUT: Duration = Duration::from_secs(60);
/// The peer: `CuratorPeer <connect> <path> <mode> <file> <iterations>`, where the mode is
/// a lock (`mutex`, `write`, `read`, `semaphore-N`) or `selector` (a `LeaderSelector`
/// participant), each counting in `file`; or `lead`, a participant that leads once and
/// says so in `file`; or `leader`, which writes who leads into `file`.
const SOURCE: &str = r#"import java.nio.file.*;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.curator.framework.*;
import org.apache.curator.framework.recipes.leader.*;
import org.apache.curator.framework.recipes.locks.*;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.KeeperException;

public class CuratorPeer {
    /** A lock that is taken within 60 s, or not at all. */
    interface Lock {
        /** Takes the lock: what releases it. */
        AutoCloseable acquire() throws Exception;
    }

    /** What a participant does while it leads, named `id`. */
    interface Leadership {
        void lead(String id) throws Exception;
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

    /** Reads the counter, and writes it back plus 1 a millisecond later. */
    static void bump(Path counter) throws Exception {
        int value = Integer.parseInt(Files.readString(counter).trim());
        Thread.sleep(1);
        Files.writeString(counter, Integer.toString(value + 1));
    }

    /** Who leads at `path`, as a LeaderSelector that never campaigns sees it: "" if none. */
    static String leader(CuratorFramework client, String path) throws Exception {
        LeaderSelector selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
            @Override
            public void takeLeadership(CuratorFramework c) {}
        });
        try {
            return selector.getLeader().getId();
        } catch (KeeperException.NoNodeException e) {
            return "";
        }
    }

    /**
     * Leads `times` times as the LeaderSelector participant curator-{pid} at `path`,
     * doing `work` each time and campaigning again once it is done; fails if getLeader()
     * names another while it leads.
     */
    static void elect(CuratorFramework client, String path, long times, Leadership work)
            throws Exception {
        String id = "curator-" + ProcessHandle.current().pid();
        Semaphore led = new Semaphore(0);
        AtomicReference<Exception> failure = new AtomicReference<>();
        AtomicReference<LeaderSelector> self = new AtomicReference<>();
        LeaderSelector selector = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
            @Override
            public void takeLeadership(CuratorFramework c) {
                try {
                    String leader = self.get().getLeader().getId();
                    if (!leader.equals(id)) {
                        throw new IllegalStateException(id + " leads, but getLeader() names " + leader);
                    }
                    work.lead(id);
                } catch (Exception e) {
                    failure.compareAndSet(null, e);
                } finally {
                    led.release();
                }
            }
        });
        self.set(selector);
        selector.setId(id);
        selector.start();
        for (long i = 0; i < times && failure.get() == null; i++) {
            // Campaigns again once the last leadership is over, its node deleted.
            while (i > 0 && !selector.requeue()) {
                Thread.sleep(1);
            }
            led.acquire();
        }
        selector.close();
        if (failure.get() != null) {
            throw failure.get();
        }
    }

    public static void main(String[] args) throws Exception {
        String path = args[1];
        Path file = Paths.get(args[3]);
        long iterations = Long.parseLong(args[4]);
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            args[0], 10000, 5000, new RetryNTimes(100, 100));
        client.start();
        switch (args[2]) {
            case "selector" -> elect(client, path, iterations, id -> bump(file));
            case "lead" -> elect(client, path, 1, id -> {
                Path written = Paths.get(file + ".tmp");
                Files.writeString(written, id);
                Files.move(written, file, StandardCopyOption.ATOMIC_MOVE);
                while (Files.exists(file)) {
                    Thread.sleep(10);
                }
            });
            case "leader" -> Files.writeString(file, leader(client, path));
            default -> count(client, path, args[2], file, iterations);
        }
        client.close();
        System.exit(0);
    }

    /** Takes the lock `kind` at `path` `iterations` times, counting in `counter`. */
    static void count(CuratorFramework client, String path, String kind, Path counter,
            long iterations) throws Exception {
        InterProcessReadWriteLock readWrite = new InterProcessReadWriteLock(client, path);
        Lock lock = switch (kind) {
            case "mutex" -> mutex(new InterProcessMutex(client, path));
            case "write" -> mutex(readWrite.writeLock());
            case "read" -> mutex(readWrite.readLock());
            default -> {
                if (!kind.startsWith("semaphore-")) {
                    throw new IllegalArgumentException("no lock kind " + kind);
                }
                int permits = Integer.parseInt(kind.substring("semaphore-".length()));
                yield semaphore(new InterProcessSemaphoreV2(client, path, permits));
            }
        };
        for (long i = 0; i < iterations; i++) {
            try (AutoCloseable held = lock.acquire()) {
                if (kind.equals("read")) {
                    int value = Integer.parseInt(Files.readString(counter).trim());
                    Thread.sleep(1);
                    int again = Integer.parseInt(Files.readString(counter).trim());
                    if (again != value) {
                        throw new IllegalStateException(
                            "the counter went from " + value + " to " + again + " under a read lock");
                    }
                } else {
                    bump(counter);
                }
            }
        }
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
    /// A participant of `LeaderSelector` (an `InterProcessMutex` whose node holds its id),
    /// named `curator-{pid}`, which campaigns again after each leadership: each iteration
    /// is one leadership, which adds 1 to the counter; the process fails if
    /// `getLeader()` names another while it leads.
    LeaderSelector,
}

impl CuratorLock {
    fn arg(self) -> String {
        match self {
            CuratorLock::Mutex => "mutex".to_owned(),
            CuratorLock::Write => "write".to_owned(),
            CuratorLock::Read => "read".to_owned(),
            CuratorLock::Semaphore { permits } => format!("semaphore-{permits}"),
            CuratorLock::LeaderSelector => "selector".to_owned(),
        }
    }
}

/// A small Java program on Apache Curator 5 (Debian's `libcurator-recipes-java`), compiled
/// with `javac` in its own temp dir, that takes a Curator lock in a loop: the other side of
/// interoperability tests. It also leads an election, or says who leads one, as
/// Curator's `LeaderSelector` does ([`lead`](Self::lead), [`leader`](Self::leader)).
///
/// Each process connects to ZooKeeper, then, `iterations` times, acquires the lock (within
/// 60 s; a [`CuratorLock::LeaderSelector`] leads, without a deadline), reads the integer in a counter file, sleeps 1 ms, writes it back plus 1 (or, under
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
        let mode = lock.arg();
        let processes = (0..processes)
            .map(|i| {
                let what = format!("Curator peer {} of {processes} ({mode} on {path})", i + 1);
                self.start(what, connect, path, &mode, counter, iterations)
                    .unwrap_or_else(|e| panic!("{}", chain(&e)))
            })
            .collect();
        CuratorRun { processes }
    }

    /// Starts a `LeaderSelector` participant, named `curator-{pid}`, at `path` on the
    /// ZooKeeper at `connect`, which leads once: once it leads, it writes its id into the
    /// file `announce` (whole, at once), and leads until that file is removed; then it
    /// exits. It fails if `getLeader()` names another while it leads.
    ///
    /// # Panics
    ///
    /// If the process cannot be started.
    #[track_caller]
    pub fn lead(&self, connect: &str, path: &str, announce: &Path) -> CuratorRun {
        let what = format!("Curator leader (on {path})");
        let process = self.start(what, connect, path, "lead", announce, 1);
        CuratorRun {
            processes: vec![process.unwrap_or_else(|e| panic!("{}", chain(&e)))],
        }
    }

    /// Who leads the election at `path` on the ZooKeeper at `connect`, as Curator's
    /// `LeaderSelector.getLeader()` says in a process of its own: the id that the first
    /// lock node's data holds, or an empty one if nobody leads. Blocks until that process
    /// has answered.
    pub fn leader(&self, connect: &str, path: &str) -> Result<String, HarnessError> {
        static ASKED: AtomicUsize = AtomicUsize::new(0);
        let answer = self
            .dir
            .join(format!("leader-{}", ASKED.fetch_add(1, Ordering::Relaxed)));
        let what = format!("Curator getLeader() (on {path})");
        let process = self.start(what, connect, path, "leader", &answer, 1)?;
        process.wait(Instant::now() + ASK_TIMEOUT)?;
        fs::read_to_string(&answer)
            .map_err(|e| HarnessError::io(format!("read {}", answer.display()), e))
    }

    /// Starts the program, which `what` names in errors, in `mode` at `path` on the
    /// ZooKeeper at `connect`, with its `file` and `iterations`.
    fn start(
        &self,
        what: String,
        connect: &str,
        path: &str,
        mode: &str,
        file: &Path,
        iterations: u32,
    ) -> Result<Captured, HarnessError> {
        let classpath = format!(
            "{}:{}",
            self.dir.display(),
            classpath(&[CURATOR_JARS, &[SLF4J_SIMPLE_JAR]].concat())
        );
        let mut command = Command::new(JAVA);
        command
            .args(FAST_JVM)
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .args(["-cp", &classpath, CLASS, connect, path, mode])
            .arg(file)
            .arg(iterations.to_string());
        Captured::spawn(&mut command, what, java_error)
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
