//! Where a lock lives: its store key, the path of a node named by its key under the base
//! path, and the names of the nodes its contenders create there, in Apache Curator's
//! spelling.

use std::borrow::Cow;
use std::fmt::Write;

use uuid::Uuid;

use crate::{LockKey, LockKind};

/// How many digits ZooKeeper gives a sequential node's counter.
const SEQUENCE_DIGITS: usize = 10;

/// The store key of the lock `key`, the path of its node under `base`: `{base}/{key}`, the
/// key escaped where it could not be one znode name as it stands (see [`escape`]).
pub(super) fn store_key(base: &str, key: &LockKey) -> String {
    let name = escape(key.as_str());
    if base == "/" {
        format!("/{name}")
    } else {
        format!("{base}/{name}")
    }
}

/// `key` as one znode name. As [`KeySegment`](crate::KeySegment) does, a character that
/// cannot stand is written as `%` and the hex of its UTF-8 bytes: `/` as `%2F`, and `%`
/// itself as `%25`, so that no two keys meet; so are the characters ZooKeeper refuses in
/// a name (U+E000 to U+F8FF and U+FFF0 to U+FFFF). A key that is a name ZooKeeper
/// reserves has its dots or its first letter written so: `.` is `%2E`, `..` is `%2E%2E`
/// and `zookeeper` is `%7Aookeeper`. Any other key is its own name.
pub(super) fn escape(key: &str) -> Cow<'_, str> {
    let reserved = matches!(key, "." | ".." | "zookeeper");
    let stands =
        |c: char| !matches!(c, '/' | '%' | '\u{E000}'..='\u{F8FF}' | '\u{FFF0}'..='\u{FFFF}');
    if !reserved && key.chars().all(stands) {
        return Cow::Borrowed(key);
    }
    let mut name = String::with_capacity(key.len() + 8);
    for (i, c) in key.char_indices() {
        if stands(c) && !(reserved && (i == 0 || c == '.')) {
            name.push(c);
        } else {
            for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                let _ = write!(name, "%{byte:02X}");
            }
        }
    }
    Cow::Owned(name)
}

/// The role a contender's node plays, read from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// An exclusive or fair lock (`lock-`, or kazoo's `__lock__`), or a writer
    /// (`__WRIT__`): it holds the lock when it is first.
    Owner,
    /// A reader (`__READ__`, or kazoo's `__rlock__`): it holds the lock when no owner is
    /// before it.
    Reader,
}

/// The text between `_c_{uuid}-` and the sequence in the name of a node of `kind`, as
/// Curator writes it.
fn marker(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Read => "__READ__",
        LockKind::Write => "__WRIT__",
        LockKind::Semaphore { .. } => "lease-",
        LockKind::Exclusive | LockKind::Fair => "lock-",
    }
}

/// The markers other clients' nodes end with before their sequence, and their roles.
const MARKERS: [(&str, Role); 5] = [
    ("lock-", Role::Owner),
    ("__WRIT__", Role::Owner),
    ("__lock__", Role::Owner),
    ("__READ__", Role::Reader),
    ("__rlock__", Role::Reader),
];

/// The name of the node a hold creates, up to its sequence, which ZooKeeper appends:
/// `_c_{uuid}-lock-`, `_c_{uuid}-__READ__`, `_c_{uuid}-__WRIT__` or `_c_{uuid}-lease-`.
/// The uuid is the one that begins the owner's `token` (a random v4 UUID), so that a
/// node shows whose it is; a token that does not begin with one gets a fresh one.
pub(super) fn node_prefix(token: &str, kind: LockKind) -> String {
    let id = token
        .split(':')
        .next()
        .and_then(|id| Uuid::try_parse(id).ok())
        .unwrap_or_else(Uuid::new_v4);
    format!("_c_{}-{}", id.hyphenated(), marker(kind))
}

/// The first characters of the owner token whose hold created the node `name`, as
/// [`HolderInfo`](crate::HolderInfo) shows them: its uuid.
pub(super) fn owner_id(name: &str) -> &str {
    let id = name.strip_prefix("_c_").unwrap_or(name);
    id.get(..36).unwrap_or(id)
}

/// The kind of hold a contender's node `name` asks for, as far as its name tells: a
/// fair lock's node is named as an exclusive one's.
pub(super) fn kind(name: &str) -> LockKind {
    let head = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if head.ends_with("__WRIT__") {
        LockKind::Write
    } else if head.ends_with("__READ__") || head.ends_with("__rlock__") {
        LockKind::Read
    } else {
        LockKind::Exclusive
    }
}

/// A node under a lock that takes part in it: its name, its sequence and its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Contender {
    pub(super) name: String,
    pub(super) sequence: u64,
    pub(super) role: Role,
}

/// The children of a lock's node that contend for it, in the order they asked: those
/// whose name ends in one of [`MARKERS`] and ten digits, sorted by those digits. Every
/// other child is not a contender.
pub(super) fn contenders(children: Vec<String>) -> Vec<Contender> {
    let mut contenders: Vec<Contender> = children.into_iter().filter_map(contender).collect();
    contenders.sort_by_key(|c| c.sequence);
    contenders
}

fn contender(name: String) -> Option<Contender> {
    let (head, sequence) = split_sequence(&name)?;
    let &(_, role) = MARKERS.iter().find(|(marker, _)| head.ends_with(marker))?;
    Some(Contender {
        name,
        sequence,
        role,
    })
}

/// A sequential node's name split before its ten-digit sequence: the text before it, and
/// the sequence.
fn split_sequence(name: &str) -> Option<(&str, u64)> {
    let split = name.len().checked_sub(SEQUENCE_DIGITS)?;
    let (head, digits) = (name.get(..split)?, name.get(split..)?);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((head, digits.parse().ok()?))
}

