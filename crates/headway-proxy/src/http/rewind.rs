//! [`Rewind`]: a client stream whose first bytes were already read (to tell HTTP/2 from
//! HTTP/1.1 and to enforce the first-byte deadline) and are handed out again before the rest.
//!
//! Reading them for real instead of peeking costs no extra system call: a peek is a `recvfrom`
//! of its own, and the parser's first read would then fetch the same bytes again.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `prefix`, then `inner`'s bytes; writes go to `inner` unchanged.
#[derive(Debug)]
pub struct Rewind<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Rewind<S> {
    /// A stream that yields `prefix` first.
    pub fn new(prefix: Bytes, inner: S) -> Self {
        Rewind { prefix, inner }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped stream, mutably (what it reads next still comes after the prefix).
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_prefix_comes_first_then_the_stream_and_writes_pass_through() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut r = Rewind::new(Bytes::from_static(b"GET / HT"), a);
        b.write_all(b"TP/1.1\r\n").await.unwrap();
        let mut got = vec![0u8; 16];
        r.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1\r\n");
        r.write_all(b"ok").await.unwrap();
        let mut back = [0u8; 2];
        b.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ok");
    }

    #[tokio::test]
    async fn a_small_read_buffer_takes_the_prefix_in_pieces() {
        let (a, _b) = tokio::io::duplex(64);
        let mut r = Rewind::new(Bytes::from_static(b"abcdef"), a);
        let mut two = [0u8; 2];
        for want in [b"ab", b"cd", b"ef"] {
            r.read_exact(&mut two).await.unwrap();
            assert_eq!(&two, want);
        }
    }
}
