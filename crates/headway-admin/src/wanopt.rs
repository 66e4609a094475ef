//! The WAN-optimizer appliance as the admin API sees it: the contract with whatever runs it
//! ([`WanoptControl`]), the JSON shape of its counters ([`WanoptStats`]), their Prometheus
//! collector ([`WanoptCollector`]), the `headway ctl wanopt stats` table ([`write_stats`]) and
//! the live flow table ([`WanoptFlow`], [`write_flows`]).
//!
//! This crate does not depend on the appliance (`headway-wanopt`): the binary implements
//! [`WanoptControl`] by copying the appliance's snapshot into [`WanoptStats`]. Metrics are
//! produced on scrape from one snapshot, so the numbers of one scrape are consistent with each
//! other as far as the snapshot is.
//!
//! ## Metrics (under the registry's prefix, `headway_`)
//!
//! | metric | labels |
//! |---|---|
//! | `wanopt_lan_bytes_total` | `peer`, `class`, `direction` = `in` / `out` |
//! | `wanopt_wan_bytes_total` | `peer`, `class`, `direction` = `in` / `out` |
//! | `wanopt_flows_total` | `peer`, `class`, `outcome` = `optimized` / `failed` / `passed_through`, `reason` (`""` unless passed through) |
//! | `wanopt_store_bytes`, `wanopt_store_capacity_bytes`, `wanopt_store_chunks`, `wanopt_store_hit_ratio` | `store` = `memory` / `disk` |
//! | `wanopt_tunnel_connections_total`, `wanopt_tunnel_refused_total`, `wanopt_tunnel_peers_ready`, `wanopt_tunnel_packets_sent_total`, `wanopt_tunnel_packets_lost_total` | none |
//! | `wanopt_tunnel_fec_windows_total`, `wanopt_tunnel_fec_skipped_total`, `wanopt_tunnel_fec_repair_sent_total`, `wanopt_tunnel_fec_repair_received_total`, `wanopt_tunnel_fec_recovered_total`, `wanopt_tunnel_fec_unrecoverable_total`, `wanopt_tunnel_fec_held_total`, `wanopt_tunnel_fec_holes_given_up_total`, `wanopt_tunnel_fec_probes_sent_total`, `wanopt_tunnel_fec_probes_received_total` | none |
//! | `wanopt_tunnel_cc_delay_decreases_total`, `wanopt_tunnel_cc_loss_decreases_total`, `wanopt_tunnel_cc_persistent_congestion_total`, `wanopt_tunnel_cc_recoveries_total` | none |
//! | `wanopt_path_loss_ratio` (0 to 1; absent until measured) | `peer`, `direction` = `out` (what this side sends, as the peer measured it) / `in` |

use std::collections::BTreeMap;
use std::io::Write;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, NoLabelSet};
use prometheus_client::metrics::MetricType;
use serde::{Deserialize, Serialize};

/// What the admin API needs from a running WAN-optimizer appliance. The binary implements it
/// over its appliance; tests implement it in memory.
///
/// Called from the admin server's tasks and from metric scrapes: take a snapshot and return,
/// never block for long.
pub trait WanoptControl: Send + Sync + 'static {
    /// A snapshot of the appliance's counters.
    fn stats(&self) -> WanoptStats;
    /// The flows the appliance carries now, oldest first.
    fn flows(&self) -> Vec<WanoptFlow> {
        Vec::new()
    }
}

/// One live flow: `GET /api/v1/wanopt/flows`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WanoptFlow {
    /// Its number on this appliance.
    pub id: u64,
    /// `outbound` (a local client connected here) or `inbound` (the peer opened it).
    pub direction: String,
    /// The peer's configured name.
    pub peer: String,
    /// Its service class.
    pub class: String,
    /// The local client, for outbound flows.
    pub client: Option<String>,
    /// Where it goes.
    pub destination: String,
    /// Seconds since it started.
    pub age_seconds: f64,
    /// `None`: optimized through the tunnel; otherwise why it goes direct.
    pub passed_through: Option<String>,
    /// Bytes read from the local socket.
    pub lan_in: u64,
    /// Bytes written to the local socket.
    pub lan_out: u64,
    /// Bytes read from the tunnel.
    pub wan_in: u64,
    /// Bytes written to the tunnel.
    pub wan_out: u64,
}

