//! What several Redis suites need.
#![allow(dead_code, reason = "each suite that includes this uses some of it")]

use lock_core::Locker;
use lock_core::backend::redis::{RedisConnectionManager, bb8};
use lock_tests::RedisServer;

/// A `Locker` on the test server, with every setting at its default.
pub(crate) async fn connect(server: &RedisServer) -> Locker {
    Locker::connect(&server.url())
        .await
        .expect("connect to the test server")
}

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
