//! The frame layer (RFC 9113 §4, §6): the 9-byte header, the payloads the server reads, and
//! writers of every frame it sends.
//!
//! Reading: [`Head::parse`] on the first 9 bytes of a buffer gives the payload's length; once
//! the payload is there, the caller splits it off and reads it with the payload helpers
//! ([`strip_padding`], [`settings`], [`window_increment`], …), which validate lengths and
//! never panic. Writing: the `write_*` functions append whole frames to a `BytesMut`.
//!
//! Not here: what a frame means for a stream or the connection ([`crate::server`]), header
//! compression ([`crate::hpack`]).

use bytes::{BufMut, Bytes, BytesMut};

/// The length of a frame's header.
pub const HEADER_LEN: usize = 9;

/// The client connection preface (RFC 9113 §3.4), before its first SETTINGS frame.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The largest frame payload a peer may send before it learns otherwise (RFC 9113 §4.2), and
/// the one this side keeps announcing.
pub const DEFAULT_MAX_FRAME: usize = 16_384;

/// Frame types (RFC 9113 §6).
pub mod kind {
    /// DATA (§6.1).
    pub const DATA: u8 = 0;
    /// HEADERS (§6.2).
    pub const HEADERS: u8 = 1;
    /// PRIORITY (§6.3, deprecated: read and ignored).
    pub const PRIORITY: u8 = 2;
    /// RST_STREAM (§6.4).
    pub const RST_STREAM: u8 = 3;
    /// SETTINGS (§6.5).
    pub const SETTINGS: u8 = 4;
    /// PUSH_PROMISE (§6.6): never valid from a client.
    pub const PUSH_PROMISE: u8 = 5;
    /// PING (§6.7).
    pub const PING: u8 = 6;
    /// GOAWAY (§6.8).
    pub const GOAWAY: u8 = 7;
    /// WINDOW_UPDATE (§6.9).
    pub const WINDOW_UPDATE: u8 = 8;
    /// CONTINUATION (§6.10).
    pub const CONTINUATION: u8 = 9;
}

/// Frame flags (RFC 9113 §6).
pub mod flag {
    /// DATA, HEADERS: the sender's last frame on the stream.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement.
    pub const ACK: u8 = 0x1;
    /// HEADERS, CONTINUATION: the header block ends in this frame.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS: a pad length byte leads the payload.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: a stream dependency and weight lead the block.
    pub const PRIORITY: u8 = 0x20;
}

/// An error code (RFC 9113 §7) of RST_STREAM and GOAWAY frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reason(pub u32);

impl Reason {
    /// Graceful shutdown, or a stream no longer wanted.
    pub const NO_ERROR: Reason = Reason(0x0);
    /// A protocol violation.
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    /// An error of this side.
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    /// The peer broke flow control.
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    /// A frame arrived on a half-closed stream.
    pub const STREAM_CLOSED: Reason = Reason(0x5);
    /// A frame had the wrong size.
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    /// The stream was refused before any processing.
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    /// The stream is no longer needed.
    pub const CANCEL: Reason = Reason(0x8);
    /// The header compression context could not be kept.
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    /// The peer behaves in a way that might generate excessive load.
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.0 {
            0x0 => "NO_ERROR",
            0x1 => "PROTOCOL_ERROR",
            0x2 => "INTERNAL_ERROR",
            0x3 => "FLOW_CONTROL_ERROR",
            0x4 => "SETTINGS_TIMEOUT",
            0x5 => "STREAM_CLOSED",
            0x6 => "FRAME_SIZE_ERROR",
            0x7 => "REFUSED_STREAM",
            0x8 => "CANCEL",
            0x9 => "COMPRESSION_ERROR",
            0xa => "CONNECT_ERROR",
            0xb => "ENHANCE_YOUR_CALM",
            0xc => "INADEQUATE_SECURITY",
            0xd => "HTTP_1_1_REQUIRED",
            n => return write!(f, "error code {n:#x}"),
        };
        f.write_str(name)
    }
}

