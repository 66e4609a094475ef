use std::fs;
use std::io::Write;
use std::path::Path;

use proptest::prelude::*;

use super::*;

/// A distinct id per number (the store never recomputes ids, so any 32 bytes do).
fn id(n: u64) -> ChunkId {
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(&n.to_le_bytes());
    b[8..16].copy_from_slice(&(!n).to_le_bytes());
    ChunkId(b)
}

/// Deterministic chunk data for number `n`, `len` bytes.
fn data(n: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (n as usize * 31 + i * 7) as u8).collect()
}

fn disk_cfg(dir: &Path) -> StoreConfig {
    StoreConfig {
        dir: Some(dir.to_path_buf()),
        max_bytes: 64 << 20,
        memory_bytes: 0,
        segment_bytes: 16 << 20,
        sync_bytes: None,
        deferred_removal: false,
    }
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    files_with_ext(dir, SEGMENT_EXT)
}

fn summary_files(dir: &Path) -> Vec<PathBuf> {
    files_with_ext(dir, SUMMARY_EXT)
}

/// Deletes the segment summaries in `dir`; returns how many there were.
fn remove_summaries(dir: &Path) -> usize {
    let files = summary_files(dir);
    files.iter().for_each(|p| fs::remove_file(p).unwrap());
    files.len()
}

fn dir_bytes(dir: &Path) -> u64 {
    segment_files(dir)
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum()
}

/// The store's behaviour as a plain list: the log in order.
struct Model {
    log: Vec<(ChunkId, Vec<u8>)>,
}

impl Model {
    fn latest(&self, id: &ChunkId) -> Option<usize> {
        self.log.iter().rposition(|(i, _)| i == id)
    }
}

