//! HTTP/2 connections to the servers of a group with `protocol = "h2"`: per server and worker,
//! one or more, each shared by the worker's requests as streams of their own.
//!
//! A worker's first connection is made by the first request that needs it (the TCP connect,
//! the PROXY-less TLS handshake with ALPN `h2` if the group has TLS, the HTTP/2 preface) and
//! kept while it is open; requests that arrive while it is being made wait for it instead of
//! each opening one, and when making it failed they fail with the same reason at once (a dead
//! server costs the waiting requests one connect timeout, not one each). A request takes the
//! first connection with room for one more stream under the server's
//! `SETTINGS_MAX_CONCURRENT_STREAMS`, counting the streams whose answers are still being read
//! ([`Stream`]); when every connection is full another is made, as HAProxy does (up to
//! [`MAX_CONNECTIONS`]; past them requests wait for a stream to close). The connection's frames
//! are read and written by a task of its own on the worker, on the `h2` crate directly: a
//! request opens its stream from its own task and reads the answer there, with no task or
//! channel of its own in between (hyper's HTTP/2 client spent a task, a channel message and a
//! one-shot per request, about a fifth of the client side's CPU). A connection the server
//! closed (a GOAWAY, a reset) is replaced by the next request; one unused for the pool's idle
//! timeout too. `pool_max_idle = 0` keeps none: each request opens its own. A server that went
//! away without a FIN is noticed by a ping every [`KEEP_ALIVE`] that gets no answer within
//! [`PING_TIMEOUT`].

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use headway_core::SystemClock;

use super::{ConnectError, Pool};
use crate::stats::ServerCounters;
use crate::tls::ServerStream;
use crate::workers::CacheLine;

/// Each stream's receive window: a 512 KiB answer arrives without waiting for window updates
/// on a link with a few milliseconds of round trip.
const STREAM_WINDOW: u32 = 1 << 20;
/// The connection's receive window (all its streams together).
const CONNECTION_WINDOW: u32 = 8 << 20;
/// How often a connection asks its server for a ping's answer.
pub const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// How long the answer may take before the connection is given up.
pub const PING_TIMEOUT: Duration = Duration::from_secs(20);

/// A server's HTTP/2 connection on one worker: streams are opened through it.
#[derive(Clone)]
pub struct Sender {
    send: h2::client::SendRequest<Bytes>,
    /// Set by the connection's task when the connection has ended.
    closed: Arc<AtomicBool>,
    /// Streams of this connection in use (see [`Stream`]).
    open: Arc<AtomicUsize>,
}

impl Sender {
    /// Whether the connection has ended (a new request needs a new one).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }

    /// The handle that opens streams.
    pub fn into_inner(self) -> h2::client::SendRequest<Bytes> {
        self.send
    }

    /// Whether the server takes one more stream on this connection now.
    fn has_room(&self) -> bool {
        self.open.load(Relaxed) < self.send.current_max_send_streams()
    }

    /// Counts one more stream in use until the returned [`Stream`] is dropped.
    fn lend(&self) -> Stream {
        self.open.fetch_add(1, Relaxed);
        Stream(self.open.clone())
    }
}

/// One stream of a connection in use: counted from the request's sending until its answer
/// has been read or given up (held by the answer's body, or by the task that waits for the
/// answer of a client gone), so that a request finds a connection with room.
#[derive(Debug)]
pub struct Stream(Arc<AtomicUsize>);

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// The most connections a worker keeps to one server (each carrying as many streams as the
/// server allows at once; the group's `max_connections` bounds the requests before this).
const MAX_CONNECTIONS: usize = 64;

/// A worker's connections to one server, and how the last attempt to make one ended.
#[derive(Default)]
struct Slot {
    /// Each connection, and when a request last took it.
    conns: Vec<(Sender, Instant)>,
    /// When making a connection last failed, and why (for the requests that waited on it).
    failed: Option<(Instant, io::ErrorKind)>,
}

/// The HTTP/2 connections of one server: a slot per worker and one for any other thread.
pub(super) struct Slots(Box<[CacheLine<tokio::sync::Mutex<Slot>>]>);

impl Slots {
    pub(super) fn new(workers: usize) -> Self {
        Slots(
            (0..=workers)
                .map(|_| CacheLine(Default::default()))
                .collect(),
        )
    }

    fn mine(&self) -> &tokio::sync::Mutex<Slot> {
        let others = self.0.len() - 1;
        let i = crate::workers::current().filter(|&i| i < others);
        &self.0[i.unwrap_or(others)].0
    }

    /// Forgets every connection (streams in flight on them finish; the connections close
    /// after them).
    pub(super) fn clear(&self) {
        for s in self.0.iter() {
            if let Ok(mut s) = s.0.try_lock() {
                s.conns.clear();
            }
        }
    }

