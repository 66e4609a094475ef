//! `headway bench adc-tcp-profiles`: seed 003's TCP profiles at work — a web page downloaded
//! through Headway by emulated broadband, mobile and dial-up clients, with Linux's defaults,
//! with NetScaler's 1999 default profile, and with the population's AOL profile.
//!
//! The lab is the `pair` topology (client — emulated WAN — server; namespaces `--prefix`,
//! `hw-tcp-` by default). On the server host, `headway origin` listens on 127.0.0.1:8080 and one
//! `headway run` serves one HTTP virtual server per profile in front of it (198.18.0.2, a port
//! per profile), so the only difference between the rows of a population is the virtual
//! server's `tcp_profile`:
//!
//! | profile | virtual server | route to the client | server host sysctls |
//! |---|---|---|---|
//! | `default` | no `tcp_profile` (TCP_NODELAY, the rest Linux's defaults) | plain | SACK, WS on |
//! | `netscaler-default` | the preset (Nagle off, delayed ACK 100 ms, min RTO 100 ms) | `initcwnd 4` | SACK, WS off |
//! | `aol` | the population's preset: `aol-vip-std`, `aol-mobile`, `aol-dialup` | its `initcwnd`, `rto_min` | SACK, WS on |
//!
//! The per-route and host-wide parts of a profile are what Headway logs and does not set; the
//! lab sets them here, as an operator would (`ip route replace 198.18.0.1/32 dev s-wan initcwnd
//! 4 rto_min 500ms`, `sysctl net.ipv4.tcp_sack`), before each download and only for it.
//!
//! The populations take rate and RTT from the seed's assumptions for each profile (delay =
//! RTT/2 each way, a one-BDP queue of at least 50 packets as the lab's presets use); the seed
//! gives no loss rate, so `--loss` (default 0) applies to every population, each direction:
//!
//! | population | seed assumption | link |
//! |---|---|---|
//! | broadband | aol_vip_std: 10 Mbit/s per flow, 75 ms RTT | 10 Mbit/s, 37.5 ms each way |
//! | mobile | aol_vip_mobile_client: under 3 Mbit/s, RTT shifting 300–900 ms as the device moves | 3 Mbit/s; one-way delay 150 ms, switched to 450 ms and back every second during a download (RTT 300 ↔ 900 ms) |
//! | dial-up | aol_vip_dialup_client: 50 kbit/s, 500 ms RTT | 50 kbit/s, 250 ms each way |
//!
//! The page (`PAGE`): an HTML document of 16 KiB, then two HTML-like objects (CSS and script)
//! and six incompressible ones (images, 2–12 KiB), 78 KiB in all, fetched by `headway lab tool
//! page` as a browser does: the HTML, then the objects over `--parallel` (6) keep-alive
//! connections. Per download: the page time, and the server host's TCP counters before and
//! after (`/proc/net/snmp`, `/proc/net/netstat`): retransmitted segments (`Tcp.RetransSegs`),
//! retransmission timeouts (`TcpExt.TCPTimeouts`) and spurious ones detected
//! (`TcpExt.TCPSpuriousRTOs`). Over `--repeats` rounds, page times are medians and the
//! counters (small integers) means per page; within a round the profiles take turns in an order
//! that rotates every round. During the first round's downloads the bench captures `ss -tie` on
//! the server host, the evidence that the options are on the live sockets.
//!
//! Bounded: each download has a deadline (3 min for dial-up, 1 min otherwise); the default run
//! (3 populations × 3 profiles × 3 rounds) takes about three minutes, `--quick` (one round,
//! default and AOL profiles) under one. Everything is removed at the end, on error and on
//! Ctrl-C (the lab's guard).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::{Probability, Rate, SystemClock};
use headway_link::{Loss, Params, QueueLimit};

use super::median;
use crate::netstat::Counters;
use crate::page::PageReport;
use crate::presets::bdp_queue;
use crate::{interrupt, Dir, Lab, LabOptions, TopologyKind, WanMode};

