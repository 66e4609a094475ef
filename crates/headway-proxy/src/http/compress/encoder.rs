//! One streaming compressor for gzip, brotli or zstd behind one interface ([`Encoder`]).
//!
//! Sans-IO: [`Encoder::encode`] takes input bytes and a [`Flush`] and appends compressed bytes
//! to a caller's buffer; nothing here reads a socket or the clock. Memory per stream is the
//! codec's state (allocated once per encoder; gzip and zstd encoders are reset and reused for
//! the next response, see [`Encoder::reset`]) plus what the caller's buffer holds.
//!
//! Call order per stream: [`Encoder::new`] (or [`Encoder::reset`] on a used one), any number
//! of [`Encoder::encode`] with [`Flush::None`] or [`Flush::Sync`], then exactly one with
//! [`Flush::Finish`]. After `Finish` the output is one complete gzip member (RFC 1952), brotli
//! stream (RFC 7932) or zstd frame (RFC 8878); after `Sync` everything given so far can be
//! decoded from the output so far.
//!
//! A body known whole in advance can instead go through [`Encoder::whole`] in one call: gzip
//! then uses libdeflate, which compresses a buffer 1.5–1.7× as fast as zlib-rs streams it at
//! the same ratio or better and has no window tables to clear per body (the lab's HTML corpus,
//! 2–64 KiB, default level: `cargo bench -p headway-bench --bench micro -- compress/.*/gzip-2`).

use brotli::enc::encode::{
    BrotliEncoderOperation, BrotliEncoderParameter, BrotliEncoderStateStruct,
};
use brotli::enc::StandardAlloc;
use bytes::BytesMut;
use flate2::{Compress, Compression, FlushCompress, Status};
use headway_config::compress::Codec;
use zstd::zstd_safe::zstd_sys::ZSTD_EndDirective as EndDirective;
use zstd::zstd_safe::{self, CCtx, CParameter, InBuffer, OutBuffer, ResetDirective};

/// How much of the stream to push out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Let the codec hold input back for a better ratio.
    None,
    /// Everything given so far becomes decodable output (a gzip sync flush, a brotli flush, a
    /// zstd block end); the stream goes on.
    Sync,
    /// End the stream: the trailer (gzip's CRC-32 and length, brotli's last meta-block, zstd's
    /// last block) follows.
    Finish,
}

/// Why the codec refused to go on. Our own inputs are always valid, so this is a bug or an
/// allocation failure inside the codec; the response is cut.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The gzip encoder (zlib-rs or libdeflate) failed.
    #[error("gzip encoder: {0}")]
    Gzip(String),
    /// The brotli encoder failed.
    #[error("brotli encoder failed")]
    Brotli,
    /// The zstd encoder failed.
    #[error("zstd encoder: {0}")]
    Zstd(&'static str),
}

/// A streaming compressor for one codec at one level.
pub struct Encoder {
    level: u32,
    state: State,
}

enum State {
    Gzip(Box<Gzip>),
    Brotli(Box<BrotliEncoderStateStruct<StandardAlloc>>),
    Zstd(Box<CCtx<'static>>),
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("codec", &self.codec())
            .field("level", &self.level)
            .finish()
    }
}

/// gzip's two backends, each made when first used: zlib-rs for streams, libdeflate for whole
/// bodies.
#[derive(Default)]
struct Gzip {
    stream: Option<Compress>,
    whole: Option<libdeflater::Compressor>,
}

impl Gzip {
    /// The stream at `level`, made on first use. zlib-rs's level 1 is a quicker and much weaker
    /// parser (2.25:1 on the 64 KiB HTML page against 2.97:1 at level 2, below zlib's level 1),
    /// so level 1 streams at 2.
    fn stream(&mut self, level: u32) -> &mut Compress {
        self.stream
            .get_or_insert_with(|| Compress::new_gzip(Compression::new(level.max(2)), 15))
    }

    /// The one-call compressor for `level`, made on first use. libdeflate's level L − 1
    /// compresses about as well as zlib-rs's level L (within 1 % on the HTML corpus at every
    /// level, 2–64 KiB) and faster; level 1 is libdeflate's 1.
    fn whole(&mut self, level: u32) -> &mut libdeflater::Compressor {
        self.whole.get_or_insert_with(|| {
            let l = i32::try_from(level.saturating_sub(1).max(1)).unwrap_or(1);
            libdeflater::Compressor::new(libdeflater::CompressionLvl::new(l).unwrap_or_default())
        })
    }
}

