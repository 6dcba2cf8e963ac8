//! HTTP: the routes, JSON in and out, and every failure as `{"error": "<reason>"}`.

use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use lock_axum::{HeldLock, LockLayer, LockRejection};
use lock_core::LockError;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tower_http::trace::TraceLayer;

use crate::service::{AccountId, Amount, Bank, BankError, NO_FENCE, lock_key};
use crate::{audit, health, metrics};

/// The service's routes. A balance, a deposit and a withdrawal run under the account's
/// lock, which [`account_lock`] takes around the handler; a statement and a transfer take
/// their locks in [`Bank`].
pub(crate) fn router(bank: Bank) -> Router {
    let mut accounts = Router::new()
        .route("/accounts/{id}", get(balance))
        .route("/accounts/{id}/deposit", post(deposit))
        .route("/accounts/{id}/withdraw", post(withdraw));
    if bank.locking() {
        accounts = accounts.route_layer(account_lock(&bank));
    }
    // from now on, the metrics of every lock taken are kept for `/metrics`
    metrics::install();
    accounts
        .route("/accounts/{id}/statement", get(statement))
        .route("/transfers", post(transfer))
        .route("/admin/locks/{key}", get(inspect).delete(force_unlock))
        .route("/audit", get(audit::report))
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(metrics::render))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        })
        .layer(TraceLayer::new_for_http())
        .with_state(bank)
}

/// The read-write lock of the account a request names, `balance:{id}` as [`lock_key`]
/// names it: reading the balance takes its read side, shared with other reads; a deposit
/// or a withdrawal its write side. The handler gets it as [`HeldLock`], whose fencing
/// token goes with every access to the balance. A request that does not get the lock is
/// answered as any other lock failure is, and its handler does not run.
fn account_lock(bank: &Bank) -> LockLayer {
    LockLayer::read_write(bank.locker().clone(), "balance:{id}")
        .wait(bank.wait())
        .error_handler(ApiError::from)
}

/// The lock the layer took for a request: none with locks off.
type Held = Option<Extension<HeldLock>>;

/// The fencing token of the account's lock, which the request holds (its read or write
/// side); [`NO_FENCE`] with locks off. Holding none with locks on is a lock failure: the
/// balance is never touched unlocked.
fn fence(bank: &Bank, id: &AccountId, held: Held) -> Result<u64, ApiError> {
    let key = lock_key(id);
    match held {
        _ if !bank.locking() => Ok(NO_FENCE),
        Some(Extension(lock)) if lock.key() == key => Ok(lock.fencing_token()),
        _ => Err(BankError::Lock(LockError::NotHeld { key }).into()),
    }
}

/// `GET /admin/locks/{key}`: who holds the lock `key`, as its store sees it (see
/// `Locker::inspect`: a field the store cannot know is `null`).
async fn inspect(
    State(bank): State<Bank>,
    headers: HeaderMap,
    key: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    admin(&bank, &headers)?;
    let key = key?.0;
    let Some(info) = bank.locker().inspect(&key).await.map_err(admin_error)? else {
        return Ok(Json(json!({ "key": key, "held": false })));
    };
    let holders: Vec<Value> = info
        .holders
        .iter()
        .map(|h| {
            let lease_left_ms = h
                .lease_left
                .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
            json!({
                "token_prefix": h.token_prefix,
                "lease_left_ms": lease_left_ms,
                "fencing_token": h.fencing_token,
            })
        })
        .collect();
    Ok(Json(json!({
        "key": key,
        "held": true,
        "kind": info.kind.map(|kind| kind.to_string()),
        "holders": holders,
        "waiting": info.waiting,
    })))
}

/// `DELETE /admin/locks/{key}`: an operator forces the lock `key` open, whoever holds it
/// (see `Locker::force_unlock`: the holder runs on until its next renewal fails).
async fn force_unlock(
    State(bank): State<Bank>,
    headers: HeaderMap,
    key: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    admin(&bank, &headers)?;
    let key = key?.0;
    let was_held = bank
        .locker()
        .force_unlock(&key)
        .await
        .map_err(admin_error)?;
    Ok(Json(json!({ "key": key, "was_held": was_held })))
}

/// The answer to an admin call on a lock that failed: `400` for an invalid key, else as
/// any other lock error.
fn admin_error(e: LockError) -> ApiError {
    if e.is_invalid_key() {
        ApiError::new(StatusCode::BAD_REQUEST, e)
    } else {
        BankError::from(e).into()
    }
}