/// The page: the HTML first, then its objects.
pub const PAGE: (&str, &[&str]) = (
    "/corpus/html/16KiB?seed=1",
    &[
        "/corpus/html/8KiB?seed=2",
        "/corpus/html/12KiB?seed=3",
        "/corpus/random/2KiB?seed=4",
        "/corpus/random/4KiB?seed=5",
        "/corpus/random/6KiB?seed=6",
        "/corpus/random/8KiB?seed=7",
        "/corpus/random/10KiB?seed=8",
        "/corpus/random/12KiB?seed=9",
    ],
);

/// `headway bench adc-tcp-profiles` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct TcpProfilesArgs {
    /// One round, the default and AOL profiles only (under a minute).
    #[arg(long)]
    pub quick: bool,
    /// Rounds; medians are reported [default: 3, or 1 with --quick].
    #[arg(long)]
    pub repeats: Option<u32>,
    /// The client populations.
    #[arg(long, value_delimiter = ',', default_value = "broadband,mobile,dialup")]
    pub populations: Vec<Population>,
    /// The profiles [default: default,netscaler-default,aol, or default,aol with --quick].
    #[arg(long, value_delimiter = ',')]
    pub profiles: Vec<Profile>,
    /// Loss on each direction of every population's link, percent (the seed gives none).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Connections of the page download (a browser's per-host limit).
    #[arg(long, default_value_t = 6)]
    pub parallel: u32,
    /// Seed of the emulated link's random sequences (jitter, loss).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Namespace prefix of this run's lab (state in /run/headway-lab/<prefix without `hw-`>).
    #[arg(long, default_value = "hw-tcp-")]
    pub prefix: String,
    /// Where to write adc-tcp-profiles.md and .csv.
    #[arg(long, default_value = "lab-out/bench")]
    pub out: PathBuf,
}

/// A client population of seed 003.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Population {
    /// 10 Mbit/s, 75 ms RTT (aol_vip_std's assumptions).
    Broadband,
    /// 3 Mbit/s, RTT 300–900 ms (aol_vip_mobile_client's).
    Mobile,
    /// 50 kbit/s, 500 ms RTT (aol_vip_dialup_client's).
    Dialup,
}

impl Population {
    /// Its name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Population::Broadband => "broadband",
            Population::Mobile => "mobile",
            Population::Dialup => "dial-up",
        }
    }

    /// The AOL preset made for it.
    pub fn aol_preset(self) -> &'static str {
        match self {
            Population::Broadband => "aol-vip-std",
            Population::Mobile => "aol-mobile",
            Population::Dialup => "aol-dialup",
        }
    }

    /// The link both ways, with `loss_pct` on each direction.
    pub fn link(self, loss_pct: f64) -> Params {
        // The mobile link starts at its shortest delay; `MOBILITY` moves it during a download.
        let (bps, one_way, queue_rtt) = match self {
            Population::Broadband => (10_000_000, Duration::from_micros(37_500), 75_000),
            Population::Mobile => (3_000_000, MOBILITY.0, 600_000),
            Population::Dialup => (50_000, Duration::from_millis(250), 500_000),
        };
        Params {
            rate: Some(Rate::from_bps(bps)),
            delay: one_way,
            loss: Probability::new(loss_pct / 100.0)
                .filter(|p| !p.is_zero())
                .map_or(Loss::None, Loss::Bernoulli),
            queue: QueueLimit {
                packets: Some(bdp_queue(bps, queue_rtt)),
                bytes: None,
            },
            ..Params::default()
        }
    }

    /// A download's deadline.
    pub fn deadline(self) -> Duration {
        match self {
            Population::Dialup => Duration::from_secs(180),
            _ => Duration::from_secs(60),
        }
    }

    /// What the seed published for this population.
    pub fn seed_result(self) -> &'static str {
        match self {
            Population::Broadband => {
                "+30 % outbound bit rate (WS, SACK, initial cwnd 10); retransmissions 850 K/min → \
                 150 K/min (×0.18) with min RTO 100 → 400 ms"
            }
            Population::Mobile => "retransmissions to mobile clients −30 % on average (×0.7)",
            Population::Dialup => "page render ~35 s → ~16 s (×0.46)",
        }
    }
}