fn check_against_model(store: &Store, model: &Model, pool: &[(ChunkId, Vec<u8>)]) {
    for (cid, d) in pool {
        match model.latest(cid) {
            Some(_) => {
                assert!(store.contains(cid));
                assert_eq!(store.get(cid).as_deref(), Some(&d[..]));
            }
            None => {
                assert!(!store.contains(cid));
                assert_eq!(store.get(cid), None);
            }
        }
    }
    for (cid, _) in pool {
        let Some(pos) = model.latest(cid) else {
            continue;
        };
        for count in [
            0,
            1,
            2,
            5,
            (model.log.len() - pos) as u32,
            (model.log.len() - pos + 1) as u32,
        ] {
            let got = store.run(cid, count);
            let want: Option<Vec<_>> = model
                .log
                .get(pos..pos + count as usize)
                .filter(|_| count > 0)
                .map(|s| {
                    s.iter()
                        .map(|(i, d)| (*i, Bytes::from(d.clone())))
                        .collect()
                });
            assert_eq!(got, want, "run from {pos} count {count}");
        }
        for (max_chunks, max_bytes) in [(0, usize::MAX), (1, 0), (3, usize::MAX), (1000, 2500)] {
            let got = store.follow(cid, max_chunks, max_bytes);
            let mut want = Vec::new();
            let mut bytes = 0;
            for (i, d) in &model.log[pos..] {
                if want.len() >= max_chunks as usize || bytes >= max_bytes {
                    break;
                }
                bytes += d.len();
                want.push((*i, Bytes::from(d.clone())));
            }
            assert_eq!(got, want, "follow from {pos} ({max_chunks}, {max_bytes})");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// put/get/contains/run agree with a list model, on disk (with and without the memory
    /// tier), after reopening, and in memory-only mode.
    #[test]
    fn matches_model(sizes in proptest::collection::vec(0usize..3000, 1..12),
                     picks in proptest::collection::vec(any::<prop::sample::Index>(), 1..60),
                     memory_bytes in prop_oneof![Just(0u64), Just(1u64 << 20)]) {
        let pool: Vec<_> = sizes.iter().enumerate()
            .map(|(n, &len)| (id(n as u64), data(n as u64, len)))
            .collect();
        let tmp = tempfile::tempdir().unwrap();
        let cfg = StoreConfig { memory_bytes, ..disk_cfg(tmp.path()) };
        let mut model = Model { log: Vec::new() };
        {
            let store = Store::open(cfg.clone()).unwrap();
            let mem = Store::open(StoreConfig::memory(1 << 30)).unwrap();
            for (i, pick) in picks.iter().enumerate() {
                let (cid, d) = &pool[pick.index(pool.len())];
                prop_assert_eq!(store.put(*cid, d).unwrap(), Seq(i as u64));
                prop_assert_eq!(mem.put(*cid, d).unwrap(), Seq(i as u64));
                model.log.push((*cid, d.clone()));
            }
            check_against_model(&store, &model, &pool);
            check_against_model(&mem, &model, &pool);
            prop_assert_eq!(store.stats().records, picks.len() as u64);
        }
        let store = Store::open(cfg).unwrap();
        check_against_model(&store, &model, &pool);
        // The log continues after the highest seq on disk.
        prop_assert_eq!(store.put(id(999), b"x").unwrap(), Seq(picks.len() as u64));
        prop_assert_eq!(store.stats().torn_tails, 0);
    }

    /// A torn tail (cut anywhere, garbage appended) loses exactly the records not wholly before
    /// the cut; the store then appends after the last valid record and reopens cleanly.
    #[test]
    fn torn_tail_is_discarded(sizes in proptest::collection::vec(0usize..2000, 1..20),
                              cut: prop::sample::Index,
                              garbage in proptest::collection::vec(any::<u8>(), 0..200)) {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = disk_cfg(tmp.path());
        let mut ends = Vec::new();
        {
            let store = Store::open(cfg.clone()).unwrap();
            let mut end = 0u64;
            for (n, &len) in sizes.iter().enumerate() {
                store.put(id(n as u64), &data(n as u64, len)).unwrap();
                end += (HEADER_LEN + len) as u64;
                ends.push(end);
            }
        }
        let files = segment_files(tmp.path());
        prop_assert_eq!(files.len(), 1);
        let total = *ends.last().unwrap();
        let cut = cut.index(total as usize + 1) as u64;
        {
            let f = OpenOptions::new().write(true).open(&files[0]).unwrap();
            f.set_len(cut).unwrap();
            let mut f = OpenOptions::new().append(true).open(&files[0]).unwrap();
            f.write_all(&garbage).unwrap();
        }
        let store = Store::open(cfg.clone()).unwrap();
        let kept = ends.iter().filter(|&&e| e <= cut).count();
        for (n, &len) in sizes.iter().enumerate() {
            let got = store.get(&id(n as u64));
            let want = data(n as u64, len);
            if n < kept {
                prop_assert_eq!(got.as_deref(), Some(&want[..]));
            } else {
                prop_assert_eq!(got, None);
                prop_assert!(!store.contains(&id(n as u64)));
            }
        }
        let valid = if kept == 0 { 0 } else { ends[kept - 1] };
        let st = store.stats();
        prop_assert_eq!(st.disk_bytes, valid);
        prop_assert_eq!(fs::metadata(&files[0]).unwrap().len(), valid);
        let torn = cut + garbage.len() as u64 > valid;
        prop_assert_eq!(st.torn_tails, u64::from(torn));
        prop_assert_eq!(st.discarded_bytes, cut + garbage.len() as u64 - valid);
        // New records go right after the valid prefix and survive another reopen.
        let seq = store.put(id(500), b"after the tear").unwrap();
        prop_assert_eq!(seq, Seq(kept as u64));
        drop(store);
        let store = Store::open(cfg).unwrap();
        prop_assert_eq!(store.stats().torn_tails, 0);
        let got = store.get(&id(500));
        prop_assert_eq!(got.as_deref(), Some(&b"after the tear"[..]));
        prop_assert_eq!(store.stats().records, kept as u64 + 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Arbitrary segment contents (valid records, splices of them, random bytes) never make
    /// `open` fail or panic, and everything the store then returns passes verification.
    #[test]
    fn open_survives_arbitrary_segments(
        files in proptest::collection::vec(
            proptest::collection::vec((any::<bool>(), 0usize..600,
                                       proptest::collection::vec(any::<u8>(), 0..80)), 0..12),
            1..4),
        seq_base in 0u64..4,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let mut written = Vec::new();
        for (f, parts) in files.iter().enumerate() {
            let mut bytes = Vec::new();
            for (k, (valid, len, junk)) in parts.iter().enumerate() {
                if *valid {
                    let n = (f * 100 + k) as u64;
                    let d = data(n, *len);
                    // Seqs may repeat or go backwards across files: the scanner must cope.
                    let repr = RecordRepr { seq: seq_base * f as u64 + k as u64, id: id(n), len: d.len() as u32, prev: None, peer: None };
                    let mut rec = vec![0; repr.buffer_len()];
                    repr.emit(&mut rec, &d);
                    bytes.extend_from_slice(&rec);
                    written.push((id(n), d));
                } else {
                    bytes.extend_from_slice(junk);
                }
            }
            fs::write(tmp.path().join(segment_name(f as u32)), &bytes).unwrap();
        }
        let store = Store::open(disk_cfg(tmp.path())).unwrap();
        for (cid, d) in &written {
            if let Some(got) = store.get(cid) {
                prop_assert_eq!(&got[..], &d[..]);
            }
        }
        prop_assert_eq!(store.stats().corrupt_reads, 0);
        prop_assert_eq!(store.stats().disk_bytes, dir_bytes(tmp.path()));
    }
}

#[test]
fn corrupt_byte_is_never_returned() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = disk_cfg(tmp.path());
    let store = Store::open(cfg.clone()).unwrap();
    for n in 0..10 {
        store.put(id(n), &data(n, 100)).unwrap();
    }
    // Flip one data byte of record 4.
    let file = &segment_files(tmp.path())[0];
    let mut bytes = fs::read(file).unwrap();
    let at = 4 * (HEADER_LEN + 100) + HEADER_LEN + 17;
    bytes[at] ^= 0x40;
    fs::write(file, &bytes).unwrap();

    assert_eq!(store.get(&id(4)), None);
    assert_eq!(store.stats().corrupt_reads, 1);
    assert_eq!(
        store.run(&id(3), 3),
        None,
        "a run through the corrupt record fails"
    );
    assert_eq!(store.get(&id(5)).as_deref(), Some(&data(5, 100)[..]));
    drop(store);

    // At open the corrupt record ends the (newest) segment's valid prefix.
    let store = Store::open(cfg).unwrap();
    for n in 0..10 {
        assert_eq!(store.contains(&id(n)), n < 4, "chunk {n}");
    }
    assert_eq!(store.stats().torn_tails, 1);
    assert_eq!(store.stats().discarded_bytes, 6 * (HEADER_LEN as u64 + 100));
    assert_eq!(store.run(&id(0), 4).map(|r| r.len()), Some(4));
}

#[test]
fn corrupt_sealed_segment_keeps_its_prefix_and_runs_do_not_cross_the_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        segment_bytes: 4096,
        ..disk_cfg(tmp.path())
    };
    let rec = HEADER_LEN + 500;
    let per_segment = 4096 / rec; // 7
    {
        let store = Store::open(cfg.clone()).unwrap();
        for n in 0..(3 * per_segment as u64) {
            store.put(id(n), &data(n, 500)).unwrap();
        }
        assert_eq!(store.stats().segments, 3);
    }
    // Corrupt the header of record 2 of the first (sealed) segment, and remove the summaries
    // so that the segments are scanned (see `a_summarized_segment_loses_only_its_corrupt_record`).
    let file = &segment_files(tmp.path())[0];
    let mut bytes = fs::read(file).unwrap();
    bytes[2 * rec + 20] ^= 1;
    fs::write(file, &bytes).unwrap();
    assert_eq!(remove_summaries(tmp.path()), 2);

    let store = Store::open(cfg).unwrap();
    let st = store.stats();
    assert_eq!(st.summarized_segments, 0);
    assert_eq!(st.torn_tails, 1);
    assert_eq!(st.discarded_bytes, ((per_segment - 2) * rec) as u64);
    // The sealed file keeps its length (it is still on disk) and counts toward disk usage.
    assert_eq!(st.disk_bytes, dir_bytes(tmp.path()));
    for n in 0..(3 * per_segment as u64) {
        assert_eq!(
            store.contains(&id(n)),
            !(2..per_segment as u64).contains(&n),
            "chunk {n}"
        );
    }
    assert_eq!(store.run(&id(0), 2).map(|r| r.len()), Some(2));
    assert_eq!(
        store.run(&id(1), 2),
        None,
        "seq 2.. were lost: no run across the gap"
    );
    let p = per_segment as u64;
    let run = store.run(&id(p), (2 * p) as u32).unwrap();
    assert_eq!(
        run.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        (p..3 * p).map(id).collect::<Vec<_>>()
    );
}

#[test]
fn eviction_bounds_disk_and_runs_never_reach_evicted_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let seg = 4096u64;
    let max = 4 * seg;
    let cfg = StoreConfig {
        max_bytes: max,
        segment_bytes: seg,
        memory_bytes: 8192,
        sync_bytes: Some(2048),
        ..disk_cfg(tmp.path())
    };
    let store = Store::open(cfg.clone()).unwrap();
    let mut lens = Vec::new();
    for n in 0..2000u64 {
        let len = (n as usize * 37) % 900;
        lens.push(len);
        store.put(id(n), &data(n, len)).unwrap();
        let st = store.stats();
        assert!(
            st.disk_bytes <= max + seg,
            "disk {} after {n}",
            st.disk_bytes
        );
        if n % 97 == 0 {
            assert_eq!(st.disk_bytes, dir_bytes(tmp.path()));
        }
    }
    let st = store.stats();
    assert!(st.evicted_segments > 0 && st.evicted_records > 0);
    assert!(st.syncs > 0);
    assert_eq!(st.chunks + st.evicted_records, 2000);
    assert_eq!(st.segments as usize, segment_files(tmp.path()).len());
    // The retained chunks are exactly a suffix of the history.
    let oldest = (0..2000).find(|&n| store.contains(&id(n))).unwrap();
    for n in oldest..2000 {
        assert_eq!(
            store.get(&id(n)).as_deref(),
            Some(&data(n, lens[n as usize])[..])
        );
    }
    for n in 0..oldest {
        assert_eq!(store.get(&id(n)), None);
        assert_eq!(store.run(&id(n), 1), None);
    }
    // A run from the oldest retained chunk covers everything up to the newest, and not one more.
    let all = (2000 - oldest) as u32;
    let run = store.run(&id(oldest), all).unwrap();
    assert!(run.iter().all(|(i, _)| store.contains(i)));
    assert_eq!(store.run(&id(oldest), all + 1), None);
    drop(store);
    let store = Store::open(cfg).unwrap();
    assert_eq!(store.stats().disk_bytes, dir_bytes(tmp.path()));
    assert_eq!(
        store.run(&id(oldest), all).map(|r| r.len()),
        Some(all as usize)
    );
}

