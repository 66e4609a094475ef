//! The segment summary: the record headers of one sealed segment, in a small file beside it,
//! so that opening a store reads a few megabytes per segment instead of all of its data.
//!
//! This module owns the byte layout of a summary file and nothing else: it does no I/O and
//! never panics on any input. The store writes a summary when it syncs a sealed segment
//! ([`crate::Store::flush`]) and reads it at open in place of scanning the segment; a summary
//! that is missing, torn, corrupt or does not describe the segment file as it is on disk
//! (another number, another length) is ignored and the segment is scanned as before. A
//! summary is never the only copy of anything: every field it holds is also in the segment's
//! record headers.
//!
//! # Layout
//!
//! Every integer is little-endian (the file is local to one appliance).
//!
//! ```text
//!  offset  size  field
//!       0     3  magic     b"HWX"
//!       3     1  version   1
//!       4     4  number    the segment's number (its file name)
//!       8     8  seg_len   the segment file's length when it was sealed
//!      16     4  count     number of entries
//!      20     4  reserved  zero
//!      24  88×n  entries, in file order (seqs and offsets increasing):
//!                  0  8  seq     the record's seq
//!                  8  4  off     the record's offset in the segment
//!                 12  4  len     its data length
//!                 16 32  id      the chunk id
//!                 48  1  flags   bit 0: `prev` set; bit 1: `peer` set
//!                 49  3  reserved zero
//!                 52  4  peer    (0 if unset)
//!                 56 32  prev    (zeros if unset)
//!     end     4  crc       CRC-32C over every byte before it
//! ```
//!
//! What the summary does not vouch for is the chunk data: the store's reads check every
//! record's own CRC, id and seq before returning its bytes, whether the record was indexed from
//! a scan or from a summary, so a bit flipped in a summarized segment costs that one chunk (a
//! corrupt read, the codec fetches it), not wrong output.

use crate::record::{HEADER_LEN, MAX_CHUNK_LEN};
use crate::ChunkId;

/// Magic bytes at the start of a summary file.
pub const MAGIC: [u8; 3] = *b"HWX";
/// The summary format version this crate writes and reads.
pub const VERSION: u8 = 1;
/// Size of the summary's header.
pub const HEADER: usize = 24;
/// Size of one entry.
pub const ENTRY: usize = 88;
/// Size of the trailing CRC.
const CRC: usize = 4;
/// Bytes of a summary besides its entries (header and CRC).
pub const OVERHEAD: usize = HEADER + CRC;

const FLAG_PREV: u8 = 1;
const FLAG_PEER: u8 = 2;

/// One record of a segment, as the index needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The record's seq.
    pub seq: u64,
    /// Offset of the record (its header) in the segment file.
    pub off: u32,
    /// Data length.
    pub len: u32,
    /// The chunk's id.
    pub id: ChunkId,
    /// The chunk that preceded it in its flow, if recorded.
    pub prev: Option<ChunkId>,
    /// The peer it crossed the link with, if recorded.
    pub peer: Option<u32>,
}

/// Why bytes are not a summary of the segment they were read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SummaryError {
    /// Shorter than its header and CRC, or its length does not match its entry count.
    #[error("summary truncated or of the wrong length")]
    Truncated,
    /// The magic bytes or the version do not match this format.
    #[error("bad summary magic or version")]
    BadMagic,
    /// The CRC does not match.
    #[error("summary checksum mismatch")]
    BadChecksum,
    /// It describes another segment number or another file length.
    #[error("summary of another segment file")]
    OtherSegment,
    /// An entry has unknown flags, nonzero reserved bytes or unset fields, a length over the
    /// maximum, or is out of order or outside the segment.
    #[error("bad summary entry")]
    BadEntry,
}

/// Accumulates the entries of the segment being appended to, then emits its summary.
#[derive(Debug, Clone)]
pub struct Builder {
    /// Header placeholder followed by the entries.
    buf: Vec<u8>,
    /// Most entries kept; past it the summary is abandoned (the segment will be scanned).
    max_entries: usize,
    overflowed: bool,
}

impl Builder {
    /// An empty summary that gives up past `max_entries` entries (a segment of tiny records
    /// would otherwise make its summary as large as its data, all of it held in RAM until the
    /// segment is sealed and flushed).
    pub fn new(max_entries: usize) -> Self {
        Builder {
            buf: vec![0; HEADER],
            max_entries,
            overflowed: false,
        }
    }

