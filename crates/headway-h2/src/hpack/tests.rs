//! Tests of HPACK: the examples of RFC 7541 Appendix C, the Huffman code, the decoder's error and
//! malformed cases, the encoder's output, and property tests against a model encoder that uses
//! every representation, the dynamic table and Huffman coding.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue, StatusCode};
use proptest::prelude::*;

use super::table::{static_name_index, Slot, STATIC, STATIC_LEN};
use super::*;

// ---------------------------------------------------------------------------------------------
// Helpers

/// The bytes of a hex dump as RFC 7541 prints them (spaces ignored).
fn hex(dump: &str) -> Bytes {
    let digits: Vec<u8> = dump.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert_eq!(digits.len() % 2, 0, "odd hex dump");
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect::<Vec<u8>>()
        .into()
}

fn hdr(name: &'static str, value: &'static str) -> Field {
    Field::Header(
        HeaderName::from_static(name),
        HeaderValue::from_static(value),
    )
}

fn ps(kind: Pseudo, value: &'static str) -> Field {
    Field::Pseudo(kind, Bytes::from_static(value.as_bytes()))
}

/// Decodes `block` without a list limit.
fn decode(dec: &mut Decoder, block: &Bytes) -> Result<(Vec<Field>, Decoded), DecodeError> {
    decode_limited(dec, block, usize::MAX)
}

fn decode_limited(
    dec: &mut Decoder,
    block: &Bytes,
    max_list_size: usize,
) -> Result<(Vec<Field>, Decoded), DecodeError> {
    let mut fields = Vec::new();
    let decoded = dec.decode(block, max_list_size, |f| fields.push(f))?;
    Ok((fields, decoded))
}

/// Decodes `block` and expects it clean (not malformed, not too large).
fn decode_ok(dec: &mut Decoder, block: &Bytes) -> Vec<Field> {
    let (fields, decoded) = decode(dec, block).expect("decodes");
    assert_eq!(decoded, Decoded::default());
    fields
}

/// A field's name and value as bytes.
fn parts(field: &Field) -> (Vec<u8>, Vec<u8>) {
    match field {
        Field::Pseudo(kind, value) => (kind.as_str().as_bytes().to_vec(), value.to_vec()),
        Field::Header(name, value) => {
            (name.as_str().as_bytes().to_vec(), value.as_bytes().to_vec())
        }
    }
}

/// Checks the decoder's dynamic table against RFC 7541's "Dynamic Table (after decoding)".
fn assert_table(dec: &Decoder, expected: &[(&str, &str, usize)], total: usize) {
    let got: Vec<(String, String, usize)> = dec
        .table
        .entries()
        .map(|entry| match &entry.slot {
            Slot::Valid(field) => {
                let (name, value) = parts(field);
                (
                    String::from_utf8(name).unwrap(),
                    String::from_utf8(value).unwrap(),
                    entry.size,
                )
            }
            other => panic!("invalid entry {other:?}"),
        })
        .collect();
    let expected: Vec<(String, String, usize)> = expected
        .iter()
        .map(|&(n, v, s)| (n.to_owned(), v.to_owned(), s))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(dec.table.size(), total);
}

/// A literal field with a literal name, plain strings: `flags` is 0x40 (incremental indexing),
/// 0x00 (without) or 0x10 (never).
fn literal(flags: u8, name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.extend_from_slice(&[flags]);
    encode_string(name, &mut out);
    encode_string(value, &mut out);
    out.to_vec()
}

fn size_update(size: usize) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_integer(0x20, 5, size, &mut out);
    out.to_vec()
}

fn block(parts: &[&[u8]]) -> Bytes {
    parts.concat().into()
}

// ---------------------------------------------------------------------------------------------
// RFC 7541 Appendix C

#[test]
fn c1_integers() {
    // C.1.1: 10 with a 5-bit prefix; the first three bits belong to something else.
    let mut pos = 0;
    assert_eq!(decode_integer(&[0xea], &mut pos, 5), Ok(10));
    assert_eq!(pos, 1);
    // C.1.2: 1337 with a 5-bit prefix.
    let mut pos = 0;
    assert_eq!(decode_integer(&[0x1f, 0x9a, 0x0a], &mut pos, 5), Ok(1337));
    assert_eq!(pos, 3);
    // C.1.3: 42 on an octet boundary.
    let mut pos = 0;
    assert_eq!(decode_integer(&[0x2a], &mut pos, 8), Ok(42));
    // And the encoder writes the same bytes.
    let mut out = BytesMut::new();
    encode_integer(0xe0, 5, 10, &mut out);
    encode_integer(0x00, 5, 1337, &mut out);
    encode_integer(0x00, 8, 42, &mut out);
    assert_eq!(&out[..], &[0xea, 0x1f, 0x9a, 0x0a, 0x2a]);
}

#[test]
fn c2_1_literal_with_indexing() {
    let mut dec = Decoder::new(4096);
    let fields = decode_ok(
        &mut dec,
        &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
    );
    assert_eq!(fields, [hdr("custom-key", "custom-header")]);
    assert_table(&dec, &[("custom-key", "custom-header", 55)], 55);
}

#[test]
fn c2_2_literal_without_indexing() {
    let mut dec = Decoder::new(4096);
    let fields = decode_ok(&mut dec, &hex("040c 2f73 616d 706c 652f 7061 7468"));
    assert_eq!(fields, [ps(Pseudo::Path, "/sample/path")]);
    assert_table(&dec, &[], 0);
}