/// The most output room a codec call gets at once; a call that fills it runs again.
const STEP: usize = 16 * 1024;
/// The least output room a codec call gets: a stream's end (deflate's last block and gzip's
/// trailer, zstd's epilogue) fits in it.
const MIN_ROOM: usize = 128;

impl Encoder {
    /// A fresh encoder. `level` must be within [`Codec::levels`] (the config checked it; a level
    /// outside is clamped). `size` is the input's length when known (`Content-Length`): zstd and
    /// brotli then size their tables to it.
    pub fn new(codec: Codec, level: u32, size: Option<u64>) -> Result<Encoder, EncodeError> {
        let (lo, hi) = codec.levels();
        let level = level.clamp(lo, hi);
        let state = match codec {
            Codec::Gzip => State::Gzip(Box::default()),
            Codec::Brotli => State::Brotli(Box::new(brotli_state(level, size))),
            Codec::Zstd => {
                let mut cx = CCtx::try_create().ok_or(EncodeError::Zstd("out of memory"))?;
                zstd_check(cx.set_parameter(CParameter::CompressionLevel(level as i32)))?;
                zstd_check(cx.set_pledged_src_size(size))?;
                State::Zstd(Box::new(cx))
            }
        };
        Ok(Encoder { level, state })
    }

    /// The codec.
    pub fn codec(&self) -> Codec {
        match self.state {
            State::Gzip(_) => Codec::Gzip,
            State::Brotli(_) => Codec::Brotli,
            State::Zstd(_) => Codec::Zstd,
        }
    }

    /// The level.
    pub fn level(&self) -> u32 {
        self.level
    }

    /// Readies a used encoder for a new stream of `size` bytes (if known), keeping its
    /// allocations. Returns `false` when the codec cannot be reset (brotli has no reset: make a
    /// new encoder).
    pub fn reset(&mut self, size: Option<u64>) -> bool {
        match &mut self.state {
            State::Gzip(z) => {
                if let Some(s) = &mut z.stream {
                    s.reset();
                }
                true
            }
            State::Zstd(cx) => {
                cx.reset(ResetDirective::SessionOnly).is_ok()
                    && cx.set_pledged_src_size(size).is_ok()
            }
            State::Brotli(_) => false,
        }
    }

    /// Compresses all of `input`, appending the output to `out`; `flush` says how much must
    /// come out now (see [`Flush`]).
    pub fn encode(
        &mut self,
        input: &[u8],
        flush: Flush,
        out: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        match &mut self.state {
            State::Gzip(z) => gzip(z.stream(self.level), input, flush, out),
            State::Brotli(b) => brotli(b, input, flush, out),
            State::Zstd(cx) => zstd(cx, input, flush, out),
        }
    }

    /// Whether [`Encoder::whole`] is faster than streaming for this codec (gzip: libdeflate);
    /// for the others it streams anyway.
    pub fn prefers_whole(&self) -> bool {
        matches!(self.state, State::Gzip(_))
    }

    /// Compresses `input` as one complete stream (as [`Encoder::encode`] with [`Flush::Finish`]
    /// on a fresh or reset encoder would), appending it to `out`. The encoder must be fresh or
    /// reset, and is ready for [`Encoder::reset`] afterwards.
    pub fn whole(&mut self, input: &[u8], out: &mut BytesMut) -> Result<(), EncodeError> {
        let State::Gzip(z) = &mut self.state else {
            return self.encode(input, Flush::Finish, out);
        };
        let c = z.whole(self.level);
        let start = out.len();
        out.resize(start + c.gzip_compress_bound(input.len()), 0);
        let n = c.gzip_compress(input, &mut out[start..]);
        let written = *n.as_ref().unwrap_or(&0);
        out.truncate(start + written);
        n.map(drop)
            .map_err(|e| EncodeError::Gzip(format!("libdeflate: {e:?}")))
    }
}

/// Grows `out` by `want` zeroed bytes (at least [`MIN_ROOM`], at most [`STEP`]) for a codec to
/// write into; returns where they start. The codecs take initialised slices; zeroing what the
/// input can need, not a fixed step, keeps a small response from clearing 16 KiB per call.
fn room(out: &mut BytesMut, want: usize) -> usize {
    let start = out.len();
    out.resize(start + want.clamp(MIN_ROOM, STEP), 0);
    start
}

