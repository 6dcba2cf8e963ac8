//! A Redis Cluster of three masters of the test's own: locks whose keys live on every
//! master. The contract tests every store passes are in the conformance suite
//! (`conformance.rs`, `cluster::`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LockOptions, Locker};
use lock_tests::{RedisCluster, TestServer, eventually, lock_key};

#[path = "common/wake.rs"]
mod wake;
use tokio::time::{Instant, sleep};

const SAFETY_POLL: Duration = Duration::from_secs(4);

async fn connect(cluster: &RedisCluster) -> Locker {
    Locker::builder()
        .cluster(cluster.urls())
        .safety_poll(SAFETY_POLL)
        .build()
        .await
        .expect("connect to the test cluster")
}

/// One lock name on each of the cluster's three masters.
fn one_name_per_master(cluster: &RedisCluster) -> Vec<String> {
    const MASTERS: usize = 3;
    let mut names: Vec<(usize, String)> = Vec::new();
    for n in 0.. {
        let name = format!("account:{n}");
        let node = cluster.node_for_key(&lock_key(&name));
        if names.iter().all(|(taken, _)| *taken != node) {
            names.push((node, name));
        }
        if names.len() == MASTERS {
            break;
        }
    }
    names.into_iter().map(|(_, name)| name).collect()
}

/// Tasks of two `Locker`s each add 1 to a counter kept outside the lock, read and written
/// apart, under locks on all three masters: no update is lost and no two tasks are ever
/// inside one lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_holds_on_every_master() {
    const TASKS: usize = 4;
    const ROUNDS: u64 = 25;
    let cluster = RedisCluster::spawn();
    let lockers = [connect(&cluster).await, connect(&cluster).await];
    for name in one_name_per_master(&cluster) {
        let count = Arc::new(AtomicU64::new(0));
        let inside = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let locker = lockers[t % 2].clone();
            let (name, count, inside) = (name.clone(), count.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = locker.lock(&name).await.unwrap();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two inside {name}"
                    );
                    let read = count.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    count.store(read + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(
            count.load(Ordering::SeqCst),
            TASKS as u64 * ROUNDS,
            "{name}"
        );
    }
}

/// On every master, a waiter of another `Locker` gets a lock soon after its release:
/// woken by the release, where the safety poll would come seconds later. The wake-up is
/// sharded: published (`SPUBLISH`) on the lock's own master, never broadcast (`PUBLISH`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_on_every_master() {
    let cluster = RedisCluster::spawn();
    let (holder, waiter) = (connect(&cluster).await, connect(&cluster).await);
    for name in one_name_per_master(&cluster) {
        let node = &cluster.nodes()[cluster.node_for_key(&lock_key(&name))];
        let published = node.calls("spublish");
        wake::a_release_wakes_the_waiter(&holder, &waiter, &name, SAFETY_POLL).await;
        assert!(
            node.calls("spublish") > published,
            "{name}: no wake-up was published on the lock's own master"
        );
    }
    for node in cluster.nodes() {
        assert_eq!(node.calls("publish"), 0, "a wake-up was broadcast");
    }
}

/// Locks on different masters, taken together, are taken one by one in key order; when
/// one of them is held elsewhere, those already taken are given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_different_masters_are_taken_together_or_not_at_all() {
    let cluster = RedisCluster::spawn();
    let (a, b) = (connect(&cluster).await, connect(&cluster).await);
    let names = one_name_per_master(&cluster);
    let all = a.lock_all(&names, LockOptions::new()).await.unwrap();
    for name in &names {
        assert!(b.try_lock(name).await.unwrap().is_none(), "{name} was free");
    }
    all.release().await.unwrap();

    let last = names.iter().max().unwrap();
    let blocker = b.lock(last).await.unwrap();
    let quick = LockOptions::new().wait(Duration::from_millis(300));
    let err = a.lock_all(&names, quick).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    a.flush().await;
    for name in names.iter().filter(|n| *n != last) {
        let taken = b.try_lock(name).await.unwrap();
        assert!(taken.is_some(), "{name} was kept after the others failed");
    }
    blocker.release().await.unwrap();
}

/// A cluster of three masters with a replica each: a master is killed while locks are
/// held on every master; once its replica has taken over, every lock is still held and
/// renewed, and new ones are served on every slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_are_kept_and_served_when_a_master_dies_and_its_replica_takes_over() {
    const LEASE: Duration = Duration::from_secs(10);
    let mut cluster = RedisCluster::spawn_with_replicas();
    let names = one_name_per_master(&cluster);
    let (locker, other) = (connect(&cluster).await, connect(&cluster).await);
    let held = LockOptions::new().lease(LEASE);
    let mut guards = Vec::new();
    for name in &names {
        guards.push(locker.lock_with(name, held).await.unwrap());
    }
    // Replicated before the master dies (replication is asynchronous).
    cluster.wait_replicated();
    let key = lock_key(&names[0]);
    let dead = cluster.node_for_key(&key);
    cluster.node_mut(dead).kill();
    eventually(Duration::from_secs(30), "the replica to take over", || {
        std::future::ready(cluster.node_for_key(&key) != dead)
    })
    .await;
    cluster
        .try_wait_ok(Duration::from_secs(30))
        .expect("the cluster serves every slot again");

    // A lease on, every hold (taken before the kill, more than a lease ago by then) is
    // still held: it was renewed, on the new master too.
    let until = Instant::now() + LEASE;
    while Instant::now() < until {
        for guard in &guards {
            assert!(!guard.is_lost(), "{} was lost", guard.key());
        }
        sleep(Duration::from_millis(500)).await;
    }
    for guard in &guards {
        assert!(
            guard.is_held().await.unwrap(),
            "{} is no longer held",
            guard.key()
        );
        assert!(other.try_lock(guard.key()).await.unwrap().is_none());
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
    for name in &names {
        let taken = other.try_lock(name).await.unwrap();
        assert!(taken.is_some(), "{name} is not served");
    }
}
