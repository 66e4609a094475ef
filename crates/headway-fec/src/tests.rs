use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

/// A fixed start instant (the sanctioned clock's epoch; the core never reads a clock).
fn t0() -> Instant {
    headway_core::clock::ManualClock::new().epoch()
}

fn a() -> SocketAddr {
    "192.0.2.1:4433".parse().unwrap()
}
fn b() -> SocketAddr {
    "192.0.2.2:4433".parse().unwrap()
}

fn params() -> PathParams {
    PathParams {
        protect: true,
        blocks: true,
        idle_gap: Duration::from_millis(5),
        span: Duration::from_millis(500),
        block: MAX_BLOCK,
        tail_bytes: 200 * 1200,
        probe_gap: None,
        packet_time: Duration::ZERO,
        rtt: Duration::from_millis(100),
        long_block: 0,
        long_tail: 0,
        hold: Duration::ZERO,
    }
}

fn pair() -> (Fec, Fec) {
    let mut tx = Fec::new(Config::default());
    let mut rx = Fec::new(Config::default());
    tx.configure(b(), params());
    rx.configure(a(), params());
    (tx, rx)
}

/// A datagram of `len` bytes that says which one it is.
fn datagram(i: usize, len: usize) -> Vec<u8> {
    let mut d: Vec<u8> = (0..len).map(|j| (i * 31 + j * 7) as u8).collect();
    if len >= 4 {
        d[..4].copy_from_slice(&(i as u32).to_be_bytes());
    }
    d
}

/// Sends `sizes` from tx (at a) to rx (at b), dropping the indices in `lose`, then lets the
/// burst end; returns (what rx delivered directly, what it restored).
fn burst(
    tx: &mut Fec,
    rx: &mut Fec,
    t0: Instant,
    sizes: &[usize],
    lose: &[usize],
    lose_repair: &[usize],
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut delivered = Vec::new();
    let mut now = t0;
    for (i, &len) in sizes.iter().enumerate() {
        now += Duration::from_micros(100);
        let payload = datagram(i, len);
        let h = tx.handle_send(now, b(), &payload);
        let mut wire = h.to_vec();
        wire.extend_from_slice(&payload);
        if lose.contains(&i) {
            continue;
        }
        match rx.handle_recv(now, a(), &wire) {
            Received::Data { offset } => delivered.push(wire[offset..].to_vec()),
            other => panic!("{other:?}"),
        }
    }
    let deadline = tx.poll_timeout().expect("a burst is open");
    assert_eq!(deadline, now + params().idle_gap);
    tx.handle_timeout(deadline - Duration::from_micros(1));
    assert!(tx.poll_transmit().is_none(), "not idle yet");
    tx.handle_timeout(deadline);
    assert!(tx.poll_timeout().is_none());
    let mut k = 0;
    while let Some((to, d)) = tx.poll_transmit() {
        assert_eq!(to, b());
        if !lose_repair.contains(&k) {
            assert_eq!(rx.handle_recv(deadline, a(), &d), Received::Repair);
        }
        k += 1;
    }
    let mut restored = Vec::new();
    while let Some((from, d)) = rx.poll_recovered() {
        assert_eq!(from, a());
        restored.push(d);
    }
    (delivered, restored)
}

#[test]
fn a_lost_tail_is_restored_from_repair() {
    let (mut tx, mut rx) = pair();
    let sizes: Vec<usize> = (0..200).map(|i| 1200 + (i * 13) % 250).collect();
    let lose = [3, 77, 198, 199];
    let (delivered, restored) = burst(&mut tx, &mut rx, t0(), &sizes, &lose, &[]);
    assert_eq!(delivered.len(), 196);
    let want: Vec<Vec<u8>> = lose.iter().map(|&i| datagram(i, sizes[i])).collect();
    assert_eq!(restored, want);
    let (ts, rs) = (tx.stats(), rx.stats());
    assert_eq!(ts.windows, 1);
    assert!(ts.repair_sent >= 4, "{ts:?}");
    assert_eq!(rs.recovered, 4);
    assert_eq!(rs.unrecoverable, 0);
}

#[test]
fn windows_of_every_shape_are_restored_by_the_kept_coders() {
    // One pair, one window after the other: the coders are reset between windows of other
    // counts, shard sizes and losses, also after a window that lost more than its repair.
    let (mut tx, mut rx) = pair();
    let mut now = t0();
    let shapes: [(usize, usize, &[usize]); 5] = [
        (200, 1400, &[3, 150]),
        (40, 300, &[0, 39]),
        (
            100,
            1000,
            &[
                1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
            ],
        ),
        (120, 1452, &[60]),
        (7, 90, &[6]),
    ];
    let mut recovered = 0;
    for (i, (count, len, lose)) in shapes.into_iter().enumerate() {
        let sizes: Vec<usize> = (0..count).map(|j| len - (j * 7) % (len / 4)).collect();
        let (delivered, restored) = burst(&mut tx, &mut rx, now, &sizes, lose, &[]);
        assert_eq!(delivered.len(), count - lose.len(), "window {i}");
        if lose.len() > 10 {
            assert!(restored.is_empty(), "window {i}: more losses than repair");
        } else {
            let want: Vec<Vec<u8>> = lose.iter().map(|&j| datagram(j, sizes[j])).collect();
            assert_eq!(restored, want, "window {i}");
            recovered += lose.len() as u64;
        }
        now += Duration::from_secs(1);
    }
    assert_eq!(rx.stats().recovered, recovered);
    assert_eq!(tx.stats().windows, 5);
}

#[test]
fn more_losses_than_repair_restore_nothing() {
    let (mut tx, mut rx) = pair();
    let sizes = vec![1000; 100];
    let lose: Vec<usize> = (0..40).collect();
    let (_, restored) = burst(&mut tx, &mut rx, t0(), &sizes, &lose, &[]);
    assert!(restored.is_empty());
    assert!(rx.stats().recovered == 0);
}

#[test]
fn lost_repair_shards_are_replaced_by_the_others() {
    let (mut tx, mut rx) = pair();
    let sizes = vec![1400; 500];
    let (_, restored) = burst(&mut tx, &mut rx, t0(), &sizes, &[10], &[0, 1]);
    assert_eq!(restored, vec![datagram(10, 1400)]);
}

#[test]
fn short_exchanges_are_protected_and_unprotected_paths_are_not() {
    // A request or answer of a few datagrams, even tiny ones: its loss is restored.
    let (mut tx, mut rx) = pair();
    let (_, restored) = burst(&mut tx, &mut rx, t0(), &[53, 88], &[1], &[]);
    assert_eq!(restored, vec![datagram(1, 88)]);
    let (mut tx, mut rx) = pair();
    let (_, restored) = burst(&mut tx, &mut rx, t0(), &[1400, 350, 93], &[0], &[]);
    assert_eq!(restored, vec![datagram(0, 1400)]);

    let mut off = Fec::new(Config::default());
    off.configure(
        b(),
        PathParams {
            protect: false,
            blocks: false,
            ..params()
        },
    );
    let h = off.handle_send(t0(), b(), &[0; 1400]);
    assert_eq!(Kind::of(h[0]), Some(Kind::Data));
    assert_eq!(off.poll_timeout(), None);
}

