//! The validated `[wanopt]` section: the WAN-optimizer appliance's runtime configuration.
//!
//! This module owns [`WanoptConfig`] and its parts, and the one conversion from
//! [`WanoptSection`] that checks them: socket addresses, peer names (unique, known where used,
//! with a did-you-mean), fingerprints, service ids and listen addresses (unique), CIDR
//! destinations and port ranges, a `dedup-disk` class only with a `[wanopt.disk_store]`, and
//! the files the section names: the certificate and key (PEM) and the deployment's dedup key.
//! Those files are read here, after every other check, so `headway check` reports a missing or
//! malformed file with the line that names it.
//!
//! It does not depend on the appliance's crates (`headway-wanopt`, `headway-tunnel`,
//! `headway-dedup`): it produces plain types, and the binary converts them. It does not parse
//! the PEM contents beyond finding their `BEGIN` lines; the tunnel's identity loader does that
//! when the appliance starts.
//!
//! Entry point: `Config::try_from(ConfigFile)` calls [`wanopt`] for the `[wanopt]` section.

use std::collections::HashMap;
use std::fmt;
use std::io::Read as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use headway_core::{ByteSize, Rate};
use toml::Spanned;

use crate::config::{check_interface, check_name, invalid, ConfigError};
pub use crate::file::ServiceClass;
use crate::file::{
    InterceptSection, Origin, PeerSection, PortsValue, RuleSection, ServiceSection, WanoptSection,
};
use crate::suggest::did_you_mean;

/// Default capacity of the memory chunk store: 256 MiB.
pub const DEFAULT_MEMORY_STORE: ByteSize = ByteSize::new(256 << 20);
/// Default hold-down after a failed peer connection: 10 s.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(10);
/// Default RTT estimate of a peer: 100 ms.
pub const DEFAULT_RTT: Duration = Duration::from_millis(100);

/// A peer's WAN path MTU when the config gives none (Ethernet's).
pub const DEFAULT_MTU: u16 = 1500;
/// Smallest accepted disk store: 1 MiB.
pub const MIN_DISK_STORE: ByteSize = ByteSize::new(1 << 20);
/// Largest certificate or key file read: 1 MiB.
const MAX_PEM_FILE: u64 = 1 << 20;
/// Largest dedup key file read.
const MAX_KEY_FILE: u64 = 4096;

/// The validated WAN-optimizer appliance configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct WanoptConfig {
    /// UDP address of the QUIC tunnel endpoint.
    pub tunnel_listen: SocketAddr,
    /// The certificate file, resolved against the config file's directory.
    pub cert_file: PathBuf,
    /// The key file, resolved likewise.
    pub key_file: PathBuf,
    /// The certificate file's text (holds a PEM certificate).
    pub cert_pem: String,
    /// The key file's text (holds a PEM private key).
    pub key_pem: String,
    /// The deployment's dedup key.
    pub dedup_key: DedupSecret,
    /// Capacity of the memory chunk store (> 0).
    pub memory_store: ByteSize,
    /// Hold-down after a failed peer connection.
    pub retry_after: Duration,
    /// Forward error correction on the tunnel (the same on every appliance).
    pub fec: bool,
    /// The disk store; present whenever a service or rule uses [`ServiceClass::DedupDisk`].
    pub disk_store: Option<DiskStore>,
    /// The peers, in file order; names, addresses and fingerprints are unique.
    pub peers: Vec<Peer>,
    /// The explicit services, in file order; ids and listen addresses are unique, peers known.
    pub services: Vec<Service>,
    /// Transparent interception, if configured.
    pub intercept: Option<Intercept>,
}

impl WanoptConfig {
    /// The classes used by services and rules (to know whether a disk store is needed).
    pub fn uses(&self, class: ServiceClass) -> bool {
        self.services.iter().any(|s| s.class == class)
            || self
                .intercept
                .as_ref()
                .is_some_and(|i| i.rules.iter().any(|r| r.class == class))
    }
}

/// The deployment's 32-byte dedup key. `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct DedupSecret(pub [u8; 32]);

