//! Group commit: the acquire and release calls of exclusive locks that queue on a
//! `Locker`'s connection while one of their kind is in flight go to Redis together, as one
//! call of a group's script over all their keys, once the call in flight comes back. A
//! caller that finds nothing in flight sends its own call at once, as it would alone.
//!
//! Each call in a group stays its own: the script takes each lock as if it were alone
//! (`acquire_group.lua`, `release_group.lua`), and each caller reads its own part of the
//! reply. A caller that gives up while queued is left out of the next group; one that gives
//! up once its group is sent has what it took released in the background, as an acquire
//! cut short always is. Not on a Redis Cluster, whose locks' keys lie on different nodes;
//! not for an owner that names itself (an election's candidate) nor for RedLock's masters,
//! whose calls carry more than a group's script takes.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::{FromRedisValue, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::asking::{Asking, Attempting, CutShort, WAITING_LOCKER, millis};
use super::exclusive;
use super::fencing::FenceSeed;
use super::handover::OwnWaiters;
use super::keys::RedisKey;
use super::scripts::{AcquireReply, Sent};
use super::{PendingAcquire, RedisStore};
use crate::backend::release::Release;
use crate::{LockError, LockKind};

/// The most calls one group sends; more wait for the next.
const LARGEST_GROUP: usize = 64;

/// What a queued caller gets back: its own part of its group's reply, and when the group
/// was sent.
pub(super) type Answer = Result<(Value, Sent), LockError>;

/// A `Locker`'s queues: one for the acquisitions of exclusive locks, one for their
/// releases.
#[derive(Debug, Default)]
pub(super) struct Groups {
    acquires: Arc<GroupCommit<AcquireCall>>,
    releases: Arc<GroupCommit<ReleaseCall>>,
}

/// An acquisition of an exclusive lock, as a group's script takes it.
pub(super) struct AcquireCall {
    key: RedisKey,
    token: Arc<str>,
    lease_ms: u64,
    fence_ttl_ms: u64,
    /// How much longer its caller waits should the lock be held: if at all, this
    /// `Locker` is registered to be woken.
    waits_for: Duration,
}

/// A release of an exclusive lock by an owner that did not name itself.
pub(super) struct ReleaseCall {
    key: RedisKey,
    token: Arc<str>,
    own_waiters: OwnWaiters,
}

/// The calls of one kind that wait for the one in flight to come back.
pub(super) struct GroupCommit<C> {
    state: Mutex<State<C>>,
}

impl<C> Default for GroupCommit<C> {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                in_flight: false,
                queued: VecDeque::new(),
            }),
        }
    }
}

impl<C> std::fmt::Debug for GroupCommit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("GroupCommit")
            .field("in_flight", &state.in_flight)
            .field("queued", &state.queued.len())
            .finish()
    }
}

struct State<C> {
    in_flight: bool,
    /// Oldest first.
    queued: VecDeque<Queued<C>>,
}

/// A queued call, and where its answer goes.
pub(super) struct Queued<C> {
    call: C,
    answer: oneshot::Sender<Answer>,
}

/// Whose turn it is to send.
pub(super) enum Turn<C> {
    /// Nothing was in flight: the caller sends its own call now, and its [`Flight`] then
    /// sends what queued meanwhile.
    Now(Flight<C>),
    /// Queued behind the call in flight: the answer comes once the group it goes in comes
    /// back. Should the sender be dropped instead, the call was never sent (the flight
    /// ended without sending it): the caller asks for its turn again.
    Queued(oneshot::Receiver<Answer>),
}

impl<C> GroupCommit<C> {
    fn state(&self) -> MutexGuard<'_, State<C>> {
        // Every update leaves a whole state: a poisoned lock still guards one.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The caller's turn: to send now if nothing is in flight, else a place in the queue
    /// for its `call`.
    pub(super) fn turn(self: &Arc<Self>, call: impl FnOnce() -> C) -> Turn<C> {
        let mut state = self.state();
        if !state.in_flight {
            state.in_flight = true;
            return Turn::Now(Flight {
                commit: self.clone(),
                over: false,
            });
        }
        let (answer, receiver) = oneshot::channel();
        state.queued.push_back(Queued {
            call: call(),
            answer,
        });
        Turn::Queued(receiver)
    }
}

/// The one call of its kind in flight, and, once it is back, each group sent after it.
/// Dropped before it is over (its caller gave up, or the runtime stopped), it leaves
/// nothing in flight, and every queued caller asks for its turn again.
pub(super) struct Flight<C> {
    commit: Arc<GroupCommit<C>>,
    over: bool,
}

