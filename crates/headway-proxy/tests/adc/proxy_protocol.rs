//! The PROXY protocol: headers taken from a balancer in front (`accept_proxy_protocol`) and
//! written to servers (`send_proxy_protocol`), on `tcp` and `http` virtual servers, against
//! small servers written here that read the header the way HAProxy's `accept-proxy` does.

use super::*;
use headway_proxy::proxy_protocol::{encode, parse, Parsed, Version};

/// What a server here saw: per connection, the addresses its header named (`None`: a header
/// naming no client), in arrival order.
type Seen = Arc<std::sync::Mutex<Vec<Named>>>;

/// Reads a PROXY header off `s`; the bytes read past it.
async fn take_header(s: &mut TcpStream) -> (Named, Vec<u8>) {
    let mut buf = Vec::new();
    loop {
        match parse(&buf) {
            Parsed::Header { len, addresses } => return (addresses, buf.split_off(len)),
            Parsed::Invalid(why) => panic!("the proxy sent no PROXY header: {why}: {buf:?}"),
            Parsed::Incomplete => {
                let mut b = [0u8; 1024];
                let n = s.read(&mut b).await.unwrap();
                assert!(n > 0, "closed before a whole PROXY header");
                buf.extend_from_slice(&b[..n]);
            }
        }
    }
}

/// The addresses a PROXY header named.
type Named = Option<(SocketAddr, SocketAddr)>;

/// A server that takes a PROXY header off every connection, records what it named, and hands
/// the connection and the bytes read past the header to `serve`.
async fn header_server<F, Fut>(serve: F) -> (SocketAddr, Seen)
where
    F: Fn(TcpStream, Named, Vec<u8>) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let (named, rest) = take_header(&mut s).await;
                record.lock().unwrap().push(named);
                serve(s, named, rest).await;
            });
        }
    });
    (addr, seen)
}

/// A server that takes a PROXY header off every connection, then echoes what follows.
async fn echo_server() -> (SocketAddr, Seen) {
    header_server(|mut s, _, rest| async move {
        s.write_all(&rest).await.unwrap();
        let (mut r, mut w) = s.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
        let _ = w.shutdown().await;
    })
    .await
}

