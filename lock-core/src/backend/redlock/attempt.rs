//! One attempt at a lock on every master at once, and what becomes of the grants of an
//! attempt that falls short or is cut short.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use super::master::Master;
use super::quorum::quorum_error;
use super::{OwnedHold, PER_MASTER, RedLock, fence};
use crate::LockError;
use crate::backend::store::{Acquire, Hold};
use crate::wait::Attempt;

/// The masters that an acquisition no longer asks: their answer to an earlier attempt
/// was cut short, and the release that followed may land after a new grant.
#[derive(Debug, Default)]
pub(crate) struct Tried {
    not_asked: Vec<usize>,
}

impl Tried {
    fn stop_asking(&mut self, master: usize) {
        if !self.not_asked.contains(&master) {
            self.not_asked.push(master);
        }
    }

    fn asks(&self, master: usize) -> bool {
        !self.not_asked.contains(&master)
    }
}

/// One master's answer to an attempt.
enum Answer {
    Granted {
        fence: u64,
        until: Instant,
    },
    Held(Option<Duration>),
    /// It refused what was asked.
    Refused(LockError),
    /// It failed, or did not answer in time.
    None,
}

/// The answers to an attempt so far.
#[derive(Default)]
struct Tally {
    /// The masters that granted it, each with the token it drew.
    granted: Vec<(usize, u64)>,
    /// When each grant runs out.
    untils: Vec<Instant>,
    /// The shortest lease left among the holders in the way, where known.
    holder_ttl: Option<Duration>,
    /// How many masters answered, granting it or not.
    answered: usize,
    refused: Option<LockError>,
}

impl Tally {
    fn add(&mut self, master: usize, answer: Answer, tried: &mut Tried) {
        match answer {
            Answer::Granted { fence, until } => {
                self.granted.push((master, fence));
                self.untils.push(until);
                self.answered += 1;
            }
            Answer::Held(ttl) => {
                self.holder_ttl = match (self.holder_ttl, ttl) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                self.answered += 1;
            }
            Answer::Refused(e) => self.refused = Some(e),
            Answer::None => tried.stop_asking(master),
        }
    }
}

/// The masters that may hold the caller's token during an attempt: each from when it is
/// asked until it answers that it does not. Released in the background should the attempt
/// be cut short before it hands the lock over or gives it back.
struct Rollback<'a, M: Master> {
    store: &'a RedLock<M>,
    request: &'a Acquire,
    may_hold: Mutex<Vec<usize>>,
}

impl<'a, M: Master> Rollback<'a, M> {
    fn new(store: &'a RedLock<M>, request: &'a Acquire) -> Self {
        Self {
            store,
            request,
            may_hold: Mutex::default(),
        }
    }

    fn may_hold(&self) -> MutexGuard<'_, Vec<usize>> {
        // Each update is one push, removal or clear: a poisoned list is still whole.
        self.may_hold.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Master `i` is asked.
    fn asked(&self, i: usize) {
        self.may_hold().push(i);
    }

    /// Master `i` answered that it does not hold the caller's token.
    fn forget(&self, i: usize) {
        self.may_hold().retain(|&m| m != i);
    }

    /// Releases in the background every master that may hold the caller's token but
    /// those of `granted`, which the caller gives back itself.
    fn release_all_but(&self, granted: &[(usize, u64)]) {
        self.may_hold().retain(|&i| {
            let kept = granted.iter().any(|&(g, _)| g == i);
            if !kept {
                self.release_detached(i);
            }
            kept
        });
    }

    /// The attempt handed the lock over, or gave it back: nothing to release. A grant of
    /// a lock handed over that is still to land is the guard's to renew and release.
    fn disarm(&self) {
        self.may_hold().clear();
    }

    fn release_detached(&self, i: usize) {
        self.store
            .release_detached(i, OwnedHold::of(self.request, 0));
    }
}

impl<M: Master> Drop for Rollback<'_, M> {
    fn drop(&mut self) {
        for &i in self.may_hold().iter() {
            self.release_detached(i);
        }
    }
}

