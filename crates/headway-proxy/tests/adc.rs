//! End-to-end tests of the ADC against real `headway origin` servers on loopback: real sockets,
//! real HTTP clients, the proxy as `headway run` starts it (from a TOML config).
//!
//! Every wait is on a condition with a deadline; nothing here measures speed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use headway_config::Config;
use headway_core::SystemClock;
use headway_lb::health::AdminState;
use headway_origin::OriginConfig;
use headway_proxy::{AdcSnapshot, Proxy};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The integrated cache: hits, validation, coalescing, flash cache, budgets and purges.
#[path = "adc/cache.rs"]
mod cache;

/// HTTP compression and its CPU bypass.
#[path = "adc/compression.rs"]
mod compression;

/// TCP profiles on the proxy's live sockets, and flood defense.
#[path = "adc/tcp_profile.rs"]
mod tcp_profile;

/// Segments on the wire per exchange: acknowledgements and FINs riding on answers.
#[path = "adc/segments.rs"]
mod segments;

/// Protocol upgrades (WebSocket) and the tunnels they become.
#[path = "adc/upgrade.rs"]
mod upgrade;

/// Redirects and fixed responses the proxy answers itself.
#[path = "adc/local_answers.rs"]
mod local_answers;

/// PROXY protocol headers from a balancer in front and to servers.
#[path = "adc/proxy_protocol.rs"]
mod proxy_protocol;

/// Servers leaving and entering rotation: passive health and slow start.
#[path = "adc/rotation.rs"]
mod rotation;

/// Servers given by DNS name.
#[path = "adc/dns.rs"]
mod dns;

/// Request IDs to servers, clients and the access log.
#[path = "adc/request_id.rs"]
mod request_id;

/// Virtual servers' `allow` and `deny` lists.
#[path = "adc/allow_deny.rs"]
mod allow_deny;

/// Shadow traffic to a mirror group.
#[path = "adc/mirror.rs"]
mod mirror;

/// Basic authentication on rules (401).
#[path = "adc/auth.rs"]
mod auth;

/// Rules' rate limits (429).
#[path = "adc/rate_limit.rs"]
mod rate_limit;

/// The request body limit (413).
#[path = "adc/body_limit.rs"]
mod body_limit;

/// Groups that speak HTTP/2 to their servers (gRPC's trailers).
#[path = "adc/h2_upstream.rs"]
mod h2_upstream;

/// HTTP/1 servers that answer before reading the whole request body.
#[path = "adc/early_answers.rs"]
mod early_answers;

/// gRPC between real gRPC peers (grpcio).
#[path = "adc/grpc.rs"]
mod grpc;

/// Reading one HTTP/1 answer off a client connection.
#[path = "common/answer.rs"]
mod answer;
use answer::one_answer;

/// A `headway origin` on a loopback port, named so responses say who answered. It runs on a
/// runtime of its own, so [`Origin::kill`] ends it at once: listener and connections closed
/// before `kill` returns.
struct Origin {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Origin {
    async fn start(name: &str, latency: Duration) -> Origin {
        Origin::start_on("127.0.0.1:0".parse().unwrap(), name, latency).await
    }

    async fn start_on(addr: SocketAddr, name: &str, latency: Duration) -> Origin {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .spawn(async move { headway_origin::listen(addr).await.expect("origin listens") })
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let cfg = OriginConfig {
            listen: addr,
            latency,
            name: Some(name.to_string()),
            ..OriginConfig::default()
        };
        runtime.spawn(async move {
            let _ = headway_origin::serve(listener, cfg, std::future::pending()).await;
        });
        Origin {
            addr,
            runtime: Some(runtime),
        }
    }

