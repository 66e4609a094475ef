//! The validated ADC sections: `[runtime]`, `[[monitor]]`, `[[server_group]]`,
//! `[[virtual_server]]` and `[[certificate]]`.
//!
//! This module owns [`AdcConfig`] and its parts, [`RuntimeConfig`], and the one conversion
//! from the file's sections that checks them: names (unique, with did-you-mean for references),
//! socket addresses (listen addresses unique across the file), methods and monitor kinds,
//! ranges of every number, regular expressions (compiled here, so a bad one is reported with
//! its line), header names and values, and combinations that cannot work (cookie persistence
//! behind a `tcp` virtual server, HTTP options on a `tcp` one, an HTTP monitor field on a TCP
//! monitor, TLS settings on a virtual server that is not `https`). The TLS material —
//! certificate and CA files, and the `tls` subsections — is checked in [`crate::tls`], called
//! from here. The proxy (`headway-proxy`) takes these types as they are; it never validates.
//!
//! Entry point: `Config::try_from(ConfigFile)` calls [`adc`] and [`runtime`].

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use headway_lb::health::{AdminState, HttpExpect, StatusSet};
use headway_lb::persist::SameSite;
use headway_lb::select::Method;
use toml::Spanned;

use crate::config::{check_name, invalid, ConfigError};
use crate::file::{
    AdcRuleSection, CertificateSection, HeaderRulesSection, MonitorSection, Origin,
    PersistenceSection, RuntimeSection, ServerGroupSection, ServerSection, VirtualServerSection,
};
use crate::suggest::did_you_mean;
use crate::tls::{Certificate, GroupTls, VsTls};
use crate::wanopt::{resolve, socket, Cidr};

pub mod action;
pub mod address;
pub mod auth;
pub mod error_page;
pub mod header_value;
pub mod rate_limit;
pub mod share;

/// The largest server weight.
pub const MAX_WEIGHT: u32 = 1000;
pub use action::{Action, LocationPart, Redirect, RequestTarget, Respond};
pub use address::{DnsPrefer, ServerAddress};
pub use error_page::ErrorPage;
pub use header_value::{HeaderValueTemplate, ValuePart};
pub use share::Share;

/// Default time between two health checks of one server: 5 s.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// Default health-check timeout: 2 s (or the interval, if shorter).
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// Default shutdown grace: 30 s.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// Default idle connections pooled per server. As many as an HTTP/2 front end typically has
/// requests in flight: with 64, 640 concurrent streams reused only 78 % of server connections
/// and opened the rest anew (connect + close for one request in eight), which cost 22 % more
/// CPU per request. HAProxy's `http-reuse` keeps them without a count limit.
pub const DEFAULT_POOL_MAX_IDLE: u32 = 1024;

/// Process-wide runtime settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Data-plane worker threads; `None` = one per CPU.
    pub workers: Option<usize>,
    /// How long connections may take to finish at shutdown.
    pub shutdown_grace: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            workers: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// The ADC: virtual servers, the server groups they use, and the monitors of those groups.
/// Empty when the file has no `[[virtual_server]]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdcConfig {
    /// The monitors, in file order; names unique.
    pub monitors: Vec<Monitor>,
    /// The server groups, in file order; names unique, monitors known.
    pub groups: Vec<ServerGroup>,
    /// The virtual servers, in file order; names and listen addresses unique, groups known.
    pub virtual_servers: Vec<VirtualServer>,
    /// The file's TCP profiles (`[[tcp_profile]]`), in file order; names unique. Virtual servers
    /// and groups hold their own resolved copy (presets included).
    pub tcp_profiles: Vec<crate::tcp::TcpProfile>,
    /// The TLS certificates (`[[certificate]]`), in file order; names unique, files read.
    pub certificates: Vec<Certificate>,
    /// The integrated HTTP cache (`[cache]`); `None` = nothing is cached.
    pub cache: Option<crate::cache::CacheConfig>,
}

impl AdcConfig {
    /// Whether there is nothing to run.
    pub fn is_empty(&self) -> bool {
        self.virtual_servers.is_empty() && self.groups.is_empty()
    }

    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&ServerGroup> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The monitor named `name`.
    pub fn monitor(&self, name: &str) -> Option<&Monitor> {
        self.monitors.iter().find(|m| m.name == name)
    }

    /// The certificate named `name`.
    pub fn certificate(&self, name: &str) -> Option<&Certificate> {
        self.certificates.iter().find(|c| c.name == name)
    }
}

/// A health check.
#[derive(Debug, Clone, PartialEq)]
pub struct Monitor {
    /// Its name.
    pub name: String,
    /// What it checks.
    pub kind: MonitorKind,
    /// Time between two checks of one server (> 0).
    pub interval: Duration,
    /// Time one check may take (> 0, ≤ `interval`).
    pub timeout: Duration,
    /// Consecutive successes that bring a server up (1–100).
    pub rise: u32,
    /// Consecutive failures that take a server down (1–100).
    pub fall: u32,
    /// The port checked; `None` = each server's own.
    pub port: Option<u16>,
}

/// What a monitor checks.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum MonitorKind {
    /// A TCP connect succeeds (and the exchange, if any, goes as expected).
    Tcp(TcpCheck),
    /// An HTTP/1.1 request gets an expected answer.
    Http(HttpMonitor),
    /// The gRPC health checking protocol answers `SERVING` for this service (`""` = the
    /// server as a whole).
    Grpc {
        /// The service asked about.
        service: String,
    },
}

/// What a TCP monitor sends once connected and expects back; both empty = the connect alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpCheck {
    /// Sent once connected.
    pub send: Option<String>,
    /// The server's first bytes (up to [`TCP_EXPECT_WINDOW`]) must contain this.
    pub expect: Option<String>,
}

/// How many of a server's first bytes a TCP monitor's `expect` looks at.
pub const TCP_EXPECT_WINDOW: usize = 4096;

/// An HTTP health check's request and expectation.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpMonitor {
    /// The method (an HTTP token, upper case as written).
    pub method: String,
    /// The path (starts with `/`, visible ASCII).
    pub path: String,
    /// The `Host` header; `None` = the server's name or address, with the port checked.
    pub host: Option<String>,
    /// The statuses and body substring that count as healthy.
    pub expect: HttpExpect,
}

/// A server group.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerGroup {
    /// Its name.
    pub name: String,
    /// How a server is chosen.
    pub method: Method,
    /// What `header-hash` or `cookie-hash` hashes: the header's name (lower case) or the
    /// cookie's; `None` for the other methods.
    pub hash_by: Option<String>,
    /// The monitor's name (a configured [`Monitor::name`]); `None` = servers count as up.
    pub monitor: Option<String>,
    /// The servers (at least one; names unique in the group).
    pub servers: Vec<Server>,
    /// Most requests waiting when every server is at its limit; 0 = 503 at once.
    pub surge_queue: u32,
    /// Longest wait in the surge queue.
    pub queue_timeout: Duration,
    /// Further tries on other servers (0–10).
    pub retries: u32,
    /// Statuses whose answers to replayable requests are tried again on another server.
    pub retry_on: Vec<u16>,
    /// Time allowed to connect to a server.
    pub connect_timeout: Duration,
    /// Time allowed from request sent to response header.
    pub response_timeout: Duration,
    /// Idle keep-alive connections kept per server (0 = no reuse; default
    /// [`DEFAULT_POOL_MAX_IDLE`]).
    pub pool_max_idle: u32,
    /// How long an idle pooled connection is kept.
    pub pool_idle_timeout: Duration,
    /// Session persistence.
    pub persistence: Option<Persistence>,
    /// The TCP profile of the connections to the servers; `None` = TCP_NODELAY on, the rest
    /// Linux's defaults.
    pub tcp_profile: Option<crate::tcp::TcpProfile>,
    /// TLS to the servers; `None` = cleartext.
    pub tls: Option<GroupTls>,
    /// The PROXY protocol header written at the start of each server connection; `None` =
    /// none.
    pub send_proxy_protocol: Option<ProxyProtocol>,
    /// Passive health: failed requests in a row that take a server out, and for how long.
    pub passive: headway_lb::health::Passive,
    /// How long a server coming into rotation takes to reach its full weight; zero = off.
    pub slow_start: Duration,
    /// How often the DNS names of its servers are resolved again; zero = only when a config
    /// is applied.
    pub dns_refresh: Duration,
    /// Which family of a name's addresses is used when it has both.
    pub dns_prefer: DnsPrefer,
    /// The HTTP version spoken to the servers.
    pub protocol: UpstreamProtocol,
}

/// The HTTP version a server group's servers are spoken to in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamProtocol {
    /// HTTP/1.1: one request at a time on each pooled connection.
    #[default]
    Http1,
    /// HTTP/2: each request a stream of a connection per server and worker (more when the
    /// server's stream limit fills one); gRPC needs it.
    Http2,
}

/// A PROXY protocol version (HAProxy's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocol {
    /// Text: `PROXY TCP4 client server cport sport\r\n`.
    V1,
    /// Binary.
    V2,
}

/// Session persistence of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Persistence {
    /// An inserted cookie names the server (HTTP virtual servers only).
    Cookie(CookiePersistence),
    /// The client's masked address names the server.
    SourceIp(SourceIpPersistence),
}

