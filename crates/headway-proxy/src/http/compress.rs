//! HTTP compression of server responses, with the CPU bypass.
//!
//! # What it owns
//!
//! - [`Policy`]: a virtual server's `[virtual_server.compression]` in one config generation —
//!   the decision for each response ([`decide`], pure), the edits of the response head, and
//!   the encoders it lends ([`Stage`]);
//! - [`accept`]: the `Accept-Encoding` parser (RFC 9110 §12.5.3, pure);
//! - [`encoder`]: one streaming interface over gzip (flate2 on zlib-rs; libdeflate for a
//!   body compressed whole), brotli and zstd (sans-IO);
//! - [`cpu`]: the process's CPU sampler and the hysteresis gates of the bypass;
//! - [`Counters`] (per virtual server, kept across reloads) and their [`CompressionSnapshot`].
//!
//! It does not read sockets or frame bodies: [`super::body::RespBody`] feeds a [`Stage`] the
//! server's payload bytes and sends what comes out.
//!
//! # Call order (per request, in `super::phases`)
//!
//! 1. before the request goes to a server: [`Policy::accepts`] reads the client's
//!    `Accept-Encoding` (the request head is handed on after that);
//! 2. phase 5 (respond), after the response header rules: [`Policy::respond`] decides, edits
//!    the head (`Content-Encoding`, `Vary`, weak `ETag`, no `Content-Length` or
//!    `Accept-Ranges`) and returns the [`Stage`] to attach to the body, or `None`;
//! 3. the body calls [`Stage::push`] per payload frame, [`Stage::flush`] when the server has
//!    nothing more for now, [`Stage::finish`] at the end.
//!
//! # Invariants
//!
//! - Memory per response is bounded: the encoder's state plus one frame's output; nothing is
//!   buffered whole but a gzip body whose `Content-Length` is at most [`WHOLE_MAX`], which is
//!   gathered and compressed in one call at its end ([`Encoder::whole`], libdeflate). Output
//!   goes out after every input frame that produced some, and at once (a sync flush) when the
//!   server pauses, so a slow stream is not held back — a pause also ends the gathering: what
//!   came so far goes into the stream and out.
//! - Encoders of gzip and zstd are reset and reused across responses (brotli has no reset);
//!   the output buffer's allocation is reused from frame to frame once the previous frame is
//!   written.
//! - Exchange accounting (`bytes_out`, the access log) stays on the uncompressed server bytes;
//!   the compressor's bytes in and out are counted here, per codec.

pub mod accept;
pub mod cpu;
pub mod encoder;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use headway_config::compress::{never_compressed, Codec, Compression};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::stats::Counter;
pub use accept::Accepted;
pub use encoder::{EncodeError, Encoder, Flush};

/// A virtual server's compression counters; they outlive reloads with the virtual server.
#[derive(Debug, Default)]
pub struct Counters {
    /// Responses compressed, by [`Codec::index`].
    responses: [Counter; 3],
    /// Uncompressed bytes into the encoder, by codec.
    bytes_in: [Counter; 3],
    /// Compressed bytes out of it, by codec.
    bytes_out: [Counter; 3],
    /// Responses compressed in one call at the body's end ([`Encoder::whole`]), by codec.
    whole: [Counter; 3],
    /// Responses left uncompressed because the CPU bypass was engaged.
    bypassed: Counter,
    /// Compressible responses to clients that accept none of the codecs.
    not_accepted: Counter,
}

/// The largest body (by `Content-Length`) gathered to be compressed in one call rather than
/// streamed, when the codec gains by it (gzip: libdeflate, see [`Encoder::whole`]).
pub const WHOLE_MAX: u64 = 64 * 1024;

/// Most idle encoders kept per codec and virtual server.
const POOL: usize = 32;

/// Idle encoders, by [`Codec::index`].
#[derive(Default)]
struct Pools([Mutex<Vec<Encoder>>; 3]);

/// A virtual server's compression in one config generation.
pub struct Policy {
    config: Compression,
    gate: Option<Arc<cpu::Gate>>,
    counters: Arc<Counters>,
    pools: Arc<Pools>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("config", &self.config)
            .finish()
    }
}

/// Why a response is left as the server sent it, or which codec it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Compress with this codec.
    Compress(Codec),
    /// Leave it.
    Skip(Skip),
}

/// Why a response is not compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// HEAD, 1xx, 204, 304, or an empty body: nothing to compress.
    NoBody,
    /// 206 or `Content-Range`: a range of the identity representation (RFC 9110 §14).
    Range,
    /// `Content-Encoding` present: encoded already.
    Encoded,
    /// `Cache-Control: no-transform` (RFC 9110 §7.7).
    NoTransform,
    /// A media type not in `types`, an image, audio or video type, or none.
    Type,
    /// `Content-Length` below `min_size`.
    Small,
    /// The client accepts none of the codecs.
    NotAccepted,
    /// The CPU bypass is engaged.
    Bypass,
}

