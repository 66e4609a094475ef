//! The running proxy: listeners, config generations, live reload and graceful shutdown.
//!
//! A *generation* is everything built from one [`AdcConfig`]: its server groups, virtual
//! servers and health monitors. [`Proxy::replace`] builds the next generation beside the
//! running one — opening access logs and binding new listen addresses first, so that anything
//! that can fail fails before a byte of traffic is affected — and then swaps it in:
//!
//! - listeners whose address stays keep their socket (no connection is refused during a
//!   reload) and serve the new virtual server from their next request or connection on;
//! - listeners whose address is gone stop accepting, and their connections finish their
//!   in-flight requests and close (graceful);
//! - established connections and in-flight requests are never cut: each holds the generation it
//!   started with for as long as it needs it;
//! - state keyed by name carries over: a server's counters, health, administrative state and
//!   idle connections (same group, name and address), a group's counters and surge queue, a
//!   virtual server's counters and per-client limits. A server's `state` in the file applies
//!   on reload only when the file changed it (so a drain set through the admin API survives
//!   reloads that do not mention it).
//!
//! TLS follows the same rule: an `https` listener's rustls configuration (its [`Terminator`],
//! with the certificates of the new file) is swapped for new connections, while ticket keys,
//! the session cache and handshake counters carry over by virtual-server name.
//!
//! [`Proxy::shutdown`] stops every listener, lets connections finish within the grace period,
//! and returns.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use headway_config::adc::{AdcConfig, ServerAddress, VirtualServerKind};
use headway_io::stream::Listener as Listening;
use headway_lb::health::AdminState;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};

use crate::cache::{Cache, Purge, PurgeError, PurgeReport};
use crate::client_socket::{ClientSocket, Peer};
use crate::group::{Group, GroupState, ServerState};
use crate::http::access_log::{LogError, Logger};
use crate::http::answer::Target;
use crate::http::route::Router;
use crate::http::{Slot, VsRuntime, VsShared};
use crate::resolve::{Resolve, ResolveError, Resolved, SystemResolver};
use crate::stats::{AdcSnapshot, GroupSnapshot, VirtualServerSnapshot};
use crate::tls::{Connector, Keys, Session, Terminator};
use crate::upstream::Pool;
use crate::workers::Workers;

/// Why the proxy could not start or a new config could not be applied. Nothing was changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// A listen address could not be bound.
    #[error("virtual server {name}: cannot listen on {addr}: {source}")]
    Bind {
        /// The virtual server.
        name: String,
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// An access log could not be opened.
    #[error("virtual server {name}: {source}")]
    AccessLog {
        /// The virtual server.
        name: String,
        /// The error.
        source: LogError,
    },
    /// A TCP profile cannot be used on this host (see [`crate::tcp_profile::check`]).
    #[error(transparent)]
    TcpProfile(#[from] crate::tcp_profile::CheckError),
    /// A server's DNS name gave no address (and the running config had none for it).
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// The data-plane threads could not be started.
    #[error("cannot start the worker threads: {0}")]
    Workers(std::io::Error),
    /// A TLS configuration could not be built.
    #[error("{what}: {source}")]
    Tls {
        /// The virtual server, group or certificate.
        what: String,
        /// The error.
        source: crate::tls::BuildError,
    },
}

/// Why a server's state could not be set.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// No group has that name.
    #[error("no server group named {0:?}")]
    NoGroup(String),
    /// The group has no server of that name.
    #[error("server group {group:?} has no server named {server:?}")]
    NoServer {
        /// The group.
        group: String,
        /// The server.
        server: String,
    },
    /// A weight out of range.
    #[error("weight {0} is out of range: use 0 to 1000")]
    BadWeight(u32),
}

/// Key of a server's lasting state: group, name, address as written, address connected to.
type ServerKey = (String, String, ServerAddress, SocketAddr);

/// State kept by name across generations.
#[derive(Default)]
struct Lasting {
    servers: HashMap<ServerKey, Arc<ServerState>>,
    groups: HashMap<String, Arc<GroupState>>,
    virtual_servers: HashMap<String, Arc<VsShared>>,
    logs: Vec<Arc<Logger>>,
    /// TLS resumption state and counters of `https` virtual servers.
    tls: HashMap<String, Arc<Session>>,
    /// The integrated cache: its objects and counters outlive a reload that keeps `[cache]`.
    cache: Option<Arc<Cache>>,
}

/// One config generation.
struct Generation {
    number: u64,
    config: AdcConfig,
    /// The address of each server the config names by DNS name.
    resolved: Resolved,
    groups: Vec<Arc<Group>>,
    virtual_servers: Vec<Arc<VsRuntime>>,
    /// The TLS termination of each virtual server (same order; `https` ones only).
    terminators: Vec<Option<Arc<Terminator>>>,
    /// The integrated cache, configured for this generation when it is committed.
    cache: Option<Arc<Cache>>,
    /// Dropping it stops the generation's monitors.
    _monitors: watch::Sender<()>,
}

