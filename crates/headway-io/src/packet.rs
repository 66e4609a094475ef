//! AF_PACKET raw sockets bound to one interface.
//!
//! Two types, one per job, because the emulator reads from one interface and writes to another:
//!
//! - [`RecvSocket`] sees every frame arriving on the interface (`ETH_P_ALL`, promiscuous
//!   membership), but not frames sent from this host on it (`PACKET_IGNORE_OUTGOING`), so a
//!   bridge never reads back what it wrote. It is read in batches with `recvmmsg` and never
//!   blocks; wait for it with [`crate::timer::Sleeper::wait_readable`].
//! - [`SendSocket`] is bound with protocol 0, so it receives nothing and never fills up; frames
//!   are written whole (Ethernet header included) in batches with `sendmmsg`.
//!
//! Call order: `open` (as root or with CAP_NET_RAW, in the network namespace the interface lives
//! in), then `recv_batch` / `send_batch` from any thread. Both types are `Send + Sync`; the
//! kernel serialises concurrent calls.
//!
//! Frames are whatever the interface delivers: with segmentation or receive offloads on, that
//! may be a 64 KiB "super-frame" — switch them off with [`crate::offload::disable`]. A VLAN tag
//! that the driver strips (rx VLAN offload) is not given back.

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use crate::buffers::{self, Buffer};
use crate::{iface, sys};

/// Most frames one `recv_batch` or `send_batch` system call moves.
pub const MAX_BATCH: usize = 64;

// uapi/linux/if_packet.h
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_MR_PROMISC: libc::c_ushort = 1;

/// `struct packet_mreq` from uapi/linux/if_packet.h.
#[repr(C)]
#[derive(Clone, Copy)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [libc::c_uchar; 8],
}

/// `struct tpacket_stats` from uapi/linux/if_packet.h.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TpacketStats {
    tp_packets: libc::c_uint,
    tp_drops: libc::c_uint,
}

/// Why a packet socket could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// No interface of that name exists in the calling thread's network namespace.
    #[error("no interface named {0} in this network namespace")]
    NoSuchInterface(String),
    /// The process may not open raw sockets.
    #[error("opening a packet socket on {0} needs root or CAP_NET_RAW")]
    NotPermitted(String),
    /// Another system call failed.
    #[error("{op} on the packet socket for {iface} failed: {source}")]
    Io {
        /// The interface name.
        iface: String,
        /// What we were doing (`"socket"`, `"bind"`, a socket option name).
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Kernel counters of a receive socket since the previous call to
/// [`RecvSocket::take_statistics`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames the kernel handed to the socket (including dropped ones).
    pub packets: u64,
    /// Frames the kernel dropped because the socket's receive buffer was full.
    pub drops: u64,
}

/// A promiscuous receive-only packet socket on one interface. See the module docs.
#[derive(Debug)]
pub struct RecvSocket {
    fd: OwnedFd,
    iface: String,
}

impl RecvSocket {
    /// Opens a receive socket on `iface` with a receive buffer of about `buffer_bytes` (forced
    /// past `net.core.rmem_max` when we have CAP_NET_ADMIN).
    pub fn open(iface: &str, buffer_bytes: usize) -> Result<Self, OpenError> {
        let io_err = |op: &'static str| {
            move |source| OpenError::Io {
                iface: iface.to_owned(),
                op,
                source,
            }
        };
        let index = lookup(iface)?;
        // Protocol 0 at creation so nothing from other interfaces is queued before bind(2).
        let fd = open_packet_socket(iface)?;
        let fdb = fd.as_fd();
        bind(fdb, index, eth_p_all()).map_err(|e| bind_error(iface, e))?;
        sys::setsockopt(fdb, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &1_i32)
            .map_err(io_err("PACKET_IGNORE_OUTGOING"))?;
        let mreq = PacketMreq {
            mr_ifindex: index as libc::c_int,
            mr_type: PACKET_MR_PROMISC,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        sys::setsockopt(fdb, libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)
            .map_err(io_err("PACKET_ADD_MEMBERSHIP"))?;
        buffers::set(fdb, Buffer::Receive, buffer_bytes).map_err(io_err("SO_RCVBUF"))?;
        let sock = RecvSocket {
            fd,
            iface: iface.to_owned(),
        };
        // Frames counted before this point belong to nobody.
        let _ = sock.take_statistics();
        Ok(sock)
    }

    /// The interface this socket reads.
    pub fn interface(&self) -> &str {
        &self.iface
    }

    /// The receive buffer size the kernel granted, in bytes.
    pub fn buffer_bytes(&self) -> io::Result<usize> {
        buffers::get(self.fd.as_fd(), Buffer::Receive)
    }

