//! Transparent interception (nftables TPROXY): the configuration, the nftables ruleset, its
//! installation and removal, and the classification of an intercepted flow.
//!
//! # How a flow gets here
//!
//! ```text
//!  client ─TCP SYN to S:p─▶ appliance's LAN interface
//!     nftables prerouting (table ip headway_wanopt): first matching rule
//!       ├─ pass-through rule, or S is a local address: accept (routed on, not intercepted)
//!       └─ other class: tproxy to :LISTEN, meta mark set MARK
//!     ip rule fwmark MARK lookup ROUTE_TABLE; ROUTE_TABLE: local 0.0.0.0/0 dev lo
//!  ─▶ the IP_TRANSPARENT listener (headway_io::transparent_listener) accepts it;
//!     the accepted socket's local_addr() is S:p, the original destination
//! ```
//!
//! [`classify`] then picks the rule again (first match, the same rules in the same order), and
//! the appliance carries the flow to the rule's peer with `destination = S:p`, exactly like a
//! flow of an explicit service. A flow that reaches the listener without a matching rule (the
//! operator's own nftables rules may be broader) or with a pass-through rule is connected
//! directly and counted as passed through (`"no_rule"`, `"pass_through"`).
//!
//! # What it owns, what it does not
//!
//! [`ruleset`] renders the nftables text (pure, no I/O). [`Installed`] runs `nft` and `ip` to
//! install it with the fwmark rule and the local route, and removes all three when dropped. It
//! does not decide anything about the flows after classification (`crate::outbound_flow` does).
//!
//! # Limits
//!
//! - IPv4 only: the table is an `ip` table and the route is IPv4's; an IPv6 destination in a
//!   rule is an error when rules are installed.
//! - One intercepting appliance per network namespace: the table name, [`MARK`] and
//!   [`ROUTE_TABLE`] are fixed, and installing deletes a previous table of the same name (a
//!   crashed earlier run's).
//! - Installing needs root (CAP_NET_ADMIN); `nft` and `ip` must be on the `PATH`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::{Command, Stdio};

use headway_tunnel::{PeerConfig, PeerId, ServiceClass, ServiceId};
use tokio::net::TcpListener;

/// Transparent interception of TCP flows through the appliance (TPROXY).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterceptConfig {
    /// Address of the IP_TRANSPARENT listener the TPROXY rules send flows to (e.g. 0.0.0.0:7070).
    pub listen: SocketAddr,
    /// LAN interfaces whose incoming TCP is intercepted: the appliance installs the nftables
    /// table, the fwmark rule and the local route at start and removes them at shutdown/drop.
    /// Empty: nothing is installed (the operator installs rules himself).
    pub interfaces: Vec<String>,
    /// Ordered rules, first match wins.
    pub rules: Vec<InterceptRule>,
}

/// Which intercepted flows go to which peer, with which class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterceptRule {
    /// Destination subnets (address, prefix length); empty: any destination.
    pub destinations: Vec<(IpAddr, u8)>,
    /// Destination port ranges, inclusive; empty: any port.
    pub ports: Vec<(u16, u16)>,
    /// The peer (a `PeerConfig::name`) in front of these destinations.
    pub peer: String,
    /// What the optimizer does with matching flows (`PassThrough` flows are not intercepted).
    pub class: ServiceClass,
}

/// The nftables table the appliance installs (family `ip`).
pub const TABLE: &str = "headway_wanopt";
/// The packet mark the TPROXY rules set (`0x4857`, "HW"), and the `ip rule` matches.
pub const MARK: u32 = 0x4857;
/// The routing table holding the `local 0.0.0.0/0 dev lo` route for marked packets.
pub const ROUTE_TABLE: u32 = 4857;
/// The service id in the flow header of transparently intercepted flows (explicit services
/// should not use it; the far side does not interpret service ids).
pub const INTERCEPTED: ServiceId = ServiceId(u32::MAX);

