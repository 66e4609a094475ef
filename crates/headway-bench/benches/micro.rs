//! Micro-benchmarks: `cargo bench -p headway-bench [-- FILTER]`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use headway_core::{Probability, Rate, SystemClock};
use headway_link::{Jitter, JitterDistribution, Link, Loss, Params, QueueLimit};

/// Frames per second the link model sustains: hand in a frame, release what is due.
fn link_model(c: &mut Criterion) {
    let mut g = c.benchmark_group("link");
    let frames = 10_000u64;
    g.throughput(Throughput::Elements(frames));
    let cases = [
        ("transparent", Params::default()),
        (
            "100mbit_50ms_jitter_loss",
            Params {
                rate: Some(Rate::from_mbps(100)),
                delay: Duration::from_millis(50),
                jitter: Jitter {
                    amount: Duration::from_millis(2),
                    distribution: JitterDistribution::Normal,
                },
                loss: Loss::Bernoulli(Probability::new(0.01).expect("valid")),
                queue: QueueLimit {
                    packets: None,
                    bytes: None,
                },
                ..Params::default()
            },
        ),
    ];
    for (name, params) in cases {
        g.bench_function(name, |b| {
            b.iter(|| {
                let start = SystemClock::now();
                let mut link: Link<u64> = Link::new(params.clone(), 7);
                let mut out = 0u64;
                for i in 0..frames {
                    // one 1514-byte frame every 121 µs ≈ 100 Mbit/s offered
                    let now = start + Duration::from_nanos(i * 121_000);
                    link.handle_packet(now, 1514, i);
                    while let Some(r) = link.poll_release(now) {
                        out += r.packet;
                    }
                }
                let end = start + Duration::from_secs(3600);
                while let Some(r) = link.poll_release(end) {
                    out += r.packet;
                }
                black_box(out)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, link_model);
criterion_main!(benches);
