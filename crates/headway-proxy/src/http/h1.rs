//! The client side of HTTP/1 connections: the proxy's own loop for requests without a body,
//! hyper for everything else.
//!
//! Most requests an ADC sees carry no body (`GET`, `HEAD`, …). For them hyper's server
//! dispatcher does more than the proxy needs: general request and response state machines,
//! the request parsed twice (by the framing check, then by hyper), the service future moved
//! into hyper's box. This loop reads a request head with httparse (hyper's parser), hands the
//! request to the pipeline (`super::handle`) in the connection's own task, and writes the
//! answer with as few system calls as it can: head and body in one `writev` when the body is
//! ready. Counted with callgrind (user-space instructions per proxied keep-alive request,
//! 128 B answers, the same count of requests with and without the loop): 29,075 with hyper,
//! 27,078 with this loop. (Timed CPU per request moves by ±10 % between runs on a shared
//! 2-core machine, more than this change.)
//!
//! The first request it does not take — one with a body (`Content-Length`,
//! `Transfer-Encoding`), `Expect`, `CONNECT`, a version other than 1.0 and 1.1, a head it
//! cannot parse or one over the limits — and every later request of that connection go to
//! hyper, behind the framing check (`super::framing`), with the bytes already read handed over
//! first. The hard cases (bodies, 100-continue, 400 and 431 answers, smuggling defence) so keep
//! one implementation; the fast path only ever sees well-formed bodiless requests.
//!
//! A bodiless request for a protocol upgrade (a WebSocket's opening handshake) is taken: if
//! the server switches protocols, the loop writes the `101` and ends with the stream and the
//! bytes read past the request ([`Ending::Upgraded`]), which the tunnel carries from then on
//! (`super::tunnel`); if not, the answer says `Connection: close` and the loop ends with it, so
//! nothing the client sent after such a request is read as HTTP.
//!
//! The pure parts — [`take_head`] and [`write_head`] — are property-tested; [`serve`] is the
//! thin shell around them.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::task::Poll;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, Request, StatusCode, Uri, Version};
use hyper::body::Body as _;
use tokio::io::AsyncWriteExt as _;

use super::body::{ReqBody, RespBody};
use super::codec::{shared_fields, FieldSpans};
use super::{Conn, ConnActivity, Stream};

/// At most this many header fields are parsed on the fast path; a request with more goes to
/// hyper (which applies the configured limit).
pub const MAX_FAST_HEADERS: usize = 64;

/// Bytes asked of the kernel per read.
const READ_SIZE: usize = 8 * 1024;

/// An answer's body bytes gathered before they are written (they are written sooner when the
/// server's body is not ready).
const GATHER: usize = 256 * 1024;

/// What the bytes at the front of a connection's buffer hold. (Not boxed: it is moved once,
/// out of the parser.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Head {
    /// A complete bodiless request, taken off the buffer.
    Ready(Request<ReqBody>),
    /// The beginning of a head: more bytes are needed.
    Partial,
    /// A request this loop does not take (see the module docs); the buffer is unchanged.
    Other,
}

/// Takes a complete request head off the front of `buf` if it is one this loop serves:
/// HTTP/1.0 or 1.1, no body, no `Expect`, not `CONNECT`, within `max_head` bytes
/// and `max_headers` fields (at most [`MAX_FAST_HEADERS`]). Field values and the target refer
/// to the buffer's bytes, not copies. `names` is scratch space kept by the caller.
pub fn take_head(
    buf: &mut BytesMut,
    max_head: usize,
    max_headers: usize,
    names: &mut FieldSpans,
) -> Head {
    // Uninitialised slots: filling 64 empty headers (2 KiB) for every request cost more than
    // parsing a short head.
    let mut slots =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FAST_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let parsed =
        req.parse_with_uninit_headers(buf, &mut slots[..max_headers.min(MAX_FAST_HEADERS)]);
    let n = match parsed {
        Ok(httparse::Status::Complete(n)) if n <= max_head => n,
        Ok(httparse::Status::Partial) if buf.len() <= max_head => return Head::Partial,
        _ => return Head::Other,
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Head::Other;
    };
    let version = match version {
        1 => Version::HTTP_11,
        0 => Version::HTTP_10,
        _ => return Head::Other,
    };
    let method = match Method::from_bytes(method.as_bytes()) {
        Ok(m) if m != Method::CONNECT => m,
        _ => return Head::Other,
    };
    let base = buf.as_ptr() as usize;
    let offset = |s: &[u8]| (s.as_ptr() as usize - base, s.len());
    names.clear();
    for h in req.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) else {
            return Head::Other;
        };
        if name == header::CONTENT_LENGTH
            || name == header::TRANSFER_ENCODING
            || name == header::EXPECT
        {
            return Head::Other;
        }
        let (at, len) = offset(h.value);
        names.push((name, at, at + len));
    }
    let (target_at, target_len) = offset(target.as_bytes());
    let head = buf.split_to(n).freeze();
    match build(
        &head,
        method,
        version,
        target_at..target_at + target_len,
        names,
    ) {
        Some(r) => Head::Ready(r),
        None => {
            // Put the bytes back for hyper, which answers what is wrong with them.
            let mut back = BytesMut::with_capacity(head.len() + buf.len());
            back.put_slice(&head);
            back.put_slice(buf);
            *buf = back;
            Head::Other
        }
    }
}

