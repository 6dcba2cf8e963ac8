//! How a lock is released, as every store of this crate says it: each maps a [`Release`]
//! to its own script (Redis) or state change (memory). RedLock releases through its
//! masters, which are such stores.

use crate::LockKind;

/// How a lock is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// By its holder, which took it as this kind: an exclusive lock goes free, waking one
    /// waiter; a fair one goes to the next in line; a write, or the last read, wakes every
    /// waiter but the writers and the writer that has waited longest (a write release
    /// also takes its writer out of those waiting to write); a permit wakes one.
    Holder(LockKind),
    /// A fair waiter leaves the line, and releases the lock if it was handed over to it.
    Leave,
}
