//! The L7 path: an HTTP virtual server's client connections and the request phases.
//!
//! ```text
//!  client conn ──▶ HTTP/1: the own loop ([`h1`]: bodiless requests, keep-alive, pipelining)
//!                  │       └─ from the first request it does not take (a body, Expect,
//!                  │          Upgrade, a bad or oversized head): ─▶ Guarded (framing check,
//!                  │                                                 activity) ──▶ hyper
//!                  └ HTTP/2 (prior knowledge, ALPN) ──▶ the own HTTP/2 core (`headway-h2`),
//!                                                       streams polled in the connection's
//!                                                       task ([`h2_server`])
//!  per request:
//!   1 admit     framing verdict (400 + close) · CONNECT (501) · an `Upgrade` request is
//!               marked for a tunnel (WebSocket) or served plain, closing · per-client rate (429)
//!   2 route     content-switching rules → server group · the rule's rate limit (429) and
//!               basic authentication (401; bcrypt off the event loop, passes remembered)
//!   2½ cache    the integrated cache's lookup ([`crate::cache`]): a hit (or a stale object
//!               while it is revalidated in the background) is answered here; a miss leads or
//!               waits for the one fetch of its URL
//!   2¾ mirror   a copy of a bodiless request to the `mirror` group ([`mirror`]), in a task
//!               of its own
//!   3 select    persistence (cookie / source IP) → method → limits → surge queue (503)
//!   4 upstream  pooled keep-alive connection · send (the server's side read meanwhile: an
//!               answer before the whole body, [`upload`]) · response header within the timeout
//!               retry elsewhere on connect failure (any method) or a reset before any
//!               response byte (idempotent, bodiless requests), up to `retries` (502/503/504);
//!               one a connection turned away untouched is sent again besides ([`Attempt`])
//!   5 respond   hop-by-hop fields out · the cache decides whether to store (the body is
//!               teed into it as it streams) · response header rules · compression decided
//!               (`Accept-Encoding` read before 4; [`compress`]; answers from the cache are
//!               compressed per client too) · persistence cookie · a `101` to an upgrade
//!               goes to the client, then the connection is a tunnel to the server's
//!               ([`tunnel`]), run by the connection's task once the own loop or hyper has
//!               written the 101 and handed the stream over
//!   6 finish    at the end of the response body: connection back to the pool, slot released,
//!               counters, access log ([`body::Exchange`])
//! ```
//!
//! Each phase returns a [`Flow`]: go on, or answer now. Nothing here blocks; the body streams
//! both ways without being buffered whole.

pub mod access_log;
pub mod answer;
pub mod auth;
pub mod body;
pub mod codec;
pub mod compress;
pub mod framing;
mod gone_client;
pub mod h1;
mod h2_server;
pub mod headers;
pub mod mirror;
pub mod rate_limit;
mod replay;
pub mod request_id;
pub mod rewind;
pub mod route;
pub mod tunnel;
mod upload;
mod upstream_h2;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use headway_config::adc::VirtualServer;
use headway_core::SystemClock;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use hyper::body::{Body as _, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::watch;

use crate::cache::{Cache, Fetch, Lookup, Reply};
use crate::client_socket::{ClientSocket, Peer};
use crate::gate::Gated;
use crate::group::{Affinity, Group, Lease, Unavailable};
use crate::limits::ClientLimits;
use crate::stats::VirtualServerCounters;
use access_log::{Entry, Logger};
use answer::Target;
use body::{Exchange, LogLine, ReqBody, RespBody, Source};
use framing::{FramingChecker, Guarded, Verdict};
use headers::{Forwarding, Rules};
use route::Router;

/// A virtual server's state that lasts across reloads (by name).
#[derive(Debug, Default)]
pub struct VsShared {
    /// Counters.
    pub counters: Arc<VirtualServerCounters>,
    /// Per-client limits.
    pub limits: Arc<ClientLimits>,
    /// Compression counters.
    pub compression: Arc<compress::Counters>,
    /// Shadow traffic counters.
    pub mirror: Arc<mirror::MirrorCounters>,
    /// Each content-switching rule's counters and rate limit, by rule name (kept across
    /// reloads while the name stays).
    rules: parking_lot::Mutex<std::collections::HashMap<String, Arc<RuleShared>>>,
}

/// What lasts of a content-switching rule across reloads.
#[derive(Debug, Default)]
struct RuleShared {
    /// Requests it matched.
    hits: crate::stats::Counter,
    /// Requests its rate limit refused.
    limited: crate::stats::Counter,
    /// Requests its basic authentication refused (401).
    unauthorized: crate::stats::Counter,
    /// Its rate limit's buckets (kept while the limit stays the same).
    limiter: parking_lot::Mutex<Option<Arc<rate_limit::RuleLimiter>>>,
    /// Its users and the credentials that passed lately (kept while the users file and realm
    /// read the same).
    auth: parking_lot::Mutex<Option<Arc<auth::Authenticator>>>,
}

/// What `slot` holds for a rule of the new config, whose setting is `want`: kept when it was
/// made from an equal setting (its state lasts across the reload), made anew otherwise, gone
/// when the rule has none.
fn kept_or_made<T, S: PartialEq>(
    slot: &parking_lot::Mutex<Option<Arc<T>>>,
    want: Option<&S>,
    made_from: impl Fn(&T) -> &S,
    make: impl Fn(&S) -> T,
) -> Option<Arc<T>> {
    let mut held = slot.lock();
    match (want, held.as_deref()) {
        (None, _) => *held = None,
        (Some(want), Some(have)) if made_from(have) == want => {}
        (Some(want), _) => *held = Some(Arc::new(make(want))),
    }
    held.clone()
}

/// A content-switching rule in one config generation.
#[derive(Debug)]
struct RuleRuntime {
    shared: Arc<RuleShared>,
    limiter: Option<Arc<rate_limit::RuleLimiter>>,
    /// Its users.
    auth: Option<Arc<auth::Authenticator>>,
}

/// A virtual server in one config generation (HTTP or TCP).
#[derive(Debug)]
pub struct VsRuntime {
    /// The configuration.
    pub config: VirtualServer,
    /// Rules and groups.
    pub router: Router<Target>,
    /// Lasting state.
    pub shared: Arc<VsShared>,
    /// The access log, if any.
    pub log: Option<Arc<Logger>>,
    request_rules: Rules,
    response_rules: Rules,
    compression: Option<compress::Policy>,
    /// The integrated cache, when this virtual server uses it.
    cache: Option<Arc<Cache>>,
    /// The group that gets copies of bodiless requests (`mirror`).
    mirror: Option<Arc<Group>>,
    /// Whether a group it sends requests to writes PROXY headers to its servers.
    sends_proxy_protocol: bool,
    /// Each rule's counters and rate limit, in rule order.
    rules: Vec<RuleRuntime>,
    /// Pages for the proxy's own errors.
    error_pages: answer::ErrorPages,
    /// The header of request IDs, if the virtual server gives them.
    request_id: Option<header::HeaderName>,
    /// hyper's HTTP/1 server settings, built once (a builder per connection allocated its
    /// timer anew each time), and the HTTP/2 server's ([`h2_server`]).
    http1: hyper::server::conn::http1::Builder,
    http2: headway_h2::connection::Config,
}

impl VsRuntime {
    /// Assembles a virtual server.
    pub fn new(
        config: VirtualServer,
        router: Router<Target>,
        shared: Arc<VsShared>,
        log: Option<Arc<Logger>>,
    ) -> Self {
        shared
            .limits
            .configure(config.max_connections_per_client, config.rate_per_client);
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            // A client that half-closes after its requests still gets the answers (and the
            // framing check ends the stream that way before a refused request).
            .half_close(true)
            .keep_alive(true)
            // No `pipeline_flush`: it makes hyper copy every body into its write buffer
            // (its "flatten" strategy), so a 512 KiB answer went out as one 512 KiB copy. Without
            // it, bodies are queued as they come from the server and written with `writev`,
            // never copied in user space.
            .max_buf_size(config.max_header_bytes.max(8192) + 8192)
            .max_header_size(config.max_header_bytes);
        if config.max_headers != 100 {
            http1.max_headers(config.max_headers);
        }
        let http2 = h2_server::settings(config.max_header_bytes);
        let sends_proxy_protocol = std::iter::once(router.default_target())
            .chain(router.rules().map(|(_, t)| t))
            .filter_map(Target::group)
            .any(|g| g.config.send_proxy_protocol.is_some());
        let rules = {
            let mut kept = shared.rules.lock();
            let rules: Vec<_> = router
                .rules()
                .map(|(r, _)| {
                    let shared = kept.entry(r.name.clone()).or_default().clone();
                    // The buckets stay while the limit does (a new limit starts full), the
                    // credentials that passed while the users do.
                    let limiter = kept_or_made(
                        &shared.limiter,
                        r.rate_limit.as_ref(),
                        rate_limit::RuleLimiter::limit,
                        |l| rate_limit::RuleLimiter::new(l.clone()),
                    );
                    let auth = kept_or_made(
                        &shared.auth,
                        r.auth.as_ref(),
                        auth::Authenticator::config,
                        auth::Authenticator::new,
                    );
                    RuleRuntime {
                        shared,
                        limiter,
                        auth,
                    }
                })
                .collect();
            // Rules that are gone are forgotten.
            kept.retain(|name, _| router.rules().any(|(r, _)| &r.name == name));
            rules
        };
        VsRuntime {
            http1,
            http2,
            sends_proxy_protocol,
            rules,
            error_pages: answer::ErrorPages::new(&config.error_pages),
            request_id: config
                .request_id
                .as_ref()
                .and_then(|n| header::HeaderName::from_bytes(n.as_bytes()).ok()),
            request_rules: Rules::new(&config.request_headers),
            response_rules: Rules::new(&config.response_headers),
            compression: config
                .compression
                .as_ref()
                .map(|c| compress::Policy::new(c, shared.compression.clone())),
            config,
            router,
            shared,
            log,
            cache: None,
            mirror: None,
        }
    }

    /// This virtual server answering through `cache` (an `http`/`https` one the `[cache]`
    /// section serves).
    pub fn with_cache(mut self, cache: Option<Arc<Cache>>) -> Self {
        self.cache = cache;
        self
    }

    /// This virtual server copying bodiless requests to `mirror` (its `mirror` group).
    pub fn with_mirror(mut self, mirror: Option<Arc<Group>>) -> Self {
        self.mirror = mirror;
        self
    }
}

impl VsRuntime {
    /// What header rules can name of a request from `client` with `request_id`.
    fn facts<'a>(
        &'a self,
        client: SocketAddr,
        request_id: Option<&'a HeaderValue>,
    ) -> headers::Facts<'a> {
        headers::Facts {
            client,
            request_id,
            virtual_server: &self.config.name,
            scheme: if self.config.kind == headway_config::adc::VirtualServerKind::Https {
                "https"
            } else {
                "http"
            },
        }
    }

    /// Requests each content-switching rule matched since it was configured, in rule order.
    pub fn rule_hits(&self) -> Vec<u64> {
        self.rules.iter().map(|r| r.shared.hits.get()).collect()
    }

    /// Requests each rule's rate limit refused since the rule was configured, in rule order.
    pub fn rule_limited(&self) -> Vec<u64> {
        self.rules.iter().map(|r| r.shared.limited.get()).collect()
    }

    /// Its shadow traffic, if it has a `mirror` group.
    pub fn mirror_snapshot(&self) -> Option<crate::stats::MirrorSnapshot> {
        let g = self.mirror.as_ref()?;
        let m = &self.shared.mirror;
        Some(crate::stats::MirrorSnapshot {
            group: g.config.name.clone(),
            sent: m.sent.get(),
            skipped: m.skipped.get(),
            failed: m.failed.get(),
            responses: m.responses.snapshot(),
            in_flight: m.in_flight.get(),
        })
    }

    /// Requests each rule's basic authentication refused since the rule was configured, in
    /// rule order.
    pub fn rule_unauthorized(&self) -> Vec<u64> {
        self.rules
            .iter()
            .map(|r| r.shared.unauthorized.get())
            .collect()
    }

    /// Whether a group it sends requests (or tcp connections) to writes PROXY headers to its
    /// servers: then the address each client connected to is looked up at accept.
    pub fn sends_proxy_protocol(&self) -> bool {
        self.sends_proxy_protocol
    }

    /// Compression counters and bypass state; `None` when the virtual server does not compress.
    pub fn compression_snapshot(&self) -> Option<compress::CompressionSnapshot> {
        self.compression.as_ref().map(compress::Policy::snapshot)
    }
}

