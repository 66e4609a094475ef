//! `headway lab calibrate`: the seed's dummynet calibration, run against our emulator.
//!
//! This module owns the calibration plan (the rows of seed 001's Appendix A, copied below from
//! `shared/scenarios/dummynet_calibration.csv`), the measurement of each row in a `pair` lab
//! with our own tools ([`crate::tool`]), the verdicts, and the report (a text table on stdout,
//! CSV and Markdown files).
//!
//! ## Method, per kind of row
//!
//! - **rate** (64 kbit/s … 100 Mbit/s): the link is set to the rate (both directions) with a
//!   queue of about 50 ms; a UDP flood of fixed-size datagrams paced at 1.2× the rate runs from
//!   client to server, and the server's sink measures the L2 rate: the bits of every frame after
//!   the first (UDP payload + 42 bytes of headers, which is what the emulator's rate limiter
//!   counts) over the time from the first frame's arrival to the last's. Frames are 100 bytes
//!   below 1 Mbit/s (so even 64 kbit/s gives hundreds of frames), 1514 bytes above. TCP goodput
//!   (iperf3, as the seed measured) is shown beside it as information: it is lower than the L2
//!   rate by the header overhead and depends on TCP, not on the link's accuracy.
//! - **delay** (0 … 2000 ms): the configured delay `D` is a round-trip delay (the seed compared
//!   ping RTTs with it), so each direction gets `D/2`. An echo server runs in the server; the
//!   client's prober sends probes every 1 ms, first over the direct veth, then through the
//!   emulator; *measured* = mean RTT through the emulator − mean RTT over the direct link, which
//!   removes our user-space tools' own latency. The 0 ms row is thus exactly what the emulator
//!   adds.
//! - **loss** (0 … 5 %): loss is configured on client → server only; numbered one-way datagrams
//!   go from client to server and the sink counts the distinct sequence numbers that arrive.
//!
//! ## Targets (PASS)
//!
//! - rate: within ±1 % of the configured rate, and at least as close to 100 % as dummynet;
//! - delay: within ±0.1 ms of `D` for 2–2000 ms, and at most 0.1 ms added at 0 ms (dummynet:
//!   0.268 ms); also at least as close to 100 % as dummynet;
//! - loss: the configured probability lies inside the 99 % Wilson interval of the observed loss
//!   ([`crate::stats`]). The comparison with dummynet's accuracy is shown but does not decide
//!   the verdict for loss rows: with 10,000 probes the sampling error alone (e.g. ±2.2 losses of
//!   5 expected at 0.05 %, ±45 % of the rate) is far larger than dummynet's published deviation,
//!   so "closer to 100 % than dummynet" would be a coin toss, not a property of the emulator.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::units::format_duration;
use headway_core::{Probability, Rate};
use headway_link::{Loss, Params, QueueLimit};
use serde::de::DeserializeOwned;

use crate::interrupt;
use crate::lab::{Lab, LabOptions, WanMode};
use crate::spec::Dir;
use crate::stats;
use crate::tool::{ProbeReport, SinkReport, FRAME_OVERHEAD};
use crate::topology::TopologyKind;

/// The kind of a calibration row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Link rate.
    Rate,
    /// Round-trip delay.
    Delay,
    /// Loss probability.
    Loss,
}

impl Kind {
    /// The seed's name for the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Rate => "rate",
            Kind::Delay => "delay",
            Kind::Loss => "loss",
        }
    }
}

/// One row of the seed's calibration table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeedRow {
    /// Kind of row.
    pub kind: Kind,
    /// The configured value as the seed writes it.
    pub configured: &'static str,
    /// The configured value in base units: bit/s, ms, or a fraction.
    pub value: f64,
    /// dummynet's measurement as the seed writes it.
    pub measured: &'static str,
    /// dummynet's measurement in the same base units.
    pub measured_value: f64,
    /// dummynet's accuracy in percent, where the seed gives one.
    pub accuracy_pct: Option<f64>,
}

const fn row(
    kind: Kind,
    configured: &'static str,
    value: f64,
    measured: &'static str,
    measured_value: f64,
    accuracy_pct: Option<f64>,
) -> SeedRow {
    SeedRow {
        kind,
        configured,
        value,
        measured,
        measured_value,
        accuracy_pct,
    }
}

