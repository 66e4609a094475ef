//! The PROXY protocol (HAProxy's, versions 1 and 2): the header a load balancer in front of
//! Headway puts at the start of each connection to say whom it carries (`accept_proxy_protocol`
//! on a virtual server), and the header Headway puts at the start of its connections to servers
//! for the same reason (`send_proxy_protocol` on a server group).
//!
//! [`parse`] and [`encode`] are pure (the `ppp` crate reads and writes the two formats;
//! property-tested and fuzzed here); [`read_header`] is the thin shell that takes a header off a
//! client socket: it peeks, and consumes exactly the header's bytes, so whatever the client
//! sent behind it (a TLS ClientHello, an HTTP request, a tcp protocol's first bytes) stays in
//! the kernel for the virtual server's own code to read, as if the header had not been there.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ppp::{v1, v2, HeaderResult, PartialResult as _};
use tokio::io::AsyncReadExt as _;

use crate::client_socket::ClientSocket;

/// The longest header taken: a version 1 header is at most 107 bytes; version 2 may carry
/// TLVs (cloud load balancers send an endpoint id, TLS details) after its addresses. Longer
/// headers are refused.
pub const MAX_HEADER: usize = 16 + 4096;

/// The longest version 1 header, its line end included.
const V1_MAX: usize = 107;

/// What the front of a connection holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// The beginning of a header: more bytes are needed.
    Incomplete,
    /// A whole header of `len` bytes, with the connection it describes: `Some((source,
    /// destination))` for a proxied TCP connection, `None` for a header that names none
    /// (version 1 `UNKNOWN`, version 2 `LOCAL` or an address family other than IPv4/IPv6),
    /// after which the connection's own addresses stand.
    Header {
        /// The header's length in bytes.
        len: usize,
        /// The client and the address it connected to.
        addresses: Option<(SocketAddr, SocketAddr)>,
    },
    /// Not a PROXY header, or a broken one; the text says what is wrong.
    Invalid(String),
}

/// Reads a PROXY header (either version) off the front of `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    // A version 2 header says its length in its first 16 bytes: refuse a long one at once
    // rather than after reading it.
    if buf.len() >= 16 && buf.starts_with(v2::PROTOCOL_PREFIX) {
        let len = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
        if len > MAX_HEADER {
            return Parsed::Invalid(format!(
                "a PROXY v2 header of {len} bytes; at most {MAX_HEADER} are taken"
            ));
        }
    }
    // A version 1 header is a line: it is judged once its CRLF is in, and only up to it
    // (`ppp` refuses some fronts of valid lines, such as one ending in the space before the last
    // port, and takes some lines that end in a bare LF).
    if b"PROXY ".starts_with(&buf[..buf.len().min(6)]) {
        let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
            return if buf.len() < V1_MAX {
                Parsed::Incomplete
            } else {
                Parsed::Invalid(format!("no PROXY line end in {V1_MAX} bytes"))
            };
        };
        let line = &buf[..end + 2];
        return match v1::Header::try_from(line) {
            Ok(h) if h.header.len() == line.len() && line.len() <= V1_MAX => Parsed::Header {
                len: line.len(),
                addresses: v1_addresses(h.addresses),
            },
            Ok(_) => Parsed::Invalid("a broken PROXY line".into()),
            Err(e) => Parsed::Invalid(format!("not a PROXY header: {e}")),
        };
    }
    let result = HeaderResult::parse(buf);
    if result.is_incomplete() {
        return if buf.len() >= MAX_HEADER {
            Parsed::Invalid(format!("no whole PROXY header in {MAX_HEADER} bytes"))
        } else {
            Parsed::Incomplete
        };
    }
    match result {
        // Only lines starting with "PROXY " are version 1 headers, taken above.
        HeaderResult::V1(Ok(_)) => Parsed::Invalid("not a PROXY header".into()),
        HeaderResult::V2(Ok(h)) => Parsed::Header {
            len: h.len(),
            addresses: match (h.command, h.addresses) {
                (v2::Command::Local, _) => None,
                (_, v2::Addresses::IPv4(a)) => Some((
                    SocketAddr::new(IpAddr::V4(a.source_address), a.source_port),
                    SocketAddr::new(IpAddr::V4(a.destination_address), a.destination_port),
                )),
                (_, v2::Addresses::IPv6(a)) => Some((
                    SocketAddr::new(IpAddr::V6(a.source_address), a.source_port),
                    SocketAddr::new(IpAddr::V6(a.destination_address), a.destination_port),
                )),
                _ => None,
            },
        },
        HeaderResult::V1(Err(e)) => Parsed::Invalid(format!("not a PROXY header: {e}")),
        HeaderResult::V2(Err(e)) => Parsed::Invalid(format!("a broken PROXY v2 header: {e}")),
    }
}

