//! `Accept-Encoding` comes from clients: any bytes, split into any number of field values,
//! must parse without a panic, and the codec chosen must be one the client accepted — highest
//! weight first, never one it refused with `q=0`.
#![no_main]

use headway_config::compress::Codec;
use headway_proxy::http::compress::Accepted;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A newline separates field values, as several `Accept-Encoding` lines would.
    let a = Accepted::parse(data.split(|&b| b == b'\n'));
    for order in [&Codec::ALL[..], &[Codec::Gzip], &[Codec::Brotli, Codec::Gzip]] {
        match a.choose(order) {
            Some(c) => {
                assert!(order.contains(&c));
                assert!(a.weight(c) > 0 && a.weight(c) <= 1000);
                assert!(order.iter().all(|o| a.weight(*o) <= a.weight(c)));
            }
            None => assert!(order.iter().all(|o| a.weight(*o) == 0)),
        }
    }
    // Appending a refusal of every codec makes nothing acceptable only if nothing was listed
    // before it: the first element naming a codec wins.
    let mut refused = data.to_vec();
    refused.extend_from_slice(b"\ngzip;q=0, br;q=0, zstd;q=0");
    let r = Accepted::parse(refused.split(|&b| b == b'\n'));
    for c in Codec::ALL {
        assert!(r.weight(c) <= a.weight(c));
    }
});
