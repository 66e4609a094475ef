//! Sans-IO forward error correction for a datagram tunnel: Reed-Solomon repair of each burst's
//! tail.
//!
//! # Why blocks, and why they must be short
//!
//! A reliable transport (QUIC here) repairs a lost packet by retransmitting it once the loss is
//! detected, about one round trip after the packet was sent. In the middle of a long transfer
//! that costs nothing but the lost bytes: new data keeps the link busy while the hole is
//! filled. At the end of a transfer — and a transfer shorter than one bandwidth-delay product is
//! all end — the receiver waits for the retransmission, so a single loss among a burst's last
//! round trip of packets adds a round trip to the transfer. At 44 Mbit/s and 300 ms a 1.2 MB
//! file is 950 packets sent in 0.26 s; at 1 % loss it almost always loses some, and finishes
//! in 0.26 + 0.3 s instead of 0.26 s.
//!
//! So the sender keeps a copy of the datagrams it sends (the *window*) and closes the window
//! with Reed-Solomon recovery shards (`reed-solomon-simd`, any `k` of `n + r` shards restore
//! the `n` originals) when it holds [`PathParams::block`] datagrams, or when the burst falls
//! idle — no datagram for [`PathParams::idle_gap`], longer than the pacer's gaps. The receiver
//! keeps what it received; once it holds as many shards as the window had datagrams it restores
//! the missing ones and hands them up as if they had arrived.
//!
//! The block bound is not an optimisation: a restored datagram is only useful if the
//! transport still accepts it. quinn discards a packet more than 128 packet numbers behind the
//! newest it received as a possible duplicate, and a packet number sent in one byte decodes
//! wrongly that far back; a window of a whole round trip (the first design) restored the
//! right datagrams and quinn dropped nearly all of them. A block of at most [`MAX_BLOCK`]
//! datagrams, repaired right after its last datagram, lands within that reach. It is also at
//! most a quarter of the path's bandwidth-delay product, so the repair arrives well before the
//! transport's own retransmission would — or, where a quarter is under [`SLOW_BLOCK`]
//! datagrams, up to half of it: small blocks need much more repair per datagram (at 5 % loss,
//! 32 % for a block of 25, 22 % for 50, 16 % for 112), and a lost datagram the transport
//! retransmits although FEC restored it costs that datagram, not time. (With a quarter, a
//! 0.36 MB transfer at 6 Mbit/s, 90 ms and 5 % loss got no blocks and reached 0.84 of its
//! target; with half, 0.97.) Paths whose bandwidth-delay product is too small for a
//! block of [`MIN_BLOCK`] get no blocks: a block's shards would cost more than the round trip
//! they save; there only the last [`MAX_SHORT`] datagrams of each burst are kept and repaired.
//!
//! Only the tail needs it: a loss more than about a round trip before the burst ends is
//! retransmitted while new data still flows, and costs the transfer nothing. The shell tells
//! the layer how many bytes the application has written towards each peer
//! ([`Fec::handle_written`]); while more than [`PathParams::tail_bytes`] of them are still
//! unsent, a full block — or a window the sender's pause closed — is let go without repair,
//! so a long transfer pays for repair only in its last stretch. (Without that information
//! every block is repaired.)
//!
//! How many shards: enough that more losses than shards is rarer than [`Config::target`], for
//! the loss the *receiver* measured and reports back in every header it sends (see [`wire`]):
//! an upper bound of its measurement that tightens as it counts more datagrams (1.5 standard
//! errors; 7.5 % for a 5 % path after one epoch of 256 datagrams, 5.7 % after eight).
//! A block the transfer goes on after gets fewer where a shard costs more than the stall it
//! is expected to prevent ([`repair_count_for_cost`]): each shard delays the rest of the
//! transfer by a datagram's time (8 ms at 1.5 Mbit/s), while a shortfall costs only the part
//! of the retransmission's delay ([`FAILURE_RTTS`]) that the rest does not cover.
//! Short exchanges — at most [`MAX_SHORT`] datagrams, a request or an answer — are protected
//! on every protected path: a lost one costs the transport's probe timeout, more than a round
//! trip, and the exchange is the whole wait. (The second pass of a deduplicated 17 MB file is
//! five datagrams each way; at 5 % loss one of them is lost every third time.) Longer bursts
//! below [`Config::min_window_bytes`] — acknowledgements flowing back beside a transfer — are
//! not; the last window of a long burst is, however small. A short exchange the application
//! wrote and that went out whole is repaired [`EXCHANGE_GAP`] after its last datagram rather
//! than the idle gap (which must outlast the pacer's pauses: 121 ms at 1.5 Mbit/s, more than
//! some round trips). The repair shares the link with the data
//! (it is sent beside the transport's pacing): its cost is `r / (block + r)` of the link while
//! repaired data flows, about 3 % at 0.1 % loss and 5 % at 1 % for a block of 112.
//!
//! # Long blocks: the receiver holds back
//!
//! Short blocks need much more repair than the loss rate, and a transfer shorter than a round
//! trip is all tail: at 44 Mbit/s, 300 ms and 5 % loss, a 1 MB file's eight blocks of 112 took
//! 138 repair datagrams for 874 (16 %), and its goodput was 0.87 of the target. One block of
//! all of it needs about 9 % for the same chance of falling short. What bounds a block is
//! only QUIC's duplicate window: a restored datagram must reach QUIC before anything
//! [`HOLD_REACH`] ahead of it. So the receiver keeps that true itself: it notes each datagram
//! missing from a run of [`Kind::Held`] datagrams (a *hole*) and holds back every datagram at
//! least [`HOLD_REACH`] ahead of the oldest hole, in order, until the hole is restored — each
//! restored datagram is then handed on in its place among the held ones — or given up: after
//! [`PathParams::hold`], when a later window's repair comes without its own, or when a
//! datagram of a window that is no long block comes (its repair went out before it).
//!
//! Holding delays acknowledgements, which would stall a sender that still has data to send,
//! so the sender makes a window long only when the rest of the transfer goes out within a
//! round trip, before it needs any of them: at its first datagram, between nothing and
//! [`PathParams::long_tail`] ([`LONG_TAIL_SHARE`] of the bandwidth-delay product) is unsent.
//! Such a window closes at [`PathParams::long_block`] datagrams ([`LONG_SHARE`] of the
//! bandwidth-delay product, so that its repair comes well within [`PathParams::hold`]) or
//! when the burst ends — at its last datagram if the application said it has nothing more
//! ([`Fec::handle_writer_idle`]), else after the idle gap — and is always repaired: the
//! receiver may be waiting for it. It also closes, once it holds a block, when the
//! application wrote more than the long tail since it opened: at the start of a large
//! transfer the writer is only a little ahead of the link, so the first window opens long as
//! a short transfer's does, and holding back for all of it would stall the sender. (A long
//! window of acknowledgements — one the application's last request opened — closes at
//! [`PathParams::block`] like any.) A
//! transfer whose first datagram finds a short exchange's window open (its request's
//! acknowledgements) closes and repairs that window first, so that the transfer's own window
//! may be long. The sender makes long windows only for a peer whose probes carry the flag
//! that it holds back (a byte after the probe's header, which older receivers ignore), and a
//! receiver holds back only with a non-zero [`PathParams::hold`].
//! Data delivered to QUIC late costs nothing: a stream cannot deliver bytes past a hole
//! anyway, and the sender has nothing left to send that the acknowledgements would release.
//!
//! # Measuring a path before data flows
//!
//! All of this hangs on the loss the receiver measured, and a tunnel that just came up has
//! measured nothing: sized for the 1 % prior, a block of 112 gets 7 shards, and at 5 % loss a
//! quarter of such blocks lose more than that — on a transfer shorter than a round trip, which
//! is sent whole before any report can come back, nearly every such transfer then waits for a
//! retransmission. So each side sends a configured peer it hears from a start-up train of
//! [`PROBE_TRAIN`] probes (a 7-byte header, numbered with the kept datagrams), paced to a tenth
//! of the link at most, enough for the peer to finish four measurement epochs; the peer's
//! report (their upper bound) comes back in the headers of whatever it sends. After the train,
//! a path without data gets a probe every [`IDLE_PROBE_GAP`] so the measurement follows the
//! path while the tunnel is idle.
//! Probes go only to configured peers ([`Fec::configure`] with a `probe_gap`) that sent a
//! non-probe datagram within [`PROBE_ALIVE`]: never to an address that merely sent a datagram,
//! and not forever to a peer whose tunnel is gone. A peer that restarted (its sequence numbers
//! jump) has lost its measurement, and gets a new train.
//!
//! # What this crate owns and what it does not
//!
//! It owns the datagram header ([`wire`]), the per-peer send windows, the receive-side store of
//! recent datagrams, the loss measurement, the choice of repair count and the Reed-Solomon
//! coding. It does no I/O and reads no clock: the shell (`headway-tunnel`'s FEC socket) passes
//! `now` and the datagrams, and sends what [`Fec::poll_transmit`] returns. It does not know
//! QUIC: a restored datagram may duplicate a retransmission, which QUIC discards.
//!
//! # Call order
//!
//! ```text
//! new ─▶ configure(addr, PathParams)*          (per known peer; others get Config::default_path)
//!   send:    header = handle_send(now, dest, payload) ─▶ send header ‖ payload
//!            (cancel_send(dest, n) if those n datagrams could not be sent after all)
//!            handle_sent(now, dest) once they went out, then drain poll_transmit() and send
//!   receive: handle_recv(now, src, datagram) ─▶ Received::Data { offset } → deliver datagram[offset..]
//!                                               Received::Plain → deliver datagram as it is
//!                                               Received::Held → deliver nothing now
//!            then drain poll_recovered() and deliver those too, after the ones above
//!   timer:   at poll_timeout(): handle_timeout(now), then drain poll_transmit() and send,
//!            and drain poll_recovered() (held datagrams a hold's end released)
//! ```
//!
//! # Invariants
//!
//! - Memory is bounded: per peer at most [`Config::max_window`] kept datagrams on each side, a
//!   few pending repair windows, at most 1.5 × [`Config::max_window`] datagrams held back
//!   behind at most 512 holes, and at most [`Config::max_peers`] peers (the least recently
//!   active is forgotten first).
//! - A datagram is handed on once, whether directly, restored or after being held back;
//!   no hole holds datagrams back for longer than [`PathParams::hold`].
//! - A restored datagram is exactly one the peer sent, or — when shards were forged or
//!   mismatched — bytes QUIC's packet protection rejects; nothing is decided on its content.
//! - A datagram without an FEC kind byte passes through untouched ([`Received::Plain`]), so an
//!   FEC receiver also accepts a peer that sends without FEC.

