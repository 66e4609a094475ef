//! The HTTP rules of the cache: whether and how long a response may be stored and reused
//! (RFC 9111, decided by the `http-cache-semantics` crate, never by rules of our own), the
//! stale-while-revalidate and stale-if-error extensions (RFC 5861, which the crate does not
//! cover), the requests that revalidate a stale object, and the client's conditional requests
//! answered from a stored object (RFC 9110 §13).
//!
//! A content group changes what the crate is shown, never how it decides: `force_expiry`
//! shows it the response with `Cache-Control: s-maxage=N` in place of the server's caching
//! fields; `default_expiry` adds `s-maxage` to a response that has no freshness information at
//! all; `allow_authorization` and `ignore_client_no_cache` hide those request fields.
//!
//! Entry points: [`Pending::new`] when a response head arrives (everything a hit needs is
//! computed here, once), [`Pending::finish`] with the body; [`Pending::refresh`] for a 304
//! from the server; [`precondition`] per hit; [`revalidate`] before a conditional request.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use headway_config::cache::Group;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::StatusCode;
use http_cache_semantics::{AfterResponse, BeforeRequest, CacheOptions, CachePolicy};

use super::store::{self, vary_names, vary_values, Object};

/// Why a response is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotStored {
    /// RFC 9111 does not allow it (status, `no-store`, `private`, `Authorization`, no freshness
    /// and no validator…), or it could never be reused (`Vary: *`).
    #[error("the response may not be stored")]
    Uncacheable,
    /// It sets cookies and the group does not strip them.
    #[error("the response sets cookies")]
    SetCookie,
    /// Its body is larger than the group's `max_object_size`.
    #[error("the response is larger than the group's max_object_size")]
    TooLarge,
    /// The body was cut short, or a purge came while it arrived.
    #[error("the response was cut short or purged while it arrived")]
    Abandoned,
}

/// Where a response is stored and what is added to it.
pub struct Context<'a> {
    /// The group's rules.
    pub group: &'a Group,
    /// The `Via` value, if any.
    pub via: Option<&'a HeaderValue>,
    /// The request's host, lower case.
    pub host: Arc<[u8]>,
    /// The request target.
    pub target: Arc<str>,
    /// The request as the client sent it (method, URI, fields).
    pub request: &'a Parts,
}

/// The names of the fields a response varies on, and the request's values of them.
type Variant = (Vec<HeaderName>, Box<[Option<HeaderValue>]>);

/// A response whose head arrived and which may be stored once its body has: everything but
/// the body is computed.
pub struct Pending {
    host: Arc<[u8]>,
    target: Arc<str>,
    status: StatusCode,
    headers: HeaderMap,
    policy: CachePolicy,
    /// The request's field values the response varies on, and their names.
    vary: Option<Variant>,
    age: Duration,
    ttl: Duration,
    swr: Duration,
    sie: Duration,
    at: Instant,
    request_bytes: usize,
    /// The largest body stored.
    pub max_body: u64,
}

