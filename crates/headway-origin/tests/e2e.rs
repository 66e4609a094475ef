//! End-to-end tests: the origin on 127.0.0.1:0, driven by `fetch`, a hyper client and raw
//! sockets.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use headway_origin::corpus::{self, Document, Kind, PERIOD};
use headway_origin::{fetch, fetch_blocking, listen, serve, OriginArgs, OriginConfig};
use http_body_util::{BodyExt, Empty};
use hyper::header::{self, HeaderMap};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

struct Origin {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Origin {
    async fn start(cfg: OriginConfig) -> Origin {
        let listener = listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(serve(listener, cfg, async {
            let _ = rx.await;
        }));
        Origin {
            addr,
            stop: Some(tx),
            task,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
    }
}

/// One request on a fresh connection with the given method and headers.
async fn request(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, HeaderMap, Vec<u8>) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "origin");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, headers, body)
}

fn doc_bytes(doc: Document, start: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    assert_eq!(doc.fill(start, &mut v), len);
    v
}

fn h<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).map(|v| v.to_str().unwrap()).unwrap_or("")
}

/// Splits a raw byte stream of HTTP/1.1 responses (all with Content-Length) into
/// (status line, body) pairs.
fn split_responses(mut raw: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = std::str::from_utf8(&raw[..end]).unwrap();
        let status = head.lines().next().unwrap().to_owned();
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().unwrap())
            })
            .unwrap();
        let body = raw[end + 4..end + 4 + len].to_vec();
        out.push((status, body));
        raw = &raw[end + 4 + len..];
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_arrives_intact() {
    let o = Origin::start(OriginConfig::default()).await;
    for kind in Kind::ALL {
        let f = fetch(o.addr, &format!("/corpus/{kind}/300KiB?seed=7"))
            .await
            .unwrap();
        assert_eq!(f.status, 200, "{kind}");
        assert_eq!(f.bytes, 300 * 1024, "{kind}");
        assert_eq!(f.sha256, corpus::sha256(kind, 300 * 1024, 7), "{kind}");
        assert!(f.total_time >= f.header_time);
    }
    // Crosses a period boundary, default seed.
    let f = fetch(o.addr, "/corpus/doc/2MB").await.unwrap();
    assert_eq!(f.bytes, 2_000_000);
    assert_eq!(f.sha256, corpus::sha256(Kind::Doc, 2_000_000, 1));
    // A named file of scenario 000.
    let f = fetch(o.addr, "/files/doc_small").await.unwrap();
    let doc = corpus::file("doc_small").unwrap();
    assert_eq!((f.status, f.bytes), (200, 1_000_000));
    assert_eq!(f.sha256, doc.sha256());
    // Different seeds are different documents.
    let f = fetch(o.addr, "/corpus/random/1KiB?seed=8").await.unwrap();
    assert_ne!(f.sha256, corpus::sha256(Kind::Random, 1024, 7));
    assert_eq!(f.sha256, corpus::sha256(Kind::Random, 1024, 8));
    o.stop().await;
}