/// The current virtual server of a listener; swapped on reload, read per request.
#[derive(Debug)]
pub struct Slot {
    /// The virtual server.
    pub vs: arc_swap::ArcSwap<VsRuntime>,
}

/// A client connection's activity, for the idle and header timeouts.
///
/// The I/O path only counts reads and writes and notes whether a request head is partly
/// received (no clock reads per I/O); the connection's watchdog ([`Watch`]) samples these a
/// few times per timeout period and keeps the times itself, so a timeout fires within a
/// quarter of its length after it is due.
#[derive(Debug, Default)]
pub struct ConnActivity {
    /// Reads and writes so far.
    io: AtomicU64,
    /// Whether part of a request head is buffered.
    head_partial: std::sync::atomic::AtomicBool,
    /// Exchanges in flight.
    inflight: AtomicU32,
    /// Close lingering: the connection ends on an error answer, and the client may still be
    /// sending (see [`ClientIo`]'s drop).
    linger: std::sync::atomic::AtomicBool,
    /// The request being answered is the connection's last ([`headers::request_closes`]).
    last_exchange: std::sync::atomic::AtomicBool,
    /// An upgraded connection to run once the HTTP part has ended ([`tunnel`]).
    tunnel: parking_lot::Mutex<Option<tunnel::Tunnel>>,
}

impl ConnActivity {
    /// Asks for a lingering close when the connection ends.
    pub fn linger(&self) {
        self.linger.store(true, Relaxed);
    }

    /// Notes a read or write.
    #[inline]
    fn touch(&self) {
        self.io.fetch_add(1, Relaxed);
    }

    /// An exchange ended.
    pub fn exchange_done(&self) {
        self.inflight.fetch_sub(1, Relaxed);
        self.touch();
    }

    /// Whether the connection's last answer is complete (its exchange ended) and only its last
    /// bytes, the close and the FIN are still to be written, so a client stream may keep them
    /// for the close (see `crate::tls::hold_io`).
    pub fn is_ending(&self) -> bool {
        self.last_exchange.load(Relaxed) && self.inflight.load(Relaxed) == 0
    }
}

/// The watchdog's view of a connection's activity over time.
struct Watch {
    idle: Duration,
    header: Duration,
    quiet: Quiet,
    head_since: Option<Instant>,
}

/// How long a count of reads and writes, sampled from time to time, has not moved: the
/// idle timeouts of client connections ([`Watch`]) and of tunnels ([`tunnel`]).
struct Quiet {
    seen: u64,
    since: Instant,
}

impl Quiet {
    /// Starting now, with the count at `io`.
    fn new(io: u64) -> Self {
        Quiet {
            seen: io,
            since: SystemClock::now(),
        }
    }

    /// How often to sample for a timeout of `timeout`: a quarter of it, so the timeout fires
    /// within a quarter of its length after it is due.
    fn period(timeout: Duration) -> Duration {
        (timeout / 4).max(Duration::from_millis(10))
    }

    /// The time since the count was first seen at its value `io`, at `now`.
    fn quiet_for(&mut self, io: u64, now: Instant) -> Duration {
        if io != self.seen {
            self.seen = io;
            self.since = now;
        }
        now.saturating_duration_since(self.since)
    }
}

impl Watch {
    fn new(idle: Duration, header: Duration) -> Self {
        Watch {
            idle,
            header,
            quiet: Quiet::new(0),
            head_since: None,
        }
    }

    /// How often to sample.
    fn period(&self) -> Duration {
        Quiet::period(self.idle.min(self.header))
    }

    /// Why the connection should close now, if it should.
    fn check(&mut self, a: &ConnActivity) -> Result<(), &'static str> {
        let now = SystemClock::now();
        let quiet = self.quiet.quiet_for(a.io.load(Relaxed), now);
        if a.head_partial.load(Relaxed) {
            let since = *self.head_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= self.header {
                return Err("request header timeout");
            }
        } else {
            self.head_since = None;
        }
        if a.inflight.load(Relaxed) == 0 && quiet >= self.idle {
            return Err("idle");
        }
        Ok(())
    }
}

/// The client stream: framing checks and activity on every read, activity on every write.
///
/// When the connection ends after an error answer (400, 431, a parse error) the client may
/// have sent more than was read; closing a socket with unread data makes the kernel send a
/// reset, which can destroy the answer before the client reads it. So such a connection is
/// closed *lingering*: writing is shut down and what the client still sends is read and
/// dropped for a short while (bounded in time and bytes), as HTTP servers do (RFC 9112 §9.6).
///
/// An HTTP/1 connection's stream also *defers the first write of each answer* by one turn of
/// the scheduler: the first write after a request was read wakes the task and returns
/// `Pending` once, so the connection tasks that are ready run before this one writes, and
/// the answers of one scheduler pass go out close together. A client that is waiting for
/// several answers (a load generator, a browser's parallel connections, a server behind a
/// reverse proxy) is then woken once for many of them instead of once for each. Measured on
/// loopback with wrk (64 keep-alive connections, 128 B answers, one worker), together with
/// the same deferral of requests to servers: 12.9 → 11.9 µs of CPU per request, most of it
/// in the kernel's wake-ups and context switches (HAProxy: 11.5 µs). HTTP/2 connections
/// write the answers of one pass together instead (`h2_server`).
struct ClientIo<S: Stream> {
    inner: Option<Guarded<S>>,
    activity: Arc<ConnActivity>,
    verdict: Arc<Verdict>,
    /// A read brought bytes since the last write: the next write waits one turn.
    answer_pending: bool,
    /// The last request whose partial arrival was acknowledged at once (`Stream::ack_now`);
    /// 0 for none.
    acked: u64,
}

/// Returns `Pending` once, with the task already woken: the task goes to the back of its
/// worker's run queue, so the connection tasks already ready run before it goes on (see
/// [`ClientIo`]). Not `tokio::task::yield_now`: on a current-thread runtime that defers the
/// task until the scheduler has polled the reactor again, which costs an `epoll_wait` of its
/// own whenever this is the only task ready (every request, at a light load).
#[derive(Default)]
pub(crate) struct TakeTurn(bool);