    /// Connections held now.
    pub(super) fn len(&self) -> usize {
        self.0
            .iter()
            .filter_map(|s| s.0.try_lock().ok().map(|s| s.conns.len()))
            .sum()
    }
}

impl Pool {
    /// A stream's worth of the calling worker's HTTP/2 connections to `addr`, and whether
    /// the connection was there already (counted as a reuse): the first open one with room
    /// for another stream, else a new one (up to [`MAX_CONNECTIONS`]; past them, the least
    /// busy, where the request waits for a stream to close). A server's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` thus caps the streams of a connection, not the
    /// requests of a worker: with one connection, a server allowing 200 streams that takes
    /// 50 ms per answer held a worker to 4,000 requests per second and the rest queued.
    pub async fn h2_sender(
        &self,
        addr: SocketAddr,
        connect_timeout: Duration,
        counters: &ServerCounters,
    ) -> Result<(Sender, Stream, bool), ConnectError> {
        let asked = SystemClock::now();
        let keep = self.max_idle.load(std::sync::atomic::Ordering::Relaxed) > 0;
        let idle_timeout = Duration::from_millis(
            self.idle_timeout_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let mut slot = self.h2.mine().lock().await;
        slot.conns.retain(|(send, used)| {
            !send.is_closed() && asked.saturating_duration_since(*used) <= idle_timeout
        });
        let pick = match slot.conns.iter().position(|(send, _)| send.has_room()) {
            Some(i) => Some(i),
            None if slot.conns.len() >= MAX_CONNECTIONS => {
                (0..slot.conns.len()).min_by_key(|&i| slot.conns[i].0.open.load(Relaxed))
            }
            None => None,
        };
        if let Some(i) = pick {
            let (send, used) = &mut slot.conns[i];
            *used = asked;
            counters.reused.inc();
            return Ok((send.clone(), send.lend(), true));
        }
        if let Some((at, kind)) = slot.failed {
            // The request that made this attempt failed while this one waited: the same answer.
            if at >= asked {
                return Err(match kind {
                    io::ErrorKind::TimedOut => ConnectError::Timeout(addr),
                    kind => ConnectError::Io {
                        addr,
                        source: io::Error::new(kind, "connecting for the waiting requests failed"),
                    },
                });
            }
        }
        match Box::pin(self.h2_connect(addr, connect_timeout, counters)).await {
            Ok(send) => {
                slot.failed = None;
                if keep {
                    slot.conns.push((send.clone(), SystemClock::now()));
                }
                let stream = send.lend();
                Ok((send, stream, false))
            }
            Err(e) => {
                let kind = match &e {
                    ConnectError::Timeout(_) => io::ErrorKind::TimedOut,
                    ConnectError::Io { source, .. } | ConnectError::Tls { source, .. } => {
                        source.kind()
                    }
                };
                slot.failed = Some((SystemClock::now(), kind));
                Err(e)
            }
        }
    }

    /// A new HTTP/2 connection to `addr`, its frames handled by a task of its own.
    async fn h2_connect(
        &self,
        addr: SocketAddr,
        connect_timeout: Duration,
        counters: &ServerCounters,
    ) -> Result<Sender, ConnectError> {
        let conn = self.connect(addr, connect_timeout, counters, None).await?;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake::<_, Bytes>(conn.stream)
            .await
            .map_err(|e| ConnectError::Io {
                addr,
                source: io::Error::other(e),
            })?;
        let closed = Arc::new(AtomicBool::new(false));
        let ended = closed.clone();
        tokio::spawn(async move {
            if let Err(e) = run(connection).await {
                tracing::debug!(server = %addr, error = %e, "HTTP/2 server connection ended");
            }
            ended.store(true, Relaxed);
        });
        Ok(Sender {
            send,
            closed,
            open: Arc::new(AtomicUsize::new(0)),
        })
    }
}

/// Drives a connection's frames until it ends: the server closed it, it failed, every handle
/// and stream is gone (then it closes with a GOAWAY), or a ping went unanswered.
async fn run(mut connection: h2::client::Connection<ServerStream, Bytes>) -> Result<(), io::Error> {
    let Some(mut ping) = connection.ping_pong() else {
        return connection.await.map_err(io::Error::other);
    };
    loop {
        tokio::select! {
            biased;
            r = &mut connection => return r.map_err(io::Error::other),
            () = tokio::time::sleep(KEEP_ALIVE) => {}
        }
        let pong = tokio::time::timeout(PING_TIMEOUT, ping.ping(h2::Ping::opaque()));
        tokio::select! {
            biased;
            r = &mut connection => return r.map_err(io::Error::other),
            answered = pong => match answered {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(io::Error::other(e)),
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the server did not answer a ping",
                    ))
                }
            },
        }
    }
}
