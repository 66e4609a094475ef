//! HTTP/2 client connections: the shell around the proxy's own HTTP/2 core
//! ([`headway_h2::connection::Connection`]).
//!
//! One task per connection does everything, in passes: it reads what the socket has into the
//! core, takes the core's events (a request starts its handling, [`super::handle`]; data and
//! trailers go to the request's body, [`recv::RecvBody`]; a reset drops the stream's handling
//! or answer), takes what the bodies noticed (data consumed: its window is given back; data
//! first asked for: `100 Continue`; a body dropped before its end), polls the handlings that
//! were woken and the answers' bodies whose streams have room, and writes what the core
//! queued — the answers of one pass in one vectored write. A stream has no task of its own,
//! and nothing here takes a lock but a body's queue.
//!
//! Why not the `h2` crate (which this replaced): in profiles of `headway bench adc --tests
//! h2,h2-h2` its frame and stream machinery (moves of large frames and stream states, a
//! mutex per stream operation, HPACK's encoder with its dynamic table and Huffman) took about
//! 28 % of the proxy's CPU, and Headway 1.13× and 1.32× HAProxy's CPU per request; the own
//! core took about 5 % in the same profile.
//!
//! What an answer gets on the way: it loses the fields HTTP/2 forbids (`Connection` and what
//! it names, `Keep-Alive`, `Transfer-Encoding`, `Upgrade`, RFC 9113 §8.2.2), gets a
//! `Content-Length` when its length is known and a `Date` if it has none, and its body is sent
//! as the client's window allows (the core holds at most [`ROOM`] of it per stream). A request
//! body left unread when its answer ends (the server answered early, the proxy refused it) is
//! read and dropped up to [`super::LINGER_BYTES`] and the stream then reset, as the HTTP/1
//! side's lingering close does; one the proxy never asked for while the client waits for
//! `100 Continue` is reset with NO_ERROR as soon as the answer is out (RFC 9113 §8.1).

mod recv;

use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt as _};
use headway_h2::connection::{Config, Connection, Event};
use headway_h2::frame::Reason;
use headway_h2::stream_map::StreamMap;
use http::{header, HeaderValue, Request, Response};
use hyper::body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite};

pub use recv::RecvBody;
use recv::{Notice, Shared};

use super::body::{ReqBody, RespBody};
use super::{BoxError, Conn, Served};

/// An answer's data the core holds per stream before the body is asked for more.
const ROOM: usize = 64 << 10;

/// The queued bytes past which the connection stops reading (a client that does not read
/// its answers cannot make the queue grow).
const QUEUE_MAX: usize = 1 << 20;

/// How many buffers one write gathers at most.
const IOV: usize = 64;

/// Each stream's receive window, and the connection's: a client uploads 1 MiB before it
/// waits for the proxy to read (the protocol's default, 64 KiB, would cap an upload at
/// 64 KiB per round trip).
const WINDOW: u32 = 1 << 20;

/// The core's settings for a virtual server whose request heads may be `max_header_bytes`.
pub(super) fn settings(max_header_bytes: usize) -> Config {
    Config {
        max_concurrent_streams: 256,
        window: WINDOW,
        connection_window: WINDOW,
        max_header_list: max_header_bytes,
        ..Config::default()
    }
}

/// A stream's handling, until its answer.
struct Handling {
    id: u32,
    fut: Option<Pin<Box<dyn Future<Output = Response<RespBody>> + Send>>>,
    /// The waker it was last polled with, to have it polled once more after it is dropped.
    waker: Option<Waker>,
}

