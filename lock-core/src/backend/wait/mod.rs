//! Waiting on the client side, for the stores that wait that way (Redis, memory): one
//! attempt; if the lock is held, a place in the local [line], then attempts as wake-ups
//! come (or a poll falls due) until the lock is taken, handed over, or the deadline
//! passes.
//!
//! - [`line`]: the local wait line (join, wake one, wake all, wait until a deadline,
//!   leave).
//! - [`handover`]: a release that gives the lock straight to a waiter: the fair lock's
//!   hand-over to the next in line, the exclusive lock's local hand-over.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::store::{Acquire, Acquired, Outcome};
use crate::{LockError, LockKind};

// Hand-overs and lingering lines serve Redis's stores only.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) mod handover;
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) mod line;

use handover::{Handover, Leftover};
use line::{Line, Waiter};

/// A store on which lock-core waits on the client side: it makes single attempts, and
/// wakes this process's waiters when a lock may have been freed, or hands it to one.
pub(crate) trait ClientWait: Send + Sync {
    /// What a lock's line carries for this store besides its waiters (Redis: whether its
    /// wake-ups are being delivered).
    type Listening: Default + Send + Sync;

    /// What the store remembers of one acquisition's earlier attempts (RedLock: the
    /// masters it stopped asking).
    type Tried: Default + Send;

    /// One attempt at the lock; its caller waits `waits_for` more if it is held (zero:
    /// this is its only attempt). `tried` is what the acquisition's earlier attempts left.
    fn attempt<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
        tried: &'a mut Self::Tried,
    ) -> impl Future<Output = Result<Attempt, LockError>> + Send + 'a;

    /// Joins the lock's line, and makes sure its wake-ups are delivered. `Joined::already_listening`
    /// says they were being delivered already.
    fn join(&self, request: &Acquire) -> Joined<Self::Listening>;

    /// How a waiter for `kind` can be handed the lock: [`Handover::Waiting`] if by a local
    /// release, else [`Handover::Off`].
    fn handover(&self, kind: LockKind) -> Handover;

    /// Waits, at most `limit`, until wake-ups for `line` are being delivered.
    fn until_listening(
        &self,
        line: &Line<Self::Listening>,
        limit: Duration,
    ) -> impl Future<Output = ()> + Send;

    /// How long to sleep before trying again when no wake-up comes, after `failed`
    /// attempts that found the lock held by a holder with `holder_ttl` left.
    fn poll_interval(
        &self,
        holder_ttl: Option<Duration>,
        line: &Line<Self::Listening>,
        failed: u32,
    ) -> Duration;

    /// A waiter left the line: the store gives up its place in the store's own line (a
    /// fair waiter without the lock), releases a lock handed over to it and never taken
    /// up, and stops listening for the lock once nobody here waits.
    fn left(&self, left: Left<'_, Self::Listening>);
}

/// One attempt's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Taken, with this fencing token; the lease runs until `until` (reckoned from when
    /// the attempt was sent on a connection in hand, so no later than the store set it).
    Acquired { fence: u64, until: Instant },
    /// Held by someone else, whose lease runs this much longer (when known). A fair
    /// attempt also reads the store's clock, against which a later hand-over is
    /// reckoned.
    Held {
        ttl: Option<Duration>,
        clock: Option<StoreClock>,
    },
}

/// The store's clock, in microseconds, as read by an attempt sent at `sent_at`: a
/// hand-over stamped `at_us` on that clock happened no earlier than
/// `sent_at + (at_us - us)` here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreClock {
    pub(crate) sent_at: Instant,
    pub(crate) us: u64,
}

/// A waiter's place, from [`ClientWait::join`].
#[derive(Debug)]
pub(crate) struct Joined<L> {
    pub(crate) line: Arc<Line<L>>,
    /// Its wake-ups were being delivered already (to other waiters here, or to a
    /// subscription lingering after the last one left). Whoever subscribed tried again
    /// once subscribed, so every release since reached this process: one since this
    /// waiter's failed attempt has woken a waiter or left a wake-up (or, for a fair
    /// waiter, its hand-over) for the next to wait. It need not try again before waiting:
    /// in steady contention that saves one command per acquisition.
    pub(crate) already_listening: bool,
}

