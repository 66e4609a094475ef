//! Reading HTTP/1 answers off a client connection, plain or TLS, shared by the test binaries
//! that include it (`#[path]`).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Reads one answer off `s` (`pending`: bytes read before): its head (lower case) and its
/// body, `content-length` bytes of it unless `to_head` (an answer to HEAD has none).
pub async fn one_answer<S: AsyncRead + Unpin>(
    s: &mut S,
    pending: &mut Vec<u8>,
    to_head: bool,
) -> (String, Vec<u8>) {
    loop {
        if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end + 4]).to_lowercase();
            let len: usize = head
                .split("content-length: ")
                .nth(1)
                .and_then(|r| r.split("\r\n").next())
                .map_or(0, |n| n.parse().unwrap())
                * usize::from(!to_head);
            if pending.len() >= end + 4 + len {
                let body = pending[end + 4..end + 4 + len].to_vec();
                pending.drain(..end + 4 + len);
                return (head, body);
            }
        }
        let mut buf = [0u8; 65536];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(pending));
        pending.extend_from_slice(&buf[..n]);
    }
}
