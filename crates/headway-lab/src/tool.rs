//! Measurement tools run inside lab namespaces: `headway lab tool udp-sink|udp-flood|echo|probe`.
//!
//! This module owns four small UDP programs and their wire format. Each datagram's payload
//! starts with a 16-byte header: the sequence number and the sender's timestamp (nanoseconds
//! since the sender started, CLOCK_MONOTONIC via [`SystemClock`]), both big-endian `u64`; the
//! rest is zero padding.
//!
//! - `udp-sink` receives until it has been idle for a while after the first datagram, and
//!   reports frames, distinct sequence numbers and the receiver's L2 rate ([`SinkReport`]);
//! - `udp-flood` sends datagrams paced at a given L2 rate for a duration or a count;
//! - `echo` returns every datagram to its sender;
//! - `probe` sends echo requests at a fixed interval and reports round-trip times
//!   ([`ProbeReport`]); send and receive times come from the same clock in the same process.
//!
//! Servers print `ready` on stdout once their socket is bound; every tool prints its report as
//! one JSON line on stdout. The tools are hidden from `--help`: the lab's calibration runs them.
//! The functions behind them take sockets, so they are also usable (and tested) in-process.
//!
//! L2 frame length: a UDP payload of `n` bytes travels in an Ethernet frame of
//! `n + 8 (UDP) + 20 (IPv4) + 14 (Ethernet)` bytes, which is what the emulator's rate limiter
//! counts (no preamble or FCS unless `overhead=ethernet`).

use std::collections::HashSet;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use headway_core::units::parse_duration;
use headway_core::{Rate, SystemClock};
use serde::{Deserialize, Serialize};

/// Bytes the UDP, IPv4 and Ethernet headers add to a UDP payload.
pub const FRAME_OVERHEAD: u64 = 8 + 20 + 14;
/// Bytes of our header at the start of every payload.
pub const HEADER: usize = 16;

/// The hidden tool subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ToolCommand {
    /// Receive datagrams and report count, distinct sequence numbers and L2 rate.
    UdpSink(SinkArgs),
    /// Send datagrams paced at an L2 rate.
    UdpFlood(FloodArgs),
    /// Return every datagram to its sender.
    Echo(EchoArgs),
    /// Send echo requests at a fixed interval and report round-trip times.
    Probe(ProbeArgs),
    /// Download a URL path over HTTP/1.1 and report time, bytes and SHA-256.
    Fetch(crate::fetch::FetchArgs),
    /// Serve verified transfers both ways (see `crate::xfer`).
    XferServer(crate::xfer::XferServerArgs),
    /// Run many verified transfers against an xfer server and report their outcomes.
    Xfer(crate::xfer::XferArgs),
    /// Send SYNs from random lab addresses to a virtual server at a bounded rate and time.
    SynFlood(crate::synflood::SynFloodArgs),
    /// Download a page (HTML, then its objects over parallel keep-alive connections).
    Page(crate::page::PageArgs),
    /// Requests at a fixed rate, each on a new connection; success rate and latencies.
    Clients(crate::clients::ClientsArgs),
}

/// `udp-sink` arguments.
#[derive(Debug, clap::Args)]
pub struct SinkArgs {
    /// Address to bind.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Stop after this long without a datagram, once the first has arrived.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub idle: Duration,
    /// Stop after this long in any case.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub max_time: Duration,
}

/// `udp-flood` arguments.
#[derive(Debug, clap::Args)]
pub struct FloodArgs {
    /// Destination.
    #[arg(long)]
    pub to: SocketAddr,
    /// L2 rate to pace at (frame = payload + 42 bytes).
    #[arg(long)]
    pub rate: Rate,
    /// UDP payload bytes per datagram (at least 16).
    #[arg(long, default_value_t = 1472)]
    pub size: usize,
    /// Stop after this long.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Stop after this many datagrams.
    #[arg(long)]
    pub count: Option<u64>,
}

/// `echo` arguments.
#[derive(Debug, clap::Args)]
pub struct EchoArgs {
    /// Address to bind.
    #[arg(long)]
    pub listen: SocketAddr,
}

/// `probe` arguments.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// The echo server.
    #[arg(long)]
    pub to: SocketAddr,
    /// Number of probes.
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// Time between probes.
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    pub interval: Duration,
    /// How long to wait for replies after the last probe was sent.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub wait: Duration,
    /// UDP payload bytes per probe (at least 16).
    #[arg(long, default_value_t = 64)]
    pub size: usize,
}