/// The appliance's counters: `GET /api/v1/wanopt/stats`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WanoptStats {
    /// One entry per (peer, class) that saw a flow, sorted by peer then class.
    pub groups: Vec<WanoptGroup>,
    /// The chunk stores: `memory`, then `disk` if one is configured.
    #[serde(default)]
    pub stores: Vec<WanoptStore>,
    /// The tunnel endpoint's counters.
    #[serde(default)]
    pub tunnel: WanoptTunnel,
    /// The loss of each configured peer's path, as the forward error correction measures it.
    #[serde(default)]
    pub paths: Vec<WanoptPath>,
}

/// The measured loss of one peer's path (`None` until measured: the first 320 probes or
/// datagrams, or without forward error correction).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WanoptPath {
    /// The peer's configured name.
    pub peer: String,
    /// Loss of what this appliance sends, as the peer measured and reported it, 0 to 1.
    pub loss_out: Option<f64>,
    /// Loss of what the peer sends, as measured here, 0 to 1.
    pub loss_in: Option<f64>,
}

/// The counters of one peer and service class, seen from this appliance: LAN = local TCP
/// sockets (clients or servers), WAN = tunnel streams.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WanoptGroup {
    /// The peer's configured name.
    pub peer: String,
    /// The service class (`pass-through`, `compress`, `dedup-memory`, `dedup-disk`).
    pub class: String,
    /// Bytes read from local TCP sockets.
    pub lan_in: u64,
    /// Bytes written to local TCP sockets.
    pub lan_out: u64,
    /// Bytes read from tunnel streams.
    pub wan_in: u64,
    /// Bytes written to tunnel streams.
    pub wan_out: u64,
    /// Flows carried through the tunnel.
    pub flows_optimized: u64,
    /// Tunnelled flows that ended in a reset or error.
    pub flows_failed: u64,
    /// Flows connected directly (fail-open), by reason.
    pub flows_passed_through: BTreeMap<String, u64>,
}

impl WanoptGroup {
    /// The share of LAN bytes that did not cross the WAN: `1 − WAN / LAN`, both directions
    /// together; `None` before any byte was optimized.
    pub fn reduction(&self) -> Option<f64> {
        let lan = self.lan_in + self.lan_out;
        let wan = self.wan_in + self.wan_out;
        // Fail-open flows count LAN bytes only, so this is only meaningful with tunnel bytes.
        (lan > 0 && wan > 0).then(|| 1.0 - wan as f64 / lan as f64)
    }

    /// Flows passed through, all reasons together.
    pub fn passed_through(&self) -> u64 {
        self.flows_passed_through.values().sum()
    }
}

/// The size and hit rate of one chunk store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WanoptStore {
    /// Which store: `memory` or `disk`.
    pub store: String,
    /// Bytes held.
    pub bytes: u64,
    /// The configured bound on `bytes`.
    pub capacity: u64,
    /// Distinct chunks held.
    pub chunks: u64,
    /// Share of the chunks encoded by this store's flows that the peer already held, 0 to 1.
    pub hit_rate: f64,
}

