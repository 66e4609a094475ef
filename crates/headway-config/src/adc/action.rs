//! What a virtual server does with a request: send it to a server group, or answer it itself
//! with a redirect or a fixed response (NetScaler's responder policies, HAProxy's
//! `http-request redirect` and `return`).
//!
//! [`action`] checks a virtual server's or a rule's `group` / `redirect` / `respond` (exactly
//! one of them); [`Redirect::location`] fills a redirect's template for one request. Both are
//! pure; the proxy only writes the answer.

use std::fmt;
use std::ops::Range;

use toml::Spanned;

use crate::config::{invalid, ConfigError};
use crate::file::{Origin, RedirectSection, RespondSection};

/// Largest body of a fixed response.
pub const MAX_RESPOND_BODY: usize = 64 * 1024;

/// What happens to the requests a virtual server's default or a rule receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Sent to this server group (a configured group's name).
    Group(String),
    /// Answered with a redirect.
    Redirect(Redirect),
    /// Answered with a fixed response.
    Respond(Respond),
}

impl Action {
    /// The group's name, for [`Action::Group`].
    pub fn group(&self) -> Option<&str> {
        match self {
            Action::Group(g) => Some(g),
            _ => None,
        }
    }
}

impl fmt::Display for Action {
    /// The group's name, `redirect 301 https://{host}{uri}` or `respond 503`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Group(g) => f.write_str(g),
            Action::Redirect(r) => write!(f, "redirect {} {}", r.status, r.template),
            Action::Respond(r) => write!(f, "respond {}", r.status),
        }
    }
}

/// A redirect the proxy answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// 301, 302, 303, 307 or 308.
    pub status: u16,
    /// The template as written.
    pub template: String,
    /// The template, parsed.
    pub parts: Vec<LocationPart>,
}

/// One piece of a redirect's `location` template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocationPart {
    /// Copied as written.
    Text(String),
    /// `{scheme}`: `http` or `https`.
    Scheme,
    /// `{host}`: the request's host, lower case, without its port.
    Host,
    /// `{path}`: the path as received.
    Path,
    /// `{query}`: `?` and the query, or nothing.
    Query,
    /// `{uri}`: `{path}{query}`.
    Uri,
}

/// What a request gives a redirect's template.
#[derive(Debug, Clone, Copy)]
pub struct RequestTarget<'a> {
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The host, lower case, without its port (`None`: the request names none).
    pub host: Option<&'a str>,
    /// The path as received.
    pub path: &'a str,
    /// The query without its `?` (`None`: there is no `?`).
    pub query: Option<&'a str>,
}

/// Why a redirect cannot be made for a request (answered with 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocationError {
    /// The template needs the host and the request names none.
    NoHost,
    /// The host holds characters a host name cannot.
    BadHost,
}

impl Redirect {
    /// Whether the template uses `{host}`.
    pub fn needs_host(&self) -> bool {
        self.parts.contains(&LocationPart::Host)
    }

    /// The `Location` for a request.
    pub fn location(&self, t: &RequestTarget<'_>) -> Result<String, LocationError> {
        let host = if self.needs_host() {
            let h = t.host.ok_or(LocationError::NoHost)?;
            if h.is_empty() || !h.bytes().all(host_byte) {
                return Err(LocationError::BadHost);
            }
            h
        } else {
            ""
        };
        let mut out = String::with_capacity(self.template.len() + t.path.len() + host.len());
        let query = |out: &mut String| {
            if let Some(q) = t.query {
                out.push('?');
                out.push_str(q);
            }
        };
        for p in &self.parts {
            match p {
                LocationPart::Text(s) => out.push_str(s),
                LocationPart::Scheme => out.push_str(t.scheme),
                LocationPart::Host => out.push_str(host),
                LocationPart::Path => out.push_str(t.path),
                LocationPart::Query => query(&mut out),
                LocationPart::Uri => {
                    out.push_str(t.path);
                    query(&mut out);
                }
            }
        }
        Ok(out)
    }
}

/// A byte a host (name, IPv4 or bracketed IPv6 address) may hold.
fn host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
}

/// A fixed response the proxy answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Respond {
    /// 200–599.
    pub status: u16,
    /// The body (empty for 204 and 304).
    pub body: String,
    /// Its `Content-Type`.
    pub content_type: String,
}

