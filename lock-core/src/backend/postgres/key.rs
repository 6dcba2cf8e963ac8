//! From a lock's key to its store key, an advisory key, as madelson's DistributedLock
//! maps names (`PostgresAdvisoryLockKey`), so that the lock `K` is one advisory lock in
//! both.

use std::fmt;

/// How a [`PostgresStore`](super::PostgresStore) turns a lock's key into its advisory key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyMapping {
    /// DistributedLock's mapping (its `PostgresAdvisoryLockKey` with `allowHashing`):
    /// an ASCII key of at most 9 characters is packed 7 bits a character into a pair of
    /// int4 keys; 16 hex digits are one bigint; `XXXXXXXX,XXXXXXXX` (8 hex digits twice)
    /// is a pair of int4 keys; any other key is the first 8 bytes of the SHA-1 of its
    /// UTF-8, read little-endian as a signed bigint.
    #[default]
    DistributedLock,
    /// Every key hashed, as DistributedLock hashes the names that take none of its
    /// short forms: the first 8 bytes of the SHA-1 of its UTF-8, read little-endian as a
    /// signed bigint. For peers that hash every name.
    Hashed,
}

/// The advisory lock a key stands for, a PostgreSQL store's store key: one bigint, or a
/// pair of int4 keys. The two are different locks in PostgreSQL, even for the same 64
/// bits.
///
/// Its [`Display`](fmt::Display) is DistributedLock's name for it (16 hex digits, or
/// `XXXXXXXX,XXXXXXXX`), which maps back to it: the key to lock for an explicit advisory
/// key.
///
/// ```
/// use lock_core::backend::postgres::{AdvisoryKey, KeyMapping};
///
/// // DistributedLock's published vectors.
/// assert_eq!(KeyMapping::DistributedLock.key("MyLockName"), AdvisoryKey::Bigint(4062898426641073528));
/// // An explicit advisory key, as hand-written SQL's `pg_advisory_lock(42)`: lock the
/// // key it displays as.
/// let explicit = AdvisoryKey::Bigint(42);
/// assert_eq!(explicit.to_string(), "000000000000002a");
/// assert_eq!(KeyMapping::DistributedLock.key(&explicit.to_string()), explicit);
/// assert_eq!(AdvisoryKey::Pair(3, -1).to_string(), "00000003,ffffffff");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AdvisoryKey {
    /// `pg_advisory_lock(bigint)`.
    Bigint(i64),
    /// `pg_advisory_lock(int4, int4)`.
    Pair(i32, i32),
}

const ASCII_BITS: u32 = 7;
const ASCII_MAX: i64 = (1 << ASCII_BITS) - 1;
const MAX_ASCII_LEN: usize = 9;

impl KeyMapping {
    /// The advisory key of the lock `key`.
    pub fn key(self, key: &str) -> AdvisoryKey {
        match self {
            Self::DistributedLock => ascii(key)
                .or_else(|| hex(key))
                .unwrap_or_else(|| hashed(key)),
            Self::Hashed => hashed(key),
        }
    }
}

/// At most 9 ASCII characters, 7 bits each, then a 0 bit, then 1s to fill 64 bits.
fn ascii(name: &str) -> Option<AdvisoryKey> {
    if name.len() > MAX_ASCII_LEN || !name.is_ascii() {
        return None;
    }
    let packed = name
        .bytes()
        .fold(0_i64, |key, c| (key << ASCII_BITS) | i64::from(c));
    let padded =
        (name.len()..MAX_ASCII_LEN).fold(packed << 1, |key, _| (key << ASCII_BITS) | ASCII_MAX);
    Some(split(padded))
}

/// 16 hex digits (one bigint), or 8, a comma and 8 (a pair).
fn hex(name: &str) -> Option<AdvisoryKey> {
    let (high, low, pair) = match name.len() {
        16 => (name.get(..8)?, name.get(8..)?, false),
        17 if name.as_bytes()[8] == b',' => (name.get(..8)?, name.get(9..)?, true),
        _ => return None,
    };
    let part = |digits: &str| {
        let digits_only = digits.bytes().all(|b| b.is_ascii_hexdigit());
        let value = u32::from_str_radix(digits, 16)
            .ok()
            .filter(|_| digits_only)?;
        Some(value as i32)
    };
    let (high, low) = (part(high)?, part(low)?);
    Some(if pair {
        AdvisoryKey::Pair(high, low)
    } else {
        AdvisoryKey::Bigint(combine(high, low))
    })
}

/// The first 8 bytes of the SHA-1 of the name's UTF-8, little-endian.
fn hashed(name: &str) -> AdvisoryKey {
    let digest = sha1_smol::Sha1::from(name).digest().bytes();
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    AdvisoryKey::Bigint(i64::from_le_bytes(first))
}