/// Inserted-cookie persistence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookiePersistence {
    /// The cookie's name (an RFC 6265 token).
    pub name: String,
    /// Its `Path` (starts with `/`, no `;` or control characters).
    pub path: String,
    /// `Max-Age`; `None` = a session cookie.
    pub max_age: Option<Duration>,
    /// `Secure`.
    pub secure: bool,
    /// `HttpOnly`.
    pub http_only: bool,
    /// `SameSite`; `None` = not sent. `Some(SameSite::None)` only with `secure`.
    pub same_site: Option<SameSite>,
}

/// Source-IP persistence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceIpPersistence {
    /// IPv4 prefix length (1–32).
    pub mask_v4: u8,
    /// IPv6 prefix length (1–128).
    pub mask_v6: u8,
    /// How long an idle entry is kept (> 0).
    pub timeout: Duration,
    /// Most entries kept (> 0).
    pub capacity: usize,
}

/// One server of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Its name (unique in the group).
    pub name: String,
    /// Where it listens: an IP address, or a DNS name the proxy resolves.
    pub address: ServerAddress,
    /// Its weight (0–1000).
    pub weight: u32,
    /// Requests in flight at once; 0 = unlimited.
    pub max_connections: u32,
    /// Used only when every primary server is down.
    pub backup: bool,
    /// The administrative state at start.
    pub state: AdminState,
}

/// A virtual server.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualServer {
    /// Its name.
    pub name: String,
    /// Layer 4 or layer 7.
    pub kind: VirtualServerKind,
    /// Where it listens (unique across the file).
    pub listen: SocketAddr,
    /// What happens to requests no rule matches (for `tcp`, always a group).
    pub action: Action,
    /// Idle time after which a client connection is closed.
    pub client_idle_timeout: Duration,
    /// Time allowed for a whole request header (HTTP).
    pub request_header_timeout: Duration,
    /// Largest request header in bytes (HTTP; 1 KiB – 1 MiB).
    pub max_header_bytes: usize,
    /// Largest request body (HTTP); `None` = no limit.
    pub max_body_bytes: Option<u64>,
    /// Pages for the errors the proxy answers itself (HTTP).
    pub error_pages: Vec<ErrorPage>,
    /// Most request header fields (HTTP; 1–1000).
    pub max_headers: usize,
    /// Connections at once per client address; 0 = unlimited.
    pub max_connections_per_client: u32,
    /// Connections (tcp) or requests (http) per second per client address; 0 = unlimited.
    pub rate_per_client: u32,
    /// Every client connection starts with a PROXY protocol header naming the client.
    pub accept_proxy_protocol: bool,
    /// The balancers allowed to send such headers; empty = any address.
    pub proxy_protocol_from: Vec<crate::wanopt::Cidr>,
    /// The clients served; empty = every client not in `deny`.
    pub allow: Vec<crate::wanopt::Cidr>,
    /// The clients never served.
    pub deny: Vec<crate::wanopt::Cidr>,
    /// Accept HTTP/2 with prior knowledge.
    pub http2: bool,
    /// Pass protocol upgrades (WebSocket) through to servers (HTTP).
    pub upgrades: bool,
    /// Idle time after which an upgraded connection is closed (HTTP).
    pub tunnel_idle_timeout: Duration,
    /// Append to `X-Forwarded-For`.
    pub x_forwarded_for: bool,
    /// The header carrying each request's ID (lower case); `None` = no IDs.
    pub request_id: Option<String>,
    /// The group that gets copies of bodiless requests (shadow traffic); `None` = none.
    pub mirror: Option<String>,
    /// Set `X-Forwarded-Proto`.
    pub x_forwarded_proto: bool,
    /// Append an RFC 7239 `Forwarded` element.
    pub forwarded: bool,
    /// Rules for request headers.
    pub request_headers: HeaderRules,
    /// Rules for response headers.
    pub response_headers: HeaderRules,
    /// The access log, if any.
    pub access_log: Option<AccessLog>,
    /// Content-switching rules, first match wins (HTTP only).
    pub rules: Vec<Rule>,
    /// The TCP profile of the client connections; `None` = TCP_NODELAY on, the rest Linux's
    /// defaults.
    pub tcp_profile: Option<crate::tcp::TcpProfile>,
    /// The listen backlog asked for (1 – 1000000; the kernel caps it at `net.core.somaxconn`).
    pub backlog: u32,
    /// TLS termination: present exactly when `kind` is [`VirtualServerKind::Https`].
    pub tls: Option<VsTls>,
    /// HTTP compression of responses; `None` = off (always `None` for `tcp`).
    pub compression: Option<crate::compress::Compression>,
}

/// Layer 4 or layer 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VirtualServerKind {
    /// HTTP/1.1 and HTTP/2 (prior knowledge) to clients, HTTP/1.1 to servers.
    Http,
    /// HTTP/1.1 and HTTP/2 (by ALPN) over TLS terminated here, HTTP/1.1 to servers.
    Https,
    /// Bytes both ways.
    Tcp,
}

impl VirtualServerKind {
    /// The name written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            VirtualServerKind::Http => "http",
            VirtualServerKind::Https => "https",
            VirtualServerKind::Tcp => "tcp",
        }
    }
}

/// Header rules: remove, then set, then add.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderRules {
    /// Names to remove (lower case).
    pub remove: Vec<String>,
    /// Headers to set, replacing others of the same name (names lower case).
    pub set: Vec<(String, HeaderValueTemplate)>,
    /// Headers to add (names lower case).
    pub add: Vec<(String, HeaderValueTemplate)>,
    /// Values to rewrite: the first match of the pattern in each value of the (lower-case)
    /// name replaced.
    pub replace: Vec<HeaderReplace>,
}

/// One value rewrite of a header rule set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderReplace {
    /// The header's name, lower case.
    pub name: String,
    /// Matched against each value.
    pub from: Pattern,
    /// The replacement (`regex`'s syntax).
    pub to: String,
}

impl HeaderRules {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty()
            && self.set.is_empty()
            && self.add.is_empty()
            && self.replace.is_empty()
    }
}

/// Where and how requests are logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLog {
    /// The file; `None` = standard output.
    pub path: Option<PathBuf>,
    /// The line format.
    pub format: AccessLogFormat,
}

/// An access log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// The combined log format.
    Combined,
    /// One JSON object per line.
    Json,
}

/// A content-switching rule: what happens to requests matching every condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its name.
    pub name: String,
    /// A group (a configured [`ServerGroup::name`]), a redirect or a fixed response.
    pub action: Action,
    /// The conditions (at least one), all of which must hold.
    pub conditions: Vec<Condition>,
    /// How the path of the requests it sends to its group is rewritten; `None` = not.
    pub path_rewrite: Option<PathRewrite>,
    /// How fast its requests are taken; `None` = no limit.
    pub rate_limit: Option<rate_limit::RateLimit>,
    /// Basic authentication before its action; `None` = none.
    pub auth: Option<auth::BasicAuth>,
}

/// A rule's path rewrite: the path's match of `from` replaced by `to`.
#[derive(Debug, Clone, PartialEq)]
pub struct PathRewrite {
    /// Matched against the path.
    pub from: Pattern,
    /// The replacement (`regex`'s syntax: `$1`, `${name}`, `$$`).
    pub to: String,
}

impl PathRewrite {
    /// The rewritten `path`: `None` when `from` does not match it (the path stays). A result
    /// that is empty is `/`; one without a leading `/` gets one.
    pub fn apply(&self, path: &str) -> Option<String> {
        if !self.from.0.is_match(path) {
            return None;
        }
        let out = self.from.0.replace(path, self.to.as_str());
        Some(if out.starts_with('/') {
            out.into_owned()
        } else {
            format!("/{out}")
        })
    }
}

/// One condition of a rule.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Condition {
    /// The host (lower case, port removed) equals this.
    Host(String),
    /// The host ends with this suffix (lower case, starting with `.`), from `*.example.com`.
    HostSuffix(String),
    /// The path equals this.
    Path(String),
    /// The path starts with this.
    PathPrefix(String),
    /// The path contains this.
    PathContains(String),
    /// The path matches this expression.
    PathRegex(Pattern),
    /// The path's extension (lower case, no dot) is one of these.
    PathExtension(Vec<String>),
    /// The method is one of these.
    Method(Vec<String>),
    /// The client's address (the PROXY header's, when the virtual server takes them) is in one
    /// of these networks.
    Source(Vec<Cidr>),
    /// The client's address is in none of these networks.
    SourceNot(Vec<Cidr>),
    /// The client is in this share of all clients.
    Share(Share),
    /// A header (name lower case) is present and its value matches.
    Header {
        /// The header's name, lower case.
        name: String,
        /// What its value must be.
        value: ValueMatch,
    },
    /// A cookie is present and its value matches.
    Cookie {
        /// The cookie's name (case-sensitive).
        name: String,
        /// What its value must be.
        value: ValueMatch,
    },
    /// A query parameter is present and its (first) value matches.
    Query {
        /// The parameter's name, as received.
        name: String,
        /// What its value must be.
        value: ValueMatch,
    },
}

/// How a header's value is matched.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ValueMatch {
    /// Any value.
    Any,
    /// Exactly this value.
    Exact(String),
    /// A value matching this expression.
    Regex(Pattern),
}

/// A compiled regular expression; equal when written the same.
#[derive(Clone)]
pub struct Pattern(pub regex::Regex);

