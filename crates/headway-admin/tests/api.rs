//! End-to-end tests of the admin API: the real server on a loopback socket, driven by the real
//! client, `headway ctl`, and raw HTTP for the requests the client never sends.
//!
//! The links behind the API are an in-memory [`LinkControl`]: the real emulator needs root and
//! network namespaces, and the whole chain is tested end to end by the binary's tests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use clap::Parser;
use headway_admin::{
    serve, AdminState, Client, ClientError, CtlArgs, LinkControl, LinkView, WanoptControl,
    WanoptGroup, WanoptStats, BODY_LIMIT, OPENMETRICS_CONTENT_TYPE,
};
use headway_config::LinkSpec;
use headway_link::Params;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde_json::json;

/// In-memory links: a test double for the running emulator.
struct FakeLinks {
    links: Mutex<Vec<LinkView>>,
    sets: AtomicUsize,
    refuse: AtomicBool,
}

impl FakeLinks {
    fn new() -> Arc<Self> {
        let wan = "rate=1.5mbit delay=150ms loss=1% queue=100"
            .parse::<LinkSpec>()
            .unwrap();
        let wan = Params::try_from(&wan).unwrap();
        Arc::new(FakeLinks {
            links: Mutex::new(vec![
                LinkView {
                    name: "wan".into(),
                    a: "wan0".into(),
                    b: "wan1".into(),
                    a_to_b: wan.clone(),
                    b_to_a: wan,
                    stats: json!({"a_to_b": {"passed": 10, "lost": 2, "overflow": 1},
                                  "b_to_a": {"passed": 20, "lost": 0, "overflow": 0}}),
                },
                LinkView {
                    name: "lan".into(),
                    a: "lan0".into(),
                    b: "lan1".into(),
                    a_to_b: Params::default(),
                    b_to_a: Params::default(),
                    stats: json!({}),
                },
            ]),
            sets: AtomicUsize::new(0),
            refuse: AtomicBool::new(false),
        })
    }

    fn params(&self, name: &str) -> (Params, Params) {
        let links = self.links.lock();
        let l = links.iter().find(|l| l.name == name).unwrap();
        (l.a_to_b.clone(), l.b_to_a.clone())
    }
}

impl LinkControl for FakeLinks {
    fn names(&self) -> Vec<String> {
        self.links.lock().iter().map(|l| l.name.clone()).collect()
    }

    fn get(&self, name: &str) -> Option<LinkView> {
        self.links.lock().iter().find(|l| l.name == name).cloned()
    }

    fn set(
        &self,
        name: &str,
        a_to_b: Option<Params>,
        b_to_a: Option<Params>,
    ) -> Result<(), String> {
        if self.refuse.load(Ordering::SeqCst) {
            return Err("the bridge is stopping".into());
        }
        self.sets.fetch_add(1, Ordering::SeqCst);
        let mut links = self.links.lock();
        let l = links
            .iter_mut()
            .find(|l| l.name == name)
            .ok_or("no such link")?;
        if let Some(p) = a_to_b {
            l.a_to_b = p;
        }
        if let Some(p) = b_to_a {
            l.b_to_a = p;
        }
        Ok(())
    }
}

