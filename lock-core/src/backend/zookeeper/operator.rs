//! What an operator sees and does: who holds a lock and how many wait, and forcing it
//! open by deleting its holders' nodes.

use zookeeper_client as zk;

use super::path::{self, Contender};
use super::recipe::{delete, zxid};
use super::session::Session;
use super::{ZooKeeperStore, failed};
use crate::{HolderInfo, LockError, LockInfo, LockKey};

impl ZooKeeperStore {
    /// The holders of the lock `key` (the first owner node, or the readers before the
    /// first owner), each with its node's creation zxid, and every other contender as a
    /// waiter.
    pub(super) async fn inspect_lock(&self, key: &LockKey) -> Result<Option<LockInfo>, LockError> {
        let session = self.0.sessions.current().await?;
        let dir = self.lock_path(key);
        let contenders = contenders(&session, &dir)
            .await
            .map_err(|e| failed(key, "list its nodes", e))?;
        let holding = path::holders(&contenders);
        let Some(first) = holding.first() else {
            return Ok(None);
        };
        let mut holders = Vec::with_capacity(holding.len());
        for holder in holding {
            let node = format!("{dir}/{}", holder.name);
            let stat = session
                .retry(|| session.client.check_stat(&node))
                .await
                .map_err(|e| failed(key, "read a holder's node", e))?;
            if let Some(stat) = stat {
                let owner = path::owner_id(&holder.name);
                holders.push(HolderInfo::new(owner, None, Some(zxid(stat))));
            }
        }
        if holders.is_empty() {
            return Ok(None);
        }
        let waiting = contenders.len() - holding.len();
        Ok(Some(LockInfo::new(
            Some(path::kind(&first.name)),
            holders,
            Some(waiting),
        )))
    }

    /// Deletes the nodes of the holders of the lock `key`: whether there were any. Their
    /// owners' guards report the loss; the waiters next in line are woken by the watches
    /// on the deleted nodes.
    pub(super) async fn force_unlock_lock(&self, key: &LockKey) -> Result<bool, LockError> {
        let session = self.0.sessions.current().await?;
        let dir = self.lock_path(key);
        let contenders = contenders(&session, &dir)
            .await
            .map_err(|e| failed(key, "list its nodes", e))?;
        let mut forced = false;
        for holder in path::holders(&contenders) {
            let node = format!("{dir}/{}", holder.name);
            forced |= delete(&session, &node)
                .await
                .map_err(|e| failed(key, "delete a holder's node", e))?;
        }
        Ok(forced)
    }
}

/// The contenders for the lock whose node is `dir`, in order; none if it has no node.
async fn contenders(session: &Session, dir: &str) -> Result<Vec<Contender>, zk::Error> {
    match session.retry(|| session.client.list_children(dir)).await {
        Ok(children) => Ok(path::contenders(children)),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}
