//! The ADC's integrated HTTP cache: RFC 9111 as a shared cache, NetScaler-style content groups
//! and policies, request coalescing and the flash cache.
//!
//! ```text
//!  request ──▶ 2 route ──▶ 2½ cache lookup (Cache::lookup)
//!     policies → plan (groups, or bypass) ─▶ store(s): object for URL (+ Vary variant)
//!       fresh                 → Respond: 200 with Age + Via, 304 to a matching condition, HEAD
//!       stale, in SWR window  → Respond stale; a background Fetch revalidates (one per URL)
//!       stale / absent        → coalesce: first request leads a Fetch, the others wait for it
//!                               and are answered from what it stored (or fetch themselves)
//!     3 + 4 select, upstream (Fetch::prepare made it conditional when revalidating)
//!     5 respond: Fetch::on_response
//!       304 for the stale object → refreshed, answered from the cache (Reply::Serve)
//!       5xx and a stale object in its stale-if-error window → the stale object (Reply::Serve)
//!       storable (policy, group rules, size) → the server's body goes to the client as it
//!                               arrives and into a Tee; at its end the object is stored and the
//!                               waiters are answered (Reply::Pass(Some(tee)))
//!       otherwise → passed through, waiters released to fetch themselves (Reply::Pass(None))
//! ```
//!
//! # What it owns
//!
//! - [`Cache`]: the groups' stores, the compiled policies, the fills in flight, the counters;
//!   it lasts across reloads ([`Cache::configure`]; a group keeps its objects and counters
//!   while its name stays) and answers purges and snapshots;
//! - [`policy`]: which group a request belongs to; [`rules`]: RFC 9111 through the
//!   `http-cache-semantics` crate, RFC 5861, conditional requests; [`store`]: the byte-weighted
//!   stores and the stored [`store::Object`]; [`coalesce`]: one fetch per URL; [`stats`]:
//!   counters and the snapshot.
//!
//! It does not talk to servers (the L7 path in `crate::http` does, and calls in here at the
//! phases above), compress (compression applies after the cache, per client: objects are what
//! the server sent, and a server's own `Vary: Accept-Encoding` is keyed like any `Vary`), or
//! store anything on disk.
//!
//! # Costs
//!
//! A hit is one policy walk, one SipHash of host and target, one store read (a shard's read
//! lock), a clock read and a clone of the stored field map; the body is shared `Bytes`, never
//! copied. Freshness, the 304 fields, `Content-Length` and `Via` are computed when the object is
//! stored. Requests with their own `Cache-Control`/`Pragma` ask the crate instead.

pub mod coalesce;
pub mod policy;
pub mod rules;
pub mod stats;
pub mod store;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::{Bytes, BytesMut};
use headway_config::cache::{Action, CacheConfig, Group as GroupConfig};
use headway_core::clock::wall_clock;
use headway_core::SystemClock;
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode, Version};
use parking_lot::Mutex;

use crate::http::body::RespBody;
use crate::stats::Counter;
use coalesce::{Inflight, Join, Leader, Outcome};
use policy::{Plan, Policies};
use rules::{Context, Pending, Precondition};
pub use stats::{CacheGroupSnapshot, CacheSnapshot, PurgeReport};
use store::{Key, Keys, Node, Object, Store};

/// How long a URL whose response could not be stored is fetched without coalescing.
const PASS_FOR: Duration = Duration::from_secs(10);

/// The integrated cache; shared by the virtual servers that use it and kept across reloads.
pub struct Cache {
    current: ArcSwap<Generation>,
    /// Groups by name, kept across reloads.
    groups: Mutex<HashMap<String, Arc<GroupState>>>,
    keys: Keys,
    inflight: Arc<Inflight>,
    /// Bumped by every purge: a fill that started before one does not store.
    epoch: AtomicU64,
    bypassed: Counter,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("groups", &self.current.load().groups.len())
            .finish()
    }
}

/// One config's compiled form.
struct Generation {
    config: CacheConfig,
    policies: Policies,
    /// Same order as `config.groups`.
    groups: Vec<Arc<GroupState>>,
    via: Option<HeaderValue>,
}

