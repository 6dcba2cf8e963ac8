//! Lock keys, checked before anything reaches a store.

use std::fmt;
use std::sync::Arc;

use crate::LockError;

/// The longest lock key accepted unless [`LockerBuilder::max_key_len`] says otherwise.
///
/// [`LockerBuilder::max_key_len`]: crate::LockerBuilder::max_key_len
pub const DEFAULT_MAX_KEY_LEN: usize = 512;

/// A lock's key that passed validation: not empty, at most the configured number of
/// bytes, no control characters, and not starting with `}` (which would break the Redis
/// hash tag that keeps a lock's store keys in one cluster slot).
///
/// Every `Locker` method validates its key this way; use `LockKey` to check user input
/// up front. Cloning it is cheap (a reference count).
///
/// ```
/// use lock_core::LockKey;
///
/// assert_eq!(LockKey::new("balance:42").unwrap().as_str(), "balance:42");
/// assert!(LockKey::new("").unwrap_err().is_invalid_key());
/// assert!(LockKey::new("a\nb").unwrap_err().is_invalid_key());
/// assert!(LockKey::with_max_len("abcdef", 4).is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey(Arc<str>);

impl LockKey {
    /// Validates `key` against the default limit of [`DEFAULT_MAX_KEY_LEN`] bytes.
    pub fn new(key: &str) -> Result<Self, LockError> {
        Self::with_max_len(key, DEFAULT_MAX_KEY_LEN)
    }

    /// Validates `key` against a limit of `max_len` bytes.
    pub fn with_max_len(key: &str, max_len: usize) -> Result<Self, LockError> {
        check(key, max_len)?;
        Ok(Self(key.into()))
    }

    /// The key as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as a shared string, to key maps without copying it.
    pub(crate) fn shared(&self) -> &Arc<str> {
        &self.0
    }
}

impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LockKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Validates a lock's key without allocating.
pub(crate) fn check(key: &str, max_len: usize) -> Result<(), LockError> {
    let reason = if key.is_empty() {
        "it is empty".to_owned()
    } else if key.len() > max_len {
        format!(
            "it is {} bytes long, over the limit of {max_len}",
            key.len()
        )
    } else if let Some(c) = key.chars().find(|c| c.is_control()) {
        format!("it contains the control character {c:?}")
    } else if key.starts_with('}') {
        "it starts with '}', which would break the redis hash tag".to_owned()
    } else {
        return Ok(());
    };
    Err(LockError::InvalidKey {
        key: key.chars().take(64).collect(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_keys() {
        for key in [
            "a",
            "balance:42",
            "user {7}",
            "ünïcödé",
            "x".repeat(512).as_str(),
        ] {
            check(key, DEFAULT_MAX_KEY_LEN).unwrap();
        }
    }

    #[test]
    fn refuses_bad_keys_with_reasons() {
        let cases = [
            ("", "empty"),
            ("a\u{0}b", "control character"),
            ("tab\there", "control character"),
            ("del\u{7f}", "control character"),
            ("}x", "hash tag"),
        ];
        for (key, why) in cases {
            let err = check(key, DEFAULT_MAX_KEY_LEN).unwrap_err();
            assert!(err.is_invalid_key());
            assert!(err.to_string().contains(why), "{err}");
        }
        let long = "x".repeat(513);
        let err = check(&long, DEFAULT_MAX_KEY_LEN).unwrap_err();
        assert!(err.to_string().contains("513 bytes"), "{err}");
        // the error carries a bounded excerpt, not the whole input
        assert_eq!(err.key().unwrap().len(), 64);
    }

    proptest::proptest! {
        /// Any string is accepted or refused, never a panic; accepted means non-empty,
        /// within the limit, free of control characters and not opening with `}`.
        #[test]
        fn any_string_is_checked_without_panic(key in ".{0,40}", max_len in 0usize..48) {
            let accepted = check(&key, max_len).is_ok();
            let valid = !key.is_empty()
                && key.len() <= max_len
                && !key.chars().any(char::is_control)
                && !key.starts_with('}');
            proptest::prop_assert_eq!(accepted, valid);
        }
    }

    #[test]
    fn limit_is_in_bytes() {
        assert!(check("éé", 3).is_err());
        assert!(check("éé", 4).is_ok());
    }
}
