//! The one error type of the crate.

use std::error::Error as StdError;
use std::time::Duration;

use crate::{LockKey, LockKind};

/// Everything that can go wrong while taking, keeping or giving back a lock.
///
/// Match on it, or ask with the `is_*` helpers, which keep working when new variants
/// are added:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use lock_core::{LockOptions, Locker};
///
/// let locker = Locker::in_memory();
/// let _held = locker.lock("report:7").await.unwrap();
///
/// // another task finds the lock taken
/// let other = locker.clone();
/// let err = tokio::spawn(async move {
///     other
///         .lock_with("report:7", LockOptions::new().wait(Duration::ZERO))
///         .await
///         .unwrap_err()
/// })
/// .await
/// .unwrap();
/// assert!(err.is_timeout());
/// // how long the current holder's lease still runs, for a `Retry-After`
/// assert!(err.retry_after().is_some());
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock stayed held by someone else for the whole wait.
    #[error("timed out after {waited:?} waiting for lock {key:?}")]
    Timeout {
        /// The lock's key.
        key: String,
        /// How long the caller waited.
        waited: Duration,
        /// The holder's remaining lease at the last attempt, when known.
        holder_ttl: Option<Duration>,
    },
    /// The caller does not own the lock (any more): its lease ran out, or another owner
    /// holds it now. Nothing was changed.
    #[error("lock {key:?} is not held by this owner")]
    NotHeld {
        /// The lock's key.
        key: String,
    },
    /// The lease ran out before it could be renewed: another owner may hold the lock now.
    #[error("lock {key:?} was lost: its lease ran out before it could be renewed")]
    Lost {
        /// The lock's key.
        key: String,
    },
    /// The key cannot name a lock. Nothing was sent to the store.
    #[error("invalid lock key {key:?}: {reason}")]
    InvalidKey {
        /// The offending key, cut to its first 64 characters.
        key: String,
        /// Why it was refused.
        reason: String,
    },
    /// The calling task already holds the lock as a kind that the kind asked for would
    /// have to wait for: a read hold asking to write (an upgrade, which deadlocks two
    /// readers), or any hold asking for a semaphore permit of the same key. Refused at
    /// once; nothing was sent to the store. Release the hold first, or take the write
    /// side from the start (a write hold re-enters as a read).
    #[error("lock {key:?} is held by this task as {held} and cannot be taken again as {asked}")]
    Upgrade {
        /// The lock's key.
        key: String,
        /// The kind the task holds it as.
        held: LockKind,
        /// The kind asked for.
        asked: LockKind,
    },
    /// Too few of the independent masters agreed.
    #[error("lock {key:?}: quorum not reached ({acquired} of {needed} masters)")]
    Quorum {
        /// The lock's key.
        key: String,
        /// How many masters granted the lock.
        acquired: usize,
        /// How many were needed.
        needed: usize,
    },
    /// The store cannot take locks of this kind. Nothing was sent to it.
    #[error("lock {key:?}: the {store} store does not support {kind} locks")]
    Unsupported {
        /// The lock's key.
        key: String,
        /// The store's name, such as `"redis"`.
        store: String,
        /// The kind asked for.
        kind: LockKind,
    },
    /// The store could not be reached, did not answer in time, or answered with an error.
    #[error("lock store failed: {context}")]
    Backend {
        /// The key of the lock the failed call was about (acquire, release, extend,
        /// inspect and the like); `None` for a call about no one lock, such as opening a
        /// connection.
        key: Option<String>,
        /// What was being done, and where (passwords are never included).
        context: String,
        /// The underlying failure.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
    /// A setting or an argument is not usable.
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl LockError {
    /// The wait ran out while someone else held the lock.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }

    /// A release or extend by someone who does not own the lock.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Self::NotHeld { .. })
    }

    /// The lease ran out while the lock was thought held.
    pub fn is_lost(&self) -> bool {
        matches!(self, Self::Lost { .. })
    }

    /// The key was refused before any I/O.
    pub fn is_invalid_key(&self) -> bool {
        matches!(self, Self::InvalidKey { .. })
    }

    /// The store cannot take locks of the kind asked for.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Self::Unsupported { .. })
    }

    /// A task holding a lock asked for it again as a kind its hold cannot become, such
    /// as a reader asking to write.
    pub fn is_upgrade(&self) -> bool {
        matches!(self, Self::Upgrade { .. })
    }

    /// The store was unreachable or failed.
    pub fn is_backend(&self) -> bool {
        matches!(self, Self::Backend { .. })
    }

    /// A quorum of independent masters could not be reached.
    pub fn is_quorum(&self) -> bool {
        matches!(self, Self::Quorum { .. })
    }

    /// A setting or argument was refused.
    pub fn is_config(&self) -> bool {
        matches!(self, Self::Config(..))
    }

    /// For a timeout, how long the holder's lease still ran at the last attempt: a
    /// sensible `Retry-After`.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Timeout { holder_ttl, .. } => *holder_ttl,
            _ => None,
        }
    }

    /// The key of the lock the error is about, where there is one.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Timeout { key, .. }
            | Self::NotHeld { key }
            | Self::Lost { key }
            | Self::InvalidKey { key, .. }
            | Self::Unsupported { key, .. }
            | Self::Upgrade { key, .. }
            | Self::Quorum { key, .. } => Some(key),
            Self::Backend { key, .. } => key.as_deref(),
            Self::Config(..) => None,
        }
    }

    /// A failed store call: `context` says what was being done, and where. It names no
    /// key until [`about`](Self::about) gives it one.
    pub(crate) fn backend(
        context: impl Into<String>,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        Self::Backend {
            key: None,
            context: context.into(),
            source: source.into(),
        }
    }

    /// The `store`'s call about the lock `key` failed while `doing`, such as `"take it"`:
    /// a [`Backend`](Self::Backend) error that names `key`.
    #[cfg(any(
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "zookeeper",
        test
    ))]
    pub(crate) fn failed(
        store: &str,
        key: &LockKey,
        doing: &str,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        let context = format!("{store} lock {:?}: cannot {doing}", key.as_str());
        Self::backend(context, source).about(key)
    }

    /// This error, met by a store call about the lock `key`: a [`Backend`](Self::Backend)
    /// error that names no key yet names `key`; any other error is returned as it is.
    pub(crate) fn about(self, key: &LockKey) -> Self {
        match self {
            Self::Backend {
                key: None,
                context,
                source,
            } => Self::Backend {
                key: Some(key.to_string()),
                context,
                source,
            },
            other => other,
        }
    }

    /// A semaphore asked for with another count than the one it has.
    pub(crate) fn miscounted(key: &LockKey, stored: u32, asked: u32) -> Self {
        Self::Config(format!(
            "semaphore {:?} has {stored} permits, but was asked for with {asked}; \
             change its count with Semaphore::set_permits",
            key.as_str()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_lowercase_without_trailing_period() {
        let errors = [
            LockError::Timeout {
                key: "k".into(),
                waited: Duration::from_millis(5),
                holder_ttl: None,
            },
            LockError::NotHeld { key: "k".into() },
            LockError::Lost { key: "k".into() },
            LockError::InvalidKey {
                key: String::new(),
                reason: "it is empty".into(),
            },
            LockError::Quorum {
                key: "k".into(),
                acquired: 1,
                needed: 2,
            },
            LockError::Unsupported {
                key: "k".into(),
                store: "memory".into(),
                kind: LockKind::Read,
            },
            LockError::Upgrade {
                key: "k".into(),
                held: LockKind::Read,
                asked: LockKind::Write,
            },
            LockError::backend("connect to 127.0.0.1:1", "connection refused"),
            LockError::Config("lease must be at least 1ms".into()),
        ];
        for err in errors {
            let msg = err.to_string();
            assert!(!msg.ends_with('.'), "{msg}");
            assert!(msg.starts_with(|c: char| c.is_lowercase()), "{msg}");
        }
    }

    #[test]
    fn helpers_match_variants() {
        let timeout = LockError::Timeout {
            key: "k".into(),
            waited: Duration::ZERO,
            holder_ttl: Some(Duration::from_secs(3)),
        };
        assert!(timeout.is_timeout() && !timeout.is_lost());
        assert_eq!(timeout.retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(timeout.key(), Some("k"));
        assert!(LockError::NotHeld { key: "k".into() }.is_not_held());
        assert!(LockError::backend("x", "y").is_backend());
        assert!(LockError::backend("x", "y").key().is_none());
    }

    #[test]
    fn a_backend_error_about_a_key_names_it_and_reads_the_same() {
        let key = LockKey::new("balance:42").unwrap();
        let err = LockError::backend("connect to 127.0.0.1:1", "connection refused");
        let text = err.to_string();
        let err = err.about(&key);
        assert_eq!(err.key(), Some("balance:42"));
        assert_eq!(err.to_string(), text);
        let other = LockKey::new("balance:43").unwrap();
        assert_eq!(err.about(&other).key(), Some("balance:42"));
        let not_held = LockError::NotHeld { key: "k".into() }.about(&key);
        assert_eq!(not_held.key(), Some("k"));
        let failed = LockError::failed("mysql", &key, "take it", "gone away");
        assert_eq!(failed.key(), Some("balance:42"));
        assert_eq!(
            failed.to_string(),
            "lock store failed: mysql lock \"balance:42\": cannot take it"
        );
    }
}
