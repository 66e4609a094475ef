//! The HTTP/1 loop's request-head parser, fed what a client sends: any bytes must never panic,
//! a request is taken as a whole prefix of the buffer or the buffer is left as it was, and the
//! requests taken must not depend on how the bytes were split into reads (the first byte is
//! the split point). The answer head written for each request must parse back.
#![no_main]

use bytes::BytesMut;
use headway_proxy::http::h1::{take_head, write_head, Asked, Head};
use libfuzzer_sys::fuzz_target;

/// Takes every request off `buf`; true if it stopped at one the loop does not take.
fn drain(
    buf: &mut BytesMut,
    names: &mut Vec<(http::HeaderName, usize, usize)>,
    out: &mut Vec<String>,
) -> bool {
    loop {
        let before = buf.clone();
        match take_head(buf, 4096, 32, names) {
            Head::Ready(r) => {
                assert!(before.ends_with(buf), "a request is a prefix of the buffer");
                let mut head = BytesMut::new();
                let asked = Asked {
                    head: false,
                    version: r.version(),
                    keep_alive: true,
                };
                write_head(
                    &mut head,
                    http::StatusCode::OK,
                    r.headers(),
                    asked,
                    Some(3),
                    b"now",
                );
                let mut slots = [httparse::EMPTY_HEADER; 64];
                let mut resp = httparse::Response::new(&mut slots);
                assert!(matches!(
                    resp.parse(&head),
                    Ok(httparse::Status::Complete(_))
                ));
                out.push(format!(
                    "{:?} {:?} {:?} {:?}",
                    r.method(),
                    r.uri(),
                    r.version(),
                    r.headers()
                ));
            }
            Head::Partial => {
                assert_eq!(before, *buf);
                return false;
            }
            Head::Other => {
                assert_eq!(before, *buf);
                return true;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut names = Vec::new();
    let mut whole = Vec::new();
    drain(&mut BytesMut::from(rest), &mut names, &mut whole);
    let at = usize::from(cut).min(rest.len());
    let mut split = Vec::new();
    let mut buf = BytesMut::from(&rest[..at]);
    if !drain(&mut buf, &mut names, &mut split) {
        buf.extend_from_slice(&rest[at..]);
        drain(&mut buf, &mut names, &mut split);
    }
    assert_eq!(whole, split);
});