/// The client and destination a version 1 header names.
fn v1_addresses(a: v1::Addresses) -> Option<(SocketAddr, SocketAddr)> {
    match a {
        v1::Addresses::Tcp4(a) => Some((
            SocketAddr::new(IpAddr::V4(a.source_address), a.source_port),
            SocketAddr::new(IpAddr::V4(a.destination_address), a.destination_port),
        )),
        v1::Addresses::Tcp6(a) => Some((
            SocketAddr::new(IpAddr::V6(a.source_address), a.source_port),
            SocketAddr::new(IpAddr::V6(a.destination_address), a.destination_port),
        )),
        v1::Addresses::Unknown => None,
    }
}

/// The version of the header written to servers (the config's).
pub use headway_config::adc::ProxyProtocol as Version;

/// The header saying that `source` connected to `destination`. Addresses of two families are
/// both written as IPv6 (an IPv4 one as `::ffff:a.b.c.d`), so the header always names the
/// client.
pub fn encode(version: Version, source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let (source, destination) = same_family(source, destination);
    match version {
        Version::V1 => v1::Addresses::from((source, destination))
            .to_string()
            .into_bytes(),
        Version::V2 => v2::Builder::with_addresses(
            v2::Version::Two | v2::Command::Proxy,
            v2::Protocol::Stream,
            (source, destination),
        )
        .build()
        // Writing into a vector with addresses (no TLVs) cannot fail.
        .unwrap_or_default(),
    }
}

/// The header of a connection that carries no client (a health check of the server itself):
/// v1 `PROXY UNKNOWN`, v2 `LOCAL`. The server then uses the connection's own addresses.
pub fn encode_local(version: Version) -> Vec<u8> {
    match version {
        Version::V1 => v1::Addresses::Unknown.to_string().into_bytes(),
        Version::V2 => v2::Builder::new(
            v2::Version::Two | v2::Command::Local,
            v2::AddressFamily::Unspecified | v2::Protocol::Unspecified,
        )
        .build()
        .unwrap_or_default(),
    }
}

/// `a` and `b` in one family: as they are if they share one, else both as IPv6.
fn same_family(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    let v6 = |s: SocketAddr| match s.ip() {
        IpAddr::V4(ip) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), s.port()),
        IpAddr::V6(_) => s,
    };
    if a.is_ipv4() == b.is_ipv4() {
        (a, b)
    } else {
        (v6(a), v6(b))
    }
}

/// Why a connection's PROXY header was not taken.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// The client sent something else, or a broken header.
    #[error("{0}")]
    Invalid(String),
    /// No whole header within the time allowed.
    #[error("no whole PROXY header within {0:?}")]
    Timeout(Duration),
    /// The connection closed or failed first.
    #[error("the connection ended before its PROXY header did: {0}")]
    Io(#[from] io::Error),
}

/// Takes the PROXY header off the front of `socket` within `limit`, leaving every byte after it
/// unread: the addresses it names (`None`: the connection's own stand, see [`Parsed`]).
pub async fn read_header(
    socket: &mut ClientSocket,
    limit: Duration,
) -> Result<Option<(SocketAddr, SocketAddr)>, HeaderError> {
    match tokio::time::timeout(limit, take_header(socket)).await {
        Ok(r) => r,
        Err(_) => Err(HeaderError::Timeout(limit)),
    }
}

async fn take_header(
    socket: &mut ClientSocket,
) -> Result<Option<(SocketAddr, SocketAddr)>, HeaderError> {
    // Bytes of the header already taken off the socket (only ever header bytes: taken when
    // what was peeked held no whole header, so all of it belongs to the header).
    let mut taken: Vec<u8> = Vec::new();
    loop {
        // `parse` refuses a front of MAX_HEADER bytes, so there is room.
        let mut peeked = vec![0u8; (MAX_HEADER - taken.len()).min(4096)];
        let n = socket.peek(&mut peeked).await?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        let mut front = taken.clone();
        front.extend_from_slice(&peeked[..n]);
        match parse(&front) {
            Parsed::Header { len, addresses } => {
                socket.read_exact(&mut peeked[..len - taken.len()]).await?;
                return Ok(addresses);
            }
            Parsed::Invalid(why) => return Err(HeaderError::Invalid(why)),
            Parsed::Incomplete => {
                // Everything peeked is header: take it, so the next peek waits for more.
                socket.read_exact(&mut peeked[..n]).await?;
                taken.extend_from_slice(&peeked[..n]);
            }
        }
    }
}

#[cfg(test)]
mod tests;
