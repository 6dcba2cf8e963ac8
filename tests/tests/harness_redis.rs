//! The Redis harness: servers, clusters, the TCP proxy and `wait_until` behave as documented.

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use lock_tests::{
    HarnessError, RedisCluster, RedisServer, TcpProxy, TestServer, ValueExt, wait_until,
};
use redis::{Parser, Value};

const SHORT: Duration = Duration::from_millis(200);
const WAIT: Duration = Duration::from_secs(10);

fn bulk(value: &str) -> Value {
    Value::BulkString(value.as_bytes().to_vec())
}

fn ping(server: &RedisServer) -> Value {
    server.cmd(&["PING"]).expect("PING")
}

#[test]
fn a_redis_server_serves_on_its_own_port() {
    let server = RedisServer::spawn();
    assert!(server.is_running());
    assert_ne!(
        server.port(),
        6379,
        "must never use the machine's own Redis"
    );
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert_eq!(ping(&server).as_str(), Some("PONG"));
    assert_eq!(server.cmd(&["SET", "k", "v"]).unwrap(), Value::Okay);
    assert_eq!(server.cmd(&["GET", "k"]).unwrap(), bulk("v"));
    assert_eq!(server.cmd(&["GET", "missing"]).unwrap(), Value::Nil);
    assert_eq!(server.cmd(&["INCR", "n"]).unwrap().as_int(), Some(1));
    assert_eq!(server.cmd(&["DBSIZE"]).unwrap().as_int(), Some(2));
    // The server really runs with the harness's settings.
    let save = server.cmd(&["CONFIG", "GET", "save"]).unwrap();
    assert_eq!(save, Value::Array(vec![bulk("save"), bulk("")]));
    let bind = server.cmd(&["CONFIG", "GET", "bind"]).unwrap();
    assert_eq!(bind.as_sequence().unwrap()[1].as_str(), Some("127.0.0.1"));
    assert!(
        server.log().contains("Ready to accept connections"),
        "{}",
        server.log()
    );
}

#[test]
fn an_error_reply_is_a_value() {
    let server = RedisServer::spawn();
    server.cmd(&["SET", "k", "not a number"]).unwrap();
    let reply = server.cmd(&["INCR", "k"]).unwrap();
    let Value::ServerError(error) = &reply else {
        panic!("{reply:?}")
    };
    assert_eq!(error.code(), "ERR", "{reply:?}");
    let reply = server.cmd(&["NO-SUCH-COMMAND"]).unwrap();
    let Value::ServerError(error) = &reply else {
        panic!("{reply:?}")
    };
    assert!(
        error
            .details()
            .unwrap_or_default()
            .contains("unknown command"),
        "{reply:?}"
    );
}

#[test]
fn two_redis_servers_in_parallel_do_not_collide() {
    let a = RedisServer::spawn();
    let b = RedisServer::spawn();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    assert_ne!(a.pid(), b.pid());
    assert_eq!(a.cmd(&["SET", "k", "a"]).unwrap(), Value::Okay);
    assert_eq!(b.cmd(&["GET", "k"]).unwrap(), Value::Nil);
    assert_eq!(b.cmd(&["SET", "k", "b"]).unwrap(), Value::Okay);
    assert_eq!(a.cmd(&["GET", "k"]).unwrap(), bulk("a"));
    assert_eq!(b.cmd(&["GET", "k"]).unwrap(), bulk("b"));
}

#[test]
fn extra_args_reach_the_server() {
    let server = RedisServer::spawn_with(&["--maxmemory", "10mb"]);
    let reply = server.cmd(&["CONFIG", "GET", "maxmemory"]).unwrap();
    assert_eq!(
        reply,
        Value::Array(vec![bulk("maxmemory"), bulk("10485760")])
    );
}

#[test]
fn invalid_args_report_the_exit_and_the_log() {
    let err = RedisServer::try_spawn_with(&["--no-such-option", "x"]).unwrap_err();
    assert!(matches!(err, HarnessError::Exited { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("exited"), "{message}");
    // redis-server writes config errors to stderr, which goes to the log quoted here.
    assert!(message.contains("no-such-option"), "{message}");
}

#[test]
fn a_redis_restart_keeps_the_port_not_the_data() {
    let mut server = RedisServer::spawn();
    let port = server.port();
    let pid = server.pid().unwrap();
    assert_eq!(server.cmd(&["SET", "k", "v"]).unwrap(), Value::Okay);

    server.kill();
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    let err = server.cmd(&["PING"]).unwrap_err();
    assert!(
        matches!(err, HarnessError::NotRunning { port: p } if p == port),
        "{err:?}"
    );
    assert!(server.dir().exists(), "the dir is kept for the restart");
    server.kill(); // killing a killed server is a no-op

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), Some(pid));
    assert_eq!(ping(&server).as_str(), Some("PONG"));
    assert_eq!(
        server.cmd(&["GET", "k"]).unwrap(),
        Value::Nil,
        "data must not survive a restart"
    );
    assert_eq!(server.cmd(&["DBSIZE"]).unwrap().as_int(), Some(0));
    // The log keeps both runs.
    assert_eq!(
        server.log().matches("Ready to accept connections").count(),
        2,
        "{}",
        server.log()
    );
}

