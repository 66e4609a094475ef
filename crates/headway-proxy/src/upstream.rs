//! Connections to servers and their reuse ("TCP multiplexing"): a pool of idle HTTP/1.1
//! keep-alive connections per server, shared by every client connection.
//!
//! A connection is a socket and its read buffer ([`Conn`]); the L7 path writes requests and
//! reads responses on it directly (`crate::http::codec` is the wire format), from the task that
//! serves the client — no extra task and no channel per request.
//!
//! A request takes its worker's most recently used idle connection ([`Pool::checkout`], LIFO: the one
//! least likely to have been closed by the server's idle timeout) or opens a new one. Every
//! idle connection is first checked for a close or stray bytes from the server, so a request
//! is not sent into a connection the server already closed: a non-blocking read that the
//! runtime answers from its readiness state without a system call unless the server did send
//! something (a FIN, a reset, bytes). When the response has been read to its end, the connection goes back
//! ([`Pool::checkin`]) unless the server asked to close it, sent more than the response, the
//! pool is full, or the server's pooling is off. Idle connections older than the idle timeout
//! are dropped when met. The pool counts connections opened and requests sent on reused ones:
//! the reuse ratio the admin API reports.
//!
//! A group with `[server_group.tls]` gives its servers' pools a [`crate::tls::Connector`]
//! ([`Pool::set_tls`]): new connections then make a verified TLS handshake after the TCP
//! connect, both within the connect timeout, and [`Conn::stream`] is TLS.
//!
//! A group with `send_proxy_protocol` starts each new connection with a PROXY header naming
//! the client connection it was opened for ([`ProxyHeader`]), before any TLS; such a
//! connection is reused only for that same client connection's later requests ([`Conn`]
//! remembers whom it names), never for another client's.
//!
//! A group with `protocol = "h2"` speaks HTTP/2 to its servers instead: a connection per server
//! and worker (more when the server's stream limit fills it) carries every request as a stream
//! ([`h2`], [`Pool::h2_sender`]).
//!
//! Cancel safety: [`Pool::checkout`] may be dropped at any await point; a connection it had
//! taken is then closed, never returned half-used.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use headway_core::SystemClock;
use parking_lot::Mutex;
use tokio::net::TcpStream;

use crate::stats::ServerCounters;
use crate::tls::{Connector, ServerStream};
use crate::workers::CacheLine;

pub mod h2;

/// Initial read buffer of a connection.
const READ_BUF: usize = 16 * 1024;

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
    /// The TLS handshake failed (the server's certificate did not verify, for instance).
    #[error("TLS handshake with {addr} failed: {source}")]
    Tls {
        /// The server.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

/// A connection to a server.
#[derive(Debug)]
pub struct Conn {
    /// The socket, or TLS over it.
    pub stream: ServerStream,
    /// Bytes read from the server and not yet consumed.
    pub buf: BytesMut,
    /// Whether it came from the pool.
    pub reused: bool,
    /// Scratch space for parsing response heads (`http::codec::parse_response_head`).
    pub names: crate::http::codec::FieldSpans,
    since: Instant,
    /// The client its PROXY header named, if it began with one.
    proxied: Option<SocketAddr>,
}

/// The PROXY header a new server connection starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader {
    /// Its version.
    pub version: crate::proxy_protocol::Version,
    /// The client.
    pub client: SocketAddr,
    /// Where the client connected to.
    pub destination: SocketAddr,
}

/// The idle connections of one server: a list per worker (see [`crate::workers`]) and one for
/// any other thread. A connection is registered with the reactor of the worker that opened it
/// and is only handed to that worker's requests, so its readiness never has to cross threads.
pub struct Pool {
    idle: Box<[CacheLine<Mutex<Vec<Conn>>>]>,
    tls: arc_swap::ArcSwapOption<Connector>,
    /// The server's DNS name, sent and verified in TLS handshakes (see [`Connector::connect`]).
    host: Option<String>,
    max_idle: AtomicUsize,
    idle_timeout_ms: AtomicU64,
    /// The HTTP/2 connections, for a group that speaks it.
    h2: h2::Slots,
    /// Whether the group speaks HTTP/2 to its servers (the last config said so).
    speaks_h2: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("idle", &self.idle_len())
            .field("max_idle", &self.max_idle.load(Relaxed))
            .finish()
    }
}