impl<C> Flight<C> {
    /// The calls queued since, oldest first, for this flight to send next, without those
    /// whose callers gave up; `None` when there are none, and the flight is over. The
    /// queue then keeps no more room than a group's, however many queued for a while.
    fn next_group(&mut self) -> Option<Vec<Queued<C>>> {
        let mut state = self.commit.state();
        let mut group = Vec::new();
        while group.len() < LARGEST_GROUP
            && let Some(queued) = state.queued.pop_front()
        {
            if !queued.answer.is_closed() {
                group.push(queued);
            }
        }
        if group.is_empty() {
            state.in_flight = false;
            state.queued.shrink_to(LARGEST_GROUP);
            self.over = true;
            return None;
        }
        Some(group)
    }
}

impl<C> Drop for Flight<C> {
    fn drop(&mut self) {
        if !self.over {
            let mut state = self.commit.state();
            state.in_flight = false;
            state.queued.clear();
            state.queued.shrink_to(LARGEST_GROUP);
        }
    }
}

impl<C> Queued<C> {
    /// Gives the caller its answer; the call and the answer back if the caller gave up.
    fn answer(self, answer: Answer) -> Result<(), (C, Answer)> {
        let call = self.call;
        self.answer.send(answer).map_err(|answer| (call, answer))
    }
}

/// A group's failure, as each of its callers gets it: the same context, and the cause.
fn each_gets(e: &LockError) -> LockError {
    match e {
        LockError::Backend {
            context, source, ..
        } => LockError::backend(context.clone(), source.to_string()),
        other => LockError::backend("send a group of lock calls", other.to_string()),
    }
}

/// A kind of call that goes in groups: how a group of them is sent, and its answers given.
pub(super) trait Grouped: Sized + Send + 'static {
    /// Sends `group` as one call on `store`'s connection, and answers each caller.
    fn send(store: &RedisStore, group: Vec<Queued<Self>>) -> impl Future<Output = ()> + Send;
}

impl Grouped for AcquireCall {
    /// Should a caller have given up meanwhile, what its call took is released in the
    /// background.
    async fn send(store: &RedisStore, group: Vec<Queued<Self>>) {
        let listening_id = store.listening_id();
        let mut call = store.0.scripts.acquire_group.group(3 * group.len());
        for queued in &group {
            let key = &queued.call.key;
            call.key(key.as_str()).key(key.fence()).key(key.lockers());
        }
        for queued in &group {
            let acquire = &queued.call;
            let waiting_as = if acquire.waits_for.is_zero() {
                ""
            } else {
                listening_id
            };
            call.arg(&*acquire.token)
                .arg(acquire.lease_ms)
                .arg(acquire.fence_ttl_ms)
                .arg(waiting_as);
        }
        call.arg(millis(WAITING_LOCKER)).arg(FenceSeed::ServerClock);
        let replies = store
            .0
            .connection
            .run_in_hand("acquire", |mut in_hand| {
                let call = &call;
                async move {
                    let sent = Sent {
                        at: Instant::now(),
                        epoch: in_hand.epoch,
                    };
                    let replies: Vec<Value> = call.invoke_async(&mut in_hand.conn).await?;
                    Ok((replies, sent))
                }
            })
            .await;
        let gave_up = |acquire: AcquireCall| {
            let how = Release::Holder(LockKind::Exclusive);
            store.release_detached(&acquire.key, &acquire.token, how);
        };
        match answers(replies, group.len()) {
            Ok((replies, sent)) => {
                for (queued, reply) in group.into_iter().zip(replies) {
                    if let Err((acquire, Ok((reply, _)))) = queued.answer(Ok((reply, sent)))
                        && let Ok(AcquireReply::Taken { .. }) =
                            AcquireReply::from_redis_value(reply)
                    {
                        gave_up(acquire);
                    }
                }
            }
            Err(e) => {
                for queued in group {
                    if let Err((acquire, _)) = queued.answer(Err(each_gets(&e))) {
                        gave_up(acquire);
                    }
                }
            }
        }
    }
}

impl Grouped for ReleaseCall {
    /// Not sent again on a fresh connection, as a release alone is not.
    async fn send(store: &RedisStore, group: Vec<Queued<Self>>) {
        let mut call = store.0.scripts.release_group.group(3 * group.len());
        for queued in &group {
            let key = &queued.call.key;
            call.key(key.as_str()).key(key.lockers()).key(key.channel());
        }
        for queued in &group {
            let release = &queued.call;
            let own_waits = match release.own_waiters {
                OwnWaiters::Listening => "1",
                OwnWaiters::None => "0",
            };
            call.arg(&*release.token).arg(own_waits);
        }
        call.arg(store.listening_id()).arg(millis(WAITING_LOCKER));
        let replies = async {
            let mut in_hand = store.0.connection.in_hand().await?;
            let sent = Sent {
                at: Instant::now(),
                epoch: in_hand.epoch,
            };
            let replies: Vec<Value> = call
                .invoke_async(&mut in_hand.conn)
                .await
                .map_err(|e| store.0.connection.error("release", e))?;
            Ok((replies, sent))
        };
        match answers(replies.await, group.len()) {
            Ok((replies, sent)) => {
                for (queued, reply) in group.into_iter().zip(replies) {
                    let _gave_up = queued.answer(Ok((reply, sent)));
                }
            }
            Err(e) => {
                for queued in group {
                    let _gave_up = queued.answer(Err(each_gets(&e)));
                }
            }
        }
    }
}