#[test]
fn c2_3_literal_never_indexed() {
    let mut dec = Decoder::new(4096);
    let fields = decode_ok(&mut dec, &hex("1008 7061 7373 776f 7264 0673 6563 7265 74"));
    assert_eq!(fields, [hdr("password", "secret")]);
    // The never-indexed flag survives as the value's sensitivity, for re-encoding.
    let Field::Header(_, value) = &fields[0] else {
        panic!("not a header")
    };
    assert!(value.is_sensitive());
    assert_table(&dec, &[], 0);
}

#[test]
fn c2_4_indexed() {
    let mut dec = Decoder::new(4096);
    assert_eq!(decode_ok(&mut dec, &hex("82")), [ps(Pseudo::Method, "GET")]);
    assert_table(&dec, &[], 0);
}

/// The three requests of C.3 (plain) and C.4 (Huffman): same fields, same tables.
fn check_requests(blocks: [&str; 3]) {
    let mut dec = Decoder::new(4096);
    let first = [
        ps(Pseudo::Method, "GET"),
        ps(Pseudo::Scheme, "http"),
        ps(Pseudo::Path, "/"),
        ps(Pseudo::Authority, "www.example.com"),
    ];
    assert_eq!(decode_ok(&mut dec, &hex(blocks[0])), first);
    assert_table(&dec, &[(":authority", "www.example.com", 57)], 57);

    let mut second = first.to_vec();
    second.push(hdr("cache-control", "no-cache"));
    assert_eq!(decode_ok(&mut dec, &hex(blocks[1])), second);
    assert_table(
        &dec,
        &[
            ("cache-control", "no-cache", 53),
            (":authority", "www.example.com", 57),
        ],
        110,
    );

    let third = [
        ps(Pseudo::Method, "GET"),
        ps(Pseudo::Scheme, "https"),
        ps(Pseudo::Path, "/index.html"),
        ps(Pseudo::Authority, "www.example.com"),
        hdr("custom-key", "custom-value"),
    ];
    assert_eq!(decode_ok(&mut dec, &hex(blocks[2])), third);
    assert_table(
        &dec,
        &[
            ("custom-key", "custom-value", 54),
            ("cache-control", "no-cache", 53),
            (":authority", "www.example.com", 57),
        ],
        164,
    );
}

#[test]
fn c3_requests_without_huffman() {
    check_requests([
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ]);
}

#[test]
fn c4_requests_with_huffman() {
    check_requests([
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ]);
}

/// The three responses of C.5 (plain) and C.6 (Huffman), with a 256-byte table.
fn check_responses(blocks: [&str; 3]) {
    let mut dec = Decoder::new(256);
    let date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
    let date2 = "Mon, 21 Oct 2013 20:13:22 GMT";
    let location = "https://www.example.com";
    let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

    assert_eq!(
        decode_ok(&mut dec, &hex(blocks[0])),
        [
            ps(Pseudo::Status, "302"),
            hdr("cache-control", "private"),
            hdr("date", date1),
            hdr("location", location),
        ]
    );
    assert_table(
        &dec,
        &[
            ("location", location, 63),
            ("date", date1, 65),
            ("cache-control", "private", 52),
            (":status", "302", 42),
        ],
        222,
    );

    // (":status", "302") is evicted for (":status", "307").
    assert_eq!(
        decode_ok(&mut dec, &hex(blocks[1])),
        [
            ps(Pseudo::Status, "307"),
            hdr("cache-control", "private"),
            hdr("date", date1),
            hdr("location", location),
        ]
    );
    assert_table(
        &dec,
        &[
            (":status", "307", 42),
            ("location", location, 63),
            ("date", date1, 65),
            ("cache-control", "private", 52),
        ],
        222,
    );

    // Several entries are evicted.
    assert_eq!(
        decode_ok(&mut dec, &hex(blocks[2])),
        [
            ps(Pseudo::Status, "200"),
            hdr("cache-control", "private"),
            hdr("date", date2),
            hdr("location", location),
            hdr("content-encoding", "gzip"),
            hdr("set-cookie", cookie),
        ]
    );
    assert_table(
        &dec,
        &[
            ("set-cookie", cookie, 98),
            ("content-encoding", "gzip", 52),
            ("date", date2, 65),
        ],
        215,
    );
}

#[test]
fn c5_responses_without_huffman() {
    check_responses([
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
         6c65 2e63 6f6d",
        "4803 3330 37c1 c0bf",
        "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
         3d31",
    ]);
}

#[test]
fn c6_responses_with_huffman() {
    check_responses([
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    ]);
}

// ---------------------------------------------------------------------------------------------
// Huffman

#[test]
fn huffman_table_is_a_canonical_complete_code() {
    // Kraft's equality: the code is complete (every bit string decodes or is a prefix).
    let kraft: u64 = huffman::CODES
        .iter()
        .map(|&(_, len)| 1u64 << (30 - len))
        .sum();
    assert_eq!(kraft, 1 << 30);
    // Canonical: sorted by (length, symbol), each code is the previous plus one, shifted to its
    // length. A mistyped code or length breaks this.
    let mut order: Vec<usize> = (0..huffman::CODES.len()).collect();
    order.sort_by_key(|&s| (huffman::CODES[s].1, s));
    let mut code = 0u32;
    let mut len = huffman::CODES[order[0]].1;
    for (i, &symbol) in order.iter().enumerate() {
        let (c, l) = huffman::CODES[symbol];
        if i > 0 {
            code = (code + 1) << (l - len);
            len = l;
        }
        assert_eq!(c, code, "symbol {symbol}");
    }
    // Spot checks against RFC 7541 Appendix B.
    assert_eq!(huffman::CODES[b' ' as usize], (0x14, 6));
    assert_eq!(huffman::CODES[b'a' as usize], (0x3, 5));
    assert_eq!(huffman::CODES[255], (0x3ffffee, 26));
    assert_eq!(huffman::CODES[256], (0x3fffffff, 30));
}

