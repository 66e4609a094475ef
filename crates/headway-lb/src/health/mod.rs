//! Health: whether a server should get traffic.
//!
//! Owns the pure parts of health monitoring: the rise/fall state machine that turns a stream of
//! check results into up/down ([`HealthState`]), the combination of an operator's
//! [`AdminState`] with [`Health`] into an [`Eligibility`], and the classifier of HTTP monitor
//! responses ([`HttpExpect`], [`StatusSet`]). It does not run checks: the background monitor in
//! the proxy opens the connections, applies timeouts (a timeout is a failed check), feeds each
//! result to [`HealthState::record`] and publishes a snapshot when a [`Transition`] comes out.
//!
//! Call order per server: [`HealthState::new`] once; per check, classify the result (for HTTP,
//! [`HttpExpect::check`]) and [`HealthState::record`] it. Per request, the selector's candidates
//! are the servers whose [`Eligibility::of`] takes new clients; a persisted server is used while
//! its eligibility [takes persistent clients](Eligibility::takes_persistent).
//!
//! Passive health ([`PassiveState`]) works beside the monitors, from the outcomes of real
//! requests: failures in a row take a server out for a while.

mod expect;
mod passive;

pub use expect::{CheckFailure, HttpExpect, StatusSet, StatusSetError};
pub use passive::{Passive, PassiveEvent, PassiveState};

/// What the operator asked of a server (through the config or the admin API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AdminState {
    /// In service.
    #[default]
    Enabled,
    /// Out of service: no traffic at all (existing connections are the proxy's business).
    Disabled,
    /// Being taken out gracefully: no new clients, but clients persisted to it stay until their
    /// persistence ends.
    Draining,
}

/// What the monitors last concluded about a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Health {
    /// Passing its checks.
    Up,
    /// Failing its checks.
    Down,
}

/// A change of [`Health`] reported by [`HealthState::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    /// Down → up, after `rise` consecutive successes.
    Rise,
    /// Up → down, after `fall` consecutive failures.
    Fall,
}

impl Transition {
    /// The health after the transition.
    pub fn to(self) -> Health {
        match self {
            Transition::Rise => Health::Up,
            Transition::Fall => Health::Down,
        }
    }
}

/// Rise/fall hysteresis over check results, as HAProxy's `rise`/`fall` and NetScaler's
/// "retries": one bad check does not take a server out, one good check does not put it back.
///
/// A server that is up goes down after `fall` consecutive failures; one that is down comes up
/// after `rise` consecutive successes. A result that agrees with the current health resets the
/// count. A `rise` or `fall` of 0 counts as 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthState {
    rise: u32,
    fall: u32,
    health: Health,
    /// Consecutive results against the current health.
    streak: u32,
}

impl HealthState {
    /// A server starting at `initial` health (commonly [`Health::Down`] until proven, or
    /// [`Health::Up`] to serve at once after a restart).
    pub fn new(rise: u32, fall: u32, initial: Health) -> Self {
        Self {
            rise: rise.max(1),
            fall: fall.max(1),
            health: initial,
            streak: 0,
        }
    }

    /// Takes one check result; returns the transition if this result completed one.
    pub fn record(&mut self, ok: bool) -> Option<Transition> {
        let (against, needed, transition) = match self.health {
            Health::Up => (!ok, self.fall, Transition::Fall),
            Health::Down => (ok, self.rise, Transition::Rise),
        };
        if !against {
            self.streak = 0;
            return None;
        }
        self.streak += 1;
        if self.streak < needed {
            return None;
        }
        self.streak = 0;
        self.health = transition.to();
        Some(transition)
    }

    /// The current health.
    pub fn health(&self) -> Health {
        self.health
    }

    /// Consecutive results so far against the current health (0 after a transition).
    pub fn streak(&self) -> u32 {
        self.streak
    }

    /// Consecutive successes that bring a down server up.
    pub fn rise(&self) -> u32 {
        self.rise
    }

    /// Consecutive failures that take an up server down.
    pub fn fall(&self) -> u32 {
        self.fall
    }
}

/// Which traffic a server may take, from its [`AdminState`] and [`Health`].
///
/// | admin \ health | up | down |
/// |---|---|---|
/// | enabled | [`Full`](Eligibility::Full) | [`Excluded`](Eligibility::Excluded) |
/// | draining | [`PersistentOnly`](Eligibility::PersistentOnly) | [`Excluded`](Eligibility::Excluded) |
/// | disabled | [`Excluded`](Eligibility::Excluded) | [`Excluded`](Eligibility::Excluded) |
///
/// A down server loses its persistent clients too: they are better served by another server
/// than by an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Eligibility {
    /// New clients and persistent sessions.
    Full,
    /// Only clients already persisted to it (draining).
    PersistentOnly,
    /// No traffic.
    Excluded,
}

