//! The read-write lock. Readers share the lock key `P{K}` marked `read`, each with its
//! own lease in the sorted set `P{K}:readers` (see [`shared`](super::shared)); a writer
//! holds `P{K}` with its token, as an exclusive lock's owner does, so readers, writers and
//! exclusive holders of one key exclude each other. Waiting writers, with when each began
//! to ask and their `Locker`, are the hash `P{K}:writers`: a reader that asked after one
//! of them waits for it, so a stream of readers cannot starve a writer, and the readers
//! that waited for a writer all go in once it is released. A write release, and the last
//! read release, wake every waiting `Locker`'s readers (one message each) and the writer
//! that has waited longest, alone (one message to its `Locker`, naming it).

use super::asking::{Attempting, WAITING_LOCKER, millis};
use super::keys::RedisKey;
use super::scripts::{ScriptCall, Scripts};
use crate::backend::store::Acquire;

/// The read acquire script's call for `attempting` the read side of lock `key`; a caller
/// that waits is registered among the `Locker`s a release wakes. Its reply is an
/// [`AcquireReply`](super::scripts::AcquireReply).
pub(super) fn read_acquire_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    attempting: &Attempting<'_>,
) -> ScriptCall<'a> {
    let mut call = scripts.read_acquire.key(key.as_str());
    call.key(key.fence())
        .key(key.readers())
        .key(key.writers())
        .key(key.lockers())
        .arg(&*attempting.request.token)
        .arg(attempting.lease_ms())
        .arg(attempting.fence_ttl_ms)
        .arg(asked_for_ms(attempting.request))
        .arg(attempting.waiting_as())
        .arg(millis(WAITING_LOCKER))
        .arg(attempting.seed);
    call
}

/// The write acquire script's call for `attempting` the write side of lock `key`; a
/// caller that waits keeps its place among the waiting writers. Its reply is an
/// [`AcquireReply`](super::scripts::AcquireReply).
pub(super) fn write_acquire_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    attempting: &Attempting<'_>,
) -> ScriptCall<'a> {
    let mut call = scripts.write_acquire.key(key.as_str());
    call.key(key.fence())
        .key(key.writers())
        .key(key.lockers())
        .arg(&*attempting.request.token)
        .arg(attempting.lease_ms())
        .arg(attempting.fence_ttl_ms)
        .arg(asked_for_ms(attempting.request))
        .arg(attempting.place_ms())
        .arg(attempting.listening_id)
        .arg(millis(WAITING_LOCKER))
        .arg(attempting.seed);
    call
}

/// The write release script's call for `token` on `key`: it releases the write side if
/// `token` holds it, and takes `token` out of the waiting writers.
pub(super) fn write_release_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    token: &str,
) -> ScriptCall<'a> {
    let mut call = scripts.write_release.key(key.as_str());
    call.key(key.writers())
        .key(key.lockers())
        .key(key.channel())
        .arg(token);
    call
}

/// How long ago the caller of `request` began to ask, in milliseconds: the store reckons
/// from it whether a waiting writer asked first.
fn asked_for_ms(request: &Acquire) -> u64 {
    u64::try_from(request.since.elapsed().as_millis()).unwrap_or(u64::MAX)
}
