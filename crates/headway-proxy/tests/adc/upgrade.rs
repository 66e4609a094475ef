//! Protocol upgrades through an `http` virtual server: WebSockets to `headway origin`'s echo
//! endpoint with a real WebSocket client, and the tunnel's edges (bytes either side sends
//! right after the handshake, half-closes, the idle timeout, upgrades refused or declined,
//! a server that switches protocols unasked) against small servers written here.

use super::*;
use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;

/// A WebSocket client connected through the proxy at `addr` to `path`.
async fn websocket(addr: SocketAddr, path: &str) -> tokio_tungstenite::WebSocketStream<TcpStream> {
    let s = TcpStream::connect(addr).await.unwrap();
    let (ws, resp) = tokio_tungstenite::client_async(format!("ws://{addr}{path}"), s)
        .await
        .expect("the WebSocket handshake through the proxy succeeds");
    assert_eq!(resp.status(), 101);
    ws
}

/// Sends `m` and expects it back.
async fn round_trip(ws: &mut tokio_tungstenite::WebSocketStream<TcpStream>, m: Message) {
    ws.send(m.clone()).await.unwrap();
    let back = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("an echo in time")
        .expect("the connection is open")
        .unwrap();
    assert_eq!(back, m);
}

fn vs_stats(p: &Proxy) -> headway_proxy::stats::VirtualServerSnapshot {
    p.snapshot().virtual_servers[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_pass_through_and_outlive_a_reload() {
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (p, addr) = proxy(&text).await;
    let mut a = websocket(addr, "/ws/echo").await;
    let mut b = websocket(addr, "/ws/echo").await;
    until(&p, "two tunnels open", |s| {
        s.virtual_servers[0].tunnels == 2
    })
    .await;
    let s = vs_stats(&p);
    assert_eq!((s.upgrades, s.responses[0]), (2, 2));
    // A tunnel holds its server slot for as long as it is open.
    assert_eq!(p.snapshot().groups[0].servers[0].active, 2);
    // Messages of many sizes, both kinds, interleaved on the two connections; one of 1 MiB.
    for i in 0..50usize {
        let size = [0, 1, 125, 126, 65_535, 65_536, 200_000][i % 7];
        let payload: Vec<u8> = (0..size).map(|k| (k * 31 + i) as u8).collect();
        round_trip(&mut a, Message::binary(payload)).await;
        round_trip(&mut b, Message::text(format!("message {i}"))).await;
    }
    round_trip(&mut a, Message::binary(vec![7u8; 1 << 20])).await;
    // Plain requests beside them.
    assert_eq!(get(&client(), addr, "/healthz").await.status, 200);
    // A reload changes nothing for open tunnels.
    let c = Config::parse(
        &text.replace(
            "group = \"g\"\n",
            "group = \"g\"\nx_forwarded_for = false\n",
        ),
        "test.toml",
    )
    .unwrap();
    p.replace(c.adc).await.expect("reload applies");
    round_trip(&mut a, Message::text("after the reload")).await;
    // A ping is answered by the server's WebSocket library through the tunnel.
    b.send(Message::Ping(Bytes::from_static(b"x")))
        .await
        .unwrap();
    let pong = tokio::time::timeout(Duration::from_secs(10), b.next())
        .await
        .expect("a pong in time")
        .expect("the connection is open")
        .unwrap();
    assert_eq!(pong, Message::Pong(Bytes::from_static(b"x")));
    // Closing: the server answers the close, both sides end, the tunnel and its slot go.
    a.close(None).await.unwrap();
    while let Some(m) = a.next().await {
        if m.is_err() {
            break;
        }
    }
    drop(a);
    until(&p, "one tunnel open", |s| s.virtual_servers[0].tunnels == 1).await;
    drop(b);
    until(&p, "no tunnel open", |s| {
        s.virtual_servers[0].tunnels == 0 && s.groups[0].servers[0].active == 0
    })
    .await;
    // What went through counts as the virtual server's bytes both ways.
    let s = vs_stats(&p);
    assert!(s.bytes_in > 1 << 20 && s.bytes_out > 1 << 20, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_after_a_request_with_a_body_goes_through_hyper_as_well() {
    // A request with a body hands the connection to hyper for good; the handshake after it
    // is then hyper's to answer and to hand over.
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (p, addr) = proxy(&text).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        .await
        .unwrap();
    let answer = read_until_end(&mut c, b"}\n").await;
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    c.write_all(format!("GET /ws/echo HTTP/1.1\r\nHost: x\r\n{WS_HANDSHAKE}\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_until_end(&mut c, b"\r\n\r\n").await;
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(
        head.starts_with("http/1.1 101 switching protocols\r\n"),
        "{head}"
    );
    assert!(
        head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=\r\n"),
        "{head}"
    );
    let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
        c,
        tokio_tungstenite::tungstenite::protocol::Role::Client,
        None,
    )
    .await;
    for i in 0..10usize {
        ws.send(Message::binary(vec![i as u8; i * 1000]))
            .await
            .unwrap();
        let back = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("an echo in time")
            .expect("open")
            .unwrap();
        assert_eq!(back, Message::binary(vec![i as u8; i * 1000]));
    }
    assert_eq!(vs_stats(&p).tunnels, 1);
}

/// A server for one upgraded connection: answers the first request head with a 101 to
/// protocol `echo` and `hello` in the same write, then echoes what comes; when the client
/// half-closes, writes `bye` and closes. Returns its address and the request head it got.
async fn switching_server() -> (SocketAddr, tokio::task::JoinHandle<String>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let end = loop {
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the request head comes whole");
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        s.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\
              X-Server: raw\r\n\r\nhello",
        )
        .await
        .unwrap();
        s.write_all(&buf[end..]).await.unwrap();
        loop {
            let n = s.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            s.write_all(&chunk[..n]).await.unwrap();
        }
        s.write_all(b"bye").await.unwrap();
        head
    });
    (addr, task)
}

/// Reads from `s` until `want` bytes have come (or the stream ends); what came.
async fn read_n(s: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while out.len() < want {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk))
            .await
            .expect("bytes in time")
            .unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
    }
    out
}

const UPGRADE: &str =
    "GET /chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_carries_early_bytes_both_ways_and_a_half_close() {
    let (server, head) = switching_server().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let text = format!(
        "{}{}",
        group("g", "", &[(server, "")]),
        vs(
            "g",
            &format!(
                "access_log = \"{}\"\naccess_log_format = \"json\"",
                log.display()
            )
        )
    );
    let (p, addr) = proxy(&text).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    // The client sends its first bytes of the new protocol with the request.
    c.write_all(format!("{UPGRADE}early").as_bytes())
        .await
        .unwrap();
    let got = read_until_end(&mut c, b"helloearly").await;
    let text_got = String::from_utf8_lossy(&got).to_lowercase();
    assert!(
        text_got.starts_with("http/1.1 101 switching protocols\r\n"),
        "{text_got}"
    );
    assert!(text_got.contains("\r\nupgrade: echo\r\n"), "{text_got}");
    assert!(
        text_got.contains("\r\nconnection: upgrade\r\n"),
        "{text_got}"
    );
    assert!(text_got.contains("\r\nx-server: raw\r\n"), "{text_got}");
    // Both ways, then the client's half-close: the server's last bytes still arrive.
    c.write_all(b"ping").await.unwrap();
    assert_eq!(read_n(&mut c, 4).await, b"ping");
    c.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut rest))
        .await
        .expect("the server's close comes through")
        .unwrap();
    assert_eq!(rest, b"bye");
    // The server saw the upgrade asked for, with the forwarding fields.
    let head = head.await.unwrap().to_lowercase();
    assert!(head.contains("\r\nconnection: upgrade\r\n"), "{head}");
    assert!(head.contains("\r\nupgrade: echo\r\n"), "{head}");
    assert!(
        head.contains("\r\nx-forwarded-for: 127.0.0.1\r\n"),
        "{head}"
    );
    until(&p, "the tunnel's end", |s| {
        s.virtual_servers[0].tunnels == 0
    })
    .await;
    let s = vs_stats(&p);
    assert_eq!(s.upgrades, 1);
    // Server → client: "hello", "early", "ping", "bye"; client → server: "early", "ping".
    assert_eq!((s.bytes_out, s.bytes_in), (17, 9));
    // One access log line for the whole tunnel, written when it ended.
    let line = json_log_lines(&log, 1).await.remove(0);
    assert_eq!(line["status"], 101, "{line}");
    assert_eq!(line["bytes"], 17, "{line}");
    assert_eq!(line["uri"], "/chat", "{line}");
    assert_eq!(line["complete"], true, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_closes_at_its_timeout_and_a_busy_one_does_not() {
    let (server, _head) = switching_server().await;
    let text = format!(
        "{}{}",
        group("g", "", &[(server, "")]),
        vs("g", "tunnel_idle_timeout = \"400ms\"")
    );
    let (_p, addr) = proxy(&text).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(UPGRADE.as_bytes()).await.unwrap();
    let head = read_n(&mut c, 1).await;
    assert!(head.starts_with(b"HTTP/1.1 101"));
    // Busy for twice the timeout: a byte each 100 ms, each echoed.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c.write_all(b"x").await.unwrap();
        let mut b = [0u8; 64];
        let n = c.read(&mut b).await.unwrap();
        assert!(n > 0, "the tunnel closed while busy");
    }
    // Idle from the last echo on: closed once the timeout has passed, within a quarter of it
    // more (the watchdog's period) and scheduling slack. (The lower bound allows for the time
    // between the proxy's last write and this client's read of it on a loaded machine.)
    let quiet = SystemClock::now();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest))
        .await
        .expect("the idle tunnel is closed")
        .ok();
    let waited = SystemClock::now().saturating_duration_since(quiet);
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "closed after {waited:?}"
    );
}

