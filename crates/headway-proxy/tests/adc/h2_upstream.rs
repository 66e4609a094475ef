//! Groups with `protocol = "h2"`: requests to the servers as streams of an HTTP/2 connection
//! per server and worker (more when a server's stream limit fills one), trailers both ways
//! (gRPC's shape), bodies streamed, timeouts and a server that goes away — against `headway
//! origin`, which serves HTTP/2 with prior knowledge; clients that leave, stream limits and
//! GOAWAYs against servers of the tests' own and a real NGINX.

use super::*;

use http_body_util::StreamBody;
use hyper::body::Frame;

/// An HTTP/2 (prior knowledge) client whose request bodies are any stream of frames.
pub(super) type H2Client = Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>,
>;

pub(super) fn h2_client() -> H2Client {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// A body of `data` followed by `trailers`.
pub(super) fn with_trailers(
    data: &'static [u8],
    trailers: &[(&'static str, &'static str)],
) -> http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible> {
    let mut t = http::HeaderMap::new();
    for (k, v) in trailers {
        t.insert(*k, http::HeaderValue::from_static(v));
    }
    let frames = vec![
        Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(data))),
        Ok(Frame::trailers(t)),
    ];
    BodyExt::boxed(StreamBody::new(futures_util::stream::iter(frames)))
}

