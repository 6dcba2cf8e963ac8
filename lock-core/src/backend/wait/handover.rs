//! Hand-overs: a release that gives the lock straight to a waiter, which never has to ask
//! for it. This module is their state machine; the [line](super::line) applies it to the
//! waiters in it.
//!
//! Two kinds reach a waiter:
//! - a **fair hand-over**: a fair lock's release, in any process, gives the lock to the
//!   next in the store's line and names that waiter's token in a message;
//! - a **local hand-over**: a release of an exclusive lock by a task of the same store
//!   claims the longest-waiting waiter here, changes the owner in one command, and tells
//!   the waiter the outcome.
//!
//! A waiter's [`Handover`] says where it stands. For a local hand-over, the waiter either
//! takes it up, or has meanwhile taken the lock itself, or has given up: then whoever
//! learns last that the lock is the waiter's releases it by the waiter's token. Each
//! transition says whether it wakes the waiter.

use std::collections::VecDeque;

use tokio::time::Instant;

/// Where a waiter stands with hand-overs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handover {
    /// It cannot be handed the lock locally: a fair waiter (with no hand-over yet), or
    /// local hand-overs are off.
    Off,
    /// A fair lock handed over to it, not taken up yet.
    Fair(FairHandover),
    /// In line for a local hand-over. `may_hold`: one to it failed in a way that leaves
    /// open whether the owner changed, so if it gives up it releases by its token (which
    /// changes nothing if the lock is not its own).
    Waiting { may_hold: bool },
    /// Claimed by a release that is changing the owner.
    Claimed,
    /// The lock is the waiter's, with this fencing token, its lease running until
    /// `until`.
    HandedOver { fence: u64, until: Instant },
    /// The waiter holds the lock (took it, or took up a hand-over): nothing more to do.
    Done,
    /// The waiter gave up while claimed: the release gives back what it handed over.
    Abandoned,
}

/// A fair lock handed over to a waiter: its fencing token, and the store's clock (in
/// microseconds) at the hand-over, from which the waiter reckons when its lease started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FairHandover {
    pub(crate) fence: u64,
    pub(crate) at_us: u64,
}

/// How a local hand-over to a waiter fell through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandoverFailed {
    /// The releasing side no longer held the lock: nothing changed.
    NotHeld,
    /// The command failed without an answer: the lock may be the waiter's now.
    NoAnswer,
}

/// What is left to do about a lock handed over to a waiter that did not take it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leftover {
    Nothing,
    /// Release it by the waiter's token.
    Release,
}

/// Whether a transition wakes the waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WakeWaiter {
    No,
    Yes,
}

impl Handover {
    /// A fair lock was handed over to the waiter.
    pub(crate) fn fair(&mut self, handover: FairHandover) -> WakeWaiter {
        *self = Self::Fair(handover);
        WakeWaiter::Yes
    }

    /// The fair hand-over, if it came. Taken once.
    pub(crate) fn take_fair(&mut self) -> Option<FairHandover> {
        let Self::Fair(handover) = *self else {
            return None;
        };
        *self = Self::Off;
        Some(handover)
    }

    /// The local hand-over, if it came: the fencing token, and until when the lease runs.
    /// Taken once.
    pub(crate) fn take_local(&mut self) -> Option<(u64, Instant)> {
        let Self::HandedOver { fence, until } = *self else {
            return None;
        };
        *self = Self::Done;
        Some((fence, until))
    }

    /// The waiter took the lock itself: a hand-over now in flight needs nothing more.
    pub(crate) fn done(&mut self) {
        if !matches!(self, Self::Off | Self::Fair(_)) {
            *self = Self::Done;
        }
    }

    /// A release claims the waiter for a local hand-over, if it is in line for one.
    pub(crate) fn claim(&mut self) -> bool {
        let waiting = matches!(self, Self::Waiting { .. });
        if waiting {
            *self = Self::Claimed;
        }
        waiting
    }

