//! The fair lock: the exclusive lock's key (so fair and exclusive holds of one key
//! exclude each other), plus its line of waiting tokens `P{K}:queue` and their places
//! `P{K}:places`. A release hands the lock to the next in line and tells that waiter's
//! `Locker` alone, on its channel; a waiter's place runs out [`PLACE_IN_LINE`] after it
//! last asked, so one that died is skipped.
//!
//! [`PLACE_IN_LINE`]: super::asking::PLACE_IN_LINE

use super::asking::{Attempting, WAITING_LOCKER, millis};
use super::fencing::FenceSeed;
use super::keys::RedisKey;
use super::scripts::{FairAcquireReply, LockScript, ScriptCall, Scripts, Sent};
use crate::backend::wait::{Attempt, StoreClock};

/// A fair script's call on lock `key`, with the keys every fair script takes.
fn fair_call<'a>(script: &'a LockScript, key: &RedisKey) -> ScriptCall<'a> {
    let mut call = script.key(key.as_str());
    call.key(key.fence())
        .key(key.queue())
        .key(key.places())
        .key(key.channel())
        .key(key.lockers());
    call
}

/// The fair acquire script's call for `attempting` lock `key`; a caller that waits keeps
/// its place in line, under `locker_id`, the id of its `Locker`'s channel.
pub(super) fn acquire_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    attempting: &Attempting<'_>,
    locker_id: &str,
) -> ScriptCall<'a> {
    let mut call = fair_call(&scripts.fair_acquire, key);
    call.arg(&*attempting.request.token)
        .arg(attempting.lease_ms())
        .arg(attempting.fence_ttl_ms)
        .arg(attempting.place_ms())
        .arg(millis(WAITING_LOCKER))
        .arg(locker_id)
        .arg(FenceSeed::ServerClock);
    call
}

/// What an attempt whose call was `sent` as it was, and answered `reply`, came to.
pub(super) fn attempt(reply: FairAcquireReply, sent: Sent) -> Attempt {
    match reply {
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
    }
}

/// The call of `script`, the fair release or leave script, for `token` on `key`: it
/// hands the lock to the next in line, or frees it, drawing fencing tokens from a counter
/// kept `fence_ttl_ms`.
pub(super) fn release_call<'a>(
    script: &'a LockScript,
    key: &RedisKey,
    token: &str,
    fence_ttl_ms: u64,
) -> ScriptCall<'a> {
    let mut call = fair_call(script, key);
    call.arg(token)
        .arg(fence_ttl_ms)
        .arg(FenceSeed::ServerClock);
    call
}