/// Runs a tool subcommand.
pub fn run(cmd: ToolCommand) -> Result<()> {
    match cmd {
        ToolCommand::Fetch(a) => crate::fetch::run(a),
        ToolCommand::XferServer(a) => crate::xfer::run_server(a),
        ToolCommand::Xfer(a) => crate::xfer::run_client(a),
        ToolCommand::SynFlood(a) => crate::synflood::run(a),
        ToolCommand::Page(a) => crate::page::run(a),
        ToolCommand::Clients(a) => crate::clients::run(a),
        ToolCommand::UdpSink(a) => {
            let sock = bind(a.listen)?;
            let report = sink(&sock, a.idle, a.max_time, say_ready)?;
            print_json(&report)
        }
        ToolCommand::UdpFlood(a) => {
            anyhow::ensure!(a.size >= HEADER, "--size must be at least {HEADER}");
            let sock = bind("0.0.0.0:0".parse()?)?;
            let report = flood(&sock, a.to, a.rate, a.size, a.duration, a.count)?;
            print_json(&report)
        }
        ToolCommand::Echo(a) => {
            let sock = bind(a.listen)?;
            say_ready();
            echo(&sock)
        }
        ToolCommand::Probe(a) => {
            anyhow::ensure!(a.size >= HEADER, "--size must be at least {HEADER}");
            let sock = bind("0.0.0.0:0".parse()?)?;
            let report = probe(&sock, a.to, a.count, a.interval, a.wait, a.size)?;
            print_json(&report)
        }
    }
}

fn bind(addr: SocketAddr) -> Result<UdpSocket> {
    let sock = UdpSocket::bind(addr).with_context(|| format!("binding UDP {addr}"))?;
    // A big receive buffer, so the measuring end never drops what the link delivered. The
    // forced variant ignores net.core.rmem_max (we run as root); fall back to the plain one.
    let size = 8 << 20;
    if nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::RcvBufForce, &size).is_err() {
        let _ = nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::RcvBuf, &size);
    }
    Ok(sock)
}

fn say_ready() {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready");
    let _ = out.flush();
}

fn print_json<T: Serialize>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(value)?)?;
    out.flush()?;
    Ok(())
}

fn nanos_since(start: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}

/// Writes the header (`seq`, `ts_ns`) into `buf[..16]`.
pub fn encode_header(buf: &mut [u8], seq: u64, ts_ns: u64) {
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    buf[8..16].copy_from_slice(&ts_ns.to_be_bytes());
}

/// Reads the header of a received payload; `None` if it is too short.
pub fn decode_header(buf: &[u8]) -> Option<(u64, u64)> {
    let seq = u64::from_be_bytes(buf.get(..8)?.try_into().ok()?);
    let ts = u64::from_be_bytes(buf.get(8..16)?.try_into().ok()?);
    Some((seq, ts))
}

/// What `udp-sink` saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SinkReport {
    /// Datagrams received (duplicates included).
    pub frames: u64,
    /// Distinct sequence numbers received.
    pub distinct: u64,
    /// Time from the first to the last datagram, nanoseconds.
    pub span_ns: u64,
    /// L2 bits of every frame after the first (the first frame's bits were serialised before
    /// the span began).
    pub bits_after_first: u64,
    /// The receiver's L2 rate, bits/s; `None` with fewer than two frames.
    pub l2_rate_bps: Option<f64>,
}

/// The L2 rate seen by a receiver: the bits of every frame after the first, over the time from
/// the first frame's arrival to the last's.
pub fn l2_rate(bits_after_first: u64, span_ns: u64) -> Option<f64> {
    (span_ns > 0 && bits_after_first > 0).then(|| bits_after_first as f64 * 1e9 / span_ns as f64)
}

/// Receives on `sock` until `idle` passes without a datagram (after the first) or `max_time`
/// passes; calls `ready` once before receiving.
pub fn sink(
    sock: &UdpSocket,
    idle: Duration,
    max_time: Duration,
    ready: impl FnOnce(),
) -> Result<SinkReport> {
    let start = SystemClock::now();
    let deadline = start + max_time;
    let mut buf = vec![0u8; 65536];
    let mut seqs = HashSet::new();
    let (mut frames, mut bits_after_first) = (0u64, 0u64);
    let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    ready();
    loop {
        let now = SystemClock::now();
        if now >= deadline || last.is_some_and(|l| now.saturating_duration_since(l) >= idle) {
            break;
        }
        match sock.recv_from(&mut buf) {
            Ok((n, _)) => {
                let at = SystemClock::now();
                frames += 1;
                if first.is_none() {
                    first = Some(at);
                } else {
                    bits_after_first += (n as u64 + FRAME_OVERHEAD) * 8;
                }
                last = Some(at);
                if let Some((seq, _)) = decode_header(&buf[..n]) {
                    seqs.insert(seq);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e).context("receiving"),
        }
    }
    let span_ns = match (first, last) {
        (Some(f), Some(l)) => nanos_since(f, l),
        _ => 0,
    };
    Ok(SinkReport {
        frames,
        distinct: seqs.len() as u64,
        span_ns,
        bits_after_first,
        l2_rate_bps: l2_rate(bits_after_first, span_ns),
    })
}

/// What `udp-flood` did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FloodReport {
    /// Datagrams sent.
    pub sent: u64,
    /// Sends that failed (e.g. no buffer space).
    pub errors: u64,
}

