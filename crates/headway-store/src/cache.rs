//! The memory tier: a byte-weighted FIFO cache of chunk data in front of the disk.
//!
//! Owns only the map and its insertion order. Invariants: every id in `order` is in `map` and vice
//! versa (an id is queued only when absent and leaves both at once), and `bytes` is the sum of the
//! cached data lengths, ≤ `cap` after every call. FIFO rather than LRU: hits cost no bookkeeping
//! and the access pattern of a WAN history (recent data repeats) is served as well.

use std::collections::VecDeque;

use bytes::Bytes;
use hashbrown::HashMap;

use crate::ChunkId;

/// A byte-bounded FIFO cache.
#[derive(Debug)]
pub(crate) struct Cache {
    map: HashMap<ChunkId, Bytes>,
    order: VecDeque<ChunkId>,
    bytes: u64,
    cap: u64,
}

impl Cache {
    /// An empty cache holding at most `cap` bytes of data.
    pub(crate) fn new(cap: u64) -> Self {
        Cache {
            map: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            cap,
        }
    }

    /// The cached data of `id`.
    pub(crate) fn get(&self, id: &ChunkId) -> Option<Bytes> {
        self.map.get(id).cloned()
    }

    /// Caches `data` as `id` unless already cached or larger than the whole cache, evicting the
    /// oldest entries to stay within the bound.
    pub(crate) fn insert(&mut self, id: ChunkId, data: Bytes) {
        let len = data.len() as u64;
        if len > self.cap || self.map.contains_key(&id) {
            return;
        }
        while self.bytes + len > self.cap {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(d) = self.map.remove(&old) {
                self.bytes -= d.len() as u64;
            }
        }
        self.map.insert(id, data);
        self.order.push_back(id);
        self.bytes += len;
    }

    /// Drops every entry.
    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
        self.bytes = 0;
    }

    /// Bytes of data cached.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn stays_within_bound_and_consistent(cap in 0u64..4096,
                                             ops in proptest::collection::vec((0u8..32, 0usize..1500), 0..200)) {
            let mut c = Cache::new(cap);
            for (k, len) in ops {
                let id = ChunkId([k; 32]);
                c.insert(id, Bytes::from(vec![k; len]));
                prop_assert!(c.bytes() <= cap);
                prop_assert_eq!(c.map.len(), c.order.len());
                let sum: u64 = c.map.values().map(|d| d.len() as u64).sum();
                prop_assert_eq!(sum, c.bytes());
                if let Some(d) = c.get(&id) {
                    prop_assert!(d.iter().all(|&b| b == k));
                }
            }
        }
    }

    #[test]
    fn evicts_oldest_first() {
        let mut c = Cache::new(300);
        for k in 0..3u8 {
            c.insert(ChunkId([k; 32]), Bytes::from(vec![k; 100]));
        }
        c.insert(ChunkId([9; 32]), Bytes::from(vec![9; 100]));
        assert!(c.get(&ChunkId([0; 32])).is_none());
        assert!(c.get(&ChunkId([1; 32])).is_some());
        assert!(c.get(&ChunkId([9; 32])).is_some());
        // Larger than the cache: not cached, nothing evicted.
        c.insert(ChunkId([8; 32]), Bytes::from(vec![8; 301]));
        assert!(c.get(&ChunkId([8; 32])).is_none());
        assert_eq!(c.bytes(), 300);
    }
}