/// The mobile population's moves: its one-way delay alternates between these two, switching
/// every `MOBILITY.2` during a download (RTT 300 ↔ 900 ms, the seed's range).
pub const MOBILITY: (Duration, Duration, Duration) = (
    Duration::from_millis(150),
    Duration::from_millis(450),
    Duration::from_secs(1),
);

/// Moves the mobile link's delay (see [`MOBILITY`]) until `stop`, then puts it back at the
/// shortest. Errors are printed and end the moves (the download goes on).
fn mobility(state: &crate::LabState, stop: &std::sync::atomic::AtomicBool) {
    use std::sync::atomic::Ordering;
    let set = |d: Duration| {
        let spec = format!("delay={}", headway_core::units::format_duration(d));
        crate::lab::set_link(state, "wan", Dir::Both, &spec)
    };
    let mut far = false;
    'moves: loop {
        let until = SystemClock::now() + MOBILITY.2;
        while SystemClock::now() < until {
            if stop.load(Ordering::Relaxed) {
                break 'moves;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        far = !far;
        if let Err(e) = set(if far { MOBILITY.1 } else { MOBILITY.0 }) {
            eprintln!("  mobility: {e:#}");
            break;
        }
    }
    if let Err(e) = set(MOBILITY.0) {
        eprintln!("  mobility: {e:#}");
    }
}

/// A column of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Profile {
    /// No profile: Linux's defaults (what Headway does without `tcp_profile`).
    Default,
    /// NetScaler's default profile of the seed (the seed's baseline).
    NetscalerDefault,
    /// The population's AOL profile.
    Aol,
}

impl Profile {
    /// The preset a population uses for this column, if any.
    pub fn preset(self, p: Population) -> Option<&'static str> {
        match self {
            Profile::Default => None,
            Profile::NetscalerDefault => Some("netscaler-default"),
            Profile::Aol => Some(p.aol_preset()),
        }
    }

    /// The column's name in tables.
    pub fn label(self, p: Population) -> &'static str {
        self.preset(p).unwrap_or("default (Linux)")
    }
}

/// One download's numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Page time, seconds.
    pub seconds: f64,
    /// Retransmitted segments on the server host.
    pub retrans: u64,
    /// Retransmission timeouts on the server host.
    pub timeouts: u64,
    /// Spurious timeouts detected on the server host.
    pub spurious: u64,
}

impl Sample {
    fn from(r: &PageReport, c: &Counters) -> Sample {
        Sample {
            seconds: r.total_seconds,
            retrans: c.get("Tcp.RetransSegs"),
            timeouts: c.get("TcpExt.TCPTimeouts"),
            spurious: c.get("TcpExt.TCPSpuriousRTOs"),
        }
    }
}

/// What one (population, profile) cell gathered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cell {
    /// Downloads that finished.
    pub samples: Vec<Sample>,
    /// Downloads that did not, with why.
    pub failures: Vec<String>,
}

impl Cell {
    /// The mean of `f` over the samples (counts are small integers: a median of 0, 0, 7
    /// would hide the 7).
    fn mean(&self, f: impl Fn(&Sample) -> u64) -> Option<f64> {
        let n = self.samples.len();
        (n > 0).then(|| self.samples.iter().map(f).sum::<u64>() as f64 / n as f64)
    }

    /// Median page time.
    pub fn seconds(&self) -> Option<f64> {
        median(&self.samples.iter().map(|s| s.seconds).collect::<Vec<_>>())
    }

    /// Mean retransmitted segments per page.
    pub fn retrans(&self) -> Option<f64> {
        self.mean(|s| s.retrans)
    }

    /// Mean retransmission timeouts per page.
    pub fn timeouts(&self) -> Option<f64> {
        self.mean(|s| s.timeouts)
    }

    /// Mean spurious timeouts per page.
    pub fn spurious(&self) -> Option<f64> {
        self.mean(|s| s.spurious)
    }
}

