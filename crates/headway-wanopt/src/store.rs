//! The appliance's chunk stores: which class uses which store, the disk store's lifetime and
//! flushing, and the stores' usage for the stats snapshot.
//!
//! # Class → store
//!
//! | class          | store                                                                 |
//! |----------------|-----------------------------------------------------------------------|
//! | `dedup-memory` | the `MemoryStore` (one per appliance)                                 |
//! | `dedup-disk`   | the `DiskStore` (one per appliance) if configured, else the memory one |
//! | `compress`, `pass-through` | the memory store is handed to the codec, which does not dedup |
//!
//! # The disk store's lifetime
//!
//! Flows hold the disk store through a [`DiskSlot`], not directly, so that
//! [`Stores::close`] (the appliance's shutdown) can flush it and release its directory lock at
//! once, even while flow tasks are still winding down: a new appliance on the same directory
//! can open it right after the old one was shut down. After the close a flow still running
//! sees an empty store that keeps nothing; the codec stays correct (it fetches what a store
//! cannot give), and such a flow is being cut anyway.

use std::sync::Arc;

use bytes::Bytes;
use headway_dedup::{ChunkId, ChunkStore, MemoryStore, PeerId, Probe};
use headway_store::{DiskStore, StoreConfig, StoreError};
use headway_tunnel::ServiceClass;
use parking_lot::RwLock;

use crate::stats::{class_name, GroupStats, StoreUsage};

/// The stores of one appliance.
#[derive(Debug)]
pub(crate) struct Stores {
    memory: Arc<MemoryStore>,
    memory_capacity: u64,
    /// The disk store and its configured bound.
    disk: Option<(Arc<DiskSlot>, u64)>,
}

impl Stores {
    /// A memory store of `memory_bytes`, and the disk store of `disk` if given (opened here).
    pub(crate) fn open(memory_bytes: u64, disk: Option<StoreConfig>) -> Result<Self, StoreError> {
        let disk = match disk {
            Some(cfg) => {
                let capacity = cfg.max_bytes;
                let started = tokio::time::Instant::now();
                let store = DiskStore::open(cfg)?;
                let st = store.store().stats();
                tracing::info!(
                    records = st.records,
                    bytes = st.disk_bytes,
                    segments = st.segments,
                    from_summaries = st.summarized_segments,
                    torn_tails = st.torn_tails,
                    ms = started.elapsed().as_millis() as u64,
                    "disk store opened"
                );
                Some((Arc::new(DiskSlot(RwLock::new(Some(store)))), capacity))
            }
            None => None,
        };
        Ok(Self {
            memory: Arc::new(MemoryStore::new(memory_bytes)),
            memory_capacity: memory_bytes,
            disk,
        })
    }

    /// The store a flow of `class` records into and resolves from.
    pub(crate) fn for_class(&self, class: ServiceClass) -> Arc<dyn ChunkStore> {
        match (&self.disk, class) {
            (Some((slot, _)), ServiceClass::DedupDisk) => slot.clone(),
            _ => self.memory.clone(),
        }
    }

    /// The disk store's slot, for the flushing task.
    pub(crate) fn disk(&self) -> Option<Arc<DiskSlot>> {
        self.disk.as_ref().map(|(slot, _)| slot.clone())
    }

    /// Flushes and closes the disk store (releasing its directory); idempotent.
    pub(crate) fn close(&self) -> Result<(), StoreError> {
        self.disk.as_ref().map_or(Ok(()), |(slot, _)| slot.close())
    }

    /// Usage of each store (memory first, then disk if configured), with the hit counts of
    /// the groups whose class uses it.
    pub(crate) fn usage(&self, groups: &[GroupStats]) -> Vec<StoreUsage> {
        let m = self.memory.stats();
        let mut memory = StoreUsage {
            store: "memory",
            bytes: m.bytes,
            chunks: m.chunks,
            capacity: self.memory_capacity,
            ..StoreUsage::default()
        };
        let mut disk = self.disk.as_ref().map(|(slot, capacity)| {
            let s = slot.stats();
            StoreUsage {
                store: "disk",
                bytes: s.map_or(0, |s| s.disk_bytes),
                chunks: s.map_or(0, |s| s.chunks),
                capacity: *capacity,
                ..StoreUsage::default()
            }
        });
        for g in groups {
            let target = if g.class == class_name(ServiceClass::DedupDisk) && disk.is_some() {
                disk.as_mut()
            } else if g.class == class_name(ServiceClass::DedupMemory)
                || g.class == class_name(ServiceClass::DedupDisk)
            {
                Some(&mut memory)
            } else {
                None
            };
            if let Some(u) = target {
                u.chunks_encoded += g.chunks_encoded;
                u.chunks_peer_held += g.chunks_peer_held;
            }
        }
        std::iter::once(memory).chain(disk).collect()
    }
}

