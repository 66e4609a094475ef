//! The ADC as the admin API sees it: the contract with whatever runs it ([`AdcControl`]), its
//! Prometheus collector ([`AdcCollector`]) and the `headway ctl adc` tables ([`write_adc`]).
//!
//! The JSON shapes are the proxy's own snapshot types ([`AdcSnapshot`] and its parts), so the
//! API, `headway ctl` and the metrics read one definition.
//!
//! ## Metrics (under the registry's prefix, `headway_`)
//!
//! | metric | labels |
//! |---|---|
//! | `adc_requests_total`, `adc_connections_total`, `adc_refused_connections_total`, `adc_denied_connections_total`, `adc_bad_proxy_headers_total`, `adc_rate_limited_total`, `adc_bad_requests_total`, `adc_upgrades_total` | `virtual_server` |
//! | `adc_rule_hits_total` | `virtual_server`, `rule` |
//! | `adc_rule_limited_total` | `virtual_server`, `rule` |
//! | `adc_rule_unauthorized_total` | `virtual_server`, `rule` |
//! | `adc_mirror_requests_total`, `adc_mirror_skipped_total`, `adc_mirror_failed_total` | `virtual_server`, `group` |
//! | `adc_mirror_responses_total` | `virtual_server`, `group`, `class` |
//! | `adc_responses_total` | `virtual_server`, `class` = `1xx` … `5xx` |
//! | `adc_bytes_total` | `virtual_server`, `direction` = `in` / `out` |
//! | `adc_active_connections`, `adc_tunnels` (upgraded connections open: WebSockets) | `virtual_server` |
//! | `adc_request_duration_seconds` (histogram) | `virtual_server` |
//! | `adc_group_requests_total`, `adc_group_queued_total`, `adc_group_queue_rejected_total`, `adc_group_no_server_total`, `adc_group_persistence_failovers_total` | `group` |
//! | `adc_group_waiting` | `group` |
//! | `adc_server_requests_total`, `adc_server_connect_failures_total`, `adc_server_failures_total`, `adc_server_retries_total`, `adc_server_resent_total` (requests sent again, besides `retries`, because the server's connection turned them away untouched: found closed, a stream refused or past a GOAWAY), `adc_server_ejections_total`, `adc_server_dns_failures_total` (background lookups of its DNS name that failed), `adc_server_connections_opened_total`, `adc_server_reused_total` | `group`, `server` |
//! | `adc_server_responses_total` | `group`, `server`, `class` |
//! | `adc_server_active`, `adc_server_up` (1/0), `adc_server_enabled` (1 enabled, 0.5 draining, 0 disabled), `adc_server_reuse_ratio`, `adc_server_idle_connections` | `group`, `server` |
//! | `adc_server_response_seconds` (histogram, time to response header) | `group`, `server` |
//! | `adc_config_generation`, `adc_reloads_failed_total` | none |
//! | `adc_access_log_dropped_total` (lines the writer was too far behind for), `adc_access_log_write_errors_total`, `adc_access_log_reopened_total` (rotations followed, `SIGUSR1`) | `log` (the file, `-` for standard output) |
//! | `adc_compression_responses_total` | `virtual_server`, `codec` = `zstd` / `br` / `gzip` |
//! | `adc_compression_whole_total` (of those, compressed in one call at the body's end) | `virtual_server`, `codec` |
//! | `adc_compression_bytes_total` (into and out of the compressor) | `virtual_server`, `codec`, `direction` = `in` / `out` |
//! | `adc_compression_ratio` (bytes in / bytes out, all codecs) | `virtual_server` |
//! | `adc_compression_bypassed_total`, `adc_compression_not_accepted_total` | `virtual_server` |
//! | `adc_compression_bypass_engaged` (1/0), `adc_compression_cpu_utilisation` (0–1, the bypass's source) | `virtual_server` |
//! | `adc_tls_handshakes_total` | `virtual_server`, `kind` = `full` / `resumed` |
//! | `adc_tls_handshake_failures_total` | `virtual_server`, `reason` (see [`TlsSnapshot::failures`]) |
//! | `adc_tls_versions_total` | `virtual_server`, `version` = `1.2` / `1.3` |
//! | `adc_tls_alpn_total` | `virtual_server`, `protocol` = `h2` / `http/1.1` / `none` |
//! | `adc_tls_sni_default_total`, `adc_tls_client_certificates_total` | `virtual_server` |
//! | `adc_tls_certificate_not_after_seconds` (expiry, Unix time) | `certificate` |

use std::future::Future;
use std::io::Write;
use std::pin::Pin;

pub use headway_proxy::stats::{CertificateSnapshot, TlsSnapshot};
use headway_proxy::stats::{HistogramSnapshot, LATENCY_BUCKETS};
pub use headway_proxy::{
    AccessLogSnapshot, AdcSnapshot, GroupSnapshot, ServerSnapshot, VirtualServerSnapshot,
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use serde::{Deserialize, Serialize};

/// A future the control returns (config changes run on the proxy's runtime).
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What the admin API needs from a running ADC. The binary implements it over its
/// `headway_proxy::Proxy` and config file; tests may implement it in memory.
pub trait AdcControl: Send + Sync + 'static {
    /// Configuration summary, state and counters.
    fn snapshot(&self) -> AdcSnapshot;
    /// Sets a server's administrative state: `enabled`, `disabled` or `draining`. `Err`
    /// carries a message and whether the group or server was not found (`true`) or the state
    /// was not understood (`false`).
    fn set_server_state(
        &self,
        group: &str,
        server: &str,
        state: &str,
    ) -> Result<(), (bool, String)>;
    /// Sets a server's weight (0–1000) until the config file gives it another. `Err` as for
    /// [`AdcControl::set_server_state`] (`false`: the weight is out of range).
    fn set_server_weight(
        &self,
        group: &str,
        server: &str,
        weight: u32,
    ) -> Result<(), (bool, String)>;
    /// The text of the running config file.
    fn config_text(&self) -> String;
    /// Validates `text` as a whole config file and applies its ADC sections live. `Err` is the
    /// message (with file, line and column for a bad file); nothing changed then.
    fn replace_config(&self, text: String) -> BoxFuture<Result<ReloadReport, String>>;
    /// Reads the config file from disk again and applies it like [`AdcControl::replace_config`].
    fn reload(&self) -> BoxFuture<Result<ReloadReport, String>>;
    /// Adds a server to a group of the running config, as if the file had it (validated and
    /// applied like [`AdcControl::replace_config`]; the running config's text gets it, so
    /// `config show` prints it). `Err` as for [`AdcControl::set_server_state`] (`true`: no
    /// such group; `false`: the server was refused, with the reason).
    fn add_server(
        &self,
        group: String,
        server: AddServerRequest,
    ) -> BoxFuture<Result<ReloadReport, (bool, String)>> {
        let _ = (group, server);
        Box::pin(async { Err((true, "servers cannot be added here".into())) })
    }
    /// Removes a server from a group of the running config (requests in flight to it finish).
    /// `Err` as for [`AdcControl::add_server`] (`true`: no such group or server).
    fn remove_server(
        &self,
        group: String,
        server: String,
    ) -> BoxFuture<Result<ReloadReport, (bool, String)>> {
        let _ = (group, server);
        Box::pin(async { Err((true, "servers cannot be removed here".into())) })
    }
    /// Removes what `purge` names from the integrated cache. `Err` carries a message and
    /// whether the thing named was not found (`true`: no cache, no such group).
    fn purge_cache(
        &self,
        purge: crate::cache::Purge,
    ) -> Result<crate::cache::PurgeReport, (bool, String)> {
        let _ = purge;
        Err((true, "no cache is configured: add a [cache] section".into()))
    }
}