/// A listening socket and its accept task.
struct Listener {
    slot: Arc<Slot>,
    /// The TLS termination of an `https` listener, swapped with the virtual server.
    tls: Arc<ArcSwapOption<Terminator>>,
    bound: SocketAddr,
    /// `true` stops accepting and drains the listener's connections.
    draining: watch::Sender<bool>,
}

/// Counts client connections, for shutdown.
#[derive(Default)]
struct Tracker {
    live: AtomicUsize,
    idle: Notify,
}

struct Shared {
    current: ArcSwap<Generation>,
    listeners: Mutex<HashMap<SocketAddr, Listener>>,
    lasting: Mutex<Lasting>,
    /// Serialises reloads.
    reload: tokio::sync::Mutex<()>,
    reloads_failed: AtomicU64,
    tracker: Arc<Tracker>,
    seed: u64,
    /// Looks up servers' DNS names.
    resolver: Arc<dyn Resolve>,
    /// The data-plane threads; last, so that everything above is dropped before they stop.
    workers: Workers,
}

/// The running ADC. Cloning gives another handle to the same proxy.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("generation", &self.shared.current.load().number)
            .finish()
    }
}

impl Proxy {
    /// [`Proxy::start_with`] one worker.
    pub async fn start(config: AdcConfig, seed: u64) -> Result<Proxy, ApplyError> {
        Proxy::start_with(config, seed, 1).await
    }

    /// Starts `workers` data-plane threads ([`crate::workers`]), binds every virtual server,
    /// starts the monitors and returns once all listeners accept. Must run inside a tokio
    /// runtime, which runs the monitors and reloads. `seed` seeds the selectors' tie-breaking.
    pub async fn start_with(
        config: AdcConfig,
        seed: u64,
        workers: usize,
    ) -> Result<Proxy, ApplyError> {
        Proxy::start_with_resolver(config, seed, workers, Arc::new(SystemResolver)).await
    }

    /// [`Proxy::start_with`], looking servers' DNS names up with `resolver` instead of the
    /// system's resolver.
    pub async fn start_with_resolver(
        config: AdcConfig,
        seed: u64,
        workers: usize,
        resolver: Arc<dyn Resolve>,
    ) -> Result<Proxy, ApplyError> {
        let workers = Workers::start(workers).map_err(ApplyError::Workers)?;
        let empty = Generation {
            number: 0,
            config: AdcConfig::default(),
            resolved: Resolved::new(),
            groups: Vec::new(),
            virtual_servers: Vec::new(),
            terminators: Vec::new(),
            cache: None,
            _monitors: watch::channel(()).0,
        };
        let proxy = Proxy {
            shared: Arc::new(Shared {
                current: ArcSwap::from_pointee(empty),
                listeners: Mutex::new(HashMap::new()),
                lasting: Mutex::new(Lasting::default()),
                reload: tokio::sync::Mutex::new(()),
                reloads_failed: AtomicU64::new(0),
                tracker: Arc::new(Tracker::default()),
                seed,
                resolver,
                workers,
            }),
        };
        proxy.apply(config).await?;
        Ok(proxy)
    }

