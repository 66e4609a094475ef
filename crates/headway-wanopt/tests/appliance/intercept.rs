//! Transparent interception through real network namespaces (needs root; skipped otherwise):
//!
//! ```text
//!  hwt-wo-c-PID ── hwt-wo-b-PID ══ QUIC ══ hwt-wo-d-PID ── hwt-wo-s-PID
//!  client          branch appliance        dc appliance    echo server
//!  10.71.1.2       .1.1 (toc) │ .2.1       .2.2 │ .3.1     10.71.3.2
//!                  intercepts TCP arriving on toc
//! ```
//!
//! The client connects to the server's own address; nothing on the client names an appliance.

use std::future::Future;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use headway_tunnel::{Identity, Options, ServiceClass};
use headway_wanopt::{Appliance, ApplianceConfig, InterceptConfig, InterceptRule};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::{addr, data, exchange, key, peer, sha, Kind};

const SERVER: &str = "10.71.3.2";
/// Intercepted (dedup-memory).
const OPTIMIZED_PORT: u16 = 5001;
/// Matched by a pass-through rule: routed on, not intercepted.
const PASS_PORT: u16 = 5002;
/// Matched by no rule, but sent to the listener by an extra nftables rule (as an operator's
/// broader rules would): connected directly, counted as `no_rule`.
const NO_RULE_PORT: u16 = 5003;

/// Whether we run with effective uid 0 (read from /proc, no `unsafe` needed).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Runs a command, panicking with its stderr if it fails; returns its stdout.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ip netns exec NS program args…`.
fn exec(ns: &str, program: &str, args: &[&str]) -> String {
    let mut all = vec!["netns", "exec", ns, program];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// The test's namespaces; dropping the guard deletes them (also when the test panics).
struct Namespaces {
    names: Vec<String>,
}

impl Namespaces {
    /// Creates `hwt-wo-{role}-{pid}` for each role, after deleting namespaces that earlier,
    /// killed runs of this test left behind (their pid is gone).
    fn create(roles: &[&str]) -> Self {
        if let Ok(dir) = std::fs::read_dir("/run/netns") {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let stale = name.strip_prefix("hwt-wo-").is_some_and(|rest| {
                    rest.rsplit('-')
                        .next()
                        .and_then(|p| p.parse::<u32>().ok())
                        .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
                });
                if stale {
                    let _ = Command::new("ip").args(["netns", "del", &name]).status();
                }
            }
        }
        let mut ns = Namespaces { names: Vec::new() };
        for role in roles {
            let name = format!("hwt-wo-{role}-{}", std::process::id());
            run("ip", &["netns", "add", &name]);
            ns.names.push(name);
        }
        ns
    }

    fn name(&self, i: usize) -> &str {
        &self.names[i]
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Joins `a` in namespace `na` and `b` in `nb` with a veth pair; addresses with prefix.
fn link(na: &str, a: &str, a_addr: &str, nb: &str, b: &str, b_addr: &str) {
    run(
        "ip",
        &[
            "link", "add", a, "netns", na, "type", "veth", "peer", "name", b, "netns", nb,
        ],
    );
    for (ns, dev, ip) in [(na, a, a_addr), (nb, b, b_addr)] {
        exec(ns, "ip", &["addr", "add", ip, "dev", dev]);
        exec(ns, "ip", &["link", "set", dev, "up"]);
    }
}

/// Runs `f`'s future to completion on a new thread inside namespace `ns`, in a tokio runtime
/// built there (so its worker threads, and the sockets they create, are in `ns` too).
fn spawn_in<T, F>(ns: &str, f: impl FnOnce() -> F + Send + 'static) -> std::thread::JoinHandle<T>
where
    T: Send + 'static,
    F: Future<Output = T> + 'static,
{
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        headway_io::netns::enter(&ns).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(f())
    })
}

/// An echo server on `port` of `ip`, until `stop` fires or is dropped.
async fn echo_until(
    ip: &str,
    ports: &[u16],
    ready: std::sync::mpsc::Sender<()>,
    stop: oneshot::Receiver<()>,
) {
    for &port in ports {
        let l = TcpListener::bind(SocketAddr::new(ip.parse().unwrap(), port))
            .await
            .unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    if tokio::io::copy(&mut r, &mut w).await.is_ok() {
                        let _ = tokio::io::AsyncWriteExt::shutdown(&mut w).await;
                    }
                });
            }
        });
    }
    ready.send(()).unwrap();
    let _ = stop.await;
}

