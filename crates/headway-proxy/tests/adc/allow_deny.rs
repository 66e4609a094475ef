//! Virtual servers' `allow` and `deny` lists: connections from clients they keep out are
//! closed at accept, on `http` and `tcp` virtual servers, and by the client a PROXY header
//! names. Clients come from several loopback addresses (127.0.0.0/8 is all local), so no
//! header is needed to be someone else.

use super::*;

/// One request from `source` to `addr`: the answer's text (empty when the proxy closed the
/// connection without answering).
async fn from(source: &str, addr: SocketAddr, request: &[u8]) -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    // A closed connection may refuse the write or the read: either way no answer.
    let _ = s.write_all(request).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("the proxy answers or closes");
    String::from_utf8_lossy(&out).into_owned()
}

const GET: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_and_deny_keep_clients_out_at_accept() {
    let o = Origin::start("o", Duration::ZERO).await;
    let lists = "allow = [\"127.0.0.0/30\"]\ndeny = [\"127.0.0.3\"]\n";
    let text = format!(
        "{}{}\
         [[virtual_server]]\nname = \"l4\"\nkind = \"tcp\"\nlisten = \"127.0.0.2:0\"\n\
         group = \"g\"\nallow = [\"127.0.0.2\"]\n",
        group("g", "", &[(o.addr, "")]),
        vs("g", lists),
    );
    let (p, _) = proxy(&text).await;
    let addrs = p.bound_addrs();
    let (http, tcp) = (addrs[0].1, addrs[1].1);
    for (source, served) in [
        ("127.0.0.1", true),
        ("127.0.0.2", true),
        // In `allow`'s network, but denied.
        ("127.0.0.3", false),
        // Outside `allow`.
        ("127.0.0.5", false),
    ] {
        let a = from(source, http, GET).await;
        assert_eq!(a.starts_with("HTTP/1.1 200"), served, "{source}: {a:?}");
        if !served {
            assert!(a.is_empty(), "{source}: {a:?}");
        }
    }
    // The tcp virtual server lets only 127.0.0.2 through.
    assert!(from("127.0.0.2", tcp, GET)
        .await
        .starts_with("HTTP/1.1 200"));
    assert_eq!(from("127.0.0.1", tcp, GET).await, "");
    let s = p.snapshot();
    let denied: Vec<u64> = s
        .virtual_servers
        .iter()
        .map(|v| v.denied_connections)
        .collect();
    assert_eq!(denied, [2, 1]);
    assert_eq!(s.groups[0].servers[0].requests, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_applies_to_the_client_a_proxy_header_names() {
    let (_o, text) = one_origin("accept_proxy_protocol = true\ndeny = [\"203.0.113.0/24\"]").await;
    let (p, addr) = proxy(&text).await;
    let ask = |client: &str| {
        format!(
            "PROXY TCP4 {client} 10.0.0.1 40000 80\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\
             Connection: close\r\n\r\n"
        )
    };
    assert_eq!(
        from("127.0.0.1", addr, ask("203.0.113.9").as_bytes()).await,
        ""
    );
    let a = from("127.0.0.1", addr, ask("198.51.100.7").as_bytes()).await;
    assert!(a.starts_with("HTTP/1.1 200"), "{a}");
    assert_eq!(p.snapshot().virtual_servers[0].denied_connections, 1);
}
