//! The same behavioural checks against [`MemoryStore`] and [`DiskStore`], persistence across
//! reopen, and the codec end to end on disk stores (issue 3: a second pass after restarting both
//! appliances is still references).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use headway_dedup::{
    ChunkId, ChunkStore, Decoder, DecoderConfig, DedupKey, Encoder, EncoderConfig, MemoryStore,
    PeerId, Probe,
};

use super::DiskStore;
use crate::StoreConfig;

fn key() -> DedupKey {
    DedupKey::new([0x5a; 32])
}

/// Deterministic chunk bytes: `len` bytes derived from `tag`.
fn bytes_of(tag: u64, len: usize) -> Bytes {
    let mut x = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    Bytes::from(v)
}

fn chunk(tag: u64, len: usize) -> (ChunkId, Bytes) {
    let b = bytes_of(tag, len);
    (key().chunk_id(&b), b)
}

/// Chunk size in the eviction checks: one record per 4 KiB segment.
const BIG: usize = 3000;

/// A disk store of 4 KiB segments that holds exactly three [`BIG`] records: the fourth append
/// evicts the oldest.
fn small_disk(dir: &Path) -> StoreConfig {
    StoreConfig {
        dir: Some(dir.to_path_buf()),
        max_bytes: 3 * (BIG as u64 + crate::record::HEADER_LEN as u64) + 100,
        memory_bytes: 0,
        segment_bytes: 4096,
        sync_bytes: None,
        deferred_removal: false,
    }
}

const P: PeerId = PeerId(1);

fn probe(held: bool, follows: bool) -> Probe {
    Probe { held, follows }
}

/// `MemoryStore`'s held/follows checks.
fn check_held_and_follows(s: &dyn ChunkStore) {
    let (a, ad) = chunk(1, 40);
    let (b, bd) = chunk(2, 40);
    assert_eq!(s.record(P, None, &a, &ad), probe(false, false));
    assert_eq!(s.record(P, Some(&a), &b, &bd), probe(false, false));
    assert_eq!(s.record(P, None, &a, &ad), probe(true, false));
    assert_eq!(s.record(P, Some(&a), &b, &bd), probe(true, true));
    // Another peer: present and linked, but not held by it.
    assert_eq!(s.record(PeerId(2), Some(&a), &b, &bd), probe(false, true));
    assert_eq!(s.record(PeerId(2), Some(&a), &b, &bd), probe(true, true));
    let run = s.run(&a, 2).unwrap();
    assert_eq!(run, vec![(a, ad.clone()), (b, bd.clone())]);
    assert!(s.run(&a, 3).is_none());
    assert!(s.run(&a, 0).is_none());
    assert_eq!(s.follow(&a, 10, usize::MAX).len(), 2);
    assert_eq!(s.follow(&a, 10, 1).len(), 1);
    assert_eq!(s.follow(&a, 1, usize::MAX).len(), 1);
    assert!(s.follow(&chunk(99, 4).0, 10, 10).is_empty());
    assert_eq!(s.get(&b), Some(bd));
    assert_eq!(s.get(&chunk(99, 4).0), None);
}

/// First writer wins while the successor is held; a link to an evicted chunk is replaced.
/// `evict_oldest` must drop exactly the oldest inserted chunk (and may add unrelated ones).
fn check_stale_successor(s: &dyn ChunkStore, evict_oldest: &dyn Fn()) {
    let (a, ad) = chunk(10, BIG);
    let (b, bd) = chunk(11, BIG);
    let (c, cd) = chunk(12, BIG);
    s.record(P, None, &b, &bd);
    s.record(P, None, &a, &ad);
    s.record(P, None, &c, &cd);
    // a's successor becomes b (b present, but not yet a's successor).
    assert_eq!(s.record(P, Some(&a), &b, &bd), probe(true, false));
    // First writer wins while b is present.
    assert_eq!(s.record(P, Some(&a), &c, &cd), probe(true, false));
    assert_eq!(s.run(&a, 2).unwrap()[1].0, b);
    evict_oldest();
    assert!(s.get(&b).is_none());
    assert!(s.get(&a).is_some() && s.get(&c).is_some());
    // The link to b is stale: the run is cut, and the next flow position re-links a to c.
    assert!(s.run(&a, 2).is_none());
    assert_eq!(s.record(P, Some(&a), &c, &cd), probe(true, false));
    assert_eq!(s.record(P, Some(&a), &c, &cd), probe(true, true));
    assert_eq!(s.run(&a, 2).unwrap(), vec![(a, ad), (c, cd)]);
}

