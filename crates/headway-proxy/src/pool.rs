//! Backend connection reuse ("TCP multiplexing"): a pool of idle HTTP/1.1 keep-alive
//! connections per server, shared by every client connection.
//!
//! A request takes the most recently used idle connection ([`Pool::checkout`], LIFO: it is the
//! one least likely to have been closed by the server's own idle timeout) or opens a new one;
//! when the response body has been read to its end, the connection goes back
//! ([`Pool::checkin`]) unless the server asked to close it, the pool is full, or the server's
//! pooling is off. Idle connections older than the idle timeout are dropped when met. The pool
//! counts connections opened and requests sent on reused ones, which is the reuse ratio the
//! admin API reports.
//!
//! Cancel safety: [`Pool::checkout`] may be dropped at any await point; a connection it had
//! popped is then dropped (closed), never returned half-used.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use headway_core::SystemClock;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;

use crate::http::body::ReqBody;
use crate::stats::ServerCounters;

/// Why no connection to a server could be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The TCP connect failed.
    #[error("connect to {addr} failed: {source}")]
    Io {
        /// The server.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The TCP connect took longer than the group's `connect_timeout`.
    #[error("connect to {0} timed out")]
    Timeout(SocketAddr),
    /// The HTTP/1.1 handshake failed.
    #[error("HTTP handshake with {addr} failed: {source}")]
    Handshake {
        /// The server.
        addr: SocketAddr,
        /// The error.
        source: hyper::Error,
    },
}

/// A connection taken from the pool or newly opened.
pub struct Conn {
    /// The request sender.
    pub sender: SendRequest<ReqBody>,
    /// Whether it was reused from the pool.
    pub reused: bool,
}

struct Idle {
    sender: SendRequest<ReqBody>,
    since: Instant,
}

/// The idle connections of one server.
pub struct Pool {
    idle: Mutex<Vec<Idle>>,
    max_idle: AtomicUsize,
    idle_timeout_ms: AtomicU64,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("idle", &self.idle.lock().len())
            .field("max_idle", &self.max_idle.load(Relaxed))
            .finish()
    }
}

impl Pool {
    /// An empty pool keeping at most `max_idle` connections for `idle_timeout`.
    pub fn new(max_idle: usize, idle_timeout: Duration) -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
            max_idle: AtomicUsize::new(max_idle),
            idle_timeout_ms: AtomicU64::new(idle_timeout.as_millis() as u64),
        }
    }

    /// Applies new limits (a reload); excess idle connections are closed.
    pub fn configure(&self, max_idle: usize, idle_timeout: Duration) {
        self.max_idle.store(max_idle, Relaxed);
        self.idle_timeout_ms
            .store(idle_timeout.as_millis() as u64, Relaxed);
        let mut idle = self.idle.lock();
        let keep = idle.len().min(max_idle);
        let excess = idle.len() - keep;
        idle.drain(..excess);
    }

    /// Idle connections now.
    pub fn idle_len(&self) -> usize {
        self.idle.lock().len()
    }

    /// Closes every idle connection (the server was removed or disabled).
    pub fn clear(&self) {
        self.idle.lock().clear();
    }

    /// A ready connection to `addr`: a pooled one if any is alive, else a new one.
    pub async fn checkout(
        &self,
        addr: SocketAddr,
        connect_timeout: Duration,
        counters: &ServerCounters,
    ) -> Result<Conn, ConnectError> {
        let timeout = Duration::from_millis(self.idle_timeout_ms.load(Relaxed));
        loop {
            let popped = self.idle.lock().pop();
            let Some(mut idle) = popped else { break };
            if SystemClock::now().duration_since(idle.since) > timeout || idle.sender.is_closed() {
                continue;
            }
            // The connection task may not yet have seen the end of the previous response;
            // wait for it to be ready (it is, or closes, within microseconds).
            if idle.sender.ready().await.is_ok() {
                counters.reused.inc();
                return Ok(Conn {
                    sender: idle.sender,
                    reused: true,
                });
            }
        }
        let stream = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(ConnectError::Io { addr, source }),
            Err(_) => return Err(ConnectError::Timeout(addr)),
        };
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|source| ConnectError::Handshake { addr, source })?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(server = %addr, error = %e, "server connection ended with an error");
            }
        });
        counters.connections_opened.inc();
        Ok(Conn {
            sender,
            reused: false,
        })
    }

    /// Returns a connection whose last response was read to its end.
    pub fn checkin(&self, sender: SendRequest<ReqBody>) {
        if sender.is_closed() {
            return;
        }
        let max = self.max_idle.load(Relaxed);
        let mut idle = self.idle.lock();
        if idle.len() < max {
            idle.push(Idle {
                sender,
                since: SystemClock::now(),
            });
        }
    }
}