#[test]
fn a_client_talking_to_the_server_is_intercepted_and_optimized() {
    if !is_root() || Command::new("nft").arg("--version").output().is_err() {
        eprintln!("SKIPPED: transparent interception needs root and nft");
        return;
    }
    let ns = Namespaces::create(&["c", "b", "d", "s"]);
    let (c, b, d, s) = (
        ns.name(0).to_owned(),
        ns.name(1).to_owned(),
        ns.name(2).to_owned(),
        ns.name(3).to_owned(),
    );
    link(&c, "tob", "10.71.1.2/24", &b, "toc", "10.71.1.1/24");
    link(&b, "tod", "10.71.2.1/24", &d, "tob", "10.71.2.2/24");
    link(&d, "tos", "10.71.3.1/24", &s, "tod", "10.71.3.2/24");
    for n in [&c, &b, &d, &s] {
        exec(n, "ip", &["link", "set", "lo", "up"]);
    }
    exec(&c, "ip", &["route", "add", "default", "via", "10.71.1.1"]);
    exec(&s, "ip", &["route", "add", "default", "via", "10.71.3.1"]);
    exec(
        &b,
        "ip",
        &["route", "add", "10.71.3.0/24", "via", "10.71.2.2"],
    );
    exec(
        &d,
        "ip",
        &["route", "add", "10.71.1.0/24", "via", "10.71.2.1"],
    );
    for n in [&b, &d] {
        exec(n, "sh", &["-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]);
    }

    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (stop_s, stop) = oneshot::channel();
    let server = spawn_in(&s, move || {
        echo_until(
            SERVER,
            &[OPTIMIZED_PORT, PASS_PORT, NO_RULE_PORT],
            ready_tx,
            stop,
        )
    });
    ready.recv().expect("the server did not start");

    let id_b = Identity::generate().unwrap();
    let id_d = Identity::generate().unwrap();
    let cfg = |identity: Identity, listen: &str, peer_cfg| ApplianceConfig {
        identity,
        tunnel_listen: addr(listen),
        peers: vec![peer_cfg],
        tunnel_options: Options::default(),
        dedup_key: key(),
        memory_store_bytes: 64 << 20,
        retry_after: Duration::from_secs(600),
        services: vec![],
        disk_store: None,
        intercept: None,
    };
    let dc_cfg = cfg(
        id_d.clone(),
        "10.71.2.2:4433",
        peer("branch", addr("10.71.2.1:9"), &id_b),
    );
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (stop_d, stop) = oneshot::channel::<()>();
    let dc = spawn_in(&d, move || async move {
        let a = Appliance::start(dc_cfg).await.unwrap();
        ready_tx.send(()).unwrap();
        let _ = stop.await;
        drop(a);
    });
    ready.recv().expect("the dc appliance did not start");

    let server_net = (SERVER.parse().unwrap(), 24);
    let mut branch_cfg = cfg(
        id_b,
        "10.71.2.1:0",
        peer("dc", addr("10.71.2.2:4433"), &id_d),
    );
    branch_cfg.intercept = Some(InterceptConfig {
        listen: addr("0.0.0.0:0"),
        interfaces: vec!["toc".into()],
        rules: vec![
            InterceptRule {
                destinations: vec![server_net],
                ports: vec![(PASS_PORT, PASS_PORT)],
                peer: "dc".into(),
                class: ServiceClass::PassThrough,
            },
            InterceptRule {
                destinations: vec![server_net],
                ports: vec![(OPTIMIZED_PORT, OPTIMIZED_PORT)],
                peer: "dc".into(),
                class: ServiceClass::DedupMemory,
            },
        ],
    });
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (stop_b, stop) = oneshot::channel::<()>();
    let branch = spawn_in(&b, move || async move {
        let a = Appliance::start(branch_cfg).await.unwrap();
        ready_tx.send(a.intercept_addr()).unwrap();
        let _ = stop.await;
        let stats = a.stats();
        drop(a);
        // This thread is in the branch's namespace: so are these commands.
        (stats, run("nft", &["list", "tables"]), run("ip", &["rule"]))
    });
    let listen = ready.recv().expect("the branch appliance did not start");
    eprintln!("branch intercepts to {listen:?}");
    assert_ne!(listen.unwrap().port(), 0);
    let tables = exec(&b, "nft", &["list", "tables"]);
    assert!(tables.contains("headway_wanopt"), "{tables}");
    assert!(exec(&b, "ip", &["rule"]).contains("fwmark 0x4857 lookup 4857"));
    let port = listen.unwrap().port().to_string();
    let extra = format!(
        "add rule ip headway_wanopt prerouting iifname \"toc\" meta l4proto tcp \
         tcp dport {NO_RULE_PORT} tproxy to :{port} meta mark set 0x4857 accept"
    );
    exec(&b, "nft", &[&extra]);

    let doc = data(Kind::Doc, 4 << 20, 41);
    let html = data(Kind::Html, 1 << 20, 42);
    let client = {
        let (doc, html) = (doc.clone(), html.clone());
        let pdf = html.clone();
        spawn_in(&c, move || async move {
            let hang = Duration::from_secs(120);
            let to = |port| SocketAddr::new(SERVER.parse().unwrap(), port);
            let optimized = tokio::time::timeout(hang, exchange(to(OPTIMIZED_PORT), &doc))
                .await
                .expect("the intercepted exchange hung");
            let passed = tokio::time::timeout(hang, exchange(to(PASS_PORT), &html))
                .await
                .expect("the pass-through exchange hung");
            let direct = tokio::time::timeout(hang, exchange(to(NO_RULE_PORT), &pdf))
                .await
                .expect("the no-rule exchange hung");
            (optimized, passed, direct)
        })
    };
    let (optimized, passed, direct) = client.join().expect("the client failed");
    assert_eq!(sha(&optimized), sha(&doc));
    assert_eq!(sha(&passed), sha(&html));
    assert_eq!(sha(&direct), sha(&html));

    stop_b.send(()).unwrap();
    let (stats, tables, rules) = branch.join().expect("the branch appliance failed");
    let _ = stop_d.send(());
    dc.join().expect("the dc appliance failed");
    let _ = stop_s.send(());
    server.join().expect("the server failed");

    eprintln!("branch stats: {:?}", stats.groups);
    let g = stats
        .groups
        .iter()
        .find(|g| g.peer == "dc" && g.class == "dedup-memory")
        .expect("no dedup-memory group for the dc peer");
    assert_eq!(g.flows_optimized, 1);
    assert_eq!(g.lan_in, doc.len() as u64);
    assert_eq!(g.lan_out, doc.len() as u64);
    assert!(g.flows_passed_through.is_empty(), "{g:?}");
    // The pass-through rule's flow was routed on by the kernel, never seen by the appliance;
    // the flow the extra rule sent to the listener matched no rule and went direct.
    let t = stats.total();
    assert_eq!(t.flows_optimized, 1);
    assert_eq!(t.flows_passed_through.len(), 1, "{t:?}");
    assert_eq!(t.flows_passed_through.get("no_rule"), Some(&1));
    let none = stats.groups.iter().find(|g| g.peer == "-").unwrap();
    assert_eq!(
        (none.class, none.lan_in),
        ("pass-through", html.len() as u64)
    );
    assert_eq!(t.lan_in, (doc.len() + html.len()) as u64);
    // Dropping the appliance removed the table, the rule (and the route).
    assert!(!tables.contains("headway_wanopt"), "{tables}");
    assert!(!rules.contains("0x4857"), "{rules}");
    let route = exec(&b, "ip", &["route", "show", "table", "all"]);
    assert!(!route.contains("table 4857"), "{route}");
}

/// An appliance with only a transparent listener on loopback, its rules not installed.
fn loopback_intercept(rules: Vec<InterceptRule>, interfaces: Vec<String>) -> ApplianceConfig {
    let id = Identity::generate().unwrap();
    ApplianceConfig {
        identity: id.clone(),
        tunnel_listen: addr("127.0.0.1:0"),
        peers: vec![peer("dc", addr("127.0.0.1:9"), &id)],
        tunnel_options: Options::default(),
        dedup_key: key(),
        memory_store_bytes: 1 << 20,
        retry_after: Duration::from_secs(1),
        services: vec![],
        disk_store: None,
        intercept: Some(InterceptConfig {
            listen: addr("127.0.0.1:0"),
            interfaces,
            rules,
        }),
    }
}

fn any_rule(peer: &str, destinations: Vec<(std::net::IpAddr, u8)>) -> InterceptRule {
    InterceptRule {
        destinations,
        ports: vec![],
        peer: peer.into(),
        class: ServiceClass::DedupMemory,
    }
}

#[tokio::test]
async fn interception_start_errors_say_what_is_wrong() {
    let err = Appliance::start(loopback_intercept(vec![any_rule("nobody", vec![])], vec![]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "interception: rule 0: unknown peer \"nobody\""
    );
    let v6 = vec![("2001:db8::".parse().unwrap(), 32)];
    let r = Appliance::start(loopback_intercept(
        vec![any_rule("dc", v6)],
        vec!["lo".into()],
    ))
    .await;
    let err = r.unwrap_err().to_string();
    eprintln!("{err}");
    if is_root() {
        assert!(err.contains("IPv4 only"), "{err}");
    } else {
        assert!(
            err.starts_with("interception: transparent listener on"),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_connection_to_the_listener_is_refused_not_looped() {
    if !is_root() {
        eprintln!("SKIPPED: a transparent listener needs root");
        return;
    }
    // No interfaces: nothing is installed, the listener just runs (the operator's mode).
    let a = Appliance::start(loopback_intercept(vec![any_rule("dc", vec![])], vec![]))
        .await
        .unwrap();
    let at = a.intercept_addr().unwrap();
    // On loopback the reset can arrive before `connect` returns; either way: no data.
    if let Ok(mut c) = tokio::net::TcpStream::connect(at).await {
        let mut sink = Vec::new();
        let r = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::io::AsyncReadExt::read_to_end(&mut c, &mut sink),
        )
        .await
        .expect("the connection was neither refused nor closed");
        assert!(r.is_err() || sink.is_empty(), "{r:?}");
    }
    let s = a.stats().total();
    assert_eq!((s.flows_optimized, s.lan_in), (0, 0));
    assert!(s.flows_passed_through.is_empty());
}
