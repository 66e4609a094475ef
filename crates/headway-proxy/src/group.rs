//! Server groups at run time: which server takes a request, within its limits, with
//! persistence, backups and the surge queue.
//!
//! A [`Group`] is built per config generation from a [`headway_config::adc::ServerGroup`]; the
//! state that must outlive a reload — each server's counters, health, administrative state and
//! connection pool ([`ServerState`]), and the group's counters and surge queue — lives in `Arc`s
//! that the next generation takes over by name (see `crate::runtime`).
//!
//! [`Group::acquire`] is the whole selection phase: persistence first (a persisted server that
//! is up, enabled or draining, and below its limit, is used as is), then the group's method
//! over the eligible primaries below their limits (backups only when no primary is up), then,
//! if servers are up but all at their limits, the surge queue (bounded, FIFO, with a timeout).
//! It returns a [`Lease`]: the server's in-flight count stays raised until the lease is
//! dropped, which also wakes the next queued request.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use headway_config::adc::{Persistence, ServerGroup};
use headway_core::SystemClock;
use headway_lb::health::{
    AdminState, Eligibility, Health, HealthState, Passive, PassiveEvent, PassiveState,
};
use headway_lb::persist::{CookieCodec, CookieSpec, CookieTable, SourceTable};
use headway_lb::select::slow_start::{ramped_weight, WEIGHT_SCALE};
use headway_lb::select::{Candidate, Key, Method, Selector};
use parking_lot::Mutex;
use smallvec::SmallVec;
use tokio::sync::Notify;

use crate::stats::{GroupCounters, ServerCounters, ServerSnapshot};
use crate::upstream::Pool;

/// A server's state that survives reloads (kept while the group and server names and the
/// address stay the same).
#[derive(Debug)]
pub struct ServerState {
    /// The server's address (resolved from `host` when the config gives a name).
    pub address: SocketAddr,
    /// The DNS name the config gives for it, if any.
    pub host: Option<String>,
    /// Counters.
    pub counters: ServerCounters,
    /// The pool of idle connections.
    pub pool: Pool,
    admin: AtomicU8,
    up: AtomicU8,
    health: Mutex<Option<HealthState>>,
    /// Smoothed response time, µs (0 = unknown).
    ewma_us: AtomicU64,
    /// The administrative state the config file last gave, to tell on reload whether the file
    /// changed it (then the file wins) or not (then a state set through the API stays).
    file_state: Mutex<AdminState>,
    /// Passive health, from the outcomes of requests.
    passive: Mutex<PassiveState>,
    /// Whether `passive` holds anything (failures, out, probation): a success of a server
    /// with a clear record, the usual case, takes no lock.
    passive_set: AtomicBool,
    /// When it last came into rotation, while its group's slow start may still be ramping it.
    ramp_from: Mutex<Option<Instant>>,
    /// Whether `ramp_from` is set (checked before taking its lock).
    ramping: AtomicBool,
    /// The weight it counts with: the file's, or one set through the admin API since.
    weight: AtomicU32,
    /// The weight the config file last gave ([`NO_WEIGHT`] before the first), to tell on
    /// reload whether the file changed it (then the file wins) or not (then a weight set
    /// through the API stays).
    file_weight: AtomicU32,
}

/// `file_weight` before a config gave one.
const NO_WEIGHT: u32 = u32::MAX;

impl ServerState {
    /// A new server, up, in `state`.
    pub fn new(address: SocketAddr, state: AdminState, pool: Pool) -> Self {
        ServerState {
            address,
            host: None,
            counters: ServerCounters::default(),
            pool,
            admin: AtomicU8::new(admin_code(state)),
            up: AtomicU8::new(1),
            health: Mutex::new(None),
            ewma_us: AtomicU64::new(0),
            file_state: Mutex::new(state),
            passive: Mutex::default(),
            passive_set: AtomicBool::new(false),
            ramp_from: Mutex::new(None),
            ramping: AtomicBool::new(false),
            weight: AtomicU32::new(1),
            file_weight: AtomicU32::new(NO_WEIGHT),
        }
    }

