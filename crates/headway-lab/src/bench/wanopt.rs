//! `headway bench wanopt file-download`: seed 000's SharePoint file-download test
//! (`data/citrix_file_download.csv`, a copy of the scenario file with the seed's published
//! numbers): 6 documents × 1.5 / 6 / 44 Mbit/s × 90 / 200 / 300 ms RTT × 0 / 0.1 / 1 / 5 % loss.
//!
//! Each cell is measured here, in the `branch` topology (client — branch — emulated WAN — DC —
//! server, `headway origin` on the server), and printed beside the seed's numbers:
//!
//! - **baseline**: plain TCP with Linux defaults (cubic) through the emulated link, both
//!   appliances stopped (the branch and DC hosts only route);
//! - **first pass**: both appliances' stores wiped, both started ([`crate::optimizer::Pair`]:
//!   transparent interception, class `dedup-disk`, the tunnel paced at the cell's rate), the
//!   file downloaded once;
//! - **second pass**: the same file again through the warm pair.
//!
//! Beside them: the first-pass goodput as a fraction of `rate × (1 − loss)` and whether the
//! second pass met `2 × RTT + 0.1 s` (the targets), and the seed's three numbers.
//! `headway bench wanopt correctness` (in `wanopt_correctness`) is the other half: many
//! verified transfers both ways with restarts.
//!
//! The link of a cell is `rate`, one-way delay = RTT/2, the loss on each direction (as the lab's
//! presets do), a one-BDP queue. A download that does not finish within `--cell-timeout` is
//! reported as `> timeout` and the run moves on.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::units::parse_duration;
use headway_core::{Probability, Rate};
use headway_link::{Loss, Params, QueueLimit};

use crate::fetch::fetch_in_lab;
use crate::optimizer::{Pair, PairOptions, Side};
use crate::presets::bdp_queue;
use crate::{Dir, Lab, LabOptions, TopologyKind};

/// The seed's table, copied from the scenario file (`rtt_ms,file,size_mb,bandwidth_mbps,
/// loss_pct,baseline_s,first_pass_s,second_pass_s`; `#` lines are comments).
const SEED_TABLE: &str = include_str!("../../data/citrix_file_download.csv");

/// `headway bench wanopt …`
#[derive(Debug, clap::Subcommand)]
pub enum WanoptCommand {
    /// Seed 000's file-download matrix: baseline, first and second pass.
    FileDownload(FileDownloadArgs),
    /// Many verified transfers both ways through the optimizer pair, with restarts and a
    /// wiped store.
    Correctness(super::wanopt_correctness::CorrectnessArgs),
}

/// `headway bench wanopt file-download` arguments.
#[derive(Debug, clap::Args)]
pub struct FileDownloadArgs {
    /// A small subset for a quick look: the small PDF and DOC at 6 Mbit/s, 90 ms, 0 and 1 % loss.
    #[arg(long)]
    pub quick: bool,
    /// Only these files (pdf_small, pdf_medium, pdf_large, doc_small, doc_medium, doc_large).
    #[arg(long, value_delimiter = ',')]
    pub files: Vec<String>,
    /// Only these bandwidths in Mbit/s (1.5, 6, 44).
    #[arg(long, value_delimiter = ',')]
    pub bandwidths: Vec<f64>,
    /// Only these RTTs in ms (90, 200, 300).
    #[arg(long, value_delimiter = ',')]
    pub rtts: Vec<u64>,
    /// Only these loss rates in percent (0, 0.1, 1, 5).
    #[arg(long, value_delimiter = ',')]
    pub losses: Vec<f64>,
    /// Give up on one download after this long.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    pub cell_timeout: Duration,
    /// Seed of the emulated link's loss sequence.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip the plain-TCP baseline (it dominates the run time at high loss).
    #[arg(long)]
    pub skip_baseline: bool,
    /// Where to write file-download.md and file-download.csv.
    #[arg(long, default_value = "lab-out/bench")]
    pub out: PathBuf,
}

/// One row of the seed's table.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedRow {
    /// Round-trip time, ms.
    pub rtt_ms: u64,
    /// The corpus file name (`pdf_small` …), from the seed's type and size.
    pub file: &'static str,
    /// Link rate, Mbit/s.
    pub bandwidth_mbps: f64,
    /// Loss, percent.
    pub loss_pct: f64,
    /// The seed's baseline, seconds.
    pub baseline_s: f64,
    /// The seed's first pass with WANScaler, seconds.
    pub first_pass_s: f64,
    /// The seed's second pass, seconds.
    pub second_pass_s: f64,
}

