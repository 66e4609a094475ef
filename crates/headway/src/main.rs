//! `headway` — the one binary.
//!
//! `main` parses the command line, sets up logging and dispatches to a subcommand; the work is
//! done by the library crates:
//!
//! | subcommand | what it does | where it lives |
//! |---|---|---|
//! | `run -c FILE` | starts the roles the TOML file configures (emulated links, WAN optimizer, admin API) | [`roles`], [`wanopt`] |
//! | `check -c FILE` | validates a config file (exit 64 with file:line:col on error) | `headway-config` |
//! | `ctl …` | client of a running instance's admin API | `headway-admin` |
//! | `wanopt identity\|fingerprint\|dedup-key` | the certificate, key, fingerprint and dedup key a `[wanopt]` section needs | [`wanopt`] |
//! | `emulate …` | one emulated WAN link between two interfaces, with its admin API | [`roles`], `headway-emulator` |
//! | `origin …` | the lab's HTTP origin server | `headway-origin` |
//! | `lab …` | network-namespace topologies, calibration | `headway-lab` |
//! | `bench …` | scenario benchmarks beside peers and the seeds' numbers | `headway-lab` |
//! | `demo` | the main job end to end on an embedded default | `headway-lab` |
//!
//! Exit codes: 0 success, 64 bad usage, bad config or bad environment detected at start-up
//! (`EX_USAGE`, one clear line on stderr), 1 any other failure.
#![forbid(unsafe_code)]

mod adc;
mod exit;
mod roles;
mod wanopt;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's malloc: a proxy allocates and frees small buffers, futures and
/// header maps for every connection and request from two threads, where glibc's arenas spent
/// about 5 % of the CPU (`_int_malloc`, `_int_free`, `malloc_consolidate` in a profile of
/// 1-request connections) that mimalloc's per-thread free lists mostly avoid.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use crate::exit::Failure;

/// Headway: application delivery, WAN optimisation, SD-WAN and a WAN lab in one binary.
#[derive(Debug, Parser)]
#[command(name = "headway", version, about, max_term_width = 100)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info`, `headway_emulator=debug`.
    #[arg(long, global = true, env = "HEADWAY_LOG", default_value = "warn")]
    log: String,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the roles configured in a TOML file (emulated links, WAN optimizer, admin API).
    Run(ConfigArgs),
    /// Validate a config file; exit 64 with file, line and what to change if it is wrong.
    Check(ConfigArgs),
    /// Talk to a running instance's admin API.
    Ctl(headway_admin::CtlArgs),
    /// Make the files a [wanopt] section needs: identity (certificate and key), fingerprint,
    /// dedup key.
    #[command(subcommand)]
    Wanopt(wanopt::WanoptCommand),
    /// Emulate a WAN link between two interfaces (bridge mode, AF_PACKET; needs root).
    Emulate(roles::EmulateArgs),
    /// Serve the lab's deterministic HTTP corpus.
    Origin(headway_origin::OriginArgs),
    /// Build and drive network-namespace lab topologies (needs root).
    #[command(subcommand)]
    Lab(headway_lab::LabCommand),
    /// Run scenario benchmarks (needs root).
    #[command(subcommand)]
    Bench(headway_lab::BenchCommand),
    /// Show the main job end to end on an embedded default (needs root).
    Demo(headway_lab::DemoArgs),
}

/// Arguments of commands that read a config file.
#[derive(Debug, clap::Args)]
struct ConfigArgs {
    /// The TOML config file.
    #[arg(short, long, value_name = "FILE")]
    config: PathBuf,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayVersion
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(exit::USAGE),
            };
        }
    };
    init_tracing(&cli.log, cli.log_format);
    match dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.report(),
    }
}

fn dispatch(command: Command) -> Result<(), Failure> {
    let needs_root = match &command {
        Command::Lab(c) => (!matches!(
            c,
            headway_lab::LabCommand::Presets | headway_lab::LabCommand::Tool(_)
        ))
        .then_some("lab"),
        Command::Bench(_) => Some("bench"),
        Command::Demo(_) => Some("demo"),
        _ => None,
    };
    if let Some(name) = needs_root {
        if !headway_lab::netns::is_root() {
            return Err(Failure::Usage(exit::NeedsRoot(name).into()));
        }
    }
    match command {
        Command::Run(a) => roles::run(&a.config),
        Command::Check(a) => roles::check(&a.config),
        Command::Ctl(a) => headway_admin::run(a).map_err(Failure::from_anyhow),
        Command::Wanopt(c) => wanopt::command(c),
        Command::Emulate(a) => roles::emulate(a),
        Command::Origin(a) => headway_origin::run(a).map_err(Failure::from_anyhow),
        Command::Lab(c) => headway_lab::run(c).map_err(Failure::from_anyhow),
        Command::Bench(c) => headway_lab::bench::run(c).map_err(Failure::from_anyhow),
        Command::Demo(a) => headway_lab::demo::run(a).map_err(Failure::from_anyhow),
    }
}

fn init_tracing(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
