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
//! Beside them: the first-pass goodput as a fraction of `rate × (1 − loss)`; the first pass's
//! data reduction (LAN bytes / WAN bytes, read from the branch appliance's counters just before
//! and after the download) and its goodput as a fraction of `0.9 × rate × (1 − loss) ×
//! reduction` — the target for DOC-like (compressible) files, met at ≥ 1; whether the
//! second pass met `2 × RTT + 0.1 s`; the tunnel's counters of the first pass (FEC repair,
//! restored and held-back datagrams, QUIC packets sent and resent, congestion decreases, each
//! read before and after the download); what the first pass was on the link, from the WAN
//! emulator's counters of the DC → branch direction (frames, their serialisation time, how
//! busy that kept the link, link bytes per tunnel stream byte, and the DOC target's time over
//! that link time, which tells a miss the link could not avoid from one where it idled); and
//! the seed's three numbers. The report ends with how many cells meet each target (the first
//! pass judged by the download less one RTT) and names each miss with its ratio.
//! `headway bench wanopt correctness` (in `wanopt_correctness`) is the other half: many
//! verified transfers both ways with restarts.
//!
//! The link of a cell is `rate`, one-way delay = RTT/2, the loss on each direction (as the lab's
//! presets do), a one-BDP queue. A download that does not finish within `--cell-timeout` is
//! reported as `> timeout` and the run moves on.
//!
//! The lab's namespaces are named `--prefix` (default `hw-bench-`), its state kept in
//! `/run/headway-lab/bench` (see [`super::bench_lab`]): a second run with another prefix can
//! go on beside a first.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::units::parse_duration;
use headway_core::{Probability, Rate};
use headway_link::{Loss, Params, QueueLimit};

use crate::fetch::{fetch_document, FetchReport};
use crate::optimizer::{Pair, PairOptions, Side, Traffic};
use crate::presets::bdp_queue;
use crate::{Background, Dir, Lab};

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
    /// A 12 MB DOC-like file, then copies with 1 % (0.1 %, 5 %) of its bytes changed: the WAN
    /// bytes of each beside the first pass's.
    ChangedFile(super::wanopt_changed::ChangedFileArgs),
    /// LAN-side throughput through the pair per service class over an unconstrained link,
    /// beside the direct path (iperf3 and non-repeating data).
    Throughput(super::wanopt_throughput::ThroughputArgs),
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
    /// Optimized runs per cell (stores wiped, pair restarted, first and second pass each
    /// time): the row shows the run with the median first pass and the median second pass,
    /// and lists every run's first pass, so one run slowed by the host does not decide a
    /// cell. The baseline runs once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=15))]
    pub repeats: u32,
    /// Run the appliances without the tunnel's forward error correction (`[wanopt] fec =
    /// false`), to see what it adds.
    #[arg(long)]
    pub no_fec: bool,
    /// The service class of the intercepted download (`dedup-disk`, `dedup-memory`,
    /// `compress`, `pass-through`), to see what each stage costs the first pass.
    #[arg(long, default_value = "dedup-disk", value_parser = ["dedup-disk", "dedup-memory", "compress", "pass-through"])]
    pub class: String,
    /// Where to write file-download.md and file-download.csv.
    #[arg(long, default_value = "lab-out/bench")]
    pub out: PathBuf,
    /// Namespace prefix of this run's lab (state in /run/headway-lab/<prefix without `hw-`>):
    /// another prefix runs beside a run with the default.
    #[arg(long, default_value = "hw-bench-")]
    pub prefix: String,
}

/// The `'static` name of a service class accepted by `--class`.
fn class_name(class: &str) -> &'static str {
    match class {
        "dedup-memory" => "dedup-memory",
        "compress" => "compress",
        "pass-through" => "pass-through",
        _ => "dedup-disk",
    }
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
        if self.no_fec {
            s.push_str(" --no-fec");
        }
        if self.repeats != 1 {
            s += &format!(" --repeats {}", self.repeats);
        }
        if self.class != "dedup-disk" {
            s += &format!(" --class {}", self.class);
        }
        if self.seed != 1 {
            s += &format!(" --seed {}", self.seed);
        }
        if self.prefix != "hw-bench-" {
            s += &format!(" --prefix {}", self.prefix);
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
        WanoptCommand::ChangedFile(args) => super::wanopt_changed::run(args),
        WanoptCommand::Throughput(args) => super::wanopt_throughput::run(args),
    }
}

