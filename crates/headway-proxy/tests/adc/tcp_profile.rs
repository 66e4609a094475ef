//! TCP profiles as the running proxy sets them — read back with getsockopt from the proxy's own
//! live sockets (duplicated with `headway_io::fds`, the in-process `ss`) — and the flood
//! defenses of the listener.

use std::os::fd::OwnedFd;

use headway_proxy::ApplyError;
use socket2::SockRef;

use super::*;

/// Whether this kernel has TCP_RTO_MIN_US and TCP_DELACK_MAX_US (Linux 6.15).
fn has_615_options() -> bool {
    let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    headway_io::tcp::rto_min(&s).is_ok()
}

/// The proxy's socket whose local and peer addresses are `local` and `peer` (a `None` matches
/// any), waiting for it to appear within a deadline.
async fn socket_of(local: Option<SocketAddr>, peer: Option<SocketAddr>) -> OwnedFd {
    let deadline = SystemClock::now() + Duration::from_secs(10);
    loop {
        for s in headway_io::fds::own_sockets().unwrap() {
            let r = SockRef::from(&s.fd);
            let l = r.local_addr().ok().and_then(|a| a.as_socket());
            let p = r.peer_addr().ok().and_then(|a| a.as_socket());
            if p.is_some()
                && local.is_none_or(|x| l == Some(x))
                && peer.is_none_or(|x| p == Some(x))
            {
                return s.fd;
            }
        }
        assert!(
            SystemClock::now() < deadline,
            "no socket {local:?} → {peer:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn congestion(fd: &OwnedFd) -> String {
    let cc = SockRef::from(fd).tcp_congestion().unwrap();
    String::from_utf8_lossy(cc.split(|b| *b == 0).next().unwrap()).into_owned()
}

const PROFILES: &str = "\
[[tcp_profile]]
name = \"clients\"
nagle = true
congestion = \"reno\"
keepalive_idle = \"45s\"
keepalive_interval = \"7s\"
keepalive_count = 3
user_timeout = \"25s\"
notsent_lowat = \"16KiB\"
quickack = true
[[tcp_profile]]
name = \"servers\"
congestion = \"cubic\"
keepalive_idle = \"90s\"
user_timeout = \"11s\"
";

/// The 6.15 options, when the kernel has them.
fn with_615(p: &str, rto: &str, delack: &str) -> String {
    if has_615_options() {
        format!("{p}min_rto = \"{rto}\"\ndelayed_ack = \"{delack}\"\n")
    } else {
        p.to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_virtual_server_sets_both_profiles_on_its_live_connections() {
    let origin = Origin::start("o", Duration::ZERO).await;
    // PROFILES with the 6.15 options added to each section.
    let (clients, servers) = PROFILES.split_at(
        PROFILES
            .find("[[tcp_profile]]\nname = \"servers\"")
            .unwrap(),
    );
    let profiles = format!(
        "{}{}",
        with_615(clients, "80ms", "40ms"),
        with_615(servers, "120ms", "20ms")
    );
    let text = format!(
        "{}{}{profiles}",
        group("g", "tcp_profile = \"servers\"", &[(origin.addr, "")]),
        "[[virtual_server]]\nname = \"l4\"\nkind = \"tcp\"\nlisten = \"127.0.0.1:0\"\n\
         group = \"g\"\ntcp_profile = \"clients\"\n"
    );
    let (p, addr) = proxy(&text).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = client.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // The client connection as the proxy accepted it, and the proxy's connection to the origin.
    let accepted = socket_of(Some(addr), Some(client.local_addr().unwrap())).await;
    let upstream = socket_of(None, Some(origin.addr)).await;
    let a = SockRef::from(&accepted);
    assert!(!a.tcp_nodelay().unwrap(), "nagle = true: TCP_NODELAY off");
    assert_eq!(congestion(&accepted), "reno");
    assert!(a.keepalive().unwrap());
    assert_eq!(a.tcp_keepalive_time().unwrap(), Duration::from_secs(45));
    assert_eq!(a.tcp_keepalive_interval().unwrap(), Duration::from_secs(7));
    assert_eq!(a.tcp_keepalive_retries().unwrap(), 3);
    assert_eq!(a.tcp_user_timeout().unwrap(), Some(Duration::from_secs(25)));
    assert_eq!(a.tcp_notsent_lowat().unwrap(), 16 << 10);
    let u = SockRef::from(&upstream);
    assert!(u.tcp_nodelay().unwrap(), "nagle off by default");
    assert_eq!(congestion(&upstream), "cubic");
    assert_eq!(u.tcp_keepalive_time().unwrap(), Duration::from_secs(90));
    assert_eq!(u.tcp_user_timeout().unwrap(), Some(Duration::from_secs(11)));
    if has_615_options() {
        assert_eq!(
            headway_io::tcp::rto_min(&accepted).unwrap(),
            Duration::from_millis(80)
        );
        assert_eq!(
            headway_io::tcp::delack_max(&accepted).unwrap(),
            Duration::from_millis(40)
        );
        assert_eq!(
            headway_io::tcp::rto_min(&upstream).unwrap(),
            Duration::from_millis(120)
        );
        assert_eq!(
            headway_io::tcp::delack_max(&upstream).unwrap(),
            Duration::from_millis(20)
        );
    }
    drop(client);
    p.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_virtual_server_sets_its_profile_on_accepted_connections_and_presets_work() {
    let origin = Origin::start("o", Duration::ZERO).await;
    let text = format!(
        "{}{}{PROFILES}",
        group("g", "", &[(origin.addr, "")]),
        vs("g", "tcp_profile = \"clients\"")
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    assert_eq!(get(&c, addr, "/healthz").await.status, 200);
    let accepted = socket_of(Some(addr), None).await;
    let a = SockRef::from(&accepted);
    assert!(!a.tcp_nodelay().unwrap(), "nagle = true: TCP_NODELAY off");
    assert_eq!(congestion(&accepted), "reno");
    assert_eq!(a.tcp_user_timeout().unwrap(), Some(Duration::from_secs(25)));
    // A reload to a preset applies to the next connection.
    let text = format!(
        "{}{}",
        group("g", "", &[(origin.addr, "")]),
        vs("g", "tcp_profile = \"aol-svc-std\"")
    );
    p.replace(Config::parse(&text, "t.toml").unwrap().adc)
        .await
        .unwrap();
    let mut raw = TcpStream::connect(addr).await.unwrap();
    raw.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = raw.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let accepted = socket_of(Some(addr), Some(raw.local_addr().unwrap())).await;
    assert!(
        SockRef::from(&accepted).tcp_nodelay().unwrap(),
        "aol-svc-std: Nagle off"
    );
    if has_615_options() {
        // aol-svc-std: minRTO 100 ms and delayedAck 100 ms, both socket options.
        assert_eq!(
            headway_io::tcp::rto_min(&accepted).unwrap(),
            Duration::from_millis(100)
        );
        assert_eq!(
            headway_io::tcp::delack_max(&accepted).unwrap(),
            Duration::from_millis(100)
        );
    }
    p.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_congestion_control_the_host_lacks_refuses_the_config_and_says_why() {
    let text = format!(
        "{}{}[[tcp_profile]]\nname = \"x\"\ncongestion = \"nosuchcc\"\n",
        group("g", "", &[("127.0.0.1:9".parse().unwrap(), "")]),
        vs("g", "tcp_profile = \"x\"")
    );
    let cfg = Config::parse(&text, "t.toml").unwrap();
    let e = Proxy::start(cfg.adc, 1).await.unwrap_err();
    assert!(matches!(e, ApplyError::TcpProfile(_)), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("`nosuchcc` is not available on this host"),
        "{m}"
    );
    assert!(m.contains("tcp_available_congestion_control"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_nothing_is_closed_after_the_header_timeout() {
    let origin = Origin::start("o", Duration::ZERO).await;
    let text = format!(
        "{}{}",
        group("g", "", &[(origin.addr, "")]),
        vs(
            "g",
            "request_header_timeout = \"300ms\"\nclient_idle_timeout = \"180s\""
        )
    );
    let (p, addr) = proxy(&text).await;
    // The listener hands out connections once they have spoken (TCP_DEFER_ACCEPT): a silent
    // client holds no descriptor until the kernel gives up waiting, about a second.
    let listening: Vec<_> = headway_io::fds::own_sockets()
        .unwrap()
        .into_iter()
        .filter(|s| {
            let r = SockRef::from(&s.fd);
            r.peer_addr().is_err() && r.local_addr().ok().and_then(|a| a.as_socket()) == Some(addr)
        })
        .collect();
    assert_eq!(listening.len(), 1);
    assert!(headway_io::tcp::defers_accept(&listening[0].fd).unwrap());
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    // Closed by the proxy (end of stream) long before the 180 s idle timeout.
    let n = tokio::time::timeout(Duration::from_secs(30), silent.read(&mut buf))
        .await
        .expect("the proxy closes a silent connection")
        .unwrap_or(0);
    assert_eq!(n, 0);
    // A client that talks is served as before.
    assert_eq!(get(&client(), addr, "/healthz").await.status, 200);
    p.shutdown(Duration::from_secs(5)).await;
}
