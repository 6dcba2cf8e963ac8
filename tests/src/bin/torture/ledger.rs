//! The ledger: a Redis that no scenario faults, holding for each lock key the counter the
//! critical sections update, the fence that guards it, who is inside, and the tallies the
//! checker reads back.
//!
//! Per key `K`, the hash `torture:K` has the fields `value`, `newest_token`, `accepted`,
//! `refused` (writes), `refused_reads`, `overlaps` and `granted_twice`; the set `torture:K:inside` holds
//! `"{pid}:{token}"` for each section running now, and `torture:K:granted` every token a
//! section ever ran under. The hash `torture:stats` counts the workers' events, and
//! `torture:stats:{event}` each event by process (pid),
//! `torture:refused_writers` each process's refused writes, by pid, and
//! `torture:lock_calls` each process's longest lock call of each kind, as the fields
//! `{pid}:{kind}:took` and `{pid}:{kind}:wait` (milliseconds).
//!
//! An election's candidates (see `candidate`) write to the key named for the election
//! through the same fence, each write adding one to `value`; there `torture:K:order`
//! lists the token of every accepted write, in the order the fence accepted them, and
//! the sorted set `torture:K:leaders` scores each process (pid) by the token it last won
//! the election with.

use std::time::Duration;

use lock_tests::{HarnessError, RedisServer, ValueExt};
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, RedisResult, Script};

/// Enters the critical section: notes the token as granted (a second grant of the same
/// token is counted), and the caller as inside (anyone else inside is an overlap).
/// KEYS: the hash, `:inside`, `:granted`; ARGV: `"{pid}:{token}"`, the token.
const ENTER: &str = r"
if redis.call('SADD', KEYS[3], ARGV[2]) == 0 then
  redis.call('HINCRBY', KEYS[1], 'granted_twice', 1)
end
redis.call('SADD', KEYS[2], ARGV[1])
if redis.call('SCARD', KEYS[2]) > 1 then
  redis.call('HINCRBY', KEYS[1], 'overlaps', 1)
end
";

/// The fence, in front of every access under a token: refuses a token older than the
/// newest one seen, else makes it the newest. Tokens are compared as decimal strings,
/// since they may not fit a Lua number exactly.
const FENCE: &str = r"
local function fence(hash, token, refused)
  local newest = redis.call('HGET', hash, 'newest_token') or ''
  if #token > #newest or (#token == #newest and token >= newest) then
    redis.call('HSET', hash, 'newest_token', token)
    return true
  end
  redis.call('HINCRBY', hash, refused, 1)
  return false
end
";

/// The fenced read: the counter, or -1 if the token is stale.
/// KEYS: the hash; ARGV: the token.
const READ: &str = r"
if not fence(KEYS[1], ARGV[1], 'refused_reads') then return -1 end
return tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
";

/// The fenced write: sets the counter, unless the token is stale. Returns 1 if it was
/// accepted, 0 if refused (counted for the writer's process too).
/// KEYS: the hash, `torture:refused_writers`; ARGV: the token, the new value, the pid.
const WRITE: &str = r"
if not fence(KEYS[1], ARGV[1], 'refused') then
  redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
  return 0
end
redis.call('HSET', KEYS[1], 'value', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
return 1
";

/// A leader's fenced write: adds one to the counter, unless the token is stale, and
/// lists the token of an accepted write. Returns 1 if it was accepted, 0 if refused
/// (counted for the writer's process too).
/// KEYS: the hash, `torture:refused_writers`, `:order`; ARGV: the token, the pid.
const LEADER_WRITE: &str = r"
if not fence(KEYS[1], ARGV[1], 'refused') then
  redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
  return 0
end
redis.call('HINCRBY', KEYS[1], 'value', 1)
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
redis.call('RPUSH', KEYS[3], ARGV[1])
return 1
";

/// Keeps a process's longest lock call of a kind: the one that ran furthest past its
/// wait. KEYS: `torture:lock_calls`; ARGV: `"{pid}:{kind}"`, how long the call took, the
/// wait it asked for (milliseconds).
const LOCK_CALL: &str = r"
local took, wait = ARGV[1] .. ':took', ARGV[1] .. ':wait'
local longest = redis.call('HGET', KEYS[1], took)
if longest and tonumber(longest) - tonumber(redis.call('HGET', KEYS[1], wait))
    >= tonumber(ARGV[2]) - tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], took, ARGV[2], wait, ARGV[3])
