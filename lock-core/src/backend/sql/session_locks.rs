//! How the database stores (PostgreSQL, MySQL) take, keep and give back a lock around
//! their own statements ([`Server`]): the local gate first, then one attempt on a shared
//! session, then a wait inside the server on a session of its own, this store's only one
//! on the lock; all of it in a task of its own, so that an acquire dropped at any point
//! leaves no lock behind.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::{Notify, oneshot};
use tokio::time::{Instant, sleep, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;

use crate::backend::sql::gates::Gates;
use crate::backend::sql::holds::Holds;
use crate::backend::sql::sessions::{self, Connector, Lent, Session, Sessions};
use crate::backend::store::{Acquire, Acquired, Hold, Outcome};
use crate::{LockError, LockKey, LockKind};

/// How often a permit's waiter tries again when no release was announced: a holder's
/// session may have ended, which frees its permit without a word.
pub(crate) const POLL: Duration = Duration::from_millis(250);

/// A session of the store `T`.
pub(crate) type SessionOf<T> = <T as Server>::Session;

/// What a database store says in its own statements.
pub(crate) trait Server: Clone + fmt::Debug + Send + Sync + 'static {
    /// The store key of a lock; its display is the name its local gate goes by.
    type StoreKey: Clone + PartialEq + fmt::Display + fmt::Debug + Send + Sync + 'static;
    type Session: Session<StoreKey = Self::StoreKey>;
    type Connector: Connector<Session = Self::Session>;

    /// The store's name, for messages.
    const NAME: &'static str;

    /// Its sessions, gates and holds.
    fn locks(&self) -> &SessionLocks<Self>;

    /// The store key of the lock `key`.
    fn store_key(&self, key: &LockKey) -> Result<Self::StoreKey, LockError>;

    /// One attempt on `session`, which other holds share, that never waits in the
    /// server's queue, to take `store_key` as `request` asks: the fencing token if it
    /// took the lock. A store may keep the lock it took, until the request's deadline or
    /// until it is `abandoned`, while holders of another kind of the lock let go. A
    /// statement that fails may have taken it: the session is ended.
    fn once(
        &self,
        session: &SessionOf<Self>,
        request: &Acquire,
        store_key: &Self::StoreKey,
        abandoned: &CancellationToken,
    ) -> impl Future<Output = Result<Option<u64>, LockError>> + Send;

    /// Waits inside the server on `session`, which holds nothing else, until the
    /// request's deadline: the fencing token if it took `store_key`; `None` if it was
    /// still held then, or the wait was `abandoned`, after which the session holds
    /// nothing.
    fn wait(
        &self,
        session: &SessionOf<Self>,
        request: &Acquire,
        store_key: &Self::StoreKey,
        abandoned: CancellationToken,
    ) -> impl Future<Output = Result<Option<u64>, LockError>> + Send;

    /// Takes one of `permits` of the semaphore of `request`, on the store key it answers
    /// with; called only for a store that [supports](crate::backend::Store::supports)
    /// semaphores.
    fn take_permit(
        &self,
        request: &Acquire,
        permits: u32,
        abandoned: CancellationToken,
    ) -> impl Future<Output = Result<Option<Taken<Self>>, LockError>> + Send;

    /// Gives back one hold of the lock `key` by its `store_key`, taken as `kind`, on
    /// `session`: whether it held one.
    fn unlock(
        &self,
        session: &SessionOf<Self>,
        key: &LockKey,
        store_key: &Self::StoreKey,
        kind: LockKind,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;
}

/// A database store's sessions, the local gates of its locks, and its holds.
#[derive(Debug)]
pub(crate) struct SessionLocks<T: Server> {
    pub(crate) sessions: Sessions<T::Connector>,
    pub(crate) gates: Gates,
    holds: Holds<SessionOf<T>, T::StoreKey>,
}

impl<T: Server> SessionLocks<T> {
    /// At most `max` sessions, opened by `connector`.
    pub(crate) fn new(connector: T::Connector, max: usize) -> Self {
        Self {
            sessions: Sessions::new(connector, max),
            gates: Gates::default(),
            holds: Holds::default(),
        }
    }

    /// Whether the hold of `token` lives.
    pub(crate) fn is_held(&self, token: &str) -> bool {
        self.holds.is_live(token)
    }

    /// Waits until the store's background work (an acquire's own task, giving back a
    /// lock whose acquire was dropped) has finished.
    pub(crate) async fn flush(&self) {
        let background = &self.sessions.background;
        background.close();
        background.wait().await;
        background.reopen();
    }
}

/// A lock taken on a session, with its fencing token. Dropped unclaimed (its acquire
/// was dropped), it gives the lock back in the background.
#[derive(Debug)]
pub(crate) struct Taken<T: Server>(Option<Lock<T>>);

/// What a [`Taken`] holds until it is claimed.
#[derive(Debug)]
struct Lock<T: Server> {
    store: T,
    session: Arc<SessionOf<T>>,
    key: LockKey,
    store_key: T::StoreKey,
    kind: LockKind,
    fence: u64,
}

impl<T: Server> Taken<T> {
    /// The hold of the lock `key` by its `store_key`, taken as `kind` on `session` with
    /// the fencing token `fence`.
    pub(crate) fn new(
        store: &T,
        session: Arc<SessionOf<T>>,
        key: &LockKey,
        store_key: &T::StoreKey,
        kind: LockKind,
        fence: u64,
    ) -> Self {
        session.state().hold_taken(store_key.clone());
        let (store, key, store_key) = (store.clone(), key.clone(), store_key.clone());
        Self(Some(Lock {
            store,
            session,
            key,
            store_key,
            kind,
            fence,
        }))
    }

    /// Whether the session it was taken on is confirmed alive.
    fn is_confirmed(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|lock| lock.session.state().is_confirmed())
    }

    /// The session the hold lives on, its store key and its fencing token: the caller
    /// keeps the hold.
    fn claim(mut self) -> Option<(Arc<SessionOf<T>>, T::StoreKey, u64)> {
        self.0
            .take()
            .map(|lock| (lock.session, lock.store_key, lock.fence))
    }
}

