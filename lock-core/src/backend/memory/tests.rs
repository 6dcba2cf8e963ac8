//! The store's unit tests, through its operations: leases, fencing tokens, fair lines,
//! writer preference, a semaphore's stored count, and what an operator sees.

use super::*;

const SEC: Duration = Duration::from_secs(1);

/// One attempt by `token` at "k" as `kind`, by a caller that began to ask at `since`
/// and waits a second more.
fn asked_at(m: &MemoryStore, token: &str, kind: LockKind, since: Instant) -> Attempt {
    let request = Acquire {
        key: LockKey::new("k").unwrap(),
        token: token.into(),
        kind,
        lease: SEC * 10,
        holder_id: None,
        deadline: Instant::now() + SEC,
        since,
    };
    m.try_acquire(&request, SEC).unwrap()
}

/// One attempt by `token` at `key`, for `lease`, as `kind`, by a caller that waits
/// `waits_for` more (a fair one queues).
fn attempt(
    m: &MemoryStore,
    key: &str,
    token: &str,
    lease: Duration,
    kind: LockKind,
    waits_for: Duration,
) -> Attempt {
    let request = Acquire {
        key: LockKey::new(key).unwrap(),
        token: token.into(),
        kind,
        lease,
        holder_id: None,
        deadline: Instant::now(),
        since: Instant::now(),
    };
    m.try_acquire(&request, waits_for).unwrap()
}

fn exclusive(m: &MemoryStore, token: &str) -> Attempt {
    attempt(m, "k", token, SEC, LockKind::Exclusive, Duration::ZERO)
}

fn acquired(a: Attempt) -> u64 {
    match a {
        Attempt::Acquired { fence, .. } => fence,
        Attempt::Held { ttl, .. } => panic!("expected to acquire, held for {ttl:?}"),
    }
}

fn release(m: &MemoryStore, token: &str, kind: LockKind) -> bool {
    m.release("k", token, Release::Holder(kind))
}

#[tokio::test(start_paused = true)]
async fn lease_expiry_frees_the_lock_and_fences_increase() {
    let m = MemoryStore::with_fence_ttl(Duration::from_secs(3600));
    let f1 = acquired(exclusive(&m, "a"));
    let Attempt::Held { ttl, .. } = exclusive(&m, "b") else {
        panic!("acquired a held lock");
    };
    assert_eq!(ttl, Some(SEC));
    tokio::time::advance(SEC).await;
    assert!(!m.holds("k", "a"));
    let f2 = acquired(exclusive(&m, "b"));
    assert!(f2 > f1);
    assert!(
        !release(&m, "a", LockKind::Exclusive),
        "a stale owner released"
    );
    assert!(
        m.extend("k", "a", Duration::from_secs(5)).is_none(),
        "a stale owner extended"
    );
    assert!(m.holds("k", "b"));
    assert!(release(&m, "b", LockKind::Exclusive));
}

#[tokio::test(start_paused = true)]
async fn fence_survives_counter_expiry() {
    let m = MemoryStore::with_fence_ttl(Duration::from_secs(10));
    let f1 = acquired(exclusive(&m, "a"));
    assert!(release(&m, "a", LockKind::Exclusive));
    tokio::time::advance(Duration::from_secs(11)).await;
    let f2 = acquired(exclusive(&m, "b"));
    assert!(f2 > f1, "{f2} <= {f1}");
}

