//! CPU-specific kernels: sixteen BLAKE3 chunk or parent compressions side by side in AVX-512
//! registers.
//!
//! The dedup codec fingerprints every chunk with keyed BLAKE3. The `blake3` crate runs its
//! wide SIMD only across inputs that all have the same length and block counter, so the
//! variable-length last 1 KiB piece of each ~2 KiB chunk, and the tree's parent nodes, ran
//! nearly one at a time. [`Blake3x16::hash_pieces`] is the missing primitive: sixteen pieces
//! (BLAKE3 "chunks") or parents at once, each with its own length, final-block length, counter
//! and flags.
//!
//! The compression function is the one of the BLAKE3 specification (section 2.2): a 16-word
//! state of the chaining value, four IV words, the counter, the block length and the flags; seven
//! rounds of the G function over columns then diagonals with the message words permuted between
//! rounds; the new chaining value is the first half of the state XOR the second. Each state
//! word is one `__m512i` holding that word for the sixteen lanes, so every G step is one vector
//! instruction for all lanes. Each step loads one block per lane and transposes the sixteen
//! blocks in registers (16 × 16 words) into one vector per message word. The chaining values
//! stay in registers from a piece's first block to its last; a lane whose piece is shorter than
//! the longest of the call keeps its result under a mask while the others go on, so callers
//! group pieces of similar length.
//!
//! Only `x86_64` with AVX-512F has the kernel, built by compilers from Rust 1.89 on (the build
//! script checks); [`Blake3x16::detect`] returns `None` elsewhere and callers keep their
//! portable path.

/// Bytes per BLAKE3 block.
pub const BLOCK: usize = 64;

/// One lane's work for [`Blake3x16::hash_pieces`]: a BLAKE3 chunk ("piece", up to 16 blocks)
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

/// Proof that this CPU runs the sixteen-lane BLAKE3 kernel; get one from [`Blake3x16::detect`].
#[derive(Clone, Copy, Debug)]
pub struct Blake3x16(());

impl Blake3x16 {
    /// The kernel, if this CPU has AVX-512F.
    pub fn detect() -> Option<Self> {
        #[cfg(all(target_arch = "x86_64", headway_avx512))]
        if std::arch::is_x86_feature_detected!("avx512f") {
            return Some(Self(()));
        }
        None
    }

    /// Compresses each of `pieces` (at most 16) from the chaining value `key`, with `flags`
    /// on every block, and writes its output chaining value to `out` (same index).
    ///
    /// # Panics
    /// If there are more than 16 pieces, fewer outputs than pieces, or a body is not whole
    /// blocks or longer than 15 of them.
    pub fn hash_pieces(
        self,
        key: &[u32; 8],
        flags: u32,
        pieces: &[Piece<'_>],
        out: &mut [[u32; 8]],
    ) {
        assert!(pieces.len() <= 16 && out.len() >= pieces.len());
        for p in pieces {
            assert!(p.body.len() % BLOCK == 0 && p.body.len() <= 15 * BLOCK);
        }
        #[cfg(all(target_arch = "x86_64", headway_avx512))]
        // SAFETY: a `Blake3x16` exists only when `detect` saw AVX-512F on this CPU, the one
        // target feature `avx512::hash_pieces` is compiled for; the lengths were checked above.
        unsafe {
            avx512::hash_pieces(key, flags, pieces, out)
        }
        #[cfg(not(all(target_arch = "x86_64", headway_avx512)))]
        {
            let _ = (key, flags, pieces, out);
            unreachable!("Blake3x16 is never constructed without the kernel")
        }
    }
}

// The build script sets `headway_avx512` only for compilers that have these intrinsics
// (Rust ≥ 1.89), above the workspace's declared minimum.
#[cfg(all(target_arch = "x86_64", headway_avx512))]
#[allow(clippy::incompatible_msrv)]
mod avx512 {
    use core::arch::x86_64::*;

    use super::{Piece, BLOCK};

    /// The first four words of the BLAKE3 IV (the state's third row).
    const IV: [u32; 4] = [0x6A09_E667, 0xBB67_AE85, 0x3C6E_F372, 0xA54F_F53A];

    /// The message word order of each of the seven rounds (the specification's permutation
    /// applied 0 … 6 times).
    const SCHEDULE: [[usize; 16]; 7] = [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8],
        [3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1],
        [10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6],
        [12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4],
        [9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7],
        [11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13],
    ];

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

