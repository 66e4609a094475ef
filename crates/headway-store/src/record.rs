//! The on-disk record: one chunk in a segment file.
//!
//! This module owns the byte layout of a record and nothing else: it does no I/O, keeps no state
//! and never panics on any input once [`Record::new_checked`] succeeded (STYLE.md rule 3: a view
//! over the bytes plus a [`RecordRepr`] with `parse` / `emit` / `buffer_len`).
//!
//! # Layout
//!
//! A segment file is a plain concatenation of records, with no file header. Every integer is
//! little-endian (the format is local to one appliance; it never crosses the WAN).
//!
//! ```text
//!  offset  size  field
//!       0     3  magic    b"HWC"
//!       3     1  version  2
//!       4     4  len      length of the chunk data in bytes (≤ MAX_CHUNK_LEN)
//!       8     8  seq      sequence number of the record in the store's log
//!      16    32  id       the chunk's id (keyed BLAKE3, computed by the caller)
//!      48     1  flags    bit 0: `prev` is set; bit 1: `peer` is set; other bits 0
//!      49     3  reserved zero
//!      52     4  peer     the peer the chunk crossed the link with (0 if unset)
//!      56    32  prev     the id of the chunk that preceded it in its flow (zeros if unset)
//!      88     4  crc      CRC-32C (Castagnoli, RFC 3720 §B.4) over bytes 0..88 and the data
//!      92   len  data
//! ```
//!
//! `prev` and `peer` are what the dedup codec's [`ChunkStore`](headway_dedup::ChunkStore)
//! model needs to survive a restart: the store rebuilds successor links and per-chunk peer sets
//! from them at open. Version 1 (52-byte header without flags, peer and prev) was never
//! deployed and is not read: a version-1 record is refused like a bad magic.
//!
//! A parsed record re-emits to exactly the bytes read: unset fields must be zero, and unknown
//! flag bits or nonzero reserved bytes are refused ([`RecordError::BadHeader`]).
//!
//! The CRC covers the header as well as the data, so a torn write, a flipped bit in the length or
//! a record boundary that landed in the middle of old data are all caught by the same check.
//! Checking order for a reader: [`Record::new_checked`] (magic, version, `len` bound and that the
//! whole record is in the buffer), then [`Record::verify`] (the CRC).

use crate::ChunkId;

/// Magic bytes at the start of every record.
pub const MAGIC: [u8; 3] = *b"HWC";
/// The record format version this crate writes and reads.
pub const VERSION: u8 = 2;
/// Size of the fixed record header in bytes.
pub const HEADER_LEN: usize = 92;
/// Largest chunk a record may carry (16 MiB). Content-defined chunks are kilobytes; the bound lets
/// a scanner reject a garbage length before it tries to read it.
pub const MAX_CHUNK_LEN: usize = 16 << 20;

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..3;
    pub const VERSION: usize = 3;
    pub const LEN: Range<usize> = 4..8;
    pub const SEQ: Range<usize> = 8..16;
    pub const ID: Range<usize> = 16..48;
    pub const FLAGS: usize = 48;
    pub const RESERVED: Range<usize> = 49..52;
    pub const PEER: Range<usize> = 52..56;
    pub const PREV: Range<usize> = 56..88;
    pub const CRC: Range<usize> = 88..92;
}

/// Flag bit: the `prev` field is set.
const FLAG_PREV: u8 = 1;
/// Flag bit: the `peer` field is set.
const FLAG_PEER: u8 = 2;

/// Why a buffer is not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The buffer is shorter than the header, or than the header plus the data length it
    /// announces (a torn tail looks like this).
    #[error("record truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the record needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The magic bytes or the version do not match this format.
    #[error("bad record magic or version")]
    BadMagic,
    /// The announced data length exceeds [`MAX_CHUNK_LEN`].
    #[error("record length {0} exceeds the maximum chunk length")]
    TooLong(u32),
    /// The CRC does not match the header and data.
    #[error("record checksum mismatch")]
    BadChecksum,
    /// Unknown flag bits, nonzero reserved bytes, or a nonzero field whose flag is unset.
    #[error("bad record header flags or reserved bytes")]
    BadHeader,
}

