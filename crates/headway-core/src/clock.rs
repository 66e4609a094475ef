//! The sanctioned clock.
//!
//! Sans-IO cores never read the clock: they take `now` as an argument. Shells obtain `now` from a
//! [`Clock`]; production code uses [`SystemClock`], tests and simulations use [`ManualClock`].
//! This module is the only place where `Instant::now` and `SystemTime::now` are called
//! (enforced by `clippy.toml`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// A source of monotonic time.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The operating system's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    /// The current instant of the OS monotonic clock (`CLOCK_MONOTONIC`).
    #[inline]
    #[allow(clippy::disallowed_methods)] // the one sanctioned call
    pub fn now() -> Instant {
        Instant::now()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Instant {
        SystemClock::now()
    }
}

/// The current wall-clock time, for logs and reports only (never for intervals).
#[allow(clippy::disallowed_methods)] // the one sanctioned call
pub fn wall_clock() -> SystemTime {
    SystemTime::now()
}

/// A clock that only moves when told to; cloning shares the same time.
///
/// Its epoch is one fixed `Instant` taken at construction; [`ManualClock::advance`] moves all
/// clones forward together.
#[derive(Debug, Clone)]
pub struct ManualClock {
    epoch: Instant,
    offset_ns: Arc<AtomicU64>,
}

impl ManualClock {
    /// A manual clock starting at an arbitrary fixed instant.
    pub fn new() -> Self {
        Self {
            epoch: SystemClock::now(),
            offset_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The instant the clock started at.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Time elapsed since the epoch.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.offset_ns.load(Ordering::SeqCst))
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.offset_ns.fetch_add(ns, Ordering::SeqCst);
    }

    /// Moves the clock to `t`; does nothing if `t` is in the clock's past.
    pub fn advance_to(&self, t: Instant) {
        let target =
            u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX);
        self.offset_ns.fetch_max(target, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.epoch + self.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_forward_and_clones_share_time() {
        let c = ManualClock::new();
        let c2 = c.clone();
        let t0 = c.now();
        c.advance(Duration::from_millis(5));
        assert_eq!(c2.now() - t0, Duration::from_millis(5));
        c2.advance_to(t0 + Duration::from_millis(2));
        assert_eq!(
            c.now() - t0,
            Duration::from_millis(5),
            "advance_to the past is a no-op"
        );
        c2.advance_to(t0 + Duration::from_millis(9));
        assert_eq!(c.now() - t0, Duration::from_millis(9));
    }
}
