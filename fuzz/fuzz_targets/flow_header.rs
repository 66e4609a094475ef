//! The tunnel's flow header, read from the first bytes of every QUIC stream a peer opens: any
//! bytes must parse or be refused without panicking, and what parses must re-emit to a header
//! that parses to the same value (extensions and unknown trailing bytes are dropped by design).
#![no_main]

use headway_tunnel::FlowHeader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = FlowHeader::from_bytes(data) {
        let mut buf = vec![0u8; h.buffer_len()];
        h.emit(&mut buf);
        let again = FlowHeader::from_bytes(&buf).expect("an emitted header parses");
        assert_eq!(again, h);
    }
});