/// The first port of the virtual servers; profile `i` of [`VIRTUAL_SERVERS`] listens on
/// `BASE_PORT + i`.
const BASE_PORT: u16 = 8001;

/// The virtual servers of the run: `(name, tcp_profile)`.
const VIRTUAL_SERVERS: &[(&str, Option<&str>)] = &[
    ("default", None),
    ("netscaler-default", Some("netscaler-default")),
    ("aol-vip-std", Some("aol-vip-std")),
    ("aol-mobile", Some("aol-mobile")),
    ("aol-dialup", Some("aol-dialup")),
];

/// The port of the virtual server with profile `preset`.
fn port_of(preset: Option<&str>) -> u16 {
    let i = VIRTUAL_SERVERS
        .iter()
        .position(|(_, p)| *p == preset)
        .unwrap_or(0);
    BASE_PORT + i as u16
}

/// The `headway run` config: the origin as the only server, one virtual server per profile on
/// `server`.
pub fn adc_config(server: std::net::Ipv4Addr) -> String {
    let mut s = String::from(
        "# Written by `headway bench adc-tcp-profiles`.\n[admin]\nlisten = \"127.0.0.1:9290\"\n\n\
         [runtime]\nworkers = 1\n\n[[server_group]]\nname = \"origin\"\n\
         [[server_group.server]]\naddress = \"127.0.0.1:8080\"\n",
    );
    for (name, profile) in VIRTUAL_SERVERS {
        let _ = write!(
            s,
            "\n[[virtual_server]]\nname = \"{name}\"\nkind = \"http\"\nlisten = \"{server}:{}\"\n\
             group = \"origin\"\n",
            port_of(*profile)
        );
        if let Some(p) = profile {
            let _ = writeln!(s, "tcp_profile = \"{p}\"");
        }
    }
    s
}

/// The route and sysctl settings the server host needs for `preset` (route options towards the
/// client; SACK and window scaling): `(ip route words, sysctls)`.
pub fn host_settings(preset: Option<&str>) -> (Vec<String>, Vec<(&'static str, &'static str)>) {
    let profile = preset
        .and_then(headway_config::tcp::preset)
        .map(|p| p.profile());
    let route = profile
        .as_ref()
        .map(|p| p.route.ip_route_args())
        .unwrap_or_default();
    let want = |s: &str| {
        profile
            .as_ref()
            .and_then(|p| {
                p.host
                    .sysctls()
                    .into_iter()
                    .find(|(k, _)| *k == s)
                    .map(|(_, v)| v)
            })
            .unwrap_or("1")
    };
    let sysctls = vec![
        ("net.ipv4.tcp_sack", want("net.ipv4.tcp_sack")),
        (
            "net.ipv4.tcp_window_scaling",
            want("net.ipv4.tcp_window_scaling"),
        ),
    ];
    (route, sysctls)
}