impl Pending {
    /// The storable form of a response head (`headers` as the server sent them, hop-by-hop
    /// fields removed), received at `now` (`wall` on the wall clock).
    pub fn new(
        cx: &Context<'_>,
        status: StatusCode,
        headers: &HeaderMap,
        now: Instant,
        wall: SystemTime,
    ) -> Result<Pending, NotStored> {
        let g = cx.group;
        let has_cookie = headers.contains_key(header::SET_COOKIE);
        if has_cookie && !g.strip_cookies {
            return Err(NotStored::SetCookie);
        }
        if content_length(headers).is_some_and(|n| n > g.max_object_size) {
            return Err(NotStored::TooLarge);
        }
        let vary = vary_names(headers).ok_or(NotStored::Uncacheable)?;
        let request = shown_request(cx.request, g);
        // Detached: the server's values share the connection's read buffer.
        let mut shown = store::detached(headers);
        shown.remove(header::SET_COOKIE);
        match g.force_expiry {
            // The flash cache: the server's caching fields do not count.
            Some(d) => {
                for f in [header::CACHE_CONTROL, header::EXPIRES, header::PRAGMA] {
                    shown.remove(f);
                }
                shown.insert(header::CACHE_CONTROL, s_maxage(d));
            }
            None if !g.default_expiry.is_zero() && !has_freshness(headers) => {
                shown.append(header::CACHE_CONTROL, s_maxage(g.default_expiry));
            }
            None => {}
        }
        let policy = CachePolicy::new_options(
            &request,
            &ResponseHead(status, &shown),
            wall,
            CacheOptions {
                shared: true,
                cache_heuristic: g.heuristic,
                ..CacheOptions::default()
            },
        );
        if !policy.is_storable() {
            return Err(NotStored::Uncacheable);
        }
        let (swr, sie) = stale_windows(g, headers);
        let mut out = headers.clone();
        out.remove(header::SET_COOKIE);
        out.remove(header::AGE);
        if let Some(v) = cx.via {
            out.append(header::VIA, v.clone());
        }
        let request_bytes = cx
            .request
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 48)
            .sum::<usize>()
            + cx.target.len();
        let vary = (!vary.is_empty()).then(|| {
            let values = vary_values(&vary, &cx.request.headers);
            (vary, values)
        });
        Ok(Pending {
            host: cx.host.clone(),
            target: cx.target.clone(),
            status,
            headers: out,
            age: policy.age(wall),
            ttl: policy.time_to_live(wall),
            policy,
            vary,
            swr,
            sie,
            at: now,
            request_bytes,
            max_body: g.max_object_size,
        })
    }

    /// The names of the request fields the response varies on (empty when it does not).
    pub fn vary_names(&self) -> &[HeaderName] {
        self.vary.as_ref().map_or(&[], |(n, _)| n.as_slice())
    }

    /// The object, with its body.
    pub fn finish(self, body: Bytes) -> Object {
        let mut headers = self.headers;
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        let etag = headers.get(header::ETAG).cloned();
        let last_modified = headers
            .get(header::LAST_MODIFIED)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok());
        let mut not_modified = HeaderMap::new();
        // RFC 9110 §15.4.5: the fields a 200 would have carried that a 304 must repeat.
        for f in [
            header::CACHE_CONTROL,
            header::CONTENT_LOCATION,
            header::DATE,
            header::ETAG,
            header::EXPIRES,
            header::VARY,
            header::VIA,
        ] {
            for v in headers.get_all(&f) {
                not_modified.append(f.clone(), v.clone());
            }
        }
        let weight = Object::weigh(body.len(), &headers, self.request_bytes);
        let fresh_until = self.at + self.ttl;
        Object {
            host: self.host,
            target: self.target,
            status: self.status,
            not_modified,
            headers,
            body,
            etag,
            last_modified,
            policy: self.policy,
            vary: self.vary.map(|(_, v)| v),
            stored_at: self.at,
            age_at_store: self.age,
            fresh_until,
            swr_until: fresh_until + self.swr,
            sie_until: fresh_until + self.sie,
            weight,
        }
    }

    /// The object refreshed by a server's 304 to a revalidation (`request` is what was sent),
    /// with the stored body; `None` when the 304 is not for this object (its validator differs,
    /// as the crate decides), so the object must be fetched whole again.
    pub fn refresh(
        cx: &Context<'_>,
        old: &Object,
        request: &Parts,
        response: &HeaderMap,
        now: Instant,
        wall: SystemTime,
    ) -> Option<Object> {
        let shown = shown_request(request, cx.group);
        if !matches!(
            old.policy.after_response(
                &shown,
                &ResponseHead(StatusCode::NOT_MODIFIED, response),
                wall
            ),
            AfterResponse::NotModified(..)
        ) {
            return None;
        }
        // RFC 9111 §4.3.4: the 304's fields replace the stored ones, except those that describe
        // the stored body.
        let mut merged = old.headers.clone();
        merged.remove(header::VIA);
        for name in response.keys() {
            if [
                header::CONTENT_LENGTH,
                header::CONTENT_ENCODING,
                header::CONTENT_RANGE,
                header::TRANSFER_ENCODING,
                header::SET_COOKIE,
                header::VIA,
            ]
            .contains(name)
            {
                continue;
            }
            merged.remove(name);
            for v in response.get_all(name) {
                merged.append(name.clone(), v.clone());
            }
        }
        let pending = Pending::new(cx, old.status, &merged, now, wall).ok()?;
        Some(pending.finish(old.body.clone()))
    }
}