/// A waiter that left its line, for [`ClientWait::left`].
#[derive(Debug)]
pub(crate) struct Left<'a, L> {
    pub(crate) line: &'a Arc<Line<L>>,
    pub(crate) token: &'a str,
    pub(crate) kind: LockKind,
    /// It took the lock: leaving is not giving up.
    pub(crate) held: bool,
    /// A lock handed over to it that it never took up.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) leftover: Leftover,
}

/// Takes the lock for `request` on `store`, waiting on the client side until the
/// deadline. Called at or after the deadline, makes exactly one attempt; otherwise
/// returns by the deadline.
pub(crate) async fn acquire<S: ClientWait>(
    store: &S,
    request: &Acquire,
) -> Result<Outcome, LockError> {
    let mut findings = Findings {
        found: Found::Nothing,
        clock: None,
    };
    let mut tried = S::Tried::default();
    // The uncontended path: one attempt, nothing registered.
    if let Some(acquired) = read_attempt(attempt(store, request, &mut tried).await, &mut findings)?
    {
        return Ok(Outcome::Acquired(acquired));
    }
    if Instant::now() >= request.deadline {
        return wait_ran_out(request, findings.found);
    }
    tracing::debug!(key = %request.key, "lock held: waiting");
    // In line from here on; the ticket takes the waiter out of the line if it ends
    // without the lock.
    let mut ticket = WaitTicket::join(store, request);
    // Listening before the next attempt, so no release can slip between the attempt and
    // the wait.
    let limit = request.deadline.saturating_duration_since(Instant::now());
    // Boxed: awaited once, so its state need not stay in every waiting task's future.
    Box::pin(store.until_listening(&ticket.line, limit)).await;
    loop {
        if let Some(handover) = ticket.waiter.take_fair_handover()
            && let Some(clock) = findings.clock
            // Handed over at `at_us` on the store's clock: that long after the latest
            // attempt was sent, at the earliest. A hand-over older than that attempt is
            // stale (the attempt would have found the lock its own): its lease ran out.
            && let Some(after) = handover.at_us.checked_sub(clock.us)
        {
            let started = clock.sent_at + Duration::from_micros(after);
            ticket.succeeded();
            let acquired = Acquired::lease(handover.fence, started + request.lease);
            return Ok(Outcome::Acquired(acquired));
        }
        if let Some((fence, until)) = ticket.waiter.take_local_handover() {
            ticket.succeeded();
            return Ok(Outcome::Acquired(Acquired::lease(fence, until)));
        }
        if !std::mem::take(&mut ticket.already_listening) {
            // One with no time left would run whole, past the deadline.
            if Instant::now() >= request.deadline {
                return wait_ran_out(request, findings.found);
            }
            let outcome = attempt(store, request, &mut tried).await;
            if let Some(acquired) = read_attempt(outcome, &mut findings)? {
                ticket.succeeded();
                return Ok(Outcome::Acquired(acquired));
            }
            ticket.failed += 1;
        }
        let Some(next) = next_attempt(store, request, findings.found, &ticket) else {
            return wait_ran_out(request, findings.found);
        };
        // Until a wake-up, or the next attempt falls due.
        let _ = ticket.waiter.wait_until(next).await;
    }
}

/// When to try again if no wake-up comes first: when the poll falls due, but no later
/// than the deadline; `None` once the deadline has passed.
fn next_attempt<S: ClientWait>(
    store: &S,
    request: &Acquire,
    found: Found,
    ticket: &WaitTicket<'_, S>,
) -> Option<Instant> {
    let now = Instant::now();
    if now >= request.deadline {
        return None;
    }
    let holder_ttl = match found {
        Found::Held(ttl) => ttl,
        Found::Nothing => None,
    };
    let nap = store.poll_interval(holder_ttl, &ticket.line, ticket.failed);
    Some((now + nap).min(request.deadline))
}

/// One attempt, sent now; `None` when the deadline cut it short (what it may have taken
/// is released by the store). An attempt made at or after the deadline is the call's
/// only one, and runs whole, however long the store takes to answer or fail.
async fn attempt<S: ClientWait>(
    store: &S,
    request: &Acquire,
    tried: &mut S::Tried,
) -> Option<Result<Attempt, LockError>> {
    let waits_for = request.deadline.saturating_duration_since(Instant::now());
    let attempt = store.attempt(request, waits_for, tried);
    // Boxed with its timer, so that neither stays in every waiting task's future.
    if waits_for.is_zero() {
        return Some(Box::pin(attempt).await);
    }
    Box::pin(tokio::time::timeout_at(request.deadline, attempt))
        .await
        .ok()
}