#[test]
fn eviction_keeps_a_newer_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        max_bytes: 8192,
        segment_bytes: 4096,
        ..disk_cfg(tmp.path())
    };
    let store = Store::open(cfg).unwrap();
    store.put(id(0), &data(0, 1000)).unwrap();
    store.put(id(1), &data(1, 1000)).unwrap();
    // Re-append chunk 0 in a later segment, then push the first segment out.
    for n in 2..20 {
        store.put(id(n), &data(n, 1000)).unwrap();
        if n == 5 {
            store.put(id(0), &data(0, 1000)).unwrap();
        }
        if !store.contains(&id(1)) {
            break;
        }
    }
    assert!(!store.contains(&id(1)), "first segment evicted");
    assert_eq!(store.get(&id(0)).as_deref(), Some(&data(0, 1000)[..]));
}

#[test]
fn purge_drops_everything_and_the_store_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        segment_bytes: 4096,
        memory_bytes: 1 << 20,
        ..disk_cfg(tmp.path())
    };
    for store in [
        Store::open(cfg.clone()).unwrap(),
        Store::open(StoreConfig::memory(1 << 20)).unwrap(),
    ] {
        for n in 0..20 {
            store.put(id(n), &data(n, 700)).unwrap();
        }
        store.purge().unwrap();
        let st = store.stats();
        assert_eq!(
            (st.chunks, st.records, st.disk_bytes, st.memory_bytes),
            (0, 0, 0, 0)
        );
        assert_eq!(st.evicted_records, 20);
        assert_eq!(store.get(&id(3)), None, "not even from the memory tier");
        assert_eq!(store.put(id(100), b"again").unwrap(), Seq(20));
        assert_eq!(store.run(&id(100), 1).map(|r| r.len()), Some(1));
    }
    assert_eq!(segment_files(tmp.path()).len(), 1);
    let store = Store::open(cfg).unwrap();
    assert_eq!(store.stats().records, 1);
    assert!(store.contains(&id(100)) && !store.contains(&id(0)));
}

