//! Codec throughput on 64 MiB of DOC-like data (the lab's corpus generator).
//!
//! - `encode/first_pass`: fresh stores, everything is literal: chunking, hashing, store
//!   inserts, zstd level 1. Target ≥ 200 MB/s per core.
//! - `encode/second_pass`: the peer holds everything: chunking, hashing, store probes and a
//!   handful of run tokens. Target ≥ 500 MB/s per core.
//! - `decode/second_pass`: resolving those runs from the store and re-hashing every chunk.
//!   `decode/first_pass`: decompressing and hashing literals. Target ≥ 1 GB/s per core.
//! - `encode/zstd_level`: first pass at levels 1 and 3, which chose the default level.
//! - `chunk/avg`: chunking alone at 512 B, 1 KiB, 4 KiB and 8 KiB averages.
//! - `ids/one_by_one`, `ids/batch`: fingerprinting 16 MiB of default-size chunks with
//!   `DedupKey::chunk_id` per chunk and with the `BatchHasher` per 128 KiB of chunks (a literal
//!   frame); `ids/batch_x16`, `ids/batch_x8`, `ids/batch_portable`: the same with each
//!   many-lane kernel this CPU runs (AVX-512, AVX2) and with none; `ids/whole`: the same bytes
//!   as one input, the ceiling of BLAKE3 on this core.
//!
//! `DEDUP_AVG=<bytes>` in the environment runs the codec benches at another average chunk size
//! (that is how the default was chosen; see `headway_dedup::chunker`); `DEDUP_FRAME=<bytes>`
//! another literal frame size (see `EncoderConfig::frame_bytes`).
//!
//! Time per iteration includes feeding the data in 64 KiB slices, as a shell would.

#![allow(missing_docs)] // criterion's macros generate undocumented items

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use headway_dedup::{
    ChunkParams, ChunkStore, Chunker, Decoder, DecoderConfig, DedupKey, Encoder, EncoderConfig,
    MemoryStore, PeerId,
};
use headway_io::simd::Blake3Lanes;
use headway_origin::corpus::{fill, Kind};

// The allocator the `headway` binary ships with, so the codec is measured as it runs there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIZE: usize = 64 << 20;
const SLICE: usize = 64 << 10;

fn key() -> DedupKey {
    DedupKey::new([0x42; 32])
}

fn data() -> Vec<u8> {
    let mut v = vec![0; SIZE];
    fill(Kind::Doc, 1, 0, &mut v);
    v
}

fn store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new(1 << 30))
}

fn encode(store: &Arc<MemoryStore>, cfg: EncoderConfig, data: &[u8]) -> Vec<u8> {
    let s: Arc<dyn ChunkStore> = store.clone();
    let mut enc = Encoder::new(cfg, s, key());
    let mut wire = Vec::new();
    for part in data.chunks(SLICE) {
        enc.handle_data(part).expect("not finished");
        while let Some(b) = enc.poll_transmit() {
            wire.extend_from_slice(&b);
        }
    }
    enc.finish();
    while let Some(b) = enc.poll_transmit() {
        wire.extend_from_slice(&b);
    }
    wire
}

fn decode(store: &Arc<MemoryStore>, wire: &[u8]) -> usize {
    let s: Arc<dyn ChunkStore> = store.clone();
    let mut dec = Decoder::new(
        DecoderConfig {
            peer: PeerId(0),
            ..DecoderConfig::default()
        },
        s,
        key(),
    );
    let mut n = 0;
    for part in wire.chunks(SLICE) {
        dec.handle_wire(part).expect("valid wire");
        while let Some(b) = dec.poll_output() {
            n += b.len();
        }
    }
    assert!(dec.is_finished());
    n
}