fn gzip(
    z: &mut Compress,
    mut input: &[u8],
    flush: Flush,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    let mode = match flush {
        Flush::None => FlushCompress::None,
        Flush::Sync => FlushCompress::Sync,
        Flush::Finish => FlushCompress::Finish,
    };
    loop {
        let start = room(out, input.len() / 2 + 64);
        let (in0, out0) = (z.total_in(), z.total_out());
        let status = z
            .compress(input, &mut out[start..], mode)
            .map_err(|e| EncodeError::Gzip(e.to_string()));
        let written = (z.total_out() - out0) as usize;
        let full = start + written == out.len();
        out.truncate(start + written);
        let status = status?;
        input = &input[(z.total_in() - in0) as usize..];
        let done = match flush {
            // zlib: with input left or no room left, call again.
            Flush::None => input.is_empty(),
            Flush::Sync => input.is_empty() && !full,
            Flush::Finish => status == Status::StreamEnd,
        };
        if done {
            return Ok(());
        }
        if status == Status::BufError && !full && input.is_empty() {
            // No progress possible and none needed (zlib reports BufError for a flush that had
            // nothing to do).
            return Ok(());
        }
    }
}

fn brotli_state(level: u32, size: Option<u64>) -> BrotliEncoderStateStruct<StandardAlloc> {
    let mut s = BrotliEncoderStateStruct::new(StandardAlloc::default());
    s.set_parameter(BrotliEncoderParameter::BROTLI_PARAM_QUALITY, level);
    // A window no larger than the body (at least brotli's 1 KiB minimum, at most its 4 MiB
    // default) keeps small responses from allocating large ring buffers.
    let lgwin = size.map_or(22, |n| {
        (64 - n.saturating_sub(1).leading_zeros()).clamp(10, 22)
    });
    s.set_parameter(BrotliEncoderParameter::BROTLI_PARAM_LGWIN, lgwin);
    if let Some(n) = size {
        s.set_parameter(
            BrotliEncoderParameter::BROTLI_PARAM_SIZE_HINT,
            u32::try_from(n).unwrap_or(u32::MAX),
        );
    }
    s
}

fn brotli(
    b: &mut BrotliEncoderStateStruct<StandardAlloc>,
    input: &[u8],
    flush: Flush,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    let op = match flush {
        Flush::None => BrotliEncoderOperation::BROTLI_OPERATION_PROCESS,
        Flush::Sync => BrotliEncoderOperation::BROTLI_OPERATION_FLUSH,
        Flush::Finish => BrotliEncoderOperation::BROTLI_OPERATION_FINISH,
    };
    let mut available_in = input.len();
    let mut in_offset = 0;
    loop {
        // No output buffer: the encoder keeps its output, and `take_output` hands it over
        // without an intermediate copy.
        let (mut available_out, mut out_offset) = (0, 0);
        if !b.compress_stream(
            op,
            &mut available_in,
            input,
            &mut in_offset,
            &mut available_out,
            &mut [],
            &mut out_offset,
            &mut None,
            &mut |_, _, _, _| (),
        ) {
            return Err(EncodeError::Brotli);
        }
        while b.has_more_output() {
            // `take_output` returns the rest of its storage; the first `n` bytes are the output.
            let mut n = 0;
            let taken = b.take_output(&mut n);
            out.extend_from_slice(&taken[..n.min(taken.len())]);
        }
        let done = available_in == 0
            && match flush {
                Flush::None | Flush::Sync => true,
                Flush::Finish => b.is_finished(),
            };
        if done {
            return Ok(());
        }
    }
}

fn zstd(
    cx: &mut CCtx<'static>,
    input: &[u8],
    flush: Flush,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    let directive = match flush {
        Flush::None => EndDirective::ZSTD_e_continue,
        Flush::Sync => EndDirective::ZSTD_e_flush,
        Flush::Finish => EndDirective::ZSTD_e_end,
    };
    let mut src = InBuffer::around(input);
    loop {
        let start = room(out, (input.len() - src.pos()) / 2 + 64);
        let mut dst = OutBuffer::around(&mut out[start..]);
        let left = cx.compress_stream2(&mut dst, &mut src, directive);
        let written = dst.pos();
        out.truncate(start + written);
        let left = zstd_check(left)?;
        // `Continue` is done when the input is taken; `Flush` and `End` when nothing is left
        // to write.
        let done = src.pos() == input.len() && (flush == Flush::None || left == 0);
        if done {
            return Ok(());
        }
    }
}

fn zstd_check(r: zstd_safe::SafeResult) -> Result<usize, EncodeError> {
    r.map_err(|code| EncodeError::Zstd(zstd_safe::get_error_name(code)))
}
