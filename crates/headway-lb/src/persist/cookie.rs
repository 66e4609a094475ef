//! Inserted-cookie persistence: the cookie value codec and the cookie's attributes.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::str::FromStr;
use std::time::Duration;

/// Length in characters of every cookie value [`CookieCodec::encode`] produces: 32 lowercase
/// hex digits (128 bits).
pub const COOKIE_VALUE_LEN: usize = 32;

/// Bytes of keyed hash kept in a cookie value.
const TAG_LEN: usize = COOKIE_VALUE_LEN / 2;

/// The BLAKE3 key-derivation context for cookie keys; changing it changes every cookie.
const CONTEXT: &str = "headway-lb 2026 persistence cookie v1";

/// Turns a server's stable key into the value of the persistence cookie that names it.
///
/// The value is the keyed BLAKE3 hash of the server key, truncated to 128 bits and written as
/// 32 lowercase hex digits ([`COOKIE_VALUE_LEN`]). The hash key is derived from a 32-byte
/// deployment secret (`blake3::derive_key`, so the same secret can serve other purposes without
/// the outputs being related). So:
///
/// - the value reveals nothing about the server (not its address, name or position), and the
///   same server gets the same value from every appliance sharing the secret and across
///   restarts, so clients keep their server through a failover or an upgrade;
/// - without the secret, a client cannot compute the value of a server it was never sent to:
///   guessing one succeeds with probability n / 2^128 for a pool of n servers. (A client can
///   of course replay a value it was given, which is what persistence is for.)
///
/// The server key should be stable and unique within the deployment, e.g. `"pool/server-name"`
/// or the server's configured address; it never leaves the appliance.
///
/// Decoding is not a hash inversion: the caller builds a [`CookieTable`] from the current
/// servers (once per configuration or membership change) and looks values up in it in O(1).
/// `Debug` does not print the key.
#[derive(Clone)]
pub struct CookieCodec {
    key: [u8; 32],
}

impl CookieCodec {
    /// A codec keyed by the deployment's secret.
    pub fn new(secret: [u8; 32]) -> Self {
        Self {
            key: blake3::derive_key(CONTEXT, &secret),
        }
    }

    /// The cookie value for the server with stable key `server_key`.
    pub fn encode(&self, server_key: &str) -> String {
        let tag = self.tag(server_key);
        let mut out = String::with_capacity(COOKIE_VALUE_LEN);
        for b in tag {
            // writing to a String cannot fail
            let _ = write!(out, "{b:02x}");
        }
        out
    }

    fn tag(&self, server_key: &str) -> [u8; TAG_LEN] {
        let hash = blake3::keyed_hash(&self.key, server_key.as_bytes());
        let mut tag = [0; TAG_LEN];
        tag.copy_from_slice(&hash.as_bytes()[..TAG_LEN]);
        tag
    }
}

impl fmt::Debug for CookieCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CookieCodec { .. }")
    }
}

/// The two-way map between the current servers and their cookie values.
///
/// Built with [`CookieTable::new`] whenever the pool's membership changes (it is cheap: one hash
/// per server) and shared read-only between requests. Both directions are one hash-map lookup;
/// [`CookieTable::server`] allocates nothing.
#[derive(Debug, Clone, Default)]
pub struct CookieTable {
    by_tag: HashMap<[u8; TAG_LEN], u32>,
    by_server: HashMap<u32, String>,
}

impl CookieTable {
    /// The table for `servers`, given as `(stable key, server id)`. Keys and ids should be
    /// unique; if one repeats, the later pair wins for that key or id.
    pub fn new<'a>(codec: &CookieCodec, servers: impl IntoIterator<Item = (&'a str, u32)>) -> Self {
        let mut table = Self::default();
        for (key, id) in servers {
            let tag = codec.tag(key);
            table.by_tag.insert(tag, id);
            table.by_server.insert(id, hex(&tag));
        }
        table
    }

    /// The server named by a cookie value read from a request; `None` for a value that is not
    /// exactly [`COOKIE_VALUE_LEN`] lowercase hex digits or names no current server.
    pub fn server(&self, value: &[u8]) -> Option<u32> {
        let tag = unhex(value)?;
        self.by_tag.get(&tag).copied()
    }

    /// The cookie value that names `server`, to put in `Set-Cookie`.
    pub fn value(&self, server: u32) -> Option<&str> {
        self.by_server.get(&server).map(String::as_str)
    }

    /// How many servers the table names.
    pub fn len(&self) -> usize {
        self.by_server.len()
    }

    /// Whether the table names no server.
    pub fn is_empty(&self) -> bool {
        self.by_server.is_empty()
    }
}

