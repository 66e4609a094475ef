//! The client socket under a TLS server connection, holding back what the server writes
//! between reading the client's last handshake flight and the first response.
//!
//! When a TLS 1.3 handshake completes, the server sends its session ticket at once, in a
//! write (and a wake-up of the client) of its own; the response follows a few microseconds
//! later. [`HoldIo`] keeps those bytes and sends them in front of the next write, so ticket
//! and response share one system call — also when the client's request came with its
//! Finished and the answer takes a server's round trip (a flush does not send them: the
//! ticket going out alone then cost a write and a wake-up of the client per connection).
//! Nothing waits on it: whenever the connection would wait for the client (a read finds
//! nothing), held bytes go out first — so a client that waits for the server (a TLS 1.2
//! client expecting the server's Finished, a TLS 1.3 client after a HelloRetryRequest) gets
//! them without delay — and shutdown sends them before the FIN.
//!
//! The same holds at the other end of a connection the client asked to close: once its last
//! answer is complete (`ConnActivity::is_ending`), the answer's last records and the
//! close_notify are kept (up to [`MAX_LAST`]) and sent at shutdown with `MSG_MORE`, so the FIN
//! rides on their segment — one write and one segment where there were two writes and three
//! segments. A read that finds nothing sends them too, should the connection go on after all.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::client_socket::ClientSocket;
use crate::http::ConnActivity;

/// Where the connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Before the client's second flight: everything passes. `wrote`: the server's first
    /// flight went out.
    Handshake { wrote: bool },
    /// The client's second flight was read: writes are held, flushes do nothing.
    Hold,
    /// The handshake is over and the client's first request came with its last flight
    /// ([`HoldIo::release`] with `answer_owed`): held bytes wait for the answer's write even
    /// while the server reads (hyper watches for the client closing while it waits for the
    /// server), since the client waits for the answer, not for them.
    Answer,
    /// The handshake is over ([`HoldIo::release`]): held bytes lead the next write.
    Pass,
}

/// The most a connection's last answer keeps back for its close; a longer one is written as
/// it comes.
const MAX_LAST: usize = 64 * 1024;

/// A client socket that coalesces the server's post-handshake messages with the first
/// response, and a closing connection's last answer with its close (see the module doc).
#[derive(Debug)]
pub struct HoldIo {
    tcp: ClientSocket,
    phase: Phase,
    held: Vec<u8>,
    /// The connection's HTTP activity: whether its last answer is complete.
    activity: Arc<ConnActivity>,
}

impl HoldIo {
    /// Wraps an accepted client socket before the handshake starts; `activity` is the one the
    /// HTTP layer will serve the connection with.
    pub fn new(tcp: ClientSocket, activity: Arc<ConnActivity>) -> Self {
        Self {
            tcp,
            phase: Phase::Handshake { wrote: false },
            held: Vec::new(),
            activity,
        }
    }

    /// Acknowledges at once what the client has sent (see `crate::http::Stream::ack_now`).
    pub fn ack_now(&self) {
        self.tcp.ack_now();
    }

    /// The handshake is over: held bytes go out with the next write, at shutdown, or when the
    /// connection would wait for the client — unless `answer_owed` (the client's first request
    /// already arrived), when only the answer's write or shutdown sends them.
    pub fn release(&mut self, answer_owed: bool) {
        self.phase = if answer_owed {
            Phase::Answer
        } else {
            Phase::Pass
        };
    }

    /// Bytes held back now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.len()
    }

    /// Writes what is held (an alert after a failed handshake, say), waiting as needed.
    pub async fn drain(&mut self) -> io::Result<()> {
        self.phase = Phase::Pass;
        std::future::poll_fn(|cx| self.poll_drain(cx)).await
    }

    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.drain(..n);
        }
        Poll::Ready(Ok(()))
    }

    /// Writes held bytes and then `bufs`; returns how many of `bufs`' bytes went out (never
    /// 0 for non-empty `bufs` unless the socket says so).
    fn poll_write_after_held(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        while !self.held.is_empty() {
            let mut all = Vec::with_capacity(bufs.len() + 1);
            all.push(IoSlice::new(&self.held));
            all.extend(bufs.iter().map(|b| IoSlice::new(b)));
            let n = ready!(Pin::new(&mut self.tcp).poll_write_vectored(cx, &all))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n < self.held.len() {
                self.held.drain(..n);
                continue;
            }
            let rest = n - self.held.len();
            self.held.clear();
            if rest > 0 {
                return Poll::Ready(Ok(rest));
            }
        }
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }
}

impl AsyncRead for HoldIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.phase == (Phase::Handshake { wrote: true }) {
            // The client answers the server's flight a round trip from now: wait for the
            // reactor rather than try a read that finds nothing.
            if let Err(e) = this.tcp.register_now() {
                return Poll::Ready(Err(e));
            }
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.tcp).poll_read(cx, buf);
        match r {
            Poll::Pending if !this.held.is_empty() && this.phase != Phase::Answer => {
                // About to wait for the client: what is held goes out now. (If the socket
                // cannot take it, its write readiness wakes this task too.)
                if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
                    return Poll::Ready(Err(e));
                }
            }
            Poll::Ready(Ok(()))
                if buf.filled().len() > before
                    && this.phase == (Phase::Handshake { wrote: true }) =>
            {
                this.phase = Phase::Hold;
            }
            _ => {}
        }
        r
    }
}

