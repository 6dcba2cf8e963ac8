//! The pub/sub side of a `Locker`: one task owning one dedicated pub/sub connection,
//! subscribed to this `Locker`'s channel of every lock that has local waiters (or had,
//! until a moment ago: see [`LINGER`]).
//!
//! It starts with the `Locker`'s first wait and serves it from then on: it connects when
//! there is something to wait for and keeps the connection for the next wait, reconnects
//! with backoff, and when the connection drops it wakes every waiter, since wake-ups may
//! have been missed. Each
//! lock's line knows whether its wake-ups are being delivered ([`Listening`]): a waiter
//! waits until they are before its next attempt, and polls more often while they are not.
//! Own code rather than redis-rs's resubscribing connection: waiters must know when a
//! channel is subscribed again, which that connection does not say. The connection itself,
//! to one server or sharded over a Redis Cluster, is a [`Subscriber`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::RedisResult;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::connection::Endpoint;
use super::fencing::in_epoch;
use super::keys::Channels;
use super::subscriber::{Event, Subscriber};
use crate::backend::wait::handover::FairHandover;
use crate::backend::wait::line::{Line, Lines};

/// How long a lock's channel stays subscribed after its last local waiter left: a lock
/// contended again soon after needs no new subscription, nor the extra attempt that
/// follows one.
pub(super) const LINGER: Duration = Duration::from_secs(1);

/// The message of a release that wakes every waiter of every `Locker` (`lockers.lua`).
const WAKE_ALL: &[u8] = b"all";
/// After a write or the last read: wake every waiter but the writers (`lockers.lua`).
const WAKE_READERS: &[u8] = b"readers";
/// After a write or the last read, to the `Locker` of the writer that has waited longest:
/// the prefix of the message naming its token (`lockers.lua`).
const WAKE_WRITER: &[u8] = b"writer ";

/// Whether a lock's wake-ups are being delivered (its channel is subscribed).
#[derive(Debug, Default)]
pub(crate) struct Listening {
    ready: AtomicBool,
    changed: Notify,
}

impl Listening {
    pub(super) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Waits until the lock's wake-ups are being delivered.
    pub(super) async fn until_ready(&self) {
        loop {
            let changed = self.changed.notified();
            if self.is_ready() {
                return;
            }
            changed.await;
        }
    }
}

/// What to do with a wake-up that found no waiter here: relay it to the next `Locker`.
pub(super) type Relay = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Debug)]
enum HubCmd {
    Subscribe(Arc<str>),
    /// The last local waiter left: unsubscribe after [`LINGER`] unless one comes back.
    Idle(Arc<str>),
}

/// The `Locker`'s side of the hub: starts its task, and tells it which locks to listen
/// for.
pub(super) struct Hub {
    endpoint: Endpoint,
    lines: Arc<Lines<Listening>>,
    connect_timeout: Duration,
    channels: Channels,
    relay: Relay,
    tx: Mutex<Option<mpsc::UnboundedSender<HubCmd>>>,
}

impl Hub {
    pub(super) fn new(
        endpoint: Endpoint,
        lines: Arc<Lines<Listening>>,
        connect_timeout: Duration,
        channels: Channels,
        relay: Relay,
    ) -> Self {
        Self {
            endpoint,
            lines,
            connect_timeout,
            channels,
            relay,
            tx: Mutex::new(None),
        }
    }

    /// Starts the hub task if it is not running (first use, or its runtime is gone).
    pub(super) fn ensure_running(&self) {
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if tx.as_ref().is_some_and(|tx| !tx.is_closed()) {
            return;
        }
        let (new_tx, rx) = mpsc::unbounded_channel();
        // Locks that already have lines (from a hub that died with its runtime).
        for (key, busy) in self.lines.keys() {
            let _ = new_tx.send(HubCmd::Subscribe(key.clone()));
            if !busy {
                let _ = new_tx.send(HubCmd::Idle(key));
            }
        }
        let task = Task {
            endpoint: self.endpoint.clone(),
            lines: self.lines.clone(),
            connect_timeout: self.connect_timeout,
            channels: self.channels.clone(),
            relay: self.relay.clone(),
        };
        tokio::spawn(task.run(rx));
        *tx = Some(new_tx);
    }

