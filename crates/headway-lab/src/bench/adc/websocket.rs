//! `headway bench adc --websocket`: WebSocket traffic through HAProxy, NGINX and Headway side by
//! side on loopback, in front of one `headway origin` (its `/ws/echo` endpoint), and the origin
//! directly as the reference.
//!
//! Two tests, each with the same client (tokio-tungstenite in this process, `--threads`
//! threads) against every target, rows taking turns in a rotating order like the main matrix:
//!
//! - **echo** at each `--sizes` (default 128 B, 8 KiB, 64 KiB): `--connections` WebSockets
//!   are opened, then for `--seconds` each sends a binary message and waits for it to come back
//!   (one in flight per connection). Messages/s counts round trips whose echo matched; CPU is
//!   the proxy's user + system time during that phase (`/proc/PID/stat`), per 100,000 round
//!   trips.
//! - **open**: `--connections` clients each repeat a whole session — TCP connect, the opening
//!   handshake, one 128 B round trip, the closing handshake — for `--seconds`: sessions/s and
//!   CPU per 100,000 sessions.
//!
//! Configs: HAProxy `mode http` (it switches to a tunnel after a 101; `timeout tunnel 1h`),
//! NGINX with `Upgrade` and `Connection` passed on (`map $http_upgrade`, HTTP/1.1 to the
//! origin), Headway's defaults; the same worker counts as the main matrix. Every process started
//! here is stopped at the end (on error and Ctrl-C too); configs go to `--out/adc-configs/`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt as _, StreamExt as _};
use headway_core::SystemClock;
use tokio_tungstenite::tungstenite::Message;

use super::load::Outcome;
use super::procs::{self, TempDir};
use super::{
    command_line, config, entry_cell, fmt_cpu, host_line, is_interrupt, launch, load_average,
    size_label, start_origin, status_lines, thousands, AdcArgs, Ends, Entry, Instance, Sample,
    Target, Versions,
};
use crate::interrupt;

/// HAProxy's config: one HTTP listener in front of the origin; upgraded connections are
/// tunnels with their own idle timeout.
pub fn haproxy(origin: SocketAddr, workers: u32, listen: SocketAddr, maxconn: u32) -> String {
    format!(
        "# headway bench adc --websocket: HAProxy in front of `headway origin`.\n\
         global\n    nbthread {workers}\n    maxconn {maxconn}\n\n\
         defaults\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n    \
         timeout tunnel 1h\n\n\
         frontend l7\n    mode http\n    bind {listen}\n    default_backend origin\n\n\
         backend origin\n    mode http\n    http-reuse always\n{}    server origin {origin}\n",
        config::haproxy_forwarding("http")
    )
}

/// NGINX's config: the main matrix's `http {}` with the upgrade fields passed on (NGINX drops
/// hop-by-hop fields unless told), no stream module.
pub fn nginx(
    origin: SocketAddr,
    workers: u32,
    listen: SocketAddr,
    maxconn: u32,
    dir: &Path,
) -> String {
    config::nginx_http(origin, workers, listen, maxconn, dir)
        .replacen(
            "http {\n",
            "http {\n    map $http_upgrade $connection_upgrade {\n        default upgrade;\n        \
             '' \"\";\n    }\n",
            1,
        )
        .replacen(
            "proxy_set_header Connection \"\";",
            "proxy_set_header Upgrade $http_upgrade;\n            \
             proxy_set_header Connection $connection_upgrade;\n            \
             proxy_read_timeout 1h;",
            1,
        )
}

/// Headway's config: one `http` virtual server with its defaults (upgrades on).
pub fn headway(origin: SocketAddr, workers: u32, listen: SocketAddr, admin: SocketAddr) -> String {
    format!(
        "# headway bench adc --websocket: Headway in front of `headway origin`.\n\
         [admin]\nlisten = \"{admin}\"\n\n[runtime]\nworkers = {workers}\n\n\
         [[server_group]]\nname = \"origin\"\n[[server_group.server]]\naddress = \"{origin}\"\n\n\
         [[virtual_server]]\nname = \"ws\"\nkind = \"http\"\nlisten = \"{listen}\"\n\
         group = \"origin\"\n"
    )
}

/// A test of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Test {
    /// Round trips of messages of this many bytes on open WebSockets.
    Echo(u64),
    /// Whole sessions: connect, handshake, one round trip, close.
    Open,
}

