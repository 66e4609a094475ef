//! Ctrl-C (SIGINT) and SIGTERM handling for long lab commands.
//!
//! This module owns one process-wide flag. [`install`] starts a small thread that sets it when
//! SIGINT or SIGTERM arrives; the lab checks it between steps and in every wait loop
//! ([`check`]), returns [`Interrupted`], and the [`crate::Lab`] guard then tears the topology
//! down. A second signal exits at once with status 130 (the next `lab up` or `lab down` cleans
//! what is left).
//!
//! Only the command line installs the handler; library users (tests, benchmarks) never get a
//! signal handler behind their back, but [`check`] is still cheap to call there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

/// The run was interrupted by SIGINT or SIGTERM.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;

/// Installs the SIGINT/SIGTERM handler (once per process; later calls do nothing).
///
/// The handler thread only sets a flag; the first signal is handled by the code that polls
/// [`check`]. A failure to install is reported as a warning on stderr and otherwise ignored:
/// the lab still works, it just cannot clean up after Ctrl-C (the next run does).
pub fn install() {
    INSTALL.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("lab-signals".into())
            .spawn(|| {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        eprintln!("warning: cannot watch for Ctrl-C: {e}");
                        return;
                    }
                };
                rt.block_on(async {
                    use tokio::signal::unix::{signal, SignalKind};
                    let (Ok(mut int), Ok(mut term)) = (
                        signal(SignalKind::interrupt()),
                        signal(SignalKind::terminate()),
                    ) else {
                        eprintln!("warning: cannot watch for Ctrl-C");
                        return;
                    };
                    loop {
                        tokio::select! {
                            _ = int.recv() => {}
                            _ = term.recv() => {}
                        }
                        if INTERRUPTED.swap(true, Ordering::SeqCst) {
                            eprintln!(
                                "second interrupt: exiting now; `headway lab down` cleans up"
                            );
                            std::process::exit(130);
                        }
                        eprintln!("interrupted: cleaning up (press Ctrl-C again to exit at once)");
                    }
                });
            });
        if let Err(e) = spawned {
            eprintln!("warning: cannot watch for Ctrl-C: {e}");
        }
    });
}

/// Whether SIGINT or SIGTERM has arrived since [`install`].
pub fn is_set() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// `Err(Interrupted)` once SIGINT or SIGTERM has arrived.
pub fn check() -> Result<(), Interrupted> {
    if is_set() {
        Err(Interrupted)
    } else {
        Ok(())
    }
}
