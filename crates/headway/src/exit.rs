//! Exit codes and how a failure is reported.
//!
//! A failure the user can fix (bad usage, bad config, unknown interface, not root, port in use)
//! exits with 64 (`EX_USAGE`) and one clear line on stderr; anything else exits with 1. Neither
//! prints a backtrace.

use std::process::ExitCode;

/// `EX_USAGE` from sysexits.h: bad usage, bad config or bad environment at start-up.
pub const USAGE: u8 = 64;

/// A failed command and how to report it.
#[derive(Debug)]
pub enum Failure {
    /// The user can fix this: exit 64.
    Usage(anyhow::Error),
    /// Anything else: exit 1.
    Runtime(anyhow::Error),
}

impl Failure {
    /// Classifies an error from a library: errors that name bad input the user can fix are
    /// usage errors.
    pub fn from_anyhow(e: anyhow::Error) -> Self {
        if is_user_fixable(&e) {
            Failure::Usage(e)
        } else {
            Failure::Runtime(e)
        }
    }

    /// Prints the error (the whole cause chain on one line) and gives the exit code.
    pub fn report(self) -> ExitCode {
        let (code, e) = match self {
            Failure::Usage(e) => (USAGE, e),
            Failure::Runtime(e) => (1, e),
        };
        let mut line = format!("headway: {e}");
        for cause in e.chain().skip(1) {
            let c = cause.to_string();
            if !line.contains(&c) {
                line.push_str(": ");
                line.push_str(&c);
            }
        }
        eprintln!("{line}");
        ExitCode::from(code)
    }
}

fn is_user_fixable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<headway_config::ConfigError>().is_some()
            || c.downcast_ref::<headway_config::SpecError>().is_some()
            || c.downcast_ref::<headway_origin::ListenError>().is_some()
            || c.downcast_ref::<NeedsRoot>().is_some()
            || c.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::AddrInUse
                        | std::io::ErrorKind::PermissionDenied
                        | std::io::ErrorKind::AddrNotAvailable
                )
            })
    })
}

/// A command that needs root was started without it.
#[derive(Debug, thiserror::Error)]
#[error("`headway {0}` needs root (CAP_NET_ADMIN and CAP_NET_RAW): run it with sudo")]
pub struct NeedsRoot(pub &'static str);
