//! The auditor: a background job that one replica at a time runs, however many share the
//! store, and `GET /audit`, which tells who runs it.
//!
//! Every replica campaigns in the election [`ELECTION`] as its replica id
//! (`BANK_REPLICA_ID`). The leader adds up every account's balance at once, then every
//! `BANK_AUDIT_INTERVAL_MS`, and keeps its last audit; the others wait. Should the leader
//! lose its leadership (its lease ran out, its session ended, an operator forced it open),
//! its audits stop at once and it campaigns again; should it stop, its leadership is given
//! back and another replica leads. The election takes only the `Locker`, so it runs on
//! whichever lock store the bank has. On PostgreSQL a follower's campaign waits inside the
//! server, on a session that holds nothing else, so one of each follower's lock
//! connections (`store::postgres::LOCK_CONNECTIONS`) stays busy with it.
//!
//! An audit only reads. Were it to write (a report, a ledger entry), it would pass its
//! leadership's fencing token along, as the account routes pass their lock's, so that a
//! deposed leader's late write is refused.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::State;
use lock_core::{Election, Leadership, Locker};
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::app::ApiError;
use crate::service::{Bank, BankError};
use crate::store::Store;

/// The election whose leader audits: one for the whole bank, shared by every replica.
pub(crate) const ELECTION: &str = "bank:auditor";

/// One audit: every account's balance added up, by the leader of its day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Audit {
    /// The sum of every balance.
    pub(crate) total: i128,
    /// How many accounts there are.
    pub(crate) accounts: u64,
    /// When the balances were read, in milliseconds since the Unix epoch.
    pub(crate) as_of_unix_ms: u64,
    /// The id of the replica that audited, leading.
    pub(crate) leader: String,
    /// The fencing token of its leadership.
    pub(crate) fencing_token: u64,
}

/// A replica's auditor: its candidacy in [`ELECTION`] and what it saw. Cheap to clone;
/// nothing runs until [`spawn`](Self::spawn).
#[derive(Debug, Clone)]
pub(crate) struct Auditor {
    election: Election,
    replica_id: Arc<str>,
    interval: Duration,
    state: Arc<Mutex<AuditState>>,
}

#[derive(Debug, Default)]
struct AuditState {
    /// Whether this replica leads, as far as it knows: set while its audits run.
    leading: bool,
    last: Option<Audit>,
}

impl Auditor {
    /// The auditor of the replica `replica_id`, which audits every `interval` while it
    /// leads the election on `locker`.
    pub(crate) fn new(locker: &Locker, replica_id: &str, interval: Duration) -> Auditor {
        Auditor {
            election: locker.election(ELECTION),
            replica_id: replica_id.into(),
            interval,
            state: Arc::default(),
        }
    }

    /// The id this replica campaigns as.
    pub(crate) fn replica_id(&self) -> &str {
        &self.replica_id
    }

    /// Whether this replica leads, as far as it knows without asking the store.
    pub(crate) fn leading(&self) -> bool {
        self.state().leading
    }

    /// The last audit this replica ran, if it ever led.
    pub(crate) fn last(&self) -> Option<Audit> {
        self.state().last.clone()
    }

    /// Campaigns, and audits the balances in `store` while leading, until the task is
    /// aborted: its leadership, if it leads, is then given back (in the background:
    /// `Locker::flush` waits for it), and another replica takes over.
    pub(crate) fn spawn(&self, store: Store) -> JoinHandle<()> {
        let auditor = self.clone();
        tokio::spawn(async move {
            let replica_id = auditor.replica_id.to_string();
            let ran = auditor
                .election
                .run(replica_id, |leadership: &Leadership| {
                    let leader = leadership.id().to_owned();
                    auditor
                        .clone()
                        .lead(store.clone(), leader, leadership.fencing_token())
                })
                .await;
            // The audits never end by themselves, so only an id the store refuses ends
            // the campaign; the configuration checked it.
            if let Err(e) = ran {
                tracing::error!(error = %e, "the auditor stopped");
            }
        })
    }

    /// Audits now, then every interval, as `leader` with its leadership's
    /// `fencing_token`, for as long as the leadership lasts: the election drops (cancels)
    /// this future once it is lost.
    async fn lead(self, store: Store, leader: String, fencing_token: u64) {
        let _leading = Leading::start(&self.state);
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match store.totals().await {
                Ok(totals) => {
                    let audit = Audit {
                        total: totals.total,
                        accounts: totals.accounts,
                        as_of_unix_ms: unix_ms(SystemTime::now()),
                        leader: leader.clone(),
                        fencing_token,
                    };
                    tracing::info!(?audit, "audited");
                    self.state().last = Some(audit);
                }
                Err(e) => tracing::warn!(error = %e, "the audit failed; trying again later"),
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, AuditState> {
        // every update is one assignment, so a poisoned state is still whole
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Marks the replica as leading while its audits run, however they end.
struct Leading<'a>(&'a Mutex<AuditState>);

impl<'a> Leading<'a> {
    fn start(state: &'a Mutex<AuditState>) -> Leading<'a> {
        set_leading(state, true);
        Leading(state)
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        set_leading(self.0, false);
    }
}

fn set_leading(state: &Mutex<AuditState>, leading: bool) {
    state.lock().unwrap_or_else(PoisonError::into_inner).leading = leading;
}

fn unix_ms(at: SystemTime) -> u64 {
    let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}

/// Who leads the election, as the store sees it.
#[derive(Debug, Serialize)]
pub(crate) struct LeaderReport {
    id: String,
    /// `null` where the store cannot tell it (Sentinel after a failover).
    fencing_token: Option<u64>,
}

/// `GET /audit`'s answer.
#[derive(Debug, Serialize)]
pub(crate) struct AuditReport {
    /// This replica's id.
    replica: String,
    /// Who leads now; `null` when nobody does.
    leader: Option<LeaderReport>,
    /// Whether this replica leads, as far as it knows.
    leading: bool,
    /// The last audit this replica ran; `null` if it never led.
    last_audit: Option<Audit>,
}

/// `GET /audit`: who leads the auditor's election now (asked of the lock store), whether
/// this replica does, and the last audit it ran; `503` when the lock store does not answer.
pub(crate) async fn report(State(bank): State<Bank>) -> Result<Json<AuditReport>, ApiError> {
    let auditor = bank.auditor();
    let leader = auditor
        .election
        .leader()
        .await
        .map_err(BankError::Lock)?
        .map(|leader| LeaderReport {
            id: leader.id,
            fencing_token: leader.fencing_token,
        });
    Ok(Json(AuditReport {
        replica: auditor.replica_id().to_owned(),
        leader,
        leading: auditor.leading(),
        last_audit: auditor.last(),
    }))
}
