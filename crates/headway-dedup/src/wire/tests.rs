use super::*;
use proptest::prelude::*;

/// An owned token, for generating arbitrary ones.
#[derive(Clone, Debug)]
enum Owned {
    Hello(Mode),
    Data(bool, u32, [u8; 16], Vec<u8>),
    Literal([u8; 16], bool, Option<([u8; 32], u16)>, Vec<u16>, Vec<u8>),
    Run([u8; 32], u32, [u8; 16]),
    Reply(u64, bool, bool, Vec<u16>, Vec<u8>),
    End,
    Need(u64),
}

fn lens_be(lens: &[u16]) -> Vec<u8> {
    lens.iter().flat_map(|l| l.to_be_bytes()).collect()
}

impl Owned {
    fn with<R>(&self, f: impl FnOnce(Token<'_>) -> R) -> R {
        match self {
            Owned::Hello(mode) => f(Token::Hello { mode: *mode }),
            Owned::Data(c, raw_len, d, p) => f(Token::Data {
                compressed: *c,
                raw_len: *raw_len,
                digest: Digest(*d),
                payload: p,
            }),
            Owned::Literal(d, c, dict, lens, p) => {
                let l = lens_be(lens);
                f(Token::Literal {
                    digest: Digest(*d),
                    dict: dict.map(|(base, count)| DictRef {
                        base: ChunkId(base),
                        count,
                    }),
                    chunks: Chunks::new(*c, &l, p),
                })
            }
            Owned::Run(first, count, d) => f(Token::Run {
                first: ChunkId(*first),
                count: *count,
                digest: Digest(*d),
            }),
            Owned::Reply(seq, last, c, lens, p) => {
                let l = lens_be(lens);
                f(Token::Reply {
                    seq: *seq,
                    last: *last,
                    chunks: Chunks::new(*c, &l, p),
                })
            }
            Owned::End => f(Token::End),
            Owned::Need(seq) => f(Token::Need(Need { seq: *seq })),
        }
    }
}

/// Chunk lengths and a payload consistent with them (raw, or "compressed" = shorter).
fn chunk_list() -> impl Strategy<Value = (bool, Vec<u16>, Vec<u8>)> {
    (
        proptest::collection::vec(1u16..600, 1..20),
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(|(lens, compressed, fill)| {
            let raw: usize = lens.iter().map(|&l| l as usize).sum();
            let compressed = compressed && raw > 1;
            let n = if compressed { raw - 1 } else { raw };
            (compressed, lens, vec![fill; n])
        })
}

fn token() -> impl Strategy<Value = Owned> {
    prop_oneof![
        prop_oneof![
            Just(Mode::Passthrough),
            Just(Mode::Compress),
            Just(Mode::Dedup)
        ]
        .prop_map(Owned::Hello),
        (any::<bool>(), 2u32..5000, any::<[u8; 16]>()).prop_map(|(c, raw, d)| {
            let n = if c { raw - 1 } else { raw };
            Owned::Data(c, raw, d, vec![7; n as usize])
        }),
        (
            any::<[u8; 16]>(),
            chunk_list(),
            proptest::option::of((any::<[u8; 32]>(), 1..=MAX_DICT_CHUNKS))
        )
            .prop_map(|(d, (c, l, p), dict)| Owned::Literal(d, c, dict, l, p)),
        (any::<[u8; 32]>(), 1..=MAX_RUN_CHUNKS, any::<[u8; 16]>())
            .prop_map(|(f, c, d)| Owned::Run(f, c, d)),
        (any::<u64>(), any::<bool>(), chunk_list())
            .prop_map(|(s, last, (c, l, p))| Owned::Reply(s, last, c, l, p)),
        Just(Owned::End),
        any::<u64>().prop_map(Owned::Need),
    ]
}

fn fix_compressed(o: Owned) -> Owned {
    // A "compressed" list must be strictly shorter than its raw length.
    match o {
        Owned::Literal(d, true, dict, l, mut p) => {
            let raw: usize = l.iter().map(|&x| x as usize).sum();
            p.truncate(raw - 1);
            Owned::Literal(d, raw > 1, dict.filter(|_| raw > 1), l, p)
        }
        // A dictionary is only allowed on a compressed payload.
        Owned::Literal(d, false, _, l, p) => Owned::Literal(d, false, None, l, p),
        other => other,
    }
}

proptest! {
    #[test]
    fn round_trip(tokens in proptest::collection::vec(token().prop_map(fix_compressed), 1..10)) {
        let mut buf = BytesMut::new();
        let mut lens = Vec::new();
        for t in &tokens {
            t.with(|t| {
                let before = buf.len();
                t.emit(&mut buf);
                lens.push(buf.len() - before);
                assert_eq!(buf.len() - before, t.buffer_len());
            });
        }
        let mut at = 0;
        for (t, len) in tokens.iter().zip(lens) {
            let (parsed, n) = Token::parse(&buf[at..]).expect("parses");
            prop_assert_eq!(n, len);
            t.with(|t| assert_eq!(parsed, t));
            // Every strict prefix is reported as truncated, never as another token.
            for cut in [0, 1, HEADER_LEN, n - 1] {
                if cut < n {
                    let short = Token::parse(&buf[at..at + cut]);
                    prop_assert!(
                        matches!(short, Err(WireError::Truncated { .. })),
                        "prefix {} of {}: {:?}", cut, n, short
                    );
                }
            }
            at += n;
        }
        prop_assert_eq!(at, buf.len());
    }

    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Token::parse(&bytes);
    }

    #[test]
    fn parse_never_panics_on_valid_headers(
        ty in 1u8..=7,
        body in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut b = vec![ty];
        b.extend_from_slice(&(body.len() as u32).to_be_bytes());
        b.extend_from_slice(&body);
        if let Ok((_, n)) = Token::parse(&b) {
            prop_assert_eq!(n, b.len());
        }
    }
}

#[test]
fn huge_length_is_refused_before_buffering() {
    let b = [T_DATA, 0xff, 0xff, 0xff, 0xff];
    assert_eq!(Token::parse(&b), Err(WireError::TooLong(u32::MAX)));
}

#[test]
fn hostile_run_counts_are_refused() {
    for count in [0u32, MAX_RUN_CHUNKS + 1, u32::MAX] {
        let mut buf = BytesMut::new();
        Token::Run {
            first: ChunkId([1; 32]),
            count,
            digest: Digest([2; 16]),
        }
        .emit(&mut buf);
        assert_eq!(Token::parse(&buf), Err(WireError::OutOfRange("run count")));
    }
}

#[test]
fn hostile_frames_are_refused() {
    // Declared raw size beyond the frame limit with a tiny "compressed" payload.
    let lens: Vec<u8> = std::iter::repeat_n(u16::MAX.to_be_bytes(), 5)
        .flatten()
        .collect();
    let mut buf = BytesMut::new();
    Token::Literal {
        digest: Digest([0; 16]),
        dict: None,
        chunks: Chunks::new(true, &lens, b"abc"),
    }
    .emit(&mut buf);
    assert_eq!(Token::parse(&buf), Err(WireError::OutOfRange("frame size")));

    // Zero-length chunk.
    let mut buf = BytesMut::new();
    Token::Reply {
        seq: 1,
        last: true,
        chunks: Chunks::new(false, &[0, 0], b""),
    }
    .emit(&mut buf);
    assert_eq!(
        Token::parse(&buf),
        Err(WireError::OutOfRange("chunk length"))
    );

    // Raw payload shorter than its lengths say.
    let mut buf = BytesMut::new();
    Token::Data {
        compressed: false,
        raw_len: 10,
        digest: Digest([0; 16]),
        payload: b"abc",
    }
    .emit(&mut buf);
    assert_eq!(
        Token::parse(&buf),
        Err(WireError::Malformed("payload size"))
    );

    // Unknown version, mode, type, flags.
    assert_eq!(
        Token::parse(&[T_HELLO, 0, 0, 0, 2, 9, 0]),
        Err(WireError::UnsupportedVersion(9))
    );
    assert_eq!(
        Token::parse(&[T_HELLO, 0, 0, 0, 2, VERSION, 7]),
        Err(WireError::BadMode(7))
    );
    assert_eq!(
        Token::parse(&[0x42, 0, 0, 0, 0]),
        Err(WireError::UnknownType(0x42))
    );
    let mut d = vec![T_DATA, 0, 0, 0, 22, 0x80, 0, 0, 0, 1];
    d.extend_from_slice(&[0; 16]);
    d.push(1);
    assert_eq!(Token::parse(&d), Err(WireError::BadFlags(0x80)));
}