/// The tunnel endpoint's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WanoptTunnel {
    /// Connections established (both directions).
    pub connections: u64,
    /// Configured peers a new flow reaches at once (a live connection, no handshake in
    /// progress).
    #[serde(default)]
    pub peers_ready: u64,
    /// Handshakes that failed or were refused (both directions).
    pub refused: u64,
    /// Inbound flows accepted.
    pub flows_accepted: u64,
    /// Inbound streams refused for their flow header.
    pub bad_headers: u64,
    /// QUIC packets sent over all tunnel connections.
    #[serde(default)]
    pub packets_sent: u64,
    /// QUIC packets declared lost and sent again (with FEC, also datagrams it restored too
    /// late for QUIC's loss detection).
    #[serde(default)]
    pub packets_lost: u64,
    /// Forward error correction: windows repaired (blocks near the end of a transfer, the
    /// last window of a burst, short exchanges).
    #[serde(default)]
    pub fec_windows: u64,
    /// Forward error correction: full blocks let go without repair, far from the end of a
    /// transfer (the transport's retransmission is in time there).
    #[serde(default)]
    pub fec_skipped: u64,
    /// Forward error correction: repair datagrams sent.
    #[serde(default)]
    pub fec_repair_sent: u64,
    /// Forward error correction: repair datagrams received.
    #[serde(default)]
    pub fec_repair_received: u64,
    /// Forward error correction: lost datagrams restored from repair.
    #[serde(default)]
    pub fec_recovered: u64,
    /// Forward error correction: windows that lost more than their repair could restore
    /// (QUIC retransmitted those datagrams).
    #[serde(default)]
    pub fec_unrecoverable: u64,
    /// Forward error correction: datagrams held back behind a missing datagram of a long
    /// block until it was restored (or given up).
    #[serde(default)]
    pub fec_held: u64,
    /// Forward error correction: missing datagrams of long blocks given up on (QUIC
    /// retransmitted them).
    #[serde(default)]
    pub fec_holes_given_up: u64,
    /// Forward error correction: probes sent (the start-up train that measures a new path,
    /// then one per 100 ms while the tunnel is idle).
    #[serde(default)]
    pub fec_probes_sent: u64,
    /// Forward error correction: probes received.
    #[serde(default)]
    pub fec_probes_received: u64,
    /// Congestion control: share decreases for queueing delay (or ECN marks) on the path,
    /// over all tunnel connections.
    #[serde(default)]
    pub cc_delay_decreases: u64,
    /// Congestion control: share decreases for clustered loss (random loss is not one).
    #[serde(default)]
    pub cc_loss_decreases: u64,
    /// Congestion control: persistent-congestion events (the share dropped to its minimum).
    #[serde(default)]
    pub cc_persistent_congestion: u64,
    /// Congestion control: steps back towards the whole link rate once a queue drained.
    #[serde(default)]
    pub cc_recoveries: u64,
}

/// Exports a [`WanoptControl`]'s counters as Prometheus metrics on every scrape (see the
/// module docs for the names). Register it with `Registry::register_collector`.
pub struct WanoptCollector(std::sync::Arc<dyn WanoptControl>);

impl WanoptCollector {
    /// A collector over `control`.
    pub fn new(control: std::sync::Arc<dyn WanoptControl>) -> Self {
        WanoptCollector(control)
    }
}

impl std::fmt::Debug for WanoptCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WanoptCollector")
    }
}

