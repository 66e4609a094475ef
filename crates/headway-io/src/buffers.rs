//! Socket buffer sizes, forced past the `net.core.{r,w}mem_max` caps when the process may
//! (CAP_NET_ADMIN: `SO_RCVBUFFORCE` / `SO_SNDBUFFORCE`), else as large as the caps allow.
//!
//! A socket that receives a fast datagram flow needs room for what arrives while its reader
//! is not running: at 1 Gbit/s the kernel's default receive buffer (208 KiB, of which each
//! 1.5 KB datagram takes about 2.3 KB of accounting) holds about a millisecond and a half.

use std::io;
use std::os::fd::BorrowedFd;

use crate::sys;

/// Which of a socket's two buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    /// The receive buffer (`SO_RCVBUF`).
    Receive,
    /// The send buffer (`SO_SNDBUF`).
    Send,
}

/// Sets `buffer` of the socket `fd` to about `bytes` (the kernel's accounting size, which is
/// what `getsockopt` reports back) and returns the size the kernel granted. Without
/// CAP_NET_ADMIN the size is capped by the sysctl maximum; that is not an error.
pub fn set(fd: BorrowedFd<'_>, buffer: Buffer, bytes: usize) -> io::Result<usize> {
    let (force, plain) = options(buffer);
    // The kernel doubles the value for bookkeeping overhead; ask for half.
    let v = libc::c_int::try_from(bytes / 2).unwrap_or(libc::c_int::MAX);
    match sys::setsockopt(fd, libc::SOL_SOCKET, force, &v) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            sys::setsockopt(fd, libc::SOL_SOCKET, plain, &v)?;
        }
        Err(e) => return Err(e),
    }
    get(fd, buffer)
}

/// The size of `buffer` of the socket `fd`, as the kernel accounts it.
pub fn get(fd: BorrowedFd<'_>, buffer: Buffer) -> io::Result<usize> {
    let (_, plain) = options(buffer);
    sys::getsockopt_int(fd, libc::SOL_SOCKET, plain).map(|v| usize::try_from(v).unwrap_or(0))
}

fn options(buffer: Buffer) -> (libc::c_int, libc::c_int) {
    match buffer {
        Buffer::Receive => (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        Buffer::Send => (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_udp_socket_gets_larger_buffers_than_the_default() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = get(s.as_fd(), Buffer::Receive).unwrap();
        let want = 4 * before.max(64 * 1024);
        let got = set(s.as_fd(), Buffer::Receive, want).unwrap();
        assert_eq!(got, get(s.as_fd(), Buffer::Receive).unwrap());
        // Forced (root) it is what was asked; capped, it is at least the old size.
        assert!(got >= before, "{got} < {before}");
        let sent = set(s.as_fd(), Buffer::Send, want).unwrap();
        assert_eq!(sent, get(s.as_fd(), Buffer::Send).unwrap());
        // SAFETY: geteuid(2) cannot fail and takes no arguments.
        if unsafe { libc::geteuid() } == 0 {
            assert!(got >= want - 2, "forced receive buffer {got} < {want}");
            assert!(sent >= want - 2, "forced send buffer {sent} < {want}");
        }
    }
}
