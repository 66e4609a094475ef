//! Headway's ADC: virtual servers that take client connections and spread them over the
//! healthy servers of server groups.
//!
//! # What it owns
//!
//! - [`Proxy`] ([`runtime`]): listeners, config generations, live reload that drops nothing,
//!   graceful shutdown, server state changes, the [`AdcSnapshot`] of counters and state;
//! - [`group`]: selection within limits, persistence (inserted cookie, source IP), backups, the
//!   surge queue;
//! - [`upstream`]: connections to servers and their reuse (idle keep-alive connections per
//!   server);
//! - [`health`]: TCP and HTTP monitors in the background;
//! - [`http`]: the L7 path (HTTP/1.1 with keep-alive and pipelining, HTTP/2 with prior
//!   knowledge; content switching, header rules, forwarding headers, retries, framing checks,
//!   access log) — its module doc draws the phases;
//! - [`client_socket`]: client connections, registered with the reactor only when they have
//!   to wait;
//! - [`l4`]: the `tcp` virtual servers (bytes both ways, half-close carried);
//! - [`limits`]: per-client connection and rate limits;
//! - [`tcp_profile`]: TCP profiles set on listeners, client and server connections, and the
//!   start-up check of what the host honours;
//! - [`resolve`]: servers given by DNS name, looked up when a config is applied and again in
//!   the background;
//! - [`listen`]: flood defense at the listener (SYN cookies and backlog checks; the first-byte
//!   deadline for clients that connect and say nothing is enforced by the HTTP and TLS paths);
//! - [`tls`]: TLS termination of `https` virtual servers (SNI, resumption, ALPN, client
//!   certificates) and TLS to servers;
//! - [`cache`]: the integrated HTTP cache (RFC 9111, content groups and policies, request
//!   coalescing, the flash cache, purges);
//! - [`stats`]: the counters and the snapshot types;
//! - [`gate`]: side futures of a connection's task (drain signal, watchdog timer) polled only
//!   when they were woken;
//! - [`workers`]: the data-plane threads, one single-threaded runtime each ("thread per
//!   core"), each with its own socket of every listening address.
//!
//! It does not parse or validate configuration (it takes [`headway_config::AdcConfig`] as
//! validated), decide selection itself (the pure algorithms are `headway-lb`'s), or serve the
//! admin API (the binary wires [`Proxy`] to `headway-admin`). Compression and caching come later
//! on the same L7 path.
//!
//! # Entry points and call order
//!
//! Inside a tokio runtime: [`Proxy::start`] with a validated config (binds every listener, or
//! fails with nothing running); then any number of [`Proxy::replace`],
//! [`Proxy::set_server_state`], [`Proxy::snapshot`]; finally [`Proxy::shutdown`].
#![forbid(unsafe_code)]

pub mod cache;
pub mod client_socket;
pub mod gate;
pub mod group;
pub mod health;
pub mod http;
pub mod l4;
pub mod limits;
pub mod listen;
pub mod proxy_protocol;
pub mod resolve;
pub mod runtime;
pub mod stats;
pub mod tcp_profile;
pub mod tls;
pub mod upstream;
pub mod workers;

pub use runtime::{ApplyError, Proxy, StateError};
pub use stats::{
    AccessLogSnapshot, AdcSnapshot, GroupSnapshot, ServerSnapshot, VirtualServerSnapshot,
};
