//! TCP socket options that `socket2` does not wrap: the minimum retransmission timeout
//! (`TCP_RTO_MIN_US`), the delayed-ACK ceiling (`TCP_DELACK_MAX_US`), the window clamp
//! (`TCP_WINDOW_CLAMP`) and deferred accepting (`TCP_DEFER_ACCEPT`); and the count of segments
//! a connection received (`TCP_INFO`), with which tests see what went over the wire.
//!
//! What it owns: setting and reading these options on any TCP socket (`AsFd`). What it does not
//! do: decide values (the ADC's TCP profiles do) or fall back when the kernel lacks an option —
//! a kernel before 6.15 answers `TCP_RTO_MIN_US` and `TCP_DELACK_MAX_US` with
//! `ENOPROTOOPT`, returned as is so the caller can say so.
//!
//! Kernel rules (net/ipv4/tcp.c, Linux 6.15+): `TCP_RTO_MIN_US` takes 2 ms … 200 ms (the
//! default minimum is also the largest a socket may set; a larger minimum exists only as the
//! route's `rto_min`, which wins over the socket's); `TCP_DELACK_MAX_US` takes 2 ms … 200 ms.
//! Both are kept in jiffies, so a read-back is rounded up to the tick (4 ms at HZ=250).

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use crate::sys;

/// `TCP_RTO_MIN_US` (include/uapi/linux/tcp.h, Linux 6.15); not yet in the libc crate.
const TCP_RTO_MIN_US: libc::c_int = 45;
/// `TCP_DELACK_MAX_US` (include/uapi/linux/tcp.h, Linux 6.15); not yet in the libc crate.
const TCP_DELACK_MAX_US: libc::c_int = 46;

/// Sets the socket's minimum retransmission timeout (`TCP_RTO_MIN_US`).
pub fn set_rto_min(sock: &impl AsFd, min: Duration) -> io::Result<()> {
    set_us(sock, TCP_RTO_MIN_US, min)
}

/// The socket's minimum retransmission timeout (`TCP_RTO_MIN_US`).
pub fn rto_min(sock: &impl AsFd) -> io::Result<Duration> {
    get_us(sock, TCP_RTO_MIN_US)
}

/// Sets the longest delay of a delayed ACK (`TCP_DELACK_MAX_US`).
pub fn set_delack_max(sock: &impl AsFd, max: Duration) -> io::Result<()> {
    set_us(sock, TCP_DELACK_MAX_US, max)
}

/// The longest delay of a delayed ACK (`TCP_DELACK_MAX_US`).
pub fn delack_max(sock: &impl AsFd) -> io::Result<Duration> {
    get_us(sock, TCP_DELACK_MAX_US)
}