fn h2_group(o: &Origin, extra: &str) -> String {
    group("g", &format!("protocol = \"h2\"\n{extra}"), &[(o.addr, "")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_group_sends_every_request_as_a_stream_of_one_connection() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", h2_group(&o, ""), vs("g", ""));
    let (p, addr) = proxy_with(&text, 1).await;
    let c = client();
    // An HTTP/1.1 client's request reaches the server over HTTP/2, its Host as the authority,
    // the forwarding fields added.
    let r = send(
        &c,
        "GET",
        addr,
        "/echo?x=1",
        &[("host", "app.example")],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["version"], "HTTP/2.0", "{v}");
    assert_eq!(v["target"], "http://app.example/echo?x=1", "{v}");
    assert_eq!(v["headers"]["x-forwarded-for"][0], "127.0.0.1", "{v}");
    assert!(v["headers"].get("connection").is_none(), "{v}");
    // 40 requests at once, answers of 64 KiB (more than HTTP/2's default window): all whole,
    // on the one connection.
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            get(&c, addr, "/corpus/random/64KiB").await
        }));
    }
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!((r.status, r.body.len()), (200, 65536));
        let mut want = vec![0; 65536];
        headway_origin::corpus::fill(headway_origin::corpus::Kind::Random, 1, 0, &mut want);
        assert!(r.body == want, "the body differs from the corpus");
    }
    // A request body streams to the server.
    let body: &'static [u8] = &[b'b'; 300_000];
    let r = send(&c, "POST", addr, "/echo", &[], body).await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["body_bytes"], 300_000, "{v}");
    let s = p.snapshot();
    assert_eq!(s.groups[0].protocol, "h2");
    let sv = &s.groups[0].servers[0];
    assert_eq!(sv.requests, 42, "{sv:?}");
    assert_eq!(sv.connections_opened, 1, "{sv:?}");
    assert_eq!(sv.reused, 41, "{sv:?}");
    assert_eq!(sv.bytes_out, 300_000, "{sv:?}");
    assert_eq!(sv.responses[1], 42, "{sv:?}");
    assert_eq!(s.virtual_servers[0].responses[1], 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_pass_both_ways_as_a_grpc_call_needs() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", h2_group(&o, ""), vs("g", ""));
    let (_p, addr) = proxy_with(&text, 2).await;
    let c = h2_client();
    for _ in 0..3 {
        let req = Request::builder()
            .method("POST")
            .uri(format!("http://{addr}/trailers"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(with_trailers(
                b"\0\0\0\0\x05hello",
                &[("x-client-note", "sent last")],
            ))
            .unwrap();
        let resp = c.request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/grpc");
        let got = resp.into_body().collect().await.unwrap();
        let trailers = got.trailers().cloned().expect("the server's trailers");
        assert_eq!(got.to_bytes(), Bytes::from_static(b"\0\0\0\0\x05hello"));
        assert_eq!(trailers["grpc-status"], "0");
        assert_eq!(trailers["grpc-message"], "OK");
        assert_eq!(trailers["x-body-bytes"], "10");
        // The client's own trailers reached the server.
        assert_eq!(trailers["x-echo-x-client-note"], "sent last");
    }
    // The server saw `te: trailers`, the one TE HTTP/2 allows.
    let req = Request::builder()
        .uri(format!("http://{addr}/echo"))
        .header("te", "trailers")
        .body(with_trailers(b"", &[]))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["headers"]["te"][0], "trailers", "{v}");
    assert_eq!(v["version"], "HTTP/2.0", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_answer_times_out_alone_and_a_server_that_goes_away_is_replaced() {
    let mut o = Origin::start("o", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        h2_group(&o, "response_timeout = \"1s\"\nretries = 0\nmax_fails = 0"),
        vs("g", "")
    );
    let (p, addr) = proxy_with(&text, 1).await;
    let c = client();
    assert_eq!(get(&c, addr, "/healthz").await.status, 200);
    // A stream that times out is reset; the connection goes on serving the others. The
    // timeout (1 s) is one the quick answers beat with room to spare on a loaded machine; the
    // slow answer would come long after it.
    let slow = tokio::spawn({
        let c = c.clone();
        async move { get(&c, addr, "/dynamic?latency=60s").await }
    });
    for _ in 0..5 {
        assert_eq!(get(&c, addr, "/healthz").await.status, 200);
    }
    assert_eq!(slow.await.unwrap().status, 504);
    assert_eq!(get(&c, addr, "/healthz").await.status, 200);
    assert_eq!(p.snapshot().groups[0].servers[0].connections_opened, 1);
    // The server goes away: its connection with it; the next request gets an error, not a
    // hang, and one after the server is back gets a new connection.
    let at = o.addr;
    o.kill();
    let r = get(&c, addr, "/healthz").await;
    assert!(matches!(r.status, 502 | 503), "{} {}", r.status, r.text());
    let _o = Origin::start_on(at, "o2", Duration::ZERO).await;
    let deadline = SystemClock::now() + Duration::from_secs(10);
    loop {
        let r = get(&c, addr, "/healthz").await;
        if r.status == 200 {
            assert_eq!(r.origin(), "o2");
            break;
        }
        assert!(SystemClock::now() < deadline, "{} {}", r.status, r.text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(p.snapshot().groups[0].servers[0].connections_opened, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_group_keeps_the_body_limit_and_serves_upgrades_plain() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        h2_group(&o, ""),
        vs("g", "max_body_bytes = \"1KiB\"")
    );
    let (p, addr) = proxy_with(&text, 1).await;
    // A chunked body found too large while it streams: 413, the server not blamed.
    let out = raw(addr, &super::body_limit::chunked_post_of_1800_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    let sv = &p.snapshot().groups[0].servers[0];
    assert_eq!((sv.failures, sv.ejections), (0, 0), "{sv:?}");
    // A WebSocket handshake is not passed to an HTTP/2 server: served as a plain request
    // (the origin's answer to a GET without the upgrade fields), the connection closing.
    let out = raw(
        addr,
        b"GET /ws/echo HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 426"), "{out}");
    assert!(
        out.to_ascii_lowercase().contains("connection: close"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_monitors_of_an_h2_group_check_over_http2() {
    let o = Origin::start("o", Duration::ZERO).await;
    // The origin's echo names the version it was asked in: the check passes only over HTTP/2.
    // A check that fails does so on the answer's body, at once; the timeout is one no check of
    // the healthy origin comes near.
    let monitor = |version: &str| {
        format!(
            "[[monitor]]\nname = \"m\"\nkind = \"http\"\npath = \"/echo\"\n\
             expect_body = '\"version\":\"{version}\"'\ninterval = \"1s\"\ntimeout = \"1s\"\n\
             fall = 1\nrise = 1\n"
        )
    };
    // The three cases at once, each with its own proxy: two checks take an interval.
    let mut cases = Vec::new();
    for (version, protocol, healthy) in [
        ("HTTP/2.0", "h2", true),
        ("HTTP/1.1", "h2", false),
        ("HTTP/1.1", "http1", true),
    ] {
        let text = format!(
            "{}{}{}",
            monitor(version),
            group(
                "g",
                &format!("protocol = \"{protocol}\"\nmonitor = \"m\""),
                &[(o.addr, "")]
            ),
            vs("g", "")
        );
        let (p, _) = proxy(&text).await;
        cases.push((version, protocol, healthy, p));
    }
    for (version, protocol, healthy, p) in cases {
        let s = after_two_checks(&p).await;
        let sv = &s.groups[0].servers[0];
        assert_eq!(
            (sv.checks_ok >= 2, sv.checks_failed >= 2),
            (healthy, !healthy),
            "{version} over {protocol}: {sv:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_the_protocol_changes_the_connections() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = |protocol: &str| {
        format!(
            "{}{}",
            group("g", &format!("protocol = \"{protocol}\""), &[(o.addr, "")]),
            vs("g", "")
        )
    };
    let (p, addr) = proxy_with(&text("h2"), 1).await;
    let c = client();
    let version = |r: Answer| {
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        v["version"].as_str().unwrap().to_string()
    };
    let idle = |p: &Proxy| p.snapshot().groups[0].servers[0].idle_connections;
    assert_eq!(version(get(&c, addr, "/echo").await), "HTTP/2.0");
    assert_eq!(idle(&p), 1);
    for (protocol, want) in [("http1", "HTTP/1.1"), ("h2", "HTTP/2.0")] {
        let cfg = Config::parse(&text(protocol), "test.toml").unwrap();
        p.replace(cfg.adc).await.unwrap();
        // The other version's connection is gone with the change.
        assert_eq!(idle(&p), 0, "after the change to {protocol}");
        assert_eq!(version(get(&c, addr, "/echo").await), want);
        assert_eq!(idle(&p), 1, "after a request over {protocol}");
    }
    assert_eq!(p.snapshot().groups[0].servers[0].connections_opened, 3);
}

/// What [`holding_server`] saw.
#[derive(Default)]
struct Seen {
    arrived: std::sync::atomic::AtomicU32,
    reset: std::sync::atomic::AtomicU32,
    answered: std::sync::atomic::AtomicU32,
    connections: std::sync::atomic::AtomicU32,
}

impl Seen {
    fn get(n: &std::sync::atomic::AtomicU32) -> u32 {
        n.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits (bounded) until `f` holds.
    async fn until(&self, what: &str, f: impl Fn(&Seen) -> bool) {
        let deadline = SystemClock::now() + Duration::from_secs(10);
        while !f(self) {
            assert!(
                SystemClock::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// An HTTP/2 server allowing `max_streams` streams per connection that holds every request
/// until the returned sender says `true`, then answers `ok`; it counts the streams its client
/// reset before that.
async fn holding_server(
    max_streams: u32,
) -> (SocketAddr, Arc<Seen>, tokio::sync::watch::Sender<bool>) {
    use std::sync::atomic::Ordering::SeqCst;
    let seen = Arc::new(Seen::default());
    let (release, released) = tokio::sync::watch::channel(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            s.connections.fetch_add(1, SeqCst);
            let (seen, released) = (s.clone(), released.clone());
            tokio::spawn(async move {
                let mut conn = h2::server::Builder::new()
                    .max_concurrent_streams(max_streams)
                    .handshake(tcp)
                    .await
                    .unwrap();
                while let Some(Ok((_req, mut respond))) = conn.accept().await {
                    seen.arrived.fetch_add(1, SeqCst);
                    let (seen, mut released) = (seen.clone(), released.clone());
                    tokio::spawn(async move {
                        let reset = tokio::select! {
                            biased;
                            _ = std::future::poll_fn(|cx| respond.poll_reset(cx)) => true,
                            _ = released.wait_for(|r| *r) => false,
                        };
                        let answered = !reset
                            && respond
                                .send_response(http::Response::new(()), false)
                                .and_then(|mut s| s.send_data(Bytes::from_static(b"ok"), true))
                                .is_ok();
                        let n = if answered {
                            &seen.answered
                        } else {
                            &seen.reset
                        };
                        n.fetch_add(1, SeqCst);
                    });
                }
            });
        }
    });
    (addr, seen, release)
}

/// A client that goes away with many requests in flight does not reset their streams on the
/// connection the worker shares with everyone: its answers are waited for and let go, and the
/// next client's request goes out on the same connection (servers guarding against rapid
/// reset close a connection that resets many streams, with everyone's requests on it). Only
/// 100 are waited for per client connection: a client resetting streams in a loop gets no
/// more requests worked on than one keeping them open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_with_requests_in_flight_resets_nothing_at_the_server() {
    let (server, seen, release) = holding_server(200).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            "protocol = \"h2\"\nresponse_timeout = \"20s\"",
            &[(server, "")]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy_with(&text, 1).await;
    // A client sends 130 requests over HTTP/2 and closes its connection once the server has
    // them all.
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut answers = Vec::new();
    for _ in 0..130 {
        send = send.ready().await.unwrap();
        let req = http::Request::get(format!("http://{addr}/slow"))
            .body(())
            .unwrap();
        answers.push(send.send_request(req, true).unwrap().0);
    }
    seen.until("the 130 requests at the server", |s| {
        Seen::get(&s.arrived) == 130
    })
    .await;
    conn.abort();
    let _ = conn.await;
    drop((send, answers));
    until(&p, "the gone client's requests to end", |s| {
        s.groups[0].servers[0].active == 0
    })
    .await;
    // Another client's request reaches the server behind whatever the proxy sent for the
    // gone one's streams, on the same connection.
    let c = client();
    let next = tokio::spawn(async move { get(&c, addr, "/next").await });
    seen.until("the next request at the server", |s| {
        Seen::get(&s.arrived) == 131
    })
    .await;
    release.send_replace(true);
    let r = next.await.unwrap();
    assert_eq!((r.status, &r.body[..]), (200, &b"ok"[..]));
    seen.until("every stream answered or reset", |s| {
        Seen::get(&s.answered) + Seen::get(&s.reset) == 131
    })
    .await;
    assert_eq!(
        (Seen::get(&seen.reset), Seen::get(&seen.answered)),
        (30, 101),
        "the gone client's streams reset at the server, and those answered"
    );
    assert_eq!(Seen::get(&seen.connections), 1);
}

/// A server that takes 4 streams at a time per connection gets 10 requests at once on three
/// connections instead of 4 and a queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_stream_limit_is_reached_gets_another_connection() {
    let (server, seen, release) = holding_server(4).await;
    let text = format!(
        "{}{}",
        group("g", "protocol = \"h2\"", &[(server, "")]),
        vs("g", "")
    );
    let (p, addr) = proxy_with(&text, 1).await;
    // A first request learns the server's settings (a new connection has none yet).
    let c = client();
    let first = {
        let c = c.clone();
        tokio::spawn(async move { get(&c, addr, "/first").await })
    };
    seen.until("the first request at the server", |s| {
        Seen::get(&s.arrived) == 1
    })
    .await;
    let mut tasks = vec![first];
    for _ in 0..9 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move { get(&c, addr, "/held").await }));
    }
    seen.until("all 10 requests at the server at once", |s| {
        Seen::get(&s.arrived) == 10
    })
    .await;
    assert_eq!(Seen::get(&seen.connections), 3);
    release.send_replace(true);
    for t in tasks {
        assert_eq!(t.await.unwrap().status, 200);
    }
    // The three stay open for the next requests.
    let s = p.snapshot();
    let server = &s.groups[0].servers[0];
    assert_eq!((server.connections_opened, server.idle_connections), (3, 3));
}

/// NGINX serving HTTP/2 with prior knowledge on a free loopback port, closing each connection
/// with a graceful GOAWAY after `keepalive_requests` requests (1,000 by default in NGINX);
/// killed when dropped (one process, no master: a killed master would leave its workers).
struct Nginx {
    child: std::process::Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start(keepalive_requests: u32) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let d = dir.path().display();
        let conf = format!(
            "master_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/body;\n\
             proxy_temp_path {d}/proxy;\n fastcgi_temp_path {d}/fastcgi;\n\
             uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
             server {{\n  listen {addr} http2;\n  keepalive_requests {keepalive_requests};\n\
             location / {{ return 200 \"ok\\n\"; }}\n }}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let child = std::process::Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nginx (scripts/setup.sh installs it)");
        let deadline = SystemClock::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                SystemClock::now() < deadline,
                "nginx did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server that closes its HTTP/2 connections with a graceful GOAWAY now and then (NGINX's
/// `keepalive_requests`) refuses the streams sent past it: bodiless requests and small bodies
/// (read whole first) are sent again on a new connection, and no client sees an error — with
/// `retries = 0` too: a stream the server did not take is not a try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_a_server_did_not_take_before_its_goaway_are_sent_again() {
    let nginx = Nginx::start(10);
    let text = format!(
        "{}{}",
        group("g", "protocol = \"h2\"\nretries = 0", &[(nginx.addr, "")]),
        vs("g", "")
    );
    let (p, addr) = proxy_with(&text, 1).await;
    let c = h2_client();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            for j in 0..25 {
                // Small bodies and ones of 300 KB, more than NGINX's window (64 KiB): part
                // of it is on its way when the stream turns out not taken.
                let (method, body) = if (i + j) % 2 == 0 {
                    ("POST", vec![b'x'; if j % 4 == 0 { 300_000 } else { 2000 }])
                } else {
                    ("GET", Vec::new())
                };
                let req = Request::builder()
                    .method(method)
                    .uri(format!("http://{addr}/"))
                    .body(BodyExt::boxed(Full::new(Bytes::from(body))))
                    .unwrap();
                let r = c.request(req).await.unwrap();
                let status = r.status().as_u16();
                let body = r.into_body().collect().await.unwrap().to_bytes();
                statuses.push((status, body));
            }
            statuses
        }));
    }
    let mut answers = HashMap::new();
    for t in tasks {
        for (status, body) in t.await.unwrap() {
            *answers
                .entry((status, String::from_utf8_lossy(&body).into_owned()))
                .or_insert(0) += 1;
        }
    }
    assert_eq!(
        answers,
        HashMap::from([((200, "ok\n".to_string()), 400)]),
        "{:?}",
        p.snapshot().groups[0].servers[0]
    );
    // NGINX closed a connection every 10 requests; the streams past its GOAWAYs were sent
    // again, counted apart from retries.
    let sv = &p.snapshot().groups[0].servers[0];
    assert!(sv.connections_opened >= 30, "{sv:?}");
    assert!(sv.resent > 0 && sv.retries == 0, "{sv:?}");
}

/// A server that answers before reading the request's body and then stops the upload with
/// `RST_STREAM(NO_ERROR)` (RFC 9113 §8.1: the answer stands; NGINX does it, and cloud storage
/// APIs) has its answer passed on whole, to HTTP/1 and HTTP/2 clients alike, while the
/// client is still sending a body the server never reads. The server resets each stream once
/// the client has the answer's head, so the reset reaches the proxy while it relays the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_before_the_body_then_a_no_error_reset_reaches_the_client_whole() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    // One permit per answer head a client has: the server resets a stream for each.
    let heads = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut conn = h2::server::handshake(tcp).await.unwrap();
                while let Some(Ok((_req, mut respond))) = conn.accept().await {
                    let seen = seen.clone();
                    tokio::spawn(async move {
                        // No length: the answer ends with its stream.
                        let mut out = respond
                            .send_response(http::Response::new(()), false)
                            .unwrap();
                        out.send_data(Bytes::from_static(b"early "), false).unwrap();
                        out.send_data(Bytes::from_static(b"answer"), true).unwrap();
                        seen.acquire().await.unwrap().forget();
                        respond.send_reset(h2::Reason::NO_ERROR);
                    });
                }
            });
        }
    });
    let text = format!(
        "{}{}",
        group("g", "protocol = \"h2\"", &[(server, "")]),
        vs("g", "")
    );
    let (_p, addr) = proxy_with(&text, 1).await;
    // 4 MiB up: far more than the server's window, so the upload is under way at the reset.
    let up: &'static [u8] = Box::leak(vec![b'x'; 4 << 20].into_boxed_slice());
    let big = Bytes::from_static(up);
    for round in 0..20 {
        let req = Request::post(format!("http://{addr}/upload"))
            .body(Full::new(big.clone()))
            .unwrap();
        let r = client()
            .request(req)
            .await
            .expect("an HTTP/1 client's answer");
        heads.add_permits(1);
        assert_eq!(r.status(), 200);
        let body = r.into_body().collect().await;
        let body = body.unwrap_or_else(|e| panic!("round {round}: HTTP/1 client: {e:?}"));
        assert_eq!(&body.to_bytes()[..], b"early answer");
        let req = Request::post(format!("http://{addr}/upload"))
            .body(BodyExt::boxed(Full::new(big.clone())))
            .unwrap();
        let r = h2_client()
            .request(req)
            .await
            .expect("an HTTP/2 client's answer");
        heads.add_permits(1);
        assert_eq!(r.status(), 200);
        let body = r.into_body().collect().await;
        let body = body.unwrap_or_else(|e| panic!("round {round}: HTTP/2 client: {e:?}"));
        assert_eq!(&body.to_bytes()[..], b"early answer");
    }
}

/// A stream refused after the server had read part of its body (`REFUSED_STREAM`: not
/// processed, RFC 9113 §8.7) is sent again from its first byte: a 3 MB upload, far more than
/// what is on its way when the refusal comes, reaches the server whole, from HTTP/1 and HTTP/2
/// clients, with and without a length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_on_a_refused_stream_is_sent_again_from_its_first_byte() {
    // A server that refuses every other stream once it has read 32 KiB of it (each case's
    // first try), and answers the others with the length of their body and whether every
    // byte is where the test's pattern puts it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let streams = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let streams = streams.clone();
            tokio::spawn(async move {
                let mut conn = h2::server::handshake(tcp).await.unwrap();
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let refuse = streams.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 2 == 0;
                    tokio::spawn(async move {
                        let mut body = req.into_body();
                        let (mut n, mut in_place) = (0usize, true);
                        while let Some(Ok(d)) = body.data().await {
                            let _ = body.flow_control().release_capacity(d.len());
                            in_place &= d.iter().enumerate().all(|(i, &b)| b == pattern(n + i));
                            n += d.len();
                            if refuse && n >= 32 << 10 {
                                respond.send_reset(h2::Reason::REFUSED_STREAM);
                                return;
                            }
                        }
                        let mut out = respond
                            .send_response(http::Response::new(()), false)
                            .unwrap();
                        let answer = format!("{n} {in_place}");
                        out.send_data(Bytes::from(answer), true).unwrap();
                    });
                }
            });
        }
    });
    fn pattern(i: usize) -> u8 {
        (i % 251) as u8
    }
    let text = format!(
        "{}{}",
        group("g", "protocol = \"h2\"\nretries = 0", &[(server, "")]),
        vs("g", "")
    );
    let (p, addr) = proxy_with(&text, 1).await;
    let up: Vec<u8> = (0..3_000_000).map(pattern).collect();
    let up = Bytes::from(up);
    // In 64 KiB pieces without a length (chunked from an HTTP/1 client).
    let unsized_body = |b: &Bytes| {
        let frames: Vec<_> = b
            .chunks(64 << 10)
            .map(|c| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        BodyExt::boxed(StreamBody::new(futures_util::stream::iter(frames)))
    };
    let mut resent = 0;
    for (case, http2, sized) in [
        ("HTTP/1, a length", false, true),
        ("HTTP/1, chunked", false, false),
        ("HTTP/2, a length", true, true),
        ("HTTP/2, no length", true, false),
    ] {
        let body = if sized {
            BodyExt::boxed(Full::new(up.clone()))
        } else {
            unsized_body(&up)
        };
        let req = Request::post(format!("http://{addr}/upload"))
            .body(body)
            .unwrap();
        let r = if http2 {
            h2_client().request(req).await.unwrap()
        } else {
            Client::builder(TokioExecutor::new())
                .build_http()
                .request(req)
                .await
                .unwrap()
        };
        let status = r.status();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            (status.as_u16(), String::from_utf8_lossy(&body).into_owned()),
            (200, "3000000 true".to_string()),
            "{case}"
        );
        let sv = &p.snapshot().groups[0].servers[0];
        resent += 1;
        assert_eq!(sv.resent, resent, "{case}: {sv:?}");
    }
}
