//! The flow pump: one TCP connection joined to one tunnel stream through an encoder (LAN →
//! WAN) and a decoder (WAN → LAN).
//!
//! Owns the per-flow data path and its in-band protocol on the QUIC stream pair. It makes no
//! codec decisions (the `headway-dedup` [`Encoder`] / [`Decoder`] do) and no tunnel decisions
//! (`headway-tunnel` does). Both appliances run the same pump, mirror images of each other.
//!
//! # What one direction of the stream carries
//!
//! After the tunnel's flow header (opener only, consumed by `headway-tunnel`), each direction
//! carries whole `headway-dedup` tokens: the local encoder's output (starting with its
//! `Hello`), interleaved with `Need` tokens for the *other* direction (the back channel of the
//! peer's encoder, see `headway_dedup::decoder`'s "back channel"). The peer's decoder hands
//! those out through `Decoder::poll_peer_need`.
//!
//! A `Need` with `seq == u64::MAX` ([`DONE`]) is this shell's marker "my decoder has finished:
//! I will send no more needs". It is needed because the end of data (`End`) and the end of the
//! back channel are independent: an encoder must keep serving needs after its `End` until the
//! peer's decoder is done, so the stream's FIN cannot mean "no more data". (No real data token
//! can have that sequence number: it would take 2^64 tokens.)
//!
//! # Order of events in one direction (here: upstream, LAN → WAN)
//!
//! ```text
//!  Hello ─ (data tokens | Need | replies)* ─ End ─ (Need | replies)* ─ DONE ─ … ─ FIN
//!                                                                    (any order of End/DONE)
//! ```
//!
//! The sending side FINs when three things hold: the LAN side reached EOF (encoder finished,
//! `End` sent), our decoder has finished (our `DONE` sent), and the peer's `DONE` arrived (no
//! need left to serve). None of these waits for the peer's FIN, so the two sides cannot wait
//! for each other. Half-close: the LAN EOF becomes `End`; the decoder's end becomes
//! `shutdown(Write)` on the TCP socket, while the other direction keeps flowing.
//!
//! # Errors and resets
//!
//! Any error (TCP read/write, stream reset or stop, a decode error, an unservable need, a
//! stream that ends before `End`) ends the flow: the stream is reset and stopped with
//! `code::RESET` and the TCP socket is closed with `SO_LINGER` 0, i.e. an RST (RFC 9293
//! §3.10.7.1 aborts). A peer's reset thus becomes a TCP RST and a TCP RST a stream reset.
//! Because the decoder only emits verified bytes, a reset flow never delivered a wrong byte.
//!
//! A cut the pump does not see — its task aborted when the appliance shuts down, the process
//! killed — must not look like a clean end either: every LAN socket is armed with `SO_LINGER`
//! 0 from the moment it is accepted or connected ([`arm_reset`]), so any close is an RST, and
//! disarmed only just before the pump passes a FIN on, when every byte for it was written.
//!
//! # Backpressure and memory
//!
//! The pump reads at most 64 KiB from the TCP socket at a time and does not read again until
//! the encoder's output was written to the stream (awaiting QUIC flow control); likewise it
//! reads the stream only after the decoder's output was written to the TCP socket. The
//! channel from the downstream to the upstream half carries only needs and markers (a few
//! bytes each, at most one per data token the peer sent), never data.
//!
//! The encoder is flushed whenever the TCP socket has had nothing to read for 1 ms, so
//! interactive traffic never waits for a frame to fill (see `FLUSH_DELAY`), and at once when
//! what it holds is a small message with nothing behind it (see `FLUSH_AT_ONCE`).