/// Lets an admin request through: `404` when the admin endpoints are off (no
/// `BANK_ADMIN_TOKEN`), `401` without its bearer token.
fn admin(bank: &Bank, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = bank.admin_token() else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "no such endpoint"));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if same_secret(given.as_bytes(), expected.as_bytes()) => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "the admin endpoints need `Authorization: Bearer <BANK_ADMIN_TOKEN>`",
        )),
    }
}

/// Whether `a` and `b` are equal, taking as long whichever bytes differ, so that the time
/// of an answer tells nothing of the token.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AmountBody {
    amount: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TransferBody {
    from: String,
    to: String,
    amount: i64,
}

#[derive(Debug, Serialize)]
struct Balance {
    id: AccountId,
    balance: i64,
}

#[derive(Debug, Serialize)]
struct Statement {
    id: AccountId,
    balance: i64,
    /// The fencing token of the read lock the balance was read under (0 with locks off).
    fencing_token: u64,
    /// When the balance was read, in milliseconds since the Unix epoch.
    as_of_unix_ms: u64,
}

#[derive(Debug, Serialize)]
struct Transfer {
    from: Balance,
    to: Balance,
}

type IdParam = Result<Path<String>, PathRejection>;

async fn balance(
    State(bank): State<Bank>,
    id: IdParam,
    held: Held,
) -> Result<Json<Balance>, ApiError> {
    let id = AccountId::parse(&id?.0)?;
    let fence = fence(&bank, &id, held)?;
    let balance = bank.show(&id, fence).await?.balance;
    Ok(Json(Balance { id, balance }))
}

async fn statement(State(bank): State<Bank>, id: IdParam) -> Result<Json<Statement>, ApiError> {
    let id = AccountId::parse(&id?.0)?;
    let reading = bank.statement(&id).await?;
    let since_epoch = reading
        .read_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Ok(Json(Statement {
        id,
        balance: reading.balance,
        fencing_token: reading.fencing_token,
        as_of_unix_ms: u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX),
    }))
}

async fn deposit(
    State(bank): State<Bank>,
    id: IdParam,
    held: Held,
    body: Result<Json<AmountBody>, JsonRejection>,
) -> Result<Json<Balance>, ApiError> {
    let (id, amount) = account_change(id, body)?;
    let fence = fence(&bank, &id, held)?;
    let balance = bank.deposit(&id, amount, fence).await?;
    Ok(Json(Balance { id, balance }))
}

async fn withdraw(
    State(bank): State<Bank>,
    id: IdParam,
    held: Held,
    body: Result<Json<AmountBody>, JsonRejection>,
) -> Result<Json<Balance>, ApiError> {
    let (id, amount) = account_change(id, body)?;
    let fence = fence(&bank, &id, held)?;
    let balance = bank.withdraw(&id, amount, fence).await?;
    Ok(Json(Balance { id, balance }))
}

/// The account and amount of a deposit or withdrawal, checked.
fn account_change(
    id: IdParam,
    body: Result<Json<AmountBody>, JsonRejection>,
) -> Result<(AccountId, Amount), ApiError> {
    let id = AccountId::parse(&id?.0)?;
    let amount = Amount::parse(body?.amount)?;
    Ok((id, amount))
}

async fn transfer(
    State(bank): State<Bank>,
    body: Result<Json<TransferBody>, JsonRejection>,
) -> Result<Json<Transfer>, ApiError> {
    let Json(body) = body?;
    let from = AccountId::parse(&body.from)?;
    let to = AccountId::parse(&body.to)?;
    let amount = Amount::parse(body.amount)?;
    let (from_balance, to_balance) = bank.transfer(&from, &to, amount).await?;
    Ok(Json(Transfer {
        from: Balance {
            id: from,
            balance: from_balance,
        },
        to: Balance {
            id: to,
            balance: to_balance,
        },
    }))
}

/// An error answer: a status, `{"error": "<reason>", ..}`, and for contention a
/// `Retry-After`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    body: Value,
    retry_after: Option<Duration>,
}

impl ApiError {
    fn new(status: StatusCode, error: impl fmt::Display) -> Self {
        ApiError::with_body(status, json!({ "error": error.to_string() }))
    }