impl<T: Server> Drop for Taken<T> {
    fn drop(&mut self) {
        let Some(Lock {
            store,
            session,
            key,
            store_key,
            kind,
            ..
        }) = self.0.take()
        else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let background = session.state().background.clone();
            background.spawn_on(
                async move {
                    if store
                        .unlock(&session, &key, &store_key, kind)
                        .await
                        .is_err()
                    {
                        session.state().end();
                    }
                    session.state().hold_given_back(&store_key);
                },
                &runtime,
            );
        } else {
            session.state().end();
        }
    }
}

/// Takes the lock of `request` on the server, in a task of its own, so that an acquire
/// dropped at any point leaves no lock behind: what the task takes after that is given
/// back. The call returns by the request's deadline whatever the server does (for a
/// request that does not wait, within one session lease), and hands out only a hold
/// whose session is [confirmed](crate::backend::sql::sessions::SessionState::is_confirmed).
pub(crate) async fn acquire<T: Server>(store: &T, request: &Acquire) -> Result<Outcome, LockError> {
    let store_key = store.store_key(&request.key)?;
    let locks = store.locks();
    let pass = match request.kind {
        // A permit needs no gate: its statement takes a slot that nobody holds.
        LockKind::Semaphore { .. } => None,
        kind => match timeout_at(
            request.deadline,
            locks.gates.enter(&store_key.to_string(), kind),
        )
        .await
        {
            Ok(pass) => Some(pass),
            Err(_) => return Ok(Outcome::Held { holder_ttl: None }),
        },
    };
    let abandoned = CancellationToken::new();
    let _abandon_when_dropped = abandoned.clone().drop_guard();
    let (sender, taken) = oneshot::channel();
    let (owned, request_owned) = (store.clone(), request.clone());
    locks.sessions.background.spawn(async move {
        let taken = take_confirmed(&owned, &request_owned, &store_key, abandoned).await;
        // Unclaimed once the call gave up: what was taken is given back as it drops.
        let _ = sender.send(taken);
    });
    let until = if request.deadline > request.since {
        request.deadline
    } else {
        request.since + locks.sessions.connector.lease()
    };
    let Ok(taken) = timeout_at(until, taken).await else {
        return Ok(Outcome::Held { holder_ttl: None });
    };
    let taken = taken
        .map_err(|e| {
            let key = request.key.as_str();
            let context = format!("{} lock {key:?}: the acquire ended early", T::NAME);
            LockError::backend(context, e).about(&request.key)
        })??
        .and_then(Taken::claim);
    let Some((session, store_key, fence)) = taken else {
        drop(pass);
        locks.gates.tidy();
        return Ok(Outcome::Held { holder_ttl: None });
    };
    let lost = locks
        .holds
        .insert(&request.token, session, store_key, request.kind, pass);
    Ok(Outcome::Acquired(Acquired::session(fence, lost)))
}

/// Takes the lock (or the permit) of `request`, until its deadline, on a session that is
/// confirmed alive once it is taken: one the server may have ended meanwhile (the process
/// was paused past its lease) counts as a failed attempt, as a lease that ran out before
/// its reply does on a lease store.
async fn take_confirmed<T: Server>(
    store: &T,
    request: &Acquire,
    store_key: &T::StoreKey,
    abandoned: CancellationToken,
) -> Result<Option<Taken<T>>, LockError> {
    loop {
        let taken = match request.kind {
            LockKind::Semaphore { permits } => {
                store
                    .take_permit(request, permits, abandoned.clone())
                    .await?
            }
            _ => take(store, request, store_key, abandoned.clone()).await?,
        };
        match taken {
            Some(taken) if !taken.is_confirmed() => {
                tracing::debug!(key = %request.key, "lock taken on a session that may have ended: trying again");
            }
            taken => return Ok(taken),
        }
        if Instant::now() >= request.deadline || abandoned.is_cancelled() {
            return Ok(None);
        }
    }
}

