//! The HTTP/1.1 server: accept loop, connections, responses and streamed corpus bodies.
//!
//! This module owns everything between the listening socket and the bytes of a response. Call
//! order: [`listen`] (or bind a `TcpListener` yourself), then [`serve`] with an [`OriginConfig`]
//! and a shutdown future. `serve` accepts connections until the shutdown future completes, then
//! stops accepting, asks every connection to finish its in-flight request and close, and returns
//! once all have.
//!
//! Each request goes through: [`Route::parse`] → method check → latency → conditional request
//! (`If-None-Match`, RFC 9110 §13.2.2 order) → `If-Range`/`Range` → response. Document bodies
//! are streamed in chunks sliced out of generated 1 MiB periods kept in a small shared cache, so
//! in steady state a body costs no generation and no copy. An edited document's patches are
//! computed once per response and laid over a copy of just the chunks they touch; the cache
//! holds unedited periods only. It does not do TLS, HTTP/2, request bodies (they are ignored)
//! or compression.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::corpus::{self, Document, Kind, PERIOD};
use crate::route::{ByteRange, Route};

/// The fixed `Last-Modified` of every document: corpus documents never change within a
/// generation.
pub const LAST_MODIFIED: &str = "Mon, 01 Jan 2024 00:00:00 GMT";

/// Largest chunk of a streamed body.
const CHUNK: usize = 256 * 1024;

/// Generated periods kept for reuse (each is [`PERIOD`] = 1 MiB).
const CACHED_PERIODS: usize = 128;

/// How the origin serves; shared by all connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginConfig {
    /// Address to listen on (used by [`crate::run`]; [`serve`] takes a bound listener).
    pub listen: SocketAddr,
    /// Latency added before the response headers of every request, unless the request's
    /// `?latency=` says otherwise. Default 0.
    pub latency: Duration,
    /// `Cache-Control` value for documents (corpus and files), e.g. `max-age=60`. Default none.
    pub cache_control: Option<String>,
    /// This server's name, sent in an `X-Origin` header on every response, so a client behind
    /// a load balancer can tell which server answered. Default none (no header).
    pub name: Option<String>,
    /// `/dynamic` requests served at once; the others wait (an application server's worker
    /// pool). 0 = no limit. Default 0.
    pub dynamic_concurrency: usize,
}

impl Default for OriginConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            latency: Duration::ZERO,
            cache_control: None,
            name: None,
            dynamic_concurrency: 0,
        }
    }
}

/// The origin could not listen on its address.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// Binding the address failed (in use, not local, not permitted…).
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// A one-line, lower-case description of the cause.
        reason: String,
        /// The underlying error (not chained as a source: `reason` already describes it, and
        /// the message must stay one line under `{:#}`).
        error: io::Error,
    },
}

/// Binds a listener on `addr`, with an error message that is one clear line.
pub async fn listen(addr: SocketAddr) -> Result<TcpListener, ListenError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| ListenError::Bind {
            addr,
            reason: describe(&error),
            error,
        })
}

/// A short lower-case description of an I/O error, without the `(os error N)` suffix.
pub(crate) fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::AddrInUse => "address already in use".into(),
        io::ErrorKind::AddrNotAvailable => "address not available on this host".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => {
            let s = e.to_string();
            let s = match s.find(" (os error") {
                Some(i) => &s[..i],
                None => &s,
            };
            let mut c = s.chars();
            match c.next() {
                Some(f) => f.to_lowercase().chain(c).collect(),
                None => String::new(),
            }
        }
    }
}