#[test]
fn huffman_round_trips_every_byte() {
    for b in 0..=255u8 {
        let mut coded = Vec::new();
        huffman::encode(&[b], &mut coded);
        assert_eq!(coded.len(), huffman::encoded_len(&[b]));
        let mut out = Vec::new();
        huffman::decode(&coded, &mut out).unwrap();
        assert_eq!(out, [b], "byte {b}");
    }
    let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let mut coded = Vec::new();
    huffman::encode(&all, &mut coded);
    let mut out = Vec::new();
    huffman::decode(&coded, &mut out).unwrap();
    assert_eq!(out, all);
}

#[test]
fn huffman_matches_the_rfc() {
    // C.4.1's `www.example.com`.
    let mut coded = Vec::new();
    huffman::encode(b"www.example.com", &mut coded);
    assert_eq!(coded, hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff"));
}

#[test]
fn huffman_refuses_eos_and_bad_padding() {
    let decode = |src: &[u8]| huffman::decode(src, &mut Vec::new());
    // 30 ones: EOS.
    assert_eq!(
        decode(&[0xff, 0xff, 0xff, 0xff]),
        Err(DecodeError::HuffmanEos)
    );
    // `a` (00011) and EOS.
    assert_eq!(
        decode(&[0x1f, 0xff, 0xff, 0xff, 0xfe]),
        Err(DecodeError::HuffmanEos)
    );
    // 8 bits of padding.
    assert_eq!(decode(&[0xff]), Err(DecodeError::HuffmanPadding));
    // `a` and 11 bits of padding.
    assert_eq!(decode(&[0x1f, 0xff]), Err(DecodeError::HuffmanPadding));
    // `a` padded with zeros.
    assert_eq!(decode(&[0x18]), Err(DecodeError::HuffmanPadding));
    // `a` padded with ones, and the empty string, are fine.
    let mut out = Vec::new();
    huffman::decode(&[0x1f], &mut out).unwrap();
    assert_eq!(out, b"a");
    assert_eq!(decode(&[]), Ok(()));
}

#[test]
fn huffman_errors_in_a_block_are_decoding_errors() {
    let mut dec = Decoder::new(4096);
    // A Huffman value (H = 1, length 1) of 8 padding bits.
    let bad = block(&[&[0x04, 0x81, 0xff]]);
    assert_eq!(decode(&mut dec, &bad), Err(DecodeError::HuffmanPadding));
    // A Huffman name.
    let mut dec = Decoder::new(4096);
    let bad = block(&[&[0x00, 0x81, 0x18, 0x00]]);
    assert_eq!(decode(&mut dec, &bad), Err(DecodeError::HuffmanPadding));
}

#[test]
fn huffman_decode_bound_holds() {
    for len in 0..50 {
        assert_eq!(huffman::max_decoded_len(len), len * 8 / 5);
    }
    // The bound is reached: `0` is 5 bits.
    let zeros = vec![b'0'; 8];
    let mut coded = Vec::new();
    huffman::encode(&zeros, &mut coded);
    assert_eq!(coded.len(), 5);
}

// ---------------------------------------------------------------------------------------------
// Decoder: errors

#[test]
fn integer_overflow_is_an_error() {
    let mut long = vec![0x1f];
    long.extend(std::iter::repeat_n(0xff, 100));
    for bad in [
        long.clone(),
        // Indexed, size update, and a string length.
        vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        vec![0x3f, 0xff, 0xff, 0xff, 0xff, 0x01],
        vec![0x00, 0x7f, 0xff, 0xff, 0xff, 0xff, 0x0f],
    ] {
        let mut dec = Decoder::new(4096);
        assert_eq!(
            decode(&mut dec, &bad.into()),
            Err(DecodeError::IntegerOverflow)
        );
    }
    // Four continuation bytes are still read (here a padded 127: out of range).
    let mut dec = Decoder::new(4096);
    assert_eq!(
        decode(&mut dec, &hex("ff 80 80 80 00")),
        Err(DecodeError::IndexOutOfRange {
            index: 127,
            len: STATIC_LEN
        })
    );
}

#[test]
fn truncated_input_is_an_error() {
    for (dump, err) in [
        ("ff", DecodeError::TruncatedInteger),
        ("1f 80", DecodeError::TruncatedInteger),
        ("40", DecodeError::TruncatedString),
        ("00", DecodeError::TruncatedString),
        ("00 01 61", DecodeError::TruncatedString),
        ("00 05 61 62 63", DecodeError::TruncatedString),
        ("00 01 61 03 62 63", DecodeError::TruncatedString),
        (
            "0f 30",
            DecodeError::IndexOutOfRange {
                index: 63,
                len: STATIC_LEN,
            },
        ),
    ] {
        let mut dec = Decoder::new(4096);
        assert_eq!(decode(&mut dec, &hex(dump)), Err(err), "{dump}");
    }
}

#[test]
fn index_zero_and_out_of_range() {
    let mut dec = Decoder::new(4096);
    assert_eq!(decode(&mut dec, &hex("80")), Err(DecodeError::ZeroIndex));
    let mut dec = Decoder::new(4096);
    assert_eq!(
        decode(&mut dec, &hex("be")),
        Err(DecodeError::IndexOutOfRange {
            index: 62,
            len: STATIC_LEN
        })
    );
    // Literal with an indexed name of 62.
    let mut dec = Decoder::new(4096);
    assert_eq!(
        decode(&mut dec, &hex("7e 01 61")),
        Err(DecodeError::IndexOutOfRange {
            index: 62,
            len: STATIC_LEN
        })
    );
    // Every static index decodes.
    for index in 1..=STATIC_LEN {
        let mut dec = Decoder::new(4096);
        let mut out = BytesMut::new();
        encode_integer(0x80, 7, index, &mut out);
        assert_eq!(
            decode_ok(&mut dec, &out.freeze()),
            [STATIC[index - 1].clone()]
        );
    }
}

#[test]
fn table_size_updates() {
    // At the start, several in a row: fine. 4096 is `3f e1 1f`.
    let mut dec = Decoder::new(4096);
    assert_eq!(size_update(4096), [0x3f, 0xe1, 0x1f]);
    decode_ok(
        &mut dec,
        &block(&[&size_update(0), &size_update(4096), &[0x82]]),
    );
    assert_eq!(dec.table.capacity(), 4096);

    // After a field: an error.
    let mut dec = Decoder::new(4096);
    assert_eq!(
        decode(&mut dec, &block(&[&[0x82], &size_update(0)])),
        Err(DecodeError::LateTableSizeUpdate)
    );

    // Above the limit: an error.
    let mut dec = Decoder::new(4096);
    assert_eq!(
        decode(&mut dec, &block(&[&size_update(4097)])),
        Err(DecodeError::TableSizeTooLarge {
            size: 4097,
            max: 4096
        })
    );

    // An update to 0 empties the table.
    let mut dec = Decoder::new(4096);
    decode_ok(&mut dec, &hex("400a 6375 7374 6f6d 2d6b 6579 0161"));
    assert_eq!(dec.table.len(), 1);
    decode_ok(&mut dec, &block(&[&size_update(0)]));
    assert_eq!((dec.table.len(), dec.table.size()), (0, 0));
    assert!(matches!(
        decode(&mut dec, &hex("be")),
        Err(DecodeError::IndexOutOfRange { index: 62, .. })
    ));
}

#[test]
fn a_lowered_limit_requires_an_update() {
    let mut dec = Decoder::new(4096);
    dec.set_max_table_size(100);
    // An empty block leaves the requirement for the next one.
    decode_ok(&mut dec, &Bytes::new());
    assert_eq!(
        decode(&mut dec, &hex("82")),
        Err(DecodeError::MissingTableSizeUpdate)
    );

    let mut dec = Decoder::new(4096);
    dec.set_max_table_size(100);
    assert_eq!(
        decode(&mut dec, &block(&[&size_update(200), &[0x82]])),
        Err(DecodeError::TableSizeTooLarge {
            size: 200,
            max: 100
        })
    );

    let mut dec = Decoder::new(4096);
    dec.set_max_table_size(100);
    decode_ok(&mut dec, &block(&[&size_update(100), &[0x82]]));
    // Satisfied: the next block needs none.
    decode_ok(&mut dec, &hex("82"));

    // Raising the limit requires nothing.
    let mut dec = Decoder::new(4096);
    dec.set_max_table_size(8192);
    decode_ok(&mut dec, &hex("82"));
    decode_ok(&mut dec, &block(&[&size_update(8192)]));
    assert_eq!(dec.table.capacity(), 8192);
}

// ---------------------------------------------------------------------------------------------
// Decoder: eviction, malformed fields, list size

#[test]
fn an_entry_larger_than_the_table_empties_it() {
    let mut dec = Decoder::new(100);
    decode_ok(&mut dec, &block(&[&literal(0x40, b"a", b"b")]));
    assert_eq!(dec.table.size(), 34);
    let big = vec![b'v'; 100];
    let fields = decode_ok(&mut dec, &block(&[&literal(0x40, b"x", &big)]));
    // Emitted all the same.
    assert_eq!(parts(&fields[0]), (b"x".to_vec(), big));
    assert_eq!((dec.table.len(), dec.table.size()), (0, 0));
    // Exactly the table's size fits: 1 + 67 + 32.
    decode_ok(&mut dec, &block(&[&literal(0x40, b"y", &[b'v'; 67])]));
    assert_eq!((dec.table.len(), dec.table.size()), (1, 100));
}

#[test]
fn malformed_fields_are_flagged_and_skipped() {
    let cases: [&[u8]; 8] = [
        &literal(0x00, b"Custom-Key", b"v"),
        &literal(0x00, b":foo", b"v"),
        &literal(0x00, b"", b"v"),
        &literal(0x00, b"x y", b"v"),
        &literal(0x00, b"x-a", b"a\nb"),
        &literal(0x00, b"x-a", b" leading"),
        &literal(0x00, b"x-a", b"trailing\t"),
        // A pseudo-header value with NUL.
        &literal(0x00, b":path", b"/\0"),
    ];
    for case in cases {
        let mut dec = Decoder::new(4096);
        // A valid field on each side: decoding goes on past the bad one.
        let (fields, decoded) = decode(&mut dec, &block(&[&[0x82], case, &[0x84]])).unwrap();
        assert_eq!(
            fields,
            [ps(Pseudo::Method, "GET"), ps(Pseudo::Path, "/")],
            "{case:?}"
        );
        assert!(decoded.malformed, "{case:?}");
        assert!(!decoded.too_large);
    }
    // Inner whitespace, obs-text and HTAB are fine.
    let mut dec = Decoder::new(4096);
    let fields = decode_ok(&mut dec, &block(&[&literal(0x00, b"x-a", b"a b\tc\xff")]));
    assert_eq!(parts(&fields[0]).1, b"a b\tc\xff");
}

#[test]
fn a_malformed_entry_keeps_the_table_in_step() {
    let mut dec = Decoder::new(4096);
    // A bad value, added to the table: 5 + 3 + 32.
    let (fields, decoded) = decode(&mut dec, &block(&[&literal(0x40, b"x-bad", b"a\nb")])).unwrap();
    assert!(fields.is_empty() && decoded.malformed);
    assert_eq!((dec.table.len(), dec.table.size()), (1, 40));
    // Referring to it: malformed again.
    let (fields, decoded) = decode(&mut dec, &hex("be 82")).unwrap();
    assert_eq!(fields, [ps(Pseudo::Method, "GET")]);
    assert!(decoded.malformed);
    // Its name with a good value: valid (and added).
    let fields = decode_ok(&mut dec, &block(&[&[0x7e, 0x02], b"ok"]));
    assert_eq!(fields, [hdr("x-bad", "ok")]);
    assert_eq!(dec.table.size(), 40 + 39);

    // A bad name, added: no reference to it is ever valid.
    let mut dec = Decoder::new(4096);
    let (_, decoded) = decode(&mut dec, &block(&[&literal(0x40, b"Bad", b"v")])).unwrap();
    assert!(decoded.malformed);
    assert_eq!(dec.table.size(), 36);
    let (fields, decoded) = decode(&mut dec, &block(&[&[0x7e, 0x02], b"ok"])).unwrap();
    assert!(fields.is_empty() && decoded.malformed);
    // Its name's length counted: 3 + 2 + 32, newest first.
    assert_eq!(dec.table.size(), 36 + 37);
    let (fields, decoded) = decode(&mut dec, &hex("bf")).unwrap();
    assert!(fields.is_empty() && decoded.malformed);
}

#[test]
fn too_large_lists_stop_emitting_but_keep_decoding() {
    // :method GET (7 + 3 + 32 = 42), then custom-key: custom-value (54), added to the table.
    let first = block(&[
        &[0x82],
        &literal(0x40, b"custom-key", b"custom-value"),
        &[0x84],
    ]);
    let mut dec = Decoder::new(4096);
    let (fields, decoded) = decode_limited(&mut dec, &first, 60).unwrap();
    assert_eq!(fields, [ps(Pseudo::Method, "GET")]);
    assert!(decoded.too_large && !decoded.malformed);
    // Still added: the next block refers to it.
    assert_eq!(dec.table.size(), 54);
    let (fields, decoded) = decode_limited(&mut dec, &hex("82 be"), 96).unwrap();
    assert_eq!(
        fields,
        [ps(Pseudo::Method, "GET"), hdr("custom-key", "custom-value")]
    );
    assert_eq!(decoded, Decoded::default());
    // The limit is inclusive: 96 fits, 95 does not.
    let (fields, decoded) = decode_limited(&mut dec, &hex("82 be"), 95).unwrap();
    assert_eq!(fields.len(), 1);
    assert!(decoded.too_large);
}

#[test]
fn plain_values_are_slices_of_the_block() {
    let mut dec = Decoder::new(4096);
    let input = block(&[&literal(0x00, b"x-a", b"some value")]);
    let fields = decode_ok(&mut dec, &input);
    let Field::Header(_, value) = &fields[0] else {
        panic!("not a header")
    };
    let range = input.as_ptr_range();
    assert!(range.contains(&value.as_bytes().as_ptr()));
    // A value added to the table is a copy instead.
    let input = block(&[&literal(0x40, b"x-a", b"some value")]);
    let fields = decode_ok(&mut dec, &input);
    let Field::Header(_, value) = &fields[0] else {
        panic!("not a header")
    };
    assert!(!input.as_ptr_range().contains(&value.as_bytes().as_ptr()));
}

#[test]
fn repeated_literals_decode_the_same_and_do_not_pin_the_block() {
    let mut dec = Decoder::new(4096);
    // content-length (static name 28) "128", Huffman-coded, without indexing; then a plain one
    // with a literal name.
    let mut cl = BytesMut::new();
    encode_integer(0x00, 4, 28, &mut cl);
    cl.extend_from_slice(&[0x82, 0x08, 0x9e]); // Huffman "128" (RFC 7541 Appendix B)
    let first = block(&[&cl, &literal(0x00, b"x-a", b"some value")]);
    let want = [hdr("content-length", "128"), hdr("x-a", "some value")];
    assert_eq!(decode_ok(&mut dec, &first), want);
    for _ in 0..3 {
        let again = block(&[&cl, &literal(0x00, b"x-a", b"some value")]);
        let fields = decode_ok(&mut dec, &again);
        assert_eq!(fields, want);
        // A remembered value is the decoder's own copy, not a slice of an earlier block.
        let Field::Header(_, value) = &fields[1] else {
            panic!("not a header")
        };
        assert!(!first.as_ptr_range().contains(&value.as_bytes().as_ptr()));
    }
    // Sizes still count against the list limit: 14 + 3 + 32 = 49.
    let (fields, decoded) = decode_limited(&mut dec, &block(&[&cl]), 48).unwrap();
    assert!(fields.is_empty() && decoded.too_large);
    // A never-indexed field keeps its flag (and is not taken for the same field without).
    let mut never = cl.to_vec();
    never[0] |= 0x10;
    let fields = decode_ok(&mut dec, &block(&[&never]));
    let Field::Header(_, value) = &fields[0] else {
        panic!("not a header")
    };
    assert!(value.is_sensitive());
}

#[test]
fn literals_naming_a_dynamic_entry_are_decoded_each_time() {
    let mut dec = Decoder::new(4096);
    // x-a: 1 goes into the table at index 62; a literal without indexing names index 62.
    decode_ok(&mut dec, &block(&[&literal(0x40, b"x-a", b"1")]));
    let mut named = BytesMut::new();
    encode_integer(0x00, 4, 62, &mut named);
    encode_string(b"v", &mut named);
    assert_eq!(decode_ok(&mut dec, &block(&[&named])), [hdr("x-a", "v")]);
    // x-b: 2 is index 62 now: the same bytes name another field.
    decode_ok(&mut dec, &block(&[&literal(0x40, b"x-b", b"2")]));
    assert_eq!(decode_ok(&mut dec, &block(&[&named])), [hdr("x-b", "v")]);
}

// ---------------------------------------------------------------------------------------------
// Encoder

fn encoded(f: impl FnOnce(&mut Encoder, &mut BytesMut)) -> Vec<u8> {
    let mut out = BytesMut::new();
    f(&mut Encoder::new(), &mut out);
    out.to_vec()
}

#[test]
fn encoder_status() {
    for (code, byte) in [
        (200, 0x88),
        (204, 0x89),
        (206, 0x8a),
        (304, 0x8b),
        (400, 0x8c),
        (404, 0x8d),
        (500, 0x8e),
    ] {
        let status = StatusCode::from_u16(code).unwrap();
        assert_eq!(encoded(|e, d| e.status(status, d)), [byte]);
    }
    let out = encoded(|e, d| e.status(StatusCode::FOUND, d));
    assert_eq!(out, b"\x08\x03302");
    let mut dec = Decoder::new(4096);
    assert_eq!(
        decode_ok(&mut dec, &out.into()),
        [ps(Pseudo::Status, "302")]
    );
}

#[test]
fn encoder_pseudo() {
    let cases: [(Pseudo, &[u8], &[u8]); 11] = [
        (Pseudo::Method, b"GET", b"\x82"),
        (Pseudo::Method, b"POST", b"\x83"),
        (Pseudo::Method, b"PUT", b"\x02\x03PUT"),
        (Pseudo::Scheme, b"http", b"\x86"),
        (Pseudo::Scheme, b"https", b"\x87"),
        (Pseudo::Path, b"/", b"\x84"),
        (Pseudo::Path, b"/a", b"\x04\x02/a"),
        (Pseudo::Authority, b"a.b", b"\x01\x03a.b"),
        (Pseudo::Status, b"404", b"\x8d"),
        (Pseudo::Status, b"302", b"\x08\x03302"),
        (
            Pseudo::Protocol,
            b"websocket",
            b"\x00\x09:protocol\x09websocket",
        ),
    ];
    for (kind, value, expected) in cases {
        assert_eq!(
            encoded(|e, d| e.pseudo(kind, value, d)),
            expected,
            "{kind:?}"
        );
        let mut dec = Decoder::new(4096);
        assert_eq!(
            decode_ok(&mut dec, &Bytes::from(expected.to_vec())),
            [Field::Pseudo(kind, Bytes::copy_from_slice(value))]
        );
    }
}

#[test]
fn encoder_header() {
    let h = |name: &'static str, value: &'static str| {
        encoded(|e, d| {
            e.header(
                &HeaderName::from_static(name),
                &HeaderValue::from_static(value),
                d,
            )
        })
    };
    // Fully in the static table.
    assert_eq!(h("accept-encoding", "gzip, deflate"), [0x90]);
    assert_eq!(h("accept", ""), [0x93]);
    // Static name (16: `0f 01`; 31: `0f 10`), literal value.
    assert_eq!(h("accept-encoding", "br"), b"\x0f\x01\x02br");
    assert_eq!(h("content-type", "text/html"), b"\x0f\x10\x09text/html");
    assert_eq!(h("age", "1"), b"\x0f\x06\x011");
    // Literal name.
    assert_eq!(h("x-foo", "bar"), b"\x00\x05x-foo\x03bar");
    // Sensitive: never indexed, even when the static table has the field.
    let mut value = HeaderValue::from_static("");
    value.set_sensitive(true);
    let out = encoded(|e, d| e.header(&http::header::ACCEPT, &value, d));
    assert_eq!(out, b"\x1f\x04\x00");
    let mut value = HeaderValue::from_static("secret");
    value.set_sensitive(true);
    let name = HeaderName::from_static("x-token");
    let out = encoded(|e, d| e.header(&name, &value, d));
    assert_eq!(out, b"\x10\x07x-token\x06secret");
    let mut dec = Decoder::new(4096);
    let fields = decode_ok(&mut dec, &out.into());
    let Field::Header(_, decoded) = &fields[0] else {
        panic!("not a header")
    };
    assert!(decoded.is_sensitive());
}

#[test]
fn static_name_lookup_finds_every_static_name() {
    for (i, field) in STATIC.iter().enumerate() {
        let Field::Header(name, _) = field else {
            assert!(i < 14);
            continue;
        };
        assert_eq!(static_name_index(name.as_str()), Some(i + 1), "{name}");
    }
    for other in [
        "",
        "x-foo",
        "accept-charsetx",
        "acceptt",
        "hosts",
        "a",
        "via2",
        ":path",
    ] {
        assert_eq!(static_name_index(other), None, "{other}");
    }
}

// ---------------------------------------------------------------------------------------------
// Property tests

/// A valid regular field name: a static one or a random token.
fn name_strategy() -> impl Strategy<Value = HeaderName> {
    prop_oneof![
        (0..STATIC_LEN).prop_filter_map("regular", |i| match &STATIC[i] {
            Field::Header(name, _) => Some(name.clone()),
            Field::Pseudo(..) => None,
        }),
        "[a-z0-9!#$%&'*+.^_`|~-]{1,24}"
            .prop_map(|s| HeaderName::from_lowercase(s.as_bytes()).unwrap()),
    ]
}

/// Bytes from `pick`, without leading or trailing SP/HTAB.
fn trim(mut bytes: Vec<u8>) -> Vec<u8> {
    while matches!(bytes.last(), Some(b' ' | b'\t')) {
        bytes.pop();
    }
    while matches!(bytes.first(), Some(b' ' | b'\t')) {
        bytes.remove(0);
    }
    bytes
}

/// A valid regular field value (RFC 9110 §5.5 and RFC 9113 §8.2.1).
fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        Just(b"gzip, deflate".to_vec()),
        proptest::collection::vec(
            prop_oneof![0x21u8..=0x7e, 0x80u8..=0xff, Just(b' '), Just(b'\t')],
            0..40
        )
        .prop_map(trim),
    ]
}

