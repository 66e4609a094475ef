//! Request framing checks that hyper does not make, so that ambiguous requests are refused
//! with 400 instead of being normalised and forwarded (request smuggling defence).
//!
//! hyper's HTTP/1 server already refuses a non-final `chunked` coding, `Transfer-Encoding` in
//! HTTP/1.0, conflicting `Content-Length` values and malformed chunk lines in the body it
//! decodes. It *accepts*, per RFC 9112 §6.3, a request with both `Content-Length` and
//! `Transfer-Encoding` (dropping the length) and one with the same `Content-Length` twice,
//! and it hides both facts from the service. A load balancer in front of servers that may
//! frame such requests differently must not pass them on at all (RFC 9112 §6.3: "a server MAY
//! reject a request that contains both … and MUST close the connection"), so this module reads
//! the same bytes hyper reads and says which request, if any, was ambiguous.
//!
//! [`FramingChecker`] is sans-IO: feed it every byte received from the client, in any slices,
//! with [`FramingChecker::handle_bytes`]; read [`FramingChecker::violation`]. It follows
//! HTTP/1.1 message boundaries (`Content-Length` bodies, chunked bodies with trailers, no body
//! otherwise) so that pipelined requests are counted; request heads are numbered from 1 in
//! arrival order, as the service sees them. It switches itself off, checking nothing more, on
//! the HTTP/2 connection preface, after `CONNECT` or an `Upgrade` request (the bytes after
//! those are not HTTP/1), after a head larger than its limit (hyper answers 431 to that), and
//! after the first violation (the connection is closed after a 400).
//!
//! [`Guarded`] is the thin IO shell: a reader wrapper that feeds the checker and publishes the
//! first violation in a [`Verdict`] the request service reads.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// Both `Content-Length` and `Transfer-Encoding` (RFC 9112 §6.3 item 3).
    LengthWithTransferEncoding,
    /// More than one `Content-Length` field (even with equal values).
    DuplicateContentLength,
    /// A `Content-Length` that is not a decimal number.
    InvalidContentLength,
    /// A `Transfer-Encoding` whose final coding is not `chunked`.
    InvalidTransferEncoding,
    /// A chunk-size line, chunk terminator or trailer that is not well-formed.
    MalformedChunk,
    /// A request head that is not HTTP/1 at all.
    MalformedHead,
    /// A request head larger than the limit, or with more fields than the limit.
    HeadTooLarge,
}

impl Violation {
    /// A short explanation for the 400 body and the log.
    pub fn message(self) -> &'static str {
        match self {
            Violation::LengthWithTransferEncoding => {
                "request has both Content-Length and Transfer-Encoding"
            }
            Violation::DuplicateContentLength => "request has more than one Content-Length",
            Violation::InvalidContentLength => "request has an invalid Content-Length",
            Violation::InvalidTransferEncoding => {
                "request Transfer-Encoding does not end in chunked"
            }
            Violation::MalformedChunk => "request body has malformed chunked encoding",
            Violation::MalformedHead => "request head is malformed",
            Violation::HeadTooLarge => "request header fields too large",
        }
    }

    /// The status that answers it: 431 for a head too large, else 400.
    pub fn status(self) -> u16 {
        match self {
            Violation::HeadTooLarge => 431,
            _ => 400,
        }
    }

    fn code(self) -> u8 {
        match self {
            Violation::LengthWithTransferEncoding => 1,
            Violation::DuplicateContentLength => 2,
            Violation::InvalidContentLength => 3,
            Violation::InvalidTransferEncoding => 4,
            Violation::MalformedChunk => 5,
            Violation::MalformedHead => 6,
            Violation::HeadTooLarge => 7,
        }
    }

    fn from_code(c: u8) -> Option<Violation> {
        Some(match c {
            1 => Violation::LengthWithTransferEncoding,
            2 => Violation::DuplicateContentLength,
            3 => Violation::InvalidContentLength,
            4 => Violation::InvalidTransferEncoding,
            5 => Violation::MalformedChunk,
            6 => Violation::MalformedHead,
            7 => Violation::HeadTooLarge,
            _ => return None,
        })
    }
}

/// Longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 4096;
/// The HTTP/2 connection preface's first line.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting a request head (possibly after empty lines).
    Head,
    /// Skipping this many body bytes.
    Body(u64),
    /// Reading a chunk-size line.
    ChunkSize,
    /// Skipping chunk data, then expecting CRLF.
    ChunkData(u64),
    /// Expecting the CRLF after chunk data.
    ChunkEnd,
    /// Reading trailer lines until an empty one.
    Trailer,
    /// Not checking any more.
    Off,
}

/// The sans-IO framing checker (see the module doc).
#[derive(Debug)]
pub struct FramingChecker {
    state: State,
    /// Bytes of the current head or line, when it spans reads.
    pending: Vec<u8>,
    /// Request heads seen.
    requests: u64,
    /// The first violation, the request it belongs to, and where that request's head began
    /// (offset in the stream).
    violation: Option<(u64, Violation, u64)>,
    /// Where the current (or last) request head began, offset in the stream.
    head_start: u64,
    max_head: usize,
    max_headers: usize,
    /// Bytes seen so far (for the HTTP/2 preface check at the start).
    seen: u64,
    /// Whether every byte so far matched the HTTP/2 preface.
    maybe_h2: bool,
}

impl FramingChecker {
    /// A checker for heads of at most `max_head` bytes with at most `max_headers` fields (the
    /// virtual server's limits; beyond them hyper refuses the request itself).
    pub fn new(max_head: usize, max_headers: usize) -> Self {
        FramingChecker {
            state: State::Head,
            pending: Vec::new(),
            requests: 0,
            violation: None,
            head_start: 0,
            max_head,
            max_headers: max_headers.max(1),
            seen: 0,
            maybe_h2: true,
        }
    }

    /// The first violation and the number (from 1) of the request it belongs to.
    pub fn violation(&self) -> Option<(u64, Violation)> {
        self.violation.map(|(n, v, _)| (n, v))
    }

    /// Where the head of the request with the first violation began: the number of bytes of
    /// the stream before it.
    pub fn violation_offset(&self) -> Option<u64> {
        self.violation.map(|(_, _, at)| at)
    }

    /// Bytes fed so far.
    pub fn offset(&self) -> u64 {
        self.seen
    }

    /// Whether the checker has stopped looking (see the module doc).
    pub fn is_off(&self) -> bool {
        self.state == State::Off
    }

    /// Whether part of a request head has arrived but not all of it.
    pub fn in_head(&self) -> bool {
        self.state == State::Head && !self.pending.is_empty()
    }

    /// The number (from 1) of the request whose head or body has partly arrived, if one
    /// has: the connection waits for the rest of it.
    pub fn in_request(&self) -> Option<u64> {
        match self.state {
            State::Head if !self.pending.is_empty() => Some(self.requests + 1),
            State::Body(_)
            | State::ChunkSize
            | State::ChunkData(_)
            | State::ChunkEnd
            | State::Trailer => Some(self.requests),
            State::Head | State::Off => None,
        }
    }

