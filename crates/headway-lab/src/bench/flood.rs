//! `headway bench adc-flood`: a SYN flood against a Headway virtual server while ordinary
//! clients keep requesting — their success rate and latency at each flood rate, with the
//! kernel's SYN-cookie counters.
//!
//! The lab is the `pair` topology with a plain bridge as its WAN (namespaces `--prefix`,
//! `hw-flood-` by default); everything here crosses the direct client–server veth
//! (198.18.100.0/24), so no emulator sits in the way. On the server host `headway origin`
//! listens on 127.0.0.1:8080 and `headway run` serves two HTTP virtual servers in front of it on
//! 198.18.100.2: port 8000 for the pass with SYN cookies on (the host's default,
//! `net.ipv4.tcp_syncookies = 1`) and port 8001 for the pass with them off (skipped with
//! `--skip-cookies-off` and `--quick`),
//! so each pass meets a SYN queue of its own (half-open entries of a flood linger for about a
//! minute of SYN-ACK retries). Both keep the per-client limits on
//! (`max_connections_per_client`, `rate_per_client`), set well above what the ordinary clients
//! do.
//!
//! Each step of a pass, for `--step` seconds:
//!
//! - `headway lab tool syn-flood` on the client host sends SYNs from random addresses of
//!   198.19.0.0/16 (the server host routes that subnet back to the client host, which drops the
//!   SYN-ACKs: no address of it is local there) at the step's rate — 0 (the baseline), then the
//!   rising `--rates`, each capped at 200,000 SYN/s by the tool; the rate it reached is
//!   reported, since two cores may not reach the rate asked for;
//! - `headway lab tool clients` on the same host makes `--client-rate` requests per second, each
//!   on a new connection (a 2 KiB page), open loop, each failing after `--timeout` (connect
//!   included, so a dropped SYN costs its 1 s retransmission in the latency);
//! - the server host keeps no TCP metrics (`net.ipv4.tcp_no_metrics_save = 1`, flushed before
//!   each step), so every ordinary client is a new one to it, as most visitors of a site under
//!   attack are: without cookies, Linux lets SYNs through a nearly full SYN queue only from
//!   peers it has metrics for ("proven" peers), which would hide what happens to new ones;
//! - the server host's `/proc/net/netstat` before and after gives `SyncookiesSent`,
//!   `SyncookiesRecv`, `SyncookiesFailed`, `ListenOverflows`, `ListenDrops` and
//!   `TCPReqQFullDrop` for the step.
//!
//! Bounded: every tool stops by itself (the flooder after `--step`, the clients after `--step`
//! plus `--timeout`); the default run (5 steps of 8 s, two passes) takes about two minutes,
//! `--quick` (3 steps of 4 s, cookies on only) under a minute. The host's cookie setting is put
//! back between passes and everything is removed at the end, on error and on Ctrl-C.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use headway_core::units::{format_duration, parse_duration};
use headway_core::SystemClock;

use crate::clients::ClientsReport;
use crate::netstat::Counters;
use crate::synflood::{FloodReport, MAX_RATE};
use crate::{interrupt, Lab, LabOptions, TopologyKind, WanMode};

/// The virtual server's port with SYN cookies on; `+ 1` with them off.
const PORT: u16 = 8000;

/// The kernel counters the report shows, `(key, column)`.
pub const COUNTERS: [(&str, &str); 6] = [
    ("TcpExt.SyncookiesSent", "SyncookiesSent"),
    ("TcpExt.SyncookiesRecv", "SyncookiesRecv"),
    ("TcpExt.SyncookiesFailed", "SyncookiesFailed"),
    ("TcpExt.ListenOverflows", "ListenOverflows"),
    ("TcpExt.ListenDrops", "ListenDrops"),
    ("TcpExt.TCPReqQFullDrop", "TCPReqQFullDrop"),
];

