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

/// A value written into a lock key as one whole `:`-separated segment of it, escaped so
/// that it can never pass for a separator or for another key's text.
///
/// Its `Display` writes the value's own `Display` with `%` as `%25`, `:` as `%3A`, `{` as
/// `%7B` and `}` as `%7D`, and every other character as it is, without allocating (format
/// flags such as a width are not applied). A value without those four characters is
/// written unchanged, so numbers, ids and UUIDs give the keys they always gave. (Each
/// escaped character counts three bytes towards the key's length limit.)
///
/// The key templates of `#[distributed_lock]` and of lock-axum's `KeyTemplate` write each
/// value this way, allow a placeholder only as a whole segment, and keep `%` out of their
/// own text; so no two templates and their values can make the same key unless they name
/// the same segments: in `t:{a}:{b}`, `a = "x:y", b = "z"` gives `t:x%3Ay:z` and `a = "x",
/// b = "y:z"` gives `t:x:y%3Az`. Build a key by hand the same way when its parts come from
/// users. [`KeySegment::decode`] is the inverse.
///
/// ```
/// use lock_core::KeySegment;
///
/// assert_eq!(format!("balance:{}", KeySegment(42)), "balance:42");
/// // `balance:{id}` with the id "1:2" is not `balance:{a}:{b}` with 1 and 2
/// assert_eq!(format!("balance:{}", KeySegment("1:2")), "balance:1%3A2");
/// assert_eq!(format!("discount:{}", KeySegment("50%")), "discount:50%25");
/// assert_eq!(KeySegment::decode("1%3A2").as_deref(), Some("1:2"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeySegment<T>(pub T);

/// The characters a [`KeySegment`] escapes, and their escapes.
const ESCAPES: [(char, &str); 4] = [('%', "%25"), (':', "%3A"), ('{', "%7B"), ('}', "%7D")];

impl<T: fmt::Display> fmt::Display for KeySegment<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Write::write_fmt(&mut Escaping(f), format_args!("{}", self.0))
    }
}

impl KeySegment<String> {
    /// The value a segment was written from: the inverse of [`KeySegment`]'s `Display`.
    /// `None` when `segment` is nothing it writes: it holds a `:`, `{` or `}`, or a `%`
    /// that does not open `%25`, `%3A`, `%7B` or `%7D` (in upper case).
    ///
    /// ```
    /// use lock_core::KeySegment;
    ///
    /// let key = format!("t:{}:{}", KeySegment("x:y"), KeySegment("%3A"));
    /// assert_eq!(key, "t:x%3Ay:%253A");
    /// let values: Vec<_> = key.split(':').skip(1).map(KeySegment::decode).collect();
    /// assert_eq!(values, [Some("x:y".to_owned()), Some("%3A".to_owned())]);
    /// assert_eq!(KeySegment::decode("a:b"), None);
    /// assert_eq!(KeySegment::decode("100%"), None);
    /// ```
    pub fn decode(segment: &str) -> Option<String> {
        let mut value = String::with_capacity(segment.len());
        let mut rest = segment;
        while let Some(i) = rest.find(|c| escape(c).is_some()) {
            value.push_str(&rest[..i]);
            let &(c, e) = ESCAPES.iter().find(|(_, e)| rest[i..].starts_with(e))?;
            value.push(c);
            rest = &rest[i + e.len()..];
        }
        value.push_str(rest);
        Some(value)
    }
}

/// How a [`KeySegment`] writes `c`, if it escapes it.
fn escape(c: char) -> Option<&'static str> {
    ESCAPES.iter().find(|&&(e, _)| e == c).map(|&(_, e)| e)
}

/// Escapes what is written through it into the formatter.
struct Escaping<'a, 'f>(&'a mut fmt::Formatter<'f>);

impl fmt::Write for Escaping<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut start = 0;
        for (i, c) in s.char_indices() {
            if let Some(e) = escape(c) {
                self.0.write_str(&s[start..i])?;
                self.0.write_str(e)?;
                start = i + c.len_utf8();
            }
        }
        self.0.write_str(&s[start..])
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
    fn segments_escape_only_what_could_forge() {
        let written = |v: &str| KeySegment(v).to_string();
        for plain in ["42", "ünïcödé", "7f3c-aa01", "a b/c<d>", ""] {
            assert_eq!(written(plain), plain);
        }
        assert_eq!(written("x:y"), "x%3Ay");
        assert_eq!(written("%3A"), "%253A");
        assert_eq!(written("{a}:%"), "%7Ba%7D%3A%25");
        // any Display, not only strings
        assert_eq!(KeySegment(-7).to_string(), "-7");
        assert_eq!(format!("t:{}", KeySegment(&KeySegment("a:b"))), "t:a%253Ab");
        for bad in ["a:b", "{", "}", "%", "%3", "%3a", "%41", "%%25"] {
            assert_eq!(KeySegment::decode(bad), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        /// A written segment holds no `:` or brace, is the value itself when the value
        /// has nothing to escape, and decodes to the value.
        #[test]
        fn segments_decode_to_their_value(value in ".{0,16}|[%:{}3A7BD25a]{0,8}") {
            let written = KeySegment(&value).to_string();
            proptest::prop_assert!(!written.contains([':', '{', '}']), "{written:?}");
            let plain = !value.contains(['%', ':', '{', '}']);
            proptest::prop_assert_eq!(written == value, plain);
            proptest::prop_assert_eq!(KeySegment::decode(&written), Some(value));
        }

        /// Decoding accepts only what a `KeySegment` writes: one spelling per value.
        #[test]
        fn only_written_segments_decode(segment in "[%:{}3A7BD25a]{0,8}|.{0,16}") {
            if let Some(value) = KeySegment::decode(&segment) {
                proptest::prop_assert_eq!(KeySegment(value).to_string(), segment);
            }
        }
    }

    #[test]
    fn limit_is_in_bytes() {
        assert!(check("éé", 3).is_err());
        assert!(check("éé", 4).is_ok());
    }
}