#![forbid(unsafe_code)]

mod loss;
pub mod wire;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

use loss::LossEstimator;
pub use loss::{repair_count, repair_count_for_cost};
use wire::{Header, Kind, LossReport, RepairHeader};

/// The largest datagram payload the layer keeps for repair (a shard holds its length in 2
/// bytes; QUIC datagrams are far smaller).
pub const MAX_KEPT: usize = 16 * 1024;
/// The most datagrams one window covers: a datagram restored from its repair is then within
/// reach of QUIC's duplicate window and packet-number decoding (128 packets; see the crate
/// doc), with room for the repair itself and a send batch of slack.
pub const MAX_BLOCK: usize = 112;
/// How far behind the newest datagram QUIC was handed a restored one may be and still be
/// accepted: a receiver holds datagrams this far ahead of a missing datagram of a long block
/// back (see the crate doc: long blocks).
pub const HOLD_REACH: u32 = MAX_BLOCK as u32;
/// A transfer's last block may cover up to this share of the bandwidth-delay product when
/// the receiver holds back for it (see the crate doc: long blocks).
pub const LONG_SHARE: f64 = 0.6;
/// Long blocks are used only for the last this share of the bandwidth-delay product of a
/// transfer (see [`PathParams::long_tail`]).
pub const LONG_TAIL_SHARE: f64 = 0.9;
/// A long block opens in the middle of a burst only when the application wrote nothing for
/// this fraction (1/n) of the RTT.
const WRITER_DONE_RTTS: u32 = 8;
/// The most datagrams a long block covers.
pub const MAX_LONG_BLOCK: usize = 1536;
/// Most missing datagrams a receiver waits for per peer (a larger gap is a loss burst no
/// repair covers, or a restart).
const MAX_HOLES: usize = 512;
/// The flag a probe's byte after the header carries when its sender holds back for long
/// blocks (older receivers ignore a probe's body).
const PROBE_HOLDS: u8 = 1;
/// Blocks grow past a quarter of the bandwidth-delay product towards half of it up to this
/// many datagrams (see the crate doc: slow links).
pub const SLOW_BLOCK: usize = 64;
/// The fewest datagrams a block must be allowed to reach for a path to get block repair
/// (a path of at least 32 packets in flight). Since only a transfer's tail is repaired, this
/// is low: at 6 Mbit/s and 200–300 ms, blocks of 25–37 took a 0.36 MB transfer at 5 % loss
/// from 0.69–0.79 of its target goodput to 0.94–0.99, where a lost tail packet had cost a
/// round trip; below 16, the repair would come too late or cost more than it saves.
pub const MIN_BLOCK: usize = 16;
/// A burst of at most this many datagrams and under [`Config::min_window_bytes`] is a short
/// exchange (a request, an answer, a handshake flight) and is protected on every protected
/// path; on a path without blocks, the last this many datagrams of every burst are.
pub const MAX_SHORT: usize = 8;
/// Full blocks whose datagrams average fewer bytes than this are acknowledgements flowing
/// back beside a transfer: they are let go without repair (a lost acknowledgement is covered
/// by the next).
pub const ACK_LIKE_LEN: usize = 256;
/// Probes of the start-up train: four measurement epochs of the receiver and their slack, so
/// that the peer's estimate when the train ends is tight enough to size repair with (its
/// reported bound for a clean path: 0.87 % after one epoch, 0.22 % after four; for a 5 % path
/// 7.5 % and 6.0 %). At a tenth of a 1.5 Mbit/s link the train takes 2.8 s.
pub const PROBE_TRAIN: u32 = 4 * loss::EPOCH + loss::SLACK;
/// The share of the link rate the start-up train may take.
pub const PROBE_TRAIN_SHARE: f64 = 0.1;
/// The shortest gap between probes of the train.
pub const MIN_PROBE_GAP: Duration = Duration::from_micros(250);
/// The gap between probes once the train is over (while no data flows: see the crate doc).
pub const IDLE_PROBE_GAP: Duration = Duration::from_millis(100);
/// A peer is probed only while a non-probe datagram from it arrived within this long.
pub const PROBE_ALIVE: Duration = Duration::from_secs(15);
/// Most probes one [`Fec::handle_timeout`] sends to a peer (a late timer does not make a burst).
const MAX_PROBES_AT_ONCE: u32 = 16;
/// A short exchange all of whose written bytes went out is repaired when nothing more was sent
/// for this long (or the idle gap, if shorter): the application's next write of the same
/// answer usually follows within it, and no pacer pause can hold back what was never written.
pub const EXCHANGE_GAP: Duration = Duration::from_millis(5);
/// What a block whose repair falls short costs, in round trips: the transport finds the loss
/// after its time threshold (9/8 RTT, and at most this when it waits for repair, as the
/// tunnel's does) and the retransmission arrives with the one-way delay the lost datagram
/// would have had.
pub const FAILURE_RTTS: f64 = 1.5;
/// The datagram size [`PathParams::packet_time`] is for, to turn unsent bytes into time.
const FULL_DATAGRAM: u64 = 1500;
/// Bytes added to a data datagram.
pub const OVERHEAD: usize = Header::LEN;
/// Bytes a repair datagram has beyond the largest datagram of its window (headers, the
/// shard's length prefix and one byte of padding to an even size).
pub const REPAIR_OVERHEAD: usize = Header::LEN + RepairHeader::LEN + 3;

