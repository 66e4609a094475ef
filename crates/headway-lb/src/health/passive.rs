//! Passive health: requests that fail in a row take a server out of rotation for a while,
//! without waiting for a monitor (NGINX's `max_fails` / `fail_timeout`, HAProxy's `observe`).
//!
//! [`PassiveState::record`] takes each request's outcome (a failure is the server's: it refused
//! or dropped the connection, sent nothing or garbage, or did not answer in time); after
//! `max_fails` failures in a row the server is out for `fail_timeout`. When that time is up it
//! is tried again on probation: its next request's failure takes it out at once, a success
//! puts it back for good. Pure: the caller passes the time.

use std::time::{Duration, Instant};

/// The settings of passive health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passive {
    /// Failed requests in a row that take a server out; 0 = passive health off.
    pub max_fails: u32,
    /// How long a server stays out.
    pub fail_timeout: Duration,
}

/// A change reported by [`PassiveState::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassiveEvent {
    /// The server is taken out until the given time.
    Out(Instant),
    /// A request on probation succeeded: the server is back.
    Back,
}

/// One server's passive health.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassiveState {
    /// Failures in a row since the last success.
    fails: u32,
    /// Out of rotation until then.
    out_until: Option<Instant>,
    /// Back after being out, and not yet confirmed by a success.
    probation: bool,
}

impl PassiveState {
    /// Records a request's outcome at `now`; the change, if any.
    pub fn record(&mut self, ok: bool, now: Instant, p: &Passive) -> Option<PassiveEvent> {
        if p.max_fails == 0 {
            *self = PassiveState::default();
            return None;
        }
        if ok {
            // A success while out (a request sent before it was taken out) counts too: the
            // server answers.
            let was_out = self.probation || self.out_until.is_some();
            *self = PassiveState::default();
            return was_out.then_some(PassiveEvent::Back);
        }
        if self.out_until.is_some_and(|until| now < until) {
            // Requests that were in flight when it was taken out.
            return None;
        }
        self.fails += 1;
        if self.probation || self.fails >= p.max_fails {
            let until = now + p.fail_timeout;
            *self = PassiveState {
                fails: 0,
                out_until: Some(until),
                probation: false,
            };
            return Some(PassiveEvent::Out(until));
        }
        None
    }

    /// Whether the server is out of rotation at `now`. Once its time is up it is back on
    /// probation.
    pub fn is_out(&mut self, now: Instant) -> bool {
        match self.out_until {
            Some(until) if now < until => true,
            Some(_) => {
                self.out_until = None;
                self.probation = true;
                false
            }
            None => false,
        }
    }

    /// Whether the state is the one of a server with no recent failure (nothing to record
    /// for a success).
    pub fn is_clear(&self) -> bool {
        *self == PassiveState::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: Passive = Passive {
        max_fails: 3,
        fail_timeout: Duration::from_secs(10),
    };

    #[test]
    fn failures_in_a_row_take_a_server_out_and_probation_decides_its_return() {
        let t0 = headway_core::SystemClock::now();
        let mut s = PassiveState::default();
        assert_eq!(s.record(false, t0, &P), None);
        assert_eq!(s.record(false, t0, &P), None);
        // A success in between starts the count again.
        assert_eq!(s.record(true, t0, &P), None);
        assert!(s.is_clear());
        assert_eq!(s.record(false, t0, &P), None);
        assert_eq!(s.record(false, t0, &P), None);
        let until = t0 + P.fail_timeout;
        assert_eq!(s.record(false, t0, &P), Some(PassiveEvent::Out(until)));
        assert!(s.is_out(t0));
        assert!(s.is_out(until - Duration::from_millis(1)));
        // Failures of requests already in flight change nothing.
        assert_eq!(s.record(false, t0 + Duration::from_secs(1), &P), None);
        assert!(s.is_out(until - Duration::from_millis(1)));
        // Time is up: tried again; one failure on probation takes it out again.
        assert!(!s.is_out(until));
        let again = until + Duration::from_secs(1);
        assert_eq!(
            s.record(false, again, &P),
            Some(PassiveEvent::Out(again + P.fail_timeout))
        );
        // Out, time up, a success on probation: back for good.
        assert!(!s.is_out(again + P.fail_timeout));
        assert_eq!(
            s.record(true, again + P.fail_timeout, &P),
            Some(PassiveEvent::Back)
        );
        assert!(s.is_clear());
        assert_eq!(s.record(false, again + P.fail_timeout, &P), None);
    }

    #[test]
    fn zero_max_fails_is_off() {
        let off = Passive { max_fails: 0, ..P };
        let t0 = headway_core::SystemClock::now();
        let mut s = PassiveState::default();
        for _ in 0..100 {
            assert_eq!(s.record(false, t0, &off), None);
        }
        assert!(!s.is_out(t0));
    }

    proptest! {
        /// Whatever the outcomes and times: a server is out only after `max_fails` failures
        /// in a row (or one on probation), never longer than `fail_timeout` from its last
        /// `Out`, and a success always leaves it clear.
        #[test]
        fn out_only_after_failures_and_never_longer_than_the_timeout(
            steps in proptest::collection::vec((any::<bool>(), 0u64..4_000), 1..200),
            max_fails in 1u32..5,
        ) {
            let p = Passive { max_fails, fail_timeout: Duration::from_secs(2) };
            let t0 = headway_core::SystemClock::now();
            let mut now = t0;
            let mut s = PassiveState::default();
            let mut in_a_row = 0u32;
            let mut last_out: Option<Instant> = None;
            for (ok, ms) in steps {
                now += Duration::from_millis(ms);
                let out = s.is_out(now);
                if let Some(at) = last_out {
                    if out {
                        prop_assert!(now < at + p.fail_timeout);
                    }
                } else {
                    prop_assert!(!out);
                }
                match s.record(ok, now, &p) {
                    Some(PassiveEvent::Out(until)) => {
                        prop_assert!(!ok);
                        prop_assert!(in_a_row + 1 >= p.max_fails || last_out.is_some());
                        prop_assert_eq!(until, now + p.fail_timeout);
                        last_out = Some(now);
                        in_a_row = 0;
                    }
                    Some(PassiveEvent::Back) => prop_assert!(ok),
                    None => {}
                }
                if ok {
                    prop_assert!(s.is_clear());
                    in_a_row = 0;
                } else if !out {
                    in_a_row += 1;
                }
            }
        }
    }
}
