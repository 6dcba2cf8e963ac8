//! What an operator sees and does: who holds a lock and how many wait, and forcing it
//! open by deleting its holders' nodes.

use super::path;
use super::recipe::{LEASES, delete, zxid};
use super::semaphore::{contenders_and_leases, stored_count};
use super::{ZooKeeperStore, failed};
use crate::{HolderInfo, LockError, LockInfo, LockKey, LockKind};

impl ZooKeeperStore {
    /// The holders of the lock `key`, each with its node's creation zxid: the first
    /// owner node, or the readers before the first owner, with every other contender
    /// waiting; or else the first leases of its semaphore up to its count, with the
    /// others waiting.
    pub(super) async fn inspect_lock(&self, key: &LockKey) -> Result<Option<LockInfo>, LockError> {
        let session = self.0.sessions.current().await?;
        let dir = self.lock_path(key);
        let (contenders, leases) = contenders_and_leases(&session, &dir)
            .await
            .map_err(|e| failed(key, "list its nodes", e))?;
        let holding = path::holders(&contenders);
        let (kind, holding, waiting) = if let Some(first) = holding.first() {
            let names: Vec<String> = holding.iter().map(|c| c.name.clone()).collect();
            let waiting = contenders.len() - holding.len();
            (Some(path::kind(&first.name)), names, waiting)
        } else if !leases.is_empty() {
            let count = stored_count(&session, &dir)
                .await
                .map_err(|e| failed(key, "read its count", e))?;
            let mut leases = path::leases(leases);
            let held = count.map_or(leases.len(), |count| leases.len().min(count as usize));
            let waiting = leases.len() - held;
            leases.truncate(held);
            let kind = count.map(|permits| LockKind::Semaphore { permits });
            let names = leases;
            (kind, names, waiting)
        } else {
            return Ok(None);
        };
        let mut holders = Vec::with_capacity(holding.len());
        for name in holding {
            let node = if kind.is_some_and(|k| matches!(k, LockKind::Semaphore { .. })) {
                format!("{dir}/{LEASES}/{name}")
            } else {
                format!("{dir}/{name}")
            };
            let stat = session
                .retry(|| session.client.check_stat(&node))
                .await
                .map_err(|e| failed(key, "read a holder's node", e))?;
            if let Some(stat) = stat {
                holders.push(HolderInfo::new(
                    path::owner_id(&name),
                    None,
                    Some(zxid(stat)),
                ));
            }
        }
        if holders.is_empty() {
            return Ok(None);
        }
        Ok(Some(LockInfo::new(kind, holders, Some(waiting))))
    }

    /// Deletes the nodes of the holders of the lock `key`, and its semaphore's leases:
    /// whether there were any. Their owners' guards report the loss; the waiters next in
    /// line are woken by their watches on the deleted nodes.
    pub(super) async fn force_unlock_lock(&self, key: &LockKey) -> Result<bool, LockError> {
        let session = self.0.sessions.current().await?;
        let dir = self.lock_path(key);
        let (contenders, leases) = contenders_and_leases(&session, &dir)
            .await
            .map_err(|e| failed(key, "list its nodes", e))?;
        let holders = path::holders(&contenders)
            .iter()
            .map(|c| format!("{dir}/{}", c.name));
        let leases = leases.iter().map(|name| format!("{dir}/{LEASES}/{name}"));
        let mut forced = false;
        for node in holders.chain(leases) {
            forced |= delete(&session, &node)
                .await
                .map_err(|e| failed(key, "delete a holder's node", e))?;
        }
        Ok(forced)
    }
}
