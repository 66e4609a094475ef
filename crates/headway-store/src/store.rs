//! The [`Store`]: segment ring, RAM index, memory tier and their locking.
//!
//! Owns the files in the store's directory (nothing else may write there) and the index. Three
//! locks, always taken in this order and never across file I/O that can take long except where
//! noted:
//!
//! 1. `writer` (mutex): the append position, the next seq and the newest segment. `put` holds it
//!    for its whole duration, so records reach the file and the index in seq order.
//! 2. `index` (rwlock): hash map, log and segment list. Readers take it shared just long enough to
//!    copy a location out; `put` takes it exclusively after its write to publish the record and
//!    evict. Reads of the file happen after it is released: a segment evicted meanwhile is
//!    unlinked but stays readable through the open handle, and its bytes are still the verified
//!    record that was asked for.
//! 3. `cache` (mutex): the memory tier.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use hashbrown::HashMap;
use headway_dedup::{PeerId, Probe};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use parking_lot::{Mutex, RwLock};

use crate::cache::Cache;
use crate::record::{Record, RecordError, RecordRepr, HEADER_LEN, MAX_CHUNK_LEN};
use crate::summary::{self, Builder as SummaryBuilder, Entry};
use crate::{
    ChunkId, Seq, StoreConfig, StoreError, StoreStats, MAX_SEGMENT_BYTES, MIN_SEGMENT_BYTES,
};

/// A persistent (or memory-only) chunk store. See the crate documentation for the model,
/// durability and locking.
#[derive(Debug)]
pub struct Store {
    cfg: StoreConfig,
    writer: Mutex<Writer>,
    index: RwLock<Index>,
    cache: Mutex<Cache>,
    counters: Counters,
    /// Exclusive lock on the directory (disk store), released when the store is dropped.
    _lock: Option<Flock<File>>,
}

/// One segment file, shared by the index slots that point into it.
#[derive(Debug)]
struct Segment {
    number: u32,
    path: PathBuf,
    file: File,
}

/// Where a record's data lives.
#[derive(Debug, Clone)]
enum Loc {
    /// In a segment file: the record starts at `off` and carries `len` data bytes.
    Disk {
        seg: Arc<Segment>,
        off: u32,
        len: u32,
    },
    /// In RAM (memory-only store).
    Mem(Bytes),
}

impl Loc {
    /// Data length of the record.
    fn len(&self) -> usize {
        match self {
            Loc::Disk { len, .. } => *len as usize,
            Loc::Mem(data) => data.len(),
        }
    }
}

/// One record of the log.
#[derive(Debug)]
struct Slot {
    seq: u64,
    id: ChunkId,
    loc: Loc,
}

#[derive(Debug)]
struct SegInfo {
    seg: Arc<Segment>,
    /// Bytes the file takes on disk (including any ignored invalid tail).
    len: u64,
}

/// What the index knows about one chunk id.
#[derive(Debug, Clone, Copy)]
struct IdEntry {
    /// Latest seq of the id in the log.
    seq: u64,
    /// Successor link: the chunk that followed this one in the flow that first linked it
    /// (see [`headway_dedup::ChunkStore`]).
    next: Option<ChunkId>,
    /// Peers the chunk crossed the link with.
    peers: PeerSet,
}

/// A small inline set of peer ids (at most [`PeerSet::CAP`]; further peers are not
/// remembered, so the codec sends them literals instead of references: correct, less saving).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PeerSet {
    ids: [u32; PeerSet::CAP],
    len: u8,
}

impl PeerSet {
    /// Most peers remembered per chunk.
    pub(crate) const CAP: usize = 4;

    fn contains(&self, p: PeerId) -> bool {
        self.ids[..self.len as usize].contains(&p.0)
    }

    /// Adds `p`; returns whether it was already present.
    fn insert(&mut self, p: PeerId) -> bool {
        if self.contains(p) {
            return true;
        }
        if (self.len as usize) < Self::CAP {
            self.ids[self.len as usize] = p.0;
            self.len += 1;
        }
        false
    }
}

#[derive(Debug, Default)]
struct Index {
    /// Every indexed id: latest seq, successor link and peers.
    map: HashMap<ChunkId, IdEntry>,
    /// Every indexed record, seqs strictly increasing.
    log: VecDeque<Slot>,
    /// Segment files, oldest first; the last one is the newest (appended to).
    segments: VecDeque<SegInfo>,
    disk_bytes: u64,
    /// Data bytes held in `log` (memory-only store).
    mem_bytes: u64,
}

#[derive(Debug, Default)]
struct Writer {
    /// Newest segment (disk store only).
    active: Option<Arc<Segment>>,
    /// Append offset in `active`.
    len: u64,
    /// Bytes appended since the last data sync (to `active` and the segments in `sealed`).
    unsynced: u64,
    /// Sealed segments with data not yet synced: the next sync (size-based or
    /// [`Store::flush`]) syncs them, not the roll that sealed them.
    sealed: Vec<Arc<Segment>>,
    /// A segment file was created since the directory was last synced.
    dir_unsynced: bool,
    /// Evicted segments whose files [`Store::flush`] deletes
    /// ([`StoreConfig::deferred_removal`]).
    doomed: Vec<Arc<Segment>>,
    next_seq: u64,
    next_number: u32,
    /// Reused record buffer, so an append costs no allocation.
    buf: Vec<u8>,
    /// The summary of `active` so far (disk store).
    summary: Option<SummaryBuilder>,
    /// Summaries of sealed segments, written by the next [`Store::flush`] once their segment
    /// is synced (at most [`MAX_QUEUED_SUMMARIES`]: a store nobody flushes drops the oldest,
    /// whose segments are then scanned at open).
    summaries: VecDeque<(Arc<Segment>, Vec<u8>)>,
}

/// Most sealed segments' summaries held in RAM until a flush writes them.
const MAX_QUEUED_SUMMARIES: usize = 8;

/// A segment's summary keeps one entry per this many segment bytes at most: a segment of
/// smaller records (on average) gets no summary and is scanned at open. Records of 1 KiB
/// chunks are 1,116 bytes; the bound keeps a 64 MiB segment's summary under 12 MiB.
const MIN_BYTES_PER_SUMMARY_ENTRY: u64 = 512;

/// What a sync must cover besides the active segment: taken from the [`Writer`] under its
/// lock, synced outside it by [`Store::flush`], and put back if the sync fails.
#[derive(Debug, Default)]
struct Pending {
    sealed: Vec<Arc<Segment>>,
    dir: bool,
}

