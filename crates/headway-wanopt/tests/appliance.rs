//! End-to-end tests of the appliance pair on loopback: a client → appliance A → QUIC tunnel →
//! appliance B → origin server, and fail-open when B is absent or not authenticated.

use std::net::SocketAddr;
use std::time::Duration;

use headway_core::rng::Rng;
use headway_core::Rate;
use headway_dedup::DedupKey;
use headway_origin::corpus::{fill, Kind};
use headway_store::StoreConfig;
use headway_tunnel::{Identity, Options, PeerConfig, ServiceClass, ServiceId};
use headway_wanopt::{Appliance, ApplianceConfig, ServiceConfig};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SERVICE: ServiceId = ServiceId(7);
const LOCAL: &str = "127.0.0.1:0";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn key() -> DedupKey {
    DedupKey::new([0x42; 32])
}

fn data(kind: Kind, len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; len];
    fill(kind, seed, 0, &mut v);
    v
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

fn peer(name: &str, at: SocketAddr, id: &Identity) -> PeerConfig {
    PeerConfig::new(name, at, id.fingerprint(), Rate::from_mbps(1000))
}

/// An origin that echoes every byte and half-closes after the client's EOF.
async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind(LOCAL).await.unwrap();
    let at = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                if tokio::io::copy(&mut r, &mut w).await.is_ok() {
                    let _ = w.shutdown().await;
                }
            });
        }
    });
    at
}

/// An origin that reads the request to EOF, then replies with its SHA-256 and `reply`.
async fn reply_after_eof_server(reply: Vec<u8>) -> SocketAddr {
    let l = TcpListener::bind(LOCAL).await.unwrap();
    let at = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let reply = reply.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                if s.read_to_end(&mut req).await.is_ok() {
                    let _ = s.write_all(&sha(&req)).await;
                    let _ = s.write_all(&reply).await;
                    let _ = s.shutdown().await;
                }
            });
        }
    });
    at
}

/// An origin that sends `file` to every client, then closes.
async fn file_server(file: Vec<u8>) -> SocketAddr {
    let l = TcpListener::bind(LOCAL).await.unwrap();
    let at = l.local_addr().unwrap();
    let file = std::sync::Arc::new(file);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let file = file.clone();
            tokio::spawn(async move {
                if s.write_all(&file).await.is_ok() {
                    let _ = s.shutdown().await;
                }
            });
        }
    });
    at
}

/// Sends `data` (then FIN) while reading the whole reply.
async fn exchange(to: SocketAddr, data: &[u8]) -> Vec<u8> {
    let s = TcpStream::connect(to).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let data = data.to_vec();
    let writer = tokio::spawn(async move {
        w.write_all(&data).await.unwrap();
        w.shutdown().await.unwrap();
    });
    let mut got = Vec::new();
    r.read_to_end(&mut got).await.unwrap();
    writer.await.unwrap();
    got
}

struct Pair {
    a: Appliance,
    b: Option<Appliance>,
    _udp: Option<std::net::UdpSocket>,
}

