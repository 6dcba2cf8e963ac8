//! A tower layer for axum routers that runs each request under a distributed lock named
//! from the request: its path parameters, query string or headers.
//!
//! The lock is taken through a `lock_core::Locker`, so it lives in whichever store that
//! `Locker` keeps its locks in: this process's memory, Redis (one server, Sentinel, a
//! Cluster, RedLock), ZooKeeper, PostgreSQL, MySQL or MariaDB, or a store of your own.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::time::Duration;
//!
//! use axum::body::Body;
//! use axum::extract::{Extension, Path};
//! use axum::routing::post;
//! use axum::Router;
//! use http::{Request, StatusCode};
//! use lock_axum::{HeldLock, LockLayer};
//! use lock_core::Locker;
//! use tower::ServiceExt;
//!
//! async fn deposit(Path(id): Path<u64>, Extension(lock): Extension<HeldLock>) -> String {
//!     // runs while this replica holds "balance:{id}"; no other request for the same
//!     // account, on any replica sharing the lock store, runs at the same time
//!     format!("deposited to {id} under {} (token {})", lock.key(), lock.fencing_token())
//! }
//!
//! // `Locker::connect(url).await?` in production, with the url of a Redis server, a
//! // ZooKeeper ensemble, a PostgreSQL or a MySQL database
//! let locker = Locker::in_memory();
//! let app = Router::new()
//!     .route("/accounts/{id}/deposit", post(deposit))
//!     .route_layer(LockLayer::new(locker.clone(), "balance:{id}").wait(Duration::from_secs(2)));
//!
//! let request = Request::post("/accounts/42/deposit").body(Body::empty()).unwrap();
//! let response = app.clone().oneshot(request).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//!
//! // while someone else holds the account, the request waits, then gets 423 Locked
//! let held = locker.lock("balance:42").await.unwrap();
//! let app = Router::new()
//!     .route("/accounts/{id}/deposit", post(deposit))
//!     .route_layer(LockLayer::new(locker.clone(), "balance:{id}").wait(Duration::ZERO));
//! let request = Request::post("/accounts/42/deposit").body(Body::empty()).unwrap();
//! let response = tokio::spawn(app.oneshot(request)).await.unwrap().unwrap();
//! assert_eq!(response.status(), StatusCode::LOCKED);
//! assert!(response.headers().contains_key("retry-after"));
//! # drop(held);
//! # }
//! ```
//!
//! # Readers and writers
//!
//! [`LockLayer::read_write`] takes a read-write lock: GET, HEAD and OPTIONS requests share
//! its read side, the others take its write side alone, so reads of one resource run
//! together and never see a write halfway. See its docs for an example.
//!
//! # Naming the lock
//!
//! [`LockLayer::new`] takes a [`KeyTemplate`]: literal text with `{name}` (a path
//! parameter, spelled as in the route), `{query.name}` and `{header.name}` placeholders,
//! each a whole `:`-separated segment (`balance:{header.x-tenant}:{id}`). The template is
//! parsed once, when the layer is built; a malformed one panics there (or is an error from
//! [`LockLayer::try_new`]). Anything else, such as a key taken from the authenticated user
//! or a choice not to lock some requests, is a [`KeyExtractor`]: a type of your own, or a
//! closure through [`key_fn`]. Request values are checked, never trusted, and written
//! escaped (`:` as `%3A`, `%` as `%25`), so that no value can pass for part of another key
//! (see [`KeyTemplate`]); the complete name goes through lock-core's key validation before
//! anything is sent to the store.
//!
//! # Why `route_layer`
//!
//! axum finds the path parameters when it routes a request, and stores them in the
//! request's extensions for the matched route's services. [`Router::route_layer`] wraps
//! exactly the routes added so far, so the layer runs after routing, sees the parameters,
//! and runs only for requests that matched one of those routes. [`Router::layer`] also
//! wraps each route (so parameters are there too) but in addition the router's fallback:
//! a request for an unknown path would then be answered `400` (its placeholder has no
//! value) instead of `404`, or, with a template without path parameters, would take a
//! lock for nothing. Layering the whole server (outside the router, e.g. with
//! `ServiceBuilder` around `axum::serve`) runs before routing: no path parameters exist
//! there, so every `{name}` placeholder is missing. Nested routers work: the parameters
//! of the outer routes are visible as well.
//!
//! # How path parameters are read
//!
//! [`KeyExtractor::extract`] is synchronous and sees the request head
//! ([`http::request::Parts`]). Before calling it, the layer reads the parameters axum
//! stored with [`axum::extract::RawPathParams`] (an extractor that only reads the
//! extensions, so awaiting it completes at once), and makes them available to the
//! extractor as [`PathParams`] for the duration of the call ([`PathParams::of`]).
//!
//! # Answers
//!
//! | situation | answer |
//! |-----------|--------|
//! | a method that does not lock (GET, HEAD, OPTIONS, … by default; see [`LockLayer::methods`]) | the handler runs unlocked |
//! | the lock is taken within the wait | the handler runs; it can take [`Extension<HeldLock>`](HeldLock) |
//! | the lock stayed held for the whole wait | `423 Locked` (or [`LockLayer::on_contended`]), with `Retry-After` where the store knows the holder's remaining lease (memory, Redis): that lease, in seconds rounded up |
//! | the store unreachable or failing, or without the lock's kind | `503 Service Unavailable`; the handler does not run |
//! | a placeholder without a value, or a value that is refused | `400 Bad Request` with a one-line plain-text reason |
//!
//! Each is a [`LockRejection`]; [`LockLayer::error_handler`] replaces the response.
//!
//! # How long the lock is held
//!
//! From before the handler runs until its response is produced, or, with
//! [`LockLayer::hold_until_body_end`], until the response body has been sent. The guard
//! lives in the [`ResponseFuture`]: when a client disconnects, hyper drops the request's
//! future, the guard is dropped with it, and lock-core releases the lock at once.
//! While the request runs, lock-core's watchdog renews the lease; should renewal fail until
//! the lease runs out, the handler is not cancelled: pass [`HeldLock::fencing_token`] to
//! storage that refuses stale writers if that matters.
//!
//! lock-core's reentrancy is per tokio task: a handler that takes the same lock again by
//! hand gets it at once. `axum::serve` and hyper run each connection (HTTP/1) or stream
//! (HTTP/2) in a task of its own, so two requests never share a task; do not drive
//! several requests' futures from one task (e.g. with `join!`) through this layer.
//!
//! [`Router::route_layer`]: axum::Router::route_layer
//! [`Router::layer`]: axum::Router::layer
#![deny(missing_docs)]

mod config;
mod future;
mod key;
mod layer;
mod rejection;
mod service;

/// The examples of this crate's README, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use future::ResponseFuture;
pub use key::{KeyExtractor, KeyFn, KeyTemplate, PathParams, TemplateError, key_fn};
#[allow(deprecated, reason = "the old name keeps working")]
pub use layer::DEFAULT_WAIT;
pub use layer::{DEFAULT_REQUEST_WAIT, LockLayer};
pub use rejection::LockRejection;
pub use service::{HeldLock, LockService};
