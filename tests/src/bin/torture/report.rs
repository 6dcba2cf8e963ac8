//! One row of the summary table per scenario, and the table itself.

use std::time::Duration;

use crate::ledger::{KeyTally, LockCall};
use crate::options::Options;
use crate::promises;
use crate::scenario::Scenario;

/// What one scenario run showed, summed over its keys.
#[derive(Debug)]
pub(crate) struct Row {
    scenario: &'static Scenario,
    duration: Duration,
    pub(crate) faults: u64,
    pub(crate) sections: u64,
    pub(crate) losses: u64,
    pub(crate) released_gone: u64,
    pub(crate) accepted: u64,
    pub(crate) refused: u64,
    pub(crate) refused_reads: u64,
    pub(crate) overlaps: u64,
    pub(crate) lost_updates: u64,
    pub(crate) granted_twice: u64,
    /// The lock call that ran furthest past its wait, of those that waited (the paused
    /// holder's aside).
    pub(crate) longest_call: Option<LockCall>,
    /// Guards lost already as the lock call handed them out.
    pub(crate) born_lost: u64,
    /// Holders that claimed their hold after the fence found a newer one.
    pub(crate) claimed_ended: u64,
    notes: Vec<String>,
    violations: Vec<String>,
}

impl Row {
    pub(crate) fn new(scenario: &'static Scenario, duration: Duration, faults: u64) -> Row {
        Row {
            scenario,
            duration,
            faults,
            sections: 0,
            losses: 0,
            released_gone: 0,
            accepted: 0,
            refused: 0,
            refused_reads: 0,
            overlaps: 0,
            lost_updates: 0,
            granted_twice: 0,
            longest_call: None,
            born_lost: 0,
            claimed_ended: 0,
            notes: Vec::new(),
            violations: Vec::new(),
        }
    }

    /// Adds one key's tally.
    pub(crate) fn add(&mut self, key: KeyTally) {
        self.accepted += key.accepted;
        self.refused += key.refused;
        self.refused_reads += key.refused_reads;
        self.overlaps += key.overlaps;
        self.lost_updates += key.lost_updates();
        self.granted_twice += key.granted_twice;
    }

    pub(crate) fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// A check that failed.
    pub(crate) fn violation(&mut self, violation: String) {
        self.violations.push(violation);
    }

    pub(crate) fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    pub(crate) fn verdict(&self) -> String {
        if self.passed() {
            "ok".to_owned()
        } else {
            format!("FAILED: {}", self.violations.join("; "))
        }
    }
}

/// Prints the table as Markdown, then each scenario's expected outcome and notes.
pub(crate) fn print(options: &Options, rows: &[Row]) {
    println!(
        "{} worker processes x {} tasks over {} keys, lease {} ms (ZooKeeper: session \
         timeout, PostgreSQL: session lease {} ms): `{}`",
        options.processes,
        options.tasks,
        options.keys,
        options.lease.as_millis(),
        options.session_timeout.as_millis(),
        options.command()
    );
    println!();
    println!(
        "| scenario | store | duration | critical sections | faults injected | holds lost | overlaps | stale writes refused | lost updates | longest lock call | born lost | ended holds claimed | result |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|");
    for row in rows {
        println!(
            "| {} | {} | {:.1} s | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.scenario.name,
            row.scenario.deployment.name(),
            row.duration.as_secs_f64(),
            row.sections,
            row.faults,
            row.losses,
            row.overlaps,
            row.refused,
            row.lost_updates,
            row.longest_call.map_or("-".to_owned(), promises::describe),
            row.born_lost,
            row.claimed_ended,
            row.verdict(),
        );
    }
    println!();
    for row in rows {
        let mut line = format!("- {}: {}", row.scenario.name, row.scenario.expected);
        for note in &row.notes {
            line.push_str(&format!("; {note}"));
        }
        println!("{line}.");
    }
}
