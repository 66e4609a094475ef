//! `headway bench emulator`: what the emulator costs and how precisely it releases frames.
//!
//! 1. **Throughput**: in the `pair` topology with a transparent link (no rate limit, no delay),
//!    iperf3 TCP from client to server through the emulator, and over the direct veth link that
//!    the topology also has, alternating, `--repeats` times each; medians and their ratio.
//! 2. **Timing**: a fresh lab with the link at 100 Mbit/s and 50 ms one-way delay, iperf3 TCP
//!    saturating it for `--seconds`; then the emulator's own histograms (read from its admin API):
//!    release-timing error (actual send − due) and queueing delay, per direction.
//!
//! The lab hosts use cubic, offloads are off on every interface of the pair topology (all of
//! them face the WAN), MTU 1500: frames are real packets, as in the seeds' labs.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::median;
use headway_core::Rate;
use headway_link::Params;

use crate::spec::{brief, LinkSetting};
use crate::{Lab, LabOptions, TopologyKind};

/// `headway bench emulator` arguments.
#[derive(Debug, clap::Args)]
pub struct EmulatorArgs {
    /// Seconds per iperf3 run.
    #[arg(long, default_value_t = 10)]
    pub seconds: u32,
    /// Runs per path (medians are reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
    /// Where to write emulator.md and emulator.csv.
    #[arg(long, default_value = "lab-out/bench")]
    pub out: PathBuf,
}

/// The iperf3 server port.
const IPERF_PORT: u16 = 5201;

/// Runs the benchmark.
pub fn run(args: EmulatorArgs) -> Result<()> {
    which("iperf3")?;
    let secs = args.seconds.max(1).to_string();

    // 1. throughput, transparent link vs direct veth
    let lab = Lab::up(options(LinkSetting::default()))?;
    let direct_addr = lab
        .server_direct_addr()
        .context("the pair topology has no direct link")?
        .to_string();
    let wan_addr = lab.server_addr().to_string();
    let server = iperf_server(&lab)?;
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for i in 0..args.repeats.max(1) {
        for (addr, out) in [(&direct_addr, &mut direct), (&wan_addr, &mut through)] {
            let bps = iperf(&lab, addr, &secs, &[])?;
            eprintln!("  run {}: {addr}: {:.3} Gbit/s", i + 1, bps / 1e9);
            out.push(bps);
        }
    }
    drop(server);
    lab.down()?;
    let (d, t) = (
        median(&direct).unwrap_or(0.0),
        median(&through).unwrap_or(0.0),
    );

    // 2. timing at 100 Mbit/s, 50 ms
    let shaping = Params {
        rate: Some(Rate::from_bps(100_000_000)),
        delay: std::time::Duration::from_millis(50),
        ..Params::default()
    };
    let lab = Lab::up(options(LinkSetting::symmetric(shaping.clone())))?;
    let server = iperf_server(&lab)?;
    let shaped = iperf(&lab, &wan_addr, &secs, &[])?;
    let stats = lab.link_stats("wan")?;
    drop(server);
    lab.down()?;

    let mut md = String::new();
    writeln!(
        md,
        "## Emulator throughput (iperf3 TCP, {secs} s × {} runs, medians)\n",
        args.repeats
    )?;
    writeln!(
        md,
        "| path | Gbit/s (median) | runs (Gbit/s) | ratio to direct |"
    )?;
    writeln!(md, "|---|---:|---|---:|")?;
    let runs = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{:.2}", x / 1e9))
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(
        md,
        "| direct veth | {:.3} | {} | 1.00 |",
        d / 1e9,
        runs(&direct)
    )?;
    writeln!(
        md,
        "| through `headway emulate` (no limit, 0 ms) | {:.3} | {} | {:.2} |",
        t / 1e9,
        runs(&through),
        t / d.max(1.0)
    )?;
    writeln!(
        md,
        "\n## Release timing at {} (iperf3 TCP {secs} s: {:.2} Mbit/s)\n",
        brief(&shaping),
        shaped / 1e6
    )?;
    writeln!(
        md,
        "| direction | frames | timing error p50 / p99 / max (µs) | queueing p50 / p99 (µs) |"
    )?;
    writeln!(md, "|---|---:|---|---|")?;
    let mut csv = String::from("metric,direction,value\n");
    writeln!(
        csv,
        "direct_bps,,{d:.0}\nemulated_bps,,{t:.0}\nratio,,{:.4}\nshaped_bps,,{shaped:.0}",
        t / d.max(1.0)
    )?;
    for dir in ["a_to_b", "b_to_a"] {
        let s = &stats[dir];
        let f = |k: &str, q: &str| s[k][q].as_f64().unwrap_or(f64::NAN);
        writeln!(
            md,
            "| {dir} | {} | {:.1} / {:.1} / {:.1} | {:.0} / {:.0} |",
            s["passed"].as_u64().unwrap_or(0),
            f("timing_error_us", "p50"),
            f("timing_error_us", "p99"),
            f("timing_error_us", "max"),
            f("queueing_us", "p50"),
            f("queueing_us", "p99"),
        )?;
        for q in ["p50", "p99", "max"] {
            writeln!(
                csv,
                "timing_error_{q}_us,{dir},{:.2}",
                f("timing_error_us", q)
            )?;
        }
    }
    println!("{md}");
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    std::fs::write(args.out.join("emulator.md"), &md)?;
    std::fs::write(args.out.join("emulator.csv"), &csv)?;
    println!("report: {}/emulator.md, emulator.csv", args.out.display());
    Ok(())
}

fn options(link: LinkSetting) -> LabOptions {
    let mut o = LabOptions::new(TopologyKind::Pair);
    o.link = link;
    o.prefix = "hw-bench-".into();
    o.state_dir = PathBuf::from(crate::lab::DEFAULT_STATE_DIR).join("bench");
    o
}

/// Starts an iperf3 server on the lab's server host and waits until it listens.
pub(crate) fn iperf_server(lab: &Lab) -> Result<crate::Background> {
    let port = IPERF_PORT.to_string();
    let mut server = lab.spawn("server", &["iperf3", "-s", "--forceflush", "-p", &port])?;
    server.wait_line(std::time::Duration::from_secs(10), |l| {
        l.contains("listening")
    })?;
    Ok(server)
}

/// One iperf3 TCP run from the client with `extra` arguments (`-R`: the server sends);
/// received bits per second. A run that hangs is killed a minute after it should have ended.
pub(crate) fn iperf(lab: &Lab, addr: &str, secs: &str, extra: &[&str]) -> Result<f64> {
    let limit = format!("{}", secs.parse::<u64>().unwrap_or(10) + 60);
    let port = IPERF_PORT.to_string();
    let mut argv = vec![
        "timeout", "-k", "5", &limit, "iperf3", "-c", addr, "-p", &port, "-t", secs, "-J",
    ];
    argv.extend_from_slice(extra);
    let out = lab.exec("client", &argv)?;
    if !out.status.success() {
        bail!(
            "iperf3 to {addr} failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("iperf3 printed no JSON")?;
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3 JSON has no end.sum_received.bits_per_second")
}

/// Fails with the setup hint when `program` is not on the PATH.
pub(crate) fn which(program: &str) -> Result<()> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false);
    if !found {
        bail!("`{program}` is not installed: run `bash scripts/setup.sh` (as root) first");
    }
    Ok(())
}