#[test]
fn an_exchange_the_application_finished_is_repaired_after_the_exchange_gap() {
    let slow = PathParams {
        idle_gap: Duration::from_millis(120),
        ..params()
    };
    let mut tx = Fec::new(Config::default());
    tx.configure(b(), slow);
    let now = t0();
    // The application writes a request; the transport sends it in two datagrams. While 67
    // bytes are unsent, the burst may still be paced: the idle gap applies.
    tx.handle_written(now, b(), 120);
    tx.handle_send(now, b(), &datagram(0, 53));
    tx.handle_sent(now, b());
    assert_eq!(tx.poll_timeout(), Some(now + slow.idle_gap));
    // All written went out: repaired one exchange gap after the last datagram.
    let t = now + Duration::from_millis(1);
    tx.handle_send(t, b(), &datagram(1, 88));
    tx.handle_sent(t, b());
    assert!(tx.poll_transmit().is_none());
    assert_eq!(tx.poll_timeout(), Some(t + EXCHANGE_GAP));
    tx.handle_timeout(t + EXCHANGE_GAP);
    assert!(tx.poll_transmit().is_some(), "repaired");
    while tx.poll_transmit().is_some() {}
    // Acknowledgements alone (nothing written) wait for the idle gap.
    let t = now + Duration::from_secs(1);
    tx.handle_send(t, b(), &datagram(2, 40));
    tx.handle_sent(t, b());
    assert_eq!(tx.poll_timeout(), Some(t + slow.idle_gap));
    tx.handle_timeout(t + slow.idle_gap);
    while tx.poll_transmit().is_some() {}
    // So does an answer with more written than sent so far.
    let later = now + Duration::from_secs(2);
    tx.handle_written(later, b(), 5000);
    tx.handle_send(later, b(), &datagram(3, 1400));
    tx.handle_sent(later, b());
    assert_eq!(tx.poll_timeout(), Some(later + slow.idle_gap));
}

#[test]
fn acknowledgements_beside_a_transfer_are_not_repaired() {
    let (mut tx, _) = pair();
    let mut now = t0();
    // 300 acknowledgement-sized datagrams, one every 0.2 ms: full blocks of them are let go,
    // and so is the last, longer than a short exchange and under min_window_bytes.
    for _ in 0..300 {
        now += Duration::from_micros(200);
        tx.handle_send(now, b(), &[1; 60]);
        tx.handle_sent(now, b());
    }
    tx.handle_timeout(tx.poll_timeout().expect("a burst is open"));
    assert!(tx.poll_transmit().is_none());
    let s = tx.stats();
    assert_eq!((s.windows, s.skipped, s.repair_sent), (0, 0, 0), "{s:?}");
    // Tiny datagrams below min_kept_len are not even kept.
    let h = tx.handle_send(now, b(), &[0; 10]);
    assert_eq!(Kind::of(h[0]), Some(Kind::Data));
}

#[test]
fn without_blocks_the_last_datagrams_of_a_burst_are_repaired() {
    let mut tx = Fec::new(Config::default());
    let mut rx = Fec::new(Config::default());
    let slow = PathParams {
        blocks: false,
        ..params()
    };
    tx.configure(b(), slow);
    rx.configure(a(), slow);
    let sizes = vec![1400; 200];
    // Losing the last datagram and one of the first: only the last is restored.
    let (_, restored) = burst(&mut tx, &mut rx, t0(), &sizes, &[3, 199], &[]);
    assert_eq!(restored, vec![datagram(199, 1400)]);
    let s = tx.stats();
    assert_eq!((s.windows, s.skipped), (1, 0), "{s:?}");
}

#[test]
fn datagrams_without_fec_pass_through() {
    let (_, mut rx) = pair();
    let quic_short = [0x43u8, 1, 2, 3];
    assert_eq!(rx.handle_recv(t0(), a(), &quic_short), Received::Plain);
    assert_eq!(rx.handle_recv(t0(), a(), &[0xA1, 0]), Received::Invalid);
    assert_eq!(rx.stats().plain_received, 1);
    assert_eq!(rx.stats().invalid, 1);
}

#[test]
fn the_receivers_loss_report_sizes_the_senders_repair() {
    let t0 = t0();
    let mut repair_at = Vec::new();
    for every in [0usize, 20] {
        let (mut tx, mut rx) = pair();
        let mut now = t0;
        // A long transfer a → b losing one in `every`, while b sends a → the reports.
        for i in 0..4000 {
            now += Duration::from_micros(50);
            let h = tx.handle_send(now, b(), &[7; 1200]);
            if every == 0 || i % every != 0 {
                let mut w = h.to_vec();
                w.extend_from_slice(&[7; 1200]);
                rx.handle_recv(now, a(), &w);
            }
            if i % 2 == 0 {
                let back = rx.handle_send(now, a(), &[1; 40]);
                let mut w = back.to_vec();
                w.extend_from_slice(&[1; 40]);
                tx.handle_recv(now, b(), &w);
            }
        }
        tx.handle_timeout(now + Duration::from_millis(10));
        let mut n = 0;
        while tx.poll_transmit().is_some() {
            n += 1;
        }
        repair_at.push(n);
    }
    // The window is the last 500 ms of datagrams (here all 2,048 kept), at 0 % and 5 % loss.
    assert!(repair_at[0] < 20, "{repair_at:?}"); // 0.1 % assumed at least
    assert!(repair_at[1] > 100, "{repair_at:?}");
}

#[test]
fn cancelled_sends_keep_sequence_numbers_consecutive() {
    let (mut tx, mut rx) = pair();
    let mut now = t0();
    let mut wires = Vec::new();
    for i in 0..20 {
        now += Duration::from_micros(100);
        let p = datagram(i, 1000);
        let h = tx.handle_send(now, b(), &p);
        if (5..8).contains(&i) {
            // As a socket that would block: the datagram was never sent.
            tx.cancel_send(b(), 1, 1);
            continue;
        }
        let mut w = h.to_vec();
        w.extend_from_slice(&p);
        wires.push(w);
    }
    let seqs: Vec<u32> = wires
        .iter()
        .map(|w| Header::parse(w).unwrap().seq)
        .collect();
    assert_eq!(seqs, (0..17).collect::<Vec<u32>>());
    assert_eq!(tx.stats().data_sent, 17);
    // The window holds exactly the 17 sent: losing the last of them is repaired.
    for w in &wires[..16] {
        rx.handle_recv(now, a(), w);
    }
    tx.handle_timeout(now + Duration::from_millis(10));
    while let Some((_, d)) = tx.poll_transmit() {
        rx.handle_recv(now, a(), &d);
    }
    let (_, got) = rx.poll_recovered().expect("restored");
    assert_eq!(got, datagram(19, 1000));
}

