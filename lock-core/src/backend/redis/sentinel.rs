//! Finding the master that Redis Sentinel names, at each connect.
//!
//! Own code rather than redis-rs's Sentinel client, which trusts the address a sentinel
//! gives: after a failover, a sentinel that has not heard of it yet still names the old
//! master, which answers `PING` as a replica. Here the master a sentinel names must say
//! it is one (`ROLE`) before it is used, or the next sentinel is asked. A command that a
//! demoted master refuses (`READONLY`) makes the connection find the master again
//! ([`super::connection`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::{ConnectionAddr, RedisError, RedisResult, Value};

use super::connection::{Conn, InHand};
use crate::LockError;

/// The bits of a fencing token below the failover epoch: a counter seeded from the
/// server clock in microseconds stays below 2^52 until the year 2112.
const EPOCH_SHIFT: u32 = 52;
/// The largest epoch that fits above them.
const MAX_EPOCH: u64 = (1 << (64 - EPOCH_SHIFT)) - 1;

/// The fencing token drawn as `raw` on a master of failover epoch `epoch`: every token of
/// a later epoch is larger, even when the new master's counter lost the last draws of the
/// old one. Epochs past 4,095 count as 4,095. Epoch 0 (no failover, or no Sentinel)
/// leaves the token as drawn.
pub(super) fn in_epoch(epoch: u64, raw: u64) -> u64 {
    if epoch == 0 {
        return raw;
    }
    (epoch.min(MAX_EPOCH) << EPOCH_SHIFT).saturating_add(raw)
}

/// The sentinels of one master, and how to reach what they name.
#[derive(Debug)]
pub(crate) struct Sentinels {
    sentinels: Vec<redis::Client>,
    master_name: String,
    connect_timeout: Duration,
    /// The largest failover epoch a sentinel has named.
    epoch: AtomicU64,
}

impl Sentinels {
    /// The sentinels at `urls`, watching the master named `master_name`. The credentials
    /// and database of the first url are used for the master too.
    pub(crate) fn new(
        urls: &[String],
        master_name: &str,
        connect_timeout: Duration,
    ) -> Result<Self, LockError> {
        if urls.is_empty() {
            return Err(LockError::Config("sentinel needs at least one url".into()));
        }
        if master_name.is_empty() {
            return Err(LockError::Config("sentinel needs a master name".into()));
        }
        let sentinels = urls
            .iter()
            .map(|url| {
                redis::Client::open(url.as_str()).map_err(|e| {
                    LockError::Config(format!("invalid sentinel url {}: {e}", super::redact(url)))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            sentinels,
            master_name: master_name.to_owned(),
            connect_timeout,
            epoch: AtomicU64::new(0),
        })
    }

    /// What the master is called, and where its sentinels are, for messages.
    pub(crate) fn describe(&self) -> String {
        let at: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| s.get_connection_info().addr().to_string())
            .collect();
        format!(
            "master {:?} of the sentinels at {}",
            self.master_name,
            at.join(", ")
        )
    }

    /// The largest failover epoch a sentinel has named yet.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// A client for the master as the first sentinel that answers names it.
    pub(super) async fn master_client(&self) -> RedisResult<redis::Client> {
        let mut last = None;
        for sentinel in &self.sentinels {
            match self.named_by(sentinel).await {
                Ok((master, _)) => return Ok(master),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| no_master("no sentinel")))
    }

    /// A connection to the master, confirmed by `ROLE`: each sentinel in turn names one,
    /// until one names a server that says it is the master.
    pub(super) async fn master_connection(&self) -> RedisResult<InHand> {
        let mut last = None;
        for sentinel in &self.sentinels {
            let confirmed = async {
                let (master, epoch) = self.named_by(sentinel).await?;
                let mut conn = master.get_multiplexed_async_connection().await?;
                let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
                match role.first() {
                    Some(Value::BulkString(role)) if role == b"master" => Ok(InHand {
                        conn: Conn::Node(conn),
                        epoch,
                    }),
                    _ => Err(no_master("the server a sentinel named is not a master")),
                }
            };
            match confirmed.await {
                Ok(conn) => return Ok(conn),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| no_master("no sentinel")))
    }

    /// A client for the master that `sentinel` names, and its failover epoch, both from
    /// one `SENTINEL MASTER` reply.
    async fn named_by(&self, sentinel: &redis::Client) -> RedisResult<(redis::Client, u64)> {
        let ask = async {
            let mut conn = sentinel.get_multiplexed_async_connection().await?;
            let fields: HashMap<String, String> = redis::cmd("SENTINEL")
                .arg("MASTER")
                .arg(&self.master_name)
                .query_async(&mut conn)
                .await?;
            let field = |name: &str| {
                fields
                    .get(name)
                    .ok_or_else(|| no_master("the sentinel named no master"))
            };
            let port = field("port")?
                .parse()
                .map_err(|_| no_master("the sentinel named no port"))?;
            let epoch = field("config-epoch")?
                .parse()
                .map_err(|_| no_master("the sentinel named no epoch"))?;
            Ok::<_, RedisError>((field("ip")?.clone(), port, epoch))
        };
        let (host, port, epoch) = tokio::time::timeout(self.connect_timeout, ask)
            .await
            .map_err(|_| no_master("no answer from the sentinel"))??;
        self.epoch.fetch_max(epoch, Ordering::AcqRel);
        let info = sentinel
            .get_connection_info()
            .clone()
            .set_addr(ConnectionAddr::Tcp(host, port));
        Ok((redis::Client::open(info)?, epoch))
    }
}

fn no_master(why: &'static str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Io,
        "cannot find the master",
        why.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_epoch_outranks_every_token_of_an_earlier_one() {
        let now_us = 1_795_563_254_076_183;
        assert_eq!(
            in_epoch(0, now_us),
            now_us,
            "no failover: the token as drawn"
        );
        let newest_of_epoch_1 = in_epoch(1, (1 << EPOCH_SHIFT) - 1);
        assert!(in_epoch(1, 1) > in_epoch(0, now_us * 2));
        assert!(in_epoch(2, 1) > newest_of_epoch_1);
        assert!(in_epoch(1, now_us) < in_epoch(1, now_us + 1));
        assert_eq!(
            in_epoch(MAX_EPOCH + 7, 5),
            in_epoch(MAX_EPOCH, 5),
            "no overflow"
        );
    }
}
