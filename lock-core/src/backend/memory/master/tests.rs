//! The quorum over memory masters, on a paused clock: what a quorum grants, what a
//! minority cannot, fencing tokens across quorums, renewals, late grants.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::MemoryStore;
use crate::backend::fence::wall_clock_us;
use crate::backend::redlock::master::{Holders, LastWaiter, Master};
use crate::backend::redlock::{Drift, RedLock, Settings};
use crate::backend::store::{Acquire, Hold, Outcome, Renewal, Store, StoreFuture};
use crate::backend::wait::handover::Handover;
use crate::backend::wait::line::{Line, Lines};
use crate::backend::wait::{Attempt, ClientWait, Joined, Left};
use crate::{LockError, LockKey, LockKind, Locker};

const LEASE: Duration = Duration::from_secs(2);
/// A twentieth of the lease: how long each master has to answer an attempt.
const PATIENCE: Duration = Duration::from_millis(100);

/// A memory master whose attempts answer `delay` late.
#[derive(Debug)]
struct Slow {
    store: MemoryStore,
    delay: Duration,
}

/// RedLock over a memory master for each delay of `delays`, and a `Locker` on it.
async fn redlock(delays: &[Duration]) -> (Arc<RedLock<Slow>>, Locker) {
    let masters = delays
        .iter()
        .map(|&delay| Slow {
            store: MemoryStore::new(),
            delay,
        })
        .collect();
    let settings = Settings {
        drift: Drift::DEFAULT,
        patience: Duration::from_secs(1),
        safety_poll: Duration::from_secs(1),
    };
    let store = Arc::new(RedLock::new(masters, Arc::new(Lines::default()), settings));
    let locker = Locker::builder()
        .store(store.clone())
        .default_lease(LEASE)
        .default_wait(Duration::ZERO)
        .build()
        .await
        .unwrap();
    (store, locker)
}

fn key() -> LockKey {
    LockKey::new("k").unwrap()
}

/// The tokens that hold "k" on master `i`.
async fn holders(store: &RedLock<Slow>, i: usize) -> Vec<String> {
    let seen = store.master(i).holders(&key()).await.unwrap();
    seen.map(|s| s.holders.into_iter().map(|(token, _)| token).collect())
        .unwrap_or_default()
}

/// Has "k" held on master `i` by someone else, for ten leases.
async fn hold_elsewhere(store: &RedLock<Slow>, i: usize) {
    let request = Acquire {
        key: key(),
        token: "someone-else".into(),
        kind: LockKind::Exclusive,
        lease: LEASE * 10,
        holder_id: None,
        deadline: Instant::now(),
        since: Instant::now(),
    };
    let outcome = store.master(i).store.acquire(&request).await.unwrap();
    assert!(matches!(outcome, Outcome::Acquired(_)), "{outcome:?}");
}