impl Test {
    fn label(self) -> String {
        match self {
            Test::Echo(size) => format!("echo {}", size_label(size)),
            Test::Open => "open (connect, handshake, 128 B round trip, close)".into(),
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Test::Echo(_) => "messages",
            Test::Open => "sessions",
        }
    }
}

/// Runs the WebSocket benchmark.
pub fn run(args: &AdcArgs) -> Result<()> {
    let seconds = args.seconds_or(2, 3).max(1);
    let repeats = args.repeats_or(1, 3).max(1);
    let sizes: Vec<u64> = if args.sizes.is_empty() {
        vec![128, 8 << 10, 64 << 10]
    } else {
        args.sizes.iter().map(|s| s.bytes()).collect()
    };
    let mut tests: Vec<Test> = sizes.iter().map(|&s| Test::Echo(s)).collect();
    tests.push(Test::Open);
    let versions = Versions::probe();
    let load_at_start = load_average();
    let tmp = TempDir::new("headway-bench-websocket")?;
    let ticks = procs::clock_ticks_per_second()?;
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();
    let mut port = procs::port_source(6)?;
    let workers = args.workers.max(1);
    let maxconn = config::max_connections(args.connections);

    let origin = port();
    let mut instances: Vec<Instance> = vec![start_origin(&exe, origin, args, tmp.path())?];
    let mut configs: Vec<(String, String)> = Vec::new();
    for target in [Target::Haproxy, Target::Nginx, Target::Headway] {
        if !args.proxies.contains(&target) {
            continue;
        }
        let listen = port();
        let (file, text) = match target {
            Target::Haproxy => (
                "haproxy-websocket.cfg",
                haproxy(origin, workers, listen, maxconn),
            ),
            Target::Nginx => (
                "nginx-websocket.conf",
                nginx(origin, workers, listen, maxconn, tmp.path()),
            ),
            _ => (
                "headway-websocket.toml",
                headway(origin, workers, listen, port()),
            ),
        };
        let ends = Ends {
            l7: listen,
            l4: listen,
            h2: None,
            h2_both: None,
        };
        let inst = launch(target, ends, &[listen], file, &text, tmp.path(), &exe)?;
        if let Some(f) = &inst.failure {
            eprintln!("{}: {f}", target.key());
        }
        configs.push((file.to_string(), text));
        instances.push(inst);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1) as usize)
        .enable_all()
        .build()
        .context("the load client's runtime")?;
    let connections = args.connections.max(1);
    let running = instances.iter().filter(|i| i.proc.is_some()).count();
    eprintln!(
        "adc --websocket: {} tests × {running} targets × {repeats} runs of {seconds} s: about {} min",
        tests.len(),
        ((tests.len() * running * repeats as usize) as f64 * (seconds as f64 + 0.5) / 60.0).ceil()
    );
    let mut results: std::collections::BTreeMap<(Test, Target), Entry> = Default::default();
    for &test in &tests {
        for round in 0..repeats as usize {
            for k in 0..instances.len() {
                interrupt::check()?;
                let inst = &instances[(k + round) % instances.len()];
                let Some(proc) = inst.proc.as_ref() else {
                    continue;
                };
                let (addr, pid) = (inst.ends.l7, proc.pid());
                let window = Duration::from_secs(u64::from(seconds));
                let sample = rt.block_on(async {
                    match test {
                        Test::Echo(size) => echo(addr, connections, size, window, pid).await,
                        Test::Open => open(addr, connections, window, pid).await,
                    }
                });
                let entry = results.entry((test, inst.target)).or_default();
                match sample.map(|(o, t)| Sample {
                    outcome: o,
                    cpu_seconds: t as f64 / ticks as f64,
                }) {
                    Ok(s) => {
                        eprintln!(
                            "  {} · {} · run {}: {:.0} {}/s, {} CPU-s/100k",
                            test.label(),
                            inst.target.key(),
                            round + 1,
                            s.outcome.good_per_second(),
                            test.unit(),
                            s.cpu_per_100k().map_or("–".into(), fmt_cpu)
                        );
                        entry.samples.push(s);
                    }
                    Err(e) if is_interrupt(&e) => return Err(e),
                    Err(e) => {
                        eprintln!("  {} · {}: {e:#}", test.label(), inst.target.key());
                        entry.errors.push(format!("{e:#}"));
                    }
                }
            }
        }
    }
    let status = status_lines(&instances);
    let targets: Vec<Target> = instances.iter().map(|i| i.target).collect();
    drop(instances);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## WebSockets on loopback: HAProxy, NGINX and Headway in front of one `headway origin`\n\n\
         Command: `{}`\n\nHost: {}; load average (1 / 5 / 15 min) {} at the start, {} at the end. \
         Versions: {}.\n\nSetup: the origin's `/ws/echo` sends every message back. HAProxy \
         `mode http` (`timeout tunnel 1h`), NGINX with `Upgrade`/`Connection` passed on, Headway \
         with its defaults; {workers} workers each. Client: tokio-tungstenite in the bench \
         process, {} threads, {connections} connections; echo: one message in flight per \
         connection, binary, checked on return; open: each connection slot repeats connect, \
         handshake, a 128 B round trip and the closing handshake. {seconds} s per run, the \
         median of {repeats} run(s), targets taking turns in a rotating order.\n",
        command_line(),
        host_line(),
        load_at_start,
        load_average(),
        versions.line(),
        args.threads.max(1),
    );
    for s in &status {
        let _ = writeln!(md, "- {s}");
    }
    md += &render(&tests, &targets, &results);
    let csv = render_csv(&tests, &targets, &results);
    println!("{md}");
    super::write_report(
        &args.out,
        &[("websocket.md", &md), ("websocket.csv", &csv)],
        "adc-configs",
        &configs,
    )
}

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// A WebSocket to the echo endpoint through `addr`.
async fn connect(addr: SocketAddr) -> Result<Ws> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    tcp.set_nodelay(true)?;
    let (ws, resp) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::client_async(format!("ws://{addr}/ws/echo"), tcp),
    )
    .await
    .context("the opening handshake timed out")?
    .context("the opening handshake failed")?;
    if resp.status() != 101 {
        bail!("the handshake was answered {}", resp.status());
    }
    Ok(ws)
}