#[test]
fn follow_stops_at_gaps_and_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(disk_cfg(tmp.path())).unwrap();
    for n in 0..10 {
        store.put(id(n), &data(n, 100)).unwrap();
    }
    let file = &segment_files(tmp.path())[0];
    let mut bytes = fs::read(file).unwrap();
    bytes[6 * (HEADER_LEN + 100) + HEADER_LEN] ^= 1;
    fs::write(file, &bytes).unwrap();
    let got: Vec<_> = store
        .follow(&id(2), 100, usize::MAX)
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    assert_eq!(got, (2..6).map(id).collect::<Vec<_>>());
    assert!(store.follow(&id(77), 100, usize::MAX).is_empty());
}

#[test]
fn memory_only_store_is_bounded_fifo() {
    let store = Store::open(StoreConfig::memory(10_000)).unwrap();
    for n in 0..100 {
        store.put(id(n), &data(n, 1000)).unwrap();
        assert!(store.stats().memory_bytes <= 10_000);
    }
    let st = store.stats();
    assert_eq!(
        (st.chunks, st.evicted_records, st.disk_bytes, st.segments),
        (10, 90, 0, 0)
    );
    assert!(store.contains(&id(99)) && store.contains(&id(90)) && !store.contains(&id(89)));
    assert_eq!(store.run(&id(90), 10).map(|r| r.len()), Some(10));
    assert_eq!(store.run(&id(89), 1), None);
    store.flush().unwrap();
}

