//! This process's own socket descriptors, duplicated, for looking at their options from outside
//! the code that owns them (what `ss` does from another process, done in-process).
//!
//! What it owns: listing `/proc/self/fd` and duplicating each socket descriptor with
//! `fcntl(F_DUPFD_CLOEXEC)`, so the caller holds an [`OwnedFd`] of its own and can call
//! `getsockopt`/`getsockname` on it without borrowing a descriptor it does not own. What it
//! does not do: anything to the sockets (a duplicate shares the socket, so reading options is
//! harmless; closing the duplicate does not close the original).
//!
//! Used by end-to-end tests that check the options the ADC set on its live connections.
//! Races are benign: a descriptor closed between the listing and the duplication is skipped;
//! one reused meanwhile is returned as whatever it now is — identify sockets by their
//! addresses, not by number.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// A duplicate of one of this process's socket descriptors.
#[derive(Debug)]
pub struct OwnSocket {
    /// The original descriptor's number.
    pub number: RawFd,
    /// The socket's inode (as in `socket:[INODE]` and `ss -e`'s `ino:`).
    pub inode: u64,
    /// The duplicate, owned by the caller.
    pub fd: OwnedFd,
}

/// Duplicates every socket descriptor this process holds.
pub fn own_sockets() -> io::Result<Vec<OwnSocket>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Some(number) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            continue;
        };
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let Some(inode) = socket_inode(&target.to_string_lossy()) else {
            continue;
        };
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) reads and writes no memory of ours; on a number that
        // is not an open descriptor it fails with EBADF. On success the result is a fresh
        // descriptor that nothing else owns.
        let dup = unsafe { libc::fcntl(number, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            continue;
        }
        // SAFETY: `dup` was just returned by fcntl(F_DUPFD_CLOEXEC) and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(dup) };
        out.push(OwnSocket { number, inode, fd });
    }
    Ok(out)
}

/// The inode of a `/proc/PID/fd` link target `socket:[12345]`.
fn socket_inode(target: &str) -> Option<u64> {
    target
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn inodes_parse_from_link_targets() {
        assert_eq!(socket_inode("socket:[12345]"), Some(12345));
        assert_eq!(socket_inode("pipe:[12345]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
        assert_eq!(socket_inode("socket:[x]"), None);
    }

    #[test]
    fn a_listener_of_ours_is_found_by_its_address() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let found = own_sockets().unwrap().into_iter().any(|s| {
            nix::sys::socket::getsockname::<nix::sys::socket::SockaddrIn>(s.fd.as_raw_fd())
                .is_ok_and(|a| a.port() == addr.port())
        });
        assert!(found);
    }
}
