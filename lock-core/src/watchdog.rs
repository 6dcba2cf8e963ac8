//! One watchdog task per `Locker` keeps every live lease renewed.
//!
//! Leases wait in a queue ordered by when they next need attention. A lease comes up a
//! third of its lease after its last renewal; all leases due together are renewed with
//! one pipelined batch, sent from a separate task so a slow server never stalls the
//! schedule. A lease whose deadline passes without a successful renewal (the key is
//! gone, another owner holds it, or the server does not answer) is marked lost. With the
//! watchdog off, a lease only comes up at its deadline, to be marked lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::guard::Lease;
use crate::locker::Inner;

/// The sending side, kept in the `Locker`.
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    tx: Mutex<Option<mpsc::UnboundedSender<Arc<Lease>>>>,
    /// Leases released since the queue was last compacted.
    released: Arc<AtomicUsize>,
}

impl Watchdog {
    /// Hands a new lease to the watchdog task, starting it if it is not running (first
    /// lease, or the runtime it ran on has shut down).
    pub(crate) fn watch(&self, inner: &Arc<Inner>, lease: Arc<Lease>) {
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let lease = match tx.as_ref() {
            Some(tx) => match tx.send(lease) {
                Ok(()) => return,
                Err(mpsc::error::SendError(lease)) => lease,
            },
            None => lease,
        };
        let (new_tx, rx) = mpsc::unbounded_channel();
        let _ = new_tx.send(lease);
        tokio::spawn(run(Arc::downgrade(inner), rx, self.released.clone()));
        *tx = Some(new_tx);
    }

    /// Counts a released lease: the queue drops it when compacting, rather than holding
    /// it until it would have come due (up to a whole lease later).
    pub(crate) fn released(&self) {
        self.released.fetch_add(1, Ordering::Relaxed);
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

async fn run(
    inner: Weak<Inner>,
    mut rx: mpsc::UnboundedReceiver<Arc<Lease>>,
    released: Arc<AtomicUsize>,
) {
    let mut queue: BTreeMap<(Instant, u64), Arc<Lease>> = BTreeMap::new();
    let mut seq = 0u64;
    let mut schedule = |queue: &mut BTreeMap<_, _>, at: Instant, lease: Arc<Lease>| {
        seq += 1;
        queue.insert((at, seq), lease);
    };
    loop {
        let next = queue.first_key_value().map(|(&(at, _), _)| at);
        tokio::select! {
            biased;
            lease = rx.recv() => match lease {
                Some(lease) => {
                    let at = next_check(&lease, Instant::now());
                    schedule(&mut queue, at, lease);
                    // Once released leases may be half the queue, drop them all: each
                    // compaction costs at most twice the releases it follows.
                    let stale = released.load(Ordering::Relaxed);
                    if stale >= 1024 && stale * 2 >= queue.len() {
                        released.fetch_sub(stale, Ordering::Relaxed);
                        queue.retain(|_, lease| lease.is_active());
                    }
                }
                // The Locker and all its guards are gone.
                None => return,
            },
            () = sleep_until(next), if next.is_some() => {
                let now = Instant::now();
                let mut batch = Vec::new();
                while let Some(entry) = queue.first_entry() {
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
                    let at = next_check(&lease, now);
                    schedule(&mut queue, at, lease);
                }
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