impl Pending {
    fn take(w: &mut Writer) -> Self {
        Pending {
            sealed: std::mem::take(&mut w.sealed),
            dir: std::mem::take(&mut w.dir_unsynced),
        }
    }

    fn is_empty(&self) -> bool {
        self.sealed.is_empty() && !self.dir
    }

    /// Queues what this failed to sync again, ahead of what was sealed meanwhile.
    fn put_back(self, w: &mut Writer) {
        let later = std::mem::replace(&mut w.sealed, self.sealed);
        w.sealed.extend(later);
        w.dir_unsynced |= self.dir;
    }
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    memory_hits: AtomicU64,
    evicted_records: AtomicU64,
    evicted_segments: AtomicU64,
    torn_tails: AtomicU64,
    discarded_bytes: AtomicU64,
    corrupt_reads: AtomicU64,
    syncs: AtomicU64,
    summarized_segments: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl Store {
    /// Opens (or creates) a store. For a disk store this reads every sealed segment's summary
    /// (scanning the segment instead, checking every record's CRC, where it has none that
    /// matches), scans the newest segment, truncates a torn tail of the newest segment and
    /// rebuilds the index; it then evicts old segments if the directory is over `max_bytes`.
    pub fn open(cfg: StoreConfig) -> Result<Store, StoreError> {
        validate(&cfg)?;
        let lock = cfg.dir.as_deref().map(lock_dir).transpose()?;
        let cache_bytes = if cfg.dir.is_some() {
            cfg.memory_bytes
        } else {
            0
        };
        let store = Store {
            writer: Mutex::new(Writer::default()),
            index: RwLock::new(Index::default()),
            cache: Mutex::new(Cache::new(cache_bytes)),
            counters: Counters::default(),
            _lock: lock,
            cfg,
        };
        if let Some(dir) = store.cfg.dir.clone() {
            store.recover(&dir)?;
        }
        Ok(store)
    }

    /// Appends a chunk to the log and returns its seq. `data` must be the chunk whose id is `id`
    /// (the store does not recompute ids). A chunk already present is appended again: the log is
    /// the arrival history, and `get` then returns the newest copy.
    ///
    /// Blocks for one positioned write, and occasionally a data sync, a segment creation or the
    /// deletion of evicted segments.
    ///
    /// # Errors
    ///
    /// [`StoreError::ChunkTooLarge`]; [`StoreError::Io`] if the append or starting a new segment
    /// failed (nothing was stored), or if the size-based sync failed (the chunk *was* stored and
    /// is readable, but may not survive a crash).
    pub fn put(&self, id: ChunkId, data: &[u8]) -> Result<Seq, StoreError> {
        let mut w = self.writer.lock();
        self.append(&mut w, id, data, None, None)
    }

    /// Records `id` for the dedup codec (see [`headway_dedup::ChunkStore::record`]): under the
    /// writer lock, so the probe, the successor link and the append are one atomic step. Appends
    /// a record (carrying `prev` and `peer`) only if `id` is not indexed; marking a further peer
    /// or re-linking `prev` to an existing chunk changes RAM only (lost on restart, which the
    /// codec tolerates: the peer gets a literal, the run is cut).
    pub(crate) fn record_linked(
        &self,
        peer: PeerId,
        prev: Option<&ChunkId>,
        id: &ChunkId,
        data: &[u8],
    ) -> Result<Probe, StoreError> {
        let mut w = self.writer.lock();
        let probe = {
            let mut idx = self.index.write();
            let new = !idx.map.contains_key(id);
            let probe = idx.probe(peer, prev, id);
            if !new {
                return Ok(probe);
            }
            probe
        };
        self.append(&mut w, *id, data, prev.copied(), Some(peer))?;
        Ok(probe)
    }

    /// [`Store::record_linked`] for consecutive chunks of one flow (the first after `prev`),
    /// pushing each chunk's probe onto `probes`: the same probes, links, peers and records as
    /// one call per chunk in order, but the new records of a disk store go out in one
    /// positioned write per segment they land in, not one each. (Per record, the write path
    /// cost more than the record's bytes: system call, and the file system zeroing the rest
    /// of each page it started; see the `record_1k` bench.)
    ///
    /// The index is write-locked from the first probe until the write is done, so no reader
    /// ever sees a record that is not yet in its file.
    ///
    /// # Errors
    ///
    /// As [`Store::record_linked`]. When a write fails, the chunks of that write are not
    /// indexed, and they and every later chunk of `chunks` get the default probe (absent).
    pub(crate) fn record_linked_many(
        &self,
        peer: PeerId,
        prev: Option<&ChunkId>,
        chunks: &[(ChunkId, Bytes)],
        probes: &mut Vec<Probe>,
    ) -> Result<(), StoreError> {
        let Some(dir) = self.cfg.dir.clone() else {
            // Memory only: nothing to batch. A chunk refused (too large) is absent, as with
            // `DiskStore::record`, and the rest go on.
            let mut prev = prev.copied();
            let mut failed = None;
            for (id, data) in chunks {
                let probe = self.record_linked(peer, prev.as_ref(), id, data);
                probes.push(probe.unwrap_or_else(|e| {
                    failed.get_or_insert(e);
                    Probe::default()
                }));
                prev = Some(*id);
            }
            return failed.map_or(Ok(()), Err);
        };
        let mut w = self.writer.lock();
        let mut prev = prev.copied();
        let mut rest = chunks;
        let mut failed = None;
        while let Some((_, first)) = rest.first() {
            let fits = w.len + (HEADER_LEN + first.len()) as u64 <= self.cfg.segment_bytes;
            if w.len > 0 && !fits && first.len() <= MAX_CHUNK_LEN {
                if let Err(e) = self.roll(&dir, &mut w) {
                    failed = Some(e);
                    break;
                }
            }
            let (taken, result) = self.append_linked(&mut w, peer, &mut prev, rest, probes);
            rest = &rest[taken..];
            if let Err(e) = result {
                let stored = taken > 0;
                failed.get_or_insert(e);
                if !stored {
                    break;
                }
                // Stored, only the sync failed: go on, and report it at the end.
            }
        }
        probes.resize(probes.len() + rest.len(), Probe::default());
        failed.map_or(Ok(()), Err)
    }

    /// One write of [`Store::record_linked_many`]: probes and stages the leading chunks of
    /// `chunks` whose new records fit the active segment, writes their records at once and
    /// publishes them. Returns how many chunks it took (their probes are pushed) and the
    /// error, if any: with none taken, nothing was stored (a failed write, or an oversized
    /// first chunk); with some, they were stored and only the size-based sync failed.
    fn append_linked(
        &self,
        w: &mut Writer,
        peer: PeerId,
        prev: &mut Option<ChunkId>,
        chunks: &[(ChunkId, Bytes)],
        probes: &mut Vec<Probe>,
    ) -> (usize, Result<(), StoreError>) {
        let Some(seg) = w.active.clone() else {
            // `recover` always leaves an active segment and `roll` only replaces it.
            unreachable!("disk store without an active segment")
        };
        let mut buf = std::mem::take(&mut w.buf);
        buf.clear();
        let first_seq = w.next_seq;
        let summarized = w.summary.as_ref().map_or(0, SummaryBuilder::len);
        let prev_before = *prev;
        // Positions in `chunks` of the chunks that got a record in this write.
        let mut staged: Vec<usize> = Vec::new();
        let mut taken = 0usize;
        let mut idx = self.index.write();
        for (id, data) in chunks {
            let new = !idx.map.contains_key(id);
            if new {
                let end = w.len + (buf.len() + HEADER_LEN + data.len()) as u64;
                let room = end <= self.cfg.segment_bytes || w.len + buf.len() as u64 == 0;
                if data.len() > MAX_CHUNK_LEN || !room {
                    break;
                }
            }
            let probe = idx.probe(peer, prev.as_ref(), id);
            if new {
                let repr = RecordRepr {
                    seq: w.next_seq,
                    id: *id,
                    len: data.len() as u32,
                    prev: *prev,
                    peer: Some(peer.0),
                };
                let off = w.len + buf.len() as u64;
                let at = buf.len();
                buf.resize(at + repr.buffer_len(), 0);
                repr.emit(&mut buf[at..], data);
                if let Some(b) = &mut w.summary {
                    b.push(&Entry {
                        seq: repr.seq,
                        off: off as u32,
                        len: repr.len,
                        id: *id,
                        prev: repr.prev,
                        peer: repr.peer,
                    });
                }
                let loc = Loc::Disk {
                    seg: seg.clone(),
                    off: off as u32,
                    len: repr.len,
                };
                let slot = Slot {
                    seq: w.next_seq,
                    id: *id,
                    loc,
                };
                idx.push(slot, *prev, Some(peer));
                w.next_seq += 1;
                staged.push(taken);
            }
            probes.push(probe);
            *prev = Some(*id);
            taken += 1;
        }
        if taken == 0 {
            // Only an oversized chunk stops the first one (the caller rolled the segment
            // for it otherwise): refuse it as `append` does.
            drop(idx);
            w.buf = buf;
            let len = chunks.first().map_or(0, |(_, d)| d.len());
            return (
                0,
                Err(StoreError::ChunkTooLarge {
                    len,
                    max: MAX_CHUNK_LEN,
                }),
            );
        }
        let written = if buf.is_empty() {
            Ok(())
        } else {
            seg.file.write_all_at(&buf, w.len)
        };
        if let Err(e) = written {
            // As `append`: nothing torn behind the append position; the staged records leave
            // the index again (they are the newest slots of the log; a link made to one of
            // them is stale once it is gone, as after an eviction).
            let _ = seg.file.set_len(w.len);
            for _ in 0..staged.len() {
                if let Some(slot) = idx.log.pop_back() {
                    if idx.map.get(&slot.id).is_some_and(|e| e.seq == slot.seq) {
                        idx.map.remove(&slot.id);
                    }
                }
            }
            drop(idx);
            w.next_seq = first_seq;
            if let Some(b) = &mut w.summary {
                b.truncate(summarized);
            }
            w.buf = buf;
            probes.truncate(probes.len() - taken);
            *prev = prev_before;
            return (0, Err(io_err("append to", &seg.path)(e)));
        }
        let rec_bytes = buf.len() as u64;
        w.len += rec_bytes;
        w.unsynced += rec_bytes;
        if let Some(last) = idx.segments.back_mut() {
            last.len = w.len;
        }
        idx.disk_bytes += rec_bytes;
        let doomed = idx.evict_disk(self.cfg.max_bytes, &self.counters);
        drop(idx);
        self.discard(w, doomed);
        let synced = match self.cfg.sync_bytes {
            Some(n) if w.unsynced >= n => self.sync(&seg, w),
            _ => Ok(()),
        };
        {
            let mut cache = self.cache.lock();
            for &i in &staged {
                let (id, data) = &chunks[i];
                cache.insert(*id, Bytes::copy_from_slice(data));
            }
        }
        w.buf = buf;
        (taken, synced)
    }

    /// `first` and the chunks reached by successor links (see
    /// [`headway_dedup::ChunkStore::follow`]), each verified; stops before a missing or corrupt
    /// chunk.
    pub(crate) fn follow_links(
        &self,
        first: &ChunkId,
        max_chunks: u32,
        max_bytes: usize,
    ) -> Vec<(ChunkId, Bytes)> {
        let slots = {
            let idx = self.index.read();
            let mut slots = Vec::new();
            let mut bytes = 0usize;
            let mut cur = Some(*first);
            while let Some(id) = cur {
                if slots.len() >= max_chunks as usize || bytes >= max_bytes {
                    break;
                }
                let Some(e) = idx.map.get(&id) else { break };
                let Some(slot) = idx.slot(e.seq) else { break };
                bytes = bytes.saturating_add(slot.loc.len());
                slots.push((slot.seq, id, slot.loc.clone()));
                cur = e.next;
            }
            slots
        };
        let mut out = Vec::with_capacity(slots.len());
        for (seq, id, loc) in slots {
            match self.load(&id, seq, loc) {
                Some(data) => out.push((id, data)),
                None => break,
            }
        }
        out
    }

    /// Appends one record under the writer lock and publishes it in the index (with its
    /// successor link and peer), evicting as needed.
    fn append(
        &self,
        w: &mut Writer,
        id: ChunkId,
        data: &[u8],
        prev: Option<ChunkId>,
        peer: Option<PeerId>,
    ) -> Result<Seq, StoreError> {
        if data.len() > MAX_CHUNK_LEN {
            return Err(StoreError::ChunkTooLarge {
                len: data.len(),
                max: MAX_CHUNK_LEN,
            });
        }
        let seq = w.next_seq;
        let repr = RecordRepr {
            seq,
            id,
            len: data.len() as u32,
            prev,
            peer: peer.map(|p| p.0),
        };
        let Some(dir) = self.cfg.dir.as_deref() else {
            let data = Bytes::copy_from_slice(data);
            w.next_seq += 1;
            let mut idx = self.index.write();
            idx.mem_bytes += data.len() as u64;
            idx.push(
                Slot {
                    seq,
                    id,
                    loc: Loc::Mem(data),
                },
                prev,
                peer,
            );
            let evicted = idx.evict_memory(self.cfg.memory_bytes);
            bump(&self.counters.evicted_records, evicted);
            return Ok(Seq(seq));
        };

        let rec_len = repr.buffer_len() as u64;
        if w.len > 0 && w.len + rec_len > self.cfg.segment_bytes {
            self.roll(dir, w)?;
        }
        let Some(seg) = w.active.clone() else {
            // `recover` always leaves an active segment and `roll` only replaces it.
            unreachable!("disk store without an active segment")
        };
        let mut buf = std::mem::take(&mut w.buf);
        buf.clear();
        buf.resize(repr.buffer_len(), 0);
        repr.emit(&mut buf, data);
        let off = w.len;
        let written = seg.file.write_all_at(&buf, off);
        w.buf = buf;
        if let Err(e) = written {
            // Do not leave a partial record behind the append position: the next record would be
            // written after it, and at open the torn bytes would end the valid prefix there.
            let _ = seg.file.set_len(off);
            return Err(io_err("append to", &seg.path)(e));
        }
        if let Some(b) = &mut w.summary {
            b.push(&Entry {
                seq,
                off: off as u32,
                len: repr.len,
                id,
                prev,
                peer: repr.peer,
            });
        }
        w.len += rec_len;
        w.next_seq += 1;
        w.unsynced += rec_len;

        let doomed = {
            let mut idx = self.index.write();
            if let Some(last) = idx.segments.back_mut() {
                last.len = w.len;
            }
            idx.disk_bytes += rec_len;
            idx.push(
                Slot {
                    seq,
                    id,
                    loc: Loc::Disk {
                        seg: seg.clone(),
                        off: off as u32,
                        len: repr.len,
                    },
                },
                prev,
                peer,
            );
            idx.evict_disk(self.cfg.max_bytes, &self.counters)
        };
        self.discard(w, doomed);
        // The record is published before the size-based sync: if the sync fails the caller gets
        // the error, but the store stays consistent with its file (the chunk is there).
        let synced = match self.cfg.sync_bytes {
            Some(n) if w.unsynced >= n => self.sync(&seg, w),
            _ => Ok(()),
        };
        self.cache.lock().insert(id, Bytes::copy_from_slice(data));
        synced.map(|()| Seq(seq))
    }

    /// The newest copy of chunk `id`, verified (CRC, id and seq in the record header), or `None`
    /// if it is unknown, evicted or fails verification (counted in
    /// [`StoreStats::corrupt_reads`]). Blocks for one positioned read on a memory-tier miss.
    pub fn get(&self, id: &ChunkId) -> Option<Bytes> {
        let found = {
            let idx = self.index.read();
            idx.map
                .get(id)
                .and_then(|e| idx.slot(e.seq))
                .map(|s| (s.seq, s.loc.clone()))
        };
        let data = found.and_then(|(seq, loc)| self.load(id, seq, loc));
        self.count(data.is_some());
        data
    }

    /// Whether chunk `id` is indexed (without reading or verifying it).
    pub fn contains(&self, id: &ChunkId) -> bool {
        self.index.read().map.contains_key(id)
    }

    /// The `count` records that follow the newest copy of `first` in log order, starting with
    /// `first` itself, each verified. `None` if `count` is 0, if `first` is unknown, if fewer than
    /// `count` records follow it, if the seqs are not consecutive (a region was lost), or if any
    /// record fails verification.
    pub fn run(&self, first: &ChunkId, count: u32) -> Option<Vec<(ChunkId, Bytes)>> {
        let out = (count > 0)
            .then(|| self.follow(first, count, usize::MAX))
            .filter(|v| v.len() == count as usize);
        self.count(out.is_some());
        out
    }

    /// Like [`Store::run`], but as long as possible within limits: `first` (newest copy) and the
    /// records that follow it in log order, at most `max_chunks`, stopping after the chunk that
    /// brings the data total to `max_bytes` or more, before a gap in the seqs, and before a
    /// record that fails verification. Empty if `first` is unknown or `max_chunks` is 0.
    ///
    /// This is what an encoder uses to see how far the history it holds matches a flow; it
    /// does not count as a hit or miss.
    pub fn follow(
        &self,
        first: &ChunkId,
        max_chunks: u32,
        max_bytes: usize,
    ) -> Vec<(ChunkId, Bytes)> {
        let slots = self.follow_slots(first, max_chunks, max_bytes);
        let mut out = Vec::with_capacity(slots.len());
        for (seq, id, loc) in slots {
            match self.load(&id, seq, loc) {
                Some(data) => out.push((id, data)),
                None => break,
            }
        }
        out
    }

    /// Drops every chunk (the admin "purge the cache" operation, or a wiped appliance): deletes
    /// every segment file, empties the index and the memory tier, and starts a new segment.
    /// Seqs continue from where they were. Readers that already copied a location out may still
    /// complete their read (the unlinked file stays readable until they finish).
    pub fn purge(&self) -> Result<(), StoreError> {
        let mut w = self.writer.lock();
        let doomed: Vec<_> = {
            let mut idx = self.index.write();
            let evicted = idx.log.len() as u64;
            idx.map.clear();
            idx.log.clear();
            idx.mem_bytes = 0;
            idx.disk_bytes = 0;
            bump(&self.counters.evicted_records, evicted);
            idx.segments.drain(..).map(|info| info.seg).collect()
        };
        bump(&self.counters.evicted_segments, doomed.len() as u64);
        self.cache.lock().clear();
        remove_segments(&doomed);
        w.active = None;
        w.summary = None;
        w.summaries.clear();
        w.sealed.clear();
        w.len = 0;
        w.unsynced = 0;
        if let Some(dir) = self.cfg.dir.as_deref() {
            self.roll(dir, &mut w)?;
        }
        Ok(())
    }

    /// Sizes and counters.
    pub fn stats(&self) -> StoreStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let idx = self.index.read();
        StoreStats {
            disk_bytes: idx.disk_bytes,
            memory_bytes: idx.mem_bytes + self.cache.lock().bytes(),
            chunks: idx.map.len() as u64,
            records: idx.log.len() as u64,
            segments: idx.segments.len() as u64,
            hits: get(&c.hits),
            misses: get(&c.misses),
            memory_hits: get(&c.memory_hits),
            evicted_records: get(&c.evicted_records),
            evicted_segments: get(&c.evicted_segments),
            torn_tails: get(&c.torn_tails),
            discarded_bytes: get(&c.discarded_bytes),
            corrupt_reads: get(&c.corrupt_reads),
            syncs: get(&c.syncs),
            summarized_segments: get(&c.summarized_segments),
        }
    }