/// The answer to a config change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReport {
    /// The new config generation.
    pub generation: u64,
    /// Virtual servers running now.
    pub virtual_servers: usize,
    /// Server groups running now.
    pub groups: usize,
}

/// `POST /api/v1/adc/groups/{group}/servers` body: a server as a `[[server_group.server]]`
/// table of the config file gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddServerRequest {
    /// Its name, unique in the group.
    pub name: String,
    /// `IP:port` or `dns-name:port`.
    pub address: String,
    /// Its weight (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// A backup server, used only when every primary is down (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<bool>,
}

/// `PUT /api/v1/adc/groups/{group}/servers/{server}` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetServerRequest {
    /// `enabled`, `disabled` or `draining`; `None`: unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The weight, 0–1000, until the config file gives the server another; `None`: unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

/// Exports an [`AdcControl`]'s snapshot as Prometheus metrics on every scrape (see the module
/// docs for the names). Register it with `Registry::register_collector`.
pub struct AdcCollector(std::sync::Arc<dyn AdcControl>);

impl AdcCollector {
    /// A collector over `control`.
    pub fn new(control: std::sync::Arc<dyn AdcControl>) -> Self {
        AdcCollector(control)
    }
}

impl std::fmt::Debug for AdcCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdcCollector")
    }
}

