//! CPU-specific kernels: sixteen (AVX-512) or eight (AVX2) BLAKE3 chunk or parent
//! compressions side by side in vector registers.
//!
//! The dedup codec fingerprints every chunk with keyed BLAKE3. The `blake3` crate runs its
//! wide SIMD only across inputs that all have the same length and block counter, so the
//! variable-length last 1 KiB piece of each ~2 KiB chunk, and the tree's parent nodes, ran
//! nearly one at a time. [`Blake3Lanes::hash_pieces`] is the missing primitive: a register's
//! width of pieces (BLAKE3 "chunks") or parents at once, each with its own length, final-block
//! length, counter and flags.
//!
//! The compression function is the one of the BLAKE3 specification (section 2.2): a 16-word
//! state of the chaining value, four IV words, the counter, the block length and the flags; seven
//! rounds of the G function over columns then diagonals with the message words permuted between
//! rounds; the new chaining value is the first half of the state XOR the second. Each state
//! word is one vector holding that word for every lane, so every G step is one vector
//! instruction for all lanes. Each step loads one block per lane and transposes the blocks in
//! registers into one vector per message word. The chaining values stay in registers from a
//! piece's first block to its last; a lane whose piece is shorter than the longest of the call
//! keeps its result under a mask while the others go on, so callers group pieces of similar
//! length. AVX2 has no rotate instruction: rotations by 16 and 8 bits are byte shuffles, by 12
//! and 7 two shifts.
//!
//! Only `x86_64` with AVX-512F or AVX2 has a kernel, built by compilers from Rust 1.89 on (the
//! build script checks); [`Blake3Lanes::detect`] returns `None` elsewhere and callers keep
//! their portable path.

/// Bytes per BLAKE3 block.
pub const BLOCK: usize = 64;

/// One lane's work for [`Blake3Lanes::hash_pieces`]: a BLAKE3 chunk ("piece", up to 16 blocks)
/// or a parent node (one block).
#[derive(Clone, Copy, Debug)]
pub struct Piece<'a> {
    /// The whole blocks before the final one: a multiple of 64 bytes, at most 15 blocks.
    pub body: &'a [u8],
    /// The final block, zero-padded past `last_len`.
    pub last: &'a [u8; BLOCK],
    /// Input bytes in the final block, 0 ..= 64.
    pub last_len: u32,
    /// The block counter: the piece's index in its input, 0 for a parent.
    pub counter: u64,
    /// Flags of the first block, beyond the call's common flags (CHUNK_START, or PARENT).
    pub flags_start: u32,
    /// Flags of the final block, beyond the call's common flags (CHUNK_END, ROOT).
    pub flags_end: u32,
}

/// Lanes of the widest kernel ([`Blake3Lanes::lanes`] is at most this).
pub const MAX_LANES: usize = 16;

/// Proof that this CPU runs a many-lane BLAKE3 kernel — sixteen lanes with AVX-512F, eight
/// with AVX2 — and which one; get one from [`Blake3Lanes::detect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blake3Lanes(Width);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    /// Sixteen lanes in AVX-512 registers.
    X16,
    /// Eight lanes in AVX2 registers.
    X8,
}

impl Blake3Lanes {
    /// The widest kernel this CPU runs, if any.
    pub fn detect() -> Option<Self> {
        Self::available().into_iter().next()
    }

