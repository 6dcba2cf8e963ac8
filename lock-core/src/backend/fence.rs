//! What the stores' fence counters share: a counter that is new, or that ran out, starts
//! from the wall clock in microseconds, so that a lock's tokens never go backwards while
//! the clock does not (Redis's `fence.lua` starts from the server's clock alike).

use std::time::{SystemTime, UNIX_EPOCH};

/// This process's wall clock, in microseconds since the Unix epoch.
pub(crate) fn wall_clock_us() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX)
}
