//! Who goes in: one rule for every kind of lock.
//!
//! Tokio builds its mutex, read-write lock and semaphore on one weighted semaphore; here
//! too every kind is one rule with a parameter. Each hold takes some of a lock: an
//! exclusive, fair or write hold all of it; a read one share, beside other reads, of as
//! many as come; a permit one of the semaphore's count, beside other permits. A caller
//! goes in when what it takes is free and nobody waits ahead of it: for a fair caller,
//! whoever is first in line if that is not the caller; for a reader or a permit, a writer
//! or an exclusive caller that began to ask no later, so that neither readers nor permits
//! coming and going keep it out. The other kinds keep no order: whoever asks first once
//! there is room goes in.

use super::state::Entry;
use crate::LockKind;
use crate::backend::store::Acquire;
use crate::kind::Sharing;

/// Whether `request` goes in to `entry` now. A semaphore's count is the one stored, which
/// `request`'s was checked against.
pub(super) fn admits(entry: &Entry, request: &Acquire) -> bool {
    let free = match request.kind {
        LockKind::Exclusive | LockKind::Fair | LockKind::Write => entry.holders.is_empty(),
        LockKind::Read => !entry.held_otherwise(Sharing::Read),
        LockKind::Semaphore { permits } => free_permits(entry, permits) > 0,
    };
    let ahead = match request.kind {
        LockKind::Fair => entry
            .line
            .front()
            .is_some_and(|first| *first.token != *request.token),
        LockKind::Read | LockKind::Semaphore { .. } => entry.writer_waiting_since(request.since),
        LockKind::Exclusive | LockKind::Write => false,
    };
    free && !ahead
}

/// The permits of semaphore `entry` free now: none while another kind holds it, else its
/// count (the one stored, or `permits` if none is) less the permits held.
pub(super) fn free_permits(entry: &Entry, permits: u32) -> u32 {
    if entry.held_otherwise(Sharing::Permit) {
        return 0;
    }
    let taken = u32::try_from(entry.holders.len()).unwrap_or(u32::MAX);
    entry.permits.unwrap_or(permits).saturating_sub(taken)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::LockKey;
    use crate::backend::memory::session::Term;

    const SEC: Duration = Duration::from_secs(1);
    const IN: bool = true;
    const OUT: bool = false;

    /// `token` asking for "k" as `kind`, having begun to ask at `since`.
    fn asking(token: &str, kind: LockKind, since: Instant) -> Acquire {
        Acquire {
            key: LockKey::new("k").unwrap(),
            token: token.into(),
            kind,
            lease: SEC,
            holder_id: None,
            deadline: since + SEC,
            since,
        }
    }

    /// A lock held by one holder of each of `kinds`, with a semaphore's count stored.
    fn held_by(kinds: &[LockKind], now: Instant) -> Entry {
        let mut entry = Entry::new(now);
        for (i, &kind) in kinds.iter().enumerate() {
            if let LockKind::Semaphore { permits } = kind {
                entry.permits = Some(permits);
            }
            entry.take(&format!("h{i}"), None, kind, &Term::Lease(SEC), now, SEC);
        }
        entry
    }

    #[test]
    fn each_kind_goes_in_where_what_it_takes_is_free() {
        use LockKind::{Exclusive, Fair, Read, Semaphore, Write};
        let permit = Semaphore { permits: 2 };
        let holder_sets: [&[LockKind]; 8] = [
            &[],
            &[Exclusive],
            &[Fair],
            &[Write],
            &[Read],
            &[Read, Read],
            &[permit],
            &[permit, permit],
        ];
        // Against each holder set above, in its order: who goes in.
        let table = [
            (Exclusive, [IN, OUT, OUT, OUT, OUT, OUT, OUT, OUT]),
            (Fair, [IN, OUT, OUT, OUT, OUT, OUT, OUT, OUT]),
            (Write, [IN, OUT, OUT, OUT, OUT, OUT, OUT, OUT]),
            (Read, [IN, OUT, OUT, OUT, IN, IN, OUT, OUT]),
            (permit, [IN, OUT, OUT, OUT, OUT, OUT, IN, OUT]),
        ];
        let now = Instant::now();
        for (kind, row) in table {
            for (holders, goes_in) in holder_sets.iter().zip(row) {
                let entry = held_by(holders, now);
                assert_eq!(
                    admits(&entry, &asking("c", kind, now)),
                    goes_in,
                    "{kind:?} against {holders:?}"
                );
            }
        }
    }

    #[test]
    fn a_fair_caller_goes_in_only_first_in_line() {
        let now = Instant::now();
        let mut entry = Entry::new(now);
        assert!(admits(&entry, &asking("a", LockKind::Fair, now)), "no line");
        for token in ["a", "b"] {
            entry.wait(&asking(token, LockKind::Fair, now), &Term::Lease(SEC));
        }
        assert!(admits(&entry, &asking("a", LockKind::Fair, now)), "first");
        assert!(!admits(&entry, &asking("b", LockKind::Fair, now)), "second");
        assert!(
            !admits(&entry, &asking("c", LockKind::Fair, now)),
            "not in line"
        );
        assert!(
            admits(&entry, &asking("c", LockKind::Exclusive, now)),
            "an exclusive caller keeps no line"
        );
    }

    #[test]
    fn a_reader_or_a_permit_waits_for_a_writer_that_began_to_ask_no_later() {
        let earlier = Instant::now();
        let writer_since = earlier + SEC;
        let later = writer_since + SEC;
        let mut entry = Entry::new(earlier);
        entry.wait(
            &asking("w", LockKind::Write, writer_since),
            &Term::Lease(SEC),
        );
        assert!(admits(&entry, &asking("r", LockKind::Read, earlier)));
        assert!(!admits(&entry, &asking("r", LockKind::Read, writer_since)));
        assert!(!admits(&entry, &asking("r", LockKind::Read, later)));
        let permit = LockKind::Semaphore { permits: 1 };
        assert!(admits(&entry, &asking("p", permit, earlier)));
        assert!(!admits(&entry, &asking("p", permit, later)));
    }

    #[test]
    fn a_permit_waits_for_an_exclusive_caller_that_began_to_ask_no_later() {
        let earlier = Instant::now();
        let exclusive_since = earlier + SEC;
        let mut entry = held_by(&[LockKind::Semaphore { permits: 3 }], earlier);
        entry.wait(
            &asking("x", LockKind::Exclusive, exclusive_since),
            &Term::Lease(SEC),
        );
        let permit = LockKind::Semaphore { permits: 3 };
        assert!(admits(&entry, &asking("p", permit, earlier)));
        assert!(!admits(&entry, &asking("p", permit, exclusive_since)));
    }
}
