//! What RedLock asks of each of its masters: a [`Store`], waited on the client side
//! ([`ClientWait`]), with the few things more that one lock over several stores needs.
//!
//! `Store` alone is not enough, for these:
//!
//! - **One attempt, not a wait**: RedLock waits itself, once for all its masters, and
//!   makes attempts; `Store::acquire` waits until a deadline.
//! - **A given fence seed**: every master of an attempt starts a new fence counter at the
//!   same value, so that their tokens agree and need no raise.
//! - **A late grant is not given back**: an attempt cut short leaves what it may have
//!   taken to RedLock, which keeps a late grant of a lock a quorum granted (the guard
//!   renews and releases it on every master) and gives back the others. A store's own
//!   acquire releases it.
//! - **Raising a fence counter** to a token drawn by another master, so that the next
//!   quorum, which shares a master with this one, draws a larger one.
//! - **Holders by their whole token**, by which RedLock matches them across masters;
//!   `Store::inspect` shows a token's prefix alone.
//! - **Wake-ups into RedLock's own lines**, which every master wakes, and **leaving a
//!   line**: what a waiter that gave up leaves behind on each master.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::store::{Acquire, Store};
use crate::backend::wait::{Attempt, ClientWait, Left};
use crate::{LockError, LockKey, LockKind};

/// One of RedLock's masters. Its [`ClientWait`] side says how RedLock's waiters wait
/// for wake-ups and how often they poll (the first master's say, for all).
pub(crate) trait Master: Store + ClientWait {
    /// One attempt at `request`'s lock, as [`ClientWait::attempt`] makes it, by a caller
    /// that waits `waits_for` more; a fence counter it starts begins at `seed`. Should
    /// the future be dropped before it answers, what it may have taken is left to the
    /// caller.
    fn attempt_seeded<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
        seed: u64,
    ) -> impl Future<Output = Result<Attempt, LockError>> + Send + 'a;

    /// Raises lock `key`'s fence counter to at least `fence`, so that every later token
    /// of this master exceeds it; a counter it starts is kept at least `lease`.
    fn raise_fence<'a>(
        &'a self,
        key: &'a LockKey,
        fence: u64,
        lease: Duration,
    ) -> impl Future<Output = Result<(), LockError>> + Send + 'a;

    /// Who holds lock `key` on this master, if anyone, read without changing anything.
    fn holders<'a>(
        &'a self,
        key: &'a LockKey,
    ) -> impl Future<Output = Result<Option<Holders>, LockError>> + Send + 'a;

    /// The key of lock `key`'s line in RedLock's lines: the one this master's wake-ups
    /// for it go to.
    fn line_key(&self, key: &LockKey) -> Arc<str>;

    /// A waiter is about to join one of RedLock's lines: this master makes sure it can
    /// deliver wake-ups (Redis: its pub/sub hub runs, started again after a close).
    /// Called outside the lines' lock.
    fn ready_to_listen(&self);

    /// RedLock's first waiter for the lock of line `line_key` joined: this master
    /// delivers its wake-ups from now on. Called under the lines' lock, so that what it
    /// asks for keeps the order of joins and leaves.
    fn listen(&self, line_key: &Arc<str>);

    /// A waiter left its line: this master gives up, in the background, what it leaves
    /// behind here (its place among a lock's waiting writers).
    fn leave_line(&self, left: &Left<'_, Self::Listening>);

    /// RedLock's last waiter for the lock of line `line_key` left, as `last` says: this
    /// master stops delivering its wake-ups, and forgets that RedLock waits for it.
    /// Called under the lines' lock, as [`listen`](Self::listen) is.
    fn stop_listening(&self, line_key: &Arc<str>, last: LastWaiter);
}

/// A lock as one master shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holders {
    /// The kind it is held as, where the master knows it.
    pub(crate) kind: Option<LockKind>,
    /// Each holder's whole token, and its lease left.
    pub(crate) holders: Vec<(String, Option<Duration>)>,
    /// How many wait for it, as this master counts them (Redis: the `Locker`s it would
    /// wake).
    pub(crate) waiting: usize,
    /// An owner's fence counter as this master keeps it, where it does: the token it drew
    /// for the owner, or the one RedLock raised it to since. `None` for shared holds.
    pub(crate) fence: Option<u64>,
    /// What an owner calls itself, if it named itself.
    pub(crate) holder_id: Option<String>,
}

/// How the last waiter of a lock left RedLock's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastWaiter {
    /// With the lock: the release that let it in woke RedLock, which took it off those
    /// a release wakes.
    TookIt,
    /// Without it: nobody here waits any more.
    GaveUp,
}
