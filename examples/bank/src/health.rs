//! `GET /healthz`: whether the bank's stores answer, for a load balancer or an
//! orchestrator's readiness check.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio::time::timeout;

use crate::service::Bank;

/// How long each store has to answer.
const PATIENCE: Duration = Duration::from_secs(2);

/// A lock that nobody takes: inspecting it is a read from the lock store.
const PROBE: &str = "bank:healthz";

/// `200 {"locks": "ok", "balances": "ok"}` when both stores answer within [`PATIENCE`];
/// else `503` with an `error` naming the one (or both) that did not, the cause logged.
pub(crate) async fn healthz(State(bank): State<Bank>) -> (StatusCode, Json<Value>) {
    let locks = async {
        match timeout(PATIENCE, bank.locker().inspect(PROBE)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {PATIENCE:?}")),
        }
    };
    let balances = async {
        match timeout(PATIENCE, bank.store().ping()).await {
            Ok(answer) => answer.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {PATIENCE:?}")),
        }
    };
    let (locks, balances) = tokio::join!(locks, balances);
    let state = |answer: &Result<(), String>| if answer.is_ok() { "ok" } else { "unavailable" };
    let mut body = json!({ "locks": state(&locks), "balances": state(&balances) });
    let down: Vec<&str> = [("the lock store", &locks), ("the balance store", &balances)]
        .into_iter()
        .filter_map(|(store, answer)| {
            let cause = answer.as_ref().err()?;
            tracing::warn!("healthz: {store} does not answer: {cause}");
            Some(store)
        })
        .collect();
    if down.is_empty() {
        return (StatusCode::OK, Json(body));
    }
    let verb = if down.len() == 1 { "does" } else { "do" };
    body["error"] = json!(format!("{} {verb} not answer", down.join(" and ")));
    (StatusCode::SERVICE_UNAVAILABLE, Json(body))
}
