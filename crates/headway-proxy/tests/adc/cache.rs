//! The integrated cache end to end: `headway origin`'s `/dynamic` page (its body says which
//! request of the origin's it was, `n`, and when it was made) through the proxy.

use std::time::Duration;

use headway_proxy::cache::Purge;

use super::*;

/// A proxy with `cache` (TOML after `[cache]`) in front of one origin.
async fn cached(cache: &str) -> (Origin, Proxy, SocketAddr) {
    let o = Origin::start("a", Duration::ZERO).await;
    let text = format!(
        "{}{}[cache]\n{cache}\n",
        group("web", "", &[(o.addr, "")]),
        vs("web", "")
    );
    let (p, addr) = proxy(&text).await;
    (o, p, addr)
}

/// The `n` and `time_ms` of a `/dynamic` body.
fn page(a: &Answer) -> (u64, u64) {
    let v: serde_json::Value = serde_json::from_slice(&a.body)
        .unwrap_or_else(|e| panic!("not a /dynamic body ({e}): {:?}", a.text()));
    (v["n"].as_u64().unwrap(), v["time_ms"].as_u64().unwrap())
}

/// `/dynamic` requests the origin has answered so far (asked directly, which counts one more).
async fn origin_count(c: &HttpClient, o: &Origin) -> u64 {
    page(&get(c, o.addr, "/dynamic").await).0 - 1
}

fn group_stats(p: &Proxy, name: &str) -> headway_proxy::cache::CacheGroupSnapshot {
    p.snapshot()
        .cache
        .expect("a cache")
        .groups
        .into_iter()
        .find(|g| g.name == name)
        .unwrap()
}

const ONE_GROUP: &str = "default_group = \"pages\"\n[[cache.group]]\nname = \"pages\"\n";

#[tokio::test]
async fn fresh_hits_304s_head_and_purges() {
    let (o, p, addr) = cached(ONE_GROUP).await;
    let c = client();
    let url = "/dynamic?max_age=60&etag=v1";
    let first = get(&c, addr, url).await;
    assert_eq!(first.status, 200);
    let second = get(&c, addr, url).await;
    assert_eq!(
        page(&first).0,
        page(&second).0,
        "the second came from the cache"
    );
    assert_eq!(second.body, first.body);
    assert!(second.headers.contains_key("age"));
    assert_eq!(second.headers["via"], "1.1 headway");
    // The client's own validator: 304 from the cache, with the ETag and no body.
    let nm = send(&c, "GET", addr, url, &[("if-none-match", "\"v1\"")], b"")
        .await
        .unwrap();
    assert_eq!(nm.status, 304);
    assert_eq!(nm.headers["etag"], "\"v1\"");
    assert!(nm.body.is_empty());
    // HEAD from the GET object: its length, no body.
    let head = send(&c, "HEAD", addr, url, &[], b"").await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(
        head.headers["content-length"].to_str().unwrap(),
        first.body.len().to_string()
    );
    assert!(head.body.is_empty());
    assert_eq!(origin_count(&c, &o).await, 1);
    let g = group_stats(&p, "pages");
    assert_eq!((g.misses, g.hits, g.not_modified, g.stores), (1, 3, 1, 1));
    // A purge takes effect at once.
    let r = p
        .purge_cache(&Purge::Url {
            host: None,
            target: url.into(),
        })
        .unwrap();
    assert_eq!(r.objects, 1);
    let after = get(&c, addr, url).await;
    assert_ne!(page(&after).0, page(&first).0);
    assert_eq!(group_stats(&p, "pages").purged, 1);
}

#[tokio::test]
async fn a_stale_object_is_revalidated_with_the_origin_and_its_304_refreshes_it() {
    let (o, p, addr) = cached(ONE_GROUP).await;
    let c = client();
    // max-age=0: stored, stale at once; every use asks the origin with If-None-Match.
    let url = "/dynamic?max_age=0&etag=v7";
    let first = get(&c, addr, url).await;
    for _ in 0..3 {
        let again = get(&c, addr, url).await;
        assert_eq!(again.status, 200);
        assert_eq!(again.body, first.body, "answered with the stored body");
    }
    // The origin saw the first request and three revalidations (answered 304).
    assert_eq!(origin_count(&c, &o).await, 4);
    let g = group_stats(&p, "pages");
    assert_eq!((g.revalidations, g.revalidated), (3, 3));
}