#[tokio::test(start_paused = true)]
async fn a_fair_release_hands_the_lock_to_the_first_in_line() {
    let m = MemoryStore::with_fence_ttl(Duration::from_secs(3600));
    let fair = |token, lease, waits_for| attempt(&m, "k", token, lease, LockKind::Fair, waits_for);
    let f1 = acquired(fair("a", SEC, SEC));
    for waiter in ["b", "c", "b"] {
        let Attempt::Held { clock, .. } = fair(waiter, SEC * 2, SEC) else {
            panic!("{waiter} jumped the line");
        };
        assert!(clock.is_some());
    }
    // One attempt, not queued: does not jump the line either.
    assert!(matches!(
        fair("d", SEC, Duration::ZERO),
        Attempt::Held { .. }
    ));
    assert!(release(&m, "a", LockKind::Fair));
    assert!(m.holds("k", "b"), "handed to the first in line");
    // b missed the hand-over: asking again finds the lock its own.
    tokio::time::advance(Duration::from_millis(500)).await;
    let Attempt::Acquired { fence, until } = fair("b", SEC * 2, SEC) else {
        panic!("the hand-over was lost");
    };
    assert!(fence > f1);
    assert_eq!(until - Instant::now(), Duration::from_millis(1500));
    // c gives up before its turn; d was never in line: the lock goes free.
    assert!(!m.release("k", "c", Release::Leave));
    assert!(release(&m, "b", LockKind::Fair));
    assert!(!m.holds("k", "c"));
    acquired(exclusive(&m, "d"));
}

#[tokio::test(start_paused = true)]
async fn a_free_lock_with_a_line_goes_to_its_first() {
    let m = MemoryStore::with_fence_ttl(Duration::from_secs(3600));
    let fair = |token| attempt(&m, "k", token, SEC, LockKind::Fair, SEC);
    acquired(fair("a"));
    assert!(matches!(fair("b"), Attempt::Held { .. }));
    tokio::time::advance(SEC).await; // a's lease runs out
    assert!(matches!(fair("c"), Attempt::Held { .. }));
    assert!(m.holds("k", "b"));
    // b, handed the lock, gives up on it: it goes on to c.
    assert!(m.release("k", "b", Release::Leave));
    assert!(m.holds("k", "c"));
}

#[tokio::test(start_paused = true)]
async fn readers_that_ask_after_a_waiting_writer_go_in_after_it() {
    use LockKind::{Read, Write};
    let m = MemoryStore::new();
    let ms = Duration::from_millis(1);
    let t0 = Instant::now();
    acquired(asked_at(&m, "r1", Read, t0));
    acquired(asked_at(&m, "r2", Read, t0));
    tokio::time::advance(ms).await;
    let writer_since = Instant::now();
    assert!(matches!(
        asked_at(&m, "w", Write, writer_since),
        Attempt::Held { .. }
    ));
    tokio::time::advance(ms).await;
    let late = Instant::now();
    assert!(
        matches!(asked_at(&m, "r3", Read, late), Attempt::Held { .. }),
        "a reader went in ahead of a waiting writer"
    );
    assert!(release(&m, "r1", Read));
    assert!(matches!(
        asked_at(&m, "w", Write, writer_since),
        Attempt::Held { .. }
    ));
    assert!(release(&m, "r2", Read));
    acquired(asked_at(&m, "w", Write, writer_since));
    assert!(matches!(
        asked_at(&m, "r3", Read, late),
        Attempt::Held { .. }
    ));
    assert!(release(&m, "w", Write));
    acquired(asked_at(&m, "r3", Read, late));
}