impl fmt::Debug for DedupSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DedupSecret(..)")
    }
}

/// The persistent chunk store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskStore {
    /// Directory of the segment files, resolved against the config file's directory.
    pub dir: PathBuf,
    /// Bound on the segment files' total size (≥ [`MIN_DISK_STORE`]).
    pub size: ByteSize,
}

/// A peer appliance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its name (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Its tunnel endpoint.
    pub address: SocketAddr,
    /// SHA-256 of its certificate's DER.
    pub fingerprint: [u8; 32],
    /// The WAN link rate towards it (> 0).
    pub link_rate: Rate,
    /// The expected RTT to it (> 0, ≤ 60 s).
    pub rtt: Duration,
    /// The WAN path's IP MTU towards it, in bytes (576 ..= 9000).
    pub mtu: u16,
}

/// An explicit service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Its id in flow headers.
    pub id: u32,
    /// Where clients connect.
    pub listen: SocketAddr,
    /// Where the peer connects on.
    pub target: SocketAddr,
    /// The peer's name (a configured [`Peer::name`]).
    pub peer: String,
    /// What the optimizer does with its flows.
    pub class: ServiceClass,
}

/// Transparent interception.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intercept {
    /// Where TPROXY delivers intercepted flows.
    pub listen: SocketAddr,
    /// The LAN interfaces intercepted on (valid names, at least one).
    pub interfaces: Vec<String>,
    /// The rules, first match wins (at least one).
    pub rules: Vec<InterceptRule>,
}

/// Which intercepted flows go to which peer and class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterceptRule {
    /// Destination networks; empty means any.
    pub destinations: Vec<Cidr>,
    /// Destination port ranges; empty means any.
    pub ports: Vec<PortRange>,
    /// The peer's name (a configured [`Peer::name`]).
    pub peer: String,
    /// What the optimizer does with the flows.
    pub class: ServiceClass,
}

/// An address and prefix length with no bits set beyond the prefix (`198.18.2.0/24`); a bare
/// address is a /32 or /128.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The network address.
    pub addr: IpAddr,
    /// The prefix length (≤ 32 for IPv4, ≤ 128 for IPv6).
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;

    /// Parses `addr` or `addr/prefix`; the message says what to write instead.
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let (a, p) = match t.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (t, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| {
            format!(
                "`{s}` is not an address or network: write e.g. `198.18.2.0/24`, `10.0.0.1` or \
                 `2001:db8::/32`"
            )
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p.map(str::parse::<u8>) {
            None => max,
            Some(Ok(n)) if n <= max => n,
            Some(_) => {
                return Err(format!(
                    "`{s}` has an invalid prefix length: use 0 to {max} after the `/`"
                ))
            }
        };
        let masked = mask(addr, prefix);
        if masked != addr {
            return Err(format!(
                "`{s}` has address bits set beyond its /{prefix} prefix: write the network \
                 `{masked}/{prefix}`, or `{addr}/{max}` for the one address"
            ));
        }
        Ok(Cidr { addr, prefix })
    }
}

impl Cidr {
    /// Whether `ip` is in this network (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = headway_core::net::unmapped(ip);
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// `addr` with every bit beyond `prefix` cleared.
fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// An inclusive range of TCP ports, `1 ≤ first ≤ last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// The first port.
    pub first: u16,
    /// The last port (equal to `first` for one port).
    pub last: u16,
}

impl FromStr for PortRange {
    type Err = String;