type Labels = Vec<(&'static str, String)>;

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

impl Collector for AdcCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = self.0.snapshot();
        let vs = |v: &VirtualServerSnapshot| -> Labels { vec![("virtual_server", v.name.clone())] };
        let with = |mut l: Labels, k: &'static str, v: &str| {
            l.push((k, v.to_string()));
            l
        };
        type Field = fn(&VirtualServerSnapshot) -> u64;
        let vs_counters: [(&str, &str, Field); 8] = [
            (
                "adc_requests",
                "HTTP requests (tcp: connections proxied)",
                |v| v.requests,
            ),
            ("adc_connections", "Client connections accepted", |v| {
                v.connections
            }),
            (
                "adc_refused_connections",
                "Client connections refused by a per-client limit",
                |v| v.refused_connections,
            ),
            (
                "adc_denied_connections",
                "Client connections closed because allow/deny keep the client out",
                |v| v.denied_connections,
            ),
            (
                "adc_bad_proxy_headers",
                "Client connections closed for a missing or broken PROXY protocol header",
                |v| v.bad_proxy_headers,
            ),
            (
                "adc_rate_limited",
                "Requests refused by the per-client rate limit (429)",
                |v| v.rate_limited,
            ),
            (
                "adc_bad_requests",
                "Requests refused for ambiguous framing or limits",
                |v| v.bad_requests,
            ),
            (
                "adc_upgrades",
                "Connections upgraded to another protocol (WebSocket)",
                |v| v.upgrades,
            ),
        ];
        for (name, help, f) in vs_counters {
            let values: Vec<(Labels, u64)> =
                s.virtual_servers.iter().map(|v| (vs(v), f(v))).collect();
            counters(&mut enc, name, help, &values)?;
        }
        type RuleField = fn(&VirtualServerSnapshot) -> &[u64];
        let rule_counters: [(&str, &str, RuleField); 3] = [
            (
                "adc_rule_hits",
                "Requests a content-switching rule matched",
                |v| &v.rule_hits,
            ),
            (
                "adc_rule_limited",
                "Requests a rule's rate limit refused with 429",
                |v| &v.rule_limited,
            ),
            (
                "adc_rule_unauthorized",
                "Requests a rule's basic authentication refused with 401",
                |v| &v.rule_unauthorized,
            ),
        ];
        for (name, help, f) in rule_counters {
            let mut values = Vec::new();
            for v in &s.virtual_servers {
                for ((rule, _), n) in v.rules.iter().zip(f(v)) {
                    values.push((with(vs(v), "rule", rule), *n));
                }
            }
            counters(&mut enc, name, help, &values)?;
        }
        // Shadow traffic, for the virtual servers with a mirror group.
        let mut mirror: [Vec<(Labels, u64)>; 4] = Default::default();
        for v in &s.virtual_servers {
            let Some(m) = &v.mirror else { continue };
            let l = with(vs(v), "group", &m.group);
            mirror[0].push((l.clone(), m.sent));
            mirror[1].push((l.clone(), m.skipped));
            mirror[2].push((l.clone(), m.failed));
            for (c, n) in CLASSES.iter().zip(m.responses) {
                mirror[3].push((with(l.clone(), "class", c), n));
            }
        }
        let [sent, skipped, failed, answers] = &mirror;
        counters(
            &mut enc,
            "adc_mirror_requests",
            "Copies of requests sent to the mirror group",
            sent,
        )?;
        counters(
            &mut enc,
            "adc_mirror_skipped",
            "Copies not sent: too many in flight",
            skipped,
        )?;
        counters(
            &mut enc,
            "adc_mirror_failed",
            "Copies without a whole answer",
            failed,
        )?;
        counters(
            &mut enc,
            "adc_mirror_responses",
            "Answers to copies by status class",
            answers,
        )?;
        let mut responses = Vec::new();
        let mut bytes = Vec::new();
        for v in &s.virtual_servers {
            for (c, n) in CLASSES.iter().zip(v.responses) {
                responses.push((with(vs(v), "class", c), n));
            }
            bytes.push((with(vs(v), "direction", "in"), v.bytes_in));
            bytes.push((with(vs(v), "direction", "out"), v.bytes_out));
        }
        counters(
            &mut enc,
            "adc_responses",
            "Responses by status class",
            &responses,
        )?;
        counters(
            &mut enc,
            "adc_bytes",
            "Bytes from (in) and to (out) clients",
            &bytes,
        )?;
        gauges(
            &mut enc,
            "adc_active_connections",
            "Client connections open",
            &s.virtual_servers
                .iter()
                .map(|v| (vs(v), v.active_connections as f64))
                .collect::<Vec<_>>(),
        )?;
        gauges(
            &mut enc,
            "adc_tunnels",
            "Upgraded connections open (WebSocket)",
            &s.virtual_servers
                .iter()
                .map(|v| (vs(v), v.tunnels as f64))
                .collect::<Vec<_>>(),
        )?;
        histograms(
            &mut enc,
            "adc_request_duration_seconds",
            "Time from request to the end of the response",
            s.virtual_servers.iter().map(|v| (vs(v), &v.latency)),
        )?;

        let grp = |g: &GroupSnapshot| -> Labels { vec![("group", g.name.clone())] };
        type GField = fn(&GroupSnapshot) -> u64;
        let group_counters: [(&str, &str, GField); 5] = [
            (
                "adc_group_requests",
                "Requests a group was asked to serve",
                |g| g.requests,
            ),
            (
                "adc_group_queued",
                "Requests that waited in the surge queue",
                |g| g.queued,
            ),
            (
                "adc_group_queue_rejected",
                "Requests refused (503) by a full surge queue or its timeout",
                |g| g.queue_rejected,
            ),
            (
                "adc_group_no_server",
                "Requests refused (503): no server up",
                |g| g.no_server,
            ),
            (
                "adc_group_persistence_failovers",
                "Persisted requests sent to another server",
                |g| g.persistence_failovers,
            ),
        ];
        for (name, help, f) in group_counters {
            let values: Vec<(Labels, u64)> = s.groups.iter().map(|g| (grp(g), f(g))).collect();
            counters(&mut enc, name, help, &values)?;
        }
        gauges(
            &mut enc,
            "adc_group_waiting",
            "Requests waiting in the surge queue",
            &s.groups
                .iter()
                .map(|g| (grp(g), g.waiting as f64))
                .collect::<Vec<_>>(),
        )?;

        let servers: Vec<(Labels, &ServerSnapshot)> = s
            .groups
            .iter()
            .flat_map(|g| {
                g.servers.iter().map(move |sv| {
                    (
                        vec![("group", g.name.clone()), ("server", sv.name.clone())],
                        sv,
                    )
                })
            })
            .collect();
        type SField = fn(&ServerSnapshot) -> u64;
        let server_counters: [(&str, &str, SField); 9] = [
            ("adc_server_requests", "Requests sent to a server", |v| {
                v.requests
            }),
            (
                "adc_server_connect_failures",
                "Failed connection attempts",
                |v| v.connect_failures,
            ),
            (
                "adc_server_failures",
                "Requests that failed after connecting (reset, early close, timeout)",
                |v| v.failures,
            ),
            (
                "adc_server_retries",
                "Requests tried again on another server",
                |v| v.retries,
            ),
            (
                "adc_server_resent",
                "Requests sent again because the server's connection turned them away untouched",
                |v| v.resent,
            ),
            (
                "adc_server_ejections",
                "Times passive health took the server out (max_fails failed requests in a row)",
                |v| v.ejections,
            ),
            (
                "adc_server_dns_failures",
                "Background lookups of the server's DNS name that failed (its address stayed)",
                |v| v.dns_failures,
            ),
            (
                "adc_server_connections_opened",
                "Server connections opened",
                |v| v.connections_opened,
            ),
            (
                "adc_server_reused",
                "Requests sent on a reused connection",
                |v| v.reused,
            ),
        ];
        for (name, help, f) in server_counters {
            let values: Vec<(Labels, u64)> =
                servers.iter().map(|(l, v)| (l.clone(), f(v))).collect();
            counters(&mut enc, name, help, &values)?;
        }
        let mut sresp = Vec::new();
        for (l, v) in &servers {
            for (c, n) in CLASSES.iter().zip(v.responses) {
                sresp.push((with(l.clone(), "class", c), n));
            }
        }
        counters(
            &mut enc,
            "adc_server_responses",
            "Server responses by status class",
            &sresp,
        )?;
        type GaugeField = fn(&ServerSnapshot) -> f64;
        let server_gauges: [(&str, &str, GaugeField); 5] = [
            ("adc_server_active", "Requests in flight to a server", |v| {
                v.active as f64
            }),
            (
                "adc_server_up",
                "1 when the server passes its health checks",
                |v| {
                    if v.health == "up" {
                        1.0
                    } else {
                        0.0
                    }
                },
            ),
            (
                "adc_server_enabled",
                "Administrative state: 1 enabled, 0.5 draining, 0 disabled",
                |v| match v.admin_state.as_str() {
                    "enabled" => 1.0,
                    "draining" => 0.5,
                    _ => 0.0,
                },
            ),
            (
                "adc_server_reuse_ratio",
                "Share of requests sent on a reused connection",
                |v| v.reuse_ratio,
            ),
            (
                "adc_server_idle_connections",
                "Idle pooled connections",
                |v| v.idle_connections as f64,
            ),
        ];
        for (name, help, f) in server_gauges {
            let values: Vec<(Labels, f64)> =
                servers.iter().map(|(l, v)| (l.clone(), f(v))).collect();
            gauges(&mut enc, name, help, &values)?;
        }
        histograms(
            &mut enc,
            "adc_server_response_seconds",
            "Time from request sent to response header",
            servers.iter().map(|(l, v)| (l.clone(), &v.latency)),
        )?;
        gauges(
            &mut enc,
            "adc_config_generation",
            "Config generation running (1 at start, +1 per reload)",
            &[(vec![], s.generation as f64)],
        )?;
        counters(
            &mut enc,
            "adc_reloads_failed",
            "Config reloads refused",
            &[(vec![], s.reloads_failed)],
        )?;
        let log = |l: &AccessLogSnapshot| -> Labels { vec![("log", l.path.clone())] };
        for (name, help, f) in [
            (
                "adc_access_log_dropped",
                "Access log lines dropped because the writer was behind the disk",
                (|l| l.dropped) as fn(&AccessLogSnapshot) -> u64,
            ),
            (
                "adc_access_log_write_errors",
                "Access log writes and flushes the file refused",
                |l| l.write_errors,
            ),
            (
                "adc_access_log_reopened",
                "Times an access log file was opened again (rotated, deleted, or SIGUSR1)",
                |l| l.reopened,
            ),
        ] {
            let values: Vec<(Labels, u64)> = s.access_logs.iter().map(|l| (log(l), f(l))).collect();
            counters(&mut enc, name, help, &values)?;
        }
        compression_metrics(&mut enc, &s)?;
        tls_metrics(&mut enc, &s)?;
        crate::cache::metrics(&mut enc, &s)?;
        Ok(())
    }
}