/// The admin API serving on a loopback port in a thread of its own.
struct Server {
    addr: SocketAddr,
    links: Arc<FakeLinks>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Server {
    fn start(token: Option<&str>) -> Server {
        Server::start_with(token, None)
    }

    fn start_with(token: Option<&str>, wanopt: Option<Arc<dyn WanoptControl>>) -> Server {
        // Bound (and listening) before the first request is sent, so no readiness wait.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let links = FakeLinks::new();
        let mut registry = Registry::with_prefix("headway");
        let frames = Counter::<u64>::default();
        frames.inc_by(7);
        registry.register("test_frames", "Frames seen by the test double", frames);
        let state =
            AdminState::with_wanopt(links.clone(), wanopt, registry, token.map(String::from));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)?;
                serve(listener, state, async {
                    let _ = rx.await;
                })
                .await
            })
        });
        Server {
            addr,
            links,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn client(&self, token: Option<&str>) -> Client {
        Client::new(self.url(), token.map(String::from))
    }

    /// Stops the server and returns what `serve` returned.
    fn stop(mut self) -> std::io::Result<()> {
        self.shutdown.take().unwrap().send(()).unwrap();
        self.thread.take().unwrap().join().unwrap()
    }

    /// One raw HTTP/1.1 request; returns (status, headers, body).
    fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[&str],
        body: &[u8],
    ) -> (u16, String, String) {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n",
            self.addr,
            body.len()
        );
        for h in headers {
            req.push_str(h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        // A server may answer (413) before reading a large body, and close; that is fine.
        let _ = s.write_all(body);
        let mut resp = Vec::new();
        let _ = s.read_to_end(&mut resp);
        let resp = String::from_utf8_lossy(&resp).to_string();
        let (head, body) = resp.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_ascii_lowercase(), body.to_string())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn api_status(e: &ClientError) -> u16 {
    e.status()
        .unwrap_or_else(|| panic!("not an API error: {e}"))
}

#[test]
fn health_and_shutdown() {
    let server = Server::start(None);
    server.client(None).health().unwrap();
    let (status, _, body) = server.raw("GET", "/healthz", &[], b"");
    assert_eq!((status, body.as_str()), (200, "ok"));
    server.stop().unwrap();
}

#[test]
fn metrics_show_registered_metrics_and_admin_requests() {
    let server = Server::start(None);
    let client = server.client(None);
    client.health().unwrap();
    client.link("wan").unwrap();
    let _ = client.link("nope");
    let text = client.metrics_text().unwrap();
    assert!(
        text.contains("# TYPE headway_test_frames counter"),
        "{text}"
    );
    assert!(text.contains("headway_test_frames_total 7\n"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    for line in [
        r#"headway_admin_requests_total{route="/healthz",method="GET",status="200"} 1"#,
        r#"headway_admin_requests_total{route="/api/v1/links/{name}",method="GET",status="200"} 1"#,
        r#"headway_admin_requests_total{route="/api/v1/links/{name}",method="GET",status="404"} 1"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in:\n{text}"
        );
    }
    // Every sample line is `name{labels} value`.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let value = l.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "bad sample line `{l}`");
    }
    let (status, head, _) = server.raw("GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    assert!(
        head.contains(&format!("content-type: {OPENMETRICS_CONTENT_TYPE}")),
        "{head}"
    );
}

#[test]
fn links_are_listed_and_shown_as_full_specs() {
    let server = Server::start(None);
    let client = server.client(None);
    let links = client.links().unwrap();
    let names: Vec<&str> = links.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["wan", "lan"]);
    let wan = client.link("wan").unwrap();
    let (a, b) = server.links.params("wan");
    assert_eq!(wan.a_to_b, LinkSpec::from(&a));
    assert_eq!(wan.b_to_a, LinkSpec::from(&b));
    assert_eq!((wan.a.as_str(), wan.b.as_str()), ("wan0", "wan1"));
    assert_eq!(wan.stats["a_to_b"]["lost"], 2);
    assert_eq!(links[0], wan);
    // The JSON shows every key, with units.
    let (status, _, body) = server.raw("GET", "/api/v1/links/wan", &[], b"");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["a_to_b"]["rate"], "1.5mbit");
    assert_eq!(v["a_to_b"]["delay"], "150ms");
    assert_eq!(v["a_to_b"]["mtu"], 1500);

    let e = client.link("nope").unwrap_err();
    assert_eq!(api_status(&e), 404);
    assert!(
        e.to_string()
            .contains("no link named `nope`; links: wan, lan"),
        "{e}"
    );
}