#[test]
fn memory_tier_serves_hits() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        memory_bytes: 1 << 20,
        ..disk_cfg(tmp.path())
    };
    let store = Store::open(cfg.clone()).unwrap();
    store.put(id(1), &data(1, 1000)).unwrap();
    assert!(store.get(&id(1)).is_some());
    assert_eq!(store.stats().memory_hits, 1);
    assert!(store.stats().memory_bytes >= 1000);
    drop(store);
    // After a restart the first read comes from disk, the second from the tier.
    let store = Store::open(cfg).unwrap();
    assert!(store.get(&id(1)).is_some());
    assert_eq!(store.stats().memory_hits, 0);
    assert!(store.get(&id(1)).is_some());
    let st = store.stats();
    assert_eq!((st.memory_hits, st.hits, st.misses), (1, 2, 0));
    assert!(store.get(&id(2)).is_none());
    assert_eq!(store.stats().misses, 1);
}

#[test]
fn concurrent_put_and_get() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        segment_bytes: 64 << 10,
        max_bytes: 64 << 20,
        memory_bytes: 32 << 10,
        ..disk_cfg(tmp.path())
    };
    let store = Arc::new(Store::open(cfg.clone()).unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..500u64 {
                    let n = t * 10_000 + i;
                    store
                        .put(id(n), &data(n, 300 + (i as usize % 500)))
                        .unwrap();
                    // Read back our own and a neighbour's chunk (which may not be there yet).
                    assert_eq!(
                        store.get(&id(n)).as_deref(),
                        Some(&data(n, 300 + (i as usize % 500))[..])
                    );
                    let other = ((t + 1) % 4) * 10_000 + i / 2;
                    if let Some(d) = store.get(&id(other)) {
                        assert_eq!(&d[..], &data(other, 300 + ((i / 2) as usize % 500))[..]);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(store.stats().records, 2000);
    assert_eq!(store.stats().corrupt_reads, 0);
    drop(Arc::try_unwrap(store).unwrap());
    let store = Store::open(cfg).unwrap();
    for t in 0..4u64 {
        for i in 0..500u64 {
            let n = t * 10_000 + i;
            assert_eq!(
                store.get(&id(n)).as_deref(),
                Some(&data(n, 300 + (i as usize % 500))[..])
            );
        }
    }
}

#[test]
fn bad_config_and_oversized_chunks_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = [
        StoreConfig {
            segment_bytes: 100,
            ..disk_cfg(tmp.path())
        },
        StoreConfig {
            max_bytes: 20 << 20,
            ..disk_cfg(tmp.path())
        },
        StoreConfig {
            sync_bytes: Some(0),
            ..disk_cfg(tmp.path())
        },
        StoreConfig::memory(0),
    ];
    for cfg in bad {
        assert!(matches!(
            Store::open(cfg),
            Err(StoreError::InvalidConfig(_))
        ));
    }
    let store = Store::open(disk_cfg(tmp.path())).unwrap();
    let big = vec![0u8; MAX_CHUNK_LEN + 1];
    assert!(matches!(
        store.put(id(0), &big),
        Err(StoreError::ChunkTooLarge { .. })
    ));
    assert_eq!(store.stats().records, 0);
}

#[test]
fn default_configs_open() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StoreConfig::disk(tmp.path().join("nested/store"), 1 << 20);
    assert_eq!(cfg.segment_bytes, 256 << 10);
    let store = Store::open(cfg).unwrap();
    store.put(id(1), b"abc").unwrap();
    store.flush().unwrap();
    assert_eq!(store.stats().syncs, 1);
    assert_eq!(segment_files(&tmp.path().join("nested/store")).len(), 1);
}

