//! The command line of the main process.

use std::time::Duration;

use crate::scenario::{ALL, Scenario};
use crate::store::Deployment;

pub(crate) const USAGE: &str = "\
usage: torture [--short] [--only NAME[,NAME...]] [--processes K] [--tasks M] [--keys N]
       torture --list

Runs each scenario (all unless --only) and prints a table; exits with 1 if a check failed.
The scenarios run on Redis (one server, one behind a proxy, a Cluster, Sentinel, RedLock),
with 1 s leases, on ZooKeeper (one server, a 3-node ensemble: the zookeeper-* ones)
and MariaDB (the mariadb-* ones), with 2 s sessions, and on PostgreSQL (one server: the
postgres-* ones), with 2 s session leases.

  --short        the ordinary test suite's version: fewer processes and seconds
  --only NAMES   the scenarios to run, by name (see the table)
  --processes K  worker processes per scenario (default 4; 2 with --short)
  --tasks M      tasks per worker process (default 8; 3 with --short)
  --keys N       keys the tasks share (default 4; 3 with --short)
  --list         prints the scenarios' names";

/// What the command line asks for.
#[derive(Debug)]
pub(crate) enum Command {
    Run(Options),
    Usage,
    List,
}

/// How many processes, tasks and keys, and how long each phase of a scenario lasts.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) processes: usize,
    pub(crate) tasks: usize,
    pub(crate) keys: usize,
    /// The lease of every lock on Redis, renewed by the watchdog.
    pub(crate) lease: Duration,
    /// The session timeout of every worker on ZooKeeper, and its session lease on
    /// MariaDB and PostgreSQL, where a hold lasts as long as its session.
    pub(crate) session_timeout: Duration,
    /// How long the workers run before the fault.
    pub(crate) before: Duration,
    /// How long they run once the fault is over.
    pub(crate) after: Duration,
    only: Vec<String>,
    short: bool,
}

impl Options {
    pub(crate) fn parse(args: &[String]) -> Result<Command, String> {
        let short = args.iter().any(|a| a == "--short");
        let ms = Duration::from_millis;
        let (processes, tasks, keys, before, after) = if short {
            (2, 3, 3, ms(1500), ms(2500))
        } else {
            (4, 8, 4, ms(5000), ms(10_000))
        };
        let mut options = Options {
            processes,
            tasks,
            keys,
            lease: Duration::from_secs(1),
            // Short, so that the scenarios are quick, yet twice the shortest the harness's
            // servers allow (2 ticks of 500 ms), so that a busy machine ends none by chance.
            session_timeout: Duration::from_secs(2),
            before,
            after,
            only: Vec::new(),
            short,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--short" => {}
                "--help" | "-h" => return Ok(Command::Usage),
                "--list" => return Ok(Command::List),
                "--only" => options.only = value()?.split(',').map(str::to_owned).collect(),
                "--processes" => options.processes = count(arg, value()?, 2)?,
                "--tasks" => options.tasks = count(arg, value()?, 1)?,
                "--keys" => options.keys = count(arg, value()?, 2)?,
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if let Some(unknown) = options
            .only
            .iter()
            .find(|name| !ALL.iter().any(|s| s.name == name.as_str()))
        {
            return Err(format!("no scenario is named {unknown:?}"));
        }
        Ok(Command::Run(options))
    }

    /// The scenarios to run, in table order.
    pub(crate) fn scenarios(&self) -> impl Iterator<Item = &'static Scenario> + '_ {
        ALL.iter()
            .filter(|s| self.only.is_empty() || self.only.iter().any(|n| n == s.name))
    }

    /// How long a hold on `deployment` outlives a holder that went silent: the lease on
    /// Redis, the session timeout on ZooKeeper, the session lease on PostgreSQL. The
    /// scenarios' faults and slow sections are measured in it.
    pub(crate) fn lifetime(&self, deployment: Deployment) -> Duration {
        if deployment.has_sessions() {
            self.session_timeout
        } else {
            self.lease
        }
    }

    /// The command that reproduces this run, for the report.
    pub(crate) fn command(&self) -> String {
        let mut command = "cargo run --release -p lock-tests --bin torture --".to_owned();
        if self.short {
            command.push_str(" --short");
        }
        command.push_str(&format!(
            " --processes {} --tasks {} --keys {}",
            self.processes, self.tasks, self.keys
        ));
        if !self.only.is_empty() {
            command.push_str(&format!(" --only {}", self.only.join(",")));
        }
        command
    }
}

fn count(arg: &str, value: &str, at_least: usize) -> Result<usize, String> {
    match value.parse() {
        Ok(n) if n >= at_least => Ok(n),
        _ => Err(format!(
            "{arg} takes a whole number of at least {at_least}, not {value:?}"
        )),
    }
}