/// Settings for all peers.
#[derive(Clone, Debug)]
pub struct Config {
    /// Path settings for an address that was not [`Fec::configure`]d.
    pub default_path: PathParams,
    /// Most kept datagrams per peer and direction; a window never covers more. Default 2,048.
    pub max_window: usize,
    /// Most recovery shards per window. Default 256.
    pub max_repair: usize,
    /// Bursts smaller than this are not protected (a single request, a few small packets).
    /// Default 8 KiB.
    pub min_window_bytes: usize,
    /// Datagrams shorter than this are neither kept nor counted as burst activity. Default
    /// 20 bytes (every QUIC packet is longer: a small request or answer is protected too).
    pub min_kept_len: usize,
    /// Acceptable chance that a window loses more datagrams than it has shards. Default 1e-3.
    pub target: f64,
    /// The loss assumed before the receiver reported any, and the least ever assumed.
    /// Defaults 1 % and 0.1 %.
    pub prior_loss: f64,
    /// See `prior_loss`.
    pub min_loss: f64,
    /// Most peers with state. Default 64.
    pub max_peers: usize,
    /// The sequence number of the first datagram to each peer. Default 0; a shell should pick
    /// it at random, so that a peer can tell a restart from old datagrams.
    pub first_seq: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            default_path: PathParams::for_link(100_000_000, Duration::from_millis(100)),
            max_window: 2048,
            max_repair: 256,
            min_window_bytes: 8 * 1024,
            min_kept_len: 20,
            target: 1e-3,
            prior_loss: 0.01,
            min_loss: 0.001,
            max_peers: 64,
            first_seq: 0,
        }
    }
}

/// How one path (one peer address) is protected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathParams {
    /// Keep sent datagrams and repair short exchanges (see [`MAX_SHORT`]). Off, datagrams
    /// still carry the header (the receiver's loss reports flow) but are never covered.
    pub protect: bool,
    /// Also repair full blocks near the end of a transfer and a long burst's last window,
    /// however small; without, only the last [`MAX_SHORT`] datagrams of a burst are kept.
    pub blocks: bool,
    /// No datagram for this long means the burst ended: send its repair.
    pub idle_gap: Duration,
    /// How far back a window reaches: datagrams sent longer ago than this were either
    /// acknowledged or already retransmitted by the transport.
    pub span: Duration,
    /// A window holding this many datagrams is closed with its repair at once (at most
    /// [`MAX_BLOCK`]), without waiting for the burst to end.
    pub block: usize,
    /// A full block is repaired only when at most this many bytes the application wrote are
    /// still unsent (see [`Fec::handle_written`]): losses further from the end of a transfer
    /// are retransmitted in time by the transport.
    pub tail_bytes: u64,
    /// The gap between the probes of the start-up train (see the crate doc); `None`: the
    /// path is not probed.
    pub probe_gap: Option<Duration>,
    /// How long a full-size datagram takes on the link: what each repair shard of a block
    /// the transfer goes on after costs it (see [`repair_count_for_cost`]). Zero: repair is
    /// sized by [`Config::target`] alone.
    pub packet_time: Duration,
    /// The path's round-trip time: a block whose repair falls short waits for the
    /// transport's retransmission, about [`FAILURE_RTTS`] of it.
    pub rtt: Duration,
    /// The most datagrams of a transfer's last block, when the peer holds back for it (see
    /// the crate doc: long blocks); zero, or not above [`PathParams::block`]: no long blocks.
    pub long_block: usize,
    /// A window is a long block only when at most this many bytes the application wrote are
    /// unsent at its first datagram: the rest of the transfer then goes out within a round
    /// trip, before any acknowledgement a receiver holds back could be needed.
    pub long_tail: u64,
    /// How long this side holds datagrams from the peer back behind a missing datagram of a
    /// long block; zero: it does not, and its probes do not say it does.
    pub hold: Duration,
}

impl PathParams {
    /// Parameters for a link of `rate_bps` and round-trip time `rtt`: a block of a quarter of
    /// the bandwidth-delay product, or up to half of it where a quarter is under
    /// [`SLOW_BLOCK`] in full packets, at most [`MAX_BLOCK`]; protection on links
    /// up to 1 Gbit/s (a WAN; beyond, the copies cost more than tail losses), with blocks where
    /// the block reaches [`MIN_BLOCK`]; an idle gap of 1.5 × the time to send a pacing burst of
    /// 10 full packets plus 1 ms (at least 2 ms); a span of 1.5 × RTT plus the gap; a tail of
    /// 1.5 × the bandwidth-delay product; probes on protected paths, the train paced to
    /// [`PROBE_TRAIN_SHARE`] of the rate (at most one per [`MIN_PROBE_GAP`]); long blocks of
    /// [`LONG_SHARE`] of the bandwidth-delay product (at most [`MAX_LONG_BLOCK`]) where that
    /// is longer than a block, for the last [`LONG_TAIL_SHARE`] of it, and a hold of one
    /// RTT, on paths with blocks.
    pub fn for_link(rate_bps: u64, rtt: Duration) -> Self {
        const PACKET_BITS: f64 = 1500.0 * 8.0;
        let rate = rate_bps.max(8_000) as f64;
        let burst = Duration::from_secs_f64(10.0 * PACKET_BITS / rate);
        let idle_gap =
            (burst.mul_f64(1.5) + Duration::from_millis(1)).max(Duration::from_millis(2));
        let bdp_packets = rate * rtt.as_secs_f64() / PACKET_BITS;
        let quarter = (bdp_packets / 4.0) as usize;
        let half = (bdp_packets / 2.0) as usize;
        let block = quarter.max(half.min(SLOW_BLOCK)).min(MAX_BLOCK);
        let long_block = ((bdp_packets * LONG_SHARE) as usize).min(MAX_LONG_BLOCK);
        let protect = rate_bps <= 1_000_000_000;
        // A probe on the wire: its header and the UDP and IPv4 headers.
        let probe_bits = ((Header::LEN + 28) * 8) as f64;
        let probe_gap =
            Duration::from_secs_f64(probe_bits / (PROBE_TRAIN_SHARE * rate)).max(MIN_PROBE_GAP);
        Self {
            protect,
            blocks: protect && block >= MIN_BLOCK,
            idle_gap,
            span: rtt.mul_f64(1.5) + idle_gap,
            block: block.max(1),
            tail_bytes: (bdp_packets * 1.5 * PACKET_BITS / 8.0) as u64,
            probe_gap: protect.then_some(probe_gap),
            packet_time: Duration::from_secs_f64(PACKET_BITS / rate),
            rtt,
            long_block: if long_block > block && protect && block >= MIN_BLOCK {
                long_block
            } else {
                0
            },
            long_tail: (bdp_packets * LONG_TAIL_SHARE * PACKET_BITS / 8.0) as u64,
            hold: if protect && block >= MIN_BLOCK {
                rtt
            } else {
                Duration::ZERO
            },
        }
    }
}

/// What [`Fec::handle_recv`] found in a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// A data datagram: deliver `datagram[offset..]`.
    Data {
        /// Where the payload starts.
        offset: usize,
    },
    /// Not an FEC datagram: deliver it whole.
    Plain,
    /// A repair shard, consumed (restored datagrams, if any, wait in [`Fec::poll_recovered`]).
    Repair,
    /// A probe, consumed (counted by the loss measurement).
    Probe,
    /// A data datagram held back behind a missing one of a long block, or behind restored
    /// datagrams not yet taken: it comes out of [`Fec::poll_recovered`], after the missing
    /// one if that is restored in time.
    Held,
    /// A malformed FEC datagram: drop it.
    Invalid,
}

/// Counters of one [`Fec`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Data datagrams sent.
    pub data_sent: u64,
    /// Of those, kept for repair.
    pub kept_sent: u64,
    /// Windows repaired (bursts that ended with repair).
    pub windows: u64,
    /// Full blocks let go without repair, far from the end of a transfer.
    pub skipped: u64,
    /// Repair datagrams sent.
    pub repair_sent: u64,
    /// Data datagrams received.
    pub data_received: u64,
    /// Datagrams received without an FEC header.
    pub plain_received: u64,
    /// Repair datagrams received.
    pub repair_received: u64,
    /// Datagrams restored from repair.
    pub recovered: u64,
    /// Windows with more missing datagrams than repair that arrived in time.
    pub unrecoverable: u64,
    /// Malformed FEC datagrams dropped.
    pub invalid: u64,
    /// Probes sent.
    pub probes_sent: u64,
    /// Probes received.
    pub probes_received: u64,
    /// Data datagrams held back behind a missing datagram of a long block.
    pub held: u64,
    /// Missing datagrams of long blocks given up on: after [`PathParams::hold`], when a
    /// later window's repair came without theirs, or a datagram of a window that is no long
    /// block.
    pub holes_given_up: u64,
}

