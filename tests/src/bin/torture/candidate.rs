//! A worker process as one candidate of an election: it campaigns for the election named
//! for the first key until the main process closes its stdin, and while it leads it
//! writes, again and again, to the resource of that key through the ledger's fence with
//! its leadership's fencing token.
//!
//! Each write follows a stretch of work begun once the candidate saw itself leading
//! ([`Leadership::is_leader`], which asks nothing): a leader paused there (SIGSTOP) past
//! its lease writes once it resumes, before it learns that it lost, so that only the
//! fence stands between its late write and the newer leader's. A write the fence refused
//! ends the leadership (a newer leader exists); the candidate then resigns, which finds
//! the leadership gone, and campaigns again.

use std::time::Duration;

use lock_core::{Leadership, LockError, Locker};
use tokio_util::sync::CancellationToken;

use crate::ledger::{Event, Ledger};

/// A leader's stretch of work before each write, in lifetimes of its hold: long beside
/// a round trip, so that a pause most likely lands in it.
const WORK_PER_LIFETIME: u32 = 10;

/// Campaigns and leads until `stop`.
pub(crate) async fn run(
    locker: &Locker,
    ledger: &Ledger,
    key: &str,
    lifetime: Duration,
    stop: CancellationToken,
) {
    let election = locker.election(key);
    let id = std::process::id().to_string();
    while !stop.is_cancelled() {
        let campaign = election.campaign(id.as_str());
        let leadership = tokio::select! {
            () = stop.cancelled() => return,
            leadership = campaign => leadership,
        };
        match leadership {
            Ok(leadership) => lead(ledger, key, lifetime, leadership, &stop).await,
            Err(_) => {
                count(ledger, Event::LockError).await;
                tokio::time::sleep(lifetime / WORK_PER_LIFETIME).await;
            }
        }
    }
}

/// Writes under `leadership` until it is lost, the fence refuses a write, or `stop`;
/// then resigns. Overtaken (the fence refused its write), its resignation must find the
/// leadership gone: a resignation that succeeds is counted as a claimed ended hold.
async fn lead(
    ledger: &Ledger,
    key: &str,
    lifetime: Duration,
    leadership: Leadership,
    stop: &CancellationToken,
) {
    let token = leadership.fencing_token();
    if let Err(e) = ledger.took_over(key, token).await {
        eprintln!("torture worker: the ledger failed: {e}");
    }
    let mut overtaken = false;
    while leadership.is_leader() && !stop.is_cancelled() {
        tokio::time::sleep(lifetime / WORK_PER_LIFETIME).await;
        match ledger.leader_write(key, token).await {
            Ok(true) => count(ledger, Event::Section).await,
            Ok(false) => {
                overtaken = true;
                break;
            }
            Err(e) => eprintln!("torture worker: the ledger failed: {e}"),
        }
    }
    if !leadership.is_leader() {
        count(ledger, Event::Lost).await;
    }
    match leadership.resign().await {
        Err(LockError::NotHeld { .. }) => count(ledger, Event::ReleaseFoundItGone).await,
        Ok(()) if overtaken => count(ledger, Event::ClaimedEnded).await,
        _ => {}
    }
}

async fn count(ledger: &Ledger, event: Event) {
    if let Err(e) = ledger.count(event).await {
        eprintln!("torture worker: the ledger failed: {e}");
    }
}
