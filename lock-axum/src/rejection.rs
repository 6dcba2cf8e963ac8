//! Why a request did not get its lock, and the HTTP answer for it.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use lock_core::LockError;

/// Why the layer answered a request itself instead of running the handler.
///
/// Each variant has its status ([`status`](Self::status)) and a short plain-text body (its
/// `Display`, which never includes a request value or a backend address). Replace the
/// response with [`LockLayer::error_handler`](crate::LockLayer::error_handler).
///
/// | variant                | status                                               |
/// |------------------------|------------------------------------------------------|
/// | `MissingKeyMaterial`   | `400 Bad Request`                                    |
/// | `InvalidKeyMaterial`   | `400 Bad Request`                                    |
/// | `InvalidKey`           | `400 Bad Request`                                    |
/// | `Contended`            | `423 Locked` or the [`on_contended`](crate::LockLayer::on_contended) status, with `Retry-After` |
/// | `Unavailable`          | `503 Service Unavailable`                            |
/// | `Lost`                 | `503 Service Unavailable`                            |
/// | `Misconfigured`        | `500 Internal Server Error`                          |
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockRejection {
    /// The request lacks a value the key needs (or the value is empty).
    #[error("missing {what}")]
    MissingKeyMaterial {
        /// What is missing, e.g. ``header `x-tenant` ``.
        what: String,
    },
    /// A value the key needs is present but unusable.
    #[error("{what} {reason}")]
    InvalidKeyMaterial {
        /// Which value, e.g. ``path parameter `id` ``.
        what: String,
        /// What is wrong with it, e.g. `contains a control character`.
        reason: String,
    },
    /// The key built from the request was refused by lock-core's validation (too long,
    /// for instance).
    #[error("invalid lock key: {reason}")]
    InvalidKey {
        /// Why it was refused.
        reason: String,
    },
    /// Another holder kept the lock for the whole wait.
    #[error("the resource is locked by another request; retry later")]
    Contended {
        /// The lock's name.
        key: String,
        /// The holder's remaining lease at the last attempt, when known.
        retry_after: Option<Duration>,
        /// The status to answer with (`423 Locked` unless configured).
        status: StatusCode,
    },
    /// The lock backend could not be reached or failed: the handler was not run.
    #[error("the lock service is unavailable")]
    Unavailable(#[source] LockError),
    /// The lease was lost (renewal failed until it ran out) while the handler ran: the
    /// handler was stopped, since another request may hold the lock now.
    #[error("the lock was lost before the response was ready; retry")]
    Lost {
        /// The lock's name.
        key: String,
    },
    /// The lock settings were refused (an unusable lease, for instance).
    #[error("the lock is misconfigured")]
    Misconfigured(#[source] LockError),
}

impl LockRejection {
    /// A `400` for a value the key needs that the request does not carry; `what` names it,
    /// e.g. ``"header `x-tenant`"``.
    pub fn missing(what: impl Into<String>) -> Self {
        LockRejection::MissingKeyMaterial { what: what.into() }
    }

    /// A `400` for a value that is present but unusable, e.g.
    /// ``invalid("path parameter `id`", "is not a number")``.
    pub fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        LockRejection::InvalidKeyMaterial {
            what: what.into(),
            reason: reason.into(),
        }
    }

    /// Sorts an acquisition failure; a timeout becomes `Contended` with `contended`.
    pub(crate) fn from_lock_error(err: LockError, contended: StatusCode) -> Self {
        match err {
            LockError::Timeout {
                key, holder_ttl, ..
            } => LockRejection::Contended {
                key,
                retry_after: holder_ttl,
                status: contended,
            },
            LockError::InvalidKey { reason, .. } => LockRejection::InvalidKey { reason },
            LockError::Config(_) => LockRejection::Misconfigured(err),
            // Backend, quorum, and anything added later: fail closed.
            err => LockRejection::Unavailable(err),
        }
    }

    /// The status of the response.
    pub fn status(&self) -> StatusCode {
        match self {
            LockRejection::MissingKeyMaterial { .. }
            | LockRejection::InvalidKeyMaterial { .. }
            | LockRejection::InvalidKey { .. } => StatusCode::BAD_REQUEST,
            LockRejection::Contended { status, .. } => *status,
            LockRejection::Unavailable(_) | LockRejection::Lost { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            LockRejection::Misconfigured(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// For `Contended`, the `Retry-After` in whole seconds: the holder's remaining lease,
    /// rounded up, at least 1.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            LockRejection::Contended {
                retry_after: Some(d),
                ..
            } => Some((d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)),
            _ => None,
        }
    }
}

impl IntoResponse for LockRejection {
    fn into_response(self) -> Response {
        let retry_after = self.retry_after_secs();
        let mut response = (self.status(), self.to_string()).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contended(ttl: Option<Duration>) -> LockRejection {
        LockRejection::from_lock_error(
            LockError::Timeout {
                key: "k".into(),
                waited: Duration::ZERO,
                holder_ttl: ttl,
            },
            StatusCode::LOCKED,
        )
    }

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one() {
        let ms = Duration::from_millis;
        assert_eq!(contended(Some(ms(1))).retry_after_secs(), Some(1));
        assert_eq!(contended(Some(ms(0))).retry_after_secs(), Some(1));
        assert_eq!(contended(Some(ms(2000))).retry_after_secs(), Some(2));
        assert_eq!(contended(Some(ms(2001))).retry_after_secs(), Some(3));
        assert_eq!(contended(None).retry_after_secs(), None);
        let response = contended(Some(ms(29_500))).into_response();
        assert_eq!(response.status(), StatusCode::LOCKED);
        assert_eq!(response.headers()[header::RETRY_AFTER], "30");
        assert!(
            contended(None)
                .into_response()
                .headers()
                .get(header::RETRY_AFTER)
                .is_none()
        );
    }

    #[test]
    fn errors_map_to_statuses() {
        let cases = [
            (
                LockError::InvalidKey {
                    key: "k".into(),
                    reason: "it is too long".into(),
                },
                StatusCode::BAD_REQUEST,
            ),
            (
                LockError::Backend {
                    key: None,
                    context: "connect".into(),
                    source: "refused".into(),
                },
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                LockError::Quorum {
                    key: "k".into(),
                    acquired: 1,
                    needed: 2,
                },
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                LockError::Config("bad lease".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ];
        for (err, status) in cases {
            let rejection = LockRejection::from_lock_error(err, StatusCode::LOCKED);
            assert_eq!(rejection.status(), status, "{rejection:?}");
            let msg = rejection.to_string();
            assert!(
                msg.starts_with(char::is_lowercase) && !msg.ends_with('.'),
                "{msg}"
            );
            assert!(
                !msg.contains("refused"),
                "the source is not repeated: {msg}"
            );
        }
    }
}
