//! The codec's wire format: [`Token`] reprs with `parse` / `emit` / `buffer_len`.
//!
//! Owns the byte layout of everything the encoder puts on a tunnel stream and of the [`Need`]
//! message that travels back. It does not decide what to send (the encoder does) nor verify
//! content (the decoder does); it only guarantees that a parsed token respects the hard limits
//! below, so nothing downstream can be made to allocate more than [`MAX_FRAME_RAW`] bytes per
//! token or walk more than [`MAX_RUN_CHUNKS`] chunks.
//!
//! # Layout (version 1)
//!
//! Every token is `type: u8 | body_len: u32 BE | body`. `body_len` ≤ [`MAX_BODY`], checked as
//! soon as the 5-byte header is in, before the body is buffered. A body must be consumed
//! exactly. All integers are big-endian.
//!
//! | type | token | body |
//! |---|---|---|
//! | 1 | `Hello` | `version: u8 (=1) · mode: u8 (0 pass-through, 1 compress, 2 dedup)` |
//! | 2 | `Data` | `flags: u8 · raw_len: u32 · digest: [16] · payload` |
//! | 3 | `Literal` | `flags: u8 · digest: [16] · [base: [32] · dict_n: u16] · n: u16 · len: u16 × n · payload` |
//! | 4 | `Run` | `first: [32] · count: u32 · digest: [16]` |
//! | 5 | `Reply` | `seq: u64 · flags: u8 · n: u16 · len: u16 × n · payload` |
//! | 6 | `End` | empty |
//! | 7 | `Need` | `seq: u64` |
//!
//! `flags` bit 0: payload is one zstd frame (else raw); bit 1 (`Reply` only): last part of the
//! reply; bit 2 (`Literal` only, with bit 0): the zstd frame was compressed against a raw-content
//! dictionary (RFC 8878 §5), the bytes of the `dict_n` chunks that follow chunk `base` by
//! successor links in the store (the bracketed fields are present only then). Other bits must
//! be zero. A raw payload is exactly the raw length (`raw_len`, or the
//! sum of the `len`s); a compressed one is strictly shorter (the encoder sends raw otherwise).
//! `Data`'s digest is keyed BLAKE3 of the raw bytes truncated to 16 bytes; `Literal`'s and
//! `Run`'s digests are [`Digest`]s over the chunk ids (see [`crate::id`]).
//!
//! Data tokens (`Data`, `Literal`, `Run`) are numbered implicitly from 0 in stream order; a
//! [`Need`] names one by that sequence number and `Reply` parts answer it.

use bytes::{BufMut, BytesMut};

use crate::id::{ChunkId, Digest};

/// The only wire version this crate speaks.
pub const VERSION: u8 = 1;
/// Bytes of the token header (`type`, `body_len`).
pub const HEADER_LEN: usize = 5;
/// Largest raw (decompressed) size of one `Data`, `Literal` or `Reply` token.
pub const MAX_FRAME_RAW: usize = 256 * 1024;
/// Most chunks in one `Literal` or `Reply` token.
pub const MAX_FRAME_CHUNKS: usize = 4096;
/// Most chunks one `Run` may reference (64 Ki chunks; encoders stop far earlier by default).
pub const MAX_RUN_CHUNKS: u32 = 65_536;
/// Largest token body.
pub const MAX_BODY: usize = 1 + 16 + 34 + 8 + 2 + 2 * MAX_FRAME_CHUNKS + MAX_FRAME_RAW;

const FLAG_ZSTD: u8 = 1;
const FLAG_LAST: u8 = 2;
const FLAG_DICT: u8 = 4;

/// Most chunks a literal's dictionary may name.
pub const MAX_DICT_CHUNKS: u16 = 256;
/// Most dictionary bytes a literal may use, not counting its base chunk (a decoder stops
/// following links there).
pub const MAX_DICT_BYTES: usize = 256 * 1024;

const T_HELLO: u8 = 1;
const T_DATA: u8 = 2;
const T_LITERAL: u8 = 3;
const T_RUN: u8 = 4;
const T_REPLY: u8 = 5;
const T_END: u8 = 6;
const T_NEED: u8 = 7;

/// What the encoder does to a flow's bytes (the service class's action).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// Framing only: `Data` tokens with raw payloads.
    Passthrough,
    /// `Data` tokens, zstd-compressed when that helps.
    Compress,
    /// Chunking, references to chunks the peer holds, zstd literals.
    Dedup,
}