/// `headway bench adc-flood` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct FloodArgs {
    /// Three steps (0, 10000, 100000 SYN/s) of 4 s with cookies on only.
    #[arg(long)]
    pub quick: bool,
    /// Flood rates after the baseline step, SYN/s, each at most 200000 [default:
    /// 1000,10000,50000,100000].
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<u64>,
    /// Length of each step [default: 8s, or 4s with --quick].
    #[arg(long, value_parser = parse_duration)]
    pub step: Option<Duration>,
    /// Ordinary clients' requests per second (a new connection each).
    #[arg(long, default_value_t = 50)]
    pub client_rate: u32,
    /// An ordinary request not answered within this long fails.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Skip the second pass, with SYN cookies off on the server host (--quick skips it too).
    #[arg(long)]
    pub skip_cookies_off: bool,
    /// Namespace prefix of this run's lab (state in /run/headway-lab/<prefix without `hw-`>).
    #[arg(long, default_value = "hw-flood-")]
    pub prefix: String,
    /// Where to write adc-flood.md and .csv.
    #[arg(long, default_value = "lab-out/bench")]
    pub out: PathBuf,
}

/// One step's numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// SYN cookies on during the step.
    pub cookies: bool,
    /// The rate asked for, SYN/s.
    pub rate: u64,
    /// What the flooder did (`None` for the baseline).
    pub flood: Option<FloodReport>,
    /// What the ordinary clients saw.
    pub clients: ClientsReport,
    /// The server host's counters during the step.
    pub counters: Counters,
}

/// The `headway run` config of the run.
pub fn adc_config(server: std::net::Ipv4Addr) -> String {
    let mut s = String::from(
        "# Written by `headway bench adc-flood`.\n[admin]\nlisten = \"127.0.0.1:9291\"\n\n\
         [runtime]\nworkers = 1\n\n[[server_group]]\nname = \"origin\"\n\
         [[server_group.server]]\naddress = \"127.0.0.1:8080\"\n",
    );
    for (name, port) in [("cookies-on", PORT), ("cookies-off", PORT + 1)] {
        let _ = write!(
            s,
            "\n[[virtual_server]]\nname = \"{name}\"\nkind = \"http\"\nlisten = \"{server}:{port}\"\n\
             group = \"origin\"\nbacklog = 4096\nmax_connections_per_client = 1000\n\
             rate_per_client = 5000\nrequest_header_timeout = \"5s\"\n"
        );
    }
    s
}