/// The `adc_tls_*` families: handshakes of `https` virtual servers, certificate expiry.
fn tls_metrics(enc: &mut DescriptorEncoder<'_>, s: &AdcSnapshot) -> Result<(), std::fmt::Error> {
    let tls: Vec<(Labels, &TlsSnapshot)> = s
        .virtual_servers
        .iter()
        .filter_map(|v| {
            v.tls
                .as_ref()
                .map(|t| (vec![("virtual_server", v.name.clone())], t))
        })
        .collect();
    let with = |l: &Labels, k: &'static str, v: &str| {
        let mut l = l.clone();
        l.push((k, v.to_string()));
        l
    };
    let mut kinds = Vec::new();
    let mut failures = Vec::new();
    let mut versions = Vec::new();
    let mut alpn = Vec::new();
    let mut sni_default = Vec::new();
    let mut client_certs = Vec::new();
    for (l, t) in &tls {
        kinds.push((with(l, "kind", "full"), t.handshakes_full));
        kinds.push((with(l, "kind", "resumed"), t.handshakes_resumed));
        for (reason, n) in &t.failures {
            failures.push((with(l, "reason", reason), *n));
        }
        versions.push((with(l, "version", "1.2"), t.tls12));
        versions.push((with(l, "version", "1.3"), t.tls13));
        alpn.push((with(l, "protocol", "h2"), t.alpn_h2));
        alpn.push((with(l, "protocol", "http/1.1"), t.alpn_http11));
        alpn.push((with(l, "protocol", "none"), t.alpn_none));
        sni_default.push((l.clone(), t.sni_default));
        client_certs.push((l.clone(), t.client_certificates));
    }
    counters(
        enc,
        "adc_tls_handshakes",
        "Completed TLS handshakes: full (new session) or resumed",
        &kinds,
    )?;
    counters(
        enc,
        "adc_tls_handshake_failures",
        "Failed TLS handshakes by reason",
        &failures,
    )?;
    counters(
        enc,
        "adc_tls_versions",
        "Completed TLS handshakes by protocol version",
        &versions,
    )?;
    counters(
        enc,
        "adc_tls_alpn",
        "Completed TLS handshakes by the protocol ALPN chose",
        &alpn,
    )?;
    counters(
        enc,
        "adc_tls_sni_default",
        "Handshakes served the default certificate (no SNI, or no certificate for the name)",
        &sni_default,
    )?;
    counters(
        enc,
        "adc_tls_client_certificates",
        "Handshakes with an accepted client certificate",
        &client_certs,
    )?;
    gauges(
        enc,
        "adc_tls_certificate_not_after_seconds",
        "When a certificate expires, seconds since the Unix epoch",
        &s.certificates
            .iter()
            .map(|c| {
                (
                    vec![("certificate", c.name.clone())],
                    c.not_after_unix as f64,
                )
            })
            .collect::<Vec<_>>(),
    )?;
    Ok(())
}

/// The `adc_compression_*` families of the virtual servers that compress.
fn compression_metrics(
    enc: &mut DescriptorEncoder<'_>,
    s: &AdcSnapshot,
) -> Result<(), std::fmt::Error> {
    let (mut responses, mut whole, mut bytes, mut ratio, mut bypassed, mut refused) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let (mut engaged, mut cpu) = (Vec::new(), Vec::new());
    for v in &s.virtual_servers {
        let Some(c) = &v.compression else {
            continue;
        };
        let vs: Labels = vec![("virtual_server", v.name.clone())];
        for k in &c.codecs {
            let l = |extra: Option<(&'static str, &str)>| {
                let mut l = vs.clone();
                l.push(("codec", k.codec.clone()));
                l.extend(extra.map(|(a, b)| (a, b.to_string())));
                l
            };
            responses.push((l(None), k.responses));
            whole.push((l(None), k.whole));
            bytes.push((l(Some(("direction", "in"))), k.bytes_in));
            bytes.push((l(Some(("direction", "out"))), k.bytes_out));
        }
        ratio.push((vs.clone(), c.ratio().unwrap_or(0.0)));
        bypassed.push((vs.clone(), c.bypassed));
        refused.push((vs.clone(), c.not_accepted));
        if let Some(b) = &c.bypass {
            engaged.push((vs.clone(), if b.engaged { 1.0 } else { 0.0 }));
            cpu.push((vs, b.utilisation));
        }
    }
    counters(
        enc,
        "adc_compression_responses",
        "Responses compressed, by codec",
        &responses,
    )?;
    counters(
        enc,
        "adc_compression_whole",
        "Of the responses compressed, those compressed in one call at the body's end (gzip bodies of known length up to 64 KiB), by codec",
        &whole,
    )?;
    counters(
        enc,
        "adc_compression_bytes",
        "Bytes into (uncompressed) and out of (compressed) the compressor",
        &bytes,
    )?;
    gauges(
        enc,
        "adc_compression_ratio",
        "Uncompressed over compressed bytes, all codecs (0 before any)",
        &ratio,
    )?;
    counters(
        enc,
        "adc_compression_bypassed",
        "Responses sent uncompressed because the CPU bypass was engaged",
        &bypassed,
    )?;
    counters(
        enc,
        "adc_compression_not_accepted",
        "Compressible responses to clients that accept none of the codecs",
        &refused,
    )?;
    gauges(
        enc,
        "adc_compression_bypass_engaged",
        "1 while the CPU bypass sends new responses uncompressed",
        &engaged,
    )?;
    gauges(
        enc,
        "adc_compression_cpu_utilisation",
        "CPU utilisation (0-1) the bypass last sampled, of its source (system or process)",
        &cpu,
    )?;
    Ok(())
}

