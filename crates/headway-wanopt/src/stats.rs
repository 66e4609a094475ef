//! Per-peer, per-class counters of the appliance, and their serializable snapshot.
//!
//! Owns [`Stats`] (shared by every flow task through an `Arc`, lock-free on the data path:
//! each flow looks up its [`Counters`] once, then only touches atomics) and the snapshot types
//! [`ApplianceStats`] / [`GroupStats`]. It does not export metrics; the binary turns snapshots
//! into Prometheus metrics and `ctl` output.
//!
//! Byte counters are seen from this appliance: LAN in = read from local TCP sockets (clients
//! or servers), LAN out = written to them, WAN out = written to tunnel streams, WAN in = read
//! from them. A fail-open flow counts its LAN bytes and no WAN bytes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use headway_tunnel::ServiceClass;
use parking_lot::Mutex;
use serde::Serialize;

/// The counters of one (peer, class) group.
#[derive(Debug, Default)]
pub struct Counters {
    /// Bytes read from local TCP sockets.
    pub lan_in: AtomicU64,
    /// Bytes written to local TCP sockets.
    pub lan_out: AtomicU64,
    /// Bytes read from tunnel streams.
    pub wan_in: AtomicU64,
    /// Bytes written to tunnel streams.
    pub wan_out: AtomicU64,
    /// Flows carried through the tunnel (either side).
    pub flows_optimized: AtomicU64,
    /// Flows that failed (reset) after they were set up.
    pub flows_failed: AtomicU64,
    /// Needs our decoders sent to the peer (references they could not resolve).
    pub needs_sent: AtomicU64,
    /// Needs from the peer our encoders answered.
    pub needs_served: AtomicU64,
    /// Chunks our encoders cut from LAN data (dedup classes).
    pub chunks_encoded: AtomicU64,
    /// Of those, chunks the peer already held (sent as references).
    pub chunks_peer_held: AtomicU64,
    passed_through: Mutex<BTreeMap<&'static str, u64>>,
}

impl Counters {
    /// Adds `n` to one counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one flow passed through (fail-open) for `reason`.
    pub fn passed_through(&self, reason: &'static str) {
        *self.passed_through.lock().entry(reason).or_default() += 1;
    }
}

/// All counters of an appliance, keyed by peer name and service class.
#[derive(Debug, Default)]
pub struct Stats {
    groups: Mutex<BTreeMap<(String, &'static str), Arc<Counters>>>,
}

impl Stats {
    /// The counters for `peer` and `class`, created on first use.
    pub fn group(&self, peer: &str, class: ServiceClass) -> Arc<Counters> {
        self.groups
            .lock()
            .entry((peer.to_owned(), class_name(class)))
            .or_default()
            .clone()
    }

    /// A consistent-enough copy of every counter (each counter is read atomically; groups are
    /// not read at one instant).
    pub fn snapshot(&self) -> ApplianceStats {
        let groups = self
            .groups
            .lock()
            .iter()
            .map(|((peer, class), c)| GroupStats {
                peer: peer.clone(),
                class,
                lan_in: c.lan_in.load(Ordering::Relaxed),
                lan_out: c.lan_out.load(Ordering::Relaxed),
                wan_in: c.wan_in.load(Ordering::Relaxed),
                wan_out: c.wan_out.load(Ordering::Relaxed),
                flows_optimized: c.flows_optimized.load(Ordering::Relaxed),
                flows_failed: c.flows_failed.load(Ordering::Relaxed),
                needs_sent: c.needs_sent.load(Ordering::Relaxed),
                needs_served: c.needs_served.load(Ordering::Relaxed),
                chunks_encoded: c.chunks_encoded.load(Ordering::Relaxed),
                chunks_peer_held: c.chunks_peer_held.load(Ordering::Relaxed),
                flows_passed_through: c
                    .passed_through
                    .lock()
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), *v))
                    .collect(),
            })
            .collect();
        ApplianceStats {
            groups,
            stores: Vec::new(),
        }
    }
}

/// A snapshot of an appliance's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ApplianceStats {
    /// One entry per (peer, class) that saw a flow, sorted by peer then class.
    pub groups: Vec<GroupStats>,
    /// The chunk stores: `memory`, then `disk` if one is configured.
    pub stores: Vec<StoreUsage>,
}