    /// Syncs to disk the segments sealed since the last sync, the newest segment's data and the
    /// directory entries of new segments: every record `put` before this call survives a crash
    /// after it returns. Deletes the files of segments evicted meanwhile
    /// ([`StoreConfig::deferred_removal`]), and then writes the summaries of the segments
    /// sealed since the last flush ([`crate::summary`]), so the next open reads those instead of
    /// scanning the segments. A no-op for a memory-only store.
    ///
    /// The sync runs without the writer lock, so appends go on meanwhile (a sync can take as
    /// long as the disk needs for everything written since the last one: held under the lock,
    /// it stopped every flow's `record` for that long).
    pub fn flush(&self) -> Result<(), StoreError> {
        let (pending, active, unsynced, summaries) = {
            let mut w = self.writer.lock();
            let doomed = std::mem::take(&mut w.doomed);
            if !doomed.is_empty() {
                // Outside the lock: a roll meanwhile could only reuse one of these numbers after
                // they wrap, and `remove_segments` deletes only the file each segment opened.
                drop(w);
                remove_segments(&doomed);
                w = self.writer.lock();
            }
            let pending = Pending::take(&mut w);
            let active = match w.active.clone() {
                Some(seg) if w.unsynced > 0 => Some(seg),
                _ => None,
            };
            let summaries = std::mem::take(&mut w.summaries);
            if pending.is_empty() && active.is_none() && summaries.is_empty() {
                return Ok(());
            }
            let unsynced = std::mem::take(&mut w.unsynced);
            (pending, active, unsynced, summaries)
        };
        // Records appended meanwhile are counted for the next sync; a roll meanwhile queues
        // `active` as sealed (with what was appended since), so it is synced again then.
        if let Err(e) = self.sync_pending(&pending, active.as_deref()) {
            let mut w = self.writer.lock();
            pending.put_back(&mut w);
            for s in summaries.into_iter().rev() {
                w.summaries.push_front(s);
            }
            w.summaries.truncate(MAX_QUEUED_SUMMARIES);
            match (&active, &w.active) {
                (Some(a), Some(now)) if Arc::ptr_eq(a, now) => w.unsynced += unsynced,
                (Some(a), _) if !w.sealed.iter().any(|s| Arc::ptr_eq(s, a)) => {
                    w.sealed.push(a.clone());
                }
                _ => {}
            }
            return Err(e);
        }
        self.write_summaries(summaries);
        Ok(())
    }