fn combine(high: i32, low: i32) -> i64 {
    (i64::from(high) << 32) | i64::from(low as u32)
}

fn split(key: i64) -> AdvisoryKey {
    AdvisoryKey::Pair((key >> 32) as i32, key as i32)
}

impl AdvisoryKey {
    /// As `pg_locks` shows it: `classid`, `objid` (each an unsigned 32-bit oid) and
    /// `objsubid` (1 for a bigint, 2 for a pair).
    pub(super) fn pg_locks(self) -> (i64, i64, i16) {
        match self {
            Self::Bigint(key) => (key >> 32 & 0xffff_ffff, key & 0xffff_ffff, 1),
            Self::Pair(high, low) => (i64::from(high as u32), i64::from(low as u32), 2),
        }
    }
}

impl fmt::Display for AdvisoryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Bigint(key) => write!(f, "{key:016x}"),
            Self::Pair(high, low) => write!(f, "{high:08x},{low:08x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DL: KeyMapping = KeyMapping::DistributedLock;

    #[test]
    fn distributed_locks_published_vectors() {
        assert_eq!(
            DL.key("MyLockName"),
            AdvisoryKey::Bigint(4062898426641073528)
        );
        let han = "漢".repeat(18);
        assert_eq!(DL.key(&han), AdvisoryKey::Bigint(-5707277204051710361));
        assert_eq!(KeyMapping::Hashed.key(&han), DL.key(&han));
    }

    #[test]
    fn pals_takes_the_hashed_name_app_dot_name() {
        // pals' `Locker("billing", url).lock("balance:42")`: SHA-1 of "billing.balance:42",
        // `struct.unpack('q', digest[:8])`, as computed by Python.
        assert_eq!(
            DL.key("billing.balance:42"),
            AdvisoryKey::Bigint(-2037275480491451538)
        );
    }

    #[test]
    fn short_ascii_names_are_packed_into_a_pair() {
        // "A": 0x41, a 0 bit, then eight 7-bit groups of 1s.
        let a = (0x41_i64 << 57) | ((1_i64 << 56) - 1);
        assert_eq!(DL.key("A"), split(a));
        // Nine NULs are the pair (0, 0), as in DistributedLock's tests.
        assert_eq!(DL.key(&"\0".repeat(9)), AdvisoryKey::Pair(0, 0));
        assert_ne!(DL.key("\0"), DL.key("a"));
        assert_ne!(DL.key("ASCII"), DL.key("ASCIi"));
        // Ten characters are hashed.
        assert!(matches!(DL.key("ABCDEFGHIJ"), AdvisoryKey::Bigint(_)));
        assert_eq!(KeyMapping::Hashed.key("A"), hashed("A"));
    }

    #[test]
    fn every_short_ascii_name_has_a_key_of_its_own() {
        let mut seen = std::collections::HashSet::new();
        for c in 1..128_u8 {
            for len in 1..=MAX_ASCII_LEN {
                let name = String::from(char::from(c)).repeat(len);
                assert!(seen.insert(DL.key(&name)), "{name:?}");
            }
        }
    }

    #[test]
    fn hex_names_are_explicit_keys_and_display_back() {
        assert_eq!(DL.key("0000000000000001"), AdvisoryKey::Bigint(1));
        assert_eq!(DL.key("00000003,ffffffff"), AdvisoryKey::Pair(3, -1));
        assert_eq!(DL.key("FFFFFFFFFFFFFFFF"), AdvisoryKey::Bigint(-1));
        assert_eq!(DL.key(&"0".repeat(16)), AdvisoryKey::Bigint(0));
        assert_eq!(DL.key("00000000,00000000"), AdvisoryKey::Pair(0, 0));
        for key in [
            AdvisoryKey::Bigint(i64::MIN),
            AdvisoryKey::Bigint(1),
            AdvisoryKey::Pair(i32::MIN, i32::MAX),
            AdvisoryKey::Pair(3, -1),
        ] {
            assert_eq!(DL.key(&key.to_string()), key);
        }
        // Not hex: hashed.
        assert_eq!(DL.key("000000000000000g"), hashed("000000000000000g"));
        assert_eq!(DL.key("+0000000,00000000"), hashed("+0000000,00000000"));
    }

    #[test]
    fn pg_locks_shows_the_halves_unsigned() {
        assert_eq!(
            AdvisoryKey::Bigint(-1).pg_locks(),
            (0xffff_ffff, 0xffff_ffff, 1)
        );
        assert_eq!(AdvisoryKey::Pair(3, -1).pg_locks(), (3, 0xffff_ffff, 2));
    }
}