    /// Feeds the next bytes received from the client.
    pub fn handle_bytes(&mut self, mut data: &[u8]) {
        if self.maybe_h2 && self.seen < H2_PREFACE.len() as u64 && !data.is_empty() {
            let at = self.seen as usize;
            let n = (H2_PREFACE.len() - at).min(data.len());
            if data[..n] != H2_PREFACE[at..at + n] {
                self.maybe_h2 = false;
            } else if at + n == H2_PREFACE.len() {
                self.state = State::Off;
            } else {
                // Still a prefix of the preface: wait for more before parsing it as HTTP/1
                // (`PRI * HTTP/2.` is not a valid HTTP/1 request line).
                self.pending.extend_from_slice(data);
                self.seen += data.len() as u64;
                return;
            }
        }
        let mut pos = self.seen;
        self.seen = self.seen.saturating_add(data.len() as u64);
        while !data.is_empty() {
            let used = match self.state {
                State::Off => return,
                State::Head => {
                    if self.pending.is_empty() && data[0] != b'\r' && data[0] != b'\n' {
                        self.head_start = pos;
                    }
                    self.head(data)
                }
                State::Body(n) => {
                    let k = n.min(data.len() as u64);
                    self.state = if k == n {
                        State::Head
                    } else {
                        State::Body(n - k)
                    };
                    k as usize
                }
                State::ChunkSize => self.line(data, Self::chunk_size),
                State::ChunkData(n) => {
                    let k = n.min(data.len() as u64);
                    self.state = if k == n {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(n - k)
                    };
                    k as usize
                }
                State::ChunkEnd => self.line(data, |me, line| {
                    if line.is_empty() {
                        me.state = State::ChunkSize;
                    } else {
                        me.fail(Violation::MalformedChunk);
                    }
                }),
                State::Trailer => self.line(data, |me, line| {
                    if line.is_empty() {
                        me.state = State::Head;
                    } else if !line.contains(&b':') {
                        me.fail(Violation::MalformedChunk);
                    }
                }),
            };
            data = &data[used..];
            pos += used as u64;
        }
    }

    fn fail(&mut self, v: Violation) {
        if self.violation.is_none() {
            self.violation = Some((self.requests, v, self.head_start));
        }
        self.state = State::Off;
        self.pending = Vec::new();
    }

    /// Consumes a CRLF-terminated line (without the CRLF) and hands it to `f`; returns the
    /// bytes of `data` used.
    fn line(&mut self, data: &[u8], f: impl FnOnce(&mut Self, &[u8])) -> usize {
        match data.iter().position(|b| *b == b'\n') {
            None => {
                if self.pending.len() + data.len() > MAX_LINE {
                    self.fail(Violation::MalformedChunk);
                } else {
                    self.pending.extend_from_slice(data);
                }
                data.len()
            }
            Some(i) => {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(&data[..i]);
                match line.strip_suffix(b"\r") {
                    Some(l) if l.len() <= MAX_LINE => f(self, l),
                    _ => self.fail(Violation::MalformedChunk),
                }
                i + 1
            }
        }
    }

    fn chunk_size(&mut self, line: &[u8]) {
        // RFC 9112 §7.1: chunk-size [ chunk-ext ] CRLF; chunk-size is 1*HEXDIG.
        let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        let rest = &line[digits..];
        let ext_ok = rest.is_empty()
            || rest
                .first()
                .is_some_and(|b| *b == b';' || *b == b' ' || *b == b'\t');
        if digits == 0 || digits > 16 || !ext_ok {
            self.fail(Violation::MalformedChunk);
            return;
        }
        let size = line[..digits].iter().fold(0u64, |n, b| {
            n * 16 + u64::from((*b as char).to_digit(16).unwrap_or(0))
        });
        self.state = if size == 0 {
            State::Trailer
        } else {
            State::ChunkData(size)
        };
    }