/// The seed's rows, parsed from the embedded table.
pub fn seed_rows() -> Result<Vec<SeedRow>> {
    let mut rows = Vec::new();
    for line in SEED_TABLE.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 8 {
            bail!("malformed seed row {line:?}");
        }
        let file = match (f[1], f[2]) {
            ("pdf", "1.24") => "pdf_small",
            ("pdf", "4.33") => "pdf_medium",
            ("pdf", "17.344") => "pdf_large",
            ("doc", "1.0") => "doc_small",
            ("doc", "3.0") => "doc_medium",
            ("doc", "12.14") => "doc_large",
            other => bail!("unknown seed file {other:?}"),
        };
        let num = |i: usize| -> Result<f64> {
            f[i].parse()
                .with_context(|| format!("bad number {:?} in {line:?}", f[i]))
        };
        rows.push(SeedRow {
            rtt_ms: f[0]
                .parse()
                .with_context(|| format!("bad RTT in {line:?}"))?,
            file,
            bandwidth_mbps: num(3)?,
            loss_pct: num(4)?,
            baseline_s: num(5)?,
            first_pass_s: num(6)?,
            second_pass_s: num(7)?,
        });
    }
    Ok(rows)
}

impl FileDownloadArgs {
    /// The filters, as command-line flags (for the report).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let list = |v: &[String]| v.join(",");
        if self.quick {
            s.push_str(" --quick");
        }
        if !self.files.is_empty() {
            s += &format!(" --files {}", list(&self.files));
        }
        if !self.bandwidths.is_empty() {
            s += &format!(
                " --bandwidths {}",
                list(
                    &self
                        .bandwidths
                        .iter()
                        .map(|b| b.to_string())
                        .collect::<Vec<_>>()
                )
            );
        }
        if !self.rtts.is_empty() {
            s += &format!(
                " --rtts {}",
                list(&self.rtts.iter().map(|b| b.to_string()).collect::<Vec<_>>())
            );
        }
        if !self.losses.is_empty() {
            s += &format!(
                " --losses {}",
                list(
                    &self
                        .losses
                        .iter()
                        .map(|b| b.to_string())
                        .collect::<Vec<_>>()
                )
            );
        }
        if self.skip_baseline {
            s.push_str(" --skip-baseline");
        }
        s
    }

    /// The seed rows this run measures, grouped so that rows sharing a link setting follow
    /// each other (the link changes once per group).
    pub fn select(&self, rows: Vec<SeedRow>) -> Vec<SeedRow> {
        let (files, bws, rtts, losses) = if self.quick {
            (
                vec!["pdf_small".to_string(), "doc_small".to_string()],
                vec![6.0],
                vec![90],
                vec![0.0, 1.0],
            )
        } else {
            (
                self.files.clone(),
                self.bandwidths.clone(),
                self.rtts.clone(),
                self.losses.clone(),
            )
        };
        let mut out: Vec<SeedRow> = rows
            .into_iter()
            .filter(|r| files.is_empty() || files.iter().any(|f| f == r.file))
            .filter(|r| bws.is_empty() || bws.iter().any(|b| (b - r.bandwidth_mbps).abs() < 1e-9))
            .filter(|r| rtts.is_empty() || rtts.contains(&r.rtt_ms))
            .filter(|r| losses.is_empty() || losses.iter().any(|l| (l - r.loss_pct).abs() < 1e-9))
            .collect();
        out.sort_by(|a, b| {
            (a.bandwidth_mbps, a.rtt_ms, a.loss_pct)
                .partial_cmp(&(b.bandwidth_mbps, b.rtt_ms, b.loss_pct))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        out
    }
}

/// The link of a cell: rate, RTT/2 each way, loss on each direction, one-BDP queue.
pub fn cell_params(bandwidth_mbps: f64, rtt_ms: u64, loss_pct: f64) -> Params {
    let bps = (bandwidth_mbps * 1e6).round() as u64;
    Params {
        rate: Some(Rate::from_bps(bps)),
        delay: Duration::from_micros(rtt_ms * 500),
        loss: Probability::new(loss_pct / 100.0)
            .filter(|p| !p.is_zero())
            .map_or(Loss::None, Loss::Bernoulli),
        queue: QueueLimit {
            packets: Some(bdp_queue(bps, rtt_ms * 1000)),
            bytes: None,
        },
        ..Params::default()
    }
}

/// Runs a WAN-optimizer benchmark.
pub fn run(cmd: WanoptCommand) -> Result<()> {
    match cmd {
        WanoptCommand::FileDownload(args) => file_download(args),
        WanoptCommand::Correctness(args) => super::wanopt_correctness::run(args),
    }
}

/// What one cell measured, seconds (`None`: over the per-cell limit).
#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    baseline: Option<f64>,
    first: Option<f64>,
    /// The first pass's time to the response header (request and set-up round trips).
    first_header: Option<f64>,
    second: Option<f64>,
}

