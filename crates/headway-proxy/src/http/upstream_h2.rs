//! Phase 4 for a group with `protocol = "h2"`: one attempt at a server over HTTP/2.
//!
//! The request goes out as a stream of one of the worker's connections to the server
//! ([`crate::upstream::Pool::h2_sender`]) with an absolute target (`:scheme`, `:authority` from
//! the client's `Host`, `:path`), its fields as the HTTP/1 path would send them, less the
//! connection-specific ones HTTP/2 forbids; `te: trailers` is kept when the client asked for
//! trailers (gRPC clients do, and some gRPC servers require it). The body streams as the
//! client sends it, trailers included ([`H2Body`]), from a task of its own that
//! waits for the stream's flow-control window; a request without a body ends its stream with
//! its head and needs none. The answer's head comes back within the group's
//! `response_timeout` (a wait for a stream the server's concurrency limit holds back
//! included); its body, trailers included, is read as the client takes it
//! ([`crate::http::body::Source::H2`]).
//!
//! Retry classes, as for HTTP/1: a request the connection took no part of (it had closed),
//! or one the server did not take — refused unprocessed (`REFUSED_STREAM`, RFC 9113 §8.7) or
//! past the last stream of a graceful GOAWAY (§6.8) — whose body can be sent again (none, or
//! one whose sent part is still kept, [`super::replay`]), is [`Attempt::Untaken`]; a stream
//! that failed after being sent is [`Attempt::NoResponse`].

use std::sync::atomic::AtomicUsize;

use http::{HeaderValue, StatusCode, Version};
use hyper::body::Body as _;

use headway_h2::frame::Reason;

use super::body::{H2Body, ReqBody, Source};
use super::codec::ResponseHead;
use super::gone_client::{Awaiting, DRAIN_BYTES};
use super::Attempt;
use crate::group::ServerState;
use crate::stats::VirtualServerCounters;
use crate::upstream::h2::{Answer, H2Recv, Stream, StreamError};

/// A request as it goes to HTTP/2 servers, built once for all attempts.
pub(super) struct H2Request {
    pub method: http::Method,
    pub uri: http::Uri,
    pub headers: http::HeaderMap,
}

impl H2Request {
    /// The request of `parts` with `headers` (its fields as servers get them, hop-by-hop ones
    /// removed) to a group whose servers are reached over TLS when `tls`; `trailers` when the
    /// client's `TE` named them; `length` the body's size when it is known and not zero (a
    /// `Content-Length` is added if the client sent none).
    pub fn new(
        parts: &http::request::Parts,
        mut headers: http::HeaderMap,
        length: Option<u64>,
        (tls, trailers): (bool, bool),
    ) -> Self {
        // `:authority` from `Host` (which the request's own `:authority` usually made: then
        // that one is shared rather than parsed again).
        let authority = match (headers.remove(http::header::HOST), parts.uri.authority()) {
            (Some(h), Some(a)) if h.as_bytes() == a.as_str().as_bytes() => Some(a.clone()),
            (Some(h), a) => http::uri::Authority::try_from(h.as_bytes())
                .ok()
                .or_else(|| a.cloned()),
            (None, a) => a.cloned(),
        };
        // The parts set directly: `Uri::builder` moved its parts through every call (1 % of
        // the CPU of an HTTP/2 request).
        let mut target = http::uri::Parts::default();
        target.scheme = Some(if tls {
            http::uri::Scheme::HTTPS
        } else {
            http::uri::Scheme::HTTP
        });
        target.authority =
            Some(authority.unwrap_or_else(|| http::uri::Authority::from_static("localhost")));
        // The client's path as it came (a shared buffer, not parsed again).
        target.path_and_query = Some(
            parts
                .uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
        );
        let uri = http::Uri::from_parts(target).unwrap_or_else(|_| http::Uri::from_static("/"));
        if trailers {
            headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
        }
        if let Some(n) = length.filter(|&n| n > 0) {
            headers
                .entry(http::header::CONTENT_LENGTH)
                .or_insert_with(|| HeaderValue::from(n));
        }
        H2Request {
            method: parts.method.clone(),
            uri,
            headers,
        }
    }
}

