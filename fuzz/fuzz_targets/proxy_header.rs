//! The PROXY protocol header a client connection starts with (`headway_proxy::proxy_protocol`),
//! fed any bytes. Nothing may panic; a header is never longer than the bytes given or the limit;
//! it does not depend on the bytes after it; and every shorter front of it is incomplete, never
//! refused (the header may arrive in any number of reads).
#![no_main]

use headway_proxy::proxy_protocol::{parse, Parsed, MAX_HEADER};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Parsed::Header { len, addresses } = parse(data) else {
        return;
    };
    assert!(len <= data.len() && len <= MAX_HEADER);
    assert_eq!(
        parse(&data[..len]),
        Parsed::Header { len, addresses },
        "the header depends on the bytes after it"
    );
    for cut in 0..len {
        assert_eq!(parse(&data[..cut]), Parsed::Incomplete, "front of {cut} bytes");
    }
});