impl Mode {
    fn to_wire(self) -> u8 {
        match self {
            Mode::Passthrough => 0,
            Mode::Compress => 1,
            Mode::Dedup => 2,
        }
    }

    fn from_wire(b: u8) -> Result<Self, WireError> {
        match b {
            0 => Ok(Mode::Passthrough),
            1 => Ok(Mode::Compress),
            2 => Ok(Mode::Dedup),
            other => Err(WireError::BadMode(other)),
        }
    }
}

/// Why a token could not be parsed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// The input ends inside a token; call again with more bytes (not an error of the peer).
    #[error("truncated token: need at least {needed} bytes")]
    Truncated {
        /// Total bytes needed to make progress (header, or header + body).
        needed: usize,
    },
    /// Unknown token type.
    #[error("unknown token type {0}")]
    UnknownType(u8),
    /// The body length exceeds [`MAX_BODY`].
    #[error("token body of {0} bytes exceeds the limit")]
    TooLong(u32),
    /// The body does not have the size its type and fields imply.
    #[error("malformed {0} token")]
    Malformed(&'static str),
    /// A `Hello` with a version we do not speak.
    #[error("unsupported wire version {0}")]
    UnsupportedVersion(u8),
    /// A `Hello` with an unknown mode.
    #[error("unknown mode {0}")]
    BadMode(u8),
    /// Reserved flag bits set.
    #[error("reserved flags {0:#04x} set")]
    BadFlags(u8),
    /// A field is outside its hard limit (run count, chunk count, raw size, zero-length chunk).
    #[error("{0} out of range")]
    OutOfRange(&'static str),
}

/// The chunks of a `Literal` or `Reply` token: their lengths and the (maybe compressed) bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunks<'a> {
    /// The payload is a zstd frame.
    pub compressed: bool,
    lens: &'a [u8],
    /// Payload bytes as sent.
    pub payload: &'a [u8],
}

impl<'a> Chunks<'a> {
    /// Builds the field from chunk lengths encoded as big-endian `u16`s (`lens_be.len()` even).
    pub fn new(compressed: bool, lens_be: &'a [u8], payload: &'a [u8]) -> Self {
        Self {
            compressed,
            lens: lens_be,
            payload,
        }
    }

    /// Number of chunks.
    pub fn count(&self) -> usize {
        self.lens.len() / 2
    }

    /// Chunk lengths in order.
    pub fn lens(&self) -> impl Iterator<Item = usize> + 'a {
        self.lens
            .chunks_exact(2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
    }

    /// Sum of the chunk lengths (the decompressed size).
    pub fn raw_len(&self) -> usize {
        self.lens().sum()
    }

    fn wire_len(&self) -> usize {
        2 + self.lens.len() + self.payload.len()
    }

    fn parse(flags_mask: u8, flags: u8, b: &'a [u8]) -> Result<Self, WireError> {
        if flags & !flags_mask != 0 {
            return Err(WireError::BadFlags(flags));
        }
        if b.len() < 2 {
            return Err(WireError::Malformed("chunk list"));
        }
        let n = u16::from_be_bytes([b[0], b[1]]) as usize;
        if n == 0 || n > MAX_FRAME_CHUNKS {
            return Err(WireError::OutOfRange("chunk count"));
        }
        if b.len() < 2 + 2 * n {
            return Err(WireError::Malformed("chunk list"));
        }
        let c = Chunks {
            compressed: flags & FLAG_ZSTD != 0,
            lens: &b[2..2 + 2 * n],
            payload: &b[2 + 2 * n..],
        };
        if c.lens().any(|l| l == 0) {
            return Err(WireError::OutOfRange("chunk length"));
        }
        let raw = c.raw_len();
        if raw > MAX_FRAME_RAW {
            return Err(WireError::OutOfRange("frame size"));
        }
        check_payload(c.compressed, raw, c.payload.len())?;
        Ok(c)
    }

    fn emit(&self, out: &mut BytesMut) {
        out.put_u16(self.count() as u16);
        out.put_slice(self.lens);
        out.put_slice(self.payload);
    }
}

fn check_payload(compressed: bool, raw: usize, payload: usize) -> Result<(), WireError> {
    let ok = if compressed {
        payload < raw
    } else {
        payload == raw
    };
    if ok {
        Ok(())
    } else {
        Err(WireError::Malformed("payload size"))
    }
}

/// The dictionary of a compressed literal: the `count` chunks that follow `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DictRef {
    /// The chunk before the dictionary chunks (the literal's predecessor in the flow).
    pub base: ChunkId,
    /// Number of chunks after `base`, 1..=[`MAX_DICT_CHUNKS`].
    pub count: u16,
}