return 1
";

const STATS: &str = "torture:stats";
const REFUSED_WRITERS: &str = "torture:refused_writers";
const LOCK_CALLS: &str = "torture:lock_calls";

fn hash(key: &str) -> String {
    format!("torture:{key}")
}

fn by_process(event: Event) -> String {
    format!("{STATS}:{}", event.field())
}

fn inside(key: &str) -> String {
    format!("torture:{key}:inside")
}

fn granted(key: &str) -> String {
    format!("torture:{key}:granted")
}

fn order(key: &str) -> String {
    format!("torture:{key}:order")
}

fn leaders(key: &str) -> String {
    format!("torture:{key}:leaders")
}

/// What a worker counts in the ledger, besides the sections' own writes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// A critical section ran to its end.
    Section,
    /// A hold was lost (its lease, or its session): the section was cancelled.
    Lost,
    /// A release found the lock no longer its own.
    ReleaseFoundItGone,
    /// A lock call waited its whole wait.
    Timeout,
    /// A lock call failed otherwise (the store unreachable, no quorum).
    LockError,
    /// A hold was found gone before its release (its session ended).
    FoundGone,
    /// ... and it had not reported itself lost by a lifetime later.
    LossUnreported,
    /// A lock call handed out a guard that was lost already: its `lost()` had fired, or
    /// the store said it did not hold the lock.
    BornLost,
    /// A holder that the fence had found overtaken (a newer holder wrote or read) still
    /// claimed its hold: `is_held()` answered true, or `release()` answered Ok.
    ClaimedEnded,
}

impl Event {
    fn field(self) -> &'static str {
        match self {
            Event::Section => "sections",
            Event::Lost => "lost",
            Event::ReleaseFoundItGone => "release_found_it_gone",
            Event::Timeout => "timeouts",
            Event::LockError => "lock_errors",
            Event::FoundGone => "found_gone",
            Event::LossUnreported => "loss_unreported",
            Event::BornLost => "born_lost",
            Event::ClaimedEnded => "claimed_ended",
        }
    }
}

/// The kinds of lock call whose longest the ledger keeps, apart: a try takes one attempt
/// without waiting, so only the store's own timeouts bound it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// A call that asked to wait for the lock.
    Waiting,
    /// A call with no wait (`try_lock`).
    Try,
}

impl CallKind {
    fn name(self) -> &'static str {
        match self {
            CallKind::Waiting => "waiting",
            CallKind::Try => "try",
        }
    }
}

/// A lock call, from the call until it returned Ok or Err.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockCall {
    pub(crate) took: Duration,
    /// The wait it asked for.
    pub(crate) wait: Duration,
}

impl LockCall {
    /// How far it ran past its wait (zero if it did not).
    pub(crate) fn overrun(&self) -> Duration {
        self.took.saturating_sub(self.wait)
    }

    /// Whether it ran further past its wait (or less far short of it) than `other`.
    pub(crate) fn ran_further_than(&self, other: &LockCall) -> bool {
        self.took + other.wait > other.took + self.wait
    }
}

/// A worker's handle on the ledger.
#[derive(Clone)]
pub(crate) struct Ledger {
    conn: MultiplexedConnection,
    enter: Script,
    read: Script,
    write: Script,
    leader_write: Script,
    lock_call: Script,
    pid: u32,
}

