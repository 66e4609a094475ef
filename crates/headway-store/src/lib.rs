//! Headway's persistent chunk store: the history of chunks a WAN optimizer keeps on each appliance
//! so that repeated data crosses the WAN as references (DESIGN.md, "WAN optimizer"; issue 3 §4).
//!
//! # What it owns
//!
//! - **A log of chunks in arrival order.** Every [`Store::put`] appends one record and gets the
//!   next [`Seq`]. The same chunk may be appended again: the log is a history, and
//!   [`Store::run`] answers "the `count` chunks that followed this one" in log order.
//! - **The dedup codec's model** ([`headway_dedup::ChunkStore`], implemented by [`DiskStore`]):
//!   per chunk id a *successor link* (the chunk that followed it in the flow that first linked
//!   it; replaced when its target is evicted) and the small set of *peers* it crossed the link
//!   with. Each record written through [`DiskStore`] carries the chunk's predecessor in its flow
//!   and the peer (record version 2, see [`record`]); [`Store::open`] replays the log in seq order
//!   to rebuild links and peer sets, so dedup keeps working across a restart of both
//!   appliances. Runs of the codec follow successor links, not log order: concurrent flows
//!   interleaving their records do not break them.
//! - **An exclusive lock** on `LOCK` in the directory (`flock`), held while the store is open, so
//!   two stores (two processes, or a second `open` in one process) never append to the same
//!   files.
//! - **Segment files in a ring** (`seg-0000000042.hws` in [`StoreConfig::dir`]), each a plain
//!   sequence of checksummed records (layout in [`record`]). Only the newest segment is appended
//!   to; when it would grow past [`StoreConfig::segment_bytes`] a new one is started. When the
//!   total size passes [`StoreConfig::max_bytes`] the oldest segment is deleted (FIFO eviction)
//!   and its index entries are removed (only those that still point into it: a later copy of the
//!   same chunk survives).
//! - **A RAM index** `ChunkId → (latest Seq, successor, peers)` plus the log of `(Seq, ChunkId, location)` in seq
//!   order, rebuilt at [`Store::open`] from each sealed segment's *summary* (its record
//!   headers in a small file beside it, [`summary`]) and by scanning the newest segment (and
//!   any segment whose summary is missing or does not match it), checking every CRC.
//! - **A memory tier**: a byte-weighted FIFO cache of recent chunks ([`StoreConfig::memory_bytes`])
//!   in front of the disk, filled on `put` and on disk reads. With `dir: None` the store is
//!   memory-only (the "dedup in memory" service class): the log itself lives in RAM, bounded by
//!   `memory_bytes`, FIFO-evicted, and nothing survives a restart.
//!
//! It does not compute chunk ids (the codec does, with keyed BLAKE3), chunk data, compress, or
//! speak to the network. It is not a sans-IO core: it is the one place in the WAN optimizer that
//! does file I/O, and it does it synchronously (see "Blocking" below).
//!
//! # Entry points and call order
//!
//! [`Store::open`] (or [`DiskStore::open`]) once; then any of [`Store::put`], [`Store::get`], [`Store::contains`],
//! [`Store::run`], [`Store::follow`], [`Store::stats`], [`Store::flush`], [`Store::purge`] from
//! any number of threads (`Store` is `Send + Sync`; share it in an `Arc`). Dropping the store makes a best-effort [`Store::flush`].
//! Call `flush` periodically (e.g. once a second from the shell's timer) to bound what a crash
//! can lose; the store has no clock of its own.
//!
//! # Invariants
//!
//! - Seqs in the log strictly increase; a new store continues after the highest seq found on
//!   disk. They are dense except where a corrupt or missing region was dropped at open.
//! - [`Store::get`] and [`Store::run`] never return bytes that did not pass the record's CRC-32C
//!   and whose header does not name the requested id and seq. A mismatch is counted in
//!   [`StoreStats::corrupt_reads`] and answered with `None`.
//! - [`Store::run`] and [`Store::follow`] only return consecutive seqs that are all still
//!   indexed: never chunks of an evicted segment, never across a gap.
//! - Disk usage stays ≤ `max_bytes`, except that the newest segment is never deleted (so with a
//!   single oversized segment the bound is `segment_bytes` plus one record).
//!
//! # Durability
//!
//! Records are written with one positioned write each (`pwrite`) straight to the file, so a
//! record is readable as soon as `put` returns; the records of one
//! [`headway_dedup::ChunkStore::record_many`] call on a [`DiskStore`] go out in one write per
//! segment they land in, and are readable when it returns. Data is synced (`fdatasync`) after
//! every [`StoreConfig::sync_bytes`] appended bytes, on [`Store::flush`] and on drop; each sync
//! covers the segments sealed since the last one (oldest first) and the directory entries of
//! the segments created since, so a roll itself never waits for the disk (it runs inside a
//! `put`, under the writer lock). A crash (kill -9, power loss) can lose only records appended
//! since the last sync; it never makes the store return wrong data:
//! at open each segment without a valid summary (the newest one always) is scanned and its
//! valid prefix is the records up to the first one that is truncated, fails its CRC, has a bad magic or does not increase the seq. In the newest
//! segment the rest is truncated away (the usual torn tail); in an older segment the rest is left
//! on disk but ignored (counted in [`StoreStats::torn_tails`] / [`StoreStats::discarded_bytes`]).
//! A corrupt record in the middle of a segment therefore costs the records after it in that
//! segment, which is safe: the codec fetches what the store cannot return.
//!
//! A sealed segment's summary is written by the flush that follows the sync of its data, so it
//! never describes records a crash could still lose; it names the segment's number and length,
//! and one that does not match the file (or fails its own CRC) is ignored; an open that scans a
//! sealed segment whole writes its summary (so a store from before summaries gets them). Opening
//! a full 2 GiB store of 1.4 KiB chunks (`examples/open_time.rs`, medians of 3, 2-core VM) took
//! 0.80 s from summaries against 1.63 s by scanning with the files in the page cache, and 1.08 s
//! against 3.10 s from a cold cache. Records indexed from a summary are verified when they are
//! read, like every record: a corrupt one in the middle of a summarized segment costs that
//! record only.
//!
//! # Blocking
//!
//! `put` does one `pwrite` (plus an occasional size-based `fdatasync`, file creation, or deletion
//! of an evicted segment unless [`StoreConfig::deferred_removal`] leaves that to the flush), and so
//! does a `record_many` of a frame's chunks (the index stays write-locked for it), `get`
//! and `run` one `pread` per chunk not in the memory tier. These are short on a local disk; from
//! a tokio runtime, call them directly for small chunks or through `spawn_blocking` for long
//! runs. Locks are never held across an `.await` because there are none.
//!
//! # Memory cost
//!
//! About 160 bytes of RAM per record in the index (id, seq and location in the log; id, seq,
//! successor id and an inline set of four peer ids in the hash map), so a disk of 1 KiB chunks
//! costs roughly 15 % of its size in RAM. The newest segment's summary is built in RAM as it
//! fills (88 bytes per record: 5 MiB for a 64 MiB segment of 1 KiB chunks), and a sealed one is
//! held until the next flush writes it.
#![forbid(unsafe_code)]

