//! The read-write lock: readers share it, writers have it alone, a waiting writer goes
//! ahead of readers that ask after it, and a task never upgrades a read into a write.

use tokio::sync::Barrier;

use super::*;

const READ_WRITE: &[LockKind] = &[LockKind::Read, LockKind::Write];

/// Eight readers over two `Locker`s are all inside at once: each waits at a barrier that
/// opens only when all eight hold the read side.
pub async fn readers_overlap(store: &impl StoreUnderTest) {
    const READERS: usize = 8;
    let Some(lockers) = two_with(store, READ_WRITE).await else {
        return; // a store without these kinds: nothing to check
    };
    let barrier = Arc::new(Barrier::new(READERS));
    let tasks: Vec<_> = (0..READERS)
        .map(|i| {
            let (locker, barrier) = (lockers[i % 2].clone(), barrier.clone());
            tokio::spawn(async move {
                let guard = locker.read("shared").await.unwrap();
                assert_eq!(guard.kind(), LockKind::Read);
                timeout(PATIENCE, barrier.wait())
                    .await
                    .expect("readers kept out while another reads");
                guard.release().await.unwrap();
            })
        })
        .collect();
    for task in tasks {
        join(task).await;
    }
    assert!(free_for(&lockers[0], "shared").await);
}

/// 16 tasks over two `Locker`s, each reading three times for every write, never see a
/// writer beside anyone else: no reader while a writer is inside, no two writers. Each
/// grant's fencing token exceeds every earlier one.
pub async fn readers_and_writers_exclude_each_other(store: &impl StoreUnderTest) {
    const TASKS: usize = 16;
    const ROUNDS: usize = 16;
    let Some(lockers) = two_with(store, READ_WRITE).await else {
        return; // a store without these kinds: nothing to check
    };
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let locker = lockers[i % 2].clone();
            let (readers, writers, violations) =
                (readers.clone(), writers.clone(), violations.clone());
            tokio::spawn(async move {
                for round in 0..ROUNDS {
                    let write = (i + round) % 4 == 0;
                    let kind = if write {
                        LockKind::Write
                    } else {
                        LockKind::Read
                    };
                    let guard = locker
                        .lock_with("ledger", long_wait().kind(kind))
                        .await
                        .unwrap();
                    let (mine, other) = if write {
                        (&writers, &readers)
                    } else {
                        (&readers, &writers)
                    };
                    let inside = mine.fetch_add(1, Ordering::SeqCst) + 1;
                    if other.load(Ordering::SeqCst) > 0 || (write && inside > 1) {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    mine.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        join(task).await;
    }
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "a writer was not alone"
    );
}

/// While 16 readers over two `Locker`s take the read side again and again, with their
/// holds overlapping so that it is never free, a writer still gets in: readers that ask
/// after it waits go in after it.
pub async fn a_waiting_writer_gets_in_while_readers_loop(store: &impl StoreUnderTest) {
    const READERS: usize = 16;
    let Some(lockers) = two_with(store, READ_WRITE).await else {
        return; // a store without these kinds: nothing to check
    };
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..READERS)
        .map(|i| {
            let (locker, stop, reads) = (lockers[i % 2].clone(), stop.clone(), reads.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let guard = locker.lock_with("hot", long_wait().kind(LockKind::Read));
                    let guard = guard.await.unwrap();
                    reads.fetch_add(1, Ordering::SeqCst);
                    sleep(5 * MS).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    // The readers are at it.
    let started = Instant::now();
    while reads.load(Ordering::SeqCst) < READERS * 2 {
        assert!(started.elapsed() < PATIENCE, "the readers never got going");
        sleep(MS).await;
    }
    let write = lockers[0]
        .lock_with(
            "hot",
            LockOptions::new().kind(LockKind::Write).wait(PATIENCE),
        )
        .await
        .expect("a writer starved by a stream of readers");
    let other = lockers[1].clone();
    let reader_kept_out = tokio::spawn(async move {
        let opts = LockOptions::new().kind(LockKind::Read);
        other.try_lock_with("hot", opts).await.unwrap().is_none()
    });
    assert!(
        join(reader_kept_out).await,
        "a reader got in beside the writer"
    );
    write.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        join(task).await;
    }
}

/// Readers that wait for a writer all go in together once it releases: each of them
/// holds the read side at once, before any lets go (a barrier shows it).
pub async fn queued_readers_go_in_together_after_a_write(store: &impl StoreUnderTest) {
    const READERS: usize = 6;
    let Some(lockers) = two_with(store, READ_WRITE).await else {
        return; // a store without these kinds: nothing to check
    };
    let write = lockers[0].write("batch").await.unwrap();
    let barrier = Arc::new(Barrier::new(READERS));
    let waiting = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..READERS)
        .map(|i| {
            let (locker, barrier, waiting) =
                (lockers[i % 2].clone(), barrier.clone(), waiting.clone());
            tokio::spawn(async move {
                let read = LockOptions::new().kind(LockKind::Read);
                let refused = locker.try_lock_with("batch", read).await.unwrap();
                assert!(refused.is_none(), "a reader got in beside the writer");
                waiting.fetch_add(1, Ordering::SeqCst);
                let guard = locker
                    .lock_with("batch", long_wait().kind(LockKind::Read))
                    .await
                    .unwrap();
                timeout(PATIENCE, barrier.wait())
                    .await
                    .expect("the readers did not all go in together");
                guard.release().await.unwrap();
            })
        })
        .collect();
    // Every reader has been refused once, and waits for the writer.
    let asked = Instant::now();
    while waiting.load(Ordering::SeqCst) < READERS {
        assert!(asked.elapsed() < PATIENCE, "the readers never asked");
        sleep(MS).await;
    }
    write.release().await.unwrap();
    let woken = Instant::now();
    for task in tasks {
        join(task).await;
    }
    assert!(
        woken.elapsed() < PATIENCE,
        "the readers were not woken by the release"
    );
}

/// A task that reads and asks to write is refused at once with `Upgrade`, by `lock_with`
/// and `try_lock_with` alike (never a timeout, never `Ok(None)`), and keeps its read.
pub async fn an_upgrade_is_refused_at_once(store: &impl StoreUnderTest) {
    let Some([a, b]) = two_with(store, READ_WRITE).await else {
        return; // a store without these kinds: nothing to check
    };
    let read = a.read("doc").await.unwrap();
    let started = Instant::now();
    for kind in [LockKind::Write, LockKind::Exclusive, LockKind::Fair] {
        if !has_kind(&a, kind).await {
            continue; // the store refuses the kind before it looks at the holds
        }
        let opts = LockOptions::new().kind(kind).wait(PATIENCE);
        let err = a.lock_with("doc", opts).await.unwrap_err();
        assert!(err.is_upgrade(), "a reader asking for {kind}: {err}");
        let err = a.try_lock_with("doc", opts).await.unwrap_err();
        assert!(err.is_upgrade(), "a reader trying for {kind}: {err}");
    }
    assert!(started.elapsed() < PATIENCE / 2, "an upgrade waited");
    assert!(read.is_held().await.unwrap(), "the read was lost");
    assert!(!free_for(&b, "doc").await);
    read.release().await.unwrap();
    assert!(free_for(&b, "doc").await);
}

/// A task that writes and asks to read re-enters its write hold: the same token, and the
/// lock stays held until the last of the two guards goes, whichever it is.
pub async fn a_downgrade_reenters_the_write_hold(store: &impl StoreUnderTest) {
    let Some([a, b]) = two_with(store, READ_WRITE).await else {
        return; // a store without these kinds: nothing to check
    };
    for write_goes_first in [true, false] {
        let write = a.write("doc").await.unwrap();
        let read = a.read("doc").await.unwrap();
        assert_eq!(read.fencing_token(), write.fencing_token());
        let (first, last) = if write_goes_first {
            (write, read)
        } else {
            (read, write)
        };
        first.release().await.unwrap();
        assert!(!free_for(&b, "doc").await, "freed with a guard left");
        let other_reader = b
            .try_lock_with("doc", LockOptions::new().kind(LockKind::Read))
            .await
            .unwrap();
        assert!(other_reader.is_none(), "a reader got in beside the writer");
        last.release().await.unwrap();
        assert!(free_for(&b, "doc").await, "the last release kept it");
    }
}

/// One name taken as two kinds, of those the store has: the kinds exclude each other, and
/// neither use sees a store error.
pub async fn kinds_of_one_name_exclude_each_other(store: &impl StoreUnderTest) {
    let [a, b] = two(store).await;
    let permits = LockKind::Semaphore { permits: 3 };
    let mut has = Vec::new();
    for kind in [
        LockKind::Exclusive,
        LockKind::Read,
        LockKind::Write,
        permits,
    ] {
        if has_kind(&a, kind).await {
            has.push(kind);
        }
    }
    let pairs = [
        (LockKind::Exclusive, LockKind::Read),
        (LockKind::Read, LockKind::Exclusive),
        (LockKind::Write, LockKind::Exclusive),
        (LockKind::Read, permits),
        (permits, LockKind::Write),
        (LockKind::Exclusive, permits),
        (permits, LockKind::Exclusive),
    ];
    for (i, (held, asked)) in pairs.into_iter().enumerate() {
        if !has.contains(&held) || !has.contains(&asked) {
            continue;
        }
        let key = format!("mixed:{i}");
        let guard = a
            .lock_with(&key, LockOptions::new().kind(held))
            .await
            .unwrap();
        let other = b
            .try_lock_with(&key, LockOptions::new().kind(asked))
            .await
            .unwrap_or_else(|e| panic!("{asked} while held as {held}: {e}"));
        assert!(other.is_none(), "{asked} taken while held as {held}");
        guard.release().await.unwrap();
        let other = b
            .try_lock_with(&key, LockOptions::new().kind(asked))
            .await
            .unwrap();
        let other = other.unwrap_or_else(|| panic!("{asked} refused once {held} was released"));
        other.release().await.unwrap();
    }
}

/// A reader that crashes (its lease runs out unrenewed, or its session ends) frees only
/// its own share: the other reader still keeps a writer out, and once it releases, the
/// writer gets in.
pub async fn a_crashed_reader_frees_only_its_own_share(store: &impl StoreUnderTest) {
    let Some([a, b]) = two_with(store, READ_WRITE).await else {
        return; // a store without these kinds: nothing to check
    };
    let crashed = a
        .lock_with("shares", ending(store).kind(LockKind::Read))
        .await
        .unwrap();
    let alive = b.read("shares").await.unwrap();
    end_holds(store, &a).await;
    timeout(PATIENCE, crashed.lost())
        .await
        .expect("the crashed read never ended");
    let write = LockOptions::new().kind(LockKind::Write);
    assert!(
        b.try_lock_with("shares", write)
            .await
            .unwrap_err()
            .is_upgrade(),
        "b's own task holds a read: asking it to write is an upgrade"
    );
    let other = a.clone();
    let writer_kept_out = tokio::spawn(async move {
        other
            .try_lock_with("shares", write)
            .await
            .unwrap()
            .is_none()
    });
    assert!(
        join(writer_kept_out).await,
        "the crashed read freed the live one's share"
    );
    assert!(alive.is_held().await.unwrap());
    alive.release().await.unwrap();
    let writer = a
        .lock_with("shares", write.wait(PATIENCE))
        .await
        .expect("the writer, once the live reader left");
    assert!(writer.fencing_token() > crashed.fencing_token());
    writer.release().await.unwrap();
}
