//! Holds that share a lock: the readers of a read-write lock and the permit holders of a
//! semaphore. Each has its own token and lease, in a sorted set by when its lease runs out
//! (server clock), and the lock key `P{K}` holds the sharing's mark for as long as the
//! longest of them, so that other kinds wait for them. A lease that ran out is dropped by
//! the next script that looks: no sweeper. The scripts' helpers are `shared.lua`.

use super::keys::{RedisKey, Suffixed};
use super::scripts::{ScriptCall, Scripts};
use crate::kind::Sharing;

/// What the lock key holds while holds of `sharing` hold it, as the scripts take it: `""`
/// for an owner, whose token it holds.
pub(super) fn mark(sharing: Sharing) -> &'static str {
    match sharing {
        Sharing::Owner => "",
        Sharing::Read => "read",
        Sharing::Permit => "semaphore",
    }
}

/// The set of the holders of lock `key` that share it as `sharing`; none for an owner.
pub(super) fn holders(sharing: Sharing, key: &RedisKey) -> Option<Suffixed<'_>> {
    match sharing {
        Sharing::Owner => None,
        Sharing::Read => Some(key.readers()),
        Sharing::Permit => Some(key.holders()),
    }
}

/// The shared release script's call: `token`, sharing lock `key` as `sharing`, is one
/// holder fewer. Its reply says whether `token` held the lock.
pub(super) fn release_call<'a>(
    scripts: &'a Scripts,
    key: &RedisKey,
    token: &str,
    sharing: Sharing,
) -> ScriptCall<'a> {
    let mut call = scripts.shared_release.key(key.as_str());
    call.key(holders(sharing, key))
        .key(key.lockers())
        .key(key.channel())
        .key(key.writers())
        .arg(token)
        .arg(mark(sharing));
    call
}
