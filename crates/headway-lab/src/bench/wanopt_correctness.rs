//! `headway bench wanopt correctness`: many verified transfers both ways through the WAN
//! optimizer pair over a lossy emulated WAN, with both appliances restarted during the
//! transfers and one store wiped — the "never a wrong byte" check, as a lab run.
//!
//! Phases, in the `branch` topology with `headway lab tool xfer-server` on the server:
//!
//! 1. **restarts**: `--transfers` transfers ([`crate::xfer::plan`]: 0 B, 1 B, up to
//!    `--max-size`, up and down, `--concurrency` at once); when a quarter of them are done the
//!    branch appliance is restarted, at half the DC appliance. Transfers cut by a restart may
//!    end in `reset` (and flows started while an appliance is down go direct: fail-open); none
//!    may end `wrong`.
//! 2. **wiped store**: both appliances stopped, the DC's disk store deleted (the branch's
//!    stays), both started and their tunnel up again; the same plan again (so the branch side
//!    believes the DC holds everything): every transfer must be `ok`. Restarting the branch
//!    too keeps this phase about diverged stores: a branch that outlived the DC's restart
//!    would first send flows into its tunnel to the dead process until the idle timeout,
//!    which is the restarts phase's subject.
//! 3. **steady**: a fresh plan with no disturbance: every transfer must be `ok`.
//!
//! Exit status 1 if any transfer is `wrong` or `stalled`, or phases 2–3 have any failure.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::units::parse_duration;
use headway_link::Params;

use crate::lab::Background;
use crate::optimizer::{sum_groups, Pair, PairOptions, Side};
use crate::xfer::XferReport;
use crate::{Dir, Lab, LabOptions, TopologyKind};

/// The xfer server's port on the server host.
const XFER_PORT: u16 = 9000;

/// `headway bench wanopt correctness` arguments.
#[derive(Debug, clap::Args)]
pub struct CorrectnessArgs {
    /// Transfers per phase.
    #[arg(long, default_value_t = 200)]
    pub transfers: usize,
    /// Transfers in flight at once.
    #[arg(long, default_value_t = 50)]
    pub concurrency: usize,
    /// Largest transfer, in bytes.
    #[arg(long, default_value_t = 100_000_000)]
    pub max_size: u64,
    /// The WAN link, both directions (link spec text).
    #[arg(long, default_value = "rate=200mbit delay=10ms loss=1%")]
    pub link: String,
    /// Service class of the intercepted flows.
    #[arg(long, default_value = "dedup-disk")]
    pub class: String,
    /// Seed of the plans and of the link's loss sequence.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A transfer without progress for this long is stalled.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub io_timeout: Duration,
    /// Where to write correctness.md.
    #[arg(long, default_value = "lab-out/bench")]
    pub out: PathBuf,
}

