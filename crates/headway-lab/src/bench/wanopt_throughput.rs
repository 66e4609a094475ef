//! `headway bench wanopt throughput`: LAN-side throughput of the WAN-optimizer pair over an
//! unconstrained link, per service class, as a ratio to the same path with the appliances
//! stopped (the "≥ 1 Gbit/s through the tunnel, as a ratio to the direct link").
//!
//! The lab is the `branch` topology with a Linux bridge in the WAN namespace (no emulator, no
//! rate limit, no delay; `--emulator` puts `headway emulate` with no limit there instead). The
//! paths measured, one after the other:
//!
//! - **direct**: both appliances stopped; the branch and DC hosts only route;
//! - **each class** of `--classes` (default `compress`, `dedup-memory`, `dedup-disk`): both
//!   stores wiped, the pair started with every client–server flow intercepted into that class
//!   (the tunnel told `--link-rate` and `--rtt`). `pass-through` can be asked for, but the
//!   pair's rules do not intercept pass-through flows (they are routed on untouched), so it
//!   measures the direct path with idle appliances.
//!
//! On each path, `--repeats` runs of `--seconds` of each of:
//!
//! - **iperf3**, client → server and server → client (`-R`). iperf3 sends one random buffer
//!   (128 KiB) over and over: after its first pass the dedup classes send references only, so
//!   these rows measure the encoder and decoder on known data, not the tunnel's data rate;
//! - **random**, `headway lab tool xfer --stream up|down`: the non-repeating `random` corpus
//!   stream (a new seed for every run), so nothing can be compressed or deduplicated, every
//!   byte verified at the far end.
//!
//! Each row gives the median in Mbit/s, the runs, the ratio to the direct path for the same
//! payload and direction, and the branch appliance's data reduction (LAN / WAN bytes) over the
//! row's runs. The lab's interfaces keep the kernel's offloads here (GSO/GRO/TSO and
//! checksums, as production NICs do; the tunnel's QUIC sends batches with UDP GSO and receives
//! them coalesced with GRO); `--no-offloads` switches them off as the emulator's labs do, so
//! every frame is a real ≤ 1500-byte packet handled one by one. Every process of the lab shares
//! this host's CPUs: the numbers are this host's, not a line rate.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::units::parse_duration;
use headway_core::Rate;

use super::emulator::{iperf, iperf_server, which};
use super::median;
use crate::optimizer::{Pair, PairOptions, Side, Traffic};
use crate::xfer::StreamReport;
use crate::Lab;

/// The xfer server's port on the server host.
const XFER_PORT: u16 = 9000;

/// `headway bench wanopt throughput` arguments.
#[derive(Debug, clap::Args)]
pub struct ThroughputArgs {
    /// Seconds per run.
    #[arg(long, default_value_t = 10)]
    pub seconds: u32,
    /// Runs per path, payload and direction (medians are reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
    /// Service classes to measure through the pair (pass-through, compress, dedup-memory,
    /// dedup-disk).
    #[arg(long, value_delimiter = ',', default_value = "compress,dedup-memory,dedup-disk", value_parser = parse_class)]
    pub classes: Vec<&'static str>,
    /// The link rate the tunnel is told (it paces at it and sizes its windows by it).
    #[arg(long, default_value = "10gbit")]
    pub link_rate: Rate,
    /// The round-trip time the tunnel is told (its first estimate; flow-control windows are
    /// 4 and 8 × link rate × this).
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    pub rtt: Duration,
    /// Bridge the WAN with `headway emulate` (no limit) instead of a Linux bridge.
    #[arg(long)]
    pub emulator: bool,
    /// Switch the lab interfaces' offloads off (every frame a real ≤ MTU packet, as the
    /// emulator needs); by default the bridged link keeps them, as production NICs do.
    #[arg(long)]
    pub no_offloads: bool,
    /// Namespace prefix of this run's lab (state in /run/headway-lab/<prefix without `hw-`>).
    #[arg(long, default_value = "hw-tput-")]
    pub prefix: String,
    /// Where to write throughput.md and throughput.csv.
    #[arg(long, default_value = "lab-out/bench")]
    pub out: PathBuf,
}

