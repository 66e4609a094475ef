//! TCP profiles: the validated `[[tcp_profile]]` sections and the built-in presets.
//!
//! This module owns [`TcpProfile`] — what one profile asks of Linux, split by where Linux keeps
//! each setting ([`SocketOptions`] set on every connection, [`RouteOptions`] that exist only on
//! routes, [`HostSettings`] that are per network namespace) — the table of [`PRESETS`] made from
//! seed 003's NetScaler profiles (`data/aol_tcp_profiles.csv`), and the one conversion from the
//! file's sections. It is pure: nothing here reads the host or opens a socket. Whether the host
//! has a congestion control, and whether the kernel takes an option, is checked by the proxy
//! when it starts (`headway_proxy::tcp_profile`); the lab applies route options and host
//! settings in its namespaces.
//!
//! Entry points: [`preset`] (a preset by name), [`RouteOptions::ip_route_args`] (the `ip route`
//! words), and `crate::adc::adc`, which calls `profiles` and resolves the names virtual servers
//! and groups use.
//!
//! How seed 003's knobs become Linux settings (docs/tcp-profiles.md has the whole table):
//! `nagle` → TCP_NODELAY; `delayedAck` → TCP_DELACK_MAX_US; `minRTO` → TCP_RTO_MIN_US up to
//! 200 ms, the route's `rto_min` above; `initialCwnd` → the route's `initcwnd`; `WS` and `SACK`
//! → the namespace's sysctls. `WSVal`, `maxBurst`, `slowStartIncr`, `pktPerRetx`, `oooQSize`,
//! `maxPktPerMss`, `ackOnPush` and `bufferSize` have no Linux equivalent that the presets set.

use std::time::Duration;

use headway_core::units::format_duration;
use toml::Spanned;

use crate::config::{check_name, invalid, ConfigError};
use crate::file::{DurationValue, Origin, TcpProfileSection};
use crate::suggest::did_you_mean;

/// The listen backlog of a virtual server that sets none: Linux's default `net.core.somaxconn`.
pub const DEFAULT_BACKLOG: u32 = 4096;

/// The largest minimum RTO Linux takes as a socket option (TCP_RTO_MIN_US); larger ones are
/// per route.
pub const SOCKET_MAX_MIN_RTO: Duration = Duration::from_millis(200);

/// A validated TCP profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpProfile {
    /// Its name (a file section's or a preset's).
    pub name: String,
    /// Options set on every socket the profile applies to.
    pub socket: SocketOptions,
    /// Options Linux has only per route.
    pub route: RouteOptions,
    /// Settings Linux has only per network namespace.
    pub host: HostSettings,
}

/// Per-socket options. `None` leaves the kernel's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// Nagle's algorithm on (TCP_NODELAY off).
    pub nagle: bool,
    /// SO_SNDBUF, bytes (4 KiB – 1 GiB).
    pub send_buffer: Option<u32>,
    /// SO_RCVBUF, bytes (4 KiB – 1 GiB).
    pub receive_buffer: Option<u32>,
    /// TCP_CONGESTION: an algorithm name (lower-case letters, digits, `_`; ≤ 15 bytes).
    pub congestion: Option<String>,
    /// TCP_QUICKACK on each new connection.
    pub quickack: bool,
    /// TCP_DELACK_MAX_US (2 ms – 200 ms).
    pub delayed_ack: Option<Duration>,
    /// TCP_RTO_MIN_US (2 ms – 200 ms); larger minimums are in [`RouteOptions::rto_min`].
    pub min_rto: Option<Duration>,
    /// SO_KEEPALIVE with TCP_KEEPIDLE / TCP_KEEPINTVL / TCP_KEEPCNT.
    pub keepalive: Option<Keepalive>,
    /// TCP_MAXSEG (88 – 32767).
    pub mss: Option<u32>,
    /// TCP_USER_TIMEOUT (1 ms – 1 h).
    pub user_timeout: Option<Duration>,
    /// TCP_NOTSENT_LOWAT, bytes (≥ 1).
    pub notsent_lowat: Option<u32>,
    /// TCP_WINDOW_CLAMP, bytes (1 KiB – 1 GiB).
    pub window_clamp: Option<u32>,
}

