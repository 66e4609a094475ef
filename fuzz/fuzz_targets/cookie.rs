//! Persistence cookies come from clients: finding ours in any `Cookie` header and looking its
//! value up must never panic, and a value we issued must always be found again.
#![no_main]

use headway_lb::persist::{CookieCodec, CookieSpec, CookieTable};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let spec = CookieSpec::new("SRV");
    let codec = CookieCodec::new([7; 32]);
    let table = CookieTable::new(&codec, [("a/1", 0u32), ("b/2", 1)]);
    if let Some(v) = spec.find_in(data) {
        let _ = table.server(v);
    }
    let issued = table.value(1).expect("issued");
    let mut header = data.to_vec();
    header.extend_from_slice(b"; SRV=");
    header.extend_from_slice(issued.as_bytes());
    if spec.find_in(data).is_none() {
        let v = spec.find_in(&header).expect("our cookie is found");
        assert_eq!(table.server(v), Some(1));
    }
});
