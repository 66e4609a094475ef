//! The cache's request path without a network: lookups, fills through a tee, hits, purges.

use std::time::Duration;

use super::rules::tests::fields;
use super::*;

fn cache(extra: &str) -> Arc<Cache> {
    let text = format!(
        "[[server_group]]\nname = \"web\"\n[[server_group.server]]\naddress = \"127.0.0.1:1\"\n\
         [[virtual_server]]\nname = \"f\"\nkind = \"http\"\nlisten = \"127.0.0.1:2\"\ngroup = \
         \"web\"\n[cache]\ndefault_group = \"g\"\n[[cache.group]]\nname = \"g\"\n{extra}\n"
    );
    let cfg = headway_config::Config::parse(&text, "t.toml").unwrap();
    Cache::new(cfg.adc.cache.as_ref().unwrap())
}

fn request(method: &str, target: &str, headers: &[(&str, &str)]) -> Parts {
    let mut b = http::Request::builder()
        .method(method)
        .uri(target)
        .header("host", "www.example");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

/// A lookup that must go to the servers; the server answers `status`, `headers`, `body`.
async fn fill(
    c: &Arc<Cache>,
    parts: &mut Parts,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
) {
    let Lookup::Fetch(f) = c.lookup(parts, false, false).await else {
        panic!("expected a fetch")
    };
    f.prepare(parts);
    let mut h = fields(headers);
    match f.on_response(StatusCode::from_u16(status).unwrap(), &mut h) {
        Reply::Pass(Some(mut tee)) => {
            for chunk in body.chunks(3) {
                tee.data(chunk);
            }
            tee.end(true);
        }
        Reply::Pass(None) => {}
        Reply::Serve(_) => panic!("nothing to serve"),
    }
}

async fn body_of(r: Response<RespBody>) -> Bytes {
    use http_body_util::BodyExt as _;
    r.into_body().collect().await.unwrap().to_bytes()
}

#[tokio::test]
async fn a_fill_is_then_served_with_age_and_via_and_the_body_is_shared() {
    let c = cache("");
    let mut p = request("GET", "/a?x=1", &[]);
    fill(
        &c,
        &mut p,
        200,
        &[("cache-control", "max-age=60"), ("etag", "\"e\"")],
        b"hello world",
    )
    .await;
    let Lookup::Respond(r) = c
        .lookup(&mut request("GET", "/a?x=1", &[]), false, false)
        .await
    else {
        panic!("expected a hit")
    };
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()[header::AGE], "0");
    assert_eq!(r.headers()[header::VIA], "1.1 headway");
    assert_eq!(r.headers()[header::CONTENT_LENGTH], "11");
    let b1 = body_of(r).await;
    assert_eq!(&b1[..], b"hello world");
    let Lookup::Respond(r) = c
        .lookup(&mut request("GET", "/a?x=1", &[]), false, false)
        .await
    else {
        panic!()
    };
    let b2 = body_of(r).await;
    assert_eq!(b1.as_ptr(), b2.as_ptr(), "hits share the stored bytes");
    // Another query string, host or scheme is another object.
    assert!(matches!(
        c.lookup(&mut request("GET", "/a?x=2", &[]), false, false)
            .await,
        Lookup::Fetch(_)
    ));
    assert!(matches!(
        c.lookup(&mut request("GET", "/a?x=1", &[]), true, false)
            .await,
        Lookup::Fetch(_)
    ));
    // 304 to a matching condition, HEAD from the GET object.
    let Lookup::Respond(r) = c
        .lookup(
            &mut request("GET", "/a?x=1", &[("if-none-match", "\"e\"")]),
            false,
            false,
        )
        .await
    else {
        panic!()
    };
    assert_eq!(r.status(), 304);
    assert_eq!(r.headers()[header::ETAG], "\"e\"");
    assert!(body_of(r).await.is_empty());
    let Lookup::Respond(r) = c
        .lookup(&mut request("HEAD", "/a?x=1", &[]), false, false)
        .await
    else {
        panic!()
    };
    assert_eq!(r.headers()[header::CONTENT_LENGTH], "11");
    assert!(body_of(r).await.is_empty());
    let s = c.snapshot();
    assert_eq!(
        (
            s.groups[0].hits,
            s.groups[0].not_modified,
            s.groups[0].stores
        ),
        (4, 1, 1)
    );
    assert_eq!(s.groups[0].bytes_served, 22);
    assert!(s.stored_bytes > 11);
}