/// The time between frames of `payload` bytes at L2 rate `rate`.
pub fn pacing_interval(rate: Rate, payload: usize) -> Duration {
    rate.transmit_time(payload as u64 + FRAME_OVERHEAD)
        .unwrap_or(Duration::from_secs(1))
}

/// Sends `payload`-byte datagrams to `to`, paced at `rate` on an absolute schedule (a late
/// send does not delay the ones after it), for `duration` or `count` datagrams.
pub fn flood(
    sock: &UdpSocket,
    to: SocketAddr,
    rate: Rate,
    payload: usize,
    duration: Duration,
    count: Option<u64>,
) -> Result<FloodReport> {
    let interval = pacing_interval(rate, payload);
    let mut buf = vec![0u8; payload.max(HEADER)];
    let start = SystemClock::now();
    let end = start + duration;
    let (mut sent, mut errors) = (0u64, 0u64);
    loop {
        if count.is_some_and(|c| sent + errors >= c) {
            break;
        }
        let due = start + interval.saturating_mul(u32::try_from(sent + errors).unwrap_or(u32::MAX));
        if due >= end {
            break;
        }
        pace_until(due);
        encode_header(
            &mut buf,
            sent + errors,
            nanos_since(start, SystemClock::now()),
        );
        match sock.send_to(&buf, to) {
            Ok(_) => sent += 1,
            Err(_) => errors += 1,
        }
    }
    Ok(FloodReport { sent, errors })
}

/// Sleeps until `due`, spinning (with yields) for the last 200 µs for precision.
fn pace_until(due: Instant) {
    loop {
        let now = SystemClock::now();
        if now >= due {
            return;
        }
        let left = due - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(150));
        } else {
            std::thread::yield_now();
        }
    }
}

/// Returns every datagram on `sock` to its sender, forever (until the process is stopped).
pub fn echo(sock: &UdpSocket) -> Result<()> {
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, from) = sock.recv_from(&mut buf).context("receiving")?;
        let _ = sock.send_to(&buf[..n], from);
    }
}

/// What `probe` measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Probes sent.
    pub sent: u64,
    /// Distinct probes answered.
    pub received: u64,
    /// Mean round-trip time, nanoseconds.
    pub mean_ns: f64,
    /// Smallest round-trip time, nanoseconds.
    pub min_ns: u64,
    /// Median round-trip time, nanoseconds.
    pub median_ns: u64,
    /// Largest round-trip time, nanoseconds.
    pub max_ns: u64,
}