/// Serves the origin on `listener` until `shutdown` completes, then shuts down gracefully: stops
/// accepting, lets every in-flight request finish (connections are closed after their current
/// response), and returns when all connections are closed.
///
/// Errors accepting a connection (e.g. too many open files) are logged and the loop goes on;
/// the function only fails if the listener's local address cannot be read. Cancel safety:
/// dropping the future drops the listener and aborts all connections.
pub async fn serve(
    listener: TcpListener,
    cfg: OriginConfig,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, "origin listening");
    let workers = match cfg.dynamic_concurrency {
        0 => tokio::sync::Semaphore::MAX_PERMITS,
        n => n,
    };
    let state = Arc::new(State {
        cfg,
        cache: Mutex::new(HashMap::new()),
        dynamic: std::sync::atomic::AtomicU64::new(0),
        workers: tokio::sync::Semaphore::new(workers),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    conns.spawn(connection(stream, peer, state.clone(), stop_rx.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    // Avoid spinning when out of file descriptors.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    tracing::info!(addr = %local, open = conns.len(), "origin shutting down");
    let _ = stop_tx.send(true);
    while conns.join_next().await.is_some() {}
    Ok(())
}

/// Shared per-server state.
struct State {
    cfg: OriginConfig,
    /// Generated periods by `(kind, seed, period index)`.
    cache: Mutex<HashMap<(Kind, u64, u64), Bytes>>,
    /// `/dynamic` requests answered so far.
    dynamic: std::sync::atomic::AtomicU64,
    /// `/dynamic`'s worker pool ([`OriginConfig::dynamic_concurrency`]).
    workers: tokio::sync::Semaphore,
}

impl State {
    /// Period `index` of the `(kind, seed)` stream, from the cache or generated.
    fn period(&self, kind: Kind, seed: u64, index: u64) -> Bytes {
        let key = (kind, seed, index);
        if let Some(b) = self.cache.lock().get(&key) {
            return b.clone();
        }
        let mut v = vec![0; PERIOD];
        corpus::fill(kind, seed, index * PERIOD as u64, &mut v);
        let b = Bytes::from(v);
        let mut cache = self.cache.lock();
        if cache.len() >= CACHED_PERIODS {
            // Evicting an arbitrary entry is enough for a lab server: the working set of a
            // benchmark (one or a few documents) fits.
            if let Some(k) = cache.keys().next().copied() {
                cache.remove(&k);
            }
        }
        cache.insert(key, b.clone());
        b
    }
}

/// Serves one connection until it closes or the server stops.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
) {
    let service = hyper::service::service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, std::convert::Infallible>(respond(&state, req).await) }
    });
    // HTTP/1.1, and HTTP/2 with prior knowledge (h2c: the client's preface tells them apart),
    // as an application server behind an ADC speaks either.
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // Not `pipeline_flush(true)`: with it, hyper 1.12 drops its automatic 400 for a malformed
    // request (the connection closes before the flush). Pipelining still works; each response
    // is flushed on its own.
    builder.http1().keep_alive(true);
    builder
        .http2()
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(8 << 20);
    // `/ws/echo` takes the connection over after its 101.
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = async { let _ = stop.wait_for(|s| *s).await; } => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        // Malformed requests end here after hyper has answered 400.
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// The response to one request.
async fn respond(state: &Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let mut resp = if req.uri().path() == "/echo" {
        echo(state, req).await
    } else if req.uri().path() == "/ws/echo" {
        websocket(req)
    } else if req.uri().path() == "/dynamic" {
        dynamic(state, req).await
    } else if req.uri().path() == "/trailers" {
        trailers(req).await
    } else {
        route(state, req).await
    };
    if let Some(name) = &state.cfg.name {
        if let Ok(v) = HeaderValue::from_str(name) {
            resp.headers_mut().insert("x-origin", v);
        }
    }
    resp
}

/// `GET /ws/echo`: `101 Switching Protocols` and a WebSocket echo on the connection (see
/// [`crate::websocket`]), or the reason the handshake is refused.
fn websocket(mut req: Request<Incoming>) -> Response<Body> {
    match crate::websocket::accept(req.method(), req.headers()) {
        Ok(accept) => {
            tokio::spawn(crate::websocket::echo(hyper::upgrade::on(&mut req)));
            let mut r = Response::new(Body::full(Bytes::new()));
            *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            let h = r.headers_mut();
            h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
            r
        }
        Err((status, why)) => {
            let mut r = text(status, &format!("{why}\n"));
            if status == StatusCode::UPGRADE_REQUIRED {
                set(&mut r, header::UPGRADE, "websocket");
            }
            r
        }
    }
}

