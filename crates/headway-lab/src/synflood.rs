//! `headway lab tool syn-flood`: a bounded SYN flooder for the lab's flood-defense scenario.
//!
//! This module owns the SYN packet (an IPv4 header and a TCP header with an MSS option, built
//! and checked here: [`SynRepr`] and the [`SynPacket`] view, in the smoltcp style) and the tool
//! that sends such packets from random source addresses of a subnet to one virtual server, at a
//! paced rate for a bounded time, through a raw socket ([`headway_io::raw::RawIpv4Socket`]).
//!
//! Safety rails, checked before a packet is sent: the rate is at most [`MAX_RATE`] SYN/s, the
//! duration at most [`MAX_DURATION`], and both the destination and every source address lie in
//! the lab's range 198.18.0.0/15 (RFC 2544, benchmarking) — the tool cannot be pointed at
//! anything outside a lab. It stops by itself when the duration is over.
//!
//! The packets: IPv4 (RFC 791) without options, DF set, TTL 64, a random identification; TCP
//! (RFC 9293) with SYN only, a random source port (1024–65535) and sequence number, a window of
//! 64240 and one option, MSS 1460 — what a real client's SYN carries at minimum, so the
//! server's SYN cookies encode a real MSS. Checksums (RFC 1071) are computed here, the TCP one
//! over the IPv4 pseudo-header (RFC 9293 §3.1).
//!
//! Output: `ready` once the socket is open, then one line `result {json}` ([`FloodReport`]).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::units::parse_duration;
use headway_core::{Rng, SystemClock};
use serde::{Deserialize, Serialize};

/// The highest rate the tool sends at, SYN/s.
pub const MAX_RATE: u64 = 200_000;
/// The longest the tool runs.
pub const MAX_DURATION: Duration = Duration::from_secs(60);

/// Length of a SYN: 20 bytes of IPv4 header, 24 of TCP header (20 + the MSS option).
pub const SYN_LEN: usize = 44;
const IP_LEN: usize = 20;

/// The lab's address range, 198.18.0.0/15.
pub fn in_lab_range(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    o[0] == 198 && (o[1] & 0xfe) == 18
}

/// The fields of a SYN that vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynRepr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Initial sequence number.
    pub seq: u32,
    /// IPv4 identification.
    pub ident: u16,
    /// The MSS option's value.
    pub mss: u16,
}

impl SynRepr {
    /// Bytes [`SynRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        SYN_LEN
    }

    /// Writes the packet into `buf[..SYN_LEN]`, checksums included. Panics if `buf` is shorter
    /// than [`SYN_LEN`] (a caller bug, never input).
    pub fn emit(&self, buf: &mut [u8]) {
        let b = &mut buf[..SYN_LEN];
        b.fill(0);
        // IPv4 header (RFC 791 §3.1).
        b[0] = 0x45; // version 4, IHL 5 words
        b[2..4].copy_from_slice(&(SYN_LEN as u16).to_be_bytes());
        b[4..6].copy_from_slice(&self.ident.to_be_bytes());
        b[6] = 0x40; // DF
        b[8] = 64; // TTL
        b[9] = 6; // TCP
        b[12..16].copy_from_slice(&self.src.octets());
        b[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum(&[&b[..IP_LEN]]);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        // TCP header (RFC 9293 §3.1).
        let t = &mut b[IP_LEN..];
        t[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        t[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        t[4..8].copy_from_slice(&self.seq.to_be_bytes());
        t[12] = 6 << 4; // data offset: 6 words
        t[13] = 0x02; // SYN
        t[14..16].copy_from_slice(&64240u16.to_be_bytes());
        t[20] = 2; // MSS option: kind 2, length 4
        t[21] = 4;
        t[22..24].copy_from_slice(&self.mss.to_be_bytes());
        let c = tcp_checksum(self.src, self.dst, t);
        t[16..18].copy_from_slice(&c.to_be_bytes());
    }

    /// Reads the fields back from a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &SynPacket<T>) -> SynRepr {
        let b = p.buffer.as_ref();
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        SynRepr {
            src: Ipv4Addr::new(b[12], b[13], b[14], b[15]),
            dst: Ipv4Addr::new(b[16], b[17], b[18], b[19]),
            src_port: u16_at(IP_LEN),
            dst_port: u16_at(IP_LEN + 2),
            seq: u32::from_be_bytes([b[24], b[25], b[26], b[27]]),
            ident: u16_at(4),
            mss: u16_at(IP_LEN + 22),
        }
    }
}

/// A view of a SYN as [`SynRepr::emit`] writes it.
#[derive(Debug, Clone)]
pub struct SynPacket<T: AsRef<[u8]>> {
    buffer: T,
}

/// Why bytes are not a SYN of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SynError {
    /// Shorter than [`SYN_LEN`].
    #[error("packet too short")]
    Truncated,
    /// Not IPv4 without options carrying TCP.
    #[error("not an IPv4 TCP packet without IP options")]
    NotIpv4Tcp,
    /// Not a bare SYN with a 24-byte header.
    #[error("not a SYN with one MSS option")]
    NotSyn,
}

