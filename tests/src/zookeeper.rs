//! ZooKeeper from Debian's `zookeeper` package: a standalone server, or a 3-node ensemble.

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::daemon::{Kind, ServerProcess, bind_any_port, on_a_free_port};
use crate::error::chain;
use crate::process::Captured;
use crate::server::spawn_error;
use crate::test_server::{Daemon, TestServer};
use crate::{HarnessError, POLL_INTERVAL};

/// Where Debian installs Java libraries.
pub(crate) const JAVA_LIBS: &str = "/usr/share/java";
/// The Debian package with ZooKeeper's jars (and a JRE, through its dependencies).
pub(crate) const ZOOKEEPER_PACKAGE: &str = "zookeeper";
pub(crate) const JAVA: &str = "java";
/// Flags that make a JVM start fast: class data sharing, the client compiler only, the
/// serial collector and a small heap.
pub(crate) const FAST_JVM: &[&str] = &[
    "-Xshare:auto",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Xms16m",
    "-Xmx256m",
];
/// ZooKeeper's jar; its manifest's `Class-Path` names the jars it needs (jute, netty, slf4j..).
const ZOOKEEPER_JAR: &str = "zookeeper.jar";
/// The slf4j binding that logs to stderr: the server's log file, and a Curator peer's output.
pub(crate) const SLF4J_SIMPLE_JAR: &str = "slf4j-simple.jar";
/// The slf4j binding that drops every log line, for the CLI, which prints what it has to say.
const SLF4J_NOP_JAR: &str = "slf4j-nop.jar";
const SERVER_MAIN: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
const CLI_MAIN: &str = "org.apache.zookeeper.ZooKeeperMain";
/// The server's settings beyond those of one port and dir: a short tick (sessions may time
/// out in 1 s to 10 s), no admin server on port 8080, every four-letter word.
const SETTINGS: &str = "tickTime=500\n\
                        initLimit=10\n\
                        syncLimit=5\n\
                        admin.enableServer=false\n\
                        4lw.commands.whitelist=*\n";
/// System properties of the server: empty CONTAINER znodes are deleted within 100 ms, a
/// peer that does not answer on its election port is given up after 1 s, and log lines
/// carry the time, without one for each four-letter word the harness polls with.
const SERVER_PROPERTIES: &[&str] = &[
    "-Dznode.container.checkIntervalMs=100",
    "-Dzookeeper.cnxTimeout=1000",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
    "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=warn",
];
/// Nodes in an ensemble.
const ENSEMBLE: usize = 3;
/// How long an ensemble may take to elect a leader that every running node follows.
const QUORUM_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server may take to be ready once spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connect, read and write timeout of a four-letter word.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of one readiness probe; the loop around it has its own deadline.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Deadline of one ZooKeeper CLI command.
const CLI_TIMEOUT: Duration = Duration::from_secs(30);
/// The port a ZooKeeper listens on by default, which may be a server of someone else's.
const DEFAULT_PORT: u16 = 2181;
/// How the harness names a ZooKeeper server, its temp dir and its log.
const ZOOKEEPER: Kind = Kind {
    name: "ZooKeeper server",
    dir: "zookeeper",
    tag: "zookeeper",
    log_file: "zookeeper.log",
    ready_timeout: READY_TIMEOUT,
    run_as: None,
    forks: false,
};
const CONFIG_FILE: &str = "zoo.cfg";
/// What a server that is not part of a quorum answers to most four-letter words.
const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests";

