//! Raw IPv4 sockets that send whole IP packets (header included), for the lab's SYN flooder.
//!
//! What it owns: opening an `AF_INET`/`SOCK_RAW`/`IPPROTO_RAW` socket (which implies
//! `IP_HDRINCL`: the caller writes the IPv4 header itself, source address included) connected
//! to one destination, and sending packets to it in batches with `sendmmsg`. What it does not
//! do: build packets (the lab's `synflood` module does), pace them, or receive anything.
//!
//! raw(7): with `IP_HDRINCL` the kernel still fills in the header checksum and the total
//! length, and an identification of 0; everything else goes out as written. Opening the socket
//! needs CAP_NET_RAW.

use std::io;
use std::mem;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use crate::sys;

/// Most packets handed to the kernel in one `sendmmsg` call.
pub const MAX_BATCH: usize = sys::SEND_BATCH;

/// How long a send may block on a full buffer before it fails with `WouldBlock`.
const SEND_TIMEOUT: Duration = Duration::from_millis(100);

/// A raw IPv4 socket connected to one destination. See the module docs.
#[derive(Debug)]
pub struct RawIpv4Socket {
    fd: OwnedFd,
    dst: Ipv4Addr,
}

impl RawIpv4Socket {
    /// Opens a raw socket in the calling thread's network namespace, connected to `dst` (the
    /// route to `dst` picks the interface), with a send buffer of about `buffer_bytes`.
    pub fn open(dst: Ipv4Addr, buffer_bytes: usize) -> io::Result<Self> {
        let fd = sys::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW)?;
        let bytes = libc::c_int::try_from(buffer_bytes / 2).unwrap_or(libc::c_int::MAX);
        // The kernel doubles the value for bookkeeping; past wmem_max only with CAP_NET_ADMIN.
        if sys::setsockopt(fd.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &bytes).is_err() {
            sys::setsockopt(fd.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, &bytes)?;
        }
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: SEND_TIMEOUT.as_micros() as libc::suseconds_t,
        };
        sys::setsockopt(fd.as_fd(), libc::SOL_SOCKET, libc::SO_SNDTIMEO, &timeout)?;
        let addr = sockaddr_in(dst);
        // SAFETY: `addr` is a valid `sockaddr_in` of the stated size for the duration of the
        // call; the kernel copies it.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_in).cast(),
                mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(RawIpv4Socket { fd, dst })
    }

    /// The destination it is connected to.
    pub fn destination(&self) -> Ipv4Addr {
        self.dst
    }

    /// Sends up to [`MAX_BATCH`] whole IPv4 packets in one system call and returns how many the
    /// kernel took (in order). An error means the first packet was not sent (`WouldBlock`
    /// after 100 ms on a full buffer, `ENOBUFS` when the device queue is full).
    pub fn send_batch<B: AsRef<[u8]>>(&self, packets: &[B]) -> io::Result<usize> {
        sys::send_batch(self.fd.as_fd(), packets)
    }
}

impl AsFd for RawIpv4Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn sockaddr_in(ip: Ipv4Addr) -> libc::sockaddr_in {
    // SAFETY: `sockaddr_in` is plain old data; all-zero is valid.
    let mut a: libc::sockaddr_in = unsafe { mem::zeroed() };
    a.sin_family = libc::AF_INET as libc::sa_family_t;
    a.sin_addr = libc::in_addr {
        s_addr: u32::from(ip).to_be(),
    };
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_root() -> bool {
        nix::unistd::Uid::effective().is_root()
    }

    /// A minimal IPv4 + UDP packet from 127.0.0.1 to `to` carrying `payload` (UDP checksum 0:
    /// none, allowed over IPv4).
    fn udp_packet(to: std::net::SocketAddrV4, payload: &[u8]) -> Vec<u8> {
        let total = 20 + 8 + payload.len();
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = libc::IPPROTO_UDP as u8;
        p[12..16].copy_from_slice(&[127, 0, 0, 1]);
        p[16..20].copy_from_slice(&to.ip().octets());
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&to.port().to_be_bytes());
        p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        p[28..].copy_from_slice(payload);
        p
    }

    #[test]
    fn whole_packets_written_here_arrive_as_written() {
        if !is_root() {
            eprintln!("needs CAP_NET_RAW: skipped");
            return;
        }
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let std::net::SocketAddr::V4(to) = rx.local_addr().unwrap() else {
            unreachable!()
        };
        let s = RawIpv4Socket::open(*to.ip(), 1 << 20).unwrap();
        assert_eq!(s.destination(), *to.ip());
        let packets: Vec<Vec<u8>> = (0..3u8).map(|i| udp_packet(to, &[i; 10])).collect();
        assert_eq!(s.send_batch(&packets).unwrap(), 3);
        let mut buf = [0u8; 64];
        for i in 0..3u8 {
            let (n, from) = rx.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i; 10]);
            assert_eq!(from.port(), 40000);
        }
        assert_eq!(s.send_batch::<Vec<u8>>(&[]).unwrap(), 0);
    }
}