#[test]
fn a_directory_is_opened_by_one_store_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(disk_cfg(tmp.path())).unwrap();
    assert!(matches!(
        Store::open(disk_cfg(tmp.path())),
        Err(StoreError::Locked { .. })
    ));
    drop(store);
    Store::open(disk_cfg(tmp.path())).unwrap();
}

#[test]
fn foreign_files_are_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("notes.txt"), b"hello").unwrap();
    fs::write(tmp.path().join("seg-12.hws"), b"bad name").unwrap();
    let store = Store::open(disk_cfg(tmp.path())).unwrap();
    assert_eq!(store.stats().segments, 1);
    assert_eq!(store.stats().torn_tails, 0);
}

#[test]
fn segment_names_round_trip() {
    for n in [0, 1, 42, u32::MAX] {
        assert_eq!(parse_segment_name(&segment_name(n), SEGMENT_EXT), Some(n));
    }
    assert_eq!(parse_segment_name("seg-000000004x.hws", SEGMENT_EXT), None);
    assert_eq!(parse_segment_name("seg-0000000042.tmp", SEGMENT_EXT), None);
}

#[test]
fn store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Store>();
}

#[test]
fn rolls_leave_their_syncs_to_the_next_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        segment_bytes: 8 << 10,
        ..disk_cfg(tmp.path())
    };
    let store = Store::open(cfg.clone()).unwrap();
    // 40 records of 1 KiB over 8 KiB segments: several rolls, none of which may wait for the
    // disk inside `put`.
    for n in 0..40 {
        store.put(id(n), &data(n, 1000)).unwrap();
    }
    let sealed = segment_files(tmp.path()).len() as u64 - 1;
    assert!(sealed >= 4, "{sealed} sealed segments");
    assert_eq!(store.stats().syncs, 0);
    // One flush syncs every sealed segment and the active one; a second has nothing to do.
    store.flush().unwrap();
    assert_eq!(store.stats().syncs, sealed + 1);
    store.flush().unwrap();
    assert_eq!(store.stats().syncs, sealed + 1);
    // A roll with nothing written since the flush leaves nothing to sync but the new file's
    // directory entry.
    for n in 40..48 {
        store.put(id(n), &data(n, 1000)).unwrap();
    }
    store.flush().unwrap();
    let after = store.stats().syncs;
    assert!(after > sealed + 1, "{after}");
    drop(store);
    let store = Store::open(cfg).unwrap();
    for n in 0..48 {
        assert_eq!(
            store.get(&id(n)).as_deref(),
            Some(&data(n, 1000)[..]),
            "{n}"
        );
    }
}

#[test]
fn a_size_based_sync_covers_the_segments_sealed_before_it() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        segment_bytes: 8 << 10,
        sync_bytes: Some(20 << 10),
        ..disk_cfg(tmp.path())
    };
    let store = Store::open(cfg).unwrap();
    // The 20 KiB are counted across the 8 KiB segments: the first sync comes after about 20
    // records, and syncs the segments sealed before it as well as the active one.
    let mut n = 0;
    while store.stats().syncs == 0 {
        store.put(id(n), &data(n, 1000)).unwrap();
        n += 1;
        assert!(n < 40, "no size-based sync");
    }
    assert!(n >= 18, "synced after {n} records");
    assert_eq!(store.stats().syncs, segment_files(tmp.path()).len() as u64);
}

#[test]
fn deferred_removal_leaves_evicted_files_to_the_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let seg = 4096u64;
    let max = 4 * seg;
    let cfg = StoreConfig {
        max_bytes: max,
        segment_bytes: seg,
        deferred_removal: true,
        ..disk_cfg(tmp.path())
    };
    let store = Store::open(cfg.clone()).unwrap();
    for n in 0..200u64 {
        store.put(id(n), &data(n, 500)).unwrap();
        // The index stays within its bound at once; the files wait for the flush.
        assert!(store.stats().disk_bytes <= max + seg);
    }
    let st = store.stats();
    assert!(st.evicted_segments > 4, "{st:?}");
    let files = segment_files(tmp.path()).len() as u64;
    assert_eq!(files, st.segments + st.evicted_segments);
    let oldest = (0..200).find(|&n| store.contains(&id(n))).unwrap();
    assert!(oldest > 0);
    assert_eq!(
        store.get(&id(0)),
        None,
        "an evicted chunk is never read back"
    );
    store.flush().unwrap();
    assert_eq!(segment_files(tmp.path()).len() as u64, st.segments);
    assert_eq!(store.stats().disk_bytes, dir_bytes(tmp.path()));
    for n in oldest..200 {
        assert_eq!(store.get(&id(n)).as_deref(), Some(&data(n, 500)[..]));
    }
    // Evictions after the flush are deleted by the drop's flush; a reopened store holds
    // exactly what the index held.
    for n in 200..260u64 {
        store.put(id(n), &data(n, 500)).unwrap();
    }
    let segments = store.stats().segments;
    drop(store);
    assert_eq!(segment_files(tmp.path()).len() as u64, segments);
    let store = Store::open(cfg).unwrap();
    assert_eq!(store.stats().disk_bytes, dir_bytes(tmp.path()));
    assert_eq!(store.get(&id(259)).as_deref(), Some(&data(259, 500)[..]));
}