#[test]
fn a_restart_of_a_running_server_kills_it_first() {
    let mut server = RedisServer::spawn();
    server.cmd(&["SET", "k", "v"]).unwrap();
    let pid = server.pid();
    server.restart();
    assert_ne!(server.pid(), pid);
    assert_eq!(server.cmd(&["GET", "k"]).unwrap(), Value::Nil);
}

#[test]
fn a_paused_redis_answers_nothing_until_resumed() {
    let server = RedisServer::spawn();
    let stream = TcpStream::connect(server.addr()).unwrap();
    stream.set_read_timeout(Some(SHORT)).unwrap();
    let mut replies = Parser::new();
    (&stream)
        .write_all(&redis::cmd("PING").get_packed_command())
        .unwrap();
    assert_eq!(replies.parse_value(&stream).unwrap().as_str(), Some("PONG"));

    server.pause();
    assert!(server.is_running(), "a paused server is alive");
    (&stream)
        .write_all(&redis::cmd("ECHO").arg("frozen").get_packed_command())
        .unwrap();
    let started = Instant::now();
    let err = replies.parse_value(&stream).unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(started.elapsed() >= SHORT - Duration::from_millis(20));
    // A fresh connection times out as well.
    let err = server.cmd_with_timeout(&["PING"], SHORT).unwrap_err();
    assert!(err.is_timeout(), "{err:?}");

    server.resume();
    // The connected client gets the answer to the command it sent while the server was frozen.
    stream.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(replies.parse_value(&stream).unwrap(), bulk("frozen"));
    assert_eq!(ping(&server).as_str(), Some("PONG"));
}

#[test]
fn a_paused_server_gives_a_raw_client_a_read_timeout() {
    // What a client under test sees from a paused server: an io timeout, not an EOF.
    let server = RedisServer::spawn();
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream.set_read_timeout(Some(SHORT)).unwrap();
    server.pause();
    stream
        .write_all(&redis::cmd("PING").get_packed_command())
        .unwrap();
    let mut buf = [0u8; 16];
    let err = std::io::Read::read(&mut stream, &mut buf).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );
    server.resume();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let n = std::io::Read::read(&mut stream, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"+PONG\r\n");
}

#[test]
fn a_paused_server_can_be_killed_and_restarted() {
    let mut server = RedisServer::spawn();
    server.pause();
    server.kill();
    assert!(!server.is_running());
    server.restart();
    assert_eq!(ping(&server).as_str(), Some("PONG"));
}

#[test]
fn spawn_many_starts_independent_masters() {
    let servers = RedisServer::spawn_many(3);
    assert_eq!(servers.len(), 3);
    let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "ports must be distinct: {servers:?}");
    for (i, server) in servers.iter().enumerate() {
        let role = server.cmd(&["ROLE"]).unwrap();
        assert_eq!(
            role.as_sequence().unwrap()[0].as_str(),
            Some("master"),
            "{role:?}"
        );
        server.cmd(&["SET", "k", &i.to_string()]).unwrap();
    }
    for (i, server) in servers.iter().enumerate() {
        assert_eq!(server.cmd(&["GET", "k"]).unwrap(), bulk(&i.to_string()));
    }
    assert!(RedisServer::spawn_many(0).is_empty());
}

#[test]
fn drop_kills_the_process_and_removes_the_dir() {
    let server = RedisServer::spawn();
    let addr = server.addr();
    let dir = server.dir().to_owned();
    assert!(TcpStream::connect(addr).is_ok());
    assert!(dir.join("redis.log").exists());
    drop(server);
    wait_until(
        WAIT,
        "the dropped server's port to refuse connections",
        || TcpStream::connect_timeout(&addr, SHORT).is_err(),
    );
    assert!(!dir.exists(), "{} must be removed", dir.display());
}

#[test]
fn servers_can_be_shared_between_threads() {
    let server = RedisServer::spawn();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20 {
                    let n = server.cmd(&["INCR", "n"]).unwrap().as_int().unwrap();
                    assert!(n > 0);
                }
            });
        }
    });
    assert_eq!(server.cmd(&["GET", "n"]).unwrap(), bulk("80"));
}

#[test]
fn a_missing_binary_is_one_line_that_says_what_to_install() {
    let err = RedisServer::try_spawn_from("redis-server-lock-tests-missing", &[]).unwrap_err();
    assert!(err.is_binary_not_found(), "{err:?}");
    let message = err.to_string();
    assert!(!message.contains('\n'), "{message}");
    assert_eq!(
        message,
        "redis-server-lock-tests-missing not found on PATH: install it with \
         \"apt-get install -y redis-server\" (Debian/Ubuntu) or \"brew install redis\" (macOS)"
    );
}

