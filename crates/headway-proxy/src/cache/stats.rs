//! The cache's counters (per content group, carried across reloads by name) and the snapshot
//! the admin API, `headway ctl cache`, `headway ctl adc` and the `adc_cache_*` metrics read.

use serde::{Deserialize, Serialize};

use crate::stats::Counter;

/// A content group's counters.
#[derive(Debug, Default)]
pub struct GroupCounters {
    /// Requests answered from a stored response (fresh, a 304 to the client, or a HEAD).
    pub hits: Counter,
    /// Of those, answered with 304 Not Modified (the client's validator matched).
    pub not_modified: Counter,
    /// Requests answered from a stale response (stale-while-revalidate or stale-if-error).
    pub stale: Counter,
    /// Requests that went to the servers for a response this group may store (no object, or
    /// a stale one being revalidated).
    pub misses: Counter,
    /// Requests that waited for another request's fetch and were answered from it.
    pub coalesced: Counter,
    /// Conditional requests the cache sent to revalidate a stale object.
    pub revalidations: Counter,
    /// Of those, answered 304 by the server (the object was refreshed, its body kept).
    pub revalidated: Counter,
    /// Responses stored.
    pub stores: Counter,
    /// Responses that could not be stored (the rules said no, too large, cut short).
    pub not_stored: Counter,
    /// Objects evicted to make room.
    pub evictions: Counter,
    /// Bytes of the objects evicted.
    pub evicted_bytes: Counter,
    /// Objects removed by purges.
    pub purged: Counter,
    /// Body bytes sent to clients from stored responses.
    pub bytes_served: Counter,
}

/// The cache as the admin API shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheSnapshot {
    /// Memory for all groups together, bytes.
    pub memory_limit: u64,
    /// Bytes held by all groups now.
    pub stored_bytes: u64,
    /// Requests no policy let the cache keep (bypass), over all virtual servers.
    pub bypassed: u64,
    /// The content groups, in config order.
    pub groups: Vec<CacheGroupSnapshot>,
}

/// One content group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheGroupSnapshot {
    /// Its name.
    pub name: String,
    /// Its memory limit (after sharing the cache's), bytes.
    pub memory_limit: u64,
    /// The largest body stored, bytes.
    pub max_object_size: u64,
    /// Fixed freshness of every response (flash cache), seconds; `None` = the headers decide.
    pub force_expiry_seconds: Option<f64>,
    /// Bytes held now (bodies, fields, bookkeeping).
    pub stored_bytes: u64,
    /// Entries held now (objects, and markers of varying or uncacheable URLs).
    pub objects: u64,
    /// See [`GroupCounters::hits`].
    pub hits: u64,
    /// See [`GroupCounters::not_modified`].
    pub not_modified: u64,
    /// See [`GroupCounters::stale`].
    pub stale: u64,
    /// See [`GroupCounters::misses`].
    pub misses: u64,
    /// See [`GroupCounters::coalesced`].
    pub coalesced: u64,
    /// See [`GroupCounters::revalidations`].
    pub revalidations: u64,
    /// See [`GroupCounters::revalidated`].
    pub revalidated: u64,
    /// See [`GroupCounters::stores`].
    pub stores: u64,
    /// See [`GroupCounters::not_stored`].
    pub not_stored: u64,
    /// See [`GroupCounters::evictions`].
    pub evictions: u64,
    /// See [`GroupCounters::evicted_bytes`].
    pub evicted_bytes: u64,
    /// See [`GroupCounters::purged`].
    pub purged: u64,
    /// See [`GroupCounters::bytes_served`].
    pub bytes_served: u64,
}

impl CacheGroupSnapshot {
    /// Share of lookups answered from the cache: (hits + stale + coalesced) / (those + misses);
    /// `None` before any.
    pub fn hit_ratio(&self) -> Option<f64> {
        let served = self.hits + self.stale + self.coalesced;
        let all = served + self.misses;
        (all > 0).then(|| served as f64 / all as f64)
    }
}

impl GroupCounters {
    /// The counters' part of a snapshot.
    pub fn fill(&self, s: &mut CacheGroupSnapshot) {
        s.hits = self.hits.get();
        s.not_modified = self.not_modified.get();
        s.stale = self.stale.get();
        s.misses = self.misses.get();
        s.coalesced = self.coalesced.get();
        s.revalidations = self.revalidations.get();
        s.revalidated = self.revalidated.get();
        s.stores = self.stores.get();
        s.not_stored = self.not_stored.get();
        s.evictions = self.evictions.get();
        s.evicted_bytes = self.evicted_bytes.get();
        s.purged = self.purged.get();
        s.bytes_served = self.bytes_served.get();
    }
}

/// What a purge removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeReport {
    /// Objects removed.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
}