/// A valid pseudo-header value: anything but NUL, CR, LF, trimmed.
fn pseudo_value_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"GET".to_vec()),
        Just(b"/".to_vec()),
        Just(b"200".to_vec()),
        proptest::collection::vec(
            any::<u8>().prop_filter("no NUL/CR/LF", |b| !matches!(b, 0 | b'\n' | b'\r')),
            0..30
        )
        .prop_map(trim),
    ]
}

fn pseudo_strategy() -> impl Strategy<Value = Pseudo> {
    prop_oneof![
        Just(Pseudo::Method),
        Just(Pseudo::Scheme),
        Just(Pseudo::Authority),
        Just(Pseudo::Path),
        Just(Pseudo::Status),
        Just(Pseudo::Protocol),
    ]
}

/// A valid field; regular values are sometimes sensitive.
fn field_strategy() -> impl Strategy<Value = Field> {
    prop_oneof![
        (pseudo_strategy(), pseudo_value_strategy()).prop_map(|(k, v)| Field::Pseudo(k, v.into())),
        (name_strategy(), value_strategy(), any::<bool>()).prop_map(|(n, v, sensitive)| {
            let mut value = HeaderValue::from_bytes(&v).unwrap();
            value.set_sensitive(sensitive);
            Field::Header(n, value)
        }),
    ]
}

