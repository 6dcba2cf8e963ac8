//! The contract itself: the [`Store`] trait and what passes through it. See the
//! [module docs](super) for what an implementation promises.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::{LockError, LockInfo, LockKey, LockKind};

/// The future a store's call returns: boxed, so that stores can sit behind `dyn Store`.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LockError>> + Send + 'a>>;

/// Where locks live. See the [module docs](crate::backend) for what an implementation
/// promises.
pub trait Store: Any + fmt::Debug + Send + Sync {
    /// A short name for messages, such as `"redis"` or `"memory"`.
    fn name(&self) -> &str;

    /// Whether this store can hold locks of `kind`.
    fn supports(&self, kind: LockKind) -> bool;

    /// Takes the lock `request.key` for `request.token`, waiting for it until
    /// `request.deadline`: [`Outcome::Acquired`] with its fencing token, or
    /// [`Outcome::Held`] if someone else still held it at the deadline.
    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome>;

    /// Gives the hold back: `Ok(true)` if it was still held, `Ok(false)` (changing
    /// nothing) if it was not, because its lease ran out or its session ended.
    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool>;

    /// Sets each lease to run [`Renewal::lease`] from now, in one batch where the store
    /// can: for each, `Some` with the local instant by which its lease runs out (no later
    /// than the store will free it), or `None` if the hold is no longer its owner's.
    /// Only holds acquired as [`Acquired::lease`] are renewed.
    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>>;

    /// Whether the hold is still its owner's.
    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool>;

    /// How many permits of the semaphore `key` are free now. `permits` is the count the
    /// caller's handle was made with, which is the answer for a semaphore not in use (its
    /// stored count, if any, wins); a key held as another kind has none free. Stores
    /// that [support](Store::supports) semaphores implement it; the default answers
    /// [`LockError::Unsupported`].
    fn available<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, u32> {
        Box::pin(std::future::ready(Err(unsupported(
            self,
            key,
            LockKind::Semaphore { permits },
        ))))
    }

    /// Stores `permits` as the count of the semaphore `key`. Holders above a lowered
    /// count keep their permits until they release them; no permit is granted until
    /// fewer hold one than the new count. Stores that [support](Store::supports)
    /// semaphores implement it; the default answers [`LockError::Unsupported`].
    fn set_permits<'a>(&'a self, key: &'a LockKey, permits: u32) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(Err(unsupported(
            self,
            key,
            LockKind::Semaphore { permits },
        ))))
    }

    /// Frees the lock `key` whoever holds it, and says whether anyone did: every holder
    /// (owner, readers, permits) loses its hold, which its next renewal finds, and every
    /// waiter is woken. For [`Locker::force_unlock`](crate::Locker::force_unlock); the
    /// default answers [`LockError::Config`], naming the store.
    fn force_unlock<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, bool> {
        let _ = key;
        let reason = format!("the {} store cannot force a lock open", self.name());
        Box::pin(std::future::ready(Err(LockError::Config(reason))))
    }

    /// Who holds the lock `key` now, and how many wait for it: `None` when nobody holds
    /// it. For [`Locker::inspect`](crate::Locker::inspect), whose docs say what each
    /// store reports; a field the store cannot know is `None`, and each holder is shown
    /// by its token's prefix alone ([`HolderInfo::new`](crate::HolderInfo::new) keeps no
    /// more). Changes nothing. The default answers [`LockError::Config`], naming the
    /// store.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, Option<LockInfo>> {
        let _ = key;
        let reason = format!("the {} store cannot inspect a lock", self.name());
        Box::pin(std::future::ready(Err(LockError::Config(reason))))
    }

    /// Watches who holds the lock `key`, for a follower of an election
    /// ([`Election::watch`](crate::Election::watch)): resolves once the watch is set, with
    /// a stream that yields each time the holders may have changed (a hold taken,
    /// released or ended) since it was set or last yielded, so that the follower inspects
    /// the lock again. A store that sets its watch anew after each change yields only once
    /// it has, so that no change after the follower's next look goes unseen. A store may
    /// tell only of holds taken with a holder id ([`Acquire::holder_id`]), which every
    /// election's are. A stream that ends watches no more (its connection was lost): the
    /// follower sets another. The default, for a store that cannot push such news, never
    /// yields, and the follower asks every [interval](crate::Election::watch_interval)
    /// instead.
    fn watch_holders<'a>(&'a self, key: &'a LockKey) -> StoreFuture<'a, HolderChanges> {
        let _ = key;
        let never: HolderChanges = Box::pin(futures_util::stream::pending());
        Box::pin(std::future::ready(Ok(never)))
    }

    /// Waits until the work this store started in the background has finished (such as
    /// giving back a lock whose acquire was cut short). Nothing, unless the store says
    /// otherwise.
    fn flush(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::ready(()))
    }

    /// The last [`Locker`](crate::Locker) on this store is gone: stops the background
    /// tasks that served its waiters (such as a pub/sub listener). Guards may outlive it
    /// and still release their holds through the store; a store shared with another
    /// `Locker` starts its tasks again when that one next needs them. Nothing, unless the
    /// store says otherwise.
    fn close(&self) {}
}