/// A chunk following itself (a run of identical chunks) links to itself.
fn check_self_successor(s: &dyn ChunkStore) {
    let (z, zd) = chunk(20, 64);
    assert_eq!(s.record(P, None, &z, &zd), probe(false, false));
    assert_eq!(s.record(P, Some(&z), &z, &zd), probe(true, false));
    assert_eq!(s.record(P, Some(&z), &z, &zd), probe(true, true));
    assert_eq!(s.run(&z, 5).unwrap().len(), 5);
    assert_eq!(s.follow(&z, 100, 64 * 3).len(), 3);
}

#[test]
fn memory_store_passes_the_shared_checks() {
    check_held_and_follows(&MemoryStore::new(1 << 20));
    check_self_successor(&MemoryStore::new(1 << 20));
    let m = MemoryStore::new(1 << 20);
    check_stale_successor(&m, &|| {
        let n = m.stats().chunks as usize;
        m.evict_oldest(n - 1);
    });
}

#[test]
fn disk_store_passes_the_shared_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let s = DiskStore::open(StoreConfig::disk(tmp.path().join("a"), 1 << 20)).unwrap();
    check_held_and_follows(&s);
    check_self_successor(&s);
    let s = DiskStore::open(small_disk(&tmp.path().join("b"))).unwrap();
    let filler = bytes_of(999, BIG);
    check_stale_successor(&s, &|| {
        let before = s.store().stats().evicted_records;
        s.store().put(key().chunk_id(&filler), &filler).unwrap();
        assert_eq!(s.store().stats().evicted_records, before + 1);
    });
    assert_eq!(s.write_errors(), 0);
}

#[test]
fn memory_only_store_passes_the_shared_checks() {
    check_held_and_follows(&DiskStore::open(StoreConfig::memory(1 << 20)).unwrap());
    check_self_successor(&DiskStore::open(StoreConfig::memory(1 << 20)).unwrap());
}

#[test]
fn links_and_peers_survive_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StoreConfig::disk(tmp.path(), 1 << 20);
    let chunks: Vec<_> = (0..20).map(|i| chunk(100 + i, 100 + i as usize)).collect();
    {
        let s = DiskStore::open(cfg.clone()).unwrap();
        let mut prev = None;
        for (id, d) in &chunks {
            assert_eq!(s.record(P, prev, id, d), probe(false, false));
            prev = Some(id);
        }
        // Another flow, another peer, continues after the last chunk: chunks[19] had no
        // successor yet, so it gets one, and the new chunk remembers PeerId(7).
        let (x, xd) = chunk(500, 10);
        s.record(PeerId(7), Some(&chunks[19].0), &x, &xd);
    }
    let s = DiskStore::open(cfg).unwrap();
    let run = s.run(&chunks[0].0, 20).unwrap();
    assert_eq!(run, chunks);
    let mut prev = None;
    for (id, d) in &chunks {
        // Held by P and linked, as before the restart.
        assert_eq!(s.record(P, prev, id, d), probe(true, prev.is_some()));
        prev = Some(id);
    }
    // Another peer does not hold them.
    assert_eq!(
        s.record(PeerId(3), None, &chunks[0].0, &chunks[0].1),
        probe(false, false)
    );
    let (x, xd) = chunk(500, 10);
    assert_eq!(s.run(&chunks[19].0, 2).unwrap()[1].0, x);
    assert_eq!(s.record(PeerId(7), None, &x, &xd), probe(true, false));
}