impl Eq for Pattern {}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}/", self.0.as_str())
    }
}

/// Validates `[runtime]`.
pub(crate) fn runtime(
    s: Option<&Spanned<RuntimeSection>>,
    origin: &Origin,
) -> Result<RuntimeConfig, ConfigError> {
    let Some(s) = s else {
        return Ok(RuntimeConfig::default());
    };
    let s = s.get_ref();
    let workers = match &s.workers {
        None => None,
        Some(w) => Some(ranged(w, 1, 256, "runtime workers", origin)? as usize),
    };
    Ok(RuntimeConfig {
        workers,
        shutdown_grace: dur(&s.shutdown_grace, DEFAULT_SHUTDOWN_GRACE),
    })
}

/// Validates the ADC sections (see the module doc for the checks).
pub(crate) fn adc(
    monitors: &[MonitorSection],
    groups: &[ServerGroupSection],
    virtual_servers: &[VirtualServerSection],
    certificates: &[CertificateSection],
    origin: &Origin,
) -> Result<AdcConfig, ConfigError> {
    let mut names = Names::default();
    let mut out = AdcConfig::default();
    for c in certificates {
        names.claim("certificate", &c.name, origin)?;
        out.certificates.push(crate::tls::certificate(c, origin)?);
    }
    for m in monitors {
        names.claim("monitor", &m.name, origin)?;
        out.monitors.push(monitor(m, origin)?);
    }
    let monitor_names: Vec<&str> = out.monitors.iter().map(|m| m.name.as_str()).collect();
    for g in groups {
        names.claim("server group", &g.name, origin)?;
        let group = group(g, &out.certificates, origin)?;
        if let Some(m) = &g.monitor {
            reference(m, &monitor_names, "monitor", "[[monitor]]", origin)?;
        }
        out.groups.push(group);
    }
    let group_names: Vec<String> = out.groups.iter().map(|g| g.name.clone()).collect();
    let group_names: Vec<&str> = group_names.iter().map(String::as_str).collect();
    let mut listens: HashMap<SocketAddr, (String, Option<usize>)> = HashMap::new();
    for v in virtual_servers {
        names.claim("virtual server", &v.name, origin)?;
        let vs = virtual_server(v, &group_names, &out.certificates, origin)?;
        let at = origin.locate(Some(v.listen.span()));
        if let Some((other, line)) = listens.get(&vs.listen) {
            return Err(invalid(
                at,
                format!(
                    "virtual server `{}`: listen address {} is already used by virtual server \
                     `{other}`{}: give each its own address or port",
                    vs.name,
                    vs.listen,
                    line.map(|l| format!(" (line {l})")).unwrap_or_default()
                ),
            ));
        }
        listens.insert(vs.listen, (vs.name.clone(), at.line));
        // Cookie persistence needs HTTP: a tcp virtual server has no cookies to read.
        if let (VirtualServerKind::Tcp, Some(group), Some(at)) =
            (vs.kind, vs.action.group(), v.group.as_ref())
        {
            let g = out.group(group).expect("checked by virtual_server");
            if matches!(g.persistence, Some(Persistence::Cookie(_))) {
                return Err(invalid(
                    origin.locate(Some(at.span())),
                    format!(
                        "virtual server `{}` is `tcp` but its group `{}` uses cookie \
                         persistence, which needs HTTP: use kind = \"http\", or \
                         persistence kind = \"source-ip\" in the group",
                        vs.name, g.name
                    ),
                ));
            }
        }
        out.virtual_servers.push(vs);
    }
    Ok(out)
}

