//! Lock kinds: what a hold allows others while it lasts.

use std::fmt;

/// The kind of a lock, chosen per acquisition with
/// [`LockOptions::kind`](crate::LockOptions::kind).
///
/// ```
/// use lock_core::{LockKind, LockOptions};
///
/// let opts = LockOptions::new().kind(LockKind::Fair);
/// assert_eq!(opts, LockOptions::new().fair(true));
/// let _pool = LockKind::Semaphore { permits: 3 };
/// ```
///
/// Not every store has every kind: asking a store for a kind it lacks fails with
/// [`LockError::Unsupported`](crate::LockError::Unsupported), naming the store and the
/// kind, before anything is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// One holder at a time; whoever asks first once the lock is free gets it. The
    /// default.
    Exclusive,
    /// One holder at a time, served first come first served across every process: a
    /// release hands the lock straight to the next in line. Fair and exclusive holds of
    /// one key exclude each other.
    Fair,
    /// Shared with other readers, excluding writers.
    Read,
    /// One writer, excluding readers and other writers.
    Write,
    /// Up to `permits` holders at once.
    Semaphore {
        /// How many holders the lock admits at once.
        permits: u32,
    },
}

impl LockKind {
    /// Whether a task holding a lock of this kind takes one of kind `asked` on the same
    /// key again without asking the store: a re-entrant hold, sharing the first one's
    /// token. Exclusive and fair holds are one lock, so each re-enters the other; a read
    /// hold never re-enters into a write hold; semaphore permits are not re-entrant.
    pub(crate) fn reenters(self, asked: LockKind) -> bool {
        matches!(
            (self, asked),
            (Self::Exclusive | Self::Fair, Self::Exclusive | Self::Fair)
                | (Self::Read, Self::Read)
                | (Self::Write, Self::Write)
        )
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exclusive => f.write_str("exclusive"),
            Self::Fair => f.write_str("fair"),
            Self::Read => f.write_str("read"),
            Self::Write => f.write_str("write"),
            Self::Semaphore { permits } => write!(f, "semaphore ({permits} permits)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_hold_never_reenters_into_a_write_hold() {
        use LockKind::*;
        assert!(Exclusive.reenters(Fair) && Fair.reenters(Exclusive));
        assert!(Read.reenters(Read) && Write.reenters(Write));
        assert!(!Read.reenters(Write));
        assert!(!Exclusive.reenters(Read) && !Read.reenters(Exclusive));
        let permits = Semaphore { permits: 2 };
        assert!(!permits.reenters(permits), "a permit is not re-entrant");
    }
}