/// Seed 001, Appendix A (`dummynet_calibration.csv`, rows 1–20 in file order). Rate accuracy
/// there is iperf TCP utilisation / 93.64 %; delay is the mean of 10,000 pings; loss is 10,000
/// pings counted at the far end.
pub const DUMMYNET: [SeedRow; 20] = [
    row(
        Kind::Rate,
        "64 kbit/s",
        64e3,
        "59.56 kbit/s",
        59.56e3,
        Some(99.3),
    ),
    row(
        Kind::Rate,
        "256 kbit/s",
        256e3,
        "238.90 kbit/s",
        238.90e3,
        Some(99.6),
    ),
    row(
        Kind::Rate,
        "1024 kbit/s",
        1024e3,
        "935.80 kbit/s",
        935.80e3,
        Some(97.6),
    ),
    row(
        Kind::Rate,
        "4096 kbit/s",
        4096e3,
        "3827.71 kbit/s",
        3827.71e3,
        Some(99.7),
    ),
    row(
        Kind::Rate,
        "10 Mbit/s",
        10e6,
        "9.491 Mbit/s",
        9.491e6,
        Some(101.4),
    ),
    row(
        Kind::Rate,
        "51.84 Mbit/s",
        51.84e6,
        "49.112 Mbit/s",
        49.112e6,
        Some(101.2),
    ),
    row(
        Kind::Rate,
        "100 Mbit/s",
        100e6,
        "93.194 Mbit/s",
        93.194e6,
        Some(99.5),
    ),
    row(Kind::Delay, "0 ms", 0.0, "0.268 ms", 0.268, None),
    row(Kind::Delay, "2 ms", 2.0, "1.876 ms", 1.876, Some(93.80)),
    row(Kind::Delay, "10 ms", 10.0, "9.887 ms", 9.887, Some(98.87)),
    row(Kind::Delay, "40 ms", 40.0, "39.88 ms", 39.88, Some(99.70)),
    row(Kind::Delay, "100 ms", 100.0, "99.89 ms", 99.89, Some(99.89)),
    row(
        Kind::Delay,
        "200 ms",
        200.0,
        "199.85 ms",
        199.85,
        Some(99.92),
    ),
    row(
        Kind::Delay,
        "2000 ms",
        2000.0,
        "1999.63 ms",
        1999.63,
        Some(99.98),
    ),
    row(Kind::Loss, "0%", 0.0, "0%", 0.0, None),
    row(Kind::Loss, "0.05%", 0.0005, "0.03%", 0.0003, Some(60.0)),
    row(Kind::Loss, "0.1%", 0.001, "0.11%", 0.0011, Some(110.0)),
    row(Kind::Loss, "0.5%", 0.005, "0.48%", 0.0048, Some(96.0)),
    row(Kind::Loss, "1%", 0.01, "0.91%", 0.0091, Some(91.0)),
    row(Kind::Loss, "5%", 0.05, "4.74%", 0.0474, Some(94.0)),
];

/// A row to measure: the seed row and how long to measure it.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The seed row (for a quick-only rate such as 1024 kbit/s this is the seed's own row).
    pub seed: SeedRow,
    /// Flood duration (rate rows).
    pub duration: Duration,
    /// Number of probes (delay and loss rows).
    pub probes: u64,
}

/// The rows to measure: every seed row in full mode; in quick mode rate 1024 kbit/s and
/// 10 Mbit/s for 1.5 s each, delay 0 and 10 ms with 500 probes, and loss 5 % with 2,000 probes.
pub fn plan(quick: bool) -> Vec<Case> {
    let pick = |kind: Kind, configured: &str| {
        *DUMMYNET
            .iter()
            .find(|r| r.kind == kind && r.configured == configured)
            .expect("a seed row")
    };
    if quick {
        let d = Duration::from_millis(1500);
        return vec![
            Case {
                seed: pick(Kind::Rate, "1024 kbit/s"),
                duration: d,
                probes: 0,
            },
            Case {
                seed: pick(Kind::Rate, "10 Mbit/s"),
                duration: d,
                probes: 0,
            },
            Case {
                seed: pick(Kind::Delay, "0 ms"),
                duration: Duration::ZERO,
                probes: 500,
            },
            Case {
                seed: pick(Kind::Delay, "10 ms"),
                duration: Duration::ZERO,
                probes: 500,
            },
            Case {
                seed: pick(Kind::Loss, "5%"),
                duration: Duration::ZERO,
                probes: 2000,
            },
        ];
    }
    DUMMYNET
        .iter()
        .map(|r| {
            let duration = if r.kind == Kind::Rate {
                // At least 3 s, and at least 300 frames at the frame size used for that rate.
                let (_, frame_bits) = frame_for_rate(r.value);
                Duration::from_secs_f64((300.0 * frame_bits / r.value).max(3.0))
            } else {
                Duration::ZERO
            };
            Case {
                seed: *r,
                duration,
                probes: if r.kind == Kind::Rate { 0 } else { 10_000 },
            }
        })
        .collect()
}