/// A datagram kept by the sender.
#[derive(Debug)]
struct Sent {
    at: Instant,
    data: Vec<u8>,
}

/// A window's repair shards, gathered by the receiver.
#[derive(Debug)]
struct Pending {
    header: RepairHeader,
    shard_bytes: usize,
    shards: Vec<(u16, Vec<u8>)>,
    /// Sequence numbers of the window not received (refreshed as data arrives).
    missing: Vec<u32>,
}

/// Windows a receiver gathers at once per peer.
const MAX_PENDING: usize = 8;
/// Repaired or complete windows remembered, so their late shards are ignored.
const MAX_DONE: usize = 64;

#[derive(Debug)]
struct Peer {
    params: PathParams,
    /// Set by [`Fec::configure`]: only such peers are probed.
    configured: bool,
    last_active: Instant,
    /// When the last non-probe FEC datagram from the peer arrived.
    heard: Option<Instant>,
    /// Probes sent since the peer was first heard or last restarted.
    probes: u32,
    /// When the next probe is due, once the peer was heard.
    next_probe: Option<Instant>,
    // Sending to the peer.
    next_seq: u32,
    window_first: u32,
    window: VecDeque<Sent>,
    window_bytes: usize,
    last_send: Option<Instant>,
    /// A block of the current burst was already repaired: the burst's last window is
    /// protected however small.
    in_burst: bool,
    /// Bytes the application wrote towards the peer, and payload bytes sent to it, since the
    /// layer started; `written` never trails `sent`, so their difference is what is unsent.
    written: u64,
    sent: u64,
    /// `written` when the open window's first datagram went out.
    window_written: u64,
    /// The application wrote since the window last closed: a short window all of whose bytes
    /// went out is an exchange the application finished, repaired after [`EXCHANGE_GAP`].
    fresh: bool,
    /// When the application last wrote towards the peer.
    last_write: Option<Instant>,
    /// The application said it has nothing more for now, and wrote nothing since
    /// ([`Fec::handle_writer_idle`]).
    writer_idle: bool,
    /// The peer's measurement of the loss of what we send it.
    reported: LossReport,
    /// The peer's probes say it holds back for long blocks.
    peer_holds: bool,
    /// The open window is a long block (its datagrams are [`Kind::Held`]).
    long: bool,
    // Receiving from the peer.
    loss: LossEstimator,
    kept: HashMap<u32, Vec<u8>>,
    kept_order: VecDeque<u32>,
    pending: VecDeque<Pending>,
    done: VecDeque<(u32, u16)>,
    /// Missing datagrams of the peer's long blocks still waited for, oldest first, with when
    /// they were found missing.
    holes: VecDeque<(u32, Instant)>,
    /// The newest numbered datagram received (data or probe).
    newest: Option<u32>,
    /// Datagram payloads held back behind the oldest hole, in arrival order.
    held: VecDeque<(u32, Vec<u8>)>,
}

impl Peer {
    fn new(params: PathParams, configured: bool, now: Instant, cfg: &Config) -> Self {
        Self {
            params,
            configured,
            last_active: now,
            heard: None,
            probes: 0,
            next_probe: None,
            next_seq: cfg.first_seq,
            window_first: cfg.first_seq,
            window: VecDeque::new(),
            window_bytes: 0,
            last_send: None,
            in_burst: false,
            written: 0,
            sent: 0,
            window_written: 0,
            fresh: false,
            last_write: None,
            writer_idle: false,
            reported: LossReport::UNKNOWN,
            peer_holds: false,
            long: false,
            loss: LossEstimator::new(),
            kept: HashMap::new(),
            kept_order: VecDeque::new(),
            pending: VecDeque::new(),
            done: VecDeque::new(),
            holes: VecDeque::new(),
            newest: None,
            held: VecDeque::new(),
        }
    }

    /// What this side measured of the loss from the peer, for the headers it sends: the bound
    /// the peer should provision repair for (see `loss::LossEstimator::bound`).
    fn loss_report(&self) -> LossReport {
        self.loss
            .bound()
            .map_or(LossReport::UNKNOWN, LossReport::from_fraction)
    }

    /// When the next probe is due: a configured, probed path, heard from recently, with no
    /// window open (a probe takes a sequence number, which must not split a window).
    fn probe_due(&self) -> Option<Instant> {
        self.params.probe_gap?;
        let at = self.next_probe?;
        let heard = self.heard?;
        (self.configured && self.window.is_empty() && at <= heard + PROBE_ALIVE).then_some(at)
    }

    /// Whether a window opened now is a long block: the rest of the transfer goes out within
    /// a round trip, so holding its datagrams back delays only acknowledgements the sender
    /// does not wait for. In the middle of a burst, only once the application stopped
    /// writing: a sender that keeps up with a slow writer has little unsent all along, and
    /// holding acknowledgements back there inflates its round-trip time and slows its pacing
    /// (a 17 MB DOC-like file at 44 Mbit/s, 300 ms, 5 %: 1.21 s against 1.16 s without long
    /// blocks).
    fn long_now(&self, now: Instant) -> bool {
        let unsent = self.written - self.sent;
        let writer_done = !self.in_burst
            || self.last_write.is_none_or(|t| {
                now.saturating_duration_since(t) >= self.params.rtt / WRITER_DONE_RTTS
            });
        self.peer_holds
            && self.params.blocks
            && self.params.long_block > self.params.block
            && unsent > 0
            && unsent <= self.params.long_tail
            && writer_done
    }

    /// Whether a long block's transfer ended: the application said it has nothing more for
    /// now and all it wrote went out (see [`Fec::handle_writer_idle`]).
    fn transfer_ended(&self) -> bool {
        self.long && self.writer_idle && self.written <= self.sent
    }

    /// Whether the open window's datagrams went out as [`Kind::Held`]: the peer may be
    /// holding datagrams back for its repair, which must come.
    fn holds_back(&self) -> bool {
        self.long && !self.window.is_empty()
    }

    /// When the open burst counts as ended (see [`EXCHANGE_GAP`]), if a window is open.
    fn burst_end(&self) -> Option<Instant> {
        if self.window.is_empty() {
            return None;
        }
        let finished = self.fresh
            && !self.in_burst
            && self.window.len() <= MAX_SHORT
            && self.written <= self.sent;
        let gap = if finished {
            self.params.idle_gap.min(EXCHANGE_GAP)
        } else if self.transfer_ended() {
            Duration::ZERO
        } else {
            self.params.idle_gap
        };
        self.last_send.map(|t| t + gap)
    }

    fn clear_window(&mut self) {
        self.fresh = false;
        self.long = false;
        self.window.clear();
        self.window_bytes = 0;
        self.window_first = self.next_seq;
    }

    /// Drops kept datagrams older than the span.
    fn trim(&mut self, now: Instant) {
        while let Some(front) = self.window.front() {
            if now.saturating_duration_since(front.at) <= self.params.span {
                break;
            }
            self.window_bytes -= front.data.len();
            self.window.pop_front();
            self.window_first = self.window_first.wrapping_add(1);
        }
    }

    fn keep_received(&mut self, seq: u32, data: Vec<u8>, max: usize) {
        if self.kept.insert(seq, data).is_none() {
            self.kept_order.push_back(seq);
        }
        while self.kept_order.len() > max {
            if let Some(old) = self.kept_order.pop_front() {
                self.kept.remove(&old);
            }
        }
    }

    /// The peer restarted: what it sent before is forgotten, and it has lost its measurement of
    /// this side's sending, so it gets a new train.
    fn restarted(&mut self, now: Instant) {
        self.forget_received();
        self.probes = 0;
        self.next_probe = Some(now);
    }

    fn forget_received(&mut self) {
        self.kept.clear();
        self.kept_order.clear();
        self.pending.clear();
        self.done.clear();
        self.holes.clear();
        self.newest = None;
        self.held.clear();
    }