use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use headway_dedup::{
    ChunkStore, DecodeError, Decoder, DecoderConfig, DedupKey, EncodeError, Encoder, EncoderConfig,
    Mode, Need, PeerId, Token,
};
use headway_tunnel::{code, ReadError, RecvStream, SendStream, WriteError, WriteMeter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::flows::Meter;
use crate::stats::Counters;

/// The back-channel marker "this side's decoder has finished" (see the module doc).
pub const DONE: Need = Need { seq: u64::MAX };

/// How long the LAN side must be silent before the encoder is flushed. A flush closes the
/// open literal frame and run, so flushing at every momentary gap between reads (a few per
/// 64 KiB on a busy host) costs one run token each on a repeated transfer; 1 ms (tokio's
/// timer granularity) merges those while adding at most 1 ms to an interactive exchange.
const FLUSH_DELAY: Duration = Duration::from_millis(1);

/// At most this much held back since the last flush, and nothing more to read at once: a
/// request or an interactive message, flushed at once rather than after [`FLUSH_DELAY`]
/// (tokio's timer made that about 2 ms per direction: a 100-byte ping-pong through a pair on
/// loopback took 4.5 ms per exchange, 0.09 ms flushed at once). At most one such flush per
/// [`FLUSH_DELAY`]: a source that dribbles small segments is merged by the timer as before,
/// and a bulk transfer reads in larger pieces anyway.
const FLUSH_AT_ONCE: usize = 4 * 1024;

/// Bytes read from a socket or stream at a time.
const READ_BUF: usize = 64 * 1024;

/// Most buffers in one vectored write to a LAN socket (Linux takes up to 1,024).
const MAX_IOV: usize = 256;

/// How long a pump's half codes before it lets the other tasks of its worker run (see
/// [`Turns`]).
const TURN_TIME: Duration = Duration::from_micros(500);

/// Makes a pump give up its worker thread after [`TURN_TIME`] of coding.
///
/// A pump whose socket always has data never waits: its reads and writes complete at once,
/// and tokio only makes a task yield after 128 such operations (8 MiB of reads). The
/// tunnel's connection driver, woken by the pump's stream writes and by its pacing timer,
/// waits meanwhile in the worker's LIFO slot, which the other worker cannot steal. A
/// data-centre appliance fed by a fast server then encoded megabytes ahead and sent nothing
/// on the WAN for up to 140 ms at the start of a download (44 Mbit/s, 300 ms: a tenth of a
/// 4 MB transfer's time). A yield every 256 KiB of coding (the first remedy) is a millisecond
/// on a fast core but 4 ms on a slow one, where the driver then released one pacing burst of
/// ten datagrams per turn: 36 Mbit/s on a 44 Mbit/s link for as long as the encoder had data
/// (traced: a 1 MB DOC download). So the turn is measured in time: half a millisecond of
/// coding, less than a pacing burst at 44 Mbit/s (2.8 ms). (The clock runs from the last
/// yield, waits included: a half that waited yields after its next piece of coding, which
/// costs one turn of the scheduler and lets the driver send what that piece produced.)
///
/// The upstream half also yields right after each batch of stream writes
/// ([`Turns::handed_over`]): the writes are what wakes the driver into the LIFO slot, and
/// the next piece of coding may be one that closes a frame — zstd compresses the whole
/// frame then, 1.7–5.7 ms at level 4 on this project's lab VM — during which the written
/// frame would wait unsent. A/B at 44 Mbit/s, alternating, first pass: doc_small at 200 ms
/// 0.272 s median of 8 against 0.275; doc_medium at 90 ms, 1 % 0.296 against 0.303.
struct Turns {
    since: tokio::time::Instant,
}

impl Default for Turns {
    fn default() -> Self {
        Self {
            since: tokio::time::Instant::now(),
        }
    }
}

impl Turns {
    /// Called after writes that woke the connection driver: yields at once, so the driver
    /// (in this worker's LIFO slot) sends them before the next piece of coding starts.
    async fn handed_over(&mut self) {
        tokio::task::yield_now().await;
        self.since = tokio::time::Instant::now();
    }

    /// Called after each piece of coding: yields once the turn is used up.
    async fn coded(&mut self) {
        if self.since.elapsed() >= TURN_TIME {
            tokio::task::yield_now().await;
            self.since = tokio::time::Instant::now();
        }
    }
}

/// Why a tunnelled flow ended in a reset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PumpError {
    /// Reading the local TCP socket failed (e.g. the client reset it).
    #[error("lan read failed: {0}")]
    LanRead(std::io::Error),
    /// Writing the local TCP socket failed.
    #[error("lan write failed: {0}")]
    LanWrite(std::io::Error),
    /// Writing the tunnel stream failed (e.g. the peer stopped or reset it).
    #[error("tunnel write failed: {0}")]
    WanWrite(WriteError),
    /// Reading the tunnel stream failed (e.g. the peer reset it).
    #[error("tunnel read failed: {0}")]
    WanRead(ReadError),
    /// The peer's tokens did not decode (no wrong byte was emitted).
    #[error("decoding failed: {0}")]
    Decode(DecodeError),
    /// The local encoder failed (e.g. a need it can no longer serve).
    #[error("encoding failed: {0}")]
    Encode(EncodeError),
    /// The tunnel stream ended before the peer's `End` and `DONE`.
    #[error("the tunnel stream ended early")]
    Truncated,
}