/// Names already used, per kind of thing, with the line they were first used on.
#[derive(Default)]
struct Names {
    seen: HashMap<(&'static str, String), Option<usize>>,
}

impl Names {
    fn claim(
        &mut self,
        what: &'static str,
        name: &Spanned<String>,
        origin: &Origin,
    ) -> Result<(), ConfigError> {
        let at = origin.locate(Some(name.span()));
        check_name(name.get_ref(), what).map_err(|m| invalid(at.clone(), m))?;
        if let Some(first) = self.seen.insert((what, name.get_ref().clone()), at.line) {
            return Err(invalid(
                at,
                format!(
                    "{what} name `{}` is used twice{}: give each {what} its own name",
                    name.get_ref(),
                    first
                        .map(|l| format!(" (first on line {l})"))
                        .unwrap_or_default()
                ),
            ));
        }
        Ok(())
    }
}

/// Checks that `name` is one of `known`, with a did-you-mean.
pub(crate) fn reference(
    name: &Spanned<String>,
    known: &[&str],
    what: &str,
    section: &str,
    origin: &Origin,
) -> Result<String, ConfigError> {
    let n = name.get_ref();
    if known.contains(&n.as_str()) {
        return Ok(n.clone());
    }
    let hint = match did_you_mean(n, known) {
        Some(s) => format!("did you mean `{s}`?"),
        None if known.is_empty() => format!("there is no {section} in the file: add one"),
        None => format!(
            "the {what}s are {}",
            known
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Err(invalid(
        origin.locate(Some(name.span())),
        format!("unknown {what} `{n}`: {hint}"),
    ))
}

/// `value` within `lo..=hi`, or an error that names the range.
fn ranged(
    value: &Spanned<u32>,
    lo: u32,
    hi: u32,
    what: &str,
    origin: &Origin,
) -> Result<u32, ConfigError> {
    let v = *value.get_ref();
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(invalid(
            origin.locate(Some(value.span())),
            format!("{what} {v} is out of range: use {lo} to {hi}"),
        ))
    }
}

fn ranged_or(
    value: &Option<Spanned<u32>>,
    default: u32,
    lo: u32,
    hi: u32,
    what: &str,
    origin: &Origin,
) -> Result<u32, ConfigError> {
    value
        .as_ref()
        .map_or(Ok(default), |v| ranged(v, lo, hi, what, origin))
}

fn dur(value: &Option<Spanned<crate::file::DurationValue>>, default: Duration) -> Duration {
    value.as_ref().map_or(default, |v| v.get_ref().0)
}

/// A duration that must be larger than zero.
fn positive(
    value: &Option<Spanned<crate::file::DurationValue>>,
    default: Duration,
    what: &str,
    origin: &Origin,
) -> Result<Duration, ConfigError> {
    match value {
        Some(v) if v.get_ref().0.is_zero() => Err(invalid(
            origin.locate(Some(v.span())),
            format!("{what} must be longer than 0: give a duration such as \"5s\""),
        )),
        v => Ok(dur(v, default)),
    }
}

/// A value only allowed for some kind: an error pointing at it when given anyway.
fn not_for<T>(
    value: &Option<Spanned<T>>,
    message: impl FnOnce() -> String,
    origin: &Origin,
) -> Result<(), ConfigError> {
    match value {
        Some(v) => Err(invalid(origin.locate(Some(v.span())), message())),
        None => Ok(()),
    }
}

/// A request ID's header name: a token, not one the proxy or HTTP itself gives a meaning.
fn request_id_header(
    h: &Spanned<String>,
    vs: &str,
    origin: &Origin,
) -> Result<String, ConfigError> {
    let name = h.get_ref().to_ascii_lowercase();
    let reserved = [
        "host",
        "connection",
        "content-length",
        "transfer-encoding",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-connection",
        "x-forwarded-for",
        "x-forwarded-proto",
        "forwarded",
        "cookie",
        "set-cookie",
        "content-type",
    ];
    if !is_token(&name) || reserved.contains(&name.as_str()) {
        return Err(invalid(
            origin.locate(Some(h.span())),
            format!(
                "virtual server `{vs}`: request_id `{}` cannot carry request IDs: name a \
                 header of its own, such as \"X-Request-ID\"",
                h.get_ref()
            ),
        ));
    }
    Ok(name)
}

/// A list of HTTP statuses within `range`, each once, at least one; `what` names the field.
pub(crate) fn statuses(
    list: &Spanned<Vec<Spanned<u16>>>,
    range: std::ops::RangeInclusive<u16>,
    what: &str,
    origin: &Origin,
) -> Result<Vec<u16>, ConfigError> {
    if list.get_ref().is_empty() {
        return Err(invalid(
            origin.locate(Some(list.span())),
            format!("{what} needs statuses such as [502, 503, 504]"),
        ));
    }
    let mut out = Vec::with_capacity(list.get_ref().len());
    for st in list.get_ref() {
        let code = *st.get_ref();
        if !range.contains(&code) {
            return Err(invalid(
                origin.locate(Some(st.span())),
                format!(
                    "{what}: status {code} is out of range: use {}–{}",
                    range.start(),
                    range.end()
                ),
            ));
        }
        if out.contains(&code) {
            return Err(invalid(
                origin.locate(Some(st.span())),
                format!("{what}: status {code} is given twice"),
            ));
        }
        out.push(code);
    }
    Ok(out)
}

/// An RFC 9110 token (method and header names).
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A header value we accept from the config: visible ASCII and spaces, no leading/trailing
/// whitespace.
fn is_header_value(s: &str) -> bool {
    s.bytes()
        .all(|b| b == b' ' || b == b'\t' || (0x21..0x7f).contains(&b))
        && s.trim() == s
}

fn monitor(m: &MonitorSection, origin: &Origin) -> Result<Monitor, ConfigError> {
    let name = m.name.get_ref().clone();
    let interval = positive(&m.interval, DEFAULT_INTERVAL, "monitor interval", origin)?;
    let timeout = positive(
        &m.timeout,
        DEFAULT_CHECK_TIMEOUT.min(interval),
        "monitor timeout",
        origin,
    )?;
    if timeout > interval {
        let span = m.timeout.as_ref().map(Spanned::span);
        return Err(invalid(
            origin.locate(span),
            format!(
                "monitor `{name}`: timeout {} is longer than interval {}: a check must end \
                 before the next starts; shorten the timeout",
                headway_core::units::format_duration(timeout),
                headway_core::units::format_duration(interval)
            ),
        ));
    }
    let rise = ranged_or(&m.rise, 2, 1, 100, "monitor rise", origin)?;
    let fall = ranged_or(&m.fall, 3, 1, 100, "monitor fall", origin)?;
    // A field of the other kind: what to say about it.
    let only = |key: &str, fix: &'static str| {
        let key = key.to_string();
        let name = name.clone();
        move || format!("monitor `{name}`: `{key}` {fix}")
    };
    let grpc_not = |key: &str| {
        only(
            key,
            "is not for gRPC monitors, which ask grpc.health.v1.Health/Check for `service`",
        )
    };
    if m.kind.get_ref() != "grpc" {
        not_for(
            &m.service,
            only(
                "service",
                "is for gRPC monitors; remove it or use kind = \"grpc\"",
            ),
            origin,
        )?;
    }
    let kind = match m.kind.get_ref().as_str() {
        "grpc" => {
            for (key, set) in [
                ("method", m.method.as_ref().map(Spanned::span)),
                ("path", m.path.as_ref().map(Spanned::span)),
                ("host", m.host.as_ref().map(Spanned::span)),
                ("expect_status", m.expect_status.as_ref().map(Spanned::span)),
                ("expect_body", m.expect_body.as_ref().map(Spanned::span)),
                ("send", m.send.as_ref().map(Spanned::span)),
                ("expect", m.expect.as_ref().map(Spanned::span)),
            ] {
                if let Some(span) = set {
                    return Err(invalid(origin.locate(Some(span)), grpc_not(key)()));
                }
            }
            let service = match &m.service {
                None => String::new(),
                Some(s) if s.get_ref().len() <= 200 && is_visible(s.get_ref()) => {
                    s.get_ref().clone()
                }
                Some(s) => {
                    return Err(invalid(
                        origin.locate(Some(s.span())),
                        format!(
                            "monitor `{name}`: service `{}` must be up to 200 visible \
                             characters: write e.g. \"helloworld.Greeter\", or leave it out for \
                             the server as a whole",
                            s.get_ref()
                        ),
                    ))
                }
            };
            MonitorKind::Grpc { service }
        }
        "tcp" => {
            let http_only = |key: &str| {
                only(
                    key,
                    "is for HTTP monitors; remove it or use kind = \"http\"",
                )
            };
            not_for(&m.method, http_only("method"), origin)?;
            not_for(&m.path, http_only("path"), origin)?;
            not_for(&m.host, http_only("host"), origin)?;
            not_for(&m.expect_status, http_only("expect_status"), origin)?;
            not_for(&m.expect_body, http_only("expect_body"), origin)?;
            let text = |f: &Option<Spanned<String>>, key: &str| match f {
                Some(t) if t.get_ref().is_empty() || t.get_ref().len() > TCP_EXPECT_WINDOW => {
                    Err(invalid(
                        origin.locate(Some(t.span())),
                        format!(
                            "monitor `{name}`: `{key}` must be 1 to {TCP_EXPECT_WINDOW} bytes, \
                             or left out"
                        ),
                    ))
                }
                other => Ok(other.as_ref().map(|t| t.get_ref().clone())),
            };
            MonitorKind::Tcp(TcpCheck {
                send: text(&m.send, "send")?,
                expect: text(&m.expect, "expect")?,
            })
        }
        "http" => {
            let tcp_only = |key: &str| {
                only(
                    key,
                    "is for TCP monitors; an HTTP monitor checks with expect_status and \
                     expect_body",
                )
            };
            not_for(&m.send, tcp_only("send"), origin)?;
            not_for(&m.expect, tcp_only("expect"), origin)?;
            MonitorKind::Http(http_monitor(m, origin)?)
        }
        other => {
            let hint = did_you_mean(other, &["tcp", "http", "grpc"])
                .map(|s| format!(" — did you mean `{s}`?"))
                .unwrap_or_default();
            return Err(invalid(
                origin.locate(Some(m.kind.span())),
                format!("unknown monitor kind `{other}`: use \"tcp\", \"http\" or \"grpc\"{hint}"),
            ));
        }
    };
    let port = match &m.port {
        None => None,
        Some(p) => Some(ranged(p, 1, 65535, &format!("monitor `{name}`: port"), origin)? as u16),
    };
    Ok(Monitor {
        name,
        kind,
        interval,
        timeout,
        rise,
        fall,
        port,
    })
}

fn http_monitor(m: &MonitorSection, origin: &Origin) -> Result<HttpMonitor, ConfigError> {
    let at = |s: &Spanned<String>| origin.locate(Some(s.span()));
    let method = match &m.method {
        None => "GET".to_string(),
        Some(s) if is_token(s.get_ref()) => s.get_ref().clone(),
        Some(s) => {
            return Err(invalid(
                at(s),
                format!(
                    "`{}` is not an HTTP method: write e.g. \"GET\"",
                    s.get_ref()
                ),
            ))
        }
    };
    let path = match &m.path {
        None => "/".to_string(),
        Some(s) if s.get_ref().starts_with('/') && is_visible(s.get_ref()) => s.get_ref().clone(),
        Some(s) => {
            return Err(invalid(
                at(s),
                format!(
                    "monitor path `{}` must start with `/` and hold no spaces or control \
                     characters: write e.g. \"/healthz\"",
                    s.get_ref()
                ),
            ))
        }
    };
    let host = match &m.host {
        None => None,
        Some(s) if !s.get_ref().is_empty() && is_visible(s.get_ref()) => Some(s.get_ref().clone()),
        Some(s) => {
            return Err(invalid(
                at(s),
                format!(
                    "monitor host `{}` is not a host name: write e.g. \"www.example.com\"",
                    s.get_ref()
                ),
            ))
        }
    };
    let status = m.expect_status.as_ref().map_or("200-399", |s| s.get_ref());
    let status: StatusSet = status.parse().map_err(|e| {
        invalid(
            origin.locate(m.expect_status.as_ref().map(Spanned::span)),
            format!("expect_status: {e}"),
        )
    })?;
    let body_contains = match &m.expect_body {
        Some(b) if b.get_ref().is_empty() => {
            return Err(invalid(
                at(b),
                "expect_body is empty: give the text the body must contain, or remove it".into(),
            ));
        }
        b => b.as_ref().map(|b| b.get_ref().as_bytes().to_vec()),
    };
    let expect = HttpExpect {
        status,
        body_contains,
    };
    Ok(HttpMonitor {
        method,
        path,
        host,
        expect,
    })
}

/// Visible ASCII only (no spaces, no control characters).
fn is_visible(s: &str) -> bool {
    s.bytes().all(|b| (0x21..0x7f).contains(&b))
}

/// The header or cookie a `header-hash` or `cookie-hash` group hashes, checked against the
/// method.
fn hash_by(
    g: &ServerGroupSection,
    method: Method,
    group: &str,
    origin: &Origin,
) -> Result<Option<String>, ConfigError> {
    let at = g.method.as_ref().map(Spanned::span);
    for (field, key, own) in [
        (&g.hash_header, "hash_header", Method::HeaderHash),
        (&g.hash_cookie, "hash_cookie", Method::CookieHash),
    ] {
        if let Some(f) = field.as_ref().filter(|_| method != own) {
            return Err(invalid(
                origin.locate(Some(f.span())),
                format!(
                    "group `{group}`: {key} is only for method = \"{own}\": set that method, or \
                     remove it"
                ),
            ));
        }
    }
    let (given, example, what) = match method {
        Method::HeaderHash => (&g.hash_header, "hash_header = \"X-Tenant\"", "header"),
        Method::CookieHash => (&g.hash_cookie, "hash_cookie = \"JSESSIONID\"", "cookie"),
        _ => return Ok(None),
    };
    let Some(name) = given else {
        return Err(invalid(
            origin.locate(at),
            format!(
                "group `{group}`: method = \"{method}\" needs the {what} to hash: add `{example}`"
            ),
        ));
    };
    if !is_token(name.get_ref()) {
        return Err(invalid(
            origin.locate(Some(name.span())),
            format!(
                "group `{group}`: `{}` is not a {what} name (letters, digits and `-`, `_`, `.`: \
                 `{example}`)",
                name.get_ref()
            ),
        ));
    }
    Ok(Some(if method == Method::HeaderHash {
        name.get_ref().to_ascii_lowercase()
    } else {
        name.get_ref().clone()
    }))
}

fn group(
    g: &ServerGroupSection,
    certificates: &[Certificate],
    origin: &Origin,
) -> Result<ServerGroup, ConfigError> {
    let name = g.name.get_ref().clone();
    let method = match &g.method {
        None => Method::RoundRobin,
        Some(m) => m.get_ref().parse().map_err(|_| {
            let all = Method::ALL.map(Method::name);
            let hint = did_you_mean(m.get_ref(), &all)
                .map(|s| format!(" — did you mean `{s}`?"))
                .unwrap_or_default();
            invalid(
                origin.locate(Some(m.span())),
                format!(
                    "group `{name}`: unknown method `{}`: use one of {}{hint}",
                    m.get_ref(),
                    all.join(", ")
                ),
            )
        })?,
    };
    let hash_by = hash_by(g, method, &name, origin)?;
    if g.server.is_empty() {
        return Err(invalid(
            origin.locate(Some(g.name.span())),
            format!(
                "server group `{name}` has no servers: add at least one [[server_group.server]] \
                 with an `address`"
            ),
        ));
    }
    let default_max = ranged_or(
        &g.max_connections,
        0,
        0,
        1_000_000,
        "max_connections",
        origin,
    )?;
    let mut servers = Vec::with_capacity(g.server.len());
    let mut seen: HashMap<String, Option<usize>> = HashMap::new();
    for s in &g.server {
        let srv = server(s, default_max, &name, origin)?;
        let at = origin.locate(Some(s.name.as_ref().unwrap_or(&s.address).span()));
        if let Some(first) = seen.insert(srv.name.clone(), at.line) {
            return Err(invalid(
                at,
                format!(
                    "group `{name}`: server `{}` appears twice{}: give each server its own \
                     `name` (or address)",
                    srv.name,
                    first
                        .map(|l| format!(" (first on line {l})"))
                        .unwrap_or_default()
                ),
            ));
        }
        servers.push(srv);
    }
    let persistence = match &g.persistence {
        None => None,
        Some(p) => Some(persistence(p, &name, origin)?),
    };
    let tls = match &g.tls {
        None => None,
        Some(t) => Some(crate::tls::group_tls(t, &name, certificates, origin)?),
    };
    let send_proxy_protocol = match &g.send_proxy_protocol {
        None => None,
        Some(v) => match v.get_ref().as_str() {
            "v1" => Some(ProxyProtocol::V1),
            "v2" => Some(ProxyProtocol::V2),
            other => {
                return Err(invalid(
                    origin.locate(Some(v.span())),
                    format!(
                        "group `{name}`: unknown send_proxy_protocol `{other}`: use \"v1\" \
                         (text) or \"v2\" (binary), whichever the servers accept"
                    ),
                ))
            }
        },
    };
    let protocol = match &g.protocol {
        None => UpstreamProtocol::default(),
        Some(p) => match p.get_ref().as_str() {
            "http1" | "http/1.1" => UpstreamProtocol::Http1,
            "h2" | "http2" => UpstreamProtocol::Http2,
            other => {
                return Err(invalid(
                    origin.locate(Some(p.span())),
                    format!(
                        "group `{name}`: unknown protocol `{other}`: use \"http1\" (HTTP/1.1) \
                         or \"h2\" (HTTP/2, for gRPC and other servers that need it)"
                    ),
                ))
            }
        },
    };
    if let (UpstreamProtocol::Http2, Some(pp)) = (protocol, &g.send_proxy_protocol) {
        return Err(invalid(
            origin.locate(Some(pp.span())),
            format!(
                "group `{name}`: send_proxy_protocol cannot be used with protocol = \"h2\" \
                 (an HTTP/2 connection carries many clients' requests, a PROXY header names \
                 one): remove one of them"
            ),
        ));
    }
    let retry_on = match &g.retry_on {
        None => Vec::new(),
        Some(list) => statuses(
            list,
            400..=599,
            &format!("group `{name}`: retry_on"),
            origin,
        )?,
    };
    let dns_prefer = match &g.dns_prefer {
        None => DnsPrefer::default(),
        Some(p) => match p.get_ref().as_str() {
            "ipv4" => DnsPrefer::Ipv4,
            "ipv6" => DnsPrefer::Ipv6,
            other => {
                return Err(invalid(
                    origin.locate(Some(p.span())),
                    format!(
                        "group `{name}`: unknown dns_prefer `{other}`: use \"ipv4\" or \
                         \"ipv6\""
                    ),
                ))
            }
        },
    };
    Ok(ServerGroup {
        name,
        method,
        hash_by,
        monitor: g.monitor.as_ref().map(|m| m.get_ref().clone()),
        servers,
        surge_queue: ranged_or(&g.surge_queue, 1024, 0, 1_000_000, "surge_queue", origin)?,
        queue_timeout: positive(
            &g.queue_timeout,
            Duration::from_secs(5),
            "queue_timeout",
            origin,
        )?,
        retries: ranged_or(&g.retries, 2, 0, 10, "retries", origin)?,
        retry_on,
        connect_timeout: positive(
            &g.connect_timeout,
            Duration::from_secs(3),
            "connect_timeout",
            origin,
        )?,
        response_timeout: positive(
            &g.response_timeout,
            Duration::from_secs(60),
            "response_timeout",
            origin,
        )?,
        pool_max_idle: ranged_or(
            &g.pool_max_idle,
            DEFAULT_POOL_MAX_IDLE,
            0,
            100_000,
            "pool_max_idle",
            origin,
        )?,
        pool_idle_timeout: positive(
            &g.pool_idle_timeout,
            Duration::from_secs(60),
            "pool_idle_timeout",
            origin,
        )?,
        persistence,
        tcp_profile: None,
        tls,
        send_proxy_protocol,
        passive: headway_lb::health::Passive {
            max_fails: ranged_or(&g.max_fails, 3, 0, 1000, "max_fails", origin)?,
            fail_timeout: positive(
                &g.fail_timeout,
                Duration::from_secs(10),
                "fail_timeout",
                origin,
            )?,
        },
        slow_start: dur(&g.slow_start, Duration::ZERO),
        dns_refresh: dur(&g.dns_refresh, Duration::from_secs(30)),
        dns_prefer,
        protocol,
    })
}

fn server(
    s: &ServerSection,
    default_max: u32,
    group: &str,
    origin: &Origin,
) -> Result<Server, ConfigError> {
    let address = address::parse(s.address.get_ref()).map_err(|why| {
        invalid(
            origin.locate(Some(s.address.span())),
            format!(
                "group `{group}`: server address `{}` {why}; e.g. `10.0.0.5:8080`, \
                 `[2001:db8::5]:8080` or `app1.internal:8080`",
                s.address.get_ref()
            ),
        )
    })?;
    let name = match &s.name {
        None => address.to_string(),
        Some(n) => {
            let ok = |c: char| c.is_ascii_alphanumeric() || "-_.:[]".contains(c);
            if n.get_ref().is_empty() || n.get_ref().len() > 64 || !n.get_ref().chars().all(ok) {
                return Err(invalid(
                    origin.locate(Some(n.span())),
                    format!(
                        "`{}` is not a valid server name: use 1 to 64 letters, digits, `-`, `_`, \
                         `.`, `:`, `[` or `]`",
                        n.get_ref()
                    ),
                ));
            }
            n.get_ref().clone()
        }
    };
    let state = match &s.state {
        None => AdminState::Enabled,
        Some(st) => match st.get_ref().as_str() {
            "enabled" => AdminState::Enabled,
            "disabled" => AdminState::Disabled,
            "draining" => AdminState::Draining,
            other => {
                return Err(invalid(
                    origin.locate(Some(st.span())),
                    format!(
                        "group `{group}`, server `{name}`: unknown state `{other}`: use \
                         \"enabled\", \"disabled\" or \"draining\""
                    ),
                ))
            }
        },
    };
    Ok(Server {
        weight: ranged_or(&s.weight, 1, 0, MAX_WEIGHT, "weight", origin)?,
        max_connections: ranged_or(
            &s.max_connections,
            default_max,
            0,
            1_000_000,
            "max_connections",
            origin,
        )?,
        backup: s.backup.unwrap_or(false),
        state,
        name,
        address,
    })
}

fn persistence(
    p: &Spanned<PersistenceSection>,
    group: &str,
    origin: &Origin,
) -> Result<Persistence, ConfigError> {
    let s = p.get_ref();
    let at = |span| origin.locate(Some(span));
    match s.kind.get_ref().as_str() {
        "cookie" => {
            let only_ip = |key: &'static str| {
                move || {
                    format!(
                        "group `{group}`: `{key}` is for source-ip persistence; remove it with \
                         kind = \"cookie\""
                    )
                }
            };
            not_for(&s.mask, only_ip("mask"), origin)?;
            not_for(&s.mask_v6, only_ip("mask_v6"), origin)?;
            not_for(&s.capacity, only_ip("capacity"), origin)?;
            let name = match &s.cookie {
                None => "HWSRV".to_string(),
                Some(c) if is_token(c.get_ref()) => c.get_ref().clone(),
                Some(c) => {
                    return Err(invalid(
                        at(c.span()),
                        format!(
                            "`{}` is not a valid cookie name: use letters, digits and `-`, `_`, \
                             `.` (no spaces, `=`, `;` or quotes)",
                            c.get_ref()
                        ),
                    ))
                }
            };
            let path = match &s.path {
                None => "/".to_string(),
                Some(pth)
                    if pth.get_ref().starts_with('/')
                        && is_visible(pth.get_ref())
                        && !pth.get_ref().contains(';') =>
                {
                    pth.get_ref().clone()
                }
                Some(pth) => {
                    return Err(invalid(
                        at(pth.span()),
                        format!(
                            "cookie path `{}` must start with `/` and hold no spaces, `;` or \
                             control characters",
                            pth.get_ref()
                        ),
                    ))
                }
            };
            let max_age = s
                .timeout
                .as_ref()
                .map(|t| t.get_ref().0)
                .filter(|d| !d.is_zero());
            let secure = s.secure.unwrap_or(false);
            let same_site = match &s.same_site {
                None => None,
                Some(v) => Some(match v.get_ref().to_ascii_lowercase().as_str() {
                    "strict" => SameSite::Strict,
                    "lax" => SameSite::Lax,
                    "none" if secure => SameSite::None,
                    "none" => {
                        return Err(invalid(
                            at(v.span()),
                            "same_site = \"none\" needs secure = true (browsers drop such \
                             cookies otherwise)"
                                .into(),
                        ))
                    }
                    other => {
                        return Err(invalid(
                            at(v.span()),
                            format!(
                                "unknown same_site `{other}`: use \"strict\", \"lax\" or \"none\""
                            ),
                        ))
                    }
                }),
            };
            Ok(Persistence::Cookie(CookiePersistence {
                name,
                path,
                max_age,
                secure,
                http_only: s.http_only.unwrap_or(true),
                same_site,
            }))
        }
        "source-ip" => {
            let only_cookie = |key: &'static str| {
                move || {
                    format!(
                        "group `{group}`: `{key}` is for cookie persistence; remove it with \
                         kind = \"source-ip\""
                    )
                }
            };
            not_for(&s.cookie, only_cookie("cookie"), origin)?;
            not_for(&s.path, only_cookie("path"), origin)?;
            not_for(&s.same_site, only_cookie("same_site"), origin)?;
            if s.secure.is_some() || s.http_only.is_some() {
                return Err(invalid(
                    at(p.span()),
                    format!(
                        "group `{group}`: `secure` and `http_only` are for cookie persistence; \
                         remove them with kind = \"source-ip\""
                    ),
                ));
            }
            let mask = |v: &Option<Spanned<u8>>, default: u8, max: u8, what: &str| match v {
                None => Ok(default),
                Some(m) if (1..=max).contains(m.get_ref()) => Ok(*m.get_ref()),
                Some(m) => Err(invalid(
                    at(m.span()),
                    format!("{what} {} is out of range: use 1 to {max}", m.get_ref()),
                )),
            };
            Ok(Persistence::SourceIp(SourceIpPersistence {
                mask_v4: mask(&s.mask, 32, 32, "mask")?,
                mask_v6: mask(&s.mask_v6, 64, 128, "mask_v6")?,
                timeout: positive(
                    &s.timeout,
                    Duration::from_secs(120),
                    "persistence timeout",
                    origin,
                )?,
                capacity: ranged_or(&s.capacity, 1_000_000, 1, 100_000_000, "capacity", origin)?
                    as usize,
            }))
        }
        other => Err(invalid(
            at(s.kind.span()),
            format!(
                "group `{group}`: unknown persistence kind `{other}`: use \"cookie\" or \
                 \"source-ip\""
            ),
        )),
    }
}