/// Most request body bytes `/echo` reads.
const ECHO_BODY_LIMIT: usize = 16 << 20;

/// `/echo`, any method: after the server's latency, a JSON object with the request's method,
/// target, headers (name → values, in order) and body length; the body itself is discarded.
async fn echo(state: &Arc<State>, req: Request<Incoming>) -> Response<Body> {
    use http_body_util::BodyExt as _;
    if !state.cfg.latency.is_zero() {
        tokio::time::sleep(state.cfg.latency).await;
    }
    let (parts, body) = req.into_parts();
    let body_bytes = match http_body_util::Limited::new(body, ECHO_BODY_LIMIT)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes().len(),
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the body: {e}\n"),
            )
        }
    };
    let mut headers = serde_json::Map::new();
    for (name, value) in &parts.headers {
        let entry = headers
            .entry(name.as_str().to_string())
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if let serde_json::Value::Array(a) = entry {
            a.push(
                String::from_utf8_lossy(value.as_bytes())
                    .into_owned()
                    .into(),
            );
        }
    }
    let v = serde_json::json!({
        "server": state.cfg.name,
        "version": format!("{:?}", parts.version),
        "method": parts.method.as_str(),
        "target": parts.uri.to_string(),
        "headers": headers,
        "body_bytes": body_bytes,
    });
    let mut r = text(StatusCode::OK, &format!("{v}\n"));
    set(&mut r, header::CONTENT_TYPE, "application/json");
    r
}

/// `/trailers`, any method: the request body back, then trailers — `grpc-status: 0`,
/// `grpc-message: OK` and `x-body-bytes` (the body's length), and the request's own trailers
/// with `x-echo-` before their names — as a gRPC unary call answers (its status travels in
/// trailers). Over HTTP/2, or HTTP/1.1 chunked to a client that sent `TE: trailers`.
async fn trailers(req: Request<Incoming>) -> Response<Body> {
    use http_body_util::BodyExt as _;
    let collected = match http_body_util::Limited::new(req.into_body(), ECHO_BODY_LIMIT)
        .collect()
        .await
    {
        Ok(c) => c,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the body: {e}\n"),
            )
        }
    };
    let mut t = hyper::HeaderMap::new();
    if let Some(theirs) = collected.trailers() {
        for (name, value) in theirs {
            if let Ok(n) = header::HeaderName::from_bytes(format!("x-echo-{name}").as_bytes()) {
                t.append(n, value.clone());
            }
        }
    }
    let body = collected.to_bytes();
    t.insert("grpc-status", HeaderValue::from_static("0"));
    t.insert("grpc-message", HeaderValue::from_static("OK"));
    t.insert("x-body-bytes", HeaderValue::from(body.len()));
    let mut r = Response::new(Body::Trailed(Some(body), Some(t)));
    set(&mut r, header::CONTENT_TYPE, "application/grpc");
    r
}

