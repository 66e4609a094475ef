use super::*;
use http::HeaderValue;
use proptest::prelude::*;

fn take(bytes: &[u8]) -> (Head, BytesMut) {
    let mut buf = BytesMut::from(bytes);
    let head = take_head(&mut buf, 8192, 100, &mut Vec::new());
    (head, buf)
}

#[test]
fn a_bodiless_request_is_taken_and_the_next_one_stays() {
    let (head, rest) = take(
        b"GET /a/b?c=1 HTTP/1.1\r\nHost: example\r\nX-Two: 1\r\nx-two: 2\r\n\r\nGET /next HTTP/1.1\r\n",
    );
    let Head::Ready(req) = head else {
        panic!("not taken: {head:?}")
    };
    assert_eq!(req.method(), Method::GET);
    assert_eq!(req.uri().path(), "/a/b");
    assert_eq!(req.uri().query(), Some("c=1"));
    assert_eq!(req.version(), Version::HTTP_11);
    assert_eq!(req.headers()["host"], "example");
    let two: Vec<_> = req.headers().get_all("x-two").iter().collect();
    assert_eq!(two, ["1", "2"]);
    assert!(req.body().is_end_stream());
    assert_eq!(&rest[..], b"GET /next HTTP/1.1\r\n");
    let (head, rest) = take(&rest);
    assert!(matches!(head, Head::Partial));
    assert_eq!(&rest[..], b"GET /next HTTP/1.1\r\n", "a partial head stays");
}

