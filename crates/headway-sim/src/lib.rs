//! (dev) Virtual clock and simulated links that join sans-IO cores in memory.
//!
//! A [`Network`] owns a [`ManualClock`], a set of nodes — anything implementing [`Endpoint`],
//! the sans-IO shape of quinn-proto's `Endpoint`/`Connection` — and one [`headway_link::Link`]
//! per direction of every connection between them. It moves datagrams from a node's
//! [`Endpoint::poll_transmit`] through the link model to the peer's
//! [`Endpoint::handle_datagram`], and jumps the clock straight from one event to the next, so a
//! minute over a 300 ms, 5 %-loss WAN runs in milliseconds and gives the same answer every time.
//!
//! It owns no sockets, threads or real time, and knows nothing about what the datagrams contain.
//! It is a test tool: ids from one network used on another panic.
//!
//! ## Building a network
//! [`Network::new`] with a seed, [`Network::add_node`] for each endpoint, then
//! [`Network::connect`] to join two nodes with a link in each direction. Each connection gives
//! each of its two nodes a new local [`Port`] (0, 1, 2, … in connection order), like a network
//! interface: a node sends on a port and is told on which port a datagram arrived. Two nodes
//! joined twice (e.g. an SD-WAN pair over two WAN links) see two ports.
//!
//! ## Running it
//! [`Network::step`] processes everything due now and then one event instant;
//! [`Network::run_until`], [`Network::run_for`] and [`Network::run_while`] repeat that. At each
//! instant the network repeats, until nothing more happens at that instant:
//! 1. every link, in creation order, releases its due frames, in due order, to the peer node's
//!    `handle_datagram`;
//! 2. every node, in creation order, whose `poll_timeout` is due gets `handle_timeout`;
//! 3. every node, in creation order, is drained of `poll_transmit`; each datagram goes into the
//!    link behind its port (`Link::handle_packet`, with the datagram length plus
//!    [`Network::header_bytes`] as the frame length).
//!
//! The clock then moves to the earliest of all link and node timeouts. This order, the seeds of
//! the links (derived from the network's seed in connection order) and the endpoints' own
//! determinism make a run reproducible.
//!
//! ## Invariants
//! - Time never goes backwards, and nothing is delivered before its link's due time.
//! - Every datagram handed to a link is either delivered once (twice if duplicated) or counted
//!   in that link's stats as lost, overflowed or oversize; a datagram sent on a port with no
//!   connection is counted in [`Stats::unroutable`].
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use headway_core::{Clock, ManualClock, Rng};
use headway_link::{Link, Params};

/// Bytes a UDP datagram grows by on an Ethernet link over IPv4: Ethernet header (14), IPv4
/// header (20) and UDP header (8). The default of [`Network::header_bytes`].
pub const UDP_IPV4_HEADERS: usize = 42;

/// How many rounds one instant may take before the network declares a livelock (an endpoint
/// whose `poll_timeout` stays at or before `now` after `handle_timeout`, or two endpoints
/// bouncing datagrams over zero-delay links forever).
const MAX_ROUNDS_PER_INSTANT: u32 = 1_000_000;

/// A sans-IO protocol endpoint as the simulator drives it.
///
/// The simulator calls `handle_datagram` and `handle_timeout` for input, then drains
/// `poll_transmit`, then asks `poll_timeout` when to come back. All methods take the virtual
/// `now`; an endpoint must not read any other clock.
pub trait Endpoint {
    /// A datagram arrived on `port` at `now`.
    fn handle_datagram(&mut self, now: Instant, port: Port, data: Bytes);

    /// The instant returned by [`Endpoint::poll_timeout`] has come (`now` is at or after it).
    fn handle_timeout(&mut self, now: Instant);

    /// The next datagram to send, if any; called until it returns `None`.
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit>;

    /// When [`Endpoint::handle_timeout`] should next be called; `None` for never.
    fn poll_timeout(&self) -> Option<Instant>;
}

/// A datagram an endpoint wants sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The local port to send it on.
    pub port: Port,
    /// The datagram (without UDP/IP/Ethernet headers; see [`Network::header_bytes`]).
    pub data: Bytes,
}

/// A node's local attachment point to one connection, numbered from 0 in connection order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Port(pub u32);

