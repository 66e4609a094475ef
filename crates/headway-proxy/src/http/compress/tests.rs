use std::io::Read;

use headway_config::compress::{CpuBypass, CpuSource};
use proptest::prelude::*;

use super::cpu::{next_engaged, Times};
use super::*;

fn accepted(header: &str) -> Accepted {
    Accepted::parse([header.as_bytes()])
}

fn head(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn decode(codec: Codec, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match codec {
        Codec::Gzip => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .unwrap();
        }
        Codec::Brotli => {
            brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Codec::Zstd => out = zstd::decode_all(data).unwrap(),
    }
    out
}

// --- Accept-Encoding -----------------------------------------------------------------------

#[test]
fn what_browsers_send_gets_the_servers_first_choice() {
    let order = Codec::ALL;
    // Chrome and Firefox (2024 on), Safari, curl --compressed.
    assert_eq!(
        accepted("gzip, deflate, br, zstd").choose(&order),
        Some(Codec::Zstd)
    );
    assert_eq!(
        accepted("gzip, deflate, br").choose(&order),
        Some(Codec::Brotli)
    );
    assert_eq!(accepted("deflate, gzip").choose(&order), Some(Codec::Gzip));
    assert_eq!(
        accepted("gzip, br, zstd").choose(&[Codec::Gzip, Codec::Zstd]),
        Some(Codec::Gzip)
    );
}

#[test]
fn q_values_rank_and_zero_excludes() {
    let order = Codec::ALL;
    assert_eq!(
        accepted("zstd;q=0.5, gzip;q=0.8, br;q=0.1").choose(&order),
        Some(Codec::Gzip)
    );
    assert_eq!(accepted("zstd;q=0, br;q=0").choose(&order), None);
    assert_eq!(
        accepted("zstd;q=0, br;q=0, gzip").choose(&order),
        Some(Codec::Gzip)
    );
    // `*` covers what is not listed; an explicit q=0 beats it.
    assert_eq!(accepted("*").choose(&order), Some(Codec::Zstd));
    assert_eq!(accepted("zstd;q=0, *").choose(&order), Some(Codec::Brotli));
    assert_eq!(accepted("*;q=0, gzip").choose(&order), Some(Codec::Gzip));
    assert_eq!(accepted("identity").choose(&order), None);
    assert_eq!(accepted("identity;q=0").choose(&order), None);
    assert_eq!(accepted("").choose(&order), None);
    assert_eq!(Accepted::parse([]).choose(&order), None);
}

#[test]
fn the_grammar_is_read_as_rfc_9110_writes_it() {
    let a = accepted(" GZIP ; Q=0.5 ,, x-gzip;q=1 , Br;q=1.000;foo=bar\t, ZSTD;q=0.001 ");
    assert_eq!(
        a.weight(Codec::Gzip),
        500,
        "the first element naming gzip counts"
    );
    assert_eq!(a.weight(Codec::Brotli), 1000);
    assert_eq!(a.weight(Codec::Zstd), 1);
    // Several fields are one list.
    let b = Accepted::parse([&b"gzip;q=0.2"[..], &b"br"[..]]);
    assert_eq!(
        (b.weight(Codec::Gzip), b.weight(Codec::Brotli)),
        (200, 1000)
    );
    // Malformed weights drop their element rather than read as q=1.
    for bad in [
        "gzip;q=2",
        "gzip;q=1.5",
        "gzip;q=0.1234",
        "gzip;q=",
        "gzip;q=abc",
        "gzip;q=-1",
        "gzip;q=.5",
        "gz(ip",
    ] {
        assert_eq!(accepted(bad).weight(Codec::Gzip), 0, "{bad}");
    }
    assert_eq!(accepted("x-gzip").choose(&Codec::ALL), Some(Codec::Gzip));
}

/// A generated list element: a coding and an optional weight in thousandths.
fn element() -> impl Strategy<Value = (&'static str, Option<u16>)> {
    (
        prop::sample::select(vec![
            "gzip", "br", "zstd", "*", "identity", "deflate", "compress",
        ]),
        prop::option::of(0u16..=1000),
    )
}

fn render((coding, q): (&str, Option<u16>), space: bool) -> String {
    let ows = if space { " " } else { "" };
    match q {
        None => coding.to_string(),
        Some(1000) => format!("{coding}{ows};{ows}q=1"),
        Some(q) => {
            let frac = format!("{q:03}");
            format!("{coding}{ows};{ows}q=0.{}", frac.trim_end_matches('0'))
        }
    }
}

proptest! {
    /// decode(encode(x)) == x for the weights: whatever the list, each codec's weight is its
    /// first element's, else `*`'s, else 0 — and the choice is a codec with the highest weight,
    /// never one weighted 0.
    #[test]
    fn weights_round_trip(list in prop::collection::vec(element(), 0..8), space in any::<bool>()) {
        let text: Vec<String> = list.iter().map(|e| render(*e, space)).collect();
        let a = accepted(&text.join(if space { " , " } else { "," }));
        let first = |name: &str| list.iter().find(|(c, _)| *c == name).map(|(_, q)| q.unwrap_or(1000));
        for c in Codec::ALL {
            let want = first(c.token()).or_else(|| first("*")).unwrap_or(0);
            prop_assert_eq!(a.weight(c), want, "{} in {:?}", c, text);
        }
        match a.choose(&Codec::ALL) {
            Some(c) => {
                prop_assert!(a.weight(c) > 0);
                prop_assert!(Codec::ALL.iter().all(|o| a.weight(*o) <= a.weight(c)));
            }
            None => prop_assert!(Codec::ALL.iter().all(|o| a.weight(*o) == 0)),
        }
    }

    /// Any bytes at all: no panic, and the choice is always acceptable.
    #[test]
    fn any_header_is_safe(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let a = Accepted::parse([&bytes[..]]);
        if let Some(c) = a.choose(&Codec::ALL) {
            prop_assert!(a.weight(c) > 0);
        }
    }
}

// --- the decision and the head ---------------------------------------------------------------

fn policy() -> Compression {
    Compression {
        cpu_bypass: None,
        ..Compression::default()
    }
}

fn decide_for(h: &HeaderMap, status: u16, len: Option<u64>) -> Decision {
    decide(
        &policy(),
        accepted("gzip, br"),
        false,
        &Method::GET,
        StatusCode::from_u16(status).unwrap(),
        h,
        len,
    )
}

#[test]
fn text_is_compressed_and_the_rest_is_left_alone() {
    let html = head(&[("content-type", "text/html; charset=utf-8")]);
    assert_eq!(
        decide_for(&html, 200, Some(5000)),
        Decision::Compress(Codec::Brotli)
    );
    assert_eq!(
        decide_for(&html, 200, None),
        Decision::Compress(Codec::Brotli)
    );
    assert_eq!(
        decide_for(&html, 404, Some(5000)),
        Decision::Compress(Codec::Brotli)
    );
    let skip = |h: &HeaderMap, status, len| match decide_for(h, status, len) {
        Decision::Skip(s) => s,
        d => panic!("{d:?}"),
    };
    assert_eq!(skip(&html, 200, Some(100)), Skip::Small);
    assert_eq!(skip(&html, 200, Some(0)), Skip::NoBody);
    assert_eq!(skip(&html, 204, None), Skip::NoBody);
    assert_eq!(skip(&html, 304, None), Skip::NoBody);
    assert_eq!(skip(&html, 206, Some(5000)), Skip::Range);
    let ranged = head(&[
        ("content-type", "text/html"),
        ("content-range", "bytes 0-9/10"),
    ]);
    assert_eq!(skip(&ranged, 200, Some(5000)), Skip::Range);
    let encoded = head(&[("content-type", "text/html"), ("content-encoding", "gzip")]);
    assert_eq!(skip(&encoded, 200, Some(5000)), Skip::Encoded);
    let nt = head(&[
        ("content-type", "text/html"),
        ("cache-control", "max-age=60"),
        ("cache-control", "public, No-Transform"),
    ]);
    assert_eq!(skip(&nt, 200, Some(5000)), Skip::NoTransform);
    for t in [
        "image/png",
        "video/mp4",
        "audio/ogg",
        "application/octet-stream",
    ] {
        assert_eq!(
            skip(&head(&[("content-type", t)]), 200, Some(5000)),
            Skip::Type,
            "{t}"
        );
    }
    assert_eq!(skip(&HeaderMap::new(), 200, Some(5000)), Skip::Type);
    let svg = head(&[("content-type", "IMAGE/SVG+XML")]);
    assert_eq!(
        decide_for(&svg, 200, Some(5000)),
        Decision::Compress(Codec::Brotli)
    );
    let head_req = decide(
        &policy(),
        accepted("gzip"),
        false,
        &Method::HEAD,
        StatusCode::OK,
        &html,
        Some(5000),
    );
    assert_eq!(head_req, Decision::Skip(Skip::NoBody));
    let none = decide(
        &policy(),
        accepted("identity"),
        false,
        &Method::GET,
        StatusCode::OK,
        &html,
        None,
    );
    assert_eq!(none, Decision::Skip(Skip::NotAccepted));
    let busy = decide(
        &policy(),
        accepted("gzip"),
        true,
        &Method::GET,
        StatusCode::OK,
        &html,
        None,
    );
    assert_eq!(busy, Decision::Skip(Skip::Bypass));
}

#[test]
fn a_compressed_head_says_so_and_varies() {
    let p = Policy::new(&policy(), Arc::default());
    let mut h = head(&[
        ("content-type", "text/html"),
        ("content-length", "5000"),
        ("accept-ranges", "bytes"),
        ("etag", "\"v1\""),
        ("vary", "Cookie"),
    ]);
    let stage = p
        .respond(
            &Method::GET,
            accepted("gzip"),
            StatusCode::OK,
            &mut h,
            Some(5000),
        )
        .expect("compressed");
    assert_eq!(stage.codec(), Codec::Gzip);
    assert_eq!(h["content-encoding"], "gzip");
    assert!(!h.contains_key("content-length"));
    assert!(!h.contains_key("accept-ranges"));
    assert_eq!(h["etag"], "W/\"v1\"");
    let vary: Vec<_> = h.get_all("vary").iter().collect();
    assert_eq!(vary, ["Cookie", "Accept-Encoding"]);
    // A weak ETag stays as it is; Vary is not repeated.
    let mut h = head(&[
        ("content-type", "text/css"),
        ("etag", "W/\"v2\""),
        ("vary", "accept-encoding"),
    ]);
    p.respond(&Method::GET, accepted("br"), StatusCode::OK, &mut h, None)
        .expect("compressed");
    assert_eq!(h["etag"], "W/\"v2\"");
    assert_eq!(h.get_all("vary").iter().count(), 1);
    // Not compressed for this client, but it could have been: Vary, no other change.
    let mut h = head(&[("content-type", "text/html"), ("content-length", "5000")]);
    assert!(p
        .respond(
            &Method::GET,
            accepted("identity"),
            StatusCode::OK,
            &mut h,
            Some(5000)
        )
        .is_none());
    assert_eq!(h["vary"], "Accept-Encoding");
    assert_eq!(h["content-length"], "5000");
    // Never compressible: no Vary.
    let mut h = head(&[("content-type", "image/png")]);
    assert!(p
        .respond(
            &Method::GET,
            accepted("gzip"),
            StatusCode::OK,
            &mut h,
            Some(5000)
        )
        .is_none());
    assert!(!h.contains_key("vary"));
    let s = p.snapshot();
    assert_eq!(s.not_accepted, 1);
    assert_eq!(s.codecs.iter().map(|c| c.responses).sum::<u64>(), 2);
}

// --- encoders and stages -----------------------------------------------------------------------

fn html(n: usize) -> Vec<u8> {
    let words = [
        "<div class=\"item\">",
        "Headway ",
        "compresses ",
        "</div>\n",
        "<p>",
        "text ",
    ];
    let mut v = Vec::with_capacity(n);
    let mut x: u64 = 7;
    while v.len() < n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.extend_from_slice(words[(x >> 33) as usize % words.len()].as_bytes());
        v.extend_from_slice(format!("{}", x >> 60).as_bytes());
    }
    v.truncate(n);
    v
}