    /// The server of a config that names it `host` (a DNS name; its pool's TLS handshakes
    /// send and verify it).
    pub fn with_host(mut self, host: Option<String>) -> Self {
        self.pool = self.pool.with_host(host.clone());
        self.host = host;
        self
    }

    /// The administrative state.
    pub fn admin(&self) -> AdminState {
        match self.admin.load(Ordering::Relaxed) {
            1 => AdminState::Disabled,
            2 => AdminState::Draining,
            _ => AdminState::Enabled,
        }
    }

    /// Sets the administrative state (the admin API). Disabling closes idle connections;
    /// enabling a server that was not starts its slow start.
    pub fn set_admin(&self, state: AdminState) {
        let before = self.admin.swap(admin_code(state), Ordering::Relaxed);
        if state == AdminState::Enabled && before != admin_code(AdminState::Enabled) {
            self.start_ramp();
        }
        if state == AdminState::Disabled {
            self.pool.clear();
        }
    }

    /// Applies the file's state on reload if the file changed it.
    pub fn apply_file_state(&self, state: AdminState) {
        let mut last = self.file_state.lock();
        if *last != state {
            *last = state;
            self.set_admin(state);
        }
    }

    /// The weight it counts with now.
    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    /// Sets the weight (the admin API): it holds until the config file gives the server
    /// another weight.
    pub fn set_weight(&self, weight: u32) {
        self.weight.store(weight, Ordering::Relaxed);
    }

    /// Applies the file's weight when the server is built for a config: the first time, or
    /// when the file changed it.
    pub fn apply_file_weight(&self, weight: u32) {
        if self.file_weight.swap(weight, Ordering::Relaxed) != weight {
            self.weight.store(weight, Ordering::Relaxed);
        }
    }

