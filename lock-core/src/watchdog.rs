//! One watchdog task per `Locker` keeps every live lease renewed.
//!
//! Leases wait in a queue ordered by when they next need attention. A lease comes up a
//! third of its lease after its last renewal; all leases due together are renewed with
//! one batch (one pipeline on Redis), sent from a separate task so a slow store never
//! stalls the schedule. A lease whose deadline passes without a successful renewal (the
//! key is gone, another owner holds it, or the store does not answer) is marked lost.
//! With the watchdog off, a lease only comes up at its deadline, to be marked lost.
//!
//! Taking a lock queues its lease without waking the task, unless the lease is due before
//! everything queued (the first one, or a shorter lease).

use std::cmp::{Ordering as Order, Reverse};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::store::{Renewal, Store};
use crate::hold::Hold;

/// The `Locker`'s side: the queue it shares with its watchdog task.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Where the leases are renewed.
    store: Arc<dyn Store>,
    queue: Mutex<Queue>,
    /// A lease came due before the one the task sleeps for, or the `Locker` is gone.
    changed: Notify,
    /// The `Locker` is gone: the task ends.
    closed: AtomicBool,
    /// Leases released since the queue was last compacted.
    released: AtomicUsize,
}

#[derive(Debug, Default)]
struct Queue {
    /// The leases, the first due on top.
    leases: BinaryHeap<Reverse<Due>>,
    /// Whether a task serves the queue (none yet, or the runtime it ran on shut down).
    running: bool,
}

/// A lease, and when it next needs attention.
#[derive(Debug)]
struct Due {
    at: Instant,
    lease: Arc<Hold>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Order> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Order {
        self.at.cmp(&other.at)
    }
}

impl Queue {
    fn schedule(&mut self, at: Instant, lease: Arc<Hold>) {
        self.leases.push(Reverse(Due { at, lease }));
    }

    fn next(&self) -> Option<Instant> {
        self.leases.peek().map(|Reverse(due)| due.at)
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
    /// A watchdog that renews leases in `store`.
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            shared: Arc::new(Shared {
                store,
                queue: Mutex::default(),
                changed: Notify::new(),
                closed: AtomicBool::new(false),
                released: AtomicUsize::new(0),
            }),
        }
    }

    /// Queues a new lease, starting the watchdog task if none runs (first lease, or the
    /// runtime it ran on has shut down).
    pub(crate) fn watch(&self, lease: Arc<Hold>) {
        let at = next_check(&lease, Instant::now());
        let mut queue = self.shared.queue();
        let first = queue.next().is_none_or(|next| at < next);
        queue.schedule(at, lease);
        // Once released leases may be half the queue (1024 of them at least), drop them
        // all: past that, they never outnumber the live ones.
        let stale = self.shared.released.load(Ordering::Relaxed);
        if stale >= 1024 && stale * 2 >= queue.leases.len() {
            self.shared.released.fetch_sub(stale, Ordering::Relaxed);
            queue.leases.retain(|Reverse(due)| due.lease.is_active());
        }
        let start = !queue.running;
        queue.running = true;
        drop(queue);
        if start {
            tokio::spawn(run(Running(self.shared.clone())));
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

impl Watchdog {
    /// Ends the task and marks every lease it watched lost: nothing renews them now.
    pub(crate) fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        let leases = std::mem::take(&mut self.shared.queue().leases);
        for Reverse(due) in leases {
            due.lease.mark_lost();
        }
        self.shared.changed.notify_one();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.close();
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
/// same moment are renewed by one wake-up and one batch; or, with the watchdog off (or
/// when it comes first), its exact deadline.
fn next_check(lease: &Hold, now: Instant) -> Instant {
    const MAX_GRID: Duration = Duration::from_millis(50);
    let deadline = lease.expires_at();
    if !lease.watchdog {
        return deadline;
    }
    let period = lease.lease() / 3;
    let renew_at = lease.snap_down(now + period, (period / 10).min(MAX_GRID));
    renew_at.max(now).min(deadline)
}

async fn run(running: Running) {
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
                let batch = due(&mut shared.queue(), Instant::now());
                if !batch.is_empty() {
                    let span = tracing::debug_span!("lock_renew", leases = batch.len());
                    tokio::spawn(renew(shared.store.clone(), batch).instrument(span));
                }
            }
        }
    }
}

/// Takes the leases due by `now` off the queue: marks those past their deadline lost,
/// and queues the others' next check. Returns those to renew now.
fn due(queue: &mut Queue, now: Instant) -> Vec<Arc<Hold>> {
    let mut batch = Vec::new();
    while queue.next().is_some_and(|at| at <= now) {
        let Some(Reverse(Due { lease, .. })) = queue.leases.pop() else {
            break;
        };
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
    batch
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

async fn renew(store: Arc<dyn Store>, batch: Vec<Arc<Hold>>) {
    let renewals: Vec<Renewal<'_>> = batch
        .iter()
        .map(|lease| Renewal {
            hold: lease.for_store(),
            lease: lease.lease(),
        })
        .collect();
    // A reply later than this is of no use: the next check sends a fresh renewal.
    let patience = renewals
        .iter()
        .map(|r| r.lease / 3)
        .min()
        .unwrap_or_default();
    match tokio::time::timeout(patience, store.renew(&renewals)).await {
        Ok(Ok(renewed)) => {
            for (lease, until) in batch.iter().zip(renewed) {
                if let Some(until) = until {
                    lease.renewed(until);
                    tracing::trace!(key = %lease.key, "lease renewed");
                } else if lease.is_active() {
                    // The key is gone or someone else owns it: nothing left to renew.
                    tracing::warn!(key = %lease.key, "lease renewal refused: the lock is no longer ours");
                    lease.mark_lost();
                }
            }
        }
        Ok(Err(e)) => {
            // Retried at the next check; lost once the deadline passes.
            tracing::warn!(error = %e, "lease renewal failed");
        }
        Err(_) => {
            tracing::warn!(?patience, "lease renewal got no answer in time");
        }
    }
    for lease in &batch {
        lease.renewing.store(false, Ordering::Release);
    }
}
