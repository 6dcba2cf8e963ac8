//! Curator's lock recipe (`LockInternals`), for exclusive, fair, read and write holds,
//! and for a semaphore's mutex: an EPHEMERAL_SEQUENTIAL node under the lock's CONTAINER
//! node, held once no node it waits for is before it; until then it watches the one it
//! waits for, and nothing else.

use tokio::time::{Instant, sleep_until};
use zookeeper_client as zk;

use super::path::{self, Contender};
use super::session::{RETRIES, Session, cut_short};
use super::{ZooKeeperStore, failed};
use crate::LockError;
use crate::backend::store::{Acquire, Acquired, Outcome};

/// How a lock's nodes are made: open to every client, as Curator's are by default.
const NODE: zk::CreateOptions<'static> =
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
/// How the lock's node and its parents are made: deleted by the server once empty.
const PARENT: zk::CreateOptions<'static> =
    zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());

/// The child of a lock's node under which a semaphore's leases live (Curator's
/// `InterProcessSemaphoreV2`).
pub(super) const LEASES: &str = "leases";

/// How a wait for a turn ended.
enum Turn {
    /// The node holds the lock.
    Mine,
    /// The deadline came first.
    Deadline,
}

impl ZooKeeperStore {
    /// Takes the lock `request.key` as `request.kind` (exclusive, fair, read or write)
    /// on `session`, its node holding the holder's id if it gave one (as Curator's
    /// `LeaderSelector` writes its participant's id), for anyone who inspects the lock.
    pub(super) async fn lock(
        &self,
        session: &Session,
        request: &Acquire,
    ) -> Result<Outcome, LockError> {
        let store_key = self.store_key(&request.key);
        let prefix = path::node_prefix(&request.token, request.kind);
        let data = request.holder_id.as_deref().unwrap_or_default().as_bytes();
        let taken = self.take_turn(session, &store_key, prefix, data, request);
        let Some((node, fence)) = taken.await? else {
            return Ok(Outcome::Held { holder_ttl: None });
        };
        still_live(session, request)?;
        let lost = self
            .0
            .holds
            .insert(&request.token, session.clone(), node.hold());
        Ok(Outcome::Acquired(Acquired::session(fence, lost)))
    }

    /// Creates the node `{dir}/{prefix}{sequence}`, holding `data`, and waits until it
    /// holds the lock whose node is `dir`, or `request`'s deadline: the node, still
    /// [`Pending`], and its creation zxid; `None` at the deadline, the node deleted.
    pub(super) async fn take_turn(
        &self,
        session: &Session,
        dir: &str,
        prefix: String,
        data: &[u8],
        request: &Acquire,
    ) -> Result<Option<(Pending, u64)>, LockError> {
        let key = &request.key;
        let mut pending = Pending::new(self, session, dir, prefix);
        let (name, fence) = create(session, dir, &pending.prefix, data)
            .await
            .map_err(|e| failed(key, "create its node", e))?;
        pending.name = Some(name.clone());
        let turn = wait_turn(session, dir, &name, fence, request.deadline)
            .await
            .map_err(|e| failed(key, "wait for its turn", e))?;
        match turn {
            Turn::Mine => Ok(Some((pending, fence))),
            Turn::Deadline => {
                pending
                    .delete()
                    .await
                    .map_err(|e| failed(key, "give up its place", e))?;
                Ok(None)
            }
        }
    }
}

/// Fails, as a lost session's attempt, unless `session` is [live](Session::is_live) by
/// what is known here: no hold is handed out on a session the server may have expired.
pub(super) fn still_live(session: &Session, request: &Acquire) -> Result<(), LockError> {
    if session.is_live() {
        return Ok(());
    }
    Err(failed(
        &request.key,
        "keep its session",
        zk::Error::SessionExpired,
    ))
}