    /// The claiming release handed the lock over: the owner changed, with fencing token
    /// `fence`, the lease running until `until`.
    pub(crate) fn handed_over(&mut self, fence: u64, until: Instant) -> (Leftover, WakeWaiter) {
        match *self {
            Self::Claimed => {
                *self = Self::HandedOver { fence, until };
                (Leftover::Nothing, WakeWaiter::Yes)
            }
            Self::Abandoned => {
                *self = Self::Done;
                (Leftover::Release, WakeWaiter::No)
            }
            // Done: it took the lock under its own token meanwhile. The others cannot
            // happen: only the claimant reports.
            _ => (Leftover::Nothing, WakeWaiter::No),
        }
    }

    /// The claiming release could not hand the lock over: the waiter is in line again,
    /// in its place, and tries for itself.
    pub(crate) fn failed(&mut self, why: HandoverFailed) -> WakeWaiter {
        if *self != Self::Claimed {
            return WakeWaiter::No;
        }
        let may_hold = why == HandoverFailed::NoAnswer;
        *self = Self::Waiting { may_hold };
        WakeWaiter::Yes
    }

    /// The waiter leaves without the lock.
    pub(crate) fn give_up(&mut self) -> Leftover {
        match *self {
            Self::Waiting { may_hold } => {
                *self = Self::Done;
                if may_hold {
                    Leftover::Release
                } else {
                    Leftover::Nothing
                }
            }
            Self::Claimed => {
                *self = Self::Abandoned;
                Leftover::Nothing
            }
            Self::HandedOver { .. } => {
                *self = Self::Done;
                Leftover::Release
            }
            Self::Off | Self::Fair(_) | Self::Done | Self::Abandoned => Leftover::Nothing,
        }
    }

    /// A release is handing the lock to this waiter: a wake-up would be wasted on it.
    pub(crate) fn is_underway(&self) -> bool {
        matches!(self, Self::Claimed | Self::HandedOver { .. })
    }
}

/// The latest few fair hand-overs of a lock that found no local waiter by their token
/// (yet: the message can overtake the reply to the attempt that put it in line; or
/// never: it went to another process).
#[derive(Debug, Default)]
pub(crate) struct Unclaimed(VecDeque<(Box<str>, FairHandover)>);

impl Unclaimed {
    /// How many are kept.
    pub(super) const KEPT: usize = 16;

    /// Keeps the hand-over to `token`, forgetting the oldest kept if need be.
    pub(crate) fn keep(&mut self, token: &str, handover: FairHandover) {
        if self.0.len() == Self::KEPT {
            self.0.pop_front();
        }
        self.0.push_back((token.into(), handover));
    }

