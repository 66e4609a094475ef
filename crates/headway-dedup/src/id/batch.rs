//! Keyed BLAKE3 of many chunks at once, the chunks side by side in SIMD lanes.
//!
//! `blake3::keyed_hash` runs one input at a time. BLAKE3 hashes the 1 KiB pieces of an input
//! ("BLAKE3 chunks", not ours) in parallel lanes, but one of our ~2 KiB chunks has only two of
//! them, so on a 16-lane AVX-512 core nearly every block is compressed alone. The decoder must
//! fingerprint every new chunk before it may pass it on, and every chunk it reads back from its
//! store.
//!
//! [`BatchHasher`] computes exactly the ids `blake3::keyed_hash` would (a property test checks
//! that against the crate for every length class), scheduling the BLAKE3 tree of every input of
//! a batch itself:
//! 1. every whole 1 KiB piece that is not an input's last goes through the crate's many-input
//!    compression, grouped by its position in its input (the position is the block counter, and
//!    one call takes one counter): position 0 of every input in one call, position 1 in the
//!    next, and so on;
//! 2. each input's last piece: its whole blocks but the final one go the same way, grouped by
//!    (block count, position); the final block is compressed alone (it carries the piece's
//!    end flag, and the root flag when the input is a single piece);
//! 3. pieces are merged pairwise into parents, left subtree the largest power of two of
//!    pieces below the total, the top one with the root flag — the BLAKE3 tree.
//!
//! On the codec bench's DOC-like data (default chunk sizes, 128 KiB batches, an AVX-512 core)
//! that is 2.2 GiB/s against 1.4 GiB/s one chunk at a time; BLAKE3 over the same bytes as one
//! input reaches 5.4. What keeps it below: each input's last piece is mostly a group of its
//! own (grouping by consecutive block counters instead measured no better), and its final
//! block and the parents are compressed one at a time.
//!
//! Where the CPU has a many-lane kernel ([`headway_io::simd::Blake3Lanes`]: sixteen lanes with
//! AVX-512, eight with AVX2), batches go the wide way instead (`lanes`): every piece of every
//! input is a lane of the kernel, with its own length, counter and flags, pieces of similar
//! length side by side, then the parents a kernel's width at a time.
//! - Sixteen lanes: on the same data 4.2 GiB/s against 2.9 (medians of 3 runs in one session).
//!   Batches of `WIDE_MAX` inputs or more — the long runs the decoder verifies — fill the
//!   many-input groups above and measured 5–10 % slower the wide way, so they keep them.
//! - Eight lanes (an AVX2 core without AVX-512): `ids/batch_x8` 1.31 GiB/s against 1.25 the
//!   crate's way; end to end `encode/second_pass` 580–638 MiB/s against 520–542 and
//!   `decode/first_pass` +2–7 %. Long runs measured no slower the wide way (`decode/second_pass`
//!   medians of 5, 1.20 GiB/s against 1.07 with the limit), so every batch takes it.
//!
//! This uses `blake3::platform`, which the crate exports for its benchmarks and marks unstable.
//! The workspace pins blake3 to one exact version for that reason; an API change then fails the
//! build on upgrade, and an output change fails the property test.

use blake3::platform::Platform;
use blake3::IncrementCounter;
use headway_io::simd::{Blake3Lanes, MAX_LANES};

use super::{lanes, ChunkId};

/// Bytes per compression block.
pub(super) const BLOCK: usize = 64;
/// Bytes per BLAKE3 chunk (tree leaf).
pub(super) const PIECE: usize = 1024;
/// Batches of at least this many inputs take the crate's many-input path even where the
/// sixteen-lane kernel exists: with that many last pieces its groups fill up. The eight-lane
/// kernel takes every batch (see the module doc).
const WIDE_MAX: usize = 256;
/// Inputs per many-input call: the widest lane count of any platform.
const LANES: usize = 16;
// Domain flags of the BLAKE3 specification (table 3).
pub(super) const CHUNK_START: u8 = 1;
pub(super) const CHUNK_END: u8 = 2;
pub(super) const PARENT: u8 = 4;
pub(super) const ROOT: u8 = 8;
pub(super) const KEYED_HASH: u8 = 16;