/// One field as the model encoder writes it, valid or deliberately not.
#[derive(Clone, Debug)]
struct Raw {
    name: Vec<u8>,
    value: Vec<u8>,
    valid: bool,
}

/// A field for the model: mostly valid, sometimes broken in one of the ways RFC 9113 §8.2.1
/// and §8.3 forbid.
fn raw_strategy() -> impl Strategy<Value = Raw> {
    (field_strategy(), 0..10u8).prop_map(|(field, breakage)| {
        let (mut name, mut value) = parts(&field);
        let valid = match breakage {
            0 => {
                name.insert(0, b'X');
                false
            }
            1 => {
                name = b":foo".to_vec();
                false
            }
            2 => {
                value.insert(value.len() / 2, b'\n');
                false
            }
            3 => {
                value.insert(0, b' ');
                false
            }
            _ => true,
        };
        Raw { name, value, valid }
    })
}

/// How the model encoder writes one field.
#[derive(Clone, Copy, Debug)]
struct Rep {
    /// 0: indexed if the table has the field, 1: incremental, 2: without, 3: never.
    kind: u8,
    /// Refer to the name by index when a table has it.
    name_index: bool,
    huffman_name: bool,
    huffman_value: bool,
}

fn rep_strategy() -> impl Strategy<Value = Rep> {
    (0..4u8, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(kind, n, hn, hv)| Rep {
        kind,
        name_index: n,
        huffman_name: hn,
        huffman_value: hv,
    })
}

