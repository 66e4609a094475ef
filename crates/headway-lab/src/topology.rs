//! The lab's topologies: which namespaces, veth pairs, addresses and routes each one has.
//!
//! This module owns the pure [`Plan`] of each [`TopologyKind`] — names, interfaces, addresses
//! and routes, computed without touching the host so they can be unit-tested — and [`build`],
//! which carries a plan out with [`crate::netns`]. It does not start emulators (that is
//! [`crate::lab`]); in [`WanFill::Bridge`] mode it fills the WAN namespaces with a Linux bridge
//! instead, for tests of the plumbing alone.
//!
//! Addresses all come from the RFC 2544 benchmarking range 198.18.0.0/15:
//!
//! | topology | subnet | between |
//! |---|---|---|
//! | pair | 198.18.0.0/24 | client .1 — (emulator, a transparent bridge) — server .2 |
//! | pair | 198.18.100.0/24 | client .1 — server .2 on a direct veth (the same-run baseline) |
//! | branch, dual-wan | 198.18.1.0/24 | client .2 — branch .1 |
//! | branch, dual-wan | 198.18.0.0/24 | branch .1 — (emulator `wan` / `wan1`) — dc .2 |
//! | dual-wan | 198.18.10.0/24 | branch .1 — (emulator `wan2`) — dc .2 |
//! | branch, dual-wan | 198.18.2.0/24 | dc .1 — server .2 |
//!
//! Namespace names are the prefix (default `hw-`) followed by the role: `client`, `server`,
//! `wan`, `branch`, `dc`, `wan1`, `wan2`. Interface names are short and only unique within their
//! namespace (`c-wan` in the client faces the WAN; `wan-c` in the WAN faces the client).
//!
//! Every namespace gets IPv6 disabled (no router solicitations or MLD reports on the emulated
//! link), every host TCP congestion control cubic (the host default here is bbr) and every router
//! `net.ipv4.ip_forward=1`. Offloads are off on every interface. Cubic is set with the
//! namespace's `net.ipv4.tcp_congestion_control` sysctl where the kernel allows it; where it
//! refuses (outside the initial namespace only algorithms in the host's
//! `tcp_allowed_congestion_control` may be a namespace default) every IPv4 route of the host
//! namespace gets `congctl cubic` instead, which applies to every connection just the same.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::interrupt;
use crate::netns::{self, NetnsError};

/// Which topology to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// client — WAN — server, plus a direct client–server veth as the baseline.
    Pair,
    /// client — branch appliance — WAN — DC appliance — server.
    Branch,
    /// Like branch, with two WAN links (wan1, wan2) between the appliances.
    DualWan,
}

impl TopologyKind {
    /// The name the command line uses.
    pub fn as_str(self) -> &'static str {
        match self {
            TopologyKind::Pair => "pair",
            TopologyKind::Branch => "branch",
            TopologyKind::DualWan => "dual-wan",
        }
    }
}

/// One end of a veth pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// The role of the namespace it lives in (`client`, `wan`, …).
    pub role: String,
    /// The interface name inside that namespace.
    pub ifname: String,
    /// Its address with prefix length (`198.18.0.1/24`), if it has one.
    pub cidr: Option<String>,
}

/// A veth pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Veth {
    /// One end.
    pub a: End,
    /// The other end.
    pub b: End,
}

/// A static route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The role of the namespace that gets the route.
    pub role: String,
    /// Destination prefix or `default`.
    pub dest: String,
    /// Gateway address.
    pub via: Ipv4Addr,
}

/// An emulated WAN link: a WAN namespace bridging two interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WanLink {
    /// The link's name (`wan`, `wan1`, `wan2`), also its name in the emulator's admin API.
    pub name: String,
    /// The role of its WAN namespace (same as `name`).
    pub role: String,
    /// The interface facing the client / branch side (`--a`).
    pub a_if: String,
    /// The interface facing the server / DC side (`--b`).
    pub b_if: String,
    /// The emulator's admin port on 127.0.0.1 inside the WAN namespace.
    pub admin_port: u16,
}

/// The addresses programs in the lab use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Addresses {
    /// The client's address.
    pub client: Ipv4Addr,
    /// The server's address as the client reaches it through the WAN link(s).
    pub server: Ipv4Addr,
    /// The client's address on the direct veth (pair only).
    pub client_direct: Option<Ipv4Addr>,
    /// The server's address on the direct veth, bypassing the emulator (pair only).
    pub server_direct: Option<Ipv4Addr>,
    /// The branch appliance's address on its WAN side(s) (branch, dual-wan).
    pub branch_wan: Vec<Ipv4Addr>,
    /// The DC appliance's address on its WAN side(s) (branch, dual-wan).
    pub dc_wan: Vec<Ipv4Addr>,
}

