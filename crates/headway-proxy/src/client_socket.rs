//! [`ClientSocket`]: a client connection that is used with plain non-blocking system calls and
//! registered with tokio's reactor only when it has to wait.
//!
//! # Why
//!
//! Registering a socket with the reactor costs two system calls per connection (`epoll_ctl`
//! to add it, and to delete it before it is closed) and an allocation. A client that sends its
//! request as soon as it is connected and reads one answer — a browser's short request, a
//! health checker, a load generator with `Connection: close`, another proxy — never makes the
//! proxy wait on its socket: the request is there when the connection is accepted, and the
//! answer fits in the socket's send buffer. Such a connection is read and written directly
//! and closed without ever being registered. The first read or write that would block
//! registers it, and from then on it is tokio's [`TcpStream`]. (HAProxy calls this
//! speculative I/O; it is why it makes two system calls fewer per short connection.)
//!
//! TLS connections run on it too: with `TCP_DEFER_ACCEPT` the ClientHello is there when the
//! connection is accepted, so it is read and the server's flight written directly; the socket
//! is registered when the client owes its answer (`crate::tls::hold_io`), which saves the
//! reactor round trip a socket registered at accept makes before its first read.
//!
//! Connections come from `headway_io::stream::Listener`, which accepts them without
//! registering them (`accept4(SOCK_NONBLOCK | SOCK_CLOEXEC)`).

use std::io::{self, IoSlice, Write as _};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// Who a client connection comes from, and where it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The client: the socket's remote address, or the one its PROXY header names.
    pub addr: SocketAddr,
    /// The address the client connected to, when it is known: named by a PROXY header, or
    /// looked up at accept for a virtual server that sends PROXY headers to servers.
    pub destination: Option<SocketAddr>,
}

impl Peer {
    /// A client at `addr` whose destination is not asked for.
    pub fn at(addr: SocketAddr) -> Peer {
        Peer {
            addr,
            destination: None,
        }
    }
}

/// An accepted client connection, registered with the reactor only when it has to wait (see
/// the module docs). Reads, writes and shutdown behave as [`TcpStream`]'s.
#[derive(Debug)]
pub struct ClientSocket {
    state: State,
}

#[derive(Debug)]
enum State {
    /// Not registered: used with plain non-blocking system calls.
    Direct(std::net::TcpStream),
    /// Registered with the reactor.
    Registered(TcpStream),
    /// Registration failed; the socket is closed.
    Failed,
}

impl ClientSocket {
    /// Wraps an accepted, non-blocking socket.
    pub fn new(socket: std::net::TcpStream) -> ClientSocket {
        ClientSocket {
            state: State::Direct(socket),
        }
    }

    /// Whether the socket has been registered with the reactor.
    pub fn is_registered(&self) -> bool {
        matches!(self.state, State::Registered(_))
    }

    /// The socket as tokio's stream, registered now if it was not.
    pub fn into_tokio(mut self) -> io::Result<TcpStream> {
        self.register()?;
        match self.state {
            State::Registered(s) => Ok(s),
            _ => Err(closed()),
        }
    }

    /// Registers the socket with the reactor now, for a caller that knows its next read must
    /// wait (the peer owes a round trip): trying the read first would cost a system call that
    /// finds nothing. A fresh registration reads only once the reactor reports data.
    pub fn register_now(&mut self) -> io::Result<()> {
        self.register().map(drop)
    }

    /// Registers the socket with the reactor (once) and returns tokio's stream.
    fn register(&mut self) -> io::Result<&mut TcpStream> {
        if let State::Direct(_) = self.state {
            let State::Direct(s) = std::mem::replace(&mut self.state, State::Failed) else {
                unreachable!("matched above")
            };
            self.state = State::Registered(TcpStream::from_std(s)?);
        }
        match &mut self.state {
            State::Registered(s) => Ok(s),
            _ => Err(closed()),
        }
    }

