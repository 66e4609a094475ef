//! The source-IP persistence table.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// A bounded map from client address prefix to server id, with an idle timeout.
///
/// - **Masks**: addresses are masked before use, IPv4 with `mask_v4` bits and IPv6 with
///   `mask_v6` bits (clamped to 32 and 128), so `mask_v4 = 24` sends a whole `/24` to one
///   server. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) count as IPv4.
/// - **Timeout**: an entry expires `timeout` after it was last inserted or found by
///   [`lookup`](Self::lookup) (an idle timeout, as the persistence timeouts of NetScaler and
///   HAProxy's stick tables). An expired entry is a miss. `Duration::ZERO` makes every lookup
///   miss.
/// - **Capacity**: at most `capacity` entries. Inserting a new prefix into a full table evicts
///   one entry: the one at the head of the insertion queue if it has expired or has not been
///   used since it was queued, else that entry moves to the tail with its new time and the next
///   one is considered ("second chance" — approximately least recently used, amortised O(1)).
///   `capacity = 0` disables the table: inserts do nothing and every lookup misses.
///
/// Time is the caller's: every call takes `now`, which should not go backwards (an earlier
/// `now` is treated as "no time has passed").
///
/// Memory: about 100 bytes per entry. All operations are O(1) amortised except
/// [`remove_server`](Self::remove_server) and [`purge`](Self::purge), which are O(len).
#[derive(Debug, Clone)]
pub struct SourceTable {
    mask_v4: u8,
    mask_v6: u8,
    timeout: Duration,
    capacity: usize,
    map: HashMap<Prefix, Entry>,
    /// Every key of `map` exactly once, oldest queue time first.
    queue: VecDeque<Prefix>,
}

/// A masked client address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Prefix {
    V4(u32),
    V6(u128),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    server: u32,
    /// When the entry was last inserted or found.
    last_seen: Instant,
    /// `last_seen` as it was when the entry took its place in the queue.
    queued_at: Instant,
}

impl SourceTable {
    /// An empty table; see the type's doc for the meaning of each argument.
    pub fn new(mask_v4: u8, mask_v6: u8, timeout: Duration, capacity: usize) -> Self {
        Self {
            mask_v4: mask_v4.min(32),
            mask_v6: mask_v6.min(128),
            timeout,
            capacity,
            map: HashMap::new(),
            queue: VecDeque::new(),
        }
    }

    /// The server persisted for `ip`'s prefix, if its entry has not expired; a hit restarts the
    /// entry's idle timeout.
    pub fn lookup(&mut self, ip: IpAddr, now: Instant) -> Option<u32> {
        let key = self.prefix(ip);
        let timeout = self.timeout;
        let entry = self.map.get_mut(&key)?;
        if expired(entry, now, timeout) {
            return None;
        }
        entry.last_seen = entry.last_seen.max(now);
        Some(entry.server)
    }

    /// Persists `ip`'s prefix to `server` (replacing any earlier server for it), evicting one
    /// entry if the table is full.
    pub fn insert(&mut self, ip: IpAddr, server: u32, now: Instant) {
        if self.capacity == 0 {
            return;
        }
        let key = self.prefix(ip);
        if let Some(entry) = self.map.get_mut(&key) {
            entry.server = server;
            entry.last_seen = entry.last_seen.max(now);
            return;
        }
        while self.map.len() >= self.capacity {
            self.evict_one(now);
        }
        self.map.insert(
            key,
            Entry {
                server,
                last_seen: now,
                queued_at: now,
            },
        );
        self.queue.push_back(key);
    }

    /// Forgets every entry that names `server` (it was removed from the pool, or an operator
    /// asked to move its clients); returns how many.
    pub fn remove_server(&mut self, server: u32) -> usize {
        let before = self.map.len();
        self.map.retain(|_, e| e.server != server);
        if self.map.len() != before {
            let map = &self.map;
            self.queue.retain(|k| map.contains_key(k));
        }
        before - self.map.len()
    }

    /// Drops every expired entry; returns how many. Optional housekeeping: expired entries are
    /// misses anyway and are the first to go when the table is full.
    pub fn purge(&mut self, now: Instant) -> usize {
        let before = self.map.len();
        let timeout = self.timeout;
        self.map.retain(|_, e| !expired(e, now, timeout));
        if self.map.len() != before {
            let map = &self.map;
            self.queue.retain(|k| map.contains_key(k));
        }
        before - self.map.len()
    }