#[test]
fn a_window_reaches_back_only_one_span() {
    let (mut tx, _) = pair();
    let t0 = t0();
    for i in 0..50 {
        tx.handle_send(t0 + Duration::from_millis(i * 20), b(), &[0; 1000]);
    }
    // Sent over 1 s with a 500 ms span: the window holds the last ~25.
    let last = t0 + Duration::from_millis(49 * 20);
    tx.handle_timeout(last + Duration::from_millis(5));
    let (_, d) = tx.poll_transmit().expect("repair");
    let (rh, _) = RepairHeader::parse(&d[Header::LEN..]).unwrap();
    assert!((24..=27).contains(&rh.count), "{rh:?}");
    assert_eq!(rh.first + u32::from(rh.count), 50);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any burst with any loss pattern: whatever is restored is exactly what was lost, and
    /// when the losses (data and repair) do not exceed the repair, everything is restored.
    #[test]
    fn restores_exactly_what_was_lost(
        sizes in proptest::collection::vec(256usize..1500, 8..300),
        lose_seed in any::<u64>(),
        loss_pct in 0u64..8,
    ) {
        let (mut tx, mut rx) = pair();
        let mut x = lose_seed | 1;
        let mut lose = Vec::new();
        for i in 0..sizes.len() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            if x % 100 < loss_pct { lose.push(i); }
        }
        let (_, restored) = burst(&mut tx, &mut rx, t0(), &sizes, &lose, &[]);
        let lost: Vec<Vec<u8>> = lose.iter().map(|&i| datagram(i, sizes[i])).collect();
        for r in &restored {
            prop_assert!(lost.contains(r));
        }
        let bytes: usize = sizes.iter().sum();
        if (bytes >= Config::default().min_window_bytes || sizes.len() <= MAX_SHORT)
            && lose.len() as u64 <= tx.stats().repair_sent
        {
            prop_assert_eq!(restored, lost);
        }
    }

    /// Forged or corrupted repair datagrams never panic, and shards for a window whose
    /// datagrams all arrived restore nothing.
    #[test]
    fn forged_repair_is_harmless(
        forged in proptest::collection::vec(
            (0u32..20, 1u16..20, 1u16..8, 0u16..8, proptest::collection::vec(any::<u8>(), 0..64)),
            1..40,
        ),
        noise in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..20),
    ) {
        let (mut tx, mut rx) = pair();
        let now = t0();
        for i in 0..20 {
            let p = datagram(i, 200);
            let mut w = tx.handle_send(now, b(), &p).to_vec();
            w.extend_from_slice(&p);
            rx.handle_recv(now, a(), &w);
        }
        let repair = Header { kind: Kind::Repair, seq: 20, loss: LossReport::UNKNOWN }.emit();
        for (first, count, recovery, index, shard) in forged {
            let count = count.min(20 - first as u16).max(1);
            let rh = RepairHeader { first, count, recovery, index: index % recovery };
            let mut d = repair.to_vec();
            d.extend_from_slice(&rh.emit());
            d.extend_from_slice(&shard);
            rx.handle_recv(now, a(), &d);
        }
        prop_assert!(rx.poll_recovered().is_none());
        for n in noise {
            let mut d = repair.to_vec();
            d.extend_from_slice(&n);
            rx.handle_recv(now, a(), &d);
        }
    }
}

#[test]
fn a_full_block_is_repaired_at_once_and_its_loss_restored_mid_burst() {
    let (mut tx, mut rx) = pair();
    let mut now = t0();
    let mut restored = Vec::new();
    // 3 blocks of a long burst, one datagram lost early in each; handle_sent after every
    // send batch of 10, as the socket does.
    let total = 3 * MAX_BLOCK;
    for i in 0..total {
        now += Duration::from_micros(100);
        let payload = datagram(i, 1200);
        let mut wire = tx.handle_send(now, b(), &payload).to_vec();
        wire.extend_from_slice(&payload);
        if i % MAX_BLOCK != 3 {
            assert!(matches!(
                rx.handle_recv(now, a(), &wire),
                Received::Data { .. }
            ));
        }
        if i % 10 == 9 || i + 1 == total {
            tx.handle_sent(now, b());
            while let Some((_, d)) = tx.poll_transmit() {
                assert_eq!(rx.handle_recv(now, a(), &d), Received::Repair);
            }
            while let Some((_, d)) = rx.poll_recovered() {
                // Restored within a block and a send batch of its loss: inside the 128
                // packets QUIC still accepts.
                let lost = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize;
                assert!(i - lost < MAX_BLOCK + 10, "restored {lost} at {i}");
                restored.push(lost);
            }
        }
    }
    // Checked every 10 datagrams, windows close at 120 and 240: every loss was restored
    // before the burst ended; the last 96 datagrams wait for the idle gap.
    assert_eq!(restored, vec![3, MAX_BLOCK + 3, 2 * MAX_BLOCK + 3]);
    assert_eq!(tx.stats().windows, 2);
    let idle = tx.poll_timeout().expect("the rest of the burst is open");
    tx.handle_timeout(idle);
    assert_eq!(tx.stats().windows, 3);

    // The last window of a long burst is protected however small; a burst of that many
    // datagrams on its own is not (a lone short exchange is, see above).
    let mut now = idle + Duration::from_millis(10);
    for i in 0..(MAX_BLOCK + 2) {
        now += Duration::from_micros(100);
        tx.handle_send(now, b(), &datagram(i, 1200));
        tx.handle_sent(now, b());
    }
    assert_eq!(tx.stats().windows, 4, "the full block");
    let idle = tx.poll_timeout().unwrap();
    tx.handle_timeout(idle);
    assert_eq!(tx.stats().windows, 5, "its 2-datagram tail");
    now = idle + Duration::from_millis(10);
    for i in 0..(MAX_SHORT + 1) {
        now += Duration::from_micros(100);
        tx.handle_send(now, b(), &datagram(i, 600));
        tx.handle_sent(now, b());
    }
    let idle = tx.poll_timeout().unwrap();
    tx.handle_timeout(idle);
    assert_eq!(tx.stats().windows, 5, "a lone small burst");
}

#[test]
fn blocks_fit_the_link() {
    let p = PathParams::for_link(44_000_000, Duration::from_millis(300));
    assert!(p.protect);
    assert_eq!(p.block, MAX_BLOCK);
    // 44 Mbit/s, 90 ms: 330 packets in flight, a block of a quarter: 82.
    let p = PathParams::for_link(44_000_000, Duration::from_millis(90));
    assert!(p.protect);
    assert_eq!(p.block, 82);
    assert!(p.blocks);
    // 6 Mbit/s, 300 ms: 150 packets in flight, blocks of 64 (half, up to SLOW_BLOCK; only a
    // transfer's tail pays for them); 90 ms: 45 in flight, blocks of 22.
    let p = PathParams::for_link(6_000_000, Duration::from_millis(300));
    assert!(p.protect && p.blocks && p.block == SLOW_BLOCK, "{p:?}");
    let p = PathParams::for_link(6_000_000, Duration::from_millis(90));
    assert!(p.protect && p.blocks && p.block == 22, "{p:?}");
    // A transfer's last blocks may take LONG_SHARE of the bandwidth-delay product each where
    // the receiver holds back for them, and the receiver holds for one RTT.
    for (rate, rtt, long) in [
        (44_000_000, 300, 660),
        (44_000_000, 90, 198),
        (6_000_000, 300, 90),
    ] {
        let p = PathParams::for_link(rate, Duration::from_millis(rtt));
        assert_eq!(
            (p.long_block, p.hold),
            (long, Duration::from_millis(rtt)),
            "{p:?}"
        );
        // For the last 0.9 of the bandwidth-delay product (1.5 of them are the tail).
        let ratio = p.long_tail as f64 / p.tail_bytes as f64;
        assert!((ratio - 0.6).abs() < 0.01, "{p:?}");
    }
    // A quarter of 6 Mbit/s × 90 ms (45 packets) is 11, half of it 22: 27 is still longer.
    assert_eq!(
        PathParams::for_link(6_000_000, Duration::from_millis(90)).long_block,
        27
    );
    // 1.5 Mbit/s, 90 ms: 11 packets in flight, a block of 5 is too small to be worth its
    // repair; so is anything slower. Short exchanges still are protected.
    for (rate, rtt) in [(1_500_000, 90), (1_000_000, 300)] {
        let p = PathParams::for_link(rate, Duration::from_millis(rtt));
        assert!(p.protect && !p.blocks, "{p:?}");
        assert_eq!((p.long_block, p.hold), (0, Duration::ZERO), "{p:?}");
    }
    // Faster than 1 Gbit/s: not protected.
    let p = PathParams::for_link(10_000_000_000, Duration::from_millis(300));
    assert!(!p.protect && !p.blocks);
}