/// What [`Store::watch_holders`] gives: a stream that yields each time the holders of a
/// lock may have changed.
pub type HolderChanges = Pin<Box<dyn futures_util::Stream<Item = ()> + Send>>;

/// The error of a store asked for a lock `kind` it does not have.
pub(crate) fn unsupported<S: Store + ?Sized>(
    store: &S,
    key: &LockKey,
    kind: LockKind,
) -> LockError {
    LockError::Unsupported {
        key: key.to_string(),
        store: store.name().to_owned(),
        kind,
    }
}

/// A request to take a lock.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Acquire {
    /// The lock.
    pub key: LockKey,
    /// The owner's token: random, one per acquisition. Only it releases or renews the
    /// hold. Shared: a store can keep a clone as long as it needs.
    pub token: Arc<str>,
    /// The kind asked for; always one the store [supports](Store::supports).
    pub kind: LockKind,
    /// For a lease store, how long the hold lasts unless renewed.
    pub lease: Duration,
    /// What the holder calls itself, for anyone who [inspects](Store::inspect) the lock
    /// to read back in [`HolderInfo::holder_id`](crate::HolderInfo::holder_id): an
    /// election candidate's id. At most [`MAX_HOLDER_ID_LEN`](crate::MAX_HOLDER_ID_LEN)
    /// bytes; `None` for a plain lock. A store that keeps it stores it with the hold, so
    /// that a process holding nothing reads it.
    pub holder_id: Option<Arc<str>>,
    /// Until when to wait for a held lock. An attempt made at or after it is the only one.
    pub deadline: Instant,
    /// When the caller began to ask. A store that prefers writers reckons from it which
    /// of a waiting reader and a waiting writer asked first.
    pub since: Instant,
}

/// How an acquire ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// The lock is the caller's.
    Acquired(Acquired),
    /// Someone else held it until the deadline: for this much longer, if the store knows.
    Held {
        /// The holder's lease left at the last attempt.
        holder_ttl: Option<Duration>,
    },
}

/// A lock taken: its fencing token, and how the hold ends.
#[non_exhaustive]
pub struct Acquired {
    /// Strictly greater than the fencing token of every earlier acquisition of the key.
    pub fence: u64,
    /// How the hold ends.
    pub expiry: Expiry,
}

/// How a hold ends, other than by its release.
#[non_exhaustive]
pub enum Expiry {
    /// A lease: the store frees the lock unless it is renewed, at the earliest at this
    /// local instant.
    Lease(Instant),
    /// A session: the hold lasts as long as its session, and this future resolves when
    /// the session ends without the hold's release.
    Session(Pin<Box<dyn Future<Output = ()> + Send>>),
}

impl Acquired {
    /// A lock held by a lease that runs out at `until` (a local instant no later than the
    /// store will free it: reckon it from when the acquiring command was sent).
    pub fn lease(fence: u64, until: Instant) -> Self {
        Self {
            fence,
            expiry: Expiry::Lease(until),
        }
    }

    /// Whether it came with a lease that has run out already.
    pub(crate) fn ran_out(&self) -> bool {
        matches!(self.expiry, Expiry::Lease(until) if until <= Instant::now())
    }

    /// A lock held as long as a session; `lost` resolves if the session ends (expired,
    /// connection dropped) while the hold lasts.
    pub fn session(fence: u64, lost: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            fence,
            expiry: Expiry::Session(Box::pin(lost)),
        }
    }
}

impl fmt::Debug for Acquired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquired")
            .field("fence", &self.fence)
            .field("expiry", &self.expiry)
            .finish()
    }
}

impl fmt::Debug for Expiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lease(until) => f.debug_tuple("Lease").field(until).finish(),
            Self::Session(_) => f.write_str("Session"),
        }
    }
}

/// A hold, as the store knows it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Hold<'a> {
    /// The lock.
    pub key: &'a LockKey,
    /// The owner's token, as in its [`Acquire`].
    pub token: &'a str,
    /// The kind it was taken as.
    pub kind: LockKind,
    /// Its fencing token.
    pub fence: u64,
    /// What the holder calls itself, as in its [`Acquire`]: a store that keeps it beside
    /// the hold renews and releases it with the hold. `None` for a plain lock.
    pub holder_id: Option<&'a str>,
}

/// A lease to renew.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Renewal<'a> {
    /// The hold.
    pub hold: Hold<'a>,
    /// How long from now the lease is to run.
    pub lease: Duration,
}