fn virtual_server(
    v: &VirtualServerSection,
    groups: &[&str],
    certificates: &[Certificate],
    origin: &Origin,
) -> Result<VirtualServer, ConfigError> {
    let name = v.name.get_ref().clone();
    let at = |span| origin.locate(Some(span));
    let kind = match v.kind.get_ref().as_str() {
        "http" => VirtualServerKind::Http,
        "https" => VirtualServerKind::Https,
        "tcp" => VirtualServerKind::Tcp,
        other => {
            let hint = did_you_mean(other, &["http", "https", "tcp"])
                .map(|s| format!(" — did you mean `{s}`?"))
                .unwrap_or_default();
            return Err(invalid(
                at(v.kind.span()),
                format!(
                    "virtual server `{name}`: unknown kind `{other}`: use \"http\", \"https\" \
                     or \"tcp\"{hint}"
                ),
            ));
        }
    };
    let tls = match (&v.tls, kind) {
        (Some(t), VirtualServerKind::Https) => {
            Some(crate::tls::vs_tls(t, &name, certificates, origin)?)
        }
        (None, VirtualServerKind::Https) => {
            return Err(invalid(
                at(v.kind.span()),
                format!(
                    "virtual server `{name}` is `https` but has no [virtual_server.tls]: add one \
                     with `certificates = [\"…\"]` naming a [[certificate]]"
                ),
            ))
        }
        (Some(t), other) => {
            return Err(invalid(
                at(t.span()),
                format!(
                    "virtual server `{name}` is `{}`: [virtual_server.tls] is for TLS \
                     termination; use kind = \"https\", or remove the section",
                    other.as_str()
                ),
            ))
        }
        (None, _) => None,
    };
    let listen = socket(&v.listen, "listen", "TCP", origin)?;
    let action = action::action(
        &action::ActionFields {
            group: v.group.as_ref(),
            redirect: v.redirect.as_ref(),
            respond: v.respond.as_ref(),
            at: v.name.span(),
        },
        groups,
        &format!("virtual server `{name}`"),
        origin,
    )?;
    if kind == VirtualServerKind::Tcp {
        if let Some(span) = (v.redirect.as_ref().map(Spanned::span))
            .or_else(|| v.respond.as_ref().map(Spanned::span))
        {
            return Err(invalid(
                at(span),
                format!(
                    "virtual server `{name}` is `tcp`: it cannot answer with `redirect` or \
                     `respond`, which are HTTP; give it a `group`, or use kind = \"http\""
                ),
            ));
        }
        let http_only = |key: &'static str| {
            let name = name.clone();
            move || {
                format!(
                    "virtual server `{name}` is `tcp`: `{key}` is for HTTP virtual servers; \
                     remove it or use kind = \"http\""
                )
            }
        };
        not_for(
            &v.request_header_timeout,
            http_only("request_header_timeout"),
            origin,
        )?;
        not_for(&v.max_header_bytes, http_only("max_header_bytes"), origin)?;
        not_for(&v.max_body_bytes, http_only("max_body_bytes"), origin)?;
        not_for(&v.max_headers, http_only("max_headers"), origin)?;
        not_for(&v.request_headers, http_only("request_headers"), origin)?;
        not_for(&v.response_headers, http_only("response_headers"), origin)?;
        not_for(&v.compression, http_only("compression"), origin)?;
        not_for(&v.request_id, http_only("request_id"), origin)?;
        not_for(&v.mirror, http_only("mirror"), origin)?;
        not_for(
            &v.tunnel_idle_timeout,
            http_only("tunnel_idle_timeout"),
            origin,
        )?;
        if v.http2.is_some()
            || v.upgrades.is_some()
            || v.x_forwarded_for.is_some()
            || v.x_forwarded_proto.is_some()
            || v.forwarded.is_some()
        {
            return Err(invalid(
                at(v.kind.span()),
                format!(
                    "virtual server `{name}` is `tcp`: `http2`, `upgrades`, \
                     `x_forwarded_for`, `x_forwarded_proto` and `forwarded` are for HTTP \
                     virtual servers; remove them or use kind = \"http\""
                ),
            ));
        }
        if let Some(r) = v.rule.first() {
            return Err(invalid(
                at(rule_span(r)),
                format!(
                    "virtual server `{name}` is `tcp`: content-switching rules need HTTP; \
                     remove them or use kind = \"http\""
                ),
            ));
        }
        if let Some(e) = v.error_page.first() {
            return Err(invalid(
                at(e.status.span()),
                format!(
                    "virtual server `{name}` is `tcp`: error pages are HTTP answers; remove \
                     them or use kind = \"http\""
                ),
            ));
        }
    }
    let max_header_bytes = match &v.max_header_bytes {
        None => 32 * 1024,
        Some(b) if (1024..=1 << 20).contains(&b.get_ref().bytes()) => b.get_ref().bytes() as usize,
        Some(b) => {
            return Err(invalid(
                at(b.span()),
                format!(
                    "max_header_bytes {} is out of range: use 1KiB to 1MiB",
                    b.get_ref()
                ),
            ))
        }
    };
    let access_log = match &v.access_log {
        None => {
            not_for(
                &v.access_log_format,
                || {
                    "access_log_format without access_log: add `access_log = \"-\"` (standard output) or a file path".into()
                },
                origin,
            )?;
            None
        }
        Some(p) => Some(AccessLog {
            path: (p.get_ref().as_os_str() != "-").then(|| resolve(p.get_ref(), origin)),
            format: match v.access_log_format.as_ref().map(|f| f.get_ref().as_str()) {
                None | Some("combined") => AccessLogFormat::Combined,
                Some("json") => AccessLogFormat::Json,
                Some(other) => {
                    return Err(invalid(
                        origin.locate(v.access_log_format.as_ref().map(Spanned::span)),
                        format!(
                            "unknown access_log_format `{other}`: use \"combined\" or \"json\""
                        ),
                    ))
                }
            },
        }),
    };
    let mut rules = Vec::with_capacity(v.rule.len());
    for (i, r) in v.rule.iter().enumerate() {
        rules.push(rule(r, i, groups, origin)?);
    }
    Ok(VirtualServer {
        kind,
        listen,
        action,
        client_idle_timeout: positive(
            &v.client_idle_timeout,
            Duration::from_secs(180),
            "client_idle_timeout",
            origin,
        )?,
        request_header_timeout: positive(
            &v.request_header_timeout,
            Duration::from_secs(10),
            "request_header_timeout",
            origin,
        )?,
        max_header_bytes,
        error_pages: error_page::error_pages(&v.error_page, &name, origin)?,
        max_body_bytes: match &v.max_body_bytes {
            None => None,
            Some(b) if b.get_ref().bytes() > 0 => Some(b.get_ref().bytes()),
            Some(b) => {
                return Err(invalid(
                    origin.locate(Some(b.span())),
                    "max_body_bytes must be larger than 0: give a size such as \"10MiB\", or \
                     leave it out for no limit"
                        .into(),
                ))
            }
        },
        max_headers: ranged_or(&v.max_headers, 100, 1, 1000, "max_headers", origin)? as usize,
        max_connections_per_client: ranged_or(
            &v.max_connections_per_client,
            0,
            0,
            1_000_000,
            "max_connections_per_client",
            origin,
        )?,
        rate_per_client: ranged_or(
            &v.rate_per_client,
            0,
            0,
            10_000_000,
            "rate_per_client",
            origin,
        )?,
        accept_proxy_protocol: v.accept_proxy_protocol.unwrap_or(false),
        proxy_protocol_from: match &v.proxy_protocol_from {
            None => Vec::new(),
            Some(list) if v.accept_proxy_protocol != Some(true) => {
                return Err(invalid(
                    origin.locate(Some(list.span())),
                    "proxy_protocol_from names the balancers whose PROXY headers are taken: \
                     add `accept_proxy_protocol = true`, or remove it"
                        .into(),
                ))
            }
            Some(list) => cidrs(list, "proxy_protocol_from", origin)?,
        },
        allow: v
            .allow
            .as_ref()
            .map_or(Ok(Vec::new()), |l| cidrs(l, "allow", origin))?,
        deny: v
            .deny
            .as_ref()
            .map_or(Ok(Vec::new()), |l| cidrs(l, "deny", origin))?,
        http2: v.http2.unwrap_or(true),
        upgrades: v.upgrades.unwrap_or(true),
        tunnel_idle_timeout: positive(
            &v.tunnel_idle_timeout,
            Duration::from_secs(3600),
            "tunnel_idle_timeout",
            origin,
        )?,
        x_forwarded_for: v.x_forwarded_for.unwrap_or(true),
        mirror: v
            .mirror
            .as_ref()
            .map(|g| reference(g, groups, "server group", "[[server_group]]", origin))
            .transpose()?,
        request_id: match &v.request_id {
            None => None,
            Some(h) => Some(request_id_header(h, &name, origin)?),
        },
        x_forwarded_proto: v.x_forwarded_proto.unwrap_or(true),
        forwarded: v.forwarded.unwrap_or(false),
        request_headers: header_rules(v.request_headers.as_ref(), v.request_id.is_some(), origin)?,
        response_headers: header_rules(
            v.response_headers.as_ref(),
            v.request_id.is_some(),
            origin,
        )?,
        access_log,
        rules,
        tcp_profile: None,
        backlog: crate::tcp::DEFAULT_BACKLOG,
        tls,
        compression: crate::compress::compression(v.compression.as_ref(), &name, origin)?,
        name,
    })
}

