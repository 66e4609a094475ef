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
