//! The values of header rules (`[virtual_server.request_headers]` / `response_headers`): text
//! with placeholders for what is known of each request — `{client_ip}` (NGINX's
//! `X-Real-IP $remote_addr`), `{client_port}`, `{request_id}`, `{virtual_server}` and
//! `{scheme}`. `{{` and `}}` write a brace. Parsed and checked here; the proxy fills them.

use std::fmt;

/// One piece of a header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValuePart {
    /// Text as written.
    Text(String),
    /// The client's IP address (the PROXY header's, when the virtual server takes them).
    ClientIp,
    /// The client's port.
    ClientPort,
    /// The request's ID (the virtual server's `request_id`).
    RequestId,
    /// The virtual server's name.
    VirtualServer,
    /// `http` or `https`.
    Scheme,
}

/// The placeholders, as written, and what they stand for.
const PLACEHOLDERS: [(&str, ValuePart); 5] = [
    ("client_ip", ValuePart::ClientIp),
    ("client_port", ValuePart::ClientPort),
    ("request_id", ValuePart::RequestId),
    ("virtual_server", ValuePart::VirtualServer),
    ("scheme", ValuePart::Scheme),
];

/// A header rule's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderValueTemplate(pub Vec<ValuePart>);

impl HeaderValueTemplate {
    /// Parses a value (visible ASCII and spaces, checked by the caller); `Err` says what is
    /// wrong and how to write it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if rest.starts_with("{{") || rest.starts_with("}}") {
                lit.push(c);
                rest = &rest[2..];
            } else if c == '{' {
                let Some(end) = rest.find('}') else {
                    return Err(format!(
                        "`{{` without `}}` in `{text}`: write `{{{{` for a brace"
                    ));
                };
                let name = &rest[1..end];
                let Some((_, part)) = PLACEHOLDERS.iter().find(|(n, _)| *n == name) else {
                    let known: Vec<String> = PLACEHOLDERS
                        .iter()
                        .map(|(n, _)| format!("{{{n}}}"))
                        .collect();
                    return Err(format!(
                        "unknown placeholder `{{{name}}}` in `{text}`: use {}, or `{{{{` for a \
                         brace",
                        known.join(", ")
                    ));
                };
                if !lit.is_empty() {
                    parts.push(ValuePart::Text(std::mem::take(&mut lit)));
                }
                parts.push(part.clone());
                rest = &rest[end + 1..];
            } else if c == '}' {
                return Err(format!(
                    "`}}` without `{{` in `{text}`: write `}}}}` for a brace"
                ));
            } else {
                lit.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        if !lit.is_empty() {
            parts.push(ValuePart::Text(lit));
        }
        Ok(HeaderValueTemplate(parts))
    }

    /// The value, when it has no placeholder.
    pub fn as_text(&self) -> Option<String> {
        self.0
            .iter()
            .map(|p| match p {
                ValuePart::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Whether it holds `part`.
    pub fn uses(&self, part: &ValuePart) -> bool {
        self.0.contains(part)
    }
}

impl fmt::Display for HeaderValueTemplate {
    /// As it would be written in the config file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.0 {
            match p {
                ValuePart::Text(t) => f.write_str(&t.replace('{', "{{").replace('}', "}}"))?,
                other => {
                    let (name, _) = PLACEHOLDERS
                        .iter()
                        .find(|(_, q)| q == other)
                        .expect("every placeholder has a name");
                    write!(f, "{{{name}}}")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn placeholders_and_braces() {
        let t =
            HeaderValueTemplate::parse("for={client_ip}:{client_port}; id={request_id}").unwrap();
        assert_eq!(
            t.0,
            [
                ValuePart::Text("for=".into()),
                ValuePart::ClientIp,
                ValuePart::Text(":".into()),
                ValuePart::ClientPort,
                ValuePart::Text("; id=".into()),
                ValuePart::RequestId,
            ]
        );
        assert!(t.uses(&ValuePart::RequestId));
        assert_eq!(t.as_text(), None);
        let plain = HeaderValueTemplate::parse("{{\"a\": 1}}").unwrap();
        assert_eq!(plain.as_text().as_deref(), Some("{\"a\": 1}"));
        assert_eq!(plain.to_string(), "{{\"a\": 1}}");
        assert_eq!(
            HeaderValueTemplate::parse("").unwrap().as_text().as_deref(),
            Some("")
        );
    }

    #[test]
    fn mistakes_say_how_to_write_it() {
        for (text, says) in [
            ("{client}", "unknown placeholder `{client}`"),
            ("{remote_addr}", "use {client_ip}, {client_port}"),
            ("{client_ip", "without `}`"),
            ("a}b", "without `{`"),
        ] {
            let e = HeaderValueTemplate::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    proptest! {
        #[test]
        fn what_parses_prints_back_to_itself(s in "[ -~]{0,40}") {
            if let Ok(t) = HeaderValueTemplate::parse(&s) {
                prop_assert_eq!(HeaderValueTemplate::parse(&t.to_string()).unwrap(), t);
            }
        }
    }
}
