//! The chunk store interface the codec works against, and [`MemoryStore`].
//!
//! Owns the [`ChunkStore`] trait, [`PeerId`], [`Probe`] and the in-memory implementation
//! [`MemoryStore`] (bounded by bytes, FIFO eviction) used by tests and as the memory tier. The
//! persistent, on-disk store lives in another crate and implements the same trait.
//!
//! # The model
//!
//! A store holds chunks by [`ChunkId`]. For each chunk it also remembers
//!
//! - its **successor**: the chunk that followed it in the flow in which the successor link was
//!   first recorded (first writer wins; a link whose target was evicted is replaced). Runs are
//!   chains of successor links: `run(first, n)` is `first` and the `n - 1` chunks reached by
//!   following them. Because links are per flow position and not a global insertion order,
//!   concurrent flows interleaving their inserts do not break runs.
//! - the **peers** it has crossed the link with, in either direction. Both appliances record
//!   every chunk that crosses between them, in flow order, with the same predecessor, so the
//!   encoder's store mirrors what the peer's store holds and how it is linked — as long as
//!   neither side evicted, was wiped, or saw two flows give one chunk different successors in a
//!   different order. Those divergences are expected; the codec detects them (a run's digest
//!   over its ids, every chunk re-hashed) and fetches the literal bytes from the encoder. A
//!   store therefore never has to be right, only honest: it must return the bytes it was given
//!   for an id (the codec re-verifies them anyway).
//!
//! # Thread safety
//!
//! Methods take `&self`: one store is shared (as `Arc<dyn ChunkStore>`) by every encoder and
//! decoder of the process, one per flow direction, each running in its own task. Each call is
//! atomic; no ordering between calls of different flows is assumed.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use bytes::Bytes;
use parking_lot::Mutex;
use smallvec::{smallvec, SmallVec};

use crate::id::ChunkId;

/// A small number naming one peer appliance within this process (assigned by the shell).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PeerId(pub u32);

/// What the store knew about a chunk just before [`ChunkStore::record`] recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Probe {
    /// The chunk was present and had already crossed the link with this peer.
    pub held: bool,
    /// The chunk was present and was the recorded successor of `prev`.
    pub follows: bool,
}

/// A shared chunk history (see the module doc for the model and the thread-safety contract).
pub trait ChunkStore: Send + Sync {
    /// Records that chunk `id` with bytes `data` crossed the link with `peer`, right after
    /// `prev` in its flow (`None` at the start of a flow), and returns what the store knew
    /// before: whether `peer` held it and whether it already was `prev`'s successor.
    ///
    /// Inserts the chunk if absent (possibly evicting others), marks `peer`, and sets `prev`'s
    /// successor to `id` if `prev` had none (or its successor is gone).
    fn record(&self, peer: PeerId, prev: Option<&ChunkId>, id: &ChunkId, data: &Bytes) -> Probe;

    /// Records `chunks`, consecutive in one flow, the first right after `prev`: the same as
    /// calling [`ChunkStore::record`] for each in order (each chunk's `prev` is the one before
    /// it), and pushes each call's [`Probe`] onto `probes`. A store that writes to disk does it
    /// in one write here instead of one per chunk; others need not override this.
    fn record_many(
        &self,
        peer: PeerId,
        prev: Option<&ChunkId>,
        chunks: &[(ChunkId, Bytes)],
        probes: &mut Vec<Probe>,
    ) {
        let mut prev = prev.copied();
        for (id, data) in chunks {
            probes.push(self.record(peer, prev.as_ref(), id, data));
            prev = Some(*id);
        }
    }

    /// The bytes of chunk `id`, if held.
    fn get(&self, id: &ChunkId) -> Option<Bytes>;

    /// `first` and the chunks that follow it by successor links, with their bytes: at most
    /// `max_chunks` chunks, stopping after the chunk that brings the total to `max_bytes` or
    /// more, or before a missing chunk. Empty if `first` is not held.
    fn follow(&self, first: &ChunkId, max_chunks: u32, max_bytes: usize) -> Vec<(ChunkId, Bytes)>;

    /// `first` and the `count - 1` chunks that follow it by successor links, with their bytes;
    /// `None` if any is missing or `count` is 0.
    fn run(&self, first: &ChunkId, count: u32) -> Option<Vec<(ChunkId, Bytes)>> {
        let v = self.follow(first, count, usize::MAX);
        (count > 0 && v.len() == count as usize).then_some(v)
    }
}

/// An in-memory [`ChunkStore`] bounded by the total size of chunk bytes, evicting the oldest
/// inserted chunk first (FIFO, as the disk store's ring does).
///
/// Per-chunk bookkeeping (id, links, peer list: roughly 100 bytes) is not counted in the bound.
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

