//! The validated `[cache]` section: the ADC's integrated HTTP cache ([`CacheConfig`]), its
//! content groups ([`Group`]) and ordered policies ([`Policy`]).
//!
//! This module owns the one conversion from [`CacheSection`] and its checks: names (unique
//! groups, did-you-mean for references from policies, `default_group` and `virtual_servers`),
//! sizes (a group's `max_object_size` within its `memory_limit`), percentages, the policies'
//! request conditions (the content-switching conditions of [`crate::adc`], checked by the same
//! code) and content types, and combinations that cannot work (a group on a `bypass` policy, a
//! `tcp` virtual server in `virtual_servers`). Group memory limits that add up to more than the
//! cache's are scaled down here, so the proxy's stores never hold more than `memory_limit`
//! together. The proxy (`headway-proxy::cache`) takes these types as they are.
//!
//! Entry point: [`attach`], called by `Config::try_from` after [`crate::adc`] built the
//! virtual servers.

use std::collections::HashMap;
use std::time::Duration;

use toml::Spanned;

use crate::adc::{conditions, AdcConfig, Condition, ConditionFields, VirtualServerKind};
use crate::config::{check_name, invalid, ConfigError};
use crate::file::{CachePolicySection, CacheSection, ContentGroupSection, Origin};
use crate::suggest::did_you_mean;

/// Default memory of the whole cache: 256 MiB.
pub const DEFAULT_MEMORY_LIMIT: u64 = 256 << 20;
/// Default largest stored body: 1 MiB.
pub const DEFAULT_MAX_OBJECT_SIZE: u64 = 1 << 20;
/// Default heuristic freshness: 10 % of the time since `Last-Modified` (RFC 9111 §4.2.2).
pub const DEFAULT_HEURISTIC_PERCENT: u32 = 10;
/// Default longest wait for another request's fetch: 5 s.
pub const DEFAULT_COALESCE_WAIT: Duration = Duration::from_secs(5);

/// The integrated cache.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// Memory for all groups together, bytes (> 0); the groups' effective limits add up to at
    /// most this.
    pub memory_limit: u64,
    /// The `Via` field value added (`1.1 headway`); `None` adds none.
    pub via: Option<String>,
    /// The virtual servers using the cache (names of `http`/`https` ones); `None` = all of them.
    pub virtual_servers: Option<Vec<String>>,
    /// The group (index into `groups`) of requests no policy matches; `None` = not cached.
    pub default_group: Option<usize>,
    /// The content groups, in file order; names unique, at least one.
    pub groups: Vec<Group>,
    /// The policies, in file order (first match wins); groups known.
    pub policies: Vec<Policy>,
}

impl CacheConfig {
    /// Whether virtual server `name` uses the cache.
    pub fn serves(&self, name: &str) -> bool {
        self.virtual_servers
            .as_ref()
            .is_none_or(|v| v.iter().any(|n| n == name))
    }

    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }
}

/// A content group.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Its name.
    pub name: String,
    /// Memory for its stored responses, bytes: its own limit, scaled down when the groups'
    /// limits add up to more than the cache's (> 0).
    pub memory_limit: u64,
    /// The largest body stored, bytes (1 – `memory_limit` as written).
    pub max_object_size: u64,
    /// Freshness of a cacheable response without any freshness information.
    pub default_expiry: Duration,
    /// Heuristic freshness as a fraction of the time since `Last-Modified` (0–1).
    pub heuristic: f32,
    /// Fixed freshness of every response, whatever its headers say (the flash cache).
    pub force_expiry: Option<Duration>,
    /// Store responses with `Set-Cookie`, without those fields.
    pub strip_cookies: bool,
    /// Serve and store responses to requests with `Authorization`.
    pub allow_authorization: bool,
    /// Ignore the client's `Cache-Control` / `Pragma` request directives.
    pub ignore_client_no_cache: bool,
    /// Concurrent misses wait for one fetch.
    pub coalesce: bool,
    /// Longest wait for another request's fetch.
    pub coalesce_wait: Duration,
    /// Default `stale-while-revalidate` window.
    pub stale_while_revalidate: Duration,
    /// Default `stale-if-error` window.
    pub stale_if_error: Duration,
}

/// A policy: requests (and responses) matching it are cached in a group, or never cached.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Its name.
    pub name: String,
    /// What happens to matching requests.
    pub action: Action,
    /// Request conditions, all of which must hold (none = every request).
    pub conditions: Vec<Condition>,
    /// Response `Content-Type` prefixes (lower case, no parameters), one of which must match;
    /// empty = decided on the request alone.
    pub content_types: Vec<String>,
}