    /// Reads up to `min(bufs.len(), lens.len(), MAX_BATCH)` waiting frames without blocking and
    /// returns how many it read (0 when none is waiting).
    ///
    /// Frame `i` is written to the start of `bufs[i]` (the whole slice is offered) and
    /// `lens[i]` is set to the frame's true length; when `lens[i] > bufs[i].len()` the frame
    /// was longer than the buffer and only its first bytes were kept.
    pub fn recv_batch<B: AsMut<[u8]>>(
        &self,
        bufs: &mut [B],
        lens: &mut [usize],
    ) -> io::Result<usize> {
        let n = bufs.len().min(lens.len()).min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_BATCH];
        // SAFETY: `mmsghdr` is plain old data (integers and raw pointers); all-zero is valid
        // and means "no name, no control data, no iovecs".
        let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { mem::zeroed() };
        for i in 0..n {
            let buf = bufs[i].as_mut();
            iov[i] = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            hdrs[i].msg_hdr.msg_iov = &mut iov[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        let got = loop {
            // SAFETY: `hdrs[..n]` are initialised headers whose single iovec each points into
            // a distinct, exclusively borrowed buffer of the stated length; `iov` and `bufs`
            // outlive the call. MSG_DONTWAIT makes it non-blocking; no timeout pointer.
            let rc = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    std::ptr::null_mut(),
                )
            };
            if rc >= 0 {
                break rc as usize;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::WouldBlock => return Ok(0),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(err),
            }
        };
        for i in 0..got {
            // With MSG_TRUNC, packet sockets report the frame's full length.
            lens[i] = hdrs[i].msg_len as usize;
        }
        Ok(got)
    }

    /// The kernel's counters since the previous call (reading them resets them).
    pub fn take_statistics(&self) -> io::Result<KernelStats> {
        let mut st = TpacketStats::default();
        let mut len = mem::size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes and `len` holds the size of `st`.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStats).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(KernelStats {
            packets: u64::from(st.tp_packets),
            drops: u64::from(st.tp_drops),
        })
    }
}

impl AsFd for RecvSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A send-only packet socket on one interface. See the module docs.
#[derive(Debug)]
pub struct SendSocket {
    fd: OwnedFd,
    iface: String,
}

impl SendSocket {
    /// Opens a send socket on `iface` with a send buffer of about `buffer_bytes`.
    ///
    /// Sends block while the send buffer is full, for at most [`SEND_TIMEOUT`] (then they fail
    /// with `WouldBlock`), so a stuck interface cannot hang the caller.
    pub fn open(iface: &str, buffer_bytes: usize) -> Result<Self, OpenError> {
        let io_err = |op: &'static str| {
            move |source| OpenError::Io {
                iface: iface.to_owned(),
                op,
                source,
            }
        };
        let index = lookup(iface)?;
        let fd = open_packet_socket(iface)?;
        let fdb = fd.as_fd();
        bind(fdb, index, 0).map_err(|e| bind_error(iface, e))?;
        buffers::set(fdb, Buffer::Send, buffer_bytes).map_err(io_err("SO_SNDBUF"))?;
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: SEND_TIMEOUT.as_micros() as libc::suseconds_t,
        };
        sys::setsockopt(fdb, libc::SOL_SOCKET, libc::SO_SNDTIMEO, &timeout)
            .map_err(io_err("SO_SNDTIMEO"))?;
        Ok(SendSocket {
            fd,
            iface: iface.to_owned(),
        })
    }

    /// Hands frames straight to the driver, skipping the interface's queueing discipline
    /// (`PACKET_QDISC_BYPASS`). Faster, but local packet captures no longer see these frames
    /// leave.
    pub fn bypass_qdisc(&self) -> io::Result<()> {
        sys::setsockopt(
            self.fd.as_fd(),
            libc::SOL_PACKET,
            PACKET_QDISC_BYPASS,
            &1_i32,
        )
    }

    /// The interface this socket writes.
    pub fn interface(&self) -> &str {
        &self.iface
    }

    /// Sends one whole frame (Ethernet header first).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        loop {
            // SAFETY: `frame` is valid for reads of `frame.len()` bytes during the call.
            let rc =
                unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if rc >= 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    /// Sends up to `MAX_BATCH` whole frames in one system call and returns how many the kernel
    /// took (in order). An error means the first frame was not sent.
    pub fn send_batch<B: AsRef<[u8]>>(&self, frames: &[B]) -> io::Result<usize> {
        sys::send_batch(self.fd.as_fd(), frames)
    }
}

impl AsFd for SendSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn lookup(iface: &str) -> Result<u32, OpenError> {
    iface::ifindex(iface).map_err(|e| match e {
        iface::InterfaceError::NoSuchInterface(n) => OpenError::NoSuchInterface(n),
        iface::InterfaceError::Io { iface, source } => OpenError::Io {
            iface,
            op: "if_nametoindex",
            source,
        },
    })
}

