//! A minimal HTTP/1.1 fetch client for the lab: one GET, body hashed as it streams.
//!
//! This module owns [`fetch`] and its blocking wrapper [`fetch_blocking`]. Each call opens one
//! TCP connection, sends one `GET` and reads the whole body into a SHA-256 hasher without
//! buffering it, timing the response headers and the last body byte from just before connecting.
//! It does not follow redirects, retry, reuse connections or decode content encodings.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use headway_core::SystemClock;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::header;
use hyper::Request;
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;

use crate::server::describe;

/// The outcome of one completed fetch (any status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    /// The response status code.
    pub status: u16,
    /// Bytes of body received.
    pub bytes: u64,
    /// SHA-256 of the body received.
    pub sha256: [u8; 32],
    /// From just before connecting to the complete response headers.
    pub header_time: Duration,
    /// From just before connecting to the end of the body.
    pub total_time: Duration,
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The path is not a valid request target.
    #[error("invalid request path `{0}`")]
    Path(String),
    /// The TCP connection could not be opened.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// The server address.
        addr: SocketAddr,
        /// A one-line description of the cause.
        reason: String,
        /// The underlying error (described by `reason`, so not chained as a source).
        error: io::Error,
    },
    /// The HTTP exchange failed before the response headers were complete.
    #[error("request to {addr} failed")]
    Request {
        /// The server address.
        addr: SocketAddr,
        /// The underlying error.
        #[source]
        source: hyper::Error,
    },
    /// The connection failed while the body was being received.
    #[error("response body from {addr} failed after {bytes} bytes")]
    Body {
        /// The server address.
        addr: SocketAddr,
        /// Body bytes received before the failure.
        bytes: u64,
        /// The underlying error.
        #[source]
        source: hyper::Error,
    },
    /// The blocking wrapper could not start its runtime.
    #[error("cannot start a runtime for a blocking fetch: {0}")]
    Runtime(#[source] io::Error),
}

/// Fetches `path` (e.g. `/corpus/pdf/1MB?seed=2`) from the server at `addr` with one GET on a
/// new connection, and hashes the body as it arrives.
///
/// Must run inside a tokio runtime (it spawns the connection task). Cancel safety: dropping the
/// future closes the connection; nothing else is left behind.
pub async fn fetch(addr: SocketAddr, path: &str) -> Result<Fetch, FetchError> {
    let req = Request::get(path)
        .header(header::HOST, addr.to_string())
        .header(header::USER_AGENT, "headway-fetch")
        .body(Empty::<Bytes>::new())
        .map_err(|_| FetchError::Path(path.to_owned()))?;
    if req.uri().scheme().is_some() || !path.starts_with('/') {
        return Err(FetchError::Path(path.to_owned()));
    }
    let start = SystemClock::now();
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|error| FetchError::Connect {
            addr,
            reason: describe(&error),
            error,
        })?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|source| FetchError::Request { addr, source })?;
    let driver = tokio::spawn(conn);
    let resp = sender
        .send_request(req)
        .await
        .map_err(|source| FetchError::Request { addr, source })?;
    let header_time = SystemClock::now() - start;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut hasher = Sha256::new();
    let mut bytes = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|source| FetchError::Body {
            addr,
            bytes,
            source,
        })?;
        if let Some(data) = frame.data_ref() {
            hasher.update(data);
            bytes += data.len() as u64;
        }
    }
    let total_time = SystemClock::now() - start;
    drop(sender);
    driver.abort();
    Ok(Fetch {
        status,
        bytes,
        sha256: hasher.finalize().into(),
        header_time,
        total_time,
    })
}

/// [`fetch`] on a fresh single-threaded runtime, for callers outside async code. Do not call it
/// from inside a runtime.
pub fn fetch_blocking(addr: SocketAddr, path: &str) -> Result<Fetch, FetchError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(FetchError::Runtime)?;
    rt.block_on(fetch(addr, path))
}
