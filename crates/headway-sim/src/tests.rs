use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

use headway_core::{Probability, Rate};
use headway_link::Loss;

use super::*;

/// The toy endpoints of these tests, as one type so one network can hold them all.
#[derive(Debug)]
enum Toy {
    Pinger(Pinger),
    Echo(Echo),
    Sender(Sender),
    Receiver(Receiver),
}

/// Sends a numbered ping of `size` bytes every `interval` and measures each reply's RTT.
#[derive(Debug)]
struct Pinger {
    interval: Duration,
    size: usize,
    next_send: Instant,
    next_seq: u64,
    outbox: Option<Bytes>,
    sent_at: HashMap<u64, Instant>,
    rtts: Vec<(u64, Duration)>,
}

/// Echoes every datagram back on the port it came from.
#[derive(Debug, Default)]
struct Echo {
    outbox: VecDeque<(Port, Bytes)>,
    received: u64,
}

/// Stop-and-wait: sends numbered segments one at a time, retransmitting after `rto`.
#[derive(Debug)]
struct Sender {
    size: usize,
    rto: Duration,
    seq: u64,
    deadline: Option<Instant>,
    outbox: Option<Bytes>,
    transmissions: u64,
    acks: u64,
}

/// Acknowledges every segment and records the in-order ones with their arrival time.
#[derive(Debug, Default)]
struct Receiver {
    received: u64,
    delivered: Vec<(u64, Instant)>,
    outbox: VecDeque<Bytes>,
}

fn seq_of(data: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[..8]);
    u64::from_be_bytes(b)
}

fn datagram(seq: u64, size: usize) -> Bytes {
    let mut v = vec![0u8; size.max(8)];
    v[..8].copy_from_slice(&seq.to_be_bytes());
    Bytes::from(v)
}

