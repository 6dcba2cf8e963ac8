//! The Lua scripts, and the one place they are run from.
//!
//! Every call is an `EVALSHA`. A server that lost its script cache (a restart, `SCRIPT
//! FLUSH`) answers `NOSCRIPT`; the script is then loaded and the call repeated: by
//! [`ScriptCall::invoke_async`] for one call, by [`pipelined`](super::routing::pipelined)
//! for a pipeline of calls (the renewals). Each script has one reply shape, read with
//! `FromRedisValue`.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, ParsingError, RedisResult, Script, ToRedisArgs, Value};

use super::connection::Conn;
use super::fencing::in_epoch;
use crate::backend::store::Acquire;
use crate::backend::wait::Attempt;
use crate::kind::Sharing;
use crate::{HolderInfo, LockError, LockInfo, LockKind};
use tokio::time::Instant;

/// A script that takes `$keys` keys: its helpers (each prepended file), then its body,
/// publishing its wake-ups as `$publish` says.
macro_rules! script {
    ($publish:ident, $keys:literal: $($file:literal),+) => {
        LockScript::new(
            $publish,
            $keys,
            concat!($(include_str!(concat!("../../scripts/", $file))),+),
        )
    };
}

/// How the scripts publish the wake-ups that a `Locker`'s hub listens for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Publish {
    /// `PUBLISH`, on one server.
    Plain,
    /// `SPUBLISH`, on a Redis Cluster: a wake-up reaches only the node that serves its
    /// lock's slot, where the waiters' hubs subscribe with `SSUBSCRIBE`.
    Sharded,
}

/// A Lua script, and how many of a call's first arguments are its keys.
#[derive(Debug)]
pub(super) struct LockScript {
    script: Script,
    keys: usize,
}

impl LockScript {
    /// The script `lua`, which takes `keys` keys; its `PUBLISH` calls made sharded where
    /// `publish` says so.
    fn new(publish: Publish, keys: usize, lua: &str) -> Self {
        let script = match publish {
            Publish::Plain => Script::new(lua),
            Publish::Sharded => Script::new(&lua.replace("'PUBLISH'", "'SPUBLISH'")),
        };
        Self { script, keys }
    }

    /// A call of the script, starting with its first key; the other keys follow, then the
    /// arguments, each written straight into the `EVALSHA` command that is sent, not
    /// gathered first as redis-rs's `ScriptInvocation` does (BENCHMARKS.md, "Where the
    /// regression went").
    pub(super) fn key<T: ToRedisArgs>(&self, key: T) -> ScriptCall<'_> {
        self.key_named(false, key)
    }

    /// A call of the script, as [`key`](Self::key) makes it, by an owner that names
    /// itself when `named`: the script then takes one key more, the lock's holder id,
    /// which the caller adds after the others (a plain lock's call is left as it was).
    pub(super) fn key_named<T: ToRedisArgs>(&self, named: bool, key: T) -> ScriptCall<'_> {
        // Room for the largest call: the fair scripts' 6 keys and 6 arguments.
        let mut cmd = Cmd::with_capacity(16, 512);
        cmd.arg("EVALSHA")
            .arg(self.script.get_hash())
            .arg(self.keys + usize::from(named))
            .arg(key);
        ScriptCall {
            script: &self.script,
            cmd,
        }
    }

    /// Loads the script into the server's cache.
    pub(super) async fn load(&self, conn: &mut Conn) -> RedisResult<String> {
        self.script.load_async(conn).await
    }
}

/// One call of a script, as the `EVALSHA` command it sends.
#[derive(Debug)]
pub(super) struct ScriptCall<'a> {
    script: &'a Script,
    pub(super) cmd: Cmd,
}

impl ScriptCall<'_> {
    /// The call's first key (its lock's key in Redis).
    pub(super) fn first_key(&self) -> Option<&[u8]> {
        // EVALSHA, the script's hash, the number of keys, then the keys.
        match self.cmd.args_iter().nth(3)? {
            redis::Arg::Simple(key) => Some(key),
            _ => None,
        }
    }

    /// Adds a key; every key comes before the first argument.
    pub(super) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        self.cmd.arg(key);
        self
    }

    /// Adds an argument.
    pub(super) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Sends the call on `conn`; if the server lost the script, loads it and sends the
    /// call again.
    pub(super) async fn invoke_async<T: FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
    ) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(e) if is_noscript(&e) => {
                self.script.load_async(conn).await?;
                self.cmd.query_async(conn).await
            }
            reply => reply,
        }
    }
}