#[tokio::test]
async fn set_cookie_and_authorization_are_not_cached_unless_the_group_allows_it() {
    let (_o, _p, addr) = cached(ONE_GROUP).await;
    let c = client();
    let cookie = "/dynamic?max_age=60&set_cookie=1";
    let a = get(&c, addr, cookie).await;
    let b = get(&c, addr, cookie).await;
    assert_ne!(
        page(&a).0,
        page(&b).0,
        "Set-Cookie responses are not stored"
    );
    assert!(b.headers.contains_key("set-cookie"));
    let auth = [("authorization", "Bearer secret")];
    let url = "/dynamic?max_age=60";
    let a = send(&c, "GET", addr, url, &auth, b"").await.unwrap();
    let b = send(&c, "GET", addr, url, &auth, b"").await.unwrap();
    assert_ne!(
        page(&a).0,
        page(&b).0,
        "Authorization requests are not served from the cache"
    );

    let (_o, _p, addr) = cached(&format!(
        "{ONE_GROUP}strip_cookies = true\nallow_authorization = true\n"
    ))
    .await;
    let a = get(&c, addr, cookie).await;
    let b = get(&c, addr, cookie).await;
    assert_eq!(page(&a).0, page(&b).0, "stored without its cookie");
    assert!(
        a.headers.contains_key("set-cookie"),
        "the fetching client gets its cookie"
    );
    assert!(!b.headers.contains_key("set-cookie"), "nobody else gets it");
    let a = send(&c, "GET", addr, url, &auth, b"").await.unwrap();
    let b = send(&c, "GET", addr, url, &auth, b"").await.unwrap();
    assert_eq!(page(&a).0, page(&b).0);
}

#[tokio::test]
async fn a_thousand_concurrent_requests_for_a_cold_key_make_one_origin_fetch() {
    let (o, p, addr) = cached(ONE_GROUP).await;
    let c = client();
    let url = "/dynamic?max_age=60&latency=300ms&k=cold";
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            send(&c, "GET", addr, url, &[], b"").await
        }));
    }
    let mut ns = std::collections::BTreeSet::new();
    for t in tasks {
        let a = t.await.unwrap().expect("every request is answered");
        assert_eq!(a.status, 200);
        ns.insert(page(&a).0);
    }
    assert_eq!(ns.len(), 1, "every client got the same page: {ns:?}");
    assert_eq!(origin_count(&c, &o).await, 1, "exactly one origin fetch");
    let g = group_stats(&p, "pages");
    assert_eq!(g.misses, 1);
    assert_eq!(g.coalesced + g.hits, 999);
}