/// A node of one [`Network`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(usize);

/// One direction of a connection in one [`Network`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId(usize);

/// What [`Network::connect`] created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    /// The port on the first node.
    pub a_port: Port,
    /// The port on the second node.
    pub b_port: Port,
    /// The link carrying datagrams from the first node to the second.
    pub a_to_b: LinkId,
    /// The link carrying datagrams from the second node to the first.
    pub b_to_a: LinkId,
}

/// Counters of a network since it was created (per-link counters are in [`Link::stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams endpoints handed to the network.
    pub sent: u64,
    /// Datagrams delivered to endpoints (duplicates included).
    pub delivered: u64,
    /// Datagrams sent on a port that has no connection (dropped).
    pub unroutable: u64,
    /// Timeouts delivered to endpoints.
    pub timeouts: u64,
}

/// Endpoints joined by simulated links on a virtual clock. See the crate docs.
#[derive(Debug)]
pub struct Network<E> {
    clock: ManualClock,
    seeds: Rng,
    nodes: Vec<Node<E>>,
    links: Vec<SimLink>,
    header_bytes: usize,
    stats: Stats,
}

#[derive(Debug)]
struct Node<E> {
    endpoint: E,
    /// Outgoing link of each port, indexed by port number.
    ports: Vec<LinkId>,
}

#[derive(Debug)]
struct SimLink {
    link: Link<Bytes>,
    to: NodeId,
    to_port: Port,
}