/// Fingerprints batches of chunks under one key; holds reusable scratch space.
#[derive(Clone, Debug)]
pub struct BatchHasher {
    platform: Platform,
    /// The many-lane kernel, on CPUs that have one: it then hashes batches whole (`lanes`)
    /// instead of steps 1–3 — every batch with eight lanes, batches of fewer than `WIDE_MAX`
    /// inputs with sixteen.
    wide: Option<Blake3Lanes>,
    wide_scratch: lanes::Scratch,
    /// Per input, the index of its root output in `cvs` (wide path).
    roots: Vec<usize>,
    key: [u32; 8],
    /// Chaining values of every piece of every input of the current batch.
    cvs: Vec<[u32; 8]>,
    /// Where each input's pieces start in `cvs`.
    first_cv: Vec<usize>,
    /// (whole blocks, position, input) of each input's last piece, sorted to group the calls.
    tails: Vec<(usize, usize, usize)>,
    /// The lanes of one many-input call: (input, piece position).
    group: Vec<(usize, usize)>,
    out: Vec<u8>,
    /// The ids of the last batch.
    ids: Vec<ChunkId>,
}

impl BatchHasher {
    /// A hasher under the 32-byte `key` (the id key of a [`super::DedupKey`]).
    pub(crate) fn new(key: &[u8; 32]) -> Self {
        let mut words = [0u32; 8];
        for (w, b) in words.iter_mut().zip(key.chunks_exact(4)) {
            *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Self {
            platform: Platform::detect(),
            wide: Blake3Lanes::detect(),
            wide_scratch: lanes::Scratch::default(),
            roots: Vec::new(),
            key: words,
            cvs: Vec::new(),
            first_cv: Vec::new(),
            tails: Vec::new(),
            group: Vec::new(),
            out: Vec::new(),
            ids: Vec::new(),
        }
    }

    /// The same hasher with another many-lane kernel (one of [`Blake3Lanes::available`]), or
    /// with none, as on CPUs without one: the ids are the same; benchmarks compare the speed.
    pub fn with_lanes(self, wide: Option<Blake3Lanes>) -> Self {
        Self { wide, ..self }
    }

    /// The hashers tests compare: one per kernel this CPU runs, and the portable one.
    #[cfg(test)]
    fn every_kind(key: &[u8; 32]) -> Vec<Self> {
        let mut all: Vec<Self> = Blake3Lanes::available()
            .into_iter()
            .map(|k| Self::new(key).with_lanes(Some(k)))
            .collect();
        all.push(Self::new(key).with_lanes(None));
        all
    }

    /// The keyed BLAKE3 of each of `inputs`, in order.
    pub fn hash<T: AsRef<[u8]>>(&mut self, inputs: &[T]) -> &[ChunkId] {
        self.cvs.clear();
        self.first_cv.clear();
        self.tails.clear();
        self.ids.clear();
        let wide = self
            .wide
            .filter(|k| k.lanes() < MAX_LANES || inputs.len() < WIDE_MAX);
        if let Some(kernel) = wide {
            for input in inputs {
                let (pieces, _) = shape(input.as_ref().len());
                self.first_cv.push(self.cvs.len());
                self.cvs.resize(self.cvs.len() + pieces, [0; 8]);
            }
            lanes::hash(
                kernel,
                &self.key,
                inputs,
                &self.first_cv,
                &mut self.cvs,
                &mut self.roots,
                &mut self.wide_scratch,
            );
            let ids = self
                .roots
                .iter()
                .map(|&r| ChunkId(words_to_bytes(&self.cvs[r])));
            self.ids.extend(ids);
            return &self.ids;
        }
        let mut most = 0;
        for (i, input) in inputs.iter().enumerate() {
            let (pieces, whole) = shape(input.as_ref().len());
            self.first_cv.push(self.cvs.len());
            self.cvs.resize(self.cvs.len() + pieces, self.key);
            most = most.max(pieces);
            self.tails.push((whole, pieces - 1, i));
        }
        // 1. Whole pieces that are not an input's last, one call per position.
        for pos in 0..most.saturating_sub(1) {
            self.group.clear();
            for (i, input) in inputs.iter().enumerate() {
                if (pos + 1) * PIECE < input.as_ref().len() {
                    self.group.push((i, pos));
                }
            }
            self.compress_group(inputs, PIECE / BLOCK, pos as u64, CHUNK_END);
        }
        // 2. Last pieces: whole blocks but the final one.
        self.tails.sort_unstable();
        let tails = std::mem::take(&mut self.tails);
        for same in tails.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let (blocks, pos, _) = same[0];
            if blocks > 0 {
                self.group.clear();
                self.group.extend(same.iter().map(|&(_, pos, i)| (i, pos)));
                self.compress_group(inputs, blocks, pos as u64, 0);
            }
        }
        self.tails = tails;
        // The final block of each last piece, then the tree.
        for (i, input) in inputs.iter().enumerate() {
            let input = input.as_ref();
            let first = self.first_cv[i];
            let (pieces, whole) = shape(input.len());
            let pos = pieces - 1;
            let tail = &input[pos * PIECE + whole * BLOCK..];
            let mut block = [0u8; BLOCK];
            block[..tail.len()].copy_from_slice(tail);
            let mut flags = KEYED_HASH | CHUNK_END;
            if whole == 0 {
                flags |= CHUNK_START;
            }
            if pieces == 1 {
                flags |= ROOT;
            }
            let cv = &mut self.cvs[first + pos];
            self.platform
                .compress_in_place(cv, &block, tail.len() as u8, pos as u64, flags);
            let root = if pieces == 1 {
                *cv
            } else {
                self.merge(first, pieces, true)
            };
            self.ids.push(ChunkId(words_to_bytes(&root)));
        }
        &self.ids
    }

