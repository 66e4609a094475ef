//! The config file's schema: what serde reads from TOML, before any validation.
//!
//! This module owns the shape of `headway.toml` and nothing else; every value here is
//! as-written. [`crate::Config`]'s `TryFrom<ConfigFile>` turns it into validated runtime types,
//! and that conversion is the only place where values are checked against each other. Fields
//! that a later check may complain about are kept as [`toml::Spanned`] so the error can point at
//! their line and column.
//!
//! ## Sections
//!
//! | section | meaning |
//! |---|---|
//! | `[admin]` | the admin API listener ([`AdminSection`]) |
//! | `[[link]]` | one emulated WAN link between two interfaces ([`LinkSection`]); repeatable |
//! | `[wanopt]` | the WAN-optimizer appliance: tunnel endpoint, identity, dedup key, stores ([`WanoptSection`]) |
//! | `[wanopt.disk_store]` | the persistent chunk store of the `dedup-disk` class ([`DiskStoreSection`]) |
//! | `[[wanopt.peer]]` | a peer appliance at the other end of a WAN ([`PeerSection`]); repeatable |
//! | `[[wanopt.service]]` | an explicit service: listen address → target through a peer ([`ServiceSection`]); repeatable |
//! | `[wanopt.intercept]` | transparent (TPROXY) interception ([`InterceptSection`]) |
//! | `[[wanopt.intercept.rule]]` | which intercepted flows go to which peer and class ([`RuleSection`]); repeatable |
//! | `[runtime]` | data-plane worker threads, shutdown grace ([`RuntimeSection`]) |
//! | `[[monitor]]` | a health check of the ADC's servers ([`MonitorSection`]); repeatable |
//! | `[[server_group]]` | servers sharing a load, with method, limits, pool, persistence ([`ServerGroupSection`]); repeatable |
//! | `[[server_group.server]]` | one server ([`ServerSection`]) |
//! | `[server_group.tls]` | TLS to the group's servers, verified against a CA ([`GroupTlsSection`]) |
//! | `[[virtual_server]]` | an ADC listener, `http`, `https` or `tcp` ([`VirtualServerSection`]); repeatable |
//! | `[virtual_server.tls]` | TLS termination of an `https` virtual server ([`VsTlsSection`]) |
//! | `[virtual_server.compression]` | HTTP compression with CPU bypass ([`CompressionSection`]) |
//! | `[[virtual_server.rule]]` | a content-switching rule ([`AdcRuleSection`]) |
//! | `[virtual_server.redirect]` | a redirect the proxy answers itself, of a virtual server or a rule ([`RedirectSection`]) |
//! | `[virtual_server.respond]` | a fixed response the proxy answers itself ([`RespondSection`]) |
//! | `[[tcp_profile]]` | TCP settings for virtual servers and server groups ([`TcpProfileSection`]); repeatable |
//! | `[[certificate]]` | a certificate chain and key for TLS ([`CertificateSection`]); repeatable |
//! | `[cache]` | the ADC's integrated HTTP cache ([`CacheSection`]) |
//! | `[[cache.group]]` | a content group: memory, object size, expiry, cookies ([`ContentGroupSection`]) |
//! | `[[cache.policy]]` | which requests are cached in which group, first match wins ([`CachePolicySection`]) |
//!
//! Sections for the other roles (`[overlay]`, …) will be added here as those roles land. Until
//! then any other top-level key or section is an error, so a misspelt or not-yet-supported
//! section never goes unnoticed.
//!
//! ## Example
//!
//! `crates/headway-config/examples/headway.toml` is a complete, commented example.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use headway_core::{ByteSize, Rate};

use crate::config::{ConfigError, Location};
use crate::spec::LinkSpecInput;
use crate::suggest::did_you_mean;

mod adc;
mod cache;
pub use cache::{CachePolicySection, CacheSection, ContentGroupSection};
mod tcp;
pub use adc::{
    AuthSection, CertificateSection, CompressionSection, ErrorPageSection, GroupTlsSection,
    HeaderMatchSection, HeaderRulesSection, MonitorSection, PathRewriteSection, PersistenceSection,
    RateLimitSection, RedirectSection, RespondSection, RuleSection as AdcRuleSection,
    RuntimeSection, ServerGroupSection, ServerSection, VirtualServerSection, VsTlsSection,
};
pub use tcp::TcpProfileSection;