impl Future for Handling {
    type Output = (u32, Option<Response<RespBody>>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let id = self.id;
        let Some(fut) = self.fut.as_mut() else {
            return Poll::Ready((id, None));
        };
        match fut.as_mut().poll(cx) {
            Poll::Ready(r) => Poll::Ready((id, Some(r))),
            Poll::Pending => {
                if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    self.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// What the shell keeps of a stream besides its handling.
#[derive(Default)]
struct Extra {
    /// The client waits for `100 Continue` (`Expect: 100-continue`).
    expects: bool,
    /// Its body was asked for.
    asked: bool,
    /// The body was dropped before its end: the rest is read and dropped, this many bytes
    /// so far.
    discarded: Option<usize>,
    /// The answer is out.
    answered: bool,
}

/// An HTTP/2 connection from a client.
pub(super) struct H2Conn<T> {
    io: T,
    core: Connection,
    conn: Arc<Conn>,
    shared: Arc<Shared>,
    handlings: FuturesUnordered<Handling>,
    /// Answers whose bodies are being sent, by stream.
    answers: StreamMap<RespBody>,
    /// Streams that need more than their handling and answer (see [`Extra`]).
    extra: StreamMap<Extra>,
    notices: Vec<Notice>,
    /// The client's end was read.
    read_closed: bool,
    /// The socket was shut down for writing.
    shut: bool,
}

impl<T> H2Conn<T>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    /// Serves `io` (the connection preface not yet read) for `conn` with `settings`.
    pub(super) fn new(io: T, conn: Arc<Conn>, settings: &Config) -> Self {
        H2Conn {
            io,
            core: Connection::new(settings.clone()),
            conn,
            shared: Arc::default(),
            handlings: FuturesUnordered::new(),
            answers: StreamMap::default(),
            extra: StreamMap::default(),
            notices: Vec::new(),
            read_closed: false,
            shut: false,
        }
    }

    /// Reads what the socket has into the core; whether anything came.
    fn read(&mut self, cx: &mut Context<'_>) -> Result<bool, BoxError> {
        let mut progressed = false;
        while !self.read_closed && self.core.wants_write() < QUEUE_MAX {
            let buf = self.core.read_buf();
            match tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, buf) {
                Poll::Ready(Ok(n)) => {
                    progressed = true;
                    self.conn.activity.touch();
                    if n == 0 {
                        self.read_closed = true;
                        break;
                    }
                    self.core.handle_read()?;
                }
                Poll::Ready(Err(e)) => return Err(e.into()),
                Poll::Pending => break,
            }
        }
        Ok(progressed)
    }

    /// Takes the core's events; whether there were any.
    fn events(&mut self) -> bool {
        let mut any = false;
        while let Some(e) = self.core.poll_event() {
            any = true;
            match e {
                Event::Request {
                    stream,
                    head,
                    length,
                    end,
                } => self.request(stream, head, length, end),
                Event::Data { stream, data, end } => {
                    let n = data.len();
                    if !self.shared.data(stream, data, end) {
                        self.discard(stream, n, end);
                    }
                }
                Event::Trailers { stream, trailers } => self.shared.trailers(stream, trailers),
                // A client's connection: no answers, no streams of this side's, no pings.
                Event::Response { .. } | Event::Unprocessed { .. } | Event::Pong => {}
                Event::Reset { stream, reason } => {
                    let held = self.shared.reset(stream, reason);
                    self.core.release(stream, held);
                    self.answers.remove(&stream);
                    self.extra.remove(&stream);
                    for h in self.handlings.iter_mut() {
                        if h.id == stream {
                            h.fut = None;
                            if let Some(w) = h.waker.take() {
                                w.wake();
                            }
                        }
                    }
                }
            }
        }
        any
    }

    /// A new request: its handling starts.
    fn request(&mut self, id: u32, head: http::request::Parts, length: Option<u64>, end: bool) {
        let expects = head
            .headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let body = if end {
            ReqBody::Empty
        } else {
            self.shared.open(id);
            ReqBody::H2Client(RecvBody::new(self.shared.clone(), id, length))
        };
        if expects && !end {
            self.extra.insert(
                id,
                Extra {
                    expects: true,
                    ..Extra::default()
                },
            );
        }
        let fut = Box::pin(super::handle(
            self.conn.clone(),
            Request::from_parts(head, body),
        ));
        self.handlings.push(Handling {
            id,
            fut: Some(fut),
            waker: None,
        });
    }

    /// Data for a stream whose body is gone: given back, within the lingering bounds.
    fn discard(&mut self, id: u32, n: usize, end: bool) {
        self.core.release(id, n);
        let Some(x) = self.extra.get_mut(&id) else {
            return;
        };
        if end {
            self.extra.remove(&id);
            return;
        }
        if let Some(d) = x.discarded.as_mut() {
            *d += n;
            if *d > super::LINGER_BYTES {
                self.core.reset(id, Reason::CANCEL);
            }
        }
    }

    /// Takes what the bodies noticed; whether there was anything.
    fn notices(&mut self, cx: &mut Context<'_>) -> bool {
        self.shared.notices(cx.waker(), &mut self.notices);
        let any = !self.notices.is_empty();
        for n in std::mem::take(&mut self.notices) {
            match n {
                Notice::Consumed(id, n) => self.core.release(id, n),
                Notice::Asked(id) => {
                    if let Some(x) = self.extra.get_mut(&id) {
                        x.asked = true;
                        if x.expects && !x.answered {
                            let mut go_on = Response::new(()).into_parts().0;
                            go_on.status = http::StatusCode::CONTINUE;
                            let _ = self.core.send_response(id, &go_on, false);
                        }
                    }
                }
                Notice::Dropped(id) => {
                    if !self.core.is_open(id) {
                        continue;
                    }
                    let x = self.extra.entry(id).or_default();
                    if x.expects && !x.asked {
                        // The client waits for `100 Continue` and sends nothing: told at once
                        // (once its answer is out).
                        if x.answered {
                            self.extra.remove(&id);
                            self.core.reset(id, Reason::NO_ERROR);
                        } else {
                            x.discarded = None;
                        }
                    } else {
                        x.discarded = Some(0);
                    }
                }
            }
        }
        any
    }

    /// Polls the handlings that were woken; whether any answered.
    fn handlings(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        while let Poll::Ready(Some((id, resp))) = self.handlings.poll_next_unpin(cx) {
            any = true;
            if let Some(resp) = resp {
                self.answer(id, resp);
            }
        }
        any
    }

    /// Sends an answer's head, and keeps its body to send.
    fn answer(&mut self, id: u32, resp: Response<RespBody>) {
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
        if self.core.send_response(id, &head, end).is_err() {
            return;
        }
        if !end {
            self.answers.insert(id, body);
        } else {
            self.answered(id);
        }
    }

    /// Stream `id`'s answer is out.
    fn answered(&mut self, id: u32) {
        let Some(x) = self.extra.get_mut(&id) else {
            return;
        };
        x.answered = true;
        if x.discarded.is_some() {
            return; // the rest of the body is read and dropped; forgotten at its end
        }
        let unasked = x.expects && !x.asked;
        self.extra.remove(&id);
        if unasked {
            self.core.reset(id, Reason::NO_ERROR);
        }
    }

    /// Sends what the answers' bodies have, as far as their streams have room; whether any
    /// sent something.
    fn bodies(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        let mut ended = Vec::new();
        for (&id, body) in self.answers.iter_mut() {
            while self.core.buffered(id) < ROOM {
                let frame = match Pin::new(&mut *body).poll_frame(cx) {
                    Poll::Pending => break,
                    Poll::Ready(f) => f,
                };
                any = true;
                let sent = match frame {
                    None => self.core.send_data(id, Bytes::new(), true).map(|()| true),
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "an answer's body failed; resetting its stream");
                        self.core.reset(id, Reason::INTERNAL_ERROR);
                        Ok(true)
                    }
                    Some(Ok(f)) => match f.into_data() {
                        Ok(d) => {
                            let end = body.is_end_stream();
                            self.core.send_data(id, d, end).map(|()| end)
                        }
                        Err(f) => match f.into_trailers() {
                            Ok(t) => self.core.send_trailers(id, t).map(|()| true),
                            Err(_) => Ok(false),
                        },
                    },
                };
                match sent {
                    Ok(false) => {}
                    Ok(true) | Err(_) => {
                        ended.push(id);
                        break;
                    }
                }
            }
        }
        for id in ended {
            self.answers.remove(&id);
            self.answered(id);
        }
        any
    }

