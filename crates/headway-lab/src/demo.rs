//! `headway demo`: the main job end to end on an embedded default, with no config.
//!
//! Today's main job is the WAN lab itself: it builds the `pair` topology (client — emulated WAN —
//! server), starts `headway origin` on the server, and downloads the same seed document twice
//! from the client — once over a transparent link (the LAN case) and once over the seed's
//! US–Asia branch WAN (1.5 Mbit/s, 300 ms RTT, 1 % loss, `citrix_wan_scenarios.csv` row 1) —
//! verifying every byte by SHA-256. It prints a table with the seed's published baseline for the
//! same file and link beside ours, and writes the table (Markdown, CSV) and a chart (SVG) to
//! `--out`. Everything it builds is removed at the end, also on Ctrl-C.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::units::parse_duration;
use indicatif::ProgressBar;

use crate::fetch::{fetch_in_lab, FetchReport};
use crate::report::{bar_chart_svg, Bar};
use crate::{presets, Dir, Lab, LabOptions, TopologyKind, WanMode};

/// `headway demo` arguments.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Seed document to download (pdf_small, pdf_medium, pdf_large, doc_small, doc_medium,
    /// doc_large: the files of seed 000's download test).
    #[arg(long, default_value = "pdf_small")]
    pub file: String,
    /// WAN preset for the second download (`headway lab presets` lists them).
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

    println!("Headway demo: one file over a LAN and over an emulated WAN, every byte verified.");
    println!(
        "  file: {} ({:.2} MB, {})   WAN: {} = {}",
        args.file,
        doc.size() as f64 / 1e6,
        doc.kind().as_str(),
        preset.name,
        preset.describe()
    );

    let spinner =
        ProgressBar::new_spinner().with_message("building the lab (namespaces, veth, emulator)");
    spinner.enable_steady_tick(Duration::from_millis(100));
    let mut opts = LabOptions::new(TopologyKind::Pair);
    opts.wan = WanMode::Emulator {
        binary: PathBuf::from(&exe),
        seed: Some(args.seed),
    };
    opts.prefix = "hw-demo-".into();
    opts.state_dir = PathBuf::from(crate::lab::DEFAULT_STATE_DIR).join("demo");
    let lab = Lab::up(opts)?;
    let server = lab.server_addr();
    let listen = format!("{server}:{ORIGIN_PORT}");
    let _origin = lab.spawn("server", &[&exe, "origin", "--listen", &listen])?;
    spinner.finish_and_clear();
    println!(
        "  lab up: client {} — wan (headway emulate) — server {}",
        lab.addresses().client,
        server
    );

    let path = format!("/files/{}", args.file);
    let lan = fetch_in_lab(
        &lab,
        &exe,
        &listen,
        &path,
        "LAN (transparent link)",
        args.timeout,
    )?
    .context("the LAN download timed out")?;
    check(&lan, &expected, doc.size())?;
    lab.set_link("wan", Dir::Both, &preset.params())?;
    let wan = fetch_in_lab(&lab, &exe, &listen, &path, preset.name, args.timeout)?.with_context(
        || {
            format!(
                "the download over {} took longer than {:?}",
                preset.name, args.timeout
            )
        },
    )?;
    check(&wan, &expected, doc.size())?;
    lab.down()?;

    let seed = SEED_US_ASIA
        .iter()
        .find(|r| r.0 == args.file)
        .filter(|_| preset.name == "branch_us_asia");
    let rate = preset.rate_bps.map(|r| r as f64);
    let mut table = String::new();
    writeln!(
        table,
        "| path | link | time (s) | goodput (Mbit/s) | of link rate | seed 000 baseline (s) |"
    )?;
    writeln!(table, "|---|---|---:|---:|---:|---:|")?;
    let row = |t: &mut String,
               name: &str,
               link: &str,
               r: &FetchReport,
               rate: Option<f64>,
               seed: Option<f64>| {
        let _ = writeln!(
            t,
            "| {name} | {link} | {:.2} | {:.3} | {} | {} |",
            r.total_seconds,
            r.goodput_bps() / 1e6,
            rate.map(|x| format!("{:.0} %", 100.0 * r.goodput_bps() / x))
                .unwrap_or_else(|| "–".into()),
            seed.map(|s| format!("{s:.1}"))
                .unwrap_or_else(|| "–".into()),
        );
    };
    row(&mut table, "LAN", "no limit, 0 ms", &lan, None, None);
    row(
        &mut table,
        preset.name,
        &preset.describe(),
        &wan,
        rate,
        seed.map(|s| s.1),
    );
    println!();
    print!("{table}");
    println!();
    println!(
        "  both downloads: {} bytes, SHA-256 {}… matches the corpus",
        doc.size(),
        &expected[..16]
    );
    println!(
        "  the WAN took {:.0}× as long as the LAN: the round trips and the loss cost TCP (cubic) its speed.",
        wan.total_seconds / lan.total_seconds.max(1e-6)
    );
    if let Some(s) = seed {
        println!(
            "  seed 000 measured {:.0} s for this file on this link without WAN optimisation; with WANScaler: \
             {:.1} s first pass, {:.1} s second pass — Headway's WAN optimiser is the next milestone.",
            s.1, s.2, s.3
        );
    }

    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    std::fs::write(args.out.join("demo.md"), &table)?;
    let mut csv = String::from("path,link,bytes,seconds,goodput_bps,seed_baseline_s\n");
    for (name, link, r, s) in [
        ("lan", "transparent".to_string(), &lan, None),
        (preset.name, preset.describe(), &wan, seed.map(|s| s.1)),
    ] {
        writeln!(
            csv,
            "{name},\"{link}\",{},{:.4},{:.0},{}",
            r.bytes,
            r.total_seconds,
            r.goodput_bps(),
            s.map(|v| v.to_string()).unwrap_or_default()
        )?;
    }
    std::fs::write(args.out.join("demo.csv"), csv)?;
    let mut bars = vec![
        Bar {
            label: "LAN (Headway lab)".into(),
            value: lan.total_seconds,
        },
        Bar {
            label: format!("{} (Headway lab)", preset.name),
            value: wan.total_seconds,
        },
    ];
    if let Some(s) = seed {
        bars.push(Bar {
            label: "seed 000 baseline".into(),
            value: s.1,
        });
    }
    let svg = bar_chart_svg(&format!("Download time of {} (s)", args.file), &bars)?;
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