/// Sends `payload` and waits (bounded) for it to come back; whether it did, unchanged.
async fn round_trip(ws: &mut Ws, payload: &bytes::Bytes) -> Result<bool> {
    ws.send(Message::Binary(payload.clone())).await?;
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .context("no echo within 10 s")?
            .context("the connection closed")??;
        match m {
            Message::Binary(b) => return Ok(b == *payload),
            Message::Ping(_) | Message::Pong(_) => {}
            other => bail!("unexpected message {other:?}"),
        }
    }
}

/// Counters the client tasks of one run share, and their signal to stop.
#[derive(Default)]
struct Tally {
    stop: AtomicBool,
    good: AtomicU64,
    bad: AtomicU64,
    errors: AtomicU64,
    latency_us: AtomicU64,
}

impl Tally {
    fn outcome(&self, seconds: f64) -> Outcome {
        let good = self.good.load(Relaxed);
        let bad = self.bad.load(Relaxed);
        Outcome {
            responses: good + bad,
            good,
            seconds,
            socket_errors: self.errors.load(Relaxed),
            latency_mean_ms: (good > 0)
                .then(|| self.latency_us.load(Relaxed) as f64 / good as f64 / 1e3),
            latency_p99_ms: None,
        }
    }

    fn record(&self, ok: bool, started: std::time::Instant) {
        if ok {
            self.good.fetch_add(1, Relaxed);
            let us = SystemClock::now()
                .saturating_duration_since(started)
                .as_micros();
            self.latency_us.fetch_add(us as u64, Relaxed);
        } else {
            self.bad.fetch_add(1, Relaxed);
        }
    }
}

/// The echo test: round trips of `size`-byte messages on `connections` open WebSockets for
/// `window`; the outcome and the target's CPU ticks during the round trips.
async fn echo(
    addr: SocketAddr,
    connections: u32,
    size: u64,
    window: Duration,
    pid: i32,
) -> Result<(Outcome, u64)> {
    let mut sockets = Vec::new();
    for _ in 0..connections {
        sockets.push(connect(addr).await?);
    }
    let payload: bytes::Bytes = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    timed(window, pid, |run| {
        sockets
            .into_iter()
            .map(|mut ws| {
                let (run, payload) = (run.clone(), payload.clone());
                tokio::spawn(async move {
                    while !run.stop.load(Relaxed) {
                        let t = SystemClock::now();
                        match round_trip(&mut ws, &payload).await {
                            Ok(ok) => run.record(ok, t),
                            Err(_) => {
                                run.errors.fetch_add(1, Relaxed);
                                return;
                            }
                        }
                    }
                    let _ = ws.close(None).await;
                })
            })
            .collect()
    })
    .await
}

