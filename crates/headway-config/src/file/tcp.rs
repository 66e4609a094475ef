//! The `[[tcp_profile]]` section of the file schema, as written. `crate::tcp` validates it into
//! [`crate::tcp::TcpProfile`].
//!
//! Every field's doc gives its meaning, unit and default; `docs/config.md` is generated from the
//! same words (keep them in step). `docs/tcp-profiles.md` maps each field, and each NetScaler
//! knob of seed 003, to its Linux mechanism.

use headway_core::ByteSize;
use serde::Deserialize;
use toml::Spanned;

use super::DurationValue;

/// `[[tcp_profile]]`: TCP settings that virtual servers (client side) and server groups (server
/// side) name in `tcp_profile`. The built-in presets (`aol-vip-std`, `aol-dialup`, `aol-mobile`,
/// `aol-server-to-vserver`, `aol-svc-std`, `netscaler-default`; see docs/tcp-profiles.md) can be
/// named without a section. Settings come in three tiers: per-socket options that Headway sets
/// on every connection; per-route options (`initial_cwnd`, `initial_rwnd`, a `min_rto` above
/// 200 ms) that Linux only has on routes, which Headway logs as an `ip route` command at start
/// (the lab applies them); and host-wide settings (`window_scaling`, `sack`) that Headway checks
/// against the host's sysctls and warns about.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpProfileSection {
    /// The profile's name, used by `tcp_profile` in virtual servers and server groups: letters,
    /// digits, `-`, `_`, `.`; not the name of a preset. Required.
    pub name: Spanned<String>,
    /// A built-in preset to start from; the fields given here replace its values. Default: none
    /// (Linux defaults).
    pub preset: Option<Spanned<String>>,
    /// Nagle's algorithm: `true` coalesces small writes (TCP_NODELAY off), `false` sends them at
    /// once (TCP_NODELAY on). Default: false.
    pub nagle: Option<bool>,
    /// Send buffer per socket (SO_SNDBUF, `"4MiB"`), 4KiB–1GiB; capped by `net.core.wmem_max`.
    /// Setting it turns the kernel's send-buffer autotuning off. Default: autotuned.
    pub send_buffer: Option<Spanned<ByteSize>>,
    /// Receive buffer per socket (SO_RCVBUF, `"4MiB"`), 4KiB–1GiB; capped by
    /// `net.core.rmem_max`. Also sets the window scale advertised in the SYN. Setting it turns
    /// receive-buffer autotuning off. Default: autotuned.
    pub receive_buffer: Option<Spanned<ByteSize>>,
    /// Congestion control (TCP_CONGESTION): `"cubic"`, `"bbr"`, `"reno"` or any name in
    /// `/proc/sys/net/ipv4/tcp_available_congestion_control`; checked when the proxy starts.
    /// Default: the host's `net.ipv4.tcp_congestion_control`.
    pub congestion: Option<Spanned<String>>,
    /// Enter quick-ACK mode on each new connection (TCP_QUICKACK): ACK every segment at once
    /// until the kernel's own heuristics take over again. Default: false — on `http` and
    /// `https` listeners the acknowledgement of a request then rides on its answer (quick-ACK
    /// mode off from the first segment, as HAProxy's HTTP listeners behave), and a connection
    /// waiting for the rest of a request acknowledges what came at once, so a client with
    /// Nagle's algorithm on is not held up.
    pub quickack: Option<bool>,
    /// Longest delay of a delayed ACK (TCP_DELACK_MAX_US, Linux 6.15 or later), 2ms–200ms
    /// (`"50ms"`). Default: the kernel's 200 ms ceiling (adaptive from 40 ms).
    pub delayed_ack: Option<Spanned<DurationValue>>,
    /// Minimum retransmission timeout, 2ms–60s (`"400ms"`). Up to 200 ms it is a socket option
    /// (TCP_RTO_MIN_US, Linux 6.15 or later); above, Linux has it only per route (`ip route …
    /// rto_min 400ms`), which Headway logs and the lab applies. Default: 200 ms.
    pub min_rto: Option<Spanned<DurationValue>>,
    /// Keepalive: idle time before the first probe (SO_KEEPALIVE + TCP_KEEPIDLE), 1s–32767s
    /// (`"60s"`). Default: no keepalive.
    pub keepalive_idle: Option<Spanned<DurationValue>>,
    /// Keepalive: time between probes (TCP_KEEPINTVL), 1s–32767s; needs `keepalive_idle`.
    /// Default: `"75s"`.
    pub keepalive_interval: Option<Spanned<DurationValue>>,
    /// Keepalive: unanswered probes before the connection is dropped (TCP_KEEPCNT), 1–127;
    /// needs `keepalive_idle`. Default: 9.
    pub keepalive_count: Option<Spanned<u32>>,
    /// Maximum segment size in bytes (TCP_MAXSEG), 88–32767; announced in the SYN.
    /// Default: from the route's MTU.
    pub mss: Option<Spanned<u32>>,
    /// Drop the connection when sent data stays unacknowledged this long (TCP_USER_TIMEOUT,
    /// `"30s"`), 1ms–1h. Default: the kernel's retransmission limit (about 15 minutes).
    pub user_timeout: Option<Spanned<DurationValue>>,
    /// Unsent bytes queued in the socket before it stops being writable (TCP_NOTSENT_LOWAT,
    /// `"128KiB"`), 1B–1GiB: less data waits in the kernel, so a slow client does not hold
    /// a large buffer. Default: the host's `net.ipv4.tcp_notsent_lowat` (unlimited).
    pub notsent_lowat: Option<Spanned<ByteSize>>,
    /// Largest window advertised to the peer (TCP_WINDOW_CLAMP, `"1MiB"`), 1KiB–1GiB.
    /// Default: none (the receive buffer decides).
    pub window_clamp: Option<Spanned<ByteSize>>,
    /// Initial congestion window in segments, 1–1000: per route only (`ip route … initcwnd
    /// 10`); Headway logs the command and the lab applies it. Default: the route's (10).
    pub initial_cwnd: Option<Spanned<u32>>,
    /// Initial receive window in segments, 1–1000: per route only (`ip route … initrwnd 10`).
    /// Default: the route's (10).
    pub initial_rwnd: Option<Spanned<u32>>,
    /// Window scaling (RFC 7323), host-wide in Linux (`net.ipv4.tcp_window_scaling`): Headway
    /// warns when the host differs; the lab sets it. Default: not checked (Linux: on).
    pub window_scaling: Option<bool>,
    /// Selective acknowledgements (RFC 2018), host-wide in Linux (`net.ipv4.tcp_sack`):
    /// Headway warns when the host differs; the lab sets it. Default: not checked (Linux: on).
    pub sack: Option<bool>,
}
