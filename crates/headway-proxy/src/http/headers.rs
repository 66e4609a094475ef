//! Header handling on the L7 path: hop-by-hop fields (RFC 9110 §7.6.1), the forwarding
//! headers (`X-Forwarded-For`, `X-Forwarded-Proto`, RFC 7239 `Forwarded`), and the virtual
//! server's own header rules, precompiled.

use std::net::IpAddr;

use headway_config::adc::{HeaderRules, HeaderValueTemplate, ValuePart};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Fields that describe one connection, never forwarded (RFC 9110 §7.6.1, plus the
/// non-standard `Keep-Alive` and `Proxy-Connection`).
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// Removes the hop-by-hop fields, including those the `Connection` field names. Returns
/// whether `Connection` asked to close. One pass over the fields finds which hop-by-hop fields
/// are there (usually none), and only those are looked up and removed; the names `Connection`
/// lists are removed by reference, without building header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) -> bool {
    let mut present = 0u32;
    for k in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == k) {
            present |= 1 << i;
        }
    }
    if present == 0 {
        return false;
    }
    let mut close = false;
    // `Connection` is HOP_BY_HOP[0]. Its values are kept (a reference count each) so that the
    // fields they name can be removed while they are read.
    if present & 1 != 0 {
        let listed: smallvec::SmallVec<[HeaderValue; 2]> = headers
            .get_all(header::CONNECTION)
            .iter()
            .cloned()
            .collect();
        for t in connection_options(listed.iter()) {
            if t.eq_ignore_ascii_case("close") {
                close = true;
            }
            if !t.is_empty() {
                headers.remove(t);
            }
        }
    }
    for (i, h) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(h);
        }
    }
    close
}

/// The `Upgrade` field of a request that asks for a protocol upgrade a tunnel can carry:
/// `Connection` lists `upgrade` (RFC 9110 §7.8), there is one `Upgrade` field, and it names a
/// protocol other than `h2c` (cleartext HTTP/2, which clients get from the proxy itself with
/// prior knowledge rather than by tunnelling to a server). `None` for any other request.
pub fn upgrade_asked(headers: &HeaderMap) -> Option<HeaderValue> {
    let listed = connection_options(headers.get_all(header::CONNECTION).iter())
        .any(|t| t.eq_ignore_ascii_case("upgrade"));
    if !listed {
        return None;
    }
    let mut fields = headers.get_all(header::UPGRADE).iter();
    let value = fields.next()?;
    if fields.next().is_some() {
        return None;
    }
    let tunnelled = value
        .to_str()
        .ok()?
        .split(',')
        .map(|p| p.trim().split('/').next().unwrap_or_default())
        .any(|p| !p.is_empty() && !p.eq_ignore_ascii_case("h2c"));
    tunnelled.then(|| value.clone())
}

/// The comma-separated options of `Connection` field values, trimmed.
pub(super) fn connection_options<'a>(
    values: impl Iterator<Item = &'a HeaderValue>,
) -> impl Iterator<Item = &'a str> {
    values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// Whether a request is its connection's last: an HTTP/1 request that asks to close, or an
/// HTTP/1.0 one that does not ask to keep the connection alive (RFC 9112 §9.3) — what hyper
/// decides too. An HTTP/2 request never is (its stream ends, not the connection).
pub fn request_closes(version: http::Version, headers: &HeaderMap) -> bool {
    if version >= http::Version::HTTP_2 {
        return false;
    }
    let mut keep_alive = false;
    for t in connection_options(headers.get_all(header::CONNECTION).iter()) {
        if t.eq_ignore_ascii_case("close") {
            return true;
        }
        keep_alive |= t.eq_ignore_ascii_case("keep-alive");
    }
    version == http::Version::HTTP_10 && !keep_alive
}

/// A client's address, written once per connection for the forwarding headers.
#[derive(Debug, Clone)]
pub struct Client {
    ip: IpAddr,
    /// `X-Forwarded-For` when the request has none.
    xff: HeaderValue,
}

impl Client {
    /// The client at `ip` (an IPv4-mapped IPv6 address is written as IPv4).
    pub fn new(ip: IpAddr) -> Self {
        let ip = headway_core::net::unmapped(ip);
        let xff = match ip {
            IpAddr::V4(v4) => ipv4_value(v4),
            IpAddr::V6(v6) => HeaderValue::from_str(&v6.to_string())
                .unwrap_or_else(|_| HeaderValue::from_static("unknown")),
        };
        Client { ip, xff }
    }
}