impl std::future::Future for TakeTurn {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A client byte stream: plain TCP, or TLS over it.
pub trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static {
    /// Acknowledges at once what the client has sent (TCP quick-ACK), for a connection about
    /// to wait for the rest of a request. Listeners of `http` and `https` virtual servers
    /// delay acknowledgements so that they ride on the answer (`runtime::bind`), and a
    /// client that leaves Nagle's algorithm on holds the rest of a request (a body written
    /// after its head, the end of a head written in pieces) until what it sent before is
    /// acknowledged: without this, each such request would wait for the kernel's delayed-ACK
    /// timer (40 ms; HAProxy, measured the same way, answers such clients without it).
    /// Nothing by default.
    fn ack_now(&self) {}

    /// Writes `bufs` as the connection's last bytes before a shutdown: a TCP socket keeps a
    /// short tail back (`MSG_MORE`), so the FIN of the shutdown that follows rides on its
    /// segment — one segment, and one wake-up of the client, fewer per closed connection.
    /// The caller must shut the stream down (or drop it) right after. By default a plain
    /// vectored write.
    fn poll_write_last(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.poll_write_vectored(cx, bufs)
    }
}

impl Stream for ClientSocket {
    fn ack_now(&self) {
        ClientSocket::ack_now(self);
    }

    fn poll_write_last(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().poll_send_more(cx, bufs)
    }
}

impl<S: Stream> Stream for rewind::Rewind<S> {
    fn ack_now(&self) {
        self.get_ref().ack_now();
    }

    fn poll_write_last(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(self.get_mut().get_mut()).poll_write_last(cx, bufs)
    }
}

/// A TLS connection's last answer already leaves with its close (`crate::tls::hold_io`), so
/// only the acknowledgement is passed down.
impl Stream for tokio_rustls::server::TlsStream<crate::tls::HoldIo> {
    fn ack_now(&self) {
        self.get_ref().0.ack_now();
    }
}

impl<S: Stream> Drop for ClientIo<S> {
    fn drop(&mut self) {
        // A request the framing check hid from hyper is answered here, after hyper wrote the
        // responses of the requests before it.
        let refused = self.verdict.unanswered();
        if refused.is_some() || self.activity.linger.load(Relaxed) {
            if let Some(g) = self.inner.take() {
                tokio::spawn(linger(g.into_inner(), refused));
            }
        }
    }
}

/// How long a lingering close waits for each read of what the client still sends.
pub(crate) const LINGER_READ: Duration = Duration::from_secs(2);
/// How long a lingering close lasts at most.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(30);
/// How many bytes a lingering close reads and drops at most.
pub(crate) const LINGER_BYTES: usize = 64 << 20;

/// Answers `refused` (if any) with 400 and `Connection: close`, then reads and drops what the
/// client still sends until it stops: its end, [`LINGER_READ`] without a byte, [`LINGER_TIME`]
/// or [`LINGER_BYTES`] (nginx's `lingering_timeout` and `lingering_time` are 5 s and 30 s),
/// then closes. A client uploading a body that its answer left unread (an early answer, a
/// 413) so sends it to its end and reads the answer instead of a reset.
async fn linger<S: Stream>(mut s: S, refused: Option<framing::Violation>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if let Some(v) = refused {
        let body = format!("{}\n", v.message());
        let status = StatusCode::from_u16(v.status()).unwrap_or(StatusCode::BAD_REQUEST);
        let head = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: text/plain; charset=utf-8\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            body.len()
        );
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            s.write_all(format!("{head}{body}").as_bytes()),
        )
        .await;
    }
    let _ = s.shutdown().await;
    // On the heap: a buffer on the stack would be part of this task's future, which tokio
    // moves by value when it spawns it.
    let mut buf = vec![0u8; 16 * 1024];
    let mut left = LINGER_BYTES;
    let deadline = tokio::time::Instant::now() + LINGER_TIME;
    while left > 0 {
        let until = deadline.min(tokio::time::Instant::now() + LINGER_READ);
        match tokio::time::timeout_at(until, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
            _ => return,
        }
    }
}

impl<S: Stream> ClientIo<S> {
    fn stream(&mut self) -> &mut Guarded<S> {
        self.inner.as_mut().expect("taken only on drop")
    }

    /// `Pending` (with the task already woken) if this write is the first of an answer and
    /// has not waited its turn yet; see the type's docs.
    fn defer_write(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if std::mem::take(&mut self.answer_pending) {
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        std::task::Poll::Ready(())
    }
}

impl<S: Stream> tokio::io::AsyncRead for ClientIo<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let me = &mut *self;
        let before = buf.filled().len();
        let r = std::pin::Pin::new(me.stream()).poll_read(cx, buf);
        if r.is_pending() {
            // Waiting for the rest of a request: the client may be holding it back until
            // what it sent is acknowledged (see `Stream::ack_now`). Once per request.
            if let Some(n) = me.stream().in_request() {
                if n != me.acked {
                    me.acked = n;
                    me.stream().get_ref().ack_now();
                }
            }
        }
        if r.is_ready() {
            // Not once the stream stopped carrying requests (an upgraded connection's bytes
            // are relayed as they come).
            me.answer_pending |= buf.filled().len() > before && me.stream().is_checking();
            me.activity.touch();
            let partial = me.stream().in_head();
            me.activity.head_partial.store(partial, Relaxed);
        }
        r
    }
}

impl<S: Stream> tokio::io::AsyncWrite for ClientIo<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::ready!(self.defer_write(cx));
        let r = std::pin::Pin::new(self.stream()).poll_write(cx, buf);
        if r.is_ready() {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::ready!(self.defer_write(cx));
        let r = std::pin::Pin::new(self.stream()).poll_write_vectored(cx, bufs);
        if r.is_ready() {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(self.stream()).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        // Keep the stream writable for the answer to a refused request (see `Drop`).
        if self.verdict.unanswered().is_some() {
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(self.stream()).poll_shutdown(cx)
    }
}

/// One client connection's context, shared by its requests.
struct Conn {
    peer: SocketAddr,
    /// Where the client connected to, when known (see [`Peer::destination`]).
    destination: Option<SocketAddr>,
    /// The client's address as the forwarding headers write it (made once per connection).
    client: headers::Client,
    slot: Arc<Slot>,
    verdict: Arc<Verdict>,
    requests: AtomicU64,
    activity: Arc<ConnActivity>,
    /// The answer being made ends the connection: its request asked for an upgrade that did
    /// not happen, and the framing check stopped at it (what follows such a request may be
    /// another protocol), so no request after it is read.
    close_after: AtomicBool,
    /// Answers to this connection's requests still awaited or read after the client gave
    /// them up (see [`gone_client`]).
    awaited: Arc<std::sync::atomic::AtomicUsize>,
}

impl Conn {
    /// A connection's context with no request seen yet.
    fn new(
        peer: Peer,
        client: headers::Client,
        slot: Arc<Slot>,
        activity: Arc<ConnActivity>,
    ) -> Self {
        Conn {
            peer: peer.addr,
            destination: peer.destination,
            client,
            slot,
            verdict: Arc::default(),
            requests: AtomicU64::new(0),
            activity,
            close_after: AtomicBool::new(false),
            awaited: Arc::default(),
        }
    }
}

/// Serves one accepted cleartext HTTP client connection until it ends, it idles out, or
/// `drain` turns true (then in-flight requests finish and the connection closes). A client
/// that sends nothing within the request header timeout is closed (slow clients, see
/// `crate::listen`). HTTP/2 is recognised by its connection preface (prior knowledge), if the
/// virtual server allows it.
pub async fn serve_connection(
    slot: Arc<Slot>,
    mut stream: ClientSocket,
    peer: Peer,
    drain: watch::Receiver<bool>,
) {
    // TCP_NODELAY (or Nagle, if the virtual server's TCP profile asks for it) was set when the
    // connection was accepted (inherited from the listener: `crate::tcp_profile::apply_accepted`).
    let (allow_h2, limit) = {
        let vs = slot.vs.load();
        (vs.config.http2, vs.config.request_header_timeout)
    };
    let Some((first, h2)) = first_bytes(&mut stream, limit).await else {
        tracing::debug!(client = %peer.addr, "closing a connection that sent nothing");
        return;
    };
    serve_stream(
        slot,
        rewind::Rewind::new(first, stream),
        peer,
        drain,
        allow_h2 && h2,
        Arc::default(),
    )
    .await;
}

/// Serves one client connection over any byte stream (TLS after its handshake: `h2` from the
/// negotiated ALPN protocol), like [`serve_connection`]. `activity` is the connection's, shared
/// with the stream when it wants to know (TLS keeps the last answer for its close).
///
/// HTTP/1 connections are served by the proxy's own loop ([`h1`]) until a request needs hyper;
/// HTTP/2 ones by the own HTTP/2 core (`h2_server`).
pub async fn serve_stream<S: Stream>(
    slot: Arc<Slot>,
    stream: S,
    peer: Peer,
    drain: watch::Receiver<bool>,
    h2: bool,
    activity: Arc<ConnActivity>,
) {
    let vs = slot.vs.load_full();
    let cfg = &vs.config;
    let (idle, header) = (cfg.client_idle_timeout, cfg.request_header_timeout);
    let conn = Conn::new(
        peer,
        headers::Client::new(peer.addr.ip()),
        slot.clone(),
        activity.clone(),
    );
    let c: Pin<Box<dyn Served>> = if h2 {
        Box::pin(h2_server::H2Conn::new(stream, Arc::new(conn), &vs.http2))
    } else {
        let graceful = Arc::new(AtomicBool::new(false));
        let conn = Arc::new(conn);
        let own = h1::Own {
            conn: conn.clone(),
            graceful: graceful.clone(),
            max_head: cfg.max_header_bytes,
            max_headers: cfg.max_headers,
        };
        Box::pin(H1Conn {
            state: H1State::Own(Box::pin(h1::serve(stream, own))),
            graceful,
            conn,
        })
    };
    drop(vs);
    // A tunnel holds the activity (its exchange does) and the activity the tunnel until it is
    // taken below; if this future is dropped before that, the guard breaks the cycle, so the
    // server connection and its slot are not leaked.
    let _unhook = Unhook(&activity);
    // Boxed: this function's own state stays small.
    Box::pin(drive(c, peer.addr, drain, &activity, idle, header)).await;
    // A request that was upgraded (a WebSocket) ended the HTTP part; its tunnel runs here,
    // counted as the connection it is.
    let tunnel = activity.tunnel.lock().take();
    if let Some(t) = tunnel {
        t.run().await;
    }
}

/// Drops a connection's tunnel that was never run (see `serve_stream`).
struct Unhook<'a>(&'a ConnActivity);