    /// Parses `80` or `8000-9000`; the message says what to write instead.
    fn from_str(s: &str) -> Result<Self, String> {
        let port = |p: &str| -> Result<u16, String> {
            match p.trim().parse::<u32>() {
                Ok(n @ 1..=65535) => Ok(n as u16),
                Ok(_) => Err(format!("port {} is out of range: use 1 to 65535", p.trim())),
                Err(_) => Err(format!(
                    "`{s}` is not a port or port range: write e.g. `80` or `8000-9000`"
                )),
            }
        };
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => {
                let p = port(s)?;
                (p, p)
            }
        };
        if first > last {
            return Err(format!(
                "`{s}` is not a port range: write the lower port first, `{last}-{first}`"
            ));
        }
        Ok(PortRange { first, last })
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// Validates `[wanopt]` (see the module docs for the checks) and reads its files.
pub(crate) fn wanopt(s: &WanoptSection, origin: &Origin) -> Result<WanoptConfig, ConfigError> {
    let at = |span: std::ops::Range<usize>| origin.locate(Some(span));
    let tunnel_listen = socket(&s.tunnel_listen, "tunnel_listen", "UDP", origin)?;
    let memory_store = match &s.memory_store {
        None => DEFAULT_MEMORY_STORE,
        Some(m) if m.get_ref().bytes() == 0 => {
            return Err(invalid(
                at(m.span()),
                "memory_store must be larger than 0: give a size such as \"256MiB\"".into(),
            ))
        }
        Some(m) => *m.get_ref(),
    };
    let retry_after = s
        .retry_after
        .as_ref()
        .map_or(DEFAULT_RETRY_AFTER, |r| r.get_ref().0);
    let disk_store = match &s.disk_store {
        None => None,
        Some(d) => {
            let d = d.get_ref();
            if d.size.get_ref().bytes() < MIN_DISK_STORE.bytes() {
                return Err(invalid(
                    at(d.size.span()),
                    format!(
                        "disk_store size {} is too small: give at least {MIN_DISK_STORE}, e.g. \
                         \"4GiB\"",
                        d.size.get_ref()
                    ),
                ));
            }
            Some(DiskStore {
                dir: resolve(d.dir.get_ref(), origin),
                size: *d.size.get_ref(),
            })
        }
    };

    let peers = peers(&s.peer, origin)?;
    let names: Vec<&str> = peers.iter().map(|p| p.name.as_str()).collect();
    // Every class use, to require a disk store for `dedup-disk`.
    let mut classes: Vec<&Spanned<ServiceClass>> = Vec::new();
    // Every TCP listen address, with where it was first given.
    let mut listens: HashMap<SocketAddr, (String, Option<usize>)> = HashMap::new();
    let mut claim = |addr: SocketAddr, what: String, span: std::ops::Range<usize>| {
        let here = at(span);
        if let Some((other, line)) = listens.get(&addr) {
            return Err(invalid(
                here,
                format!(
                    "{what}: listen address {addr} is already used by {other}{}: give each its \
                     own address or port",
                    line.map(|l| format!(" (line {l})")).unwrap_or_default()
                ),
            ));
        }
        listens.insert(addr, (what, here.line));
        Ok(())
    };

    let mut services = Vec::with_capacity(s.service.len());
    let mut ids: HashMap<u32, Option<usize>> = HashMap::new();
    for sv in &s.service {
        let id = *sv.id.get_ref();
        if let Some(first) = ids.insert(id, at(sv.id.span()).line) {
            return Err(invalid(
                at(sv.id.span()),
                format!(
                    "service id {id} is used twice{}: give each service its own id",
                    first
                        .map(|l| format!(" (first on line {l})"))
                        .unwrap_or_default()
                ),
            ));
        }
        let what = format!("service {id}");
        let service = service(sv, &what, &names, origin)?;
        claim(service.listen, what, sv.listen.span())?;
        classes.push(&sv.class);
        services.push(service);
    }

    let intercept = match &s.intercept {
        None => None,
        Some(i) => {
            let span = i.get_ref().listen.span();
            let i = intercept(i, &names, origin, &mut classes)?;
            claim(i.listen, "the intercept listener".into(), span)?;
            Some(i)
        }
    };

    if disk_store.is_none() {
        if let Some(c) = classes
            .iter()
            .find(|c| *c.get_ref() == ServiceClass::DedupDisk)
        {
            return Err(invalid(
                at(c.span()),
                "class `dedup-disk` needs a disk store: add a [wanopt.disk_store] section with \
                 `dir` and `size`, or use class `dedup-memory`"
                    .into(),
            ));
        }
    }

    // The files last: every other mistake is reported even where the files are missing.
    let cert_file = resolve(s.cert_file.get_ref(), origin);
    let key_file = resolve(s.key_file.get_ref(), origin);
    let identity_hint = format!(
        "create a certificate and key with `headway wanopt identity --cert {} --key {}`",
        s.cert_file.get_ref().display(),
        s.key_file.get_ref().display()
    );
    let cert_pem = read_limited(&cert_file, MAX_PEM_FILE).map_err(|e| {
        file_error(
            &s.cert_file,
            "the certificate",
            &cert_file,
            &e,
            &identity_hint,
            origin,
        )
    })?;
    if !cert_pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err(file_error(
            &s.cert_file,
            "the certificate",
            &cert_file,
            "it holds no PEM certificate (no `-----BEGIN CERTIFICATE-----` line)",
            &identity_hint,
            origin,
        ));
    }
    let key_pem = read_limited(&key_file, MAX_PEM_FILE).map_err(|e| {
        file_error(
            &s.key_file,
            "the private key",
            &key_file,
            &e,
            &identity_hint,
            origin,
        )
    })?;
    if !(key_pem.contains("-----BEGIN ") && key_pem.contains("PRIVATE KEY-----")) {
        return Err(file_error(
            &s.key_file,
            "the private key",
            &key_file,
            "it holds no PEM private key (no `-----BEGIN … PRIVATE KEY-----` line)",
            &identity_hint,
            origin,
        ));
    }
    let key_path = resolve(s.dedup_key_file.get_ref(), origin);
    let key_hint = format!(
        "create one with `headway wanopt dedup-key --out {}` and copy it to every appliance",
        s.dedup_key_file.get_ref().display()
    );
    let dedup_key = read_limited(&key_path, MAX_KEY_FILE)
        .and_then(|text| {
            parse_hex32(&text).map_err(|why| format!("it does not hold a dedup key: {why}"))
        })
        .map_err(|e| {
            file_error(
                &s.dedup_key_file,
                "the dedup key",
                &key_path,
                &e,
                &key_hint,
                origin,
            )
        })?;