/// Keepalive timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe (1 s – 32767 s).
    pub idle: Duration,
    /// Time between probes (1 s – 32767 s).
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped (1 – 127).
    pub count: u32,
}

/// Options Linux keeps per route (`ip route … initcwnd 10 initrwnd 10 rto_min 400ms`). Headway
/// does not own the host's routes: it logs the words to add; the lab adds them to the route
/// between its hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteOptions {
    /// `initcwnd`, segments (1 – 1000).
    pub initcwnd: Option<u32>,
    /// `initrwnd`, segments (1 – 1000).
    pub initrwnd: Option<u32>,
    /// `rto_min` (only above [`SOCKET_MAX_MIN_RTO`]; smaller ones are a socket option).
    pub rto_min: Option<Duration>,
}

impl RouteOptions {
    /// Whether there is nothing to set.
    pub fn is_empty(&self) -> bool {
        *self == RouteOptions::default()
    }

    /// The words `ip route replace|change PREFIX …` takes for these options, in a fixed order:
    /// `["initcwnd", "4", "initrwnd", "10", "rto_min", "500ms"]`.
    pub fn ip_route_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(n) = self.initcwnd {
            out.extend(["initcwnd".to_string(), n.to_string()]);
        }
        if let Some(n) = self.initrwnd {
            out.extend(["initrwnd".to_string(), n.to_string()]);
        }
        if let Some(d) = self.rto_min {
            // iproute2 reads `ms` and `s`; the value is kept in milliseconds.
            out.extend(["rto_min".to_string(), format!("{}ms", d.as_millis())]);
        }
        out
    }
}

/// Settings Linux keeps per network namespace (sysctls).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostSettings {
    /// `net.ipv4.tcp_window_scaling` wanted; `None` = not checked.
    pub window_scaling: Option<bool>,
    /// `net.ipv4.tcp_sack` wanted; `None` = not checked.
    pub sack: Option<bool>,
}

impl HostSettings {
    /// `(sysctl, wanted value)` pairs, e.g. `("net.ipv4.tcp_sack", "0")`.
    pub fn sysctls(&self) -> Vec<(&'static str, &'static str)> {
        let v = |b: bool| if b { "1" } else { "0" };
        let mut out = Vec::new();
        if let Some(b) = self.window_scaling {
            out.push(("net.ipv4.tcp_window_scaling", v(b)));
        }
        if let Some(b) = self.sack {
            out.push(("net.ipv4.tcp_sack", v(b)));
        }
        out
    }
}

/// One built-in preset: a row of seed 003's table and the profile made from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The name `tcp_profile` takes.
    pub name: &'static str,
    /// The seed's profile (the `profile` column of `aol_tcp_profiles.csv`).
    pub seed_profile: &'static str,
    /// The clients it was made for (the seed's assumptions).
    pub meant_for: &'static str,
    /// NetScaler `-nagle`.
    pub nagle: bool,
    /// NetScaler `-WS` and `-SACK` (on or off together in every row of the seed).
    pub ws_sack: bool,
    /// NetScaler `-initialCwnd`, segments.
    pub initial_cwnd: u32,
    /// NetScaler `-delayedAck`, ms.
    pub delayed_ack_ms: u64,
    /// NetScaler `-minRTO`, ms.
    pub min_rto_ms: u64,
}