/// A request from a decoder for the literal bytes of data token `seq`, which it could not
/// resolve or verify.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Need {
    /// Sequence number of the data token (0-based, in stream order).
    pub seq: u64,
}

/// One token of the wire format (see the module doc for the layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Token<'a> {
    /// First token of every stream.
    Hello {
        /// What the encoder does to this stream.
        mode: Mode,
    },
    /// A block of flow bytes (pass-through and compress modes).
    Data {
        /// The payload is a zstd frame.
        compressed: bool,
        /// Decompressed length.
        raw_len: u32,
        /// Keyed digest of the raw bytes.
        digest: Digest,
        /// Payload as sent.
        payload: &'a [u8],
    },
    /// New chunks, in flow order.
    Literal {
        /// [`Digest`] over the chunks' ids.
        digest: Digest,
        /// The dictionary the payload was compressed against, if any (then `chunks` is
        /// compressed).
        dict: Option<DictRef>,
        /// The chunks.
        chunks: Chunks<'a>,
    },
    /// `count` chunks the peer holds: `first` and its successors.
    Run {
        /// First chunk.
        first: ChunkId,
        /// Number of chunks, 1..=[`MAX_RUN_CHUNKS`].
        count: u32,
        /// [`Digest`] over all `count` ids.
        digest: Digest,
    },
    /// Part of the answer to a [`Need`]: the literal chunks of data token `seq`.
    Reply {
        /// The data token answered.
        seq: u64,
        /// This is the last part.
        last: bool,
        /// The chunks of this part.
        chunks: Chunks<'a>,
    },
    /// The flow's end (the encoder's `finish`).
    End,
    /// A decoder's request (back channel).
    Need(Need),
}