/// An IPv4 address as a header value, written digit by digit: `Ipv4Addr`'s `Display` goes
/// through the formatting machinery, a twentieth of a short connection's cost.
fn ipv4_value(ip: std::net::Ipv4Addr) -> HeaderValue {
    let mut out = [0u8; 15];
    let mut n = 0;
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            out[n] = b'.';
            n += 1;
        }
        let digits = [octet / 100, octet / 10 % 10, octet % 10];
        let skip = if octet >= 100 {
            0
        } else if octet >= 10 {
            1
        } else {
            2
        };
        for d in &digits[skip..] {
            out[n] = b'0' + d;
            n += 1;
        }
    }
    HeaderValue::from_bytes(&out[..n]).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// What a request says about its client for the forwarding headers.
#[derive(Debug, Clone, Copy)]
pub struct Forwarding {
    /// Append the client to `X-Forwarded-For`.
    pub xff: bool,
    /// Set `X-Forwarded-Proto`.
    pub xfp: bool,
    /// Append a `Forwarded` element.
    pub forwarded: bool,
}

/// Adds the forwarding headers for a request from `client` received over `proto` for `host`.
pub fn add_forwarding(
    headers: &mut HeaderMap,
    f: Forwarding,
    client: &Client,
    proto: &'static str,
    host: Option<&str>,
) {
    if f.xff {
        if headers.contains_key(&X_FORWARDED_FOR) {
            // Several XFF fields are one list (RFC 9110 §5.3): join them, then append.
            let joined = join(headers, &X_FORWARDED_FOR, client.xff.to_str().unwrap_or(""));
            if let Ok(v) = HeaderValue::from_str(&joined) {
                headers.insert(X_FORWARDED_FOR.clone(), v);
            }
        } else {
            headers.insert(X_FORWARDED_FOR.clone(), client.xff.clone());
        }
    }
    if f.xfp {
        headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(proto));
    }
    if f.forwarded {
        // RFC 7239 §6: an IPv6 node is quoted and bracketed.
        let node = match client.ip {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("\"[{a}]\""),
        };
        let mut element = format!("for={node};proto={proto}");
        if let Some(h) = host.filter(|h| h.bytes().all(|b| b.is_ascii_graphic() && b != b'"')) {
            element.push_str(&format!(";host=\"{h}\""));
        }
        let joined = join(headers, &header::FORWARDED, &element);
        if let Ok(v) = HeaderValue::from_str(&joined) {
            headers.insert(header::FORWARDED, v);
        }
    }
}

fn join(headers: &HeaderMap, name: &HeaderName, last: &str) -> String {
    let mut out = String::new();
    for v in headers.get_all(name).iter() {
        if let Ok(s) = v.to_str() {
            if !s.trim().is_empty() {
                out.push_str(s.trim());
                out.push_str(", ");
            }
        }
    }
    out.push_str(last);
    out
}

/// `X-Forwarded-For`.
pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// What header rule values can name of a request ([`ValuePart`]).
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The client (the PROXY header's, when the virtual server takes them).
    pub client: std::net::SocketAddr,
    /// The request's ID, when the virtual server makes them.
    pub request_id: Option<&'a HeaderValue>,
    /// The virtual server's name.
    pub virtual_server: &'a str,
    /// `http` or `https`.
    pub scheme: &'a str,
}

/// A header rule's value: fixed, or filled per request.
#[derive(Debug, Clone)]
enum Value {
    Fixed(HeaderValue),
    Filled(Vec<ValuePart>),
}

impl Value {
    fn new(t: &HeaderValueTemplate) -> Option<Value> {
        Some(match t.as_text() {
            Some(text) => Value::Fixed(HeaderValue::from_str(&text).ok()?),
            None => Value::Filled(t.0.clone()),
        })
    }