#[test]
fn peer_set_is_bounded_and_honest() {
    let tmp = tempfile::tempdir().unwrap();
    let s = DiskStore::open(StoreConfig::disk(tmp.path(), 1 << 20)).unwrap();
    let (a, ad) = chunk(1, 10);
    let peers = DiskStore::MAX_PEERS as u32 + 2;
    for p in 0..peers {
        assert!(!s.record(PeerId(p), None, &a, &ad).held);
    }
    for p in 0..peers {
        // Remembered peers say held; the ones beyond the bound never do (never a false "held").
        assert_eq!(
            s.record(PeerId(p), None, &a, &ad).held,
            (p as usize) < DiskStore::MAX_PEERS
        );
    }
}

/// Sends `data` through an encoder on `from` (to peer `to_id`) and a decoder on `to`; returns
/// (output, wire bytes).
fn transfer(
    from: Arc<dyn ChunkStore>,
    from_id: PeerId,
    to: Arc<dyn ChunkStore>,
    to_id: PeerId,
    data: &[u8],
) -> (Vec<u8>, u64) {
    let mut enc = Encoder::new(
        EncoderConfig {
            peer: to_id,
            ..EncoderConfig::default()
        },
        from,
        key(),
    );
    let mut dec = Decoder::new(
        DecoderConfig {
            peer: from_id,
            ..DecoderConfig::default()
        },
        to,
        key(),
    );
    let mut output = Vec::new();
    let mut wire = 0u64;
    let mut pump = |enc: &mut Encoder, dec: &mut Decoder| {
        let mut needs = Vec::new();
        while let Some(b) = enc.poll_transmit() {
            wire += b.len() as u64;
            dec.handle_wire(&b).unwrap();
        }
        while let Some(b) = dec.poll_output() {
            output.extend_from_slice(&b);
        }
        while let Some(n) = dec.poll_need() {
            needs.push(n);
        }
        needs
    };
    for piece in data.chunks(64 * 1024) {
        enc.handle_data(piece).unwrap();
        for need in pump(&mut enc, &mut dec) {
            enc.handle_need(need).unwrap();
        }
    }
    enc.finish();
    for _ in 0..100 {
        let needs = pump(&mut enc, &mut dec);
        if needs.is_empty() {
            break;
        }
        for need in needs {
            enc.handle_need(need).unwrap();
        }
    }
    assert!(dec.is_finished());
    (output, wire)
}

#[test]
fn dedup_survives_restart_of_both_appliances() {
    const A: PeerId = PeerId(10);
    const B: PeerId = PeerId(20);
    let tmp = tempfile::tempdir().unwrap();
    let cfg = |name: &str| StoreConfig {
        // A small memory tier, so the second pass reads from the segment files.
        memory_bytes: 1 << 20,
        segment_bytes: 4 << 20,
        ..StoreConfig::disk(tmp.path().join(name), 64 << 20)
    };
    let data = bytes_of(7, 8 << 20);
    let open = |name: &str| Arc::new(DiskStore::open(cfg(name)).unwrap());

    let (a, b) = (open("a"), open("b"));
    let (out, first) = transfer(a.clone(), A, b.clone(), B, &data);
    assert!(out == data, "first pass output differs");
    // Incompressible data: the first pass costs about its size.
    assert!(
        first > data.len() as u64 * 9 / 10,
        "first pass {first} bytes"
    );
    drop((a, b));

    let (a, b) = (open("a"), open("b"));
    assert!(a.store().stats().disk_bytes > data.len() as u64);
    let (out, second) = transfer(a.clone(), A, b.clone(), B, &data);
    assert!(out == data, "second pass output differs");
    assert!(
        second * 100 < first,
        "second pass after restart {second} bytes vs {first}"
    );
    assert!(b.store().stats().hits > 0);

    // A wiped decoder store: references fail there, the decoder fetches literals, output exact.
    b.store().purge().unwrap();
    let (out, third) = transfer(a.clone(), A, b.clone(), B, &data);
    assert!(out == data, "output after wipe differs");
    assert!(third > second);
    assert_eq!(a.write_errors() + b.write_errors(), 0);
}

/// One `record` call of a generated sequence: peer, predecessor and chunk, as indexes into a
/// small pool (`None` predecessor: the start of a flow).
type Op = (u32, Option<u8>, u8);