impl<E: Endpoint> Network<E> {
    /// An empty network whose links' randomness is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        Network {
            clock: ManualClock::new(),
            seeds: Rng::from_seed(seed),
            nodes: Vec::new(),
            links: Vec::new(),
            header_bytes: UDP_IPV4_HEADERS,
            stats: Stats::default(),
        }
    }

    /// The virtual clock; clones of it follow the network's time.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Bytes added to each datagram's length to get the frame length the links see (MTU check,
    /// queue bytes, serialisation time). Default [`UDP_IPV4_HEADERS`].
    pub fn header_bytes(&self) -> usize {
        self.header_bytes
    }

    /// Sets [`Network::header_bytes`] for datagrams sent from now on (0 to make the links see
    /// the bare datagram length).
    pub fn set_header_bytes(&mut self, bytes: usize) {
        self.header_bytes = bytes;
    }

    /// Adds a node; it has no ports until connected.
    pub fn add_node(&mut self, endpoint: E) -> NodeId {
        self.nodes.push(Node {
            endpoint,
            ports: Vec::new(),
        });
        NodeId(self.nodes.len() - 1)
    }

    /// Joins `a` and `b` with a link in each direction and gives each node a new port.
    ///
    /// The links' seeds are drawn from the network's seed, so they depend on the order of
    /// `connect` calls only.
    pub fn connect(&mut self, a: NodeId, b: NodeId, a_to_b: Params, b_to_a: Params) -> Connection {
        let a_port = Port(self.nodes[a.0].ports.len() as u32);
        let a_to_b_id = LinkId(self.links.len());
        let b_to_a_id = LinkId(self.links.len() + 1);
        self.nodes[a.0].ports.push(a_to_b_id);
        // After pushing a's port, so that a self-connection gets two distinct ports.
        let b_port = Port(self.nodes[b.0].ports.len() as u32);
        self.nodes[b.0].ports.push(b_to_a_id);
        let seed_ab = self.seeds.next_u64();
        let seed_ba = self.seeds.next_u64();
        self.links.push(SimLink {
            link: Link::new(a_to_b, seed_ab),
            to: b,
            to_port: b_port,
        });
        self.links.push(SimLink {
            link: Link::new(b_to_a, seed_ba),
            to: a,
            to_port: a_port,
        });
        Connection {
            a_port,
            b_port,
            a_to_b: a_to_b_id,
            b_to_a: b_to_a_id,
        }
    }

    /// The endpoint of a node.
    pub fn node(&self, id: NodeId) -> &E {
        &self.nodes[id.0].endpoint
    }

    /// The endpoint of a node, to change or feed it between steps. Whatever it then wants to
    /// send is picked up at the next step.
    pub fn node_mut(&mut self, id: NodeId) -> &mut E {
        &mut self.nodes[id.0].endpoint
    }

    /// One direction of a connection (for its stats and parameters).
    pub fn link(&self, id: LinkId) -> &Link<Bytes> {
        &self.links[id.0].link
    }

    /// Changes a link's parameters from the current instant on (see [`Link::set_params`]).
    pub fn set_params(&mut self, id: LinkId, params: Params) {
        let now = self.now();
        self.links[id.0].link.set_params(params, now);
    }

    /// Counters since creation.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The next instant at which anything will happen: the earliest link release or endpoint
    /// timeout; `None` when nothing is scheduled.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let links = self.links.iter().filter_map(|l| l.link.poll_timeout());
        let nodes = self.nodes.iter().filter_map(|n| n.endpoint.poll_timeout());
        links.chain(nodes).min()
    }

    /// Processes everything due now, then moves the clock to the next event and processes it.
    /// Returns `false` (and leaves the clock alone) when nothing is scheduled.
    pub fn step(&mut self) -> bool {
        self.settle();
        let Some(next) = self.poll_timeout() else {
            return false;
        };
        self.clock.advance_to(next);
        self.settle();
        true
    }

    /// Runs every event up to and including `deadline`, then leaves the clock at `deadline`
    /// (or where it was, if that is later).
    pub fn run_until(&mut self, deadline: Instant) {
        self.run_while(deadline, |_| true);
    }

    /// Runs for `duration` of virtual time from now.
    pub fn run_for(&mut self, duration: Duration) {
        let deadline = self.now() + duration;
        self.run_until(deadline);
    }

    /// Runs events up to `deadline` while `keep_going` (checked after each instant) holds.
    /// Returns `true` if it stopped because `keep_going` returned `false` (the clock is then at
    /// that instant), `false` if it reached `deadline` (the clock is then at `deadline`).
    pub fn run_while(
        &mut self,
        deadline: Instant,
        mut keep_going: impl FnMut(&Self) -> bool,
    ) -> bool {
        loop {
            self.settle();
            if !keep_going(self) {
                return true;
            }
            match self.poll_timeout() {
                Some(next) if next <= deadline => self.clock.advance_to(next),
                _ => break,
            }
        }
        self.clock.advance_to(deadline);
        self.settle();
        !keep_going(self)
    }

    /// Runs rounds at the current instant until nothing more happens at it.
    fn settle(&mut self) {
        let now = self.now();
        for _ in 0..MAX_ROUNDS_PER_INSTANT {
            if !self.round(now) {
                return;
            }
        }
        panic!("livelock: more than {MAX_ROUNDS_PER_INSTANT} rounds at one instant");
    }

    /// One round of deliveries, timeouts and transmits at `now`; whether anything happened.
    fn round(&mut self, now: Instant) -> bool {
        let mut progress = false;
        // 1. Deliveries, link by link in creation order.
        for sim in &mut self.links {
            let node = &mut self.nodes[sim.to.0].endpoint;
            while let Some(release) = sim.link.poll_release(now) {
                node.handle_datagram(now, sim.to_port, release.packet);
                self.stats.delivered += 1;
                progress = true;
            }
        }
        // 2. Timeouts, node by node.
        for node in &mut self.nodes {
            if node.endpoint.poll_timeout().is_some_and(|t| t <= now) {
                node.endpoint.handle_timeout(now);
                self.stats.timeouts += 1;
                progress = true;
            }
        }
        // 3. Transmits, node by node.
        for node in &mut self.nodes {
            while let Some(transmit) = node.endpoint.poll_transmit(now) {
                progress = true;
                self.stats.sent += 1;
                let Some(&link) = node.ports.get(transmit.port.0 as usize) else {
                    self.stats.unroutable += 1;
                    continue;
                };
                let len = transmit.data.len() + self.header_bytes;
                // Drops are counted in the link's stats; the simulator has nothing to add.
                let _ = self.links[link.0]
                    .link
                    .handle_packet(now, len, transmit.data);
            }
        }
        progress
    }
}

impl<E: Endpoint + ?Sized> Endpoint for Box<E> {
    fn handle_datagram(&mut self, now: Instant, port: Port, data: Bytes) {
        (**self).handle_datagram(now, port, data)
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        (**self).poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
}

#[cfg(test)]
mod tests;