/// The fields of a virtual server or a rule that say what happens to its requests.
pub(crate) struct ActionFields<'a> {
    /// `group`.
    pub group: Option<&'a Spanned<String>>,
    /// `redirect`.
    pub redirect: Option<&'a Spanned<RedirectSection>>,
    /// `respond`.
    pub respond: Option<&'a Spanned<RespondSection>>,
    /// Where to point when none is given (the section's name or first key).
    pub at: Range<usize>,
}

/// Checks `f`: exactly one of `group` (a name in `groups`), `redirect` and `respond`; `what`
/// names the virtual server or rule in messages.
pub(crate) fn action(
    f: &ActionFields<'_>,
    groups: &[&str],
    what: &str,
    origin: &Origin,
) -> Result<Action, ConfigError> {
    let given = [
        f.group.map(|g| ("group", g.span())),
        f.redirect.map(|r| ("redirect", r.span())),
        f.respond.map(|r| ("respond", r.span())),
    ];
    let mut given = given.into_iter().flatten();
    match (given.next(), given.next()) {
        (None, _) => {
            return Err(invalid(
                origin.locate(Some(f.at.clone())),
                format!(
                    "{what} says nothing about where its requests go: add `group = \"NAME\"` \
                     (a [[server_group]]), or answer them with `redirect = {{ location = \
                     \"https://{{host}}{{uri}}\" }}` or `respond = {{ status = 503 }}`"
                ),
            ))
        }
        (Some((a, _)), Some((b, span))) => {
            return Err(invalid(
                origin.locate(Some(span)),
                format!("{what} has both `{a}` and `{b}`: keep one of them"),
            ))
        }
        (Some(_), None) => {}
    }
    if let Some(g) = f.group {
        return crate::adc::reference(g, groups, "server group", "[[server_group]]", origin)
            .map(Action::Group);
    }
    if let Some(r) = f.redirect {
        return redirect(r.get_ref(), what, origin).map(Action::Redirect);
    }
    let r = f.respond.expect("one of the three is given").get_ref();
    respond(r, what, origin).map(Action::Respond)
}

fn redirect(r: &RedirectSection, what: &str, origin: &Origin) -> Result<Redirect, ConfigError> {
    let status = match &r.status {
        None => 302,
        Some(s) if matches!(*s.get_ref(), 301 | 302 | 303 | 307 | 308) => *s.get_ref(),
        Some(s) => {
            return Err(invalid(
                origin.locate(Some(s.span())),
                format!(
                    "{what}: redirect status {} is not a redirect: use 301, 302, 303, 307 or 308",
                    s.get_ref()
                ),
            ))
        }
    };
    let template = r.location.get_ref();
    let at = || origin.locate(Some(r.location.span()));
    let parts = parse_template(template).map_err(|m| invalid(at(), format!("{what}: {m}")))?;
    if let Some(LocationPart::Text(s)) = parts.first() {
        if s.starts_with("//") {
            return Err(invalid(
                at(),
                format!(
                    "{what}: redirect location `{template}` starts with `//`, which browsers \
                     read as another host: write the scheme (\"https://…\") or a single `/`"
                ),
            ));
        }
    }
    if !location_form_ok(&parts) {
        return Err(invalid(
            at(),
            format!(
                "{what}: redirect location `{template}` must be an absolute http:// or https:// \
                 URL or a path starting with `/` (e.g. \"https://{{host}}{{uri}}\")"
            ),
        ));
    }
    Ok(Redirect {
        status,
        template: template.clone(),
        parts,
    })
}

/// Whether a parsed template starts as an absolute `http(s)://` URL with something after the
/// scheme, or as a path (`/…`, not `//…`).
fn location_form_ok(parts: &[LocationPart]) -> bool {
    let more = parts.len() > 1;
    match parts {
        [LocationPart::Text(s), ..] => {
            let lower = s.to_ascii_lowercase();
            let absolute = ["http://", "https://"]
                .iter()
                .any(|p| lower.starts_with(p) && (lower.len() > p.len() || more));
            absolute || (s.starts_with('/') && !s.starts_with("//"))
        }
        [LocationPart::Scheme, LocationPart::Text(s), rest @ ..] => {
            s.starts_with("://") && (s.len() > 3 || !rest.is_empty())
        }
        _ => false,
    }
}

