//! Slow start: a server that has just come into rotation (back up after its monitor's `rise`,
//! back from passive health, enabled again) takes a share of new requests that grows from
//! almost nothing to its full weight over the group's `slow_start` window (NetScaler's and
//! HAProxy's `slowstart`). Without it, least connection sends a returning server — which has no
//! connection at all — every new request until it has as many as the others, the moment it is
//! coldest.
//!
//! Weights a selector sees are [`WEIGHT_SCALE`] times the configured ones, so a ramping server
//! can count with a fraction of its weight while the others keep theirs; every method compares
//! weights only relative to each other, so the scale changes no pick.

use std::time::Duration;

/// The factor between configured weights and the weights a selector sees in a group with slow
/// start (room for a ramp in steps of 1/100 of the lightest weight).
pub const WEIGHT_SCALE: u32 = 100;

/// The weight a server of configured `weight` counts with `elapsed` into a `window` of slow
/// start, scaled by [`WEIGHT_SCALE`]: in proportion to the time elapsed, at least 1 (so it is
/// tried at all) while its weight is not 0, and the whole scaled weight from the end of the
/// window on.
pub fn ramped_weight(weight: u32, elapsed: Duration, window: Duration) -> u32 {
    let full = weight.saturating_mul(WEIGHT_SCALE);
    if weight == 0 || elapsed >= window {
        return full;
    }
    let share = (u128::from(full) * elapsed.as_nanos()) / window.as_nanos().max(1);
    u32::try_from(share).unwrap_or(full).clamp(1, full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_weight_grows_with_the_window_and_is_whole_after_it() {
        let w = Duration::from_secs(10);
        assert_eq!(ramped_weight(5, Duration::ZERO, w), 1);
        assert_eq!(ramped_weight(5, Duration::from_secs(1), w), 50);
        assert_eq!(ramped_weight(5, Duration::from_secs(5), w), 250);
        assert_eq!(ramped_weight(5, w, w), 500);
        assert_eq!(ramped_weight(5, Duration::from_secs(60), w), 500);
        assert_eq!(ramped_weight(0, Duration::from_secs(1), w), 0);
        assert_eq!(ramped_weight(1000, Duration::ZERO, Duration::ZERO), 100_000);
    }

    proptest! {
        /// Never above the whole scaled weight, never 0 for a weight above 0, and never
        /// smaller later in the window.
        #[test]
        fn ramps_are_bounded_and_monotone(
            weight in 0u32..=1000,
            a in 0u64..20_000,
            b in 0u64..20_000,
            window in 1u64..20_000,
        ) {
            let window = Duration::from_millis(window);
            let (lo, hi) = (a.min(b), a.max(b));
            let at = |ms| ramped_weight(weight, Duration::from_millis(ms), window);
            prop_assert!(at(hi) <= weight * WEIGHT_SCALE);
            prop_assert!(at(lo) <= at(hi));
            prop_assert_eq!(at(lo) == 0, weight == 0);
        }
    }
}