/// Sends 1,200-byte datagrams numbered `seqs` to `b()`, one every 0.1 ms from `now`.
fn send_paced(tx: &mut Fec, now: &mut Instant, seqs: std::ops::Range<usize>) {
    for i in seqs {
        *now += Duration::from_micros(100);
        tx.handle_send(*now, b(), &datagram(i, 1200));
        tx.handle_sent(*now, b());
    }
}

#[test]
fn only_the_tail_of_a_long_transfer_is_repaired() {
    let (mut tx, _) = pair();
    let mut now = t0();
    // The application hands 1,000 datagrams' worth to the transport at once; the tail is
    // 200 datagrams' worth.
    tx.handle_written(now, b(), 1000 * 1200);
    send_paced(&mut tx, &mut now, 0..1000);
    let s = tx.stats();
    // Blocks close at 112, 224, … 896: those ending with more than 200 datagrams unsent
    // (the first seven) are let go; the eighth (ending at 896, 104 unsent) is repaired.
    assert_eq!((s.skipped, s.windows), (7, 1), "{s:?}");
    tx.handle_timeout(tx.poll_timeout().unwrap());
    assert_eq!(tx.stats().windows, 2, "and the burst's last window");
    assert!(tx.poll_transmit().is_some());
}

#[test]
fn a_pause_far_from_the_end_of_a_transfer_is_not_repaired() {
    let (mut tx, _) = pair();
    let mut now = t0();
    tx.handle_written(now, b(), 1000 * 1200);
    // 50 datagrams, then the sender waits (its window is full) for longer than the idle gap:
    // 950 datagrams' worth are still unsent, so the pause is no end of the transfer.
    send_paced(&mut tx, &mut now, 0..50);
    tx.handle_timeout(tx.poll_timeout().expect("a burst is open"));
    assert!(tx.poll_transmit().is_none());
    let s = tx.stats();
    assert_eq!((s.skipped, s.windows), (1, 0), "{s:?}");
    // The same pause once the rest went out (all but 50 datagrams' worth) is the end.
    send_paced(&mut tx, &mut now, 50..1000);
    tx.handle_timeout(tx.poll_timeout().expect("a burst is open"));
    assert!(tx.poll_transmit().is_some());
}

/// A path with probes, as `for_link` makes them (44 Mbit/s, 300 ms).
fn probed() -> PathParams {
    let p = PathParams::for_link(44_000_000, Duration::from_millis(300));
    assert!(p.probe_gap.is_some());
    p
}

/// Runs both sides' timers for `for_` from `now`, carrying a → b probes over a path that
/// loses every `lose_every`-th one (0: none) and b → a ones without loss; returns the end.
fn run_probes(
    tx: &mut Fec,
    rx: &mut Fec,
    mut now: Instant,
    for_: Duration,
    lose_every: u64,
) -> Instant {
    let end = now + for_;
    let mut n = 0u64;
    while now < end {
        now += Duration::from_micros(100);
        for (from, to, side) in [(a(), b(), 0), (b(), a(), 1)] {
            let (s, r) = if side == 0 {
                (&mut *tx, &mut *rx)
            } else {
                (&mut *rx, &mut *tx)
            };
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
            while let Some((dest, d)) = s.poll_transmit() {
                assert_eq!(dest, to);
                if side == 0 {
                    n += 1;
                    if lose_every != 0 && n % lose_every == 0 {
                        continue;
                    }
                }
                assert_eq!(r.handle_recv(now, from, &d), Received::Probe);
            }
        }
    }
    now
}

/// One small datagram each way, as a QUIC handshake starts the conversation.
fn hello(tx: &mut Fec, rx: &mut Fec, now: Instant) {
    say(tx, rx, a(), b(), now);
    say(rx, tx, b(), a(), now);
}

/// One small data datagram from `s` (at `from`) to `r` (at `to`).
fn say(s: &mut Fec, r: &mut Fec, from: SocketAddr, to: SocketAddr, now: Instant) {
    let h = s.handle_send(now, to, &[5; 40]);
    let mut w = h.to_vec();
    w.extend_from_slice(&[5; 40]);
    assert!(matches!(
        r.handle_recv(now, from, &w),
        Received::Data { .. }
    ));
    s.handle_timeout(now + Duration::from_millis(50));
    while s.poll_transmit().is_some() {}
}

#[test]
fn a_new_path_is_measured_by_probes_before_data_flows() {
    let t0 = t0();
    let mut reports = Vec::new();
    for lose_every in [0, 20] {
        let mut tx = Fec::new(Config::default());
        let mut rx = Fec::new(Config::default());
        tx.configure(b(), probed());
        rx.configure(a(), probed());
        assert_eq!(tx.poll_timeout(), None, "nothing heard, nothing probed");
        hello(&mut tx, &mut rx, t0);
        let now = run_probes(&mut tx, &mut rx, t0, Duration::from_secs(1), lose_every);
        let (ts, rs) = (tx.stats(), rx.stats());
        assert!(ts.probes_sent >= u64::from(PROBE_TRAIN), "{ts:?}");
        assert!(rs.probes_received > 250, "{rs:?}");
        // The train is over: an idle path gets a probe per IDLE_PROBE_GAP.
        let before = tx.stats().probes_sent;
        run_probes(&mut tx, &mut rx, now, Duration::from_secs(1), 0);
        let idle = tx.stats().probes_sent - before;
        assert!((9..=11).contains(&idle), "{idle}");
        let (to_b, _) = tx.path_loss(b());
        reports.push(to_b.expect("b reported the path"));
    }
    // The train's four epochs are reported as an upper bound: a quarter of a percent on a
    // clean path, above 5.5 % at 5 %.
    assert!(reports[0] < 0.003, "{reports:?}");
    assert!(reports[1] > 0.055, "{reports:?}");
    // …so the first block of a transfer on the lossy path gets repair for its loss.
    let t = t0 + Duration::from_secs(10);
    let mut tx = Fec::new(Config::default());
    let mut rx = Fec::new(Config::default());
    tx.configure(b(), probed());
    rx.configure(a(), probed());
    hello(&mut tx, &mut rx, t);
    run_probes(&mut tx, &mut rx, t, Duration::from_secs(1), 20);
    let mut now = t + Duration::from_secs(1);
    for _ in 0..MAX_BLOCK {
        now += Duration::from_micros(300);
        tx.handle_send(now, b(), &[3; 1200]);
    }
    tx.handle_sent(now, b());
    let repair = std::iter::from_fn(|| tx.poll_transmit()).count();
    assert!(repair >= 12, "{repair} shards for a block of {MAX_BLOCK}");
}

#[test]
fn probes_go_only_to_configured_peers_that_are_alive() {
    let t0 = t0();
    // An address that is not configured is never probed, whatever it sends.
    let mut tx = Fec::new(Config::default());
    let mut stranger = Fec::new(Config::default());
    let h = stranger.handle_send(t0, a(), &[5; 40]);
    let mut w = h.to_vec();
    w.extend_from_slice(&[5; 40]);
    tx.handle_recv(t0, b(), &w);
    assert_eq!(tx.poll_timeout(), None);
    // A configured peer that falls silent stops being probed after PROBE_ALIVE, and its
    // probes do not keep it alive.
    let mut tx = Fec::new(Config::default());
    let mut rx = Fec::new(Config::default());
    tx.configure(b(), probed());
    rx.configure(a(), probed());
    hello(&mut tx, &mut rx, t0);
    let now = run_probes(
        &mut tx,
        &mut rx,
        t0,
        PROBE_ALIVE + Duration::from_secs(1),
        0,
    );
    assert_eq!(tx.poll_timeout(), None, "{:?}", tx.stats());
    assert_eq!(rx.poll_timeout(), None);
    // Heard again: probing resumes.
    hello(&mut tx, &mut rx, now);
    assert!(tx.poll_timeout().is_some());
}

