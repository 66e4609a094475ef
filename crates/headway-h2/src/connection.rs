//! One HTTP/2 connection (RFC 9113), either side, sans I/O.
//!
//! [`Connection`] owns the connection's state — the settings of both sides, the HPACK
//! contexts, every open stream with its two flow-control windows, the frames waiting to be
//! written — and makes every protocol decision. A shell (the proxy's `h2_server` for
//! clients, `upstream::h2` for servers) does the rest: it reads the socket into
//! [`Connection::read_buf`] and calls [`Connection::handle_read`], takes the [`Event`]s
//! ([`Connection::poll_event`]), and writes [`Connection::transmit`]'s bytes, calling
//! [`Connection::advance`] with what the socket took. It stops reading while
//! [`Connection::wants_write`] holds a lot (so a peer that does not read cannot make the
//! queue grow), and closes the socket once [`Connection::is_done`].
//!
//! - The server side ([`Connection::new`]) answers requests with
//!   [`Connection::send_response`], [`Connection::send_data`], [`Connection::send_trailers`]
//!   and [`Connection::reset`].
//! - The client side ([`Connection::client`]) opens streams with
//!   [`Connection::send_request`] while [`Connection::can_open`], sends bodies the same way,
//!   and gets [`Event::Response`]s; streams past a GOAWAY come back as
//!   [`Event::Unprocessed`].
//!
//! Either side gives back what it consumed of a body ([`Connection::release`]).
//!
//! What the core enforces: the client preface, frame sizes, stream identifiers and states,
//! header blocks with their CONTINUATIONs in one piece, malformed requests and answers (RFC
//! 9113 §8.1.1: pseudo-header rules, connection-specific fields, `Content-Length` against
//! the data) as stream errors, both directions' flow control, SETTINGS and PING
//! acknowledgements, SETTINGS_MAX_CONCURRENT_STREAMS both ways (REFUSED_STREAM past this
//! side's), an oversized request header list (a `431` answer, as RFC 9113 §10.5.1 suggests),
//! a bound on streams reset by the client (CVE-2023-44487, "rapid reset": ENHANCE_YOUR_CALM
//! past it), and graceful shutdown with GOAWAY. Not here: priorities (read and ignored, RFC
//! 9113 §5.3.2), server push (never sent, refused on the client side by SETTINGS_ENABLE_PUSH
//! = 0, and a client's PUSH_PROMISE is a connection error), the extended CONNECT protocol.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{BufMut as _, Bytes, BytesMut};
use http::{header, HeaderMap, HeaderName, Method, StatusCode, Uri, Version};

use crate::frame::{self, flag, kind, Head, Reason, Setting, HEADER_LEN, PREFACE};
use crate::hpack::{self, Field, Pseudo};
use crate::stream_map::StreamMap;

/// A server connection's own settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE).
    pub window: u32,
    /// The connection's receive window (all streams together; at least 65,535).
    pub connection_window: u32,
    /// The largest header list a request may carry (SETTINGS_MAX_HEADER_LIST_SIZE, counted as
    /// RFC 9113 §6.5.2 does); a larger one is answered `431`.
    pub max_header_list: usize,
    /// Streams the client may reset before the connection is closed with ENHANCE_YOUR_CALM;
    /// every stream that completes normally earns one back.
    pub max_resets: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_concurrent_streams: 256,
            window: 1 << 20,
            connection_window: 1 << 20,
            max_header_list: 16 << 10,
            max_resets: 1000,
        }
    }
}

/// What happened on the connection, for the shell.
#[derive(Debug)]
pub enum Event {
    /// A new request. Its body follows as [`Event::Data`] (and maybe [`Event::Trailers`])
    /// unless `end`.
    Request {
        /// The stream it came on.
        stream: u32,
        /// The request's head (version HTTP/2; the URI absolute when `:authority` was given).
        head: http::request::Parts,
        /// Its body's length, from its `Content-Length` (which the core holds the body to).
        length: Option<u64>,
        /// No body follows.
        end: bool,
    },
    /// An answer's head on a stream this side opened (client side; informational `1xx`
    /// answers are skipped). Its body follows as [`Event::Data`] unless `end`.
    Response {
        /// The stream.
        stream: u32,
        /// The answer's head (version HTTP/2).
        head: http::response::Parts,
        /// Its body's length, from its `Content-Length` (which the core holds the body to).
        length: Option<u64>,
        /// No body follows.
        end: bool,
    },
    /// A stream this side opened that the server will not process: past the last stream of
    /// its GOAWAY (RFC 9113 §6.8), so it may be sent again elsewhere.
    Unprocessed {
        /// The stream.
        stream: u32,
    },
    /// The answer to this side's PING.
    Pong,
    /// A piece of a request's or answer's body. Give its length back with
    /// [`Connection::release`] once consumed, or the peer stops sending.
    Data {
        /// The stream.
        stream: u32,
        /// The bytes (maybe empty when it only ends the body).
        data: Bytes,
        /// The body ends here.
        end: bool,
    },
    /// A body's trailers; it ends with them.
    Trailers {
        /// The stream.
        stream: u32,
        /// The trailer fields.
        trailers: HeaderMap,
    },
    /// The stream ended abnormally: the peer reset it (REFUSED_STREAM: unprocessed, RFC 9113
    /// §8.7), or it broke a rule and this side reset it. Nothing more is sent on it.
    Reset {
        /// The stream.
        stream: u32,
        /// The error code.
        reason: Reason,
    },
}

/// The connection failed; a GOAWAY with the reason was queued to be written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnError {
    /// The client broke the protocol.
    #[error("the client broke HTTP/2 ({reason}): {what}")]
    Protocol {
        /// The GOAWAY's error code.
        reason: Reason,
        /// What it did.
        what: &'static str,
    },
    /// The client went away with an error of its own.
    #[error("the client sent GOAWAY ({0})")]
    GoAway(Reason),
}

