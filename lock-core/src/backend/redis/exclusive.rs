//! The exclusive lock: the string key `P{K}` holding its owner's token, set with a `PX`
//! expiry only while nobody holds it (the layout of redis-py's `Lock`, node-redlock and
//! redsync, whose `SET NX PX` ours excludes), its fencing token drawn in the same script,
//! and a compare-and-delete to release it. An owner that names itself (an election's
//! candidate) keeps its holder id in `P{K}:holder_id`, set, renewed and deleted by the
//! same scripts, to which it alone passes that key: a plain lock's calls are unchanged.

use super::asking::{Attempting, WAITING_LOCKER, millis};
use super::handover::OwnWaiters;
use super::keys::RedisKey;
use super::scripts::{ScriptCall, Scripts};

/// The acquire script's call for `attempting` lock `key`; a caller that waits is
/// registered among the `Locker`s a release wakes, and one that names itself keeps its
/// holder id. Its reply is an [`AcquireReply`](super::scripts::AcquireReply).
pub(super) fn acquire_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    attempting: &Attempting<'_>,
) -> ScriptCall<'a> {
    let holder_id = attempting.request.holder_id.as_deref();
    let mut call = scripts.acquire.key_named(holder_id.is_some(), key.as_str());
    call.key(key.fence()).key(key.lockers());
    if holder_id.is_some() {
        call.key(key.holder_id());
    }
    call.arg(&*attempting.request.token)
        .arg(attempting.lease_ms())
        .arg(attempting.fence_ttl_ms)
        .arg(attempting.waiting_as())
        .arg(millis(WAITING_LOCKER));
    if let Some(id) = holder_id {
        call.arg(id);
    }
    call.arg(attempting.seed);
    call
}

/// The release script's call: it frees lock `key` if `token` holds it (and deletes its
/// holder id, if `named`), and wakes the `Locker` that has waited longest (this one,
/// `listening_id`, too, behind the others, if `own_waiters` say they listen). Its reply
/// says whether `token` held the lock.
pub(super) fn release_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    token: &str,
    named: bool,
    listening_id: &str,
    own_waiters: OwnWaiters,
) -> ScriptCall<'a> {
    let mut call = scripts.release.key_named(named, key.as_str());
    call.key(key.lockers()).key(key.channel());
    if named {
        call.key(key.holder_id());
    }
    call.arg(token)
        .arg(listening_id)
        .arg(match own_waiters {
            OwnWaiters::Listening => "1",
            OwnWaiters::None => "0",
        })
        .arg(millis(WAITING_LOCKER));
    call
}
