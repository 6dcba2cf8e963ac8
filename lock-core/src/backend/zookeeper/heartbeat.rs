//! When a session was last heard from, and its end once it was not heard from for its
//! timeout.
//!
//! The server expires a session its timeout after it last heard from the client, and it
//! hears from the client no earlier than the client sends. A request sent at the local
//! instant `t` that the server answered so puts the session's expiry after `t` plus the
//! timeout. Past that instant, it may have expired, whatever the connection's state says
//! (as after this process was paused, or while the server does not answer), and the
//! session is ended on this side: its holds are no longer claimed.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

/// How many requests a session sends within each timeout to be heard from.
const BEATS_PER_TIMEOUT: u32 = 5;

/// When a session was last heard from, and for how long that keeps it.
#[derive(Debug, Clone)]
pub(super) struct Heard {
    last: watch::Receiver<Instant>,
    timeout: Duration,
}

impl Heard {
    /// Until when the server cannot have expired the session.
    pub(super) fn until(&self) -> Instant {
        *self.last.borrow() + self.timeout
    }

    /// Whether the server cannot have expired the session yet.
    pub(super) fn is_fresh(&self) -> bool {
        Instant::now() < self.until()
    }

    /// Resolves once the session was not heard from for its timeout.
    async fn stale(mut self) {
        while self.is_fresh() {
            let until = self.until();
            tokio::select! {
                () = sleep_until(until) => {}
                changed = self.last.changed() => {
                    if changed.is_err() {
                        return sleep_until(until).await;
                    }
                }
            }
        }
    }
}

/// Starts hearing from the session of `client`, which the server answered for a request
/// sent at `since` (its connect), until `ended` is cancelled; cancels it once the
/// session was not heard from for its timeout.
pub(super) fn start(client: &Arc<zk::Client>, since: Instant, ended: CancellationToken) -> Heard {
    let (last, heard) = watch::channel(since);
    let heard = Heard {
        last: heard,
        timeout: client.session_timeout(),
    };
    tokio::spawn(beat(Arc::downgrade(client), last, heard.clone(), ended));
    heard
}

/// Asks the server about the session's root node a few times in each timeout and
/// records when each answered request was sent; ends the session once it was not heard
/// from for its timeout. Keeps no hold on the client between requests, so that the
/// session still closes once the store is done with it.
async fn beat(
    client: Weak<zk::Client>,
    last: watch::Sender<Instant>,
    heard: Heard,
    ended: CancellationToken,
) {
    let interval = heard.timeout / BEATS_PER_TIMEOUT;
    let beats = async {
        loop {
            let sent = Instant::now();
            let Some(client) = client.upgrade() else {
                return;
            };
            if client.check_stat("/").await.is_ok() {
                last.send_replace(sent);
            }
            drop(client);
            sleep_until(sent + interval).await;
        }
    };
    tokio::select! {
        () = beats => {}
        () = heard.stale() => {
            tracing::warn!("zookeeper session not heard from for its timeout: ended");
        }
        () = ended.cancelled() => {}
    }
    ended.cancel();
}
