//! `headway bench adc-reliability`: issue 4's reliability runs against real processes on
//! loopback — `headway run` in front of two `headway origin` servers, wrk as the load.
//!
//! Phases (each bounded, each with its own fresh load run):
//!
//! 1. **baseline**: keep-alive GETs for `--seconds`, the reference rate;
//! 2. **reloads**: the same load for `--reload-seconds` (30 s by default) while the config file
//!    is rewritten and `SIGHUP` sent `--reloads` times (weights change, a content-switching
//!    rule comes and goes); the proxy's config generation is read back at the end;
//! 3. **server killed**: two wrk runs at once, one of GETs and one of POSTs (bodies), while one
//!    origin is killed with SIGKILL a third of the way in: GETs must all succeed (retried
//!    elsewhere), POSTs may fail only for those in flight on the killed server (at most one
//!    per POST connection);
//! 4. **slow headers**: the baseline load again while `--slow-clients` connections send a
//!    request header one byte every 500 ms (slowloris); the proxy's `request_header_timeout`
//!    (2 s here) closes them, and the normal clients' rate is compared with the baseline.
//!
//! Exit status 1 when a phase breaks its rule (a failed request in phases 1, 2 and 4, a failed
//! GET or more failed POSTs than POST connections in phase 3).

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::SystemClock;

use super::adc::load::{parse_wrk, Outcome};
use super::adc::procs::{free_ports, Proc, TempDir};

/// `headway bench adc-reliability` arguments.
#[derive(Debug, clap::Args)]
pub struct ReliabilityArgs {
    /// Seconds of the baseline, server-killed and slow-header runs.
    #[arg(long, default_value_t = 10)]
    pub seconds: u32,
    /// Seconds of the reload run.
    #[arg(long, default_value_t = 30)]
    pub reload_seconds: u32,
    /// Reloads (SIGHUP) during the reload run.
    #[arg(long, default_value_t = 10)]
    pub reloads: u32,
    /// wrk connections (each wrk run).
    #[arg(long, default_value_t = 32)]
    pub connections: u32,
    /// Slow-header connections in the slow-header run.
    #[arg(long, default_value_t = 300)]
    pub slow_clients: u32,
    /// Where to write adc-reliability.md.
    #[arg(long, default_value = "lab-out/bench")]
    pub out: PathBuf,
}

const POST_LUA: &str = "wrk.method = \"POST\"\nwrk.body = string.rep(\"x\", 2048)\nwrk.headers[\"Content-Type\"] = \"application/octet-stream\"\n";

/// The proxy's config: two servers, round robin with `weight_a`, retries, an optional rule.
fn config(admin: u16, listen: u16, a: u16, b: u16, weight_a: u32, rule: bool) -> String {
    let mut s = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[runtime]\nworkers = 2\n\n\
         [[server_group]]\nname = \"web\"\nretries = 2\nconnect_timeout = \"1s\"\n\
         [[server_group.server]]\nname = \"a\"\naddress = \"127.0.0.1:{a}\"\nweight = {weight_a}\n\
         [[server_group.server]]\nname = \"b\"\naddress = \"127.0.0.1:{b}\"\n\n\
         [[server_group]]\nname = \"only-b\"\n[[server_group.server]]\nname = \"b\"\naddress = \"127.0.0.1:{b}\"\n\n\
         [[virtual_server]]\nname = \"front\"\nkind = \"http\"\nlisten = \"127.0.0.1:{listen}\"\n\
         group = \"web\"\nrequest_header_timeout = \"2s\"\n"
    );
    if rule {
        s.push_str("\n[[virtual_server.rule]]\nname = \"b-only\"\npath_prefix = \"/b/\"\ngroup = \"only-b\"\n");
    }
    s
}

