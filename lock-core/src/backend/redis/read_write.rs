//! The read-write lock. Readers share the lock key `P{K}` marked `read`, each with its
//! own lease in the sorted set `P{K}:readers` (see [`shared`](super::shared)); a writer
//! holds `P{K}` with its token, as an exclusive lock's owner does, so readers, writers and
//! exclusive holders of one key exclude each other. Waiting writers, with when each began
//! to ask and their `Locker`, are the hash `P{K}:writers`: a reader that asked after one
//! of them waits for it, so a stream of readers cannot starve a writer, and the readers
//! that waited for a writer all go in once it is released. A write release, and the last
//! read release, wake every waiting `Locker`'s readers (one message each) and the writer
//! that has waited longest, alone (one message to its `Locker`, naming it).

use std::time::Duration;

use super::keys::RedisKey;
use super::scripts::{AcquireReply, ScriptCall};
use super::{Asking, PLACE_IN_LINE, RedisStore, Release, WAITING_LOCKER, millis};
use crate::LockError;
use crate::backend::store::Acquire;
use crate::kind::Sharing;
use crate::wait::Attempt;

impl RedisStore {
    /// One attempt at the read side; a caller that waits (`waits_for` not zero) is
    /// registered among the `Locker`s a release wakes.
    pub(super) async fn attempt_read(
        &self,
        request: &Acquire,
        waits_for: Duration,
        asking: Asking,
    ) -> Result<Attempt, LockError> {
        let key = self.key(&request.key);
        let mut call = self.scripts.read_acquire.key(key.as_str());
        call.key(key.fence())
            .key(key.readers())
            .key(key.writers())
            .key(key.lockers())
            .arg(&*request.token)
            .arg(millis(request.lease))
            .arg(self.fence_ttl_ms(request.lease))
            .arg(asked_for_ms(request))
            .arg(self.waiting_as(waits_for))
            .arg(millis(WAITING_LOCKER))
            .arg(asking.seed);
        let (reply, sent) = self
            .send_acquire::<AcquireReply>(
                &key,
                &request.token,
                &call,
                Release::Shared(Sharing::Read),
                asking.cut_short,
            )
            .await?;
        reply.attempt(request, sent)
    }

    /// One attempt at the write side; a caller that waits (`waits_for` not zero) keeps
    /// its place among the waiting writers for as long, but never longer than
    /// [`PLACE_IN_LINE`] before it asks again.
    pub(super) async fn attempt_write(
        &self,
        request: &Acquire,
        waits_for: Duration,
        asking: Asking,
    ) -> Result<Attempt, LockError> {
        let key = self.key(&request.key);
        let place = waits_for.min(PLACE_IN_LINE);
        let mut call = self.scripts.write_acquire.key(key.as_str());
        call.key(key.fence())
            .key(key.writers())
            .key(key.lockers())
            .arg(&*request.token)
            .arg(millis(request.lease))
            .arg(self.fence_ttl_ms(request.lease))
            .arg(asked_for_ms(request))
            // zero means "do not wait": not rounded up as leases are
            .arg(u64::try_from(place.as_millis()).unwrap_or(u64::MAX))
            .arg(self.listening_id())
            .arg(millis(WAITING_LOCKER))
            .arg(asking.seed);
        // Cut short, it releases the lock should it be its own, and stops waiting.
        let (reply, sent) = self
            .send_acquire::<AcquireReply>(
                &key,
                &request.token,
                &call,
                Release::Write,
                asking.cut_short,
            )
            .await?;
        reply.attempt(request, sent)
    }

    /// The write release script's call for `token` on `key`: it releases the write side
    /// if `token` holds it, and takes `token` out of the waiting writers.
    pub(super) fn write_release_call<'a>(&'a self, key: &RedisKey, token: &str) -> ScriptCall<'a> {
        let mut call = self.scripts.write_release.key(key.as_str());
        call.key(key.writers())
            .key(key.lockers())
            .key(key.channel())
            .arg(token);
        call
    }
}

/// How long ago the caller of `request` began to ask, in milliseconds: the store reckons
/// from it whether a waiting writer asked first.
fn asked_for_ms(request: &Acquire) -> u64 {
    u64::try_from(request.since.elapsed().as_millis()).unwrap_or(u64::MAX)
}