/// What one cell measured, seconds (`None`: over the per-cell limit).
#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    baseline: Option<f64>,
    first: Option<f64>,
    /// The first pass's time to the response header (request and set-up round trips).
    first_header: Option<f64>,
    /// The branch appliance's LAN and WAN bytes during the first pass.
    first_traffic: Traffic,
    /// Datagrams the branch appliance restored from FEC repair during the first pass.
    first_fec_restored: u64,
    /// Datagrams the branch appliance held back behind a missing datagram of a long FEC block
    /// during the first pass, and the missing datagrams it gave up on.
    first_fec_held: (u64, u64),
    /// QUIC packets the DC appliance declared lost and sent again during the first pass
    /// (with FEC, some of them were restored too: the repair came too late).
    first_resent: u64,
    /// FEC repair shards the DC appliance sent during the first pass (probes excluded).
    first_repair_sent: u64,
    /// QUIC packets the DC appliance sent during the first pass.
    first_sent: u64,
    /// The DC appliance's congestion-control decreases (queueing delay, clustered loss,
    /// persistent congestion) during the first pass.
    first_cc: (u64, u64, u64),
    /// The loss of the DC → branch path as the branch's FEC measured it by the end of the
    /// first pass (probes and data).
    first_path_loss: Option<f64>,
    /// Frames and bytes the WAN link's DC → branch direction took in during the first pass,
    /// as its emulator counted them: every datagram the link had to serialise (data, FEC
    /// repair, QUIC's retransmissions, acknowledgements, probes), lost ones included — the
    /// loss model drops after the rate limiter, so they took link time too.
    first_link: LinkUse,
    second: Option<f64>,
}

/// What the WAN link's download direction (DC → branch) took in: frames and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct LinkUse {
    frames: u64,
    bytes: u64,
}

impl LinkUse {
    /// The `wan` link's DC → branch counters now.
    fn download(lab: &Lab) -> Result<LinkUse> {
        Ok(LinkUse::of(&lab.link_stats("wan")?["b_to_a"]))
    }

    /// The counters of one direction in an emulator's stats.
    fn of(direction: &serde_json::Value) -> LinkUse {
        let count = |k: &str| direction[k].as_u64().unwrap_or(0);
        LinkUse {
            frames: count("received"),
            bytes: count("received_bytes"),
        }
    }

    /// What was taken in between `before` and `self`.
    fn since(self, before: LinkUse) -> LinkUse {
        LinkUse {
            frames: self.frames.saturating_sub(before.frames),
            bytes: self.bytes.saturating_sub(before.bytes),
        }
    }

    /// Seconds the link's serialiser needed for these bytes at `rate_mbps` (the lab's cells
    /// count no per-frame overhead).
    fn seconds(self, rate_mbps: f64) -> f64 {
        self.bytes as f64 * 8.0 / (rate_mbps * 1e6)
    }
}

/// The first pass on the link, from its counters: frames · their serialisation time (ms) ·
/// that time over the download less one RTT (how busy the link was) · link bytes per WAN
/// (tunnel stream) byte (the cost of headers, FEC repair and retransmissions) · the DOC
/// target's time for the download less one RTT (WAN bytes at 0.9 × rate × (1 − loss)) over
/// the serialisation time — below 1, the target asked for less time than the link needed to
/// carry this run's datagrams, however busy it was kept.
fn link_column(cell: &Cell, rate_mbps: f64, rtt_s: f64, loss_pct: f64) -> String {
    let link = cell.first_link;
    if link.frames == 0 {
        return "–".into();
    }
    let busy = link.seconds(rate_mbps);
    let per_wan = if cell.first_traffic.wan > 0 {
        format!("{:.3}", link.bytes as f64 / cell.first_traffic.wan as f64)
    } else {
        "–".into()
    };
    let fits = doc_fits(cell, rate_mbps, loss_pct).unwrap_or(f64::NAN);
    format!(
        "{} · {:.1} · {} · {} · {:.2}",
        link.frames,
        busy * 1000.0,
        cell.first.map_or_else(
            || "–".into(),
            |t| format!("{:.2}", busy / (t - rtt_s).max(1e-6))
        ),
        per_wan,
        fits
    )
}