/// Runs wrk to completion and reads its report.
fn wrk(
    url: &str,
    connections: u32,
    seconds: u32,
    script: Option<&Path>,
    log: &Path,
) -> Result<Proc> {
    let mut argv: Vec<String> = [
        "wrk",
        "-t",
        "2",
        "-c",
        &connections.to_string(),
        "-d",
        &format!("{seconds}s"),
        "--timeout",
        "5s",
        "--latency",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(s) = script {
        argv.push("-s".into());
        argv.push(s.display().to_string());
    }
    argv.push(url.into());
    Proc::spawn(&argv, log)
}

fn finish(mut p: Proc, seconds: u32) -> Result<Outcome> {
    p.wait_exit(Duration::from_secs(u64::from(seconds) + 30))?;
    parse_wrk(&p.log_text()).context("reading wrk's report")
}

/// Keeps `n` connections sending a request header one byte every 500 ms for `duration`;
/// returns how many the proxy closed.
fn slow_headers(addr: SocketAddr, n: u32, duration: Duration) -> usize {
    let mut conns: Vec<(TcpStream, bool)> = (0..n)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .map(|s| {
            let _ = s.set_nonblocking(true);
            (s, false)
        })
        .collect();
    let text = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let start = SystemClock::now();
    let mut i = 0;
    while SystemClock::now().duration_since(start) < duration {
        let byte = text.get(i).copied().unwrap_or(b'a');
        for (s, closed) in conns.iter_mut() {
            if *closed {
                continue;
            }
            if s.write(&[byte]).is_err() {
                *closed = true;
                continue;
            }
            let mut b = [0u8; 512];
            if matches!(std::io::Read::read(s, &mut b), Ok(0) | Ok(1..)) {
                // An answer or a close: the proxy refused to wait any longer.
                *closed = true;
            }
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    conns.iter().filter(|(_, c)| *c).count()
}

/// Runs the benchmark.
pub fn run(args: ReliabilityArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();
    let dir = TempDir::new("headway-bench-reliability")?;
    let ports = free_ports(4)?;
    let (admin, listen, pa, pb) = (ports[0], ports[1], ports[2], ports[3]);
    let origin = |port: u16, name: &str| -> Result<Proc> {
        let argv: Vec<String> = [
            exe.as_str(),
            "origin",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--name",
            name,
            "--workers",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut p = Proc::spawn(&argv, &dir.path().join(format!("origin-{name}.log")))?;
        p.wait_ready(
            None,
            &[format!("127.0.0.1:{port}").parse()?],
            Duration::from_secs(15),
        )?;
        Ok(p)
    };
    let _a = origin(pa, "a")?;
    let mut b = Some(origin(pb, "b")?);
    let cfg = dir.path().join("headway.toml");
    std::fs::write(&cfg, config(admin, listen, pa, pb, 1, false))?;
    let front: SocketAddr = format!("127.0.0.1:{listen}").parse()?;
    let mut proxy = Proc::spawn(
        &[
            exe.clone(),
            "run".into(),
            "-c".into(),
            cfg.display().to_string(),
        ],
        &dir.path().join("headway.log"),
    )?;
    proxy.wait_ready(Some("ready"), &[front], Duration::from_secs(15))?;
    let url = format!("http://{front}/corpus/random/2KiB");
    let post_lua = dir.path().join("post.lua");
    std::fs::write(&post_lua, POST_LUA)?;
    let log = |n: &str| dir.path().join(format!("{n}.log"));
    let mut md = String::new();
    writeln!(
        md,
        "## ADC reliability: reloads, a server killed, slow-header clients\n"
    )?;
    writeln!(
        md,
        "Command: `headway bench adc-reliability --seconds {} --reload-seconds {} --reloads {} --connections {} --slow-clients {}`. `headway run` (2 workers) in front of two `headway origin` servers on loopback, wrk -t2 -c{} (keep-alive) for the load.\n",
        args.seconds, args.reload_seconds, args.reloads, args.connections, args.slow_clients, args.connections
    )?;
    writeln!(
        md,
        "| phase | wrk run | responses | non-2xx/3xx | socket errors | requests/s | rule | held |"
    )?;
    writeln!(md, "|---|---|---:|---:|---:|---:|---|:---:|")?;
    let mut ok = true;
    let mut row = |md: &mut String,
                   phase: &str,
                   run: &str,
                   o: &Outcome,
                   rule: &str,
                   held: bool|
     -> Result<()> {
        ok &= held;
        writeln!(
            md,
            "| {phase} | {run} | {} | {} | {} | {:.0} | {rule} | {} |",
            o.responses,
            o.bad_status(),
            o.socket_errors,
            o.good_per_second(),
            if held { "yes" } else { "NO" }
        )?;
        Ok(())
    };

    // 1 baseline
    eprintln!("adc-reliability: baseline, {} s", args.seconds);
    let base = finish(
        wrk(&url, args.connections, args.seconds, None, &log("wrk-base"))?,
        args.seconds,
    )?;
    row(
        &mut md,
        "baseline",
        "GET 2 KiB",
        &base,
        "no failure",
        base.bad_status() + base.socket_errors == 0,
    )?;

    // 2 reloads
    eprintln!(
        "adc-reliability: {} reloads during {} s",
        args.reloads, args.reload_seconds
    );
    let w = wrk(
        &url,
        args.connections,
        args.reload_seconds,
        None,
        &log("wrk-reload"),
    )?;
    let every =
        Duration::from_secs_f64(f64::from(args.reload_seconds) / f64::from(args.reloads + 1));
    for i in 0..args.reloads {
        std::thread::sleep(every);
        std::fs::write(&cfg, config(admin, listen, pa, pb, 1 + i % 3, i % 2 == 0))?;
        let status = std::process::Command::new("kill")
            .args(["-HUP", &proxy.pid().to_string()])
            .status()?;
        if !status.success() {
            bail!("cannot send SIGHUP to the proxy");
        }
    }
    let rel = finish(w, args.reload_seconds)?;
    let generation = headway_admin::Client::new(format!("127.0.0.1:{admin}"), None)
        .adc()
        .map(|s| s.generation)
        .unwrap_or(0);
    row(
        &mut md,
        "reloads",
        &format!(
            "GET 2 KiB, {} SIGHUP reloads (generation {generation} at the end)",
            args.reloads
        ),
        &rel,
        "no failure; every reload applied",
        rel.bad_status() + rel.socket_errors == 0 && generation == u64::from(args.reloads) + 1,
    )?;

    // 3 a server killed under load
    eprintln!(
        "adc-reliability: server b killed under GET and POST load, {} s",
        args.seconds
    );
    let echo = format!("http://{front}/echo");
    let per = (args.connections / 2).max(1);
    let gets = wrk(&echo, per, args.seconds, None, &log("wrk-get"))?;
    let posts = wrk(&echo, per, args.seconds, Some(&post_lua), &log("wrk-post"))?;
    std::thread::sleep(Duration::from_secs(u64::from(args.seconds) / 3));
    if let Some(p) = b.take() {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &p.pid().to_string()])
            .status();
        drop(p);
    }
    let g = finish(gets, args.seconds)?;
    let p = finish(posts, args.seconds)?;
    row(
        &mut md,
        "server killed",
        "GET /echo (retried elsewhere)",
        &g,
        "no failure",
        g.bad_status() + g.socket_errors == 0,
    )?;
    row(
        &mut md,
        "server killed",
        &format!("POST /echo 2 KiB, {per} connections"),
        &p,
        &format!("≤ {per} failures (one in flight per connection)"),
        p.bad_status() + p.socket_errors <= u64::from(per),
    )?;
    // b back for the last phase.
    let _b = origin(pb, "b")?;

    // 4 slow headers
    eprintln!(
        "adc-reliability: {} slow-header clients beside the load, {} s",
        args.slow_clients, args.seconds
    );
    let w = wrk(&url, args.connections, args.seconds, None, &log("wrk-slow"))?;
    let closed = slow_headers(
        front,
        args.slow_clients,
        Duration::from_secs(u64::from(args.seconds)),
    );
    let slow = finish(w, args.seconds)?;
    let ratio = slow.good_per_second() / base.good_per_second().max(1.0);
    row(
        &mut md,
        "slow headers",
        &format!(
            "GET 2 KiB beside {} slowloris connections ({closed} closed by the header timeout); rate {:.2} × baseline",
            args.slow_clients, ratio
        ),
        &slow,
        "no failure",
        slow.bad_status() + slow.socket_errors == 0,
    )?;
    drop(proxy);
    println!("{md}");
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    std::fs::write(args.out.join("adc-reliability.md"), &md)?;
    println!("report: {}/adc-reliability.md", args.out.display());
    if !ok {
        bail!("a reliability rule did not hold (see the table)");
    }
    Ok(())
}
