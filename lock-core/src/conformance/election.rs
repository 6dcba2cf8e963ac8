//! Leader election ([`crate::Election`]): one leader among candidates on separate
//! `Locker`s, its id and fencing token readable from a process that holds nothing, a
//! leadership that ends followed by another with a higher token, resigning, dropped
//! campaigns, the watch (told by the store where it can tell, and again after a fault cut
//! what tells it), and `run` cancelling its work on a loss.

use super::paused::until_waiting;
use crate::{Leader, Leadership};

use super::*;

/// Candidates, each on a `Locker` of its own, lead one at a time, each once, with
/// fencing tokens growing in the order they led.
pub async fn one_candidate_leads_at_a_time(store: &impl StoreUnderTest) {
    const CANDIDATES: usize = 4;
    let leading = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut campaigns = Vec::new();
    for i in 0..CANDIDATES {
        let locker = store.locker().await;
        let (leading, tokens) = (leading.clone(), tokens.clone());
        campaigns.push(tokio::spawn(async move {
            let election = locker.election("elected");
            let leadership = election.campaign(format!("candidate-{i}")).await.unwrap();
            assert_eq!(
                leading.fetch_add(1, Ordering::SeqCst),
                0,
                "two leaders at once"
            );
            tokens.lock().unwrap().push(leadership.fencing_token());
            sleep(20 * MS).await;
            leading.fetch_sub(1, Ordering::SeqCst);
            leadership.resign().await.unwrap();
        }));
    }
    for campaign in campaigns {
        join(campaign).await;
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), CANDIDATES);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens out of order: {tokens:?}"
    );
}

/// Who leads, read from a `Locker` that holds nothing: the leader's id and fencing
/// token, in `leader()`, `inspect` and `watch()`; nobody once it resigned.
pub async fn the_leader_is_read_by_a_process_holding_nothing(store: &impl StoreUnderTest) {
    let [candidate, follower] = two(store).await;
    let watched = follower.election("read").watch_interval(50 * MS);
    let mut watch = watched.watch();
    assert_eq!(watched.leader().await.unwrap(), None, "nobody leads yet");

    let leadership = candidate
        .election("read")
        .campaign("replica-a")
        .await
        .unwrap();
    assert_eq!(leadership.id(), "replica-a");
    assert!(leadership.is_leader());
    let expected = Leader {
        id: "replica-a".into(),
        fencing_token: Some(leadership.fencing_token()),
    };
    assert_eq!(watched.leader().await.unwrap(), Some(expected.clone()));
    let info = follower.inspect("read").await.unwrap().expect("held");
    assert_eq!(
        info.holders[0].holder_id.as_deref(),
        Some("replica-a"),
        "{info:?}"
    );
    timeout(
        PATIENCE,
        watch.wait_for(|seen| seen.as_ref() == Some(&expected)),
    )
    .await
    .expect("the watch never saw the leader")
    .unwrap();

    leadership.resign().await.unwrap();
    assert_eq!(watched.leader().await.unwrap(), None, "resigned");
    timeout(PATIENCE, watch.wait_for(Option::is_none))
        .await
        .expect("the watch never saw the leader go")
        .unwrap();
}

/// A follower's `watch()` is told of each change of leader by the store, with no asking:
/// its interval is an hour, yet it sees a leader come, hand over and go. Nothing to
/// check on a store whose followers ask ([`Followers::Ask`]).
pub async fn a_follower_is_told_of_each_new_leader(store: &impl StoreUnderTest) {
    if store.followers() == Followers::Ask {
        return;
    }
    let [a, b] = two(store).await;
    let follower = store.locker().await;
    let election = follower.election("told").watch_interval(3600 * SEC);
    let watch = election.watch();
    let seen = |id: Option<&'static str>| {
        let mut watch = watch.clone();
        async move {
            let seen = watch.wait_for(|leader| leader.as_ref().map(|l| l.id.as_str()) == id);
            timeout(PATIENCE, seen).await.is_ok()
        }
    };
    assert!(seen(None).await);
    let first = a.election("told").campaign("a").await.unwrap();
    assert!(seen(Some("a")).await, "the first leader never told");
    let next = tokio::spawn(async move { b.election("told").campaign("b").await });
    until_waiting(&a, "told", 20 * MS).await;
    first.resign().await.unwrap();
    let second = timeout(PATIENCE, next).await.unwrap().unwrap().unwrap();
    assert!(seen(Some("b")).await, "the hand-over never told");
    second.resign().await.unwrap();
    assert!(seen(None).await, "the last leader's going never told");
}

/// A follower whose news was cut (its connection dropped, as a network fault would drop
/// it) listens again by itself and is told of the next change, with no asking. Nothing
/// to check on a store with nothing to cut ([`StoreUnderTest::cut_followers`]).
pub async fn a_follower_is_told_again_after_its_news_was_cut(store: &impl StoreUnderTest) {
    if store.followers() == Followers::Ask {
        return;
    }
    let [candidate, follower] = two(store).await;
    let mut watch = follower.election("cut").watch_interval(3600 * SEC).watch();
    let leadership = candidate.election("cut").campaign("a").await.unwrap();
    let leads = |leader: &Option<Leader>| leader.as_ref().is_some_and(|l| l.id == "a");
    timeout(PATIENCE, watch.wait_for(leads))
        .await
        .expect("the leader never told")
        .unwrap();
    if !store.cut_followers(&follower, "cut").await {
        return;
    }
    leadership.resign().await.unwrap();
    timeout(PATIENCE, watch.wait_for(Option::is_none))
        .await
        .expect("a follower whose news was cut was never told again")
        .unwrap();
}