#[test]
fn put_applies_partial_specs_over_the_current_params() {
    let server = Server::start(None);
    let client = server.client(None);
    let (a0, b0) = server.links.params("wan");
    let view = client
        .set_link("wan", Some("delay=20ms"), None, Some("loss=ge:p=1%,r=30%"))
        .unwrap();
    let (a1, b1) = server.links.params("wan");
    assert_eq!(
        a1,
        Params {
            delay: Duration::from_millis(20),
            ..a0.clone()
        }
    );
    let want_b = "delay=20ms loss=ge:p=1%,r=30%"
        .parse::<LinkSpec>()
        .unwrap()
        .apply(&b0)
        .unwrap();
    assert_eq!(b1, want_b);
    assert_eq!(view.a_to_b, LinkSpec::from(&a1));
    assert_eq!(view.b_to_a, LinkSpec::from(&b1));

    // A direction's own spec wins over `both` for the keys it names.
    client
        .set_link("wan", Some("delay=5ms mtu=1400"), Some("delay=7ms"), None)
        .unwrap();
    let (a2, b2) = server.links.params("wan");
    assert_eq!((a2.delay, a2.mtu), (Duration::from_millis(7), 1400));
    assert_eq!((b2.delay, b2.mtu), (Duration::from_millis(5), 1400));

    // Only the direction named is touched; a table works as well as text.
    let (status, _, body) = server.raw(
        "PUT",
        "/api/v1/links/lan",
        &["content-type: application/json"],
        br#"{"b_to_a": {"rate": "10mbit"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let (a, b) = server.links.params("lan");
    assert_eq!(a, Params::default());
    assert_eq!(b.rate, Some(headway_core::Rate::from_mbps(10)));
}

#[test]
fn a_bad_put_changes_nothing() {
    let server = Server::start(None);
    let client = server.client(None);
    let before = server.links.params("wan");

    // Invalid in one direction: the other, valid one is not applied either.
    let e = client
        .set_link("wan", Some("delay=20ms"), None, Some("mtu=20"))
        .unwrap_err();
    assert_eq!(api_status(&e), 400);
    assert!(
        e.to_string().contains("b_to_a: mtu 20 is out of range"),
        "{e}"
    );

    let e = client
        .set_link("wan", Some("rate=1mbit dly=5ms"), None, None)
        .unwrap_err();
    assert_eq!(api_status(&e), 400);
    assert!(
        e.to_string()
            .contains("unknown key `dly` (did you mean `delay`?)"),
        "{e}"
    );

    let put = |body: &[u8]| server.raw("PUT", "/api/v1/links/wan", &[], body);
    for (body, want) in [
        (&b"{not json"[..], "the body is not a valid request"),
        (b"", "the body is not a valid request"),
        (br#"{"bth": "delay=1ms"}"#, "unknown field `bth`"),
        (br#"{"both": 5}"#, "expected a link spec"),
        (
            br#"{"both": {"delay": "5 parsecs"}}"#,
            "unknown unit `parsecs`",
        ),
        (b"{}", "nothing to change"),
    ] {
        let (status, head, text) = put(body);
        assert_eq!(status, 400, "{text}");
        assert!(head.contains("content-type: application/json"), "{head}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let msg = v["error"].as_str().unwrap();
        assert!(msg.contains(want), "`{want}` not in `{msg}`");
    }

    let big = format!(r#"{{"both": "{}"}}"#, " ".repeat(BODY_LIMIT + 1));
    let (status, _, text) = put(big.as_bytes());
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("larger than 65536 bytes"), "{text}");

    assert_eq!(server.links.params("wan"), before);
    assert_eq!(
        server.links.sets.load(Ordering::SeqCst),
        0,
        "set must not have been called"
    );

    let e = client
        .set_link("nope", Some("delay=1ms"), None, None)
        .unwrap_err();
    assert_eq!(api_status(&e), 404);

    // A link that refuses the change: reported, and nothing changed.
    server.links.refuse.store(true, Ordering::SeqCst);
    let e = client
        .set_link("wan", Some("delay=1ms"), None, None)
        .unwrap_err();
    assert_eq!(api_status(&e), 500);
    assert!(
        e.to_string()
            .contains("link `wan` refused the change: the bridge is stopping"),
        "{e}"
    );
    assert_eq!(server.links.params("wan"), before);
}

#[test]
fn unknown_routes_and_methods_answer_json() {
    let server = Server::start(None);
    let (status, _, body) = server.raw("GET", "/api/v2/nothing", &[], b"");
    assert_eq!(status, 404);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("no route GET /api/v2/nothing"),
        "{body}"
    );
    let (status, _, body) = server.raw("POST", "/api/v1/links/wan", &[], b"{}");
    assert_eq!(status, 405);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("POST is not allowed"),
        "{body}"
    );
}

#[test]
fn a_token_guards_everything_but_healthz() {
    let server = Server::start(Some("s3cret"));
    server.client(None).health().unwrap();
    for token in [None, Some("wrong"), Some("s3cre"), Some("s3cret2")] {
        let c = server.client(token);
        let e = c.links().unwrap_err();
        assert!(
            matches!(e, ClientError::Unauthorized { .. }),
            "{token:?}: {e}"
        );
        assert!(e.to_string().contains("--token or HEADWAY_TOKEN"), "{e}");
        assert!(matches!(
            c.metrics_text(),
            Err(ClientError::Unauthorized { .. })
        ));
        assert!(matches!(
            c.set_link("wan", Some("delay=1ms"), None, None),
            Err(ClientError::Unauthorized { .. })
        ));
    }
    assert_eq!(server.links.sets.load(Ordering::SeqCst), 0);
    let (status, head, _) = server.raw(
        "GET",
        "/api/v1/links",
        &["authorization: Basic s3cret"],
        b"",
    );
    assert_eq!(status, 401);
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    // Unknown routes do not reveal themselves without the token either.
    let (status, _, _) = server.raw("GET", "/nothing", &[], b"");
    assert_eq!(status, 401);

    let good = server.client(Some("s3cret"));
    assert_eq!(good.links().unwrap().len(), 2);
    assert!(good.metrics_text().unwrap().contains("status=\"401\""));
    good.set_link("wan", Some("delay=1ms"), None, None).unwrap();
    assert_eq!(server.links.params("wan").0.delay, Duration::from_millis(1));
}

#[test]
fn an_unreachable_api_says_so() {
    // A port held bound without listening, so nothing listens there and no other test's
    // listener can take it while this one runs.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = held.local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let e = Client::new(url.clone(), None).health().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "cannot reach the admin API at {url}: connection refused (is `headway run` running?)"
        )
    );
}

