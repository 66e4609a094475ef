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

/// The ADC's HTTP compression (`headway_proxy::http::compress::Encoder`) on the lab's HTML
/// corpus at the F5 report's sizes (the 512 KiB page is the 64 KiB page repeated), per codec
/// and level: MB/s of uncompressed input (criterion's throughput), and the ratio, printed once
/// per case. Streamed as the proxy streams it: 16 KiB frames, then the end of the stream; and,
/// where the proxy compresses a known-length body in one call (gzip up to 64 KiB), that way too
/// (`…-whole`). This is how the default levels were chosen
/// (`headway_config::compress::Codec::default_level`).
fn compression(c: &mut Criterion) {
    use headway_config::compress::Codec;
    use headway_origin::corpus::{Document, Kind};
    use headway_proxy::http::compress::{Encoder, Flush, WHOLE_MAX};

    let cases: [(Codec, &[u32]); 3] = [
        (Codec::Gzip, &[1, 2, 3, 4, 6]),
        (Codec::Brotli, &[0, 1, 2, 3, 4, 5]),
        (Codec::Zstd, &[1, 2, 3, 4, 6]),
    ];
    let pages: [(&str, Document); 4] = [
        ("2KiB", Document::new(Kind::Html, 2 << 10, 1)),
        ("8KiB", Document::new(Kind::Html, 8 << 10, 1)),
        ("64KiB", Document::new(Kind::Html, 64 << 10, 1)),
        (
            "512KiB_repeated",
            Document::new(Kind::Html, 512 << 10, 1).with_repeat(64 << 10),
        ),
    ];
    let mut g = c.benchmark_group("compress");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(2));
    g.warm_up_time(Duration::from_millis(500));
    for (size, doc) in pages {
        let mut data = vec![0; doc.size() as usize];
        doc.fill(0, &mut data);
        g.throughput(Throughput::Bytes(data.len() as u64));
        for (codec, levels) in cases {
            for &level in levels {
                let run = |e: &mut Encoder| {
                    let mut out = bytes::BytesMut::new();
                    let mut sent = 0;
                    let mut frames = data.chunks(16 << 10).peekable();
                    while let Some(f) = frames.next() {
                        let last = frames.peek().is_none();
                        let flush = if last { Flush::Finish } else { Flush::None };
                        e.encode(f, flush, &mut out).expect("encodes");
                        sent += out.split().len();
                    }
                    sent
                };
                let len = Some(data.len() as u64);
                let mut e = Encoder::new(codec, level, len).expect("encoder");
                let ratio = data.len() as f64 / run(&mut e) as f64;
                eprintln!("compress/{size}/{codec}-{level}: ratio {ratio:.3}");
                g.bench_function(format!("{size}/{codec}-{level}"), |b| {
                    b.iter(|| {
                        // The proxy reuses gzip and zstd encoders; brotli's are made anew.
                        if !e.reset(len) {
                            e = Encoder::new(codec, level, len).expect("encoder");
                        }
                        black_box(run(&mut e))
                    })
                });
                if e.prefers_whole() && data.len() as u64 <= WHOLE_MAX {
                    // What the proxy does with a body of known length up to `WHOLE_MAX`: one
                    // call at its end (gzip: libdeflate).
                    let mut out = bytes::BytesMut::new();
                    e.reset(len);
                    e.whole(&data, &mut out).expect("encodes");
                    let ratio = data.len() as f64 / out.len() as f64;
                    eprintln!("compress/{size}/{codec}-{level}-whole: ratio {ratio:.3}");
                    g.bench_function(format!("{size}/{codec}-{level}-whole"), |b| {
                        b.iter(|| {
                            e.reset(len);
                            out.clear();
                            e.whole(&data, &mut out).expect("encodes");
                            black_box(out.len())
                        })
                    });
                }
            }
        }
    }
    g.finish();
}

criterion_group!(benches, link_model, compression);
criterion_main!(benches);