    /// The hand-over to `token`, if one was kept. Taken once.
    pub(crate) fn take(&mut self, token: &str) -> Option<FairHandover> {
        let i = self.0.iter().position(|(t, _)| **t == *token)?;
        self.0.remove(i).map(|(_, handover)| handover)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::line::Lines;
    use super::super::line::tests::signalled;
    use super::*;
    use std::sync::Arc;

    use crate::LockKind;

    const LEASE: Duration = Duration::from_secs(30);

    #[test]
    fn a_fair_handover_reaches_its_waiter_even_before_it_registers() {
        let lines = Lines::<()>::default();
        let key: Arc<str> = "k".into();
        let line = lines.join(&key, |_| {});
        let fair = |token: &str| {
            let waiter = line.join_line(token.into(), LEASE, LockKind::Exclusive, Handover::Off);
            line.expect_fair_handover(&waiter);
            waiter
        };
        let handover = |fence| FairHandover { fence, at_us: 7 };
        let a = fair("a");
        lines.deliver("k", "a", handover(1));
        assert!(signalled(&a), "a hand-over wakes its waiter");
        assert_eq!(a.take_fair_handover(), Some(handover(1)));
        assert_eq!(a.take_fair_handover(), None);
        // Delivered before "b" registered: kept for it, among the latest few.
        lines.deliver("k", "b", handover(2));
        for fence in 3..3 + Unclaimed::KEPT as u64 - 1 {
            lines.deliver("k", "elsewhere", handover(fence));
        }
        let b = fair("b");
        assert!(signalled(&b));
        assert_eq!(b.take_fair_handover(), Some(handover(2)));
        // Older than the latest few: gone.
        lines.deliver("k", "c", handover(100));
        for fence in 0..Unclaimed::KEPT as u64 {
            lines.deliver("k", "elsewhere", handover(fence));
        }
        let c = fair("c");
        assert!(!signalled(&c));
        assert_eq!(c.take_fair_handover(), None);
    }

    #[test]
    fn a_local_handover_goes_to_the_longest_waiting_and_whoever_learns_last_frees_an_orphan() {
        let lines = Lines::<()>::default();
        let line = lines.join(&"k".into(), |_| {});
        let waiting = || Handover::Waiting { may_hold: false };
        let [a, b, c] = ["a", "b", "c"]
            .map(|t| line.join_line(t.into(), LEASE, LockKind::Exclusive, waiting()));
        let until = Instant::now() + LEASE;

        // Claimed first come first; handed over and taken up once.
        let claimed = line.claim_for_handover(8).unwrap();
        assert!(Arc::ptr_eq(&claimed, &a));
        assert_eq!(a.take_local_handover(), None, "nothing handed over yet");
        assert_eq!(a.handed_over(7, until), Leftover::Nothing);
        assert!(signalled(&a), "a hand-over wakes its waiter");
        assert_eq!(a.take_local_handover(), Some((7, until)));
        assert_eq!(a.take_local_handover(), None);
        assert_eq!(line.leave_line(&a), Leftover::Nothing, "it holds the lock");

        // Gave up while claimed: the releasing side frees what it handed over.
        assert!(Arc::ptr_eq(&line.claim_for_handover(8).unwrap(), &b));
        assert_eq!(line.leave_line(&b), Leftover::Nothing);
        assert_eq!(b.handed_over(8, until), Leftover::Release);

        // A hand-over that fell through leaves the waiter first in line, woken to try
        // for itself; as it may hold the lock, it frees it should it give up.
        assert!(Arc::ptr_eq(&line.claim_for_handover(8).unwrap(), &c));
        c.handover_failed(HandoverFailed::NoAnswer);
        assert!(signalled(&c));
        assert!(Arc::ptr_eq(&line.claim_for_handover(8).unwrap(), &c));
        assert_eq!(c.handed_over(9, until), Leftover::Nothing);
        assert_eq!(
            line.leave_line(&c),
            Leftover::Release,
            "handed over, never taken"
        );
        assert!(line.claim_for_handover(8).is_none(), "nobody left in line");

        // Took the lock by its own attempt: a hand-over in flight needs nothing more.
        let d = line.join_line("d".into(), LEASE, LockKind::Exclusive, waiting());
        assert!(Arc::ptr_eq(&line.claim_for_handover(8).unwrap(), &d));
        d.done();
        assert_eq!(d.handed_over(10, until), Leftover::Nothing);
        assert_eq!(line.leave_line(&d), Leftover::Nothing);

        // Only waiters in line for a local hand-over get one.
        let e = line.join_line("e".into(), LEASE, LockKind::Exclusive, Handover::Off);
        assert!(
            line.claim_for_handover(8).is_none(),
            "handed to a fair waiter"
        );
        assert_eq!(line.leave_line(&e), Leftover::Nothing);
    }

    #[test]
    fn local_handovers_in_a_row_are_bounded() {
        let lines = Lines::<()>::default();
        let line = lines.join(&"k".into(), |_| {});
        for i in 0..4 {
            line.join_line(
                i.to_string().into(),
                LEASE,
                LockKind::Exclusive,
                Handover::Waiting { may_hold: false },
            );
        }
        assert!(line.claim_for_handover(2).is_some());
        assert!(line.claim_for_handover(2).is_some());
        assert!(
            line.claim_for_handover(2).is_none(),
            "a third hand-over in a row"
        );
        assert!(
            line.claim_for_handover(2).is_some(),
            "the count starts again"
        );
        assert!(
            line.claim_for_handover(0).is_none(),
            "local hand-overs turned off"
        );
    }
}
