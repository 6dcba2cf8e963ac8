//! How a Redis store waits: the hooks of lock-core's client-side wait (one attempt, a
//! line joined and listened to, how long to poll, a line left), and what a waiter that
//! leaves gives back in Redis.

use std::future::Future;
use std::time::Duration;

use super::RedisStore;
use super::asking::Asking;
use super::hub::Listening;
use super::keys::RedisKey;
use crate::LockError;
use crate::LockKind;
use crate::backend::release::Release;
use crate::backend::store::Acquire;
use crate::backend::wait::handover::{Handover, Leftover};
use crate::backend::wait::line::{Edge, Line, WhenEmpty};
use crate::backend::wait::{Attempt, ClientWait, Joined, Left};

impl ClientWait for RedisStore {
    type Listening = Listening;
    type Tried = ();

    async fn attempt<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
        _tried: &'a mut (),
    ) -> Result<Attempt, LockError> {
        self.attempt_asking(request, waits_for, Asking::ALONE).await
    }

    fn join(&self, request: &Acquire) -> Joined<Listening> {
        let key = self.key(&request.key);
        let Some(hub) = &self.0.hub else {
            return Joined {
                line: self.0.lines.join(key.shared(), |_| {}),
                already_listening: false,
            };
        };
        hub.ensure_running();
        let mut joined_others = false;
        let line = self.0.lines.join(key.shared(), |edge| match edge {
            Edge::Changed => hub.subscribe(key.shared().clone()),
            Edge::Unchanged => joined_others = true,
        });
        let already_listening = joined_others && line.listening.is_ready();
        Joined {
            line,
            already_listening,
        }
    }

    fn handover(&self, kind: LockKind) -> Handover {
        if kind == LockKind::Exclusive && self.0.local_handovers > 0 {
            Handover::Waiting { may_hold: false }
        } else {
            Handover::Off
        }
    }

    fn until_listening(
        &self,
        line: &Line<Listening>,
        limit: Duration,
    ) -> impl Future<Output = ()> + Send {
        let hub = self.0.hub.is_some();
        async move {
            if hub {
                let _ = tokio::time::timeout(limit, line.listening.until_ready()).await;
            }
        }
    }

    /// Until the holder's lease runs out, but never longer than a bounded, jittered poll
    /// (wake-ups can be missed while the pub/sub connection is down), and with a short
    /// backoff while wake-ups are not being delivered at all.
    fn poll_interval(
        &self,
        holder_ttl: Option<Duration>,
        line: &Line<Listening>,
        failed: u32,
    ) -> Duration {
        const GRACE: Duration = Duration::from_millis(1);
        let cap = if line.listening.is_ready() {
            self.0.safety_poll.mul_f64(0.75 + fastrand::f64() * 0.25)
        } else {
            // No wake-ups: back off from 5 ms to the safety poll, jittered.
            let step = Duration::from_millis(5) * 2u32.pow(failed.min(10));
            step.min(self.0.safety_poll)
                .mul_f64(0.5 + fastrand::f64() * 0.5)
        };
        holder_ttl.map_or(cap, |ttl| (ttl + GRACE).min(cap))
    }

    fn left(&self, left: Left<'_, Listening>) {
        let key = RedisKey::from_redis(left.line.key());
        self.leave_store_line(&key, &left);
        let Some(hub) = &self.0.hub else {
            self.0.lines.leave(left.line, WhenEmpty::Remove, |_| {});
            return;
        };
        let mut last = false;
        self.0.lines.leave(left.line, WhenEmpty::Linger, |edge| {
            if edge == Edge::Changed {
                hub.idle(key.shared().clone());
                last = true;
            }
        });
        if last && !left.held {
            // Nobody here waits any more: take this `Locker` out of those a release wakes.
            self.stop_waiting_detached(&key);
        }
    }
}

impl RedisStore {
    /// What a waiter that left its line leaves behind in Redis, given back in the
    /// background: its place among a fair lock's line or a write lock's waiting writers,
    /// and a lock handed over to it that it never took up.
    pub(super) fn leave_store_line(&self, key: &RedisKey, left: &Left<'_, Listening>) {
        if !left.held {
            match left.kind {
                LockKind::Fair => self.release_detached(key, left.token, Release::Leave),
                // Out of the waiting writers, so that the readers behind it may go in.
                LockKind::Write => {
                    self.release_detached(key, left.token, Release::Holder(LockKind::Write))
                }
                _ => {}
            }
        }
        if left.leftover == Leftover::Release {
            // Handed over to this waiter, which gave up before taking it: free it.
            self.release_detached(key, left.token, Release::Holder(LockKind::Exclusive));
        }
    }

    /// Takes this `Locker` out of those a release of `key` wakes, in the background: its
    /// last waiter gave up. A failure is only logged: the entry runs out.
    pub(super) fn stop_waiting_detached(&self, key: &RedisKey) {
        let (store, key) = (self.clone(), key.clone());
        self.spawn("leave the waiting lockers", async move {
            let removed: Result<i64, LockError> = store
                .0.connection
                .run("leave the waiting lockers", |mut conn| {
                    let mut zrem = redis::cmd("ZREM");
                    zrem.arg(key.lockers()).arg(store.0.channels.id());
                    async move { zrem.query_async(&mut conn).await }
                })
                .await;
            if let Err(e) = removed {
                tracing::debug!(key = %key, error = %e, "could not leave the waiting lockers; waiters poll");
            }
        });
    }
}
