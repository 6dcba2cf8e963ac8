//! Per-call settings.

use std::time::Duration;

use crate::{LockError, LockKind};

/// The lease a lock gets unless told otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// How long `lock` waits for a held lock unless told otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);
/// The shortest lease accepted.
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// How long a lock's fence counter is kept after its last use, unless told otherwise.
pub const DEFAULT_FENCE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// How one acquisition waits, how long its lease runs, and the kind of lock it takes.
/// Unset fields take the [`Locker`](crate::Locker)'s defaults.
///
/// ```
/// use std::time::Duration;
/// use lock_core::{LockKind, LockOptions};
///
/// let opts = LockOptions::new()
///     .wait(Duration::from_secs(2))       // give up after 2 s
///     .lease(Duration::from_secs(5))      // each lease runs 5 s ...
///     .watchdog(true)                     // ... and is renewed while the guard lives
///     .kind(LockKind::Exclusive);         // the default kind
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    pub(crate) watchdog: bool,
    pub(crate) kind: LockKind,
    pub(crate) label: Option<&'static str>,
    pub(crate) hold_at_least: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// The Locker's defaults, watchdog on, an exclusive lock.
    pub fn new() -> Self {
        Self {
            wait: None,
            lease: None,
            watchdog: true,
            kind: LockKind::Exclusive,
            label: None,
            hold_at_least: Duration::ZERO,
        }
    }

    /// How long to wait for a held lock. The call returns by the end of the wait,
    /// whatever the backend does meanwhile: [`LockError::Timeout`] if the lock was still
    /// held, [`LockError::Backend`] if the backend had not answered at all.
    /// `Duration::ZERO` makes exactly one attempt, as long as the backend takes to answer
    /// or fail.
    pub fn wait(mut self, d: Duration) -> Self {
        self.wait = Some(d);
        self
    }

    /// How long each lease runs. While the watchdog is on, the lease is renewed every
    /// third of it; with the watchdog off the lock simply expires after it.
    pub fn lease(mut self, d: Duration) -> Self {
        self.lease = Some(d);
        self
    }

    /// Whether to keep renewing the lease while the guard lives (default: on).
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// The kind of lock to take (default: [`LockKind::Exclusive`]).
    pub fn kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

    /// Wait in line: `fair(true)` is [`kind(LockKind::Fair)`](Self::kind), and
    /// `fair(false)` turns a fair lock back into an exclusive one. A fair lock goes to its
    /// waiters in the order they asked, across every process, and a release hands it
    /// straight to the next in line (no race, and one message wakes one waiter). Without
    /// it, whoever asks first after a release wins.
    ///
    /// Fair and exclusive holds of one key exclude each other, but an exclusive one does
    /// not queue: it takes the lock whenever it finds it free. A waiter's place in line
    /// (on Redis) lasts 5 s and is renewed while it waits, so a waiter that dies is
    /// skipped after at most that; were the lock handed to it first, it stays held until
    /// its lease runs out, as with any holder that dies.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// use lock_core::{LockOptions, Locker};
    ///
    /// let locker = Locker::in_memory();
    /// let guard = locker.lock_with("report:daily", LockOptions::new().fair(true)).await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair(mut self, on: bool) -> Self {
        if on {
            self.kind = LockKind::Fair;
        } else if self.kind == LockKind::Fair {
            self.kind = LockKind::Exclusive;
        }
        self
    }

    /// What the lock is, for metrics and traces: the template its key is made from
    /// (`"balance:{id}"`), so that every account's lock is counted under one name. The
    /// attribute and the layer set it from their templates. Never the key itself: each
    /// key would make metric series of its own.
    ///
    /// ```
    /// use lock_core::LockOptions;
    ///
    /// let opts = LockOptions::new().label("balance:{id}");
    /// # let _ = opts;
    /// ```
    pub fn label(mut self, template: &'static str) -> Self {
        self.label = Some(template);
        self
    }

    /// Keeps the lock held until `d` has passed since it was taken, even when its guard
    /// is released sooner (default: zero, release at once). A job that every replica
    /// fires at the same minute so runs once, however far apart (up to `d`) their clocks
    /// fire it: the replicas that ask later find it held and skip it (with no wait).
    ///
    /// A release before `d` gives nothing back: on a lease store (memory, Redis,
    /// RedLock) the lease is set to run out when `d` has passed, and nothing renews it;
    /// on a session store (ZooKeeper, PostgreSQL, MySQL) the hold stays in its session
    /// and this process releases it when `d` has passed. A session ends with its process,
    /// so there the hold lasts at most until the process exits (and its session's lease
    /// runs out).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// use std::time::Duration;
    /// use lock_core::{LockOptions, Locker};
    ///
    /// let locker = Locker::in_memory();
    /// let once = LockOptions::new().wait(Duration::ZERO).hold_at_least(Duration::from_secs(30));
    /// let guard = locker.lock_with("job:nightly", once).await?;
    /// guard.release().await?; // the job ran; the lock stays held for the rest of the 30 s
    /// let other = locker.clone();
    /// let late = tokio::spawn(async move { other.try_lock_with("job:nightly", once).await });
    /// assert!(late.await.unwrap()?.is_none(), "a replica firing late skips the job");
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_at_least(mut self, d: Duration) -> Self {
        self.hold_at_least = d;
        self
    }

    pub(crate) fn resolve(self, defaults: &Defaults) -> Result<Resolved, LockError> {
        let lease = self.lease.unwrap_or(defaults.lease);
        if lease < MIN_LEASE {
            return Err(LockError::Config(format!(
                "lease must be at least {MIN_LEASE:?}, got {lease:?}"
            )));
        }
        if let LockKind::Semaphore { permits } = self.kind {
            check_permits(permits)?;
        }
        Ok(Resolved {
            wait: self.wait.unwrap_or(defaults.wait),
            lease,
            watchdog: self.watchdog,
            kind: self.kind,
            label: self.label,
            hold_at_least: self.hold_at_least,
        })
    }
}

