//! Server selection: which eligible server takes the next request.
//!
//! Owns [`Method`] (the configured algorithm), [`Candidate`] (one eligible server as the caller
//! sees it at this instant), [`Key`] (what the hash methods hash) and [`Selector`] (the state a
//! method needs between picks and the seeded RNG for ties). It does not decide who is eligible:
//! the caller filters out servers that are down, disabled, draining or at their connection limit
//! (see [`crate::health::Eligibility`]) and passes the rest as a slice. It does no I/O and reads
//! no clock.
//!
//! # Entry point and call order
//!
//! One [`Selector`] per pool (or per pool and worker, with different seeds). Per request: build
//! the candidate slice (a reused buffer), call [`Selector::pick`], use the returned index. There is
//! no other call order to respect; the candidate set may change from one call to the next.
//!
//! # Methods and their formulas
//!
//! Every method honours weights. A candidate of weight 0 is never picked, unless every
//! candidate has weight 0: then all are treated as weight 1 (so a pool whose weights were all
//! zeroed still serves rather than failing every request).
//!
//! | method | picks | ties |
//! |---|---|---|
//! | [`Method::RoundRobin`] | smooth weighted round robin (as nginx's `upstream`): every pick adds each candidate's weight to its `current`, picks the largest `current` and subtracts the total weight from it | first in scan order; the scan starts at a seeded offset |
//! | [`Method::LeastConnection`] | the smallest `active / weight` | at random, in proportion to weight |
//! | [`Method::LeastResponseTime`] | the smallest `rt × (active + 1) / weight`, `rt` = `response_time_us`; an unknown (0) `rt` counts as the mean of the known ones (1 if none is known) | at random, in proportion to weight |
//! | [`Method::SourceIpHash`], [`Method::UrlHash`], [`Method::HeaderHash`], [`Method::CookieHash`] | weighted rendezvous (HRW) hashing of the [`Key`]: the largest `weight / −ln(u)`, `u` a uniform hash of (key, id) in (0, 1) | first in slice order (a tie needs two equal 53-bit hashes) |
//!
//! Why these:
//!
//! - **Smooth WRR** spreads a heavy server's turns through the cycle (weights 5, 1, 1 give
//!   `a a b a c a a`, not `a a a a a b c`), and from a fresh start every run of `Σ weight`
//!   picks gives each candidate exactly its weight in picks. Its state is one `current` per
//!   candidate, kept by id, so servers can come and go (see "Changing candidates").
//! - **`rt × (active + 1)`** estimates how long the new request would wait behind the server's
//!   outstanding ones; the `+ 1` makes an idle fast server beat an idle slow one. Substituting
//!   the mean for an unknown `rt` keeps a newly added server from taking every request until its
//!   first answer comes back (which a 0 would do).
//! - **Rendezvous hashing** rather than a ring with virtual nodes: it needs no state at all, so
//!   a candidate slice that changes on every call (health, connection limits) costs nothing to
//!   rebuild; removing a server moves exactly the keys that were on it and no other, adding one
//!   takes only the keys it now wins; weights are exact in expectation without choosing a
//!   virtual-node count. The price is O(n) per pick: two integer mixes and one logarithm per
//!   candidate, after one BLAKE3 hash of the key. The key is hashed once with BLAKE3 under a
//!   fixed key (stable across releases, platforms and restarts, independent of the seed, so every
//!   worker and every appliance sends a key to the same server), then mixed with each id.
//!
//! The hash methods hash whichever [`Key`] they are given; the method only says which key the
//! caller should pass (the client address for [`Method::SourceIpHash`], the URL — or whatever
//! part of it the config names — for [`Method::UrlHash`]). With [`Key::None`] they fall back to
//! round robin. The other methods ignore the key. IPv4-mapped IPv6 addresses hash as their IPv4
//! address, so a dual-stack listener keeps a client on one server.
//!
//! # Changing candidates
//!
//! Candidates are identified by [`Candidate::id`], which must be unique within a slice. The
//! round-robin state follows the slice: when the ids (in order) differ from the previous call's,
//! the state is realigned — ids still present keep their `current`, new ids start at 0, ids no
//! longer present are forgotten. Weights are read on every pick, so a weight change takes effect
//! at once. The other methods keep no per-server state.
//!
//! # Cost
//!
//! O(n) per pick with no allocation, except that a changed candidate set realigns the round-robin
//! state in O(n log n) into a reused buffer (which grows only when the pool does).