/// The open test: `connections` clients repeating whole sessions for `window`.
async fn open(
    addr: SocketAddr,
    connections: u32,
    window: Duration,
    pid: i32,
) -> Result<(Outcome, u64)> {
    let payload = bytes::Bytes::from(vec![0x5a; 128]);
    timed(window, pid, |run| {
        (0..connections)
            .map(|_| {
                let (run, payload) = (run.clone(), payload.clone());
                tokio::spawn(async move {
                    while !run.stop.load(Relaxed) {
                        let t = SystemClock::now();
                        let session = async {
                            let mut ws = connect(addr).await?;
                            let ok = round_trip(&mut ws, &payload).await?;
                            ws.close(None).await?;
                            // The close handshake: the server's close frame, then the end.
                            while let Some(m) = ws.next().await {
                                m?;
                            }
                            anyhow::Ok(ok)
                        };
                        match session.await {
                            Ok(ok) => run.record(ok, t),
                            Err(_) => {
                                run.errors.fetch_add(1, Relaxed);
                            }
                        }
                    }
                })
            })
            .collect()
    })
    .await
}

/// Runs the client tasks `spawn` starts (each repeats until the run's `stop`) for `window`:
/// what they counted and the target's CPU ticks meanwhile.
async fn timed(
    window: Duration,
    pid: i32,
    spawn: impl FnOnce(&Arc<Tally>) -> Vec<tokio::task::JoinHandle<()>>,
) -> Result<(Outcome, u64)> {
    let run = Arc::new(Tally::default());
    let before = procs::cpu_ticks(pid)?;
    let start = SystemClock::now();
    let tasks = spawn(&run);
    tokio::time::sleep(window).await;
    run.stop.store(true, Relaxed);
    let elapsed = SystemClock::now().saturating_duration_since(start);
    let after = procs::cpu_ticks(pid)?;
    for t in tasks {
        let _ = t.await;
    }
    let outcome = run.outcome(elapsed.as_secs_f64());
    if outcome.good == 0 {
        bail!("nothing came back ({} errors)", outcome.socket_errors);
    }
    Ok((outcome, after.saturating_sub(before)))
}

/// The Markdown tables: rate, CPU, mean round trip.
fn render(
    tests: &[Test],
    targets: &[Target],
    results: &std::collections::BTreeMap<(Test, Target), Entry>,
) -> String {
    let cols: String = targets
        .iter()
        .map(|t| format!(" {} |", t.label()))
        .collect();
    let rule: String = targets.iter().map(|_| "---:|").collect();
    let table =
        |title: &str, value: &dyn Fn(&Entry) -> Option<f64>, fmt: &dyn Fn(f64) -> String| {
            let mut s = format!("\n### {title}\n\n| test |{cols}\n|---|{rule}\n");
            for &test in tests {
                let _ = write!(s, "| {} |", test.label());
                let base = results.get(&(test, Target::Haproxy)).and_then(value);
                for &t in targets {
                    let text = match results.get(&(test, t)) {
                        Some(e) => entry_cell(e, t, base, value, fmt),
                        None => "failed".into(),
                    };
                    let _ = write!(s, " {text} |");
                }
                s.push('\n');
            }
            s
        };
    let mut md = table(
        "Round trips (echo) or sessions (open) per second (median; × HAProxy; higher is better)",
        &Entry::rps,
        &|v| thousands(v.round() as u64),
    );
    md += &table(
        "CPU-seconds per 100,000 round trips or sessions, the proxy's own (median; × HAProxy; \
         lower is better)",
        &Entry::cpu_per_100k,
        &fmt_cpu,
    );
    md += &table(
        "Mean time per round trip or session, ms (median of the runs' means)",
        &|e: &Entry| {
            let v: Vec<f64> = e
                .samples
                .iter()
                .filter_map(|s| s.outcome.latency_mean_ms)
                .collect();
            crate::bench::median(&v)
        },
        &|v| format!("{v:.2}"),
    );
    let _ = writeln!(
        md,
        "\nHow to read it: the origin row is the client talking to the origin directly (its CPU \
         column is the origin's), the ceiling of any proxy here. CPU is user + system time of \
         the proxy's processes during the measured phase (echo: after every connection is \
         open), per 100,000 round trips or sessions. † marks runs with errors (an echo that \
         did not match, a failed connection)."
    );
    md
}

