//! A gRPC health check's answer comes from the server checked: any bytes must be read as a
//! status or refused without a panic, and a message that reads whole must still read whole,
//! as SERVING, with a `status = SERVING` field appended (the last value of a field wins).
#![no_main]

use headway_proxy::health::grpc::{serving_status, ServingStatus};
use libfuzzer_sys::fuzz_target;

fn framed(msg: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

fuzz_target!(|data: &[u8]| {
    let _ = serving_status(data);
    if serving_status(&framed(data)).is_ok() {
        let mut msg = data.to_vec();
        msg.extend_from_slice(&[0x08, 0x01]);
        assert_eq!(serving_status(&framed(&msg)), Ok(ServingStatus::Serving));
    }
});