/// One verified download of `file` through the lab: total seconds and seconds to the
/// response header; `None` on timeout.
fn timed_fetch(
    lab: &Lab,
    exe: &str,
    listen: &str,
    file: &str,
    label: &str,
    timeout: Duration,
) -> Result<Option<(f64, f64)>> {
    let doc = headway_origin::corpus::file(file).context("seed file missing from the corpus")?;
    let path = format!("/files/{file}");
    match fetch_in_lab(lab, exe, listen, &path, label, timeout)? {
        Some(r)
            if r.bytes == doc.size() && r.sha256 == headway_origin::corpus::hex(&doc.sha256()) =>
        {
            Ok(Some((r.total_seconds, r.header_seconds)))
        }
        Some(r) => bail!(
            "{label}: corrupted download ({} bytes, sha {})",
            r.bytes,
            r.sha256
        ),
        None => Ok(None),
    }
}

/// `headway bench wanopt file-download`.
fn file_download(args: FileDownloadArgs) -> Result<()> {
    let cells = args.select(seed_rows()?);
    if cells.is_empty() {
        bail!("no cell of the seed's table matches the filters");
    }
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();
    let mut opts = LabOptions::new(TopologyKind::Branch);
    opts.wan = crate::WanMode::Emulator {
        binary: PathBuf::from(&exe),
        seed: Some(args.seed),
    };
    opts.prefix = "hw-bench-".into();
    opts.state_dir = PathBuf::from(crate::lab::DEFAULT_STATE_DIR).join("bench");
    let lab = Lab::up(opts)?;
    let listen = format!("{}:8080", lab.addresses().server);
    let _origin = lab.spawn("server", &[&exe, "origin", "--listen", &listen])?;
    let mut pair = Pair::new(&lab, &exe, &PairOptions::default())?;
    eprintln!(
        "file-download: {} cells, branch topology, per-cell limit {:?}",
        cells.len(),
        args.cell_timeout
    );
    let mut md = String::new();
    writeln!(
        md,
        "## Seed 000 file download: plain TCP, then Headway's WAN optimizer (first and second pass), beside the seed\n"
    )?;
    writeln!(
        md,
        "Command: `headway bench wanopt file-download{}`\n",
        args.describe()
    )?;
    writeln!(md, "Each cell: the baseline with both appliances stopped (the branch and DC hosts only route), then both stores wiped, both appliances started (transparent interception, class dedup-disk), and the file downloaded twice. Every download is checked byte for byte (SHA-256). Targets: second pass ≤ 2 × RTT + 0.1 s; first-pass goodput on PDF-like (incompressible) files ≥ 0.9 × rate × (1 − loss). Goodput is given over the whole download (request round trip included) and over the body alone (from the response header on).\n")?;
    writeln!(md, "| Mbit/s | RTT ms | loss % | file | baseline (s) | 1st pass (s) | 2nd pass (s) | 1st-pass goodput / (rate × (1−loss)): whole · body | 2nd ≤ 2·RTT+0.1 s | seed baseline / 1st / 2nd (s) |")?;
    writeln!(md, "|---:|---:|---:|---|---:|---:|---:|---:|:---:|---|")?;
    let mut csv = String::from(
        "bandwidth_mbps,rtt_ms,loss_pct,file,baseline_s,first_pass_s,second_pass_s,seed_baseline_s,seed_first_pass_s,seed_second_pass_s\n",
    );
    let mut current: Option<(f64, u64, f64)> = None;
    let secs = |v: Option<f64>| {
        v.map_or_else(
            || format!("> {}", args.cell_timeout.as_secs()),
            |v| format!("{v:.2}"),
        )
    };
    let raw = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    for c in &cells {
        let key = (c.bandwidth_mbps, c.rtt_ms, c.loss_pct);
        if current != Some(key) {
            lab.set_link(
                "wan",
                Dir::Both,
                &cell_params(c.bandwidth_mbps, c.rtt_ms, c.loss_pct),
            )?;
            pair.reconfigure(&PairOptions {
                link_rate_bps: (c.bandwidth_mbps * 1e6).round() as u64,
                rtt: Duration::from_millis(c.rtt_ms),
                ..PairOptions::default()
            })?;
            current = Some(key);
        }
        let label = format!(
            "{} {}M/{}ms/{}%",
            c.file, c.bandwidth_mbps, c.rtt_ms, c.loss_pct
        );
        let mut cell = Cell::default();
        if !args.skip_baseline {
            pair.stop_both()?;
            cell.baseline = timed_fetch(
                &lab,
                &exe,
                &listen,
                c.file,
                &format!("{label} baseline"),
                args.cell_timeout,
            )?
            .map(|f| f.0);
        }
        pair.stop_both()?;
        for side in Side::BOTH {
            pair.wipe_store(side)?;
        }
        pair.start_both()?;
        let first = timed_fetch(
            &lab,
            &exe,
            &listen,
            c.file,
            &format!("{label} 1st"),
            args.cell_timeout,
        )?;
        cell.first = first.map(|f| f.0);
        cell.first_header = first.map(|f| f.1);
        cell.second = timed_fetch(
            &lab,
            &exe,
            &listen,
            c.file,
            &format!("{label} 2nd"),
            args.cell_timeout,
        )?
        .map(|f| f.0);
        pair.stop_both()?;
        let size = headway_origin::corpus::file(c.file).map_or(0, |d| d.size());
        // Goodput over the whole download, and over the body alone (from the response
        // header on: the request's round trip excluded).
        let of_target = |t: f64| {
            size as f64 * 8.0 / t.max(1e-6) / (c.bandwidth_mbps * 1e6 * (1.0 - c.loss_pct / 100.0))
        };
        let goodput = cell.first.map(|t| {
            let body = t - cell.first_header.unwrap_or(0.0);
            format!("{:.2} · {:.2}", of_target(t), of_target(body))
        });
        let target = 2.0 * c.rtt_ms as f64 / 1000.0 + 0.1;
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} |",
            c.bandwidth_mbps,
            c.rtt_ms,
            c.loss_pct,
            c.file,
            if args.skip_baseline {
                "–".into()
            } else {
                secs(cell.baseline)
            },
            secs(cell.first),
            secs(cell.second),
            goodput.unwrap_or_else(|| "–".into()),
            match cell.second {
                Some(t) if t <= target => "yes",
                _ => "NO",
            },
            c.baseline_s,
            c.first_pass_s,
            c.second_pass_s
        )?;
        writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{}",
            c.bandwidth_mbps,
            c.rtt_ms,
            c.loss_pct,
            c.file,
            raw(cell.baseline),
            raw(cell.first),
            raw(cell.second),
            c.baseline_s,
            c.first_pass_s,
            c.second_pass_s
        )?;
    }
    drop(pair);
    lab.down()?;
    println!("{md}");
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    std::fs::write(args.out.join("file-download.md"), &md)?;
    std::fs::write(args.out.join("file-download.csv"), &csv)?;
    println!(
        "report: {}/file-download.md, file-download.csv",
        args.out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_table_has_every_cell_of_the_matrix() {
        let rows = seed_rows().unwrap();
        assert_eq!(rows.len(), 6 * 3 * 3 * 4);
        let big = rows
            .iter()
            .find(|r| {
                r.file == "pdf_large"
                    && r.rtt_ms == 300
                    && r.bandwidth_mbps == 1.5
                    && r.loss_pct == 1.0
            })
            .unwrap();
        assert_eq!(
            (big.baseline_s, big.first_pass_s, big.second_pass_s),
            (355.0, 37.0, 2.0)
        );
    }

    #[test]
    fn quick_selects_four_cells_grouped_by_link() {
        let args = FileDownloadArgs {
            quick: true,
            files: vec![],
            bandwidths: vec![],
            rtts: vec![],
            losses: vec![],
            cell_timeout: Duration::from_secs(1),
            skip_baseline: false,
            seed: 1,
            out: PathBuf::new(),
        };
        let cells = args.select(seed_rows().unwrap());
        assert_eq!(cells.len(), 4);
        assert_eq!((cells[0].loss_pct, cells[1].loss_pct), (0.0, 0.0));
        assert!(cells
            .iter()
            .all(|c| c.bandwidth_mbps == 6.0 && c.rtt_ms == 90));
    }

    #[test]
    fn a_cell_is_rate_half_rtt_each_way_loss_and_a_bdp_queue() {
        let p = cell_params(1.5, 300, 1.0);
        assert_eq!(p.rate, Some(Rate::from_bps(1_500_000)));
        assert_eq!(p.delay, Duration::from_millis(150));
        assert_eq!(p.loss, Loss::Bernoulli(Probability::new(0.01).unwrap()));
        assert_eq!(p.queue.packets, Some(50));
        assert_eq!(cell_params(44.0, 90, 0.0).loss, Loss::None);
        assert!(p.validate().is_ok());
    }
}
