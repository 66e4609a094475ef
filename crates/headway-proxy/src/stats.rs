//! Counters the data path bumps (plain atomics, no locks) and the serialisable snapshot the
//! admin API, `headway ctl adc` and the Prometheus collector read.
//!
//! The counters live as long as the thing they count: a virtual server's, group's or server's
//! counters are carried across reloads as long as its name stays (see `crate::runtime`), so a
//! reload never resets a rate in Prometheus.
//!
//! Monotonic counters ([`Counter`], [`StatusCounters`], [`Histogram`]) are sharded: each data-plane
//! worker adds to a cache line of its own and a snapshot sums the shards. One shared atomic
//! that both workers add to moves its cache line between the cores at every request; a proxied
//! request bumps about fifteen of them. [`Gauge`]s stay one shared value: limits read them.

use std::cell::Cell;
use std::sync::atomic::{
    AtomicU64, AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::workers::CacheLine as Line;

/// Shards of every monotonic counter. Worker `i` adds to shard `i % SHARDS`; other threads take
/// shards in turn.
const SHARDS: usize = 8;

thread_local! {
    /// The calling thread's shard, once chosen.
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The next shard for a thread that is not a worker.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's shard.
#[inline]
fn shard() -> usize {
    SHARD.with(|c| match c.get() {
        Some(i) => i,
        None => {
            let i = crate::workers::current().unwrap_or_else(|| NEXT_SHARD.fetch_add(1, Relaxed))
                % SHARDS;
            c.set(Some(i));
            i
        }
    })
}

/// Upper bounds of the latency histogram's buckets, in seconds (the last bucket is `+Inf`).
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// One shard of a [`Histogram`].
#[derive(Debug, Default)]
struct HistogramShard {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

/// A latency histogram with fixed buckets ([`LATENCY_BUCKETS`]) and a sum, safe to update from
/// any thread.
#[derive(Debug, Default)]
pub struct Histogram {
    shards: [Line<HistogramShard>; SHARDS],
}

impl Histogram {
    /// Records one observation.
    pub fn record(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        let shard = &self.shards[shard()].0;
        shard.buckets[i].fetch_add(1, Relaxed);
        shard
            .sum_us
            .fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }

    /// A copy of the counts.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut counts = vec![0u64; LATENCY_BUCKETS.len() + 1];
        let mut sum_us = 0u64;
        for shard in &self.shards {
            for (c, b) in counts.iter_mut().zip(&shard.0.buckets) {
                *c = c.wrapping_add(b.load(Relaxed));
            }
            sum_us = sum_us.wrapping_add(shard.0.sum_us.load(Relaxed));
        }
        HistogramSnapshot {
            counts,
            sum_seconds: sum_us as f64 / 1e6,
        }
    }
}

/// A histogram's counts: one per bucket of [`LATENCY_BUCKETS`] plus `+Inf` (not cumulative).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistogramSnapshot {
    /// Observations per bucket (`LATENCY_BUCKETS.len() + 1` entries).
    pub counts: Vec<u64>,
    /// The sum of all observations, seconds.
    pub sum_seconds: f64,
}

impl HistogramSnapshot {
    /// The number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0–1) as the upper bound of the bucket it falls in; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let want = (q.clamp(0.0, 1.0) * n as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Some(LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        Some(f64::INFINITY)
    }
}

/// Responses counted by status class.
#[derive(Debug, Default)]
pub struct StatusCounters {
    shards: [Line<[AtomicU64; 5]>; SHARDS],
}

impl StatusCounters {
    /// Counts one response with `status` (100–599; others are counted as 5xx).
    pub fn record(&self, status: u16) {
        let i = match status {
            100..=199 => 0,
            200..=299 => 1,
            300..=399 => 2,
            400..=499 => 3,
            _ => 4,
        };
        self.shards[shard()].0[i].fetch_add(1, Relaxed);
    }

    /// `[1xx, 2xx, 3xx, 4xx, 5xx]`.
    pub fn snapshot(&self) -> [u64; 5] {
        std::array::from_fn(|i| {
            self.shards
                .iter()
                .fold(0u64, |n, s| n.wrapping_add(s.0[i].load(Relaxed)))
        })
    }
}

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter {
    shards: [Line<AtomicU64>; SHARDS],
}

