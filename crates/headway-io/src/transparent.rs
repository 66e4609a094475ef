//! Listening sockets for transparent proxying (TPROXY).
//!
//! An nftables `tproxy to :PORT` rule delivers TCP connections addressed to *other* hosts to a
//! local listener; the kernel only does so if the listener has `IP_TRANSPARENT` set (ip(7)).
//! On the accepted socket, `local_addr()` is then the connection's original destination, which
//! is how the WAN optimizer learns where an intercepted flow was going.
//!
//! What it does not do: install the nftables rules, the fwmark rule or the local route that
//! send packets to the listener (that is `headway-wanopt`'s `intercept`), or accept anything.
//!
//! Setting `IP_TRANSPARENT` needs CAP_NET_ADMIN (or CAP_NET_RAW); without it
//! [`transparent_listener`] fails with `PermissionDenied`. Everything here uses nix's safe
//! wrappers: no `unsafe`.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;

use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrStorage,
};

/// A nonblocking TCP listener bound to `addr` with `IP_TRANSPARENT` and `SO_REUSEADDR`, in the
/// calling thread's network namespace, listening with a queue of `backlog` connections.
///
/// The result is ready for `tokio::net::TcpListener::from_std`. An IPv6 `addr` gets the same
/// `IP_TRANSPARENT` option, which Linux honours on IPv6 TCP sockets as well.
pub fn transparent_listener(addr: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    setsockopt(&fd, sockopt::IpTransparent, &true)?;
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    listen(&fd, Backlog::new(backlog)?)?;
    Ok(TcpListener::from(fd))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    use nix::sys::socket::getsockopt;

    use super::*;

    fn is_root() -> bool {
        nix::unistd::Uid::effective().is_root()
    }

    #[test]
    fn a_transparent_listener_accepts_ordinary_connections() {
        let r = transparent_listener("127.0.0.1:0".parse().unwrap(), 16);
        if !is_root() {
            let e = r.expect_err("IP_TRANSPARENT without privileges");
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
            eprintln!("not root: only the refusal was checked");
            return;
        }
        let l = r.unwrap();
        assert!(getsockopt(&l.as_fd(), sockopt::IpTransparent).unwrap());
        assert!(getsockopt(&l.as_fd(), sockopt::ReuseAddr).unwrap());
        let at = l.local_addr().unwrap();
        assert_ne!(at.port(), 0);
        // Nonblocking: with an empty queue, accept returns at once.
        assert_eq!(l.accept().unwrap_err().kind(), io::ErrorKind::WouldBlock);
        let mut c = std::net::TcpStream::connect(at).unwrap();
        c.write_all(b"hi").unwrap();
        l.set_nonblocking(false).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut got = [0u8; 2];
        s.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
        assert_eq!(s.local_addr().unwrap(), at);
    }

    #[test]
    fn ipv6_and_a_bad_backlog() {
        if !is_root() {
            return;
        }
        // IPv6 loopback may be absent in a bare namespace: only a bind error is acceptable.
        match transparent_listener("[::1]:0".parse().unwrap(), 16) {
            Ok(l) => assert!(getsockopt(&l.as_fd(), sockopt::IpTransparent).unwrap()),
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::AddrNotAvailable, "{e}"),
        }
        let e = transparent_listener("127.0.0.1:0".parse().unwrap(), -5).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
