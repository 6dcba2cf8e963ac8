//! The hub's pub/sub connection: to one server (`SUBSCRIBE`), or to a Redis Cluster,
//! where a lock's wake-ups travel on sharded channels (`SSUBSCRIBE`, served by the node of
//! the lock's slot), so that a release does not broadcast to every node.
//!
//! On a cluster this is redis-rs's cluster connection (RESP3, its pushes sent to a
//! channel of ours): it routes each subscription to the node of its slot and follows
//! `MOVED`. The hub still learns of every loss: a node's connection dropping, or a node
//! that gave up a slot unsubscribing its channels.

use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, Msg, ProtocolVersion, PushInfo, PushKind, RedisError, RedisResult};
use tokio::sync::mpsc;

use super::connection::Endpoint;

/// What the pub/sub connection brought.
pub(super) enum Event {
    /// A message on a subscribed channel.
    Message(Msg),
    /// The server stopped sending a channel's messages: a cluster node that no longer
    /// serves its slot, or the answer to an unsubscribe of the hub's own.
    Unsubscribed(String),
    /// The connection, or one of a cluster's node connections, was lost: messages may
    /// have been missed.
    Lost,
}

/// A pub/sub connection, subscribed to the channels it was opened with.
pub(super) enum Subscriber {
    Node {
        sink: PubSubSink,
        stream: PubSubStream,
    },
    Cluster {
        conn: ClusterConnection,
        pushes: mpsc::UnboundedReceiver<PushInfo>,
    },
}

impl Subscriber {
    /// Opens a pub/sub connection to `endpoint`, subscribed to `channels`, within
    /// `timeout`.
    pub(super) async fn connect(
        endpoint: &Endpoint,
        channels: &[String],
        timeout: Duration,
    ) -> RedisResult<Self> {
        let connect = async {
            let mut subscriber = match endpoint {
                Endpoint::Client(client) => Self::node(client).await?,
                Endpoint::Sentinel(sentinels) => {
                    Self::node(&sentinels.master_client().await?).await?
                }
                Endpoint::Cluster(nodes) => Self::cluster(nodes, timeout).await?,
            };
            for channel in channels {
                subscriber.subscribe(channel).await?;
            }
            Ok(subscriber)
        };
        tokio::time::timeout(timeout, connect)
            .await
            .unwrap_or_else(|_| {
                Err(RedisError::from((
                    redis::ErrorKind::Io,
                    "pub/sub connect timed out",
                )))
            })
    }

    async fn node(client: &redis::Client) -> RedisResult<Self> {
        let (sink, stream) = client.get_async_pubsub().await?.split();
        Ok(Self::Node { sink, stream })
    }

    async fn cluster(nodes: &[ConnectionInfo], timeout: Duration) -> RedisResult<Self> {
        let (tx, pushes) = mpsc::unbounded_channel();
        let client = ClusterClient::builder(nodes.iter().cloned())
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(tx)
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .build()?;
        let conn = client.get_async_connection().await?;
        Ok(Self::Cluster { conn, pushes })
    }

    pub(super) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Self::Node { sink, .. } => sink.subscribe(channel).await,
            Self::Cluster { conn, .. } => conn.ssubscribe(channel).await,
        }
    }

    pub(super) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Self::Node { sink, .. } => sink.unsubscribe(channel).await,
            Self::Cluster { conn, .. } => conn.sunsubscribe(channel).await,
        }
    }

    /// The next event worth the hub's attention.
    pub(super) async fn next(&mut self) -> Event {
        match self {
            Self::Node { stream, .. } => stream.next().await.map_or(Event::Lost, Event::Message),
            Self::Cluster { pushes, .. } => loop {
                let Some(push) = pushes.recv().await else {
                    return Event::Lost;
                };
                match push.kind {
                    PushKind::SMessage => {
                        if let Some(msg) = Msg::from_push_info(push) {
                            return Event::Message(msg);
                        }
                    }
                    PushKind::SUnsubscribe => {
                        let channel = push.data.into_iter().next();
                        if let Some(channel) = channel.and_then(|c| redis::from_redis_value(c).ok())
                        {
                            return Event::Unsubscribed(channel);
                        }
                    }
                    PushKind::Disconnection => return Event::Lost,
                    // Confirmations, ours or redis-rs's own after a reconnect.
                    _ => {}
                }
            },
        }
    }
}
