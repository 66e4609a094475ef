//! The FEC layer's datagram headers.
//!
//! Every datagram an FEC socket sends starts with a [`Header`] of [`Header::LEN`] bytes:
//!
//! ```text
//!  0        1                  5            7
//! +--------+------------------+------------+-------------------------------
//! |  kind  |   seq (u32, BE)  | loss (u16) |  payload (a QUIC datagram) …
//! +--------+------------------+------------+-------------------------------
//! ```
//!
//! - `kind` is `0xA0` (data the sender does not keep), `0xA1` (data the sender keeps for
//!   repair), `0xA2` (repair), `0xA3` (a probe: the header alone, sent so that the receiver
//!   can measure the path before data flows) or `0xA4` (data the sender keeps for a *long*
//!   block, longer than QUIC's duplicate window: the receiver holds later datagrams back
//!   while one of the block's is missing, see the crate doc). The values have QUIC's "fixed bit" (0x40) clear, so no QUIC
//!   packet (RFC 9000 §17) starts with one: a receiver tells an FEC datagram from a plain one by
//!   its first byte.
//! - `seq` numbers the datagrams the sender keeps for this receiver and its probes, one by one
//!   (wrapping, from a random start); the receiver measures the path's loss from its gaps. A
//!   datagram of another kind carries the next number without consuming it.
//! - `loss` is the sender's own measurement of the loss on the reverse path (the datagrams it
//!   receives from this receiver): `0..=65534` is the fraction × 65534, `0xFFFF` "not measured
//!   yet". It is how each side learns how much repair the other needs.
//!
//! A probe may carry one byte after its header: flags, of which bit 0 says that its sender
//! holds back for long blocks (see the crate doc). Receivers ignore anything else after a
//! probe's header.
//!
//! A repair datagram continues with a [`RepairHeader`] of [`RepairHeader::LEN`] bytes and one
//! Reed-Solomon recovery shard:
//!
//! ```text
//! +-------------------+--------------+-----------------+--------------+-------------------
//! | first (u32, BE)   | count (u16)  | recovery (u16)  | index (u16)  | shard …
//! +-------------------+--------------+-----------------+--------------+-------------------
//! ```
//!
//! It protects the kept data datagrams `first .. first + count` with `recovery` recovery shards
//! (of which this is number `index`). Each original shard is the datagram's length (u16, BE),
//! its bytes and zero padding up to the shard size, which is the length of the recovery shard.

/// What a datagram carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Data the sender did not keep: no repair will cover it.
    Data,
    /// Data the sender keeps: a later repair window may cover it.
    Kept,
    /// A recovery shard.
    Repair,
    /// A probe: no payload, counted by the receiver's loss measurement.
    Probe,
    /// Data the sender keeps for a long block: while one of its datagrams is missing, the
    /// receiver holds back those too far ahead of it for QUIC to still accept it.
    Held,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Data => 0xA0,
            Kind::Kept => 0xA1,
            Kind::Repair => 0xA2,
            Kind::Probe => 0xA3,
            Kind::Held => 0xA4,
        }
    }

    /// The kind a first byte announces, or `None` when the datagram is not an FEC datagram.
    pub fn of(first: u8) -> Option<Kind> {
        match first {
            0xA0 => Some(Kind::Data),
            0xA1 => Some(Kind::Kept),
            0xA2 => Some(Kind::Repair),
            0xA3 => Some(Kind::Probe),
            0xA4 => Some(Kind::Held),
            _ => None,
        }
    }
}

/// A loss fraction as carried in a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LossReport(pub u16);

impl LossReport {
    /// Nothing measured yet.
    pub const UNKNOWN: LossReport = LossReport(0xFFFF);

    /// The report of a fraction (clamped to 0..=1).
    pub fn from_fraction(f: f64) -> Self {
        LossReport((f.clamp(0.0, 1.0) * 65534.0).round() as u16)
    }

    /// The fraction, or `None` when nothing was measured.
    pub fn fraction(self) -> Option<f64> {
        (self != Self::UNKNOWN).then(|| f64::from(self.0) / 65534.0)
    }
}

/// Why a datagram's FEC headers did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Shorter than its headers.
    #[error("datagram too short for its fec header")]
    Truncated,
    /// The first byte is not an FEC kind.
    #[error("not an fec datagram")]
    NotFec,
    /// A repair header that cannot describe a window (no originals, no recovery shards, an
    /// index past the count, or a shard of odd or zero length).
    #[error("bad repair header")]
    BadRepair,
}

/// The header of every FEC datagram (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What follows.
    pub kind: Kind,
    /// The sender's data sequence number.
    pub seq: u32,
    /// The sender's measurement of the reverse path's loss.
    pub loss: LossReport,
}

impl Header {
    /// Bytes on the wire.
    pub const LEN: usize = 7;

    /// Parses the header at the start of `datagram`.
    pub fn parse(datagram: &[u8]) -> Result<Header, WireError> {
        let first = *datagram.first().ok_or(WireError::Truncated)?;
        let kind = Kind::of(first).ok_or(WireError::NotFec)?;
        let b = datagram.get(..Self::LEN).ok_or(WireError::Truncated)?;
        Ok(Header {
            kind,
            seq: u32::from_be_bytes([b[1], b[2], b[3], b[4]]),
            loss: LossReport(u16::from_be_bytes([b[5], b[6]])),
        })
    }

