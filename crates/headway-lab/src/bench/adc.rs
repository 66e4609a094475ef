//! `headway bench adc`: seed 002's F5 ADC matrix (`f5_adc_headlines.csv`), measured here with
//! Headway, HAProxy and NGINX side by side in one run on loopback.
//!
//! One `headway origin` serves `/corpus/random/SIZE`; each proxy runs in front of it with the
//! same number of workers, keep-alive to the origin and no access log (see `config`); the same
//! load tool (wrk, h2load for HTTP/2) with the same threads and connections drives each in turn,
//! and the origin is also measured directly, as the reference row. The cells:
//!
//! | test | what | response sizes |
//! |---|---|---|
//! | `l4` | connections/s through a TCP proxy: one request per connection (`Connection: close`) | 128 B |
//! | `l7-1` | HTTP requests/s, one request per connection | 128 B, 2, 8, 64, 512 KiB |
//! | `l7-10` | HTTP requests/s, 10 requests per connection on average (a wrk Lua script) | same |
//! | `l7-unlimited` | HTTP requests/s over keep-alive connections | same |
//! | `h2` | HTTP/2 requests/s, prior knowledge (h2c), `--streams` per connection | 128 B |
//! | `h2-h2` | the same with HTTP/2 to the origin too, as gRPC runs (HAProxy `proto h2`, NGINX `grpc_pass`, Headway `protocol = "h2"`) | 128 B |
//!
//! For each cell and target: good (2xx/3xx) responses per second and the target's CPU-seconds
//! (user + system of all its processes, from `/proc/PID/stat`) per 100,000 of them, medians over
//! `--repeats` runs of `--seconds`, and ratios to HAProxy; then how many L7 cells meet the two
//! targets (Headway's CPU per request at or below HAProxy's, its requests/s above NGINX's),
//! naming each miss with its per-round range. All targets run at once (an idle
//! proxy costs nothing); within each round of a cell they take turns, and the order rotates
//! every round, so a burst of other load on a shared machine lands on one run of each target
//! rather than on every run of one. The defaults (18 cells, 4 targets, 3 runs of 3 s) keep a
//! full run near 10 minutes; `--quick` takes about one.
//!
//! A proxy that fails to start (or dies) becomes an error row with the end of its log, and the
//! run goes on with the others. Every process started here is stopped at the end, on error and
//! on Ctrl-C ([`crate::interrupt`]); the config files live in a temp dir (and are copied to
//! `--out/adc-configs/`). No system setting is changed: Linux's default `tcp_tw_reuse = 2` lets
//! loopback connections reuse ports in TIME_WAIT, which is enough for the one-request-per-
//! connection cells at the rates two cores reach.
//!
//! `--compression` runs the compression matrix instead ([`compression`]): HTML at the seed's
//! sizes through each proxy's gzip (and Headway's negotiated codec), with throughput, CPU per
//! request and the ratio beside the seed's ratio table.
//!
//! `--tls` runs the TLS matrix (the `tls` module): new handshakes/s with ECDSA P-256 and RSA-2048
//! certificates, resumed handshakes/s and keep-alive HTTPS throughput at 128 B … 512 KiB, each
//! with the proxy's CPU per handshake or request and the fraction of handshakes really resumed.
//! With `--compression` too, both run, one after the other.
//!
//! `--websocket` runs the WebSocket tests (the `websocket` module): echo round trips on open
//! connections and whole sessions through each proxy to the origin's `/ws/echo`, with CPU per
//! round trip or session.

mod cache;
pub mod compression;
mod config;
pub(crate) mod load;
pub(crate) mod procs;
mod tls;
mod websocket;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::ByteSize;

use super::median;
use crate::interrupt::{self, Interrupted};
use config::Listeners;
use load::{Load, Outcome, Pace, PerConnection};
use procs::{Proc, TempDir};

/// `headway bench adc` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct AdcArgs {
    /// The proxies to measure; the origin is always measured directly, as the reference.
    #[arg(long, value_delimiter = ',', default_value = "haproxy,nginx,headway")]
    pub proxies: Vec<Target>,
    /// A quick look: L4, L7 at 128 B for 1, 10 and unlimited requests per connection, L7
    /// unlimited at 64 KiB, HTTP/2; 2 s × 1 run unless --seconds / --repeats say otherwise.
    #[arg(long)]
    pub quick: bool,
    /// Only these tests.
    #[arg(long, value_delimiter = ',')]
    pub tests: Vec<Test>,
    /// Response sizes of the L7 tests (default 128B,2KiB,8KiB,64KiB,512KiB); the L4 and
    /// HTTP/2 cells are always 128 B.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<ByteSize>,
    /// Seconds per load run [default: 3, or 2 with --quick].
    #[arg(long)]
    pub seconds: Option<u32>,
    /// Runs per cell and target; medians are reported [default: 3, or 1 with --quick].
    #[arg(long)]
    pub repeats: Option<u32>,
    /// Data-plane workers of every proxy (HAProxy nbthread, NGINX worker_processes, Headway
    /// `[runtime] workers`).
    #[arg(long, default_value_t = 2)]
    pub workers: u32,
    /// Worker threads of the origin.
    #[arg(long, default_value_t = 2)]
    pub origin_workers: u32,
    /// Load-tool threads (wrk -t, h2load -t).
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Load-tool connections in all (wrk -c, h2load -c).
    #[arg(long, default_value_t = 64)]
    pub connections: u32,
    /// Concurrent HTTP/2 streams per connection (h2load -m).
    #[arg(long, default_value_t = 10)]
    pub streams: u32,
    /// Offer a fixed load of RATE requests/s in all instead of as many as the targets can take:
    /// each wrk thread sends a request every `threads × 1000 / RATE` ms on whichever of its
    /// connections is free (a Lua schedule, see `adc-configs/paced.lua`), each h2load
    /// connection asks at `RATE / connections` per second (`--rps`). Every target then answers
    /// the same requests, and CPU per request is its cost at that load: on a shared machine a
    /// saturating run also measures how the load tool, the origin and the proxy share the
    /// cores. The rate must stay below what every target can serve; the report gives the rate
    /// each achieved.
    #[arg(long, value_name = "RATE", value_parser = clap::value_parser!(u32).range(1..))]
    pub paced: Option<u32>,
    /// Where to write adc.md, adc.csv and the configs (adc-configs/).
    #[arg(long, default_value = "lab-out/bench")]
    pub out: PathBuf,
    /// The F5 cache matrix instead: cache-hit requests/s and CPU through Headway's cache,
    /// Varnish and NGINX proxy_cache, at the L7 tests and sizes (`adc-cache.md`).
    #[arg(long, conflicts_with = "microcache")]
    pub cache: bool,
    /// The microcaching scenario instead: a 50 ms dynamic page from a 4-worker origin, with and
    /// without a 1 s flash cache, beside NGINX's microcaching (`adc-microcache.md`).
    #[arg(long)]
    pub microcache: bool,
    /// Measure HTTP compression instead of the F5 matrix: HTML at 128 B … 512 KiB through
    /// HAProxy's and NGINX's gzip and Headway's, keep-alive, with the compression ratio beside
    /// seed 002's (`compression.md`, `compression.csv`). `--tests` does not apply.
    #[arg(long)]
    pub compression: bool,
    /// Measure TLS termination instead of the F5 matrix: new handshakes/s (ECDSA P-256 and
    /// RSA-2048), resumed handshakes/s and HTTPS throughput at 128 B … 512 KiB through HAProxy,
    /// NGINX and Headway, with CPU per handshake (`tls.md`, `tls.csv`). With `--compression`,
    /// both run, TLS first. `--tests` does not apply.
    #[arg(long)]
    pub tls: bool,
    /// Measure WebSockets instead of the F5 matrix: echo round trips at 128 B, 8 KiB and 64 KiB
    /// (`--sizes`) on open connections, and whole sessions (connect, handshake, one round trip,
    /// close), through HAProxy, NGINX and Headway to the origin's `/ws/echo`, with CPU per
    /// 100,000 (`websocket.md`, `websocket.csv`). `--tests` does not apply.
    #[arg(long, conflicts_with_all = ["cache", "microcache", "compression", "tls"])]
    pub websocket: bool,
}

