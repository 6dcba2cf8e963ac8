//! Lock names, checked before anything reaches a backend.

use std::fmt;

use crate::LockError;

/// The longest lock name accepted unless [`LockerBuilder::max_key_len`] says otherwise.
///
/// [`LockerBuilder::max_key_len`]: crate::LockerBuilder::max_key_len
pub const DEFAULT_MAX_KEY_LEN: usize = 512;

/// A lock name that passed validation: not empty, at most the configured number of bytes,
/// no control characters, and not starting with `}` (which would break the Redis hash tag
/// that keeps a lock's keys in one cluster slot).
///
/// Every `Locker` method validates its key this way; use `LockKey` to check user input
/// up front.
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
pub struct LockKey(String);

impl LockKey {
    /// Validates `name` against the default limit of [`DEFAULT_MAX_KEY_LEN`] bytes.
    pub fn new(name: &str) -> Result<Self, LockError> {
        Self::with_max_len(name, DEFAULT_MAX_KEY_LEN)
    }

    /// Validates `name` against a limit of `max_len` bytes.
    pub fn with_max_len(name: &str, max_len: usize) -> Result<Self, LockError> {
        check(name, max_len)?;
        Ok(Self(name.to_owned()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
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

/// Validates a lock name without allocating.
pub(crate) fn check(name: &str, max_len: usize) -> Result<(), LockError> {
    let reason = if name.is_empty() {
        "it is empty".to_owned()
    } else if name.len() > max_len {
        format!(
            "it is {} bytes long, over the limit of {max_len}",
            name.len()
        )
    } else if let Some(c) = name.chars().find(|c| c.is_control()) {
        format!("it contains the control character {c:?}")
    } else if name.starts_with('}') {
        "it starts with '}', which would break the redis hash tag".to_owned()
    } else {
        return Ok(());
    };
    Err(LockError::InvalidKey {
        key: name.chars().take(64).collect(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for name in [
            "a",
            "balance:42",
            "user {7}",
            "ünïcödé",
            "x".repeat(512).as_str(),
        ] {
            check(name, DEFAULT_MAX_KEY_LEN).unwrap();
        }
    }

    #[test]
    fn refuses_bad_names_with_reasons() {
        let cases = [
            ("", "empty"),
            ("a\u{0}b", "control character"),
            ("tab\there", "control character"),
            ("del\u{7f}", "control character"),
            ("}x", "hash tag"),
        ];
        for (name, why) in cases {
            let err = check(name, DEFAULT_MAX_KEY_LEN).unwrap_err();
            assert!(err.is_invalid_key());
            assert!(err.to_string().contains(why), "{err}");
        }
        let long = "x".repeat(513);
        let err = check(&long, DEFAULT_MAX_KEY_LEN).unwrap_err();
        assert!(err.to_string().contains("513 bytes"), "{err}");
        // the error carries a bounded excerpt, not the whole input
        assert_eq!(err.key().unwrap().len(), 64);
    }

    #[test]
    fn limit_is_in_bytes() {
        assert!(check("éé", 3).is_err());
        assert!(check("éé", 4).is_ok());
    }
}
