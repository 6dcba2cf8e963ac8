//! Which node of a Redis Cluster serves a key: the slot of a key, and the map of the
//! masters serving each range of slots.
//!
//! redis-rs routes each command by its key, but keeps its slot map to itself. This one is
//! read with `CLUSTER SLOTS` when first needed and read again after it was found out of
//! date ([`super::routing`] says when).

use std::sync::{Arc, Mutex, MutexGuard};

use redis::cluster_async::ClusterConnection;
use redis::{RedisResult, Value};

/// The number of slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// A node of the cluster, as `CLUSTER SLOTS` names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Node {
    pub(super) host: String,
    pub(super) port: u16,
}

/// The master serving each range of slots.
#[derive(Debug, Default)]
pub(super) struct SlotMap {
    /// First slot, last slot, master; sorted by first slot.
    ranges: Vec<(u16, u16, Node)>,
}

impl SlotMap {
    /// The master serving `key`, if the map knows it.
    pub(super) fn node_of(&self, key: &[u8]) -> Option<&Node> {
        let slot = slot_of(key);
        let i = self.ranges.partition_point(|(first, _, _)| *first <= slot);
        let (_, last, node) = self.ranges.get(i.checked_sub(1)?)?;
        (slot <= *last).then_some(node)
    }

    /// The map in a `CLUSTER SLOTS` reply: `[[first, last, [host, port, ..], replicas..], ..]`.
    fn from_reply(reply: Value) -> Option<SlotMap> {
        let Value::Array(entries) = reply else {
            return None;
        };
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(entry) = entry else {
                return None;
            };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (entry.first(), entry.get(1), entry.get(2))
            else {
                return None;
            };
            let (Some(Value::BulkString(host)), Some(Value::Int(port))) =
                (master.first(), master.get(1))
            else {
                return None;
            };
            // A node that does not know its own address answers "" or "?": its slots are
            // left out, and their calls are sent on their own.
            if host.is_empty() || host.as_slice() == b"?" {
                continue;
            }
            let node = Node {
                host: String::from_utf8(host.clone()).ok()?,
                port: u16::try_from(*port).ok()?,
            };
            ranges.push((
                u16::try_from(*first).ok()?,
                u16::try_from(*last).ok()?,
                node,
            ));
        }
        ranges.sort_unstable_by_key(|(first, _, _)| *first);
        Some(SlotMap { ranges })
    }
}

/// The slot map of one cluster connection, read when first needed.
#[derive(Debug, Default)]
pub(super) struct Slots {
    map: Mutex<Option<Arc<SlotMap>>>,
}

impl Slots {
    fn map(&self) -> MutexGuard<'_, Option<Arc<SlotMap>>> {
        // Every update is one assignment: a poisoned lock still guards a whole value.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The slot map, read from the cluster if not known.
    pub(super) async fn get(&self, conn: &mut ClusterConnection) -> RedisResult<Arc<SlotMap>> {
        if let Some(map) = self.map().clone() {
            return Ok(map);
        }
        let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
        let map = SlotMap::from_reply(reply).ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Parse, "unexpected CLUSTER SLOTS reply"))
        })?;
        let map = Arc::new(map);
        *self.map() = Some(map.clone());
        Ok(map)
    }

    /// The map turned out out of date: read it again next time.
    pub(super) fn forget(&self) {
        *self.map() = None;
    }
}

/// The slot of `key`: CRC16 of its hash tag (what is between its first `{` and the next
/// `}`, if that is not empty), or of the whole key. redis-rs's `Slot::for_key` computes
/// the same, but does not give out the number that the slot map's ranges are looked up by.
pub(super) fn slot_of(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) % SLOTS
}

fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use redis::cluster_routing::Slot;

    use super::*;

    #[test]
    fn a_locks_keys_share_one_slot() {
        // From `CLUSTER KEYSLOT`.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"lock:{foo}"), 12182);
        assert_eq!(slot_of(b"lock:{foo}:fence"), 12182);
    }

    proptest! {
        /// A key's slot is the one redis-rs routes it by, hash tags and all.
        #[test]
        fn slots_are_redis_rs_slots(key in "[{}ab]{0,12}") {
            prop_assert_eq!(Slot::new(slot_of(key.as_bytes())), Some(Slot::for_key(&key)));
        }
    }

    #[test]
    fn a_slot_map_finds_each_keys_master() {
        let node = |port: i64| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |first: i64, last: i64, port: i64| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                node(port),
                node(port + 1),
            ])
        };
        let reply = Value::Array(vec![
            range(10923, 16383, 7002),
            range(0, 5460, 7000),
            range(5461, 10922, 7001),
        ]);
        let map = SlotMap::from_reply(reply).unwrap();
        let port = |key: &[u8]| map.node_of(key).map(|n| n.port);
        assert_eq!(port(b"123456789"), Some(7002)); // slot 12739
        assert_eq!(port(b"lock:{k}"), Some(7001)); // slot 7629
        assert_eq!(port(b"foo"), Some(7002)); // slot 12182
        assert_eq!(port(b"{a}"), Some(7002)); // slot 15495
        assert_eq!(port(b"{b}"), Some(7000)); // slot 3300
        let partial = SlotMap::from_reply(Value::Array(vec![range(0, 5460, 7000)])).unwrap();
        assert_eq!(partial.node_of(b"foo"), None);
        let unknown = Value::Array(vec![
            Value::Int(10923),
            Value::Int(16383),
            Value::Array(vec![Value::BulkString(b"?".to_vec()), Value::Int(7002)]),
        ]);
        let partial = SlotMap::from_reply(Value::Array(vec![unknown])).unwrap();
        assert_eq!(partial.node_of(b"foo"), None);
        assert!(SlotMap::from_reply(Value::Nil).is_none());
    }
}