    Ok(WanoptConfig {
        tunnel_listen,
        cert_file,
        key_file,
        cert_pem,
        key_pem,
        dedup_key: DedupSecret(dedup_key),
        memory_store,
        retry_after,
        fec: s.fec.unwrap_or(true),
        disk_store,
        peers,
        services,
        intercept,
    })
}

fn peers(sections: &[PeerSection], origin: &Origin) -> Result<Vec<Peer>, ConfigError> {
    let at = |span: std::ops::Range<usize>| origin.locate(Some(span));
    let mut out: Vec<Peer> = Vec::with_capacity(sections.len());
    let mut lines: Vec<[Option<usize>; 3]> = Vec::new();
    for p in sections {
        let name = p.name.get_ref().as_str();
        check_name(name, "peer").map_err(|m| invalid(at(p.name.span()), m))?;
        let address = socket(&p.address, "address", "UDP", origin)?;
        let fingerprint = parse_hex32(p.fingerprint.get_ref()).map_err(|why| {
            invalid(
                at(p.fingerprint.span()),
                format!(
                    "peer `{name}`: not a certificate fingerprint: {why}; run `headway wanopt \
                     fingerprint --cert PEER.crt` where the peer's certificate is and paste what \
                     it prints"
                ),
            )
        })?;
        let link_rate = *p.link_rate.get_ref();
        if link_rate.bps() == 0 {
            return Err(invalid(
                at(p.link_rate.span()),
                format!("peer `{name}`: link_rate must be above 0: give the WAN's rate, e.g. \"1.5mbit\""),
            ));
        }
        let rtt = match &p.rtt {
            None => DEFAULT_RTT,
            Some(r) if r.get_ref().0.is_zero() || r.get_ref().0 > Duration::from_secs(60) => {
                return Err(invalid(
                    at(r.span()),
                    format!(
                        "peer `{name}`: rtt must be above 0 and at most 60s: give the WAN's \
                         round-trip time, e.g. \"300ms\""
                    ),
                ))
            }
            Some(r) => r.get_ref().0,
        };
        let mtu = match &p.mtu {
            None => DEFAULT_MTU,
            Some(m) if !(576..=9000).contains(m.get_ref()) => {
                return Err(invalid(
                    at(m.span()),
                    format!(
                        "peer `{name}`: mtu must be between 576 and 9000 bytes: give the WAN \
                         path's IP MTU, e.g. 1500"
                    ),
                ))
            }
            // In range, so it fits.
            Some(m) => *m.get_ref() as u16,
        };
        let here = [
            at(p.name.span()).line,
            at(p.address.span()).line,
            at(p.fingerprint.span()).line,
        ];
        for (i, q) in out.iter().enumerate() {
            let (what, span, first) = if q.name == name {
                (format!("peer name `{name}`"), p.name.span(), lines[i][0])
            } else if q.address == address {
                (
                    format!("peer address {address}"),
                    p.address.span(),
                    lines[i][1],
                )
            } else if q.fingerprint == fingerprint {
                (
                    "peer fingerprint".to_string(),
                    p.fingerprint.span(),
                    lines[i][2],
                )
            } else {
                continue;
            };
            return Err(invalid(
                at(span),
                format!(
                    "{what} is used twice{} (peer `{}`): each [[wanopt.peer]] is its own \
                     appliance",
                    first
                        .map(|l| format!(" (first on line {l})"))
                        .unwrap_or_default(),
                    q.name
                ),
            ));
        }
        lines.push(here);
        out.push(Peer {
            name: name.to_string(),
            address,
            fingerprint,
            link_rate,
            rtt,
            mtu,
        });
    }
    Ok(out)
}