impl Ledger {
    pub(crate) async fn connect(url: &str) -> RedisResult<Ledger> {
        let conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(Ledger {
            conn,
            enter: Script::new(ENTER),
            read: Script::new(&format!("{FENCE}{READ}")),
            write: Script::new(&format!("{FENCE}{WRITE}")),
            leader_write: Script::new(&format!("{FENCE}{LEADER_WRITE}")),
            lock_call: Script::new(LOCK_CALL),
            pid: std::process::id(),
        })
    }

    pub(crate) async fn enter(&self, key: &str, token: u64) -> RedisResult<()> {
        self.enter
            .key(hash(key))
            .key(inside(key))
            .key(granted(key))
            .arg(self.member(token))
            .arg(token.to_string())
            .invoke_async(&mut self.conn.clone())
            .await
    }

    pub(crate) async fn leave(&self, key: &str, token: u64) -> RedisResult<()> {
        self.conn
            .clone()
            .srem(inside(key), self.member(token))
            .await
    }

    /// The counter, or `None` if a newer token has been seen.
    pub(crate) async fn read(&self, key: &str, token: u64) -> RedisResult<Option<u64>> {
        let value: i64 = self
            .read
            .key(hash(key))
            .arg(token.to_string())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(u64::try_from(value).ok())
    }

    /// Writes the counter, unless a newer token has been seen (the ledger counts it):
    /// whether it was accepted.
    pub(crate) async fn write(&self, key: &str, token: u64, value: u64) -> RedisResult<bool> {
        let accepted: i64 = self
            .write
            .key(hash(key))
            .key(REFUSED_WRITERS)
            .arg(token.to_string())
            .arg(value)
            .arg(self.pid)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(accepted == 1)
    }

    /// Notes that this process won the election `key` with `token`.
    pub(crate) async fn took_over(&self, key: &str, token: u64) -> RedisResult<()> {
        self.conn.clone().zadd(leaders(key), self.pid, token).await
    }

    /// A leader's write to `key`, unless a newer token has been seen (the ledger counts
    /// it): whether it was accepted.
    pub(crate) async fn leader_write(&self, key: &str, token: u64) -> RedisResult<bool> {
        let accepted: i64 = self
            .leader_write
            .key(hash(key))
            .key(REFUSED_WRITERS)
            .key(order(key))
            .arg(token.to_string())
            .arg(self.pid)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(accepted == 1)
    }

    /// Keeps `call` as this process's longest of `kind` if it ran further past its wait
    /// than the longest so far.
    pub(crate) async fn lock_call(&self, kind: CallKind, call: LockCall) -> RedisResult<()> {
        let _kept: i64 = self
            .lock_call
            .key(LOCK_CALLS)
            .arg(format!("{}:{}", self.pid, kind.name()))
            .arg(call.took.as_millis().to_string())
            .arg(call.wait.as_millis().to_string())
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Counts `event`, and counts it for this process.
    pub(crate) async fn count(&self, event: Event) -> RedisResult<()> {
        redis::pipe()
            .hincr(STATS, event.field(), 1)
            .ignore()
            .hincr(by_process(event), self.pid, 1)
            .ignore()
            .query_async(&mut self.conn.clone())
            .await
    }

    fn member(&self, token: u64) -> String {
        format!("{}:{token}", self.pid)
    }
}

/// What the checker reads back for one key.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyTally {
    pub(crate) value: u64,
    pub(crate) accepted: u64,
    pub(crate) refused: u64,
    pub(crate) refused_reads: u64,
    pub(crate) overlaps: u64,
    pub(crate) granted_twice: u64,
}

impl KeyTally {
    pub(crate) fn read(ledger: &RedisServer, key: &str) -> Result<KeyTally, HarnessError> {
        let hash = hash(key);
        let field = |name| count(ledger, &hash, name);
        Ok(KeyTally {
            value: field("value")?,
            accepted: field("accepted")?,
            refused: field("refused")?,
            refused_reads: field("refused_reads")?,
            overlaps: field("overlaps")?,
            granted_twice: field("granted_twice")?,
        })
    }

    /// Accepted writes the counter does not show: two sections wrote what they read from
    /// the same value.
    pub(crate) fn lost_updates(&self) -> u64 {
        self.accepted.abs_diff(self.value)
    }
}

