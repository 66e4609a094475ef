//! The encoding half: LAN bytes in, wire tokens out.
//!
//! Owns [`Encoder`], [`EncoderConfig`], [`EncoderStats`] and [`EncodeError`]. One encoder
//! serves one direction of one flow to one peer; the [`ChunkStore`] behind it is shared.
//!
//! # Call order
//!
//! ```text
//! new ─▶ ( handle_data | flush | handle_need )* ─▶ finish ─▶ handle_need*
//!          └──── after each call, drain poll_transmit until None ────┘
//! ```
//!
//! `new` queues the `Hello` token. `handle_data` may hold back up to one max-size chunk of bytes
//! (plus an open literal frame or run) until more data, `flush` or `finish` arrives: call
//! `flush` whenever the application pauses (the shell does so when its socket read would
//! block), so interactive traffic never waits for more data.
//!
//! # Dedup decisions (mode [`Mode::Dedup`])
//!
//! Each chunk is recorded in the store with its predecessor in the flow (see [`crate::store`]).
//! If the peer already holds it (it crossed the link with this peer before, either way), it is
//! a reference: it extends the open run when it is also the recorded successor of the previous
//! chunk, else it opens a new run. Otherwise it joins the open literal frame. A run is closed
//! (one `Run` token) when a chunk does not extend it, at [`EncoderConfig::max_run`] chunks or
//! [`EncoderConfig::max_run_bytes`], or at a flush; a literal frame is closed at its size
//! limit, before a run, or at a flush, and is sent zstd-compressed unless that does not make it
//! smaller.
//!
//! # Frame sizes
//!
//! The decoder releases nothing of a frame before all of it arrived, so the first frame of a
//! burst is what the client waits for first (a response's headers ride in it). The limit
//! therefore starts at [`FIRST_FRAME`] and doubles with each frame up to
//! [`EncoderConfig::frame_bytes`], and starts over after each flush (the application paused,
//! so what comes next is a new exchange): the first bytes of an exchange cross the link after
//! 16 KiB, not 256 KiB (1.4 s at 1.5 Mbit/s for incompressible data), while a bulk transfer
//! still goes out in large frames, which compress better.
//!
//! The start of a burst is where coding, not the link, sets the pace: a frame's bytes leave
//! only once all of it is compressed (a 256 KiB frame takes 5–6 ms at level 4 on the 2-core
//! lab VM; level 4 is the 44 Mbit/s choice), and at the start nothing else is queued for the
//! link. Traced with packet captures on the appliances' LAN and WAN sides (a 1 MB DOC-like
//! file at 44 Mbit/s, 300 ms, 0 % loss, ten runs): the server's first byte reaches the data
//! centre appliance about 1.5 ms after the request, its first datagram leaves 0.9–1.4 ms
//! later (frames of 16 and 32 KiB), the link then idles 0–5 ms (median 2.5) while the next
//! frames are coded, and carries 230 datagrams in 63 ms; the client has the last byte 0.7 ms
//! after the last datagram: 69–75 ms past one RTT, where the issue's DOC goodput target asks
//! for 66. Handing the encoder a 64 KiB read in 16 KiB pieces, each closed frame written at
//! once, sent the first datagram earlier but left the total unchanged (median 72.0 ms
//! against 71.5): the link waited for the following frames instead. (A capture on another
//! lab VM found the link never idle after the first datagram, which left 1.45 ms after the
//! server's first byte, and the download at the target: how much coding costs at the start
//! depends on the host.)
//!
//! A literal frame that follows a known chunk P is compressed against a dictionary: the chunks
//! that followed P the last time (up to the frame's size + 8 KiB, at most 64 chunks), i.e. the
//! old version of the region being edited. The token names P and the chunk count; the decoder
//! follows the same links in its store. A 64-byte edit then costs a run token, a small literal
//! token and about the edit's size, instead of a whole chunk. Dictionary chunks never
//! include chunks of the frame itself (the peer does not hold those yet); if the peer's links
//! differ, its decompression or digest check fails and it sends a [`Need`].
//!
//! # Serving needs
//!
//! The encoder remembers what its last [`EncoderConfig::retain_tokens`] data tokens referred to
//! (ids only) and answers a [`Need`] with `Reply` tokens carrying the chunks' bytes, read back
//! from the store. If the store no longer holds one of them the need cannot be served and
//! [`EncodeError::Unservable`] tells the shell to reset the flow (the decoder never guesses).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::chunker::{ChunkParams, Chunker};
use crate::compress::Compressor;
use crate::id::{BatchHasher, ChunkId, DedupKey, Digest, DigestHasher};
use crate::store::{ChunkStore, PeerId, Probe};
use crate::wire::{
    Chunks, DictRef, Mode, Need, Token, MAX_DICT_BYTES, MAX_FRAME_CHUNKS, MAX_FRAME_RAW,
    MAX_RUN_CHUNKS,
};

