//! What the lock promises of itself under a fault, judged from what the workers recorded
//! in the ledger: no lock call runs past its wait (by more than [`CALL_SLACK`]), no guard
//! is lost already as a lock call hands it out (but in a failover of an asynchronously
//! replicated master, which Sentinel and Cluster do not promise to survive: see
//! [`BornLost`]), and no holder that the fence found overtaken still claims its hold.

use std::time::Duration;

use lock_tests::RedisServer;

use crate::ledger::{self, CallKind, Event, LockCall};
use crate::report::Row;

/// How much longer than its wait a lock call may take: the scheduling of a worker's
/// tasks and the round trips of its last attempt on a busy machine. A call that only tries
/// (`try_lock`, no wait) is not judged against it: one attempt is bounded by the store's
/// own timeouts, not by a wait, so its longest is only noted.
pub(crate) const CALL_SLACK: Duration = Duration::from_millis(100);

/// A worker process that the main process froze (SIGSTOP): a lock call in flight then
/// cannot return before it resumes, so its calls may take the pause longer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PausedHolder {
    pub(crate) pid: u32,
    /// How long it was frozen.
    pub(crate) span: Duration,
}

/// What a guard lost already as a lock call hands it out says under a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BornLost {
    /// A broken promise.
    Broken,
    /// What the store does not promise under this fault, for this reason.
    Excused(&'static str),
}

/// Adds to `row` what the workers `pids` recorded, and a violation for each promise
/// broken.
pub(crate) fn judge(
    row: &mut Row,
    ledger: &RedisServer,
    pids: &[u32],
    paused: Option<PausedHolder>,
    born_lost: BornLost,
) {
    judge_waits(row, ledger, pids, paused);
    note_tries(row, ledger, pids);
    row.born_lost = ledger::events(ledger, Event::BornLost).expect("read the ledger");
    if let (BornLost::Excused(why), 1..) = (born_lost, row.born_lost) {
        row.note(format!("{} guards born lost: {why}", row.born_lost));
    } else if row.born_lost > 0 {
        let mut violation = format!(
            "{} guards born lost: lost already as the lock call handed them out",
            row.born_lost
        );
        if let Some(paused) = paused {
            let of_paused =
                ledger::events_of(ledger, Event::BornLost, paused.pid).expect("read the ledger");
            violation.push_str(&format!(" ({of_paused} of them the paused holder's)"));
        }
        row.violation(violation);
    }
    row.claimed_ended = ledger::events(ledger, Event::ClaimedEnded).expect("read the ledger");
    if row.claimed_ended > 0 {
        row.violation(format!(
            "{} holders claimed a hold the server had ended: is_held() true or release() Ok \
             after the fence found a newer holder",
            row.claimed_ended
        ));
    }
}

/// The longest call that waited, of every process but the paused one, goes in the row;
/// the paused one's is judged against its wait plus its pause.
fn judge_waits(row: &mut Row, ledger: &RedisServer, pids: &[u32], paused: Option<PausedHolder>) {
    let longest =
        |pid| ledger::longest_call(ledger, pid, CallKind::Waiting).expect("read the ledger");
    let paused_pid = paused.map(|p| p.pid);
    row.longest_call = pids
        .iter()
        .filter(|&&pid| Some(pid) != paused_pid)
        .filter_map(|&pid| longest(pid))
        .reduce(|a, b| if b.ran_further_than(&a) { b } else { a });
    if let Some(call) = row.longest_call.filter(|call| call.overrun() > CALL_SLACK) {
        row.violation(format!(
            "a lock call took {}, past its wait + {} ms",
            describe(call),
            CALL_SLACK.as_millis()
        ));
    }
    let Some(paused) = paused else {
        return;
    };
    if let Some(call) = longest(paused.pid) {
        row.note(format!(
            "the paused holder's longest lock call took {} (paused {} ms)",
            describe(call),
            paused.span.as_millis()
        ));
        if call.overrun() > paused.span + CALL_SLACK {
            row.violation(format!(
                "a lock call of the paused holder took {}, past its wait + its pause + {} ms",
                describe(call),
                CALL_SLACK.as_millis()
            ));
        }
    }
}

/// Notes the longest call that only tried, over every process.
fn note_tries(row: &mut Row, ledger: &RedisServer, pids: &[u32]) {
    let longest = pids
        .iter()
        .filter_map(|&pid| {
            ledger::longest_call(ledger, pid, CallKind::Try).expect("read the ledger")
        })
        .map(|call| call.took)
        .max();
    if let Some(took) = longest {
        row.note(format!(
            "longest try_lock {} ms (not judged)",
            took.as_millis()
        ));
    }
}

/// "X ms on a Y ms wait".
pub(crate) fn describe(call: LockCall) -> String {
    format!(
        "{} ms on a {} ms wait",
        call.took.as_millis(),
        call.wait.as_millis()
    )
}
