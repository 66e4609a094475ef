//! The flow header: the first bytes of every tunnel stream, saying what the flow is.
//!
//! This module owns the header's wire format, as a view ([`FlowHeaderPacket`]) and a repr
//! ([`FlowHeader`]) in the smoltcp `wire` style. It does not read streams (the endpoint does: it
//! reads [`PREFIX_LEN`] bytes, asks [`header_len`] how long the header is, reads the rest, then
//! calls [`FlowHeaderPacket::new_checked`] and [`FlowHeader::parse`]).
//!
//! ## Wire format, version 1 (all integers big-endian)
//! ```text
//!  0       1       2       3
//! +-------+-------+-------+-------+
//! |version| class |  header_len   |   header_len: bytes of the whole header, this row included
//! +-------+-------+-------+-------+
//! |          service id           |   u32, the configured service the flow belongs to
//! +-------+-------+-------+-------+
//! | family|reservd|   dst port    |   family: 0 none, 4 IPv4, 6 IPv6; reserved: sent as 0
//! +-------+-------+-------+-------+
//! | dst address (0, 4 or 16 bytes)|   the original destination (transparent interception)
//! +-------------------------------+
//! | extensions (ignored by v1)    |   up to header_len; lets v1 readers skip newer fields
//! +-------------------------------+
//! ```
//! class: 0 pass through, 1 compress, 2 dedup in memory, 3 dedup on disk.
//!
//! ## Invariants
//! Once `new_checked` succeeded, no accessor panics, whatever the bytes. `header_len` is at most
//! [`MAX_HEADER_LEN`], so a hostile peer cannot make the reader buffer more than that.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The version this module writes and reads.
pub const VERSION: u8 = 1;
/// Bytes a reader needs to learn the header's length.
pub const PREFIX_LEN: usize = 4;
/// Length of the fixed part (without address and extensions).
pub const FIXED_LEN: usize = 12;
/// The largest header accepted.
pub const MAX_HEADER_LEN: usize = 1024;

mod field {
    use std::ops::Range;
    pub const VERSION: usize = 0;
    pub const CLASS: usize = 1;
    pub const LEN: Range<usize> = 2..4;
    pub const SERVICE: Range<usize> = 4..8;
    pub const FAMILY: usize = 8;
    pub const PORT: Range<usize> = 10..12;
    pub const ADDR: usize = 12;
}

const FAMILY_NONE: u8 = 0;
const FAMILY_V4: u8 = 4;
const FAMILY_V6: u8 = 6;

/// Why a flow header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Fewer bytes than the header needs.
    #[error("flow header truncated")]
    Truncated,
    /// A version this build does not speak.
    #[error("unsupported flow header version {0}")]
    Version(u8),
    /// `header_len` is below the minimum for its address family or above [`MAX_HEADER_LEN`].
    #[error("flow header length {0} is invalid")]
    Length(usize),
    /// An address family other than 0, 4 or 6.
    #[error("unknown address family {0}")]
    Family(u8),
    /// A service class this build does not know.
    #[error("unknown service class {0}")]
    Class(u8),
}

/// Length of the whole header, from its first [`PREFIX_LEN`] bytes; checks the version and the
/// length bounds (not the family, which needs the whole header).
pub fn header_len(prefix: &[u8]) -> Result<usize, HeaderError> {
    if prefix.len() < PREFIX_LEN {
        return Err(HeaderError::Truncated);
    }
    if prefix[field::VERSION] != VERSION {
        return Err(HeaderError::Version(prefix[field::VERSION]));
    }
    let len = usize::from(u16::from_be_bytes([prefix[2], prefix[3]]));
    if !(FIXED_LEN..=MAX_HEADER_LEN).contains(&len) {
        return Err(HeaderError::Length(len));
    }
    Ok(len)
}

fn addr_len(family: u8) -> Result<usize, HeaderError> {
    match family {
        FAMILY_NONE => Ok(0),
        FAMILY_V4 => Ok(4),
        FAMILY_V6 => Ok(16),
        other => Err(HeaderError::Family(other)),
    }
}