/// A read-only view of one record at the start of a buffer (the buffer may continue past it).
#[derive(Debug, Clone, Copy)]
pub struct Record<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Record<T> {
    /// Wraps `buffer` after checking magic, version, the length bound and that the buffer holds
    /// the whole record. The CRC is not checked here: call [`Record::verify`].
    pub fn new_checked(buffer: T) -> Result<Self, RecordError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(RecordError::Truncated {
                need: HEADER_LEN,
                have: b.len(),
            });
        }
        if b[field::MAGIC] != MAGIC || b[field::VERSION] != VERSION {
            return Err(RecordError::BadMagic);
        }
        let len = u32::from_le_bytes(b[field::LEN].try_into().unwrap_or([0; 4]));
        if len as usize > MAX_CHUNK_LEN {
            return Err(RecordError::TooLong(len));
        }
        let need = HEADER_LEN + len as usize;
        if b.len() < need {
            return Err(RecordError::Truncated {
                need,
                have: b.len(),
            });
        }
        Ok(Record { buffer })
    }

    /// Length of the chunk data.
    pub fn data_len(&self) -> usize {
        let b = self.buffer.as_ref();
        u32::from_le_bytes(b[field::LEN].try_into().unwrap_or([0; 4])) as usize
    }

    /// Total length of the record (header plus data).
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.data_len()
    }

    /// Sequence number stored in the record.
    pub fn seq(&self) -> u64 {
        u64::from_le_bytes(
            self.buffer.as_ref()[field::SEQ]
                .try_into()
                .unwrap_or([0; 8]),
        )
    }

    /// Chunk id stored in the record.
    pub fn id(&self) -> ChunkId {
        ChunkId(
            self.buffer.as_ref()[field::ID]
                .try_into()
                .unwrap_or([0; 32]),
        )
    }

    /// Flags byte stored in the record.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Peer id field stored in the record (meaningful if the peer flag is set).
    pub fn peer(&self) -> u32 {
        u32::from_le_bytes(
            self.buffer.as_ref()[field::PEER]
                .try_into()
                .unwrap_or([0; 4]),
        )
    }

    /// Predecessor id field stored in the record (meaningful if the prev flag is set).
    pub fn prev(&self) -> ChunkId {
        ChunkId(
            self.buffer.as_ref()[field::PREV]
                .try_into()
                .unwrap_or([0; 32]),
        )
    }

    /// CRC stored in the record.
    pub fn crc(&self) -> u32 {
        u32::from_le_bytes(
            self.buffer.as_ref()[field::CRC]
                .try_into()
                .unwrap_or([0; 4]),
        )
    }

    /// The chunk data.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }

    /// Checks the CRC over the header and the data.
    pub fn verify(&self) -> Result<(), RecordError> {
        let b = self.buffer.as_ref();
        if checksum(&b[..field::CRC.start], self.data()) == self.crc() {
            Ok(())
        } else {
            Err(RecordError::BadChecksum)
        }
    }
}

/// The header fields of a record, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRepr {
    /// Sequence number in the store's log.
    pub seq: u64,
    /// The chunk's id.
    pub id: ChunkId,
    /// Length of the chunk data.
    pub len: u32,
    /// The chunk that preceded this one in its flow, if any.
    pub prev: Option<ChunkId>,
    /// The peer the chunk crossed the link with, if recorded through the codec.
    pub peer: Option<u32>,
}

