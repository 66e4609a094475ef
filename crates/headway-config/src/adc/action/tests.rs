use proptest::prelude::*;

use super::*;
use crate::Config;

const GROUP: &str =
    "[[server_group]]\nname = \"web\"\n[[server_group.server]]\naddress = \"127.0.0.1:8080\"\n";

/// A file with one `http` virtual server whose own part is `vs` (after `listen`).
fn file(vs: &str) -> String {
    format!(
        "{GROUP}[[virtual_server]]\nname = \"front\"\nkind = \"http\"\nlisten = \
         \"127.0.0.1:8000\"\n{vs}"
    )
}

fn parse(text: &str) -> Config {
    Config::parse(text, "adc.toml").unwrap_or_else(|e| panic!("{e}"))
}

/// Asserts the error is on `line` and its message contains each of `parts`.
fn assert_err(text: &str, line: usize, parts: &[&str]) {
    let e = match Config::parse(text, "adc.toml") {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e,
    };
    assert_eq!(e.location().and_then(|l| l.line), Some(line), "{e}");
    for p in parts {
        assert!(e.to_string().contains(p), "`{p}` not in: {e}");
    }
}

fn target<'a>(host: Option<&'a str>, path: &'a str, query: Option<&'a str>) -> RequestTarget<'a> {
    RequestTarget {
        scheme: "http",
        host,
        path,
        query,
    }
}

#[test]
fn a_virtual_server_may_redirect_or_respond_instead_of_naming_a_group() {
    let c = parse(&file(
        "redirect = { location = \"https://{host}{uri}\", status = 301 }\n",
    ));
    let vs = &c.adc.virtual_servers[0];
    let Action::Redirect(r) = &vs.action else {
        panic!("{:?}", vs.action)
    };
    assert_eq!(r.status, 301);
    assert_eq!(
        r.parts,
        vec![
            LocationPart::Text("https://".into()),
            LocationPart::Host,
            LocationPart::Uri
        ]
    );
    assert_eq!(vs.action.to_string(), "redirect 301 https://{host}{uri}");
    assert_eq!(vs.action.group(), None);

    let c = parse(&file("respond = { status = 503 }\n"));
    assert_eq!(
        c.adc.virtual_servers[0].action,
        Action::Respond(Respond {
            status: 503,
            body: "Service Unavailable\n".into(),
            content_type: "text/plain; charset=utf-8".into(),
        })
    );
    let c = parse(&file(
        "respond = { status = 200, body = \"<p>ok</p>\", content_type = \"text/html; charset=utf-8\" }\n",
    ));
    let Action::Respond(r) = &c.adc.virtual_servers[0].action else {
        panic!()
    };
    assert_eq!(
        (r.body.as_str(), r.content_type.as_str()),
        ("<p>ok</p>", "text/html; charset=utf-8")
    );
    let c = parse(&file("respond = { status = 204 }\n"));
    let Action::Respond(r) = &c.adc.virtual_servers[0].action else {
        panic!()
    };
    assert_eq!(r.body, "");
}

#[test]
fn rules_redirect_and_respond_beside_rules_that_name_groups() {
    let c = parse(&file(
        "group = \"web\"\n[[virtual_server.rule]]\nname = \"old\"\npath_prefix = \"/old/\"\n\
         redirect = { location = \"/new{query}\" }\n[[virtual_server.rule]]\nname = \"admin\"\n\
         path_prefix = \"/admin\"\nrespond = { status = 403, body = \"no\" }\n\
         [[virtual_server.rule]]\npath = \"/x\"\ngroup = \"web\"\n",
    ));
    let rules = &c.adc.virtual_servers[0].rules;
    assert!(matches!(&rules[0].action, Action::Redirect(r) if r.status == 302));
    assert!(matches!(&rules[1].action, Action::Respond(r) if r.status == 403 && r.body == "no"));
    assert_eq!(rules[2].action, Action::Group("web".into()));
    assert_eq!(rules[1].action.to_string(), "respond 403");
}

#[test]
fn exactly_one_action_is_required() {
    assert_err(
        &file(""),
        6,
        &[
            "virtual server `front` says nothing about where its requests go",
            "group = ",
        ],
    );
    assert_err(
        &file("group = \"web\"\nrespond = { status = 503 }\n"),
        10,
        &["has both `group` and `respond`", "keep one"],
    );
    assert_err(
        &file(
            "group = \"web\"\n[[virtual_server.rule]]\nname = \"r\"\npath = \"/\"\n\
             redirect = { location = \"/a\" }\nrespond = { status = 404 }\n",
        ),
        14,
        &["rule `r` has both `redirect` and `respond`"],
    );
    assert_err(
        &file("group = \"web\"\n[[virtual_server.rule]]\npath = \"/\"\n"),
        11,
        &["rule `rule-1` says nothing about where its requests go"],
    );
}

