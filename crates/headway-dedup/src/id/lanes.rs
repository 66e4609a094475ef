//! The batch hasher's wide path, on CPUs with a [`Blake3Lanes`] kernel (AVX-512 or AVX2).
//!
//! Every piece (1 KiB BLAKE3 chunk) of every input of the batch is one job of the many-lane
//! kernel, whatever its length or position, and so is every parent of every input's tree:
//! 1. the pieces, sorted by their number of blocks (longest first) and taken a kernel's width
//!    (sixteen or eight) at a time,
//!    so the lanes of one call have (nearly) the same length — a shorter lane idles under a
//!    mask until the longest is done;
//! 2. the parents, level by level (every parent of one height depends only on lower ones),
//!    a kernel's width at a time, each one block: its children's chaining values.

use std::cmp::Reverse;

use headway_io::simd::{Blake3Lanes, Piece, MAX_LANES as LANES};

use super::batch::{shape, BLOCK, CHUNK_END, CHUNK_START, KEYED_HASH, PARENT, PIECE, ROOT};

/// A piece of the batch: its blocks, input and index in that input.
#[derive(Clone, Copy, Debug)]
struct Job {
    blocks: u8,
    /// The input is this one piece: its final block is the root.
    root: bool,
    input: u32,
    piece: u32,
}

/// A parent node of some input's tree: chaining values `left` and `right` (indices into the
/// chaining-value arena) into `out`.
#[derive(Clone, Copy, Debug)]
struct Parent {
    height: u32,
    left: usize,
    right: usize,
    out: usize,
    root: bool,
}

/// Reusable buffers of the wide path.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    jobs: Vec<Job>,
    parents: Vec<Parent>,
}

/// Fills `cvs` — first every input's piece chaining values (piece `p` of input `i` at
/// `first_cv[i] + p`, already sized), then its parents (appended) — and returns, per input,
/// the index of its root output in `roots`.
pub(super) fn hash<T: AsRef<[u8]>>(
    kernel: Blake3Lanes,
    key: &[u32; 8],
    inputs: &[T],
    first_cv: &[usize],
    cvs: &mut Vec<[u32; 8]>,
    roots: &mut Vec<usize>,
    scratch: &mut Scratch,
) {
    let jobs = &mut scratch.jobs;
    jobs.clear();
    for (i, input) in inputs.iter().enumerate() {
        let len = input.as_ref().len();
        let (count, _) = shape(len);
        for p in 0..count {
            let piece_len = (len - p * PIECE).min(PIECE);
            jobs.push(Job {
                blocks: piece_len.div_ceil(BLOCK).max(1) as u8,
                root: count == 1,
                input: i as u32,
                piece: p as u32,
            });
        }
    }
    jobs.sort_unstable_by_key(|j| Reverse(j.blocks));
    let mut out = [[0u32; 8]; LANES];
    for group in jobs.chunks(kernel.lanes()) {
        let mut pads = [[0u8; BLOCK]; LANES];
        for (pad, job) in pads.iter_mut().zip(group) {
            let (_, tail) = split(inputs[job.input as usize].as_ref(), job);
            if tail.len() < BLOCK {
                pad[..tail.len()].copy_from_slice(tail);
            }
        }
        let mut pieces = [EMPTY; LANES];
        for ((slot, job), pad) in pieces.iter_mut().zip(group).zip(&pads) {
            let (body, tail) = split(inputs[job.input as usize].as_ref(), job);
            *slot = Piece {
                body,
                last: tail.try_into().unwrap_or(pad),
                last_len: tail.len() as u32,
                counter: u64::from(job.piece),
                flags_start: u32::from(CHUNK_START),
                flags_end: u32::from(CHUNK_END | if job.root { ROOT } else { 0 }),
            };
        }
        kernel.hash_pieces(key, u32::from(KEYED_HASH), &pieces[..group.len()], &mut out);
        for (job, cv) in group.iter().zip(&out) {
            cvs[first_cv[job.input as usize] + job.piece as usize] = *cv;
        }
    }
    // Plan every input's tree; single-piece inputs are their own root.
    roots.clear();
    scratch.parents.clear();
    for (i, input) in inputs.iter().enumerate() {
        let (count, _) = shape(input.as_ref().len());
        let root = plan(first_cv[i], count, true, cvs, &mut scratch.parents);
        roots.push(root);
    }
    scratch.parents.sort_unstable_by_key(|p| p.height);
    for level in scratch.parents.chunk_by(|a, b| a.height == b.height) {
        for group in level.chunks(kernel.lanes()) {
            parents_of(kernel, key, group, cvs);
        }
    }
}

/// A lane with nothing to do.
const EMPTY: Piece<'static> = Piece {
    body: &[],
    last: &[0; BLOCK],
    last_len: 0,
    counter: 0,
    flags_start: 0,
    flags_end: 0,
};

/// A piece's whole blocks before its final one, and its final block's bytes (0 ..= 64).
fn split<'a>(input: &'a [u8], job: &Job) -> (&'a [u8], &'a [u8]) {
    let start = job.piece as usize * PIECE;
    let bytes = &input[start..input.len().min(start + PIECE)];
    bytes.split_at((usize::from(job.blocks) - 1) * BLOCK)
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

/// Compresses up to a kernel's width of parents whose children are done.
fn parents_of(kernel: Blake3Lanes, key: &[u32; 8], group: &[Parent], cvs: &mut [[u32; 8]]) {
    let mut msgs = [[0u8; BLOCK]; LANES];
    for (msg, p) in msgs.iter_mut().zip(group) {
        for (w, word) in cvs[p.left].iter().chain(&cvs[p.right]).enumerate() {
            msg[4 * w..4 * w + 4].copy_from_slice(&word.to_le_bytes());
        }
    }
    let mut pieces = [EMPTY; LANES];
    for ((slot, p), msg) in pieces.iter_mut().zip(group).zip(&msgs) {
        *slot = Piece {
            body: &[],
            last: msg,
            last_len: BLOCK as u32,
            counter: 0,
            flags_start: u32::from(PARENT),
            flags_end: if p.root { u32::from(ROOT) } else { 0 },
        };
    }
    let mut out = [[0u32; 8]; LANES];
    kernel.hash_pieces(key, u32::from(KEYED_HASH), &pieces[..group.len()], &mut out);
    for (p, cv) in group.iter().zip(&out) {
        cvs[p.out] = *cv;
    }
}