/// The request of a parsed head (`None` if the target or a value is not valid for `http`).
fn build(
    head: &Bytes,
    method: Method,
    version: Version,
    target: std::ops::Range<usize>,
    names: &mut FieldSpans,
) -> Option<Request<ReqBody>> {
    let uri = Uri::from_maybe_shared(head.slice(target)).ok()?;
    // Room for the fields the proxy adds before forwarding (X-Forwarded-For, -Proto,
    // Forwarded, Host): growing the map rehashes it.
    let headers = shared_fields(head, names, 4)?;
    let mut req = Request::new(ReqBody::Empty);
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = version;
    *req.headers_mut() = headers;
    Some(req)
}

/// How an answer's body goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (`HEAD`, 204, 304, or an empty one).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the connection closes (an HTTP/1.0 client and a body of unknown length).
    UntilClose,
}

/// What a request asked that shapes its answer.
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    /// The request was `HEAD`.
    pub head: bool,
    /// The request's version (the answer is written in it).
    pub version: Version,
    /// The connection may stay open after the answer (the client asked, and nothing else
    /// closes it).
    pub keep_alive: bool,
}

/// Writes the status line and fields of an answer to a request `asked` into `out`: the
/// framing field for `body_len` (the body's exact length, if known) unless the answer has a
/// `Content-Length`, `Connection: close` or `keep-alive` as the connection's fate needs, and
/// a `Date` if the answer has none. Returns how the body is framed and whether the connection
/// stays open after it. (What hyper's server writes, so both paths answer alike.)
pub fn write_head(
    out: &mut BytesMut,
    status: StatusCode,
    headers: &HeaderMap,
    asked: Asked,
    body_len: Option<u64>,
    date: &[u8],
) -> (Framing, bool) {
    let mut keep = asked.keep_alive && !status.is_informational();
    let bodiless = matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
        || status.is_informational();
    let http10 = asked.version == Version::HTTP_10;
    out.reserve(64 + headers.len() * 40);
    out.put_slice(if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.put_slice(b"\r\n");
    let mut declared = None;
    let mut has_date = false;
    let mut said_close = false;
    let mut said_keep_alive = false;
    for (name, value) in headers {
        if name == header::TRANSFER_ENCODING {
            // The framing is this writer's to choose.
            continue;
        }
        if name == header::CONTENT_LENGTH {
            match std::str::from_utf8(value.as_bytes())
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
            {
                Some(n) if declared.is_none() && !bodiless => declared = Some(n),
                _ => continue,
            }
        } else if name == header::DATE {
            has_date = true;
        } else if name == header::CONNECTION {
            for t in super::headers::connection_options(std::iter::once(value)) {
                said_close |= t.eq_ignore_ascii_case("close");
                said_keep_alive |= t.eq_ignore_ascii_case("keep-alive");
            }
        }
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    keep &= !said_close;
    let framing = if bodiless {
        Framing::None
    } else if let Some(n) = declared {
        if asked.head || n == 0 {
            Framing::None
        } else {
            Framing::Length(n)
        }
    } else {
        match body_len {
            Some(n) => {
                if n > 0 || !asked.head {
                    put_length(out, n);
                }
                if asked.head || n == 0 {
                    Framing::None
                } else {
                    Framing::Length(n)
                }
            }
            None if asked.head => Framing::None,
            None if http10 => {
                keep = false;
                Framing::UntilClose
            }
            None => {
                out.put_slice(b"transfer-encoding: chunked\r\n");
                Framing::Chunked
            }
        }
    };
    if http10 && keep && !said_keep_alive {
        out.put_slice(b"connection: keep-alive\r\n");
    } else if !http10 && !keep && !said_close && status != StatusCode::SWITCHING_PROTOCOLS {
        out.put_slice(b"connection: close\r\n");
    }
    if !has_date {
        out.put_slice(b"date: ");
        out.put_slice(date);
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
    (framing, keep)
}

fn put_length(out: &mut BytesMut, n: u64) {
    out.put_slice(b"content-length: ");
    super::codec::put_decimal(out, n);
    out.put_slice(b"\r\n");
}

/// The current time as an HTTP date, formatted once per second per thread.
pub(super) fn http_date() -> [u8; 29] {
    use std::cell::Cell;
    thread_local! {
        static DATE: Cell<(u64, [u8; 29])> = const { Cell::new((u64::MAX, [0; 29])) };
    }
    let now = headway_core::clock::wall_clock();
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with(|d| {
        let (at, text) = d.get();
        if at == secs {
            return text;
        }
        let mut text = [b' '; 29];
        let s = httpdate::fmt_http_date(now);
        let n = s.len().min(29);
        text[..n].copy_from_slice(&s.as_bytes()[..n]);
        d.set((secs, text));
        text
    })
}

/// How the loop ended.
pub(super) enum Ending<S> {
    /// The connection is finished: closed by either side, timed out, drained, or failed.
    Closed(io::Result<()>),
    /// A request for hyper: the stream and the bytes read from it that were not served.
    Handoff(S, Bytes),
    /// The server switched protocols and the `101` is written: the stream and the bytes read
    /// from it past the request, for the tunnel (`super::tunnel`).
    Upgraded(S, Bytes),
}

/// What the loop needs of its connection.
pub(super) struct Own {
    /// The connection's context (its requests go to `super::handle` with it).
    pub(super) conn: Arc<Conn>,
    /// Set when the connection should finish: no new request is read, the answer in flight
    /// says `Connection: close`.
    pub graceful: Arc<AtomicBool>,
    /// The virtual server's request head limit, bytes.
    pub max_head: usize,
    /// The virtual server's header field count limit.
    pub max_headers: usize,
}

/// Serves `io`'s requests until the connection ends or a request needs hyper.
pub(super) async fn serve<S: Stream>(mut io: S, own: Own) -> Ending<S> {
    let mut buf = BytesMut::with_capacity(READ_SIZE);
    let mut out = BytesMut::with_capacity(512);
    let mut queue: Vec<Bytes> = Vec::new();
    let mut names = Vec::new();
    let activity = own.conn.activity.clone();
    let mut eof = false;
    // A read brought bytes since the last answer was written: the next answer waits one turn
    // of the scheduler first (see `super::ClientIo`).
    let mut fresh = false;
    // The client's partial head was acknowledged at once (see `Stream::ack_now`).
    let mut acked = false;
    loop {
        let req = loop {
            match take_head(&mut buf, own.max_head, own.max_headers, &mut names) {
                Head::Ready(r) => break r,
                Head::Other => return Ending::Handoff(io, buf.freeze()),
                Head::Partial => {}
            }
            if eof || (buf.is_empty() && own.graceful.load(Relaxed)) {
                return Ending::Closed(close(io, false).await);
            }
            activity.head_partial.store(!buf.is_empty(), Relaxed);
            let read = std::future::poll_fn(|cx| {
                if buf.is_empty() && own.graceful.load(Relaxed) {
                    return Poll::Ready(Ok(0));
                }
                if buf.capacity() - buf.len() < READ_SIZE / 4 {
                    buf.reserve(READ_SIZE);
                }
                let r = tokio_util::io::poll_read_buf(Pin::new(&mut io), cx, &mut buf);
                if r.is_pending() && !buf.is_empty() && !std::mem::replace(&mut acked, true) {
                    // Waiting for the rest of a head the client may be holding back.
                    io.ack_now();
                }
                r
            })
            .await;
            activity.touch();
            match read {
                Ok(0) => eof = true,
                Ok(_) => fresh = true,
                Err(e) => return Ending::Closed(Err(e)),
            }
        };
        activity.head_partial.store(false, Relaxed);
        acked = false;
        let (head, version) = (req.method() == Method::HEAD, req.version());
        let resp = Box::pin(super::handle(own.conn.clone(), req)).await;
        let (parts, body) = resp.into_parts();
        let switched = parts.status == StatusCode::SWITCHING_PROTOCOLS;
        // The client may send more after this answer: it did not ask to close (`handle` noted
        // that in the activity; a request that closes is this loop's last, so the note is
        // about this one).
        let client_stays = !activity.last_exchange.load(Relaxed);
        let asked = Asked {
            head,
            version,
            keep_alive: client_stays && !own.graceful.load(Relaxed),
        };
        if std::mem::take(&mut fresh) {
            super::TakeTurn::default().await;
        }
        out.clear();
        let (framing, keep) = write_head(
            &mut out,
            parts.status,
            &parts.headers,
            asked,
            body.size_hint().exact(),
            &http_date(),
        );
        drop(parts);
        let closing = !keep && !switched;
        if let Err(e) = send(&mut io, &activity, &out, &mut queue, body, framing, closing).await {
            return Ending::Closed(Err(e));
        }
        if switched {
            return Ending::Upgraded(io, buf.freeze());
        }
        if !keep {
            // The client may have sent more than this answer's request (pipelined, after a
            // request the answer refused, or while the connection was drained): close
            // lingering, so its unread bytes do not turn the close into a reset that destroys
            // the answer.
            let more = !buf.is_empty() || (client_stays && !eof);
            return Ending::Closed(close(io, more).await);
        }
    }
}

/// Ends the connection: a shutdown of the sending side, then (if `linger`) a lingering close.
async fn close<S: Stream>(mut io: S, linger: bool) -> io::Result<()> {
    if linger {
        tokio::spawn(super::linger(io, None));
        return Ok(());
    }
    io.shutdown().await
}

/// Writes an answer: `head`, then the body in its framing; body frames that are ready go out
/// with the head in one write. The body is dropped as soon as its end is seen, before the last
/// bytes are written, so its exchange has ended (counters, pool, log) by the time the client
/// has the whole answer. `closing`: the connection is shut down right after, so the answer's
/// last write is the connection's ([`Stream::poll_write_last`]).
async fn send<S: Stream>(
    io: &mut S,
    activity: &ConnActivity,
    head: &[u8],
    queue: &mut Vec<Bytes>,
    body: RespBody,
    framing: Framing,
    closing: bool,
) -> io::Result<()> {
    if matches!(framing, Framing::None) {
        drop(body);
        write_all(io, activity, head, &[], closing).await?;
        return io.flush().await;
    }
    let chunked = framing == Framing::Chunked;
    let mut head = Some(head);
    let mut body = Some(body);
    let mut sent = 0u64;
    while let Some(b) = body.as_mut() {
        queue.clear();
        let mut gathered = 0;
        let mut done = false;
        loop {
            let polled = if head.is_none() && queue.is_empty() {
                // Nothing to write: wait for the server.
                Poll::Ready(std::future::poll_fn(|cx| Pin::new(&mut *b).poll_frame(cx)).await)
            } else {
                std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *b).poll_frame(cx))).await
            };
            match polled {
                Poll::Pending => break,
                Poll::Ready(None) => {
                    done = true;
                    break;
                }
                Poll::Ready(Some(Err(e))) => {
                    return Err(io::Error::other(format!("the answer's body failed: {e}")));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            gathered += data.len();
                            sent += data.len() as u64;
                            if chunked {
                                let mut size = BytesMut::with_capacity(18);
                                super::codec::write_chunk_size(&mut size, data.len());
                                queue.push(size.freeze());
                                queue.push(data);
                                queue.push(Bytes::from_static(b"\r\n"));
                            } else {
                                queue.push(data);
                            }
                        }
                    }
                    if b.is_end_stream() {
                        done = true;
                        break;
                    }
                    if gathered >= GATHER || queue.len() >= 48 {
                        break;
                    }
                }
            }
        }
        if done {
            body = None;
            if let Framing::Length(n) = framing {
                if sent != n {
                    // The client would wait for bytes that never come, or read the surplus as
                    // its next answer: end the connection instead.
                    return Err(io::Error::other(format!(
                        "the answer's body had {sent} bytes, its head said {n}"
                    )));
                }
            }
            if chunked {
                queue.push(Bytes::from_static(b"0\r\n\r\n"));
            }
        }
        let last = done && closing;
        write_all(io, activity, head.take().unwrap_or_default(), queue, last).await?;
        if !done {
            io.flush().await?;
        }
    }
    queue.clear();
    io.flush().await
}

