//! The batch hasher's wide path for what the crate's many-input compression does badly: each
//! input's last piece, and the tree.
//!
//! Whole pieces that are not an input's last are all 16 blocks long and start the same way, so
//! the crate's many-input call (step 1 of the batch hasher) runs them well. Last pieces have
//! any length and end with their own flags. With [`Blake3x16`] (AVX-512) each of sixteen lanes
//! compresses one block of its own last piece per step, with its own chaining value, counter,
//! block length and flags; a lane whose piece ends takes the next one at the next step, so only
//! the last few steps of a batch run with idle lanes. Then the parents of the BLAKE3 tree of
//! each multi-piece input go through the same kernel, sixteen at a time, level by level: every
//! parent of one height depends only on lower ones.

use headway_io::simd::{Blake3Lanes, Blake3x16};

use super::batch::{shape, BLOCK, CHUNK_END, CHUNK_START, KEYED_HASH, PARENT, PIECE, ROOT};

const LANES: usize = 16;
const ZERO: [u8; BLOCK] = [0; BLOCK];

/// One piece in a lane: its bytes and how far it has got.
#[derive(Clone, Copy, Debug)]
struct Job<'a> {
    /// The piece's bytes (0 ..= 1024).
    bytes: &'a [u8],
    /// Where its chaining value goes in the arena.
    out: usize,
    /// Its index in its input (the BLAKE3 counter).
    piece: u64,
    /// Next block to compress.
    block: usize,
    /// Blocks in the piece (1 ..= 16).
    blocks: usize,
    /// The input is this one piece: its last block is the root.
    root: bool,
}

/// A parent node of some input's tree: chaining values `left` and `right` (indices into the
/// chaining-value arena) into `out`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Parent {
    height: u32,
    left: usize,
    right: usize,
    out: usize,
    root: bool,
}

/// Reusable buffers of the wide path.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    lanes: Blake3Lanes,
    parents: Vec<Parent>,
}

/// Given the chaining values of every piece but each input's last in `cvs` (piece `p` of input
/// `i` at `first_cv[i] + p`), computes the last pieces and the parents (appended to `cvs`) and
/// returns, per input, the index of its root output in `roots`.
pub(super) fn hash<T: AsRef<[u8]>>(
    kernel: Blake3x16,
    key: &[u32; 8],
    inputs: &[T],
    first_cv: &[usize],
    cvs: &mut Vec<[u32; 8]>,
    roots: &mut Vec<usize>,
    scratch: &mut Scratch,
) {
    pieces(kernel, key, inputs, first_cv, cvs, &mut scratch.lanes);
    // Plan every input's tree; single-piece inputs are their own root.
    roots.clear();
    scratch.parents.clear();
    for (i, input) in inputs.iter().enumerate() {
        let (count, _) = shape(input.as_ref().len());
        let root = plan(first_cv[i], count, true, cvs, &mut scratch.parents);
        roots.push(root);
    }
    scratch.parents.sort_unstable_by_key(|p| p.height);
    let parents = std::mem::take(&mut scratch.parents);
    for level in parents.chunk_by(|a, b| a.height == b.height) {
        for group in level.chunks(LANES) {
            parents_of(kernel, key, group, cvs, &mut scratch.lanes);
        }
    }
    scratch.parents = parents;
}