    /// Takes the administrative state and weight of `prev`, the same server at its former
    /// address (its DNS name moved): a drain, disable or weight set through the admin API
    /// stays with the server.
    pub fn carry_admin_from(&self, prev: &ServerState) {
        *self.file_state.lock() = *prev.file_state.lock();
        self.admin
            .store(prev.admin.load(Ordering::Relaxed), Ordering::Relaxed);
        self.file_weight
            .store(prev.file_weight.load(Ordering::Relaxed), Ordering::Relaxed);
        self.weight
            .store(prev.weight.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The health (up unless a monitor took it down).
    pub fn health(&self) -> Health {
        if self.up.load(Ordering::Relaxed) == 1 {
            Health::Up
        } else {
            Health::Down
        }
    }

    /// Records a health check's result with the monitor's rise/fall counts; returns the new
    /// health when it changed.
    pub fn record_check(&self, ok: bool, rise: u32, fall: u32) -> Option<Health> {
        if ok {
            self.counters.checks_ok.inc();
        } else {
            self.counters.checks_failed.inc();
        }
        let mut h = self.health.lock();
        let sm = match h.as_mut() {
            Some(sm) if sm.rise() == rise && sm.fall() == fall => sm,
            _ => h.insert(HealthState::new(rise, fall, self.health())),
        };
        let t = sm.record(ok)?;
        let to = t.to();
        if to == Health::Up {
            self.start_ramp();
        }
        self.up.store(u8::from(to == Health::Up), Ordering::Relaxed);
        if to == Health::Down {
            self.pool.clear();
        }
        Some(to)
    }

    /// Records a request's outcome for passive health (`p`: the group's settings): the change,
    /// if any. Taking the server out counts an ejection and closes its idle connections.
    pub fn record_outcome(&self, ok: bool, p: &Passive) -> Option<PassiveEvent> {
        let set = self.passive_set.load(Ordering::Relaxed);
        if p.max_fails == 0 {
            // Passive health was turned off by a reload: nothing it decided stands.
            if set {
                *self.passive.lock() = PassiveState::default();
                self.passive_set.store(false, Ordering::Relaxed);
            }
            return None;
        }
        if ok && !set {
            return None;
        }
        let mut state = self.passive.lock();
        let event = state.record(ok, SystemClock::now(), p);
        self.passive_set.store(!state.is_clear(), Ordering::Relaxed);
        match event {
            Some(PassiveEvent::Out(_)) => {
                self.counters.ejections.inc();
                self.pool.clear();
            }
            Some(PassiveEvent::Back) => self.start_ramp(),
            None => {}
        }
        event
    }

    /// Whether passive health has the server out of rotation now.
    pub fn passively_out(&self) -> bool {
        if !self.passive_set.load(Ordering::Relaxed) {
            return false;
        }
        self.passive.lock().is_out(SystemClock::now())
    }

    /// Notes that the server came into rotation now: its group's slow start ramps it from here.
    fn start_ramp(&self) {
        *self.ramp_from.lock() = Some(SystemClock::now());
        self.ramping.store(true, Ordering::Relaxed);
    }

    /// The weight (scaled by [`WEIGHT_SCALE`]) the server counts with in a group whose slow
    /// start lasts `window`: its whole weight unless it came into rotation less than `window`
    /// ago.
    fn ramped_weight(&self, weight: u32, window: Duration) -> u32 {
        if !self.ramping.load(Ordering::Relaxed) {
            return weight.saturating_mul(WEIGHT_SCALE);
        }
        let mut from = self.ramp_from.lock();
        let elapsed = from.map_or(window, |t| SystemClock::now().saturating_duration_since(t));
        if elapsed >= window {
            *from = None;
            self.ramping.store(false, Ordering::Relaxed);
        }
        ramped_weight(weight, elapsed, window)
    }

    /// Forgets the monitor (the group lost it on reload): the server counts as up.
    pub fn clear_health(&self) {
        *self.health.lock() = None;
        self.up.store(1, Ordering::Relaxed);
    }

    /// What traffic the server takes now.
    pub fn eligibility(&self) -> Eligibility {
        Eligibility::of(self.admin(), self.health())
    }

    /// Folds one response time into the moving average (weight 1/8).
    pub fn observe_response_time(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .ewma_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == 0 { us } else { old - old / 8 + us / 8 })
            });
    }

    /// Raises the in-flight count if below `max` (0 = no limit).
    fn try_take(&self, max: u32) -> bool {
        self.counters.active.try_inc_below(max)
    }
}

/// Records a request's outcome on `server` for passive health, logging a change.
pub fn passive_outcome(server: &ServerState, cfg: &headway_config::adc::ServerGroup, ok: bool) {
    match server.record_outcome(ok, &cfg.passive) {
        Some(PassiveEvent::Out(_)) => tracing::warn!(
            group = %cfg.name, server = %server.address, max_fails = cfg.passive.max_fails,
            fail_timeout = ?cfg.passive.fail_timeout,
            "server taken out of rotation: its last requests failed"
        ),
        Some(PassiveEvent::Back) => tracing::info!(
            group = %cfg.name, server = %server.address,
            "server back in rotation: a request succeeded"
        ),
        None => {}
    }
}

fn admin_code(s: AdminState) -> u8 {
    match s {
        AdminState::Enabled => 0,
        AdminState::Disabled => 1,
        AdminState::Draining => 2,
    }
}

/// A name for an administrative state (`enabled`, `disabled`, `draining`).
pub fn admin_name(s: AdminState) -> &'static str {
    match s {
        AdminState::Enabled => "enabled",
        AdminState::Disabled => "disabled",
        AdminState::Draining => "draining",
    }
}

/// One server of a group in this generation: its config and its lasting state.
#[derive(Debug)]
pub struct Member {
    /// Its name.
    pub name: String,
    /// Its weight in the config file (what it counts with is [`ServerState::weight`]).
    pub weight: u32,
    /// Its in-flight limit (0 = none).
    pub max_connections: u32,
    /// A backup server.
    pub backup: bool,
    /// The lasting state.
    pub state: Arc<ServerState>,
}

/// The surge queue of a group: requests waiting for a server below its limit.
#[derive(Debug, Default)]
pub struct SurgeQueue {
    notify: Notify,
    waiting: AtomicU32,
}