impl AdcArgs {
    /// `--seconds`, else `quick` with `--quick` and `full` without.
    pub fn seconds_or(&self, quick: u32, full: u32) -> u32 {
        self.seconds
            .unwrap_or(if self.quick { quick } else { full })
    }

    /// The load tool's connections in all: `--connections`, at least one per thread.
    pub fn load_connections(&self) -> u32 {
        self.connections.max(self.threads).max(1)
    }

    /// `--repeats`, else `quick` with `--quick` and `full` without.
    pub fn repeats_or(&self, quick: u32, full: u32) -> u32 {
        self.repeats
            .unwrap_or(if self.quick { quick } else { full })
    }
}

/// What a row of the matrix is measured through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Target {
    /// The origin itself, no proxy: the reference.
    #[value(skip)]
    Origin,
    /// HAProxy (the baseline of the ratios).
    Haproxy,
    /// NGINX (`stream {}` for L4).
    Nginx,
    /// Headway (`headway run`).
    Headway,
}

impl Target {
    /// Its name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Target::Origin => "origin (direct)",
            Target::Haproxy => "HAProxy",
            Target::Nginx => "NGINX",
            Target::Headway => "Headway",
        }
    }

    /// Its name in CSV, file names and messages.
    pub fn key(self) -> &'static str {
        match self {
            Target::Origin => "origin",
            Target::Haproxy => "haproxy",
            Target::Nginx => "nginx",
            Target::Headway => "headway",
        }
    }
}

/// A column of seed 002's matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Test {
    /// L4 connections/s (TCP proxy, one request per connection).
    L4,
    /// L7 requests/s, one request per connection.
    #[value(name = "l7-1")]
    L7One,
    /// L7 requests/s, 10 requests per connection on average.
    #[value(name = "l7-10")]
    L7Ten,
    /// L7 requests/s over keep-alive connections.
    #[value(name = "l7-unlimited")]
    L7Unlimited,
    /// HTTP/2 requests/s with prior knowledge.
    H2,
    /// HTTP/2 requests/s with prior knowledge, and HTTP/2 to the origin too (gRPC's shape).
    #[value(name = "h2-h2")]
    H2Both,
}

impl Test {
    /// Every test, in report order.
    pub const ALL: [Test; 6] = [
        Test::L4,
        Test::L7One,
        Test::L7Ten,
        Test::L7Unlimited,
        Test::H2,
        Test::H2Both,
    ];

    /// Its name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Test::L4 => "L4 conn/s (1 req/conn)",
            Test::L7One => "L7 1 req/conn",
            Test::L7Ten => "L7 10 req/conn",
            Test::L7Unlimited => "L7 unlimited req/conn",
            Test::H2 => "HTTP/2 (h2c)",
            Test::H2Both => "HTTP/2 both sides",
        }
    }

    /// Its name on the command line and in CSV.
    pub fn key(self) -> &'static str {
        match self {
            Test::L4 => "l4",
            Test::L7One => "l7-1",
            Test::L7Ten => "l7-10",
            Test::L7Unlimited => "l7-unlimited",
            Test::H2 => "h2",
            Test::H2Both => "h2-h2",
        }
    }

    /// How its requests are spread over connections.
    pub fn per_connection(self) -> PerConnection {
        match self {
            Test::L4 | Test::L7One => PerConnection::One,
            Test::L7Ten => PerConnection::Ten,
            Test::L7Unlimited | Test::H2 | Test::H2Both => PerConnection::Unlimited,
        }
    }

    /// Whether its load is HTTP/2 (h2load).
    fn is_h2(self) -> bool {
        matches!(self, Test::H2 | Test::H2Both)
    }

    fn is_l7(self) -> bool {
        matches!(self, Test::L7One | Test::L7Ten | Test::L7Unlimited)
    }
}

/// The seed's response sizes (KB read as KiB).
pub const SIZES: [u64; 5] = [128, 2 << 10, 8 << 10, 64 << 10, 512 << 10];
/// The response size of the L4 and HTTP/2 cells.
pub const SMALL: u64 = 128;

/// One cell of the matrix: a test at a response size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cell {
    /// The test.
    pub test: Test,
    /// The response body, bytes.
    pub size: u64,
}

impl Cell {
    fn label(&self) -> String {
        format!("{} {}", self.test.label(), size_label(self.size))
    }
}

/// The cells a run measures, in report order: `tests` (all when empty) and, for the L7 tests,
/// `sizes` (the seed's five when empty; 128 B, and 64 KiB for unlimited, with `quick`).
pub fn cells(quick: bool, tests: &[Test], sizes: &[u64]) -> Vec<Cell> {
    let mut out = Vec::new();
    for test in Test::ALL {
        if !tests.is_empty() && !tests.contains(&test) {
            continue;
        }
        let l7_sizes: Vec<u64> = if !sizes.is_empty() {
            sizes.to_vec()
        } else if quick && test == Test::L7Unlimited {
            vec![SMALL, 64 << 10]
        } else if quick {
            vec![SMALL]
        } else {
            SIZES.to_vec()
        };
        if test.is_l7() {
            out.extend(l7_sizes.into_iter().map(|size| Cell { test, size }));
        } else {
            out.push(Cell { test, size: SMALL });
        }
    }
    out
}

/// A results table's cell for target `t`: `value` of its entry (with the ratio to HAProxy's
/// `base` for the other proxies), `†` when a run had trouble or failed, `error †` when no run
/// gave a number because runs failed, `–` when none did.
fn entry_cell(
    e: &Entry,
    t: Target,
    base: Option<f64>,
    value: &dyn Fn(&Entry) -> Option<f64>,
    fmt: &dyn Fn(f64) -> String,
) -> String {
    match value(e) {
        Some(v) => {
            let mut x = fmt(v);
            if let (Some(b), true) = (base, t != Target::Haproxy && t != Target::Origin) {
                let _ = write!(x, " ({:.2}×)", v / b);
            }
            if e.trouble() != (0, 0) || !e.errors.is_empty() {
                x.push_str(" †");
            }
            x
        }
        None if !e.errors.is_empty() => "error †".into(),
        None => "–".into(),
    }
}

/// One line per target for a report: how it ran (its pid) or why it did not.
fn status_lines(instances: &[Instance]) -> Vec<String> {
    instances
        .iter()
        .map(|i| match &i.failure {
            Some(f) => format!("{}: {}", i.target.label(), f.replace('|', "\\|")),
            None => format!(
                "{}: ran (pid {})",
                i.target.label(),
                i.proc.as_ref().map_or(0, Proc::pid)
            ),
        })
        .collect()
}

/// `128 B`, `2 KiB`, `1.5 KiB`.
fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Where a target listens for each kind of test.
#[derive(Debug, Clone, Copy)]
struct Ends {
    l7: SocketAddr,
    l4: SocketAddr,
    h2: Option<SocketAddr>,
    /// HTTP/2 in, HTTP/2 to the origin.
    h2_both: Option<SocketAddr>,
}

impl Ends {
    fn of(&self, test: Test) -> Option<SocketAddr> {
        match test {
            Test::L4 => Some(self.l4),
            Test::H2 => self.h2,
            Test::H2Both => self.h2_both,
            _ => Some(self.l7),
        }
    }

    fn describe(&self) -> String {
        let mut s = format!("L7 {}", self.l7);
        if self.l4 != self.l7 {
            s += &format!(", L4 {}", self.l4);
        }
        if let Some(h2) = self.h2 {
            s += &format!(", h2c {h2}");
        }
        if let Some(h2) = self.h2_both {
            s += &format!(", h2c to h2 {h2}");
        }
        s
    }
}

/// A target: started, or why not.
#[derive(Debug)]
struct Instance {
    target: Target,
    ends: Ends,
    proc: Option<Proc>,
    failure: Option<String>,
}