#[tokio::test(start_paused = true)]
async fn readers_queued_behind_a_write_go_in_together_before_a_later_writer() {
    use LockKind::{Read, Write};
    let m = MemoryStore::new();
    let ms = Duration::from_millis(1);
    acquired(asked_at(&m, "w1", Write, Instant::now()));
    tokio::time::advance(ms).await;
    let readers_since = Instant::now();
    for reader in ["r1", "r2"] {
        assert!(matches!(
            asked_at(&m, reader, Read, readers_since),
            Attempt::Held { .. }
        ));
    }
    tokio::time::advance(ms).await;
    let w2_since = Instant::now();
    assert!(matches!(
        asked_at(&m, "w2", Write, w2_since),
        Attempt::Held { .. }
    ));
    assert!(release(&m, "w1", Write));
    let f1 = acquired(asked_at(&m, "r1", Read, readers_since));
    let f2 = acquired(asked_at(&m, "r2", Read, readers_since));
    assert!(f2 > f1, "each read draws its own fencing token");
    assert!(matches!(
        asked_at(&m, "w2", Write, w2_since),
        Attempt::Held { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn inspect_shows_each_holder_with_its_lease_and_fence_and_the_tasks_waiting() {
    use LockKind::{Read, Write};
    let m = MemoryStore::with_fence_ttl(SEC * 60);
    let ms = Duration::from_millis;
    assert_eq!(m.inspect("k"), None, "never taken");

    let token = "0123456789abcdef";
    let fence = acquired(attempt(&m, "k", token, SEC * 2, Write, Duration::ZERO));
    tokio::time::advance(ms(500)).await;
    let writer = Acquire {
        key: LockKey::new("k").unwrap(),
        token: "w2".into(),
        kind: Write,
        lease: SEC,
        holder_id: None,
        deadline: Instant::now() + SEC,
        since: Instant::now(),
    };
    let waiting = m.join(&writer).line;
    let info = m.inspect("k").unwrap();
    let holder = HolderInfo::new(token, Some(ms(1500)), Some(fence));
    assert_eq!(info, LockInfo::new(Some(Write), vec![holder], Some(1)));
    assert_eq!(info.holders[0].token_prefix, "01234567");
    m.locks.lines.leave(&waiting, WhenEmpty::Remove, |_| {});
    tokio::time::advance(ms(1500)).await;
    assert_eq!(m.inspect("k"), None, "its lease ran out");

    let f1 = acquired(asked_at(&m, "r1", Read, Instant::now()));
    tokio::time::advance(ms(100)).await;
    let f2 = acquired(asked_at(&m, "r2", Read, Instant::now()));
    let readers = vec![
        HolderInfo::new("r1", Some(ms(9900)), Some(f1)),
        HolderInfo::new("r2", Some(SEC * 10), Some(f2)),
    ];
    let info = m.inspect("k").unwrap();
    assert_eq!(info, LockInfo::new(Some(Read), readers, Some(0)));
    assert!(release(&m, "r1", Read) && release(&m, "r2", Read));
    assert_eq!(m.inspect("k"), None, "released");

    // A semaphore shows its stored count, not the one its holders asked with.
    acquired(asked_at(
        &m,
        "p",
        LockKind::Semaphore { permits: 3 },
        Instant::now(),
    ));
    m.set_permits(&Arc::from("k"), 5);
    let info = m.inspect("k").unwrap();
    assert_eq!(info.kind, Some(LockKind::Semaphore { permits: 5 }));
    assert_eq!(info.holders.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_semaphore_admits_its_count_and_keeps_it() {
    let m = MemoryStore::with_fence_ttl(SEC * 60);
    let three = LockKind::Semaphore { permits: 3 };
    let fences: Vec<u64> = ["a", "b", "c"]
        .iter()
        .map(|t| acquired(asked_at(&m, t, three, Instant::now())))
        .collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]));
    assert!(matches!(
        asked_at(&m, "d", three, Instant::now()),
        Attempt::Held { .. }
    ));
    assert_eq!(m.available("k", 3), 0);
    let request = Acquire {
        key: LockKey::new("k").unwrap(),
        token: "e".into(),
        kind: LockKind::Semaphore { permits: 5 },
        lease: SEC,
        holder_id: None,
        deadline: Instant::now(),
        since: Instant::now(),
    };
    let err = m.try_acquire(&request, Duration::ZERO).unwrap_err();
    assert!(
        err.is_config() && err.to_string().contains("has 3 permits"),
        "{err}"
    );
    // Lowered: the holders keep their permits; none is granted under the new count.
    m.set_permits(&Arc::from("k"), 2);
    let two = LockKind::Semaphore { permits: 2 };
    assert!(release(&m, "a", three));
    assert_eq!(m.available("k", 2), 0);
    assert!(matches!(
        asked_at(&m, "d", two, Instant::now()),
        Attempt::Held { .. }
    ));
    assert!(release(&m, "b", three));
    acquired(asked_at(&m, "d", two, Instant::now()));
    // Unused for as long as its fence counter is kept: the count is forgotten.
    tokio::time::advance(SEC * 61).await;
    assert_eq!(m.available("k", 7), 7);
    acquired(asked_at(
        &m,
        "e",
        LockKind::Semaphore { permits: 7 },
        Instant::now(),
    ));
}