impl Drop for Unhook<'_> {
    fn drop(&mut self) {
        drop(self.0.tunnel.lock().take());
    }
}

/// hyper serving `stream` (the rest of an HTTP/1 connection) for `conn` behind the framing
/// check.
fn hyper_conn<S: Stream>(vs: &VsRuntime, stream: S, mut conn: Conn) -> Pin<Box<dyn Served>> {
    let cfg = &vs.config;
    let verdict = Arc::new(Verdict::default());
    let io = ClientIo {
        inner: Some(Guarded::new(
            stream,
            FramingChecker::new(cfg.max_header_bytes, cfg.max_headers),
            verdict.clone(),
        )),
        activity: conn.activity.clone(),
        verdict: verdict.clone(),
        answer_pending: false,
        acked: 0,
    };
    conn.verdict = verdict;
    let conn = Arc::new(conn);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        // Boxed: a request's state machine is kilobytes, and hyper moves the service's future
        // into place by value; a box is copied once.
        let activity = conn.activity.clone();
        let req = req.map(|b| ReqBody::Client(body::ClientBody::new(b, activity)));
        let response = Box::pin(handle(conn.clone(), req));
        async move { Ok::<_, Infallible>(response.await) }
    });
    Box::pin(
        vs.http1
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades(),
    )
}

/// An HTTP/1 connection: the proxy's own loop, then (from the first request it does not take)
/// hyper.
struct H1Conn<S: Stream> {
    state: H1State<S>,
    /// Tells the own loop to finish.
    graceful: Arc<AtomicBool>,
    /// The connection's context, copied for hyper.
    conn: Arc<Conn>,
}

enum H1State<S: Stream> {
    Own(Pin<Box<dyn std::future::Future<Output = h1::Ending<S>> + Send>>),
    Hyper(Pin<Box<dyn Served>>),
}

impl<S: Stream> Served for H1Conn<S> {
    fn poll_served(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        let me = &mut *self;
        loop {
            match &mut me.state {
                H1State::Own(f) => match std::task::ready!(f.as_mut().poll(cx)) {
                    h1::Ending::Closed(r) => return Poll::Ready(r.map_err(Into::into)),
                    h1::Ending::Upgraded(io, rest) => {
                        // The 101 is written: the tunnel gets the stream, the bytes read past
                        // the request first, and runs once this returns (`serve_stream`).
                        let mut slot = me.conn.activity.tunnel.lock();
                        if let Some(t) = slot.as_mut() {
                            t.client = tunnel::Client::Own(Box::new(rewind::Rewind::new(rest, io)));
                        }
                        return Poll::Ready(Ok(()));
                    }
                    h1::Ending::Handoff(io, rest) => {
                        // The requests before were the own loop's; hyper's are numbered
                        // from 1 again, as its framing check numbers them.
                        let c = &me.conn;
                        let peer = Peer {
                            addr: c.peer,
                            destination: c.destination,
                        };
                        let conn =
                            Conn::new(peer, c.client.clone(), c.slot.clone(), c.activity.clone());
                        let vs = c.slot.vs.load();
                        let mut h = hyper_conn(&vs, rewind::Rewind::new(rest, io), conn);
                        if me.graceful.load(Relaxed) {
                            h.as_mut().graceful();
                        }
                        me.state = H1State::Hyper(h);
                    }
                },
                H1State::Hyper(h) => return h.as_mut().poll_served(cx),
            }
        }
    }

    fn graceful(mut self: Pin<&mut Self>) {
        self.graceful.store(true, Relaxed);
        if let H1State::Hyper(h) = &mut self.state {
            h.as_mut().graceful();
        }
    }
}

/// The client's first bytes, read within `limit`, and whether they start the HTTP/2
/// connection preface (RFC 9113 §3.4). `None` when nothing came in time (or the client
/// closed or failed without a byte). Bytes that are a part of the preface so far are waited
/// on until the rest or `limit` (clients send it in one write, so that is rare).
async fn first_bytes(stream: &mut ClientSocket, limit: Duration) -> Option<(Bytes, bool)> {
    use tokio::io::AsyncReadExt as _;
    const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let deadline = tokio::time::Instant::now() + limit;
    let mut buf = bytes::BytesMut::with_capacity(4096);
    loop {
        let read = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await;
        let n = buf.len().min(PREFACE.len());
        let more = matches!(read, Ok(Ok(m)) if m > 0);
        if !more {
            // Time is up, or the stream ended: what came so far is for the HTTP/1 parser.
            return (!buf.is_empty()).then(|| (buf.freeze(), false));
        }
        if buf[..n] != PREFACE[..n] {
            return Some((buf.freeze(), false));
        }
        if n == PREFACE.len() {
            return Some((buf.freeze(), true));
        }
    }
}

/// Why a connection ended early, for the log.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client connection being served, which can be asked to finish gracefully (no new
/// requests; those in flight finish).
trait Served: Send {
    /// Serves; ready when the connection has ended.
    fn poll_served(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>>;
    /// Asks the connection to finish.
    fn graceful(self: Pin<&mut Self>);
}

impl<I, S> Served for hyper::server::conn::http1::UpgradeableConnection<I, S>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = RespBody> + Send,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: Send,
{
    fn poll_served(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        std::future::Future::poll(self, cx).map_err(Into::into)
    }

