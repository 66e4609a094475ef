//! `headway bench …`: scenario benchmarks run in lab topologies, each printing Headway's numbers
//! beside a baseline measured in the same run (and, where a seed published one, beside the
//! seed's number). Results go to stdout as a Markdown table and to `--out` as Markdown + CSV.
//!
//! Benchmarks are not tests: they assert nothing, they measure. Every number is a median over
//! `--repeats` runs, and every comparison is a ratio to a baseline measured side by side.
//!
//! | command | what it measures |
//! |---|---|
//! | `bench emulator` | TCP throughput through the emulator vs a direct veth link; release-timing error at 100 Mbit/s / 50 ms |
//! | `bench wanopt file-download` | seed 000's file-download matrix: plain-TCP baseline, Headway first and second pass, beside the seed's numbers |
//! | `bench wanopt correctness` | verified transfers both ways through the optimizer pair, with restarts and a wiped store |
//! | `bench adc-reliability` | the ADC under 10 SIGHUP reloads in a 30 s wrk run, a server killed under GET and POST load, slowloris clients beside normal ones |
//! | `bench adc` | seed 002's F5 matrix on loopback: L4 conn/s, L7 req/s at 1, 10, unlimited requests per connection × 5 sizes, HTTP/2 — Headway, HAProxy, NGINX and the bare origin, with CPU-seconds per 100,000 requests |
//! | `bench wanopt changed-file` | a 12 MB DOC-like file, then copies with 1 % (0.1 %, 5 %) of its bytes changed: WAN bytes of each beside the first pass's |
//! | `bench adc-tcp-profiles` | seed 003's TCP profiles: a page's download time and the server's retransmissions for emulated broadband, mobile and dial-up clients, Linux defaults vs NetScaler's default vs the AOL profile, beside the seed's results |
//! | `bench adc-flood` | a SYN flood at rising rates against a virtual server while ordinary clients keep requesting: their success rate and latency, with the kernel's SYN-cookie counters, cookies on and off |
//! | `bench wanopt throughput` | LAN-side throughput through the optimizer pair per service class over an unconstrained link, iperf3 and non-repeating data, beside the direct path |
//!
//! The WAN-optimizer benchmarks each run in their own lab, named by `--prefix` (see
//! [`bench_lab`]), so two of them can run at once.

pub mod adc;
pub mod adc_reliability;
pub mod emulator;
pub mod flood;
pub mod tcp_profiles;
pub mod wanopt;
pub mod wanopt_changed;
pub mod wanopt_correctness;
pub mod wanopt_throughput;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::{LabOptions, TopologyKind, WanMode};

/// The benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Seed 002's F5 ADC matrix: Headway, HAProxy and NGINX in front of one origin, on loopback.
    Adc(adc::AdcArgs),
    /// The ADC under reloads, a server killed mid-load and slow-header clients (wrk).
    AdcReliability(adc_reliability::ReliabilityArgs),
    /// Seed 003's TCP profiles on emulated broadband, mobile and dial-up clients: page time and
    /// retransmissions.
    AdcTcpProfiles(tcp_profiles::TcpProfilesArgs),
    /// A SYN flood against a virtual server while ordinary clients keep requesting.
    AdcFlood(flood::FloodArgs),
    /// Emulator throughput (vs a direct veth link) and release-timing accuracy.
    Emulator(emulator::EmulatorArgs),
    /// WAN-optimizer scenarios from the seeds.
    #[command(subcommand)]
    Wanopt(wanopt::WanoptCommand),
}

/// Runs a benchmark. Ctrl-C or SIGTERM stops it between steps, and its lab is torn down
/// (the WAN benchmarks and the emulator's had no handler: a signal left their namespaces and
/// processes behind).
pub fn run(cmd: BenchCommand) -> Result<()> {
    crate::interrupt::install();
    match cmd {
        BenchCommand::Adc(a) => adc::run(a),
        BenchCommand::AdcReliability(a) => adc_reliability::run(a),
        BenchCommand::AdcTcpProfiles(a) => tcp_profiles::run(a),
        BenchCommand::AdcFlood(a) => flood::run(a),
        BenchCommand::Emulator(a) => emulator::run(a),
        BenchCommand::Wanopt(c) => wanopt::run(c),
    }
}

/// The options of a benchmark's `branch` lab: namespaces named `prefix` + role, state (and the
/// optimizer pair's files) in `/run/headway-lab/<prefix without `hw-` and the last `-`>`, so
/// `hw-bench-` keeps `/run/headway-lab/bench` and `hw-chg-` gets `/run/headway-lab/chg`.
pub fn bench_lab(wan: WanMode, prefix: &str) -> Result<LabOptions> {
    let name = prefix.strip_prefix("hw-").unwrap_or(prefix);
    let name = name.strip_suffix('-').unwrap_or(name);
    anyhow::ensure!(
        !name.is_empty()
            && prefix.len() <= 12
            && prefix
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'),
        "--prefix {prefix:?}: use up to 12 lower-case letters, digits and dashes, e.g. hw-fd2-"
    );
    let mut opts = LabOptions::new(TopologyKind::Branch);
    opts.wan = wan;
    opts.prefix = prefix.to_owned();
    opts.state_dir = PathBuf::from(crate::lab::DEFAULT_STATE_DIR).join(name);
    Ok(opts)
}

/// Prints a benchmark's Markdown report and writes it and its CSV to `out/NAME.md` and
/// `out/NAME.csv`.
pub fn write_report(out: &Path, name: &str, md: &str, csv: &str) -> Result<()> {
    println!("{md}");
    save_report(out, name, md, csv)?;
    println!("report: {}/{name}.md, {name}.csv", out.display());
    Ok(())
}

/// Writes a report's files as they stand, without printing: a long run saves its rows as
/// they are measured, so one that fails or is interrupted keeps what it finished.
pub fn save_report(out: &Path, name: &str, md: &str, csv: &str) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(out.join(format!("{name}.md")), md)?;
    std::fs::write(out.join(format!("{name}.csv")), csv)?;
    Ok(())
}

/// The median of `v` (mean of the middle two for an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A benchmark's arguments `T` parsed from `argv` (without the program name).
    pub(crate) fn parse_args<T: clap::Args>(argv: &[&str]) -> Result<T, clap::Error> {
        #[derive(Debug, clap::Parser)]
        struct Cli<T: clap::Args> {
            #[command(flatten)]
            args: T,
        }
        let argv = std::iter::once("bench").chain(argv.iter().copied());
        <Cli<T> as clap::Parser>::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn bench_labs_get_their_own_state_directory() {
        let dir = |p: &str| bench_lab(WanMode::Bridge, p).map(|o| o.state_dir);
        let run = PathBuf::from(crate::lab::DEFAULT_STATE_DIR);
        assert_eq!(dir("hw-bench-").unwrap(), run.join("bench"));
        assert_eq!(dir("hw-fd2-").unwrap(), run.join("fd2"));
        assert_eq!(dir("lab9-").unwrap(), run.join("lab9"));
        let o = bench_lab(WanMode::Bridge, "hw-tput-").unwrap();
        assert_eq!(
            (o.prefix.as_str(), o.topology),
            ("hw-tput-", TopologyKind::Branch)
        );
        for bad in ["", "hw-", "-", "hw-x/y-", "HW-A-", "hw-much-too-long-"] {
            assert!(dir(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
