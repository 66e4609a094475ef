//! The `[cache]` section of the file schema, as written: the ADC's integrated HTTP cache, its
//! content groups (`[[cache.group]]`) and its ordered policies (`[[cache.policy]]`), after
//! NetScaler's `cache contentGroup` and `cache policy` (seed 000, Appendix A). `crate::cache`
//! validates them into [`crate::cache::CacheConfig`].
//!
//! Every field's doc gives its meaning, unit and default; `docs/config.md` is generated from the
//! same words (keep them in step).

use headway_core::ByteSize;
use serde::Deserialize;
use toml::Spanned;

use super::{DurationValue, HeaderMatchSection};

/// `[cache]`: the integrated HTTP cache of the ADC's `http` and `https` virtual servers
/// (RFC 9111, as a shared cache). A request is looked up before a server is chosen; a fresh
/// stored response is answered at once (with `Age` and `Via`, or 304 to a conditional
/// request), a stale one is revalidated with the server (`If-None-Match` /
/// `If-Modified-Since`; a 304 refreshes it). Concurrent misses for one URL make one request to
/// the server; the others wait for it and are answered from it. Which requests may be cached,
/// and in which content group, the policies say; responses are stored as the server sent them
/// (HTTP compression applies after the cache, per client).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSection {
    /// Use the cache at all; `false` keeps the section but passes every request to the servers.
    /// Default: true.
    pub enabled: Option<bool>,
    /// Memory for the stored responses of all content groups together (`"256MiB"`), bodies and
    /// headers counted. When the groups' `memory_limit`s add up to more, each group gets a share
    /// of this in proportion to its own limit. Default: `"256MiB"`.
    pub memory_limit: Option<Spanned<ByteSize>>,
    /// The pseudonym in the `Via` field added to responses that pass through the cache
    /// (`Via: 1.1 headway`); `""` adds none. Default: `"headway"`.
    pub via: Option<Spanned<String>>,
    /// The virtual servers that use the cache, by name (`http` or `https` ones). Default: every
    /// `http` and `https` virtual server.
    pub virtual_servers: Option<Spanned<Vec<Spanned<String>>>>,
    /// The content group of requests that no policy matches. Default: none (such requests are
    /// not cached).
    pub default_group: Option<Spanned<String>>,
    /// The content groups (`[[cache.group]]`); at least one.
    #[serde(default)]
    pub group: Vec<ContentGroupSection>,
    /// The policies (`[[cache.policy]]`), first match wins. Default: none.
    #[serde(default)]
    pub policy: Vec<CachePolicySection>,
}

/// `[[cache.group]]`: a content group — stored responses that share a memory limit and the
/// rules of how long they are kept and what may be stored.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentGroupSection {
    /// The group's name, used by policies, `default_group`, metrics and purges: letters,
    /// digits, `-`, `_`, `.`. Required.
    pub name: Spanned<String>,
    /// Memory for this group's stored responses (`"64MiB"`); the least used are evicted first
    /// when a new one needs room. Default: the cache's `memory_limit`.
    pub memory_limit: Option<Spanned<ByteSize>>,
    /// The largest response body stored (`"500KiB"`); a larger one is still sent to the client
    /// as it arrives, and storing it is given up when it passes this size. At most
    /// `memory_limit`. Default: `"1MiB"`.
    pub max_object_size: Option<Spanned<ByteSize>>,
    /// How long a cacheable response with no freshness information at all (no `max-age`,
    /// `s-maxage`, `Expires` or `Last-Modified`) stays fresh (`"1h"`), as NetScaler's
    /// `weakPosRelExpiry`. Default: `"0s"` (stored, but revalidated before every use).
    pub default_expiry: Option<Spanned<DurationValue>>,
    /// Heuristic freshness of a response with `Last-Modified` but no explicit expiry, as a
    /// percentage of the time since it was last modified (RFC 9111 §4.2.2), 0–100, as
    /// NetScaler's `heurExpiryParam`. Default: 10.
    pub heuristic_expiry: Option<Spanned<u32>>,
    /// Keep every response of this group fresh for exactly this long, whatever its caching
    /// headers say (`Cache-Control: private, no-cache`, no-store, or nothing) — NetScaler's
    /// `relExpiry`. With `"1s"` this is the *flash cache* of seed 003: a dynamic page costs the
    /// servers about one request per second whatever the load (concurrent misses wait for
    /// one fetch). Responses to requests with `Authorization` and responses with `Set-Cookie`
    /// still follow `allow_authorization` and `strip_cookies`. Default: none (the headers
    /// decide).
    pub force_expiry: Option<Spanned<DurationValue>>,
    /// Store responses that set cookies, without their `Set-Cookie` fields (the client whose
    /// request fetched it still gets them), as NetScaler's `removeCookies YES`; `false` never
    /// stores a response with `Set-Cookie`. Default: false.
    pub strip_cookies: Option<bool>,
    /// Serve and store responses to requests that carry `Authorization` (every client then gets
    /// what the first one was sent: only for content that does not depend on who asks).
    /// Default: false (such requests go to the servers, RFC 9111 §3.5).
    pub allow_authorization: Option<bool>,
    /// Ignore the client's `Cache-Control` and `Pragma` request directives (`no-cache` reloads,
    /// `max-age=0`), as NetScaler's `ignoreReqCachingHdrs`: a client cannot make the cache go
    /// to the servers. Default: false.
    pub ignore_client_no_cache: Option<bool>,
    /// Concurrent misses for one URL wait for the first one's fetch instead of going to the
    /// servers themselves. Default: true.
    pub coalesce: Option<bool>,
    /// How long a request may wait for another's fetch before it goes to the servers itself
    /// (`"5s"`). Default: `"5s"`.
    pub coalesce_wait: Option<Spanned<DurationValue>>,
    /// Serve a stale response for up to this long past its freshness while it is revalidated in
    /// the background (RFC 5861), when the response itself does not say
    /// `stale-while-revalidate`. Default: `"0s"`.
    pub stale_while_revalidate: Option<Spanned<DurationValue>>,
    /// Serve a stale response for up to this long past its freshness when the servers cannot
    /// be reached or answer 500, 502, 503 or 504 (RFC 5861), when the response itself does not
    /// say `stale-if-error`. Default: `"0s"`.
    pub stale_if_error: Option<Spanned<DurationValue>>,
}

