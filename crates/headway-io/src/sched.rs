//! Scheduling hints for latency-critical threads.
//!
//! On a small shared machine a thread that must act at a precise instant loses most of its
//! precision not to timer latency but to waiting in the run queue behind other runnable tasks.
//! Linux's EEVDF scheduler (6.12 and later) lets a `SCHED_OTHER` thread ask for a shorter time
//! slice: its virtual deadline comes sooner, so it preempts others promptly when it wakes, while
//! its share of the CPU stays what its nice value says. [`set_slice`] asks for that; it needs no
//! privileges and is not a real-time policy.
//!
//! Where that is not enough (a busy 2-core machine), [`set_realtime`] moves the calling thread to
//! `SCHED_FIFO`: it then runs as soon as it is runnable, ahead of every normal task, which is
//! what an in-kernel emulator such as dummynet gets for free. The kernel's real-time throttling
//! (`sched_rt_runtime_us`, 95 % by default) still leaves the rest of the machine some CPU, and a
//! thread that sleeps between frames (as the emulator's pumps do) uses little of it.

use std::io;
use std::time::Duration;

const SCHED_OTHER: u32 = 0;

/// Asks the scheduler for a time slice of `slice` (the kernel clamps it to 0.1–100 ms) for the
/// calling thread, keeping its nice value. Fails with `InvalidInput` on kernels older than 6.12.
pub fn set_slice(slice: Duration) -> io::Result<()> {
    // getpriority(PRIO_PROCESS, 0) reads the calling thread's nice value on Linux; -1 is
    // ambiguous with an error, but then nice 0 is a safe assumption for the hint.
    // SAFETY: getpriority takes two integers and returns one.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let attr = libc::sched_attr {
        size: std::mem::size_of::<libc::sched_attr>() as u32,
        sched_policy: SCHED_OTHER,
        sched_flags: 0,
        sched_nice: nice,
        sched_priority: 0,
        sched_runtime: u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX),
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: `attr` is a valid, initialised sched_attr whose `size` field says how much the
    // kernel may read; pid 0 means the calling thread; flags are 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0,
            &attr as *const libc::sched_attr,
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Moves the calling thread to the `SCHED_FIFO` real-time policy at `priority` (1–99). Needs
/// root or CAP_SYS_NICE.
pub fn set_realtime(priority: u8) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: i32::from(priority.clamp(1, 99)),
    };
    // SAFETY: `param` is a valid, initialised sched_param that outlives the call; pid 0 means the
    // calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_slice_is_accepted_or_reported_unsupported() {
        std::thread::spawn(|| match set_slice(Duration::from_micros(100)) {
            Ok(()) => {}
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}"),
        })
        .join()
        .unwrap();
    }
}
