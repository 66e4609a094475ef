//! HTTP/1 servers that answer before they have read the request's body — a `401` decided on
//! the head — and then close (at once, or after reading some of it, as Go's `net/http` does)
//! or read the rest to throw it away: the client gets the server's answer, not a 502, while
//! it uploads 4 MiB, over HTTP/1 and HTTP/2.

use super::h2_upstream::h2_client;
use super::*;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ANSWER: &str = "no thank you";

/// How the test's server treats the body after its early answer (by the request's path).
async fn early_server(mut tcp: tokio::net::TcpStream) {
    let mut buf = Vec::new();
    loop {
        // The head.
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        buf.drain(..end);
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        let path = head.split(' ').nth(1).unwrap_or("").to_string();
        let closing = if path == "/discard" {
            ""
        } else {
            "connection: close\r\n"
        };
        let answer = format!(
            "HTTP/1.1 401 Unauthorized\r\ncontent-length: {}\r\n{closing}\r\n{ANSWER}",
            ANSWER.len()
        );
        if tcp.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        match path.as_str() {
            // Closed with the body unread: the kernel resets the connection.
            "/close" => return,
            // Go: up to 256 KiB of an unread body is read, then the connection closes.
            "/go" => {
                let mut left = (256usize << 10).saturating_sub(buf.len());
                let mut chunk = vec![0u8; 64 << 10];
                while left > 0 {
                    match tcp.read(&mut chunk[..left.min(64 << 10)]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => left -= n,
                    }
                }
                return;
            }
            // The rest read and dropped; the connection serves the next request.
            _ => {
                let mut left = length.saturating_sub(buf.len());
                buf.drain(..length.min(buf.len()));
                let mut chunk = vec![0u8; 64 << 10];
                while left > 0 {
                    match tcp.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) if n > left => {
                            buf.extend_from_slice(&chunk[left..n]);
                            left = 0;
                        }
                        Ok(n) => left -= n,
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_answer_before_the_body_reaches_the_client() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(early_server(tcp));
        }
    });
    let text = format!("{}{}", group("g", "", &[(server, "")]), vs("g", ""));
    let (p, addr) = proxy_with(&text, 1).await;
    let up: &'static [u8] = Box::leak(vec![b'x'; 4 << 20].into_boxed_slice());
    for path in ["/close", "/go", "/discard"] {
        for round in 0..5 {
            let r = send(&client(), "POST", addr, path, &[], up).await;
            let r = r.unwrap_or_else(|e| panic!("{path} round {round}, HTTP/1: {e}"));
            assert_eq!(
                (r.status, r.text().as_str()),
                (401, ANSWER),
                "{path} HTTP/1"
            );
            let req = Request::post(format!("http://{addr}{path}"))
                .body(BodyExt::boxed(Full::new(Bytes::from_static(up))))
                .unwrap();
            let r = h2_client().request(req).await;
            let r = r.unwrap_or_else(|e| panic!("{path} round {round}, HTTP/2: {e:?}"));
            assert_eq!(r.status(), 401, "{path} HTTP/2");
            let body = r.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], ANSWER.as_bytes(), "{path} HTTP/2");
        }
    }
    let s = p.snapshot();
    let sv = &s.groups[0].servers[0];
    // Answers, not failures of the server.
    assert_eq!((sv.failures, sv.responses[3]), (0, 30), "{sv:?}");
    // The server that reads the bodies keeps its connection: the ten `/discard` requests
    // came on one (the twenty before it closed each of theirs).
    assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 21);
}

/// An HTTP/2 client still uploading when its answer has come is let finish: the rest of its
/// body is read and dropped, not stopped with `RST_STREAM(NO_ERROR)`, which clients such as
/// curl 7.88 take for the failure of the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_still_uploading_after_its_answer_is_let_finish() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(early_server(tcp));
        }
    });
    let text = format!("{}{}", group("g", "", &[(server, "")]), vs("g", ""));
    let (_p, addr) = proxy_with(&text, 1).await;
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    for path in ["/close", "/go"] {
        let mut client = client.clone().ready().await.unwrap();
        let req = Request::post(format!("http://{addr}{path}"))
            .body(())
            .unwrap();
        let (answer, mut up) = client.send_request(req, false).unwrap();
        let upload = tokio::spawn(async move {
            let mut left = 4usize << 20;
            while left > 0 {
                up.reserve_capacity(left.min(64 << 10));
                let n = match std::future::poll_fn(|cx| up.poll_capacity(cx)).await {
                    Some(Ok(n)) => n.min(left),
                    Some(Err(e)) => return Err(e.to_string()),
                    None => return Err("the stream closed".into()),
                };
                up.send_data(Bytes::from(vec![b'x'; n]), false)
                    .map_err(|e| e.to_string())?;
                left -= n;
            }
            up.send_data(Bytes::new(), true).map_err(|e| e.to_string())
        });
        let answer = answer.await.unwrap();
        assert_eq!(answer.status(), 401);
        let mut body = answer.into_body();
        let mut got = Vec::new();
        while let Some(d) = body.data().await {
            let d = d.unwrap();
            let _ = body.flow_control().release_capacity(d.len());
            got.extend_from_slice(&d);
        }
        assert_eq!(got, ANSWER.as_bytes(), "{path}");
        let sent = tokio::time::timeout(Duration::from_secs(20), upload).await;
        sent.expect("the upload ends").unwrap().unwrap_or_else(|e| {
            panic!("{path}: the upload was stopped: {e}");
        });
    }
}
