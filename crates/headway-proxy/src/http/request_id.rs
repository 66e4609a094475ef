//! Request IDs (`request_id = "X-Request-ID"` on a virtual server): each request carries one to
//! its server, back to its client and into the access log, so that one request can be followed
//! through the balancer, the servers' logs and the client's report.
//!
//! A request that arrives with a usable ID (1–[`MAX_LEN`] visible ASCII characters: a balancer
//! or client in front made it) keeps it. Any other gets a new one from [`next`]: 32 hex digits,
//! a random 64-bit number drawn once per process followed by a per-process counter put through
//! a bijective mixer — unique within the process by construction, unrelated across restarts,
//! and looking random, without a random draw per request.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Longest ID taken from a request.
pub const MAX_LEN: usize = 128;

/// The ID of a request with `headers` under `name`: the one it carries if usable, else a new one
/// (then also set in `headers`, so the server sees it).
pub fn of_request(name: &HeaderName, headers: &mut HeaderMap) -> HeaderValue {
    if let Some(v) = headers.get(name).filter(|v| usable(v)) {
        return v.clone();
    }
    let id = next();
    headers.insert(name.clone(), id.clone());
    id
}

/// Whether `v` can stand as an ID: 1–[`MAX_LEN`] visible ASCII characters.
fn usable(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    !b.is_empty() && b.len() <= MAX_LEN && b.iter().all(u8::is_ascii_graphic)
}

/// A new ID.
pub fn next() -> HeaderValue {
    static PROCESS: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let process = *PROCESS.get_or_init(headway_core::Rng::seed_from_entropy);
    let n = COUNTER.fetch_add(1, Relaxed);
    let text = format!("{process:016x}{:016x}", mix(n));
    HeaderValue::from_str(&text).expect("hex digits are a header value")
}

/// A counter mixed by splitmix64 (a bijection on u64, so distinct counters give distinct IDs).
fn mix(n: u64) -> u64 {
    headway_core::rng::mix64(n.wrapping_add(0x9e37_79b9_7f4a_7c15))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn new_ids_are_32_hex_digits_and_never_repeat() {
        let ids: HashSet<String> = (0..10_000)
            .map(|_| next().to_str().unwrap().to_string())
            .collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids
            .iter()
            .all(|i| i.len() == 32 && i.bytes().all(|b| b.is_ascii_hexdigit())));
    }

    #[test]
    fn a_usable_incoming_id_is_kept_and_others_are_replaced() {
        let name = HeaderName::from_static("x-request-id");
        let mut h = HeaderMap::new();
        h.insert(&name, HeaderValue::from_static("abc-123"));
        assert_eq!(of_request(&name, &mut h), "abc-123");
        assert_eq!(h[&name], "abc-123");
        for bad in ["", "has space", &"x".repeat(MAX_LEN + 1)] {
            let mut h = HeaderMap::new();
            h.insert(&name, HeaderValue::from_str(bad).unwrap());
            let id = of_request(&name, &mut h);
            assert_eq!(id.len(), 32, "{bad:?}");
            assert_eq!(h.get_all(&name).iter().count(), 1);
            assert_eq!(h[&name], id);
        }
        let mut h = HeaderMap::new();
        let id = of_request(&name, &mut h);
        assert_eq!(h[&name], id);
    }

    proptest! {
        #[test]
        fn the_mixer_is_a_bijection_on_what_it_is_given(a in any::<u64>(), b in any::<u64>()) {
            prop_assert_eq!(a == b, mix(a) == mix(b));
        }
    }
}
