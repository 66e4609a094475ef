//! HTTP/2 client connections, served on the `h2` crate directly.
//!
//! One task per connection does everything: it drives the connection's frames, takes every
//! request that has arrived, and polls each request's handling ([`super::handle`]) and the
//! sending of its answer in turn. The answers of one pass go out in one write: polling the
//! streams only after accepting all requests that are ready lets the connection write the
//! frames they queued together (answered one by one, each answer cost a flush of its own). A
//! stream has no task of its own (hyper's server spawned one per request and moved its state
//! there: in a stand-alone server of 128 B answers this loop took 19 % less CPU; behind
//! Headway's request phases the difference is within a run's noise).
//!
//! What hyper's server did on the way, done here too: a request's body is the stream's data
//! and trailers, its flow-control window given back as the proxy reads it
//! ([`super::body::ReqBody::H2`]); an answer loses the fields HTTP/2 forbids (`Connection` and
//! what it names, `Keep-Alive`, `Transfer-Encoding`, `Upgrade`, RFC 9113 §8.2.2), gets a
//! `Content-Length` when its length is known and a `Date` if it has none, and its body is sent
//! as the client's window allows; a client that resets a stream ends its handling (the server
//! exchange is given up). And what it did not: `Expect: 100-continue` is answered with a `100`
//! when the proxy first reads the body (hyper's HTTP/2 server sent none, so a client that
//! waits for it — curl with the field set, SDKs uploading large objects — stalled a second
//! per request before sending the body anyway).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt as _};
use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Body as _;

use super::body::{H2Recv, ReqBody};
use super::{BoxError, Conn, Served};

/// A stream being handled: its request's handling, then its answer's sending.
type StreamTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// An HTTP/2 connection from a client.
pub(super) struct H2Conn<T> {
    state: State<T>,
    conn: Arc<Conn>,
    streams: FuturesUnordered<StreamTask>,
    /// Asked to finish (before the handshake was done, or since).
    graceful: bool,
    /// The connection accepts no more streams (it was closed or finished).
    closed: bool,
}

enum State<T> {
    Handshake(h2::server::Handshake<T, Bytes>),
    Serving(h2::server::Connection<T, Bytes>),
}

impl<T> H2Conn<T>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    /// Serves `io` (the connection preface not yet read) for `conn` with `settings`.
    pub(super) fn new(io: T, conn: Arc<Conn>, settings: &h2::server::Builder) -> Self {
        H2Conn {
            state: State::Handshake(settings.handshake(io)),
            conn,
            streams: FuturesUnordered::new(),
            graceful: false,
            closed: false,
        }
    }
}

/// Each stream's receive window, and the connection's: a client uploads 1 MiB before it
/// waits for the proxy to read (the h2 crate's default, 64 KiB, would cap an upload at 64 KiB
/// per round trip; hyper's server used these).
const WINDOW: u32 = 1 << 20;

/// The server settings of a virtual server's HTTP/2 connections.
pub(super) fn settings(max_header_bytes: usize) -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.initial_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_header_list_size(u32::try_from(max_header_bytes).unwrap_or(u32::MAX))
        .max_concurrent_streams(256);
    b
}

impl<T> Served for H2Conn<T>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    fn poll_served(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        let me = &mut *self;
        let c = loop {
            match &mut me.state {
                State::Handshake(h) => {
                    let mut c = ready!(Pin::new(h).poll(cx))?;
                    if me.graceful {
                        c.graceful_shutdown();
                    }
                    me.state = State::Serving(c);
                }
                State::Serving(c) => break c,
            }
        };
        loop {
            let mut progressed = false;
            // Every request that arrived; the frames the streams queued are written here too.
            while !me.closed {
                match c.poll_accept(cx) {
                    Poll::Ready(Some(Ok((req, respond)))) => {
                        progressed = true;
                        me.streams
                            .push(Box::pin(stream(me.conn.clone(), req, respond)));
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e.into())),
                    Poll::Ready(None) => me.closed = true,
                    Poll::Pending => break,
                }
            }
            while let Poll::Ready(Some(())) = me.streams.poll_next_unpin(cx) {
                progressed = true;
            }
            if me.closed && me.streams.is_empty() {
                return Poll::Ready(Ok(()));
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    }

    fn graceful(mut self: Pin<&mut Self>) {
        self.graceful = true;
        if let State::Serving(c) = &mut self.state {
            c.graceful_shutdown();
        }
    }
}

/// Handles one stream: its request, then its answer.
async fn stream(
    conn: Arc<Conn>,
    req: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let (parts, recv) = req.into_parts();
    let expects = parts
        .headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let read = Arc::new(AtomicBool::new(false));
    let body = if recv.is_end_stream() {
        ReqBody::Empty
    } else {
        ReqBody::H2(
            H2Recv::new(recv, &parts.headers)
                .watched(read.clone())
                .lingering(!expects),
        )
    };
    // Pinned in place: the stream's own future is boxed already (in the connection's set).
    let mut handling = std::pin::pin!(super::handle(conn, Request::from_parts(parts, body)));
    let mut continued = !expects;
    let resp = std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = handling.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        if !continued && read.load(Relaxed) {
            continued = true;
            let mut go_on = Response::new(());
            *go_on.status_mut() = StatusCode::CONTINUE;
            let _ = respond.send_informational(go_on);
        }
        // A client that reset the stream wants no answer: the handling is dropped.
        if respond.poll_reset(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await;
    let Some(resp) = resp else { return };
    let (mut head, body) = resp.into_parts();
    // The fields HTTP/2 forbids (RFC 9113 §8.2.2): a server's answer lost its hop-by-hop
    // fields in phase 5 already; this is for the proxy's own (`Connection: close`).
    super::headers::strip_hop_by_hop(&mut head.headers);
    if let Some(n) = body.size_hint().exact() {
        head.headers
            .entry(header::CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(n));
    }
    if !head.headers.contains_key(header::DATE) {
        if let Ok(v) = HeaderValue::from_bytes(&super::h1::http_date()) {
            head.headers.insert(header::DATE, v);
        }
    }
    let end = body.is_end_stream();
    let Ok(out) = respond.send_response(Response::from_parts(head, ()), end) else {
        return;
    };
    if !end {
        // A body that fails resets the stream: the client sees the answer cut short.
        super::h2_pipe::pipe(body, out, h2::Reason::INTERNAL_ERROR).await;
    }
}
