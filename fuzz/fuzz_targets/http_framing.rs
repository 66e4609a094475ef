//! The ADC's request framing check, fed every byte a client sends: any bytes, split anywhere,
//! must never panic, and the verdict must not depend on how the bytes were split into reads
//! (the first byte is the split point).
#![no_main]

use headway_proxy::http::framing::FramingChecker;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut whole = FramingChecker::new(4096, 32);
    whole.handle_bytes(rest);
    let at = usize::from(cut).min(rest.len());
    let mut split = FramingChecker::new(4096, 32);
    split.handle_bytes(&rest[..at]);
    split.handle_bytes(&rest[at..]);
    assert_eq!(whole.violation(), split.violation());
    assert_eq!(whole.violation_offset(), split.violation_offset());
});
