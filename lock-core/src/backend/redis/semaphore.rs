//! The semaphore: permit holders share the lock key `P{K}` marked `semaphore`, each with
//! its own lease in the sorted set `P{K}:holders` (see [`shared`](super::shared)), up to
//! the count stored in `P{K}:permits` on first use. A permit whose holder stopped renewing
//! is reclaimed by the next acquire that looks, on the server's clock. A permit release
//! wakes one waiting `Locker`; a new count wakes them all.

use super::asking::{Attempting, WAITING_LOCKER, millis};
use super::keys::RedisKey;
use super::scripts::{ScriptCall, Scripts};

/// The permit acquire script's call for `attempting` a permit of semaphore `key`, asked
/// for with `permits`; a caller that waits is registered among the `Locker`s a release
/// wakes. Its reply is an [`AcquireReply`](super::scripts::AcquireReply).
pub(super) fn acquire_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    attempting: &Attempting<'_>,
    permits: u32,
) -> ScriptCall<'a> {
    let mut call = scripts.permit_acquire.key(key.as_str());
    call.key(key.fence())
        .key(key.holders())
        .key(key.permits())
        .key(key.lockers())
        .arg(&*attempting.request.token)
        .arg(attempting.lease_ms())
        .arg(attempting.fence_ttl_ms)
        .arg(permits)
        .arg(attempting.waiting_as())
        .arg(millis(WAITING_LOCKER))
        .arg(attempting.seed);
    call
}

/// The call that counts the free permits of semaphore `key`, whose handle asks with
/// `permits`.
pub(super) fn permits_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    permits: u32,
) -> ScriptCall<'a> {
    let mut call = scripts.permits.key(key.as_str());
    call.key(key.holders()).key(key.permits()).arg(permits);
    call
}

/// The call that stores `permits` as semaphore `key`'s count, kept `fence_ttl_ms` as
/// its fence counter is, and wakes every waiting `Locker`.
pub(super) fn set_permits_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    permits: u32,
    fence_ttl_ms: u64,
) -> ScriptCall<'a> {
    let mut call = scripts.set_permits.key(key.permits());
    call.key(key.lockers())
        .key(key.channel())
        .arg(permits)
        .arg(fence_ttl_ms);
    call
}