impl<'a> Token<'a> {
    /// Parses one token from the front of `buf`; returns it and the bytes consumed.
    ///
    /// Returns [`WireError::Truncated`] if `buf` does not yet hold the whole token. Never
    /// panics and never allocates.
    pub fn parse(buf: &'a [u8]) -> Result<(Token<'a>, usize), WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::Truncated { needed: HEADER_LEN });
        }
        let ty = buf[0];
        if !(T_HELLO..=T_NEED).contains(&ty) {
            return Err(WireError::UnknownType(ty));
        }
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
        if len as usize > MAX_BODY {
            return Err(WireError::TooLong(len));
        }
        let total = HEADER_LEN + len as usize;
        if buf.len() < total {
            return Err(WireError::Truncated { needed: total });
        }
        let b = &buf[HEADER_LEN..total];
        let token = match ty {
            T_HELLO => {
                if b.len() != 2 {
                    return Err(WireError::Malformed("hello"));
                }
                if b[0] != VERSION {
                    return Err(WireError::UnsupportedVersion(b[0]));
                }
                Token::Hello {
                    mode: Mode::from_wire(b[1])?,
                }
            }
            T_DATA => {
                if b.len() < 21 {
                    return Err(WireError::Malformed("data"));
                }
                let flags = b[0];
                if flags & !FLAG_ZSTD != 0 {
                    return Err(WireError::BadFlags(flags));
                }
                let raw_len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]);
                if raw_len == 0 || raw_len as usize > MAX_FRAME_RAW {
                    return Err(WireError::OutOfRange("frame size"));
                }
                let compressed = flags & FLAG_ZSTD != 0;
                let payload = &b[21..];
                check_payload(compressed, raw_len as usize, payload.len())?;
                Token::Data {
                    compressed,
                    raw_len,
                    digest: digest_at(&b[5..21]),
                    payload,
                }
            }
            T_LITERAL => {
                if b.len() < 19 {
                    return Err(WireError::Malformed("literal"));
                }
                let flags = b[0];
                let digest = digest_at(&b[1..17]);
                let (dict, rest) = if flags & FLAG_DICT != 0 {
                    if flags & FLAG_ZSTD == 0 {
                        return Err(WireError::BadFlags(flags));
                    }
                    if b.len() < 17 + 34 + 2 {
                        return Err(WireError::Malformed("literal"));
                    }
                    let mut base = [0u8; 32];
                    base.copy_from_slice(&b[17..49]);
                    let count = u16::from_be_bytes([b[49], b[50]]);
                    if count == 0 || count > MAX_DICT_CHUNKS {
                        return Err(WireError::OutOfRange("dictionary chunks"));
                    }
                    let d = DictRef {
                        base: ChunkId(base),
                        count,
                    };
                    (Some(d), &b[51..])
                } else {
                    (None, &b[17..])
                };
                let chunks = Chunks::parse(FLAG_ZSTD | FLAG_DICT, flags, rest)?;
                Token::Literal {
                    digest,
                    dict,
                    chunks,
                }
            }
            T_RUN => {
                if b.len() != 52 {
                    return Err(WireError::Malformed("run"));
                }
                let mut first = [0u8; 32];
                first.copy_from_slice(&b[..32]);
                let count = u32::from_be_bytes([b[32], b[33], b[34], b[35]]);
                if count == 0 || count > MAX_RUN_CHUNKS {
                    return Err(WireError::OutOfRange("run count"));
                }
                Token::Run {
                    first: ChunkId(first),
                    count,
                    digest: digest_at(&b[36..52]),
                }
            }
            T_REPLY => {
                if b.len() < 11 {
                    return Err(WireError::Malformed("reply"));
                }
                let seq = u64::from_be_bytes(
                    b[..8]
                        .try_into()
                        .map_err(|_| WireError::Malformed("reply"))?,
                );
                let flags = b[8];
                let chunks = Chunks::parse(FLAG_ZSTD | FLAG_LAST, flags, &b[9..])?;
                Token::Reply {
                    seq,
                    last: flags & FLAG_LAST != 0,
                    chunks,
                }
            }
            T_END => {
                if !b.is_empty() {
                    return Err(WireError::Malformed("end"));
                }
                Token::End
            }
            _ => {
                if b.len() != 8 {
                    return Err(WireError::Malformed("need"));
                }
                let seq =
                    u64::from_be_bytes(b.try_into().map_err(|_| WireError::Malformed("need"))?);
                Token::Need(Need { seq })
            }
        };
        Ok((token, total))
    }

    /// Length of the emitted token, header included.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.body_len()
    }

    fn body_len(&self) -> usize {
        match self {
            Token::Hello { .. } => 2,
            Token::Data { payload, .. } => 21 + payload.len(),
            Token::Literal { chunks, dict, .. } => {
                1 + 16 + if dict.is_some() { 34 } else { 0 } + chunks.wire_len()
            }
            Token::Run { .. } => 52,
            Token::Reply { chunks, .. } => 9 + chunks.wire_len(),
            Token::End => 0,
            Token::Need(_) => 8,
        }
    }

    /// Appends the token to `out`.
    pub fn emit(&self, out: &mut BytesMut) {
        out.reserve(self.buffer_len());
        let ty = match self {
            Token::Hello { .. } => T_HELLO,
            Token::Data { .. } => T_DATA,
            Token::Literal { .. } => T_LITERAL,
            Token::Run { .. } => T_RUN,
            Token::Reply { .. } => T_REPLY,
            Token::End => T_END,
            Token::Need(_) => T_NEED,
        };
        out.put_u8(ty);
        out.put_u32(self.body_len() as u32);
        match self {
            Token::Hello { mode } => {
                out.put_u8(VERSION);
                out.put_u8(mode.to_wire());
            }
            Token::Data {
                compressed,
                raw_len,
                digest,
                payload,
            } => {
                out.put_u8(if *compressed { FLAG_ZSTD } else { 0 });
                out.put_u32(*raw_len);
                out.put_slice(&digest.0);
                out.put_slice(payload);
            }
            Token::Literal {
                digest,
                dict,
                chunks,
            } => {
                let mut flags = if chunks.compressed { FLAG_ZSTD } else { 0 };
                if dict.is_some() {
                    flags |= FLAG_DICT;
                }
                out.put_u8(flags);
                out.put_slice(&digest.0);
                if let Some(d) = dict {
                    out.put_slice(&d.base.0);
                    out.put_u16(d.count);
                }
                chunks.emit(out);
            }
            Token::Run {
                first,
                count,
                digest,
            } => {
                out.put_slice(&first.0);
                out.put_u32(*count);
                out.put_slice(&digest.0);
            }
            Token::Reply { seq, last, chunks } => {
                out.put_u64(*seq);
                let mut flags = if chunks.compressed { FLAG_ZSTD } else { 0 };
                if *last {
                    flags |= FLAG_LAST;
                }
                out.put_u8(flags);
                chunks.emit(out);
            }
            Token::End => {}
            Token::Need(n) => out.put_u64(n.seq),
        }
    }
}

fn digest_at(b: &[u8]) -> Digest {
    let mut d = [0u8; 16];
    d.copy_from_slice(&b[..16]);
    Digest(d)
}

#[cfg(test)]
mod tests;