/// A leadership that ends as a crashed leader's would (its lease runs out, its session
/// ends) fires its `lost()`, and a waiting candidate leads with a higher token, with which
/// a fenced counter refuses the old leader's late write.
pub async fn a_leader_that_ends_is_followed_with_a_higher_token(store: &impl StoreUnderTest) {
    let [crashing, next] = two(store).await;
    let old = crashing
        .election("followed")
        .campaign_with("old", ending(store))
        .await
        .unwrap();
    let election = next.election("followed");
    let follower = tokio::spawn(async move { election.campaign("new").await });
    if store.holds() == Holds::Session {
        // A lease may run out before its follower is counted: only a session waits for it.
        until_waiting(&next, "followed", 20 * MS).await;
    }
    end_holds(store, &crashing).await;
    timeout(PATIENCE, old.lost())
        .await
        .expect("the old leader never learnt it lost");
    assert!(!old.is_leader());
    let new = timeout(PATIENCE, follower)
        .await
        .expect("no one led after the leader ended")
        .unwrap()
        .unwrap();
    assert!(new.fencing_token() > old.fencing_token());
    let leader = next.election("followed").leader().await.unwrap();
    assert_eq!(leader.map(|l| l.id), Some("new".into()));

    let mut counter = FencedCounter::default();
    assert!(counter.bump(new.fencing_token()), "the new leader's write");
    assert!(
        !counter.bump(old.fencing_token()),
        "the old leader's late write"
    );
    assert_eq!(counter.value, 1);
    new.resign().await.unwrap();
}

/// A counter that refuses a bump with a fencing token older than the newest it took.
#[derive(Default)]
struct FencedCounter {
    value: u64,
    newest: u64,
}

impl FencedCounter {
    /// Whether the bump was taken.
    fn bump(&mut self, fence: u64) -> bool {
        if fence < self.newest {
            return false;
        }
        (self.newest, self.value) = (fence, self.value + 1);
        true
    }
}

/// Resigning hands the leadership to a waiting candidate at once; a dropped campaign
/// leaves nothing, and a dropped leadership resigns.
pub async fn resigning_hands_over_and_dropping_leaves_nothing(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let first = a.election("handed").campaign("a").await.unwrap();

    let dropped = b.election("handed");
    let cut = timeout(50 * MS, dropped.campaign("dropped")).await;
    assert!(cut.is_err(), "a second candidate led beside the first");

    let waiting = {
        let election = b.election("handed");
        tokio::spawn(async move { election.campaign("b").await })
    };
    until_waiting(&a, "handed", 20 * MS).await;
    let resigned = Instant::now();
    first.resign().await.unwrap();
    let second = timeout(PATIENCE, waiting)
        .await
        .expect("resigning handed over nothing")
        .unwrap()
        .unwrap();
    let handed_in = resigned.elapsed();
    assert!(handed_in < PATIENCE, "handed over after {handed_in:?}");
    let leader = a.election("handed").leader().await.unwrap();
    assert_eq!(leader.map(|l| l.id), Some("b".into()));

    drop(second);
    b.flush().await;
    let third = a
        .election("handed")
        .campaign_with("c", LockOptions::new().wait(PATIENCE))
        .await
        .expect("a dropped leadership or campaign left the election held");
    third.resign().await.unwrap();
    assert_eq!(a.election("handed").leader().await.unwrap(), None);
}

/// `run` cancels its work when the leadership is lost (here forced open), campaigns
/// again, and returns the work's output once it finishes while leading.
pub async fn run_cancels_its_work_when_leadership_is_lost(store: &impl StoreUnderTest) {
    let [worker, operator] = two(store).await;
    let started = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(AtomicBool::new(false));
    let job = {
        let (started, cancelled) = (started.clone(), cancelled.clone());
        let opts = LockOptions::new().lease(SEC);
        tokio::spawn(async move {
            let election = worker.election("job");
            election
                .run_with("worker", opts, |leadership: &Leadership| {
                    let round = started.fetch_add(1, Ordering::SeqCst);
                    let on_drop = SetOnDrop(cancelled.clone());
                    let fence = leadership.fencing_token();
                    async move {
                        if round == 0 {
                            std::future::pending::<()>().await;
                        }
                        std::mem::forget(on_drop);
                        fence
                    }
                })
                .await
        })
    };
    eventually(PATIENCE, "the work to start", || {
        ready(started.load(Ordering::SeqCst) == 1)
    })
    .await;
    let first = operator
        .election("job")
        .leader()
        .await
        .unwrap()
        .expect("leads");
    match operator.force_unlock("job").await {
        Ok(held) => assert!(held, "the job's election was held"),
        Err(e) if e.is_config() => {
            job.abort();
            return; // a store that cannot force a lock open: nothing to check
        }
        Err(e) => panic!("force_unlock: {e}"),
    }
    let fence = timeout(PATIENCE, job)
        .await
        .expect("the work was not cancelled and run again")
        .unwrap()
        .unwrap();
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the first work was not dropped"
    );
    assert_eq!(started.load(Ordering::SeqCst), 2);
    assert!(fence > first.fencing_token.expect("the leader's fencing token"));
    assert_eq!(operator.election("job").leader().await.unwrap(), None);
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
