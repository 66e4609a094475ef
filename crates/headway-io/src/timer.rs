//! Precise waiting on the monotonic clock.
//!
//! `std::thread::sleep` and tokio timers wake up tens of microseconds to a millisecond late.
//! A [`Sleeper`] does better in three steps:
//!
//! 1. it sets the calling thread's timer slack to 1 ns (`prctl(PR_SET_TIMERSLACK)`), once per
//!    thread, so the kernel does not batch its wake-up with others;
//! 2. it sleeps in the kernel — `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)` for
//!    [`Sleeper::sleep_until`], `ppoll` for [`Sleeper::wait_readable`] — until `margin` before
//!    the deadline;
//! 3. it spins on the clock for the rest.
//!
//! The margin adapts to the wake-up latency this machine shows: each kernel wake-up's lateness
//! feeds a fixed-step estimate of its 95th percentile (up 1.9 µs when a wake-up is later than
//! the estimate, down 0.1 µs otherwise), and the margin is that estimate plus [`SPIN_PAD`], kept
//! within [`MIN_MARGIN`]..=[`MAX_MARGIN`]. A quantile rather than a maximum, because on a busy
//! machine the worst wake-ups are preemptions that no spin margin can hide — spinning longer
//! only makes the thread a CPU hog the scheduler preempts more often. A fixed margin can be chosen with
//! [`Sleeper::with_fixed_margin`].
//!
//! `std::time::Instant` is `CLOCK_MONOTONIC` on Linux; deadlines are converted by reading both
//! clocks back to back.
//!
//! A `Sleeper` is meant for one thread (it is `Send`, so it can be created and then moved).

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use headway_core::SystemClock;

use crate::sys;

/// The smallest adaptive spin margin.
pub const MIN_MARGIN: Duration = Duration::from_micros(5);
/// The largest adaptive spin margin.
pub const MAX_MARGIN: Duration = Duration::from_micros(500);
/// Added to the lateness estimate to make the margin.
pub const SPIN_PAD: Duration = Duration::from_micros(10);
/// The margin a new adaptive sleeper starts with.
pub const INITIAL_MARGIN: Duration = Duration::from_micros(60);

thread_local! {
    static SLACK_SET: Cell<bool> = const { Cell::new(false) };
    static DEFAULT_SLEEPER: Cell<Option<Sleeper>> = const { Cell::new(None) };
}

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The descriptor became readable (or reported an error or hang-up, which a read will show).
    Readable,
    /// The deadline passed.
    Deadline,
}

/// A precise waiter with an adaptive spin margin. See the module docs.
#[derive(Debug, Clone, Copy)]
pub struct Sleeper {
    /// Current lateness estimate, ns.
    estimate_ns: u64,
    /// `Some` for a fixed margin.
    fixed: Option<Duration>,
}

impl Default for Sleeper {
    fn default() -> Self {
        Self::new()
    }
}

impl Sleeper {
    /// An adaptive sleeper starting at [`INITIAL_MARGIN`].
    pub fn new() -> Self {
        Sleeper {
            estimate_ns: (INITIAL_MARGIN - SPIN_PAD).as_nanos() as u64,
            fixed: None,
        }
    }

    /// A sleeper that always spins for exactly `margin` (zero: never spin).
    pub fn with_fixed_margin(margin: Duration) -> Self {
        Sleeper {
            estimate_ns: 0,
            fixed: Some(margin),
        }
    }

    /// How long before a deadline the kernel sleep ends and spinning begins.
    pub fn margin(&self) -> Duration {
        match self.fixed {
            Some(m) => m,
            None => {
                (Duration::from_nanos(self.estimate_ns) + SPIN_PAD).clamp(MIN_MARGIN, MAX_MARGIN)
            }
        }
    }

    /// Returns at `deadline` or very shortly after; at once if it has passed.
    pub fn sleep_until(&mut self, deadline: Instant) {
        ensure_timer_slack();
        let now = SystemClock::now();
        if deadline <= now {
            return;
        }
        let margin = self.margin();
        if deadline - now > margin {
            let target = deadline - margin;
            clock_sleep_until(target);
            self.observe(target, SystemClock::now());
        }
        while SystemClock::now() < deadline {
            std::hint::spin_loop();
        }
    }

    /// Waits until `fd` is readable or `deadline` has passed, whichever comes first, and says
    /// which. Returns `Readable` at once if data is already waiting. Precise: the end of the
    /// wait is spun, checking `fd` without blocking on every turn.
    pub fn wait_readable(&mut self, fd: BorrowedFd<'_>, deadline: Instant) -> io::Result<Wake> {
        ensure_timer_slack();
        let now = SystemClock::now();
        let margin = self.margin();
        if deadline > now && deadline - now > margin {
            // ppoll's timer slack is max(timeout / 1000 (1/500 for niced threads), timer slack);
            // aim early by that much so the latest possible wake-up still lands on the margin.
            let remaining = deadline - now - margin;
            let slack = remaining / 500;
            let target = deadline - margin - slack;
            if poll_once(fd, Some(target - now))? {
                return Ok(Wake::Readable);
            }
            self.observe(target + slack, SystemClock::now());
        }
        loop {
            if poll_once(fd, Some(Duration::ZERO))? {
                return Ok(Wake::Readable);
            }
            if SystemClock::now() >= deadline {
                return Ok(Wake::Deadline);
            }
            std::hint::spin_loop();
        }
    }