/// Runs the check.
pub fn run(args: CorrectnessArgs) -> Result<()> {
    let spec: headway_config::LinkSpec = args.link.parse().context("--link")?;
    let params = Params::try_from(&spec).context("--link")?;
    let class: &'static str = match args.class.as_str() {
        "dedup-disk" => "dedup-disk",
        "dedup-memory" => "dedup-memory",
        "compress" => "compress",
        "pass-through" => "pass-through",
        other => {
            bail!("unknown class {other:?} (dedup-disk, dedup-memory, compress, pass-through)")
        }
    };
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();
    let mut opts = LabOptions::new(TopologyKind::Branch);
    opts.wan = crate::WanMode::Emulator {
        binary: PathBuf::from(&exe),
        seed: Some(args.seed),
    };
    opts.prefix = "hw-check-".into();
    opts.state_dir = PathBuf::from(crate::lab::DEFAULT_STATE_DIR).join("check");
    let lab = Lab::up(opts)?;
    lab.set_link("wan", Dir::Both, &params)?;
    let server = format!("{}:{XFER_PORT}", lab.addresses().server);
    let mut xserver = lab.spawn(
        "server",
        &[&exe, "lab", "tool", "xfer-server", "--listen", &server],
    )?;
    xserver.wait_line(Duration::from_secs(10), |l| l == "ready")?;
    let rtt = params.delay * 2;
    let mut pair = Pair::new(
        &lab,
        &exe,
        &PairOptions {
            link_rate_bps: params.rate.map_or(1_000_000_000, |r| r.bps()),
            rtt: rtt.max(Duration::from_millis(10)),
            class,
            ..PairOptions::default()
        },
    )?;
    pair.start_both()?;
    println!(
        "correctness: {} transfers per phase, {} at once, up to {} bytes, link `{}`, class {class}",
        args.transfers, args.concurrency, args.max_size, args.link
    );

    let run_phase = |pair: &mut Pair<'_>,
                     name: &str,
                     seed: u64,
                     restarts: bool|
     -> Result<XferReport> {
        let mut client = lab.spawn(
            "client",
            &[
                &exe,
                "lab",
                "tool",
                "xfer",
                "--to",
                &server,
                "--transfers",
                &args.transfers.to_string(),
                "--concurrency",
                &args.concurrency.to_string(),
                "--max-size",
                &args.max_size.to_string(),
                "--seed",
                &seed.to_string(),
                "--io-timeout",
                &format!("{}s", args.io_timeout.as_secs()),
            ],
        )?;
        if restarts {
            for (fraction, side) in [(4, Side::Branch), (2, Side::Dc)] {
                let at = args.transfers / fraction;
                wait_progress(&mut client, at)?;
                println!(
                    "  {name}: {at} transfers done, restarting the {} appliance",
                    side.role()
                );
                pair.stop(side)?;
                std::thread::sleep(Duration::from_millis(500));
                pair.start(side)?;
            }
        }
        let limit = args.io_timeout * 4 + Duration::from_secs(600);
        let line = client.wait_line(limit, |l| l.starts_with("result "))?;
        let report: XferReport = serde_json::from_str(line.trim_start_matches("result "))
            .context("unreadable xfer result")?;
        println!(
            "  {name}: {} transfers: {} ok, {} reset, {} stalled, {} wrong; {:.1} MB verified in {:.1} s",
            report.transfers,
            report.ok,
            report.reset,
            report.stalled,
            report.wrong,
            report.bytes_ok as f64 / 1e6,
            report.seconds
        );
        for f in &report.failures {
            println!("    {f}");
        }
        Ok(report)
    };

    let restarts = run_phase(&mut pair, "restarts", args.seed, true)?;
    pair.stop_both()?;
    pair.wipe_store(Side::Dc)?;
    pair.start_both()?;
    println!("  DC store wiped, both appliances restarted");
    let wiped = run_phase(&mut pair, "wiped store", args.seed, false)?;
    let steady = run_phase(&mut pair, "steady", args.seed + 1000, false)?;
    let stats = [pair.stats(Side::Branch)?, pair.stats(Side::Dc)?];
    drop(pair);
    drop(xserver);
    lab.down()?;

    let mut md = String::new();
    writeln!(md, "## WAN optimizer correctness through the lab\n")?;
    writeln!(
        md,
        "Command: `headway bench wanopt correctness --transfers {} --concurrency {} --max-size {} --link \"{}\" --class {class} --seed {}`\n",
        args.transfers, args.concurrency, args.max_size, args.link, args.seed
    )?;
    writeln!(
        md,
        "| phase | transfers | ok | reset | stalled | wrong | MB verified | seconds |"
    )?;
    writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
    for (name, r) in [
        ("restarts (branch at 1/4, DC at 1/2)", &restarts),
        ("DC store wiped", &wiped),
        ("steady", &steady),
    ] {
        writeln!(
            md,
            "| {name} | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
            r.transfers,
            r.ok,
            r.reset,
            r.stalled,
            r.wrong,
            r.bytes_ok as f64 / 1e6,
            r.seconds
        )?;
    }
    for (side, s) in Side::BOTH.iter().zip(&stats) {
        writeln!(
            md,
            "\n{} appliance (since its last start): LAN in+out {:.1} MB, WAN in+out {:.1} MB, flows optimized {}",
            side.role(),
            sum_groups(s, &["lan_in", "lan_out"]) as f64 / 1e6,
            sum_groups(s, &["wan_in", "wan_out"]) as f64 / 1e6,
            sum_groups(s, &["flows_optimized"]),
        )?;
    }
    println!("\n{md}");
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    std::fs::write(args.out.join("correctness.md"), &md)?;

    let wrong = restarts.wrong + wiped.wrong + steady.wrong;
    let stalled = restarts.stalled + wiped.stalled + steady.stalled;
    if wrong > 0 || stalled > 0 {
        bail!("{wrong} transfer(s) delivered wrong bytes and {stalled} stalled");
    }
    if wiped.ok != wiped.transfers || steady.ok != steady.transfers {
        bail!("transfers failed without any disturbance (wiped store: {} of {} ok; steady: {} of {} ok)", wiped.ok, wiped.transfers, steady.ok, steady.transfers);
    }
    println!("correctness: every byte verified; no wrong or stalled transfer");
    Ok(())
}

/// Waits until the xfer client reports at least `done` finished transfers.
fn wait_progress(client: &mut Background, done: usize) -> Result<()> {
    client.wait_line(Duration::from_secs(900), |l| {
        l.strip_prefix("progress ")
            .and_then(|r| r.split_whitespace().next()?.parse::<usize>().ok())
            .is_some_and(|d| d >= done)
    })?;
    Ok(())
}
