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
//! are read and written by a task of its own on the worker, around the proxy's own HTTP/2 core
//! (`headway_h2`, its client side) behind one lock ([`ClientConn`]): a request opens its
//! stream from its own task, the core queues its frames and the connection's task writes the
//! frames of all the requests of one turn in one write; the answer's head, data and trailers
//! wait in the stream's slot until the request's task takes them, with no task or channel of
//! its own in between. (The `h2` crate, used before, took about 16 % of the proxy's CPU in
//! `headway bench adc --tests h2-h2`; hyper's client a task, a channel message and a one-shot
//! more per request.) A connection the server closed (a GOAWAY, a reset) is replaced by the
//! next request; one unused for the pool's idle timeout too. `pool_max_idle = 0` keeps none: each request opens its own. A server that went
//! away without a FIN is noticed by a ping every [`KEEP_ALIVE`] that gets no answer within
//! [`PING_TIMEOUT`].

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::VecDeque;
use std::future::Future as _;
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};

use bytes::Bytes;
use headway_core::SystemClock;
use headway_h2::connection::{Config, Connection, Event};
use headway_h2::frame::Reason;
use headway_h2::stream_map::StreamMap;
use http::HeaderMap;
use hyper::body::Frame;
use tokio::io::AsyncWrite as _;

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
    conn: Arc<ClientConn>,
    /// Streams of this connection in use (see [`Stream`]).
    open: Arc<AtomicUsize>,
    /// Counts the handles, so the connection closes once none is left and its streams are done.
    _handle: Arc<Handle>,
}

impl Sender {
    /// Whether the connection has ended or takes no new streams (the server's GOAWAY): a new
    /// request needs a new one.
    pub fn is_closed(&self) -> bool {
        self.conn.closed.load(Relaxed) || self.conn.inner.lock().core.is_going_away()
    }

    /// The connection.
    pub fn conn(&self) -> &Arc<ClientConn> {
        &self.conn
    }

    /// Whether the server takes one more stream on this connection now.
    fn has_room(&self) -> bool {
        self.open.load(Relaxed) < self.conn.inner.lock().core.peer_max_streams() as usize
    }

    /// Counts one more stream in use until the returned [`Stream`] is dropped.
    fn lend(&self) -> Stream {
        self.open.fetch_add(1, Relaxed);
        Stream(self.open.clone())
    }
}

/// The pool's and the requests' hold on a connection: when the last is dropped, the
/// connection's task closes it once its streams are done.
struct Handle(Arc<ClientConn>);

impl Drop for Handle {
    fn drop(&mut self) {
        let mut g = self.0.inner.lock();
        g.unheld = true;
        if let Some(w) = g.task.take() {
            w.wake();
        }
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

    /// A new HTTP/2 connection to `addr`, its frames handled by a task of its own. Its
    /// preface and SETTINGS go out with the first request's frames.
    async fn h2_connect(
        &self,
        addr: SocketAddr,
        connect_timeout: Duration,
        counters: &ServerCounters,
    ) -> Result<Sender, ConnectError> {
        let conn = self.connect(addr, connect_timeout, counters, None).await?;
        let shared = Arc::new(ClientConn {
            inner: parking_lot::Mutex::new(Inner {
                core: Connection::client(Config {
                    window: STREAM_WINDOW,
                    connection_window: CONNECTION_WINDOW,
                    max_header_list: MAX_ANSWER_HEAD,
                    ..Config::default()
                }),
                slots: StreamMap::default(),
                task: None,
                openers: Vec::new(),
                senders: Vec::new(),
                lost: None,
                unheld: false,
                pong: false,
            }),
            closed: AtomicBool::new(false),
        });
        tokio::spawn(run(conn.stream, shared.clone(), addr));
        Ok(Sender {
            conn: shared.clone(),
            open: Arc::new(AtomicUsize::new(0)),
            _handle: Arc::new(Handle(shared)),
        })
    }
}

/// The largest answer head a server may send.
const MAX_ANSWER_HEAD: usize = 64 << 10;

/// An answer's data the core holds per stream before the request's body is asked for more.
const ROOM: usize = 64 << 10;

/// One HTTP/2 connection to a server: the core and the slots of its streams, behind one lock
/// (held only to move frames and wakers; every user is on the same worker).
pub struct ClientConn {
    inner: parking_lot::Mutex<Inner>,
    /// Set by the connection's task when the connection has ended.
    closed: AtomicBool,
}

struct Inner {
    core: Connection,
    /// What arrived for each stream and who waits for it.
    slots: StreamMap<Arrival>,
    /// The connection's task, woken to write what the core queued.
    task: Option<Waker>,
    /// Requests waiting for room to open a stream.
    openers: Vec<Waker>,
    /// Request bodies waiting for room on their streams (woken after every read, which may
    /// have brought window updates, and whenever a stream ends).
    senders: Vec<Waker>,
    /// Why the connection ended, once it has.
    lost: Option<Arc<str>>,
    /// No handle is left (see [`Handle`]).
    unheld: bool,
    /// The answer to the keep-alive ping came.
    pong: bool,
}

/// A stream's answer as it arrives.
#[derive(Default)]
struct Arrival {
    /// The answer's head and its body's length (`Content-Length`), until taken.
    head: Option<(http::response::Parts, Option<u64>)>,
    chunks: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
    /// Nothing more comes after the chunks and trailers.
    end: bool,
    failed: Option<StreamError>,
    /// The request's task, waiting for the answer or its body.
    reader: Option<Waker>,
}

/// Why a stream to a server ended without its whole answer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The server reset the stream (REFUSED_STREAM: not processed, RFC 9113 §8.7).
    #[error("the server reset the stream ({0})")]
    Reset(Reason),
    /// The stream was past the last the server's GOAWAY said it would process.
    #[error("the server went away before taking the stream")]
    Unprocessed,
    /// The connection ended.
    #[error("the connection to the server was lost: {0}")]
    Lost(Arc<str>),
}