/// Creates the node `{dir}/{prefix}{sequence}` holding `data`, and `dir` with its parents
/// if they are missing: its name and its creation zxid. After the connection broke under
/// the create, it looks for its node by its prefix, which names its owner, before it
/// creates another (up to [`RETRIES`] times in a row).
pub(super) async fn create(
    session: &Session,
    dir: &str,
    prefix: &str,
    data: &[u8],
) -> Result<(String, u64), zk::Error> {
    let path = format!("{dir}/{prefix}");
    let mut retries = 0;
    loop {
        match session.client.create(&path, data, &NODE).await {
            Ok((stat, sequence)) => return Ok((format!("{prefix}{sequence}"), zxid(stat))),
            Err(zk::Error::NoNode) => {
                session.retry(|| session.client.mkdir(dir, &PARENT)).await?;
            }
            Err(e) if cut_short(&e) && retries < RETRIES => {
                retries += 1;
                session.reconnected().await?;
                if let Some(found) = find(session, dir, prefix).await? {
                    return Ok(found);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// The node under `dir` whose name begins with `prefix`, if there is one: its name and
/// its creation zxid.
pub(super) async fn find(
    session: &Session,
    dir: &str,
    prefix: &str,
) -> Result<Option<(String, u64)>, zk::Error> {
    let children = match session.retry(|| session.client.list_children(dir)).await {
        Err(zk::Error::NoNode) => return Ok(None),
        children => children?,
    };
    let Some(name) = children.into_iter().find(|c| c.starts_with(prefix)) else {
        return Ok(None);
    };
    let path = format!("{dir}/{name}");
    match session.retry(|| session.client.check_stat(&path)).await? {
        Some(stat) => Ok(Some((name, zxid(stat)))),
        None => Ok(None),
    }
}

/// Waits until the node `name` under `dir`, made at the zxid `made`, holds the lock, or
/// the deadline: each time, it lists the lock's contenders (and its semaphore's leases,
/// in the same request), and watches the one node it waits for (`getData`), or the
/// leases, and looks again each time the connection comes back, lest the watch missed a
/// deletion while it was down. A semaphore's leases made before the node keep it out
/// until they are given back; those made after it wait for it.
async fn wait_turn(
    session: &Session,
    dir: &str,
    name: &str,
    made: u64,
    deadline: Instant,
) -> Result<Turn, zk::Error> {
    let leases = format!("{dir}/{LEASES}");
    loop {
        let reconnect = session.next_connect();
        let [children, leased] = list_both(session, dir, &leases).await?;
        let leased = match leased {
            Ok(names) => made_before(session, &leases, names, made).await?,
            Err(zk::Error::NoNode) => false,
            Err(e) => return Err(e),
        };
        let contenders = path::contenders(children?);
        let Some(me) = contenders.iter().position(|c| c.name == name) else {
            return Err(zk::Error::NoNode);
        };
        let blocker = path::blocker(&contenders, me);
        if blocker.is_none() && !leased {
            return Ok(Turn::Mine);
        }
        if Instant::now() >= deadline {
            return Ok(Turn::Deadline);
        }
        let watcher = match blocker {
            Some(Contender { name: blocker, .. }) => {
                let blocker = format!("{dir}/{blocker}");
                match session
                    .retry(|| session.client.get_and_watch_data(&blocker))
                    .await
                {
                    Ok((_, _, watcher)) => watcher,
                    Err(zk::Error::NoNode) => continue,
                    Err(e) => return Err(e),
                }
            }
            // Only a lease made before the node keeps it waiting: the ones watched may
            // all have come after.
            None => match session
                .retry(|| session.client.list_and_watch_children(&leases))
                .await
            {
                Ok((names, watcher)) => {
                    if !made_before(session, &leases, names, made).await? {
                        continue;
                    }
                    watcher
                }
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(e),
            },
        };
        tokio::select! {
            _ = watcher.changed() => {}
            () = reconnect => {}
            () = sleep_until(deadline) => return Ok(Turn::Deadline),
            () = session.ended.cancelled() => return Err(zk::Error::SessionExpired),
        }
    }
}

/// Whether any of the leases `names` under `dir` was made before the zxid `made`: the
/// oldest of them still there is.
async fn made_before(
    session: &Session,
    dir: &str,
    names: Vec<String>,
    made: u64,
) -> Result<bool, zk::Error> {
    for name in path::leases(names) {
        let lease = format!("{dir}/{name}");
        if let Some(stat) = session.retry(|| session.client.check_stat(&lease)).await? {
            return Ok(zxid(stat) < made);
        }
    }
    Ok(false)
}

/// The children of `a` and of `b`, read at one point in time (one multi-read); each
/// `NoNode` if its node is missing.
pub(super) async fn list_both(
    session: &Session,
    a: &str,
    b: &str,
) -> Result<[Result<Vec<String>, zk::Error>; 2], zk::Error> {
    let results = session
        .retry(|| {
            let mut reader = session.client.new_multi_reader();
            let added = reader.add_get_children(a).and(reader.add_get_children(b));
            async move {
                added?;
                reader.commit().await
            }
        })
        .await?;
    let mut lists = results.into_iter().map(|result| match result {
        zk::MultiReadResult::Children { children } => Ok(children),
        zk::MultiReadResult::Error { err } => Err(err),
        _ => Err(zk::Error::UnexpectedError(
            "a multi-read of children answered with something else".into(),
        )),
    });
    let mut next = || lists.next().unwrap_or(Err(zk::Error::NoNode));
    Ok([next(), next()])
}

/// Deletes the node at `path`, again after the connection broke under it (up to
/// [`RETRIES`] times in a row) while the session lives: whether it was there to delete.
/// One gone with its session was not.
pub(super) async fn delete(session: &Session, path: &str) -> Result<bool, zk::Error> {
    let mut retries = 0;
    loop {
        match session.client.delete(path, None).await {
            Ok(()) => return Ok(true),
            Err(zk::Error::NoNode) => return Ok(retries > 0),
            Err(e) if cut_short(&e) && retries < RETRIES => match session.reconnected().await {
                Ok(()) => retries += 1,
                Err(_) => return Ok(false),
            },
            Err(zk::Error::SessionExpired) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

/// A node's creation zxid, as a fencing token.
pub(super) fn zxid(stat: zk::Stat) -> u64 {
    u64::try_from(stat.czxid).unwrap_or(0)
}

/// A node being created or waiting for its turn (or a semaphore's mutex, held while its
/// lease waits): if it is dropped before it is [held](Self::hold) or
/// [deleted](Self::delete), as when its acquire is dropped, its node is deleted in the
/// background (found by its prefix if its create's answer never came).
pub(super) struct Pending {
    store: ZooKeeperStore,
    session: Session,
    dir: String,
    pub(super) prefix: String,
    /// Its name once created.
    pub(super) name: Option<String>,
    settled: bool,
}

impl Pending {
    pub(super) fn new(
        store: &ZooKeeperStore,
        session: &Session,
        dir: &str,
        prefix: String,
    ) -> Self {
        Self {
            store: store.clone(),
            session: session.clone(),
            dir: dir.to_owned(),
            prefix,
            name: None,
            settled: false,
        }
    }

    /// The node is the hold's now: its path, which is not deleted when this is dropped.
    pub(super) fn hold(mut self) -> String {
        self.settled = true;
        let name = self.name.take().unwrap_or_default();
        format!("{}/{name}", self.dir)
    }

    /// Deletes the node, if it was made, before it returns (in the background, when
    /// dropped, if it cannot): nothing is left of it.
    pub(super) async fn delete(&mut self) -> Result<(), zk::Error> {
        if let Some(name) = &self.name {
            delete(&self.session, &format!("{}/{name}", self.dir)).await?;
        }
        self.settled = true;
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.settled || !self.session.is_live() {
            return;
        }
        let (session, dir, prefix, name) = (
            self.session.clone(),
            std::mem::take(&mut self.dir),
            std::mem::take(&mut self.prefix),
            self.name.take(),
        );
        self.store.background(async move {
            let name = match name {
                Some(name) => Some(name),
                None => find(&session, &dir, &prefix)
                    .await
                    .ok()
                    .flatten()
                    .map(|(n, _)| n),
            };
            if let Some(name) = name {
                let _ = delete(&session, &format!("{dir}/{name}")).await;
            }
        });
    }
}