/// A full HPACK encoder written from RFC 7541 for the tests: dynamic table, every
/// representation, Huffman strings, size updates.
struct Model {
    /// (name, value, valid), newest first.
    table: VecDeque<(Vec<u8>, Vec<u8>, bool)>,
    size: usize,
    capacity: usize,
}

impl Model {
    fn entry_size(name: &[u8], value: &[u8]) -> usize {
        name.len() + value.len() + 32
    }

    fn evict(&mut self, limit: usize) {
        while self.size > limit {
            let (n, v, _) = self.table.pop_back().unwrap();
            self.size -= Self::entry_size(&n, &v);
        }
    }

    fn set_capacity(&mut self, capacity: usize, out: &mut BytesMut) {
        encode_integer(0x20, 5, capacity, out);
        self.capacity = capacity;
        self.evict(capacity);
    }

    fn find(&self, name: &[u8], value: Option<&[u8]>) -> Option<usize> {
        let statics = STATIC.iter().map(parts);
        let dynamics = self.table.iter().map(|(n, v, _)| (n.clone(), v.clone()));
        statics
            .chain(dynamics)
            .position(|(n, v)| n == name && value.is_none_or(|value| v == value))
            .map(|i| i + 1)
    }

    fn string(bytes: &[u8], huffman: bool, out: &mut BytesMut) {
        if huffman {
            let mut coded = Vec::new();
            huffman::encode(bytes, &mut coded);
            encode_integer(0x80, 7, coded.len(), out);
            out.extend_from_slice(&coded);
        } else {
            encode_string(bytes, out);
        }
    }