/// A frame's header (RFC 9113 §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The payload's length.
    pub len: usize,
    /// The frame type ([`kind`]).
    pub kind: u8,
    /// The flags ([`flag`]).
    pub flags: u8,
    /// The stream identifier (the reserved bit cleared).
    pub stream: u32,
}

impl Head {
    /// Reads the header at the start of `b`, if it holds [`HEADER_LEN`] bytes.
    pub fn parse(b: &[u8]) -> Option<Head> {
        let h: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Head {
            len: usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]),
            kind: h[3],
            flags: h[4],
            // RFC 9113 §4.1: the reserved bit is ignored on receipt.
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    /// Appends the header.
    pub fn emit(&self, dst: &mut BytesMut) {
        debug_assert!(self.len < 1 << 24);
        let len = self.len as u32;
        dst.put_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8]);
        dst.put_u8(self.kind);
        dst.put_u8(self.flags);
        dst.put_u32(self.stream & 0x7fff_ffff);
    }
}

/// A payload that does not fit its frame type (a connection error of the `Reason` given).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed frame payload ({0})")]
pub struct PayloadError(pub Reason);

/// The payload of a DATA or HEADERS frame without its padding (RFC 9113 §6.1, §6.2): padding
/// as long as the payload or longer is a PROTOCOL_ERROR.
pub fn strip_padding(flags: u8, mut payload: Bytes) -> Result<Bytes, PayloadError> {
    if flags & flag::PADDED == 0 {
        return Ok(payload);
    }
    let Some(&pad) = payload.first() else {
        return Err(PayloadError(Reason::FRAME_SIZE_ERROR));
    };
    let pad = usize::from(pad);
    if pad >= payload.len() {
        return Err(PayloadError(Reason::PROTOCOL_ERROR));
    }
    let end = payload.len() - pad;
    payload.truncate(end);
    Ok(payload.slice(1..))
}

/// A HEADERS frame's block fragment, past its padding and priority fields, and the stream it
/// depends on when it gave one (RFC 9113 §6.2).
pub fn headers_fragment(flags: u8, payload: Bytes) -> Result<(Bytes, Option<u32>), PayloadError> {
    let payload = strip_padding(flags, payload)?;
    if flags & flag::PRIORITY == 0 {
        return Ok((payload, None));
    }
    let Some(dep) = payload.get(..5) else {
        return Err(PayloadError(Reason::FRAME_SIZE_ERROR));
    };
    let dep = u32::from_be_bytes([dep[0], dep[1], dep[2], dep[3]]) & 0x7fff_ffff;
    Ok((payload.slice(5..), Some(dep)))
}

/// One SETTINGS parameter (RFC 9113 §6.5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    /// SETTINGS_HEADER_TABLE_SIZE (0x1).
    HeaderTableSize(u32),
    /// SETTINGS_ENABLE_PUSH (0x2).
    EnablePush(u32),
    /// SETTINGS_MAX_CONCURRENT_STREAMS (0x3).
    MaxConcurrentStreams(u32),
    /// SETTINGS_INITIAL_WINDOW_SIZE (0x4).
    InitialWindowSize(u32),
    /// SETTINGS_MAX_FRAME_SIZE (0x5).
    MaxFrameSize(u32),
    /// SETTINGS_MAX_HEADER_LIST_SIZE (0x6).
    MaxHeaderListSize(u32),
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (0x8, RFC 8441).
    EnableConnectProtocol(u32),
}

impl Setting {
    fn id_value(self) -> (u16, u32) {
        match self {
            Setting::HeaderTableSize(v) => (1, v),
            Setting::EnablePush(v) => (2, v),
            Setting::MaxConcurrentStreams(v) => (3, v),
            Setting::InitialWindowSize(v) => (4, v),
            Setting::MaxFrameSize(v) => (5, v),
            Setting::MaxHeaderListSize(v) => (6, v),
            Setting::EnableConnectProtocol(v) => (8, v),
        }
    }
}

