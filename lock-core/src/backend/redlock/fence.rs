//! Fencing tokens over several masters, each with a counter of its own.
//!
//! A grant's token is the largest of the granting masters' tokens times the number of
//! masters (plus, for readers and permits, which share a lock, the index of the master
//! that drew it, so that they never get the same one), and those of them whose counter
//! is below that largest raise it to it (unless a quorum drew it already), so that the
//! next quorum, which shares a master with this one, draws a larger one. An attempt gives
//! every master the same seed for a new counter, so that a lock's counters start alike
//! and need no raise until they drift apart.
//!
//! So while an owner holds a lock, a quorum of the masters that hold it keep that
//! largest token as their counter (they drew it, or were raised to it), and nothing else
//! draws from their counters: `inspect` reads an owner's token back from them
//! ([`RedLock::owner_fence`]). It could not tell which master drew it, which is why an
//! owner's token carries no index: nobody shares its lock, so it needs none to be its own.

use futures_util::future::join_all;

use super::master::Master;
use super::{PER_MASTER, RedLock};
use crate::LockKind;
use crate::backend::fence::wall_clock_us;
use crate::backend::store::Acquire;
use crate::kind::Sharing;

/// Where a new fence counter starts on every master of an attempt alike: this process's
/// wall clock.
pub(super) fn seed() -> u64 {
    wall_clock_us()
}

impl<M: Master> RedLock<M> {
    /// The fencing token of a grant of `kind` by `granted` (each granting master's index,
    /// and the token it drew).
    pub(super) fn fence(&self, kind: LockKind, granted: &[(usize, u64)]) -> u64 {
        let (i, fence) = granted
            .iter()
            .copied()
            .max_by_key(|&(i, fence)| (fence, i))
            .unwrap_or((0, 0));
        let token = self.owner_fence(fence);
        match kind.sharing() {
            Sharing::Owner => token,
            // Beside other holders of the lock: made its own by the master's index.
            Sharing::Read | Sharing::Permit => token.saturating_add(i as u64),
        }
    }

    /// The fencing token of an owner whose granting masters' largest token was `drawn`.
    pub(super) fn owner_fence(&self, drawn: u64) -> u64 {
        drawn.saturating_mul(self.masters.len() as u64)
    }

    /// Makes the token of a grant by `granted` (the largest of their tokens) the floor of
    /// every later one: each granting master whose counter is below it raises it, within
    /// its share of the lease, unless a quorum of them drew it already. Says whether a
    /// quorum holds it as floor.
    pub(super) async fn fence_raised(&self, request: &Acquire, granted: &[(usize, u64)]) -> bool {
        let needed = self.quorum(request.kind);
        let fence = granted.iter().map(|&(_, fence)| fence).max().unwrap_or(0);
        let at_fence = granted.iter().filter(|&&(_, f)| f == fence).count();
        if at_fence >= needed {
            return true;
        }
        let patience = request.lease / PER_MASTER;
        let raises = granted.iter().filter(|&&(_, f)| f < fence).map(|&(i, _)| {
            let raise = self.masters[i].raise_fence(&request.key, fence, request.lease);
            async move { matches!(tokio::time::timeout(patience, raise).await, Ok(Ok(()))) }
        });
        let raised = join_all(raises).await.into_iter().filter(|&r| r).count();
        at_fence + raised >= needed
    }
}
