//! Shadow traffic (`mirror`): copies of bodiless requests reach the mirror group as its
//! servers would get them, never change or delay the client's answers, are bounded in flight,
//! and a mirror that fails costs the clients nothing.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodiless_requests_are_copied_to_the_mirror_group() {
    let (live, next) = (
        Origin::start("live", Duration::ZERO).await,
        Origin::start("next", Duration::ZERO).await,
    );
    let text = format!(
        "{}{}{}",
        group("live", "", &[(live.addr, "")]),
        group("next", "", &[(next.addr, "")]),
        vs(
            "live",
            "mirror = \"next\"\nrequest_headers = { set = { \"X-Env\" = \"prod\" } }"
        ),
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    for _ in 0..20 {
        assert_eq!(get(&c, addr, "/healthz").await.origin(), "live");
    }
    // With a body: not copied.
    let a = send(&c, "POST", addr, "/echo", &[], b"order=1")
        .await
        .unwrap();
    assert_eq!(a.origin(), "live");
    until(&p, "20 copies answered", |s| {
        s.virtual_servers[0]
            .mirror
            .as_ref()
            .is_some_and(|m| m.responses[1] == 20 && m.in_flight == 0)
    })
    .await;
    let s = p.snapshot();
    let m = s.virtual_servers[0].mirror.clone().unwrap();
    assert_eq!(
        (m.group.as_str(), m.sent, m.skipped, m.failed),
        ("next", 20, 0, 0)
    );
    assert_eq!(s.groups[1].servers[0].requests, 20);
    // The virtual server counts only what its clients got.
    assert_eq!(s.virtual_servers[0].requests, 21);
    // The copy is the request as a server gets it: header rules applied.
    let a = get(&c, addr, "/echo").await;
    let live_saw: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(live_saw["headers"]["x-env"][0], "prod");
    until(&p, "the echo's copy", |s| {
        s.groups[1].servers[0].requests == 21
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_that_never_answers_costs_the_clients_nothing_and_is_bounded() {
    let live = Origin::start("live", Duration::ZERO).await;
    // Reads the request, then holds the connection without a byte of answer.
    let (silent, _) = raw_server(|mut s, count| async move {
        count.fetch_add(1, Ordering::SeqCst);
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        // Never answers: the connection is held until the test's runtime ends.
        std::future::pending::<()>().await;
    })
    .await;
    let text = format!(
        "{}{}{}",
        group("live", "", &[(live.addr, "")]),
        group(
            "next",
            // Long enough that no copy gives up while the 70 requests are made.
            "response_timeout = \"5s\"\nmax_fails = 0",
            &[(silent, "")]
        ),
        vs("live", "mirror = \"next\""),
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    for _ in 0..70 {
        assert_eq!(get(&c, addr, "/healthz").await.status, 200);
    }
    let m = p.snapshot().virtual_servers[0].mirror.clone().unwrap();
    assert_eq!(m.sent + m.skipped, 70);
    assert!(
        m.skipped >= 70 - u64::from(headway_proxy::http::mirror::MAX_IN_FLIGHT),
        "{m:?}"
    );
    // Each copy gives up at the mirror group's response timeout, counted as failed.
    until(&p, "the copies to time out", |s| {
        s.virtual_servers[0]
            .mirror
            .as_ref()
            .is_some_and(|m| m.in_flight == 0 && m.failed == m.sent)
    })
    .await;
    assert_eq!(p.snapshot().groups[0].servers[0].requests, 70);
}
