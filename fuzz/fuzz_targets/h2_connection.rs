//! A peer's bytes, in any order and cut anywhere, fed to the HTTP/2 core
//! (`headway_h2::connection::Connection`) as the proxy's shells feed it. The first byte picks
//! the side: the server's (every request is answered with a head, some data and trailers) or
//! the client's (three requests are open, one with a body, and more are opened as room
//! allows); every piece of a body is given back. Properties:
//!
//! 1. Nothing panics, whatever the bytes.
//! 2. What the core writes is whole frames, each within the default frame size.
//! 3. Once the core reports a connection error, it takes nothing more.
#![no_main]

use std::io::IoSlice;

use bytes::Bytes;
use headway_h2::frame::{Head, DEFAULT_MAX_FRAME, HEADER_LEN, PREFACE};
use headway_h2::connection::{Config, Connection, Event};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&cut, rest)) = input.split_first() else {
        return;
    };
    let cfg = Config {
        max_concurrent_streams: 8,
        window: 65_535,
        connection_window: 65_535,
        max_header_list: 4096,
        max_resets: 16,
    };
    let client = cut & 0x80 != 0;
    let (mut c, mut bytes) = if client {
        let mut c = Connection::client(cfg);
        let uri = http::Uri::from_static("http://origin.test/a");
        let h = http::HeaderMap::new();
        for end in [true, false, true] {
            let _ = c.send_request(&http::Method::GET, &uri, &h, end);
        }
        let _ = c.send_data(3, Bytes::from_static(b"body"), true);
        (c, Vec::new())
    } else {
        // Most inputs start right after the preface, so that frames are reached.
        (Connection::new(cfg), PREFACE.to_vec())
    };
    bytes.extend_from_slice(rest);
    let step = usize::from(cut & 0x7f).max(1);
    let mut out = Vec::new();
    let mut failed = false;
    for piece in bytes.chunks(step) {
        c.read_buf().extend_from_slice(piece);
        let r = c.handle_read();
        if failed {
            assert!(r.is_err(), "a failed connection took more");
        }
        failed |= r.is_err();
        while let Some(e) = c.poll_event() {
            match e {
                Event::Request { stream, .. } => {
                    let head = http::Response::new(()).into_parts().0;
                    let _ = c.send_response(stream, &head, false);
                    let _ = c.send_data(stream, Bytes::from_static(b"answer"), false);
                    let mut t = http::HeaderMap::new();
                    t.insert("grpc-status", http::HeaderValue::from_static("0"));
                    let _ = c.send_trailers(stream, t);
                }
                Event::Data { stream, data, .. } => c.release(stream, data.len()),
                _ => {}
            }
        }
        if client && c.can_open() {
            let uri = http::Uri::from_static("http://origin.test/b");
            let _ = c.send_request(&http::Method::POST, &uri, &http::HeaderMap::new(), false);
        }
        loop {
            let mut iov = [IoSlice::new(&[]); 8];
            let n = c.transmit(&mut iov);
            if n == 0 {
                break;
            }
            let len: usize = iov[..n].iter().map(|s| s.len()).sum();
            for s in &iov[..n] {
                out.extend_from_slice(s);
            }
            c.advance(len);
        }
    }
    // (The client's preface leads its bytes.)
    let mut at = 0;
    if client && !out.is_empty() {
        assert!(out.starts_with(PREFACE));
        at = PREFACE.len();
    }
    while at < out.len() {
        let h = Head::parse(&out[at..]).expect("a whole frame header");
        assert!(h.len <= DEFAULT_MAX_FRAME, "a frame past the frame size");
        at += HEADER_LEN + h.len;
    }
    assert_eq!(at, out.len(), "whole frames only");
});