/// Applies `ops` to `s` and returns every probe, then every chunk's longest run.
fn replay(s: &dyn ChunkStore, pool: &[(ChunkId, Bytes)], ops: &[Op]) -> Vec<String> {
    let mut out: Vec<String> = ops
        .iter()
        .map(|&(peer, prev, i)| {
            let prev = prev.map(|p| pool[p as usize % pool.len()].0);
            let (id, d) = &pool[i as usize % pool.len()];
            format!("{:?}", s.record(PeerId(peer), prev.as_ref(), id, d))
        })
        .collect();
    for (id, _) in pool {
        let ids: Vec<ChunkId> = s
            .follow(id, 64, usize::MAX)
            .into_iter()
            .map(|c| c.0)
            .collect();
        out.push(format!("{ids:?}"));
    }
    out
}

proptest::proptest! {
    /// Without eviction and with at most `MAX_PEERS` peers, the disk store (and the memory-only
    /// `Store`) answer every `record` and `follow` exactly as `MemoryStore` does.
    #[test]
    fn disk_store_matches_memory_store(
        ops in proptest::collection::vec((0u32..4, proptest::option::of(0u8..12), 0u8..12), 0..80),
    ) {
        let pool: Vec<_> = (0..12).map(|i| chunk(1000 + i, 50 + i as usize)).collect();
        let want = replay(&MemoryStore::new(1 << 20), &pool, &ops);
        let tmp = tempfile::tempdir().unwrap();
        let disk = DiskStore::open(StoreConfig::disk(tmp.path(), 1 << 20)).unwrap();
        proptest::prop_assert_eq!(&replay(&disk, &pool, &ops), &want);
        let mem = DiskStore::open(StoreConfig::memory(1 << 20)).unwrap();
        proptest::prop_assert_eq!(&replay(&mem, &pool, &ops), &want);
    }

    /// `record_many` — one write per segment for a batch — reports the same probes and leaves
    /// the same links (also in a memory-only `Store`) as one `record` per chunk (`MemoryStore`'s default `record_many`), also
    /// when a batch crosses into new segments (4 KiB segments, chunks of 400–1,500 bytes), and
    /// a reopen reads every record back.
    #[test]
    fn record_many_matches_one_record_per_chunk(
        flows in proptest::collection::vec(
            (0u32..3, proptest::option::of(0u8..16), proptest::collection::vec(0u8..16, 0..12)),
            0..24,
        ),
    ) {
        let pool: Vec<_> = (0..16).map(|i| chunk(3000 + i, 400 + 70 * i as usize)).collect();
        let replay_many = |s: &dyn ChunkStore| -> Vec<String> {
            let mut out = Vec::new();
            for (peer, prev, idx) in &flows {
                let prev = prev.map(|p| pool[p as usize].0);
                let batch: Vec<_> = idx.iter().map(|&i| pool[i as usize].clone()).collect();
                let mut probes = Vec::new();
                s.record_many(PeerId(*peer), prev.as_ref(), &batch, &mut probes);
                out.push(format!("{probes:?}"));
            }
            for (id, _) in &pool {
                let ids: Vec<ChunkId> = s.follow(id, 64, usize::MAX).into_iter().map(|c| c.0).collect();
                out.push(format!("{ids:?}"));
            }
            out
        };
        let want = replay_many(&MemoryStore::new(1 << 20));
        let tmp = tempfile::tempdir().unwrap();
        // No memory tier: every read comes from the files.
        let cfg = StoreConfig {
            segment_bytes: 4096,
            memory_bytes: 0,
            ..StoreConfig::disk(tmp.path(), 1 << 20)
        };
        let mem = DiskStore::open(StoreConfig::memory(1 << 20)).unwrap();
        proptest::prop_assert_eq!(&replay_many(&mem), &want);
        let disk = DiskStore::open(cfg.clone()).unwrap();
        proptest::prop_assert_eq!(&replay_many(&disk), &want);
        proptest::prop_assert_eq!(disk.write_errors(), 0);
        let held: Vec<_> = pool.iter().filter(|(id, _)| disk.get(id).is_some()).cloned().collect();
        drop(disk);
        let reopened = DiskStore::open(cfg).unwrap();
        for (id, d) in &held {
            proptest::prop_assert_eq!(reopened.get(id), Some(d.clone()));
        }
        proptest::prop_assert_eq!(reopened.store().stats().corrupt_reads, 0);
    }

    /// After a reopen, every successor link the log recorded at first insertion is back: the
    /// reopened store's runs equal those of a `MemoryStore` fed only the first recording of each
    /// chunk (what version-2 records persist), and held chunks keep their first peer.
    #[test]
    fn reopen_rebuilds_first_insertion_links(
        ops in proptest::collection::vec((0u32..4, proptest::option::of(0u8..12), 0u8..12), 0..80),
    ) {
        let pool: Vec<_> = (0..12).map(|i| chunk(2000 + i, 50 + i as usize)).collect();
        let mut seen = std::collections::HashSet::new();
        let firsts: Vec<Op> = ops.iter().copied().filter(|op| seen.insert(op.2 as usize % pool.len())).collect();
        let model = MemoryStore::new(1 << 20);
        replay(&model, &pool, &firsts);
        let tmp = tempfile::tempdir().unwrap();
        let cfg = StoreConfig::disk(tmp.path(), 1 << 20);
        replay(&DiskStore::open(cfg.clone()).unwrap(), &pool, &ops);
        let disk = DiskStore::open(cfg).unwrap();
        for (id, _) in &pool {
            let want: Vec<_> = model.follow(id, 64, usize::MAX);
            proptest::prop_assert_eq!(disk.follow(id, 64, usize::MAX), want);
        }
        for &(peer, _, i) in &firsts {
            let (id, d) = &pool[i as usize % pool.len()];
            proptest::prop_assert!(disk.record(PeerId(peer), None, id, d).held);
        }
    }

    /// A reopen from segment summaries rebuilds exactly what a reopen by scanning every
    /// segment does: the same runs, links, peers, probes and counts (4 KiB segments, so the
    /// flows cross many sealed segments).
    #[test]
    fn summaries_rebuild_what_a_scan_rebuilds(
        flows in proptest::collection::vec(
            (0u32..3, proptest::option::of(0u8..16), proptest::collection::vec(0u8..16, 0..12)),
            1..24,
        ),
        after in proptest::collection::vec((0u32..4, proptest::option::of(0u8..16), 0u8..16), 0..40),
    ) {
        let pool: Vec<_> = (0..16).map(|i| chunk(4000 + i, 400 + 70 * i as usize)).collect();
        let tmp = tempfile::tempdir().unwrap();
        let summarized = tmp.path().join("summarized");
        let scanned = tmp.path().join("scanned");
        let cfg = |dir: &Path| StoreConfig {
            segment_bytes: 4096,
            memory_bytes: 0,
            ..StoreConfig::disk(dir, 1 << 20)
        };
        {
            let s = DiskStore::open(cfg(&summarized)).unwrap();
            for (peer, prev, idx) in &flows {
                let prev = prev.map(|p| pool[p as usize].0);
                let batch: Vec<_> = idx.iter().map(|&i| pool[i as usize].clone()).collect();
                s.record_many(PeerId(*peer), prev.as_ref(), &batch, &mut Vec::new());
            }
        }
        std::fs::create_dir(&scanned).unwrap();
        for e in std::fs::read_dir(&summarized).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "hws") {
                std::fs::copy(&p, scanned.join(p.file_name().unwrap())).unwrap();
            }
        }
        let a = DiskStore::open(cfg(&summarized)).unwrap();
        let b = DiskStore::open(cfg(&scanned)).unwrap();
        let (sa, sb) = (a.store().stats(), b.store().stats());
        proptest::prop_assert_eq!(sb.summarized_segments, 0);
        proptest::prop_assert_eq!(sa.summarized_segments, sa.segments - 1);
        proptest::prop_assert_eq!(
            (sa.records, sa.chunks, sa.segments, sa.disk_bytes),
            (sb.records, sb.chunks, sb.segments, sb.disk_bytes)
        );
        let ops: Vec<Op> = after.iter().map(|&(p, prev, i)| (p, prev, i)).collect();
        proptest::prop_assert_eq!(replay(&a, &pool, &ops), replay(&b, &pool, &ops));
    }
}