/// A policy's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Cache in this group (an index into [`CacheConfig::groups`]).
    Cache(usize),
    /// Never cache.
    Bypass,
}

/// Validates `[cache]` (if present) into `adc.cache`.
pub(crate) fn attach(
    adc: &mut AdcConfig,
    section: Option<&Spanned<CacheSection>>,
    origin: &Origin,
) -> Result<(), ConfigError> {
    let Some(section) = section else {
        return Ok(());
    };
    let at = |span: std::ops::Range<usize>| origin.locate(Some(span));
    let s = section.get_ref();
    if s.enabled == Some(false) {
        return Ok(());
    }
    let memory_limit = match &s.memory_limit {
        None => DEFAULT_MEMORY_LIMIT,
        Some(m) if m.get_ref().bytes() == 0 => {
            return Err(invalid(
                at(m.span()),
                "cache memory_limit must be larger than 0: give a size such as \"256MiB\", or \
                 enabled = false"
                    .into(),
            ))
        }
        Some(m) => m.get_ref().bytes(),
    };
    let via = match &s.via {
        None => Some("1.1 headway".to_string()),
        Some(v) if v.get_ref().is_empty() => None,
        Some(v) => {
            let ok = v
                .get_ref()
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b',' && b != b'(' && b != b')');
            if !ok {
                return Err(invalid(
                    at(v.span()),
                    format!(
                        "cache via `{}` is not a pseudonym: use letters, digits and \
                         punctuation without spaces, commas or parentheses (\"headway\")",
                        v.get_ref()
                    ),
                ));
            }
            Some(format!("1.1 {}", v.get_ref()))
        }
    };
    if s.group.is_empty() {
        return Err(invalid(
            at(section.span()),
            "[cache] has no content group: add a [[cache.group]] with a name (and a \
             [[cache.policy]] or `default_group` that uses it)"
                .into(),
        ));
    }
    let mut groups = Vec::with_capacity(s.group.len());
    let mut lines: HashMap<String, Option<usize>> = HashMap::new();
    for g in &s.group {
        let line = at(g.name.span()).line;
        if let Some(first) = lines.insert(g.name.get_ref().clone(), line) {
            return Err(invalid(
                at(g.name.span()),
                format!(
                    "cache group name `{}` is used twice{}: give each group its own name",
                    g.name.get_ref(),
                    first
                        .map(|l| format!(" (first on line {l})"))
                        .unwrap_or_default()
                ),
            ));
        }
        groups.push(group(g, memory_limit, origin)?);
    }
    // The groups' limits may add up to more than the whole cache's (NetScaler's seed config
    // gives 256 MB groups under a 200 MB cache): each then gets its share in proportion.
    let total: u128 = groups.iter().map(|g| u128::from(g.memory_limit)).sum();
    if total > u128::from(memory_limit) {
        for g in &mut groups {
            let share = u128::from(g.memory_limit) * u128::from(memory_limit) / total;
            g.memory_limit = u64::try_from(share).unwrap_or(memory_limit).max(1);
        }
    }
    let names: Vec<&str> = s.group.iter().map(|g| g.name.get_ref().as_str()).collect();
    let find = |n: &Spanned<String>| -> Result<usize, ConfigError> {
        names.iter().position(|x| *x == n.get_ref()).ok_or_else(|| {
            let hint = match did_you_mean(n.get_ref(), &names) {
                Some(x) => format!("did you mean `{x}`?"),
                None => format!(
                    "the groups are {}",
                    names
                        .iter()
                        .map(|x| format!("`{x}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            invalid(
                at(n.span()),
                format!("unknown cache group `{}`: {hint}", n.get_ref()),
            )
        })
    };
    let default_group = s.default_group.as_ref().map(&find).transpose()?;
    let mut policies = Vec::with_capacity(s.policy.len());
    for (i, p) in s.policy.iter().enumerate() {
        policies.push(policy(p, i, &find, origin)?);
    }
    let virtual_servers = match &s.virtual_servers {
        None => None,
        Some(list) => {
            let mut out = Vec::new();
            for n in list.get_ref() {
                let Some(v) = adc.virtual_servers.iter().find(|v| v.name == *n.get_ref()) else {
                    let known: Vec<&str> = adc
                        .virtual_servers
                        .iter()
                        .map(|v| v.name.as_str())
                        .collect();
                    let hint = did_you_mean(n.get_ref(), &known)
                        .map(|x| format!(": did you mean `{x}`?"))
                        .unwrap_or_default();
                    return Err(invalid(
                        at(n.span()),
                        format!("unknown virtual server `{}`{hint}", n.get_ref()),
                    ));
                };
                if v.kind == VirtualServerKind::Tcp {
                    return Err(invalid(
                        at(n.span()),
                        format!(
                            "virtual server `{}` is `tcp`: only `http` and `https` virtual \
                             servers can use the cache",
                            v.name
                        ),
                    ));
                }
                out.push(v.name.clone());
            }
            Some(out)
        }
    };
    adc.cache = Some(CacheConfig {
        memory_limit,
        via,
        virtual_servers,
        default_group,
        groups,
        policies,
    });
    Ok(())
}

fn group(g: &ContentGroupSection, cache_limit: u64, origin: &Origin) -> Result<Group, ConfigError> {
    let at = |span: std::ops::Range<usize>| origin.locate(Some(span));
    let name = g.name.get_ref().clone();
    check_name(&name, "cache group").map_err(|m| invalid(at(g.name.span()), m))?;
    let memory_limit = match &g.memory_limit {
        None => cache_limit,
        Some(m) if m.get_ref().bytes() == 0 => {
            return Err(invalid(
                at(m.span()),
                format!("cache group `{name}`: memory_limit must be larger than 0"),
            ))
        }
        Some(m) => m.get_ref().bytes(),
    };
    let max_object_size = match &g.max_object_size {
        None => DEFAULT_MAX_OBJECT_SIZE.min(memory_limit),
        Some(m) if m.get_ref().bytes() == 0 || m.get_ref().bytes() > memory_limit => {
            return Err(invalid(
                at(m.span()),
                format!(
                    "cache group `{name}`: max_object_size {} must be larger than 0 and at most \
                     the group's memory_limit ({})",
                    m.get_ref(),
                    headway_core::ByteSize::new(memory_limit)
                ),
            ))
        }
        Some(m) => m.get_ref().bytes(),
    };
    let heuristic = match &g.heuristic_expiry {
        None => DEFAULT_HEURISTIC_PERCENT,
        Some(p) if *p.get_ref() > 100 => {
            return Err(invalid(
                at(p.span()),
                format!(
                    "cache group `{name}`: heuristic_expiry {} is out of range: use a \
                     percentage from 0 to 100",
                    p.get_ref()
                ),
            ))
        }
        Some(p) => *p.get_ref(),
    };
    let force_expiry = match &g.force_expiry {
        None => None,
        Some(d) if d.get_ref().0.is_zero() => {
            return Err(invalid(
                at(d.span()),
                format!(
                    "cache group `{name}`: force_expiry must be longer than 0 (\"1s\" for a \
                     flash cache); leave it out to let the headers decide"
                ),
            ))
        }
        Some(d) => Some(d.get_ref().0),
    };
    let coalesce_wait = match &g.coalesce_wait {
        None => DEFAULT_COALESCE_WAIT,
        Some(d) if d.get_ref().0.is_zero() => {
            return Err(invalid(
                at(d.span()),
                format!(
                    "cache group `{name}`: coalesce_wait must be longer than 0; set coalesce = \
                     false to send every miss to the servers"
                ),
            ))
        }
        Some(d) => d.get_ref().0,
    };
    let dur = |v: &Option<Spanned<crate::file::DurationValue>>| {
        v.as_ref().map_or(Duration::ZERO, |d| d.get_ref().0)
    };
    Ok(Group {
        name,
        memory_limit,
        max_object_size,
        default_expiry: dur(&g.default_expiry),
        heuristic: heuristic as f32 / 100.0,
        force_expiry,
        strip_cookies: g.strip_cookies.unwrap_or(false),
        allow_authorization: g.allow_authorization.unwrap_or(false),
        ignore_client_no_cache: g.ignore_client_no_cache.unwrap_or(false),
        coalesce: g.coalesce.unwrap_or(true),
        coalesce_wait,
        stale_while_revalidate: dur(&g.stale_while_revalidate),
        stale_if_error: dur(&g.stale_if_error),
    })
}

fn policy(
    p: &CachePolicySection,
    index: usize,
    find: &dyn Fn(&Spanned<String>) -> Result<usize, ConfigError>,
    origin: &Origin,
) -> Result<Policy, ConfigError> {
    let at = |span: std::ops::Range<usize>| origin.locate(Some(span));
    let name = match &p.name {
        None => format!("policy-{}", index + 1),
        Some(n) => {
            check_name(n.get_ref(), "cache policy").map_err(|m| invalid(at(n.span()), m))?;
            n.get_ref().clone()
        }
    };
    let action = match (
        p.action.as_ref().map(|a| (a.get_ref().as_str(), a)),
        &p.group,
    ) {
        (None | Some(("cache", _)), Some(g)) => Action::Cache(find(g)?),
        (None | Some(("cache", _)), None) => {
            return Err(invalid(
                at(p.action.as_ref().map_or(0..0, Spanned::span)),
                format!(
                    "cache policy `{name}` caches but names no group: add group = \"…\" (a \
                     [[cache.group]]), or action = \"bypass\""
                ),
            ))
        }
        (Some(("bypass", _)), None) => Action::Bypass,
        (Some(("bypass", _)), Some(g)) => {
            return Err(invalid(
                at(g.span()),
                format!(
                    "cache policy `{name}` bypasses the cache, so it takes no group: remove \
                     `group`, or use action = \"cache\""
                ),
            ))
        }
        (Some((other, a)), _) => {
            return Err(invalid(
                at(a.span()),
                format!(
                    "cache policy `{name}`: unknown action `{other}`: use \"cache\" or \
                     \"bypass\""
                ),
            ))
        }
    };
    let conditions = conditions(
        &ConditionFields {
            host: &p.host,
            path: &p.path,
            path_prefix: &p.path_prefix,
            path_contains: &p.path_contains,
            path_regex: &p.path_regex,
            path_extension: &p.path_extension,
            method: &p.method,
            header: &p.header,
            cookie: &p.cookie,
            query: &p.query,
            source: &None,
            source_not: &None,
        },
        &format!("cache policy `{name}`"),
        origin,
    )?;
    let mut content_types = Vec::new();
    if let Some(list) = &p.content_type {
        if list.get_ref().is_empty() {
            return Err(invalid(
                at(list.span()),
                format!(
                    "cache policy `{name}`: content_type needs media types or prefixes such as \
                     [\"image/\", \"text/css\"]"
                ),
            ));
        }
        for t in list.get_ref() {
            let v = t
                .get_ref()
                .trim()
                .trim_end_matches('*')
                .to_ascii_lowercase();
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_graphic() && b != b';') {
                return Err(invalid(
                    at(t.span()),
                    format!(
                        "cache policy `{name}`: `{}` is not a media type or prefix (\"image/\", \
                         \"text/css\")",
                        t.get_ref()
                    ),
                ));
            }
            content_types.push(v);
        }
    }
    Ok(Policy {
        name,
        action,
        conditions,
        content_types,
    })
}

#[cfg(test)]
mod tests {
    use crate::Config;

    use super::*;

    const BASE: &str = "[[server_group]]\nname = \"web\"\n[[server_group.server]]\naddress = \
                        \"127.0.0.1:8080\"\n\n[[virtual_server]]\nname = \"front\"\nkind = \
                        \"http\"\nlisten = \"127.0.0.1:8000\"\ngroup = \"web\"\n\n\
                        [[virtual_server]]\nname = \"l4\"\nkind = \"tcp\"\nlisten = \
                        \"127.0.0.1:8001\"\ngroup = \"web\"\n\n";

    fn parse(cache: &str) -> Result<Option<CacheConfig>, String> {
        Config::parse(&format!("{BASE}{cache}"), "t.toml")
            .map(|c| c.adc.cache)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_seed_configuration_reads_as_netscaler_wrote_it() {
        let c = parse(
            r#"
[cache]
memory_limit = "200MB"
via = "NS-CACHE-6.1"

[[cache.group]]
name = "images"
memory_limit = "256MB"
max_object_size = "500KB"

[[cache.group]]
name = "search"
memory_limit = "100MB"
max_object_size = "5000KB"
heuristic_expiry = 10

[[cache.group]]
name = "live"
force_expiry = "1s"
ignore_client_no_cache = true

[[cache.policy]]
name = "no-post"
method = ["POST"]
action = "bypass"

[[cache.policy]]
name = "jpeg"
path_extension = ["jpeg", "jpg", "gif"]
group = "images"

[[cache.policy]]
path = "/searchcenter/Pages/default.aspx"
group = "search"

[[cache.policy]]
content_type = ["application/x-javascript", "image/*"]
group = "images"

[[cache.policy]]
path_prefix = "/live/"
group = "live"
"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.memory_limit, 200_000_000);
        assert_eq!(c.via.as_deref(), Some("1.1 NS-CACHE-6.1"));
        assert_eq!(c.virtual_servers, None);
        assert!(c.serves("front"));
        // 256 + 100 + 200 (the default: the cache's limit) > 200: scaled in proportion.
        let sum: u64 = c.groups.iter().map(|g| g.memory_limit).sum();
        assert!(sum <= c.memory_limit, "{sum}");
        assert_eq!(c.groups[0].memory_limit, 256_000_000 * 200 / 556);
        assert_eq!(c.groups[0].max_object_size, 500_000);
        assert_eq!(c.groups[2].force_expiry, Some(Duration::from_secs(1)));
        assert!(c.groups[2].ignore_client_no_cache && c.groups[2].coalesce);
        assert_eq!(c.policies.len(), 5);
        assert_eq!(c.policies[0].action, Action::Bypass);
        assert_eq!(c.policies[1].action, Action::Cache(0));
        assert_eq!(c.policies[2].name, "policy-3");
        assert_eq!(
            c.policies[3].content_types,
            ["application/x-javascript", "image/"]
        );
        assert!(c.policies[3].conditions.is_empty());
        assert_eq!(c.policies[4].action, Action::Cache(2));
        assert_eq!(c.default_group, None);
    }

    #[test]
    fn no_section_or_disabled_means_no_cache() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(
            parse("[cache]\nenabled = false\n[[cache.group]]\nname = \"a\"\n").unwrap(),
            None
        );
        let c =
            parse("[cache]\nvia = \"\"\ndefault_group = \"a\"\n[[cache.group]]\nname = \"a\"\n")
                .unwrap()
                .unwrap();
        assert_eq!(c.via, None);
        assert_eq!(c.default_group, Some(0));
        assert_eq!(c.groups[0].memory_limit, DEFAULT_MEMORY_LIMIT);
        assert_eq!(c.groups[0].max_object_size, DEFAULT_MAX_OBJECT_SIZE);
        assert!((c.groups[0].heuristic - 0.1).abs() < 1e-6);
    }

    #[test]
    fn mistakes_are_reported_with_their_line_and_the_fix() {
        let cases: &[(&str, &str)] = &[
            ("[cache]\n", "has no content group"),
            (
                "[cache]\n[[cache.group]]\nname = \"a\"\n[[cache.group]]\nname = \"a\"\n",
                "used twice (first on line",
            ),
            (
                "[cache]\n[[cache.group]]\nname = \"images\"\n[[cache.policy]]\ngroup = \"imgs\"\n",
                "did you mean `images`?",
            ),
            (
                "[cache]\ndefault_group = \"x\"\n[[cache.group]]\nname = \"a\"\n",
                "unknown cache group `x`",
            ),
            (
                "[cache]\n[[cache.group]]\nname = \"a\"\n[[cache.policy]]\npath = \"/\"\n",
                "names no group",
            ),
            (
                "[cache]\n[[cache.group]]\nname = \"a\"\n[[cache.policy]]\naction = \"bypass\"\ngroup = \"a\"\n",
                "takes no group",
            ),
            (
                "[cache]\n[[cache.group]]\nname = \"a\"\n[[cache.policy]]\naction = \"store\"\ngroup = \"a\"\n",
                "unknown action `store`",
            ),
            (
                "[cache]\n[[cache.group]]\nname = \"a\"\nmemory_limit = \"1MiB\"\nmax_object_size = \"2MiB\"\n",
                "at most the group's memory_limit",
            ),
            (
                "[cache]\n[[cache.group]]\nname = \"a\"\nheuristic_expiry = 150\n",
                "percentage from 0 to 100",
            ),
            (
                "[cache]\n[[cache.group]]\nname = \"a\"\nforce_expiry = \"0s\"\n",
                "force_expiry must be longer than 0",
            ),
            (
                "[cache]\nvirtual_servers = [\"l4\"]\n[[cache.group]]\nname = \"a\"\n",
                "is `tcp`",
            ),
            (
                "[cache]\nvirtual_servers = [\"frnt\"]\n[[cache.group]]\nname = \"a\"\n",
                "did you mean `front`?",
            ),
            (
                "[cache]\n[[cache.group]]\nname = \"a\"\n[[cache.policy]]\ngroup = \"a\"\npath_regex = \"(\"\n",
                "cache policy `policy-1`: not a valid regular expression",
            ),
            (
                "[cache]\n[[cache.group]]\nname = \"a\"\n[[cache.policy]]\ngroup = \"a\"\ncontent_type = [\"text/html; charset\"]\n",
                "not a media type",
            ),
            (
                "[cache]\nvia = \"my cache\"\n[[cache.group]]\nname = \"a\"\n",
                "not a pseudonym",
            ),
            (
                "[cache]\n[[cache.group]]\nname = \"a\"\nmax_age = 3\n",
                "unknown field `max_age`",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text).expect_err(text);
            assert!(e.contains(want), "{text}\n→ {e}\n(wanted {want:?})");
            assert!(e.starts_with("t.toml:"), "{e}");
        }
    }
}