type Labels = Vec<(&'static str, String)>;

impl Collector for WanoptCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = self.0.stats();
        let group = |g: &WanoptGroup| -> Labels {
            vec![("peer", g.peer.clone()), ("class", g.class.clone())]
        };
        let with = |mut l: Labels, k: &'static str, v: &str| {
            l.push((k, v.to_string()));
            l
        };
        let mut lan = Vec::new();
        let mut wan = Vec::new();
        let mut flows = Vec::new();
        for g in &s.groups {
            lan.push((with(group(g), "direction", "in"), g.lan_in));
            lan.push((with(group(g), "direction", "out"), g.lan_out));
            wan.push((with(group(g), "direction", "in"), g.wan_in));
            wan.push((with(group(g), "direction", "out"), g.wan_out));
            let outcome =
                |o: &str, reason: &str| with(with(group(g), "outcome", o), "reason", reason);
            flows.push((outcome("optimized", ""), g.flows_optimized));
            flows.push((outcome("failed", ""), g.flows_failed));
            for (reason, n) in &g.flows_passed_through {
                flows.push((outcome("passed_through", reason), *n));
            }
        }
        counters(
            &mut encoder,
            "wanopt_lan_bytes",
            "Bytes on local TCP sockets of optimized and passed-through flows",
            &lan,
        )?;
        counters(
            &mut encoder,
            "wanopt_wan_bytes",
            "Bytes on tunnel streams to and from peers",
            &wan,
        )?;
        counters(
            &mut encoder,
            "wanopt_flows",
            "Flows by outcome (passed_through: connected directly, with the reason)",
            &flows,
        )?;
        fn per_store<G>(s: &WanoptStats, f: impl Fn(&WanoptStore) -> G) -> Vec<(Labels, G)> {
            s.stores
                .iter()
                .map(|st| (vec![("store", st.store.clone())], f(st)))
                .collect()
        }
        gauges(
            &mut encoder,
            "wanopt_store_bytes",
            "Bytes held by a chunk store",
            &per_store(&s, |st| st.bytes),
        )?;
        gauges(
            &mut encoder,
            "wanopt_store_capacity_bytes",
            "Configured bound of a chunk store",
            &per_store(&s, |st| st.capacity),
        )?;
        gauges(
            &mut encoder,
            "wanopt_store_chunks",
            "Distinct chunks held by a chunk store",
            &per_store(&s, |st| st.chunks),
        )?;
        gauges(
            &mut encoder,
            "wanopt_store_hit_ratio",
            "Share of encoded chunks the peer already held, 0 to 1",
            &per_store(&s, |st| st.hit_rate),
        )?;
        counters(
            &mut encoder,
            "wanopt_tunnel_connections",
            "Tunnel connections established",
            &[(vec![], s.tunnel.connections)],
        )?;
        gauges(
            &mut encoder,
            "wanopt_tunnel_peers_ready",
            "Configured peers a new flow reaches at once (live connection, no handshake in progress)",
            &[(vec![], s.tunnel.peers_ready)],
        )?;
        counters(
            &mut encoder,
            "wanopt_tunnel_refused",
            "Tunnel handshakes failed or refused",
            &[(vec![], s.tunnel.refused)],
        )?;
        for (name, help, v) in [
            (
                "wanopt_tunnel_packets_sent",
                "QUIC packets sent over the tunnel connections",
                s.tunnel.packets_sent,
            ),
            (
                "wanopt_tunnel_packets_lost",
                "QUIC packets declared lost and sent again",
                s.tunnel.packets_lost,
            ),
            (
                "wanopt_tunnel_fec_windows",
                "FEC windows repaired (tail blocks, bursts' last windows, short exchanges)",
                s.tunnel.fec_windows,
            ),
            (
                "wanopt_tunnel_fec_skipped",
                "FEC blocks let go without repair, far from the end of a transfer",
                s.tunnel.fec_skipped,
            ),
            (
                "wanopt_tunnel_fec_repair_sent",
                "FEC repair datagrams sent",
                s.tunnel.fec_repair_sent,
            ),
            (
                "wanopt_tunnel_fec_repair_received",
                "FEC repair datagrams received",
                s.tunnel.fec_repair_received,
            ),
            (
                "wanopt_tunnel_fec_recovered",
                "Lost tunnel datagrams restored from FEC repair",
                s.tunnel.fec_recovered,
            ),
            (
                "wanopt_tunnel_fec_unrecoverable",
                "FEC windows that lost more datagrams than their repair restored",
                s.tunnel.fec_unrecoverable,
            ),
            (
                "wanopt_tunnel_fec_held",
                "Tunnel datagrams held back behind a missing datagram of a long FEC block",
                s.tunnel.fec_held,
            ),
            (
                "wanopt_tunnel_fec_holes_given_up",
                "Missing datagrams of long FEC blocks given up on",
                s.tunnel.fec_holes_given_up,
            ),
            (
                "wanopt_tunnel_fec_probes_sent",
                "FEC probes sent to measure paths",
                s.tunnel.fec_probes_sent,
            ),
            (
                "wanopt_tunnel_fec_probes_received",
                "FEC probes received",
                s.tunnel.fec_probes_received,
            ),
            (
                "wanopt_tunnel_cc_delay_decreases",
                "Congestion-control share decreases for queueing delay or ECN marks",
                s.tunnel.cc_delay_decreases,
            ),
            (
                "wanopt_tunnel_cc_loss_decreases",
                "Congestion-control share decreases for clustered loss",
                s.tunnel.cc_loss_decreases,
            ),
            (
                "wanopt_tunnel_cc_persistent_congestion",
                "Congestion-control persistent-congestion events",
                s.tunnel.cc_persistent_congestion,
            ),
            (
                "wanopt_tunnel_cc_recoveries",
                "Congestion-control steps back towards the link rate",
                s.tunnel.cc_recoveries,
            ),
        ] {
            counters(&mut encoder, name, help, &[(vec![], v)])?;
        }
        let mut loss = Vec::new();
        for p in &s.paths {
            for (direction, v) in [("out", p.loss_out), ("in", p.loss_in)] {
                if let Some(v) = v {
                    loss.push((
                        vec![
                            ("peer", p.peer.clone()),
                            ("direction", direction.to_string()),
                        ],
                        v,
                    ));
                }
            }
        }
        gauges(
            &mut encoder,
            "wanopt_path_loss_ratio",
            "Measured loss of a peer's path, 0 to 1 (out: what this side sends)",
            &loss,
        )?;
        Ok(())
    }
}