/// Starts `headway origin` on 127.0.0.1:8080 and `headway run` with `config` (written to
/// `NAME.toml` in the lab's state directory) on the server host, and waits until both serve.
pub(super) fn start_server_host(
    lab: &Lab,
    exe: &str,
    name: &str,
    config: &str,
) -> Result<(crate::Background, crate::Background)> {
    let origin = lab.spawn("server", &[exe, "origin", "--listen", "127.0.0.1:8080"])?;
    let path = lab.state_dir().join(format!("{name}.toml"));
    std::fs::write(&path, config)?;
    let path = path.to_string_lossy().into_owned();
    let mut adc = lab.spawn("server", &[exe, "run", "-c", &path])?;
    adc.wait_line(Duration::from_secs(20), |l| l.trim() == "ready")
        .context("starting headway run in the server host")?;
    // The origin answers once its port does; `headway run` is ready before its first request.
    let ns = lab.namespace("server")?;
    let deadline = SystemClock::now() + Duration::from_secs(20);
    while !crate::netns::exec(
        ns,
        &[
            "curl",
            "-sf",
            "-o",
            "/dev/null",
            "http://127.0.0.1:8080/healthz",
        ],
    )
    .is_ok_and(|o| o.status.success())
    {
        anyhow::ensure!(SystemClock::now() < deadline, "the origin did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((origin, adc))
}

/// Runs the benchmark.
pub fn run(args: TcpProfilesArgs) -> Result<()> {
    let repeats = args
        .repeats
        .unwrap_or(if args.quick { 1 } else { 3 })
        .max(1);
    let profiles: Vec<Profile> = if !args.profiles.is_empty() {
        args.profiles.clone()
    } else if args.quick {
        vec![Profile::Default, Profile::Aol]
    } else {
        vec![Profile::Default, Profile::NetscalerDefault, Profile::Aol]
    };
    let mut populations = args.populations.clone();
    populations.sort();
    populations.dedup();
    anyhow::ensure!(
        (0.0..50.0).contains(&args.loss),
        "--loss {}: use 0 to 50 (percent)",
        args.loss
    );
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe_s = exe.to_string_lossy().into_owned();
    let lab = Lab::up(lab_options(&args, &exe)?)?;
    let server_ns = lab.namespace("server")?.to_string();
    let client_ip = lab.addresses().client;
    let server_ip = lab.server_addr();
    let (_origin, adc) =
        start_server_host(&lab, &exe_s, "adc-tcp-profiles", &adc_config(server_ip))?;
    eprintln!(
        "adc-tcp-profiles: {} populations × {} profiles × {repeats} rounds",
        populations.len(),
        profiles.len()
    );
    let started = SystemClock::now();
    // A first page through the transparent link: the origin and the proxy are up and warm.
    let pages = Downloader {
        lab: &lab,
        exe: &exe_s,
        server: server_ip,
        parallel: args.parallel,
    };
    pages
        .page(port_of(None), Duration::from_secs(30), None)
        .0
        .context("the first page through the lab")?;
    let mut cells: Vec<((Population, Profile), Cell)> = Vec::new();
    let mut evidence: Vec<(String, String)> = Vec::new();
    for &pop in &populations {
        lab.set_link("wan", Dir::Both, &pop.link(args.loss))?;
        for round in 0..repeats as usize {
            for k in 0..profiles.len() {
                interrupt::check()?;
                let prof = profiles[(k + round) % profiles.len()];
                let preset = prof.preset(pop);
                set_host(&server_ns, client_ip, preset)?;
                let before = crate::netstat::read(&server_ns)?;
                let port = port_of(preset);
                let stop = std::sync::atomic::AtomicBool::new(false);
                let state = lab.state().clone();
                let outcome = std::thread::scope(|sc| {
                    if pop == Population::Mobile {
                        sc.spawn(|| mobility(&state, &stop));
                    }
                    let ss_in = (round == 0).then_some(server_ns.as_str());
                    let (r, shown) = pages.page(port, pop.deadline(), ss_in);
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    if ss_in.is_some() {
                        evidence.push((format!("{} · {}", pop.label(), prof.label(pop)), shown));
                    }
                    r
                });
                let after = crate::netstat::read(&server_ns)?;
                let cell = match cells.iter_mut().find(|(key, _)| *key == (pop, prof)) {
                    Some((_, c)) => c,
                    None => {
                        cells.push(((pop, prof), Cell::default()));
                        &mut cells.last_mut().expect("just pushed").1
                    }
                };
                match outcome {
                    Ok(r) => {
                        let s = Sample::from(&r, &after.since(&before));
                        eprintln!(
                            "  {} · {} · round {}: {:.2} s, {} retransmitted, {} timeouts",
                            pop.label(),
                            prof.label(pop),
                            round + 1,
                            s.seconds,
                            s.retrans,
                            s.timeouts
                        );
                        cell.samples.push(s);
                    }
                    Err(e) if e.downcast_ref::<interrupt::Interrupted>().is_some() => {
                        return Err(e)
                    }
                    Err(e) => {
                        eprintln!("  {} · {}: {e:#}", pop.label(), prof.label(pop));
                        cell.failures.push(format!("{e:#}"));
                    }
                }
            }
        }
    }
    set_host(&server_ns, client_ip, None)?;
    let elapsed = SystemClock::now().duration_since(started);
    drop(adc);
    let md = render(
        &args,
        repeats,
        &populations,
        &profiles,
        &cells,
        &evidence,
        elapsed,
    );
    let csv = render_csv(&populations, &profiles, &cells);
    super::write_report(&args.out, "adc-tcp-profiles", &md, &csv)?;
    lab.down()
}

fn lab_options(args: &TcpProfilesArgs, exe: &std::path::Path) -> Result<LabOptions> {
    let mut opts = super::bench_lab(
        WanMode::Emulator {
            binary: exe.to_path_buf(),
            seed: Some(args.seed),
        },
        &args.prefix,
    )?;
    opts.topology = TopologyKind::Pair;
    Ok(opts)
}

/// Sets the server host's route to the client and its SACK / window-scaling sysctls for
/// `preset` (plain route and both on for `None`).
fn set_host(ns: &str, client: std::net::Ipv4Addr, preset: Option<&str>) -> Result<()> {
    let (route, sysctls) = host_settings(preset);
    let dest = format!("{client}/32");
    // The lab's congestion control stays (its routes carry it where the namespace default
    // cannot be set; see `crate::topology`).
    let mut argv = vec![
        "route",
        "replace",
        &dest,
        "dev",
        "s-wan",
        "congctl",
        crate::topology::HOST_CC,
    ];
    argv.extend(route.iter().map(String::as_str));
    crate::netns::ip_in(ns, &argv)?;
    crate::netns::sysctl(ns, &sysctls)?;
    Ok(())
}

/// Where pages come from: the lab's client host downloads them from `server` over `parallel`
/// connections.
struct Downloader<'a> {
    lab: &'a Lab,
    exe: &'a str,
    server: std::net::Ipv4Addr,
    parallel: u32,
}

impl Downloader<'_> {
    /// One page through the virtual server on `port` within `deadline`. With `ss_in` (the
    /// server host's namespace), also `ss -tie` of that virtual server's connections two seconds
    /// in (or at the end of a shorter page), returned beside the result.
    fn page(
        &self,
        port: u16,
        deadline: Duration,
        ss_in: Option<&str>,
    ) -> (Result<PageReport>, String) {
        let to = format!("{}:{port}", self.server);
        let objects = PAGE.1.join(",");
        let parallel = self.parallel.to_string();
        let read_timeout = format!("{}s", deadline.as_secs());
        let argv = [
            self.exe,
            "lab",
            "tool",
            "page",
            "--to",
            &to,
            "--html",
            PAGE.0,
            "--objects",
            &objects,
            "--parallel",
            &parallel,
            "--read-timeout",
            &read_timeout,
        ];
        let mut child = match self.lab.spawn("client", &argv) {
            Ok(c) => c,
            Err(e) => return (Err(e), String::new()),
        };
        let Some(ns) = ss_in else {
            return (finish_page(child, deadline), String::new());
        };
        let sport = format!("( sport = :{port} )");
        let ss = || {
            crate::netns::exec(ns, &["ss", "-tie", "state", "established", &sport])
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        // The tool prints its line only at the end: waiting for it with a short deadline is a
        // bounded pause that ends early if the page is done.
        match child.wait_line(Duration::from_secs(2), |l| l.starts_with("result ")) {
            Ok(line) => {
                let shown = ss();
                (parse_result(&line), shown)
            }
            Err(e) if e.downcast_ref::<interrupt::Interrupted>().is_some() => {
                (Err(e), String::new())
            }
            Err(_) => {
                let shown = ss();
                (finish_page(child, deadline), shown)
            }
        }
    }
}

fn finish_page(child: crate::Background, deadline: Duration) -> Result<PageReport> {
    let (status, lines) = child.finish(deadline)?;
    let line = lines
        .iter()
        .find(|l| l.starts_with("result "))
        .with_context(|| format!("the page tool exited ({status}) without a result"))?;
    parse_result(line)
}

fn parse_result(line: &str) -> Result<PageReport> {
    let r: PageReport = serde_json::from_str(line.trim_start_matches("result "))
        .with_context(|| format!("unreadable page result {line:?}"))?;
    if r.objects != PAGE.1.len() {
        bail!("the page tool fetched {} objects", r.objects);
    }
    Ok(r)
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.digits$}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("×{:.2}", a / b),
        (Some(a), Some(b)) if a == 0.0 && b == 0.0 => "=".into(),
        _ => "–".into(),
    }
}