impl Pair {
    fn service(&self) -> SocketAddr {
        self.a.service_addr(SERVICE).unwrap()
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Far {
    Running,
    /// A bound UDP socket that never answers.
    Silent,
    /// B runs, but A pins another certificate for it.
    WrongFingerprint,
}

async fn pair(target: SocketAddr, class: ServiceClass, far: Far) -> Pair {
    pair_with(target, class, far, 256 << 20, None).await
}

/// What a pair keeps across restarts: identities and disk store directories.
struct Disks {
    id_a: Identity,
    id_b: Identity,
    dir_a: tempfile::TempDir,
    dir_b: tempfile::TempDir,
}

impl Disks {
    fn new() -> Self {
        Disks {
            id_a: Identity::generate().unwrap(),
            id_b: Identity::generate().unwrap(),
            dir_a: tempfile::tempdir().unwrap(),
            dir_b: tempfile::tempdir().unwrap(),
        }
    }

    /// A running pair with a dedup-disk service to `target`, on these identities and stores.
    async fn pair(&self, target: SocketAddr) -> Pair {
        pair_with(
            target,
            ServiceClass::DedupDisk,
            Far::Running,
            256 << 20,
            Some(self),
        )
        .await
    }

    fn store(dir: &tempfile::TempDir) -> Option<StoreConfig> {
        Some(StoreConfig::disk(dir.path(), 256 << 20))
    }
}

async fn pair_with(
    target: SocketAddr,
    class: ServiceClass,
    far: Far,
    b_store: u64,
    disks: Option<&Disks>,
) -> Pair {
    let (id_a, id_b) = match disks {
        Some(d) => (d.id_a.clone(), d.id_b.clone()),
        None => (Identity::generate().unwrap(), Identity::generate().unwrap()),
    };
    // A silent far side is found out by the handshake timeout: a short one keeps those tests
    // quick. Otherwise the handshake succeeds or is refused at once, and the timeout only
    // has to outlast a handshake on a loaded machine (a timed-out one would send every flow
    // direct for `retry_after`).
    let options = Options {
        handshake_timeout: if far == Far::Silent {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(10)
        },
        ..Options::default()
    };
    let (b, udp, b_addr) = if far == Far::Silent {
        let udp = std::net::UdpSocket::bind(LOCAL).unwrap();
        let at = udp.local_addr().unwrap();
        (None, Some(udp), at)
    } else {
        // B only accepts in these tests: A's address is one that never answers (B's dial
        // to keep a tunnel warm hangs; A's connection is used meanwhile).
        let b = Appliance::start(ApplianceConfig {
            identity: id_b.clone(),
            tunnel_listen: addr(LOCAL),
            peers: vec![peer("a", addr("127.0.0.1:9"), &id_a)],
            tunnel_options: options.clone(),
            dedup_key: key(),
            memory_store_bytes: b_store,
            retry_after: Duration::from_secs(600),
            services: vec![],
            disk_store: disks.and_then(|d| Disks::store(&d.dir_b)),
            intercept: None,
        })
        .await
        .unwrap();
        let at = b.tunnel_addr().unwrap();
        (Some(b), None, at)
    };
    let pinned = if far == Far::WrongFingerprint {
        Identity::generate().unwrap()
    } else {
        id_b
    };
    let a = Appliance::start(ApplianceConfig {
        identity: id_a,
        tunnel_listen: addr(LOCAL),
        peers: vec![peer("b", b_addr, &pinned)],
        tunnel_options: options,
        dedup_key: key(),
        memory_store_bytes: 256 << 20,
        retry_after: Duration::from_secs(600),
        services: vec![ServiceConfig {
            id: SERVICE,
            listen: addr(LOCAL),
            peer: "b".into(),
            target,
            class,
        }],
        disk_store: disks.and_then(|d| Disks::store(&d.dir_a)),
        intercept: None,
    })
    .await
    .unwrap();
    Pair { a, b, _udp: udp }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doc_data_both_ways_then_second_pass_is_nearly_free() {
    let origin = echo_server().await;
    let p = pair(origin, ServiceClass::DedupMemory, Far::Running).await;
    let doc = data(Kind::Doc, 20 << 20, 1);

    // (a) 20 MB up and the same 20 MB back, SHA-256 equal.
    let got = exchange(p.service(), &doc).await;
    assert_eq!(got.len(), doc.len());
    assert_eq!(sha(&got), sha(&doc));
    let first = p.a.stats().total();
    eprintln!("first pass: {first:?}");
    assert_eq!(first.flows_optimized, 1);
    assert!(first.flows_passed_through.is_empty());
    assert_eq!(first.lan_in, doc.len() as u64);
    assert_eq!(first.lan_out, doc.len() as u64);
    // DOC-like data compresses about 3:1; and the echo is deduplicated against the upload.
    assert!(
        first.wan_bytes() < doc.len() as u64 / 2,
        "first pass put {} bytes on the wan",
        first.wan_bytes()
    );

    // (b) The same data again: under 1 % of the first pass's WAN bytes.
    let got = exchange(p.service(), &doc).await;
    assert_eq!(sha(&got), sha(&doc));
    let second = p.a.stats().total();
    eprintln!("second pass: {second:?}");
    let wan = second.wan_bytes() - first.wan_bytes();
    assert!(
        wan * 100 < first.wan_bytes(),
        "second pass {wan} bytes vs first {}",
        first.wan_bytes()
    );
    assert_eq!(second.flows_optimized, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_flows_of_random_sizes_are_exact() {
    let origin = echo_server().await;
    let p = pair(origin, ServiceClass::DedupMemory, Far::Running).await;
    let mut rng = Rng::from_seed(3);
    let mut sizes = vec![0usize, 1, 2, 2 << 20];
    while sizes.len() < 30 {
        // Log-uniform up to 2 MiB.
        sizes.push((2f64.powf(rng.unit() * 21.0)) as usize);
    }
    let mut flows = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let kind = [Kind::Doc, Kind::Random, Kind::Html, Kind::Pdf][i % 4];
        let bytes = data(kind, n, i as u64 % 5);
        let to = p.service();
        flows.push(tokio::spawn(async move {
            let got = exchange(to, &bytes).await;
            (got.len() == bytes.len() && sha(&got) == sha(&bytes), n)
        }));
    }
    for f in flows {
        let (ok, n) = f.await.unwrap();
        assert!(ok, "a flow of {n} bytes came back different");
    }
    let s = p.a.stats().total();
    assert_eq!(s.flows_optimized, 30);
    assert_eq!(s.flows_failed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_class_carries_data_exactly() {
    let origin = echo_server().await;
    for class in [ServiceClass::PassThrough, ServiceClass::Compress] {
        let p = pair(origin, class, Far::Running).await;
        let bytes = data(Kind::Html, 3 << 20, 9);
        assert_eq!(sha(&exchange(p.service(), &bytes).await), sha(&bytes));
        let s = p.a.stats();
        assert_eq!(s.groups.len(), 1);
        assert_eq!(s.groups[0].flows_optimized, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_still_delivers_the_full_reply() {
    let reply = data(Kind::Doc, 1 << 20, 4);
    let origin = reply_after_eof_server(reply.clone()).await;
    let p = pair(origin, ServiceClass::DedupMemory, Far::Running).await;
    let request = data(Kind::Random, 300_000, 5);
    // The server answers only after it saw our FIN, so this also proves the FIN crossed.
    let got = exchange(p.service(), &request).await;
    assert_eq!(got.len(), 32 + reply.len());
    assert_eq!(got[..32], sha(&request));
    assert_eq!(sha(&got[32..]), sha(&reply));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_peer_fails_open() {
    let origin = echo_server().await;
    let p = pair(origin, ServiceClass::DedupMemory, Far::Silent).await;
    let bytes = data(Kind::Doc, 500_000, 6);
    assert_eq!(sha(&exchange(p.service(), &bytes).await), sha(&bytes));
    let s = p.a.stats().total();
    assert_eq!(s.flows_optimized, 0);
    assert_eq!(s.flows_passed_through.get("timeout"), Some(&1));
    assert_eq!(s.wan_bytes(), 0);
    assert_eq!(s.lan_in, bytes.len() as u64);
    // The peer is held down: the next flows fail open without a new attempt.
    for _ in 0..3 {
        assert_eq!(sha(&exchange(p.service(), &bytes).await), sha(&bytes));
    }
    let s = p.a.stats().total();
    assert_eq!(s.flows_passed_through.get("timeout"), Some(&4));
    assert_eq!(p.a.tunnel_stats().refused, 1);
}

/// A peer this side cannot reach (a branch behind NAT: its configured address never answers)
/// but that connects in: its flows are served at once, and this side's flows to it go over
/// its connection — neither waits for this side's own dial to time out, and neither fails
/// open because that dial failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_cannot_be_dialled_but_dials_in_carries_flows_both_ways() {
    let origin = echo_server().await;
    let (id_a, id_b) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    // Where the hub thinks the branch is: a socket that never answers.
    let silent = std::net::UdpSocket::bind(LOCAL).unwrap();
    // Long enough that a flow waiting for the hub's dial would miss the deadline below.
    let options = Options {
        handshake_timeout: Duration::from_secs(60),
        ..Options::default()
    };
    let service = |peer: &str| ServiceConfig {
        id: SERVICE,
        listen: addr(LOCAL),
        peer: peer.into(),
        target: origin,
        class: ServiceClass::DedupMemory,
    };
    let config = |identity: &Identity, peer: PeerConfig, s: ServiceConfig| ApplianceConfig {
        identity: identity.clone(),
        tunnel_listen: addr(LOCAL),
        peers: vec![peer],
        tunnel_options: options.clone(),
        dedup_key: key(),
        memory_store_bytes: 64 << 20,
        retry_after: Duration::from_secs(600),
        services: vec![s],
        disk_store: None,
        intercept: None,
    };
    // The hub starts dialling the branch at once (to keep a tunnel warm); the dial hangs.
    let hub = Appliance::start(config(
        &id_b,
        peer("branch", silent.local_addr().unwrap(), &id_a),
        service("branch"),
    ))
    .await
    .unwrap();
    let branch = Appliance::start(config(
        &id_a,
        peer("hub", hub.tunnel_addr().unwrap(), &id_b),
        service("hub"),
    ))
    .await
    .unwrap();
    let bytes = data(Kind::Doc, 300_000, 9);
    let within = |what: &'static str, to: SocketAddr| {
        let bytes = bytes.clone();
        async move {
            let got = tokio::time::timeout(Duration::from_secs(20), exchange(to, &bytes))
                .await
                .unwrap_or_else(|_| panic!("{what}: the flow waited for the hub's dial"));
            assert_eq!(sha(&got), sha(&bytes), "{what}");
        }
    };
    within("branch to hub", branch.service_addr(SERVICE).unwrap()).await;
    within("hub to branch", hub.service_addr(SERVICE).unwrap()).await;
    // Each side counts both flows: its own outbound one and the other's inbound one.
    for (name, a) in [("branch", &branch), ("hub", &hub)] {
        let s = a.stats().total();
        assert_eq!(
            (s.flows_optimized, s.flows_passed_through.len()),
            (2, 0),
            "{name}: {s:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_fingerprint_fails_open_as_not_authenticated() {
    let origin = echo_server().await;
    let p = pair(origin, ServiceClass::DedupMemory, Far::WrongFingerprint).await;
    let bytes = data(Kind::Doc, 200_000, 7);
    assert_eq!(sha(&exchange(p.service(), &bytes).await), sha(&bytes));
    let s = p.a.stats().total();
    assert_eq!(s.flows_optimized, 0);
    assert_eq!(s.flows_passed_through.get("unauthenticated"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diverged_stores_are_repaired_through_the_back_channel() {
    // B's store (16 MiB) holds X (8 MiB) and then Y (12 MiB) only by evicting the start of X.
    // A (256 MiB) still believes B holds all of X, so when X comes again B's decoder cannot
    // resolve A's references: it sends needs in-band, A's encoder replies, the bytes stay exact.
    let origin = echo_server().await;
    let p = pair_with(
        origin,
        ServiceClass::DedupMemory,
        Far::Running,
        16 << 20,
        None,
    )
    .await;
    let x = data(Kind::Doc, 8 << 20, 11);
    let y = data(Kind::Doc, 12 << 20, 12);
    for d in [&x, &y, &x] {
        assert_eq!(sha(&exchange(p.service(), d).await), sha(d));
    }
    let s = p.a.stats().total();
    assert_eq!(s.flows_optimized, 3);
    assert_eq!(s.flows_failed, 0);
    let b = p.b.as_ref().unwrap().stats().total();
    eprintln!("a: {s:?}\nb: {b:?}");
    assert!(
        b.needs_sent > 0,
        "the stores never diverged: the test proves nothing"
    );
    assert!(s.needs_served > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reset_reaches_the_server() {
    // The origin reports how its read ended: an error (reset) or a clean EOF.
    let l = TcpListener::bind(LOCAL).await.unwrap();
    let origin = l.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut sink = Vec::new();
        let _ = tx.send(s.read_to_end(&mut sink).await.is_err());
    });
    let p = pair(origin, ServiceClass::DedupMemory, Far::Running).await;
    let mut c = TcpStream::connect(p.service()).await.unwrap();
    c.write_all(&data(Kind::Doc, 100_000, 1)).await.unwrap();
    // Wait until the flow is set up on B's side (B connected to the origin), then reset. (A
    // reset that reaches B before it has read the flow header ends the stream before B ever
    // connects: nothing for the origin to see.)
    let b = p.b.as_ref().expect("B runs");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while b.stats().total().flows_optimized == 0 {
        assert!(tokio::time::Instant::now() < deadline, "flow never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    #[allow(deprecated)]
    c.set_linger(Some(Duration::ZERO)).unwrap();
    drop(c);
    let reset = tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .unwrap()
        .unwrap();
    assert!(reset, "the server saw a clean end instead of a reset");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while p.a.stats().total().flows_failed == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "flow not counted as failed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn stats_serialize() {
    let s = headway_wanopt::ApplianceStats::default();
    let t = s.total();
    assert_eq!(t.peer, "*");
    assert_eq!(t.wan_bytes(), 0);
    let json = serde_json::to_value(&t).unwrap();
    assert_eq!(json["class"], "*");
    assert_eq!(json["flows_passed_through"], serde_json::json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_exchanges_do_not_stall() {
    // Ping-pong without closing: each small write must be flushed through both encoders.
    let origin = echo_server().await;
    for class in [ServiceClass::DedupMemory, ServiceClass::Compress] {
        let p = pair(origin, class, Far::Running).await;
        let mut c = TcpStream::connect(p.service()).await.unwrap();
        for i in 0..20u8 {
            let msg = [i; 10];
            c.write_all(&msg).await.unwrap();
            let mut got = [0u8; 10];
            // A hang guard, not a speed threshold.
            tokio::time::timeout(Duration::from_secs(30), c.read_exact(&mut got))
                .await
                .expect("the exchange stalled")
                .unwrap();
            assert_eq!(got, msg);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reset_reaches_the_client() {
    // The origin reads the first bytes, then aborts (RST).
    let l = TcpListener::bind(LOCAL).await.unwrap();
    let origin = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.unwrap();
        #[allow(deprecated)]
        s.set_linger(Some(Duration::ZERO)).unwrap();
    });
    let p = pair(origin, ServiceClass::DedupMemory, Far::Running).await;
    let mut c = TcpStream::connect(p.service()).await.unwrap();
    c.write_all(b"x").await.unwrap();
    let mut sink = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(30), c.read_to_end(&mut sink))
        .await
        .expect("the reset never arrived");
    assert!(r.is_err(), "the client saw a clean end instead of a reset");
    assert!(sink.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_destination_resets_the_client() {
    // A closed port behind B: B refuses the flow and the client sees a reset, as if direct.
    // Bound but not listening: connections are refused, and the port cannot be reused.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(addr(LOCAL)).unwrap();
    let closed = socket.local_addr().unwrap();
    let p = pair(closed, ServiceClass::DedupMemory, Far::Running).await;
    // On loopback the reset can arrive before `connect` returns; either way it must be a reset.
    let r = match TcpStream::connect(p.service()).await {
        Err(e) => Err(e),
        Ok(mut c) => {
            let mut sink = Vec::new();
            tokio::time::timeout(Duration::from_secs(30), c.read_to_end(&mut sink))
                .await
                .expect("the reset never arrived")
        }
    };
    let e = r.expect_err("the client saw a clean end instead of a reset");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    let s = p.b.as_ref().unwrap().stats().total();
    assert_eq!(s.flows_failed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_flow_does_not_disturb_the_others() {
    let origin = echo_server().await;
    let p = pair(origin, ServiceClass::DedupMemory, Far::Running).await;
    let big = data(Kind::Doc, 6 << 20, 21);
    let to = p.service();
    let good = {
        let big = big.clone();
        tokio::spawn(async move { exchange(to, &big).await })
    };
    for i in 0..5 {
        let mut c = TcpStream::connect(to).await.unwrap();
        c.write_all(&data(Kind::Random, 50_000, i)).await.unwrap();
        let mut some = [0u8; 1000];
        c.read_exact(&mut some).await.unwrap();
        #[allow(deprecated)]
        c.set_linger(Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(sha(&good.await.unwrap()), sha(&big));
    let s = p.a.stats().total();
    assert_eq!(s.flows_optimized, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_class_remembers_across_restarts() {
    let file = data(Kind::Doc, 20 << 20, 31);
    let origin = file_server(file.clone()).await;
    let disks = Disks::new();
    let p = disks.pair(origin).await;
    for _ in 0..2 {
        assert_eq!(sha(&exchange(p.service(), b"").await), sha(&file));
    }
    let warm = p.a.stats();
    eprintln!("before restart: {:?}\n{:?}", warm.total(), warm.stores);
    let disk = warm.stores.iter().find(|s| s.store == "disk").unwrap();
    assert!(
        disk.chunks > 0 && disk.bytes >= file.len() as u64 / 2,
        "{disk:?}"
    );
    assert_eq!(disk.capacity, 256 << 20);
    // The memory store saw none of it: the class went to the disk store.
    assert_eq!(warm.stores[0].chunks, 0);
    // B encoded the file twice; the second time its chunks were all held by A.
    let b_disk = p.b.as_ref().unwrap().stats().stores[1];
    assert!(b_disk.hit_rate() > 0.45, "{b_disk:?}");
    drop(p);

    let p = disks.pair(origin).await;
    assert_eq!(sha(&exchange(p.service(), b"").await), sha(&file));
    let s = p.a.stats();
    let b = p.b.as_ref().unwrap().stats();
    eprintln!(
        "after restart: a {:?}\nb {:?}\n{:?}",
        s.total(),
        b.total(),
        b.stores
    );
    assert!(
        s.total().wan_bytes() * 100 <= file.len() as u64,
        "the third fetch put {} bytes on the wan",
        s.total().wan_bytes()
    );
    assert!(b.stores[1].hit_rate() > 0.99, "{:?}", b.stores[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_disk_store_still_gives_exact_output() {
    let file = data(Kind::Doc, 8 << 20, 32);
    let origin = file_server(file.clone()).await;
    let disks = Disks::new();
    let p = disks.pair(origin).await;
    assert_eq!(sha(&exchange(p.service(), b"").await), sha(&file));
    drop(p);
    // A (the decoding side of a fetch) forgets everything; B still believes A holds the file.
    for e in std::fs::read_dir(disks.dir_a.path()).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let p = disks.pair(origin).await;
    assert_eq!(sha(&exchange(p.service(), b"").await), sha(&file));
    let a = p.a.stats().total();
    eprintln!("after wiping a: {a:?}");
    assert!(
        a.needs_sent > 0,
        "the stores never diverged: the test proves nothing"
    );
    assert_eq!(a.flows_failed, 0);
}

#[tokio::test]
async fn a_disk_store_that_cannot_be_opened_fails_the_start() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let err = Appliance::start(ApplianceConfig {
        identity: Identity::generate().unwrap(),
        tunnel_listen: addr(LOCAL),
        peers: vec![],
        tunnel_options: Options::default(),
        dedup_key: key(),
        memory_store_bytes: 1 << 20,
        retry_after: Duration::from_secs(1),
        services: vec![],
        // A regular file where the store's directory should be.
        disk_store: Some(StoreConfig::disk(file.path(), 256 << 20)),
        intercept: None,
    })
    .await
    .unwrap_err();
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(
        matches!(err, headway_wanopt::StartError::Store(_)),
        "{err:?}"
    );
    assert!(msg.starts_with("disk store: ") && msg.contains(&file.path().display().to_string()));
}

#[path = "appliance/intercept.rs"]
mod intercept;

/// An origin that sends the first `half` bytes of `file` and then waits (a transfer in
/// progress), until the test lets it go on (never, here).
async fn stalling_server(file: Vec<u8>, half: usize) -> SocketAddr {
    let l = TcpListener::bind(LOCAL).await.unwrap();
    let at = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let part = file[..half].to_vec();
            tokio::spawn(async move {
                let _ = s.write_all(&part).await;
                tokio::time::sleep(Duration::from_secs(60)).await;
            });
        }
    });
    at
}

/// Tearing the appliances down mid-transfer the way a process exit does — every task dropped
/// where it stands, every socket closed by the runtime (a kill closes them the same way) — must
/// reset the client, never end its stream with a FIN: a client reading to EOF would take the
/// truncated stream for the whole file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_appliances_runtime_mid_transfer_resets_the_client() {
    let file = data(Kind::Random, 4 << 20, 9);
    let origin = stalling_server(file.clone(), 1 << 20).await;
    // The pair runs on a runtime of its own, which the test then drops like an exiting process.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let p = rt.spawn(pair(origin, ServiceClass::DedupMemory, Far::Running));
    let p = p.await.unwrap();
    let mut s = TcpStream::connect(p.service()).await.unwrap();
    s.write_all(b"GET\n").await.unwrap();
    let mut got = vec![0u8; 1 << 20];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(got, file[..1 << 20]);
    std::mem::forget(p); // its sockets go with the runtime, as with a process
    rt.shutdown_background();
    let mut rest = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut rest))
        .await
        .expect("the client learns at once");
    assert!(
        r.is_err(),
        "the stream ended cleanly after {} more bytes: a truncated file looks complete",
        rest.len()
    );
}

/// Waits (bounded) until `cond` holds for the appliance's flow table; returns that table.
async fn flows_until(
    a: &Appliance,
    what: &str,
    cond: impl Fn(&[headway_wanopt::FlowSnapshot]) -> bool,
) -> Vec<headway_wanopt::FlowSnapshot> {
    let deadline = headway_core::SystemClock::now() + Duration::from_secs(10);
    loop {
        let flows = a.flows();
        if cond(&flows) {
            return flows;
        }
        assert!(
            headway_core::SystemClock::now() < deadline,
            "{what}: {flows:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_flows_are_listed_on_both_appliances_with_their_own_bytes() {
    use headway_wanopt::Direction;
    let origin = echo_server().await;
    let p = pair(origin, ServiceClass::DedupMemory, Far::Running).await;
    let b = p.b.as_ref().unwrap();
    assert!(p.a.flows().is_empty());
    // Two open flows; the first sends 300 KB of DOC-like data and waits for the echo.
    let mut one = TcpStream::connect(p.service()).await.unwrap();
    let two = TcpStream::connect(p.service()).await.unwrap();
    let bytes = data(Kind::Doc, 300_000, 9);
    one.write_all(&bytes).await.unwrap();
    let mut echoed = vec![0u8; bytes.len()];
    one.read_exact(&mut echoed).await.unwrap();
    assert_eq!(sha(&echoed), sha(&bytes));
    let mine = flows_until(&p.a, "two outbound flows, one with its bytes", |f| {
        f.len() == 2 && f.iter().any(|f| f.lan_out == 300_000)
    })
    .await;
    let busy = mine.iter().find(|f| f.lan_in == 300_000).unwrap();
    assert_eq!(busy.direction, Direction::Outbound);
    assert_eq!((busy.peer.as_str(), busy.class), ("b", "dedup-memory"));
    assert_eq!(busy.client, Some(one.local_addr().unwrap().to_string()));
    assert_eq!(busy.destination, origin.to_string());
    assert_eq!(busy.passed_through, None);
    // Compressed on the way out: fewer WAN bytes than LAN bytes.
    assert!(busy.wan_out > 0 && busy.wan_out < 300_000, "{busy:?}");
    let quiet = mine.iter().find(|f| f.id != busy.id).unwrap();
    assert_eq!((quiet.lan_in, quiet.lan_out), (0, 0));
    // The far appliance lists the same two, inbound, to the origin.
    let far = flows_until(b, "two inbound flows", |f| {
        f.len() == 2 && f.iter().any(|f| f.lan_in == 300_000)
    })
    .await;
    assert!(far
        .iter()
        .all(|f| f.direction == Direction::Inbound && f.client.is_none() && f.peer == "a"));
    // A flow that ends leaves the table on both sides.
    drop(one);
    flows_until(&p.a, "one flow left", |f| f.len() == 1).await;
    flows_until(b, "one flow left", |f| f.len() == 1).await;
    drop(two);
    flows_until(&p.a, "no flow left", <[_]>::is_empty).await;
    flows_until(b, "no flow left", <[_]>::is_empty).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_that_fails_open_is_listed_with_its_reason() {
    let origin = echo_server().await;
    let p = pair(origin, ServiceClass::DedupMemory, Far::Silent).await;
    let mut c = TcpStream::connect(p.service()).await.unwrap();
    // Wait out the handshake timeout: then the flow goes direct.
    c.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    c.read_exact(&mut got).await.unwrap();
    let flows = flows_until(&p.a, "a flow passed through", |f| {
        f.len() == 1 && f.first().is_some_and(|f| f.lan_out == 4)
    })
    .await;
    assert_eq!(flows[0].passed_through, Some("timeout"));
    assert_eq!((flows[0].lan_in, flows[0].wan_out), (4, 0));
    drop(c);
    flows_until(&p.a, "the flow gone", <[_]>::is_empty).await;
}