impl StreamError {
    /// Whether the server did not process the request (it may be sent again).
    pub fn untaken(&self) -> Option<&'static str> {
        match self {
            StreamError::Reset(r) if *r == Reason::REFUSED_STREAM => {
                Some("the server refused the request unprocessed")
            }
            StreamError::Unprocessed => {
                Some("the server closed the connection before taking the request")
            }
            _ => None,
        }
    }
}

impl Inner {
    /// Wakes the connection's task (it writes what the core queued).
    fn kick(&mut self) {
        if let Some(w) = self.task.take() {
            w.wake();
        }
    }

    /// Fails every stream with `why`.
    fn lose(&mut self, why: &str) {
        let why: Arc<str> = why.into();
        self.lost = Some(why.clone());
        for slot in self.slots.values_mut() {
            slot.failed.get_or_insert(StreamError::Lost(why.clone()));
            slot.wake();
        }
        for w in self.openers.drain(..).chain(self.senders.drain(..)) {
            w.wake();
        }
    }

    /// Hands the core's events to the slots.
    fn events(&mut self) {
        while let Some(e) = self.core.poll_event() {
            match e {
                Event::Response {
                    stream,
                    head,
                    length,
                    end,
                } => {
                    if let Some(slot) = self.slots.get_mut(&stream) {
                        slot.head = Some((head, length));
                        slot.end |= end;
                        slot.wake();
                    }
                }
                Event::Data { stream, data, end } => match self.slots.get_mut(&stream) {
                    Some(slot) => {
                        if !data.is_empty() {
                            slot.chunks.push_back(data);
                        }
                        slot.end |= end;
                        slot.wake();
                    }
                    None => self.core.release(stream, data.len()),
                },
                Event::Trailers { stream, trailers } => {
                    if let Some(slot) = self.slots.get_mut(&stream) {
                        slot.trailers = Some(trailers);
                        slot.end = true;
                        slot.wake();
                    }
                }
                Event::Reset { stream, reason } => {
                    if let Some(slot) = self.slots.get_mut(&stream) {
                        slot.failed.get_or_insert(StreamError::Reset(reason));
                        slot.wake();
                    }
                }
                Event::Unprocessed { stream } => {
                    if let Some(slot) = self.slots.get_mut(&stream) {
                        slot.failed.get_or_insert(StreamError::Unprocessed);
                        slot.wake();
                    }
                }
                Event::Pong => self.pong = true,
                // A server's connection opens no streams of its own.
                Event::Request { .. } => {}
            }
        }
        // Room may have opened for bodies (window updates, streams ended) and for new streams.
        for w in self.senders.drain(..) {
            w.wake();
        }
        if self.core.can_open() {
            for w in self.openers.drain(..) {
                w.wake();
            }
        }
    }

