//! `headway ctl`: the command-line client of a running instance's admin API.
//!
//! Owns the clap arguments and the human-readable output (aligned tables, one line per link
//! direction; the WAN optimizer's table is `crate::wanopt::write_stats`). The binary embeds [`CtlArgs`] as its `ctl` subcommand and calls [`run`].

use std::io::Write;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use headway_config::{Dir, Limit, LinkSpec, LossSpec};
use headway_core::units::format_duration;

use crate::client::Client;
use crate::control::LinkViewJson;

/// `headway ctl`: talk to a running instance's admin API.
#[derive(Debug, Clone, Args)]
pub struct CtlArgs {
    /// Base URL of the admin API (`http://` is assumed when only an address is given).
    #[arg(
        long,
        env = "HEADWAY_ADMIN",
        default_value = "http://127.0.0.1:9090",
        value_name = "URL"
    )]
    pub admin: String,
    /// Bearer token, if the admin API requires one.
    #[arg(
        long,
        env = "HEADWAY_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// The `headway ctl` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum CtlCommand {
    /// Check that the instance answers, and list its links.
    Status,
    /// Show every link direction's parameters and counters.
    Links {
        /// Print the API's JSON (every counter of each direction) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Show or change one link.
    #[command(subcommand)]
    Link(LinkCommand),
    /// Print the Prometheus/OpenMetrics text.
    Metrics,
    /// The WAN optimizer's counters.
    #[command(subcommand)]
    Wanopt(WanoptCommand),
    /// The ADC: virtual servers, groups and servers, with state and counters.
    Adc {
        /// Print the API's JSON instead of the tables.
        #[arg(long)]
        json: bool,
    },
    /// The ADC's TLS certificates: names, issuer, validity (expiry) and who uses each.
    Certs {
        /// Print the API's JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Enable, disable or drain an ADC server, or set its weight.
    #[command(subcommand)]
    Server(AdcCommand),
    /// The ADC's integrated cache: groups and counters, or a purge.
    Cache {
        /// `purge`; without one, the table.
        #[command(subcommand)]
        command: Option<CacheCommand>,
        /// Print the API's JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Show, replace or reload the running config.
    #[command(subcommand)]
    Config(ConfigCommand),
}

/// `headway ctl server …`.
#[derive(Debug, Clone, Subcommand)]
pub enum AdcCommand {
    /// Put a server back in service.
    Enable {
        /// The server group.
        group: String,
        /// The server's name.
        server: String,
    },
    /// Take a server out of service at once (requests in flight finish).
    Disable {
        /// The server group.
        group: String,
        /// The server's name.
        server: String,
    },
    /// No new clients; persistent sessions and requests in flight finish.
    Drain {
        /// The server group.
        group: String,
        /// The server's name.
        server: String,
    },
    /// Set a server's weight (0–1000) until the config file gives it another: shift traffic
    /// step by step (blue/green), or take a server to 0 without draining its sessions.
    Weight {
        /// The server group.
        group: String,
        /// The server's name.
        server: String,
        /// The new weight, 0–1000.
        weight: u32,
    },
    /// Add a server to a group of the running config, validated as the file would be (it
    /// lasts until the config is reloaded from the file: `config show` prints the running
    /// text to keep).
    Add {
        /// The server group.
        group: String,
        /// The new server's name, unique in the group.
        server: String,
        /// `IP:port` or `dns-name:port`.
        address: String,
        /// Its weight (default 1).
        #[arg(long)]
        weight: Option<u32>,
        /// Used only when every primary server is down.
        #[arg(long)]
        backup: bool,
    },
    /// Remove a server from a group of the running config: requests in flight to it finish,
    /// its persistent clients fail over to the others.
    Remove {
        /// The server group.
        group: String,
        /// The server's name.
        server: String,
    },
}

/// `headway ctl cache …`.
#[derive(Debug, Clone, Subcommand)]
pub enum CacheCommand {
    /// Remove stored responses at once: one URL, a prefix, a group, or everything.
    Purge {
        /// One URL: its path and query (`/news/today?page=2`), every variant.
        #[arg(long, conflicts_with_all = ["prefix", "group", "all"])]
        url: Option<String>,
        /// Every URL whose path starts with this (`/images/`).
        #[arg(long, conflicts_with_all = ["group", "all"])]
        prefix: Option<String>,
        /// Only on this host (with --url or --prefix); default: every host.
        #[arg(long)]
        host: Option<String>,
        /// A whole content group.
        #[arg(long, conflicts_with = "all")]
        group: Option<String>,
        /// Everything.
        #[arg(long)]
        all: bool,
    },
}

/// `headway ctl config …`.
#[derive(Debug, Clone, Subcommand)]
pub enum ConfigCommand {
    /// Print the running config file.
    Show,
    /// Make the instance read its config file again (as SIGHUP does).
    Reload,
    /// Validate FILE and apply it live; a bad file is refused and the running config stays.
    Replace {
        /// The new config file.
        file: std::path::PathBuf,
    },
}

/// `headway ctl wanopt …`.
#[derive(Debug, Clone, Subcommand)]
pub enum WanoptCommand {
    /// Per peer and class: LAN and WAN bytes both ways, data reduction, flows optimized,
    /// failed and passed through (with reasons); store sizes and hit rates.
    Stats {
        /// Print the API's JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The flows carried now: direction, peer, class, client, destination, age, LAN and WAN
    /// bytes both ways, data reduction, and whether each is optimized or passed through (why).
    Flows {
        /// Print the API's JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
}

/// `headway ctl link …`.
#[derive(Debug, Clone, Subcommand)]
pub enum LinkCommand {
    /// Show one link's full parameters and counters.
    Show {
        /// The link's name.
        name: String,
    },
    /// Change a link's parameters, e.g. `headway ctl link set wan delay=200ms loss=2%`.
    /// Keys not given keep their current values; nothing changes if any value is wrong.
    Set {
        /// The link's name.
        name: String,
        /// Which direction(s) to change: both, a_to_b or b_to_a.
        #[arg(long, default_value_t = Dir::Both)]
        dir: Dir,
        /// `key=value` pairs: rate, overhead, delay, jitter, jitter_dist, loss, duplicate,
        /// reorder, reorder_gap, queue, queue_bytes, mtu.
        #[arg(required = true, value_name = "SPEC")]
        spec: Vec<String>,
    },
}

/// Runs `headway ctl`, printing to standard output.
pub fn run(args: CtlArgs) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    run_to(args, &mut stdout.lock())
}

/// Runs `headway ctl`, printing to `out`.
pub fn run_to(args: CtlArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::new(args.admin, args.token);
    match args.command {
        CtlCommand::Status => {
            client.health()?;
            let links = client.links()?;
            let names: Vec<&str> = links.iter().map(|l| l.name.as_str()).collect();
            writeln!(
                out,
                "{}: ok, {} link(s){}{}",
                client.base(),
                links.len(),
                if names.is_empty() { "" } else { ": " },
                names.join(", ")
            )?;
        }
        CtlCommand::Links { json: true } => {
            let v = client.links_json()?;
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        CtlCommand::Links { json: false } => {
            let links = client.links()?;
            write_table(out, &links)?;
        }
        CtlCommand::Link(LinkCommand::Show { name }) => {
            let link = client.link(&name)?;
            write_link(out, &link)?;
        }
        CtlCommand::Link(LinkCommand::Set { name, dir, spec }) => {
            let text = spec.join(" ");
            // Parse locally first: a typo is reported without a round trip, with the same
            // message the API would give.
            text.parse::<LinkSpec>()
                .with_context(|| format!("`{text}` is not a valid link spec"))?;
            let t = Some(text.as_str());
            let link = match dir {
                Dir::Both => client.set_link(&name, t, None, None)?,
                Dir::AToB => client.set_link(&name, None, t, None)?,
                Dir::BToA => client.set_link(&name, None, None, t)?,
            };
            write_link(out, &link)?;
        }
        CtlCommand::Metrics => {
            out.write_all(client.metrics_text()?.as_bytes())?;
        }
        CtlCommand::Wanopt(WanoptCommand::Stats { json: true }) => {
            let v = client.wanopt_stats_json()?;
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        CtlCommand::Wanopt(WanoptCommand::Stats { json: false }) => {
            crate::wanopt::write_stats(out, &client.wanopt_stats()?)?;
        }
        CtlCommand::Wanopt(WanoptCommand::Flows { json: true }) => {
            let v = client.wanopt_flows_json()?;
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        CtlCommand::Wanopt(WanoptCommand::Flows { json: false }) => {
            crate::wanopt::write_flows(out, &client.wanopt_flows()?)?;
        }
        CtlCommand::Adc { json: true } => {
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&client.adc_json()?)?
            )?;
        }
        CtlCommand::Adc { json: false } => {
            crate::adc::write_adc(out, &client.adc()?)?;
        }
        CtlCommand::Certs { json: true } => {
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&client.certificates_json()?)?
            )?;
        }
        CtlCommand::Certs { json: false } => {
            let now = headway_core::clock::wall_clock()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            crate::adc::write_certificates(out, &client.certificates()?, now)?;
        }
        CtlCommand::Cache {
            command: None,
            json: true,
        } => {
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&client.cache_json()?)?
            )?;
        }
        CtlCommand::Cache {
            command: None,
            json: false,
        } => {
            crate::cache::write_cache(out, &client.cache()?)?;
        }
        CtlCommand::Cache {
            command:
                Some(CacheCommand::Purge {
                    url,
                    prefix,
                    host,
                    group,
                    all,
                }),
            ..
        } => {
            let q = crate::cache::PurgeQuery {
                url,
                prefix,
                host,
                group,
                all: all.then_some(true),
            };
            q.purge().map_err(anyhow::Error::msg)?;
            let r = client.purge_cache(&q)?;
            writeln!(out, "purged {} object(s), {} bytes", r.objects, r.bytes)?;
        }
        CtlCommand::Server(cmd) => {
            let (group, s) = match &cmd {
                AdcCommand::Enable { group, server } => {
                    (group, client.set_server_state(group, server, "enabled")?)
                }
                AdcCommand::Disable { group, server } => {
                    (group, client.set_server_state(group, server, "disabled")?)
                }
                AdcCommand::Drain { group, server } => {
                    (group, client.set_server_state(group, server, "draining")?)
                }
                AdcCommand::Weight {
                    group,
                    server,
                    weight,
                } => (group, client.set_server_weight(group, server, *weight)?),
                AdcCommand::Add {
                    group,
                    server,
                    address,
                    weight,
                    backup,
                } => {
                    let req = crate::adc::AddServerRequest {
                        name: server.clone(),
                        address: address.clone(),
                        weight: *weight,
                        backup: backup.then_some(true),
                    };
                    let r = client.add_server(group, &req)?;
                    return write_changed(out, group, server, "added", &r);
                }
                AdcCommand::Remove { group, server } => {
                    let r = client.remove_server(group, server)?;
                    return write_changed(out, group, server, "removed", &r);
                }
            };
            writeln!(
                out,
                "{group}/{}: {} ({}), weight {}, {} active",
                s.name, s.admin_state, s.health, s.weight, s.active
            )?;
        }
        CtlCommand::Config(ConfigCommand::Show) => {
            out.write_all(client.config_text()?.as_bytes())?;
        }
        CtlCommand::Config(ConfigCommand::Reload) => {
            let r = client.reload_config()?;
            writeln!(
                out,
                "config generation {} applied: {} virtual server(s), {} group(s)",
                r.generation, r.virtual_servers, r.groups
            )?;
        }
        CtlCommand::Config(ConfigCommand::Replace { file }) => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let r = client.replace_config(text)?;
            writeln!(
                out,
                "config generation {} applied: {} virtual server(s), {} group(s)",
                r.generation, r.virtual_servers, r.groups
            )?;
        }
    }
    Ok(())
}

