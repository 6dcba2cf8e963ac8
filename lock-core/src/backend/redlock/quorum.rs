//! How many masters make a quorum, and what a quorum of answers says: the one place
//! every call but an attempt asks every master and counts their answers.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use super::master::{Holders, Master};
use super::{PER_MASTER, RedLock};
use crate::backend::store::Renewal;
use crate::kind::Sharing;
use crate::{HolderInfo, LockError, LockInfo, LockKey, LockKind};

/// The masters a majority of `n` is made of.
pub(crate) fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// Each master's answer to one call, `None` where it failed or did not answer in time.
pub(super) struct Answers<T>(Vec<Option<T>>);

impl<T> Answers<T> {
    /// The answers given, if at least `needed` masters answered; else
    /// [`LockError::Quorum`] on lock `key`, counting as granted the answers that
    /// `granted` accepts.
    pub(super) fn of_quorum(
        self,
        key: &LockKey,
        needed: usize,
        granted: impl Fn(&T) -> bool,
    ) -> Result<Vec<T>, LockError> {
        let answers: Vec<T> = self.0.into_iter().flatten().collect();
        if answers.len() < needed {
            let acquired = answers.iter().filter(|&a| granted(a)).count();
            return Err(quorum_error(key, acquired, needed));
        }
        Ok(answers)
    }

    /// How many masters did not answer.
    fn unanswered(&self) -> usize {
        self.0.iter().filter(|a| a.is_none()).count()
    }
}

pub(super) fn quorum_error(key: &LockKey, acquired: usize, needed: usize) -> LockError {
    LockError::Quorum {
        key: key.to_string(),
        acquired,
        needed,
    }
}

impl<M: Master> RedLock<M> {
    /// Asks every master at once, each within `patience`.
    pub(super) async fn ask_all<'a, T, F>(
        &'a self,
        patience: Duration,
        ask: impl Fn(&'a M) -> F,
    ) -> Answers<T>
    where
        F: Future<Output = Result<T, LockError>>,
    {
        let asks = self
            .masters
            .iter()
            .map(|m| tokio::time::timeout(patience, ask(m)));
        let answers = join_all(asks).await;
        Answers(answers.into_iter().map(|a| a.ok()?.ok()).collect())
    }

    /// How many masters must hold a lock of `kind`.
    pub(super) fn quorum(&self, kind: LockKind) -> usize {
        let n = self.masters.len();
        match kind {
            LockKind::Semaphore { permits } => {
                let p = permits as usize;
                (p * n / (p + 1) + 1).max(majority(n))
            }
            _ => majority(n),
        }
    }

    /// The instant until which a lock of `kind` held until each of `untils` (one per
    /// master that holds it) is valid: the quorum-th latest, less the drift; `None`
    /// without a quorum.
    pub(super) fn valid_until(
        &self,
        kind: LockKind,
        lease: Duration,
        untils: &mut [Instant],
    ) -> Option<Instant> {
        let needed = self.quorum(kind);
        if untils.len() < needed {
            return None;
        }
        untils.sort_unstable_by(|a, b| b.cmp(a));
        untils[needed - 1].checked_sub(self.settings.drift.of(lease))
    }

