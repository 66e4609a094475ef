//! The WAN-optimizer pair in the lab: `headway run` in the `branch` and `dc` namespaces of a
//! `branch` topology, intercepting transparently.
//!
//! This module owns what a lab run needs to switch Headway's WAN optimizer on and off between
//! downloads: it writes an identity per appliance, one dedup key, and a config file per side
//! into `STATE_DIR/wanopt/`, starts and stops each appliance (`headway run -c`), wipes a
//! side's disk store, and reads its counters (`headway ctl wanopt stats --json` inside the
//! namespace). It does not build the topology ([`crate::Lab`]) nor measure anything.
//!
//! With both appliances stopped the branch and DC hosts are plain routers, so the client
//! reaches the server over the emulated WAN exactly as without Headway: that is the baseline.
//! Started, the branch appliance intercepts TCP from the client (`br-c`) to the server subnet
//! with TPROXY and carries it over its QUIC tunnel to the DC appliance, which connects to the
//! server; the DC appliance does the same for TCP from the server side to the client subnet. The
//! client and server programs are the same in both cases and use the same addresses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::SystemClock;
use headway_tunnel::Identity;

use crate::lab::Background;
use crate::Lab;

/// UDP port of each appliance's tunnel endpoint.
pub const TUNNEL_PORT: u16 = 4433;
/// TCP port of each appliance's TPROXY listener.
pub const INTERCEPT_PORT: u16 = 7070;
/// Admin API address of each appliance, inside its own namespace.
pub const ADMIN: &str = "127.0.0.1:9190";

/// One of the two appliances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The branch appliance (next to the client).
    Branch,
    /// The data-centre appliance (next to the server).
    Dc,
}

impl Side {
    /// Both sides, branch first.
    pub const BOTH: [Side; 2] = [Side::Branch, Side::Dc];

    /// The lab role (namespace) of this side.
    pub fn role(self) -> &'static str {
        match self {
            Side::Branch => "branch",
            Side::Dc => "dc",
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Branch => Side::Dc,
            Side::Dc => Side::Branch,
        }
    }
}

/// How the pair is configured.
#[derive(Debug, Clone, PartialEq)]
pub struct PairOptions {
    /// The WAN link rate the tunnel paces at, bits per second.
    pub link_rate_bps: u64,
    /// The WAN round-trip time.
    pub rtt: Duration,
    /// The service class of intercepted flows (`dedup-disk`, `dedup-memory`, `compress`,
    /// `pass-through`).
    pub class: &'static str,
    /// Size bound of each side's disk store.
    pub disk_store: &'static str,
    /// The tunnel's forward error correction (`[wanopt] fec`).
    pub fec: bool,
}

impl Default for PairOptions {
    fn default() -> Self {
        PairOptions {
            link_rate_bps: 100_000_000,
            rtt: Duration::from_millis(100),
            class: "dedup-disk",
            disk_store: "2GiB",
            fec: true,
        }
    }
}

/// The optimizer pair of a running `branch` lab.
#[derive(Debug)]
pub struct Pair<'a> {
    lab: &'a Lab,
    exe: String,
    dir: PathBuf,
    running: [Option<Background>; 2],
    /// Whether the tunnel's FEC probes the path at start (FEC on, a link it protects): the
    /// probe train is then waited for.
    probed: bool,
    /// The WAN round-trip time the configs were written for.
    rtt: Duration,
}

