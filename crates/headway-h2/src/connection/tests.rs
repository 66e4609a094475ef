//! The server core against a scripted client: frames in, events and frames out.

use super::*;
use crate::hpack::Encoder;
use proptest::prelude::*;

/// A frame the server wrote.
#[derive(Debug)]
struct Out {
    head: Head,
    payload: Bytes,
}

/// A scripted client of one connection.
struct Client {
    server: Connection,
    enc: Encoder,
    dec: hpack::Decoder,
}

impl Client {
    fn new(cfg: Config) -> Self {
        let mut c = Client {
            server: Connection::new(cfg),
            enc: Encoder::new(),
            dec: hpack::Decoder::new(4096),
        };
        c.send(PREFACE);
        let mut b = BytesMut::new();
        frame::write_settings(&mut b, &[]);
        c.send(&b);
        c.server.handle_read().unwrap();
        let out = c.frames();
        assert_eq!(out[0].head.kind, kind::SETTINGS);
        assert!(out
            .iter()
            .any(|f| f.head.kind == kind::SETTINGS && f.head.flags == flag::ACK));
        c
    }

    fn send(&mut self, b: &[u8]) {
        self.server.read_buf().extend_from_slice(b);
    }

    fn feed(&mut self, b: &[u8]) -> Result<(), ConnError> {
        self.send(b);
        self.server.handle_read()
    }

    /// A request's HEADERS frame.
    fn request(&mut self, id: u32, path: &str, extra: &[(&str, &str)], end: bool) -> BytesMut {
        let mut block = BytesMut::new();
        self.enc.pseudo(Pseudo::Method, b"GET", &mut block);
        self.enc.pseudo(Pseudo::Scheme, b"http", &mut block);
        self.enc
            .pseudo(Pseudo::Authority, b"example.test", &mut block);
        self.enc.pseudo(Pseudo::Path, path.as_bytes(), &mut block);
        for (n, v) in extra {
            // Literal without indexing, new name: any bytes, even an uppercase name.
            block.put_u8(0);
            for b in [n.as_bytes(), v.as_bytes()] {
                string(&mut block, b);
            }
        }
        let mut b = BytesMut::new();
        frame::write_headers(&mut b, id, &block, end, 16_384);
        b
    }

    /// Everything the server queued, as frames.
    fn frames(&mut self) -> Vec<Out> {
        let bytes = drain(&mut self.server);
        assert_eq!(self.server.wants_write(), 0);
        frames_of(&bytes)
    }

    /// The status of a HEADERS frame.
    fn status(&mut self, f: &Out) -> Vec<Field> {
        let mut fields = Vec::new();
        self.dec
            .decode(&f.payload, 1 << 20, |x| fields.push(x))
            .unwrap();
        fields
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.server.poll_event()).collect()
    }
}

/// Appends a plain HPACK string (RFC 7541 §5.2, §5.1: a 7-bit prefix length).
fn string(dst: &mut BytesMut, s: &[u8]) {
    let mut n = s.len();
    if n < 127 {
        dst.put_u8(n as u8);
    } else {
        dst.put_u8(127);
        n -= 127;
        while n >= 128 {
            dst.put_u8((n % 128) as u8 | 0x80);
            n /= 128;
        }
        dst.put_u8(n as u8);
    }
    dst.put_slice(s);
}

/// Everything `c` queued.
fn drain(c: &mut Connection) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        let mut iov = [IoSlice::new(&[]); 16];
        let n = c.transmit(&mut iov);
        if n == 0 {
            return bytes;
        }
        let len: usize = iov[..n].iter().map(|s| s.len()).sum();
        for s in &iov[..n] {
            bytes.extend_from_slice(s);
        }
        c.advance(len);
    }
}

/// `bytes` as whole frames (after a client's preface, if they begin with it).
fn frames_of(bytes: &[u8]) -> Vec<Out> {
    let bytes = bytes.strip_prefix(&PREFACE[..]).unwrap_or(bytes);
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(head) = Head::parse(&bytes[at..]) {
        let payload = Bytes::copy_from_slice(&bytes[at + HEADER_LEN..at + HEADER_LEN + head.len]);
        at += HEADER_LEN + head.len;
        out.push(Out { head, payload });
    }
    assert_eq!(at, bytes.len(), "whole frames only");
    out
}

