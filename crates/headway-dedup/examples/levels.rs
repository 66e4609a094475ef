//! The first pass of DOC-like data at each zstd level: encoder throughput and wire ratio,
//! the measurement behind the appliance's level per link rate
//! (`headway_wanopt`'s `zstd_level_for`).
//!
//! ```text
//! cargo run --release -p headway-dedup --example levels -- [MIB] [LEVEL…]
//! ```
//!
//! Encodes MIB (default 8) MiB of the lab corpus's DOC-like data into fresh stores at each
//! LEVEL (default 1 3 4 9 13 15 19), fed in 64 KiB slices as the appliance reads them, three
//! times each, and prints the median time's MiB/s, the wire bytes, the ratio, and the size of
//! a zstd context after compressing one 256 KiB frame (the largest) at that level.

use std::sync::Arc;

use headway_core::clock::SystemClock;
use headway_dedup::{ChunkStore, DedupKey, Encoder, EncoderConfig, MemoryStore, PeerId};
use headway_origin::corpus::{fill, Kind};

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let mut levels: Vec<i32> = args.filter_map(|a| a.parse().ok()).collect();
    if levels.is_empty() {
        levels = vec![1, 3, 4, 9, 13, 15, 19];
    }
    let mut data = vec![0; mib << 20];
    fill(Kind::Doc, 1, 0, &mut data);
    println!("| level | encoder MiB/s | wire bytes | ratio | zstd context |");
    println!("|---:|---:|---:|---:|---:|");
    for level in levels {
        let mut runs = Vec::new();
        let mut wire = 0;
        for _ in 0..3 {
            let store: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new(1 << 30));
            let cfg = EncoderConfig {
                peer: PeerId(1),
                level,
                ..EncoderConfig::default()
            };
            let mut enc = Encoder::new(cfg, store, DedupKey::new([0x42; 32]));
            let start = SystemClock::now();
            wire = 0;
            for part in data.chunks(64 << 10) {
                enc.handle_data(part).expect("not finished");
                while let Some(b) = enc.poll_transmit() {
                    wire += b.len();
                }
            }
            enc.finish();
            while let Some(b) = enc.poll_transmit() {
                wire += b.len();
            }
            runs.push(start.elapsed().as_secs_f64());
        }
        runs.sort_by(f64::total_cmp);
        let mut ctx = zstd::zstd_safe::CCtx::create();
        let frame = &data[..data.len().min(256 << 10)];
        let mut out = Vec::with_capacity(frame.len() + 1024);
        ctx.compress(&mut out, frame, level)
            .expect("the output buffer holds any frame");
        println!(
            "| {level} | {:.1} | {wire} | {:.3} | {:.2} MB |",
            mib as f64 / runs[1],
            data.len() as f64 / wire as f64,
            ctx.sizeof() as f64 / 1e6
        );
    }
}