    /// The header's bytes.
    pub fn emit(&self) -> [u8; Self::LEN] {
        let s = self.seq.to_be_bytes();
        let l = self.loss.0.to_be_bytes();
        [self.kind.byte(), s[0], s[1], s[2], s[3], l[0], l[1]]
    }
}

/// What a repair datagram says after its [`Header`] (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RepairHeader {
    /// Sequence number of the window's first kept datagram.
    pub first: u32,
    /// Kept datagrams in the window (original shards).
    pub count: u16,
    /// Recovery shards made for the window.
    pub recovery: u16,
    /// Which recovery shard this is (`< recovery`).
    pub index: u16,
}

impl RepairHeader {
    /// Bytes on the wire.
    pub const LEN: usize = 10;

    /// Parses the repair header and returns it with the shard that follows. `body` is the
    /// datagram after its [`Header`].
    pub fn parse(body: &[u8]) -> Result<(RepairHeader, &[u8]), WireError> {
        let b = body.get(..Self::LEN).ok_or(WireError::Truncated)?;
        let h = RepairHeader {
            first: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            count: u16::from_be_bytes([b[4], b[5]]),
            recovery: u16::from_be_bytes([b[6], b[7]]),
            index: u16::from_be_bytes([b[8], b[9]]),
        };
        let shard = &body[Self::LEN..];
        if h.count == 0
            || h.recovery == 0
            || h.index >= h.recovery
            || shard.is_empty()
            || shard.len() % 2 != 0
        {
            return Err(WireError::BadRepair);
        }
        Ok((h, shard))
    }

    /// The header's bytes.
    pub fn emit(&self) -> [u8; Self::LEN] {
        let f = self.first.to_be_bytes();
        let c = self.count.to_be_bytes();
        let r = self.recovery.to_be_bytes();
        let i = self.index.to_be_bytes();
        [f[0], f[1], f[2], f[3], c[0], c[1], r[0], r[1], i[0], i[1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quic_first_bytes_are_not_fec() {
        // Long headers 0b11xx_xxxx, short headers 0b01xx_xxxx (RFC 9000 §17.2, §17.3).
        for b in (0x40..=0x7F).chain(0xC0..=0xFF) {
            assert_eq!(Kind::of(b), None, "{b:#x}");
        }
        assert_eq!(
            Header::parse(&[0x41, 0, 0, 0, 0, 0, 0]),
            Err(WireError::NotFec)
        );
        assert_eq!(Header::parse(&[0xA1, 0, 0]), Err(WireError::Truncated));
        assert_eq!(Header::parse(&[]), Err(WireError::Truncated));
    }

    #[test]
    fn bad_repair_headers_are_refused() {
        let ok = RepairHeader {
            first: 7,
            count: 3,
            recovery: 2,
            index: 1,
        };
        let mut body = ok.emit().to_vec();
        body.extend_from_slice(&[0; 4]);
        assert_eq!(RepairHeader::parse(&body).unwrap().0, ok);
        for bad in [
            RepairHeader { count: 0, ..ok },
            RepairHeader { recovery: 0, ..ok },
            RepairHeader { index: 2, ..ok },
        ] {
            let mut b = bad.emit().to_vec();
            b.extend_from_slice(&[0; 4]);
            assert_eq!(RepairHeader::parse(&b), Err(WireError::BadRepair));
        }
        let mut odd = ok.emit().to_vec();
        odd.extend_from_slice(&[0; 3]);
        assert_eq!(RepairHeader::parse(&odd), Err(WireError::BadRepair));
        assert_eq!(RepairHeader::parse(&ok.emit()), Err(WireError::BadRepair));
    }

    #[test]
    fn loss_reports() {
        assert_eq!(LossReport::UNKNOWN.fraction(), None);
        assert_eq!(LossReport::from_fraction(0.0).fraction(), Some(0.0));
        assert_eq!(LossReport::from_fraction(2.0).fraction(), Some(1.0));
        let r = LossReport::from_fraction(0.01).fraction().unwrap();
        assert!((r - 0.01).abs() < 1e-4);
    }

    proptest! {
        #[test]
        fn headers_round_trip(kind in 0u8..5, seq: u32, loss: u16, first: u32, count: u16,
                              recovery in 1u16.., index: u16, half in 1usize..800) {
            let kind = [Kind::Data, Kind::Kept, Kind::Repair, Kind::Probe, Kind::Held][kind as usize];
            let h = Header { kind, seq, loss: LossReport(loss) };
            prop_assert_eq!(Header::parse(&h.emit()), Ok(h));
            let count = count.max(1);
            let r = RepairHeader { first, count, recovery, index: index % recovery };
            let mut body = r.emit().to_vec();
            body.extend(std::iter::repeat_n(9u8, half * 2));
            let (got, shard) = RepairHeader::parse(&body).unwrap();
            prop_assert_eq!(got, r);
            prop_assert_eq!(shard.len(), half * 2);
        }

        #[test]
        fn any_bytes_parse_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(h) = Header::parse(&bytes) {
                prop_assert_eq!(&h.emit()[..], &bytes[..Header::LEN]);
                let _ = RepairHeader::parse(&bytes[Header::LEN..]);
            }
        }
    }
}
