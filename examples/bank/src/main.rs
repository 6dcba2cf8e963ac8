//! Run with: cargo run -p bank
//!
//! A small bank: per-account balances over HTTP, updated by a plain read-modify-write
//! (read the balance, await, write it back) that distributed locks make safe, however many
//! replicas share the Redis or the PostgreSQL database. `cargo run -p bank -- demo` shows
//! what the locks save.
//!
//! Each account has a read-write lock, `balance:{id}`: reading a balance takes its read
//! side, shared with other reads; deposits, withdrawals and transfers take its write side.
//! `LockLayer` takes it around the account routes, `#[distributed_lock]` takes both
//! accounts' for a transfer, and the statements' semaphore is taken from the `Locker`.
//!
//! ```text
//! GET  /accounts/{id}            -> {"id": "alice", "balance": 0}
//! GET  /accounts/{id}/statement  -> {"id": "alice", "balance": 0, "fencing_token": 7,
//!                                    "as_of_unix_ms": 1767225600000}
//!                                   (slow; at most BANK_MAX_STATEMENTS at once)
//! POST /accounts/{id}/deposit    {"amount": 100}
//! POST /accounts/{id}/withdraw   {"amount": 30}    (409 on insufficient funds)
//! POST /transfers                {"from": "alice", "to": "bob", "amount": 20}
//!                                (locks both accounts)
//! GET /admin/locks/{key}         -> {"key": "balance:alice", "held": true, "kind": "write",
//!                                    "holders": [{"token_prefix": "3f2a9c1e",
//!                                    "lease_left_ms": 29874, "fencing_token": 7}],
//!                                    "waiting": 1}
//!                                (who holds a lock and how many wait, `null` where the
//!                                store does not record it; the same `Authorization`)
//! DELETE /admin/locks/{key}      -> {"key": "balance:alice", "was_held": true}
//!                                (an operator forces a stuck lock open; needs
//!                                `Authorization: Bearer $BANK_ADMIN_TOKEN`)
//! GET /audit                     -> {"replica": "web-1-4242", "leading": true,
//!                                    "leader": {"id": "web-1-4242", "fencing_token": 9},
//!                                    "last_audit": {"total": 130, "accounts": 2,
//!                                    "as_of_unix_ms": 1767225600000,
//!                                    "leader": "web-1-4242", "fencing_token": 9}}
//!                                (who leads the election `bank:auditor` now, `null` if
//!                                nobody does; whether this replica does; the last audit
//!                                it ran, `null` if it never led)
//! GET /healthz                   -> {"locks": "ok", "balances": "ok"}
//!                                (503 with {"error": "the lock store does not answer",
//!                                ..} when a store does not answer within 2 s)
//! GET /metrics                   -> lock-core's lock metrics, in Prometheus text
//! ```
//!
//! One replica at a time audits: the leader of the election `bank:auditor` (see
//! `audit.rs`) adds up every balance at start, then every `BANK_AUDIT_INTERVAL_MS`; when
//! it stops or loses its leadership, another replica takes over.
//!
//! Every request is traced by tower-http's `TraceLayer`: `RUST_LOG=tower_http=debug`
//! shows them.
//!
//! Environment:
//! - `BANK_ADDR`: where to listen (default `127.0.0.1:3000`; port 0 takes a free one);
//!   the address bound is printed as `listening on http://ADDR`
//! - `REDIS_URL`: keep locks and balances in that Redis, shared by every replica
//! - `DATABASE_URL`: keep them in that PostgreSQL database instead (`postgres://..`): the
//!   balances in the table `bank_accounts`, created on start, and the locks as advisory
//!   locks; without either, both live in this process, and with both the bank refuses
//!   to start
//! - `LOCK_URL`: keep the locks in the store its scheme names instead (`redis://`,
//!   `rediss://`, `postgres://`, `zookeeper://hosts[/chroot]`, `memory://`; see
//!   `Locker::connect`), whichever store keeps the balances: every balance write is fenced
//!   by the store of the balances itself, so any lock store keeps it safe, given one for
//!   every replica: shared balances record the lock store they are fenced by, and a
//!   replica with its locks elsewhere is refused at start (see the README to move them)
//! - `BANK_LEASE_MS`, `BANK_WAIT_MS`: the locks' lease (on PostgreSQL, the lease of the
//!   sessions that hold them, and of a transaction on the balances left idle) and how long
//!   a request waits for a lock or a statement permit before `423 Locked` (default:
//!   lock-core's, 30 s and 10 s)
//! - `BANK_DELAY_MS`: the pause between reading a balance and writing it back, standing
//!   for the rest of a real update's work (default 1)
//! - `BANK_MAX_STATEMENTS`: how many statements are prepared at once, across every replica
//!   sharing the store (default 2); the replica started last sets it for all
//! - `BANK_STATEMENT_DELAY_MS`: how long a statement takes to render (default 300)
//! - `BANK_UNLOCKED=1`: take no account locks at all, to see updates get lost (demo only)
//! - `BANK_ADMIN_TOKEN`: the bearer token of the `/admin` endpoints; unset, they answer
//!   `404` (they do not exist), and without the token `401`
//! - `BANK_AUDIT_INTERVAL_MS`: how often the leading replica audits (default 10000; at
//!   least 1)
//! - `BANK_REPLICA_ID`: what this replica campaigns as in the auditor's election, and is
//!   shown as by `GET /audit` (default `HOSTNAME-PID`, the machine's name and this
//!   process's id; at most 255 bytes)

