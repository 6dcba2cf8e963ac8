//! What an operator sees and does: who holds a lock and how many wait, and forcing it
//! open by deleting its holders' nodes.

use zookeeper_client as zk;

use super::path;
use super::recipe::{LEASES, delete, zxid};
use super::semaphore::{MUTEX, contenders_and_leases, stored_count};
use super::session::Session;
use super::{ZooKeeperStore, failed};
use crate::backend::HolderChanges;
use crate::{HolderInfo, LockError, LockInfo, LockKey, LockKind};

/// Who holds a lock, as its nodes show it.
struct Holding {
    /// The kind, where the nodes tell it.
    kind: Option<LockKind>,
    /// Each holder's node, and its name.
    holders: Vec<(String, String)>,
    /// How many nodes queue behind the holders.
    waiting: usize,
}

impl ZooKeeperStore {
    /// The holders of the lock `key` (see [`holding`]), each with its node's creation
    /// zxid, and the id its node's data names (see [`holder_id`]).
    pub(super) async fn inspect_lock(&self, key: &LockKey) -> Result<Option<LockInfo>, LockError> {
        let session = self.0.sessions.current().await?;
        let store_key = self.store_key(key);
        let Holding {
            kind,
            holders,
            waiting,
        } = holding(&session, &store_key)
            .await
            .map_err(|e| failed(key, "list its nodes", e))?;
        let mut shown = Vec::with_capacity(holders.len());
        for (node, name) in holders {
            let (data, stat) = match session.retry(|| session.client.get_data(&node)).await {
                Ok(read) => read,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(failed(key, "read a holder's node", e)),
            };
            let owner = path::owner_id(&name);
            shown.push(
                HolderInfo::new(owner, None, Some(zxid(stat))).with_holder_id(holder_id(data)),
            );
        }
        if shown.is_empty() {
            return Ok(None);
        }
        Ok(Some(LockInfo::new(kind, shown, Some(waiting))))
    }

    /// Watches the children of the lock `key`'s node, or its creation while it has none:
    /// each fires when a contender comes or goes, which is when its holders may change,
    /// and is set again before the stream yields. The stream ends when it cannot be set
    /// again (the ensemble is out of reach).
    pub(super) async fn watch_lock(&self, key: &LockKey) -> Result<HolderChanges, LockError> {
        let first = self.watch_once(key).await?;
        let (store, key) = (self.clone(), key.clone());
        let changes = futures_util::stream::unfold(Some(first), move |watching| {
            let (store, key) = (store.clone(), key.clone());
            async move {
                watching?.changed().await;
                let next = store.watch_once(&key).await;
                let next = next
                    .inspect_err(|e| tracing::warn!(error = %e, "could not watch a lock again"))
                    .ok();
                Some(((), next))
            }
        });
        Ok(Box::pin(changes))
    }

    /// One watch on the children of the lock `key`'s node, or on its creation.
    async fn watch_once(&self, key: &LockKey) -> Result<zk::OneshotWatcher, LockError> {
        let session = self.0.sessions.current().await?;
        let store_key = self.store_key(key);
        let listed = session
            .retry(|| session.client.list_and_watch_children(&store_key))
            .await;
        match listed {
            Ok((_, watcher)) => Ok(watcher),
            Err(zk::Error::NoNode) => {
                let created = session
                    .retry(|| session.client.check_and_watch_stat(&store_key))
                    .await;
                Ok(created.map_err(|e| failed(key, "watch its node", e))?.1)
            }
            Err(e) => Err(failed(key, "watch its nodes", e)),
        }
    }

    /// Deletes the nodes of the holders of the lock `key` (see [`holding`]): whether
    /// there were any. Their owners' guards report the loss; the waiters next in line are
    /// woken by their watches on the deleted nodes, and keep their places.
    pub(super) async fn force_unlock_lock(&self, key: &LockKey) -> Result<bool, LockError> {
        let session = self.0.sessions.current().await?;
        let store_key = self.store_key(key);
        let Holding { holders, .. } = holding(&session, &store_key)
            .await
            .map_err(|e| failed(key, "list its nodes", e))?;
        let mut forced = false;
        for (node, _) in holders {
            forced |= delete(&session, &node)
                .await
                .map_err(|e| failed(key, "delete a holder's node", e))?;
        }
        Ok(forced)
    }
}

/// The id a holder's node names in its data, as Curator's `LeaderSelector` reads a
/// participant's: none if the data is empty, or is not text.
fn holder_id(data: Vec<u8>) -> Option<String> {
    String::from_utf8(data).ok().filter(|id| !id.is_empty())
}

/// Who holds the lock at `store_key`: the first owner node, or the readers before
/// the first owner, with every other contender waiting; or else, when no other kind
/// contends, the first leases of its semaphore up to its stored count (all of them
/// without one), with the acquirers queued at its mutex waiting.
async fn holding(session: &Session, store_key: &str) -> Result<Holding, zk::Error> {
    let (contenders, leases) = contenders_and_leases(session, store_key).await?;
    let holders = path::holders(&contenders);
    if let Some(first) = holders.first() {
        return Ok(Holding {
            kind: Some(path::kind(&first.name)),
            holders: holders
                .iter()
                .map(|c| (format!("{store_key}/{}", c.name), c.name.clone()))
                .collect(),
            waiting: contenders.len() - holders.len(),
        });
    }
    if leases.is_empty() {
        return Ok(Holding {
            kind: None,
            holders: Vec::new(),
            waiting: 0,
        });
    }
    let count = stored_count(session, store_key).await?;
    let mut leases = path::leases(leases);
    leases.truncate(count.map_or(leases.len(), |count| count as usize));
    Ok(Holding {
        kind: count.map(|permits| LockKind::Semaphore { permits }),
        holders: leases
            .into_iter()
            .map(|name| (format!("{store_key}/{LEASES}/{name}"), name))
            .collect(),
        waiting: queued_at_mutex(session, store_key).await?,
    })
}

/// How many acquirers of the semaphore at `store_key` are queued at its mutex: the
/// first of them waits for room, or is about to release it.
async fn queued_at_mutex(session: &Session, store_key: &str) -> Result<usize, zk::Error> {
    let mutex = format!("{store_key}/{MUTEX}");
    match session.retry(|| session.client.list_children(&mutex)).await {
        Ok(children) => Ok(path::contenders(children).len()),
        Err(zk::Error::NoNode) => Ok(0),
        Err(e) => Err(e),
    }
}