/// A content group's store and counters.
pub struct GroupState {
    store: Store,
    counters: Arc<stats::GroupCounters>,
}

/// What to do with a request after the lookup. (Moved once per request; boxing the response
/// would cost an allocation per hit.)
#[allow(clippy::large_enum_variant)]
pub enum Lookup {
    /// Answer with this (from the cache).
    Respond(Response<RespBody>),
    /// Answer with this stale response, and revalidate in the background with the fetch.
    Stale(Response<RespBody>, Box<Fetch>),
    /// Send the request to the servers (as [`Fetch::prepare`] leaves it) for the cache.
    Fetch(Box<Fetch>),
    /// Not for the cache: send it as it is.
    Bypass,
}

/// A request the cache sent to the servers: a miss or a revalidation, maybe leading a fill.
pub struct Fetch {
    cache: Arc<Cache>,
    generation: Arc<Generation>,
    plan: Plan,
    key: Key,
    host: Arc<[u8]>,
    target: Arc<str>,
    /// The client's request (method, URI and fields), for the policy of the response.
    request: Parts,
    /// The stale object being revalidated.
    stale: Option<(usize, Arc<Object>)>,
    leader: Option<Leader>,
    epoch: u64,
}

/// What [`Fetch::on_response`] decided.
#[allow(clippy::large_enum_variant)]
pub enum Reply {
    /// Send the server's response; feed its body to the tee, if any.
    Pass(Option<Box<Tee>>),
    /// Answer with this instead, from the cache (the object refreshed by a 304, or a stale one
    /// on a server error); the server's response has no body worth reading.
    Serve(Response<RespBody>),
}

impl Cache {
    /// A cache for `config`.
    pub fn new(config: &CacheConfig) -> Arc<Cache> {
        let cache = Arc::new(Cache {
            current: ArcSwap::from_pointee(Generation {
                config: config.clone(),
                policies: Policies::new(config),
                groups: Vec::new(),
                via: None,
            }),
            groups: Mutex::new(HashMap::new()),
            keys: Keys::default(),
            inflight: Arc::default(),
            epoch: AtomicU64::new(0),
            bypassed: Counter::default(),
        });
        cache.configure(config);
        cache
    }

    /// Applies a new config (a reload): groups that keep their name keep their objects and
    /// counters (with the new memory limit); the others are dropped.
    pub fn configure(&self, config: &CacheConfig) {
        let mut by_name = self.groups.lock();
        let mut next = HashMap::new();
        let groups = config
            .groups
            .iter()
            .map(|g| {
                let state = match by_name.remove(&g.name) {
                    Some(s) => {
                        s.store.set_capacity(g.memory_limit);
                        s
                    }
                    None => {
                        let counters = Arc::new(stats::GroupCounters::default());
                        Arc::new(GroupState {
                            store: Store::new(g.memory_limit, g.max_object_size, counters.clone()),
                            counters,
                        })
                    }
                };
                next.insert(g.name.clone(), state.clone());
                state
            })
            .collect();
        *by_name = next;
        self.current.store(Arc::new(Generation {
            via: config
                .via
                .as_deref()
                .and_then(|v| HeaderValue::from_str(v).ok()),
            policies: Policies::new(config),
            config: config.clone(),
            groups,
        }));
    }

