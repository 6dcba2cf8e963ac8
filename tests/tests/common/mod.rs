//! What several Redis suites need.
#![allow(dead_code, reason = "each suite that includes this uses some of it")]

use std::time::Duration;

use lock_core::redis::AsyncCommands;
use lock_core::{LockOptions, Locker, RedisConnectionManager, bb8};
use lock_tests::{RedisServer, ValueExt};

/// A `Locker` on a bare bb8 pool, with no url: it has no pub/sub connection, so its
/// waiters hear no release and poll.
pub(crate) async fn deaf_locker(server: &RedisServer) -> Locker {
    let manager = RedisConnectionManager::new(server.url()).unwrap();
    let pool = bb8::Pool::builder()
        .max_size(2)
        .build(manager)
        .await
        .unwrap();
    Locker::builder().pool(pool).build().await.unwrap()
}

/// `tasks` tasks, spread over two `Locker`s (two "replicas"), each take lock "counter"
/// `rounds` times with `opts` and increment a counter stored in Redis with a deliberately
/// non-atomic read, yield, write. Returns the counter: `tasks * rounds` unless an update
/// was lost. Each task must finish within a minute.
pub(crate) async fn count_under_lock(
    server: &RedisServer,
    tasks: usize,
    rounds: usize,
    opts: LockOptions,
) -> i64 {
    let mut lockers = Vec::new();
    for _ in 0..2 {
        lockers.push(Locker::connect(&server.url()).await.unwrap());
    }
    let client = lock_core::redis::Client::open(server.url()).unwrap();
    let mut running = Vec::new();
    for i in 0..tasks {
        let locker = lockers[i % 2].clone();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        running.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = locker.lock_with("counter", opts).await.unwrap();
                let seen: i64 = conn.get("counter").await.unwrap_or(0);
                tokio::task::yield_now().await;
                let () = conn.set("counter", seen + 1).await.unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    for task in running {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("a task still running after a minute")
            .unwrap();
    }
    let total = server.cmd(&["GET", "counter"]).unwrap();
    total.as_str().and_then(|t| t.parse().ok()).unwrap_or(0)
}

/// How many `Locker`s listen for releases of lock `name` (default namespace): each
/// subscribes to a channel of its own, `lock:{name}:released:<its id>`.
pub(crate) fn subscribed_lockers(server: &RedisServer, name: &str) -> usize {
    let pattern = format!("lock:{{{name}}}:released:*");
    let reply = server.cmd(&["PUBSUB", "CHANNELS", &pattern]).unwrap();
    reply.as_sequence().unwrap().len()
}

/// How many `Locker`s listen for lock `name`'s wake-ups on cluster node `node` (sharded
/// channels, default namespace).
pub(crate) fn sharded_subscribers(node: &RedisServer, name: &str) -> usize {
    let pattern = format!("lock:{{{name}}}:released:*");
    let reply = node.cmd(&["PUBSUB", "SHARDCHANNELS", &pattern]).unwrap();
    reply.as_sequence().unwrap().len()
}