/// What the client's conditional request asks of a stored object (RFC 9110 §13.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// No condition: the object.
    None,
    /// The client's copy is current: 304.
    NotModified,
    /// A condition the cache leaves to the server (`If-Match`, `If-Unmodified-Since`,
    /// `Range`, `If-Range`).
    Server,
}

/// Whether the request carries any field the cache must think about beyond its URL and the
/// fields its objects vary on: its own caching directives or a condition.
#[inline]
pub fn is_plain(h: &HeaderMap) -> bool {
    !(h.contains_key(header::CACHE_CONTROL)
        || h.contains_key(header::PRAGMA)
        || h.contains_key(header::IF_NONE_MATCH)
        || h.contains_key(header::IF_MODIFIED_SINCE)
        || h.contains_key(header::IF_MATCH)
        || h.contains_key(header::IF_UNMODIFIED_SINCE)
        || h.contains_key(header::RANGE)
        || h.contains_key(header::IF_RANGE))
}

/// Evaluates a GET or HEAD request's conditions against `o` (RFC 9110 §13.2.2: `If-None-Match`
/// before `If-Modified-Since`, which is ignored when `If-None-Match` is present).
pub fn precondition(h: &HeaderMap, o: &Object) -> Precondition {
    if h.contains_key(header::IF_MATCH)
        || h.contains_key(header::IF_UNMODIFIED_SINCE)
        || h.contains_key(header::RANGE)
        || h.contains_key(header::IF_RANGE)
    {
        return Precondition::Server;
    }
    if h.contains_key(header::IF_NONE_MATCH) {
        // RFC 9110 §13.1.2: weak comparison for If-None-Match.
        let tag = o.etag.as_ref().map(|e| opaque(e.as_bytes()));
        let hit = h
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(<[u8]>::trim_ascii)
            .any(|t| t == b"*" || Some(opaque(t)) == tag);
        return if hit {
            Precondition::NotModified
        } else {
            Precondition::None
        };
    }
    if let (Some(ims), Some(lm)) = (h.get(header::IF_MODIFIED_SINCE), o.last_modified) {
        if let Some(ims) = ims
            .to_str()
            .ok()
            .and_then(|v| httpdate::parse_http_date(v).ok())
        {
            if lm <= ims {
                return Precondition::NotModified;
            }
        }
    }
    Precondition::None
}

/// An entity tag without its weakness mark.
fn opaque(t: &[u8]) -> &[u8] {
    t.strip_prefix(b"W/").unwrap_or(t)
}

/// Whether `o` may be served to this request without revalidation, by the crate's rules —
/// for requests that carry their own caching directives (the others only compare
/// [`Object::fresh_until`]).
pub fn fresh_for(o: &Object, req: &Parts, group: &Group, wall: SystemTime) -> bool {
    let shown = shown_request(req, group);
    matches!(
        o.policy.before_request(&shown, wall),
        BeforeRequest::Fresh(_)
    )
}

/// Makes `req` the revalidation of `o`: the client's own conditions are replaced by the
/// cache's (`If-None-Match` with the stored entity tag, `If-Modified-Since` with the stored
/// `Last-Modified`), as the crate computes them.
pub fn revalidate(req: &mut Parts, o: &Object, group: &Group, wall: SystemTime) {
    for f in [
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_MATCH,
        header::IF_UNMODIFIED_SINCE,
        header::IF_RANGE,
    ] {
        req.headers.remove(f);
    }
    let mut shown = shown_request(req, group);
    // The crate answers `Fresh` to a request that allows it; a revalidation is wanted anyway.
    shown
        .headers
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let BeforeRequest::Stale { request, .. } = o.policy.before_request(&shown, wall) {
        for f in [header::IF_NONE_MATCH, header::IF_MODIFIED_SINCE] {
            if let Some(v) = request.headers.get(&f) {
                req.headers.insert(f, v.clone());
            }
        }
    }
}