/// The parameters of a SETTINGS payload in order, unknown ones skipped (RFC 9113 §6.5.2), or
/// the error its length or values make: not a multiple of 6 (FRAME_SIZE_ERROR), a window
/// above 2^31−1 (FLOW_CONTROL_ERROR), a frame size outside 2^14..2^24−1 or a boolean other
/// than 0 or 1 (PROTOCOL_ERROR).
pub fn settings(payload: &[u8]) -> Result<Vec<Setting>, PayloadError> {
    if payload.len() % 6 != 0 {
        return Err(PayloadError(Reason::FRAME_SIZE_ERROR));
    }
    let mut out = Vec::with_capacity(payload.len() / 6);
    for p in payload.chunks_exact(6) {
        let id = u16::from_be_bytes([p[0], p[1]]);
        let v = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
        let s = match id {
            1 => Setting::HeaderTableSize(v),
            2 if v > 1 => return Err(PayloadError(Reason::PROTOCOL_ERROR)),
            2 => Setting::EnablePush(v),
            3 => Setting::MaxConcurrentStreams(v),
            4 if v > 0x7fff_ffff => return Err(PayloadError(Reason::FLOW_CONTROL_ERROR)),
            4 => Setting::InitialWindowSize(v),
            5 if !(16_384..=16_777_215).contains(&v) => {
                return Err(PayloadError(Reason::PROTOCOL_ERROR))
            }
            5 => Setting::MaxFrameSize(v),
            6 => Setting::MaxHeaderListSize(v),
            8 if v > 1 => return Err(PayloadError(Reason::PROTOCOL_ERROR)),
            8 => Setting::EnableConnectProtocol(v),
            _ => continue,
        };
        out.push(s);
    }
    Ok(out)
}

/// A WINDOW_UPDATE payload's increment (RFC 9113 §6.9): 4 bytes (else FRAME_SIZE_ERROR); an
/// increment of 0 is returned as 0 for the caller to treat as the error of its scope.
pub fn window_increment(payload: &[u8]) -> Result<u32, PayloadError> {
    let b: [u8; 4] = payload
        .try_into()
        .map_err(|_| PayloadError(Reason::FRAME_SIZE_ERROR))?;
    Ok(u32::from_be_bytes(b) & 0x7fff_ffff)
}

/// A RST_STREAM payload's error code (RFC 9113 §6.4): 4 bytes, else FRAME_SIZE_ERROR.
pub fn rst_reason(payload: &[u8]) -> Result<Reason, PayloadError> {
    let b: [u8; 4] = payload
        .try_into()
        .map_err(|_| PayloadError(Reason::FRAME_SIZE_ERROR))?;
    Ok(Reason(u32::from_be_bytes(b)))
}

/// A GOAWAY payload's last stream and error code (RFC 9113 §6.8): 8 bytes at least, else
/// FRAME_SIZE_ERROR.
pub fn goaway(payload: &[u8]) -> Result<(u32, Reason), PayloadError> {
    let Some(p) = payload.get(..8) else {
        return Err(PayloadError(Reason::FRAME_SIZE_ERROR));
    };
    Ok((
        u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff,
        Reason(u32::from_be_bytes([p[4], p[5], p[6], p[7]])),
    ))
}