    /// Writes the summaries of sealed segments (all synced by now) beside them, skipping
    /// segments evicted meanwhile. Best effort: a summary that fails to be written, or is torn
    /// by a crash, only means its segment is scanned at open. Not synced for the same reason.
    fn write_summaries(&self, summaries: VecDeque<(Arc<Segment>, Vec<u8>)>) {
        for (seg, bytes) in summaries {
            let indexed = self
                .index
                .read()
                .segments
                .iter()
                .any(|i| Arc::ptr_eq(&i.seg, &seg));
            if indexed {
                let _ = fs::write(summary_path(&seg.path), bytes);
            }
        }
    }

    /// The builder of a segment's summary, holding `records` so far.
    fn summary_builder(&self, records: &[Entry]) -> SummaryBuilder {
        let max = self.cfg.segment_bytes / MIN_BYTES_PER_SUMMARY_ENTRY;
        let mut b = SummaryBuilder::new(usize::try_from(max).unwrap_or(usize::MAX));
        records.iter().for_each(|e| b.push(e));
        b
    }

    fn count(&self, hit: bool) {
        bump(
            if hit {
                &self.counters.hits
            } else {
                &self.counters.misses
            },
            1,
        );
    }

    fn follow_slots(
        &self,
        first: &ChunkId,
        max_chunks: u32,
        max_bytes: usize,
    ) -> Vec<(u64, ChunkId, Loc)> {
        let idx = self.index.read();
        let Some(pos) = idx.map.get(first).and_then(|e| idx.position(e.seq)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for slot in idx.log.range(pos..) {
            if out.len() >= max_chunks as usize || bytes >= max_bytes {
                break;
            }
            // Seqs strictly increase; a jump means a region was lost at open.
            if out.last().is_some_and(|&(prev, _, _)| slot.seq != prev + 1) {
                break;
            }
            bytes = bytes.saturating_add(slot.loc.len());
            out.push((slot.seq, slot.id, slot.loc.clone()));
        }
        out
    }

    /// The verified data of record `seq` (chunk `id`) at `loc`, from the memory tier if cached.
    fn load(&self, id: &ChunkId, seq: u64, loc: Loc) -> Option<Bytes> {
        let (seg, off, len) = match loc {
            Loc::Mem(data) => return Some(data),
            Loc::Disk { seg, off, len } => (seg, off, len),
        };
        if let Some(data) = self.cache.lock().get(id) {
            bump(&self.counters.memory_hits, 1);
            return Some(data);
        }
        let mut buf = vec![0u8; HEADER_LEN + len as usize];
        let verified = seg
            .file
            .read_exact_at(&mut buf, u64::from(off))
            .ok()
            .and_then(|()| {
                let rec = Record::new_checked(&buf[..]).ok()?;
                let repr = RecordRepr::parse(&rec).ok()?;
                (repr.seq == seq && repr.id == *id && repr.len == len).then_some(())
            });
        if verified.is_none() {
            bump(&self.counters.corrupt_reads, 1);
            return None;
        }
        let data = Bytes::from(buf).slice(HEADER_LEN..);
        self.cache.lock().insert(*id, data.clone());
        Some(data)
    }

    /// Deletes the files of evicted segments now, or queues them for [`Store::flush`] with
    /// [`StoreConfig::deferred_removal`]. Called under the writer lock, so no new segment can
    /// take the number of one being deleted (a roll deletes a queued file of its number first).
    fn discard(&self, w: &mut Writer, doomed: Vec<Arc<Segment>>) {
        if self.cfg.deferred_removal {
            w.doomed.extend(doomed);
        } else {
            remove_segments(&doomed);
        }
    }

    fn sync(&self, seg: &Segment, w: &mut Writer) -> Result<(), StoreError> {
        let pending = Pending::take(w);
        if let Err(e) = self.sync_pending(&pending, Some(seg)) {
            pending.put_back(w);
            return Err(e);
        }
        w.unsynced = 0;
        Ok(())
    }

    /// Syncs the sealed segments and the directory entry `pending` names, then `active`'s
    /// data; every segment synced is counted.
    fn sync_pending(&self, pending: &Pending, active: Option<&Segment>) -> Result<(), StoreError> {
        for seg in pending.sealed.iter().map(|s| &**s).chain(active) {
            seg.file.sync_data().map_err(io_err("sync", &seg.path))?;
            bump(&self.counters.syncs, 1);
        }
        if pending.dir {
            if let Some(dir) = self.cfg.dir.as_deref() {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io_err("sync directory", dir))?;
            }
        }
        Ok(())
    }