pub(super) fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// Every script a `Locker` runs on Redis.
#[derive(Debug)]
pub(super) struct Scripts {
    /// Take an exclusive lock (keeping the holder id of an owner that names itself):
    /// [`AcquireReply`].
    pub(super) acquire: LockScript,
    /// Release an exclusive lock (and its holder id): whether the caller held it.
    pub(super) release: LockScript,
    /// Set a lease (and its holder id's) if the caller owns the lock: whether it did.
    pub(super) extend: LockScript,
    /// Hand an exclusive lock to a local waiter: its fencing token, or nil.
    pub(super) handover: LockScript,
    /// Relay a wake-up to the next waiting `Locker`: whether one was woken.
    pub(super) relay: LockScript,
    /// Take a fair lock, or wait in line: [`FairAcquireReply`].
    pub(super) fair_acquire: LockScript,
    /// Release a fair lock: whether the caller held it.
    pub(super) fair_release: LockScript,
    /// Leave a fair lock's line: whether the lock had been handed over to the caller.
    pub(super) fair_leave: LockScript,
    /// Take the read side of a read-write lock: [`AcquireReply`].
    pub(super) read_acquire: LockScript,
    /// Take the write side of a read-write lock, or wait among its writers:
    /// [`AcquireReply`].
    pub(super) write_acquire: LockScript,
    /// Release the write side, or stop waiting for it: whether the caller held it.
    pub(super) write_release: LockScript,
    /// Release a read or a permit: whether the caller held it.
    pub(super) shared_release: LockScript,
    /// Take a semaphore's permit: [`AcquireReply`].
    pub(super) permit_acquire: LockScript,
    /// A semaphore's free permits.
    pub(super) permits: LockScript,
    /// Store a semaphore's count.
    pub(super) set_permits: LockScript,
    /// Whether the caller holds a lock.
    pub(super) held: LockScript,
    /// Raise a fence counter to at least a token (RedLock).
    pub(super) raise_fence: LockScript,
    /// Free a lock whoever holds it: whether it was held.
    pub(super) force_unlock: LockScript,
    /// Who holds a lock, changing nothing: [`Seen`], if anyone.
    pub(super) inspect: LockScript,
}

impl Scripts {
    pub(super) fn new(publish: Publish) -> Self {
        Self {
            acquire: script!(publish, 3: "fence.lua",
                "lockers.lua",
                "admission.lua",
                "holder_id.lua",
                "acquire.lua"
            ),
            release: script!(publish, 3: "lockers.lua", "release.lua"),
            extend: script!(publish, 2: "shared.lua", "extend.lua"),
            handover: script!(publish, 2: "fence.lua", "handover.lua"),
            relay: script!(publish, 2: "lockers.lua", "relay.lua"),
            fair_acquire: script!(publish, 6: "fence.lua",
                "lockers.lua",
                "fair_line.lua",
                "admission.lua",
                "fair_acquire.lua"
            ),
            fair_release: script!(publish, 6: "fence.lua",
                "lockers.lua",
                "fair_line.lua",
                "fair_release.lua"
            ),
            fair_leave: script!(publish, 6: "fence.lua",
                "lockers.lua",
                "fair_line.lua",
                "fair_leave.lua"
            ),
            read_acquire: script!(publish, 5: "fence.lua",
                "lockers.lua",
                "shared.lua",
                "admission.lua",
                "read_acquire.lua"
            ),
            write_acquire: script!(publish, 4: "fence.lua",
                "lockers.lua",
                "shared.lua",
                "admission.lua",
                "write_acquire.lua"
            ),
            write_release: script!(publish, 4: "lockers.lua", "write_release.lua"),
            shared_release: script!(publish, 5: "lockers.lua", "shared.lua", "shared_release.lua"),
            permit_acquire: script!(publish, 5: "fence.lua",
                "lockers.lua",
                "shared.lua",
                "admission.lua",
                "permit_acquire.lua"
            ),
            permits: script!(publish, 3: "shared.lua", "permits.lua"),
            set_permits: script!(publish, 3: "lockers.lua", "set_permits.lua"),
            held: script!(publish, 2: "shared.lua", "held.lua"),
            raise_fence: script!(publish, 1: "raise_fence.lua"),
            force_unlock: script!(publish, 6: "lockers.lua", "force_unlock.lua"),
            inspect: script!(publish, 7: "shared.lua", "holder_id.lua", "inspect.lua"),
        }
    }