    /// Runs many-input compressions over the lanes of `self.group`, `blocks` blocks each from
    /// the start of the lane's piece, at block counter `counter`, and stores each lane's
    /// chaining value as that piece's.
    fn compress_group<T: AsRef<[u8]>>(
        &mut self,
        inputs: &[T],
        blocks: usize,
        counter: u64,
        end: u8,
    ) {
        self.out.resize(self.group.len() * 32, 0);
        for (part, out) in self
            .group
            .chunks(LANES)
            .zip(self.out.chunks_mut(LANES * 32))
        {
            let mut refs = [&[][..]; LANES];
            for (r, &(i, pos)) in refs.iter_mut().zip(part) {
                *r = &inputs[i].as_ref()[pos * PIECE..pos * PIECE + blocks * BLOCK];
            }
            many(
                &self.platform,
                &refs[..part.len()],
                blocks,
                &self.key,
                counter,
                end,
                &mut out[..part.len() * 32],
            );
        }
        for (&(i, pos), out) in self.group.iter().zip(self.out.chunks_exact(32)) {
            let cv = &mut self.cvs[self.first_cv[i] + pos];
            for (w, b) in cv.iter_mut().zip(out.chunks_exact(4)) {
                *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
    }

    /// The chaining value of the subtree over `count` pieces starting at `self.cvs[first]`.
    fn merge(&self, first: usize, count: usize, root: bool) -> [u32; 8] {
        if count == 1 {
            return self.cvs[first];
        }
        // The left subtree holds the largest power of two of pieces below the total.
        let left = 1 << (usize::BITS - 1 - (count - 1).leading_zeros());
        let l = self.merge(first, left, false);
        let r = self.merge(first + left, count - left, false);
        let mut block = [0u8; BLOCK];
        block[..32].copy_from_slice(&words_to_bytes(&l));
        block[32..].copy_from_slice(&words_to_bytes(&r));
        let mut cv = self.key;
        let flags = KEYED_HASH | PARENT | if root { ROOT } else { 0 };
        self.platform
            .compress_in_place(&mut cv, &block, BLOCK as u8, 0, flags);
        cv
    }
}

/// An input of `len` bytes: its number of pieces, and the whole blocks of its last piece
/// before the final block (which may be whole too, or empty for an empty input).
pub(super) fn shape(len: usize) -> (usize, usize) {
    let pieces = len.div_ceil(PIECE).max(1);
    let last = len - (pieces - 1) * PIECE;
    (pieces, last.div_ceil(BLOCK).max(1) - 1)
}

fn words_to_bytes(words: &[u32; 8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// One many-input call over `inputs` of exactly `blocks` blocks each (1 ..= 16), all at block
/// counter `counter`.
fn many(
    platform: &Platform,
    inputs: &[&[u8]],
    blocks: usize,
    key: &[u32; 8],
    counter: u64,
    end: u8,
    out: &mut [u8],
) {
    fn go<const N: usize>(
        platform: &Platform,
        inputs: &[&[u8]],
        key: &[u32; 8],
        counter: u64,
        end: u8,
        out: &mut [u8],
    ) {
        let mut arrays = [&[0u8; N]; LANES];
        for (a, input) in arrays.iter_mut().zip(inputs) {
            *a = (*input).try_into().expect("inputs of N bytes");
        }
        platform.hash_many(
            &arrays[..inputs.len()],
            key,
            counter,
            IncrementCounter::No,
            KEYED_HASH,
            CHUNK_START,
            end,
            out,
        );
    }
    macro_rules! dispatch {
        ($($b:literal)*) => {
            match blocks {
                $($b => go::<{ $b * BLOCK }>(platform, inputs, key, counter, end, out),)*
                _ => unreachable!("1 to 16 blocks per piece"),
            }
        };
    }
    dispatch!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference(key: &[u8; 32], inputs: &[Vec<u8>]) -> Vec<ChunkId> {
        inputs
            .iter()
            .map(|d| ChunkId(*blake3::keyed_hash(key, d).as_bytes()))
            .collect()
    }

    #[test]
    fn every_length_up_to_nine_pieces_matches_the_crate() {
        let key = [7u8; 32];
        let data: Vec<u8> = (0..9 * PIECE + 70).map(|i| (i * 131 % 251) as u8).collect();
        // Each length alone, and all of them in one batch (shared groups).
        let inputs: Vec<Vec<u8>> = (0..=data.len()).map(|n| data[..n].to_vec()).collect();
        let want = reference(&key, &inputs);
        for mut h in BatchHasher::every_kind(&key) {
            assert_eq!(h.hash(&inputs), want);
            // Batches small enough for the wide kernel, where the CPU has it.
            for (part, want) in inputs.chunks(WIDE_MAX - 1).zip(want.chunks(WIDE_MAX - 1)) {
                assert_eq!(h.hash(part), want);
            }
            for input in inputs.iter().step_by(61) {
                let one = std::slice::from_ref(input);
                assert_eq!(h.hash(one), reference(&key, one));
            }
        }
    }

    #[test]
    fn an_empty_batch_gives_no_ids() {
        for mut h in BatchHasher::every_kind(&[0; 32]) {
            assert_eq!(h.hash(&[b"x"]).len(), 1);
            assert!(h.hash::<Vec<u8>>(&[]).is_empty());
        }
    }

    proptest! {
        #[test]
        fn batches_match_the_crate(
            key in any::<[u8; 32]>(),
            lens in proptest::collection::vec(0usize..70_000, 0..40),
            seed in any::<u8>(),
        ) {
            let inputs: Vec<Vec<u8>> = lens
                .iter()
                .enumerate()
                .map(|(i, &n)| (0..n).map(|j| (j as u8).wrapping_mul(seed) ^ i as u8).collect())
                .collect();
            let want = reference(&key, &inputs);
            for mut h in BatchHasher::every_kind(&key) {
                prop_assert_eq!(h.hash(&inputs), &want[..]);
            }
        }
    }
}