/// The whole config file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The admin API (`[admin]`). Default: listen on `127.0.0.1:9090` without a token.
    #[serde(default)]
    pub admin: AdminSection,
    /// Emulated WAN links (`[[link]]`), in file order. Default: none.
    #[serde(default)]
    pub link: Vec<LinkSection>,
    /// The WAN-optimizer appliance (`[wanopt]`). Default: none (the appliance does not run).
    pub wanopt: Option<Spanned<WanoptSection>>,
    /// Process-wide runtime settings (`[runtime]`). Default: one worker per CPU.
    pub runtime: Option<Spanned<RuntimeSection>>,
    /// Health monitors of the ADC (`[[monitor]]`). Default: none.
    #[serde(default)]
    pub monitor: Vec<MonitorSection>,
    /// The ADC's server groups (`[[server_group]]`). Default: none.
    #[serde(default)]
    pub server_group: Vec<ServerGroupSection>,
    /// The ADC's virtual servers (`[[virtual_server]]`). Default: none (no proxy runs).
    #[serde(default)]
    pub virtual_server: Vec<VirtualServerSection>,
    /// TCP profiles (`[[tcp_profile]]`) that virtual servers and server groups name. Default:
    /// none (the built-in presets need no section).
    #[serde(default)]
    pub tcp_profile: Vec<TcpProfileSection>,
    /// TLS certificates and keys of the ADC (`[[certificate]]`). Default: none.
    #[serde(default)]
    pub certificate: Vec<CertificateSection>,
    /// The ADC's integrated HTTP cache (`[cache]`). Default: none (nothing is cached).
    pub cache: Option<Spanned<CacheSection>>,
    /// Where the file came from, to turn spans into line and column.
    #[serde(skip)]
    pub(crate) origin: Origin,
}

impl ConfigFile {
    /// Parses TOML `text`; `path` names the file in error messages and is the directory that
    /// relative paths in the file (`token_file`) are resolved against.
    pub fn parse(text: &str, path: &str) -> Result<ConfigFile, ConfigError> {
        let origin = Origin {
            path: path.to_string(),
            text: Arc::from(text),
        };
        let mut file: ConfigFile = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            at: origin.locate(e.span()),
            message: with_suggestion(e.message()),
        })?;
        file.origin = origin;
        Ok(file)
    }

    /// The path given to [`ConfigFile::parse`] (`"<config>"` for a file built in code).
    pub fn path(&self) -> &str {
        &self.origin.path
    }
}

/// `[admin]`: where the admin REST API and Prometheus metrics listen.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    /// Socket address to listen on (`"127.0.0.1:9090"`, `"[::1]:9090"`). An address other than
    /// loopback requires `token` or `token_file`. Default: `"127.0.0.1:9090"`.
    pub listen: Option<Spanned<String>>,
    /// Bearer token every admin request except `/healthz` must present
    /// (`Authorization: Bearer <token>`). Default: none (no authentication).
    pub token: Option<Spanned<String>>,
    /// A file holding the token (surrounding whitespace is ignored), so the token need not be
    /// in the config file; relative to the config file's directory. Not together with `token`.
    /// Default: none.
    pub token_file: Option<Spanned<PathBuf>>,
}