    fn field(&mut self, raw: &Raw, rep: Rep, out: &mut BytesMut) {
        if rep.kind == 0 {
            if let Some(index) = self.find(&raw.name, Some(&raw.value)) {
                encode_integer(0x80, 7, index, out);
                return;
            }
        }
        let (flags, prefix) = match rep.kind {
            0 | 1 => (0x40, 6),
            2 => (0x00, 4),
            _ => (0x10, 4),
        };
        let name_index = if rep.name_index {
            self.find(&raw.name, None)
        } else {
            None
        };
        encode_integer(flags, prefix, name_index.unwrap_or(0), out);
        if name_index.is_none() {
            Self::string(&raw.name, rep.huffman_name, out);
        }
        Self::string(&raw.value, rep.huffman_value, out);
        if flags == 0x40 {
            let size = Self::entry_size(&raw.name, &raw.value);
            if size > self.capacity {
                self.table.clear();
                self.size = 0;
            } else {
                self.evict(self.capacity - size);
                self.size += size;
                self.table
                    .push_front((raw.name.clone(), raw.value.clone(), raw.valid));
            }
        }
    }
}

/// One block for the model: size updates at its start, then fields from a small pool (so that
/// fields repeat and indexed references to the dynamic table happen).
#[derive(Clone, Debug)]
struct BlockPlan {
    updates: Vec<usize>,
    fields: Vec<(usize, Rep)>,
}

