//! Phase 4 for a group with `protocol = "h2"`: one attempt at a server over HTTP/2.
//!
//! The request goes out as a stream of the worker's connection to the server
//! ([`crate::upstream::Pool::h2_sender`]) with an absolute target (`:scheme`, `:authority` from
//! the client's `Host`, `:path`), its fields as the HTTP/1 path would send them, less the
//! connection-specific ones HTTP/2 forbids; `te: trailers` is kept when the client asked for
//! trailers (gRPC clients do, and some gRPC servers require it). The body streams as the
//! client sends it, trailers included ([`H2Body`]). The answer's head comes back within the
//! group's `response_timeout`; its body, trailers included, is read as the client takes it
//! ([`crate::http::body::Source::H2`]).
//!
//! Retry classes, as for HTTP/1: a request the connection took no part of (it closed first;
//! hyper hands the request back), or one the server refused unprocessed (`REFUSED_STREAM`,
//! RFC 9113 §8.7), is [`Attempt::NotSent`]; a stream that failed after being sent is
//! [`Attempt::NoResponse`].

use http::{HeaderValue, Request, StatusCode, Version};

use super::body::{H2Body, ReqBody, Source};
use super::codec::ResponseHead;
use super::Attempt;
use crate::group::ServerState;
use crate::stats::VirtualServerCounters;

/// A request as it goes to HTTP/2 servers, built once for all attempts.
pub(super) struct H2Request {
    pub method: http::Method,
    pub uri: http::Uri,
    pub headers: http::HeaderMap,
}

impl H2Request {
    /// The request of `parts` (its fields already as servers get them, hop-by-hop ones
    /// removed) to a group whose servers are reached over TLS when `tls`; `trailers` when the
    /// client's `TE` named them.
    pub fn new(parts: &http::request::Parts, target: &str, tls: bool, trailers: bool) -> Self {
        let mut headers = parts.headers.clone();
        let authority = headers
            .remove(http::header::HOST)
            .and_then(|h| http::uri::Authority::try_from(h.as_bytes()).ok())
            .or_else(|| parts.uri.authority().cloned());
        let mut uri = http::Uri::builder().scheme(if tls { "https" } else { "http" });
        if let Some(a) = authority {
            uri = uri.authority(a);
        } else {
            uri = uri.authority("localhost");
        }
        let uri = uri
            .path_and_query(target)
            .build()
            .unwrap_or_else(|_| http::Uri::from_static("/"));
        if trailers {
            headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
        }
        H2Request {
            method: parts.method.clone(),
            uri,
            headers,
        }
    }

    fn to_request(&self, body: H2Body) -> Request<H2Body> {
        let mut r = Request::new(body);
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.version_mut() = Version::HTTP_2;
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// One attempt on one server: stream, request, response head (1xx answers skipped by hyper).
pub(super) async fn exchange(
    server: &std::sync::Arc<ServerState>,
    cfg: &headway_config::adc::ServerGroup,
    req: &H2Request,
    body: &mut Option<ReqBody>,
    max_body: Option<u64>,
    vs_counters: &std::sync::Arc<VirtualServerCounters>,
) -> Result<(ResponseHead, Source), Attempt> {
    let (mut send, reused) = match server
        .pool
        .h2_sender(server.address, cfg.connect_timeout, &server.counters)
        .await
    {
        Ok(s) => s,
        Err(e) => return Err(super::connect_failed(server, cfg, &e)),
    };
    let inner = body.take().unwrap_or(ReqBody::Empty);
    let sent_body = H2Body::new(inner, max_body, Some((vs_counters.clone(), server.clone())));
    let fault = sent_body.fault_cell();
    let failed = |why: &str, counts: bool| {
        server.counters.failures.inc();
        if counts {
            crate::group::passive_outcome(server, cfg, false);
        }
        tracing::debug!(group = %cfg.name, server = %server.address, reason = why, "request to server failed");
    };
    let sent_at = headway_core::SystemClock::now();
    let deadline = tokio::time::Instant::from_std(sent_at) + cfg.response_timeout;
    let answer =
        tokio::time::timeout_at(deadline, send.try_send_request(req.to_request(sent_body)));
    let resp = match answer.await {
        Ok(Ok(r)) => r,
        Ok(Err(mut e)) => {
            if let Some(unsent) = e.take_message() {
                // The connection closed before taking the request: nothing reached the server,
                // and the body is whole for the next try.
                *body = Some(unsent.into_body().into_inner());
                server.pool.clear();
                failed("the connection closed before the request was sent", false);
                return Err(Attempt::NotSent(
                    StatusCode::BAD_GATEWAY,
                    "the server closed the connection",
                ));
            }
            let e = e.into_error();
            if let Some(fault) = H2Body::fault(&fault) {
                let (status, why) = fault.answer();
                return Err(Attempt::Fail(status, why));
            }
            if refused(&e) {
                failed("the server refused the stream", false);
                return Err(Attempt::NotSent(
                    StatusCode::BAD_GATEWAY,
                    "the server refused the request unprocessed",
                ));
            }
            server.pool.clear();
            failed(&e.to_string(), !reused);
            return Err(Attempt::NoResponse(
                StatusCode::BAD_GATEWAY,
                "the server closed the connection without a response",
            ));
        }
        Err(_) => {
            failed("response timeout", true);
            return Err(Attempt::Fail(
                StatusCode::GATEWAY_TIMEOUT,
                "the server did not answer in time",
            ));
        }
    };
    crate::group::passive_outcome(server, cfg, true);
    let rt = headway_core::SystemClock::now().saturating_duration_since(sent_at);
    server.counters.latency.record(rt);
    server.observe_response_time(rt);
    let (parts, incoming) = resp.into_parts();
    Ok((
        ResponseHead {
            status: parts.status,
            version: Version::HTTP_2,
            headers: parts.headers,
        },
        Source::H2(incoming),
    ))
}

/// Whether `e` is the server's `REFUSED_STREAM`: the request was not processed and may be sent
/// again (RFC 9113 §8.7).
fn refused(e: &hyper::Error) -> bool {
    use std::error::Error as _;
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(h2) = s.downcast_ref::<h2::Error>() {
            return h2.reason() == Some(h2::Reason::REFUSED_STREAM);
        }
        source = s.source();
    }
    false
}