/// The disk store behind a lock that [`DiskSlot::close`] empties (see the module doc). Calls
/// hold the read lock for their duration, so `close` waits for the calls in progress.
#[derive(Debug)]
pub(crate) struct DiskSlot(RwLock<Option<DiskStore>>);

impl DiskSlot {
    /// Syncs the data appended so far (blocking I/O: call it off the async workers).
    pub(crate) fn flush(&self) -> Result<(), StoreError> {
        self.0.read().as_ref().map_or(Ok(()), |s| s.store().flush())
    }

    /// Flushes, then drops the store; later calls see an empty store.
    fn close(&self) -> Result<(), StoreError> {
        match self.0.write().take() {
            Some(s) => s.store().flush(),
            None => Ok(()),
        }
    }

    fn stats(&self) -> Option<headway_store::StoreStats> {
        self.0.read().as_ref().map(|s| s.store().stats())
    }
}

impl ChunkStore for DiskSlot {
    fn record(&self, peer: PeerId, prev: Option<&ChunkId>, id: &ChunkId, data: &Bytes) -> Probe {
        self.0
            .read()
            .as_ref()
            .map_or_else(Probe::default, |s| s.record(peer, prev, id, data))
    }

    fn record_many(
        &self,
        peer: PeerId,
        prev: Option<&ChunkId>,
        chunks: &[(ChunkId, Bytes)],
        probes: &mut Vec<Probe>,
    ) {
        match self.0.read().as_ref() {
            Some(s) => s.record_many(peer, prev, chunks, probes),
            None => probes.resize(probes.len() + chunks.len(), Probe::default()),
        }
    }

    fn get(&self, id: &ChunkId) -> Option<Bytes> {
        self.0.read().as_ref().and_then(|s| s.get(id))
    }

    fn follow(&self, first: &ChunkId, max_chunks: u32, max_bytes: usize) -> Vec<(ChunkId, Bytes)> {
        self.0
            .read()
            .as_ref()
            .map_or_else(Vec::new, |s| s.follow(first, max_chunks, max_bytes))
    }

    fn run(&self, first: &ChunkId, count: u32) -> Option<Vec<(ChunkId, Bytes)>> {
        self.0.read().as_ref().and_then(|s| s.run(first, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(class: ServiceClass, encoded: u64, held: u64) -> GroupStats {
        GroupStats {
            peer: "p".into(),
            class: class_name(class),
            chunks_encoded: encoded,
            chunks_peer_held: held,
            ..GroupStats::default()
        }
    }

    #[test]
    fn disk_class_uses_the_disk_store_only_when_configured() {
        let dir = tempfile::tempdir().unwrap();
        let groups = [
            group(ServiceClass::DedupMemory, 10, 5),
            group(ServiceClass::DedupDisk, 100, 99),
            group(ServiceClass::Compress, 7, 0),
        ];
        let without = Stores::open(1 << 20, None).unwrap();
        let u = without.usage(&groups);
        assert_eq!(u.len(), 1);
        assert_eq!(
            (u[0].store, u[0].chunks_encoded, u[0].chunks_peer_held),
            ("memory", 110, 104)
        );
        assert_eq!(u[0].capacity, 1 << 20);

        let with = Stores::open(1 << 20, Some(StoreConfig::disk(dir.path(), 1 << 20))).unwrap();
        let u = with.usage(&groups);
        assert_eq!(u.len(), 2);
        assert_eq!((u[0].chunks_encoded, u[0].chunks_peer_held), (10, 5));
        assert_eq!(
            (u[1].store, u[1].chunks_encoded, u[1].chunks_peer_held),
            ("disk", 100, 99)
        );
        assert_eq!(u[1].capacity, 1 << 20);
        assert!((u[1].hit_rate() - 0.99).abs() < 1e-9);
        let disk = with.for_class(ServiceClass::DedupDisk);
        let mem = with.for_class(ServiceClass::DedupMemory);
        assert!(!Arc::ptr_eq(&disk, &mem));
    }

    #[test]
    fn close_releases_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = StoreConfig::disk(dir.path(), 1 << 20);
        let first = Stores::open(1 << 20, Some(cfg.clone())).unwrap();
        let held = first.for_class(ServiceClass::DedupDisk);
        assert!(matches!(
            Stores::open(1 << 20, Some(cfg.clone())),
            Err(StoreError::Locked { .. })
        ));
        first.close().unwrap();
        // A flow still holding the store after the close sees it empty, without panicking.
        assert!(held.get(&ChunkId([1; 32])).is_none());
        Stores::open(1 << 20, Some(cfg)).unwrap();
    }
}