    /// Ends the hub task, which drops its pub/sub connection. The next wait starts
    /// another.
    pub(super) fn stop(&self) {
        *self.tx.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// A pub/sub connection of its own to the hub's server, subscribed to `channel` alone
    /// (sharded on a Cluster): for news that the hub's waiters do not share.
    pub(super) async fn subscriber_apart(&self, channel: String) -> RedisResult<Subscriber> {
        Subscriber::connect(&self.endpoint, &[channel], self.connect_timeout).await
    }

    /// Listen for the lock `key`'s wake-ups.
    pub(super) fn subscribe(&self, key: Arc<str>) {
        self.send(HubCmd::Subscribe(key));
    }

    /// The last local waiter of `key` left.
    pub(super) fn idle(&self, key: Arc<str>) {
        self.send(HubCmd::Idle(key));
    }

    fn send(&self, cmd: HubCmd) {
        if let Some(tx) = &*self.tx.lock().unwrap_or_else(|e| e.into_inner()) {
            // A closed hub is restarted, with every current key, by the next waiter.
            let _ = tx.send(cmd);
        }
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

enum HubEvent {
    Cmd(Option<HubCmd>),
    Pushed(Event),
    Retry,
    Lingered,
}

/// The hub task's state.
struct Task {
    endpoint: Endpoint,
    lines: Arc<Lines<Listening>>,
    connect_timeout: Duration,
    channels: Channels,
    relay: Relay,
}

impl Task {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<HubCmd>) {
        const MIN_BACKOFF: Duration = Duration::from_millis(50);
        let mut desired: HashSet<Arc<str>> = HashSet::new();
        // Idle locks in the order they fell idle, and when each last did: an entry whose
        // time is not the latest is stale.
        let mut idle: VecDeque<(Instant, Arc<str>)> = VecDeque::new();
        let mut idle_since: HashMap<Arc<str>, Instant> = HashMap::new();
        let mut subscriber: Option<Subscriber> = None;
        let mut backoff = MIN_BACKOFF;
        loop {
            if subscriber.is_none() && !desired.is_empty() {
                let channels: Vec<String> = desired.iter().map(|k| self.channels.of(k)).collect();
                match Subscriber::connect(&self.endpoint, &channels, self.connect_timeout).await {
                    Ok(connected) => {
                        tracing::debug!(channels = desired.len(), "pub/sub connected");
                        for key in &desired {
                            self.set_ready(key, true);
                        }
                        subscriber = Some(connected);
                        backoff = MIN_BACKOFF;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in = ?backoff, "pub/sub connection failed; waiters poll until it is back");
                    }
                }
            }
            let event = tokio::select! {
                cmd = rx.recv() => HubEvent::Cmd(cmd),
                Some(event) = async { Some(subscriber.as_mut()?.next().await) }, if subscriber.is_some() => HubEvent::Pushed(event),
                () = tokio::time::sleep(backoff), if subscriber.is_none() && !desired.is_empty() => HubEvent::Retry,
                () = lingered(idle.front().map(|(at, _)| *at)), if !idle.is_empty() => HubEvent::Lingered,
            };
            match event {
                HubEvent::Cmd(None) => return,
                HubEvent::Cmd(Some(HubCmd::Subscribe(key))) => {
                    self.subscribe(&mut subscriber, &key).await;
                    desired.insert(key);
                }
                HubEvent::Cmd(Some(HubCmd::Idle(key))) => {
                    let now = Instant::now();
                    idle_since.insert(key.clone(), now);
                    idle.push_back((now, key));
                }
                HubEvent::Lingered => {
                    let now = Instant::now();
                    while idle
                        .front()
                        .is_some_and(|(since, _)| *since + LINGER <= now)
                    {
                        let Some((since, key)) = idle.pop_front() else {
                            break;
                        };
                        if idle_since.get(&key) != Some(&since) {
                            continue;
                        }
                        idle_since.remove(&key);
                        // A waiter that came back keeps the subscription.
                        if !self.lines.remove_if_idle(&key) {
                            continue;
                        }
                        desired.remove(&key);
                        if let Some(s) = &mut subscriber
                            && let Err(e) = s.unsubscribe(&self.channels.of(&key)).await
                        {
                            tracing::warn!(error = %e, "pub/sub unsubscribe failed; reconnecting");
                            subscriber = None;
                            self.wake_all_unready();
                        }
                    }
                }
                HubEvent::Pushed(Event::Message(msg)) => self.deliver(&msg),
                HubEvent::Pushed(Event::Unsubscribed(channel)) => {
                    // Still wanted: a cluster node gave up the lock's slot. Its waiters may
                    // have missed a wake-up; subscribe where the slot went.
                    let key = self.channels.key_of(&channel);
                    if let Some(key) = key.and_then(|key| desired.get(key)).cloned() {
                        self.set_ready(&key, false);
                        self.lines.wake_all(&key);
                        self.subscribe(&mut subscriber, &key).await;
                    }
                }
                HubEvent::Pushed(Event::Lost) => {
                    tracing::warn!("pub/sub connection lost; reconnecting");
                    subscriber = None;
                    self.wake_all_unready();
                }
                HubEvent::Retry => backoff = (backoff * 2).min(Duration::from_secs(2)),
            }
        }
    }

    /// A message on one of this `Locker`'s channels: a fair hand-over to one of its
    /// waiters, a release that wakes every waiter (`all`: every `Locker` got one), one after
    /// a write (`readers`, and `writer <token>` to the writer's `Locker`), or one
    /// that wakes one (relayed on if none waits here any more).
    fn deliver(&self, msg: &redis::Msg) {
        let Some(key) = self.channels.key_of(msg.get_channel_name()) else {
            return;
        };
        let payload = msg.get_payload_bytes();
        if payload == WAKE_ALL {
            self.lines.wake_all(key);
            return;
        }
        if payload == WAKE_READERS {
            self.lines.wake_after_write(key, None);
            return;
        }
        if let Some(token) = payload.strip_prefix(WAKE_WRITER) {
            let token = std::str::from_utf8(token).ok();
            self.lines.wake_after_write(key, token);
            return;
        }
        match fair_handover(payload) {
            Some((token, mut handover)) => {
                // Drawn by a release on the master, of the newest epoch known.
                handover.fence = in_epoch(self.endpoint.epoch(), handover.fence);
                tracing::debug!(
                    key,
                    fence = handover.fence,
                    "fair lock handed over to the next in line"
                );
                self.lines.deliver(key, token, handover);
            }
            None => {
                if !self.lines.wake_one(key) {
                    (self.relay)(key);
                }
            }
        }
    }

    /// Subscribes to the channel of `key` on the connection, if one is open; one that
    /// fails it is dropped, to be opened again.
    async fn subscribe(&self, subscriber: &mut Option<Subscriber>, key: &str) {
        let Some(s) = subscriber else { return };
        match s.subscribe(&self.channels.of(key)).await {
            Ok(()) => self.set_ready(key, true),
            Err(e) => {
                tracing::warn!(error = %e, "pub/sub subscribe failed; reconnecting");
                *subscriber = None;
                self.wake_all_unready();
            }
        }
    }

    fn set_ready(&self, key: &str, ready: bool) {
        if let Some(line) = self.lines.get(key) {
            line.listening.set_ready(ready);
        }
    }

    /// Wakes every waiter of every lock, and marks them not listening: wake-ups may have
    /// been missed (the pub/sub connection dropped).
    fn wake_all_unready(&self) {
        self.lines.each(|line: &Line<Listening>| {
            line.listening.set_ready(false);
            line.wake_all();
        });
    }
}

/// The hand-over a fair release names in its message, `"<token> <fence> <server us>"`;
/// `None` for a release that freed the lock (an empty message).
fn fair_handover(payload: &[u8]) -> Option<(&str, FairHandover)> {
    let mut parts = std::str::from_utf8(payload).ok()?.split(' ');
    let (token, fence, at_us) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let handover = FairHandover {
        fence: fence.parse().ok()?,
        at_us: at_us.parse().ok()?,
    };
    Some((token, handover))
}

/// Resolves when the lock that fell idle at `since` has lingered long enough.
async fn lingered(since: Option<Instant>) {
    if let Some(since) = since {
        tokio::time::sleep_until(since + LINGER).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_handover_messages_name_their_waiter() {
        let handover = FairHandover {
            fence: 1_795_403_503_165_794,
            at_us: 1_795_403_503_519_585,
        };
        assert_eq!(
            fair_handover(b"6f1c 1795403503165794 1795403503519585"),
            Some(("6f1c", handover))
        );
        for freed in [&b""[..], b"6f1c", b"6f1c 1 x", b"6f1c 1 2 3", b"\xff 1 2"] {
            assert_eq!(fair_handover(freed), None, "{freed:?}");
        }
    }
}