/// `/dynamic`: a page made per request, as an application server makes one — after the latency
/// (`?latency=`, else the server's), within the worker pool — whose body says which request it
/// was and when it was made: `{"n":N,"time_ms":T,…}` (`n` counts this server's `/dynamic`
/// requests, `time_ms` is Unix time in milliseconds), padded with spaces to `?size=`. It is
/// `Cache-Control: private, no-cache` unless `?max_age=N` makes it `public, max-age=N` (with
/// `stale-while-revalidate=` and `stale-if-error=` from `?swr=` and `?sie=`);
/// `?etag=X` gives it `ETag: "X"` (and answers a matching `If-None-Match` with 304);
/// `?set_cookie=1` adds `Set-Cookie`; `?vary=Name` adds `Vary: Name` and puts that request
/// field's value in the body; `?status=N` answers with that status.
async fn dynamic(state: &Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let q: HashMap<&str, &str> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
        .collect();
    let latency = match q.get("latency") {
        Some(v) => match headway_core::units::parse_duration(v) {
            Ok(d) => d,
            Err(_) => return text(StatusCode::BAD_REQUEST, "bad latency\n"),
        },
        None => state.cfg.latency,
    };
    let Ok(_worker) = state.workers.acquire().await else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let n = state
        .dynamic
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        + 1;
    let etag = q.get("etag").map(|e| format!("\"{e}\""));
    if let (Some(etag), Some(inm)) = (&etag, req.headers().get(header::IF_NONE_MATCH)) {
        if etag_matches(inm.to_str().unwrap_or(""), etag) {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            set_owned(&mut r, header::ETAG, etag.clone());
            return r;
        }
    }
    let time_ms = headway_core::clock::wall_clock()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let vary = q.get("vary").copied();
    let seen = vary
        .and_then(|name| req.headers().get(name))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut body = serde_json::json!({
        "n": n,
        "time_ms": time_ms,
        "server": state.cfg.name,
        "vary": seen,
    })
    .to_string();
    let size: usize = q
        .get("size")
        .and_then(|s| s.parse::<headway_core::ByteSize>().ok())
        .map_or(0, |b| usize::try_from(b.bytes()).unwrap_or(0).min(64 << 20));
    if body.len() + 1 < size {
        body.extend(std::iter::repeat_n(' ', size - body.len() - 1));
    }
    body.push('\n');
    let status = q
        .get("status")
        .and_then(|s| s.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut r = text(status, &body);
    set(&mut r, header::CONTENT_TYPE, "application/json");
    match q.get("max_age") {
        Some(a) => {
            let mut cc = format!("public, max-age={a}");
            if let Some(s) = q.get("swr") {
                cc.push_str(&format!(", stale-while-revalidate={s}"));
            }
            if let Some(s) = q.get("sie") {
                cc.push_str(&format!(", stale-if-error={s}"));
            }
            set_owned(&mut r, header::CACHE_CONTROL, cc)
        }
        None => set(&mut r, header::CACHE_CONTROL, "private, no-cache"),
    }
    if let Some(e) = etag {
        set_owned(&mut r, header::ETAG, e);
    }
    if q.get("set_cookie") == Some(&"1") {
        set_owned(
            &mut r,
            header::SET_COOKIE,
            format!("hw_session={n}; Path=/"),
        );
    }
    if let Some(name) = vary {
        set_owned(&mut r, header::VARY, name.to_string());
    }
    if req.method() == Method::HEAD {
        *r.body_mut() = Body::empty();
    }
    r
}

/// Every route but `/echo` and `/dynamic`.
async fn route(state: &Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let head = req.method() == Method::HEAD;
    if req.method() != Method::GET && !head {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let route = Route::parse(req.uri().path(), req.uri().query());
    let latency = match &route {
        Ok(Route::Document {
            latency: Some(l), ..
        }) => *l,
        _ => state.cfg.latency,
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let mut resp = match route {
        Err(e) => text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
        Ok(Route::Index) => {
            let mut r = Response::new(Body::full(index_page()));
            set(&mut r, header::CONTENT_TYPE, "text/html; charset=utf-8");
            r
        }
        Ok(Route::Healthz) => text(StatusCode::OK, "ok\n"),
        Ok(Route::Status(code)) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            text(
                status,
                &format!("{} {}\n", code, status.canonical_reason().unwrap_or("")),
            )
        }
        Ok(Route::NotFound) => text(
            StatusCode::NOT_FOUND,
            "not found; see / for the URL scheme\n",
        ),
        Ok(Route::Document { doc, .. }) => document(state, &req, doc),
    };
    if !resp.headers().contains_key(header::CONTENT_LENGTH) {
        if let Some(n) = resp.body().size_hint().exact() {
            set_owned(&mut resp, header::CONTENT_LENGTH, n.to_string());
        }
    }
    if resp.status() == StatusCode::NO_CONTENT || resp.status() == StatusCode::NOT_MODIFIED {
        resp.headers_mut().remove(header::CONTENT_LENGTH);
        *resp.body_mut() = Body::empty();
    } else if head {
        // RFC 9110 §9.3.2: HEAD gets the GET headers, Content-Length included, and no body.
        *resp.body_mut() = Body::empty();
    }
    resp
}

/// A document response: 200, 206, 304 or 416.
fn document(state: &Arc<State>, req: &Request<Incoming>, doc: Document) -> Response<Body> {
    let etag = doc.etag();
    let len = doc.size();
    let headers = req.headers();
    let mut resp = Response::new(Body::empty());
    {
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(doc.kind().content_type()),
        );
        if let Ok(v) = HeaderValue::from_str(&etag) {
            h.insert(header::ETAG, v);
        }
        h.insert(
            header::LAST_MODIFIED,
            HeaderValue::from_static(LAST_MODIFIED),
        );
        h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        if let Some(cc) = &state.cfg.cache_control {
            if let Ok(v) = HeaderValue::from_str(cc) {
                h.insert(header::CACHE_CONTROL, v);
            }
        }
    }
    // RFC 9110 §13.2.2: If-None-Match before Range; for GET and HEAD a match is 304.
    if let Some(inm) = headers.get(header::IF_NONE_MATCH) {
        if etag_matches(inm.to_str().unwrap_or(""), &etag) {
            *resp.status_mut() = StatusCode::NOT_MODIFIED;
            return resp;
        }
    }
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    // RFC 9110 §13.1.5: If-Range with a validator other than our current ETag → ignore Range.
    let range = match headers.get(header::IF_RANGE) {
        Some(ir) if ir.to_str().map(|v| v.trim() != etag).unwrap_or(true) => None,
        _ => range,
    };
    let (start, end) = match ByteRange::parse(range, len) {
        ByteRange::Full => (0, len),
        ByteRange::Partial { start, end } => {
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
            set_owned(
                &mut resp,
                header::CONTENT_RANGE,
                format!("bytes {start}-{end}/{len}"),
            );
            (start, end + 1)
        }
        ByteRange::Unsatisfiable => {
            *resp.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            set_owned(&mut resp, header::CONTENT_RANGE, format!("bytes */{len}"));
            set(&mut resp, header::CONTENT_LENGTH, "0");
            return resp;
        }
    };
    set_owned(&mut resp, header::CONTENT_LENGTH, (end - start).to_string());
    *resp.body_mut() = Body::Document(DocumentBody {
        state: state.clone(),
        doc,
        patches: doc.patches(),
        next: start,
        end,
        period: None,
    });
    resp
}

/// Whether an `If-None-Match` value matches `etag` (weak comparison, RFC 9110 §13.1.2).
fn etag_matches(header: &str, etag: &str) -> bool {
    header
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

fn set(resp: &mut Response<Body>, name: header::HeaderName, value: &'static str) {
    resp.headers_mut()
        .insert(name, HeaderValue::from_static(value));
}

fn set_owned(resp: &mut Response<Body>, name: header::HeaderName, value: String) {
    if let Ok(v) = HeaderValue::from_str(&value) {
        resp.headers_mut().insert(name, v);
    }
}

/// A short `text/plain` response.
fn text(status: StatusCode, body: &str) -> Response<Body> {
    let mut r = Response::new(Body::full(Bytes::copy_from_slice(body.as_bytes())));
    *r.status_mut() = status;
    set(&mut r, header::CONTENT_TYPE, "text/plain; charset=utf-8");
    set_owned(&mut r, header::CONTENT_LENGTH, body.len().to_string());
    r
}

/// The `GET /` page.
fn index_page() -> Bytes {
    let mut files = String::new();
    for f in corpus::FILES {
        files.push_str(&format!(
            "<li><a href=\"/files/{0}\">/files/{0}</a>: {1}, {2} bytes, seed {3}</li>\n",
            f.name,
            f.doc.kind(),
            f.doc.size(),
            f.doc.seed()
        ));
    }
    Bytes::from(format!(
        "<!DOCTYPE html>\n<html><head><title>headway origin</title></head><body>\n\
<h1>headway origin</h1>\n<ul>\n\
<li><code>GET /corpus/{{pdf|doc|random|html}}/{{size}}[?seed=N][&amp;latency=50ms]</code>: \
the first <code>size</code> bytes (<code>12MB</code>, <code>64KiB</code>, <code>128B</code>, \
<code>1500</code>) of the deterministic stream of that kind and seed (default 1). \
<code>latency</code> delays the response headers (default: the server's <code>--latency</code>).</li>\n\
<li><code>GET /files/{{name}}</code>: a named seed document (below); <code>?seed</code> and \
<code>?latency</code> as above.</li>\n\
<li><code>?edit=1%25[&amp;edit_seed=N]</code> on either: that share (0&ndash;100 %) of the \
document's bytes replaced by random 64-byte patches at random places (seed default 1), with its \
own <code>ETag</code>.</li>\n\
<li><code>GET /healthz</code>: 200 <code>ok</code>.</li>\n\
<li><code>GET /status/{{code}}</code>: that status (200&ndash;599).</li>\n\
<li>HEAD is supported everywhere; documents support one <code>Range: bytes=a-b</code> (206, 416), \
<code>If-None-Match</code> (304) and <code>If-Range</code>, and carry a deterministic \
<code>ETag</code> and a fixed <code>Last-Modified</code>.</li>\n\
<li>Anything else: 404.</li>\n</ul>\n<h2>Files</h2>\n<ul>\n{files}</ul>\n</body></html>\n"
    ))
}

/// A response body: empty, one buffer, or a streamed document range.
pub(crate) enum Body {
    /// No bytes.
    Empty,
    /// One buffer, sent as one frame.
    Full(Option<Bytes>),
    /// A byte range of a document, streamed from the period cache.
    Document(DocumentBody),
    /// One buffer, then trailers (`/trailers`).
    Trailed(Option<Bytes>, Option<hyper::HeaderMap>),
}

impl Body {
    fn empty() -> Self {
        Body::Empty
    }
    fn full(b: Bytes) -> Self {
        Body::Full(Some(b))
    }
}

/// The state of a streamed document range.
pub(crate) struct DocumentBody {
    state: Arc<State>,
    doc: Document,
    /// The document's edit, computed once for the response (empty when unedited).
    patches: corpus::Patches,
    /// Next stream offset to send.
    next: u64,
    /// Stream offset after the last byte to send.
    end: u64,
    /// The period containing `next`, once fetched: (index, bytes).
    period: Option<(u64, Bytes)>,
}

impl DocumentBody {
    /// The next chunk: a zero-copy slice of the cached period holding `next`, or a patched
    /// copy of it where the document's edit touches it.
    fn chunk(&mut self) -> Option<Bytes> {
        if self.next >= self.end {
            return None;
        }
        let (src, run) = self.doc.source(self.next);
        let index = src / PERIOD as u64;
        let bytes = match &self.period {
            Some((i, b)) if *i == index => b.clone(),
            _ => {
                let b = self.state.period(self.doc.kind(), self.doc.seed(), index);
                self.period = Some((index, b.clone()));
                b
            }
        };
        let within = (src % PERIOD as u64) as usize;
        let left = usize::try_from((self.end - self.next).min(run)).unwrap_or(usize::MAX);
        let n = CHUNK.min(PERIOD - within).min(left);
        let offset = self.next;
        self.next += n as u64;
        let slice = bytes.slice(within..within + n);
        if !self.patches.touches(offset, n) {
            return Some(slice);
        }
        let mut edited = slice.to_vec();
        self.patches.apply(offset, &mut edited);
        Some(Bytes::from(edited))
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let chunk = match self.get_mut() {
            Body::Empty => None,
            Body::Full(b) => b.take(),
            Body::Document(d) => d.chunk(),
            Body::Trailed(b, t) => match b.take() {
                Some(b) => Some(b),
                None => return Poll::Ready(t.take().map(|t| Ok(Frame::trailers(t)))),
            },
        };
        Poll::Ready(chunk.map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Empty => true,
            Body::Full(b) => b.is_none(),
            Body::Document(d) => d.next >= d.end,
            Body::Trailed(b, t) => b.is_none() && t.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Empty => SizeHint::with_exact(0),
            Body::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Document(d) => SizeHint::with_exact(d.end - d.next),
            Body::Trailed(b, _) => {
                let mut h = SizeHint::new();
                h.set_lower(b.as_ref().map_or(0, |b| b.len() as u64));
                h
            }
        }
    }
}