#[test]
fn a_restarted_peer_gets_a_new_train() {
    let t0 = t0();
    let mut tx = Fec::new(Config::default());
    let mut rx = Fec::new(Config::default());
    tx.configure(b(), probed());
    rx.configure(a(), probed());
    hello(&mut tx, &mut rx, t0);
    let now = run_probes(&mut tx, &mut rx, t0, Duration::from_secs(2), 0);
    let sent = rx.stats().probes_sent;
    // b restarts with another first sequence number; a sees the jump and trains b again.
    let mut rx = Fec::new(Config {
        first_seq: 0x8000_0000,
        ..Config::default()
    });
    rx.configure(a(), probed());
    hello(&mut tx, &mut rx, now);
    let before = tx.stats().probes_sent;
    run_probes(&mut tx, &mut rx, now, Duration::from_secs(1), 0);
    assert!(
        tx.stats().probes_sent - before >= u64::from(PROBE_TRAIN),
        "{sent} {:?}",
        tx.stats()
    );
    assert!(tx.path_loss(b()).0.is_some());
}

#[test]
fn probes_never_split_a_window() {
    let t0 = t0();
    let (mut tx, mut rx) = (Fec::new(Config::default()), Fec::new(Config::default()));
    tx.configure(b(), probed());
    rx.configure(a(), probed());
    hello(&mut tx, &mut rx, t0);
    // A burst with a timer firing in the middle of it: no probe while the window is open,
    // and the lost datagram is still restored from the window's repair.
    let mut now = t0 + Duration::from_millis(100);
    let mut restored = Vec::new();
    for i in 0..60usize {
        now += Duration::from_micros(300);
        let payload = datagram(i, 1300);
        let h = tx.handle_send(now, b(), &payload);
        tx.handle_timeout(now);
        let mut w = h.to_vec();
        w.extend_from_slice(&payload);
        if i != 59 {
            rx.handle_recv(now, a(), &w);
        }
        while let Some((_, d)) = tx.poll_transmit() {
            assert_ne!(Kind::of(d[0]), Some(Kind::Probe), "probe at {i}");
        }
    }
    let end = tx.poll_timeout().unwrap();
    tx.handle_timeout(end);
    while let Some((_, d)) = tx.poll_transmit() {
        if rx.handle_recv(end, a(), &d) == Received::Repair {
            while let Some((_, r)) = rx.poll_recovered() {
                restored.push(r);
            }
        }
    }
    assert_eq!(restored, vec![datagram(59, 1300)]);
}

#[test]
fn a_slow_link_repairs_a_block_before_the_end_by_what_a_shard_costs() {
    // 1.5 Mbit/s, 300 ms: blocks of 18, a datagram takes 8 ms. With the 1 % prior, the last
    // block gets the target's 3 shards; one with 20 kB still to send after it gets one (two
    // more would delay the rest by 16 ms to save a 0.34 s stall one time in 60).
    let slow = PathParams::for_link(1_500_000, Duration::from_millis(300));
    assert!(slow.blocks);
    let shards = |unsent_after: u64| {
        let mut tx = Fec::new(Config::default());
        tx.configure(b(), slow);
        let now = t0();
        tx.handle_written(now, b(), slow.block as u64 * 1400 + unsent_after);
        for _ in 0..slow.block {
            tx.handle_send(now, b(), &[7; 1400]);
        }
        tx.handle_sent(now, b());
        std::iter::from_fn(|| tx.poll_transmit()).count()
    };
    assert_eq!(shards(0), 3);
    assert_eq!(shards(20_000), 1);
    // Further from the end the rest covers the retransmission: no repair.
    assert_eq!(shards(80_000), 0);
}

/// Path parameters with long blocks of up to 600 datagrams for the last 600 full datagrams'
/// worth of a transfer, and a hold of 100 ms.
fn holding() -> PathParams {
    PathParams {
        long_block: 600,
        long_tail: 600 * 1500,
        hold: Duration::from_millis(100),
        ..params()
    }
}

/// A sender towards `b()` on [`holding`] paths whose receiver's probe said it holds back.
fn holding_tx() -> Fec {
    let mut tx = Fec::new(Config::default());
    tx.configure(b(), holding());
    probe_from(&mut tx, b(), t0(), true);
    tx
}

/// A probe from `from` saying whether its sender holds back for long blocks.
fn probe_from(to: &mut Fec, from: SocketAddr, now: Instant, holds: bool) {
    let mut d = wire::Header {
        kind: Kind::Probe,
        seq: 0,
        loss: wire::LossReport::UNKNOWN,
    }
    .emit()
    .to_vec();
    if holds {
        d.push(PROBE_HOLDS);
    }
    assert_eq!(to.handle_recv(now, from, &d), Received::Probe);
}

/// A data datagram of `kind` numbered `seq`, as a sender puts it on the wire: its header and
/// 1,000 bytes that say which one it is.
fn numbered(kind: Kind, seq: u32) -> Vec<u8> {
    let mut d = wire::Header {
        kind,
        seq,
        loss: wire::LossReport::UNKNOWN,
    }
    .emit()
    .to_vec();
    d.extend_from_slice(&datagram(seq as usize, 1000));
    d
}

/// What a receiver handed on, in order: each datagram's index (its first four bytes) and
/// whether it was restored from repair (it was lost).
#[derive(Default)]
struct Handed {
    order: Vec<(usize, bool)>,
    lost: Vec<usize>,
}

impl Handed {
    fn take(&mut self, rx: &mut Fec, sizes: &[usize]) {
        while let Some((_, d)) = rx.poll_recovered() {
            let i = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize;
            assert_eq!(d, datagram(i, sizes[i]), "exactly what was sent");
            self.order.push((i, self.lost.contains(&i)));
        }
    }

    fn direct(&mut self, i: usize) {
        self.order.push((i, false));
    }

    /// Whether QUIC takes every datagram in this order: none comes HOLD_REACH or more
    /// behind one handed on before it (its duplicate window is 128 packets).
    fn all_within_reach(&self) -> Result<(), String> {
        let mut newest = None::<usize>;
        for (i, _) in &self.order {
            if let Some(n) = newest {
                if n >= i + HOLD_REACH as usize {
                    return Err(format!("{i} handed on after {n}"));
                }
            }
            newest = newest.max(Some(*i));
        }
        Ok(())
    }
}

/// Sends `sizes` from tx to rx, one every 0.1 ms after `now`, losing `lose` and the repair
/// datagrams numbered `lose_repair` (counted over the whole transfer), then lets the burst
/// end and rx's holds run out. Returns the kinds tx sent and what rx handed on.
fn transfer(
    tx: &mut Fec,
    rx: &mut Fec,
    now: Instant,
    sizes: &[usize],
    lose: &[usize],
    lose_repair: &[usize],
) -> (Vec<Kind>, Handed) {
    transfer_idle(tx, rx, now, sizes, lose, lose_repair, None)
}

