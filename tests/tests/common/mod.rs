//! What several Redis suites need.

use lock_core::{Locker, RedisConnectionManager, bb8};
use lock_tests::RedisServer;

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
