//! Requests the proxy answers itself, without a server: a virtual server's or a rule's
//! `redirect` (the site's port 80 sending every request to HTTPS, a moved path) and `respond`
//! (a maintenance page, a refusal).
//!
//! [`Target`] is what content switching (`super::route`) picks for a request: a server group or
//! an [`Answer`]. An answer's response is made from the config once (a fixed response's body,
//! its type) or per request from the redirect's template (`headway_config::adc::Redirect`),
//! which is pure and tested there.

use std::sync::Arc;

use bytes::Bytes;
use headway_config::adc::action::LocationError;
use headway_config::adc::{Action, Redirect, RequestTarget};
use http::request::Parts;
use http::{header, HeaderValue, Response, StatusCode};

use super::body::RespBody;
use crate::group::Group;

/// Where content switching sends a request.
#[derive(Debug, Clone)]
pub enum Target {
    /// To a server of this group.
    Group(Arc<Group>),
    /// Nowhere: the proxy answers.
    Answer(Arc<Answer>),
}

impl Target {
    /// The target of `action`, with `find` giving the group of a name the config checked.
    pub fn new(action: &Action, find: impl Fn(&str) -> Arc<Group>) -> Self {
        match action {
            Action::Group(name) => Target::Group(find(name)),
            other => Target::Answer(Arc::new(Answer::new(other))),
        }
    }

    /// The group, when requests go to one.
    pub fn group(&self) -> Option<&Arc<Group>> {
        match self {
            Target::Group(g) => Some(g),
            Target::Answer(_) => None,
        }
    }

    /// The group's name or what the answer is (`redirect 301 https://{host}{uri}`), for the
    /// admin API.
    pub fn describe(&self) -> String {
        match self {
            Target::Group(g) => g.config.name.clone(),
            Target::Answer(a) => a.action.to_string(),
        }
    }
}

/// A redirect or fixed response, ready to be sent.
#[derive(Debug)]
pub struct Answer {
    action: Action,
    status: StatusCode,
    /// A fixed response's body and type.
    fixed: Option<(Bytes, HeaderValue)>,
}

impl Answer {
    /// Prepares `action` (a redirect or a fixed response).
    fn new(action: &Action) -> Self {
        let (status, fixed) = match action {
            Action::Respond(r) => (
                r.status,
                Some((
                    Bytes::from(r.body.clone()),
                    // Checked by the config as a visible-ASCII media type.
                    HeaderValue::from_str(&r.content_type)
                        .unwrap_or(HeaderValue::from_static("text/plain")),
                )),
            ),
            Action::Redirect(r) => (r.status, None),
            Action::Group(_) => (500, None),
        };
        Answer {
            action: action.clone(),
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            fixed,
        }
    }

    /// The response to the request `req` on a virtual server that is `https` or not; a
    /// redirect the request cannot fill (no host, a bad one) is a 400 whose text says why.
    pub fn respond(&self, req: &Parts, https: bool) -> Result<Response<RespBody>, &'static str> {
        if let Some((body, content_type)) = &self.fixed {
            let mut r = Response::new(RespBody::full(body.clone(), None));
            *r.status_mut() = self.status;
            r.headers_mut()
                .insert(header::CONTENT_TYPE, content_type.clone());
            return Ok(r);
        }
        let Action::Redirect(redirect) = &self.action else {
            return Err("this virtual server has no answer configured");
        };
        let location = redirect_location(redirect, req, https)?;
        let mut r = Response::new(RespBody::full(Bytes::new(), None));
        *r.status_mut() = self.status;
        r.headers_mut().insert(header::LOCATION, location);
        Ok(r)
    }
}