/// A group's replies, one per call of the `count` it sent.
fn answers(
    replies: Result<(Vec<Value>, Sent), LockError>,
    count: usize,
) -> Result<(Vec<Value>, Sent), LockError> {
    let (replies, sent) = replies?;
    if replies.len() != count {
        let cause = format!("{} replies to a group of {count} calls", replies.len());
        return Err(LockError::backend("send a group of lock calls", cause));
    }
    Ok((replies, sent))
}

impl RedisStore {
    /// The groups `attempting` lock `key`, asking as `asking` says, may go in: `None` for
    /// a call that is sent alone (see the module docs).
    pub(super) fn groups_for(
        &self,
        attempting: &Attempting<'_>,
        asking: Asking,
    ) -> Option<&Groups> {
        let alone = attempting.request.holder_id.is_some()
            || asking.seed != FenceSeed::ServerClock
            || asking.cut_short != CutShort::Release;
        if alone { None } else { self.0.groups.as_ref() }
    }

    /// Takes exclusive lock `key` for `attempting`: at once, or in a group if another
    /// acquisition is in flight. Its reply, and when it was sent. Should the call be cut
    /// short or its reply lost, what it may have taken is released in the background.
    pub(super) async fn acquire_in_group(
        &self,
        groups: &Groups,
        key: &RedisKey,
        attempting: &Attempting<'_>,
    ) -> Result<(AcquireReply, Sent), LockError> {
        let request = attempting.request;
        let how = Release::Holder(LockKind::Exclusive);
        loop {
            let turn = groups.acquires.turn(|| AcquireCall {
                key: key.clone(),
                token: request.token.clone(),
                lease_ms: attempting.lease_ms(),
                fence_ttl_ms: attempting.fence_ttl_ms,
                waits_for: attempting.waits_for,
            });
            let answer = match turn {
                Turn::Now(flight) => {
                    let call = exclusive::acquire_call(&self.0.scripts, key, attempting);
                    let cut_short = CutShort::Release;
                    let sent = self
                        .send_acquire(key, &request.token, &call, how, cut_short)
                        .await;
                    self.send_queued(flight);
                    return sent;
                }
                Turn::Queued(answer) => answer,
            };
            let pending = PendingAcquire {
                store: self,
                key,
                token: &request.token,
                how,
                armed: true,
            };
            let Ok(answer) = answer.await else {
                // Never sent.
                pending.disarm();
                continue;
            };
            let (reply, sent) = answer?;
            pending.disarm();
            let reply = AcquireReply::from_redis_value(reply)
                .map_err(|e| self.0.connection.error("acquire", e.into()))?;
            return Ok((reply, sent));
        }
    }

    /// Releases exclusive lock `key` if `token` holds it, waking one waiting `Locker` (this
    /// one's waiters too, behind the others, if `own_waiters` say they listen): at once,
    /// or in a group if another release is in flight. Says whether `token` held it.
    pub(super) async fn release_in_group(
        &self,
        groups: &Groups,
        key: &RedisKey,
        token: &str,
        own_waiters: OwnWaiters,
    ) -> Result<bool, LockError> {
        loop {
            let turn = groups.releases.turn(|| ReleaseCall {
                key: key.clone(),
                token: token.into(),
                own_waiters,
            });
            let answer = match turn {
                Turn::Now(flight) => {
                    let released = async {
                        let mut conn = self.0.connection.get().await?;
                        self.free_exclusive(&mut conn, key, token, false, own_waiters)
                            .await
                            .map_err(|e| self.0.connection.error("release", e))
                    };
                    let released = released.await;
                    self.send_queued(flight);
                    return released;
                }
                Turn::Queued(answer) => answer,
            };
            // Else never sent.
            if let Ok(answer) = answer.await {
                let (reply, _) = answer?;
                return bool::from_redis_value(reply)
                    .map_err(|e| self.0.connection.error("release", e.into()));
            }
        }
    }

    /// Sends, in the background, the calls that queued behind `flight`'s, a group at a
    /// time until none are left.
    fn send_queued<C: Grouped>(&self, mut flight: Flight<C>) {
        let Some(mut group) = flight.next_group() else {
            return;
        };
        let store = self.clone();
        self.spawn("send queued lock calls", async move {
            loop {
                C::send(&store, group).await;
                match flight.next_group() {
                    Some(next) => group = next,
                    None => return,
                }
            }
        });
    }
}