#[test]
fn try_spawn_from_runs_the_given_binary() {
    let server = RedisServer::try_spawn_from("redis-server", &["--maxclients", "77"]).unwrap();
    let reply = server.cmd(&["CONFIG", "GET", "maxclients"]).unwrap();
    assert_eq!(reply.as_sequence().unwrap()[1], bulk("77"));
}

/// Sends `args` over `stream` and reads the reply; `None` if either fails.
fn send(stream: &TcpStream, args: &[&str]) -> Option<Value> {
    (&*stream)
        .write_all(&redis::Cmd::new().arg(args).get_packed_command())
        .ok()?;
    Parser::new().parse_value(stream).ok()
}

#[test]
fn a_proxy_forwards_until_it_cuts_every_connection() {
    let server = RedisServer::spawn();
    let proxy = TcpProxy::start(server.addr()).unwrap();
    assert_eq!(proxy.url(), format!("redis://{}/", proxy.addr()));
    let connect = || {
        let stream = TcpStream::connect(proxy.addr()).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        stream
    };
    let (first, second) = (connect(), connect());
    assert_eq!(send(&first, &["SET", "k", "v"]), Some(Value::Okay));
    assert_eq!(send(&second, &["GET", "k"]), Some(bulk("v")));

    assert_eq!(proxy.cut(), 2);
    for stream in [&first, &second] {
        assert_eq!(send(stream, &["PING"]), None, "a cut connection answered");
    }
    // The server saw its side closed too, and a new connection is served.
    wait_until(WAIT, "the server to drop the cut connections", || {
        server
            .cmd(&["CLIENT", "LIST"])
            .unwrap()
            .as_str()
            .unwrap()
            .lines()
            .count()
            == 1
    });
    assert_eq!(send(&connect(), &["GET", "k"]), Some(bulk("v")));
}

#[test]
fn wait_until_returns_once_true() {
    let mut calls = 0;
    wait_until(WAIT, "three calls", || {
        calls += 1;
        calls >= 3
    });
    assert_eq!(calls, 3);
}

#[test]
#[should_panic(expected = "timed out after 50ms waiting for the impossible")]
fn wait_until_panics_after_the_deadline() {
    wait_until(Duration::from_millis(50), "the impossible", || false);
}

#[test]
fn a_cluster_serves_every_slot() {
    let cluster = RedisCluster::spawn();
    assert_eq!(cluster.nodes().len(), 3);
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    for (node, url) in cluster.nodes().iter().zip(&urls) {
        assert_eq!(url, &node.url());
        let info = node.cmd(&["CLUSTER", "INFO"]).unwrap();
        let info = info.as_str().unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
        assert!(info.contains("cluster_known_nodes:3"), "{info}");
        assert!(info.contains("cluster_size:3"), "{info}");
        assert_eq!(
            node.cmd(&["CLUSTER", "KEYSLOT", "foo"]).unwrap().as_int(),
            Some(12182)
        );
        assert_eq!(
            node.cmd(&["CLUSTER", "KEYSLOT", "{foo}:fence"])
                .unwrap()
                .as_int(),
            Some(12182)
        );
    }
    // Exactly one node takes the key; the others redirect to it.
    let owner = cluster.node_for_key("foo");
    for (i, node) in cluster.nodes().iter().enumerate() {
        let reply = node.cmd(&["SET", "foo", "bar"]).unwrap();
        if i == owner {
            assert_eq!(reply, Value::Okay);
        } else {
            let Value::ServerError(error) = &reply else {
                panic!("{reply:?}")
            };
            let to = format!("12182 127.0.0.1:{}", cluster.nodes()[owner].port());
            assert_eq!(error.code(), "MOVED", "{reply:?}");
            assert_eq!(error.details(), Some(to.as_str()), "{reply:?}");
        }
    }
}

#[test]
fn a_restarted_cluster_node_rejoins_with_its_slots() {
    let mut cluster = RedisCluster::spawn();
    let owner = cluster.node_for_key("k");
    let port = cluster.nodes()[owner].port();
    cluster.nodes()[owner].cmd(&["SET", "k", "v"]).unwrap();

    cluster.node_mut(owner).kill();
    assert!(cluster.node_mut(owner).cmd(&["PING"]).is_err());
    cluster.node_mut(owner).restart();
    assert_eq!(cluster.nodes()[owner].port(), port);

    cluster.try_wait_ok(Duration::from_secs(30)).unwrap();
    assert_eq!(cluster.node_for_key("k"), owner, "the node keeps its slots");
    assert_eq!(
        cluster.nodes()[owner].cmd(&["GET", "k"]).unwrap(),
        Value::Nil
    );
}

#[test]
fn calls_counts_the_commands_a_server_ran() {
    let server = RedisServer::spawn();
    assert_eq!(server.calls("echo"), 0);
    for _ in 0..3 {
        server.cmd(&["ECHO", "x"]).unwrap();
    }
    assert_eq!(server.calls("echo"), 3);
    assert_eq!(server.calls("no-such-command"), 0);
}
