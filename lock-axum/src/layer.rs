//! The layer, which makes a [`LockService`] of each service it wraps.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::IntoResponse;
use http::{Method, StatusCode};
use lock_core::Locker;
use tower_layer::Layer;

use crate::config::{Config, Mode};
use crate::key::{KeyExtractor, KeyTemplate, TemplateError};
use crate::rejection::LockRejection;
use crate::service::LockService;

/// How long a request waits for its lock unless [`LockLayer::wait`] says otherwise: shorter
/// than a `Locker`'s default wait ([`lock_core::DEFAULT_WAIT`]), since a client waits on
/// the request.
pub const DEFAULT_REQUEST_WAIT: Duration = Duration::from_secs(5);

/// The old name of [`DEFAULT_REQUEST_WAIT`]. lock-core's
/// [`DEFAULT_WAIT`](lock_core::DEFAULT_WAIT), a `Locker`'s default wait, has the same name
/// for another thing.
#[deprecated(note = "use DEFAULT_REQUEST_WAIT: lock_core::DEFAULT_WAIT is a Locker's default wait")]
pub const DEFAULT_WAIT: Duration = DEFAULT_REQUEST_WAIT;

/// Runs each request under a distributed lock named from the request: see the
/// [crate docs](crate) for an example and for why it belongs in [`Router::route_layer`].
///
/// [`new`](Self::new) takes an exclusive lock ([`fair`](Self::fair) for a fair one);
/// [`read_write`](Self::read_write) a read-write lock, whose read side safe methods share.
///
/// Defaults: POST, PUT, PATCH and DELETE lock (every method, for a read-write layer;
/// other methods pass through unlocked), a
/// request waits up to 5 s ([`DEFAULT_REQUEST_WAIT`]), then gets `423 Locked` with `Retry-After`;
/// the lease is the [`Locker`]'s default, renewed by lock-core's watchdog while the
/// request runs; the lock is released as soon as the handler's response is produced.
///
/// [`Router::route_layer`]: axum::Router::route_layer
#[derive(Debug, Clone)]
pub struct LockLayer {
    config: Arc<Config>,
}

impl LockLayer {
    /// A layer that locks the key built from `template` (see [`KeyTemplate`] for the
    /// placeholders).
    ///
    /// # Panics
    ///
    /// If the template is malformed, with a message saying where and why, the way
    /// [`Router::route`](axum::Router::route) panics on a malformed path. Use
    /// [`try_new`](Self::try_new) for a template that is not a literal in the code.
    #[track_caller]
    pub fn new(locker: Locker, template: &str) -> Self {
        match Self::try_new(locker, template) {
            Ok(layer) => layer,
            Err(err) => panic!("{err}"),
        }
    }

    /// [`new`](Self::new) that returns the template error instead of panicking.
    pub fn try_new(locker: Locker, template: &str) -> Result<Self, TemplateError> {
        let mut layer = Self::with_extractor(locker, KeyTemplate::parse(template)?);
        layer.config().label = Some(interned(template));
        Ok(layer)
    }

    /// A layer that locks the key built from `template` as a read-write lock: requests
    /// with a safe method (GET, HEAD, OPTIONS) take its read side, which they share with
    /// each other; the others take its write side, alone. Every method locks by default;
    /// [`methods`](Self::methods) still chooses which do. Writers are preferred: a read
    /// that comes after a write began to wait goes in after it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    ///
    /// use axum::Router;
    /// use axum::body::Body;
    /// use axum::routing::get;
    /// use http::{Request, StatusCode};
    /// use lock_axum::LockLayer;
    /// use lock_core::Locker;
    /// use tower::ServiceExt;
    ///
    /// let locker = Locker::in_memory();
    /// let app = Router::new()
    ///     .route("/docs/{id}", get(|| async { "the document" }).put(|| async { "saved" }))
    ///     .route_layer(LockLayer::read_write(locker.clone(), "doc:{id}").wait(Duration::ZERO));
    ///
    /// // Another reader holds the document: a read goes on, a write has to wait.
    /// let _reader = locker.read("doc:7").await.unwrap();
    /// let read = Request::get("/docs/7").body(Body::empty()).unwrap();
    /// let response = tokio::spawn(app.clone().oneshot(read)).await.unwrap().unwrap();
    /// assert_eq!(response.status(), StatusCode::OK);
    /// let write = Request::put("/docs/7").body(Body::empty()).unwrap();
    /// let response = tokio::spawn(app.oneshot(write)).await.unwrap().unwrap();
    /// assert_eq!(response.status(), StatusCode::LOCKED);
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// If the template is malformed, as [`new`](Self::new) does; use
    /// [`try_read_write`](Self::try_read_write) for a template that is not a literal in
    /// the code.
    #[track_caller]
    pub fn read_write(locker: Locker, template: &str) -> Self {
        match Self::try_read_write(locker, template) {
            Ok(layer) => layer,
            Err(err) => panic!("{err}"),
        }
    }

    /// [`read_write`](Self::read_write) that returns the template error instead of
    /// panicking.
    pub fn try_read_write(locker: Locker, template: &str) -> Result<Self, TemplateError> {
        let mut layer = Self::try_new(locker, template)?;
        let config = layer.config();
        config.mode = Mode::ReadWrite;
        config.methods = vec![
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ];
        Ok(layer)
    }