/// A ZooKeeper server process that this test started, on a free `127.0.0.1` client port
/// (never 2181): standalone from [`spawn`](Self::spawn), or one node of a
/// [`ZooKeeperEnsemble`].
///
/// It runs `java` on Debian's jars (`/usr/share/java/zookeeper.jar`), with its config,
/// data and log in its own temp dir, `tickTime=500` (so a session timeout may be 1 s to
/// 10 s), empty CONTAINER znodes deleted within 100 ms, no admin server, and every
/// four-letter word allowed. Dropping it kills the process (`SIGKILL`) and removes the dir;
/// if the thread is panicking, the server log is printed to stderr first, each line
/// prefixed with the port. Its port, process, faults and log are [`TestServer`]'s: its dir
/// holds `zoo.cfg`, `data/` and its log; [`restart`](TestServer::restart) starts it again
/// from its data.
///
/// `ZooKeeperServer` is `Send + Sync`: share `&ZooKeeperServer` between threads freely.
pub struct ZooKeeperServer {
    process: ServerProcess,
    /// An ensemble node: ready once it listens, as it cannot serve without a quorum.
    member: bool,
}

impl ZooKeeperServer {
    /// Starts a standalone server and waits until it serves (`srvr` answers
    /// `Mode: standalone`).
    ///
    /// # Panics
    ///
    /// If the server cannot be started: ZooKeeper or `java` is not installed (the message
    /// says how to install it), it exited early (the message quotes its log) or did not serve
    /// within 10 s.
    #[track_caller]
    pub fn spawn() -> ZooKeeperServer {
        match Self::try_spawn() {
            Ok(server) => server,
            Err(e) => fail_to_start("server", &e),
        }
    }

    /// [`spawn`](Self::spawn) that returns the error instead of panicking.
    pub fn try_spawn() -> Result<ZooKeeperServer, HarnessError> {
        on_a_free_port(|| {
            let port = free_ports::<1>()?[0];
            let mut server = ZooKeeperServer::create(port, None)?;
            server.start()?;
            Ok(server)
        })
    }

    /// A server with its dir and config on `port`, not started yet; an ensemble `member` is
    /// given its id and the `server.{id}=` lines of every node.
    fn create(port: u16, member: Option<(usize, &str)>) -> Result<ZooKeeperServer, HarnessError> {
        check_installed(
            &[ZOOKEEPER_JAR, SLF4J_SIMPLE_JAR, SLF4J_NOP_JAR],
            ZOOKEEPER_PACKAGE,
        )?;
        let server = ZooKeeperServer {
            process: ServerProcess::create(ZOOKEEPER, port)?,
            member: member.is_some(),
        };
        let data = server.dir().join("data");
        let write = |path: &Path, text: &str| {
            fs::write(path, text)
                .map_err(|e| HarnessError::io(format!("write {}", path.display()), e))
        };
        fs::create_dir(&data)
            .map_err(|e| HarnessError::io(format!("create {}", data.display()), e))?;
        let quorum = member.map_or("", |(_, quorum)| quorum);
        let config = format!(
            "{SETTINGS}dataDir={data}\nclientPort={port}\nclientPortAddress=127.0.0.1\n{quorum}",
            data = data.display(),
        );
        write(&server.dir().join(CONFIG_FILE), &config)?;
        if let Some((id, _)) = member {
            write(&data.join("myid"), &format!("{id}\n"))?;
        }
        Ok(server)
    }

    /// The connect string of this server alone, `127.0.0.1:{port}`; append a chroot such as
    /// `/app` to it if needed.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// Sends a four-letter word (e.g. `"mntr"`, `"srvr"`, `"cons"`, `"dump"`) over a fresh
    /// connection and reads the answer until the server closes it, with a 5 s timeout.
    ///
    /// A server outside a quorum answers most words with "This ZooKeeper instance is not
    /// currently serving requests"; that is `Ok` too. `Err` means the word could not be
    /// sent or its answer read (e.g. [`HarnessError::NotRunning`] after
    /// [`kill`](Self::kill), or a timeout while [paused](Self::pause)).
    pub fn four_letter(&self, word: &str) -> Result<String, HarnessError> {
        if !self.is_running() {
            // Never connect then: the port may already belong to another test's server.
            return Err(HarnessError::NotRunning { port: self.port() });
        }
        four_letter(self.port(), word, COMMAND_TIMEOUT)
    }