/// What an acquisition's attempts have found so far.
struct Findings {
    /// What the latest attempt that finished found.
    found: Found,
    /// The store's clock as the latest fair attempt read it, against which a hand-over
    /// is reckoned.
    clock: Option<StoreClock>,
}

/// What the attempts that did not take the lock found.
#[derive(Clone, Copy)]
enum Found {
    /// Nothing yet: no attempt has finished.
    Nothing,
    /// The lock held, by a holder whose lease ran this much longer (when known).
    Held(Option<Duration>),
}

/// Reads what an attempt came to: the lock if it took it; otherwise what it found,
/// kept in `findings`. A failure of the store ends the call.
fn read_attempt(
    outcome: Option<Result<Attempt, LockError>>,
    findings: &mut Findings,
) -> Result<Option<Acquired>, LockError> {
    match outcome {
        None => {}
        Some(Ok(Attempt::Acquired { fence, until })) => {
            return Ok(Some(Acquired::lease(fence, until)));
        }
        Some(Ok(Attempt::Held { ttl, clock })) => {
            findings.found = Found::Held(ttl);
            if clock.is_some() {
                findings.clock = clock;
            }
        }
        Some(Err(e)) => return Err(e),
    }
    Ok(None)
}

/// The end of a wait that ran out, after the attempts found `found`.
fn wait_ran_out(request: &Acquire, found: Found) -> Result<Outcome, LockError> {
    match found {
        Found::Held(holder_ttl) => Ok(Outcome::Held { holder_ttl }),
        Found::Nothing => {
            let context = format!("acquire lock {:?}", request.key.as_str());
            let source = "no answer from the store within the wait";
            Err(LockError::backend(context, source).about(&request.key))
        }
    }
}

/// A waiter in its lock's line; leaves it on drop.
struct WaitTicket<'a, S: ClientWait> {
    store: &'a S,
    line: Arc<Line<S::Listening>>,
    waiter: Arc<Waiter>,
    kind: LockKind,
    /// See [`Joined::already_listening`]; cleared by the wait loop's first turn.
    already_listening: bool,
    /// Its attempts that found the lock held.
    failed: u32,
    /// It got the lock: leaving is not giving up.
    held: bool,
}

impl<'a, S: ClientWait> WaitTicket<'a, S> {
    fn join(store: &'a S, request: &Acquire) -> Self {
        let Joined {
            line,
            already_listening,
        } = store.join(request);
        // A read-write lock's release wakes every waiter in line, and leaves nothing for
        // one that joins after it; nor is a wake-up that another waiter takes good for
        // this one (a reader behind a writer cannot use it). So its waiters try again
        // once in line, before they wait.
        let already_listening =
            already_listening && !matches!(request.kind, LockKind::Read | LockKind::Write);
        let token = request.token.clone();
        // A hand-over makes the waiter's token the owner's and nothing more: a waiter
        // that names itself takes the lock by its own attempt, which keeps its holder id.
        let handover = match request.holder_id {
            Some(_) => Handover::Off,
            None => store.handover(request.kind),
        };
        let waiter = line.join_line(token, request.lease, request.kind, handover);
        if request.kind == LockKind::Fair {
            line.expect_fair_handover(&waiter);
        }
        Self {
            store,
            line,
            waiter,
            kind: request.kind,
            already_listening,
            failed: 0,
            held: false,
        }
    }

    /// The waiter took the lock: leaving is not giving up.
    fn succeeded(&mut self) {
        self.held = true;
        self.waiter.done();
    }
}

impl<S: ClientWait> Drop for WaitTicket<'_, S> {
    fn drop(&mut self) {
        if self.kind == LockKind::Fair {
            self.line.forget_fair_handover(&self.waiter.token);
        }
        let leftover = self.line.leave_line(&self.waiter);
        self.store.left(Left {
            line: &self.line,
            token: &self.waiter.token,
            kind: self.kind,
            held: self.held,
            leftover,
        });
    }
}