    fn get(&self, facts: &Facts<'_>) -> Option<HeaderValue> {
        let parts = match self {
            Value::Fixed(v) => return Some(v.clone()),
            Value::Filled(parts) => parts,
        };
        let mut out = String::new();
        for p in parts {
            use std::fmt::Write as _;
            let _ = match p {
                ValuePart::Text(t) => write!(out, "{t}"),
                ValuePart::ClientIp => write!(out, "{}", facts.client.ip()),
                ValuePart::ClientPort => write!(out, "{}", facts.client.port()),
                ValuePart::RequestId => {
                    write!(
                        out,
                        "{}",
                        facts.request_id.and_then(|v| v.to_str().ok()).unwrap_or("")
                    )
                }
                ValuePart::VirtualServer => write!(out, "{}", facts.virtual_server),
                ValuePart::Scheme => write!(out, "{}", facts.scheme),
            };
        }
        HeaderValue::from_str(&out).ok()
    }
}

/// A virtual server's header rules, compiled.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    remove: Vec<HeaderName>,
    set: Vec<(HeaderName, Value)>,
    add: Vec<(HeaderName, Value)>,
    replace: Vec<(HeaderName, headway_config::adc::Pattern, String)>,
}

impl Rules {
    /// Compiles validated rules (names and values were checked by the config).
    pub fn new(r: &HeaderRules) -> Self {
        let name = |n: &str| HeaderName::from_bytes(n.as_bytes()).ok();
        let pair = |(n, v): &(String, HeaderValueTemplate)| Some((name(n)?, Value::new(v)?));
        Rules {
            remove: r.remove.iter().filter_map(|n| name(n)).collect(),
            set: r.set.iter().filter_map(pair).collect(),
            add: r.add.iter().filter_map(pair).collect(),
            replace: r
                .replace
                .iter()
                .filter_map(|x| Some((name(&x.name)?, x.from.clone(), x.to.clone())))
                .collect(),
        }
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty()
            && self.set.is_empty()
            && self.add.is_empty()
            && self.replace.is_empty()
    }

    /// Removes, then rewrites, then sets, then adds, filling values from `facts`.
    pub fn apply(&self, headers: &mut HeaderMap, facts: &Facts<'_>) {
        for n in &self.remove {
            headers.remove(n);
        }
        for (n, from, to) in &self.replace {
            let http::header::Entry::Occupied(mut values) = headers.entry(n) else {
                continue;
            };
            for v in values.iter_mut() {
                let Ok(text) = v.to_str() else { continue };
                if let std::borrow::Cow::Owned(out) = from.0.replace(text, to.as_str()) {
                    if let Ok(out) = HeaderValue::from_str(&out) {
                        *v = out;
                    }
                }
            }
        }
        for (n, v) in &self.set {
            if let Some(v) = v.get(facts) {
                headers.insert(n.clone(), v);
            }
        }
        for (n, v) in &self.add {
            if let Some(v) = v.get(facts) {
                headers.append(n.clone(), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }

    #[test]
    fn upgrades_a_tunnel_carries_are_told_from_the_others() {
        let asked = |pairs: &[(&str, &str)]| {
            upgrade_asked(&map(pairs)).map(|v| v.to_str().unwrap().to_string())
        };
        let ws = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ];
        assert_eq!(asked(&ws).as_deref(), Some("websocket"));
        // Versions and lists pass as the client wrote them.
        assert_eq!(
            asked(&[("connection", "upgrade"), ("upgrade", "h2c, WebSocket/13")]).as_deref(),
            Some("h2c, WebSocket/13")
        );
        // Cleartext HTTP/2 alone is never tunnelled, in any case or version.
        assert_eq!(
            asked(&[("connection", "upgrade"), ("upgrade", "h2c")]),
            None
        );
        assert_eq!(
            asked(&[("connection", "upgrade"), ("upgrade", " H2C/2 , ")]),
            None
        );
        // `Connection` must list `upgrade`; one `Upgrade` field; a name in it.
        assert_eq!(asked(&[("upgrade", "websocket")]), None);
        assert_eq!(
            asked(&[("connection", "close"), ("upgrade", "websocket")]),
            None
        );
        assert_eq!(
            asked(&[
                ("connection", "upgrade"),
                ("upgrade", "websocket"),
                ("upgrade", "x")
            ]),
            None
        );
        assert_eq!(
            asked(&[("connection", "upgrade"), ("upgrade", " , ")]),
            None
        );
        // Two `Connection` fields count as one list.
        assert_eq!(
            asked(&[
                ("connection", "keep-alive"),
                ("connection", "upgrade"),
                ("upgrade", "x")
            ])
            .as_deref(),
            Some("x")
        );
    }

    #[test]
    fn ipv4_addresses_are_written_as_display_writes_them() {
        for ip in [
            [0, 0, 0, 0],
            [127, 0, 0, 1],
            [10, 20, 100, 255],
            [9, 99, 199, 200],
        ] {
            let ip = std::net::Ipv4Addr::from(ip);
            assert_eq!(ipv4_value(ip), ip.to_string().as_str());
        }
    }

    /// A field value made of tokens that matter to upgrades, and any printable bytes.
    fn field_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::strategy::Strategy as _;
        let token = proptest::prop_oneof![
            proptest::sample::select(vec![
                "upgrade",
                "Upgrade",
                " UPGRADE ",
                "close",
                "keep-alive",
                "websocket",
                "h2c",
                "H2C/2",
                "x",
                "",
                " ",
            ])
            .prop_map(str::to_string),
            "[ -~]{0,12}",
        ];
        proptest::collection::vec(token, 0..4).prop_map(|t| t.join(","))
    }

    proptest::proptest! {
        #[test]
        fn any_ipv4_address_is_written_as_display_writes_it(ip in proptest::prelude::any::<u32>()) {
            let ip = std::net::Ipv4Addr::from(ip);
            let text = ip.to_string();
            proptest::prop_assert_eq!(ipv4_value(ip), text.as_str());
        }

        #[test]
        fn an_upgrade_is_carried_only_as_the_client_asked(
            connection in proptest::collection::vec(field_value(), 0..3),
            upgrade in proptest::collection::vec(field_value(), 0..3),
        ) {
            let mut m = HeaderMap::new();
            for v in &connection {
                m.append(header::CONNECTION, HeaderValue::from_str(v).unwrap());
            }
            for v in &upgrade {
                m.append(header::UPGRADE, HeaderValue::from_str(v).unwrap());
            }
            if let Some(v) = upgrade_asked(&m) {
                // The client's one field, unchanged, and a `Connection` that names it.
                proptest::prop_assert_eq!(upgrade.len(), 1);
                proptest::prop_assert_eq!(v.as_bytes(), upgrade[0].as_bytes());
                proptest::prop_assert!(connection
                    .iter()
                    .any(|c| c.to_ascii_lowercase().contains("upgrade")));
                proptest::prop_assert!(!v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"h2c"));
            }
        }
    }