/// Chunk ids are keyed BLAKE3 outputs, uniformly distributed and unknown to an attacker
/// without the key, so their first 8 bytes are already a good hash: no need for SipHash.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // `[u8; 32]` hashes as a length prefix, then the bytes.
        let mut b = [0u8; 8];
        let n = bytes.len().min(8);
        b[..n].copy_from_slice(&bytes[..n]);
        self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(b);
    }
}

type IdMap<V> = HashMap<ChunkId, V, BuildHasherDefault<IdHasher>>;

#[derive(Debug)]
struct Inner {
    capacity: u64,
    bytes: u64,
    map: IdMap<Stored>,
    fifo: VecDeque<ChunkId>,
    evicted: u64,
}

#[derive(Debug)]
struct Stored {
    data: Bytes,
    next: Option<ChunkId>,
    /// Almost always one or two: inline, no allocation per chunk.
    peers: SmallVec<[PeerId; 2]>,
}

/// Counters of a [`MemoryStore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStoreStats {
    /// Chunks held.
    pub chunks: u64,
    /// Chunk bytes held.
    pub bytes: u64,
    /// Chunks evicted so far.
    pub evicted: u64,
}

impl MemoryStore {
    /// An empty store that holds at most `capacity` bytes of chunk data.
    ///
    /// The index grows as chunks arrive. Sizing it up front for `capacity` measured 30 %
    /// slower on `decode/first_pass`: every new entry then lands on a page of a large table
    /// not yet touched, a page fault each.
    pub fn new(capacity: u64) -> Self {
        Self {
            inner: Mutex::new(Inner {
                capacity,
                bytes: 0,
                map: IdMap::default(),
                fifo: VecDeque::new(),
                evicted: 0,
            }),
        }
    }

    /// Current counters.
    pub fn stats(&self) -> MemoryStoreStats {
        let g = self.inner.lock();
        MemoryStoreStats {
            chunks: g.map.len() as u64,
            bytes: g.bytes,
            evicted: g.evicted,
        }
    }

    /// Drops every chunk (what a wiped appliance looks like to its peer).
    pub fn clear(&self) {
        let mut g = self.inner.lock();
        g.evicted += g.map.len() as u64;
        g.map.clear();
        g.fifo.clear();
        g.bytes = 0;
    }

    /// Drops the oldest chunks until at most `keep` remain (tests use it to simulate eviction).
    pub fn evict_oldest(&self, keep: usize) {
        let mut g = self.inner.lock();
        while g.map.len() > keep {
            if !g.evict_one() {
                break;
            }
        }
    }
}

impl Inner {
    fn evict_one(&mut self) -> bool {
        while let Some(id) = self.fifo.pop_front() {
            if let Some(e) = self.map.remove(&id) {
                self.bytes -= e.data.len() as u64;
                self.evicted += 1;
                return true;
            }
        }
        false
    }
}

impl ChunkStore for MemoryStore {
    fn record(&self, peer: PeerId, prev: Option<&ChunkId>, id: &ChunkId, data: &Bytes) -> Probe {
        let mut g = self.inner.lock();
        let g = &mut *g;
        let mut probe = Probe::default();
        // At most two hash lookups for a new chunk after a known one (the decoder's every
        // chunk): `prev` once, `id` once.
        let mut prev_absent = false;
        if let Some(prev) = prev {
            // `prev`'s link, set to `id` at once when it has none (the usual case).
            let link = g.map.get_mut(prev).map(|e| match e.next {
                None => {
                    e.next = Some(*id);
                    None
                }
                Some(n) => Some(n),
            });
            match link {
                None => prev_absent = true,
                Some(None) => {}
                Some(Some(next)) => {
                    probe.follows = next == *id && g.map.contains_key(id);
                    if !g.map.contains_key(&next) {
                        if let Some(e) = g.map.get_mut(prev) {
                            e.next = Some(*id);
                        }
                    }
                }
            }
        }
        if data.len() as u64 > g.capacity && !g.map.contains_key(id) {
            return probe;
        }
        match g.map.entry(*id) {
            Entry::Occupied(mut e) => {
                let peers = &mut e.get_mut().peers;
                match peers.binary_search(&peer) {
                    Ok(_) => probe.held = true,
                    Err(i) => peers.insert(i, peer),
                }
                // A chunk present but linked from an evicted-and-replaced `prev` is still fine.
            }
            Entry::Vacant(v) => {
                v.insert(Stored {
                    data: data.clone(),
                    next: None,
                    peers: smallvec![peer],
                });
                g.bytes += data.len() as u64;
                g.fifo.push_back(*id);
                // Oldest first, until the bound holds again (never the chunk just added: it
                // is the newest, and alone it fits).
                while g.bytes > g.capacity {
                    if !g.evict_one() {
                        break;
                    }
                }
                // A chunk that follows itself (`x x x`): `prev` is `id`, absent until now.
                if prev_absent {
                    if let Some(e) = prev.and_then(|p| g.map.get_mut(p)) {
                        if e.next.is_none() {
                            e.next = Some(*id);
                        }
                    }
                }
            }
        }
        probe
    }