/// Compresses the last piece of every input, storing its chaining value (for a single-piece
/// input, its root output) at `cvs[first_cv[input] + piece]`.
fn pieces<T: AsRef<[u8]>>(
    kernel: Blake3x16,
    key: &[u32; 8],
    inputs: &[T],
    first_cv: &[usize],
    cvs: &mut [[u32; 8]],
    lanes: &mut Blake3Lanes,
) {
    let mut todo = inputs.iter().enumerate().flat_map(|(i, input)| {
        let input = input.as_ref();
        let (count, _) = shape(input.len());
        let first = first_cv[i];
        (0..count).map(move |p| {
            let bytes = &input[p * PIECE..input.len().min((p + 1) * PIECE)];
            Job {
                bytes,
                out: first + p,
                piece: p as u64,
                block: 0,
                blocks: bytes.len().div_ceil(BLOCK).max(1),
                root: count == 1,
            }
        })
    });
    let mut jobs: [Option<Job<'_>>; LANES] = [None; LANES];
    let mut pads = [[0u8; BLOCK]; LANES];
    let mut busy = 0;
    loop {
        // Refill free lanes; a batch's last steps run with some lanes idle.
        if busy < LANES {
            for (l, slot) in jobs.iter_mut().enumerate() {
                if slot.is_none() {
                    *slot = todo.next();
                    match slot {
                        Some(job) => {
                            for (w, k) in key.iter().enumerate() {
                                lanes.cv[w][l] = *k;
                            }
                            lanes.counter_lo[l] = job.piece as u32;
                            lanes.counter_hi[l] = (job.piece >> 32) as u32;
                            busy += 1;
                        }
                        None => lanes.flags[l] = 0,
                    }
                }
            }
            if busy == 0 {
                return;
            }
        }
        for (l, slot) in jobs.iter().enumerate() {
            let Some(job) = slot else { continue };
            let at = job.block * BLOCK;
            let last = job.block + 1 == job.blocks;
            let mut flags = KEYED_HASH;
            if job.block == 0 {
                flags |= CHUNK_START;
            }
            let rest = &job.bytes[at..];
            if last {
                flags |= CHUNK_END;
                if job.root {
                    flags |= ROOT;
                }
            }
            if rest.len() < BLOCK {
                pads[l] = ZERO;
                pads[l][..rest.len()].copy_from_slice(rest);
                lanes.block_len[l] = rest.len() as u32;
            } else {
                lanes.block_len[l] = BLOCK as u32;
            }
            lanes.flags[l] = u32::from(flags);
        }
        let blocks: [&[u8; BLOCK]; LANES] = std::array::from_fn(|l| match &jobs[l] {
            Some(job) => job.bytes[job.block * BLOCK..]
                .first_chunk::<BLOCK>()
                .unwrap_or(&pads[l]),
            None => &ZERO,
        });
        kernel.compress(lanes, &blocks);
        for (l, slot) in jobs.iter_mut().enumerate() {
            let Some(job) = slot else { continue };
            job.block += 1;
            if job.block == job.blocks {
                for (w, word) in cvs[job.out].iter_mut().enumerate() {
                    *word = lanes.cv[w][l];
                }
                *slot = None;
                busy -= 1;
            }
        }
    }
}

/// Adds the parents of the subtree over `count` pieces from `cvs[first]` to `parents`, with
/// new arena slots for their outputs; returns the subtree's chaining-value index.
fn plan(
    first: usize,
    count: usize,
    root: bool,
    cvs: &mut Vec<[u32; 8]>,
    parents: &mut Vec<Parent>,
) -> usize {
    if count == 1 {
        return first;
    }
    // The left subtree holds the largest power of two of pieces below the total.
    let left = 1 << (usize::BITS - 1 - (count - 1).leading_zeros());
    let l = plan(first, left, false, cvs, parents);
    let r = plan(first + left, count - left, false, cvs, parents);
    cvs.push([0; 8]);
    parents.push(Parent {
        // ⌈log2 count⌉: one more than the taller child.
        height: usize::BITS - (count - 1).leading_zeros(),
        left: l,
        right: r,
        out: cvs.len() - 1,
        root,
    });
    cvs.len() - 1
}

/// Compresses up to sixteen parents whose children are done.
fn parents_of(
    kernel: Blake3x16,
    key: &[u32; 8],
    group: &[Parent],
    cvs: &mut [[u32; 8]],
    lanes: &mut Blake3Lanes,
) {
    let mut msgs = [[0u8; BLOCK]; LANES];
    for (l, p) in group.iter().enumerate() {
        for (w, word) in cvs[p.left].iter().chain(&cvs[p.right]).enumerate() {
            msgs[l][4 * w..4 * w + 4].copy_from_slice(&word.to_le_bytes());
        }
        for (w, k) in key.iter().enumerate() {
            lanes.cv[w][l] = *k;
        }
        lanes.counter_lo[l] = 0;
        lanes.counter_hi[l] = 0;
        lanes.block_len[l] = BLOCK as u32;
        lanes.flags[l] = u32::from(KEYED_HASH | PARENT | if p.root { ROOT } else { 0 });
    }
    let blocks: [&[u8; BLOCK]; LANES] = std::array::from_fn(|l| &msgs[l]);
    kernel.compress(lanes, &blocks);
    for (l, p) in group.iter().enumerate() {
        for (w, word) in cvs[p.out].iter_mut().enumerate() {
            *word = lanes.cv[w][l];
        }
    }
}
