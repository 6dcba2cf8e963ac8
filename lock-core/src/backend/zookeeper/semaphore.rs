//! Semaphores by the protocol of Curator's `InterProcessSemaphoreV2`, so that its
//! acquirers and ours take turns in one queue. An acquirer of a permit of the lock whose
//! store key (its node's path) is `{store_key}`:
//!
//! 1. takes the mutex on `{store_key}/locks`: the exclusive recipe of
//!    [`recipe`](super::recipe) on that node;
//! 2. creates its lease, `{store_key}/leases/_c_{uuid}-lease-{seq}`;
//! 3. still holding the mutex, waits until there are no more leases than the count,
//!    watching the leases (and the count);
//! 4. releases the mutex.
//!
//! The lease then holds its permit until it is deleted; its creation zxid is the fencing
//! token. The count is the data of the lock's own node `{store_key}`, which Curator never
//! reads (its count is an argument, or a `SharedCount` elsewhere): stored on first use,
//! and gone with the node once the semaphore is idle. Leases and the lock's other kinds
//! take turns in the order they were made, by creation zxid: a lease waits until no node
//! of another kind made before it is left, and such a node waits until no lease made
//! before it is left, so neither side can keep the other out for long.

use tokio::time::{Instant, sleep_until};
use zookeeper_client as zk;

use super::path::{self, Contender};
use super::recipe::{LEASES, Pending, create, list_both, still_live, zxid};
use super::session::Session;
use super::{ZooKeeperStore, failed};
use crate::backend::store::{Acquire, Acquired, Outcome};
use crate::{LockError, LockKey, LockKind};

/// The child of a lock's node on which its semaphore's acquirers take their turns
/// (Curator's `InterProcessSemaphoreV2` takes an `InterProcessMutex` there).
pub(super) const MUTEX: &str = "locks";

/// How a lock's node is made when a count is stored before any hold made it.
const PARENT: zk::CreateOptions<'static> =
    zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());

impl ZooKeeperStore {
    /// Takes a permit of the semaphore `request.key` on `session`, whose count the
    /// caller gives as `permits`: stored on first use, and [`LockError::Config`] if
    /// another is stored.
    pub(super) async fn acquire_permit(
        &self,
        session: &Session,
        request: &Acquire,
        permits: u32,
    ) -> Result<Outcome, LockError> {
        let key = &request.key;
        let store_key = self.store_key(key);
        keep_count(session, &store_key, key, permits).await?;
        let mutex = format!("{store_key}/{MUTEX}");
        let prefix = path::node_prefix(&request.token, LockKind::Exclusive);
        let taken = self.take_turn(session, &mutex, prefix, &[], request);
        let Some((mut mutex, _)) = taken.await? else {
            return Ok(Outcome::Held { holder_ttl: None });
        };
        let prefix = path::node_prefix(&request.token, request.kind);
        let mut lease = Pending::new(self, session, &format!("{store_key}/{LEASES}"), prefix);
        let room = wait_for_room(session, &store_key, &mut lease, permits, request.deadline)
            .await
            .map_err(|e| failed(key, "wait for a permit", e))?;
        if room.is_none() {
            lease
                .delete()
                .await
                .map_err(|e| failed(key, "give up its lease", e))?;
        }
        mutex
            .delete()
            .await
            .map_err(|e| failed(key, "release its mutex", e))?;
        let Some(fence) = room else {
            return Ok(Outcome::Held { holder_ttl: None });
        };
        still_live(session, request)?;
        let lost = self
            .0
            .holds
            .insert(&request.token, session.clone(), lease.hold());
        Ok(Outcome::Acquired(Acquired::session(fence, lost)))
    }

    /// The permits of the semaphore `key` free now: its stored count (or `permits`)
    /// less its leases; none while another kind holds the key.
    pub(super) async fn available_permits(
        &self,
        key: &LockKey,
        permits: u32,
    ) -> Result<u32, LockError> {
        let session = self.0.sessions.current().await?;
        let store_key = self.store_key(key);
        let (contenders, leases) = contenders_and_leases(&session, &store_key)
            .await
            .map_err(|e| failed(key, "list its nodes", e))?;
        if !contenders.is_empty() {
            return Ok(0);
        }
        let count = stored_count(&session, &store_key)
            .await
            .map_err(|e| failed(key, "read its count", e))?
            .unwrap_or(permits);
        let leases = u32::try_from(leases.len()).unwrap_or(u32::MAX);
        Ok(count.saturating_sub(leases))
    }

    /// Stores `permits` as the count of the semaphore `key`, and wakes the acquirer that
    /// waits for room (it watches the count).
    pub(super) async fn store_permits(&self, key: &LockKey, permits: u32) -> Result<(), LockError> {
        let session = self.0.sessions.current().await?;
        let store_key = self.store_key(key);
        let data = permits.to_string();
        loop {
            let set = session
                .retry(|| session.client.set_data(&store_key, data.as_bytes(), None))
                .await;
            match set {
                Ok(_) => return Ok(()),
                Err(zk::Error::NoNode) => create_lock_node(&session, &store_key, &data)
                    .await
                    .map_err(|e| failed(key, "store its count", e))?,
                Err(e) => return Err(failed(key, "store its count", e)),
            }
        }
    }
}

