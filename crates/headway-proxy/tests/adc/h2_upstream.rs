//! Groups with `protocol = "h2"`: requests to the servers as streams of one HTTP/2 connection
//! per server and worker, trailers both ways (gRPC's shape), bodies streamed, timeouts and a
//! server that goes away — against `headway origin`, which serves HTTP/2 with prior knowledge.

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
        h2_group(
            &o,
            "response_timeout = \"300ms\"\nretries = 0\nmax_fails = 0"
        ),
        vs("g", "")
    );
    let (p, addr) = proxy_with(&text, 1).await;
    let c = client();
    assert_eq!(get(&c, addr, "/healthz").await.status, 200);
    // A stream that times out is reset; the connection goes on serving the others.
    let slow = tokio::spawn({
        let c = c.clone();
        async move { get(&c, addr, "/dynamic?latency=2s").await }
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
    let monitor = |version: &str| {
        format!(
            "[[monitor]]\nname = \"m\"\nkind = \"http\"\npath = \"/echo\"\n\
             expect_body = '\"version\":\"{version}\"'\ninterval = \"200ms\"\ntimeout = \"150ms\"\n\
             fall = 1\nrise = 1\n"
        )
    };
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