/// [`transfer`], the writer saying it is idle ([`Fec::handle_writer_idle`]) before datagram
/// `idle_at` is sent (after the last one: `sizes.len()`).
fn transfer_idle(
    tx: &mut Fec,
    rx: &mut Fec,
    mut now: Instant,
    sizes: &[usize],
    lose: &[usize],
    lose_repair: &[usize],
    idle_at: Option<usize>,
) -> (Vec<Kind>, Handed) {
    let total: usize = sizes.iter().sum();
    tx.handle_written(now, b(), total as u64);
    let mut kinds = Vec::new();
    let mut handed = Handed {
        lost: lose.to_vec(),
        ..Handed::default()
    };
    let mut repairs = 0;
    let mut deliver_repair = |tx: &mut Fec, rx: &mut Fec, now: Instant, handed: &mut Handed| {
        while let Some((_, d)) = tx.poll_transmit() {
            if !lose_repair.contains(&repairs) {
                assert_eq!(rx.handle_recv(now, a(), &d), Received::Repair);
            }
            repairs += 1;
        }
        handed.take(rx, sizes);
    };
    for (i, &len) in sizes.iter().enumerate() {
        now += Duration::from_micros(100);
        if idle_at == Some(i) {
            tx.handle_writer_idle(now, b());
        }
        let payload = datagram(i, len);
        let h = tx.handle_send(now, b(), &payload);
        kinds.push(Kind::of(h[0]).unwrap());
        tx.handle_sent(now, b());
        if !lose.contains(&i) {
            let mut wire = h.to_vec();
            wire.extend_from_slice(&payload);
            match rx.handle_recv(now, a(), &wire) {
                Received::Data { offset } => {
                    assert_eq!(wire[offset..], payload[..]);
                    handed.direct(i);
                }
                Received::Held => {}
                other => panic!("{other:?}"),
            }
            handed.take(rx, sizes);
        }
        deliver_repair(tx, rx, now, &mut handed);
    }
    if idle_at == Some(sizes.len()) {
        tx.handle_writer_idle(now, b());
    }
    // The burst's end, then every hold's.
    for _ in 0..sizes.len() + 2 {
        let Some(t) = [tx.poll_timeout(), rx.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
        else {
            break;
        };
        now = now.max(t);
        tx.handle_timeout(now);
        rx.handle_timeout(now);
        deliver_repair(tx, rx, now, &mut handed);
    }
    (kinds, handed)
}

#[test]
fn a_long_last_block_is_restored_while_the_receiver_holds_back_what_follows() {
    let mut tx = Fec::new(Config::default());
    let mut rx = Fec::new(Config::default());
    tx.configure(b(), holding());
    rx.configure(a(), holding());
    // The receiver's probes say it holds back: a transfer of 500 datagrams, all of it
    // within one long block, goes out as one window of Held datagrams.
    probe_from(&mut tx, b(), t0(), true);
    let sizes: Vec<usize> = (0..500).map(|i| 1100 + (i * 17) % 300).collect();
    // Losses early and late in the block: each restored datagram is handed on in its place
    // among the held ones.
    let lose = [5, 6, 300, 499];
    let (kinds, handed) = transfer(&mut tx, &mut rx, t0(), &sizes, &lose, &[]);
    assert!(kinds.iter().all(|k| *k == Kind::Held), "{kinds:?}");
    let (ts, rs) = (tx.stats(), rx.stats());
    assert_eq!((ts.windows, ts.skipped), (1, 0), "one block: {ts:?}");
    assert_eq!(
        (rs.recovered, rs.unrecoverable, rs.holes_given_up),
        (4, 0, 0),
        "{rs:?}"
    );
    // Everything arrived, once, and each lost datagram was handed on restored, before any
    // datagram HOLD_REACH ahead of it: datagrams from 5 + HOLD_REACH on were held back.
    let mut seen: Vec<usize> = handed.order.iter().map(|(i, _)| *i).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..500).collect::<Vec<_>>());
    let restored: Vec<usize> = handed
        .order
        .iter()
        .filter(|(_, r)| *r)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(restored, lose);
    handed.all_within_reach().unwrap();
    assert_eq!(rs.held, 500 - 5 - HOLD_REACH as u64 - 2, "{rs:?}");
    let first_held = handed.order.iter().position(|(i, _)| *i == 5).unwrap();
    assert_eq!(handed.order[first_held - 1].0, 4 + HOLD_REACH as usize);

    // The same transfer to a receiver that does not hold back: blocks of 112, Kept (the
    // first two of them let go: more than the tail was still unsent).
    let mut tx = Fec::new(Config::default());
    let mut rx = Fec::new(Config::default());
    tx.configure(b(), holding());
    rx.configure(a(), params());
    probe_from(&mut tx, b(), t0(), false);
    let (kinds, _) = transfer(&mut tx, &mut rx, t0(), &sizes, &[], &[]);
    assert!(kinds.iter().all(|k| *k == Kind::Kept));
    let ts = tx.stats();
    assert_eq!((ts.windows, ts.skipped), (3, 2), "{ts:?}");
}

#[test]
fn a_hole_no_repair_fills_is_given_up() {
    let sizes = vec![1200; 400];
    // Every repair datagram lost: what waited behind the first hole is released when its
    // hold ends, and nothing is restored.
    let mut tx = Fec::new(Config::default());
    let mut rx = Fec::new(Config::default());
    tx.configure(b(), holding());
    rx.configure(a(), holding());
    probe_from(&mut tx, b(), t0(), true);
    let all_repair: Vec<usize> = (0..256).collect();
    let (_, handed) = transfer(&mut tx, &mut rx, t0(), &sizes, &[10, 200], &all_repair);
    let rs = rx.stats();
    assert_eq!((rs.recovered, rs.holes_given_up), (0, 2), "{rs:?}");
    assert_eq!(
        handed.order.len(),
        398,
        "everything that arrived was handed on"
    );
    assert_eq!(rx.poll_timeout(), None, "nothing waits");

    // More losses than repair: the holes are given up when their hold ends.
    let mut tx = Fec::new(Config::default());
    let mut rx = Fec::new(Config::default());
    tx.configure(b(), holding());
    rx.configure(a(), holding());
    probe_from(&mut tx, b(), t0(), true);
    let lose: Vec<usize> = (20..80).collect();
    let (_, handed) = transfer(&mut tx, &mut rx, t0(), &sizes, &lose, &[]);
    let rs = rx.stats();
    assert_eq!((rs.recovered, rs.holes_given_up), (0, 60), "{rs:?}");
    assert_eq!(handed.order.len(), 340);
}

