//! Where locks live: Redis, or this process's memory. An enum rather than a trait object,
//! so the hot path has no boxing and no dynamic dispatch.

use std::future::ready;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::Either;

use crate::LockError;
use crate::waiters::{Grant, OnGiveUp, Slot, Waiter};

pub(crate) mod memory;
pub(crate) mod redis;

/// How long a fair waiter's place in line lasts unless it asks again (it does, at least
/// every safety poll), so that a waiter that died is skipped after at most this.
pub(crate) const PLACE_IN_LINE: Duration = Duration::from_secs(5);

/// How an attempt asks for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Whoever asks first once the lock is free gets it. `waits`: the caller waits if it
    /// is held (so its process is to be woken when it is freed).
    Plain { waits: bool },
    /// In line, first come first served; the caller keeps its place for `place` (zero:
    /// one attempt, without queueing).
    Fair { place: Duration },
}

impl Mode {
    pub(crate) fn is_fair(self) -> bool {
        matches!(self, Self::Fair { .. })
    }
}

/// The outcome of one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Taken, with this fencing token. `left` is set when the lock had been handed over
    /// to the caller earlier: the lease it still has; otherwise a whole lease runs from
    /// when the attempt was sent.
    Acquired { fence: u64, left: Option<Duration> },
    /// Held by someone else, whose lease runs this much longer (when known). A fair
    /// attempt also reads the backend's clock, in microseconds, against which a later
    /// hand-over is reckoned.
    Held {
        ttl: Option<Duration>,
        clock_us: Option<u64>,
    },
}

#[derive(Debug)]
pub(crate) enum Backend {
    Redis(Arc<redis::RedisBackend>),
    Memory(memory::MemoryBackend),
}

impl Backend {
    /// One attempt at lock `name`. In memory it is over before the future is polled;
    /// the future holds only what a Redis attempt needs after it is sent.
    pub(crate) fn try_acquire<'a>(
        &'a self,
        name: &str,
        token: &'a str,
        lease: Duration,
        mode: Mode,
    ) -> impl Future<Output = Result<Attempt, LockError>> + Send + 'a {
        match self {
            Self::Redis(r) => Either::Left(r.try_acquire(name, token, lease, mode)),
            Self::Memory(m) => Either::Right(ready(Ok(m.try_acquire(name, token, lease, mode)))),
        }
    }

    /// Releases if `token` owns `name` (a fair lock goes to the next in line, a plain one
    /// maybe to a local waiter); `Ok(false)` when it did not.
    pub(crate) async fn release(
        &self,
        name: &str,
        token: &str,
        fair: bool,
    ) -> Result<bool, LockError> {
        match self {
            Self::Redis(r) => r.release(name, token, fair).await,
            Self::Memory(m) => Ok(m.release(name, token, fair)),
        }
    }

    /// Releases without waiting for the outcome (a guard was dropped).
    pub(crate) fn release_detached(&self, name: &str, token: &str, fair: bool) {
        match self {
            Self::Redis(r) => r.release_detached(name, token, fair),
            Self::Memory(m) => {
                m.release(name, token, fair);
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

    /// Starts waiting for `name` as `token`, to hold it for `lease`: the returned ticket
    /// wakes on its releases and, for a `fair` waiter, when the lock is handed over to it;
    /// a plain waiter on Redis can also be passed the lock by a release of this `Locker`.
    pub(crate) fn wait_for(
        &self,
        name: &str,
        token: &Arc<str>,
        lease: Duration,
        fair: bool,
    ) -> WaitTicket<'_> {
        let (slot, joined_subscribed) = match self {
            Self::Redis(r) => r.join(name),
            Self::Memory(m) => (m.waiters.join(&name.into(), |_| {}), false),
        };
        let passable = !fair && matches!(self, Self::Redis(r) if r.passes_locally());
        let waiter = slot.join_line(token.clone(), lease, passable);
        if fair {
            slot.expect_grant(&waiter);
        }
        WaitTicket {
            backend: self,
            slot,
            waiter,
            fair,
            joined_subscribed,
            failed: 0,
            held: false,
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
                    let step = Duration::from_millis(5) * 2u32.pow(ticket.failed.min(8));
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
    pub(crate) slot: Arc<Slot>,
    /// Its place in the lock's line, where wake-ups, hand-overs and passes reach it.
    waiter: Arc<Waiter>,
    /// A fair waiter, to be handed the lock by any process's release. One that leaves
    /// without the lock leaves the line, and passes the lock on should it have been
    /// handed over meanwhile.
    fair: bool,
    /// It joined a lock whose release messages were already being delivered (to other
    /// local waiters, or to a subscription lingering after the last one left). Whoever
    /// subscribed tried again once subscribed, so every release since reached this
    /// `Locker`: one since this waiter's failed attempt has woken a waiter or left a
    /// wake-up (or, for a fair waiter, its hand-over) for the next to wait. It need not
    /// try again before waiting: in steady contention that saves one command per
    /// acquisition. Cleared by the wait loop's first turn.
    pub(crate) joined_subscribed: bool,
    /// Its attempts that found the lock held.
    pub(crate) failed: u32,
    /// It got the lock: leaving is not giving up.
    held: bool,
}

impl WaitTicket<'_> {
    /// The hand-over to this fair waiter, if it came.
    pub(crate) fn take_grant(&self) -> Option<Grant> {
        self.waiter.take_grant()
    }

    /// The lock passed to this plain waiter, if it was: its fencing token, and the
    /// earliest its lease can have started.
    pub(crate) fn take_pass(&self) -> Option<(u64, tokio::time::Instant)> {
        self.waiter.take_pass()
    }

    /// The waiter took the lock: leaving is not giving up.
    pub(crate) fn succeeded(&mut self) {
        self.held = true;
        self.waiter.done();
    }

    /// Ready when a release may have freed the lock, or it may have been handed over or
    /// passed to this waiter, since the last time it was. One that came between two
    /// waits is kept, so none is missed.
    pub(crate) fn poll_signal(&self, cx: &mut Context<'_>) -> Poll<()> {
        let signal = self.waiter.poll_signal(cx);
        if signal.is_ready() {
            tracing::trace!(key = %self.slot.key(), "waiter woken");
        }
        signal
    }

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
        let key = self.slot.key();
        let token = &self.waiter.token;
        let held = self.held;
        if self.fair {
            self.slot.forget_grant(token);
            if !held {
                match self.backend {
                    Backend::Redis(r) => r.leave_key_detached(key, token),
                    Backend::Memory(m) => {
                        m.leave(key, token);
                    }
                }
            }
        }
        if self.slot.leave_line(&self.waiter) == OnGiveUp::GiveBack
            && let Backend::Redis(r) = self.backend
        {
            // Passed to this waiter, which gave up before taking it: free it.
            r.release_key_detached(key, token);
        }
        match self.backend {
            Backend::Redis(r) => r.leave(&self.slot, !held),
            Backend::Memory(m) => m.waiters.leave(&self.slot, false, |_| {}),
        }
    }
}
