//! Servers leaving and entering rotation. Passive health (`max_fails`, `fail_timeout`): servers
//! whose requests fail in a row are taken out without a monitor, tried again after the timeout,
//! and all tried anyway when every one is out. Slow start (`slow_start`): a server coming into
//! rotation takes a growing share of new requests.

use super::*;

fn server(s: &AdcSnapshot, i: usize) -> headway_proxy::stats::ServerSnapshot {
    s.groups[0].servers[i].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_is_taken_out_after_max_fails_and_tried_again_after_the_timeout() {
    let mut a = Origin::start("a", Duration::ZERO).await;
    let b = Origin::start("b", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            "max_fails = 3\nfail_timeout = \"3s\"\nretries = 1",
            &[(a.addr, ""), (b.addr, "")]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    a.kill();
    // Every request succeeds (a failed connect is retried on b); after three failed connects
    // a gets no more requests. The 50 requests until a comes back take milliseconds; the 3 s
    // timeout leaves a loaded machine ample room to send them before a is tried again.
    for _ in 0..40 {
        let r = get(&c, addr, "/healthz").await;
        assert_eq!((r.status, r.origin().as_str()), (200, "b"));
    }
    let s = p.snapshot();
    let sa = server(&s, 0);
    assert_eq!(sa.connect_failures, 3, "{sa:?}");
    assert_eq!((sa.ejections, sa.passive_out), (1, true));
    assert_eq!(sa.health, "up", "no monitor: the health stays as it was");
    // Still out within its timeout: no request meets it.
    for _ in 0..10 {
        assert_eq!(get(&c, addr, "/healthz").await.origin(), "b");
    }
    assert_eq!(server(&p.snapshot(), 0).connect_failures, 3);
    // a comes back; once the timeout has passed, it is tried and back in rotation.
    let _a = Origin::start_on(a.addr, "a", Duration::ZERO).await;
    let deadline = SystemClock::now() + Duration::from_secs(20);
    while get(&c, addr, "/healthz").await.origin() != "a" {
        assert!(
            SystemClock::now() < deadline,
            "a was not tried again after fail_timeout"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sa = server(&p.snapshot(), 0);
    assert!(!sa.passive_out && sa.ejections == 1, "{sa:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_is_avoided_instead_of_timing_out_every_request() {
    // `slow` answers after 60 s, far past the response timeout: each request sent there ends
    // in a 504 after the timeout (not retried: the request was sent). After `max_fails` of
    // them it gets no more. The 1 s timeout is one `fast` answers well within even on a
    // loaded machine; the test waits it out twice.
    let slow = Origin::start("slow", Duration::from_secs(60)).await;
    let fast = Origin::start("fast", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            "max_fails = 2\nfail_timeout = \"60s\"\nresponse_timeout = \"1s\"",
            &[(slow.addr, ""), (fast.addr, "")]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    let mut timeouts = 0;
    for _ in 0..30 {
        let r = get(&c, addr, "/healthz").await;
        match r.status {
            200 => assert_eq!(r.origin(), "fast"),
            504 => timeouts += 1,
            other => panic!("status {other}"),
        }
    }
    assert_eq!(
        timeouts, 2,
        "only max_fails requests met the stalled server"
    );
    let s = server(&p.snapshot(), 0);
    assert!(s.passive_out && s.ejections == 1, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_server_is_out_they_are_all_tried_anyway() {
    let mut only = Origin::start("only", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            "max_fails = 1\nfail_timeout = \"60s\"\nretries = 0\npool_max_idle = 0",
            &[(only.addr, "")]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    assert_eq!(get(&c, addr, "/healthz").await.status, 200);
    only.kill();
    for _ in 0..3 {
        let r = get(&c, addr, "/healthz").await;
        assert_eq!(r.status, 503);
        assert!(
            r.text().contains("no server could be reached"),
            "{}",
            r.text()
        );
    }
    // Out since the first failure, yet every request still tried it.
    let s = server(&p.snapshot(), 0);
    assert_eq!((s.connect_failures, s.ejections), (3, 1), "{s:?}");
    // It comes back: served again at once, without waiting for the timeout.
    let _only = Origin::start_on(only.addr, "only", Duration::ZERO).await;
    let r = get(&c, addr, "/healthz").await;
    assert_eq!((r.status, r.origin().as_str()), (200, "only"));
    assert!(!server(&p.snapshot(), 0).passive_out);
}

/// Sends `n` requests to `path` at once through `addr`; the `X-Origin` of each answer.
async fn at_once(c: &HttpClient, addr: SocketAddr, path: &str, n: usize) -> Vec<String> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let c = c.clone();
        let path = path.to_string();
        tasks.push(tokio::spawn(
            async move { get(&c, addr, &path).await.origin() },
        ));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_start_keeps_least_connection_from_flooding_a_returning_server() {
    // Both answer after 2 s, so requests pile up as active connections. `b` is enabled
    // through the API while 20 requests are in flight on `a`; 20 more arrive. Both batches
    // must be routed within those 2 s (milliseconds, normally). The two cases run at once.
    let (without, with) = tokio::join!(returning_server_share("0s"), returning_server_share("60s"));
    // Least connection without slow start: the empty server takes every new request until it
    // has as many as the other.
    assert!(without >= 19, "slow_start 0s: {without} of 20 to b");
    assert!(with <= 3, "slow_start 60s: {with} of 20 to b");
}

/// [`slow_start_keeps_least_connection_from_flooding_a_returning_server`]'s case: how many of
/// the second batch of 20 go to `b` with `slow_start`.
async fn returning_server_share(slow_start: &str) -> usize {
    let a = Origin::start("a", Duration::from_secs(2)).await;
    let b = Origin::start("b", Duration::from_secs(2)).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            &format!("method = \"least-connection\"\nslow_start = \"{slow_start}\""),
            &[
                (a.addr, "name = \"a\""),
                (b.addr, "name = \"b\"\nstate = \"disabled\"")
            ]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    let first = tokio::spawn({
        let c = c.clone();
        async move { at_once(&c, addr, "/healthz", 20).await }
    });
    until(&p, "20 in flight on a", |s| {
        s.groups[0].servers[0].active == 20
    })
    .await;
    p.set_server_state("g", "b", AdminState::Enabled).unwrap();
    let second = at_once(&c, addr, "/healthz", 20).await;
    assert!(first.await.unwrap().iter().all(|o| o == "a"));
    second.iter().filter(|o| *o == "b").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_checks_the_health_port_it_is_given() {
    // The server's traffic port and its health port are two origins on one address: the
    // monitor judges the server by the health port alone.
    let traffic = Origin::start("t", Duration::ZERO).await;
    let mut health_port = Origin::start("h", Duration::ZERO).await;
    let text = format!(
        "[[monitor]]\nname = \"m\"\nkind = \"http\"\npath = \"/healthz\"\ninterval = \"100ms\"\n\
         timeout = \"100ms\"\nrise = 1\nfall = 1\nport = {}\n{}{}",
        health_port.addr.port(),
        group("g", "monitor = \"m\"", &[(traffic.addr, "")]),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    until(&p, "checks pass", |s| s.groups[0].servers[0].checks_ok >= 1).await;
    let c = client();
    assert_eq!(get(&c, addr, "/healthz").await.origin(), "t");
    // The health port dies, the traffic port does not: the server is down all the same.
    health_port.kill();
    until(&p, "down", |s| health(s, "g", 0) == "down").await;
    assert_eq!(get(&c, addr, "/healthz").await.status, 503);
}