impl<'a> Pair<'a> {
    /// Writes identities, the dedup key and both configs (appliances not started), and wipes
    /// both disk stores: their chunks were fingerprinted with an earlier pair's key, so they
    /// could never match again, and a full store left by an earlier run would only make the
    /// first start slow (every segment scanned at open).
    pub fn new(lab: &'a Lab, exe: &str, opts: &PairOptions) -> Result<Pair<'a>> {
        let dir = lab.state_dir().join("wanopt");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut fingerprints = Vec::new();
        for side in Side::BOTH {
            let id = Identity::generate().context("generating an appliance identity")?;
            id.save(
                &dir.join(format!("{}.crt", side.role())),
                &dir.join(format!("{}.key", side.role())),
            )
            .context("saving an appliance identity")?;
            fingerprints.push(id.fingerprint().to_string());
        }
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key))
            .context("reading /dev/urandom for the dedup key")?;
        let key: String = key.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(dir.join("dedup.key"), key + "\n")?;
        let mut pair = Pair {
            lab,
            exe: exe.to_string(),
            dir,
            running: [None, None],
            probed: false,
            rtt: opts.rtt,
        };
        pair.write_configs(opts, &fingerprints)?;
        Side::BOTH
            .into_iter()
            .try_for_each(|s| pair.wipe_store(s))?;
        Ok(pair)
    }

    fn index(side: Side) -> usize {
        match side {
            Side::Branch => 0,
            Side::Dc => 1,
        }
    }

    /// The config file of `side`.
    pub fn config_path(&self, side: Side) -> PathBuf {
        self.dir.join(format!("{}.toml", side.role()))
    }

    /// The disk store directory of `side`.
    pub fn store_dir(&self, side: Side) -> PathBuf {
        self.dir.join(format!("{}-store", side.role()))
    }

    fn write_configs(&mut self, opts: &PairOptions, fingerprints: &[String]) -> Result<()> {
        self.probed = opts.fec
            && headway_fec::PathParams::for_link(opts.link_rate_bps, opts.rtt)
                .probe_gap
                .is_some();
        self.rtt = opts.rtt;
        let a = self.lab.addresses();
        let (branch_wan, dc_wan) = match (a.branch_wan.first(), a.dc_wan.first()) {
            (Some(b), Some(d)) => (*b, *d),
            _ => bail!("the WAN optimizer pair needs the branch topology"),
        };
        for side in Side::BOTH {
            let (me, peer, lan_if, far_subnet) = match side {
                Side::Branch => (branch_wan, dc_wan, "br-c", "198.18.2.0/24"),
                Side::Dc => (dc_wan, branch_wan, "dc-s", "198.18.1.0/24"),
            };
            let text = config_text(&ConfigInputs {
                role: side.role(),
                peer_role: side.other().role(),
                tunnel: format!("{me}:{TUNNEL_PORT}"),
                peer_tunnel: format!("{peer}:{TUNNEL_PORT}"),
                peer_fingerprint: &fingerprints[Self::index(side.other())],
                store_dir: &self.store_dir(side),
                lan_if,
                far_subnet,
                opts,
            });
            std::fs::write(self.config_path(side), text)?;
        }
        Ok(())
    }

    /// Rewrites both configs for a new link (takes effect at the next start).
    pub fn reconfigure(&mut self, opts: &PairOptions) -> Result<()> {
        let mut fingerprints = Vec::new();
        for side in Side::BOTH {
            let id = Identity::load(
                &self.dir.join(format!("{}.crt", side.role())),
                &self.dir.join(format!("{}.key", side.role())),
            )?;
            fingerprints.push(id.fingerprint().to_string());
        }
        self.write_configs(opts, &fingerprints)
    }

    /// Starts `side`'s appliance and waits for `ready` (no-op if it runs).
    pub fn start(&mut self, side: Side) -> Result<()> {
        if self.running[Self::index(side)].is_some() {
            return Ok(());
        }
        let cfg = self.config_path(side);
        let cfg = cfg.to_string_lossy().into_owned();
        let mut bg = self
            .lab
            .spawn(side.role(), &[&self.exe, "run", "-c", &cfg])?;
        bg.wait_line(Duration::from_secs(20), |l| l == "ready")
            .with_context(|| format!("starting the {} appliance", side.role()))?;
        self.running[Self::index(side)] = Some(bg);
        Ok(())
    }

    /// Stops `side`'s appliance (SIGTERM: it removes its interception rules), if it runs.
    pub fn stop(&mut self, side: Side) -> Result<()> {
        if let Some(bg) = self.running[Self::index(side)].take() {
            bg.stop()?;
        }
        Ok(())
    }

    /// Starts both appliances and waits (up to 15 s) until each reaches the other at once, as
    /// in a deployment where the pair has been running: the first flow then pays no
    /// handshake. Each appliance dials the other when it starts; a connection accepted from
    /// the peer first does not make a side ready while its own dial is in progress (a flow
    /// would wait out the rest of that handshake: 110 ms at 300 ms RTT), so the wait is for
    /// the side's `peers_ready`, not for any connection.
    ///
    /// Where FEC probes the path it then waits (up to 15 s more) until each side has sent
    /// its start-up probe train and the report it earned has had time to come back: a
    /// deployment that has been running knows its path's loss, and a first transfer sized
    /// from a fresh appliance's few hundred probes pays for the uncertainty in repair (or,
    /// at 5 % loss, in a round trip). At a tenth of a 1.5 Mbit/s link the train takes 2.8 s.
    pub fn start_both(&mut self) -> Result<()> {
        Side::BOTH.into_iter().try_for_each(|s| self.start(s))?;
        self.wait_for_counter("peers_ready", 1, "tunnel did not come up")?;
        if self.probed {
            self.wait_for_counter(
                "fec_probes_sent",
                u64::from(headway_fec::PROBE_TRAIN),
                "FEC probe train did not finish",
            )?;
            // The train's last epoch closes with its last probe (or, if that was lost, with
            // the next idle probe); the report rides back on the peer's next datagram, an idle
            // probe at most 100 ms on, half a round trip away.
            std::thread::sleep(headway_fec::IDLE_PROBE_GAP * 2 + self.rtt);
        }
        Ok(())
    }

    /// Waits up to 15 s until the tunnel counter `name` reaches `at_least` on both sides.
    fn wait_for_counter(&self, name: &str, at_least: u64, failure: &str) -> Result<()> {
        let deadline = SystemClock::now() + Duration::from_secs(15);
        for side in Side::BOTH {
            while self.tunnel_counter(side, name)? < at_least {
                if SystemClock::now() >= deadline {
                    bail!("the {} appliance's {failure} within 15 s", side.role());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// The counter `name` of `side`'s tunnel in the admin API (`WanoptTunnel`), 0 when absent.
    fn tunnel_counter(&self, side: Side, name: &str) -> Result<u64> {
        let stats = self.stats(side)?;
        Ok(stats
            .pointer(&format!("/tunnel/{name}"))
            .and_then(|v| v.as_u64())
            .unwrap_or(0))
    }

    /// Stops both appliances.
    pub fn stop_both(&mut self) -> Result<()> {
        Side::BOTH.into_iter().try_for_each(|s| self.stop(s))
    }

    /// Whether `side` runs.
    pub fn is_running(&self, side: Side) -> bool {
        self.running[Self::index(side)].is_some()
    }

    /// Deletes `side`'s disk store (the appliance must be stopped).
    pub fn wipe_store(&self, side: Side) -> Result<()> {
        anyhow::ensure!(
            !self.is_running(side),
            "stop the {} appliance before wiping its store",
            side.role()
        );
        match std::fs::remove_dir_all(self.store_dir(side)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).context("wiping a disk store"),
        }
    }

    /// `side`'s counters (`headway ctl wanopt stats --json`).
    pub fn stats(&self, side: Side) -> Result<serde_json::Value> {
        let out = self.lab.exec(
            side.role(),
            &[
                &self.exe, "ctl", "--admin", ADMIN, "wanopt", "stats", "--json",
            ],
        )?;
        if !out.status.success() {
            bail!(
                "reading the {} appliance's stats: {}",
                side.role(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        serde_json::from_slice(&out.stdout).context("unreadable wanopt stats")
    }

    /// The total WAN bytes `side` sent and received (summed over its peers and classes).
    pub fn wan_bytes(&self, side: Side) -> Result<u64> {
        Ok(self.traffic(side)?.wan)
    }

    /// `side`'s LAN and WAN byte counters (both directions, summed over peers and classes).
    pub fn traffic(&self, side: Side) -> Result<Traffic> {
        Ok(Traffic::of(&self.stats(side)?))
    }
}

/// One appliance's byte counters, both directions summed over its peers and classes: LAN is
/// what its local TCP sockets carried, WAN what its tunnel streams carried (stream bytes:
/// QUIC, UDP and IP headers, acknowledgements and retransmissions are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// LAN bytes in and out.
    pub lan: u64,
    /// WAN bytes in and out.
    pub wan: u64,
}

impl Traffic {
    /// The counters of a stats snapshot.
    pub fn of(stats: &serde_json::Value) -> Traffic {
        Traffic {
            lan: sum_groups(stats, &["lan_in", "lan_out"]),
            wan: sum_groups(stats, &["wan_in", "wan_out"]),
        }
    }

    /// What was counted between `before` and `self` (counters restart with the appliance: a
    /// counter that went down counts as 0).
    pub fn since(self, before: Traffic) -> Traffic {
        Traffic {
            lan: self.lan.saturating_sub(before.lan),
            wan: self.wan.saturating_sub(before.wan),
        }
    }

    /// Data reduction, LAN bytes per WAN byte; `None` when nothing crossed the WAN.
    pub fn reduction(&self) -> Option<f64> {
        (self.wan > 0).then(|| self.lan as f64 / self.wan as f64)
    }
}

impl Drop for Pair<'_> {
    fn drop(&mut self) {
        let _ = self.stop_both();
    }
}

/// Sums `fields` over every group of a stats snapshot (`{"groups": [{…}, …]}`).
pub fn sum_groups(stats: &serde_json::Value, fields: &[&str]) -> u64 {
    stats
        .get("groups")
        .and_then(|g| g.as_array())
        .map(|groups| {
            groups
                .iter()
                .flat_map(|g| fields.iter().filter_map(|f| g.get(*f)?.as_u64()))
                .sum()
        })
        .unwrap_or(0)
}

/// What one side's config is made of.
struct ConfigInputs<'a> {
    role: &'a str,
    peer_role: &'a str,
    tunnel: String,
    peer_tunnel: String,
    peer_fingerprint: &'a str,
    store_dir: &'a Path,
    lan_if: &'a str,
    far_subnet: &'a str,
    opts: &'a PairOptions,
}

/// The `headway run` config of one appliance.
fn config_text(c: &ConfigInputs<'_>) -> String {
    let role = c.role;
    format!(
        r#"# Written by the lab: the {role} appliance of the WAN-optimizer pair.
[admin]
listen = "{ADMIN}"

[wanopt]
tunnel_listen = "{tunnel}"
cert_file = "{role}.crt"
key_file = "{role}.key"
dedup_key_file = "dedup.key"
retry_after = "2s"
fec = {fec}

[wanopt.disk_store]
dir = "{store}"
size = "{size}"

[[wanopt.peer]]
name = "{peer}"
address = "{peer_tunnel}"
fingerprint = "{fp}"
link_rate = "{rate}bit"
rtt = "{rtt}ms"

[wanopt.intercept]
listen = "0.0.0.0:{INTERCEPT_PORT}"
interfaces = ["{lan_if}"]

[[wanopt.intercept.rule]]
destinations = ["{far}"]
peer = "{peer}"
class = "{class}"
"#,
        tunnel = c.tunnel,
        store = c.store_dir.display(),
        size = c.opts.disk_store,
        peer = c.peer_role,
        peer_tunnel = c.peer_tunnel,
        fp = c.peer_fingerprint,
        rate = c.opts.link_rate_bps,
        rtt = c.opts.rtt.as_millis(),
        lan_if = c.lan_if,
        far = c.far_subnet,
        class = c.opts.class,
        fec = c.opts.fec,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_names_the_peer_and_its_fingerprint() {
        let opts = PairOptions::default();
        let text = config_text(&ConfigInputs {
            role: "branch",
            peer_role: "dc",
            tunnel: "198.18.0.1:4433".into(),
            peer_tunnel: "198.18.0.2:4433".into(),
            peer_fingerprint: "ab",
            store_dir: Path::new("/tmp/s"),
            lan_if: "br-c",
            far_subnet: "198.18.2.0/24",
            opts: &opts,
        });
        let v: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(v["wanopt"]["peer"][0]["fingerprint"].as_str(), Some("ab"));
        assert_eq!(
            v["wanopt"]["peer"][0]["link_rate"].as_str(),
            Some("100000000bit")
        );
        assert_eq!(
            v["wanopt"]["intercept"]["interfaces"][0].as_str(),
            Some("br-c")
        );
    }

    #[test]
    fn traffic_deltas_and_reduction() {
        let v = serde_json::json!({"groups": [
            {"lan_in": 100, "lan_out": 2900, "wan_in": 50, "wan_out": 950},
            {"lan_in": 1000, "wan_out": 1000}
        ]});
        let t = Traffic::of(&v);
        assert_eq!(
            t,
            Traffic {
                lan: 4000,
                wan: 2000
            }
        );
        assert_eq!(t.reduction(), Some(2.0));
        let before = Traffic {
            lan: 1000,
            wan: 1500,
        };
        assert_eq!(
            t.since(before),
            Traffic {
                lan: 3000,
                wan: 500
            }
        );
        assert_eq!(
            before.since(t),
            Traffic::default(),
            "a restart never goes negative"
        );
        assert_eq!(Traffic::default().reduction(), None);
    }

    #[test]
    fn sums_fields_over_groups() {
        let v = serde_json::json!({"groups": [{"wan_in": 1, "wan_out": 2}, {"wan_in": 10}]});
        assert_eq!(sum_groups(&v, &["wan_in", "wan_out"]), 13);
        assert_eq!(sum_groups(&serde_json::json!({}), &["wan_in"]), 0);
    }
}