    /// Replaces the running config (validated already) without dropping a connection; on
    /// error nothing changed and the error is counted. Returns the new generation's number.
    pub async fn replace(&self, config: AdcConfig) -> Result<u64, ApplyError> {
        let r = self.apply(config).await;
        if r.is_err() {
            self.shared.reloads_failed.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Counts a reload refused before it reached the proxy (a config that did not validate).
    pub fn count_failed_reload(&self) {
        self.shared.reloads_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// The running config.
    pub fn config(&self) -> AdcConfig {
        self.shared.current.load().config.clone()
    }

    /// The address each virtual server is bound to (the real port when the config said 0).
    pub fn bound_addrs(&self) -> Vec<(String, SocketAddr)> {
        let listeners = self.shared.listeners.lock();
        self.shared
            .current
            .load()
            .virtual_servers
            .iter()
            .filter_map(|v| {
                listeners
                    .get(&v.config.listen)
                    .map(|l| (v.config.name.clone(), l.bound))
            })
            .collect()
    }

    /// Sets a server's administrative state (enable, disable, drain).
    pub fn set_server_state(
        &self,
        group: &str,
        server: &str,
        state: AdminState,
    ) -> Result<(), StateError> {
        self.server_state(group, server)?.set_admin(state);
        tracing::info!(
            group,
            server,
            state = crate::group::admin_name(state),
            "server state set"
        );
        Ok(())
    }

    /// The lasting state of `server` of `group` in the running config.
    fn server_state(&self, group: &str, server: &str) -> Result<Arc<ServerState>, StateError> {
        let current = self.shared.current.load();
        let g = current
            .groups
            .iter()
            .find(|g| g.config.name == group)
            .ok_or_else(|| StateError::NoGroup(group.to_string()))?;
        g.members
            .iter()
            .find(|m| m.name == server)
            .map(|m| m.state.clone())
            .ok_or_else(|| StateError::NoServer {
                group: group.to_string(),
                server: server.to_string(),
            })
    }

    /// Sets a server's weight (0–1000) until the config file gives it another: new clients
    /// follow it at once, and a reload that leaves the file's weight as it was keeps it.
    pub fn set_server_weight(
        &self,
        group: &str,
        server: &str,
        weight: u32,
    ) -> Result<(), StateError> {
        if weight > headway_config::adc::MAX_WEIGHT {
            return Err(StateError::BadWeight(weight));
        }
        self.server_state(group, server)?.set_weight(weight);
        tracing::info!(group, server, weight, "server weight set");
        Ok(())
    }

    /// Asks every access log to open its file again (`SIGUSR1`, after a rotation that copies
    /// or a permission fix; a moved or deleted file is followed anyway, see
    /// [`crate::http::access_log`]). Returns how many files were asked.
    pub fn reopen_logs(&self) -> usize {
        let lasting = self.shared.lasting.lock();
        for l in &lasting.logs {
            l.reopen();
        }
        lasting.logs.iter().filter(|l| l.path().is_some()).count()
    }

    /// Configuration, state and counters of every virtual server, group and server.
    pub fn snapshot(&self) -> AdcSnapshot {
        let g = self.shared.current.load();
        AdcSnapshot {
            generation: g.number,
            reloads_failed: self.shared.reloads_failed.load(Ordering::Relaxed),
            certificates: crate::tls::certificates(&g.config),
            cache: g.cache.as_ref().map(|c| c.snapshot()),
            access_logs: self
                .shared
                .lasting
                .lock()
                .logs
                .iter()
                .map(|l| l.snapshot())
                .collect(),
            virtual_servers: g
                .virtual_servers
                .iter()
                .zip(&g.terminators)
                .map(|(v, t)| {
                    let c = &v.shared.counters;
                    VirtualServerSnapshot {
                        name: v.config.name.clone(),
                        kind: v.config.kind.as_str().into(),
                        listen: v.config.listen.to_string(),
                        group: v.router.default_target().describe(),
                        rules: v
                            .router
                            .rules()
                            .map(|(r, t)| (r.name.clone(), t.describe()))
                            .collect(),
                        rule_hits: v.rule_hits(),
                        rule_limited: v.rule_limited(),
                        rule_unauthorized: v.rule_unauthorized(),
                        connections: c.connections.get(),
                        active_connections: c.active_connections.get(),
                        refused_connections: c.refused_connections.get(),
                        denied_connections: c.denied_connections.get(),
                        bad_proxy_headers: c.bad_proxy_headers.get(),
                        requests: c.requests.get(),
                        responses: c.responses.snapshot(),
                        rate_limited: c.rate_limited.get(),
                        bad_requests: c.bad_requests.get(),
                        bytes_in: c.bytes_in.get(),
                        bytes_out: c.bytes_out.get(),
                        upgrades: c.upgrades.get(),
                        tunnels: c.tunnels.get(),
                        compression: v.compression_snapshot(),
                        latency: c.latency.snapshot(),
                        tls: t.as_ref().map(|t| t.counters().snapshot()),
                        mirror: v.mirror_snapshot(),
                    }
                })
                .collect(),
            groups: g
                .groups
                .iter()
                .map(|grp| {
                    let c = &grp.state.counters;
                    GroupSnapshot {
                        name: grp.config.name.clone(),
                        method: grp.config.method.to_string(),
                        protocol: match grp.config.protocol {
                            headway_config::adc::UpstreamProtocol::Http1 => "http1",
                            headway_config::adc::UpstreamProtocol::Http2 => "h2",
                        }
                        .to_string(),
                        monitor: grp.config.monitor.clone(),
                        persistence: grp.config.persistence.as_ref().map(|p| {
                            match p {
                                headway_config::adc::Persistence::Cookie(_) => "cookie",
                                _ => "source-ip",
                            }
                            .to_string()
                        }),
                        requests: c.requests.get(),
                        queued: c.queued.get(),
                        waiting: c.waiting.get(),
                        queue_rejected: c.queue_rejected.get(),
                        no_server: c.no_server.get(),
                        persisted: c.persisted.get(),
                        persistence_failovers: c.persistence_failovers.get(),
                        servers: grp.server_snapshots(),
                    }
                })
                .collect(),
        }
    }

    /// Removes what `purge` names from the integrated cache, at once.
    pub fn purge_cache(&self, purge: &Purge) -> Result<PurgeReport, PurgeError> {
        match &self.shared.current.load().cache {
            Some(c) => c.purge(purge),
            None => Err(PurgeError::NoCache),
        }
    }

    /// Stops accepting everywhere, lets connections finish for up to `grace`, and returns.
    /// Connections still open after `grace` are cut when the runtime stops.
    pub async fn shutdown(&self, grace: Duration) {
        for l in self.shared.listeners.lock().values() {
            let _ = l.draining.send(true);
        }
        let tracker = self.shared.tracker.clone();
        let wait = async {
            loop {
                let idle = tracker.idle.notified();
                if tracker.live.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        };
        if tokio::time::timeout(grace, wait).await.is_err() {
            tracing::warn!(
                connections = tracker.live.load(Ordering::SeqCst),
                "shutdown grace period over; closing the remaining connections"
            );
        }
    }

    async fn apply(&self, config: AdcConfig) -> Result<u64, ApplyError> {
        let _one_at_a_time = self.shared.reload.lock().await;
        self.apply_locked(config).await
    }

    /// Applies the running config again if generation `number` still runs: a server's DNS
    /// name points elsewhere now ([`crate::resolve`]).
    async fn reapply(&self, number: u64) {
        let _one_at_a_time = self.shared.reload.lock().await;
        let current = self.shared.current.load_full();
        if current.number != number {
            return;
        }
        match self.apply_locked(current.config.clone()).await {
            Ok(n) => tracing::info!(generation = n, "server addresses from DNS applied"),
            Err(e) => tracing::warn!(error = %e, "cannot apply server addresses from DNS"),
        }
    }

    /// [`Proxy::apply`] while holding the reload lock.
    async fn apply_locked(&self, config: AdcConfig) -> Result<u64, ApplyError> {
        let sh = &self.shared;
        let number = sh.current.load().number + 1;
        let resolved =
            crate::resolve::resolve_config(&config, &*sh.resolver, &sh.current.load().resolved)
                .await?;
        let (generation, lasting) = self.build(config, number, resolved)?;
        log_tcp_report(&crate::tcp_profile::check(&generation.config)?);
        // Bind what is new before anything changes.
        let mut new_listeners: Vec<(SocketAddr, Vec<std::net::TcpListener>, usize)> = Vec::new();
        {
            let listeners = sh.listeners.lock();
            for (i, v) in generation.virtual_servers.iter().enumerate() {
                if !listeners.contains_key(&v.config.listen) {
                    let socks =
                        bind(&v.config, sh.workers.len()).map_err(|source| ApplyError::Bind {
                            name: v.config.name.clone(),
                            addr: v.config.listen,
                            source,
                        })?;
                    new_listeners.push((v.config.listen, socks, i));
                }
            }
        }
        // Commit.
        if let (Some(c), Some(cfg)) = (&generation.cache, &generation.config.cache) {
            c.configure(cfg);
        }
        let generation = Arc::new(generation);
        *sh.lasting.lock() = lasting;
        let mut listeners = sh.listeners.lock();
        let wanted: HashMap<SocketAddr, (&Arc<VsRuntime>, &Option<Arc<Terminator>>)> = generation
            .virtual_servers
            .iter()
            .zip(&generation.terminators)
            .map(|(v, t)| (v.config.listen, (v, t)))
            .collect();
        listeners.retain(|addr, l| match wanted.get(addr) {
            Some((v, t)) => {
                // TLS first: a connection that sees the new kind finds its terminator.
                l.tls.store((*t).clone());
                l.slot.vs.store((*v).clone());
                true
            }
            None => {
                let _ = l.draining.send(true);
                false
            }
        });
        for (addr, socks, i) in new_listeners {
            let vs = generation.virtual_servers[i].clone();
            // What `bind` set on the listening sockets, which accepted sockets inherit.
            let bound_profile = vs.config.tcp_profile.clone();
            let bound = socks
                .first()
                .and_then(|s| s.local_addr().ok())
                .unwrap_or(addr);
            let slot = Arc::new(Slot {
                vs: ArcSwap::new(vs),
            });
            let tls = Arc::new(ArcSwapOption::new(generation.terminators[i].clone()));
            let (draining, rx) = watch::channel(false);
            // One accept loop per worker, each on its own socket of the address.
            for (w, sock) in socks.into_iter().enumerate() {
                let (slot, tls, rx) = (slot.clone(), tls.clone(), rx.clone());
                let (tracker, profile) = (sh.tracker.clone(), bound_profile.clone());
                sh.workers.spawn(w, async move {
                    match Listening::new(sock) {
                        Ok(l) => accept_loop(l, slot, tls, rx, tracker, profile).await,
                        Err(e) => tracing::error!(%addr, error = %e, "cannot register a listener"),
                    }
                });
            }
            listeners.insert(
                addr,
                Listener {
                    slot,
                    tls,
                    bound,
                    draining,
                },
            );
        }
        drop(listeners);
        self.watch_names(&generation);
        sh.current.store(generation);
        tracing::info!(generation = number, "configuration applied");
        Ok(number)
    }

    /// Starts, for each group with servers given by DNS name and a `dns_refresh`, a task that
    /// looks them up again at that interval for as long as `generation` runs, and applies the
    /// config again when one points elsewhere.
    fn watch_names(&self, generation: &Generation) {
        if generation.resolved.is_empty() {
            return;
        }
        for (g, group) in generation.config.groups.iter().zip(&generation.groups) {
            let named = g.servers.iter().any(|s| s.address.host().is_some());
            if !named || g.dns_refresh.is_zero() {
                continue;
            }
            let (config, group) = (g.clone(), group.clone());
            let resolved = generation.resolved.clone();
            let number = generation.number;
            let proxy = Arc::downgrade(&self.shared);
            let mut stop = generation._monitors.subscribe();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(config.dns_refresh) => {}
                        _ = stop.changed() => return,
                    }
                    let Some(shared) = proxy.upgrade() else {
                        return;
                    };
                    if shared.current.load().number != number {
                        // Replaced; kept alive by connections that started on it.
                        return;
                    }
                    let resolver = shared.resolver.clone();
                    let failed = |name: &str| {
                        if let Some(m) = group.members.iter().find(|m| m.name == name) {
                            m.state.counters.dns_failures.inc();
                        }
                    };
                    if crate::resolve::refresh(&config, &*resolver, &resolved, failed).await {
                        Proxy { shared }.reapply(number).await;
                        return;
                    }
                }
            });
        }
    }

