//! The decoding half: wire tokens in, verified LAN bytes out, needs back.
//!
//! Owns [`Decoder`], [`DecoderConfig`], [`DecoderStats`] and [`DecodeError`]. One decoder
//! serves one direction of one flow from one peer; the [`ChunkStore`] behind it is shared.
//!
//! # Call order
//!
//! ```text
//! new ─▶ handle_wire* ─▶ … until is_finished()
//!          └─ after each call: drain poll_output (to the client) and poll_need (to the encoder)
//!             and poll_peer_need (to the local encoder of the reverse direction)
//! ```
//!
//! # The back channel
//!
//! A shell may carry the [`Need`]s of one direction in-band on the reverse direction of the
//! same flow, interleaved (as whole tokens) with that direction's encoder output after its
//! `Hello`. The decoder of the reverse direction accepts such `Need` tokens at any point after
//! `Hello` (also after `End`) and hands them out, in order, through
//! [`Decoder::poll_peer_need`]; the shell passes them to its local encoder's `handle_need`.
//! They are queued until polled: drain after each `handle_wire` call, so the queue never holds
//! more than one call's input worth.
//!
//! # Invariants
//!
//! - **Nothing unverified reaches the client.** A literal frame's chunks are re-hashed and the
//!   digest over their ids must match the frame's; a run's chunks come from the store, each is
//!   re-hashed against its id and the digest over the ids must match the token's; a reply must
//!   reproduce the digest of the token it answers; a `Data` frame's bytes must match its digest.
//! - **Order is preserved.** Every data token gets a slot in stream order; output is released
//!   from the front only. A token that cannot be resolved (chunk missing from the store, run
//!   linked differently, corrupt literal) becomes a waiting slot and a [`Need`]; later tokens
//!   are still parsed and resolved (the `Reply` comes on the same stream, behind them) but held.
//! - **Bounded memory.** Tokens are parsed under the wire limits; bytes held behind a waiting
//!   slot are limited by [`DecoderConfig::max_blocked_bytes`], beyond which the flow fails
//!   ([`DecodeError::Blocked`]) rather than buffer without end.
//! - **Errors are sticky**: after one, every call returns [`DecodeError::Failed`]. The shell
//!   resets the flow; retrying the transfer is safe because no wrong byte was emitted.
//! - Chunks are recorded in the store (with their predecessor, for the peer) when released, in
//!   flow order, exactly as the encoder recorded them.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};

use crate::compress::Decompressor;
use crate::encoder::data_digest;
use crate::id::{BatchHasher, ChunkId, DedupKey, Digest, DigestHasher};
use crate::store::{ChunkStore, PeerId, Probe};
use crate::wire::{Chunks, DictRef, Mode, Need, Token, WireError, MAX_DICT_BYTES, MAX_RUN_CHUNKS};

/// Decoder settings.
#[derive(Clone, Debug)]
pub struct DecoderConfig {
    /// The peer this decoder receives from.
    pub peer: PeerId,
    /// Most bytes held behind an unresolved token before the flow fails. Default 64 MiB:
    /// must exceed what the encoder can send in one round trip plus one run's expansion.
    pub max_blocked_bytes: usize,
}

