//! [`StreamMap`]: a hash map keyed by stream identifier, with a hasher made for them.
//!
//! Stream identifiers are a connection's own counters (odd for the client's, RFC 9113 §5.1.1),
//! not attacker-chosen keys that could be picked to collide: the peer chooses them, but only
//! in increasing order, each once, and at most SETTINGS_MAX_CONCURRENT_STREAMS at a time. So
//! a multiply-and-fold of the number is enough, where the standard library's SipHash cost a
//! few percent of the proxy's CPU per HTTP/2 request in profiles.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by stream identifier.
pub type StreamMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

/// The hasher of [`StreamMap`]: Fibonacci hashing of the identifier, with the high half
/// folded into the low one (the table takes its bucket from the low bits, and the identifiers'
/// lowest bit never changes).
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

const PHI: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(u32::from(b) ^ (self.0 as u32));
        }
    }

    fn write_u32(&mut self, n: u32) {
        let h = (self.0 ^ u64::from(n)).wrapping_mul(PHI);
        self.0 = h ^ (h >> 32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher as _;

    #[test]
    fn odd_identifiers_spread_over_the_low_bits() {
        let b = BuildHasherDefault::<IdHasher>::default();
        let mut seen = [0u32; 64];
        for id in (1..2 * 64 * 16).step_by(2) {
            seen[(b.hash_one(id as u32) % 64) as usize] += 1;
        }
        // 1,024 odd identifiers in 64 buckets: none empty, none with more than 3 times its share.
        assert!(seen.iter().all(|&n| n > 0 && n < 48), "{seen:?}");
    }
}