#[tokio::test]
async fn a_flash_cache_keeps_a_dynamic_page_to_one_origin_request_per_second() {
    let (o, p, addr) = cached(
        "[[cache.group]]\nname = \"live\"\nforce_expiry = \"1s\"\n\
         [[cache.policy]]\npath = \"/dynamic\"\ngroup = \"live\"\n",
    )
    .await;
    let c = client();
    let start = SystemClock::now();
    let run = Duration::from_secs(10);
    let served = Arc::new(AtomicU64::new(0));
    let oldest = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let c = c.clone();
        let served = served.clone();
        let oldest = oldest.clone();
        tasks.push(tokio::spawn(async move {
            while SystemClock::now().saturating_duration_since(start) < run {
                let a = get(&c, addr, "/dynamic?latency=5ms").await;
                assert_eq!(a.status, 200);
                let now_ms = headway_core::clock::wall_clock()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as u64;
                let age = now_ms.saturating_sub(page(&a).1);
                oldest.fetch_max(age, Ordering::Relaxed);
                // Answers straight from the origin (the fills) carry no Age.
                let header_age: u64 = a
                    .headers
                    .get("age")
                    .map_or(0, |v| v.to_str().unwrap().parse().unwrap());
                assert!(header_age <= 1, "Age {header_age} past the flash time");
                served.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let fetched = origin_count(&c, &o).await;
    let served = served.load(Ordering::Relaxed);
    let oldest = oldest.load(Ordering::Relaxed);
    eprintln!(
        "flash cache: {served} requests in 10 s, {fetched} origin fetches, oldest page {oldest} ms"
    );
    // One fetch per second of load (the first and the last second may each add one).
    assert!((9..=12).contains(&fetched), "{fetched} origin fetches");
    assert!(served > 100 * fetched, "{served} served");
    // No page older than the flash time, beyond the fetch itself and the clients' scheduling.
    assert!(oldest < 1_500, "a page {oldest} ms old");
    let g = group_stats(&p, "live");
    assert_eq!(g.misses, fetched);
}

#[tokio::test]
async fn memory_stays_within_budget_while_more_than_it_flows_through() {
    let (_o, p, addr) = cached(
        "memory_limit = \"1MiB\"\ndefault_group = \"small\"\n[[cache.group]]\nname = \
         \"small\"\nmax_object_size = \"128KiB\"\n",
    )
    .await;
    let c = client();
    let limit = 1 << 20;
    let mut max = 0;
    // 120 objects of 20–120 KiB: about 8 MiB through a 1 MiB cache, and one too large to store.
    for i in 0..120u64 {
        let size = 20 + (i * 37) % 100;
        let a = get(
            &c,
            addr,
            &format!("/dynamic?max_age=600&size={size}KiB&k={i}"),
        )
        .await;
        assert_eq!(a.body.len() as u64, size << 10);
        let s = p.snapshot().cache.unwrap();
        assert!(
            s.stored_bytes <= limit,
            "{} > {limit} after {i}",
            s.stored_bytes
        );
        max = max.max(s.stored_bytes);
    }
    let big = get(&c, addr, "/dynamic?max_age=600&size=200KiB").await;
    assert_eq!(
        big.body.len(),
        200 << 10,
        "a large body streams through whole"
    );
    let g = group_stats(&p, "small");
    assert!(g.evictions > 50, "{} evictions", g.evictions);
    assert!(max > limit / 2, "the cache was used: {max}");
    assert!(g.stored_bytes <= limit);
    assert_eq!(g.not_stored, 1, "the large object was not stored");
}

#[tokio::test]
async fn stale_while_revalidate_answers_at_once_and_refreshes_in_the_background() {
    let (o, p, addr) = cached(ONE_GROUP).await;
    let c = client();
    let url = "/dynamic?max_age=1&swr=30";
    let first = get(&c, addr, url).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // Stale, within its stale-while-revalidate window: the stored page at once...
    let stale = get(&c, addr, url).await;
    assert_eq!(page(&stale).0, page(&first).0, "the stale page is served");
    // ...while the cache fetches a new one in the background.
    let deadline = SystemClock::now() + Duration::from_secs(5);
    loop {
        let now = get(&c, addr, url).await;
        if page(&now).0 != page(&first).0 {
            break;
        }
        assert!(SystemClock::now() < deadline, "never refreshed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(origin_count(&c, &o).await, 2, "one background fetch");
    assert!(group_stats(&p, "pages").stale >= 1);
}

#[tokio::test]
async fn stale_if_error_answers_with_the_stored_page_when_the_origin_is_gone() {
    let (mut o, _p, addr) = cached(ONE_GROUP).await;
    let c = client();
    let url = "/dynamic?max_age=1&sie=60";
    let first = get(&c, addr, url).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    o.kill();
    let a = get(&c, addr, url).await;
    assert_eq!(a.status, 200, "{:?}", a.text());
    assert_eq!(a.body, first.body, "the stale page, not an error");
    // Without stale-if-error the client gets the error.
    let b = get(&c, addr, "/dynamic?max_age=60").await;
    assert_eq!(b.status, 503);
}

#[tokio::test]
async fn one_stored_object_is_compressed_per_client_and_vary_keys_variants() {
    let o = Origin::start("a", Duration::ZERO).await;
    let text = format!(
        "{}{}[cache]\n{ONE_GROUP}",
        group("web", "", &[(o.addr, "")]),
        vs(
            "web",
            "[virtual_server.compression]\nmin_size = \"0\"\ntypes = [\"application/json\"]\n\
             cpu_bypass = \"off\"\n"
        )
    );
    let (p, addr) = proxy(&text).await;
    let c = client();
    let url = "/dynamic?max_age=60&size=4KiB";
    let gz = [("accept-encoding", "gzip")];
    let zipped = send(&c, "GET", addr, url, &gz, b"").await.unwrap();
    let plain = get(&c, addr, url).await;
    let zst = send(&c, "GET", addr, url, &[("accept-encoding", "zstd")], b"")
        .await
        .unwrap();
    assert_eq!(zipped.headers["content-encoding"], "gzip");
    assert_eq!(zst.headers["content-encoding"], "zstd");
    assert!(!plain.headers.contains_key("content-encoding"));
    for a in [&zipped, &plain, &zst] {
        let vary = a.headers["vary"].to_str().unwrap();
        assert!(
            vary.eq_ignore_ascii_case("accept-encoding"),
            "{:?}",
            a.headers
        );
    }
    // All three are the one stored page.
    assert_eq!(super::compression::decode("gzip", &zipped.body), plain.body);
    assert_eq!(super::compression::decode("zstd", &zst.body), plain.body);
    assert_eq!(origin_count(&c, &o).await, 1);
    // A server that varies by Accept-Encoding itself gets one stored variant per value.
    let url = "/dynamic?max_age=60&vary=accept-encoding";
    for _ in 0..2 {
        send(&c, "GET", addr, url, &gz, b"").await.unwrap();
        get(&c, addr, url).await;
    }
    // (The first count asked the origin once itself.)
    assert_eq!(
        origin_count(&c, &o).await,
        1 + 1 + 2,
        "two variants, each fetched once"
    );
    let g = group_stats(&p, "pages");
    assert_eq!(g.stores, 3);
}
