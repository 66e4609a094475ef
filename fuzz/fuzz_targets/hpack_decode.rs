//! HPACK header blocks come from any HTTP/2 client. Three properties:
//!
//! 1. Any bytes, cut into several blocks for one decoder (so that the dynamic table carries
//!    over), never panic: each block decodes or fails with a `DecodeError`, after which the
//!    connection would be closed and the decoder is not used again.
//! 2. The decoder's list limit holds: no block emits more fields than its limit allows.
//! 3. Every field decoded, re-encoded by our `Encoder` and decoded by a fresh decoder, comes
//!    back the same (with the same sensitivity), and clean (not malformed, not too large).
#![no_main]

use bytes::{Bytes, BytesMut};
use headway_h2::hpack::{Decoded, Decoder, Encoder, Field};
use libfuzzer_sys::fuzz_target;

/// The list limit of the fuzzed decoder, small enough for the limit to be hit.
const MAX_LIST_SIZE: usize = 4096;

fuzz_target!(|input: &[u8]| {
    // The first byte picks the table size and the byte the rest is split on.
    let Some((&selector, rest)) = input.split_first() else {
        return;
    };
    let max_table_size = [0, 64, 256, 4096][usize::from(selector & 3)];
    let separator = selector >> 2;
    let mut decoder = Decoder::new(max_table_size);
    let mut encoder = Encoder::new();
    for piece in rest.split(|&b| b == separator) {
        let block = Bytes::copy_from_slice(piece);
        let mut fields = Vec::new();
        if decoder
            .decode(&block, MAX_LIST_SIZE, |f| fields.push(f))
            .is_err()
        {
            return;
        }
        let total: usize = fields.iter().map(Field::size).sum();
        assert!(total <= MAX_LIST_SIZE, "emitted past the list limit");
        // Every field takes at least one byte of the block.
        assert!(fields.len() <= piece.len(), "more fields than bytes");
        for field in fields {
            let mut out = BytesMut::new();
            match &field {
                Field::Pseudo(kind, value) => encoder.pseudo(*kind, value, &mut out),
                Field::Header(name, value) => encoder.header(name, value, &mut out),
            }
            let mut again = Vec::new();
            let clean = Decoder::new(4096)
                .decode(&out.freeze(), usize::MAX, |f| again.push(f))
                .expect("our own encoding decodes");
            assert_eq!(clean, Decoded::default(), "our own encoding is clean");
            assert_eq!(again.len(), 1, "one field in, one field out");
            if let (Field::Header(_, sent), Field::Header(_, got)) = (&field, &again[0]) {
                assert_eq!(sent.is_sensitive(), got.is_sensitive());
            }
            assert_eq!(again[0], field);
        }
    }
});
