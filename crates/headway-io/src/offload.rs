//! Switching off NIC offloads so an interface carries real, complete, ≤ MTU frames.
//!
//! A user-space bridge reads frames with AF_PACKET and writes their bytes out again, so it needs
//! every frame to be what a wire would carry:
//!
//! - **TSO/GSO** off on the *sending* host's interface, or its TCP stack hands 64 KiB
//!   "super-frames" to the veth, which arrive at the bridge as one oversize frame;
//! - **GRO/LRO** off on the bridge's own interfaces, so the kernel does not glue arriving frames
//!   together before the packet socket sees them;
//! - **tx checksum offload** off on the sending host's veth: with it on, the checksum of a TCP or
//!   UDP packet crossing a veth is left unfinished (`CHECKSUM_PARTIAL`), and bytes copied by a
//!   packet socket and re-sent would carry a wrong checksum the receiver drops.
//!
//! [`disable`] does all of these on one interface, through the legacy `SIOCETHTOOL` commands
//! (`ETHTOOL_S{GRO,TSO,GSO,TXCSUM,FLAGS}`), so no `ethtool` binary is needed. Commands an
//! interface does not support (`EOPNOTSUPP`) are skipped; [`Offloads`] read back afterwards
//! says what is really in force.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::sys;

// uapi/linux/ethtool.h
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;
const ETH_FLAG_LRO: u32 = 1 << 15;

/// `struct ethtool_value` from uapi/linux/ethtool.h.
#[repr(C)]
#[derive(Clone, Copy)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// Why offloads could not be read or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OffloadError {
    /// No interface of that name exists in the calling thread's network namespace.
    #[error("no interface named {0} in this network namespace")]
    NoSuchInterface(String),
    /// Changing offloads needs privileges we do not have.
    #[error("changing offloads on {0} needs root or CAP_NET_ADMIN")]
    NotPermitted(String),
    /// Another error from the ethtool ioctl.
    #[error("ethtool {op} on {iface} failed: {source}")]
    Io {
        /// The interface name.
        iface: String,
        /// The ethtool command (`"STSO"`, `"GGRO"`, ...).
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Which offloads are on for an interface (`None`: the interface does not report it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offloads {
    /// TCP segmentation offload.
    pub tso: Option<bool>,
    /// Generic segmentation offload.
    pub gso: Option<bool>,
    /// Generic receive offload.
    pub gro: Option<bool>,
    /// Large receive offload.
    pub lro: Option<bool>,
    /// Transmit checksum offload.
    pub tx_checksum: Option<bool>,
}

impl Offloads {
    /// Whether every offload this module manages is off (or not reported).
    pub fn all_off(&self) -> bool {
        [self.tso, self.gso, self.gro, self.lro, self.tx_checksum]
            .iter()
            .all(|v| *v != Some(true))
    }
}

/// Switches off GRO, LRO, GSO, TSO and transmit checksum offload on `iface`, and returns the
/// state read back afterwards.
pub fn disable(iface: &str) -> Result<Offloads, OffloadError> {
    let (sock, name) = open(iface)?;
    let fd = sock.as_fd();
    for (cmd, op) in [
        (ETHTOOL_SGRO, "SGRO"),
        (ETHTOOL_SGSO, "SGSO"),
        (ETHTOOL_STSO, "STSO"),
        (ETHTOOL_STXCSUM, "STXCSUM"),
    ] {
        match ethtool(fd, &name, cmd, 0) {
            Ok(_) => {}
            Err(e) if unsupported(&e) => {}
            Err(e) => return Err(map_err(iface, op, e)),
        }
    }
    match ethtool(fd, &name, ETHTOOL_GFLAGS, 0) {
        Ok(flags) if flags & ETH_FLAG_LRO != 0 => {
            match ethtool(fd, &name, ETHTOOL_SFLAGS, flags & !ETH_FLAG_LRO) {
                Ok(_) => {}
                Err(e) if unsupported(&e) => {}
                Err(e) => return Err(map_err(iface, "SFLAGS", e)),
            }
        }
        Ok(_) => {}
        Err(e) if unsupported(&e) => {}
        Err(e) => return Err(map_err(iface, "GFLAGS", e)),
    }
    read(fd, iface, &name)
}

/// The offloads in force on `iface`.
pub fn state(iface: &str) -> Result<Offloads, OffloadError> {
    let (sock, name) = open(iface)?;
    read(sock.as_fd(), iface, &name)
}

fn open(iface: &str) -> Result<(std::os::fd::OwnedFd, std::ffi::CString), OffloadError> {
    let name = sys::ifname(iface).ok_or_else(|| OffloadError::NoSuchInterface(iface.to_owned()))?;
    let sock =
        sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0).map_err(|e| map_err(iface, "socket", e))?;
    Ok((sock, name))
}

fn read(
    fd: BorrowedFd<'_>,
    iface: &str,
    name: &std::ffi::CString,
) -> Result<Offloads, OffloadError> {
    let get = |cmd, op| match ethtool(fd, name, cmd, 0) {
        Ok(v) => Ok(Some(v)),
        Err(e) if unsupported(&e) => Ok(None),
        Err(e) => Err(map_err(iface, op, e)),
    };
    Ok(Offloads {
        tso: get(ETHTOOL_GTSO, "GTSO")?.map(|v| v != 0),
        gso: get(ETHTOOL_GGSO, "GGSO")?.map(|v| v != 0),
        gro: get(ETHTOOL_GGRO, "GGRO")?.map(|v| v != 0),
        lro: get(ETHTOOL_GFLAGS, "GFLAGS")?.map(|v| v & ETH_FLAG_LRO != 0),
        tx_checksum: get(ETHTOOL_GTXCSUM, "GTXCSUM")?.map(|v| v != 0),
    })
}

/// One legacy ethtool command carrying an `ethtool_value`; returns the value's `data` after.
fn ethtool(fd: BorrowedFd<'_>, name: &std::ffi::CString, cmd: u32, data: u32) -> io::Result<u32> {
    let mut value = EthtoolValue { cmd, data };
    let mut req = sys::ifreq(name);
    req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
    sys::ioctl_ifreq(fd, libc::SIOCETHTOOL, &mut req)?;
    Ok(value.data)
}

fn unsupported(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EOPNOTSUPP)
}

fn map_err(iface: &str, op: &'static str, e: io::Error) -> OffloadError {
    match e.raw_os_error() {
        Some(libc::ENODEV) => OffloadError::NoSuchInterface(iface.to_owned()),
        Some(libc::EPERM) | Some(libc::EACCES) => OffloadError::NotPermitted(iface.to_owned()),
        _ => OffloadError::Io {
            iface: iface.to_owned(),
            op,
            source: e,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_interface_is_reported_by_name() {
        let err = state("hwt-nope0").unwrap_err();
        assert!(matches!(err, OffloadError::NoSuchInterface(_)), "{err:?}");
        assert!(matches!(
            disable("hwt-nope0"),
            Err(OffloadError::NoSuchInterface(_))
        ));
    }

    #[test]
    fn loopback_state_can_be_read() {
        // lo reports at least its segmentation offloads.
        let st = state("lo").unwrap();
        assert!(st.gso.is_some(), "{st:?}");
        assert!(!Offloads {
            tso: Some(true),
            ..Offloads::default()
        }
        .all_off());
        assert!(Offloads::default().all_off());
    }
}
