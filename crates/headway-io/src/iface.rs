//! Interface lookups in the calling thread's network namespace.
//!
//! `/sys/class/net` shows the namespace sysfs was mounted in, not the thread's, so these use a
//! socket `ioctl` and `if_nametoindex`, which both follow the thread's current namespace.

use std::io;
use std::os::fd::AsFd;

use crate::sys;

/// Why an interface lookup failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InterfaceError {
    /// No interface of that name exists in the calling thread's network namespace.
    #[error("no interface named {0} in this network namespace")]
    NoSuchInterface(String),
    /// The system call failed for another reason.
    #[error("looking up interface {iface} failed: {source}")]
    Io {
        /// The interface name.
        iface: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// The index of the interface called `name`.
pub fn ifindex(name: &str) -> Result<u32, InterfaceError> {
    let c = sys::ifname(name).ok_or_else(|| InterfaceError::NoSuchInterface(name.to_owned()))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        let err = io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) => {
                InterfaceError::NoSuchInterface(name.to_owned())
            }
            _ => InterfaceError::Io {
                iface: name.to_owned(),
                source: err,
            },
        });
    }
    Ok(index)
}

/// The MTU (largest L3 packet, without the Ethernet header) of the interface called `name`.
pub fn mtu(name: &str) -> Result<u32, InterfaceError> {
    let c = sys::ifname(name).ok_or_else(|| InterfaceError::NoSuchInterface(name.to_owned()))?;
    let io_err = |source| InterfaceError::Io {
        iface: name.to_owned(),
        source,
    };
    let sock = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0).map_err(io_err)?;
    let mut req = sys::ifreq(&c);
    sys::ioctl_ifreq(sock.as_fd(), libc::SIOCGIFMTU, &mut req).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENODEV) {
            InterfaceError::NoSuchInterface(name.to_owned())
        } else {
            io_err(e)
        }
    })?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel filled the `ifru_mtu` member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(u32::try_from(mtu).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_exists_and_unknown_names_are_reported_by_name() {
        assert_eq!(ifindex("lo").unwrap(), 1);
        assert!(mtu("lo").unwrap() >= 1500);
        let err = ifindex("hwt-nope0").unwrap_err();
        assert!(matches!(err, InterfaceError::NoSuchInterface(ref n) if n == "hwt-nope0"));
        assert_eq!(
            err.to_string(),
            "no interface named hwt-nope0 in this network namespace"
        );
        assert!(matches!(
            mtu("hwt-nope0"),
            Err(InterfaceError::NoSuchInterface(_))
        ));
        assert!(matches!(
            ifindex(""),
            Err(InterfaceError::NoSuchInterface(_))
        ));
        assert!(matches!(
            ifindex("a-name-much-too-long"),
            Err(InterfaceError::NoSuchInterface(_))
        ));
    }
}
