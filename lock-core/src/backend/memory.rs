//! The process-local backend: the same semantics as Redis, on tokio time.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::{Attempt, Mode};
use crate::waiters::{Grant, Waiters};

/// One lock's state: its holder, if any, its fence counter, and its fair waiters.
#[derive(Debug)]
struct Entry {
    holder: Option<Holder>,
    fence: u64,
    fence_expires_at: Instant,
    /// Fair waiters, first come first. A place here lasts until its waiter leaves (its
    /// drop sees to that), so unlike on Redis it needs no expiry.
    line: VecDeque<Place>,
}

#[derive(Debug)]
struct Place {
    token: Box<str>,
    lease: Duration,
}

#[derive(Debug)]
struct Holder {
    token: String,
    expires_at: Instant,
}

/// A hand-over to deliver once the state's lock is dropped.
type HandOver = (Box<str>, Grant);

impl Entry {
    fn live_holder(&self, now: Instant) -> Option<&Holder> {
        self.holder.as_ref().filter(|h| h.expires_at > now)
    }

    /// Makes `token` the holder and draws its fencing token.
    fn take(&mut self, token: &str, lease: Duration, now: Instant, fence_ttl: Duration) -> u64 {
        let fresh = self.fence_expires_at <= now;
        if fresh {
            // A counter that expired starts again from the wall clock in microseconds,
            // as the Redis script does, so tokens never go backwards.
            self.fence = self.fence.max(wall_clock_micros());
        }
        self.fence += 1;
        // As on Redis: renewed every 64 tokens (and at least for the lease drawn).
        if fresh || self.fence.is_multiple_of(64) {
            self.fence_expires_at = now + fence_ttl;
        }
        self.fence_expires_at = self.fence_expires_at.max(now + lease);
        self.holder = Some(Holder {
            token: token.to_owned(),
            expires_at: now + lease,
        });
        self.fence
    }

    /// Gives the lock to the first in line, if anyone waits.
    fn hand_over(&mut self, now: Instant, fence_ttl: Duration, clock_us: u64) -> Option<HandOver> {
        let place = self.line.pop_front()?;
        let fence = self.take(&place.token, place.lease, now, fence_ttl);
        Some((
            place.token,
            Grant {
                fence,
                at_us: clock_us,
            },
        ))
    }

    /// The holder `token` gives the lock back: to the first in line (`fair`), or free.
    fn pass_on(
        &mut self,
        fair: bool,
        now: Instant,
        fence_ttl: Duration,
        clock_us: u64,
    ) -> Option<HandOver> {
        let handed = if fair {
            self.hand_over(now, fence_ttl, clock_us)
        } else {
            None
        };
        if handed.is_none() {
            self.holder = None;
        }
        handed
    }

    fn queue(&mut self, token: &str, lease: Duration) {
        if !self.line.iter().any(|p| &*p.token == token) {
            self.line.push_back(Place {
                token: token.into(),
                lease,
            });
        }
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
        self.entries.retain(|_, e| {
            e.live_holder(now).is_some() || e.fence_expires_at > now || !e.line.is_empty()
        });
    }
}

#[derive(Debug)]
pub(crate) struct MemoryBackend {
    state: Mutex<State>,
    fence_ttl: Duration,
    pub(crate) waiters: Arc<Waiters>,
    /// The zero of the clock that attempts and hand-overs report.
    epoch: Instant,
}

impl MemoryBackend {
    pub(crate) fn new(fence_ttl: Duration) -> Self {
        Self {
            state: Mutex::default(),
            fence_ttl,
            waiters: Arc::default(),
            epoch: Instant::now(),
        }
    }

    fn clock_us(&self, now: Instant) -> u64 {
        u64::try_from((now - self.epoch).as_micros()).unwrap_or(u64::MAX)
    }

