//! One attempt at a lock on every master at once, and what becomes of the grants of an
//! attempt that falls short or is cut short.
//!
//! Every master's ask runs as a task of its own, on RedLock's background tracker (so
//! [`Store::flush`](crate::backend::Store::flush) waits for it), until the master answers
//! or its share of the lease runs out: an attempt that goes on once a quorum granted the
//! lock does not take the other masters' asks with it, so each of them is sent, and a
//! master that grants the lock later keeps it for the guard to renew and release. Once
//! the attempt is over, an ask that answers late gives back what its master may hold,
//! unless the attempt handed the lock over.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio::time::error::Elapsed;

use super::master::Master;
use super::quorum::quorum_error;
use super::{OwnedHold, PER_MASTER, RedLock, fence};
use crate::backend::store::{Acquire, Hold};
use crate::backend::wait::Attempt;
use crate::{LockError, LockKey};

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

impl Answer {
    /// What a master's attempt at lock `key` came to, within its patience.
    fn of(outcome: Result<Result<Attempt, LockError>, Elapsed>, key: &LockKey) -> Self {
        match outcome {
            Ok(Ok(Attempt::Acquired { fence, until })) => Answer::Granted { fence, until },
            Ok(Ok(Attempt::Held { ttl, .. })) => Answer::Held(ttl),
            Ok(Err(e)) if e.is_backend() => {
                tracing::debug!(key = %key, error = %e, "a redlock master failed");
                Answer::None
            }
            // Refused for what was asked (a semaphore of another count): every master
            // refuses it alike.
            Ok(Err(e)) => Answer::Refused(e),
            Err(_) => Answer::None,
        }
    }

    /// The master may hold the caller's token: it granted it, or its answer never came.
    fn may_hold(&self) -> Option<u64> {
        match self {
            Answer::Granted { fence, .. } => Some(*fence),
            Answer::None => Some(0),
            Answer::Held(_) | Answer::Refused(_) => None,
        }
    }
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

/// What becomes of a grant that lands once its attempt is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// The attempt handed the lock over: a late grant is the guard's to renew and
    /// release.
    Kept,
    /// The attempt fell short or was cut short: a late grant is given back.
    GivenBack,
}

/// What every ask of one attempt shares.
struct Asking<M> {
    masters: Arc<[M]>,
    request: Acquire,
    waits_for: Duration,
    seed: u64,
    /// Set once the attempt is over.
    fate: OnceLock<Fate>,
}

impl<M: Master> Asking<M> {
    /// Asks master `i`, within its share of the lease, and hands its answer to the
    /// attempt; if the attempt is over by then, gives back what the master may hold,
    /// unless the attempt kept late grants.
    async fn ask(self: Arc<Self>, i: usize, answers: mpsc::UnboundedSender<(usize, Answer)>) {
        let patience = self.request.lease / PER_MASTER;
        let attempt = self.masters[i].attempt_seeded(&self.request, self.waits_for, self.seed);
        let answer = Answer::of(
            tokio::time::timeout(patience, attempt).await,
            &self.request.key,
        );
        let may_hold = answer.may_hold();
        if answers.send((i, answer)).is_ok() || self.fate.get() == Some(&Fate::Kept) {
            return;
        }
        if let Some(fence) = may_hold {
            let hold = OwnedHold::of(&self.request, fence);
            if let Err(e) = self.masters[i].release(&hold.as_hold()).await {
                tracing::warn!(key = %hold.key, error = %e, "background release failed; the lease will expire");
            }
        }
    }
}

/// The asks of one attempt: the answers still to come, and the masters whose answers
/// came and that may hold the caller's token. Dropped before it hands the lock over or
/// gives it back (the attempt cut short), it gives back, in the background, whatever
/// its masters may hold.
struct Asks<'a, M: Master> {
    store: &'a RedLock<M>,
    asking: Arc<Asking<M>>,
    answers: mpsc::UnboundedReceiver<(usize, Answer)>,
    /// Masters that answered and may hold the caller's token, each with the token it
    /// drew (0 where unknown).
    may_hold: Vec<(usize, u64)>,
}