    /// Forgets `id`'s slot; a stream still open is reset (CANCEL), and what it held is
    /// given back.
    fn forget(&mut self, id: u32) {
        if let Some(slot) = self.slots.remove(&id) {
            let held: usize = slot.chunks.iter().map(Bytes::len).sum();
            self.core.release(id, held);
        }
        if self.core.is_open(id) {
            self.core.reset(id, Reason::CANCEL);
        }
        // (The core reports its own reset as an event, whose slot is gone already; a body
        // waiting to be sent on the stream learns that it ended.)
        self.events();
        self.kick();
    }
}

impl Arrival {
    /// Waits (as the reader) for more to arrive.
    fn wait<T>(&mut self, cx: &Context<'_>) -> Poll<T> {
        if !self
            .reader
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            self.reader = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    fn wake(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }
}

impl ClientConn {
    /// Opens a stream for a request once the server has room for it: `Ready(Err)` when the
    /// connection has ended (nothing of the request was sent).
    pub fn poll_open(
        &self,
        cx: &mut Context<'_>,
        req: (&http::Method, &http::Uri, &HeaderMap),
        end: bool,
    ) -> Poll<Result<u32, StreamError>> {
        let mut g = self.inner.lock();
        if let Some(why) = &g.lost {
            return Poll::Ready(Err(StreamError::Lost(why.clone())));
        }
        if !g.core.can_open() {
            // Going away (a GOAWAY, or closing): nothing of the request was sent, and it
            // goes to another connection. Otherwise it waits for a stream to end.
            if g.core.is_going_away() || self.closed.load(Relaxed) {
                return Poll::Ready(Err(StreamError::Lost("the connection is closing".into())));
            }
            g.openers.push(cx.waker().clone());
            return Poll::Pending;
        }
        let Ok(id) = g.core.send_request(req.0, req.1, req.2, end) else {
            return Poll::Ready(Err(StreamError::Lost("the connection is closing".into())));
        };
        g.slots.insert(id, Arrival::default());
        g.kick();
        Poll::Ready(Ok(id))
    }

    /// The answer's head of stream `id` and its body's length (`Content-Length`), once it came.
    pub fn poll_answer(
        &self,
        cx: &mut Context<'_>,
        id: u32,
    ) -> Poll<Result<(http::response::Parts, Option<u64>), StreamError>> {
        let mut g = self.inner.lock();
        let Some(slot) = g.slots.get_mut(&id) else {
            return Poll::Ready(Err(StreamError::Reset(Reason::CANCEL)));
        };
        if let Some(head) = slot.head.take() {
            return Poll::Ready(Ok(head));
        }
        if let Some(e) = &slot.failed {
            return Poll::Ready(Err(e.clone()));
        }
        slot.wait(cx)
    }

    /// Sends a piece of the request's body on `id` (its end with it when `end`), once the
    /// stream has room.
    fn poll_send(
        &self,
        cx: &mut Context<'_>,
        id: u32,
        piece: &mut Option<BodyPiece>,
    ) -> Poll<Result<(), StreamError>> {
        let mut g = self.inner.lock();
        let Some(slot) = g.slots.get_mut(&id) else {
            return Poll::Ready(Err(StreamError::Reset(Reason::CANCEL)));
        };
        if let Some(e) = &slot.failed {
            return Poll::Ready(Err(e.clone()));
        }
        if g.core.buffered(id) >= ROOM {
            g.senders.push(cx.waker().clone());
            return Poll::Pending;
        }
        let sent = match piece.take() {
            Some(BodyPiece::Data(d, end)) => g.core.send_data(id, d, end),
            Some(BodyPiece::Trailers(t)) => g.core.send_trailers(id, t),
            None => Ok(()),
        };
        g.kick();
        // A stream the server ended (it answered, and reset the rest with NO_ERROR) takes
        // no more: the sending stops there.
        Poll::Ready(sent.map_err(|_| StreamError::Reset(Reason::NO_ERROR)))
    }

    /// Resets `id` (the request's body failed).
    fn reset(&self, id: u32, reason: Reason) {
        let mut g = self.inner.lock();
        if g.core.is_open(id) {
            g.core.reset(id, reason);
        }
        g.kick();
    }