    /// What the server is now: `"standalone"`, `"leader"` or `"follower"` (from `srvr`'s
    /// `Mode:`), or `None` if it does not serve: not in a quorum, killed or paused.
    pub fn mode(&self) -> Option<String> {
        if !self.is_running() || self.process.is_paused() {
            return None;
        }
        serving_mode(self.port())
    }

    /// How many znodes the server holds, `zk_znode_count` of `mntr`. A fresh server holds 5
    /// (`/`, `/zookeeper` and its `config` and `quota`, ..).
    ///
    /// # Panics
    ///
    /// If the server does not answer `mntr` with a count, e.g. it is not serving.
    #[track_caller]
    pub fn znode_count(&self) -> u64 {
        let mntr = self.four_letter("mntr").unwrap_or_else(|e| {
            panic!(
                "mntr failed on the ZooKeeper server on port {}: {}",
                self.port(),
                chain(&e)
            )
        });
        field(&mntr, "zk_znode_count\t")
            .and_then(|count| count.parse().ok())
            .unwrap_or_else(|| panic!("no zk_znode_count in mntr on port {}: {mntr}", self.port()))
    }

    /// Runs one command of ZooKeeper's own CLI (`zkCli.sh`, `org.apache.zookeeper.ZooKeeperMain`)
    /// on this server in a new session, e.g. `["create", "/a", "data"]`, `["ls", "/locks"]`,
    /// `["stat", "/a"]`, and returns what it printed, without the connection banner.
    ///
    /// It starts a JVM (about half a second). `Err` is [`HarnessError::ProcessFailed`] when
    /// the command fails (e.g. "Node already exists: /a"), and its output says why.
    pub fn cli(&self, command: &[&str]) -> Result<String, HarnessError> {
        let classpath = classpath(&[ZOOKEEPER_JAR, SLF4J_NOP_JAR]);
        let cli = Captured::spawn(
            Command::new(JAVA)
                .args(FAST_JVM)
                .args([
                    "-cp",
                    &classpath,
                    CLI_MAIN,
                    "-server",
                    &self.connect_string(),
                ])
                .args(command),
            format!("zkCli {}", command.join(" ")),
            java_error,
        )?;
        let output = cli.wait(Instant::now() + CLI_TIMEOUT)?;
        Ok(output
            .lines()
            .filter(|line| {
                !(line.is_empty()
                    || line.starts_with("Connecting to ")
                    || line.starts_with("WATCHER::")
                    || line.starts_with("WatchedEvent "))
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }
}

impl TestServer for ZooKeeperServer {}

impl Daemon for ZooKeeperServer {
    fn process(&self) -> &ServerProcess {
        &self.process
    }

    fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// Spawns the JVM and waits until the server is ready; on failure, leaves it killed.
    fn start(&mut self) -> Result<(), HarnessError> {
        let member = self.member;
        let dir = self.dir().to_owned();
        self.process.start(
            Command::new(JAVA)
                .args(FAST_JVM)
                .args(SERVER_PROPERTIES)
                .arg("-cp")
                .arg(classpath(&[ZOOKEEPER_JAR, SLF4J_SIMPLE_JAR]))
                .arg(SERVER_MAIN)
                .arg(dir.join(CONFIG_FILE))
                // `envi` names it as `user.dir`, which tells our server from another's.
                .current_dir(&dir),
            |e| java_error(JAVA, e),
            |process, _| {
                let port = process.port();
                // A node of an ensemble cannot serve on its own: it is ready once it listens.
                let ready = if member {
                    four_letter(port, "ruok", PROBE_TIMEOUT).is_ok_and(|a| a == "imok")
                } else {
                    serving_mode(port).as_deref() == Some("standalone")
                };
                // Make sure the answer came from our process, not from one that took the port.
                let envi = ready.then(|| four_letter(port, "envi", PROBE_TIMEOUT).ok());
                let Some(Some(envi)) = envi else {
                    return Ok(false);
                };
                // The JVM's working dir, with symbolic links resolved.
                let ours = fs::canonicalize(&dir).ok();
                match field(&envi, "user.dir=") {
                    Some(dir) if ours.as_deref() == Some(Path::new(dir)) => Ok(true),
                    _ => Err(HarnessError::PortInUse { port }),
                }
            },
        )
    }
}

impl fmt::Debug for ZooKeeperServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.process.debug_as("ZooKeeperServer", f)
    }
}

/// A ZooKeeper ensemble of 3 [`ZooKeeperServer`]s that this test started, each on its own
/// free loopback client, quorum and election ports.
///
/// ```no_run
/// use lock_tests::ZooKeeperEnsemble;
///
/// let mut ensemble = ZooKeeperEnsemble::spawn(); // one leader, two followers
/// let connect = ensemble.connect_string(); // "127.0.0.1:{a},127.0.0.1:{b},127.0.0.1:{c}"
/// let old = ensemble.leader();
/// ensemble.kill(old);
/// ensemble.wait_quorum(); // the other two elected a leader
/// assert_ne!(ensemble.leader(), old);
/// ensemble.restart(old);
/// ensemble.wait_quorum(); // and the old one follows it
/// # let _ = connect;
/// ```
///
/// Dropping it drops its nodes (see [`ZooKeeperServer`]).
#[derive(Debug)]
pub struct ZooKeeperEnsemble {
    nodes: Vec<ZooKeeperServer>,
}

impl ZooKeeperEnsemble {
    /// Starts 3 nodes and waits until one leads and the two others follow it.
    ///
    /// # Panics
    ///
    /// As [`ZooKeeperServer::spawn`], or if the nodes elect no leader within 30 s.
    #[track_caller]
    pub fn spawn() -> ZooKeeperEnsemble {
        match Self::try_spawn() {
            Ok(ensemble) => ensemble,
            Err(e) => fail_to_start("ensemble", &e),
        }
    }