fn plan_strategy(max_table: usize) -> impl Strategy<Value = BlockPlan> {
    (
        proptest::collection::vec(0..=max_table, 0..3),
        proptest::collection::vec((0..8usize, rep_strategy()), 0..12),
    )
        .prop_map(|(updates, fields)| BlockPlan { updates, fields })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn encoder_output_decodes_to_the_same_fields(
        fields in proptest::collection::vec(field_strategy(), 0..20),
    ) {
        let mut enc = Encoder::new();
        let mut out = BytesMut::new();
        for field in &fields {
            match field {
                Field::Pseudo(kind, value) => enc.pseudo(*kind, value, &mut out),
                Field::Header(name, value) => enc.header(name, value, &mut out),
            }
        }
        let mut dec = Decoder::new(4096);
        let decoded = decode_ok(&mut dec, &out.freeze());
        prop_assert_eq!(&decoded, &fields);
        for (got, sent) in decoded.iter().zip(&fields) {
            if let (Field::Header(_, got), Field::Header(_, sent)) = (got, sent) {
                prop_assert_eq!(got.is_sensitive(), sent.is_sensitive());
            }
        }
        // The encoder never touches the peer's table.
        prop_assert_eq!(dec.table.len(), 0);
    }

    #[test]
    fn model_encoder_blocks_decode_with_the_same_table(
        max_table in prop_oneof![Just(0usize), 0..300usize, Just(4096usize)],
        pool in proptest::collection::vec(raw_strategy(), 8),
        plans in proptest::collection::vec(plan_strategy(300), 1..6),
    ) {
        let mut model = Model { table: VecDeque::new(), size: 0, capacity: max_table };
        let mut dec = Decoder::new(max_table);
        for plan in &plans {
            let mut out = BytesMut::new();
            for &update in &plan.updates {
                model.set_capacity(update.min(max_table), &mut out);
            }
            let mut expected = Vec::new();
            let mut malformed = false;
            for &(i, rep) in &plan.fields {
                let raw = &pool[i];
                // A reference to a table entry carries the entry's validity: the same field.
                model.field(raw, rep, &mut out);
                if raw.valid {
                    expected.push((raw.name.clone(), raw.value.clone()));
                } else {
                    malformed = true;
                }
            }
            let (fields, decoded) = decode(&mut dec, &out.freeze()).expect("decodes");
            let got: Vec<_> = fields.iter().map(parts).collect();
            prop_assert_eq!(got, expected);
            prop_assert_eq!(decoded.malformed, malformed);
            prop_assert!(!decoded.too_large);
            // The tables agree, entry by entry.
            prop_assert_eq!(dec.table.size(), model.size);
            prop_assert_eq!(dec.table.capacity(), model.capacity);
            let ours: Vec<_> = dec.table.entries().map(|e| e.size).collect();
            let theirs: Vec<_> =
                model.table.iter().map(|(n, v, _)| Model::entry_size(n, v)).collect();
            prop_assert_eq!(ours, theirs);
            for (entry, (name, value, valid)) in dec.table.entries().zip(&model.table) {
                match &entry.slot {
                    Slot::Valid(field) => {
                        prop_assert!(*valid);
                        prop_assert_eq!(parts(field), (name.clone(), value.clone()));
                    }
                    _ => prop_assert!(!*valid),
                }
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        max_table in prop_oneof![Just(0usize), 0..512usize, Just(4096usize)],
        separator in any::<u8>(),
        input in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut dec = Decoder::new(max_table);
        for piece in input.split(|&b| b == separator) {
            let mut count = 0usize;
            let result = dec.decode(&Bytes::copy_from_slice(piece), 1024, |_| count += 1);
            prop_assert!(dec.table.size() <= dec.table.capacity());
            prop_assert!(dec.table.capacity() <= max_table);
            match result {
                Ok(_) => prop_assert!(count <= 1024 / 32),
                Err(_) => break,
            }
        }
    }

    #[test]
    fn huffman_round_trips(input in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut coded = Vec::new();
        huffman::encode(&input, &mut coded);
        prop_assert_eq!(coded.len(), huffman::encoded_len(&input));
        let mut out = Vec::new();
        huffman::decode(&coded, &mut out).unwrap();
        prop_assert_eq!(out, input);
    }

    #[test]
    fn huffman_decoding_is_the_inverse_of_encoding(
        input in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        // Whatever decodes is exactly the encoding of what it decodes to (valid padding is
        // unique), and never longer than the bound.
        let mut out = Vec::new();
        if huffman::decode(&input, &mut out).is_ok() {
            prop_assert!(out.len() <= huffman::max_decoded_len(input.len()));
            let mut again = Vec::new();
            huffman::encode(&out, &mut again);
            prop_assert_eq!(again, input);
        }
    }
}