/// The answer of a stream sent to a server, waited for even if the request's client goes
/// away first (see [`super::gone_client`]).
///
/// Dropped before the answer came (its client reset the stream or closed the connection), it
/// leaves a task that waits for the answer until `deadline` (the group's response timeout)
/// and reads up to [`DRAIN_BYTES`] of its body, instead of resetting the stream at once. A
/// client that drops a hundred streams would otherwise put a hundred `RST_STREAM` frames on
/// the connection the worker shares with every other client, and servers guarding against
/// rapid reset (CVE-2023-44487; the h2 crate's, hence hyper's, after 20 streams reset before
/// they were taken) take that for an attack and close the connection with every other
/// client's requests on it: measured with `h2load` clients killed with 800 streams in flight
/// beside a steady POST load, 995 of 98,941 POSTs failed with 502. Past
/// [`super::gone_client::MAX_AWAITED`] awaited for the client connection, the stream is reset.
struct Awaited {
    answer: Option<Answer>,
    deadline: tokio::time::Instant,
    /// The stream's place on its connection, given back when the answer is read or dropped.
    stream: Option<Stream>,
    /// The answers awaited for the client connection's gone streams.
    awaited: std::sync::Arc<AtomicUsize>,
}

impl Awaited {
    fn new(
        answer: Answer,
        deadline: tokio::time::Instant,
        stream: Stream,
        awaited: &std::sync::Arc<AtomicUsize>,
    ) -> Self {
        Awaited {
            answer: Some(answer),
            deadline,
            stream: Some(stream),
            awaited: awaited.clone(),
        }
    }
}

impl std::future::Future for Awaited {
    type Output = Result<(http::response::Parts, Option<u64>), StreamError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let Some(answer) = self.answer.as_mut() else {
            return std::task::Poll::Pending;
        };
        let r = std::task::ready!(std::pin::Pin::new(answer).poll(cx));
        // (Kept until the body is made: dropping it now would let the stream go.)
        std::task::Poll::Ready(r)
    }
}