impl Endpoint for Toy {
    fn handle_datagram(&mut self, now: Instant, port: Port, data: Bytes) {
        match self {
            Toy::Pinger(p) => {
                let seq = seq_of(&data);
                if let Some(at) = p.sent_at.remove(&seq) {
                    p.rtts.push((seq, now - at));
                }
            }
            Toy::Echo(e) => {
                e.received += 1;
                e.outbox.push_back((port, data));
            }
            Toy::Sender(s) => {
                s.acks += 1;
                if seq_of(&data) == s.seq {
                    s.seq += 1;
                    s.outbox = Some(datagram(s.seq, s.size));
                }
            }
            Toy::Receiver(r) => {
                r.received += 1;
                let seq = seq_of(&data);
                if seq == r.delivered.len() as u64 {
                    r.delivered.push((seq, now));
                }
                r.outbox.push_back(datagram(seq, 8));
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self {
            Toy::Pinger(p) => {
                p.outbox = Some(datagram(p.next_seq, p.size));
                p.sent_at.insert(p.next_seq, now);
                p.next_seq += 1;
                p.next_send += p.interval;
            }
            Toy::Sender(s) => {
                // Retransmit the outstanding segment.
                s.outbox = Some(datagram(s.seq, s.size));
            }
            Toy::Echo(_) | Toy::Receiver(_) => {}
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let port = Port(0);
        match self {
            Toy::Pinger(p) => p.outbox.take().map(|data| Transmit { port, data }),
            Toy::Echo(e) => e
                .outbox
                .pop_front()
                .map(|(port, data)| Transmit { port, data }),
            Toy::Sender(s) => {
                let data = s.outbox.take()?;
                s.transmissions += 1;
                s.deadline = Some(now + s.rto);
                Some(Transmit { port, data })
            }
            Toy::Receiver(r) => r.outbox.pop_front().map(|data| Transmit { port, data }),
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Toy::Pinger(p) => Some(p.next_send),
            Toy::Sender(s) => s.deadline,
            Toy::Echo(_) | Toy::Receiver(_) => None,
        }
    }
}

impl Toy {
    fn pinger(&self) -> &Pinger {
        match self {
            Toy::Pinger(p) => p,
            other => panic!("not a pinger: {other:?}"),
        }
    }
    fn echo(&self) -> &Echo {
        match self {
            Toy::Echo(e) => e,
            other => panic!("not an echo: {other:?}"),
        }
    }
    fn sender(&self) -> &Sender {
        match self {
            Toy::Sender(s) => s,
            other => panic!("not a sender: {other:?}"),
        }
    }
    fn receiver(&self) -> &Receiver {
        match self {
            Toy::Receiver(r) => r,
            other => panic!("not a receiver: {other:?}"),
        }
    }
}

/// 150 ms one way (300 ms RTT), 1 Mbit/s, with the given loss.
fn wan(loss: f64) -> Params {
    Params {
        rate: Some(Rate::from_mbps(1)),
        delay: Duration::from_millis(150),
        loss: Loss::Bernoulli(Probability::new(loss).expect("probability")),
        ..Params::default()
    }
}

fn ping_network(seed: u64, params: Params) -> (Network<Toy>, NodeId, NodeId, Connection) {
    let mut net = Network::new(seed);
    let now = net.now();
    let a = net.add_node(Toy::Pinger(Pinger {
        interval: Duration::from_secs(1),
        size: 100,
        next_send: now,
        next_seq: 0,
        outbox: None,
        sent_at: HashMap::new(),
        rtts: Vec::new(),
    }));
    let b = net.add_node(Toy::Echo(Echo::default()));
    let c = net.connect(a, b, params.clone(), params);
    (net, a, b, c)
}

#[test]
fn ping_rtt_is_delay_plus_serialisation_exactly() {
    let (mut net, a, b, c) = ping_network(1, wan(0.05));
    net.run_for(Duration::from_secs(60));
    let pinger = net.node(a).pinger();
    // 100 + 42 bytes at 1 Mbit/s = 1.136 ms per direction.
    let expected = Duration::from_millis(300) + 2 * Duration::from_micros(1136);
    assert!(!pinger.rtts.is_empty());
    for &(seq, rtt) in &pinger.rtts {
        assert_eq!(rtt, expected, "ping {seq}");
    }
    // Pings at 0, 1, …, 60 s; the last one is still in flight at 60 s.
    assert_eq!(pinger.next_seq, 61);
    let (ab, ba) = (net.link(c.a_to_b).stats(), net.link(c.b_to_a).stats());
    assert_eq!(ab.received, 61);
    assert_eq!(net.node(b).echo().received, ab.passed);
    assert_eq!(ba.received, ab.passed);
    assert_eq!(pinger.rtts.len() as u64, ba.passed);
    assert_eq!(
        ab.passed + ab.lost + 1,
        ab.received,
        "one ping still in flight"
    );
    assert!(
        ab.lost + ba.lost > 0,
        "5 % loss over 120 frames lost nothing"
    );
    assert_eq!(net.stats().delivered, ab.passed + ba.passed);
    assert_eq!(net.now() - net.clock().epoch(), Duration::from_secs(60));
}

#[test]
fn zero_delay_links_deliver_within_the_same_instant() {
    let (mut net, a, _, _) = ping_network(1, Params::default());
    let start = net.now();
    net.run_until(start);
    assert_eq!(net.now(), start);
    assert_eq!(
        net.node(a).pinger().rtts,
        vec![(0, Duration::ZERO)],
        "the first ping and its echo happen at the start"
    );
    assert!(net.step());
    assert_eq!(net.now() - start, Duration::from_secs(1));
    assert_eq!(net.node(a).pinger().rtts.len(), 2);
    net.run_for(Duration::from_millis(2500));
    assert_eq!(net.node(a).pinger().rtts.len(), 4);
}

/// Runs stop-and-wait for `secs` virtual seconds; returns the network and its ids.
fn stop_and_wait(seed: u64, loss: f64, secs: u64) -> (Network<Toy>, NodeId, NodeId, Connection) {
    let mut net = Network::new(seed);
    let a = net.add_node(Toy::Sender(Sender {
        size: 1000,
        rto: Duration::from_secs(1),
        seq: 0,
        deadline: None,
        outbox: Some(datagram(0, 1000)),
        transmissions: 0,
        acks: 0,
    }));
    let b = net.add_node(Toy::Receiver(Receiver::default()));
    let c = net.connect(a, b, wan(loss), wan(loss));
    net.run_for(Duration::from_secs(secs));
    (net, a, b, c)
}

#[test]
fn stop_and_wait_over_a_lossy_wan_is_consistent_with_link_stats() {
    let (net, a, b, c) = stop_and_wait(7, 0.05, 60);
    let (s, r) = (net.node(a).sender(), net.node(b).receiver());
    let (ab, ba) = (net.link(c.a_to_b).stats(), net.link(c.b_to_a).stats());
    assert_eq!(s.transmissions, ab.received);
    assert_eq!(r.received, ab.passed);
    assert_eq!(ba.received, r.received);
    assert_eq!(s.acks, ba.passed);
    assert!(ab.lost > 0 && ba.lost > 0);
    // Delivered in order without gaps: the receiver's list holds 0, 1, 2, …
    assert!(r.delivered.iter().enumerate().all(|(i, d)| d.0 == i as u64));
    // Lossless, one exchange takes 300 ms + 8.336 ms (1042 B) + 0.4 ms (50 B) = 308.736 ms,
    // so 194 segments fit in 60 s; every loss costs an RTO.
    assert!(r.delivered.len() < 194);
    assert!(s.transmissions > r.delivered.len() as u64);
    let (lossless, _, b0, _) = stop_and_wait(7, 0.0, 60);
    assert_eq!(lossless.node(b0).receiver().delivered.len(), 194);
}

#[test]
fn back_to_back_frames_arrive_one_serialisation_time_apart() {
    let mut net = Network::new(3);
    let a = net.add_node(Toy::Echo(Echo::default()));
    let b = net.add_node(Toy::Receiver(Receiver::default()));
    let c = net.connect(a, b, wan(0.0), wan(0.0));
    // Twenty segments handed over at once: they queue in front of the 1 Mbit/s serialiser.
    if let Toy::Echo(e) = net.node_mut(a) {
        e.outbox
            .extend((0..20).map(|i| (c.a_port, datagram(i, 1000))));
    }
    let start = net.now();
    net.run_for(Duration::from_secs(2));
    let arrivals = &net.node(b).receiver().delivered;
    assert_eq!(arrivals.len(), 20);
    for (i, &(_, at)) in arrivals.iter().enumerate() {
        // (1000 + 42) × 8 bits at 1 Mbit/s = 8.336 ms each, then 150 ms.
        let expected = Duration::from_micros(8336) * (i as u32 + 1) + Duration::from_millis(150);
        assert_eq!(at - start, expected);
    }
}

#[test]
fn unconnected_port_is_counted_not_delivered() {
    let mut net = Network::new(3);
    let a = net.add_node(Toy::Echo(Echo::default()));
    if let Toy::Echo(e) = net.node_mut(a) {
        e.outbox.push_back((Port(3), datagram(0, 10)));
    }
    assert!(!net.step(), "nothing scheduled after the send");
    assert_eq!(
        net.stats(),
        &Stats {
            sent: 1,
            unroutable: 1,
            ..Stats::default()
        }
    );
}

#[test]
fn two_connections_between_the_same_nodes_are_two_ports() {
    let mut net = Network::new(5);
    let a = net.add_node(Toy::Echo(Echo::default()));
    let b = net.add_node(Toy::Echo(Echo::default()));
    let fast = Params {
        delay: Duration::from_millis(10),
        ..Params::default()
    };
    let slow = Params {
        delay: Duration::from_millis(100),
        ..Params::default()
    };
    let one = net.connect(a, b, fast.clone(), fast);
    let two = net.connect(a, b, slow.clone(), slow);
    assert_eq!((one.a_port, one.b_port), (Port(0), Port(0)));
    assert_eq!((two.a_port, two.b_port), (Port(1), Port(1)));
    if let Toy::Echo(e) = net.node_mut(a) {
        e.outbox.push_back((Port(1), datagram(0, 10)));
    }
    let start = net.now();
    assert!(net.step());
    // Arrived at b over the slow connection; b echoes it back on the same port.
    assert_eq!(net.now() - start, Duration::from_millis(100));
    assert_eq!(net.link(two.a_to_b).stats().passed, 1);
    assert_eq!(net.link(one.a_to_b).stats().received, 0);
    // The echoes bounce forever over the slow path: 100 ms per hop.
    net.run_until(start + Duration::from_millis(1000));
    assert_eq!(net.stats().delivered, 10);
}

/// A text trace of a run: every in-order delivery and every RTT.
fn trace(seed: u64) -> String {
    let mut out = String::new();
    let (net, _, b, _) = stop_and_wait(seed, 0.05, 20);
    let start = net.clock().epoch();
    for (seq, at) in &net.node(b).receiver().delivered {
        let _ = writeln!(out, "{seq} {}", (*at - start).as_nanos());
    }
    let (mut net, a, _, _) = ping_network(seed, wan(0.05));
    net.run_for(Duration::from_secs(20));
    for (seq, rtt) in &net.node(a).pinger().rtts {
        let _ = writeln!(out, "ping {seq} {}", rtt.as_nanos());
    }
    out
}

#[test]
fn same_seed_same_run_different_seed_different() {
    assert_eq!(trace(11), trace(11));
    assert_ne!(trace(11), trace(12));
}

#[test]
fn set_params_applies_to_later_datagrams() {
    let (mut net, a, _, c) = ping_network(1, wan(0.0));
    net.run_for(Duration::from_millis(500));
    let faster = Params {
        delay: Duration::from_millis(50),
        ..wan(0.0)
    };
    net.set_params(c.a_to_b, faster.clone());
    net.set_params(c.b_to_a, faster);
    net.run_for(Duration::from_millis(2000));
    let rtts: Vec<Duration> = net.node(a).pinger().rtts.iter().map(|r| r.1).collect();
    let ser = 2 * Duration::from_micros(1136);
    assert_eq!(
        rtts,
        vec![
            Duration::from_millis(300) + ser,
            Duration::from_millis(100) + ser,
            Duration::from_millis(100) + ser
        ]
    );
}

#[test]
fn stop_and_wait_throughput_table() {
    let mut table = String::from("loss  delivered  transmissions  goodput_kbit_s\n");
    for loss in [0.0, 0.01, 0.05, 0.1] {
        let (net, a, b, _) = stop_and_wait(2024, loss, 60);
        let delivered = net.node(b).receiver().delivered.len();
        let goodput = delivered as f64 * 1000.0 * 8.0 / 60.0 / 1000.0;
        let _ = writeln!(
            table,
            "{:>4}% {:>10} {:>14} {:>15.1}",
            loss * 100.0,
            delivered,
            net.node(a).sender().transmissions,
            goodput
        );
    }
    insta::assert_snapshot!(table);
}