impl<M: Master> RedLock<M> {
    /// One attempt (see [`ClientWait::attempt`](crate::wait::ClientWait::attempt)):
    /// every master that `tried` still asks is asked at once, each within its share of
    /// the lease.
    pub(super) async fn attempt_on_quorum(
        &self,
        request: &Acquire,
        waits_for: Duration,
        tried: &mut Tried,
    ) -> Result<Attempt, LockError> {
        let patience = request.lease / PER_MASTER;
        let seed = fence::seed();
        let rollback = Rollback::new(self, request);
        let asks = self.masters.iter().enumerate().map(|(i, master)| {
            let asked = tried.asks(i);
            let rollback = &rollback;
            async move {
                if !asked {
                    return (i, Answer::None);
                }
                rollback.asked(i);
                let attempt = master.attempt_seeded(request, waits_for, seed);
                let answer = tokio::time::timeout(patience, attempt).await;
                let answer = match answer {
                    Ok(Ok(Attempt::Acquired { fence, until })) => Answer::Granted { fence, until },
                    Ok(Ok(Attempt::Held { ttl, .. })) => {
                        rollback.forget(i);
                        Answer::Held(ttl)
                    }
                    Ok(Err(e)) if e.is_backend() => {
                        tracing::debug!(key = %request.key, error = %e, "a redlock master failed");
                        Answer::None
                    }
                    // Refused for what was asked (a semaphore of another count): every
                    // master refuses it alike.
                    Ok(Err(e)) => {
                        rollback.forget(i);
                        Answer::Refused(e)
                    }
                    Err(_) => Answer::None,
                };
                (i, answer)
            }
        });
        let mut asks: FuturesUnordered<_> = asks.collect();
        let needed = self.quorum(request.kind);
        let mut tally = Tally::default();
        // Until a quorum granted: the others' answers are not waited for. A late grant
        // holds the caller's token, and the guard renews and releases on every master.
        while tally.granted.len() < needed
            && let Some((i, answer)) = asks.next().await
        {
            tally.add(i, answer, tried);
        }
        if tally.refused.is_none()
            && let Some(until) = self.valid_until(request.kind, request.lease, &mut tally.untils)
            && self.fence_raised(request, &tally.granted).await
            && until > Instant::now()
        {
            rollback.disarm();
            return Ok(Attempt::Acquired {
                fence: self.fence(&tally.granted),
                until,
            });
        }
        // Every answer, so that every grant is given back.
        while let Some((i, answer)) = asks.next().await {
            tally.add(i, answer, tried);
        }
        let Tally {
            granted,
            holder_ttl,
            answered,
            refused,
            ..
        } = tally;
        drop(asks);
        self.roll_back(request, &granted, rollback, tried).await;
        if let Some(e) = refused {
            return Err(e);
        }
        let can_answer = self.masters.len() - tried.not_asked.len();
        if answered < needed || can_answer < needed {
            return Err(quorum_error(&request.key, granted.len(), needed));
        }
        Ok(Attempt::Held {
            ttl: holder_ttl,
            clock: None,
        })
    }

    /// Gives back, on every master in `granted`, the hold an attempt that fell short took
    /// there, each within its share of the lease, and in the background on the masters
    /// that did not answer (their grant may land later). A master that does not answer in
    /// time is not asked again during this acquisition (its release may land later).
    async fn roll_back(
        &self,
        request: &Acquire,
        granted: &[(usize, u64)],
        rollback: Rollback<'_, M>,
        tried: &mut Tried,
    ) {
        rollback.release_all_but(granted);
        let patience = request.lease / PER_MASTER;
        let releases = granted.iter().map(|&(i, fence)| async move {
            let hold = Hold {
                key: &request.key,
                token: &request.token,
                kind: request.kind,
                fence,
            };
            let released = tokio::time::timeout(patience, self.masters[i].release(&hold)).await;
            (i, released.is_ok())
        });
        for (i, answered) in join_all(releases).await {
            if !answered {
                tried.stop_asking(i);
            }
        }
        rollback.disarm();
    }
}
