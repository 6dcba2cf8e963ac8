//! Where a Redis store's server is: one node (from a url, or a bb8 pool's manager), the
//! master that Redis Sentinel names, or a Redis Cluster; and what each connection of the
//! store is opened to there.

use std::sync::Arc;

use bb8_redis::RedisConnectionManager;

use super::connection::{Endpoint, Source, Timeouts};
use super::scripts::Publish;
use super::sentinel::Sentinels;
use crate::LockError;
use crate::backend::redact::redact;

/// A Redis deployment, its urls checked.
#[derive(Debug)]
pub(super) enum Deployment {
    /// The server of a url, for the commands and for the pub/sub connection.
    Url(redis::Client),
    /// A bb8 pool whose manager opens the commands' connection, and the server of a url
    /// for the pub/sub connection (without it, waiters poll).
    Pool {
        pool: bb8::Pool<RedisConnectionManager>,
        wake_ups: Option<redis::Client>,
    },
    /// The master these sentinels name, for both connections.
    Sentinel(Arc<Sentinels>),
    /// A Redis Cluster: its client for the commands, its seed nodes for the pub/sub
    /// connection.
    Cluster(Box<ClusterSeeds>),
}

impl Deployment {
    /// Where the server is, for messages (never with a password).
    pub(super) fn address(&self) -> String {
        match self {
            Self::Url(client)
            | Self::Pool {
                wake_ups: Some(client),
                ..
            } => client.get_connection_info().addr().to_string(),
            Self::Pool { wake_ups: None, .. } => "the pooled server".to_owned(),
            Self::Sentinel(sentinels) => sentinels.describe(),
            Self::Cluster(seeds) => seeds.address.clone(),
        }
    }

    /// How a release publishes its wake-ups: sharded on a Redis Cluster, so that they
    /// stay on the node of their lock.
    pub(super) fn publish(&self) -> Publish {
        match self {
            Self::Cluster(_) => Publish::Sharded,
            Self::Url(_) | Self::Pool { .. } | Self::Sentinel(_) => Publish::Plain,
        }
    }

    /// Where the commands' connection comes from, and where the pub/sub connection goes
    /// (nowhere: waiters poll).
    pub(super) fn connections(self) -> (Source, Option<Endpoint>) {
        match self {
            Self::Url(client) => (
                Source::Client(Box::new(client.clone())),
                Some(Endpoint::Client(Box::new(client))),
            ),
            Self::Pool { pool, wake_ups } => (
                Source::Pool(pool),
                wake_ups.map(|client| Endpoint::Client(Box::new(client))),
            ),
            Self::Sentinel(sentinels) => (
                Source::Sentinel(sentinels.clone()),
                Some(Endpoint::Sentinel(sentinels)),
            ),
            Self::Cluster(seeds) => {
                let ClusterSeeds { client, nodes, .. } = *seeds;
                (
                    Source::Cluster(Box::new(client)),
                    Some(Endpoint::Cluster(nodes.into())),
                )
            }
        }
    }
}

/// A Redis Cluster to connect to: the client for commands, and its seed nodes for the
/// pub/sub connection.
#[derive(Debug)]
pub(super) struct ClusterSeeds {
    client: redis::cluster::ClusterClient,
    nodes: Vec<redis::ConnectionInfo>,
    /// The seeds, for messages.
    address: String,
}

impl ClusterSeeds {
    /// The cluster that the nodes at `urls` belong to, each command waiting as long as
    /// `timeouts` say.
    pub(super) fn new(urls: &[String], timeouts: Timeouts) -> Result<Self, LockError> {
        if urls.is_empty() {
            return Err(LockError::Config(
                "cluster needs at least one seed url".into(),
            ));
        }
        let invalid = |url: &str, e: redis::RedisError| {
            LockError::Config(format!("invalid cluster url {}: {e}", redact(url)))
        };
        let nodes = urls
            .iter()
            .map(|url| {
                redis::IntoConnectionInfo::into_connection_info(url.as_str())
                    .map_err(|e| invalid(url, e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let client = redis::cluster::ClusterClient::builder(urls.iter().map(String::as_str))
            .connection_timeout(timeouts.connect)
            .response_timeout(timeouts.response)
            .build()
            .map_err(|e| invalid(&urls[0], e))?;
        let shown: Vec<String> = urls.iter().map(|u| redact(u)).collect();
        Ok(Self {
            client,
            nodes,
            address: format!("the cluster of {}", shown.join(", ")),
        })
    }
}