/// A service class name as the pair's config spells it.
fn parse_class(s: &str) -> Result<&'static str, String> {
    ["pass-through", "compress", "dedup-memory", "dedup-disk"]
        .into_iter()
        .find(|c| *c == s)
        .ok_or_else(|| {
            format!("unknown class {s:?} (pass-through, compress, dedup-memory, dedup-disk)")
        })
}

/// What a run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// iperf3's one random buffer, repeated.
    Iperf,
    /// The non-repeating random stream of `lab tool xfer --stream`.
    Random,
}

impl Payload {
    /// How the report names it.
    pub fn label(self) -> &'static str {
        match self {
            Payload::Iperf => "iperf3 (one 128 KiB buffer repeated)",
            Payload::Random => "random, non-repeating (xfer --stream)",
        }
    }
}

/// Which way the data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Client to server (through the branch appliance's encoder).
    Up,
    /// Server to client (through the DC appliance's encoder).
    Down,
}

impl Way {
    fn label(self) -> &'static str {
        match self {
            Way::Up => "client → server",
            Way::Down => "server → client",
        }
    }
}

/// The measurements of one path, payload and direction.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `direct`, or the class.
    pub path: &'static str,
    /// What was sent.
    pub payload: Payload,
    /// Which way.
    pub way: Way,
    /// Bits per second of every run.
    pub runs: Vec<f64>,
    /// The branch appliance's bytes over all runs (zero on the direct path).
    pub traffic: Traffic,
}

impl Row {
    /// The median of the runs, bits per second.
    pub fn median(&self) -> f64 {
        median(&self.runs).unwrap_or(0.0)
    }
}

/// Runs the benchmark.
pub fn run(args: ThroughputArgs) -> Result<()> {
    which("iperf3")?;
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();
    let wan = if args.emulator {
        crate::WanMode::Emulator {
            binary: PathBuf::from(&exe),
            seed: Some(1),
        }
    } else if args.no_offloads {
        crate::WanMode::Bridge
    } else {
        crate::WanMode::BridgeOffloaded
    };
    let lab = Lab::up(super::bench_lab(wan, &args.prefix)?)?;
    let server = lab.addresses().server.to_string();
    let _iperf = iperf_server(&lab)?;
    let xfer_addr = format!("{server}:{XFER_PORT}");
    let mut xserver = lab.spawn(
        "server",
        &[&exe, "lab", "tool", "xfer-server", "--listen", &xfer_addr],
    )?;
    xserver.wait_line(Duration::from_secs(10), |l| l == "ready")?;
    let options = |class| PairOptions {
        link_rate_bps: args.link_rate.bps(),
        rtt: args.rtt,
        class,
        ..PairOptions::default()
    };
    let mut pair = Pair::new(&lab, &exe, &options("dedup-disk"))?;
    let secs = args.seconds.max(1).to_string();
    let duration = format!("{secs}s");
    let mut seed = 0u64;
    let mut rows: Vec<Row> = Vec::new();
    let paths: Vec<&'static str> = std::iter::once("direct")
        .chain(args.classes.iter().copied())
        .collect();
    for path in paths {
        pair.stop_both()?;
        if path != "direct" {
            pair.reconfigure(&options(path))?;
            for side in Side::BOTH {
                pair.wipe_store(side)?;
            }
            pair.start_both()?;
        }
        let mut path_rows: Vec<Row> = [Payload::Iperf, Payload::Random]
            .into_iter()
            .flat_map(|payload| {
                [Way::Up, Way::Down].map(|way| Row {
                    path,
                    payload,
                    way,
                    runs: Vec::new(),
                    traffic: Traffic::default(),
                })
            })
            .collect();
        for i in 0..args.repeats.max(1) {
            for row in &mut path_rows {
                let before = traffic(&pair, path)?;
                let bps = match row.payload {
                    Payload::Iperf => {
                        let extra: &[&str] = match row.way {
                            Way::Up => &[],
                            Way::Down => &["-R"],
                        };
                        iperf(&lab, &server, &secs, extra)?
                    }
                    Payload::Random => {
                        seed += 1;
                        xfer_stream(&lab, &exe, &xfer_addr, row.way, seed, &duration, &secs)?
                    }
                };
                let t = traffic(&pair, path)?.since(before);
                row.traffic.lan += t.lan;
                row.traffic.wan += t.wan;
                eprintln!(
                    "  run {}: {path}, {}, {}: {:.0} Mbit/s",
                    i + 1,
                    row.payload.label(),
                    row.way.label(),
                    bps / 1e6
                );
                row.runs.push(bps);
            }
        }
        rows.extend(path_rows);
    }
    drop(pair);
    drop(xserver);
    lab.down()?;

    let command = format!(
        "headway bench wanopt throughput --seconds {} --repeats {} --classes {} --link-rate {} --rtt {}ms{}",
        args.seconds,
        args.repeats,
        args.classes.join(","),
        args.link_rate,
        args.rtt.as_millis(),
        if args.emulator { " --emulator" } else { "" }
    );
    let md = markdown(&command, args.emulator, &rows)?;
    super::write_report(&args.out, "throughput", &md, &csv(&rows)?)
}