    fn get(&self, id: &ChunkId) -> Option<Bytes> {
        self.inner.lock().map.get(id).map(|e| e.data.clone())
    }

    fn follow(&self, first: &ChunkId, max_chunks: u32, max_bytes: usize) -> Vec<(ChunkId, Bytes)> {
        let g = self.inner.lock();
        let mut out = Vec::with_capacity((max_chunks as usize).min(4096));
        let mut bytes = 0;
        let mut cur = Some(*first);
        while let Some(id) = cur {
            if out.len() >= max_chunks as usize || bytes >= max_bytes {
                break;
            }
            let Some(e) = g.map.get(&id) else {
                break;
            };
            bytes += e.data.len();
            out.push((id, e.data.clone()));
            cur = e.next;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::DedupKey;

    fn chunk(k: &DedupKey, s: &str) -> (ChunkId, Bytes) {
        let b = Bytes::copy_from_slice(s.as_bytes());
        (k.chunk_id(&b), b)
    }

    #[test]
    fn record_reports_held_and_follows() {
        let k = DedupKey::new([3; 32]);
        let s = MemoryStore::new(1 << 20);
        let p = PeerId(1);
        let (a, ad) = chunk(&k, "aaaa");
        let (b, bd) = chunk(&k, "bbbb");
        assert_eq!(s.record(p, None, &a, &ad), Probe::default());
        assert_eq!(s.record(p, Some(&a), &b, &bd), Probe::default());
        assert_eq!(
            s.record(p, None, &a, &ad),
            Probe {
                held: true,
                follows: false
            }
        );
        assert_eq!(
            s.record(p, Some(&a), &b, &bd),
            Probe {
                held: true,
                follows: true
            }
        );
        // Another peer: present and linked, but not held by it.
        assert_eq!(
            s.record(PeerId(2), Some(&a), &b, &bd),
            Probe {
                held: false,
                follows: true
            }
        );
        let run = s.run(&a, 2).unwrap();
        assert_eq!(run, vec![(a, ad.clone()), (b, bd.clone())]);
        assert!(s.run(&a, 3).is_none());
        assert!(s.run(&a, 0).is_none());
        assert_eq!(s.follow(&a, 10, usize::MAX).len(), 2);
        assert_eq!(s.follow(&a, 10, 1).len(), 1);
        assert_eq!(s.follow(&a, 1, usize::MAX).len(), 1);
        assert!(s.follow(&k.chunk_id(b"nope"), 10, 10).is_empty());
        assert_eq!(s.get(&b), Some(bd));
    }

    #[test]
    fn fifo_eviction_bounds_bytes() {
        let k = DedupKey::new([3; 32]);
        let s = MemoryStore::new(10);
        let (a, ad) = chunk(&k, "aaaa");
        let (b, bd) = chunk(&k, "bbbb");
        let (c, cd) = chunk(&k, "cccc");
        s.record(PeerId(0), None, &a, &ad);
        s.record(PeerId(0), Some(&a), &b, &bd);
        s.record(PeerId(0), Some(&b), &c, &cd);
        assert!(s.get(&a).is_none());
        assert!(s.get(&b).is_some() && s.get(&c).is_some());
        assert_eq!(
            s.stats(),
            MemoryStoreStats {
                chunks: 2,
                bytes: 8,
                evicted: 1
            }
        );
        // A chunk larger than the whole store is not kept.
        let (d, dd) = chunk(&k, "dddddddddddd");
        s.record(PeerId(0), None, &d, &dd);
        assert!(s.get(&d).is_none());
        s.clear();
        assert!(s.get(&b).is_none());
    }

    #[test]
    fn stale_successor_is_replaced() {
        let k = DedupKey::new([3; 32]);
        let s = MemoryStore::new(1 << 20);
        let (a, ad) = chunk(&k, "a");
        let (b, bd) = chunk(&k, "b");
        let (c, cd) = chunk(&k, "c");
        s.record(PeerId(0), None, &a, &ad);
        s.record(PeerId(0), Some(&a), &b, &bd);
        // First writer wins while b is present.
        s.record(PeerId(0), Some(&a), &c, &cd);
        assert_eq!(s.run(&a, 2).unwrap()[1].0, b);
        // Evict a and b, re-insert a, link c.
        s.evict_oldest(1);
        s.record(PeerId(0), None, &a, &ad);
        s.record(PeerId(0), Some(&a), &c, &cd);
        assert_eq!(s.run(&a, 2).unwrap()[1].0, c);
    }
}
