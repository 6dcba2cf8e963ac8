//! Where a lock lives in Redis: its store keys, and the channels that wake its waiters.
//!
//! A lock with key `K` under namespace `P` is the string key `P{K}`, holding its owner's
//! token. Every other key of the lock is `P{K}:<suffix>`, so all share the hash tag `{K}`
//! and one cluster slot, and every script gets them all through `KEYS`.

use std::fmt;
use std::sync::Arc;

use redis::{RedisWrite, ToRedisArgs};

use crate::LockKey;

/// The lock's fence counter, `P{K}:fence`.
const FENCE: &str = ":fence";
/// The `Locker`s with tasks waiting for the lock, oldest first, `P{K}:lockers`.
const LOCKERS: &str = ":lockers";
/// A fair lock's line of waiting tokens, `P{K}:queue`.
const QUEUE: &str = ":queue";
/// A fair lock's places in line (when each runs out, its lease, its `Locker`),
/// `P{K}:places`.
const PLACES: &str = ":places";
/// A read-write lock's readers, each with when its lease runs out, `P{K}:readers`.
const READERS: &str = ":readers";
/// A read-write lock's waiting writers, each with when it began to ask, `P{K}:writers`.
const WRITERS: &str = ":writers";
/// A semaphore's permit holders, each with when its lease runs out, `P{K}:holders`.
const HOLDERS: &str = ":holders";
/// A semaphore's count, `P{K}:permits`.
const PERMITS: &str = ":permits";
/// What the owner of an exclusive lock calls itself, if it named itself,
/// `P{K}:holder_id`.
const HOLDER_ID: &str = ":holder_id";
/// The stem of the lock's wake-up channels, `P{K}:released`: each `Locker` listens on
/// its own, the stem, `:`, and the `Locker`'s id.
const CHANNEL: &str = ":released";

/// A lock's key in Redis, `P{K}`, from which its other keys are named.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct RedisKey(Arc<str>);

impl RedisKey {
    /// The key of lock `key` under `namespace`.
    pub(super) fn new(namespace: &str, key: &LockKey) -> Self {
        Self(join(&[namespace, "{", key.as_str(), "}"]).into())
    }

    /// A key already in Redis form, as read back from a channel name.
    pub(super) fn from_redis(key: &str) -> Self {
        Self(key.into())
    }

    pub(super) fn as_str(&self) -> &str {
        &self.0
    }

    /// The key shared, to name the lock's local line without copying it.
    pub(super) fn shared(&self) -> &Arc<str> {
        &self.0
    }

    pub(super) fn fence(&self) -> Suffixed<'_> {
        self.suffixed(FENCE)
    }

    pub(super) fn lockers(&self) -> Suffixed<'_> {
        self.suffixed(LOCKERS)
    }

    pub(super) fn queue(&self) -> Suffixed<'_> {
        self.suffixed(QUEUE)
    }

    pub(super) fn places(&self) -> Suffixed<'_> {
        self.suffixed(PLACES)
    }

    pub(super) fn readers(&self) -> Suffixed<'_> {
        self.suffixed(READERS)
    }

    pub(super) fn writers(&self) -> Suffixed<'_> {
        self.suffixed(WRITERS)
    }

    pub(super) fn holders(&self) -> Suffixed<'_> {
        self.suffixed(HOLDERS)
    }

    pub(super) fn permits(&self) -> Suffixed<'_> {
        self.suffixed(PERMITS)
    }

    pub(super) fn holder_id(&self) -> Suffixed<'_> {
        self.suffixed(HOLDER_ID)
    }

    /// The stem of the lock's wake-up channels.
    pub(super) fn channel(&self) -> Suffixed<'_> {
        self.suffixed(CHANNEL)
    }

    fn suffixed(&self, suffix: &'static str) -> Suffixed<'_> {
        Suffixed { key: self, suffix }
    }
}

/// One of a lock's other keys (or channels), `P{K}:<suffix>`: written straight into the
/// command that names it, and shown as the key it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Suffixed<'a> {
    key: &'a RedisKey,
    suffix: &'static str,
}

impl fmt::Display for Suffixed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key.as_str())?;
        f.write_str(self.suffix)
    }
}

impl ToRedisArgs for Suffixed<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        out.write_arg_fmt(self);
    }
}

/// `parts` end to end.
fn join(parts: &[&str]) -> String {
    let mut joined = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        joined.push_str(part);
    }
    joined
}

