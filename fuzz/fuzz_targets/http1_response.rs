//! The proxy's reading of what a server sends: a response head (`parse_response_head`), its
//! body's framing (`response_framing`) and the body's de-framing (`Decoder`), fed any bytes.
//! Nothing may panic; a head is taken as a whole prefix of the buffer or the buffer is left as
//! it was; and the head, the payload and where the message ends must not depend on how the
//! bytes were split into reads (the first input byte is the split point).
#![no_main]

use bytes::BytesMut;
use headway_proxy::http::codec::{parse_response_head, response_framing, Decoder, Step};
use libfuzzer_sys::fuzz_target;

/// What a response's bytes amount to, as comparable values.
#[derive(Debug, PartialEq)]
enum Read {
    /// The head is incomplete.
    Partial,
    /// The head or the framing was refused.
    Refused,
    /// Status, fields, the payload, and how the message ended.
    Message(u16, Vec<(String, Vec<u8>)>, Vec<u8>, End),
}

/// How a response's body ended.
#[derive(Debug, PartialEq)]
enum End {
    /// At its framing's end, with this many bytes of the input after it.
    Done(usize),
    /// The framing was malformed.
    Malformed,
    /// The input ended before the body did.
    Short,
}

/// Reads `reads` (the bytes in the order they arrive) as the proxy does.
fn read(reads: &[&[u8]]) -> Read {
    let mut buf = BytesMut::new();
    let mut names = Vec::new();
    let total: usize = reads.iter().map(|r| r.len()).sum();
    // Input bytes put into `buf` so far.
    let mut fed = 0;
    let mut reads = reads.iter();
    // The head, skipping 1xx interim answers.
    let head = loop {
        if !buf.is_empty() {
            let before = buf.clone();
            match parse_response_head(&mut buf, &mut names) {
                Ok(Some(h)) => {
                    assert!(before.ends_with(&buf), "a head is a prefix of the buffer");
                    if h.status.is_informational() && h.status.as_u16() != 101 {
                        continue;
                    }
                    break h;
                }
                Ok(None) => assert_eq!(before, buf, "an incomplete head leaves the buffer"),
                Err(_) => return Read::Refused,
            }
        }
        match reads.next() {
            Some(r) => {
                buf.extend_from_slice(r);
                fed += r.len();
            }
            None => return Read::Partial,
        }
    };
    let fields = head
        .headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .collect();
    let Ok(framing) = response_framing(&http::Method::GET, head.status, &head.headers) else {
        return Read::Refused;
    };
    let mut decoder = Decoder::new(framing);
    let mut payload = Vec::new();
    let ended = loop {
        match decoder.step(&buf) {
            Ok(Step::Data(n)) => {
                assert!(n > 0 && n <= buf.len());
                payload.extend_from_slice(&buf.split_to(n));
            }
            Ok(Step::Skip(n)) => {
                assert!(n > 0 && n <= buf.len());
                let _ = buf.split_to(n);
            }
            Ok(Step::Done(n)) => {
                assert!(n <= buf.len());
                break End::Done(total - (fed - buf.len() + n));
            }
            Ok(Step::NeedMore) => match reads.next() {
                Some(r) => {
                    buf.extend_from_slice(r);
                    fed += r.len();
                }
                None if decoder.eof() => break End::Done(0),
                None => break End::Short,
            },
            Err(_) => break End::Malformed,
        }
    };
    Read::Message(head.status.as_u16(), fields, payload, ended)
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, wire)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(wire.len());
    let whole = read(&[wire]);
    let split = read(&[&wire[..at], &wire[at..]]);
    assert_eq!(
        whole, split,
        "the reading depends on how the bytes were split"
    );
});
