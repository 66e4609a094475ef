use super::*;
use proptest::prelude::*;

fn limiter(requests: u32, per: Duration, by: RateKey) -> RuleLimiter {
    RuleLimiter::new(RateLimit { requests, per, by })
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_bucket_takes_its_size_at_once_then_refills_at_the_rate() {
    let l = limiter(5, Duration::from_secs(10), RateKey::Client);
    let t0 = headway_core::SystemClock::now();
    let k = l.key(&HeaderMap::new(), ip("10.0.0.1"));
    assert_eq!((0..8).filter(|_| l.admit(k, t0).is_ok()).count(), 5);
    // Empty: the next token is 2 s away (5 per 10 s).
    let wait = l.admit(k, t0).unwrap_err();
    assert!((wait.as_secs_f64() - 2.0).abs() < 1e-9, "{wait:?}");
    assert_eq!(retry_after(wait), 2);
    assert!(l.admit(k, t0 + Duration::from_millis(1_999)).is_err());
    assert!(l.admit(k, t0 + Duration::from_secs(2)).is_ok());
    assert!(l.admit(k, t0 + Duration::from_secs(2)).is_err());
    // Long idle refills to the size, no more.
    let later = t0 + Duration::from_secs(3600);
    assert_eq!((0..8).filter(|_| l.admit(k, later).is_ok()).count(), 5);
    assert_eq!(retry_after(Duration::from_millis(1)), 1);
    assert_eq!(retry_after(Duration::from_millis(2_001)), 3);
}

#[test]
fn keys_are_per_client_per_slash_64_per_header_value_or_one() {
    let h = HeaderMap::new();
    let by_client = limiter(1, Duration::from_secs(1), RateKey::Client);
    let k = |a: &str| by_client.key(&h, ip(a));
    assert_ne!(k("10.0.0.1"), k("10.0.0.2"));
    assert_eq!(k("10.0.0.1"), k("::ffff:10.0.0.1"));
    assert_eq!(k("2001:db8:1:2::1"), k("2001:db8:1:2:ffff::9"));
    assert_ne!(k("2001:db8:1:2::1"), k("2001:db8:1:3::1"));
    // A v4 address and a v6 one of the same leading bytes are not one client.
    assert_ne!(k("10.0.0.1"), k("a00:1::"));

    let all = limiter(1, Duration::from_secs(1), RateKey::All);
    assert_eq!(all.key(&h, ip("10.0.0.1")), all.key(&h, ip("2001:db8::1")));

    let by_key = limiter(
        1,
        Duration::from_secs(1),
        RateKey::Header("x-api-key".into()),
    );
    let with = |v: &str| by_key.key(&with_key(v), ip("10.0.0.1"));
    // The caller is the key, wherever it calls from.
    assert_eq!(
        with("alpha"),
        by_key.key(&with_key("alpha"), ip("10.9.9.9"))
    );
    assert_ne!(with("alpha"), with("beta"));
    assert_eq!(
        by_key.key(&h, ip("10.0.0.1")),
        by_key.key(&h, ip("10.0.0.2"))
    );
    assert_ne!(by_key.key(&h, ip("10.0.0.1")), with(""));
}

fn with_key(v: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("X-API-Key", v.parse().unwrap());
    h
}

#[test]
fn refilled_buckets_are_forgotten_and_the_table_is_bounded() {
    let mut l = limiter(2, Duration::from_secs(1), RateKey::Client);
    l.max_keys = 10_000;
    let t0 = headway_core::SystemClock::now();
    // SWEEP_AT clients each take one token; one more client at once sweeps nothing (none has
    // refilled), and the sweep point doubles.
    for i in 0..SWEEP_AT as u64 {
        assert!(l.admit(i, t0).is_ok());
    }
    assert!(l.admit(u64::MAX, t0).is_ok());
    assert_eq!(l.keys(), SWEEP_AT + 1);
    // A second later every bucket has refilled: the next sweep forgets them all.
    let t1 = t0 + Duration::from_secs(1);
    for i in 0..SWEEP_AT as u64 {
        assert!(l.admit(1_000_000 + i, t1).is_ok());
    }
    assert!(l.keys() <= SWEEP_AT + 1, "{}", l.keys());
    // Live buckets beyond the bound: a new key is refused, known keys still counted.
    for i in 0..20_000u64 {
        let _ = l.admit(2_000_000 + i, t1);
    }
    assert_eq!(l.keys(), 10_000);
    let wait = l.admit(9_999_999, t1).unwrap_err();
    assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9);
    assert!(l.admit(2_000_000, t1).is_ok());
    assert!(l.admit(2_000_000, t1).is_err());
}

proptest! {
    /// In any window, a bucket never takes more than its size plus what the window refills;
    /// requests spaced at the rate are all taken.
    #[test]
    fn never_more_than_the_size_plus_the_refill(
        requests in 1u32..20,
        per_ms in 1u64..5_000,
        gaps in proptest::collection::vec(0u64..400, 1..150),
    ) {
        let per = Duration::from_millis(per_ms);
        let l = limiter(requests, per, RateKey::All);
        let t0 = headway_core::SystemClock::now();
        let mut at = t0;
        let mut taken = Vec::new();
        for g in gaps {
            at += Duration::from_millis(g);
            if l.admit(0, at).is_ok() {
                taken.push(at);
            }
        }
        let rate = f64::from(requests) / per.as_secs_f64();
        for (i, start) in taken.iter().enumerate() {
            for (j, end) in taken.iter().enumerate().skip(i) {
                let window = end.duration_since(*start).as_secs_f64();
                let n = (j - i + 1) as f64;
                prop_assert!(n <= f64::from(requests) + window * rate + 1e-6,
                    "{n} taken in {window} s (size {requests}, rate {rate}/s)");
            }
        }
        let spaced = limiter(requests, per, RateKey::All);
        let step = per.as_secs_f64() / f64::from(requests);
        for i in 0..50u32 {
            let at = t0 + Duration::from_secs_f64(step * f64::from(i) * 1.000_001);
            prop_assert!(spaced.admit(0, at).is_ok(), "request {i} at the rate refused");
        }
    }
}