    /// The lookup of phase 2½. `parts` is the client's request (changed into a revalidation
    /// when one is needed); `https` keys `https` virtual servers apart; `has_body` sends
    /// requests with a body past the cache.
    pub async fn lookup(
        self: &Arc<Self>,
        parts: &mut Parts,
        https: bool,
        has_body: bool,
    ) -> Lookup {
        if !(parts.method == Method::GET || parts.method == Method::HEAD) || has_body {
            return Lookup::Bypass;
        }
        let generation = self.current.load_full();
        let plan = generation.policies.plan(parts);
        let Some(&first) = plan.groups().first() else {
            self.bypassed.inc();
            return Lookup::Bypass;
        };
        let g = &generation.config.groups[first];
        let counters = generation.groups[first].counters.clone();
        if !g.allow_authorization && parts.headers.contains_key(header::AUTHORIZATION) {
            self.bypassed.inc();
            return Lookup::Bypass;
        }
        let Some(host) = host_of(parts) else {
            return Lookup::Bypass;
        };
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let key = self.keys.url(https, host, target);
        let now = SystemClock::now();
        let head = parts.method == Method::HEAD;
        let plain = rules::is_plain(&parts.headers);
        let mut pass = false;
        let mut stale = None;
        match self.find(&generation, &plan, key, host, target, &parts.headers, now) {
            Found::Object(gi, o) => {
                let gc = &generation.config.groups[gi];
                let fresh = if plain || !has_directives(&parts.headers, gc) {
                    now < o.fresh_until
                } else {
                    rules::fresh_for(&o, parts, gc, wall_clock())
                };
                let pre = if plain {
                    Precondition::None
                } else {
                    rules::precondition(&parts.headers, &o)
                };
                if pre == Precondition::Server {
                    return Lookup::Bypass;
                }
                let gs = &generation.groups[gi];
                if fresh {
                    gs.counters.hits.inc();
                    return Lookup::Respond(serve(&o, parts, pre, now, &gs.counters));
                }
                if now < o.swr_until && !has_directives(&parts.headers, gc) {
                    gs.counters.stale.inc();
                    let response = serve(&o, parts, pre, now, &gs.counters);
                    // One background revalidation per URL.
                    if let Join::Lead(leader) = self.inflight.join::<()>(key, || None) {
                        let mut fetch = self.fetch(&generation, plan, key, host, parts, leader);
                        fetch.revalidate(parts, gi, o);
                        return Lookup::Stale(response, Box::new(fetch));
                    }
                    return Lookup::Respond(response);
                }
                if head {
                    return Lookup::Bypass;
                }
                stale = Some((gi, o));
            }
            Found::Pass => pass = true,
            Found::Nothing => {}
        }
        if stale.is_none() && (head || !plain) {
            // A HEAD miss, or a conditional or ranged request for nothing stored: the server
            // answers it as it is, nothing is stored.
            return Lookup::Bypass;
        }
        if pass || !g.coalesce {
            counters.misses.inc();
            let mut f = self.fetch_unled(&generation, plan, key, host, parts);
            if let Some((gi, o)) = stale {
                f.revalidate(parts, gi, o);
            }
            return Lookup::Fetch(Box::new(f));
        }
        let recheck = || match self.find(&generation, &plan, key, host, target, &parts.headers, now)
        {
            Found::Object(gi, o) if now < o.fresh_until => Some((gi, o)),
            _ => None,
        };
        match self.inflight.join(key, recheck) {
            Join::Found((gi, o)) => {
                let gs = &generation.groups[gi];
                gs.counters.hits.inc();
                let pre = rules::precondition(&parts.headers, &o);
                Lookup::Respond(serve(&o, parts, pre, now, &gs.counters))
            }
            Join::Lead(leader) => {
                counters.misses.inc();
                let mut f = self.fetch(&generation, plan, key, host, parts, leader);
                if let Some((gi, o)) = stale {
                    f.revalidate(parts, gi, o);
                }
                Lookup::Fetch(Box::new(f))
            }
            Join::Wait(w) => {
                let outcome = w.wait(g.coalesce_wait).await;
                let now = SystemClock::now();
                match outcome {
                    Some(Outcome::Stored(o)) if self.usable(&o, host, target, &parts.headers) => {
                        counters.coalesced.inc();
                        let pre = rules::precondition(&parts.headers, &o);
                        return Lookup::Respond(serve(&o, parts, pre, now, &counters));
                    }
                    Some(Outcome::Failed) => {
                        if let Some((gi, o)) = &stale {
                            if now < o.sie_until {
                                let gs = &generation.groups[*gi];
                                gs.counters.stale.inc();
                                let pre = rules::precondition(&parts.headers, o);
                                return Lookup::Respond(serve(o, parts, pre, now, &gs.counters));
                            }
                        }
                    }
                    _ => {}
                }
                counters.misses.inc();
                let mut f = self.fetch_unled(&generation, plan, key, host, parts);
                if let Some((gi, o)) = stale {
                    f.revalidate(parts, gi, o);
                }
                Lookup::Fetch(Box::new(f))
            }
        }
    }