/// Sends `request` on a fresh connection and reads until the proxy closes it (bounded).
async fn until_closed(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the proxy closes the connection")
        .unwrap();
    String::from_utf8_lossy(&out).to_lowercase()
}

const WS_HANDSHAKE: &str = "Connection: Upgrade\r\nUpgrade: websocket\r\n\
    Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_declined_or_switched_off_are_plain_requests_that_end_the_connection() {
    let o = Origin::start("o", Duration::ZERO).await;
    let on = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (_p, addr) = proxy(&on).await;
    // The server declines (a plain resource): its answer, then the connection ends — a second
    // request pipelined behind it is not read.
    let declined = until_closed(
        addr,
        &format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\n{WS_HANDSHAKE}\r\n\
             GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        ),
    )
    .await;
    assert!(declined.starts_with("http/1.1 200 ok\r\n"), "{declined}");
    assert!(declined.contains("\r\nconnection: close\r\n"), "{declined}");
    assert_eq!(declined.matches("http/1.1 ").count(), 1, "{declined}");
    // Switched off: the server never sees the upgrade (its endpoint says it wants one).
    let (_q, off) = proxy(&format!(
        "{}{}",
        group("g", "", &[(o.addr, "")]),
        vs("g", "upgrades = false")
    ))
    .await;
    let refused = until_closed(
        off,
        &format!("GET /ws/echo HTTP/1.1\r\nHost: x\r\n{WS_HANDSHAKE}\r\n"),
    )
    .await;
    assert!(refused.starts_with("http/1.1 426 "), "{refused}");
    // `h2c` is never tunnelled: the request is served as HTTP/1.1 without its upgrade fields.
    let h2c = until_closed(
        addr,
        "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n\
         Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    )
    .await;
    assert!(h2c.starts_with("http/1.1 200 ok\r\n"), "{h2c}");
    assert!(
        !h2c.contains("\"upgrade\"") && !h2c.contains("http2-settings"),
        "{h2c}"
    );
    // CONNECT is for forward proxies.
    let connect = until_closed(
        addr,
        "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    )
    .await;
    assert!(connect.starts_with("http/1.1 501 "), "{connect}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_switches_protocols_unasked_gets_502() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut b = [0u8; 4096];
                let _ = s.read(&mut b).await;
                let _ = s
                    .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
                    .await;
                let _ = s.read(&mut b).await;
            });
        }
    });
    let text = format!(
        "{}{}",
        group("g", "retries = 0", &[(server, "")]),
        vs("g", "")
    );
    let (_p, addr) = proxy(&text).await;
    let a = get(&client(), addr, "/").await;
    assert_eq!(a.status, 502, "{}", a.text());
    assert!(
        a.text().contains("switched protocols unasked"),
        "{}",
        a.text()
    );
}