    #[test]
    fn a_request_closes_when_it_asks_or_is_http_1_0_without_keep_alive() {
        use http::Version;
        let h = |v: &[&str]| {
            let mut m = HeaderMap::new();
            for v in v {
                m.append(header::CONNECTION, HeaderValue::from_str(v).unwrap());
            }
            m
        };
        assert!(!request_closes(Version::HTTP_11, &h(&[])));
        assert!(request_closes(Version::HTTP_11, &h(&["Close"])));
        assert!(request_closes(Version::HTTP_11, &h(&["x-a", "te, close"])));
        assert!(request_closes(Version::HTTP_10, &h(&[])));
        assert!(!request_closes(Version::HTTP_10, &h(&["Keep-Alive"])));
        assert!(request_closes(Version::HTTP_10, &h(&["keep-alive, close"])));
        assert!(!request_closes(Version::HTTP_2, &h(&[])));
    }

    #[test]
    fn only_connection_options_that_are_no_fields_are_left() {
        // Nothing hop-by-hop: untouched.
        let mut h = map(&[("x-a", "1"), ("accept", "*/*")]);
        assert!(!strip_hop_by_hop(&mut h));
        assert_eq!(h.len(), 2);
        // A field named like the `close` option goes too; an upper-case listing matches.
        let mut h = map(&[
            ("connection", "Keep-Alive, X-A"),
            ("x-a", "1"),
            ("close", "x"),
        ]);
        assert!(!strip_hop_by_hop(&mut h));
        assert_eq!(h.len(), 1, "{h:?}");
        let mut h = map(&[("connection", "CLOSE"), ("close", "x"), ("x-b", "2")]);
        assert!(strip_hop_by_hop(&mut h));
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("x-b"));
        // A bare TE is removed without a Connection field.
        let mut h = map(&[("te", "trailers"), ("x-b", "2")]);
        assert!(!strip_hop_by_hop(&mut h));
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn hop_by_hop_and_connection_named_fields_go() {
        let mut h = map(&[
            ("connection", "close, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("x-keep", "1"),
        ]);
        assert!(strip_hop_by_hop(&mut h));
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-keep"));
    }

    #[test]
    fn forwarding_headers_append_to_existing_lists() {
        let mut h = map(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "2.2.2.2"),
        ]);
        add_forwarding(
            &mut h,
            Forwarding {
                xff: true,
                xfp: true,
                forwarded: true,
            },
            &Client::new("::ffff:10.0.0.9".parse().unwrap()),
            "http",
            Some("www.example"),
        );
        assert_eq!(h["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 10.0.0.9");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(
            h["forwarded"],
            "for=10.0.0.9;proto=http;host=\"www.example\""
        );
        let mut h = HeaderMap::new();
        add_forwarding(
            &mut h,
            Forwarding {
                xff: false,
                xfp: false,
                forwarded: true,
            },
            &Client::new("2001:db8::1".parse().unwrap()),
            "http",
            None,
        );
        assert_eq!(h["forwarded"], "for=\"[2001:db8::1]\";proto=http");
        assert!(!h.contains_key("x-forwarded-for"));
    }

