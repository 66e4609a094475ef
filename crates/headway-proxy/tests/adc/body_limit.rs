//! `max_body_bytes`: a request body larger than the virtual server takes gets 413, whether its
//! length is announced or found out while it streams, and never reaches a server whole.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_get_413_announced_or_streamed() {
    let (_o, p, addr) = before_one_origin("max_body_bytes = \"1KiB\"").await;
    // Within the limit: served.
    let body: &'static [u8] = &[b'x'; 1024];
    let r = send(&client(), "POST", addr, "/echo", &[], body)
        .await
        .unwrap();
    assert_eq!((r.status, r.origin().as_str()), (200, "o"));
    // Announced too large: refused before any server is asked, and the connection closes.
    let out = raw(
        addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    assert!(
        out.to_ascii_lowercase().contains("connection: close"),
        "{out}"
    );
    assert_eq!(p.snapshot().groups[0].servers[0].requests, 1);
    // Chunked, found too large while streaming: cut off, 413, closed.
    let out = raw(addr, &chunked_post_of_1800_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    let s = p.snapshot();
    assert_eq!(s.virtual_servers[0].bad_requests, 2);
    assert_eq!(s.virtual_servers[0].responses[3], 2);
    // Not the server's failure.
    let sv = &s.groups[0].servers[0];
    assert_eq!((sv.failures, sv.ejections), (0, 0), "{sv:?}");
}

/// A chunked POST to `/echo` whose body (three chunks of 600 bytes) is over a 1 KiB limit.
pub(super) fn chunked_post_of_1800_bytes() -> Vec<u8> {
    let mut req = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..3 {
        req.extend_from_slice(b"258\r\n");
        req.extend_from_slice(&[b'y'; 600]);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    req
}

/// A large upload over the limit gets its 413 read by the client, which is still sending
/// when the answer leaves: the connection closes lingering until the client has sent it all,
/// instead of resetting under the client's writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_upload_over_the_limit_gets_its_413_not_a_reset() {
    let (_o, p, addr) = before_one_origin("max_body_bytes = \"1MiB\"").await;
    let up: &'static [u8] = Box::leak(vec![b'x'; 4 << 20].into_boxed_slice());
    for round in 0..10 {
        let r = send(&client(), "POST", addr, "/echo", &[], up).await;
        let r = r.unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(r.status, 413, "round {round}");
        assert!(r.text().contains("larger than"), "{}", r.text());
    }
    assert_eq!(p.snapshot().groups[0].servers[0].requests, 0);
}
