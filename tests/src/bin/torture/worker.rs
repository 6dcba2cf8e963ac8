//! A worker process: M tasks take locks on the shared keys until the main process closes
//! the worker's stdin, each running a critical section against the ledger under every
//! lock it gets.
//!
//! Besides the sections, each task records in the ledger what the lock promises of
//! itself: how long each lock call took against the wait it asked for (the longest of
//! each kind, per process), each guard that was lost already as the call handed it out,
//! and each hold that still claimed to be held (`is_held()` true, or `release()` Ok)
//! once the fence had found a newer holder.

use std::io::Read;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use lock_core::{LockError, LockGuard, LockOptions, Locker};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::ledger::{CallKind, Event, Ledger, LockCall};
use crate::{candidate, store};

/// The first argument that makes the binary a worker.
pub(crate) const COMMAND: &str = "worker";
/// How long a task waits before asking again after a lock call failed outright (the
/// store unreachable), so that it does not spin.
const BACKOFF: Duration = Duration::from_millis(20);

/// What the main process tells a worker, on its command line.
#[derive(Debug)]
pub(crate) struct Args {
    pub(crate) store: String,
    pub(crate) ledger: String,
    pub(crate) tasks: usize,
    pub(crate) keys: Vec<String>,
    /// How long a hold outlives a holder that went silent: the lease of every lock, or
    /// the session timeout on ZooKeeper.
    pub(crate) lifetime: Duration,
    pub(crate) sections: Sections,
    /// Which worker this is, from 0: also the seed of its random choices.
    pub(crate) index: u64,
}

/// Who holds the locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sections {
    /// Every task: sections of up to 2 ms, cancelled when the hold is lost (its lease, or
    /// its session), as `with_lock` does.
    Short,
    /// As [`Short`](Sections::Short), except the first worker's first task, the slow
    /// holder. Its sections on the first key last four lifetimes (the watchdog renews a
    /// lease; a session needs nothing) and run to their end even once the hold is lost, so
    /// that only the fence stands
    /// between its late writes and a newer holder's. The other tasks only try for that
    /// key, without waiting, so as not to queue behind it.
    OneSlowHolder,
    /// No tasks: the worker process is one candidate of an election named for the first
    /// key, writing to that key through the fence while it leads (see `candidate`).
    Candidate,
}

impl Sections {
    fn name(self) -> &'static str {
        match self {
            Sections::Short => "short",
            Sections::OneSlowHolder => "one-slow-holder",
            Sections::Candidate => "candidate",
        }
    }

    fn parse(name: &str) -> Option<Sections> {
        [
            Sections::Short,
            Sections::OneSlowHolder,
            Sections::Candidate,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }
}

impl Args {
    /// The arguments after [`COMMAND`].
    pub(crate) fn to_command_line(&self) -> Vec<String> {
        vec![
            COMMAND.to_owned(),
            self.store.clone(),
            self.ledger.clone(),
            self.tasks.to_string(),
            self.keys.join(","),
            self.lifetime.as_millis().to_string(),
            self.sections.name().to_owned(),
            self.index.to_string(),
        ]
    }