    /// Waits until `fd` is readable or `deadline` has passed, without the final spin: cheaper,
    /// and late by the kernel's wake-up latency. For waits whose end needs no precision (idle
    /// timeouts).
    pub fn poll_readable(&mut self, fd: BorrowedFd<'_>, deadline: Instant) -> io::Result<Wake> {
        ensure_timer_slack();
        let now = SystemClock::now();
        let timeout = deadline.saturating_duration_since(now);
        if poll_once(fd, Some(timeout))? {
            Ok(Wake::Readable)
        } else {
            Ok(Wake::Deadline)
        }
    }

    /// Feeds one kernel wake-up that was aimed at `target` and happened at `woke`.
    fn observe(&mut self, target: Instant, woke: Instant) {
        if self.fixed.is_some() {
            return;
        }
        let late = woke.saturating_duration_since(target).as_nanos() as u64;
        // A fixed-step quantile estimator: it settles where P(late > est) * UP equals
        // P(late <= est) * DOWN, i.e. at the UP / (UP + DOWN) = 95th percentile, and one
        // outlier (a preemption on a busy machine) moves it by only UP.
        const UP_NS: u64 = 1_900;
        const DOWN_NS: u64 = 100;
        self.estimate_ns = if late > self.estimate_ns {
            (self.estimate_ns + UP_NS).min(MAX_MARGIN.as_nanos() as u64)
        } else {
            self.estimate_ns.saturating_sub(DOWN_NS)
        };
    }
}

/// Returns at `deadline` or very shortly after, using a per-thread adaptive [`Sleeper`].
pub fn sleep_until(deadline: Instant) {
    DEFAULT_SLEEPER.with(|cell| {
        let mut s = cell.take().unwrap_or_default();
        s.sleep_until(deadline);
        cell.set(Some(s));
    });
}

/// Sets the calling thread's timer slack (how late the kernel may fire its timers to batch
/// wake-ups), in nanoseconds. Linux's default is 50 µs.
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    let ns = libc::c_ulong::try_from(ns.max(1)).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and affects only the calling thread.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0, 0, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets 1 ns timer slack once per thread; a failure only costs precision, so it is ignored.
fn ensure_timer_slack() {
    SLACK_SET.with(|set| {
        if !set.get() {
            let _ = set_timer_slack(1);
            set.set(true);
        }
    });
}

/// The current `CLOCK_MONOTONIC` reading.
fn monotonic_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writes; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Sleeps in the kernel until `deadline` on `CLOCK_MONOTONIC`, with no spin. Late by the
/// kernel's wake-up latency (and the thread's timer slack).
pub fn clock_sleep_until(deadline: Instant) {
    let remaining = deadline.saturating_duration_since(SystemClock::now());
    if remaining.is_zero() {
        return;
    }
    let abs = sys::timespec(monotonic_now() + remaining);
    loop {
        // SAFETY: `abs` is a valid timespec; the remaining-time pointer may be null with
        // TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &abs,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

/// One `ppoll` for readability with a nanosecond timeout (`None`: forever). Returns whether
/// the descriptor is readable.
fn poll_once(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = timeout.map(sys::timespec);
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    loop {
        // SAFETY: `pfd` is one valid pollfd, `ts_ptr` is null or points to a live timespec,
        // and the signal mask pointer is null (keep the current mask).
        let rc = unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, std::ptr::null()) };
        if rc > 0 {
            return Ok(pfd.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0);
        }
        if rc == 0 {
            return Ok(false);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn sleep_until_never_returns_early() {
        let mut s = Sleeper::new();
        for us in [0u64, 1, 30, 200, 1500] {
            let deadline = SystemClock::now() + Duration::from_micros(us);
            s.sleep_until(deadline);
            assert!(SystemClock::now() >= deadline);
        }
        let past = SystemClock::now();
        sleep_until(past);
        sleep_until(SystemClock::now() + Duration::from_micros(100));
        assert!(SystemClock::now() >= past + Duration::from_micros(100));
    }

    #[test]
    fn margin_adapts_within_bounds_and_fixed_margin_stays() {
        let mut s = Sleeper::new();
        let t = SystemClock::now();
        for _ in 0..1000 {
            s.observe(t, t + Duration::from_millis(50));
        }
        assert_eq!(s.margin(), MAX_MARGIN);
        for _ in 0..20_000 {
            s.observe(t, t);
        }
        assert_eq!(s.margin(), SPIN_PAD.max(MIN_MARGIN));
        let mut f = Sleeper::with_fixed_margin(Duration::from_micros(42));
        f.observe(t, t + Duration::from_millis(5));
        assert_eq!(f.margin(), Duration::from_micros(42));
    }

    #[test]
    fn wait_readable_reports_data_or_deadline() {
        use std::io::Write;
        let (r, mut w) = UnixStream::pair().unwrap();
        let mut s = Sleeper::new();
        let deadline = SystemClock::now() + Duration::from_millis(3);
        assert_eq!(
            s.wait_readable(r.as_fd(), deadline).unwrap(),
            Wake::Deadline
        );
        assert!(SystemClock::now() >= deadline);
        let deadline = SystemClock::now() + Duration::from_millis(2);
        assert_eq!(
            s.poll_readable(r.as_fd(), deadline).unwrap(),
            Wake::Deadline
        );

        w.write_all(b"x").unwrap();
        let far = SystemClock::now() + Duration::from_secs(30);
        assert_eq!(s.wait_readable(r.as_fd(), far).unwrap(), Wake::Readable);
        assert_eq!(s.poll_readable(r.as_fd(), far).unwrap(), Wake::Readable);
    }
}