impl Skip {
    /// Whether the decision depended on the request's `Accept-Encoding` (or would have, but
    /// for the CPU): such responses get `Vary: Accept-Encoding`.
    pub fn varies(self) -> bool {
        matches!(self, Skip::NotAccepted | Skip::Bypass)
    }
}

/// Decides for one response (pure). `length` is its `Content-Length`, if known.
pub fn decide(
    config: &Compression,
    accepted: Accepted,
    bypass: bool,
    method: &Method,
    status: StatusCode,
    headers: &HeaderMap,
    length: Option<u64>,
) -> Decision {
    use Decision::Skip as S;
    let s = status.as_u16();
    if *method == Method::HEAD || s < 200 || s == 204 || s == 304 || length == Some(0) {
        return S(Skip::NoBody);
    }
    if s == 206 || headers.contains_key(header::CONTENT_RANGE) {
        return S(Skip::Range);
    }
    if headers.contains_key(header::CONTENT_ENCODING) {
        return S(Skip::Encoded);
    }
    if has_directive(headers.get_all(header::CACHE_CONTROL), b"no-transform") {
        return S(Skip::NoTransform);
    }
    if !type_matches(config, headers.get(header::CONTENT_TYPE)) {
        return S(Skip::Type);
    }
    if length.is_some_and(|n| n < config.min_size) {
        return S(Skip::Small);
    }
    let Some(codec) = accepted.choose(&config.codecs) else {
        return S(Skip::NotAccepted);
    };
    if bypass {
        return S(Skip::Bypass);
    }
    Decision::Compress(codec)
}

/// Whether the `Content-Type`'s media type starts with one of the policy's prefixes (and is not
/// one that is never compressed).
fn type_matches(config: &Compression, value: Option<&HeaderValue>) -> bool {
    let Some(v) = value else {
        return false;
    };
    let v = v.as_bytes();
    let end = v.iter().position(|&b| b == b';').unwrap_or(v.len());
    let media = trim(&v[..end]);
    // Media types are ASCII; lower-case into a small stack buffer (longer ones are not ours).
    let mut buf = [0u8; 128];
    let Some(lower) = buf.get_mut(..media.len()) else {
        return false;
    };
    for (d, s) in lower.iter_mut().zip(media) {
        *d = s.to_ascii_lowercase();
    }
    let Ok(media) = std::str::from_utf8(lower) else {
        return false;
    };
    !never_compressed(media) && config.types.iter().any(|p| media.starts_with(p.as_str()))
}

