//! What makes a contended exclusive lock fast on Redis, which it opts into:
//!
//! - **One waiting `Locker` woken per release.** Each `Locker` with tasks waiting for a
//!   lock is in the sorted set `P{K}:lockers`, oldest first, and listens on a channel of
//!   its own. A release wakes the one that has waited longest and still listens, so one
//!   process asks again, not all of them; a wake-up that reaches a `Locker` whose waiters
//!   are gone is relayed to the next. (A fair hand-over goes to its waiter's `Locker`'s
//!   channel the same way.)
//! - **Local hand-over.** A release of an exclusive lock that a task of the same `Locker`
//!   waits for hands it to the longest-waiting such task: one script sets that task's
//!   token and draws its fencing token, and no message is sent. After
//!   [`local_handovers`](super::RedisStoreBuilder::local_handovers) hand-overs in a row
//!   the release frees the lock and wakes the next process, so that waiters elsewhere get
//!   their turn.

use std::sync::Arc;

use tokio::time::Instant;

use super::connection::InHand;
use super::fencing::FenceSeed;
use super::fencing::in_epoch;
use super::hub::Listening;
use super::keys::RedisKey;
use super::{RedisStore, millis};
use crate::LockError;
use crate::wait::handover::{HandoverFailed, Leftover};
use crate::wait::line::{Line, Waiter};

/// What a release of an exclusive lock does.
pub(super) enum ReleasePlan {
    /// Hand it to this local waiter.
    Handover(Claim),
    /// Free it, waking one waiting `Locker`.
    Free(OwnWaiters),
}

/// Whether this `Locker`'s own waiters for a lock are to be woken by its release too (when
/// no other `Locker` waits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OwnWaiters {
    /// None wait, or they are not listening for wake-ups (no pub/sub): they poll.
    None,
    Listening,
}

/// A waiter claimed for a local hand-over. Dropped before the outcome was reported (the
/// release was cut short), it gives the waiter back its place, unsure whether the lock
/// became its own: it tries for itself, and if it gives up, releases by its token.
pub(super) struct Claim {
    waiter: Arc<Waiter>,
    reported: bool,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.reported {
            self.waiter.handover_failed(HandoverFailed::NoAnswer);
        }
    }
}

impl RedisStore {
    /// This `Locker`'s id, under which a release can wake it; empty without pub/sub.
    pub(super) fn listening_id(&self) -> &str {
        if self.hub.is_some() {
            self.channels.id()
        } else {
            ""
        }
    }

    /// How the holder of exclusive lock `key` gives it back: to a local waiter if one can
    /// be handed it, else free. One look at the lock's line serves both.
    pub(super) fn plan_release(&self, key: &RedisKey) -> ReleasePlan {
        let line = self.lines.get(key.as_str());
        if self.local_handovers > 0
            && let Some(line) = &line
            && let Some(waiter) = line.claim_for_handover(self.local_handovers)
        {
            return ReleasePlan::Handover(Claim {
                waiter,
                reported: false,
            });
        }
        ReleasePlan::Free(self.own_waiters(line.as_deref()))
    }

    /// Whether this `Locker`'s waiters in `line`, if any, are to be woken by a release of
    /// their lock.
    pub(super) fn own_waiters(&self, line: Option<&Line<Listening>>) -> OwnWaiters {
        if self.hub.is_some() && line.is_some_and(Line::has_waiters) {
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
        mut claim: Claim,
    ) -> Result<bool, LockError> {
        let waiter = claim.waiter.clone();
        let lease = waiter.lease;
        let mut call = self.scripts.handover.key(key.as_str());
        call.key(key.fence())
            .arg(token)
            .arg(&*waiter.token)
            .arg(millis(lease))
            .arg(self.fence_ttl_ms(lease))
            .arg(FenceSeed::ServerClock);
        let InHand { mut conn, epoch } = self.connection.in_hand().await?;
        // The waiter's lease runs from here, with the connection in hand.
        let sent_at = Instant::now();
        let reply: Option<u64> = match call.invoke_async(&mut conn).await {
            Ok(reply) => reply,
            // It may have run: should the waiter give up, it frees what it may hold
            // (the claim, dropped, says so).
            Err(e) => return Err(self.connection.error("release", e)),
        };
        claim.reported = true;
        let Some(fence) = reply.map(|raw| in_epoch(epoch, raw)) else {
            waiter.handover_failed(HandoverFailed::NotHeld);
            return Ok(false);
        };
        tracing::debug!(fence, "lock handed over to a local waiter");
        if waiter.handed_over(fence, sent_at + lease) == Leftover::Release {
            let own_waiters = self.own_waiters(self.lines.get(key.as_str()).as_deref());
            let freed = self
                .free_exclusive(&mut conn, key, &waiter.token, own_waiters)
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
                .connection
                .run("relay a wake-up", |mut conn| {
                    let mut call = store.scripts.relay.key(key.lockers());
                    call.key(key.channel()).arg(store.channels.id());
                    async move { call.invoke_async(&mut conn).await }
                })
                .await;
            if let Err(e) = relayed {
                tracing::debug!(key = %key, error = %e, "could not relay a wake-up; waiters poll");
            }
        });
    }

    /// Takes this `Locker` out of those a release of `key` wakes, in the background: its
    /// last waiter gave up. A failure is only logged: the entry runs out.
    pub(super) fn stop_waiting_detached(&self, key: &RedisKey) {
        let (store, key) = (self.clone(), key.clone());
        self.spawn("leave the waiting lockers", async move {
            let removed: Result<i64, LockError> = store
                .connection
                .run("leave the waiting lockers", |mut conn| {
                    let mut zrem = redis::cmd("ZREM");
                    zrem.arg(key.lockers()).arg(store.channels.id());
                    async move { zrem.query_async(&mut conn).await }
                })
                .await;
            if let Err(e) = removed {
                tracing::debug!(key = %key, error = %e, "could not leave the waiting lockers; waiters poll");
            }
        });
    }
}