/// A group's state that survives reloads (by group name).
#[derive(Debug, Default)]
pub struct GroupState {
    /// Counters.
    pub counters: GroupCounters,
    /// The surge queue.
    pub queue: SurgeQueue,
}

/// How the group keeps clients on their server.
enum Persist {
    None,
    Cookie {
        spec: CookieSpec,
        table: CookieTable,
    },
    Source(Mutex<SourceTable>),
}

/// A server group in one config generation.
pub struct Group {
    /// The configuration.
    pub config: ServerGroup,
    /// The servers, in file order (their index is their selection id).
    pub members: Vec<Member>,
    /// Lasting state.
    pub state: Arc<GroupState>,
    selector: Mutex<Selector>,
    persist: Persist,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("name", &self.config.name)
            .field("members", &self.members.len())
            .finish()
    }
}

/// Why [`Group::acquire`] found no server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// No server is up (and enabled).
    NoServer,
    /// Servers are up but at their limits, and the surge queue is full or the wait timed out.
    Busy,
}

/// The outcome of persistence for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persisted {
    /// The group has no persistence, or the request named no server.
    No,
    /// The request was sent to the server it named.
    Held,
    /// The request named a server that could not take it; another was chosen.
    Moved,
}

/// A server slot taken for one request: released (and the queue woken) on drop.
pub struct Lease {
    /// The server's index in [`Group::members`].
    pub index: usize,
    /// The server's lasting state.
    pub server: Arc<ServerState>,
    group: Arc<GroupState>,
    /// What persistence did.
    pub persisted: Persisted,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("index", &self.index).finish()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.server.counters.active.dec();
        // SeqCst pairs with the waiter's increment-then-retry in `acquire`: either the waiter
        // sees the freed slot on its retry, or this sees the waiter and wakes it.
        if self.group.queue.waiting.load(Ordering::SeqCst) > 0 {
            self.group.queue.notify.notify_one();
        }
    }
}

/// What a request offers for persistence and hashing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Affinity<'a> {
    /// The client's address.
    pub client: Option<IpAddr>,
    /// The request's persistence cookie value, if any.
    pub cookie: Option<&'a [u8]>,
    /// What the group's hash method hashes: the URL (path and query) for `url-hash`, a
    /// header's or cookie's value for `header-hash` and `cookie-hash`.
    pub hash_key: Option<&'a [u8]>,
    /// Members already tried for this request (bit i = member i, for the first 64): avoided
    /// while any other member can take the request.
    pub exclude: u64,
}

fn excluded(mask: u64, i: usize) -> bool {
    i < 64 && mask & (1 << i) != 0
}

impl Group {
    /// Builds the group from its config, taking over lasting state through `server_state`
    /// (called once per server with its name and address) and `group_state`.
    pub fn new(
        config: ServerGroup,
        group_state: Arc<GroupState>,
        mut server_state: impl FnMut(&headway_config::adc::Server) -> Arc<ServerState>,
        seed: u64,
    ) -> Self {
        let members: Vec<Member> = config
            .servers
            .iter()
            .map(|s| Member {
                name: s.name.clone(),
                weight: s.weight,
                max_connections: s.max_connections,
                backup: s.backup,
                state: server_state(s),
            })
            .collect();
        let persist = match &config.persistence {
            None => Persist::None,
            Some(Persistence::Cookie(c)) => {
                // Not a secret (a client that forges a value can only pick among the group's
                // servers); derived from the group's name so cookies survive restarts and are
                // the same on every appliance with this config.
                let secret =
                    *blake3::hash(format!("headway cookie {}", config.name).as_bytes()).as_bytes();
                let codec = CookieCodec::new(secret);
                let keys: Vec<String> = members
                    .iter()
                    .map(|m| format!("{}/{}", m.name, m.state.address))
                    .collect();
                let table = CookieTable::new(
                    &codec,
                    keys.iter().enumerate().map(|(i, k)| (k.as_str(), i as u32)),
                );
                Persist::Cookie {
                    spec: CookieSpec {
                        name: c.name.clone(),
                        path: Some(c.path.clone()),
                        max_age: c.max_age,
                        secure: c.secure,
                        http_only: c.http_only,
                        same_site: c.same_site,
                    },
                    table,
                }
            }
            Some(Persistence::SourceIp(s)) => Persist::Source(Mutex::new(SourceTable::new(
                s.mask_v4, s.mask_v6, s.timeout, s.capacity,
            ))),
            Some(_) => Persist::None,
        };
        Group {
            selector: Mutex::new(Selector::new(config.method, seed)),
            config,
            members,
            state: group_state,
            persist,
        }
    }