fn header_rules(
    s: Option<&Spanned<HeaderRulesSection>>,
    request_id: bool,
    origin: &Origin,
) -> Result<HeaderRules, ConfigError> {
    let Some(s) = s else {
        return Ok(HeaderRules::default());
    };
    let span = s.span();
    let s = s.get_ref();
    let bad_name = |n: &str, span: std::ops::Range<usize>| {
        invalid(
            origin.locate(Some(span)),
            format!("`{n}` is not a header name: use letters, digits and `-` (e.g. \"X-Env\")"),
        )
    };
    let mut out = HeaderRules::default();
    for r in &s.remove {
        if !is_token(r.get_ref()) {
            return Err(bad_name(r.get_ref(), r.span()));
        }
        out.remove.push(r.get_ref().to_ascii_lowercase());
    }
    for (map, into) in [(&s.set, &mut out.set), (&s.add, &mut out.add)] {
        for (n, value) in map {
            if !is_token(n) {
                // The key has no span of its own; point at its value.
                return Err(bad_name(n, value.span()));
            }
            if !is_header_value(value.get_ref()) {
                return Err(invalid(
                    origin.locate(Some(value.span())),
                    format!(
                        "the value of header `{n}` must be visible ASCII without leading or \
                         trailing spaces"
                    ),
                ));
            }
            let template = HeaderValueTemplate::parse(value.get_ref()).map_err(|why| {
                invalid(
                    origin.locate(Some(value.span())),
                    format!("the value of header `{n}`: {why}"),
                )
            })?;
            if template.uses(&ValuePart::RequestId) && !request_id {
                return Err(invalid(
                    origin.locate(Some(value.span())),
                    format!(
                        "the value of header `{n}` uses {{request_id}}, and the virtual server \
                         makes none: add `request_id = \"X-Request-ID\"`"
                    ),
                ));
            }
            into.push((n.to_ascii_lowercase(), template));
        }
    }
    for r in &s.replace {
        let r = r.get_ref();
        if !is_token(r.name.get_ref()) {
            return Err(bad_name(r.name.get_ref(), r.name.span()));
        }
        let from = pattern(&r.from, "replace", origin)?;
        if !is_header_value(r.to.get_ref()) {
            return Err(invalid(
                origin.locate(Some(r.to.span())),
                "replace `to` must be visible ASCII without leading or trailing spaces".into(),
            ));
        }
        out.replace.push(HeaderReplace {
            name: r.name.get_ref().to_ascii_lowercase(),
            from,
            to: r.to.get_ref().clone(),
        });
    }
    // Hop-by-hop and framing headers are the proxy's to manage, never a rule's.
    for n in out
        .set
        .iter()
        .chain(&out.add)
        .map(|(n, _)| n.as_str())
        .chain(out.remove.iter().map(String::as_str))
        .chain(out.replace.iter().map(|r| r.name.as_str()))
    {
        if matches!(
            n,
            "connection"
                | "keep-alive"
                | "transfer-encoding"
                | "content-length"
                | "te"
                | "trailer"
                | "upgrade"
                | "proxy-connection"
                | "host"
        ) {
            return Err(invalid(
                origin.locate(Some(span)),
                format!(
                    "header `{n}` is managed by the proxy (framing and connection handling) and \
                     cannot be changed by a rule"
                ),
            ));
        }
    }
    Ok(out)
}

