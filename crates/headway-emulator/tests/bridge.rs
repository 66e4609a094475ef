//! End to end: a real [`Bridge`] between two veth pairs in throw-away namespaces, with ICMP,
//! UDP and TCP through it. Needs root (CI runs as root); skips with a message otherwise.

#[path = "support/topo.rs"]
mod topo;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use headway_core::{Probability, SystemClock};
use headway_emulator::{Bridge, BridgeConfig, BridgeHandle, Direction, DirectionStats};
use headway_link::{Loss, Params};
use parking_lot::Mutex;
use topo::{in_netns, Topology, CLIENT_IP, SERVER_IP};

const ECHO_PORT: u16 = 9001;
const SINK_PORT: u16 = 9002;
const TCP_PORT: u16 = 9003;

/// Datagrams the sink saw, by phase byte, by sequence number.
type Seen = Arc<Mutex<HashMap<u8, HashSet<u32>>>>;

/// Waits for `cond` with a deadline; returns whether it became true.
fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = SystemClock::now() + timeout;
    while SystemClock::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::yield_now();
    }
    eprintln!("timed out waiting for {what}");
    cond()
}

fn a_to_b(h: &BridgeHandle) -> DirectionStats {
    h.stats().a_to_b
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 11)) as u8
}

/// Sends `len` bytes of a known pattern from the client to the server over TCP and checks
/// every byte arrived, in order.
fn tcp_transfer(t: &Topology, len: usize) {
    let listener = in_netns(&t.server, || {
        TcpListener::bind((SERVER_IP, TCP_PORT)).unwrap()
    });
    let receiver = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::with_capacity(len);
        s.read_to_end(&mut got).unwrap();
        got
    });
    let mut c = in_netns(&t.client, || {
        TcpStream::connect((SERVER_IP, TCP_PORT)).unwrap()
    });
    let data: Vec<u8> = (0..len).map(pattern).collect();
    c.write_all(&data).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let got = receiver.join().unwrap();
    assert_eq!(got.len(), len, "all TCP bytes arrived");
    assert!(got == data, "TCP bytes arrived intact and in order");
}

/// Starts a UDP echo server and a UDP sink in the server namespace; they stop when `stop` is
/// set.
fn udp_servers(
    t: &Topology,
    stop: Arc<AtomicBool>,
    seen: Seen,
) -> Vec<std::thread::JoinHandle<()>> {
    let (echo, sink) = in_netns(&t.server, || {
        (
            UdpSocket::bind((SERVER_IP, ECHO_PORT)).unwrap(),
            UdpSocket::bind((SERVER_IP, SINK_PORT)).unwrap(),
        )
    });
    for s in [&echo, &sink] {
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    }
    // Room for every datagram of a phase (2000 of 100 bytes, each charged several times its
    // size) while the sink's thread is not running: the default receive buffer (208 KiB)
    // holds a fraction of that, and a datagram it dropped would count as one the model lost.
    // (Root forces the size past `net.core.rmem_max`; the test runs only as root.)
    let want = 8 << 20;
    let got = headway_io::buffers::set(sink.as_fd(), headway_io::buffers::Buffer::Receive, want)
        .expect("set the sink's receive buffer");
    assert!(got >= want / 2, "the sink's receive buffer is {got} bytes");
    let stop2 = stop.clone();
    let echo_thread = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !stop2.load(Ordering::Relaxed) {
            if let Ok((n, from)) = echo.recv_from(&mut buf) {
                let _ = echo.send_to(&buf[..n], from);
            }
        }
    });
    let sink_thread = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            if let Ok(n) = sink.recv(&mut buf) {
                if n >= 5 {
                    let seq = u32::from_be_bytes(buf[1..5].try_into().unwrap());
                    seen.lock().entry(buf[0]).or_default().insert(seq);
                }
            }
        }
    });
    vec![echo_thread, sink_thread]
}

/// Sends `n` datagrams tagged with `phase` to the sink, in small bursts so no receive buffer on
/// the way overflows.
fn send_datagrams(client: &UdpSocket, phase: u8, n: u32) {
    for seq in 0..n {
        let mut d = [0u8; 100];
        d[0] = phase;
        d[1..5].copy_from_slice(&seq.to_be_bytes());
        client.send_to(&d, (SERVER_IP, SINK_PORT)).unwrap();
        if seq % 20 == 19 {
            std::thread::sleep(Duration::from_millis(1)); // pacing, not waiting for readiness
        }
    }
}

fn seen_count(seen: &Seen, phase: u8) -> usize {
    seen.lock().get(&phase).map_or(0, HashSet::len)
}