/// Where one cell stands against the targets, for the summary that ends the report.
#[derive(Debug)]
struct Standing {
    /// The cell, as `44 Mbit/s 300 ms 1 % doc_small`.
    cell: String,
    /// The second pass over its target (2 × RTT + 0.1 s): met at ≤ 1; `None` without a
    /// second pass.
    second: Option<f64>,
    /// First-pass goodput over the download less one RTT, over the cell's target (PDF-like:
    /// 0.9 × rate × (1 − loss); DOC-like: that × the first pass's reduction): met at ≥ 1;
    /// `None` without a first pass (or, for a DOC-like file, without a reduction).
    first: Option<f64>,
    /// A DOC-like (compressible) file.
    doc: bool,
    /// DOC-like files: the target's time for the download less one RTT over the time the link
    /// needed for the datagrams this run sent (below 1, no run with that many datagrams could
    /// meet it).
    fits: Option<f64>,
}

/// The report's closing section: how many cells meet each target (by the download less one
/// RTT, the strictest of the goodput measures), and each miss with its ratio.
fn targets_summary(cells: &[Standing]) -> String {
    let mut out = String::from(
        "### Against the targets (the first pass judged by the download less one RTT)\n\n",
    );
    let line = |out: &mut String,
                what: &str,
                of: &[&Standing],
                miss: &dyn Fn(&Standing) -> Option<String>| {
        if of.is_empty() {
            return;
        }
        let misses: Vec<String> = of
            .iter()
            .filter_map(|s| miss(s).map(|m| format!("{} {m}", s.cell)))
            .collect();
        let _ = write!(
            out,
            "- {what}: {} of {} cells",
            of.len() - misses.len(),
            of.len()
        );
        if misses.is_empty() {
            out.push_str(".\n");
        } else {
            let _ = writeln!(out, "; not in {}.", misses.join(", "));
        }
    };
    let all: Vec<&Standing> = cells.iter().collect();
    line(
        &mut out,
        "Second pass ≤ 2 × RTT + 0.1 s",
        &all,
        &|s| match s.second {
            None => Some("(no result)".into()),
            Some(r) if r > 1.0 => Some(format!("{r:.2}× the target")),
            Some(_) => None,
        },
    );
    let first_miss = |s: &Standing| match s.first {
        None => Some("(no result)".to_string()),
        Some(r) if r < 1.0 => Some(match s.fits {
            Some(f) => format!("{r:.2}× (target time / link time {f:.2})"),
            None => format!("{r:.2}×"),
        }),
        Some(_) => None,
    };
    let pdf: Vec<&Standing> = cells.iter().filter(|s| !s.doc).collect();
    line(
        &mut out,
        "First-pass goodput on PDF-like files ≥ 0.9 × rate × (1 − loss)",
        &pdf,
        &first_miss,
    );
    let doc: Vec<&Standing> = cells.iter().filter(|s| s.doc).collect();
    line(
        &mut out,
        "First pass on DOC-like files faster than that by the reduction",
        &doc,
        &first_miss,
    );
    if doc
        .iter()
        .any(|s| s.first.is_some_and(|r| r < 1.0) && s.fits.is_some_and(|f| f < 1.0))
    {
        out.push_str("\nA DOC miss whose target time / link time is below 1 could not be met by any run that sent as many datagrams (headers, FEC repair, retransmissions) at this rate, however busy it kept the link.\n");
    }
    out
}

/// The DOC target's time for the first pass less one RTT over the time the link needed for
/// the frames it carried DC → branch; `None` without link counters.
fn doc_fits(cell: &Cell, rate_mbps: f64, loss_pct: f64) -> Option<f64> {
    let link = cell.first_link;
    // The goodput of the stream bytes over the link time, against the DOC target's rate.
    (link.frames > 0).then(|| {
        goodput_of_target(
            cell.first_traffic.wan,
            link.seconds(rate_mbps),
            rate_mbps,
            loss_pct,
            0.9,
        )
    })
}