#[tokio::test]
async fn document_headers() {
    let o = Origin::start(OriginConfig {
        cache_control: Some("max-age=60".into()),
        ..OriginConfig::default()
    })
    .await;
    let (status, headers, body) = request(o.addr, Method::GET, "/corpus/pdf/5000", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(body, doc_bytes(Document::new(Kind::Pdf, 5000, 1), 0, 5000));
    assert_eq!(h(&headers, "content-length"), "5000");
    assert_eq!(h(&headers, "content-type"), "application/pdf");
    assert_eq!(h(&headers, "etag"), "\"hw1-pdf-5000-1\"");
    assert_eq!(
        h(&headers, "last-modified"),
        "Mon, 01 Jan 2024 00:00:00 GMT"
    );
    assert_eq!(h(&headers, "cache-control"), "max-age=60");
    assert_eq!(h(&headers, "accept-ranges"), "bytes");
    for (kind, ct) in [
        ("doc", "application/msword"),
        ("random", "application/octet-stream"),
        ("html", "text/html; charset=utf-8"),
    ] {
        let (_, headers, _) = request(o.addr, Method::GET, &format!("/corpus/{kind}/1"), &[]).await;
        assert_eq!(h(&headers, "content-type"), ct);
    }
    o.stop().await;
}

#[tokio::test]
async fn head_has_length_and_no_body() {
    let o = Origin::start(OriginConfig::default()).await;
    let (status, headers, body) = request(o.addr, Method::HEAD, "/corpus/html/64KiB", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(h(&headers, "content-length"), "65536");
    assert!(body.is_empty());
    let (status, headers, body) = request(o.addr, Method::HEAD, "/healthz", &[]).await;
    assert_eq!((status, h(&headers, "content-length")), (200, "3"));
    assert!(body.is_empty());
    o.stop().await;
}

#[tokio::test]
async fn ranges() {
    let o = Origin::start(OriginConfig::default()).await;
    let doc = Document::new(Kind::Html, 5000, 1);
    let (status, headers, body) = request(
        o.addr,
        Method::GET,
        "/corpus/html/5000",
        &[("range", "bytes=10-19")],
    )
    .await;
    assert_eq!(status, 206);
    assert_eq!(h(&headers, "content-range"), "bytes 10-19/5000");
    assert_eq!(h(&headers, "content-length"), "10");
    assert_eq!(body, doc_bytes(doc, 10, 10));

    let (status, headers, body) = request(
        o.addr,
        Method::GET,
        "/corpus/html/5000",
        &[("range", "bytes=-100")],
    )
    .await;
    assert_eq!(
        (status, h(&headers, "content-range")),
        (206, "bytes 4900-4999/5000")
    );
    assert_eq!(body, doc_bytes(doc, 4900, 100));

    // Across a period boundary of a 2 MiB document.
    let big = Document::new(Kind::Doc, 2 * PERIOD as u64, 5);
    let from = PERIOD as u64 - 10;
    let (status, _, body) = request(
        o.addr,
        Method::GET,
        "/corpus/doc/2MiB?seed=5",
        &[("range", &format!("bytes={from}-{}", from + 29))],
    )
    .await;
    assert_eq!(status, 206);
    assert_eq!(body, doc_bytes(big, from, 30));

    let (status, headers, body) = request(
        o.addr,
        Method::GET,
        "/corpus/html/5000",
        &[("range", "bytes=5000-")],
    )
    .await;
    assert_eq!(
        (status, h(&headers, "content-range")),
        (416, "bytes */5000")
    );
    assert!(body.is_empty());

    // If-Range with a stale validator: the whole document.
    let (status, _, body) = request(
        o.addr,
        Method::GET,
        "/corpus/html/5000",
        &[("range", "bytes=10-19"), ("if-range", "\"old\"")],
    )
    .await;
    assert_eq!((status, body.len()), (200, 5000));
    o.stop().await;
}

#[tokio::test]
async fn conditional_get() {
    let o = Origin::start(OriginConfig::default()).await;
    let (_, headers, _) = request(o.addr, Method::GET, "/corpus/doc/10KiB?seed=3", &[]).await;
    let etag = h(&headers, "etag").to_owned();
    assert!(!etag.is_empty());
    let (status, headers, body) = request(
        o.addr,
        Method::GET,
        "/corpus/doc/10KiB?seed=3",
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!(status, 304);
    assert_eq!(h(&headers, "etag"), etag);
    assert!(body.is_empty());
    // Another seed is another representation.
    let (status, _, body) = request(
        o.addr,
        Method::GET,
        "/corpus/doc/10KiB?seed=4",
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!((status, body.len()), (200, 10 * 1024));
    o.stop().await;
}

#[tokio::test]
async fn other_routes() {
    let o = Origin::start(OriginConfig::default()).await;
    let (status, _, body) = request(o.addr, Method::GET, "/healthz", &[]).await;
    assert_eq!((status, body.as_slice()), (200, b"ok\n".as_slice()));
    let (status, _, _) = request(o.addr, Method::GET, "/status/503", &[]).await;
    assert_eq!(status, 503);
    let (status, headers, body) = request(o.addr, Method::GET, "/status/204", &[]).await;
    assert_eq!(status, 204);
    assert!(body.is_empty() && headers.get("content-length").is_none());
    let (status, _, body) = request(o.addr, Method::GET, "/nothing/here", &[]).await;
    assert_eq!(status, 404);
    assert!(!body.is_empty() && body.len() < 100);
    let (status, _, _) = request(o.addr, Method::GET, "/files/nope", &[]).await;
    assert_eq!(status, 404);
    let (status, _, body) = request(o.addr, Method::GET, "/corpus/pdf/12XB", &[]).await;
    assert_eq!(status, 400);
    assert!(String::from_utf8(body).unwrap().contains("bad size"));
    let (status, _, _) = request(o.addr, Method::GET, "/corpus/exe/1", &[]).await;
    assert_eq!(status, 400);
    let (status, headers, _) = request(o.addr, Method::POST, "/healthz", &[]).await;
    assert_eq!((status, h(&headers, "allow")), (405, "GET, HEAD"));
    let (status, headers, body) = request(o.addr, Method::GET, "/", &[]).await;
    assert_eq!(status, 200);
    assert!(h(&headers, "content-type").starts_with("text/html"));
    let page = String::from_utf8(body).unwrap();
    assert!(page.contains("/corpus/") && page.contains("/files/pdf_large"));
    o.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_documents_stream_with_their_own_etag_and_ranges() {
    let o = Origin::start(OriginConfig::default()).await;
    let plain = corpus::file("doc_medium").unwrap();
    let doc = plain.with_edit(Some(corpus::Edit::new(10_000, 3)));
    // The raw `%` and its percent-encoded form name the same edit.
    for path in [
        "/files/doc_medium?edit=1%&edit_seed=3",
        "/files/doc_medium?edit=1%25&edit_seed=3",
    ] {
        let f = fetch(o.addr, path).await.unwrap();
        assert_eq!((f.status, f.bytes), (200, plain.size()), "{path}");
        assert_eq!(f.sha256, doc.sha256(), "{path}");
        assert_ne!(f.sha256, plain.sha256());
    }
    let (_, edited, _) = request(
        o.addr,
        Method::HEAD,
        "/files/doc_medium?edit=1&edit_seed=3",
        &[],
    )
    .await;
    let (_, original, _) = request(o.addr, Method::HEAD, "/files/doc_medium", &[]).await;
    assert_eq!(h(&edited, "etag"), doc.etag());
    assert_ne!(h(&edited, "etag"), h(&original, "etag"));
    // A range across a period boundary carries the edit too.
    let from = PERIOD as u64 - 5000;
    let (status, _, body) = request(
        o.addr,
        Method::GET,
        "/files/doc_medium?edit=1&edit_seed=3",
        &[("range", &format!("bytes={from}-{}", from + 9999))],
    )
    .await;
    assert_eq!(status, 206);
    assert_eq!(body, doc_bytes(doc, from, 10_000));
    assert_ne!(body, doc_bytes(plain, from, 10_000));
    for bad in ["edit=200%25", "edit=abc", "edit=1&edit_seed=-2"] {
        let (status, _, body) = request(
            o.addr,
            Method::GET,
            &format!("/files/doc_medium?{bad}"),
            &[],
        )
        .await;
        assert_eq!(status, 400, "{bad}");
        assert!(
            String::from_utf8(body).unwrap().contains("bad edit"),
            "{bad}"
        );
    }
    o.stop().await;
}

#[tokio::test]
async fn latency_is_honoured() {
    let o = Origin::start(OriginConfig::default()).await;
    let f = fetch(o.addr, "/corpus/html/128B?latency=120ms")
        .await
        .unwrap();
    assert_eq!(f.status, 200);
    assert!(
        f.header_time >= Duration::from_millis(120),
        "{:?}",
        f.header_time
    );
    o.stop().await;

    let o = Origin::start(OriginConfig {
        latency: Duration::from_millis(80),
        ..OriginConfig::default()
    })
    .await;
    let f = fetch(o.addr, "/healthz").await.unwrap();
    assert!(
        f.header_time >= Duration::from_millis(80),
        "{:?}",
        f.header_time
    );
    o.stop().await;
}

#[tokio::test]
async fn keep_alive_serves_many_requests_on_one_connection() {
    let o = Origin::start(OriginConfig::default()).await;
    let stream = TcpStream::connect(o.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    for i in 0..6u64 {
        let req = Request::get(format!("/corpus/random/{}?seed={i}", 1000 + i))
            .header(header::HOST, "origin")
            .body(Empty::<Bytes>::new())
            .unwrap();
        // Fails if the server closed the connection after an earlier response.
        sender.ready().await.unwrap();
        let resp = sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let doc = Document::new(Kind::Random, 1000 + i, i);
        assert_eq!(body.as_ref(), doc_bytes(doc, 0, 1000 + i as usize));
    }
    o.stop().await;
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let o = Origin::start(OriginConfig::default()).await;
    let mut s = TcpStream::connect(o.addr).await.unwrap();
    let reqs = "GET /corpus/html/128B HTTP/1.1\r\nHost: o\r\n\r\n\
                GET /healthz HTTP/1.1\r\nHost: o\r\n\r\n\
                GET /corpus/pdf/300?seed=2 HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n";
    s.write_all(reqs.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let responses = split_responses(&raw);
    assert_eq!(responses.len(), 3);
    assert!(responses.iter().all(|(st, _)| st == "HTTP/1.1 200 OK"));
    assert_eq!(
        responses[0].1,
        doc_bytes(Document::new(Kind::Html, 128, 1), 0, 128)
    );
    assert_eq!(responses[1].1, b"ok\n");
    assert_eq!(
        responses[2].1,
        doc_bytes(Document::new(Kind::Pdf, 300, 2), 0, 300)
    );
    o.stop().await;
}

#[tokio::test]
async fn malformed_request_gets_400_and_server_keeps_serving() {
    let o = Origin::start(OriginConfig::default()).await;
    for garbage in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /healthz HTTP/1.1\r\nHost o\r\n\r\n",
        b"GET /\x01 HTTP/1.1\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(o.addr).await.unwrap();
        s.write_all(garbage).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        let text = String::from_utf8_lossy(&raw);
        assert!(text.starts_with("HTTP/1.1 400"), "{garbage:?} → {text}");
    }
    let f = fetch(o.addr, "/healthz").await.unwrap();
    assert_eq!(f.status, 200);
    o.stop().await;
}

#[tokio::test]
async fn shutdown_lets_in_flight_responses_finish() {
    let listener = listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, OriginConfig::default(), async {
        let _ = rx.await;
    }));
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let size = 8 * PERIOD;
    let req = Request::get(format!("/corpus/pdf/{size}"))
        .header(header::HOST, "o")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    // The response has started: shut down now, then read the rest.
    tx.send(()).unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.len(), size);
    let doc = Document::new(Kind::Pdf, size as u64, 1);
    assert_eq!(sha(&body), doc.sha256());
    server.await.unwrap().unwrap();
    // The listener is gone.
    assert!(TcpStream::connect(addr).await.is_err());
}

fn sha(b: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(b).into()
}

#[tokio::test]
async fn address_in_use_is_one_clear_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = listen(addr).await.unwrap_err().to_string();
    assert_eq!(
        err,
        format!("cannot listen on {addr}: address already in use")
    );
}

#[test]
fn run_reports_address_in_use() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let args = OriginArgs {
        listen: addr,
        latency: Duration::ZERO,
        cache_control: None,
        name: None,
        dynamic_concurrency: 0,
        workers: Some(1),
    };
    let err = headway_origin::run(args).unwrap_err();
    assert_eq!(
        format!("{err:#}"),
        format!("cannot listen on {addr}: address already in use")
    );
}

#[test]
fn blocking_fetch() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let o = rt.block_on(Origin::start(OriginConfig::default()));
    let f = fetch_blocking(o.addr, "/files/pdf_small").unwrap();
    assert_eq!((f.status, f.bytes), (200, 1_240_000));
    assert_eq!(f.sha256, corpus::file("pdf_small").unwrap().sha256());
    let err = fetch_blocking(o.addr, "no-slash").unwrap_err();
    assert!(err.to_string().contains("invalid request path"));
    let addr = o.addr;
    rt.block_on(o.stop());
    let err = fetch_blocking(addr, "/healthz").unwrap_err().to_string();
    assert_eq!(err, format!("cannot connect to {addr}: connection refused"));
}