impl AsyncWrite for HoldIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match this.phase {
            Phase::Hold => {
                let mut n = 0;
                for b in bufs {
                    this.held.extend_from_slice(b);
                    n += b.len();
                }
                Poll::Ready(Ok(n))
            }
            Phase::Handshake { .. } => {
                let r = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
                if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
                    this.phase = Phase::Handshake { wrote: true };
                }
                r
            }
            Phase::Answer | Phase::Pass => {
                this.phase = Phase::Pass;
                let len: usize = bufs.iter().map(|b| b.len()).sum();
                if this.activity.is_ending() && this.held.len() + len <= MAX_LAST {
                    // The connection's last bytes (the answer's end, the close_notify): kept
                    // for the shutdown, which sends them with the FIN.
                    for b in bufs {
                        this.held.extend_from_slice(b);
                    }
                    return Poll::Ready(Ok(len));
                }
                this.poll_write_after_held(cx, bufs)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Held bytes are not the caller's: a flush while nothing else was written (hyper
        // flushes after reading a request that came with the client's Finished, before it
        // has an answer) keeps them for the answer's write, or for the moment the connection
        // would wait for the client.
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Held bytes go corked (MSG_MORE), so the FIN the shutdown sends rides on their last
        // segment: one segment, and one wake-up of the client, where there were three.
        while !this.held.is_empty() {
            match ready!(this.tcp.poll_send_more(cx, &[IoSlice::new(&this.held)]))? {
                0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                n => drop(this.held.drain(..n)),
            }
        }
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

impl Drop for HoldIo {
    fn drop(&mut self) {
        // Dropped without a shutdown (an error, a timeout): what is held is the client's all
        // the same; whatever the socket takes now goes.
        if !self.held.is_empty() {
            let _ = self.tcp.try_write(&self.held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (HoldIo, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        let s = ClientSocket::new(s.into_std().unwrap());
        (HoldIo::new(s, Arc::default()), c)
    }

    /// Moves `from`'s next `want.len()` bytes into a buffer and checks them.
    async fn expect(from: &mut (impl AsyncRead + Unpin), want: &[u8]) {
        let mut got = vec![0; want.len()];
        from.read_exact(&mut got).await.unwrap();
        assert_eq!(got, want);
    }

    /// A client flight, the server's first flight, the client's second flight: the server
    /// now holds what it writes.
    async fn to_hold() -> (HoldIo, TcpStream) {
        let (mut s, mut c) = pair().await;
        c.write_all(b"hello").await.unwrap();
        expect(&mut s, b"hello").await;
        s.write_all(b"flight").await.unwrap();
        s.flush().await.unwrap();
        expect(&mut c, b"flight").await;
        c.write_all(b"fin+GET").await.unwrap();
        expect(&mut s, b"fin+GET").await;
        (s, c)
    }

    /// The ClientHello that came with the connection is read without the reactor; after the
    /// server's flight the socket is registered and the read waits for the client's answer.
    #[tokio::test]
    async fn after_the_servers_flight_the_read_waits_on_the_reactor() {
        let (mut s, mut c) = pair().await;
        c.write_all(b"hello").await.unwrap();
        crate::client_socket::tests::wait_for_bytes(&s.tcp, 5).await;
        expect(&mut s, b"hello").await;
        s.write_all(b"flight").await.unwrap();
        assert!(!s.tcp.is_registered(), "nothing had to wait yet");
        expect(&mut c, b"flight").await;
        let mut got = [0u8; 3];
        let mut read = std::pin::pin!(s.read_exact(&mut got));
        let first = crate::client_socket::tests::poll_once(read.as_mut()).await;
        assert!(first.is_pending(), "the client has not answered yet");
        c.write_all(b"fin").await.unwrap();
        read.await.unwrap();
        assert_eq!(&got, b"fin");
        assert!(s.tcp.is_registered());
        assert_eq!(s.phase, Phase::Hold);
    }

    #[tokio::test]
    async fn writes_after_the_second_flight_lead_the_first_response() {
        let (mut s, mut c) = to_hold().await;
        s.write_all(b"ticket").await.unwrap();
        s.flush().await.unwrap();
        assert_eq!(s.held(), 6, "held after the second flight");
        s.release(false);
        s.write_all(b"response").await.unwrap();
        assert_eq!(s.held(), 0);
        expect(&mut c, b"ticketresponse").await;
    }

    #[tokio::test]
    async fn a_flush_before_the_answer_keeps_the_ticket_for_it() {
        let (mut s, mut c) = to_hold().await;
        s.write_all(b"ticket").await.unwrap();
        s.release(true);
        // hyper flushes after reading the request and watches for the client closing while
        // it waits for the server: neither sends the ticket.
        s.flush().await.unwrap();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(20), s.read(&mut byte)).await;
        assert!(read.is_err(), "the client sent nothing more");
        assert_eq!(s.held(), 6, "held until the answer");
        s.write_all(b"response").await.unwrap();
        s.flush().await.unwrap();
        assert_eq!(s.held(), 0);
        expect(&mut c, b"ticketresponse").await;
    }

    #[tokio::test]
    async fn held_bytes_go_out_when_the_server_would_wait() {
        let (mut s, mut c) = to_hold().await;
        // A flight the client waits for, written while holding (a HelloRetryRequest's answer,
        // a TLS 1.2 server Finished): the server's next read finds nothing and sends it.
        s.write_all(b"flight2").await.unwrap();
        s.flush().await.unwrap();
        let server = tokio::spawn(async move { expect(&mut s, b"fin").await });
        expect(&mut c, b"flight2").await;
        c.write_all(b"fin").await.unwrap();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn shutdown_and_drain_send_what_is_held() {
        let (mut s, mut c) = to_hold().await;
        s.write_all(b"alert").await.unwrap();
        s.drain().await.unwrap();
        s.shutdown().await.unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"alert");
    }
}