/// One run: what the load tool saw and the CPU time the target used meanwhile.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The load tool's outcome.
    pub outcome: Outcome,
    /// User + system seconds of the target's processes during the run.
    pub cpu_seconds: f64,
}

impl Sample {
    /// CPU-seconds per 100,000 good responses; `None` without any.
    pub fn cpu_per_100k(&self) -> Option<f64> {
        (self.outcome.good > 0).then(|| self.cpu_seconds / self.outcome.good as f64 * 1e5)
    }
}

/// Everything measured for one cell and target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entry {
    /// The runs that produced numbers.
    pub samples: Vec<Sample>,
    /// The runs that did not, with why.
    pub errors: Vec<String>,
}

impl Entry {
    /// Median good responses per second.
    pub fn rps(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .samples
            .iter()
            .map(|s| s.outcome.good_per_second())
            .collect();
        median(&v)
    }

    /// Median CPU-seconds per 100,000 good responses.
    pub fn cpu_per_100k(&self) -> Option<f64> {
        let v: Vec<f64> = self
            .samples
            .iter()
            .filter_map(Sample::cpu_per_100k)
            .collect();
        median(&v)
    }

    /// Socket errors and error statuses over all runs.
    pub fn trouble(&self) -> (u64, u64) {
        self.samples.iter().fold((0, 0), |(e, b), s| {
            (e + s.outcome.socket_errors, b + s.outcome.bad_status())
        })
    }
}

/// Results by cell and target.
pub type Results = BTreeMap<(Cell, Target), Entry>;

/// Runs the benchmark.
pub fn run(args: AdcArgs) -> Result<()> {
    if args.cache {
        return cache::run_cache(&args);
    }
    if args.microcache {
        return cache::run_microcache(&args);
    }
    if args.websocket {
        return websocket::run(&args);
    }
    if args.tls {
        tls::run(&args)?;
        if !args.compression {
            return Ok(());
        }
    }
    if args.compression {
        return compression::run(args);
    }
    let seconds = args.seconds_or(2, 3).max(1);
    let repeats = args.repeats_or(1, 3).max(1);
    let sizes: Vec<u64> = args.sizes.iter().map(|s| s.bytes()).collect();
    let mut cells = cells(args.quick, &args.tests, &sizes);
    let mut notes = Vec::new();
    let versions = Versions::probe();
    if versions.wrk.is_none() {
        bail!("`wrk` is not installed: run `bash scripts/setup.sh` (as root) first");
    }
    if versions.h2load.is_none() && cells.iter().any(|c| c.test.is_h2()) {
        cells.retain(|c| !c.test.is_h2());
        notes.push(
            "h2load is not installed (Debian: nghttp2-client): the HTTP/2 cells were skipped."
                .to_string(),
        );
    }
    anyhow::ensure!(!cells.is_empty(), "no cell matches --tests / --sizes");
    let mut targets = vec![Target::Origin];
    targets.extend(
        args.proxies
            .iter()
            .copied()
            .filter(|t| *t != Target::Origin),
    );
    targets.sort();
    targets.dedup();

    let load_at_start = load_average();
    let tmp = TempDir::new("headway-bench-adc")?;
    let (script_name, script_text) = match args.paced {
        Some(_) => ("paced.lua", config::PACED_LUA),
        None => ("ten-per-connection.lua", config::TEN_PER_CONNECTION_LUA),
    };
    let script = tmp.path().join(script_name);
    std::fs::write(&script, script_text)?;
    let ticks = procs::clock_ticks_per_second()?;
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();
    let mut port = procs::port_source(1 + 5 * targets.len())?;

    let origin = port();
    let mut instances = vec![start_origin(&exe, origin, &args, tmp.path())?];
    let mut configs = vec![(script_name.to_string(), script_text.to_string())];
    for &target in targets.iter().filter(|t| **t != Target::Origin) {
        let listeners = Listeners {
            l7: port(),
            l4: port(),
            h2: (target != Target::Headway).then(&mut port),
            h2_both: Some(port()),
            admin: (target == Target::Headway).then(&mut port),
        };
        let (inst, file) = start_proxy(target, origin, &listeners, &args, tmp.path(), &exe)?;
        if let Some(f) = &inst.failure {
            eprintln!("{}: {f}", target.key());
        }
        configs.push(file);
        instances.push(inst);
    }

    let runs: usize = cells
        .iter()
        .map(|c| {
            instances
                .iter()
                .filter(|i| i.proc.is_some() && i.ends.of(c.test).is_some())
                .count()
        })
        .sum::<usize>()
        * repeats as usize;
    eprintln!(
        "adc: {} cells × {} running targets × {repeats} runs of {seconds} s: about {} min",
        cells.len(),
        instances.iter().filter(|i| i.proc.is_some()).count(),
        (runs as f64 * (seconds as f64 + 0.1) / 60.0).ceil()
    );

    let mut results = Results::new();
    let ctx = RunContext {
        args: &args,
        seconds,
        script: &script,
        dir: tmp.path(),
        ticks,
    };
    let mut done = 0;
    for cell in &cells {
        for round in 0..repeats as usize {
            let n = instances.len();
            for k in 0..n {
                interrupt::check()?;
                let inst = &mut instances[(k + round) % n];
                let Some(addr) = inst.ends.of(cell.test) else {
                    continue;
                };
                let Some(proc) = inst.proc.as_mut() else {
                    continue;
                };
                done += 1;
                let entry = results.entry((*cell, inst.target)).or_default();
                match measure(&ctx, proc, cell, addr) {
                    Ok(s) => {
                        eprintln!(
                            "  [{done}/{runs}] {} · {} · run {}: {:.0} req/s, {} CPU-s/100k",
                            cell.label(),
                            inst.target.key(),
                            round + 1,
                            s.outcome.good_per_second(),
                            s.cpu_per_100k().map_or("–".into(), fmt_cpu)
                        );
                        entry.samples.push(s);
                    }
                    Err(e) if is_interrupt(&e) => return Err(e),
                    Err(e) => {
                        eprintln!(
                            "  [{done}/{runs}] {} · {}: {e:#}",
                            cell.label(),
                            inst.target.key()
                        );
                        entry.errors.push(format!("{e:#}"));
                    }
                }
                if let Some(status) = inst.proc.as_mut().and_then(Proc::exited) {
                    let tail = inst
                        .proc
                        .as_ref()
                        .map(|p| p.log_tail(6))
                        .unwrap_or_default();
                    let why = format!("exited ({status}) during {}: {tail}", cell.label());
                    eprintln!("{}: {why}", inst.target.key());
                    if inst.target == Target::Origin {
                        bail!("the origin {why}");
                    }
                    inst.failure = Some(why);
                    inst.proc = None;
                }
            }
        }
    }
    let status: Vec<(Target, String, String)> = instances
        .iter()
        .map(|i| {
            let state = match &i.failure {
                Some(f) => f.clone(),
                None => format!("ran (pid {})", i.proc.as_ref().map_or(0, Proc::pid)),
            };
            (i.target, i.ends.describe(), state)
        })
        .collect();
    drop(instances);

    let header = Header {
        command: command_line(),
        host: host_line(),
        versions: versions.line(),
        seconds,
        repeats,
        args: args.clone(),
        tcp: tcp_settings(),
        load: (load_at_start, load_average()),
    };
    let md = render_markdown(&header, &status, &cells, &targets, &results, &notes);
    let csv = render_csv(&cells, &targets, &results);
    println!("{md}");
    write_report(
        &args.out,
        &[("adc.md", &md), ("adc.csv", &csv)],
        "adc-configs",
        &configs,
    )
}

/// Writes a report's files into `out` and the configs it ran into `out/dir/`, and says where.
pub(crate) fn write_report(
    out: &Path,
    files: &[(&str, &str)],
    dir: &str,
    configs: &[(String, String)],
) -> Result<()> {
    std::fs::create_dir_all(out.join(dir))
        .with_context(|| format!("creating {}", out.join(dir).display()))?;
    for (name, text) in files {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    for (name, text) in configs {
        std::fs::write(out.join(dir).join(name), text)?;
    }
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    println!(
        "report: {}/{}; configs in {}/{dir}/",
        out.display(),
        names.join(", "),
        out.display()
    );
    Ok(())
}

/// What every measurement needs.
struct RunContext<'a> {
    args: &'a AdcArgs,
    seconds: u32,
    script: &'a Path,
    dir: &'a Path,
    ticks: u64,
}