    /// Seals the newest segment and starts the next one. Neither the sealed segment's data nor
    /// the new directory entry is synced here but by the next sync (see the crate doc,
    /// "Durability"): the roll runs inside a `record`, under the writer lock, and an
    /// `fdatasync` of a segment's last second of data held every flow's `record` for 8–14 ms
    /// per roll on a VM's disk (longer on a slow one).
    fn roll(&self, dir: &Path, w: &mut Writer) -> Result<(), StoreError> {
        if let Some(seg) = w.active.take() {
            if let Some(bytes) = w.summary.take().and_then(|b| b.finish(seg.number, w.len)) {
                if w.summaries.len() >= MAX_QUEUED_SUMMARIES {
                    w.summaries.pop_front();
                }
                w.summaries.push_back((seg.clone(), bytes));
            }
            if w.unsynced > 0 {
                w.sealed.push(seg);
            }
        }
        if let Some(i) = w.doomed.iter().position(|d| d.number == w.next_number) {
            remove_segments(&[w.doomed.swap_remove(i)]);
        }
        let seg = create_segment(dir, w.next_number)?;
        w.dir_unsynced = true;
        w.next_number = w.next_number.wrapping_add(1);
        w.active = Some(seg.clone());
        w.summary = Some(self.summary_builder(&[]));
        w.len = 0;
        self.index
            .write()
            .segments
            .push_back(SegInfo { seg, len: 0 });
        Ok(())
    }