impl Default for DecoderConfig {
    fn default() -> Self {
        Self {
            peer: PeerId::default(),
            max_blocked_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Counters of one decoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecoderStats {
    /// Wire bytes received.
    pub wan_bytes: u64,
    /// Verified bytes released to the client.
    pub lan_bytes: u64,
    /// Chunks received as literals (frames and replies).
    pub chunks_literal: u64,
    /// Chunks resolved from the store through runs.
    pub chunks_referenced: u64,
    /// `Run` tokens received.
    pub run_tokens: u64,
    /// Needs issued.
    pub needs_sent: u64,
    /// Needs answered by a verified reply.
    pub needs_resolved: u64,
}

/// Why the decoder rejected its input. Every variant means the flow must be reset; none means
/// a wrong byte was emitted.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The wire bytes do not parse.
    #[error("bad wire input: {0}")]
    Wire(#[from] WireError),
    /// The stream did not start with `Hello`, or sent it twice.
    #[error("stream must start with exactly one hello")]
    Hello,
    /// A token that is not allowed here (wrong mode, after `End`, or a `Need`).
    #[error("unexpected {0} token")]
    Unexpected(&'static str),
    /// A compressed payload did not decompress to its declared size.
    #[error("bad compressed payload")]
    Decompress,
    /// A `Data` frame failed its digest (no reference to re-fetch in these modes).
    #[error("data frame digest mismatch")]
    DataDigest,
    /// A `Reply` for a token that is not waiting.
    #[error("reply for token {seq} that is not waiting")]
    UnexpectedReply {
        /// Sequence number in the reply.
        seq: u64,
    },
    /// A complete reply did not reproduce the digest of the token it answers.
    #[error("reply for token {seq} does not match the token's digest")]
    ReplyMismatch {
        /// Sequence number in the reply.
        seq: u64,
    },
    /// Too many bytes held behind an unresolved token.
    #[error("too many bytes held behind an unresolved token")]
    Blocked,
    /// An earlier call failed; the decoder accepts nothing more.
    #[error("decoder failed earlier")]
    Failed,
}

#[derive(Debug)]
enum Slot {
    Chunks(Vec<(ChunkId, Bytes)>),
    Data(Bytes),
    Waiting(Box<Waiting>),
}

/// A token waiting for its reply: the digest to reproduce and the reply parts so far.
#[derive(Debug)]
struct Waiting {
    digest: Digest,
    got: Vec<(ChunkId, Bytes)>,
    hasher: DigestHasher,
}

/// The sans-IO dedup decoder (see the module doc for call order and invariants).
pub struct Decoder {
    cfg: DecoderConfig,
    store: Arc<dyn ChunkStore>,
    key: DedupKey,
    hasher: BatchHasher,
    dctx: Decompressor,
    dict: Vec<u8>,
    inbuf: BytesMut,
    mode: Option<Mode>,
    ended: bool,
    failed: bool,
    /// Slots in stream order; `front_seq` is the sequence number of `slots[0]`.
    slots: VecDeque<Slot>,
    front_seq: u64,
    held_bytes: usize,
    output: VecDeque<Bytes>,
    needs: VecDeque<Need>,
    /// Needs the peer sent in-band for the reverse direction's encoder.
    peer_needs: VecDeque<Need>,
    prev: Option<ChunkId>,
    /// What [`ChunkStore::record_many`] reports (unused: a decoder records what it received,
    /// and needs no answer), kept to reuse its allocation.
    probes: Vec<Probe>,
    stats: DecoderStats,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("peer", &self.cfg.peer)
            .field("mode", &self.mode)
            .field("front_seq", &self.front_seq)
            .field("slots", &self.slots.len())
            .field("failed", &self.failed)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Decoder {
    /// A decoder for one flow direction.
    pub fn new(cfg: DecoderConfig, store: Arc<dyn ChunkStore>, key: DedupKey) -> Self {
        Self {
            cfg,
            store,
            hasher: key.batch_hasher(),
            key,
            dctx: Decompressor::new(),
            dict: Vec::new(),
            inbuf: BytesMut::new(),
            mode: None,
            ended: false,
            failed: false,
            slots: VecDeque::new(),
            front_seq: 0,
            held_bytes: 0,
            output: VecDeque::new(),
            needs: VecDeque::new(),
            peer_needs: VecDeque::new(),
            prev: None,
            probes: Vec::new(),
            stats: DecoderStats::default(),
        }
    }

    /// Feeds wire bytes from the tunnel stream, in order, sliced any way. Never panics.
    ///
    /// This is the fuzzing entry point: any input either decodes or returns an error, and
    /// nothing reaches [`Decoder::poll_output`] unless it was verified.
    pub fn handle_wire(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        if self.failed {
            return Err(DecodeError::Failed);
        }
        self.stats.wan_bytes += bytes.len() as u64;
        // Only a token that straddles two calls is copied (into `inbuf`); whole tokens are
        // parsed where they lie, so most wire bytes are never copied before decompression.
        let r = self.complete_pending(bytes).and_then(|rest| {
            let used = self.consume(rest)?;
            self.inbuf.extend_from_slice(&rest[used..]);
            Ok(())
        });
        if r.is_err() {
            self.failed = true;
            self.slots.clear();
            self.inbuf.clear();
        }
        r
    }

    /// The next run of verified bytes for the client.
    pub fn poll_output(&mut self) -> Option<Bytes> {
        self.output.pop_front()
    }

    /// The next [`Need`] to send back to the encoder.
    pub fn poll_need(&mut self) -> Option<Need> {
        self.needs.pop_front()
    }

    /// The next [`Need`] the peer sent in-band on this stream (see "The back channel" in the
    /// module doc), for the local encoder of the reverse direction.
    pub fn poll_peer_need(&mut self) -> Option<Need> {
        self.peer_needs.pop_front()
    }

    /// The encoder finished and every byte was released (poll_output may still hold some).
    pub fn is_finished(&self) -> bool {
        self.ended && self.slots.is_empty() && !self.failed
    }

    /// Output is held behind a token waiting for a reply.
    pub fn is_blocked(&self) -> bool {
        !self.slots.is_empty()
    }

    /// The mode announced by the encoder, once its `Hello` arrived.
    pub fn mode(&self) -> Option<Mode> {
        self.mode
    }

    /// Counters so far.
    pub fn stats(&self) -> DecoderStats {
        self.stats
    }

    /// Completes and handles the token held in `inbuf` from a previous call, taking only the
    /// bytes it still lacks from the front of `bytes`; returns the rest of `bytes`, which is
    /// empty if the held token is still incomplete. `inbuf` stays bounded by one token
    /// (`Token::parse` refuses a length over the wire limit before asking for more bytes).
    fn complete_pending<'b>(&mut self, mut bytes: &'b [u8]) -> Result<&'b [u8], DecodeError> {
        while !self.inbuf.is_empty() {
            let needed = match Token::parse(&self.inbuf) {
                Ok(_) => 0,
                Err(WireError::Truncated { needed }) => needed,
                Err(e) => return Err(e.into()),
            };
            if needed > self.inbuf.len() {
                if bytes.is_empty() {
                    break;
                }
                // Up to the header first, then up to the end of the body: never past the token.
                let n = (needed - self.inbuf.len()).min(bytes.len());
                self.inbuf.extend_from_slice(&bytes[..n]);
                bytes = &bytes[n..];
                continue;
            }
            let mut buf = std::mem::take(&mut self.inbuf);
            let used = self.consume(&buf)?;
            buf.advance(used);
            self.inbuf = buf;
        }
        Ok(bytes)
    }

    /// Parses and handles every whole token in `buf`; returns the bytes consumed.
    fn consume(&mut self, buf: &[u8]) -> Result<usize, DecodeError> {
        let mut used = 0;
        loop {
            match Token::parse(&buf[used..]) {
                Ok((token, n)) => {
                    self.handle_token(token)?;
                    used += n;
                }
                Err(WireError::Truncated { .. }) => return Ok(used),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn handle_token(&mut self, token: Token<'_>) -> Result<(), DecodeError> {
        let Some(mode) = self.mode else {
            return match token {
                Token::Hello { mode } => {
                    self.mode = Some(mode);
                    Ok(())
                }
                _ => Err(DecodeError::Hello),
            };
        };
        if let Token::Need(need) = token {
            // The back channel of the reverse direction, carried in-band (module doc).
            self.peer_needs.push_back(need);
            return Ok(());
        }
        if self.ended && !matches!(token, Token::Reply { .. }) {
            return Err(DecodeError::Unexpected("post-end"));
        }
        match token {
            Token::Hello { .. } => return Err(DecodeError::Hello),
            // Handled above, before the post-end check.
            Token::Need(_) => return Ok(()),
            Token::End => self.ended = true,
            Token::Data {
                compressed,
                raw_len,
                digest,
                payload,
            } => {
                if mode == Mode::Dedup {
                    return Err(DecodeError::Unexpected("data"));
                }
                let raw = self.payload(compressed, raw_len as usize, payload, false)?;
                if data_digest(&self.key, &raw) != digest {
                    return Err(DecodeError::DataDigest);
                }
                self.push_slot(Slot::Data(raw));
            }
            Token::Literal {
                digest,
                dict,
                chunks,
            } => {
                if mode != Mode::Dedup {
                    return Err(DecodeError::Unexpected("literal"));
                }
                let list = match dict {
                    None => Some(self.chunks(chunks, false)?),
                    // A dictionary that diverged from the encoder's shows as a failed
                    // decompression or a digest mismatch: both are resolved by a need.
                    Some(d) if self.load_dict(&d) => self.chunks(chunks, true).ok(),
                    Some(_) => None,
                };
                match list {
                    Some(list) if self.key.digest(list.iter().map(|(id, _)| id)) == digest => {
                        self.stats.chunks_literal += list.len() as u64;
                        self.push_slot(Slot::Chunks(list));
                    }
                    _ => self.push_waiting(digest),
                }
            }
            Token::Run {
                first,
                count,
                digest,
            } => {
                if mode != Mode::Dedup {
                    return Err(DecodeError::Unexpected("run"));
                }
                self.stats.run_tokens += 1;
                // The encoder recorded `first` after its predecessor before it extended the run,
                // and the run may follow the link that made (`x x x` repeats do). If nothing is
                // pending, `prev` is that predecessor: record the link now, as release would.
                if self.slots.is_empty() {
                    if let Some(d) = self.store.get(&first) {
                        self.store
                            .record(self.cfg.peer, self.prev.as_ref(), &first, &d);
                    }
                }
                match self.resolve_run(&first, count, &digest) {
                    Some(list) => {
                        self.stats.chunks_referenced += list.len() as u64;
                        self.push_slot(Slot::Chunks(list));
                    }
                    None => self.push_waiting(digest),
                }
            }
            Token::Reply { seq, last, chunks } => {
                if mode != Mode::Dedup {
                    return Err(DecodeError::Unexpected("reply"));
                }
                let list = self.chunks(chunks, false)?;
                let idx = seq
                    .checked_sub(self.front_seq)
                    .and_then(|i| usize::try_from(i).ok())
                    .filter(|&i| i < self.slots.len())
                    .ok_or(DecodeError::UnexpectedReply { seq })?;
                let Slot::Waiting(w) = &mut self.slots[idx] else {
                    return Err(DecodeError::UnexpectedReply { seq });
                };
                let Waiting {
                    digest,
                    got,
                    hasher,
                } = &mut **w;
                if got.len() + list.len() > MAX_RUN_CHUNKS as usize {
                    return Err(DecodeError::ReplyMismatch { seq });
                }
                let added: usize = list.iter().map(|(_, d)| d.len()).sum();
                for (id, _) in &list {
                    hasher.push(id);
                }
                got.extend(list);
                if last {
                    if hasher.finish() != *digest {
                        return Err(DecodeError::ReplyMismatch { seq });
                    }
                    let got = std::mem::take(got);
                    self.stats.chunks_literal += got.len() as u64;
                    self.slots[idx] = Slot::Chunks(got);
                    self.stats.needs_resolved += 1;
                }
                self.held_bytes += added;
            }
        }
        self.release();
        if self.held_bytes > self.cfg.max_blocked_bytes {
            return Err(DecodeError::Blocked);
        }
        Ok(())
    }

    /// Resolves a run from the store and verifies every chunk and the digest.
    fn resolve_run(
        &mut self,
        first: &ChunkId,
        count: u32,
        digest: &Digest,
    ) -> Option<Vec<(ChunkId, Bytes)>> {
        // Bounded by bytes as well as chunks, so a hostile count cannot make a disk store load
        // more than the blocking budget.
        let list = self
            .store
            .follow(first, count, self.cfg.max_blocked_bytes.saturating_add(1));
        if list.len() != count as usize || list[0].0 != *first {
            return None;
        }
        if self.key.digest(list.iter().map(|(id, _)| id)) != *digest {
            return None;
        }
        let chunks: Vec<&Bytes> = list.iter().map(|(_, d)| d).collect();
        let ids = self.hasher.hash(&chunks);
        let verified = ids.iter().zip(&list).all(|(got, (id, _))| got == id);
        verified.then_some(list)
    }

    /// Gathers the bytes of a literal's dictionary into `self.dict`; false if the store does
    /// not hold all of them.
    fn load_dict(&mut self, d: &DictRef) -> bool {
        // The budget counts the base chunk too, which is not part of the dictionary: allow
        // the largest chunk (lengths are 16-bit on the wire) on top of the dictionary's limit.
        let v = self.store.follow(
            &d.base,
            u32::from(d.count) + 1,
            MAX_DICT_BYTES + usize::from(u16::MAX),
        );
        if v.len() != usize::from(d.count) + 1
            || v[1..].iter().map(|(_, b)| b.len()).sum::<usize>() > MAX_DICT_BYTES
        {
            return false;
        }
        self.dict.clear();
        for (_, b) in &v[1..] {
            self.dict.extend_from_slice(b);
        }
        true
    }

    /// Decompresses (if needed) a payload of exactly `raw_len` bytes, against `self.dict` if
    /// `with_dict`.
    fn payload(
        &mut self,
        compressed: bool,
        raw_len: usize,
        payload: &[u8],
        with_dict: bool,
    ) -> Result<Bytes, DecodeError> {
        if !compressed {
            return Ok(Bytes::copy_from_slice(payload));
        }
        let dict: &[u8] = if with_dict { &self.dict } else { &[] };
        // The allocation is `raw_len` ≤ MAX_FRAME_RAW (wire limits).
        let raw = self
            .dctx
            .decompress(payload, raw_len, dict)
            .ok_or(DecodeError::Decompress)?;
        Ok(Bytes::from(raw))
    }

    /// Decompresses a chunk list and computes each chunk's id.
    fn chunks(
        &mut self,
        chunks: Chunks<'_>,
        with_dict: bool,
    ) -> Result<Vec<(ChunkId, Bytes)>, DecodeError> {
        let raw = self.payload(
            chunks.compressed,
            chunks.raw_len(),
            chunks.payload,
            with_dict,
        )?;
        let mut parts = Vec::with_capacity(chunks.count());
        let mut at = 0;
        for len in chunks.lens() {
            parts.push(raw.slice(at..at + len));
            at += len;
        }
        let ids = self.hasher.hash(&parts);
        Ok(ids.iter().copied().zip(parts).collect())
    }

    fn push_slot(&mut self, slot: Slot) {
        self.held_bytes += match &slot {
            Slot::Chunks(v) => v.iter().map(|(_, d)| d.len()).sum(),
            Slot::Data(d) => d.len(),
            Slot::Waiting(_) => 0,
        };
        self.slots.push_back(slot);
    }

    fn push_waiting(&mut self, digest: Digest) {
        let seq = self.front_seq + self.slots.len() as u64;
        self.needs.push_back(Need { seq });
        self.stats.needs_sent += 1;
        self.slots.push_back(Slot::Waiting(Box::new(Waiting {
            digest,
            got: Vec::new(),
            hasher: self.key.digest_hasher(),
        })));
    }

    /// Moves resolved slots from the front to the output, recording chunks in the store.
    fn release(&mut self) {
        while let Some(front) = self.slots.front() {
            if matches!(front, Slot::Waiting(_)) {
                break;
            }
            let Some(slot) = self.slots.pop_front() else {
                break;
            };
            self.front_seq += 1;
            match slot {
                Slot::Chunks(list) => {
                    // One call per slot: a disk store writes the slot's records at once.
                    self.probes.clear();
                    self.store.record_many(
                        self.cfg.peer,
                        self.prev.as_ref(),
                        &list,
                        &mut self.probes,
                    );
                    for (id, d) in list {
                        self.prev = Some(id);
                        self.held_bytes = self.held_bytes.saturating_sub(d.len());
                        self.stats.lan_bytes += d.len() as u64;
                        self.output.push_back(d);
                    }
                }
                Slot::Data(d) => {
                    self.held_bytes = self.held_bytes.saturating_sub(d.len());
                    self.stats.lan_bytes += d.len() as u64;
                    self.output.push_back(d);
                }
                Slot::Waiting(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoder::{Encoder, EncoderConfig};
    use crate::store::MemoryStore;

    fn key() -> DedupKey {
        DedupKey::new([9; 32])
    }

    /// Compressible text with some structure, long enough for several literal frames.
    fn text(len: usize) -> Vec<u8> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let words: [&[u8]; 6] = [
            b"alpha ", b"beta ", b"gamma ", b"delta\n", b"ep ", b"zeta, ",
        ];
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.extend_from_slice(words[(x % 6) as usize]);
            v.push((x >> 40) as u8);
        }
        v.truncate(len);
        v
    }

    fn wire(data: &[u8]) -> Vec<u8> {
        let mut enc = Encoder::new(
            EncoderConfig {
                peer: PeerId(1),
                frame_bytes: 16 * 1024,
                ..EncoderConfig::default()
            },
            Arc::new(MemoryStore::new(1 << 26)),
            key(),
        );
        let mut wire = Vec::new();
        enc.handle_data(data).expect("not finished");
        enc.finish();
        while let Some(b) = enc.poll_transmit() {
            wire.extend_from_slice(&b);
        }
        wire
    }

    /// Feeds `wire` cut into `sizes` (cycled) and returns the output. Checks after every call
    /// that the decoder holds back less than one whole token.
    fn decode(wire: &[u8], sizes: &[usize]) -> Result<Vec<u8>, DecodeError> {
        let mut dec = Decoder::new(
            DecoderConfig::default(),
            Arc::new(MemoryStore::new(1 << 26)),
            key(),
        );
        let mut out = Vec::new();
        let mut rest = wire;
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].clamp(1, rest.len());
            i += 1;
            dec.handle_wire(&rest[..n])?;
            rest = &rest[n..];
            assert!(
                matches!(Token::parse(&dec.inbuf), Err(WireError::Truncated { .. })),
                "a whole token was left unhandled"
            );
            while let Some(b) = dec.poll_output() {
                out.extend_from_slice(&b);
            }
        }
        assert!(dec.is_finished());
        Ok(out)
    }

    #[test]
    fn any_slicing_gives_the_same_output() {
        let data = text(200_000);
        let wire = wire(&data);
        assert!(wire.len() < data.len() / 2, "literals should compress");
        // Whole; byte by byte (every cut inside a header); cuts that complete a held token
        // and carry several more whole tokens plus the start of the next one.
        for sizes in [
            &[usize::MAX][..],
            &[1],
            &[3, 2, 40_000],
            &[5, 7_000, 1, 90_000],
            &[4_093],
        ] {
            assert_eq!(decode(&wire, sizes).expect("valid wire"), data, "{sizes:?}");
        }
    }

    #[test]
    fn bad_bytes_after_a_held_token_fail_for_good() {
        let data = text(50_000);
        let mut wire = wire(&data);
        // Cut inside the first literal's header, then corrupt its length beyond the limit.
        let (hello, n) = Token::parse(&wire).expect("hello");
        assert!(matches!(hello, Token::Hello { .. }));
        wire[n + 1..n + 5].copy_from_slice(&u32::MAX.to_be_bytes());
        let mut dec = Decoder::new(
            DecoderConfig::default(),
            Arc::new(MemoryStore::new(1 << 26)),
            key(),
        );
        dec.handle_wire(&wire[..n + 2])
            .expect("header not complete yet");
        assert!(matches!(
            dec.handle_wire(&wire[n + 2..]),
            Err(DecodeError::Wire(WireError::TooLong(_)))
        ));
        assert_eq!(dec.handle_wire(&wire[..1]), Err(DecodeError::Failed));
        assert!(dec.poll_output().is_none());
    }
}
