//! Sans-IO HTTP/2 (RFC 9113) for Headway's proxy.
//!
//! - [`frame`]: the frame layer — a view over the 9-byte header, typed payloads, and the
//!   writers of every frame the server sends.
//! - [`hpack`]: header compression (RFC 7541) — a decoder with the dynamic table and Huffman
//!   strings, and an encoder that writes static-table references and plain literals.
//! - [`connection`]: one connection, the server's side (bytes in; requests, their bodies and
//!   resets out; answers, data and window updates in; bytes to write out) or the client's
//!   (requests and their bodies in; answers, their bodies and resets out).
//! - [`stream_map`]: maps keyed by stream identifier, with a hasher made for them.
//!
//! No I/O, no clock and no tasks here: the proxy's shells read the socket, hand the bytes to
//! [`connection::Connection`], poll its events and write what it queued.
#![forbid(unsafe_code)]

pub mod connection;
pub mod frame;
pub mod hpack;
pub mod stream_map;