    fn parse(args: &[String]) -> Option<Args> {
        let [store, ledger, tasks, keys, lifetime_ms, sections, index] = args else {
            return None;
        };
        Some(Args {
            store: store.clone(),
            ledger: ledger.clone(),
            tasks: tasks.parse().ok()?,
            keys: keys.split(',').map(str::to_owned).collect(),
            lifetime: Duration::from_millis(lifetime_ms.parse().ok()?),
            sections: Sections::parse(sections)?,
            index: index.parse().ok()?,
        })
    }
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    let Some(args) = Args::parse(args) else {
        eprintln!("torture worker: bad arguments {args:?}");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("torture worker {}: {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let locker = store::connect(&args.store, args.lifetime)
        .await
        .map_err(|e| format!("connect to the store: {e}"))?;
    let ledger = Ledger::connect(&args.ledger)
        .await
        .map_err(|e| format!("connect to the ledger: {e}"))?;
    let stop = CancellationToken::new();
    let stopping = stop.clone();
    // The main process says stop by closing stdin (or by exiting).
    tokio::task::spawn_blocking(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        stopping.cancel();
    });
    if args.sections == Sections::Candidate {
        candidate::run(&locker, &ledger, &args.keys[0], args.lifetime, stop).await;
        locker.flush().await;
        return Ok(());
    }
    let knows_its_holds = store::knows_its_holds(&args.store);
    let leaving = TaskTracker::new();
    let tasks = TaskTracker::new();
    for i in 0..args.tasks {
        let slow = args.sections == Sections::OneSlowHolder && args.index == 0 && i == 0;
        let task = Task {
            locker: locker.clone(),
            ledger: ledger.clone(),
            keys: if slow {
                args.keys[..1].to_vec()
            } else {
                args.keys.clone()
            },
            only_tried: (args.sections == Sections::OneSlowHolder && !slow)
                .then(|| args.keys[0].clone()),
            lifetime: args.lifetime,
            knows_its_holds,
            slow,
            rng: fastrand::Rng::with_seed(args.index * 1000 + i as u64),
            leaving: leaving.clone(),
            longest_waiting: None,
            longest_try: None,
        };
        tasks.spawn(task.run(stop.clone()));
    }
    tasks.close();
    tasks.wait().await;
    leaving.close();
    leaving.wait().await;
    locker.flush().await;
    Ok(())
}

struct Task {
    locker: Locker,
    ledger: Ledger,
    keys: Vec<String>,
    /// The slow holder's key, which this task takes only if it is free.
    only_tried: Option<String>,
    lifetime: Duration,
    /// Whether the store says at no cost that a hold is gone, so that each hold is
    /// checked before its release: gone, it must have reported itself lost.
    knows_its_holds: bool,
    /// Whether this is the slow holder.
    slow: bool,
    rng: fastrand::Rng,
    /// Where a cancelled section's leaving runs, so the worker waits for it at the end.
    leaving: TaskTracker,
    /// This task's longest lock call that waited, and that only tried, so far: only a
    /// longer one goes to the ledger.
    longest_waiting: Option<LockCall>,
    longest_try: Option<LockCall>,
}

impl Task {
    async fn run(mut self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            let key = self.keys[self.rng.usize(..self.keys.len())].clone();
            let wait = if self.only_tried.as_ref() == Some(&key) {
                Duration::ZERO
            } else {
                self.lifetime
            };
            let options = LockOptions::new().lease(self.lifetime).wait(wait);
            let called = Instant::now();
            let locked = self.locker.lock_with(&key, options).await;
            let took = called.elapsed();
            if let Ok(guard) = &locked {
                self.check_born_held(guard).await;
            }
            self.record_call(LockCall { took, wait }).await;
            match locked {
                Ok(guard) if self.slow => self.hold_past_its_lifetime(guard).await,
                Ok(guard) => self.hold(guard).await,
                Err(LockError::Timeout { .. }) if wait.is_zero() => {}
                Err(LockError::Timeout { .. }) => self.count(Event::Timeout).await,
                Err(_) => {
                    self.count(Event::LockError).await;
                    tokio::time::sleep(BACKOFF).await;
                }
            }
        }
    }

    /// Keeps `call` in the ledger if it is this task's longest of its kind so far.
    async fn record_call(&mut self, call: LockCall) {
        let (kind, longest) = if call.wait.is_zero() {
            (CallKind::Try, &mut self.longest_try)
        } else {
            (CallKind::Waiting, &mut self.longest_waiting)
        };
        if longest.is_some_and(|longest| !call.ran_further_than(&longest)) {
            return;
        }
        *longest = Some(call);
        if let Err(e) = self.ledger.lock_call(kind, call).await {
            eprintln!("torture worker: the ledger failed: {e}");
        }
    }

    /// Counts a guard that was lost already as the lock call handed it out: its `lost()`
    /// fired (`is_lost`), or the store says it does not hold the lock. A store that does
    /// not answer within a lifetime says nothing, and neither does an answer that came
    /// a quarter lifetime or more after the call returned: the process may have been
    /// paused since, and the hold lost after it was handed out.
    async fn check_born_held(&self, guard: &LockGuard) {
        let returned = Instant::now();
        let born_lost = guard.is_lost() || {
            let held = tokio::time::timeout(self.lifetime, guard.is_held()).await;
            matches!(held, Ok(Ok(false))) && returned.elapsed() < self.lifetime / 4
        };
        if born_lost {
            self.count(Event::BornLost).await;
        }
    }

