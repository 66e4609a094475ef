use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use tokio::io::AsyncWriteExt as _;

use super::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn version_1_headers_name_the_client_or_nothing() {
    let h = b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\nGET / HTTP/1.1\r\n";
    assert_eq!(
        parse(h),
        Parsed::Header {
            len: 45,
            addresses: Some((addr("192.0.2.7:56324"), addr("198.51.100.1:443")))
        }
    );
    let h = b"PROXY TCP6 2001:db8::7 2001:db8::1 4000 80\r\n";
    assert_eq!(
        parse(h),
        Parsed::Header {
            len: h.len(),
            addresses: Some((addr("[2001:db8::7]:4000"), addr("[2001:db8::1]:80")))
        }
    );
    assert_eq!(
        parse(b"PROXY UNKNOWN\r\nrest"),
        Parsed::Header {
            len: 15,
            addresses: None
        }
    );
    assert_eq!(parse(b"PROXY TCP4 192.0.2.7"), Parsed::Incomplete);
    assert_eq!(parse(b""), Parsed::Incomplete);
}

#[test]
fn version_2_headers_name_the_client_or_nothing() {
    let h = encode(
        Version::V2,
        addr("192.0.2.7:56324"),
        addr("198.51.100.1:443"),
    );
    assert_eq!(h.len(), 28);
    let mut with_data = h.clone();
    with_data.extend_from_slice(b"\x16\x03\x01");
    assert_eq!(
        parse(&with_data),
        Parsed::Header {
            len: 28,
            addresses: Some((addr("192.0.2.7:56324"), addr("198.51.100.1:443")))
        }
    );
    // LOCAL: a health check of the balancer itself; the connection's own addresses stand.
    assert_eq!(
        parse(&encode_local(Version::V2)),
        Parsed::Header {
            len: 16,
            addresses: None
        }
    );
    assert_eq!(encode_local(Version::V1), b"PROXY UNKNOWN\r\n");
    // TLVs after the addresses belong to the header.
    let tlv = v2::Builder::with_addresses(
        v2::Version::Two | v2::Command::Proxy,
        v2::Protocol::Stream,
        (addr("[2001:db8::7]:1"), addr("[2001:db8::1]:2")),
    )
    .write_tlv(v2::Type::Authority, b"www.example.com")
    .unwrap()
    .build()
    .unwrap();
    assert_eq!(
        parse(&tlv),
        Parsed::Header {
            len: 52 + 3 + 15,
            addresses: Some((addr("[2001:db8::7]:1"), addr("[2001:db8::1]:2")))
        }
    );
}

#[test]
fn anything_else_is_refused_with_what_it_is() {
    for bad in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"\x16\x03\x01\x02\x00\x01",
        b"PROXY TCP4 300.0.0.1 1.2.3.4 1 2\r\n",
        b"PROXY TCP5 1.2.3.4 1.2.3.4 1 2\r\n",
    ] {
        assert!(matches!(parse(bad), Parsed::Invalid(_)), "{bad:?}");
    }
    // A version 1 header that never ends is refused at its longest.
    let mut long = b"PROXY TCP4 ".to_vec();
    long.extend(std::iter::repeat_n(b'1', 200));
    assert!(matches!(parse(&long), Parsed::Invalid(_)));
    // A version 2 header longer than taken is refused from its first 16 bytes.
    let mut big = v2::PROTOCOL_PREFIX.to_vec();
    big.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
    match parse(&big) {
        Parsed::Invalid(why) => assert!(why.contains("65551 bytes"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn mixed_families_are_written_as_ipv6() {
    let h = encode(
        Version::V1,
        addr("192.0.2.7:1000"),
        addr("[2001:db8::1]:80"),
    );
    assert_eq!(
        String::from_utf8(h).unwrap(),
        "PROXY TCP6 ::ffff:192.0.2.7 2001:db8::1 1000 80\r\n"
    );
    let h = encode(Version::V2, addr("[2001:db8::7]:1000"), addr("10.0.0.1:80"));
    assert_eq!(
        parse(&h),
        Parsed::Header {
            len: 52,
            addresses: Some((
                addr("[2001:db8::7]:1000"),
                SocketAddr::new(IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped()), 80)
            ))
        }
    );
}

fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)),
        (any::<[u8; 16]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port)),
    ]
}