    /// Rebuilds the index from the segment files in `dir` (see the crate doc, "Durability"):
    /// each sealed segment from its summary where a valid one describes it, else (and the
    /// newest segment always) by a scan.
    fn recover(&self, dir: &Path) -> Result<(), StoreError> {
        fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
        let mut numbers = Vec::new();
        let mut summary_numbers = Vec::new();
        let mut expected = 0u64;
        for entry in fs::read_dir(dir).map_err(io_err("list directory", dir))? {
            let entry = entry.map_err(io_err("list directory", dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(n) = parse_segment_name(name, SEGMENT_EXT) {
                numbers.push(n);
            } else if let Some(n) = parse_segment_name(name, SUMMARY_EXT) {
                summary_numbers.push(n);
                // Its entry count, from its size: the index is sized once for all of them
                // instead of growing (and rehashing) segment by segment.
                let len = entry.metadata().map_or(0, |m| m.len());
                expected += len.saturating_sub(summary::OVERHEAD as u64) / summary::ENTRY as u64;
            }
        }
        numbers.sort_unstable();
        summary_numbers.sort_unstable();

        let mut w = self.writer.lock();
        let mut idx = self.index.write();
        // Never more than the store could legitimately hold (summaries are only written for
        // segments of at least this many bytes per record), whatever files lie in the directory.
        let expected = expected.min(self.cfg.max_bytes / MIN_BYTES_PER_SUMMARY_ENTRY);
        let expected = usize::try_from(expected).unwrap_or(0);
        idx.map.reserve(expected);
        idx.log.reserve(expected);
        let mut last_seq: Option<u64> = None;
        for (i, &number) in numbers.iter().enumerate() {
            let path = dir.join(segment_name(number));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io_err("open segment", &path))?;
            let seg = Arc::new(Segment { number, path, file });
            let newest = i + 1 == numbers.len();
            let from_summary = if newest || summary_numbers.binary_search(&number).is_err() {
                None
            } else {
                self.read_summary(&seg, last_seq)?
            };
            let summarized = from_summary.is_some();
            let scan = match from_summary {
                Some(scan) => {
                    bump(&self.counters.summarized_segments, 1);
                    if let Some(e) = scan.records.last() {
                        last_seq = Some(e.seq);
                    }
                    scan
                }
                None => scan_segment(&seg, &mut last_seq)?,
            };
            let mut len = scan.file_len;
            if scan.valid_len < scan.file_len {
                bump(&self.counters.torn_tails, 1);
                bump(
                    &self.counters.discarded_bytes,
                    scan.file_len - scan.valid_len,
                );
                if newest {
                    // The newest segment is appended to: cut the torn tail so new records follow
                    // the last valid one.
                    seg.file
                        .set_len(scan.valid_len)
                        .map_err(io_err("truncate", &seg.path))?;
                    seg.file.sync_all().map_err(io_err("sync", &seg.path))?;
                    len = scan.valid_len;
                }
            }
            if newest {
                // Its summary so far, completed by later appends and written once it is sealed.
                w.summary = Some(self.summary_builder(&scan.records));
            } else if !summarized && scan.valid_len == scan.file_len {
                // A sealed segment scanned whole (its summary was never written, or the store
                // predates summaries): write it now, so the next open reads that instead. Best
                // effort, like every summary; what it describes was just read back intact.
                if let Some(bytes) = self
                    .summary_builder(&scan.records)
                    .finish(number, scan.file_len)
                {
                    let _ = fs::write(summary_path(&seg.path), bytes);
                }
            }
            idx.map.reserve(scan.records.len());
            for r in scan.records {
                idx.push(
                    Slot {
                        seq: r.seq,
                        id: r.id,
                        loc: Loc::Disk {
                            seg: seg.clone(),
                            off: r.off,
                            len: r.len,
                        },
                    },
                    r.prev,
                    r.peer.map(PeerId),
                );
            }
            idx.disk_bytes += len;
            idx.segments.push_back(SegInfo { seg, len });
        }
        // Summaries of segments that are gone, and of the newest one (it is appended to: its
        // summary is written again when it is sealed).
        for n in summary_numbers {
            if numbers.binary_search(&n).is_err() || numbers.last() == Some(&n) {
                let _ = fs::remove_file(summary_path(&dir.join(segment_name(n))));
            }
        }
        w.next_seq = last_seq.map_or(0, |s| s + 1);
        match idx.segments.back() {
            Some(last) => {
                w.active = Some(last.seg.clone());
                w.len = last.len;
                w.next_number = last.seg.number.wrapping_add(1);
            }
            None => {
                let seg = create_segment(dir, 0)?;
                w.active = Some(seg.clone());
                w.summary = Some(self.summary_builder(&[]));
                w.next_number = 1;
                idx.segments.push_back(SegInfo { seg, len: 0 });
            }
        }
        let doomed = idx.evict_disk(self.cfg.max_bytes, &self.counters);
        drop(idx);
        remove_segments(&doomed);
        Ok(())
    }

    /// The records of sealed segment `seg` from its summary, if one is there, is valid, matches
    /// the file's current length and continues the seqs after `last_seq`; `None` otherwise (the
    /// segment is then scanned).
    fn read_summary(
        &self,
        seg: &Segment,
        last_seq: Option<u64>,
    ) -> Result<Option<Scan>, StoreError> {
        let file_len = seg
            .file
            .metadata()
            .map_err(io_err("stat segment", &seg.path))?
            .len();
        // A summary has one entry per record, and a record takes at least a header: a larger
        // file is not one (and is not read into memory).
        let path = summary_path(&seg.path);
        let most =
            (file_len / HEADER_LEN as u64) * summary::ENTRY as u64 + summary::OVERHEAD as u64;
        if fs::metadata(&path).map_or(true, |m| m.len() > most) {
            return Ok(None);
        }
        let Ok(bytes) = fs::read(&path) else {
            return Ok(None);
        };
        let Ok(records) = summary::parse(&bytes, seg.number, file_len) else {
            return Ok(None);
        };
        if records
            .first()
            .is_some_and(|e| last_seq.is_some_and(|l| e.seq <= l))
        {
            return Ok(None);
        }
        Ok(Some(Scan {
            records,
            valid_len: file_len,
            file_len,
        }))
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Best effort: an error here cannot be reported, and the data is safe up to the last
        // successful sync anyway.
        let _ = self.flush();
    }
}

impl Index {
    /// What the index knows of `id` recorded right after `prev` for `peer` (the codec's
    /// [`Probe`]), and the two marks a recording leaves on what is already indexed: `prev` is
    /// linked to `id` unless it has a successor still indexed, and an indexed `id` gets `peer`.
    /// (A new `id` is indexed by [`Index::push`] once its record is written.)
    fn probe(&mut self, peer: PeerId, prev: Option<&ChunkId>, id: &ChunkId) -> Probe {
        let mut probe = Probe::default();
        if let Some(prev) = prev {
            if let Some(next) = self.map.get(prev).map(|e| e.next) {
                let stale = next.is_none_or(|n| !self.map.contains_key(&n));
                probe.follows = next == Some(*id) && self.map.contains_key(id);
                if stale {
                    if let Some(e) = self.map.get_mut(prev) {
                        e.next = Some(*id);
                    }
                }
            }
        }
        if let Some(e) = self.map.get_mut(id) {
            probe.held = e.peers.insert(peer);
        }
        probe
    }

