//! What a `Locker` tells the world: `tracing` spans and events always, and with the
//! `metrics` feature, metrics through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! | span (debug) | fields | its events |
//! |---|---|---|
//! | `lock_acquire` | `key`, `kind`, `lock` | lock acquired (`waited`), lock wait timed out (`waited`) |
//! | `lock_renew` | `leases` | renewal refused, failed or unanswered; lock lost when refused |
//! | `lock_release` | `key`, `fence` | lock released; a fair lock handed over to the next in line |
//! | `lock_handover` (Redis, inside `lock_release`) | | lock handed over to a local waiter (`fence`) |
//!
//! A lease that runs out unrenewed is a `lock lost` warning from the watchdog, and a
//! hold's end (`held`) an event where its guard ends it. The metrics:
//!
//! | metric | type | when |
//! |---|---|---|
//! | `lock_acquisitions_total` | counter | a lock is taken (not re-entered) |
//! | `lock_timeouts_total` | counter | a wait ends with the lock still held (not a `try_lock`) |
//! | `lock_losses_total` | counter | a lease runs out, or a session ends, under its guard |
//! | `lock_wait_seconds` | histogram | how long taking a lock took |
//! | `lock_hold_seconds` | histogram | from taking a lock to its release (a hold lost is counted as a loss instead) |
//!
//! Each has the labels `kind` (`exclusive`, `fair`, `read`, `write`, `semaphore`) and
//! `lock`: the lock's [label](crate::LockOptions::label), the template its key is made from
//! (`balance:{id}`), or `-` without one. Never the key itself, so that the number of
//! series stays bounded.

use std::time::Duration;

use crate::{LockKey, LockKind};

/// The `lock` label of a lock without one.
#[cfg(feature = "metrics")]
const UNLABELLED: &str = "-";

/// A lock `key` was taken after waiting `waited`.
pub(crate) fn acquired(
    key: &LockKey,
    kind: LockKind,
    label: Option<&'static str>,
    waited: Duration,
) {
    tracing::debug!(key = %key, ?kind, lock = label, ?waited, "lock acquired");
    #[cfg(feature = "metrics")]
    {
        let labels = labels(kind, label);
        metrics::counter!("lock_acquisitions_total", &labels).increment(1);
        metrics::histogram!("lock_wait_seconds", &labels).record(waited.as_secs_f64());
    }
}

/// A wait for `key` ended after `waited` with the lock still held.
pub(crate) fn timed_out(
    key: &LockKey,
    kind: LockKind,
    label: Option<&'static str>,
    waited: Duration,
) {
    tracing::debug!(key = %key, ?kind, lock = label, ?waited, "lock wait timed out");
    #[cfg(feature = "metrics")]
    metrics::counter!("lock_timeouts_total", &labels(kind, label)).increment(1);
}

/// The hold of `key` was lost.
pub(crate) fn lost(key: &LockKey, kind: LockKind, label: Option<&'static str>, fence: u64) {
    tracing::warn!(key = %key, ?kind, lock = label, fence, "lock lost: its lease ran out before it could be renewed, or its session ended");
    #[cfg(feature = "metrics")]
    metrics::counter!("lock_losses_total", &labels(kind, label)).increment(1);
}

/// The hold of `key` ends after `held`: its release is on its way.
pub(crate) fn released(key: &LockKey, kind: LockKind, label: Option<&'static str>, held: Duration) {
    tracing::debug!(key = %key, ?kind, lock = label, ?held, "lock hold ended");
    #[cfg(feature = "metrics")]
    metrics::histogram!("lock_hold_seconds", &labels(kind, label)).record(held.as_secs_f64());
}

#[cfg(feature = "metrics")]
fn labels(kind: LockKind, label: Option<&'static str>) -> [(&'static str, &'static str); 2] {
    let kind = match kind {
        LockKind::Exclusive => "exclusive",
        LockKind::Fair => "fair",
        LockKind::Read => "read",
        LockKind::Write => "write",
        LockKind::Semaphore { .. } => "semaphore",
    };
    [("kind", kind), ("lock", label.unwrap_or(UNLABELLED))]
}
