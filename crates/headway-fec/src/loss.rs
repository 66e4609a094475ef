//! The receiver's loss measurement and the sender's choice of how many recovery shards to send.

/// Sequence numbers per measurement epoch.
pub(crate) const EPOCH: u32 = 256;
/// How far past an epoch's end the highest sequence number must be before the epoch is
/// counted, so that slightly reordered datagrams still count as received.
pub(crate) const SLACK: u32 = 64;
/// A jump of the sequence number further than this (either way) means the sender restarted.
const RESTART: u32 = 1 << 20;

/// Measures the loss of one sender's data datagrams from the gaps in their sequence numbers.
///
/// Datagrams are counted per epoch of 256 sequence numbers; a finished epoch's loss fraction
/// is folded into an exponentially weighted average (weight 1/8, so the average spans about
/// 2,000 datagrams); the first eight epochs are weighted as a plain mean (1, 1/2, … 1/8).
/// Datagrams the FEC layer recovered count as lost: this measures the path, which is what the
/// sender must provision repair for.
///
/// One epoch of 256 datagrams is too few to trust alone (at 1 % loss, one in thirteen loses
/// none; at 5 % the measurement's standard error is 1.4 points), so what the receiver reports
/// to the sender is not the mean but an upper bound ([`LossEstimator::bound`]) that tightens
/// as datagrams are counted. (It used to report the mean with a 1 % prior weighted as one
/// epoch: a 5 % path then reported about 3 % after the start-up train, the first transfer's
/// blocks were sized for that, and at 44 Mbit/s and 200 ms one first pass in a few lost more
/// of a tail block than its repair and waited a round trip.)
#[derive(Clone, Debug)]
pub(crate) struct LossEstimator {
    epochs: u32,
    started: bool,
    epoch_start: u32,
    highest: u32,
    seen: u32,
    seen_next: u32,
    average: Option<f64>,
}

impl LossEstimator {
    /// An estimator that has seen nothing.
    pub(crate) fn new() -> Self {
        Self {
            epochs: 0,
            started: false,
            epoch_start: 0,
            highest: 0,
            seen: 0,
            seen_next: 0,
            average: None,
        }
    }

    /// Counts a received data datagram. Returns true when the sender evidently restarted (its
    /// sequence numbers jumped), after which the measurement starts over.
    pub(crate) fn on_datagram(&mut self, seq: u32) -> bool {
        if !self.started {
            *self = LossEstimator {
                started: true,
                epoch_start: seq,
                highest: seq,
                seen: 1,
                seen_next: 0,
                ..self.clone()
            };
            return false;
        }
        let ahead = seq.wrapping_sub(self.highest);
        let behind = self.highest.wrapping_sub(seq);
        if ahead > RESTART && behind > RESTART {
            self.started = false;
            self.on_datagram(seq);
            return true;
        }
        if ahead != 0 && ahead <= RESTART {
            self.highest = seq;
        }
        let off = seq.wrapping_sub(self.epoch_start);
        if off < EPOCH {
            self.seen += 1;
        } else if off < 2 * EPOCH {
            self.seen_next += 1;
        }
        while self.highest.wrapping_sub(self.epoch_start) >= EPOCH + SLACK
            && self.highest.wrapping_sub(self.epoch_start) <= RESTART
        {
            let lost = EPOCH.saturating_sub(self.seen);
            let sample = f64::from(lost) / f64::from(EPOCH);
            self.epochs = self.epochs.saturating_add(1);
            let weight = 1.0 / f64::from(self.epochs.min(7) + 1);
            let before = self.average.unwrap_or(sample);
            self.average = Some(before * (1.0 - weight) + sample * weight);
            self.epoch_start = self.epoch_start.wrapping_add(EPOCH);
            self.seen = self.seen_next;
            self.seen_next = 0;
        }
        false
    }

    /// The measured loss fraction, once an epoch finished.
    pub(crate) fn fraction(&self) -> Option<f64> {
        self.average
    }

    /// What a sender should provision repair for: the upper end of the Wilson score interval
    /// ([`BOUND_Z`] standard errors) around [`LossEstimator::fraction`], over the datagrams the
    /// average spans (256 per epoch, at most eight epochs' worth). At 5 % loss: 7.5 % after one
    /// epoch, 5.7 % after eight; on a clean path 0.87 % after one epoch, 0.11 % after eight.
    pub(crate) fn bound(&self) -> Option<f64> {
        let p = self.average?;
        let n = f64::from(self.epochs.min(8) * EPOCH);
        Some(wilson_upper(p, n, BOUND_Z))
    }
}

/// Standard errors above the measured loss that [`LossEstimator::bound`] reports.
pub(crate) const BOUND_Z: f64 = 1.5;

/// The upper end of the Wilson score interval for a fraction `p` measured over `n` trials.
fn wilson_upper(p: f64, n: f64, z: f64) -> f64 {
    if n <= 0.0 {
        return 1.0;
    }
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre + spread) / (1.0 + z2 / n)).clamp(0.0, 1.0)
}

/// Recovery shards for a window of `n` originals when the path loses each datagram with
/// probability `p`: the fewest `r` for which more than `r` losses among the `n + r` datagrams
/// is less likely than `target` (Poisson approximation of the binomial), at least 1 and at
/// most `max`.
pub fn repair_count(n: usize, p: f64, target: f64, max: usize) -> usize {
    if n == 0 || max == 0 {
        return 0;
    }
    let p = p.clamp(0.0, 0.5);
    for r in 1..=max {
        let lambda = (n + r) as f64 * p;
        if poisson_tail(lambda, r) < target {
            return r;
        }
    }
    max
}

