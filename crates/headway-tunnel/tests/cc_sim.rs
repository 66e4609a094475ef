//! The congestion-controller core over `headway-sim`: a deterministic 10 Mbit/s, 300 ms WAN.
//!
//! The sender below is a minimal model of what quinn does with the controller: it keeps
//! `in flight ≤ window`, paces at 5/4 × window / smoothed RTT (RFC 9002 §7.7), samples RTT from
//! acknowledgements (smoothed as in RFC 9002 §5.3) and declares a packet lost when a packet three
//! numbers later is acknowledged (RFC 9002 §6.1.1). The receiver acknowledges every packet at
//! once over a lossless return link. The sender is always backlogged: every packet is new data,
//! as QUIC retransmits lost data in new packets.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use headway_core::{Probability, Rate};
use headway_link::{Loss, Params};
use headway_sim::{Endpoint, Network, Port, Transmit};
use headway_tunnel::cc::{Config, Core, RttSample};

const RATE: Rate = Rate::from_mbps(10);
const ONE_WAY: Duration = Duration::from_millis(150);
const PACKET: usize = 1200;
const DATA: u8 = 0;
const CROSS: u8 = 1;
const ACK: u8 = 2;

struct Sender {
    core: Core,
    next_pn: u64,
    in_flight: BTreeMap<u64, Instant>,
    in_flight_bytes: u64,
    largest_acked: Option<u64>,
    srtt: Option<Duration>,
    min_rtt: Option<Duration>,
    next_send: Instant,
    /// Unresponsive cross traffic sent on the same link: (interval, next due).
    cross: Option<(Duration, Instant)>,
}

#[derive(Default)]
struct Receiver {
    data_packets: u64,
    cross_packets: u64,
    acks: VecDeque<Bytes>,
}

enum Node {
    Sender(Box<Sender>),
    Receiver(Receiver),
}

fn packet(kind: u8, pn: u64, len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    v[0] = kind;
    v[1..9].copy_from_slice(&pn.to_be_bytes());
    Bytes::from(v)
}

impl Sender {
    fn new(now: Instant, cross: Option<Rate>) -> Self {
        let mut config = Config::new(RATE);
        config.initial_rtt = ONE_WAY * 2;
        Self {
            core: Core::new(config, now, PACKET as u16).unwrap(),
            next_pn: 0,
            in_flight: BTreeMap::new(),
            in_flight_bytes: 0,
            largest_acked: None,
            srtt: None,
            min_rtt: None,
            next_send: now,
            cross: cross.map(|r| (r.transmit_time(PACKET as u64).unwrap(), now)),
        }
    }

    fn pacing_interval(&self) -> Duration {
        let srtt = self.srtt.unwrap_or(ONE_WAY * 2);
        let rate = 1.25 * self.core.window() as f64 / srtt.as_secs_f64();
        Duration::from_secs_f64(PACKET as f64 / rate)
    }

    fn window_open(&self) -> bool {
        self.in_flight_bytes + PACKET as u64 <= self.core.window()
    }

    fn on_ack(&mut self, now: Instant, pn: u64) {
        let Some(sent) = self.in_flight.remove(&pn) else {
            return;
        };
        self.in_flight_bytes -= PACKET as u64;
        let sample = now - sent;
        self.min_rtt = Some(self.min_rtt.map_or(sample, |m| m.min(sample)));
        // RFC 9002 §5.3: smoothed_rtt = 7/8 smoothed_rtt + 1/8 rtt_sample.
        self.srtt = Some(
            self.srtt
                .map_or(sample, |s| s.mul_f64(0.875) + sample.mul_f64(0.125)),
        );
        let rtt = RttSample {
            smoothed: self.srtt.unwrap(),
            min: self.min_rtt.unwrap(),
            latest: sample,
        };
        self.core.handle_ack(now, PACKET as u64, rtt);
        let largest = self.largest_acked.map_or(pn, |l| l.max(pn));
        self.largest_acked = Some(largest);
        // RFC 9002 §6.1.1: packet threshold 3.
        let lost: Vec<u64> = self
            .in_flight
            .range(..largest.saturating_sub(2))
            .map(|(pn, _)| *pn)
            .collect();
        if !lost.is_empty() {
            for pn in &lost {
                self.in_flight.remove(pn);
            }
            let bytes = (lost.len() * PACKET) as u64;
            self.in_flight_bytes -= bytes;
            self.core.handle_loss(now, bytes, false);
        }
    }
}

