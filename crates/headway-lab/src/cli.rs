//! `headway lab …`: the command line of the lab.
//!
//! This module owns [`LabCommand`] (a clap subcommand enum the binary embeds) and [`run`], which
//! dispatches it. The work is done by [`crate::lab`], [`crate::calibrate`] and [`crate::tool`];
//! this module parses, prints summaries and passes exit statuses through.
//!
//! State: `up` writes `STATE_DIR/state.json` (default `/run/headway-lab`, or `$HEADWAY_LAB_DIR`,
//! or `--state-dir`); `status`, `exec`, `set` and `down` read it. `down` also removes every
//! namespace with the lab's prefix even without a state file.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use headway_config::LinkSpec;
use headway_link::Params;

use crate::calibrate::{self, CalibrateArgs};
use crate::interrupt;
use crate::lab::{self, Lab, LabOptions, LabState, WanMode, DEFAULT_PREFIX, DEFAULT_STATE_DIR};
use crate::netns;
use crate::presets;
use crate::spec::{Dir, LinkSetting};
use crate::tool::{self, ToolCommand};
use crate::topology::TopologyKind;

/// `headway lab …` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LabCommand {
    /// Build a topology of namespaces with emulated WAN links (removes leftovers first).
    Up(UpArgs),
    /// Stop the lab's processes and remove its namespaces and state (succeeds if nothing is up).
    Down(CommonArgs),
    /// Show the topology, its namespaces and each link's live parameters.
    Status(CommonArgs),
    /// Run a command in a lab host: `headway lab exec client -- ping 198.18.0.2`.
    Exec(ExecArgs),
    /// Change a link's parameters live: `headway lab set --link wan delay=100ms loss=1%`.
    Set(SetArgs),
    /// List the named link presets.
    Presets,
    /// Measure the emulator's accuracy against the seed's dummynet calibration table.
    Calibrate(CalibrateArgs),
    /// Measurement tools run inside lab namespaces.
    #[command(subcommand, hide = true)]
    Tool(ToolCommand),
}

/// Where the lab's state lives and which namespaces are its own.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Directory for the state file and logs.
    #[arg(long, env = "HEADWAY_LAB_DIR", default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Namespace name prefix (every namespace starting with it belongs to the lab).
    #[arg(long, env = "HEADWAY_LAB_PREFIX", default_value = DEFAULT_PREFIX, hide = true)]
    pub prefix: String,
}

/// `lab up` arguments.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// The topology.
    #[arg(long, value_enum, default_value_t = TopologyKind::Pair)]
    pub topology: TopologyKind,
    /// A named link setting for every WAN link (see `headway lab presets`).
    #[arg(long, conflicts_with = "spec")]
    pub preset: Option<String>,
    /// A link spec for both directions of every WAN link, e.g. "rate=6mbit delay=45ms loss=0.1%"
    /// (keys not named are the emulator's defaults).
    #[arg(long)]
    pub spec: Option<String>,
    /// The emulators' RNG seed (link i gets seed + i).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Put a plain Linux bridge in the WAN namespaces instead of the emulator.
    #[arg(long, hide = true)]
    pub bridge: bool,
    /// State directory and namespace prefix.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `lab exec` arguments.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The host: client, server, wan, branch, dc, wan1, wan2.
    pub host: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub cmd: Vec<String>,
    /// State directory and namespace prefix.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `lab set` arguments.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The link (`wan`; `wan1` or `wan2` in dual-wan). Default: the only link.
    #[arg(long)]
    pub link: Option<String>,
    /// Which direction(s) to change: both, a_to_b or b_to_a.
    #[arg(long, default_value_t = Dir::Both)]
    pub dir: Dir,
    /// The spec: key=value words, e.g. `delay=100ms loss=1%`. Keys not named stay as they are.
    #[arg(required = true)]
    pub spec: Vec<String>,
    /// State directory and namespace prefix.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs a `headway lab …` command.