    fn with_body(status: StatusCode, body: Value) -> Self {
        ApiError {
            status,
            body,
            retry_after: None,
        }
    }

    /// `423 Locked`: an account stayed locked for the whole wait; retry after the holder's
    /// lease left, if known.
    fn locked(retry_after: Option<Duration>) -> Self {
        ApiError {
            retry_after,
            ..ApiError::new(
                StatusCode::LOCKED,
                "an account is locked by another request; retry later",
            )
        }
    }

    /// `503`: a lock was lost while its request ran, which was stopped.
    fn lost() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "a lock was lost before the request was done; retry",
        )
    }

    /// A server-side failure: logged here, since the client only hears that it happened.
    fn unavailable(what: &str, cause: &dyn fmt::Display) -> Self {
        tracing::warn!("{what} unavailable: {cause}");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the {what} is unavailable; retry later"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        if let Some(d) = self.retry_after {
            // whole seconds, rounded up, at least 1
            let secs = (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1);
            let headers = response.headers_mut();
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, rejection.body_text())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        // axum answers a body of the wrong shape with 422; here every unusable body is a
        // 400, but a missing content type stays a 415 and an oversized body a 413
        let status = match rejection {
            JsonRejection::JsonDataError(_) | JsonRejection::JsonSyntaxError(_) => {
                StatusCode::BAD_REQUEST
            }
            _ => rejection.status(),
        };
        ApiError::new(status, rejection.body_text())
    }
}

impl From<BankError> for ApiError {
    fn from(e: BankError) -> Self {
        let bad_request = |reason| ApiError::new(StatusCode::BAD_REQUEST, reason);
        match e {
            BankError::InvalidAccount => bad_request(format!(
                "an account id is 1 to {} characters of A-Z, a-z, 0-9, _ and -",
                AccountId::MAX_LEN
            )),
            BankError::InvalidAmount => bad_request("amount must be a positive integer".into()),
            BankError::SameAccount => bad_request("from and to must be different accounts".into()),
            BankError::Insufficient {
                id,
                balance,
                amount,
            } => ApiError::with_body(
                StatusCode::CONFLICT,
                json!({
                    "error": "insufficient funds",
                    "id": id,
                    "balance": balance,
                    "amount": amount,
                }),
            ),
            BankError::Overflow { id } => ApiError::with_body(
                StatusCode::CONFLICT,
                json!({ "error": "the balance would overflow", "id": id }),
            ),
            BankError::TooManyStatements { retry_after } => ApiError {
                retry_after,
                ..ApiError::new(
                    StatusCode::LOCKED,
                    "as many statements as allowed are being prepared; retry later",
                )
            },
            BankError::Stale => ApiError::new(
                StatusCode::CONFLICT,
                "refused: this request's lock ran out and a newer holder read or wrote the account; retry",
            ),
            BankError::Lock(e) if e.is_timeout() => ApiError::locked(e.retry_after()),
            BankError::Lock(e) if e.is_unsupported() => ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                format!("not offered by this bank's lock store: {e}"),
            ),
            BankError::Lock(e) if e.is_lost() => ApiError::lost(),
            BankError::Lock(e) => ApiError::unavailable("lock service", &e),
            BankError::Store(e) => ApiError::unavailable("balance store", &e),
        }
    }
}

/// The account lock's answers, as the bank gives them when it takes a lock itself: an id
/// that cannot name a lock is an invalid account, and one that is not UTF-8 is answered
/// as axum's `Path` answers it, which read it before the lock came in front of it.
impl From<LockRejection> for ApiError {
    fn from(rejection: LockRejection) -> Self {
        match rejection {
            LockRejection::InvalidKeyMaterial { reason, .. } if reason == "is not valid UTF-8" => {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "Invalid URL: Invalid UTF-8 in `id`",
                )
            }
            LockRejection::MissingKeyMaterial { .. }
            | LockRejection::InvalidKeyMaterial { .. }
            | LockRejection::InvalidKey { .. } => BankError::InvalidAccount.into(),
            LockRejection::Contended { retry_after, .. } => ApiError::locked(retry_after),
            LockRejection::Lost { .. } => ApiError::lost(),
            LockRejection::Unavailable(e) | LockRejection::Misconfigured(e) => {
                BankError::Lock(e).into()
            }
            other => ApiError::unavailable("lock service", &other),
        }
    }
}