/// The UDP payload for a rate row and its frame's length in bits: 100-byte frames below
/// 1 Mbit/s, 1514-byte frames from 1 Mbit/s up.
pub fn frame_for_rate(bps: f64) -> (usize, f64) {
    let payload: usize = if bps < 1e6 { 58 } else { 1472 };
    (payload, ((payload as u64 + FRAME_OVERHEAD) * 8) as f64)
}

/// A queue of about 50 ms at `bps` for frames of `frame_bits`, at least 20 packets: deep
/// enough that the link never idles while the flood runs, shallow enough to drain fast.
pub fn queue_for_rate(bps: f64, frame_bits: f64) -> u32 {
    ((bps * 0.05 / frame_bits).ceil() as u32).max(20)
}

/// PASS or FAIL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The row meets its target.
    Pass,
    /// It does not (or could not be measured).
    Fail,
}

impl Verdict {
    fn from_bool(ok: bool) -> Self {
        if ok {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    }

    /// `PASS` or `FAIL`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
        }
    }
}

/// The result of one row.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The seed row.
    pub seed: SeedRow,
    /// Our measurement in the row's base units (bit/s, ms, fraction); `None` if it failed.
    pub measured: Option<f64>,
    /// Our accuracy in percent, where one is defined.
    pub accuracy_pct: Option<f64>,
    /// The target, in words.
    pub target: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Whether we are at least as accurate as dummynet, where both have an accuracy.
    pub vs_dummynet: Option<bool>,
    /// Extra information (TCP goodput, probe counts, intervals, errors).
    pub notes: String,
}

/// Judges a rate row: `measured_bps` against the configured rate.
pub fn judge_rate(seed: &SeedRow, measured_bps: f64) -> Outcome {
    let acc = stats::accuracy_pct(measured_bps, seed.value);
    let within = acc.is_some_and(|a| (a - 100.0).abs() <= 1.0);
    let vs = acc
        .zip(seed.accuracy_pct)
        .map(|(o, t)| stats::at_least_as_accurate(o, t));
    Outcome {
        seed: *seed,
        measured: Some(measured_bps),
        accuracy_pct: acc,
        target: "±1 % and ≥ dummynet".into(),
        verdict: Verdict::from_bool(within && vs != Some(false)),
        vs_dummynet: vs,
        notes: String::new(),
    }
}

/// Judges a delay row: `measured_ms` (round trip added) against the configured delay.
pub fn judge_delay(seed: &SeedRow, measured_ms: f64) -> Outcome {
    if seed.value == 0.0 {
        let ok = measured_ms <= 0.1 && measured_ms <= seed.measured_value;
        return Outcome {
            seed: *seed,
            measured: Some(measured_ms),
            accuracy_pct: None,
            target: "≤ 0.1 ms added".into(),
            verdict: Verdict::from_bool(ok),
            vs_dummynet: Some(measured_ms.abs() <= seed.measured_value),
            notes: String::new(),
        };
    }
    let acc = stats::accuracy_pct(measured_ms, seed.value);
    let within = (measured_ms - seed.value).abs() <= 0.1;
    let vs = acc
        .zip(seed.accuracy_pct)
        .map(|(o, t)| stats::at_least_as_accurate(o, t));
    Outcome {
        seed: *seed,
        measured: Some(measured_ms),
        accuracy_pct: acc,
        target: "±0.1 ms and ≥ dummynet".into(),
        verdict: Verdict::from_bool(within && vs != Some(false)),
        vs_dummynet: vs,
        notes: String::new(),
    }
}

/// Judges a loss row: `lost` of `sent` one-way probes against the configured probability.
pub fn judge_loss(seed: &SeedRow, lost: u64, sent: u64) -> Outcome {
    let measured = if sent == 0 {
        f64::NAN
    } else {
        lost as f64 / sent as f64
    };
    let acc = stats::accuracy_pct(measured, seed.value);
    let ok = sent > 0 && stats::consistent_99(seed.value, lost, sent);
    let (lo, hi) = stats::wilson(lost, sent, stats::Z_99);
    Outcome {
        seed: *seed,
        measured: Some(measured),
        accuracy_pct: acc,
        target: "inside 99 % interval".into(),
        verdict: Verdict::from_bool(ok),
        vs_dummynet: acc
            .zip(seed.accuracy_pct)
            .map(|(o, t)| stats::at_least_as_accurate(o, t)),
        notes: format!(
            "{lost} of {sent} lost; 99 % interval {:.3}–{:.3} %",
            lo * 100.0,
            hi * 100.0
        ),
    }
}