pub fn run(cmd: LabCommand) -> Result<()> {
    match cmd {
        LabCommand::Up(a) => up(a),
        LabCommand::Down(c) => down(&c),
        LabCommand::Status(c) => status(&c),
        LabCommand::Exec(a) => exec(a),
        LabCommand::Set(a) => set(a),
        LabCommand::Presets => {
            print!("{}", presets::listing());
            Ok(())
        }
        LabCommand::Calibrate(a) => calibrate::run(a),
        LabCommand::Tool(t) => tool::run(t),
    }
}

/// The link setting `--preset` / `--spec` ask for (transparent when neither is given). A
/// `--spec` is read over [`Params::default`], as `headway emulate --both` reads it.
pub fn link_setting(preset: Option<&str>, spec: Option<&str>) -> Result<LinkSetting> {
    if let Some(name) = preset {
        let p = presets::find(name)
            .ok_or_else(|| anyhow!("no preset `{name}`; presets: {}", presets::names()))?;
        return Ok(p.setting());
    }
    if let Some(text) = spec {
        let params = text
            .parse::<LinkSpec>()
            .and_then(|spec| Params::try_from(&spec))
            .with_context(|| format!("reading --spec `{text}`"))?;
        return Ok(LinkSetting::symmetric(params));
    }
    Ok(LinkSetting::default())
}

fn up(a: UpArgs) -> Result<()> {
    interrupt::install();
    let link = link_setting(a.preset.as_deref(), a.spec.as_deref())?;
    let mut opts = LabOptions::new(a.topology);
    opts.link = link;
    opts.prefix = a.common.prefix.clone();
    opts.state_dir = a.common.state_dir.clone();
    opts.wan = if a.bridge {
        WanMode::Bridge
    } else {
        WanMode::Emulator {
            binary: std::env::current_exe().context("finding the headway binary")?,
            seed: a.seed,
        }
    };
    let lab = Lab::up(opts)?;
    let state = lab.detach();
    print!("{}", summary(&state));
    println!(
        "state: {}",
        a.common.state_dir.join(lab::STATE_FILE).display()
    );
    Ok(())
}

/// The summary `lab up` prints: topology, namespaces, addresses, links with their specs.
pub fn summary(state: &LabState) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "topology: {}", state.topology.as_str());
    let _ = writeln!(s, "namespaces:");
    for (role, ns) in &state.namespaces {
        let addrs: Vec<String> = state
            .plan
            .veths
            .iter()
            .flat_map(|v| [&v.a, &v.b])
            .filter(|e| &e.role == role)
            .map(|e| match &e.cidr {
                Some(c) => format!("{} {c}", e.ifname),
                None => e.ifname.clone(),
            })
            .collect();
        let _ = writeln!(s, "  {role:<7} {ns:<16} {}", addrs.join(", "));
    }
    let a = &state.addresses;
    let _ = writeln!(s, "addresses:");
    let _ = writeln!(
        s,
        "  client {}  server {} (through the WAN)",
        a.client, a.server
    );
    if let (Some(c), Some(d)) = (a.client_direct, a.server_direct) {
        let _ = writeln!(s, "  client {c}  server {d} (direct link, no emulator)");
    }
    let _ = writeln!(s, "links:");
    for l in &state.links {
        let setting = if l.a_to_b == l.b_to_a {
            l.a_to_b.clone()
        } else {
            format!("a→b: {}; b→a: {}", l.a_to_b, l.b_to_a)
        };
        match l.pid {
            Some(pid) => {
                let _ = writeln!(
                    s,
                    "  {} in {} ({} ↔ {}), admin 127.0.0.1:{}, pid {pid}: {setting}",
                    l.name, l.namespace, l.a_if, l.b_if, l.admin_port
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "  {} in {} ({} ↔ {}): Linux bridge, no emulation",
                    l.name, l.namespace, l.a_if, l.b_if
                );
            }
        }
    }
    s
}

