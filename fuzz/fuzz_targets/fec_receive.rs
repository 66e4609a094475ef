//! The tunnel's FEC layer reads every datagram that reaches the tunnel socket, before QUIC
//! authenticates anything: any sequence of datagrams (data, repair, garbage) must be handled
//! without panicking, a data datagram's payload offset must lie inside it, and restored (or
//! held back and released) datagrams are bounded by what a shard can hold.
#![no_main]

use std::time::{Duration, Instant};

use headway_fec::{Config, Fec, PathParams, Received, MAX_KEPT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = "192.0.2.1:4433".parse().unwrap();
    let mut fec = Fec::new(Config::default());
    fec.configure(src, PathParams::for_link(44_000_000, Duration::from_millis(100)));
    let mut now = Instant::now();
    // Datagrams: a length byte (×8) then that many bytes; time moves on by the length byte's
    // low bits in milliseconds (so holds run out and held datagrams are released).
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let len = (usize::from(n) * 8).min(tail.len());
        let (datagram, next) = tail.split_at(len);
        rest = next;
        now += Duration::from_millis(u64::from(n & 0x1F));
        if fec.poll_timeout().is_some_and(|t| t <= now) {
            fec.handle_timeout(now);
            while fec.poll_transmit().is_some() {}
        }
        if let Received::Data { offset } = fec.handle_recv(now, src, datagram) {
            assert!(offset <= datagram.len());
        }
        while let Some((from, d)) = fec.poll_recovered() {
            assert_eq!(from, src);
            assert!(!d.is_empty() && d.len() <= MAX_KEPT);
        }
    }
});