/// A keep-alive HTTP/1.1 server that takes a PROXY header off every connection and answers
/// every request with the client its connection's header named (`-` for none).
async fn http_server() -> (SocketAddr, Seen) {
    header_server(|mut s, named, mut buf| async move {
        let body = named.map_or("-".to_string(), |(c, _)| c.to_string());
        loop {
            while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                buf.drain(..end + 4);
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if s.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
            }
            let mut b = [0u8; 4096];
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        }
    })
    .await
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// `tcp` virtual server `front` in front of `server`, with `extra` lines.
fn tcp_config(server: SocketAddr, group_extra: &str, vs_extra: &str) -> String {
    format!(
        "{}[[virtual_server]]\nname = \"front\"\nkind = \"tcp\"\nlisten = \"127.0.0.1:0\"\n\
         group = \"g\"\n{vs_extra}\n",
        group("g", group_extra, &[(server, "")])
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_virtual_server_takes_the_balancers_header_and_passes_the_client_on() {
    let (server, seen) = echo_server().await;
    let text = tcp_config(
        server,
        "send_proxy_protocol = \"v2\"",
        "accept_proxy_protocol = true",
    );
    let (p, front) = proxy(&text).await;
    // As a balancer in front sends it: the header and the client's first bytes in one write.
    let mut c = TcpStream::connect(front).await.unwrap();
    let mut sent = encode(
        Version::V1,
        addr("203.0.113.9:40000"),
        addr("198.51.100.1:443"),
    );
    sent.extend_from_slice(b"hello, server");
    c.write_all(&sent).await.unwrap();
    c.shutdown().await.unwrap();
    let mut back = Vec::new();
    c.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, b"hello, server");
    assert_eq!(
        seen.lock().unwrap().clone(),
        [Some((addr("203.0.113.9:40000"), addr("198.51.100.1:443")))]
    );
    // No header: closed before any server is asked, and counted.
    let out = raw(front, b"hello without a header").await;
    assert!(out.is_empty(), "{out}");
    let s = p.snapshot();
    assert_eq!(s.virtual_servers[0].bad_proxy_headers, 1);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_virtual_server_names_its_own_clients_to_servers() {
    let (server, seen) = echo_server().await;
    let (_p, front) = proxy(&tcp_config(server, "send_proxy_protocol = \"v1\"", "")).await;
    let mut c = TcpStream::connect(front).await.unwrap();
    let me = c.local_addr().unwrap();
    c.write_all(b"ping").await.unwrap();
    c.shutdown().await.unwrap();
    let mut back = Vec::new();
    c.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, b"ping");
    assert_eq!(seen.lock().unwrap().clone(), [Some((me, front))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_virtual_server_takes_the_client_from_the_header() {
    let (_o, p, front) = before_one_origin("accept_proxy_protocol = true").await;
    for version in [Version::V1, Version::V2] {
        let mut s = TcpStream::connect(front).await.unwrap();
        let mut sent = encode(version, addr("203.0.113.9:1234"), front);
        sent.extend_from_slice(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
        s.write_all(&sent).await.unwrap();
        let (head, body) = one_answer(&mut s, &mut Vec::new(), false).await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["headers"]["x-forwarded-for"][0], "203.0.113.9");
    }
    // A balancer's own check (v2 LOCAL): the connection's own address stands.
    let mut s = TcpStream::connect(front).await.unwrap();
    let mut sent = headway_proxy::proxy_protocol::encode_local(Version::V2);
    sent.extend_from_slice(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
    s.write_all(&sent).await.unwrap();
    let (_, body) = one_answer(&mut s, &mut Vec::new(), false).await;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["headers"]["x-forwarded-for"][0], "127.0.0.1");
    // A plain request where a header is due is refused, not served.
    let out = raw(front, b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(out.is_empty(), "{out}");
    assert_eq!(p.snapshot().virtual_servers[0].bad_proxy_headers, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_connections_carry_one_clients_header_and_are_reused_only_for_it() {
    let (server, seen) = http_server().await;
    let text = format!(
        "[[monitor]]\nname = \"m\"\nkind = \"http\"\ninterval = \"200ms\"\n{}{}",
        group(
            "g",
            "send_proxy_protocol = \"v1\"\nmonitor = \"m\"",
            &[(server, "")]
        ),
        vs("g", "")
    );
    let (p, front) = proxy(&text).await;
    until(&p, "the server up", |s| health(s, "g", 0) == "up").await;
    // The monitor's checks name no client.
    assert!(seen.lock().unwrap().iter().all(Option::is_none));
    let checks = seen.lock().unwrap().len();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let s = TcpStream::connect(front).await.unwrap();
        let me = s.local_addr().unwrap();
        clients.push((s, Vec::new(), me));
    }
    let (a_addr, b_addr) = (clients[0].2, clients[1].2);
    // Alternating: each client connection's later request finds an idle server connection
    // of the other client's first.
    for i in [0, 1, 0, 1, 0] {
        let (s, pending, me) = &mut clients[i];
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (head, body) = one_answer(s, pending, false).await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert_eq!(String::from_utf8(body).unwrap(), me.to_string());
    }
    // One server connection per client connection, each with its client's header.
    let clients: Vec<_> = seen.lock().unwrap()[checks..]
        .iter()
        .filter_map(|n| n.map(|(c, _)| c))
        .collect();
    assert_eq!(clients, [a_addr, b_addr]);
    let named: Vec<_> = seen.lock().unwrap()[checks..]
        .iter()
        .filter_map(|n| n.map(|(_, d)| d))
        .collect();
    assert_eq!(named, [front, front]);
}

/// A real HAProxy (installed by `scripts/setup.sh`) running `config` (its `global` and
/// `defaults` added here) until dropped.
struct Haproxy {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    fn start(config: &str) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(
            &path,
            format!(
                "global\n    nbthread 1\ndefaults\n    timeout connect 5s\n    timeout client 10s\n\
                 \x20   timeout server 10s\n{config}"
            ),
        )
        .unwrap();
        let child = std::process::Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("haproxy, which scripts/setup.sh installs");
        Haproxy { child, _dir: dir }
    }
}

impl Haproxy {
    /// Waits (bounded) until HAProxy listens at `at`.
    async fn listening(&self, at: SocketAddr) {
        let deadline = SystemClock::now() + Duration::from_secs(10);
        while TcpStream::connect(at).await.is_err() {
            assert!(
                SystemClock::now() < deadline,
                "haproxy never listened at {at}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free now (for HAProxy, which cannot be asked to pick one).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET /echo` through `to` from a client bound to 127.0.0.2 (a loopback address no proxy on
/// the way uses for itself): the `X-Forwarded-For` the origin saw.
async fn forwarded_for_from_127_0_0_2(to: SocketAddr) -> String {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(addr("127.0.0.2:0")).unwrap();
    let mut s = sock.connect(to).await.unwrap();
    s.write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = one_answer(&mut s, &mut Vec::new(), false).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["headers"]["x-forwarded-for"][0]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_in_front_and_behind_understands_our_headers() {
    let o = Origin::start("o", Duration::ZERO).await;
    for version in ["v1", "v2"] {
        // HAProxy in front (`send-proxy` / `send-proxy-v2`), Headway's http virtual server
        // taking its header, the origin behind.
        let text = format!(
            "{}{}",
            group("g", "", &[(o.addr, "")]),
            vs("g", "accept_proxy_protocol = true")
        );
        let (_p, headway) = proxy(&text).await;
        let port = free_port();
        let send = if version == "v1" {
            "send-proxy"
        } else {
            "send-proxy-v2"
        };
        let h = Haproxy::start(&format!(
            "listen front\n    mode tcp\n    bind 127.0.0.1:{port}\n    server h {headway} {send}\n"
        ));
        let front = addr(&format!("127.0.0.1:{port}"));
        h.listening(front).await;
        assert_eq!(
            forwarded_for_from_127_0_0_2(front).await,
            "127.0.0.2",
            "{version}"
        );

        // Headway's tcp virtual server in front, sending its header to HAProxy's
        // `accept-proxy` HTTP listener, which adds X-Forwarded-For for the origin.
        let port = free_port();
        let back = addr(&format!("127.0.0.1:{port}"));
        let h = Haproxy::start(&format!(
            "listen back\n    mode http\n    option forwardfor\n    bind 127.0.0.1:{port} \
             accept-proxy\n    server o {}\n",
            o.addr
        ));
        h.listening(back).await;
        let text = tcp_config(back, &format!("send_proxy_protocol = \"{version}\""), "");
        let (_p, headway) = proxy(&text).await;
        assert_eq!(
            forwarded_for_from_127_0_0_2(headway).await,
            "127.0.0.2",
            "{version}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_balancers_named_may_send_headers() {
    let (_o, p, front) =
        before_one_origin("accept_proxy_protocol = true\nproxy_protocol_from = [\"127.0.0.2\"]")
            .await;
    let request = |from: &'static str| async move {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(addr(&format!("{from}:0"))).unwrap();
        let mut s = sock.connect(front).await.unwrap();
        let mut sent = encode(Version::V2, addr("203.0.113.9:1234"), front);
        sent.extend_from_slice(b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let _ = s.write_all(&sent).await;
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    };
    // From the balancer: its header names the client.
    let out = request("127.0.0.2").await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.contains("\"x-forwarded-for\":[\"203.0.113.9\"]"),
        "{out}"
    );
    // From anywhere else: closed, whatever header it sends.
    let out = request("127.0.0.1").await;
    assert!(out.is_empty(), "{out}");
    assert_eq!(p.snapshot().virtual_servers[0].bad_proxy_headers, 1);
}
