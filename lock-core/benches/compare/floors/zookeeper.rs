//! The ZooKeeper floor: zookeeper-client's own lock.

use zookeeper_client as zk;

/// zookeeper-client's lock on one session: the lock `name` is the node
/// `/zookeeper-client/{name}`, its contenders `_c_{uuid}-lock-{seq}` under it, as
/// Curator's `InterProcessMutex` lays them out.
#[derive(Debug, Clone)]
pub(crate) struct ZooKeeperLock {
    client: zk::Client,
}

impl ZooKeeperLock {
    pub(crate) async fn connect(connect_string: &str) -> Self {
        Self {
            client: zk::Client::connect(connect_string)
                .await
                .expect("connect zookeeper-client"),
        }
    }

    /// Waits for the lock `name` by the crate's own means (a watch on the node before its
    /// own), then reads its node's `czxid`, the fencing token: the path of its node.
    ///
    /// The crate's guard deletes the node in the background when dropped, after the
    /// release below has deleted it already; so it is forgotten instead.
    pub(crate) async fn acquire(&self, name: &str) -> String {
        let dir = format!("/zookeeper-client/{name}");
        let prefix = zk::LockPrefix::new_curator(&dir, "lock-").expect("lock prefix");
        let options = zk::LockOptions::new(zk::Acls::anyone_all())
            .with_ancestor_options(zk::CreateMode::Container.with_acls(zk::Acls::anyone_all()))
            .expect("lock options");
        let lock = self
            .client
            .lock(prefix, &[], options)
            .await
            .expect("zookeeper-client lock");
        let path = lock.lock_path().to_owned();
        std::mem::forget(lock);
        let stat = self
            .client
            .check_stat(&path)
            .await
            .expect("zookeeper-client: read the lock node")
            .expect("zookeeper-client: the lock node exists");
        std::hint::black_box(stat.czxid);
        path
    }

    /// Deletes the lock's node, and waits for the reply.
    pub(crate) async fn release(&self, path: &str) {
        self.client
            .delete(path, None)
            .await
            .expect("zookeeper-client: delete the lock node");
    }
}