    /// Every kernel this CPU runs, widest first (tests compare each against the `blake3`
    /// crate; benchmarks compare them with each other).
    pub fn available() -> Vec<Self> {
        #[allow(unused_mut)] // empty on other targets and old compilers
        let mut all = Vec::new();
        #[cfg(all(target_arch = "x86_64", headway_simd_blake3))]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                all.push(Self(Width::X16));
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                all.push(Self(Width::X8));
            }
        }
        all
    }

    /// Pieces per call: 16 or 8.
    pub fn lanes(self) -> usize {
        match self.0 {
            Width::X16 => 16,
            Width::X8 => 8,
        }
    }

    /// Compresses each of `pieces` (at most [`Blake3Lanes::lanes`]) from the chaining value
    /// `key`, with `flags` on every block, and writes its output chaining value to `out` (same
    /// index).
    ///
    /// # Panics
    /// If there are more pieces than lanes, fewer outputs than pieces, or a body is not whole
    /// blocks or longer than 15 of them.
    pub fn hash_pieces(
        self,
        key: &[u32; 8],
        flags: u32,
        pieces: &[Piece<'_>],
        out: &mut [[u32; 8]],
    ) {
        assert!(pieces.len() <= self.lanes() && out.len() >= pieces.len());
        for p in pieces {
            assert!(p.body.len() % BLOCK == 0 && p.body.len() <= 15 * BLOCK);
        }
        #[cfg(all(target_arch = "x86_64", headway_simd_blake3))]
        match self.0 {
            // SAFETY: a `Blake3Lanes` of width 16 exists only when `available` saw AVX-512F on
            // this CPU, the one target feature `avx512::hash_pieces` is compiled for; the
            // lengths were checked above.
            Width::X16 => unsafe { avx512::hash_pieces(key, flags, pieces, out) },
            // SAFETY: likewise, width 8 only when `available` saw AVX2, the target feature of
            // `avx2::hash_pieces`.
            Width::X8 => unsafe { avx2::hash_pieces(key, flags, pieces, out) },
        }
        #[cfg(not(all(target_arch = "x86_64", headway_simd_blake3)))]
        {
            let _ = (key, flags, pieces, out);
            unreachable!("Blake3Lanes is never constructed without a kernel")
        }
    }
}

/// The first four words of the BLAKE3 IV (the state's third row).
#[cfg(all(target_arch = "x86_64", headway_simd_blake3))]
const IV: [u32; 4] = [0x6A09_E667, 0xBB67_AE85, 0x3C6E_F372, 0xA54F_F53A];

/// The message word order of each of the seven rounds (the specification's permutation
/// applied 0 … 6 times).
#[cfg(all(target_arch = "x86_64", headway_simd_blake3))]
const SCHEDULE: [[usize; 16]; 7] = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8],
    [3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1],
    [10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6],
    [12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4],
    [9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7],
    [11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13],
];