/// A stream that cannot take what was asked: it was reset or closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the HTTP/2 stream is closed")]
pub struct StreamGone;

/// One open stream.
#[derive(Debug)]
struct Stream {
    /// The client ended its side (END_STREAM).
    recv_closed: bool,
    /// This side ended its side.
    send_closed: bool,
    /// Data this side may still send (the client's grant).
    send_window: i64,
    /// Data the client may still send (this side's grant).
    recv_window: i64,
    /// Data the shell consumed and this side has not granted again yet.
    unreleased: u32,
    /// Data queued by the shell that the windows held back, and how it ends.
    pending: VecDeque<Bytes>,
    pending_len: usize,
    pending_end: bool,
    pending_trailers: Option<HeaderMap>,
    /// The request's `Content-Length`, and the data received so far.
    length: Option<u64>,
    received: u64,
    /// The peer's head arrived (always, on the server side).
    got_head: bool,
}

/// A header block arriving in pieces (HEADERS then CONTINUATIONs).
#[derive(Debug)]
struct Partial {
    stream: u32,
    end_stream: bool,
    block: BytesMut,
}

/// The bytes waiting to be written: small frames gathered in one buffer, large data payloads
/// kept as the shell gave them (no copy).
#[derive(Debug, Default)]
struct Out {
    queue: VecDeque<Bytes>,
    tail: BytesMut,
    /// The bytes in `queue`.
    queued: usize,
}

impl Out {
    /// The bytes waiting, in all.
    fn len(&self) -> usize {
        self.queued + self.tail.len()
    }

    /// Moves the frames gathered so far to the queue.
    fn seal(&mut self) {
        if !self.tail.is_empty() {
            let b = self.tail.split().freeze();
            self.queued += b.len();
            self.queue.push_back(b);
        }
    }

    /// Queues `b` after everything before it, as it is.
    fn push(&mut self, b: Bytes) {
        self.seal();
        self.queued += b.len();
        self.queue.push_back(b);
    }
}

/// Payloads up to this size are copied into the frame buffer; larger ones are written from
/// their own buffers.
const COPY_MAX: usize = 1024;

/// Which end of the connection this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Server,
    Client,
}

/// One HTTP/2 connection, either side (see the module doc for the call order).
#[derive(Debug)]
pub struct Connection {
    cfg: Config,
    role: Role,
    /// The client's next stream (client side).
    next_stream: u32,
    /// The streams the server lets this side open at once (client side; no limit until its
    /// SETTINGS say, RFC 9113 §6.5.2: a server with a lower one refuses the streams past it,
    /// and they are sent again).
    peer_max_streams: u32,
    /// A PING of this side's awaits its answer.
    pinging: bool,
    input: BytesMut,
    /// The client preface was read.
    preface: bool,
    decoder: hpack::Decoder,
    encoder: hpack::Encoder,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE.
    peer_window: i64,
    peer_max_frame: usize,
    /// The connection's windows: what this side may send, what the client may.
    send_window: i64,
    recv_window: i64,
    unreleased: u32,
    streams: StreamMap<Stream>,
    /// The highest stream the client opened.
    last_stream: u32,
    partial: Option<Partial>,
    events: VecDeque<Event>,
    out: Out,
    /// Streams with data held back by the connection's window, in order.
    blocked: VecDeque<u32>,
    /// GOAWAY was sent: no stream past the one it names is taken.
    going_away: Option<u32>,
    /// The connection failed (GOAWAY with an error queued, or received).
    failed: Option<ConnError>,
    /// Streams the client may still reset (see [`Config::max_resets`]).
    reset_budget: u32,
}

impl Connection {
    /// The server side of a connection with `cfg`; its SETTINGS (and the connection
    /// window's raise) are queued at once, before the client's preface is read (RFC 9113
    /// §3.4 allows it).
    pub fn new(cfg: Config) -> Self {
        Self::with_role(cfg, Role::Server)
    }

    /// The client side of a connection with `cfg` (`max_concurrent_streams` and
    /// `max_resets` do not apply): the preface and SETTINGS are queued at once, and streams
    /// may be opened right away ([`Connection::send_request`]).
    pub fn client(cfg: Config) -> Self {
        Self::with_role(cfg, Role::Client)
    }

    fn with_role(cfg: Config, role: Role) -> Self {
        let mut out = Out::default();
        let list = u32::try_from(cfg.max_header_list).unwrap_or(u32::MAX);
        if role == Role::Client {
            out.tail.put_slice(PREFACE);
            frame::write_settings(
                &mut out.tail,
                &[
                    Setting::EnablePush(0),
                    Setting::InitialWindowSize(cfg.window),
                    Setting::MaxHeaderListSize(list),
                ],
            );
        } else {
            frame::write_settings(
                &mut out.tail,
                &[
                    Setting::EnablePush(0),
                    Setting::MaxConcurrentStreams(cfg.max_concurrent_streams),
                    Setting::InitialWindowSize(cfg.window),
                    Setting::MaxHeaderListSize(list),
                ],
            );
        }
        // RFC 9113 §6.9.2: the connection's window starts at 65,535 whatever the settings say.
        let raise = i64::from(cfg.connection_window) - 65_535;
        if raise > 0 {
            frame::write_window_update(&mut out.tail, 0, raise as u32);
        }
        Connection {
            role,
            next_stream: 1,
            peer_max_streams: u32::MAX,
            pinging: false,
            decoder: hpack::Decoder::new(4096),
            encoder: hpack::Encoder::new(),
            peer_window: 65_535,
            peer_max_frame: frame::DEFAULT_MAX_FRAME,
            send_window: 65_535,
            recv_window: i64::from(cfg.connection_window.max(65_535)),
            unreleased: 0,
            streams: StreamMap::default(),
            last_stream: 0,
            partial: None,
            events: VecDeque::new(),
            out,
            blocked: VecDeque::new(),
            going_away: None,
            failed: None,
            reset_budget: cfg.max_resets,
            input: BytesMut::with_capacity(16 << 10),
            // A server sends no preface but its SETTINGS (RFC 9113 §3.4).
            preface: role == Role::Client,
            cfg,
        }
    }