#[tokio::test]
async fn what_may_not_be_stored_is_not() {
    let c = cache("max_object_size = \"16B\"");
    for (i, (headers, body)) in [
        (vec![("cache-control", "no-store")], &b"x"[..]),
        (
            vec![("cache-control", "max-age=60"), ("set-cookie", "s=1")],
            b"x",
        ),
        (vec![("cache-control", "max-age=60")], b"seventeen bytes!!"),
        (vec![("cache-control", "private, max-age=60")], b"x"),
    ]
    .into_iter()
    .enumerate()
    {
        let t = format!("/n/{i}");
        fill(&c, &mut request("GET", &t, &[]), 200, &headers, body).await;
        assert!(
            matches!(
                c.lookup(&mut request("GET", &t, &[]), false, false).await,
                Lookup::Fetch(_)
            ),
            "{headers:?}"
        );
    }
    // Authorization and POST are not the cache's business.
    assert!(matches!(
        c.lookup(
            &mut request("GET", "/n/0", &[("authorization", "Bearer x")]),
            false,
            false
        )
        .await,
        Lookup::Bypass
    ));
    assert!(matches!(
        c.lookup(&mut request("POST", "/n/0", &[]), false, false)
            .await,
        Lookup::Bypass
    ));
    assert!(matches!(
        c.lookup(&mut request("GET", "/n/0", &[]), false, true)
            .await,
        Lookup::Bypass
    ));
    assert_eq!(c.snapshot().groups[0].not_stored, 4);
}

#[tokio::test]
async fn variants_are_stored_apart() {
    let c = cache("");
    let vary = [("cache-control", "max-age=60"), ("vary", "Accept-Encoding")];
    let gz = [("accept-encoding", "gzip")];
    fill(
        &c,
        &mut request("GET", "/v", &gz),
        200,
        &[vary[0], vary[1], ("content-encoding", "gzip")],
        b"GZ",
    )
    .await;
    fill(&c, &mut request("GET", "/v", &[]), 200, &vary, b"PLAIN").await;
    for (h, want) in [(&gz[..], &b"GZ"[..]), (&[][..], b"PLAIN")] {
        let Lookup::Respond(r) = c.lookup(&mut request("GET", "/v", h), false, false).await else {
            panic!("{h:?}")
        };
        assert_eq!(&body_of(r).await[..], want);
    }
    assert!(matches!(
        c.lookup(
            &mut request("GET", "/v", &[("accept-encoding", "br")]),
            false,
            false
        )
        .await,
        Lookup::Fetch(_)
    ));
}

#[tokio::test]
async fn a_stale_object_is_revalidated_and_a_304_refreshes_it() {
    let c = cache("");
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    let stored = [
        ("cache-control", "max-age=0"),
        ("etag", "\"v1\""),
        ("last-modified", lm),
    ];
    fill(&c, &mut request("GET", "/r", &[]), 200, &stored, b"body").await;
    let mut p = request("GET", "/r", &[]);
    let Lookup::Fetch(f) = c.lookup(&mut p, false, false).await else {
        panic!("a stale object is revalidated")
    };
    f.prepare(&mut p);
    assert_eq!(p.headers[header::IF_NONE_MATCH], "\"v1\"");
    assert_eq!(p.headers[header::IF_MODIFIED_SINCE], lm);
    let mut h = fields(&[("etag", "\"v1\""), ("cache-control", "max-age=60")]);
    let Reply::Serve(r) = f.on_response(StatusCode::NOT_MODIFIED, &mut h) else {
        panic!("a 304 refreshes")
    };
    assert_eq!(r.status(), 200);
    assert_eq!(&body_of(r).await[..], b"body");
    let Lookup::Respond(r) = c.lookup(&mut request("GET", "/r", &[]), false, false).await else {
        panic!("fresh now")
    };
    assert_eq!(r.headers()[header::CACHE_CONTROL], "max-age=60");
    let g = &c.snapshot().groups[0];
    assert_eq!((g.revalidations, g.revalidated, g.hits), (1, 1, 1));
}

