//! The process-local backend: the same semantics as Redis, on tokio time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::Attempt;
use crate::waiters::Waiters;

/// One lock's state: its holder, if any, and its fence counter.
#[derive(Debug)]
struct Entry {
    holder: Option<Holder>,
    fence: u64,
    fence_expires_at: Instant,
}

#[derive(Debug)]
struct Holder {
    token: String,
    expires_at: Instant,
}

impl Entry {
    fn live_holder(&self, now: Instant) -> Option<&Holder> {
        self.holder.as_ref().filter(|h| h.expires_at > now)
    }
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Arc<str>, Entry>,
    ops_since_sweep: usize,
}

impl State {
    /// Forgets locks that are free and whose fence counter expired, once the map has
    /// seen as many acquisitions as it has entries (amortised O(1) per acquisition).
    fn sweep(&mut self, now: Instant) {
        self.ops_since_sweep += 1;
        if self.ops_since_sweep < self.entries.len().max(1024) {
            return;
        }
        self.ops_since_sweep = 0;
        self.entries
            .retain(|_, e| e.live_holder(now).is_some() || e.fence_expires_at > now);
    }
}

#[derive(Debug)]
pub(crate) struct MemoryBackend {
    state: Mutex<State>,
    fence_ttl: Duration,
    pub(crate) waiters: Arc<Waiters>,
}

impl MemoryBackend {
    pub(crate) fn new(fence_ttl: Duration) -> Self {
        Self {
            state: Mutex::default(),
            fence_ttl,
            waiters: Arc::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update below is completed before the guard drops, so a panic elsewhere
        // cannot leave a half-written entry.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn try_acquire(&self, name: &Arc<str>, token: &str, lease: Duration) -> Attempt {
        let now = Instant::now();
        let mut state = self.state();
        state.sweep(now);
        let fence_ttl = self.fence_ttl;
        let entry = state.entries.entry(name.clone()).or_insert_with(|| Entry {
            holder: None,
            fence: 0,
            fence_expires_at: now,
        });
        if let Some(holder) = entry.live_holder(now) {
            return Attempt::Held {
                ttl: Some(holder.expires_at - now),
            };
        }
        if entry.fence_expires_at <= now {
            // A counter that expired while idle starts again from the wall clock in
            // microseconds, as the Redis script does, so tokens never go backwards.
            entry.fence = entry.fence.max(wall_clock_micros());
        }
        entry.fence += 1;
        entry.fence_expires_at = now + fence_ttl;
        entry.holder = Some(Holder {
            token: token.to_owned(),
            expires_at: now + lease,
        });
        Attempt::Acquired { fence: entry.fence }
    }

    /// Releases `name` if `token` holds it; wakes one waiter when it did.
    pub(crate) fn release(&self, name: &str, token: &str) -> bool {
        let now = Instant::now();
        let released = {
            let mut state = self.state();
            match state.entries.get_mut(name) {
                Some(e) if e.live_holder(now).is_some_and(|h| h.token == token) => {
                    e.holder = None;
                    true
                }
                _ => false,
            }
        };
        if released {
            self.waiters.wake_one(name);
        }
        released
    }

    pub(crate) fn extend(&self, name: &str, token: &str, lease: Duration) -> bool {
        let now = Instant::now();
        let mut state = self.state();
        match state
            .entries
            .get_mut(name)
            .and_then(|e| e.holder.as_mut())
            .filter(|h| h.expires_at > now && h.token == token)
        {
            Some(holder) => {
                holder.expires_at = now + lease;
                true
            }
            None => false,
        }
    }

    pub(crate) fn is_held(&self, name: &str, token: &str) -> bool {
        let now = Instant::now();
        self.state()
            .entries
            .get(name)
            .and_then(|e| e.live_holder(now))
            .is_some_and(|h| h.token == token)
    }

    /// Forcibly forgets `name`'s holder, as if its key were deleted behind its back.
    #[cfg(test)]
    pub(crate) fn evict(&self, name: &str) {
        if let Some(e) = self.state().entries.get_mut(name) {
            e.holder = None;
        }
    }
}

fn wall_clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquired(a: Attempt) -> u64 {
        match a {
            Attempt::Acquired { fence } => fence,
            Attempt::Held { ttl } => panic!("expected to acquire, held for {ttl:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn lease_expiry_frees_the_lock_and_fences_increase() {
        let m = MemoryBackend::new(Duration::from_secs(3600));
        let k: Arc<str> = "k".into();
        let f1 = acquired(m.try_acquire(&k, "a", Duration::from_secs(1)));
        let Attempt::Held { ttl } = m.try_acquire(&k, "b", Duration::from_secs(1)) else {
            panic!("acquired a held lock");
        };
        assert_eq!(ttl, Some(Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!m.is_held("k", "a"));
        let f2 = acquired(m.try_acquire(&k, "b", Duration::from_secs(1)));
        assert!(f2 > f1);
        assert!(!m.release("k", "a"), "a stale owner released");
        assert!(
            !m.extend("k", "a", Duration::from_secs(5)),
            "a stale owner extended"
        );
        assert!(m.is_held("k", "b"));
        assert!(m.release("k", "b"));
    }

    #[tokio::test(start_paused = true)]
    async fn fence_survives_counter_expiry() {
        let m = MemoryBackend::new(Duration::from_secs(10));
        let k: Arc<str> = "k".into();
        let f1 = acquired(m.try_acquire(&k, "a", Duration::from_secs(1)));
        assert!(m.release("k", "a"));
        tokio::time::advance(Duration::from_secs(11)).await;
        let f2 = acquired(m.try_acquire(&k, "b", Duration::from_secs(1)));
        assert!(f2 > f1, "{f2} <= {f1}");
    }
}