impl Counter {
    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.shards[shard()].0.fetch_add(n, Relaxed);
    }

    /// The value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.shards
            .iter()
            .fold(0u64, |n, s| n.wrapping_add(s.0.load(Relaxed)))
    }
}

/// A value that goes up and down (active connections, requests in flight). Sequentially
/// consistent, because the surge queue's wake-ups rely on the order of its changes.
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.0.fetch_add(1, SeqCst);
    }

    /// Adds one if the value is below `max`; 0 means no limit. Returns whether it added.
    #[inline]
    pub fn try_inc_below(&self, max: u32) -> bool {
        if max == 0 {
            self.inc();
            return true;
        }
        self.0
            .fetch_update(SeqCst, SeqCst, |v| (v < u64::from(max)).then_some(v + 1))
            .is_ok()
    }

    /// Subtracts one (never below zero).
    #[inline]
    pub fn dec(&self) {
        let _ = self
            .0
            .fetch_update(SeqCst, SeqCst, |v| Some(v.saturating_sub(1)));
    }

    /// The value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(SeqCst)
    }
}

/// A virtual server's counters.
#[derive(Debug, Default)]
pub struct VirtualServerCounters {
    /// Client connections accepted.
    pub connections: Counter,
    /// Client connections open now.
    pub active_connections: Gauge,
    /// Connections refused by a per-client limit.
    pub refused_connections: Counter,
    /// Connections closed because `allow` / `deny` do not let the client in.
    pub denied_connections: Counter,
    /// Connections closed because they did not start with a PROXY protocol header
    /// (`accept_proxy_protocol`).
    pub bad_proxy_headers: Counter,
    /// HTTP requests received (tcp: connections proxied).
    pub requests: Counter,
    /// Responses sent, by status class (HTTP only).
    pub responses: StatusCounters,
    /// Requests refused by the per-client rate limit (429).
    pub rate_limited: Counter,
    /// Requests refused for bad framing or limits (400, 431).
    pub bad_requests: Counter,
    /// Bytes received from clients (request bodies for HTTP; all bytes for tcp).
    pub bytes_in: Counter,
    /// Bytes sent to clients (response bodies for HTTP; all bytes for tcp).
    pub bytes_out: Counter,
    /// Time from request to the end of the response (HTTP), or connection lifetime (tcp).
    pub latency: Histogram,
    /// Connections upgraded to another protocol (a server's `101 Switching Protocols`: a
    /// WebSocket) (HTTP only).
    pub upgrades: Counter,
    /// Upgraded connections open now (HTTP only).
    pub tunnels: Gauge,
}

/// A server group's counters.
#[derive(Debug, Default)]
pub struct GroupCounters {
    /// Requests (or tcp connections) the group was asked to serve.
    pub requests: Counter,
    /// Requests that waited in the surge queue.
    pub queued: Counter,
    /// Requests waiting in the surge queue now.
    pub waiting: Gauge,
    /// Requests that got 503 because the queue was full or its timeout passed.
    pub queue_rejected: Counter,
    /// Requests that got 503 because no server was up.
    pub no_server: Counter,
    /// Requests sent to a server chosen by persistence.
    pub persisted: Counter,
    /// Persisted requests whose server was unavailable, sent to another.
    pub persistence_failovers: Counter,
}

/// A server's counters.
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// Requests (or tcp connections) sent to the server.
    pub requests: Counter,
    /// Requests in flight now.
    pub active: Gauge,
    /// Responses received, by status class.
    pub responses: StatusCounters,
    /// Connection attempts that failed or timed out.
    pub connect_failures: Counter,
    /// Requests that failed after connecting (reset, early close, response timeout).
    pub failures: Counter,
    /// Requests tried again elsewhere after failing here.
    pub retries: Counter,
    /// Requests sent again because this server's connection turned them away untouched (a
    /// kept-alive connection found closed, an HTTP/2 stream refused or past a GOAWAY); not
    /// counted in `retries`.
    pub resent: Counter,
    /// Server connections opened.
    pub connections_opened: Counter,
    /// Requests sent on a reused (pooled) connection.
    pub reused: Counter,
    /// Bytes sent to the server (request bodies; all bytes for tcp).
    pub bytes_out: Counter,
    /// Bytes received from the server (response bodies; all bytes for tcp).
    pub bytes_in: Counter,
    /// Time from request sent to response header.
    pub latency: Histogram,
    /// Health checks that passed.
    pub checks_ok: Counter,
    /// Health checks that failed.
    pub checks_failed: Counter,
    /// Times passive health took the server out (`max_fails` failed requests in a row).
    pub ejections: Counter,
    /// Lookups of its DNS name that failed in the background (its address stayed).
    pub dns_failures: Counter,
}