/// Runs the benchmark.
pub fn run(args: FloodArgs) -> Result<()> {
    let step = args.step.unwrap_or(if args.quick {
        Duration::from_secs(4)
    } else {
        Duration::from_secs(8)
    });
    anyhow::ensure!(
        step >= Duration::from_secs(1) && step <= Duration::from_secs(60),
        "--step: use 1s to 60s"
    );
    let rates: Vec<u64> = if !args.rates.is_empty() {
        args.rates.clone()
    } else if args.quick {
        vec![10_000, 100_000]
    } else {
        vec![1_000, 10_000, 50_000, 100_000]
    };
    if let Some(r) = rates.iter().find(|r| **r == 0 || **r > MAX_RATE) {
        anyhow::bail!("--rates: {r} SYN/s; use 1 to {MAX_RATE} (the baseline step is added)");
    }
    let passes: Vec<bool> = if args.quick || args.skip_cookies_off {
        vec![true]
    } else {
        vec![true, false]
    };
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();
    let lab = Lab::up(lab_options(&args)?)?;
    let server_ns = lab.namespace("server")?.to_string();
    let server = lab
        .server_direct_addr()
        .context("the pair topology has a direct link")?;
    let client = lab
        .addresses()
        .client_direct
        .context("the pair topology has a direct link")?;
    // SYN-ACKs to the spoofed sources go back to the client host, which drops them.
    crate::netns::ip_in(
        &server_ns,
        &["route", "add", "198.19.0.0/16", "via", &client.to_string()],
    )?;
    let cookies_before = sysctl_value(&server_ns, "net.ipv4.tcp_syncookies")?;
    // Every ordinary client is a new one to the server host (see the module doc).
    crate::netns::sysctl(&server_ns, &[("net.ipv4.tcp_no_metrics_save", "1")])?;
    let (_origin, adc) =
        super::tcp_profiles::start_server_host(&lab, &exe, "adc-flood", &adc_config(server))?;
    let steps_total = passes.len() * (1 + rates.len());
    eprintln!(
        "adc-flood: {steps_total} steps of {} (rates 0, {}), client rate {}/s",
        format_duration(step),
        rates
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        args.client_rate
    );
    let started = SystemClock::now();
    let mut steps = Vec::new();
    let result = (|| -> Result<()> {
        for &cookies in &passes {
            crate::netns::sysctl(
                &server_ns,
                &[("net.ipv4.tcp_syncookies", if cookies { "1" } else { "0" })],
            )?;
            let port = if cookies { PORT } else { PORT + 1 };
            for &rate in std::iter::once(&0).chain(&rates) {
                interrupt::check()?;
                let s = one_step(&lab, &exe, &server_ns, server, port, rate, step, &args)?;
                s.cookies_line();
                steps.push(s);
            }
        }
        Ok(())
    })();
    // Put the host's setting back whatever happened (the namespace goes away with the lab,
    // but a failed teardown should not leave cookies off).
    let _ = crate::netns::sysctl(&server_ns, &[("net.ipv4.tcp_syncookies", &cookies_before)]);
    result?;
    let elapsed = SystemClock::now().duration_since(started);
    drop(adc);
    let md = render(&args, step, &steps, elapsed);
    let csv = render_csv(&steps);
    super::write_report(&args.out, "adc-flood", &md, &csv)?;
    lab.down()
}

fn lab_options(args: &FloodArgs) -> Result<LabOptions> {
    let mut opts = super::bench_lab(WanMode::Bridge, &args.prefix)?;
    opts.topology = TopologyKind::Pair;
    Ok(opts)
}

