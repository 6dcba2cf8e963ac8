//! From a lock's key to its store key, the name it passes to `GET_LOCK`, as madelson's
//! DistributedLock maps names (`MySqlDistributedLock.GetSafeName`), so that the lock `K`
//! is one user lock in both.

use sha2::{Digest, Sha512};

use crate::LockError;

/// The longest user lock name the server takes, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// How many characters of the name a hashed name keeps, before its hash.
const PREFIX_CHARS: usize = 32;
/// How many characters of base32 the hash is: 160 bits.
const HASH_CHARS: usize = 32;
/// DistributedLock's base32 alphabet (RFC 4648, lowercase).
const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// How a [`MySqlStore`](super::MySqlStore) turns a lock's key into its store key, the
/// name it passes to `GET_LOCK`.
///
/// ```
/// use lock_core::backend::mysql::NameMapping;
///
/// // DistributedLock's published vectors.
/// let dl = NameMapping::DistributedLock;
/// assert_eq!(dl.lock_name("abc").unwrap(), "abc");
/// assert_eq!(dl.lock_name("ABC").unwrap(), "abczj4qr6tvn4a3kmgq4bukhowqyfrlxsb3");
/// // Exact names, for peers that pass their own names to GET_LOCK.
/// assert_eq!(NameMapping::Exact.lock_name("Orders").unwrap(), "Orders");
/// assert!(NameMapping::Exact.lock_name(&"x".repeat(65)).unwrap_err().is_config());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameMapping {
    /// DistributedLock's `GetSafeName`: a name that is lowercase and at most 64
    /// characters is used as it is; any other is its lowercase cut to 32 characters (an
    /// empty name is `__empty__`), followed by 32 characters of base32 (`a-z2-7`, least
    /// significant bits first) of the first 160 bits of the SHA-512 of its UTF-8.
    /// Lengths count UTF-16 code units, as .NET does.
    #[default]
    DistributedLock,
    /// The name as it is (DistributedLock's `exactName: true`): for peers that call
    /// `GET_LOCK` with their own names. A name longer than 64 characters is refused
    /// ([`LockError::Config`]), as the server would refuse it.
    Exact,
}

impl NameMapping {
    /// The `GET_LOCK` name of the lock `key`: its store key.
    pub fn lock_name(self, key: &str) -> Result<String, LockError> {
        match self {
            Self::DistributedLock => Ok(safe_name(key)),
            Self::Exact if key.chars().count() <= MAX_NAME_CHARS => Ok(key.to_owned()),
            Self::Exact => Err(LockError::Config(format!(
                "mysql lock {key:?} is longer than {MAX_NAME_CHARS} characters: \
                 use NameMapping::DistributedLock, which hashes it"
            ))),
        }
    }
}

/// DistributedLock's `GetSafeName`.
pub(super) fn safe_name(name: &str) -> String {
    let base = if name.is_empty() {
        "__empty__".to_owned()
    } else {
        lowercase(name)
    };
    if base == name && utf16_len(name) <= MAX_NAME_CHARS {
        return base;
    }
    let mut safe = utf16_prefix(&base, PREFIX_CHARS).to_owned();
    safe.push_str(&hash(name));
    safe
}

/// .NET's `ToLowerInvariant`: each character's simple lowercase mapping, one character
/// for one, without context (a final `Σ` is `σ`); `İ` (U+0130), whose only lowercase is
/// two characters, stays as it is, as .NET keeps it.
fn lowercase(name: &str) -> String {
    name.chars()
        .map(|c| {
            let mut lower = c.to_lowercase();
            match (lower.next(), lower.next()) {
                (Some(l), None) => l,
                _ => c,
            }
        })
        .collect()
}

fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// The longest prefix of `s` of at most `units` UTF-16 code units.
fn utf16_prefix(s: &str, units: usize) -> &str {
    let mut taken = 0;
    for (at, c) in s.char_indices() {
        taken += c.len_utf16();
        if taken > units {
            return &s[..at];
        }
    }
    s
}

/// 32 characters of base32 of the first 160 bits of the SHA-512 of `name`'s UTF-8, the
/// bits of each byte taken least significant first.
fn hash(name: &str) -> String {
    let digest = Sha512::digest(name.as_bytes());
    let mut bytes = digest.iter();
    let (mut buffer, mut bits) = (0_u32, 0);
    let mut out = String::with_capacity(HASH_CHARS);
    for _ in 0..HASH_CHARS {
        if bits < 5 {
            buffer |= u32::from(*bytes.next().unwrap_or(&0)) << bits;
            bits += 8;
        }
        out.push(char::from(BASE32[(buffer & 31) as usize]));
        buffer >>= 5;
        bits -= 5;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DL: NameMapping = NameMapping::DistributedLock;

    #[test]
    fn distributed_locks_published_vectors() {
        let name = |n: &str| DL.lock_name(n).unwrap();
        assert_eq!(name(""), "__empty__p6ad62yppho33ytkibum5wbqhqvbcsxa");
        assert_eq!(name("abc"), "abc");
        assert_eq!(name("ABC"), "abczj4qr6tvn4a3kmgq4bukhowqyfrlxsb3");
        assert_eq!(name("\\"), "\\");
        assert_eq!(name(&"a".repeat(64)), "a".repeat(64));
        assert_eq!(name(&"\\".repeat(64)), "\\".repeat(64));
        assert_eq!(
            name(&"x".repeat(65)),
            format!("{}gkd2zq6c6ey6mhs45clqg7vij6ycgo43", "x".repeat(32))
        );
    }

    #[test]
    fn hashed_names_fit_the_server() {
        for n in ["Orders:42", "ÄÖÜ", &"漢".repeat(65), &"🔒".repeat(40)] {
            let safe = DL.lock_name(n).unwrap();
            assert!(safe.chars().count() <= MAX_NAME_CHARS, "{safe:?}");
            assert!(safe.ends_with(&hash(n)), "{safe:?}");
        }
        // Lengths count UTF-16 code units: 40 CJK characters are 40, kept; 33 emoji
        // are 66, hashed.
        assert_eq!(DL.lock_name(&"漢".repeat(40)).unwrap(), "漢".repeat(40));
        assert_ne!(DL.lock_name(&"🔒".repeat(33)).unwrap(), "🔒".repeat(33));
        // A surrogate pair is never cut in half.
        let emoji = DL.lock_name(&"🔒".repeat(40)).unwrap();
        assert_eq!(
            emoji,
            format!("{}{}", "🔒".repeat(16), hash(&"🔒".repeat(40)))
        );
    }

    #[test]
    fn lowercasing_is_dotnets_invariant_one() {
        assert_eq!(lowercase("ÄÖÜ-ABC"), "äöü-abc");
        assert_eq!(lowercase("ΟΔΟΣ"), "οδοσ");
        assert_eq!(lowercase("İSTANBUL"), "İstanbul");
        assert_eq!(lowercase("🔒X"), "🔒x");
    }

    #[test]
    fn exact_names_are_kept_up_to_the_servers_limit() {
        let exact = NameMapping::Exact;
        assert_eq!(exact.lock_name("Mixed Case").unwrap(), "Mixed Case");
        assert_eq!(exact.lock_name(&"é".repeat(64)).unwrap(), "é".repeat(64));
        assert!(exact.lock_name(&"é".repeat(65)).unwrap_err().is_config());
    }
}