use std::path::PathBuf;

mod cache;
mod disk_store;
pub mod record;
mod store;
pub mod summary;

pub use disk_store::DiskStore;
pub use store::Store;

/// The id of a chunk: its keyed BLAKE3 fingerprint, computed by the dedup codec (the codec's
/// own type, re-exported so both crates name chunks the same way).
pub use headway_dedup::ChunkId;

/// The position of a record in the store's log (arrival order, strictly increasing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Seq(pub u64);

/// Runtime configuration of a [`Store`], validated by [`Store::open`].
///
/// The file schema (with typed units such as `"64GiB"`) belongs to headway-config; it converts
/// into this type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Directory of the segment files (created if missing), or `None` for a memory-only store.
    pub dir: Option<PathBuf>,
    /// Bound on the total size of the segment files, in bytes; at least `2 × segment_bytes`.
    /// The sealed segments' summaries are kept beside them and not counted: 88 bytes per record
    /// (8 % more for 1 KiB chunks).
    /// Ignored for a memory-only store.
    pub max_bytes: u64,
    /// Bound on the RAM tier, in bytes of chunk data. For a disk store this is the cache in front
    /// of the disk (0 disables it); for a memory-only store it bounds the whole store and must
    /// be > 0.
    pub memory_bytes: u64,
    /// Size at which a segment is sealed and the next one started, in bytes
    /// (4 KiB ..= 1 GiB). Eviction frees one segment at a time.
    pub segment_bytes: u64,
    /// Sync after this many appended bytes (the newest segment's data and every segment sealed
    /// since the last sync); `None` syncs only on [`Store::flush`] and on drop.
    pub sync_bytes: Option<u64>,
    /// Leave the deletion of evicted segment files to [`Store::flush`] instead of doing it
    /// inside the `put` that evicts them, under the writer lock: unlinking a 64 MiB segment took
    /// ~30 ms on a VM's ext4 disk, during which every other `put` waited. The files are out of
    /// the index at once (never read again); until the next flush they may hold the disk over
    /// `max_bytes`. For a store that is flushed regularly (the appliance: every second).
    pub deferred_removal: bool,
}