/// Everything the proxy reports: configuration summary, state and counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdcSnapshot {
    /// Config generation (1 at start, +1 per applied reload).
    pub generation: u64,
    /// Reloads refused (bad config) since start.
    pub reloads_failed: u64,
    /// The virtual servers.
    pub virtual_servers: Vec<VirtualServerSnapshot>,
    /// The server groups.
    pub groups: Vec<GroupSnapshot>,
    /// The TLS certificates (`[[certificate]]`) and who uses them.
    #[serde(default)]
    pub certificates: Vec<CertificateSnapshot>,
    /// The integrated cache (`[cache]`), if configured.
    #[serde(default)]
    pub cache: Option<crate::cache::CacheSnapshot>,
    /// The access logs the virtual servers write (one per file).
    #[serde(default)]
    pub access_logs: Vec<AccessLogSnapshot>,
}

/// One access log (file or standard output) and what became of its lines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessLogSnapshot {
    /// The file, or `-` for standard output.
    pub path: String,
    /// `combined` or `json`.
    pub format: String,
    /// Lines dropped because the writer was behind the disk.
    pub dropped: u64,
    /// Writes and flushes the file refused (a full disk, an I/O error).
    pub write_errors: u64,
    /// Times the file was opened again: rotated (moved or deleted), or asked (`SIGUSR1`).
    pub reopened: u64,
}

/// One virtual server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VirtualServerSnapshot {
    /// Its name.
    pub name: String,
    /// `http` or `tcp`.
    pub kind: String,
    /// Where it listens.
    pub listen: String,
    /// Its default group.
    pub group: String,
    /// Its content-switching rules as `name → group` (or what the proxy answers itself).
    pub rules: Vec<(String, String)>,
    /// Requests each rule matched, in the order of `rules`.
    #[serde(default)]
    pub rule_hits: Vec<u64>,
    /// Requests each rule's rate limit refused (429), in the order of `rules`.
    #[serde(default)]
    pub rule_limited: Vec<u64>,
    /// Requests each rule's basic authentication refused (401), in the order of `rules`.
    #[serde(default)]
    pub rule_unauthorized: Vec<u64>,
    /// Client connections accepted.
    pub connections: u64,
    /// Client connections open now.
    pub active_connections: u64,
    /// Connections refused by a per-client limit.
    pub refused_connections: u64,
    /// Connections closed because `allow` / `deny` do not let the client in.
    #[serde(default)]
    pub denied_connections: u64,
    /// Connections closed for a missing or broken PROXY protocol header.
    #[serde(default)]
    pub bad_proxy_headers: u64,
    /// Requests (tcp: connections proxied).
    pub requests: u64,
    /// Responses by class `[1xx, 2xx, 3xx, 4xx, 5xx]`.
    pub responses: [u64; 5],
    /// Requests refused by the rate limit.
    pub rate_limited: u64,
    /// Requests refused for bad framing or limits.
    pub bad_requests: u64,
    /// Bytes from clients.
    pub bytes_in: u64,
    /// Bytes to clients.
    pub bytes_out: u64,
    /// Connections upgraded to another protocol (WebSocket) since start.
    #[serde(default)]
    pub upgrades: u64,
    /// Upgraded connections open now.
    #[serde(default)]
    pub tunnels: u64,
    /// HTTP compression; `None` when the virtual server does not compress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<crate::http::compress::CompressionSnapshot>,
    /// Request latency.
    pub latency: HistogramSnapshot,
    /// TLS handshakes (`https` virtual servers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSnapshot>,
    /// Shadow traffic (virtual servers with a `mirror` group only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<MirrorSnapshot>,
}

