//! The response body on its way to the client ([`RespBody`]), the [`Exchange`] that ends
//! when it does, and the request body on its way to the server ([`ReqBody`]).
//!
//! A server's body is read straight from the server connection as the client takes it, and
//! de-framed by [`codec::Decoder`] (payload bytes are handed on without a copy); nothing is
//! buffered whole. [`RespBody`] carries the request's [`Exchange`] and ends it exactly once —
//! at the end of the body (the server connection goes back to the pool), on an error, or when
//! hyper drops the body early (the client went away: the server connection is closed, never
//! reused half-read).
//!
//! A body may carry a compression [`Stage`] (attached with [`RespBody::compressed`]): the
//! server's payload frames then go through it, and what the client gets is its output. The
//! exchange still ends when the server's body does (the connection goes back to the pool while
//! the encoder's last bytes are sent) and counts the server's (uncompressed) bytes; the stage
//! counts the compressed ones.
//!
//! A body may also carry the cache's [`Tee`] ([`RespBody::teed`]): the server's payload is
//! copied into the object being stored as it passes, and the object is stored when the body
//! ends whole (a body cut short stores nothing).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use headway_core::SystemClock;
use hyper::body::{Body, Frame, SizeHint};

use crate::cache::Tee;
use crate::group::Lease;
use crate::http::access_log::{Entry, Logger};
use crate::http::codec::{self, Decoder, Step};
use crate::http::compress::{EncodeError, Stage};
use crate::http::ConnActivity;
use crate::stats::VirtualServerCounters;
use crate::upstream::Conn;

/// A client's request body as the proxy forwards it.
#[derive(Debug)]
pub enum ReqBody {
    /// None: a request the proxy's own HTTP/1 loop read (it takes only bodiless ones, see
    /// `crate::http::h1`).
    Empty,
    /// hyper's (HTTP/1), as the client sends it.
    Client(ClientBody),
    /// An HTTP/2 client's stream (`crate::http::h2_server`).
    H2Client(super::h2_server::RecvBody),
    /// A body to HTTP/2 servers, kept as it is sent so that a stream the server did not take
    /// can be sent again ([`super::replay`]).
    Replay(super::replay::Replay),
}

/// An HTTP/1 client's body as hyper reads it, which asks for a lingering close of its
/// connection when it is dropped before its end.
///
/// A body left unread — the server answered before it was all sent and stopped the upload
/// (an HTTP/2 server's `RST_STREAM(NO_ERROR)`, an HTTP/1 server that closes), or the request
/// failed — makes hyper end the connection after the answer, while the client may still be
/// sending it. Closing a socket with unread bytes makes the kernel reset the connection, and
/// a client still writing its body then takes the reset for the failure of the whole exchange
/// and loses the answer it was reading (hyper's client: "connection error" on the answer's
/// body, in 8 of 20 runs of a test of 20 such 4 MiB uploads; see `super::linger`).
#[derive(Debug)]
pub struct ClientBody {
    inner: hyper::body::Incoming,
    activity: Arc<ConnActivity>,
}

impl ClientBody {
    /// `inner`, on the connection of `activity`.
    pub fn new(inner: hyper::body::Incoming, activity: Arc<ConnActivity>) -> Self {
        ClientBody { inner, activity }
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        if !self.inner.is_end_stream() {
            self.activity.linger();
        }
    }
}

/// Why a client's request body could not be read to its end.
pub type ReqBodyError = Box<dyn std::error::Error + Send + Sync>;

