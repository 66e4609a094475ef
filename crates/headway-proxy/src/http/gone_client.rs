//! Answers to clients that left: a request sent whole to a server is let finish when its
//! client goes away before the answer, as HAProxy does by default (no `abortonclose`).
//!
//! For an HTTP/2 server the stream is not reset (a reset per gone stream on the connection
//! the worker shares with every client looks like rapid reset to the server:
//! `super::upstream_h2`); for an HTTP/1 server the answer is read off the connection, which
//! then goes back to the pool instead of being closed ([`drain_h1`]). A client that leaves
//! while the body of an HTTP/1 server's answer is being relayed lets the rest be read the
//! same way ([`drain_rest`]: at most [`DRAIN_BYTES`] of it, within [`REST_TIME`]), so a
//! browser cancelling downloads or a player seeking does not cost a server connection each
//! time (HAProxy and NGINX close it). Either way at most
//! [`MAX_AWAITED`] answers are awaited for one client connection at a time, each until the
//! group's response timeout and for at most [`DRAIN_BYTES`] of body; past them the exchange is
//! given up at once (a reset, a closed connection). A client that opens requests and drops them
//! in a loop thus gets no more work done by the servers than one that waits for its answers.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Buf as _;
use http::Method;
use tokio::io::AsyncReadExt as _;

use super::codec;
use crate::group::ServerState;

/// The most answers awaited at once for one client connection's gone requests (HTTP/2
/// clients commonly have 100 streams open at once).
pub(super) const MAX_AWAITED: usize = 100;

/// What is read of a gone client's answer body before the exchange is given up anyway:
/// small answers end cleanly (and their connection is kept), large ones are not waited for.
pub(super) const DRAIN_BYTES: usize = 256 << 10;

/// One answer awaited for a gone client: counted on its connection while it lives.
pub(super) struct Awaiting(Arc<AtomicUsize>);

impl Awaiting {
    /// Counts one on `awaited` (the client connection's), unless [`MAX_AWAITED`] are.
    pub(super) fn take(awaited: &Arc<AtomicUsize>) -> Option<Self> {
        if awaited.fetch_add(1, Relaxed) >= MAX_AWAITED {
            awaited.fetch_sub(1, Relaxed);
            return None;
        }
        Some(Awaiting(awaited.clone()))
    }
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// A server connection whose request was sent whole and whose answer is awaited: if the
/// exchange is dropped (its client left) while it is armed, the answer is read off the
/// connection by a task ([`drain_h1`]) instead of the connection being closed.
pub(super) struct PendingAnswer {
    /// The connection, while the exchange has it.
    pub conn: Option<crate::upstream::Conn>,
    /// Whether dropping now leaves the answer to a task.
    pub armed: bool,
    method: Method,
    server: Arc<ServerState>,
    deadline: tokio::time::Instant,
    awaited: Arc<AtomicUsize>,
}

impl PendingAnswer {
    /// `conn`'s answer to a `method` request, due by `deadline`, for a client connection
    /// whose gone requests `awaited` counts.
    pub(super) fn new(
        conn: crate::upstream::Conn,
        method: &Method,
        server: &Arc<ServerState>,
        deadline: tokio::time::Instant,
        awaited: &Arc<AtomicUsize>,
    ) -> Self {
        PendingAnswer {
            conn: Some(conn),
            armed: false,
            method: method.clone(),
            server: server.clone(),
            deadline,
            awaited: awaited.clone(),
        }
    }
}

impl Drop for PendingAnswer {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take().filter(|_| self.armed) else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(awaiting) = Awaiting::take(&self.awaited) else {
            return;
        };
        let (method, server, deadline) = (self.method.clone(), self.server.clone(), self.deadline);
        rt.spawn(async move {
            let _awaiting = awaiting;
            drain_h1(conn, &method, &server, deadline).await;
        });
    }
}

/// Reads the answer to a `method` request off `c` until `deadline`, and gives the connection
/// back to `server`'s pool when the answer ended cleanly within [`DRAIN_BYTES`] and the
/// connection may carry another request; closes it otherwise.
pub(super) async fn drain_h1(
    mut c: crate::upstream::Conn,
    method: &Method,
    server: &ServerState,
    deadline: tokio::time::Instant,
) {
    let read = async {
        let Ok(mut head) = super::read_response_head(&mut c).await else {
            return false;
        };
        if head.status == http::StatusCode::SWITCHING_PROTOCOLS {
            return false;
        }
        // The framing first: stripping the hop-by-hop fields removes `Transfer-Encoding`.
        let Ok(framing) = codec::response_framing(method, head.status, &head.headers) else {
            return false;
        };
        let close = super::headers::strip_hop_by_hop(&mut head.headers)
            || head.version == http::Version::HTTP_10;
        read_rest(&mut c, codec::Decoder::new(framing), DRAIN_BYTES).await && !close
    };
    if tokio::time::timeout_at(deadline, read).await == Ok(true) {
        server.pool.checkin(c, headway_core::SystemClock::now());
    }
}

/// How long the rest of an answer whose client left mid-body is read for ([`drain_rest`]).
pub(super) const REST_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads the rest of an answer whose client left while its body was relayed, off `c` through
/// `decoder` (where the relay stopped), and gives the connection back to `server`'s pool when
/// it ended cleanly within [`DRAIN_BYTES`] and [`REST_TIME`]; a rest longer than that by its
/// length closes the connection at once. Counted on `awaited`, with the answers awaited for
/// the client connection's gone requests ([`MAX_AWAITED`]): past it the connection is closed.
pub(super) fn drain_rest(
    mut c: crate::upstream::Conn,
    decoder: codec::Decoder,
    server: Arc<ServerState>,
    awaited: &Arc<AtomicUsize>,
) {
    if decoder.remaining().is_some_and(|n| n > DRAIN_BYTES as u64) {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let Some(awaiting) = Awaiting::take(awaited) else {
        return;
    };
    rt.spawn(async move {
        let _awaiting = awaiting;
        let rest = read_rest(&mut c, decoder, DRAIN_BYTES);
        if tokio::time::timeout(REST_TIME, rest).await == Ok(true) {
            server.pool.checkin(c, headway_core::SystemClock::now());
        }
    });
}

/// Reads and drops a body off `c` through `decoder` (its framing, trailers included) until
/// its end; whether it ended cleanly within `max` bytes of payload.
async fn read_rest(c: &mut crate::upstream::Conn, mut decoder: codec::Decoder, max: usize) -> bool {
    let mut payload = 0;
    loop {
        match decoder.step(&c.buf) {
            Ok(codec::Step::Data(n)) => {
                c.buf.advance(n);
                payload += n;
                if payload > max {
                    return false;
                }
            }
            Ok(codec::Step::Skip(n)) => c.buf.advance(n),
            Ok(codec::Step::Done(n)) => {
                c.buf.advance(n);
                return true;
            }
            Ok(codec::Step::NeedMore) => {
                c.buf.reserve(8192);
                if !matches!(c.stream.read_buf(&mut c.buf).await, Ok(n) if n > 0) {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
}