/// The presets, one per row of `aol_tcp_profiles.csv`. Only the knobs with a Linux mechanism
/// are carried; the rest (WSVal, maxBurst, slowStartIncr, pktPerRetx, oooQSize, maxPktPerMss,
/// ackOnPush, bufferSize) are discussed in docs/tcp-profiles.md.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "netscaler-default",
        seed_profile: "netscaler_default",
        meant_for: "NetScaler's v9.2 default (settings of circa 1999): the seed's baseline",
        nagle: false,
        ws_sack: false,
        initial_cwnd: 4,
        delayed_ack_ms: 100,
        min_rto_ms: 100,
    },
    Preset {
        name: "aol-vip-std",
        seed_profile: "aol_vip_std",
        meant_for: "broadband clients: 10 Mbit/s per flow, 75 ms RTT, content mostly outbound",
        nagle: false,
        ws_sack: true,
        initial_cwnd: 10,
        delayed_ack_ms: 100,
        min_rto_ms: 400,
    },
    Preset {
        name: "aol-dialup",
        seed_profile: "aol_vip_dialup_client",
        meant_for: "dial-up clients: 50 kbit/s per flow, 500 ms RTT",
        nagle: true,
        ws_sack: true,
        initial_cwnd: 4,
        delayed_ack_ms: 50,
        min_rto_ms: 500,
    },
    Preset {
        name: "aol-mobile",
        seed_profile: "aol_vip_mobile_client",
        meant_for: "mobile clients: under 3 Mbit/s, RTT shifting between 300 and 900 ms",
        nagle: true,
        ws_sack: true,
        initial_cwnd: 6,
        delayed_ack_ms: 50,
        min_rto_ms: 1000,
    },
    Preset {
        name: "aol-server-to-vserver",
        seed_profile: "aol_vip_server_to_vserver",
        meant_for: "data-centre clients: 600 Mbit/s per flow inbound, RTT up to 20 ms",
        nagle: true,
        ws_sack: true,
        initial_cwnd: 10,
        delayed_ack_ms: 100,
        min_rto_ms: 100,
    },
    Preset {
        name: "aol-svc-std",
        seed_profile: "aol_svc_std",
        meant_for: "servers (service side): 650 Mbit/s per flow, 10 ms RTT, long-lived HTTP/1.1",
        nagle: false,
        ws_sack: true,
        initial_cwnd: 10,
        delayed_ack_ms: 100,
        min_rto_ms: 100,
    },
];

impl Preset {
    /// The profile this preset stands for.
    pub fn profile(&self) -> TcpProfile {
        let min_rto = Duration::from_millis(self.min_rto_ms);
        let (socket_rto, route_rto) = split_min_rto(min_rto);
        TcpProfile {
            name: self.name.to_string(),
            socket: SocketOptions {
                nagle: self.nagle,
                delayed_ack: Some(Duration::from_millis(self.delayed_ack_ms)),
                min_rto: socket_rto,
                ..SocketOptions::default()
            },
            route: RouteOptions {
                initcwnd: Some(self.initial_cwnd),
                initrwnd: None,
                rto_min: route_rto,
            },
            // Linux has both on by default; only a preset that turns them off asks for a check.
            host: if self.ws_sack {
                HostSettings::default()
            } else {
                HostSettings {
                    window_scaling: Some(false),
                    sack: Some(false),
                }
            },
        }
    }
}

/// The preset called `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The names of every preset.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.name).collect()
}

/// A minimum RTO as Linux takes it: a socket option up to [`SOCKET_MAX_MIN_RTO`], the route's
/// `rto_min` above.
fn split_min_rto(d: Duration) -> (Option<Duration>, Option<Duration>) {
    if d <= SOCKET_MAX_MIN_RTO {
        (Some(d), None)
    } else {
        (None, Some(d))
    }
}

/// Validates the `[[tcp_profile]]` sections (names unique and not a preset's, presets known,
/// every value in range).
pub(crate) fn profiles(
    sections: &[TcpProfileSection],
    origin: &Origin,
) -> Result<Vec<TcpProfile>, ConfigError> {
    let mut out: Vec<TcpProfile> = Vec::with_capacity(sections.len());
    let mut lines: Vec<Option<usize>> = Vec::new();
    for s in sections {
        let p = profile(s, origin)?;
        let at = origin.locate(Some(s.name.span()));
        if let Some(i) = out.iter().position(|o| o.name == p.name) {
            return Err(invalid(
                at,
                format!(
                    "tcp profile name `{}` is used twice{}: give each profile its own name",
                    p.name,
                    lines[i]
                        .map(|l| format!(" (first on line {l})"))
                        .unwrap_or_default()
                ),
            ));
        }
        lines.push(at.line);
        out.push(p);
    }
    Ok(out)
}