fn down(c: &CommonArgs) -> Result<()> {
    let cleaned = lab::cleanup(&c.prefix, &c.state_dir)?;
    if cleaned.namespaces.is_empty() {
        println!("no lab namespaces ({}*) were up", c.prefix);
    } else {
        println!(
            "removed {} namespaces ({}) and stopped {} processes",
            cleaned.namespaces.len(),
            cleaned.namespaces.join(", "),
            cleaned.processes
        );
    }
    Ok(())
}

fn status(c: &CommonArgs) -> Result<()> {
    let present: Vec<String> = netns::namespaces()?
        .into_iter()
        .filter(|n| n.starts_with(&c.prefix))
        .collect();
    let Some(state) = LabState::load(&c.state_dir)? else {
        if present.is_empty() {
            println!("no lab is up");
        } else {
            println!(
                "no lab state in {}, but these namespaces are left over: {} (`headway lab down` removes them)",
                c.state_dir.display(),
                present.join(", ")
            );
        }
        return Ok(());
    };
    println!("topology: {}", state.topology.as_str());
    println!("namespaces:");
    for (role, ns) in &state.namespaces {
        let mark = if present.contains(ns) {
            "present"
        } else {
            "MISSING"
        };
        println!("  {role:<7} {ns:<16} {mark}");
    }
    println!("links:");
    for l in &state.links {
        let running = l.pid.is_some_and(|p| {
            netns::is_alive(p) && netns::namespace_of(p).as_deref() == Some(l.namespace.as_str())
        });
        if !running {
            let what = if l.pid.is_some() {
                "emulator not running"
            } else {
                "Linux bridge"
            };
            println!("  {}: {what}", l.name);
            continue;
        }
        let live = state
            .binary
            .as_ref()
            .map(|b| lab::ctl(b, l, &["links"]))
            .transpose()?;
        match live {
            Some(out) if out.status.success() => {
                println!(
                    "  {} (pid {}, admin 127.0.0.1:{}):",
                    l.name,
                    l.pid.unwrap_or(0),
                    l.admin_port
                );
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    println!("    {line}");
                }
            }
            Some(out) => println!(
                "  {}: emulator running, admin API not answering: {}",
                l.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            None => println!("  {}: emulator running", l.name),
        }
    }
    Ok(())
}

fn exec(a: ExecArgs) -> Result<()> {
    let ns = format!("{}{}", a.common.prefix, a.host);
    if !netns::namespaces()?.contains(&ns) {
        bail!(
            "no lab host `{}` (namespace {ns} does not exist): run `headway lab up` first",
            a.host
        );
    }
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", &ns])
        .args(&a.cmd)
        .status()
        .with_context(|| format!("running `ip netns exec {ns} …`"))?;
    if status.success() {
        return Ok(());
    }
    // Pass the command's status through: its code, or 128 + the signal that killed it.
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(1));
    std::process::exit(code);
}

