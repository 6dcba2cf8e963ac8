//! lock-core's `tracing` spans and events: each acquisition, renewal, release and
//! hand-over runs in a span of its own, and what happens in it (acquired after a wait,
//! timed out, handed over, lost) is an event there.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::{LockError, LockOptions, Locker};
use lock_tests::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

const MS: Duration = Duration::from_millis(1);

/// What was traced, one line per span opened (`span NAME field=value ... in PARENT`) and
/// per event (`MESSAGE field=value ... in SPAN`).
#[derive(Clone, Default)]
struct Trace(Arc<Mutex<Vec<String>>>);

impl Trace {
    fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn push(&self, line: String) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
    }

    /// Panics unless some line starts with `start` and holds each of `parts`.
    #[track_caller]
    fn expect(&self, start: &str, parts: &[&str]) {
        let lines = self.lines();
        let found = lines
            .iter()
            .any(|l| l.starts_with(start) && parts.iter().all(|p| l.contains(p)));
        assert!(
            found,
            "no line `{start} .. {parts:?}` in:\n{}",
            lines.join("\n")
        );
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Trace {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let parent = ctx.span(id).and_then(|s| s.parent());
        let parent = parent.as_ref().map_or("-", |p| p.name());
        let name = attrs.metadata().name();
        self.push(format!("span {name}{} in {parent}", fields.rest));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let span = ctx.event_span(event).map_or("-", |s| s.name());
        self.push(format!("{}{} in {span}", fields.message, fields.rest));
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push_str(&format!(" {}={value:?}", field.name()));
        }
    }
}

/// Runs `body` on a runtime of its own (its time paused when `paused`), tracing
/// everything at debug level and above.
fn traced(paused: bool, body: impl Future<Output = ()>) -> Trace {
    let trace = Trace::default();
    let subscriber = tracing_subscriber::registry().with(
        trace
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
    );
    tracing::subscriber::with_default(subscriber, || {
        let mut runtime = tokio::runtime::Builder::new_current_thread();
        runtime.enable_all().start_paused(paused);
        runtime.build().unwrap().block_on(body);
    });
    trace
}

#[test]
fn acquisition_renewal_timeout_release_and_loss_are_traced() {
    let trace = traced(true, async {
        let locker = Locker::in_memory();
        let lease = LockOptions::new().lease(300 * MS);
        let guard = locker
            .lock_with("job:7", lease.label("job:{id}"))
            .await
            .unwrap();
        // Renewed a third of a lease later.
        tokio::time::sleep(150 * MS).await;
        let other = locker.clone();
        let timed_out = tokio::spawn(async move {
            other
                .lock_with("job:7", LockOptions::new().wait(50 * MS))
                .await
        });
        assert!(matches!(
            timed_out.await.unwrap(),
            Err(LockError::Timeout { .. })
        ));
        guard.release().await.unwrap();

        let unwatched = LockOptions::new().lease(100 * MS).watchdog(false);
        let lost = locker.lock_with("job:8", unwatched).await.unwrap();
        lost.lost().await;
    });
    trace.expect(
        "span lock_acquire",
        &["key=job:7", "kind=Exclusive", "lock=\"job:{id}\""],
    );
    trace.expect("lock acquired", &["waited=", "in lock_acquire"]);
    trace.expect("span lock_renew", &["leases=1"]);
    trace.expect("lock wait timed out", &["waited=50ms", "in lock_acquire"]);
    trace.expect("span lock_release", &["key=job:7", "fence="]);
    trace.expect("lock released", &["in lock_release"]);
    trace.expect("lock lost", &["key=job:8"]);
}

#[test]
fn a_fair_hand_over_is_traced_in_the_release() {
    let trace = traced(true, async {
        let locker = Locker::in_memory();
        let fair = LockOptions::new().fair(true);
        let guard = locker.lock_with("queue:1", fair).await.unwrap();
        let next = tokio::spawn({
            let locker = locker.clone();
            async move { locker.lock_with("queue:1", fair).await.map(drop) }
        });
        tokio::time::sleep(10 * MS).await;
        guard.release().await.unwrap();
        next.await.unwrap().unwrap();
    });
    trace.expect("lock handed over to the next in line", &["in lock_release"]);
}

#[test]
fn a_local_hand_over_on_redis_is_a_span_of_the_release() {
    let server = RedisServer::spawn();
    let trace = traced(false, async {
        let locker = Locker::connect(&server.url()).await.unwrap();
        let guard = locker.lock("balance:1").await.unwrap();
        let waiter = tokio::spawn({
            let locker = locker.clone();
            async move { locker.lock("balance:1").await.map(drop) }
        });
        lock_tests::eventually(Duration::from_secs(5), "the waiter to wait", || {
            std::future::ready(server.calls("evalsha") >= 2)
        })
        .await;
        guard.release().await.unwrap();
        waiter.await.unwrap().unwrap();
    });
    trace.expect("span lock_handover", &["in lock_release"]);
    trace.expect(
        "lock handed over to a local waiter",
        &["fence=", "in lock_handover"],
    );
}
