//! Giving a lock back on Redis: an exclusive lock to a waiter of the same `Locker` when
//! one can be handed it, else freed, waking the `Locker` that has waited longest; and a
//! lock given back in the background, when the call that would have given it back was cut
//! short or a waiter gave up.

use tokio::time::Instant;

use super::RedisStore;
use super::connection::InHand;
use super::fencing::in_epoch;
use super::handover::{self, Claim, OwnWaiters, ReleasePlan};
use super::hub::Listening;
use super::keys::RedisKey;
use crate::LockError;
use crate::backend::release::Release;
use crate::backend::wait::handover::{HandoverFailed, Leftover};
use crate::backend::wait::line::Line;

impl RedisStore {
    /// Releases lock `key` as `how` says, in the background: a lock handed over to a
    /// waiter that gave up, a fair waiter leaving the line, an acquire cut short.
    pub(super) fn release_detached(&self, key: &RedisKey, token: &str, how: Release) {
        let (store, key, token) = (self.clone(), key.clone(), token.to_owned());
        self.spawn("release a lock", async move {
            let released = async {
                let mut conn = store.0.connection.get().await?;
                store
                    .release_on(&mut conn, &key, &token, how)
                    .await
                    .map_err(|e| store.0.connection.error("release", e))
            };
            if let Err(e) = released.await {
                tracing::warn!(key = %key, error = %e, "background release failed; the lease will expire");
            }
        });
    }

    /// How the holder of exclusive lock `key` gives it back: to a local waiter if one can
    /// be handed it, else free. One look at the lock's line serves both. A holder that
    /// `named` itself frees it: a hand-over sets the waiter's token alone, and would leave
    /// the holder id behind.
    pub(super) fn plan_release(&self, key: &RedisKey, named: bool) -> ReleasePlan {
        let line = self.0.lines.get(key.as_str());
        if self.0.local_handovers > 0
            && !named
            && let Some(line) = &line
            && let Some(waiter) = line.claim_for_handover(self.0.local_handovers)
        {
            return ReleasePlan::Handover(Claim::new(waiter));
        }
        ReleasePlan::Free(self.own_waiters(line.as_deref()))
    }

    /// Whether this `Locker`'s waiters in `line`, if any, are to be woken by a release of
    /// their lock.
    pub(super) fn own_waiters(&self, line: Option<&Line<Listening>>) -> OwnWaiters {
        if self.0.hub.is_some() && line.is_some_and(Line::has_waiters) {
            OwnWaiters::Listening
        } else {
            OwnWaiters::None
        }
    }

    /// Hands lock `key` from its holder `token` to the claimed local waiter, in one
    /// command, and tells the waiter. Says whether `token` held the lock. A waiter that
    /// gave up meanwhile gets nothing: the lock is then freed, waking every contender.
    pub(super) async fn hand_over(
        &self,
        key: &RedisKey,
        token: &str,
        claim: Claim,
    ) -> Result<bool, LockError> {
        let waiter = claim.waiter().clone();
        let lease = waiter.lease;
        let fence_ttl_ms = self.fence_ttl_ms(lease);
        let call = handover::handover_call(&self.0.scripts, key, token, &waiter, fence_ttl_ms);
        let InHand { mut conn, epoch } = self.0.connection.in_hand().await?;
        // The waiter's lease runs from here, with the connection in hand.
        let sent_at = Instant::now();
        let reply: Option<u64> = match call.invoke_async(&mut conn).await {
            Ok(reply) => reply,
            // It may have run: should the waiter give up, it frees what it may hold
            // (the claim, dropped, says so).
            Err(e) => return Err(self.0.connection.error("release", e)),
        };
        claim.answered();
        let Some(fence) = reply.map(|raw| in_epoch(epoch, raw)) else {
            waiter.handover_failed(HandoverFailed::NotHeld);
            return Ok(false);
        };
        tracing::debug!(fence, "lock handed over to a local waiter");
        if waiter.handed_over(fence, sent_at + lease) == Leftover::Release {
            let own_waiters = self.own_waiters(self.0.lines.get(key.as_str()).as_deref());
            let freed = self
                // A waiter that names itself is never handed a lock: this one kept no id.
                .free_exclusive(&mut conn, key, &waiter.token, false, own_waiters)
                .await;
            if let Err(e) = freed {
                tracing::warn!(key = %key, error = %e, "could not free a lock handed to a waiter that gave up; the lease will expire");
            }
        }
        Ok(true)
    }

    /// Relays, in the background, a wake-up for lock `key` that found no local waiter.
    /// A failure is only logged: the waiters elsewhere still poll.
    pub(super) fn relay_detached(&self, key: &RedisKey) {
        let (store, key) = (self.clone(), key.clone());
        self.spawn("relay a wake-up", async move {
            let relayed: Result<bool, LockError> = store
                .0
                .connection
                .run("relay a wake-up", |mut conn| {
                    let call = handover::relay_call(&store.0.scripts, &key, store.0.channels.id());
                    async move { call.invoke_async(&mut conn).await }
                })
                .await;
            if let Err(e) = relayed {
                tracing::debug!(key = %key, error = %e, "could not relay a wake-up; waiters poll");
            }
        });
    }
}