use std::cmp::Ordering;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use headway_core::rng::mix64 as mix;
use headway_core::Rng;

/// The fixed BLAKE3 key for hashing selection keys. Not a secret: it only has to be the same
/// everywhere, so that a key maps to the same server in every worker, appliance and release.
const KEY_HASH_KEY: [u8; 32] = *b"headway-lb select key hash v1\0\0\0";

/// A server-selection algorithm, as named in the config file.
///
/// [`FromStr`] and [`Display`](fmt::Display) use the config names: `round-robin`,
/// `least-connection`, `least-response-time`, `source-ip-hash`, `url-hash`, `header-hash`,
/// `cookie-hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// Smooth weighted round robin.
    RoundRobin,
    /// Fewest active connections per unit of weight.
    LeastConnection,
    /// Lowest expected wait: `rt × (active + 1) / weight`.
    LeastResponseTime,
    /// Rendezvous hash of the client's IP address ([`Key::Ip`]).
    SourceIpHash,
    /// Rendezvous hash of the request URL ([`Key::Url`]).
    UrlHash,
    /// Rendezvous hash of a request header's value ([`Key::Value`]): a tenant, a user.
    HeaderHash,
    /// Rendezvous hash of a cookie's value ([`Key::Value`]): an application's session.
    CookieHash,
}

impl Method {
    /// Every method, in documentation order.
    pub const ALL: [Method; 7] = [
        Method::RoundRobin,
        Method::LeastConnection,
        Method::LeastResponseTime,
        Method::SourceIpHash,
        Method::UrlHash,
        Method::HeaderHash,
        Method::CookieHash,
    ];

    /// The config name (`round-robin`, …).
    pub fn name(self) -> &'static str {
        match self {
            Method::RoundRobin => "round-robin",
            Method::LeastConnection => "least-connection",
            Method::LeastResponseTime => "least-response-time",
            Method::SourceIpHash => "source-ip-hash",
            Method::UrlHash => "url-hash",
            Method::HeaderHash => "header-hash",
            Method::CookieHash => "cookie-hash",
        }
    }

    /// Whether it hashes a [`Key`] (and falls back to round robin without one).
    pub fn hashes(self) -> bool {
        matches!(
            self,
            Method::SourceIpHash | Method::UrlHash | Method::HeaderHash | Method::CookieHash
        )
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Method {
    type Err = MethodError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| MethodError::Unknown(s.to_owned()))
    }
}

/// Why a method name did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MethodError {
    /// The name is none of the known methods.
    #[error(
        "unknown load-balancing method {0:?} (expected round-robin, least-connection, \
         least-response-time, source-ip-hash, url-hash, header-hash or cookie-hash)"
    )]
    Unknown(String),
}

/// One eligible server, as the caller sees it at the moment of the pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Candidate {
    /// The server's stable id, unique within the pool. Round-robin state and hash placement
    /// follow the id, not the position in the slice.
    pub id: u32,
    /// Relative capacity; 0 = never picked (unless every candidate has weight 0).
    pub weight: u32,
    /// Requests or connections currently in flight to the server.
    pub active: u32,
    /// Smoothed (EWMA) response time in microseconds; 0 = unknown.
    pub response_time_us: u64,
}