/// The size limit of the first frame after the start of a flow or a flush (module doc, "Frame
/// sizes").
pub const FIRST_FRAME: usize = 16 * 1024;

/// Encoder settings. Out-of-range values are clamped by [`Encoder::new`] as documented.
#[derive(Clone, Debug)]
pub struct EncoderConfig {
    /// What to do with the flow's bytes. Default: [`Mode::Dedup`].
    pub mode: Mode,
    /// The peer this encoder sends to.
    pub peer: PeerId,
    /// Chunk sizes (dedup mode). Default: [`ChunkParams::DEFAULT`].
    pub chunks: ChunkParams,
    /// zstd level, clamped to 1..=19. Default 1: in the `codec` bench (64 MiB DOC-like, first
    /// pass) level 3 ran at 108 MiB/s against 188 MiB/s for level 1, for output only 4.8 %
    /// smaller (24.6 MB against 25.9 MB). The appliance raises it for peers behind slow links,
    /// where the link and not the encoder is the limit (`headway-wanopt`, by link rate).
    pub level: i32,
    /// Largest raw size of a literal or data frame in bytes, clamped to 1 KiB..=256 KiB, reached
    /// after [`FIRST_FRAME`]-sized and doubling frames (module doc, "Frame sizes").
    /// Default 256 KiB (the wire's largest): in the `codec` bench on DOC-like data it gives a
    /// 2.83:1 ratio against 2.67:1 at 128 KiB (2.59:1 at 64 KiB), decodes 977–981 MiB/s
    /// against 949–971, and encodes 293–295 MiB/s against 304–310 (`DEDUP_FRAME=…`, two
    /// alternating rounds). Frames never wait for data: a flush sends a partial frame, and
    /// the shell flushes whenever its socket has nothing more to read.
    pub frame_bytes: usize,
    /// Most chunks per run token, clamped to 1..=65536. Default 8192 (~16 MiB at 2 KiB),
    /// which keeps a single token's expansion below the decoder's default blocking budget.
    pub max_run: u32,
    /// Most bytes per run token, at least 1 MiB. Default 16 MiB: a run expands to this much
    /// at the decoder, which must stay below its blocking budget (64 MiB by default).
    pub max_run_bytes: u64,
    /// How many recent data tokens can still be served for a [`Need`]. Default 65536.
    pub retain_tokens: usize,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Dedup,
            peer: PeerId::default(),
            chunks: ChunkParams::DEFAULT,
            level: 1,
            frame_bytes: MAX_FRAME_RAW,
            max_run: 8192,
            max_run_bytes: 16 << 20,
            retain_tokens: 65_536,
        }
    }
}

/// Counters of one encoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncoderStats {
    /// Flow bytes received from the LAN side.
    pub lan_bytes: u64,
    /// Wire bytes handed out by [`Encoder::poll_transmit`] (all tokens, replies included).
    pub wan_bytes: u64,
    /// Chunks sent as literals.
    pub chunks_literal: u64,
    /// Chunks sent as references (inside runs).
    pub chunks_referenced: u64,
    /// Bytes of the referenced chunks.
    pub bytes_referenced: u64,
    /// `Run` tokens sent.
    pub run_tokens: u64,
    /// `Literal` and `Data` tokens sent.
    pub frame_tokens: u64,
    /// Frames whose payload was compressed.
    pub frames_compressed: u64,
    /// Needs answered.
    pub needs_served: u64,
}

