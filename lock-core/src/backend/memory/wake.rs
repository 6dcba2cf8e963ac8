//! Whom a change of a lock's state wakes, among the tasks of this process that wait for
//! it, as Redis's release scripts decide whom to notify.

use std::time::Duration;

use tokio::time::Instant;

use super::MemoryStore;
use super::state::{Entry, HandedOver};
use crate::LockKind;
use crate::backend::release::Release;

/// Whom a change of a lock's state wakes, once the state's lock is dropped.
#[derive(Debug)]
pub(super) enum Wake {
    Nobody,
    /// One waiter: one holder went, and one more can come in.
    One,
    /// Every waiter: a change that concerns them all.
    All,
    /// Every waiter but the writers, and the writer that has waited longest: a write, or
    /// the last read, was released.
    AfterWrite(Option<Box<str>>),
    /// The first fair waiter, handed the lock.
    HandedOver(HandedOver),
}

impl Wake {
    /// Whom the release of a holder of `released` from `entry`, as `how` says, wakes: an
    /// exclusive lock wakes one waiter; a fair one is handed to the first in line (at
    /// `now`, stamped `clock_us`), or wakes one if nobody is in line; a write, or the last
    /// read, wakes every waiter but the writers and the writer that has waited longest;
    /// another read nobody; a permit one, and the last permit as the last read does.
    pub(super) fn after_release(
        entry: &mut Entry,
        how: Release,
        released: LockKind,
        now: Instant,
        fence_ttl: Duration,
        clock_us: u64,
    ) -> Wake {
        match (how, released) {
            (Release::Holder(LockKind::Exclusive), _) => Wake::One,
            (Release::Holder(LockKind::Fair) | Release::Leave, _) => {
                match entry.hand_over(now, fence_ttl, clock_us) {
                    Some(handed) => Wake::HandedOver(handed),
                    None => Wake::One,
                }
            }
            (_, LockKind::Read) if !entry.holders.is_empty() => Wake::Nobody,
            (_, LockKind::Semaphore { .. }) if !entry.holders.is_empty() => Wake::One,
            _ => Wake::AfterWrite(entry.next_writer()),
        }
    }
}

impl MemoryStore {
    /// Wakes whom a change of `key`'s state concerns.
    pub(super) fn announce(&self, key: &str, wake: Wake) {
        match wake {
            Wake::Nobody => {}
            Wake::One => {
                self.locks.lines.wake_one(key);
            }
            Wake::All => self.locks.lines.wake_all(key),
            Wake::AfterWrite(next) => self.locks.lines.wake_after_write(key, next.as_deref()),
            Wake::HandedOver((token, handover)) => self.locks.lines.deliver(key, &token, handover),
        }
    }
}
