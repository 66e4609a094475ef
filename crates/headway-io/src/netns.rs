//! Moving the calling thread into a named network namespace.
//!
//! `ip netns add NAME` leaves a handle at `/run/netns/NAME`; [`enter`] `setns(2)`s the calling
//! thread (only that thread) into it. Sockets created afterwards on this thread belong to that
//! namespace for their whole life, whichever thread later uses them. [`NetnsGuard`] enters a
//! namespace and returns to the previous one when dropped, for tests and the lab.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Why entering a network namespace failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetnsError {
    /// There is no `/run/netns/NAME`.
    #[error("no network namespace named {0} (looked for /run/netns/{0})")]
    NotFound(String),
    /// `setns` needs CAP_SYS_ADMIN.
    #[error("entering network namespace {0} needs root or CAP_SYS_ADMIN")]
    NotPermitted(String),
    /// Another system call failed.
    #[error("entering network namespace {name} failed: {source}")]
    Io {
        /// The namespace name (or path).
        name: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Moves the calling thread into the network namespace `/run/netns/NAME`.
pub fn enter(name: &str) -> Result<(), NetnsError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(NetnsError::NotFound(name.to_owned()));
    }
    let path = PathBuf::from("/run/netns").join(name);
    let file = File::open(&path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => NetnsError::NotFound(name.to_owned()),
        io::ErrorKind::PermissionDenied => NetnsError::NotPermitted(name.to_owned()),
        _ => NetnsError::Io {
            name: name.to_owned(),
            source: e,
        },
    })?;
    setns(&file, name)
}

fn setns(file: &File, name: &str) -> Result<(), NetnsError> {
    // SAFETY: setns(2) takes a descriptor we keep open for the call and a flag; it changes only
    // the calling thread's network namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::EPERM) => NetnsError::NotPermitted(name.to_owned()),
            Some(libc::EINVAL) => NetnsError::NotFound(name.to_owned()),
            _ => NetnsError::Io {
                name: name.to_owned(),
                source: err,
            },
        });
    }
    Ok(())
}

/// The calling thread inside a named network namespace until this guard is dropped; dropping
/// it returns the thread to the namespace it was in before.
///
/// Must be dropped on the thread that created it (it is not `Send`).
#[derive(Debug)]
pub struct NetnsGuard {
    original: File,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl NetnsGuard {
    /// Enters `/run/netns/NAME`, remembering the current namespace.
    pub fn enter(name: &str) -> Result<NetnsGuard, NetnsError> {
        let original = File::open("/proc/thread-self/ns/net").map_err(|e| NetnsError::Io {
            name: "the current namespace".to_owned(),
            source: e,
        })?;
        enter(name)?;
        Ok(NetnsGuard {
            original,
            _not_send: std::marker::PhantomData,
        })
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        // Going back can only fail if the original namespace handle became invalid, which an
        // open descriptor prevents; nothing useful can be done about it in a destructor.
        let _ = setns(&self.original, "the original namespace");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_namespace_is_reported_by_name() {
        let err = enter("hwt-no-such-ns").unwrap_err();
        assert!(matches!(err, NetnsError::NotFound(_)), "{err:?}");
        assert!(matches!(enter("../etc"), Err(NetnsError::NotFound(_))));
        assert!(matches!(
            NetnsGuard::enter("hwt-no-such-ns"),
            Err(NetnsError::NotFound(_))
        ));
    }
}