/// `[[cache.policy]]`: requests (and responses, with `content_type`) matching every condition
/// given are cached in `group`, or never cached with `action = "bypass"`. Only GET and HEAD
/// requests are ever cached; a HEAD is answered from a stored GET response.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachePolicySection {
    /// The policy's name in logs. Default: `policy-N` (N counts from 1 in file order).
    pub name: Option<Spanned<String>>,
    /// `"cache"` (store in `group`) or `"bypass"` (never cache). Default: `"cache"`.
    pub action: Option<Spanned<String>>,
    /// The content group: required with `"cache"`, refused with `"bypass"`.
    pub group: Option<Spanned<String>>,
    /// Host (port ignored, case-insensitive): `"www.example.com"` or `"*.example.com"`.
    pub host: Option<Spanned<String>>,
    /// The path (before `?`) equals this.
    pub path: Option<Spanned<String>>,
    /// The path starts with this.
    pub path_prefix: Option<Spanned<String>>,
    /// The path contains this.
    pub path_contains: Option<Spanned<String>>,
    /// The path matches this regular expression (Rust `regex` syntax, unanchored).
    pub path_regex: Option<Spanned<String>>,
    /// The path's extension is one of these, case-insensitive, without the dot (`["jpg",
    /// "gif"]`).
    pub path_extension: Option<Spanned<Vec<String>>>,
    /// The method is one of these (`["GET"]`); GET and HEAD are the only ones cached.
    pub method: Option<Spanned<Vec<String>>>,
    /// A request header is present (`{ name = "X-Beta" }`), equals a value (`value = "1"`), or
    /// matches a regular expression (`regex = "^1"`).
    pub header: Option<Spanned<HeaderMatchSection>>,
    /// A cookie of the request is present (`{ name = "beta" }`), equals a value (`value =
    /// "1"`), or matches a regular expression (`regex = "^v2"`); the value is compared as sent
    /// (without the quotes a quoted value has).
    pub cookie: Option<Spanned<HeaderMatchSection>>,
    /// A query parameter is present (`{ name = "version" }`), equals a value (`value = "2"`),
    /// or matches a regular expression; the first parameter of that name counts, compared as
    /// received (not percent-decoded, as the path is).
    pub query: Option<Spanned<HeaderMatchSection>>,
    /// The response's `Content-Type` (without parameters, case-insensitive) starts with one of
    /// these (`["image/", "application/javascript"]`), as NetScaler's `RES.HTTP.HEADER
    /// Content-Type CONTAINS`. Such a policy is decided when the response arrives; the lookup
    /// tries its group beside the groups of the policies before it.
    pub content_type: Option<Spanned<Vec<Spanned<String>>>>,
}