/// What the hash methods hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'a> {
    /// No key: the hash methods fall back to round robin.
    None,
    /// A client address (for [`Method::SourceIpHash`]). Mask it first to hash a whole subnet to
    /// one server.
    Ip(IpAddr),
    /// A URL or part of one (for [`Method::UrlHash`]).
    Url(&'a [u8]),
    /// A header's or a cookie's value (for [`Method::HeaderHash`], [`Method::CookieHash`]).
    Value(&'a [u8]),
}

/// A server selector for one pool: the method, its state, and a seeded RNG for ties.
///
/// Deterministic: the same seed and the same sequence of calls give the same picks.
#[derive(Debug, Clone)]
pub struct Selector {
    method: Method,
    rng: Rng,
    wrr: Wrr,
}

impl Selector {
    /// A selector for `method`, whose tie-breaking (and round-robin starting point) is
    /// determined by `seed`.
    pub fn new(method: Method, seed: u64) -> Self {
        let mut rng = Rng::from_seed(seed);
        let start = rng.next_u64();
        Self {
            method,
            rng,
            wrr: Wrr {
                slots: Vec::new(),
                spare: Vec::new(),
                start,
            },
        }
    }

    /// The method this selector runs.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The index into `candidates` of the server that takes the request; `None` only when
    /// `candidates` is empty.
    ///
    /// `key` is hashed by the hash methods ([`Method::hashes`], which fall back to round robin
    /// on [`Key::None`]) and ignored by the other methods.
    pub fn pick(&mut self, candidates: &[Candidate], key: Key<'_>) -> Option<usize> {
        match candidates.len() {
            0 => return None,
            1 => return Some(0),
            _ => {}
        }
        let all_zero = candidates.iter().all(|c| c.weight == 0);
        match (self.method, key) {
            (Method::LeastConnection, _) => {
                least(candidates, all_zero, &mut self.rng, |a, wa, b, wb| {
                    (u64::from(a.active) * wb).cmp(&(u64::from(b.active) * wa))
                })
            }
            (Method::LeastResponseTime, _) => {
                let unknown = mean_response_time(candidates, all_zero);
                let rt = |c: &Candidate| match c.response_time_us {
                    0 => u128::from(unknown),
                    t => u128::from(t),
                };
                // rt < 2^64, active + 1 ≤ 2^32, weight < 2^32: the products fit in u128.
                least(candidates, all_zero, &mut self.rng, |a, wa, b, wb| {
                    let sa = rt(a) * (u128::from(a.active) + 1) * u128::from(wb);
                    let sb = rt(b) * (u128::from(b.active) + 1) * u128::from(wa);
                    sa.cmp(&sb)
                })
            }
            (m, Key::Ip(_) | Key::Url(_) | Key::Value(_)) if m.hashes() => {
                rendezvous(candidates, all_zero, key_hash(key))
            }
            (_, _) => self.wrr.pick(candidates, all_zero),
        }
    }
}

/// The weight a candidate counts with: its own, or 1 for everyone when all are zero.
#[inline]
fn weight(c: &Candidate, all_zero: bool) -> u64 {
    if all_zero {
        1
    } else {
        u64::from(c.weight)
    }
}

/// Smooth weighted round-robin state, aligned with the last candidate slice.
#[derive(Debug, Clone)]
struct Wrr {
    /// One slot per candidate of the last slice, in slice order.
    slots: Vec<Slot>,
    /// Reused buffer for realignment.
    spare: Vec<Slot>,
    /// Seeded scan offset: breaks ties among equal `current`s (so equal weights rotate from
    /// a seeded starting server rather than always from the first).
    start: u64,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    id: u32,
    current: i64,
}

impl Wrr {
    fn pick(&mut self, candidates: &[Candidate], all_zero: bool) -> Option<usize> {
        self.align(candidates);
        let n = candidates.len();
        let start = (self.start % n as u64) as usize;
        let mut total: i64 = 0;
        let mut best: Option<(usize, i64)> = None;
        for i in (start..n).chain(0..start) {
            // weights are u32, so they fit in i64 without loss
            let w = weight(&candidates[i], all_zero) as i64;
            if w == 0 {
                continue;
            }
            let slot = &mut self.slots[i];
            slot.current += w;
            total += w;
            if best.is_none_or(|(_, c)| slot.current > c) {
                best = Some((i, slot.current));
            }
        }
        let (i, _) = best?;
        self.slots[i].current -= total;
        Some(i)
    }

    /// Makes `slots` match `candidates` id for id, carrying over the `current` of known ids.
    fn align(&mut self, candidates: &[Candidate]) {
        if self.slots.len() == candidates.len()
            && self.slots.iter().zip(candidates).all(|(s, c)| s.id == c.id)
        {
            return;
        }
        self.slots.sort_unstable_by_key(|s| s.id);
        self.spare.clear();
        for c in candidates {
            let current = match self.slots.binary_search_by_key(&c.id, |s| s.id) {
                Ok(i) => self.slots[i].current,
                Err(_) => 0,
            };
            self.spare.push(Slot { id: c.id, current });
        }
        std::mem::swap(&mut self.slots, &mut self.spare);
    }
}

/// The candidate with the smallest score by `cmp(a, weight_a, b, weight_b)`; ties are broken at
/// random in proportion to weight (weighted reservoir sampling: one draw per tie, none when
/// there is no tie).
fn least(
    candidates: &[Candidate],
    all_zero: bool,
    rng: &mut Rng,
    cmp: impl Fn(&Candidate, u64, &Candidate, u64) -> Ordering,
) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    let mut tie_weight = 0u64;
    for (i, c) in candidates.iter().enumerate() {
        let w = weight(c, all_zero);
        if w == 0 {
            continue;
        }
        let Some((b, bw)) = best else {
            best = Some((i, w));
            tie_weight = w;
            continue;
        };
        match cmp(c, w, &candidates[b], bw) {
            Ordering::Less => {
                best = Some((i, w));
                tie_weight = w;
            }
            Ordering::Equal => {
                tie_weight += w;
                if below(rng, tie_weight) < w {
                    best = Some((i, w));
                }
            }
            Ordering::Greater => {}
        }
    }
    best.map(|(i, _)| i)
}

