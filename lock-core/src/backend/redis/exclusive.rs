//! The exclusive lock: the string key `P{K}` holding its owner's token, set with
//! `SET NX PX` (the protocol of redis-py's `Lock`, node-redlock and redsync), its
//! fencing token drawn in the same script, and a compare-and-delete to release it.

use std::time::Duration;

use super::connection::Conn;
use super::handover::{OwnWaiters, ReleasePlan};
use super::keys::RedisKey;
use super::scripts::AcquireReply;
use super::{Asking, RedisStore, Release, WAITING_LOCKER, millis};
use crate::LockError;
use crate::backend::store::Acquire;
use crate::wait::Attempt;
use redis::RedisResult;
use tracing::Instrument;

impl RedisStore {
    /// One attempt at an exclusive lock; a caller that waits (`waits_for` not zero) is
    /// registered among the `Locker`s a release wakes.
    pub(super) async fn attempt_exclusive(
        &self,
        request: &Acquire,
        waits_for: Duration,
        asking: Asking,
    ) -> Result<Attempt, LockError> {
        let key = self.key(&request.key);
        let mut call = self.scripts.acquire.key(key.as_str());
        call.key(key.fence())
            .key(key.lockers())
            .arg(&*request.token)
            .arg(millis(request.lease))
            .arg(self.fence_ttl_ms(request.lease))
            .arg(self.waiting_as(waits_for))
            .arg(millis(WAITING_LOCKER))
            .arg(asking.seed);
        let (reply, sent) = self
            .send_acquire::<AcquireReply>(
                &key,
                &request.token,
                &call,
                Release::Exclusive,
                asking.cut_short,
            )
            .await?;
        reply.attempt(request, sent)
    }

    /// Releases lock `key` if `token` holds it: to a local waiter when one can be handed
    /// it, else free, waking one waiting `Locker`. Not retried on a fresh connection: had
    /// the first attempt gone through, the retry would report the lock as not held.
    pub(super) async fn release_exclusive(
        &self,
        key: &RedisKey,
        token: &str,
    ) -> Result<bool, LockError> {
        match self.plan_release(key) {
            ReleasePlan::Handover(claim) => {
                let span = tracing::debug_span!("lock_handover");
                self.hand_over(key, token, claim).instrument(span).await
            }
            ReleasePlan::Free(own_waiters) => {
                let mut conn = self.connection.get().await?;
                self.free_exclusive(&mut conn, key, token, own_waiters)
                    .await
                    .map_err(|e| self.connection.error("release", e))
            }
        }
    }

    /// Frees lock `key` on `conn` if `token` holds it, and wakes the `Locker` that has
    /// waited longest (this one's waiters too, behind the others, if `own_waiters` say
    /// they listen). Says whether `token` held it.
    pub(super) async fn free_exclusive(
        &self,
        conn: &mut Conn,
        key: &RedisKey,
        token: &str,
        own_waiters: OwnWaiters,
    ) -> RedisResult<bool> {
        let mut call = self.scripts.release.key(key.as_str());
        call.key(key.lockers())
            .key(key.channel())
            .arg(token)
            .arg(self.listening_id())
            .arg(match own_waiters {
                OwnWaiters::Listening => "1",
                OwnWaiters::None => "0",
            })
            .arg(millis(WAITING_LOCKER));
        call.invoke_async(conn).await
    }
}
