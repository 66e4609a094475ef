//! quinn's tokio runtime with timers that may fire up to [`EARLY`] before their deadline, so
//! quinn's pacer is not slowed down by tokio's millisecond timer.
//!
//! # Why
//!
//! quinn paces a connection with a token bucket holding about 2 ms of sending (at least ten
//! datagrams) and refilled at 1.25 × window / RTT; when the bucket is empty it sets a timer for
//! the moment it is *full* again, about 1.6 ms later, and tokens beyond a full bucket are lost.
//! tokio rounds every sleep up to its next millisecond tick, so that timer fires after 2–3 ms:
//! in the first round trip of a transfer, when no acknowledgement wakes the connection in
//! between, a data-centre appliance sent ten datagrams every 2.1 or 3.2 ms — 36 Mbit/s on a
//! 44 Mbit/s link (lab capture, 44 Mbit/s, 90 ms, first pass of a 1.2 MB file), a round trip
//! at three quarters of the rate for every transfer.
//!
//! # How
//!
//! [`EarlyTimer`] arms tokio's sleep [`EARLY`] before the deadline it is given. quinn checks
//! its own deadlines against the clock, so a wake-up before a deadline does nothing wrong: a
//! pacer that is woken early finds its bucket most of the way full (it aims at a full bucket
//! at least 1.6 ms after the last send) and sends; any other timer woken early expires
//! nothing, and quinn asks again for the same deadline, which the timer then keeps exactly
//! (it remembers the deadline it fired early for), so a deadline costs at most one extra
//! wake-up and never a busy loop.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use quinn::{AsyncTimer, AsyncUdpSocket, Runtime, TokioRuntime};

/// How much earlier than its deadline a timer may fire.
pub(crate) const EARLY: Duration = Duration::from_millis(1);

/// [`TokioRuntime`] with [`EarlyTimer`]s.
#[derive(Debug)]
pub(crate) struct EarlyTimers;

impl Runtime for EarlyTimers {
    fn new_timer(&self, deadline: Instant) -> Pin<Box<dyn AsyncTimer>> {
        Box::pin(EarlyTimer::new(deadline))
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        TokioRuntime.spawn(future);
    }

    fn wrap_udp_socket(&self, sock: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        TokioRuntime.wrap_udp_socket(sock)
    }

    fn now(&self) -> Instant {
        TokioRuntime.now()
    }
}

/// A timer that fires up to [`EARLY`] before its deadline the first time it is armed for
/// that deadline, and at the deadline when armed for it again (module doc).
pub(crate) struct EarlyTimer {
    sleep: Pin<Box<tokio::time::Sleep>>,
    deadline: Instant,
    /// The deadline this timer last fired early for.
    fired_early_for: Option<Instant>,
    /// Whether the armed sleep ends before `deadline`.
    armed_early: bool,
}

impl EarlyTimer {
    fn new(deadline: Instant) -> Self {
        let (at, early) = wake_at(deadline, None);
        Self {
            sleep: Box::pin(tokio::time::sleep_until(at.into())),
            deadline,
            fired_early_for: None,
            armed_early: early,
        }
    }
}

/// When to wake for `deadline`, and whether that is early: [`EARLY`] before it, unless the
/// timer already fired early for this very deadline.
fn wake_at(deadline: Instant, fired_early_for: Option<Instant>) -> (Instant, bool) {
    if fired_early_for == Some(deadline) {
        return (deadline, false);
    }
    match deadline.checked_sub(EARLY) {
        Some(at) => (at, true),
        None => (deadline, false),
    }
}

impl fmt::Debug for EarlyTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EarlyTimer")
            .field("deadline", &self.deadline)
            .field("armed_early", &self.armed_early)
            .finish_non_exhaustive()
    }
}

impl AsyncTimer for EarlyTimer {
    fn reset(mut self: Pin<&mut Self>, deadline: Instant) {
        let (at, early) = wake_at(deadline, self.fired_early_for);
        self.deadline = deadline;
        self.armed_early = early;
        self.sleep.as_mut().reset(at.into());
    }

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Future::poll(self.sleep.as_mut(), cx).is_pending() {
            return Poll::Pending;
        }
        if self.armed_early {
            self.fired_early_for = Some(self.deadline);
        }
        Poll::Ready(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tokio's clock, which quinn's runtime reads too.
    fn now() -> Instant {
        tokio::time::Instant::now().into_std()
    }

    #[test]
    fn a_deadline_is_woken_early_once_then_exactly() {
        let d = now() + Duration::from_secs(5);
        assert_eq!(wake_at(d, None), (d - EARLY, true));
        assert_eq!(wake_at(d, Some(d)), (d, false));
        // A new deadline is early again.
        let d2 = d + Duration::from_millis(2);
        assert_eq!(wake_at(d2, Some(d)), (d2 - EARLY, true));
    }

    #[tokio::test]
    async fn the_timer_wakes_no_earlier_than_allowed_and_then_holds_the_deadline() {
        let deadline = now() + Duration::from_millis(20);
        let mut timer = Box::pin(EarlyTimer::new(deadline));
        std::future::poll_fn(|cx| timer.as_mut().poll(cx)).await;
        assert!(now() >= deadline - EARLY);
        // Armed again for the same deadline (quinn found nothing expired): it waits for the
        // deadline itself now, so quinn never spins on an early timer.
        timer.as_mut().reset(deadline);
        std::future::poll_fn(|cx| timer.as_mut().poll(cx)).await;
        assert!(now() >= deadline);
        // A later deadline may be woken early again.
        let later = deadline + Duration::from_millis(10);
        timer.as_mut().reset(later);
        assert!(timer.armed_early);
        std::future::poll_fn(|cx| timer.as_mut().poll(cx)).await;
        assert!(now() >= later - EARLY);
    }
}