/// A store of 4 KiB segments holding `n` records of 500 bytes (6 per segment), dropped (so
/// flushed: every sealed segment's summary written).
fn summarized_store(dir: &Path, n: u64) -> StoreConfig {
    let cfg = StoreConfig {
        segment_bytes: 4096,
        ..disk_cfg(dir)
    };
    let store = Store::open(cfg.clone()).unwrap();
    for k in 0..n {
        store.put(id(k), &data(k, 500)).unwrap();
    }
    cfg
}

/// Asserts that `store` returns chunks `0..n` of 500 bytes, each intact.
fn assert_holds_all(store: &Store, n: u64) {
    for k in 0..n {
        assert_eq!(
            store.get(&id(k)).as_deref(),
            Some(&data(k, 500)[..]),
            "chunk {k}"
        );
    }
}

/// Everything a reader can see of `store` for chunks `0..n`.
fn contents(store: &Store, n: u64) -> Vec<Option<Vec<u8>>> {
    (0..n)
        .map(|k| store.get(&id(k)).map(|d| d.to_vec()))
        .collect()
}

#[test]
fn sealed_segments_open_from_their_summaries() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = summarized_store(tmp.path(), 30);
    let segments = segment_files(tmp.path());
    assert_eq!(segments.len(), 5);
    // One summary per sealed segment, none for the newest (still appended to).
    let summaries = summary_files(tmp.path());
    assert_eq!(
        summaries,
        segments[..4]
            .iter()
            .map(|p| p.with_extension("hwx"))
            .collect::<Vec<_>>()
    );

    let store = Store::open(cfg.clone()).unwrap();
    let st = store.stats();
    assert_eq!(st.summarized_segments, 4);
    assert_eq!((st.records, st.chunks, st.segments), (30, 30, 5));
    assert_eq!(st.disk_bytes, dir_bytes(tmp.path()));
    assert_holds_all(&store, 30);
    // Seqs continue after the summarized ones: a run crosses every segment into a new record.
    store.put(id(30), &data(30, 500)).unwrap();
    let run = store.run(&id(0), 31).unwrap();
    assert_eq!(
        run.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        (0..31).map(id).collect::<Vec<_>>()
    );
    assert_eq!(store.stats().corrupt_reads, 0);
    drop(store);

    // The same store opened by scanning every segment: the same contents and counts.
    let summarized = Store::open(cfg.clone()).unwrap();
    let want = (contents(&summarized, 31), summarized.stats().records);
    drop(summarized);
    assert!(remove_summaries(tmp.path()) > 0);
    let scanned = Store::open(cfg.clone()).unwrap();
    assert_eq!(scanned.stats().summarized_segments, 0);
    assert_eq!((contents(&scanned, 31), scanned.stats().records), want);
    drop(scanned);
    // The scan wrote the summaries of the segments it read whole (a store from before
    // summaries gets them at its first open).
    assert_eq!(summary_files(tmp.path()).len(), 5);
    let again = Store::open(cfg).unwrap();
    assert_eq!(again.stats().summarized_segments, 5);
    assert_eq!((contents(&again, 31), again.stats().records), want);
}

