//! The HTTP/1.1 wire format towards servers (sans-IO): request heads written, response heads
//! parsed, response bodies de-framed.
//!
//! The proxy talks to servers itself rather than through a general-purpose client: the request
//! is written from the task that serves the client, and the response is read from the same task
//! as the client consumes it, so a request costs no channel, no extra task and no second
//! dispatcher (see `crate::pool` for the connections). This module is the pure part:
//!
//! - [`write_request_head`]: the request line and fields, with the framing the body needs;
//! - [`parse_response_head`]: a response head (httparse) into status, version and fields;
//! - [`response_framing`]: how the body is delimited (RFC 9112 §6.3);
//! - [`Decoder`]: that framing over a stream of bytes in any slices: which bytes are payload,
//!   which are framing, where the message ends.
//!
//! Nothing here allocates per byte or panics on any input (property-tested, fuzzed).

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

/// How a request body is framed towards the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFraming {
    /// No body.
    Empty,
    /// Exactly this many bytes (`Content-Length`).
    Length(u64),
    /// Chunked transfer coding (length unknown in advance).
    Chunked,
}

/// Writes `METHOD target HTTP/1.1`, every field of `headers`, and the framing field
/// (`Content-Length` or `Transfer-Encoding: chunked`; any framing field in `headers` is
/// ignored), then the blank line.
pub fn write_request_head(
    out: &mut BytesMut,
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    framing: RequestFraming,
) {
    out.reserve(64 + target.len() + headers.len() * 32);
    out.put_slice(method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(target.as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            continue;
        }
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    match framing {
        RequestFraming::Length(n) => {
            out.put_slice(b"content-length: ");
            put_decimal(out, n);
            out.put_slice(b"\r\n");
        }
        RequestFraming::Chunked => out.put_slice(b"transfer-encoding: chunked\r\n"),
        // RFC 9110 §8.6: a POST or PUT without a body says so, others need nothing.
        RequestFraming::Empty if needs_zero_length(method) => {
            out.put_slice(b"content-length: 0\r\n");
        }
        RequestFraming::Empty => {}
    }
    out.put_slice(b"\r\n");
}

fn needs_zero_length(m: &Method) -> bool {
    matches!(*m, Method::POST | Method::PUT | Method::PATCH)
}

/// Writes `n` in decimal.
pub fn put_decimal(out: &mut BytesMut, n: u64) {
    let mut b = [0; 20];
    out.put_slice(itoa(n, &mut b));
}

/// Decimal digits of `n` in `buf`.
fn itoa(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// Writes one chunk's size line (`{len:x}\r\n`).
pub fn write_chunk_size(out: &mut BytesMut, len: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut b = [0u8; 16];
    let mut i = b.len();
    let mut n = len;
    loop {
        i -= 1;
        b[i] = HEX[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&b[i..]);
    out.put_slice(b"\r\n");
}

/// A parsed response head.
#[derive(Debug)]
pub struct ResponseHead {
    /// The status.
    pub status: StatusCode,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The fields.
    pub headers: HeaderMap,
}

/// Why a response head or body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not an HTTP/1 response head.
    #[error("the server sent a malformed response head")]
    Head,
    /// The head is larger than allowed or has too many fields.
    #[error("the server's response head is too large")]
    TooLarge,
    /// The framing fields contradict each other or are malformed.
    #[error("the server's response has invalid framing")]
    Framing,
    /// A chunk-size line or chunk terminator is malformed.
    #[error("the server sent a malformed chunked body")]
    Chunk,
}

/// Most response fields accepted.
const MAX_RESPONSE_HEADERS: usize = 128;
/// Largest response head accepted.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// Field names and where their values lie in a message head (byte ranges): scratch space of
/// the head parsers, kept by their callers.
pub type FieldSpans = Vec<(HeaderName, usize, usize)>;

/// The fields `names` spans in `head` (drained), their values sharing `head`'s bytes, in a map
/// with room for `room` more; `None` if a value is not a valid field value.
pub fn shared_fields(head: &Bytes, names: &mut FieldSpans, room: usize) -> Option<HeaderMap> {
    let mut headers = HeaderMap::with_capacity(names.len() + room);
    for (name, from, to) in names.drain(..) {
        let value = HeaderValue::from_maybe_shared(head.slice(from..to)).ok()?;
        headers.append(name, value);
    }
    Some(headers)
}

/// Takes a complete response head off the front of `buf`: `Ok(None)` (and `buf` unchanged) when
/// more bytes are needed. The fields' values refer to the buffer's bytes, not copies; `names`
/// is scratch space kept by the caller.
pub fn parse_response_head(
    buf: &mut BytesMut,
    names: &mut FieldSpans,
) -> Result<Option<ResponseHead>, ParseError> {
    // Uninitialised slots: filling 128 empty fields (4 KiB) for every response cost more than
    // parsing a short head.
    let mut slots =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots)
    {
        Ok(httparse::Status::Complete(n)) if n <= MAX_RESPONSE_HEAD => n,
        // The limit holds however the head arrived: whole in one read or in pieces.
        Ok(httparse::Status::Complete(_)) => return Err(ParseError::TooLarge),
        Ok(httparse::Status::Partial) if buf.len() > MAX_RESPONSE_HEAD => {
            return Err(ParseError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::TooLarge),
        Err(_) => return Err(ParseError::Head),
    };
    let status = resp
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or(ParseError::Head)?;
    let version = if resp.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let base = buf.as_ptr() as usize;
    names.clear();
    for f in resp.headers.iter() {
        let name = HeaderName::from_bytes(f.name.as_bytes()).map_err(|_| ParseError::Head)?;
        let at = f.value.as_ptr() as usize - base;
        names.push((name, at, at + f.value.len()));
    }
    let head = buf.split_to(len).freeze();
    // Room for a field or two the proxy adds (Vary, a persistence cookie) without a rehash.
    let headers = shared_fields(&head, names, 2).ok_or(ParseError::Head)?;
    Ok(Some(ResponseHead {
        status,
        version,
        headers,
    }))
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 1xx, 204, 304).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked.
    Chunked,
    /// Until the server closes the connection.
    UntilClose,
}

/// RFC 9112 §6.3: the framing of a response to `method` with `status` and `headers`.
pub fn response_framing(
    method: &Method,
    status: StatusCode,
    headers: &HeaderMap,
) -> Result<Framing, ParseError> {
    if *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Empty);
    }
    if let Some(te) = headers.get(header::TRANSFER_ENCODING) {
        let last = te
            .as_bytes()
            .rsplit(|b| *b == b',')
            .next()
            .map(<[u8]>::trim_ascii)
            .unwrap_or_default();
        return Ok(if last.eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked
        } else {
            Framing::UntilClose
        });
    }
    let mut length = None;
    for v in headers.get_all(header::CONTENT_LENGTH) {
        let n = std::str::from_utf8(v.as_bytes())
            .ok()
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(ParseError::Framing)?;
        if length.is_some_and(|l| l != n) {
            return Err(ParseError::Framing);
        }
        length = Some(n);
    }
    Ok(match length {
        Some(0) => Framing::Empty,
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    })
}