    /// A layer that asks `extractor` for each request's lock name.
    pub fn with_extractor(locker: Locker, extractor: impl KeyExtractor) -> Self {
        LockLayer {
            config: Arc::new(Config {
                locker,
                extractor: Arc::new(extractor),
                wait: DEFAULT_REQUEST_WAIT,
                lease: None,
                contended: StatusCode::LOCKED,
                methods: vec![Method::POST, Method::PUT, Method::PATCH, Method::DELETE],
                hold_until_body_end: false,
                mode: Mode::Exclusive,
                error_handler: None,
                label: None,
            }),
        }
    }

    fn config(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// How long a request waits for a held lock before it is rejected (default 5 s);
    /// `Duration::ZERO` makes one attempt and rejects at once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.config().wait = wait;
        self
    }

    /// The lease of each lock (default: the [`Locker`]'s). The watchdog renews it while the
    /// request runs, so it bounds how long a crashed replica can keep the lock, not how
    /// long a request may take.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config().lease = Some(lease);
        self
    }

    /// The status for a request that waited its whole wait (default `423 Locked`); `409`,
    /// `429` and `503` are common choices. `Retry-After` is sent with any of them.
    ///
    /// # Panics
    ///
    /// If `status` is not a client or server error status.
    #[track_caller]
    pub fn on_contended(mut self, status: StatusCode) -> Self {
        assert!(
            status.is_client_error() || status.is_server_error(),
            "LockLayer::on_contended needs a 4xx or 5xx status, got {status}"
        );
        self.config().contended = status;
        self
    }

    /// The methods that lock (default POST, PUT, PATCH, DELETE); requests with any other
    /// method pass through unlocked. `methods([Method::GET, Method::POST])` locks reads
    /// too.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.config().methods = methods.into_iter().collect();
        self
    }

    /// Holds the lock until the response body has been sent in full (or dropped), instead
    /// of until the handler's response is produced (default `false`). For handlers that
    /// stream a body produced under the lock.
    pub fn hold_until_body_end(mut self, hold: bool) -> Self {
        self.config().hold_until_body_end = hold;
        self
    }

    /// Serves the requests waiting for one lock first come first served, across every
    /// replica (default `false`: whoever asks first after a release wins). See
    /// [`LockOptions::fair`](lock_core::LockOptions::fair).
    ///
    /// # Panics
    ///
    /// `fair(true)` on a [`read_write`](Self::read_write) layer: a read-write lock has no
    /// fair mode (it prefers writers instead), and taking another kind of lock than the
    /// layer was made for would silently change what it guarantees.
    #[track_caller]
    pub fn fair(mut self, fair: bool) -> Self {
        let config = self.config();
        config.mode = match (config.mode, fair) {
            (Mode::ReadWrite, true) => panic!(
                "LockLayer::fair(true) on a read-write layer: a read-write lock has no fair \
                 mode; use LockLayer::new(..).fair(true) for a fair exclusive lock"
            ),
            (Mode::ReadWrite, false) => Mode::ReadWrite,
            (_, true) => Mode::Fair,
            (_, false) => Mode::Exclusive,
        };
        self
    }

    /// Answers rejected requests with `handler` instead of the
    /// [`LockRejection`]'s own response.
    ///
    /// ```
    /// use lock_axum::{LockLayer, LockRejection};
    /// use lock_core::Locker;
    ///
    /// let layer = LockLayer::new(Locker::in_memory(), "balance:{id}").error_handler(
    ///     |rejection: LockRejection| {
    ///         let status = rejection.status();
    ///         (status, format!("{{\"error\":\"{rejection}\"}}"))
    ///     },
    /// );
    /// # let _ = layer;
    /// ```
    pub fn error_handler<F, R>(mut self, handler: F) -> Self
    where
        F: Fn(LockRejection) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.config().error_handler = Some(Arc::new(move |rejection| {
            handler(rejection).into_response()
        }));
        self
    }
}

/// A service is made by a layer: its constructors are shorthands for one.
impl<S> LockService<S> {
    /// Wraps `inner` with the lock named by `template`.
    ///
    /// # Panics
    ///
    /// If the template is malformed; see [`LockLayer::new`].
    #[track_caller]
    pub fn new(inner: S, locker: Locker, template: &str) -> Self {
        Layer::layer(&LockLayer::new(locker, template), inner)
    }

    /// [`new`](Self::new) that returns the template error instead of panicking.
    pub fn try_new(inner: S, locker: Locker, template: &str) -> Result<Self, TemplateError> {
        Ok(Layer::layer(&LockLayer::try_new(locker, template)?, inner))
    }

    /// Wraps `inner`, asking `extractor` for each request's lock name.
    pub fn with_extractor(inner: S, locker: Locker, extractor: impl KeyExtractor) -> Self {
        Layer::layer(&LockLayer::with_extractor(locker, extractor), inner)
    }

    /// A [`LockLayer`]: the same as [`LockLayer::new`].
    #[track_caller]
    pub fn layer(locker: Locker, template: &str) -> LockLayer {
        LockLayer::new(locker, template)
    }
}

impl<S> Layer<S> for LockLayer {
    type Service = LockService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService::from_config(inner, self.config.clone())
    }
}

/// `template`, kept for the life of the process to label locks with: each distinct
/// template once, however many layers are built from it.
fn interned(template: &str) -> &'static str {
    static TEMPLATES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut templates = TEMPLATES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(kept) = templates.iter().find(|kept| **kept == template) {
        return kept;
    }
    let kept: &'static str = Box::leak(template.into());
    templates.push(kept);
    kept
}
