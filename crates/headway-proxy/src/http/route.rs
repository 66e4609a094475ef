//! Content switching: which server group a request goes to.
//!
//! [`Router`] holds a virtual server's rules in file order and its default group;
//! [`Router::route`] returns the first rule whose every condition holds (or the default). Pure:
//! it reads the request's method, host, path and headers, and the client's address, and nothing
//! else. Host is the `Host` header (or the URI's authority for HTTP/2), lower-cased, port
//! removed; path is the URI path before `?`, compared as received (not percent-decoded, as
//! NetScaler and HAProxy compare it); the client's address is the PROXY header's when the
//! virtual server takes them.

use std::net::IpAddr;

use headway_config::adc::{Condition, Rule, ValueMatch};
use http::request::Parts;

/// A virtual server's rules, each with its target `T` (a group).
#[derive(Debug)]
pub struct Router<T> {
    rules: Vec<(Rule, T)>,
    default: T,
}

impl<T> Router<T> {
    /// A router over `rules` (first match wins) and `default`.
    pub fn new(rules: Vec<(Rule, T)>, default: T) -> Self {
        Router { rules, default }
    }

    /// The target of a request from `client`, and the matching rule's index in file order
    /// (`None` for the default).
    pub fn route(&self, req: &Parts, client: IpAddr) -> (&T, Option<usize>) {
        if self.rules.is_empty() {
            return (&self.default, None);
        }
        let host = host_of(req);
        let path = req.uri.path();
        for (i, (rule, target)) in self.rules.iter().enumerate() {
            if rule
                .conditions
                .iter()
                .all(|c| matches(c, req, host.as_deref(), path, Some(client)))
            {
                return (target, Some(i));
            }
        }
        (&self.default, None)
    }

    /// The rule at `index` in file order.
    pub fn rule(&self, index: usize) -> Option<&Rule> {
        self.rules.get(index).map(|(r, _)| r)
    }

    /// The rules' names and targets, in order.
    pub fn rules(&self) -> impl Iterator<Item = (&Rule, &T)> {
        self.rules.iter().map(|(r, t)| (r, t))
    }

    /// The default target.
    pub fn default_target(&self) -> &T {
        &self.default
    }
}

/// Rewrites the path of `req` by `rw` (a rule's `path_rewrite`), keeping its query; a result
/// that is not a valid path leaves the request as it was.
pub fn rewrite_path(req: &mut Parts, rw: &headway_config::adc::PathRewrite) {
    let Some(path) = rw.apply(req.uri.path()) else {
        return;
    };
    let pq = match req.uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    let mut parts = req.uri.clone().into_parts();
    parts.path_and_query = match pq.parse() {
        Ok(pq) => Some(pq),
        Err(_) => return,
    };
    if let Ok(uri) = http::Uri::from_parts(parts) {
        req.uri = uri;
    }
}

/// The request's host, lower case, without a port.
pub fn host_of(req: &Parts) -> Option<String> {
    let raw = req
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri.authority().map(|a| a.as_str()))?;
    let host = if raw.starts_with('[') {
        // [v6]:port
        raw.split_inclusive(']').next().unwrap_or(raw)
    } else {
        raw.rsplit_once(':').map_or(raw, |(h, _)| h)
    };
    Some(host.to_ascii_lowercase())
}

/// Whether a header's, cookie's or query parameter's value `v` matches.
fn value_matches(m: &ValueMatch, v: &[u8]) -> bool {
    match m {
        ValueMatch::Any => true,
        ValueMatch::Exact(x) => v == x.as_bytes(),
        ValueMatch::Regex(r) => std::str::from_utf8(v).is_ok_and(|s| r.0.is_match(s)),
        _ => false,
    }
}

/// The value of the first parameter `name` of `query` (`a=1&b=2`; a parameter without `=` has
/// an empty value), as received.
pub fn query_value<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