    /// Entries pushed (and kept) so far.
    pub fn len(&self) -> usize {
        (self.buf.len() - HEADER) / ENTRY
    }

    /// Whether no entry has been pushed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the entry of the next record of the segment.
    pub fn push(&mut self, e: &Entry) {
        if self.overflowed {
            return;
        }
        if self.len() >= self.max_entries {
            self.overflowed = true;
            self.buf = Vec::new();
            return;
        }
        let at = self.buf.len();
        self.buf.resize(at + ENTRY, 0);
        let b = &mut self.buf[at..];
        b[0..8].copy_from_slice(&e.seq.to_le_bytes());
        b[8..12].copy_from_slice(&e.off.to_le_bytes());
        b[12..16].copy_from_slice(&e.len.to_le_bytes());
        b[16..48].copy_from_slice(&e.id.0);
        b[48] = (u8::from(e.prev.is_some()) * FLAG_PREV) | (u8::from(e.peer.is_some()) * FLAG_PEER);
        b[52..56].copy_from_slice(&e.peer.unwrap_or(0).to_le_bytes());
        b[56..88].copy_from_slice(&e.prev.map_or([0; 32], |p| p.0));
    }

    /// Drops the entries pushed after the first `len` (records whose write failed).
    pub fn truncate(&mut self, len: usize) {
        if !self.overflowed {
            self.buf.truncate(HEADER + len * ENTRY);
        }
    }

    /// The summary file of segment `number`, sealed at `seg_len` bytes; `None` if it gave up
    /// (more than its entry bound).
    pub fn finish(mut self, number: u32, seg_len: u64) -> Option<Vec<u8>> {
        if self.overflowed {
            return None;
        }
        let count = u32::try_from(self.len()).ok()?;
        let h = &mut self.buf[..HEADER];
        h[0..3].copy_from_slice(&MAGIC);
        h[3] = VERSION;
        h[4..8].copy_from_slice(&number.to_le_bytes());
        h[8..16].copy_from_slice(&seg_len.to_le_bytes());
        h[16..20].copy_from_slice(&count.to_le_bytes());
        h[20..24].fill(0);
        let crc = crc32c::crc32c(&self.buf);
        self.buf.extend_from_slice(&crc.to_le_bytes());
        Some(self.buf)
    }
}

