//! The dedup decoder reads whatever the peer appliance sends. Two properties:
//!
//! 1. Any bytes, in any slicing, never panic and never make it allocate without bound.
//! 2. A real encoder's stream with one byte corrupted never yields wrong output: what the decoder
//!    releases is always a prefix of the original data (it stops, or asks for the data again,
//!    but never guesses) — "the decoder verifies every chunk before a byte reaches the client".
#![no_main]

use std::sync::Arc;

use headway_dedup::{
    ChunkStore, Decoder, DecoderConfig, DedupKey, Encoder, EncoderConfig, MemoryStore, PeerId,
};
use libfuzzer_sys::fuzz_target;

fn decoder() -> Decoder {
    let store: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new(8 << 20));
    Decoder::new(
        DecoderConfig {
            peer: PeerId(1),
            ..Default::default()
        },
        store,
        DedupKey::new([7; 32]),
    )
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, rest)) = input.split_first() else {
        return;
    };
    let mut dec = decoder();
    let mut out = Vec::new();
    if selector & 1 == 0 {
        // 1. raw bytes, fed in slices whose lengths the selector picks
        let step = usize::from(selector >> 1).max(1);
        for piece in rest.chunks(step) {
            if dec.handle_wire(piece).is_err() {
                break;
            }
            while let Some(b) = dec.poll_output() {
                out.extend_from_slice(&b);
            }
            while dec.poll_need().is_some() {}
        }
        assert!(out.len() <= 64 * rest.len() + (16 << 20), "output out of proportion");
        return;
    }
    // 2. encode `rest` twice (the second pass is mostly references), corrupt one byte
    let enc_store: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new(8 << 20));
    let mut enc = Encoder::new(
        EncoderConfig {
            peer: PeerId(2),
            ..Default::default()
        },
        enc_store,
        DedupKey::new([7; 32]),
    );
    let mut wire = Vec::new();
    for _ in 0..2 {
        if enc.handle_data(rest).is_err() {
            return;
        }
    }
    enc.finish();
    while let Some(b) = enc.poll_transmit() {
        wire.extend_from_slice(&b);
    }
    if wire.is_empty() {
        return;
    }
    let at = (usize::from(selector) * 7919 + rest.len()) % wire.len();
    wire[at] ^= selector | 1;
    let _ = dec.handle_wire(&wire);
    while let Some(b) = dec.poll_output() {
        out.extend_from_slice(&b);
    }
    let expected: Vec<u8> = rest.iter().chain(rest.iter()).copied().collect();
    assert!(
        expected.starts_with(&out),
        "the decoder released bytes that are not the original data"
    );
});