/// One load run against `addr` with the target's CPU time read before and after.
fn measure(ctx: &RunContext<'_>, target: &Proc, cell: &Cell, addr: SocketAddr) -> Result<Sample> {
    let load = Load {
        url: format!("http://{addr}/corpus/random/{}", cell.size),
        threads: ctx.args.threads.max(1),
        connections: ctx.args.load_connections(),
        seconds: ctx.seconds,
    };
    let streams = ctx.args.streams.max(1);
    let per = cell.test.per_connection();
    let argv = match (cell.test.is_h2(), ctx.args.paced) {
        (true, None) => load::h2load_argv(&load, streams),
        (true, Some(rate)) => load::paced_h2load_argv(&load, streams, Pace { rate }),
        (false, None) => load::wrk_argv(&load, per, ctx.script),
        (false, Some(rate)) => load::paced_wrk_argv(&load, per, ctx.script, Pace { rate }),
    };
    let before = procs::cpu_ticks(target.pid())?;
    let mut tool = Proc::spawn(&argv, &ctx.dir.join("load.log"))?;
    let status = tool.wait_exit(Duration::from_secs(u64::from(ctx.seconds) + 30))?;
    let after = procs::cpu_ticks(target.pid())?;
    let text = tool.log_text();
    let parsed = if cell.test.is_h2() {
        load::parse_h2load(&text)
    } else {
        load::parse_wrk(&text)
    };
    let outcome = parsed.with_context(|| format!("`{}` ({status})", tool.command()))?;
    if outcome.good == 0 {
        bail!(
            "no good response ({} with an error status, {} socket errors)",
            outcome.bad_status(),
            outcome.socket_errors
        );
    }
    Ok(Sample {
        outcome,
        cpu_seconds: after.saturating_sub(before) as f64 / ctx.ticks as f64,
    })
}

fn is_interrupt(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Interrupted>())
}

/// Starts `headway origin`; failing that there is nothing to measure.
fn start_origin(exe: &str, addr: SocketAddr, args: &AdcArgs, dir: &Path) -> Result<Instance> {
    let argv: Vec<String> = vec![
        exe.into(),
        "origin".into(),
        "--listen".into(),
        addr.to_string(),
        "--workers".into(),
        args.origin_workers.max(1).to_string(),
    ];
    let mut p = Proc::spawn(&argv, &dir.join("origin.log"))?;
    if let Err(e) = p.wait_ready(None, &[addr], Duration::from_secs(15)) {
        if is_interrupt(&e) {
            return Err(e);
        }
        bail!("the origin failed to start: {e}: {}", p.log_tail(6));
    }
    Ok(Instance {
        target: Target::Origin,
        // It serves HTTP/2 with prior knowledge too: the reference of the cell with HTTP/2 on
        // both sides.
        ends: Ends {
            l7: addr,
            l4: addr,
            h2: None,
            h2_both: Some(addr),
        },
        proc: Some(p),
        failure: None,
    })
}

/// Writes `target`'s config and starts it; a failure to start is returned as an instance with
/// `failure` set (only an interrupt is an error). Also returns the config (file name, text).
fn start_proxy(
    target: Target,
    origin: SocketAddr,
    l: &Listeners,
    args: &AdcArgs,
    dir: &Path,
    exe: &str,
) -> Result<(Instance, (String, String))> {
    let workers = args.workers.max(1);
    let maxconn = config::max_connections(args.connections);
    let (file, text) = match target {
        Target::Haproxy => ("haproxy.cfg", config::haproxy(origin, workers, l, maxconn)),
        Target::Nginx => {
            let module = Path::new(NGINX_STREAM_MODULE);
            let module = module.exists().then_some(module);
            let text = config::nginx(origin, workers, l, maxconn, dir, module);
            ("nginx.conf", text)
        }
        Target::Headway => ("headway.toml", config::headway(origin, workers, l)),
        Target::Origin => bail!("the origin is not a proxy"),
    };
    let ends = Ends {
        l7: l.l7,
        l4: l.l4,
        h2: Some(l.h2.unwrap_or(l.l7)),
        h2_both: l.h2_both,
    };
    let mut addrs = vec![l.l7, l.l4];
    addrs.extend(l.h2);
    addrs.extend(l.h2_both);
    let instance = launch(target, ends, &addrs, file, &text, dir, exe)?;
    Ok((instance, (file.to_string(), text)))
}

/// Writes `target`'s config `text` to `dir/file`, starts it and waits until it listens on
/// `addrs`; a failure to start is an instance with `failure` set (only an interrupt is an error).
fn launch(
    target: Target,
    ends: Ends,
    addrs: &[SocketAddr],
    file: &str,
    text: &str,
    dir: &Path,
    exe: &str,
) -> Result<Instance> {
    let path = dir.join(file);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    let path_s = path.display().to_string();
    let (argv, ready): (Vec<String>, Option<&str>) = match target {
        Target::Haproxy => (
            vec!["haproxy".into(), "-f".into(), path_s, "-db".into()],
            None,
        ),
        Target::Nginx => (
            vec![
                "nginx".into(),
                "-c".into(),
                path_s,
                "-g".into(),
                "daemon off;".into(),
            ],
            None,
        ),
        _ => (
            vec![exe.into(), "run".into(), "-c".into(), path_s],
            Some("ready"),
        ),
    };
    let started = Proc::spawn(&argv, &dir.join(format!("{}.log", target.key())))
        .map_err(|e| format!("failed to start: {e:#}"))
        .and_then(
            |mut p| match p.wait_ready(ready, addrs, Duration::from_secs(15)) {
                Ok(()) => Ok(Ok(p)),
                Err(e) if is_interrupt(&e) => Ok(Err(e)),
                Err(e) => Err(format!("failed to start: {e}: {}", p.log_tail(6))),
            },
        );
    let (proc, failure) = match started {
        Ok(Ok(p)) => (Some(p), None),
        Ok(Err(interrupted)) => return Err(interrupted),
        Err(why) => (None, Some(why)),
    };
    Ok(Instance {
        target,
        ends,
        proc,
        failure,
    })
}

/// Debian's dynamic NGINX stream module (libnginx-mod-stream).
pub(crate) const NGINX_STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

/// The versions of the tools, `None` for one that is not installed.
#[derive(Debug, Clone, Default)]
struct Versions {
    haproxy: Option<String>,
    nginx: Option<String>,
    wrk: Option<String>,
    h2load: Option<String>,
}

impl Versions {
    fn probe() -> Versions {
        Versions {
            haproxy: tool_version(&["haproxy", "-v"]),
            nginx: tool_version(&["nginx", "-v"]),
            wrk: tool_version(&["wrk", "--version"]),
            h2load: tool_version(&["h2load", "--version"]),
        }
    }

    fn line(&self) -> String {
        let v = |o: &Option<String>, name: &str| {
            o.clone()
                .unwrap_or_else(|| format!("{name} (not installed)"))
        };
        format!(
            "headway {}, {}, {}, {}, {}",
            env!("CARGO_PKG_VERSION"),
            v(&self.haproxy, "HAProxy"),
            v(&self.nginx, "nginx"),
            v(&self.wrk, "wrk"),
            v(&self.h2load, "h2load")
        )
    }
}

/// The first line `argv` prints (stdout or stderr, whatever its exit status), tidied.
fn tool_version(argv: &[&str]) -> Option<String> {
    let out = crate::netns::output(argv).ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(tidy_version)
}