/// The entries of `bytes` if it is a valid summary of segment `number` whose file is
/// `seg_len` bytes long: checksum, header, and every entry well-formed, in increasing seq and
/// offset order, its record inside the file.
pub fn parse(bytes: &[u8], number: u32, seg_len: u64) -> Result<Vec<Entry>, SummaryError> {
    if bytes.len() < HEADER + CRC {
        return Err(SummaryError::Truncated);
    }
    let (body, crc) = bytes.split_at(bytes.len() - CRC);
    if body[0..3] != MAGIC || body[3] != VERSION {
        return Err(SummaryError::BadMagic);
    }
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err(SummaryError::BadChecksum);
    }
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let u64_at = |b: &[u8], at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(a)
    };
    let count = u32_at(body, 16) as usize;
    if (body.len() - HEADER) != count.saturating_mul(ENTRY) || body[20..24] != [0; 4] {
        return Err(SummaryError::Truncated);
    }
    if u32_at(body, 4) != number || u64_at(body, 8) != seg_len {
        return Err(SummaryError::OtherSegment);
    }
    let mut out = Vec::with_capacity(count);
    let mut end = 0u64;
    let mut last_seq: Option<u64> = None;
    for b in body[HEADER..].chunks_exact(ENTRY) {
        let flags = b[48];
        let mut id = [0u8; 32];
        id.copy_from_slice(&b[16..48]);
        let mut prev = [0u8; 32];
        prev.copy_from_slice(&b[56..88]);
        let peer = u32_at(b, 52);
        let e = Entry {
            seq: u64_at(b, 0),
            off: u32_at(b, 8),
            len: u32_at(b, 12),
            id: ChunkId(id),
            prev: (flags & FLAG_PREV != 0).then_some(ChunkId(prev)),
            peer: (flags & FLAG_PEER != 0).then_some(peer),
        };
        let well_formed = flags & !(FLAG_PREV | FLAG_PEER) == 0
            && b[49..52] == [0; 3]
            && (e.prev.is_some() || prev == [0; 32])
            && (e.peer.is_some() || peer == 0)
            && e.len as usize <= MAX_CHUNK_LEN;
        let rec_end = u64::from(e.off) + (HEADER_LEN as u64) + u64::from(e.len);
        let in_order =
            u64::from(e.off) >= end && rec_end <= seg_len && last_seq.is_none_or(|l| e.seq > l);
        if !well_formed || !in_order {
            return Err(SummaryError::BadEntry);
        }
        end = rec_end;
        last_seq = Some(e.seq);
        out.push(e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entries(n: u64) -> Vec<Entry> {
        let mut off = 0u32;
        (0..n)
            .map(|i| {
                let len = 100 + (i as u32 * 37) % 900;
                let e = Entry {
                    seq: 1000 + i,
                    off,
                    len,
                    id: ChunkId([i as u8; 32]),
                    prev: (i % 3 != 0).then_some(ChunkId([i as u8 ^ 0x55; 32])),
                    peer: (i % 2 == 0).then_some(i as u32 + 7),
                };
                off += HEADER_LEN as u32 + len;
                e
            })
            .collect()
    }

    fn build(es: &[Entry], number: u32, seg_len: u64) -> Vec<u8> {
        let mut b = Builder::new(usize::MAX);
        es.iter().for_each(|e| b.push(e));
        b.finish(number, seg_len).unwrap()
    }

    fn seg_len(es: &[Entry]) -> u64 {
        es.last().map_or(0, |e| {
            u64::from(e.off) + HEADER_LEN as u64 + u64::from(e.len)
        })
    }

    #[test]
    fn round_trip() {
        let es = entries(50);
        let len = seg_len(&es);
        let bytes = build(&es, 42, len);
        assert_eq!(bytes.len(), HEADER + 50 * ENTRY + CRC);
        assert_eq!(parse(&bytes, 42, len).unwrap(), es);
        assert_eq!(parse(&build(&[], 3, 0), 3, 0).unwrap(), vec![]);
    }

    #[test]
    fn another_segment_or_length_is_refused() {
        let es = entries(5);
        let len = seg_len(&es);
        let bytes = build(&es, 42, len);
        assert_eq!(parse(&bytes, 43, len), Err(SummaryError::OtherSegment));
        assert_eq!(parse(&bytes, 42, len + 1), Err(SummaryError::OtherSegment));
        assert_eq!(parse(&bytes, 42, len - 1), Err(SummaryError::OtherSegment));
    }

    #[test]
    fn entries_outside_the_segment_or_out_of_order_are_refused() {
        let es = entries(5);
        let len = seg_len(&es);
        // A summary claiming a shorter file than its records need.
        assert_eq!(
            parse(&build(&es, 1, len - 1), 1, len - 1),
            Err(SummaryError::BadEntry)
        );
        let mut swapped = es.clone();
        swapped.swap(1, 2);
        assert_eq!(
            parse(&build(&swapped, 1, len), 1, len),
            Err(SummaryError::BadEntry)
        );
        let mut same_seq = es.clone();
        same_seq[2].seq = same_seq[1].seq;
        assert_eq!(
            parse(&build(&same_seq, 1, len), 1, len),
            Err(SummaryError::BadEntry)
        );
    }

    #[test]
    fn overflow_gives_up_and_truncate_drops_the_tail() {
        let es = entries(10);
        let mut b = Builder::new(4);
        es.iter().for_each(|e| b.push(e));
        assert!(b.finish(1, seg_len(&es)).is_none());
        let mut b = Builder::new(10);
        es.iter().for_each(|e| b.push(e));
        b.truncate(6);
        assert_eq!(b.len(), 6);
        let len = seg_len(&es[..6]);
        assert_eq!(parse(&b.finish(1, len).unwrap(), 1, len).unwrap(), es[..6]);
    }

    proptest! {
        #[test]
        fn any_flipped_bit_is_caught(n in 0u64..20, bit in any::<usize>()) {
            let es = entries(n);
            let len = seg_len(&es);
            let mut bytes = build(&es, 9, len);
            let bit = bit % (bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(parse(&bytes, 9, len).is_err());
        }

        #[test]
        fn truncation_is_refused(n in 1u64..20, cut in any::<usize>()) {
            let es = entries(n);
            let len = seg_len(&es);
            let bytes = build(&es, 9, len);
            let cut = cut % bytes.len();
            prop_assert!(parse(&bytes[..cut], 9, len).is_err());
        }

        #[test]
        fn garbage_never_panics(
            buf in proptest::collection::vec(any::<u8>(), 0..600),
            number: u32,
            seg_len: u64,
        ) {
            let _ = parse(&buf, number, seg_len);
        }
    }
}