/// Whether condition `c` holds for `req` (`host` as [`host_of`] gives it, `path` the URI path)
/// from `client` (`None`: not known, and no client condition holds); the cache policies use it
/// too.
pub(crate) fn matches(
    c: &Condition,
    req: &Parts,
    host: Option<&str>,
    path: &str,
    client: Option<IpAddr>,
) -> bool {
    match c {
        Condition::Source(nets) => client.is_some_and(|ip| nets.iter().any(|n| n.contains(ip))),
        Condition::Share(share) => client.is_some_and(|ip| share.holds(ip)),
        Condition::SourceNot(nets) => client.is_some_and(|ip| !nets.iter().any(|n| n.contains(ip))),
        Condition::Host(h) => host == Some(h.as_str()),
        Condition::HostSuffix(s) => host.is_some_and(|h| h.ends_with(s.as_str())),
        Condition::Path(p) => path == p,
        Condition::PathPrefix(p) => path.starts_with(p.as_str()),
        Condition::PathContains(p) => path.contains(p.as_str()),
        Condition::PathRegex(r) => r.0.is_match(path),
        Condition::PathExtension(exts) => {
            let last = path.rsplit('/').next().unwrap_or("");
            last.rsplit_once('.')
                .is_some_and(|(_, e)| exts.iter().any(|x| x.eq_ignore_ascii_case(e)))
        }
        Condition::Method(ms) => ms.iter().any(|m| m == req.method.as_str()),
        Condition::Header { name, value } => req
            .headers
            .get_all(name.as_str())
            .iter()
            .any(|v| value_matches(value, v.as_bytes())),
        Condition::Cookie { name, value } => req
            .headers
            .get_all(http::header::COOKIE)
            .iter()
            .find_map(|v| headway_lb::persist::cookie_value(name, v.as_bytes()))
            .is_some_and(|v| value_matches(value, v)),
        Condition::Query { name, value } => req
            .uri
            .query()
            .and_then(|q| query_value(q, name))
            .is_some_and(|v| value_matches(value, v.as_bytes())),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headway_config::adc::Pattern;

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn rule(name: &str, conditions: Vec<Condition>) -> Rule {
        Rule {
            name: name.into(),
            action: headway_config::adc::Action::Group(String::new()),
            conditions,
            path_rewrite: None,
            rate_limit: None,
            auth: None,
        }
    }

    #[test]
    fn first_matching_rule_wins_and_all_conditions_must_hold() {
        let r = Router::new(
            vec![
                (
                    rule(
                        "img",
                        vec![
                            Condition::PathExtension(vec!["jpg".into(), "gif".into()]),
                            Condition::Method(vec!["GET".into()]),
                        ],
                    ),
                    1,
                ),
                (
                    rule(
                        "mysite",
                        vec![Condition::PathContains("/_layouts/MySite.aspx".into())],
                    ),
                    2,
                ),
                (
                    rule("api", vec![Condition::HostSuffix(".api.example".into())]),
                    3,
                ),
                (
                    rule(
                        "beta",
                        vec![Condition::Header {
                            name: "x-beta".into(),
                            value: ValueMatch::Regex(Pattern(regex::Regex::new("^1").unwrap())),
                        }],
                    ),
                    4,
                ),
                (rule("v2", vec![Condition::PathPrefix("/v2/".into())]), 5),
            ],
            0,
        );
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        let t = |m: &str, u: &str, h: &[(&str, &str)]| *r.route(&parts(m, u, h), client).0;
        assert_eq!(t("GET", "/a/b.JPG?x=1", &[]), 1);
        assert_eq!(t("POST", "/a/b.jpg", &[]), 0);
        assert_eq!(t("GET", "/sites/_layouts/MySite.aspx", &[]), 2);
        assert_eq!(t("GET", "/", &[("host", "eu.API.example:8080")]), 3);
        assert_eq!(t("GET", "/", &[("host", "api.example")]), 0);
        assert_eq!(t("GET", "/", &[("x-beta", "12")]), 4);
        assert_eq!(t("GET", "/", &[("x-beta", "2")]), 0);
        assert_eq!(t("GET", "/v2/x", &[]), 5);
        assert_eq!(t("GET", "/v2", &[]), 0);
        assert_eq!(t("GET", "/dir.jpg/file", &[]), 0);
        assert_eq!(r.route(&parts("GET", "/v2/x", &[]), client).1, Some(4));
        assert_eq!(r.route(&parts("GET", "/", &[]), client).1, None);
    }

    #[test]
    fn cookie_and_query_conditions_read_their_values() {
        let r = Router::new(
            vec![
                (
                    rule(
                        "beta-users",
                        vec![Condition::Cookie {
                            name: "beta".into(),
                            value: ValueMatch::Exact("1".into()),
                        }],
                    ),
                    1,
                ),
                (
                    rule(
                        "v2",
                        vec![Condition::Query {
                            name: "version".into(),
                            value: ValueMatch::Regex(Pattern(regex::Regex::new("^2").unwrap())),
                        }],
                    ),
                    2,
                ),
                (
                    rule(
                        "debug",
                        vec![Condition::Query {
                            name: "debug".into(),
                            value: ValueMatch::Any,
                        }],
                    ),
                    3,
                ),
            ],
            0,
        );
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        let t = |u: &str, h: &[(&str, &str)]| *r.route(&parts("GET", u, h), client).0;
        assert_eq!(t("/", &[("cookie", "theme=dark; beta=1")]), 1);
        assert_eq!(t("/", &[("cookie", "beta=\"1\"")]), 1);
        assert_eq!(t("/", &[("cookie", "beta=10")]), 0);
        assert_eq!(t("/", &[("cookie", "a=1"), ("cookie", "beta=1")]), 1);
        assert_eq!(t("/", &[("x-beta", "1")]), 0);
        assert_eq!(t("/x?version=2.1", &[]), 2);
        assert_eq!(t("/x?a=1&version=20&version=1", &[]), 2);
        assert_eq!(t("/x?a=1&version=1&version=2", &[]), 0);
        assert_eq!(t("/x?myversion=2", &[]), 0);
        assert_eq!(t("/x?debug", &[]), 3);
        assert_eq!(t("/x?debug=", &[]), 3);
        assert_eq!(t("/x", &[]), 0);
        assert_eq!(query_value("a=1&b=&c", "b"), Some(""));
        assert_eq!(query_value("a=1&b=&c", "c"), Some(""));
        assert_eq!(query_value("a=1=2", "a"), Some("1=2"));
        assert_eq!(query_value("", "a"), None);
    }

    #[test]
    fn source_conditions_read_the_clients_address() {
        let nets = |l: &[&str]| -> Vec<headway_config::wanopt::Cidr> {
            l.iter().map(|c| c.parse().unwrap()).collect()
        };
        let r = Router::new(
            vec![
                (
                    rule(
                        "admin-outside",
                        vec![
                            Condition::PathPrefix("/admin".into()),
                            Condition::SourceNot(nets(&["10.0.0.0/8", "2001:db8::/32"])),
                        ],
                    ),
                    1,
                ),
                (
                    rule("office", vec![Condition::Source(nets(&["192.0.2.0/24"]))]),
                    2,
                ),
            ],
            0,
        );
        let t = |path: &str, ip: &str| *r.route(&parts("GET", path, &[]), ip.parse().unwrap()).0;
        assert_eq!(t("/admin/x", "203.0.113.5"), 1);
        assert_eq!(t("/admin/x", "10.1.2.3"), 0);
        assert_eq!(t("/admin/x", "2001:db8::7"), 0);
        // An IPv4 client on an IPv6 socket is matched as IPv4.
        assert_eq!(t("/admin/x", "::ffff:10.1.2.3"), 0);
        assert_eq!(t("/admin/x", "2001:db9::7"), 1);
        assert_eq!(t("/x", "192.0.2.77"), 2);
        assert_eq!(t("/x", "192.0.3.77"), 0);
        // Without a client address (the cache's policies) neither kind holds.
        let req = parts("GET", "/admin", &[]);
        for c in &r.rules().next().unwrap().0.conditions[1..] {
            assert!(!matches(c, &req, None, "/admin", None));
        }
    }

    #[test]
    fn a_rewrite_changes_the_path_and_keeps_the_query() {
        let rw = |from: &str, to: &str| headway_config::adc::PathRewrite {
            from: Pattern(regex::Regex::new(from).unwrap()),
            to: to.into(),
        };
        let strip = rw("^/api(/.*)?$", "$1");
        for (uri, want) in [
            ("/api/users?id=7", "/users?id=7"),
            ("/api", "/"),
            ("/apis/x", "/apis/x"),
            ("http://h2.example/api/v1", "http://h2.example/v1"),
        ] {
            let mut p = parts("GET", uri, &[]);
            rewrite_path(&mut p, &strip);
            assert_eq!(p.uri.to_string(), want, "{uri}");
        }
        let mut p = parts("GET", "/old/a/b", &[]);
        rewrite_path(&mut p, &rw("^/old/(?P<rest>.*)", "/new/${rest}"));
        assert_eq!(p.uri, "/new/a/b");
        // A result that is no path leaves the request alone.
        let mut p = parts("GET", "/x", &[]);
        rewrite_path(&mut p, &rw("x", "a b"));
        assert_eq!(p.uri, "/x");
    }

    #[test]
    fn host_comes_from_the_header_or_the_authority() {
        assert_eq!(
            host_of(&parts("GET", "/", &[("host", "WWW.Example.com:80")])).as_deref(),
            Some("www.example.com")
        );
        assert_eq!(
            host_of(&parts("GET", "http://h2.example:8443/x", &[])).as_deref(),
            Some("h2.example")
        );
        assert_eq!(
            host_of(&parts("GET", "/", &[("host", "[::1]:80")])).as_deref(),
            Some("[::1]")
        );
        assert_eq!(host_of(&parts("GET", "/", &[])), None);
    }
}