/// `headway ctl` as the binary embeds it.
#[derive(Parser)]
struct Ctl {
    #[command(flatten)]
    ctl: CtlArgs,
}

fn ctl(server: &Server, args: &[&str]) -> anyhow::Result<String> {
    let url = server.url();
    let mut argv = vec!["ctl", "--admin", url.as_str()];
    argv.extend_from_slice(args);
    let args = Ctl::try_parse_from(argv)?.ctl;
    let mut out = Vec::new();
    headway_admin::run_to(args, &mut out)?;
    Ok(String::from_utf8(out)?)
}

#[test]
fn ctl_prints_tables_and_changes_links() {
    let server = Server::start(Some("t0ken"));
    let status = ctl(&server, &["--token", "t0ken", "status"]).unwrap();
    assert_eq!(
        status,
        format!("{}: ok, 2 link(s): wan, lan\n", server.url())
    );

    let links = ctl(&server, &["--token", "t0ken", "links"]).unwrap();
    let rows: Vec<Vec<&str>> = links
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 5, "{links}");
    assert_eq!(
        rows[1],
        ["wan", "a_to_b", "1.5mbit", "150ms", "0", "1%", "100p", "10", "2", "1"]
    );
    assert_eq!(
        rows[4],
        [
            "lan",
            "b_to_a",
            "unlimited",
            "0",
            "0",
            "none",
            "1000p",
            "-",
            "-",
            "-"
        ]
    );

    // The JSON carries every counter (the table only some), for scripts and the lab's benches.
    let json = ctl(&server, &["--token", "t0ken", "links", "--json"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let links = v["links"].as_array().unwrap();
    assert_eq!(links.len(), 2, "{json}");
    assert_eq!(links[0]["name"], "wan");
    assert_eq!(links[0]["stats"]["a_to_b"]["passed"], 10);
    assert_eq!(links[0]["stats"]["a_to_b"]["lost"], 2);
    assert_eq!(links[1]["name"], "lan");

    let out = ctl(
        &server,
        &[
            "--token",
            "t0ken",
            "link",
            "set",
            "wan",
            "--dir",
            "a_to_b",
            "delay=30ms",
            "loss=0%",
        ],
    )
    .unwrap();
    assert!(out.starts_with("link wan (wan0 <-> wan1)\n"), "{out}");
    assert!(
        out.contains("  a_to_b: rate=1.5mbit overhead=0 delay=30ms "),
        "{out}"
    );
    assert!(
        out.contains("  b_to_a: rate=1.5mbit overhead=0 delay=150ms "),
        "{out}"
    );
    let (a, b) = server.links.params("wan");
    assert_eq!(
        (a.delay, b.delay),
        (Duration::from_millis(30), Duration::from_millis(150))
    );

    let show = ctl(&server, &["--token", "t0ken", "link", "show", "wan"]).unwrap();
    assert!(show.contains("delay=30ms"), "{show}");

    let metrics = ctl(&server, &["--token", "t0ken", "metrics"]).unwrap();
    assert!(metrics.contains("headway_test_frames_total 7"), "{metrics}");

    // A typo is reported before anything is sent.
    let e = ctl(
        &server,
        &["--token", "t0ken", "link", "set", "wan", "dly=5ms"],
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("did you mean `delay`?"), "{e:#}");
    let e = ctl(&server, &["--token", "t0ken", "link", "show", "nope"]).unwrap_err();
    assert!(e.to_string().contains("no link named `nope`"), "{e}");
    let e = ctl(&server, &["links"]).unwrap_err();
    assert!(e.to_string().contains("refused the request"), "{e}");
    assert!(
        ctl(&server, &["link", "set", "wan"]).is_err(),
        "a spec is required"
    );
}

/// A fixed WAN-optimizer snapshot.
struct FakeWanopt;

impl WanoptControl for FakeWanopt {
    fn stats(&self) -> WanoptStats {
        WanoptStats {
            groups: vec![WanoptGroup {
                peer: "dc".into(),
                class: "dedup-memory".into(),
                lan_out: 4096,
                wan_in: 1024,
                flows_optimized: 3,
                ..WanoptGroup::default()
            }],
            ..WanoptStats::default()
        }
    }
}

#[test]
fn wanopt_stats_answer_404_without_an_appliance_and_json_table_and_metrics_with_one() {
    let none = Server::start(None);
    let e = none.client(None).wanopt_stats().unwrap_err();
    assert_eq!(api_status(&e), 404);
    assert!(e.to_string().contains("add a [wanopt] section"), "{e}");
    let err = ctl(&none, &["wanopt", "stats"]).unwrap_err().to_string();
    assert!(err.contains("no WAN optimizer runs"), "{err}");

    let server = Server::start_with(None, Some(Arc::new(FakeWanopt)));
    let s = server.client(None).wanopt_stats().unwrap();
    assert_eq!(s.groups[0].flows_optimized, 3);
    let (status, _, body) = server.raw("GET", "/wanopt/stats", &[], b"");
    assert_eq!(status, 200, "{body}");
    let json = ctl(&server, &["wanopt", "stats", "--json"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["groups"][0]["lan_out"], 4096);
    let table = ctl(&server, &["wanopt", "stats"]).unwrap();
    assert!(
        table.contains("dedup-memory") && table.contains("75.0%"),
        "{table}"
    );
    let metrics = server.client(None).metrics_text().unwrap();
    assert!(
        metrics.contains(
            "headway_wanopt_flows_total{peer=\"dc\",class=\"dedup-memory\",outcome=\"optimized\",reason=\"\"} 3"
        ),
        "{metrics}"
    );
    assert!(!none
        .client(None)
        .metrics_text()
        .unwrap()
        .contains("headway_wanopt_"));
}