    /// Writes what the core queued; whether anything was written.
    fn write(&mut self, cx: &mut Context<'_>) -> Result<bool, BoxError> {
        let mut progressed = false;
        while self.core.wants_write() > 0 {
            let mut iov = [IoSlice::new(&[]); IOV];
            let n = self.core.transmit(&mut iov);
            match Pin::new(&mut self.io).poll_write_vectored(cx, &iov[..n]) {
                Poll::Ready(Ok(0)) => return Err("the client connection took no bytes".into()),
                Poll::Ready(Ok(n)) => {
                    self.core.advance(n);
                    self.conn.activity.touch();
                    progressed = true;
                }
                Poll::Ready(Err(e)) => return Err(e.into()),
                Poll::Pending => break,
            }
        }
        Ok(progressed)
    }
}

impl<T> Served for H2Conn<T>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn poll_served(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        let me = &mut *self;
        loop {
            let mut progressed = match me.read(cx) {
                Ok(p) => p,
                Err(e) => {
                    // The GOAWAY the core queued, if the socket takes it now.
                    let _ = me.write(cx);
                    return Poll::Ready(Err(e));
                }
            };
            if me.read_closed {
                // An HTTP/2 client that closes its end is gone (it cannot say more, and
                // clients do not half-close): its streams' handlings are dropped, as they are
                // when the client resets them (see `super::gone_client`).
                let _ = me.write(cx);
                return Poll::Ready(Ok(()));
            }
            progressed |= me.events();
            progressed |= me.notices(cx);
            progressed |= me.handlings(cx);
            progressed |= me.bodies(cx);
            progressed |= me.events();
            progressed |= me.write(cx)?;
            if me.core.is_done()
                && me.core.wants_write() == 0
                && me.handlings.is_empty()
                && me.answers.is_empty()
            {
                if !me.shut {
                    ready!(Pin::new(&mut me.io).poll_shutdown(cx))?;
                    me.shut = true;
                }
                return Poll::Ready(Ok(()));
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    }

    fn graceful(mut self: Pin<&mut Self>) {
        self.core.graceful_shutdown();
    }
}