/// One call's per-lane parameters, as arrays each kernel loads into vectors: index of the
/// final block, counter halves, final length, start and end flags, and the blocks. Lanes
/// without a piece compress zeros once and are never stored.
#[cfg(all(target_arch = "x86_64", headway_simd_blake3))]
struct Lanes<'a, const N: usize> {
    last_at: [u32; N],
    ctr_lo: [u32; N],
    ctr_hi: [u32; N],
    last_len: [u32; N],
    fs: [u32; N],
    fe: [u32; N],
    body: [&'a [u8]; N],
    last: [&'a [u8; BLOCK]; N],
    /// Blocks of the longest piece: the calls' steps.
    steps: usize,
}

#[cfg(all(target_arch = "x86_64", headway_simd_blake3))]
impl<'a, const N: usize> Lanes<'a, N> {
    fn new(pieces: &[Piece<'a>]) -> Self {
        const ZERO: [u8; BLOCK] = [0; BLOCK];
        let mut l = Self {
            last_at: [0; N],
            ctr_lo: [0; N],
            ctr_hi: [0; N],
            last_len: [0; N],
            fs: [0; N],
            fe: [0; N],
            body: [&[]; N],
            last: [&ZERO; N],
            steps: 0,
        };
        for (i, p) in pieces.iter().enumerate() {
            l.last_at[i] = (p.body.len() / BLOCK) as u32;
            l.ctr_lo[i] = p.counter as u32;
            l.ctr_hi[i] = (p.counter >> 32) as u32;
            l.last_len[i] = p.last_len;
            l.fs[i] = p.flags_start;
            l.fe[i] = p.flags_end;
            l.body[i] = p.body;
            l.last[i] = p.last;
        }
        l.steps = l.last_at.iter().max().map_or(0, |&m| m as usize + 1);
        l
    }

    /// Lane `i`'s block at step `b` (its final block from its last step on).
    fn block(&self, i: usize, b: usize) -> &'a [u8; BLOCK] {
        let at = b * BLOCK;
        self.body[i]
            .get(at..at + BLOCK)
            .and_then(|s| s.try_into().ok())
            .unwrap_or(self.last[i])
    }
}

/// Writes the chaining values of the first `out.len()` lanes from `words` (one array per word,
/// lanes side by side, as the kernels store their vectors).
#[cfg(all(target_arch = "x86_64", headway_simd_blake3))]
fn scatter<const N: usize>(words: &[[u32; N]; 8], out: &mut [[u32; 8]]) {
    for (l, o) in out.iter_mut().enumerate() {
        for (w, word) in o.iter_mut().enumerate() {
            *word = words[w][l];
        }
    }
}

/// The seven rounds of the compression function with a kernel's G function `$g`, over
/// columns then diagonals, unrolled so that every message index is a constant.
#[cfg(all(target_arch = "x86_64", headway_simd_blake3))]
macro_rules! seven_rounds {
    ($g:ident, $v:ident, $m:ident) => {
        seven_rounds!(@ $g, $v, $m; 0 1 2 3 4 5 6)
    };
    (@ $g:ident, $v:ident, $m:ident; $($r:literal)*) => {$(
        let s = SCHEDULE[$r];
        $g($v, [0, 4, 8, 12], $m[s[0]], $m[s[1]]);
        $g($v, [1, 5, 9, 13], $m[s[2]], $m[s[3]]);
        $g($v, [2, 6, 10, 14], $m[s[4]], $m[s[5]]);
        $g($v, [3, 7, 11, 15], $m[s[6]], $m[s[7]]);
        $g($v, [0, 5, 10, 15], $m[s[8]], $m[s[9]]);
        $g($v, [1, 6, 11, 12], $m[s[10]], $m[s[11]]);
        $g($v, [2, 7, 8, 13], $m[s[12]], $m[s[13]]);
        $g($v, [3, 4, 9, 14], $m[s[14]], $m[s[15]]);
    )*};
}

// The build script sets `headway_simd_blake3` only for compilers that have the AVX-512
// intrinsics (Rust ≥ 1.89), above the workspace's declared minimum.
#[cfg(all(target_arch = "x86_64", headway_simd_blake3))]
#[allow(clippy::incompatible_msrv)]
mod avx512 {
    use core::arch::x86_64::*;

    use super::{scatter, Lanes, Piece, BLOCK, IV, SCHEDULE};

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn g(v: &mut [__m512i; 16], [a, b, c, d]: [usize; 4], x: __m512i, y: __m512i) {
        v[a] = _mm512_add_epi32(_mm512_add_epi32(v[a], v[b]), x);
        v[d] = _mm512_ror_epi32::<16>(_mm512_xor_si512(v[d], v[a]));
        v[c] = _mm512_add_epi32(v[c], v[d]);
        v[b] = _mm512_ror_epi32::<12>(_mm512_xor_si512(v[b], v[c]));
        v[a] = _mm512_add_epi32(_mm512_add_epi32(v[a], v[b]), y);
        v[d] = _mm512_ror_epi32::<8>(_mm512_xor_si512(v[d], v[a]));
        v[c] = _mm512_add_epi32(v[c], v[d]);
        v[b] = _mm512_ror_epi32::<7>(_mm512_xor_si512(v[b], v[c]));
    }

    /// Transposes a 16 × 16 matrix of 32-bit words held one row per register.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn transpose(r: &mut [__m512i; 16]) {
        let mut t = [_mm512_setzero_si512(); 16];
        // Interleave words of row pairs, then 64-bit pairs of those: afterwards each 128-bit
        // quarter k of r[4g + j] holds word j of rows 4g … 4g+3, taken from quarter k.
        for i in (0..16).step_by(2) {
            t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
        }
        for i in (0..16).step_by(4) {
            r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
            r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
            r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
            r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
        }
        // Then gather the 128-bit quarters: two rounds of even/odd quarter selection.
        for i in 0..4 {
            for j in [0, 8] {
                t[i + j] = _mm512_shuffle_i32x4::<0x88>(r[i + j], r[i + j + 4]);
                t[i + j + 4] = _mm512_shuffle_i32x4::<0xDD>(r[i + j], r[i + j + 4]);
            }
        }
        for i in 0..8 {
            r[i] = _mm512_shuffle_i32x4::<0x88>(t[i], t[i + 8]);
            r[i + 8] = _mm512_shuffle_i32x4::<0xDD>(t[i], t[i + 8]);
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load(words: &[u32; 16]) -> __m512i {
        // SAFETY: `words` is 64 readable bytes; the load is unaligned.
        unsafe { _mm512_loadu_si512(words.as_ptr().cast()) }
    }

    /// See [`super::Blake3Lanes::hash_pieces`].
    ///
    /// # Safety
    /// The CPU must support AVX-512F; at most 16 pieces, at least as many outputs, every body
    /// whole blocks and at most 15 of them.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn hash_pieces(
        key: &[u32; 8],
        flags: u32,
        pieces: &[Piece<'_>],
        out: &mut [[u32; 8]],
    ) {
        let lanes = Lanes::<16>::new(pieces);
        let last_at_v = load(&lanes.last_at);
        let last_len_v = load(&lanes.last_len);
        let fs_v = load(&lanes.fs);
        let fe_v = load(&lanes.fe);
        let ctr_lo_v = load(&lanes.ctr_lo);
        let ctr_hi_v = load(&lanes.ctr_hi);
        let flags_v = _mm512_set1_epi32(flags as i32);
        let full_v = _mm512_set1_epi32(BLOCK as i32);
        let mut cv: [__m512i; 8] = core::array::from_fn(|w| _mm512_set1_epi32(key[w] as i32));
        for b in 0..lanes.steps {
            let mut m: [__m512i; 16] = core::array::from_fn(|l| {
                // SAFETY: a block is 64 readable bytes; the load is unaligned.
                unsafe { _mm512_loadu_si512(lanes.block(l, b).as_ptr().cast()) }
            });
            // Block words are little-endian, as x86 loads them.
            transpose(&mut m);
            let b_v = _mm512_set1_epi32(b as i32);
            let is_last = _mm512_cmpeq_epi32_mask(b_v, last_at_v);
            let active = _mm512_cmple_epu32_mask(b_v, last_at_v);
            let mut f = _mm512_or_si512(flags_v, _mm512_maskz_mov_epi32(is_last, fe_v));
            if b == 0 {
                f = _mm512_or_si512(f, fs_v);
            }
            let mut v = [_mm512_setzero_si512(); 16];
            v[..8].copy_from_slice(&cv);
            for (vi, iv) in v[8..12].iter_mut().zip(IV) {
                *vi = _mm512_set1_epi32(iv as i32);
            }
            v[12] = ctr_lo_v;
            v[13] = ctr_hi_v;
            v[14] = _mm512_mask_blend_epi32(is_last, full_v, last_len_v);
            v[15] = f;
            rounds(&mut v, &m);
            for (w, c) in cv.iter_mut().enumerate() {
                let new = _mm512_xor_si512(v[w], v[w + 8]);
                *c = _mm512_mask_mov_epi32(*c, active, new);
            }
        }
        let mut words = [[0u32; 16]; 8];
        for (dst, c) in words.iter_mut().zip(cv) {
            // SAFETY: `dst` is 64 writable bytes; the store is unaligned.
            unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), c) };
        }
        scatter(&words, &mut out[..pieces.len()]);
    }

    /// The seven rounds.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn rounds(v: &mut [__m512i; 16], m: &[__m512i; 16]) {
        seven_rounds!(g, v, m);
    }
}