impl RecordRepr {
    /// Parses a checked and verified record (the CRC is verified here too, then the flags and
    /// reserved bytes).
    pub fn parse<T: AsRef<[u8]>>(record: &Record<T>) -> Result<Self, RecordError> {
        record.verify()?;
        let flags = record.flags();
        let b = record.buffer.as_ref();
        if flags & !(FLAG_PREV | FLAG_PEER) != 0 || b[field::RESERVED].iter().any(|&x| x != 0) {
            return Err(RecordError::BadHeader);
        }
        let prev = (flags & FLAG_PREV != 0).then(|| record.prev());
        let peer = (flags & FLAG_PEER != 0).then(|| record.peer());
        if (prev.is_none() && record.prev().0 != [0; 32]) || (peer.is_none() && record.peer() != 0)
        {
            return Err(RecordError::BadHeader);
        }
        Ok(RecordRepr {
            seq: record.seq(),
            id: record.id(),
            len: record.data_len() as u32,
            prev,
            peer,
        })
    }

    /// Bytes the whole record (header and data) takes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.len as usize
    }

    /// Writes the header for `data` into `header` (exactly [`HEADER_LEN`] bytes), including the
    /// CRC over header and data. `data.len()` must equal `self.len`.
    ///
    /// Emitting the header separately lets the writer place header and data in one buffer
    /// without an intermediate copy of the data.
    pub fn emit_header(&self, header: &mut [u8; HEADER_LEN], data: &[u8]) {
        debug_assert_eq!(data.len(), self.len as usize);
        header[field::MAGIC].copy_from_slice(&MAGIC);
        header[field::VERSION] = VERSION;
        header[field::LEN].copy_from_slice(&self.len.to_le_bytes());
        header[field::SEQ].copy_from_slice(&self.seq.to_le_bytes());
        header[field::ID].copy_from_slice(&self.id.0);
        let mut flags = 0;
        if self.prev.is_some() {
            flags |= FLAG_PREV;
        }
        if self.peer.is_some() {
            flags |= FLAG_PEER;
        }
        header[field::FLAGS] = flags;
        header[field::RESERVED].fill(0);
        header[field::PEER].copy_from_slice(&self.peer.unwrap_or(0).to_le_bytes());
        header[field::PREV].copy_from_slice(&self.prev.map_or([0; 32], |p| p.0));
        let crc = checksum(&header[..field::CRC.start], data);
        header[field::CRC].copy_from_slice(&crc.to_le_bytes());
    }

    /// Writes the whole record into `buffer`, which must be at least [`RecordRepr::buffer_len`]
    /// bytes long; `data.len()` must equal `self.len`.
    ///
    /// # Panics
    ///
    /// If `buffer` is shorter than [`RecordRepr::buffer_len`] (a caller bug, never input).
    pub fn emit(&self, buffer: &mut [u8], data: &[u8]) {
        let (header, rest) = buffer
            .split_first_chunk_mut::<HEADER_LEN>()
            .expect("buffer shorter than a header");
        rest[..data.len()].copy_from_slice(data);
        self.emit_header(header, data);
    }
}