    fn graceful(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Runs a connection to its end, with the idle and header timeouts and the drain signal.
async fn drive(
    mut c: Pin<Box<dyn Served>>,
    peer: SocketAddr,
    drain: watch::Receiver<bool>,
    activity: &ConnActivity,
    idle: Duration,
    header: Duration,
) {
    let mut draining = *drain.borrow();
    if draining {
        c.as_mut().graceful();
    }
    // The drain signal and the watchdog's timer are polled only when they were woken (see
    // `crate::gate`): this task wakes for every read and write of the connection.
    let mut drained = crate::gate::drained(drain);
    let mut watch = Watch::new(idle, header);
    let mut wait = watch.period();
    let mut tick = Gated::new(Box::pin(tokio::time::sleep(wait)));
    loop {
        tokio::select! {
            biased;
            () = &mut drained, if !draining => {
                draining = true;
                c.as_mut().graceful();
            }
            () = &mut tick => {
                match watch.check(activity) {
                    Ok(()) => {}
                    Err("idle") if !draining => {
                        draining = true;
                        c.as_mut().graceful();
                        wait = Duration::from_secs(1);
                    }
                    Err(why) => {
                        tracing::debug!(client = %peer, reason = why, "closing client connection");
                        return;
                    }
                }
                tick = Gated::new(Box::pin(tokio::time::sleep(wait)));
            }
            r = std::future::poll_fn(|cx| c.as_mut().poll_served(cx)) => {
                if let Err(e) = r {
                    tracing::debug!(client = %peer, error = %e, "client connection ended with an error");
                    activity.linger();
                }
                return;
            }
        }
    }
}

/// What a phase decided. (Moved once per phase; boxing the response would cost an
/// allocation per request for nothing.)
#[allow(clippy::large_enum_variant)]
enum Flow<T> {
    /// Go on with this.
    Continue(T),
    /// Answer the client now.
    Respond(Response<RespBody>),
}

/// A locally made response (error pages).
fn local(status: StatusCode, text: &str, close: bool) -> Response<RespBody> {
    let mut r = Response::new(RespBody::full(Bytes::from(format!("{text}\n")), None));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if close {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r.extensions_mut().insert(answer::OwnError);
    r
}

/// What a group's hash method hashes of a request to `target` (its path and query) with
/// `headers`: the URL, a header's value or a cookie's; `None` for the other methods, and when
/// the request has no such header or cookie (then the pick is round robin).
fn hash_key<'a>(
    group: &headway_config::adc::ServerGroup,
    target: &'a str,
    headers: &'a http::HeaderMap,
) -> Option<&'a [u8]> {
    use headway_lb::select::Method;
    let name = group.hash_by.as_deref();
    match group.method {
        Method::UrlHash => Some(target.as_bytes()),
        Method::HeaderHash => name.and_then(|n| headers.get(n)).map(HeaderValue::as_bytes),
        Method::CookieHash => name.and_then(|n| {
            headers
                .get_all(header::COOKIE)
                .iter()
                .find_map(|v| headway_lb::persist::cookie_value(n, v.as_bytes()))
        }),
        _ => None,
    }
}

/// Methods whose requests may be sent twice (RFC 9110 §9.2.2).
fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

fn version_name(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

async fn handle(conn: Arc<Conn>, req: Request<ReqBody>) -> Response<RespBody> {
    let n = conn.requests.fetch_add(1, Relaxed) + 1;
    let vs = conn.slot.vs.load_full();
    let counters = &vs.shared.counters;
    counters.requests.inc();
    conn.activity.inflight.fetch_add(1, Relaxed);
    let started = SystemClock::now();
    let (mut parts, body) = req.into_parts();
    let request_id = vs
        .request_id
        .as_ref()
        .map(|name| (name, request_id::of_request(name, &mut parts.headers)));
    if headers::request_closes(parts.version, &parts.headers) {
        conn.activity.last_exchange.store(true, Relaxed);
    }
    let mut log = vs.log.as_ref().map(|l| {
        let h = |n: header::HeaderName| {
            parts
                .headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        Box::new((
            l.clone(),
            Entry {
                time: Some(headway_core::clock::wall_clock()),
                client: Some(conn.peer.ip()),
                virtual_server: vs.config.name.clone(),
                method: parts.method.to_string(),
                uri: parts
                    .uri
                    .path_and_query()
                    .map_or("/".to_string(), |p| p.to_string()),
                version: version_name(parts.version).to_string(),
                host: route::host_of(&parts).unwrap_or_default(),
                referer: h(header::REFERER),
                user_agent: h(header::USER_AGENT),
                request_id: request_id
                    .as_ref()
                    .and_then(|(_, id)| id.to_str().ok())
                    .unwrap_or_default()
                    .to_string(),
                ..Entry::default()
            },
        ))
    });
    // Boxed, as `upstream` boxes `exchange`: the compiler keeps an awaited future's state
    // twice in its caller's (once as the call's result, once where it is polled), so each
    // level of nesting doubled the size: a request's future was 21.6 KB, copied whole into
    // hyper's box and then level by level (39 KB of memcpy per request, 10 % of the
    // instructions of a proxied request). Boxed, `handle` is 0.6 KB, `phases` 1.7 KB (with
    // `upstream` in it) and each exchange about 1 KB. (Copying `phases` into its box was
    // still 2 % of the CPU of an HTTP/2 request at 2.5 KB, hence `phases` and `upstream`
    // are `async move` blocks, and the surge queue's wait is boxed.)
    let mut resp = match Box::pin(phases(&conn, &vs, n, parts, body, started, &mut log)).await {
        Flow::Respond(r) | Flow::Continue(r) => r,
    };
    vs.error_pages.dress(&mut resp);
    if let Some((name, id)) = request_id {
        resp.headers_mut().insert(name.clone(), id);
    }
    if conn.close_after.load(Relaxed) && resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    counters.responses.record(resp.status().as_u16());
    // A response made here carries no exchange: end the request's accounting now.
    if let Some(line) = log {
        let (logger, mut e) = *line;
        e.status = resp.status().as_u16();
        e.duration = SystemClock::now().saturating_duration_since(started);
        e.bytes = resp.body().size_hint().exact().unwrap_or(0);
        e.complete = true;
        logger.write(e);
    }
    resp
}

/// The phases of one request; a response made here ends the exchange at once, a response from
/// a server carries its [`Exchange`] (which takes `log`).
///
/// Not an `async fn`, for the reason given at [`upstream`].
#[allow(clippy::manual_async_fn)] // deliberately not an `async fn` (see above)
fn phases<'a>(
    conn: &'a Arc<Conn>,
    vs: &'a Arc<VsRuntime>,
    n: u64,
    mut parts: http::request::Parts,
    body: ReqBody,
    started: Instant,
    log: &'a mut Option<LogLine>,
) -> impl std::future::Future<Output = Flow<Response<RespBody>>> + 'a {
    async move {
        let local_end = |r: Response<RespBody>| {
            conn.activity.exchange_done();
            Flow::Respond(r)
        };
        // 1 admit
        if parts.version != Version::HTTP_2 {
            if let Some(v) = conn.verdict.of_request(n) {
                vs.shared.counters.bad_requests.inc();
                conn.verdict.answered();
                conn.activity.linger();
                tracing::debug!(client = %conn.peer, violation = ?v, "refused an ambiguous request");
                let status = StatusCode::from_u16(v.status()).unwrap_or(StatusCode::BAD_REQUEST);
                return local_end(local(status, v.message(), true));
            }
        }
        if parts.method == Method::CONNECT {
            // Closing: the framing check stopped at this request, as at an upgrade.
            vs.shared.counters.bad_requests.inc();
            return local_end(local(
                StatusCode::NOT_IMPLEMENTED,
                "CONNECT is for forward proxies; this virtual server is a reverse proxy",
                true,
            ));
        }
        // A protocol upgrade (a WebSocket) becomes a tunnel if the virtual server passes upgrades
        // and the server agrees (see `tunnel`); otherwise the request is served as a plain one
        // (its `Upgrade` is hop-by-hop, removed on the way) and the connection ends after it.
        let mut upgrade = None;
        if parts.version != Version::HTTP_2 && parts.headers.contains_key(header::UPGRADE) {
            conn.close_after.store(true, Relaxed);
            if vs.config.upgrades && parts.version == Version::HTTP_11 && body.is_end_stream() {
                if let Some(protocols) = headers::upgrade_asked(&parts.headers) {
                    // hyper's requests carry the way to their stream; the own loop hands its
                    // stream over after writing the 101.
                    let client = match parts.extensions.remove::<hyper::upgrade::OnUpgrade>() {
                        Some(on) => tunnel::Client::Hyper(on),
                        None => tunnel::Client::Awaited,
                    };
                    upgrade = Some((protocols, client));
                }
            }
        }
        // A body its length says is too large is refused before any server is asked (closing:
        // it is not read).
        if let Some(max) = vs.config.max_body_bytes {
            if body.size_hint().lower() > max {
                vs.shared.counters.bad_requests.inc();
                conn.activity.linger();
                return local_end(local(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the request body is larger than this virtual server takes",
                    true,
                ));
            }
        }
        if !vs.shared.limits.admit_request(conn.peer.ip()) {
            vs.shared.counters.rate_limited.inc();
            return local_end(local(
                StatusCode::TOO_MANY_REQUESTS,
                "too many requests from this address",
                false,
            ));
        }
        // 2 route
        let (target, rule) = vs.router.route(&parts, conn.peer.ip());
        if let Some(r) = rule.and_then(|i| vs.rules.get(i)) {
            r.shared.hits.inc();
            if let Some(limiter) = &r.limiter {
                let key = limiter.key(&parts.headers, conn.peer.ip());
                if let Err(wait) = limiter.admit(key, SystemClock::now()) {
                    r.shared.limited.inc();
                    let mut answer = local(
                        StatusCode::TOO_MANY_REQUESTS,
                        "too many requests: this rule's rate limit is reached, try again later",
                        false,
                    );
                    answer.headers_mut().insert(
                        header::RETRY_AFTER,
                        HeaderValue::from(rate_limit::retry_after(wait)),
                    );
                    return local_end(answer);
                }
            }
            if let Some(a) = &r.auth {
                if !a.admits(&parts.headers, SystemClock::now()).await {
                    r.shared.unauthorized.inc();
                    let mut answer = local(
                        StatusCode::UNAUTHORIZED,
                        "a user name and password are required",
                        false,
                    );
                    answer
                        .headers_mut()
                        .insert(header::WWW_AUTHENTICATE, a.challenge());
                    return local_end(answer);
                }
            }
        }
        if let Some(rw) = rule
            .and_then(|i| vs.router.rule(i))
            .and_then(|r| r.path_rewrite.as_ref())
        {
            route::rewrite_path(&mut parts, rw);
        }
        let group = match target {
            Target::Group(group) => group.clone(),
            Target::Answer(answer) => {
                let https = vs.config.kind == headway_config::adc::VirtualServerKind::Https;
                return local_end(match answer.respond(&parts, https) {
                    Ok(r) => r,
                    Err(why) => {
                        vs.shared.counters.bad_requests.inc();
                        local(StatusCode::BAD_REQUEST, why, false)
                    }
                });
            }
        };
        if let Some((_, e)) = log.as_deref_mut() {
            e.group = group.config.name.clone();
        }
        let accepted = vs.compression.as_ref().map(|c| c.accepts(&parts.headers));
        let request_id = vs
            .request_id
            .as_ref()
            .and_then(|n| parts.headers.get(n).cloned());
        let facts = vs.facts(conn.peer, request_id.as_ref());
        // 2½ cache
        let mut fetch = None;
        if let (Some(cache), None) = (&vs.cache, &upgrade) {
            let https = vs.config.kind == headway_config::adc::VirtualServerKind::Https;
            match cache.lookup(&mut parts, https, !body.is_end_stream()).await {
                Lookup::Bypass => {}
                Lookup::Fetch(f) => fetch = Some(f),
                Lookup::Respond(r) => {
                    return local_end(from_cache(vs, &parts.method, accepted, r, &facts))
                }
                Lookup::Stale(r, f) => {
                    tokio::spawn(revalidate(conn.clone(), vs.clone(), group.clone(), f));
                    return local_end(from_cache(vs, &parts.method, accepted, r, &facts));
                }
            }
        }
        if let Some(f) = &fetch {
            f.prepare(&mut parts);
        }
        // 3 + 4 select and upstream, with retries
        let cookie = group.cookie_spec().and_then(|spec| {
            parts
                .headers
                .get_all(header::COOKIE)
                .iter()
                .find_map(|v| spec.find_in(v.as_bytes()).map(<[u8]>::to_vec))
        });
        let method = parts.method.clone();
        let version = parts.version;
        let (protocols, client) = upgrade.unzip();
        if let Some(m) = &vs.mirror {
            if protocols.is_none() && body.is_end_stream() {
                mirror::copy(conn, vs, m, &parts);
            }
        }
        match upstream(
            conn,
            vs,
            &group,
            parts,
            Some(body),
            cookie.as_deref(),
            protocols.as_ref(),
        )
        .await
        {
            Flow::Respond(r) => {
                // A stale object in its stale-if-error window answers instead of the error.
                match fetch.and_then(|f| f.on_error()) {
                    Some(cached) => local_end(from_cache(vs, &method, accepted, cached, &facts)),
                    None => local_end(r),
                }
            }
            Flow::Continue(up) => {
                // 5 respond
                let Upstream {
                    head,
                    lease,
                    source,
                } = up;
                let mut rparts = Response::new(()).into_parts().0;
                rparts.status = head.status;
                rparts.version = version;
                rparts.headers = head.headers;
                // The server agreed to the upgrade: its protocol, kept from the hop-by-hop
                // fields removed below.
                let switched = client
                    .filter(|_| rparts.status == StatusCode::SWITCHING_PROTOCOLS)
                    .map(|c| (c, rparts.headers.get(header::UPGRADE).cloned()));
                // HTTP/1.0 servers close unless they say keep-alive; we never ask them to.
                let close = headers::strip_hop_by_hop(&mut rparts.headers)
                    || head.version == Version::HTTP_10;
                let tee = match fetch.map(|f| f.on_response(rparts.status, &mut rparts.headers)) {
                    None | Some(Reply::Pass(None)) => None,
                    Some(Reply::Pass(Some(tee))) => Some(tee),
                    Some(Reply::Serve(cached)) => {
                        // The server's 304 refreshed the stored object (or its error gave way to
                        // a stale one): the answer comes from the cache.
                        lease
                            .server
                            .counters
                            .responses
                            .record(rparts.status.as_u16());
                        checkin_if_done(&lease, source, close);
                        drop(lease);
                        return local_end(from_cache(vs, &method, accepted, cached, &facts));
                    }
                };
                vs.response_rules.apply(&mut rparts.headers, &facts);
                let stage = match (&vs.compression, accepted) {
                    _ if switched.is_some() => None,
                    (Some(c), Some(accepted)) => c.respond(
                        &method,
                        accepted,
                        rparts.status,
                        &mut rparts.headers,
                        source.remaining(),
                    ),
                    _ => None,
                };
                if let Some(value) = group.cookie_value(lease.index) {
                    if cookie.as_deref() != Some(value.as_bytes()) {
                        if let Some(sc) = group.set_cookie(lease.index) {
                            if let Ok(v) = HeaderValue::from_str(&sc) {
                                rparts.headers.append(header::SET_COOKIE, v);
                            }
                        }
                    }
                }
                let status = rparts.status.as_u16();
                lease.server.counters.responses.record(status);
                let log = log.take().map(|mut line| {
                    line.1.status = status;
                    // A trailers-only gRPC answer (an error before any message) says it here.
                    line.1.grpc_status = access_log::grpc_status(&rparts.headers);
                    line.1.server = group.members[lease.index].name.clone();
                    line
                });
                let exchange = Exchange {
                    lease: Some(lease),
                    reusable: !close,
                    counters: vs.shared.counters.clone(),
                    activity: conn.activity.clone(),
                    started,
                    log,
                    awaited: Some(conn.awaited.clone()),
                };
                // (Only HTTP/1 servers are asked for upgrades.)
                let source = match (switched, source) {
                    (Some((client, protocol)), Source::H1(server_conn, _)) => {
                        return switch_protocols(
                            conn,
                            vs,
                            rparts,
                            protocol,
                            server_conn,
                            client,
                            exchange,
                        )
                    }
                    (_, source) => source,
                };
                Flow::Continue(Response::from_parts(
                    rparts,
                    RespBody::server(source, exchange)
                        .teed(tee)
                        .compressed(stage),
                ))
            }
        }
    }
}

/// The server's `101 Switching Protocols` (`parts`, hop-by-hop fields removed; `protocol`, its
/// `Upgrade`) on its way to the client, and the tunnel that follows (see [`tunnel`]), left
/// for the connection's task.
fn switch_protocols(
    conn: &Conn,
    vs: &VsRuntime,
    mut parts: http::response::Parts,
    protocol: Option<HeaderValue>,
    server: crate::upstream::Conn,
    client: tunnel::Client,
    exchange: Exchange,
) -> Flow<Response<RespBody>> {
    let Some(protocol) = protocol else {
        // RFC 9110 §15.2.2: a 101 names the protocol switched to. The server connection is
        // closed (it is no longer HTTP), the exchange ends with the error.
        drop(server);
        let mut exchange = exchange;
        if let Some(line) = exchange.log.as_mut() {
            line.1.status = StatusCode::BAD_GATEWAY.as_u16();
        }
        exchange.end(false, 0, None);
        return Flow::Respond(local(
            StatusCode::BAD_GATEWAY,
            "the server switched protocols without saying to which",
            true,
        ));
    };
    let h = &mut parts.headers;
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, protocol);
    let tunnel = tunnel::Tunnel {
        client,
        server,
        exchange,
        idle: vs.config.tunnel_idle_timeout,
        open: tunnel::Open::new(vs.shared.counters.clone()),
    };
    *conn.activity.tunnel.lock() = Some(tunnel);
    Flow::Continue(Response::from_parts(
        parts,
        RespBody::full(Bytes::new(), None),
    ))
}

/// An answer from the cache on its way to one client: the response header rules and the
/// client's compression apply as they do to a server's answer.
fn from_cache(
    vs: &VsRuntime,
    method: &Method,
    accepted: Option<compress::Accepted>,
    r: Response<RespBody>,
    facts: &headers::Facts<'_>,
) -> Response<RespBody> {
    let (mut parts, body) = r.into_parts();
    vs.response_rules.apply(&mut parts.headers, facts);
    let stage = match (&vs.compression, accepted) {
        (Some(c), Some(accepted)) => {
            let length = body.size_hint().exact();
            c.respond(method, accepted, parts.status, &mut parts.headers, length)
        }
        _ => None,
    };
    Response::from_parts(parts, body.compressed(stage))
}

/// The background revalidation of a stale object that was just served (stale-while-
/// revalidate): the cache's conditional request to a server of `group`, its answer stored.
async fn revalidate(conn: Arc<Conn>, vs: Arc<VsRuntime>, group: Arc<Group>, fetch: Box<Fetch>) {
    use http_body_util::BodyExt as _;
    let parts = fetch.background_request();
    let up = match upstream(&conn, &vs, &group, parts, None, None, None).await {
        Flow::Continue(up) => up,
        Flow::Respond(_) => {
            drop(fetch.on_error());
            return;
        }
    };
    let mut a = up.background();
    let tee = match fetch.on_response(a.up.head.status, &mut a.headers) {
        Reply::Pass(Some(tee)) => tee,
        Reply::Pass(None) | Reply::Serve(_) => {
            checkin_if_done(&a.up.lease, a.up.source, a.close);
            return;
        }
    };
    // Read the body into the cache.
    let mut body = a.body().teed(Some(tee));
    while let Some(f) = body.frame().await {
        if f.is_err() {
            return;
        }
    }
}

/// A server's answer read in the background (a revalidation, a mirrored copy), its head
/// taken apart.
struct Background {
    /// Its fields, hop-by-hop ones removed.
    headers: http::HeaderMap,
    /// Whether the server connection ends after it.
    close: bool,
    /// The rest of it (its status in `head`, `head.headers` emptied).
    up: Upstream,
}

impl Background {
    /// Its body: nothing of it goes to a client, so nothing is counted on the virtual server;
    /// at its end the server connection goes back to the pool (unless `close`) and the slot is
    /// released.
    fn body(self) -> RespBody {
        let activity = Arc::new(ConnActivity::default());
        activity.inflight.fetch_add(1, Relaxed);
        let exchange = Exchange {
            lease: Some(self.up.lease),
            reusable: !self.close,
            counters: Arc::default(),
            activity,
            started: SystemClock::now(),
            log: None,
            awaited: None,
        };
        RespBody::server(self.up.source, exchange)
    }
}

impl Upstream {
    /// This answer as one read in the background, counted on its server.
    fn background(mut self) -> Background {
        let mut headers = std::mem::take(&mut self.head.headers);
        let close =
            headers::strip_hop_by_hop(&mut headers) || self.head.version == Version::HTTP_10;
        let status = self.head.status.as_u16();
        self.lease.server.counters.responses.record(status);
        Background {
            headers,
            close,
            up: self,
        }
    }
}

/// A server's answer: its head, the slot it came on, and where its body comes from.
struct Upstream {
    head: codec::ResponseHead,
    lease: Lease,
    source: Source,
}

/// Gives an HTTP/1 connection whose answer is read to its end back to its pool (an HTTP/2
/// stream needs nothing: its connection stays with the worker).
fn checkin_if_done(lease: &Lease, source: Source, close: bool) {
    if let Source::H1(c, decoder) = source {
        if !close && decoder.is_done() {
            lease.server.pool.checkin(c, SystemClock::now());
        }
    }
}

/// Why one attempt at a server failed, and whether another may follow.
enum Attempt {
    /// Nothing reached the server (connect failed): any request may be tried again.
    NotSent(StatusCode, &'static str),
    /// The server's connection turned the request away untouched — a pooled connection found
    /// closed before a byte was written, an HTTP/2 stream refused or past a graceful GOAWAY
    /// — and it can be sent again as it was: sent again (to any server, this one too)
    /// without counting against `retries`, up to [`MAX_UNTAKEN`] times. That is no failure
    /// of the server: a server that closes its connections so every few requests (NGINX's
    /// `keepalive_requests`) would otherwise use a request's retries up while it is busy.
    Untaken(StatusCode, &'static str),
    /// The request was sent (or partly) and no response byte came back: only a request that
    /// may be sent twice is tried again.
    NoResponse(StatusCode, &'static str),
    /// Give up with this answer.
    Fail(StatusCode, &'static str),
}

/// How many times a request the server's connection turned away untouched is sent again
/// ([`Attempt::Untaken`]), besides the group's `retries`.
const MAX_UNTAKEN: u32 = 8;

/// Phases 3 and 4: choose a server, send, get the response header; retry as configured.
//
// Not an `async fn`: those move their arguments into locals of the future, so it held `parts`
// (224 bytes) and `body` twice; an `async move` block owns them once. Futures are copied
// whole each time one is boxed, and every request boxes this one (inside `phases`).
#[allow(clippy::manual_async_fn)] // deliberately not an `async fn` (see above)
fn upstream<'a>(
    conn: &'a Arc<Conn>,
    vs: &'a Arc<VsRuntime>,
    group: &'a Arc<Group>,
    mut parts: http::request::Parts,
    body: Option<ReqBody>,
    cookie: Option<&'a [u8]>,
    upgrade: Option<&'a HeaderValue>,
) -> impl std::future::Future<Output = Flow<Upstream>> + 'a {
    async move {
        let cfg = &group.config;
        // The request as servers see it.
        let host = if vs.config.forwarded {
            route::host_of(&parts)
        } else {
            None
        };
        if !parts.headers.contains_key(header::HOST) {
            if let Some(a) = parts.uri.authority() {
                if let Ok(v) = HeaderValue::from_str(a.as_str()) {
                    parts.headers.insert(header::HOST, v);
                }
            }
        }
        let h2 = cfg.protocol == headway_config::adc::UpstreamProtocol::Http2;
        // A client that takes trailers (gRPC) says so in `TE`, a hop-by-hop field: an HTTP/2
        // server is told again (`te: trailers`, the one `TE` HTTP/2 allows).
        let trailers = h2
            && parts.headers.get_all(header::TE).iter().any(|v| {
                headers::connection_options(std::iter::once(v))
                    .any(|t| t.eq_ignore_ascii_case("trailers"))
            });
        headers::strip_hop_by_hop(&mut parts.headers);
        // The client's `Expect: 100-continue` was answered on the client side (hyper sends the 100
        // when the body is read); the server gets the body at once.
        parts.headers.remove(header::EXPECT);
        headers::add_forwarding(
            &mut parts.headers,
            Forwarding {
                xff: vs.config.x_forwarded_for,
                xfp: vs.config.x_forwarded_proto,
                forwarded: vs.config.forwarded,
            },
            &conn.client,
            if vs.config.kind == headway_config::adc::VirtualServerKind::Https {
                "https"
            } else {
                "http"
            },
            host.as_deref(),
        );
        if !vs.request_rules.is_empty() {
            let id = vs
                .request_id
                .as_ref()
                .and_then(|n| parts.headers.get(n).cloned());
            let facts = vs.facts(conn.peer, id.as_ref());
            vs.request_rules.apply(&mut parts.headers, &facts);
        }
        // HTTP/2 servers are not asked for upgrades (RFC 8441's extended CONNECT is another
        // exchange): the request is served as a plain one.
        let upgrade = upgrade.filter(|_| !h2);
        if let Some(protocols) = upgrade {
            let h = &mut parts.headers;
            h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            h.insert(header::UPGRADE, protocols.clone());
        }
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let framing = match &body {
            None => codec::RequestFraming::Empty,
            Some(b) if b.is_end_stream() => codec::RequestFraming::Empty,
            Some(b) => match b.size_hint().exact() {
                Some(n) => codec::RequestFraming::Length(n),
                None => codec::RequestFraming::Chunked,
            },
        };
        let mut head = bytes::BytesMut::new();
        let h2_request = if h2 {
            // The fields move to the HTTP/2 request (nothing reads them in `parts` from here).
            let fields = std::mem::take(&mut parts.headers);
            let length = match framing {
                codec::RequestFraming::Length(n) => Some(n),
                _ => None,
            };
            let r =
                upstream_h2::H2Request::new(&parts, fields, length, (cfg.tls.is_some(), trailers));
            Some(r)
        } else {
            codec::write_request_head(&mut head, &parts.method, target, &parts.headers, framing);
            None
        };
        // Only the hash methods read a key.
        let fields = h2_request.as_ref().map_or(&parts.headers, |r| &r.headers);
        let hash_key = hash_key(cfg, target, fields);
        let replayable = idempotent(&parts.method) && framing == codec::RequestFraming::Empty;
        let mut body = body;
        // A body to an HTTP/2 server is kept as it is sent, so that a stream the server does not
        // take (refused, or past a graceful GOAWAY) is sent again with it instead of failing.
        if h2_request.is_some() {
            body = body.map(|b| match b {
                ReqBody::Empty => ReqBody::Empty,
                b => ReqBody::Replay(replay::Replay::new(b)),
            });
        }
        // The answer if every try fails: the last try's.
        let mut last: (StatusCode, &str);
        // The PROXY header of the group's new server connections: this client connection's.
        let proxy = cfg
            .send_proxy_protocol
            .map(|version| crate::upstream::ProxyHeader {
                version,
                client: conn.peer,
                destination: conn.destination.unwrap_or(vs.config.listen),
            });
        let mut tried = 0u64;
        let (mut attempt, mut untaken) = (0, 0);
        loop {
            let lease = match group
                .acquire(Affinity {
                    client: Some(conn.peer.ip()),
                    cookie,
                    hash_key,
                    exclude: tried,
                })
                .await
            {
                Ok(l) => l,
                Err(Unavailable::NoServer) => {
                    return Flow::Respond(local(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &format!("no server of group {} is available", cfg.name),
                        false,
                    ))
                }
                Err(Unavailable::Busy) => {
                    return Flow::Respond(local(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &format!("every server of group {} is busy; try again", cfg.name),
                        false,
                    ))
                }
            };
            let server = lease.server.clone();
            tried |= 1u64.checked_shl(lease.index as u32).unwrap_or(0);
            let outcome = match &h2_request {
                Some(req) => {
                    Box::pin(upstream_h2::exchange(
                        &server,
                        cfg,
                        req,
                        &mut body,
                        vs.config.max_body_bytes,
                        (&vs.shared.counters, &conn.awaited),
                    ))
                    .await
                }
                None => Box::pin(exchange(
                    (&server, proxy),
                    cfg,
                    &head,
                    &mut body,
                    (framing, vs.config.max_body_bytes),
                    (&parts.method, upgrade.is_some()),
                    (&vs.shared.counters, &conn.awaited),
                ))
                .await
                .map(|(c, h, decoder)| (h, Source::H1(c, decoder))),
            };
            let retry = attempt < cfg.retries;
            match outcome {
                // An answer the group retries (a server saying it is restarting or overloaded):
                // its connection is closed unread and another server asked, while tries remain.
                Ok((h, _)) if retry && replayable && cfg.retry_on.contains(&h.status.as_u16()) => {
                    tracing::debug!(
                        group = %cfg.name, server = %server.address, status = h.status.as_u16(),
                        "answer retried on another server"
                    );
                    last = (
                        StatusCode::BAD_GATEWAY,
                        "every server tried answered with an error",
                    );
                }
                Ok((h, source)) => {
                    return Flow::Continue(Upstream {
                        head: h,
                        lease,
                        source,
                    })
                }
                Err(Attempt::Untaken(..)) if untaken < MAX_UNTAKEN => {
                    untaken += 1;
                    server.counters.resent.inc();
                    // Not this server's failure: it may be chosen again.
                    tried &= !1u64.checked_shl(lease.index as u32).unwrap_or(0);
                    continue;
                }
                Err(Attempt::NotSent(status, why) | Attempt::Untaken(status, why)) => {
                    last = (status, why);
                }
                Err(Attempt::NoResponse(status, why)) if replayable => last = (status, why),
                Err(Attempt::NoResponse(status, why) | Attempt::Fail(status, why)) => {
                    // A body cut off at the limit leaves the rest unread: the connection ends.
                    let too_large = status == StatusCode::PAYLOAD_TOO_LARGE;
                    if too_large {
                        vs.shared.counters.bad_requests.inc();
                    }
                    return Flow::Respond(local(status, why, too_large));
                }
            }
            if !retry {
                break;
            }
            server.counters.retries.inc();
            attempt += 1;
        }
        Flow::Respond(local(last.0, last.1, false))
    }
}

/// One attempt on one server (its new connections starting with `proxy`'s PROXY header):
/// connection, request, response head.
async fn exchange(
    (server, proxy): (
        &Arc<crate::group::ServerState>,
        Option<crate::upstream::ProxyHeader>,
    ),
    cfg: &headway_config::adc::ServerGroup,
    head: &[u8],
    body: &mut Option<ReqBody>,
    (framing, max_body): (codec::RequestFraming, Option<u64>),
    (method, upgrade): (&Method, bool),
    (vs_counters, awaited): (&VirtualServerCounters, &Arc<std::sync::atomic::AtomicUsize>),
) -> Result<(crate::upstream::Conn, codec::ResponseHead, codec::Decoder), Attempt> {
    use tokio::io::AsyncWriteExt as _;
    let mut c = match server
        .pool
        .checkout(server.address, cfg.connect_timeout, &server.counters, proxy)
        .await
    {
        Ok(c) => c,
        Err(e) => return Err(connect_failed(server, cfg, &e)),
    };
    let reused = c.reused;
    // A failure that is the server's, counted by passive health when `counts` (a reused
    // connection that closed without an answer raced the server's idle timeout: not one).
    let failed = |why: &str| {
        server.counters.failures.inc();
        // A connection that broke without an answer usually means the server went away:
        // its other idle connections are suspect too, so none of them gets a request that
        // could not be retried.
        server.pool.clear();
        tracing::debug!(group = %cfg.name, server = %server.address, reason = why, "request to server failed");
    };
    let server_failed = |why: &str, counts: bool| {
        if counts {
            crate::group::passive_outcome(server, cfg, false);
        }
        failed(why);
    };
    let sent_at = SystemClock::now();
    let deadline = tokio::time::Instant::from_std(sent_at) + cfg.response_timeout;
    // Send: the head, then the body (as the client sends it). The head waits one turn of the
    // scheduler first, so that the requests of the connections served in one pass reach the
    // server together and wake it once (as the answers to clients do, see `ClientIo`).
    TakeTurn::default().await;
    if let Err(e) = c.stream.write_all(head).await {
        failed(&e.to_string());
        return Err(if c.reused {
            Attempt::Untaken(StatusCode::BAD_GATEWAY, "the server closed the connection")
        } else {
            Attempt::NoResponse(StatusCode::BAD_GATEWAY, "the server closed the connection")
        });
    }
    // The server answered and closed before it took the whole body (see `upload`).
    let mut cut = false;
    if framing != codec::RequestFraming::Empty {
        let Some(mut b) = body.take() else {
            return Err(Attempt::Fail(
                StatusCode::BAD_GATEWAY,
                "the request body was lost",
            ));
        };
        match upload::send_body(
            (&mut c.stream, &mut c.buf),
            &mut b,
            (framing, max_body),
            vs_counters,
            &server.counters,
        )
        .await
        {
            Ok(sent) => cut = sent == upload::Sent::Cut,
            Err(e) => {
                // The server has part of a body: its connection is dropped here.
                let (status, why) = e.answer();
                if e == BodyError::Server {
                    failed(why);
                }
                return Err(Attempt::Fail(status, why));
            }
        }
    }
    // TLS may hold back the request's last bytes until flushed (a no-op for plain TCP).
    if cut {
        tracing::debug!(group = %cfg.name, server = %server.address, "the server closed before taking the whole request body");
    } else if let Err(e) = c.stream.flush().await {
        failed(&e.to_string());
        return Err(Attempt::NoResponse(
            StatusCode::BAD_GATEWAY,
            "the server closed the connection",
        ));
    }
    // Receive the head (skipping 1xx interim answers). The request is sent whole: a client
    // that leaves while the answer is awaited lets it finish on the connection, which then
    // goes back to the pool (see `gone_client`), unless it asked for an upgrade.
    let mut pending = gone_client::PendingAnswer::new(c, method, server, deadline, awaited);
    pending.armed = !upgrade;
    let read = async {
        let Some(c) = pending.conn.as_mut() else {
            return Err((false, "no connection".to_string()));
        };
        read_response_head(c).await
    };
    let waited = tokio::time::timeout_at(deadline, read).await;
    pending.armed = false;
    let Some(c) = pending.conn.take() else {
        return Err(Attempt::Fail(
            StatusCode::BAD_GATEWAY,
            "the server connection was lost",
        ));
    };
    let mut h = match waited {
        Ok(Ok(h)) => h,
        Ok(Err((partial, why))) => {
            server_failed(&why, !reused);
            return Err(if partial {
                Attempt::Fail(
                    StatusCode::BAD_GATEWAY,
                    "the server sent an invalid response",
                )
            } else {
                Attempt::NoResponse(
                    StatusCode::BAD_GATEWAY,
                    "the server closed the connection without a response",
                )
            });
        }
        Err(_) => {
            server_failed("response timeout", true);
            return Err(Attempt::Fail(
                StatusCode::GATEWAY_TIMEOUT,
                "the server did not answer in time",
            ));
        }
    };
    if h.status == StatusCode::SWITCHING_PROTOCOLS && !upgrade {
        server_failed(
            "101 Switching Protocols to a request that asked for no upgrade",
            true,
        );
        return Err(Attempt::Fail(
            StatusCode::BAD_GATEWAY,
            "the server switched protocols unasked",
        ));
    }
    let decoder = match codec::response_framing(method, h.status, &h.headers) {
        Ok(f) => codec::Decoder::new(f),
        Err(e) => {
            server_failed(&e.to_string(), true);
            return Err(Attempt::Fail(
                StatusCode::BAD_GATEWAY,
                "the server sent an invalid response",
            ));
        }
    };
    if cut {
        // The server's answer before its close: relayed, and the connection not reused.
        h.headers
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    crate::group::passive_outcome(server, cfg, true);
    let rt = SystemClock::now().saturating_duration_since(sent_at);
    server.counters.latency.record(rt);
    server.observe_response_time(rt);
    Ok((c, h, decoder))
}

/// Reads the final answer's head off `c` (interim 1xx answers skipped; a `101` is final):
/// on failure whether part of an answer had come, and why.
async fn read_response_head(
    c: &mut crate::upstream::Conn,
) -> Result<codec::ResponseHead, (bool, String)> {
    use tokio::io::AsyncReadExt as _;
    loop {
        if !c.buf.is_empty() {
            match codec::parse_response_head(&mut c.buf, &mut c.names) {
                Ok(Some(h))
                    if h.status.is_informational()
                        && h.status != StatusCode::SWITCHING_PROTOCOLS =>
                {
                    continue
                }
                Ok(Some(h)) => return Ok(h),
                Ok(None) => {}
                Err(e) => return Err((true, e.to_string())),
            }
        }
        c.buf.reserve(8192);
        match c.stream.read_buf(&mut c.buf).await {
            Ok(0) => {
                let why = "the server closed the connection".to_string();
                return Err((!c.buf.is_empty(), why));
            }
            Ok(_) => {}
            Err(e) => return Err((!c.buf.is_empty(), e.to_string())),
        }
    }
}

/// A connection to `server` could not be had: counted (passive health too), its idle
/// connections closed, and the attempt's answer (any request may be tried elsewhere).
fn connect_failed(
    server: &crate::group::ServerState,
    cfg: &headway_config::adc::ServerGroup,
    e: &crate::upstream::ConnectError,
) -> Attempt {
    server.counters.connect_failures.inc();
    server.pool.clear();
    crate::group::passive_outcome(server, cfg, false);
    tracing::debug!(group = %cfg.name, server = %server.address, error = %e, "connect failed");
    match e {
        crate::upstream::ConnectError::Timeout(_) => Attempt::NotSent(
            StatusCode::GATEWAY_TIMEOUT,
            "connecting to the server timed out",
        ),
        _ => Attempt::NotSent(
            StatusCode::SERVICE_UNAVAILABLE,
            "no server could be reached",
        ),
    }
}

/// Why a request body did not reach its server whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyError {
    /// The client's body was cut short or malformed.
    Client,
    /// It is larger than the virtual server's `max_body_bytes`.
    TooLarge,
    /// Writing to the server failed.
    Server,
}

impl BodyError {
    /// The answer to the client.
    fn answer(self) -> (StatusCode, &'static str) {
        match self {
            BodyError::Client => (
                StatusCode::BAD_GATEWAY,
                "the client's request body was cut short or malformed",
            ),
            BodyError::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is larger than this virtual server takes",
            ),
            BodyError::Server => (StatusCode::BAD_GATEWAY, "writing to the server failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rules_state_is_kept_while_its_setting_reads_the_same() {
        let slot = parking_lot::Mutex::new(None);
        let made = std::sync::atomic::AtomicU32::new(0);
        let make = |s: &u32| {
            made.fetch_add(1, Relaxed);
            (*s, made.load(Relaxed))
        };
        let first = kept_or_made(&slot, Some(&5), |t: &(u32, u32)| &t.0, make).unwrap();
        let again = kept_or_made(&slot, Some(&5), |t: &(u32, u32)| &t.0, make).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let other = kept_or_made(&slot, Some(&6), |t: &(u32, u32)| &t.0, make).unwrap();
        assert_eq!(*other, (6, 2));
        assert!(kept_or_made(&slot, None, |t: &(u32, u32)| &t.0, make).is_none());
        assert!(slot.lock().is_none());
    }
}
