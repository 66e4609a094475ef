//! The ADC's integrated cache in the admin API: purges (`POST /api/v1/cache/purge?…`), the
//! `adc_cache_*` Prometheus families and the `headway ctl cache` table.
//!
//! | metric | labels |
//! |---|---|
//! | `adc_cache_hits_total`, `adc_cache_misses_total`, `adc_cache_stale_total`, `adc_cache_coalesced_total`, `adc_cache_not_modified_total`, `adc_cache_revalidations_total`, `adc_cache_revalidated_total`, `adc_cache_stores_total`, `adc_cache_not_stored_total`, `adc_cache_evictions_total`, `adc_cache_purged_total`, `adc_cache_served_bytes_total` | `group` |
//! | `adc_cache_stored_bytes`, `adc_cache_objects`, `adc_cache_memory_limit_bytes`, `adc_cache_hit_ratio` | `group` |
//! | `adc_cache_bypassed_total` | none |
//!
//! A purge names exactly one of: a URL (`url=/path?query`), a prefix (`prefix=/images/`), a
//! group (`group=images`) or everything (`all=true`); `host=` narrows a URL or prefix to one
//! host (any host without it).

use std::io::Write;

pub use headway_proxy::cache::{CacheGroupSnapshot, CacheSnapshot, Purge, PurgeReport};
use prometheus_client::encoding::DescriptorEncoder;
use serde::{Deserialize, Serialize};

use crate::adc::AdcSnapshot;

/// The query of `POST /api/v1/cache/purge`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeQuery {
    /// One URL: its path and query, exactly as requested.
    pub url: Option<String>,
    /// Every URL whose path starts with this.
    pub prefix: Option<String>,
    /// Only this host (with `url` or `prefix`).
    pub host: Option<String>,
    /// A whole content group.
    pub group: Option<String>,
    /// Everything.
    pub all: Option<bool>,
}

