use std::time::Duration;

use headway_config::tcp::{preset, Keepalive, RouteOptions};

use super::*;

fn profile(socket: SocketOptions) -> TcpProfile {
    TcpProfile {
        name: "p".into(),
        socket,
        route: RouteOptions::default(),
        host: HostSettings::default(),
    }
}

fn host() -> HostTcp {
    HostTcp {
        available_congestion: vec!["reno".into(), "bbr".into(), "cubic".into()],
        allowed_congestion: vec!["reno".into(), "bbr".into()],
        wmem_max: Some(212_992),
        rmem_max: Some(212_992),
        window_scaling: Some(true),
        sack: Some(true),
    }
}

fn os_error(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

#[test]
fn an_unknown_congestion_control_is_an_error_that_lists_the_available_ones() {
    let p = profile(SocketOptions {
        congestion: Some("vegas".into()),
        ..SocketOptions::default()
    });
    let e = assess(&p, &host(), &[]).unwrap_err();
    assert!(matches!(e, CheckError::CongestionUnavailable { .. }));
    let m = e.to_string();
    assert!(m.contains("`vegas` is not available"), "{m}");
    assert!(m.contains("reno bbr cubic"), "{m}");
    assert!(m.contains("modprobe tcp_vegas"), "{m}");
}

#[test]
fn a_congestion_control_refused_for_permission_says_how_to_allow_it() {
    let p = profile(SocketOptions {
        congestion: Some("cubic".into()),
        ..SocketOptions::default()
    });
    let e = assess(&p, &host(), &[(Opt::Congestion, os_error(EPERM))]).unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, CheckError::CongestionNotAllowed { .. }));
    assert!(
        m.contains("tcp_allowed_congestion_control=\"reno bbr cubic\""),
        "{m}"
    );
}

#[test]
fn old_kernels_and_capped_buffers_are_warnings_with_a_fix() {
    let p = profile(SocketOptions {
        send_buffer: Some(4 << 20),
        receive_buffer: Some(100_000),
        min_rto: Some(Duration::from_millis(100)),
        ..SocketOptions::default()
    });
    let r = assess(
        &p,
        &host(),
        &[
            (Opt::MinRto, os_error(ENOPROTOOPT)),
            (Opt::Mss, os_error(22)),
        ],
    )
    .unwrap();
    assert_eq!(r.warnings.len(), 3, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("no TCP_RTO_MIN_US (Linux 6.15 or later)"));
    assert!(r.warnings[0].contains("rto_min"));
    assert!(r.warnings[1].contains("refused `mss` (TCP_MAXSEG)"));
    assert!(r.warnings[2].contains("send_buffer 4194304 bytes is capped at net.core.wmem_max"));
    assert!(r.warnings[2].contains("sysctl -w net.core.wmem_max=4194304"));
    assert!(r.routes.is_empty());
}

#[test]
fn presets_report_their_route_words_and_host_mismatches() {
    let dialup = preset("aol-dialup").unwrap().profile();
    let r = assess(&dialup, &host(), &[]).unwrap();
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(
        r.routes,
        [(
            "aol-dialup".to_string(),
            "initcwnd 4 rto_min 500ms".to_string()
        )]
    );
    let old = preset("netscaler-default").unwrap().profile();
    let r = assess(&old, &host(), &[]).unwrap();
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert!(r.warnings[1].contains("sysctl -w net.ipv4.tcp_sack=0"));
}

/// A listener on a free loopback port with `profile` set by [`apply_listener`].
fn listener(profile: Option<&TcpProfile>) -> (tokio::net::TcpListener, SocketAddr) {
    let l = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    apply_listener(&l, profile);
    l.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    l.listen(16).unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap().as_socket().unwrap();
    (tokio::net::TcpListener::from_std(l.into()).unwrap(), addr)
}

