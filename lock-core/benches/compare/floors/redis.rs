//! The Redis floors, raw and raw-fenced: one redis-rs `MultiplexedConnection`, `SET NX
//! PX` (with a fencing counter's `INCR` beside it, for raw-fenced, in one script) and a
//! compare-and-delete script.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::redis::redis::aio::MultiplexedConnection;
use lock_core::backend::redis::redis::{self, Script};

/// The lease of raw, raw-fenced and rslock; lock-core's default lease is the same.
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// raw-fenced's acquire: the key if free, then a fencing token from the counter beside it.
/// Returns the token, or nil when the lock is held.
const RAW_FENCED_ACQUIRE: &str = r#"if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false"#;

/// The compare-and-delete of raw and raw-fenced (and of redis-py, node-redlock, redsync).
const RAW_RELEASE: &str = r#"if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0"#;

/// A redis-rs `MultiplexedConnection` with the floors' scripts loaded.
#[derive(Debug, Clone)]
pub(crate) struct Raw {
    conn: MultiplexedConnection,
    fenced_acquire: Arc<Script>,
    release: Arc<Script>,
}

impl Raw {
    pub(crate) async fn connect(url: &str) -> Self {
        let mut conn = connection(url).await;
        let fenced_acquire = Script::new(RAW_FENCED_ACQUIRE);
        let release = Script::new(RAW_RELEASE);
        for script in [&fenced_acquire, &release] {
            script
                .prepare_invoke()
                .load_async(&mut conn)
                .await
                .expect("SCRIPT LOAD");
        }
        Self {
            conn,
            fenced_acquire: Arc::new(fenced_acquire),
            release: Arc::new(release),
        }
    }

    /// `SET key token NX PX lease`: whether it set the key.
    pub(crate) async fn try_acquire(&self, key: &str, token: &str) -> bool {
        let reply: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(LEASE.as_millis() as u64)
            .query_async(&mut self.conn.clone())
            .await
            .expect("SET NX PX");
        reply.is_some()
    }

    /// The same `SET` and an `INCR` of `fence`, in one script: the fencing token, if it set
    /// the key.
    pub(crate) async fn try_acquire_fenced(
        &self,
        key: &str,
        fence: &str,
        token: &str,
    ) -> Option<u64> {
        self.fenced_acquire
            .key(key)
            .key(fence)
            .arg(token)
            .arg(LEASE.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await
            .expect("EVALSHA fenced acquire")
    }

    /// Deletes `key` if it still holds `token`.
    pub(crate) async fn release(&self, key: &str, token: &str) {
        let _: i64 = self
            .release
            .key(key)
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await
            .expect("EVALSHA release");
    }
}

/// A new multiplexed connection to `url`.
pub(crate) async fn connection(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis")
}