/// One step of [`Decoder::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The first `n` bytes of the buffer are payload.
    Data(usize),
    /// The first `n` bytes of the buffer are framing; drop them.
    Skip(usize),
    /// More bytes are needed.
    NeedMore,
    /// The message ends after the first `n` bytes of the buffer (framing, to drop).
    Done(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    UntilClose,
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    Trailers,
    Done,
}

/// Longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 4096;

/// Decodes a body's framing over bytes that arrive in any slices.
///
/// Call [`Decoder::step`] on the unread bytes; act on the step (keep payload, drop framing,
/// read more); repeat. [`Decoder::eof`] says whether the end of the stream is a proper end.
#[derive(Debug, Clone)]
pub struct Decoder {
    state: State,
}

impl Decoder {
    /// A decoder for `framing`.
    pub fn new(framing: Framing) -> Self {
        Decoder {
            state: match framing {
                Framing::Empty | Framing::Length(0) => State::Done,
                Framing::Length(n) => State::Length(n),
                Framing::Chunked => State::ChunkSize,
                Framing::UntilClose => State::UntilClose,
            },
        }
    }

    /// Whether the message is complete.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Bytes of payload still expected, when known.
    pub fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// The end of the stream: `true` when that ends the body properly (close-delimited).
    pub fn eof(&mut self) -> bool {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                true
            }
            _ => false,
        }
    }

    /// The next step over `buf` (the unread bytes).
    pub fn step(&mut self, buf: &[u8]) -> Result<Step, ParseError> {
        match self.state {
            State::Done => Ok(Step::Done(0)),
            State::Length(n) => {
                if buf.is_empty() {
                    return Ok(Step::NeedMore);
                }
                let k = n.min(buf.len() as u64);
                self.state = if k == n {
                    State::Done
                } else {
                    State::Length(n - k)
                };
                Ok(Step::Data(k as usize))
            }
            State::UntilClose => Ok(if buf.is_empty() {
                Step::NeedMore
            } else {
                Step::Data(buf.len())
            }),
            State::ChunkData(n) => {
                if buf.is_empty() {
                    return Ok(Step::NeedMore);
                }
                let k = n.min(buf.len() as u64);
                self.state = if k == n {
                    State::ChunkEnd
                } else {
                    State::ChunkData(n - k)
                };
                Ok(Step::Data(k as usize))
            }
            State::ChunkSize => {
                let Some((line, used)) = line(buf)? else {
                    return Ok(Step::NeedMore);
                };
                // RFC 9112 §7.1: chunk-size [ chunk-ext ] CRLF
                let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
                let rest = &line[digits..];
                let ext_ok = rest.is_empty() || matches!(rest[0], b';' | b' ' | b'\t');
                if digits == 0 || digits > 15 || !ext_ok {
                    return Err(ParseError::Chunk);
                }
                let size = line[..digits].iter().fold(0u64, |n, b| {
                    n * 16 + u64::from((*b as char).to_digit(16).unwrap_or(0))
                });
                self.state = if size == 0 {
                    State::Trailers
                } else {
                    State::ChunkData(size)
                };
                Ok(Step::Skip(used))
            }
            State::ChunkEnd => {
                let Some((line, used)) = line(buf)? else {
                    return Ok(Step::NeedMore);
                };
                if !line.is_empty() {
                    return Err(ParseError::Chunk);
                }
                self.state = State::ChunkSize;
                Ok(Step::Skip(used))
            }
            State::Trailers => {
                let Some((line, used)) = line(buf)? else {
                    return Ok(Step::NeedMore);
                };
                if line.is_empty() {
                    self.state = State::Done;
                    return Ok(Step::Done(used));
                }
                if !line.contains(&b':') {
                    return Err(ParseError::Chunk);
                }
                Ok(Step::Skip(used))
            }
        }
    }
}

