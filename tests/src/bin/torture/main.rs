//! Mutual exclusion under faults, across OS processes.
//!
//! `cargo run --release -p lock-tests --bin torture` runs every scenario: K worker
//! processes of M tasks each take locks on a handful of keys from a real store (one
//! Redis, a proxied one, a Cluster, Sentinel or RedLock; one ZooKeeper server or a 3-node
//! ensemble; one MariaDB), while this process injects the scenario's fault. In each critical section a
//! task reads a counter kept in a separate Redis that is never faulted (the ledger),
//! yields, and writes the counter plus one through a fenced check-and-set that refuses a
//! token older than the last one accepted. The ledger also counts who is inside, so
//! overlaps show.
//!
//! On Redis a hold lasts as long as its lease (1 s), on ZooKeeper as long as its session
//! (2 s timeout): the faults and the slow holder's sections are measured in that
//! lifetime. The ZooKeeper scenarios pause the server past the session timeout, restart
//! it (its nodes and sessions kept on disk), kill a holder process (its locks free when
//! the server expires its session) or pause one past the timeout (its session expires,
//! the next holder goes, and the fence refuses the paused holder's late writes), and kill
//! the leader of a 3-node ensemble. The MariaDB scenarios (2 s session leases) kill the
//! sessions that hold locks, pause the server past the lease, restart it (fencing tokens
//! kept), and kill or pause a holder process.
//!
//! The election scenarios (`election-*` on one Redis, `zookeeper-election-*` on one
//! ZooKeeper server) run another workload: each worker process is a candidate of one
//! election, and while it leads it writes to a resource behind the same fence with its
//! leadership's fencing token (`candidate`). The leader's process is killed, or paused
//! past its lease (session) and resumed, while the others campaign; a follower must take
//! over within the lease or session (+ slack), the resumed leader's late writes must be
//! refused, and the writes the fence accepted must never go back in token order.
//!
//! On PostgreSQL a hold lasts as long as its session, which the server ends once idle for
//! the session lease (2 s). The PostgreSQL scenarios end the holding sessions
//! (`pg_terminate_backend`), pause the server past the lease, restart it (the fence table
//! survives it), kill a holder process (the server frees its locks as its connections
//! close) and pause one past the lease (its locks come free within lease + 1 s). There
//! every worker also checks each hold before releasing it: a hold whose session ended
//! must have reported itself lost.
//!
//! Afterwards it checks each key: no lost update (the counter equals the writes
//! accepted), no token granted twice; the lock's own promises, from what every worker
//! recorded (`promises`): no lock call that waited took longer than its wait + 100 ms
//! (the paused holder's, its pause longer), no guard was lost already as its lock call
//! handed it out, and no holder whose section the fence refused (a newer holder exists)
//! still claimed its hold through `is_held()` or `release()`; and whatever the scenario's
//! expected outcome adds. Then it prints a table, and exits with 1 if any check failed.
//!
//! `torture worker ...` is the worker process; the main process starts it.

mod candidate;
mod ledger;
mod options;
mod promises;
mod report;
mod scenario;
mod store;
mod worker;

use std::process::ExitCode;

use options::{Command, Options};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(worker::COMMAND) {
        return worker::main(&args[1..]);
    }
    let options = match Options::parse(&args) {
        Ok(Command::Run(options)) => options,
        Ok(Command::Usage) => {
            println!("{}", options::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Command::List) => {
            for scenario in scenario::ALL {
                println!("{}", scenario.name);
            }
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("torture: {e}\n\n{}", options::USAGE);
            return ExitCode::from(2);
        }
    };
    let mut rows = Vec::new();
    for scenario in options.scenarios() {
        eprintln!("torture: {} ...", scenario.name);
        let row = scenario::run(scenario, &options);
        eprintln!("torture: {} {}", scenario.name, row.verdict());
        rows.push(row);
    }
    report::print(&options, &rows);
    if rows.iter().all(report::Row::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