/// `[[link]]`: one emulated WAN link that carries frames between interfaces `a` and `b`.
///
/// The parameters of each direction are `both` applied over the defaults, then that direction's
/// own spec applied over the result. Each spec is a string in the text form
/// (`"rate=1.5mbit delay=150ms"`) or a table of the same keys; see [`crate::spec`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSection {
    /// The link's name in the admin API and metrics: letters, digits, `-`, `_` and `.`, at
    /// most 64 characters, unique in the file. Required.
    pub name: Spanned<String>,
    /// First interface (frames read here leave on `b` through the `a_to_b` direction), in the
    /// network namespace the process runs in. At most 15 characters, no `/`, `:` or
    /// whitespace. Required.
    pub a: Spanned<String>,
    /// Second interface (frames read here leave on `a` through `b_to_a`). Same rules as `a`;
    /// must differ from it. Required.
    pub b: Spanned<String>,
    /// Seed of the link's random sequence (loss, jitter, duplication, reordering); the same
    /// seed gives the same sequence. Default: drawn at start-up and logged.
    pub seed: Option<u64>,
    /// Spec applied to both directions. Default: none (all defaults).
    pub both: Option<Spanned<LinkSpecInput>>,
    /// Spec for the a→b direction, applied over `both`. Default: none.
    pub a_to_b: Option<Spanned<LinkSpecInput>>,
    /// Spec for the b→a direction, applied over `both`. Default: none.
    pub b_to_a: Option<Spanned<LinkSpecInput>>,
    /// Run this link's frame-release threads at this real-time (SCHED_FIFO) priority, 1–99, so
    /// frames leave on time even when the machine is busy (needs root or CAP_SYS_NICE).
    /// Default: normal priority.
    pub realtime: Option<Spanned<u8>>,
}

/// `[wanopt]`: the WAN-optimizer appliance. Paths are relative to the config file's directory.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WanoptSection {
    /// UDP socket address of this appliance's QUIC tunnel endpoint (`"198.18.0.1:4433"`); peers
    /// connect here. Required.
    pub tunnel_listen: Spanned<String>,
    /// PEM file with this appliance's certificate (`headway wanopt identity` writes one).
    /// Required.
    pub cert_file: Spanned<PathBuf>,
    /// PEM file with the certificate's private key. Required.
    pub key_file: Spanned<PathBuf>,
    /// File holding the deployment's dedup key: 64 hex digits (surrounding whitespace
    /// ignored), the same on every appliance of the deployment (`headway wanopt dedup-key`
    /// writes one). Required.
    pub dedup_key_file: Spanned<PathBuf>,
    /// Capacity of the in-memory chunk store (`"256MiB"`). Default: `"256MiB"`.
    pub memory_store: Option<Spanned<ByteSize>>,
    /// After a failed connection to a peer, its new flows go direct (fail-open) without a new
    /// attempt for this long (`"10s"`). Default: `"10s"`.
    pub retry_after: Option<Spanned<DurationValue>>,
    /// Forward error correction on the tunnel, towards peers whose `link_rate` is at most
    /// 1 Gbit/s: short exchanges (a request or an answer of up to 8 datagrams) are followed by
    /// Reed-Solomon repair datagrams sized to the loss the peer measures, so a lost packet is
    /// restored at once instead of after the transport's probe timeout (more than a round
    /// trip). Where the bandwidth-delay product (`link_rate` × `rtt`) is at least 64 full
    /// packets (e.g. 6 Mbit/s at 130 ms or more, 44 Mbit/s at 20 ms or more), the last
    /// stretch of each transfer (1.5 bandwidth-delay products) goes in blocks of a quarter of
    /// the bandwidth-delay product (16 to 112 datagrams), each repaired the same way (earlier
    /// blocks, and pauses while more than that stretch is still unsent, are not); on slower
    /// paths the last 8 datagrams of each transfer are. Costs about 3–6 % of
    /// the link during the repaired stretch (more on lossier paths). The loss is measured from
    /// the moment the tunnel comes up: each side sends the other a train of 320 probes (7-byte
    /// datagrams, at most a tenth of `link_rate`), then one per 100 ms while the tunnel is
    /// idle; `headway ctl wanopt stats` shows the measured loss per peer. Every appliance of a
    /// deployment must set the same value. Default: `true`.
    pub fec: Option<bool>,
    /// The persistent chunk store (`[wanopt.disk_store]`); required when a service or rule
    /// uses class `dedup-disk`. Default: none.
    pub disk_store: Option<Spanned<DiskStoreSection>>,
    /// Peer appliances (`[[wanopt.peer]]`). Default: none.
    #[serde(default)]
    pub peer: Vec<PeerSection>,
    /// Explicit services (`[[wanopt.service]]`). Default: none.
    #[serde(default)]
    pub service: Vec<ServiceSection>,
    /// Transparent interception (`[wanopt.intercept]`). Default: none.
    pub intercept: Option<Spanned<InterceptSection>>,
}