/// Creates `lease` and waits, while its acquirer holds the mutex, until it holds a
/// permit: no node of another kind made before it is left (those made after it wait for
/// it), and no more leases than the count; it looks again each time the connection comes
/// back, lest a watch missed an event. The lease's creation zxid, or `None` at the
/// deadline (the lease still there for the caller to delete).
async fn wait_for_room(
    session: &Session,
    store_key: &str,
    lease: &mut Pending,
    permits: u32,
    deadline: Instant,
) -> Result<Option<u64>, zk::Error> {
    let leases_dir = format!("{store_key}/{LEASES}");
    let (mine, fence) = create(session, &leases_dir, &lease.prefix, &[]).await?;
    lease.name = Some(mine.clone());
    loop {
        let reconnect = session.next_connect();
        let (contenders, leases) = contenders_and_leases(session, store_key).await?;
        let older = match contenders.first() {
            Some(Contender { name, .. }) => {
                let first = format!("{store_key}/{name}");
                match session
                    .retry(|| session.client.get_and_watch_data(&first))
                    .await
                {
                    // Made after the lease, it waits for the lease.
                    Ok((_, stat, _)) if zxid(stat) > fence => None,
                    Ok((_, _, watcher)) => Some(watcher),
                    Err(zk::Error::NoNode) => continue,
                    Err(e) => return Err(e),
                }
            }
            None => None,
        };
        let watchers = if let Some(watcher) = older {
            vec![watcher]
        } else {
            let count = stored_count(session, store_key).await?.unwrap_or(permits);
            if room(&leases, &mine, count)? {
                return Ok(Some(fence));
            }
            let leases = session.retry(|| session.client.list_and_watch_children(&leases_dir));
            let count = session.retry(|| session.client.get_and_watch_data(store_key));
            let ((leases, leases_changed), (count, _, count_changed)) =
                tokio::try_join!(leases, count)?;
            // What the watches were set on may already let it in: a lease given back, or
            // the count raised, between the first look and the watches.
            let count = parse_count(&count).unwrap_or(permits);
            if room(&leases, &mine, count)? {
                continue;
            }
            vec![leases_changed, count_changed]
        };
        if Instant::now() >= deadline {
            return Ok(None);
        }
        let changed =
            futures_util::future::select_all(watchers.into_iter().map(|w| Box::pin(w.changed())));
        tokio::select! {
            _ = changed => {}
            () = reconnect => {}
            () = sleep_until(deadline) => return Ok(None),
            () = session.ended.cancelled() => return Err(zk::Error::SessionExpired),
        }
    }
}

/// Whether the lease `mine` has room among `leases`: there are no more of them than
/// `count`, counted as Curator counts them (every child of the leases' node). `NoNode` if
/// it is not among them.
fn room(leases: &[String], mine: &str, count: u32) -> Result<bool, zk::Error> {
    if !leases.iter().any(|lease| lease == mine) {
        return Err(zk::Error::NoNode);
    }
    Ok(leases.len() <= count as usize)
}

/// The contenders of other kinds for the lock at `store_key`, and its leases.
pub(super) async fn contenders_and_leases(
    session: &Session,
    store_key: &str,
) -> Result<(Vec<Contender>, Vec<String>), zk::Error> {
    let [children, leases] =
        list_both(session, store_key, &format!("{store_key}/{LEASES}")).await?;
    let or_none = |list: Result<Vec<String>, zk::Error>| match list {
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        list => list,
    };
    Ok((path::contenders(or_none(children)?), or_none(leases)?))
}

/// Stores `permits` as the count of the semaphore at `store_key` if none is, and
/// checks it against the stored one otherwise.
async fn keep_count(
    session: &Session,
    store_key: &str,
    key: &LockKey,
    permits: u32,
) -> Result<(), LockError> {
    let failed = |e| failed(key, "keep its count", e);
    let data = permits.to_string();
    loop {
        match session.retry(|| session.client.get_data(store_key)).await {
            Ok((stored, stat)) => match parse_count(&stored) {
                Some(stored) if stored == permits => return Ok(()),
                Some(stored) => return Err(LockError::miscounted(key, stored, permits)),
                None => {
                    let set = session
                        .retry(|| {
                            session
                                .client
                                .set_data(store_key, data.as_bytes(), Some(stat.version))
                        })
                        .await;
                    match set {
                        Ok(_) => return Ok(()),
                        Err(zk::Error::BadVersion | zk::Error::NoNode) => {}
                        Err(e) => return Err(failed(e)),
                    }
                }
            },
            Err(zk::Error::NoNode) => create_lock_node(session, store_key, &data)
                .await
                .map_err(failed)?,
            Err(e) => return Err(failed(e)),
        }
    }
}

/// Creates the lock's node `store_key` with `data`, and its parents if they are missing;
/// nothing if another made it first.
async fn create_lock_node(session: &Session, store_key: &str, data: &str) -> Result<(), zk::Error> {
    loop {
        let created = session
            .retry(|| session.client.create(store_key, data.as_bytes(), &PARENT))
            .await;
        match created {
            Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
            Err(zk::Error::NoNode) => {
                let parent = store_key.rsplit_once('/').map_or("/", |(parent, _)| parent);
                session
                    .retry(|| session.client.mkdir(parent, &PARENT))
                    .await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The count stored as the data of the lock's node `store_key`, if any.
pub(super) async fn stored_count(
    session: &Session,
    store_key: &str,
) -> Result<Option<u32>, zk::Error> {
    match session.retry(|| session.client.get_data(store_key)).await {
        Ok((data, _)) => Ok(parse_count(&data)),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A count as stored: its decimal digits.
fn parse_count(data: &[u8]) -> Option<u32> {
    std::str::from_utf8(data).ok()?.parse().ok()
}