    /// Entries held, including expired ones not yet evicted or purged.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The most entries the table holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The idle timeout of an entry.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Removes one entry (the table is not empty): see the type's doc.
    fn evict_one(&mut self, now: Instant) {
        // Terminates: an entry moved to the tail has `queued_at == last_seen`, so it is evicted
        // when it comes round again unless a lookup used it in between.
        while let Some(key) = self.queue.pop_front() {
            let Some(entry) = self.map.get_mut(&key) else {
                continue; // unreachable: the queue holds exactly the map's keys
            };
            if entry.last_seen > entry.queued_at && !expired(entry, now, self.timeout) {
                entry.queued_at = entry.last_seen;
                self.queue.push_back(key);
            } else {
                self.map.remove(&key);
                return;
            }
        }
    }

    fn prefix(&self, ip: IpAddr) -> Prefix {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                Prefix::V4(match self.mask_v4 {
                    0 => 0,
                    m => bits & (u32::MAX << (32 - u32::from(m))),
                })
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                Prefix::V6(match self.mask_v6 {
                    0 => 0,
                    m => bits & (u128::MAX << (128 - u32::from(m))),
                })
            }
        }
    }
}

fn expired(entry: &Entry, now: Instant, timeout: Duration) -> bool {
    now.saturating_duration_since(entry.last_seen) >= timeout
}