/// Whether a comma-separated directive list (`Cache-Control`) holds `name` (case-insensitive,
/// with or without a value).
fn has_directive<'a>(values: impl IntoIterator<Item = &'a HeaderValue>, name: &[u8]) -> bool {
    values.into_iter().any(|v| {
        v.as_bytes().split(|&b| b == b',').any(|d| {
            let d = trim(d);
            let end = d.iter().position(|&b| b == b'=').unwrap_or(d.len());
            trim(&d[..end]).eq_ignore_ascii_case(name)
        })
    })
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

impl Policy {
    /// The policy of `config`, counting into `counters`. Joins (or starts) the CPU sampler when
    /// the policy has a bypass.
    pub fn new(config: &Compression, counters: Arc<Counters>) -> Policy {
        Policy {
            gate: config.cpu_bypass.map(cpu::gate),
            config: config.clone(),
            counters,
            pools: Arc::default(),
        }
    }

    /// The client's `Accept-Encoding`, read before the request head goes on to a server.
    pub fn accepts(&self, headers: &HeaderMap) -> Accepted {
        Accepted::parse(
            headers
                .get_all(header::ACCEPT_ENCODING)
                .iter()
                .map(HeaderValue::as_bytes),
        )
    }

    /// Phase 5 for one response: decides ([`decide`]), edits the head, counts, and returns the
    /// stage that compresses the body, if it is to be compressed. `length` is the body's
    /// `Content-Length`, if known.
    pub fn respond(
        &self,
        method: &Method,
        accepted: Accepted,
        status: StatusCode,
        headers: &mut HeaderMap,
        length: Option<u64>,
    ) -> Option<Box<Stage>> {
        let bypass = self.gate.as_ref().is_some_and(|g| g.engaged());
        let decision = decide(
            &self.config,
            accepted,
            bypass,
            method,
            status,
            headers,
            length,
        );
        let codec = match decision {
            Decision::Compress(c) => c,
            Decision::Skip(why) => {
                if why.varies() {
                    add_vary(headers);
                }
                match why {
                    Skip::Bypass => self.counters.bypassed.inc(),
                    Skip::NotAccepted => self.counters.not_accepted.inc(),
                    _ => {}
                }
                return None;
            }
        };
        let encoder = match self.encoder(codec, length) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(codec = %codec, error = %e, "cannot make an encoder; response sent uncompressed");
                add_vary(headers);
                return None;
            }
        };
        add_vary(headers);
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(codec.token()),
        );
        headers.remove(header::CONTENT_LENGTH);
        headers.remove(header::ACCEPT_RANGES);
        weaken_etag(headers);
        self.counters.responses[codec.index()].inc();
        let gathers = encoder.prefers_whole() && length.is_some_and(|n| n <= WHOLE_MAX);
        Some(Box::new(Stage {
            encoder: Some(encoder),
            gather: gathers.then(BytesMut::new),
            out: BytesMut::new(),
            pending: false,
            done: false,
            bytes_in: 0,
            bytes_out: 0,
            codec,
            counters: self.counters.clone(),
            pools: self.pools.clone(),
        }))
    }

    /// An encoder for `codec`: an idle one reset, or a new one.
    fn encoder(&self, codec: Codec, length: Option<u64>) -> Result<Encoder, EncodeError> {
        let idle = self.pools.0[codec.index()].lock().pop();
        if let Some(mut e) = idle {
            if e.reset(length) {
                return Ok(e);
            }
        }
        Encoder::new(codec, self.config.level(codec), length)
    }

    /// The counters, levels and bypass state.
    pub fn snapshot(&self) -> CompressionSnapshot {
        let c = &self.counters;
        CompressionSnapshot {
            codecs: self
                .config
                .codecs
                .iter()
                .map(|&codec| {
                    let i = codec.index();
                    CodecSnapshot {
                        codec: codec.token().to_string(),
                        level: self.config.level(codec),
                        responses: c.responses[i].get(),
                        bytes_in: c.bytes_in[i].get(),
                        bytes_out: c.bytes_out[i].get(),
                        whole: c.whole[i].get(),
                    }
                })
                .collect(),
            not_accepted: c.not_accepted.get(),
            bypassed: c.bypassed.get(),
            bypass: self.gate.as_ref().map(|g| BypassSnapshot {
                source: g.bypass().source.as_str().to_string(),
                engage: g.bypass().engage,
                release: g.bypass().release,
                utilisation: g.utilisation(),
                engaged: g.engaged(),
                engagements: g.engagements(),
            }),
        }
    }
}

/// Adds `Accept-Encoding` to `Vary` unless it (or `*`) is there already; several `Vary` fields
/// are one list (RFC 9110 §12.5.5).
fn add_vary(headers: &mut HeaderMap) {
    let listed = headers.get_all(header::VARY).iter().any(|v| {
        v.as_bytes().split(|&b| b == b',').any(|t| {
            let t = trim(t);
            t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding")
        })
    });
    if !listed {
        headers.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}

/// A strong `ETag` becomes weak: the compressed bytes differ from the identity ones, so a
/// strong validator would claim byte equality that does not hold (RFC 9110 §8.8.1).
fn weaken_etag(headers: &mut HeaderMap) {
    let Some(v) = headers.get(header::ETAG) else {
        return;
    };
    if v.as_bytes().starts_with(b"W/") {
        return;
    }
    let mut weak = Vec::with_capacity(v.len() + 2);
    weak.extend_from_slice(b"W/");
    weak.extend_from_slice(v.as_bytes());
    if let Ok(w) = HeaderValue::from_bytes(&weak) {
        headers.insert(header::ETAG, w);
    }
}

/// One response's compressor, between the server's payload and the client.
pub struct Stage {
    encoder: Option<Encoder>,
    /// The payload so far of a body to be compressed whole at its end; `None` once streaming.
    gather: Option<BytesMut>,
    out: BytesMut,
    /// Input given since the output last caught up with it.
    pending: bool,
    /// The stream's end has been produced.
    done: bool,
    bytes_in: u64,
    bytes_out: u64,
    codec: Codec,
    counters: Arc<Counters>,
    pools: Arc<Pools>,
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage")
            .field("codec", &self.codec)
            .field("bytes_in", &self.bytes_in)
            .field("bytes_out", &self.bytes_out)
            .field("done", &self.done)
            .finish()
    }
}

impl Stage {
    /// Compresses one payload frame. Returns output to send, if the encoder produced any.
    pub fn push(&mut self, data: &[u8]) -> Result<Option<Bytes>, EncodeError> {
        self.bytes_in += data.len() as u64;
        self.pending = true;
        if let Some(g) = &mut self.gather {
            if (g.len() + data.len()) as u64 <= WHOLE_MAX {
                g.extend_from_slice(data);
                return Ok(None);
            }
            // Longer than its `Content-Length` said: stream after all.
            self.spill(Flush::None)?;
        }
        self.run(data, Flush::None)?;
        Ok(self.take())
    }