fn service(
    s: &ServiceSection,
    what: &str,
    peers: &[&str],
    origin: &Origin,
) -> Result<Service, ConfigError> {
    Ok(Service {
        id: *s.id.get_ref(),
        listen: socket(&s.listen, &format!("{what}: listen"), "TCP", origin)?,
        target: socket(&s.target, &format!("{what}: target"), "TCP", origin)?,
        peer: peer_ref(&s.peer, what, peers, origin)?,
        class: *s.class.get_ref(),
    })
}

/// The validated intercept section; pushes its rules' classes onto `classes`.
fn intercept<'a>(
    i: &'a Spanned<InterceptSection>,
    peers: &[&str],
    origin: &Origin,
    classes: &mut Vec<&'a Spanned<ServiceClass>>,
) -> Result<Intercept, ConfigError> {
    let at = |span: std::ops::Range<usize>| origin.locate(Some(span));
    let section = i.get_ref();
    let listen = socket(&section.listen, "intercept listen", "TCP", origin)?;
    if section.interfaces.get_ref().is_empty() {
        return Err(invalid(
            at(section.interfaces.span()),
            "intercept: list at least one LAN interface, e.g. interfaces = [\"eth1\"]".into(),
        ));
    }
    let mut interfaces = Vec::new();
    for iface in section.interfaces.get_ref() {
        check_interface(iface.get_ref())
            .map_err(|m| invalid(at(iface.span()), format!("intercept: {m}")))?;
        if interfaces.contains(iface.get_ref()) {
            return Err(invalid(
                at(iface.span()),
                format!(
                    "intercept: interface `{}` is listed twice: list it once",
                    iface.get_ref()
                ),
            ));
        }
        interfaces.push(iface.get_ref().clone());
    }
    if section.rule.is_empty() {
        return Err(invalid(
            at(i.span()),
            "[wanopt.intercept] has no rules, so it would intercept nothing: add a \
             [[wanopt.intercept.rule]] with `peer` and `class` (and optionally `destinations` and \
             `ports`)"
                .into(),
        ));
    }
    let mut rules = Vec::new();
    for (n, r) in section.rule.iter().enumerate() {
        rules.push(rule(r, n + 1, peers, origin)?);
        classes.push(&r.class);
    }
    Ok(Intercept {
        listen,
        interfaces,
        rules,
    })
}