    /// Builds a generation, taking over lasting state by name.
    fn build(
        &self,
        config: AdcConfig,
        number: u64,
        resolved: Resolved,
    ) -> Result<(Generation, Lasting), ApplyError> {
        let sh = &self.shared;
        let old = sh.lasting.lock();
        let mut next = Lasting::default();
        let (monitors, stop) = watch::channel(());
        // TLS first: it can fail, and nothing lasting has changed yet.
        let tls_error = |what: String| move |source| ApplyError::Tls { what, source };
        let keys = Keys::new(&config.certificates).map_err(tls_error("certificates".into()))?;
        let mut connectors: HashMap<&str, Arc<Connector>> = HashMap::new();
        for g in &config.groups {
            if let Some(t) = &g.tls {
                let c = Connector::new(g, t, &keys)
                    .map_err(tls_error(format!("server group {}", g.name)))?;
                connectors.insert(&g.name, Arc::new(c));
            }
        }
        let mut terminators = Vec::with_capacity(config.virtual_servers.len());
        for v in &config.virtual_servers {
            let Some(t) = &v.tls else {
                terminators.push(None);
                continue;
            };
            let what = || format!("virtual server {}", v.name);
            let session = Session::carry(old.tls.get(&v.name), t).map_err(tls_error(what()))?;
            let term = Terminator::new(v, t, &keys, &session).map_err(tls_error(what()))?;
            next.tls.insert(v.name.clone(), session);
            terminators.push(Some(Arc::new(term)));
        }
        // The cache carries over; a changed config is applied when the generation commits.
        let cache = config.cache.as_ref().map(|c| match &old.cache {
            Some(k) => k.clone(),
            None => Cache::new(c),
        });
        next.cache = cache.clone();
        let mut groups: Vec<Arc<Group>> = Vec::with_capacity(config.groups.len());
        for (gi, g) in config.groups.iter().enumerate() {
            let connector = connectors.get(g.name.as_str()).cloned();
            let gs = old.groups.get(&g.name).cloned().unwrap_or_default();
            next.groups.insert(g.name.clone(), gs.clone());
            let group = Group::new(
                g.clone(),
                gs,
                |s| {
                    let addr = match &s.address {
                        ServerAddress::Ip(a) => *a,
                        ServerAddress::Name { .. } => resolved[&(g.name.clone(), s.name.clone())].1,
                    };
                    let key = (g.name.clone(), s.name.clone(), s.address.clone(), addr);
                    let st = match old.servers.get(&key) {
                        Some(st) => {
                            st.pool
                                .configure(g.pool_max_idle as usize, g.pool_idle_timeout);
                            st.apply_file_state(s.state);
                            st.apply_file_weight(s.weight);
                            if g.monitor.is_none() {
                                st.clear_health();
                            }
                            st.clone()
                        }
                        None => {
                            let st = ServerState::new(
                                addr,
                                s.state,
                                Pool::new(
                                    g.pool_max_idle as usize,
                                    g.pool_idle_timeout,
                                    sh.workers.len(),
                                ),
                            )
                            .with_host(s.address.host().map(str::to_string));
                            st.apply_file_weight(s.weight);
                            // The same server at another address (its name moved): a state
                            // or weight set through the admin API stays, unless the file
                            // changed it.
                            let moved = old.servers.iter().find(|(k, _)| {
                                (&k.0, &k.1, &k.2) == (&g.name, &s.name, &s.address)
                            });
                            if let Some((_, prev)) = moved {
                                st.carry_admin_from(prev);
                                st.apply_file_state(s.state);
                                st.apply_file_weight(s.weight);
                            }
                            Arc::new(st)
                        }
                    };
                    st.pool.set_tls(connector.clone());
                    st.pool
                        .set_protocol(g.protocol == headway_config::adc::UpstreamProtocol::Http2);
                    next.servers.insert(key, st.clone());
                    st
                },
                sh.seed.wrapping_add(gi as u64),
            );
            groups.push(Arc::new(group));
        }
        let find = |name: &str| {
            groups
                .iter()
                .find(|g| g.config.name == name)
                .cloned()
                .expect("the config checked every group reference")
        };
        let mut virtual_servers = Vec::with_capacity(config.virtual_servers.len());
        for v in &config.virtual_servers {
            let shared = old
                .virtual_servers
                .get(&v.name)
                .cloned()
                .unwrap_or_default();
            next.virtual_servers.insert(v.name.clone(), shared.clone());
            let log = match &v.access_log {
                None => None,
                Some(a) => {
                    let reuse = old
                        .logs
                        .iter()
                        .chain(next.logs.iter())
                        .find(|l| l.is(a.path.as_deref(), a.format))
                        .cloned();
                    let l = match reuse {
                        Some(l) => l,
                        None => Arc::new(Logger::open(a.path.as_deref(), a.format).map_err(
                            |source| ApplyError::AccessLog {
                                name: v.name.clone(),
                                source,
                            },
                        )?),
                    };
                    if !next.logs.iter().any(|x| Arc::ptr_eq(x, &l)) {
                        next.logs.push(l.clone());
                    }
                    Some(l)
                }
            };
            let router = Router::new(
                v.rules
                    .iter()
                    .map(|r| (r.clone(), Target::new(&r.action, find)))
                    .collect(),
                Target::new(&v.action, find),
            );
            let vs_cache = cache
                .as_ref()
                .filter(|_| config.cache.as_ref().is_some_and(|c| c.serves(&v.name)))
                .filter(|_| v.kind != headway_config::adc::VirtualServerKind::Tcp)
                .cloned();
            virtual_servers.push(Arc::new(
                VsRuntime::new(v.clone(), router, shared, log)
                    .with_cache(vs_cache)
                    .with_mirror(v.mirror.as_deref().map(find)),
            ));
        }
        drop(old);
        // Monitors of the new generation; the old generation's stop when it is dropped.
        for g in &groups {
            let Some(m) = g.config.monitor.as_ref().and_then(|m| config.monitor(m)) else {
                continue;
            };
            for member in &g.members {
                crate::health::spawn(
                    m.clone(),
                    &g.config,
                    member.name.clone(),
                    member.state.clone(),
                    connectors.get(g.config.name.as_str()).cloned(),
                    stop.clone(),
                );
            }
        }
        drop(stop);
        Ok((
            Generation {
                number,
                config,
                resolved,
                groups,
                virtual_servers,
                terminators,
                cache,
                _monitors: monitors,
            },
            next,
        ))
    }
}