/// Appends a SETTINGS frame with `settings`.
pub fn write_settings(dst: &mut BytesMut, settings: &[Setting]) {
    Head {
        len: settings.len() * 6,
        kind: kind::SETTINGS,
        flags: 0,
        stream: 0,
    }
    .emit(dst);
    for s in settings {
        let (id, v) = s.id_value();
        dst.put_u16(id);
        dst.put_u32(v);
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn write_settings_ack(dst: &mut BytesMut) {
    Head {
        len: 0,
        kind: kind::SETTINGS,
        flags: flag::ACK,
        stream: 0,
    }
    .emit(dst);
}

/// Appends a PING frame (an acknowledgement when `ack`).
pub fn write_ping(dst: &mut BytesMut, ack: bool, data: [u8; 8]) {
    Head {
        len: 8,
        kind: kind::PING,
        flags: if ack { flag::ACK } else { 0 },
        stream: 0,
    }
    .emit(dst);
    dst.put_slice(&data);
}

/// Appends a WINDOW_UPDATE frame of `increment` (1..2^31) for `stream` (0: the connection).
pub fn write_window_update(dst: &mut BytesMut, stream: u32, increment: u32) {
    Head {
        len: 4,
        kind: kind::WINDOW_UPDATE,
        flags: 0,
        stream,
    }
    .emit(dst);
    dst.put_u32(increment & 0x7fff_ffff);
}

/// Appends a RST_STREAM frame.
pub fn write_rst(dst: &mut BytesMut, stream: u32, reason: Reason) {
    Head {
        len: 4,
        kind: kind::RST_STREAM,
        flags: 0,
        stream,
    }
    .emit(dst);
    dst.put_u32(reason.0);
}

/// Appends a GOAWAY frame.
pub fn write_goaway(dst: &mut BytesMut, last: u32, reason: Reason, debug: &[u8]) {
    Head {
        len: 8 + debug.len(),
        kind: kind::GOAWAY,
        flags: 0,
        stream: 0,
    }
    .emit(dst);
    dst.put_u32(last & 0x7fff_ffff);
    dst.put_u32(reason.0);
    dst.put_slice(debug);
}

/// Appends the header of a DATA frame of `len` bytes (its payload follows, written by the
/// caller: in the same buffer, or as a buffer of its own).
pub fn write_data_head(dst: &mut BytesMut, stream: u32, len: usize, end: bool) {
    Head {
        len,
        kind: kind::DATA,
        flags: if end { flag::END_STREAM } else { 0 },
        stream,
    }
    .emit(dst);
}

/// Appends a header block as a HEADERS frame and as many CONTINUATION frames as
/// `max_frame` (the peer's SETTINGS_MAX_FRAME_SIZE) requires.
pub fn write_headers(dst: &mut BytesMut, stream: u32, block: &[u8], end: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or(&[]);
    let last = first.len() == block.len();
    let mut flags = if end { flag::END_STREAM } else { 0 };
    if last {
        flags |= flag::END_HEADERS;
    }
    dst.reserve(HEADER_LEN + block.len());
    Head {
        len: first.len(),
        kind: kind::HEADERS,
        flags,
        stream,
    }
    .emit(dst);
    dst.put_slice(first);
    let mut sent = first.len();
    for c in chunks {
        sent += c.len();
        Head {
            len: c.len(),
            kind: kind::CONTINUATION,
            flags: if sent == block.len() {
                flag::END_HEADERS
            } else {
                0
            },
            stream,
        }
        .emit(dst);
        dst.put_slice(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_head_reads_back_as_written_and_the_reserved_bit_is_ignored() {
        let mut b = BytesMut::new();
        let h = Head {
            len: 0x12_3456,
            kind: kind::HEADERS,
            flags: flag::END_HEADERS | flag::END_STREAM,
            stream: 0x7fff_fffd,
        };
        h.emit(&mut b);
        assert_eq!(Head::parse(&b), Some(h));
        b[5] |= 0x80;
        assert_eq!(Head::parse(&b), Some(h));
        assert_eq!(Head::parse(&b[..8]), None);
    }

    #[test]
    fn padding_is_stripped_and_padding_as_long_as_the_payload_is_an_error() {
        let p = Bytes::from_static(b"\x02abc\0\0");
        assert_eq!(strip_padding(flag::PADDED, p.clone()).unwrap(), "abc");
        assert_eq!(strip_padding(0, p.clone()).unwrap(), p);
        let e = strip_padding(flag::PADDED, Bytes::from_static(b"\x06abc\0\0"));
        assert_eq!(e, Err(PayloadError(Reason::PROTOCOL_ERROR)));
        let e = strip_padding(flag::PADDED, Bytes::new());
        assert_eq!(e, Err(PayloadError(Reason::FRAME_SIZE_ERROR)));
    }

    #[test]
    fn settings_are_checked_and_unknown_ones_skipped() {
        let mut b = BytesMut::new();
        write_settings(
            &mut b,
            &[
                Setting::InitialWindowSize(1 << 20),
                Setting::MaxFrameSize(16_384),
            ],
        );
        let mut p = b.split_off(HEADER_LEN).to_vec();
        p.extend_from_slice(&[0x0, 0x99, 0, 0, 0, 1]);
        assert_eq!(
            settings(&p).unwrap(),
            [
                Setting::InitialWindowSize(1 << 20),
                Setting::MaxFrameSize(16_384)
            ]
        );
        assert!(settings(&p[..5]).is_err());
        let bad_window = [0, 4, 0x80, 0, 0, 0];
        assert_eq!(
            settings(&bad_window),
            Err(PayloadError(Reason::FLOW_CONTROL_ERROR))
        );
        assert!(settings(&[0, 5, 0, 0, 0x3f, 0xff]).is_err());
        assert!(settings(&[0, 2, 0, 0, 0, 2]).is_err());
    }

    #[test]
    fn a_long_block_is_split_into_continuations() {
        let block: Vec<u8> = (0..40u8).collect();
        let mut b = BytesMut::new();
        write_headers(&mut b, 3, &block, true, 16);
        let mut at = 0;
        let mut joined = Vec::new();
        let mut heads = Vec::new();
        while at < b.len() {
            let h = Head::parse(&b[at..]).unwrap();
            joined.extend_from_slice(&b[at + HEADER_LEN..at + HEADER_LEN + h.len]);
            heads.push((h.kind, h.flags, h.len));
            at += HEADER_LEN + h.len;
        }
        assert_eq!(joined, block);
        assert_eq!(
            heads,
            [
                (kind::HEADERS, flag::END_STREAM, 16),
                (kind::CONTINUATION, 0, 16),
                (kind::CONTINUATION, flag::END_HEADERS, 8)
            ]
        );
    }

    proptest! {
        #[test]
        fn payload_readers_never_panic(flags: u8, p in proptest::collection::vec(any::<u8>(), 0..64)) {
            let b = Bytes::from(p.clone());
            let _ = strip_padding(flags, b.clone());
            let _ = headers_fragment(flags, b);
            let _ = settings(&p);
            let _ = window_increment(&p);
            let _ = rst_reason(&p);
            let _ = goaway(&p);
            let _ = Head::parse(&p);
        }

        #[test]
        fn frames_read_back(stream in 0u32..0x8000_0000, inc in 1u32..0x8000_0000, code: u32) {
            let mut b = BytesMut::new();
            write_window_update(&mut b, stream, inc);
            let h = Head::parse(&b).unwrap();
            prop_assert_eq!((h.kind, h.stream, h.len), (kind::WINDOW_UPDATE, stream, 4));
            prop_assert_eq!(window_increment(&b[HEADER_LEN..]).unwrap(), inc);
            let mut b = BytesMut::new();
            write_rst(&mut b, stream, Reason(code));
            prop_assert_eq!(rst_reason(&b[HEADER_LEN..]).unwrap(), Reason(code));
            let mut b = BytesMut::new();
            write_goaway(&mut b, stream, Reason(code), b"why");
            prop_assert_eq!(goaway(&b[HEADER_LEN..]).unwrap(), (stream, Reason(code)));
        }
    }
}
