//! What the followers of an election hear: each owner that names itself (an election's
//! candidate) is announced when it takes the lock and when it gives it back or is forced
//! out, on the channel named as its holder-id key, `P{K}:holder_id` (`holder_id.lua`,
//! `release.lua`, `force_unlock.lua`); a lease that runs out is announced by nobody. A
//! follower's watch is a pub/sub connection of its own subscribed to that channel, apart
//! from the hub, whose wake-ups go to one waiting `Locker` at a time.

use futures_util::stream;

use super::RedisStore;
use super::subscriber::{Event, Subscriber};
use crate::backend::HolderChanges;
use crate::{LockError, LockKey};

impl RedisStore {
    /// A stream that yields each time the holder of the lock `key` is announced, and ends
    /// (after one last yield) when its connection is lost; one that never yields on a
    /// store without pub/sub (made on a pool, whose followers ask every interval).
    pub(super) async fn watch_named_holders(
        &self,
        key: &LockKey,
    ) -> Result<HolderChanges, LockError> {
        let Some(hub) = &self.0.hub else {
            return Ok(Box::pin(stream::pending()));
        };
        let subscriber = hub
            .subscriber_apart(self.key(key).holder_id().to_string())
            .await
            .map_err(|e| LockError::failed("redis", key, "watch its holder", e))?;
        let changes = stream::unfold(Some(subscriber), |subscriber| async {
            let mut subscriber: Subscriber = subscriber?;
            match subscriber.next().await {
                Event::Message(_) => Some(((), Some(subscriber))),
                Event::Unsubscribed(_) | Event::Lost => Some(((), None)),
            }
        });
        Ok(Box::pin(changes))
    }
}