/// Writes `first` and then `rest`, in as few writes as the stream allows, noting each write in
/// `activity`; `last`: as the connection's last bytes ([`Stream::poll_write_last`]).
async fn write_all<S: Stream>(
    io: &mut S,
    activity: &ConnActivity,
    first: &[u8],
    rest: &[Bytes],
    last: bool,
) -> io::Result<()> {
    if !io.is_write_vectored() {
        // One buffer, so a TLS stream makes one record of a small answer.
        let total = first.len() + rest.iter().map(Bytes::len).sum::<usize>();
        let mut flat = Vec::with_capacity(total);
        flat.extend_from_slice(first);
        for b in rest {
            flat.extend_from_slice(b);
        }
        io.write_all(&flat).await?;
        activity.touch();
        return Ok(());
    }
    let mut slices: smallvec::SmallVec<[IoSlice<'_>; 16]> = smallvec::SmallVec::new();
    if !first.is_empty() {
        slices.push(IoSlice::new(first));
    }
    slices.extend(rest.iter().map(|b| IoSlice::new(b)));
    let mut left = &mut slices[..];
    while !left.is_empty() {
        let n = if last {
            std::future::poll_fn(|cx| Pin::new(&mut *io).poll_write_last(cx, left)).await?
        } else {
            io.write_vectored(left).await?
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        // A slow client that keeps taking the answer is not idle.
        activity.touch();
        IoSlice::advance_slices(&mut left, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
