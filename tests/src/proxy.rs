//! A TCP proxy on a free loopback port whose connections can be cut, or held silent, on
//! demand.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use crate::HarnessError;

/// How long the accept loop sleeps when no client is waiting.
const ACCEPT_POLL: Duration = Duration::from_millis(2);
/// Bytes copied per read.
const BUFFER: usize = 16 * 1024;

/// Forwards every connection made to [`addr`](Self::addr) to a target address, until
/// [`cut`](Self::cut) closes them all at once, wherever their traffic is: a command half
/// sent, a reply half read. New connections are served again right after a cut. Between
/// [`stall`](Self::stall) and [`resume`](Self::resume) it forwards nothing, either way,
/// and closes nothing: a network that went silent.
///
/// ```no_run
/// use lock_tests::{RedisServer, TcpProxy, TestServer};
///
/// let server = RedisServer::spawn();
/// let proxy = TcpProxy::start(server.addr()).unwrap();
/// let url = proxy.url(); // the client under test connects here
/// // ... traffic ...
/// let cut = proxy.cut(); // every client connection of the moment is closed
/// # let _ = (url, cut);
/// ```
///
/// Dropping it stops accepting and closes every connection.
pub struct TcpProxy {
    addr: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Both ends of every connection open now.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    stopped: AtomicBool,
    /// Whether bytes wait instead of going on, and the signal that they may go again.
    stalled: Mutex<bool>,
    resumed: Condvar,
}

impl TcpProxy {
    /// Listens on a free `127.0.0.1` port and forwards what comes in to `target`.
    pub fn start(target: SocketAddr) -> Result<TcpProxy, HarnessError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| HarnessError::io("bind the proxy's port", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("read the proxy's port", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| HarnessError::io("set up the proxy's port", e))?;
        let shared = Arc::new(Shared::default());
        let accepting = Arc::clone(&shared);
        thread::spawn(move || accept(&listener, target, &accepting));
        Ok(TcpProxy {
            addr,
            target,
            shared,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:{port}/`, for a client that should go through the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Closes every connection open now, both towards the client and towards the
    /// target, and returns how many there were.
    pub fn cut(&self) -> usize {
        let open = std::mem::take(&mut *self.shared.lock_open());
        for (client, server) in &open {
            // Either may be closed already; the other is closed regardless.
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
        open.len()
    }

    /// Stops forwarding: what either side sends from now on waits in the proxy, and
    /// nothing is closed, until [`resume`](Self::resume).
    pub fn stall(&self) {
        *self
            .shared
            .stalled
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
    }

    /// Forwards again, what waited first.
    pub fn resume(&self) {
        *self
            .shared
            .stalled
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = false;
        self.shared.resumed.notify_all();
    }
}

impl Shared {
    /// Returns once bytes may go on.
    fn until_flowing(&self) {
        let stalled = self.stalled.lock().unwrap_or_else(PoisonError::into_inner);
        let _flowing = self
            .resumed
            .wait_while(stalled, |stalled| *stalled)
            .unwrap_or_else(PoisonError::into_inner);
    }

    fn lock_open(&self) -> std::sync::MutexGuard<'_, Vec<(TcpStream, TcpStream)>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for TcpProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpProxy")
            .field("addr", &self.addr)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::Relaxed);
        self.resume();
        self.cut();
    }
}

fn accept(listener: &TcpListener, target: SocketAddr, shared: &Arc<Shared>) {
    while !shared.stopped.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                // A target that refuses is passed on as a closed connection.
                let _ = forward(client, target, shared);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            Err(_) => thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Connects to `target` and copies bytes both ways, each way on a thread of its own.
fn forward(client: TcpStream, target: SocketAddr, shared: &Arc<Shared>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect(target)?;
    for stream in [&client, &server] {
        stream.set_nodelay(true)?;
    }
    let mut open = shared.lock_open();
    if shared.stopped.load(Ordering::Relaxed) {
        return Ok(());
    }
    open.push((client.try_clone()?, server.try_clone()?));
    let (client_in, server_out) = (client.try_clone()?, server.try_clone()?);
    let (upstream, downstream) = (Arc::clone(shared), Arc::clone(shared));
    thread::spawn(move || copy(client_in, server_out, &upstream));
    thread::spawn(move || copy(server, client, &downstream));
    Ok(())
}

/// Copies `from` to `to` until either closes, then closes both; holds what it read
/// while the proxy is stalled.
fn copy(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buffer = vec![0; BUFFER];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                shared.until_flowing();
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
