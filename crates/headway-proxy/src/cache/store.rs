//! A content group's stored responses: a concurrent, byte-weighted store ([`Store`], over
//! `quick_cache`'s CLOCK-Pro/S3-FIFO-like eviction), its entries ([`Node`]) and the stored
//! response itself ([`Object`]).
//!
//! Keys are 64-bit hashes (a per-process random SipHash key, so they cannot be aimed at) of the
//! scheme, host and target; every entry keeps its host and target and a lookup compares them,
//! so a collision can cost a miss, never a wrong answer. A response that varies (`Vary`) is
//! stored in two levels, as Varnish does: the URL's key holds a [`Node::Vary`] naming the
//! request fields it varies on, and each variant is an object of its own under a key that also
//! hashes those fields' values. Every entry is weighed in bytes (body, header fields, the
//! RFC 9111 policy, a fixed overhead), and the store evicts the least useful ones to stay within
//! its group's memory limit; objects larger than a shard's share are refused.
//!
//! Invariant: an [`Object`] never changes once stored; a refresh (a 304 from the server)
//! stores a new one beside the same body bytes.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use quick_cache::sync::Cache as Quick;
use quick_cache::{Lifecycle, OptionsBuilder, Weighter};

use super::stats::GroupCounters;

/// A key: the hash of a URL (or of a URL and the values of the fields it varies on).
pub type Key = u64;

/// What a key holds.
#[derive(Clone)]
pub enum Node {
    /// A stored response.
    Object(Arc<Object>),
    /// The URL's responses vary on these request fields: look up the variant's key.
    Vary(Arc<Vary>),
    /// A recent response for the URL could not be stored: concurrent misses go to the
    /// servers at once rather than waiting for each other (Varnish's hit-for-miss), until then.
    Pass {
        /// The URL, as in [`Object::host`] and [`Object::target`].
        host: Arc<[u8]>,
        /// The request target.
        target: Arc<str>,
        /// When this marker stops counting.
        until: Instant,
    },
}

/// The request fields a URL's responses vary on.
pub struct Vary {
    /// The URL.
    pub host: Arc<[u8]>,
    /// The request target.
    pub target: Arc<str>,
    /// The field names, lower case, as the response's `Vary` lists them.
    pub names: Box<[HeaderName]>,
}

/// A stored response, with everything a hit needs computed when it was stored.
pub struct Object {
    /// The request's host, lower case (the `Host` field, or the URI's authority).
    pub host: Arc<[u8]>,
    /// The request target (path and query).
    pub target: Arc<str>,
    /// The status.
    pub status: StatusCode,
    /// The fields sent with it: the server's (hop-by-hop ones and stripped cookies removed),
    /// `Content-Length`, and `Via`; `Age` is added per response.
    pub headers: HeaderMap,
    /// The fields of a 304 answer (RFC 9110 §15.4.5).
    pub not_modified: HeaderMap,
    /// The body.
    pub body: Bytes,
    /// The strong or weak entity tag, if the server sent one.
    pub etag: Option<HeaderValue>,
    /// `Last-Modified`, if the server sent a valid one.
    pub last_modified: Option<SystemTime>,
    /// The RFC 9111 rules of this response (http-cache-semantics), for requests with their
    /// own directives and for revalidation.
    pub policy: http_cache_semantics::CachePolicy,
    /// The request field values the response varies on (`names` of the URL's [`Vary`]).
    pub vary: Option<Box<[Option<HeaderValue>]>>,
    /// When it was stored.
    pub stored_at: Instant,
    /// Its age then (`Age` from upstream caches plus the time in transit).
    pub age_at_store: Duration,
    /// Fresh until then.
    pub fresh_until: Instant,
    /// May be served stale while revalidating until then (RFC 5861).
    pub swr_until: Instant,
    /// May be served stale when the servers fail until then (RFC 5861).
    pub sie_until: Instant,
    /// Its weight in the store, bytes.
    pub weight: u64,
}

impl Object {
    /// Whether this object is the response for `host` and `target`.
    pub fn is_for(&self, host: &[u8], target: &str) -> bool {
        self.target.as_ref() == target && self.host.eq_ignore_ascii_case(host)
    }

