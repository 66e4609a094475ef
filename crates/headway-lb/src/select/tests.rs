use super::*;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

fn cand(id: u32, weight: u32) -> Candidate {
    Candidate {
        id,
        weight,
        ..Candidate::default()
    }
}

fn load(id: u32, weight: u32, active: u32, response_time_us: u64) -> Candidate {
    Candidate {
        id,
        weight,
        active,
        response_time_us,
    }
}

fn weighted(weights: &[u32]) -> Vec<Candidate> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &w)| cand(100 + i as u32, w))
        .collect()
}

/// How many times each index is picked in `n` picks.
fn counts(sel: &mut Selector, cs: &[Candidate], key: Key<'_>, n: usize) -> Vec<u64> {
    let mut counts = vec![0; cs.len()];
    for _ in 0..n {
        counts[sel.pick(cs, key).unwrap()] += 1;
    }
    counts
}

fn url_key(k: u64) -> [u8; 8] {
    k.to_le_bytes()
}

#[test]
fn method_names_round_trip_and_unknown_is_an_error() {
    for m in Method::ALL {
        assert_eq!(m.to_string().parse::<Method>(), Ok(m));
    }
    assert_eq!("least-response-time".parse(), Ok(Method::LeastResponseTime));
    let err = "leastconn".parse::<Method>().unwrap_err();
    assert_eq!(err, MethodError::Unknown("leastconn".into()));
    assert!(err.to_string().contains("least-connection"), "{err}");
    assert!("Round-Robin".parse::<Method>().is_err());
}

#[test]
fn empty_gives_none_and_single_gives_it() {
    for m in Method::ALL {
        let mut s = Selector::new(m, 1);
        assert_eq!(s.pick(&[], Key::None), None);
        assert_eq!(s.pick(&[cand(7, 0)], Key::Url(b"/x")), Some(0));
    }
}

#[test]
fn round_robin_with_equal_weights_rotates_in_order() {
    let cs = weighted(&[1, 1, 1, 1]);
    let mut s = Selector::new(Method::RoundRobin, 3);
    let first = s.pick(&cs, Key::None).unwrap();
    for k in 1..12 {
        assert_eq!(s.pick(&cs, Key::None), Some((first + k) % 4));
    }
}

#[test]
fn smooth_round_robin_interleaves_the_heavy_server() {
    // nginx's example: 5, 1, 1 gives a a b a c a a (b and c may swap with the seed)
    let cs = weighted(&[5, 1, 1]);
    for seed in 0..8 {
        let mut s = Selector::new(Method::RoundRobin, seed);
        let seq: Vec<usize> = (0..7).map(|_| s.pick(&cs, Key::None).unwrap()).collect();
        assert_eq!(seq[0], 0);
        assert_eq!(seq[1], 0);
        assert_eq!(seq[3], 0);
        assert_eq!(seq[5..], [0, 0]);
        let mut light = [seq[2], seq[4]];
        light.sort();
        assert_eq!(light, [1, 2], "{seq:?}");
    }
}

#[test]
fn round_robin_different_seeds_start_at_different_servers() {
    let cs = weighted(&[1; 8]);
    let starts: std::collections::HashSet<usize> = (0..32)
        .map(|seed| {
            Selector::new(Method::RoundRobin, seed)
                .pick(&cs, Key::None)
                .unwrap()
        })
        .collect();
    assert!(starts.len() > 1, "{starts:?}");
}

#[test]
fn zero_weight_is_never_picked_unless_all_are_zero() {
    for m in Method::ALL {
        let cs = weighted(&[0, 3, 0, 1]);
        let mut s = Selector::new(m, 9);
        for k in 0..400u64 {
            let key = url_key(k);
            let i = s.pick(&cs, Key::Url(&key)).unwrap();
            assert!(cs[i].weight > 0, "{m}: picked {i}");
        }
        let zeros = weighted(&[0, 0, 0]);
        let c = counts(&mut s, &zeros, Key::None, 300);
        if m == Method::RoundRobin || m.hashes() {
            assert_eq!(c, [100, 100, 100], "{m}");
        } else {
            assert!(c.iter().all(|&n| n > 50), "{m}: {c:?}");
        }
    }
}