    /// Notes a numbered datagram from the peer for the holes of its long blocks: one that was
    /// missing has come after all, and a [`Kind::Held`] one past a gap makes the gap's
    /// datagrams holes. (The gap's first datagrams may have been the end of the window before,
    /// or a probe: such a hole is given up when the long block's repair comes.)
    fn note_arrival(&mut self, now: Instant, seq: u32, held: bool) {
        if let Some(i) = self.holes.iter().position(|(s, _)| *s == seq) {
            self.holes.remove(i);
            return;
        }
        let Some(last) = self.newest else {
            self.newest = Some(seq);
            return;
        };
        let ahead = seq.wrapping_sub(last);
        if ahead == 0 || ahead >= 1 << 31 {
            return;
        }
        if held && !self.params.hold.is_zero() && ahead as usize <= MAX_HOLES {
            for i in 1..ahead {
                if self.holes.len() >= MAX_HOLES {
                    self.holes.pop_front();
                }
                self.holes.push_back((last.wrapping_add(i), now));
            }
        }
        self.newest = Some(seq);
    }

    /// Whether a datagram numbered `seq` must wait behind the oldest hole: what is already
    /// waiting does (the order is kept), and so does one at least [`HOLD_REACH`] ahead of it.
    fn must_hold(&self, seq: u32) -> bool {
        !self.params.hold.is_zero() && (!self.held.is_empty() || self.beyond_reach(seq))
    }

    /// Whether QUIC, handed a datagram numbered `seq`, would no longer accept the oldest hole.
    fn beyond_reach(&self, seq: u32) -> bool {
        self.holes
            .front()
            .is_some_and(|(m, _)| (HOLD_REACH..1 << 31).contains(&seq.wrapping_sub(*m)))
    }

    /// When the oldest hole is given up on, while datagrams wait behind it.
    fn hold_end(&self) -> Option<Instant> {
        if self.held.is_empty() {
            return None;
        }
        self.oldest_hole_end()
    }

    /// When the oldest hole's hold ends, whether or not anything waits behind it.
    fn oldest_hole_end(&self) -> Option<Instant> {
        self.holes.front().map(|(_, at)| *at + self.params.hold)
    }

    /// Gives up the holes waited for longer than [`PathParams::hold`] and those before
    /// `before`: [`Passed::Repair`], a later window's repair came, gives up those no gathered
    /// repair covers; [`Passed::Window`], a datagram of a window that is no long block came
    /// (the long block's repair went out before it), all of them. Then releases the held
    /// datagrams no remaining hole needs held. Returns the holes given up.
    fn release(
        &mut self,
        now: Instant,
        before: Option<(u32, Passed)>,
        out: &mut VecDeque<(SocketAddr, Vec<u8>)>,
        addr: SocketAddr,
    ) -> u64 {
        let mut given_up = 0;
        let hold = self.params.hold;
        let pending = &self.pending;
        self.holes.retain(|(seq, at)| {
            let expired = now.saturating_duration_since(*at) >= hold;
            let passed = before.is_some_and(|(b, why)| {
                b.wrapping_sub(*seq).wrapping_sub(1) < 1 << 31
                    && (why == Passed::Window
                        || !pending
                            .iter()
                            .any(|p| seq.wrapping_sub(p.header.first) < u32::from(p.header.count)))
            });
            given_up += u64::from(expired || passed);
            !(expired || passed)
        });
        while let Some(seq) = self.held.front().map(|(s, _)| *s) {
            if self.beyond_reach(seq) {
                break;
            }
            if let Some((_, d)) = self.held.pop_front() {
                out.push_back((addr, d));
            }
        }
        given_up
    }
}

/// What moved a receiver past a hole (see `Peer::release`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Passed {
    /// The repair of a later window.
    Repair,
    /// A datagram of a window that is no long block.
    Window,
}

/// The sans-IO FEC layer of one socket (see the crate doc for the call order).
#[derive(Debug)]
pub struct Fec {
    config: Config,
    paths: HashMap<SocketAddr, PathParams>,
    peers: HashMap<SocketAddr, Peer>,
    transmits: VecDeque<(SocketAddr, Vec<u8>)>,
    recovered: VecDeque<(SocketAddr, Vec<u8>)>,
    scratch: Vec<u8>,
    coders: Coders,
    stats: Stats,
}