fn rule(
    r: &RuleSection,
    n: usize,
    peers: &[&str],
    origin: &Origin,
) -> Result<InterceptRule, ConfigError> {
    let at = |span: std::ops::Range<usize>| origin.locate(Some(span));
    let what = format!("intercept rule {n}");
    let destinations = r
        .destinations
        .iter()
        .map(|d| {
            d.get_ref()
                .parse::<Cidr>()
                .map_err(|m| invalid(at(d.span()), format!("{what}: {m}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ports = r
        .ports
        .iter()
        .map(|p| {
            let parsed = match p.get_ref() {
                PortsValue::Number(n) => n.to_string().parse::<PortRange>(),
                PortsValue::Text(t) => t.parse::<PortRange>(),
            };
            parsed.map_err(|m| invalid(at(p.span()), format!("{what}: {m}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(InterceptRule {
        destinations,
        ports,
        peer: peer_ref(&r.peer, &what, peers, origin)?,
        class: *r.class.get_ref(),
    })
}

/// A reference to a peer by name: must name a configured peer.
fn peer_ref(
    p: &Spanned<String>,
    what: &str,
    peers: &[&str],
    origin: &Origin,
) -> Result<String, ConfigError> {
    let name = p.get_ref();
    if peers.contains(&name.as_str()) {
        return Ok(name.clone());
    }
    let fix = match did_you_mean(name, peers) {
        Some(s) => format!("did you mean `{s}`?"),
        None if peers.is_empty() => "add a [[wanopt.peer]] with this name".to_string(),
        None => format!(
            "use one of the [[wanopt.peer]] names: {}",
            peers
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Err(invalid(
        origin.locate(Some(p.span())),
        format!("{what}: unknown peer `{name}`: {fix}"),
    ))
}

pub(crate) fn socket(
    s: &Spanned<String>,
    what: &str,
    proto: &str,
    origin: &Origin,
) -> Result<SocketAddr, ConfigError> {
    s.get_ref().trim().parse().map_err(|_| {
        invalid(
            origin.locate(Some(s.span())),
            format!(
                "{what} `{}` is not a {proto} socket address: write an IP address and a port, \
                 e.g. `198.18.0.1:4433` or `[2001:db8::1]:4433`",
                s.get_ref()
            ),
        )
    })
}

/// `path` against the config file's directory when relative.
pub(crate) fn resolve(path: &Path, origin: &Origin) -> PathBuf {
    if path.is_relative() {
        Path::new(&origin.path)
            .parent()
            .unwrap_or(Path::new(""))
            .join(path)
    } else {
        path.to_path_buf()
    }
}

/// Reads at most `limit` bytes of text; a longer file is an error, not an out-of-memory.
pub(crate) fn read_limited(path: &Path, limit: u64) -> Result<String, String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit + 1).read_to_string(&mut text))
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > limit {
        return Err(format!("it is larger than {limit} bytes"));
    }
    Ok(text)
}

pub(crate) fn file_error(
    key: &Spanned<PathBuf>,
    what: &str,
    path: &Path,
    why: &str,
    hint: &str,
    origin: &Origin,
) -> ConfigError {
    invalid(
        origin.locate(Some(key.span())),
        format!("cannot use {what} in `{}`: {why}; {hint}", path.display()),
    )
}

/// 32 bytes from 64 hex digits; `:` separators, surrounding whitespace and a `sha256:` prefix
/// are allowed (as tools print fingerprints).
fn parse_hex32(text: &str) -> Result<[u8; 32], String> {
    let t = text.trim();
    let t = t
        .strip_prefix("sha256:")
        .or_else(|| t.strip_prefix("SHA256:"))
        .unwrap_or(t);
    let digits: Vec<char> = t.chars().filter(|c| *c != ':').collect();
    if let Some(c) = digits.iter().find(|c| !c.is_ascii_hexdigit()) {
        return Err(format!("{c:?} is not a hex digit"));
    }
    if digits.len() != 64 {
        return Err(format!(
            "expected 64 hex digits (32 bytes), found {}",
            digits.len()
        ));
    }
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks(2).enumerate() {
        let hi = pair[0].to_digit(16).unwrap_or(0);
        let lo = pair[1].to_digit(16).unwrap_or(0);
        // Two hex digits always fit a byte.
        out[i] = (hi * 16 + lo) as u8;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