impl EncoderStats {
    /// LAN bytes minus WAN bytes, or 0.
    pub fn bytes_saved(&self) -> u64 {
        self.lan_bytes.saturating_sub(self.wan_bytes)
    }
}

/// Why an encoder call failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// Data was passed after [`Encoder::finish`] (a bug in the shell).
    #[error("data after finish")]
    Finished,
    /// A need names a token this encoder never sent or no longer remembers; reset the flow.
    #[error("need for unknown token {seq}")]
    UnknownToken {
        /// The sequence number asked for.
        seq: u64,
    },
    /// The chunks of the token are gone from the store; reset the flow (retry is safe).
    #[error("cannot serve need for token {seq}: chunks no longer in the store")]
    Unservable {
        /// The sequence number asked for.
        seq: u64,
    },
}

#[derive(Debug)]
enum Sent {
    Literal(Vec<ChunkId>),
    Run {
        first: ChunkId,
        count: u32,
        digest: Digest,
    },
    Data,
}

#[derive(Debug)]
struct OpenRun {
    first: ChunkId,
    count: u32,
    bytes: u64,
    hasher: DigestHasher,
}

/// The sans-IO dedup encoder (see the module doc for the call order).
pub struct Encoder {
    cfg: EncoderConfig,
    store: Arc<dyn ChunkStore>,
    key: DedupKey,
    chunker: Chunker,
    /// Chunks cut by one `handle_data` call, fingerprinted together by `hasher`.
    cut: Vec<Bytes>,
    hasher: BatchHasher,
    /// The ids of the chunks [`Encoder::on_chunks`] recorded last, copied out of `hasher`.
    ids: Vec<ChunkId>,
    /// How many of `ids` are in a token or the open frame or run: the rest were recorded in
    /// the store ahead of being taken, and no dictionary may include them (the peer gets them
    /// after the frame being closed).
    ids_taken: usize,
    /// The chunks of one `record_many` call (scratch) and what it reported for each of `ids`.
    batch: Vec<(ChunkId, Bytes)>,
    probes: Vec<Probe>,
    compressor: Compressor,
    out: BytesMut,
    prev: Option<ChunkId>,
    lit_chunks: Vec<Bytes>,
    lit_ids: Vec<ChunkId>,
    lit_bytes: usize,
    lit_base: Option<ChunkId>,
    /// The size limit of the next literal or data frame (module doc, "Frame sizes").
    frame_limit: usize,
    dict: Vec<u8>,
    run: Option<OpenRun>,
    data: BytesMut,
    scratch: Vec<u8>,
    lens: Vec<u8>,
    next_seq: u64,
    retained: VecDeque<(u64, Sent)>,
    finished: bool,
    stats: EncoderStats,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("mode", &self.cfg.mode)
            .field("peer", &self.cfg.peer)
            .field("next_seq", &self.next_seq)
            .field("finished", &self.finished)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Encoder {
    /// An encoder for one flow direction; queues the `Hello` token.
    pub fn new(mut cfg: EncoderConfig, store: Arc<dyn ChunkStore>, key: DedupKey) -> Self {
        cfg.level = cfg.level.clamp(1, 19);
        cfg.frame_bytes = cfg.frame_bytes.clamp(1024, MAX_FRAME_RAW);
        cfg.max_run = cfg.max_run.clamp(1, MAX_RUN_CHUNKS);
        cfg.max_run_bytes = cfg.max_run_bytes.max(1 << 20);
        cfg.retain_tokens = cfg.retain_tokens.max(1);
        let first = FIRST_FRAME.min(cfg.frame_bytes);
        // Room for the first (smallest) frame; `out` grows with the frames after it, so an
        // idle or short flow does not hold a largest-frame buffer.
        let mut out = BytesMut::with_capacity(first + 1024);
        Token::Hello { mode: cfg.mode }.emit(&mut out);
        Self {
            chunker: Chunker::new(cfg.chunks),
            cut: Vec::new(),
            hasher: key.batch_hasher(),
            ids: Vec::new(),
            ids_taken: 0,
            batch: Vec::new(),
            probes: Vec::new(),
            compressor: Compressor::new(cfg.level),
            store,
            key,
            out,
            prev: None,
            lit_chunks: Vec::new(),
            lit_ids: Vec::new(),
            lit_bytes: 0,
            lit_base: None,
            frame_limit: first,
            dict: Vec::new(),
            run: None,
            data: BytesMut::new(),
            scratch: Vec::new(),
            lens: Vec::new(),
            next_seq: 0,
            retained: VecDeque::new(),
            finished: false,
            stats: EncoderStats::default(),
            cfg,
        }
    }

    /// Feeds flow bytes from the LAN side, in order, sliced any way.
    pub fn handle_data(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        if self.finished {
            return Err(EncodeError::Finished);
        }
        self.stats.lan_bytes += bytes.len() as u64;
        if self.cfg.mode == Mode::Dedup {
            let mut cut = std::mem::take(&mut self.cut);
            self.chunker.push(bytes, |c| cut.push(c));
            self.on_chunks(&mut cut);
            self.cut = cut;
        } else {
            let mut rest = bytes;
            while !rest.is_empty() {
                let room = self.frame_limit - self.data.len();
                let n = room.min(rest.len());
                self.data.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
                if self.data.len() == self.frame_limit {
                    self.close_data();
                }
            }
        }
        Ok(())
    }

    /// Sends everything held back (a short final chunk, the open literal frame and run).
    pub fn flush(&mut self) {
        if self.cfg.mode == Mode::Dedup {
            let mut cut = std::mem::take(&mut self.cut);
            self.chunker.flush(|c| cut.push(c));
            self.on_chunks(&mut cut);
            self.cut = cut;
            self.close_literal();
            self.close_run();
        } else {
            self.close_data();
        }
        self.frame_limit = FIRST_FRAME.min(self.cfg.frame_bytes);
    }

    /// Flushes and queues the `End` token. Later [`Encoder::handle_data`] calls fail; needs are
    /// still served. Calling it again does nothing.
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.flush();
        Token::End.emit(&mut self.out);
        self.finished = true;
    }

