//! The gRPC health checking protocol (`grpc.health.v1.Health/Check`), as a monitor asks it:
//! the request message it sends and the reading of the server's answer (sans-IO).
//!
//! A gRPC message on the wire is a 5-byte prefix (a compressed flag, then the length, big
//! endian) and a protocol buffer. `HealthCheckRequest` is `string service = 1`;
//! `HealthCheckResponse` is `ServingStatus status = 1` (`UNKNOWN` 0, `SERVING` 1,
//! `NOT_SERVING` 2, `SERVICE_UNKNOWN` 3). Both are encoded and read here by hand: two fields
//! do not need a protocol-buffer library, and the reader skips any other field a newer server
//! adds.

use bytes::{BufMut, Bytes, BytesMut};

/// The request's path.
pub const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// A server's answer for the service asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingStatus {
    /// `UNKNOWN` (also what an answer without the field means).
    Unknown,
    /// `SERVING`: healthy.
    Serving,
    /// `NOT_SERVING`.
    NotServing,
    /// `SERVICE_UNKNOWN`: the server does not know the service asked about.
    ServiceUnknown,
    /// A value this protocol version does not name.
    Other(u64),
}

impl ServingStatus {
    fn from_value(v: u64) -> Self {
        match v {
            0 => ServingStatus::Unknown,
            1 => ServingStatus::Serving,
            2 => ServingStatus::NotServing,
            3 => ServingStatus::ServiceUnknown,
            n => ServingStatus::Other(n),
        }
    }
}

/// The framed `HealthCheckRequest` for `service` (`""`: the server as a whole).
pub fn check_request(service: &str) -> Bytes {
    let mut msg = BytesMut::new();
    if !service.is_empty() {
        msg.put_u8(0x0a); // field 1, length-delimited
        put_varint(&mut msg, service.len() as u64);
        msg.put_slice(service.as_bytes());
    }
    let mut out = BytesMut::with_capacity(5 + msg.len());
    out.put_u8(0);
    out.put_u32(msg.len() as u32);
    out.put_slice(&msg);
    out.freeze()
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Reads a varint at the start of `b`: its value and length.
fn varint(b: &[u8]) -> Result<(u64, usize), &'static str> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        let bits = u64::from(byte & 0x7f);
        if i == 9 && bits > 1 {
            return Err("a varint longer than 64 bits");
        }
        v |= bits << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    Err("a varint cut short")
}

/// The status in the body of a `Health/Check` answer: one framed, uncompressed
/// `HealthCheckResponse` (fields other than `status` skipped).
pub fn serving_status(body: &[u8]) -> Result<ServingStatus, String> {
    if body.len() < 5 {
        return Err(format!(
            "the answer holds no gRPC message ({} bytes)",
            body.len()
        ));
    }
    if body[0] != 0 {
        return Err("the answer's message is compressed, which was not asked for".into());
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let Some(mut msg) = body.get(5..5 + len) else {
        return Err(format!(
            "the answer's message is cut short ({} of {len} bytes)",
            body.len() - 5
        ));
    };
    let mut status = 0;
    while !msg.is_empty() {
        let (key, n) = varint(msg)?;
        msg = &msg[n..];
        let skip = match key & 7 {
            0 => {
                let (v, n) = varint(msg)?;
                if key >> 3 == 1 {
                    status = v;
                }
                n
            }
            1 => 8,
            2 => {
                let (l, n) = varint(msg)?;
                n.saturating_add(usize::try_from(l).unwrap_or(usize::MAX))
            }
            5 => 4,
            _ => return Err(format!("a field of wire type {} in the answer", key & 7)),
        };
        msg = msg
            .get(skip..)
            .ok_or("the answer's message ends inside a field")?;
    }
    Ok(ServingStatus::from_value(status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_and_answers_as_grpc_servers_send_them() {
        assert_eq!(&check_request("")[..], b"\0\0\0\0\0");
        assert_eq!(&check_request("svc")[..], b"\0\0\0\0\x05\x0a\x03svc");
        assert_eq!(
            serving_status(b"\0\0\0\0\x02\x08\x01"),
            Ok(ServingStatus::Serving)
        );
        assert_eq!(
            serving_status(b"\0\0\0\0\x02\x08\x02"),
            Ok(ServingStatus::NotServing)
        );
        // proto3 leaves a zero field out: UNKNOWN.
        assert_eq!(serving_status(b"\0\0\0\0\0"), Ok(ServingStatus::Unknown));
        // Unknown fields before and after are skipped.
        assert_eq!(
            serving_status(b"\0\0\0\0\x0b\x12\x02ab\x08\x03\x25\x01\x02\x03\x04"),
            Ok(ServingStatus::ServiceUnknown)
        );
        for bad in [
            &b""[..],
            b"\0\0\0",
            b"\x01\0\0\0\x02\x08\x01",
            b"\0\0\0\0\x05\x08\x01",
            b"\0\0\0\0\x01\x08",
            b"\0\0\0\0\x02\x0b\x01",
            b"\0\0\0\0\x0b\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
        ] {
            assert!(serving_status(bad).is_err(), "{bad:?}");
        }
    }

    fn encode(status: u64, before: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut msg = BytesMut::new();
        for (field, data) in before {
            put_varint(&mut msg, (u64::from(*field) << 3) | 2);
            put_varint(&mut msg, data.len() as u64);
            msg.put_slice(data);
        }
        msg.put_u8(0x08);
        put_varint(&mut msg, status);
        let mut out = vec![0];
        out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        out.extend_from_slice(&msg);
        out
    }

    proptest! {
        #[test]
        fn any_bytes_are_read_or_refused_without_a_panic(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = serving_status(&body);
        }

        #[test]
        fn the_status_is_read_whatever_fields_come_before_it(
            status in any::<u64>(),
            before in proptest::collection::vec((2u8..16, proptest::collection::vec(any::<u8>(), 0..40)), 0..4),
        ) {
            let s = serving_status(&encode(status, &before)).unwrap();
            prop_assert_eq!(s, ServingStatus::from_value(status));
        }

        #[test]
        fn requests_carry_their_service(service in "[a-zA-Z0-9._]{0,200}") {
            let r = check_request(&service);
            prop_assert_eq!(r[0], 0);
            let len = u32::from_be_bytes([r[1], r[2], r[3], r[4]]) as usize;
            prop_assert_eq!(len, r.len() - 5);
            if !service.is_empty() {
                prop_assert!(r.ends_with(service.as_bytes()));
            }
        }
    }
}