impl PurgeQuery {
    /// The purge it names, or why it names none.
    pub fn purge(&self) -> Result<Purge, String> {
        let host = self.host.clone().filter(|h| !h.is_empty());
        let all = self.all == Some(true);
        let named = [
            self.url.is_some(),
            self.prefix.is_some(),
            self.group.is_some(),
            all,
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if named != 1 {
            return Err(
                "name exactly one of url=/path?query, prefix=/path/, group=NAME or all=true \
                 (host=NAME narrows url and prefix)"
                    .into(),
            );
        }
        if host.is_some() && (self.group.is_some() || all) {
            return Err("host= narrows url= or prefix= only".into());
        }
        let path = |p: &String, what: &str| {
            if p.starts_with('/') {
                Ok(p.clone())
            } else {
                Err(format!("{what} must start with `/` (got `{p}`)"))
            }
        };
        Ok(match (&self.url, &self.prefix, &self.group) {
            (Some(u), _, _) => Purge::Url {
                host,
                target: path(u, "url")?,
            },
            (_, Some(p), _) => Purge::Prefix {
                host,
                prefix: path(p, "prefix")?,
            },
            (_, _, Some(g)) => Purge::Group(g.clone()),
            _ => Purge::All,
        })
    }

    /// The query string for this purge (`url=…&host=…`), percent-encoded.
    pub fn to_query(&self) -> String {
        let mut parts = Vec::new();
        let mut add = |k: &str, v: &str| parts.push(format!("{k}={}", encode(v)));
        if let Some(v) = &self.url {
            add("url", v);
        }
        if let Some(v) = &self.prefix {
            add("prefix", v);
        }
        if let Some(v) = &self.host {
            add("host", v);
        }
        if let Some(v) = &self.group {
            add("group", v);
        }
        if self.all == Some(true) {
            add("all", "true");
        }
        parts.join("&")
    }
}

/// Percent-encodes a query value (unreserved characters and `/` stay).
fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `adc_cache_*` families (nothing when no cache is configured).
pub(crate) fn metrics(
    enc: &mut DescriptorEncoder<'_>,
    s: &AdcSnapshot,
) -> Result<(), std::fmt::Error> {
    let Some(c) = &s.cache else {
        return Ok(());
    };
    let label = |g: &CacheGroupSnapshot| vec![("group", g.name.clone())];
    type Field = fn(&CacheGroupSnapshot) -> u64;
    let counters: [(&str, &str, Field); 12] = [
        (
            "adc_cache_hits",
            "Requests answered from a stored response",
            |g| g.hits,
        ),
        (
            "adc_cache_misses",
            "Requests that went to the servers for a response the group may store",
            |g| g.misses,
        ),
        (
            "adc_cache_stale",
            "Requests answered from a stale response (stale-while-revalidate, stale-if-error)",
            |g| g.stale,
        ),
        (
            "adc_cache_coalesced",
            "Requests that waited for another's fetch and were answered from it",
            |g| g.coalesced,
        ),
        (
            "adc_cache_not_modified",
            "Hits answered 304 Not Modified",
            |g| g.not_modified,
        ),
        (
            "adc_cache_revalidations",
            "Conditional requests sent to revalidate a stale response",
            |g| g.revalidations,
        ),
        (
            "adc_cache_revalidated",
            "Revalidations answered 304 by the server",
            |g| g.revalidated,
        ),
        ("adc_cache_stores", "Responses stored", |g| g.stores),
        (
            "adc_cache_not_stored",
            "Responses not stored (rules, size, cut short)",
            |g| g.not_stored,
        ),
        (
            "adc_cache_evictions",
            "Objects evicted to stay within the memory limit",
            |g| g.evictions,
        ),
        ("adc_cache_purged", "Objects removed by purges", |g| {
            g.purged
        }),
        (
            "adc_cache_served_bytes",
            "Body bytes sent from stored responses",
            |g| g.bytes_served,
        ),
    ];
    for (name, help, f) in counters {
        let values: Vec<_> = c.groups.iter().map(|g| (label(g), f(g))).collect();
        crate::adc::counters(enc, name, help, &values)?;
    }
    type Gauge = fn(&CacheGroupSnapshot) -> f64;
    let gauges: [(&str, &str, Gauge); 4] = [
        (
            "adc_cache_stored_bytes",
            "Bytes held by the group's stored responses",
            |g| g.stored_bytes as f64,
        ),
        ("adc_cache_objects", "Entries held by the group", |g| {
            g.objects as f64
        }),
        (
            "adc_cache_memory_limit_bytes",
            "The group's memory limit",
            |g| g.memory_limit as f64,
        ),
        (
            "adc_cache_hit_ratio",
            "Hits, stale and coalesced answers over all lookups",
            |g| g.hit_ratio().unwrap_or(0.0),
        ),
    ];
    for (name, help, f) in gauges {
        let values: Vec<_> = c.groups.iter().map(|g| (label(g), f(g))).collect();
        crate::adc::gauges(enc, name, help, &values)?;
    }
    crate::adc::counters(
        enc,
        "adc_cache_bypassed",
        "Requests no policy let the cache keep",
        &[(vec![], c.bypassed)],
    )
}

/// The `headway ctl cache` table: one row per content group.
pub fn write_cache(out: &mut dyn Write, c: &CacheSnapshot) -> std::io::Result<()> {
    writeln!(
        out,
        "cache: {} of {} stored, {} request(s) bypassed",
        mib(c.stored_bytes),
        mib(c.memory_limit),
        c.bypassed
    )?;
    let mut rows = vec![[
        "GROUP",
        "STORED",
        "LIMIT",
        "OBJECTS",
        "HITS",
        "MISSES",
        "HIT%",
        "304",
        "STALE",
        "COALESCED",
        "REVAL(304)",
        "EVICTED",
        "SERVED",
    ]
    .map(String::from)
    .to_vec()];
    for g in &c.groups {
        rows.push(vec![
            match g.force_expiry_seconds {
                Some(s) => format!("{} (flash {s}s)", g.name),
                None => g.name.clone(),
            },
            mib(g.stored_bytes),
            mib(g.memory_limit),
            g.objects.to_string(),
            g.hits.to_string(),
            g.misses.to_string(),
            g.hit_ratio()
                .map_or("–".into(), |r| format!("{:.1}", r * 100.0)),
            g.not_modified.to_string(),
            g.stale.to_string(),
            g.coalesced.to_string(),
            format!("{}({})", g.revalidations, g.revalidated),
            g.evictions.to_string(),
            mib(g.bytes_served),
        ]);
    }
    crate::adc::table(out, &rows)
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purge_names_exactly_one_thing() {
        let q = |url: Option<&str>,
                 prefix: Option<&str>,
                 host: Option<&str>,
                 group: Option<&str>,
                 all: bool| PurgeQuery {
            url: url.map(Into::into),
            prefix: prefix.map(Into::into),
            host: host.map(Into::into),
            group: group.map(Into::into),
            all: all.then_some(true),
        };
        assert_eq!(
            q(Some("/a?b=1"), None, Some("www.x"), None, false).purge(),
            Ok(Purge::Url {
                host: Some("www.x".into()),
                target: "/a?b=1".into()
            })
        );
        assert_eq!(
            q(None, Some("/img/"), None, None, false).purge(),
            Ok(Purge::Prefix {
                host: None,
                prefix: "/img/".into()
            })
        );
        assert_eq!(
            q(None, None, None, Some("images"), false).purge(),
            Ok(Purge::Group("images".into()))
        );
        assert_eq!(q(None, None, None, None, true).purge(), Ok(Purge::All));
        assert!(q(None, None, None, None, false).purge().is_err());
        assert!(q(Some("/a"), Some("/b"), None, None, false)
            .purge()
            .is_err());
        assert!(q(None, None, Some("h"), Some("g"), false).purge().is_err());
        assert!(q(Some("a"), None, None, None, false)
            .purge()
            .unwrap_err()
            .contains("start with `/`"));
        let query = q(Some("/a b?c=1&d"), None, Some("h"), None, false).to_query();
        assert_eq!(query, "url=/a%20b%3Fc%3D1%26d&host=h");
    }

    #[test]
    fn the_table_has_a_row_per_group() {
        let c = CacheSnapshot {
            memory_limit: 256 << 20,
            stored_bytes: 3 << 20,
            bypassed: 4,
            groups: vec![CacheGroupSnapshot {
                name: "live".into(),
                force_expiry_seconds: Some(1.0),
                hits: 99,
                misses: 1,
                ..CacheGroupSnapshot::default()
            }],
        };
        let mut out = Vec::new();
        write_cache(&mut out, &c).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("3.0 MiB of 256.0 MiB stored, 4 request(s) bypassed"),
            "{text}"
        );
        assert!(text.contains("live (flash 1s)"), "{text}");
        assert!(text.contains("99.0"), "{text}");
    }
}