/// How many times workers counted `event`.
pub(crate) fn events(ledger: &RedisServer, event: Event) -> Result<u64, HarnessError> {
    count(ledger, STATS, event.field())
}

/// How many times the process `pid` counted `event`.
pub(crate) fn events_of(ledger: &RedisServer, event: Event, pid: u32) -> Result<u64, HarnessError> {
    count(ledger, &by_process(event), &pid.to_string())
}

/// How many writes of the process `pid` the fence refused, over every key.
pub(crate) fn refused_writes_of(ledger: &RedisServer, pid: u32) -> Result<u64, HarnessError> {
    count(ledger, REFUSED_WRITERS, &pid.to_string())
}

/// The longest lock call of `kind` of the process `pid`, if it made one.
pub(crate) fn longest_call(
    ledger: &RedisServer,
    pid: u32,
    kind: CallKind,
) -> Result<Option<LockCall>, HarnessError> {
    let field = |part| -> Result<Option<u64>, HarnessError> {
        let name = format!("{pid}:{}:{part}", kind.name());
        let reply = ledger.cmd(&["HGET", LOCK_CALLS, &name])?;
        Ok(reply.as_str().and_then(|s| s.parse().ok()))
    };
    let (Some(took), Some(wait)) = (field("took")?, field("wait")?) else {
        return Ok(None);
    };
    Ok(Some(LockCall {
        took: Duration::from_millis(took),
        wait: Duration::from_millis(wait),
    }))
}

/// The count in the field `field` of the hash `hash`: 0 if there is none.
fn count(ledger: &RedisServer, hash: &str, field: &str) -> Result<u64, HarnessError> {
    let reply = ledger.cmd(&["HGET", hash, field])?;
    Ok(reply.as_str().and_then(|s| s.parse().ok()).unwrap_or(0))
}

/// Takes the process `pid`, killed, out of every section it was in: a dead process
/// writes nothing more, and would otherwise count as inside forever.
pub(crate) fn forget_process(
    ledger: &RedisServer,
    keys: &[String],
    pid: u32,
) -> Result<(), HarnessError> {
    let prefix = format!("{pid}:");
    for key in keys {
        let members = ledger.cmd(&["SMEMBERS", &inside(key)])?;
        for member in members.as_sequence().unwrap_or_default() {
            if let Some(member) = member.as_str().filter(|m| m.starts_with(&prefix)) {
                ledger.cmd(&["SREM", &inside(key), member])?;
            }
        }
    }
    Ok(())
}

/// The newest leader of the election `key` so far, as the process that won it (pid) and
/// its token: `None` before anyone led.
pub(crate) fn newest_leader(
    ledger: &RedisServer,
    key: &str,
) -> Result<Option<(u32, u64)>, HarnessError> {
    let reply = ledger.cmd(&["ZRANGE", &leaders(key), "-1", "-1", "WITHSCORES"])?;
    let entry = reply.as_sequence().unwrap_or_default();
    let [pid, token] = entry else {
        return Ok(None);
    };
    let parse = |v: &redis::Value| v.as_str().and_then(|s| s.parse::<f64>().ok());
    Ok(parse(pid)
        .zip(parse(token))
        .map(|(pid, token)| (pid as u32, token as u64)))
}

/// The tokens of the writes the fence accepted on `key`, in the order it accepted them.
pub(crate) fn accepted_order(ledger: &RedisServer, key: &str) -> Result<Vec<u64>, HarnessError> {
    let reply = ledger.cmd(&["LRANGE", &order(key), "0", "-1"])?;
    Ok(reply
        .as_sequence()
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().and_then(|s| s.parse().ok()))
        .collect())
}

/// The writes accepted so far over `keys`.
pub(crate) fn accepted(ledger: &RedisServer, keys: &[String]) -> Result<u64, HarnessError> {
    keys.iter()
        .map(|key| KeyTally::read(ledger, key).map(|t| t.accepted))
        .sum()
}
