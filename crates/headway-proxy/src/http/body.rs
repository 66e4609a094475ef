//! The body types of the L7 path: [`ReqBody`] (client → server) and [`RespBody`] (server →
//! client), and the [`Exchange`] that ends when the response body does.
//!
//! Both bodies stream: nothing is buffered whole. [`RespBody`] carries the request's
//! [`Exchange`] and ends it exactly once — at the end of the body (the server connection goes
//! back to the pool), on a body error, or when hyper drops the body early (the client went
//! away; the server connection is closed, never reused half-read).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use headway_core::SystemClock;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;

use crate::group::Lease;
use crate::http::access_log::{Entry, Logger};
use crate::http::ConnActivity;
use crate::stats::VirtualServerCounters;

/// A request body on its way to a server.
#[derive(Debug)]
pub enum ReqBody {
    /// No body.
    Empty,
    /// The client's body, streamed; received bytes are counted.
    Stream(Incoming, Arc<VirtualServerCounters>),
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ReqBody::Empty => Poll::Ready(None),
            ReqBody::Stream(inner, counters) => {
                let f = ready!(Pin::new(inner).poll_frame(cx));
                if let Some(Ok(frame)) = &f {
                    if let Some(d) = frame.data_ref() {
                        counters.bytes_in.add(d.len() as u64);
                    }
                }
                Poll::Ready(f)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Empty => true,
            ReqBody::Stream(b, _) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::Empty => SizeHint::with_exact(0),
            ReqBody::Stream(b, _) => b.size_hint(),
        }
    }
}

/// What ends with a response: the server slot, the server connection, counters and the log.
pub struct Exchange {
    /// The server slot; released when the exchange ends.
    pub lease: Option<Lease>,
    /// The server connection, returned to the pool on a clean end when `reusable`.
    pub conn: Option<SendRequest<ReqBody>>,
    /// Whether the server connection may be reused (the server did not ask to close it).
    pub reusable: bool,
    /// The virtual server's counters.
    pub counters: Arc<VirtualServerCounters>,
    /// The client connection's in-flight count, lowered when the exchange ends.
    pub activity: Arc<ConnActivity>,
    /// When the request arrived.
    pub started: Instant,
    /// The access log line's fields, if the virtual server logs.
    pub log: Option<(Arc<Logger>, Entry)>,
}

impl Exchange {
    fn end(mut self, complete: bool, body_bytes: u64) {
        let elapsed = SystemClock::now().saturating_duration_since(self.started);
        self.counters.latency.record(elapsed);
        self.counters.bytes_out.add(body_bytes);
        if let Some(lease) = &self.lease {
            lease.server.counters.bytes_in.add(body_bytes);
            if let Some(conn) = self.conn.take() {
                if complete && self.reusable {
                    lease.server.pool.checkin(conn);
                }
            }
        }
        self.activity.exchange_done();
        if let Some((logger, mut entry)) = self.log.take() {
            entry.bytes = body_bytes;
            entry.duration = elapsed;
            entry.complete = complete;
            logger.write(entry);
        }
        // The lease drops here, after the connection went back to the pool, so a queued
        // request woken by it can reuse that connection.
        drop(self.lease.take());
    }
}

enum Inner {
    Full(Option<Bytes>),
    Upstream(Incoming),
}

/// A response body on its way to the client.
pub struct RespBody {
    inner: Inner,
    exchange: Option<Exchange>,
    bytes: u64,
}

impl std::fmt::Debug for RespBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RespBody")
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl RespBody {
    /// A body made here (error pages), ending `exchange` (if any) once sent.
    pub fn full(data: impl Into<Bytes>, exchange: Option<Exchange>) -> Self {
        RespBody {
            inner: Inner::Full(Some(data.into())),
            exchange,
            bytes: 0,
        }
    }

    /// A server's body, streamed, ending `exchange` at its end.
    pub fn upstream(body: Incoming, exchange: Exchange) -> Self {
        RespBody {
            inner: Inner::Upstream(body),
            exchange: Some(exchange),
            bytes: 0,
        }
    }

    fn finish(&mut self, complete: bool) {
        if let Some(x) = self.exchange.take() {
            x.end(complete, self.bytes);
        }
    }
}

impl Body for RespBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let me = self.get_mut();
        let polled = match &mut me.inner {
            Inner::Full(data) => data.take().map(|d| Ok(Frame::data(d))),
            Inner::Upstream(b) => ready!(Pin::new(b).poll_frame(cx)),
        };
        match &polled {
            Some(Ok(frame)) => {
                if let Some(d) = frame.data_ref() {
                    me.bytes += d.len() as u64;
                }
            }
            Some(Err(_)) => me.finish(false),
            None => me.finish(true),
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Full(d) => d.as_ref().is_none_or(Bytes::is_empty),
            Inner::Upstream(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Full(d) => SizeHint::with_exact(d.as_ref().map_or(0, |d| d.len() as u64)),
            Inner::Upstream(b) => b.size_hint(),
        }
    }
}

impl Drop for RespBody {
    fn drop(&mut self) {
        // hyper drops a body it never polls (HEAD, 204, 304, an empty body) and one whose client
        // went away; only the first kind is complete.
        let complete = self.is_end_stream();
        self.finish(complete);
    }
}