    /// The next piece of stream `id`'s answer body: data, then the trailers.
    fn poll_body(
        &self,
        cx: &mut Context<'_>,
        id: u32,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamError>>> {
        let mut g = self.inner.lock();
        let g = &mut *g;
        let Some(slot) = g.slots.get_mut(&id) else {
            return Poll::Ready(None);
        };
        if let Some(d) = slot.chunks.pop_front() {
            let before = g.core.wants_write();
            g.core.release(id, d.len());
            if g.core.wants_write() > before {
                g.kick();
            }
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        if let Some(t) = slot.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(t))));
        }
        if slot.end {
            return Poll::Ready(None);
        }
        if let Some(e) = &slot.failed {
            return Poll::Ready(Some(Err(e.clone())));
        }
        slot.wait(cx)
    }

    /// Whether stream `id`'s answer has nothing more to give.
    fn body_ended(&self, id: u32) -> bool {
        let g = self.inner.lock();
        g.slots
            .get(&id)
            .is_none_or(|s| s.end && s.chunks.is_empty() && s.trailers.is_none())
    }

    /// Lets stream `id` go: its answer is no longer read (reset if it is still coming).
    fn forget(&self, id: u32) {
        self.inner.lock().forget(id);
    }
}

/// A piece of a request body on its way to a stream.
enum BodyPiece {
    Data(Bytes, bool),
    Trailers(HeaderMap),
}

/// Sends `body` on stream `id` of `conn`, its trailers included, and ends the stream. A body
/// that fails resets the stream with `failed`; a stream the server reset or ended stops the
/// sending.
pub(crate) async fn send_body<B>(mut body: B, conn: Arc<ClientConn>, id: u32, failed: Reason)
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        let piece = match frame {
            None => BodyPiece::Data(Bytes::new(), true),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "a body sent over HTTP/2 failed; resetting its stream");
                conn.reset(id, failed);
                return;
            }
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => BodyPiece::Data(d, body.is_end_stream()),
                Err(f) => match f.into_trailers() {
                    Ok(t) => BodyPiece::Trailers(t),
                    Err(_) => continue,
                },
            },
        };
        let last = matches!(piece, BodyPiece::Data(_, true) | BodyPiece::Trailers(_));
        let mut piece = Some(piece);
        if std::future::poll_fn(|cx| conn.poll_send(cx, id, &mut piece))
            .await
            .is_err()
            || last
        {
            return;
        }
    }
}

/// The body of a server's answer on stream `id`: its data as the proxy reads it (the window
/// given back as it goes), then its trailers. Dropped before its end, it resets the stream.
pub struct H2Recv {
    conn: Arc<ClientConn>,
    id: u32,
    /// The answer's `Content-Length`, if it gave one.
    length: Option<u64>,
    /// Data bytes taken so far.
    taken: u64,
    done: bool,
    /// The answer's place on the server connection, given back with the body.
    _place: Option<Stream>,
}

impl std::fmt::Debug for H2Recv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Recv").field("id", &self.id).finish()
    }
}

impl H2Recv {
    /// The body of stream `id` on `conn`, `length` bytes long if its answer said so, holding
    /// `place` on the connection until it is dropped.
    pub fn new(conn: Arc<ClientConn>, id: u32, length: Option<u64>, place: Option<Stream>) -> Self {
        H2Recv {
            conn,
            id,
            length,
            taken: 0,
            done: false,
            _place: place,
        }
    }

    /// The data bytes still to come, when the server said how many it sends.
    pub fn remaining(&self) -> Option<u64> {
        self.length.map(|n| n.saturating_sub(self.taken))
    }

    /// Whether nothing more (not even trailers) is to come.
    pub fn is_end_stream(&self) -> bool {
        self.done || self.conn.body_ended(self.id)
    }

    /// The next frame: data, then the trailers; `None` at the end.
    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let r = ready!(self.conn.poll_body(cx, self.id));
        match &r {
            Some(Ok(f)) => {
                if let Some(d) = f.data_ref() {
                    self.taken += d.len() as u64;
                } else {
                    self.done = true;
                }
            }
            None | Some(Err(_)) => self.done = true,
        }
        Poll::Ready(r)
    }

    /// Reads and drops the rest (its window given back) until its end, an error, `max`
    /// bytes, or `idle` without data; whether it reached its end.
    pub async fn discard(&mut self, max: usize, idle: Option<Duration>) -> bool {
        let mut left = max;
        while left > 0 {
            let next = std::future::poll_fn(|cx| self.poll_frame(cx));
            let next = match idle {
                Some(idle) => tokio::time::timeout(idle, next).await.ok().flatten(),
                None => next.await,
            };
            match next {
                Some(Ok(f)) => left = left.saturating_sub(f.data_ref().map_or(0, Bytes::len)),
                Some(Err(_)) => return false,
                None => return true,
            }
        }
        false
    }
}