/// A failed measurement.
fn failed(seed: &SeedRow, error: &anyhow::Error) -> Outcome {
    Outcome {
        seed: *seed,
        measured: None,
        accuracy_pct: None,
        target: String::new(),
        verdict: Verdict::Fail,
        vs_dummynet: None,
        notes: format!("error: {}", format!("{error:#}").replace('\n', " ")),
    }
}

/// Formats a value of `kind` in base units the way the seed writes it.
pub fn format_value(kind: Kind, v: f64) -> String {
    if !v.is_finite() {
        return "n/a".into();
    }
    match kind {
        Kind::Rate if v >= 10e6 => format!("{:.3} Mbit/s", v / 1e6),
        Kind::Rate => format!("{:.2} kbit/s", v / 1e3),
        Kind::Delay => format!("{v:.3} ms"),
        Kind::Loss => format!("{:.3}%", v * 100.0),
    }
}

fn opt_pct(v: Option<f64>) -> String {
    v.map(|a| format!("{a:.2}")).unwrap_or_default()
}

fn vs_text(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "",
    }
}

const HEADERS: [&str; 10] = [
    "kind",
    "configured",
    "measured",
    "accuracy %",
    "dummynet measured",
    "dummynet accuracy %",
    "≥ dummynet",
    "target",
    "verdict",
    "notes",
];

fn cells(o: &Outcome) -> [String; 10] {
    [
        o.seed.kind.as_str().into(),
        o.seed.configured.into(),
        o.measured
            .map(|m| format_value(o.seed.kind, m))
            .unwrap_or_else(|| "n/a".into()),
        opt_pct(o.accuracy_pct),
        o.seed.measured.into(),
        opt_pct(o.seed.accuracy_pct),
        vs_text(o.vs_dummynet).into(),
        o.target.clone(),
        o.verdict.as_str().into(),
        o.notes.clone(),
    ]
}

