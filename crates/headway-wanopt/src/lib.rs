//! Headway's WAN-optimizer appliance shell: TCP flows, from explicit services or intercepted
//! transparently, carried through the dedup codec over the QUIC tunnel to a peer appliance,
//! with fail-open and per-peer stats.
//!
//! # What this crate owns and what it does not
//!
//! It owns the async glue: the LAN listeners of the explicit services, the transparent
//! listener and its nftables rules ([`intercept`]), the accept loop for flows from peers, the
//! per-flow pump ([`pump`]) that joins a TCP socket to a tunnel stream through a
//! `headway_dedup::Encoder` / `Decoder` pair, the chunk stores of the service classes,
//! fail-open to a direct connection, and the counters ([`stats`]). It makes no protocol
//! decisions: chunking, references and verification are `headway-dedup`'s, QUIC,
//! authentication and the flow header are `headway-tunnel`'s, the segment files are
//! `headway-store`'s, the `IP_TRANSPARENT` socket is `headway-io`'s. Not here: the TOML schema
//! (`headway-config` converts into [`ApplianceConfig`]), metrics exposition (the binary turns
//! [`ApplianceStats`] into metrics), the SMB2/HTTP accelerators.
//!
//! # Entry points and call order
//!
//! 1. [`Appliance::start`] (inside a tokio runtime) with an [`ApplianceConfig`]: binds every
//!    service's listener and the transparent listener, opens the disk store, binds the tunnel
//!    endpoint, installs the interception rules (last), spawns the accept loops.
//! 2. [`Appliance::stats`] at any time for an [`ApplianceStats`] snapshot.
//! 3. [`Appliance::shutdown`] (or drop) stops the listeners, removes the interception rules,
//!    closes the tunnel (flows in progress are cut) and closes the disk store.
//!
//! # A flow
//!
//! ```text
//!  client ─TCP─▶ A: service.listen ─────────────┐
//!  client ─TCP to S:p─▶ A: TPROXY ─▶ intercept  │ route: peer, class, destination
//!         (first matching InterceptRule)        │ (target, or S:p)
//!                   connect(peer) ─ open_flow(destination, class) ─┐
//!                   Encoder ─▶ stream ─▶ Decoder                   │ QUIC
//!                   Decoder ◀─ stream ◀─ Encoder                   │
//!                B: accept_flow ─ TCP connect(header.destination) ◀┘
//! ```
//!
//! Both kinds of flows share one outbound path; they differ only in how the route is found:
//! an explicit service's is configured, an intercepted flow's comes from its original
//! destination (the accepted socket's local address) and the first matching
//! [`InterceptRule`]. An intercepted flow that matches no rule, or a pass-through rule, is
//! connected directly and counted as passed through (`"no_rule"`, `"pass_through"`); with the
//! rules this crate installs, pass-through flows are not even intercepted. See [`intercept`]
//! for the nftables table, the fwmark rule and the local route, and their limits (IPv4 only,
//! one intercepting appliance per network namespace, root needed).
//!
//! The far side needs no per-service config: the flow header carries the destination and the
//! class. If A cannot reach the peer or the handshake is refused, A connects the client
//! straight to the destination and copies bytes both ways (fail-open), counting the reason
//! (`ConnectError::reason`, e.g. `"timeout"`, `"unauthenticated"`, `"refused"`; `"flow"` when
//! the connection is up but the stream cannot be opened). After a failed attempt the peer is
//! held down for [`ApplianceConfig::retry_after`]: its new flows fail open at once with the
//! same reason — until the peer connects to A itself (a branch behind NAT that A cannot
//! dial): its flows then use that connection. Every flow is its own task: one failing flow
//! never disturbs the others.
//!
//! # Stores
//!
//! | class          | chunk store                                                      |
//! |----------------|------------------------------------------------------------------|
//! | `dedup-memory` | the appliance's `MemoryStore` ([`ApplianceConfig::memory_store_bytes`]) |
//! | `dedup-disk`   | the appliance's `DiskStore` ([`ApplianceConfig::disk_store`]), persistent across restarts; the memory store if none is configured |
//! | `compress`, `pass-through` | none (the codec does not deduplicate)                  |
//!
//! Each side of a flow picks its store from the class in the flow header, so both ends of a
//! `dedup-disk` flow use their disk stores. [`ApplianceStats::stores`] gives each store's size
//! and hit rate (chunks the encoder found the peer already held / chunks encoded). The disk
//! store is synced every second and at shutdown; a crash loses what was appended since the
//! last sync, which costs bandwidth (the codec fetches what a store lacks), never correctness.
//!
//! # Invariants
//!
//! - One `MemoryStore` per appliance, shared by all flows and peers (entries are per peer), and
//!   at most one `headway_store::DiskStore`, opened at start and closed (flushed, directory
//!   released) at shutdown, so a new appliance can open the same directory right away.
//! - Rules installed by an appliance are removed when it shuts down or is dropped; a crashed
//!   run's table is replaced at the next start.
//! - No unbounded buffers on the data path (see [`pump`]).