/// One attempt on a shared session (an idle one, if any) that neither holds the lock nor
/// is taking it; then, unless the deadline has passed, a wait inside the server on a
/// session of its own, this store's only one on the lock, and so on until the deadline.
/// While no session can be lent to wait on, another attempt each time a hold is given
/// back.
async fn take<T: Server>(
    store: &T,
    request: &Acquire,
    store_key: &T::StoreKey,
    abandoned: CancellationToken,
) -> Result<Option<Taken<T>>, LockError> {
    let (kind, deadline) = (request.kind, request.deadline);
    let locks = store.locks();
    loop {
        if let Some(serving) = locks.sessions.for_taking(store_key.clone()).await?
            && let Some(fence) = store
                .once(&serving.session, request, store_key, &abandoned)
                .await?
        {
            let session = serving.session.clone();
            let key = &request.key;
            return Ok(Some(Taken::new(
                store, session, key, store_key, kind, fence,
            )));
        }
        if Instant::now() >= deadline || abandoned.is_cancelled() {
            return Ok(None);
        }
        let gate = store_key.to_string();
        let Ok(_turn) = timeout_at(deadline, locks.gates.wait_turn(&gate)).await else {
            return Ok(None);
        };
        let waiting = match locks.sessions.for_wait(deadline).await? {
            Lent::Session(waiting) => waiting,
            Lent::Freed => continue,
            Lent::Nothing => return Ok(None),
        };
        let session = waiting.session.clone();
        let fence = store
            .wait(&session, request, store_key, abandoned.clone())
            .await?;
        // The wait kept the session busy inside the server, however long it took: it is
        // asked whether it lives before it holds the lock or serves anyone else.
        sessions::confirm(&*session).await;
        if let Some(fence) = fence {
            let key = &request.key;
            return Ok(Some(Taken::new(
                store, session, key, store_key, kind, fence,
            )));
        }
        if Instant::now() >= deadline || abandoned.is_cancelled() {
            return Ok(None);
        }
        // A server that rounds the wait's timeout may give up before the deadline: once
        // more, until the deadline.
    }
}

/// Takes a permit: an `attempt` on a shared session (an idle one, if any); then, unless
/// the deadline has passed, another each time `released` is told that a permit was given
/// back, or every [`POLL`]. Within one store, one acquirer at a time tries again, its
/// turn at the gate `gate`; the others queue behind it.
pub(crate) async fn take_permit<T, A, F>(
    store: &T,
    request: &Acquire,
    gate: &str,
    released: &Notify,
    abandoned: &CancellationToken,
    mut attempt: A,
) -> Result<Option<Taken<T>>, LockError>
where
    T: Server,
    A: FnMut(Arc<SessionOf<T>>) -> F,
    F: Future<Output = Result<Option<Taken<T>>, LockError>>,
{
    let locks = store.locks();
    let mut turn = None;
    loop {
        let notified = released.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        if let Some(serving) = locks.sessions.for_attempt().await?
            && let Some(taken) = attempt(serving.session.clone()).await?
        {
            return Ok(Some(taken));
        }
        if Instant::now() >= request.deadline || abandoned.is_cancelled() {
            return Ok(None);
        }
        if turn.is_none() {
            let Ok(mine) = timeout_at(request.deadline, locks.gates.wait_turn(gate)).await else {
                return Ok(None);
            };
            turn = Some(mine);
            continue;
        }
        if !retry(notified, request.deadline, abandoned).await {
            return Ok(None);
        }
    }
}

/// Gives back `hold`: whether it was still held (`false` once its session ended, or is no
/// longer confirmed alive, which ends it).
pub(crate) async fn release<T: Server>(store: &T, hold: &Hold<'_>) -> Result<bool, LockError> {
    let locks = store.locks();
    let Some(held) = locks.holds.release(hold.token) else {
        return Ok(false);
    };
    let session = held.session.clone();
    let freed = if !session.state().is_confirmed() {
        session.state().end();
        Ok(false)
    } else {
        store
            .unlock(&session, hold.key, &held.store_key, held.kind)
            .await
    };
    session.state().hold_given_back(&held.store_key);
    drop(held);
    locks.gates.tidy();
    match freed {
        Ok(freed) => Ok(freed),
        Err(_) if session.state().has_ended() => Ok(false),
        Err(e) => {
            // Whether it was freed is unknown: ending the session frees it.
            session.state().end();
            Err(e)
        }
    }
}

/// Waits for the next try of an acquire kept out by a permit, or waiting for one: until
/// a permit is announced given back (`released`, listened for since before the try that
/// failed) or [`POLL`] passes. `false` once `deadline` passes or the acquire is
/// `abandoned`.
pub(crate) async fn retry(
    released: Pin<&mut Notified<'_>>,
    deadline: Instant,
    abandoned: &CancellationToken,
) -> bool {
    tokio::select! {
        () = released => true,
        () = sleep(POLL) => true,
        () = sleep_until(deadline) => false,
        () = abandoned.cancelled() => false,
    }
}