impl Fec {
    /// An FEC layer with no peers yet.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            paths: HashMap::new(),
            peers: HashMap::new(),
            transmits: VecDeque::new(),
            recovered: VecDeque::new(),
            scratch: Vec::new(),
            coders: Coders::new(),
            stats: Stats::default(),
        }
    }

    /// Sets the path parameters of `addr` (a configured peer).
    pub fn configure(&mut self, addr: SocketAddr, params: PathParams) {
        self.paths.insert(addr, params);
        if let Some(p) = self.peers.get_mut(&addr) {
            p.params = params;
            p.configured = true;
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The loss of the path to `addr` as the peer last reported it (an upper bound of its
    /// measurement: what repair is sized for), and of the path from it as measured here (the
    /// mean); `None` for what is not measured yet (or a peer without state).
    pub fn path_loss(&self, addr: SocketAddr) -> (Option<f64>, Option<f64>) {
        self.peers
            .get(&addr)
            .map_or((None, None), |p| (p.reported.fraction(), p.loss.fraction()))
    }

    /// The header for a data datagram of `payload` about to be sent to `dest`; keeps a copy of
    /// the payload when the path is protected and the datagram is at least
    /// [`Config::min_kept_len`] long. Only kept datagrams take a sequence number and count as
    /// activity of the burst: acknowledgements and probes after a burst do not hold its repair
    /// back.
    pub fn handle_send(
        &mut self,
        now: Instant,
        dest: SocketAddr,
        payload: &[u8],
    ) -> [u8; Header::LEN] {
        let max_window = self.config.max_window;
        let min_kept = self.config.min_kept_len;
        let min_window_bytes = self.config.min_window_bytes;
        let peer = peer_entry(&mut self.peers, &self.paths, &self.config, now, dest);
        let keep = peer.params.protect && (min_kept..=MAX_KEPT).contains(&payload.len());
        // A transfer's first datagram that finds a short exchange's window open (the
        // acknowledgements of its request, sent a few milliseconds before the answer came):
        // that window is closed and repaired here, so that the transfer opens a window of its
        // own, which may be long. (Left open, it took the transfer's first block and the
        // transfer went out in short blocks: a 1 MB file at 44 Mbit/s, 300 ms and 5 % loss
        // in windows of 116 and 118 datagrams.)
        if keep
            && !peer.window.is_empty()
            && !peer.long
            && !peer.in_burst
            && peer.window.len() <= MAX_SHORT
            && peer.window_bytes < min_window_bytes
            && peer.long_now(now)
        {
            self.repair_exchange(now, dest);
        }
        let peer = peer_entry(&mut self.peers, &self.paths, &self.config, now, dest);
        let seq = peer.next_seq;
        if keep {
            peer.next_seq = seq.wrapping_add(1);
            peer.last_send = Some(now);
            peer.trim(now);
            if peer.window.is_empty() {
                peer.window_first = seq;
                peer.window_written = peer.written;
                peer.long = peer.long_now(now);
            }
            let cap = if peer.params.blocks {
                max_window
            } else {
                MAX_SHORT
            };
            if peer.window.len() >= cap.max(1) {
                if let Some(old) = peer.window.pop_front() {
                    peer.window_bytes -= old.data.len();
                    peer.window_first = peer.window_first.wrapping_add(1);
                }
            }
            peer.window.push_back(Sent {
                at: now,
                data: payload.to_vec(),
            });
            peer.window_bytes += payload.len();
        }
        // Retransmissions and packet headers count as sent too: the unsent estimate errs
        // towards repairing early.
        peer.sent = peer.sent.saturating_add(payload.len() as u64);
        peer.written = peer.written.max(peer.sent);
        let loss = peer.loss_report();
        self.stats.data_sent += 1;
        self.stats.kept_sent += u64::from(keep);
        Header {
            kind: match (keep, peer.long) {
                (false, _) => Kind::Data,
                (true, false) => Kind::Kept,
                (true, true) => Kind::Held,
            },
            seq,
            loss,
        }
        .emit()
    }

    /// The datagrams of the last [`Fec::handle_send`] calls to `dest` went out: if its window
    /// holds a block, it is closed and its repair waits in [`Fec::poll_transmit`]. (Called
    /// after the send rather than from `handle_send` so that repair never covers datagrams
    /// that were taken back.)
    pub fn handle_sent(&mut self, now: Instant, dest: SocketAddr) {
        let Some(peer) = self.peers.get_mut(&dest) else {
            return;
        };
        if peer.transfer_ended() {
            self.repair(now, dest);
            return;
        }
        if peer.long && peer.written - peer.sent > peer.params.long_tail {
            // The application wrote more than a long block's tail since the window opened:
            // this is no end of a transfer, so the window is closed (and repaired) now.
            self.repair(now, dest);
            return;
        }
        if peer.long
            && peer.window.len() >= peer.params.block
            && peer.written - peer.window_written > peer.params.long_tail
        {
            // A block's length into a long window, and the application wrote more than a
            // long tail since it opened: a transfer larger than the sender's window, which
            // the receiver's holding back would stall. Closed like a block. (At the start of
            // a transfer the encoder feeding the tunnel is ahead of the link only by what it
            // has coded so far, so a large transfer's first window finds little unsent and
            // opens long, as a short transfer's does. Until the unsent bytes passed the long
            // tail — a 12 MB DOC-like file at 44 Mbit/s, 300 ms, 5 % loss: 498 datagrams,
            // 136 ms of link — the receiver held acknowledgements back behind its holes
            // while the sender's window is 1.15 round trips of the link: the link idled
            // 4–9 % of the download at 1 % and 5 % loss.)
            self.repair(now, dest);
            return;
        }
        if !peer.params.blocks || peer.window.len() < peer.params.block {
            return;
        }
        let ack_like = peer.window_bytes < peer.window.len() * ACK_LIKE_LEN;
        if ack_like && !peer.holds_back() {
            // Acknowledgements of what the peer sends: not worth repair.
            peer.clear_window();
            return;
        }
        if peer.long && !ack_like && peer.window.len() < peer.params.long_block {
            return;
        }
        if peer.written - peer.sent > peer.params.tail_bytes && !peer.holds_back() {
            peer.clear_window();
            peer.in_burst = true;
            self.stats.skipped += 1;
            return;
        }
        self.repair(now, dest);
    }

    /// The application wrote `bytes` more towards `dest` (stream data handed to the
    /// transport). Only the difference to what was sent matters: see [`PathParams::tail_bytes`].
    pub fn handle_written(&mut self, now: Instant, dest: SocketAddr, bytes: u64) {
        let peer = self.peer(now, dest);
        peer.written = peer.written.saturating_add(bytes);
        peer.fresh |= bytes > 0;
        if bytes > 0 {
            peer.last_write = Some(now);
            peer.writer_idle = false;
        }
    }

    /// The application has nothing more to write towards `dest` for now (it flushed what it
    /// had and waits for its own input). A long block is then repaired as soon as all that
    /// was written went out — at once if it did already — rather than after the idle gap:
    /// the receiver may be holding the transfer's last datagrams back for that repair (a
    /// 1 MB DOC-like file at 44 Mbit/s, 300 ms, 5 % loss: the repair left 6.4 ms after the
    /// last datagram with the idle gap). Any write clears it. (It cannot come from timing
    /// alone: the start of a burst, where coding sets the pace, leaves the link idle for up
    /// to 5 ms with everything written sent; a 1 ms timer split a transfer's long block
    /// there into blocks of 13 to 32 datagrams.)
    pub fn handle_writer_idle(&mut self, now: Instant, dest: SocketAddr) {
        let peer = self.peer(now, dest);
        peer.writer_idle = true;
    }

    /// Takes back the last `sent` [`Fec::handle_send`] calls to `dest`, of which `kept` returned
    /// a [`Kind::Kept`] or [`Kind::Held`] header (their datagrams could not be sent), so that
    /// sequence numbers stay consecutive on the wire.
    pub fn cancel_send(&mut self, dest: SocketAddr, sent: usize, kept: usize) {
        let Some(peer) = self.peers.get_mut(&dest) else {
            return;
        };
        for _ in 0..kept {
            peer.next_seq = peer.next_seq.wrapping_sub(1);
            let last = peer.window_first.wrapping_add(peer.window.len() as u32);
            if !peer.window.is_empty() && last.wrapping_sub(1) == peer.next_seq {
                if let Some(s) = peer.window.pop_back() {
                    peer.window_bytes -= s.data.len();
                }
            }
        }
        if peer.window.is_empty() {
            peer.window_first = peer.next_seq;
        }
        self.stats.data_sent = self.stats.data_sent.saturating_sub(sent as u64);
        self.stats.kept_sent = self.stats.kept_sent.saturating_sub(kept as u64);
    }

    /// Reads the FEC header of a datagram received from `src` (see [`Received`]).
    pub fn handle_recv(&mut self, now: Instant, src: SocketAddr, datagram: &[u8]) -> Received {
        let header = match Header::parse(datagram) {
            Ok(h) => h,
            Err(wire::WireError::NotFec) => {
                self.stats.plain_received += 1;
                return Received::Plain;
            }
            Err(_) => {
                self.stats.invalid += 1;
                return Received::Invalid;
            }
        };
        let max_kept = self.config.max_window + self.config.max_window / 2;
        let peer = peer_entry(&mut self.peers, &self.paths, &self.config, now, src);
        peer.reported = header.loss;
        if header.kind != Kind::Probe {
            peer.heard = Some(now);
            if peer.next_probe.is_none() {
                peer.next_probe = Some(now);
            }
        }
        let body = &datagram[Header::LEN..];
        match header.kind {
            Kind::Probe => {
                if peer.loss.on_datagram(header.seq) {
                    peer.restarted(now);
                }
                peer.peer_holds = body.first().is_some_and(|f| f & PROBE_HOLDS != 0);
                peer.note_arrival(now, header.seq, false);
                self.stats.probes_received += 1;
                Received::Probe
            }
            Kind::Data | Kind::Kept | Kind::Held => {
                // Only kept datagrams are numbered (a data datagram repeats the next number).
                if header.kind != Kind::Data {
                    if peer.loss.on_datagram(header.seq) {
                        peer.restarted(now);
                    }
                    if body.len() <= MAX_KEPT {
                        peer.keep_received(header.seq, body.to_vec(), max_kept);
                    }
                    peer.note_arrival(now, header.seq, header.kind == Kind::Held);
                    if header.kind == Kind::Kept && !peer.holes.is_empty() {
                        let before = Some((header.seq, Passed::Window));
                        self.stats.holes_given_up +=
                            peer.release(now, before, &mut self.recovered, src);
                    }
                }
                self.stats.data_received += 1;
                if peer.oldest_hole_end().is_some_and(|t| now >= t) {
                    // A hole waited for too long (nothing was held behind it, so no timer
                    // gave it up): it holds nothing back any more.
                    self.stats.holes_given_up += peer.release(now, None, &mut self.recovered, src);
                }
                while peer.held.len() >= max_kept && peer.holes.pop_front().is_some() {
                    // Never more than a window's worth waits: the oldest hole is given up.
                    self.stats.holes_given_up += 1;
                    self.stats.holes_given_up += peer.release(now, None, &mut self.recovered, src);
                }
                if body.is_empty() {
                    // Nothing to hand on, in any order.
                } else if peer.must_hold(header.seq) {
                    peer.held.push_back((header.seq, body.to_vec()));
                    self.stats.held += 1;
                    return Received::Held;
                } else if self.recovered.iter().any(|(from, _)| *from == src) {
                    // Restored or released datagrams of the peer wait to be handed on: this
                    // one goes behind them, or QUIC would see it first and could no longer
                    // take them (a long block's restored datagram, hundreds behind it).
                    self.recovered.push_back((src, body.to_vec()));
                    return Received::Held;
                }
                Received::Data {
                    offset: Header::LEN,
                }
            }
            Kind::Repair => match RepairHeader::parse(body) {
                Ok((rh, shard)) => {
                    self.stats.repair_received += 1;
                    self.handle_repair(now, src, rh, shard);
                    Received::Repair
                }
                Err(_) => {
                    self.stats.invalid += 1;
                    Received::Invalid
                }
            },
        }
    }

    /// The next datagram restored from repair, with the peer it came from.
    pub fn poll_recovered(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.recovered.pop_front()
    }

    /// When [`Fec::handle_timeout`] must next be called, if a burst is open or a probe due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let bursts = self.peers.values().filter_map(Peer::burst_end);
        bursts
            .chain(self.peers.values().filter_map(Peer::probe_due))
            .chain(self.peers.values().filter_map(Peer::hold_end))
            .min()
    }

    /// Ends the bursts that fell idle and sends the probes that are due: their datagrams wait
    /// in [`Fec::poll_transmit`]. Releases what was held back behind missing datagrams waited
    /// for too long: it waits in [`Fec::poll_recovered`].
    pub fn handle_timeout(&mut self, now: Instant) {
        self.probe(now);
        for (addr, peer) in &mut self.peers {
            if peer.hold_end().is_some_and(|t| now >= t) {
                self.stats.holes_given_up += peer.release(now, None, &mut self.recovered, *addr);
            }
        }
        let addrs: Vec<SocketAddr> = self
            .peers
            .iter()
            .filter(|(_, p)| p.burst_end().is_some_and(|t| now >= t))
            .map(|(a, _)| *a)
            .collect();
        for addr in addrs {
            self.repair(now, addr);
        }
    }

    /// The next repair or probe datagram to send, with its destination.
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.transmits.pop_front()
    }

    /// Queues the probes that are due (see the crate doc).
    fn probe(&mut self, now: Instant) {
        for (addr, peer) in &mut self.peers {
            let Some(gap) = peer.params.probe_gap else {
                continue;
            };
            let mut sent = 0;
            while let Some(at) = peer.probe_due() {
                if at > now || sent == MAX_PROBES_AT_ONCE {
                    break;
                }
                let header = Header {
                    kind: Kind::Probe,
                    seq: peer.next_seq,
                    loss: peer.loss_report(),
                };
                peer.next_seq = peer.next_seq.wrapping_add(1);
                peer.window_first = peer.next_seq;
                let mut d = header.emit().to_vec();
                if !peer.params.hold.is_zero() {
                    d.push(PROBE_HOLDS);
                }
                self.transmits.push_back((*addr, d));
                self.stats.probes_sent += 1;
                peer.probes = peer.probes.saturating_add(1);
                sent += 1;
                let step = if peer.probes < PROBE_TRAIN {
                    gap
                } else {
                    IDLE_PROBE_GAP
                };
                // A timer that fired late resumes the pace from now rather than catching up.
                peer.next_probe = Some((at + step).max(now.checked_sub(step).unwrap_or(now)));
            }
        }
    }

    /// The state of `addr`, made if new (forgetting the least recently active peer when full).
    fn peer(&mut self, now: Instant, addr: SocketAddr) -> &mut Peer {
        peer_entry(&mut self.peers, &self.paths, &self.config, now, addr)
    }

    /// Sends the repair of `addr`'s open window and closes it.
    fn repair(&mut self, now: Instant, addr: SocketAddr) {
        self.repair_window(now, addr, false);
    }

    /// Sends the repair of `addr`'s open window, a short exchange a transfer follows, and
    /// closes it: repaired however much the application wrote since (that is the transfer's).
    fn repair_exchange(&mut self, now: Instant, addr: SocketAddr) {
        self.repair_window(now, addr, true);
    }

    /// Sends the repair of `addr`'s open window and closes it; `exchange`: the window is a
    /// short exchange a transfer follows, repaired even though more than the tail is unsent.
    fn repair_window(&mut self, now: Instant, addr: SocketAddr, exchange: bool) {
        let cfg = &self.config;
        let Some(peer) = self.peers.get_mut(&addr) else {
            return;
        };
        peer.trim(now);
        let holds_back = peer.holds_back();
        let small = peer.window_bytes < cfg.min_window_bytes
            && !peer.in_burst
            && peer.window.len() > MAX_SHORT
            && !holds_back;
        // A full block continues the burst; anything else (the idle gap) ends it.
        peer.in_burst = peer.params.blocks && peer.window.len() >= peer.params.block;
        if small || peer.window.is_empty() {
            peer.clear_window();
            return;
        }
        if peer.written - peer.sent > peer.params.tail_bytes && !holds_back && !exchange {
            // A pause in the middle of a transfer (the sender waited for its window or for
            // flow control), not its end: what is lost here is retransmitted while the rest
            // flows.
            peer.clear_window();
            peer.in_burst = true;
            self.stats.skipped += 1;
            return;
        }
        let n = peer.window.len();
        let p = peer
            .reported
            .fraction()
            .unwrap_or(cfg.prior_loss)
            .max(cfg.min_loss);
        // The report is already an upper bound of the measurement (its sampling error);
        // the small margin covers a path that got worse since.
        let p = p + 0.001;
        let mut r = repair_count(n, p, cfg.target, cfg.max_repair);
        if n > MAX_SHORT && !peer.params.packet_time.is_zero() {
            // A block the transfer goes on after: each shard delays the rest by a datagram,
            // and a shortfall costs only what of the retransmission's delay the rest of the
            // transfer does not cover. (The last window's shards delay nothing of it.)
            let unsent = peer.written - peer.sent;
            if unsent > 0 {
                let pt = peer.params.packet_time;
                let rest = pt.mul_f64(unsent as f64 / FULL_DATAGRAM as f64);
                let stall = peer.params.rtt.mul_f64(FAILURE_RTTS).saturating_sub(rest);
                r = r.min(repair_count_for_cost(n, p, pt, stall, r));
            }
        }
        if holds_back {
            r = r.max(1);
        }
        if r == 0 {
            peer.clear_window();
            self.stats.skipped += 1;
            return;
        }
        let max_len = peer.window.iter().map(|s| s.data.len()).max().unwrap_or(0);
        let shard_bytes = (max_len + 2 + 1) & !1;
        let (Ok(count), Ok(recovery)) = (u16::try_from(n), u16::try_from(r)) else {
            peer.clear_window();
            return;
        };
        let Some(enc) = self.coders.encoder(n, r, shard_bytes) else {
            peer.clear_window();
            return;
        };
        let scratch = &mut self.scratch;
        for s in &peer.window {
            fill_shard(scratch, &s.data, shard_bytes);
            if enc.add_original_shard(&scratch[..]).is_err() {
                peer.clear_window();
                return;
            }
        }
        let first = peer.window_first;
        let header = Header {
            kind: Kind::Repair,
            seq: peer.next_seq,
            loss: peer.loss_report(),
        }
        .emit();
        peer.clear_window();
        let Ok(result) = enc.encode() else {
            return;
        };
        for (index, shard) in result.recovery_iter().enumerate() {
            let rh = RepairHeader {
                first,
                count,
                recovery,
                index: index as u16,
            };
            let mut d = Vec::with_capacity(Header::LEN + RepairHeader::LEN + shard.len());
            d.extend_from_slice(&header);
            d.extend_from_slice(&rh.emit());
            d.extend_from_slice(shard);
            self.transmits.push_back((addr, d));
            self.stats.repair_sent += 1;
        }
        self.stats.windows += 1;
    }

    /// Gathers a repair shard (see [`Fec::gather`]); then gives up the holes before its window
    /// that no gathered repair covers, and releases what no hole holds back any more.
    fn handle_repair(&mut self, now: Instant, src: SocketAddr, rh: RepairHeader, shard: &[u8]) {
        self.gather(src, rh, shard);
        if let Some(peer) = self.peers.get_mut(&src) {
            if !peer.holes.is_empty() || !peer.held.is_empty() {
                self.stats.holes_given_up += peer.release(
                    now,
                    Some((rh.first, Passed::Repair)),
                    &mut self.recovered,
                    src,
                );
            }
        }
    }

    /// Gathers a repair shard; restores the window's missing datagrams once enough arrived.
    fn gather(&mut self, src: SocketAddr, rh: RepairHeader, shard: &[u8]) {
        let Some(peer) = self.peers.get_mut(&src) else {
            return;
        };
        let key = (rh.first, rh.count);
        if peer.done.contains(&key) {
            return;
        }
        let pos = match peer
            .pending
            .iter()
            .position(|p| (p.header.first, p.header.count) == key)
        {
            Some(i) => i,
            None => {
                if peer.pending.len() >= MAX_PENDING {
                    peer.pending.pop_front();
                    self.stats.unrecoverable += 1;
                }
                let missing = (0..u32::from(rh.count))
                    .map(|i| rh.first.wrapping_add(i))
                    .filter(|s| !peer.kept.contains_key(s))
                    .collect();
                peer.pending.push_back(Pending {
                    header: rh,
                    shard_bytes: shard.len(),
                    shards: Vec::new(),
                    missing,
                });
                peer.pending.len() - 1
            }
        };
        let pending = &mut peer.pending[pos];
        if pending.header.recovery != rh.recovery
            || pending.shard_bytes != shard.len()
            || pending.shards.iter().any(|(i, _)| *i == rh.index)
        {
            return;
        }
        pending.shards.push((rh.index, shard.to_vec()));
        let kept = &peer.kept;
        pending.missing.retain(|s| !kept.contains_key(s));
        if pending.missing.is_empty() {
            peer.pending.remove(pos);
            remember(&mut peer.done, key);
            return;
        }
        if pending.shards.len() < pending.missing.len() {
            return;
        }
        let Some(pending) = peer.pending.remove(pos) else {
            return;
        };
        remember(&mut peer.done, key);
        let restored = self
            .coders
            .decoder(
                usize::from(rh.count),
                usize::from(rh.recovery),
                pending.shard_bytes,
            )
            .and_then(|dec| restore(dec, &pending, &peer.kept, &mut self.scratch));
        match restored {
            Some(restored) => {
                let max_kept = self.config.max_window + self.config.max_window / 2;
                for (seq, data) in restored {
                    peer.holes.retain(|(s, _)| *s != seq);
                    peer.keep_received(seq, data.clone(), max_kept);
                    self.stats.recovered += 1;
                    // A restored datagram goes where it was sent: among the held ones (a
                    // long block's later holes are hundreds ahead of its first), or before
                    // them all.
                    if peer.held.is_empty() {
                        self.recovered.push_back((src, data));
                        continue;
                    }
                    let at = peer
                        .held
                        .iter()
                        .position(|(h, _)| h.wrapping_sub(seq) < 1 << 31);
                    peer.held.insert(at.unwrap_or(peer.held.len()), (seq, data));
                }
            }
            None => {
                // Its holes will not be filled from here: QUIC's retransmission fills them.
                let before = peer.holes.len();
                peer.holes
                    .retain(|(s, _)| s.wrapping_sub(rh.first) >= u32::from(rh.count));
                self.stats.holes_given_up += (before - peer.holes.len()) as u64;
                self.stats.unrecoverable += 1;
            }
        }
    }
}