#[test]
fn every_codec_round_trips_through_pushes_flushes_and_reuse() {
    let data = html(300_000);
    for codec in Codec::ALL {
        let (lo, hi) = codec.levels();
        for level in [lo, codec.default_level(), hi.min(9)] {
            let p = Policy::new(
                &Compression {
                    codecs: vec![codec],
                    zstd_level: level.max(1),
                    brotli_level: level,
                    gzip_level: level.max(1),
                    ..policy()
                },
                Arc::default(),
            );
            // Twice: the second response reuses the first one's encoder (gzip, zstd).
            for round in 0..2 {
                let mut h = head(&[("content-type", "text/html")]);
                let mut stage = p
                    .respond(
                        &Method::GET,
                        accepted("gzip, br, zstd"),
                        StatusCode::OK,
                        &mut h,
                        None,
                    )
                    .unwrap();
                let mut out = Vec::new();
                let mut pieces = data.chunks(7000 + round * 5000).peekable();
                let mut i = 0;
                while let Some(piece) = pieces.next() {
                    if pieces.peek().is_none() {
                        out.extend_from_slice(&stage.finish(piece).unwrap());
                        break;
                    }
                    if let Some(b) = stage.push(piece).unwrap() {
                        out.extend_from_slice(&b);
                    }
                    i += 1;
                    if i % 5 == 0 {
                        // A pause of the server: everything so far must decode.
                        if let Some(b) = stage.flush().unwrap() {
                            out.extend_from_slice(&b);
                        }
                        let mut partial = Vec::new();
                        let so_far: usize = data
                            .chunks(7000 + round * 5000)
                            .take(i)
                            .map(<[u8]>::len)
                            .sum();
                        match codec {
                            Codec::Gzip => {
                                let mut d = flate2::read::GzDecoder::new(&out[..]);
                                let _ = d.read_to_end(&mut partial);
                            }
                            Codec::Brotli => {
                                let mut d = brotli::Decompressor::new(&out[..], 4096);
                                let _ = d.read_to_end(&mut partial);
                            }
                            Codec::Zstd => {
                                let mut d = zstd::stream::read::Decoder::new(&out[..]).unwrap();
                                let _ = d.read_to_end(&mut partial);
                            }
                        }
                        assert_eq!(
                            partial.len(),
                            so_far,
                            "{codec} level {level}: flushed prefix"
                        );
                        assert_eq!(partial, data[..so_far]);
                    }
                }
                assert!(stage.is_done());
                assert_eq!(
                    decode(codec, &out),
                    data,
                    "{codec} level {level} round {round}"
                );
                assert!(
                    out.len() < data.len() / 2,
                    "{codec} level {level}: {}",
                    out.len()
                );
            }
            let s = p.snapshot();
            assert_eq!(s.codecs[0].responses, 2);
            assert_eq!(s.codecs[0].bytes_in, 2 * data.len() as u64);
            assert!(s.ratio().unwrap() > 2.0);
        }
    }
}

