//! Where locks live: Redis, or this process's memory. An enum rather than a trait object,
//! so the hot path has no boxing and no dynamic dispatch.

use std::sync::Arc;
use std::time::Duration;

use crate::LockError;
use crate::waiters::Slot;

pub(crate) mod memory;
pub(crate) mod redis;

/// The outcome of one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Taken, with this fencing token.
    Acquired { fence: u64 },
    /// Held by someone else, whose lease runs this much longer (when known).
    Held { ttl: Option<Duration> },
}

#[derive(Debug)]
pub(crate) enum Backend {
    Redis(Arc<redis::RedisBackend>),
    Memory(memory::MemoryBackend),
}

impl Backend {
    pub(crate) async fn try_acquire(
        &self,
        name: &Arc<str>,
        token: &str,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        match self {
            Self::Redis(r) => r.try_acquire(name, token, lease).await,
            Self::Memory(m) => Ok(m.try_acquire(name, token, lease)),
        }
    }

    /// Releases if `token` owns `name`; `Ok(false)` when it did not.
    pub(crate) async fn release(&self, name: &str, token: &str) -> Result<bool, LockError> {
        match self {
            Self::Redis(r) => r.release(name, token).await,
            Self::Memory(m) => Ok(m.release(name, token)),
        }
    }

    /// Releases without waiting for the outcome (a guard was dropped).
    pub(crate) fn release_detached(&self, name: &str, token: &str) {
        match self {
            Self::Redis(r) => r.release_detached(name, token),
            Self::Memory(m) => {
                m.release(name, token);
            }
        }
    }

    /// Waits until releases started in the background have been answered.
    pub(crate) async fn flush(&self) {
        match self {
            Self::Redis(r) => r.flush().await,
            // in memory, a release is done before the guard's drop returns
            Self::Memory(_) => {}
        }
    }

    pub(crate) async fn extend(
        &self,
        name: &str,
        token: &str,
        lease: Duration,
    ) -> Result<bool, LockError> {
        match self {
            Self::Redis(r) => r.extend(name, token, lease).await,
            Self::Memory(m) => Ok(m.extend(name, token, lease)),
        }
    }

    pub(crate) async fn is_held(&self, name: &str, token: &str) -> Result<bool, LockError> {
        match self {
            Self::Redis(r) => r.is_held(name, token).await,
            Self::Memory(m) => Ok(m.is_held(name, token)),
        }
    }

    pub(crate) async fn renew_many(
        &self,
        items: &[(&str, &str, Duration)],
    ) -> Result<Vec<bool>, LockError> {
        match self {
            Self::Redis(r) => r.renew_many(items).await,
            Self::Memory(m) => Ok(items
                .iter()
                .map(|(name, token, lease)| m.extend(name, token, *lease))
                .collect()),
        }
    }

    /// Starts waiting for `name`: the returned ticket wakes on its releases.
    pub(crate) fn wait_for(&self, name: &Arc<str>) -> WaitTicket<'_> {
        let (key, slot, joined_subscribed) = match self {
            Self::Redis(r) => r.join(name),
            Self::Memory(m) => (name.clone(), m.waiters.join(name, |_| {}), false),
        };
        WaitTicket {
            backend: self,
            key,
            slot,
            joined_subscribed,
        }
    }

    /// How long a waiter sleeps before trying again when no wake-up comes: until the
    /// holder's lease runs out, but never longer than a bounded, jittered poll (pub/sub
    /// messages can be missed while its connection is down), and with a short backoff
    /// when wake-ups are not being delivered at all.
    pub(crate) fn poll_interval(
        &self,
        holder_ttl: Option<Duration>,
        ticket: &WaitTicket<'_>,
        failed_attempts: u32,
    ) -> Duration {
        const SAFETY_POLL: Duration = Duration::from_secs(1);
        const GRACE: Duration = Duration::from_millis(1);
        match self {
            // The in-memory holder's expiry is exact and releases always wake.
            Self::Memory(_) => holder_ttl.unwrap_or(SAFETY_POLL),
            Self::Redis(_) => {
                let cap = if ticket.slot.is_ready() {
                    SAFETY_POLL.mul_f64(0.75 + fastrand::f64() * 0.25)
                } else {
                    // No wake-ups: back off from 5 ms to the safety poll, jittered.
                    let step = Duration::from_millis(5) * 2u32.pow(failed_attempts.min(8));
                    step.min(SAFETY_POLL).mul_f64(0.5 + fastrand::f64() * 0.5)
                };
                holder_ttl.map_or(cap, |ttl| (ttl + GRACE).min(cap))
            }
        }
    }
}

/// A registered waiter; unregisters on drop.
#[derive(Debug)]
pub(crate) struct WaitTicket<'a> {
    backend: &'a Backend,
    key: Arc<str>,
    pub(crate) slot: Arc<Slot>,
    /// It joined other local waiters of a lock whose release messages were already being
    /// delivered. A release since this waiter's failed attempt has then woken one of
    /// them (or left a wake-up for the next to wait), so it need not try again before
    /// waiting: in steady contention that saves one command per acquisition.
    pub(crate) joined_subscribed: bool,
}

impl WaitTicket<'_> {
    /// Waits until release messages are delivered, for at most `limit`.
    pub(crate) async fn until_ready(&self, limit: Duration) {
        match self.backend {
            Backend::Memory(_) => {}
            Backend::Redis(r) if r.has_pubsub() => {
                let _ = tokio::time::timeout(limit, self.slot.until_ready()).await;
            }
            Backend::Redis(_) => {}
        }
    }
}

impl Drop for WaitTicket<'_> {
    fn drop(&mut self) {
        match self.backend {
            Backend::Redis(r) => r.leave(&self.key, &self.slot),
            Backend::Memory(m) => m.waiters.leave(&self.key, &self.slot, |_| {}),
        }
    }
}