/// Sends `count` probes to the echo server `to`, one every `interval`, and measures each
/// reply's round-trip time; waits up to `wait` after the last send for stragglers.
pub fn probe(
    sock: &UdpSocket,
    to: SocketAddr,
    count: u64,
    interval: Duration,
    wait: Duration,
    size: usize,
) -> Result<ProbeReport> {
    let start = SystemClock::now();
    let sent = Arc::new(AtomicU64::new(0));
    // 0 = still sending; else nanoseconds (since start) of the last send, plus one.
    let done_at = Arc::new(AtomicU64::new(0));
    let sender = {
        let sock = sock.try_clone()?;
        let (sent, done_at) = (sent.clone(), done_at.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; size.max(HEADER)];
            for seq in 0..count {
                let due = start + interval.saturating_mul(u32::try_from(seq).unwrap_or(u32::MAX));
                pace_until(due);
                encode_header(&mut buf, seq, nanos_since(start, SystemClock::now()));
                if sock.send_to(&buf, to).is_ok() {
                    sent.fetch_add(1, Ordering::SeqCst);
                }
            }
            done_at.store(nanos_since(start, SystemClock::now()) + 1, Ordering::SeqCst);
        })
    };
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = vec![0u8; 65536];
    let mut seen = HashSet::new();
    let mut rtts: Vec<u64> = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    loop {
        let d = done_at.load(Ordering::SeqCst);
        if d != 0 {
            let finished = seen.len() as u64 >= sent.load(Ordering::SeqCst);
            let waited = nanos_since(start, SystemClock::now())
                >= (d - 1).saturating_add(u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX));
            if finished || waited {
                break;
            }
        }
        match sock.recv_from(&mut buf) {
            Ok((n, _)) => {
                let now = nanos_since(start, SystemClock::now());
                if let Some((seq, ts)) = decode_header(&buf[..n]) {
                    if seq < count && seen.insert(seq) {
                        rtts.push(now.saturating_sub(ts));
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            // An ICMP error from an earlier probe (e.g. port unreachable) surfaces here.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Err(e).context("receiving replies"),
        }
    }
    let _ = sender.join();
    Ok(summarise(sent.load(Ordering::SeqCst), rtts))
}

/// Summarises round-trip times (nanoseconds).
pub fn summarise(sent: u64, mut rtts: Vec<u64>) -> ProbeReport {
    rtts.sort_unstable();
    let n = rtts.len();
    let mean = if n == 0 {
        f64::NAN
    } else {
        rtts.iter().map(|&r| r as f64).sum::<f64>() / n as f64
    };
    ProbeReport {
        sent,
        received: n as u64,
        mean_ns: mean,
        min_ns: rtts.first().copied().unwrap_or(0),
        median_ns: rtts.get(n / 2).copied().unwrap_or(0),
        max_ns: rtts.last().copied().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> UdpSocket {
        bind("127.0.0.1:0".parse().unwrap()).unwrap()
    }

    #[test]
    fn header_round_trips_and_short_payloads_are_refused() {
        let mut buf = [0u8; 20];
        encode_header(&mut buf, 42, 123_456_789);
        assert_eq!(decode_header(&buf), Some((42, 123_456_789)));
        assert_eq!(decode_header(&buf[..15]), None);
    }

    #[test]
    fn l2_rate_counts_the_bits_after_the_first_frame() {
        // 101 frames of 1514 bytes, one every 1.2112 ms: 10 Mbit/s exactly.
        let bits = 100 * 1514 * 8;
        let span = 100 * 1_211_200;
        assert_eq!(l2_rate(bits, span), Some(10_000_000.0));
        assert_eq!(l2_rate(0, 0), None);
    }

    #[test]
    fn pacing_interval_counts_the_whole_frame() {
        // 1472 + 42 = 1514 bytes = 12,112 bits; at 10 Mbit/s that is 1.2112 ms.
        let i = pacing_interval(Rate::from_mbps(10), 1472);
        assert_eq!(i, Duration::from_nanos(1_211_200));
    }

    #[test]
    fn summary_of_round_trips() {
        let r = summarise(5, vec![30, 10, 20, 40]);
        assert_eq!((r.sent, r.received), (5, 4));
        assert_eq!(r.mean_ns, 25.0);
        assert_eq!((r.min_ns, r.median_ns, r.max_ns), (10, 30, 40));
        assert!(summarise(3, vec![]).mean_ns.is_nan());
    }

    #[test]
    fn flood_into_sink_on_loopback_delivers_every_sequence_number() {
        let rx = loopback();
        let addr = rx.local_addr().unwrap();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let sink = std::thread::spawn(move || {
            sink(
                &rx,
                Duration::from_millis(500),
                Duration::from_secs(30),
                move || ready_tx.send(()).unwrap(),
            )
            .unwrap()
        });
        ready_rx.recv().unwrap();
        let tx = loopback();
        let sent = flood(
            &tx,
            addr,
            Rate::from_mbps(2),
            200,
            Duration::from_secs(30),
            Some(200),
        )
        .unwrap();
        assert_eq!(
            sent,
            FloodReport {
                sent: 200,
                errors: 0
            }
        );
        let report = sink.join().unwrap();
        assert_eq!(report.frames, 200);
        assert_eq!(report.distinct, 200);
        assert_eq!(report.bits_after_first, 199 * (200 + FRAME_OVERHEAD) * 8);
        assert!(report.l2_rate_bps.is_some());
    }

    #[test]
    fn probe_against_echo_on_loopback_gets_every_reply() {
        let server = loopback();
        let addr = server.local_addr().unwrap();
        // The echo thread runs until the test process ends.
        std::thread::spawn(move || echo(&server));
        let client = loopback();
        let r = probe(
            &client,
            addr,
            50,
            Duration::from_micros(200),
            Duration::from_secs(5),
            64,
        )
        .unwrap();
        assert_eq!(r.sent, 50);
        assert_eq!(r.received, 50);
        assert!(r.min_ns <= r.median_ns && r.median_ns <= r.max_ns);
        assert!(r.mean_ns > 0.0);
    }
}