/// The state of `addr` in `peers`, made if new (forgetting the least recently active peer
/// when full).
fn peer_entry<'a>(
    peers: &'a mut HashMap<SocketAddr, Peer>,
    paths: &HashMap<SocketAddr, PathParams>,
    cfg: &Config,
    now: Instant,
    addr: SocketAddr,
) -> &'a mut Peer {
    if !peers.contains_key(&addr) && peers.len() >= cfg.max_peers.max(1) {
        if let Some(old) = peers
            .iter()
            .min_by_key(|(_, p)| p.last_active)
            .map(|(a, _)| *a)
        {
            peers.remove(&old);
        }
    }
    let peer = peers.entry(addr).or_insert_with(|| {
        let configured = paths.get(&addr).copied();
        let params = configured.unwrap_or(cfg.default_path);
        Peer::new(params, configured.is_some(), now, cfg)
    });
    peer.last_active = now;
    peer
}

/// Remembers a finished window (bounded).
fn remember(done: &mut VecDeque<(u32, u16)>, key: (u32, u16)) {
    if done.len() >= MAX_DONE {
        done.pop_front();
    }
    done.push_back(key);
}

/// An original shard: the datagram's length, its bytes, zeros up to `shard_bytes`.
fn fill_shard(scratch: &mut Vec<u8>, data: &[u8], shard_bytes: usize) {
    scratch.clear();
    scratch.extend_from_slice(&(data.len() as u16).to_be_bytes());
    scratch.extend_from_slice(data);
    scratch.resize(shard_bytes, 0);
}

