//! Sans-IO HTTP/2 (RFC 9113) for Headway's proxy.
//!
//! - [`frame`]: the frame layer — a view over the 9-byte header, typed payloads, and the
//!   writers of every frame the server sends.
//! - [`hpack`]: header compression (RFC 7541) — a decoder with the dynamic table and Huffman
//!   strings, and an encoder that writes static-table references and plain literals.
//! - [`server`]: the server side of one connection — bytes in, requests, their bodies and
//!   resets out; answers, data and window updates in, bytes to write out.
//!
//! No I/O, no clock and no tasks here: the proxy's shell reads the socket, hands the bytes to
//! [`server::Connection`], polls its events and writes what it queued.
#![forbid(unsafe_code)]

pub mod frame;
pub mod hpack;
pub mod server;