    /// Renews `leases` on every master at once, each within its share of the shortest
    /// lease: each lease runs as long as its quorum renewed it.
    pub(super) async fn renew_on_quorum(
        &self,
        leases: &[Renewal<'_>],
    ) -> Result<Vec<Option<Instant>>, LockError> {
        let patience = leases
            .iter()
            .map(|r| r.lease / PER_MASTER)
            .min()
            .unwrap_or_default();
        let sent_at = Instant::now();
        let answers = self.ask_all(patience, |m| m.renew(leases)).await;
        let unanswered = answers.unanswered();
        let answers: Vec<Vec<Option<Instant>>> = answers.0.into_iter().flatten().collect();
        let mut decided = 0;
        let renewed: Vec<Option<Instant>> = leases
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut untils: Vec<Instant> = answers.iter().filter_map(|a| a[i]).collect();
                let needed = self.quorum(r.hold.kind);
                let held = untils.len();
                if let Some(until) = self.valid_until(r.hold.kind, r.lease, &mut untils) {
                    decided += 1;
                    Some(until)
                } else if held + unanswered < needed {
                    // No longer held by a quorum, whatever the others say.
                    decided += 1;
                    None
                } else {
                    // Undecided: the lease keeps its deadline (a renewal never moves it
                    // back) and is asked again at its next check.
                    Some(sent_at)
                }
            })
            .collect();
        if decided == 0 && !leases.is_empty() {
            let needed = self.quorum(leases[0].hold.kind);
            return Err(quorum_error(leases[0].hold.key, answers.len(), needed));
        }
        Ok(renewed)
    }

    /// What the masters that answered an inspection (`seen` by each of them, `None` where
    /// the lock is free) agree on: each holder that as many of them as its kind's quorum
    /// show, with the lease left that this many give it and the holder id any of them
    /// keeps (one per token); an owner's fencing token, where this many of them keep the
    /// same counter (see [`fence`](super::fence)), and none for readers and permits, whose
    /// tokens no master records; the most that a majority of all masters count as
    /// waiting. `None` when no holder has its quorum.
    pub(super) fn agreed(&self, seen: &[Option<Holders>]) -> Option<LockInfo> {
        let views: Vec<&Holders> = seen.iter().flatten().collect();
        // Each token any master shows, and what they show of it.
        let mut shown: HashMap<&str, Shown<'_>> = HashMap::new();
        for view in &views {
            for (token, left) in &view.holders {
                let token = shown.entry(token).or_insert_with(|| Shown {
                    kind: view.kind,
                    lefts: Vec::new(),
                    counters: Vec::new(),
                    holder_id: None,
                });
                token.lefts.push(*left);
                token.counters.extend(view.fence);
                token.holder_id = token.holder_id.or(view.holder_id.as_deref());
            }
        }
        let mut kind = None;
        let holders: Vec<HolderInfo> = shown
            .into_iter()
            .filter_map(|(token, mut shown)| {
                let needed = self.quorum(shown.kind.unwrap_or(LockKind::Exclusive));
                if shown.lefts.len() < needed {
                    return None;
                }
                kind = shown.kind;
                shown.lefts.sort_unstable_by(|a, b| b.cmp(a));
                let fence = match shown.kind.map(LockKind::sharing) {
                    Some(Sharing::Owner) => self.kept_fence(&mut shown.counters, needed),
                    _ => None,
                };
                let holder = HolderInfo::new(token, shown.lefts[needed - 1], fence);
                Some(holder.with_holder_id(shown.holder_id))
            })
            .collect();
        if holders.is_empty() {
            return None;
        }
        let mut waiting: Vec<usize> = views.iter().map(|view| view.waiting).collect();
        waiting.sort_unstable_by(|a, b| b.cmp(a));
        let waiting = waiting.get(majority(self.masters.len()) - 1).copied();
        Some(LockInfo::new(kind, holders, waiting))
    }

    /// An owner's fencing token, from the `counters` of the masters that show it: the
    /// counter that `needed` of them keep alike. `None` if none does (a counter ran out,
    /// or masters that keep it did not answer), rather than a token that may not be the
    /// owner's.
    fn kept_fence(&self, counters: &mut [u64], needed: usize) -> Option<u64> {
        counters.sort_unstable();
        let mut alike = counters.chunk_by(|a, b| a == b);
        let kept = alike.find(|alike| alike.len() >= needed)?;
        Some(self.owner_fence(kept[0]))
    }
}

/// What the masters that answered an inspection show of one holder.
struct Shown<'a> {
    /// The kind the first of them says it holds.
    kind: Option<LockKind>,
    /// The lease left that each gives it.
    lefts: Vec<Option<Duration>>,
    /// The fence counter each keeps, where it keeps one for it (an owner's).
    counters: Vec<u64>,
    holder_id: Option<&'a str>,
}
