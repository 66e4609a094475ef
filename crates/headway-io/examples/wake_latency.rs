//! Measures how late this machine wakes a thread: plain `clock_nanosleep`, plain `ppoll`, and a
//! [`Sleeper`] (kernel sleep + adaptive spin). Used to tune the spin margin.
//!
//! `cargo run -p headway-io --example wake_latency [iterations]`
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use headway_core::SystemClock;
use headway_io::timer::{clock_sleep_until, set_timer_slack, Sleeper};

fn report(name: &str, mut v: Vec<u64>) {
    v.sort_unstable();
    let q = |p: f64| v[((v.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
    println!(
        "{name:<28} n={} p50={:.1}us p90={:.1}us p99={:.1}us p99.9={:.1}us max={:.1}us",
        v.len(),
        q(0.5),
        q(0.9),
        q(0.99),
        q(0.999),
        q(1.0)
    );
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    set_timer_slack(1).expect("prctl");
    let waits = [
        Duration::from_micros(120),
        Duration::from_micros(500),
        Duration::from_millis(2),
    ];
    let (r, _w) = UnixStream::pair().unwrap();
    for w in waits {
        let mut late = Vec::with_capacity(n);
        for _ in 0..n {
            let d = SystemClock::now() + w;
            clock_sleep_until(d);
            late.push((SystemClock::now() - d).as_nanos() as u64);
        }
        report(&format!("clock_nanosleep {w:?}"), late);
        let mut late = Vec::with_capacity(n);
        let mut s = Sleeper::with_fixed_margin(Duration::ZERO);
        for _ in 0..n {
            let d = SystemClock::now() + w;
            s.poll_readable(r.as_fd(), d).unwrap();
            late.push((SystemClock::now().saturating_duration_since(d)).as_nanos() as u64);
        }
        report(&format!("ppoll {w:?}"), late);
        let mut s = Sleeper::new();
        let mut late = Vec::with_capacity(n);
        for _ in 0..n {
            let d = SystemClock::now() + w;
            s.wait_readable(r.as_fd(), d).unwrap();
            late.push((SystemClock::now() - d).as_nanos() as u64);
        }
        report(&format!("Sleeper::wait_readable {w:?}"), late);
        println!("  adaptive margin now {:?}", s.margin());
    }
}