/// A read-only view of a flow header in a buffer.
#[derive(Debug, Clone)]
pub struct FlowHeaderPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FlowHeaderPacket<T> {
    /// Wraps `buffer` after checking version, lengths and address family, so that no accessor
    /// can panic. Bytes beyond `header_len` are not part of the header and are ignored.
    pub fn new_checked(buffer: T) -> Result<Self, HeaderError> {
        let b = buffer.as_ref();
        let len = header_len(b)?;
        if b.len() < len || b.len() < FIXED_LEN {
            return Err(HeaderError::Truncated);
        }
        let needed = FIXED_LEN + addr_len(b[field::FAMILY])?;
        if len < needed {
            return Err(HeaderError::Length(len));
        }
        Ok(Self { buffer })
    }

    /// The header version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The raw service class byte.
    pub fn class(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS]
    }

    /// Length of the whole header.
    pub fn header_len(&self) -> usize {
        let b = &self.buffer.as_ref()[field::LEN];
        usize::from(u16::from_be_bytes([b[0], b[1]]))
    }

    /// The service id.
    pub fn service(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::SERVICE];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The original destination, if the flow carries one.
    pub fn destination(&self) -> Option<SocketAddr> {
        let b = self.buffer.as_ref();
        let port = u16::from_be_bytes([b[field::PORT][0], b[field::PORT][1]]);
        let a = &b[field::ADDR..];
        let ip = match b[field::FAMILY] {
            FAMILY_V4 => IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
            FAMILY_V6 => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&a[..16]);
                IpAddr::V6(Ipv6Addr::from(octets))
            }
            _ => return None,
        };
        Some(SocketAddr::new(ip, port))
    }
}

/// What a service class asks the optimizer to do with a flow (WANScaler's service classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServiceClass {
    /// Carried through the tunnel untouched.
    PassThrough,
    /// Compressed only.
    Compress,
    /// Deduplicated against the memory store, then compressed.
    DedupMemory,
    /// Deduplicated against the disk store, then compressed.
    DedupDisk,
}

impl ServiceClass {
    fn to_wire(self) -> u8 {
        match self {
            ServiceClass::PassThrough => 0,
            ServiceClass::Compress => 1,
            ServiceClass::DedupMemory => 2,
            ServiceClass::DedupDisk => 3,
        }
    }

    fn from_wire(b: u8) -> Result<Self, HeaderError> {
        Ok(match b {
            0 => ServiceClass::PassThrough,
            1 => ServiceClass::Compress,
            2 => ServiceClass::DedupMemory,
            3 => ServiceClass::DedupDisk,
            other => return Err(HeaderError::Class(other)),
        })
    }
}

/// A configured service's id, as carried in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceId(pub u32);

/// The parsed flow header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowHeader {
    /// The service the flow was intercepted for.
    pub service: ServiceId,
    /// What to do with the flow's bytes.
    pub class: ServiceClass,
    /// The original destination, for transparently intercepted flows (an IPv6 scope id and
    /// flow label are not carried: they mean nothing on the other appliance).
    pub destination: Option<SocketAddr>,
}

impl FlowHeader {
    /// Reads the repr out of a checked view.
    pub fn parse<T: AsRef<[u8]>>(packet: &FlowHeaderPacket<T>) -> Result<Self, HeaderError> {
        Ok(Self {
            service: ServiceId(packet.service()),
            class: ServiceClass::from_wire(packet.class())?,
            destination: packet.destination(),
        })
    }

