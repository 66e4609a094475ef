//! CPU-specific kernels: sixteen BLAKE3 compressions side by side in AVX-512 registers.
//!
//! The dedup codec fingerprints every chunk with keyed BLAKE3. The `blake3` crate runs its
//! wide SIMD only across the 1 KiB pieces of one input that start from the same chaining value,
//! so ~2 KiB chunks leave most of a 16-lane register idle. [`Blake3x16`] is the missing
//! primitive: one compression per lane where every lane has its own chaining value, block,
//! counter, block length and flags, so a scheduler (`headway-dedup`'s batch hasher) can keep all
//! sixteen lanes busy with the pieces of many chunks at once.
//!
//! The compression function is the one of the BLAKE3 specification (section 2.2): a 16-word
//! state of the chaining value, four IV words, the counter, the block length and the flags; seven
//! rounds of the G function over columns then diagonals with the message words permuted between
//! rounds; the new chaining value is the first half of the state XOR the second. Each state
//! word is one `__m512i` holding that word for the sixteen lanes, so every G step is one vector
//! instruction for all lanes. The sixteen message blocks arrive one per lane and are transposed
//! in registers (16 × 16 words) into one vector per message word.
//!
//! Only `x86_64` with AVX-512F has the kernel, built by compilers from Rust 1.89 on (the build
//! script checks); [`Blake3x16::detect`] returns `None` elsewhere and callers keep their
//! portable path.

/// The inputs and outputs of sixteen compressions, word-major: `cv[w][lane]` is word `w` of
/// lane `lane`'s chaining value.
#[derive(Clone, Debug, Default)]
pub struct Blake3Lanes {
    /// Each lane's chaining value in, and its output chaining value after
    /// [`Blake3x16::compress`].
    pub cv: [[u32; 16]; 8],
    /// Low 32 bits of each lane's counter (the BLAKE3 chunk index, 0 for parent nodes).
    pub counter_lo: [u32; 16],
    /// High 32 bits of each lane's counter.
    pub counter_hi: [u32; 16],
    /// Bytes of each lane's block that are input (the rest is zero padding), 0 ..= 64.
    pub block_len: [u32; 16],
    /// Each lane's domain flags (CHUNK_START, CHUNK_END, PARENT, ROOT, KEYED_HASH …).
    pub flags: [u32; 16],
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

    /// Compresses `blocks[lane]` into `lanes.cv[..][lane]` for all sixteen lanes, with each
    /// lane's counter, block length and flags. Lanes a caller does not need still compute
    /// (give them any block); their output is meaningless.
    pub fn compress(self, lanes: &mut Blake3Lanes, blocks: &[&[u8; 64]; 16]) {
        #[cfg(all(target_arch = "x86_64", headway_avx512))]
        // SAFETY: a `Blake3x16` exists only when `detect` saw AVX-512F on this CPU, the one
        // target feature `avx512::compress` is compiled for.
        unsafe {
            avx512::compress(lanes, blocks)
        }
        #[cfg(not(all(target_arch = "x86_64", headway_avx512)))]
        {
            let _ = (lanes, blocks);
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

    use super::Blake3Lanes;

    /// How far ahead of each lane's block to prefetch.
    const PREFETCH: usize = 128;

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

    /// See [`super::Blake3x16::compress`].
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn compress(lanes: &mut Blake3Lanes, blocks: &[&[u8; 64]; 16]) {
        let mut m: [__m512i; 16] = core::array::from_fn(|l| {
            // SAFETY: each block is 64 readable bytes; the load is unaligned.
            unsafe { _mm512_loadu_si512(blocks[l].as_ptr().cast()) }
        });
        // Each lane most likely compresses the block after this one next: ask for it now, so
        // sixteen streams of data just out of cache do not stall every step.
        for block in blocks {
            _mm_prefetch::<_MM_HINT_T0>(block.as_ptr().wrapping_add(PREFETCH).cast());
        }
        // Block words are little-endian, as x86 loads them.
        transpose(&mut m);
        let mut v = [_mm512_setzero_si512(); 16];
        for (vi, cv) in v.iter_mut().zip(&lanes.cv) {
            *vi = load(cv);
        }
        for (vi, iv) in v[8..12].iter_mut().zip(IV) {
            *vi = _mm512_set1_epi32(iv as i32);
        }
        v[12] = load(&lanes.counter_lo);
        v[13] = load(&lanes.counter_hi);
        v[14] = load(&lanes.block_len);
        v[15] = load(&lanes.flags);
        // Seven rounds, unrolled so that every message index is a constant.
        macro_rules! rounds {
            ($($r:literal)*) => {$(
                let s = SCHEDULE[$r];
                g(&mut v, [0, 4, 8, 12], m[s[0]], m[s[1]]);
                g(&mut v, [1, 5, 9, 13], m[s[2]], m[s[3]]);
                g(&mut v, [2, 6, 10, 14], m[s[4]], m[s[5]]);
                g(&mut v, [3, 7, 11, 15], m[s[6]], m[s[7]]);
                g(&mut v, [0, 5, 10, 15], m[s[8]], m[s[9]]);
                g(&mut v, [1, 6, 11, 12], m[s[10]], m[s[11]]);
                g(&mut v, [2, 7, 8, 13], m[s[12]], m[s[13]]);
                g(&mut v, [3, 4, 9, 14], m[s[14]], m[s[15]]);
            )*};
        }
        rounds!(0 1 2 3 4 5 6);
        for (w, cv) in lanes.cv.iter_mut().enumerate() {
            let out = _mm512_xor_si512(v[w], v[w + 8]);
            // SAFETY: `cv` is 64 writable bytes; the store is unaligned.
            unsafe { _mm512_storeu_si512(cv.as_mut_ptr().cast(), out) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYED_HASH: u32 = 16;
    const ROOT: u32 = 8;
    const CHUNK_START: u32 = 1;
    const CHUNK_END: u32 = 2;

    /// Sixteen one-block keyed hashes (inputs of 0 … 64 bytes) against the `blake3` crate.
    #[test]
    fn one_block_keyed_hashes_match_the_crate() {
        let Some(k) = Blake3x16::detect() else {
            eprintln!("no AVX-512F on this CPU: kernel not tested");
            return;
        };
        let key = [0x5au8; 32];
        let key_words: [u32; 8] =
            core::array::from_fn(|w| u32::from_le_bytes(key[4 * w..4 * w + 4].try_into().unwrap()));
        for round in 0..5 {
            let lens: [usize; 16] = core::array::from_fn(|l| (l * 4 + round * 13) % 65);
            let blocks: [[u8; 64]; 16] = core::array::from_fn(|l| {
                core::array::from_fn(|i| {
                    if i < lens[l] {
                        (i * 7 + l * 31 + round) as u8
                    } else {
                        0
                    }
                })
            });
            let mut lanes = Blake3Lanes {
                cv: key_words.map(|w| [w; 16]),
                block_len: lens.map(|n| n as u32),
                flags: [KEYED_HASH | CHUNK_START | CHUNK_END | ROOT; 16],
                ..Blake3Lanes::default()
            };
            let refs: [&[u8; 64]; 16] = core::array::from_fn(|l| &blocks[l]);
            k.compress(&mut lanes, &refs);
            for l in 0..16 {
                let want = blake3::keyed_hash(&key, &blocks[l][..lens[l]]);
                let got: Vec<u8> = (0..8).flat_map(|w| lanes.cv[w][l].to_le_bytes()).collect();
                assert_eq!(&got[..], want.as_bytes(), "lane {l}, {} bytes", lens[l]);
            }
        }
    }
}