/// The Reed-Solomon encoder and decoder, kept from one window to the next.
///
/// A coder's work buffers (`reed-solomon-simd` sizes them in shards, rounded up to powers of
/// two: 0.38 MB for the encoder and 0.77 MB for the decoder of a window of 241 datagrams of
/// 1,474 bytes) are allocated when it is made; one made per window found them cold or handed
/// back to the system by the allocator since the last window, and a window's repair waited
/// for it. Measured on the project's 2-core lab VM (`reed-solomon-simd`, 241 originals, 11
/// recovery shards, 3 missing): a new decoder 0.39–0.49 ms before its 0.55 ms of decoding,
/// 0.02 ms once warm; a new encoder 0.2 ms before its 0.06 ms of encoding. Kept and reset, a
/// coder reuses its buffers (so the layer holds those of the largest window so far: at most
/// about 3 and 6 MB with the default [`Config::max_window`] and [`Config::max_repair`]). The
/// library's tables are built on the first coder a process makes (11.5 ms there):
/// [`Coders::new`] makes both at once, so that no window's repair pays for it. (In the
/// 44 Mbit/s file-download bench the change is below the runs' spread: a cell's first pass
/// moves by whole milliseconds with where its losses fall.)
struct Coders {
    encoder: Option<ReedSolomonEncoder>,
    decoder: Option<ReedSolomonDecoder>,
}

impl std::fmt::Debug for Coders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coders")
            .field("encoder", &self.encoder.is_some())
            .field("decoder", &self.decoder.is_some())
            .finish()
    }
}

impl Coders {
    /// Coders for the smallest window, which builds the library's tables.
    fn new() -> Self {
        Self {
            encoder: ReedSolomonEncoder::new(2, 1, 64).ok(),
            decoder: ReedSolomonDecoder::new(2, 1, 64).ok(),
        }
    }

    /// The encoder, reset for `originals` and `recovery` shards of `bytes`.
    fn encoder(
        &mut self,
        originals: usize,
        recovery: usize,
        bytes: usize,
    ) -> Option<&mut ReedSolomonEncoder> {
        reset_or_make(
            &mut self.encoder,
            |e| e.reset(originals, recovery, bytes),
            || ReedSolomonEncoder::new(originals, recovery, bytes),
        )
    }

    /// The decoder, reset for `originals` and `recovery` shards of `bytes`.
    fn decoder(
        &mut self,
        originals: usize,
        recovery: usize,
        bytes: usize,
    ) -> Option<&mut ReedSolomonDecoder> {
        reset_or_make(
            &mut self.decoder,
            |d| d.reset(originals, recovery, bytes),
            || ReedSolomonDecoder::new(originals, recovery, bytes),
        )
    }
}

/// The coder in `slot`, reset, or a new one made there if it holds none.
fn reset_or_make<C>(
    slot: &mut Option<C>,
    reset: impl FnOnce(&mut C) -> Result<(), reed_solomon_simd::Error>,
    make: impl FnOnce() -> Result<C, reed_solomon_simd::Error>,
) -> Option<&mut C> {
    match slot {
        Some(c) => reset(c).ok()?,
        None => *slot = Some(make().ok()?),
    }
    slot.as_mut()
}

/// The missing datagrams of a window, from the received ones and the repair shards, by `dec`
/// (reset for the window).
fn restore(
    dec: &mut ReedSolomonDecoder,
    pending: &Pending,
    kept: &HashMap<u32, Vec<u8>>,
    scratch: &mut Vec<u8>,
) -> Option<Vec<(u32, Vec<u8>)>> {
    let rh = pending.header;
    let count = usize::from(rh.count);
    let missing: HashSet<u32> = pending.missing.iter().copied().collect();
    for i in 0..count {
        let seq = rh.first.wrapping_add(i as u32);
        if missing.contains(&seq) {
            continue;
        }
        let data = kept.get(&seq)?;
        if data.len() + 2 > pending.shard_bytes {
            return None; // not the window the shards were made for
        }
        fill_shard(scratch, data, pending.shard_bytes);
        dec.add_original_shard(i, &scratch[..]).ok()?;
    }
    for (index, shard) in &pending.shards {
        dec.add_recovery_shard(usize::from(*index), shard).ok()?;
    }
    let result = dec.decode().ok()?;
    let mut out = Vec::with_capacity(missing.len());
    for (i, shard) in result.restored_original_iter() {
        let len = usize::from(u16::from_be_bytes([shard[0], shard[1]]));
        // The sender keeps nothing empty or over MAX_KEPT: such a length comes from forged or
        // mismatched shards, and is not handed up.
        if len == 0 || len > MAX_KEPT {
            continue;
        }
        let data = shard.get(2..2 + len)?;
        out.push((rh.first.wrapping_add(i as u32), data.to_vec()));
    }
    Some(out)
}

#[cfg(test)]
mod tests;