/// Parses a `location` template; the message says what is wrong.
pub fn parse_template(t: &str) -> Result<Vec<LocationPart>, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = t;
    while let Some(c) = rest.chars().next() {
        match c {
            '{' => {
                let Some(end) = rest.find('}') else {
                    return Err(format!("`{{` without `}}` in redirect location `{t}`"));
                };
                let part = match &rest[1..end] {
                    "scheme" => LocationPart::Scheme,
                    "host" => LocationPart::Host,
                    "path" => LocationPart::Path,
                    "query" => LocationPart::Query,
                    "uri" => LocationPart::Uri,
                    other => {
                        return Err(format!(
                            "unknown placeholder `{{{other}}}` in redirect location `{t}`: use \
                             {{scheme}}, {{host}}, {{path}}, {{query}} or {{uri}}"
                        ))
                    }
                };
                if !text.is_empty() {
                    parts.push(LocationPart::Text(std::mem::take(&mut text)));
                }
                parts.push(part);
                rest = &rest[end + 1..];
            }
            '}' => return Err(format!("`}}` without `{{` in redirect location `{t}`")),
            c if c.is_ascii_graphic() => {
                text.push(c);
                rest = &rest[1..];
            }
            _ => {
                return Err(format!(
                    "redirect location `{t}` holds a space, a control character or non-ASCII \
                     text: percent-encode it (`%20`)"
                ))
            }
        }
    }
    if !text.is_empty() {
        parts.push(LocationPart::Text(text));
    }
    Ok(parts)
}

fn respond(r: &RespondSection, what: &str, origin: &Origin) -> Result<Respond, ConfigError> {
    let status = *r.status.get_ref();
    let reason = match http_reason(status) {
        Some(reason) if status >= 200 => reason,
        _ => {
            return Err(invalid(
                origin.locate(Some(r.status.span())),
                format!("{what}: respond status {status} is out of range: use 200 to 599"),
            ))
        }
    };
    let bodiless = matches!(status, 204 | 304);
    let body = match &r.body {
        Some(b) if bodiless => {
            return Err(invalid(
                origin.locate(Some(b.span())),
                format!("{what}: a {status} response has no body: remove `body`"),
            ))
        }
        Some(b) if b.get_ref().len() > MAX_RESPOND_BODY => {
            return Err(invalid(
                origin.locate(Some(b.span())),
                format!(
                    "{what}: the body is {} bytes; at most 64 KiB is served from the config",
                    b.get_ref().len()
                ),
            ))
        }
        Some(b) => b.get_ref().clone(),
        None if bodiless => String::new(),
        None => format!("{reason}\n"),
    };
    let content_type = media_type(&r.content_type, "text/plain; charset=utf-8", what, origin)?;
    Ok(Respond {
        status,
        body,
        content_type,
    })
}

/// A `content_type` field: checked, or `default` when absent; `what` names its owner.
pub(crate) fn media_type(
    field: &Option<Spanned<String>>,
    default: &str,
    what: &str,
    origin: &Origin,
) -> Result<String, ConfigError> {
    match field {
        None => Ok(default.to_string()),
        Some(c) if valid_media_type(c.get_ref()) => Ok(c.get_ref().clone()),
        Some(c) => Err(invalid(
            origin.locate(Some(c.span())),
            format!(
                "{what}: content_type `{}` is not a media type: write it as \
                 \"text/html; charset=utf-8\"",
                c.get_ref()
            ),
        )),
    }
}

/// `type/subtype`, optionally with parameters, in visible ASCII and spaces.
fn valid_media_type(s: &str) -> bool {
    let essence = s.split(';').next().unwrap_or("").trim();
    let ok = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    essence.split_once('/').is_some_and(|(a, b)| ok(a) && ok(b))
        && s.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
}

/// The reason phrase of a status this crate knows (`None`: not a status).
fn http_reason(status: u16) -> Option<&'static str> {
    if !(100..600).contains(&status) {
        return None;
    }
    Some(match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        410 => "Gone",
        429 => "Too Many Requests",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        s if s < 300 => "Success",
        s if s < 400 => "Redirection",
        s if s < 500 => "Client Error",
        _ => "Server Error",
    })
}

#[cfg(test)]
mod tests;