    /// See [`super::Blake3x16::hash_pieces`].
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
        const ZERO: [u8; BLOCK] = [0; BLOCK];
        // Per lane: index of the final block, counter, final length, start and end flags.
        // Lanes without a piece compress zeros once and are never stored.
        let mut last_at = [0u32; 16];
        let mut ctr_lo = [0u32; 16];
        let mut ctr_hi = [0u32; 16];
        let mut last_len = [0u32; 16];
        let mut fs = [0u32; 16];
        let mut fe = [0u32; 16];
        let mut body: [&[u8]; 16] = [&[]; 16];
        let mut last: [&[u8; BLOCK]; 16] = [&ZERO; 16];
        for (l, p) in pieces.iter().enumerate() {
            last_at[l] = (p.body.len() / BLOCK) as u32;
            ctr_lo[l] = p.counter as u32;
            ctr_hi[l] = (p.counter >> 32) as u32;
            last_len[l] = p.last_len;
            fs[l] = p.flags_start;
            fe[l] = p.flags_end;
            body[l] = p.body;
            last[l] = p.last;
        }
        let steps = last_at.iter().max().map_or(0, |&m| m as usize + 1);
        let last_at_v = load(&last_at);
        let last_len_v = load(&last_len);
        let fs_v = load(&fs);
        let fe_v = load(&fe);
        let ctr_lo_v = load(&ctr_lo);
        let ctr_hi_v = load(&ctr_hi);
        let flags_v = _mm512_set1_epi32(flags as i32);
        let full_v = _mm512_set1_epi32(BLOCK as i32);
        let mut cv: [__m512i; 8] = core::array::from_fn(|w| _mm512_set1_epi32(key[w] as i32));
        for b in 0..steps {
            let mut m: [__m512i; 16] = core::array::from_fn(|l| {
                let at = b * BLOCK;
                let block = body[l].get(at..at + BLOCK).unwrap_or(last[l]);
                // SAFETY: `block` is 64 readable bytes; the load is unaligned.
                unsafe { _mm512_loadu_si512(block.as_ptr().cast()) }
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
        for (l, o) in out.iter_mut().take(pieces.len()).enumerate() {
            for (w, word) in o.iter_mut().enumerate() {
                *word = words[w][l];
            }
        }
    }

    /// The seven rounds, unrolled so that every message index is a constant.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn rounds(v: &mut [__m512i; 16], m: &[__m512i; 16]) {
        macro_rules! rounds {
            ($($r:literal)*) => {$(
                let s = SCHEDULE[$r];
                g(v, [0, 4, 8, 12], m[s[0]], m[s[1]]);
                g(v, [1, 5, 9, 13], m[s[2]], m[s[3]]);
                g(v, [2, 6, 10, 14], m[s[4]], m[s[5]]);
                g(v, [3, 7, 11, 15], m[s[6]], m[s[7]]);
                g(v, [0, 5, 10, 15], m[s[8]], m[s[9]]);
                g(v, [1, 6, 11, 12], m[s[10]], m[s[11]]);
                g(v, [2, 7, 8, 13], m[s[12]], m[s[13]]);
                g(v, [3, 4, 9, 14], m[s[14]], m[s[15]]);
            )*};
        }
        rounds!(0 1 2 3 4 5 6);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYED_HASH: u32 = 16;
    const ROOT: u32 = 8;
    const CHUNK_START: u32 = 1;
    const CHUNK_END: u32 = 2;

    /// Sixteen single-piece keyed hashes of 0 … 1024 bytes (every length class: empty, partial
    /// and whole final blocks, one to sixteen blocks) against the `blake3` crate.
    #[test]
    fn single_piece_keyed_hashes_match_the_crate() {
        let Some(k) = Blake3x16::detect() else {
            eprintln!("no AVX-512F on this CPU: kernel not tested");
            return;
        };
        let key = [0x5au8; 32];
        let key_words: [u32; 8] =
            core::array::from_fn(|w| u32::from_le_bytes(key[4 * w..4 * w + 4].try_into().unwrap()));
        let data: Vec<u8> = (0..1024).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut lens: Vec<usize> = vec![0, 1, 63, 64, 65, 127, 128, 960, 1000, 1023, 1024];
        lens.extend((0..69).map(|i| i * 113 % 1025));
        for (round, batch) in lens.chunks(16).enumerate() {
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
                    "batch {round}, {} bytes",
                    d.len()
                );
            }
        }
    }
}
