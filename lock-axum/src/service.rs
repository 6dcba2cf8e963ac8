//! The service: takes the lock, then calls the inner service.

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{FromRequestParts, RawPathParams};
use axum::response::Response;
use http::Request;
use http::request::Parts;
use lock_core::{LockGuard, LockOptions};
use tower_service::Service;

use crate::config::Config;
use crate::future::{Acquired, ResponseFuture};
use crate::key::PathParams;
use crate::rejection::LockRejection;

/// The lock a request holds, for its handler: take it as `Extension<HeldLock>`.
///
/// ```
/// use axum::Extension;
/// use lock_axum::HeldLock;
///
/// async fn deposit(Extension(lock): Extension<HeldLock>) -> String {
///     // pass the token along to storage that rejects stale writers
///     format!("{} #{}", lock.key(), lock.fencing_token())
/// }
/// ```
///
/// Only requests that took a lock carry it; the lock itself stays with the layer, which
/// releases it when the response is produced (or its body ends, with
/// [`hold_until_body_end`](crate::LockLayer::hold_until_body_end)).
#[derive(Debug, Clone)]
pub struct HeldLock {
    key: Arc<str>,
    fencing_token: u64,
}

impl HeldLock {
    /// The lock's name, as built from the request.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token of this acquisition: greater than that of every earlier holder
    /// of the same lock.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }
}

/// Runs each request under its lock; made by [`LockLayer`](crate::LockLayer), see the
/// [crate docs](crate).
#[derive(Debug, Clone)]
pub struct LockService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> LockService<S> {
    pub(crate) fn from_config(inner: S, config: Arc<Config>) -> Self {
        LockService { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for LockService<S>
where
    S: Service<Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        if !self.config.locks(req.method()) {
            return ResponseFuture::unlocked(self.inner.call(req), self.config.clone());
        }
        // The lock is taken before the inner service is called: take the service that was
        // driven to readiness and leave a clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        let response_config = config.clone();
        let acquire = async move {
            let (mut parts, body) = req.into_parts();
            let guard = match acquire(&config, &mut parts).await {
                Ok(guard) => guard,
                Err(rejection) => return Err(config.reject(rejection)),
            };
            if let Some(guard) = &guard {
                parts.extensions.insert(HeldLock {
                    key: guard.key().into(),
                    fencing_token: guard.fencing_token(),
                });
            }
            let acquired: Acquired<S::Future> =
                (inner.call(Request::from_parts(parts, body)), guard);
            Ok(acquired)
        };
        ResponseFuture::acquiring(Box::pin(acquire), response_config)
    }
}

/// Names the lock from the request head and takes it; `None` when the extractor says the
/// request takes no lock.
async fn acquire(config: &Config, parts: &mut Parts) -> Result<Option<LockGuard>, LockRejection> {
    // axum put the matched route's parameters in the extensions when it routed the
    // request; `RawPathParams` reads them without awaiting anything.
    let params = match RawPathParams::from_request_parts(parts, &()).await {
        Ok(raw) => PathParams::from_raw(&raw),
        Err(RawPathParamsRejection::InvalidUtf8InPathParam(_)) => {
            return Err(LockRejection::invalid(
                "a path parameter",
                "is not valid UTF-8",
            ));
        }
        // no parameters: this route has none, or the layer runs before routing
        Err(_) => PathParams::default(),
    };
    parts.extensions.insert(params);
    let key = config.extractor.extract(parts);
    parts.extensions.remove::<PathParams>();
    let Some(key) = key? else {
        return Ok(None);
    };
    let mut options = LockOptions::new()
        .wait(config.wait)
        .kind(config.kind(&parts.method));
    if let Some(lease) = config.lease {
        options = options.lease(lease);
    }
    if let Some(label) = config.label {
        options = options.label(label);
    }
    match config.locker.lock_with(&key, options).await {
        Ok(guard) => Ok(Some(guard)),
        Err(err) => Err(LockRejection::from_lock_error(err, config.contended)),
    }
}
