//! A lock's fence counter, from which each holder draws its fencing token, as Redis's
//! `fence.lua` keeps it.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::fence::wall_clock_us;

/// The last fencing token drawn for one lock, and until when it is kept.
#[derive(Debug)]
pub(super) struct Fence {
    last: u64,
    expires_at: Instant,
}

impl Fence {
    /// A counter that has drawn nothing, expired at `now`.
    pub(super) fn new(now: Instant) -> Self {
        Self {
            last: 0,
            expires_at: now,
        }
    }

    /// Draws the next token at `now` for a hold of `lease` (`None` for a session's), and
    /// keeps the counter `ttl` after its last use.
    pub(super) fn draw(&mut self, now: Instant, ttl: Duration, lease: Option<Duration>) -> u64 {
        let fresh = self.expired(now);
        if fresh {
            // A counter that expired starts again from the wall clock in microseconds,
            // as the Redis script does, so tokens never go backwards.
            self.last = self.last.max(wall_clock_us());
        }
        self.last += 1;
        // As on Redis: renewed every 64 tokens (and at least for the lease drawn).
        if fresh || self.last.is_multiple_of(64) {
            self.expires_at = now + ttl;
        }
        if let Some(lease) = lease {
            self.expires_at = self.expires_at.max(now + lease);
        }
        self.last
    }

    /// Whether the counter ran out by `now`: the lock may be forgotten if nobody holds it.
    pub(super) fn expired(&self, now: Instant) -> bool {
        self.expires_at <= now
    }

    /// Raises the counter to at least `to`, so that the next token drawn is greater; a
    /// counter that ran out by `now` is kept `ttl` from now, as a new one.
    #[cfg(any(feature = "redis", test))]
    pub(super) fn raise(&mut self, now: Instant, to: u64, ttl: Duration) {
        if self.expired(now) {
            self.expires_at = now + ttl;
        }
        self.last = self.last.max(to);
    }

    /// The last token drawn, or raised to, while the counter is kept (what Redis answers
    /// for its counter): a RedLock master's, from which RedLock reads an owner's token.
    #[cfg(any(feature = "redis", test))]
    pub(super) fn kept(&self, now: Instant) -> Option<u64> {
        (!self.expired(now)).then_some(self.last)
    }

    /// Keeps the counter at least `ttl` from `now`.
    pub(super) fn keep(&mut self, now: Instant, ttl: Duration) {
        self.expires_at = self.expires_at.max(now + ttl);
    }
}
