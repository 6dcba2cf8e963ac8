//! A layer's settings, shared by every service and response it makes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode};
use lock_core::{LockKind, Locker};

use crate::key::KeyExtractor;
use crate::rejection::LockRejection;

pub(crate) type ErrorHandler = Arc<dyn Fn(LockRejection) -> Response + Send + Sync>;

/// The settings shared by every [`LockService`](crate::LockService) a layer makes.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) locker: Locker,
    pub(crate) extractor: Arc<dyn KeyExtractor>,
    pub(crate) wait: Duration,
    pub(crate) lease: Option<Duration>,
    pub(crate) contended: StatusCode,
    pub(crate) methods: Vec<Method>,
    pub(crate) hold_until_body_end: bool,
    pub(crate) mode: Mode,
    pub(crate) error_handler: Option<ErrorHandler>,
    /// The template, which labels the lock in metrics and traces; none for an extractor.
    pub(crate) label: Option<&'static str>,
}

/// How a layer's requests lock their key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One request at a time: [`LockKind::Exclusive`].
    Exclusive,
    /// One request at a time, first come first served: [`LockKind::Fair`].
    Fair,
    /// Safe methods (GET, HEAD, OPTIONS) share the key as readers; the others take it
    /// alone, as writers.
    ReadWrite,
}

impl Config {
    pub(crate) fn locks(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }

    /// The kind of lock a request with `method` takes.
    pub(crate) fn kind(&self, method: &Method) -> LockKind {
        match self.mode {
            Mode::Exclusive => LockKind::Exclusive,
            Mode::Fair => LockKind::Fair,
            Mode::ReadWrite if is_safe(method) => LockKind::Read,
            Mode::ReadWrite => LockKind::Write,
        }
    }

    pub(crate) fn reject(&self, rejection: LockRejection) -> Response {
        match &self.error_handler {
            Some(handler) => handler(rejection),
            None => rejection.into_response(),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("locker", &self.locker)
            .field("extractor", &self.extractor)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .field("contended", &self.contended)
            .field("methods", &self.methods)
            .field("hold_until_body_end", &self.hold_until_body_end)
            .field("mode", &self.mode)
            .field("error_handler", &self.error_handler.as_ref().map(|_| ".."))
            .field("label", &self.label)
            .finish()
    }
}

/// Whether `method` is safe: it only reads, so its requests share a read-write lock.
fn is_safe(method: &Method) -> bool {
    [Method::GET, Method::HEAD, Method::OPTIONS].contains(method)
}
