//! Which node a pipeline of script calls goes to: on one server, all of them in one
//! pipeline ([`pipelined`]); on a Redis Cluster, one pipeline per node that serves their
//! keys' slots ([`per_node`]), as the [slot map](super::slots) says.

use std::collections::HashMap;

use futures_util::future::join_all;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{FromRedisValue, Pipeline, RedisResult, Value};

use super::connection::Conn;
use super::scripts::{LockScript, ScriptCall, is_noscript};
use super::slots::{Node, Slots};

/// Runs a pipeline of calls of `script`, loading the script first if the server lost it.
/// On a Redis Cluster, one pipeline per node ([`per_node`]).
pub(super) async fn pipelined<T: FromRedisValue>(
    conn: &mut Conn,
    script: &LockScript,
    calls: Vec<ScriptCall<'_>>,
) -> RedisResult<Vec<T>> {
    if let Conn::Cluster(cluster, slots) = conn {
        return per_node(cluster, slots, calls).await;
    }
    let mut pipe = Pipeline::with_capacity(calls.len());
    for call in calls {
        pipe.add_command(call.cmd);
    }
    match pipe.query_async(conn).await {
        Err(e) if is_noscript(&e) => {
            script.load(conn).await?;
            pipe.query_async(conn).await
        }
        reply => reply,
    }
}

/// Runs `calls` on a Redis Cluster, one pipeline per node as the slot map says. A call
/// whose node the map does not know, or that its node did not run (a slot that moved, a
/// node that failed, a lost script), is sent on its own, which follows `MOVED` and `ASK`
/// and loads the script; after a pipeline that failed, the map is read again before the
/// next pipelines.
async fn per_node<T: FromRedisValue>(
    conn: &mut ClusterConnection,
    slots: &Slots,
    calls: Vec<ScriptCall<'_>>,
) -> RedisResult<Vec<T>> {
    let mut by_node: HashMap<&Node, Vec<usize>> = HashMap::new();
    let map = slots.get(conn).await;
    if let Ok(map) = &map {
        for (i, call) in calls.iter().enumerate() {
            if let Some(node) = call.first_key().and_then(|key| map.node_of(key)) {
                by_node.entry(node).or_default().push(i);
            }
        }
    }
    let pipelines = by_node.into_iter().map(|(node, calls_of_node)| {
        let mut pipe = Pipeline::with_capacity(calls_of_node.len());
        for &i in &calls_of_node {
            pipe.add_command(calls[i].cmd.clone());
        }
        let route = SingleNodeRoutingInfo::ByAddress {
            host: node.host.clone(),
            port: node.port,
        };
        let mut conn = conn.clone();
        async move {
            let count = calls_of_node.len();
            let replies = conn.route_pipeline(pipe, 0, count, route).await;
            (calls_of_node, replies)
        }
    });
    let mut replies: Vec<Option<Value>> = vec![None; calls.len()];
    let mut stale = false;
    for (calls_of_node, answered) in join_all(pipelines).await {
        let Ok(answered) = answered else {
            stale = true;
            continue;
        };
        for (i, reply) in calls_of_node.into_iter().zip(answered) {
            match reply {
                Value::ServerError(_) => stale = true,
                reply => replies[i] = Some(reply),
            }
        }
    }
    if stale {
        slots.forget();
    }
    let alone = (0..calls.len()).filter(|&i| replies[i].is_none());
    let sent_alone = alone.map(|i| {
        let (call, mut conn) = (&calls[i], conn.clone());
        async move { (i, call.invoke_async::<Value, _>(&mut conn).await) }
    });
    for (i, reply) in join_all(sent_alone).await {
        replies[i] = Some(reply?);
    }
    replies
        .into_iter()
        .map(|reply| Ok(T::from_redis_value(reply.unwrap_or(Value::Nil))?))
        .collect()
}