    fn facts(id: Option<&HeaderValue>) -> Facts<'_> {
        Facts {
            client: "[2001:db8::7]:40000".parse().unwrap(),
            request_id: id,
            virtual_server: "web",
            scheme: "https",
        }
    }

    fn template(t: &str) -> HeaderValueTemplate {
        HeaderValueTemplate::parse(t).unwrap()
    }

    #[test]
    fn rules_remove_then_set_then_add() {
        let r = Rules::new(&HeaderRules {
            remove: vec!["server".into()],
            set: vec![("x-env".into(), template("lab"))],
            add: vec![("x-tag".into(), template("b"))],
            replace: Vec::new(),
        });
        let mut h = map(&[("server", "x"), ("x-env", "prod"), ("x-tag", "a")]);
        r.apply(&mut h, &facts(None));
        assert!(!h.contains_key("server"));
        assert_eq!(h["x-env"], "lab");
        assert_eq!(h.get_all("x-tag").iter().count(), 2);
    }

    #[test]
    fn replace_rewrites_every_value_of_its_header_and_leaves_bad_results_alone() {
        let rewrite = |name: &str, from: &str, to: &str| headway_config::adc::HeaderReplace {
            name: name.into(),
            from: headway_config::adc::Pattern(regex::Regex::new(from).unwrap()),
            to: to.into(),
        };
        let r = Rules::new(&HeaderRules {
            remove: Vec::new(),
            set: Vec::new(),
            add: Vec::new(),
            replace: vec![
                rewrite("location", "^http://app:8080/", "https://www.example/api/"),
                rewrite("x-multi", "a(\\d)", "b$1"),
                rewrite("x-bad", "x", "\n"),
            ],
        });
        assert!(!r.is_empty());
        let mut h = map(&[
            ("location", "http://app:8080/login?next=/"),
            ("x-multi", "a1 a2"),
            ("x-bad", "x"),
        ]);
        h.append("x-multi", HeaderValue::from_static("a3"));
        r.apply(&mut h, &facts(None));
        assert_eq!(h["location"], "https://www.example/api/login?next=/");
        let multi: Vec<_> = h.get_all("x-multi").iter().collect();
        // The first match of each value.
        assert_eq!(multi, ["b1 a2", "b3"]);
        assert_eq!(h["x-bad"], "x");
        // No such header: nothing added.
        let mut h = map(&[]);
        r.apply(&mut h, &facts(None));
        assert!(h.is_empty());
    }

    #[test]
    fn values_are_filled_from_the_requests_facts() {
        let r = Rules::new(&HeaderRules {
            remove: Vec::new(),
            set: vec![
                ("x-real-ip".into(), template("{client_ip}")),
                (
                    "x-via".into(),
                    template("{scheme}://{virtual_server} {client_port} {{{request_id}}}"),
                ),
            ],
            add: Vec::new(),
            replace: Vec::new(),
        });
        let id = HeaderValue::from_static("0af3");
        let mut h = map(&[("x-real-ip", "203.0.113.1")]);
        r.apply(&mut h, &facts(Some(&id)));
        assert_eq!(h["x-real-ip"], "2001:db8::7");
        assert_eq!(h["x-via"], "https://web 40000 {0af3}");
        let mut h = map(&[]);
        r.apply(&mut h, &facts(None));
        assert_eq!(h["x-via"], "https://web 40000 {}");
    }
}