#[test]
fn empty_and_tiny_streams_are_valid() {
    for codec in Codec::ALL {
        for data in [&b""[..], b"x", b"<html></html>"] {
            let mut e =
                Encoder::new(codec, codec.default_level(), Some(data.len() as u64)).unwrap();
            let mut out = BytesMut::new();
            e.encode(data, Flush::Finish, &mut out).unwrap();
            assert_eq!(decode(codec, &out), data, "{codec}");
            // Reset and again, with an unknown size.
            if e.reset(None) {
                let mut out = BytesMut::new();
                e.encode(data, Flush::Sync, &mut out).unwrap();
                e.encode(&[], Flush::Finish, &mut out).unwrap();
                assert_eq!(decode(codec, &out), data, "{codec} reused");
            }
        }
    }
}

/// A gzip stage for a body of `length` bytes, at `level`.
fn gzip_stage(level: u32, length: Option<u64>) -> (Policy, Box<Stage>) {
    let p = Policy::new(
        &Compression {
            codecs: vec![Codec::Gzip],
            gzip_level: level,
            min_size: 0,
            ..policy()
        },
        Arc::default(),
    );
    let mut h = head(&[("content-type", "text/html")]);
    let stage = p
        .respond(
            &Method::GET,
            accepted("gzip"),
            StatusCode::OK,
            &mut h,
            length,
        )
        .unwrap();
    (p, stage)
}

