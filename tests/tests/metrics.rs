//! lock-core's metrics (feature `metrics`), read with a debugging recorder: acquisitions,
//! timeouts, losses, wait and hold times, labelled by the key's template as the attribute
//! and the layer know it, never by the key itself.

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lock_axum::LockLayer;
use lock_core::{LockError, LockOptions, Locker, distributed_lock};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};

#[distributed_lock(key = "balance:{id}", locker = locker, wait = "50ms")]
async fn deposit(locker: &Locker, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

/// A metric recorded: its kind, name, labels, and value.
type Metric = (MetricKind, String, Vec<(String, String)>, DebugValue);

/// Runs `body` on a runtime of its own, under a debugging recorder: every metric it
/// recorded.
fn recording(body: impl Future<Output = ()>) -> Vec<Metric> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(body);
    });
    recorded(&snapshotter)
}

/// Every metric recorded.
fn recorded(snapshotter: &Snapshotter) -> Vec<Metric> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (kind, key): (MetricKind, _) = CompositeKey::into_parts(key);
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (kind, key.name().to_owned(), labels, value)
        })
        .collect()
}

/// The labels of an exclusive lock labelled `lock`.
fn exclusive(lock: &str) -> Vec<(String, String)> {
    vec![
        ("kind".to_owned(), "exclusive".to_owned()),
        ("lock".to_owned(), lock.to_owned()),
    ]
}

/// The value of counter `name` for lock `lock` of kind `exclusive`.
fn counter(metrics: &[Metric], name: &str, lock: &str) -> u64 {
    let labels = exclusive(lock);
    metrics
        .iter()
        .find_map(|(_, n, l, value)| match value {
            DebugValue::Counter(c) if n == name && *l == labels => Some(*c),
            _ => None,
        })
        .unwrap_or(0)
}

/// How many samples histogram `name` holds for lock `lock` of kind `exclusive`.
fn samples(metrics: &[Metric], name: &str, lock: &str) -> usize {
    let labels = exclusive(lock);
    metrics
        .iter()
        .find_map(|(_, n, l, value)| match value {
            DebugValue::Histogram(h) if n == name && *l == labels => Some(h.len()),
            _ => None,
        })
        .unwrap_or(0)
}

#[test]
fn the_attribute_labels_its_locks_by_template() {
    let metrics = recording(async {
        let locker = Locker::in_memory();
        assert_eq!(deposit(&locker, 42).await.unwrap(), 42);
        assert_eq!(deposit(&locker, 43).await.unwrap(), 43);
        // Held elsewhere: the attribute's wait of 50 ms times out.
        let held = locker.lock("balance:7").await.unwrap();
        let err = tokio::spawn({
            let locker = locker.clone();
            async move { deposit(&locker, 7).await }
        })
        .await
        .unwrap()
        .unwrap_err();
        assert!(err.is_timeout(), "{err}");
        held.release().await.unwrap();
        // A lease left to run out is lost; a try_lock that finds it held is no timeout.
        let options = LockOptions::new()
            .lease(Duration::from_millis(50))
            .watchdog(false)
            .label("job:{name}");
        let guard = locker.lock_with("job:nightly", options).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .expect("the lease ran out");
        drop(guard);
        let other = locker.lock("job:nightly").await.unwrap();
        let found_held = tokio::spawn({
            let locker = locker.clone();
            async move {
                let options = LockOptions::new().label("job:{name}");
                locker
                    .try_lock_with("job:nightly", options)
                    .await
                    .map(|g| g.is_none())
            }
        })
        .await
        .unwrap()
        .unwrap();
        assert!(found_held, "another task took a held lock");
        other.release().await.unwrap();
    });
    assert_eq!(
        counter(&metrics, "lock_acquisitions_total", "balance:{id}"),
        2,
        "{metrics:?}"
    );
    assert_eq!(samples(&metrics, "lock_wait_seconds", "balance:{id}"), 2);
    assert_eq!(samples(&metrics, "lock_hold_seconds", "balance:{id}"), 2);
    assert_eq!(counter(&metrics, "lock_timeouts_total", "balance:{id}"), 1);
    assert_eq!(
        counter(&metrics, "lock_acquisitions_total", "job:{name}"),
        1
    );
    assert_eq!(counter(&metrics, "lock_losses_total", "job:{name}"), 1);
    assert_eq!(counter(&metrics, "lock_timeouts_total", "job:{name}"), 0);
    // Locks taken without a label are counted under "-".
    assert_eq!(counter(&metrics, "lock_acquisitions_total", "-"), 2);
    for (_, name, labels, _) in &metrics {
        for (_, value) in labels {
            assert!(
                !value.contains("42") && !value.contains("balance:7") && !value.contains("nightly"),
                "{name} is labelled with a key: {value}"
            );
        }
    }
}

#[test]
fn the_layer_labels_its_locks_by_template() {
    let metrics = recording(async {
        let layer = LockLayer::new(Locker::in_memory(), "doc:{name}");
        let app = Router::new()
            .route("/docs/{name}", post(|| async { "saved" }))
            .route_layer(layer);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<axum::body::Bytes>>();
        for name in ["readme", "changelog"] {
            let request = axum::http::Request::post(format!("http://{addr}/docs/{name}"))
                .body(Empty::new())
                .unwrap();
            let response = client.request(request).await.unwrap();
            assert_eq!(response.status(), axum::http::StatusCode::OK);
        }
    });
    assert_eq!(
        counter(&metrics, "lock_acquisitions_total", "doc:{name}"),
        2,
        "{metrics:?}"
    );
    assert_eq!(samples(&metrics, "lock_hold_seconds", "doc:{name}"), 2);
    for (_, name, labels, _) in &metrics {
        for (_, value) in labels {
            assert!(
                !value.contains("readme"),
                "{name} is labelled with a key: {value}"
            );
        }
    }
}