/// One counter family (the text encoder appends `_total`).
fn counters(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
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

/// One gauge family.
fn gauges<G: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: &[(Labels, G)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in values {
        if labels.is_empty() {
            family.encode_gauge(v)?;
        } else {
            family.encode_family(labels)?.encode_gauge(v)?;
        }
    }
    Ok(())
}

/// The `headway ctl wanopt flows` table: one row per live flow, with its data reduction (LAN
/// bytes over WAN bytes, both ways).
pub fn write_flows(out: &mut dyn Write, flows: &[WanoptFlow]) -> std::io::Result<()> {
    if flows.is_empty() {
        return writeln!(out, "no flows");
    }
    let mut rows = vec![[
        "ID",
        "DIR",
        "PEER",
        "CLASS",
        "CLIENT",
        "DESTINATION",
        "AGE",
        "LAN IN",
        "LAN OUT",
        "WAN IN",
        "WAN OUT",
        "REDUCTION",
        "STATE",
    ]
    .map(String::from)
    .to_vec()];
    for f in flows {
        let (lan, wan) = (f.lan_in + f.lan_out, f.wan_in + f.wan_out);
        rows.push(vec![
            f.id.to_string(),
            f.direction.clone(),
            f.peer.clone(),
            f.class.clone(),
            f.client.clone().unwrap_or_else(|| "-".into()),
            f.destination.clone(),
            format!("{:.0}s", f.age_seconds),
            f.lan_in.to_string(),
            f.lan_out.to_string(),
            f.wan_in.to_string(),
            f.wan_out.to_string(),
            if wan > 0 {
                format!("{:.2}×", lan as f64 / wan as f64)
            } else {
                "-".into()
            },
            match &f.passed_through {
                None => "optimized".into(),
                Some(r) => format!("passed through: {r}"),
            },
        ]);
    }
    crate::adc::table(out, &rows)
}

/// The `headway ctl wanopt stats` table: one line per peer and class, a total line when there
/// are several, then one line per store and the tunnel's counters.
pub fn write_stats(out: &mut dyn Write, s: &WanoptStats) -> std::io::Result<()> {
    const HEADER: [&str; 10] = [
        "PEER",
        "CLASS",
        "LAN IN",
        "LAN OUT",
        "WAN IN",
        "WAN OUT",
        "REDUCTION",
        "OPTIMIZED",
        "FAILED",
        "PASSED THROUGH",
    ];
    let mut rows: Vec<Vec<String>> = vec![HEADER.map(String::from).to_vec()];
    let mut total = WanoptGroup {
        peer: "total".into(),
        class: "".into(),
        ..WanoptGroup::default()
    };
    for g in &s.groups {
        rows.push(group_row(g));
        total.lan_in += g.lan_in;
        total.lan_out += g.lan_out;
        total.wan_in += g.wan_in;
        total.wan_out += g.wan_out;
        total.flows_optimized += g.flows_optimized;
        total.flows_failed += g.flows_failed;
        for (k, v) in &g.flows_passed_through {
            *total.flows_passed_through.entry(k.clone()).or_default() += v;
        }
    }
    if s.groups.is_empty() {
        writeln!(out, "no flows yet")?;
    } else {
        if s.groups.len() > 1 {
            rows.push(group_row(&total));
        }
        write_rows(out, &rows)?;
    }
    if !s.stores.is_empty() {
        writeln!(out)?;
        let mut rows = vec![["STORE", "SIZE", "CAPACITY", "CHUNKS", "HIT RATE"]
            .map(String::from)
            .to_vec()];
        for st in &s.stores {
            rows.push(vec![
                st.store.clone(),
                bytes(st.bytes),
                bytes(st.capacity),
                st.chunks.to_string(),
                format!("{:.1}%", st.hit_rate * 100.0),
            ]);
        }
        write_rows(out, &rows)?;
    }
    writeln!(
        out,
        "\ntunnel: {} connection(s), {} peer(s) ready, {} refused, {} inbound flow(s), {} bad header(s), \
         {} packet(s) sent, {} declared lost\n\
         fec: {} window(s) repaired, {} block(s) far from a transfer's end let go, \
         {} repair datagram(s) sent, {} received, {} datagram(s) restored, {} window(s) \
         beyond repair, {} datagram(s) held back behind a missing one ({} given up), \
         {} probe(s) sent, {} received\n\
         congestion control: {} decrease(s) for queueing delay, {} for clustered loss, \
         {} persistent congestion, {} recovery step(s)",
        s.tunnel.connections,
        s.tunnel.peers_ready,
        s.tunnel.refused,
        s.tunnel.flows_accepted,
        s.tunnel.bad_headers,
        s.tunnel.packets_sent,
        s.tunnel.packets_lost,
        s.tunnel.fec_windows,
        s.tunnel.fec_skipped,
        s.tunnel.fec_repair_sent,
        s.tunnel.fec_repair_received,
        s.tunnel.fec_recovered,
        s.tunnel.fec_unrecoverable,
        s.tunnel.fec_held,
        s.tunnel.fec_holes_given_up,
        s.tunnel.fec_probes_sent,
        s.tunnel.fec_probes_received,
        s.tunnel.cc_delay_decreases,
        s.tunnel.cc_loss_decreases,
        s.tunnel.cc_persistent_congestion,
        s.tunnel.cc_recoveries
    )?;
    let pct = |v: Option<f64>| {
        v.map_or("not measured yet".to_string(), |v| {
            format!("{:.2}%", v * 100.0)
        })
    };
    for p in &s.paths {
        writeln!(
            out,
            "path to {}: loss out {}, in {}",
            p.peer,
            pct(p.loss_out),
            pct(p.loss_in)
        )?;
    }
    Ok(())
}

fn group_row(g: &WanoptGroup) -> Vec<String> {
    let passed = if g.flows_passed_through.is_empty() {
        "0".to_string()
    } else {
        let reasons: Vec<String> = g
            .flows_passed_through
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("{} ({})", g.passed_through(), reasons.join(", "))
    };
    vec![
        g.peer.clone(),
        g.class.clone(),
        bytes(g.lan_in),
        bytes(g.lan_out),
        bytes(g.wan_in),
        bytes(g.wan_out),
        g.reduction()
            .map_or("-".into(), |r| format!("{:.1}%", r * 100.0)),
        g.flows_optimized.to_string(),
        g.flows_failed.to_string(),
        passed,
    ]
}

/// `123 B`, `1.5 KiB`, `12.0 MiB`, `3.25 GiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Aligned columns; the last column is not padded.
fn write_rows(out: &mut dyn Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in rows {
        let mut line = String::new();
        for (i, (c, w)) in r.iter().zip(&widths).enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  "));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_flow_table_gives_each_flow_its_reduction_and_state() {
        let flows = [
            WanoptFlow {
                id: 7,
                direction: "outbound".into(),
                peer: "dc".into(),
                class: "dedup-disk".into(),
                client: Some("10.1.0.5:40000".into()),
                destination: "10.2.0.9:445".into(),
                age_seconds: 12.4,
                passed_through: None,
                lan_in: 900,
                lan_out: 3000,
                wan_in: 1000,
                wan_out: 300,
            },
            WanoptFlow {
                id: 8,
                direction: "outbound".into(),
                peer: "dc".into(),
                class: "dedup-disk".into(),
                client: Some("10.1.0.5:40001".into()),
                destination: "10.2.0.9:80".into(),
                passed_through: Some("timeout".into()),
                lan_in: 10,
                ..WanoptFlow::default()
            },
        ];
        let mut out = Vec::new();
        write_flows(&mut out, &flows).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("ID") && lines[0].contains("REDUCTION"),
            "{text}"
        );
        for cell in [
            "10.1.0.5:40000",
            "10.2.0.9:445",
            "12s",
            "3.00×",
            "optimized",
        ] {
            assert!(lines[1].contains(cell), "{cell} not in {text}");
        }
        assert!(lines[2].contains("passed through: timeout"), "{text}");
        assert!(lines[2].split_whitespace().any(|c| c == "-"), "{text}");
        let mut out = Vec::new();
        write_flows(&mut out, &[]).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "no flows\n");
    }

    use super::*;
    use prometheus_client::registry::Registry;
    use std::sync::Arc;

    struct Fixed(WanoptStats);

    impl WanoptControl for Fixed {
        fn stats(&self) -> WanoptStats {
            self.0.clone()
        }
    }

    fn sample() -> WanoptStats {
        WanoptStats {
            groups: vec![
                WanoptGroup {
                    peer: "dc".into(),
                    class: "dedup-memory".into(),
                    lan_in: 1000,
                    lan_out: 3_000_000,
                    wan_in: 300_000,
                    wan_out: 100,
                    flows_optimized: 2,
                    flows_failed: 0,
                    flows_passed_through: BTreeMap::from([("timeout".into(), 1)]),
                },
                WanoptGroup {
                    peer: "dc".into(),
                    class: "compress".into(),
                    ..WanoptGroup::default()
                },
            ],
            stores: vec![WanoptStore {
                store: "memory".into(),
                bytes: 2 << 20,
                capacity: 256 << 20,
                chunks: 2000,
                hit_rate: 0.5,
            }],
            tunnel: WanoptTunnel {
                connections: 1,
                peers_ready: 1,
                fec_probes_sent: 320,
                cc_delay_decreases: 3,
                ..WanoptTunnel::default()
            },
            paths: vec![WanoptPath {
                peer: "dc".into(),
                loss_out: Some(0.0312),
                loss_in: None,
            }],
        }
    }

    #[test]
    fn metrics_are_labelled_by_peer_class_and_direction() {
        let mut r = Registry::with_prefix("headway");
        r.register_collector(Box::new(WanoptCollector::new(Arc::new(Fixed(sample())))));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for line in [
            "headway_wanopt_lan_bytes_total{peer=\"dc\",class=\"dedup-memory\",direction=\"out\"} 3000000",
            "headway_wanopt_wan_bytes_total{peer=\"dc\",class=\"dedup-memory\",direction=\"in\"} 300000",
            "headway_wanopt_flows_total{peer=\"dc\",class=\"dedup-memory\",outcome=\"optimized\",reason=\"\"} 2",
            "headway_wanopt_flows_total{peer=\"dc\",class=\"dedup-memory\",outcome=\"passed_through\",reason=\"timeout\"} 1",
            "headway_wanopt_store_chunks{store=\"memory\"} 2000",
            "headway_wanopt_store_hit_ratio{store=\"memory\"} 0.5",
            "headway_wanopt_tunnel_connections_total 1",
            "headway_wanopt_tunnel_peers_ready 1",
            "headway_wanopt_tunnel_fec_probes_sent_total 320",
            "headway_wanopt_tunnel_cc_delay_decreases_total 3",
            "headway_wanopt_path_loss_ratio{peer=\"dc\",direction=\"out\"} 0.0312",
            "# TYPE headway_wanopt_flows counter",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
        }
        // A direction not measured yet has no sample (rather than a made-up 0).
        assert!(!text.contains("path_loss_ratio{peer=\"dc\",direction=\"in\"}"));
    }

    #[test]
    fn the_table_shows_reduction_reasons_and_stores() {
        let mut out = Vec::new();
        write_stats(&mut out, &sample()).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("PEER") && lines[0].contains("REDUCTION"),
            "{text}"
        );
        // 1 − 300100 / 3001000 = 90.0 %.
        assert!(
            lines[1].contains("dedup-memory") && lines[1].contains("90.0%"),
            "{text}"
        );
        assert!(lines[1].ends_with("1 (timeout=1)"), "{text}");
        assert!(lines[1].contains("2.9 MiB"), "{text}");
        assert!(
            lines[2].contains("compress") && lines[2].contains(" - "),
            "{text}"
        );
        assert!(lines[3].starts_with("total"), "{text}");
        assert!(
            text.contains("memory  2.0 MiB  256.0 MiB  2000    50.0%"),
            "{text}"
        );
        assert!(
            text.contains("tunnel: 1 connection(s), 1 peer(s) ready"),
            "{text}"
        );
        assert!(text.contains("320 probe(s) sent"), "{text}");
        assert!(
            text.contains("congestion control: 3 decrease(s) for queueing delay, 0 for"),
            "{text}"
        );
        assert!(
            text.contains("path to dc: loss out 3.12%, in not measured yet"),
            "{text}"
        );
        let at = |l: &str, w: &str| l.find(w).unwrap();
        assert_eq!(at(lines[0], "OPTIMIZED"), at(lines[1], "2 "));

        let mut out = Vec::new();
        write_stats(&mut out, &WanoptStats::default()).unwrap();
        assert!(String::from_utf8(out).unwrap().starts_with("no flows yet"));
    }

    #[test]
    fn stats_json_round_trips_and_tolerates_added_fields() {
        let s = sample();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(serde_json::from_value::<WanoptStats>(v).unwrap(), s);
        let newer = serde_json::json!({"groups": [], "later": 1});
        assert_eq!(
            serde_json::from_value::<WanoptStats>(newer).unwrap(),
            WanoptStats::default()
        );
    }
}