/// Why interception could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InterceptError {
    /// A rule or interface cannot be expressed as nftables rules; the message says what to
    /// change.
    #[error("{0}")]
    Invalid(String),
    /// A rule names a peer that is not configured.
    #[error("rule {rule}: unknown peer {peer:?}")]
    UnknownPeer {
        /// The rule's index (from 0).
        rule: usize,
        /// The peer name it gives.
        peer: String,
    },
    /// The transparent listener could not be created (IP_TRANSPARENT needs CAP_NET_ADMIN).
    #[error("transparent listener on {addr}: {source}")]
    Listen {
        /// Its address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// An `nft` or `ip` command failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it wrote on stderr (or why it could not be run).
        stderr: String,
    },
}

/// The nftables ruleset that intercepts `cfg`'s flows to the listener's `port`, as `nft -f`
/// input: one `ip` table with a prerouting chain at mangle priority. Local destinations are
/// never intercepted (the appliance's own services stay reachable); then one rule per
/// [`InterceptRule`], in order, restricted to `cfg.interfaces` (all interfaces when empty) and
/// TCP: pass-through rules `accept` (the flow is routed on untouched), the others send it to
/// the listener with `tproxy` and set [`MARK`].
pub fn ruleset(cfg: &InterceptConfig, port: u16) -> Result<String, InterceptError> {
    let mut iif = String::new();
    if !cfg.interfaces.is_empty() {
        let names = cfg
            .interfaces
            .iter()
            .map(|i| interface(i).map(|i| format!("\"{i}\"")))
            .collect::<Result<Vec<_>, _>>()?;
        iif = format!("iifname {{ {} }} ", names.join(", "));
    }
    let mut out = format!(
        "table ip {TABLE} {{\n\tchain prerouting {{\n\
         \t\ttype filter hook prerouting priority mangle; policy accept;\n\
         \t\tfib daddr type local accept\n"
    );
    for (i, rule) in cfg.rules.iter().enumerate() {
        let mut line = format!("\t\t{iif}meta l4proto tcp ");
        if !rule.destinations.is_empty() {
            let nets = rule
                .destinations
                .iter()
                .map(|&(addr, len)| subnet_v4(i, addr, len).map(|(a, l)| format!("{a}/{l}")))
                .collect::<Result<Vec<_>, _>>()?;
            let _ = write!(line, "ip daddr {{ {} }} ", nets.join(", "));
        }
        if !rule.ports.is_empty() {
            let ports = rule
                .ports
                .iter()
                .map(|&(lo, hi)| match lo.cmp(&hi) {
                    std::cmp::Ordering::Equal => Ok(lo.to_string()),
                    std::cmp::Ordering::Less => Ok(format!("{lo}-{hi}")),
                    std::cmp::Ordering::Greater => Err(InterceptError::Invalid(format!(
                        "rule {i}: port range {lo}-{hi} is empty: write the lower port first"
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let _ = write!(line, "tcp dport {{ {} }} ", ports.join(", "));
        }
        if rule.class == ServiceClass::PassThrough {
            line.push_str("accept\n");
        } else {
            let _ = writeln!(line, "tproxy to :{port} meta mark set {MARK:#x} accept");
        }
        out.push_str(&line);
    }
    out.push_str("\t}\n}\n");
    Ok(out)
}

/// An interface name that is safe to quote in nftables text (see `IFNAMSIZ`).
fn interface(name: &str) -> Result<&str, InterceptError> {
    let ok = !name.is_empty()
        && name.len() < 16
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@:".contains(&b));
    if ok {
        Ok(name)
    } else {
        Err(InterceptError::Invalid(format!(
            "interface name {name:?}: use 1 to 15 letters, digits or -_.@:"
        )))
    }
}

/// Rule `rule`'s destination as an IPv4 network address and prefix length.
fn subnet_v4(rule: usize, addr: IpAddr, len: u8) -> Result<(Ipv4Addr, u8), InterceptError> {
    match addr {
        IpAddr::V4(a) if len <= 32 => {
            Ok((Ipv4Addr::from(u32::from(a) & mask(len, 32) as u32), len))
        }
        IpAddr::V4(a) => Err(InterceptError::Invalid(format!(
            "rule {rule}: prefix length {len} of {a} is over 32"
        ))),
        IpAddr::V6(a) => Err(InterceptError::Invalid(format!(
            "rule {rule}: destination {a}/{len} is IPv6; transparent interception is IPv4 only"
        ))),
    }
}

/// The top `len` bits of a `bits`-bit address set.
fn mask(len: u8, bits: u8) -> u128 {
    let len = u32::from(len.min(bits));
    let all = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    if len == 0 {
        0
    } else {
        all & !((1u128 << (u32::from(bits) - len)) - 1)
    }
}

/// The index of the first rule matching `dst`, if any (a rule with IPv6 subnets matches IPv6
/// destinations here, though [`ruleset`] cannot install it).
pub fn classify(rules: &[InterceptRule], dst: SocketAddr) -> Option<usize> {
    rules.iter().position(|r| {
        let port = dst.port();
        (r.ports.is_empty() || r.ports.iter().any(|&(lo, hi)| (lo..=hi).contains(&port)))
            && (r.destinations.is_empty()
                || r.destinations
                    .iter()
                    .any(|&(net, len)| contains(net, len, dst.ip())))
    })
}

/// Whether subnet `net/len` contains `ip` (never across address families).
fn contains(net: IpAddr, len: u8, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let m = mask(len, 32);
            u128::from(u32::from(n)) & m == u128::from(u32::from(a)) & m
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let m = mask(len, 128);
            u128::from(n) & m == u128::from(a) & m
        }
        _ => false,
    }
}

/// A bound transparent listener with its rules, resolved for the accept loop.
#[derive(Debug)]
pub(crate) struct Intercept {
    /// The listener's address (port 0 resolved).
    pub addr: SocketAddr,
    pub listener: TcpListener,
    pub rules: Vec<InterceptRule>,
    /// Each rule's peer.
    pub peers: Vec<PeerId>,
    /// The nftables ruleset to install, if `interfaces` is not empty.
    pub ruleset: Option<String>,
}

impl Intercept {
    /// Resolves the rules' peers among `peers`, binds the listener and renders the ruleset.
    pub(crate) fn bind(
        cfg: &InterceptConfig,
        peers: &[PeerConfig],
    ) -> Result<Self, InterceptError> {
        let rule_peers = cfg
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| match peers.iter().position(|p| p.name == r.peer) {
                Some(p) => Ok(PeerId(p)),
                None => Err(InterceptError::UnknownPeer {
                    rule: i,
                    peer: r.peer.clone(),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let listen = |source| InterceptError::Listen {
            addr: cfg.listen,
            source,
        };
        let std = headway_io::transparent_listener(cfg.listen, 1024).map_err(listen)?;
        let listener = TcpListener::from_std(std).map_err(listen)?;
        let addr = listener.local_addr().map_err(listen)?;
        let ruleset = if cfg.interfaces.is_empty() {
            None
        } else {
            Some(ruleset(cfg, addr.port())?)
        };
        Ok(Self {
            addr,
            listener,
            rules: cfg.rules.clone(),
            peers: rule_peers,
            ruleset,
        })
    }
}

/// Whether `ip` is one of this host's (this namespace's) addresses: binding to it works.
pub(crate) fn is_local(ip: IpAddr) -> bool {
    let unspecified = match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    ip == unspecified || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The installed table, fwmark rule and local route; dropping it removes them.
#[derive(Debug)]
pub struct Installed {
    active: bool,
}

impl Installed {
    /// Installs `ruleset` (replacing a table of the same name left by an earlier run), the
    /// `ip rule` sending [`MARK`]ed packets to [`ROUTE_TABLE`] and that table's local route.
    /// Blocking (runs `nft` and `ip`); on error, what was installed is removed again.
    pub fn install(ruleset: &str) -> Result<Installed, InterceptError> {
        // Declaring the table first makes the delete succeed whether or not it exists; the
        // whole input is one nftables transaction.
        let text = format!("table ip {TABLE}\ndelete table ip {TABLE}\n{ruleset}");
        run("nft", &["-f", "-"], Some(&text))?;
        let installed = Installed { active: true };
        // A duplicate rule from a crashed run would survive our removal: delete them first.
        while run("ip", &rule_args("del"), None).is_ok() {}
        run("ip", &rule_args("add"), None)?;
        run("ip", &route_args("replace"), None)?;
        Ok(installed)
    }

    /// Removes the table, the rule and the route (each attempted; the first error is
    /// returned). Idempotent. Blocking.
    pub fn remove(&mut self) -> Result<(), InterceptError> {
        if !std::mem::take(&mut self.active) {
            return Ok(());
        }
        let table = run("nft", &["delete", "table", "ip", TABLE], None);
        let rule = run("ip", &rule_args("del"), None);
        let route = run("ip", &route_args("del"), None);
        table.and(rule).and(route)
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            tracing::warn!(error = %e, "removing the interception rules failed");
        }
    }
}

/// `ip rule VERB fwmark MARK lookup ROUTE_TABLE`'s arguments.
fn rule_args(verb: &str) -> Vec<String> {
    let mark = format!("{MARK:#x}");
    let table = ROUTE_TABLE.to_string();
    ["rule", verb, "fwmark", &mark, "lookup", &table]
        .map(String::from)
        .to_vec()
}

/// `ip route VERB local 0.0.0.0/0 dev lo table ROUTE_TABLE`'s arguments.
fn route_args(verb: &str) -> Vec<String> {
    let table = ROUTE_TABLE.to_string();
    [
        "route",
        verb,
        "local",
        "0.0.0.0/0",
        "dev",
        "lo",
        "table",
        &table,
    ]
    .map(String::from)
    .to_vec()
}

/// Runs `program args…` with `stdin`; a non-zero exit is an error carrying its stderr.
fn run(program: &str, args: &[impl AsRef<str>], stdin: Option<&str>) -> Result<(), InterceptError> {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let command = format!("{program} {}", args.join(" "));
    let fail = |stderr: String| InterceptError::Command {
        command: command.clone(),
        stderr,
    };
    let mut child = Command::new(program)
        .args(&args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| fail(e.to_string()))?;
    }
    let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(fail(String::from_utf8_lossy(&out.stderr).trim().to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(dst: &[(&str, u8)], ports: &[(u16, u16)], class: ServiceClass) -> InterceptRule {
        InterceptRule {
            destinations: dst.iter().map(|&(a, l)| (a.parse().unwrap(), l)).collect(),
            ports: ports.to_vec(),
            peer: "dc".into(),
            class,
        }
    }

    fn config(interfaces: &[&str], rules: Vec<InterceptRule>) -> InterceptConfig {
        InterceptConfig {
            listen: "0.0.0.0:7070".parse().unwrap(),
            interfaces: interfaces.iter().map(|s| s.to_string()).collect(),
            rules,
        }
    }

    #[test]
    fn ruleset_has_one_rule_per_intercept_rule_in_order() {
        let cfg = config(
            &["lan0", "lan1"],
            vec![
                rule(&[("10.1.2.3", 16)], &[(22, 22)], ServiceClass::PassThrough),
                rule(
                    &[("10.1.0.0", 16), ("192.168.7.0", 24)],
                    &[(80, 80), (8000, 8080)],
                    ServiceClass::DedupDisk,
                ),
                rule(&[], &[], ServiceClass::Compress),
            ],
        );
        assert_eq!(
            ruleset(&cfg, 7070).unwrap(),
            "table ip headway_wanopt {\n\
             \tchain prerouting {\n\
             \t\ttype filter hook prerouting priority mangle; policy accept;\n\
             \t\tfib daddr type local accept\n\
             \t\tiifname { \"lan0\", \"lan1\" } meta l4proto tcp ip daddr { 10.1.0.0/16 } \
             tcp dport { 22 } accept\n\
             \t\tiifname { \"lan0\", \"lan1\" } meta l4proto tcp \
             ip daddr { 10.1.0.0/16, 192.168.7.0/24 } tcp dport { 80, 8000-8080 } \
             tproxy to :7070 meta mark set 0x4857 accept\n\
             \t\tiifname { \"lan0\", \"lan1\" } meta l4proto tcp \
             tproxy to :7070 meta mark set 0x4857 accept\n\
             \t}\n}\n"
        );
        // Without interfaces (the operator installs the rules): every interface.
        let text = ruleset(&config(&[], cfg.rules.clone()), 9).unwrap();
        assert!(text.contains("\t\tmeta l4proto tcp tproxy to :9 meta mark set 0x4857 accept\n"));
        assert!(!text.contains("iifname"));
    }

    #[test]
    fn ruleset_refuses_what_it_cannot_express() {
        let bad = [
            config(
                &["lan0"],
                vec![rule(&[("2001:db8::", 32)], &[], ServiceClass::Compress)],
            ),
            config(
                &["lan0"],
                vec![rule(&[("10.0.0.0", 33)], &[], ServiceClass::Compress)],
            ),
            config(
                &["lan0"],
                vec![rule(&[], &[(90, 80)], ServiceClass::Compress)],
            ),
            config(&["lan0\" } accept"], vec![]),
            config(&["a-very-long-interface"], vec![]),
        ];
        for cfg in bad {
            let e = ruleset(&cfg, 7070).unwrap_err();
            assert!(matches!(e, InterceptError::Invalid(_)), "{e:?}");
            eprintln!("{e}");
        }
    }

    #[test]
    fn classify_takes_the_first_match() {
        let rules = [
            rule(&[("10.1.0.0", 16)], &[(22, 22)], ServiceClass::PassThrough),
            rule(
                &[("10.1.0.0", 16), ("10.9.9.9", 32)],
                &[(1, 1000)],
                ServiceClass::DedupDisk,
            ),
            rule(&[("2001:db8::", 32)], &[], ServiceClass::DedupMemory),
            rule(&[], &[(5000, 5000)], ServiceClass::Compress),
        ];
        let at = |s: &str| classify(&rules, s.parse().unwrap());
        assert_eq!(at("10.1.200.3:22"), Some(0));
        assert_eq!(at("10.1.200.3:23"), Some(1));
        assert_eq!(at("10.9.9.9:1000"), Some(1));
        assert_eq!(at("10.9.9.8:1000"), None);
        assert_eq!(at("10.2.0.1:1001"), None);
        assert_eq!(at("[2001:db8:1::1]:443"), Some(2));
        assert_eq!(at("[2001:db9::1]:443"), None);
        assert_eq!(at("8.8.8.8:5000"), Some(3));
        assert_eq!(classify(&[], "10.0.0.1:1".parse().unwrap()), None);
        // Families never mix: an IPv4 subnet does not match an IPv6 address.
        assert_eq!(at("[::ffff:10.1.0.1]:22"), None);
    }

    #[test]
    fn masks() {
        assert_eq!(mask(0, 32), 0);
        assert_eq!(mask(8, 32), 0xff00_0000);
        assert_eq!(mask(32, 32), 0xffff_ffff);
        assert_eq!(mask(40, 32), 0xffff_ffff);
        assert_eq!(mask(128, 128), u128::MAX);
        assert_eq!(mask(1, 128), 1 << 127);
        assert!(contains(
            "0.0.0.0".parse().unwrap(),
            0,
            "1.2.3.4".parse().unwrap()
        ));
    }
}