impl Body for ReqBody {
    type Data = Bytes;
    type Error = ReqBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ReqBodyError>>> {
        match self.get_mut() {
            ReqBody::Empty => Poll::Ready(None),
            ReqBody::Client(b) => Pin::new(&mut b.inner).poll_frame(cx).map_err(Into::into),
            ReqBody::H2Client(b) => b.poll_frame(cx).map_err(Into::into),
            ReqBody::Replay(r) => r.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Empty => true,
            ReqBody::Client(b) => b.inner.is_end_stream(),
            ReqBody::H2Client(b) => b.is_end_stream(),
            ReqBody::Replay(r) => r.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::Empty => SizeHint::with_exact(0),
            ReqBody::Client(b) => b.inner.size_hint(),
            // The client's `Content-Length` (h2 checks the data against it), so that an
            // HTTP/1 server gets the body framed by its length, as the client framed it.
            ReqBody::H2Client(b) => b
                .remaining()
                .map_or_else(SizeHint::default, SizeHint::with_exact),
            ReqBody::Replay(r) => r
                .length()
                .map_or_else(SizeHint::default, SizeHint::with_exact),
        }
    }
}

/// Why a request body did not reach an HTTP/2 server whole (see [`H2Body`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum H2BodyError {
    /// The client's body was cut short or malformed.
    Client = 1,
    /// It is larger than the virtual server's `max_body_bytes`.
    TooLarge = 2,
}

/// A client's request body on its way to an HTTP/2 server: its frames (trailers included) as
/// the client sends them, counted, and ended with an error past the virtual server's
/// `max_body_bytes`. Why it ended early is left in its [`H2Body::fault`] cell for the request
/// path, which only sees hyper's error for the stream.
pub struct H2Body {
    inner: ReqBody,
    sent: u64,
    max: Option<u64>,
    counters: Option<(Arc<VirtualServerCounters>, Arc<crate::group::ServerState>)>,
    fault: Arc<std::sync::atomic::AtomicU8>,
}

impl std::fmt::Debug for H2Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Body").field("sent", &self.sent).finish()
    }
}

impl H2Body {
    /// `inner` on its way to a server, counted on `counters` (virtual server, server) and
    /// limited to `max` bytes.
    pub fn new(
        inner: ReqBody,
        max: Option<u64>,
        counters: Option<(Arc<VirtualServerCounters>, Arc<crate::group::ServerState>)>,
    ) -> Self {
        H2Body {
            inner,
            sent: 0,
            max,
            counters,
            fault: Arc::default(),
        }
    }

    /// The cell that says why the body ended early, if it did.
    pub fn fault_cell(&self) -> Arc<std::sync::atomic::AtomicU8> {
        self.fault.clone()
    }

    /// Why a body whose `cell` this was ended early, if it did.
    pub fn fault(cell: &std::sync::atomic::AtomicU8) -> Option<H2BodyError> {
        match cell.load(std::sync::atomic::Ordering::Relaxed) {
            1 => Some(H2BodyError::Client),
            2 => Some(H2BodyError::TooLarge),
            _ => None,
        }
    }

    /// The client's body, none of it sent (a request given back unsent).
    pub fn into_inner(self) -> ReqBody {
        self.inner
    }

    fn failed(&self, e: H2BodyError) -> Poll<Option<Result<Frame<Bytes>, H2BodyError>>> {
        self.fault
            .store(e as u8, std::sync::atomic::Ordering::Relaxed);
        Poll::Ready(Some(Err(e)))
    }
}

impl H2BodyError {
    /// The client's answer: the HTTP/1 path's for the same fault.
    pub(crate) fn answer(self) -> (http::StatusCode, &'static str) {
        match self {
            H2BodyError::Client => super::BodyError::Client,
            H2BodyError::TooLarge => super::BodyError::TooLarge,
        }
        .answer()
    }
}

impl std::fmt::Display for H2BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.answer().1)
    }
}

impl std::error::Error for H2BodyError {}

