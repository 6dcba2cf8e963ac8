//! What the store keeps of each lock: its holders, its fence counter, and who waits for
//! it in the store.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::fence::Fence;
use super::session::{Ends, Term};
use crate::LockKind;
use crate::backend::store::Acquire;
use crate::backend::wait::Attempt;
use crate::backend::wait::handover::FairHandover;
use crate::kind::Sharing;

/// Every lock the store knows of, by name.
#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) entries: HashMap<Arc<str>, Entry>,
    ops_since_sweep: usize,
}

impl State {
    /// Lock `key`'s entry, made if it has none, with the holders whose hold ended by `now`
    /// dropped.
    pub(super) fn entry(&mut self, key: &Arc<str>, now: Instant) -> &mut Entry {
        let entry = self
            .entries
            .entry(key.clone())
            .or_insert_with(|| Entry::new(now));
        entry.prune(now);
        entry
    }

    /// Forgets locks that are free and whose fence counter expired, once the map has
    /// seen as many acquisitions as it has entries (amortised O(1) per acquisition).
    pub(super) fn sweep(&mut self, now: Instant) {
        self.ops_since_sweep += 1;
        if self.ops_since_sweep < self.entries.len().max(1024) {
            return;
        }
        self.ops_since_sweep = 0;
        self.entries.retain(|_, e| {
            e.holders.iter().any(|h| h.ends.live(now))
                || !e.fence.expired(now)
                || !e.line.is_empty()
                || !e.writers.is_empty()
        });
    }
}

/// One lock's state: its holders, its fence counter, and who waits for it in the store.
#[derive(Debug)]
pub(super) struct Entry {
    /// One owner (exclusive, fair or write), or readers, or permit holders. A holder whose
    /// lease ran out is dropped as soon as it is looked at.
    pub(super) holders: Vec<Holder>,
    pub(super) fence: Fence,
    /// Fair waiters, first come first. A place here lasts until its waiter leaves (its
    /// drop sees to that), so unlike on Redis it needs no expiry.
    pub(super) line: VecDeque<Place>,
    /// Writers waiting for the read-write lock, with when each began to ask: a reader
    /// that asked later waits for them. Each stays until it takes the lock or leaves.
    pub(super) writers: Vec<(Box<str>, Instant)>,
    /// A semaphore's count, stored on first use; forgotten with the fence counter once
    /// nobody holds a permit.
    pub(super) permits: Option<u32>,
}

/// A fair waiter's place in line.
#[derive(Debug)]
pub(super) struct Place {
    pub(super) token: Box<str>,
    pub(super) holder_id: Option<Arc<str>>,
    pub(super) term: Term,
}

/// One holder of a lock.
#[derive(Debug)]
pub(super) struct Holder {
    pub(super) token: String,
    pub(super) holder_id: Option<Arc<str>>,
    pub(super) kind: LockKind,
    pub(super) ends: Ends,
    pub(super) fence: u64,
}

impl Holder {
    /// This hold as an attempt reports it: its fencing token, and the instant it runs
    /// until (a session's hold is reported as a session by `Store::acquire`, which drops
    /// this instant).
    pub(super) fn acquired(&self, now: Instant) -> Attempt {
        let until = match self.ends {
            Ends::At(at) => at,
            Ends::WithSession { .. } => now,
        };
        Attempt::Acquired {
            fence: self.fence,
            until,
        }
    }
}

/// A fair lock handed over to the first in line, to deliver to that waiter once the
/// state's lock is dropped.
pub(super) type HandedOver = (Box<str>, FairHandover);