impl Drop for Awaited {
    fn drop(&mut self) {
        let Some(answer) = self.answer.take() else {
            return;
        };
        if answer.is_settled() {
            return;
        }
        let deadline = self.deadline;
        if deadline <= tokio::time::Instant::now() {
            return; // given up on: the stream is reset
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(awaiting) = Awaiting::take(&self.awaited) else {
            return; // reset
        };
        let held = (self.stream.take(), awaiting);
        rt.spawn(async move {
            let _held = held;
            let _ = tokio::time::timeout_at(deadline, async move {
                let mut answer = answer;
                let Ok((_, length)) = (&mut answer).await else {
                    return;
                };
                let (conn, id) = answer.stream();
                let mut body = H2Recv::new(conn, id, length, None);
                drop(answer);
                body.discard(DRAIN_BYTES, None).await;
            })
            .await;
        });
    }
}

/// One attempt on one server: stream, request, response head (1xx answers skipped).
pub(super) async fn exchange(
    server: &std::sync::Arc<ServerState>,
    cfg: &headway_config::adc::ServerGroup,
    req: &H2Request,
    body: &mut Option<ReqBody>,
    max_body: Option<u64>,
    (vs_counters, awaited): (
        &std::sync::Arc<VirtualServerCounters>,
        &std::sync::Arc<AtomicUsize>,
    ),
) -> Result<(ResponseHead, Source), Attempt> {
    let (send, place, reused) = match server
        .pool
        .h2_sender(server.address, cfg.connect_timeout, &server.counters)
        .await
    {
        Ok(s) => s,
        Err(e) => return Err(super::connect_failed(server, cfg, &e)),
    };
    let failed = |why: &str, counts: bool| {
        server.counters.failures.inc();
        if counts {
            crate::group::passive_outcome(server, cfg, false);
        }
        tracing::debug!(group = %cfg.name, server = %server.address, reason = why, "request to server failed");
    };
    // The connection had closed: nothing reached the server.
    let closed = || {
        server.pool.clear();
        failed("the connection closed before the request was sent", false);
        Attempt::Untaken(StatusCode::BAD_GATEWAY, "the server closed the connection")
    };
    let timed_out = || {
        failed("response timeout", true);
        Attempt::Fail(
            StatusCode::GATEWAY_TIMEOUT,
            "the server did not answer in time",
        )
    };
    let sent_at = headway_core::SystemClock::now();
    let deadline = tokio::time::Instant::from_std(sent_at) + cfg.response_timeout;
    let bodiless = body.as_ref().is_none_or(|b| b.is_end_stream());
    // This attempt's reader of the body: from its first byte (a body kept as it is sent),
    // or the body itself.
    let inner = match body {
        _ if bodiless => None,
        Some(ReqBody::Replay(r)) => match r.again() {
            Some(again) => Some(ReqBody::Replay(again)),
            None => {
                return Err(Attempt::Fail(
                    StatusCode::BAD_GATEWAY,
                    "the request body could not be sent again",
                ))
            }
        },
        _ => body.take(),
    };
    // Whether the body can still be sent again from its first byte, once this try failed.
    let resendable = |body: &Option<ReqBody>| {
        bodiless || matches!(body, Some(ReqBody::Replay(r)) if r.resendable())
    };
    // One timer for the whole wait: the stream's opening and the answer's head.
    let timer = tokio::time::sleep_until(deadline);
    tokio::pin!(timer);
    // A stream is opened once the server's concurrency limit allows one.
    // (The handle is held until the stream is open: a connection no one holds closes.)
    let conn = send.conn().clone();
    let opened = std::future::poll_fn(|cx| {
        conn.poll_open(cx, (&req.method, &req.uri, &req.headers), bodiless)
    });
    let id = tokio::select! {
        biased;
        o = opened => match o {
            Ok(id) => id,
            Err(_) => return Err(closed()),
        },
        () = &mut timer => return Err(timed_out()),
    };
    drop(send);
    let fault = if let Some(inner) = inner {
        let sent_body = H2Body::new(inner, max_body, Some((vs_counters.clone(), server.clone())));
        let fault = sent_body.fault_cell();
        // A body that fails (the client's, or one past the limit: `H2Body` says which) resets
        // the stream, so the answer fails too.
        tokio::spawn(crate::upstream::h2::send_body(
            sent_body,
            conn.clone(),
            id,
            Reason::CANCEL,
        ));
        Some(fault)
    } else {
        None
    };
    let mut answer = Awaited::new(Answer::new(conn, id), deadline, place, awaited);
    let waited = tokio::select! {
        biased;
        a = &mut answer => Some(a),
        () = &mut timer => None,
    };
    let (parts, length) = match waited {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            if let Some(fault) = fault.as_deref().and_then(H2Body::fault) {
                let (status, why) = fault.answer();
                return Err(Attempt::Fail(status, why));
            }
            // Not taken by the server: refused, or above the last stream a graceful GOAWAY
            // said it would process (NGINX closes its connections so after 1,000 requests by
            // default). A body already on its way cannot be sent again unless it was read
            // whole. (A GOAWAY's is the connection's routine end, not a failure of the
            // server.)
            if let Some(why) = e.untaken() {
                if matches!(e, StreamError::Reset(_)) {
                    failed("the server refused the stream", false);
                } else {
                    tracing::debug!(group = %cfg.name, server = %server.address, "a stream past the server's GOAWAY");
                }
                return Err(if resendable(body) {
                    Attempt::Untaken(StatusCode::BAD_GATEWAY, why)
                } else {
                    Attempt::NoResponse(StatusCode::BAD_GATEWAY, why)
                });
            }
            server.pool.clear();
            failed(&e.to_string(), !reused);
            return Err(Attempt::NoResponse(
                StatusCode::BAD_GATEWAY,
                "the server closed the connection without a response",
            ));
        }
        None => return Err(timed_out()),
    };
    // Taken: what is kept of the body for sending again is let go.
    if let Some(ReqBody::Replay(r)) = body {
        r.taken();
    }
    crate::group::passive_outcome(server, cfg, true);
    let rt = headway_core::SystemClock::now().saturating_duration_since(sent_at);
    server.counters.latency.record(rt);
    server.observe_response_time(rt);
    let (conn, id) = answer.answer.as_ref().expect("answered").stream();
    let source = H2Recv::new(conn, id, length, answer.stream.take());
    // The answer's future is let go without a reset: the body has the stream now.
    if let Some(a) = answer.answer.take() {
        a.settle();
    }
    Ok((
        ResponseHead {
            status: parts.status,
            version: Version::HTTP_2,
            headers: parts.headers,
        },
        Source::H2(source),
    ))
}