impl Body for H2Body {
    type Data = Bytes;
    type Error = H2BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, H2BodyError>>> {
        let me = self.get_mut();
        match ready!(Pin::new(&mut me.inner).poll_frame(cx)) {
            None => Poll::Ready(None),
            Some(Err(_)) => me.failed(H2BodyError::Client),
            Some(Ok(f)) => {
                if let Some(d) = f.data_ref() {
                    let n = d.len() as u64;
                    me.sent += n;
                    if me.max.is_some_and(|max| me.sent > max) {
                        return me.failed(H2BodyError::TooLarge);
                    }
                    if let Some((vs, server)) = &me.counters {
                        vs.bytes_in.add(n);
                        server.counters.bytes_out.add(n);
                    }
                }
                Poll::Ready(Some(Ok(f)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Where a server's answer body comes from.
#[derive(Debug)]
pub enum Source {
    /// An HTTP/1 connection, de-framed by the decoder; the connection goes back to its pool
    /// at the end.
    H1(Conn, Decoder),
    /// A stream of an HTTP/2 connection (which stays with its worker's slot).
    H2(H2Recv),
}

impl Source {
    /// The body's length, when the server said it.
    pub fn remaining(&self) -> Option<u64> {
        match self {
            Source::H1(_, d) => d.remaining(),
            Source::H2(b) => b.remaining(),
        }
    }
}

pub use crate::upstream::h2::H2Recv;

/// Why a server's body could not be read to its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// Reading from the server failed.
    #[error("reading the response body from the server failed: {0}")]
    Io(#[from] std::io::Error),
    /// The server closed the connection before the end of the body.
    #[error("the server closed the connection before the end of the response body")]
    Truncated,
    /// The body's framing was malformed.
    #[error(transparent)]
    Framing(#[from] codec::ParseError),
    /// Compressing the body failed (internal).
    #[error("compressing the response body failed: {0}")]
    Compress(#[from] EncodeError),
    /// The server's HTTP/2 stream ended in an error (a reset, the connection lost).
    #[error("the server's HTTP/2 stream failed: {0}")]
    H2(#[from] crate::upstream::h2::StreamError),
}

/// An access log line being filled in, and its log. (Boxed: it is most of an exchange's
/// size, and an exchange travels in every response body; a virtual server without a log pays
/// nothing for it.)
pub type LogLine = Box<(Arc<Logger>, Entry)>;

/// What ends with a response: the server slot, counters and the log.
pub struct Exchange {
    /// The server slot; released when the exchange ends.
    pub lease: Option<Lease>,
    /// Whether the server connection may be reused (the server did not ask to close it).
    pub reusable: bool,
    /// The virtual server's counters.
    pub counters: Arc<VirtualServerCounters>,
    /// The client connection's in-flight count, lowered when the exchange ends.
    pub activity: Arc<ConnActivity>,
    /// When the request arrived.
    pub started: Instant,
    /// The access log line's fields, if the virtual server logs.
    pub log: Option<LogLine>,
    /// The client connection's count of answers read for clients that left
    /// (`super::gone_client`); `None` where no client waits (a background revalidation).
    pub awaited: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

impl Exchange {
    pub(crate) fn end(mut self, complete: bool, body_bytes: u64, conn: Option<Conn>) {
        let now = SystemClock::now();
        let elapsed = now.saturating_duration_since(self.started);
        self.counters.latency.record(elapsed);
        self.counters.bytes_out.add(body_bytes);
        if let Some(lease) = &self.lease {
            lease.server.counters.bytes_in.add(body_bytes);
            if let Some(conn) = conn {
                if complete && self.reusable {
                    lease.server.pool.checkin(conn, now);
                }
            }
        }
        self.activity.exchange_done();
        if let Some(line) = self.log.take() {
            let (logger, mut entry) = *line;
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
    Upstream {
        conn: Option<Conn>,
        decoder: Decoder,
    },
    /// A server's HTTP/2 stream; its trailers (gRPC's status) are kept when they arrive and
    /// sent after the last data.
    H2 {
        body: Option<H2Recv>,
        trailers: Option<http::HeaderMap>,
    },
}

/// A response body on its way to the client.
pub struct RespBody {
    inner: Inner,
    exchange: Option<Exchange>,
    bytes: u64,
    /// The compressor the payload goes through, if any.
    stage: Option<Box<Stage>>,
    /// The cache's copy of the server's payload, if the response is being stored.
    tee: Option<Box<Tee>>,
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
            stage: None,
            tee: None,
        }
    }

    /// A server's body from `source`, ending `exchange` at its end.
    pub fn server(source: Source, exchange: Exchange) -> Self {
        match source {
            Source::H1(conn, decoder) => RespBody::upstream(conn, decoder, exchange),
            Source::H2(body) => RespBody::with_inner(
                Inner::H2 {
                    body: Some(body),
                    trailers: None,
                },
                exchange,
            ),
        }
    }

    /// A server's body, read from `conn` through `decoder`, ending `exchange` at its end.
    pub fn upstream(conn: Conn, decoder: Decoder, exchange: Exchange) -> Self {
        RespBody::with_inner(
            Inner::Upstream {
                conn: Some(conn),
                decoder,
            },
            exchange,
        )
    }

    fn with_inner(inner: Inner, exchange: Exchange) -> Self {
        let mut b = RespBody {
            inner,
            exchange: Some(exchange),
            bytes: 0,
            stage: None,
            tee: None,
        };
        // A body that is already complete (HEAD, 204, 304, `Content-Length: 0`) ends now.
        if b.is_end_stream() {
            b.finish(true);
        }
        b
    }

    /// This body with the server's payload copied into the cache's `tee` (if any) as it
    /// passes. A body that already ended (a bodiless response) stores at once.
    pub fn teed(mut self, tee: Option<Box<Tee>>) -> Self {
        match tee {
            Some(t) if self.exchange.is_none() => t.end(true),
            t => self.tee = t,
        }
        self
    }

    /// This body with its payload compressed by `stage` (if any). The body must not have
    /// ended yet (the policy never compresses an empty body).
    pub fn compressed(mut self, stage: Option<Box<Stage>>) -> Self {
        self.stage = stage;
        self
    }

    /// Whether the server's body has been read to its end.
    fn source_done(&self) -> bool {
        match &self.inner {
            Inner::Full(d) => d.as_ref().is_none_or(Bytes::is_empty),
            Inner::Upstream { decoder, conn } => decoder.is_done() || conn.is_none(),
            Inner::H2 { body, .. } => h2_ended(body),
        }
    }

    /// The server's trailers, once its data has all been sent (taken: sent once).
    fn take_trailers(&mut self) -> Option<http::HeaderMap> {
        match &mut self.inner {
            Inner::H2 {
                body: None,
                trailers,
            } => trailers.take(),
            _ => None,
        }
    }

    /// `poll_frame` with a compression stage: payload frames in, compressed frames out.
    fn poll_compressed(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BodyError>>> {
        loop {
            let Some(stage) = self.stage.as_deref() else {
                return Poll::Ready(None);
            };
            if stage.is_done() {
                return Poll::Ready(None);
            }
            let polled = match &mut self.inner {
                Inner::Full(data) => Poll::Ready(data.take().map(Ok)),
                Inner::Upstream { .. } | Inner::H2 { .. } => self.poll_upstream(cx),
            };
            let source_done = self.source_done();
            let stage = self.stage.as_deref_mut().expect("checked above");
            let out = match polled {
                Poll::Pending => match stage.flush() {
                    // The server paused: what the encoder holds goes out now.
                    Ok(Some(out)) => Ok(out),
                    Ok(None) => return Poll::Pending,
                    Err(e) => Err(e),
                },
                Poll::Ready(Some(Ok(d))) => {
                    self.bytes += d.len() as u64;
                    if source_done {
                        // The server's last bytes: end the exchange at once (the connection
                        // goes back to the pool), then the stream's end.
                        let out = stage.finish(&d);
                        self.finish(true);
                        out
                    } else {
                        match stage.push(&d) {
                            Ok(Some(out)) => Ok(out),
                            Ok(None) => continue,
                            Err(e) => Err(e),
                        }
                    }
                }
                Poll::Ready(None) => {
                    let out = stage.finish(&[]);
                    self.finish(true);
                    out
                }
                Poll::Ready(Some(Err(e))) => {
                    self.finish(false);
                    return Poll::Ready(Some(Err(e)));
                }
            };
            return match out {
                Ok(out) if out.is_empty() => continue,
                Ok(out) => Poll::Ready(Some(Ok(out))),
                Err(e) => {
                    self.finish(false);
                    Poll::Ready(Some(Err(e.into())))
                }
            };
        }
    }

    /// The client left before the whole answer was relayed: the rest of an HTTP/1 server's
    /// body is read off its connection by a task, which pools the connection again at its
    /// end (`super::gone_client::drain_rest`), instead of the connection being closed.
    fn leave_rest(&mut self) {
        let (Inner::Upstream { conn, decoder }, Some(x)) = (&mut self.inner, &self.exchange) else {
            return;
        };
        let (Some(lease), Some(awaited), true) = (&x.lease, &x.awaited, x.reusable) else {
            return;
        };
        if let Some(c) = conn.take() {
            super::gone_client::drain_rest(c, decoder.clone(), lease.server.clone(), awaited);
        }
    }

    fn finish(&mut self, complete: bool) {
        // A gRPC call's status comes in the trailers, at the end: into the log line.
        if let (
            Inner::H2 {
                trailers: Some(t), ..
            },
            Some(x),
        ) = (&self.inner, &mut self.exchange)
        {
            if let Some(line) = x.log.as_mut() {
                line.1.grpc_status = crate::http::access_log::grpc_status(t).or(line.1.grpc_status);
            }
        }
        let conn = match &mut self.inner {
            Inner::Upstream { conn, .. } => conn.take(),
            Inner::Full(_) => None,
            // An HTTP/2 stream given up before its end is reset when dropped.
            Inner::H2 { body, .. } => {
                if !complete {
                    *body = None;
                }
                None
            }
        };
        if let Some(x) = self.exchange.take() {
            x.end(complete, self.bytes, conn);
        }
        if let Some(t) = self.tee.take() {
            t.end(complete);
        }
    }

    /// The server's next payload bytes (copied into the tee, if any).
    fn poll_upstream(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BodyError>>> {
        let polled = self.poll_server(cx);
        if let (Some(t), Poll::Ready(Some(Ok(d)))) = (&mut self.tee, &polled) {
            t.data(d);
        }
        polled
    }

    fn poll_server(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BodyError>>> {
        let (conn, decoder) = match &mut self.inner {
            Inner::Upstream { conn, decoder } => (conn, decoder),
            Inner::H2 { body, trailers } => return poll_h2(body, trailers, cx),
            Inner::Full(_) => return Poll::Ready(None),
        };
        let Some(c) = conn.as_mut() else {
            return Poll::Ready(None);
        };
        loop {
            match decoder.step(&c.buf)? {
                Step::Data(n) => return Poll::Ready(Some(Ok(c.buf.split_to(n).freeze()))),
                Step::Skip(n) => {
                    let _ = c.buf.split_to(n);
                }
                Step::Done(n) => {
                    let _ = c.buf.split_to(n);
                    return Poll::Ready(None);
                }
                Step::NeedMore => {
                    if c.buf.capacity() - c.buf.len() < 4096 {
                        // Large bodies read in larger pieces.
                        let want = decoder
                            .remaining()
                            .map_or(64 * 1024, |r| r.clamp(4096, 256 * 1024) as usize);
                        c.buf.reserve(want);
                    }
                    match c.stream.try_read_buf(&mut c.buf) {
                        Ok(0) => {
                            return if decoder.eof() {
                                Poll::Ready(None)
                            } else {
                                Poll::Ready(Some(Err(BodyError::Truncated)))
                            };
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            ready!(c.stream.poll_read_ready(cx))?;
                        }
                        Err(e) => return Poll::Ready(Some(Err(e.into()))),
                    }
                }
            }
        }
    }
}

/// The next data of a server's HTTP/2 stream; its trailers are kept in `trailers`, and the
/// stream is let go (`body` = `None`) at its end.
fn poll_h2(
    body: &mut Option<H2Recv>,
    trailers: &mut Option<http::HeaderMap>,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Bytes, BodyError>>> {
    loop {
        let Some(b) = body.as_mut() else {
            return Poll::Ready(None);
        };
        match ready!(b.poll_frame(cx)) {
            None => {
                *body = None;
                return Poll::Ready(None);
            }
            Some(Err(e)) => {
                *body = None;
                return Poll::Ready(Some(Err(e.into())));
            }
            Some(Ok(f)) => match f.into_data() {
                Ok(d) if d.is_empty() => {}
                Ok(d) => {
                    if h2_ended(body) {
                        *body = None;
                    }
                    return Poll::Ready(Some(Ok(d)));
                }
                Err(f) => {
                    if let Ok(t) = f.into_trailers() {
                        trailers.get_or_insert_with(http::HeaderMap::new).extend(t);
                    }
                }
            },
        }
    }
}

/// Whether an HTTP/2 stream has ended (nothing more, not even trailers, to come).
fn h2_ended(body: &Option<H2Recv>) -> bool {
    body.as_ref().is_none_or(|b| b.is_end_stream())
}

impl Body for RespBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let me = self.get_mut();
        if me.stage.is_some() {
            let polled = ready!(me.poll_compressed(cx));
            return Poll::Ready(match polled {
                None => me.take_trailers().map(|t| Ok(Frame::trailers(t))),
                Some(r) => Some(r.map(Frame::data)),
            });
        }
        let polled = match &mut me.inner {
            Inner::Full(data) => data.take().map(Ok),
            Inner::Upstream { .. } | Inner::H2 { .. } => ready!(me.poll_upstream(cx)),
        };
        match polled {
            Some(Ok(d)) => {
                me.bytes += d.len() as u64;
                // The last payload bytes end the exchange at once, so the server connection
                // is back in the pool before the client even reads them.
                if me.source_done() {
                    me.finish(true);
                }
                Poll::Ready(Some(Ok(Frame::data(d))))
            }
            Some(Err(e)) => {
                me.finish(false);
                Poll::Ready(Some(Err(e)))
            }
            None => {
                me.finish(true);
                Poll::Ready(me.take_trailers().map(|t| Ok(Frame::trailers(t))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        let trailers_held = matches!(
            &self.inner,
            Inner::H2 {
                trailers: Some(_),
                ..
            }
        );
        match &self.stage {
            Some(stage) => stage.is_done() && !trailers_held,
            None => self.source_done() && !trailers_held,
        }
    }

    fn size_hint(&self) -> SizeHint {
        if self.stage.is_some() {
            return SizeHint::default();
        }
        match &self.inner {
            Inner::Full(d) => SizeHint::with_exact(d.as_ref().map_or(0, |d| d.len() as u64)),
            Inner::Upstream { decoder, .. } => match decoder.remaining() {
                Some(n) => SizeHint::with_exact(n),
                None => SizeHint::default(),
            },
            // Trailers may follow the data: no exact length is promised.
            Inner::H2 { body, .. } => body.as_ref().map_or(SizeHint::default(), |b| {
                let mut h = SizeHint::new();
                h.set_lower(b.remaining().unwrap_or(0));
                h
            }),
        }
    }
}

impl Drop for RespBody {
    fn drop(&mut self) {
        // hyper drops a body it never polls (HEAD, 204, 304, an empty body) and one whose client
        // went away; only the first kind is complete.
        let complete = self.is_end_stream();
        if !complete {
            self.leave_rest();
        }
        self.finish(complete);
    }
}