/// Everything a topology consists of, before anything is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The topology.
    pub kind: TopologyKind,
    /// Namespace roles, in creation order.
    pub roles: Vec<String>,
    /// Roles that route between interfaces (`ip_forward=1`).
    pub routers: Vec<String>,
    /// Roles that are end hosts or appliances (TCP congestion control set to cubic).
    pub hosts: Vec<String>,
    /// The veth pairs.
    pub veths: Vec<Veth>,
    /// The static routes.
    pub routes: Vec<Route>,
    /// The emulated links.
    pub links: Vec<WanLink>,
    /// Addresses for programs.
    pub addresses: Addresses,
}

fn end(role: &str, ifname: &str, cidr: Option<&str>) -> End {
    End {
        role: role.into(),
        ifname: ifname.into(),
        cidr: cidr.map(str::to_string),
    }
}

fn veth(a: End, b: End) -> Veth {
    Veth { a, b }
}

fn route(role: &str, dest: &str, via: [u8; 4]) -> Route {
    Route {
        role: role.into(),
        dest: dest.into(),
        via: Ipv4Addr::from(via),
    }
}

fn link(name: &str, a_if: &str, b_if: &str, admin_port: u16) -> WanLink {
    WanLink {
        name: name.into(),
        role: name.into(),
        a_if: a_if.into(),
        b_if: b_if.into(),
        admin_port,
    }
}

/// The first admin port; link `i` (0-based) gets `ADMIN_PORT_BASE + i`.
pub const ADMIN_PORT_BASE: u16 = 9191;

impl Plan {
    /// The plan of topology `kind`.
    pub fn new(kind: TopologyKind) -> Plan {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        match kind {
            TopologyKind::Pair => Plan {
                kind,
                roles: s(&["client", "wan", "server"]),
                routers: vec![],
                hosts: s(&["client", "server"]),
                veths: vec![
                    veth(
                        end("client", "c-wan", Some("198.18.0.1/24")),
                        end("wan", "wan-c", None),
                    ),
                    veth(
                        end("server", "s-wan", Some("198.18.0.2/24")),
                        end("wan", "wan-s", None),
                    ),
                    veth(
                        end("client", "c-dir", Some("198.18.100.1/24")),
                        end("server", "s-dir", Some("198.18.100.2/24")),
                    ),
                ],
                routes: vec![],
                links: vec![link("wan", "wan-c", "wan-s", ADMIN_PORT_BASE)],
                addresses: Addresses {
                    client: Ipv4Addr::new(198, 18, 0, 1),
                    server: Ipv4Addr::new(198, 18, 0, 2),
                    client_direct: Some(Ipv4Addr::new(198, 18, 100, 1)),
                    server_direct: Some(Ipv4Addr::new(198, 18, 100, 2)),
                    branch_wan: vec![],
                    dc_wan: vec![],
                },
            },
            TopologyKind::Branch | TopologyKind::DualWan => {
                let dual = kind == TopologyKind::DualWan;
                let mut roles = s(&["client", "branch"]);
                let mut veths = vec![veth(
                    end("client", "c-br", Some("198.18.1.2/24")),
                    end("branch", "br-c", Some("198.18.1.1/24")),
                )];
                let mut links = Vec::new();
                let mut branch_wan = Vec::new();
                let mut dc_wan = Vec::new();
                let wans: &[(&str, u8)] = if dual {
                    &[("wan1", 0), ("wan2", 10)]
                } else {
                    &[("wan", 0)]
                };
                for (i, (name, net)) in wans.iter().enumerate() {
                    roles.push((*name).into());
                    let (br_if, dc_if) = if dual {
                        (format!("br-{name}"), format!("dc-{name}"))
                    } else {
                        ("br-wan".to_string(), "dc-wan".to_string())
                    };
                    veths.push(veth(
                        end("branch", &br_if, Some(&format!("198.18.{net}.1/24"))),
                        end(name, "wan-br", None),
                    ));
                    veths.push(veth(
                        end("dc", &dc_if, Some(&format!("198.18.{net}.2/24"))),
                        end(name, "wan-dc", None),
                    ));
                    links.push(link(name, "wan-br", "wan-dc", ADMIN_PORT_BASE + i as u16));
                    branch_wan.push(Ipv4Addr::new(198, 18, *net, 1));
                    dc_wan.push(Ipv4Addr::new(198, 18, *net, 2));
                }
                roles.extend(s(&["dc", "server"]));
                veths.push(veth(
                    end("dc", "dc-s", Some("198.18.2.1/24")),
                    end("server", "s-dc", Some("198.18.2.2/24")),
                ));
                Plan {
                    kind,
                    roles,
                    routers: s(&["branch", "dc"]),
                    hosts: s(&["client", "branch", "dc", "server"]),
                    veths,
                    routes: vec![
                        route("client", "default", [198, 18, 1, 1]),
                        route("server", "default", [198, 18, 2, 1]),
                        // The first WAN link carries everything until SD-WAN steers.
                        route("branch", "198.18.2.0/24", [198, 18, 0, 2]),
                        route("dc", "198.18.1.0/24", [198, 18, 0, 1]),
                    ],
                    links,
                    addresses: Addresses {
                        client: Ipv4Addr::new(198, 18, 1, 2),
                        server: Ipv4Addr::new(198, 18, 2, 2),
                        client_direct: None,
                        server_direct: None,
                        branch_wan,
                        dc_wan,
                    },
                }
            }
        }
    }