fn set(a: SetArgs) -> Result<()> {
    let state = LabState::load(&a.common.state_dir)?.ok_or_else(|| {
        anyhow!(
            "no lab is up (no state in {})",
            a.common.state_dir.display()
        )
    })?;
    let text = a.spec.join(" ");
    // Check the spec's syntax before bothering the emulator, which judges the values against
    // the link's current parameters. The spec is partial: keys not named stay as they are.
    text.parse::<LinkSpec>()
        .with_context(|| format!("reading the spec `{text}`"))?;
    let name = match a.link {
        Some(n) => n,
        None if state.links.len() == 1 => state.links[0].name.clone(),
        None => {
            let names: Vec<_> = state.links.iter().map(|l| l.name.as_str()).collect();
            bail!(
                "this lab has several links; choose one with --link ({})",
                names.join(", ")
            );
        }
    };
    lab::set_link(&state, &name, a.dir, &text)?;
    println!("link {name} ({}): {text}", a.dir.as_str());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        lab: LabCommand,
    }

    fn parse(args: &[&str]) -> Result<LabCommand, clap::Error> {
        let mut v = vec!["lab"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v).map(|c| c.lab)
    }

    #[test]
    fn up_takes_a_topology_and_a_preset_or_a_spec() {
        let LabCommand::Up(a) =
            parse(&["up", "--topology", "dual-wan", "--preset", "mpls"]).unwrap()
        else {
            panic!("not up")
        };
        assert_eq!(a.topology, TopologyKind::DualWan);
        assert_eq!(a.preset.as_deref(), Some("mpls"));
        assert!(parse(&["up", "--preset", "lan", "--spec", "delay=1ms"]).is_err());
        assert!(parse(&["up", "--topology", "ring"]).is_err());
    }

    #[test]
    fn exec_takes_the_command_after_a_double_dash() {
        let LabCommand::Exec(a) = parse(&["exec", "client", "--", "ping", "-c", "1", "x"]).unwrap()
        else {
            panic!("not exec")
        };
        assert_eq!(a.host, "client");
        assert_eq!(a.cmd, ["ping", "-c", "1", "x"]);
        assert!(parse(&["exec", "client"]).is_err());
    }

    #[test]
    fn set_joins_spec_words_and_takes_a_direction() {
        let LabCommand::Set(a) =
            parse(&["set", "--dir", "b_to_a", "delay=100ms", "loss=1%"]).unwrap()
        else {
            panic!("not set")
        };
        assert_eq!(a.dir, Dir::BToA);
        assert_eq!(a.spec.join(" "), "delay=100ms loss=1%");
        assert!(a.link.is_none());
    }

    #[test]
    fn hidden_tools_parse() {
        let t = parse(&[
            "tool",
            "udp-flood",
            "--to",
            "198.18.0.2:5301",
            "--rate",
            "1.2mbit",
        ]);
        assert!(matches!(t, Ok(LabCommand::Tool(ToolCommand::UdpFlood(_)))));
    }

    #[test]
    fn link_settings_from_presets_and_specs() {
        let s = link_setting(Some("branch_us_asia"), None).unwrap();
        assert_eq!(s.describe(), "rate=1.5mbit delay=150ms loss=1% queue=50");
        let e = link_setting(Some("nope"), None).unwrap_err().to_string();
        assert!(e.contains("branch_us_asia"), "{e}");
        let s = link_setting(None, Some("delay=5ms")).unwrap();
        assert_eq!(s.b_to_a.delay, std::time::Duration::from_millis(5));
        assert_eq!(s.describe(), "delay=5ms");
        assert_eq!(link_setting(None, None).unwrap(), LinkSetting::default());
        // Bad syntax and bad values are both refused before anything starts.
        assert!(link_setting(None, Some("dealy=5ms")).is_err());
        assert!(link_setting(None, Some("mtu=10")).is_err());
    }

    #[test]
    fn summary_lists_namespaces_addresses_and_links() {
        let plan = crate::topology::Plan::new(TopologyKind::Pair);
        let state = LabState {
            topology: TopologyKind::Pair,
            prefix: "hw-".into(),
            namespaces: plan
                .roles
                .iter()
                .map(|r| (r.clone(), format!("hw-{r}")))
                .collect(),
            addresses: plan.addresses.clone(),
            links: vec![crate::lab::LinkState {
                name: "wan".into(),
                namespace: "hw-wan".into(),
                a_if: "wan-c".into(),
                b_if: "wan-s".into(),
                admin_port: 9191,
                a_to_b: "rate=1mbit".into(),
                b_to_a: "rate=1mbit".into(),
                pid: Some(42),
                log: None,
            }],
            plan,
            binary: None,
        };
        let s = summary(&state);
        assert!(s.contains("hw-client"), "{s}");
        assert!(s.contains("c-wan 198.18.0.1/24"), "{s}");
        assert!(s.contains("198.18.100.2 (direct link, no emulator)"), "{s}");
        assert!(
            s.contains("admin 127.0.0.1:9191, pid 42: rate=1mbit"),
            "{s}"
        );
    }
}