    /// The persistence cookie's spec, if the group inserts one.
    pub fn cookie_spec(&self) -> Option<&CookieSpec> {
        match &self.persist {
            Persist::Cookie { spec, .. } => Some(spec),
            _ => None,
        }
    }

    /// The `Set-Cookie` value that sends a client back to member `index`.
    pub fn set_cookie(&self, index: usize) -> Option<String> {
        match &self.persist {
            Persist::Cookie { spec, table } => {
                table.value(index as u32).map(|v| spec.set_cookie_value(v))
            }
            _ => None,
        }
    }

    /// The cookie value naming member `index`, to tell whether a request already carries it.
    pub fn cookie_value(&self, index: usize) -> Option<&str> {
        match &self.persist {
            Persist::Cookie { table, .. } => table.value(index as u32),
            _ => None,
        }
    }

    /// Takes a server for one request (see the module doc). Cancel-safe: dropping the future
    /// leaves the queue as it was.
    pub async fn acquire(&self, a: Affinity<'_>) -> Result<Lease, Unavailable> {
        self.state.counters.requests.inc();
        if let Some(l) = self.try_acquire(&a)? {
            return Ok(l);
        }
        // Boxed: the wait's state stays out of every request's future (copied whole when it
        // is boxed) unless the request has to wait.
        Box::pin(self.wait_in_queue(a)).await
    }

