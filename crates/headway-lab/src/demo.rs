//! `headway demo`: the main job end to end on an embedded default, with no config.
//!
//! The main job is the WAN optimizer making a remote file server feel local (seed 000). The
//! demo builds the `branch` topology (client — branch appliance — emulated WAN — DC appliance —
//! server) at the seed's US–Asia preset (1.5 Mbit/s, 300 ms RTT, 1 % loss,
//! `citrix_wan_scenarios.csv` row 1), starts `headway origin` on the server, and downloads the
//! same 12 MB DOC-like file three times from the client: without the optimizer (both
//! appliances stopped: the hosts only route), then twice through Headway's WAN-optimizer pair
//! (transparent interception, disk dedup, both stores empty before the first pass). Every
//! download is verified by SHA-256. It prints times, speed-ups, the bytes that crossed the WAN
//! and seed 000's published numbers side by side, and writes the table (Markdown, CSV) and a
//! chart (SVG) to `--out`. Everything it builds is removed at the end, also on Ctrl-C.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::units::parse_duration;
use indicatif::ProgressBar;

use crate::fetch::{fetch_in_lab, FetchReport};
use crate::optimizer::{Pair, PairOptions, Side};
use crate::report::{bar_chart_svg, Bar};
use crate::{presets, Dir, Lab, LabOptions, TopologyKind, WanMode};

/// `headway demo` arguments.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Seed document to download (pdf_small, pdf_medium, pdf_large, doc_small, doc_medium,
    /// doc_large: the files of seed 000's download test).
    #[arg(long, default_value = "doc_large")]
    pub file: String,
    /// WAN preset (`headway lab presets` lists them).
    #[arg(long, default_value = "branch_us_asia")]
    pub preset: String,
    /// Where to write the report (demo.md, demo.csv, demo.svg).
    #[arg(long, default_value = "lab-out/demo")]
    pub out: PathBuf,
    /// Seed of the emulated link's loss sequence.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Give up on one download after this long.
    #[arg(long, default_value = "900s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// Seed 000's published times (seconds) for the US–Asia branch (1.5 Mbit/s, 300 ms, 1 % loss),
/// from `citrix_file_download.csv`: (file, baseline, first pass, second pass).
const SEED_US_ASIA: [(&str, f64, f64, f64); 6] = [
    ("pdf_small", 23.0, 1.0, 0.1),
    ("pdf_medium", 62.0, 19.0, 1.0),
    ("pdf_large", 355.0, 37.0, 2.0),
    ("doc_small", 14.0, 0.5, 0.1),
    ("doc_medium", 52.0, 1.0, 0.1),
    ("doc_large", 247.0, 11.0, 0.5),
];

/// The origin's port on the server host.
const ORIGIN_PORT: u16 = 8080;

