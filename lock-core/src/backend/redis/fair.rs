//! The fair lock: the exclusive lock's key (so fair and exclusive holds of one key
//! exclude each other), plus its line of waiting tokens `P{K}:queue` and their places
//! `P{K}:places`. A release hands the lock to the next in line and tells that waiter's
//! `Locker` alone, on its channel; a waiter's place runs out [`PLACE_IN_LINE`] after it
//! last asked, so one that died is skipped.

use std::time::Duration;

use super::fencing::FenceSeed;
use super::keys::RedisKey;
use super::scripts::FairAcquireReply;
use super::scripts::{LockScript, ScriptCall};
use super::{CutShort, PLACE_IN_LINE, RedisStore, Release, WAITING_LOCKER, millis};
use crate::LockError;
use crate::backend::store::Acquire;
use crate::wait::{Attempt, StoreClock};

impl RedisStore {
    /// A fair script's call on lock `key`, with the keys every fair script takes.
    fn fair_call<'a>(&self, script: &'a LockScript, key: &RedisKey) -> ScriptCall<'a> {
        let mut call = script.key(key.as_str());
        call.key(key.fence())
            .key(key.queue())
            .key(key.places())
            .key(key.channel())
            .key(key.lockers());
        call
    }

    /// One attempt at a fair lock; a caller that waits (`waits_for` not zero) keeps its
    /// place in line for as long, but never longer than [`PLACE_IN_LINE`] before it asks
    /// again.
    pub(super) async fn attempt_fair(
        &self,
        request: &Acquire,
        waits_for: Duration,
    ) -> Result<Attempt, LockError> {
        let key = self.key(&request.key);
        let place = waits_for.min(PLACE_IN_LINE);
        let mut call = self.fair_call(&self.scripts.fair_acquire, &key);
        call.arg(&*request.token)
            .arg(millis(request.lease))
            .arg(self.fence_ttl_ms(request.lease))
            // zero means "do not queue": not rounded up as leases are
            .arg(u64::try_from(place.as_millis()).unwrap_or(u64::MAX))
            .arg(millis(WAITING_LOCKER))
            .arg(self.channels.id())
            .arg(FenceSeed::ServerClock);
        // Cut short, it leaves the line, releasing the lock should it be its own.
        let (reply, sent) = self
            .send_acquire::<FairAcquireReply>(
                &key,
                &request.token,
                &call,
                Release::Leave,
                CutShort::Release,
            )
            .await?;
        Ok(match reply {
            FairAcquireReply::Taken { fence, left } => Attempt::Acquired {
                fence: sent.fence(fence),
                until: sent.at + left,
            },
            FairAcquireReply::Held { ttl, now_us } => Attempt::Held {
                ttl,
                clock: Some(StoreClock {
                    sent_at: sent.at,
                    us: now_us,
                }),
            },
        })
    }

    /// Releases fair lock `key` if `token` holds it: to the next in line, or free.
    pub(super) async fn release_fair(
        &self,
        key: &RedisKey,
        token: &str,
    ) -> Result<bool, LockError> {
        let mut conn = self.connection.get().await?;
        self.release_on(&mut conn, key, token, Release::Fair)
            .await
            .map_err(|e| self.connection.error("release", e))
    }

    /// The fair release or leave script's call for `token` on `key`.
    pub(super) fn fair_release_call<'a>(
        &self,
        script: &'a LockScript,
        key: &RedisKey,
        token: &str,
    ) -> ScriptCall<'a> {
        let mut call = self.fair_call(script, key);
        call.arg(token)
            .arg(self.fence_ttl_ms)
            .arg(FenceSeed::ServerClock);
        call
    }
}