/// A uniform integer in `[0, n)` (`n > 0`), without modulo bias worth the name (Lemire's
/// multiply-shift; the bias is below n / 2^64).
#[inline]
fn below(rng: &mut Rng, n: u64) -> u64 {
    ((u128::from(rng.next_u64()) * u128::from(n)) >> 64) as u64
}

/// The mean known response time of the candidates that can be picked; 1 if none is known.
fn mean_response_time(candidates: &[Candidate], all_zero: bool) -> u64 {
    let (sum, count) = candidates
        .iter()
        .filter(|c| c.response_time_us != 0 && weight(c, all_zero) != 0)
        .fold((0u128, 0u128), |(s, n), c| {
            (s + u128::from(c.response_time_us), n + 1)
        });
    // the mean of u64 values fits in u64
    sum.checked_div(count).map_or(1, |mean| mean as u64)
}

/// The 64-bit hash of a selection key (stable everywhere, see the module doc).
fn key_hash(key: Key<'_>) -> u64 {
    let hash = match key {
        Key::None => return 0,
        Key::Ip(ip) => match ip.to_canonical() {
            IpAddr::V4(v4) => blake3::keyed_hash(&KEY_HASH_KEY, &v4.octets()),
            IpAddr::V6(v6) => blake3::keyed_hash(&KEY_HASH_KEY, &v6.octets()),
        },
        Key::Url(bytes) | Key::Value(bytes) => blake3::keyed_hash(&KEY_HASH_KEY, bytes),
    };
    let bytes = hash.as_bytes();
    u64::from_le_bytes([
        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
    ])
}

/// Weighted rendezvous hashing: the candidate with the largest `w / −ln(u)`, where `u` in
/// (0, 1) is a hash of (key, id). For a single key, `−ln(u) / w` is an exponential variable of
/// rate `w`, so candidate i wins with probability `w_i / Σ w` (Schindelhauer and Schomaker,
/// "Weighted distributed hash tables", 2005). Each candidate's score depends only on the key
/// and its own id and weight, which is what makes removals move only the removed server's keys.
fn rendezvous(candidates: &[Candidate], all_zero: bool, key: u64) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, c) in candidates.iter().enumerate() {
        let w = weight(c, all_zero);
        if w == 0 {
            continue;
        }
        let h = mix(key ^ mix(u64::from(c.id) ^ 0x9e37_79b9_7f4a_7c15));
        // 53 bits → (0, 1), never 0 or 1, so −ln(u) is finite and positive
        let u = ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64);
        let score = w as f64 / -u.ln();
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

pub mod slow_start;

#[cfg(test)]
mod tests;