impl<T: AsRef<[u8]>> SynPacket<T> {
    /// Checks the length and the fixed fields once; the accessors cannot fail after it.
    pub fn new_checked(buffer: T) -> Result<SynPacket<T>, SynError> {
        let b = buffer.as_ref();
        if b.len() < SYN_LEN {
            return Err(SynError::Truncated);
        }
        if b[0] != 0x45 || b[9] != 6 {
            return Err(SynError::NotIpv4Tcp);
        }
        if b[IP_LEN + 12] >> 4 != 6 || b[IP_LEN + 13] != 0x02 || b[IP_LEN + 20] != 2 {
            return Err(SynError::NotSyn);
        }
        Ok(SynPacket { buffer })
    }

    /// Whether the IPv4 header checksum verifies (the header sums to 0xffff).
    pub fn ip_checksum_ok(&self) -> bool {
        checksum(&[&self.buffer.as_ref()[..IP_LEN]]) == 0
    }

    /// Whether the TCP checksum verifies over the pseudo-header and the segment.
    pub fn tcp_checksum_ok(&self) -> bool {
        let b = self.buffer.as_ref();
        let src = Ipv4Addr::new(b[12], b[13], b[14], b[15]);
        let dst = Ipv4Addr::new(b[16], b[17], b[18], b[19]);
        tcp_checksum(src, dst, &b[IP_LEN..SYN_LEN]) == 0
    }
}

