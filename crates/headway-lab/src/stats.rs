//! Small statistics for judging measurements: binomial confidence intervals and accuracy.
//!
//! This module owns the arithmetic the calibration's PASS/FAIL verdicts rest on. It does no I/O.

/// The two-sided 99 % standard-normal quantile, z(0.995).
pub const Z_99: f64 = 2.575_829_303_548_901;

/// The Wilson score interval for a binomial proportion: `k` successes in `n` trials at the
/// confidence whose two-sided normal quantile is `z` (use [`Z_99`] for 99 %).
///
/// Returns `(low, high)` in `[0, 1]`; `(0, 1)` when `n` is 0. Unlike the normal approximation
/// it behaves at `k = 0` (the interval is `[0, z²/(n+z²)]`) and at `k = n`.
pub fn wilson(k: u64, n: u64, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (k.min(n) as f64, n as f64);
    let p = k / n;
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = z / denom * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Whether the true proportion `p` is consistent with observing `k` of `n` at 99 %: `p` lies in
/// the 99 % Wilson interval of `k/n`.
pub fn consistent_99(p: f64, k: u64, n: u64) -> bool {
    let (lo, hi) = wilson(k, n, Z_99);
    // A hair of tolerance for floating-point noise at the edges (e.g. p = 0, k = 0).
    (lo - 1e-12..=hi + 1e-12).contains(&p)
}

/// Accuracy in percent: `measured / configured × 100`; `None` when nothing was configured.
pub fn accuracy_pct(measured: f64, configured: f64) -> Option<f64> {
    (configured != 0.0 && measured.is_finite()).then(|| measured / configured * 100.0)
}

/// Whether accuracy `ours` (percent) is at least as close to 100 as `theirs`.
pub fn at_least_as_accurate(ours: f64, theirs: f64) -> bool {
    (ours - 100.0).abs() <= (theirs - 100.0).abs() + 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_a_worked_example() {
        // 50 of 10,000 at 99 %: p̂ = 0.5 %; the interval is about [0.348 %, 0.717 %].
        let (lo, hi) = wilson(50, 10_000, Z_99);
        assert!((lo - 0.003_483).abs() < 0.000_005, "{lo}");
        assert!((hi - 0.007_174).abs() < 0.000_005, "{hi}");
    }

    #[test]
    fn wilson_at_zero_successes_starts_at_zero() {
        let (lo, hi) = wilson(0, 10_000, Z_99);
        assert_eq!(lo, 0.0);
        assert!((hi - Z_99 * Z_99 / (10_000.0 + Z_99 * Z_99)).abs() < 1e-12);
        assert!(consistent_99(0.0, 0, 10_000));
        assert!(!consistent_99(0.0, 3, 10_000));
    }

    #[test]
    fn consistency_refuses_far_off_rates() {
        assert!(consistent_99(0.05, 500, 10_000));
        assert!(consistent_99(0.05, 470, 10_000));
        assert!(!consistent_99(0.05, 400, 10_000));
        assert!(!consistent_99(0.05, 600, 10_000));
        assert_eq!(wilson(0, 0, Z_99), (0.0, 1.0));
    }

    #[test]
    fn accuracy_and_comparison() {
        assert_eq!(accuracy_pct(1.876, 2.0), Some(93.8));
        assert_eq!(accuracy_pct(0.2, 0.0), None);
        assert!(at_least_as_accurate(100.5, 99.3));
        assert!(at_least_as_accurate(99.3, 100.7));
        assert!(!at_least_as_accurate(98.0, 101.4));
    }
}
