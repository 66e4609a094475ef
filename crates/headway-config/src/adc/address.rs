//! A server's address as the config file gives it: an IP address and a port, or a DNS name and
//! a port (`"app1.internal:8080"`, what Kubernetes services, Docker networks and most data
//! centres hand out).
//!
//! Checking the text is pure and done here; resolving a name is the proxy's (when a config is
//! applied, and again every group's `dns_refresh`), so that `headway check` and the config's
//! fuzz target never wait on a resolver.

use std::fmt;
use std::net::SocketAddr;

/// Longest DNS name (RFC 1035, without the trailing dot).
const MAX_NAME: usize = 253;
/// Longest label of a DNS name.
const MAX_LABEL: usize = 63;

/// Where a server listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerAddress {
    /// An IP address and a port, used as written.
    Ip(SocketAddr),
    /// A DNS name (lower case, no trailing dot) and a port, resolved by the proxy.
    Name {
        /// The name.
        host: String,
        /// The port.
        port: u16,
    },
}

impl ServerAddress {
    /// The DNS name, for [`ServerAddress::Name`].
    pub fn host(&self) -> Option<&str> {
        match self {
            ServerAddress::Ip(_) => None,
            ServerAddress::Name { host, .. } => Some(host),
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            ServerAddress::Ip(a) => a.port(),
            ServerAddress::Name { port, .. } => *port,
        }
    }

    /// The IP address and port, for [`ServerAddress::Ip`].
    pub fn ip(&self) -> Option<SocketAddr> {
        match self {
            ServerAddress::Ip(a) => Some(*a),
            ServerAddress::Name { .. } => None,
        }
    }
}

impl fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerAddress::Ip(a) => write!(f, "{a}"),
            ServerAddress::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// Which address of a name that has both kinds a server is connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DnsPrefer {
    /// IPv4 if the name has one, else IPv6 (most servers listen on IPv4; `localhost` often
    /// resolves to `::1` first).
    #[default]
    Ipv4,
    /// IPv6 if the name has one, else IPv4.
    Ipv6,
}

impl DnsPrefer {
    /// Its name in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            DnsPrefer::Ipv4 => "ipv4",
            DnsPrefer::Ipv6 => "ipv6",
        }
    }
}

/// Parses a server address: `ip:port`, `[ipv6]:port` or `name:port`. `Err` says what is wrong
/// in words that complete "server address `…` …".
pub fn parse(text: &str) -> Result<ServerAddress, String> {
    let text = text.trim();
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(ServerAddress::Ip(a));
    }
    if text.contains("://") {
        return Err("is a URL: write `host:port` without the scheme".into());
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err("has no port: write `host:port`".into());
    };
    if host.starts_with('[') || host.contains(':') {
        return Err("is not an IPv6 address and port: write `[2001:db8::5]:80`".into());
    }
    let port: u16 = match port.parse() {
        Ok(p) if p > 0 => p,
        _ => return Err(format!("has no valid port (`{port}`): use 1–65535")),
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    check_host(host)?;
    Ok(ServerAddress::Name {
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// Checks a DNS name: labels of letters, digits, `-` and `_` (Docker's service names), 1–63
/// characters each, not starting or ending with `-`, at most 253 characters in all, and not all
/// digits (a mistyped IPv4 address, which a resolver might read as a number).
fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("has no host: write an IP address or a DNS name before the port".into());
    }
    if host.len() > MAX_NAME {
        return Err(format!("has a host name longer than {MAX_NAME} characters"));
    }
    for label in host.split('.') {
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if label.is_empty()
            || label.len() > MAX_LABEL
            || !label.chars().all(ok)
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(format!(
                "is neither an IP address nor a DNS name: `{label}` is not a name label \
                 (1–{MAX_LABEL} letters, digits, `-` or `_`, not starting or ending with `-`)"
            ));
        }
    }
    if host.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(
            "is not a valid IPv4 address: write four numbers 0–255, e.g. `10.0.0.5`".into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ip_addresses_are_taken_as_written() {
        assert_eq!(
            parse("10.0.0.5:80").unwrap(),
            ServerAddress::Ip("10.0.0.5:80".parse().unwrap())
        );
        assert_eq!(
            parse(" [2001:db8::5]:443 ").unwrap(),
            ServerAddress::Ip("[2001:db8::5]:443".parse().unwrap())
        );
    }

    #[test]
    fn names_are_lower_cased_without_their_trailing_dot() {
        let a = parse("App1.Internal.:8080").unwrap();
        assert_eq!(
            a,
            ServerAddress::Name {
                host: "app1.internal".into(),
                port: 8080
            }
        );
        assert_eq!(a.to_string(), "app1.internal:8080");
        assert_eq!(a.host(), Some("app1.internal"));
        assert_eq!(a.port(), 8080);
        assert_eq!(parse("localhost:1").unwrap().host(), Some("localhost"));
        assert_eq!(parse("my_service:80").unwrap().host(), Some("my_service"));
    }

    #[test]
    fn broken_addresses_say_what_is_wrong() {
        for (text, says) in [
            ("app1.internal", "no port"),
            ("app1:http", "no valid port"),
            ("app1:0", "no valid port"),
            ("app1:70000", "no valid port"),
            (":80", "no host"),
            ("10.0.0.256:80", "not a valid IPv4"),
            ("10.0.5:80", "not a valid IPv4"),
            ("2001:db8::5:80", "IPv6"),
            ("[2001:db8::5:80", "IPv6"),
            ("app 1:80", "not a name label"),
            ("-app:80", "not a name label"),
            ("a..b:80", "not a name label"),
            ("http://app1:80", "URL"),
            ("app1/x:80", "not a name label"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        let long = format!("{}:80", "a".repeat(64));
        assert!(parse(&long).unwrap_err().contains("not a name label"));
        let longer = format!("{}:80", ["a"; 130].join("."));
        assert!(parse(&longer).unwrap_err().contains("longer than"));
    }

    proptest! {
        #[test]
        fn any_text_parses_or_is_refused_and_a_name_prints_back(s in "\\PC{0,80}") {
            if let Ok(a) = parse(&s) {
                // What parsed is written so that it parses to itself.
                prop_assert_eq!(parse(&a.to_string()).unwrap(), a);
            }
        }

        #[test]
        fn valid_names_parse(
            labels in proptest::collection::vec("[a-z][a-z0-9_-]{0,10}[a-z0-9]", 1..5),
            port in 1u16..,
        ) {
            let host = labels.join(".");
            let a = parse(&format!("{host}:{port}")).unwrap();
            prop_assert_eq!(a, ServerAddress::Name { host, port });
        }
    }
}
