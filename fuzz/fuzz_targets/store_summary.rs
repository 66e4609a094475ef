//! The chunk store's segment summaries, read at start-up in place of scanning a segment, from
//! files a crash may have torn or a disk corrupted. The input is a summary without its CRC (the
//! target appends the right one, so the entries are parsed rather than refused by the
//! checksum), checked against the segment number and length in its own header: any bytes must
//! be refused or parse to entries that re-encode to exactly the input, never a panic.
#![no_main]

use headway_store::summary::{self, Builder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(data).to_le_bytes());
    let (number, seg_len) = match data.get(4..16) {
        Some(h) => (
            u32::from_le_bytes([h[0], h[1], h[2], h[3]]),
            u64::from_le_bytes([h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11]]),
        ),
        None => (0, 0),
    };
    if let Ok(entries) = summary::parse(&bytes, number, seg_len) {
        let mut b = Builder::new(usize::MAX);
        entries.iter().for_each(|e| b.push(e));
        assert_eq!(b.finish(number, seg_len).as_deref(), Some(&bytes[..]));
    }
});