/// The listening sockets of virtual server `v`, one per worker: `SO_REUSEADDR`, the virtual
/// server's TCP profile (accepted connections inherit it, and the handshake follows it) and its
/// backlog. With more than one worker they share the address with `SO_REUSEPORT`, and the
/// kernel spreads connections over them. The address is first bound once without it, so that
/// an address another socket already listens on (another process, or a stale instance) is
/// refused as it would be without sharing; port 0 gets its real port there. What would weaken
/// the listener under a SYN flood is logged ([`crate::listen::findings`]).
fn bind(
    v: &headway_config::adc::VirtualServer,
    workers: usize,
) -> std::io::Result<Vec<std::net::TcpListener>> {
    for f in crate::listen::findings(v.backlog, &crate::listen::ListenHost::read()) {
        tracing::warn!(virtual_server = %v.name, listen = %v.listen, "{f}");
    }
    if workers <= 1 {
        return Ok(vec![bind_one(v, v.listen, false)?]);
    }
    let addr = {
        let probe = socket(v.listen, v, false)?;
        probe.bind(&v.listen.into())?;
        probe.local_addr()?.as_socket().unwrap_or(v.listen)
    };
    (0..workers).map(|_| bind_one(v, addr, true)).collect()
}

/// One listening socket of `v` on `addr`.
fn bind_one(
    v: &headway_config::adc::VirtualServer,
    addr: SocketAddr,
    shared: bool,
) -> std::io::Result<std::net::TcpListener> {
    let s = socket(addr, v, shared)?;
    s.bind(&addr.into())?;
    s.listen(i32::try_from(v.backlog).unwrap_or(i32::MAX))?;
    if v.kind != VirtualServerKind::Tcp
        && !v.tcp_profile.as_ref().is_some_and(|p| p.socket.quickack)
    {
        // The proxy answers what the client sends first (a request, a ClientHello), so the
        // acknowledgement of those bytes can ride on the answer instead of going out alone
        // the moment they arrive: quick-ACK mode off on the listener, which the connections
        // it accepts inherit (otherwise Linux starts each connection in quick-ACK mode and
        // acknowledges its first data segment at once). One segment, and one wake-up of the
        // client's kernel, fewer per connection; HAProxy does the same on its HTTP listeners.
        // Every request of a keep-alive connection after the first is in this mode anyway.
        // A client that holds the rest of a request back until it is acknowledged (Nagle's
        // algorithm) gets that acknowledgement at once (`http::Stream::ack_now`). Set after
        // `listen`, which resets a socket's acknowledgement state; a profile that asks for
        // quick ACKs keeps them (`tcp_profile::apply_accepted`).
        if let Err(e) = s.set_tcp_quickack(false) {
            tracing::debug!(listen = %addr, error = %e, "TCP_QUICKACK refused");
        }
    }
    Ok(s.into())
}