    /// [`Group::acquire`] once no server could be taken at once: a place in the surge queue.
    async fn wait_in_queue(&self, a: Affinity<'_>) -> Result<Lease, Unavailable> {
        let limit = self.config.surge_queue;
        let queue = &self.state.queue;
        if limit == 0 {
            self.state.counters.queue_rejected.inc();
            return Err(Unavailable::Busy);
        }
        if queue.waiting.fetch_add(1, Ordering::SeqCst) >= limit {
            queue.waiting.fetch_sub(1, Ordering::SeqCst);
            self.state.counters.queue_rejected.inc();
            return Err(Unavailable::Busy);
        }
        // Decrements `waiting` however this future ends.
        struct Waiting<'q>(&'q SurgeQueue, &'q GroupCounters);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.waiting.fetch_sub(1, Ordering::SeqCst);
                self.1.waiting.dec();
            }
        }
        let _w = Waiting(queue, &self.state.counters);
        self.state.counters.queued.inc();
        self.state.counters.waiting.inc();
        let deadline = tokio::time::Instant::now() + self.config.queue_timeout;
        loop {
            let notified = queue.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_acquire(&a) {
                Ok(Some(l)) => {
                    // Pass a wake-up we may have consumed on to the next waiter.
                    queue.notify.notify_one();
                    return Ok(l);
                }
                Ok(None) => {}
                Err(e) => return Err(e),
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                self.state.counters.queue_rejected.inc();
                return Err(Unavailable::Busy);
            }
        }
    }

    /// One attempt without waiting: `Ok(None)` when servers are up but all at their limits.
    fn try_acquire(&self, a: &Affinity<'_>) -> Result<Option<Lease>, Unavailable> {
        let mut persisted = Persisted::No;
        if let Some(i) = self.persisted_member(a) {
            let m = &self.members[i];
            if !excluded(a.exclude, i)
                && m.state.eligibility().takes_persistent()
                && !m.state.passively_out()
                && m.state.try_take(m.max_connections)
            {
                self.state.counters.persisted.inc();
                return Ok(Some(self.lease(i, Persisted::Held)));
            }
            persisted = Persisted::Moved;
        }
        // Slow start ramps weights for the methods that do not hash.
        let slow_start = (!self.config.slow_start.is_zero()
            && matches!(
                self.config.method,
                Method::RoundRobin | Method::LeastConnection | Method::LeastResponseTime
            ))
        .then_some(self.config.slow_start);
        let mut any_up = false;
        let mut candidates: SmallVec<[Candidate; 16]> = SmallVec::new();
        let mut skipped: SmallVec<[Candidate; 4]> = SmallVec::new();
        // Servers passive health took out only when every other one is out too (or down).
        for (backups, with_out) in [(false, false), (true, false), (false, true), (true, true)] {
            for (i, m) in self.members.iter().enumerate() {
                if m.backup != backups
                    || !m.state.eligibility().takes_new()
                    || (!with_out && m.state.passively_out())
                {
                    continue;
                }
                any_up = true;
                let active = m.state.counters.active.get();
                if m.max_connections != 0 && active >= u64::from(m.max_connections) {
                    continue;
                }
                let c = Candidate {
                    id: i as u32,
                    weight: match slow_start {
                        Some(window) => m.state.ramped_weight(m.state.weight(), window),
                        None => m.state.weight(),
                    },
                    active: u32::try_from(active).unwrap_or(u32::MAX),
                    response_time_us: m.state.ewma_us.load(Ordering::Relaxed),
                };
                if excluded(a.exclude, i) {
                    skipped.push(c);
                } else {
                    candidates.push(c);
                }
            }
            // Backups only when no primary is up (or in rotation).
            if any_up {
                break;
            }
        }
        if !any_up {
            self.state.counters.no_server.inc();
            return Err(Unavailable::NoServer);
        }
        // Servers already tried only when no other one can take the request.
        if candidates.is_empty() {
            candidates.extend(skipped);
        }
        let key = match self.config.method {
            headway_lb::select::Method::SourceIpHash => a.client.map_or(Key::None, Key::Ip),
            headway_lb::select::Method::UrlHash => a.hash_key.map_or(Key::None, Key::Url),
            headway_lb::select::Method::HeaderHash | headway_lb::select::Method::CookieHash => {
                a.hash_key.map_or(Key::None, Key::Value)
            }
            _ => Key::None,
        };
        // A candidate can reach its limit between the scan and the take (another worker):
        // drop it and pick again.
        while !candidates.is_empty() {
            let Some(pos) = self.selector.lock().pick(&candidates, key) else {
                break;
            };
            let i = candidates[pos].id as usize;
            let m = &self.members[i];
            if m.state.try_take(m.max_connections) {
                if persisted == Persisted::Moved {
                    self.state.counters.persistence_failovers.inc();
                }
                if let (Persist::Source(t), Some(ip)) = (&self.persist, a.client) {
                    t.lock().insert(ip, i as u32, SystemClock::now());
                }
                return Ok(Some(self.lease(i, persisted)));
            }
            candidates.remove(pos);
        }
        Ok(None)
    }

    fn persisted_member(&self, a: &Affinity<'_>) -> Option<usize> {
        let i = match &self.persist {
            Persist::None => return None,
            Persist::Cookie { table, .. } => table.server(a.cookie?)?,
            Persist::Source(t) => t.lock().lookup(a.client?, SystemClock::now())?,
        };
        let i = i as usize;
        (i < self.members.len()).then_some(i)
    }

    fn lease(&self, index: usize, persisted: Persisted) -> Lease {
        let server = self.members[index].state.clone();
        server.counters.requests.inc();
        Lease {
            index,
            server,
            group: self.state.clone(),
            persisted,
        }
    }

    /// A snapshot of every member.
    pub fn server_snapshots(&self) -> Vec<ServerSnapshot> {
        self.members
            .iter()
            .map(|m| {
                let c = &m.state.counters;
                let requests = c.requests.get();
                ServerSnapshot {
                    name: m.name.clone(),
                    address: m.state.address.to_string(),
                    host: m
                        .state
                        .host
                        .as_ref()
                        .map(|h| format!("{h}:{}", m.state.address.port())),
                    dns_failures: c.dns_failures.get(),
                    weight: m.state.weight(),
                    max_connections: m.max_connections,
                    backup: m.backup,
                    admin_state: admin_name(m.state.admin()).into(),
                    health: match m.state.health() {
                        Health::Up => "up".into(),
                        Health::Down => "down".into(),
                    },
                    requests,
                    active: c.active.get(),
                    responses: c.responses.snapshot(),
                    connect_failures: c.connect_failures.get(),
                    failures: c.failures.get(),
                    retries: c.retries.get(),
                    resent: c.resent.get(),
                    connections_opened: c.connections_opened.get(),
                    reused: c.reused.get(),
                    idle_connections: m.state.pool.idle_len() as u64,
                    reuse_ratio: if requests == 0 {
                        0.0
                    } else {
                        c.reused.get() as f64 / requests as f64
                    },
                    bytes_out: c.bytes_out.get(),
                    bytes_in: c.bytes_in.get(),
                    latency: c.latency.snapshot(),
                    checks_ok: c.checks_ok.get(),
                    checks_failed: c.checks_failed.get(),
                    ejections: c.ejections.get(),
                    passive_out: m.state.passively_out(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> ServerState {
        ServerState::new(
            "127.0.0.1:9".parse().unwrap(),
            AdminState::Enabled,
            Pool::new(4, Duration::from_secs(60), 1),
        )
    }

    const ON: Passive = Passive {
        max_fails: 2,
        fail_timeout: Duration::from_secs(60),
    };

    #[test]
    fn passive_health_takes_a_server_out_and_a_reload_that_turns_it_off_puts_it_back() {
        let s = server();
        assert_eq!(s.record_outcome(true, &ON), None);
        assert_eq!(s.record_outcome(false, &ON), None);
        assert!(!s.passively_out());
        assert!(matches!(
            s.record_outcome(false, &ON),
            Some(PassiveEvent::Out(_))
        ));
        assert!(s.passively_out());
        assert_eq!(s.counters.ejections.get(), 1);
        let off = Passive { max_fails: 0, ..ON };
        assert_eq!(s.record_outcome(false, &off), None);
        assert!(!s.passively_out());
    }

    #[test]
    fn a_live_weight_lasts_until_the_file_changes_its_weight() {
        let s = server();
        s.apply_file_weight(4);
        assert_eq!(s.weight(), 4);
        s.set_weight(9);
        s.apply_file_weight(4);
        assert_eq!(s.weight(), 9);
        s.apply_file_weight(2);
        assert_eq!(s.weight(), 2);
        // Moved by DNS: the live weight and the file's it was set against come along.
        s.set_weight(7);
        let moved = server();
        moved.apply_file_weight(2);
        moved.carry_admin_from(&s);
        assert_eq!(moved.weight(), 7);
        moved.apply_file_weight(2);
        assert_eq!(moved.weight(), 7);
    }

    #[test]
    fn slow_start_ramps_only_a_server_that_came_into_rotation() {
        let s = server();
        let window = Duration::from_secs(60);
        // In rotation since it was made: its whole weight.
        assert_eq!(s.ramped_weight(5, window), 5 * WEIGHT_SCALE);
        s.set_admin(AdminState::Disabled);
        s.set_admin(AdminState::Enabled);
        let w = s.ramped_weight(5, window);
        assert!((1..5 * WEIGHT_SCALE / 10).contains(&w), "{w}");
        // A window already over: whole again, and the ramp forgotten.
        assert_eq!(s.ramped_weight(5, Duration::ZERO), 5 * WEIGHT_SCALE);
        assert_eq!(s.ramped_weight(5, window), 5 * WEIGHT_SCALE);
        // Enabling an enabled server starts nothing.
        s.set_admin(AdminState::Enabled);
        assert_eq!(s.ramped_weight(5, window), 5 * WEIGHT_SCALE);
    }
}