fn cfg(level: i32) -> EncoderConfig {
    // `DEDUP_AVG=1024 cargo bench …` measures another average chunk size (min avg/4, max 8×avg).
    let avg: u32 = std::env::var("DEDUP_AVG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ChunkParams::DEFAULT.avg());
    let defaults = EncoderConfig::default();
    // `DEDUP_FRAME=<bytes>` measures another literal frame size.
    let frame_bytes = std::env::var("DEDUP_FRAME")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(defaults.frame_bytes);
    EncoderConfig {
        peer: PeerId(1),
        chunks: ChunkParams::new(avg / 4, avg, (avg * 8).min(65535)).expect("valid chunk sizes"),
        level,
        frame_bytes,
        ..defaults
    }
}

fn benches(c: &mut Criterion) {
    let data = data();
    let mut g = c.benchmark_group("encode");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(SIZE as u64));
    for level in [1, 3] {
        g.bench_function(format!("first_pass_level{level}"), |b| {
            b.iter_batched(
                store,
                // Store and wire bytes are handed back: their teardown is not encoding.
                |s| {
                    let wire = encode(&s, cfg(level), &data);
                    (s, wire)
                },
                BatchSize::PerIteration,
            )
        });
    }
    let enc_store = store();
    let first = encode(&enc_store, cfg(1), &data);
    eprintln!(
        "first pass: {} wire bytes for {} ({:.2}:1)",
        first.len(),
        SIZE,
        SIZE as f64 / first.len() as f64
    );
    let second = encode(&enc_store, cfg(1), &data);
    eprintln!("second pass: {} wire bytes", second.len());
    eprintln!(
        "first pass at level 3: {} wire bytes",
        encode(&store(), cfg(3), &data).len()
    );
    g.bench_function("second_pass", |b| {
        b.iter(|| black_box(encode(&enc_store, cfg(1), &data).len()))
    });
    g.finish();

    let mut g = c.benchmark_group("decode");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(SIZE as u64));
    g.bench_function("first_pass", |b| {
        // The store is handed back so its teardown falls outside the timed routine.
        b.iter_batched(
            store,
            |s| {
                black_box(decode(&s, &first));
                s
            },
            BatchSize::PerIteration,
        )
    });
    let dec_store = store();
    assert_eq!(decode(&dec_store, &first), SIZE);
    g.bench_function("second_pass", |b| b.iter(|| decode(&dec_store, &second)));
    g.finish();

    let mut g = c.benchmark_group("ids");
    g.sample_size(10);
    let sample = &data[..16 << 20];
    g.throughput(Throughput::Bytes(sample.len() as u64));
    let mut batches: Vec<Vec<Bytes>> = Vec::new();
    let mut chunker = Chunker::new(ChunkParams::DEFAULT);
    for part in sample.chunks(128 << 10) {
        let mut batch = Vec::new();
        chunker.push(part, |c| batch.push(c));
        batches.push(batch);
    }
    chunker.flush(|c| batches.push(vec![c]));
    let k = key();
    g.bench_function("one_by_one", |b| {
        b.iter(|| {
            let mut n = 0u8;
            for c in batches.iter().flatten() {
                n ^= k.chunk_id(c).as_bytes()[0];
            }
            black_box(n)
        })
    });
    // The default (the widest kernel this CPU runs), then each kernel and none.
    let mut kinds = vec![("batch".to_owned(), k.batch_hasher())];
    for lanes in Blake3Lanes::available() {
        let name = format!("batch_x{}", lanes.lanes());
        kinds.push((name, k.batch_hasher().with_lanes(Some(lanes))));
    }
    kinds.push((
        "batch_portable".to_owned(),
        k.batch_hasher().with_lanes(None),
    ));
    for (name, mut hasher) in kinds {
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut n = 0u8;
                for batch in &batches {
                    for id in hasher.hash(batch) {
                        n ^= id.as_bytes()[0];
                    }
                }
                black_box(n)
            })
        });
    }
    g.bench_function("whole", |b| b.iter(|| black_box(k.chunk_id(sample))));
    g.finish();

    let mut g = c.benchmark_group("chunk");
    g.sample_size(10);
    let sample = &data[..16 << 20];
    g.throughput(Throughput::Bytes(sample.len() as u64));
    for (min, avg, max) in [
        (128, 512, 4096),
        (256, 1024, 8192),
        (1024, 4096, 32768),
        (2048, 8192, 65535),
    ] {
        let p = ChunkParams::new(min, avg, max).expect("valid params");
        g.bench_function(format!("avg{avg}"), |b| {
            b.iter(|| {
                let mut c = Chunker::new(p);
                let mut n = 0usize;
                for part in sample.chunks(SLICE) {
                    c.push(part, |_| n += 1);
                }
                c.flush(|_| n += 1);
                black_box(n)
            })
        });
    }
    g.finish();
}

criterion_group!(codec, benches);
criterion_main!(codec);
