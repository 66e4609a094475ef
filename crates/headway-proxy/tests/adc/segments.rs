//! What the proxy puts on the wire around an exchange, counted where the client receives it
//! (`TCP_INFO`'s segments received): the acknowledgement of a request rides on its answer, a
//! closing answer carries the FIN, and a client that holds part of a request back until it is
//! acknowledged (Nagle's algorithm) does not wait for the kernel's delayed-ACK timer.

use super::*;

/// Sends `request` on a fresh connection (TCP_NODELAY) and reads until the proxy closes it;
/// the answer's head (lower case) with its body's length, and the segments the client
/// received, the handshake's SYN-ACK included.
async fn closing_exchange(addr: SocketAddr, request: &[u8]) -> (String, u32) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the proxy closes in time")
        .unwrap();
    let n = headway_io::tcp::segments_received(&s).unwrap();
    // The head, and the number of bytes after it.
    let end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(out.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&out[..end]).to_lowercase();
    (format!("{head}[{} bytes]", out.len() - end), n)
}

const CLOSE: &[u8] = b"GET /corpus/random/128 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// Runs `n` closing exchanges against `addr` and returns the segment counts, checking each
/// answer.
async fn counts(addr: SocketAddr, n: usize) -> Vec<u32> {
    let mut counts = Vec::new();
    for _ in 0..n {
        let (answer, segments) = closing_exchange(addr, CLOSE).await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n[128 bytes]"), "{answer}");
        counts.push(segments);
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_answer_carries_the_requests_ack_and_the_fin() {
    let o = Origin::start("o", Duration::ZERO).await;
    let profile = "[[tcp_profile]]\nname = \"quick\"\nquickack = true\n";
    let text = format!(
        "{profile}{}{}[[virtual_server]]\nname = \"quick\"\nkind = \"http\"\n\
         listen = \"127.0.0.2:0\"\ngroup = \"g\"\ntcp_profile = \"quick\"\n",
        group("g", "", &[(o.addr, "")]),
        vs("g", "")
    );
    let (p, addr) = proxy(&text).await;
    let quick = p.bound_addrs()[1].1;
    // The SYN-ACK, then one segment: the answer, acknowledging the request, with the FIN.
    // (A run that the machine held up past the delayed-ACK timer, 40 ms, gets a lone ACK
    // before it; so the count is asked of one run in five, not of all.)
    let plain = counts(addr, 5).await;
    assert!(plain.contains(&2), "segments per connection: {plain:?}");
    // A profile that asks for quick ACKs gets its lone ACK at once, every time: the count
    // sees it.
    let quick = counts(quick, 3).await;
    assert!(quick.iter().all(|&n| n >= 3), "with quick ACKs: {quick:?}");
}

/// A server that answers one request per connection with 128 bytes and its FIN in one
/// segment (corked until the shutdown), so that both are in when the proxy reads the answer.
async fn answer_and_fin_server() -> SocketAddr {
    let (addr, _) = raw_server(|mut s, _| async move {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(k) => got.extend_from_slice(&buf[..k]),
            }
        }
        socket2::SockRef::from(&s).set_tcp_cork(true).unwrap();
        let mut answer =
            b"HTTP/1.1 200 OK\r\nContent-Length: 128\r\nConnection: close\r\n\r\n".to_vec();
        answer.extend_from_slice(&[b'x'; 128]);
        s.write_all(&answer).await.unwrap();
        // Uncorks: the answer and the FIN leave together.
        s.shutdown().await.unwrap();
        // Wait for the proxy's FIN before closing, so no reset follows.
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    })
    .await;
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_virtual_server_sends_the_servers_last_bytes_with_its_fin() {
    let server = answer_and_fin_server().await;
    let text = format!(
        "{}[[virtual_server]]\nname = \"l4\"\nkind = \"tcp\"\nlisten = \"127.0.0.1:0\"\ngroup = \"g\"\n",
        group("g", "", &[(server, "")])
    );
    let (_p, addr) = proxy(&text).await;
    // The SYN-ACK, the acknowledgement of the request (a `tcp` listener keeps quick ACKs:
    // its server may be slow to answer), and the server's answer with its FIN, which the
    // proxy found in with the answer's bytes. (A run the machine held up past the
    // delayed-ACK timer gets one more; so the count is asked of one run in five.)
    let c = counts(addr, 5).await;
    assert!(c.contains(&3), "segments per connection: {c:?}");
}

/// The second shortest of `d`: what at least two of the timed requests beat.
fn second_shortest(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_nagle_is_not_left_waiting_for_an_ack() {
    // A client that keeps Nagle's algorithm on sends the second part of a request only once
    // the first is acknowledged. The proxy delays acknowledgements to send them with its
    // answers, so it must acknowledge at once when it waits for the rest of a request, or
    // each such request waits for the delayed-ACK timer (40 ms). Timed, with a wide margin
    // against a loaded machine, which slows some requests but not all: of ten requests, at
    // least two under 30 ms (they take well under a millisecond). The timer would make every
    // one 40 ms or more — or, on the keep-alive connection, all but the first if the proxy
    // acknowledged once per connection instead of once per request.
    let o = Origin::start("o", Duration::ZERO).await;
    let text = format!("{}{}", group("g", "", &[(o.addr, "")]), vs("g", ""));
    let (_p, addr) = proxy(&text).await;
    // A head written in two parts, each on a fresh connection (the proxy's own loop).
    let mut split_heads = Vec::new();
    for _ in 0..10 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        assert!(!s.nodelay().unwrap());
        let t = SystemClock::now();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHo").await.unwrap();
        s.write_all(b"st: x\r\n\r\n").await.unwrap();
        let (h, _) = one_answer(&mut s, &mut Vec::new(), false).await;
        split_heads.push(SystemClock::now().saturating_duration_since(t));
        assert!(h.starts_with("http/1.1 200"), "{h}");
    }
    // Bodies written after their heads, on one keep-alive connection (hyper after the first).
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut pending = Vec::new();
    let mut bodies = Vec::new();
    for _ in 0..10 {
        let t = SystemClock::now();
        s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
            .await
            .unwrap();
        s.write_all(b"hello").await.unwrap();
        let (h, body) = one_answer(&mut s, &mut pending, false).await;
        bodies.push(SystemClock::now().saturating_duration_since(t));
        assert!(h.starts_with("http/1.1 200"), "{h}");
        assert!(String::from_utf8_lossy(&body).contains("\"body_bytes\":5"));
    }
    let limit = Duration::from_millis(30);
    assert!(
        second_shortest(split_heads.clone()) < limit,
        "split heads: {split_heads:?}"
    );
    assert!(
        second_shortest(bodies.clone()) < limit,
        "bodies after heads: {bodies:?}"
    );
}