mod app;
mod audit;
mod demo;
mod health;
mod locks;
mod metrics;
mod service;
mod store;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use lock_core::MAX_HOLDER_ID_LEN;
use tokio::net::TcpListener;
use tokio_postgres::config::Host;

use crate::service::Bank;

const USAGE: &str = "usage: bank [demo]";

/// How many statements are prepared at once unless `BANK_MAX_STATEMENTS` says otherwise.
const DEFAULT_MAX_STATEMENTS: NonZeroU32 = NonZeroU32::new(2).unwrap();
/// How long a statement takes to render unless `BANK_STATEMENT_DELAY_MS` says otherwise.
const DEFAULT_STATEMENT_DELAY: Duration = Duration::from_millis(300);
/// How often the leading replica audits unless `BANK_AUDIT_INTERVAL_MS` says otherwise.
const DEFAULT_AUDIT_INTERVAL: Duration = Duration::from_secs(10);

/// The settings, from the environment (see the crate docs).
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) addr: SocketAddr,
    /// Where the balances live, and the locks too unless `lock_url` says otherwise.
    pub(crate) backend: Backend,
    /// Where the locks live instead (`LOCK_URL`).
    pub(crate) lock_url: Option<String>,
    pub(crate) lease: Duration,
    pub(crate) wait: Duration,
    pub(crate) delay: Duration,
    pub(crate) max_statements: NonZeroU32,
    pub(crate) statement_delay: Duration,
    pub(crate) locks: bool,
    /// The bearer token of the `/admin` endpoints; none: they do not exist.
    pub(crate) admin_token: Option<String>,
    /// How often the replica that leads the auditor's election audits.
    pub(crate) audit_interval: Duration,
    /// What this replica campaigns as (`BANK_REPLICA_ID`, else `HOSTNAME-PID`).
    pub(crate) replica_id: String,
}

impl Config {
    fn from_env() -> Result<Config, String> {
        Config::from_vars(|name| std::env::var(name).ok())
    }

    /// The settings from the variables `var` looks up.
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        // an empty variable counts as unset
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        let millis = |name: &str, default: Duration| match var(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map(Duration::from_millis)
                .map_err(|_| format!("{name} must be a whole number of milliseconds, got {v:?}")),
        };
        let addr = match var("BANK_ADDR") {
            None => SocketAddr::from(([127, 0, 0, 1], 3000)),
            Some(v) => v.parse().map_err(|_| {
                format!("BANK_ADDR must be an address like 127.0.0.1:3000, got {v:?}")
            })?,
        };
        let max_statements = match var("BANK_MAX_STATEMENTS") {
            None => DEFAULT_MAX_STATEMENTS,
            Some(v) => v.parse().map_err(|_| {
                format!("BANK_MAX_STATEMENTS must be a whole number from 1, got {v:?}")
            })?,
        };
        let audit_interval = match var("BANK_AUDIT_INTERVAL_MS") {
            None => DEFAULT_AUDIT_INTERVAL,
            Some(v) => v
                .parse::<NonZeroU64>()
                .map(|ms| Duration::from_millis(ms.get()))
                .map_err(|_| {
                    format!("BANK_AUDIT_INTERVAL_MS must be a whole number of milliseconds from 1, got {v:?}")
                })?,
        };
        let replica_id = match var("BANK_REPLICA_ID") {
            None => {
                let host = var("HOSTNAME").or_else(hostname);
                let host = host.unwrap_or_else(|| "bank".to_owned());
                format!("{host}-{}", std::process::id())
            }
            Some(id) if id.len() > MAX_HOLDER_ID_LEN => {
                return Err(format!(
                    "BANK_REPLICA_ID must be at most {MAX_HOLDER_ID_LEN} bytes, got {}",
                    id.len()
                ));
            }
            Some(id) => id,
        };
        let locks = match var("BANK_UNLOCKED").as_deref() {
            None | Some("0" | "false") => true,
            Some("1" | "true") => false,
            Some(v) => return Err(format!("BANK_UNLOCKED must be 1 or 0, got {v:?}")),
        };
        let backend = match (var("REDIS_URL"), var("DATABASE_URL")) {
            (None, None) => Backend::Memory,
            (Some(url), None) => Backend::Redis(url),
            (None, Some(url)) => Backend::Postgres(url),
            (Some(_), Some(_)) => {
                return Err("REDIS_URL and DATABASE_URL are both set: set only one, \
                            where the balances (and the locks) live; for locks in Redis \
                            and balances in PostgreSQL, set LOCK_URL=redis://.. and \
                            DATABASE_URL"
                    .to_owned());
            }
        };
        Ok(Config {
            addr,
            backend,
            lock_url: var("LOCK_URL"),
            lease: millis("BANK_LEASE_MS", lock_core::DEFAULT_LEASE)?,
            wait: millis("BANK_WAIT_MS", lock_core::DEFAULT_WAIT)?,
            delay: millis("BANK_DELAY_MS", Duration::from_millis(1))?,
            max_statements,
            statement_delay: millis("BANK_STATEMENT_DELAY_MS", DEFAULT_STATEMENT_DELAY)?,
            locks,
            admin_token: var("BANK_ADMIN_TOKEN"),
            audit_interval,
            replica_id,
        })
    }

    /// The url of the lock store: `LOCK_URL`, else that of the balances' store.
    pub(crate) fn lock_url(&self) -> &str {
        match (&self.lock_url, &self.backend) {
            (Some(url), _) | (None, Backend::Redis(url) | Backend::Postgres(url)) => url,
            (None, Backend::Memory) => "memory://",
        }
    }

    /// The lock store and where it is, without any password or option from its url:
    /// `redis at 127.0.0.1:6379/`, `postgres at db:5432/bank`, `memory`.
    pub(crate) fn lock_store(&self) -> String {
        let Some(url) = &self.lock_url else {
            return self.backend.to_string();
        };
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        let scheme = scheme.to_ascii_lowercase();
        if locks::is_postgres(url) {
            return Backend::Postgres(url.clone()).to_string();
        }
        let rest = rest.split_once('?').map_or(rest, |(rest, _)| rest);
        match rest.rsplit_once('@').map_or(rest, |(_, host)| host) {
            "" => scheme,
            host => format!("{scheme} at {host}"),
        }
    }

    /// Where the locks and the balances live, without any password from the urls.
    pub(crate) fn stores(&self) -> String {
        match (&self.lock_url, &self.backend) {
            (None, Backend::Memory) => "locks and balances in memory \
                 (set REDIS_URL or DATABASE_URL to share them between replicas)"
                .to_owned(),
            (None, shared) => format!("locks and balances in {shared}"),
            (Some(_), balances) => {
                let locks = self.lock_store();
                let alone = if matches!(balances, Backend::Memory) || locks == "memory" {
                    " (this replica's own: run one replica)"
                } else {
                    ""
                };
                format!("balances in {balances}, locks in {locks}{alone}")
            }
        }
    }
}