#[test]
fn bridge_passes_traffic_applies_the_model_and_changes_live() {
    if !topo::is_root() {
        eprintln!("skipping bridge_passes_traffic_applies_the_model_and_changes_live: needs root");
        return;
    }
    let t = Topology::new("it").expect("build namespaces");
    let cfg = BridgeConfig {
        name: "it".into(),
        a: "wa".into(),
        b: "wb".into(),
        a_to_b: Params::default(),
        b_to_a: Params::default(),
        seed: 42,
    };
    let bridge = in_netns(&t.wan, || Bridge::start(cfg)).expect("start bridge");
    let h = bridge.handle();
    assert_eq!(h.name(), "it");
    assert_eq!(h.interfaces(), ("wa".to_owned(), "wb".to_owned()));

    // 1. Transparent: ARP resolves and ICMP passes both ways.
    let ping = t
        .exec(
            &t.client,
            "ping",
            &["-c", "3", "-i", "0.2", "-W", "5", SERVER_IP],
        )
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "ping through the bridge: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    let s = h.stats();
    assert!(
        s.a_to_b.link.passed >= 4 && s.b_to_a.link.passed >= 4,
        "ARP and ICMP passed: {s:?}"
    );

    // 2. TCP at zero delay: 8 MiB arrive intact.
    tcp_transfer(&t, 8 << 20);
    let s = h.stats();
    assert!(s.a_to_b.link.passed_bytes > 8 << 20, "{s:?}");
    assert_eq!(s.a_to_b.truncated, 0, "offloads are off: no super-frames");
    assert_eq!(s.a_to_b.link.lost + s.b_to_a.link.lost, 0);

    // From here on no ARP crosses the bridge, so frame counts are exactly ours.
    t.pin_neighbours().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Seen = Arc::default();
    let servers = udp_servers(&t, stop.clone(), seen.clone());
    let client = in_netns(&t.client, || UdpSocket::bind((CLIENT_IP, 0)).unwrap());
    client
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();

    // 3. Delay: 20 ms each way, applied live; every echo takes at least 40 ms.
    let delay = Duration::from_millis(20);
    for dir in Direction::ALL {
        h.set_params(
            dir,
            Params {
                delay,
                ..Params::default()
            },
        );
        assert_eq!(h.params(dir).delay, delay);
    }
    let mut rtts = Vec::new();
    for i in 0u32..10 {
        let sent = SystemClock::now();
        client
            .send_to(&i.to_be_bytes(), (SERVER_IP, ECHO_PORT))
            .unwrap();
        let mut buf = [0u8; 16];
        let n = client.recv(&mut buf).expect("echo reply within 2 s");
        assert_eq!(&buf[..n], &i.to_be_bytes());
        rtts.push(SystemClock::now() - sent);
    }
    let min_rtt = *rtts.iter().min().unwrap();
    assert!(
        min_rtt >= 2 * delay,
        "echo RTT {min_rtt:?} below the configured 2 x {delay:?}"
    );
    let s = h.stats();
    assert!(s.a_to_b.timing_error_us.count > 0 && s.a_to_b.queueing_us.count > 0);

    // 4. 10 % loss on A→B: what the sink missed is exactly what the model lost.
    let loss = Loss::Bernoulli(Probability::new(0.1).unwrap());
    h.set_params(
        Direction::AtoB,
        Params {
            delay,
            loss,
            ..Params::default()
        },
    );
    let before = a_to_b(&h);
    let n = 2000;
    send_datagrams(&client, 4, n);
    assert!(
        wait_for(
            "all 2000 datagrams to be decided",
            Duration::from_secs(10),
            || {
                let s = a_to_b(&h);
                s.link.received - before.link.received == u64::from(n) && s.in_flight == 0
            }
        ),
        "the link saw every datagram: {:?}",
        a_to_b(&h)
    );
    let after = a_to_b(&h);
    let passed = (after.link.passed - before.link.passed) as usize;
    assert!(
        wait_for(
            "the sink to see every passed datagram",
            Duration::from_secs(10),
            || seen_count(&seen, 4) == passed
        ),
        "sink saw {} of {passed} passed datagrams",
        seen_count(&seen, 4)
    );
    let lost = after.link.lost - before.link.lost;
    let missed = u64::from(n) - seen_count(&seen, 4) as u64;
    assert_eq!(
        missed, lost,
        "receiver missed exactly the frames the model lost"
    );
    assert!(
        (100..=300).contains(&lost),
        "about 10 % of 2000 lost, got {lost}"
    );
    assert_eq!(
        after.send_errors + after.kernel_drops + after.truncated,
        0,
        "{after:?}"
    );

    // 5. TCP still delivers everything through 20 ms and 10 % loss.
    tcp_transfer(&t, 128 << 10);

    // 6. Live changes: 100 % loss stops everything, then a clean link passes everything.
    let all = Loss::Bernoulli(Probability::new(1.0).unwrap());
    h.set_params(
        Direction::AtoB,
        Params {
            loss: all,
            ..Params::default()
        },
    );
    let before = a_to_b(&h);
    send_datagrams(&client, 6, 50);
    assert!(wait_for("50 losses", Duration::from_secs(10), || a_to_b(
        &h
    )
    .link
    .lost
        - before.link.lost
        == 50));
    assert_eq!(
        a_to_b(&h).link.passed,
        before.link.passed,
        "nothing passed at 100 % loss"
    );
    h.set_params(Direction::AtoB, Params::default());
    assert_eq!(h.params(Direction::AtoB), Params::default());
    send_datagrams(&client, 7, 50);
    assert!(wait_for(
        "50 datagrams at the sink",
        Duration::from_secs(10),
        || seen_count(&seen, 7) == 50
    ));
    assert_eq!(
        seen_count(&seen, 6),
        0,
        "none of the 100 %-loss datagrams arrived"
    );

    // 7. Metrics and final stats.
    let mut registry = prometheus_client::registry::Registry::default();
    h.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let lost_total = a_to_b(&h).link.lost;
    let line = format!("headway_link_frames_total{{link=\"it\",direction=\"a_to_b\",outcome=\"lost\"}} {lost_total}");
    assert!(text.contains(&line), "missing {line:?} in\n{text}");
    assert!(text.contains(
        "headway_link_timing_error_seconds{link=\"it\",direction=\"b_to_a\",quantile=\"0.99\"}"
    ));

    stop.store(true, Ordering::Relaxed);
    for s in servers {
        s.join().unwrap();
    }
    let started = SystemClock::now();
    let fin = bridge.stop();
    eprintln!("stop took {:?}", SystemClock::now() - started);
    assert_eq!(fin.a_to_b.link.lost, lost_total);
    let json = serde_json::to_value(&fin).unwrap();
    assert_eq!(json["a_to_b"]["lost"], lost_total);
    eprintln!("final stats: {json}");
}
