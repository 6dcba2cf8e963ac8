//! Where lock-core's Redis store keeps a lock, for tests that look behind the `Locker` at
//! the server: a lock named `name`, in the default namespace `lock:`, is the string key
//! `lock:{name}` holding its owner's token; every other key of the lock is
//! `lock:{name}:<suffix>` (`:fence`, `:queue`, `:lockers`, ...), and each `Locker` listens
//! for its wake-ups on a channel `lock:{name}:released:<the Locker's id>`; the followers
//! of an election `name` listen on the channel `lock:{name}:holder_id`. lock-core keeps
//! this layout private (`backend/redis/keys.rs`); these helpers are the tests' one copy
//! of it.

use crate::{RedisServer, ValueExt};

/// The Redis key of lock `name` in the default namespace: `lock:{name}`. The lock's other
/// keys are this, `:` and a suffix.
///
/// ```
/// assert_eq!(lock_tests::lock_key("balance:42"), "lock:{balance:42}");
/// ```
pub fn lock_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// Whether lock `name`, of any kind, is held on `server`: its key exists.
///
/// # Panics
///
/// If the server does not answer.
pub fn lock_exists(server: &RedisServer, name: &str) -> bool {
    let reply = server.cmd(&["EXISTS", &lock_key(name)]).unwrap();
    reply.as_int() == Some(1)
}

/// The token of the owner of exclusive (or fair) lock `name` on `server`, if it is held
/// there.
///
/// # Panics
///
/// If the server does not answer, or the lock is of a kind whose key is not a string.
pub fn lock_holder(server: &RedisServer, name: &str) -> Option<String> {
    let reply = server.cmd(&["GET", &lock_key(name)]).unwrap();
    reply.as_str().map(str::to_owned)
}

/// How many `Locker`s listen on `server` for releases of lock `name`: each subscribes to
/// a channel of its own, `lock:{name}:released:<its id>`.
///
/// # Panics
///
/// If the server does not answer.
pub fn subscribed_lockers(server: &RedisServer, name: &str) -> usize {
    count_channels(server, "CHANNELS", name)
}

/// How many `Locker`s listen for lock `name`'s wake-ups on cluster node `node`, where the
/// channels are sharded (`SSUBSCRIBE`).
///
/// # Panics
///
/// If the node does not answer.
pub fn sharded_subscribers(node: &RedisServer, name: &str) -> usize {
    count_channels(node, "SHARDCHANNELS", name)
}

/// How many followers of the election `name` listen on `server` for news of its leader.
///
/// # Panics
///
/// If the server does not answer.
pub fn listening_followers(server: &RedisServer, name: &str) -> usize {
    count_subscribers(server, "NUMSUB", name)
}

/// How many followers of the election `name` listen on cluster node `node`, where the
/// channels are sharded (`SSUBSCRIBE`).
///
/// # Panics
///
/// If the node does not answer.
pub fn sharded_listening_followers(node: &RedisServer, name: &str) -> usize {
    count_subscribers(node, "SHARDNUMSUB", name)
}

/// How many subscribers of election `name`'s channel `PUBSUB <count>` shows on `server`.
fn count_subscribers(server: &RedisServer, count: &str, name: &str) -> usize {
    let channel = format!("{}:holder_id", lock_key(name));
    let reply = server.cmd(&["PUBSUB", count, &channel]).unwrap();
    let counts = reply.as_sequence().expect("a channel and its count");
    counts
        .get(1)
        .and_then(|n| n.as_int())
        .and_then(|n| usize::try_from(n).ok())
        .expect("a count")
}

/// How many of lock `name`'s wake-up channels `PUBSUB <list>` shows on `server`.
fn count_channels(server: &RedisServer, list: &str, name: &str) -> usize {
    let pattern = format!("{}:released:*", lock_key(name));
    let reply = server.cmd(&["PUBSUB", list, &pattern]).unwrap();
    reply.as_sequence().expect("a list of channels").len()
}