/// A non-blocking TCP socket for `addr` with `v`'s listener options, not bound yet.
fn socket(
    addr: SocketAddr,
    v: &headway_config::adc::VirtualServer,
    shared: bool,
) -> std::io::Result<socket2::Socket> {
    let domain = socket2::Domain::for_address(addr);
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if shared {
        s.set_reuse_port(true)?;
    }
    s.set_nonblocking(true)?;
    crate::tcp_profile::apply_listener(&s, v.tcp_profile.as_ref());
    if v.kind != VirtualServerKind::Tcp {
        // HTTP and TLS clients speak first: a connection is handed out once its first bytes
        // are in, so the worker is woken once for it (accept and read together) and a client
        // that connects and says nothing holds no descriptor or task until the kernel gives
        // up waiting (about a second; then the request header timeout applies). Not for
        // `tcp` virtual servers: their protocol may have the server speak first.
        if let Err(e) = headway_io::tcp::set_defer_accept(&s, DEFER_ACCEPT) {
            tracing::debug!(listen = %addr, error = %e, "TCP_DEFER_ACCEPT refused");
        }
    }
    Ok(s)
}

/// How long an `http`/`https` listener's kernel holds a connection that has sent nothing
/// before handing it out anyway (`TCP_DEFER_ACCEPT`).
const DEFER_ACCEPT: Duration = Duration::from_secs(1);