#[test]
fn the_datagrams_a_receiver_holds_are_bounded_and_released_by_a_later_window() {
    // A receiver holding for a hole gives it up when a later window's repair comes without
    // the hole's (its repair was lost), and never holds more than a window's worth.
    let mut rx = Fec::new(Config {
        max_window: 100,
        ..Config::default()
    });
    rx.configure(a(), holding());
    let mut now = t0();
    let send =
        |rx: &mut Fec, now: Instant, seq: u32| rx.handle_recv(now, a(), &numbered(Kind::Held, seq));
    let mut released = 0;
    for seq in (0..400).filter(|s| *s != 3) {
        now += Duration::from_micros(10);
        let r = send(&mut rx, now, seq);
        // The 151st goes behind the 150 released (they are taken only after it).
        let want_held = (3 + HOLD_REACH..=3 + HOLD_REACH + 150).contains(&seq);
        assert_eq!(r == Received::Held, want_held, "{seq}: {r:?}");
        released += std::iter::from_fn(|| rx.poll_recovered()).count();
    }
    // 150 (max_window × 1.5) held, then the hole was given up and all of them released.
    let rs = rx.stats();
    assert_eq!(
        (rs.held, rs.holes_given_up, released),
        (150, 1, 151),
        "{rs:?}"
    );

    // A hole, then a repair for a later window: the hole is given up, the held released.
    let mut rx = Fec::new(Config::default());
    rx.configure(a(), holding());
    for seq in (1000..1200).filter(|s| *s != 1010) {
        send(&mut rx, now, seq);
    }
    assert_eq!(rx.stats().held, 200 - 1 - 10 - HOLD_REACH as u64 + 1);
    let rh = wire::RepairHeader {
        first: 1200,
        count: 10,
        recovery: 1,
        index: 0,
    };
    let mut d = wire::Header {
        kind: Kind::Repair,
        seq: 1210,
        loss: wire::LossReport::UNKNOWN,
    }
    .emit()
    .to_vec();
    d.extend_from_slice(&rh.emit());
    d.extend_from_slice(&[0; 1002]);
    assert_eq!(rx.handle_recv(now, a(), &d), Received::Repair);
    assert_eq!(rx.stats().holes_given_up, 1);
    assert_eq!(
        std::iter::from_fn(|| rx.poll_recovered()).count() as u64,
        rx.stats().held
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Whatever is lost (data and repair), and wherever the writer says it is idle,
    /// everything that arrives is handed on exactly once and unchanged, restored datagrams
    /// too, and nothing waits once the holds have run out.
    #[test]
    fn holding_back_never_loses_or_repeats_a_datagram(
        n in 1usize..700,
        lose in proptest::collection::vec(0usize..700, 0..40),
        lose_repair in proptest::collection::vec(0usize..64, 0..8),
        holds in any::<bool>(),
        idle_at in proptest::option::of(0usize..701),
    ) {
        // A receiver cannot tell the very first datagram it would hear from a sender is
        // missing (on a tunnel, the handshake always comes first).
        let lose: Vec<usize> = lose.into_iter().filter(|i| *i != 0).collect();
        let mut tx = Fec::new(Config::default());
        let mut rx = Fec::new(Config::default());
        tx.configure(b(), holding());
        rx.configure(a(), holding());
        probe_from(&mut tx, b(), t0(), holds);
        let sizes: Vec<usize> = (0..n).map(|i| 100 + (i * 37) % 1300).collect();
        // The writer may also say it is idle, anywhere in the transfer or after it.
        let idle_at = idle_at.map(|i| i.min(n));
        let (_, handed) =
            transfer_idle(&mut tx, &mut rx, t0(), &sizes, &lose, &lose_repair, idle_at);
        let mut seen: Vec<usize> = handed.order.iter().map(|(i, _)| *i).collect();
        seen.sort_unstable();
        let mut dedup = seen.clone();
        dedup.dedup();
        prop_assert_eq!(&seen, &dedup, "handed on twice");
        let arrived = (0..n).filter(|i| !lose.contains(i));
        prop_assert!(arrived.into_iter().all(|i| seen.binary_search(&i).is_ok()));
        prop_assert_eq!(rx.poll_timeout(), None);
        if rx.stats().holes_given_up == 0 {
            prop_assert_eq!(handed.all_within_reach(), Ok(()));
        }
    }
}

#[test]
fn a_datagram_arriving_before_the_restored_ones_are_taken_goes_behind_them() {
    // The shell reads a batch: a repair that restores a datagram, then a newer datagram. The
    // newer one must not reach QUIC first: behind a long block's restored datagram by
    // hundreds, it would make QUIC drop the restored one as too old.
    let (mut tx, mut rx) = pair();
    let mut now = t0();
    for i in 0..50 {
        now += Duration::from_micros(100);
        let payload = datagram(i, 1000);
        let mut wire = tx.handle_send(now, b(), &payload).to_vec();
        tx.handle_sent(now, b());
        wire.extend_from_slice(&payload);
        if i != 3 {
            assert!(matches!(
                rx.handle_recv(now, a(), &wire),
                Received::Data { .. }
            ));
        }
    }
    now += params().idle_gap;
    tx.handle_timeout(now);
    while let Some((_, d)) = tx.poll_transmit() {
        assert_eq!(rx.handle_recv(now, a(), &d), Received::Repair);
    }
    let payload = datagram(50, 1000);
    let mut wire = tx.handle_send(now, b(), &payload).to_vec();
    wire.extend_from_slice(&payload);
    assert_eq!(rx.handle_recv(now, a(), &wire), Received::Held);
    let out: Vec<Vec<u8>> = std::iter::from_fn(|| rx.poll_recovered())
        .map(|(_, d)| d)
        .collect();
    assert_eq!(out, vec![datagram(3, 1000), payload.clone()]);
    // Once they are taken, datagrams pass directly again.
    let mut wire = tx.handle_send(now, b(), &datagram(51, 1000)).to_vec();
    wire.extend_from_slice(&datagram(51, 1000));
    assert!(matches!(
        rx.handle_recv(now, a(), &wire),
        Received::Data { .. }
    ));
}

#[test]
fn a_long_window_of_acknowledgements_closes_at_a_block_with_its_repair() {
    // The application's last request opens a long window (something is unsent), and what
    // follows is acknowledgements of the answer: the window closes at a block, repaired (the
    // peer may be holding back for it), and the next one is no long block.
    let mut tx = Fec::new(Config::default());
    tx.configure(b(), holding());
    probe_from(&mut tx, b(), t0(), true);
    let mut now = t0();
    tx.handle_written(now, b(), 300);
    let mut kinds = Vec::new();
    for i in 0..200 {
        now += Duration::from_micros(100);
        let len = if i == 0 { 340 } else { 60 };
        let h = tx.handle_send(now, b(), &datagram(i, len));
        tx.handle_sent(now, b());
        kinds.push(Kind::of(h[0]).unwrap());
    }
    assert!(
        kinds[..MAX_BLOCK].iter().all(|k| *k == Kind::Held),
        "{kinds:?}"
    );
    assert!(
        kinds[MAX_BLOCK..].iter().all(|k| *k == Kind::Kept),
        "{kinds:?}"
    );
    let ts = tx.stats();
    assert_eq!(ts.windows, 1, "{ts:?}");
    assert!(ts.repair_sent >= 1, "{ts:?}");
}

#[test]
fn a_datagram_of_a_window_that_is_no_long_block_gives_the_holes_up() {
    let mut rx = Fec::new(Config::default());
    rx.configure(a(), holding());
    let now = t0();
    let send = |rx: &mut Fec, kind: Kind, seq: u32| rx.handle_recv(now, a(), &numbered(kind, seq));
    for seq in (0..150).filter(|s| *s != 7) {
        send(&mut rx, Kind::Held, seq);
    }
    assert_eq!(rx.stats().held, 150 - 7 - u64::from(HOLD_REACH));
    // The long block is over (its repair never came): the holes are given up, what was held
    // is released, and the new datagram goes behind it.
    assert_eq!(send(&mut rx, Kind::Kept, 150), Received::Held);
    assert_eq!(rx.stats().holes_given_up, 1);
    let out: Vec<usize> = std::iter::from_fn(|| rx.poll_recovered())
        .map(|(_, d)| u32::from_be_bytes(d[..4].try_into().unwrap()) as usize)
        .collect();
    assert_eq!(out, (7 + HOLD_REACH as usize..=150).collect::<Vec<_>>());
    assert!(matches!(
        send(&mut rx, Kind::Kept, 151),
        Received::Data { .. }
    ));
}

#[test]
fn a_hole_older_than_the_hold_holds_nothing_back() {
    // A hole nothing was held behind (the transfer ended within reach of it) must not make
    // a datagram long after wait for a timer.
    let mut rx = Fec::new(Config::default());
    rx.configure(a(), holding());
    let now = t0();
    for seq in (0..50).filter(|s| *s != 7) {
        assert!(matches!(
            rx.handle_recv(now, a(), &numbered(Kind::Held, seq)),
            Received::Data { .. }
        ));
    }
    assert_eq!(rx.poll_timeout(), None, "nothing is held");
    let later = now + holding().hold;
    let r = rx.handle_recv(later, a(), &numbered(Kind::Held, 7 + HOLD_REACH + 1));
    assert!(matches!(r, Received::Data { .. }), "{r:?}");
    assert_eq!(rx.stats().holes_given_up, 1);
}

/// Sends `n` 1,200-byte datagrams to `b()`, one every 0.1 ms from `now`, the application
/// writing `chunk` more bytes every `every` datagrams; returns the kinds sent.
fn send_writing(tx: &mut Fec, now: &mut Instant, n: usize, chunk: u64, every: usize) -> Vec<Kind> {
    (0..n)
        .map(|i| {
            *now += Duration::from_micros(100);
            if i % every == 0 {
                tx.handle_written(*now, b(), chunk);
            }
            let h = tx.handle_send(*now, b(), &datagram(i, 1200));
            tx.handle_sent(*now, b());
            Kind::of(h[0]).unwrap()
        })
        .collect()
}

#[test]
fn long_blocks_wait_for_the_application_to_stop_writing() {
    // Everything written at once: the transfer's last 600 datagrams' worth goes in long
    // blocks (the writer has been quiet for far longer than RTT / 8 by then).
    let mut tx = holding_tx();
    let mut now = t0();
    let kinds = send_writing(&mut tx, &mut now, 1500, 1500 * 1200, 1500);
    let first_held = kinds
        .iter()
        .position(|k| *k == Kind::Held)
        .expect("long blocks");
    // (Windows open at block boundaries: the first with at most 600 × 1,500 bytes unsent.)
    assert_eq!(first_held, 7 * MAX_BLOCK, "{first_held}");
    assert!(kinds[first_held..].iter().all(|k| *k == Kind::Held));
    // A writer the sender keeps up with (a little unsent all along): no long blocks after
    // the first window, which closes as soon as more than the long tail is unsent.
    let mut tx = holding_tx();
    let mut now = t0();
    let kinds = send_writing(&mut tx, &mut now, 1500, 20 * 1200, 20);
    let held = kinds.iter().filter(|k| **k == Kind::Held).count();
    assert!(held <= 600, "{held}");
    assert!(kinds[600..].iter().all(|k| *k == Kind::Kept), "{kinds:?}");
    // The first window was long, and closed at once when the writer raised the unsent
    // bytes past the long tail.
    let mut tx = holding_tx();
    let mut now = t0();
    tx.handle_written(now, b(), 2400);
    let mut kinds = send_writing(&mut tx, &mut now, 1, 0, 1);
    tx.handle_written(now, b(), 1000 * 1200);
    kinds.extend(send_writing(&mut tx, &mut now, 2, 0, 1));
    assert_eq!(kinds, [Kind::Held, Kind::Held, Kind::Kept]);
    assert_eq!(tx.stats().windows, 1, "{:?}", tx.stats());
}

#[test]
fn a_long_window_closes_at_a_block_once_the_transfer_outgrew_the_long_tail() {
    // A large transfer's start: the writer is ahead of the link by only a few datagrams when
    // the first goes out, and then writes 6 datagrams' worth for each one sent. The long
    // tail (600 × 1,500 bytes written since the window opened) is passed at the 127th.
    let mut tx = holding_tx();
    let mut now = t0();
    tx.handle_written(now, b(), 4 * 1200);
    let kinds = send_writing(&mut tx, &mut now, 400, 6 * 1200, 1);
    let held = kinds.iter().filter(|k| **k == Kind::Held).count();
    assert_eq!(held, 127, "{kinds:?}");
    assert!(kinds[held..].iter().all(|k| *k == Kind::Kept), "{kinds:?}");
    // The long window went out with its repair at its last datagram.
    assert_eq!(tx.stats().windows, 1, "{:?}", tx.stats());
    assert!(tx.stats().repair_sent > 0);

    // A transfer smaller than the long tail keeps its window long to the end, however fast
    // it is written: 400 datagrams, repaired at the last once the writer said it is idle.
    let mut tx = holding_tx();
    let mut now = t0();
    tx.handle_written(now, b(), 4 * 1200);
    let mut kinds = send_writing(&mut tx, &mut now, 99, 4 * 1200, 1);
    tx.handle_writer_idle(now, b());
    kinds.extend(send_writing(&mut tx, &mut now, 300, 0, 1));
    assert_eq!(tx.stats().windows, 0, "{:?}", tx.stats());
    kinds.extend(send_writing(&mut tx, &mut now, 1, 0, 1));
    assert!(kinds.iter().all(|k| *k == Kind::Held), "{kinds:?}");
    assert_eq!(tx.stats().windows, 1, "{:?}", tx.stats());
}

#[test]
fn a_transfer_after_a_short_exchange_opens_a_long_block_of_its_own() {
    let mut tx = holding_tx();
    let mut rx = Fec::new(Config::default());
    rx.configure(a(), holding());
    let mut now = t0();
    // The acknowledgements of a request (nothing written): a short exchange's window.
    let acks: Vec<Vec<u8>> = (0..2).map(|i| datagram(i, 40)).collect();
    for d in &acks {
        now += Duration::from_micros(100);
        let h = tx.handle_send(now, b(), d);
        assert_eq!(Kind::of(h[0]), Some(Kind::Kept));
        tx.handle_sent(now, b());
    }
    // The answer comes 2 ms later, within the exchange gap: 300 datagrams, one long block.
    now += Duration::from_millis(2);
    tx.handle_written(now, b(), 300 * 1200);
    let kinds = send_writing(&mut tx, &mut now, 300, 0, 1);
    let repair: Vec<_> = std::iter::from_fn(|| tx.poll_transmit()).collect();
    assert!(kinds.iter().all(|k| *k == Kind::Held), "{kinds:?}");
    // The exchange's window was closed and repaired when the answer's first datagram went
    // out: its repair restores a lost acknowledgement.
    assert_eq!(tx.stats().windows, 1, "{:?}", tx.stats());
    let ack = {
        let mut w = wire::Header {
            kind: Kind::Kept,
            seq: 1,
            loss: wire::LossReport::UNKNOWN,
        }
        .emit()
        .to_vec();
        w.extend_from_slice(&acks[1]);
        w
    };
    assert!(matches!(
        rx.handle_recv(now, a(), &ack),
        Received::Data { .. }
    ));
    for (_, d) in &repair {
        assert_eq!(rx.handle_recv(now, a(), d), Received::Repair);
    }
    let restored: Vec<Vec<u8>> = std::iter::from_fn(|| rx.poll_recovered())
        .map(|(_, d)| d)
        .collect();
    assert_eq!(restored, [acks[0].clone()]);
}

#[test]
fn a_long_block_is_repaired_at_its_last_datagram_once_the_writer_is_idle() {
    let run = |idle: bool| {
        let mut tx = holding_tx();
        let mut now = t0();
        tx.handle_written(now, b(), 200 * 1200);
        if idle {
            // The writer flushed it all and waits: said before the link has sent it.
            tx.handle_writer_idle(now, b());
        }
        let kinds = send_writing(&mut tx, &mut now, 200, 0, 1);
        assert!(kinds.iter().all(|k| *k == Kind::Held));
        (
            tx.poll_transmit().is_some(),
            tx.poll_timeout().map(|t| t - now),
        )
    };
    // Idle: the repair is queued as the last datagram goes out.
    assert!(run(true).0);
    // Not said: it waits for the idle gap.
    assert_eq!(run(false), (false, Some(holding().idle_gap)));
    // Said once everything already went out: due at once. A write clears it.
    let mut tx = holding_tx();
    let mut now = t0();
    tx.handle_written(now, b(), 50 * 1200);
    send_writing(&mut tx, &mut now, 50, 0, 1);
    tx.handle_writer_idle(now, b());
    assert_eq!(tx.poll_timeout(), Some(now));
    tx.handle_written(now, b(), 1200);
    assert_eq!(tx.poll_timeout(), Some(now + holding().idle_gap));
}