#[test]
fn bad_redirects_and_responses_are_refused_with_the_fix() {
    let cases: &[(&str, &[&str])] = &[
        (
            "redirect = { location = \"https://{host}{uri}\", status = 200 }",
            &["status 200 is not a redirect", "301, 302, 303, 307 or 308"],
        ),
        (
            "redirect = { location = \"https://{hots}{uri}\" }",
            &["unknown placeholder `{hots}`", "{host}"],
        ),
        (
            "redirect = { location = \"https://{host\" }",
            &["`{` without `}`"],
        ),
        (
            "redirect = { location = \"https://a b\" }",
            &["percent-encode"],
        ),
        (
            "redirect = { location = \"example.com{uri}\" }",
            &["must be an absolute http:// or https:// URL or a path"],
        ),
        (
            "redirect = { location = \"https://\" }",
            &["must be an absolute"],
        ),
        (
            "redirect = { location = \"//evil.example{uri}\" }",
            &["starts with `//`"],
        ),
        (
            "respond = { status = 99 }",
            &["respond status 99 is out of range"],
        ),
        (
            "respond = { status = 101 }",
            &["respond status 101 is out of range"],
        ),
        (
            "respond = { status = 304, body = \"x\" }",
            &["a 304 response has no body"],
        ),
        (
            "respond = { status = 200, content_type = \"html\" }",
            &["not a media type"],
        ),
    ];
    for (line, parts) in cases {
        assert_err(&file(&format!("{line}\n")), 9, parts);
    }
    let big = "x".repeat(MAX_RESPOND_BODY + 1);
    assert_err(
        &file(&format!("respond = {{ status = 200, body = \"{big}\" }}\n")),
        9,
        &["at most 64 KiB"],
    );
    // A tcp virtual server cannot answer HTTP itself.
    let tcp = file("respond = { status = 503 }\n").replace("kind = \"http\"", "kind = \"tcp\"");
    assert_err(
        &tcp,
        9,
        &["is `tcp`", "`redirect` or `respond`", "give it a `group`"],
    );
}

#[test]
fn a_redirect_fills_its_template_from_the_request() {
    let r = |t: &str| Redirect {
        status: 302,
        template: t.into(),
        parts: parse_template(t).unwrap(),
    };
    let to_https = r("https://{host}{uri}");
    assert_eq!(
        to_https.location(&target(Some("www.example.com"), "/a/b", Some("x=1&y"))),
        Ok("https://www.example.com/a/b?x=1&y".into())
    );
    assert_eq!(
        to_https.location(&target(Some("[::1]"), "/", None)),
        Ok("https://[::1]/".into())
    );
    assert_eq!(
        to_https.location(&target(None, "/", None)),
        Err(LocationError::NoHost)
    );
    assert_eq!(
        to_https.location(&target(Some("evil.example/x?"), "/", None)),
        Err(LocationError::BadHost)
    );
    assert_eq!(
        to_https.location(&target(Some(""), "/", None)),
        Err(LocationError::BadHost)
    );
    // Without {host}, a request without one is redirected all the same.
    assert_eq!(
        r("{scheme}://www.example.com{path}{query}").location(&target(None, "/p", Some(""))),
        Ok("http://www.example.com/p?".into())
    );
    assert_eq!(
        r("/maintenance.html").location(&target(None, "/p", Some("q"))),
        Ok("/maintenance.html".into())
    );
}

proptest! {
    /// A filled template is the template with each placeholder replaced, and a valid header
    /// value whenever the request's parts are (the proxy sends it as `Location`).
    #[test]
    fn filled_templates_are_the_template_with_its_placeholders_replaced(
        pieces in proptest::collection::vec(
            prop_oneof![
                "[a-zA-Z0-9/.:%?=&_-]{1,8}",
                Just("{scheme}".to_string()),
                Just("{host}".to_string()),
                Just("{path}".to_string()),
                Just("{query}".to_string()),
                Just("{uri}".to_string()),
            ],
            0..8,
        ),
        host in "[a-z0-9.-]{1,20}",
        path in "/[a-zA-Z0-9/._~%-]{0,20}",
        query in proptest::option::of("[a-zA-Z0-9=&%._-]{0,12}"),
    ) {
        let template: String = std::iter::once("https://".to_string()).chain(pieces).collect();
        let parts = parse_template(&template).unwrap();
        let r = Redirect { status: 301, template: template.clone(), parts };
        let q = query.as_deref().map(|q| format!("?{q}")).unwrap_or_default();
        let expected = template
            .replace("{scheme}", "https")
            .replace("{host}", &host)
            .replace("{uri}", &format!("{path}{q}"))
            .replace("{path}", &path)
            .replace("{query}", &q);
        let t = RequestTarget { scheme: "https", host: Some(&host), path: &path, query: query.as_deref() };
        let got = r.location(&t).unwrap();
        prop_assert_eq!(&got, &expected);
        prop_assert!(http::HeaderValue::from_str(&got).is_ok());
    }

    /// Any text either parses or is refused with a message; it never panics, and what parses
    /// holds no space or control character.
    #[test]
    fn any_template_parses_or_is_refused(t in "\\PC{0,40}") {
        if let Ok(parts) = parse_template(&t) {
            for p in parts {
                if let LocationPart::Text(s) = p {
                    prop_assert!(s.bytes().all(|b| b.is_ascii_graphic()));
                }
            }
        }
    }
}