/// One optimized run of a cell: both stores wiped, the pair started, the file fetched twice
/// (the baseline is not part of it).
fn optimized_run(
    lab: &Lab,
    pair: &mut Pair<'_>,
    exe: &str,
    listen: &str,
    file: &str,
    label: &str,
    timeout: Duration,
) -> Result<Cell> {
    let mut cell = Cell::default();
    pair.stop_both()?;
    for side in Side::BOTH {
        pair.wipe_store(side)?;
    }
    pair.start_both()?;
    warm_origin(lab, exe, listen, file)?;
    // The tunnel's counters run from the appliances' start (the handshake and the start-up
    // probe train included): each is read before and after, and the first pass is the
    // difference.
    let branch_before = pair.stats(Side::Branch)?;
    let dc_before = pair.stats(Side::Dc)?;
    let link_before = LinkUse::download(lab)?;
    let first = timed_fetch(lab, exe, listen, file, &format!("{label} 1st"), timeout)?;
    cell.first_link = LinkUse::download(lab)?.since(link_before);
    let after = pair.stats(Side::Branch)?;
    let dc = pair.stats(Side::Dc)?;
    cell.first_traffic = Traffic::of(&after).since(Traffic::of(&branch_before));
    let grew = |now: &serde_json::Value, then: &serde_json::Value, name: &str| {
        let count = |v: &serde_json::Value| v["tunnel"][name].as_u64().unwrap_or(0);
        count(now).saturating_sub(count(then))
    };
    let branch_count = |name: &str| grew(&after, &branch_before, name);
    cell.first_fec_restored = branch_count("fec_recovered");
    cell.first_fec_held = (branch_count("fec_held"), branch_count("fec_holes_given_up"));
    cell.first_path_loss = after["paths"][0]["loss_in"].as_f64();
    let dc_count = |name: &str| grew(&dc, &dc_before, name);
    cell.first_resent = dc_count("packets_lost");
    cell.first_sent = dc_count("packets_sent");
    cell.first_repair_sent = dc_count("fec_repair_sent");
    cell.first_cc = (
        dc_count("cc_delay_decreases"),
        dc_count("cc_loss_decreases"),
        dc_count("cc_persistent_congestion"),
    );
    cell.first = first.as_ref().map(|f| f.total_seconds);
    cell.first_header = first.as_ref().map(|f| f.header_seconds);
    cell.second = timed_fetch(lab, exe, listen, file, &format!("{label} 2nd"), timeout)?
        .map(|f| f.total_seconds);
    pair.stop_both()?;
    Ok(cell)
}

/// The run with the median first pass (the upper one of an even count; a download that hit
/// the cell's limit counts as the slowest), given the median second pass of all runs, and every
/// run's first pass in run order.
fn median_run(mut runs: Vec<Cell>) -> (Cell, Vec<Option<f64>>) {
    if runs.is_empty() {
        return (Cell::default(), Vec::new());
    }
    let firsts: Vec<Option<f64>> = runs.iter().map(|r| r.first).collect();
    let slowest_last = |v: &Option<f64>| v.unwrap_or(f64::INFINITY);
    let mut seconds: Vec<Option<f64>> = runs.iter().map(|r| r.second).collect();
    seconds.sort_by(|a, b| slowest_last(a).total_cmp(&slowest_last(b)));
    let second = seconds.get(seconds.len() / 2).copied().flatten();
    runs.sort_by(|a, b| slowest_last(&a.first).total_cmp(&slowest_last(&b.first)));
    let mid = runs.len() / 2;
    let mut cell = runs.swap_remove(mid);
    cell.second = second;
    (cell, firsts)
}

/// Goodput of `bytes` in `seconds` as a fraction of `rate_mbps × (1 − loss_pct/100) × factor`:
/// the first-pass targets (factor 1 for its `rate × (1 − loss)`, `0.9 × reduction` for
/// compressible data).
pub fn goodput_of_target(
    bytes: u64,
    seconds: f64,
    rate_mbps: f64,
    loss_pct: f64,
    factor: f64,
) -> f64 {
    bytes as f64 * 8.0 / seconds.max(1e-6) / (rate_mbps * 1e6 * (1.0 - loss_pct / 100.0) * factor)
}

/// One verified download of `file` through the lab; `None` on timeout.
fn timed_fetch(
    lab: &Lab,
    exe: &str,
    listen: &str,
    file: &str,
    label: &str,
    timeout: Duration,
) -> Result<Option<FetchReport>> {
    let doc = headway_origin::corpus::file(file).context("seed file missing from the corpus")?;
    fetch_document(
        lab,
        exe,
        listen,
        &format!("/files/{file}"),
        &doc,
        label,
        timeout,
    )
}

/// Downloads `file` once on the server host itself, from the origin listening at `listen`: the
/// origin generates a document's data on the first request and keeps it, and a timed first
/// pass should measure the WAN, not that (4–23 ms of a 0.56 s download on a busy 2-core
/// host, when the cell's baseline had not already asked for the file).
fn warm_origin(lab: &Lab, exe: &str, listen: &str, file: &str) -> Result<()> {
    let path = format!("/files/{file}");
    let mut fetch = lab.spawn(
        "server",
        &[exe, "lab", "tool", "fetch", "--to", listen, "--path", &path],
    )?;
    fetch
        .wait_line(Duration::from_secs(60), |l| l.starts_with("result "))
        .with_context(|| format!("warming the origin up with {path}"))?;
    Ok(())
}