#[test]
fn requests_with_bodies_and_oddities_are_left_for_hyper() {
    let cases: [&[u8]; 10] = [
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        b"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"PUT / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
        b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\nab",
        b"CONNECT example:443 HTTP/1.1\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
        b"GET /\x01 HTTP/1.1\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    ];
    for case in cases {
        let (head, rest) = take(case);
        assert!(
            matches!(head, Head::Other),
            "{:?} → {head:?}",
            String::from_utf8_lossy(case)
        );
        assert_eq!(&rest[..], case, "the bytes are left as they were");
    }
}

#[test]
fn an_upgrade_request_is_taken_with_its_fields_and_the_bytes_after_it_stay() {
    let (head, rest) =
        take(b"GET /ws HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x00");
    let Head::Ready(req) = head else {
        panic!("{head:?}")
    };
    assert_eq!(req.headers()["upgrade"], "websocket");
    assert_eq!(req.headers()["connection"], "upgrade");
    assert_eq!(
        &rest[..],
        b"\x81\x00",
        "a WebSocket frame sent early is not the loop's"
    );
}

#[test]
fn heads_over_the_limits_are_left_for_hyper() {
    let mut buf =
        BytesMut::from(&b"GET / HTTP/1.1\r\nX-Big: aaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n"[..]);
    assert!(matches!(
        take_head(&mut buf, 32, 100, &mut Vec::new()),
        Head::Other
    ));
    let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nX-Big: aaaaaaaaaaaaaaaaaaaaaaaaa"[..]);
    assert!(
        matches!(take_head(&mut buf, 32, 100, &mut Vec::new()), Head::Other),
        "an unfinished head already over the limit"
    );
    let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"[..]);
    assert!(matches!(
        take_head(&mut buf, 8192, 2, &mut Vec::new()),
        Head::Other
    ));
    let many: String = (0..MAX_FAST_HEADERS + 1)
        .map(|i| format!("X-{i}: v\r\n"))
        .collect();
    let text = format!("GET / HTTP/1.1\r\n{many}\r\n");
    let mut buf = BytesMut::from(text.as_bytes());
    assert!(matches!(
        take_head(&mut buf, 65536, 1000, &mut Vec::new()),
        Head::Other
    ));
}

fn asked(head: bool, version: Version, keep_alive: bool) -> Asked {
    Asked {
        head,
        version,
        keep_alive,
    }
}

const DATE: &[u8] = b"Sat, 28 Nov 2026 12:00:00 GMT";

fn head_of(
    status: u16,
    fields: &[(&str, &str)],
    a: Asked,
    len: Option<u64>,
) -> (String, Framing, bool) {
    let mut h = HeaderMap::new();
    for (n, v) in fields {
        h.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let mut out = BytesMut::new();
    let (f, keep) = write_head(
        &mut out,
        StatusCode::from_u16(status).unwrap(),
        &h,
        a,
        len,
        DATE,
    );
    (String::from_utf8(out.to_vec()).unwrap(), f, keep)
}

#[test]
fn answers_are_framed_as_hyper_frames_them() {
    let a11 = asked(false, Version::HTTP_11, true);
    let (h, f, keep) = head_of(200, &[("x-a", "1")], a11, Some(5));
    assert_eq!(
        h,
        "HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 5\r\ndate: Sat, 28 Nov 2026 12:00:00 GMT\r\n\r\n"
    );
    assert_eq!((f, keep), (Framing::Length(5), true));
    // A length the answer declares is kept as it is.
    let (h, f, _) = head_of(200, &[("content-length", "7")], a11, None);
    assert!(
        h.contains("content-length: 7\r\n") && !h.contains("chunked"),
        "{h}"
    );
    assert_eq!(f, Framing::Length(7));
    // Unknown length: chunked for HTTP/1.1, until close for HTTP/1.0.
    let (h, f, keep) = head_of(200, &[("transfer-encoding", "gzip, chunked")], a11, None);
    assert_eq!(h.matches("transfer-encoding").count(), 1, "{h}");
    assert_eq!((f, keep), (Framing::Chunked, true));
    let (h, f, keep) = head_of(200, &[], asked(false, Version::HTTP_10, true), None);
    assert!(
        h.starts_with("HTTP/1.0 200 OK\r\n") && !h.contains("keep-alive"),
        "{h}"
    );
    assert_eq!((f, keep), (Framing::UntilClose, false));
    // HTTP/1.0 keep-alive is said; a closing HTTP/1.1 exchange says close.
    let (h, _, keep) = head_of(200, &[], asked(false, Version::HTTP_10, true), Some(1));
    assert!(h.contains("connection: keep-alive\r\n") && keep, "{h}");
    let (h, _, keep) = head_of(200, &[], asked(false, Version::HTTP_11, false), Some(1));
    assert!(h.contains("connection: close\r\n") && !keep, "{h}");
    let (h, _, keep) = head_of(503, &[("connection", "close")], a11, Some(1));
    assert_eq!(h.matches("connection").count(), 1, "{h}");
    assert!(h.starts_with("HTTP/1.1 503 Service Unavailable\r\n") && !keep);
    // HEAD, 204 and 304 have no body; HEAD keeps the length it would have had.
    let (h, f, _) = head_of(200, &[], asked(true, Version::HTTP_11, true), Some(9));
    assert!(h.contains("content-length: 9\r\n"), "{h}");
    assert_eq!(f, Framing::None);
    let (h, f, _) = head_of(204, &[], a11, Some(0));
    assert!(!h.contains("content-length"), "{h}");
    assert_eq!(f, Framing::None);
    let (_, f, _) = head_of(304, &[("content-length", "10")], a11, None);
    assert_eq!(f, Framing::None);
    // An empty body says so; a Date of the answer's own is not doubled.
    let (h, f, _) = head_of(200, &[("date", "yesterday")], a11, Some(0));
    assert!(h.contains("content-length: 0\r\n"), "{h}");
    assert_eq!(h.matches("date").count(), 1, "{h}");
    assert_eq!(f, Framing::None);
}

#[test]
fn the_date_is_an_http_date() {
    let d = http_date();
    let text = std::str::from_utf8(&d).unwrap();
    assert!(httpdate::parse_http_date(text).is_ok(), "{text}");
}

proptest! {
    /// Whatever the bytes, the parser does not panic; it takes a whole prefix or nothing.
    #[test]
    fn any_bytes_are_taken_whole_or_left_alone(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        max_head in 0usize..700,
        max_headers in 0usize..80,
    ) {
        let mut buf = BytesMut::from(&bytes[..]);
        match take_head(&mut buf, max_head, max_headers, &mut Vec::new()) {
            Head::Ready(_) => prop_assert!(bytes.ends_with(&buf)),
            Head::Partial | Head::Other => prop_assert_eq!(&buf[..], &bytes[..]),
        }
    }

    /// Requests of random methods, targets and fields come out as they went in.
    #[test]
    fn well_formed_requests_round_trip(
        method in prop::sample::select(vec!["GET", "HEAD", "DELETE", "OPTIONS", "POST", "PURGE"]),
        path in "/[a-zA-Z0-9._~/-]{0,40}(\\?[a-z0-9=&]{0,20})?",
        fields in proptest::collection::vec(("x-[a-z]{1,10}", "[ -~&&[^ ]][ -~]{0,30}[ -~&&[^ ]]"), 0..20),
        tail in proptest::collection::vec(any::<u8>(), 0..50),
        http10 in any::<bool>(),
    ) {
        let mut text = format!("{method} {path} HTTP/1.{}\r\n", u8::from(!http10));
        for (n, v) in &fields {
            text += &format!("{n}: {v}\r\n");
        }
        text += "\r\n";
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(&tail);
        let mut buf = BytesMut::from(&bytes[..]);
        let Head::Ready(req) = take_head(&mut buf, 8192, 100, &mut Vec::new()) else {
            return Err(TestCaseError::fail("not taken"));
        };
        prop_assert_eq!(req.method().as_str(), method);
        prop_assert_eq!(req.uri().to_string(), path);
        prop_assert_eq!(req.version(), if http10 { Version::HTTP_10 } else { Version::HTTP_11 });
        let got: Vec<(String, String)> = req
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        let mut want: Vec<(String, String)> = fields.clone();
        let mut got_sorted = got.clone();
        want.sort();
        got_sorted.sort();
        prop_assert_eq!(got_sorted, want);
        prop_assert_eq!(&buf[..], &tail[..]);
    }

    /// Every head written parses back with its status, and its framing agrees with its fields.
    #[test]
    fn written_heads_parse_back(
        status in prop::sample::select(vec![200u16, 201, 204, 301, 304, 404, 500, 503]),
        head in any::<bool>(),
        http10 in any::<bool>(),
        keep_alive in any::<bool>(),
        len in proptest::option::of(0u64..100_000),
        fields in proptest::collection::vec(("x-[a-z]{1,10}", "[a-z0-9]{1,20}"), 0..10),
    ) {
        let version = if http10 { Version::HTTP_10 } else { Version::HTTP_11 };
        let f: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let (text, framing, keep) = head_of(status, &f, asked(head, version, keep_alive), len);
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut slots);
        let parsed = resp.parse(text.as_bytes()).unwrap();
        prop_assert_eq!(parsed, httparse::Status::Complete(text.len()));
        prop_assert_eq!(resp.code, Some(status));
        let has = |n: &str| resp.headers.iter().any(|h| h.name.eq_ignore_ascii_case(n));
        prop_assert_eq!(has("transfer-encoding"), framing == Framing::Chunked);
        if let Framing::Length(n) = framing {
            prop_assert_eq!(Some(n), len);
            prop_assert!(has("content-length"));
        }
        prop_assert!(!keep || keep_alive);
        prop_assert!(has("date"));
    }
}