impl fmt::Display for RedisKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A `Locker`'s own wake-up channels: one per lock it waits for, on which a release
/// wakes it and a fair lock is handed over to its waiters.
#[derive(Debug, Clone)]
pub(super) struct Channels {
    id: Arc<str>,
    /// `:released:<id>`.
    own_suffix: Arc<str>,
}

impl Channels {
    /// The channels of a new `Locker`, with a random id.
    pub(super) fn new() -> Self {
        let id = format!("{:016x}", fastrand::u64(..));
        Self {
            own_suffix: format!("{CHANNEL}:{id}").into(),
            id: id.into(),
        }
    }

    /// The `Locker`'s id, which releases name to wake it.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// This `Locker`'s channel for lock `key`.
    pub(super) fn of(&self, key: &str) -> String {
        format!("{key}{}", self.own_suffix)
    }

    /// The lock whose channel this is, if it is one of this `Locker`'s.
    pub(super) fn key_of<'a>(&self, channel: &'a str) -> Option<&'a str> {
        channel.strip_suffix(&*self.own_suffix)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use redis::cluster_routing::Slot;

    use super::*;

    #[test]
    fn every_key_of_a_lock_shares_its_hash_tag() {
        let key = RedisKey::new("lock:", &LockKey::new("balance:42").unwrap());
        assert_eq!(key.as_str().to_string(), "lock:{balance:42}");
        assert_eq!(key.fence().to_string(), "lock:{balance:42}:fence");
        assert_eq!(key.lockers().to_string(), "lock:{balance:42}:lockers");
        assert_eq!(key.queue().to_string(), "lock:{balance:42}:queue");
        assert_eq!(key.places().to_string(), "lock:{balance:42}:places");
        assert_eq!(key.channel().to_string(), "lock:{balance:42}:released");
        assert_eq!(key.readers().to_string(), "lock:{balance:42}:readers");
        assert_eq!(key.writers().to_string(), "lock:{balance:42}:writers");
        assert_eq!(key.holders().to_string(), "lock:{balance:42}:holders");
        assert_eq!(key.permits().to_string(), "lock:{balance:42}:permits");
        assert_eq!(key.holder_id().to_string(), "lock:{balance:42}:holder_id");
    }

    /// Every store key of each lock, with the names they are made by.
    fn store_keys(key: &RedisKey) -> [String; 10] {
        [
            key.as_str().to_owned(),
            key.fence().to_string(),
            key.lockers().to_string(),
            key.queue().to_string(),
            key.places().to_string(),
            key.readers().to_string(),
            key.writers().to_string(),
            key.holders().to_string(),
            key.permits().to_string(),
            key.holder_id().to_string(),
        ]
    }

    /// Lock names from the characters that could make two names' store keys meet: braces,
    /// the separator, and the letters of the suffixes.
    fn tricky_name() -> impl Strategy<Value = String> {
        "[{}:a-z]{1,12}"
    }

    proptest! {
        /// Each accepted name has store keys of its own, all in one cluster slot.
        #[test]
        fn every_accepted_name_maps_to_store_keys_of_its_own(
            a in tricky_name(),
            b in tricky_name(),
        ) {
            let (Ok(a), Ok(b)) = (LockKey::new(&a), LockKey::new(&b)) else {
                return Ok(());
            };
            let (keys_a, keys_b) = (
                store_keys(&RedisKey::new("lock:", &a)),
                store_keys(&RedisKey::new("lock:", &b)),
            );
            for keys in [&keys_a, &keys_b] {
                let slot = Slot::for_key(&keys[0]);
                for key in keys {
                    prop_assert_eq!(Slot::for_key(key), slot, "{}", key);
                }
            }
            if a != b {
                for key in &keys_a {
                    prop_assert!(!keys_b.contains(key), "{} and {} share {}", a, b, key);
                }
            }
        }
    }

    #[test]
    fn a_lock_is_found_from_its_lockers_channel() {
        let channels = Channels::new();
        let own = channels.of("lock:{a:released}");
        assert_eq!(own, format!("lock:{{a:released}}:released:{}", channels.id));
        assert_eq!(channels.key_of(&own), Some("lock:{a:released}"));
        let other = Channels::new().of("lock:{a}");
        assert_eq!(channels.key_of(&other), None, "another Locker's channel");
        assert_eq!(channels.key_of("lock:{a}:released"), None);
    }
}