/// Refuses a semaphore count of zero, which could never admit anyone.
pub(crate) fn check_permits(permits: u32) -> Result<(), LockError> {
    if permits == 0 {
        return Err(LockError::Config(
            "a semaphore needs at least one permit, got 0".into(),
        ));
    }
    Ok(())
}

/// The fence counter expiry given to a store (Redis or memory), or the default; at least a
/// second.
pub(crate) fn fence_ttl(given: Option<Duration>) -> Result<Duration, LockError> {
    let fence_ttl = given.unwrap_or(DEFAULT_FENCE_TTL);
    if fence_ttl < Duration::from_secs(1) {
        return Err(LockError::Config(format!(
            "fence ttl must be at least 1s, got {fence_ttl:?}"
        )));
    }
    Ok(fence_ttl)
}

/// A Locker's defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Defaults {
    pub(crate) lease: Duration,
    pub(crate) wait: Duration,
}

/// Options with every default filled in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolved {
    pub(crate) wait: Duration,
    pub(crate) lease: Duration,
    pub(crate) watchdog: bool,
    pub(crate) kind: LockKind,
    pub(crate) label: Option<&'static str>,
    pub(crate) hold_at_least: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: Defaults = Defaults {
        lease: DEFAULT_LEASE,
        wait: DEFAULT_WAIT,
    };

    #[test]
    fn unset_fields_take_defaults() {
        let r = LockOptions::new().resolve(&DEFAULTS).unwrap();
        assert_eq!(
            (r.wait, r.lease, r.watchdog),
            (DEFAULT_WAIT, DEFAULT_LEASE, true)
        );
        let r = LockOptions::new()
            .wait(Duration::ZERO)
            .lease(Duration::from_secs(1))
            .watchdog(false)
            .resolve(&DEFAULTS)
            .unwrap();
        assert_eq!(
            (r.wait, r.lease, r.watchdog),
            (Duration::ZERO, Duration::from_secs(1), false)
        );
    }

    #[test]
    fn fair_is_a_shorthand_for_the_fair_kind() {
        let fair = LockOptions::new().fair(true);
        assert_eq!(fair.kind, LockKind::Fair);
        assert_eq!(fair.fair(false).kind, LockKind::Exclusive);
        let read = LockOptions::new().kind(LockKind::Read);
        assert_eq!(
            read.fair(false).kind,
            LockKind::Read,
            "not fair: left alone"
        );
    }

    #[test]
    fn a_semaphore_without_permits_is_refused() {
        let err = LockOptions::new()
            .kind(LockKind::Semaphore { permits: 0 })
            .resolve(&DEFAULTS)
            .unwrap_err();
        assert!(err.is_config(), "{err}");
        assert!(err.to_string().contains("at least one permit"), "{err}");
    }

    #[test]
    fn tiny_lease_is_refused() {
        let err = LockOptions::new()
            .lease(Duration::from_millis(1))
            .resolve(&DEFAULTS)
            .unwrap_err();
        assert!(err.is_config(), "{err}");
    }
}
