//! Servers given by DNS name: the system's resolver for `localhost`, and a resolver whose
//! answers the test changes (no DNS server of our own can be put in front of the system's
//! resolver here) for names that move, fail and come back.

use std::sync::Arc;

use headway_proxy::resolve::TableResolver;

use super::*;

fn named_group(extra: &str, host: &str, port: u16) -> String {
    format!(
        "[[server_group]]\nname = \"g\"\n{extra}\n[[server_group.server]]\nname = \"app\"\n\
         address = \"{host}:{port}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_named_localhost_is_found_through_the_hosts_file() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        named_group("", "LocalHost", o.addr.port()),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    for _ in 0..3 {
        let a = get(&c, addr, "/echo").await;
        assert_eq!((a.status, a.origin()), (200, "o".to_string()));
    }
    let s = p.snapshot();
    let server = &s.groups[0].servers[0];
    // The IPv4 address first (the origin listens on 127.0.0.1 only).
    assert_eq!(server.address, o.addr.to_string());
    assert_eq!(
        server.host.as_deref(),
        Some(format!("localhost:{}", o.addr.port()).as_str())
    );
    assert_eq!(server.requests, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_moves_takes_new_requests_with_it_and_drops_nothing() {
    // The name moves between loopback addresses: b listens on 127.0.0.2 with a's port.
    let a = Origin::start("a", Duration::ZERO).await;
    let b = Origin::start_on(
        SocketAddr::new("127.0.0.2".parse().unwrap(), a.addr.port()),
        "b",
        Duration::ZERO,
    )
    .await;
    let table = Arc::new(TableResolver::default());
    table.set("app.internal", &[a.addr.ip()]);
    let text = format!(
        "{}{}",
        named_group("dns_refresh = \"100ms\"", "app.internal", a.addr.port()),
        vs("g", "")
    );
    let cfg = Config::parse(&text, "test.toml").unwrap().adc;
    let p = Proxy::start_with_resolver(cfg, 7, 1, table.clone())
        .await
        .unwrap();
    let addr = p.bound_addrs()[0].1;

    // A keep-alive connection to a, and a slow request to a in flight when the name moves.
    let mut kept = one_keep_alive_exchange(addr).await;
    let c = client();
    assert_eq!(get(&c, addr, "/echo").await.origin(), "a");
    let slow = tokio::spawn({
        let c = c.clone();
        async move { get(&c, addr, "/dynamic?latency=800ms").await }
    });
    until(&p, "the slow request in flight", |s| {
        s.groups[0].servers[0].active == 1
    })
    .await;
    let generation = p.snapshot().generation;
    table.set("app.internal", &[b.addr.ip()]);
    until(&p, "the new address in use", |s| {
        s.groups[0].servers[0].address == b.addr.to_string()
    })
    .await;
    assert_eq!(p.snapshot().generation, generation + 1);
    assert!(
        !slow.is_finished(),
        "the slow request was in flight when the name moved"
    );
    for _ in 0..5 {
        assert_eq!(origin_of(addr).await, "b");
    }
    let slow = slow.await.unwrap();
    assert_eq!((slow.status, slow.origin()), (200, "a".to_string()));
    // The connection opened before the move still works, now towards b.
    ask(&mut kept).await;

    // The name fails: b stays, and the failures are counted.
    table.remove("app.internal");
    until(&p, "failed lookups counted", |s| {
        s.groups[0].servers[0].dns_failures >= 2
    })
    .await;
    assert_eq!(origin_of(addr).await, "b");
    assert_eq!(
        p.snapshot().groups[0].servers[0].address,
        b.addr.to_string()
    );

    // A reload while the name fails keeps the address; a reload naming a server that does
    // not resolve is refused and the running config stays.
    let same = Config::parse(&text.replace("100ms", "1h"), "test.toml")
        .unwrap()
        .adc;
    p.replace(same).await.expect("the last address stays");
    assert_eq!(origin_of(addr).await, "b");
    let unknown = text.replace("app.internal", "nowhere.internal");
    let e = p
        .replace(Config::parse(&unknown, "test.toml").unwrap().adc)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "server group g, server app: cannot resolve `nowhere.internal`: name not known"
    );
    assert_eq!(origin_of(addr).await, "b");
    assert_eq!(p.snapshot().reloads_failed, 1);

    // A drain set through the admin API stays with the server when its name moves.
    p.replace(Config::parse(&text, "test.toml").unwrap().adc)
        .await
        .unwrap();
    p.set_server_state("g", "app", headway_lb::health::AdminState::Draining)
        .unwrap();
    table.set("app.internal", &[a.addr.ip()]);
    until(&p, "the name back at a", |s| {
        s.groups[0].servers[0].address == a.addr.to_string()
    })
    .await;
    assert_eq!(p.snapshot().groups[0].servers[0].admin_state, "draining");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_does_not_resolve_stops_the_start_with_its_reason() {
    let text = format!("{}{}", named_group("", "nowhere.internal", 80), vs("g", ""));
    let cfg = Config::parse(&text, "test.toml").unwrap().adc;
    let e = Proxy::start_with_resolver(cfg, 7, 1, Arc::new(TableResolver::default()))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "server group g, server app: cannot resolve `nowhere.internal`: name not known"
    );
}

/// Which origin answers a GET of `/echo` on a new connection.
async fn origin_of(addr: SocketAddr) -> String {
    get(&client(), addr, "/echo").await.origin()
}