    /// Each script, to load them all up front.
    pub(super) fn all(&self) -> [&LockScript; 19] {
        [
            &self.acquire,
            &self.release,
            &self.extend,
            &self.handover,
            &self.relay,
            &self.fair_acquire,
            &self.fair_release,
            &self.fair_leave,
            &self.read_acquire,
            &self.write_acquire,
            &self.write_release,
            &self.shared_release,
            &self.permit_acquire,
            &self.permits,
            &self.set_permits,
            &self.held,
            &self.raise_fence,
            &self.force_unlock,
            &self.inspect,
        ]
    }
}

/// When an acquire script's call was sent, with the connection in hand (the lease runs
/// from then: Redis sets the key no earlier than it receives the call), and the failover
/// epoch of the master it went to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent {
    pub(super) at: Instant,
    pub(super) epoch: u64,
}

impl Sent {
    /// The fencing token drawn as `raw` by this call.
    pub(super) fn fence(&self, raw: u64) -> u64 {
        in_epoch(self.epoch, raw)
    }
}

/// The reply of the acquire scripts of the exclusive lock, the read-write lock and the
/// semaphore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AcquireReply {
    /// `{1, fence}`: the caller holds the lock.
    Taken { fence: u64 },
    /// `{0, pttl}`: someone else does, for `ttl` more (none: a holder with no lease, or
    /// none at all).
    Held { ttl: Option<Duration> },
    /// `{-1, count}`: a semaphore's stored count, which is not the one asked with.
    Miscounted { permits: u32 },
}

impl FromRedisValue for AcquireReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match <(i64, i64)>::from_redis_value(v)? {
            (1, fence) => Ok(Self::Taken {
                fence: positive(fence)?,
            }),
            (0, pttl) => Ok(Self::Held {
                ttl: pttl_left(pttl),
            }),
            (-1, count) => Ok(Self::Miscounted {
                permits: u32::try_from(count)
                    .map_err(|_| format!("{count} is not a semaphore's count"))?,
            }),
            other => Err(format!("unexpected acquire reply {other:?}").into()),
        }
    }
}

impl AcquireReply {
    /// What the attempt of `request`, `sent` as it was, came to.
    pub(super) fn attempt(self, request: &Acquire, sent: Sent) -> Result<Attempt, LockError> {
        match self {
            Self::Taken { fence } => Ok(Attempt::Acquired {
                fence: sent.fence(fence),
                until: sent.at + request.lease,
            }),
            Self::Held { ttl } => Ok(Attempt::Held { ttl, clock: None }),
            Self::Miscounted { permits } => {
                let asked = match request.kind {
                    LockKind::Semaphore { permits } => permits,
                    _ => 0,
                };
                Err(LockError::miscounted(&request.key, permits, asked))
            }
        }
    }
}

/// The fair acquire script's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FairAcquireReply {
    /// `{1, fence, pttl}`: the caller holds the lock (taken now, or handed over to it
    /// earlier), for `left` more.
    Taken { fence: u64, left: Duration },
    /// `{0, pttl, now}`: it waits; the holder's lease runs `ttl` more, and the server's
    /// clock read `now_us`.
    Held { ttl: Option<Duration>, now_us: u64 },
}

impl FromRedisValue for FairAcquireReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match <(i64, i64, i64)>::from_redis_value(v)? {
            (1, fence, pttl) => Ok(Self::Taken {
                fence: positive(fence)?,
                left: pttl_left(pttl).unwrap_or_default(),
            }),
            (0, pttl, now_us) => Ok(Self::Held {
                ttl: pttl_left(pttl),
                now_us: positive(now_us)?,
            }),
            other => Err(format!("unexpected fair acquire reply {other:?}").into()),
        }
    }
}