impl Drop for H2Recv {
    fn drop(&mut self) {
        self.conn.forget(self.id);
    }
}

/// The answer to stream `id`: its head, when it comes. Dropped before, it resets the stream.
pub struct Answer {
    conn: Arc<ClientConn>,
    id: u32,
    /// The answer came (or failed): nothing to reset.
    settled: bool,
}

impl Answer {
    /// The answer to stream `id` of `conn`.
    pub fn new(conn: Arc<ClientConn>, id: u32) -> Self {
        Answer {
            conn,
            id,
            settled: false,
        }
    }

    /// The stream, for the answer's body.
    pub fn stream(&self) -> (Arc<ClientConn>, u32) {
        (self.conn.clone(), self.id)
    }

    /// Whether the answer came (or failed).
    pub fn is_settled(&self) -> bool {
        self.settled
    }

    /// Lets the answer go without resetting its stream (the body has it).
    pub fn settle(mut self) {
        self.settled = true;
    }
}

impl std::future::Future for Answer {
    type Output = Result<(http::response::Parts, Option<u64>), StreamError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let r = ready!(self.conn.poll_answer(cx, self.id));
        self.settled = true;
        if r.is_err() {
            self.conn.forget(self.id);
        }
        Poll::Ready(r)
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if !self.settled {
            self.conn.forget(self.id);
        }
    }
}

/// Drives a connection's frames until it ends: the server closed it, it failed, every handle
/// and stream is gone (then it closes with a GOAWAY), or a ping went unanswered.
async fn run(mut io: ServerStream, conn: Arc<ClientConn>, addr: SocketAddr) {
    let mut ping_at = tokio::time::Instant::now() + KEEP_ALIVE;
    let mut pong_by: Option<tokio::time::Instant> = None;
    let mut timer = Box::pin(tokio::time::sleep_until(ping_at));
    let why = std::future::poll_fn(|cx| {
        let mut g = conn.inner.lock();
        let g = &mut *g;
        if !g.task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            g.task = Some(cx.waker().clone());
        }
        loop {
            let mut progressed = false;
            // Read what the server sent, unless much is waiting to be written.
            while g.core.wants_write() < (1 << 20) {
                match tokio_util::io::poll_read_buf(Pin::new(&mut io), cx, g.core.read_buf()) {
                    Poll::Ready(Ok(n)) => {
                        if n == 0 {
                            return Poll::Ready("the server closed the connection".to_string());
                        }
                        progressed = true;
                        let r = g.core.handle_read();
                        g.events();
                        if let Err(e) = r {
                            return Poll::Ready(e.to_string());
                        }
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(e.to_string()),
                    Poll::Pending => break,
                }
            }
            // A pong ends the wait for one.
            if std::mem::take(&mut g.pong) {
                pong_by = None;
            }
            // No handle left and no stream open: the connection is closed politely.
            if g.unheld && g.slots.is_empty() {
                g.core.graceful_shutdown();
            }
            while g.core.wants_write() > 0 {
                let mut iov = [std::io::IoSlice::new(&[]); 64];
                let n = g.core.transmit(&mut iov);
                match Pin::new(&mut io).poll_write_vectored(cx, &iov[..n]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready("the socket took no bytes".into()),
                    Poll::Ready(Ok(n)) => {
                        g.core.advance(n);
                        progressed = true;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(e.to_string()),
                    Poll::Pending => break,
                }
            }
            if g.core.is_done() && g.core.wants_write() == 0 {
                return Poll::Ready(if g.unheld {
                    String::new()
                } else {
                    "the server went away".to_string()
                });
            }
            // The keep-alive ping, and the wait for its answer.
            if timer.as_mut().poll(cx).is_ready() {
                let now = tokio::time::Instant::now();
                if pong_by.is_some_and(|by| now >= by) {
                    return Poll::Ready("the server did not answer a ping".to_string());
                }
                if now >= ping_at {
                    if g.core.ping() {
                        pong_by = Some(now + PING_TIMEOUT);
                    }
                    ping_at = now + KEEP_ALIVE;
                }
                let next = pong_by.map_or(ping_at, |by| by.min(ping_at));
                timer.as_mut().reset(next);
                progressed = true;
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    })
    .await;
    conn.closed.store(true, Relaxed);
    let mut g = conn.inner.lock();
    if !why.is_empty() {
        tracing::debug!(server = %addr, error = %why, "HTTP/2 server connection ended");
    }
    g.lose(if why.is_empty() {
        "the connection was closed"
    } else {
        &why
    });
}
