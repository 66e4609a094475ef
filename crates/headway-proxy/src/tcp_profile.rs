//! TCP profiles on live sockets: the options of a [`TcpProfile`] set on listeners, accepted
//! client connections and connections to servers, and the start-up check that the host can
//! honour them.
//!
//! # What it owns
//!
//! - [`apply_listener`] (in `runtime::bind`), [`apply_client`] (each accepted connection, in
//!   `runtime::accept_loop`), [`connect`] and [`apply_server`] (connections to servers): set
//!   the profile's [`SocketOptions`]. Without a profile only TCP_NODELAY is set, as Headway
//!   always did. A refused option is logged at debug level and the connection goes on: the
//!   start-up check has already said which options this host refuses.
//! - [`check`]: run when a config is applied. It sets every profile in use on a probe socket,
//!   reads the host's TCP sysctls ([`HostTcp`]) and turns what it sees into a [`Report`]
//!   (warnings, and the `ip route` words of the options Linux keeps per route) or a
//!   [`CheckError`] (a congestion control the host does not have, or may not give us).
//!
//! It does not touch routes or sysctls: Headway does not own the host's (the lab sets them in
//! its namespaces), so route options and host settings are reported, not applied.
//!
//! # When options take effect
//!
//! The receive buffer (and with it the window scale in the SYN), the MSS and the window clamp
//! are negotiated in the handshake. For client connections they therefore come from the
//! listening socket (accepted sockets inherit its options), and for server connections
//! [`connect`] sets them before the SYN. Everything else also applies on a live socket, so
//! [`apply_client`] sets the whole profile again on every accepted connection: after a reload
//! that changed a virtual server's profile, new connections get the new one at once (the
//! handshake options at the next restart, as the listener is kept).

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;

use headway_config::adc::AdcConfig;
use headway_config::tcp::{HostSettings, SocketOptions, TcpProfile};
use socket2::{SockRef, TcpKeepalive};
use tokio::net::{TcpSocket, TcpStream};

/// A socket option of a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Opt {
    /// TCP_NODELAY (`nagle`).
    Nodelay,
    /// SO_SNDBUF (`send_buffer`).
    SendBuffer,
    /// SO_RCVBUF (`receive_buffer`).
    ReceiveBuffer,
    /// TCP_CONGESTION (`congestion`).
    Congestion,
    /// TCP_QUICKACK (`quickack`).
    Quickack,
    /// TCP_DELACK_MAX_US (`delayed_ack`).
    DelayedAck,
    /// TCP_RTO_MIN_US (`min_rto`).
    MinRto,
    /// SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT (`keepalive_*`).
    Keepalive,
    /// TCP_MAXSEG (`mss`).
    Mss,
    /// TCP_USER_TIMEOUT (`user_timeout`).
    UserTimeout,
    /// TCP_NOTSENT_LOWAT (`notsent_lowat`).
    NotsentLowat,
    /// TCP_WINDOW_CLAMP (`window_clamp`).
    WindowClamp,
}

impl Opt {
    /// The config key.
    pub fn key(self) -> &'static str {
        match self {
            Opt::Nodelay => "nagle",
            Opt::SendBuffer => "send_buffer",
            Opt::ReceiveBuffer => "receive_buffer",
            Opt::Congestion => "congestion",
            Opt::Quickack => "quickack",
            Opt::DelayedAck => "delayed_ack",
            Opt::MinRto => "min_rto",
            Opt::Keepalive => "keepalive_idle",
            Opt::Mss => "mss",
            Opt::UserTimeout => "user_timeout",
            Opt::NotsentLowat => "notsent_lowat",
            Opt::WindowClamp => "window_clamp",
        }
    }

    /// The Linux socket option.
    pub fn linux(self) -> &'static str {
        match self {
            Opt::Nodelay => "TCP_NODELAY",
            Opt::SendBuffer => "SO_SNDBUF",
            Opt::ReceiveBuffer => "SO_RCVBUF",
            Opt::Congestion => "TCP_CONGESTION",
            Opt::Quickack => "TCP_QUICKACK",
            Opt::DelayedAck => "TCP_DELACK_MAX_US",
            Opt::MinRto => "TCP_RTO_MIN_US",
            Opt::Keepalive => "SO_KEEPALIVE",
            Opt::Mss => "TCP_MAXSEG",
            Opt::UserTimeout => "TCP_USER_TIMEOUT",
            Opt::NotsentLowat => "TCP_NOTSENT_LOWAT",
            Opt::WindowClamp => "TCP_WINDOW_CLAMP",
        }
    }
}

/// Which options a call sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before listen or connect: everything but quick-ACK mode (meaningless before data).
    Before,
    /// On an established connection: everything.
    Established,
}