    /// The buffer to read the socket into (then call [`Connection::handle_read`]).
    pub fn read_buf(&mut self) -> &mut BytesMut {
        if self.input.capacity() - self.input.len() < 4096 {
            self.input.reserve(16 << 10);
        }
        &mut self.input
    }

    /// Handles the bytes read into [`Connection::read_buf`]: every whole frame in it.
    pub fn handle_read(&mut self) -> Result<(), ConnError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.frames();
        if let Err(e) = &r {
            self.fail(e.clone());
        }
        r
    }

    fn frames(&mut self) -> Result<(), ConnError> {
        if !self.preface {
            if self.input.len() < PREFACE.len() {
                return if PREFACE.starts_with(&self.input) {
                    Ok(())
                } else {
                    Err(proto(
                        Reason::PROTOCOL_ERROR,
                        "not the HTTP/2 connection preface",
                    ))
                };
            }
            if &self.input[..PREFACE.len()] != PREFACE {
                return Err(proto(
                    Reason::PROTOCOL_ERROR,
                    "not the HTTP/2 connection preface",
                ));
            }
            let _ = self.input.split_to(PREFACE.len());
            self.preface = true;
        }
        while let Some(h) = Head::parse(&self.input) {
            if h.len > frame::DEFAULT_MAX_FRAME {
                return Err(proto(
                    Reason::FRAME_SIZE_ERROR,
                    "a frame larger than 16 KiB",
                ));
            }
            if self.input.len() < HEADER_LEN + h.len {
                self.input.reserve(HEADER_LEN + h.len - self.input.len());
                break;
            }
            let _ = self.input.split_to(HEADER_LEN);
            let payload = self.input.split_to(h.len).freeze();
            self.frame(h, payload)?;
        }
        Ok(())
    }

    /// One frame from the client.
    fn frame(&mut self, h: Head, payload: Bytes) -> Result<(), ConnError> {
        // RFC 9113 §6.10: nothing may come between a HEADERS and its CONTINUATIONs.
        if let Some(p) = &self.partial {
            if h.kind != kind::CONTINUATION || h.stream != p.stream {
                return Err(proto(
                    Reason::PROTOCOL_ERROR,
                    "a header block was interrupted",
                ));
            }
        }
        match h.kind {
            kind::DATA => self.data(h, payload),
            kind::HEADERS => self.headers(h, payload),
            kind::PRIORITY => {
                if h.stream == 0 {
                    return Err(proto(Reason::PROTOCOL_ERROR, "PRIORITY on stream 0"));
                }
                if h.len != 5 {
                    // RFC 9113 §6.3: a stream error; the stream may not exist (yet).
                    self.reset(h.stream, Reason::FRAME_SIZE_ERROR);
                }
                Ok(())
            }
            kind::RST_STREAM => self.rst(h, &payload),
            kind::SETTINGS => self.settings(h, &payload),
            kind::PUSH_PROMISE => Err(proto(Reason::PROTOCOL_ERROR, "PUSH_PROMISE from a client")),
            kind::PING => {
                if h.stream != 0 {
                    return Err(proto(Reason::PROTOCOL_ERROR, "PING on a stream"));
                }
                let data: [u8; 8] = payload[..]
                    .try_into()
                    .map_err(|_| proto(Reason::FRAME_SIZE_ERROR, "PING of the wrong size"))?;
                if h.flags & flag::ACK == 0 {
                    frame::write_ping(&mut self.out.tail, true, data);
                } else if std::mem::take(&mut self.pinging) {
                    self.events.push_back(Event::Pong);
                }
                Ok(())
            }
            kind::GOAWAY => {
                if h.stream != 0 {
                    return Err(proto(Reason::PROTOCOL_ERROR, "GOAWAY on a stream"));
                }
                let (last, reason) =
                    frame::goaway(&payload).map_err(|e| proto(e.0, "bad GOAWAY"))?;
                // The peer opens (or takes) no more streams; those open finish. One that went
                // away with an error is done with the connection.
                self.going_away.get_or_insert(self.last_stream);
                if self.role == Role::Client {
                    // RFC 9113 §6.8: streams past `last` were not processed.
                    let mut gone: Vec<u32> = self
                        .streams
                        .keys()
                        .copied()
                        .filter(|&id| id > last)
                        .collect();
                    gone.sort_unstable();
                    for id in gone {
                        self.streams.remove(&id);
                        self.blocked.retain(|&b| b != id);
                        self.events.push_back(Event::Unprocessed { stream: id });
                    }
                }
                if reason != Reason::NO_ERROR {
                    self.failed = Some(ConnError::GoAway(reason));
                }
                Ok(())
            }
            kind::WINDOW_UPDATE => self.window_update(h, &payload),
            kind::CONTINUATION => self.continuation(h, payload),
            // RFC 9113 §4.1: frames of unknown types are ignored.
            _ => Ok(()),
        }
    }

    fn data(&mut self, h: Head, payload: Bytes) -> Result<(), ConnError> {
        if h.stream == 0 {
            return Err(proto(Reason::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let flow = h.len as i64;
        if flow > self.recv_window {
            return Err(proto(
                Reason::FLOW_CONTROL_ERROR,
                "DATA past the connection's window",
            ));
        }
        self.recv_window -= flow;
        let data = frame::strip_padding(h.flags, payload).map_err(|e| proto(e.0, "bad padding"))?;
        // Padding is given back at once; the data once the shell consumed it.
        let padding = h.len - data.len();
        let end = h.flags & flag::END_STREAM != 0;
        let Some(s) = self.streams.get_mut(&h.stream) else {
            if h.stream > self.last_stream {
                return Err(proto(Reason::PROTOCOL_ERROR, "DATA on an idle stream"));
            }
            // A stream closed or reset already: its data still counted against the
            // connection's window, which is given back.
            self.release_conn(h.len as u32);
            return Ok(());
        };
        if s.recv_closed || !s.got_head {
            // Data after the stream's end, or (client side) before its answer's head.
            let reason = if s.recv_closed {
                Reason::STREAM_CLOSED
            } else {
                Reason::PROTOCOL_ERROR
            };
            self.release_conn(h.len as u32);
            self.reset(h.stream, reason);
            return Ok(());
        }
        if flow > s.recv_window {
            self.release_conn(h.len as u32);
            self.reset(h.stream, Reason::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        s.recv_window -= flow;
        s.received += data.len() as u64;
        // RFC 9113 §8.1.1: data that does not match the Content-Length is malformed.
        // (An answer to HEAD, or a 304, says a length and has no data: on the client side
        // only data past the length is malformed.)
        let short = end && self.role == Role::Server;
        if s.length
            .is_some_and(|n| s.received > n || (short && s.received != n))
        {
            self.release_conn(h.len as u32);
            self.reset(h.stream, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        if end {
            s.recv_closed = true;
        }
        if padding > 0 {
            self.release(h.stream, padding);
        }
        self.events.push_back(Event::Data {
            stream: h.stream,
            data,
            end,
        });
        if end {
            self.close_if_done(h.stream);
        }
        Ok(())
    }

    fn headers(&mut self, h: Head, payload: Bytes) -> Result<(), ConnError> {
        if h.stream == 0 {
            return Err(proto(Reason::PROTOCOL_ERROR, "HEADERS on stream 0"));
        }
        let (fragment, dep) =
            frame::headers_fragment(h.flags, payload).map_err(|e| proto(e.0, "bad HEADERS"))?;
        if dep == Some(h.stream) {
            // RFC 9113 §5.3.1: a stream cannot depend on itself (a stream error).
            self.reset(h.stream, Reason::PROTOCOL_ERROR);
        }
        let end_stream = h.flags & flag::END_STREAM != 0;
        if h.flags & flag::END_HEADERS == 0 {
            let mut block = BytesMut::with_capacity(fragment.len() * 2);
            block.extend_from_slice(&fragment);
            self.partial = Some(Partial {
                stream: h.stream,
                end_stream,
                block,
            });
            return Ok(());
        }
        self.block(h.stream, end_stream, fragment)
    }

    fn continuation(&mut self, h: Head, payload: Bytes) -> Result<(), ConnError> {
        let Some(p) = self.partial.as_mut() else {
            return Err(proto(
                Reason::PROTOCOL_ERROR,
                "CONTINUATION without HEADERS",
            ));
        };
        // A block past the list size and then some is refused whole (CONTINUATION floods).
        if p.block.len() + payload.len() > self.cfg.max_header_list * 2 + 16_384 {
            return Err(proto(
                Reason::ENHANCE_YOUR_CALM,
                "a header block too large to read",
            ));
        }
        p.block.extend_from_slice(&payload);
        if h.flags & flag::END_HEADERS == 0 {
            return Ok(());
        }
        let p = self.partial.take().expect("checked above");
        self.block(p.stream, p.end_stream, p.block.freeze())
    }

    /// A whole header block: a request's head, or its trailers.
    fn block(&mut self, id: u32, end_stream: bool, block: Bytes) -> Result<(), ConnError> {
        // Room for a typical request's or answer's fields at once (growing the map field by
        // field showed in profiles).
        let mut fields = Fields {
            method: None,
            scheme: None,
            authority: None,
            path: None,
            status: None,
            headers: HeaderMap::with_capacity(16),
            length: Ok(None),
            pseudo_seen: false,
            regular_seen: false,
            malformed: false,
        };
        let decoded = self
            .decoder
            .decode(&block, self.cfg.max_header_list, |f| fields.push(f))
            .map_err(|_| proto(Reason::COMPRESSION_ERROR, "a header block did not decode"))?;
        if let Some(s) = self.streams.get_mut(&id).filter(|s| !s.got_head) {
            // Client side: the answer's head.
            if decoded.too_large || decoded.malformed || fields.malformed {
                self.reset(id, Reason::PROTOCOL_ERROR);
                return Ok(());
            }
            let length = fields.length;
            let Ok(head) = fields.response() else {
                self.reset(id, Reason::PROTOCOL_ERROR);
                return Ok(());
            };
            if head.status.is_informational() {
                // RFC 9113 §8.1: interim answers precede the final one; they are skipped
                // (one that ends the stream is malformed).
                if end_stream {
                    self.reset(id, Reason::PROTOCOL_ERROR);
                }
                return Ok(());
            }
            s.got_head = true;
            s.length = length.ok().flatten();
            if end_stream {
                s.recv_closed = true;
            }
            self.events.push_back(Event::Response {
                stream: id,
                head,
                length: s.length,
                end: end_stream,
            });
            if end_stream {
                self.close_if_done(id);
            }
            return Ok(());
        }
        if let Some(s) = self.streams.get_mut(&id) {
            // Trailers (RFC 9113 §8.1): they end the stream and carry no pseudo-fields.
            if s.recv_closed {
                self.reset(id, Reason::STREAM_CLOSED);
                return Ok(());
            }
            if !end_stream || fields.pseudo_seen || decoded.malformed || fields.malformed {
                self.reset(id, Reason::PROTOCOL_ERROR);
                return Ok(());
            }
            if self.role == Role::Server && s.length.is_some_and(|n| s.received != n) {
                self.reset(id, Reason::PROTOCOL_ERROR);
                return Ok(());
            }
            s.recv_closed = true;
            self.events.push_back(Event::Trailers {
                stream: id,
                trailers: fields.headers,
            });
            self.close_if_done(id);
            return Ok(());
        }
        if id <= self.last_stream {
            // A stream closed already (trailers after a reset, say): its block was decoded
            // to keep the table in step, and is dropped.
            return Ok(());
        }
        if self.role == Role::Client {
            return Err(proto(Reason::PROTOCOL_ERROR, "a server opened a stream"));
        }
        if id % 2 == 0 {
            return Err(proto(
                Reason::PROTOCOL_ERROR,
                "a client opened an even stream",
            ));
        }
        self.last_stream = id;
        if self.going_away.is_some_and(|last| id > last) {
            // RFC 9113 §6.8: streams past the GOAWAY's last are ignored.
            return Ok(());
        }
        if self.streams.len() >= self.cfg.max_concurrent_streams as usize {
            self.write_rst(id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        let mut s = self.new_stream(end_stream, false);
        s.got_head = true;
        if decoded.too_large {
            // RFC 9113 §10.5.1: a 431 tells the client why.
            s.recv_closed = true;
            self.streams.insert(id, s);
            let mut head = http::response::Response::new(()).into_parts().0;
            head.status = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
            let _ = self.send_response(id, &head, true);
            if let Some(s) = self.streams.get(&id) {
                if !s.recv_closed {
                    self.write_rst(id, Reason::NO_ERROR);
                }
            }
            self.streams.remove(&id);
            return Ok(());
        }
        let length = fields.length;
        let head = match fields.request(decoded.malformed) {
            Ok(head) => head,
            Err(()) => {
                self.write_rst(id, Reason::PROTOCOL_ERROR);
                return Ok(());
            }
        };
        s.length = match length {
            Ok(n) => n,
            Err(BadLength) => {
                self.write_rst(id, Reason::PROTOCOL_ERROR);
                return Ok(());
            }
        };
        if end_stream && s.length.is_some_and(|n| n != 0) {
            self.write_rst(id, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        let length = s.length;
        self.streams.insert(id, s);
        self.events.push_back(Event::Request {
            stream: id,
            head,
            length,
            end: end_stream,
        });
        Ok(())
    }

    fn rst(&mut self, h: Head, payload: &[u8]) -> Result<(), ConnError> {
        if h.stream == 0 {
            return Err(proto(Reason::PROTOCOL_ERROR, "RST_STREAM on stream 0"));
        }
        let reason = frame::rst_reason(payload).map_err(|e| proto(e.0, "bad RST_STREAM"))?;
        if h.stream > self.last_stream {
            return Err(proto(
                Reason::PROTOCOL_ERROR,
                "RST_STREAM on an idle stream",
            ));
        }
        if self.streams.remove(&h.stream).is_some() {
            self.blocked.retain(|&b| b != h.stream);
            if self.role == Role::Server {
                self.reset_budget = self.reset_budget.saturating_sub(1);
            }
            if self.reset_budget == 0 {
                return Err(proto(Reason::ENHANCE_YOUR_CALM, "too many streams reset"));
            }
            self.events.push_back(Event::Reset {
                stream: h.stream,
                reason,
            });
        }
        Ok(())
    }

    fn settings(&mut self, h: Head, payload: &[u8]) -> Result<(), ConnError> {
        if h.stream != 0 {
            return Err(proto(Reason::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if h.flags & flag::ACK != 0 {
            if !payload.is_empty() {
                return Err(proto(
                    Reason::FRAME_SIZE_ERROR,
                    "a SETTINGS ack with a payload",
                ));
            }
            return Ok(());
        }
        let list = frame::settings(payload).map_err(|e| proto(e.0, "bad SETTINGS"))?;
        for s in list {
            match s {
                Setting::InitialWindowSize(v) => {
                    // RFC 9113 §6.9.2: every stream's window moves by the difference.
                    let delta = i64::from(v) - self.peer_window;
                    self.peer_window = i64::from(v);
                    for s in self.streams.values_mut() {
                        s.send_window += delta;
                        if s.send_window > 0x7fff_ffff {
                            return Err(proto(
                                Reason::FLOW_CONTROL_ERROR,
                                "SETTINGS took a window past 2^31-1",
                            ));
                        }
                    }
                    if delta > 0 {
                        let ids: Vec<u32> = self.streams.keys().copied().collect();
                        for id in ids {
                            self.flush_stream(id);
                        }
                    }
                }
                Setting::MaxFrameSize(v) => self.peer_max_frame = v as usize,
                Setting::MaxConcurrentStreams(v) => self.peer_max_streams = v,
                // This side's encoder never uses the dynamic table, so the table size the
                // client allows does not matter; push is never used.
                _ => {}
            }
        }
        frame::write_settings_ack(&mut self.out.tail);
        Ok(())
    }

    fn window_update(&mut self, h: Head, payload: &[u8]) -> Result<(), ConnError> {
        let inc = frame::window_increment(payload).map_err(|e| proto(e.0, "bad WINDOW_UPDATE"))?;
        if h.stream == 0 {
            if inc == 0 {
                return Err(proto(Reason::PROTOCOL_ERROR, "a WINDOW_UPDATE of 0"));
            }
            self.send_window += i64::from(inc);
            if self.send_window > 0x7fff_ffff {
                return Err(proto(Reason::FLOW_CONTROL_ERROR, "a window past 2^31-1"));
            }
            let mut n = self.blocked.len();
            while n > 0 && self.send_window > 0 {
                n -= 1;
                if let Some(id) = self.blocked.pop_front() {
                    self.flush_stream(id);
                }
            }
            return Ok(());
        }
        if h.stream > self.last_stream {
            return Err(proto(
                Reason::PROTOCOL_ERROR,
                "WINDOW_UPDATE on an idle stream",
            ));
        }
        let Some(s) = self.streams.get_mut(&h.stream) else {
            return Ok(());
        };
        if inc == 0 {
            self.reset(h.stream, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        s.send_window += i64::from(inc);
        if s.send_window > 0x7fff_ffff {
            self.reset(h.stream, Reason::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        self.flush_stream(h.stream);
        Ok(())
    }

    /// Whether a stream may be opened now (client side): the connection is up, not going
    /// away, and the server's stream limit has room.
    pub fn can_open(&self) -> bool {
        self.role == Role::Client
            && self.failed.is_none()
            && self.going_away.is_none()
            && self.next_stream < 0x7fff_ffff
            && self.streams.len() < self.peer_max_streams as usize
    }

    /// Opens a stream with a request's head (client side, when [`Connection::can_open`]):
    /// `:method`, `:scheme`, `:authority` and `:path` from `method` and `uri` (a CONNECT
    /// sends only its authority), then `headers` less those HTTP/2 forbids; `end`: no body
    /// follows. The stream's identifier.
    pub fn send_request(
        &mut self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        end: bool,
    ) -> Result<u32, StreamGone> {
        if !self.can_open() {
            return Err(StreamGone);
        }
        let id = self.next_stream;
        self.next_stream += 2;
        self.last_stream = id;
        let mut block = BytesMut::with_capacity(256);
        self.encoder
            .pseudo(Pseudo::Method, method.as_str().as_bytes(), &mut block);
        if method != Method::CONNECT {
            let scheme = uri.scheme_str().unwrap_or("http");
            self.encoder
                .pseudo(Pseudo::Scheme, scheme.as_bytes(), &mut block);
        }
        if let Some(a) = uri.authority() {
            self.encoder
                .pseudo(Pseudo::Authority, a.as_str().as_bytes(), &mut block);
        }
        if method != Method::CONNECT {
            let path = uri.path_and_query().map_or("/", |p| p.as_str());
            self.encoder
                .pseudo(Pseudo::Path, path.as_bytes(), &mut block);
        }
        for (name, value) in headers {
            if !forbidden(name) && name != header::HOST {
                self.encoder.header(name, value, &mut block);
            }
        }
        let max = self.peer_max_frame;
        frame::write_headers(&mut self.out.tail, id, &block, end, max);
        let s = self.new_stream(false, end);
        self.streams.insert(id, s);
        Ok(id)
    }

    /// A new stream's state, its windows from the settings; `recv_closed`: the peer ended
    /// its side already; `send_closed`: this side did.
    fn new_stream(&self, recv_closed: bool, send_closed: bool) -> Stream {
        Stream {
            recv_closed,
            send_closed,
            send_window: self.peer_window,
            recv_window: i64::from(self.cfg.window),
            unreleased: 0,
            pending: VecDeque::new(),
            pending_len: 0,
            pending_end: send_closed,
            pending_trailers: None,
            length: None,
            received: 0,
            got_head: false,
        }
    }

    /// Sends a PING (its answer comes as [`Event::Pong`]); `false` if one is unanswered yet.
    pub fn ping(&mut self) -> bool {
        if self.pinging {
            return false;
        }
        self.pinging = true;
        frame::write_ping(&mut self.out.tail, false, *b"headway!");
        true
    }

    /// Whether the connection takes no new streams any more: a GOAWAY was sent or received,
    /// or it failed.
    pub fn is_going_away(&self) -> bool {
        self.going_away.is_some() || self.failed.is_some()
    }

    /// The streams the server lets this side open at once (client side).
    pub fn peer_max_streams(&self) -> u32 {
        self.peer_max_streams
    }

    /// Whether `id` is still open (neither ended both ways nor reset).
    pub fn is_open(&self, id: u32) -> bool {
        self.streams.contains_key(&id)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Sends a request's answer head (`100`-class heads are informational and may precede
    /// it); `end`: no body follows.
    pub fn send_response(
        &mut self,
        id: u32,
        head: &http::response::Parts,
        end: bool,
    ) -> Result<(), StreamGone> {
        let s = self.streams.get_mut(&id).ok_or(StreamGone)?;
        if s.send_closed {
            return Err(StreamGone);
        }
        let informational = head.status.is_informational();
        let end = end && !informational;
        let mut block = BytesMut::with_capacity(128);
        self.encoder.status(head.status, &mut block);
        for (name, value) in &head.headers {
            if !forbidden(name) {
                self.encoder.header(name, value, &mut block);
            }
        }
        frame::write_headers(&mut self.out.tail, id, &block, end, self.peer_max_frame);
        if end {
            s.send_closed = true;
            self.close_if_done(id);
        }
        Ok(())
    }

    /// Queues a piece of an answer's body, sent as the client's windows allow; `end`: the
    /// body ends with it. Keep [`Connection::buffered`] small before queuing more.
    pub fn send_data(&mut self, id: u32, data: Bytes, end: bool) -> Result<(), StreamGone> {
        let s = self.streams.get_mut(&id).ok_or(StreamGone)?;
        if s.send_closed || s.pending_end {
            return Err(StreamGone);
        }
        s.pending_len += data.len();
        if !data.is_empty() {
            s.pending.push_back(data);
        }
        s.pending_end = end;
        self.flush_stream(id);
        Ok(())
    }

    /// Queues an answer's trailers, which end it (after the data queued before them).
    pub fn send_trailers(&mut self, id: u32, trailers: HeaderMap) -> Result<(), StreamGone> {
        let s = self.streams.get_mut(&id).ok_or(StreamGone)?;
        if s.send_closed || s.pending_end {
            return Err(StreamGone);
        }
        s.pending_end = true;
        s.pending_trailers = Some(trailers);
        self.flush_stream(id);
        Ok(())
    }

    /// The answer's data queued on `id` and not yet sent (held back by the windows).
    pub fn buffered(&self, id: u32) -> usize {
        self.streams.get(&id).map_or(0, |s| s.pending_len)
    }

    /// Gives back `n` bytes of `id`'s request body that the shell consumed: the client may
    /// send as much again (WINDOW_UPDATEs once half a window was consumed).
    pub fn release(&mut self, id: u32, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(s) = self.streams.get_mut(&id) {
            s.unreleased = s.unreleased.saturating_add(n);
            if !s.recv_closed && s.unreleased >= self.cfg.window / 2 {
                frame::write_window_update(&mut self.out.tail, id, s.unreleased);
                s.recv_window += i64::from(s.unreleased);
                s.unreleased = 0;
            }
        }
        self.release_conn(n);
    }

    fn release_conn(&mut self, n: u32) {
        self.unreleased = self.unreleased.saturating_add(n);
        if self.unreleased >= self.cfg.connection_window / 2 {
            frame::write_window_update(&mut self.out.tail, 0, self.unreleased);
            self.recv_window += i64::from(self.unreleased);
            self.unreleased = 0;
        }
    }

    /// Resets `id` with `reason` (nothing more is sent or taken on it).
    pub fn reset(&mut self, id: u32, reason: Reason) {
        if let Some(s) = self.streams.remove(&id) {
            if s.pending_len > 0 {
                self.blocked.retain(|&b| b != id);
            }
            self.events.push_back(Event::Reset { stream: id, reason });
        }
        self.write_rst(id, reason);
    }

    /// Ends the connection gracefully: no new streams (GOAWAY); those open finish.
    pub fn graceful_shutdown(&mut self) {
        if self.going_away.is_none() {
            self.going_away = Some(self.last_stream);
            let last = self.peer_last();
            frame::write_goaway(&mut self.out.tail, last, Reason::NO_ERROR, b"");
        }
    }

    /// Whether the connection has nothing more to do: it failed, or it is going away with no
    /// stream open. Write what is queued, then close. (A peer's end of the connection ends it
    /// at once: the shells stop there.)
    pub fn is_done(&self) -> bool {
        self.failed.is_some() || (self.going_away.is_some() && self.streams.is_empty())
    }

    /// The streams open.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Bytes queued to be written.
    pub fn wants_write(&self) -> usize {
        self.out.len()
    }

    /// Fills `dst` with the queued bytes, in order; how many slices it filled.
    pub fn transmit<'a>(&'a mut self, dst: &mut [IoSlice<'a>]) -> usize {
        self.out.seal();
        let mut n = 0;
        for (slot, b) in dst.iter_mut().zip(self.out.queue.iter()) {
            *slot = IoSlice::new(b);
            n += 1;
        }
        n
    }

    /// Drops the first `n` bytes of the queue (what the socket took).
    pub fn advance(&mut self, mut n: usize) {
        self.out.queued -= n.min(self.out.queued);
        while n > 0 {
            let Some(front) = self.out.queue.front_mut() else {
                break;
            };
            if front.len() > n {
                let _ = front.split_to(n);
                break;
            }
            n -= front.len();
            self.out.queue.pop_front();
        }
    }

    /// Sends what `id`'s windows allow of its queued data (and its end, and trailers).
    fn flush_stream(&mut self, id: u32) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let max = self.peer_max_frame;
        while let Some(front) = s.pending.front_mut() {
            let room = s.send_window.min(self.send_window);
            if room <= 0 {
                if self.send_window <= 0 && s.send_window > 0 && !self.blocked.contains(&id) {
                    self.blocked.push_back(id);
                }
                return;
            }
            let take = front.len().min(room as usize).min(max);
            let piece = if take == front.len() {
                s.pending.pop_front().expect("front exists")
            } else {
                front.split_to(take)
            };
            s.pending_len -= take;
            s.send_window -= take as i64;
            self.send_window -= take as i64;
            let last = s.pending.is_empty() && s.pending_end && s.pending_trailers.is_none();
            frame::write_data_head(&mut self.out.tail, id, take, last);
            if take <= COPY_MAX {
                self.out.tail.put_slice(&piece);
            } else {
                self.out.push(piece);
            }
            if last {
                s.send_closed = true;
            }
        }
        if s.pending_end && !s.send_closed {
            if let Some(t) = s.pending_trailers.take() {
                let mut block = BytesMut::with_capacity(64);
                for (name, value) in &t {
                    if !forbidden(name) {
                        self.encoder.header(name, value, &mut block);
                    }
                }
                frame::write_headers(&mut self.out.tail, id, &block, true, max);
            } else {
                frame::write_data_head(&mut self.out.tail, id, 0, true);
            }
            s.send_closed = true;
        }
        if s.send_closed {
            self.close_if_done(id);
        }
    }

    /// Forgets `id` once both sides ended it.
    fn close_if_done(&mut self, id: u32) {
        if self
            .streams
            .get(&id)
            .is_some_and(|s| s.send_closed && s.recv_closed)
        {
            self.streams.remove(&id);
            self.reset_budget = (self.reset_budget + 1).min(self.cfg.max_resets);
        }
    }

    /// The last stream the peer opened, as a GOAWAY names it (none on the client side: push
    /// is off).
    fn peer_last(&self) -> u32 {
        match self.role {
            Role::Server => self.last_stream,
            Role::Client => 0,
        }
    }

    fn write_rst(&mut self, id: u32, reason: Reason) {
        frame::write_rst(&mut self.out.tail, id, reason);
    }

    /// Fails the connection with `e`: GOAWAY, and every stream is dropped.
    fn fail(&mut self, e: ConnError) {
        if self.failed.is_some() {
            return;
        }
        if let ConnError::Protocol { reason, what } = &e {
            frame::write_goaway(
                &mut self.out.tail,
                self.last_stream,
                *reason,
                what.as_bytes(),
            );
        }
        self.failed = Some(e);
        self.streams.clear();
        self.blocked.clear();
    }
}

fn proto(reason: Reason, what: &'static str) -> ConnError {
    ConnError::Protocol { reason, what }
}

/// Connection-specific fields, which HTTP/2 forbids (RFC 9113 §8.2.2).
fn forbidden(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name == "keep-alive"
        || name == "proxy-connection"
}

/// A `Content-Length` field that is not one number (RFC 9110 §8.6), or several that differ.
/// A message with one never gets past the core; the lengths of those it passes on come with
/// their events ([`Event::Request`], [`Event::Response`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a malformed Content-Length")]
pub struct BadLength;

/// One `Content-Length` value, after `seen` (the one before it, if any): the length, or
/// [`BadLength`] when it is not a number or differs from `seen`.
fn one_length(seen: Option<u64>, v: &http::HeaderValue) -> Result<u64, BadLength> {
    let v: u64 = std::str::from_utf8(v.as_bytes())
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or(BadLength)?;
    if seen.is_some_and(|n| n != v) {
        return Err(BadLength);
    }
    Ok(v)
}

/// A request's fields as they are decoded.
struct Fields {
    method: Option<Bytes>,
    scheme: Option<Bytes>,
    authority: Option<Bytes>,
    path: Option<Bytes>,
    status: Option<Bytes>,
    headers: HeaderMap,
    /// The message's `Content-Length` (none, one number, or [`BadLength`]), read as the
    /// fields come.
    length: Result<Option<u64>, BadLength>,
    pseudo_seen: bool,
    regular_seen: bool,
    malformed: bool,
}

impl Fields {
    fn push(&mut self, f: Field) {
        match f {
            Field::Pseudo(kind, value) => {
                self.pseudo_seen = true;
                // RFC 9113 §8.3: pseudo-fields come first, once each.
                if self.regular_seen {
                    self.malformed = true;
                    return;
                }
                let slot = match kind {
                    Pseudo::Method => &mut self.method,
                    Pseudo::Scheme => &mut self.scheme,
                    Pseudo::Authority => &mut self.authority,
                    Pseudo::Path => &mut self.path,
                    Pseudo::Status => &mut self.status,
                    // `:protocol` (RFC 8441) is not supported.
                    Pseudo::Protocol => {
                        self.malformed = true;
                        return;
                    }
                };
                if slot.is_some() {
                    self.malformed = true;
                }
                *slot = Some(value);
            }
            Field::Header(name, value) => {
                self.regular_seen = true;
                // RFC 9113 §8.2.2: connection-specific fields, and TE other than "trailers".
                if forbidden(&name) || (name == header::TE && value != "trailers") {
                    self.malformed = true;
                    return;
                }
                if name == header::CONTENT_LENGTH {
                    if let Ok(seen) = self.length {
                        self.length = one_length(seen, &value).map(Some);
                    }
                }
                self.headers.append(name, value);
            }
        }
    }

    /// The answer's head, or `Err` when it is malformed (RFC 9113 §8.3.2: `:status` only).
    fn response(self) -> Result<http::response::Parts, ()> {
        if self.method.is_some()
            || self.scheme.is_some()
            || self.authority.is_some()
            || self.path.is_some()
        {
            return Err(());
        }
        let status = StatusCode::from_bytes(&self.status.ok_or(())?).map_err(|_| ())?;
        let (mut head, ()) = http::Response::new(()).into_parts();
        head.status = status;
        head.version = Version::HTTP_2;
        head.headers = self.headers;
        Ok(head)
    }

    /// The request's head, or `Err` when it is malformed (RFC 9113 §8.3.1).
    fn request(self, malformed: bool) -> Result<http::request::Parts, ()> {
        if malformed || self.malformed || self.status.is_some() {
            return Err(());
        }
        let method = Method::from_bytes(&self.method.ok_or(())?).map_err(|_| ())?;
        let mut uri = http::uri::Parts::default();
        if method == Method::CONNECT {
            // RFC 9113 §8.5: only `:authority`.
            if self.scheme.is_some() || self.path.is_some() {
                return Err(());
            }
            uri.authority = Some(
                http::uri::Authority::from_maybe_shared(self.authority.ok_or(())?)
                    .map_err(|_| ())?,
            );
        } else {
            let path = self.path.ok_or(())?;
            let scheme = self.scheme.ok_or(())?;
            if path.is_empty() {
                return Err(());
            }
            if let Some(a) = self.authority {
                uri.scheme = Some(http::uri::Scheme::try_from(&scheme[..]).map_err(|_| ())?);
                uri.authority = Some(http::uri::Authority::from_maybe_shared(a).map_err(|_| ())?);
            }
            // `OPTIONS *` has the path `*`.
            uri.path_and_query =
                Some(http::uri::PathAndQuery::from_maybe_shared(path).map_err(|_| ())?);
        }
        let uri = Uri::from_parts(uri).map_err(|_| ())?;
        let (mut head, ()) = http::Request::new(()).into_parts();
        head.method = method;
        head.uri = uri;
        head.version = Version::HTTP_2;
        head.headers = self.headers;
        Ok(head)
    }
}

#[cfg(test)]
mod tests;