    /// Appends a slot (its seq is above every seq in the log) and indexes its id: a new id gets
    /// no successor and `peer`; a known id keeps its successor and peers (plus `peer`). Then
    /// `prev`, if indexed, is linked to the id unless it already has a successor still indexed
    /// (the same rule [`Store::record_linked`] applies, so replaying the log at open rebuilds
    /// the links it made when the records were appended).
    fn push(&mut self, slot: Slot, prev: Option<ChunkId>, peer: Option<PeerId>) {
        let e = self.map.entry(slot.id).or_insert(IdEntry {
            seq: slot.seq,
            next: None,
            peers: PeerSet::default(),
        });
        e.seq = slot.seq;
        if let Some(p) = peer {
            e.peers.insert(p);
        }
        if let Some(prev) = prev {
            let stale = self
                .map
                .get(&prev)
                .is_some_and(|e| e.next.is_none_or(|n| !self.map.contains_key(&n)));
            if stale {
                if let Some(e) = self.map.get_mut(&prev) {
                    e.next = Some(slot.id);
                }
            }
        }
        self.log.push_back(slot);
    }

    /// Position of `seq` in the log. Seqs are dense except across lost regions, so the first
    /// guess almost always hits.
    fn position(&self, seq: u64) -> Option<usize> {
        let front = self.log.front()?.seq;
        let guess = usize::try_from(seq.checked_sub(front)?).ok()?;
        if self.log.get(guess).is_some_and(|s| s.seq == seq) {
            return Some(guess);
        }
        self.log.binary_search_by_key(&seq, |s| s.seq).ok()
    }

    fn slot(&self, seq: u64) -> Option<&Slot> {
        self.position(seq).map(|p| &self.log[p])
    }

    /// Removes the oldest log slot, unindexing its id unless a newer copy exists.
    fn pop_front(&mut self) -> Option<Slot> {
        let slot = self.log.pop_front()?;
        if self.map.get(&slot.id).is_some_and(|e| e.seq == slot.seq) {
            self.map.remove(&slot.id);
        }
        Some(slot)
    }

    /// FIFO eviction of a memory-only store down to `cap` data bytes; returns records evicted.
    fn evict_memory(&mut self, cap: u64) -> u64 {
        let mut n = 0;
        while self.mem_bytes > cap {
            let Some(slot) = self.pop_front() else { break };
            if let Loc::Mem(d) = &slot.loc {
                self.mem_bytes -= d.len() as u64;
            }
            n += 1;
        }
        n
    }