/// Logs what the TCP profile check found: warnings, and the options Linux keeps per route,
/// which Headway does not set (it does not own the host's routes).
fn log_tcp_report(r: &crate::tcp_profile::Report) {
    for w in &r.warnings {
        tracing::warn!("{w}");
    }
    for (profile, words) in &r.routes {
        tracing::warn!(
            profile,
            "tcp profile `{profile}` has options Linux keeps per route, which Headway does not \
             set: unless the route towards its peers has them, add them, e.g. `ip route change \
             default via GATEWAY dev IFACE {words}` (docs/tcp-profiles.md)"
        );
    }
}

/// The task of one accepted connection of a virtual server of `kind`.
///
/// Each kind's connection future is boxed before it is spawned. The state machine of the
/// largest kind (an https connection: handshake, then HTTP/1 or HTTP/2 over TLS) is kilobytes,
/// and tokio moves a task's future by value when it is spawned and when it completes; a box is
/// copied once, and the task holds a pointer.
fn serve_accepted(
    kind: VirtualServerKind,
    slot: Arc<Slot>,
    stream: ClientSocket,
    peer: Peer,
    drain: watch::Receiver<bool>,
    tls: Option<Arc<Terminator>>,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    match kind {
        VirtualServerKind::Tcp => Box::pin(async move {
            match stream.into_tokio() {
                Ok(s) => crate::l4::serve_connection(slot, s, peer).await,
                Err(e) => tracing::warn!(error = %e, "cannot register a client connection"),
            }
        }),
        // A client that sends nothing is closed after the header timeout rather than the idle
        // timeout (slow clients, see `crate::listen`): a cleartext HTTP connection reads its
        // first bytes within it, an https one its handshake. The TLS handshake runs in the
        // connection's task, never in the accept loop.
        VirtualServerKind::Https => match tls {
            Some(t) => Box::pin(async move { t.serve(slot, stream, peer, drain).await }),
            None => {
                tracing::error!("an https listener without its TLS termination");
                Box::pin(std::future::ready(()))
            }
        },
        _ => Box::pin(crate::http::serve_connection(slot, stream, peer, drain)),
    }
}