    /// Removes what `purge` names; effective at once (fills in flight do not store).
    pub fn purge(&self, purge: &Purge) -> Result<PurgeReport, PurgeError> {
        self.epoch.fetch_add(1, Relaxed);
        let generation = self.current.load();
        let mut report = PurgeReport::default();
        for (g, gs) in generation.config.groups.iter().zip(&generation.groups) {
            let drop: Box<dyn Fn(&Node) -> bool> = match purge {
                Purge::All => Box::new(|_| true),
                Purge::Group(name) if *name == g.name => Box::new(|_| true),
                Purge::Group(_) => continue,
                Purge::Url { host, target } => {
                    Box::new(move |n| on_host(n, host) && node_url(n).1 == target.as_str())
                }
                Purge::Prefix { host, prefix } => Box::new(move |n| {
                    on_host(n, host) && node_url(n).1.starts_with(prefix.as_str())
                }),
            };
            let (objects, bytes) = gs.store.purge(&*drop);
            gs.counters.purged.add(objects);
            report.objects += objects;
            report.bytes += bytes;
        }
        if let Purge::Group(name) = purge {
            if generation.config.group(name).is_none() {
                return Err(PurgeError::NoGroup(name.clone()));
            }
        }
        Ok(report)
    }

    /// Counters and fill levels.
    pub fn snapshot(&self) -> CacheSnapshot {
        let generation = self.current.load();
        let groups: Vec<CacheGroupSnapshot> = generation
            .config
            .groups
            .iter()
            .zip(&generation.groups)
            .map(|(g, gs)| {
                let mut s = CacheGroupSnapshot {
                    name: g.name.clone(),
                    memory_limit: g.memory_limit,
                    max_object_size: g.max_object_size,
                    force_expiry_seconds: g.force_expiry.map(|d| d.as_secs_f64()),
                    stored_bytes: gs.store.weight(),
                    objects: gs.store.len() as u64,
                    ..CacheGroupSnapshot::default()
                };
                gs.counters.fill(&mut s);
                s
            })
            .collect();
        CacheSnapshot {
            memory_limit: generation.config.memory_limit,
            stored_bytes: groups.iter().map(|g| g.stored_bytes).sum(),
            bypassed: self.bypassed.get(),
            groups,
        }
    }

    /// Whether virtual server `name` uses this cache.
    pub fn serves(&self, name: &str) -> bool {
        self.current.load().config.serves(name)
    }

    /// The stored object for this URL in one of the plan's groups.
    #[allow(clippy::too_many_arguments)]
    fn find(
        &self,
        generation: &Generation,
        plan: &Plan,
        key: Key,
        host: &[u8],
        target: &str,
        headers: &HeaderMap,
        now: Instant,
    ) -> Found {
        let mut found = Found::Nothing;
        for gi in plan.groups() {
            let store = &generation.groups[gi].store;
            match store.get(key) {
                Some(Node::Object(o)) if o.vary.is_none() && o.is_for(host, target) => {
                    return Found::Object(gi, o)
                }
                Some(Node::Vary(v))
                    if v.target.as_ref() == target && v.host.eq_ignore_ascii_case(host) =>
                {
                    let k = self.keys.variant(key, &v.names, headers);
                    if let Some(Node::Object(o)) = store.get(k) {
                        if o.is_for(host, target)
                            && o.vary
                                .as_ref()
                                .is_some_and(|vals| store::vary_matches(&v.names, vals, headers))
                        {
                            return Found::Object(gi, o);
                        }
                    }
                }
                Some(Node::Pass {
                    host: h,
                    target: t,
                    until,
                }) if until > now && t.as_ref() == target && h.eq_ignore_ascii_case(host) => {
                    found = Found::Pass;
                }
                _ => {}
            }
        }
        found
    }