/// The codec settings of one flow.
#[derive(Clone)]
pub(crate) struct FlowCodec {
    /// What the local encoder does (the peer's encoder may differ; the decoder follows it).
    pub mode: Mode,
    /// The peer, as the dedup store knows it.
    pub peer: PeerId,
    /// The appliance's chunk store.
    pub store: Arc<dyn ChunkStore>,
    /// The deployment's fingerprint key.
    pub key: DedupKey,
    /// The zstd level of the local encoder ([`zstd_level_for`] the link to the peer).
    pub level: i32,
}

/// The zstd level for literal and data frames towards a peer behind a WAN link of `bps`
/// bits/s: the slower the link, the more CPU a byte it saves is worth. Each level's encoder
/// (chunking, fingerprints and zstd of DOC-like data, 8 MiB; this project's 2-core lab VM;
/// `cargo run --release -p headway-dedup --example levels`) against its output:
///
/// | level | encoder MiB/s | ratio | wire bytes vs level 1 | zstd context |
/// |---:|---:|---:|---:|---:|
/// | 1 | 119–124 | 2.81:1 | – | 0.58 MB |
/// | 3 | 85–91 | 2.99:1 | −6.0 % | 1.04 MB |
/// | 4 | 51–55 | 3.10:1 | −9.3 % | 1.17 MB |
/// | 5 | 39–46 | 3.14:1 | −10.3 % | 1.83 MB |
/// | 9 | 24–31 | 3.18:1 | −11.4 % | 3.14 MB |
/// | 13 | 5.2–6.0 | 3.33:1 | −15.6 % | 3.81 MB |
/// | 15 | 3.6–3.9 | 3.41:1 | −17.6 % | 4.46 MB |
/// | 19 | 1.3–1.7 | 3.46:1 | −18.7 % | 5.51 MB |
///
/// A level is used up to the rate at which a link full of such data would take about a
/// third of one core to encode: level 15 up to 3 Mbit/s (a T1 or E1: a first pass of DOC-like
/// data then crosses in 9 % less time than at level 4; the seed's 1.5 Mbit/s US–Asia link),
/// level 13 up to 4.5 Mbit/s, level 4 up to 45 Mbit/s (a T3: 9 % less than level 1), level 3
/// up to 100 Mbit/s, level 1 above, where the encoder's speed is the pair's limit. Levels 5
/// to 9 gain little over 4 for their cost; 19 would take more than a third of a core even at
/// 1.5 Mbit/s. Above level 4 the context is not kept between frames (`headway-dedup`'s
/// compressor makes it per frame, so idle flows towards slow peers hold no tables), and the
/// coding runs beside the runtime's workers ([`coding`]).
pub(crate) fn zstd_level_for(bps: u64) -> i32 {
    match bps {
        0..=3_000_000 => 15,
        3_000_001..=4_500_000 => 13,
        4_500_001..=45_000_000 => 4,
        45_000_001..=100_000_000 => 3,
        _ => 1,
    }
}