impl Endpoint for Node {
    fn handle_datagram(&mut self, now: Instant, _port: Port, data: Bytes) {
        match self {
            Node::Sender(s) => {
                if data[0] == ACK {
                    let pn = u64::from_be_bytes(data[1..9].try_into().unwrap());
                    s.on_ack(now, pn);
                }
            }
            Node::Receiver(r) => match data[0] {
                DATA => {
                    r.data_packets += 1;
                    let pn = u64::from_be_bytes(data[1..9].try_into().unwrap());
                    r.acks.push_back(packet(ACK, pn, 40));
                }
                CROSS => r.cross_packets += 1,
                _ => {}
            },
        }
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let data = match self {
            Node::Receiver(r) => r.acks.pop_front()?,
            Node::Sender(s) => {
                if let Some((interval, next)) = &mut s.cross {
                    if *next <= now {
                        *next += *interval;
                        return Some(Transmit {
                            port: Port(0),
                            data: packet(CROSS, 0, PACKET),
                        });
                    }
                }
                if s.next_send > now || !s.window_open() {
                    return None;
                }
                let pn = s.next_pn;
                s.next_pn += 1;
                s.in_flight.insert(pn, now);
                s.in_flight_bytes += PACKET as u64;
                s.next_send = s.next_send.max(now - s.pacing_interval() * 4) + s.pacing_interval();
                packet(DATA, pn, PACKET)
            }
        };
        Some(Transmit {
            port: Port(0),
            data,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Node::Receiver(_) => None,
            Node::Sender(s) => {
                let data = s.window_open().then_some(s.next_send);
                let cross = s.cross.map(|(_, next)| next);
                data.into_iter().chain(cross).min()
            }
        }
    }
}

struct Run {
    /// Wire bit rate of delivered data packets (UDP/IP/Ethernet headers included) / link rate.
    data_share: f64,
    /// The same for the cross traffic.
    cross_share: f64,
    controller_share: f64,
    delay_decreases: u64,
    loss_decreases: u64,
}

fn run(seed: u64, loss: f64, cross: Option<Rate>) -> Run {
    let mut net: Network<Node> = Network::new(seed);
    let now = net.now();
    let s = net.add_node(Node::Sender(Box::new(Sender::new(now, cross))));
    let r = net.add_node(Node::Receiver(Receiver::default()));
    let forward = Params {
        rate: Some(RATE),
        delay: ONE_WAY,
        loss: Loss::Bernoulli(Probability::new(loss).unwrap()),
        ..Params::default()
    };
    let back = Params {
        rate: Some(RATE),
        delay: ONE_WAY,
        ..Params::default()
    };
    net.connect(s, r, forward, back);

    let counts = |net: &Network<Node>| match net.node(r) {
        Node::Receiver(r) => (r.data_packets, r.cross_packets),
        Node::Sender(_) => unreachable!(),
    };
    net.run_for(Duration::from_secs(10));
    let (d0, c0) = counts(&net);
    let measured = Duration::from_secs(60);
    net.run_for(measured);
    let (d1, c1) = counts(&net);
    let wire = |packets: u64| {
        let bits = packets as f64 * (PACKET + net.header_bytes()) as f64 * 8.0;
        bits / measured.as_secs_f64() / RATE.bps() as f64
    };
    let Node::Sender(sender) = net.node(s) else {
        unreachable!()
    };
    Run {
        data_share: wire(d1 - d0),
        cross_share: wire(c1 - c0),
        controller_share: sender.core.share(),
        delay_decreases: sender.core.stats().delay_decreases,
        loss_decreases: sender.core.stats().loss_decreases,
    }
}

#[test]
fn keeps_ninety_percent_of_the_rate_through_one_percent_random_loss() {
    let r = run(1, 0.01, None);
    // Goodput target of issue 3: ≥ 0.9 × configured rate × (1 − loss).
    assert!(
        r.data_share >= 0.9 * (1.0 - 0.01),
        "delivered {:.3} of the rate",
        r.data_share
    );
    assert_eq!(r.controller_share, 1.0);
    assert_eq!(r.loss_decreases, 0);
    assert_eq!(r.delay_decreases, 0);
}

#[test]
fn keeps_the_rate_through_five_percent_random_loss() {
    let r = run(2, 0.05, None);
    assert!(
        r.data_share >= 0.9 * (1.0 - 0.05),
        "delivered {:.3} of the rate",
        r.data_share
    );
    assert_eq!(r.loss_decreases, 0);
}

#[test]
fn backs_off_for_unresponsive_cross_traffic() {
    // Half the link is taken by traffic that does not back off: the queue grows, the controller
    // sees the delay and yields, so the cross traffic keeps its half.
    let r = run(3, 0.0, Some(Rate::from_mbps(5)));
    assert!(r.delay_decreases > 0);
    assert!(r.controller_share < 1.0);
    assert!(
        r.cross_share >= 0.45,
        "cross traffic got {:.3}",
        r.cross_share
    );
    assert!(r.data_share >= 0.3, "tunnel got {:.3}", r.data_share);
}

#[test]
fn throughput_table() {
    let mut table =
        String::from("loss    delivered/rate  share  loss-decreases  delay-decreases\n");
    for (i, loss) in [0.0, 0.001, 0.01, 0.03, 0.05].into_iter().enumerate() {
        let r = run(10 + i as u64, loss, None);
        assert!(
            r.data_share >= 0.9 * (1.0 - loss),
            "loss {loss}: {:.3}",
            r.data_share
        );
        table += &format!(
            "{:<7} {:<15.3} {:<6.2} {:<15} {}\n",
            format!("{:.1}%", loss * 100.0),
            r.data_share,
            r.controller_share,
            r.loss_decreases,
            r.delay_decreases
        );
    }
    let r = run(20, 0.0, Some(Rate::from_mbps(5)));
    table += &format!(
        "with 5 Mbit/s unresponsive cross traffic: tunnel {:.3}, cross {:.3}, share {:.2}\n",
        r.data_share, r.cross_share, r.controller_share
    );
    insta::assert_snapshot!(table);
}

#[test]
fn same_seed_same_result() {
    let (a, b) = (run(4, 0.01, None), run(4, 0.01, None));
    assert_eq!(a.data_share, b.data_share);
}