    /// Whether a fill's object answers this request too (same URL, same variant).
    fn usable(&self, o: &Object, host: &[u8], target: &str, headers: &HeaderMap) -> bool {
        if !o.is_for(host, target) {
            return false;
        }
        match &o.vary {
            None => true,
            Some(values) => {
                let names = store::vary_names(&o.headers).unwrap_or_default();
                store::vary_matches(&names, values, headers)
            }
        }
    }

    fn fetch(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        plan: Plan,
        key: Key,
        host: &[u8],
        parts: &Parts,
        leader: Leader,
    ) -> Fetch {
        let mut f = self.fetch_unled(generation, plan, key, host, parts);
        f.leader = Some(leader);
        f
    }

    fn fetch_unled(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        plan: Plan,
        key: Key,
        host: &[u8],
        parts: &Parts,
    ) -> Fetch {
        let mut request = http::Request::new(()).into_parts().0;
        request.method = parts.method.clone();
        request.uri = parts.uri.clone();
        request.version = parts.version;
        request.headers = parts.headers.clone();
        Fetch {
            cache: self.clone(),
            generation: generation.clone(),
            plan,
            key,
            host: host.to_ascii_lowercase().into(),
            target: parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .into(),
            request,
            stale: None,
            leader: None,
            epoch: self.epoch.load(Relaxed),
        }
    }
}

impl Fetch {
    /// Makes the request a revalidation of `o` (group `gi`).
    fn revalidate(&mut self, parts: &mut Parts, gi: usize, o: Arc<Object>) {
        let g = &self.generation.config.groups[gi];
        rules::revalidate(parts, &o, g, wall_clock());
        self.generation.groups[gi].counters.revalidations.inc();
        self.stale = Some((gi, o));
    }

    /// Phase 4: the request to send (a fill asks for the whole response).
    pub fn prepare(&self, parts: &mut Parts) {
        if self.stale.is_none() {
            rules::unconditional(parts);
        }
    }

    /// The request as the cache sends it in the background (stale-while-revalidate), made
    /// from the client's: the same URL and fields, the cache's conditions.
    pub fn background_request(&self) -> Parts {
        let mut p = http::Request::new(()).into_parts().0;
        p.method = Method::GET;
        p.uri = self.request.uri.clone();
        p.version = Version::HTTP_11;
        p.headers = self.request.headers.clone();
        if let Some((gi, o)) = &self.stale {
            rules::revalidate(&mut p, o, &self.generation.config.groups[*gi], wall_clock());
        }
        p
    }