/// Accepts until the listener drains; each connection runs in a task of its own.
async fn accept_loop(
    listener: Listening,
    slot: Arc<Slot>,
    tls: Arc<ArcSwapOption<Terminator>>,
    draining: watch::Receiver<bool>,
    tracker: Arc<Tracker>,
    bound_profile: Option<headway_config::tcp::TcpProfile>,
) {
    // Polled only when the signal was sent (see `crate::gate`), not once per connection.
    let mut drained = crate::gate::drained(draining.clone());
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut drained => return,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors or similar: back off a little rather than spin.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let vs = slot.vs.load_full();
        let counters = vs.shared.counters.clone();
        counters.connections.inc();
        let kind = vs.config.kind;
        // A PROXY header names the client: the per-client limits wait for it.
        let expect_header = vs
            .config
            .accept_proxy_protocol
            .then_some(vs.config.request_header_timeout);
        let from = &vs.config.proxy_protocol_from;
        if expect_header.is_some()
            && !from.is_empty()
            && !from.iter().any(|c| c.contains(peer.ip()))
        {
            // Only the balancers in front may say who the client is.
            counters.bad_proxy_headers.inc();
            tracing::debug!(client = %peer, "closing a connection from outside proxy_protocol_from");
            continue;
        }
        if expect_header.is_none() && !vs.config.admits(peer.ip()) {
            counters.denied_connections.inc();
            tracing::debug!(client = %peer, "closing a connection from a client allow/deny keeps out");
            continue;
        }
        let guard = match expect_header {
            Some(_) => None,
            None => match vs
                .shared
                .limits
                .admit_connection(peer.ip(), kind == VirtualServerKind::Tcp)
            {
                Some(g) => Some(g),
                None => {
                    counters.refused_connections.inc();
                    continue;
                }
            },
        };
        let stream = ClientSocket::new(stream);
        crate::tcp_profile::apply_accepted(
            &stream,
            vs.config.tcp_profile.as_ref(),
            bound_profile.as_ref(),
        );
        // Where the client connected to, for the PROXY headers sent to servers.
        let destination = vs
            .sends_proxy_protocol()
            .then(|| stream.local_addr().ok())
            .flatten();
        let peer = Peer {
            addr: peer,
            destination,
        };
        drop(vs);
        counters.active_connections.inc();
        tracker.live.fetch_add(1, Ordering::SeqCst);
        let slot = slot.clone();
        let drain = draining.clone();
        let tracker = tracker.clone();
        let tls = (kind == VirtualServerKind::Https)
            .then(|| tls.load_full())
            .flatten();
        let serve = match expect_header {
            None => serve_accepted(kind, slot, stream, peer, drain, tls),
            Some(limit) => {
                let counters = counters.clone();
                Box::pin(async move {
                    let mut stream = stream;
                    let peer = match crate::proxy_protocol::read_header(&mut stream, limit).await {
                        Ok(named) => Peer {
                            addr: named.map_or(peer.addr, |(client, _)| client),
                            destination: named.map(|(_, d)| d).or(peer.destination),
                        },
                        Err(e) => {
                            counters.bad_proxy_headers.inc();
                            tracing::debug!(client = %peer.addr, error = %e, "closing a connection without a PROXY header");
                            return;
                        }
                    };
                    let admitted = {
                        let vs = slot.vs.load();
                        if !vs.config.admits(peer.addr.ip()) {
                            counters.denied_connections.inc();
                            tracing::debug!(client = %peer.addr, "closing a connection from a client allow/deny keeps out");
                            return;
                        }
                        vs.shared
                            .limits
                            .admit_connection(peer.addr.ip(), kind == VirtualServerKind::Tcp)
                    };
                    let Some(_guard) = admitted else {
                        counters.refused_connections.inc();
                        return;
                    };
                    serve_accepted(kind, slot, stream, peer, drain, tls).await;
                }) as Pin<Box<dyn Future<Output = ()> + Send>>
            }
        };
        tokio::spawn(async move {
            serve.await;
            drop(guard);
            counters.active_connections.dec();
            if tracker.live.fetch_sub(1, Ordering::SeqCst) == 1 {
                tracker.idle.notify_waiters();
            }
        });
    }
}