/// The `Location` of `redirect` for `req`.
fn redirect_location(
    redirect: &Redirect,
    req: &Parts,
    https: bool,
) -> Result<HeaderValue, &'static str> {
    let host = redirect
        .needs_host()
        .then(|| super::route::host_of(req))
        .flatten();
    let target = RequestTarget {
        scheme: if https { "https" } else { "http" },
        host: host.as_deref(),
        path: req.uri.path(),
        query: req.uri.query(),
    };
    match redirect.location(&target) {
        Ok(l) => HeaderValue::from_str(&l).map_err(|_| "the redirect's location is not valid"),
        Err(LocationError::NoHost) => Err("this redirect needs the request's Host header"),
        Err(LocationError::BadHost) => Err("the request's Host header is not a host name"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headway_config::adc::action::parse_template;
    use headway_config::adc::Respond;
    use http_body_util::BodyExt as _;

    fn parts(uri: &str, host: Option<&str>) -> Parts {
        let mut b = http::Request::builder().uri(uri);
        if let Some(h) = host {
            b = b.header(header::HOST, h);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn redirect(status: u16, t: &str) -> Answer {
        Answer::new(&Action::Redirect(Redirect {
            status,
            template: t.into(),
            parts: parse_template(t).unwrap(),
        }))
    }

    async fn body(r: Response<RespBody>) -> Bytes {
        r.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn a_redirect_carries_its_location_and_no_body() {
        let a = redirect(301, "https://{host}{uri}");
        let r = a
            .respond(&parts("/a?b=1", Some("Www.Example.com:80")), false)
            .unwrap();
        assert_eq!(r.status(), 301);
        assert_eq!(
            r.headers()[header::LOCATION],
            "https://www.example.com/a?b=1"
        );
        assert!(body(r).await.is_empty());
        let r = redirect(308, "{scheme}://x.example{path}")
            .respond(&parts("/p?q", None), true)
            .unwrap();
        assert_eq!(
            (r.status().as_u16(), &r.headers()[header::LOCATION]),
            (308, &HeaderValue::from_static("https://x.example/p"))
        );
        assert_eq!(
            a.respond(&parts("/", None), false).unwrap_err(),
            "this redirect needs the request's Host header"
        );
        assert_eq!(
            a.respond(&parts("/", Some("a\"b")), false).unwrap_err(),
            "the request's Host header is not a host name"
        );
    }

    #[tokio::test]
    async fn a_fixed_response_has_its_status_type_and_body() {
        let a = Answer::new(&Action::Respond(Respond {
            status: 503,
            body: "down for maintenance\n".into(),
            content_type: "text/html; charset=utf-8".into(),
        }));
        let r = a.respond(&parts("/", None), false).unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert_eq!(body(r).await, "down for maintenance\n");
    }
}

/// Marks a response the proxy made for an error of its own (502, 503, 413 …), which a
/// virtual server's [`ErrorPages`] may dress.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnError;

/// A virtual server's error pages (`[[virtual_server.error_page]]`), ready to send.
#[derive(Debug, Default)]
pub(crate) struct ErrorPages(Vec<(Vec<u16>, Bytes, HeaderValue)>);

impl ErrorPages {
    /// The pages of a virtual server's config (checked there: statuses, size, media type).
    pub fn new(pages: &[headway_config::adc::ErrorPage]) -> Self {
        ErrorPages(
            pages
                .iter()
                .filter_map(|p| {
                    let t = HeaderValue::from_str(&p.content_type).ok()?;
                    Some((p.statuses.clone(), Bytes::from(p.body.clone()), t))
                })
                .collect(),
        )
    }

    /// Replaces the body and type of `resp` with the page for its status, if it is the
    /// proxy's own error and there is one; status and other fields stay.
    pub fn dress(&self, resp: &mut Response<RespBody>) {
        if self.0.is_empty() || resp.extensions().get::<OwnError>().is_none() {
            return;
        }
        let status = resp.status().as_u16();
        if let Some((_, body, kind)) = self.0.iter().find(|(s, _, _)| s.contains(&status)) {
            *resp.body_mut() = RespBody::full(body.clone(), None);
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, kind.clone());
        }
    }
}

#[cfg(test)]
mod error_page_tests {
    use super::*;
    use headway_config::adc::ErrorPage;
    use http_body_util::BodyExt;

    fn page(statuses: &[u16], body: &str) -> ErrorPage {
        ErrorPage {
            statuses: statuses.to_vec(),
            body: body.into(),
            content_type: "text/html; charset=utf-8".into(),
        }
    }

    fn response(status: u16, own: bool) -> Response<RespBody> {
        let mut r = Response::new(RespBody::full(Bytes::from_static(b"text\n"), None));
        *r.status_mut() = StatusCode::from_u16(status).unwrap();
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        if own {
            r.extensions_mut().insert(OwnError);
        }
        r
    }

    async fn body(r: Response<RespBody>) -> Bytes {
        r.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn the_proxys_own_errors_get_the_page_for_their_status() {
        let pages = ErrorPages::new(&[page(&[502, 503], "<h1>down</h1>"), page(&[429], "slow")]);
        let mut r = response(503, true);
        pages.dress(&mut r);
        assert_eq!(r.status(), 503);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        assert_eq!(body(r).await, "<h1>down</h1>");
        let mut r = response(429, true);
        pages.dress(&mut r);
        assert_eq!(body(r).await, "slow");
        // Another status, or a server's answer: as it was.
        for (status, own) in [(504, true), (503, false)] {
            let mut r = response(status, own);
            pages.dress(&mut r);
            assert_eq!(r.headers()[header::CONTENT_TYPE], "text/plain");
            assert_eq!(body(r).await, "text\n");
        }
    }
}