    /// Phase 5: the server's response head (hop-by-hop fields removed). `headers` gain `Via`
    /// when the response is stored.
    pub fn on_response(mut self, status: StatusCode, headers: &mut HeaderMap) -> Reply {
        let now = SystemClock::now();
        let wall = wall_clock();
        if let Some((gi, old)) = self.stale.clone() {
            let g = &self.generation.config.groups[gi];
            let gs = &self.generation.groups[gi];
            if status == StatusCode::NOT_MODIFIED {
                let cx = self.context(g);
                if let Some(o) =
                    Pending::refresh(&cx, &old, &self.request, headers, now, wall).map(Arc::new)
                {
                    gs.counters.revalidated.inc();
                    let vary = store::vary_names(&o.headers).unwrap_or_default();
                    self.store(gi, o.clone(), &vary);
                    return Reply::Serve(self.serve(&o, gi));
                }
                gs.store.remove(self.key);
                self.not_stored(gi);
                return Reply::Pass(None);
            }
            if matches!(status.as_u16(), 500 | 502 | 503 | 504) && now < old.sie_until {
                gs.counters.stale.inc();
                if let Some(l) = self.leader.take() {
                    l.finish(Outcome::Stored(old.clone()));
                }
                return Reply::Serve(self.serve(&old, gi));
            }
        }
        let ct = headers.get(header::CONTENT_TYPE).map(HeaderValue::as_bytes);
        let gi = match self.plan.decide(&self.generation.policies, ct) {
            Action::Cache(gi) => gi,
            _ => {
                self.cache.bypassed.inc();
                if let Some(l) = self.leader.take() {
                    l.finish(Outcome::NotStored);
                }
                return Reply::Pass(None);
            }
        };
        let g = &self.generation.config.groups[gi];
        let pending = {
            let cx = self.context(g);
            Pending::new(&cx, status, headers, now, wall)
        };
        match pending {
            Ok(p) => {
                if let Some(v) = &self.generation.via {
                    headers.append(header::VIA, v.clone());
                }
                let capacity = headers
                    .get(header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                    .map_or(16 << 10, |n| n.min(p.max_body));
                Reply::Pass(Some(Box::new(Tee {
                    buf: BytesMut::with_capacity(capacity as usize),
                    pending: Some(p),
                    group: gi,
                    fetch: self,
                })))
            }
            Err(why) => {
                tracing::trace!(reason = %why, "response not stored");
                self.not_stored(gi);
                Reply::Pass(None)
            }
        }
    }

    /// The servers could not be reached (or failed before a response): a stale object in its
    /// stale-if-error window answers instead.
    pub fn on_error(mut self) -> Option<Response<RespBody>> {
        let (gi, old) = self.stale.clone()?;
        if SystemClock::now() >= old.sie_until {
            return None;
        }
        self.generation.groups[gi].counters.stale.inc();
        if let Some(l) = self.leader.take() {
            l.finish(Outcome::Stored(old.clone()));
        }
        Some(self.serve(&old, gi))
    }

    /// The answer from `o` for this fetch's client (the client's own conditions apply).
    fn serve(&self, o: &Object, gi: usize) -> Response<RespBody> {
        let pre = rules::precondition(&self.request.headers, o);
        let pre = if pre == Precondition::Server {
            Precondition::None
        } else {
            pre
        };
        serve(
            o,
            &self.request,
            pre,
            SystemClock::now(),
            &self.generation.groups[gi].counters,
        )
    }

    fn context<'a>(&'a self, g: &'a GroupConfig) -> Context<'a> {
        Context {
            group: g,
            via: self.generation.via.as_ref(),
            host: self.host.clone(),
            target: self.target.clone(),
            request: &self.request,
        }
    }

    /// Stores `o` (a variant when `vary` names fields), then ends the fill with it.
    fn store(&mut self, gi: usize, o: Arc<Object>, vary: &[http::HeaderName]) {
        let gs = &self.generation.groups[gi];
        if self.cache.epoch.load(Relaxed) != self.epoch {
            // A purge came while the response arrived: what it purged must not come back.
            self.not_stored(gi);
            return;
        }
        if vary.is_empty() {
            gs.store.insert(self.key, Node::Object(o.clone()));
        } else {
            let names: Box<[http::HeaderName]> = vary.into();
            let variant = self
                .cache
                .keys
                .variant(self.key, &names, &self.request.headers);
            gs.store.insert(
                self.key,
                Node::Vary(Arc::new(store::Vary {
                    host: self.host.clone(),
                    target: self.target.clone(),
                    names,
                })),
            );
            gs.store.insert(variant, Node::Object(o.clone()));
        }
        gs.counters.stores.inc();
        if let Some(l) = self.leader.take() {
            l.finish(Outcome::Stored(o));
        }
    }

    /// Ends the fill without an object; later misses for the URL skip coalescing for a while.
    fn not_stored(&mut self, gi: usize) {
        let gs = &self.generation.groups[gi];
        gs.counters.not_stored.inc();
        if gs.store.get(self.key).is_none() {
            gs.store.insert(
                self.key,
                Node::Pass {
                    host: self.host.clone(),
                    target: self.target.clone(),
                    until: SystemClock::now() + PASS_FOR,
                },
            );
        }
        if let Some(l) = self.leader.take() {
            l.finish(Outcome::NotStored);
        }
    }
}

/// The server's body on its way to the client, copied into the object being stored; storing
/// is given up past the group's `max_object_size`. Dropped without [`Tee::end`], nothing is
/// stored and the waiters fetch for themselves.
pub struct Tee {
    buf: BytesMut,
    pending: Option<Pending>,
    group: usize,
    fetch: Fetch,
}

impl Tee {
    /// Body bytes as they pass.
    #[inline]
    pub fn data(&mut self, d: &[u8]) {
        let Some(p) = &self.pending else {
            return;
        };
        if (self.buf.len() + d.len()) as u64 > p.max_body {
            self.pending = None;
            self.buf = BytesMut::new();
            self.fetch.not_stored(self.group);
            return;
        }
        self.buf.extend_from_slice(d);
    }