/// `HAProxy version 2.6.12-1 2023/… - https://…` → `HAProxy 2.6.12-1`; `nginx version:
/// nginx/1.22.1` → `nginx/1.22.1`; `wrk 4.1.0 [epoll] Copyright (C) …` → `wrk 4.1.0 [epoll]`.
fn tidy_version(line: &str) -> String {
    if let Some(rest) = line.strip_prefix("HAProxy version ") {
        return format!("HAProxy {}", rest.split_whitespace().next().unwrap_or(""));
    }
    let line = line.strip_prefix("nginx version: ").unwrap_or(line);
    line.split(" Copyright")
        .next()
        .unwrap_or(line)
        .trim()
        .to_string()
}

/// The command line as run.
fn command_line() -> String {
    let args: Vec<String> = std::env::args().collect();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    crate::netns::display_command(&refs)
}

/// Kernel, CPU count and model.
fn host_line() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    format!("Linux {}, {cpus} CPUs ({model})", kernel.trim())
}

/// `/proc/loadavg`'s 1, 5 and 15-minute averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The TCP settings that matter for one request per connection, as they are.
fn tcp_settings() -> String {
    let read = |k: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{k}"))
            .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "?".into())
    };
    format!(
        "net.ipv4.tcp_tw_reuse = {}, net.ipv4.ip_local_port_range = {}",
        read("tcp_tw_reuse"),
        read("ip_local_port_range")
    )
}

/// What the report says about the run besides the numbers.
#[derive(Debug, Clone)]
struct Header {
    command: String,
    host: String,
    versions: String,
    seconds: u32,
    repeats: u32,
    args: AdcArgs,
    tcp: String,
    /// The load average at the start and at the end (other work on a shared machine).
    load: (String, String),
}

/// The Markdown report: setup, targets, the requests/s and the CPU tables, how to read them.
fn render_markdown(
    h: &Header,
    status: &[(Target, String, String)],
    cells: &[Cell],
    targets: &[Target],
    results: &Results,
    notes: &[String],
) -> String {
    let a = &h.args;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Seed 002's F5 ADC matrix on loopback: {} in front of one `headway origin`\n",
        targets
            .iter()
            .filter(|t| **t != Target::Origin)
            .map(|t| t.label())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(md, "Command: `{}`\n", h.command);
    let _ = writeln!(
        md,
        "Host: {}; load average (1 / 5 / 15 min) {} at the start, {} at the end. Versions: {}.\n",
        h.host, h.load.0, h.load.1, h.versions
    );
    let _ = writeln!(
        md,
        "Setup: everything on 127.0.0.1. The origin (`headway origin`, {ow} workers) serves \
         `/corpus/random/SIZE` (incompressible bytes). Every proxy: {w} workers (HAProxy \
         `nbthread`, NGINX `worker_processes`, Headway `[runtime] workers`), keep-alive to the \
         origin (HAProxy `http-reuse always`, NGINX `upstream {{ keepalive 64; }}` with HTTP/1.1, \
         Headway's pool), no access log, no limit on requests per client connection. Load: \
         `wrk -t {t} -c {c}` (`h2load -t {t} -c {c} -m {m}` for HTTP/2), {s} s per run, the \
         median of {r} run(s) per cell; in each round of a cell the targets take turns, the \
         order rotating every round. Nothing is pinned to cores. TCP settings (unchanged): {tcp}.\n",
        ow = a.origin_workers,
        w = a.workers,
        t = a.threads,
        c = a.connections,
        m = a.streams,
        s = h.seconds,
        r = h.repeats,
        tcp = h.tcp,
    );
    if let Some(rate) = a.paced {
        let pace = Pace { rate };
        let _ = writeln!(
            md,
            "**Paced load** (`--paced {rate}`): {rate} requests/s offered in all, not as many as \
             the targets can take. Each wrk thread sends a request every {p:.4} ms on whichever \
             of its connections is free, whatever the answers' latency (the Lua schedule of \
             `adc-configs/paced.lua`, which also sends `Connection: close` on every request or \
             every 10th for the 1 and 10 req/conn rows); each h2load connection asks at {r:.2} \
             requests/s (`--rps`). The requests/s table is the rate each target achieved under \
             that load, not its capacity (below the offered rate: the target, the origin or the \
             load tool could not keep up); CPU per request is its cost at that load.\n",
            p = pace.period_ms(a.threads),
            r = pace.per_connection(a.load_connections()),
        );
    }
    let _ = writeln!(md, "| target | listeners | status |\n|---|---|---|");
    for (t, ends, state) in status {
        let _ = writeln!(
            md,
            "| {} | {ends} | {} |",
            t.label(),
            state.replace('|', "\\|")
        );
    }
    let cols: String = targets
        .iter()
        .map(|t| format!(" {} |", t.label()))
        .collect();
    let rule: String = targets.iter().map(|_| "---:|").collect();
    let failed = |t: Target| {
        status
            .iter()
            .any(|(s, _, st)| *s == t && !st.starts_with("ran"))
    };
    let table =
        |title: &str, value: &dyn Fn(&Entry) -> Option<f64>, fmt: &dyn Fn(f64) -> String| {
            let mut s = format!("\n### {title}\n\n| test | size |{cols}\n|---|---:|{rule}\n");
            for cell in cells {
                let _ = write!(s, "| {} | {} |", cell.test.label(), size_label(cell.size));
                let base = results.get(&(*cell, Target::Haproxy)).and_then(value);
                for &t in targets {
                    let text = match results.get(&(*cell, t)) {
                        Some(e) => entry_cell(e, t, base, value, fmt),
                        None if t == Target::Origin && cell.test == Test::H2 => "n/a".into(),
                        None if failed(t) => "failed".into(),
                        None => "–".into(),
                    };
                    let _ = write!(s, " {text} |");
                }
                s.push('\n');
            }
            s
        };
    let rps_title = if a.paced.is_some() {
        "Requests/s achieved under the paced load (median; × HAProxy's)"
    } else {
        "Requests/s (median; × HAProxy's; higher is better)"
    };
    md += &table(rps_title, &Entry::rps, &|v| thousands(v.round() as u64));
    md += &table(
        "CPU-seconds per 100,000 requests (median; × HAProxy's; lower is better)",
        &Entry::cpu_per_100k,
        &fmt_cpu,
    );
    if h.repeats > 1 {
        md += &spread_table(cells, targets, results);
    }
    md += &target_summary(cells, targets, results, a.paced.is_some());
    let _ = writeln!(
        md,
        "\nHow to read it:\n\n\
         - **L4**: one request per connection (`Connection: close`) through a TCP proxy (HAProxy \
         `mode tcp`, NGINX `stream {{}}`, Headway `kind = \"tcp\"`), so requests/s are \
         connections/s.\n\
         - **L7 1 req/conn**: wrk sends `Connection: close` on every request.\n\
         - **L7 10 req/conn**: a wrk Lua script sends `Connection: close` on every 10th request of \
         each wrk thread; the server answers it and closes and wrk reconnects. A thread's requests \
         are spread over its connections, so one connection may carry more or fewer than 10, but \
         there is exactly one close per 10 requests: 10 per connection on average.\n\
         - **L7 unlimited**: keep-alive; no proxy closes a client connection on its own.\n\
         - **HTTP/2**: h2load with prior knowledge (h2c), HTTP/1.1 to the origin. HAProxy: a \
         `bind … proto h2` listener. NGINX 1.22 (Debian 12) has no `http2 on;` (1.25.1+); \
         `listen … http2` on a plain-text socket serves h2c with prior knowledge only, so it has \
         a listener of its own. Headway: its `http` listener. The origin is measured in the \
         next row (n/a here).\n\
         - **HTTP/2 both sides**: the same load, and HTTP/2 with prior knowledge to the origin \
         too, as gRPC services run: HAProxy `server … proto h2`, NGINX `grpc_pass` (its only \
         HTTP/2 upstream; 1.22 has no `proxy_http_version 2`), Headway a group with `protocol = \
         \"h2\"`; each on a listener of its own. The origin column is h2load to the origin \
         directly.\n\
         - **Requests/s** count 2xx/3xx responses only. **CPU** is user + system time of the \
         target's processes (HAProxy; NGINX master and workers; Headway; in the origin column \
         the origin itself) from `/proc/PID/stat` before and after each run, in clock ticks \
         (`getconf CLK_TCK`), per 100,000 good responses. The load tool, the origin and the proxy \
         share the machine's cores, so requests/s is bounded by all three; CPU per request is \
         the proxy's own cost.\n\
         - Every proxy adds the client's address in `X-Forwarded-For` and the scheme in \
         `X-Forwarded-Proto` to each request to the origin: Headway by default, HAProxy with \
         `option forwardfor` and `http-request set-header`, NGINX with `proxy_set_header` \
         (`grpc_set_header` for HTTP/2).\n\
         - Sizes are KiB (the seed's 2 KB … 512 KB read as 1,024-byte KB). Configs: \
         `adc-configs/` beside this report."
    );
    let trouble: Vec<String> = results
        .iter()
        .filter_map(|((cell, t), e)| {
            let (sock, bad) = e.trouble();
            let mut parts = Vec::new();
            if sock > 0 || bad > 0 {
                parts.push(format!(
                    "{sock} socket errors and {bad} error statuses over {} runs",
                    e.samples.len()
                ));
            }
            parts.extend(e.errors.iter().map(|x| x.replace('\n', " ")));
            (!parts.is_empty())
                .then(|| format!("- † {}, {}: {}", cell.label(), t.key(), parts.join("; ")))
        })
        .collect();
    if !trouble.is_empty() || !notes.is_empty() {
        let _ = writeln!(md, "\nNotes:\n");
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
        for t in trouble {
            let _ = writeln!(md, "{t}");
        }
    }
    md
}