/// The Internet checksum (RFC 1071) of the concatenated `parts`: the one's complement of the
/// one's complement sum of 16-bit big-endian words (an odd part is padded with a zero byte,
/// only valid as the last part). 0 over data that includes a correct checksum.
pub fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        let mut chunks = part.chunks_exact(2);
        for w in &mut chunks {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The TCP checksum of `segment` between `src` and `dst`: over the pseudo-header (source,
/// destination, zero, protocol 6, TCP length) and the segment.
fn tcp_checksum(src: Ipv4Addr, dst: Ipv4Addr, segment: &[u8]) -> u16 {
    let len = (segment.len() as u16).to_be_bytes();
    let pseudo = [0, 6, len[0], len[1]];
    checksum(&[&src.octets(), &dst.octets(), &pseudo, segment])
}

/// A subnet of source addresses (`198.19.0.0/16`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    /// The network address.
    pub base: Ipv4Addr,
    /// The prefix length (8–32).
    pub prefix: u8,
}

impl std::str::FromStr for Subnet {
    type Err = String;
    fn from_str(s: &str) -> Result<Subnet, String> {
        let (ip, len) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}` is not a subnet: write e.g. 198.19.0.0/16"))?;
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| format!("`{ip}` is not an IPv4 address"))?;
        let prefix: u8 = len
            .parse()
            .ok()
            .filter(|p| (8..=32).contains(p))
            .ok_or_else(|| format!("prefix `/{len}`: use 8 to 32"))?;
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        Ok(Subnet {
            base: Ipv4Addr::from(u32::from(ip) & mask),
            prefix,
        })
    }
}

impl Subnet {
    /// An address of the subnet chosen by `r` (network and broadcast addresses avoided when the
    /// subnet has more than two).
    pub fn pick(&self, r: u64) -> Ipv4Addr {
        let size = 1u64 << (32 - u32::from(self.prefix));
        let host = if size > 2 {
            1 + r % (size - 2)
        } else {
            r % size
        };
        Ipv4Addr::from(u32::from(self.base) + host as u32)
    }

    /// Whether every address of the subnet is in the lab's range.
    pub fn within_lab(&self) -> bool {
        let last = u32::from(self.base) + ((1u64 << (32 - u32::from(self.prefix))) - 1) as u32;
        in_lab_range(self.base) && in_lab_range(Ipv4Addr::from(last))
    }
}

/// `syn-flood` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SynFloodArgs {
    /// The virtual server to flood (an address in 198.18.0.0/15).
    #[arg(long)]
    pub to: SocketAddrV4,
    /// Source addresses, drawn at random from this subnet (inside 198.18.0.0/15).
    #[arg(long, default_value = "198.19.0.0/16")]
    pub sources: Subnet,
    /// SYNs per second, at most 200000.
    #[arg(long)]
    pub rate: u64,
    /// How long to send, at most 60 s.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Seed of the random addresses, ports and sequence numbers.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What a flood sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FloodReport {
    /// SYNs the kernel took.
    pub sent: u64,
    /// SYNs the kernel refused (buffer or device queue full).
    pub refused: u64,
    /// SYNs not sent because the sender fell behind the rate (a machine slower than the rate
    /// sends what it can each millisecond and does not catch up later).
    pub behind: u64,
    /// Seconds from the first to the last send.
    pub seconds: f64,
    /// `sent / seconds`.
    pub rate: f64,
}

/// Checks the safety rails of [`SynFloodArgs`].
pub fn check(args: &SynFloodArgs) -> Result<()> {
    if args.rate == 0 || args.rate > MAX_RATE {
        bail!("--rate {}: use 1 to {MAX_RATE} SYN/s", args.rate);
    }
    if args.duration.is_zero() || args.duration > MAX_DURATION {
        bail!("--duration {:?}: use up to {MAX_DURATION:?}", args.duration);
    }
    if !in_lab_range(*args.to.ip()) {
        bail!(
            "--to {}: the flooder only targets lab addresses (198.18.0.0/15)",
            args.to
        );
    }
    if !args.sources.within_lab() {
        bail!("--sources: the flooder only uses lab addresses (198.18.0.0/15) as sources");
    }
    Ok(())
}

/// Runs the tool: checks the rails, opens the raw socket, prints `ready`, floods, prints the
/// report.
pub fn run(args: SynFloodArgs) -> Result<()> {
    check(&args)?;
    let sock = headway_io::raw::RawIpv4Socket::open(*args.to.ip(), 4 << 20)
        .context("opening a raw socket (needs CAP_NET_RAW)")?;
    println!("ready");
    let report = flood(&sock, &args)?;
    println!("result {}", serde_json::to_string(&report)?);
    Ok(())
}

/// Sends SYNs at `args.rate` for `args.duration`: every millisecond, the packets due by then,
/// in batches.
fn flood(sock: &headway_io::raw::RawIpv4Socket, args: &SynFloodArgs) -> Result<FloodReport> {
    const BATCH: usize = headway_io::raw::MAX_BATCH;
    let mut rng = Rng::from_seed(args.seed);
    let mut bufs = vec![[0u8; SYN_LEN]; BATCH];
    let start = SystemClock::now();
    let end = start + args.duration;
    let mut sent = 0u64;
    let mut refused = 0u64;
    let mut behind = 0u64;
    // At most 2 ms' worth per wake-up.
    let cap = (args.rate / 500).max(1);
    let mut sleeper = headway_io::Sleeper::new();
    let mut last = start;
    loop {
        let now = SystemClock::now();
        if now >= end {
            break;
        }
        let due = (now.duration_since(start).as_secs_f64() * args.rate as f64) as u64;
        let mut owed = due.saturating_sub(sent + refused + behind);
        if owed > cap {
            behind += owed - cap;
            owed = cap;
        }
        while owed > 0 {
            let n = (owed as usize).min(BATCH);
            for b in bufs.iter_mut().take(n) {
                let r = rng.next_u64();
                SynRepr {
                    src: args.sources.pick(r),
                    dst: *args.to.ip(),
                    src_port: 1024 + ((r >> 32) as u16 % (65535 - 1024)),
                    dst_port: args.to.port(),
                    seq: rng.next_u64() as u32,
                    ident: (r >> 48) as u16,
                    mss: 1460,
                }
                .emit(b);
            }
            match sock.send_batch(&bufs[..n]) {
                Ok(k) => {
                    sent += k as u64;
                    // What the kernel did not take now is not owed again: the rate is what
                    // left, not a backlog to catch up on.
                    refused += (n - k) as u64;
                }
                Err(_) => refused += n as u64,
            }
            owed -= n as u64;
            last = SystemClock::now();
        }
        sleeper.sleep_until(now + Duration::from_millis(1));
    }
    let seconds = last.duration_since(start).as_secs_f64();
    Ok(FloodReport {
        sent,
        refused,
        behind,
        seconds,
        rate: if seconds > 0.0 {
            sent as f64 / seconds
        } else {
            0.0
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_repr() -> impl Strategy<Value = SynRepr> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            any::<u16>(),
            any::<u16>(),
        )
            .prop_map(|(s, d, sp, dp, seq, ident, mss)| SynRepr {
                src: Ipv4Addr::from(s),
                dst: Ipv4Addr::from(d),
                src_port: sp,
                dst_port: dp,
                seq,
                ident,
                mss,
            })
    }

    proptest! {
        #[test]
        fn every_emitted_syn_has_valid_checksums_and_reads_back(r in arb_repr()) {
            let mut buf = [0xaau8; SYN_LEN + 3];
            r.emit(&mut buf);
            let p = SynPacket::new_checked(&buf[..SYN_LEN]).unwrap();
            prop_assert!(p.ip_checksum_ok());
            prop_assert!(p.tcp_checksum_ok());
            prop_assert_eq!(SynRepr::parse(&p), r);
            // Bytes past the packet are untouched.
            prop_assert_eq!(&buf[SYN_LEN..], &[0xaa; 3]);
        }

        #[test]
        fn any_flipped_bit_breaks_a_checksum_or_the_check(r in arb_repr(), bit in 0..SYN_LEN * 8) {
            let mut buf = [0u8; SYN_LEN];
            r.emit(&mut buf);
            buf[bit / 8] ^= 1 << (bit % 8);
            match SynPacket::new_checked(&buf[..]) {
                Err(_) => {}
                Ok(p) => prop_assert!(!(p.ip_checksum_ok() && p.tcp_checksum_ok())),
            }
        }

        #[test]
        fn picked_sources_stay_in_their_subnet(r in any::<u64>(), prefix in 8u8..=30) {
            let s: Subnet = format!("198.19.0.0/{prefix}").parse().unwrap();
            let ip = u32::from(s.pick(r));
            let mask = u32::MAX << (32 - u32::from(prefix));
            prop_assert_eq!(ip & mask, u32::from(s.base));
            // Neither the network nor the broadcast address.
            prop_assert!(ip != u32::from(s.base) && ip != u32::from(s.base) | !mask);
        }
    }

    #[test]
    fn checksum_matches_rfc_1071_example() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2; the checksum is its
        // complement.
        assert_eq!(
            checksum(&[&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]]),
            !0xddf2
        );
        // An odd length pads with zero.
        assert_eq!(checksum(&[&[0x01]]), !0x0100);
    }

    #[test]
    fn short_or_foreign_packets_are_refused() {
        assert_eq!(
            SynPacket::new_checked(&[0u8; 10][..]).unwrap_err(),
            SynError::Truncated
        );
        let mut b = [0u8; SYN_LEN];
        SynRepr {
            src: Ipv4Addr::new(198, 19, 0, 1),
            dst: Ipv4Addr::new(198, 18, 100, 2),
            src_port: 4000,
            dst_port: 80,
            seq: 1,
            ident: 2,
            mss: 1460,
        }
        .emit(&mut b);
        let mut udp = b;
        udp[9] = 17;
        assert_eq!(
            SynPacket::new_checked(&udp[..]).unwrap_err(),
            SynError::NotIpv4Tcp
        );
        let mut ack = b;
        ack[IP_LEN + 13] = 0x10;
        assert_eq!(
            SynPacket::new_checked(&ack[..]).unwrap_err(),
            SynError::NotSyn
        );
    }

    #[test]
    fn the_rails_refuse_rates_durations_and_addresses_outside_the_lab() {
        let ok = SynFloodArgs {
            to: "198.18.100.2:8000".parse().unwrap(),
            sources: "198.19.0.0/16".parse().unwrap(),
            rate: 1000,
            duration: Duration::from_secs(5),
            seed: 1,
        };
        assert!(check(&ok).is_ok());
        let bad = |f: &dyn Fn(&mut SynFloodArgs)| {
            let mut a = ok.clone();
            f(&mut a);
            check(&a).unwrap_err().to_string()
        };
        assert!(bad(&|a| a.rate = MAX_RATE + 1).contains("--rate"));
        assert!(bad(&|a| a.rate = 0).contains("--rate"));
        assert!(bad(&|a| a.duration = Duration::from_secs(61)).contains("--duration"));
        assert!(bad(&|a| a.to = "10.0.0.1:80".parse().unwrap()).contains("lab addresses"));
        assert!(bad(&|a| a.sources = "198.16.0.0/12".parse().unwrap()).contains("lab addresses"));
        assert!(bad(&|a| a.sources = "10.0.0.0/8".parse().unwrap()).contains("lab addresses"));
        assert!("198.19.0.0".parse::<Subnet>().is_err());
        assert!("198.19.0.0/40".parse::<Subnet>().is_err());
        assert_eq!(
            "198.19.7.9/16".parse::<Subnet>().unwrap().base,
            Ipv4Addr::new(198, 19, 0, 0)
        );
    }
}