/// A virtual server's shadow traffic since start (counts survive reloads).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorSnapshot {
    /// The group that gets the copies.
    pub group: String,
    /// Copies sent.
    pub sent: u64,
    /// Copies skipped because too many were in flight.
    pub skipped: u64,
    /// Copies without a whole answer.
    pub failed: u64,
    /// Answers by class `[1xx, 2xx, 3xx, 4xx, 5xx]`.
    pub responses: [u64; 5],
    /// Copies in flight now.
    pub in_flight: u64,
}

/// An `https` virtual server's TLS handshakes since start (counts survive reloads).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsSnapshot {
    /// Completed handshakes that made a new session.
    pub handshakes_full: u64,
    /// Completed handshakes that resumed a session (ticket or session cache).
    pub handshakes_resumed: u64,
    /// Completed handshakes in TLS 1.2.
    pub tls12: u64,
    /// Completed handshakes in TLS 1.3.
    pub tls13: u64,
    /// Handshakes where ALPN chose `h2`.
    pub alpn_h2: u64,
    /// Handshakes where ALPN chose `http/1.1`.
    pub alpn_http11: u64,
    /// Handshakes without ALPN (HTTP/1.1).
    pub alpn_none: u64,
    /// Handshakes where the client presented a certificate that was accepted.
    pub client_certificates: u64,
    /// Handshakes served the default certificate (no SNI, or a name no certificate holds).
    pub sni_default: u64,
    /// Failed handshakes by reason: `timeout`, `version` (SSL 3, TLS 1.0/1.1), `cipher` (no
    /// suite, group or signature scheme in common), `alpn`, `client_certificate`, `alert` (the
    /// client refused ours), `protocol` (malformed), `closed` (by the client), `other`.
    pub failures: Vec<(String, u64)>,
}

impl TlsSnapshot {
    /// Completed handshakes.
    pub fn handshakes(&self) -> u64 {
        self.handshakes_full + self.handshakes_resumed
    }

    /// Failed handshakes.
    pub fn failed(&self) -> u64 {
        self.failures.iter().map(|(_, n)| n).sum()
    }
}

/// One TLS certificate of the running config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateSnapshot {
    /// Its `[[certificate]]` name.
    pub name: String,
    /// The certificate file.
    pub cert_file: String,
    /// The key file.
    pub key_file: String,
    /// The subject's distinguished name.
    pub subject: String,
    /// The issuer's distinguished name.
    pub issuer: String,
    /// The subjectAltName DNS names (what SNI selects it by).
    pub dns_names: Vec<String>,
    /// The subjectAltName IP addresses.
    pub ip_addresses: Vec<String>,
    /// Start of validity (RFC 3339, UTC).
    pub not_before: String,
    /// End of validity (RFC 3339, UTC).
    pub not_after: String,
    /// End of validity, seconds since the Unix epoch.
    pub not_after_unix: i64,
    /// The serial number (hex).
    pub serial: String,
    /// Key type and size (`ECDSA P-256`, `RSA 2048`).
    pub key_type: String,
    /// Certificates in the chain served (leaf included).
    pub chain_length: usize,
    /// The virtual servers that serve it.
    pub virtual_servers: Vec<String>,
    /// The server groups that present it to servers.
    pub groups: Vec<String>,
}

/// One server group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupSnapshot {
    /// Its name.
    pub name: String,
    /// The selection method.
    pub method: String,
    /// The HTTP version spoken to the servers: `http1` or `h2`.
    #[serde(default)]
    pub protocol: String,
    /// The monitor's name, if any.
    pub monitor: Option<String>,
    /// The persistence kind (`cookie`, `source-ip`), if any.
    pub persistence: Option<String>,
    /// Requests.
    pub requests: u64,
    /// Requests that waited in the surge queue.
    pub queued: u64,
    /// Requests waiting now.
    pub waiting: u64,
    /// 503s from a full queue or its timeout.
    pub queue_rejected: u64,
    /// 503s because no server was up.
    pub no_server: u64,
    /// Requests sent by persistence.
    pub persisted: u64,
    /// Persisted requests moved to another server.
    pub persistence_failovers: u64,
    /// The servers.
    pub servers: Vec<ServerSnapshot>,
}

