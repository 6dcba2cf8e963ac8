//! Lock kinds: what a hold allows others while it lasts.

use std::fmt;
use std::sync::Arc;

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
/// Kinds exclude each other on one key: an exclusive, fair or write hold excludes every
/// other hold of its key; read holds share it with read holds only, permits with permits
/// only. So a name used as two kinds of lock is safe, but best used as one.
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
    /// The read side of a read-write lock: shared with other readers, excluding writers.
    /// Each reader has its own token, lease and fencing token. Writer-preferring: a
    /// reader that asks after a writer began to wait goes in after that writer.
    /// [`Locker::read`](crate::Locker::read) takes one.
    Read,
    /// The write side of a read-write lock: one writer, excluding readers and other
    /// writers. Readers that waited for it go in together once it is released.
    /// [`Locker::write`](crate::Locker::write) takes one.
    Write,
    /// A permit of a semaphore: up to `permits` holders at once, each with its own token,
    /// lease and fencing token. The count is stored with the semaphore on first use;
    /// asking with another is [`LockError::Config`](crate::LockError::Config). A
    /// [`Semaphore`](crate::Semaphore) handle, from
    /// [`Locker::semaphore`](crate::Locker::semaphore), takes them.
    Semaphore {
        /// How many holders the lock admits at once.
        permits: u32,
    },
}

impl LockKind {
    /// Whether a task holding a lock of this kind takes one of kind `asked` on the same
    /// key again without asking the store: a re-entrant hold, sharing the first one's
    /// token. A hold that excludes everyone (exclusive, fair, write) re-enters as any of
    /// those and as a read (a downgrade: the write hold covers it); a read hold re-enters
    /// only as a read, never as a write (an upgrade); semaphore permits are not
    /// re-entrant.
    pub(crate) fn reenters(self, asked: LockKind) -> bool {
        match self {
            Self::Exclusive | Self::Fair | Self::Write => matches!(
                asked,
                Self::Exclusive | Self::Fair | Self::Write | Self::Read
            ),
            Self::Read => asked == Self::Read,
            Self::Semaphore { .. } => false,
        }
    }
}

/// Which holds of one key can be held together: only holds of the same sharing, and of
/// those only reads, or permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// Exclusive, fair and write holds: one at a time, excluding every other.
    Owner,
    /// Read holds, shared with each other.
    Read,
    /// Semaphore permits, shared with each other up to the count.
    Permit,
}

impl LockKind {
    /// The mark an owner token ends with, `<uuid v4>:<mark>`, so that a store that keeps
    /// only the token still tells how a lock is held.
    fn token_mark(self) -> &'static str {
        match self {
            Self::Exclusive => "x",
            Self::Fair => "f",
            Self::Read => "r",
            Self::Write => "w",
            Self::Semaphore { .. } => "s",
        }
    }

    /// A new owner token for a hold of this kind: a random (v4) UUID and the kind's mark.
    pub(crate) fn new_token(self) -> Arc<str> {
        let id = uuid::Uuid::new_v4().hyphenated();
        Arc::from(format!("{id}:{}", self.token_mark()))
    }

    /// The kind of the hold by one owner (exclusive, fair or write) whose token is
    /// `token`; `None` for a token without a mark, as lock-core 0.1 made them.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
    pub(crate) fn of_owner_token(token: &str) -> Option<LockKind> {
        match token.rsplit_once(':')?.1 {
            "x" => Some(Self::Exclusive),
            "f" => Some(Self::Fair),
            "w" => Some(Self::Write),
            _ => None,
        }
    }

    pub(crate) fn sharing(self) -> Sharing {
        match self {
            Self::Read => Sharing::Read,
            Self::Semaphore { .. } => Sharing::Permit,
            Self::Exclusive | Self::Fair | Self::Write => Sharing::Owner,
        }
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
    fn an_owner_token_is_a_v4_uuid_and_its_kind_mark() {
        let kinds = [
            LockKind::Exclusive,
            LockKind::Fair,
            LockKind::Read,
            LockKind::Write,
            LockKind::Semaphore { permits: 2 },
        ];
        for kind in kinds {
            let token = kind.new_token();
            let (id, mark) = token.split_once(':').unwrap();
            let id = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(id.get_version_num(), 4, "{token}");
            assert_eq!(mark, kind.token_mark());
            let owner = matches!(kind, LockKind::Exclusive | LockKind::Fair | LockKind::Write);
            let seen = LockKind::of_owner_token(&token);
            assert_eq!(seen, owner.then_some(kind), "{token}");
        }
        assert_ne!(
            LockKind::Exclusive.new_token(),
            LockKind::Exclusive.new_token()
        );
        let unmarked = "3f2a9c1e-8b4d-4f6a-9e2b-7c5d1a0b3e4f";
        assert_eq!(LockKind::of_owner_token(unmarked), None);
    }

    #[test]
    fn a_read_hold_never_reenters_into_a_write_hold() {
        use LockKind::*;
        assert!(Exclusive.reenters(Fair) && Fair.reenters(Exclusive));
        assert!(Read.reenters(Read) && Write.reenters(Write));
        assert!(!Read.reenters(Write), "an upgrade");
        assert!(!Read.reenters(Exclusive) && !Read.reenters(Fair));
        assert!(Write.reenters(Read), "a downgrade");
        assert!(Exclusive.reenters(Read) && Exclusive.reenters(Write));
        let permits = Semaphore { permits: 2 };
        assert!(!permits.reenters(permits), "a permit is not re-entrant");
        assert!(!Exclusive.reenters(permits) && !permits.reenters(Exclusive));
    }
}