/// Every option of a profile set on real sockets: the listener, a connection made with
/// [`connect`], and the accepted side after [`apply_accepted`] — read back with getsockopt.
#[tokio::test]
async fn profiles_are_visible_on_live_sockets() {
    let probe = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let has_615 = headway_io::tcp::rto_min(&probe).is_ok();
    let p = profile(SocketOptions {
        nagle: true,
        send_buffer: Some(64 << 10),
        // Larger than the clamp: on a connection the kernel lowers the clamp to what the
        // receive buffer can hold.
        receive_buffer: Some(512 << 10),
        congestion: Some("reno".into()),
        quickack: true,
        delayed_ack: has_615.then_some(Duration::from_millis(40)),
        min_rto: has_615.then_some(Duration::from_millis(100)),
        keepalive: Some(Keepalive {
            idle: Duration::from_secs(30),
            interval: Duration::from_secs(5),
            count: 4,
        }),
        mss: Some(1200),
        user_timeout: Some(Duration::from_secs(20)),
        notsent_lowat: Some(32 << 10),
        window_clamp: Some(128 << 10),
    });
    let (l, addr) = listener(Some(&p));
    let client = connect(addr, Some(&p)).await.unwrap();
    let (accepted, _) = l.accept().await.unwrap();
    // The accepted side gets the options from its listener (apply_accepted sets only
    // quick-ACK mode) ...
    apply_accepted(&accepted, Some(&p), Some(&p));
    // ... and a connection accepted after a reload changed the profile gets all of it.
    let on_listener = profile(SocketOptions::default());
    let client2 = connect(addr, None).await.unwrap();
    let (reloaded, _) = l.accept().await.unwrap();
    apply_accepted(&reloaded, Some(&p), Some(&on_listener));
    drop(client2);
    for (side, s) in [
        ("connect", &client),
        ("accepted", &accepted),
        ("accepted after a reload", &reloaded),
    ] {
        let r = SockRef::from(s);
        assert!(!r.tcp_nodelay().unwrap(), "{side}: Nagle on");
        // The kernel caps buffer sizes at wmem_max / rmem_max, then doubles them for its
        // bookkeeping.
        let host = HostTcp::read();
        let doubled = |asked: u64, max: Option<u64>| 2 * asked.min(max.unwrap_or(asked)) as usize;
        assert_eq!(
            r.send_buffer_size().unwrap(),
            doubled(64 << 10, host.wmem_max),
            "{side}"
        );
        assert_eq!(
            r.recv_buffer_size().unwrap(),
            doubled(512 << 10, host.rmem_max),
            "{side}"
        );
        let cc = r.tcp_congestion().unwrap();
        assert_eq!(cc.split(|b| *b == 0).next().unwrap(), b"reno", "{side}");
        assert!(r.keepalive().unwrap(), "{side}");
        assert_eq!(
            r.tcp_keepalive_time().unwrap(),
            Duration::from_secs(30),
            "{side}"
        );
        assert_eq!(
            r.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(5),
            "{side}"
        );
        assert_eq!(r.tcp_keepalive_retries().unwrap(), 4, "{side}");
        assert_eq!(
            r.tcp_user_timeout().unwrap(),
            Some(Duration::from_secs(20)),
            "{side}"
        );
        assert_eq!(r.tcp_notsent_lowat().unwrap(), 32 << 10, "{side}");
        // On a connection the kernel lowers the clamp to what the receive buffer holds.
        let clamp = headway_io::tcp::window_clamp(s).unwrap();
        assert!(clamp <= 128 << 10 && clamp > 32 << 10, "{side}: {clamp}");
        // The MSS in use is at most the one asked for (options take room from it).
        assert!(r.tcp_mss().unwrap() <= 1200, "{side}");
        if has_615 {
            assert_eq!(
                headway_io::tcp::rto_min(s).unwrap(),
                Duration::from_millis(100),
                "{side}"
            );
            assert_eq!(
                headway_io::tcp::delack_max(s).unwrap(),
                Duration::from_millis(40),
                "{side}"
            );
        }
    }
    // Without a profile, TCP_NODELAY only; a listener bound without one passes it on.
    let plain = connect(addr, None).await.unwrap();
    let (accepted, _) = l.accept().await.unwrap();
    apply_client(&accepted, None);
    assert!(SockRef::from(&plain).tcp_nodelay().unwrap());
    assert!(SockRef::from(&accepted).tcp_nodelay().unwrap());
    let (bare, bare_addr) = listener(None);
    let _c = connect(bare_addr, Some(&p)).await.unwrap();
    let (inherited, _) = bare.accept().await.unwrap();
    apply_accepted(&inherited, None, None);
    assert!(SockRef::from(&inherited).tcp_nodelay().unwrap());
}

#[test]
fn check_passes_on_this_host_for_every_preset() {
    // Presets use no congestion control, so nothing can make them an error.
    let mut text = String::from(
        "[[server_group]]\nname = \"g\"\n[[server_group.server]]\naddress = \"127.0.0.1:1\"\n",
    );
    for (i, p) in headway_config::tcp::PRESETS.iter().enumerate() {
        text += &format!(
            "[[virtual_server]]\nname = \"v{i}\"\nkind = \"http\"\nlisten = \"127.0.0.1:{}\"\n\
             group = \"g\"\ntcp_profile = \"{}\"\n",
            20000 + i,
            p.name
        );
    }
    let cfg = headway_config::Config::parse(&text, "t.toml").unwrap().adc;
    assert_eq!(
        cfg.virtual_servers.len(),
        headway_config::tcp::PRESETS.len()
    );
    let r = check(&cfg).unwrap();
    assert_eq!(r.routes.len(), headway_config::tcp::PRESETS.len());
}