impl Pool {
    /// An empty pool for `workers` workers keeping at most `max_idle` connections per worker
    /// for `idle_timeout`.
    pub fn new(max_idle: usize, idle_timeout: Duration, workers: usize) -> Self {
        Pool {
            idle: (0..=workers)
                .map(|_| CacheLine(Mutex::new(Vec::new())))
                .collect(),
            tls: arc_swap::ArcSwapOption::empty(),
            host: None,
            max_idle: AtomicUsize::new(max_idle),
            idle_timeout_ms: AtomicU64::new(idle_timeout.as_millis() as u64),
            h2: h2::Slots::new(workers),
            speaks_h2: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The pool of a server the config names by `host` (a DNS name): TLS handshakes send and
    /// verify it.
    pub fn with_host(mut self, host: Option<String>) -> Self {
        self.host = host;
        self
    }

    /// Applies new limits (a reload); excess idle connections are closed.
    pub fn configure(&self, max_idle: usize, idle_timeout: Duration) {
        self.max_idle.store(max_idle, Relaxed);
        self.idle_timeout_ms
            .store(idle_timeout.as_millis() as u64, Relaxed);
        for list in &self.idle {
            let mut idle = list.0.lock();
            let excess = idle.len().saturating_sub(max_idle);
            idle.drain(..excess);
        }
    }

    /// The calling worker's list (the last one on any other thread).
    fn list(&self) -> &Mutex<Vec<Conn>> {
        let others = self.idle.len() - 1;
        let i = crate::workers::current().filter(|&i| i < others);
        &self.idle[i.unwrap_or(others)].0
    }

    /// Sets how new connections are made: TLS with `tls`, or cleartext. A change closes the
    /// idle connections (made the old way).
    pub fn set_tls(&self, tls: Option<std::sync::Arc<Connector>>) {
        let old = self.tls.swap(tls);
        if old.is_some() || self.tls.load().is_some() {
            self.clear();
        }
    }

    /// Sets which HTTP version new requests use (`h2`: HTTP/2). A change closes the idle
    /// connections and forgets the HTTP/2 ones, which the other version would never use again
    /// (an HTTP/2 connection's pings would keep it open).
    pub fn set_protocol(&self, h2: bool) {
        if self.speaks_h2.swap(h2, Relaxed) != h2 {
            self.clear();
        }
    }

    /// Idle connections now (HTTP/2 connections, which are shared rather than idle, count
    /// as idle).
    pub fn idle_len(&self) -> usize {
        self.idle.iter().map(|l| l.0.lock().len()).sum::<usize>() + self.h2.len()
    }

    /// Closes every idle connection (the server was removed, disabled or went down) and
    /// forgets the HTTP/2 ones (their streams in flight finish).
    pub fn clear(&self) {
        for list in &self.idle {
            list.0.lock().clear();
        }
        self.h2.clear();
    }

    /// A connection to `addr`: a pooled one if any is alive, else a new one. With `proxy`, only
    /// a connection whose PROXY header named the same client is reused, and a new one starts
    /// with the header.
    pub async fn checkout(
        &self,
        addr: SocketAddr,
        connect_timeout: Duration,
        counters: &ServerCounters,
        proxy: Option<ProxyHeader>,
    ) -> Result<Conn, ConnectError> {
        let timeout = Duration::from_millis(self.idle_timeout_ms.load(Relaxed));
        let wanted = proxy.map(|p| p.client);
        loop {
            let popped = {
                let mut idle = self.list().lock();
                // The newest connection with the same header (or none): the last one, unless
                // the group's servers get PROXY headers.
                idle.iter()
                    .rposition(|c| c.proxied == wanted)
                    .map(|i| idle.remove(i))
            };
            let Some(mut c) = popped else { break };
            let idle_for = SystemClock::now().saturating_duration_since(c.since);
            if idle_for > timeout || !c.stream.alive() {
                continue;
            }
            c.reused = true;
            counters.reused.inc();
            return Ok(c);
        }
        // Boxed: the connect and handshake futures were most of this future's size (1.5 KB),
        // which every request's exchange carried and copied, while a pooled connection, the
        // common case, needs neither.
        Box::pin(self.connect(addr, connect_timeout, counters, proxy)).await
    }

    /// A new connection to `addr` (TLS if the pool's servers speak it), starting with `proxy`'s
    /// header.
    async fn connect(
        &self,
        addr: SocketAddr,
        connect_timeout: Duration,
        counters: &ServerCounters,
        proxy: Option<ProxyHeader>,
    ) -> Result<Conn, ConnectError> {
        let mut stream = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await
        {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(ConnectError::Io { addr, source }),
            Err(_) => return Err(ConnectError::Timeout(addr)),
        };
        let _ = stream.set_nodelay(true);
        if let Some(p) = proxy {
            use tokio::io::AsyncWriteExt as _;
            let header = crate::proxy_protocol::encode(p.version, p.client, p.destination);
            if let Err(source) = stream.write_all(&header).await {
                return Err(ConnectError::Io { addr, source });
            }
        }
        let stream = match self.tls.load_full() {
            None => ServerStream::Plain(stream),
            Some(tls) => {
                match tokio::time::timeout(
                    connect_timeout,
                    tls.connect(stream, addr, self.host.as_deref()),
                )
                .await
                {
                    Ok(Ok(s)) => s,
                    Ok(Err(source)) => return Err(ConnectError::Tls { addr, source }),
                    Err(_) => return Err(ConnectError::Timeout(addr)),
                }
            }
        };
        counters.connections_opened.inc();
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(READ_BUF),
            reused: false,
            names: Vec::new(),
            since: SystemClock::now(),
            proxied: proxy.map(|p| p.client),
        })
    }