/// Sets `p` on `sock`, calling `refused` for each option the kernel refused; goes on after a
/// refusal.
fn set_options(
    sock: &impl AsFd,
    p: &SocketOptions,
    stage: Stage,
    mut refused: impl FnMut(Opt, io::Error),
) {
    let s = SockRef::from(sock);
    let mut check = |opt: Opt, r: io::Result<()>| {
        if let Err(e) = r {
            refused(opt, e);
        }
    };
    check(Opt::Nodelay, s.set_tcp_nodelay(!p.nagle));
    if let Some(b) = p.send_buffer {
        check(Opt::SendBuffer, s.set_send_buffer_size(b as usize));
    }
    if let Some(b) = p.receive_buffer {
        check(Opt::ReceiveBuffer, s.set_recv_buffer_size(b as usize));
    }
    if let Some(c) = &p.congestion {
        check(Opt::Congestion, s.set_tcp_congestion(c.as_bytes()));
    }
    if p.quickack && stage == Stage::Established {
        check(Opt::Quickack, s.set_tcp_quickack(true));
    }
    if let Some(d) = p.delayed_ack {
        check(Opt::DelayedAck, headway_io::tcp::set_delack_max(sock, d));
    }
    if let Some(d) = p.min_rto {
        check(Opt::MinRto, headway_io::tcp::set_rto_min(sock, d));
    }
    if let Some(k) = p.keepalive {
        let ka = TcpKeepalive::new()
            .with_time(k.idle)
            .with_interval(k.interval)
            .with_retries(k.count);
        check(Opt::Keepalive, s.set_tcp_keepalive(&ka));
    }
    if let Some(m) = p.mss {
        check(Opt::Mss, s.set_tcp_mss(m));
    }
    if let Some(t) = p.user_timeout {
        check(Opt::UserTimeout, s.set_tcp_user_timeout(Some(t)));
    }
    if let Some(b) = p.notsent_lowat {
        check(Opt::NotsentLowat, s.set_tcp_notsent_lowat(b));
    }
    if let Some(b) = p.window_clamp {
        check(Opt::WindowClamp, headway_io::tcp::set_window_clamp(sock, b));
    }
}

/// Logs a refused option of a live connection (the start-up check already warned).
fn log_refusal<'a>(side: &'static str, profile: &'a str) -> impl FnMut(Opt, io::Error) + 'a {
    move |opt, error| {
        tracing::debug!(side, profile, option = opt.linux(), %error, "socket option refused");
    }
}

/// Sets a virtual server's profile on its listening socket, before `listen`, so the handshake
/// of every client connection (window scale, MSS) and the options accepted sockets inherit
/// follow it. Without a profile: TCP_NODELAY, inherited by every accepted connection.
pub fn apply_listener(sock: &socket2::Socket, profile: Option<&TcpProfile>) {
    apply(sock, profile, Stage::Before, "listener");
}

/// Sets a virtual server's profile on an accepted client connection. Without a profile:
/// TCP_NODELAY only.
pub fn apply_client(stream: &impl AsFd, profile: Option<&TcpProfile>) {
    apply(stream, profile, Stage::Established, "client");
}

/// Sets on an accepted client connection what it did not inherit from its listener. Linux
/// copies a listener's socket options to the connections it accepts, and the listener got
/// `bound` (the virtual server's profile when it was bound, [`apply_listener`]); so when the
/// virtual server still has that profile, only quick-ACK mode (a state of each connection, not
/// an inherited option) is left to set, and a connection without a profile needs no system
/// call at all. When a reload gave the virtual server another profile since, all of `profile`
/// is set, as [`apply_client`] does.
pub fn apply_accepted(
    stream: &impl AsFd,
    profile: Option<&TcpProfile>,
    bound: Option<&TcpProfile>,
) {
    let same = profile.map(|p| &p.socket) == bound.map(|p| &p.socket);
    match profile {
        _ if !same => apply_client(stream, profile),
        Some(p) if p.socket.quickack => {
            if let Err(e) = SockRef::from(stream).set_tcp_quickack(true) {
                log_refusal("client", &p.name)(Opt::Quickack, e);
            }
        }
        _ => {}
    }
}

/// Sets a server group's profile on a connection to a server made without [`connect`] (the
/// handshake options — receive buffer, MSS, window clamp — then only apply from now on).
/// Without a profile: TCP_NODELAY only.
pub fn apply_server(stream: &TcpStream, profile: Option<&TcpProfile>) {
    apply(stream, profile, Stage::Established, "server");
}

/// `profile` on `sock` at `stage`, or TCP_NODELAY alone without one.
fn apply(sock: &impl AsFd, profile: Option<&TcpProfile>, stage: Stage, side: &'static str) {
    match profile {
        None => {
            let _ = SockRef::from(sock).set_tcp_nodelay(true);
        }
        Some(p) => set_options(sock, &p.socket, stage, log_refusal(side, &p.name)),
    }
}

