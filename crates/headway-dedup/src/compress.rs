//! zstd for literal and data frames, with a skip for incompressible data.
//!
//! Owns [`Compressor`] and [`Decompressor`]. The compressor tries each frame at the configured
//! level and keeps the result only if it saves at least 1/32 of the frame (the output buffer is
//! sized so zstd gives up as soon as it cannot). After a frame that did not shrink it skips the
//! next 1, 2, 4 … up to 64 frames without trying (exponential back-off, reset by the next frame
//! that shrinks), so a stream of already-compressed data costs one trial per 64 frames instead
//! of a compression per frame. Trying is the estimate: zstd's own incompressible-block
//! detection makes a failed trial at level 1 cheap, and no entropy heuristic is as exact. (At
//! the levels of slow links a failed trial of a 256 KiB frame costs as much as a compression,
//! 40–70 ms at level 13 or 15; the back-off bounds that to one frame in 65 of a steady
//! incompressible stream, and a slow link's first pass of PDF-like data was no slower.)
//!
//! A frame may be compressed against a dictionary: raw bytes both sides hold (zstd "raw
//! content" dictionary, RFC 8878 §5). The encoder uses the chunks that followed the literal's
//! predecessor last time, i.e. the old version of an edited region, so a small edit costs
//! little more than the edit itself.

use zstd::zstd_safe::{CCtx, DCtx};

/// Longest skip after repeated incompressible frames.
const MAX_SKIP: u32 = 64;

/// The highest level whose context a compressor keeps between frames. A context's tables
/// grow with the level (about 1.2 MB at level 4 for frames of 256 KiB, several MB at 13 and
/// above), and each flow holds one per direction for as long as it lives, busy or idle; the
/// high levels are only used towards slow links (`headway_wanopt`'s level per link rate),
/// where a frame takes 40 ms or more to compress and making the context again costs
/// nothing by comparison.
pub(crate) const KEEP_CONTEXT_MAX_LEVEL: i32 = 4;

/// A zstd compression context (kept between frames up to [`KEEP_CONTEXT_MAX_LEVEL`]) with
/// incompressible-data back-off.
pub(crate) struct Compressor {
    ctx: Option<CCtx<'static>>,
    level: i32,
    skip: u32,
    streak: u32,
    buf: Vec<u8>,
}

impl Compressor {
    pub(crate) fn new(level: i32) -> Self {
        Self {
            ctx: None,
            level,
            skip: 0,
            streak: 0,
            buf: Vec::new(),
        }
    }

    /// The compressed frame, or `None` when it would not be worth sending compressed.
    /// With a non-empty `dict` the skip back-off is bypassed (a dictionary hit is likely).
    pub(crate) fn compress(&mut self, raw: &[u8], dict: &[u8]) -> Option<&[u8]> {
        if raw.len() < 64 {
            return None;
        }
        if self.skip > 0 && dict.is_empty() {
            self.skip -= 1;
            return None;
        }
        // Worth sending only if it saves 1/32; a larger output is discarded below.
        let limit = raw.len() - raw.len() / 32 - 1;
        self.buf.clear();
        self.buf.reserve(limit);
        let ctx = self.ctx.get_or_insert_with(CCtx::create);
        let r = if dict.is_empty() {
            ctx.compress(&mut self.buf, raw, self.level)
        } else {
            ctx.compress_using_dict(&mut self.buf, raw, dict, self.level)
        };
        if self.level > KEEP_CONTEXT_MAX_LEVEL {
            self.ctx = None;
        }
        match r {
            Ok(n) if n <= limit => {
                self.streak = 0;
                Some(&self.buf[..n])
            }
            _ => {
                if dict.is_empty() {
                    self.skip = (1u32 << self.streak.min(6)).min(MAX_SKIP);
                    self.streak += 1;
                }
                None
            }
        }
    }
}

