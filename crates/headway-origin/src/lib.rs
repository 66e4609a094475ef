//! `headway origin`: a small, fast HTTP/1.1 and HTTP/2 (cleartext, prior knowledge) origin server with a deterministic corpus, for
//! Headway's lab, tests and benchmarks, and the fetch client the lab measures downloads with.
//!
//! # What it owns
//!
//! - [`corpus`]: the pure, deterministic document generator (`(kind, size, seed)` → bytes) and
//!   the named seed documents of scenario 000;
//! - [`route`]: the URL scheme and `Range` parsing (pure);
//! - [`server`]: the hyper 1 HTTP/1.1 and h2c server (keep-alive, pipelining, streamed bodies with a
//!   `Content-Length` always set, graceful shutdown), and a WebSocket echo endpoint;
//! - [`client`]: [`fetch`], one GET with the body hashed as it streams;
//! - [`cli`]: [`OriginArgs`] and [`run`], the blocking entry point of `headway origin`.
//!
//! It does not do TLS or compression: Headway's ADC in front of it does the interesting parts.
//!
//! # URL scheme
//!
//! | request | response |
//! | --- | --- |
//! | `GET /` | an HTML index of this scheme and of the named files |
//! | `GET /corpus/{pdf\|doc\|random\|html}/{size}` | the document of that kind, `size` (`12MB`, `64KiB`, `128B`, `1500`; parsed as a [`headway_core::ByteSize`]) and seed |
//! | `GET /files/{name}` | a named seed document ([`corpus::FILES`]: `pdf_small` 1.24 MB … `doc_large` 12.14 MB) |
//! | `GET /healthz` | 200 `ok` |
//! | `/echo` (any method) | a JSON object with the request's HTTP version, method, target, headers and body length (after the server's latency) |
//! | `/trailers` (any method) | the request body back, then trailers (`grpc-status: 0`, `grpc-message`, `x-body-bytes`, the request's trailers as `x-echo-…`): a gRPC unary call's shape |
//! | `GET /dynamic` | a page made per request (its number and time in the body; `?latency=`, `?max_age=`, `?swr=`, `?sie=`, `?etag=`, `?set_cookie=1`, `?vary=`, `?size=`, `?status=`), within [`OriginConfig::dynamic_concurrency`] — see [`server`] |
//! | `GET /ws/echo` | a WebSocket that sends every message back (`Upgrade: websocket`; other requests get 426) |
//! | `GET /status/{code}` | that status (200–599) with a short body |
//! | anything else | 404 with a short body |
//!
//! With [`OriginConfig::name`] set, every response carries `X-Origin: <name>`.
//!
//! Document queries:
//!
//! | query | meaning |
//! | --- | --- |
//! | `?seed=N` | the stream's seed (default 1; for `/files` it replaces the file's own seed) |
//! | `?latency=50ms` | delay before the response headers, replacing the server-wide [`OriginConfig::latency`] |
//! | `?edit=1%` (`1%25`, `1`; 0–100, up to four decimals) and `&edit_seed=N` (default 1) | the document with that share of its bytes replaced by deterministic random 64-byte patches at deterministic random places ([`corpus::Edit`]); `edit=0` is no edit. Ranges, `ETag` (it differs from the unedited one) and SHA-256 ([`Document::sha256`] of `doc.with_edit(..)`) cover the edit |
//! | `?repeat=64KiB` (a size; 0 = none) | the stream's first that many bytes repeated up to the document's size, as the F5 report's 512 KB page was its 64 KB page repeated ([`Document::with_repeat`]); its own `ETag` |
//!
//! Other parameters are ignored. Bad parameters get 400 (`edit=200%`, `edit=abc`), other
//! methods than GET and HEAD 405, and requests hyper cannot parse 400 (the connection is then
//! closed; the server goes on).
//!
//! Documents carry `Content-Type` by kind (`application/pdf`, `application/msword`,
//! `application/octet-stream`, `text/html`), a strong `ETag` derived from generation, kind,
//! size and seed, a fixed `Last-Modified` ([`server::LAST_MODIFIED`]), `Accept-Ranges: bytes`
//! and the configured `Cache-Control`. They answer `If-None-Match` with 304, one
//! `Range: bytes=a-b` / `a-` / `-n` with 206 (or 416), and honour `If-Range`.
//!
//! # Entry points
//!
//! Library users bind with [`listen`] (or their own `TcpListener`) and call [`serve`] with a
//! shutdown future; the binary calls [`run`]. Verify a transfer by comparing [`Fetch::sha256`]
//! with [`corpus::sha256`].
#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod corpus;
pub mod route;
pub mod server;
mod websocket;

pub use cli::{run, OriginArgs};
pub use client::{fetch, fetch_blocking, Fetch, FetchError};
pub use corpus::{Document, Edit, Kind};
pub use server::{listen, serve, ListenError, OriginConfig};
