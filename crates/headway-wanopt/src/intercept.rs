//! Transparent interception (nftables TPROXY): the configuration, the classification of an
//! intercepted flow's original destination, the nftables ruleset, and installing/removing it.
//!
//! IPv4 only for now: the ruleset is an `ip` table and the local route is IPv4's.

use std::net::{IpAddr, SocketAddr};

use headway_tunnel::ServiceClass;

/// Transparent interception of TCP flows through the appliance (TPROXY).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterceptConfig {
    /// Address of the IP_TRANSPARENT listener the TPROXY rules send flows to (e.g. 0.0.0.0:7070).
    pub listen: SocketAddr,
    /// LAN interfaces whose incoming TCP is intercepted: the appliance installs the nftables
    /// table, the fwmark rule and the local route at start and removes them at shutdown/drop.
    /// Empty: nothing is installed (the operator installs rules himself).
    pub interfaces: Vec<String>,
    /// Ordered rules, first match wins.
    pub rules: Vec<InterceptRule>,
}

/// Which intercepted flows go to which peer, with which class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterceptRule {
    /// Destination subnets (address, prefix length); empty: any destination.
    pub destinations: Vec<(IpAddr, u8)>,
    /// Destination port ranges, inclusive; empty: any port.
    pub ports: Vec<(u16, u16)>,
    /// The peer (a `PeerConfig::name`) in front of these destinations.
    pub peer: String,
    /// What the optimizer does with matching flows (`PassThrough` flows are not intercepted).
    pub class: ServiceClass,
}