#![forbid(unsafe_code)]

pub mod flows;
pub mod intercept;
pub mod pump;
pub mod stats;
mod store;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use headway_dedup::{DedupKey, Mode};
use headway_tunnel::{
    BindError, ConnectError, Connection, Endpoint, EndpointStats, FlowHeader, Identity,
    InboundFlow, Options, PeerConfig, PeerId, ServiceClass, ServiceId,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, debug_span, warn, Instrument};

pub use flows::{Direction, FlowSnapshot};
pub use intercept::{InterceptConfig, InterceptError, InterceptRule};
pub use pump::PumpError;
pub use stats::{ApplianceStats, GroupStats, Stats, StoreUsage};

use crate::flows::{Counted, FlowBytes, FlowInfo, Meter};
use crate::intercept::{Installed, Intercept, INTERCEPTED};
use crate::pump::FlowCodec;
use crate::stats::Counters;
use crate::store::Stores;

/// How often the disk store's appended data is synced (besides at shutdown).
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// One explicit service: clients connect to `listen`, the peer connects on to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    /// The service's id (carried in the flow header).
    pub id: ServiceId,
    /// LAN-side address this appliance accepts client TCP connections on (port 0: any).
    pub listen: SocketAddr,
    /// Name of the peer (a [`PeerConfig::name`]) in front of the target.
    pub peer: String,
    /// Where the far appliance connects (and where fail-open connects directly).
    pub target: SocketAddr,
    /// What the optimizer does with the flows.
    pub class: ServiceClass,
}

/// Everything an appliance needs to start.
#[derive(Debug, Clone)]
pub struct ApplianceConfig {
    /// This appliance's certificate and key.
    pub identity: Identity,
    /// UDP address of the tunnel endpoint (port 0: any).
    pub tunnel_listen: SocketAddr,
    /// The peer appliances, with their pinned fingerprints.
    pub peers: Vec<PeerConfig>,
    /// Tunnel tuning (handshake timeout, flow limits…).
    pub tunnel_options: Options,
    /// The deployment's dedup key (the same on every appliance of a deployment).
    pub dedup_key: DedupKey,
    /// Capacity of the in-memory chunk store, in bytes.
    pub memory_store_bytes: u64,
    /// After a failed connection attempt to a peer, its flows fail open at once, without a
    /// new attempt, for this long (a down peer would otherwise cost every new flow a full
    /// handshake timeout, one after the other). Suggested: 10 s.
    pub retry_after: Duration,
    /// The explicit services.
    pub services: Vec<ServiceConfig>,
    /// Persistent store for the `DedupDisk` class; `None`: that class uses the memory store.
    pub disk_store: Option<headway_store::StoreConfig>,
    /// Transparent interception (TPROXY); `None`: explicit services only.
    pub intercept: Option<InterceptConfig>,
}