/// The lowest and highest ratio of `e`'s runs to `base`'s run of the same round, by `value`:
/// `None` unless both have a number in every round (a failed run shifts the rounds).
fn round_ratios(e: &Entry, base: &Entry, value: fn(&Sample) -> Option<f64>) -> Option<(f64, f64)> {
    if !e.errors.is_empty() || !base.errors.is_empty() || e.samples.len() != base.samples.len() {
        return None;
    }
    let ratios = e
        .samples
        .iter()
        .zip(&base.samples)
        .map(|(s, b)| Some(value(s)? / value(b).filter(|v| *v > 0.0)?))
        .collect::<Option<Vec<f64>>>()?;
    let lo = ratios.iter().copied().reduce(f64::min)?;
    let hi = ratios.iter().copied().reduce(f64::max)?;
    Some((lo, hi))
}

/// The per-round table: for each proxy but HAProxy, the lowest and highest of its ratios to
/// HAProxy's run of the same round (the targets of a round run one after the other, so a pair
/// saw the same machine), for CPU per request and requests/s. A median can sit on either side
/// of 1.00× while the rounds disagree; this shows by how much.
fn spread_table(cells: &[Cell], targets: &[Target], results: &Results) -> String {
    let others: Vec<Target> = targets
        .iter()
        .copied()
        .filter(|t| *t != Target::Haproxy && *t != Target::Origin)
        .collect();
    if others.is_empty() || !targets.contains(&Target::Haproxy) {
        return String::new();
    }
    let cols: String = others.iter().map(|t| format!(" {} |", t.label())).collect();
    let rule: String = others.iter().map(|_| "---:|").collect();
    let mut s = format!(
        "\n### Per round: × HAProxy's run of the same round, lowest – highest \
         (CPU per request · requests/s)\n\n| test | size |{cols}\n|---|---:|{rule}\n"
    );
    let range =
        |r: Option<(f64, f64)>| r.map_or("–".into(), |(lo, hi)| format!("{lo:.2}–{hi:.2}"));
    for cell in cells {
        let Some(base) = results.get(&(*cell, Target::Haproxy)) else {
            continue;
        };
        let _ = write!(s, "| {} | {} |", cell.test.label(), size_label(cell.size));
        for t in &others {
            let text = match results.get(&(*cell, *t)) {
                Some(e) => format!(
                    "{} · {}",
                    range(round_ratios(e, base, Sample::cpu_per_100k)),
                    range(round_ratios(e, base, |x| Some(x.outcome.good_per_second())))
                ),
                None => "–".into(),
            };
            let _ = write!(s, " {text} |");
        }
        s.push('\n');
    }
    s
}

/// Headway against the matrix's two targets, read off the medians of the L7 cells: CPU per
/// request at or below HAProxy's, and requests/s above NGINX's (left out under a paced load,
/// where requests/s is the offered rate). Each miss is listed with its ratio and, with more
/// than one round, the range of its per-round ratios, so a miss inside the noise reads as one;
/// a cell where Headway has no result is a miss too. Cells the other proxy has no result in
/// are left out. Empty unless Headway and the proxy it is compared with were measured.
fn target_summary(cells: &[Cell], targets: &[Target], results: &Results, paced: bool) -> String {
    if !targets.contains(&Target::Headway) {
        return String::new();
    }
    let mut lines = Vec::new();
    let mut check = |peer: Target,
                     what: &str,
                     value: fn(&Entry) -> Option<f64>,
                     round: fn(&Sample) -> Option<f64>,
                     good: fn(f64) -> bool| {
        if !targets.contains(&peer) {
            return;
        }
        let mut measured = 0;
        let mut misses = Vec::new();
        for cell in cells.iter().filter(|c| c.test.is_l7()) {
            let Some(b) = results.get(&(*cell, peer)) else {
                continue;
            };
            let Some(bv) = value(b).filter(|v| *v > 0.0) else {
                continue;
            };
            measured += 1;
            // A cell the peer answered and Headway did not is a miss, not a cell left out.
            let Some((e, v)) = results
                .get(&(*cell, Target::Headway))
                .and_then(|e| Some((e, value(e)?)))
            else {
                misses.push(format!("{} (no result)", cell.label()));
                continue;
            };
            let ratio = v / bv;
            if !good(ratio) {
                let rounds = match round_ratios(e, b, round) {
                    Some((lo, hi)) if e.samples.len() > 1 => format!(" (rounds {lo:.2}–{hi:.2})"),
                    _ => String::new(),
                };
                // A miss by less than 0.005 would read "1.00×": one more digit.
                let shown = match format!("{ratio:.2}") {
                    t if t == "1.00" => format!("{ratio:.3}"),
                    t => t,
                };
                misses.push(format!("{} {shown}×{rounds}", cell.label()));
            }
        }
        if measured == 0 {
            return;
        }
        let mut line = format!(
            "- {what}: {} of {measured} L7 cells",
            measured - misses.len()
        );
        if !misses.is_empty() {
            let _ = write!(line, "; not in {}", misses.join(", "));
        }
        line.push('.');
        lines.push(line);
    };
    check(
        Target::Haproxy,
        "CPU per request at or below HAProxy's",
        Entry::cpu_per_100k,
        Sample::cpu_per_100k,
        |r| r <= 1.0,
    );
    if !paced {
        check(
            Target::Nginx,
            "Requests/s above NGINX's",
            Entry::rps,
            |s| Some(s.outcome.good_per_second()),
            |r| r > 1.0,
        );
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "\n### Headway against the targets (medians)\n\n{}\n",
        lines.join("\n")
    )
}