fn render(
    args: &TcpProfilesArgs,
    repeats: u32,
    populations: &[Population],
    profiles: &[Profile],
    cells: &[((Population, Profile), Cell)],
    evidence: &[(String, String)],
    elapsed: Duration,
) -> String {
    let get = |pop, prof| {
        cells
            .iter()
            .find(|(k, _)| *k == (pop, prof))
            .map(|(_, c)| c)
    };
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Seed 003: TCP profiles on emulated broadband, mobile and dial-up clients\n"
    );
    let _ = writeln!(
        md,
        "Command: `headway bench adc-tcp-profiles{}` ({repeats} round(s), {:.0} s). The page: \
         {} and {} objects (78 KiB), {} parallel keep-alive connections, through one Headway \
         HTTP virtual server per profile in front of `headway origin` on the server host of the \
         `pair` lab. Loss {} % each way (the seed gives none). Route options and SACK / window \
         scaling set on the server host for each download as the profile asks (see the module \
         doc). Page time: the median; retransmissions and timeouts: the mean per page of the server \
         host's `Tcp.RetransSegs`, `TcpExt.TCPTimeouts`, `TcpExt.TCPSpuriousRTOs` during the \
         download.\n",
        describe(args),
        elapsed.as_secs_f64(),
        PAGE.0,
        PAGE.1.len(),
        args.parallel,
        args.loss
    );
    let _ = writeln!(
        md,
        "| population | link | profile | page (s) | vs default | vs netscaler-default | \
         retransmitted segments | RTO timeouts | spurious RTOs | failed | seed's result |"
    );
    let _ = writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for &pop in populations {
        let base = get(pop, Profile::Default);
        let ns = get(pop, Profile::NetscalerDefault);
        for (i, &prof) in profiles.iter().enumerate() {
            let Some(c) = get(pop, prof) else { continue };
            let vs = |b: Option<&Cell>| {
                let t = ratio(c.seconds(), b.and_then(Cell::seconds));
                let r = ratio(c.retrans(), b.and_then(Cell::retrans));
                format!("{t} · retr. {r}")
            };
            let _ = writeln!(
                md,
                "| {} | {} | `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
                if i == 0 { pop.label() } else { "" },
                if i == 0 {
                    crate::spec::brief(&pop.link(args.loss))
                } else {
                    String::new()
                },
                prof.label(pop),
                fmt(c.seconds(), 2),
                if prof == Profile::Default {
                    "1".into()
                } else {
                    vs(base)
                },
                if prof == Profile::NetscalerDefault {
                    "1".into()
                } else {
                    vs(ns)
                },
                fmt(c.retrans(), 1),
                fmt(c.timeouts(), 1),
                fmt(c.spurious(), 1),
                c.failures.len(),
                if i == 0 { pop.seed_result() } else { "" }
            );
        }
    }
    let _ = writeln!(
        md,
        "\nThe seed's numbers come from AOL's production network (whole links, per minute); \
         the ratios (profile / baseline) are what compares. \"vs\" columns: page time ratio · \
         retransmission ratio.\n"
    );
    for (_, c) in cells {
        for f in &c.failures {
            let _ = writeln!(md, "- failure: {f}");
        }
    }
    if !evidence.is_empty() {
        let _ = writeln!(
            md,
            "\n### `ss -tie` on the server host during the first round's downloads\n"
        );
        for (label, text) in evidence {
            let _ = writeln!(md, "{label}:\n\n```\n{}\n```\n", text.trim_end());
        }
    }
    md
}