#[tokio::test]
async fn stale_if_error_serves_the_stale_object_when_the_server_fails() {
    let c = cache("stale_if_error = \"1h\"");
    fill(
        &c,
        &mut request("GET", "/e", &[]),
        200,
        &[("cache-control", "max-age=0")],
        b"old",
    )
    .await;
    let mut p = request("GET", "/e", &[]);
    let Lookup::Fetch(f) = c.lookup(&mut p, false, false).await else {
        panic!()
    };
    let Reply::Serve(r) = f.on_response(StatusCode::SERVICE_UNAVAILABLE, &mut HeaderMap::new())
    else {
        panic!("the stale object answers a 503")
    };
    assert_eq!(&body_of(r).await[..], b"old");
    let Lookup::Fetch(f) = c.lookup(&mut request("GET", "/e", &[]), false, false).await else {
        panic!()
    };
    assert!(f.on_error().is_some());
    assert_eq!(c.snapshot().groups[0].stale, 2);
}

#[tokio::test]
async fn the_flash_cache_stores_dynamic_pages_and_misses_coalesce() {
    let c = cache("force_expiry = \"1s\"");
    let mut p = request("GET", "/live", &[]);
    let Lookup::Fetch(f) = c.lookup(&mut p, false, false).await else {
        panic!()
    };
    // 50 concurrent requests for the same page wait for the first one's fetch.
    let mut waiting = Vec::new();
    for _ in 0..50 {
        let c = c.clone();
        waiting.push(tokio::spawn(async move {
            match c
                .lookup(&mut request("GET", "/live", &[]), false, false)
                .await
            {
                Lookup::Respond(r) => body_of(r).await,
                _ => panic!("expected an answer from the fill"),
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut h = fields(&[("cache-control", "private, no-cache")]);
    let Reply::Pass(Some(mut tee)) = f.on_response(StatusCode::OK, &mut h) else {
        panic!("the flash group stores it")
    };
    tee.data(b"live at 12:00:00");
    tee.end(true);
    for w in waiting {
        assert_eq!(&w.await.unwrap()[..], b"live at 12:00:00");
    }
    let g = &c.snapshot().groups[0];
    assert_eq!((g.misses, g.coalesced + g.hits, g.stores), (1, 50, 1));
}

#[tokio::test]
async fn purges_take_effect_at_once_even_on_fills_in_flight() {
    let c = cache("");
    let cc = [("cache-control", "max-age=60")];
    for t in ["/p/a", "/p/b", "/q"] {
        fill(&c, &mut request("GET", t, &[]), 200, &cc, b"x").await;
    }
    let hit = |t: &'static str| {
        let c = c.clone();
        async move {
            matches!(
                c.lookup(&mut request("GET", t, &[]), false, false).await,
                Lookup::Respond(_)
            )
        }
    };
    assert!(hit("/p/a").await && hit("/p/b").await && hit("/q").await);
    let r = c
        .purge(&Purge::Prefix {
            host: Some("WWW.example".into()),
            prefix: "/p/".into(),
        })
        .unwrap();
    assert_eq!(r.objects, 2);
    assert!(!hit("/p/a").await && !hit("/p/b").await && hit("/q").await);
    // A fill that started before a purge does not store.
    let mut p = request("GET", "/q2", &[]);
    let Lookup::Fetch(f) = c.lookup(&mut p, false, false).await else {
        panic!()
    };
    c.purge(&Purge::Url {
        host: None,
        target: "/q".into(),
    })
    .unwrap();
    let Reply::Pass(Some(mut tee)) = f.on_response(StatusCode::OK, &mut fields(&cc)) else {
        panic!()
    };
    tee.data(b"x");
    tee.end(true);
    assert!(!hit("/q").await && !hit("/q2").await);
    assert_eq!(
        c.purge(&Purge::Group("nope".into())),
        Err(PurgeError::NoGroup("nope".into()))
    );
    assert_eq!(c.purge(&Purge::All).unwrap().objects, 0);
}