#[test]
fn a_small_gzip_body_is_compressed_whole_at_its_end() {
    for level in 1..=9 {
        for n in [1, 100, 2048, 8192, 40_000, WHOLE_MAX as usize] {
            let data = html(n);
            let (p, mut stage) = gzip_stage(level, Some(n as u64));
            let mut pieces = data.chunks(3000).peekable();
            let mut out = Vec::new();
            while let Some(piece) = pieces.next() {
                if pieces.peek().is_none() {
                    out.extend_from_slice(&stage.finish(piece).unwrap());
                } else {
                    // Gathered: nothing comes out before the end.
                    assert_eq!(stage.push(piece).unwrap(), None, "level {level}, {n} B");
                }
            }
            assert!(stage.is_done());
            assert_eq!(decode(Codec::Gzip, &out), data, "level {level}, {n} B");
            if n >= 2048 {
                assert!(out.len() * 2 < n, "level {level}, {n} B: {}", out.len());
            }
            drop(stage);
            // The pooled encoder streams the next (unknown-length) body after its whole one.
            let mut h = head(&[("content-type", "text/html")]);
            let mut next = p
                .respond(&Method::GET, accepted("gzip"), StatusCode::OK, &mut h, None)
                .unwrap();
            let mut out = next
                .push(&data)
                .unwrap()
                .map(|b| b.to_vec())
                .unwrap_or_default();
            out.extend_from_slice(&next.finish(b"end").unwrap());
            assert_eq!(decode(Codec::Gzip, &out), [&data[..], b"end"].concat());
            drop(next);
            let c = &p.snapshot().codecs[0];
            assert_eq!((c.responses, c.whole), (2, 1), "one whole, one streamed");
        }
    }
}