/// `[wanopt.disk_store]`: the persistent chunk store (segment files in a ring).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskStoreSection {
    /// Directory of the segment files, created if missing. Required.
    pub dir: Spanned<PathBuf>,
    /// Bound on the segment files' total size (`"4GiB"`), at least `"1MiB"`; the oldest data
    /// is evicted first. Required.
    pub size: Spanned<ByteSize>,
}

/// `[[wanopt.peer]]`: a peer appliance, authenticated by its pinned certificate fingerprint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSection {
    /// Name in services, rules, the admin API and metrics: letters, digits, `-`, `_` and `.`,
    /// at most 64 characters, unique. Required.
    pub name: Spanned<String>,
    /// The peer's tunnel endpoint, a UDP socket address (its `tunnel_listen`). Required.
    pub address: Spanned<String>,
    /// SHA-256 of the peer's certificate (DER): 64 hex digits, `:` separators and a `sha256:`
    /// prefix allowed (`headway wanopt fingerprint --cert PEER.crt` prints it). Required.
    pub fingerprint: Spanned<String>,
    /// The WAN link's rate towards the peer (`"1.5mbit"`); the tunnel paces at it. It also
    /// sets how hard flows towards the peer are compressed (zstd level 15 up to 3 Mbit/s, 13
    /// up to 4.5 Mbit/s, 4 up to 45 Mbit/s, 3 up to 100 Mbit/s, 1 above: on slow links CPU is
    /// cheap beside the link time it saves — a DOC-like first pass puts 9 % fewer bytes on
    /// the WAN at level 4 than at 1, and 9 % fewer again at 15 —, on fast ones the encoder's
    /// speed is the limit). Required.
    pub link_rate: Spanned<Rate>,
    /// The expected round-trip time to the peer (`"300ms"`), for the first window; err on the
    /// long side. Default: `"100ms"`.
    pub rtt: Option<Spanned<DurationValue>>,
    /// The IP MTU of the WAN path to the peer, in bytes (576 to 9000). The tunnel sends
    /// datagrams of this size (less the IP and UDP headers) from its first packet and never
    /// probes above it; if the path carries less, QUIC's black-hole detection falls back to
    /// 1,200-byte datagrams and path MTU discovery searches upward from there. Default: 1500.
    pub mtu: Option<Spanned<u32>>,
}

/// `[[wanopt.service]]`: clients connect to `listen`; the flow crosses the tunnel to `peer`,
/// which connects on to `target`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSection {
    /// The service's id, carried in each flow's header: 0 to 4294967295, unique. Required.
    pub id: Spanned<u32>,
    /// TCP socket address this appliance accepts clients on. Required.
    pub listen: Spanned<String>,
    /// TCP socket address the peer connects to (and fail-open connects to directly). Required.
    pub target: Spanned<String>,
    /// The name of the `[[wanopt.peer]]` in front of the target. Required.
    pub peer: Spanned<String>,
    /// What the optimizer does with the flows. Required.
    pub class: Spanned<ServiceClass>,
}

/// `[wanopt.intercept]`: transparent interception of TCP flows routed through this host
/// (nftables TPROXY; needs root).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterceptSection {
    /// TCP socket address the TPROXY rules deliver intercepted flows to (`"0.0.0.0:7070"`).
    /// Required.
    pub listen: Spanned<String>,
    /// LAN interfaces whose incoming flows are intercepted (`["br-c"]`); at least one.
    /// Required.
    pub interfaces: Spanned<Vec<Spanned<String>>>,
    /// Which flows go to which peer and class, first match wins; at least one. Flows matching
    /// no rule are not intercepted.
    #[serde(default)]
    pub rule: Vec<RuleSection>,
}

/// `[[wanopt.intercept.rule]]`: flows to these destinations and ports go to `peer` in `class`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSection {
    /// Destination addresses or networks in CIDR form (`["198.18.2.0/24", "10.0.0.1"]`).
    /// Default: any destination.
    #[serde(default)]
    pub destinations: Vec<Spanned<String>>,
    /// Destination ports and ranges, as numbers or strings (`[80, "8000-9000"]`). Default: any
    /// port.
    #[serde(default)]
    pub ports: Vec<Spanned<PortsValue>>,
    /// The name of the `[[wanopt.peer]]` in front of these destinations. Required.
    pub peer: Spanned<String>,
    /// What the optimizer does with the flows. Required.
    pub class: Spanned<ServiceClass>,
}