#[test]
fn round_robin_state_follows_ids_when_servers_come_and_go() {
    let mut s = Selector::new(Method::RoundRobin, 5);
    let abc = [cand(1, 2), cand(2, 1), cand(3, 1)];
    assert_eq!(counts(&mut s, &abc, Key::None, 40), [20, 10, 10]);
    // b leaves, d arrives, c's weight changes and the order changes
    let cda = [cand(3, 3), cand(4, 1), cand(1, 2)];
    let c = counts(&mut s, &cda, Key::None, 600);
    for (got, want) in c.iter().zip([300i64, 100, 200]) {
        assert!((*got as i64 - want).abs() <= 3, "{c:?}");
    }
    // b comes back: it starts from scratch and gets its share
    let all = [cand(1, 1), cand(2, 1), cand(3, 1), cand(4, 1)];
    let c = counts(&mut s, &all, Key::None, 400);
    assert!(c.iter().all(|&n| (n as i64 - 100).abs() <= 3), "{c:?}");
    // the forgotten state is really gone: the buffers hold only the current ids
    assert_eq!(s.wrr.slots.len(), 4);
}

#[test]
fn least_connection_prefers_fewest_per_weight() {
    let mut s = Selector::new(Method::LeastConnection, 1);
    let cs = [load(1, 1, 10, 0), load(2, 4, 10, 0), load(3, 1, 3, 0)];
    assert_eq!(s.pick(&cs, Key::None), Some(1)); // 10/4 < 3/1 < 10/1
}

#[test]
fn least_connection_breaks_ties_in_proportion_to_weight() {
    let mut s = Selector::new(Method::LeastConnection, 2);
    let cs = weighted(&[1, 3]);
    let c = counts(&mut s, &cs, Key::None, 40_000);
    // P(index 1) = 3/4; 99.99 % interval ±0.0085
    let share = c[1] as f64 / 40_000.0;
    assert!((share - 0.75).abs() < 0.01, "{c:?}");
}

#[test]
fn least_response_time_weighs_time_by_load() {
    let mut s = Selector::new(Method::LeastResponseTime, 1);
    let slow_idle = load(2, 1, 0, 5_000);
    // 1000 × (9 + 1) = 10 000 > 5000 × 1
    assert_eq!(
        s.pick(&[load(1, 1, 9, 1_000), slow_idle], Key::None),
        Some(1)
    );
    // 1000 × (3 + 1) = 4000 < 5000
    assert_eq!(
        s.pick(&[load(1, 1, 3, 1_000), slow_idle], Key::None),
        Some(0)
    );
    // weight divides: 1000 × 10 / 4 = 2500 < 5000
    assert_eq!(
        s.pick(&[load(1, 4, 9, 1_000), slow_idle], Key::None),
        Some(0)
    );
}

#[test]
fn least_response_time_treats_unknown_as_the_mean() {
    let mut s = Selector::new(Method::LeastResponseTime, 1);
    let (a, b) = (load(1, 1, 1, 1_000), load(2, 1, 1, 3_000));
    // new server, mean 2000: with 2 active its score 6000 loses to a's 2000
    assert_eq!(s.pick(&[a, b, load(3, 1, 2, 0)], Key::None), Some(0));
    // idle, it scores 2000 like a: a tie, sometimes won by each
    let c = counts(&mut s, &[a, b, load(3, 1, 0, 0)], Key::None, 200);
    assert_eq!(c[1], 0);
    assert!(c[0] > 0 && c[2] > 0, "{c:?}");
    // nothing known: least connection on (active + 1) / weight
    let unknown = [load(1, 1, 0, 0), load(2, 1, 1, 0)];
    assert_eq!(s.pick(&unknown, Key::None), Some(0));
}

#[test]
fn hash_methods_without_a_key_round_robin() {
    for m in Method::ALL.into_iter().filter(|m| m.hashes()) {
        let mut s = Selector::new(m, 4);
        let cs = weighted(&[1, 2]);
        assert_eq!(counts(&mut s, &cs, Key::None, 30), [10, 20]);
    }
}

