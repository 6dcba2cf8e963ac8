//! A Redis store as one of RedLock's masters: made on RedLock's lines, which its hub
//! wakes, and spoken to through [`Master`].

use std::sync::Arc;
use std::time::Duration;

use super::asking::{Asking, CutShort};
use super::deployment::Deployment;
use super::fencing::FenceSeed;
use super::hub::Listening;
use super::keys::RedisKey;
use super::{RedisStore, RedisStoreBuilder};
use crate::backend::redlock::master::{Holders, LastWaiter, Master};
use crate::backend::store::Acquire;
use crate::backend::wait::line::Lines;
use crate::backend::wait::{Attempt, Left};
use crate::{LockError, LockKey};

impl RedisStore {
    /// A store on the one server of `builder`, as a master of RedLock whose hub wakes the
    /// waiters of `lines`; no connection is opened yet. Local hand-overs are off: a
    /// release on one master cannot hand the lock over on the others.
    pub(crate) fn redlock_master(
        builder: RedisStoreBuilder,
        lines: &Arc<Lines<Listening>>,
    ) -> Result<Self, LockError> {
        let config = builder.local_handovers(0).config()?;
        match config.deployment {
            Deployment::Url(_) | Deployment::Pool { .. } => Ok(Self::new(config, lines.clone())),
            Deployment::Sentinel(_) | Deployment::Cluster(_) => Err(LockError::Config(
                "a redlock master is one server, given by url(..) or pool(..), not sentinel(..) or cluster(..)"
                    .into(),
            )),
        }
    }

    /// How long it waits to connect.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.0.connection.connect_timeout()
    }

    /// How long a waiter with wake-ups waits before trying again anyway.
    pub(crate) fn safety_poll(&self) -> Duration {
        self.0.safety_poll
    }
}

impl Master for RedisStore {
    async fn attempt_seeded<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
        seed: u64,
    ) -> Result<Attempt, LockError> {
        let asking = Asking {
            seed: FenceSeed::Given(seed),
            cut_short: CutShort::LeftToCaller,
        };
        self.attempt_asking(request, waits_for, asking).await
    }

    async fn raise_fence<'a>(
        &'a self,
        key: &'a LockKey,
        fence: u64,
        lease: Duration,
    ) -> Result<(), LockError> {
        let key = self.key(key);
        let mut call = self.0.scripts.raise_fence.key(key.fence());
        call.arg(fence).arg(self.fence_ttl_ms(lease));
        self.0
            .connection
            .run("raise a fence counter", |mut conn| {
                let call = &call;
                async move { call.invoke_async::<i64, _>(&mut conn).await }
            })
            .await?;
        Ok(())
    }

    /// The `Locker`s registered to be woken count as waiting.
    async fn holders<'a>(&'a self, key: &'a LockKey) -> Result<Option<Holders>, LockError> {
        let seen = self.seen(key).await?;
        Ok(seen.map(|seen| Holders {
            kind: seen.kind(),
            holders: seen.holders,
            waiting: seen.lockers,
            fence: seen.fence,
            holder_id: seen.holder_id,
        }))
    }

    fn line_key(&self, key: &LockKey) -> Arc<str> {
        self.key(key).shared().clone()
    }

    fn ready_to_listen(&self) {
        if let Some(hub) = &self.0.hub {
            hub.ensure_running();
        }
    }

    fn listen(&self, line_key: &Arc<str>) {
        if let Some(hub) = &self.0.hub {
            hub.subscribe(line_key.clone());
        }
    }

    fn leave_line(&self, left: &Left<'_, Listening>) {
        self.leave_store_line(&RedisKey::from_redis(left.line.key()), left);
    }

    fn stop_listening(&self, line_key: &Arc<str>, last: LastWaiter) {
        if let Some(hub) = &self.0.hub {
            hub.idle(line_key.clone());
        }
        if last == LastWaiter::GaveUp {
            self.stop_waiting_detached(&RedisKey::from_redis(line_key));
        }
    }
}
