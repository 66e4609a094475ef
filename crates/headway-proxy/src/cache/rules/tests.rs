use std::time::Duration;

use super::*;

fn group(extra: &str) -> Group {
    let text = format!(
        "[[server_group]]\nname = \"web\"\n[[server_group.server]]\naddress = \"127.0.0.1:1\"\n\
         [[virtual_server]]\nname = \"f\"\nkind = \"http\"\nlisten = \"127.0.0.1:2\"\ngroup = \
         \"web\"\n[cache]\n[[cache.group]]\nname = \"g\"\n{extra}\n"
    );
    headway_config::Config::parse(&text, "t.toml")
        .unwrap()
        .adc
        .cache
        .unwrap()
        .groups
        .remove(0)
}

fn request(headers: &[(&str, &str)]) -> Parts {
    let mut b = http::Request::get("/doc?x=1").header("host", "www.example");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

/// A field map from pairs.
pub(crate) fn fields(list: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in list {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn pending(g: &Group, req: &Parts, resp: &[(&str, &str)]) -> Result<Pending, NotStored> {
    let cx = Context {
        group: g,
        via: None,
        host: b"www.example".as_slice().into(),
        target: "/doc?x=1".into(),
        request: req,
    };
    Pending::new(
        &cx,
        StatusCode::OK,
        &fields(resp),
        headway_core::SystemClock::now(),
        headway_core::clock::wall_clock(),
    )
}

#[test]
fn freshness_comes_from_the_crate_and_the_group_only_changes_what_it_sees() {
    let g = group("");
    let req = request(&[]);
    let fresh = |p: Pending| {
        let o = p.finish(Bytes::from_static(b"x"));
        o.fresh_until.saturating_duration_since(o.stored_at)
    };
    let d = fresh(pending(&g, &req, &[("cache-control", "max-age=60")]).unwrap());
    assert!(
        d > Duration::from_secs(58) && d <= Duration::from_secs(60),
        "{d:?}"
    );
    // s-maxage wins for a shared cache.
    let d = fresh(pending(&g, &req, &[("cache-control", "max-age=60, s-maxage=5")]).unwrap());
    assert!(d <= Duration::from_secs(5), "{d:?}");
    for no in ["no-store", "private", "private, max-age=60"] {
        assert_eq!(
            pending(&g, &req, &[("cache-control", no)]).err(),
            Some(NotStored::Uncacheable),
            "{no}"
        );
    }
    // Authorization: not stored unless the response says it may be (RFC 9111 §3.5).
    let auth = request(&[("authorization", "Basic eDp5")]);
    assert!(pending(&g, &auth, &[("cache-control", "max-age=60")]).is_err());
    assert!(pending(&g, &auth, &[("cache-control", "public, max-age=60")]).is_ok());
    assert!(pending(
        &group("allow_authorization = true"),
        &auth,
        &[("cache-control", "max-age=60")]
    )
    .is_ok());
    // Set-Cookie: only with strip_cookies, and then without the cookie.
    let cookie = [("cache-control", "max-age=60"), ("set-cookie", "s=1")];
    assert_eq!(pending(&g, &req, &cookie).err(), Some(NotStored::SetCookie));
    let o = pending(&group("strip_cookies = true"), &req, &cookie)
        .unwrap()
        .finish(Bytes::new());
    assert!(!o.headers.contains_key(header::SET_COOKIE));
    // Too large by Content-Length; Vary: * never.
    let big = [
        ("cache-control", "max-age=60"),
        ("content-length", "2000000"),
    ];
    assert_eq!(pending(&g, &req, &big).err(), Some(NotStored::TooLarge));
    assert!(pending(&g, &req, &[("cache-control", "max-age=60"), ("vary", "*")]).is_err());
}

#[test]
fn heuristics_default_expiry_and_the_flash_cache() {
    let req = request(&[]);
    let ttl = |g: &Group, resp: &[(&str, &str)]| {
        pending(g, &req, resp).map(|p| {
            let o = p.finish(Bytes::new());
            o.fresh_until.saturating_duration_since(o.stored_at)
        })
    };
    let date = httpdate::fmt_http_date(headway_core::clock::wall_clock());
    let lm =
        httpdate::fmt_http_date(headway_core::clock::wall_clock() - Duration::from_secs(100_000));
    // 10 % of the time since Last-Modified, or what the group says.
    let d = ttl(&group(""), &[("date", &date), ("last-modified", &lm)]).unwrap();
    assert!((9_990..=10_000).contains(&d.as_secs()), "{d:?}");
    let d = ttl(
        &group("heuristic_expiry = 50"),
        &[("date", &date), ("last-modified", &lm)],
    )
    .unwrap();
    assert!((49_990..=50_000).contains(&d.as_secs()), "{d:?}");
    // Nothing at all: stored stale (it can still be revalidated), or the group's default.
    assert_eq!(
        ttl(&group(""), &[("etag", "\"a\"")]).unwrap(),
        Duration::ZERO
    );
    let d = ttl(&group("default_expiry = \"1h\""), &[("etag", "\"a\"")]).unwrap();
    assert!(d > Duration::from_secs(3590), "{d:?}");
    // The flash cache stores what the headers forbid, for exactly its time.
    let flash = group("force_expiry = \"1s\"");
    let d = ttl(&flash, &[("cache-control", "private, no-cache, no-store")]).unwrap();
    assert!(
        d > Duration::from_millis(900) && d <= Duration::from_secs(1),
        "{d:?}"
    );
    // …and the clients still get the server's fields.
    let o = pending(&flash, &req, &[("cache-control", "private, no-cache")])
        .unwrap()
        .finish(Bytes::new());
    assert_eq!(o.headers[header::CACHE_CONTROL], "private, no-cache");
}

#[test]
fn stale_windows_follow_rfc_5861_unless_revalidation_is_required() {
    let req = request(&[]);
    let g = group("stale_if_error = \"1m\"");
    let o = pending(
        &g,
        &req,
        &[("cache-control", "max-age=10, stale-while-revalidate=30")],
    )
    .unwrap()
    .finish(Bytes::new());
    assert_eq!(o.swr_until - o.fresh_until, Duration::from_secs(30));
    assert_eq!(o.sie_until - o.fresh_until, Duration::from_secs(60));
    let o = pending(
        &g,
        &req,
        &[(
            "cache-control",
            "max-age=10, must-revalidate, stale-if-error=9",
        )],
    )
    .unwrap()
    .finish(Bytes::new());
    assert_eq!(o.sie_until, o.fresh_until);
}

#[test]
fn conditional_requests_are_answered_from_the_object() {
    let g = group("");
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    let o = pending(
        &g,
        &request(&[]),
        &[
            ("cache-control", "max-age=60"),
            ("etag", "\"v1\""),
            ("last-modified", lm),
        ],
    )
    .unwrap()
    .finish(Bytes::from_static(b"body"));
    let pre = |h: &[(&str, &str)]| precondition(&fields(h), &o);
    assert_eq!(pre(&[]), Precondition::None);
    assert_eq!(
        pre(&[("if-none-match", "\"v1\"")]),
        Precondition::NotModified
    );
    assert_eq!(
        pre(&[("if-none-match", "W/\"v1\"")]),
        Precondition::NotModified
    );
    assert_eq!(
        pre(&[("if-none-match", "\"v0\", \"v1\"")]),
        Precondition::NotModified
    );
    assert_eq!(pre(&[("if-none-match", "*")]), Precondition::NotModified);
    assert_eq!(pre(&[("if-none-match", "\"v2\"")]), Precondition::None);
    // If-Modified-Since only without If-None-Match.
    assert_eq!(pre(&[("if-modified-since", lm)]), Precondition::NotModified);
    assert_eq!(
        pre(&[("if-modified-since", "Sun, 31 Dec 2023 00:00:00 GMT")]),
        Precondition::None
    );
    assert_eq!(
        pre(&[("if-none-match", "\"v2\""), ("if-modified-since", lm)]),
        Precondition::None
    );
    assert_eq!(pre(&[("range", "bytes=0-1")]), Precondition::Server);
    assert_eq!(pre(&[("if-match", "\"v1\"")]), Precondition::Server);
    // The 304's fields.
    assert_eq!(o.not_modified[header::ETAG], "\"v1\"");
    assert!(!o.not_modified.contains_key(header::CONTENT_LENGTH));
    assert_eq!(o.headers[header::CONTENT_LENGTH], "4");
}

#[test]
fn a_revalidation_carries_the_stored_validators_and_a_304_refreshes() {
    let g = group("");
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    let req = request(&[("if-none-match", "\"client\"")]);
    let cx = Context {
        group: &g,
        via: None,
        host: b"www.example".as_slice().into(),
        target: "/doc?x=1".into(),
        request: &req,
    };
    let now = headway_core::SystemClock::now();
    let wall = headway_core::clock::wall_clock();
    let o = Pending::new(
        &cx,
        StatusCode::OK,
        &fields(&[
            ("cache-control", "max-age=0"),
            ("etag", "\"v1\""),
            ("last-modified", lm),
        ]),
        now,
        wall,
    )
    .unwrap()
    .finish(Bytes::from_static(b"body"));
    assert!(o.fresh_until <= now);
    let mut sent = request(&[("if-none-match", "\"client\"")]);
    revalidate(&mut sent, &o, &g, wall);
    assert_eq!(sent.headers[header::IF_NONE_MATCH], "\"v1\"");
    assert_eq!(sent.headers[header::IF_MODIFIED_SINCE], lm);
    let fresh = Pending::refresh(
        &cx,
        &o,
        &req,
        &fields(&[("cache-control", "max-age=60"), ("etag", "\"v1\"")]),
        now,
        wall,
    )
    .unwrap();
    assert!(fresh.fresh_until > now + Duration::from_secs(50));
    assert_eq!(fresh.body, o.body);
    assert_eq!(fresh.headers[header::CACHE_CONTROL], "max-age=60");
    // A 304 for another representation does not refresh this one.
    assert!(Pending::refresh(&cx, &o, &req, &fields(&[("etag", "\"v2\"")]), now, wall).is_none());
}