fn ok_head() -> http::response::Parts {
    let mut head = http::Response::new(()).into_parts().0;
    head.headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    head
}

fn rst_of(out: &[Out], id: u32) -> Option<Reason> {
    out.iter()
        .find(|f| f.head.kind == kind::RST_STREAM && f.head.stream == id)
        .map(|f| frame::rst_reason(&f.payload).unwrap())
}

fn goaway_of(out: &[Out]) -> Option<Reason> {
    out.iter()
        .find(|f| f.head.kind == kind::GOAWAY)
        .map(|f| frame::goaway(&f.payload).unwrap().1)
}

#[test]
fn a_request_is_read_and_its_answer_written() {
    let mut c = Client::new(Config::default());
    let req = c.request(1, "/a?b=c", &[("accept", "*/*")], true);
    c.feed(&req).unwrap();
    let ev = c.events();
    let [Event::Request {
        stream: 1,
        head,
        end: true,
        ..
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(head.method, Method::GET);
    assert_eq!(head.uri, "http://example.test/a?b=c");
    assert_eq!(head.version, Version::HTTP_2);
    assert_eq!(head.headers["accept"], "*/*");
    c.server.send_response(1, &ok_head(), false).unwrap();
    c.server
        .send_data(1, Bytes::from_static(b"hello"), true)
        .unwrap();
    let out = c.frames();
    assert_eq!(out.len(), 2);
    assert_eq!(
        (out[0].head.kind, out[0].head.flags),
        (kind::HEADERS, flag::END_HEADERS)
    );
    let fields = c.status(&out[0]);
    assert_eq!(
        fields[0],
        Field::Pseudo(Pseudo::Status, Bytes::from_static(b"200"))
    );
    assert_eq!(
        (out[1].head.kind, out[1].head.flags),
        (kind::DATA, flag::END_STREAM)
    );
    assert_eq!(out[1].payload, "hello");
    assert_eq!(c.server.open_streams(), 0);
}

#[test]
fn a_body_arrives_and_its_window_is_given_back_as_it_is_consumed() {
    let mut c = Client::new(Config {
        window: 100_000,
        connection_window: 100_000,
        ..Config::default()
    });
    let req = c.request(1, "/up", &[], false);
    c.feed(&req).unwrap();
    let mut b = BytesMut::new();
    for _ in 0..4 {
        frame::write_data_head(&mut b, 1, 15_000, false);
        b.put_bytes(7, 15_000);
    }
    c.feed(&b).unwrap();
    let got: usize = c
        .events()
        .iter()
        .map(|e| match e {
            Event::Data { data, .. } => data.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(got, 60_000);
    assert!(c
        .frames()
        .iter()
        .all(|f| f.head.kind != kind::WINDOW_UPDATE));
    c.server.release(1, 60_000);
    let out = c.frames();
    let ups: Vec<_> = out
        .iter()
        .filter(|f| f.head.kind == kind::WINDOW_UPDATE)
        .map(|f| (f.head.stream, frame::window_increment(&f.payload).unwrap()))
        .collect();
    assert_eq!(ups, [(1, 60_000), (0, 60_000)]);
    // The client sending past the connection's window breaks flow control.
    let mut b = BytesMut::new();
    for _ in 0..12 {
        frame::write_data_head(&mut b, 1, 15_000, false);
        b.put_bytes(7, 15_000);
    }
    assert!(c.feed(&b).is_err());
    assert_eq!(goaway_of(&c.frames()), Some(Reason::FLOW_CONTROL_ERROR));
}

#[test]
fn data_past_the_window_waits_for_the_clients_window_updates() {
    let mut c = Client::new(Config::default());
    let mut b = BytesMut::new();
    frame::write_settings(&mut b, &[Setting::InitialWindowSize(10)]);
    c.feed(&b).unwrap();
    let req = c.request(1, "/", &[], true);
    c.feed(&req).unwrap();
    c.frames();
    c.server.send_response(1, &ok_head(), false).unwrap();
    c.server
        .send_data(1, Bytes::from(vec![1; 25]), true)
        .unwrap();
    let out = c.frames();
    let data: usize = out
        .iter()
        .filter(|f| f.head.kind == kind::DATA)
        .map(|f| f.head.len)
        .sum();
    assert_eq!(data, 10);
    assert_eq!(c.server.buffered(1), 15);
    let mut b = BytesMut::new();
    frame::write_window_update(&mut b, 1, 100);
    c.feed(&b).unwrap();
    let out = c.frames();
    let last = out.last().unwrap();
    assert_eq!(
        (last.head.kind, last.head.len, last.head.flags),
        (kind::DATA, 15, flag::END_STREAM)
    );
    assert_eq!(c.server.open_streams(), 0);
}

#[test]
fn trailers_follow_the_data_they_wait_for() {
    let mut c = Client::new(Config::default());
    let req = c.request(1, "/", &[], true);
    c.feed(&req).unwrap();
    c.server.send_response(1, &ok_head(), false).unwrap();
    c.server
        .send_data(1, Bytes::from_static(b"x"), false)
        .unwrap();
    let mut t = HeaderMap::new();
    t.insert("grpc-status", http::HeaderValue::from_static("0"));
    c.server.send_trailers(1, t).unwrap();
    let out = c.frames();
    let kinds: Vec<_> = out.iter().map(|f| (f.head.kind, f.head.flags)).collect();
    assert_eq!(
        kinds,
        [
            (kind::HEADERS, flag::END_HEADERS),
            (kind::DATA, 0),
            (kind::HEADERS, flag::END_HEADERS | flag::END_STREAM)
        ]
    );
    assert!(c.server.send_data(1, Bytes::new(), true).is_err());
}

#[test]
fn malformed_requests_are_reset_and_the_connection_goes_on() {
    let mut c = Client::new(Config::default());
    for (id, extra) in [
        (1, ("Upper", "x")),
        (3, ("connection", "close")),
        (5, ("te", "gzip")),
        (7, ("content-length", "1, 2")),
    ] {
        let req = c.request(id, "/", &[extra], true);
        c.feed(&req).unwrap();
        assert_eq!(
            rst_of(&c.frames(), id),
            Some(Reason::PROTOCOL_ERROR),
            "{extra:?}"
        );
    }
    // A body longer than its Content-Length.
    let req = c.request(9, "/", &[("content-length", "2")], false);
    c.feed(&req).unwrap();
    let mut b = BytesMut::new();
    frame::write_data_head(&mut b, 9, 3, true);
    b.put_slice(b"abc");
    c.feed(&b).unwrap();
    assert_eq!(rst_of(&c.frames(), 9), Some(Reason::PROTOCOL_ERROR));
    let ev = c.events();
    assert!(
        matches!(ev.last(), Some(Event::Reset { stream: 9, .. })),
        "{ev:?}"
    );
    let req = c.request(11, "/", &[("te", "trailers")], true);
    c.feed(&req).unwrap();
    assert!(matches!(
        c.events()[..],
        [Event::Request { stream: 11, .. }]
    ));
}

#[test]
fn an_interrupted_header_block_fails_the_connection() {
    let mut c = Client::new(Config::default());
    let mut req = c.request(1, "/", &[], true);
    req[4] &= !flag::END_HEADERS;
    let mut b = BytesMut::new();
    frame::write_ping(&mut b, false, [0; 8]);
    req.extend_from_slice(&b);
    assert!(c.feed(&req).is_err());
    assert_eq!(goaway_of(&c.frames()), Some(Reason::PROTOCOL_ERROR));
    assert!(c.server.is_done());
}

#[test]
fn a_block_in_pieces_is_joined() {
    let mut c = Client::new(Config::default());
    let req = c.request(1, "/joined", &[("x-a", "1")], true);
    let h = Head::parse(&req).unwrap();
    let block = &req[HEADER_LEN..];
    let mut b = BytesMut::new();
    frame::write_headers(&mut b, 1, block, true, 7);
    assert!(b.len() > req.len() + HEADER_LEN, "split in pieces");
    let _ = h;
    c.feed(&b).unwrap();
    let ev = c.events();
    let [Event::Request { head, .. }] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(head.uri.path(), "/joined");
}

#[test]
fn streams_past_the_limit_are_refused() {
    let mut c = Client::new(Config {
        max_concurrent_streams: 2,
        ..Config::default()
    });
    for id in [1, 3, 5] {
        let req = c.request(id, "/", &[], true);
        c.feed(&req).unwrap();
    }
    assert_eq!(c.events().len(), 2);
    assert_eq!(rst_of(&c.frames(), 5), Some(Reason::REFUSED_STREAM));
}

#[test]
fn an_oversized_header_list_is_answered_431() {
    let mut c = Client::new(Config {
        max_header_list: 200,
        ..Config::default()
    });
    let big = "v".repeat(150);
    let req = c.request(1, "/", &[("x-big", &big)], true);
    c.feed(&req).unwrap();
    assert!(c.events().is_empty());
    let out = c.frames();
    let f = out
        .iter()
        .find(|f| f.head.kind == kind::HEADERS)
        .unwrap_or_else(|| panic!("{out:?}"));
    assert_eq!(f.head.flags & flag::END_STREAM, flag::END_STREAM);
    let fields = c.status(f);
    assert_eq!(
        fields[0],
        Field::Pseudo(Pseudo::Status, Bytes::from_static(b"431"))
    );
    // The connection goes on.
    let req = c.request(3, "/", &[], true);
    c.feed(&req).unwrap();
    assert_eq!(c.events().len(), 1);
}

#[test]
fn a_rapid_reset_flood_ends_the_connection() {
    let mut c = Client::new(Config {
        max_resets: 10,
        ..Config::default()
    });
    let mut id = 1;
    let r = loop {
        let mut b = c.request(id, "/", &[], true);
        frame::write_rst(&mut b, id, Reason::CANCEL);
        if let Err(e) = c.feed(&b) {
            break e;
        }
        id += 2;
        assert!(id < 100, "never stopped");
    };
    assert!(matches!(
        r,
        ConnError::Protocol {
            reason: Reason::ENHANCE_YOUR_CALM,
            ..
        }
    ));
    assert_eq!(goaway_of(&c.frames()), Some(Reason::ENHANCE_YOUR_CALM));
}

#[test]
fn graceful_shutdown_lets_open_streams_finish_and_ignores_new_ones() {
    let mut c = Client::new(Config::default());
    let req = c.request(1, "/", &[], true);
    c.feed(&req).unwrap();
    c.server.graceful_shutdown();
    assert_eq!(goaway_of(&c.frames()), Some(Reason::NO_ERROR));
    let req = c.request(3, "/", &[], true);
    c.feed(&req).unwrap();
    assert_eq!(c.events().len(), 1, "stream 3 came after the GOAWAY");
    assert!(!c.server.is_done());
    c.server.send_response(1, &ok_head(), true).unwrap();
    assert!(c.server.is_done());
}

#[test]
fn pings_and_settings_are_acknowledged_and_bad_ones_refused() {
    let mut c = Client::new(Config::default());
    let mut b = BytesMut::new();
    frame::write_ping(&mut b, false, *b"12345678");
    c.feed(&b).unwrap();
    let out = c.frames();
    assert_eq!(
        (out[0].head.kind, out[0].head.flags),
        (kind::PING, flag::ACK)
    );
    assert_eq!(out[0].payload, "12345678");
    let mut c = Client::new(Config::default());
    assert!(c.feed(b"\0\0\x05\x04\0\0\0\0\0abcde").is_err());
    assert_eq!(goaway_of(&c.frames()), Some(Reason::FRAME_SIZE_ERROR));
    let mut c = Client::new(Config::default());
    assert!(
        c.feed(b"\0\0\0\x05\0\0\0\0\x01").is_err(),
        "PUSH_PROMISE from a client"
    );
    let mut s = Connection::new(Config::default());
    s.read_buf().extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    assert!(s.handle_read().is_err(), "HTTP/1 is not the preface");
}

proptest! {
    #[test]
    fn arbitrary_frames_never_panic(frames in proptest::collection::vec(
        (0u8..12, any::<u8>(), 0u32..9, proptest::collection::vec(any::<u8>(), 0..40)), 0..30)
    ) {
        let mut c = Client::new(Config::default());
        for (k, flags, stream, payload) in frames {
            let mut b = BytesMut::new();
            Head { len: payload.len(), kind: k, flags, stream }.emit(&mut b);
            b.extend_from_slice(&payload);
            if c.feed(&b).is_err() {
                break;
            }
            while let Some(e) = c.server.poll_event() {
                if let Event::Request { stream, .. } = e {
                    let _ = c.server.send_response(stream, &ok_head(), false);
                    let _ = c.server.send_data(stream, Bytes::from_static(b"abc"), true);
                }
            }
            c.frames();
        }
    }
}

/// The client side against a scripted server.
mod client {
    use super::*;

    /// A client connection whose preface and SETTINGS were taken, with the server's SETTINGS
    /// (`settings`) given to it.
    fn connected(settings: &[Setting]) -> (Connection, hpack::Decoder) {
        let mut c = Connection::client(Config::default());
        let out = drain(&mut c);
        assert!(out.starts_with(PREFACE));
        let mut b = BytesMut::new();
        frame::write_settings(&mut b, settings);
        c.read_buf().extend_from_slice(&b);
        c.handle_read().unwrap();
        let acks = frames_of(&drain(&mut c));
        assert!(acks
            .iter()
            .any(|f| f.head.kind == kind::SETTINGS && f.head.flags == flag::ACK));
        (c, hpack::Decoder::new(4096))
    }

    fn feed(c: &mut Connection, b: &[u8]) {
        c.read_buf().extend_from_slice(b);
        c.handle_read().unwrap();
    }

    fn get(c: &mut Connection) -> u32 {
        let uri: Uri = "http://origin.test/x?y=1".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("accept", http::HeaderValue::from_static("*/*"));
        h.insert(header::CONNECTION, http::HeaderValue::from_static("close"));
        c.send_request(&Method::GET, &uri, &h, true).unwrap()
    }

    /// An answer's HEADERS frame from the server.
    fn answer(id: u32, status: &str, end: bool) -> BytesMut {
        let mut enc = Encoder::new();
        let mut block = BytesMut::new();
        enc.status(
            StatusCode::from_bytes(status.as_bytes()).unwrap(),
            &mut block,
        );
        enc.header(
            &header::CONTENT_TYPE,
            &http::HeaderValue::from_static("text/plain"),
            &mut block,
        );
        let mut b = BytesMut::new();
        frame::write_headers(&mut b, id, &block, end, 16_384);
        b
    }

    fn events(c: &mut Connection) -> Vec<Event> {
        std::iter::from_fn(|| c.poll_event()).collect()
    }

    #[test]
    fn a_request_goes_out_and_its_answer_comes_back() {
        let (mut c, mut dec) = connected(&[]);
        let id = get(&mut c);
        assert_eq!(id, 1);
        let out = frames_of(&drain(&mut c));
        let [f] = &out[..] else { panic!("{out:?}") };
        assert_eq!(
            (f.head.kind, f.head.flags),
            (kind::HEADERS, flag::END_HEADERS | flag::END_STREAM)
        );
        let mut fields = Vec::new();
        dec.decode(&f.payload, 1 << 20, |x| fields.push(x)).unwrap();
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        assert_eq!(
            fields[..4],
            [
                Field::Pseudo(Pseudo::Method, b("GET")),
                Field::Pseudo(Pseudo::Scheme, b("http")),
                Field::Pseudo(Pseudo::Authority, b("origin.test")),
                Field::Pseudo(Pseudo::Path, b("/x?y=1")),
            ]
        );
        assert_eq!(
            fields.len(),
            5,
            "connection-specific fields are not sent: {fields:?}"
        );
        let mut reply = answer(1, "103", false);
        reply.extend_from_slice(&answer(1, "200", false));
        frame::write_data_head(&mut reply, 1, 2, true);
        reply.extend_from_slice(b"ok");
        feed(&mut c, &reply);
        let ev = events(&mut c);
        assert!(
            matches!(&ev[..], [Event::Response { stream: 1, head, end: false, .. }, Event::Data { stream: 1, end: true, .. }] if head.status == 200),
            "the 103 is skipped: {ev:?}"
        );
        assert!(!c.is_open(1));
    }

    #[test]
    fn the_servers_stream_limit_holds_and_a_goaway_returns_the_streams_past_it() {
        let (mut c, _) = connected(&[Setting::MaxConcurrentStreams(2)]);
        assert_eq!((get(&mut c), get(&mut c)), (1, 3));
        assert!(!c.can_open());
        assert!(c
            .send_request(
                &Method::GET,
                &Uri::from_static("/"),
                &HeaderMap::new(),
                true
            )
            .is_err());
        feed(&mut c, &answer(1, "204", true));
        assert!(c.can_open());
        assert_eq!(get(&mut c), 5);
        let mut b = BytesMut::new();
        frame::write_goaway(&mut b, 3, Reason::NO_ERROR, b"");
        feed(&mut c, &b);
        let ev = events(&mut c);
        assert!(
            matches!(ev.last(), Some(Event::Unprocessed { stream: 5 })),
            "{ev:?}"
        );
        assert!(!c.can_open());
        assert!(c.is_open(3) && !c.is_done());
        feed(&mut c, &answer(3, "200", true));
        assert!(c.is_done());
    }

    #[test]
    fn a_refused_stream_and_a_pong_are_reported() {
        let (mut c, _) = connected(&[]);
        let id = get(&mut c);
        let mut b = BytesMut::new();
        frame::write_rst(&mut b, id, Reason::REFUSED_STREAM);
        feed(&mut c, &b);
        let ev = events(&mut c);
        assert!(matches!(
            ev[..],
            [Event::Reset {
                stream: 1,
                reason: Reason::REFUSED_STREAM
            }]
        ));
        assert!(c.ping());
        assert!(!c.ping(), "one ping at a time");
        let out = frames_of(&drain(&mut c));
        let ping = out.iter().find(|f| f.head.kind == kind::PING).unwrap();
        let mut b = BytesMut::new();
        frame::write_ping(&mut b, true, ping.payload[..].try_into().unwrap());
        feed(&mut c, &b);
        assert!(matches!(events(&mut c)[..], [Event::Pong]));
    }

    #[test]
    fn a_body_goes_out_as_the_servers_window_allows() {
        let (mut c, _) = connected(&[Setting::InitialWindowSize(5)]);
        let id = c
            .send_request(
                &Method::POST,
                &Uri::from_static("http://o/up"),
                &HeaderMap::new(),
                false,
            )
            .unwrap();
        c.send_data(id, Bytes::from_static(b"0123456789"), true)
            .unwrap();
        let out = frames_of(&drain(&mut c));
        let sent: Vec<_> = out
            .iter()
            .filter(|f| f.head.kind == kind::DATA)
            .map(|f| f.payload.clone())
            .collect();
        assert_eq!(sent, [Bytes::from_static(b"01234")]);
        let mut b = BytesMut::new();
        frame::write_window_update(&mut b, id, 5);
        feed(&mut c, &b);
        let out = frames_of(&drain(&mut c));
        assert_eq!(out[0].payload, "56789");
        assert_eq!(out[0].head.flags, flag::END_STREAM);
    }

    #[test]
    fn a_server_opening_a_stream_or_data_before_the_head_is_refused() {
        let (mut c, _) = connected(&[]);
        let id = get(&mut c);
        let mut b = BytesMut::new();
        frame::write_data_head(&mut b, id, 1, true);
        b.put_u8(b'x');
        feed(&mut c, &b);
        assert!(matches!(
            events(&mut c)[..],
            [Event::Reset {
                reason: Reason::PROTOCOL_ERROR,
                ..
            }]
        ));
        let (mut c, _) = connected(&[]);
        c.read_buf().extend_from_slice(&answer(2, "200", true));
        assert!(c.handle_read().is_err());
    }
}