/// Recovery shards for a window of `n` originals, at most `max`, that minimise the expected
/// delay they add to a transfer: each shard takes `shard` of link time before the rest of the
/// transfer, and more losses than shards (probability as in [`repair_count`]) cost `stall`.
/// Where a shard costs more than the stall it is expected to prevent this is fewer than the
/// `target` of [`repair_count`] asks for: on slow links (a datagram takes 8 ms at 1.5 Mbit/s)
/// and for blocks well before a transfer's end.
pub fn repair_count_for_cost(
    n: usize,
    p: f64,
    shard: std::time::Duration,
    stall: std::time::Duration,
    max: usize,
) -> usize {
    let p = p.clamp(0.0, 0.5);
    let (shard, stall) = (shard.as_secs_f64(), stall.as_secs_f64());
    let cost = |r: usize| r as f64 * shard + poisson_tail((n + r) as f64 * p, r) * stall;
    (0..=max)
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
        .unwrap_or(0)
}

/// P(X > k) for X ~ Poisson(lambda).
fn poisson_tail(lambda: f64, k: usize) -> f64 {
    let mut term = (-lambda).exp();
    let mut cdf = term;
    for i in 1..=k {
        term *= lambda / i as f64;
        cdf += term;
    }
    (1.0 - cdf).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(est: &mut LossEstimator, from: u32, n: u32, lose_every: u32) {
        for i in 0..n {
            if lose_every == 0 || i % lose_every != 0 {
                est.on_datagram(from.wrapping_add(i));
            }
        }
    }

    #[test]
    fn measures_a_steady_loss_rate() {
        let mut e = LossEstimator::new();
        assert_eq!(e.fraction(), None);
        run(&mut e, u32::MAX - 5000, 20_000, 50); // 2 %, across the wrap
        let f = e.fraction().unwrap();
        assert!((f - 0.02).abs() < 0.003, "{f}");
        let mut clean = LossEstimator::new();
        run(&mut clean, 0, 5_000, 0);
        assert!(clean.fraction().unwrap() < 0.001, "{:?}", clean.fraction());
    }

    #[test]
    fn reordering_within_the_slack_is_not_loss() {
        let mut e = LossEstimator::new();
        for base in (0..4096u32).step_by(8) {
            for i in [1, 0, 3, 2, 5, 4, 7, 6] {
                e.on_datagram(base + i);
            }
        }
        assert!(e.fraction().unwrap() < 0.001, "{:?}", e.fraction());
    }

    #[test]
    fn the_reported_bound_covers_a_short_measurement_and_tightens_with_more() {
        // One clean epoch does not make a path look lossless to the sender…
        let mut e = LossEstimator::new();
        run(&mut e, 0, 256 + 65, 0);
        assert_eq!(e.fraction(), Some(0.0));
        let b = e.bound().unwrap();
        assert!((0.008..0.01).contains(&b), "{b}");
        // …a 5 % path is provisioned above 5 % from its first epoch…
        let mut lossy = LossEstimator::new();
        run(&mut lossy, 0, 256 + 66, 20);
        let (f, b) = (lossy.fraction().unwrap(), lossy.bound().unwrap());
        assert!(f > 0.045 && b > 0.07, "{f} {b}");
        // …and the bound closes in on the measurement as epochs add up.
        run(&mut lossy, 256 + 66, 8 * 256, 20);
        let (f, b) = (lossy.fraction().unwrap(), lossy.bound().unwrap());
        assert!(b > f && b - f < 0.01, "{f} {b}");
    }

    #[test]
    fn a_restarted_sender_starts_over() {
        let mut e = LossEstimator::new();
        run(&mut e, 3_000_000, 1000, 0);
        assert!(e.on_datagram(5));
        assert!(!e.on_datagram(6));
    }

    #[test]
    fn repair_grows_with_window_and_loss() {
        assert_eq!(repair_count(0, 0.01, 1e-3, 100), 0);
        assert_eq!(repair_count(10, 0.0, 1e-3, 100), 1);
        let small = repair_count(100, 0.01, 1e-3, 500);
        let big = repair_count(1000, 0.01, 1e-3, 500);
        let lossy = repair_count(1000, 0.05, 1e-3, 500);
        assert!(small < big && big < lossy, "{small} {big} {lossy}");
        // 1000 datagrams at 1 %: about 10 losses expected; 20 covers all but 1 in 1,000.
        assert!((18..=25).contains(&big), "{big}");
        assert_eq!(repair_count(1000, 0.5, 1e-3, 64), 64);
    }
    #[test]
    fn repair_for_cost_weighs_a_shard_against_the_stall_it_prevents() {
        use std::time::Duration;
        let ms = Duration::from_millis;
        // 44 Mbit/s, 300 ms, 5 % loss measured as 5.8 %: a shard takes 0.27 ms and a
        // shortfall costs 450 ms, so about as many as the 1-in-1,000 target asks for.
        let target = repair_count(112, 0.058, 1e-3, 256);
        let fast = repair_count_for_cost(112, 0.058, Duration::from_micros(273), ms(450), target);
        assert!((target - 2..=target).contains(&fast), "{fast} of {target}");
        // 1.5 Mbit/s, 300 ms: a shard takes 8 ms, and a block of 18 is worth fewer.
        let target = repair_count(18, 0.058, 1e-3, 256);
        let slow = repair_count_for_cost(18, 0.058, ms(8), ms(450), target);
        assert!(slow < target && slow >= 2, "{slow} of {target}");
        // The rest of the transfer covers the retransmission: no repair at all.
        assert_eq!(
            repair_count_for_cost(112, 0.05, ms(1), Duration::ZERO, 20),
            0
        );
        // Free shards: as many as allowed.
        assert_eq!(
            repair_count_for_cost(112, 0.05, Duration::ZERO, ms(450), 20),
            20
        );
    }
}