    /// Answers a decoder's [`Need`] by queueing `Reply` tokens with the literal chunks.
    pub fn handle_need(&mut self, need: Need) -> Result<(), EncodeError> {
        let seq = need.seq;
        let front = self.retained.front().map(|(s, _)| *s).unwrap_or(u64::MAX);
        let idx = seq
            .checked_sub(front)
            .map(|i| i as usize)
            .filter(|&i| i < self.retained.len())
            .ok_or(EncodeError::UnknownToken { seq })?;
        let chunks: Vec<(ChunkId, Bytes)> = match &self.retained[idx].1 {
            Sent::Data => return Err(EncodeError::UnknownToken { seq }),
            Sent::Literal(ids) => {
                let mut v = Vec::with_capacity(ids.len());
                for id in ids {
                    let data = self.store.get(id).ok_or(EncodeError::Unservable { seq })?;
                    v.push((*id, data));
                }
                v
            }
            Sent::Run {
                first,
                count,
                digest,
            } => {
                let v = self
                    .store
                    .run(first, *count)
                    .ok_or(EncodeError::Unservable { seq })?;
                if self.key.digest(v.iter().map(|(id, _)| id)) != *digest {
                    return Err(EncodeError::Unservable { seq });
                }
                v
            }
        };
        // Never serve bytes that do not match their id (a corrupt store is not our peer's
        // problem to discover).
        if chunks.iter().any(|(id, d)| self.key.chunk_id(d) != *id) {
            return Err(EncodeError::Unservable { seq });
        }
        let mut start = 0;
        while start < chunks.len() {
            let mut end = start;
            let mut raw = 0;
            while end < chunks.len()
                && end - start < MAX_FRAME_CHUNKS
                && (end == start || raw + chunks[end].1.len() <= self.cfg.frame_bytes)
            {
                raw += chunks[end].1.len();
                end += 1;
            }
            let last = end == chunks.len();
            self.emit_chunks(&chunks[start..end], None, |chunks, _| Token::Reply {
                seq,
                last,
                chunks,
            });
            start = end;
        }
        self.stats.needs_served += 1;
        Ok(())
    }

