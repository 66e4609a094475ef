//! The WAN optimizer's transport between appliance peers.
//!
//! One QUIC connection (quinn, RFC 9000) per peer, both sides authenticated by pinned SHA-256
//! certificate fingerprints; one bidirectional stream per TCP flow, opened with a small versioned
//! [`FlowHeader`], carrying half-close (FIN) and reset (RESET_STREAM / STOP_SENDING) through; flow
//! control windows sized to each peer link's bandwidth-delay product; and a congestion
//! controller that knows the configured link rate ([`cc`]).
//!
//! ## What this crate owns, and what it does not
//! It owns the tunnel: identities, authentication, connections, streams, the flow header's wire
//! format and the congestion controller. It does not intercept TCP, classify flows, compress or
//! deduplicate (that is `headway-wanopt` and `headway-dedup`), and does not fall back to direct
//! connections (the caller does that on a [`ConnectError`]).
//!
//! ## Entry points
//! - [`Identity::generate`] / [`Identity::load`], and [`Identity::fingerprint`] to print for the
//!   peer's config.
//! - [`Endpoint::bind`] with the identity and the [`PeerConfig`]s.
//! - [`Endpoint::connect`] → [`Connection::open_flow`]; [`Endpoint::accept_flow`].
//! - [`cc::Core`]: the sans-IO congestion-control decisions, usable without quinn.
//!
//! Modules: `identity` (certificates and fingerprints), `verify` (pinned-fingerprint TLS
//! verifiers), [`header`] (flow header wire format), [`cc`] (congestion controller), `endpoint`
//! (the async shell), `fec_socket` (the UDP socket with `headway-fec`'s forward error correction
//! between it and quinn), `runtime` (quinn's tokio runtime with timers that keep its pacer at
//! the link's rate).
#![forbid(unsafe_code)]

pub mod cc;
mod endpoint;
mod fec_socket;
pub mod header;
mod identity;
mod runtime;
mod verify;

pub use endpoint::{
    code, BindError, ConnectError, Connection, Endpoint, EndpointStats, FlowError, HandshakeError,
    InboundFlow, Options, PathLoss, PeerConfig, PeerId, Refusal, WriteMeter, ALPN, HELLO,
};
pub use header::{FlowHeader, HeaderError, ServiceClass, ServiceId};
pub use identity::{Fingerprint, FingerprintError, Identity, IdentityError, CERT_NAME};
pub use verify::NotPinned;

/// quinn's stream halves, as returned for each flow (they implement tokio's `AsyncRead` /
/// `AsyncWrite`).
pub use quinn::{ConnectionError, ReadError, RecvStream, SendStream, WriteError};