#[cfg(test)]
mod tests {
    use super::*;
    use headway_core::ManualClock;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const MIN: Duration = Duration::from_secs(60);

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn hit_miss_and_masking() {
        let t0 = ManualClock::new().epoch();
        let mut t = SourceTable::new(24, 64, MIN, 16);
        assert_eq!(t.lookup(v4(10, 0, 0, 1), t0), None);
        t.insert(v4(10, 0, 0, 1), 7, t0);
        assert_eq!(t.lookup(v4(10, 0, 0, 200), t0), Some(7)); // same /24
        assert_eq!(t.lookup(v4(10, 0, 1, 1), t0), None);
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 9).to_ipv6_mapped());
        assert_eq!(t.lookup(mapped, t0), Some(7));
        let a = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 3, 4, 5, 6));
        let b = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 9, 9, 9, 9));
        let c = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 3, 3, 4, 5, 6));
        t.insert(a, 3, t0);
        assert_eq!(t.lookup(b, t0), Some(3));
        assert_eq!(t.lookup(c, t0), None);
        // insert replaces
        t.insert(b, 4, t0);
        assert_eq!(t.lookup(a, t0), Some(4));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn masks_are_clamped_and_zero_groups_everyone() {
        let t0 = ManualClock::new().epoch();
        let mut t = SourceTable::new(200, 0, MIN, 4);
        t.insert(v4(1, 2, 3, 4), 1, t0);
        assert_eq!(t.lookup(v4(1, 2, 3, 5), t0), None); // /32: exact
        t.insert(IpAddr::V6(Ipv6Addr::LOCALHOST), 2, t0);
        assert_eq!(t.lookup(IpAddr::V6(Ipv6Addr::UNSPECIFIED), t0), Some(2)); // /0
    }

    #[test]
    fn entries_expire_after_idle_timeout_and_hits_refresh() {
        let t0 = ManualClock::new().epoch();
        let mut t = SourceTable::new(32, 128, MIN, 4);
        t.insert(v4(1, 1, 1, 1), 1, t0);
        t.insert(v4(2, 2, 2, 2), 2, t0);
        let t1 = t0 + Duration::from_secs(50);
        assert_eq!(t.lookup(v4(1, 1, 1, 1), t1), Some(1));
        let t2 = t0 + MIN;
        assert_eq!(t.lookup(v4(1, 1, 1, 1), t2), Some(1)); // refreshed at t1
        assert_eq!(t.lookup(v4(2, 2, 2, 2), t2), None); // exactly `timeout` idle
        assert_eq!(t.len(), 2);
        assert_eq!(t.purge(t2), 1);
        assert_eq!(t.len(), 1);
        // an earlier `now` is "no time passed", not a panic
        assert_eq!(t.lookup(v4(1, 1, 1, 1), t0), Some(1));
        let mut zero = SourceTable::new(32, 128, Duration::ZERO, 4);
        zero.insert(v4(1, 1, 1, 1), 1, t0);
        assert_eq!(zero.lookup(v4(1, 1, 1, 1), t0), None);
    }

    #[test]
    fn full_table_evicts_oldest_unused_first() {
        let t0 = ManualClock::new().epoch();
        let s = Duration::from_secs(1);
        let mut t = SourceTable::new(32, 128, MIN, 3);
        t.insert(v4(0, 0, 0, 1), 1, t0);
        t.insert(v4(0, 0, 0, 2), 2, t0 + s);
        t.insert(v4(0, 0, 0, 3), 3, t0 + 2 * s);
        // .1 is used again, so .2 is now the oldest unused
        assert_eq!(t.lookup(v4(0, 0, 0, 1), t0 + 3 * s), Some(1));
        t.insert(v4(0, 0, 0, 4), 4, t0 + 4 * s);
        assert_eq!(t.len(), 3);
        assert_eq!(t.lookup(v4(0, 0, 0, 2), t0 + 4 * s), None);
        for (d, id) in [(1, 1), (3, 3), (4, 4)] {
            assert_eq!(t.lookup(v4(0, 0, 0, d), t0 + 4 * s), Some(id));
        }
        let mut off = SourceTable::new(32, 128, MIN, 0);
        off.insert(v4(0, 0, 0, 1), 1, t0);
        assert!(off.is_empty());
        assert_eq!(off.lookup(v4(0, 0, 0, 1), t0), None);
    }

    #[test]
    fn remove_server_forgets_its_clients_only() {
        let t0 = ManualClock::new().epoch();
        let mut t = SourceTable::new(32, 128, MIN, 8);
        for d in 0..6 {
            t.insert(v4(0, 0, 0, d), u32::from(d % 2), t0);
        }
        assert_eq!(t.remove_server(1), 3);
        assert_eq!(t.remove_server(1), 0);
        for d in 0..6 {
            let want = (d % 2 == 0).then_some(0);
            assert_eq!(t.lookup(v4(0, 0, 0, d), t0), want);
        }
        assert_eq!(t.queue.len(), t.map.len());
    }

    proptest! {
        #[test]
        fn bounded_consistent_and_agrees_with_a_model(
            ops in prop::collection::vec((0u8..3, 0u8..24, 0u32..4, 0u64..40), 1..300),
            capacity in 0usize..10,
        ) {
            let t0 = ManualClock::new().epoch();
            let timeout = Duration::from_secs(100);
            let mut t = SourceTable::new(32, 128, timeout, capacity);
            // model: prefix → (server, last_seen); what the table holds must be a subset
            let mut model: HashMap<u8, (u32, Instant)> = HashMap::new();
            let mut now = t0;
            for (op, host, server, dt) in ops {
                now += Duration::from_secs(dt);
                let ip = v4(10, 0, 0, host);
                match op {
                    0 => {
                        t.insert(ip, server, now);
                        if capacity > 0 {
                            // the entry just written is always present
                            model.insert(host, (server, now));
                            prop_assert_eq!(t.lookup(ip, now), Some(server));
                        }
                    }
                    1 => {
                        let got = t.lookup(ip, now);
                        if let Some(s) = got {
                            // a hit is never stale nor wrong
                            let (ms, seen) = model[&host];
                            prop_assert_eq!(s, ms);
                            prop_assert!(now.duration_since(seen) < timeout);
                            model.insert(host, (ms, now));
                        }
                    }
                    _ => {
                        t.remove_server(server);
                        model.retain(|_, (s, _)| *s != server);
                        for h in 0..24 {
                            if let Some(s) = t.lookup(v4(10, 0, 0, h), now) {
                                prop_assert_ne!(s, server);
                                model.insert(h, (s, now)); // a hit refreshes
                            }
                        }
                    }
                }
                prop_assert!(t.len() <= capacity);
                prop_assert_eq!(t.queue.len(), t.map.len());
            }
        }
    }
}