    /// Wire bytes to send on the tunnel stream, if any.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        if self.out.is_empty() {
            return None;
        }
        self.stats.wan_bytes += self.out.len() as u64;
        Some(self.out.split().freeze())
    }

    /// Whether [`Encoder::finish`] was called.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Counters so far.
    pub fn stats(&self) -> EncoderStats {
        self.stats
    }

    /// The (clamped) configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// Fingerprints the chunks just cut (all at once: [`BatchHasher`]), records them in the
    /// store in one call (a disk store writes them at once) and takes them in order; leaves
    /// `cut` empty.
    fn on_chunks(&mut self, cut: &mut Vec<Bytes>) {
        self.ids.clear();
        self.ids.extend_from_slice(self.hasher.hash(cut));
        self.ids_taken = 0;
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        batch.extend(self.ids.iter().copied().zip(cut.drain(..)));
        self.probes.clear();
        self.store
            .record_many(self.cfg.peer, self.prev.as_ref(), &batch, &mut self.probes);
        for (k, (id, data)) in batch.drain(..).enumerate() {
            let probe = self.probes.get(k).copied().unwrap_or_default();
            self.on_chunk(id, data, probe);
            self.ids_taken += 1;
        }
        self.batch = batch;
    }

    /// Takes one chunk, already recorded (`probe` is what the store knew before).
    fn on_chunk(&mut self, id: ChunkId, data: Bytes, probe: Probe) {
        let prev = self.prev.replace(id);
        let len = data.len() as u64;
        if probe.held {
            if let Some(run) = &mut self.run {
                if probe.follows
                    && run.count < self.cfg.max_run
                    && run.bytes + len <= self.cfg.max_run_bytes
                {
                    run.count += 1;
                    run.bytes += len;
                    run.hasher.push(&id);
                    return;
                }
            }
            self.close_run();
            self.close_literal();
            let mut hasher = self.key.digest_hasher();
            hasher.push(&id);
            self.run = Some(OpenRun {
                first: id,
                count: 1,
                bytes: len,
                hasher,
            });
        } else {
            self.close_run();
            if self.lit_bytes + data.len() > self.frame_limit
                || self.lit_ids.len() == MAX_FRAME_CHUNKS
            {
                self.close_literal();
            }
            if self.lit_ids.is_empty() {
                self.lit_base = prev;
            }
            self.lit_bytes += data.len();
            self.lit_ids.push(id);
            self.lit_chunks.push(data);
        }
    }

    fn close_run(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        let digest = run.hasher.finish();
        Token::Run {
            first: run.first,
            count: run.count,
            digest,
        }
        .emit(&mut self.out);
        self.stats.run_tokens += 1;
        self.stats.chunks_referenced += u64::from(run.count);
        self.stats.bytes_referenced += run.bytes;
        self.retain(Sent::Run {
            first: run.first,
            count: run.count,
            digest,
        });
    }

    fn close_literal(&mut self) {
        if self.lit_ids.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut self.lit_ids);
        let chunks = std::mem::take(&mut self.lit_chunks);
        let dict = self.dictionary(&ids);
        self.lit_bytes = 0;
        let digest = self.key.digest(ids.iter());
        let pairs: Vec<(ChunkId, Bytes)> = ids.iter().copied().zip(chunks).collect();
        self.emit_chunks(&pairs, dict, |chunks, dict| Token::Literal {
            digest,
            dict,
            chunks,
        });
        self.stats.chunks_literal += ids.len() as u64;
        self.stats.frame_tokens += 1;
        self.retain(Sent::Literal(ids));
        self.grow_frames();
    }

    /// Picks the literal frame's dictionary: the chunks that followed its predecessor the last
    /// time, i.e. the old version of the region being sent, into `self.dict`. `None` if there
    /// is none or it would include chunks of this very frame (the peer does not have those).
    fn dictionary(&mut self, ids: &[ChunkId]) -> Option<DictRef> {
        let base = self.lit_base.take()?;
        if ids.len() > 256 {
            return None;
        }
        let want = self.lit_bytes + 8192;
        let mut v = self.store.follow(&base, 1 + 64, want);
        if v.len() < 2 {
            return None;
        }
        let mut total = 0;
        let mut keep = 1;
        for (id, d) in &v[1..] {
            if ids.contains(id) || self.recorded_ahead(id) || total + d.len() > MAX_DICT_BYTES {
                break;
            }
            total += d.len();
            keep += 1;
        }
        v.truncate(keep);
        if v.len() < 2 {
            return None;
        }
        self.dict.clear();
        for (_, d) in &v[1..] {
            self.dict.extend_from_slice(d);
        }
        Some(DictRef {
            base,
            count: (v.len() - 1) as u16,
        })
    }

    /// Whether `id` is one of the chunks recorded ahead of being taken (see `ids_taken`) that
    /// the peer did not hold before: it gets them only after the frame being closed.
    fn recorded_ahead(&self, id: &ChunkId) -> bool {
        let from = self.ids_taken.min(self.ids.len());
        self.ids[from..]
            .iter()
            .zip(self.probes.get(from..).unwrap_or_default())
            .any(|(a, p)| a == id && !p.held)
    }

    /// Emits one token carrying `chunks` (≤ MAX_FRAME_CHUNKS, ≤ MAX_FRAME_RAW bytes), compressed
    /// against `self.dict` when `dict` is given and that helps.
    fn emit_chunks(
        &mut self,
        chunks: &[(ChunkId, Bytes)],
        dict: Option<DictRef>,
        token: impl for<'a> FnOnce(Chunks<'a>, Option<DictRef>) -> Token<'a>,
    ) {
        self.scratch.clear();
        self.lens.clear();
        for (_, d) in chunks {
            self.scratch.extend_from_slice(d);
            self.lens.extend_from_slice(&(d.len() as u16).to_be_bytes());
        }
        let mut used = None;
        let mut compressed = None;
        if dict.is_some() {
            compressed = self.compressor.compress(&self.scratch, &self.dict);
            if compressed.is_some() {
                used = dict;
            }
        }
        if compressed.is_none() {
            compressed = self.compressor.compress(&self.scratch, &[]);
        }
        let (flag, payload) = match compressed {
            Some(c) => (true, c),
            None => (false, self.scratch.as_slice()),
        };
        if flag {
            self.stats.frames_compressed += 1;
        }
        token(Chunks::new(flag, &self.lens, payload), used).emit(&mut self.out);
    }

    fn close_data(&mut self) {
        if self.data.is_empty() {
            return;
        }
        let raw = self.data.split().freeze();
        let digest = data_digest(&self.key, &raw);
        let compressed = if self.cfg.mode == Mode::Compress {
            self.compressor.compress(&raw, &[])
        } else {
            None
        };
        let (flag, payload) = match compressed {
            Some(c) => (true, c),
            None => (false, &raw[..]),
        };
        if flag {
            self.stats.frames_compressed += 1;
        }
        Token::Data {
            compressed: flag,
            raw_len: raw.len() as u32,
            digest,
            payload,
        }
        .emit(&mut self.out);
        self.stats.frame_tokens += 1;
        self.retain(Sent::Data);
        self.grow_frames();
    }

    /// Doubles the next frame's size limit, up to the configured size.
    fn grow_frames(&mut self) {
        self.frame_limit = (self.frame_limit * 2).min(self.cfg.frame_bytes);
    }

    fn retain(&mut self, sent: Sent) {
        if self.retained.len() == self.cfg.retain_tokens {
            self.retained.pop_front();
        }
        self.retained.push_back((self.next_seq, sent));
        self.next_seq += 1;
    }
}

/// The digest a `Data` token carries: keyed BLAKE3 of the raw bytes, truncated to 128 bits.
pub(crate) fn data_digest(key: &DedupKey, raw: &[u8]) -> Digest {
    let id = key.chunk_id(raw);
    let mut d = [0u8; 16];
    d.copy_from_slice(&id.0[..16]);
    Digest(d)
}