#[test]
fn ipv4_mapped_addresses_hash_like_ipv4() {
    let mut s = Selector::new(Method::SourceIpHash, 0);
    let cs = weighted(&[1; 16]);
    for last in 0..=255u8 {
        let v4 = Ipv4Addr::new(192, 0, 2, last);
        let a = s.pick(&cs, Key::Ip(IpAddr::V4(v4)));
        let b = s.pick(&cs, Key::Ip(IpAddr::V6(v4.to_ipv6_mapped())));
        assert_eq!(a, b);
    }
}

#[test]
fn hashing_is_seed_independent_and_pinned() {
    let cs = weighted(&[1, 1, 1, 1, 1, 1, 1, 1]);
    let picks = |seed| {
        let mut s = Selector::new(Method::UrlHash, seed);
        (0..16u64)
            .map(|k| s.pick(&cs, Key::Url(&url_key(k))).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(picks(1), picks(2));
    // pinned: a change here moves every client of every deployment on upgrade
    let mut s = Selector::new(Method::SourceIpHash, 0);
    let ip = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    let pinned = (picks(3), s.pick(&cs, Key::Ip(ip)));
    assert_eq!(
        pinned,
        (
            vec![3, 2, 5, 7, 5, 0, 0, 6, 3, 3, 7, 5, 4, 5, 3, 0],
            Some(1)
        )
    );
}

#[test]
fn header_and_cookie_values_hash_as_their_bytes() {
    let cs = weighted(&[1, 1, 1, 1, 1, 1, 1, 1]);
    let mut url = Selector::new(Method::UrlHash, 0);
    for m in [Method::HeaderHash, Method::CookieHash] {
        let mut s = Selector::new(m, 5);
        for k in 0..64u64 {
            let v = url_key(k);
            // The same value lands on the same server every time, and where the same bytes
            // as a URL would (one pinned hash for every key kind).
            let first = s.pick(&cs, Key::Value(&v));
            assert_eq!(s.pick(&cs, Key::Value(&v)), first, "{m}");
            assert_eq!(url.pick(&cs, Key::Url(&v)), first, "{m}");
        }
    }
}

#[test]
fn rendezvous_shares_follow_weights() {
    let cs = weighted(&[1, 2, 3, 4]);
    let mut s = Selector::new(Method::UrlHash, 0);
    let n = 100_000u64;
    let mut c = [0u64; 4];
    for k in 0..n {
        c[s.pick(&cs, Key::Url(&url_key(k))).unwrap()] += 1;
    }
    for (i, got) in c.iter().enumerate() {
        let want = n as f64 * (i + 1) as f64 / 10.0;
        // binomial sd is at most 158 here; allow 6 sd
        assert!((*got as f64 - want).abs() < 950.0, "{c:?}");
    }
}

/// Candidates with unique ids and arbitrary load.
fn candidates(max: usize) -> impl Strategy<Value = Vec<Candidate>> {
    prop::collection::vec((0u32..20, 0u32..50, 0u64..20_000), 1..max).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (weight, active, rt))| Candidate {
                id: i as u32 * 7 + 3,
                weight,
                active,
                response_time_us: rt,
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn weighted_round_robin_gives_exact_shares_per_cycle(
        weights in prop::collection::vec(0u32..20, 1..10),
        seed: u64,
        cycles in 1u64..4,
    ) {
        let cs = weighted(&weights);
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let (cycle, want): (u64, Vec<u64>) = if total == 0 {
            (weights.len() as u64, vec![cycles; weights.len()])
        } else {
            (total, weights.iter().map(|&w| u64::from(w) * cycles).collect())
        };
        let mut s = Selector::new(Method::RoundRobin, seed);
        prop_assert_eq!(counts(&mut s, &cs, Key::None, (cycle * cycles) as usize), want);
    }

    #[test]
    fn least_connection_never_picks_a_more_loaded_candidate(cs in candidates(12), seed: u64) {
        let mut s = Selector::new(Method::LeastConnection, seed);
        let all_zero = cs.iter().all(|c| c.weight == 0);
        let p = &cs[s.pick(&cs, Key::None).unwrap()];
        let wp = weight(p, all_zero);
        prop_assert!(wp > 0);
        for q in &cs {
            let wq = weight(q, all_zero);
            if wq > 0 {
                // p.active / wp <= q.active / wq
                prop_assert!(u64::from(p.active) * wq <= u64::from(q.active) * wp, "{:?} over {:?}", p, q);
            }
        }
    }

    #[test]
    fn least_response_time_never_picks_a_worse_score(cs in candidates(12), seed: u64) {
        let mut s = Selector::new(Method::LeastResponseTime, seed);
        let all_zero = cs.iter().all(|c| c.weight == 0);
        let unknown = mean_response_time(&cs, all_zero) as f64;
        let score = |c: &Candidate| {
            let rt = if c.response_time_us == 0 { unknown } else { c.response_time_us as f64 };
            rt * (f64::from(c.active) + 1.0) / weight(c, all_zero) as f64
        };
        let p = &cs[s.pick(&cs, Key::None).unwrap()];
        prop_assert!(weight(p, all_zero) > 0);
        for q in cs.iter().filter(|q| weight(q, all_zero) > 0) {
            prop_assert!(score(p) <= score(q) * (1.0 + 1e-12), "{:?} over {:?}", p, q);
        }
    }

    #[test]
    fn same_key_same_server(cs in candidates(12), ip: [u8; 4], url: Vec<u8>, a: u64, b: u64) {
        let ip = Key::Ip(IpAddr::from(ip));
        let mut x = Selector::new(Method::SourceIpHash, a);
        let mut y = Selector::new(Method::SourceIpHash, b);
        let first = x.pick(&cs, ip);
        prop_assert_eq!(x.pick(&cs, ip), first);
        prop_assert_eq!(y.pick(&cs, ip), first);
        let url = Key::Url(&url);
        let mut x = Selector::new(Method::UrlHash, a);
        let first = x.pick(&cs, url);
        prop_assert_eq!(x.pick(&cs, url), first);
        // the slice order does not matter, only ids and weights
        let mut rev = cs.clone();
        rev.reverse();
        let i = x.pick(&rev, url).unwrap();
        prop_assert_eq!(rev[i].id, cs[first.unwrap()].id);
    }

    #[test]
    fn removing_a_server_moves_only_its_keys(
        weights in prop::collection::vec(1u32..10, 2..12),
        removed in any::<prop::sample::Index>(),
        salt: u64,
    ) {
        let cs = weighted(&weights);
        let r = removed.index(cs.len());
        let mut rest = cs.clone();
        rest.remove(r);
        let mut s = Selector::new(Method::UrlHash, 0);
        let keys = 2_000u64;
        let mut moved = 0u64;
        for k in 0..keys {
            let key = url_key(k ^ salt.rotate_left(17));
            let before = cs[s.pick(&cs, Key::Url(&key)).unwrap()].id;
            let after = rest[s.pick(&rest, Key::Url(&key)).unwrap()].id;
            if before == cs[r].id {
                moved += 1;
            } else {
                prop_assert_eq!(before, after);
            }
        }
        // the removed server held about w_r / Σw of the keys (6 binomial sd)
        let p = f64::from(weights[r]) / weights.iter().map(|&w| f64::from(w)).sum::<f64>();
        let mean = keys as f64 * p;
        let sd = (mean * (1.0 - p)).sqrt();
        prop_assert!((moved as f64 - mean).abs() <= 6.0 * sd + 2.0, "moved {} of {}, expected {}", moved, keys, mean);
    }

    #[test]
    fn picks_are_deterministic_for_a_seed(
        sets in prop::collection::vec(candidates(8), 1..6),
        seed: u64,
    ) {
        for m in Method::ALL {
            let run = || {
                let mut s = Selector::new(m, seed);
                let mut out = Vec::new();
                for (j, cs) in sets.iter().enumerate() {
                    for k in 0..20u64 {
                        let key = url_key(k * 31 + j as u64);
                        let key = if k % 3 == 0 { Key::None } else { Key::Url(&key) };
                        out.push(s.pick(cs, key));
                    }
                }
                out
            };
            prop_assert_eq!(run(), run());
        }
    }

    #[test]
    fn changing_candidates_always_yields_a_pickable_index(
        sets in prop::collection::vec(candidates(10), 1..20),
        seed: u64,
    ) {
        for m in Method::ALL {
            let mut s = Selector::new(m, seed);
            for cs in &sets {
                let all_zero = cs.iter().all(|c| c.weight == 0);
                let i = s.pick(cs, Key::None).unwrap();
                prop_assert!(weight(&cs[i], all_zero) > 0);
            }
        }
    }
}
