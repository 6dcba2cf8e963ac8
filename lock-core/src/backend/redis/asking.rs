//! What an attempt at a lock sends its server besides the lock's keys, the same for every
//! kind: who asks and how ([`Attempting`], [`Asking`]), what becomes of a call cut short
//! ([`CutShort`]), how long a waiter's registrations last ([`PLACE_IN_LINE`],
//! [`WAITING_LOCKER`]), and durations as the scripts take them ([`millis`]).

use std::time::Duration;

use super::fencing::FenceSeed;
use crate::backend::store::Acquire;

/// How long a fair waiter's place in line lasts unless it asks again (it does, at least
/// every safety poll), so that a waiter that died is skipped after at most this.
pub(super) const PLACE_IN_LINE: Duration = Duration::from_secs(5);
/// How long a `Locker` stays among those a release wakes unless one of its waiters asks
/// again (each does at least every safety poll); also how long a fair lock's line lasts,
/// which must outlast every place in it.
pub(super) const WAITING_LOCKER: Duration = Duration::from_secs(PLACE_IN_LINE.as_secs() * 2);

/// How an attempt asks a server: where a new fence counter starts, and what becomes of
/// a call cut short before its reply.
#[derive(Debug, Clone, Copy)]
pub(super) struct Asking {
    pub(super) seed: FenceSeed,
    pub(super) cut_short: CutShort,
}

impl Asking {
    /// An attempt on this server alone.
    pub(super) const ALONE: Asking = Asking {
        seed: FenceSeed::ServerClock,
        cut_short: CutShort::Release,
    };
}

/// What becomes of an acquire call cut short before its reply, which may have taken the
/// lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CutShort {
    /// It is released in the background.
    Release,
    /// The caller keeps track of it: RedLock keeps a late grant of a lock that a quorum
    /// granted (the guard renews and releases it on every master), and gives back those
    /// of an attempt that fell short.
    LeftToCaller,
}

/// One attempt at a lock, as every kind's acquire script takes it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Attempting<'a> {
    pub(super) request: &'a Acquire,
    /// How much longer its caller waits should the lock be held.
    pub(super) waits_for: Duration,
    /// How long the fence counter is kept, in milliseconds: at least the lease.
    pub(super) fence_ttl_ms: u64,
    /// This `Locker`'s id, under which a release can wake it; empty without pub/sub.
    pub(super) listening_id: &'a str,
    /// Where a new fence counter starts.
    pub(super) seed: FenceSeed,
}

impl Attempting<'_> {
    /// The `Locker` the attempt registers to be woken: this one's, or none (`""`) for a
    /// caller that will not wait.
    pub(super) fn waiting_as(&self) -> &str {
        if self.waits_for.is_zero() {
            ""
        } else {
            self.listening_id
        }
    }

    /// How long a waiter's place (in a fair lock's line, among a write lock's waiting
    /// writers) lasts: as long as it waits, but never longer than [`PLACE_IN_LINE`]
    /// before it asks again. Zero means "do not queue": not rounded up as leases are.
    pub(super) fn place_ms(&self) -> u64 {
        let place = self.waits_for.min(PLACE_IN_LINE);
        u64::try_from(place.as_millis()).unwrap_or(u64::MAX)
    }

    /// The lease asked for, in milliseconds.
    pub(super) fn lease_ms(&self) -> u64 {
        millis(self.request.lease)
    }
}

/// `d` in milliseconds, at least 1, as the scripts take a lease or an expiry.
pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