/// This machine's name, where the system tells it (Linux): what a replica campaigns as,
/// with its process id, when neither `BANK_REPLICA_ID` nor `HOSTNAME` is set.
fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_owned()).filter(|name| !name.is_empty())
}

/// Where the balances live, and the locks too unless `LOCK_URL` says otherwise.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    /// In this process.
    Memory,
    /// In the Redis at this url (`REDIS_URL`).
    Redis(String),
    /// In the PostgreSQL database at this url (`DATABASE_URL`).
    Postgres(String),
}

/// The balances' store and where it is, without any password from the url.
impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Memory => f.write_str("memory"),
            Backend::Redis(url) => {
                let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
                let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                write!(f, "redis at {host}")
            }
            Backend::Postgres(url) => {
                let Ok(config) = tokio_postgres::Config::from_str(url) else {
                    return f.write_str("postgres");
                };
                let host = match config.get_hosts().first() {
                    Some(Host::Tcp(host)) => host.clone(),
                    Some(Host::Unix(dir)) => dir.display().to_string(),
                    None => "localhost".to_owned(),
                };
                let port = config.get_ports().first().copied().unwrap_or(5432);
                let database = config.get_dbname().or(config.get_user()).unwrap_or("");
                write!(f, "postgres at {host}:{port}/{database}")
            }
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match Config::from_env() {
        Ok(config) => match args.as_slice() {
            [] => serve(&config).await,
            [demo] if demo == "demo" => demo::main(&config).await,
            _ => Err(USAGE.to_owned()),
        },
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bank: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Serves until Ctrl-C or SIGTERM, then stops accepting, lets the requests in flight
/// finish (releasing their locks), and returns.
async fn serve(config: &Config) -> Result<(), String> {
    println!("bank: {}", config.stores());
    if !config.locks {
        tracing::warn!("BANK_UNLOCKED is set: NO LOCKS, concurrent updates WILL be lost");
        println!("bank: WARNING: BANK_UNLOCKED is set: no locks, concurrent updates will be lost");
    }
    let bank = Bank::open(config).await?;
    let locker = bank.locker().clone();
    let auditing = bank.auditor().spawn(bank.store().clone());
    let listener = TcpListener::bind(config.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.addr))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{addr}");
    axum::serve(listener, app::router(bank))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| e.to_string())?;
    // Stopping the auditor gives its leadership back, if it leads, so that another
    // replica takes over at once rather than once the lease ran out.
    auditing.abort();
    let _ = auditing.await;
    // The lock layer gives each request's lock back in the background as its response
    // is produced (and the auditor its leadership): let the last of those reach the
    // store before the runtime stops.
    locker.flush().await;
    println!("bank: stopped");
    Ok(())
}

/// Resolves at the first Ctrl-C (SIGINT) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!("cannot listen for ctrl-c: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    println!("bank: shutting down: finishing the requests in flight");
}
