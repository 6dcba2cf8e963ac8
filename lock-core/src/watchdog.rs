//! One watchdog task per `Locker` keeps every live lease renewed.
//!
//! Leases wait in a queue ordered by when they next need attention. A lease comes up a
//! third of its lease after its last renewal; all leases due together are renewed with
//! one pipelined batch, sent from a separate task so a slow server never stalls the
//! schedule. A lease whose deadline passes without a successful renewal (the key is
//! gone, another owner holds it, or the server does not answer) is marked lost. With the
//! watchdog off, a lease only comes up at its deadline, to be marked lost.
//!
//! A new lease goes straight into the queue's inbox, shared with the task, which is woken
//! only when the lease is due before everything queued (the first one, or a shorter
//! lease): taking a lock does not cost a task switch. The task sorts the inbox in when it
//! wakes, so a lease released before then (most are) is never sorted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::guard::Lease;
use crate::locker::Inner;

/// The `Locker`'s side: the queue it shares with its watchdog task.
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// A lease came due before the one the task sleeps for, or the `Locker` is gone.
    changed: Notify,
    /// The `Locker` and all its guards are gone: the task ends.
    closed: AtomicBool,
    /// Leases released since the queue was last compacted.
    released: AtomicUsize,
}

#[derive(Debug, Default)]
struct Queue {
    leases: BTreeMap<(Instant, u64), Arc<Lease>>,
    /// Leases queued since the task last woke, with when each is due.
    inbox: Vec<(Instant, Arc<Lease>)>,
    /// When the first lease in the inbox is due.
    inbox_next: Option<Instant>,
    seq: u64,
    /// Whether a task serves the queue (none yet, or the runtime it ran on shut down).
    running: bool,
}

impl Queue {
    fn schedule(&mut self, at: Instant, lease: Arc<Lease>) {
        self.seq += 1;
        self.leases.insert((at, self.seq), lease);
    }

    fn next(&self) -> Option<Instant> {
        let sorted = self.leases.first_key_value().map(|(&(at, _), _)| at);
        sorted.into_iter().chain(self.inbox_next).min()
    }

    fn len(&self) -> usize {
        self.leases.len() + self.inbox.len()
    }

    /// Sorts the inbox's leases in, but for those released meanwhile.
    fn sort_inbox(&mut self) {
        for (at, lease) in std::mem::take(&mut self.inbox) {
            if lease.is_active() {
                self.schedule(at, lease);
            }
        }
        self.inbox_next = None;
    }

    /// Drops the released leases.
    fn compact(&mut self) {
        self.leases.retain(|_, lease| lease.is_active());
        self.inbox.retain(|(_, lease)| lease.is_active());
        self.inbox_next = self.inbox.iter().map(|&(at, _)| at).min();
    }
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // No update of the queue can panic halfway (no user code runs under the lock), so
        // a poisoned lock still guards a whole queue.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Watchdog {
    /// Queues a new lease, starting the watchdog task if none runs (first lease, or the
    /// runtime it ran on has shut down).
    pub(crate) fn watch(&self, inner: &Arc<Inner>, lease: Arc<Lease>) {
        let at = next_check(&lease, Instant::now());
        let mut queue = self.shared.queue();
        let first = queue.next().is_none_or(|next| at < next);
        queue.inbox.push((at, lease));
        queue.inbox_next = Some(queue.inbox_next.map_or(at, |next| next.min(at)));
        // Once released leases may be half the queue, drop them all: each compaction
        // costs at most twice the releases it follows.
        let stale = self.shared.released.load(Ordering::Relaxed);
        if stale >= 1024 && stale * 2 >= queue.len() {
            self.shared.released.fetch_sub(stale, Ordering::Relaxed);
            queue.compact();
        }
        let start = !queue.running;
        queue.running = true;
        drop(queue);
        if start {
            tokio::spawn(run(Arc::downgrade(inner), Running(self.shared.clone())));
        } else if first {
            self.shared.changed.notify_one();
        }
    }

    /// Counts a released lease: the queue drops it when compacting, rather than holding
    /// it until it would have come due (up to a whole lease later).
    pub(crate) fn released(&self) {
        self.shared.released.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.changed.notify_one();
    }
}

/// The task's hold on the queue: when the task ends or is dropped (its runtime shut
/// down), the next lease starts another.
struct Running(Arc<Shared>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.queue().running = false;
    }
}

/// When a lease next needs attention: its renewal a third of a lease from now, snapped
/// down to a grid (a tenth of that period, at most 50 ms) so that leases due at about the
/// same moment are renewed by one wake-up and one pipeline; or, with the watchdog off (or
/// when it comes first), its exact deadline.
fn next_check(lease: &Lease, now: Instant) -> Instant {
    const MAX_GRID: Duration = Duration::from_millis(50);
    let deadline = lease.expires_at();
    if !lease.watchdog {
        return deadline;
    }
    let period = lease.lease() / 3;
    let renew_at = lease.snap_down(now + period, (period / 10).min(MAX_GRID));
    renew_at.max(now).min(deadline)
}

async fn run(inner: Weak<Inner>, running: Running) {
    let shared = &running.0;
    loop {
        let next = shared.queue().next();
        tokio::select! {
            biased;
            () = shared.changed.notified() => {
                if shared.closed.load(Ordering::Acquire) {
                    return;
                }
            }
            () = sleep_until(next), if next.is_some() => {
                let now = Instant::now();
                let mut batch = Vec::new();
                let mut queue = shared.queue();
                queue.sort_inbox();
                while let Some(entry) = queue.leases.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    let lease = entry.remove();
                    if !lease.is_active() {
                        continue;
                    }
                    if now >= lease.expires_at() {
                        lease.mark_lost();
                        continue;
                    }
                    if lease.watchdog && !lease.renewing.swap(true, Ordering::AcqRel) {
                        batch.push(lease.clone());
                    }
                    queue.schedule(next_check(&lease, now), lease);
                }
                drop(queue);
                if !batch.is_empty() {
                    let Some(inner) = inner.upgrade() else { return };
                    tokio::spawn(renew(inner, batch, now));
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

async fn renew(inner: Arc<Inner>, batch: Vec<Arc<Lease>>, sent_at: Instant) {
    let leases: Vec<Duration> = batch.iter().map(|l| l.lease()).collect();
    let items: Vec<(&str, &str, Duration)> = batch
        .iter()
        .zip(&leases)
        .map(|(l, d)| (&*l.name, &*l.token, *d))
        .collect();
    // A reply later than this is of no use: the next check sends a fresh renewal.
    let patience = leases.iter().min().map_or(Duration::ZERO, |d| *d / 3);
    match tokio::time::timeout(patience, inner.backend.renew_many(&items)).await {
        Ok(Ok(held)) => {
            for ((lease, d), held) in batch.iter().zip(&leases).zip(held) {
                if held {
                    lease.renewed(sent_at, *d);
                    tracing::trace!(key = %lease.name, "lease renewed");
                } else if lease.is_active() {
                    // The key is gone or someone else owns it: nothing left to renew.
                    tracing::warn!(key = %lease.name, "lease renewal refused: the lock is no longer ours");
                    lease.mark_lost();
                }
            }
        }
        Ok(Err(e)) => {
            // Retried at the next check; lost once the deadline passes.
            tracing::warn!(leases = batch.len(), error = %e, "lease renewal failed");
        }
        Err(_) => {
            tracing::warn!(
                leases = batch.len(),
                ?patience,
                "lease renewal got no answer in time"
            );
        }
    }
    for lease in &batch {
        lease.renewing.store(false, Ordering::Release);
    }
}