fn hex(tag: &[u8; TAG_LEN]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    tag.iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]])
        .map(char::from)
        .collect()
}

fn unhex(value: &[u8]) -> Option<[u8; TAG_LEN]> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    if value.len() != COOKIE_VALUE_LEN {
        return None;
    }
    let mut tag = [0; TAG_LEN];
    for (out, pair) in tag.iter_mut().zip(value.chunks_exact(2)) {
        *out = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(tag)
}

/// The `SameSite` attribute of a cookie.
///
/// [`FromStr`] takes `strict`, `lax` or `none` in any case; [`Display`](fmt::Display) writes the
/// attribute value (`Strict`, `Lax`, `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SameSite {
    /// Sent only with same-site requests.
    Strict,
    /// Sent with same-site requests and top-level cross-site navigations (browsers' default).
    Lax,
    /// Sent with every request; browsers require `Secure` with it.
    None,
}

impl fmt::Display for SameSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SameSite::Strict => "Strict",
            SameSite::Lax => "Lax",
            SameSite::None => "None",
        })
    }
}

impl FromStr for SameSite {
    type Err = SameSiteError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [SameSite::Strict, SameSite::Lax, SameSite::None]
            .into_iter()
            .find(|v| v.to_string().eq_ignore_ascii_case(s))
            .ok_or_else(|| SameSiteError::Unknown(s.to_owned()))
    }
}

/// Why a `SameSite` value did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SameSiteError {
    /// Not `strict`, `lax` or `none`.
    #[error("unknown SameSite value {0:?} (expected strict, lax or none)")]
    Unknown(String),
}

/// The persistence cookie's name and attributes (RFC 6265 §4.1).
///
/// Fields are public so the config layer can fill them; it should call
/// [`CookieSpec::validate`] once when it converts the config, since the rendering and matching
/// methods assume a valid spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieSpec {
    /// The cookie name: a non-empty RFC 9110 token (letters, digits, ``!#$%&'*+-.^_`|~``).
    /// Cookie names are case-sensitive.
    pub name: String,
    /// The `Path` attribute: `/` or longer, starting with `/`; `None` omits it (the browser then
    /// uses the request path's directory, which is rarely what persistence wants).
    pub path: Option<String>,
    /// The `Max-Age` attribute in whole seconds, rounded up (so a sub-second age does not become
    /// `Max-Age=0`, which deletes the cookie); `None` makes a session cookie.
    pub max_age: Option<Duration>,
    /// Adds `Secure` (send over HTTPS only).
    pub secure: bool,
    /// Adds `HttpOnly` (hidden from scripts).
    pub http_only: bool,
    /// The `SameSite` attribute; `None` omits it.
    pub same_site: Option<SameSite>,
}