fn sysctl_value(ns: &str, key: &str) -> Result<String> {
    let out = crate::netns::exec(ns, &["sysctl", "-n", key])?;
    anyhow::ensure!(out.status.success(), "reading {key} in {ns}");
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// One step: the flood (if `rate` > 0) and the clients side by side for `step`.
#[allow(clippy::too_many_arguments)]
fn one_step(
    lab: &Lab,
    exe: &str,
    server_ns: &str,
    server: std::net::Ipv4Addr,
    port: u16,
    rate: u64,
    step: Duration,
    args: &FloodArgs,
) -> Result<Step> {
    let to = format!("{server}:{port}");
    let secs = format!("{}ms", step.as_millis());
    crate::netns::ip_in(server_ns, &["tcp_metrics", "flush", "all"])?;
    let before = crate::netstat::read(server_ns)?;
    let flooder = if rate > 0 {
        let rate_s = rate.to_string();
        let mut f = lab.spawn(
            "client",
            &[
                exe,
                "lab",
                "tool",
                "syn-flood",
                "--to",
                &to,
                "--sources",
                "198.19.0.0/16",
                "--rate",
                &rate_s,
                "--duration",
                &secs,
            ],
        )?;
        f.wait_line(Duration::from_secs(10), |l| l.trim() == "ready")
            .context("starting the SYN flooder")?;
        Some(f)
    } else {
        None
    };
    let client_rate = args.client_rate.to_string();
    let timeout = format!("{}ms", args.timeout.as_millis());
    let mut clients = lab.spawn(
        "client",
        &[
            exe,
            "lab",
            "tool",
            "clients",
            "--to",
            &to,
            "--path",
            "/corpus/html/2KiB",
            "--rate",
            &client_rate,
            "--duration",
            &secs,
            "--timeout",
            &timeout,
        ],
    )?;
    clients.wait_line(Duration::from_secs(10), |l| l.trim() == "ready")?;
    let limit = step + args.timeout + Duration::from_secs(10);
    let clients = result_of::<ClientsReport>(clients, limit, "clients")?;
    let flood = match flooder {
        Some(f) => Some(result_of::<FloodReport>(f, limit, "syn-flood")?),
        None => None,
    };
    let after = crate::netstat::read(server_ns)?;
    Ok(Step {
        cookies: port == PORT,
        rate,
        flood,
        clients,
        counters: after.since(&before),
    })
}

/// The `result {json}` line of a finished tool.
fn result_of<T: serde::de::DeserializeOwned>(
    child: crate::Background,
    limit: Duration,
    what: &str,
) -> Result<T> {
    let (status, lines) = child.finish(limit)?;
    let line = lines
        .iter()
        .find(|l| l.starts_with("result "))
        .with_context(|| format!("the {what} tool exited ({status}) without a result"))?;
    serde_json::from_str(line.trim_start_matches("result "))
        .with_context(|| format!("unreadable {what} result {line:?}"))
}

impl Step {
    /// Prints the step's progress line.
    fn cookies_line(&self) {
        eprintln!(
            "  cookies {} · flood {} SYN/s (sent {:.0}/s, {} SYNs, {} refused or behind in {:.2} s): \
             clients {}/{} ok, p50 {}, p99 {}; cookies sent {}",
            if self.cookies { "on" } else { "off" },
            self.rate,
            self.flood.as_ref().map_or(0.0, |f| f.rate),
            self.flood.as_ref().map_or(0, |f| f.sent),
            self.flood.as_ref().map_or(0, |f| f.refused + f.behind),
            self.flood.as_ref().map_or(0.0, |f| f.seconds),
            self.clients.ok,
            self.clients.requests,
            ms(self.clients.quantile(0.5)),
            ms(self.clients.quantile(0.99)),
            self.counters.get("TcpExt.SyncookiesSent"),
        );
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |s| format!("{:.1} ms", s * 1e3))
}

fn render(args: &FloodArgs, step: Duration, steps: &[Step], elapsed: Duration) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Flood defense: ordinary clients during a SYN flood (issue 5, seed 002's SYN-cookie row)\n"
    );
    let _ = writeln!(
        md,
        "Command: `headway bench adc-flood{}` ({:.0} s). Steps of {}; ordinary clients: {} \
         requests/s, each on a new connection, failing after {}; the flood: spoofed SYNs from \
         198.19.0.0/16 to a Headway HTTP virtual server (backlog 4096) on the server host of \
         the `pair` lab, over its direct veth. Counters: the server host's `/proc/net/netstat` \
         during the step. Latency is the successful requests' (connect to last byte).\n",
        describe(args),
        elapsed.as_secs_f64(),
        format_duration(step),
        args.client_rate,
        format_duration(args.timeout)
    );
    let mut head = String::from(
        "| SYN cookies | flood asked (SYN/s) | flood sent (SYN/s) | clients ok | success | p50 | \
         p99 |",
    );
    let mut rule = String::from("|---|---:|---:|---:|---:|---:|---:|");
    for (_, col) in COUNTERS {
        head += &format!(" {col} |");
        rule += "---:|";
    }
    let _ = writeln!(md, "{head}\n{rule}");
    for s in steps {
        let mut row = format!(
            "| {} | {} | {} | {}/{} | {:.1} % | {} | {} |",
            if s.cookies { "on" } else { "off" },
            s.rate,
            s.flood
                .as_ref()
                .map_or_else(|| "–".into(), |f| format!("{:.0}", f.rate)),
            s.clients.ok,
            s.clients.requests,
            s.clients.success() * 100.0,
            ms(s.clients.quantile(0.5)),
            ms(s.clients.quantile(0.99)),
        );
        for (key, _) in COUNTERS {
            row += &format!(" {} |", s.counters.get(key));
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(
        md,
        "\nFailed requests by kind (connect timeouts / connect errors / no whole response): {}",
        steps
            .iter()
            .map(|s| format!(
                "{} {}: {}/{}/{}",
                if s.cookies { "on" } else { "off" },
                s.rate,
                s.clients.connect_timeouts,
                s.clients.connect_errors,
                s.clients.response_failures + s.clients.skipped
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    md
}

fn describe(args: &FloodArgs) -> String {
    let mut s = String::new();
    if args.quick {
        s += " --quick";
    }
    if !args.rates.is_empty() {
        s += &format!(
            " --rates {}",
            args.rates
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    if let Some(st) = args.step {
        s += &format!(" --step {}", format_duration(st));
    }
    if args.skip_cookies_off {
        s += " --skip-cookies-off";
    }
    if args.prefix != "hw-flood-" {
        s += &format!(" --prefix {}", args.prefix);
    }
    s
}

fn render_csv(steps: &[Step]) -> String {
    let mut csv =
        String::from("syncookies,flood_rate_asked,flood_rate_sent,requests,ok,success,p50_s,p99_s");
    for (_, col) in COUNTERS {
        csv += &format!(",{col}");
    }
    csv.push('\n');
    for s in steps {
        let q = |x: Option<f64>| x.map(|v| format!("{v:.4}")).unwrap_or_default();
        let _ = write!(
            csv,
            "{},{},{},{},{},{:.4},{},{}",
            u8::from(s.cookies),
            s.rate,
            s.flood
                .as_ref()
                .map(|f| format!("{:.0}", f.rate))
                .unwrap_or_default(),
            s.clients.requests,
            s.clients.ok,
            s.clients.success(),
            q(s.clients.quantile(0.5)),
            q(s.clients.quantile(0.99)),
        );
        for (key, _) in COUNTERS {
            let _ = write!(csv, ",{}", s.counters.get(key));
        }
        csv.push('\n');
    }
    csv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_validates_with_two_listeners_and_the_limits_on() {
        let c = headway_config::Config::parse(
            &adc_config(std::net::Ipv4Addr::new(198, 18, 100, 2)),
            "t.toml",
        )
        .unwrap();
        let ports: Vec<u16> = c
            .adc
            .virtual_servers
            .iter()
            .map(|v| v.listen.port())
            .collect();
        assert_eq!(ports, [PORT, PORT + 1]);
        assert!(c
            .adc
            .virtual_servers
            .iter()
            .all(|v| v.backlog == 4096 && v.rate_per_client == 5000));
    }

    #[test]
    fn arguments_parse_and_rows_render() {
        let a: FloodArgs =
            crate::bench::tests::parse_args(&["--quick", "--rates", "1000,2000"]).unwrap();
        assert_eq!(a.rates, [1000, 2000]);
        let mut counters = Counters::default();
        counters.0.insert("TcpExt.SyncookiesSent".into(), 1234);
        let s = Step {
            cookies: true,
            rate: 1000,
            flood: Some(FloodReport {
                sent: 4000,
                refused: 0,
                behind: 0,
                seconds: 4.0,
                rate: 1000.0,
            }),
            clients: ClientsReport {
                requests: 10,
                ok: 9,
                latencies: vec![0.001; 9],
                ..ClientsReport::default()
            },
            counters,
        };
        let md = render(
            &a,
            Duration::from_secs(4),
            std::slice::from_ref(&s),
            Duration::ZERO,
        );
        assert!(
            md.contains("| on | 1000 | 1000 | 9/10 | 90.0 % | 1.0 ms | 1.0 ms | 1234 |"),
            "{md}"
        );
        let csv = render_csv(&[s]);
        assert!(
            csv.lines()
                .nth(1)
                .unwrap()
                .starts_with("1,1000,1000,10,9,0.9000,"),
            "{csv}"
        );
    }
}