    /// Whether `role` is the namespace of an emulated link.
    pub fn is_wan(&self, role: &str) -> bool {
        self.links.iter().any(|l| l.role == role)
    }

    /// Whether `veth` joins two hosts without an emulated link between them (a client and its
    /// branch appliance, a data-centre appliance and its server). Such a LAN keeps the kernel's
    /// offloads, as a production host's NICs do: no emulator reads its frames, and a router
    /// segments and checksums in software what it forwards onto a WAN interface, whose
    /// offloads are off. (With every interface's offloads off, an appliance handing the client
    /// a 225 KiB frame of verified bytes spent 1.4 ms in one `writev`, segment by segment —
    /// 2 % of a 1 MB download at 44 Mbit/s, beside 64.7 ms of link time.)
    pub fn is_lan(&self, veth: &Veth) -> bool {
        !self.is_wan(&veth.a.role) && !self.is_wan(&veth.b.role)
    }
}

/// The namespace name of `role` under `prefix` (`hw-` + `client` = `hw-client`).
pub fn namespace(prefix: &str, role: &str) -> String {
    format!("{prefix}{role}")
}

/// What fills the WAN namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WanFill {
    /// Nothing: the caller starts an emulator that bridges the two interfaces. Interfaces are
    /// up and promiscuous, with no addresses.
    Emulator,
    /// A Linux bridge (`br0`) joins the two interfaces: plumbing tests without an emulator.
    Bridge,
    /// A Linux bridge, and every interface keeps the kernel's offloads (segmentation and
    /// receive coalescing, checksums), as a production host's NICs do: the unconstrained link
    /// of throughput benchmarks, where no emulator needs to see each frame.
    BridgeOffloaded,
}

/// Errors while building a topology.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A plumbing command failed.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// The run was interrupted.
    #[error(transparent)]
    Interrupted(#[from] interrupt::Interrupted),
}

/// Creates every namespace, interface, address and route of `plan` under `prefix`.
///
/// On error the host may hold a partly built topology; the caller removes it (namespaces are
/// all named `prefix…`, see [`crate::lab::cleanup`]).
pub fn build(plan: &Plan, prefix: &str, fill: WanFill) -> Result<(), BuildError> {
    let ns = |role: &str| namespace(prefix, role);
    let mut cc_on_routes = Vec::new();
    for role in &plan.roles {
        interrupt::check()?;
        let name = ns(role);
        netns::add_namespace(&name)?;
        // Before any interface exists, so no IPv6 chatter ever reaches an emulated link.
        netns::sysctl(
            &name,
            &[
                ("net.ipv6.conf.all.disable_ipv6", "1"),
                ("net.ipv6.conf.default.disable_ipv6", "1"),
            ],
        )?;
        if plan.hosts.contains(role) {
            match netns::sysctl(&name, &[("net.ipv4.tcp_congestion_control", HOST_CC)]) {
                Ok(()) => {}
                // Outside the initial namespace the kernel only lets a namespace default to an
                // algorithm in the host's `tcp_allowed_congestion_control`; rather than change
                // the host, set it on every route of the namespace instead (same effect for
                // every connection).
                Err(NetnsError::Failed { stderr, .. })
                    if stderr.contains("Operation not permitted") =>
                {
                    cc_on_routes.push(name.clone());
                }
                Err(e) => return Err(e.into()),
            }
        }
        if plan.routers.contains(role) {
            netns::sysctl(&name, &[("net.ipv4.ip_forward", "1")])?;
        }
    }
    for v in &plan.veths {
        interrupt::check()?;
        netns::add_veth(&ns(&v.a.role), &v.a.ifname, &ns(&v.b.role), &v.b.ifname)?;
        let offloaded = fill == WanFill::BridgeOffloaded || plan.is_lan(v);
        for e in [&v.a, &v.b] {
            let name = ns(&e.role);
            if !offloaded {
                netns::disable_offloads(&name, &e.ifname)?;
            }
            if let Some(cidr) = &e.cidr {
                netns::add_address(&name, &e.ifname, cidr)?;
            }
            if plan.is_wan(&e.role) {
                netns::ip_in(&name, &["link", "set", "dev", &e.ifname, "promisc", "on"])?;
            }
            netns::link_up(&name, &e.ifname)?;
        }
    }
    if fill != WanFill::Emulator {
        for l in &plan.links {
            interrupt::check()?;
            let name = ns(&l.role);
            netns::ip_in(
                &name,
                &["link", "add", "br0", "type", "bridge", "stp_state", "0"],
            )?;
            if fill == WanFill::Bridge {
                netns::disable_offloads(&name, "br0")?;
            }
            for ifname in [&l.a_if, &l.b_if] {
                netns::ip_in(&name, &["link", "set", "dev", ifname, "master", "br0"])?;
            }
            netns::link_up(&name, "br0")?;
        }
    }
    for r in &plan.routes {
        interrupt::check()?;
        netns::add_route(&ns(&r.role), &r.dest, &r.via.to_string())?;
    }
    for name in &cc_on_routes {
        netns::set_route_congestion_control(name, HOST_CC)?;
    }
    Ok(())
}