impl Entry {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            holders: Vec::new(),
            fence: Fence::new(now),
            line: VecDeque::new(),
            writers: Vec::new(),
            permits: None,
        }
    }

    /// Drops the holders whose lease ran out, and a stored count whose semaphore has been
    /// idle as long as its fence counter.
    pub(super) fn prune(&mut self, now: Instant) {
        self.holders.retain(|h| h.ends.live(now));
        if self.holders.is_empty() && self.fence.expired(now) {
            self.permits = None;
        }
    }

    /// The live holder `token`.
    pub(super) fn holder(&self, token: &str, now: Instant) -> Option<&Holder> {
        self.holders
            .iter()
            .find(|h| h.token == token && h.ends.live(now))
    }

    /// The longest lease left among the holders (all in the way of whoever asks); `None`
    /// if there are none, or one of them holds for a session.
    pub(super) fn longest_lease(&self, now: Instant) -> Option<Duration> {
        let mut longest = None;
        for holder in &self.holders {
            longest = longest.max(Some(holder.ends.left(now)?));
        }
        longest
    }

    /// Whether a holder of another sharing than `sharing` holds the lock.
    pub(super) fn held_otherwise(&self, sharing: Sharing) -> bool {
        self.holders.iter().any(|h| h.kind.sharing() != sharing)
    }

    /// Makes `token` (calling itself `holder_id`) a holder, as `kind`, for `term`,
    /// drawing its fencing token.
    pub(super) fn take(
        &mut self,
        token: &str,
        holder_id: Option<&Arc<str>>,
        kind: LockKind,
        term: &Term,
        now: Instant,
        fence_ttl: Duration,
    ) -> &Holder {
        let fence = self.fence.draw(now, fence_ttl, term.lease());
        self.holders.push(Holder {
            token: token.to_owned(),
            holder_id: holder_id.cloned(),
            kind,
            ends: Ends::new(term, now),
            fence,
        });
        &self.holders[self.holders.len() - 1]
    }

    /// Gives the lock to the first in line, if anyone waits.
    pub(super) fn hand_over(
        &mut self,
        now: Instant,
        fence_ttl: Duration,
        clock_us: u64,
    ) -> Option<HandedOver> {
        let place = self.line.pop_front()?;
        let fence = self
            .take(
                &place.token,
                place.holder_id.as_ref(),
                LockKind::Fair,
                &place.term,
                now,
                fence_ttl,
            )
            .fence;
        tracing::debug!(fence, "lock handed over to the next in line");
        let handover = FairHandover {
            fence,
            at_us: clock_us,
        };
        Some((place.token, handover))
    }

    /// Counts `request`, which waits and did not go in, among those waiting: a fair
    /// caller takes a place at the back of the line (unless it has one), a writer or an
    /// exclusive caller is counted among the waiting writers with when it began to ask.
    /// The other kinds keep no order.
    pub(super) fn wait(&mut self, request: &Acquire, term: &Term) {
        let token = &*request.token;
        match request.kind {
            LockKind::Fair if !self.line.iter().any(|p| &*p.token == token) => {
                self.line.push_back(Place {
                    token: token.into(),
                    holder_id: request.holder_id.clone(),
                    term: term.clone(),
                });
            }
            LockKind::Write | LockKind::Exclusive
                if !self.writers.iter().any(|(t, _)| &**t == token) =>
            {
                self.writers.push((token.into(), request.since));
            }
            _ => {}
        }
    }

    /// Takes `request`, which goes in, out of those waiting: a fair caller leaves the
    /// front of the line, a writer or an exclusive caller the waiting writers.
    pub(super) fn stop_waiting(&mut self, request: &Acquire) {
        let token = &*request.token;
        match request.kind {
            LockKind::Fair if self.line.front().is_some_and(|p| &*p.token == token) => {
                self.line.pop_front();
            }
            LockKind::Write | LockKind::Exclusive => self.stop_waiting_to_write(token),
            _ => {}
        }
    }

    /// Whether a writer that began to ask no later than `since` waits.
    pub(super) fn writer_waiting_since(&self, since: Instant) -> bool {
        self.writers.iter().any(|&(_, at)| at <= since)
    }

    /// The writer that has waited longest.
    pub(super) fn next_writer(&self) -> Option<Box<str>> {
        let (token, _) = self.writers.iter().min_by_key(|(_, since)| *since)?;
        Some(token.clone())
    }

    /// Takes writer `token` out of those waiting.
    pub(super) fn stop_waiting_to_write(&mut self, token: &str) {
        self.writers.retain(|(t, _)| &**t != token);
    }
}