/// Validates `[[tcp_profile]]` and gives each virtual server and group the profile it names
/// and each virtual server its backlog. `adc` was built from `groups` and `virtual_servers` by
/// `crate::adc::adc`, in the same order.
pub(crate) fn attach(
    adc: &mut crate::AdcConfig,
    sections: &[TcpProfileSection],
    groups: &[crate::file::ServerGroupSection],
    virtual_servers: &[crate::file::VirtualServerSection],
    origin: &Origin,
) -> Result<(), ConfigError> {
    adc.tcp_profiles = profiles(sections, origin)?;
    for (g, s) in adc.groups.iter_mut().zip(groups) {
        if let Some(name) = &s.tcp_profile {
            g.tcp_profile = Some(resolve(name, &adc.tcp_profiles, origin)?);
        }
    }
    for (v, s) in adc.virtual_servers.iter_mut().zip(virtual_servers) {
        if let Some(name) = &s.tcp_profile {
            v.tcp_profile = Some(resolve(name, &adc.tcp_profiles, origin)?);
        }
        if let Some(b) = &s.backlog {
            let n = *b.get_ref();
            if !(1..=1_000_000).contains(&n) {
                return Err(invalid(
                    origin.locate(Some(b.span())),
                    format!(
                        "virtual server `{}`: backlog {n} is out of range: use 1 to 1000000",
                        v.name
                    ),
                ));
            }
            v.backlog = n;
        }
    }
    Ok(())
}