#[test]
fn a_summary_that_does_not_describe_its_segment_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = summarized_store(tmp.path(), 30);
    let segments = segment_files(tmp.path());
    let summaries = summary_files(tmp.path());
    // Summary 0: one flipped bit. Segment 1: grown by a torn record after its summary was
    // written. A summary of segment 77, which does not exist.
    let mut bytes = fs::read(&summaries[0]).unwrap();
    bytes[100] ^= 4;
    fs::write(&summaries[0], bytes).unwrap();
    let mut seg1 = fs::read(&segments[1]).unwrap();
    seg1.extend_from_slice(&[0x48, 0x57, 0x43, 2, 9]);
    fs::write(&segments[1], seg1).unwrap();
    let orphan = tmp.path().join(segment_name(77)).with_extension("hwx");
    fs::copy(&summaries[2], &orphan).unwrap();

    let store = Store::open(cfg).unwrap();
    let st = store.stats();
    assert_eq!(st.summarized_segments, 2, "segments 2 and 3 only");
    assert_eq!(st.torn_tails, 1, "segment 1 was scanned and its tail found");
    assert!(!orphan.exists(), "a summary without its segment is deleted");
    assert_holds_all(&store, 30);
    assert_eq!(store.run(&id(0), 30).map(|r| r.len()), Some(30));
}

#[test]
fn a_summarized_segment_loses_only_its_corrupt_record() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = summarized_store(tmp.path(), 30);
    let rec = HEADER_LEN + 500;
    // A flipped bit in the data of record 2 of the first segment: its summary still matches
    // the file (same length), so the record is indexed and its CRC is checked when read.
    let file = &segment_files(tmp.path())[0];
    let mut bytes = fs::read(file).unwrap();
    bytes[2 * rec + HEADER_LEN + 7] ^= 1;
    fs::write(file, &bytes).unwrap();

    let store = Store::open(cfg).unwrap();
    assert_eq!(store.stats().summarized_segments, 4);
    for k in 0..30 {
        let want = (k != 2).then(|| data(k, 500));
        assert_eq!(store.get(&id(k)).map(|d| d.to_vec()), want, "chunk {k}");
    }
    assert_eq!(store.stats().corrupt_reads, 1);
    assert_eq!(
        store.run(&id(1), 2),
        None,
        "no run through the corrupt record"
    );
    assert_eq!(store.run(&id(3), 27).map(|r| r.len()), Some(27));
}

#[test]
fn evicted_segments_take_their_summaries_with_them() {
    for deferred_removal in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            max_bytes: 4 * 4096,
            segment_bytes: 4096,
            deferred_removal,
            ..disk_cfg(tmp.path())
        };
        let store = Store::open(cfg.clone()).unwrap();
        for k in 0..100u64 {
            store.put(id(k), &data(k, 500)).unwrap();
            if k % 10 == 0 {
                store.flush().unwrap();
            }
        }
        store.flush().unwrap();
        let st = store.stats();
        assert!(st.evicted_segments > 5, "{st:?}");
        let segments = segment_files(tmp.path());
        assert_eq!(segments.len() as u64, st.segments);
        // Every summary belongs to a segment still on disk.
        for s in summary_files(tmp.path()) {
            assert!(segments.contains(&s.with_extension("hws")), "{s:?}");
        }
        drop(store);
        let store = Store::open(cfg).unwrap();
        assert_eq!(store.stats().summarized_segments, st.segments - 1);
        assert_eq!(store.get(&id(99)).as_deref(), Some(&data(99, 500)[..]));
    }
}

#[test]
fn the_newest_segment_is_summarized_with_its_records_from_before_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    // 27 records, 6 per segment: the newest segment (the fifth) holds records 24 to 26 when
    // the store restarts, and gets 27 to 29 after it.
    let cfg = summarized_store(tmp.path(), 27);
    {
        let store = Store::open(cfg.clone()).unwrap();
        for k in 27..40 {
            store.put(id(k), &data(k, 500)).unwrap();
        }
    }
    let store = Store::open(cfg).unwrap();
    assert_eq!(store.stats().summarized_segments, 6);
    assert_eq!(store.stats().segments, 7);
    assert_holds_all(&store, 40);
    assert_eq!(store.run(&id(0), 40).map(|r| r.len()), Some(40));
}

#[test]
fn an_oversized_summary_file_is_neither_read_nor_trusted() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = summarized_store(tmp.path(), 30);
    // A sparse 1 TiB file in place of the first summary: reading it, or sizing the index from
    // it, would exhaust memory.
    let summaries = summary_files(tmp.path());
    fs::OpenOptions::new()
        .write(true)
        .open(&summaries[0])
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    let store = Store::open(cfg).unwrap();
    assert_eq!(store.stats().summarized_segments, 3);
    assert_holds_all(&store, 30);
}