    /// The body ended: `complete` when it arrived whole.
    pub fn end(mut self, complete: bool) {
        let Some(p) = self.pending.take() else {
            return;
        };
        if !complete {
            self.fetch.not_stored(self.group);
            return;
        }
        let buf = std::mem::take(&mut self.buf);
        // A body of unknown length may have grown into a much larger buffer: store it exact.
        let body = if buf.capacity() > buf.len() + buf.len() / 4 + 64 {
            Bytes::copy_from_slice(&buf)
        } else {
            buf.freeze()
        };
        let vary: Vec<http::HeaderName> = p.vary_names().to_vec();
        let o = Arc::new(p.finish(body));
        self.fetch.store(self.group, o, &vary);
    }
}

/// What a purge removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purge {
    /// One URL (every variant): its target (path and query), and host (any when `None`).
    Url {
        /// The host, case-insensitive; `None` = every host.
        host: Option<String>,
        /// The path and query, exactly.
        target: String,
    },
    /// Every URL whose target starts with `prefix` (on `host`, or any host).
    Prefix {
        /// The host, case-insensitive; `None` = every host.
        host: Option<String>,
        /// The start of the path.
        prefix: String,
    },
    /// A whole content group.
    Group(String),
    /// Everything.
    All,
}

/// Why a purge could not be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PurgeError {
    /// No content group has that name.
    #[error("no cache group named {0:?}")]
    NoGroup(String),
    /// The proxy has no cache configured.
    #[error("no cache is configured: add a [cache] section")]
    NoCache,
}

enum Found {
    Object(usize, Arc<Object>),
    Pass,
    Nothing,
}

/// The answer from a stored object: 200 (or its stored status) with `Age`, a 304, or a HEAD's
/// fields; the body is the stored bytes, shared.
fn serve(
    o: &Object,
    req: &Parts,
    pre: Precondition,
    now: Instant,
    counters: &stats::GroupCounters,
) -> Response<RespBody> {
    let not_modified = pre == Precondition::NotModified;
    let body = if not_modified || req.method == Method::HEAD {
        Bytes::new()
    } else {
        counters.bytes_served.add(o.body.len() as u64);
        o.body.clone()
    };
    let mut r = Response::new(RespBody::full(body, None));
    if not_modified {
        counters.not_modified.inc();
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        *r.headers_mut() = o.not_modified.clone();
    } else {
        *r.status_mut() = o.status;
        *r.headers_mut() = o.headers.clone();
    }
    *r.version_mut() = req.version;
    r.headers_mut()
        .insert(header::AGE, HeaderValue::from(o.age(now)));
    r
}

/// Whether the request's own caching directives count (the group may ignore them).
fn has_directives(h: &HeaderMap, g: &GroupConfig) -> bool {
    !g.ignore_client_no_cache
        && (h.contains_key(header::CACHE_CONTROL) || h.contains_key(header::PRAGMA))
}

/// The request's host as sent (`Host`, or the URI's authority for HTTP/2).
fn host_of(parts: &Parts) -> Option<&[u8]> {
    parts
        .headers
        .get(header::HOST)
        .map(HeaderValue::as_bytes)
        .or_else(|| parts.uri.authority().map(|a| a.as_str().as_bytes()))
}

/// Whether a purge's host (any when `None`) is `n`'s.
fn on_host(n: &Node, host: &Option<String>) -> bool {
    host.as_ref()
        .is_none_or(|h| node_url(n).0.eq_ignore_ascii_case(h.as_bytes()))
}

fn node_url(n: &Node) -> (&[u8], &str) {
    match n {
        Node::Object(o) => (&o.host, &o.target),
        Node::Vary(v) => (&v.host, &v.target),
        Node::Pass { host, target, .. } => (host, target),
    }
}

#[cfg(test)]
mod tests;
