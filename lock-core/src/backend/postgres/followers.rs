//! What the followers of an election hear: a hold taken with a holder id (an election's
//! candidate) is announced once taken and once given back or forced out, by `NOTIFY
//! lock_holders` with the lock's key as the payload ([`sql::ANNOUNCE_HOLDERS`]); a
//! session that ends unannounced (a crash, a pause past its lease) is not. A follower's
//! watch is a connection of its own that `LISTEN`s on that channel.

use futures_util::stream;

use super::{PostgresStore, sql};
use crate::backend::HolderChanges;
use crate::{LockError, LockKey};

impl PostgresStore {
    /// Announces that the holders of `key` changed; a failure is only logged, as the
    /// followers still ask every interval.
    pub(super) async fn announce_holders(&self, key: &LockKey) {
        let key_str = key.as_str();
        let announced = self
            .query(
                key,
                "announce its holder",
                sql::ANNOUNCE_HOLDERS,
                &[&key_str],
            )
            .await;
        if let Err(e) = announced {
            tracing::warn!(key = key_str, error = %e, "could not announce a lock's holder");
        }
    }

    /// A stream that yields each time the holders of `key` are announced, and ends (after
    /// one last yield) when its connection is lost.
    pub(super) async fn watch_named_holders(
        &self,
        key: &LockKey,
    ) -> Result<HolderChanges, LockError> {
        let connector = &self.0.locks.sessions.connector;
        let (client, heard) = connector.listening(sql::LISTEN_FOR_HOLDERS).await?;
        let key = key.as_str().to_owned();
        let changes = stream::unfold(Some((client, heard)), move |listening| {
            let key = key.clone();
            async move {
                let (client, mut heard) = listening?;
                loop {
                    match heard.recv().await {
                        Some(changed) if changed == key => {
                            return Some(((), Some((client, heard))));
                        }
                        Some(_) => {}
                        None => return Some(((), None)),
                    }
                }
            }
        });
        Ok(Box::pin(changes))
    }
}