    /// The `Age` at `now`, whole seconds.
    pub fn age(&self, now: Instant) -> u64 {
        (self.age_at_store + now.saturating_duration_since(self.stored_at)).as_secs()
    }

    /// Weighs an object: body, fields, the policy's copies of the fields, and a fixed overhead
    /// for the structures around them.
    pub fn weigh(body: usize, headers: &HeaderMap, request_fields: usize) -> u64 {
        let fields: usize = headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 48)
            .sum();
        // The policy keeps the response's and the request's fields once more.
        (body + 2 * fields + request_fields + 768) as u64
    }
}

/// Entry weights: an object's own, a small constant for markers.
#[derive(Clone)]
struct Weigh;

impl Weighter<Key, Node> for Weigh {
    fn weight(&self, _: &Key, v: &Node) -> u64 {
        match v {
            Node::Object(o) => o.weight,
            Node::Vary(v) => 128 + v.target.len() as u64 + v.names.len() as u64 * 32,
            Node::Pass { target, .. } => 96 + target.len() as u64,
        }
    }
}

/// Counts evictions.
#[derive(Clone)]
struct Life(Arc<GroupCounters>);

impl Lifecycle<Key, Node> for Life {
    type RequestState = ();

    fn on_evict(&self, _: &mut (), _: Key, v: Node) {
        if let Node::Object(o) = v {
            self.0.evictions.inc();
            self.0.evicted_bytes.add(o.weight);
        }
    }
}

/// One content group's store.
pub struct Store {
    map: Quick<Key, Node, Weigh, std::hash::BuildHasherDefault<KeyHasher>, Life>,
    capacity: std::sync::atomic::AtomicU64,
}

impl Store {
    /// A store holding at most `capacity` bytes, for objects of up to `max_object` bytes.
    pub fn new(capacity: u64, max_object: u64, counters: Arc<GroupCounters>) -> Self {
        // Each shard evicts within its share: a shard must fit several of the largest objects.
        let mut shards = 16usize;
        while shards > 1 && capacity / (shards as u64) < max_object.saturating_mul(4) {
            shards /= 2;
        }
        let items = (capacity / 4096).clamp(64, 1 << 20) as usize;
        let options = OptionsBuilder::new()
            .estimated_items_capacity(items)
            .weight_capacity(capacity)
            .shards(shards)
            .build()
            .expect("valid cache options");
        Store {
            map: Quick::with_options(options, Weigh, Default::default(), Life(counters)),
            capacity: capacity.into(),
        }
    }

    /// The entry under `key`.
    #[inline]
    pub fn get(&self, key: Key) -> Option<Node> {
        self.map.get(&key)
    }

    /// Stores `node` under `key`, evicting others as needed.
    pub fn insert(&self, key: Key, node: Node) {
        self.map.insert(key, node);
    }

    /// Removes the entry under `key`.
    pub fn remove(&self, key: Key) {
        self.map.remove(&key);
    }

    /// Removes every entry `drop` says, returning how many objects and bytes went.
    pub fn purge(&self, drop: &dyn Fn(&Node) -> bool) -> (u64, u64) {
        let objects = std::sync::atomic::AtomicU64::new(0);
        let bytes = std::sync::atomic::AtomicU64::new(0);
        self.map.retain(|_, v| {
            if !drop(v) {
                return true;
            }
            if let Node::Object(o) = v {
                objects.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                bytes.fetch_add(o.weight, std::sync::atomic::Ordering::Relaxed);
            }
            false
        });
        (objects.into_inner(), bytes.into_inner())
    }

    /// Bytes held now.
    pub fn weight(&self) -> u64 {
        self.map.weight()
    }

