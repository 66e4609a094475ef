//! Headway's sans-IO dedup codec: the heart of the WAN optimizer.
//!
//! Two appliances, one at each end of a WAN, each keep a history of chunks. The [`Encoder`]
//! splits a flow's bytes into content-defined chunks ([`chunker`]), fingerprints them with a
//! keyed BLAKE3 hash ([`id`]), replaces chunks the peer already holds with references — one
//! `Run` token for a whole run of consecutive known chunks, so a repeated 17 MB file costs
//! about a hundred bytes, not one reference per chunk — and sends the rest as zstd-compressed
//! literal frames (compressed against the old version of the region when there is one, so a
//! small edit costs about its own size). The [`Decoder`] resolves references in its own [`ChunkStore`], verifies
//! every chunk before a byte reaches the client, and asks the encoder for the literal bytes of
//! any reference it cannot resolve ([`Need`]), never guessing.
//!
//! # What this crate owns and what it does not
//!
//! It owns the chunking, fingerprints, the wire format ([`wire`]), the encoder and decoder state
//! machines, the [`ChunkStore`] trait and an in-memory store ([`MemoryStore`]). It does no I/O:
//! no sockets, no tasks, no clock, no randomness. The persistent disk store, the QUIC tunnel
//! and the shell that connects a TCP flow to an encoder/decoder pair live in other crates.
//!
//! # Entry points and call order
//!
//! Per flow and direction, the sending appliance runs an [`Encoder`] and the receiving one a
//! [`Decoder`], both over the process-wide `Arc<dyn ChunkStore>`:
//!
//! ```text
//!  client bytes ─▶ Encoder::handle_data / flush / finish
//!                  Encoder::poll_transmit ─▶ tunnel stream ─▶ Decoder::handle_wire
//!                                                             Decoder::poll_output ─▶ server
//!                  Encoder::handle_need  ◀─ back channel ◀─── Decoder::poll_need
//!                  (replies go out through Encoder::poll_transmit on the same stream)
//! ```
//!
//! ```
//! use std::sync::Arc;
//! use headway_dedup::*;
//!
//! let key = DedupKey::new([7; 32]); // per deployment, from the config
//! let here: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new(64 << 20));
//! let there: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new(64 << 20));
//! let mut enc = Encoder::new(
//!     EncoderConfig { peer: PeerId(2), ..Default::default() },
//!     here,
//!     key.clone(),
//! );
//! let mut dec = Decoder::new(DecoderConfig { peer: PeerId(1), ..Default::default() }, there, key);
//! let mut got = Vec::new();
//! for _ in 0..2 {
//!     enc.handle_data(&[42u8; 100_000]).unwrap();
//! }
//! enc.finish();
//! while let Some(wire) = enc.poll_transmit() {
//!     dec.handle_wire(&wire).unwrap();
//!     while let Some(need) = dec.poll_need() {
//!         enc.handle_need(need).unwrap(); // the reply comes out of poll_transmit
//!     }
//!     while let Some(bytes) = dec.poll_output() {
//!         got.extend_from_slice(&bytes);
//!     }
//! }
//! assert!(dec.is_finished());
//! assert_eq!(got, vec![42u8; 200_000]);
//! assert!(enc.stats().wan_bytes < 1_000);
//! ```
//!
//! The back channel carries [`Need`] tokens (`Token::Need(..).emit`); how the shell transports
//! them (the reverse stream of the same flow, a control stream) is its choice.
//!
//! # Modes (service classes)
//!
//! [`Mode::Dedup`] does all of the above; [`Mode::Compress`] sends zstd frames without chunking;
//! [`Mode::Passthrough`] only frames the bytes. All three share the wire format and the
//! verification of every byte, so the shell treats every class alike.
//!
//! # Invariants
//!
//! - Both sides record every chunk that crosses the link, in flow order, with its predecessor,
//!   so the encoder's store mirrors the peer's (see [`store`] for the model and divergence).
//! - A decoder emits only verified bytes, in order; any input it cannot verify ends in a need
//!   (then a verified reply) or an error, never in wrong output.
//! - Every allocation driven by wire input is bounded by the limits in [`wire`].

#![forbid(unsafe_code)]

pub mod chunker;
mod compress;
pub mod decoder;
pub mod encoder;
pub mod id;
pub mod store;
pub mod wire;

pub use chunker::{ChunkParams, ChunkParamsError, Chunker};
pub use decoder::{DecodeError, Decoder, DecoderConfig, DecoderStats};
pub use encoder::{EncodeError, Encoder, EncoderConfig, EncoderStats};
pub use id::{BatchHasher, ChunkId, DedupKey, Digest};
pub use store::{ChunkStore, MemoryStore, MemoryStoreStats, PeerId, Probe};
pub use wire::{Mode, Need, Token, WireError};