fn open_packet_socket(iface: &str) -> Result<OwnedFd, OpenError> {
    sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => OpenError::NotPermitted(iface.to_owned()),
        _ => OpenError::Io {
            iface: iface.to_owned(),
            op: "socket",
            source: e,
        },
    })
}

fn bind_error(iface: &str, e: io::Error) -> OpenError {
    match e.raw_os_error() {
        Some(libc::ENODEV) => OpenError::NoSuchInterface(iface.to_owned()),
        Some(libc::EPERM) | Some(libc::EACCES) => OpenError::NotPermitted(iface.to_owned()),
        _ => OpenError::Io {
            iface: iface.to_owned(),
            op: "bind",
            source: e,
        },
    }
}

/// `htons(ETH_P_ALL)`.
fn eth_p_all() -> u16 {
    (libc::ETH_P_ALL as u16).to_be()
}

/// Binds a packet socket to one interface and a protocol in network byte order (0: receive
/// nothing).
fn bind(fd: BorrowedFd<'_>, ifindex: u32, protocol_be: u16) -> io::Result<()> {
    // SAFETY: `sockaddr_ll` is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as libc::c_ushort;
    addr.sll_protocol = protocol_be;
    addr.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `addr` is a valid `sockaddr_ll` of the stated size for the duration of the call.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How long a send blocked on a full send buffer waits before it fails with `WouldBlock`.
pub const SEND_TIMEOUT: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    fn is_root() -> bool {
        // SAFETY: geteuid(2) cannot fail and takes no arguments.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn unknown_interface_is_named_in_the_error() {
        let err = RecvSocket::open("hwt-nope0", 1 << 20).unwrap_err();
        assert!(matches!(err, OpenError::NoSuchInterface(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "no interface named hwt-nope0 in this network namespace"
        );
        let err = SendSocket::open("hwt-nope0", 1 << 20).unwrap_err();
        assert!(matches!(err, OpenError::NoSuchInterface(_)), "{err:?}");
    }

    #[test]
    fn loopback_frames_sent_are_received() {
        if !is_root() {
            eprintln!("skipping: needs root for AF_PACKET");
            return;
        }
        // On loopback every frame we send is also "outgoing", so the receive socket must not
        // see it (PACKET_IGNORE_OUTGOING) but does see the looped-back incoming copy.
        let rx = RecvSocket::open("lo", 1 << 20).unwrap();
        let tx = SendSocket::open("lo", 1 << 20).unwrap();
        assert!(rx.buffer_bytes().unwrap() >= 1 << 19);
        // An Ethernet frame with a private EtherType (0x88b5, IEEE local experimental) and a
        // marker payload, so other loopback traffic cannot be mistaken for ours.
        let mut frame = vec![0u8; 60];
        frame[12] = 0x88;
        frame[13] = 0xb5;
        let marker = std::process::id().to_be_bytes();
        frame[14..18].copy_from_slice(&marker);
        frame[18] = 7;
        let frames = [frame.clone(), frame.clone()];
        assert_eq!(tx.send_batch(&frames).unwrap(), 2);
        tx.send(&frame).unwrap();

        let mut bufs = vec![vec![0u8; 2048]; 8];
        let mut lens = vec![0usize; 8];
        let mut seen = 0;
        let deadline = headway_core::SystemClock::now() + Duration::from_secs(5);
        while seen < 3 && headway_core::SystemClock::now() < deadline {
            let n = rx.recv_batch(&mut bufs, &mut lens).unwrap();
            for i in 0..n {
                if lens[i] == 60 && bufs[i][12..19] == frame[12..19] {
                    seen += 1;
                }
            }
            if n == 0 {
                crate::timer::Sleeper::new()
                    .wait_readable(
                        rx.as_fd(),
                        headway_core::SystemClock::now() + Duration::from_millis(10),
                    )
                    .unwrap();
            }
        }
        assert_eq!(seen, 3, "each frame sent on lo comes back exactly once");

        // A frame longer than the buffer offered reports its true length.
        let big = {
            let mut f = frame.clone();
            f.resize(1000, 0xab);
            f
        };
        tx.send(&big).unwrap();
        let mut small = vec![vec![0u8; 100]; 4];
        let mut lens = vec![0usize; 4];
        let deadline = headway_core::SystemClock::now() + Duration::from_secs(5);
        let mut got_len = None;
        while got_len.is_none() && headway_core::SystemClock::now() < deadline {
            let n = rx.recv_batch(&mut small, &mut lens).unwrap();
            for i in 0..n {
                if small[i][12..19] == frame[12..19] {
                    got_len = Some(lens[i]);
                }
            }
        }
        assert_eq!(got_len, Some(1000));
        let st = rx.take_statistics().unwrap();
        assert!(st.packets >= 4, "{st:?}");
    }
}
