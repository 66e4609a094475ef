//! Thin, checked wrappers around the libc calls the public modules share.

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Makes a new socket, close-on-exec.
pub(crate) fn socket(
    domain: libc::c_int,
    ty: libc::c_int,
    protocol: libc::c_int,
) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers; a non-negative result is a fresh descriptor we own.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt` with a plain-old-data value.
pub(crate) fn setsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(mem::size_of::<T>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `value` points to `len` readable bytes for the duration of the call; the kernel
    // copies them and keeps no reference.
    let rc =
        unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (value as *const T).cast(), len) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `getsockopt` of an `int` option.
pub(crate) fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid for writes; `len` holds the size of `value`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// `getsockopt(IPPROTO_TCP, TCP_INFO)`: the kernel's view of a TCP connection.
pub(crate) fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<libc::tcp_info> {
    // SAFETY: `tcp_info` is plain old data; all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are valid for writes; `len` holds the size of `info`, and the
    // kernel writes at most that many bytes (fewer on an older kernel; the rest stay zero).
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// Most messages [`send_batch`] hands to the kernel in one call.
pub(crate) const SEND_BATCH: usize = 64;

/// Sends up to [`SEND_BATCH`] whole messages (frames, packets) on a connected or bound socket
/// in one `sendmmsg` call and returns how many the kernel took (in order). An error means the
/// first message was not sent. Interrupted calls are retried.
pub(crate) fn send_batch<B: AsRef<[u8]>>(fd: BorrowedFd<'_>, messages: &[B]) -> io::Result<usize> {
    let n = messages.len().min(SEND_BATCH);
    if n == 0 {
        return Ok(0);
    }
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; SEND_BATCH];
    // SAFETY: `mmsghdr` is plain old data; all-zero is a valid empty header.
    let mut hdrs: [libc::mmsghdr; SEND_BATCH] = unsafe { mem::zeroed() };
    for i in 0..n {
        let m = messages[i].as_ref();
        // The kernel only reads through send iovecs; the cast to *mut is what the C type
        // demands.
        iov[i] = libc::iovec {
            iov_base: m.as_ptr() as *mut libc::c_void,
            iov_len: m.len(),
        };
        hdrs[i].msg_hdr.msg_iov = &mut iov[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    loop {
        // SAFETY: `hdrs[..n]` each point to one iovec describing a live, readable message;
        // `iov` and `messages` outlive the call; no names (the socket is bound or connected)
        // or control data.
        let rc = unsafe { libc::sendmmsg(fd.as_raw_fd(), hdrs.as_mut_ptr(), n as libc::c_uint, 0) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// An interface name as a NUL-terminated string that fits `IFNAMSIZ`, or `None` if it cannot
/// name an interface (empty, too long, or containing NUL or '/').
pub(crate) fn ifname(name: &str) -> Option<CString> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('/') {
        return None;
    }
    CString::new(name).ok()
}

/// A zeroed `ifreq` carrying `name`.
pub(crate) fn ifreq(name: &CString) -> libc::ifreq {
    // SAFETY: `ifreq` is plain old data (arrays, integers, a union of such and a raw pointer);
    // all-zero bytes are a valid value of it.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    req
}

/// An `ioctl` on a socket with an `ifreq` argument.
pub(crate) fn ioctl_ifreq(
    fd: BorrowedFd<'_>,
    request: libc::c_ulong,
    req: &mut libc::ifreq,
) -> io::Result<()> {
    // SAFETY: `req` is a valid, writable `ifreq` for the whole call; the requests we issue
    // (SIOCGIFMTU, SIOCETHTOOL) read and write only within it or through the pointer it carries,
    // which the caller keeps valid.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, req as *mut libc::ifreq) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Converts a duration to a `timespec`, saturating far beyond any real deadline.
pub(crate) fn timespec(d: std::time::Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
    }
}
