//! Client sockets used without the reactor's help: accepted without being registered, and read
//! straight into a caller's uninitialised buffer.
//!
//! What it owns: [`Listener`], a listening socket registered with tokio's reactor for
//! readability whose accepted connections are non-blocking and *not* registered
//! (`accept4(SOCK_NONBLOCK | SOCK_CLOEXEC)`), and [`recv_into`], a read into the unfilled,
//! uninitialised part of a [`ReadBuf`] (tokio's own sockets read that way; safe code could only
//! after zeroing that part, kilobytes per read). `headway-proxy`'s `ClientSocket` builds on
//! both to register a client connection only when it has to wait. What it does not do: wait
//! on an accepted socket, or decide anything about it.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};

use tokio::io::unix::AsyncFd;
use tokio::io::{Interest, ReadBuf};

/// A listening TCP socket registered with the current tokio runtime's reactor for
/// readability. Must be created inside a runtime.
#[derive(Debug)]
pub struct Listener {
    fd: AsyncFd<std::net::TcpListener>,
}

impl Listener {
    /// Registers `listener` (which is made non-blocking).
    pub fn new(listener: std::net::TcpListener) -> io::Result<Listener> {
        listener.set_nonblocking(true)?;
        // SAFETY: the `TcpListener` owns its descriptor, and `AsyncFd` owns the listener until
        // it is dropped (which deregisters it before the descriptor is closed); nothing else
        // closes or replaces the descriptor meanwhile.
        let fd = unsafe { AsyncFd::register_with_interest(listener, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Listener { fd })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.fd.get_ref().local_addr()
    }

    /// Waits for and accepts one connection. The accepted socket is non-blocking,
    /// close-on-exec and not registered with the reactor.
    pub async fn accept(&self) -> io::Result<(std::net::TcpStream, SocketAddr)> {
        loop {
            let mut ready = self.fd.readable().await?;
            let accepted = ready.try_io(|l| {
                socket2::SockRef::from(l.get_ref())
                    .accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            });
            match accepted {
                Ok(Ok((socket, addr))) => {
                    let peer = addr.as_socket().ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidData, "peer is not an IP address")
                    })?;
                    return Ok((socket.into(), peer));
                }
                Ok(Err(e)) => return Err(e),
                // Nothing to accept after all: readiness was cleared, wait again.
                Err(_would_block) => continue,
            }
        }
    }
}

/// Receives from a non-blocking socket into the unfilled part of `buf` and advances its filled
/// part by what arrived. `Ok(0)` while `buf` has room means the peer closed its side;
/// `Err(WouldBlock)` means nothing is there yet.
pub fn recv_into(sock: &impl AsFd, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
    let fd = sock.as_fd().as_raw_fd();
    // SAFETY: the slice is only handed to the kernel as a destination; no byte of it is read
    // here, and `ReadBuf` keeps track of which bytes are initialised.
    let unfilled = unsafe { buf.unfilled_mut() };
    // SAFETY: `fd` is a valid open descriptor borrowed for the call, and the kernel writes at
    // most `unfilled.len()` bytes into `unfilled`.
    let n = unsafe { libc::recv(fd, unfilled.as_mut_ptr().cast(), unfilled.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: `recv` wrote (initialised) the first `n` bytes of the unfilled part.
    unsafe { buf.assume_init(n) };
    buf.advance(n);
    Ok(n)
}

/// Sends from `bufs` on a non-blocking TCP socket with `MSG_MORE`: the kernel keeps the bytes
/// back (as `TCP_CORK` would) until a later send without it or a `shutdown`, whose FIN then
/// rides on the last data segment instead of a segment of its own.
/// `Err(WouldBlock)` when the socket's buffer is full.
pub fn send_more(sock: &impl AsFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    use nix::sys::socket::{sendmsg, MsgFlags};
    // nix names no MSG_MORE.
    let flags = MsgFlags::from_bits_retain(libc::MSG_MORE) | MsgFlags::MSG_NOSIGNAL;
    loop {
        match sendmsg::<()>(sock.as_fd().as_raw_fd(), bufs, &[], flags, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_sockets_are_non_blocking_and_unregistered() {
        let l = Listener::new(std::net::TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let (c, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
        let (s, peer) = accepted.unwrap();
        let c = c.unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        let mut space = [std::mem::MaybeUninit::<u8>::uninit(); 8];
        let mut buf = ReadBuf::uninit(&mut space);
        // Nothing was sent: a non-blocking socket says so at once.
        let e = recv_into(&s, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        // Registering it now works, so it was not registered before.
        tokio::net::TcpStream::from_std(s).unwrap();
        drop(c);
    }

    use std::io::Write;
    use std::mem::MaybeUninit;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn bytes_sent_with_more_reach_the_peer_with_the_shutdown() {
        use std::io::Read;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.set_nodelay(true).unwrap();
        let bufs = [io::IoSlice::new(b"last "), io::IoSlice::new(b"answer")];
        assert_eq!(send_more(&c, &bufs).unwrap(), 11);
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"last answer");
    }

    #[test]
    fn reads_what_arrived_and_says_when_nothing_did() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        let mut space = [MaybeUninit::<u8>::uninit(); 64];
        let mut buf = ReadBuf::uninit(&mut space);
        let e = recv_into(&s, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        c.write_all(b"hello").unwrap();
        let mut got = 0;
        for _ in 0..1000 {
            match recv_into(&s, &mut buf) {
                Ok(n) => {
                    got += n;
                    if got == 5 {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(buf.filled(), b"hello");
        drop(c);
        let mut eof = None;
        for _ in 0..1000 {
            match recv_into(&s, &mut buf) {
                Ok(n) => {
                    eof = Some(n);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(eof, Some(0), "a closed peer reads as 0 bytes");
    }
}
