//! Rules' rate limits (`rate_limit` on a content-switching rule): a token bucket per key (a
//! client, a header's value, or the rule as a whole), shared by the workers and kept across
//! reloads while the rule keeps its name and limit.
//!
//! Sans-IO: [`RuleLimiter::admit`] takes the time. Keys are hashed with a per-process random
//! seed, so a caller cannot pick values that collide with another's bucket. The table is
//! bounded: once it holds [`SWEEP_AT`] keys (or twice what the last sweep left) the buckets
//! that have refilled are forgotten — they would start full anyway — and beyond [`MAX_KEYS`]
//! live buckets a new key is refused rather than tracked.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use headway_config::adc::rate_limit::{RateKey, RateLimit};
use http::HeaderMap;
use parking_lot::Mutex;

/// Keys kept before the first sweep.
pub const SWEEP_AT: usize = 4096;
/// The most live buckets one rule keeps.
pub const MAX_KEYS: usize = 1_000_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

#[derive(Debug)]
struct Table {
    buckets: HashMap<u64, Bucket>,
    sweep_at: usize,
}

/// One rule's limit and its buckets.
#[derive(Debug)]
pub struct RuleLimiter {
    limit: RateLimit,
    per_second: f64,
    max_keys: usize,
    seed: std::collections::hash_map::RandomState,
    table: Mutex<Table>,
}

impl RuleLimiter {
    /// A limiter of `limit` with every bucket full.
    pub fn new(limit: RateLimit) -> Self {
        RuleLimiter {
            per_second: limit.per_second(),
            max_keys: MAX_KEYS,
            limit,
            seed: std::collections::hash_map::RandomState::new(),
            table: Mutex::new(Table {
                buckets: HashMap::new(),
                sweep_at: SWEEP_AT,
            }),
        }
    }

    /// The limit it enforces.
    pub fn limit(&self) -> &RateLimit {
        &self.limit
    }

    /// The bucket key of a request from `client` with `headers`.
    pub fn key(&self, headers: &HeaderMap, client: IpAddr) -> u64 {
        match &self.limit.by {
            RateKey::All => 0,
            RateKey::Client => match headway_core::net::unmapped(client) {
                IpAddr::V4(a) => self.seed.hash_one((4u8, a.octets())),
                // One subscriber holds a /64; keying on the whole address would let a client
                // take a fresh bucket per address it picks from it.
                IpAddr::V6(a) => {
                    let o = a.octets();
                    self.seed.hash_one((6u8, &o[..8]))
                }
            },
            RateKey::Header(name) => match headers.get(name.as_str()) {
                Some(v) => self.seed.hash_one((1u8, v.as_bytes())),
                None => self.seed.hash_one(0u8),
            },
        }
    }

    /// Takes a token from `key`'s bucket at `now`: `Err(wait)` when it is empty, `wait` being
    /// how long until it holds one again.
    pub fn admit(&self, key: u64, now: Instant) -> Result<(), Duration> {
        let capacity = f64::from(self.limit.requests);
        let mut t = self.table.lock();
        if t.buckets.len() >= t.sweep_at {
            let rate = self.per_second;
            t.buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.last).as_secs_f64() * rate < capacity
            });
            t.sweep_at = (t.buckets.len() * 2).clamp(SWEEP_AT.min(self.max_keys), self.max_keys);
        }
        let full = t.buckets.len() >= self.max_keys;
        let b = match t.buckets.get_mut(&key) {
            Some(b) => b,
            None if full => return Err(self.one_token()),
            None => t.buckets.entry(key).or_insert(Bucket {
                tokens: capacity,
                last: now,
            }),
        };
        let dt = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + dt * self.per_second).min(capacity);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / self.per_second))
        }
    }

    /// The time one token takes to come back.
    fn one_token(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.per_second)
    }

    /// Buckets held now.
    pub fn keys(&self) -> usize {
        self.table.lock().buckets.len()
    }
}

/// The `Retry-After` value for a wait: whole seconds, rounded up, at least 1.
pub fn retry_after(wait: Duration) -> u64 {
    wait.as_secs_f64().ceil().max(1.0) as u64
}

#[cfg(test)]
mod tests;