/// The inspect script's reply: a lock as one server shows it, its holders by their whole
/// token (by which RedLock matches them across masters; only a prefix leaves the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    /// How its holders share it.
    pub(super) sharing: Sharing,
    /// A semaphore's stored count.
    pub(super) permits: Option<u32>,
    /// How many `Locker`s are registered to be woken when it is freed.
    pub(super) lockers: usize,
    /// Each holder's token, and its lease left.
    pub(super) holders: Vec<(String, Option<Duration>)>,
    /// The owner's fencing token as drawn (without a failover epoch); none for shared
    /// holds.
    pub(super) fence: Option<u64>,
    /// What the owner calls itself, if it named itself; none for shared holds.
    pub(super) holder_id: Option<String>,
}

impl FromRedisValue for Seen {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        // The holder id comes last, and only for an owner that named itself.
        let (v, holder_id) = match v {
            Value::Array(mut items) if items.len() == 6 => {
                let holder_id = items.pop().unwrap_or(Value::Nil);
                (Value::Array(items), Option::from_redis_value(holder_id)?)
            }
            v => (v, None),
        };
        let (mark, permits, lockers, fence, holders) =
            <(String, Option<u32>, usize, Option<u64>, Vec<(String, i64)>)>::from_redis_value(v)?;
        let sharing = match mark.as_str() {
            "" => Sharing::Owner,
            "read" => Sharing::Read,
            "semaphore" => Sharing::Permit,
            other => return Err(format!("unexpected inspect mark {other:?}").into()),
        };
        Ok(Self {
            sharing,
            permits,
            lockers,
            holders: holders
                .into_iter()
                .map(|(token, left)| (token, pttl_left(left)))
                .collect(),
            fence,
            holder_id,
        })
    }
}

impl Seen {
    /// The kind it is held as: an owner's from its token's mark (none for a token of
    /// lock-core 0.1, without one).
    pub(super) fn kind(&self) -> Option<LockKind> {
        match self.sharing {
            Sharing::Owner => {
                let (token, _) = self.holders.first()?;
                LockKind::of_owner_token(token)
            }
            Sharing::Read => Some(LockKind::Read),
            Sharing::Permit => self.permits.map(|permits| LockKind::Semaphore { permits }),
        }
    }

    /// What an operator sees of it.
    pub(super) fn info(self) -> LockInfo {
        let kind = self.kind();
        let fence = self.fence;
        let holders = self
            .holders
            .iter()
            .map(|(token, left)| {
                HolderInfo::new(token, *left, fence).with_holder_id(self.holder_id.as_deref())
            })
            .collect();
        LockInfo::new(kind, holders, Some(self.lockers))
    }
}

fn positive(n: i64) -> Result<u64, ParsingError> {
    u64::try_from(n).map_err(|_| format!("{n} is not a positive number").into())
}