/// Releases the hold of [`hold_elsewhere`] on master `i`.
async fn release_elsewhere(store: &RedLock<Slow>, i: usize) {
    let key = key();
    let hold = Hold {
        key: &key,
        token: "someone-else",
        kind: LockKind::Exclusive,
        fence: 0,
        holder_id: None,
    };
    assert!(Store::release(&store.master(i).store, &hold).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_quorum_grants_and_a_minority_does_not() {
    let (store, locker) = redlock(&[Duration::ZERO; 3]).await;
    let guard = locker.lock("k").await.unwrap();
    let token = holders(&store, 0).await;
    assert_eq!(token.len(), 1);
    for i in 1..3 {
        assert_eq!(holders(&store, i).await, token, "held on every master");
    }
    guard.release().await.unwrap();
    for i in 0..3 {
        assert!(holders(&store, i).await.is_empty(), "released everywhere");
    }

    // Held elsewhere on two of three: one grant is no quorum, and is given back.
    hold_elsewhere(&store, 0).await;
    hold_elsewhere(&store, 1).await;
    assert!(locker.try_lock("k").await.unwrap().is_none());
    locker.flush().await;
    assert!(
        holders(&store, 2).await.is_empty(),
        "the minority's grant given back"
    );
}

#[tokio::test(start_paused = true)]
async fn masters_that_do_not_answer_in_time_leave_no_quorum() {
    let late = PATIENCE * 2;
    let (store, locker) = redlock(&[late, late, Duration::ZERO]).await;
    let err = locker.try_lock("k").await.unwrap_err();
    assert!(
        matches!(
            err,
            LockError::Quorum {
                acquired: 1,
                needed: 2,
                ..
            }
        ),
        "{err}"
    );
    locker.flush().await;
    for i in 0..3 {
        assert!(
            holders(&store, i).await.is_empty(),
            "nothing left on master {i}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn fencing_tokens_increase_across_quorums_that_share_a_master() {
    let (store, locker) = redlock(&[Duration::ZERO; 3]).await;
    // Master 0's counter far ahead of the others'.
    let ahead = wall_clock_us() + 1_000_000_000_000;
    store
        .master(0)
        .raise_fence(&key(), ahead, LEASE)
        .await
        .unwrap();

    // Quorum {0, 1}: its token comes from master 0, and master 1 is raised to it.
    hold_elsewhere(&store, 2).await;
    let first = locker.lock("k").await.unwrap();
    let first_fence = first.fencing_token();
    first.release().await.unwrap();
    release_elsewhere(&store, 2).await;

    // Quorum {1, 2}, without master 0: still a larger token, drawn above the raise.
    hold_elsewhere(&store, 0).await;
    let second = locker.lock("k").await.unwrap();
    assert!(
        second.fencing_token() > first_fence,
        "{} <= {first_fence}",
        second.fencing_token()
    );
    second.release().await.unwrap();
}

/// An owner's fencing token and holder id, read back from masters whose counters were
/// apart: whichever masters granted it, a quorum of them keep its token.
#[tokio::test(start_paused = true)]
async fn inspect_reads_an_owners_token_and_holder_id_back_from_a_quorum() {
    let (store, locker) = redlock(&[Duration::ZERO; 3]).await;
    let ahead = wall_clock_us() + 1_000_000_000_000;
    store
        .master(2)
        .raise_fence(&key(), ahead, LEASE)
        .await
        .unwrap();
    let election = locker.election("k");
    let leadership = election.campaign("replica-a").await.unwrap();
    let leader = election.leader().await.unwrap().expect("someone leads");
    assert_eq!(leader.id, "replica-a");
    assert_eq!(leader.fencing_token, Some(leadership.fencing_token()));
    leadership.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_loses_the_quorum_loses_the_lease() {
    let (store, locker) = redlock(&[Duration::ZERO; 3]).await;
    let guard = locker.lock("k").await.unwrap();
    store.master(0).store.evict("k");
    store.master(1).store.evict("k");
    tokio::time::timeout(LEASE * 2, guard.lost())
        .await
        .expect("the lease lost at its next renewal");
}

#[tokio::test(start_paused = true)]
async fn a_late_grant_is_kept_and_renewed() {
    let late = PATIENCE / 2;
    let (store, locker) =
        redlock(&[Duration::ZERO, Duration::ZERO, Duration::ZERO, late, late]).await;
    let guard = locker.lock("k").await.unwrap();
    let token = holders(&store, 0).await;
    for i in 3..5 {
        assert!(
            holders(&store, i).await.is_empty(),
            "granted before it answered"
        );
    }
    locker.flush().await;
    for i in 3..5 {
        assert_eq!(holders(&store, i).await, token, "the late grant is kept");
    }

    // Two of the first quorum lose it: the late masters make the quorum, lease after
    // lease.
    store.master(0).store.evict("k");
    store.master(1).store.evict("k");
    tokio::time::sleep(LEASE * 3).await;
    assert!(!guard.is_lost(), "the lock was lost with the late grants");
    guard.release().await.unwrap();
    for i in 2..5 {
        assert!(
            holders(&store, i).await.is_empty(),
            "released on master {i}"
        );
    }
}

impl Store for Slow {
    fn name(&self) -> &str {
        "slow memory"
    }

    fn supports(&self, kind: LockKind) -> bool {
        self.store.supports(kind)
    }

    fn acquire<'a>(&'a self, request: &'a Acquire) -> StoreFuture<'a, Outcome> {
        self.store.acquire(request)
    }

    fn release<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        Store::release(&self.store, hold)
    }

    fn renew<'a>(&'a self, leases: &'a [Renewal<'a>]) -> StoreFuture<'a, Vec<Option<Instant>>> {
        self.store.renew(leases)
    }

    fn is_held<'a>(&'a self, hold: &'a Hold<'a>) -> StoreFuture<'a, bool> {
        self.store.is_held(hold)
    }
}

impl ClientWait for Slow {
    type Listening = ();
    type Tried = ();

    async fn attempt<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
        tried: &'a mut (),
    ) -> Result<Attempt, LockError> {
        self.store.attempt(request, waits_for, tried).await
    }

    fn join(&self, request: &Acquire) -> Joined<()> {
        self.store.join(request)
    }

    fn handover(&self, kind: LockKind) -> Handover {
        self.store.handover(kind)
    }

    fn until_listening(&self, line: &Line<()>, limit: Duration) -> impl Future<Output = ()> + Send {
        self.store.until_listening(line, limit)
    }

    fn poll_interval(
        &self,
        holder_ttl: Option<Duration>,
        line: &Line<()>,
        failed: u32,
    ) -> Duration {
        self.store.poll_interval(holder_ttl, line, failed)
    }

    fn left(&self, left: Left<'_, ()>) {
        self.store.left(left);
    }
}

/// As its memory store, but each attempt answers `delay` late.
impl Master for Slow {
    async fn attempt_seeded<'a>(
        &'a self,
        request: &'a Acquire,
        waits_for: Duration,
        seed: u64,
    ) -> Result<Attempt, LockError> {
        tokio::time::sleep(self.delay).await;
        self.store.attempt_seeded(request, waits_for, seed).await
    }

    async fn raise_fence<'a>(
        &'a self,
        key: &'a LockKey,
        fence: u64,
        lease: Duration,
    ) -> Result<(), LockError> {
        self.store.raise_fence(key, fence, lease).await
    }

    async fn holders<'a>(&'a self, key: &'a LockKey) -> Result<Option<Holders>, LockError> {
        self.store.holders(key).await
    }

    fn line_key(&self, key: &LockKey) -> Arc<str> {
        self.store.line_key(key)
    }

    fn ready_to_listen(&self) {
        self.store.ready_to_listen();
    }

    fn listen(&self, line_key: &Arc<str>) {
        self.store.listen(line_key);
    }

    fn leave_line(&self, left: &Left<'_, ()>) {
        self.store.leave_line(left);
    }

    fn stop_listening(&self, line_key: &Arc<str>, last: LastWaiter) {
        self.store.stop_listening(line_key, last);
    }
}