/// The CSV: one row per run and a `median` row per cell and target (with the ratios to HAProxy).
fn render_csv(cells: &[Cell], targets: &[Target], results: &Results) -> String {
    let mut csv = String::from(
        "test,size_bytes,target,run,good_responses,seconds,requests_per_s,cpu_seconds,\
         cpu_s_per_100k,socket_errors,bad_status,latency_mean_ms,latency_p99_ms,\
         rps_vs_haproxy,cpu_vs_haproxy\n",
    );
    let opt = |v: Option<f64>, p: usize| v.map(|v| format!("{v:.p$}")).unwrap_or_default();
    for cell in cells {
        let base = results.get(&(*cell, Target::Haproxy));
        for &t in targets {
            let Some(e) = results.get(&(*cell, t)) else {
                continue;
            };
            let key = format!("{},{},{}", cell.test.key(), cell.size, t.key());
            for (i, s) in e.samples.iter().enumerate() {
                let o = &s.outcome;
                let _ = writeln!(
                    csv,
                    "{key},{},{},{:.3},{:.1},{:.3},{},{},{},{},{},,",
                    i + 1,
                    o.good,
                    o.seconds,
                    o.good_per_second(),
                    s.cpu_seconds,
                    opt(s.cpu_per_100k(), 4),
                    o.socket_errors,
                    o.bad_status(),
                    opt(o.latency_mean_ms, 3),
                    opt(o.latency_p99_ms, 3),
                );
            }
            let ratio = |f: fn(&Entry) -> Option<f64>| match (f(e), base.and_then(f)) {
                (Some(v), Some(b)) if b > 0.0 => format!("{:.4}", v / b),
                _ => String::new(),
            };
            let (sock, bad) = e.trouble();
            let _ = writeln!(
                csv,
                "{key},median,,,{},,{},{sock},{bad},,,{},{}",
                opt(e.rps(), 1),
                opt(e.cpu_per_100k(), 4),
                ratio(Entry::rps),
                ratio(Entry::cpu_per_100k),
            );
        }
    }
    csv
}