    /// Kills the server at once: listener and connections gone when this returns.
    fn kill(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
        // shutdown_background drops the tasks (and their sockets) on this thread before
        // returning for tasks that are idle; wait until the port refuses connections.
        let deadline = SystemClock::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(self.addr).is_ok() {
            assert!(
                SystemClock::now() < deadline,
                "origin {} did not die",
                self.addr
            );
            std::thread::yield_now();
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A loopback address that refuses connections for as long as the returned socket lives: the
/// socket holds the port bound without listening, so no other test's listener can take it. (A
/// listener dropped to free a port gave it back to the kernel, whose next `bind` to port 0 —
/// another test's origin or proxy, running in parallel — could get it at once: a "dead"
/// server then answered.)
fn refusing_addr() -> (SocketAddr, tokio::net::TcpSocket) {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    (s.local_addr().unwrap(), s)
}

/// Starts the proxy from config text; returns it and its first virtual server's address.
async fn proxy(text: &str) -> (Proxy, SocketAddr) {
    proxy_with(text, 1).await
}

/// [`proxy`] with `workers` data-plane threads.
async fn proxy_with(text: &str, workers: usize) -> (Proxy, SocketAddr) {
    let cfg = Config::parse(text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
    let p = Proxy::start_with(cfg.adc, 7, workers)
        .await
        .expect("proxy starts");
    let addr = p.bound_addrs()[0].1;
    (p, addr)
}

fn group(name: &str, extra: &str, servers: &[(SocketAddr, &str)]) -> String {
    let mut s = format!("[[server_group]]\nname = \"{name}\"\n{extra}\n");
    for (addr, more) in servers {
        s.push_str(&format!(
            "[[server_group.server]]\naddress = \"{addr}\"\n{more}\n"
        ));
    }
    s
}

fn vs(group: &str, extra: &str) -> String {
    format!(
        "[[virtual_server]]\nname = \"front\"\nkind = \"http\"\nlisten = \"127.0.0.1:0\"\ngroup = \"{group}\"\n{extra}\n"
    )
}

/// One origin `o`, and the config of an `http` virtual server (`vs`'s `extra` lines) in front
/// of it.
async fn one_origin(extra: &str) -> (Origin, String) {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", extra));
    (o, text)
}

/// A proxy running [`one_origin`]'s config.
async fn before_one_origin(extra: &str) -> (Origin, Proxy, SocketAddr) {
    let (o, text) = one_origin(extra).await;
    let (p, addr) = proxy(&text).await;
    (o, p, addr)
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Answer {
    fn origin(&self) -> String {
        self.headers
            .get("x-origin")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn send(
    c: &HttpClient,
    method: &str,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &'static [u8],
) -> Result<Answer, String> {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = c
        .request(b.body(Full::new(Bytes::from_static(body))).unwrap())
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Answer {
        status,
        headers,
        body,
    })
}

async fn get(c: &HttpClient, addr: SocketAddr, path: &str) -> Answer {
    send(c, "GET", addr, path, &[], b"").await.expect("request")
}

/// Waits (bounded) until `f` holds on the proxy's snapshot; returns that snapshot.
async fn until(p: &Proxy, what: &str, f: impl Fn(&AdcSnapshot) -> bool) -> AdcSnapshot {
    let deadline = SystemClock::now() + Duration::from_secs(20);
    loop {
        let s = p.snapshot();
        if f(&s) {
            return s;
        }
        assert!(
            SystemClock::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first `n` lines of a JSON access log, once it has them (bounded wait: the log's
/// writer thread flushes within milliseconds).
async fn json_log_lines(path: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = SystemClock::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            return text
                .lines()
                .take(n)
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        }
        assert!(
            SystemClock::now() < deadline,
            "{n} access log line(s) not written: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The snapshot once the first group's first server has been checked twice.
async fn after_two_checks(p: &Proxy) -> AdcSnapshot {
    until(p, "two checks", |s| {
        let sv = &s.groups[0].servers[0];
        sv.checks_ok + sv.checks_failed >= 2
    })
    .await;
    p.snapshot()
}

fn health(s: &AdcSnapshot, group: &str, server: usize) -> String {
    let g = s.groups.iter().find(|g| g.name == group).unwrap();
    g.servers[server].health.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_round_robin_gives_three_to_one() {
    let a = Origin::start("a", Duration::ZERO).await;
    let b = Origin::start("b", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group("g", "", &[(a.addr, "weight = 3"), (b.addr, "weight = 1")]),
        vs("g", "")
    );
    let (_p, addr) = proxy(&text).await;
    let c = client();
    let mut counts: HashMap<String, u32> = HashMap::new();
    for _ in 0..4000 {
        *counts
            .entry(get(&c, addr, "/healthz").await.origin())
            .or_default() += 1;
    }
    let share = f64::from(counts["a"]) / 4000.0;
    assert!(
        (share - 0.75).abs() <= 0.05 * 0.75,
        "a got {share:.3}: {counts:?}"
    );
    assert_eq!(counts["a"] + counts["b"], 4000);
}

/// A weight set through the API steers new requests at once, lasts across a reload that
/// leaves the file's weight as it was, and gives way when the file changes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_set_live_steers_requests_until_the_file_changes_it() {
    let a = Origin::start("a", Duration::ZERO).await;
    let b = Origin::start("b", Duration::ZERO).await;
    let text = |wb: u32| {
        format!(
            "{}{}",
            group(
                "g",
                "",
                &[
                    (a.addr, "name = \"a\""),
                    (b.addr, &format!("name = \"b\"\nweight = {wb}"))
                ]
            ),
            vs("g", "")
        )
    };
    let (p, addr) = proxy(&text(1)).await;
    let c = client();
    let count = |n: usize| {
        let c = c.clone();
        async move {
            let mut counts: HashMap<String, u32> = HashMap::new();
            for _ in 0..n {
                *counts
                    .entry(get(&c, addr, "/healthz").await.origin())
                    .or_default() += 1;
            }
            counts
        }
    };
    let weights = |p: &Proxy| -> Vec<u32> {
        p.snapshot().groups[0]
            .servers
            .iter()
            .map(|s| s.weight)
            .collect()
    };
    assert_eq!(count(100).await["a"], 50);
    // Smooth weighted round robin: every run of 4 picks gives b exactly 3.
    p.set_server_weight("g", "b", 3).unwrap();
    let counts = count(400).await;
    assert!((299..=301).contains(&counts["b"]), "{counts:?}");
    assert_eq!(weights(&p), [1, 3]);
    // Out of range, or no such server: refused, nothing changed.
    assert!(p
        .set_server_weight("g", "b", 1001)
        .unwrap_err()
        .to_string()
        .contains("out of range"));
    assert!(p.set_server_weight("g", "c", 2).is_err());
    // A reload that keeps the file's weights keeps the live one…
    let cfg = |t: String| Config::parse(&t, "test.toml").unwrap().adc;
    p.replace(cfg(text(1))).await.unwrap();
    assert_eq!(weights(&p), [1, 3]);
    // …and weight 0 takes b out of new requests (its sessions would stay, unlike a drain).
    p.set_server_weight("g", "b", 0).unwrap();
    assert!(!count(20).await.contains_key("b"));
    // The file's new weight wins.
    p.replace(cfg(text(2))).await.unwrap();
    assert_eq!(weights(&p), [1, 2]);
    let counts = count(300).await;
    assert!((199..=201).contains(&counts["b"]), "{counts:?}");
}

/// `header-hash` and `cookie-hash`: each tenant (or session) stays on one server, tenants
/// spread over the servers, and requests without the key go round robin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_and_cookie_hashing_keep_each_key_on_one_server() {
    let mut origins = Vec::new();
    for name in ["a", "b", "c", "d"] {
        origins.push(Origin::start(name, Duration::ZERO).await);
    }
    let servers: Vec<_> = origins.iter().map(|o| (o.addr, "")).collect();
    for (method, field, header, value) in [
        (
            "header-hash",
            "hash_header = \"X-Tenant\"",
            "x-tenant",
            "t{}",
        ),
        (
            "cookie-hash",
            "hash_cookie = \"SID\"",
            "cookie",
            "theme=dark; SID=s{}; lang=en",
        ),
    ] {
        let text = format!(
            "{}{}",
            group("g", &format!("method = \"{method}\"\n{field}"), &servers),
            vs("g", "")
        );
        let (p, addr) = proxy_with(&text, 2).await;
        let c = client();
        let mut home: HashMap<String, String> = HashMap::new();
        for round in 0..4 {
            for k in 0..40 {
                let v = value.replace("{}", &k.to_string());
                let a = send(&c, "GET", addr, "/healthz", &[(header, &v)], b"")
                    .await
                    .unwrap();
                let at = a.origin();
                if round == 0 {
                    home.insert(v, at);
                } else {
                    assert_eq!(home[&v], at, "{method}: key {v} moved");
                }
            }
        }
        let used: std::collections::HashSet<_> = home.values().collect();
        assert_eq!(used.len(), 4, "{method}: 40 keys on {used:?}");
        // No key: round robin, four servers in turn.
        let mut keyless: HashMap<String, u32> = HashMap::new();
        for _ in 0..40 {
            *keyless
                .entry(get(&c, addr, "/healthz").await.origin())
                .or_default() += 1;
        }
        assert!(keyless.values().all(|n| *n == 10), "{method}: {keyless:?}");
        p.shutdown(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_connection_sends_new_requests_away_from_a_slow_server() {
    let fast = Origin::start("fast", Duration::ZERO).await;
    let slow = Origin::start("slow", Duration::from_millis(400)).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            "method = \"least-connection\"",
            &[(fast.addr, ""), (slow.addr, "")]
        ),
        vs("g", "")
    );
    let (_p, addr) = proxy(&text).await;
    let c = client();
    // 8 clients sending requests back to back until 320 have been sent between them: the
    // slow server holds its requests long, so least connection keeps choosing the fast one.
    // (Each client sending a fixed number instead let the last one left alone split its
    // remaining requests evenly between two idle servers — a coin toss per request that a
    // busy CI machine, leaving more for the last client, once lost at exactly 10 %.)
    let counts = Arc::new(parking_lot::Mutex::new(HashMap::<String, u32>::new()));
    let sent = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, counts, sent) = (c.clone(), counts.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            while sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 320 {
                let a = get(&c, addr, "/healthz").await;
                assert_eq!(a.status, 200);
                *counts.lock().entry(a.origin()).or_default() += 1;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let counts = counts.lock().clone();
    let fast_share = f64::from(counts["fast"]) / 320.0;
    // Round robin would give 0.5; least connection gives the slow server only what arrives
    // while it has no more requests than the fast one.
    assert!(fast_share > 0.9, "fast got {fast_share:.3}: {counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_persistence_holds_and_fails_over_when_its_server_dies() {
    let mut a = Origin::start("a", Duration::ZERO).await;
    let mut b = Origin::start("b", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            "method = \"least-connection\"\n[server_group.persistence]\nkind = \"cookie\"\ncookie = \"SRV\"",
            &[(a.addr, "name = \"a\""), (b.addr, "name = \"b\"")]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    let first = get(&c, addr, "/healthz").await;
    let set = first.headers["set-cookie"].to_str().unwrap().to_string();
    assert!(set.starts_with("SRV=") && set.contains("HttpOnly"), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    let home = first.origin();
    for _ in 0..1000 {
        let r = send(&c, "GET", addr, "/healthz", &[("cookie", &cookie)], b"")
            .await
            .unwrap();
        assert_eq!(r.origin(), home, "persistence broke");
        assert!(!r.headers.contains_key("set-cookie"), "cookie set again");
    }
    // The persisted server dies: the next request goes to the other one (connect failure,
    // retried elsewhere) and gets that server's cookie.
    if home == "a" {
        a.kill()
    } else {
        b.kill()
    }
    let r = send(&c, "GET", addr, "/healthz", &[("cookie", &cookie)], b"")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_ne!(r.origin(), home);
    let new_cookie = r.headers["set-cookie"].to_str().unwrap();
    assert_ne!(new_cookie.split(';').next().unwrap(), cookie);
    let g = &p.snapshot().groups[0];
    assert_eq!(g.persistence_failovers, 1, "{g:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_is_marked_down_within_interval_times_fall_and_up_after_rise() {
    let mut a = Origin::start("a", Duration::ZERO).await;
    let b = Origin::start("b", Duration::ZERO).await;
    // A check of a healthy server on loopback takes about a millisecond: the 1 s timeout
    // never ends one, so every failure counted below is a. A refused connect fails at once.
    let interval = Duration::from_secs(1);
    let (fall, rise): (u32, u32) = (3, 2);
    let text = format!(
        "[[monitor]]\nname = \"m\"\nkind = \"http\"\npath = \"/healthz\"\nexpect_body = \"ok\"\ninterval = \"1s\"\ntimeout = \"1s\"\nfall = {fall}\nrise = {rise}\n{}{}",
        group("g", "monitor = \"m\"", &[(a.addr, ""), (b.addr, "")]),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    until(&p, "first checks", |s| {
        s.groups[0].servers[0].checks_ok >= 1
    })
    .await;
    let killed_at = SystemClock::now();
    let failed_before = p.snapshot().groups[0].servers[0].checks_failed;
    a.kill();
    // The first snapshot that shows a down: the next check is an interval away, so it holds
    // the failures that took a down and no more.
    let s = until(&p, "a down", |s| health(s, "g", 0) == "down").await;
    let took = SystemClock::now() - killed_at;
    // Down on exactly the `fall`-th failed check. The first comes at most an interval after
    // the kill, the others an interval apart: within interval × fall, plus an interval of
    // slack for timers that fire late on a loaded machine. (A monitor that waited out its
    // timeout on each refused connect would take twice as long.)
    assert_eq!(
        s.groups[0].servers[0].checks_failed - failed_before,
        u64::from(fall)
    );
    assert!(took <= interval * (fall + 1), "marked down after {took:?}");
    // Requests all go to b now, none fails.
    let c = client();
    for _ in 0..20 {
        let r = get(&c, addr, "/healthz").await;
        assert_eq!((r.status, r.origin().as_str()), (200, "b"));
    }
    // a comes back on the same port: up after `rise` good checks. While a is dead no check
    // of it passes, so the count before its return is the count before its first good check.
    let ok_before = p.snapshot().groups[0].servers[0].checks_ok;
    let _a = Origin::start_on(a.addr, "a", Duration::ZERO).await;
    let s = until(&p, "a up", |s| health(s, "g", 0) == "up").await;
    assert_eq!(
        s.groups[0].servers[0].checks_ok - ok_before,
        u64::from(rise)
    );
    let mut seen_a = false;
    for _ in 0..10 {
        seen_a |= get(&c, addr, "/healthz").await.origin() == "a";
    }
    assert!(seen_a);
}

/// A server that answers a line-based protocol: `PING` with `answer`, then closes.
async fn ping_server(answer: &'static str) -> SocketAddr {
    raw_server(move |mut s, count| async move {
        count.fetch_add(1, Ordering::SeqCst);
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while !got.ends_with(b"PING\r\n") {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s.write_all(answer.as_bytes()).await;
    })
    .await
    .0
}

/// TCP monitors with `send` and `expect` (a Redis-style `PING` / `+PONG`): a server that
/// answers otherwise, or says nothing, is down; one that answers as expected is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_monitors_send_and_expect() {
    let good = ping_server("+PONG\r\n").await;
    let wrong = ping_server("-ERR loading\r\n").await;
    let (silent, _) = raw_server(|mut s, _| async move {
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf).await;
        // Silent for as long as the test runs.
        std::future::pending::<()>().await;
    })
    .await;
    // The servers that answer are judged by what they say, within a timeout no healthy
    // check comes near; the silent one only by the timeout, so it has a short one of its own
    // (the same check in a group of its own).
    let monitor = |name: &str, interval: &str, timeout: &str| {
        format!(
            "[[monitor]]\nname = \"{name}\"\nkind = \"tcp\"\n\
             send = \"PING\\r\\n\"\nexpect = \"+PONG\"\n\
             interval = \"{interval}\"\ntimeout = \"{timeout}\"\nrise = 1\nfall = 1\n"
        )
    };
    let text = format!(
        "{}{}{}{}\
         [[virtual_server]]\nname = \"l4\"\nkind = \"tcp\"\nlisten = \"127.0.0.1:0\"\ngroup = \"g\"\n",
        monitor("redis", "1s", "1s"),
        monitor("redis-quick", "100ms", "80ms"),
        group("g", "monitor = \"redis\"", &[(good, ""), (wrong, "")]),
        group("quiet", "monitor = \"redis-quick\"", &[(silent, "")])
    );
    let (p, _) = proxy(&text).await;
    let s = until(&p, "every server checked twice", |s| {
        s.groups
            .iter()
            .flat_map(|g| &g.servers)
            .all(|v| v.checks_ok + v.checks_failed >= 2)
    })
    .await;
    let states: Vec<(&str, &str, u64, u64)> = s
        .groups
        .iter()
        .flat_map(|g| g.servers.iter().map(move |v| (g, v)))
        .map(|(g, v)| {
            (
                g.name.as_str(),
                v.health.as_str(),
                v.checks_ok.min(1),
                v.checks_failed.min(1),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("g", "up", 1, 0),
            ("g", "down", 0, 1),
            ("quiet", "down", 0, 1)
        ],
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_finishes_in_flight_requests_and_takes_no_new_clients() {
    let slow = Origin::start("slow", Duration::from_millis(600)).await;
    let other = Origin::start("other", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            "",
            &[
                (slow.addr, "name = \"slow\""),
                (other.addr, "name = \"other\"")
            ]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    // Start requests until one is in flight on the slow server.
    let mut in_flight = Vec::new();
    for _ in 0..2 {
        let c = c.clone();
        in_flight.push(tokio::spawn(async move { get(&c, addr, "/healthz").await }));
    }
    until(&p, "a request on the slow server", |s| {
        s.groups[0].servers[0].active == 1
    })
    .await;
    p.set_server_state("g", "slow", AdminState::Draining)
        .unwrap();
    for _ in 0..10 {
        assert_eq!(get(&c, addr, "/healthz").await.origin(), "other");
    }
    let mut slow_done = 0;
    for t in in_flight {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200);
        slow_done += u32::from(r.origin() == "slow");
    }
    assert_eq!(
        slow_done, 1,
        "the in-flight request on the draining server finished"
    );
    assert_eq!(p.snapshot().groups[0].servers[0].admin_state, "draining");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_down_gives_503_with_a_clear_body() {
    // Nothing listens on these ports.
    let dead: Vec<SocketAddr> = {
        let ls = [
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
            TcpListener::bind("127.0.0.1:0").await.unwrap(),
        ];
        ls.iter().map(|l| l.local_addr().unwrap()).collect()
    };
    let text = format!(
        "[[monitor]]\nname = \"m\"\nkind = \"tcp\"\ninterval = \"100ms\"\nfall = 1\n{}{}{}",
        group(
            "checked",
            "monitor = \"m\"",
            &[(dead[0], ""), (dead[1], "")]
        ),
        group("unchecked", "retries = 1", &[(dead[0], ""), (dead[1], "")]),
        vs(
            "checked",
            "[[virtual_server.rule]]\npath_prefix = \"/u\"\ngroup = \"unchecked\""
        )
    );
    let (p, addr) = proxy(&text).await;
    until(&p, "both down", |s| {
        health(s, "checked", 0) == "down" && health(s, "checked", 1) == "down"
    })
    .await;
    let c = client();
    let r = get(&c, addr, "/x").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), "no server of group checked is available\n");
    assert_eq!(r.headers["retry-after"], "1");
    // Without a monitor the servers count as up; connecting fails on each: 503 too.
    let r = get(&c, addr, "/u").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), "no server could be reached\n");
    let g = p
        .snapshot()
        .groups
        .into_iter()
        .find(|g| g.name == "unchecked")
        .unwrap();
    assert_eq!(g.servers.iter().map(|s| s.connect_failures).sum::<u64>(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn surge_queue_holds_requests_up_to_its_size_then_refuses() {
    // The first request holds the server's one connection for 3 s (`?latency=`), however long
    // the next three take to arrive; the two queued behind it are answered at once.
    let slow = Origin::start("slow", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            "surge_queue = 2\nqueue_timeout = \"10s\"",
            &[(slow.addr, "max_connections = 1")]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let c = c.clone();
        let path = if i == 0 {
            "/dynamic?latency=3s"
        } else {
            "/healthz"
        };
        tasks.push(tokio::spawn(
            async move { get(&c, addr, path).await.status },
        ));
        // One at a time into the proxy, so the order is: served, queued, queued, refused.
        let n = tasks.len() as u64;
        until(&p, "the request to arrive", |s| {
            let g = &s.groups[0];
            g.servers[0].active + g.waiting + g.queue_rejected >= n
        })
        .await;
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 503]);
    let g = &p.snapshot().groups[0];
    assert_eq!(
        (g.queued, g.queue_rejected, g.servers[0].requests),
        (2, 1, 3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_gets_503_after_the_queue_timeout() {
    let slow = Origin::start("slow", Duration::from_millis(1500)).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            "surge_queue = 10\nqueue_timeout = \"200ms\"",
            &[(slow.addr, "max_connections = 1")]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    let first = {
        let c = c.clone();
        tokio::spawn(async move { get(&c, addr, "/healthz").await.status })
    };
    until(&p, "the first request", |s| {
        s.groups[0].servers[0].active == 1
    })
    .await;
    let r = get(&c, addr, "/healthz").await;
    assert_eq!(r.status, 503);
    assert!(r.text().contains("busy"), "{}", r.text());
    assert_eq!(first.await.unwrap(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_servers_serve_only_when_every_primary_is_down() {
    let mut primary = Origin::start("primary", Duration::ZERO).await;
    let backup = Origin::start("backup", Duration::ZERO).await;
    let text = format!(
        "[[monitor]]\nname = \"m\"\nkind = \"tcp\"\ninterval = \"100ms\"\nfall = 1\nrise = 1\n{}{}",
        group(
            "g",
            "monitor = \"m\"",
            &[(primary.addr, ""), (backup.addr, "backup = true")]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    for _ in 0..20 {
        assert_eq!(get(&c, addr, "/healthz").await.origin(), "primary");
    }
    primary.kill();
    until(&p, "primary down", |s| health(s, "g", 0) == "down").await;
    for _ in 0..20 {
        assert_eq!(get(&c, addr, "/healthz").await.origin(), "backup");
    }
    let _primary = Origin::start_on(primary.addr, "primary", Duration::ZERO).await;
    until(&p, "primary up", |s| health(s, "g", 0) == "up").await;
    for _ in 0..20 {
        assert_eq!(get(&c, addr, "/healthz").await.origin(), "primary");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_switching_sends_each_rule_to_its_group() {
    let names = [
        "default", "mysite", "images", "api", "beta", "posts", "cookie", "query",
    ];
    let mut origins = Vec::new();
    let mut text = String::new();
    for n in names {
        let o = Origin::start(n, Duration::ZERO).await;
        text.push_str(&group(n, "", &[(o.addr, "")]));
        origins.push(o);
    }
    text.push_str(&vs(
        "default",
        "[[virtual_server.rule]]\nname = \"mysite\"\npath_contains = \"/_layouts/MySite.aspx\"\ngroup = \"mysite\"\n\
         [[virtual_server.rule]]\npath_extension = [\"jpg\", \"gif\"]\ngroup = \"images\"\n\
         [[virtual_server.rule]]\nhost = \"*.api.example\"\ngroup = \"api\"\n\
         [[virtual_server.rule]]\nheader = { name = \"X-Beta\", value = \"1\" }\ngroup = \"beta\"\n\
         [[virtual_server.rule]]\nmethod = [\"POST\"]\npath_prefix = \"/echo\"\ngroup = \"posts\"\n\
         [[virtual_server.rule]]\ncookie = { name = \"canary\", value = \"yes\" }\ngroup = \"cookie\"\n\
         [[virtual_server.rule]]\nquery = { name = \"version\", regex = \"^2\" }\ngroup = \"query\"\n",
    ));
    let (_p, addr) = proxy(&text).await;
    let c = client();
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case<'_>; 11] = [
        ("GET", "/", &[], "default"),
        ("GET", "/sites/x/_layouts/MySite.aspx?a=1", &[], "mysite"),
        ("GET", "/img/logo.GIF", &[], "images"),
        ("GET", "/", &[("host", "eu.api.example")], "api"),
        ("GET", "/", &[("x-beta", "1")], "beta"),
        ("POST", "/echo", &[], "posts"),
        ("GET", "/echo", &[], "default"),
        (
            "GET",
            "/",
            &[("cookie", "theme=dark; canary=yes")],
            "cookie",
        ),
        ("GET", "/", &[("cookie", "canary=no")], "default"),
        ("GET", "/healthz?version=2.4", &[], "query"),
        ("GET", "/healthz?subversion=2", &[], "default"),
    ];
    for (m, path, h, want) in cases {
        let r = send(&c, m, addr, path, h, b"").await.unwrap();
        assert_eq!(r.origin(), want, "{m} {path} {h:?}");
    }
}

/// A rule that strips its prefix: the server sees the rewritten path with the query, the
/// access log the request as received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_path_rewrite_reaches_the_server_and_the_log_keeps_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let (_o, _p, addr) = before_one_origin(&format!(
        "access_log = \"{}\"\naccess_log_format = \"json\"\n\
         [[virtual_server.rule]]\nname = \"api\"\npath_prefix = \"/api/\"\ngroup = \"g\"\n\
         path_rewrite = {{ from = \"^/api(/.*)$\", to = \"$1\" }}\n",
        log.display()
    ))
    .await;
    let c = client();
    let target = |a: &Answer| {
        let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
        v["target"].as_str().unwrap().to_string()
    };
    assert_eq!(
        target(&get(&c, addr, "/api/echo?x=1&y=2").await),
        "/echo?x=1&y=2"
    );
    // Requests no rewriting rule takes pass as they are.
    assert_eq!(target(&get(&c, addr, "/echo?api=1").await), "/echo?api=1");
    let lines = json_log_lines(&log, 2).await;
    assert_eq!(lines[0]["uri"], "/api/echo?x=1&y=2");
}

/// A server behind a path rewrite that redirects to its own address: `replace` on the
/// response headers puts the client's view back in `Location`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_redirects_are_rewritten_for_the_client() {
    // Answers every request with a redirect naming itself.
    let (app, _) = raw_server(|mut s, _| async move {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        let me = s.local_addr().unwrap();
        let answer = format!(
            "HTTP/1.1 302 Found\r\nLocation: http://{me}/login?next=%2F\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        );
        let _ = s.write_all(answer.as_bytes()).await;
    })
    .await;
    let from = format!("^http://{}/", regex_escape(&app.to_string()));
    let text = format!(
        "{}{}",
        group("g", "pool_max_idle = 0", &[(app, "")]),
        vs(
            "g",
            &format!(
                "[[virtual_server.rule]]\npath_prefix = \"/api/\"\ngroup = \"g\"\n\
                 path_rewrite = {{ from = \"^/api(/.*)$\", to = \"$1\" }}\n\
                 [virtual_server.response_headers]\n\
                 replace = [{{ name = \"Location\", from = \"{from}\", to = \"/api/\" }}]\n"
            )
        ),
    );
    let (_p, addr) = proxy(&text).await;
    let a = get(&client(), addr, "/api/account").await;
    assert_eq!(a.status, 302);
    assert_eq!(a.headers["location"], "/api/login?next=%2F");
}

/// `s` with the characters a regular expression treats specially escaped (dots, here),
/// written as a TOML basic string holds it.
fn regex_escape(s: &str) -> String {
    s.replace('.', "\\\\.")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_and_header_rules_reach_the_server() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group("g", "", &[(o.addr, "")]),
        vs(
            "g",
            "forwarded = true\n[virtual_server.request_headers]\nset = { \"X-Env\" = \"lab\" }\nremove = [\"X-Secret\"]\n\
             [virtual_server.response_headers]\nremove = [\"X-Origin\"]\nadd = { \"X-Via\" = \"headway\" }\n"
        )
    );
    let (_p, addr) = proxy(&text).await;
    let c = client();
    let r = send(
        &c,
        "GET",
        addr,
        "/echo",
        &[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-secret", "1"),
            ("host", "www.example"),
        ],
        b"",
    )
    .await
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let h = &v["headers"];
    assert_eq!(h["x-forwarded-for"][0], "203.0.113.9, 127.0.0.1");
    assert_eq!(h["x-forwarded-proto"][0], "http");
    assert_eq!(
        h["forwarded"][0],
        "for=127.0.0.1;proto=http;host=\"www.example\""
    );
    assert_eq!(h["x-env"][0], "lab");
    assert_eq!(h["host"][0], "www.example");
    assert!(h.get("x-secret").is_none());
    assert!(!r.headers.contains_key("x-origin"));
    assert_eq!(r.headers["x-via"], "headway");
}

/// A server on a loopback port that runs `serve` on each connection it accepts, with a counter
/// the test reads.
async fn raw_server<F, Fut>(serve: F) -> (SocketAddr, Arc<AtomicU64>)
where
    F: Fn(TcpStream, Arc<AtomicU64>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicU64::new(0));
    let count = n.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve(s, count.clone()));
        }
    });
    (addr, n)
}

/// A server that accepts and closes every connection without answering (a reset before any
/// response byte); counts connections.
async fn closing_server() -> (SocketAddr, Arc<AtomicU64>) {
    raw_server(|mut s, count| async move {
        count.fetch_add(1, Ordering::SeqCst);
        // Read the request, then close without a byte of response.
        let mut buf = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_requests_are_retried_elsewhere_and_posts_are_not() {
    let (bad, accepted) = closing_server().await;
    let good = Origin::start("good", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group(
            "g",
            // Passive health off: every request meets the closing server first.
            "retries = 1\npool_max_idle = 0\nmax_fails = 0",
            &[(bad, "weight = 1000"), (good.addr, "weight = 1")]
        ),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    for _ in 0..5 {
        let r = get(&c, addr, "/echo").await;
        assert_eq!((r.status, r.origin().as_str()), (200, "good"));
    }
    let gets_to_bad = accepted.load(Ordering::SeqCst);
    assert_eq!(gets_to_bad, 5, "each GET tried the closing server first");
    let mut posts = Vec::new();
    for _ in 0..5 {
        posts.push(
            send(&c, "POST", addr, "/echo", &[], b"payload")
                .await
                .unwrap()
                .status,
        );
    }
    assert_eq!(
        posts, [502; 5],
        "a POST the server may have seen is not sent again"
    );
    assert_eq!(accepted.load(Ordering::SeqCst) - gets_to_bad, 5);
    let s = p.snapshot();
    assert_eq!(s.groups[0].servers[0].retries, 5);
    assert_eq!(s.groups[0].servers[1].requests, 5);
}

/// A server that answers every request (bodiless, keep-alive) with 503 `busy`; counts them.
async fn busy_server() -> (SocketAddr, Arc<AtomicU64>) {
    raw_server(|mut s, count| async move {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(k) = s.read(&mut buf).await {
            if k == 0 {
                return;
            }
            got.extend_from_slice(&buf[..k]);
            while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                got.drain(..end + 4);
                count.fetch_add(1, Ordering::SeqCst);
                let answer = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\
                               X-Origin: busy\r\n\r\nbusy";
                if s.write_all(answer).await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_the_group_retries_on_go_to_another_server_for_replayable_requests() {
    let (busy, answered) = busy_server().await;
    let good = Origin::start("good", Duration::ZERO).await;
    let servers = [(busy, ""), (good.addr, "")];
    let text = |extra: &str| {
        format!(
            "{}{}{}",
            group(
                "g",
                &format!("retries = 1\nmax_fails = 0\n{extra}"),
                &servers
            ),
            group("alone", "retries = 2\nretry_on = [503]", &[(busy, "")]),
            vs(
                "g",
                "[[virtual_server.rule]]\npath_prefix = \"/alone\"\ngroup = \"alone\""
            )
        )
    };
    let (p, addr) = proxy(&text("retry_on = [502, 503]")).await;
    let c = client();
    // Round robin sends every other request to the busy server: each GET is answered by the
    // good one.
    for _ in 0..10 {
        let r = get(&c, addr, "/echo").await;
        assert_eq!((r.status, r.origin().as_str()), (200, "good"));
    }
    let to_busy = answered.load(Ordering::SeqCst);
    assert!((4..=6).contains(&to_busy), "{to_busy}");
    assert_eq!(p.snapshot().groups[0].servers[0].retries, to_busy);
    // A request with a body is not sent twice: the busy server's answer goes to the client.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(
            send(&c, "POST", addr, "/echo", &[], b"x")
                .await
                .unwrap()
                .status,
        );
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 503, 503]);
    // With nobody else to ask, the last try's answer goes to the client, as the server sent it.
    let before = answered.load(Ordering::SeqCst);
    let r = get(&c, addr, "/alone").await;
    assert_eq!((r.status, r.text().as_str()), (503, "busy"));
    assert_eq!(
        answered.load(Ordering::SeqCst) - before,
        3,
        "one try and two retries"
    );
    // Without retry_on the busy server's answers reach clients.
    p.replace(Config::parse(&text(""), "test.toml").unwrap().adc)
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(get(&c, addr, "/echo").await.status);
    }
    got.sort_unstable();
    assert_eq!(got, [200, 200, 503, 503]);
}

/// Sends raw bytes on a new connection and reads until the proxy closes it.
async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the proxy closes the connection");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_with_whole_bodies() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (_p, addr) = proxy(&text).await;
    // Three requests in one write, the last asking to close: a small body, a body larger than
    // any buffer on the way (written as it streams, not gathered), and another small one.
    let sizes = [128usize, 700_000, 5];
    let mut req = String::new();
    for (i, n) in sizes.iter().enumerate() {
        let close = if i + 1 == sizes.len() {
            "Connection: close\r\n"
        } else {
            ""
        };
        req += &format!("GET /corpus/random/{n} HTTP/1.1\r\nHost: x\r\n{close}\r\n");
    }
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the proxy closes after the last answer")
        .unwrap();
    // Walk the answers: each head's content-length, then exactly that many body bytes.
    let mut at = 0;
    for n in sizes {
        let head_end = out[at..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("an answer head")
            + at
            + 4;
        let head = String::from_utf8_lossy(&out[at..head_end]).to_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains(&format!("content-length: {n}\r\n")), "{head}");
        let direct = get(&client(), o.addr, &format!("/corpus/random/{n}")).await;
        assert!(
            out[head_end..head_end + n] == direct.body[..],
            "body {n} differs"
        );
        at = head_end + n;
    }
    assert_eq!(at, out.len(), "nothing after the third answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_connection_serves_bodiless_requests_and_then_bodies() {
    // The proxy's own HTTP/1 loop takes bodiless requests and hands the connection to hyper at
    // the first one with a body; the client sees one connection that answers everything.
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (p, addr) = proxy(&text).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut pending = Vec::new();
    s.write_all(b"GET /corpus/random/100 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /corpus/random/300 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (h, body) = one_answer(&mut s, &mut pending, false).await;
    assert!(
        h.starts_with("http/1.1 200 ok\r\n") && h.contains("date: "),
        "{h}"
    );
    assert_eq!(body.len(), 100);
    // HEAD: the length it would have, no body (the next answer follows at once).
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let (head, _) = one_answer(&mut s, &mut pending, true).await;
    assert!(head.contains("content-length: 300\r\n"), "{head}");
    let (h, body) = one_answer(&mut s, &mut pending, false).await;
    assert!(h.starts_with("http/1.1 200"), "{h}");
    let echo = String::from_utf8_lossy(&body);
    assert!(
        echo.contains("\"body_bytes\":5") && echo.contains("\"method\":\"POST\""),
        "the POST and its body reached the server: {echo}"
    );
    // After the hand-off, bodiless requests still work on the same connection.
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (h, _) = one_answer(&mut s, &mut pending, false).await;
    assert!(h.starts_with("http/1.1 200"), "{h}");
    // HTTP/1.0 without keep-alive: answered in 1.0, then closed.
    let out = raw(addr, b"GET /corpus/random/10 HTTP/1.0\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.0 200 OK\r\n"), "{out}");
    assert!(!out.to_lowercase().contains("keep-alive"), "{out}");
    // HTTP/1.0 with keep-alive stays open and says so.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /corpus/random/10 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let mut pending = Vec::new();
    let (h, body) = one_answer(&mut s, &mut pending, false).await;
    assert!(
        h.starts_with("http/1.0 200 ok\r\n") && h.contains("connection: keep-alive"),
        "{h}"
    );
    assert_eq!(body.len(), 10);
    s.write_all(b"GET /corpus/random/20 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(one_answer(&mut s, &mut pending, false).await.1.len(), 20);
    assert_eq!(p.snapshot().groups[0].servers[0].requests, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_framing_is_refused_and_never_forwarded() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group("g", "", &[(o.addr, "")]),
        vs("g", "max_header_bytes = \"4KiB\"")
    );
    let (p, addr) = proxy(&text).await;
    let cases: [&[u8]; 5] = [
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    ];
    for case in cases {
        let out = raw(addr, case).await;
        assert!(
            out.starts_with("HTTP/1.1 400"),
            "{:?} → {out:?}",
            String::from_utf8_lossy(case)
        );
        assert_eq!(
            out.matches("HTTP/1.1").count(),
            1,
            "one response, then closed: {out}"
        );
    }
    assert_eq!(
        p.snapshot().groups[0].servers[0].requests,
        0,
        "nothing reached the server"
    );
    // Pipelined behind a good request: the good one is answered, then the 400, then close.
    let out = raw(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    let second = out.find("HTTP/1.1 400").expect("then a 400");
    assert!(
        out[second..].contains("both Content-Length and Transfer-Encoding"),
        "{out}"
    );
    assert_eq!(p.snapshot().groups[0].servers[0].requests, 1);
    // Oversized header: 431.
    let big = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(5000)
    );
    let out = raw(addr, big.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");
    // A good request on the same proxy still works.
    let r = get(&client(), addr, "/healthz").await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_clients_do_not_stop_normal_clients() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group("g", "", &[(o.addr, "")]),
        vs("g", "request_header_timeout = \"1s\"")
    );
    let (p, addr) = proxy(&text).await;
    // 200 connections that send a header one byte at a time, slowly (bounded: 3 s).
    let mut slow = Vec::new();
    for _ in 0..200 {
        slow.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            for b in b"GET / HTTP/1.1\r\nX-Slow: 1" {
                if s.write_all(&[*b]).await.is_err() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // By now the header timeout has closed the connection.
            let mut buf = [0u8; 64];
            matches!(
                tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await,
                Ok(Ok(0)) | Ok(Err(_))
            )
        }));
    }
    let c = client();
    for _ in 0..200 {
        assert_eq!(get(&c, addr, "/healthz").await.status, 200);
    }
    for t in slow {
        assert!(t.await.unwrap(), "a slow-header connection was not closed");
    }
    assert_eq!(p.snapshot().virtual_servers[0].requests, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_load_fail_no_request() {
    let a = Origin::start("a", Duration::ZERO).await;
    let b = Origin::start("b", Duration::ZERO).await;
    let cfg = |weight: u32, rule: bool| {
        format!(
            "{}{}{}",
            group(
                "g",
                "",
                &[(a.addr, &format!("weight = {weight}")), (b.addr, "")]
            ),
            group("h", "", &[(b.addr, "")]),
            vs(
                "g",
                if rule {
                    "[[virtual_server.rule]]\npath_prefix = \"/echo\"\ngroup = \"h\""
                } else {
                    ""
                }
            )
        )
    };
    let (p, addr) = proxy(&cfg(1, false)).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    for i in 0..8 {
        let (stop, failures, done) = (stop.clone(), failures.clone(), done.clone());
        // Half the clients keep their connections, half open one per request.
        let c = if i % 2 == 0 {
            client()
        } else {
            Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build_http()
        };
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match send(&c, "GET", addr, "/echo", &[], b"").await {
                    Ok(r) if r.status == 200 => {}
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for i in 0..10u32 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let text = cfg(1 + i % 3, i % 2 == 0);
        let c = Config::parse(&text, "test.toml").unwrap();
        p.replace(c.adc).await.expect("reload applies");
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(p.snapshot().generation, 11);
    assert!(done.load(Ordering::Relaxed) > 100);
    assert_eq!(failures.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_under_load_fails_only_its_in_flight_posts() {
    let mut a = Origin::start("a", Duration::from_millis(20)).await;
    let b = Origin::start("b", Duration::from_millis(20)).await;
    let text = format!(
        "{}{}",
        group("g", "retries = 2", &[(a.addr, ""), (b.addr, "")]),
        vs("g", "")
    );
    let (_p, addr) = proxy(&text).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let get_failures = Arc::new(AtomicU64::new(0));
    let post_failures = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    const POSTERS: u64 = 4;
    for i in 0..8 {
        let (stop, gf, pf) = (stop.clone(), get_failures.clone(), post_failures.clone());
        let c = client();
        load.push(tokio::spawn(async move {
            let post = i < POSTERS;
            while !stop.load(Ordering::Relaxed) {
                let (m, body): (&str, &'static [u8]) = if post {
                    ("POST", b"data")
                } else {
                    ("GET", b"")
                };
                let ok =
                    matches!(send(&c, m, addr, "/echo", &[], body).await, Ok(r) if r.status == 200);
                if !ok {
                    if post { &pf } else { &gf }.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(
        get_failures.load(Ordering::Relaxed),
        0,
        "GETs are retried elsewhere"
    );
    // At most one POST per posting client was in flight on the killed server.
    assert!(post_failures.load(Ordering::Relaxed) <= POSTERS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_virtual_servers_carry_bytes_and_half_close() {
    // An echo server that answers after the client's FIN, proving the half-close passed.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut all = Vec::new();
                s.read_to_end(&mut all).await.unwrap();
                s.write_all(&all).await.unwrap();
            });
        }
    });
    let text = format!(
        "{}[[virtual_server]]\nname = \"l4\"\nkind = \"tcp\"\nlisten = \"127.0.0.1:0\"\ngroup = \"g\"\n",
        group("g", "", &[(echo, "")])
    );
    let (p, addr) = proxy(&text).await;
    // Empty, short (copied only) and long (copied, then spliced) exchanges.
    let sizes = [0u32, 100, 64 * 1024 + 1, 3_000_000];
    for len in sizes {
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut s = TcpStream::connect(addr).await.unwrap();
        let (mut r, mut w) = s.split();
        let send = async {
            w.write_all(&data).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut back = Vec::new();
        let recv = r.read_to_end(&mut back);
        let (_, n) = tokio::join!(send, recv);
        assert_eq!(n.unwrap(), data.len());
        assert!(back == data, "{len} bytes came back changed");
    }
    until(&p, "the connections to end", |s| {
        s.virtual_servers[0].active_connections == 0
    })
    .await;
    let total: u64 = sizes.iter().map(|&n| u64::from(n)).sum();
    let v = &p.snapshot().virtual_servers[0];
    assert_eq!((v.bytes_in, v.bytes_out), (total, total));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_server_that_finishes_first_still_gets_the_clients_bytes() {
    // The server greets, shuts its side down, then reads everything the client sends: the
    // client must see the greeting's end while its own direction stays open, and the server
    // must get every byte and then the end of the client's stream.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = l.local_addr().unwrap();
    let (got_tx, mut got_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let got_tx = got_tx.clone();
            tokio::spawn(async move {
                s.write_all(b"hello").await.unwrap();
                s.shutdown().await.unwrap();
                let mut all = Vec::new();
                s.read_to_end(&mut all).await.unwrap();
                let _ = got_tx.send(all);
            });
        }
    });
    let text = format!(
        "{}[[virtual_server]]\nname = \"l4\"\nkind = \"tcp\"\nlisten = \"127.0.0.1:0\"\ngroup = \"g\"\n",
        group("g", "", &[(server, "")])
    );
    let (p, addr) = proxy(&text).await;
    for len in [1usize, 100_000] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut greeting = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut greeting))
            .await
            .expect("the server's end reached the client")
            .unwrap();
        assert_eq!(greeting, b"hello");
        let data: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        s.write_all(&data).await.unwrap();
        s.shutdown().await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), got_rx.recv())
            .await
            .expect("the server saw the end of the client's stream")
            .unwrap();
        assert!(got == data, "{len} bytes arrived changed");
    }
    until(&p, "the connections to end", |s| {
        s.virtual_servers[0].active_connections == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_connections_are_reused_across_clients() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (p, addr) = proxy(&text).await;
    // 200 clients, one request each on its own connection.
    one_request_per_connection(addr, 200).await;
    let s = &p.snapshot().groups[0].servers[0];
    assert_eq!(s.requests, 200);
    assert!(s.connections_opened <= 2, "{s:?}");
    assert!(s.reuse_ratio >= 0.99, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_workers_share_each_address_and_keep_their_own_server_connections() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (p, addr) = proxy_with(&text, 2).await;
    // 200 clients, one request each on its own connection: the kernel spreads them over the
    // two workers' sockets, and each worker reuses the server connections it opened.
    one_request_per_connection(addr, 200).await;
    let s = &p.snapshot().groups[0].servers[0];
    assert_eq!(s.requests, 200);
    assert!(
        (2..=4).contains(&s.connections_opened),
        "one or two server connections per worker: {s:?}"
    );
    // The address is shared by the workers' sockets only: another listener cannot join it,
    // and a reload to an address another socket holds is refused.
    assert!(std::net::TcpListener::bind(addr).is_err());
    let squatter = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let taken = squatter.local_addr().unwrap();
    let bad = text.replace("\"127.0.0.1:0\"", &format!("\"{taken}\""));
    let e = p
        .replace(Config::parse(&bad, "test.toml").unwrap().adc)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cannot listen"), "{e}");
    // A reload that keeps the address keeps every worker's socket.
    let moved = text.replace("name = \"front\"", "name = \"front2\"");
    p.replace(Config::parse(&moved, "test.toml").unwrap().adc)
        .await
        .expect("reload applies");
    one_request_per_connection(addr, 50).await;
    p.shutdown(Duration::from_secs(5)).await;
}

/// `n` clients, each sending one `GET /healthz` on a connection of its own; every answer 200.
async fn one_request_per_connection(addr: SocketAddr, n: usize) {
    for _ in 0..n {
        let c = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build_http::<Full<Bytes>>();
        assert_eq!(get(&c, addr, "/healthz").await.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_reload_is_refused_and_the_running_config_stays() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (p, addr) = proxy(&text).await;
    // A listen address another socket holds: the reload fails, nothing changes.
    let squatter = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let taken = squatter.local_addr().unwrap();
    let bad = text.replace("\"127.0.0.1:0\"", &format!("\"{taken}\""));
    let c = Config::parse(&bad, "test.toml").unwrap();
    let e = p.replace(c.adc).await.unwrap_err();
    assert!(e.to_string().contains("cannot listen"), "{e}");
    assert_eq!(p.snapshot().generation, 1);
    assert_eq!(p.snapshot().reloads_failed, 1);
    assert_eq!(get(&client(), addr, "/healthz").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge_works_beside_http1() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (_p, addr) = proxy(&text).await;
    let c = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    for _ in 0..20 {
        let r = send(&c, "GET", addr, "/echo", &[], b"").await.unwrap();
        assert_eq!(r.status, 200);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        // HTTP/1.1 to the server, with a Host header made from the :authority.
        assert_eq!(v["headers"]["host"][0], addr.to_string());
    }
}

/// HTTP/2 clients on the wire (the h2 crate, so the frames are ours to send): a body much
/// larger than a stream's first window, `Expect: 100-continue` answered with a `100` before
/// the body is sent, a client that resets one stream while others go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_clients_send_large_bodies_wait_for_100_continue_and_reset_streams() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (p, addr) = proxy(&text).await;
    let send = h2_client(addr).await;
    let uri = |path: &str| format!("http://{addr}{path}");
    async fn read_all(resp: http::Response<h2::RecvStream>) -> (u16, Vec<u8>) {
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let mut out = Vec::new();
        while let Some(d) = body.data().await {
            let d = d.unwrap();
            let _ = body.flow_control().release_capacity(d.len());
            out.extend_from_slice(&d);
        }
        (status, out)
    }
    async fn send_body(stream: &mut h2::SendStream<Bytes>, mut data: Bytes) {
        while !data.is_empty() {
            stream.reserve_capacity(data.len());
            let n = std::future::poll_fn(|cx| stream.poll_capacity(cx))
                .await
                .unwrap()
                .unwrap();
            let piece = data.split_to(n.min(data.len()));
            stream.send_data(piece, data.is_empty()).unwrap();
        }
    }

    // 4 MiB up: four times the window a stream may send before the proxy reads.
    let mut s = send.clone().ready().await.unwrap();
    let req = http::Request::post(uri("/echo"))
        .header("content-length", "4194304")
        .body(())
        .unwrap();
    let (answer, mut up) = s.send_request(req, false).unwrap();
    send_body(&mut up, Bytes::from(vec![b'x'; 4 << 20])).await;
    let (status, body) = read_all(answer.await.unwrap()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["body_bytes"], 4 << 20, "{v}");
    // Framed for the HTTP/1 server as the client framed it: by its length, not chunked.
    assert_eq!(v["headers"]["content-length"][0], "4194304", "{v}");
    assert!(v["headers"].get("transfer-encoding").is_none(), "{v}");

    // Expect: 100-continue: the 100 comes before any byte of the body is sent.
    let mut s = send.clone().ready().await.unwrap();
    let req = http::Request::post(uri("/echo"))
        .header("expect", "100-continue")
        .header("content-length", "5")
        .body(())
        .unwrap();
    let (mut answer, mut up) = s.send_request(req, false).unwrap();
    let informational = tokio::time::timeout(
        Duration::from_secs(5),
        std::future::poll_fn(|cx| answer.poll_informational(cx)),
    )
    .await
    .expect("no 100 Continue came")
    .unwrap()
    .unwrap();
    assert_eq!(informational.status(), 100);
    send_body(&mut up, Bytes::from_static(b"hello")).await;
    let (status, body) = read_all(answer.await.unwrap()).await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["body_bytes"], 5, "{v}");

    // A stream reset while its answer is slow to come ends alone; the next one is answered.
    let mut s = send.clone().ready().await.unwrap();
    let req = http::Request::get(uri("/dynamic?latency=30s"))
        .body(())
        .unwrap();
    let (answer, mut up) = s.send_request(req, true).unwrap();
    // The server's requests in flight, once they are `n` (within 5 s).
    let active = |n: u64| {
        let p = &p;
        async move {
            tokio::time::timeout(Duration::from_secs(5), async {
                loop {
                    let s = p.snapshot();
                    if s.groups[0].servers[0].active == n {
                        return s;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
        }
    };
    // Reset once the request is at the server.
    active(1)
        .await
        .expect("the slow request never reached the server");
    up.send_reset(h2::Reason::CANCEL);
    drop(answer);
    let mut s = send.clone().ready().await.unwrap();
    let req = http::Request::get(uri("/corpus/random/8KiB"))
        .body(())
        .unwrap();
    let (answer, _) = s.send_request(req, true).unwrap();
    let resp = answer.await.unwrap();
    // The answer is framed for HTTP/2: a length, a date, no connection-specific fields.
    assert_eq!(resp.headers()["content-length"], "8192");
    assert!(resp.headers().contains_key("date"));
    assert!(!resp.headers().contains_key("connection"));
    let (status, body) = read_all(resp).await;
    assert_eq!((status, body.len()), (200, 8192));
    // The reset request's server exchange was given up, not left waiting.
    let gone = active(0)
        .await
        .expect("the reset stream's exchange stayed active");
    assert_eq!(gone.groups[0].servers[0].active, 0);
}

/// An HTTP/2 client connection (prior knowledge) to `addr`, driven by a task of its own.
async fn h2_client(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// An answer's parts, each with the delay before it.
type Parts = Vec<(Duration, Vec<u8>)>;

/// After a client left request `round` (from 0) of `case`: the server's one connection is
/// pooled again, and the next request reuses it.
async fn next_reuses_the_connection(
    (p, addr): (&Proxy, SocketAddr),
    accepted: &AtomicU64,
    round: u64,
    case: &str,
) {
    until(p, "the answer read and its connection pooled", |s| {
        s.groups[0].servers[0].idle_connections == 1
    })
    .await;
    let r = get(&client(), addr, "/next").await;
    assert_eq!(
        (r.status, &r.body[..]),
        (200, &b"hello world"[..]),
        "{case}"
    );
    let server = &p.snapshot().groups[0].servers[0];
    assert_eq!(
        (accepted.load(Ordering::SeqCst), server.connections_opened),
        (1, 1),
        "{case}: {server:?}"
    );
    assert_eq!(server.reused, 2 * round + 1, "{case}: {server:?}");
}

/// A server of the test's own that counts its connections and the request heads it read,
/// and answers each (bodiless) request with the parts `answer` gives for its head, each
/// after its delay: its address, the connections, the heads.
async fn head_server(answer: fn(&str) -> Parts) -> (SocketAddr, Arc<AtomicU64>, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let (accepted, received) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (a, r) = (accepted.clone(), received.clone());
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let r = r.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tcp.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end);
                    r.fetch_add(1, Ordering::SeqCst);
                    for (delay, part) in answer(&head) {
                        tokio::time::sleep(delay).await;
                        if tcp.write_all(&part).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (server, accepted, received)
}

/// A client that leaves while its request is at an HTTP/1 server lets the answer finish on
/// the server connection, which goes back to the pool for the next request instead of being
/// closed (HAProxy's default too): one connection serves them all, whether the answer is
/// framed by its length or chunked after an interim `100` (read to its last chunk and
/// trailers before the connection is pooled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_does_not_cost_its_server_connection() {
    // Answers `/slow…` after 300 ms.
    let (server, accepted, received) = head_server(|head| {
        let slow = if head.starts_with("GET /slow") {
            300
        } else {
            0
        };
        let answer: &[u8] = if head.starts_with("GET /slow-chunked") {
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\
              Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n\
              0\r\nX-Done: yes\r\n\r\n"
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"
        };
        vec![(Duration::from_millis(slow), answer.to_vec())]
    })
    .await;
    let text = format!("{}{}", group("g", "", &[(server, "")]), vs("g", ""));
    let (p, addr) = proxy_with(&text, 1).await;
    let send = h2_client(addr).await;
    for (round, path) in ["/slow-length", "/slow-chunked"].into_iter().enumerate() {
        let before = received.load(Ordering::SeqCst);
        let mut s = send.clone().ready().await.unwrap();
        let req = http::Request::get(format!("http://{addr}{path}"))
            .body(())
            .unwrap();
        let (answer, mut up) = s.send_request(req, true).unwrap();
        let deadline = SystemClock::now() + Duration::from_secs(10);
        while received.load(Ordering::SeqCst) == before {
            assert!(
                SystemClock::now() < deadline,
                "{path} never reached the server"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The client gives the request up while the server is still working on it.
        up.send_reset(h2::Reason::CANCEL);
        drop(answer);
        next_reuses_the_connection((&p, addr), &accepted, round as u64, path).await;
    }
}

/// A client that leaves while an answer's body is being relayed from an HTTP/1 server lets
/// the rest be read off the server connection, which goes back to the pool: an HTTP/2 client
/// resetting its stream and an HTTP/1 client closing its connection, each after the first
/// part of a 64 KiB answer framed by its length or chunked with trailers — one server
/// connection serves all eight requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_answer_does_not_cost_its_server_connection() {
    // Sends `/big…` in two parts 300 ms apart (the client leaves meanwhile: the behaviour
    // under test).
    let (server, accepted, _) = head_server(|head| {
        let (first, rest): (Vec<u8>, Vec<u8>) = if head.starts_with("GET /big-length") {
            let mut first = b"HTTP/1.1 200 OK\r\nContent-Length: 65536\r\n\r\n".to_vec();
            first.extend_from_slice(&[b'a'; 16 << 10]);
            (first, vec![b'b'; 48 << 10])
        } else if head.starts_with("GET /huge") {
            // 1 MiB announced, the first 16 KiB sent, the rest never.
            let mut first = b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n".to_vec();
            first.extend_from_slice(&[b'a'; 16 << 10]);
            (first, Vec::new())
        } else if head.starts_with("GET /big-chunked") {
            let mut first =
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4000\r\n".to_vec();
            first.extend_from_slice(&[b'a'; 16 << 10]);
            first.extend_from_slice(b"\r\n");
            let mut rest = b"c000\r\n".to_vec();
            rest.extend_from_slice(&[b'b'; 48 << 10]);
            rest.extend_from_slice(b"\r\n0\r\nX-Done: yes\r\n\r\n");
            (first, rest)
        } else {
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world".to_vec(),
                Vec::new(),
            )
        };
        let mut parts = vec![(Duration::ZERO, first)];
        if !rest.is_empty() {
            parts.push((Duration::from_millis(300), rest));
        }
        parts
    })
    .await;
    let text = format!("{}{}", group("g", "", &[(server, "")]), vs("g", ""));
    let (p, addr) = proxy_with(&text, 1).await;
    let send = h2_client(addr).await;
    let mut round = 0;
    for path in ["/big-length", "/big-chunked"] {
        for http2 in [true, false] {
            let case = format!("{path} over HTTP/{}", if http2 { 2 } else { 1 });
            if http2 {
                let mut s = send.clone().ready().await.unwrap();
                let req = http::Request::get(format!("http://{addr}{path}"))
                    .body(())
                    .unwrap();
                let (answer, _) = s.send_request(req, true).unwrap();
                let mut body = answer.await.unwrap().into_body();
                let data = body.data().await.unwrap().unwrap();
                assert!(
                    !data.is_empty() && data.iter().all(|&b| b == b'a'),
                    "{case}"
                );
                // The client gives the answer up: dropping its body resets the stream.
                drop(body);
            } else {
                let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tcp.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                    .await
                    .unwrap();
                let (mut got, mut chunk) = (Vec::new(), [0u8; 4096]);
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = tcp.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "{case}: closed before the answer's head");
                    got.extend_from_slice(&chunk[..n]);
                }
                assert!(got.starts_with(b"HTTP/1.1 200"), "{case}");
                // The client leaves with the answer half read.
                drop(tcp);
            }
            next_reuses_the_connection((&p, addr), &accepted, round, &case).await;
            round += 1;
        }
    }
    // A rest longer than the drain's bound is not read: the connection is closed at once.
    let mut s = send.clone().ready().await.unwrap();
    let req = http::Request::get(format!("http://{addr}/huge"))
        .body(())
        .unwrap();
    let (answer, _) = s.send_request(req, true).unwrap();
    let mut body = answer.await.unwrap().into_body();
    assert!(!body.data().await.unwrap().unwrap().is_empty());
    drop(body);
    until(&p, "the connection closed", |s| {
        let server = &s.groups[0].servers[0];
        server.idle_connections == 0 && server.active == 0
    })
    .await;
    let r = get(&client(), addr, "/next").await;
    assert_eq!(r.status, 200);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sharepoint_example_does_what_the_seeds_netscaler_does() {
    // The example file as shipped, its four server addresses pointed at live origins and its
    // listeners at free ports.
    let names = [
        "spsdog4-25",
        "spsdog4-26",
        "spsdog4-25-8080",
        "spsdog4-26-8080",
    ];
    let mut origins = Vec::new();
    let mut text = include_str!("../../headway-config/examples/adc-sharepoint.toml")
        .replace("127.0.0.1:8000", "127.0.0.1:0")
        .replace("access_log = \"-\"\n", "")
        .replace("access_log_format = \"combined\"\n", "")
        .replace("[admin]\nlisten = \"127.0.0.1:9090\"\n", "");
    for (i, n) in names.iter().enumerate() {
        let o = Origin::start(n, Duration::ZERO).await;
        text = text.replace(&format!("127.0.0.1:{}", 8081 + i), &o.addr.to_string());
        origins.push(o);
    }
    let (p, addr) = proxy(&text).await;
    let c = client();
    // Least connection over the port-80 pair, an inserted session cookie, kept from then on.
    let first = get(&c, addr, "/Pages/default.aspx").await;
    assert!(
        first.origin() == "spsdog4-25" || first.origin() == "spsdog4-26",
        "{}",
        first.origin()
    );
    let set = first.headers["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.starts_with("NSC_SP80=") && set.contains("HttpOnly") && !set.contains("Max-Age"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_string();
    for _ in 0..50 {
        let r = send(
            &c,
            "GET",
            addr,
            "/Docs/report.doc",
            &[("cookie", &cookie)],
            b"",
        )
        .await
        .unwrap();
        assert_eq!(r.origin(), first.origin());
    }
    // The content-switching policy: My Site goes to the 8080 pair, with its own cookie.
    let r = get(&c, addr, "/personal/_layouts/MySite.aspx").await;
    assert!(r.origin().ends_with("-8080"), "{}", r.origin());
    assert!(r.headers["set-cookie"]
        .to_str()
        .unwrap()
        .starts_with("NSC_SP8080="));
    // The TCP monitor on the port-80 group and the HTTP monitor on the 8080 group both pass.
    until(&p, "monitors", |s| {
        s.groups.iter().all(|g| {
            g.servers
                .iter()
                .all(|v| v.checks_ok >= 1 && v.health == "up")
        })
    })
    .await;
}

/// The API front-end example (`adc-api-gateway.toml`) against origins standing in for its
/// servers: the path rewrite, the login's rate limit, tenants hashed to servers, the canary's
/// share of clients (from 200 loopback addresses) and the admin pages' password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_gateway_example_does_what_its_comments_say() {
    let mut text = include_str!("../../headway-config/examples/adc-api-gateway.toml")
        .replace("127.0.0.1:8100", "127.0.0.1:0")
        .replace("access_log = \"-\"\n", "")
        .replace("access_log_format = \"json\"\n", "")
        .replace("[admin]\nlisten = \"127.0.0.1:9090\"\n", "");
    let mut origins = Vec::new();
    for (i, name) in ["one", "two", "next", "admin"].iter().enumerate() {
        let o = Origin::start(name, Duration::ZERO).await;
        text = text.replace(&format!("127.0.0.1:{}", 8081 + i), &o.addr.to_string());
        origins.push(o);
    }
    // Parsed where it lives, so that `admin.htpasswd` is found beside it.
    let at = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../headway-config/examples/adc-api-gateway.toml"
    );
    let cfg = Config::parse(&text, at).unwrap_or_else(|e| panic!("{e}"));
    let p = Proxy::start_with(cfg.adc, 7, 2).await.unwrap();
    let addr = p.bound_addrs()[0].1;
    let c = client();
    // `/api` is stripped: the servers see `/echo`.
    let a = send(&c, "GET", addr, "/api/echo", &[("x-api-key", "k1")], b"")
        .await
        .unwrap();
    assert_eq!(a.status, 200);
    let echoed: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(echoed["target"], "/echo");
    assert!(echoed["headers"]["x-request-id"][0].is_string(), "{echoed}");
    // The login: five tries a minute per client.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let a = send(&c, "POST", addr, "/api/login", &[], b"user=a&password=b")
            .await
            .unwrap();
        statuses.push(a.status);
    }
    assert_ne!(statuses[4], 429, "{statuses:?}");
    assert_eq!(statuses[5], 429, "{statuses:?}");
    // Reports: each tenant always on one server, the tenants over both.
    let mut homes: HashMap<String, String> = HashMap::new();
    for round in 0..3 {
        for t in 0..20 {
            let tenant = format!("tenant-{t}");
            let a = send(
                &c,
                "GET",
                addr,
                "/api/reports/healthz",
                &[("x-tenant", &tenant)],
                b"",
            )
            .await
            .unwrap();
            let home = homes.entry(tenant).or_insert_with(|| a.origin());
            assert_eq!(*home, a.origin(), "round {round}");
        }
    }
    let servers: std::collections::HashSet<_> = homes.values().collect();
    assert_eq!(servers.len(), 2, "{homes:?}");
    // The canary: about 10 % of 200 client addresses, each on the same side every time.
    let mut on_next = 0;
    for i in 1..=200u32 {
        let source = std::net::Ipv4Addr::from(0x7f00_0000 + i);
        let ask = |source| async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(std::net::SocketAddr::new(source, 0)).unwrap();
            let mut s = socket.connect(addr).await.unwrap();
            s.write_all(b"GET /api/healthz HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out.to_ascii_lowercase().contains("x-origin: next")
        };
        let first = ask(std::net::IpAddr::V4(source)).await;
        assert_eq!(ask(std::net::IpAddr::V4(source)).await, first, "{source}");
        on_next += u32::from(first);
    }
    assert!(
        (5..=40).contains(&on_next),
        "{on_next} of 200 on the canary"
    );
    // The admin pages: a password.
    let a = get(&c, addr, "/admin/").await;
    assert_eq!(a.status, 401);
    use base64::Engine as _;
    let good = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("operator:change-me")
    );
    let a = send(
        &c,
        "GET",
        addr,
        "/admin/healthz",
        &[("authorization", &good)],
        b"",
    )
    .await
    .unwrap();
    // Past the password: the admin server's own answer (it has no such page).
    assert_eq!((a.status, a.origin().as_str()), (404, "admin"));
    // A gRPC call: to the HTTP/2 group, its status back as a trailer.
    let call = |path: &str| {
        let req = Request::builder()
            .method("POST")
            .uri(format!("http://{addr}{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(h2_upstream::with_trailers(b"\0\0\0\0\0", &[]))
            .unwrap();
        h2_upstream::h2_client().request(req)
    };
    let resp = call("/helloworld.Greeter/SayHello").await.unwrap();
    assert_eq!(resp.headers()["x-origin"], "next");
    // (The origin has no such service: its 405 for a POST it does not take, where a gRPC
    // server would answer `grpc-status` 12 in trailers; its `/trailers` shows them passing.)
    assert_eq!(resp.status(), 405);
    let resp = call("/trailers").await.unwrap();
    let got = resp.into_body().collect().await.unwrap();
    assert_eq!(got.trailers().unwrap()["grpc-status"], "0");
    let grpc = p.snapshot();
    let grpc = grpc.groups.iter().find(|g| g.name == "grpc").unwrap();
    assert_eq!(grpc.servers[0].requests, 2, "{grpc:?}");
    p.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_lets_in_flight_requests_finish() {
    let slow = Origin::start("slow", Duration::from_millis(500)).await;
    let text = format!("{}{}", group("g", "", &[(slow.addr, "")]), vs("g", ""));
    let (p, addr) = proxy(&text).await;
    let c = client();
    let in_flight = {
        let c = c.clone();
        tokio::spawn(async move { get(&c, addr, "/healthz").await })
    };
    until(&p, "the request to reach the server", |s| {
        s.groups[0].servers[0].active == 1
    })
    .await;
    let done = {
        let p = p.clone();
        tokio::spawn(async move { p.shutdown(Duration::from_secs(10)).await })
    };
    // The listener closes at once; the request in flight still completes.
    let deadline = SystemClock::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(SystemClock::now() < deadline, "still accepting");
        tokio::task::yield_now().await;
    }
    let r = in_flight.await.unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
    done.await.unwrap();
}

/// Sends one keep-alive request on `s` and reads its whole answer.
async fn ask(s: &mut TcpStream) {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    read_until_end(s, b"\r\n\r\nok\n").await;
}

/// Reads from `s` until what came ends with `end` (each read within 10 s; the stream must not
/// end before); what came.
async fn read_until_end(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(end) {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("bytes in time")
            .unwrap();
        assert!(n > 0, "ended early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// A new connection that has had one keep-alive exchange.
async fn one_keep_alive_exchange(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    ask(&mut s).await;
    s
}

/// Waits (bounded) for the proxy to close `s`; how long it took.
async fn closed_after(s: &mut TcpStream, limit: Duration) -> Duration {
    let t0 = SystemClock::now();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(limit, s.read(&mut buf))
        .await
        .expect("the proxy closes the idle connection")
        .unwrap_or(0);
    assert_eq!(n, 0, "nothing is sent on an idle connection");
    SystemClock::now().saturating_duration_since(t0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_close_at_the_idle_timeout_and_at_shutdown() {
    let o = Origin::start("o", Duration::ZERO).await;
    // The idle timeout: closed within a quarter of it after it is due, never before.
    let text = format!(
        "{}{}",
        group("g", "", &[(o.addr, "")]),
        vs("g", "client_idle_timeout = \"1s\"")
    );
    let (_p, addr) = proxy_with(&text, 2).await;
    let mut s = one_keep_alive_exchange(addr).await;
    let waited = closed_after(&mut s, Duration::from_secs(5)).await;
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(2500),
        "closed after {waited:?} idle"
    );
    // A connection that keeps asking outlives the idle timeout.
    let mut s = one_keep_alive_exchange(addr).await;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        ask(&mut s).await;
    }

    // Shutdown: the drain signal closes an idle keep-alive connection at once, long before its
    // idle timeout.
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (p, addr) = proxy_with(&text, 2).await;
    let mut conns = Vec::new();
    for _ in 0..8 {
        conns.push(one_keep_alive_exchange(addr).await);
    }
    let done = {
        let p = p.clone();
        tokio::spawn(async move { p.shutdown(Duration::from_secs(10)).await })
    };
    for s in &mut conns {
        let waited = closed_after(s, Duration::from_secs(5)).await;
        assert!(
            waited < Duration::from_secs(3),
            "closed {waited:?} after the shutdown"
        );
    }
    done.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_connections_last_answer_arrives_whole() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (_p, addr) = proxy(&text).await;
    // HTTP/1.0 and `Connection: close`: the answer whole, then the close, at every size from
    // a body in one write to one larger than the socket buffer (where writes would block).
    for n in [0usize, 1, 128, 70_000, 3_000_000] {
        let direct = get(&client(), o.addr, &format!("/corpus/random/{n}")).await;
        for (version, close) in [("1.0", ""), ("1.1", "Connection: close\r\n")] {
            let req = format!("GET /corpus/random/{n} HTTP/{version}\r\nHost: x\r\n{close}\r\n");
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
                .await
                .expect("the proxy closes after the answer")
                .unwrap();
            let head_end = out
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .expect("an answer head")
                + 4;
            let head = String::from_utf8_lossy(&out[..head_end]).to_lowercase();
            assert!(head.contains(" 200 "), "{head}");
            assert!(
                out[head_end..] == direct.body[..],
                "HTTP/{version} {n}: body differs"
            );
        }
    }
}
