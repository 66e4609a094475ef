//! The seeded random number generator.
//!
//! Every randomised decision in Headway (loss, jitter, selection among equals) draws from an
//! [`Rng`] created from an explicit seed. The algorithm (ChaCha8) is fixed so that a seed gives
//! the same sequence on every platform and every release: snapshots of seeded schedules stay
//! valid. OS randomness is used only to pick a seed when the user gives none
//! ([`Rng::seed_from_entropy`]), and that seed is logged so a run can be replayed.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The splitmix64 finaliser: a bijective 64-bit mixer with full avalanche (distinct inputs give
/// distinct outputs; nearby inputs give unrelated ones).
#[inline]
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A deterministic, seedable random number generator.
#[derive(Debug, Clone)]
pub struct Rng {
    inner: ChaCha8Rng,
}

impl Rng {
    /// A generator whose whole sequence is determined by `seed`.
    pub fn from_seed(seed: u64) -> Self {
        Self {
            inner: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// A seed drawn from the wall clock and process id, for runs where the user gave none.
    /// Log it: it is the only way to replay such a run.
    pub fn seed_from_entropy() -> u64 {
        let t = crate::clock::wall_clock()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        // Mixed, so that nearby times give unrelated seeds.
        mix64(t ^ (u64::from(std::process::id()) << 32))
    }

    /// A child generator for an independent stream (e.g. one per link direction), derived
    /// deterministically from this one.
    pub fn fork(&mut self) -> Rng {
        Rng::from_seed(self.inner.next_u64())
    }

    /// A uniform `f64` in `[0, 1)`.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        // 53 random bits → exactly representable uniform in [0, 1)
        (self.inner.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `true` with probability `p` (clamped to `[0, 1]`).
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            false
        } else if p >= 1.0 {
            true
        } else {
            self.unit() < p
        }
    }

    /// A uniform `u64`.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }
}

impl RngCore for Rng {
    fn next_u32(&mut self) -> u32 {
        self.inner.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.inner.fill_bytes(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_different_seed_differs() {
        let a: Vec<u64> = (0..8)
            .scan(Rng::from_seed(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..8)
            .scan(Rng::from_seed(7), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..8)
            .scan(Rng::from_seed(8), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn chance_frequency_is_close_to_p() {
        let mut r = Rng::from_seed(1);
        let hits = (0..100_000).filter(|_| r.chance(0.25)).count();
        // 99.99 % interval for Binomial(100000, 0.25) is about ±0.0053
        assert!((hits as f64 / 100_000.0 - 0.25).abs() < 0.006, "{hits}");
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
    }
}