/// The `branch` lab of the benchmarks that download from `headway origin`: `headway emulate`
/// on the WAN (loss sequence seeded `seed`), the origin on the server host at port 8080.
/// Returns the `headway` binary, the lab, the origin's address and the origin's guard.
pub(crate) fn origin_lab(prefix: &str, seed: u64) -> Result<(String, Lab, String, Background)> {
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();
    let lab = Lab::up(super::bench_lab(
        crate::WanMode::Emulator {
            binary: PathBuf::from(&exe),
            seed: Some(seed),
        },
        prefix,
    )?)?;
    let listen = format!("{}:8080", lab.addresses().server);
    let origin = lab.spawn("server", &[&exe, "origin", "--listen", &listen])?;
    Ok((exe, lab, listen, origin))
}

/// `headway bench wanopt file-download`.
fn file_download(args: FileDownloadArgs) -> Result<()> {
    let cells = args.select(seed_rows()?);
    if cells.is_empty() {
        bail!("no cell of the seed's table matches the filters");
    }
    let (exe, lab, listen, _origin) = origin_lab(&args.prefix, args.seed)?;
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
    writeln!(md, "Each cell: the baseline with both appliances stopped (the branch and DC hosts only route), then both stores wiped, both appliances started (transparent interception, class {}), and the file downloaded twice ({}). Every download is checked byte for byte (SHA-256). Targets: second pass ≤ 2 × RTT + 0.1 s; first-pass goodput on PDF-like (incompressible) files ≥ 0.9 × rate × (1 − loss). Goodput is given over the whole download (request round trip included), over the body alone (from the response header on), and over the download less one RTT (stricter: the earliest a first byte can arrive; the body's time flatters a cell where a loss delayed the response header while the body behind it arrived on time). For DOC-like (compressible) files the target is a first pass faster than 0.9 × rate × (1 − loss) by the data reduction: the 1st-pass reduction is the branch appliance's LAN bytes / WAN bytes (tunnel stream bytes, both directions) during the first download, and the next column is goodput / (0.9 × rate × (1 − loss) × reduction), met at ≥ 1 (for PDF-like files it is shown too; their reduction is about 1). The link column is read from the WAN emulator's counters of the DC → branch direction during the first pass: every frame it had to serialise (data, FEC repair, QUIC's retransmissions and acknowledgements, probes; lost frames too, since loss is applied after the rate limiter), their serialisation time at the cell's rate, that time over the download less one RTT (how busy the link was), link bytes per WAN byte (what IP, UDP, QUIC and FEC headers, repair and retransmissions add to the tunnel's stream bytes), and the DOC target's time for the download less one RTT over the link time: below 1, the target allowed less time than the link needed to carry the datagrams this run sent, even kept busy from the first instant to the last.\n", args.class, if args.repeats > 1 { format!("all of it {} times: each row shows the run with the median first pass, whose counters the other columns give, and the median second pass; the 1st-pass column lists every run's first pass in brackets", args.repeats) } else { "once".to_string() })?;
    writeln!(md, "| Mbit/s | RTT ms | loss % | file | baseline (s) | 1st pass (s) | 2nd pass (s) | 1st-pass goodput / (rate × (1−loss)): whole · body · time−RTT | 1st-pass reduction (LAN/WAN) | 1st-pass goodput / (0.9 × rate × (1−loss) × reduction): whole · body · time−RTT (DOC target ≥ 1) | 2nd ≤ 2·RTT+0.1 s | 1st pass: FEC repair sent · restored · held back/given up · QUIC packets sent · resent · DC congestion-control decreases (delay/loss/persistent) · DC → branch loss the branch measured | 1st pass on the link DC → branch: frames · link time (ms) · link time / (time−RTT) · link bytes / WAN byte · DOC target time / link time | seed baseline / 1st / 2nd (s) |")?;
    writeln!(
        md,
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---|"
    )?;
    let mut csv = String::from(
        "bandwidth_mbps,rtt_ms,loss_pct,file,baseline_s,first_pass_s,second_pass_s,first_pass_lan_bytes,first_pass_wan_bytes,first_pass_fec_restored,seed_baseline_s,seed_first_pass_s,seed_second_pass_s,measured_loss_pct,first_pass_quic_resent,first_pass_fec_repair_sent,first_pass_quic_sent,first_pass_cc_delay_decreases,first_pass_cc_loss_decreases,first_pass_cc_persistent,first_pass_runs_s,first_pass_link_frames,first_pass_link_bytes\n",
    );
    let mut current: Option<(f64, u64, f64)> = None;
    let secs = |v: Option<f64>| {
        v.map_or_else(
            || format!("> {}", args.cell_timeout.as_secs()),
            |v| format!("{v:.2}"),
        )
    };
    let raw = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    // Each row is saved as soon as it is measured (a run of the slow rows takes most of an
    // hour): a run that fails or is interrupted keeps the rows it finished.
    let mut done = 0usize;
    let mut standings = Vec::new();
    let mut measure = || -> Result<()> {
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
                    fec: !args.no_fec,
                    class: class_name(&args.class),
                    ..PairOptions::default()
                })?;
                current = Some(key);
            }
            let label = format!(
                "{} {}M/{}ms/{}%",
                c.file, c.bandwidth_mbps, c.rtt_ms, c.loss_pct
            );
            let mut baseline = None;
            if !args.skip_baseline {
                pair.stop_both()?;
                baseline = timed_fetch(
                    &lab,
                    &exe,
                    &listen,
                    c.file,
                    &format!("{label} baseline"),
                    args.cell_timeout,
                )?
                .map(|f| f.total_seconds);
            }
            let mut runs = Vec::new();
            for run in 1..=args.repeats {
                let label = if args.repeats > 1 {
                    format!("{label} run {run}")
                } else {
                    label.clone()
                };
                runs.push(optimized_run(
                    &lab,
                    &mut pair,
                    &exe,
                    &listen,
                    c.file,
                    &label,
                    args.cell_timeout,
                )?);
            }
            let (mut cell, first_runs) = median_run(runs);
            cell.baseline = baseline;
            let size = headway_origin::corpus::file(c.file).map_or(0, |d| d.size());
            // Goodput over the whole download, over the body alone (from the response header
            // on: the request's round trip excluded), and over the download less one RTT (the
            // earliest a first byte can arrive: stricter than the body's time, and not flattered
            // when a loss delays the header while the body behind it arrives on time).
            let rtt_s = c.rtt_ms as f64 / 1000.0;
            let whole_and_body = |factor: f64| {
                cell.first.map(|t| {
                    let body = t - cell.first_header.unwrap_or(0.0);
                    let of = |s| goodput_of_target(size, s, c.bandwidth_mbps, c.loss_pct, factor);
                    format!("{:.2} · {:.2} · {:.2}", of(t), of(body), of(t - rtt_s))
                })
            };
            let goodput = whole_and_body(1.0);
            let reduction = cell.first_traffic.reduction();
            let reduced = reduction.and_then(|r| whole_and_body(0.9 * r));
            let target = 2.0 * c.rtt_ms as f64 / 1000.0 + 0.1;
            let doc = c.file.starts_with("doc");
            let of_target = |factor: f64| {
                cell.first.map(|t| {
                    goodput_of_target(size, t - rtt_s, c.bandwidth_mbps, c.loss_pct, factor)
                })
            };
            standings.push(Standing {
                cell: format!(
                    "{} Mbit/s {} ms {} % {}",
                    c.bandwidth_mbps, c.rtt_ms, c.loss_pct, c.file
                ),
                second: cell.second.map(|t| t / target),
                first: if doc {
                    reduction.and_then(|r| of_target(0.9 * r))
                } else {
                    of_target(0.9)
                },
                doc,
                fits: if doc {
                    doc_fits(&cell, c.bandwidth_mbps, c.loss_pct)
                } else {
                    None
                },
            });
            let restored_and_loss = format!(
                "{} · {} · {}/{} · {} · {} · {}/{}/{} · {}",
                cell.first_repair_sent,
                cell.first_fec_restored,
                cell.first_fec_held.0,
                cell.first_fec_held.1,
                cell.first_sent,
                cell.first_resent,
                cell.first_cc.0,
                cell.first_cc.1,
                cell.first_cc.2,
                cell.first_path_loss
                    .map_or("–".into(), |l| format!("{:.1} %", l * 100.0))
            );
            writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} |",
                c.bandwidth_mbps,
                c.rtt_ms,
                c.loss_pct,
                c.file,
                if args.skip_baseline {
                    "–".into()
                } else {
                    secs(cell.baseline)
                },
                if first_runs.len() > 1 {
                    let runs: Vec<String> = first_runs.iter().map(|r| secs(*r)).collect();
                    format!("{} ({})", secs(cell.first), runs.join(" · "))
                } else {
                    secs(cell.first)
                },
                secs(cell.second),
                goodput.unwrap_or_else(|| "–".into()),
                reduction.map_or_else(|| "–".into(), |r| format!("{r:.2}")),
                reduced.unwrap_or_else(|| "–".into()),
                match cell.second {
                    Some(t) if t <= target => "yes",
                    _ => "NO",
                },
                restored_and_loss,
                link_column(&cell, c.bandwidth_mbps, rtt_s, c.loss_pct),
                c.baseline_s,
                c.first_pass_s,
                c.second_pass_s
            )?;
            writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                c.bandwidth_mbps,
                c.rtt_ms,
                c.loss_pct,
                c.file,
                raw(cell.baseline),
                raw(cell.first),
                raw(cell.second),
                cell.first_traffic.lan,
                cell.first_traffic.wan,
                cell.first_fec_restored,
                c.baseline_s,
                c.first_pass_s,
                c.second_pass_s,
                cell.first_path_loss
                    .map_or(String::new(), |l| format!("{:.2}", l * 100.0)),
                cell.first_resent,
                cell.first_repair_sent,
                cell.first_sent,
                cell.first_cc.0,
                cell.first_cc.1,
                cell.first_cc.2,
                first_runs
                    .iter()
                    .map(|r| raw(*r))
                    .collect::<Vec<_>>()
                    .join(" "),
                cell.first_link.frames,
                cell.first_link.bytes
            )?;
            done += 1;
            super::save_report(&args.out, "file-download", &md, &csv)?;
            eprintln!(
                "[{done}/{}] {label}: 1st pass {} s, 2nd pass {} s",
                cells.len(),
                secs(cell.first),
                secs(cell.second)
            );
        }
        Ok(())
    };
    if let Err(e) = measure() {
        return Err(e.context(format!(
            "the run stopped after {done} of {} cells; their rows are in {}",
            cells.len(),
            args.out.join("file-download.md").display()
        )));
    }
    drop(pair);
    lab.down()?;
    md.push('\n');
    md.push_str(&targets_summary(&standings));
    super::write_report(&args.out, "file-download", &md, &csv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_the_cells_that_meet_each_target_and_names_the_misses() {
        let cell = |name: &str, doc, second, first, fits| Standing {
            cell: name.into(),
            second,
            first,
            doc,
            fits,
        };
        let s = targets_summary(&[
            cell(
                "44 Mbit/s 90 ms 0 % doc_small",
                true,
                Some(0.5),
                Some(1.03),
                Some(1.02),
            ),
            cell(
                "44 Mbit/s 300 ms 5 % doc_small",
                true,
                Some(0.9),
                Some(0.86),
                Some(0.98),
            ),
            cell(
                "1.5 Mbit/s 90 ms 1 % pdf_small",
                false,
                Some(1.2),
                Some(0.97),
                None,
            ),
            cell("6 Mbit/s 90 ms 0 % pdf_small", false, None, None, None),
        ]);
        assert!(s.contains("- Second pass ≤ 2 × RTT + 0.1 s: 2 of 4 cells; not in 1.5 Mbit/s 90 ms 1 % pdf_small 1.20× the target, 6 Mbit/s 90 ms 0 % pdf_small (no result).\n"), "{s}");
        assert!(s.contains("≥ 0.9 × rate × (1 − loss): 0 of 2 cells; not in 1.5 Mbit/s 90 ms 1 % pdf_small 0.97×, 6 Mbit/s 90 ms 0 % pdf_small (no result).\n"), "{s}");
        assert!(s.contains("by the reduction: 1 of 2 cells; not in 44 Mbit/s 300 ms 5 % doc_small 0.86× (target time / link time 0.98).\n"), "{s}");
        assert!(s.contains("could not be met by any run"), "{s}");
        // A DOC miss the link could have carried in time: no such note.
        let s = targets_summary(&[cell(
            "44 Mbit/s 90 ms 0 % doc_small",
            true,
            Some(0.5),
            Some(0.95),
            Some(1.02),
        )]);
        assert!(s.contains("by the reduction: 0 of 1 cells"), "{s}");
        assert!(!s.contains("could not be met"), "{s}");
        // Every cell met, and no PDF-like file: one line per target run, no misses, no note.
        let s = targets_summary(&[cell(
            "44 Mbit/s 90 ms 0 % doc_small",
            true,
            Some(0.5),
            Some(1.0),
            Some(1.0),
        )]);
        assert!(s.contains("2 × RTT + 0.1 s: 1 of 1 cells.\n"), "{s}");
        assert!(s.contains("by the reduction: 1 of 1 cells.\n"), "{s}");
        assert!(!s.contains("PDF"), "{s}");
        assert!(!s.contains("could not be met"), "{s}");
    }

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
            no_fec: false,
            class: "dedup-disk".into(),
            seed: 1,
            repeats: 1,
            out: PathBuf::new(),
            prefix: "hw-bench-".into(),
        };
        let cells = args.select(seed_rows().unwrap());
        assert_eq!(cells.len(), 4);
        assert_eq!((cells[0].loss_pct, cells[1].loss_pct), (0.0, 0.0));
        assert!(cells
            .iter()
            .all(|c| c.bandwidth_mbps == 6.0 && c.rtt_ms == 90));
    }

    #[test]
    fn goodput_targets() {
        // 1 MB in 8 s is 1 Mbit/s: the whole of a 1 Mbit/s loss-free link.
        assert!((goodput_of_target(1_000_000, 8.0, 1.0, 0.0, 1.0) - 1.0).abs() < 1e-9);
        // At 50 % loss the target is half the rate.
        assert!((goodput_of_target(1_000_000, 8.0, 1.0, 50.0, 1.0) - 2.0).abs() < 1e-9);
        // Compressible: 3× reduction and the 0.9 factor raise the target to 2.7 Mbit/s.
        let r = goodput_of_target(1_000_000, 8.0 / 2.7, 1.0, 0.0, 0.9 * 3.0);
        assert!((r - 1.0).abs() < 1e-9, "{r}");
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

    #[test]
    fn repeated_runs_report_the_median_first_pass_and_the_median_second_pass() {
        let run = |first: Option<f64>, second: Option<f64>, sent: u64| Cell {
            first,
            second,
            first_sent: sent,
            ..Cell::default()
        };
        // The run with the median first pass brings its own counters; the second pass is the
        // median of all runs'; a download over the limit counts as the slowest.
        let (cell, firsts) = median_run(vec![
            run(Some(0.31), Some(0.20), 1),
            run(None, Some(0.10), 2),
            run(Some(0.29), None, 3),
        ]);
        assert_eq!(cell.first, Some(0.31));
        assert_eq!(cell.first_sent, 1);
        assert_eq!(cell.second, Some(0.20));
        assert_eq!(firsts, vec![Some(0.31), None, Some(0.29)]);
        // One run is itself; an even count takes the upper middle.
        let (one, _) = median_run(vec![run(Some(1.0), Some(2.0), 7)]);
        assert_eq!(
            (one.first, one.second, one.first_sent),
            (Some(1.0), Some(2.0), 7)
        );
        let (even, _) = median_run(vec![
            run(Some(4.0), Some(1.0), 4),
            run(Some(3.0), Some(2.0), 3),
        ]);
        assert_eq!((even.first, even.second), (Some(4.0), Some(2.0)));
        assert_eq!(median_run(Vec::new()).1, Vec::<Option<f64>>::new());
    }

    #[test]
    fn the_link_column_compares_the_target_with_the_link_time_the_datagrams_took() {
        // An emulator's direction counters, as `ctl links --json` gives them.
        let at = |frames: u64, bytes: u64| {
            LinkUse::of(&serde_json::json!({
                "received": frames, "received_bytes": bytes, "passed": frames, "lost": 0
            }))
        };
        let link = at(1_240, 1_500_000).since(at(40, 300_000));
        assert_eq!(
            link,
            LinkUse {
                frames: 1_200,
                bytes: 1_200_000
            }
        );
        // Counters that went down (an emulator restarted) count as nothing.
        assert_eq!(at(1, 1).since(at(2, 2)), LinkUse::default());
        // 1.2 MB at 48 Mbit/s: 200 ms on the link; the download took 250 ms past one RTT;
        // 1.08 MB of tunnel stream bytes at 0.9 × 48 Mbit/s × (1 − 10 %) is 222 ms.
        let cell = Cell {
            first: Some(0.35),
            first_link: link,
            first_traffic: Traffic {
                lan: 3_000_000,
                wan: 1_080_000,
            },
            ..Cell::default()
        };
        assert_eq!(
            link_column(&cell, 48.0, 0.1, 10.0),
            "1200 · 200.0 · 0.80 · 1.111 · 1.11"
        );
        // A run without counters (no frame seen) shows none.
        assert_eq!(link_column(&Cell::default(), 48.0, 0.1, 0.0), "–");
    }
}
