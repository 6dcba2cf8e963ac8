//! Redis Sentinel: a master, its replica and three sentinels of the test's own, and a
//! failover (`SENTINEL FAILOVER`) under a running `Locker`. The contract tests every store
//! passes are in the conformance suite (`conformance.rs`, `sentinel::`).

use std::sync::Mutex;
use std::time::Duration;

use lock_core::{LockOptions, Locker};
use lock_tests::{MASTER_NAME, RedisSentinel, TestServer, lock_holder};
use tokio::time::timeout;

const LEASE: Duration = Duration::from_secs(2);

async fn connect(topology: &RedisSentinel) -> Locker {
    Locker::builder()
        .sentinel(topology.sentinel_urls(), MASTER_NAME)
        .default_lease(LEASE)
        .build()
        .await
        .expect("connect through the test sentinels")
}

/// The storage a lock guards, as it should be written: a write carries the writer's
/// fencing token, and one older than the newest seen is refused.
#[derive(Default)]
struct Fenced {
    newest: Mutex<u64>,
}

impl Fenced {
    fn write(&self, token: u64) -> bool {
        let mut newest = self.newest.lock().unwrap();
        if token < *newest {
            return false;
        }
        *newest = token;
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_acquisition_after_a_failover_works_on_the_new_master() {
    let topology = RedisSentinel::spawn();
    let locker = connect(&topology).await;
    let old = topology.master().port();
    locker.lock("k").await.unwrap().release().await.unwrap();

    let new = topology.failover();
    assert_ne!(new.port(), old);
    let guard = locker.lock("k").await.unwrap();
    assert!(
        lock_holder(new, "k").is_some(),
        "not taken on the new master"
    );
    assert!(guard.is_held().await.unwrap());
    guard.release().await.unwrap();
    assert_eq!(lock_holder(new, "k"), None);
}

/// A token drawn on a master whose write is lost in the failover (here: the new master's
/// counter taken back to before it, as if the draws had not reached the replica) is
/// still below every token drawn after it: the failover epoch is part of the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_lost_in_a_failover_stays_below_every_later_one() {
    let topology = RedisSentinel::spawn();
    let locker = connect(&topology).await;
    let lost = locker.lock("k").await.unwrap();
    let lost_token = lost.fencing_token();
    drop(lost);
    locker.flush().await;

    let new = topology.failover();
    let behind = (lost_token - 100).to_string();
    new.cmd(&["SET", "lock:{k}:fence", &behind]).unwrap();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let guard = locker.lock("k").await.unwrap();
        tokens.push(guard.fencing_token());
        guard.release().await.unwrap();
    }
    assert!(
        tokens.iter().all(|&t| t > lost_token),
        "{tokens:?} after the lost {lost_token}"
    );
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// A failover while a lock is held, whose hold is then lost (here deleted on the new
/// master, as a write lost in the failover would be): the next acquisition works on the
/// new master with a larger token, the old holder sees the loss, and its fenced write is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_lost_in_a_failover_is_reported_and_its_writes_are_refused() {
    let topology = RedisSentinel::spawn();
    let stale_locker = connect(&topology).await;
    let other = connect(&topology).await;
    let storage = Fenced::default();
    let stale = stale_locker.lock("k").await.unwrap();
    assert!(storage.write(stale.fencing_token()));

    let new = topology.failover();
    new.cmd(&["DEL", "lock:{k}"]).unwrap();
    let wait = LockOptions::new().wait(LEASE * 2);
    let guard = other.lock_with("k", wait).await.unwrap();
    assert!(
        lock_holder(new, "k").is_some(),
        "not taken on the new master"
    );
    assert!(guard.fencing_token() > stale.fencing_token());
    assert!(storage.write(guard.fencing_token()));

    timeout(LEASE * 2, stale.lost())
        .await
        .expect("the stale holder never saw its loss");
    assert!(
        !storage.write(stale.fencing_token()),
        "a stale holder's write went through"
    );
    guard.release().await.unwrap();
}

/// Who leads an election is read from any process through a failover: before it, with
/// the leader's fencing token; after it, by its id alone, since a token drawn after a
/// failover carries the epoch its connection saw, which Redis does not record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_leads_is_read_through_a_failover() {
    let topology = RedisSentinel::spawn();
    let (candidate, follower) = (connect(&topology).await, connect(&topology).await);
    let first = candidate.election("e").campaign("a").await.unwrap();
    let first_token = first.fencing_token();
    let leader = follower.election("e").leader().await.unwrap();
    let leader = leader.expect("a leads");
    assert_eq!(
        (leader.id.as_str(), leader.fencing_token),
        ("a", Some(first_token))
    );
    first.resign().await.unwrap();

    topology.failover();
    let second = candidate.election("e").campaign("b").await.unwrap();
    assert!(second.fencing_token() > first_token);
    let leader = follower.election("e").leader().await.unwrap();
    let leader = leader.expect("b leads");
    assert_eq!((leader.id.as_str(), leader.fencing_token), ("b", None));
    second.resign().await.unwrap();
    assert_eq!(follower.election("e").leader().await.unwrap(), None);
}