impl StoreConfig {
    /// Default segment size: 64 MiB.
    pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
    /// Default RAM tier in front of a disk store: 64 MiB.
    pub const DEFAULT_MEMORY_BYTES: u64 = 64 << 20;
    /// Default data-sync interval: every 8 MiB appended.
    pub const DEFAULT_SYNC_BYTES: u64 = 8 << 20;

    /// A disk store in `dir` bounded by `max_bytes`, with default segment size (shrunk to
    /// `max_bytes / 4` for small stores), memory tier and sync interval.
    pub fn disk(dir: impl Into<PathBuf>, max_bytes: u64) -> Self {
        StoreConfig {
            dir: Some(dir.into()),
            max_bytes,
            memory_bytes: Self::DEFAULT_MEMORY_BYTES,
            segment_bytes: Self::DEFAULT_SEGMENT_BYTES
                .min(max_bytes / 4)
                .max(MIN_SEGMENT_BYTES),
            sync_bytes: Some(Self::DEFAULT_SYNC_BYTES),
            deferred_removal: false,
        }
    }

    /// A memory-only store holding at most `memory_bytes` of chunk data.
    pub fn memory(memory_bytes: u64) -> Self {
        StoreConfig {
            dir: None,
            max_bytes: 0,
            memory_bytes,
            segment_bytes: Self::DEFAULT_SEGMENT_BYTES,
            sync_bytes: None,
            deferred_removal: false,
        }
    }
}

/// Smallest accepted [`StoreConfig::segment_bytes`].
pub const MIN_SEGMENT_BYTES: u64 = 4 << 10;
/// Largest accepted [`StoreConfig::segment_bytes`] (record offsets are 32-bit).
pub const MAX_SEGMENT_BYTES: u64 = 1 << 30;

/// Counters and sizes of a [`Store`], from [`Store::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// Bytes in segment files (0 for a memory-only store).
    pub disk_bytes: u64,
    /// Bytes of chunk data held in RAM (the memory tier, or the whole memory-only store).
    pub memory_bytes: u64,
    /// Distinct chunk ids indexed.
    pub chunks: u64,
    /// Records in the log (≥ `chunks`: a chunk may appear several times).
    pub records: u64,
    /// Segment files (0 for a memory-only store).
    pub segments: u64,
    /// `get`/`run` calls answered with data.
    pub hits: u64,
    /// `get`/`run` calls answered with `None` (unknown id, evicted, corrupt or short run).
    pub misses: u64,
    /// Chunks served from the RAM tier instead of the disk.
    pub memory_hits: u64,
    /// Records removed by FIFO eviction.
    pub evicted_records: u64,
    /// Segment files deleted by FIFO eviction.
    pub evicted_segments: u64,
    /// Segments found at open with an invalid tail (torn write or corruption), since open.
    pub torn_tails: u64,
    /// Bytes of those tails, truncated (newest segment) or ignored (older segments).
    pub discarded_bytes: u64,
    /// Reads that failed the CRC or header check, or could not be read.
    pub corrupt_reads: u64,
    /// Data syncs performed (one per segment file synced).
    pub syncs: u64,
    /// Sealed segments indexed at open from their summary instead of a scan of their data.
    pub summarized_segments: u64,
}

/// Errors of [`Store::open`], [`Store::put`] and [`Store::flush`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file operation failed.
    #[error("{op} {}", path.display())]
    Io {
        /// What was being done (`"open segment"`, `"append"`, `"sync"`, …).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The chunk is larger than [`record::MAX_CHUNK_LEN`].
    #[error("chunk of {len} bytes exceeds the maximum of {max}")]
    ChunkTooLarge {
        /// The chunk's length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// Another [`Store`] (in this or another process) has the directory open.
    #[error("store directory {} is in use by another store", path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// The configuration is inconsistent; the message says what to change.
    #[error("invalid store config: {0}")]
    InvalidConfig(&'static str),
}
