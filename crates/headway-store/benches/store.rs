//! Put and get throughput of the chunk store for 1 KiB chunks: memory-only store, disk store with
//! reads served by the memory tier, and disk store with reads from the files (memory tier off).

// `criterion_main!` generates an undocumented `main`.
#![allow(missing_docs)]

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use headway_dedup::{ChunkStore, PeerId};
use headway_store::{ChunkId, DiskStore, Store, StoreConfig};

const CHUNK: usize = 1024;
const N: u64 = 4096;

fn id(n: u64) -> ChunkId {
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(&n.to_le_bytes());
    b[8..16].copy_from_slice(&n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
    ChunkId(b)
}

fn chunk(n: u64) -> Vec<u8> {
    (0..CHUNK)
        .map(|i| (n as usize).wrapping_mul(131).wrapping_add(i) as u8)
        .collect()
}

fn disk_cfg(dir: &std::path::Path, memory_bytes: u64) -> StoreConfig {
    StoreConfig {
        memory_bytes,
        // Size-based syncs as in production, so the put numbers include them.
        ..StoreConfig::disk(dir, 256 << 20)
    }
}

fn bench_put(c: &mut Criterion) {
    let mut g = c.benchmark_group("put_1k");
    g.throughput(Throughput::Bytes(N * CHUNK as u64));
    let chunks: Vec<_> = (0..N).map(|n| (id(n), chunk(n))).collect();
    g.bench_function("memory", |b| {
        b.iter_batched(
            || Store::open(StoreConfig::memory(1 << 30)).unwrap(),
            |store| {
                for (i, d) in &chunks {
                    store.put(*i, d).unwrap();
                }
                store
            },
            BatchSize::PerIteration,
        )
    });
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(disk_cfg(tmp.path(), 64 << 20)).unwrap();
    g.bench_function("disk", |b| {
        b.iter(|| {
            for (i, d) in &chunks {
                store.put(*i, d).unwrap();
            }
        })
    });
    // The same without size-based syncs: the cost of the store itself, apart from the disk.
    let tmp2 = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        sync_bytes: None,
        ..disk_cfg(tmp2.path(), 64 << 20)
    };
    let store = Store::open(cfg).unwrap();
    g.bench_function("disk_no_sync", |b| {
        b.iter(|| {
            for (i, d) in &chunks {
                store.put(*i, d).unwrap();
            }
        })
    });
    g.finish();
}

fn bench_get(c: &mut Criterion) {
    let mut g = c.benchmark_group("get_1k");
    g.throughput(Throughput::Bytes(N * CHUNK as u64));
    let mem = Store::open(StoreConfig::memory(1 << 30)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let tiered = Store::open(disk_cfg(&tmp.path().join("tiered"), 64 << 20)).unwrap();
    let disk = Store::open(disk_cfg(&tmp.path().join("disk"), 0)).unwrap();
    for n in 0..N {
        let d = chunk(n);
        for s in [&mem, &tiered, &disk] {
            s.put(id(n), &d).unwrap();
        }
    }
    for (name, store) in [
        ("memory", &mem),
        ("disk_memory_tier", &tiered),
        ("disk_pread", &disk),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                for n in 0..N {
                    black_box(store.get(&id(n)).unwrap());
                }
            })
        });
    }
    g.bench_function("run_64_disk_pread", |b| {
        b.iter(|| {
            for n in (0..N - 64).step_by(64) {
                black_box(disk.run(&id(n), 64).unwrap());
            }
        })
    });
    g.finish();
}

/// The codec's view: `record` of new chunks (append with successor link and peer), `record` of
/// held chunks (a second pass: probe only), and `follow` over successor links from the files.
fn bench_record(c: &mut Criterion) {
    let mut g = c.benchmark_group("record_1k");
    g.throughput(Throughput::Bytes(N * CHUNK as u64));
    let data: Vec<Bytes> = (0..N).map(|n| Bytes::from(chunk(n))).collect();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        sync_bytes: None,
        ..disk_cfg(&tmp.path().join("new"), 0)
    };
    let store = DiskStore::open(cfg).unwrap();
    let mut base = 0u64;
    g.bench_function("new_disk_no_sync", |b| {
        b.iter(|| {
            let mut prev = None;
            for (n, d) in data.iter().enumerate() {
                let i = id(base + n as u64);
                black_box(store.record(PeerId(1), prev.as_ref(), &i, d));
                prev = Some(i);
            }
            base += N;
        })
    });
    // The same records through `record_many`, 128 at a time (about what one 256 KiB frame
    // of 2 KiB chunks records): one write per batch instead of one per record.
    let batched = DiskStore::open(StoreConfig {
        sync_bytes: None,
        ..disk_cfg(&tmp.path().join("many"), 0)
    })
    .unwrap();
    let mut base = 0u64;
    let mut probes = Vec::new();
    g.bench_function("new_disk_no_sync_many", |b| {
        b.iter(|| {
            let batch: Vec<(ChunkId, Bytes)> = data
                .iter()
                .enumerate()
                .map(|(n, d)| (id(base + n as u64), d.clone()))
                .collect();
            for part in batch.chunks(128) {
                probes.clear();
                batched.record_many(PeerId(1), None, part, &mut probes);
            }
            black_box(&probes);
            base += N;
        })
    });
    let held = DiskStore::open(disk_cfg(&tmp.path().join("held"), 0)).unwrap();
    let pass = |s: &DiskStore| {
        let mut prev = None;
        for (n, d) in data.iter().enumerate() {
            let i = id(n as u64);
            black_box(s.record(PeerId(1), prev.as_ref(), &i, d));
            prev = Some(i);
        }
    };
    pass(&held);
    g.bench_function("held", |b| b.iter(|| pass(&held)));
    g.bench_function("follow_64_disk_pread", |b| {
        b.iter(|| {
            for n in (0..N - 64).step_by(64) {
                black_box(held.follow(&id(n), 64, usize::MAX));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench_put, bench_get, bench_record);
criterion_main!(benches);