#[test]
fn a_pause_of_the_server_sends_what_was_gathered() {
    let data = html(50_000);
    let (p, mut stage) = gzip_stage(2, Some(data.len() as u64));
    assert_eq!(stage.push(&data[..20_000]).unwrap(), None);
    // The server pauses: the first 20,000 bytes go out, decodable.
    let first = stage.flush().unwrap().expect("the gathered bytes go out");
    let mut partial = Vec::new();
    let _ = flate2::read::GzDecoder::new(&first[..]).read_to_end(&mut partial);
    assert_eq!(partial, data[..20_000]);
    // Then it streams on.
    let mut out = first.to_vec();
    if let Some(b) = stage.push(&data[20_000..45_000]).unwrap() {
        out.extend_from_slice(&b);
    }
    out.extend_from_slice(&stage.finish(&data[45_000..]).unwrap());
    assert_eq!(decode(Codec::Gzip, &out), data);
    drop(stage);
    assert_eq!(
        p.snapshot().codecs[0].whole,
        0,
        "a spilled body is streamed"
    );
}

#[test]
fn a_body_longer_than_its_length_or_over_the_bound_streams() {
    // Over the bound: streamed from the first frame on (output before the end).
    let data = html(3 * WHOLE_MAX as usize);
    let (_p, mut stage) = gzip_stage(2, Some(data.len() as u64));
    let mut out = Vec::new();
    let mut early = false;
    for piece in data.chunks(16 * 1024) {
        if let Some(b) = stage.push(piece).unwrap() {
            early = true;
            out.extend_from_slice(&b);
        }
    }
    out.extend_from_slice(&stage.finish(&[]).unwrap());
    assert!(early, "a large body streams");
    assert_eq!(decode(Codec::Gzip, &out), data);
    // A server that sends more than its Content-Length said (the framing layer cuts it, but
    // the stage must not lose or corrupt a byte either way).
    let data = html(WHOLE_MAX as usize + 5000);
    let (_p, mut stage) = gzip_stage(2, Some(1000));
    let mut out = Vec::new();
    for piece in data.chunks(10_000) {
        if let Some(b) = stage.push(piece).unwrap() {
            out.extend_from_slice(&b);
        }
    }
    out.extend_from_slice(&stage.finish(&[]).unwrap());
    assert_eq!(decode(Codec::Gzip, &out), data);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any bytes (random ones expand: every codec call must find room for more output than
    /// input), cut anywhere, with flushes anywhere, decode to themselves with every codec.
    #[test]
    fn any_bytes_in_any_pieces_round_trip(
        data in prop::collection::vec(any::<u8>(), 0..40_000),
        cuts in prop::collection::vec((1usize..9_000, any::<bool>()), 1..12),
        known_size in any::<bool>(),
    ) {
        for codec in Codec::ALL {
            let size = known_size.then_some(data.len() as u64);
            let mut e = Encoder::new(codec, codec.default_level(), size).unwrap();
            let mut out = BytesMut::new();
            let mut rest = &data[..];
            for &(n, sync) in &cuts {
                let (piece, tail) = rest.split_at(n.min(rest.len()));
                let flush = if sync { Flush::Sync } else { Flush::None };
                e.encode(piece, flush, &mut out).unwrap();
                rest = tail;
            }
            e.encode(rest, Flush::Finish, &mut out).unwrap();
            prop_assert_eq!(decode(codec, &out), data.clone(), "{}", codec);
        }
    }

    /// Any bytes compressed whole, at any level, decode to themselves; the encoder streams
    /// correctly after a reset.
    #[test]
    fn any_bytes_compressed_whole_round_trip(
        data in prop::collection::vec(any::<u8>(), 0..70_000),
        level in 1u32..=9,
    ) {
        for codec in Codec::ALL {
            let (lo, hi) = codec.levels();
            let mut e = Encoder::new(codec, level.clamp(lo, hi), Some(data.len() as u64)).unwrap();
            let mut out = BytesMut::new();
            e.whole(&data, &mut out).unwrap();
            prop_assert_eq!(decode(codec, &out), data.clone(), "{}", codec);
            if e.reset(None) {
                let mut out = BytesMut::new();
                e.encode(&data, Flush::Finish, &mut out).unwrap();
                prop_assert_eq!(decode(codec, &out), data.clone(), "{} reused", codec);
            }
        }
    }
}

// --- CPU ----------------------------------------------------------------------------------------

#[test]
fn proc_files_are_read() {
    let stat = "cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 50 2 25 400 20 1 1 0 0 0\nintr 1\n";
    assert_eq!(Times::parse_system(stat), Some((1000, 160)));
    assert_eq!(Times::parse_system("intr 1\n"), None);
    assert_eq!(Times::parse_system("cpu  1 x\n"), None);
    let own = "4242 (headway (x) y) S 1 2 3 4 5 6 7 8 9 10 130 17 0 0 20 0 4 0 123\n";
    assert_eq!(Times::parse_process(own), Some(147));
    assert_eq!(Times::parse_process("4242 (x) S 1 2"), None);
    let a = Times {
        total: 1000,
        busy: 100,
        process: 10,
    };
    let b = Times {
        total: 1400,
        busy: 400,
        process: 110,
    };
    assert_eq!(b.utilisation(&a, CpuSource::System), Some(0.75));
    assert_eq!(b.utilisation(&a, CpuSource::Process), Some(0.25));
    assert_eq!(a.utilisation(&a, CpuSource::System), None);
}

#[test]
fn the_bypass_has_hysteresis() {
    let b = CpuBypass {
        engage: 0.9,
        release: 0.7,
        source: CpuSource::System,
    };
    let mut on = false;
    let mut flips = Vec::new();
    for u in [0.5, 0.89, 0.9, 0.8, 0.71, 0.7, 0.69, 0.85, 0.95] {
        let next = next_engaged(on, u, &b);
        if next != on {
            flips.push((u, next));
        }
        on = next;
    }
    assert_eq!(flips, [(0.9, true), (0.69, false), (0.95, true)]);
    // One gate per setting, shared.
    let g1 = cpu::gate(b);
    let g2 = cpu::gate(b);
    assert!(Arc::ptr_eq(&g1, &g2));
    assert!(!Arc::ptr_eq(
        &g1,
        &cpu::gate(CpuBypass { release: 0.5, ..b })
    ));
}
