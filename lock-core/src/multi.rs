//! Several locks taken together, deadlock-free.

use std::fmt;
use std::future::Future;

use tokio::time::Instant;

use crate::{LockError, LockGuard, LockOptions, Locker};

/// Several locks held together, from [`Locker::lock_all`]. The guards are kept in the
/// order they were taken: by key, byte-wise.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use lock_core::{LockOptions, Locker};
///
/// let locker = Locker::in_memory();
/// // transfer(b, a) racing transfer(a, b) cannot deadlock: both take "balance:a" first
/// let both = locker
///     .lock_all(["balance:b", "balance:a", "balance:b"], LockOptions::new())
///     .await?;
/// assert_eq!(both.keys().collect::<Vec<_>>(), ["balance:a", "balance:b"]);
/// let token_of_b = both.get("balance:b").unwrap().fencing_token();
/// # let _ = token_of_b;
/// both.release().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "the locks are released as soon as the guard is dropped"]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.guards).finish()
    }
}

impl MultiGuard {
    /// The guards, by key.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guard of lock `key`, if it is one of these.
    pub fn get(&self, key: &str) -> Option<&LockGuard> {
        self.guards
            .binary_search_by(|g| g.key().cmp(key))
            .ok()
            .map(|i| &self.guards[i])
    }

    /// The keys of the locks, in the order they were taken.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(LockGuard::key)
    }

    /// The largest fencing token among the locks.
    pub fn fencing_token(&self) -> u64 {
        self.guards
            .iter()
            .map(LockGuard::fencing_token)
            .max()
            .unwrap_or_default()
    }

    /// Resolves when any of the leases is lost.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let signals: Vec<_> = self.guards.iter().map(LockGuard::lost).collect();
        async move {
            let mut signals: Vec<_> = signals.into_iter().map(Box::pin).collect();
            std::future::poll_fn(|cx| {
                if signals.is_empty() {
                    // Nothing held, nothing to lose.
                    return std::task::Poll::Pending;
                }
                for s in &mut signals {
                    if s.as_mut().poll(cx).is_ready() {
                        return std::task::Poll::Ready(());
                    }
                }
                std::task::Poll::Pending
            })
            .await;
        }
    }

    /// Runs `fut` while all the locks are held: if any lease is lost first, `fut` is
    /// dropped and the result is [`LockError::Lost`] for that lock.
    pub async fn scope<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        let lost = self.lost();
        tokio::select! {
            biased;
            () = lost => {
                let key = self
                    .guards
                    .iter()
                    .find(|g| g.is_lost())
                    .map_or_else(String::new, |g| g.key().to_owned());
                Err(LockError::Lost { key })
            }
            out = fut => Ok(out),
        }
    }

    /// Releases every lock, in reverse order; the first error, if any, after all were
    /// tried.
    pub async fn release(self) -> Result<(), LockError> {
        let mut first_error = None;
        for guard in self.guards.into_iter().rev() {
            if let Err(e) = guard.release().await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Locker {
    /// Takes several locks together. The keys are de-duplicated and taken in byte-wise
    /// order, so every caller takes any two of them in the same order and none can
    /// deadlock with another. The wait in `opts` bounds the whole acquisition; on any
    /// failure the locks already taken are released.
    pub async fn lock_all<I, S>(&self, keys: I, opts: LockOptions) -> Result<MultiGuard, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut keys: Vec<String> = keys.into_iter().map(|k| k.as_ref().to_owned()).collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Err(LockError::Config("lock_all needs at least one key".into()));
        }
        for key in &keys {
            crate::key::check(key, self.max_key_len())?;
        }
        let deadline = Instant::now() + opts.wait.unwrap_or(self.default_wait());
        let mut guards = Vec::with_capacity(keys.len());
        for key in &keys {
            let opts = opts.wait(deadline.saturating_duration_since(Instant::now()));
            match self.lock_with(key, opts).await {
                Ok(guard) => guards.push(guard),
                Err(e) => {
                    MultiGuard { guards }.release().await.ok();
                    return Err(e);
                }
            }
        }
        Ok(MultiGuard { guards })
    }

    /// Runs `fut` under several locks taken with [`lock_all`](Self::lock_all), and
    /// releases them after. If any lease is lost while `fut` runs, `fut` is dropped and
    /// the result is [`LockError::Lost`].
    pub async fn with_locks<I, S, F>(
        &self,
        keys: I,
        opts: LockOptions,
        fut: F,
    ) -> Result<F::Output, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
        F: Future,
    {
        let guards = self.lock_all(keys, opts).await?;
        let out = guards.scope(fut).await?;
        if let Err(e) = guards.release().await {
            tracing::warn!(error = %e, "release after with_locks failed");
        }
        Ok(out)
    }
}
