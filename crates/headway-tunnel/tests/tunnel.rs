//! End-to-end tests of the tunnel over loopback UDP: two endpoints, real quinn, real TLS.

use std::future::Future;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use headway_core::{Rate, Rng};
use headway_tunnel::{
    code, ConnectError, Endpoint, Fingerprint, FlowHeader, HandshakeError, Identity, InboundFlow,
    Options, PeerConfig, PeerId, ReadError, RecvStream, SendStream, ServiceClass, ServiceId,
    WriteError,
};
use sha2::{Digest, Sha256};

/// Every test finishes well within this, or fails instead of hanging.
const DEADLINE: Duration = Duration::from_secs(120);

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, f)
        .await
        .expect("test exceeded its deadline")
}

/// Polls `check` every 10 ms until it gives a value; panics with its last complaint after 5 s.
async fn within_5s<T>(mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match check() {
            Ok(v) => return v,
            Err(why) => assert!(tokio::time::Instant::now() < deadline, "{why}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn peer(name: &str, addr: SocketAddr, fingerprint: Fingerprint) -> PeerConfig {
    let mut p = PeerConfig::new(name, addr, fingerprint, Rate::from_mbps(2000));
    p.rtt_estimate = Duration::from_millis(5);
    p
}

/// Two loopback UDP sockets and their addresses.
fn two_sockets() -> (UdpSocket, UdpSocket, SocketAddr, SocketAddr) {
    let sa = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sb = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (aa, ba) = (sa.local_addr().unwrap(), sb.local_addr().unwrap());
    (sa, sb, aa, ba)
}

/// An endpoint on `socket` with one peer and the default options.
fn endpoint(socket: UdpSocket, id: &Identity, peer: PeerConfig) -> Endpoint {
    Endpoint::from_socket(socket, id, vec![peer], Options::default()).unwrap()
}

/// Two endpoints, `a` and `b`, each pinning the fingerprints given (normally each other's).
fn endpoints(
    a_id: &Identity,
    b_id: &Identity,
    a_pins: Fingerprint,
    b_pins: Fingerprint,
) -> (Endpoint, Endpoint) {
    let (sa, sb, aa, ba) = two_sockets();
    let a =
        Endpoint::from_socket(sa, a_id, vec![peer("b", ba, a_pins)], Options::default()).unwrap();
    let b =
        Endpoint::from_socket(sb, b_id, vec![peer("a", aa, b_pins)], Options::default()).unwrap();
    (a, b)
}

fn pair() -> (Endpoint, Endpoint) {
    let (a_id, b_id) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    endpoints(&a_id, &b_id, b_id.fingerprint(), a_id.fingerprint())
}

fn header(service: u32) -> FlowHeader {
    FlowHeader {
        service: ServiceId(service),
        class: ServiceClass::DedupDisk,
        destination: Some("192.0.2.10:445".parse().unwrap()),
    }
}

fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::from_seed(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Writes `data` in uneven pieces, then finishes (FIN).
async fn send_all(mut send: SendStream, data: Vec<u8>) -> SendStream {
    for piece in data.chunks(7919) {
        send.write_all(piece).await.unwrap();
    }
    send.finish().unwrap();
    send
}

async fn digest_to_end(mut recv: RecvStream) -> ([u8; 32], usize) {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    loop {
        match recv.read(&mut buf).await.unwrap() {
            Some(0) => {}
            Some(n) => {
                h.update(&buf[..n]);
                total += n;
            }
            None => return (h.finalize().into(), total),
        }
    }
}

fn sha(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabytes_each_way_arrive_intact() {
    bounded(async {
        let (a, b) = pair();
        let conn = a.connect(PeerId(0)).await.unwrap();
        let (send, recv) = conn.open_flow(&header(42)).await.unwrap();
        let up = random_bytes(1, 10_000_000);
        let down = random_bytes(2, 10_000_000);
        let (up_sha, down_sha) = (sha(&up), sha(&down));

        let client = async move {
            let (_, got) = tokio::join!(send_all(send, up), digest_to_end(recv));
            got
        };
        let server = async {
            let flow = b.accept_flow().await.unwrap();
            assert_eq!(flow.peer, PeerId(0));
            assert_eq!(flow.header, header(42));
            let (_, got) = tokio::join!(send_all(flow.send, down), digest_to_end(flow.recv));
            got
        };
        let (at_a, at_b) = tokio::join!(client, server);
        assert_eq!(at_b, (up_sha, 10_000_000));
        assert_eq!(at_a, (down_sha, 10_000_000));
        assert_eq!(a.stats().connections, 1);
        assert_eq!(a.stats().peers_ready, 1, "a flow to b goes at once");
        assert_eq!(b.stats().connections, 1);
        assert_eq!(b.stats().flows_accepted, 1);
        // Each side sent its 10 MB in packets of at most 1,500 bytes (and counts them).
        for s in [a.stats(), b.stats()] {
            assert!(s.packets_sent > 10_000_000 / 1500, "{s:?}");
            assert!(s.packets_lost < s.packets_sent, "{s:?}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_keeps_the_other_direction_flowing() {
    bounded(async {
        let (a, b) = pair();
        let conn = a.connect(PeerId(0)).await.unwrap();

        // Opener closes its sending side first (like an HTTP/1.0 client after its request).
        let (mut send, recv) = conn.open_flow(&header(1)).await.unwrap();
        send.write_all(b"request").await.unwrap();
        send.finish().unwrap();
        let InboundFlow {
            send: mut b_send,
            recv: mut b_recv,
            ..
        } = b.accept_flow().await.unwrap();
        let got = b_recv.read_to_end(1 << 20).await.unwrap();
        assert_eq!(got, b"request");
        // After the FIN arrived, the answer still flows, in several writes.
        let answer = random_bytes(3, 1_000_000);
        let answer_sha = sha(&answer);
        let (_, (digest, n)) = tokio::join!(send_all(b_send, answer), digest_to_end(recv));
        assert_eq!((digest, n), (answer_sha, 1_000_000));

        // Acceptor closes first: the opener can still send after reading EOF.
        let (mut send, mut recv) = conn.open_flow(&header(2)).await.unwrap();
        send.write_all(b"hello").await.unwrap();
        let flow = b.accept_flow().await.unwrap();
        b_send = flow.send;
        b_recv = flow.recv;
        b_send.write_all(b"bye").await.unwrap();
        b_send.finish().unwrap();
        let got = recv.read_to_end(1 << 20).await.unwrap();
        assert_eq!(got, b"bye");
        let more = random_bytes(4, 500_000);
        let more_sha = sha(&more);
        let mut prefix = [0u8; 5];
        b_recv.read_exact(&mut prefix).await.unwrap();
        assert_eq!(&prefix, b"hello");
        let (_, (digest, n)) = tokio::join!(send_all(send, more), digest_to_end(b_recv));
        assert_eq!((digest, n), (more_sha, 500_000));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_is_seen_as_an_error_on_the_other_side() {
    bounded(async {
        let (a, b) = pair();
        let conn = a.connect(PeerId(0)).await.unwrap();

        // Sender aborts: the reader gets a reset with the code, not a clean end.
        let (mut send, _recv) = conn.open_flow(&header(1)).await.unwrap();
        send.write_all(b"partial").await.unwrap();
        let mut flow = b.accept_flow().await.unwrap();
        send.reset(code::RESET).unwrap();
        let mut buf = [0u8; 64];
        let err = loop {
            match flow.recv.read(&mut buf).await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("reset stream ended cleanly"),
                Err(e) => break e,
            }
        };
        assert_eq!(err, ReadError::Reset(code::RESET));

        // Reader aborts: the writer's next writes fail with the code.
        let (mut send, _recv) = conn.open_flow(&header(2)).await.unwrap();
        let mut flow = b.accept_flow().await.unwrap();
        flow.recv.stop(code::RESET).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        let err = loop {
            if let Err(e) = send.write_all(&chunk).await {
                break e;
            }
        };
        assert!(
            matches!(err, WriteError::Stopped(c) if c == code::RESET),
            "{err:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_flows_both_ways() {
    bounded(async {
        let (a, b) = pair();
        let conn = a.connect(PeerId(0)).await.unwrap();
        let sizes: Vec<usize> = (0..50u64)
            .map(|i| (Rng::from_seed(100 + i).next_u64() % 300_000) as usize)
            .collect();

        let server = async {
            let mut tasks = Vec::new();
            for _ in 0..50 {
                let flow = b.accept_flow().await.unwrap();
                let i = flow.header.service.0 as u64;
                tasks.push(tokio::spawn(async move {
                    let down = random_bytes(2000 + i, (i * 997) as usize);
                    let (_, got) =
                        tokio::join!(send_all(flow.send, down), digest_to_end(flow.recv));
                    (i, got)
                }));
            }
            let mut seen = Vec::new();
            for t in tasks {
                seen.push(t.await.unwrap());
            }
            seen
        };
        let client = async {
            let mut tasks = Vec::new();
            for (i, &size) in sizes.iter().enumerate() {
                let conn = conn.clone();
                tasks.push(tokio::spawn(async move {
                    let (send, recv) = conn.open_flow(&header(i as u32)).await.unwrap();
                    let up = random_bytes(1000 + i as u64, size);
                    let (_, got) = tokio::join!(send_all(send, up), digest_to_end(recv));
                    got
                }));
            }
            let mut got = Vec::new();
            for t in tasks {
                got.push(t.await.unwrap());
            }
            got
        };
        let (mut at_b, at_a) = tokio::join!(server, client);
        at_b.sort_by_key(|(i, _)| *i);
        for (i, (got_i, got)) in at_b.into_iter().enumerate() {
            assert_eq!(got_i, i as u64);
            let up = random_bytes(1000 + i as u64, sizes[i]);
            assert_eq!(got, (sha(&up), sizes[i]), "flow {i} upstream");
        }
        for (i, got) in at_a.into_iter().enumerate() {
            let down = random_bytes(2000 + i as u64, i * 997);
            assert_eq!(got, (sha(&down), i * 997), "flow {i} downstream");
        }
        assert_eq!(b.stats().flows_accepted, 50);
        assert_eq!(a.stats().connections, 1, "flows share one connection");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_reuses_the_live_connection_and_both_sides_open_flows() {
    bounded(async {
        let (a, b) = pair();
        let c1 = a.connect(PeerId(0)).await.unwrap();
        let c2 = a.connect(PeerId(0)).await.unwrap();
        assert_eq!(c1.remote_address(), c2.remote_address());
        assert_eq!(a.stats().connections, 1);
        // Wait until b has registered the inbound connection, then b opens a flow on it.
        let (mut send, _recv) = c1.open_flow(&header(9)).await.unwrap();
        send.write_all(b"x").await.unwrap();
        let _flow = b.accept_flow().await.unwrap();
        let back = b.connect(PeerId(0)).await.unwrap();
        assert_eq!(b.stats().connections, 1, "b reused the connection a opened");
        let (mut send, _recv) = back.open_flow(&header(10)).await.unwrap();
        send.write_all(b"from b").await.unwrap();
        send.finish().unwrap();
        let mut flow = a.accept_flow().await.unwrap();
        assert_eq!(flow.header.service, ServiceId(10));
        let got = flow.recv.read_to_end(1 << 20).await.unwrap();
        assert_eq!(got, b"from b");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_with_unpinned_certificate_is_refused_on_both_sides() {
    bounded(async {
        let (a_id, b_id) = (Identity::generate().unwrap(), Identity::generate().unwrap());
        let stranger = Identity::generate().unwrap().fingerprint();
        // a expects someone else at b's address; b pins a correctly.
        let (a, b) = endpoints(&a_id, &b_id, stranger, a_id.fingerprint());
        let err = a.connect(PeerId(0)).await.unwrap_err();
        let ConnectError::Handshake(HandshakeError::NotAuthenticated(detail)) = &err else {
            panic!("unexpected error {err:?}");
        };
        assert!(detail.contains("not pinned"), "{detail}");
        assert!(detail.contains(&b_id.fingerprint().to_string()), "{detail}");
        let refusal = b.next_refusal().await.unwrap();
        assert!(
            matches!(refusal.error, HandshakeError::RefusedByPeer(_)),
            "{:?}",
            refusal.error
        );
        assert_eq!(a.stats().refused, 1);
        assert_eq!(b.stats().connections, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_with_unpinned_certificate_is_refused_on_both_sides() {
    bounded(async {
        let (a_id, b_id) = (Identity::generate().unwrap(), Identity::generate().unwrap());
        let stranger = Identity::generate().unwrap().fingerprint();
        // a pins b correctly; b does not know a's certificate.
        let (a, b) = endpoints(&a_id, &b_id, b_id.fingerprint(), stranger);
        let err = a.connect(PeerId(0)).await.unwrap_err();
        assert!(
            matches!(
                err,
                ConnectError::Handshake(HandshakeError::RefusedByPeer(_))
            ),
            "{err:?}"
        );
        let refusal = b.next_refusal().await.unwrap();
        let HandshakeError::NotAuthenticated(detail) = &refusal.error else {
            panic!("unexpected refusal {:?}", refusal.error);
        };
        assert!(
            detail.contains("client certificate fingerprint"),
            "{detail}"
        );
        assert!(detail.contains(&a_id.fingerprint().to_string()), "{detail}");
        assert_eq!(refusal.remote, a.local_addr().unwrap());
        assert_eq!(b.stats().connections, 0);
        assert_eq!(b.stats().flows_accepted, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_peer_fingerprints_are_refused_at_bind() {
    let id = Identity::generate().unwrap();
    let other = Identity::generate().unwrap().fingerprint();
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let err = Endpoint::bind(
        "127.0.0.1:0".parse().unwrap(),
        &id,
        vec![peer("x", addr, other), peer("y", addr, other)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("same fingerprint"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_use_the_link_rate_controller() {
    bounded(async {
        let (a_id, b_id) = (Identity::generate().unwrap(), Identity::generate().unwrap());
        let (sa, sb, aa, ba) = two_sockets();
        let slow = |name, addr, f| PeerConfig::new(name, addr, f, Rate::from_mbps(10));
        let a = endpoint(sa, &a_id, slow("b", ba, b_id.fingerprint()));
        let _b = endpoint(sb, &b_id, slow("a", aa, a_id.fingerprint()));
        let conn = a.connect(PeerId(0)).await.unwrap();
        // Our controller: rate × (min RTT × 1.15 + 2 ms) + 2 packets, at least 4 packets. On
        // loopback that is near the 4-packet floor, far below the 14 720-byte initial window of
        // quinn's default (CUBIC). Until the controller's first acknowledgement it uses the
        // configured RTT estimate (100 ms), so the check waits for one (the handshake's own
        // acknowledgements may not have reached it when `connect` returns).
        // The statistics' RTT may be a sample newer than the controller's last one, and one
        // sample moves it by at most an eighth: 25 % slack. MTU discovery may have raised the
        // controller's MTU to the 1,472-byte ceiling before the statistics show it.
        let limit = |stats: &quinn::ConnectionStats| {
            let mtu = u64::from(stats.path.current_mtu).max(1472);
            let covered = 1.15 * 1.25 * stats.path.rtt.as_secs_f64() + 0.002;
            ((1_250_000.0 * covered) as u64 + 2 * mtu).max(4 * mtu)
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        let mut stats = conn.stats();
        while stats.path.cwnd > limit(&stats) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            stats = conn.stats();
        }
        let limit = limit(&stats);
        assert!(stats.path.cwnd >= 4 * 1200, "{}", stats.path.cwnd);
        assert!(
            stats.path.cwnd <= limit,
            "{} > {limit} ({:?}, mtu {})",
            stats.path.cwnd,
            stats.path.rtt,
            stats.path.current_mtu
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_held_back_by_a_reader_that_does_not_read() {
    use std::pin::Pin;
    use std::task::Poll;

    bounded(async {
        let (a, b) = pair();
        let conn = a.connect(PeerId(0)).await.unwrap();
        let (mut send, _recv) = conn.open_flow(&header(5)).await.unwrap();
        let mut flow = b.accept_flow().await.unwrap();
        // Write until quinn refuses more (the peer reads nothing, so its credit never grows).
        let chunk = vec![7u8; 64 * 1024];
        let mut accepted = 0usize;
        loop {
            let step =
                std::future::poll_fn(|cx| match Pin::new(&mut send).poll_write(cx, &chunk) {
                    Poll::Ready(r) => Poll::Ready(Some(r.unwrap())),
                    Poll::Pending => Poll::Ready(None),
                })
                .await;
            match step {
                Some(n) => accepted += n,
                None => break,
            }
        }
        // The stream window: 8 × (2 Gbit/s × 5 ms) = 10 MB, minus the 16-byte flow header.
        let window = 8 * 1_250_000;
        assert_eq!(
            accepted,
            window - 16,
            "the stream window is what holds the writer back"
        );
        // Once the reader drains, everything written arrives and the writer proceeds.
        let writer = async {
            send.write_all(&chunk).await.unwrap();
            send.finish().unwrap();
        };
        let reader = async {
            let mut total = 0;
            let mut buf = vec![0u8; 64 * 1024];
            while let Some(n) = flow.recv.read(&mut buf).await.unwrap() {
                assert!(buf[..n].iter().all(|&b| b == 7));
                total += n;
            }
            total
        };
        let (_, total) = tokio::join!(writer, reader);
        assert_eq!(total, accepted + chunk.len());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_ends_accept_and_the_peer_sees_the_connection_go() {
    bounded(async {
        let (a, b) = pair();
        let conn = a.connect(PeerId(0)).await.unwrap();
        let (mut send, _recv) = conn.open_flow(&header(1)).await.unwrap();
        send.write_all(b"x").await.unwrap();
        let mut flow = b.accept_flow().await.unwrap();
        b.close();
        assert!(b.accept_flow().await.is_none());
        assert!(b.next_refusal().await.is_none());
        // The flow in progress is cut, as a TCP connection through a dead box would be.
        let mut buf = [0u8; 16];
        let mut err = None;
        while err.is_none() {
            match flow.recv.read(&mut buf).await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("cut flow ended cleanly"),
                Err(e) => err = Some(e),
            }
        }
        let reason = conn.closed().await;
        assert!(
            matches!(&reason, headway_tunnel::ConnectionError::ApplicationClosed(c) if c.error_code == code::SHUTDOWN),
            "{reason:?}"
        );
    })
    .await;
}

/// `b` dies without a word (its process is gone: no CONNECTION_CLOSE) and a new `b` with the
/// same identity comes up on the same port. The first packet `a` sends on its old connection
/// draws a stateless reset from the new process, signed with the key both derive from the
/// identity, so `a` drops the dead connection at once (not after the 30 s idle timeout) and its
/// next connect reaches the new `b`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_peer_resets_the_old_connection_at_once() {
    bounded(async {
        let (a_id, b_id) = (Identity::generate().unwrap(), Identity::generate().unwrap());
        let (sa, sb, aa, ba) = two_sockets();
        let a = endpoint(sa, &a_id, peer("b", ba, b_id.fingerprint()));
        // The first `b` runs on a runtime of its own, so it can be killed mid-connection.
        let doomed = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let b1 = {
            let _in = doomed.enter();
            endpoint(sb, &b_id, peer("a", aa, a_id.fingerprint()))
        };
        let conn = a.connect(PeerId(0)).await.unwrap();
        let (mut send, _recv) = conn.open_flow(&header(1)).await.unwrap();
        send.write_all(b"x").await.unwrap();
        let b1 = std::sync::Arc::new(b1);
        let accepting = b1.clone();
        // Held here, so the dying runtime does not end the flow politely (STOP_SENDING).
        let flow = doomed
            .spawn(async move { accepting.accept_flow().await })
            .await
            .unwrap();
        assert!(flow.is_some(), "the first b saw the flow");

        // Kill: stop its tasks (quinn's drivers among them) and only then drop the handle,
        // whose close has no driver left to send a CONNECTION_CLOSE; the socket goes with it.
        tokio::task::spawn_blocking(move || {
            doomed.shutdown_timeout(Duration::from_secs(10));
            drop(flow);
            drop(b1);
        })
        .await
        .unwrap();
        let sb2 = UdpSocket::bind(ba).expect("the port is free again");
        let b2 = endpoint(sb2, &b_id, peer("a", aa, a_id.fingerprint()));

        let killed = headway_core::SystemClock::now();
        // A new flow on the old connection (as the next client's would be) makes a packet for
        // the new process to reset. A packet already on its way (an acknowledgement, a
        // keep-alive) may have drawn the reset first: then opening the flow says so.
        let reason = match conn.open_flow(&header(3)).await {
            Ok((mut late, _recv)) => {
                let _ = late.write_all(b"into the void").await;
                tokio::time::timeout(Duration::from_secs(10), conn.closed())
                    .await
                    .expect("the old connection was not reset within 10 s")
            }
            Err(headway_tunnel::FlowError::Connection(e)) => e,
            Err(e) => panic!("opening a flow on the old connection: {e}"),
        };
        assert!(
            matches!(reason, headway_tunnel::ConnectionError::Reset),
            "{reason:?}"
        );
        println!("old connection reset after {:?}", killed.elapsed());

        let fresh = a.connect(PeerId(0)).await.unwrap();
        let (mut send, _recv) = fresh.open_flow(&header(2)).await.unwrap();
        send.write_all(b"hello again").await.unwrap();
        send.finish().unwrap();
        let mut flow = b2.accept_flow().await.unwrap();
        assert_eq!(flow.header.service, ServiceId(2));
        assert_eq!(
            flow.recv.read_to_end(1 << 20).await.unwrap(),
            b"hello again"
        );
    })
    .await;
}

/// A UDP relay between `a` and `b` that drops every `drop_every`-th datagram from `a` to `b`
/// (repair datagrams included). Returns the relay's address for each side and its task.
async fn lossy_relay(
    a: SocketAddr,
    b: SocketAddr,
    drop_every: usize,
) -> (SocketAddr, SocketAddr, tokio::task::JoinHandle<()>) {
    let for_a = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let for_b = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (ra, rb) = (for_a.local_addr().unwrap(), for_b.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut x, mut y) = (vec![0u8; 65536], vec![0u8; 65536]);
        let mut n = 0usize;
        loop {
            tokio::select! {
                r = for_a.recv_from(&mut x) => {
                    let (len, _) = r.unwrap();
                    n += 1;
                    if n % drop_every != 0 {
                        let _ = for_b.send_to(&x[..len], b).await;
                    }
                }
                r = for_b.recv_from(&mut y) => {
                    let (len, _) = r.unwrap();
                    let _ = for_a.send_to(&y[..len], a).await;
                }
            }
        }
    });
    (ra, rb, task)
}

/// Two FEC endpoints, `a` and `b`, talking through a [`lossy_relay`] that drops every 20th
/// datagram from a to b, on a long fat WAN link, so the path is protected (FEC covers links up
/// to 1 Gbit/s whose bandwidth-delay product holds 192 packets or more: 333 here).
async fn fec_pair_through_lossy_relay() -> (Endpoint, Endpoint, tokio::task::JoinHandle<()>) {
    let (a_id, b_id) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    let (sa, sb, aa, ba) = two_sockets();
    let (ra, rb, relay) = lossy_relay(aa, ba, 20).await;
    let wan = |name: &str, addr, fp| {
        let mut p = PeerConfig::new(name, addr, fp, Rate::from_mbps(200));
        p.rtt_estimate = Duration::from_millis(20);
        p
    };
    let fec = Options {
        fec: true,
        ..Options::default()
    };
    let a = Endpoint::from_socket(
        sa,
        &a_id,
        vec![wan("b", ra, b_id.fingerprint())],
        fec.clone(),
    )
    .unwrap();
    let b = Endpoint::from_socket(sb, &b_id, vec![wan("a", rb, a_id.fingerprint())], fec).unwrap();
    (a, b, relay)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fec_restores_datagrams_a_lossy_path_dropped() {
    bounded(async {
        let (a, b, relay) = fec_pair_through_lossy_relay().await;
        let data = random_bytes(7, 3_000_000);
        let want = sha(&data);
        for round in 0..3 {
            let conn = a.connect(PeerId(0)).await.unwrap();
            let (send, _recv) = conn.open_flow(&header(round)).await.unwrap();
            let sender = send_all(send, data.clone());
            let receiver = async {
                let flow = b.accept_flow().await.unwrap();
                digest_to_end(flow.recv).await
            };
            let (_, got) = tokio::join!(sender, receiver);
            assert_eq!(got, (want, data.len()), "round {round}");
            // The burst's repair goes out once the sender has been idle for the gap.
            let windows = round as u64 + 1;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while a.stats().fec.windows < windows && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let (fa, fb) = (a.stats().fec, b.stats().fec);
        println!("sender {fa:?}\nreceiver {fb:?}");
        assert!(fa.windows >= 1 && fa.repair_sent >= 1, "{fa:?}");
        assert!(fb.repair_received >= 1, "{fb:?}");
        assert!(fb.recovered >= 1, "nothing restored: {fb:?}");
        assert_eq!(fb.invalid, 0);
        // Every loss QUIC declared reached the congestion controller, whose decisions the
        // endpoint sums over its connections.
        let sa = a.stats();
        println!("sender congestion {:?}", sa.congestion);
        assert!(
            sa.packets_lost > 0,
            "the relay dropped nothing QUIC noticed: {sa:?}"
        );
        assert!(sa.congestion.lost_bytes > 0, "{sa:?}");
        relay.abort();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_measures_its_path_and_repairs_a_short_exchange_at_once() {
    bounded(async {
        let (a, b, relay) = fec_pair_through_lossy_relay().await;
        let conn = a.connect(PeerId(0)).await.unwrap();
        // The probe train measures the path before any data: b reports a → b's loss (5 %, as
        // the upper bound of what it counted so far: 6–8 %) and a measures b → a's (none).
        let loss = within_5s(|| {
            let p = a.path_loss();
            match (p[0].to, p[0].from) {
                (Some(to), Some(from)) => Ok((to, from)),
                _ => Err(format!("{p:?}")),
            }
        })
        .await;
        assert!((0.04..0.11).contains(&loss.0), "{loss:?}");
        assert!(loss.1 < 0.01, "{loss:?}");
        // The peer may report its first epoch before the whole train has gone out.
        within_5s(|| {
            let sent = a.stats().fec.probes_sent;
            (sent >= u64::from(headway_fec::PROBE_TRAIN))
                .then_some(())
                .ok_or(format!("{sent} probes sent"))
        })
        .await;
        // Past the train the socket's task sleeps until the next idle probe (100 ms away); a
        // short exchange must still get its repair one idle gap (2 ms here) after it went out.
        tokio::time::sleep(Duration::from_millis(150)).await;
        for round in 0..5u32 {
            let windows = a.stats().fec.windows;
            let (mut send, _recv) = conn.open_flow(&header(round)).await.unwrap();
            send.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            let start = tokio::time::Instant::now();
            while a.stats().fec.windows == windows {
                assert!(
                    start.elapsed() < Duration::from_millis(40),
                    "round {round}: no repair 40 ms after a short exchange"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            send.finish().unwrap();
            let mut flow = b.accept_flow().await.unwrap();
            let got = flow.recv.read_to_end(1 << 16).await.unwrap();
            assert_eq!(got, b"GET / HTTP/1.1\r\n\r\n");
            tokio::time::sleep(Duration::from_millis(37)).await;
        }
        relay.abort();
    })
    .await;
}
