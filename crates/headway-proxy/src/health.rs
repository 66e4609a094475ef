//! Health monitors: background tasks that check each server of a group and publish its
//! health in its [`ServerState`].
//!
//! One task per (group, server) with a monitor, started with a config generation and stopped
//! when the next one replaces it (the `stop` signal). A check is a TCP connect (with the
//! monitor's `send`, and its `expect` looked for in the server's first 4 KiB, if it has them:
//! a Redis `PING` / `+PONG`, an SMTP banner), or an HTTP/1.1 request whose status and first
//! 64 KiB of body are judged by the monitor's [`headway_lb::health::HttpExpect`] (HTTP/2 to a
//! group that speaks it), or a gRPC health check ([`grpc`]: `grpc.health.v1.Health/Check` over
//! HTTP/2 must answer `SERVING` with `grpc-status` 0); each result
//! feeds the server's rise/fall state machine ([`ServerState::record_check`]). The first check
//! runs at once, the next after `interval`. In a group with TLS to its servers, an HTTP check
//! is made over TLS, verified as requests are (a server whose certificate does not verify is
//! down); a TCP check stays cleartext. In a group that sends PROXY headers to its servers,
//! every check starts with one that names no client (v1 `UNKNOWN`, v2 `LOCAL`: the check's own
//! connection), as such servers expect a header on every connection. Transitions are logged at
//! `warn` (down) and `info` (up).

pub mod grpc;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use headway_config::adc::{
    HttpMonitor, Monitor, MonitorKind, ServerGroup, TcpCheck, UpstreamProtocol, TCP_EXPECT_WINDOW,
};
use headway_lb::health::Health;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::group::ServerState;
use crate::tls::Connector;

/// Most body bytes an HTTP check reads.
const BODY_LIMIT: usize = 64 * 1024;

/// Starts the monitor of one server of `group`; it runs until `stop` changes or is dropped.
/// Its checks start with the PROXY header if the group's servers get one, and an HTTP check
/// speaks the group's protocol (HTTP/1.1, or HTTP/2 to an `h2` group's servers).
pub fn spawn(
    monitor: Monitor,
    group: &ServerGroup,
    server: String,
    state: Arc<ServerState>,
    tls: Option<Arc<Connector>>,
    mut stop: watch::Receiver<()>,
) {
    let proxy = group.send_proxy_protocol;
    let h2 = group.protocol == UpstreamProtocol::Http2;
    let group = group.name.clone();
    // The server's address, or its health port.
    let checked = match monitor.port {
        Some(port) => SocketAddr::new(state.address.ip(), port),
        None => state.address,
    };
    tokio::spawn(async move {
        let target = Target {
            addr: checked,
            host: state.host.as_deref(),
            tls: tls.as_deref(),
            proxy,
            h2,
        };
        loop {
            let result = tokio::time::timeout(monitor.timeout, check(&monitor.kind, &target)).await;
            let outcome = match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(why)) => Err(why),
                Err(_) => Err("timed out".to_string()),
            };
            if let Some(h) = state.record_check(outcome.is_ok(), monitor.rise, monitor.fall) {
                match h {
                    Health::Down => tracing::warn!(
                        group = %group, server = %server, monitor = %monitor.name,
                        reason = %outcome.as_ref().err().map_or("", String::as_str),
                        "server is down"
                    ),
                    Health::Up => tracing::info!(
                        group = %group, server = %server, monitor = %monitor.name,
                        "server is up"
                    ),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(monitor.interval) => {}
                _ = stop.changed() => return,
            }
        }
    });
}

/// What a monitor checks.
struct Target<'a> {
    /// The address connected to.
    addr: SocketAddr,
    /// The server's DNS name in the config, if any.
    host: Option<&'a str>,
    /// TLS to the server (its group's).
    tls: Option<&'a Connector>,
    /// The PROXY header each check starts with.
    proxy: Option<crate::proxy_protocol::Version>,
    /// Whether HTTP checks are HTTP/2 (prior knowledge, or ALPN over TLS).
    h2: bool,
}

impl Target<'_> {
    /// The `Host` (or `:authority`) of a check that names none: the server's name or address,
    /// with the port checked.
    fn default_host(&self) -> String {
        match self.host {
            Some(name) => format!("{name}:{}", self.addr.port()),
            None => self.addr.to_string(),
        }
    }
}

/// One check; `Err` says why it failed.
async fn check(kind: &MonitorKind, t: &Target<'_>) -> Result<(), String> {
    let (addr, tls, proxy) = (t.addr, t.tls, t.proxy);
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    if let Some(version) = proxy {
        use tokio::io::AsyncWriteExt as _;
        stream
            .write_all(&crate::proxy_protocol::encode_local(version))
            .await
            .map_err(|e| format!("PROXY header: {e}"))?;
    }
    if let MonitorKind::Tcp(exchange) = kind {
        return tcp_check(exchange, stream).await;
    }
    // The HTTP kinds: over TLS if the group's servers speak it.
    let stream = match tls {
        None => crate::tls::ServerStream::from(stream),
        Some(tls) => tls
            .connect(stream, addr, t.host)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?,
    };
    match kind {
        MonitorKind::Http(h) => http_check(h, t, stream).await,
        MonitorKind::Grpc { service } => grpc_check(service, t, stream).await,
        // A kind this build does not know: the connect decides.
        _ => Ok(()),
    }
}