/// `1234567` → `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// CPU-seconds with three significant digits or two decimals.
fn fmt_cpu(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(good: u64, seconds: f64, cpu: f64) -> Sample {
        Sample {
            outcome: Outcome {
                responses: good,
                good,
                seconds,
                socket_errors: 0,
                latency_mean_ms: Some(1.0),
                latency_p99_ms: None,
            },
            cpu_seconds: cpu,
        }
    }

    /// An entry of one-second runs: (good responses, CPU-seconds) each.
    fn entry(runs: &[(u64, f64)]) -> Entry {
        Entry {
            samples: runs.iter().map(|&(g, c)| sample(g, 1.0, c)).collect(),
            errors: vec![],
        }
    }

    #[test]
    fn the_full_matrix_is_eighteen_cells_in_report_order() {
        let all = cells(false, &[], &[]);
        assert_eq!(all.len(), 1 + 3 * 5 + 2);
        assert_eq!(
            all[0],
            Cell {
                test: Test::L4,
                size: 128
            }
        );
        assert_eq!(
            all[1],
            Cell {
                test: Test::L7One,
                size: 128
            }
        );
        assert_eq!(
            all[5],
            Cell {
                test: Test::L7One,
                size: 512 << 10
            }
        );
        assert_eq!(
            all[16],
            Cell {
                test: Test::H2,
                size: 128
            }
        );
        assert_eq!(
            all[17],
            Cell {
                test: Test::H2Both,
                size: 128
            }
        );
    }

    #[test]
    fn quick_and_filters_select_cells() {
        let quick = cells(true, &[], &[]);
        let keys: Vec<_> = quick.iter().map(|c| (c.test.key(), c.size)).collect();
        assert_eq!(
            keys,
            [
                ("l4", 128),
                ("l7-1", 128),
                ("l7-10", 128),
                ("l7-unlimited", 128),
                ("l7-unlimited", 65536),
                ("h2", 128),
                ("h2-h2", 128)
            ]
        );
        // --sizes applies to the L7 tests only; L4 and HTTP/2 stay at 128 B.
        let some = cells(false, &[Test::L4, Test::L7Ten], &[1 << 20]);
        assert_eq!(
            some,
            [
                Cell {
                    test: Test::L4,
                    size: 128
                },
                Cell {
                    test: Test::L7Ten,
                    size: 1 << 20
                }
            ]
        );
        assert!(cells(false, &[Test::H2], &[])
            .iter()
            .all(|c| c.test == Test::H2));
    }

    #[test]
    fn entries_take_medians_of_good_responses_and_cpu() {
        let mut e = Entry::default();
        e.samples.push(sample(30_000, 3.0, 1.5)); // 10,000/s, 5 CPU-s/100k
        e.samples.push(sample(60_000, 3.0, 1.2)); // 20,000/s, 2
        e.samples.push(sample(45_000, 3.0, 4.5)); // 15,000/s, 10
        assert_eq!(e.rps(), Some(15_000.0));
        assert_eq!(e.cpu_per_100k(), Some(5.0));
        assert_eq!(e.trouble(), (0, 0));
        e.samples[0].outcome.good = 29_000;
        e.samples[0].outcome.socket_errors = 3;
        assert_eq!(e.trouble(), (3, 1000));
        assert_eq!(Entry::default().rps(), None);
    }

    fn header() -> Header {
        Header {
            command: "headway bench adc --quick".into(),
            host: "Linux 6, 2 CPUs (x)".into(),
            versions: "headway 0, HAProxy 2.6".into(),
            seconds: 2,
            repeats: 1,
            args: AdcArgs {
                proxies: vec![],
                quick: true,
                tests: vec![],
                sizes: vec![],
                seconds: None,
                repeats: None,
                workers: 2,
                origin_workers: 2,
                threads: 2,
                connections: 64,
                streams: 10,
                out: PathBuf::new(),
                cache: false,
                microcache: false,
                compression: false,
                tls: false,
                websocket: false,
                paced: None,
            },
            tcp: "net.ipv4.tcp_tw_reuse = 2".into(),
            load: ("0.5 / 0.4 / 0.3".into(), "1.9 / 1.0 / 0.6".into()),
        }
    }

    #[test]
    fn the_per_round_table_pairs_each_run_with_haproxys_of_the_same_round() {
        let l7 = Cell {
            test: Test::L7Ten,
            size: 128,
        };
        let targets = [Target::Haproxy, Target::Nginx, Target::Headway];
        let mut r = Results::new();
        // HAProxy: 10,000/s at 1.0 CPU-s per 10,000 (10 per 100k), then 20,000/s at 10.
        r.insert(
            (l7, Target::Haproxy),
            entry(&[(10_000, 1.0), (20_000, 2.0)]),
        );
        // Headway: CPU 0.9× then 1.1×, requests/s 1.0× then 0.95×.
        r.insert(
            (l7, Target::Headway),
            entry(&[(10_000, 0.9), (19_000, 2.09)]),
        );
        // NGINX: one run failed, so its rounds cannot be paired.
        let mut nginx = entry(&[(10_000, 1.0)]);
        nginx.errors.push("wrk exited 1".into());
        r.insert((l7, Target::Nginx), nginx);
        let mut h = header();
        h.repeats = 2;
        let md = render_markdown(&h, &[], &[l7], &targets, &r, &[]);
        assert!(
            md.contains("| L7 10 req/conn | 128 B | – · – | 0.90–1.10 · 0.95–1.00 |"),
            "{md}"
        );
        h.repeats = 1;
        let md = render_markdown(&h, &[], &[l7], &targets, &r, &[]);
        assert!(!md.contains("Per round"), "{md}");
    }

    #[test]
    fn the_report_counts_the_l7_cells_that_meet_the_targets_and_names_the_misses() {
        let one = Cell {
            test: Test::L7One,
            size: 128,
        };
        let ten = Cell {
            test: Test::L7Ten,
            ..one
        };
        let l4 = Cell {
            test: Test::L4,
            ..one
        };
        let targets = [Target::Haproxy, Target::Nginx, Target::Headway];
        let mut r = Results::new();
        for cell in [one, ten, l4] {
            // HAProxy: 10,000/s at 10 CPU-s per 100k; NGINX: 10,500/s.
            r.insert((cell, Target::Haproxy), entry(&[(10_000, 1.0); 3]));
            r.insert((cell, Target::Nginx), entry(&[(10_500, 1.0); 3]));
        }
        // Meets both: 11,000/s at 9.09.
        r.insert((one, Target::Headway), entry(&[(11_000, 1.0); 3]));
        // Misses both: CPU 0.95×, 1.05×, 1.20× (median 1.05×) at 10,000/s, 0.95× NGINX's.
        r.insert(
            (ten, Target::Headway),
            entry(&[(10_000, 0.95), (10_000, 1.05), (10_000, 1.2)]),
        );
        // L4 is not an L7 cell: not counted.
        r.insert((l4, Target::Headway), entry(&[(1_000, 1.0); 3]));
        let mut h = header();
        h.repeats = 3;
        let md = render_markdown(&h, &[], &[l4, one, ten], &targets, &r, &[]);
        assert!(
            md.contains("### Headway against the targets (medians)"),
            "{md}"
        );
        assert!(
            md.contains(
                "- CPU per request at or below HAProxy's: 1 of 2 L7 cells; not in \
                 L7 10 req/conn 128 B 1.05× (rounds 0.95–1.20)."
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "- Requests/s above NGINX's: 1 of 2 L7 cells; not in L7 10 req/conn 128 B \
                 0.95× (rounds 0.95–0.95)."
            ),
            "{md}"
        );
        // A miss that rounds to 1.00× shows a third digit.
        r.insert((ten, Target::Headway), entry(&[(10_000, 1.003); 3]));
        let md = render_markdown(&h, &[], &[one, ten], &targets, &r, &[]);
        assert!(
            md.contains("not in L7 10 req/conn 128 B 1.003× (rounds 1.00–1.00)."),
            "{md}"
        );
        // Under a paced load requests/s is the offered rate: no verdict on it.
        h.args.paced = Some(8_000);
        let md = render_markdown(&h, &[], &[one, ten], &targets, &r, &[]);
        assert!(
            md.contains("- CPU per request at or below HAProxy's: 1 of 2"),
            "{md}"
        );
        assert!(!md.contains("Requests/s above NGINX's"), "{md}");
        // Headway without a result where the others have one: a miss.
        let mut failed = r.clone();
        failed.insert(
            (ten, Target::Headway),
            Entry {
                samples: vec![],
                errors: vec!["wrk exited 1".into()],
            },
        );
        let md = render_markdown(&h, &[], &[one, ten], &targets, &failed, &[]);
        assert!(
            md.contains(
                "at or below HAProxy's: 1 of 2 L7 cells; not in L7 10 req/conn 128 B (no result)."
            ),
            "{md}"
        );
        // Without Headway, or without the other proxies, there is nothing to say.
        let md = render_markdown(&h, &[], &[one], &[Target::Haproxy, Target::Nginx], &r, &[]);
        assert!(!md.contains("against the targets"), "{md}");
        let md = render_markdown(&h, &[], &[one], &[Target::Headway], &r, &[]);
        assert!(!md.contains("against the targets"), "{md}");
    }

    #[test]
    fn a_paced_report_says_how_it_was_paced() {
        let l7 = Cell {
            test: Test::L7Ten,
            size: 128,
        };
        let targets = [Target::Haproxy, Target::Headway];
        let plain = render_markdown(&header(), &[], &[l7], &targets, &Results::new(), &[]);
        assert!(!plain.contains("Paced load"), "{plain}");
        assert!(plain.contains("Requests/s (median; × HAProxy's; higher is better)"));
        let mut h = header();
        h.args.paced = Some(9_600);
        let md = render_markdown(&h, &[], &[l7], &targets, &Results::new(), &[]);
        assert!(md.contains("**Paced load** (`--paced 9600`)"), "{md}");
        assert!(md.contains("sends a request every 0.2083 ms"), "{md}");
        assert!(md.contains("asks at 150.00 requests/s"), "{md}");
        assert!(
            md.contains("Requests/s achieved under the paced load"),
            "{md}"
        );
    }

    #[test]
    fn the_report_shows_ratios_to_haproxy_failures_and_errors() {
        let l4 = Cell {
            test: Test::L4,
            size: 128,
        };
        let h2 = Cell {
            test: Test::H2,
            size: 128,
        };
        let targets = [
            Target::Origin,
            Target::Haproxy,
            Target::Nginx,
            Target::Headway,
        ];
        let mut r = Results::new();
        r.insert(
            (l4, Target::Origin),
            Entry {
                samples: vec![sample(90_000, 3.0, 3.0)],
                errors: vec![],
            },
        );
        r.insert(
            (l4, Target::Haproxy),
            Entry {
                samples: vec![sample(30_000, 3.0, 1.5)],
                errors: vec![],
            },
        );
        r.insert(
            (l4, Target::Nginx),
            Entry {
                samples: vec![sample(15_000, 3.0, 1.5)],
                errors: vec![],
            },
        );
        r.insert(
            (h2, Target::Haproxy),
            Entry {
                samples: vec![sample(30_000, 3.0, 1.5)],
                errors: vec![],
            },
        );
        r.insert(
            (h2, Target::Nginx),
            Entry {
                samples: vec![],
                errors: vec!["wrk printed no line".into()],
            },
        );
        let status = vec![
            (Target::Origin, "L7 127.0.0.1:1".into(), "ran (pid 1)".into()),
            (Target::Haproxy, "L7 127.0.0.1:2".into(), "ran (pid 2)".into()),
            (Target::Nginx, "L7 127.0.0.1:3".into(), "ran (pid 3)".into()),
            (
                Target::Headway,
                "L7 127.0.0.1:4".into(),
                "failed to start: exited (exit status: 64) before it was ready: error: unknown section".into(),
            ),
        ];
        let md = render_markdown(&header(), &status, &[l4, h2], &targets, &r, &[]);
        assert!(md.contains("Command: `headway bench adc --quick`"), "{md}");
        assert!(
            md.contains("0.5 / 0.4 / 0.3 at the start, 1.9 / 1.0 / 0.6 at the end"),
            "{md}"
        );
        assert!(
            md.contains("| Headway | L7 127.0.0.1:4 | failed to start: exited"),
            "{md}"
        );
        // requests/s: origin 30,000; HAProxy 10,000; NGINX 5,000 = 0.50×; Headway failed.
        assert!(
            md.contains(
                "| L4 conn/s (1 req/conn) | 128 B | 30,000 | 10,000 | 5,000 (0.50×) | failed |"
            ),
            "{md}"
        );
        // CPU per 100k: HAProxy 5.00, NGINX 10.0 = 2.00×.
        assert!(
            md.contains("| 3.33 | 5.00 | 10.0 (2.00×) | failed |"),
            "{md}"
        );
        // The origin does not speak HTTP/2; NGINX's run failed and is explained below.
        assert!(
            md.contains("| HTTP/2 (h2c) | 128 B | n/a | 10,000 | error † | failed |"),
            "{md}"
        );
        assert!(
            md.contains("- † HTTP/2 (h2c) 128 B, nginx: wrk printed no line"),
            "{md}"
        );
        assert!(md.contains("10 per connection on average"));

        let csv = render_csv(&[l4, h2], &targets, &r);
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].starts_with("test,size_bytes,target,run,"));
        assert!(
            lines.contains(&"l4,128,haproxy,1,30000,3.000,10000.0,1.500,5.0000,0,0,1.000,,,"),
            "{csv}"
        );
        assert!(
            lines.contains(&"l4,128,nginx,median,,,5000.0,,10.0000,0,0,,,0.5000,2.0000"),
            "{csv}"
        );
        assert!(lines.contains(&"h2,128,nginx,median,,,,,,0,0,,,,"), "{csv}");
        // Every row has the header's number of fields.
        let n = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == n), "{csv}");
    }

    #[test]
    fn versions_are_tidied() {
        assert_eq!(
            tidy_version("HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/"),
            "HAProxy 2.6.12-1+deb12u4"
        );
        assert_eq!(tidy_version("nginx version: nginx/1.22.1"), "nginx/1.22.1");
        assert_eq!(
            tidy_version("wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer"),
            "wrk debian/4.1.0-3+b2 [epoll]"
        );
        assert_eq!(
            tidy_version("h2load nghttp2/1.52.0"),
            "h2load nghttp2/1.52.0"
        );
    }

    #[test]
    fn numbers_are_formatted_for_reading() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(fmt_cpu(12.345), "12.3");
        assert_eq!(fmt_cpu(2.345), "2.35");
        assert_eq!(fmt_cpu(0.12345), "0.123");
        assert_eq!(size_label(128), "128 B");
        assert_eq!(size_label(512 << 10), "512 KiB");
        assert_eq!(size_label(1 << 20), "1 MiB");
        assert_eq!(size_label(1500), "1500 B");
    }
}
