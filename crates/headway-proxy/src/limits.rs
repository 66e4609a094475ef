//! Per-client-address limits of a virtual server: connections open at once, and new
//! connections (tcp) or requests (http) per second.
//!
//! The rate is a token bucket per address holding at most one second's worth (`rate` tokens),
//! refilled continuously. Entries are kept only while they matter: an address with no open
//! connection and a full bucket is forgotten when the table grows, so a flood of addresses
//! cannot grow it without bound. With both limits at 0 nothing is tracked at all.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use headway_core::SystemClock;
use parking_lot::Mutex;

/// Entries kept before idle ones are swept.
const SWEEP_AT: usize = 65_536;

#[derive(Debug)]
struct Entry {
    conns: u32,
    tokens: f64,
    last: Instant,
}

/// The limits and the per-address table (lasting across reloads by virtual server name).
#[derive(Debug, Default)]
pub struct ClientLimits {
    max_conns: AtomicU32,
    rate: AtomicU32,
    table: Mutex<HashMap<IpAddr, Entry>>,
}

/// A counted client connection; uncounted on drop.
#[derive(Debug)]
pub struct ClientGuard {
    limits: Option<Arc<ClientLimits>>,
    ip: IpAddr,
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        if let Some(l) = &self.limits {
            let mut t = l.table.lock();
            if let Some(e) = t.get_mut(&self.ip) {
                e.conns = e.conns.saturating_sub(1);
                if e.conns == 0 && l.rate.load(Relaxed) == 0 {
                    t.remove(&self.ip);
                }
            }
        }
    }
}

impl ClientLimits {
    /// Sets the limits (0 = none); a reload calls it again.
    pub fn configure(&self, max_conns: u32, rate: u32) {
        self.max_conns.store(max_conns, Relaxed);
        self.rate.store(rate, Relaxed);
        if max_conns == 0 && rate == 0 {
            self.table.lock().clear();
        }
    }

    /// Admits a new connection from `ip`, counting it (and, with `rate_connections`, taking a
    /// token: the tcp virtual servers' rate is per connection). `None`: refused.
    pub fn admit_connection(
        self: &Arc<Self>,
        ip: IpAddr,
        rate_connections: bool,
    ) -> Option<ClientGuard> {
        let max = self.max_conns.load(Relaxed);
        let rate = self.rate.load(Relaxed);
        if max == 0 && (rate == 0 || !rate_connections) {
            return Some(ClientGuard { limits: None, ip });
        }
        let now = SystemClock::now();
        let mut t = self.table.lock();
        if t.len() >= SWEEP_AT {
            sweep(&mut t, now, rate);
        }
        let e = t.entry(ip).or_insert(Entry {
            conns: 0,
            tokens: f64::from(rate),
            last: now,
        });
        if max != 0 && e.conns >= max {
            return None;
        }
        if rate_connections && rate != 0 && !take(e, now, rate) {
            return None;
        }
        e.conns += 1;
        Some(ClientGuard {
            limits: Some(self.clone()),
            ip,
        })
    }

    /// Takes a request token for `ip`; `false`: over the rate (429).
    pub fn admit_request(&self, ip: IpAddr) -> bool {
        let rate = self.rate.load(Relaxed);
        if rate == 0 {
            return true;
        }
        let now = SystemClock::now();
        let mut t = self.table.lock();
        if t.len() >= SWEEP_AT {
            sweep(&mut t, now, rate);
        }
        let e = t.entry(ip).or_insert(Entry {
            conns: 0,
            tokens: f64::from(rate),
            last: now,
        });
        take(e, now, rate)
    }
}

fn take(e: &mut Entry, now: Instant, rate: u32) -> bool {
    let rate = f64::from(rate);
    let dt = now.saturating_duration_since(e.last).as_secs_f64();
    e.tokens = (e.tokens + dt * rate).min(rate);
    e.last = now;
    if e.tokens >= 1.0 {
        e.tokens -= 1.0;
        true
    } else {
        false
    }
}

/// Forgets addresses with no connection whose bucket has refilled.
fn sweep(t: &mut HashMap<IpAddr, Entry>, now: Instant, rate: u32) {
    t.retain(|_, e| {
        let full = rate == 0
            || e.tokens + now.saturating_duration_since(e.last).as_secs_f64() * f64::from(rate)
                >= f64::from(rate);
        e.conns > 0 || !full
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_limit_counts_open_connections() {
        let l = Arc::new(ClientLimits::default());
        l.configure(2, 0);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let a = l.admit_connection(ip, false).unwrap();
        let _b = l.admit_connection(ip, false).unwrap();
        assert!(l.admit_connection(ip, false).is_none());
        assert!(l
            .admit_connection("10.0.0.2".parse().unwrap(), false)
            .is_some());
        drop(a);
        assert!(l.admit_connection(ip, false).is_some());
    }

    #[test]
    fn request_rate_is_a_one_second_bucket() {
        let l = ClientLimits::default();
        l.configure(0, 5);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let ok = (0..20).filter(|_| l.admit_request(ip)).count();
        // The bucket starts full (5); refill during the loop is at most a token or so.
        assert!((5..=6).contains(&ok), "{ok}");
        assert!(l.admit_request("10.0.0.3".parse().unwrap()));
    }

    #[test]
    fn no_limits_track_nothing() {
        let l = Arc::new(ClientLimits::default());
        let _g = l
            .admit_connection("10.0.0.1".parse().unwrap(), true)
            .unwrap();
        assert!(l.table.lock().is_empty());
    }
}
