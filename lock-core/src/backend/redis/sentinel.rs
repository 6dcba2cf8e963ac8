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

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, RedisError, RedisResult, Value};

use crate::LockError;
use crate::backend::redact::redact;

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
                    LockError::Config(format!("invalid sentinel url {}: {e}", redact(url)))
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

    /// A connection to the master, confirmed by `ROLE`, and the master's failover epoch:
    /// each sentinel in turn names one, until one names a server that says it is the
    /// master.
    pub(super) async fn master_connection(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        let mut last = None;
        for sentinel in &self.sentinels {
            let confirmed = async {
                let (master, epoch) = self.named_by(sentinel).await?;
                let mut conn = master.get_multiplexed_async_connection().await?;
                let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
                match role.first() {
                    Some(Value::BulkString(role)) if role == b"master" => Ok((conn, epoch)),
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
