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
//! | `bench adc` | seed 002's F5 matrix on loopback: L4 conn/s, L7 req/s at 1, 10, unlimited requests per connection × 5 sizes, HTTP/2 — Headway, HAProxy, NGINX and the bare origin, with CPU-seconds per 100,000 requests |

pub mod adc;
pub mod emulator;
pub mod wanopt;
pub mod wanopt_correctness;

use anyhow::Result;

/// The benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Seed 002's F5 ADC matrix: Headway, HAProxy and NGINX in front of one origin, on loopback.
    Adc(adc::AdcArgs),
    /// Emulator throughput (vs a direct veth link) and release-timing accuracy.
    Emulator(emulator::EmulatorArgs),
    /// WAN-optimizer scenarios from the seeds.
    #[command(subcommand)]
    Wanopt(wanopt::WanoptCommand),
}

/// Runs a benchmark.
pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Adc(a) => adc::run(a),
        BenchCommand::Emulator(a) => emulator::run(a),
        BenchCommand::Wanopt(c) => wanopt::run(c),
    }
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
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