proptest! {
    /// What `encode` writes, `parse` reads back: the same addresses (in one family), its whole
    /// length and not a byte more; every shorter front is incomplete, never refused.
    #[test]
    fn written_headers_read_back(
        src in socket_addr(),
        dst in socket_addr(),
        v2 in any::<bool>(),
        after in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let version = if v2 { Version::V2 } else { Version::V1 };
        let h = encode(version, src, dst);
        let mut buf = h.clone();
        buf.extend_from_slice(&after);
        prop_assert_eq!(
            parse(&buf),
            Parsed::Header { len: h.len(), addresses: Some(same_family(src, dst)) }
        );
        for cut in 0..h.len() {
            prop_assert_eq!(parse(&h[..cut]), Parsed::Incomplete, "cut at {}", cut);
        }
    }

    /// Any bytes: no panic, and a header is never longer than what was given or the limit.
    #[test]
    fn any_bytes_parse_or_are_refused(
        buf in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300),
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(|mut v| {
                let mut b = v2::PROTOCOL_PREFIX.to_vec();
                b.append(&mut v);
                b
            }),
            "PROXY [A-Z0-9 .:]{0,100}(\r\n)?".prop_map(String::into_bytes),
        ]
    ) {
        if let Parsed::Header { len, .. } = parse(&buf) {
            prop_assert!(len <= buf.len() && len <= MAX_HEADER);
        }
    }
}

/// A client socket of a real loopback connection, and the peer's end.
async fn pair() -> (ClientSocket, tokio::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = tokio::net::TcpStream::connect(l.local_addr().unwrap())
        .await
        .unwrap();
    let (s, _) = l.accept().unwrap();
    s.set_nonblocking(true).unwrap();
    (ClientSocket::new(s), peer)
}

#[tokio::test]
async fn a_header_is_taken_off_the_socket_and_what_follows_stays() {
    let (mut s, mut peer) = pair().await;
    let mut sent = encode(Version::V1, addr("192.0.2.7:1"), addr("192.0.2.8:2"));
    sent.extend_from_slice(b"hello");
    peer.write_all(&sent).await.unwrap();
    let got = read_header(&mut s, Duration::from_secs(5)).await.unwrap();
    assert_eq!(got, Some((addr("192.0.2.7:1"), addr("192.0.2.8:2"))));
    let mut rest = [0u8; 5];
    s.read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest, b"hello");
}

#[tokio::test]
async fn a_header_that_arrives_in_pieces_is_waited_for() {
    let (mut s, mut peer) = pair().await;
    let h = encode(
        Version::V2,
        addr("[2001:db8::7]:9"),
        addr("[2001:db8::1]:443"),
    );
    let sender = tokio::spawn(async move {
        for piece in h.chunks(7) {
            peer.write_all(piece).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        peer.write_all(b"after").await.unwrap();
        peer
    });
    let got = read_header(&mut s, Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        got,
        Some((addr("[2001:db8::7]:9"), addr("[2001:db8::1]:443")))
    );
    let mut rest = [0u8; 5];
    s.read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest, b"after");
    drop(sender.await.unwrap());
}

#[tokio::test]
async fn no_header_a_broken_one_or_silence_is_an_error() {
    let (mut s, mut peer) = pair().await;
    peer.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    assert!(matches!(
        read_header(&mut s, Duration::from_secs(5)).await,
        Err(HeaderError::Invalid(_))
    ));
    let (mut s, mut peer) = pair().await;
    peer.write_all(b"PROXY TCP4 1.2.3.4").await.unwrap();
    assert!(matches!(
        read_header(&mut s, Duration::from_millis(100)).await,
        Err(HeaderError::Timeout(_))
    ));
    drop(peer);
    let (mut s, peer) = pair().await;
    drop(peer);
    assert!(matches!(
        read_header(&mut s, Duration::from_secs(5)).await,
        Err(HeaderError::Io(_))
    ));
}
