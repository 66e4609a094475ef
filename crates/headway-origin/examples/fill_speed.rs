//! Prints how fast each corpus kind is generated (`cargo run -p headway-origin --release
//! --example fill_speed`). A measurement, not a test.

use headway_core::SystemClock;
use headway_origin::corpus::{fill, Kind};

fn main() {
    let mut buf = vec![0u8; 64 << 20];
    for kind in Kind::ALL {
        fill(kind, 1, 0, &mut buf[..1024]); // build the base block outside the timing
        let start = SystemClock::now();
        fill(kind, 1, 12345, &mut buf);
        let secs = (SystemClock::now() - start).as_secs_f64();
        println!("{kind:>6}: {:.2} GB/s", buf.len() as f64 / secs / 1e9);
    }
}