/// The CSV: a row per run and a `median` row per test and target.
fn render_csv(
    tests: &[Test],
    targets: &[Target],
    results: &std::collections::BTreeMap<(Test, Target), Entry>,
) -> String {
    let mut csv = String::from(
        "test,size_bytes,target,run,good,errors,seconds,per_s,cpu_seconds,cpu_s_per_100k,mean_ms\n",
    );
    for &test in tests {
        let (name, size) = match test {
            Test::Echo(s) => ("echo", s),
            Test::Open => ("open", 128),
        };
        for &t in targets {
            let Some(e) = results.get(&(test, t)) else {
                continue;
            };
            for (i, s) in e.samples.iter().enumerate() {
                let _ = writeln!(
                    csv,
                    "{name},{size},{},{},{},{},{:.3},{:.1},{:.3},{},{}",
                    t.key(),
                    i + 1,
                    s.outcome.good,
                    s.outcome.socket_errors + s.outcome.bad_status(),
                    s.outcome.seconds,
                    s.outcome.good_per_second(),
                    s.cpu_seconds,
                    s.cpu_per_100k()
                        .map_or(String::new(), |v| format!("{v:.3}")),
                    s.outcome
                        .latency_mean_ms
                        .map_or(String::new(), |v| format!("{v:.3}")),
                );
            }
            let _ = writeln!(
                csv,
                "{name},{size},{},median,,,,{},,{},",
                t.key(),
                e.rps().map_or(String::new(), |v| format!("{v:.1}")),
                e.cpu_per_100k()
                    .map_or(String::new(), |v| format!("{v:.3}")),
            );
        }
    }
    csv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(p: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], p))
    }

    #[test]
    fn the_client_measures_echoes_and_sessions_against_a_real_origin() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = headway_origin::listen(addr(0)).await.unwrap();
            let origin = listener.local_addr().unwrap();
            let cfg = headway_origin::OriginConfig {
                listen: origin,
                ..headway_origin::OriginConfig::default()
            };
            tokio::spawn(headway_origin::serve(listener, cfg, std::future::pending()));
            let pid = std::process::id() as i32;
            let window = Duration::from_millis(300);
            let (o, _) = echo(origin, 4, 3000, window, pid).await.unwrap();
            assert!(o.good > 10 && o.responses == o.good, "{o:?}");
            assert_eq!(o.socket_errors, 0);
            assert!(o.latency_mean_ms.is_some_and(|ms| ms > 0.0));
            let (o, _) = open(origin, 2, window, pid).await.unwrap();
            assert!(o.good > 2 && o.responses == o.good, "{o:?}");
            assert_eq!(o.socket_errors, 0);
            // Nothing listening: an error, not a number.
            let dead = std::net::TcpListener::bind(addr(0))
                .unwrap()
                .local_addr()
                .unwrap();
            assert!(echo(dead, 1, 10, window, pid).await.is_err());
        });
    }

    #[test]
    fn the_peers_configs_pass_upgrades_on() {
        let h = haproxy(addr(1), 2, addr(2), 4096);
        assert!(
            h.contains("mode http") && h.contains("timeout tunnel 1h"),
            "{h}"
        );
        let n = nginx(addr(1), 2, addr(2), 4096, Path::new("/tmp/x"));
        assert!(n.contains("proxy_set_header Upgrade $http_upgrade;"), "{n}");
        assert!(
            n.contains("proxy_set_header Connection $connection_upgrade;"),
            "{n}"
        );
        assert!(n.contains("map $http_upgrade $connection_upgrade"), "{n}");
        assert!(!n.contains("stream {"), "{n}");
        let w = headway(addr(1), 2, addr(2), addr(3));
        let cfg = headway_config::Config::parse(&w, "headway.toml").expect("valid");
        assert!(cfg.adc.virtual_servers[0].upgrades);
    }
}
