//! Addresses.

use std::net::IpAddr;

/// `ip` with an IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, how an IPv4 client looks on an
/// IPv6 socket) written as the IPv4 address it is; any other address as it is.
pub fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_addresses_become_ipv4_and_others_stay() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(unmapped(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        assert_eq!(unmapped(ip("10.0.0.1")), ip("10.0.0.1"));
        assert_eq!(unmapped(ip("2001:db8::1")), ip("2001:db8::1"));
        assert_eq!(unmapped(ip("::1")), ip("::1"));
    }
}