/// The report as an aligned text table.
pub fn render_table(outcomes: &[Outcome]) -> String {
    let rows: Vec<[String; 10]> = outcomes.iter().map(cells).collect();
    let mut widths = HEADERS.map(|h| h.chars().count());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: &[String]| {
        let mut s = String::new();
        for (i, c) in cols.iter().enumerate() {
            let pad = widths[i] - c.chars().count();
            if i + 1 == cols.len() {
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&HEADERS.map(String::from));
    for r in &rows {
        out.push_str(&line(r));
    }
    let passed = outcomes
        .iter()
        .filter(|o| o.verdict == Verdict::Pass)
        .count();
    let _ = writeln!(out, "{passed} of {} rows PASS", outcomes.len());
    out
}

/// The report as CSV (header line, then one line per row; fields quoted where needed).
pub fn render_csv(outcomes: &[Outcome]) -> String {
    let quote = |s: &str| {
        if s.contains([',', '"', '\n']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    };
    let mut out = String::from(
        "kind,configured,measured,accuracy_pct,dummynet_measured,dummynet_accuracy_pct,\
         at_least_as_accurate,target,verdict,notes\n",
    );
    for o in outcomes {
        let c = cells(o);
        let line: Vec<String> = c.iter().map(|s| quote(s)).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

/// The report as Markdown: a title, how it was made, the table and the method notes.
pub fn render_markdown(outcomes: &[Outcome], command: &str, when: &str) -> String {
    let mut out = String::from("# Emulator calibration against seed 001's dummynet table\n\n");
    let _ = writeln!(out, "Command: `{command}`  \nWhen: {when} (UTC)\n");
    let _ = writeln!(out, "| {} |", HEADERS.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(HEADERS.len()));
    for o in outcomes {
        let c = cells(o).map(|s| s.replace('|', "\\|"));
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
    let passed = outcomes
        .iter()
        .filter(|o| o.verdict == Verdict::Pass)
        .count();
    let _ = writeln!(out, "\n{passed} of {} rows PASS.\n", outcomes.len());
    out.push_str(
        "Method: rate = receiver's L2 rate of a UDP flood paced at 1.2× the rate (frame = UDP \
         payload + 42 bytes), TCP goodput (iperf3) in the notes; delay = configured round trip \
         (D/2 each way), measured = mean UDP echo RTT through the emulator − mean RTT over the \
         direct veth, probes every 1 ms; loss = configured client→server only, numbered one-way \
         datagrams counted at the server. dummynet's rate accuracy is TCP utilisation / 93.64 %. \
         Loss verdicts use the 99 % Wilson interval; the comparison with dummynet's loss accuracy \
         is informational (sampling noise dominates at 10,000 probes).\n",
    );
    out
}

/// `headway lab calibrate` arguments.
#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// A few short rows (CI): rate 1 and 10 Mbit/s, delay 0 and 10 ms, loss 5 %.
    #[arg(long)]
    pub quick: bool,
    /// Where to write calibration.csv and calibration.md (default ./lab-out/calibrate-TIME).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The emulator's RNG seed (loss rows).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Lab state directory (logs of this run go to its `calibrate` subdirectory).
    #[arg(long, env = "HEADWAY_LAB_DIR", default_value = crate::lab::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// The `headway` binary to run the emulator and tools (default: this binary).
    #[arg(long, hide = true)]
    pub binary: Option<PathBuf>,
}

/// The namespace prefix calibration uses, distinct from `lab up`'s so a calibration never
/// removes a lab the user is working in (a later `lab up` does remove a running calibration,
/// since `hw-cal-` starts with `hw-`).
pub const PREFIX: &str = "hw-cal-";

/// Ports the tools use inside the lab.
const SINK_PORT: u16 = 5301;
const IPERF_PORT: u16 = 5302;
const ECHO_PORT: u16 = 5303;

/// Runs the calibration: brings up a `pair` lab, measures every planned row, prints the table
/// and writes the CSV and Markdown reports. The lab is removed at the end, on error and on
/// Ctrl-C.
pub fn run(args: CalibrateArgs) -> Result<()> {
    interrupt::install();
    let binary = match args.binary {
        Some(b) => b,
        None => std::env::current_exe().context("finding the headway binary")?,
    };
    let when = timestamp();
    let out_dir = args.out.unwrap_or_else(|| {
        PathBuf::from(format!(
            "lab-out/calibrate-{}",
            when.replace([':', ' '], "")
        ))
    });
    let mut opts = LabOptions::new(TopologyKind::Pair);
    opts.wan = WanMode::Emulator {
        binary: binary.clone(),
        seed: Some(args.seed),
    };
    opts.prefix = PREFIX.into();
    opts.state_dir = args.state_dir.join("calibrate");
    eprintln!("calibrate: building a pair lab ({}…)", PREFIX);
    let lab = Lab::up(opts)?;
    let cases = plan(args.quick);
    let bar = indicatif::ProgressBar::new(cases.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut tools = Tools {
        lab: &lab,
        binary: &binary,
        echo: None,
    };
    let echo_args = [format!("--listen=0.0.0.0:{ECHO_PORT}")];
    let mut echo = lab.spawn("server", &tools.argv("echo", &echo_args))?;
    echo.wait_line(Duration::from_secs(10), |l| l.trim() == "ready")?;
    tools.echo = Some(echo);
    let mut outcomes = Vec::new();
    for case in &cases {
        bar.set_message(format!(
            "{} {}",
            case.seed.kind.as_str(),
            case.seed.configured
        ));
        let outcome = match tools.measure(case) {
            Ok(o) => o,
            Err(e) if e.downcast_ref::<interrupt::Interrupted>().is_some() => return Err(e),
            Err(e) => failed(&case.seed, &e),
        };
        outcomes.push(outcome);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let table = render_table(&outcomes);
    print!("{table}");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let command = format!(
        "headway lab calibrate{} --seed {}",
        if args.quick { " --quick" } else { "" },
        args.seed
    );
    write(&out_dir.join("calibration.csv"), &render_csv(&outcomes))?;
    write(
        &out_dir.join("calibration.md"),
        &render_markdown(&outcomes, &command, &when),
    )?;
    println!("reports: {}", out_dir.display());
    lab.down()
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Runs the measurement tools in a lab.
struct Tools<'a> {
    lab: &'a Lab,
    binary: &'a Path,
    /// The echo server in the server namespace, for the whole run (stopped on drop).
    echo: Option<crate::lab::Background>,
}

impl Tools<'_> {
    fn argv<'s>(&'s self, tool: &'s str, args: &'s [String]) -> Vec<&'s str> {
        let mut v = vec![
            self.binary.to_str().unwrap_or("headway"),
            "lab",
            "tool",
            tool,
        ];
        v.extend(args.iter().map(String::as_str));
        v
    }

    fn measure(&self, case: &Case) -> Result<Outcome> {
        interrupt::check()?;
        match case.seed.kind {
            Kind::Rate => self.rate(case),
            Kind::Delay => self.delay(case),
            Kind::Loss => self.loss(case),
        }
    }

    fn rate(&self, case: &Case) -> Result<Outcome> {
        let bps = case.seed.value;
        let (payload, frame_bits) = frame_for_rate(bps);
        let params = Params {
            rate: Some(Rate::from_bps(bps as u64)),
            queue: QueueLimit {
                packets: Some(queue_for_rate(bps, frame_bits)),
                ..QueueLimit::default()
            },
            ..Params::default()
        };
        self.lab.set_link("wan", Dir::Both, &params)?;
        self.warm_up(Duration::ZERO)?;
        let server = self.lab.server_addr();
        let sink_args = [
            format!("--listen={server}:{SINK_PORT}"),
            "--idle=1s".into(),
            format!(
                "--max-time={}",
                format_duration(case.duration + Duration::from_secs(30))
            ),
        ];
        let flood_args = [
            format!("--to={server}:{SINK_PORT}"),
            format!("--rate={}bit", (bps * 1.2).round() as u64),
            format!("--size={payload}"),
            format!("--duration={}", format_duration(case.duration)),
        ];
        let report: SinkReport = self.sink_while(&sink_args, &flood_args, case.duration)?;
        let Some(measured) = report.l2_rate_bps else {
            bail!(
                "the sink received {} frames: too few to measure a rate",
                report.frames
            );
        };
        let mut o = judge_rate(&case.seed, measured);
        o.notes = format!("{} frames", report.frames);
        match self.tcp_goodput(case.duration) {
            Ok(g) => {
                let _ = write!(o.notes, "; TCP goodput {}", format_value(Kind::Rate, g));
            }
            Err(e) => {
                let _ = write!(o.notes, "; TCP goodput n/a ({})", first_line(&e));
            }
        }
        Ok(o)
    }

    /// Starts a sink in the server, runs a flood from the client, and returns the sink's report.
    fn sink_while<T: DeserializeOwned>(
        &self,
        sink_args: &[String],
        flood_args: &[String],
        duration: Duration,
    ) -> Result<T> {
        let mut sink = self
            .lab
            .spawn("server", &self.argv("udp-sink", sink_args))?;
        sink.wait_line(Duration::from_secs(10), |l| l.trim() == "ready")?;
        let out = self
            .lab
            .exec("client", &self.argv("udp-flood", flood_args))?;
        if !out.status.success() {
            bail!(
                "udp-flood failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let (status, lines) = sink.finish(duration + Duration::from_secs(45))?;
        if !status.success() {
            bail!("udp-sink failed ({status})");
        }
        parse_json_line(&lines)
    }

    fn tcp_goodput(&self, duration: Duration) -> Result<f64> {
        let server = self.lab.server_addr().to_string();
        let port = IPERF_PORT.to_string();
        let mut srv = self.lab.spawn(
            "server",
            &[
                "iperf3",
                "-s",
                "-1",
                "-B",
                &server,
                "-p",
                &port,
                "--forceflush",
            ],
        )?;
        srv.wait_line(Duration::from_secs(10), |l| l.contains("listening"))?;
        let secs = duration.as_secs().max(2).to_string();
        let out = self.lab.exec(
            "client",
            &["iperf3", "-c", &server, "-p", &port, "-t", &secs, "-J"],
        )?;
        let _ = srv.stop();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("iperf3 printed no JSON ({})", out.status))?;
        if let Some(err) = json.get("error").and_then(|e| e.as_str()) {
            bail!("iperf3: {err}");
        }
        json.pointer("/end/sum_received/bits_per_second")
            .and_then(serde_json::Value::as_f64)
            .context("iperf3's JSON has no end.sum_received.bits_per_second")
    }

    fn delay(&self, case: &Case) -> Result<Outcome> {
        let rtt = Duration::from_secs_f64(case.seed.value / 1e3);
        let params = Params {
            delay: rtt / 2,
            ..Params::default()
        };
        self.lab.set_link("wan", Dir::Both, &params)?;
        self.warm_up(rtt)?;
        let direct = self
            .lab
            .server_direct_addr()
            .context("the pair topology has a direct link")?;
        let base = self.probe(direct.to_string(), case.probes, Duration::from_secs(1))?;
        let wan = self.probe(
            self.lab.server_addr().to_string(),
            case.probes,
            rtt + Duration::from_secs(2),
        )?;
        if base.received == 0 || wan.received == 0 {
            bail!(
                "no replies ({} direct, {} through the emulator, of {})",
                base.received,
                wan.received,
                case.probes
            );
        }
        let measured = (wan.mean_ns - base.mean_ns) / 1e6;
        let mut o = judge_delay(&case.seed, measured);
        o.notes = format!(
            "RTT through emulator {:.3} ms ({} of {} replies), direct {:.3} ms",
            wan.mean_ns / 1e6,
            wan.received,
            wan.sent,
            base.mean_ns / 1e6
        );
        Ok(o)
    }

    /// A few probes on both paths, so ARP is resolved before anything is measured: a first
    /// probe waiting for ARP would skew a mean RTT, and a lost ARP request would stall a flood
    /// for a second and be counted as loss.
    fn warm_up(&self, rtt: Duration) -> Result<()> {
        anyhow::ensure!(self.echo.is_some(), "the echo server is not running");
        let direct = self.lab.server_direct_addr().map(|a| a.to_string());
        for addr in [Some(self.lab.server_addr().to_string()), direct]
            .into_iter()
            .flatten()
        {
            self.probe(addr, 3, rtt + Duration::from_secs(1))?;
        }
        Ok(())
    }

    fn probe(&self, addr: String, count: u64, wait: Duration) -> Result<ProbeReport> {
        let args = [
            format!("--to={addr}:{ECHO_PORT}"),
            format!("--count={count}"),
            "--interval=1ms".into(),
            format!("--wait={}", format_duration(wait)),
        ];
        let out = self.lab.exec("client", &self.argv("probe", &args))?;
        if !out.status.success() {
            bail!(
                "probe failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        parse_json_line(&text.lines().map(str::to_string).collect::<Vec<_>>())
    }

    fn loss(&self, case: &Case) -> Result<Outcome> {
        let p = Probability::new(case.seed.value).context("a loss probability")?;
        self.lab.set_link("wan", Dir::Both, &Params::default())?;
        self.warm_up(Duration::ZERO)?;
        let lossy = Params {
            loss: Loss::Bernoulli(p),
            ..Params::default()
        };
        self.lab.set_link("wan", Dir::AToB, &lossy)?;
        // 100-byte frames, 5,000 per second: 10,000 probes take 2 s.
        let payload = 58u64;
        let pps = 5000.0;
        let rate = ((payload + FRAME_OVERHEAD) as f64 * 8.0 * pps) as u64;
        let duration = Duration::from_secs_f64(case.probes as f64 / pps + 5.0);
        let server = self.lab.server_addr();
        let sink_args = [
            format!("--listen={server}:{SINK_PORT}"),
            "--idle=1s".into(),
            format!(
                "--max-time={}",
                format_duration(duration + Duration::from_secs(30))
            ),
        ];
        let flood_args = [
            format!("--to={server}:{SINK_PORT}"),
            format!("--rate={rate}bit"),
            format!("--size={payload}"),
            format!("--count={}", case.probes),
            format!("--duration={}", format_duration(duration)),
        ];
        let report: SinkReport = self.sink_while(&sink_args, &flood_args, duration)?;
        let sent = case.probes;
        let lost = sent.saturating_sub(report.distinct);
        Ok(judge_loss(&case.seed, lost, sent))
    }
}

fn first_line(e: &anyhow::Error) -> String {
    format!("{e:#}")
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Parses the last line of `lines` that holds a JSON object.
pub fn parse_json_line<T: DeserializeOwned>(lines: &[String]) -> Result<T> {
    let line = lines
        .iter()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("the tool printed no report")?;
    serde_json::from_str(line).with_context(|| format!("reading the tool's report `{line}`"))
}

/// The wall-clock time as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn timestamp() -> String {
    let secs = headway_core::clock::wall_clock()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_utc(secs)
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm, proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(kind: Kind, configured: &str) -> SeedRow {
        *DUMMYNET
            .iter()
            .find(|r| r.kind == kind && r.configured == configured)
            .unwrap()
    }

    #[test]
    fn the_seed_table_has_every_row_of_the_csv() {
        assert_eq!(DUMMYNET.iter().filter(|r| r.kind == Kind::Rate).count(), 7);
        assert_eq!(DUMMYNET.iter().filter(|r| r.kind == Kind::Delay).count(), 7);
        assert_eq!(DUMMYNET.iter().filter(|r| r.kind == Kind::Loss).count(), 6);
        // The seed's accuracy column is measured / configured for delay and loss (loss accuracy
        // truncated to whole percent: 4.74 / 5 = 94.8 is written 94).
        for r in DUMMYNET.iter().filter(|r| r.kind != Kind::Rate) {
            if let Some(a) = r.accuracy_pct {
                let ours = r.measured_value / r.value * 100.0;
                let tol = if r.kind == Kind::Loss { 1.0 } else { 0.06 };
                assert!((ours - a).abs() < tol, "{}: {ours} vs {a}", r.configured);
            }
        }
    }

    #[test]
    fn quick_plan_is_small_and_full_plan_is_the_whole_table() {
        let q = plan(true);
        assert_eq!(q.len(), 5);
        assert!(q.iter().all(|c| c.probes <= 2000));
        let full = plan(false);
        assert_eq!(full.len(), DUMMYNET.len());
        let slow = full
            .iter()
            .find(|c| c.seed.configured == "64 kbit/s")
            .unwrap();
        // 300 frames of 800 bits at 64 kbit/s = 3.75 s.
        assert_eq!(slow.duration, Duration::from_secs_f64(3.75));
        assert!(full
            .iter()
            .filter(|c| c.seed.kind != Kind::Rate)
            .all(|c| c.probes == 10_000));
    }

    #[test]
    fn frames_and_queues_for_rates() {
        assert_eq!(frame_for_rate(64e3), (58, 800.0));
        assert_eq!(frame_for_rate(10e6), (1472, 12_112.0));
        assert_eq!(queue_for_rate(64e3, 800.0), 20);
        // 100 Mbit/s × 50 ms / 12,112 bits = 412.8 → 413.
        assert_eq!(queue_for_rate(100e6, 12_112.0), 413);
    }

    #[test]
    fn rate_verdicts() {
        let r = seed(Kind::Rate, "10 Mbit/s");
        assert_eq!(judge_rate(&r, 10_050_000.0).verdict, Verdict::Pass);
        assert_eq!(judge_rate(&r, 10_150_000.0).verdict, Verdict::Fail);
        // Within ±1 % but less accurate than dummynet's 99.7 % at 4096 kbit/s.
        let r = seed(Kind::Rate, "4096 kbit/s");
        let o = judge_rate(&r, 4096e3 * 0.995);
        assert_eq!((o.verdict, o.vs_dummynet), (Verdict::Fail, Some(false)));
    }

    #[test]
    fn delay_verdicts() {
        let zero = seed(Kind::Delay, "0 ms");
        assert_eq!(judge_delay(&zero, 0.04).verdict, Verdict::Pass);
        assert_eq!(judge_delay(&zero, 0.15).verdict, Verdict::Fail);
        let two = seed(Kind::Delay, "2 ms");
        let o = judge_delay(&two, 2.03);
        assert_eq!(o.verdict, Verdict::Pass);
        assert!((o.accuracy_pct.unwrap() - 101.5).abs() < 1e-9);
        assert_eq!(judge_delay(&two, 2.2).verdict, Verdict::Fail);
        // Closer than dummynet's 0.37 ms at 2000 ms, but outside ±0.1 ms.
        let big = seed(Kind::Delay, "2000 ms");
        let o = judge_delay(&big, 2000.2);
        assert_eq!((o.verdict, o.vs_dummynet), (Verdict::Fail, Some(true)));
        assert_eq!(judge_delay(&big, 2000.02).verdict, Verdict::Pass);
    }

    #[test]
    fn loss_verdicts() {
        let five = seed(Kind::Loss, "5%");
        assert_eq!(judge_loss(&five, 489, 10_000).verdict, Verdict::Pass);
        assert_eq!(judge_loss(&five, 400, 10_000).verdict, Verdict::Fail);
        let zero = seed(Kind::Loss, "0%");
        assert_eq!(judge_loss(&zero, 0, 10_000).verdict, Verdict::Pass);
        assert_eq!(judge_loss(&zero, 1, 10_000).verdict, Verdict::Fail);
        assert_eq!(judge_loss(&zero, 0, 0).verdict, Verdict::Fail);
    }

    #[test]
    fn reports_render_every_row() {
        let outcomes = vec![
            judge_rate(&seed(Kind::Rate, "64 kbit/s"), 64_010.0),
            judge_delay(&seed(Kind::Delay, "10 ms"), 10.02),
            judge_loss(&seed(Kind::Loss, "1%"), 97, 10_000),
            failed(
                &seed(Kind::Loss, "5%"),
                &anyhow::anyhow!("boom, with a comma"),
            ),
        ];
        let table = render_table(&outcomes);
        assert!(table.contains("64.01 kbit/s"), "{table}");
        assert!(table.contains("10.020 ms"), "{table}");
        assert!(table.contains("0.970%"), "{table}");
        assert!(table.contains("3 of 4 rows PASS"), "{table}");
        let csv = render_csv(&outcomes);
        assert_eq!(csv.lines().count(), 5);
        assert!(csv.contains("\"error: boom, with a comma\""), "{csv}");
        let md = render_markdown(
            &outcomes,
            "headway lab calibrate --quick",
            "2024-01-01 00:00:00",
        );
        assert!(
            md.contains("| rate | 64 kbit/s | 64.01 kbit/s | 100.02 |"),
            "{md}"
        );
        assert!(md.contains("3 of 4 rows PASS"));
    }

    #[test]
    fn json_reports_are_found_among_other_lines() {
        let lines = vec!["ready".to_string(), r#"{"sent":3,"errors":0}"#.to_string()];
        let r: crate::tool::FloodReport = parse_json_line(&lines).unwrap();
        assert_eq!(r.sent, 3);
        assert!(parse_json_line::<crate::tool::FloodReport>(&["ready".to_string()]).is_err());
    }

    #[test]
    fn utc_formatting() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14 22:13:20");
    }
}