/// The highest zstd level whose coding runs on the runtime's worker like any other task's
/// work (see [`coding`]).
///
/// Tried and not kept: at these levels too, running the coding that closes a frame of 64 KiB
/// or more through `block_in_place`. Traced in the data-centre appliance (44 Mbit/s, 300 ms,
/// a 1 MB DOC-like first pass), the connection driver otherwise sends one pacing burst of ten
/// datagrams after each frame's writes and nothing during the next frame's 3–3.5 ms of zstd,
/// and the link idled 6–9 ms in the transfer's first 25 ms; with the hand-over those gaps were
/// gone. Yet the first pass did not get faster: 44 Mbit/s doc_small, 3 alternating rounds of
/// 3–4 runs, at 300 ms and 5 % loss the DOC target over the time less one RTT fell from
/// 0.88–0.90 to 0.81–0.85 (the body measure rose from 0.93 to 0.95), and the other cells did
/// not move; the unconstrained-link throughput of dedup-disk non-repeating data fell from
/// 942–948 to 866–887 Mbit/s.
const INLINE_LEVEL_MAX: i32 = 4;

/// Runs a piece of the encoder's coding — which may close a literal frame and compress it
/// whole — for a flow at zstd `level`. Above [`INLINE_LEVEL_MAX`] (slow links only) a 256 KiB
/// frame takes 40–70 ms at level 13 or 15 on this project's lab VM, and a worker that spent
/// that long on it would hold every task only it may run, among them the tunnel's connection
/// driver in its LIFO slot, and with it the pacing of every flow. There it runs through
/// `block_in_place`, which first hands the worker's other tasks to another thread. (Not on
/// a current-thread runtime, which does not allow it; nothing there could run them anyway.)
fn coding<R>(level: i32, work: impl FnOnce() -> R) -> R {
    // The level first: at the fast links' levels (every 64 KiB read of a busy pump) nothing
    // but this comparison is added.
    let threaded = || {
        tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
    };
    if level > INLINE_LEVEL_MAX && threaded() {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// Messages from the downstream half to the upstream half (which owns the send stream).
enum Ctrl {
    /// Our decoder needs a data token: send a `Need` to the peer.
    OurNeed(Need),
    /// The peer sent a `Need` for our encoder (or its `DONE`).
    PeerNeed(Need),
    /// Our decoder has finished: send `DONE`.
    LocalDone,
}

/// Runs one flow to its end. Not cancel-safe in the sense that a dropped future leaves the
/// stream without FIN (the peer sees it truncated or reset, never as complete).
pub(crate) async fn pump(
    mut tcp: TcpStream,
    mut send: SendStream,
    mut recv: RecvStream,
    codec: FlowCodec,
    meter: WriteMeter,
    counters: Meter<'_>,
) -> Result<(), PumpError> {
    let enc = Encoder::new(
        EncoderConfig {
            mode: codec.mode,
            peer: codec.peer,
            level: codec.level,
            ..Default::default()
        },
        codec.store.clone(),
        codec.key.clone(),
    );
    let dec = Decoder::new(
        DecoderConfig {
            peer: codec.peer,
            ..Default::default()
        },
        codec.store,
        codec.key,
    );
    let _ = tcp.set_nodelay(true);
    arm_reset(&tcp);
    let (tx, rx) = mpsc::unbounded_channel();
    let r = {
        let (mut rd, mut wr) = tcp.split();
        tokio::try_join!(
            upstream(&mut rd, &mut send, enc, codec.level, rx, &meter, &counters),
            downstream(&mut wr, &mut recv, dec, tx, &counters),
        )
    };
    if r.is_err() {
        let _ = send.reset(code::RESET);
        let _ = recv.stop(code::RESET);
        abort(&tcp);
    }
    r.map(|_| ())
}

/// Makes the socket's close an RST (SO_LINGER 0).
pub(crate) fn abort(tcp: &TcpStream) {
    #[allow(deprecated)]
    let _ = tcp.set_linger(Some(Duration::ZERO));
}

/// Arms a LAN socket so that closing it before the flow's clean end is an RST: every socket
/// an appliance accepts or connects gets this at once. Without it, a flow cut by anything
/// that closes the socket without the pump's say — its task aborted at shutdown, the
/// process killed (the kernel closes the descriptors) — would end with a FIN, and a client
/// reading to EOF (HTTP/1.0, FTP data, an upload that is acknowledged by closing) would take a
/// truncated stream for a complete one. An RST makes it an error instead.
pub(crate) fn arm_reset(tcp: &TcpStream) {
    abort(tcp);
}

/// Disarms [`arm_reset`] when this side's sending direction ended cleanly: its FIN now means
/// "everything was sent", so a later close may be a normal one.
pub(crate) fn disarm_reset(tcp: &TcpStream) {
    #[allow(deprecated)]
    let _ = tcp.set_linger(None);
}

/// LAN → WAN: TCP bytes through the encoder to the stream, plus the back channel.
async fn upstream(
    rd: &mut ReadHalf<'_>,
    send: &mut SendStream,
    mut enc: Encoder,
    level: i32,
    mut ctrl: mpsc::UnboundedReceiver<Ctrl>,
    meter: &WriteMeter,
    c: &Meter<'_>,
) -> Result<(), PumpError> {
    let mut buf = vec![0u8; READ_BUF];
    let mut lan_eof = false;
    let mut local_done = false;
    let mut peer_done = false;
    let mut unflushed = 0usize;
    let mut last_at_once: Option<tokio::time::Instant> = None;
    let mut chunks_seen = ChunksSeen::default();
    let mut turns = Turns::default();
    let mut idle_due = false;
    loop {
        let mut wrote = false;
        while let Some(b) = enc.poll_transmit() {
            // Counted before the write: while it waits for flow control, the frame is what
            // tells the tunnel's FEC that this transfer is not near its end.
            meter.add(b.len() as u64);
            send.write_all(&b).await.map_err(PumpError::WanWrite)?;
            c.wan_out(b.len() as u64);
            wrote = true;
        }
        if wrote {
            turns.handed_over().await;
        }
        if idle_due {
            // Everything read was flushed and written, and the next read waits for the LAN:
            // the tunnel's FEC repairs the end of a long block as soon as all of it went out
            // (any later write takes the notice back).
            meter.idle();
            idle_due = false;
        }
        chunks_seen.count(&enc, c.group);
        if lan_eof && local_done && peer_done {
            // RFC 9000 §3.1: FIN after everything was written; the peer still reads it all.
            let _ = send.finish();
            return Ok(());
        }
        // Biased, in this order: needs and markers first (a few bytes each; a peer decoder
        // waits on them, and a client that never pauses must not starve them), then reads
        // while the socket has data; when it has had none for FLUSH_DELAY (and data is held
        // back) the flush branch wins, so a pause in the client flushes the encoder. The
        // timer is re-armed after every read, so a steady stream is never flushed.
        let pause = tokio::time::sleep(FLUSH_DELAY);
        let small = unflushed > 0
            && unflushed <= FLUSH_AT_ONCE
            && last_at_once.is_none_or(|t| t.elapsed() >= FLUSH_DELAY);
        tokio::select! {
            biased;
            m = ctrl.recv() => match m {
                Some(Ctrl::OurNeed(n)) => {
                    write_need(send, n, meter, c).await?;
                    Counters::add(&c.group.needs_sent, 1);
                }
                Some(Ctrl::LocalDone) => {
                    write_need(send, DONE, meter, c).await?;
                    local_done = true;
                }
                Some(Ctrl::PeerNeed(n)) if n == DONE => peer_done = true,
                Some(Ctrl::PeerNeed(n)) => {
                    enc.handle_need(n).map_err(PumpError::Encode)?;
                    Counters::add(&c.group.needs_served, 1);
                }
                // The downstream half only ends cleanly after the peer's FIN, which follows
                // everything we wait for; anything else is a truncated stream.
                None => return Err(PumpError::Truncated),
            },
            r = rd.read(&mut buf), if !lan_eof => {
                let n = r.map_err(PumpError::LanRead)?;
                if n == 0 {
                    coding(level, || enc.finish());
                    lan_eof = true;
                    idle_due = true;
                } else {
                    c.lan_in(n as u64);
                    coding(level, || enc.handle_data(&buf[..n])).map_err(PumpError::Encode)?;
                    unflushed += n;
                    turns.coded().await;
                }
            }
            // Polled only when the socket had nothing to read just now.
            () = std::future::ready(()), if small && !lan_eof => {
                coding(level, || enc.flush());
                unflushed = 0;
                last_at_once = Some(tokio::time::Instant::now());
                idle_due = true;
            }
            () = pause, if unflushed > 0 && !lan_eof => {
                coding(level, || enc.flush());
                unflushed = 0;
                idle_due = true;
            }
        }
    }
}

/// The encoder's chunk counts already added to the counters (they are per encoder; the
/// counters are per group and per store, so the pump adds the increments as they happen).
#[derive(Default)]
struct ChunksSeen {
    encoded: u64,
    peer_held: u64,
}

impl ChunksSeen {
    fn count(&mut self, enc: &Encoder, c: &Counters) {
        let s = enc.stats();
        let encoded = s.chunks_literal + s.chunks_referenced;
        Counters::add(&c.chunks_encoded, encoded.saturating_sub(self.encoded));
        Counters::add(
            &c.chunks_peer_held,
            s.chunks_referenced.saturating_sub(self.peer_held),
        );
        self.encoded = encoded;
        self.peer_held = s.chunks_referenced;
    }
}

/// Writes one `Need` token (the back channel) on the stream.
async fn write_need(
    send: &mut SendStream,
    need: Need,
    meter: &WriteMeter,
    c: &Meter<'_>,
) -> Result<(), PumpError> {
    let mut b = BytesMut::new();
    Token::Need(need).emit(&mut b);
    send.write_all(&b).await.map_err(PumpError::WanWrite)?;
    c.wan_out(b.len() as u64);
    meter.add(b.len() as u64);
    Ok(())
}

/// Writes every buffer of `bufs` to `wr`, in order, with vectored writes of up to
/// [`MAX_IOV`] buffers each, and leaves `bufs` empty. The decoder releases a frame as one
/// buffer per chunk (about 2 KiB each): written one by one, a 1.24 MB download took 504
/// writes to the client's socket; gathered per stream read, 8.
async fn write_all_vectored(wr: &mut WriteHalf<'_>, bufs: &mut Vec<Bytes>) -> std::io::Result<()> {
    let mut first = 0;
    loop {
        while bufs.get(first).is_some_and(Bytes::is_empty) {
            first += 1;
        }
        if first == bufs.len() {
            break;
        }
        let mut written = {
            let slices: Vec<IoSlice<'_>> = bufs[first..]
                .iter()
                .take(MAX_IOV)
                .map(|b| IoSlice::new(b))
                .collect();
            wr.write_vectored(&slices).await?
        };
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let b = &mut bufs[first];
            if written >= b.len() {
                written -= b.len();
                first += 1;
            } else {
                b.advance(written);
                written = 0;
            }
        }
    }
    bufs.clear();
    Ok(())
}

/// WAN → LAN: stream bytes through the decoder to the TCP socket; needs to the upstream half.
async fn downstream(
    wr: &mut WriteHalf<'_>,
    recv: &mut RecvStream,
    mut dec: Decoder,
    tx: mpsc::UnboundedSender<Ctrl>,
    c: &Meter<'_>,
) -> Result<(), PumpError> {
    let mut buf = vec![0u8; READ_BUF];
    let mut out = Vec::new();
    let mut done = false;
    let mut turns = Turns::default();
    loop {
        let Some(n) = recv.read(&mut buf).await.map_err(PumpError::WanRead)? else {
            return if done {
                Ok(())
            } else {
                Err(PumpError::Truncated)
            };
        };
        c.wan_in(n as u64);
        dec.handle_wire(&buf[..n]).map_err(PumpError::Decode)?;
        // Needs first, so the peer's encoder is not kept waiting by a slow local reader.
        // A send fails only once the upstream half has finished, when no need matters.
        while let Some(need) = dec.poll_peer_need() {
            let _ = tx.send(Ctrl::PeerNeed(need));
        }
        while let Some(need) = dec.poll_need() {
            let _ = tx.send(Ctrl::OurNeed(need));
        }
        out.extend(std::iter::from_fn(|| dec.poll_output()));
        if !out.is_empty() {
            let bytes = out.iter().map(Bytes::len).sum::<usize>();
            write_all_vectored(wr, &mut out)
                .await
                .map_err(PumpError::LanWrite)?;
            c.lan_out(bytes as u64);
            turns.coded().await;
        }
        if !done && dec.is_finished() {
            // Half-close: the peer's LAN side reached EOF; pass the FIN on (RFC 9293 §3.6).
            // Every byte for this socket was written, so its close may now be a normal one.
            disarm_reset(wr.as_ref());
            wr.shutdown().await.map_err(PumpError::LanWrite)?;
            let _ = tx.send(Ctrl::LocalDone);
            done = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::{TcpListener, TcpSocket};

    #[test]
    fn slower_links_get_stronger_compression() {
        let mbit = |m: u64| m * 1_000_000;
        // The seed's 1.5 Mbit/s link gets level 15, its 6 and 44 Mbit/s links level 4;
        // faster ones less, never more.
        assert_eq!(zstd_level_for(mbit(1)), 15);
        assert_eq!(zstd_level_for(1_500_000), 15);
        assert_eq!(zstd_level_for(mbit(3)), 15);
        assert_eq!(zstd_level_for(mbit(3) + 1), 13);
        assert_eq!(zstd_level_for(mbit(4)), 13);
        for m in [5, 6, 44, 45] {
            assert_eq!(zstd_level_for(mbit(m)), 4, "{m} Mbit/s");
        }
        assert_eq!(zstd_level_for(mbit(45) + 1), 3);
        assert_eq!(zstd_level_for(mbit(100)), 3);
        assert_eq!(zstd_level_for(mbit(100) + 1), 1);
        assert_eq!(zstd_level_for(mbit(10_000)), 1);
        let levels: Vec<i32> = (0..200).map(|m| zstd_level_for(mbit(m))).collect();
        assert!(levels.windows(2).all(|w| w[0] >= w[1]), "{levels:?}");
    }

    #[tokio::test]
    async fn a_half_that_never_waits_lets_a_woken_task_run_within_a_turn() {
        use std::sync::atomic::{AtomicBool, Ordering};
        // Coding in pieces of 100 µs without ever waiting (as a pump fed by a fast server
        // does): a task woken meanwhile — the connection driver — runs after at most one
        // turn of pieces, however slow or busy the machine (a slow piece only ends the turn
        // sooner).
        let piece = Duration::from_micros(100);
        let bound = (TURN_TIME.as_micros() / piece.as_micros()) as usize + 1;
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let mut turns = Turns::default();
        tokio::task::yield_now().await;
        turns.since = tokio::time::Instant::now();
        tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
        let mut pieces = 0;
        while !ran.load(Ordering::SeqCst) && pieces < 1000 {
            let t = tokio::time::Instant::now();
            while t.elapsed() < piece {
                std::hint::spin_loop();
            }
            pieces += 1;
            turns.coded().await;
        }
        assert!(ran.load(Ordering::SeqCst), "the woken task never ran");
        assert!(
            pieces <= bound,
            "{pieces} pieces before the woken task ran (bound {bound})"
        );
    }

    /// A task woken into this worker's LIFO slot, as the tunnel's connection driver is by a
    /// stream write: it waits for a wake (spawned, then this task yields so it starts
    /// waiting), and it is woken. The flag turns true once it has run.
    async fn woken_task() -> (
        Arc<std::sync::atomic::AtomicBool>,
        tokio::task::JoinHandle<()>,
    ) {
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let wake = Arc::new(tokio::sync::Notify::new());
        let (flag, woken) = (ran.clone(), wake.clone());
        let task = tokio::spawn(async move {
            woken.notified().await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        tokio::task::yield_now().await;
        wake.notify_one();
        (ran, task)
    }

    /// Spins until `flag` is true or `limit` passed; whether it turned true.
    fn spin_until(flag: &std::sync::atomic::AtomicBool, limit: Duration) -> bool {
        let t = tokio::time::Instant::now();
        while !flag.load(std::sync::atomic::Ordering::SeqCst) && t.elapsed() < limit {
            std::hint::spin_loop();
        }
        flag.load(std::sync::atomic::Ordering::SeqCst)
    }

    // With one worker nothing else could run the woken task. (The test bodies run outside the
    // runtime's workers, hence the spawned halves.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_task_woken_by_a_write_runs_before_the_next_piece_of_coding() {
        let half = tokio::spawn(async {
            let (ran, task) = woken_task().await;
            assert!(!spin_until(&ran, Duration::from_millis(20)), "ran before");
            let mut turns = Turns::default();
            turns.handed_over().await;
            assert!(
                spin_until(&ran, Duration::ZERO),
                "the woken task did not run"
            );
            task.await.unwrap();
        });
        half.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn slow_link_coding_lets_the_workers_other_tasks_run_meanwhile() {
        // It runs while a slow-link level codes, and waits while a fast one does.
        let half = tokio::spawn(async {
            let mut ran_meanwhile = Vec::new();
            for level in [INLINE_LEVEL_MAX, zstd_level_for(1_500_000)] {
                let (ran, task) = woken_task().await;
                ran_meanwhile.push(coding(level, || {
                    spin_until(&ran, Duration::from_millis(300))
                }));
                task.await.unwrap();
            }
            ran_meanwhile
        });
        assert_eq!(half.await.unwrap(), [false, true]);
    }

    #[tokio::test]
    async fn slow_link_coding_runs_inline_on_a_current_thread_runtime() {
        assert_eq!(coding(zstd_level_for(1_500_000), || 7), 7);
    }

    #[tokio::test]
    async fn vectored_writes_deliver_every_buffer_in_order_through_partial_writes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_send_buffer_size(16 * 1024).unwrap();
        let (client, server) = tokio::join!(socket.connect(addr), listener.accept());
        let mut client = client.unwrap();
        let (mut server, _) = server.unwrap();
        // 800 buffers of 0 to 4,999 bytes (empty ones among them), 2 MB in all: one vectored
        // write of 256 of them is far more than the socket takes at once, so the writes are
        // partial and end inside a buffer.
        let mut bufs: Vec<Bytes> = (0..800u32)
            .map(|i| {
                let len = (i * 7919) % 5000;
                Bytes::from((0..len).map(|j| (i + j) as u8).collect::<Vec<u8>>())
            })
            .collect();
        assert!(bufs.iter().filter(|b| b.is_empty()).count() >= 1);
        let expected: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            got
        });
        {
            let (_rd, mut wr) = client.split();
            write_all_vectored(&mut wr, &mut bufs).await.unwrap();
        }
        assert!(bufs.is_empty());
        client.shutdown().await.unwrap();
        let got = reader.await.unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "bytes differ");
    }

    #[tokio::test]
    async fn nothing_or_only_empty_buffers_write_nothing() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let mut client = client.unwrap();
        let (mut server, _) = server.unwrap();
        {
            let (_rd, mut wr) = client.split();
            write_all_vectored(&mut wr, &mut Vec::new()).await.unwrap();
            let mut empties = vec![Bytes::new(), Bytes::new()];
            write_all_vectored(&mut wr, &mut empties).await.unwrap();
            assert!(empties.is_empty());
            write_all_vectored(&mut wr, &mut vec![Bytes::from_static(b"x")])
                .await
                .unwrap();
        }
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"x");
    }
}