fn rule(
    r: &AdcRuleSection,
    index: usize,
    groups: &[&str],
    origin: &Origin,
) -> Result<Rule, ConfigError> {
    let name = match &r.name {
        None => format!("rule-{}", index + 1),
        Some(n) => {
            check_name(n.get_ref(), "rule")
                .map_err(|m| invalid(origin.locate(Some(n.span())), m))?;
            n.get_ref().clone()
        }
    };
    let action = action::action(
        &action::ActionFields {
            group: r.group.as_ref(),
            redirect: r.redirect.as_ref(),
            respond: r.respond.as_ref(),
            at: rule_span(r),
        },
        groups,
        &format!("rule `{name}`"),
        origin,
    )?;
    let conditions = conditions(
        &ConditionFields {
            host: &r.host,
            path: &r.path,
            path_prefix: &r.path_prefix,
            path_contains: &r.path_contains,
            path_regex: &r.path_regex,
            path_extension: &r.path_extension,
            method: &r.method,
            header: &r.header,
            cookie: &r.cookie,
            query: &r.query,
            source: &r.source,
            source_not: &r.source_not,
        },
        &format!("rule `{name}`"),
        origin,
    )?;
    let mut conditions = conditions;
    if let Some(sh) = &r.share {
        let bp = share::parse_share(sh.get_ref()).map_err(|m| {
            invalid(
                origin.locate(Some(sh.span())),
                format!("rule `{name}`: {m}"),
            )
        })?;
        conditions.push(Condition::Share(Share::new(bp, &name)));
    }
    if conditions.is_empty() {
        return Err(invalid(
            origin.locate(Some(rule_span(r))),
            format!(
                "rule `{name}` has no condition and would match every request: add one (host, \
                 path, path_prefix, path_contains, path_regex, path_extension, method, header, \
                 cookie, query, source, source_not, share), \
                 or set the virtual server's `group` instead"
            ),
        ));
    }
    let path_rewrite = match &r.path_rewrite {
        None => None,
        Some(pr) => {
            if action.group().is_none() {
                return Err(invalid(
                    origin.locate(Some(pr.span())),
                    format!(
                        "rule `{name}`: path_rewrite changes what is sent to a group, and this \
                         rule answers itself: remove it, or send the rule to a group"
                    ),
                ));
            }
            let pr = pr.get_ref();
            let from = regex::Regex::new(pr.from.get_ref()).map_err(|e| {
                invalid(
                    origin.locate(Some(pr.from.span())),
                    format!(
                        "rule `{name}`: path_rewrite `from` is not a valid regular expression: {e}"
                    ),
                )
            })?;
            let to = pr.to.get_ref();
            if (!is_visible(to) && !to.is_empty()) || to.contains(['?', '#']) {
                return Err(invalid(
                    origin.locate(Some(pr.to.span())),
                    format!(
                        "rule `{name}`: path_rewrite `to` must be visible ASCII without spaces, \
                         `?` or `#` (percent-encode them; the query is kept as it came)"
                    ),
                ));
            }
            Some(PathRewrite {
                from: Pattern(from),
                to: to.clone(),
            })
        }
    };
    let rate_limit = r
        .rate_limit
        .as_ref()
        .map(|rl| rate_limit::rate_limit(rl, &name, origin))
        .transpose()?;
    let auth = r
        .auth
        .as_ref()
        .map(|a| auth::basic_auth(a, &name, origin))
        .transpose()?;
    Ok(Rule {
        name,
        action,
        conditions,
        path_rewrite,
        rate_limit,
        auth,
    })
}

