//! Upgraded connections: after a server's `101 Switching Protocols` (a WebSocket, or any other
//! protocol an `Upgrade` request asked for), the client connection and that server connection
//! carry bytes both ways until both sides have closed, either side fails, or neither has sent
//! anything for the virtual server's `tunnel_idle_timeout`.
//!
//! How a request becomes a tunnel (`super::phases`): the request keeps its `Upgrade` field
//! and `Connection: upgrade` on its way to the server, and is sent on a pooled connection like
//! any other; the server's `101` goes to the client with the server's fields (its `Upgrade`
//! and `Connection: upgrade` included). Whoever served the request writes the `101` and hands
//! the client stream over, with any bytes the client sent after the request: the proxy's own
//! HTTP/1 loop (`super::h1`) its stream directly, hyper through `hyper::upgrade::OnUpgrade`.
//! The server connection never returns to the pool. The tunnel runs in the client
//! connection's own task after its HTTP part ended ([`Tunnel::run`]), so the connection stays
//! counted (active connections, per-client limits, graceful shutdown) for as long as it lasts.
//! The request's server lease is held as long too: a tunnel counts against the server's
//! connection limit and for least connection. Bytes the server sent right behind its `101`
//! reach the client first.
//!
//! A half-close is carried (a FIN from one side shuts down writing towards the other, and the
//! other direction goes on), as on a `tcp` virtual server. The relay ([`relay`]) holds a
//! buffer only while a side has not yet taken what the other sent, so an idle tunnel costs no
//! copy buffers. When the tunnel ends, the request's
//! exchange ends: server → client bytes are its response bytes (counters, access log), client →
//! server bytes count as bytes in.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use headway_core::SystemClock;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::body::Exchange;
use super::Quiet;
use crate::stats::VirtualServerCounters;
use crate::upstream::Conn;

mod relay;

/// A client byte stream a tunnel can carry.
pub trait ClientStream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> ClientStream for T {}

/// Where a tunnel's client side comes from.
pub enum Client {
    /// hyper's connection, handed over once hyper has written the `101`.
    Hyper(OnUpgrade),
    /// The own HTTP/1 loop's stream (the bytes it read past the request first), once it has
    /// written the `101`.
    Own(Box<dyn ClientStream>),
    /// The own loop has not handed its stream over yet.
    Awaited,
}

/// A tunnel waiting for its client connection's HTTP part to end (see the module docs): the
/// client side to come, the server side, and the exchange it ends.
pub struct Tunnel {
    /// The client connection.
    pub(super) client: Client,
    /// The server connection (and what the server sent after its `101`).
    pub(super) server: Conn,
    /// The request's exchange (server lease, counters, access log line).
    pub(super) exchange: Exchange,
    /// The virtual server's counters, counting it as an open tunnel.
    pub(super) open: Open,
    /// Close after this long without a byte either way.
    pub(super) idle: Duration,
}

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnel")
            .field("server", &self.server)
            .field("idle", &self.idle)
            .finish_non_exhaustive()
    }
}

/// Counts a tunnel open for as long as it lives (run to its end, or dropped unrun).
pub(super) struct Open(Arc<VirtualServerCounters>);

impl Open {
    /// Counts an upgrade and an open tunnel of the virtual server with `counters`.
    pub(super) fn new(counters: Arc<VirtualServerCounters>) -> Self {
        counters.upgrades.inc();
        counters.tunnels.inc();
        Open(counters)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.tunnels.dec();
    }
}

impl Tunnel {
    /// Relays bytes until the tunnel ends, then ends the request's exchange.
    pub async fn run(self) {
        let Tunnel {
            client,
            server,
            exchange,
            idle,
            open,
        } = self;
        let io = AtomicU64::new(0);
        let up = AtomicU64::new(0);
        // What the server sent behind its 101 goes first; the connection's read buffer is
        // not kept for the tunnel's life.
        let early = server.buf.to_vec();
        drop(server.buf);
        let down = AtomicU64::new(early.len() as u64);
        let client: Result<Box<dyn ClientStream>, String> = match client {
            Client::Hyper(on) => on
                .await
                .map(|u| Box::new(TokioIo::new(u)) as Box<dyn ClientStream>)
                .map_err(|e| e.to_string()),
            Client::Own(s) => Ok(s),
            Client::Awaited => Err("the client's stream was not handed over".into()),
        };
        let complete = match client {
            Ok(client) => {
                let mut client = Metered {
                    inner: client,
                    read: &up,
                    io: &io,
                };
                let mut server_side = Metered {
                    inner: server.stream,
                    read: &down,
                    io: &io,
                };
                tokio::select! {
                    r = relay::relay(&mut client, &mut server_side, early) => match r {
                        Ok(_) => true,
                        Err(e) => {
                            tracing::debug!(error = %e, "upgraded connection ended with an error");
                            false
                        }
                    },
                    () = idle_out(&io, idle) => {
                        tracing::debug!("upgraded connection idle; closing it");
                        false
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "no client stream for the upgraded connection");
                false
            }
        };
        let up = up.load(Relaxed);
        open.0.bytes_in.add(up);
        if let Some(lease) = &exchange.lease {
            lease.server.counters.bytes_out.add(up);
        }
        drop(open);
        exchange.end(complete, down.load(Relaxed), None);
    }
}

/// Ready once `io` has not moved for `idle` (checked a few times per period, so within a
/// quarter of it).
async fn idle_out(io: &AtomicU64, idle: Duration) {
    let period = Quiet::period(idle);
    let mut quiet = Quiet::new(io.load(Relaxed));
    loop {
        tokio::time::sleep(period).await;
        if quiet.quiet_for(io.load(Relaxed), SystemClock::now()) >= idle {
            return;
        }
    }
}

/// A stream that counts the bytes read from it and notes every read and write.
struct Metered<'a, S> {
    inner: S,
    read: &'a AtomicU64,
    io: &'a AtomicU64,
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.read.fetch_add(n as u64, Relaxed);
            self.io.fetch_add(1, Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            if n > 0 {
                self.io.fetch_add(1, Relaxed);
            }
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