    /// [`spawn`](Self::spawn) that returns the error instead of panicking.
    pub fn try_spawn() -> Result<ZooKeeperEnsemble, HarnessError> {
        // Dropping the nodes started so far frees their ports for another try.
        on_a_free_port(Self::spawn_once)
    }

    fn spawn_once() -> Result<ZooKeeperEnsemble, HarnessError> {
        // Client, quorum and election port of each node, all distinct.
        let ports = free_ports::<{ 3 * ENSEMBLE }>()?;
        let quorum: String = (0..ENSEMBLE)
            .map(|i| {
                let (quorum, election) = (ports[3 * i + 1], ports[3 * i + 2]);
                format!("server.{}=127.0.0.1:{quorum}:{election}\n", i + 1)
            })
            .collect();
        let nodes = (0..ENSEMBLE)
            .map(|i| ZooKeeperServer::create(ports[3 * i], Some((i + 1, &quorum))))
            .collect::<Result<_, _>>()?;
        let mut ensemble = ZooKeeperEnsemble { nodes };
        for node in &mut ensemble.nodes {
            node.start()?;
        }
        ensemble.try_wait_quorum(QUORUM_TIMEOUT)?;
        Ok(ensemble)
    }

    /// The connect string of all three nodes, `127.0.0.1:{a},127.0.0.1:{b},127.0.0.1:{c}`.
    pub fn connect_string(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(ZooKeeperServer::connect_string)
            .collect();
        nodes.join(",")
    }

    /// The nodes, in the order of their ids (`server.1` first).
    pub fn nodes(&self) -> &[ZooKeeperServer] {
        &self.nodes
    }

    /// The index in [`nodes`](Self::nodes) of the leader, once there is a quorum (see
    /// [`wait_quorum`](Self::wait_quorum)).
    ///
    /// # Panics
    ///
    /// As [`wait_quorum`](Self::wait_quorum).
    #[track_caller]
    pub fn leader(&self) -> usize {
        self.wait_quorum();
        self.nodes
            .iter()
            .position(|node| node.mode().as_deref() == Some("leader"))
            .unwrap_or_else(|| panic!("the leader of {self:?} stepped down right away"))
    }

