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

/// The bytes of `doc` generated in one call.
fn whole(doc: &Document) -> Vec<u8> {
    let mut v = vec![0; doc.size() as usize];
    assert_eq!(doc.fill(0, &mut v), v.len());
    v
}

#[test]
fn an_edit_changes_about_its_share_of_bytes_and_nothing_else() {
    let base = Document::new(Kind::Doc, 3 * PERIOD as u64 + 12_345, 5);
    let original = whole(&base);
    for (ppm, seed) in [(10_000, 1), (1000, 2), (50_000, 3)] {
        let doc = base.with_edit(Some(Edit::new(ppm, seed)));
        let edited = whole(&doc);
        let differ = original.iter().zip(&edited).filter(|(a, b)| a != b).count();
        let expected = original.len() as f64 * f64::from(ppm) / 1e6;
        // Fewer than the share: patches overlap now and then, and a random byte equals the one
        // it replaces one time in 256.
        assert!(
            (0.9 * expected..=1.001 * expected).contains(&(differ as f64)),
            "{ppm} ppm: {differ} bytes differ, expected about {expected:.0}"
        );
        // Every differing byte lies inside a patch; outside them the document is the original.
        let patches = doc.patches();
        assert_eq!(
            patches.len() as u64,
            Edit::new(ppm, seed).patch_count(base.size())
        );
        let mut covered = vec![false; original.len()];
        for &(start, _) in &patches.list {
            covered[start as usize..start as usize + PATCH].fill(true);
        }
        for (i, (a, b)) in original.iter().zip(&edited).enumerate() {
            assert!(covered[i] || a == b, "byte {i} changed outside every patch");
        }
        assert_ne!(doc.sha256(), base.sha256());
        assert_ne!(doc.etag(), base.etag());
    }
}

#[test]
fn edits_are_deterministic_and_distinct() {
    let base = Document::new(Kind::Random, 200_000, 1);
    let e = |ppm, seed| base.with_edit(Some(Edit::new(ppm, seed)));
    assert_eq!(whole(&e(10_000, 1)), whole(&e(10_000, 1)));
    assert_ne!(whole(&e(10_000, 1)), whole(&e(10_000, 2)));
    assert_eq!(e(10_000, 1).etag(), "\"hw1-random-200000-1-e10000.1\"");
    assert_eq!(base.etag(), "\"hw1-random-200000-1\"");
    // The patches of 0.1 % are not the first tenth of those of 1 %: unrelated edits.
    let small = e(1000, 1).patches();
    let large = e(10_000, 1).patches();
    assert!(small.list.iter().all(|p| !large.list.contains(p)));
}

#[test]
fn patch_counts() {
    let one = Edit::new(10_000, 1);
    assert_eq!(one.patch_count(12_140_000), 1897);
    assert_eq!(one.patch_count(0), 0);
    assert_eq!(
        one.patch_count(10),
        1,
        "a tiny document still gets one patch"
    );
    assert_eq!(Edit::new(0, 1).patch_count(1 << 30), 0);
    assert_eq!(
        Edit::new(2_000_000, 1),
        Edit::new(1_000_000, 1),
        "clamped to 100 %"
    );
    // A document shorter than a patch is patched whole, never out of bounds.
    let tiny = Document::new(Kind::Html, 10, 1).with_edit(Some(Edit::new(500_000, 3)));
    assert_eq!(tiny.chunks(3).flatten().count(), 10);
    assert_eq!(Edit::new(10_000, 7).to_string(), "1% (seed 7)");
    assert_eq!(Edit::new(1000, 7).query(), "edit=0.1%25&edit_seed=7");
    assert_eq!(Edit::new(123_450, 2).query(), "edit=12.345%25&edit_seed=2");
    assert!((Edit::new(1000, 7).percent() - 0.1).abs() < 1e-12);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// An edited document streamed in arbitrary slices (as the server sends it, as Range
    /// requests ask for it) is the document generated in one call.
    #[test]
    fn edited_documents_stream_in_any_slices(
        k in 0usize..4,
        seed in any::<u64>(),
        size in 0u64..(2 * PERIOD as u64 + 5000),
        ppm in 1u32..200_000,
        edit_seed in any::<u64>(),
        cuts in proptest::collection::vec(1usize..300_000, 1..12),
    ) {
        let doc = Document::new(Kind::ALL[k], size, seed).with_edit(Some(Edit::new(ppm, edit_seed)));
        let one_shot = whole(&doc);
        let patches = doc.patches();
        let mut streamed = Vec::with_capacity(one_shot.len());
        let mut offset = 0u64;
        for &len in cuts.iter().cycle() {
            if offset >= size {
                break;
            }
            let mut buf = vec![0; len];
            let n = doc.fill_with(&patches, offset, &mut buf);
            // A slice is patched if and only if it differs from the unedited bytes there.
            let mut plain = vec![0; n];
            fill(doc.kind(), seed, offset, &mut plain);
            if plain != buf[..n] {
                prop_assert!(patches.touches(offset, n));
            }
            streamed.extend_from_slice(&buf[..n]);
            offset += n as u64;
        }
        prop_assert!(streamed == one_shot, "streamed bytes differ from one-shot generation");
        let chunked: Vec<u8> = doc.chunks(cuts[0]).flatten().collect();
        prop_assert!(chunked == one_shot);
    }
}
