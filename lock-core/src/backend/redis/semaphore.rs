//! The semaphore: permit holders share the lock key `P{K}` marked `semaphore`, each with
//! its own lease in the sorted set `P{K}:holders` (see [`shared`](super::shared)), up to
//! the count stored in `P{K}:permits` on first use. A permit whose holder stopped renewing
//! is reclaimed by the next acquire that looks, on the server's clock. A permit release
//! wakes one waiting `Locker`; a new count wakes them all.

use std::time::Duration;

use super::scripts::AcquireReply;
use super::{Asking, RedisStore, Release, WAITING_LOCKER, millis};
use crate::backend::store::Acquire;
use crate::kind::Sharing;
use crate::wait::Attempt;
use crate::{LockError, LockKey};

impl RedisStore {
    /// One attempt at a permit; a caller that waits (`waits_for` not zero) is registered
    /// among the `Locker`s a release wakes.
    pub(super) async fn attempt_permit(
        &self,
        request: &Acquire,
        permits: u32,
        waits_for: Duration,
        asking: Asking,
    ) -> Result<Attempt, LockError> {
        let key = self.key(&request.key);
        let mut call = self.scripts.permit_acquire.key(key.as_str());
        call.key(key.fence())
            .key(key.holders())
            .key(key.permits())
            .key(key.lockers())
            .arg(&*request.token)
            .arg(millis(request.lease))
            .arg(self.fence_ttl_ms(request.lease))
            .arg(permits)
            .arg(self.waiting_as(waits_for))
            .arg(millis(WAITING_LOCKER))
            .arg(asking.seed);
        let release = Release::Shared(Sharing::Permit);
        let (reply, sent) = self
            .send_acquire::<AcquireReply>(&key, &request.token, &call, release, asking.cut_short)
            .await?;
        reply.attempt(request, sent)
    }

    /// Free permits of semaphore `key`, whose handle asks with `permits`.
    pub(super) async fn available_permits(
        &self,
        key: &LockKey,
        permits: u32,
    ) -> Result<u32, LockError> {
        let key = self.key(key);
        let mut call = self.scripts.permits.key(key.as_str());
        call.key(key.holders()).key(key.permits()).arg(permits);
        self.connection
            .run("count free permits", |mut conn| {
                let call = &call;
                async move { call.invoke_async(&mut conn).await }
            })
            .await
    }

    /// Stores `permits` as semaphore `key`'s count, kept as long as its fence counter.
    pub(super) async fn store_permits(&self, key: &LockKey, permits: u32) -> Result<(), LockError> {
        let key = self.key(key);
        let mut call = self.scripts.set_permits.key(key.permits());
        call.key(key.lockers())
            .key(key.channel())
            .arg(permits)
            .arg(self.fence_ttl_ms(Duration::ZERO));
        let _: i64 = self
            .connection
            .run("set a semaphore's count", |mut conn| {
                let call = &call;
                async move { call.invoke_async(&mut conn).await }
            })
            .await?;
        Ok(())
    }
}
