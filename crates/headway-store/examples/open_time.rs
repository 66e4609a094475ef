//! How long a disk store takes to open: from its segment summaries, and by scanning every
//! segment (the summaries set aside for that open), side by side.
//!
//! ```text
//! cargo run --release -p headway-store --example open_time -- DIR [RECORDS] [--cold]
//! ```
//!
//! With `RECORDS`, first fills a fresh store in `DIR` (2 GiB bound, 64 MiB segments) with that
//! many distinct 1,400-byte chunks, flushed every 20,000 records as the appliance's once-a-second
//! flush would (1.4 million fill the 2 GiB). Then opens the store in `DIR` three times each way,
//! alternating, and prints every time and the median of each. With `--cold` (root only) the page
//! cache is dropped before every open, as after a reboot.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use headway_core::clock::SystemClock;
use headway_store::{ChunkId, Store, StoreConfig};

fn cfg(dir: &Path) -> StoreConfig {
    StoreConfig::disk(dir, 2 << 30)
}

fn fill(dir: &Path, records: u64) {
    let _ = std::fs::remove_dir_all(dir);
    let store = Store::open(cfg(dir)).expect("opening the store");
    let mut data = vec![0u8; 1400];
    for n in 0..records {
        data[..8].copy_from_slice(&n.to_le_bytes());
        let mut id = [0u8; 32];
        id[..8].copy_from_slice(&n.to_le_bytes());
        id[8..16].copy_from_slice(&n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        store.put(ChunkId(id), &data).expect("put");
        if n % 20_000 == 0 {
            store.flush().expect("flush");
        }
    }
}

/// Opens the store once; returns the time and how many segments came from summaries.
fn open(dir: &Path) -> (Duration, u64) {
    let t = SystemClock::now();
    let store = Store::open(cfg(dir)).expect("opening the store");
    let took = t.elapsed();
    let st = store.stats();
    println!(
        "  {:>8.3} s  {} records in {} segments, {} from summaries",
        took.as_secs_f64(),
        st.records,
        st.segments,
        st.summarized_segments
    );
    (took, st.summarized_segments)
}

fn summaries(dir: &Path, ext: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("listing the store")
        .map(|e| e.expect("listing the store").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect()
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64()
}

/// Writes dirty pages out and drops the page cache, dentries and inodes.
fn drop_caches() {
    let synced = std::process::Command::new("sync").status();
    assert!(synced.is_ok_and(|s| s.success()), "sync failed");
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").expect("dropping the page cache (root only)");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cold = args.iter().any(|a| a == "--cold");
    let mut args = args.into_iter().filter(|a| a != "--cold");
    let dir = PathBuf::from(
        args.next()
            .expect("usage: open_time DIR [RECORDS] [--cold]"),
    );
    if let Some(n) = args.next() {
        fill(&dir, n.parse().expect("RECORDS is a number"));
    }
    let open = |dir: &Path| {
        if cold {
            drop_caches();
        }
        open(dir)
    };
    let (mut summarized, mut scanned) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        println!("from summaries:");
        summarized.push(open(&dir).0);
        // Set the summaries aside (renamed), open by scanning, then put them back.
        for p in summaries(&dir, "hwx") {
            std::fs::rename(&p, p.with_extension("hwx-aside")).expect("renaming");
        }
        println!("by scanning:");
        scanned.push(open(&dir).0);
        for p in summaries(&dir, "hwx-aside") {
            std::fs::rename(&p, p.with_extension("hwx")).expect("renaming");
        }
    }
    println!(
        "median: {:.3} s from summaries, {:.3} s by scanning",
        median(summarized),
        median(scanned)
    );
}