    /// FIFO eviction of whole segments (never the newest) down to `max_bytes`; returns the
    /// evicted segments, whose files the caller deletes after releasing the index lock.
    fn evict_disk(&mut self, max_bytes: u64, counters: &Counters) -> Vec<Arc<Segment>> {
        let mut doomed = Vec::new();
        while self.disk_bytes > max_bytes && self.segments.len() > 1 {
            let Some(info) = self.segments.pop_front() else {
                break;
            };
            self.disk_bytes -= info.len;
            let mut n = 0;
            while self.log.front().is_some_and(
                |s| matches!(&s.loc, Loc::Disk { seg, .. } if seg.number == info.seg.number),
            ) {
                self.pop_front();
                n += 1;
            }
            bump(&counters.evicted_records, n);
            bump(&counters.evicted_segments, 1);
            doomed.push(info.seg);
        }
        doomed
    }
}

/// Result of scanning one segment file (or reading its summary).
struct Scan {
    /// Every valid record, in file order.
    records: Vec<Entry>,
    /// Length of the valid prefix.
    valid_len: u64,
    file_len: u64,
}

/// Reads `seg` front to back and returns its valid prefix: records that are complete, pass
/// their CRC and have seqs above `last_seq` (updated).
fn scan_segment(seg: &Segment, last_seq: &mut Option<u64>) -> Result<Scan, StoreError> {
    let file_len = seg
        .file
        .metadata()
        .map_err(io_err("stat segment", &seg.path))?
        .len();
    let mut reader = BufReader::with_capacity(1 << 20, &seg.file);
    let mut records = Vec::new();
    let mut buf = vec![0u8; HEADER_LEN];
    let mut off = 0u64;
    // Offsets beyond 32 bits are not accepted (they only arise from a segment grown past the
    // largest segment size by a foreign writer).
    while let Ok(off32) = u32::try_from(off) {
        if file_len - off < HEADER_LEN as u64 {
            break;
        }
        buf.resize(HEADER_LEN, 0);
        if read_full(&mut reader, &mut buf).map_err(io_err("read segment", &seg.path))? {
            break;
        }
        let data_len = match Record::new_checked(&buf[..]) {
            Ok(rec) => rec.data_len(),
            Err(RecordError::Truncated { need, .. }) => need - HEADER_LEN,
            Err(_) => break,
        };
        if (file_len - off - HEADER_LEN as u64) < data_len as u64 {
            break;
        }
        buf.resize(HEADER_LEN + data_len, 0);
        if read_full(&mut reader, &mut buf[HEADER_LEN..])
            .map_err(io_err("read segment", &seg.path))?
        {
            break;
        }
        let Ok(rec) = Record::new_checked(&buf[..]) else {
            break;
        };
        let Ok(repr) = RecordRepr::parse(&rec) else {
            break;
        };
        if last_seq.is_some_and(|l| repr.seq <= l) {
            break;
        }
        *last_seq = Some(repr.seq);
        records.push(Entry {
            seq: repr.seq,
            off: off32,
            len: repr.len,
            id: repr.id,
            prev: repr.prev,
            peer: repr.peer,
        });
        off += repr.buffer_len() as u64;
    }
    Ok(Scan {
        records,
        valid_len: off,
        file_len,
    })
}

/// Fills `buf`; returns `true` on a premature end of file.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    match r.read_exact(buf) {
        Ok(()) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(true),
        Err(e) => Err(e),
    }
}

/// Creates `dir` if needed and takes the exclusive lock on its `LOCK` file.
fn lock_dir(dir: &Path) -> Result<Flock<File>, StoreError> {
    fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
    let path = dir.join("LOCK");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io_err("open lock file", &path))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        if errno == Errno::EWOULDBLOCK {
            StoreError::Locked { path: path.clone() }
        } else {
            io_err("lock", &path)(errno.into())
        }
    })
}

fn create_segment(dir: &Path, number: u32) -> Result<Arc<Segment>, StoreError> {
    let path = dir.join(segment_name(number));
    // A summary left by an earlier segment of this number (after the numbers wrapped) would
    // not match the new file's length and seqs anyway; it goes before the file is reused.
    let _ = fs::remove_file(summary_path(&path));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(io_err("create segment", &path))?;
    // The new directory entry is made durable by the next sync (`Writer::dir_unsynced`), before
    // any data in the file counts as synced.
    Ok(Arc::new(Segment { number, path, file }))
}

fn remove_segments(doomed: &[Arc<Segment>]) {
    use std::os::unix::fs::MetadataExt;
    // Failure leaves a stale file that the next open scans again as the oldest segment and
    // evicts again if the store is still full; nothing to report to the caller of `put`.
    for seg in doomed {
        // Only the file this segment opened: after the numbers wrap a newer segment could
        // carry the same name.
        let same = |a: &fs::Metadata, b: &fs::Metadata| a.dev() == b.dev() && a.ino() == b.ino();
        match (fs::metadata(&seg.path), seg.file.metadata()) {
            (Ok(on_disk), Ok(ours)) if !same(&on_disk, &ours) => continue,
            _ => {}
        }
        let _ = fs::remove_file(summary_path(&seg.path));
        let _ = fs::remove_file(&seg.path);
    }
}

fn segment_name(number: u32) -> String {
    format!("seg-{number:010}.{SEGMENT_EXT}")
}

/// Extension of segment files.
const SEGMENT_EXT: &str = "hws";
/// Extension of segment summaries (see [`crate::summary`]).
const SUMMARY_EXT: &str = "hwx";

/// The summary file of the segment at `segment`.
fn summary_path(segment: &Path) -> PathBuf {
    segment.with_extension(SUMMARY_EXT)
}

/// The number in a segment's file name (`ext` [`SEGMENT_EXT`]) or its summary's
/// ([`SUMMARY_EXT`]).
fn parse_segment_name(name: &str, ext: &str) -> Option<u32> {
    let digits = name
        .strip_prefix("seg-")?
        .strip_suffix(ext)?
        .strip_suffix('.')?;
    if digits.len() != 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn validate(cfg: &StoreConfig) -> Result<(), StoreError> {
    if cfg.dir.is_none() {
        if cfg.memory_bytes == 0 {
            return Err(StoreError::InvalidConfig(
                "a memory-only store needs memory_bytes > 0",
            ));
        }
        return Ok(());
    }
    if !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&cfg.segment_bytes) {
        return Err(StoreError::InvalidConfig(
            "segment_bytes must be between 4 KiB and 1 GiB",
        ));
    }
    if cfg.max_bytes < 2 * cfg.segment_bytes {
        return Err(StoreError::InvalidConfig(
            "max_bytes must be at least 2 × segment_bytes",
        ));
    }
    if cfg.sync_bytes == Some(0) {
        return Err(StoreError::InvalidConfig(
            "sync_bytes must be > 0 (or unset)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