    /// Returns a connection whose last response was read to its end (`now`) and nothing more.
    pub fn checkin(&self, mut c: Conn, now: Instant) {
        let max = self.max_idle.load(Relaxed);
        if max == 0 || !c.buf.is_empty() {
            return;
        }
        c.since = now;
        let mut idle = self.list().lock();
        if idle.len() >= max && c.proxied.is_some() {
            // Connections that name one client each: the oldest is the one least likely to be
            // asked for again (its client may be gone), so it makes room.
            idle.remove(0);
        }
        if idle.len() < max {
            idle.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn proxied_connections_serve_only_their_client_and_the_oldest_makes_room() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        // Accepts and keeps every connection, with the first bytes it got (its header).
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut b = vec![0u8; 128];
                let n = tokio::io::AsyncReadExt::read(&mut s, &mut b).await.unwrap();
                b.truncate(n);
                tx.send((s, b)).unwrap();
            }
        });
        let counters = ServerCounters::default();
        let pool = Pool::new(2, Duration::from_secs(60), 1);
        let header = |port: u16| ProxyHeader {
            version: crate::proxy_protocol::Version::V1,
            client: SocketAddr::from(([192, 0, 2, 7], port)),
            destination: addr,
        };
        let mut held = Vec::new();
        for port in [1, 2, 3] {
            let c = pool
                .checkout(addr, Duration::from_secs(1), &counters, Some(header(port)))
                .await
                .unwrap();
            let (s, first) = rx.recv().await.unwrap();
            let expect = format!("PROXY TCP4 192.0.2.7 127.0.0.1 {port} {}\r\n", addr.port());
            assert_eq!(String::from_utf8(first).unwrap(), expect);
            held.push(s);
            pool.checkin(c, SystemClock::now());
        }
        // Full at 2: client 1's connection made room for client 3's.
        assert_eq!(pool.idle_len(), 2);
        for (port, reused) in [(3, true), (2, true), (1, false)] {
            let c = pool
                .checkout(addr, Duration::from_secs(1), &counters, Some(header(port)))
                .await
                .unwrap();
            assert_eq!(c.reused, reused, "client port {port}");
            assert_eq!(c.proxied, Some(header(port).client));
            if !reused {
                held.push(rx.recv().await.unwrap().0);
            }
            pool.checkin(c, SystemClock::now());
        }
        // A request without a header never gets one that has one.
        assert_eq!(pool.idle_len(), 2);
        let c = pool
            .checkout(addr, Duration::from_secs(1), &counters, None)
            .await
            .unwrap();
        assert!(!c.reused && c.proxied.is_none());
        assert_eq!(pool.idle_len(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn closed_idle_connections_are_not_handed_out() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let counters = ServerCounters::default();
        let pool = Pool::new(4, Duration::from_secs(60), 1);
        let c = pool
            .checkout(addr, Duration::from_secs(1), &counters, None)
            .await
            .unwrap();
        let (mut server_side, _) = l.accept().await.unwrap();
        assert!(!c.reused);
        pool.checkin(c, SystemClock::now());
        assert_eq!(pool.idle_len(), 1);
        // The server closes it while idle; wait (bounded) until the runtime has seen it.
        server_side.shutdown().await.unwrap();
        drop(server_side);
        let idle = pool.list().lock().pop().unwrap();
        tokio::time::timeout(
            Duration::from_secs(5),
            idle.stream.tcp().ready(tokio::io::Interest::READABLE),
        )
        .await
        .expect("the close arrives")
        .unwrap();
        pool.list().lock().push(idle);
        let c2 = tokio::spawn(async move {
            let c = pool
                .checkout(addr, Duration::from_secs(1), &counters, None)
                .await;
            (c.map(|c| c.reused), counters.connections_opened.get())
        });
        let _ = l.accept().await.unwrap();
        let (reused, opened) = c2.await.unwrap();
        assert!(!reused.unwrap(), "a new connection, not the closed one");
        assert_eq!(opened, 2);
    }

    #[test]
    fn each_worker_reuses_only_its_own_connections() {
        let workers = crate::workers::Workers::start(2).unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let pool = std::sync::Arc::new(Pool::new(4, Duration::from_secs(60), 2));
        let counters = std::sync::Arc::new(ServerCounters::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // A checkout on worker `w`; returns whether it reused a connection, and checks it in.
        let use_on = |w: usize| {
            let (pool, counters) = (pool.clone(), counters.clone());
            rt.block_on(workers.spawn(w, async move {
                let c = pool
                    .checkout(addr, Duration::from_secs(1), &counters, None)
                    .await
                    .unwrap();
                let reused = c.reused;
                pool.checkin(c, SystemClock::now());
                reused
            }))
            .unwrap()
        };
        // The server's ends stay open while the pool holds the connections.
        assert!(!use_on(0));
        let _server0 = l.accept().unwrap();
        assert!(use_on(0), "worker 0 gets its connection back");
        assert!(!use_on(1), "worker 1 opens its own");
        let _server1 = l.accept().unwrap();
        assert!(use_on(1));
        assert_eq!(pool.idle_len(), 2);
        assert_eq!(counters.connections_opened.get(), 2);
        pool.clear();
        assert_eq!(pool.idle_len(), 0);
    }
}
