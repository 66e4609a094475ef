//! Runs the origin stand-alone (`cargo run -p headway-origin --example origin -- --help`), for
//! benchmarking it before the `headway` binary exists.

use clap::Parser;

/// A stand-alone origin.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: headway_origin::OriginArgs,
}

fn main() -> anyhow::Result<()> {
    headway_origin::run(Cli::parse().args)
}
