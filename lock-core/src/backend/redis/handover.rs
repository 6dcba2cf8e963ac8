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

use super::asking::millis;
use super::fencing::FenceSeed;
use super::keys::RedisKey;
use super::scripts::{ScriptCall, Scripts};
use crate::backend::wait::handover::HandoverFailed;
use crate::backend::wait::line::Waiter;

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

impl Claim {
    /// `waiter`, claimed: its outcome is yet to be reported.
    pub(super) fn new(waiter: Arc<Waiter>) -> Self {
        Self {
            waiter,
            reported: false,
        }
    }

    /// The waiter claimed.
    pub(super) fn waiter(&self) -> &Arc<Waiter> {
        &self.waiter
    }

    /// The hand-over came to an answer, which the caller reports to the waiter.
    pub(super) fn answered(mut self) {
        self.reported = true;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.reported {
            self.waiter.handover_failed(HandoverFailed::NoAnswer);
        }
    }
}

/// The hand-over script's call: it gives lock `key` from its holder `token` to `waiter`,
/// drawing the waiter's fencing token from a counter kept `fence_ttl_ms`. Its reply is
/// that token as drawn, or nil if `token` did not hold the lock.
pub(super) fn handover_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    token: &str,
    waiter: &Waiter,
    fence_ttl_ms: u64,
) -> ScriptCall<'a> {
    let mut call = scripts.handover.key(key.as_str());
    call.key(key.fence())
        .arg(token)
        .arg(&*waiter.token)
        .arg(millis(waiter.lease))
        .arg(fence_ttl_ms)
        .arg(FenceSeed::ServerClock);
    call
}

/// The relay script's call: it passes a wake-up for lock `key`, which found no waiter in
/// the `Locker` of `locker_id`, to the next waiting `Locker`. Its reply says whether one
/// was woken.
pub(super) fn relay_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    locker_id: &str,
) -> ScriptCall<'a> {
    let mut call = scripts.relay.key(key.lockers());
    call.key(key.channel()).arg(locker_id);
    call
}