    /// Tries `op` on the unregistered socket: `Some` with its outcome unless it would block.
    /// `None` when the socket is (or must now be) registered.
    fn direct<T>(
        &self,
        mut op: impl FnMut(&std::net::TcpStream) -> io::Result<T>,
    ) -> Option<io::Result<T>> {
        let State::Direct(s) = &self.state else {
            return None;
        };
        loop {
            match op(s) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                other => return Some(other),
            }
        }
    }

    /// The registered stream, registering it now if needed.
    fn registered(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        self.register().map(Pin::new)
    }

    /// Sends `bufs` with `MSG_MORE` (`headway_io::stream::send_more`: the kernel may hold a
    /// short segment back for what follows, such as the FIN of a shutdown), waiting for room
    /// in the send buffer as a write does.
    pub fn poll_send_more(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(r) = self.direct(|s| headway_io::stream::send_more(s, bufs)) {
            return Poll::Ready(r);
        }
        let s: &TcpStream = match self.register() {
            Ok(s) => s,
            Err(e) => return Poll::Ready(Err(e)),
        };
        loop {
            std::task::ready!(s.poll_write_ready(cx))?;
            match s.try_io(Interest::WRITABLE, || {
                headway_io::stream::send_more(s, bufs)
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    /// Acknowledges at once what the client has sent (`TCP_QUICKACK`), leaving delayed-ACK
    /// mode; see `crate::http::Stream::ack_now`. Nothing on a socket that failed.
    pub fn ack_now(&self) {
        let r = match &self.state {
            State::Direct(s) => socket2::SockRef::from(s).set_tcp_quickack(true),
            State::Registered(s) => socket2::SockRef::from(s).set_tcp_quickack(true),
            State::Failed => return,
        };
        if let Err(e) = r {
            tracing::debug!(error = %e, "TCP_QUICKACK refused");
        }
    }

    /// The socket's local address: where the client connected to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.state {
            State::Direct(s) => s.local_addr(),
            State::Registered(s) => s.local_addr(),
            State::Failed => Err(closed()),
        }
    }

    /// Copies the bytes waiting to be read into `buf` without taking them (`MSG_PEEK`),
    /// waiting for some if there are none; 0 at the end of the stream.
    pub async fn peek(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(r) = self.direct(|s| s.peek(buf)) {
            return r;
        }
        self.register()?.peek(buf).await
    }

    /// Writes as much of `buf` as the send buffer takes now, without waiting (an error, such
    /// as `WouldBlock`, when it takes nothing).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match &self.state {
            State::Direct(s) => (&mut &*s).write(buf),
            State::Registered(s) => s.try_write(buf),
            State::Failed => Err(closed()),
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the socket could not be registered",
    )
}

impl AsFd for ClientSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.state {
            State::Direct(s) => s.as_fd(),
            State::Registered(s) => s.as_fd(),
            // A descriptor that is never valid cannot be made without `unsafe`; callers only
            // set options on live sockets, so this is a bug if reached.
            State::Failed => panic!("ClientSocket::as_fd on a socket that failed to register"),
        }
    }
}

