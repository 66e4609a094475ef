//! A request body to an HTTP/1 server, sent while what the server sends meanwhile is read.
//!
//! A server may answer before it has read the whole body — a `401`, `403` or `413` decided on
//! the head, a redirect — and then close the connection without reading the rest (Go's
//! `net/http` reads at most 256 KiB of a body its handler left unread; many servers none).
//! Sending the body first and reading the answer only afterwards then loses the answer: the
//! write fails on the closed connection, and the client got a 502 where the server had said
//! 401. And the answer must be read while it arrives: a reset from the server (its close with
//! the proxy's bytes unread) makes the kernel drop what the proxy's socket has not yet taken.
//!
//! So while the body is sent, the server's side is read into the connection's buffer (up to
//! [`EARLY_BYTES`]). The body is sent to its end while the server takes it (a server that
//! answered early and reads the rest to throw it away gets it all, and the connection is
//! reused); once the server has closed — the read ends, or a write fails — sending stops, and
//! an answer it sent whole before closing is the request's answer ([`Sent::Cut`]), relayed
//! like any other, after which both connections close.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use hyper::body::Body;
use tokio::io::{AsyncRead, AsyncWrite};

use super::body::ReqBody;
use super::codec;
use super::BodyError;
use crate::stats::{ServerCounters, VirtualServerCounters};

/// At most this many bytes of the server's answer are read while the body is still being
/// sent (an answer's head is at most [`codec::MAX_RESPONSE_HEAD`]); past them the server waits
/// until the body is sent.
pub(super) const EARLY_BYTES: usize = codec::MAX_RESPONSE_HEAD + 16 * 1024;

/// How sending a body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sent {
    /// All of it reached the server.
    Whole,
    /// The server closed the connection before taking all of it; what it sent before is in
    /// the buffer (possibly an answer).
    Cut,
}

/// The server's side of the connection, read while the body is sent.
struct Watch<'a, S> {
    stream: &'a mut S,
    buf: &'a mut BytesMut,
    /// The server's side ended or failed.
    read_done: bool,
    /// A write failed: the server closed (or reset) the connection.
    write_failed: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Watch<'_, S> {
    /// The server has closed: its side ended, or a write failed.
    fn closed(&self) -> bool {
        self.read_done || self.write_failed
    }

    /// Reads what the server has sent, up to [`EARLY_BYTES`] in the buffer; notes its end.
    /// Ready once that end is read or the buffer is full.
    fn poll_watch(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while !self.read_done && self.buf.len() < EARLY_BYTES {
            self.buf.reserve(8192);
            match tokio_util::io::poll_read_buf(Pin::new(&mut *self.stream), cx, self.buf) {
                Poll::Ready(Ok(0) | Err(_)) => self.read_done = true,
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(())
    }

    /// After a failed write: what the server sent before it closed, read to its end. (The
    /// reactor may not have seen it yet: the writes never waited. Received bytes stay readable
    /// after a reset, before the reset's error; the bound is only a guard.)
    async fn read_rest(&mut self) {
        let rest = poll_fn(|cx| self.poll_watch(cx));
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), rest).await;
    }

    /// Writes all of `data`, reading the server's side whenever the write waits.
    async fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        poll_fn(|cx| {
            while !data.is_empty() {
                if self.closed() {
                    return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
                }
                match Pin::new(&mut *self.stream).poll_write(cx, data) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => data = &data[n..],
                    Poll::Ready(Err(e)) => {
                        self.write_failed = true;
                        return Poll::Ready(Err(e));
                    }
                    Poll::Pending => {
                        let _ = self.poll_watch(cx);
                        if !self.closed() {
                            return Poll::Pending;
                        }
                    }
                }
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// The end of a body the server did not take whole: [`Sent::Cut`] with what it sent
    /// before it closed, or a failure of the server if it sent nothing.
    async fn cut(&mut self) -> Result<Sent, BodyError> {
        self.read_rest().await;
        if self.buf.has_remaining() {
            Ok(Sent::Cut)
        } else {
            Err(BodyError::Server)
        }
    }

    /// The body's next frame, reading the server's side while the client makes it wait; `None`
    /// once the server has closed.
    async fn frame(
        &mut self,
        body: &mut ReqBody,
    ) -> Option<Option<Result<hyper::body::Frame<Bytes>, super::body::ReqBodyError>>> {
        poll_fn(|cx| {
            if let Poll::Ready(f) = Pin::new(&mut *body).poll_frame(cx) {
                return Poll::Ready(Some(f));
            }
            let _ = self.poll_watch(cx);
            if self.closed() {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// Streams the client's request body to the server in the framing of the head, refusing one
/// longer than `max`, while reading what the server sends meanwhile into `buf`.
pub(super) async fn send_body<S: AsyncRead + AsyncWrite + Unpin>(
    (stream, buf): (&mut S, &mut BytesMut),
    body: &mut ReqBody,
    (framing, max): (codec::RequestFraming, Option<u64>),
    vs_counters: &VirtualServerCounters,
    server_counters: &ServerCounters,
) -> Result<Sent, BodyError> {
    let mut w = Watch {
        stream,
        buf,
        read_done: false,
        write_failed: false,
    };
    let chunked = framing == codec::RequestFraming::Chunked;
    let mut frame_head = BytesMut::with_capacity(32);
    let mut sent = 0u64;
    loop {
        let Some(f) = w.frame(body).await else {
            return w.cut().await;
        };
        let Some(f) = f else { break };
        let f = f.map_err(|_| BodyError::Client)?;
        let Ok(data) = f.into_data() else { continue };
        if data.is_empty() {
            continue;
        }
        sent += data.len() as u64;
        if max.is_some_and(|max| sent > max) {
            return Err(BodyError::TooLarge);
        }
        vs_counters.bytes_in.add(data.len() as u64);
        server_counters.bytes_out.add(data.len() as u64);
        let written = async {
            if chunked {
                frame_head.clear();
                codec::write_chunk_size(&mut frame_head, data.len());
                w.write_all(&frame_head).await?;
            }
            w.write_all(&data).await?;
            if chunked {
                w.write_all(b"\r\n").await?;
            }
            io::Result::Ok(())
        }
        .await;
        if written.is_err() {
            return w.cut().await;
        }
    }
    if chunked && w.write_all(b"0\r\n\r\n").await.is_err() {
        return w.cut().await;
    }
    Ok(Sent::Whole)
}