/// Where to point at a rule as a whole: its name, or the first of its actions.
fn rule_span(r: &AdcRuleSection) -> std::ops::Range<usize> {
    r.name
        .as_ref()
        .map(Spanned::span)
        .or_else(|| r.group.as_ref().map(Spanned::span))
        .or_else(|| r.redirect.as_ref().map(Spanned::span))
        .or_else(|| r.respond.as_ref().map(Spanned::span))
        .or_else(|| {
            [
                &r.host,
                &r.path,
                &r.path_prefix,
                &r.path_contains,
                &r.path_regex,
            ]
            .into_iter()
            .flatten()
            .map(Spanned::span)
            .next()
        })
        .or_else(|| r.path_extension.as_ref().map(Spanned::span))
        .or_else(|| r.method.as_ref().map(Spanned::span))
        .or_else(|| r.header.as_ref().map(Spanned::span))
        .or_else(|| r.source.as_ref().map(Spanned::span))
        .or_else(|| r.source_not.as_ref().map(Spanned::span))
        .or_else(|| r.share.as_ref().map(Spanned::span))
        .unwrap_or(0..0)
}

/// The request conditions a content-switching rule or a cache policy may write.
pub(crate) struct ConditionFields<'a> {
    pub host: &'a Option<Spanned<String>>,
    pub path: &'a Option<Spanned<String>>,
    pub path_prefix: &'a Option<Spanned<String>>,
    pub path_contains: &'a Option<Spanned<String>>,
    pub path_regex: &'a Option<Spanned<String>>,
    pub path_extension: &'a Option<Spanned<Vec<String>>>,
    pub method: &'a Option<Spanned<Vec<String>>>,
    pub header: &'a Option<Spanned<crate::file::HeaderMatchSection>>,
    pub cookie: &'a Option<Spanned<crate::file::HeaderMatchSection>>,
    pub query: &'a Option<Spanned<crate::file::HeaderMatchSection>>,
    pub source: &'a Option<Spanned<Vec<Spanned<String>>>>,
    pub source_not: &'a Option<Spanned<Vec<Spanned<String>>>>,
}

/// A header, cookie or query parameter condition (`kind` names which in messages): its name
/// (checked by `valid`) and how its value is matched.
fn named_value(
    m: &Spanned<crate::file::HeaderMatchSection>,
    kind: &str,
    valid: impl Fn(&str) -> bool,
    what: &str,
    origin: &Origin,
) -> Result<(String, ValueMatch), ConfigError> {
    let hs = m.get_ref();
    if !valid(hs.name.get_ref()) {
        return Err(invalid(
            origin.locate(Some(hs.name.span())),
            format!("{what}: `{}` is not a {kind} name", hs.name.get_ref()),
        ));
    }
    let value = match (&hs.value, &hs.regex) {
        (Some(_), Some(x)) => {
            return Err(invalid(
                origin.locate(Some(x.span())),
                format!("{what}: give either `value` or `regex` for the {kind}, not both"),
            ))
        }
        (Some(v), None) => ValueMatch::Exact(v.get_ref().clone()),
        (None, Some(x)) => ValueMatch::Regex(pattern(x, what, origin)?),
        (None, None) => ValueMatch::Any,
    };
    Ok((hs.name.get_ref().clone(), value))
}

/// A regular expression of a condition of `what`.
fn pattern(s: &Spanned<String>, what: &str, origin: &Origin) -> Result<Pattern, ConfigError> {
    regex::Regex::new(s.get_ref()).map(Pattern).map_err(|e| {
        invalid(
            origin.locate(Some(s.span())),
            format!("{what}: not a valid regular expression: {e}"),
        )
    })
}

/// A list of networks (`["10.0.0.0/8", "192.0.2.10"]`), at least one; `field` names it in
/// messages.
fn cidrs(
    list: &Spanned<Vec<Spanned<String>>>,
    field: &str,
    origin: &Origin,
) -> Result<Vec<Cidr>, ConfigError> {
    if list.get_ref().is_empty() {
        return Err(invalid(
            origin.locate(Some(list.span())),
            format!("{field} needs at least one network, e.g. [\"10.0.0.0/8\"]"),
        ));
    }
    list.get_ref()
        .iter()
        .map(|c| {
            c.get_ref()
                .parse::<Cidr>()
                .map_err(|m| invalid(origin.locate(Some(c.span())), format!("{field}: {m}")))
        })
        .collect()
}

impl VirtualServer {
    /// Whether its `allow` and `deny` lists let `client` in.
    pub fn admits(&self, client: std::net::IpAddr) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|c| c.contains(client)))
            && !self.deny.iter().any(|c| c.contains(client))
    }
}

/// Checks and compiles the conditions in `f`; `what` names the rule or policy in messages
/// (`rule `api``). No condition gives an empty list.
pub(crate) fn conditions(
    f: &ConditionFields<'_>,
    what: &str,
    origin: &Origin,
) -> Result<Vec<Condition>, ConfigError> {
    let regex = |s: &Spanned<String>| pattern(s, what, origin);
    let path_like = |s: &Spanned<String>, field: &str| {
        if s.get_ref().is_empty() || !is_visible(s.get_ref()) {
            Err(invalid(
                origin.locate(Some(s.span())),
                format!("{what}: {field} must be non-empty visible ASCII (no spaces)"),
            ))
        } else {
            Ok(s.get_ref().clone())
        }
    };
    let mut conditions = Vec::new();
    if let Some(h) = f.host {
        let host = h.get_ref().to_ascii_lowercase();
        conditions.push(match host.strip_prefix('*') {
            Some(suffix) if suffix.starts_with('.') && suffix.len() > 1 => {
                Condition::HostSuffix(suffix.to_string())
            }
            _ if !host.is_empty() && is_visible(&host) && !host.contains('*') => {
                Condition::Host(host)
            }
            _ => {
                return Err(invalid(
                    origin.locate(Some(h.span())),
                    format!(
                        "{what}: host `{}` is not a host name or `*.domain` pattern",
                        h.get_ref()
                    ),
                ))
            }
        });
    }
    if let Some(p) = f.path {
        conditions.push(Condition::Path(path_like(p, "path")?));
    }
    if let Some(p) = f.path_prefix {
        conditions.push(Condition::PathPrefix(path_like(p, "path_prefix")?));
    }
    if let Some(p) = f.path_contains {
        conditions.push(Condition::PathContains(path_like(p, "path_contains")?));
    }
    if let Some(p) = f.path_regex {
        conditions.push(Condition::PathRegex(regex(p)?));
    }
    if let Some(e) = f.path_extension {
        let exts: Vec<String> = e
            .get_ref()
            .iter()
            .map(|x| x.trim_start_matches('.').to_ascii_lowercase())
            .collect();
        if exts.is_empty()
            || exts
                .iter()
                .any(|x| x.is_empty() || !is_visible(x) || x.contains('/'))
        {
            return Err(invalid(
                origin.locate(Some(e.span())),
                format!("{what}: path_extension needs extensions such as [\"jpg\", \"gif\"]"),
            ));
        }
        conditions.push(Condition::PathExtension(exts));
    }
    if let Some(m) = f.method {
        if m.get_ref().is_empty() || !m.get_ref().iter().all(|x| is_token(x)) {
            return Err(invalid(
                origin.locate(Some(m.span())),
                format!("{what}: method needs HTTP methods such as [\"GET\", \"HEAD\"]"),
            ));
        }
        conditions.push(Condition::Method(m.get_ref().clone()));
    }
    if let Some(h) = f.header {
        let (name, value) = named_value(h, "header", is_token, what, origin)?;
        conditions.push(Condition::Header {
            name: name.to_ascii_lowercase(),
            value,
        });
    }
    if let Some(c) = f.cookie {
        let (name, value) = named_value(c, "cookie", is_token, what, origin)?;
        conditions.push(Condition::Cookie { name, value });
    }
    if let Some(q) = f.query {
        let parameter = |n: &str| !n.is_empty() && is_visible(n) && !n.contains(['&', '=', '#']);
        let (name, value) = named_value(q, "query parameter", parameter, what, origin)?;
        conditions.push(Condition::Query { name, value });
    }
    if let Some(l) = f.source {
        conditions.push(Condition::Source(cidrs(
            l,
            &format!("{what}: source"),
            origin,
        )?));
    }
    if let Some(l) = f.source_not {
        conditions.push(Condition::SourceNot(cidrs(
            l,
            &format!("{what}: source_not"),
            origin,
        )?));
    }
    Ok(conditions)
}

#[cfg(test)]
mod tests;