impl AsyncRead for ClientSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if let Some(r) = me.direct(|s| headway_io::stream::recv_into(s, buf)) {
            return Poll::Ready(r.map(drop));
        }
        match me.registered() {
            Ok(s) => s.poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// Vectored writes of at most this many bytes in all are copied into one buffer and sent
/// with one `send`: `writev` takes the VFS write path (the file position, the iovec import,
/// the modify notification), which costs more than copying a short answer (its head and a
/// small body) does.
const COALESCE: usize = 4096;

thread_local! {
    /// Where a thread copies the vectored writes it sends with one `send` (see [`COALESCE`]).
    static COALESCED: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(Vec::with_capacity(COALESCE));
}

impl AsyncWrite for ClientSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if let Some(r) = me.direct(|mut s| s.write(buf)) {
            return Poll::Ready(r);
        }
        match me.registered() {
            Ok(s) => s.poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if bufs.len() > 1 && total <= COALESCE {
            // The thread's buffer: a fresh stack array cost a 4 KiB memset per answer.
            return COALESCED.with_borrow_mut(|one| {
                one.clear();
                for b in bufs {
                    one.extend_from_slice(b);
                }
                self.poll_write(cx, one)
            });
        }
        let me = self.get_mut();
        if let Some(r) = me.direct(|mut s| s.write_vectored(bufs)) {
            return Poll::Ready(r);
        }
        match me.registered() {
            Ok(s) => s.poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().state {
            State::Registered(s) => Pin::new(s).poll_flush(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().state {
            State::Direct(s) => Poll::Ready(s.shutdown(std::net::Shutdown::Write)),
            State::Registered(s) => Pin::new(s).poll_shutdown(cx),
            State::Failed => Poll::Ready(Err(closed())),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair() -> (ClientSocket, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let l = headway_io::stream::Listener::new(l).unwrap();
        let addr = l.local_addr().unwrap();
        let (c, accepted) = tokio::join!(TcpStream::connect(addr), l.accept());
        let (s, peer) = accepted.unwrap();
        let c = c.unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        (ClientSocket::new(s), c)
    }

    /// Polls `f` once: whether it is done without waiting.
    pub(crate) async fn poll_once<F: std::future::Future>(f: Pin<&mut F>) -> Poll<F::Output> {
        let mut f = Some(f);
        std::future::poll_fn(|cx| Poll::Ready(f.take().expect("polled once").poll(cx))).await
    }

    /// Waits (up to a second) until `n` bytes can be read from `s` without reading them.
    pub(crate) async fn wait_for_bytes(s: &ClientSocket, n: usize) {
        let mut probe = vec![std::mem::MaybeUninit::<u8>::uninit(); n];
        for _ in 0..500 {
            if matches!(socket2::SockRef::from(s).peek(&mut probe), Ok(k) if k >= n) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    #[tokio::test]
    async fn a_short_exchange_never_registers_the_socket() {
        let (mut s, mut c) = pair().await;
        c.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        // Wait until the request is there, as it is when a client sends it with its connect.
        wait_for_bytes(&s, 18).await;
        let mut buf = vec![0u8; 64];
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n\r\n");
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        s.shutdown().await.unwrap();
        assert!(!s.is_registered(), "nothing had to wait");
        let mut answer = String::new();
        c.read_to_string(&mut answer).await.unwrap();
        assert_eq!(answer, "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
    }

    #[tokio::test]
    async fn register_now_then_a_read_waits_for_the_reactor() {
        let (mut s, mut c) = pair().await;
        s.register_now().unwrap();
        assert!(s.is_registered());
        s.register_now().unwrap();
        let mut buf = [0u8; 5];
        let mut read = std::pin::pin!(s.read_exact(&mut buf));
        assert!(
            poll_once(read.as_mut()).await.is_pending(),
            "nothing sent yet"
        );
        c.write_all(b"later").await.unwrap();
        read.await.unwrap();
        assert_eq!(&buf, b"later");
    }

    #[tokio::test]
    async fn send_more_and_try_write_deliver_before_and_after_registration() {
        let (mut s, mut c) = pair().await;
        let sent = std::future::poll_fn(|cx| s.poll_send_more(cx, &[IoSlice::new(b"one,")]));
        assert_eq!(sent.await.unwrap(), 4);
        assert_eq!(s.try_write(b"two,").unwrap(), 4);
        assert!(!s.is_registered(), "neither had to wait");
        s.register_now().unwrap();
        let sent = std::future::poll_fn(|cx| s.poll_send_more(cx, &[IoSlice::new(b"three,")]));
        assert_eq!(sent.await.unwrap(), 6);
        assert_eq!(s.try_write(b"four").unwrap(), 4);
        s.shutdown().await.unwrap();
        let mut all = String::new();
        c.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "one,two,three,four");
    }

    #[tokio::test]
    async fn a_read_that_would_block_registers_and_waits() {
        let (mut s, mut c) = pair().await;
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            (s.is_registered(), buf)
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        c.write_all(b"hello").await.unwrap();
        let (registered, buf) = reader.await.unwrap();
        assert!(registered);
        assert_eq!(buf, b"hello");
    }

    #[tokio::test]
    async fn a_write_that_would_block_registers_and_finishes_when_the_peer_reads() {
        let (mut s, mut c) = pair().await;
        let big = vec![7u8; 8 << 20];
        let expected = big.len();
        let writer = tokio::spawn(async move {
            s.write_all(&big).await.unwrap();
            s.shutdown().await.unwrap();
            s.is_registered()
        });
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        assert!(writer.await.unwrap(), "8 MiB does not fit in a send buffer");
        assert_eq!(got.len(), expected);
        assert!(got.iter().all(|&b| b == 7));
    }

    #[tokio::test]
    async fn vectored_writes_arrive_in_order_whether_copied_into_one_send_or_not() {
        let (mut s, mut c) = pair().await;
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n".to_vec();
        let small: Vec<u8> = (0..100u8).collect();
        let large: Vec<u8> = (0..COALESCE + 904).map(|i| (i % 251) as u8).collect();
        let want = [&head[..], &small, &head, &large].concat();
        let writer = tokio::spawn(async move {
            for body in [&small, &large] {
                let mut bufs = [IoSlice::new(&head), IoSlice::new(&[]), IoSlice::new(body)];
                let mut slices = &mut bufs[..];
                while !slices.is_empty() {
                    let n = s.write_vectored(slices).await.unwrap();
                    IoSlice::advance_slices(&mut slices, n);
                }
            }
            s.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn the_peer_closing_reads_as_the_end() {
        let (mut s, c) = pair().await;
        drop(c);
        let mut buf = Vec::new();
        let n = s.read_to_end(&mut buf).await.unwrap();
        assert_eq!(n, 0);
    }
}