/// A CRLF-terminated line at the start of `buf` (without the CRLF) and its length with it;
/// `None` when no full line is there yet.
fn line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ParseError> {
    match buf.iter().position(|b| *b == b'\n') {
        None if buf.len() > MAX_LINE => Err(ParseError::Chunk),
        None => Ok(None),
        Some(i) => match buf[..i].strip_suffix(b"\r") {
            Some(l) if l.len() <= MAX_LINE => Ok(Some((l, i + 1))),
            _ => Err(ParseError::Chunk),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs the decoder over `wire` fed in pieces cut at `cuts`; returns the payload and
    /// whether the message ended (and how many bytes were left after it).
    fn decode(
        framing: Framing,
        wire: &[u8],
        cuts: &[usize],
    ) -> Result<(Vec<u8>, bool, usize), ParseError> {
        let mut d = Decoder::new(framing);
        let mut buf: Vec<u8> = Vec::new();
        let mut out = Vec::new();
        let mut from = 0;
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
        points.sort_unstable();
        points.push(wire.len());
        for p in points {
            buf.extend_from_slice(&wire[from..p.max(from)]);
            from = p.max(from);
            loop {
                match d.step(&buf)? {
                    Step::Data(n) => {
                        out.extend_from_slice(&buf[..n]);
                        buf.drain(..n);
                    }
                    Step::Skip(n) => {
                        buf.drain(..n);
                    }
                    Step::Done(n) => {
                        buf.drain(..n);
                        return Ok((out, true, buf.len() + wire.len() - from));
                    }
                    Step::NeedMore => break,
                }
            }
        }
        let end = d.eof();
        Ok((out, end, buf.len()))
    }

    fn chunked(parts: &[Vec<u8>]) -> Vec<u8> {
        let mut v = Vec::new();
        for p in parts {
            let mut b = BytesMut::new();
            write_chunk_size(&mut b, p.len());
            v.extend_from_slice(&b);
            v.extend_from_slice(p);
            v.extend_from_slice(b"\r\n");
        }
        v.extend_from_slice(b"0\r\nx-trailer: 1\r\n\r\n");
        v
    }

    proptest! {
        #[test]
        fn chunked_bodies_decode_to_their_payload_however_split(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..6),
            cuts in proptest::collection::vec(any::<usize>(), 0..6),
            extra in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let mut wire = chunked(&parts);
            let body_len = wire.len();
            wire.extend_from_slice(&extra);
            let (out, done, left) = decode(Framing::Chunked, &wire, &cuts).unwrap();
            prop_assert_eq!(out, parts.concat());
            prop_assert!(done);
            prop_assert_eq!(left, wire.len() - body_len);
        }

        #[test]
        fn length_bodies_stop_at_their_length(
            body in proptest::collection::vec(any::<u8>(), 0..500),
            extra in proptest::collection::vec(any::<u8>(), 0..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..6),
        ) {
            let mut wire = body.clone();
            wire.extend_from_slice(&extra);
            let framing = if body.is_empty() { Framing::Empty } else { Framing::Length(body.len() as u64) };
            let (out, done, left) = decode(framing, &wire, &cuts).unwrap();
            prop_assert_eq!(out, body);
            prop_assert!(done);
            prop_assert_eq!(left, extra.len());
        }

        #[test]
        fn the_decoder_never_panics(wire in proptest::collection::vec(any::<u8>(), 0..200), cuts in proptest::collection::vec(any::<usize>(), 0..4)) {
            let _ = decode(Framing::Chunked, &wire, &cuts);
        }

        #[test]
        fn response_heads_never_panic(wire in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut buf = BytesMut::from(&wire[..]);
            match parse_response_head(&mut buf, &mut Vec::new()) {
                // A head taken leaves the rest; anything else leaves the buffer as it was.
                Ok(Some(_)) => prop_assert!(wire.ends_with(&buf)),
                Ok(None) => prop_assert_eq!(&buf[..], &wire[..]),
                Err(_) => {}
            }
        }
    }

    #[test]
    fn malformed_chunks_and_close_delimited_bodies() {
        assert_eq!(
            decode(Framing::Chunked, b"zz\r\n", &[]),
            Err(ParseError::Chunk)
        );
        assert_eq!(
            decode(Framing::Chunked, b"3\r\nabcX\r\n", &[]),
            Err(ParseError::Chunk)
        );
        // A chunked body cut short is not complete.
        assert_eq!(
            decode(Framing::Chunked, b"3\r\nab", &[]),
            Ok((b"ab".to_vec(), false, 0))
        );
        assert_eq!(
            decode(Framing::UntilClose, b"all of it", &[3]),
            Ok((b"all of it".to_vec(), true, 0))
        );
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.append(
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            m
        };
        let f = |m: Method, s: u16, p: &[(&str, &str)]| {
            response_framing(&m, StatusCode::from_u16(s).unwrap(), &h(p))
        };
        assert_eq!(
            f(Method::HEAD, 200, &[("content-length", "10")]),
            Ok(Framing::Empty)
        );
        assert_eq!(
            f(Method::GET, 304, &[("content-length", "10")]),
            Ok(Framing::Empty)
        );
        assert_eq!(
            f(Method::GET, 200, &[("content-length", "10")]),
            Ok(Framing::Length(10))
        );
        assert_eq!(
            f(
                Method::GET,
                200,
                &[
                    ("transfer-encoding", "gzip, chunked"),
                    ("content-length", "3")
                ]
            ),
            Ok(Framing::Chunked)
        );
        assert_eq!(f(Method::GET, 200, &[]), Ok(Framing::UntilClose));
        assert_eq!(
            f(
                Method::GET,
                200,
                &[("content-length", "1"), ("content-length", "2")]
            ),
            Err(ParseError::Framing)
        );
        assert_eq!(
            f(Method::GET, 200, &[("content-length", "-1")]),
            Err(ParseError::Framing)
        );
    }

    #[test]
    fn request_heads_carry_exactly_one_framing_field() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("x"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("99"));
        let mut out = BytesMut::new();
        write_request_head(
            &mut out,
            &Method::POST,
            "/a?b",
            &h,
            RequestFraming::Length(5),
        );
        assert_eq!(
            &out[..],
            b"POST /a?b HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\n"
        );
        out.clear();
        write_request_head(&mut out, &Method::POST, "/", &h, RequestFraming::Empty);
        assert_eq!(
            &out[..],
            b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"
        );
        out.clear();
        write_request_head(&mut out, &Method::GET, "/", &h, RequestFraming::Chunked);
        assert_eq!(
            &out[..],
            b"GET / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let mut b = [0; 20];
        assert_eq!(itoa(0, &mut b), b"0");
        assert_eq!(itoa(u64::MAX, &mut b), b"18446744073709551615");
    }

    #[test]
    fn response_heads_parse() {
        let parse = |wire: &[u8]| {
            let mut buf = BytesMut::from(wire);
            parse_response_head(&mut buf, &mut Vec::new()).map(|h| h.map(|h| (h, buf)))
        };
        let (h, rest) = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: b\r\nx-a: c\r\nVia: 1.1 p\r\n\r\nabc",
        )
        .unwrap()
        .unwrap();
        assert_eq!((h.status.as_u16(), h.version), (200, Version::HTTP_11));
        assert_eq!(&rest[..], b"abc");
        let xa: Vec<_> = h.headers.get_all("x-a").iter().collect();
        assert_eq!(xa, ["b", "c"]);
        assert_eq!(h.headers["via"], "1.1 p");
        assert_eq!(h.headers[header::CONTENT_LENGTH], "3");
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Le").unwrap().is_none());
        assert_eq!(
            parse(b"HTTP/1.1 2000 OK\r\n\r\n").unwrap_err(),
            ParseError::Head
        );
        assert_eq!(
            parse(b"HTTP/1.0 204 No Content\r\nX: \x7f\r\n\r\n").unwrap_err(),
            ParseError::Head
        );
        // Over the limit whether it arrives whole or in pieces.
        let mut big = b"HTTP/1.1 200 OK\r\nX-Big: ".to_vec();
        big.resize(big.len() + MAX_RESPONSE_HEAD, b'a');
        assert_eq!(parse(&big).unwrap_err(), ParseError::TooLarge);
        big.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse(&big).unwrap_err(), ParseError::TooLarge);
    }
}