pub(crate) fn counters(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in values {
        if labels.is_empty() {
            family.encode_counter::<NoLabelSet, _, u64>(v, None)?;
        } else {
            family
                .encode_family(labels)?
                .encode_counter::<NoLabelSet, _, u64>(v, None)?;
        }
    }
    Ok(())
}

pub(crate) fn gauges(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in values {
        if labels.is_empty() {
            family.encode_gauge(v)?;
        } else {
            family.encode_family(labels)?.encode_gauge(v)?;
        }
    }
    Ok(())
}

/// A histogram family from snapshots (cumulative buckets, as OpenMetrics wants).
fn histograms<'a>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: impl Iterator<Item = (Labels, &'a HistogramSnapshot)>,
) -> Result<(), std::fmt::Error> {
    struct H<'a>(&'a HistogramSnapshot);
    impl EncodeMetric for H<'_> {
        fn encode(
            &self,
            mut encoder: prometheus_client::encoding::MetricEncoder<'_>,
        ) -> Result<(), std::fmt::Error> {
            let mut cumulative = 0;
            let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
                .iter()
                .copied()
                .chain([f64::INFINITY])
                .zip(self.0.counts.iter().copied().chain(std::iter::repeat(0)))
                .map(|(b, c)| {
                    cumulative += c;
                    (b, c)
                })
                .collect();
            encoder.encode_histogram::<NoLabelSet>(self.0.sum_seconds, cumulative, &buckets, None)
        }
        fn metric_type(&self) -> MetricType {
            MetricType::Histogram
        }
    }
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in values {
        H(h).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The `headway ctl certs` table: each certificate's names, issuer, validity and users; `now`
/// (seconds since the Unix epoch) gives the days left.
pub fn write_certificates(
    out: &mut dyn Write,
    certs: &[CertificateSnapshot],
    now: i64,
) -> std::io::Result<()> {
    if certs.is_empty() {
        return writeln!(
            out,
            "no certificates: add [[certificate]] sections to the config"
        );
    }
    let mut rows = vec![[
        "CERTIFICATE",
        "NAMES",
        "ISSUER",
        "NOT BEFORE",
        "NOT AFTER",
        "EXPIRES",
        "KEY",
        "USED BY",
    ]
    .map(String::from)
    .to_vec()];
    for c in certs {
        let left = c.not_after_unix - now;
        let expires = if left < 0 {
            format!("EXPIRED {} days ago", (-left) / 86_400)
        } else {
            format!("in {} days", left / 86_400)
        };
        let mut names = c.dns_names.clone();
        names.extend(c.ip_addresses.iter().cloned());
        let used: Vec<String> = c
            .virtual_servers
            .iter()
            .map(|v| format!("vs {v}"))
            .chain(c.groups.iter().map(|g| format!("group {g}")))
            .collect();
        rows.push(vec![
            c.name.clone(),
            if names.is_empty() {
                format!("({})", c.subject)
            } else {
                names.join(",")
            },
            c.issuer.clone(),
            c.not_before.clone(),
            c.not_after.clone(),
            expires,
            c.key_type.clone(),
            if used.is_empty() {
                "-".into()
            } else {
                used.join(", ")
            },
        ]);
    }
    table(out, &rows)
}

/// The `headway ctl adc` tables: virtual servers, then each group's servers.
pub fn write_adc(out: &mut dyn Write, s: &AdcSnapshot) -> std::io::Result<()> {
    writeln!(
        out,
        "config generation {}{}",
        s.generation,
        if s.reloads_failed > 0 {
            format!(" ({} reload(s) refused)", s.reloads_failed)
        } else {
            String::new()
        }
    )?;
    writeln!(out)?;
    let ms = |h: &HistogramSnapshot, q: f64| {
        h.quantile(q).map_or("-".to_string(), |v| {
            if v.is_finite() {
                format!("{}", v * 1e3)
            } else {
                ">10000".into()
            }
        })
    };
    let mut rows = vec![[
        "VIRTUAL SERVER",
        "KIND",
        "LISTEN",
        "GROUP",
        "CONNS",
        "ACTIVE",
        "REQUESTS",
        "2XX",
        "3XX",
        "4XX",
        "5XX",
        "P50 MS",
        "P99 MS",
    ]
    .map(String::from)
    .to_vec()];
    for v in &s.virtual_servers {
        rows.push(vec![
            v.name.clone(),
            v.kind.clone(),
            v.listen.clone(),
            v.group.clone(),
            v.connections.to_string(),
            v.active_connections.to_string(),
            v.requests.to_string(),
            v.responses[1].to_string(),
            v.responses[2].to_string(),
            v.responses[3].to_string(),
            v.responses[4].to_string(),
            ms(&v.latency, 0.5),
            ms(&v.latency, 0.99),
        ]);
        for (i, (rule, group)) in v.rules.iter().enumerate() {
            rows.push(vec![
                format!("  rule {rule}"),
                String::new(),
                String::new(),
                group.clone(),
                String::new(),
                String::new(),
                v.rule_hits.get(i).map_or(String::new(), u64::to_string),
            ]);
        }
    }
    table(out, &rows)?;
    // Requests refused by rules' rate limits and authentication, for the rules that refused
    // any.
    for v in &s.virtual_servers {
        for (counts, what) in [
            (&v.rule_limited, "over its rate limit (429)"),
            (&v.rule_unauthorized, "without valid credentials (401)"),
        ] {
            for ((rule, _), n) in v.rules.iter().zip(counts) {
                if *n > 0 {
                    writeln!(out, "{} rule {rule}: {n} request(s) {what}", v.name)?;
                }
            }
        }
    }
    // Upgraded connections (WebSockets), for the virtual servers that had any.
    for v in s.virtual_servers.iter().filter(|v| v.upgrades > 0) {
        writeln!(
            out,
            "{} upgrades: {} ({} open)",
            v.name, v.upgrades, v.tunnels
        )?;
    }
    // Shadow traffic.
    for v in &s.virtual_servers {
        let Some(m) = &v.mirror else { continue };
        writeln!(
            out,
            "{} mirror to {}: {} sent ({} skipped, {} failed, {} in flight), 2xx {} 3xx {} 4xx {} 5xx {}",
            v.name,
            m.group,
            m.sent,
            m.skipped,
            m.failed,
            m.in_flight,
            m.responses[1],
            m.responses[2],
            m.responses[3],
            m.responses[4]
        )?;
    }
    // Connections from clients `allow` / `deny` keep out.
    for v in s
        .virtual_servers
        .iter()
        .filter(|v| v.denied_connections > 0)
    {
        writeln!(
            out,
            "{} closed for allow/deny: {}",
            v.name, v.denied_connections
        )?;
    }
    // Connections closed for a missing or broken PROXY header (`accept_proxy_protocol`).
    for v in s.virtual_servers.iter().filter(|v| v.bad_proxy_headers > 0) {
        writeln!(
            out,
            "{} closed for a bad PROXY header: {}",
            v.name, v.bad_proxy_headers
        )?;
    }
    // TLS handshakes of the https virtual servers, one line each (too wide for the table).
    for v in &s.virtual_servers {
        let Some(t) = &v.tls else { continue };
        let failures: Vec<String> = t
            .failures
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        writeln!(
            out,
            "{} tls: {} handshakes ({} resumed), TLS 1.3 {}, 1.2 {}, h2 {}, {} failed{}",
            v.name,
            t.handshakes(),
            t.handshakes_resumed,
            t.tls13,
            t.tls12,
            t.alpn_h2,
            t.failed(),
            if failures.is_empty() {
                String::new()
            } else {
                format!(" ({})", failures.join(", "))
            }
        )?;
    }
    write_compression(out, s)?;
    for g in &s.groups {
        writeln!(out)?;
        writeln!(
            out,
            "group {} ({}{}{}{}): {} request(s), {} queued, {} waiting, {} refused busy, {} refused no server",
            g.name,
            g.method,
            if g.protocol == "h2" { ", HTTP/2 to servers" } else { "" },
            g.monitor
                .as_ref()
                .map(|m| format!(", monitor {m}"))
                .unwrap_or_default(),
            g.persistence
                .as_ref()
                .map(|p| format!(", {p} persistence"))
                .unwrap_or_default(),
            g.requests,
            g.queued,
            g.waiting,
            g.queue_rejected,
            g.no_server
        )?;
        let mut rows = vec![[
            "SERVER", "ADDRESS", "WEIGHT", "STATE", "HEALTH", "ACTIVE", "REQUESTS", "5XX",
            "FAILED", "RETRIED", "OPENED", "REUSE",
        ]
        .map(String::from)
        .to_vec()];
        for sv in &g.servers {
            rows.push(vec![
                format!("{}{}", sv.name, if sv.backup { " (backup)" } else { "" }),
                match &sv.host {
                    Some(h) => format!("{h} ({})", sv.address),
                    None => sv.address.clone(),
                },
                sv.weight.to_string(),
                sv.admin_state.clone(),
                if sv.passive_out {
                    format!("{} (out: failing)", sv.health)
                } else {
                    sv.health.clone()
                },
                sv.active.to_string(),
                sv.requests.to_string(),
                sv.responses[4].to_string(),
                (sv.failures + sv.connect_failures).to_string(),
                sv.retries.to_string(),
                sv.connections_opened.to_string(),
                format!("{:.0}%", sv.reuse_ratio * 100.0),
            ]);
        }
        table(out, &rows)?;
    }
    if let Some(c) = &s.cache {
        writeln!(out)?;
        crate::cache::write_cache(out, c)?;
    }
    if !s.access_logs.is_empty() {
        writeln!(out)?;
    }
    for l in &s.access_logs {
        writeln!(
            out,
            "access log {} ({}): {} line(s) dropped, {} write error(s), reopened {} time(s)",
            l.path, l.format, l.dropped, l.write_errors, l.reopened
        )?;
    }
    Ok(())
}

/// One line per virtual server that compresses: per codec responses, bytes and ratio, then the
/// CPU bypass.
fn write_compression(out: &mut dyn Write, s: &AdcSnapshot) -> std::io::Result<()> {
    let ratio = |i: u64, o: u64| {
        if o > 0 {
            format!("{:.2}×", i as f64 / o as f64)
        } else {
            "-".into()
        }
    };
    for v in &s.virtual_servers {
        let Some(c) = &v.compression else {
            continue;
        };
        let codecs: Vec<String> = c
            .codecs
            .iter()
            .map(|k| {
                format!(
                    "{} (level {}) {} responses ({} whole), {} → {} bytes, {}",
                    k.codec,
                    k.level,
                    k.responses,
                    k.whole,
                    k.bytes_in,
                    k.bytes_out,
                    ratio(k.bytes_in, k.bytes_out)
                )
            })
            .collect();
        let bypass = match &c.bypass {
            None => "CPU bypass off".to_string(),
            Some(b) => format!(
                "CPU ({}) {:.0}%, bypass {} (engages at {:.0}%, releases below {:.0}%; engaged {} times)",
                b.source,
                b.utilisation * 100.0,
                if b.engaged { "ENGAGED" } else { "off" },
                b.engage * 100.0,
                b.release * 100.0,
                b.engagements
            ),
        };
        writeln!(out)?;
        writeln!(
            out,
            "compression {}: {}; {} bypassed, {} to clients without a codec; {}",
            v.name,
            codecs.join("; "),
            c.bypassed,
            c.not_accepted,
            bypass
        )?;
    }
    Ok(())
}

/// Aligned columns.
pub(crate) fn table(out: &mut dyn Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in rows {
        let mut line = String::new();
        for (c, w) in r.iter().zip(&widths) {
            line.push_str(&format!("{c:<w$}  "));
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use headway_proxy::stats::HistogramSnapshot;

    fn snapshot() -> AdcSnapshot {
        AdcSnapshot {
            generation: 3,
            reloads_failed: 1,
            cache: None,
            access_logs: vec![AccessLogSnapshot {
                path: "/var/log/headway/access.log".into(),
                format: "json".into(),
                dropped: 2,
                write_errors: 0,
                reopened: 1,
            }],
            virtual_servers: vec![VirtualServerSnapshot {
                name: "web".into(),
                kind: "http".into(),
                listen: "127.0.0.1:8000".into(),
                group: "g".into(),
                rules: vec![("mysite".into(), "g2".into())],
                rule_hits: vec![7],
                rule_limited: vec![2],
                rule_unauthorized: vec![3],
                requests: 10,
                responses: [0, 9, 0, 0, 1],
                upgrades: 5,
                bad_proxy_headers: 4,
                denied_connections: 6,
                tunnels: 2,
                latency: HistogramSnapshot {
                    counts: vec![0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                    sum_seconds: 0.008,
                },
                compression: Some(compression()),
                tls: Some(TlsSnapshot {
                    handshakes_full: 4,
                    handshakes_resumed: 6,
                    tls13: 9,
                    tls12: 1,
                    alpn_h2: 2,
                    failures: vec![("version".into(), 3), ("cipher".into(), 0)],
                    ..TlsSnapshot::default()
                }),
                mirror: Some(headway_proxy::stats::MirrorSnapshot {
                    group: "next".into(),
                    sent: 12,
                    skipped: 2,
                    failed: 1,
                    responses: [0, 10, 0, 1, 0],
                    in_flight: 0,
                }),
                ..VirtualServerSnapshot::default()
            }],
            certificates: vec![CertificateSnapshot {
                name: "www".into(),
                subject: "CN=www.example".into(),
                issuer: "CN=Example CA".into(),
                dns_names: vec!["www.example".into(), "*.www.example".into()],
                not_before: "2026-01-01T00:00:00Z".into(),
                not_after: "2027-01-01T00:00:00Z".into(),
                not_after_unix: 1_798_761_600,
                key_type: "ECDSA P-256".into(),
                virtual_servers: vec!["web".into()],
                ..CertificateSnapshot::default()
            }],
            groups: vec![GroupSnapshot {
                name: "g".into(),
                method: "least-connection".into(),
                protocol: "h2".into(),
                servers: vec![
                    ServerSnapshot {
                        name: "s1".into(),
                        address: "127.0.0.1:8080".into(),
                        admin_state: "draining".into(),
                        health: "up".into(),
                        requests: 10,
                        reused: 9,
                        reuse_ratio: 0.9,
                        ejections: 2,
                        passive_out: true,
                        ..ServerSnapshot::default()
                    },
                    ServerSnapshot {
                        name: "app".into(),
                        address: "10.0.0.7:80".into(),
                        host: Some("app.internal:80".into()),
                        dns_failures: 3,
                        ..ServerSnapshot::default()
                    },
                ],
                ..GroupSnapshot::default()
            }],
        }
    }

    fn compression() -> headway_proxy::http::compress::CompressionSnapshot {
        use headway_proxy::http::compress::{BypassSnapshot, CodecSnapshot, CompressionSnapshot};
        CompressionSnapshot {
            codecs: vec![CodecSnapshot {
                codec: "gzip".into(),
                level: 2,
                responses: 4,
                bytes_in: 3000,
                bytes_out: 1000,
                whole: 3,
            }],
            not_accepted: 1,
            bypassed: 7,
            bypass: Some(BypassSnapshot {
                source: "system".into(),
                engage: 0.9,
                release: 0.7,
                utilisation: 0.95,
                engaged: true,
                engagements: 2,
            }),
        }
    }

    struct Fixed;
    impl AdcControl for Fixed {
        fn snapshot(&self) -> AdcSnapshot {
            snapshot()
        }
        fn set_server_state(&self, _: &str, _: &str, _: &str) -> Result<(), (bool, String)> {
            Ok(())
        }
        fn set_server_weight(&self, _: &str, _: &str, _: u32) -> Result<(), (bool, String)> {
            Ok(())
        }
        fn config_text(&self) -> String {
            String::new()
        }
        fn replace_config(&self, _: String) -> BoxFuture<Result<ReloadReport, String>> {
            Box::pin(async { Err("no".into()) })
        }
        fn reload(&self) -> BoxFuture<Result<ReloadReport, String>> {
            Box::pin(async { Err("no".into()) })
        }
    }

    #[test]
    fn metrics_name_every_virtual_server_group_and_server() {
        let mut r = prometheus_client::registry::Registry::with_prefix("headway");
        r.register_collector(Box::new(AdcCollector::new(std::sync::Arc::new(Fixed))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for line in [
            "headway_adc_requests_total{virtual_server=\"web\"} 10",
            "headway_adc_responses_total{virtual_server=\"web\",class=\"5xx\"} 1",
            "headway_adc_request_duration_seconds_bucket{le=\"0.001\",virtual_server=\"web\"} 10",
            "headway_adc_request_duration_seconds_count{virtual_server=\"web\"} 10",
            "headway_adc_server_reuse_ratio{group=\"g\",server=\"s1\"} 0.9",
            "headway_adc_server_enabled{group=\"g\",server=\"s1\"} 0.5",
            "headway_adc_config_generation 3.0",
            "headway_adc_reloads_failed_total 1",
            "headway_adc_upgrades_total{virtual_server=\"web\"} 5",
            "headway_adc_bad_proxy_headers_total{virtual_server=\"web\"} 4",
            "headway_adc_denied_connections_total{virtual_server=\"web\"} 6",
            "headway_adc_mirror_requests_total{virtual_server=\"web\",group=\"next\"} 12",
            "headway_adc_mirror_skipped_total{virtual_server=\"web\",group=\"next\"} 2",
            "headway_adc_mirror_responses_total{virtual_server=\"web\",group=\"next\",class=\"4xx\"} 1",
            "headway_adc_rule_hits_total{virtual_server=\"web\",rule=\"mysite\"} 7",
            "headway_adc_rule_limited_total{virtual_server=\"web\",rule=\"mysite\"} 2",
            "headway_adc_rule_unauthorized_total{virtual_server=\"web\",rule=\"mysite\"} 3",
            "headway_adc_server_ejections_total{group=\"g\",server=\"s1\"} 2",
            "headway_adc_server_dns_failures_total{group=\"g\",server=\"app\"} 3",
            "headway_adc_tunnels{virtual_server=\"web\"} 2.0",
            "headway_adc_tls_handshakes_total{virtual_server=\"web\",kind=\"resumed\"} 6",
            "headway_adc_tls_handshake_failures_total{virtual_server=\"web\",reason=\"version\"} 3",
            "headway_adc_tls_versions_total{virtual_server=\"web\",version=\"1.3\"} 9",
            "headway_adc_tls_alpn_total{virtual_server=\"web\",protocol=\"h2\"} 2",
            "headway_adc_tls_certificate_not_after_seconds{certificate=\"www\"} 1798761600",
            "headway_adc_access_log_dropped_total{log=\"/var/log/headway/access.log\"} 2",
            "headway_adc_access_log_reopened_total{log=\"/var/log/headway/access.log\"} 1",
        ] {
            assert!(text.contains(line), "`{line}` not in:\n{text}");
        }
    }

    #[test]
    fn compression_shows_in_metrics_and_the_table() {
        let mut r = prometheus_client::registry::Registry::with_prefix("headway");
        r.register_collector(Box::new(AdcCollector::new(std::sync::Arc::new(Fixed))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for line in [
            "headway_adc_compression_responses_total{virtual_server=\"web\",codec=\"gzip\"} 4",
            "headway_adc_compression_whole_total{virtual_server=\"web\",codec=\"gzip\"} 3",
            "headway_adc_compression_bytes_total{virtual_server=\"web\",codec=\"gzip\",direction=\"out\"} 1000",
            "headway_adc_compression_ratio{virtual_server=\"web\"} 3.0",
            "headway_adc_compression_bypassed_total{virtual_server=\"web\"} 7",
            "headway_adc_compression_bypass_engaged{virtual_server=\"web\"} 1.0",
            "headway_adc_compression_cpu_utilisation{virtual_server=\"web\"} 0.95",
        ] {
            assert!(text.contains(line), "`{line}` not in:\n{text}");
        }
        let mut out = Vec::new();
        write_adc(&mut out, &snapshot()).unwrap();
        let table = String::from_utf8(out).unwrap();
        assert!(
            table.contains(
                "compression web: gzip (level 2) 4 responses (3 whole), 3000 → 1000 bytes, 3.00×"
            ),
            "{table}"
        );
        assert!(table.contains("7 bypassed"), "{table}");
        assert!(table.contains("bypass ENGAGED (engages at 90%"), "{table}");
    }

    #[test]
    fn the_table_shows_rules_states_and_reuse() {
        let mut out = Vec::new();
        write_adc(&mut out, &snapshot()).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("config generation 3 (1 reload(s) refused)"),
            "{text}"
        );
        assert!(text.contains("rule mysite"), "{text}");
        assert!(
            text.contains("access log /var/log/headway/access.log (json): 2 line(s) dropped, 0 write error(s), reopened 1 time(s)"),
            "{text}"
        );
        assert!(text.contains("draining"), "{text}");
        assert!(text.contains("90%"), "{text}");
        assert!(
            text.contains("group g (least-connection, HTTP/2 to servers)"),
            "{text}"
        );
        assert!(text.contains("web upgrades: 5 (2 open)"), "{text}");
        assert!(text.contains("web closed for allow/deny: 6"), "{text}");
        assert!(
            text.contains(
                "web mirror to next: 12 sent (2 skipped, 1 failed, 0 in flight), 2xx 10 3xx 0 4xx 1 5xx 0"
            ),
            "{text}"
        );
        assert!(
            text.contains("web rule mysite: 2 request(s) over its rate limit (429)"),
            "{text}"
        );
        assert!(
            text.contains("web rule mysite: 3 request(s) without valid credentials (401)"),
            "{text}"
        );
        assert!(
            text.contains("web closed for a bad PROXY header: 4"),
            "{text}"
        );
        assert!(text.contains("up (out: failing)"), "{text}");
        assert!(text.contains("app.internal:80 (10.0.0.7:80)"), "{text}");
        let rule = text.lines().find(|l| l.contains("rule mysite")).unwrap();
        assert!(rule.trim_end().ends_with(" 7"), "{rule}");
        assert!(
            text.contains(
                "tls: 10 handshakes (6 resumed), TLS 1.3 9, 1.2 1, h2 2, 3 failed (version 3)"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_certificate_table_shows_names_expiry_and_users() {
        let mut out = Vec::new();
        // 2026-12-01: 31 days before expiry.
        write_certificates(&mut out, &snapshot().certificates, 1_796_083_200).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("CERTIFICATE"), "{text}");
        for part in [
            "www.example,*.www.example",
            "CN=Example CA",
            "2027-01-01T00:00:00Z",
            "in 31 days",
            "ECDSA P-256",
            "vs web",
        ] {
            assert!(text.contains(part), "`{part}` not in:\n{text}");
        }
        let mut out = Vec::new();
        write_certificates(&mut out, &snapshot().certificates, 1_800_000_000).unwrap();
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("EXPIRED 14 days ago"));
    }
}