    /// Kills node `i` (see [`ZooKeeperServer::kill`]).
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again, with its data (see [`ZooKeeperServer::restart`]), and returns
    /// once it listens; [`wait_quorum`](Self::wait_quorum) waits until it follows.
    ///
    /// # Panics
    ///
    /// If `i` is out of range or the node cannot be started.
    #[track_caller]
    pub fn restart(&mut self, i: usize) {
        self.nodes[i].restart();
    }

    /// Freezes node `i` with `SIGSTOP` (see [`ZooKeeperServer::pause`]).
    ///
    /// # Panics
    ///
    /// If `i` is out of range or the node is not running.
    #[track_caller]
    pub fn pause(&self, i: usize) {
        self.nodes[i].pause();
    }

    /// Resumes node `i` with `SIGCONT`.
    ///
    /// # Panics
    ///
    /// If `i` is out of range or the node is not running.
    #[track_caller]
    pub fn resume(&self, i: usize) {
        self.nodes[i].resume();
    }

    /// Waits until a leader serves and every node that runs and is not paused follows it,
    /// e.g. after the leader was killed, or a node restarted.
    ///
    /// # Panics
    ///
    /// If that does not happen within 30 s (e.g. two of the three nodes are down), with what
    /// each node said last.
    #[track_caller]
    pub fn wait_quorum(&self) {
        if let Err(e) = self.try_wait_quorum(QUORUM_TIMEOUT) {
            panic!("{}", chain(&e));
        }
    }

    fn try_wait_quorum(&self, timeout: Duration) -> Result<(), HarnessError> {
        let started = Instant::now();
        loop {
            let modes: Vec<Option<String>> = self.nodes.iter().map(ZooKeeperServer::mode).collect();
            let leaders = modes.iter().flatten().filter(|m| *m == "leader").count();
            let stragglers = self.nodes.iter().zip(&modes).any(|(node, mode)| {
                node.is_running() && !node.process.is_paused() && mode.is_none()
            });
            if leaders == 1 && !stragglers {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                let detail = self
                    .nodes
                    .iter()
                    .zip(&modes)
                    .map(|(node, mode)| {
                        let state = match mode {
                            Some(mode) => mode.as_str(),
                            None if node.process.is_paused() => "paused",
                            None if node.is_running() => "not serving",
                            None => "not running",
                        };
                        format!("port {}: {state}", node.port())
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(HarnessError::NoQuorum {
                    waited: timeout,
                    detail,
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

#[track_caller]
fn fail_to_start(what: &str, e: &HarnessError) -> ! {
    if e.is_binary_not_found() {
        // Already a complete one-line instruction.
        panic!("{e}");
    }
    panic!("could not start a test ZooKeeper {what}: {}", chain(e))
}

/// `N` distinct ports that were free a moment ago, none of them ZooKeeper's default 2181.
fn free_ports<const N: usize>() -> Result<[u16; N], HarnessError> {
    let mut ports = [0; N];
    // Held open together, so that no two are the same.
    let mut listeners = Vec::with_capacity(N);
    let mut found = 0;
    while found < N {
        let (listener, port) = bind_any_port()?;
        if port != DEFAULT_PORT {
            ports[found] = port;
            found += 1;
        }
        listeners.push(listener);
    }
    Ok(ports)
}

/// The jars, by file name in [`JAVA_LIBS`], as a class path.
pub(crate) fn classpath(jars: &[&str]) -> String {
    let jars: Vec<String> = jars
        .iter()
        .map(|jar| format!("{JAVA_LIBS}/{jar}"))
        .collect();
    jars.join(":")
}

/// `Ok` if every jar is in [`JAVA_LIBS`]; which one is not, and the package to install.
pub(crate) fn check_installed(jars: &[&str], package: &'static str) -> Result<(), HarnessError> {
    match jars
        .iter()
        .find(|jar| !Path::new(JAVA_LIBS).join(jar).exists())
    {
        Some(jar) => Err(HarnessError::NotInstalled {
            missing: format!("{JAVA_LIBS}/{jar} not found"),
            package,
        }),
        None => Ok(()),
    }
}

/// A failed spawn of `java` or `javac`: not installed, or another I/O error.
pub(crate) fn java_error(program: &str, error: io::Error) -> HarnessError {
    match spawn_error(program, error) {
        HarnessError::BinaryNotFound { binary } => HarnessError::NotInstalled {
            missing: format!("{binary} not found on PATH"),
            package: if binary == JAVA {
                ZOOKEEPER_PACKAGE
            } else {
                "default-jdk-headless"
            },
        },
        other => other,
    }
}

/// One four-letter word over a fresh connection to `127.0.0.1:port`; the whole answer.
fn four_letter(port: u16, word: &str, timeout: Duration) -> Result<String, HarnessError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| HarnessError::io(format!("connect to {addr}"), e))?;
    let configure = stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)));
    configure.map_err(|e| HarnessError::io(format!("configure the connection to {addr}"), e))?;
    stream
        .write_all(word.as_bytes())
        .map_err(|e| HarnessError::io(format!("send {word} to {addr}"), e))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| HarnessError::io(format!("read the answer to {word} from {addr}"), e))?;
    Ok(answer)
}

/// What the server on `port` says it is in `srvr`'s `Mode:`, or `None` if it does not serve.
fn serving_mode(port: u16) -> Option<String> {
    let srvr = four_letter(port, "srvr", PROBE_TIMEOUT).ok()?;
    field(&srvr, "Mode: ").map(str::to_owned)
}

/// The rest of the first line that starts with `prefix`, e.g. `Mode: ` in `srvr`.
fn field<'a>(answer: &'a str, prefix: &str) -> Option<&'a str> {
    if answer.starts_with(NOT_SERVING) {
        return None;
    }
    answer
        .lines()
        .find_map(|line| line.strip_prefix(prefix))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ZooKeeperServer>();
        check::<ZooKeeperEnsemble>();
    }

