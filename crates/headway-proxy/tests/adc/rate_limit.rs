//! Rules' rate limits end to end: per client (named by PROXY headers, so that clients can come
//! from anywhere on one loopback), per API key, for a rule as a whole across reloads, and the
//! bucket refilling.

use super::*;

/// A request from `client` (a PROXY header names it) for `path`, with `extra` header lines.
fn from(client: &str, path: &str, extra: &str) -> String {
    format!(
        "PROXY TCP4 {client} 10.0.0.1 40000 80\r\nGET {path} HTTP/1.1\r\nHost: x\r\n{extra}\
         Connection: close\r\n\r\n"
    )
}

/// The status of the answer to `request`, and the answer.
async fn status(addr: SocketAddr, request: &str) -> (u16, String) {
    let a = raw(addr, request.as_bytes()).await;
    let code = a
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {a}"));
    (code, a)
}

fn limited_rule(limit: &str) -> String {
    format!(
        "[[virtual_server.rule]]\nname = \"login\"\npath = \"/login\"\ngroup = \"g\"\n\
         rate_limit = {limit}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_limits_each_client_and_answers_429_with_retry_after() {
    let (o, text) = one_origin("accept_proxy_protocol = true").await;
    let text = format!("{text}{}", limited_rule("{ requests = 3, per = \"1h\" }"));
    // Two workers: the buckets are the virtual server's, not a worker's.
    let (p, addr) = proxy_with(&text, 2).await;
    for _ in 0..3 {
        assert_eq!(
            status(addr, &from("203.0.113.9", "/login", "")).await.0,
            404
        );
    }
    let (code, answer) = status(addr, &from("203.0.113.9", "/login", "")).await;
    assert_eq!(code, 429, "{answer}");
    // One token per 20 minutes.
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("retry-after: 1200\r\n"),
        "{answer}"
    );
    assert!(answer.contains("rate limit"), "{answer}");
    // Another client has its own bucket; the limited one still reaches what the rule does not
    // match.
    assert_eq!(
        status(addr, &from("198.51.100.7", "/login", "")).await.0,
        404
    );
    assert_eq!(status(addr, &from("203.0.113.9", "/echo", "")).await.0, 200);
    let s = p.snapshot();
    let v = &s.virtual_servers[0];
    assert_eq!(
        (v.rule_hits.as_slice(), v.rule_limited.as_slice()),
        (&[5][..], &[1][..])
    );
    // The origin saw only what was taken: 3 + 1 logins and the echo.
    assert_eq!(s.groups[0].servers[0].requests, 5);
    drop(o);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_limits_each_api_key_and_keyless_requests_together() {
    let (_o, text) = one_origin("accept_proxy_protocol = true").await;
    let text = format!(
        "{text}{}",
        limited_rule("{ requests = 2, per = \"1h\", by = \"header\", header = \"X-API-Key\" }")
    );
    let (p, addr) = proxy(&text).await;
    let key = |k: &str| format!("X-API-Key: {k}\r\n");
    let mut seen = Vec::new();
    for (who, extra) in [
        ("alpha", key("alpha")),
        ("beta", key("beta")),
        ("none", String::new()),
        ("alpha", key("alpha")),
        ("none", String::new()),
        ("alpha", key("alpha")),
        ("beta", key("beta")),
        ("none", String::new()),
        ("beta", key("beta")),
    ] {
        // The address does not matter: every request comes from the same one.
        let code = status(addr, &from("10.1.1.1", "/login", &extra)).await.0;
        seen.push((who, code));
    }
    assert_eq!(
        seen,
        [
            ("alpha", 404),
            ("beta", 404),
            ("none", 404),
            ("alpha", 404),
            ("none", 404),
            ("alpha", 429),
            ("beta", 404),
            ("none", 429),
            ("beta", 429),
        ]
    );
    assert_eq!(p.snapshot().virtual_servers[0].rule_limited, [3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_buckets_last_across_reloads_while_its_limit_stays_and_refill() {
    let (_o, text) = one_origin("").await;
    let config = |limit: &str, extra: &str| {
        let text = format!("{text}{}{extra}", limited_rule(limit));
        Config::parse(&text, "test.toml").unwrap().adc
    };
    let c = client();
    let same = "{ requests = 2, per = \"1h\", by = \"all\" }";
    let p = Proxy::start_with(config(same, ""), 7, 1).await.unwrap();
    let addr = p.bound_addrs()[0].1;
    assert_eq!(get(&c, addr, "/login").await.status, 404);
    assert_eq!(get(&c, addr, "/login").await.status, 404);
    assert_eq!(get(&c, addr, "/login").await.status, 429);
    // A reload that changes something else keeps the (empty) bucket and the counts.
    let other = "[[virtual_server.rule]]\nname = \"api\"\npath_prefix = \"/api\"\ngroup = \"g\"\n";
    p.replace(config(same, other)).await.unwrap();
    assert_eq!(get(&c, addr, "/login").await.status, 429);
    assert_eq!(p.snapshot().virtual_servers[0].rule_limited, [2, 0]);
    // A new limit starts full, and refills at its rate (one token per 2 s: long beside the
    // time between two requests on a busy machine, short for the wait below).
    p.replace(config("{ requests = 1, per = \"2s\", by = \"all\" }", ""))
        .await
        .unwrap();
    assert_eq!(get(&c, addr, "/login").await.status, 404);
    let refused = get(&c, addr, "/login").await;
    assert_eq!(refused.status, 429);
    let deadline = SystemClock::now() + Duration::from_secs(20);
    loop {
        let a = get(&c, addr, "/login").await;
        if a.status == 404 {
            break;
        }
        assert_eq!(a.status, 429);
        assert!(SystemClock::now() < deadline, "the bucket never refilled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    p.shutdown(Duration::from_secs(1)).await;
}