    /// Entries held now (objects and markers).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The memory limit.
    pub fn capacity(&self) -> u64 {
        self.capacity.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Changes the memory limit, evicting at once if it shrank.
    pub fn set_capacity(&self, capacity: u64) {
        if self.capacity() != capacity {
            self.map.set_capacity(capacity);
            self.capacity
                .store(capacity, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The hasher of store keys: keys are already hashes, so their own bits are used.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Makes keys: SipHash with a key drawn once per process.
#[derive(Debug, Clone, Default)]
pub struct Keys(std::hash::RandomState);

impl Keys {
    /// The key of a URL: scheme, host (compared case-insensitively) and target.
    pub fn url(&self, https: bool, host: &[u8], target: &str) -> Key {
        let mut h = self.0.build_hasher();
        h.write_u8(u8::from(https));
        for b in host {
            h.write_u8(b.to_ascii_lowercase());
        }
        h.write_u8(0);
        target.hash(&mut h);
        h.finish()
    }

    /// The key of a variant of URL key `url`: the values of the fields it varies on.
    pub fn variant(&self, url: Key, names: &[HeaderName], headers: &HeaderMap) -> Key {
        let mut h = self.0.build_hasher();
        h.write_u64(url);
        for n in names {
            match headers.get(n) {
                Some(v) => {
                    h.write_u8(1);
                    h.write(v.as_bytes());
                }
                None => h.write_u8(0),
            }
            h.write_u8(0xff);
        }
        h.finish()
    }
}

/// The values of `names` in `headers`, as a variant records them.
pub fn vary_values(names: &[HeaderName], headers: &HeaderMap) -> Box<[Option<HeaderValue>]> {
    names.iter().map(|n| headers.get(n).map(detach)).collect()
}

/// A copy of `headers` whose values own their bytes (see [`detach`]).
pub fn detached(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (n, v) in headers {
        out.append(n.clone(), detach(v));
    }
    out
}

/// A copy of `v` that owns its bytes. A value parsed from a connection's read buffer shares
/// that buffer (16 KiB or more); kept in the cache, it would keep the whole buffer alive.
pub fn detach(v: &HeaderValue) -> HeaderValue {
    let mut d = HeaderValue::from_bytes(v.as_bytes()).unwrap_or_else(|_| v.clone());
    d.set_sensitive(v.is_sensitive());
    d
}

/// Whether `headers` carry the values a variant was stored for.
pub fn vary_matches(
    names: &[HeaderName],
    values: &[Option<HeaderValue>],
    headers: &HeaderMap,
) -> bool {
    names.len() == values.len()
        && names
            .iter()
            .zip(values)
            .all(|(n, v)| headers.get(n) == v.as_ref())
}

/// The field names of a response's `Vary`, lower case; `None` for `Vary: *` or an unusable
/// name (such a response is never reused, RFC 9111 §4.1).
pub fn vary_names(headers: &HeaderMap) -> Option<Vec<HeaderName>> {
    let mut names = Vec::new();
    for v in headers.get_all(header::VARY) {
        let v = v.to_str().ok()?;
        for n in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if n == "*" {
                return None;
            }
            let n = HeaderName::from_bytes(n.to_ascii_lowercase().as_bytes()).ok()?;
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn object(host: &str, target: &str, body: usize, now: Instant) -> Arc<Object> {
        let req = http::Request::get(target)
            .header("host", host)
            .body(())
            .unwrap();
        let resp = http::Response::builder()
            .header("cache-control", "max-age=60")
            .body(())
            .unwrap();
        let policy = http_cache_semantics::CachePolicy::new_options(
            &req,
            &resp,
            SystemTime::UNIX_EPOCH,
            Default::default(),
        );
        let headers = resp.headers().clone();
        Arc::new(Object {
            host: host.as_bytes().into(),
            target: target.into(),
            status: StatusCode::OK,
            weight: Object::weigh(body, &headers, 64),
            not_modified: HeaderMap::new(),
            headers,
            body: Bytes::from(vec![7u8; body]),
            etag: None,
            last_modified: None,
            policy,
            vary: None,
            stored_at: now,
            age_at_store: Duration::ZERO,
            fresh_until: now + Duration::from_secs(60),
            swr_until: now,
            sie_until: now,
        })
    }

    #[test]
    fn detached_values_own_their_bytes() {
        let buf = Bytes::from_static(b"HTTP/1.1 200 OK\r\netag: \"v1\"\r\nset-cookie: a=b\r\n\r\n");
        let within = |v: &HeaderValue| {
            let p = v.as_bytes().as_ptr() as usize;
            let b = buf.as_ptr() as usize;
            (b..b + buf.len()).contains(&p)
        };
        let etag = HeaderValue::from_maybe_shared(buf.slice(23..27)).unwrap();
        let mut cookie = HeaderValue::from_maybe_shared(buf.slice(41..44)).unwrap();
        cookie.set_sensitive(true);
        assert!(within(&etag) && within(&cookie));
        let mut h = HeaderMap::new();
        h.append(header::ETAG, etag);
        h.append(header::SET_COOKIE, cookie.clone());
        h.append(header::SET_COOKIE, HeaderValue::from_static("c=d"));
        let d = detached(&h);
        assert_eq!(d, h);
        assert!(d.values().all(|v| !within(v)));
        assert!(d[header::SET_COOKIE].is_sensitive());
        let names = [header::SET_COOKIE];
        let v = vary_values(&names, &h);
        assert_eq!(v[0].as_ref(), Some(&cookie));
        assert!(!within(v[0].as_ref().unwrap()));
    }

    #[test]
    fn the_store_stays_within_its_budget_under_churn() {
        let counters = Arc::new(GroupCounters::default());
        let limit = 1 << 20;
        let store = Store::new(limit, 64 << 10, counters.clone());
        let keys = Keys::default();
        let now = headway_core::SystemClock::now();
        let mut max = 0;
        // 400 objects of 5–60 KiB: about 12 MiB through a 1 MiB store.
        for i in 0..400u64 {
            let target = format!("/obj/{i}");
            let o = object("h", &target, 5_000 + (i as usize * 7919) % 55_000, now);
            store.insert(keys.url(false, b"h", &target), Node::Object(o));
            max = max.max(store.weight());
        }
        assert!(max <= limit, "{max} > {limit}");
        assert!(
            counters.evictions.get() > 300,
            "{}",
            counters.evictions.get()
        );
        assert!(store.weight() > limit / 2);
        // The most recent object is there, and it is the right one.
        let key = keys.url(false, b"H", "/obj/399");
        match store.get(key) {
            Some(Node::Object(o)) => assert!(o.is_for(b"h", "/obj/399")),
            _ => panic!("the last object was evicted"),
        }
        // Purge everything under a prefix.
        let (n, bytes) = store.purge(&|n| match n {
            Node::Object(o) => o.target.starts_with("/obj/39"),
            _ => false,
        });
        assert!(n >= 1 && bytes > 0);
        assert!(store.get(key).is_none());
    }

    #[test]
    fn keys_separate_scheme_host_target_and_variants() {
        let k = Keys::default();
        assert_eq!(
            k.url(false, b"Example.COM", "/a"),
            k.url(false, b"example.com", "/a")
        );
        assert_ne!(
            k.url(false, b"example.com", "/a"),
            k.url(true, b"example.com", "/a")
        );
        assert_ne!(
            k.url(false, b"example.com", "/a"),
            k.url(false, b"example.co", "m/a")
        );
        let names = [header::ACCEPT_ENCODING];
        let mut h = HeaderMap::new();
        let u = k.url(false, b"h", "/");
        let none = k.variant(u, &names, &h);
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        let gzip = k.variant(u, &names, &h);
        assert_ne!(none, gzip);
        let values = vary_values(&names, &h);
        assert!(vary_matches(&names, &values, &h));
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("br"));
        assert!(!vary_matches(&names, &values, &h));
    }

    #[test]
    fn vary_lists_are_parsed_and_star_is_never_reused() {
        let mut h = HeaderMap::new();
        h.append(
            header::VARY,
            HeaderValue::from_static("Accept-Encoding, Accept"),
        );
        h.append(header::VARY, HeaderValue::from_static("accept-encoding"));
        assert_eq!(
            vary_names(&h).unwrap(),
            [header::ACCEPT_ENCODING, header::ACCEPT]
        );
        h.append(header::VARY, HeaderValue::from_static("*"));
        assert_eq!(vary_names(&h), None);
        assert_eq!(
            vary_names(&HeaderMap::new()).unwrap(),
            Vec::<HeaderName>::new()
        );
    }
}