/// A service class: what the WAN optimizer does with a flow's bytes (WANScaler's service
/// classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceClass {
    /// Carried through the tunnel untouched.
    PassThrough,
    /// Compressed only.
    Compress,
    /// Deduplicated against the memory store, then compressed.
    DedupMemory,
    /// Deduplicated against the disk store (`[wanopt.disk_store]`), then compressed.
    DedupDisk,
}

impl ServiceClass {
    /// The name written in the config file (`"dedup-disk"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceClass::PassThrough => "pass-through",
            ServiceClass::Compress => "compress",
            ServiceClass::DedupMemory => "dedup-memory",
            ServiceClass::DedupDisk => "dedup-disk",
        }
    }
}

/// A duration written as text (`"300ms"`, `"10s"`; see `headway_core::units::parse_duration`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationValue(pub std::time::Duration);

impl<'de> Deserialize<'de> for DurationValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        headway_core::units::parse_duration(&text)
            .map(DurationValue)
            .map_err(serde::de::Error::custom)
    }
}

/// A port or port range as written: `80` or `"80"` or `"8000-9000"`. Checked by the
/// conversion into `crate::wanopt::PortRange`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortsValue {
    /// An integer.
    Number(i64),
    /// A string: one port or `first-last`.
    Text(String),
}

impl<'de> Deserialize<'de> for PortsValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = PortsValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a port (80) or a port range (\"8000-9000\")")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<PortsValue, E> {
                Ok(PortsValue::Number(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<PortsValue, E> {
                Ok(PortsValue::Number(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PortsValue, E> {
                Ok(PortsValue::Text(v.to_owned()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// The source of a parsed file: its name for messages and its text for line/column.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub(crate) path: String,
    text: Arc<str>,
}

impl Default for Origin {
    fn default() -> Self {
        Origin {
            path: "<config>".into(),
            text: Arc::from(""),
        }
    }
}

impl Origin {
    /// Where `key = …` or `key=…` first appears inside `span`, if it does: lets a message about
    /// one key of a spec point at that key rather than at the start of the spec.
    pub(crate) fn find_key(&self, span: &std::ops::Range<usize>, key: &str) -> Option<usize> {
        // A table written as a `[header]` has the header as its span; its keys follow until
        // the next header.
        let mut span = span.clone();
        if self.text.get(span.clone())?.starts_with('[') {
            span.end = self.text[span.end..]
                .find("\n[")
                .map_or(self.text.len(), |i| span.end + i);
        }
        let within = self.text.get(span.clone())?;
        let mut from = 0;
        while let Some(i) = within[from..].find(key) {
            let start = from + i;
            let end = start + key.len();
            let before_ok = within[..start]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            let after_ok = within[end..]
                .trim_start_matches([' ', '\t'])
                .starts_with('=');
            if before_ok && after_ok {
                return Some(span.start + start);
            }
            from = end;
        }
        None
    }

    /// The location of byte offset `span.start`, or just the file if there is no span.
    pub(crate) fn locate(&self, span: Option<std::ops::Range<usize>>) -> Location {
        let Some(span) = span else {
            return Location {
                path: self.path.clone(),
                line: None,
                column: None,
            };
        };
        let start = span.start.min(self.text.len());
        // Spans are byte offsets; a column is counted in characters, both from 1.
        let start = (0..=start)
            .rev()
            .find(|i| self.text.is_char_boundary(*i))
            .unwrap_or(0);
        let before = &self.text[..start];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Location {
            path: self.path.clone(),
            line: Some(line),
            column: Some(column),
        }
    }
}

/// Adds "did you mean …?" to serde's `unknown field `x`, expected one of `a`, `b`` messages.
fn with_suggestion(message: &str) -> String {
    let message = message.trim_end();
    let Some(rest) = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))
    else {
        return message.to_string();
    };
    let Some((word, expected)) = rest.split_once('`') else {
        return message.to_string();
    };
    // The candidates are the backquoted words after the unknown one.
    let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match did_you_mean(word, &candidates) {
        Some(s) => format!("{message} — did you mean `{s}`?"),
        None => message.to_string(),
    }
}
