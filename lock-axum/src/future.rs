//! The response future, and the body that can carry the lock to its end.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::BoxError;
use axum::body::{Body, Bytes};
use axum::response::Response;
use http_body::{Frame, SizeHint};
use lock_core::LockGuard;
use pin_project_lite::pin_project;

use crate::config::Config;
use crate::rejection::LockRejection;

/// What the acquisition step hands on: the inner service's future and the guard (none for
/// a request the extractor left unlocked).
pub(crate) type Acquired<F> = (F, Option<LockGuard>);

type AcquireFuture<F> = Pin<Box<dyn Future<Output = Result<Acquired<F>, Response>> + Send>>;

/// Resolves when the held lock's lease is lost.
type LostSignal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The guard, and the signal of its loss.
struct Held {
    guard: LockGuard,
    lost: LostSignal,
}

impl Held {
    fn new(guard: LockGuard) -> Self {
        let lost = Box::pin(guard.lost());
        Held { guard, lost }
    }
}

pin_project! {
    /// The response future of [`LockService`](crate::LockService).
    ///
    /// It first takes the lock (a boxed future), then drives the inner service's future
    /// in place, holding the guard. Dropping it at any point (the client went away)
    /// drops the guard, which releases the lock at once. If the lease is lost while the
    /// handler runs, the handler's future is dropped and the answer is
    /// [`LockRejection::Lost`]: no handler runs on without its lock.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
        config: Arc<Config>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Acquiring {
            acquire: AcquireFuture<F>,
        },
        Running {
            #[pin]
            future: F,
            held: Option<Held>,
        },
        Done,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn acquiring(acquire: AcquireFuture<F>, config: Arc<Config>) -> Self {
        ResponseFuture {
            state: State::Acquiring { acquire },
            config,
        }
    }

    pub(crate) fn unlocked(future: F, config: Arc<Config>) -> Self {
        ResponseFuture {
            state: State::Running { future, held: None },
            config,
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Acquiring { .. } => "acquiring",
            State::Running { held: Some(_), .. } => "running locked",
            State::Running { held: None, .. } => "running unlocked",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Acquiring { acquire } => match ready!(acquire.as_mut().poll(cx)) {
                    Ok((future, guard)) => this.state.set(State::Running {
                        future,
                        held: guard.map(Held::new),
                    }),
                    Err(rejection) => {
                        this.state.set(State::Done);
                        return Poll::Ready(Ok(rejection));
                    }
                },
                StateProj::Running { future, held } => {
                    if let Some(h) = held
                        && h.lost.as_mut().poll(cx).is_ready()
                    {
                        let key = h.guard.key().to_owned();
                        // drops the handler's future and the guard
                        this.state.set(State::Done);
                        return Poll::Ready(Ok(this.config.reject(LockRejection::Lost { key })));
                    }
                    let result = ready!(future.poll(cx));
                    let held = held.take();
                    let hold_body = this.config.hold_until_body_end;
                    this.state.set(State::Done);
                    return Poll::Ready(result.map(|response| match held {
                        Some(held) if hold_body => {
                            response.map(|inner| Body::new(GuardedBody::new(inner, held)))
                        }
                        // dropping the guard releases the lock
                        _ => response.map(Body::new),
                    }));
                }
                StateProj::Done => panic!("ResponseFuture polled after it completed"),
            }
        }
    }
}

pin_project! {
    /// A response body that keeps the lock until its last frame (or an error) has been
    /// polled, or until it is dropped. If the lease is lost first, the body ends with an
    /// error, so the client sees a broken response rather than one finished unlocked.
    struct GuardedBody<B> {
        #[pin]
        inner: B,
        held: Option<Held>,
    }
}

impl<B> GuardedBody<B> {
    fn new(inner: B, held: Held) -> Self {
        GuardedBody {
            inner,
            held: Some(held),
        }
    }
}

impl<B> http_body::Body for GuardedBody<B>
where
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        if let Some(h) = this.held.as_mut()
            && h.lost.as_mut().poll(cx).is_ready()
        {
            let key = h.guard.key().to_owned();
            this.held.take();
            return Poll::Ready(Some(Err(format!(
                "the lock {key:?} was lost while the response body was sent"
            )
            .into())));
        }
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) || this.inner.is_end_stream() {
            this.held.take();
        }
        Poll::Ready(frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
