//! What an operator sees of a lock: [`Locker::inspect`](crate::Locker::inspect)'s answer.

use std::time::Duration;

use crate::LockKind;

/// How many characters of an owner's token a [`HolderInfo`] keeps.
const TOKEN_PREFIX_CHARS: usize = 8;

/// A held lock, as its store sees it: how it is held, by whom, and how many wait for it.
/// [`Locker::inspect`](crate::Locker::inspect) returns one; a store makes one with
/// [`LockInfo::new`].
///
/// What each store knows differs (the [`Locker::inspect`](crate::Locker::inspect) docs
/// say what each reports): a field a store cannot know is `None`, never a guess.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The kind the lock is held as, where the store records it. A semaphore's
    /// [`permits`](LockKind::Semaphore::permits) is its stored count (`None` should that
    /// count have run out on Redis). On Redis, a hold by one owner (exclusive, fair or
    /// write) is known by the mark its owner token ends with; `None` for a token of
    /// lock-core 0.1, which had none.
    pub kind: Option<LockKind>,
    /// Who holds it: the one owner of an exclusive, fair or write hold, each reader of a
    /// read hold, each permit in use of a semaphore. Never empty; ordered by lease left,
    /// shortest first.
    pub holders: Vec<HolderInfo>,
    /// How many wait for the lock, counted as the store can, or `None` where it cannot:
    /// the in-memory store counts the tasks waiting; Redis counts the `Locker`s (one per
    /// process, usually) registered to be woken when it is freed, not their tasks.
    pub waiting: Option<usize>,
}

impl LockInfo {
    /// A lock held as `kind` (`None` where the store cannot tell) by `holders` (at least
    /// one), which are put in order of lease left, shortest first (a hold without a lease
    /// last), with `waiting` waiters where the store counts them.
    pub fn new(
        kind: Option<LockKind>,
        mut holders: Vec<HolderInfo>,
        waiting: Option<usize>,
    ) -> Self {
        holders.sort_by(|a, b| {
            let left = |h: &HolderInfo| h.lease_left.unwrap_or(Duration::MAX);
            left(a)
                .cmp(&left(b))
                .then_with(|| a.token_prefix.cmp(&b.token_prefix))
        });
        Self {
            kind,
            holders,
            waiting,
        }
    }
}

/// The longest [holder id](HolderInfo::holder_id) accepted, in bytes.
pub const MAX_HOLDER_ID_LEN: usize = 255;

/// One holder of a lock: an owner, a reader or a permit, in a [`LockInfo`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The first 8 characters of the holder's owner token, enough to tell holders apart
    /// and to match a hold's logs, and never the whole token: the token is what releases
    /// and renews the hold.
    pub token_prefix: String,
    /// How long its lease still runs, as the store reckons it. `None` for a hold that
    /// lasts as long as a session rather than a lease, or where the store cannot tell.
    pub lease_left: Option<Duration>,
    /// Its fencing token (the one its guard's
    /// [`fencing_token`](crate::LockGuard::fencing_token) returns), where the store
    /// records it; `None` where it does not, rather than a number that may not be the
    /// holder's.
    pub fencing_token: Option<u64>,
    /// What the holder calls itself, where it gave a name and the store keeps it: the
    /// candidate's id of an election's leader ([`Leader::id`](crate::Leader::id)).
    pub holder_id: Option<String>,
}

impl HolderInfo {
    /// The holder whose owner token is `token`, of which only the first 8 characters are
    /// kept, with `lease_left` and `fencing_token` where the store knows them.
    pub fn new(token: &str, lease_left: Option<Duration>, fencing_token: Option<u64>) -> Self {
        Self {
            token_prefix: token.chars().take(TOKEN_PREFIX_CHARS).collect(),
            lease_left,
            fencing_token,
            holder_id: None,
        }
    }

    /// This holder, naming itself `holder_id` (when the store kept one).
    pub fn with_holder_id(mut self, holder_id: Option<impl Into<String>>) -> Self {
        self.holder_id = holder_id.map(Into::into);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_keeps_only_the_start_of_its_token() {
        let token = "3f2a9c1e-8b4d-4f6a-9e2b-7c5d1a0b3e4f";
        let holder = HolderInfo::new(token, None, Some(7));
        assert_eq!(holder.token_prefix, "3f2a9c1e");
        assert_eq!(HolderInfo::new("short", None, None).token_prefix, "short");
        assert_eq!(
            HolderInfo::new("ééééééééé", None, None).token_prefix,
            "éééééééé"
        );
    }

    #[test]
    fn holders_are_ordered_by_lease_left() {
        let ms = Duration::from_millis;
        let info = LockInfo::new(
            Some(LockKind::Read),
            vec![
                HolderInfo::new("session", None, None),
                HolderInfo::new("late", Some(ms(900)), None),
                HolderInfo::new("soon", Some(ms(100)), None),
            ],
            Some(0),
        );
        let order: Vec<&str> = info.holders.iter().map(|h| &*h.token_prefix).collect();
        assert_eq!(order, ["soon", "late", "session"]);
    }
}
