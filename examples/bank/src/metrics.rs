//! `GET /metrics`: lock-core's lock metrics (`lock_acquisitions_total`,
//! `lock_wait_seconds`, ..., labelled by the lock's template, such as `balance:{id}`) in
//! Prometheus's text format, rendered by metrics-exporter-prometheus on the bank's own
//! listener.

use std::sync::OnceLock;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process's recorder, which every `metrics` call (lock-core's) feeds: installed once,
/// however many routers a process builds (the tests build many).
static RECORDER: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();

/// Installs the recorder, unless it is installed already, so that the metrics of the
/// locks taken from now on are kept.
pub(crate) fn install() -> &'static Result<PrometheusHandle, String> {
    RECORDER.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .map_err(|e| format!("the metrics recorder could not be installed: {e}"))
    })
}

/// The metrics as Prometheus scrapes them; `503` if the recorder could not be installed.
pub(crate) async fn render() -> Response {
    match install() {
        Ok(handle) => {
            // drains the histograms' samples into their buckets, so they do not grow
            handle.run_upkeep();
            let content_type = "text/plain; version=0.0.4; charset=utf-8";
            ([(header::CONTENT_TYPE, content_type)], handle.render()).into_response()
        }
        Err(e) => {
            tracing::warn!("{e}");
            let body = serde_json::json!({ "error": "metrics are unavailable" });
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
    }
}