    /// Consumes bytes of a request head; returns the bytes of `data` used.
    fn head(&mut self, data: &[u8]) -> usize {
        // Empty lines before a request are allowed (RFC 9112 §2.2).
        if self.pending.is_empty() {
            let skip = data
                .iter()
                .take_while(|b| **b == b'\r' || **b == b'\n')
                .count();
            if skip > 0 {
                return skip;
            }
        }
        let (buf, from_pending): (std::borrow::Cow<'_, [u8]>, usize) = if self.pending.is_empty() {
            (std::borrow::Cow::Borrowed(data), 0)
        } else {
            let before = self.pending.len();
            let mut v = std::mem::take(&mut self.pending);
            v.extend_from_slice(data);
            (std::borrow::Cow::Owned(v), before)
        };
        // Most limits fit the stack array; larger ones take the heap.
        let mut on_stack = [httparse::EMPTY_HEADER; 128];
        let mut on_heap = Vec::new();
        let headers: &mut [httparse::Header<'_>] = if self.max_headers <= on_stack.len() {
            &mut on_stack[..self.max_headers]
        } else {
            on_heap.resize(self.max_headers, httparse::EMPTY_HEADER);
            &mut on_heap
        };
        let mut req = httparse::Request::new(headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Partial) => {
                // A partial head of `max_head` bytes already lacks at least its final CRLF:
                // whole, it would be over the limit.
                if buf.len() >= self.max_head {
                    self.requests += 1;
                    self.fail(Violation::HeadTooLarge);
                } else {
                    self.pending = buf.into_owned();
                }
                data.len()
            }
            Ok(httparse::Status::Complete(len)) if len > self.max_head => {
                self.requests += 1;
                self.fail(Violation::HeadTooLarge);
                data.len()
            }
            Ok(httparse::Status::Complete(len)) => {
                self.requests += 1;
                let next = framing(&req);
                let used = len - from_pending;
                match next {
                    Ok(s) => self.state = s,
                    Err(v) => self.fail(v),
                }
                used
            }
            Err(httparse::Error::TooManyHeaders) => {
                self.requests += 1;
                self.fail(Violation::HeadTooLarge);
                data.len()
            }
            Err(_) => {
                self.requests += 1;
                self.fail(Violation::MalformedHead);
                data.len()
            }
        }
    }
}

/// What follows a parsed request head.
fn framing(req: &httparse::Request<'_, '_>) -> Result<State, Violation> {
    let mut length: Option<u64> = None;
    let mut lengths = 0;
    let mut te: Option<&[u8]> = None;
    let mut upgrade = false;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            lengths += 1;
            let v = std::str::from_utf8(h.value)
                .ok()
                .map(|s| s.trim_matches([' ', '\t']))
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok());
            match v {
                Some(n) => length = Some(n),
                None => return Err(Violation::InvalidContentLength),
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if te.is_some() {
                // Several fields are one comma-separated list; the last coding matters.
                te = Some(h.value);
                continue;
            }
            te = Some(h.value);
        } else if h.name.eq_ignore_ascii_case("upgrade") {
            upgrade = true;
        }
    }
    if lengths > 1 {
        return Err(Violation::DuplicateContentLength);
    }
    if te.is_some() && lengths > 0 {
        return Err(Violation::LengthWithTransferEncoding);
    }
    if req.method == Some("CONNECT") || upgrade {
        return Ok(State::Off);
    }
    if let Some(te) = te {
        let last = te
            .rsplit(|b| *b == b',')
            .next()
            .map(|c| c.trim_ascii())
            .unwrap_or_default();
        if !last.eq_ignore_ascii_case(b"chunked") {
            return Err(Violation::InvalidTransferEncoding);
        }
        return Ok(State::ChunkSize);
    }
    Ok(match length {
        Some(n) if n > 0 => State::Body(n),
        _ => State::Head,
    })
}

/// The first violation on a connection, shared between [`Guarded`] (which sets it) and the
/// connection's owner (which answers it).
///
/// [`Guarded`] hides the offending request from hyper (see its doc), so normally hyper never
/// sees it and the connection's owner answers it with [`Verdict::unanswered`] once hyper is
/// done. When the request's head had already reached hyper (it spanned reads), the request
/// service answers instead, through [`Verdict::of_request`] and [`Verdict::answered`].
#[derive(Debug, Default)]
pub struct Verdict {
    request: AtomicU64,
    kind: AtomicU8,
    answered: std::sync::atomic::AtomicBool,
}

impl Verdict {
    /// The violation of request `n` (from 1), if that request was found ambiguous.
    pub fn of_request(&self, n: u64) -> Option<Violation> {
        // Acquire pairs with the Release in `set`: a request handed to the service after the
        // reader saw its bytes sees the verdict.
        let kind = self.kind.load(Ordering::Acquire);
        if kind == 0 || self.request.load(Ordering::Relaxed) != n {
            return None;
        }
        Violation::from_code(kind)
    }