/// A TCP monitor's exchange on a connected `stream`: its `send`, then its `expect` among the
/// server's first bytes.
async fn tcp_check(t: &TcpCheck, mut stream: TcpStream) -> Result<(), String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    if let Some(send) = &t.send {
        stream
            .write_all(send.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
    }
    let Some(expect) = &t.expect else {
        return Ok(());
    };
    let mut got = Vec::with_capacity(256);
    let mut buf = [0u8; 1024];
    loop {
        if got.windows(expect.len()).any(|w| w == expect.as_bytes()) {
            return Ok(());
        }
        if got.len() >= TCP_EXPECT_WINDOW {
            break;
        }
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n.min(TCP_EXPECT_WINDOW - got.len())]);
    }
    Err(format!(
        "`{expect}` not in the server's first {} bytes: {:?}",
        got.len(),
        String::from_utf8_lossy(&got[..got.len().min(64)])
    ))
}

/// `req` on a new HTTP/2 connection over `stream`: its answer, and the connection's task (for
/// the caller to end once the answer is read).
async fn h2_request<S, B>(
    stream: S,
    req: http::Request<B>,
) -> Result<
    (
        hyper::Result<http::Response<hyper::body::Incoming>>,
        tokio::task::JoinHandle<hyper::Result<()>>,
    ),
    String,
>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let conn = tokio::spawn(conn);
    Ok((sender.send_request(req).await, conn))
}

/// A gRPC health check on a connected `stream`: `Health/Check` for `service` over HTTP/2; the
/// server is healthy when the call succeeds (`grpc-status` 0) and says `SERVING`.
async fn grpc_check<S>(service: &str, t: &Target<'_>, stream: S) -> Result<(), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let host = t.default_host();
    let scheme = if t.tls.is_some() { "https" } else { "http" };
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("{scheme}://{host}{}", grpc::CHECK_PATH))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .header(http::header::USER_AGENT, "headway-monitor")
        .body(http_body_util::Full::new(grpc::check_request(service)))
        .map_err(|e| format!("request: {e}"))?;
    let (resp, conn) = h2_request(stream, req).await?;
    let outcome = async {
        let resp = resp.map_err(|e| format!("request: {e}"))?;
        if resp.status() != http::StatusCode::OK {
            return Err(format!("HTTP status {}", resp.status().as_u16()));
        }
        let (parts, body) = resp.into_parts();
        let got = Limited::new(body, BODY_LIMIT)
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?;
        // The call's status: in the trailers, or in the head of a trailers-only answer.
        let field = |name: &str| {
            got.trailers()
                .and_then(|t| t.get(name))
                .or_else(|| parts.headers.get(name))
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        match field("grpc-status").as_deref() {
            Some("0") => {}
            Some(code) => {
                let message = field("grpc-message")
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default();
                return Err(format!("grpc-status {code}{message}"));
            }
            None => return Err("the answer has no grpc-status".into()),
        }
        match grpc::serving_status(&got.to_bytes())? {
            grpc::ServingStatus::Serving => Ok(()),
            other => Err(format!("the service is {other:?}, not Serving")),
        }
    }
    .await;
    conn.abort();
    outcome
}

async fn http_check<S>(h: &HttpMonitor, t: &Target<'_>, stream: S) -> Result<(), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // The monitor's Host, else the server's name or address with the port checked.
    let host = h.host.clone().unwrap_or_else(|| t.default_host());
    let req = http::Request::builder()
        .method(h.method.as_str())
        .header(http::header::USER_AGENT, "headway-monitor");
    let (resp, conn) = if t.h2 {
        // HTTP/2: the Host is the authority of an absolute target.
        let scheme = if t.tls.is_some() { "https" } else { "http" };
        let req = req
            .uri(format!("{scheme}://{host}{}", h.path))
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("request: {e}"))?;
        h2_request(stream, req).await?
    } else {
        let req = req
            .uri(h.path.as_str())
            .header(http::header::HOST, host)
            .header(http::header::CONNECTION, "close")
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("request: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let conn = tokio::spawn(conn);
        let resp = sender.send_request(req).await;
        (resp, conn)
    };
    let resp = resp.map_err(|e| format!("request: {e}"))?;
    let status = resp.status().as_u16();
    let body = if h.expect.body_contains.is_some() {
        match Limited::new(resp.into_body(), BODY_LIMIT).collect().await {
            Ok(b) => b.to_bytes(),
            // A body over the limit: judge the part the limit let through is not possible
            // with `Limited`, so treat it as not containing the text.
            Err(e) => return Err(format!("body: {e}")),
        }
    } else {
        Bytes::new()
    };
    conn.abort();
    h.expect
        .check(status, &body)
        .map_err(|e| format!("{e} (status {status})"))
}