/// The branch appliance's counters, or zero on the direct path (the appliances are stopped).
fn traffic(pair: &Pair<'_>, path: &str) -> Result<Traffic> {
    if path == "direct" {
        Ok(Traffic::default())
    } else {
        pair.traffic(Side::Branch)
    }
}

/// One `lab tool xfer --stream` run from the client; verified bits per second.
fn xfer_stream(
    lab: &Lab,
    exe: &str,
    to: &str,
    way: Way,
    seed: u64,
    duration: &str,
    secs: &str,
) -> Result<f64> {
    let way = match way {
        Way::Up => "up",
        Way::Down => "down",
    };
    let seed = seed.to_string();
    let mut client = lab.spawn(
        "client",
        &[
            exe,
            "lab",
            "tool",
            "xfer",
            "--to",
            to,
            "--stream",
            way,
            "--duration",
            duration,
            "--seed",
            &seed,
        ],
    )?;
    let limit = Duration::from_secs(secs.parse::<u64>().unwrap_or(10) + 120);
    let line = client.wait_line(limit, |l| l.starts_with("result "))?;
    let r: StreamReport = serde_json::from_str(line.trim_start_matches("result "))
        .with_context(|| format!("unreadable xfer result {line:?}"))?;
    if !r.ok {
        bail!("xfer --stream {way} delivered wrong bytes: {}", r.detail);
    }
    Ok(r.bps())
}

/// The report's Markdown.
pub fn markdown(command: &str, emulator: bool, rows: &[Row]) -> Result<String> {
    let mut md = String::new();
    writeln!(
        md,
        "## WAN-optimizer pair: LAN-side throughput over an unconstrained link, beside the direct path\n"
    )?;
    writeln!(md, "Command: `{command}`\n")?;
    writeln!(
        md,
        "Branch topology, WAN namespace bridged by {} (no rate limit, no delay). direct: both appliances stopped (the branch and DC hosts route). A class: both stores wiped, the pair started, every client–server TCP flow intercepted into that class and carried through the QUIC tunnel. iperf3 repeats one random 128 KiB buffer, which the dedup classes reduce to references after its first pass (see the reduction column): those rows measure the codec on known data, not the tunnel's data rate. The random rows send a non-repeating stream nothing can compress or deduplicate, every byte verified. Reduction: the branch appliance's LAN bytes / WAN bytes over the row's runs. Issue target: ≥ 1000 Mbit/s LAN-side.\n",
        if emulator {
            "`headway emulate`"
        } else {
            "a Linux bridge"
        }
    )?;
    writeln!(
        md,
        "| path | payload | direction | Mbit/s (median) | runs (Mbit/s) | ratio to direct | reduction (LAN/WAN) | ≥ 1000 Mbit/s |"
    )?;
    writeln!(md, "|---|---|---|---:|---|---:|---:|:---:|")?;
    for r in rows {
        let direct = rows
            .iter()
            .find(|d| d.path == "direct" && d.payload == r.payload && d.way == r.way)
            .map(Row::median)
            .filter(|d| *d > 0.0);
        let runs = r
            .runs
            .iter()
            .map(|x| format!("{:.0}", x / 1e6))
            .collect::<Vec<_>>()
            .join(", ");
        writeln!(
            md,
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} |",
            r.path,
            r.payload.label(),
            r.way.label(),
            r.median() / 1e6,
            runs,
            direct.map_or_else(|| "–".into(), |d| format!("{:.2}", r.median() / d)),
            r.traffic
                .reduction()
                .map_or_else(|| "–".into(), |x| format!("{x:.1}")),
            if r.median() >= 1e9 { "yes" } else { "NO" }
        )?;
    }
    Ok(md)
}