/// Why [`Appliance::start`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The tunnel endpoint could not be bound.
    #[error("tunnel endpoint: {0}")]
    Tunnel(#[from] BindError),
    /// A service's listener could not be bound.
    #[error("service {id:?}: binding {addr} failed: {source}")]
    Listen {
        /// The service.
        id: ServiceId,
        /// Its listen address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The disk store could not be opened (the message includes the OS error).
    #[error("disk store: {}", error_chain(.0))]
    Store(#[source] headway_store::StoreError),
    /// Transparent interception could not be set up (the message includes a failed
    /// command's stderr).
    #[error("interception: {0}")]
    Intercept(#[from] InterceptError),
    /// A service names a peer that is not configured.
    #[error("service {id:?}: unknown peer {peer:?}")]
    UnknownPeer {
        /// The service.
        id: ServiceId,
        /// The peer name it gives.
        peer: String,
    },
}

/// A running appliance. Dropping it stops its listeners and closes the tunnel endpoint;
/// flows in progress then end with a reset (their tasks hold the shared state until then).
#[derive(Debug)]
pub struct Appliance {
    shared: Arc<Shared>,
    services: HashMap<ServiceId, SocketAddr>,
    intercept: Option<SocketAddr>,
    /// The nftables table, fwmark rule and route, if this appliance installed them.
    installed: Option<Installed>,
    tasks: Vec<JoinHandle<()>>,
}

/// What every task of an appliance shares.
#[derive(Debug)]
struct Shared {
    endpoint: Endpoint,
    stores: Stores,
    key: DedupKey,
    stats: Stats,
    /// The flows carried now.
    flows: flows::Flows,
    retry_after: Duration,
    /// Per peer (by index): the zstd level of flows towards it (`pump::zstd_level_for` its
    /// link rate).
    levels: Vec<i32>,
    /// Per peer (by index): the end of the current hold-down after a failed attempt, and
    /// its reason. The lock also serializes attempts, so waiting flows see a fresh failure.
    holds: Vec<Mutex<Option<(Instant, &'static str)>>>,
}

impl Appliance {
    /// Binds the tunnel endpoint and the service listeners and starts serving. Must be called
    /// inside a tokio runtime. Cancel-safe: nothing is spawned before the last await, so a
    /// dropped call leaves no task or socket behind (a disk store being opened in a blocking
    /// task is closed again when that task finishes).
    ///
    /// Switches transparent huge pages off for the whole process
    /// ([`headway_io::memory::disable_transparent_huge_pages`]): a transfer's first
    /// allocations otherwise stall the link while the kernel zeroes 2 MiB pages.
    pub async fn start(cfg: ApplianceConfig) -> Result<Self, StartError> {
        if let Err(e) = headway_io::memory::disable_transparent_huge_pages() {
            warn!(error = %e, "could not switch transparent huge pages off");
        }
        let mut resolved = Vec::new();
        for s in &cfg.services {
            let Some(peer) = cfg.peers.iter().position(|p| p.name == s.peer) else {
                return Err(StartError::UnknownPeer {
                    id: s.id,
                    peer: s.peer.clone(),
                });
            };
            let listener =
                TcpListener::bind(s.listen)
                    .await
                    .map_err(|source| StartError::Listen {
                        id: s.id,
                        addr: s.listen,
                        source,
                    })?;
            resolved.push((s.clone(), PeerId(peer), listener));
        }
        let intercept = match &cfg.intercept {
            Some(i) => Some(Intercept::bind(i, &cfg.peers)?),
            None => None,
        };
        let (memory, disk) = (cfg.memory_store_bytes, cfg.disk_store.clone());
        let dir = disk
            .as_ref()
            .and_then(|d| d.dir.clone())
            .unwrap_or_default();
        // Opening a disk store reads its whole index: blocking I/O, off the async workers.
        let stores = match tokio::task::spawn_blocking(move || Stores::open(memory, disk)).await {
            Ok(r) => r.map_err(StartError::Store)?,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => {
                return Err(StartError::Store(headway_store::StoreError::Io {
                    op: "open",
                    path: dir,
                    source: std::io::Error::other(e),
                }))
            }
        };
        let endpoint = Endpoint::bind_with(
            cfg.tunnel_listen,
            &cfg.identity,
            cfg.peers.clone(),
            cfg.tunnel_options.clone(),
        )?;
        let shared = Arc::new(Shared {
            endpoint,
            stores,
            key: cfg.dedup_key,
            stats: Stats::default(),
            flows: flows::Flows::default(),
            retry_after: cfg.retry_after,
            levels: cfg
                .peers
                .iter()
                .map(|p| {
                    let level = pump::zstd_level_for(p.link_rate.bps());
                    tracing::info!(peer = %p.name, link_rate = %p.link_rate, level, "zstd level");
                    level
                })
                .collect(),
            holds: cfg.peers.iter().map(|_| Mutex::new(None)).collect(),
        });
        // Last, so that a failed start leaves no rules behind (the guard removes them on drop,
        // also if this call is dropped while they are being installed).
        let installed = match intercept.as_ref().and_then(|i| i.ruleset.clone()) {
            Some(text) => Some(
                tokio::task::spawn_blocking(move || Installed::install(&text))
                    .await
                    .map_err(|e| {
                        StartError::Intercept(InterceptError::Command {
                            command: "nft -f -".into(),
                            stderr: e.to_string(),
                        })
                    })??,
            ),
            None => None,
        };
        let mut services = HashMap::new();
        let mut tasks = Vec::new();
        for (s, peer, listener) in resolved {
            if let Ok(addr) = listener.local_addr() {
                services.insert(s.id, addr);
            }
            let span = debug_span!("service", id = s.id.0, peer = %s.peer);
            tasks.push(tokio::spawn(
                serve_service(shared.clone(), s, peer, listener).instrument(span),
            ));
        }
        tasks.push(tokio::spawn(accept_flows(shared.clone())));
        for peer in 0..cfg.peers.len() {
            let span = debug_span!("warm", peer = %cfg.peers[peer].name);
            tasks.push(tokio::spawn(
                keep_connected(shared.clone(), PeerId(peer)).instrument(span),
            ));
        }
        let intercept_addr = intercept.as_ref().map(|i| i.addr);
        if let Some(i) = intercept {
            let span = debug_span!("intercept", addr = %i.addr);
            tasks.push(tokio::spawn(
                serve_intercept(shared.clone(), i).instrument(span),
            ));
        }
        if let Some(disk) = shared.stores.disk() {
            tasks.push(tokio::spawn(flush_periodically(disk)));
        }
        Ok(Self {
            shared,
            services,
            intercept: intercept_addr,
            installed,
            tasks,
        })
    }

    /// The address a service's listener is bound to (resolves port 0).
    pub fn service_addr(&self, id: ServiceId) -> Option<SocketAddr> {
        self.services.get(&id).copied()
    }

    /// The address of the transparent listener (resolves port 0), if interception is on.
    pub fn intercept_addr(&self) -> Option<SocketAddr> {
        self.intercept
    }

    /// The tunnel endpoint's UDP address (resolves port 0).
    pub fn tunnel_addr(&self) -> std::io::Result<SocketAddr> {
        self.shared.endpoint.local_addr()
    }

    /// The tunnel endpoint's counters (connections, refusals…).
    pub fn tunnel_stats(&self) -> EndpointStats {
        self.shared.endpoint.stats()
    }

    /// The measured loss of each configured peer's path (empty without FEC).
    pub fn tunnel_paths(&self) -> Vec<headway_tunnel::PathLoss> {
        self.shared.endpoint.path_loss()
    }

    /// The flows carried now, oldest first, each with its own bytes (see [`flows`]).
    pub fn flows(&self) -> Vec<FlowSnapshot> {
        self.shared.flows.snapshot()
    }

    /// A snapshot of the counters and of the stores' usage.
    pub fn stats(&self) -> ApplianceStats {
        let mut s = self.shared.stats.snapshot();
        s.stores = self.shared.stores.usage(&s.groups);
        s
    }

    /// Stops the listeners, removes the interception rules it installed, closes the tunnel
    /// (flows in progress are cut), then flushes and closes the disk store, releasing its
    /// directory (a new appliance may open it at once). Idempotent. Blocks while `nft`/`ip`
    /// run and for the final sync of the disk store.
    pub fn shutdown(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        if let Some(mut installed) = self.installed.take() {
            if let Err(e) = installed.remove() {
                warn!(error = %e, "removing the interception rules failed");
            }
        }
        self.shared.endpoint.close();
        if let Err(e) = self.shared.stores.close() {
            warn!(error = %error_chain(&e), "flushing the disk store at shutdown failed");
        }
    }
}

impl Drop for Appliance {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Syncs the disk store every [`FLUSH_EVERY`] (and deletes the segment files it evicted
/// meanwhile), off the async workers, until aborted.
async fn flush_periodically(disk: Arc<store::DiskSlot>) {
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let d = disk.clone();
        match tokio::task::spawn_blocking(move || d.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %error_chain(&e), "flushing the disk store failed"),
            Err(_) => return,
        }
    }
}

/// An error and its sources, `: `-separated (a store error's own message names only the file).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        next = cause.source();
    }
    s
}

/// The codec mode a service class asks for (the store is [`Stores::for_class`]'s).
fn mode(class: ServiceClass) -> Mode {
    match class {
        ServiceClass::PassThrough => Mode::Passthrough,
        ServiceClass::Compress => Mode::Compress,
        _ => Mode::Dedup,
    }
}

impl Shared {
    fn codec(&self, class: ServiceClass, peer: PeerId) -> FlowCodec {
        FlowCodec {
            mode: mode(class),
            peer: headway_dedup::PeerId(u32::try_from(peer.0).unwrap_or(u32::MAX)),
            store: self.stores.for_class(class),
            key: self.key.clone(),
            level: self.levels.get(peer.0).copied().unwrap_or(1),
        }
    }

    /// The connection to `peer`, unless it failed less than `retry_after` ago: then the
    /// reason of that failure, without a new attempt — unless the peer has connected to
    /// this side since (a peer this side cannot reach, behind NAT, still can): its
    /// connection is used.
    async fn connect(&self, peer: PeerId) -> Result<Connection, &'static str> {
        let Some(hold) = self.holds.get(peer.0) else {
            return Err("unknown_peer");
        };
        if let Some(c) = self.endpoint.connected(peer) {
            return Ok(c);
        }
        let mut hold = hold.lock().await;
        if let Some((until, reason)) = *hold {
            if Instant::now() < until {
                return Err(reason);
            }
        }
        match self.endpoint.connect(peer).await {
            Ok(c) => {
                *hold = None;
                Ok(c)
            }
            Err(e) => {
                let reason = ConnectError::reason(&e);
                debug!(error = %e, reason, "peer unavailable");
                *hold = Some((Instant::now() + self.retry_after, reason));
                Err(reason)
            }
        }
    }

    fn peer_name(&self, peer: PeerId) -> &str {
        self.endpoint
            .peers()
            .get(peer.0)
            .map_or("?", |p| p.name.as_str())
    }
}

/// Accepts clients of one service; one task per flow.
async fn serve_service(
    shared: Arc<Shared>,
    service: ServiceConfig,
    peer: PeerId,
    listener: TcpListener,
) {
    let counters = shared.stats.group(&service.peer, service.class);
    let route = Route {
        peer,
        service: service.id,
        class: service.class,
        destination: service.target,
    };
    loop {
        let (tcp, client) = accept(&listener).await;
        let span = debug_span!("flow", %client);
        tokio::spawn(outbound_flow(shared.clone(), route, tcp, counters.clone()).instrument(span));
    }
}

/// Accepts transparently intercepted connections; one task per flow. The accepted socket's
/// local address is the flow's original destination; the first matching rule says where it
/// goes (see [`intercept`]).
async fn serve_intercept(shared: Arc<Shared>, intercept: Intercept) {
    // Per rule, looked up once; none for pass-through rules (their flows are rare strays).
    let counters: Vec<_> = intercept
        .rules
        .iter()
        .map(|r| {
            (r.class != ServiceClass::PassThrough).then(|| shared.stats.group(&r.peer, r.class))
        })
        .collect();
    loop {
        let (tcp, client) = accept(&intercept.listener).await;
        let Ok(dst) = tcp.local_addr() else {
            continue;
        };
        let span = debug_span!("flow", %client, %dst);
        if dst.port() == intercept.addr.port() && intercept::is_local(dst.ip()) {
            // Connected to the listener itself, not intercepted: connecting on to the
            // "original destination" would connect to ourselves, again and again.
            span.in_scope(|| debug!("direct connection to the intercept listener refused"));
            pump::abort(&tcp);
            continue;
        }
        let rule = intercept::classify(&intercept.rules, dst);
        let (i, r) = match rule.map(|i| (i, &intercept.rules[i])) {
            Some((i, r)) if r.class != ServiceClass::PassThrough => (i, r),
            other => {
                let (peer, reason) = match other {
                    Some((_, r)) => (r.peer.as_str(), "pass_through"),
                    None => (stats::NO_PEER, "no_rule"),
                };
                let c = shared.stats.group(peer, ServiceClass::PassThrough);
                let info = FlowInfo {
                    direction: Direction::Outbound,
                    peer: peer.to_owned(),
                    class: ServiceClass::PassThrough,
                    client: Some(client),
                    destination: dst,
                    passed_through: Some(reason),
                };
                let shared = shared.clone();
                tokio::spawn(
                    async move {
                        let flow = shared.flows.register(info);
                        fail_open(tcp, dst, reason, &c, &flow.bytes).await;
                    }
                    .instrument(span),
                );
                continue;
            }
        };
        let route = Route {
            peer: intercept.peers[i],
            service: INTERCEPTED,
            class: r.class,
            destination: dst,
        };
        let c = counters[i]
            .clone()
            .unwrap_or_else(|| shared.stats.group(&r.peer, r.class));
        tokio::spawn(outbound_flow(shared.clone(), route, tcp, c).instrument(span));
    }
}

/// The next connection of `listener`. Per-connection errors (e.g. ECONNABORTED, EMFILE) must
/// not end a listener; the pause keeps a persistent one (EMFILE) from spinning.
async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(x) => {
                // Until the flow ends cleanly, closing this socket (a task aborted at shutdown,
                // the process killed) must be an RST, never a FIN: see `pump::arm_reset`.
                pump::arm_reset(&x.0);
                return x;
            }
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Where an accepted client connection goes: an explicit service's, or an intercepted flow's
/// (then `destination` is its original destination).
#[derive(Debug, Clone, Copy)]
struct Route {
    peer: PeerId,
    service: ServiceId,
    class: ServiceClass,
    destination: SocketAddr,
}

/// One client connection (explicit or intercepted): through the tunnel, or direct if the
/// peer fails.
async fn outbound_flow(shared: Arc<Shared>, route: Route, tcp: TcpStream, counters: Arc<Counters>) {
    let flow = shared.flows.register(FlowInfo {
        direction: Direction::Outbound,
        peer: shared.peer_name(route.peer).to_owned(),
        class: route.class,
        client: tcp.peer_addr().ok(),
        destination: route.destination,
        passed_through: None,
    });
    let conn = match shared.connect(route.peer).await {
        Ok(c) => c,
        Err(reason) => {
            debug!(reason, "failing open");
            flow.pass_through(reason);
            return fail_open(tcp, route.destination, reason, &counters, &flow.bytes).await;
        }
    };
    let header = FlowHeader {
        service: route.service,
        class: route.class,
        destination: Some(route.destination),
    };
    let (send, recv) = match conn.open_flow(&header).await {
        Ok(s) => s,
        Err(e) => {
            debug!(error = %e, "opening the flow failed, failing open");
            flow.pass_through("flow");
            return fail_open(tcp, route.destination, "flow", &counters, &flow.bytes).await;
        }
    };
    Counters::add(&counters.flows_optimized, 1);
    let codec = shared.codec(route.class, route.peer);
    let meter = Meter {
        group: &counters,
        flow: &flow.bytes,
    };
    if let Err(e) = pump::pump(tcp, send, recv, codec, conn.write_meter(), meter).await {
        Counters::add(&counters.flows_failed, 1);
        debug!(error = %e, "flow reset");
    }
}

/// Connects the client straight to `target` and copies bytes both ways, counting them into
/// the flow's `bytes` as they go and into the group's `c` once the flow completed.
async fn fail_open(
    client: TcpStream,
    target: SocketAddr,
    reason: &'static str,
    c: &Counters,
    bytes: &FlowBytes,
) {
    c.passed_through(reason);
    let mut server = match TcpStream::connect(target).await {
        Ok(s) => s,
        Err(e) => {
            debug!(error = %e, "direct connection failed too");
            pump::abort(&client);
            return;
        }
    };
    pump::arm_reset(&server);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let mut counted = Counted {
        inner: client,
        bytes,
    };
    let copied = tokio::io::copy_bidirectional(&mut counted, &mut server).await;
    let client = counted.inner;
    match copied {
        Ok((up, down)) => {
            // Both directions ended with a FIN passed on: the flow is complete.
            pump::disarm_reset(&client);
            pump::disarm_reset(&server);
            Counters::add(&c.lan_in, up);
            Counters::add(&c.lan_out, down);
        }
        Err(e) => {
            debug!(error = %e, "direct flow failed");
            pump::abort(&client);
            pump::abort(&server);
        }
    }
}

/// Keeps the tunnel to `peer` up, so a new flow does not wait for a handshake (one RTT and
/// a half across the WAN): connects at start, and again whenever the connection closes (after
/// `retry_after` when an attempt fails). Goes through [`Shared::connect`], so a failed attempt
/// also starts the hold-down that makes new flows fail open at once.
async fn keep_connected(shared: Arc<Shared>, peer: PeerId) {
    loop {
        match shared.connect(peer).await {
            Ok(conn) => {
                let why = conn.closed().await;
                debug!(reason = %why, "tunnel closed, reconnecting");
                // A peer that closes at once must not make this a busy loop.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(reason) => {
                debug!(reason, "tunnel not up, retrying later");
                tokio::time::sleep(shared.retry_after).await;
            }
        }
    }
}

/// Accepts flows opened by peers; one task per flow.
async fn accept_flows(shared: Arc<Shared>) {
    while let Some(flow) = shared.endpoint.accept_flow().await {
        let span = debug_span!("inbound", peer = flow.peer.0, dest = ?flow.header.destination);
        tokio::spawn(inbound_flow(shared.clone(), flow).instrument(span));
    }
}

/// One flow from a peer: connect to its destination and run the mirror-image pump.
async fn inbound_flow(shared: Arc<Shared>, flow: InboundFlow) {
    let InboundFlow {
        peer,
        header,
        mut send,
        mut recv,
        meter,
    } = flow;
    let counters = shared.stats.group(shared.peer_name(peer), header.class);
    let refuse = |send: &mut headway_tunnel::SendStream, recv: &mut headway_tunnel::RecvStream| {
        let _ = send.reset(headway_tunnel::code::RESET);
        let _ = recv.stop(headway_tunnel::code::RESET);
    };
    let Some(dest) = header.destination else {
        warn!("flow without a destination refused");
        return refuse(&mut send, &mut recv);
    };
    let tcp = match TcpStream::connect(dest).await {
        Ok(t) => t,
        Err(e) => {
            // The client sees a reset, as if it had connected directly.
            debug!(error = %e, "destination unreachable");
            Counters::add(&counters.flows_failed, 1);
            return refuse(&mut send, &mut recv);
        }
    };
    Counters::add(&counters.flows_optimized, 1);
    let flow = shared.flows.register(FlowInfo {
        direction: Direction::Inbound,
        peer: shared.peer_name(peer).to_owned(),
        class: header.class,
        client: None,
        destination: dest,
        passed_through: None,
    });
    let codec = shared.codec(header.class, peer);
    let counted = Meter {
        group: &counters,
        flow: &flow.bytes,
    };
    if let Err(e) = pump::pump(tcp, send, recv, codec, meter, counted).await {
        Counters::add(&counters.flows_failed, 1);
        debug!(error = %e, "flow reset");
    }
}