    /// Wakes whoever a release concerns: the waiter it was handed to, or one waiter.
    fn announce(&self, name: &str, handed: Option<HandOver>) {
        match handed {
            Some((token, grant)) => self.waiters.deliver(name, &token, grant),
            None => {
                self.waiters.wake_one(name);
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update below is completed before the guard drops, so a panic elsewhere
        // cannot leave a half-written entry.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn try_acquire(
        &self,
        name: &str,
        token: &str,
        lease: Duration,
        mode: Mode,
    ) -> Attempt {
        let now = Instant::now();
        let clock_us = self.clock_us(now);
        let fence_ttl = self.fence_ttl;
        let mut handed = None;
        let attempt = {
            let mut state = self.state();
            state.sweep(now);
            let entry = state.entries.entry(name.into()).or_insert_with(|| Entry {
                holder: None,
                fence: 0,
                fence_expires_at: now,
                line: VecDeque::new(),
            });
            let holder = entry
                .live_holder(now)
                .map(|h| (h.token == token, h.expires_at));
            let queue = matches!(mode, Mode::Fair { place } if !place.is_zero());
            match (holder, mode) {
                // Handed over to this fair waiter before it saw the message.
                (Some((true, expires_at)), Mode::Fair { .. }) => Attempt::Acquired {
                    fence: entry.fence,
                    left: Some(expires_at - now),
                },
                (Some((_, expires_at)), _) => {
                    if queue {
                        entry.queue(token, lease);
                    }
                    Attempt::Held {
                        ttl: Some(expires_at - now),
                        clock_us: mode.is_fair().then_some(clock_us),
                    }
                }
                (None, Mode::Plain { .. }) => Attempt::Acquired {
                    fence: entry.take(token, lease, now, fence_ttl),
                    left: None,
                },
                (None, Mode::Fair { .. }) => {
                    match entry.line.front() {
                        Some(first) if &*first.token != token => {
                            // Free, with someone ahead of the caller: it is theirs.
                            let first_lease = first.lease;
                            handed = entry.hand_over(now, fence_ttl, clock_us);
                            if queue {
                                entry.queue(token, lease);
                            }
                            Attempt::Held {
                                ttl: Some(first_lease),
                                clock_us: Some(clock_us),
                            }
                        }
                        first => {
                            if first.is_some() {
                                entry.line.pop_front();
                            }
                            Attempt::Acquired {
                                fence: entry.take(token, lease, now, fence_ttl),
                                left: None,
                            }
                        }
                    }
                }
            }
        };
        if handed.is_some() {
            self.announce(name, handed);
        }
        attempt
    }

    /// Releases `name` if `token` holds it: to the first in line (`fair`), or free,
    /// waking one waiter.
    pub(crate) fn release(&self, name: &str, token: &str, fair: bool) -> bool {
        self.give_back(name, token, fair, false)
    }

    /// Takes the fair waiter `token` out of `name`'s line, and passes the lock on if it
    /// had been handed over to it. Says whether it had.
    pub(crate) fn leave(&self, name: &str, token: &str) -> bool {
        self.give_back(name, token, true, true)
    }

    fn give_back(&self, name: &str, token: &str, fair: bool, leave: bool) -> bool {
        let now = Instant::now();
        let clock_us = self.clock_us(now);
        let handed = {
            let mut state = self.state();
            let Some(e) = state.entries.get_mut(name) else {
                return false;
            };
            if leave {
                e.line.retain(|p| &*p.token != token);
            }
            if e.live_holder(now).is_none_or(|h| h.token != token) {
                return false;
            }
            e.pass_on(fair, now, self.fence_ttl, clock_us)
        };
        self.announce(name, handed);
        true
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

    /// How many fair waiters are in `name`'s line.
    #[cfg(test)]
    pub(crate) fn line_len(&self, name: &str) -> usize {
        self.state().entries.get(name).map_or(0, |e| e.line.len())
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

    const SEC: Duration = Duration::from_secs(1);

    fn acquired(a: Attempt) -> u64 {
        match a {
            Attempt::Acquired { fence, .. } => fence,
            Attempt::Held { ttl, .. } => panic!("expected to acquire, held for {ttl:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn lease_expiry_frees_the_lock_and_fences_increase() {
        let m = MemoryBackend::new(Duration::from_secs(3600));
        let k: Arc<str> = "k".into();
        let f1 = acquired(m.try_acquire(&k, "a", SEC, Mode::Plain { waits: false }));
        let Attempt::Held { ttl, .. } = m.try_acquire(&k, "b", SEC, Mode::Plain { waits: false })
        else {
            panic!("acquired a held lock");
        };
        assert_eq!(ttl, Some(SEC));
        tokio::time::advance(SEC).await;
        assert!(!m.is_held("k", "a"));
        let f2 = acquired(m.try_acquire(&k, "b", SEC, Mode::Plain { waits: false }));
        assert!(f2 > f1);
        assert!(!m.release("k", "a", false), "a stale owner released");
        assert!(
            !m.extend("k", "a", Duration::from_secs(5)),
            "a stale owner extended"
        );
        assert!(m.is_held("k", "b"));
        assert!(m.release("k", "b", false));
    }

    #[tokio::test(start_paused = true)]
    async fn fence_survives_counter_expiry() {
        let m = MemoryBackend::new(Duration::from_secs(10));
        let k: Arc<str> = "k".into();
        let f1 = acquired(m.try_acquire(&k, "a", SEC, Mode::Plain { waits: false }));
        assert!(m.release("k", "a", false));
        tokio::time::advance(Duration::from_secs(11)).await;
        let f2 = acquired(m.try_acquire(&k, "b", SEC, Mode::Plain { waits: false }));
        assert!(f2 > f1, "{f2} <= {f1}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_fair_release_hands_the_lock_to_the_first_in_line() {
        let m = MemoryBackend::new(Duration::from_secs(3600));
        let k: Arc<str> = "k".into();
        let fair = Mode::Fair { place: SEC };
        let f1 = acquired(m.try_acquire(&k, "a", SEC, fair));
        for waiter in ["b", "c", "b"] {
            let Attempt::Held { clock_us, .. } = m.try_acquire(&k, waiter, SEC * 2, fair) else {
                panic!("{waiter} jumped the line");
            };
            assert!(clock_us.is_some());
        }
        // One attempt, not queued: does not jump the line either.
        assert!(matches!(
            m.try_acquire(
                &k,
                "d",
                SEC,
                Mode::Fair {
                    place: Duration::ZERO
                }
            ),
            Attempt::Held { .. }
        ));
        assert!(m.release("k", "a", true));
        assert!(m.is_held("k", "b"), "handed to the first in line");
        // b missed the hand-over: asking again finds the lock its own.
        tokio::time::advance(Duration::from_millis(500)).await;
        let Attempt::Acquired { fence, left } = m.try_acquire(&k, "b", SEC * 2, fair) else {
            panic!("the hand-over was lost");
        };
        assert!(fence > f1);
        assert_eq!(left, Some(Duration::from_millis(1500)));
        // c gives up before its turn; d was never in line: the lock goes free.
        assert!(!m.leave("k", "c"));
        assert!(m.release("k", "b", true));
        assert!(!m.is_held("k", "c"));
        acquired(m.try_acquire(&k, "d", SEC, Mode::Plain { waits: false }));
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_lock_with_a_line_goes_to_its_first() {
        let m = MemoryBackend::new(Duration::from_secs(3600));
        let k: Arc<str> = "k".into();
        let fair = Mode::Fair { place: SEC };
        acquired(m.try_acquire(&k, "a", SEC, fair));
        assert!(matches!(
            m.try_acquire(&k, "b", SEC, fair),
            Attempt::Held { .. }
        ));
        tokio::time::advance(SEC).await; // a's lease runs out
        assert!(matches!(
            m.try_acquire(&k, "c", SEC, fair),
            Attempt::Held { .. }
        ));
        assert!(m.is_held("k", "b"));
        // b, handed the lock, gives up on it: it goes on to c.
        assert!(m.leave("k", "b"));
        assert!(m.is_held("k", "c"));
    }
}