#[cfg(all(target_arch = "x86_64", headway_simd_blake3))]
mod avx2 {
    use core::arch::x86_64::*;

    use super::{scatter, Lanes, Piece, BLOCK, IV, SCHEDULE};

    /// Rotates each 32-bit word right by 16 bits (a byte shuffle within each word).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn rot16(x: __m256i) -> __m256i {
        let idx = _mm256_set_epi8(
            13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0, 3, 2, //
            13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0, 3, 2,
        );
        _mm256_shuffle_epi8(x, idx)
    }

    /// Rotates each 32-bit word right by 8 bits (a byte shuffle within each word).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn rot8(x: __m256i) -> __m256i {
        let idx = _mm256_set_epi8(
            12, 15, 14, 13, 8, 11, 10, 9, 4, 7, 6, 5, 0, 3, 2, 1, //
            12, 15, 14, 13, 8, 11, 10, 9, 4, 7, 6, 5, 0, 3, 2, 1,
        );
        _mm256_shuffle_epi8(x, idx)
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn rot12(x: __m256i) -> __m256i {
        _mm256_or_si256(_mm256_srli_epi32::<12>(x), _mm256_slli_epi32::<20>(x))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn rot7(x: __m256i) -> __m256i {
        _mm256_or_si256(_mm256_srli_epi32::<7>(x), _mm256_slli_epi32::<25>(x))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn g(v: &mut [__m256i; 16], [a, b, c, d]: [usize; 4], x: __m256i, y: __m256i) {
        v[a] = _mm256_add_epi32(_mm256_add_epi32(v[a], v[b]), x);
        v[d] = rot16(_mm256_xor_si256(v[d], v[a]));
        v[c] = _mm256_add_epi32(v[c], v[d]);
        v[b] = rot12(_mm256_xor_si256(v[b], v[c]));
        v[a] = _mm256_add_epi32(_mm256_add_epi32(v[a], v[b]), y);
        v[d] = rot8(_mm256_xor_si256(v[d], v[a]));
        v[c] = _mm256_add_epi32(v[c], v[d]);
        v[b] = rot7(_mm256_xor_si256(v[b], v[c]));
    }

    /// Transposes an 8 × 8 matrix of 32-bit words held one row per register.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn transpose(r: &mut [__m256i; 8]) {
        // Interleave words of row pairs, then 64-bit pairs of those: afterwards each 128-bit
        // half h of u[j] (rows 0–3) and u[4 + j] (rows 4–7) holds word j + 4h of four rows.
        let t: [__m256i; 8] = core::array::from_fn(|i| {
            let (a, b) = (r[i & !1], r[i | 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_epi32(a, b)
            } else {
                _mm256_unpackhi_epi32(a, b)
            }
        });
        let mut u = [_mm256_setzero_si256(); 8];
        for q in [0, 4] {
            u[q] = _mm256_unpacklo_epi64(t[q], t[q + 2]);
            u[q + 1] = _mm256_unpackhi_epi64(t[q], t[q + 2]);
            u[q + 2] = _mm256_unpacklo_epi64(t[q + 1], t[q + 3]);
            u[q + 3] = _mm256_unpackhi_epi64(t[q + 1], t[q + 3]);
        }
        // Then join the halves: low halves give words 0–3, high halves words 4–7.
        for j in 0..4 {
            r[j] = _mm256_permute2x128_si256::<0x20>(u[j], u[j + 4]);
            r[j + 4] = _mm256_permute2x128_si256::<0x31>(u[j], u[j + 4]);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn load(words: &[u32; 8]) -> __m256i {
        // SAFETY: `words` is 32 readable bytes; the load is unaligned.
        unsafe { _mm256_loadu_si256(words.as_ptr().cast()) }
    }

    /// See [`super::Blake3Lanes::hash_pieces`].
    ///
    /// # Safety
    /// The CPU must support AVX2; at most 8 pieces, at least as many outputs, every body whole
    /// blocks and at most 15 of them.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn hash_pieces(
        key: &[u32; 8],
        flags: u32,
        pieces: &[Piece<'_>],
        out: &mut [[u32; 8]],
    ) {
        let lanes = Lanes::<8>::new(pieces);
        let last_at_v = load(&lanes.last_at);
        let last_len_v = load(&lanes.last_len);
        let fs_v = load(&lanes.fs);
        let fe_v = load(&lanes.fe);
        let ctr_lo_v = load(&lanes.ctr_lo);
        let ctr_hi_v = load(&lanes.ctr_hi);
        let flags_v = _mm256_set1_epi32(flags as i32);
        let full_v = _mm256_set1_epi32(BLOCK as i32);
        let mut cv: [__m256i; 8] = core::array::from_fn(|w| _mm256_set1_epi32(key[w] as i32));
        for b in 0..lanes.steps {
            let blocks: [&[u8; BLOCK]; 8] = core::array::from_fn(|l| lanes.block(l, b));
            // Block words are little-endian, as x86 loads them. Words 0–7 of every lane, then
            // words 8–15, each transposed into one vector per word.
            let mut lo: [__m256i; 8] = core::array::from_fn(|l| {
                // SAFETY: the first 32 of the block's 64 readable bytes; unaligned load.
                unsafe { _mm256_loadu_si256(blocks[l].as_ptr().cast()) }
            });
            let mut hi: [__m256i; 8] = core::array::from_fn(|l| {
                // SAFETY: the last 32 of the block's 64 readable bytes; unaligned load.
                unsafe { _mm256_loadu_si256(blocks[l][32..].as_ptr().cast()) }
            });
            transpose(&mut lo);
            transpose(&mut hi);
            let m: [__m256i; 16] = core::array::from_fn(|w| if w < 8 { lo[w] } else { hi[w - 8] });
            let b_v = _mm256_set1_epi32(b as i32);
            // All ones where this block is the lane's final one; where the lane is done.
            let is_last = _mm256_cmpeq_epi32(b_v, last_at_v);
            let done = _mm256_cmpgt_epi32(b_v, last_at_v);
            let mut f = _mm256_or_si256(flags_v, _mm256_and_si256(is_last, fe_v));
            if b == 0 {
                f = _mm256_or_si256(f, fs_v);
            }
            let mut v = [_mm256_setzero_si256(); 16];
            v[..8].copy_from_slice(&cv);
            for (vi, iv) in v[8..12].iter_mut().zip(IV) {
                *vi = _mm256_set1_epi32(iv as i32);
            }
            v[12] = ctr_lo_v;
            v[13] = ctr_hi_v;
            v[14] = _mm256_blendv_epi8(full_v, last_len_v, is_last);
            v[15] = f;
            rounds(&mut v, &m);
            for (w, c) in cv.iter_mut().enumerate() {
                let new = _mm256_xor_si256(v[w], v[w + 8]);
                *c = _mm256_blendv_epi8(new, *c, done);
            }
        }
        let mut words = [[0u32; 8]; 8];
        for (dst, c) in words.iter_mut().zip(cv) {
            // SAFETY: `dst` is 32 writable bytes; the store is unaligned.
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), c) };
        }
        scatter(&words, &mut out[..pieces.len()]);
    }

    /// The seven rounds.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn rounds(v: &mut [__m256i; 16], m: &[__m256i; 16]) {
        seven_rounds!(g, v, m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYED_HASH: u32 = 16;
    const ROOT: u32 = 8;
    const CHUNK_START: u32 = 1;
    const CHUNK_END: u32 = 2;

    /// Single-piece keyed hashes of 0 … 1024 bytes (every length class: empty, partial and
    /// whole final blocks, one to sixteen blocks), a kernel's width at a time, against the
    /// `blake3` crate, for every kernel this CPU runs.
    #[test]
    fn single_piece_keyed_hashes_match_the_crate() {
        let kernels = Blake3Lanes::available();
        if kernels.is_empty() {
            eprintln!("no AVX-512F or AVX2 on this CPU: no kernel to test");
        }
        for k in kernels {
            one_kernel(k);
        }
    }

    fn one_kernel(k: Blake3Lanes) {
        let key = [0x5au8; 32];
        let key_words: [u32; 8] =
            core::array::from_fn(|w| u32::from_le_bytes(key[4 * w..4 * w + 4].try_into().unwrap()));
        let data: Vec<u8> = (0..1024).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut lens: Vec<usize> = vec![0, 1, 63, 64, 65, 127, 128, 960, 1000, 1023, 1024];
        lens.extend((0..69).map(|i| i * 113 % 1025));
        for (round, batch) in lens.chunks(k.lanes()).enumerate() {
            let inputs: Vec<&[u8]> = batch.iter().map(|&n| &data[..n]).collect();
            let pads: Vec<[u8; BLOCK]> = inputs
                .iter()
                .map(|d| {
                    let body = d.len().div_ceil(BLOCK).max(1) * BLOCK - BLOCK;
                    let mut pad = [0u8; BLOCK];
                    pad[..d.len() - body].copy_from_slice(&d[body..]);
                    pad
                })
                .collect();
            let pieces: Vec<Piece<'_>> = inputs
                .iter()
                .zip(&pads)
                .map(|(d, pad)| {
                    let body = d.len().div_ceil(BLOCK).max(1) * BLOCK - BLOCK;
                    Piece {
                        body: &d[..body],
                        last: pad,
                        last_len: (d.len() - body) as u32,
                        counter: 0,
                        flags_start: CHUNK_START,
                        flags_end: CHUNK_END | ROOT,
                    }
                })
                .collect();
            let mut out = vec![[0u32; 8]; pieces.len()];
            k.hash_pieces(&key_words, KEYED_HASH, &pieces, &mut out);
            for (d, got) in inputs.iter().zip(&out) {
                let want = blake3::keyed_hash(&key, d);
                let got: Vec<u8> = got.iter().flat_map(|w| w.to_le_bytes()).collect();
                assert_eq!(
                    &got[..],
                    want.as_bytes(),
                    "{k:?} batch {round}, {} bytes",
                    d.len()
                );
            }
        }
    }
}