/// One download of the demo.
struct Pass {
    name: &'static str,
    report: FetchReport,
    /// Bytes the branch appliance sent and received on the WAN during it (`None` without it).
    wan_bytes: Option<u64>,
    seed: Option<f64>,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> Result<()> {
    let doc = headway_origin::corpus::file(&args.file).with_context(|| {
        format!(
            "no seed document named `{}`; use one of pdf_small, pdf_medium, pdf_large, doc_small, doc_medium, doc_large",
            args.file
        )
    })?;
    let preset = presets::find(&args.preset)
        .with_context(|| format!("no preset `{}`; presets: {}", args.preset, presets::names()))?;
    let expected = headway_origin::corpus::hex(&doc.sha256());
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();

    println!("Headway demo: a remote file server over a slow, lossy WAN, without and with Headway's WAN optimizer.");
    println!(
        "  file: {} ({:.2} MB, {})   WAN: {} = {}",
        args.file,
        doc.size() as f64 / 1e6,
        doc.kind().as_str(),
        preset.name,
        preset.describe()
    );

    let spinner = ProgressBar::new_spinner()
        .with_message("building the lab (namespaces, veth, emulator, appliances)");
    spinner.enable_steady_tick(Duration::from_millis(100));
    let mut opts = LabOptions::new(TopologyKind::Branch);
    opts.wan = WanMode::Emulator {
        binary: PathBuf::from(&exe),
        seed: Some(args.seed),
    };
    opts.prefix = "hw-demo-".into();
    opts.state_dir = PathBuf::from(crate::lab::DEFAULT_STATE_DIR).join("demo");
    let lab = Lab::up(opts)?;
    lab.set_link("wan", Dir::Both, &preset.params())?;
    let server = lab.server_addr();
    let listen = format!("{server}:{ORIGIN_PORT}");
    let _origin = lab.spawn("server", &[&exe, "origin", "--listen", &listen])?;
    let rate = preset.rate_bps.unwrap_or(1_000_000_000);
    let mut pair = Pair::new(
        &lab,
        &exe,
        &PairOptions {
            link_rate_bps: rate,
            rtt: Duration::from_micros(preset.rtt_us.max(1000)),
            ..PairOptions::default()
        },
    )?;
    spinner.finish_and_clear();
    println!(
        "  lab up: client {} — branch — wan (headway emulate) — dc — server {}",
        lab.addresses().client,
        server
    );

    let seed = SEED_US_ASIA
        .iter()
        .find(|r| r.0 == args.file)
        .filter(|_| preset.name == "branch_us_asia");
    let path = format!("/files/{}", args.file);
    let fetch = |label: &str| -> Result<FetchReport> {
        let r =
            fetch_in_lab(&lab, &exe, &listen, &path, label, args.timeout)?.with_context(|| {
                format!("{label}: the download took longer than {:?}", args.timeout)
            })?;
        check(&r, &expected, doc.size())?;
        Ok(r)
    };
    let mut passes = Vec::new();
    passes.push(Pass {
        name: "without optimizer",
        report: fetch("without optimizer")?,
        wan_bytes: None,
        seed: seed.map(|s| s.1),
    });
    pair.start_both()?;
    let mut wan_before = 0;
    for (name, seed) in [
        ("Headway, 1st pass", seed.map(|s| s.2)),
        ("Headway, 2nd pass", seed.map(|s| s.3)),
    ] {
        let report = fetch(name)?;
        let wan = pair.wan_bytes(Side::Branch)?;
        passes.push(Pass {
            name,
            report,
            wan_bytes: Some(wan - wan_before),
            seed,
        });
        wan_before = wan;
    }
    drop(pair);
    lab.down()?;

    let base = passes[0].report.total_seconds;
    let mut table = String::new();
    writeln!(
        table,
        "| download | time (s) | speed-up | goodput (Mbit/s) | bytes over the WAN | seed 000 (s) | seed speed-up |"
    )?;
    writeln!(table, "|---|---:|---:|---:|---:|---:|---:|")?;
    for p in &passes {
        writeln!(
            table,
            "| {} | {:.2} | {:.1}× | {:.3} | {} | {} | {} |",
            p.name,
            p.report.total_seconds,
            base / p.report.total_seconds.max(1e-6),
            p.report.goodput_bps() / 1e6,
            p.wan_bytes.map_or_else(
                || "all (plain TCP)".into(),
                |b| format!("{:.3} MB", b as f64 / 1e6)
            ),
            p.seed.map_or_else(|| "–".into(), |s| format!("{s:.1}")),
            match (seed, p.seed) {
                (Some(s), Some(v)) => format!("{:.1}×", s.1 / v),
                _ => "–".into(),
            },
        )?;
    }
    println!();
    print!("{table}");
    println!();
    println!(
        "  all three downloads: {} bytes, SHA-256 {}… matches the corpus",
        doc.size(),
        &expected[..16]
    );
    println!(
        "  first pass: the file crossed the WAN compressed and paced at the link rate, loss or not; \
         second pass: the DC appliance already held it, so only references crossed."
    );
    if let Some(s) = seed {
        println!(
            "  seed 000 (Citrix WANScaler, same file size and link): {:.0} s without, {:.1} s first pass, {:.1} s second pass.",
            s.1, s.2, s.3
        );
    }

    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    std::fs::write(args.out.join("demo.md"), &table)?;
    let mut csv = String::from("download,link,bytes,seconds,goodput_bps,wan_bytes,seed_s\n");
    for p in &passes {
        writeln!(
            csv,
            "{},\"{}\",{},{:.4},{:.0},{},{}",
            p.name,
            preset.describe(),
            p.report.bytes,
            p.report.total_seconds,
            p.report.goodput_bps(),
            p.wan_bytes.map(|b| b.to_string()).unwrap_or_default(),
            p.seed.map(|v| v.to_string()).unwrap_or_default()
        )?;
    }
    std::fs::write(args.out.join("demo.csv"), csv)?;
    let mut bars: Vec<Bar> = passes
        .iter()
        .map(|p| Bar {
            label: format!("{} (Headway lab)", p.name),
            value: p.report.total_seconds,
        })
        .collect();
    for p in &passes {
        if let Some(s) = p.seed {
            bars.push(Bar {
                label: format!("seed 000: {}", p.name.replace("Headway", "WANScaler")),
                value: s,
            });
        }
    }
    let svg = bar_chart_svg(
        &format!("Download time of {} over {} (s)", args.file, preset.name),
        &bars,
    )?;
    std::fs::write(args.out.join("demo.svg"), svg)?;
    println!(
        "  report: {}/demo.md, demo.csv, demo.svg",
        args.out.display()
    );
    Ok(())
}

fn check(r: &FetchReport, expected_sha: &str, size: u64) -> Result<()> {
    if r.status != 200 || r.bytes != size || r.sha256 != expected_sha {
        bail!(
            "download corrupted: status {}, {} of {size} bytes, sha256 {} (expected {expected_sha})",
            r.status, r.bytes, r.sha256
        );
    }
    Ok(())
}