    #[test]
    fn a_taken_port_is_detected_not_mistaken_for_ours() {
        let first = ZooKeeperServer::spawn();
        let port = first.port();
        let mut second = ZooKeeperServer::create(port, None).unwrap();
        // `first` serves on that port, but it is not `second`'s process.
        let err = second.start().unwrap_err();
        assert!(
            matches!(err, HarnessError::PortInUse { port: p } if p == port),
            "{err:?}"
        );
        assert!(!second.is_running());
        assert_eq!(first.mode().as_deref(), Some("standalone"));
    }

    #[test]
    fn missing_jar_is_one_line_that_says_what_to_install() {
        let err =
            check_installed(&["zookeeper-lock-tests-missing.jar"], ZOOKEEPER_PACKAGE).unwrap_err();
        assert!(err.is_binary_not_found(), "{err:?}");
        assert_eq!(
            err.to_string(),
            "/usr/share/java/zookeeper-lock-tests-missing.jar not found: install it with \
             \"apt-get install -y zookeeper\" (Debian/Ubuntu)"
        );
    }

    #[test]
    fn missing_java_says_what_to_install() {
        let not_found = || io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(
            java_error(JAVA, not_found()).to_string(),
            "java not found on PATH: install it with \"apt-get install -y zookeeper\" \
             (Debian/Ubuntu)"
        );
        assert_eq!(
            java_error("javac", not_found()).to_string(),
            "javac not found on PATH: install it with \"apt-get install -y \
             default-jdk-headless\" (Debian/Ubuntu)"
        );
    }

    #[test]
    fn fields_of_four_letter_words() {
        let srvr = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nMode: follower\n";
        assert_eq!(field(srvr, "Mode: "), Some("follower"));
        assert_eq!(field("zk_znode_count\t5\n", "zk_znode_count\t"), Some("5"));
        assert_eq!(field(&format!("{NOT_SERVING}\n"), "Mode: "), None);
    }

    #[test]
    fn free_ports_are_distinct() {
        let mut ports = free_ports::<9>().unwrap().to_vec();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 9);
    }
}