/// Resolves a `tcp_profile = "…"` reference against the file's profiles and the presets.
pub(crate) fn resolve(
    name: &Spanned<String>,
    profiles: &[TcpProfile],
    origin: &Origin,
) -> Result<TcpProfile, ConfigError> {
    let n = name.get_ref();
    if let Some(p) = profiles.iter().find(|p| &p.name == n) {
        return Ok(p.clone());
    }
    if let Some(p) = preset(n) {
        return Ok(p.profile());
    }
    let mut known: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
    known.extend(preset_names());
    let hint = match did_you_mean(n, &known) {
        Some(s) => format!("did you mean `{s}`?"),
        None => format!(
            "define it in a [[tcp_profile]] section or use a preset ({})",
            preset_names()
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Err(invalid(
        origin.locate(Some(name.span())),
        format!("unknown tcp profile `{n}`: {hint}"),
    ))
}

fn profile(s: &TcpProfileSection, origin: &Origin) -> Result<TcpProfile, ConfigError> {
    let at = |span: std::ops::Range<usize>| origin.locate(Some(span));
    let name = s.name.get_ref().clone();
    check_name(&name, "tcp profile").map_err(|m| invalid(at(s.name.span()), m))?;
    if preset(&name).is_some() {
        return Err(invalid(
            at(s.name.span()),
            format!(
                "`{name}` is the name of a built-in preset: use it directly (tcp_profile = \
                 \"{name}\"), or give this profile another name and start from the preset \
                 with preset = \"{name}\""
            ),
        ));
    }
    let mut p = match &s.preset {
        None => TcpProfile {
            name: name.clone(),
            socket: SocketOptions::default(),
            route: RouteOptions::default(),
            host: HostSettings::default(),
        },
        Some(b) => match preset(b.get_ref()) {
            Some(pr) => pr.profile(),
            None => {
                let hint = did_you_mean(b.get_ref(), &preset_names())
                    .map(|x| format!("did you mean `{x}`?"))
                    .unwrap_or_else(|| format!("the presets are {}", preset_names().join(", ")));
                return Err(invalid(
                    at(b.span()),
                    format!(
                        "tcp profile `{name}`: unknown preset `{}`: {hint}",
                        b.get_ref()
                    ),
                ));
            }
        },
    };
    p.name = name.clone();
    let so = &mut p.socket;
    if let Some(v) = s.nagle {
        so.nagle = v;
    }
    if let Some(v) = s.quickack {
        so.quickack = v;
    }
    let bytes = |v: &Option<Spanned<headway_core::ByteSize>>, lo: u64, hi: u64, key: &str| match v {
        None => Ok(None),
        Some(b) if (lo..=hi).contains(&b.get_ref().bytes()) => Ok(Some(b.get_ref().bytes() as u32)),
        Some(b) => Err(invalid(
            at(b.span()),
            format!(
                "tcp profile `{name}`: {key} {} is out of range: use {} to {}",
                b.get_ref(),
                headway_core::ByteSize::new(lo),
                headway_core::ByteSize::new(hi)
            ),
        )),
    };
    const GIB: u64 = 1 << 30;
    if s.send_buffer.is_some() {
        so.send_buffer = bytes(&s.send_buffer, 4096, GIB, "send_buffer")?;
    }
    if s.receive_buffer.is_some() {
        so.receive_buffer = bytes(&s.receive_buffer, 4096, GIB, "receive_buffer")?;
    }
    if s.notsent_lowat.is_some() {
        so.notsent_lowat = bytes(&s.notsent_lowat, 1, GIB, "notsent_lowat")?;
    }
    if s.window_clamp.is_some() {
        so.window_clamp = bytes(&s.window_clamp, 1024, GIB, "window_clamp")?;
    }
    if let Some(c) = &s.congestion {
        let n = c.get_ref();
        let ok = !n.is_empty()
            && n.len() <= 15
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(invalid(
                at(c.span()),
                format!(
                    "tcp profile `{name}`: `{n}` is not a congestion control name: write one \
                     of /proc/sys/net/ipv4/tcp_available_congestion_control, e.g. \"cubic\", \
                     \"bbr\" or \"reno\""
                ),
            ));
        }
        so.congestion = Some(n.clone());
    }
    let duration = |v: &Spanned<DurationValue>, lo: Duration, hi: Duration, key: &str| {
        let d = v.get_ref().0;
        if (lo..=hi).contains(&d) {
            Ok(d)
        } else {
            Err(invalid(
                at(v.span()),
                format!(
                    "tcp profile `{name}`: {key} {} is out of range: use {} to {}",
                    format_duration(d),
                    format_duration(lo),
                    format_duration(hi)
                ),
            ))
        }
    };
    let ms = Duration::from_millis;
    let secs = Duration::from_secs;
    if let Some(v) = &s.delayed_ack {
        so.delayed_ack = Some(duration(v, ms(2), ms(200), "delayed_ack")?);
    }
    if let Some(v) = &s.min_rto {
        let d = duration(v, ms(2), secs(60), "min_rto")?;
        let (socket, route) = split_min_rto(d);
        so.min_rto = socket;
        p.route.rto_min = route;
    }
    if let Some(v) = &s.user_timeout {
        so.user_timeout = Some(duration(v, ms(1), secs(3600), "user_timeout")?);
    }
    let ranged = |v: &Spanned<u32>, lo: u32, hi: u32, key: &str| {
        let n = *v.get_ref();
        if (lo..=hi).contains(&n) {
            Ok(n)
        } else {
            Err(invalid(
                at(v.span()),
                format!("tcp profile `{name}`: {key} {n} is out of range: use {lo} to {hi}"),
            ))
        }
    };
    if let Some(v) = &s.mss {
        so.mss = Some(ranged(v, 88, 32767, "mss")?);
    }
    match &s.keepalive_idle {
        Some(idle) => {
            let idle = duration(idle, secs(1), secs(32767), "keepalive_idle")?;
            let interval = match &s.keepalive_interval {
                Some(v) => duration(v, secs(1), secs(32767), "keepalive_interval")?,
                None => secs(75),
            };
            let count = match &s.keepalive_count {
                Some(v) => ranged(v, 1, 127, "keepalive_count")?,
                None => 9,
            };
            so.keepalive = Some(Keepalive {
                idle,
                interval,
                count,
            });
        }
        None => {
            let stray = s
                .keepalive_interval
                .as_ref()
                .map(Spanned::span)
                .or_else(|| s.keepalive_count.as_ref().map(Spanned::span));
            if let Some(span) = stray {
                return Err(invalid(
                    at(span),
                    format!(
                        "tcp profile `{name}`: keepalive_interval and keepalive_count need \
                         keepalive_idle, which turns keepalives on: add e.g. keepalive_idle = \
                         \"60s\""
                    ),
                ));
            }
        }
    }
    if let Some(v) = &s.initial_cwnd {
        p.route.initcwnd = Some(ranged(v, 1, 1000, "initial_cwnd")?);
    }
    if let Some(v) = &s.initial_rwnd {
        p.route.initrwnd = Some(ranged(v, 1, 1000, "initial_rwnd")?);
    }
    if let Some(v) = s.window_scaling {
        p.host.window_scaling = Some(v);
    }
    if let Some(v) = s.sack {
        p.host.sack = Some(v);
    }
    Ok(p)
}

#[cfg(test)]
mod tests;