    /// Notes that the violation was answered.
    pub fn answered(&self) {
        self.answered.store(true, Ordering::Relaxed);
    }

    /// The violation, if there is one nobody answered yet.
    pub fn unanswered(&self) -> Option<Violation> {
        if self.answered.load(Ordering::Relaxed) {
            return None;
        }
        Violation::from_code(self.kind.load(Ordering::Acquire))
    }

    fn set(&self, request: u64, v: Violation) {
        self.request.store(request, Ordering::Relaxed);
        self.kind.store(v.code(), Ordering::Release);
    }
}

/// A client stream whose received bytes pass through a [`FramingChecker`].
///
/// On a violation it hides the offending request from the reader: the read that found it is
/// cut where that request's head began, and every later read reports the end of the stream.
/// hyper so finishes the requests before it, writes their responses, and ends the connection;
/// the connection's owner then answers the violation itself (400, `Connection: close`) on the
/// raw stream. Nothing of the offending request is ever parsed by hyper, so nothing of it can
/// be forwarded.
#[derive(Debug)]
pub struct Guarded<S> {
    inner: S,
    checker: Option<FramingChecker>,
    verdict: Arc<Verdict>,
    ended: bool,
}

impl<S> Guarded<S> {
    /// Wraps `inner`; the first violation is published in `verdict`.
    pub fn new(inner: S, checker: FramingChecker, verdict: Arc<Verdict>) -> Self {
        Guarded {
            inner,
            checker: Some(checker),
            verdict,
            ended: false,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped stream, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Whether a request head is partly received (for the header timeout).
    pub fn in_head(&self) -> bool {
        self.checker.as_ref().is_some_and(FramingChecker::in_head)
    }

    /// The number of the request partly received, if one is ([`FramingChecker::in_request`]).
    pub fn in_request(&self) -> Option<u64> {
        self.checker.as_ref().and_then(FramingChecker::in_request)
    }

    /// Whether the stream still carries HTTP/1 requests the check reads: not after a
    /// violation, the HTTP/2 preface, or a request for a protocol upgrade (what follows may
    /// be another protocol: a WebSocket's frames, say).
    pub fn is_checking(&self) -> bool {
        self.checker.is_some()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.ended {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let me = &mut *self;
        let r = Pin::new(&mut me.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(c)) = (&r, me.checker.as_mut()) {
            let base = c.offset();
            c.handle_bytes(&buf.filled()[before..]);
            if let (Some((n, v)), Some(at)) = (c.violation(), c.violation_offset()) {
                me.verdict.set(n, v);
                let keep = usize::try_from(at.saturating_sub(base))
                    .unwrap_or(usize::MAX)
                    .min(buf.filled().len() - before);
                buf.set_filled(before + keep);
                me.ended = true;
                me.checker = None;
            } else if c.is_off() {
                me.checker = None;
            }
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(parts: &[&[u8]]) -> (u64, Option<(u64, Violation)>) {
        let mut c = FramingChecker::new(32 * 1024, 100);
        for p in parts {
            c.handle_bytes(p);
        }
        (c.requests, c.violation())
    }

    #[test]
    fn plain_pipelined_requests_are_counted_and_pass() {
        let r = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloPOST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET /last HTTP/1.1\r\n\r\n";
        assert_eq!(check(&[r]), (4, None));
    }

    #[test]
    fn a_request_partly_received_is_reported_with_its_number() {
        let mut c = FramingChecker::new(32 * 1024, 100);
        assert_eq!(c.in_request(), None);
        c.handle_bytes(b"GET / HTTP/1.1\r\nHo");
        assert_eq!(c.in_request(), Some(1), "a partial head");
        c.handle_bytes(b"st: a\r\n\r\n");
        assert_eq!(c.in_request(), None, "a whole bodiless request");
        c.handle_bytes(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhe");
        assert_eq!(c.in_request(), Some(2), "a partial body");
        c.handle_bytes(b"llo");
        assert_eq!(c.in_request(), None);
        for (part, want) in [
            (
                &b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
                Some(3),
            ),
            (b"5\r\nhel", Some(3)),
            (b"lo\r\n0\r\n", Some(3)),
            (b"\r\n", None),
        ] {
            c.handle_bytes(part);
            assert_eq!(c.in_request(), want, "{}", String::from_utf8_lossy(part));
        }
        c.handle_bytes(b"GET /next HTTP/1.1\r\n");
        assert_eq!(c.in_request(), Some(4));
    }

    #[test]
    fn ambiguous_framing_is_caught_on_the_right_request() {
        let cases: &[(&[u8], Violation)] = &[
            (
                b"POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
                Violation::LengthWithTransferEncoding,
            ),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n",
                Violation::LengthWithTransferEncoding,
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n",
                Violation::DuplicateContentLength,
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: +4\r\n\r\n",
                Violation::InvalidContentLength,
            ),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                Violation::InvalidTransferEncoding,
            ),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                Violation::MalformedChunk,
            ),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
                Violation::MalformedChunk,
            ),
            (
                b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
                Violation::MalformedHead,
            ),
        ];
        for (bytes, v) in cases {
            let ok = b"GET / HTTP/1.1\r\n\r\n".as_slice();
            assert_eq!(
                check(&[ok, bytes]).1,
                Some((2, *v)),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn h2_preface_and_upgrade_switch_it_off() {
        let mut c = FramingChecker::new(1024, 10);
        c.handle_bytes(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00garbage");
        assert!(c.is_off() && c.violation().is_none());
        let mut c = FramingChecker::new(1024, 10);
        c.handle_bytes(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\nnot http at all\r\n\r\n");
        assert!(c.is_off() && c.violation().is_none());
    }

    #[test]
    fn oversized_heads_and_too_many_fields_are_caught() {
        let mut c = FramingChecker::new(64, 100);
        c.handle_bytes(b"GET / HTTP/1.1\r\n");
        c.handle_bytes(&[b'a'; 100]);
        assert_eq!(c.violation(), Some((1, Violation::HeadTooLarge)));
        let mut c = FramingChecker::new(1024, 2);
        c.handle_bytes(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n");
        assert_eq!(c.violation(), Some((1, Violation::HeadTooLarge)));
        assert_eq!(Violation::HeadTooLarge.status(), 431);
    }

    fn stream() -> impl Strategy<Value = Vec<u8>> {
        let req = prop_oneof![
            Just(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|body| {
                let mut v = format!("PUT /b HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len())
                    .into_bytes();
                v.extend(body);
                v
            }),
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..20), 0..4)
                .prop_map(|chunks| {
                    let mut v = b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                    for c in chunks {
                        v.extend(format!("{:x}\r\n", c.len()).into_bytes());
                        v.extend(c);
                        v.extend(b"\r\n");
                    }
                    v.extend(b"0\r\n\r\n");
                    v
                }),
        ];
        proptest::collection::vec(req, 1..6).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn any_split_of_well_formed_requests_passes(data in stream(), cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
            let whole = {
                let mut c = FramingChecker::new(32 * 1024, 100);
                c.handle_bytes(&data);
                (c.requests, c.violation())
            };
            prop_assert_eq!(whole.1, None);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (data.len() + 1)).collect();
            cuts.sort_unstable();
            let mut c = FramingChecker::new(32 * 1024, 100);
            let mut from = 0;
            for cut in cuts.into_iter().chain([data.len()]) {
                c.handle_bytes(&data[from..cut]);
                from = cut;
            }
            prop_assert_eq!((c.requests, c.violation()), whole);
        }

        #[test]
        fn never_panics_on_any_bytes(parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
            let mut c = FramingChecker::new(256, 8);
            for p in &parts {
                c.handle_bytes(p);
            }
        }
    }
}