/// One server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSnapshot {
    /// Its name.
    pub name: String,
    /// The address it is connected to.
    pub address: String,
    /// The DNS name and port the config gives for it (`address` is what the name resolved
    /// to); `None` for a server given by IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Background lookups of its DNS name that failed (its address stayed).
    #[serde(default)]
    pub dns_failures: u64,
    /// Its weight.
    pub weight: u32,
    /// Its request limit (0 = none).
    pub max_connections: u32,
    /// A backup server.
    pub backup: bool,
    /// `enabled`, `disabled` or `draining`.
    pub admin_state: String,
    /// `up` or `down`.
    pub health: String,
    /// Requests.
    pub requests: u64,
    /// Requests in flight.
    pub active: u64,
    /// Responses by class.
    pub responses: [u64; 5],
    /// Failed connection attempts.
    pub connect_failures: u64,
    /// Failed requests after connecting.
    pub failures: u64,
    /// Requests tried again elsewhere.
    pub retries: u64,
    /// Requests sent again after the connection turned them away untouched.
    #[serde(default)]
    pub resent: u64,
    /// Connections opened.
    pub connections_opened: u64,
    /// Requests on reused connections.
    pub reused: u64,
    /// Idle pooled connections now.
    pub idle_connections: u64,
    /// `reused / requests` (0 when no request).
    pub reuse_ratio: f64,
    /// Bytes to the server.
    pub bytes_out: u64,
    /// Bytes from the server.
    pub bytes_in: u64,
    /// Time to response header.
    pub latency: HistogramSnapshot,
    /// Health checks passed.
    pub checks_ok: u64,
    /// Health checks failed.
    pub checks_failed: u64,
    /// Times passive health took it out.
    #[serde(default)]
    pub ejections: u64,
    /// Out of rotation now by passive health (`max_fails`).
    #[serde(default)]
    pub passive_out: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_quantiles() {
        let h = Histogram::default();
        h.record(Duration::from_micros(300));
        h.record(Duration::from_millis(3));
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.count(), 4);
        assert_eq!(s.counts[0], 1);
        assert_eq!(s.counts[3], 2);
        assert_eq!(s.counts[LATENCY_BUCKETS.len()], 1);
        assert_eq!(s.quantile(0.5), Some(0.005));
        assert_eq!(s.quantile(1.0), Some(f64::INFINITY));
        assert!((s.sum_seconds - 60.0063).abs() < 1e-9);
        assert_eq!(HistogramSnapshot::default().quantile(0.5), None);
    }

    #[test]
    fn status_classes_and_gauge_floor() {
        let s = StatusCounters::default();
        for code in [100, 200, 204, 301, 404, 503, 700] {
            s.record(code);
        }
        assert_eq!(s.snapshot(), [1, 2, 1, 1, 2]);
        let g = Gauge::default();
        g.dec();
        assert_eq!(g.get(), 0);
        g.inc();
        g.inc();
        g.dec();
        assert_eq!(g.get(), 1);
    }

    #[test]
    fn counts_from_many_threads_add_up_across_the_shards() {
        let c = Counter::default();
        let st = StatusCounters::default();
        let h = Histogram::default();
        // More threads than shards, so some share one; each adds its own amount.
        std::thread::scope(|scope| {
            for t in 0..(SHARDS as u64 * 2 + 3) {
                let (c, st, h) = (&c, &st, &h);
                scope.spawn(move || {
                    for _ in 0..1_000 {
                        c.inc();
                        st.record(200);
                        h.record(Duration::from_millis(1));
                    }
                    c.add(t);
                });
            }
        });
        let threads = SHARDS as u64 * 2 + 3;
        assert_eq!(c.get(), threads * 1_000 + (0..threads).sum::<u64>());
        assert_eq!(st.snapshot(), [0, threads * 1_000, 0, 0, 0]);
        let hs = h.snapshot();
        assert_eq!(hs.count(), threads * 1_000);
        assert_eq!(hs.counts[1], threads * 1_000);
        assert!((hs.sum_seconds - threads as f64).abs() < 1e-9);
        // The threads did not all land on one shard.
        let used = c.shards.iter().filter(|s| s.0.load(Relaxed) > 0).count();
        assert!(used > 1, "{used} shard(s) used");
    }
}
