//! The response future, and the body that can carry the lock to its end.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::BoxError;
use axum::body::{Body, Bytes};
use axum::response::Response;
use http_body::{Frame, SizeHint};
use lock_core::LockGuard;
use pin_project_lite::pin_project;

/// What the acquisition step hands on: the inner service's future and the guard (none for
/// a request the extractor left unlocked).
pub(crate) type Acquired<F> = (F, Option<LockGuard>);

type AcquireFuture<F> = Pin<Box<dyn Future<Output = Result<Acquired<F>, Response>> + Send>>;

pin_project! {
    /// The response future of [`LockService`](crate::LockService).
    ///
    /// It first takes the lock (a boxed future), then drives the inner service's future
    /// in place, holding the guard. Dropping it at any point (the client went away)
    /// drops the guard, which releases the lock at once.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
        hold_until_body_end: bool,
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
            guard: Option<LockGuard>,
        },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn acquiring(acquire: AcquireFuture<F>, hold_until_body_end: bool) -> Self {
        ResponseFuture {
            state: State::Acquiring { acquire },
            hold_until_body_end,
        }
    }

    pub(crate) fn running(future: F, guard: Option<LockGuard>, hold_until_body_end: bool) -> Self {
        ResponseFuture {
            state: State::Running { future, guard },
            hold_until_body_end,
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Acquiring { .. } => "acquiring",
            State::Running { guard: Some(_), .. } => "running locked",
            State::Running { guard: None, .. } => "running unlocked",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .field("hold_until_body_end", &self.hold_until_body_end)
            .finish()
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
                    Ok((future, guard)) => this.state.set(State::Running { future, guard }),
                    Err(rejection) => return Poll::Ready(Ok(rejection)),
                },
                StateProj::Running { future, guard } => {
                    let result = ready!(future.poll(cx));
                    let guard = guard.take();
                    return Poll::Ready(result.map(|response| match guard {
                        Some(guard) if *this.hold_until_body_end => {
                            response.map(|inner| Body::new(GuardedBody::new(inner, guard)))
                        }
                        // dropping the guard releases the lock
                        _ => response.map(Body::new),
                    }));
                }
            }
        }
    }
}

pin_project! {
    /// A response body that keeps the lock until its last frame (or an error) has been
    /// polled, or until it is dropped.
    struct GuardedBody<B> {
        #[pin]
        inner: B,
        guard: Option<LockGuard>,
    }
}

impl<B> GuardedBody<B> {
    fn new(inner: B, guard: LockGuard) -> Self {
        GuardedBody {
            inner,
            guard: Some(guard),
        }
    }
}

impl<B: http_body::Body> http_body::Body for GuardedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) || this.inner.is_end_stream() {
            this.guard.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