fn describe(args: &TcpProfilesArgs) -> String {
    let mut s = String::new();
    if args.quick {
        s += " --quick";
    }
    if let Some(r) = args.repeats {
        s += &format!(" --repeats {r}");
    }
    if args.loss != 0.0 {
        s += &format!(" --loss {}", args.loss);
    }
    if args.prefix != "hw-tcp-" {
        s += &format!(" --prefix {}", args.prefix);
    }
    s
}

fn render_csv(
    populations: &[Population],
    profiles: &[Profile],
    cells: &[((Population, Profile), Cell)],
) -> String {
    let mut csv = String::from(
        "population,profile,page_s,retrans_segs,rto_timeouts,spurious_rtos,samples,failures\n",
    );
    for &pop in populations {
        for &prof in profiles {
            let Some((_, c)) = cells.iter().find(|(k, _)| *k == (pop, prof)) else {
                continue;
            };
            let v = |x: Option<f64>| x.map(|v| format!("{v:.3}")).unwrap_or_default();
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{}",
                pop.label(),
                prof.label(pop),
                v(c.seconds()),
                v(c.retrans()),
                v(c.timeouts()),
                v(c.spurious()),
                c.samples.len(),
                c.failures.len()
            );
        }
    }
    csv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_has_one_virtual_server_per_profile_and_validates() {
        let text = adc_config(std::net::Ipv4Addr::new(198, 18, 0, 2));
        let c = headway_config::Config::parse(&text, "t.toml").unwrap();
        assert_eq!(c.adc.virtual_servers.len(), VIRTUAL_SERVERS.len());
        for pop in [
            Population::Broadband,
            Population::Mobile,
            Population::Dialup,
        ] {
            for prof in [Profile::Default, Profile::NetscalerDefault, Profile::Aol] {
                let port = port_of(prof.preset(pop));
                let v = c
                    .adc
                    .virtual_servers
                    .iter()
                    .find(|v| v.listen.port() == port)
                    .unwrap();
                assert_eq!(
                    v.tcp_profile.as_ref().map(|p| p.name.as_str()),
                    prof.preset(pop)
                );
            }
        }
    }

    #[test]
    fn host_settings_follow_the_preset() {
        let (route, sysctls) = host_settings(Some("aol-dialup"));
        assert_eq!(route, ["initcwnd", "4", "rto_min", "500ms"]);
        assert!(sysctls.iter().all(|(_, v)| *v == "1"));
        let (route, sysctls) = host_settings(Some("netscaler-default"));
        assert_eq!(route, ["initcwnd", "4"]);
        assert!(sysctls.iter().all(|(_, v)| *v == "0"));
        let (route, sysctls) = host_settings(None);
        assert!(route.is_empty());
        assert_eq!(sysctls.len(), 2);
    }

    #[test]
    fn links_follow_the_seeds_assumptions() {
        let d = Population::Dialup.link(0.0);
        assert_eq!(d.rate, Some(Rate::from_bps(50_000)));
        assert_eq!(d.delay, Duration::from_millis(250));
        assert_eq!(d.queue.packets, Some(50));
        let m = Population::Mobile.link(1.0);
        assert_eq!(m.delay, MOBILITY.0);
        assert_eq!(m.queue.packets, Some(150));
        assert!(matches!(m.loss, Loss::Bernoulli(_)));
        assert!(m.validate().is_ok());
    }

    #[test]
    fn arguments_parse() {
        let a: TcpProfilesArgs = crate::bench::tests::parse_args(&[
            "--quick",
            "--populations",
            "dialup,mobile",
            "--profiles",
            "default,aol",
        ])
        .unwrap();
        assert!(a.quick);
        assert_eq!(a.populations, [Population::Dialup, Population::Mobile]);
        assert_eq!(a.profiles, [Profile::Default, Profile::Aol]);
        assert_eq!(a.prefix, "hw-tcp-");
    }
}