    /// Checks and parses `bytes` in one go (the header must be at their start).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, HeaderError> {
        Self::parse(&FlowHeaderPacket::new_checked(bytes)?)
    }

    /// Bytes [`FlowHeader::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN
            + match self.destination {
                None => 0,
                Some(SocketAddr::V4(_)) => 4,
                Some(SocketAddr::V6(_)) => 16,
            }
    }

    /// Writes the header into the start of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`FlowHeader::buffer_len`] (a caller bug, not an input error).
    pub fn emit(&self, buf: &mut [u8]) {
        let len = self.buffer_len();
        let buf = &mut buf[..len];
        buf[field::VERSION] = VERSION;
        buf[field::CLASS] = self.class.to_wire();
        // len ≤ FIXED_LEN + 16, far below u16::MAX.
        buf[field::LEN].copy_from_slice(&(len as u16).to_be_bytes());
        buf[field::SERVICE].copy_from_slice(&self.service.0.to_be_bytes());
        buf[field::FAMILY + 1] = 0;
        match self.destination {
            None => {
                buf[field::FAMILY] = FAMILY_NONE;
                buf[field::PORT].copy_from_slice(&[0, 0]);
            }
            Some(SocketAddr::V4(a)) => {
                buf[field::FAMILY] = FAMILY_V4;
                buf[field::PORT].copy_from_slice(&a.port().to_be_bytes());
                buf[field::ADDR..].copy_from_slice(&a.ip().octets());
            }
            Some(SocketAddr::V6(a)) => {
                buf[field::FAMILY] = FAMILY_V6;
                buf[field::PORT].copy_from_slice(&a.port().to_be_bytes());
                buf[field::ADDR..].copy_from_slice(&a.ip().octets());
            }
        }
    }

    /// The header as a new byte vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0; self.buffer_len()];
        self.emit(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn class() -> impl Strategy<Value = ServiceClass> {
        prop_oneof![
            Just(ServiceClass::PassThrough),
            Just(ServiceClass::Compress),
            Just(ServiceClass::DedupMemory),
            Just(ServiceClass::DedupDisk),
        ]
    }

    fn header() -> impl Strategy<Value = FlowHeader> {
        (
            any::<u32>(),
            class(),
            proptest::option::of((any::<IpAddr>(), any::<u16>())),
        )
            .prop_map(|(s, class, destination)| FlowHeader {
                service: ServiceId(s),
                class,
                destination: destination.map(|(ip, port)| SocketAddr::new(ip, port)),
            })
    }

    proptest! {
        #[test]
        fn round_trip(h in header(), trailing in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut bytes = h.to_bytes();
            prop_assert_eq!(bytes.len(), h.buffer_len());
            prop_assert_eq!(header_len(&bytes), Ok(bytes.len()));
            bytes.extend_from_slice(&trailing);
            prop_assert_eq!(FlowHeader::from_bytes(&bytes), Ok(h));
        }

        #[test]
        fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(p) = FlowHeaderPacket::new_checked(&bytes[..]) {
                let _ = (p.version(), p.class(), p.header_len(), p.service(), p.destination());
                let _ = FlowHeader::parse(&p);
            }
        }

        #[test]
        fn every_truncation_is_refused(h in header()) {
            let bytes = h.to_bytes();
            for cut in 0..bytes.len() {
                prop_assert!(FlowHeader::from_bytes(&bytes[..cut]).is_err());
            }
        }

        #[test]
        fn extensions_are_skipped(h in header(), ext in proptest::collection::vec(any::<u8>(), 0..32)) {
            let mut bytes = h.to_bytes();
            let len = bytes.len() + ext.len();
            bytes[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            bytes.extend_from_slice(&ext);
            prop_assert_eq!(FlowHeader::from_bytes(&bytes), Ok(h));
        }
    }

    #[test]
    fn known_bytes() {
        let h = FlowHeader {
            service: ServiceId(0x0102_0304),
            class: ServiceClass::DedupDisk,
            destination: Some("10.0.0.1:445".parse().unwrap()),
        };
        assert_eq!(
            h.to_bytes(),
            [1, 3, 0, 16, 1, 2, 3, 4, 4, 0, 0x01, 0xbd, 10, 0, 0, 1]
        );
    }

    #[test]
    fn bad_fields_are_refused_with_their_reason() {
        let good = FlowHeader {
            service: ServiceId(7),
            class: ServiceClass::Compress,
            destination: None,
        }
        .to_bytes();
        let mut b = good.clone();
        b[0] = 2;
        assert_eq!(FlowHeader::from_bytes(&b), Err(HeaderError::Version(2)));
        let mut b = good.clone();
        b[1] = 9;
        assert_eq!(FlowHeader::from_bytes(&b), Err(HeaderError::Class(9)));
        let mut b = good.clone();
        b[8] = 5;
        assert_eq!(FlowHeader::from_bytes(&b), Err(HeaderError::Family(5)));
        let mut b = good.clone();
        b[8] = 6; // IPv6 needs 16 more bytes than header_len (12) allows
        assert_eq!(FlowHeader::from_bytes(&b), Err(HeaderError::Length(12)));
        let mut b = good;
        b[2..4].copy_from_slice(&2000u16.to_be_bytes());
        assert_eq!(header_len(&b), Err(HeaderError::Length(2000)));
    }
}