impl ApplianceStats {
    /// The sum over all groups (`peer` and `class` are `"*"`).
    pub fn total(&self) -> GroupStats {
        let mut t = GroupStats {
            peer: "*".into(),
            class: "*",
            ..GroupStats::default()
        };
        for g in &self.groups {
            t.lan_in += g.lan_in;
            t.lan_out += g.lan_out;
            t.wan_in += g.wan_in;
            t.wan_out += g.wan_out;
            t.flows_optimized += g.flows_optimized;
            t.flows_failed += g.flows_failed;
            t.needs_sent += g.needs_sent;
            t.needs_served += g.needs_served;
            t.chunks_encoded += g.chunks_encoded;
            t.chunks_peer_held += g.chunks_peer_held;
            for (k, v) in &g.flows_passed_through {
                *t.flows_passed_through.entry(k.clone()).or_default() += v;
            }
        }
        t
    }
}

/// The counters of one peer and service class.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GroupStats {
    /// The peer's configured name ([`NO_PEER`] for intercepted flows that matched no rule).
    pub peer: String,
    /// The service class (`pass-through`, `compress`, `dedup-memory`, `dedup-disk`).
    pub class: &'static str,
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
    /// Needs our decoders sent to the peer.
    pub needs_sent: u64,
    /// Needs from the peer our encoders answered.
    pub needs_served: u64,
    /// Chunks our encoders cut from LAN data (dedup classes).
    pub chunks_encoded: u64,
    /// Of those, chunks the peer already held (sent as references).
    pub chunks_peer_held: u64,
    /// Flows connected directly (fail-open), by reason.
    pub flows_passed_through: BTreeMap<String, u64>,
}

impl GroupStats {
    /// WAN bytes both ways.
    pub fn wan_bytes(&self) -> u64 {
        self.wan_in + self.wan_out
    }
}

/// The size and hit rate of one chunk store.
///
/// Serialized with its [`StoreUsage::hit_rate`] as an extra `hit_rate` field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreUsage {
    /// Which store: `memory` or `disk`.
    pub store: &'static str,
    /// Bytes held (chunk data in RAM for `memory`, segment files for `disk`).
    pub bytes: u64,
    /// Distinct chunks held.
    pub chunks: u64,
    /// The configured bound on `bytes`.
    pub capacity: u64,
    /// Chunks encoded by the flows whose class uses this store.
    pub chunks_encoded: u64,
    /// Of those, chunks the peer already held.
    pub chunks_peer_held: u64,
}

impl StoreUsage {
    /// `chunks_peer_held / chunks_encoded` (0 before any chunk was encoded).
    pub fn hit_rate(&self) -> f64 {
        if self.chunks_encoded == 0 {
            0.0
        } else {
            self.chunks_peer_held as f64 / self.chunks_encoded as f64
        }
    }
}

impl Serialize for StoreUsage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("StoreUsage", 7)?;
        st.serialize_field("store", self.store)?;
        st.serialize_field("bytes", &self.bytes)?;
        st.serialize_field("chunks", &self.chunks)?;
        st.serialize_field("capacity", &self.capacity)?;
        st.serialize_field("chunks_encoded", &self.chunks_encoded)?;
        st.serialize_field("chunks_peer_held", &self.chunks_peer_held)?;
        st.serialize_field("hit_rate", &self.hit_rate())?;
        st.end()
    }
}

/// The peer name of the group counting intercepted flows that matched no rule.
pub const NO_PEER: &str = "-";

/// The stable label of a service class.
pub fn class_name(class: ServiceClass) -> &'static str {
    match class {
        ServiceClass::PassThrough => "pass-through",
        ServiceClass::Compress => "compress",
        ServiceClass::DedupMemory => "dedup-memory",
        ServiceClass::DedupDisk => "dedup-disk",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_kept_apart_and_summed() {
        let s = Stats::default();
        let a = s.group("b", ServiceClass::DedupMemory);
        let b = s.group("c", ServiceClass::Compress);
        assert!(Arc::ptr_eq(&a, &s.group("b", ServiceClass::DedupMemory)));
        Counters::add(&a.wan_out, 10);
        Counters::add(&b.wan_in, 5);
        Counters::add(&a.flows_optimized, 1);
        a.passed_through("timeout");
        b.passed_through("timeout");
        b.passed_through("refused");
        let snap = s.snapshot();
        assert_eq!(snap.groups.len(), 2);
        assert_eq!(snap.groups[0].peer, "b");
        assert_eq!(snap.groups[0].class, "dedup-memory");
        assert_eq!(snap.groups[0].wan_bytes(), 10);
        assert_eq!(snap.groups[1].wan_bytes(), 5);
        let t = snap.total();
        assert_eq!(t.wan_bytes(), 15);
        assert_eq!(t.flows_optimized, 1);
        assert_eq!(t.flows_passed_through["timeout"], 2);
        assert_eq!(t.flows_passed_through["refused"], 1);
    }
}