/// The runs as CSV, one line per run.
fn csv(rows: &[Row]) -> Result<String> {
    let mut csv = String::from("path,payload,direction,run,bps,lan_bytes,wan_bytes\n");
    for r in rows {
        let payload = match r.payload {
            Payload::Iperf => "iperf3",
            Payload::Random => "random",
        };
        let way = match r.way {
            Way::Up => "up",
            Way::Down => "down",
        };
        for (i, bps) in r.runs.iter().enumerate() {
            writeln!(
                csv,
                "{},{payload},{way},{},{bps:.0},{},{}",
                r.path,
                i + 1,
                r.traffic.lan,
                r.traffic.wan
            )?;
        }
    }
    Ok(csv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::tests::parse_args;

    #[test]
    fn defaults_and_class_names() {
        let a = parse_args::<ThroughputArgs>(&[]).unwrap();
        assert_eq!((a.seconds, a.repeats), (10, 3));
        assert_eq!(a.classes, vec!["compress", "dedup-memory", "dedup-disk"]);
        assert_eq!(a.link_rate, Rate::from_bps(10_000_000_000));
        assert_eq!(a.rtt, Duration::from_millis(1));
        assert_eq!(a.prefix, "hw-tput-");
        let a = parse_args::<ThroughputArgs>(&["--classes", "pass-through,dedup-disk"]).unwrap();
        assert_eq!(a.classes, vec!["pass-through", "dedup-disk"]);
        assert!(parse_args::<ThroughputArgs>(&["--classes", "turbo"]).is_err());
    }

    #[test]
    fn rows_are_compared_with_the_direct_path_of_the_same_payload_and_way() {
        let row = |path, payload, way, runs: &[f64], lan, wan| Row {
            path,
            payload,
            way,
            runs: runs.to_vec(),
            traffic: Traffic { lan, wan },
        };
        let rows = [
            row("direct", Payload::Random, Way::Up, &[2e9, 3e9, 1e9], 0, 0),
            row("direct", Payload::Iperf, Way::Up, &[4e9], 0, 0),
            row(
                "dedup-disk",
                Payload::Random,
                Way::Up,
                &[5e8, 4e8, 6e8],
                100,
                101,
            ),
            row("dedup-disk", Payload::Iperf, Way::Up, &[2e9], 1000, 10),
        ];
        let md = markdown("cmd", false, &rows).unwrap();
        let line = |start: &str, payload: Payload| {
            md.lines()
                .find(|l| l.starts_with(start) && l.contains(payload.label()))
                .unwrap()
                .to_owned()
        };
        let random = line("| dedup-disk", Payload::Random);
        assert!(
            random.contains("| 500 | 500, 400, 600 | 0.25 | 1.0 | NO |"),
            "{random}"
        );
        let iperf = line("| dedup-disk", Payload::Iperf);
        assert!(
            iperf.contains("| 2000 | 2000 | 0.50 | 100.0 | yes |"),
            "{iperf}"
        );
        assert!(line("| direct", Payload::Random).contains("| 1.00 | – |"));
        assert!(md.contains("a Linux bridge"));
        let csv = csv(&rows).unwrap();
        assert_eq!(csv.lines().count(), 1 + 8);
        assert!(
            csv.contains("dedup-disk,random,up,2,400000000,100,101\n"),
            "{csv}"
        );
    }
}