impl<'a, M: Master> Asks<'a, M> {
    /// Asks every master that `tried` still asks, each in a task of its own.
    fn send(store: &'a RedLock<M>, request: &Acquire, waits_for: Duration, tried: &Tried) -> Self {
        let asking = Arc::new(Asking {
            masters: store.masters.clone(),
            request: request.clone(),
            waits_for,
            seed: fence::seed(),
            fate: OnceLock::new(),
        });
        let (sender, answers) = mpsc::unbounded_channel();
        for i in (0..store.masters.len()).filter(|&i| tried.asks(i)) {
            store
                .background
                .spawn(asking.clone().ask(i, sender.clone()));
        }
        Self {
            store,
            asking,
            answers,
            may_hold: Vec::new(),
        }
    }

    /// The next answer; `None` once every master asked has answered.
    async fn next(&mut self) -> Option<(usize, Answer)> {
        let (i, answer) = self.answers.recv().await?;
        if let Some(fence) = answer.may_hold() {
            self.may_hold.push((i, fence));
        }
        Some((i, answer))
    }

    /// The attempt handed the lock over: a grant still to land is the guard's to renew
    /// and release.
    fn keep_late_grants(mut self) {
        let _ = self.asking.fate.set(Fate::Kept);
        self.may_hold.clear();
    }

    /// Gives back, on every master in `granted`, the hold an attempt that fell short took
    /// there, each within its share of the lease, and in the background on the masters
    /// that did not answer (their grant may land later). A master that does not answer in
    /// time is not asked again during this acquisition (its release may land later).
    async fn give_back(mut self, granted: &[(usize, u64)], tried: &mut Tried) {
        let request = &self.asking.request;
        let patience = request.lease / PER_MASTER;
        let masters = &self.store.masters;
        let releases = granted.iter().map(|&(i, fence)| async move {
            let hold = Hold {
                key: &request.key,
                token: &request.token,
                kind: request.kind,
                fence,
                holder_id: request.holder_id.as_deref(),
            };
            let released = tokio::time::timeout(patience, masters[i].release(&hold)).await;
            (i, released.is_ok())
        });
        for (i, answered) in join_all(releases).await {
            if !answered {
                tried.stop_asking(i);
            }
        }
        // Given back, or not to be asked again: the others go as the asks drop.
        self.may_hold
            .retain(|(i, _)| !granted.iter().any(|(g, _)| g == i));
    }
}

impl<M: Master> Drop for Asks<'_, M> {
    fn drop(&mut self) {
        let fate = *self.asking.fate.get_or_init(|| Fate::GivenBack);
        // No answer is sent from here on: those sent already are given back here, the
        // others by their asks.
        self.answers.close();
        if fate == Fate::Kept {
            return;
        }
        while let Ok((i, answer)) = self.answers.try_recv() {
            if let Some(fence) = answer.may_hold() {
                self.may_hold.push((i, fence));
            }
        }
        for &(i, fence) in &self.may_hold {
            let hold = OwnedHold::of(&self.asking.request, fence);
            self.store.release_detached(i, hold);
        }
    }
}

impl<M: Master> RedLock<M> {
    /// One attempt (see [`ClientWait::attempt`](crate::backend::wait::ClientWait::attempt)):
    /// every master that `tried` still asks is asked at once, each within its share of
    /// the lease.
    pub(super) async fn attempt_on_quorum(
        &self,
        request: &Acquire,
        waits_for: Duration,
        tried: &mut Tried,
    ) -> Result<Attempt, LockError> {
        let mut asks = Asks::send(self, request, waits_for, tried);
        let needed = self.quorum(request.kind);
        let mut tally = Tally::default();
        // Until a quorum granted: the others' answers are not waited for. Their asks go
        // on; a late grant holds the caller's token, and the guard renews and releases it
        // on every master.
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
            asks.keep_late_grants();
            return Ok(Attempt::Acquired {
                fence: self.fence(request.kind, &tally.granted),
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
        asks.give_back(&granted, tried).await;
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
}