impl CookieSpec {
    /// A session cookie named `name` with `Path=/`, `HttpOnly` and `SameSite=Lax`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            path: Some("/".to_owned()),
            max_age: None,
            secure: false,
            http_only: true,
            same_site: Some(SameSite::Lax),
        }
    }

    /// Checks the name and path can be written into a header as they are, and that
    /// `SameSite=None` comes with `Secure`.
    pub fn validate(&self) -> Result<(), CookieSpecError> {
        // RFC 6265 §4.1.1: cookie-name = token (RFC 9110 §5.6.2)
        if self.name.is_empty() || !self.name.bytes().all(is_tchar) {
            return Err(CookieSpecError::Name(self.name.clone()));
        }
        // RFC 6265 §4.1.1: path-value = <any CHAR except CTLs or ";">; §5.2.4: a value not
        // starting with "/" is ignored by the browser
        if let Some(path) = &self.path {
            let ok = path.starts_with('/')
                && path.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b';');
            if !ok {
                return Err(CookieSpecError::Path(path.clone()));
            }
        }
        if self.same_site == Some(SameSite::None) && !self.secure {
            return Err(CookieSpecError::SameSiteNoneWithoutSecure);
        }
        Ok(())
    }

    /// The value of a `Set-Cookie` response header that sets this cookie to `value`, e.g.
    /// `srv=3f…9a; Path=/; Max-Age=3600; Secure; HttpOnly; SameSite=Lax`.
    ///
    /// `value` must consist of cookie-octets (RFC 6265 §4.1.1: printable US-ASCII except space,
    /// `"`, `,`, `;` and `\`), as every value from [`CookieTable::value`] does. No `Expires` is
    /// written: it needs the wall clock, and every current browser honours `Max-Age`.
    pub fn set_cookie_value(&self, value: &str) -> String {
        let mut out = String::with_capacity(self.name.len() + value.len() + 64);
        out.push_str(&self.name);
        out.push('=');
        out.push_str(value);
        if let Some(path) = &self.path {
            out.push_str("; Path=");
            out.push_str(path);
        }
        if let Some(age) = self.max_age {
            let secs = age.as_secs() + u64::from(age.subsec_nanos() > 0);
            // writing to a String cannot fail
            let _ = write!(out, "; Max-Age={secs}");
        }
        if self.secure {
            out.push_str("; Secure");
        }
        if self.http_only {
            out.push_str("; HttpOnly");
        }
        if let Some(same_site) = self.same_site {
            let _ = write!(out, "; SameSite={same_site}");
        }
        out
    }

    /// This cookie's value in a request's `Cookie` header value, if present: [`cookie_value`]
    /// with this cookie's name.
    pub fn find_in<'h>(&self, cookie_header: &'h [u8]) -> Option<&'h [u8]> {
        cookie_value(&self.name, cookie_header)
    }
}

/// The value of the cookie `name` in a request's `Cookie` header value, if present.
///
/// Parses `name=value` pairs separated by `;` (RFC 6265 §4.2.1, §5.4), leniently, as servers
/// must: spaces and tabs around names and values are ignored, a value in double quotes is
/// returned without them, pairs without `=` are skipped, and the first pair with the name wins.
/// Any bytes are accepted; nothing panics. With several `Cookie` headers (HTTP/2 sends one per
/// cookie), call this on each in order and take the first hit.
pub fn cookie_value<'h>(name: &str, cookie_header: &'h [u8]) -> Option<&'h [u8]> {
    let name = name.as_bytes();
    for pair in cookie_header.split(|&b| b == b';') {
        let Some(eq) = pair.iter().position(|&b| b == b'=') else {
            continue;
        };
        if trim(&pair[..eq]) != name {
            continue;
        }
        let value = trim(&pair[eq + 1..]);
        return Some(match value {
            [b'"', inner @ .., b'"'] => inner,
            _ => value,
        });
    }
    None
}

/// Why a [`CookieSpec`] is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CookieSpecError {
    /// The name is empty or has a character a token may not have.
    #[error("cookie name {0:?} is not a token (letters, digits and !#$%&'*+-.^_`|~ only)")]
    Name(String),
    /// The path does not start with `/` or has a control character or `;`.
    #[error("cookie path {0:?} must start with '/' and have no control characters or ';'")]
    Path(String),
    /// `SameSite=None` without `Secure`, which browsers reject.
    #[error("cookie with SameSite=None must also be Secure (browsers drop it otherwise)")]
    SameSiteNoneWithoutSecure,
}