    /// Runs a short critical section while the hold lasts, then releases the lock.
    async fn hold(&mut self, guard: LockGuard) {
        let pause = Duration::from_micros(self.rng.u64(0..2000));
        let section = Section::new(&self.ledger, &guard, &self.leaving);
        let overtaken = match guard.scope(section.run(pause)).await {
            Ok(Ok(fenced)) => {
                self.count(Event::Section).await;
                fenced == Fenced::Out
            }
            Ok(Err(e)) => {
                eprintln!("torture worker: the ledger failed: {e}");
                false
            }
            Err(_) => {
                self.count(Event::Lost).await;
                false
            }
        };
        self.end(guard, overtaken).await;
    }

    /// Runs a critical section of four lifetimes to its end, hold lost or not, then
    /// releases the lock.
    async fn hold_past_its_lifetime(&mut self, guard: LockGuard) {
        let section = Section::new(&self.ledger, &guard, &self.leaving);
        let overtaken = match section.run(self.lifetime * 4).await {
            Ok(fenced) => {
                self.count(Event::Section).await;
                fenced == Fenced::Out
            }
            Err(e) => {
                eprintln!("torture worker: the ledger failed: {e}");
                false
            }
        };
        if guard.is_lost() {
            self.count(Event::Lost).await;
        }
        self.end(guard, overtaken).await;
    }

    /// Checks what the hold says of itself, then releases it. `overtaken`: the fence
    /// found a newer holder, so the server has ended this hold, and neither `is_held()`
    /// nor `release()` may claim it.
    async fn end(&self, guard: LockGuard, overtaken: bool) {
        let claimed_held = overtaken && self.still_claims(&guard).await;
        self.check_loss_reported(&guard).await;
        let released = guard.release().await;
        if let Err(LockError::NotHeld { .. }) = released {
            self.count(Event::ReleaseFoundItGone).await;
        }
        if claimed_held || (overtaken && released.is_ok()) {
            self.count(Event::ClaimedEnded).await;
        }
    }

    /// Whether `is_held()` answers true, within a lifetime.
    async fn still_claims(&self, guard: &LockGuard) -> bool {
        let held = tokio::time::timeout(self.lifetime, guard.is_held()).await;
        matches!(held, Ok(Ok(true)))
    }

    /// Where the store knows its holds, counts a hold found gone, and whether it failed
    /// to report itself lost within a lifetime.
    async fn check_loss_reported(&self, guard: &LockGuard) {
        if !self.knows_its_holds || guard.is_held().await.unwrap_or(true) {
            return;
        }
        self.count(Event::FoundGone).await;
        if tokio::time::timeout(self.lifetime, guard.lost())
            .await
            .is_err()
        {
            self.count(Event::LossUnreported).await;
        }
    }

    async fn count(&self, event: Event) {
        if let Err(e) = self.ledger.count(event).await {
            eprintln!("torture worker: the ledger failed: {e}");
        }
    }
}

/// Whether the fence let a section's read and write through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fenced {
    /// Both went through.
    In,
    /// The fence refused one: a newer holder read or wrote first.
    Out,
}

/// One critical section: enter, read the counter, yield, write it plus one, leave; the
/// read and the write each through the fence. Dropped half-way (the hold was lost), it
/// still leaves, in the background.
struct Section<'a> {
    ledger: &'a Ledger,
    key: &'a str,
    token: u64,
    leaving: &'a TaskTracker,
    left: bool,
}

impl<'a> Section<'a> {
    fn new(ledger: &'a Ledger, guard: &'a LockGuard, leaving: &'a TaskTracker) -> Self {
        Section {
            ledger,
            key: guard.key(),
            token: guard.fencing_token(),
            leaving,
            left: false,
        }
    }

    async fn run(mut self, pause: Duration) -> redis::RedisResult<Fenced> {
        self.ledger.enter(self.key, self.token).await?;
        // A stale read is refused, and the section ends there.
        let mut fenced = Fenced::Out;
        if let Some(value) = self.ledger.read(self.key, self.token).await? {
            tokio::time::sleep(pause).await;
            if self.ledger.write(self.key, self.token, value + 1).await? {
                fenced = Fenced::In;
            }
        }
        self.ledger.leave(self.key, self.token).await?;
        self.left = true;
        Ok(fenced)
    }
}

impl Drop for Section<'_> {
    fn drop(&mut self) {
        if !self.left {
            let (ledger, key, token) = (self.ledger.clone(), self.key.to_owned(), self.token);
            self.leaving
                .spawn(async move { ledger.leave(&key, token).await });
        }
    }
}