/// Removes the client's conditions from a request that fills the cache: the server must send
/// the whole response, which the client's conditions are then evaluated against.
pub fn unconditional(req: &mut Parts) {
    for f in [header::IF_NONE_MATCH, header::IF_MODIFIED_SINCE] {
        req.headers.remove(f);
    }
}

/// The request as the group's rules let the crate see it.
fn shown_request(req: &Parts, g: &Group) -> Parts {
    // The URI and the fields are copied, not shared: the request's share the client
    // connection's read buffer, which the cached policy would otherwise keep alive.
    let uri = http::Uri::try_from(req.uri.to_string()).unwrap_or_else(|_| req.uri.clone());
    let mut shown = http::Request::builder()
        .method(req.method.clone())
        .uri(uri)
        .body(())
        .expect("method and URI are valid")
        .into_parts()
        .0;
    shown.headers = store::detached(&req.headers);
    // A HEAD fills and reuses GET objects.
    if shown.method == http::Method::HEAD {
        shown.method = http::Method::GET;
    }
    if g.allow_authorization {
        shown.headers.remove(header::AUTHORIZATION);
    }
    if g.ignore_client_no_cache {
        shown.headers.remove(header::CACHE_CONTROL);
        shown.headers.remove(header::PRAGMA);
    }
    shown
}

/// `Cache-Control: s-maxage=N` for whole seconds of `d` (at least 1).
fn s_maxage(d: Duration) -> HeaderValue {
    let secs = d.as_secs_f64().ceil().max(1.0) as u64;
    HeaderValue::try_from(format!("s-maxage={secs}")).expect("ascii")
}

/// Whether the server said how long the response is fresh, or when it last changed.
fn has_freshness(h: &HeaderMap) -> bool {
    h.contains_key(header::EXPIRES)
        || h.contains_key(header::LAST_MODIFIED)
        || directives(h).any(|(k, _)| k == "max-age" || k == "s-maxage")
}

/// RFC 5861 windows: the response's own `stale-while-revalidate` / `stale-if-error`, else the
/// group's; none when the server forbids serving stale (`must-revalidate`, `proxy-revalidate`,
/// `no-cache`, `s-maxage`, which implies proxy-revalidate — RFC 9111 §5.2.2.10).
fn stale_windows(g: &Group, h: &HeaderMap) -> (Duration, Duration) {
    let mut swr = g.stale_while_revalidate;
    let mut sie = g.stale_if_error;
    if g.force_expiry.is_some() {
        return (swr, sie);
    }
    for (k, v) in directives(h) {
        let secs = || Duration::from_secs(v.and_then(|v| v.parse().ok()).unwrap_or(0));
        match k.as_str() {
            "stale-while-revalidate" => swr = secs(),
            "stale-if-error" => sie = secs(),
            "must-revalidate" | "proxy-revalidate" | "no-cache" | "s-maxage" => {
                return (Duration::ZERO, Duration::ZERO)
            }
            _ => {}
        }
    }
    (swr, sie)
}

/// The directives of a response's `Cache-Control`, names lower case.
fn directives(h: &HeaderMap) -> impl Iterator<Item = (String, Option<&str>)> {
    h.get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|d| {
            let mut kv = d.splitn(2, '=');
            let k = kv.next()?.trim().to_ascii_lowercase();
            let v = kv.next().map(|v| v.trim().trim_matches('"'));
            (!k.is_empty()).then_some((k, v))
        })
}

/// The body length the server announced, if it did.
fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// A response head as the crate reads it.
struct ResponseHead<'a>(StatusCode, &'a HeaderMap);

impl http_cache_semantics::ResponseLike for ResponseHead<'_> {
    fn status(&self) -> StatusCode {
        self.0
    }

    fn headers(&self) -> &HeaderMap {
        self.1
    }
}

#[cfg(test)]
pub(crate) mod tests;