/// Connects to a server with a group's profile: the handshake options are set before the SYN,
/// the rest once connected. Without a profile it is `TcpStream::connect` plus TCP_NODELAY.
///
/// Cancel safety: dropping the future closes the half-made connection; nothing else is held.
pub async fn connect(addr: SocketAddr, profile: Option<&TcpProfile>) -> io::Result<TcpStream> {
    let Some(p) = profile else {
        let s = TcpStream::connect(addr).await?;
        let _ = s.set_nodelay(true);
        return Ok(s);
    };
    let sock = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    set_options(
        &sock,
        &p.socket,
        Stage::Before,
        log_refusal("server", &p.name),
    );
    let stream = sock.connect(addr).await?;
    if p.socket.quickack {
        let _ = SockRef::from(&stream).set_tcp_quickack(true);
    }
    Ok(stream)
}

/// What [`check`] found: nothing here stops the proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Options the host will not honour as configured, each with what to do about it.
    pub warnings: Vec<String>,
    /// For each profile with route options: the profile's name and the `ip route` words to add
    /// to the route towards its peers (`initcwnd 4 rto_min 500ms`).
    pub routes: Vec<(String, String)>,
}

/// Why a profile cannot be used on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The congestion control is not in `tcp_available_congestion_control`.
    #[error(
        "tcp profile `{profile}`: congestion control `{name}` is not available on this host \
         (net.ipv4.tcp_available_congestion_control: {available}): load its module (`modprobe \
         tcp_{name}`) or use one of those"
    )]
    CongestionUnavailable {
        /// The profile.
        profile: String,
        /// The algorithm asked for.
        name: String,
        /// The host's algorithms, space-separated.
        available: String,
    },
    /// The congestion control is available but not allowed to unprivileged sockets, and
    /// Headway lacks CAP_NET_ADMIN.
    #[error(
        "tcp profile `{profile}`: congestion control `{name}` is not allowed to this process \
         (net.ipv4.tcp_allowed_congestion_control: {allowed}, and Headway runs without \
         CAP_NET_ADMIN): allow it with `sysctl -w net.ipv4.tcp_allowed_congestion_control=\"\
         {allowed} {name}\"`, or use one of those"
    )]
    CongestionNotAllowed {
        /// The profile.
        profile: String,
        /// The algorithm asked for.
        name: String,
        /// The algorithms unprivileged sockets may use, space-separated.
        allowed: String,
    },
}

/// The host's TCP settings a profile depends on, as read from `/proc/sys` (the calling
/// thread's network namespace). A value that could not be read is `None` / empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostTcp {
    /// `net.ipv4.tcp_available_congestion_control`.
    pub available_congestion: Vec<String>,
    /// `net.ipv4.tcp_allowed_congestion_control`.
    pub allowed_congestion: Vec<String>,
    /// `net.core.wmem_max`.
    pub wmem_max: Option<u64>,
    /// `net.core.rmem_max`.
    pub rmem_max: Option<u64>,
    /// `net.ipv4.tcp_window_scaling`.
    pub window_scaling: Option<bool>,
    /// `net.ipv4.tcp_sack`.
    pub sack: Option<bool>,
}