/// A reusable zstd decompression context.
pub(crate) struct Decompressor {
    ctx: DCtx<'static>,
    /// Where zstd writes, reused for every frame (grows to the largest frame seen, at most
    /// `MAX_FRAME_RAW`). zstd's scattered small stores are slow into memory that is not in
    /// cache, and a frame's own buffer never is (it is new each time, since the store keeps it);
    /// writing into this warm buffer and then copying the frame out in one `memcpy` measured
    /// ~2 % faster end to end on `decode/first_pass` than decompressing in place.
    scratch: Vec<u8>,
}

impl Decompressor {
    pub(crate) fn new() -> Self {
        Self {
            ctx: DCtx::create(),
            scratch: Vec::new(),
        }
    }

    /// Decompresses `payload`, which must produce exactly `raw_len` bytes. The returned
    /// allocation and the scratch buffer are at most `raw_len`, which the wire limits bound.
    pub(crate) fn decompress(
        &mut self,
        payload: &[u8],
        raw_len: usize,
        dict: &[u8],
    ) -> Option<Vec<u8>> {
        let out = &mut self.scratch;
        out.clear();
        out.reserve(raw_len);
        let r = if dict.is_empty() {
            self.ctx.decompress(out, payload)
        } else {
            self.ctx.decompress_using_dict(out, payload, dict)
        };
        match r {
            Ok(n) if n == raw_len && out.len() == raw_len => Some(out.to_vec()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_and_without_dict() {
        let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog. "
            .iter()
            .copied()
            .cycle()
            .take(5000)
            .collect();
        let mut c = Compressor::new(1);
        let mut d = Decompressor::new();
        let z = c.compress(&text, &[]).unwrap().to_vec();
        assert_eq!(d.decompress(&z, text.len(), &[]).unwrap(), text);
        assert!(d.decompress(&z, text.len() - 1, &[]).is_none());
        // A dictionary that contains the data makes it tiny; the wrong one fails or differs.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..3000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        let plain = c.compress(&noise, &[]).map(<[u8]>::len);
        assert!(plain.is_none());
        let mut edited = noise.clone();
        edited[100] ^= 1;
        let z = c.compress(&edited, &noise).unwrap().to_vec();
        assert!(z.len() < 100, "{}", z.len());
        assert_eq!(d.decompress(&z, noise.len(), &noise).unwrap(), edited);
        assert_ne!(d.decompress(&z, noise.len(), &text), Some(edited.clone()));
    }

    #[test]
    fn high_levels_release_their_context_after_each_frame() {
        let text: Vec<u8> = b"a frame of text that compresses well enough. "
            .iter()
            .copied()
            .cycle()
            .take(50_000)
            .collect();
        let mut d = Decompressor::new();
        for level in [
            1,
            KEEP_CONTEXT_MAX_LEVEL,
            KEEP_CONTEXT_MAX_LEVEL + 1,
            15,
            19,
        ] {
            let mut c = Compressor::new(level);
            for _ in 0..2 {
                let z = c.compress(&text, &[]).unwrap().to_vec();
                assert_eq!(d.decompress(&z, text.len(), &[]).unwrap(), text);
                assert_eq!(
                    c.ctx.is_some(),
                    level <= KEEP_CONTEXT_MAX_LEVEL,
                    "level {level}"
                );
            }
        }
    }

    #[test]
    fn reused_buffer_leaves_nothing_behind() {
        let mut c = Compressor::new(1);
        let mut d = Decompressor::new();
        let frame = |n: usize, b: u8| -> Vec<u8> { (0..n).map(|i| b ^ (i % 7) as u8).collect() };
        let big = frame(200_000, 1);
        let small = frame(3_000, 2);
        let zb = c.compress(&big, &[]).unwrap().to_vec();
        let zs = c.compress(&small, &[]).unwrap().to_vec();
        assert_eq!(d.decompress(&zb, big.len(), &[]).unwrap(), big);
        // A failure in between, then exactly the small frame, not a prefix of the big one.
        assert!(d.decompress(&zb[..zb.len() / 2], big.len(), &[]).is_none());
        assert_eq!(d.decompress(&zs, small.len(), &[]).unwrap(), small);
        assert!(d.decompress(&zs, big.len(), &[]).is_none());
        assert_eq!(d.decompress(&zb, big.len(), &[]).unwrap(), big);
    }
}