/// A semaphore's lease nodes in the order they were made (by their sequence); a name
/// without a sequence is not a lease.
pub(super) fn leases(mut names: Vec<String>) -> Vec<String> {
    names.retain(|name| split_sequence(name).is_some());
    names.sort_by_key(|name| split_sequence(name).map(|(_, sequence)| sequence));
    names
}

/// Which contender the one at `me` waits for, if any: an owner waits for the one just
/// before it; a reader waits for the first owner before it, if there is one.
pub(super) fn blocker(contenders: &[Contender], me: usize) -> Option<&Contender> {
    let before = contenders.get(..me)?;
    match contenders[me].role {
        Role::Owner => before.last(),
        Role::Reader => before.iter().find(|c| c.role == Role::Owner),
    }
}

/// The contenders that hold the lock: the first, if it is an owner; otherwise every
/// reader before the first owner.
pub(super) fn holders(contenders: &[Contender]) -> &[Contender] {
    match contenders.first() {
        Some(first) if first.role == Role::Owner => &contenders[..1],
        _ => {
            let readers = contenders
                .iter()
                .position(|c| c.role == Role::Owner)
                .unwrap_or(contenders.len());
            &contenders[..readers]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_keys_are_their_own_names() {
        for key in ["balance:42", "user {7}", "ünïcödé", "...", "zookeepers"] {
            assert_eq!(escape(key), key);
        }
    }

    #[test]
    fn keys_that_cannot_be_one_name_are_escaped() {
        assert_eq!(escape("a/b"), "a%2Fb");
        assert_eq!(escape("50%"), "50%25");
        assert_eq!(escape("a%2Fb"), "a%252Fb");
        assert_eq!(escape("."), "%2E");
        assert_eq!(escape(".."), "%2E%2E");
        assert_eq!(escape("zookeeper"), "%7Aookeeper");
        assert_eq!(escape("\u{E000}"), "%EE%80%80");
    }

    #[test]
    fn the_lock_lives_under_the_base() {
        let key = LockKey::new("a/b").unwrap();
        assert_eq!(store_key("/locks", &key), "/locks/a%2Fb");
        assert_eq!(store_key("/", &key), "/a%2Fb");
    }

    #[test]
    fn nodes_are_named_as_curator_names_them() {
        let token = "3f2a9c1e-8b4d-4f6a-9e2b-7c5d1a0b3e4f:x";
        let id = "_c_3f2a9c1e-8b4d-4f6a-9e2b-7c5d1a0b3e4f-";
        assert_eq!(
            node_prefix(token, LockKind::Exclusive),
            format!("{id}lock-")
        );
        assert_eq!(node_prefix(token, LockKind::Read), format!("{id}__READ__"));
        assert_eq!(node_prefix(token, LockKind::Write), format!("{id}__WRIT__"));
        let lease = node_prefix(token, LockKind::Semaphore { permits: 2 });
        assert_eq!(lease, format!("{id}lease-"));
        assert_eq!(owner_id(&format!("{id}lock-0000000003")), &token[..36]);
        assert_eq!(kind(&format!("{id}lock-0000000003")), LockKind::Exclusive);
        assert_eq!(kind(&format!("{id}__READ__0000000003")), LockKind::Read);
        assert_eq!(kind(&format!("{id}__WRIT__0000000003")), LockKind::Write);
    }

    #[test]
    fn contenders_are_ordered_by_sequence_whoever_made_them() {
        let children = [
            "_c_b-__READ__0000000004",
            "_c_a-lock-0000000007",
            "kazoo__lock__0000000002",
            "foreign-lock-0000000000",
            "leases",
            "_c_c-__WRIT__0000000005",
            "_c_d-lock-12",
        ];
        let sorted = contenders(children.map(String::from).to_vec());
        let names: Vec<_> = sorted.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "foreign-lock-0000000000",
                "kazoo__lock__0000000002",
                "_c_b-__READ__0000000004",
                "_c_c-__WRIT__0000000005",
                "_c_a-lock-0000000007",
            ]
        );
        assert_eq!(holders(&sorted), &sorted[..1]);
        assert_eq!(blocker(&sorted, 2).map(|c| c.sequence), Some(0));
        assert_eq!(blocker(&sorted, 4).map(|c| c.sequence), Some(5));
        assert_eq!(blocker(&sorted, 0), None);
    }

    #[test]
    fn leases_are_ordered_by_sequence() {
        let names = ["_c_b-lease-0000000002", "_c_a-lease-0000000001", "stray"];
        let sorted = leases(names.map(String::from).to_vec());
        assert_eq!(sorted, ["_c_a-lease-0000000001", "_c_b-lease-0000000002"]);
    }

    #[test]
    fn readers_hold_together_until_the_first_owner() {
        let children = ["_c_a-__READ__0000000001", "_c_b-__READ__0000000002"];
        let mut sorted = contenders(children.map(String::from).to_vec());
        assert_eq!(holders(&sorted).len(), 2);
        sorted.push(contender("_c_c-__WRIT__0000000003".into()).unwrap());
        sorted.push(contender("_c_d-__READ__0000000004".into()).unwrap());
        assert_eq!(holders(&sorted).len(), 2);
        assert_eq!(blocker(&sorted, 1), None);
        assert_eq!(blocker(&sorted, 2).map(|c| c.sequence), Some(2));
        assert_eq!(blocker(&sorted, 3).map(|c| c.sequence), Some(3));
    }
}