/// CRC-32C over `header` then `data`.
fn checksum(header: &[u8], data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(header), data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(repr: &RecordRepr, data: &[u8]) -> Vec<u8> {
        let mut buf = vec![0; repr.buffer_len()];
        repr.emit(&mut buf, data);
        buf
    }

    proptest! {
        #[test]
        fn round_trip(seq: u64, id: [u8; 32], prev: Option<[u8; 32]>, peer: Option<u32>,
                      data in proptest::collection::vec(any::<u8>(), 0..2048),
                      trailing in proptest::collection::vec(any::<u8>(), 0..64)) {
            let repr = RecordRepr { seq, id: ChunkId(id), len: data.len() as u32, prev: prev.map(ChunkId), peer };
            let mut buf = encode(&repr, &data);
            prop_assert_eq!(buf.len(), repr.buffer_len());
            buf.extend_from_slice(&trailing);
            let rec = Record::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(RecordRepr::parse(&rec).unwrap(), repr);
            prop_assert_eq!(rec.data(), &data[..]);
            prop_assert_eq!(rec.total_len(), repr.buffer_len());
        }

        #[test]
        fn any_flipped_bit_is_caught(seq: u64, id: [u8; 32],
                                     data in proptest::collection::vec(any::<u8>(), 1..512),
                                     pos: prop::sample::Index, bit in 0u8..8) {
            let repr = RecordRepr { seq, id: ChunkId(id), len: data.len() as u32, prev: None, peer: Some(3) };
            let mut buf = encode(&repr, &data);
            let i = pos.index(buf.len());
            buf[i] ^= 1 << bit;
            // Either the view refuses it, or the CRC does.
            let ok = Record::new_checked(&buf[..]).and_then(|r| RecordRepr::parse(&r)).is_ok();
            prop_assert!(!ok);
        }

        #[test]
        fn truncation_is_refused(seq: u64, data in proptest::collection::vec(any::<u8>(), 0..512),
                                 cut: prop::sample::Index) {
            let repr = RecordRepr { seq, id: ChunkId([7; 32]), len: data.len() as u32, prev: Some(ChunkId([1; 32])), peer: None };
            let buf = encode(&repr, &data);
            let cut = cut.index(buf.len());
            let err = Record::new_checked(&buf[..cut]).unwrap_err();
            prop_assert!(matches!(err, RecordError::Truncated { .. }), "{:?}", err);
        }

        #[test]
        fn garbage_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(rec) = Record::new_checked(&buf[..]) {
                if let Ok(repr) = RecordRepr::parse(&rec) {
                    prop_assert_eq!(&encode(&repr, rec.data())[..], &buf[..repr.buffer_len()]);
                }
                let _ = (rec.seq(), rec.id(), rec.data().len(), rec.peer(), rec.prev());
            }
        }
    }

    #[test]
    fn layout_is_as_documented() {
        let repr = RecordRepr {
            seq: 0x0102,
            id: ChunkId([0xAA; 32]),
            len: 3,
            prev: Some(ChunkId([0xBB; 32])),
            peer: Some(0x0A0B),
        };
        let buf = encode(&repr, b"xyz");
        assert_eq!(&buf[0..4], b"HWC\x02");
        assert_eq!(&buf[4..8], &3u32.to_le_bytes());
        assert_eq!(&buf[8..16], &0x0102u64.to_le_bytes());
        assert_eq!(&buf[16..48], &[0xAA; 32]);
        assert_eq!(&buf[48..52], &[3, 0, 0, 0]);
        assert_eq!(&buf[52..56], &0x0A0Bu32.to_le_bytes());
        assert_eq!(&buf[56..88], &[0xBB; 32]);
        assert_eq!(&buf[92..], b"xyz");
        let none = RecordRepr {
            prev: None,
            peer: None,
            ..repr
        };
        let buf = encode(&none, b"xyz");
        assert_eq!(&buf[48..88], &[0; 40]);
    }

    #[test]
    fn set_reserved_bits_are_refused() {
        let repr = RecordRepr {
            seq: 1,
            id: ChunkId([1; 32]),
            len: 0,
            prev: None,
            peer: None,
        };
        for (pos, val) in [(48, 4u8), (50, 1), (53, 1), (60, 1)] {
            let mut buf = encode(&repr, b"");
            buf[pos] = val;
            // Re-seal the CRC so only the header check can refuse it.
            let crc = checksum(&buf[..88], b"");
            buf[88..92].copy_from_slice(&crc.to_le_bytes());
            let rec = Record::new_checked(&buf[..]).unwrap();
            assert_eq!(RecordRepr::parse(&rec).unwrap_err(), RecordError::BadHeader);
        }
    }

    #[test]
    fn too_long_is_refused() {
        let mut buf = [0u8; HEADER_LEN];
        buf[0..3].copy_from_slice(&MAGIC);
        buf[3] = VERSION;
        buf[4..8].copy_from_slice(&(MAX_CHUNK_LEN as u32 + 1).to_le_bytes());
        assert_eq!(
            Record::new_checked(&buf[..]).unwrap_err(),
            RecordError::TooLong(MAX_CHUNK_LEN as u32 + 1)
        );
    }
}
