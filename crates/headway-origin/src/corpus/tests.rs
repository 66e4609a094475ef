use super::*;
use proptest::prelude::*;
use std::collections::HashSet;
use std::io::Write;

fn bytes(kind: Kind, size: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; size];
    fill(kind, seed, 0, &mut v);
    v
}

fn gzip_ratio(data: &[u8], level: u32) -> f64 {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    e.write_all(data).unwrap();
    data.len() as f64 / e.finish().unwrap().len() as f64
}

/// Hashes of every 48-byte window (a dedup engine's smallest useful match).
fn windows(data: &[u8]) -> HashSet<u64> {
    data.windows(48)
        .map(|w| {
            w.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            })
        })
        .collect()
}

fn shared_fraction(a: &[u8], b: &[u8]) -> f64 {
    let wa = windows(a);
    let wb = windows(b);
    wb.iter().filter(|h| wa.contains(h)).count() as f64 / wb.len() as f64
}

#[test]
fn sha256_pins() {
    // Pins generation 1. If one of these changes, every ETag and every cached body of the lab
    // changes too: bump GENERATION and update the pins deliberately.
    let pins = [
        (
            Kind::Random,
            4096,
            1,
            "df0e835dbed89e2a5fe70e2e282e938562402c6e0984e08e99bd2f0de0b754b2",
        ),
        (
            Kind::Pdf,
            100_000,
            1,
            "de8474215a64206ec00835008c0798d065cea314d73690bb3684022e4330ec99",
        ),
        (
            Kind::Doc,
            100_000,
            2,
            "7e3278e2a62cb8678fce435bc98fbc8c87dc7b93995efd027d253ef70a5d083e",
        ),
        (
            Kind::Html,
            PERIOD as u64 + 1000,
            3,
            "c12dcaf92629c1c0b962733642b07e9e54ad63ff71a6bb653320bfce326c2deb",
        ),
    ];
    for (kind, size, seed, pin) in pins {
        assert_eq!(hex(&sha256(kind, size, seed)), pin, "{kind} {size} {seed}");
    }
}

#[test]
fn same_arguments_same_bytes() {
    for kind in Kind::ALL {
        assert_eq!(bytes(kind, 70_000, 9), bytes(kind, 70_000, 9));
        assert_ne!(bytes(kind, 70_000, 9), bytes(kind, 70_000, 10));
    }
}

#[test]
fn documents_start_like_their_format() {
    assert!(bytes(Kind::Pdf, 64, 5).starts_with(b"%PDF-1.7\n"));
    assert!(bytes(Kind::Doc, 64, 5).starts_with(&[0xd0, 0xcf, 0x11, 0xe0]));
    assert!(bytes(Kind::Html, 64, 5).starts_with(b"<!DOCTYPE html>"));
    assert!(std::str::from_utf8(&bytes(Kind::Html, 3 * PERIOD / 2, 5)).is_ok());
}

#[test]
fn compressibility_bands() {
    // (kind, lowest, highest) gzip ratio at levels 3 and 6 over 2 MiB (two periods).
    let bands = [
        (Kind::Random, 0.99, 1.0),
        (Kind::Pdf, 1.0, 1.15),
        (Kind::Doc, 2.6, 3.5),
        (Kind::Html, 2.5, 5.0),
    ];
    for (kind, lo, hi) in bands {
        let data = bytes(kind, 2 * PERIOD, 11);
        for level in [3, 6] {
            let r = gzip_ratio(&data, level);
            assert!(
                (lo..=hi).contains(&r),
                "{kind} gzip -{level}: ratio {r:.3} not in {lo}..={hi}"
            );
        }
    }
}

#[test]
fn no_artificial_dedup_between_seeds_or_periods() {
    let n = 256 * 1024;
    for kind in [Kind::Pdf, Kind::Doc, Kind::Html] {
        let a = bytes(kind, PERIOD + n, 1);
        let b = bytes(kind, n, 2);
        let across_seeds = shared_fraction(&a[..n], &b);
        let across_periods = shared_fraction(&a[..n], &a[PERIOD..]);
        eprintln!("{kind}: shared 48-byte windows: {across_seeds:.4} across seeds, {across_periods:.4} across periods");
        // What is shared is format structure in literal runs (PDF dictionary keywords, HTML
        // closing tags), as between real files of one format.
        assert!(
            across_seeds < 0.03,
            "{kind}: {across_seeds} of windows shared across seeds"
        );
        assert!(
            across_periods < 0.03,
            "{kind}: {across_periods} shared across periods"
        );
        // The check can fail: a document shares all its windows with itself.
        assert!(shared_fraction(&a[..n], &a[..n]) > 0.99);
    }
}

#[test]
fn named_files_are_the_scenario_000_documents() {
    let expect = [
        ("pdf_small", Kind::Pdf, 1_240_000),
        ("pdf_medium", Kind::Pdf, 4_330_000),
        ("pdf_large", Kind::Pdf, 17_344_000),
        ("doc_small", Kind::Doc, 1_000_000),
        ("doc_medium", Kind::Doc, 3_000_000),
        ("doc_large", Kind::Doc, 12_140_000),
    ];
    for (name, kind, size) in expect {
        let d = file(name).unwrap();
        assert_eq!((d.kind(), d.size()), (kind, size), "{name}");
    }
    let seeds: HashSet<u64> = FILES.iter().map(|f| f.doc.seed()).collect();
    assert_eq!(seeds.len(), FILES.len(), "each file has its own seed");
    assert!(file("pdf_huge").is_none());
}

#[test]
fn chunks_concatenate_to_the_document() {
    let d = Document::new(Kind::Doc, 300_001, 4);
    let joined: Vec<u8> = d.chunks(65_536).flatten().collect();
    assert_eq!(joined, bytes(Kind::Doc, 300_001, 4));
    assert_eq!(d.chunks(65_536).count(), 5);
    let mut h = Sha256::new();
    h.update(&joined);
    assert_eq!(<[u8; 32]>::from(h.finalize()), d.sha256());
}

#[test]
fn kind_names_round_trip() {
    for k in Kind::ALL {
        assert_eq!(k.as_str().parse::<Kind>(), Ok(k));
    }
    assert!("exe".parse::<Kind>().is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A document of size n is a prefix of the document of size m > n (same kind and seed).
    #[test]
    fn shorter_document_is_a_prefix(k in 0usize..4, seed in any::<u64>(), n in 0u64..40_000, extra in 1u64..3_000_000) {
        let kind = Kind::ALL[k];
        let short = Document::new(kind, n, seed);
        let long = Document::new(kind, n + extra, seed);
        let mut a = vec![0; n as usize];
        let mut b = vec![0; n as usize];
        prop_assert_eq!(short.fill(0, &mut a), n as usize);
        long.fill(0, &mut b);
        prop_assert_eq!(a, b);
    }

    /// Any window of a stream equals the same bytes generated from further back.
    #[test]
    fn windows_agree_with_longer_fills(k in 0usize..4, seed in any::<u64>(), start in 0u64..(3 * PERIOD as u64), skip in 0usize..20, len in 0usize..5000) {
        let kind = Kind::ALL[k];
        let mut long = vec![0; skip + len];
        fill(kind, seed, start, &mut long);
        let mut short = vec![0; len];
        fill(kind, seed, start + skip as u64, &mut short);
        prop_assert_eq!(&long[skip..], &short[..]);
    }
}
