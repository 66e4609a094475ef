//! The chunk store's on-disk record, read back at start-up from segment files that a crash may
//! have torn or a disk may have corrupted: any bytes must be refused or parse to a record whose
//! re-emitted form is exactly the bytes read (header, CRC and data), never a panic.
#![no_main]

use headway_store::record::{Record, RecordRepr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(record) = Record::new_checked(data) else {
        return;
    };
    if let Ok(repr) = RecordRepr::parse(&record) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf, record.data());
        assert_eq!(&buf[..], &data[..repr.buffer_len()]);
    }
});