/// `GROUP/SERVER added: config generation N` (or `removed`).
fn write_changed(
    out: &mut dyn Write,
    group: &str,
    server: &str,
    verb: &str,
    r: &crate::adc::ReloadReport,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "{group}/{server} {verb}: config generation {}",
        r.generation
    )?;
    Ok(())
}

/// `link NAME (A ↔ B)`, each direction's full spec, then the table.
fn write_link(out: &mut dyn Write, link: &LinkViewJson) -> std::io::Result<()> {
    writeln!(out, "link {} ({} <-> {})", link.name, link.a, link.b)?;
    writeln!(out, "  a_to_b: {}", link.a_to_b)?;
    writeln!(out, "  b_to_a: {}", link.b_to_a)?;
    writeln!(out)?;
    write_table(out, std::slice::from_ref(link))
}

/// One line per link direction: parameters and counters, in aligned columns.
fn write_table(out: &mut dyn Write, links: &[LinkViewJson]) -> std::io::Result<()> {
    const HEADER: [&str; 10] = [
        "LINK", "DIR", "RATE", "DELAY", "JITTER", "LOSS", "QUEUE", "PASSED", "LOST", "OVERFLOW",
    ];
    let mut rows: Vec<[String; 10]> = vec![HEADER.map(String::from)];
    for l in links {
        for (dir, spec) in [("a_to_b", &l.a_to_b), ("b_to_a", &l.b_to_a)] {
            let counter = |k: &str| counter(&l.stats, dir, k).map_or("-".into(), |n| n.to_string());
            rows.push([
                l.name.clone(),
                dir.to_string(),
                opt(spec.rate.map(|r| match r {
                    Limit::Unlimited => "unlimited".to_string(),
                    Limit::At(r) => r.to_string(),
                })),
                opt(spec.delay.map(format_duration)),
                opt(spec.jitter.map(format_duration)),
                opt(spec.loss.map(|l| match l {
                    LossSpec::GilbertElliott { p, r, .. } => format!("ge(p={p},r={r})"),
                    other => other.to_string(),
                })),
                queue(spec),
                counter("passed"),
                counter("lost"),
                counter("overflow"),
            ]);
        }
    }
    let mut widths = [0usize; 10];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in &rows {
        let mut line = String::new();
        for (i, (c, w)) in r.iter().zip(widths).enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  "));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

fn opt(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

/// `100p`, `64KiB`, `100p/64KiB` or `unlimited`.
fn queue(spec: &LinkSpec) -> String {
    let packets = spec
        .queue
        .and_then(Limit::into_option)
        .map(|p| format!("{p}p"));
    let bytes = spec
        .queue_bytes
        .and_then(Limit::into_option)
        .map(|b| b.to_string());
    match (packets, bytes) {
        (Some(p), Some(b)) => format!("{p}/{b}"),
        (Some(p), None) => p,
        (None, Some(b)) => b,
        (None, None) => "unlimited".into(),
    }
}

/// Counter `key` of direction `dir` in a link's stats: `stats[dir][key]`, or one level deeper
/// (`stats[dir][group][key]`) for emulators that group their counters.
fn counter(stats: &serde_json::Value, dir: &str, key: &str) -> Option<u64> {
    let d = stats.get(dir)?;
    d.get(key).and_then(serde_json::Value::as_u64).or_else(|| {
        d.as_object()?
            .values()
            .find_map(|v| v.get(key).and_then(serde_json::Value::as_u64))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counters_are_found_flat_or_grouped() {
        let flat = json!({"a_to_b": {"passed": 5, "lost": 1}});
        assert_eq!(counter(&flat, "a_to_b", "passed"), Some(5));
        assert_eq!(counter(&flat, "a_to_b", "overflow"), None);
        assert_eq!(counter(&flat, "b_to_a", "passed"), None);
        let grouped = json!({"b_to_a": {"link": {"overflow": 7}}});
        assert_eq!(counter(&grouped, "b_to_a", "overflow"), Some(7));
        assert_eq!(counter(&json!(null), "a_to_b", "passed"), None);
    }

    #[test]
    fn the_table_has_one_aligned_line_per_direction() {
        let p = headway_link::Params::default();
        let a: LinkSpec = "rate=1.5mbit delay=150ms jitter=5ms loss=1% queue=100 queue_bytes=64KiB"
            .parse()
            .unwrap();
        let link = LinkViewJson {
            name: "wan".into(),
            a: "wan0".into(),
            b: "wan1".into(),
            a_to_b: LinkSpec::from(&a.apply(&p).unwrap()),
            b_to_a: LinkSpec::from(&p),
            stats: json!({"a_to_b": {"passed": 10, "lost": 2, "overflow": 0}}),
        };
        let mut out = Vec::new();
        write_table(&mut out, &[link]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let cols: Vec<Vec<&str>> = lines
            .iter()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            cols[0],
            [
                "LINK", "DIR", "RATE", "DELAY", "JITTER", "LOSS", "QUEUE", "PASSED", "LOST",
                "OVERFLOW"
            ]
        );
        assert_eq!(
            cols[1],
            [
                "wan",
                "a_to_b",
                "1.5mbit",
                "150ms",
                "5ms",
                "1%",
                "100p/64KiB",
                "10",
                "2",
                "0"
            ]
        );
        assert_eq!(
            cols[2],
            [
                "wan",
                "b_to_a",
                "unlimited",
                "0",
                "0",
                "none",
                "1000p",
                "-",
                "-",
                "-"
            ]
        );
        // Columns line up: every header starts where its values start.
        let at = |l: &str, word: &str| l.find(word).unwrap();
        assert_eq!(at(lines[0], "RATE"), at(lines[1], "1.5mbit"));
        assert_eq!(at(lines[0], "QUEUE"), at(lines[2], "1000p"));
    }
}