/// Bounds the window advertised to the peer (`TCP_WINDOW_CLAMP`), bytes. The kernel raises a
/// value below half its minimum receive buffer to that half.
pub fn set_window_clamp(sock: &impl AsFd, bytes: u32) -> io::Result<()> {
    let v =
        libc::c_int::try_from(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    sys::setsockopt(sock.as_fd(), libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, &v)
}

/// The window clamp (`TCP_WINDOW_CLAMP`), bytes.
pub fn window_clamp(sock: &impl AsFd) -> io::Result<u32> {
    let v = sys::getsockopt_int(sock.as_fd(), libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP)?;
    Ok(v.max(0) as u32)
}

/// Segments the connection has received so far, the handshake's and pure acknowledgements
/// included (`TCP_INFO`'s `tcpi_segs_in`, Linux 4.2+).
pub fn segments_received(sock: &impl AsFd) -> io::Result<u32> {
    Ok(sys::tcp_info(sock.as_fd())?.tcpi_segs_in)
}

/// Makes a listening socket hand out a connection only once the client's first bytes have
/// arrived, or after about `wait` without any (`TCP_DEFER_ACCEPT`, whole seconds, rounded up;
/// zero turns it off). For protocols whose client speaks first (HTTP, TLS): the accepting
/// process is woken once per connection, when there is something to read.
pub fn set_defer_accept(sock: &impl AsFd, wait: Duration) -> io::Result<()> {
    let secs = libc::c_int::try_from(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    sys::setsockopt(
        sock.as_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_DEFER_ACCEPT,
        &secs,
    )
}

/// Whether the socket defers accepting (`TCP_DEFER_ACCEPT` set; the kernel reads back its
/// retransmission count, not the seconds).
pub fn defers_accept(sock: &impl AsFd) -> io::Result<bool> {
    Ok(sys::getsockopt_int(sock.as_fd(), libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT)? > 0)
}

fn set_us(sock: &impl AsFd, name: libc::c_int, d: Duration) -> io::Result<()> {
    let us = libc::c_int::try_from(d.as_micros())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    sys::setsockopt(sock.as_fd(), libc::IPPROTO_TCP, name, &us)
}

fn get_us(sock: &impl AsFd, name: libc::c_int) -> io::Result<Duration> {
    let us = sys::getsockopt_int(sock.as_fd(), libc::IPPROTO_TCP, name)?;
    Ok(Duration::from_micros(us.max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether this kernel has the 6.15 options.
    fn has_615_options(s: &std::net::TcpListener) -> bool {
        !matches!(rto_min(s), Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT))
    }

    #[test]
    fn deferred_accept_hands_out_connections_with_data_only() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(!defers_accept(&l).unwrap());
        set_defer_accept(&l, Duration::from_millis(1500)).unwrap();
        assert!(defers_accept(&l).unwrap());
        let addr = l.local_addr().unwrap();
        let _silent = std::net::TcpStream::connect(addr).unwrap();
        let mut talking = std::net::TcpStream::connect(addr).unwrap();
        std::io::Write::write_all(&mut talking, b"GET /").unwrap();
        // A blocking accept: the silent connection, first in the queue, is held back.
        let (accepted, _) = l.accept().unwrap();
        // The one handed out is the one that spoke, and its bytes are there.
        assert_eq!(accepted.peer_addr().unwrap(), talking.local_addr().unwrap());
        let mut buf = [0u8; 8];
        accepted.set_nonblocking(true).unwrap();
        let n = std::io::Read::read(&mut &accepted, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"GET /");
        set_defer_accept(&l, Duration::ZERO).unwrap();
        assert!(!defers_accept(&l).unwrap());
    }

    #[test]
    fn segments_received_counts_what_arrived() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut a, _) = l.accept().unwrap();
        // The client has the SYN-ACK; the accepted side the SYN and the handshake's ACK.
        assert_eq!(segments_received(&c).unwrap(), 1);
        assert_eq!(segments_received(&a).unwrap(), 2);
        a.write_all(b"one").unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(c.read(&mut buf).unwrap(), 3);
        assert_eq!(segments_received(&c).unwrap(), 2);
        a.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(c.read(&mut buf).unwrap(), 0);
        assert_eq!(segments_received(&c).unwrap(), 3);
        c.write_all(b"x").unwrap();
    }

    #[test]
    fn options_set_on_a_real_socket_read_back() {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_window_clamp(&s, 256 * 1024).unwrap();
        assert_eq!(window_clamp(&s).unwrap(), 256 * 1024);
        if !has_615_options(&s) {
            eprintln!("kernel without TCP_RTO_MIN_US / TCP_DELACK_MAX_US: skipped");
            return;
        }
        set_rto_min(&s, Duration::from_millis(100)).unwrap();
        set_delack_max(&s, Duration::from_millis(100)).unwrap();
        // Kept in jiffies: 100 ms is a whole number of ticks at HZ 100, 250, 300 and 1000.
        assert_eq!(rto_min(&s).unwrap(), Duration::from_millis(100));
        assert_eq!(delack_max(&s).unwrap(), Duration::from_millis(100));
        // Above 200 ms the kernel refuses the socket option (only a route may go higher).
        let e = set_rto_min(&s, Duration::from_millis(400)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert_eq!(rto_min(&s).unwrap(), Duration::from_millis(100));
    }
}