/// A `PTTL` reply: `None` for a key with no expiry (or none at all).
fn pttl_left(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(values: &[i64]) -> Value {
        Value::Array(values.iter().map(|&v| Value::Int(v)).collect())
    }

    /// A cluster's scripts publish sharded only if every publish is spelled `'PUBLISH'`,
    /// the spelling [`Publish::Sharded`] replaces.
    #[test]
    fn every_publish_is_spelled_as_the_sharded_scripts_expect() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts");
        let scripts: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|file| std::fs::read_to_string(file.unwrap().path()).unwrap())
            .collect();
        let mut publishes = 0;
        for line in scripts.iter().flat_map(|s| s.lines()) {
            let code = line.split("--").next().unwrap_or_default();
            if code.to_ascii_lowercase().contains("publish") {
                assert!(code.contains("redis.call('PUBLISH', "), "{line}");
                publishes += 1;
            }
        }
        assert_eq!(publishes, 9);
    }

    #[test]
    fn inspect_replies_are_read_by_shape() {
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let held = |mark, count: Value, fence: Value, holders: &[(&str, i64)]| {
            let holders = holders
                .iter()
                .map(|&(token, left)| Value::Array(vec![text(token), Value::Int(left)]))
                .collect();
            let reply = vec![
                text(mark),
                count,
                Value::Int(2),
                fence,
                Value::Array(holders),
            ];
            Seen::from_redis_value(Value::Array(reply))
        };
        let owner = held("", Value::Nil, text("42"), &[("tok", 1500)]).unwrap();
        assert_eq!(
            owner.kind(),
            None,
            "a token without a kind's mark, as 0.1 made"
        );
        for (mark, kind) in [
            ("x", LockKind::Exclusive),
            ("f", LockKind::Fair),
            ("w", LockKind::Write),
        ] {
            let token = format!("3f2a9c1e-8b4d-4f6a-9e2b-7c5d1a0b3e4f:{mark}");
            let marked = held("", Value::Nil, text("42"), &[(&token, 1500)]).unwrap();
            assert_eq!(marked.kind(), Some(kind));
        }
        assert_eq!(
            owner.info(),
            LockInfo::new(
                None,
                vec![HolderInfo::new(
                    "tok",
                    Some(Duration::from_millis(1500)),
                    Some(42)
                )],
                Some(2)
            )
        );
        let no_expiry = held("", Value::Nil, Value::Nil, &[("tok", -1)]).unwrap();
        assert_eq!(no_expiry.holders, [("tok".to_owned(), None)]);
        let permits = held("semaphore", text("3"), Value::Nil, &[("a", 5), ("b", 9)]).unwrap();
        assert_eq!(permits.kind(), Some(LockKind::Semaphore { permits: 3 }));
        let info = permits.info();
        assert_eq!(info.holders.len(), 2);
        assert!(info.holders.iter().all(|h| h.fencing_token.is_none()));
        let readers = held("read", Value::Nil, Value::Nil, &[("a", 5)]).unwrap();
        assert_eq!(readers.kind(), Some(LockKind::Read));
        assert!(held("reed", Value::Nil, Value::Nil, &[]).is_err());
        assert_eq!(<Option<Seen>>::from_redis_value(Value::Nil).unwrap(), None);
    }

    #[test]
    fn an_owners_holder_id_comes_last_in_an_inspect_reply() {
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let holder = Value::Array(vec![text("tok"), Value::Int(1500)]);
        let reply = vec![
            text(""),
            Value::Nil,
            Value::Int(0),
            text("42"),
            Value::Array(vec![holder]),
            text("replica-a"),
        ];
        let seen = Seen::from_redis_value(Value::Array(reply)).unwrap();
        assert_eq!(seen.holder_id.as_deref(), Some("replica-a"));
        let info = seen.info();
        assert_eq!(info.holders[0].holder_id.as_deref(), Some("replica-a"));
        assert_eq!(info.holders[0].fencing_token, Some(42));
    }

    #[test]
    fn acquire_replies_are_read_by_shape() {
        assert_eq!(
            AcquireReply::from_redis_value(reply(&[1, 42])).unwrap(),
            AcquireReply::Taken { fence: 42 }
        );
        assert_eq!(
            AcquireReply::from_redis_value(reply(&[0, 1500])).unwrap(),
            AcquireReply::Held {
                ttl: Some(Duration::from_millis(1500))
            }
        );
        assert_eq!(
            AcquireReply::from_redis_value(reply(&[0, -1])).unwrap(),
            AcquireReply::Held { ttl: None }
        );
        assert_eq!(
            AcquireReply::from_redis_value(reply(&[-1, 3])).unwrap(),
            AcquireReply::Miscounted { permits: 3 }
        );
        assert!(AcquireReply::from_redis_value(reply(&[-1, -3])).is_err());
        assert!(AcquireReply::from_redis_value(reply(&[2, 1])).is_err());
        assert!(AcquireReply::from_redis_value(reply(&[1, -5])).is_err());
        assert_eq!(
            FairAcquireReply::from_redis_value(reply(&[0, 20, 1_795_403_503_519_585])).unwrap(),
            FairAcquireReply::Held {
                ttl: Some(Duration::from_millis(20)),
                now_us: 1_795_403_503_519_585
            }
        );
        assert_eq!(
            FairAcquireReply::from_redis_value(reply(&[1, 9, 30_000])).unwrap(),
            FairAcquireReply::Taken {
                fence: 9,
                left: Duration::from_secs(30)
            }
        );
    }
}