impl HostTcp {
    /// Reads the settings from `/proc/sys`.
    pub fn read() -> HostTcp {
        let text = |p: &str| std::fs::read_to_string(format!("/proc/sys/{p}")).ok();
        let words = |p: &str| {
            text(p)
                .map(|t| t.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        let num = |p: &str| text(p).and_then(|t| t.trim().parse::<u64>().ok());
        HostTcp {
            available_congestion: words("net/ipv4/tcp_available_congestion_control"),
            allowed_congestion: words("net/ipv4/tcp_allowed_congestion_control"),
            wmem_max: num("net/core/wmem_max"),
            rmem_max: num("net/core/rmem_max"),
            window_scaling: num("net/ipv4/tcp_window_scaling").map(|v| v != 0),
            sack: num("net/ipv4/tcp_sack").map(|v| v != 0),
        }
    }
}

/// Checks every profile the config uses against this host: sets each on a probe socket, reads
/// [`HostTcp`], and reports with [`assess`].
pub fn check(config: &AdcConfig) -> Result<Report, CheckError> {
    let host = HostTcp::read();
    let mut report = Report::default();
    let mut seen: Vec<&str> = Vec::new();
    let used = config
        .virtual_servers
        .iter()
        .filter_map(|v| v.tcp_profile.as_ref())
        .chain(config.groups.iter().filter_map(|g| g.tcp_profile.as_ref()));
    for p in used {
        if seen.contains(&p.name.as_str()) {
            continue;
        }
        seen.push(&p.name);
        let refused = probe(&p.socket);
        let r = assess(p, &host, &refused)?;
        report.warnings.extend(r.warnings);
        report.routes.extend(r.routes);
    }
    Ok(report)
}

/// Sets `options` on a fresh TCP socket and returns what the kernel refused.
fn probe(options: &SocketOptions) -> Vec<(Opt, io::Error)> {
    let mut refused = Vec::new();
    match socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None) {
        Ok(s) => set_options(&s, options, Stage::Before, |o, e| refused.push((o, e))),
        Err(e) => tracing::warn!(error = %e, "cannot open a socket to check the tcp profiles"),
    }
    refused
}

/// What a profile means on a host with settings `host`, where a probe socket refused
/// `refused`. Pure: the decisions of [`check`].
pub fn assess(
    p: &TcpProfile,
    host: &HostTcp,
    refused: &[(Opt, io::Error)],
) -> Result<Report, CheckError> {
    let name = &p.name;
    let mut r = Report::default();
    if let Some(cc) = &p.socket.congestion {
        if !host.available_congestion.is_empty() && !host.available_congestion.contains(cc) {
            return Err(CheckError::CongestionUnavailable {
                profile: name.clone(),
                name: cc.clone(),
                available: host.available_congestion.join(" "),
            });
        }
    }
    for (opt, e) in refused {
        let errno = e.raw_os_error();
        match opt {
            Opt::Congestion if errno == Some(EPERM) => {
                return Err(CheckError::CongestionNotAllowed {
                    profile: name.clone(),
                    name: p.socket.congestion.clone().unwrap_or_default(),
                    allowed: host.allowed_congestion.join(" "),
                });
            }
            Opt::MinRto | Opt::DelayedAck if errno == Some(ENOPROTOOPT) => {
                let instead = if *opt == Opt::MinRto {
                    "set `rto_min` on the route instead (`ip route change … rto_min 100ms`)"
                } else {
                    "`ip route change … quickack 1` turns delayed ACKs off per route instead"
                };
                r.warnings.push(format!(
                    "tcp profile `{name}`: this kernel has no {} (Linux 6.15 or later), so \
                     `{}` is ignored: {instead}",
                    opt.linux(),
                    opt.key()
                ));
            }
            _ => r.warnings.push(format!(
                "tcp profile `{name}`: the kernel refused `{}` ({}): {e}",
                opt.key(),
                opt.linux()
            )),
        }
    }
    let capped = |want: Option<u32>, max: Option<u64>, key: &str, sysctl: &str| match (want, max) {
        (Some(w), Some(m)) if u64::from(w) > m => Some(format!(
            "tcp profile `{name}`: {key} {w} bytes is capped at {sysctl} = {m} for a process \
                 without CAP_NET_ADMIN: raise it with `sysctl -w {sysctl}={w}`"
        )),
        _ => None,
    };
    r.warnings.extend(capped(
        p.socket.send_buffer,
        host.wmem_max,
        "send_buffer",
        "net.core.wmem_max",
    ));
    r.warnings.extend(capped(
        p.socket.receive_buffer,
        host.rmem_max,
        "receive_buffer",
        "net.core.rmem_max",
    ));
    r.warnings.extend(host_mismatches(name, &p.host, host));
    if !p.route.is_empty() {
        r.routes
            .push((name.clone(), p.route.ip_route_args().join(" ")));
    }
    Ok(r)
}

/// Warnings for host-wide settings the profile wants and the host does not have.
fn host_mismatches(name: &str, want: &HostSettings, host: &HostTcp) -> Vec<String> {
    let mut out = Vec::new();
    for (sysctl, wanted, have, what) in [
        (
            "net.ipv4.tcp_window_scaling",
            want.window_scaling,
            host.window_scaling,
            "window_scaling",
        ),
        ("net.ipv4.tcp_sack", want.sack, host.sack, "sack"),
    ] {
        if let (Some(w), Some(h)) = (wanted, have) {
            if w != h {
                out.push(format!(
                    "tcp profile `{name}` wants {what} = {w} but the host has {sysctl} = {}: \
                     Linux sets it per host (network namespace), not per socket; `sysctl -w \
                     {sysctl}={}` changes it for every connection of the host",
                    u8::from(h),
                    u8::from(w)
                ));
            }
        }
    }
    out
}

/// Linux's EPERM (asm-generic/errno-base.h).
const EPERM: i32 = 1;
/// Linux's ENOPROTOOPT (asm-generic/errno.h).
const ENOPROTOOPT: i32 = 92;

#[cfg(test)]
mod tests;