impl Eligibility {
    /// The eligibility of a server in `admin` state with `health`.
    pub fn of(admin: AdminState, health: Health) -> Self {
        match (admin, health) {
            (AdminState::Enabled, Health::Up) => Eligibility::Full,
            (AdminState::Draining, Health::Up) => Eligibility::PersistentOnly,
            (AdminState::Disabled, _) | (_, Health::Down) => Eligibility::Excluded,
        }
    }

    /// Whether the server may be a selection candidate for a new client.
    pub fn takes_new(self) -> bool {
        self == Eligibility::Full
    }

    /// Whether a client persisted to the server may still be sent there.
    pub fn takes_persistent(self) -> bool {
        self != Eligibility::Excluded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn up_falls_after_exactly_fall_failures() {
        let mut h = HealthState::new(2, 3, Health::Up);
        assert_eq!(h.record(false), None);
        assert_eq!(h.record(false), None);
        assert_eq!(h.streak(), 2);
        assert_eq!(h.record(false), Some(Transition::Fall));
        assert_eq!(h.health(), Health::Down);
        assert_eq!(h.streak(), 0);
        // further failures agree with down
        assert_eq!(h.record(false), None);
        assert_eq!(h.streak(), 0);
    }

    #[test]
    fn down_rises_after_exactly_rise_successes() {
        let mut h = HealthState::new(2, 3, Health::Down);
        assert_eq!(h.record(true), None);
        assert_eq!(h.record(true), Some(Transition::Rise));
        assert_eq!(h.health(), Health::Up);
        assert_eq!(h.record(true), None);
        assert_eq!(h.health(), Health::Up);
    }

    #[test]
    fn an_agreeing_result_resets_the_count() {
        let mut h = HealthState::new(2, 2, Health::Up);
        assert_eq!(h.record(false), None);
        assert_eq!(h.record(true), None);
        assert_eq!(h.record(false), None);
        assert_eq!(h.health(), Health::Up);
        assert_eq!(h.record(false), Some(Transition::Fall));
        assert_eq!(h.record(true), None);
        assert_eq!(h.record(false), None);
        assert_eq!(h.record(true), None);
        assert_eq!(h.health(), Health::Down);
        assert_eq!(h.record(true), Some(Transition::Rise));
    }

    #[test]
    fn zero_rise_or_fall_counts_as_one() {
        let mut h = HealthState::new(0, 0, Health::Down);
        assert_eq!((h.rise(), h.fall()), (1, 1));
        assert_eq!(h.record(true), Some(Transition::Rise));
        assert_eq!(h.record(false), Some(Transition::Fall));
        assert_eq!(Transition::Rise.to(), Health::Up);
        assert_eq!(Transition::Fall.to(), Health::Down);
    }

    #[test]
    fn eligibility_table() {
        use AdminState::*;
        use Eligibility::*;
        use Health::*;
        let cases = [
            (Enabled, Up, Full, true, true),
            (Enabled, Down, Excluded, false, false),
            (Draining, Up, PersistentOnly, false, true),
            (Draining, Down, Excluded, false, false),
            (Disabled, Up, Excluded, false, false),
            (Disabled, Down, Excluded, false, false),
        ];
        for (admin, health, want, new, persistent) in cases {
            let e = Eligibility::of(admin, health);
            assert_eq!(e, want, "{admin:?} {health:?}");
            assert_eq!(e.takes_new(), new);
            assert_eq!(e.takes_persistent(), persistent);
        }
        assert_eq!(AdminState::default(), Enabled);
    }

    proptest! {
        #[test]
        fn flips_only_after_exactly_rise_or_fall_consecutive_results(
            rise in 1u32..6,
            fall in 1u32..6,
            up: bool,
            results in prop::collection::vec(any::<bool>(), 0..200),
        ) {
            let initial = if up { Health::Up } else { Health::Down };
            let mut h = HealthState::new(rise, fall, initial);
            let mut health = initial;
            // results since the last transition (or the start)
            let mut since: Vec<bool> = Vec::new();
            for ok in results {
                since.push(ok);
                let (against, needed) = match health {
                    Health::Up => (false, fall),
                    Health::Down => (true, rise),
                };
                // the trailing run of results that go against the current health
                let run = since.iter().rev().take_while(|&&r| r == against).count() as u32;
                let got = h.record(ok);
                if run == needed {
                    let want = if against { Transition::Rise } else { Transition::Fall };
                    prop_assert_eq!(got, Some(want));
                    health = want.to();
                    since.clear();
                } else {
                    prop_assert!(run < needed);
                    prop_assert_eq!(got, None);
                }
                prop_assert_eq!(h.health(), health);
            }
        }
    }
}