/// The TCP congestion control of lab hosts (the host default here is bbr; the seeds' peers and
/// Linux defaults elsewhere are cubic).
pub const HOST_CC: &str = "cubic";

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [TopologyKind; 3] = [
        TopologyKind::Pair,
        TopologyKind::Branch,
        TopologyKind::DualWan,
    ];

    fn in_benchmark_range(ip: Ipv4Addr) -> bool {
        let o = ip.octets();
        o[0] == 198 && (o[1] == 18 || o[1] == 19)
    }

    #[test]
    fn every_address_is_in_the_rfc2544_range() {
        for kind in ALL {
            let p = Plan::new(kind);
            for v in &p.veths {
                for e in [&v.a, &v.b] {
                    if let Some(c) = &e.cidr {
                        let ip: Ipv4Addr = c.split('/').next().unwrap().parse().unwrap();
                        assert!(in_benchmark_range(ip), "{kind:?}: {c}");
                    }
                }
            }
            for r in &p.routes {
                assert!(in_benchmark_range(r.via));
            }
            let a = &p.addresses;
            assert!(in_benchmark_range(a.client) && in_benchmark_range(a.server));
        }
    }

    #[test]
    fn every_veth_end_is_in_a_planned_namespace_and_names_fit_ifnamsiz() {
        for kind in ALL {
            let p = Plan::new(kind);
            for v in &p.veths {
                for e in [&v.a, &v.b] {
                    assert!(p.roles.contains(&e.role), "{kind:?}: {}", e.role);
                    assert!(e.ifname.len() <= 15);
                }
            }
            for l in &p.links {
                assert!(p.roles.contains(&l.role));
            }
        }
    }

    #[test]
    fn interface_names_are_unique_within_each_namespace() {
        for kind in ALL {
            let p = Plan::new(kind);
            let mut seen = std::collections::HashSet::new();
            for v in &p.veths {
                for e in [&v.a, &v.b] {
                    assert!(
                        seen.insert((e.role.clone(), e.ifname.clone())),
                        "{kind:?}: {e:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn pair_has_a_direct_baseline_and_one_link() {
        let p = Plan::new(TopologyKind::Pair);
        assert_eq!(p.links.len(), 1);
        assert_eq!(p.links[0].name, "wan");
        assert_eq!(
            p.addresses.server_direct,
            Some(Ipv4Addr::new(198, 18, 100, 2))
        );
        assert_ne!(p.addresses.server, p.addresses.server_direct.unwrap());
        assert!(p.routers.is_empty());
    }

    #[test]
    fn branch_routes_through_both_appliances() {
        let p = Plan::new(TopologyKind::Branch);
        assert_eq!(p.roles, ["client", "branch", "wan", "dc", "server"]);
        assert_eq!(p.routers, ["branch", "dc"]);
        let client_gw = p.routes.iter().find(|r| r.role == "client").unwrap();
        assert_eq!(client_gw.via, Ipv4Addr::new(198, 18, 1, 1));
        let branch = p.routes.iter().find(|r| r.role == "branch").unwrap();
        assert_eq!(branch.via, p.addresses.dc_wan[0]);
    }

    #[test]
    fn dual_wan_has_two_links_on_distinct_subnets_and_ports() {
        let p = Plan::new(TopologyKind::DualWan);
        let names: Vec<_> = p.links.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["wan1", "wan2"]);
        assert_ne!(p.links[0].admin_port, p.links[1].admin_port);
        assert_ne!(p.addresses.dc_wan[0], p.addresses.dc_wan[1]);
        assert_eq!(namespace("hw-", "wan2"), "hw-wan2");
    }
}