    /// The server has nothing more for now: push out what the encoder holds back, so the
    /// client is not kept waiting. `None` when there is nothing to push.
    pub fn flush(&mut self) -> Result<Option<Bytes>, EncodeError> {
        if !self.pending || self.done {
            return Ok(None);
        }
        if self.gather.is_some() {
            self.spill(Flush::Sync)?;
        } else {
            self.run(&[], Flush::Sync)?;
        }
        self.pending = false;
        Ok(self.take())
    }

    /// The end of the input (`last` holds its final payload bytes, possibly none): the rest of
    /// the stream, trailer included.
    pub fn finish(&mut self, last: &[u8]) -> Result<Bytes, EncodeError> {
        self.bytes_in += last.len() as u64;
        let encoder = self.encoder.as_mut().expect("taken only on drop");
        match self.gather.take() {
            Some(mut g) => {
                if g.is_empty() {
                    encoder.whole(last, &mut self.out)?;
                } else {
                    g.extend_from_slice(last);
                    encoder.whole(&g, &mut self.out)?;
                }
                self.counters.whole[self.codec.index()].inc();
            }
            None => encoder.encode(last, Flush::Finish, &mut self.out)?,
        }
        self.done = true;
        self.pending = false;
        Ok(self.take().unwrap_or_default())
    }

    /// Whether the stream's end has been produced.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The codec.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Ends the gathering: what came so far goes into the stream.
    fn spill(&mut self, flush: Flush) -> Result<(), EncodeError> {
        let g = self.gather.take().unwrap_or_default();
        self.run(&g, flush)
    }

    fn run(&mut self, data: &[u8], flush: Flush) -> Result<(), EncodeError> {
        self.encoder
            .as_mut()
            .expect("taken only on drop")
            .encode(data, flush, &mut self.out)
    }

    /// The output so far as one frame, if there is any.
    fn take(&mut self) -> Option<Bytes> {
        if self.out.is_empty() {
            return None;
        }
        self.bytes_out += self.out.len() as u64;
        Some(self.out.split().freeze())
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let i = self.codec.index();
        self.counters.bytes_in[i].add(self.bytes_in);
        self.counters.bytes_out[i].add(self.bytes_out);
        // Only an encoder that finished its stream cleanly goes back for reuse.
        if let (true, Some(e)) = (self.done, self.encoder.take()) {
            if e.codec() != Codec::Brotli {
                let mut idle = self.pools.0[i].lock();
                if idle.len() < POOL {
                    idle.push(e);
                }
            }
        }
    }
}

/// A virtual server's compression: counters per codec and the CPU bypass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompressionSnapshot {
    /// The codecs offered, in order of preference.
    pub codecs: Vec<CodecSnapshot>,
    /// Compressible responses to clients that accept none of the codecs.
    pub not_accepted: u64,
    /// Responses left uncompressed because the CPU bypass was engaged.
    pub bypassed: u64,
    /// The CPU bypass; `None` when it is off.
    pub bypass: Option<BypassSnapshot>,
}

impl CompressionSnapshot {
    /// Uncompressed bytes over compressed bytes, all codecs; `None` before any output.
    pub fn ratio(&self) -> Option<f64> {
        let (i, o) = self
            .codecs
            .iter()
            .fold((0, 0), |(i, o), c| (i + c.bytes_in, o + c.bytes_out));
        (o > 0).then(|| i as f64 / o as f64)
    }
}

/// One codec's counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CodecSnapshot {
    /// Its content-coding token (`zstd`, `br`, `gzip`).
    pub codec: String,
    /// Its level.
    pub level: u32,
    /// Responses compressed with it.
    pub responses: u64,
    /// Uncompressed bytes into it.
    pub bytes_in: u64,
    /// Compressed bytes out of it.
    pub bytes_out: u64,
    /// Of its responses, those compressed in one call at the body's end (gzip bodies of known
    /// length up to [`WHOLE_MAX`]) rather than streamed.
    #[serde(default)]
    pub whole: u64,
}

/// The CPU bypass's settings and state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BypassSnapshot {
    /// `system` or `process`.
    pub source: String,
    /// Utilisation (0–1) at which it engages.
    pub engage: f64,
    /// Utilisation (0–1) below which it releases.
    pub release: f64,
    /// The last sampled utilisation (0–1).
    pub utilisation: f64,
    /// Whether new responses go uncompressed now.
    pub engaged: bool,
    /// Times it engaged since the gate was made.
    pub engagements: u64,
}

#[cfg(test)]
mod tests;