/// RFC 9110 §5.6.2 tchar.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `s` without leading and trailing spaces and tabs.
fn trim(s: &[u8]) -> &[u8] {
    let ws = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !ws(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !ws(b)).map_or(start, |i| i + 1);
    &s[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn codec(b: u8) -> CookieCodec {
        CookieCodec::new([b; 32])
    }

    #[test]
    fn values_are_fixed_length_hex_stable_and_keyed() {
        let c = codec(1);
        let v = c.encode("10.0.0.1:8080");
        assert_eq!(v.len(), COOKIE_VALUE_LEN);
        assert!(v
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(c.encode("10.0.0.1:8080"), v);
        assert_ne!(c.encode("10.0.0.2:8080"), v);
        assert_ne!(codec(2).encode("10.0.0.1:8080"), v);
        // pinned: a change here breaks every client's persistence on upgrade
        assert_eq!(codec(0).encode("web/a"), "5017c6565762702a6ca8cdbf3c01405a");
        assert_eq!(format!("{c:?}"), "CookieCodec { .. }");
    }

    #[test]
    fn table_maps_both_ways_and_rejects_anything_else() {
        let c = codec(9);
        let t = CookieTable::new(&c, [("web/a", 1), ("web/b", 2)]);
        assert_eq!(t.len(), 2);
        let a = t.value(1).unwrap().to_owned();
        assert_eq!(a, c.encode("web/a"));
        assert_eq!(t.server(a.as_bytes()), Some(1));
        assert_eq!(t.server(c.encode("web/b").as_bytes()), Some(2));
        assert_eq!(t.server(c.encode("web/c").as_bytes()), None);
        assert_eq!(t.server(codec(8).encode("web/a").as_bytes()), None);
        assert_eq!(t.server(a.to_uppercase().as_bytes()), None);
        assert_eq!(t.server(&a.as_bytes()[1..]), None);
        assert_eq!(t.server(b"1"), None);
        assert_eq!(t.value(3), None);
        assert!(CookieTable::default().is_empty());
    }

    #[test]
    fn set_cookie_renders_every_attribute() {
        let spec = CookieSpec {
            name: "HWSRV".into(),
            path: Some("/app".into()),
            max_age: Some(Duration::from_millis(3_600_001)),
            secure: true,
            http_only: true,
            same_site: Some(SameSite::None),
        };
        spec.validate().unwrap();
        assert_eq!(
            spec.set_cookie_value("abc"),
            "HWSRV=abc; Path=/app; Max-Age=3601; Secure; HttpOnly; SameSite=None"
        );
        let bare = CookieSpec {
            path: None,
            http_only: false,
            same_site: None,
            max_age: Some(Duration::ZERO),
            ..CookieSpec::new("s")
        };
        assert_eq!(bare.set_cookie_value("v"), "s=v; Max-Age=0");
        assert_eq!(
            CookieSpec::new("s").set_cookie_value("v"),
            "s=v; Path=/; HttpOnly; SameSite=Lax"
        );
    }

    #[test]
    fn validate_rejects_what_would_break_the_header() {
        let ok = CookieSpec::new("srv");
        ok.validate().unwrap();
        for name in ["", "a b", "a;b", "a=b", "é", "a\r\nSet-Cookie: x"] {
            let spec = CookieSpec {
                name: name.into(),
                ..ok.clone()
            };
            assert_eq!(spec.validate(), Err(CookieSpecError::Name(name.into())));
        }
        for path in ["", "app", "/a;b", "/a\nb", "/\u{7f}"] {
            let spec = CookieSpec {
                path: Some(path.into()),
                ..ok.clone()
            };
            assert_eq!(spec.validate(), Err(CookieSpecError::Path(path.into())));
        }
        let none = CookieSpec {
            same_site: Some(SameSite::None),
            ..ok.clone()
        };
        assert_eq!(
            none.validate(),
            Err(CookieSpecError::SameSiteNoneWithoutSecure)
        );
        CookieSpec {
            secure: true,
            ..none
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn same_site_parses_any_case() {
        assert_eq!("lax".parse(), Ok(SameSite::Lax));
        assert_eq!("STRICT".parse(), Ok(SameSite::Strict));
        assert_eq!("None".parse(), Ok(SameSite::None));
        assert_eq!(
            "sometimes".parse::<SameSite>(),
            Err(SameSiteError::Unknown("sometimes".into()))
        );
    }

    #[test]
    fn find_in_handles_real_headers() {
        let spec = CookieSpec::new("srv");
        let cases: &[(&[u8], Option<&[u8]>)] = &[
            (b"srv=abc", Some(b"abc")),
            (b"a=1; srv=abc; b=2", Some(b"abc")),
            (b"a=1;srv=abc;b=2", Some(b"abc")),
            (b" \tsrv \t= abc \t; b=2", Some(b"abc")),
            (b"srv=\"abc\"", Some(b"abc")),
            (b"srv=\"", Some(b"\"")),
            (b"srv=", Some(b"")),
            (b"srv=a; srv=b", Some(b"a")),
            (b"srvx=1; xsrv=2; SRV=3", None),
            (b"srvx=1; srv=2", Some(b"2")),
            (b"srv; srv=2", Some(b"2")),
            (b"a=srv=1; srv=x=y", Some(b"x=y")),
            (b"", None),
            (b";;;", None),
        ];
        for (header, want) in cases {
            assert_eq!(
                spec.find_in(header),
                *want,
                "{}",
                String::from_utf8_lossy(header)
            );
        }
    }

    fn token() -> impl Strategy<Value = String> {
        "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
    }

    fn cookie_value() -> impl Strategy<Value = String> {
        // RFC 6265 cookie-octets
        "[\\x21\\x23-\\x2B\\x2D-\\x3A\\x3C-\\x5B\\x5D-\\x7E]{0,20}"
    }

    proptest! {
        #[test]
        fn find_in_never_panics(name in token(), header: Vec<u8>) {
            let spec = CookieSpec::new(name);
            if let Some(v) = spec.find_in(&header) {
                prop_assert!(v.len() <= header.len());
            }
        }

        #[test]
        fn find_in_finds_the_first_of_ours_among_others(
            name in token(),
            others in prop::collection::vec((token(), cookie_value()), 0..6),
            ours in prop::collection::vec(cookie_value(), 1..3),
            at in any::<prop::sample::Index>(),
            quote: bool,
        ) {
            let spec = CookieSpec::new(name.clone());
            let mut pairs: Vec<String> = others
                .iter()
                .filter(|(n, _)| *n != name)
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            let at = at.index(pairs.len() + 1);
            for (k, v) in ours.iter().enumerate() {
                let v = if quote { format!("\"{v}\"") } else { v.clone() };
                pairs.insert((at + k).min(pairs.len()), format!("{name}={v}"));
            }
            let header = pairs.join("; ");
            prop_assert_eq!(spec.find_in(header.as_bytes()), Some(ours[0].as_bytes()));
        }

        #[test]
        fn set_cookie_value_reads_back(name in token(), value in cookie_value(), secure: bool) {
            let spec = CookieSpec { secure, ..CookieSpec::new(name) };
            spec.validate().unwrap();
            let header = spec.set_cookie_value(&value);
            // the first pair of Set-Cookie is what the browser sends back in Cookie
            let first = header.split("; ").next().unwrap();
            prop_assert_eq!(spec.find_in(first.as_bytes()), Some(value.as_bytes()));
        }

        #[test]
        fn table_round_trips(keys in prop::collection::hash_set("[ -~]{0,40}", 1..20), secret: [u8; 32]) {
            let c = CookieCodec::new(secret);
            let keys: Vec<String> = keys.into_iter().collect();
            let t = CookieTable::new(&c, keys.iter().enumerate().map(|(i, k)| (k.as_str(), i as u32)));
            for (i, k) in keys.iter().enumerate() {
                let v = c.encode(k);
                prop_assert_eq!(t.value(i as u32), Some(v.as_str()));
                prop_assert_eq!(t.server(v.as_bytes()), Some(i as u32));
            }
        }

        #[test]
        fn table_lookup_never_panics(value: Vec<u8>) {
            let c = codec(3);
            let t = CookieTable::new(&c, [("a", 1)]);
            let _ = t.server(&value);
        }
    }
}
