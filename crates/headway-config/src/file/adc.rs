//! The ADC sections of the file schema: `[runtime]`, `[[monitor]]`, `[[server_group]]` and
//! `[[virtual_server]]`, as written. `crate::adc` validates them into [`crate::AdcConfig`].
//!
//! Every field's doc gives its meaning, unit and default; `docs/config.md` is generated from the
//! same words (keep them in step).

use std::collections::BTreeMap;
use std::path::PathBuf;

use headway_core::ByteSize;
use serde::Deserialize;
use toml::Spanned;

use super::DurationValue;

/// `[runtime]`: the process's data-plane threads and shutdown.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSection {
    /// Worker threads of the data plane, 1–256. With virtual servers: the ADC's workers, each
    /// a thread with its own event loop and its own socket of every listening address
    /// (`SO_REUSEPORT`; the kernel spreads connections over them), a connection staying on the
    /// worker that accepted it; default one per CPU. Without: the WAN optimizer's threads,
    /// default 2.
    pub workers: Option<Spanned<u32>>,
    /// On SIGTERM/SIGINT, how long established connections and in-flight requests may take to
    /// finish before they are cut (`"30s"`). Default: `"30s"`.
    pub shutdown_grace: Option<Spanned<DurationValue>>,
}

/// `[[monitor]]`: a health check that server groups name in `monitor`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorSection {
    /// The monitor's name, used by `server_group.monitor`: letters, digits, `-`, `_`, `.`.
    /// Required.
    pub name: Spanned<String>,
    /// `"tcp"` (a TCP connect succeeds, and with `send` / `expect` the server answers as
    /// expected), `"http"` (an HTTP request gets an expected answer: HTTP/1.1, or HTTP/2 to a
    /// group with `protocol = "h2"`) or `"grpc"` (the gRPC health checking protocol's
    /// `grpc.health.v1.Health/Check` over HTTP/2 answers `SERVING`, as Kubernetes' gRPC probes
    /// and NGINX Plus's `health_check type=grpc` ask; over TLS the group needs
    /// `protocol = "h2"`). Required.
    pub kind: Spanned<String>,
    /// Time between two checks of one server (`"5s"`). Default: `"5s"`.
    pub interval: Option<Spanned<DurationValue>>,
    /// How long one check may take before it counts as failed (`"2s"`); at most `interval`.
    /// Default: `"2s"` or `interval`, whichever is shorter.
    pub timeout: Option<Spanned<DurationValue>>,
    /// Consecutive successes that bring a down server up, 1–100. Default: 2.
    pub rise: Option<Spanned<u32>>,
    /// Consecutive failures that take an up server down, 1–100. Default: 3.
    pub fall: Option<Spanned<u32>>,
    /// The port checked, for servers whose health is served on another port than their
    /// traffic (a management or status port), 1–65535. Default: each server's own port.
    pub port: Option<Spanned<u32>>,
    /// TCP only: text sent once connected, as a TOML string with its escapes
    /// (`"PING\r\n"` for Redis, `"QUIT\r\n"`); NetScaler's TCP-ECV and HAProxy's `tcp-check
    /// send`. Default: nothing sent.
    pub send: Option<Spanned<String>>,
    /// TCP only: text the server's first bytes must contain (`"+PONG"`, an SMTP `"220"`
    /// banner, `"SSH-"`); up to 4 KiB are read within `timeout`. Default: none (the connect
    /// alone decides).
    pub expect: Option<Spanned<String>>,
    /// HTTP only: the request method. Default: `"GET"`.
    pub method: Option<Spanned<String>>,
    /// HTTP only: the request path, starting with `/`. Default: `"/"`.
    pub path: Option<Spanned<String>>,
    /// HTTP only: the `Host` header. Default: the address checked (the server's, with the
    /// monitor's `port` if it has one; a server given by DNS name is checked with its name).
    pub host: Option<Spanned<String>>,
    /// HTTP only: the statuses that count as healthy: `"200-399"`, `"200"`, `"200,204,300-399"`.
    /// Default: `"200-399"`.
    pub expect_status: Option<Spanned<String>>,
    /// HTTP only: a substring the response body must contain (the first 64 KiB are read).
    /// Default: none (the body is not checked).
    pub expect_body: Option<Spanned<String>>,
    /// gRPC only: the service whose health is asked (`"helloworld.Greeter"`), up to 200
    /// visible characters. Default: `""`, the server as a whole.
    pub service: Option<Spanned<String>>,
}

/// `[[server_group]]`: servers that share the load of one or more virtual servers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerGroupSection {
    /// The group's name, used by virtual servers and rules: letters, digits, `-`, `_`, `.`.
    /// Required.
    pub name: Spanned<String>,
    /// How a server is chosen: `"round-robin"` (weighted), `"least-connection"`,
    /// `"least-response-time"`, `"source-ip-hash"`, `"url-hash"`, `"header-hash"` (the value of
    /// `hash_header`: each tenant or user on one server) or `"cookie-hash"` (the value of
    /// `hash_cookie`: each application session on one server, with no cookie of our own). The
    /// hash methods place each key with weighted rendezvous hashing, the same on every worker
    /// and appliance, and move only the keys of a server that leaves or joins; a request
    /// without the key (no such header or cookie; a `tcp` virtual server for the HTTP keys) is
    /// sent round robin. Default: `"round-robin"`.
    pub method: Option<Spanned<String>>,
    /// With `method = "header-hash"`: the request header whose value is hashed
    /// (`"X-Tenant"`); of several fields of that name, the first.
    pub hash_header: Option<Spanned<String>>,
    /// With `method = "cookie-hash"`: the cookie whose value is hashed (`"JSESSIONID"`).
    pub hash_cookie: Option<Spanned<String>>,
    /// The `[[monitor]]` that checks the servers. Default: none (servers count as up).
    pub monitor: Option<Spanned<String>>,
    /// Requests in flight at once per server, for servers that set no `max_connections` of
    /// their own; 0 = unlimited. Default: 0.
    pub max_connections: Option<Spanned<u32>>,
    /// Requests that may wait when every server is at its limit (the surge queue); 0 = none
    /// wait (503 at once). Default: 1024.
    pub surge_queue: Option<Spanned<u32>>,
    /// How long a request may wait in the surge queue before it gets 503 (`"5s"`). Default:
    /// `"5s"`.
    pub queue_timeout: Option<Spanned<DurationValue>>,
    /// How many times a request is tried again on another server after a connect failure (any
    /// method), a reset before any response byte (idempotent methods only) or an answer with a
    /// status of `retry_on`, 0–10. Besides these, a request the server's connection turned
    /// away untouched is sent again, up to 8 times and whatever `retries` says: a kept-alive
    /// connection found closed before a byte was written, and for `protocol = "h2"` a stream
    /// the server did not take (refused, or past its graceful GOAWAY, as NGINX closes a
    /// connection every 1,000 requests), any method, with its body (what was sent of it is
    /// kept, up to 1 MiB, until the server's answer shows it took the stream). Default: 2.
    pub retries: Option<Spanned<u32>>,
    /// Answers that send a request to another server, within `retries`: a server restarting
    /// or overloaded that says so (`[502, 503, 504]`), 400–599. Only requests without a body
    /// and with an idempotent method (GET, HEAD, PUT, DELETE, OPTIONS, TRACE) are sent again;
    /// the answer of the last try goes to the client whatever its status. Default: none.
    pub retry_on: Option<Spanned<Vec<Spanned<u16>>>>,
    /// Time allowed to connect to a server (`"3s"`). Default: `"3s"`.
    pub connect_timeout: Option<Spanned<DurationValue>>,
    /// Time allowed between sending a request and the server's response header (`"60s"`).
    /// Default: `"60s"`.
    pub response_timeout: Option<Spanned<DurationValue>>,
    /// Idle keep-alive connections kept per server and worker (`[runtime] workers`) for reuse
    /// across clients; 0 = no reuse.
    /// Keep it at or above the requests in flight to a server at peak (HTTP/2 clients
    /// multiplex many requests per connection, each needs a server connection of its own),
    /// or connections are closed when a request ends and opened again for the next.
    /// Default: 1024.
    pub pool_max_idle: Option<Spanned<u32>>,
    /// How long an idle pooled connection is kept (`"60s"`). Default: `"60s"`.
    pub pool_idle_timeout: Option<Spanned<DurationValue>>,
    /// TCP settings of the connections to the servers: a `[[tcp_profile]]` or a built-in
    /// preset (`"aol-svc-std"`). Default: none (TCP_NODELAY on, the rest Linux's defaults).
    pub tcp_profile: Option<Spanned<String>>,
    /// Passive health: this many failed requests in a row to one server (it refused or
    /// dropped the connection, sent no answer or a broken one, or did not answer within
    /// `response_timeout`) take it out of rotation for `fail_timeout`, without waiting for a
    /// monitor; then it is tried again, and one more failure takes it out again. An answer of
    /// any status is a success. While every server of the group is out, they are all tried
    /// anyway (a passive verdict never turns a flaky group into a refusal). 0 = off. Default: 3.
    pub max_fails: Option<Spanned<u32>>,
    /// How long a server that failed `max_fails` requests in a row stays out (`"10s"`).
    /// Default: `"10s"`.
    pub fail_timeout: Option<Spanned<DurationValue>>,
    /// Slow start: a server that comes into rotation (up again after its monitor's `rise`, back
    /// from passive health, enabled again) takes a share of new requests that grows from almost
    /// none to its full weight over this long (`"30s"`), instead of all of them at once under
    /// least connection. For `round-robin`, `least-connection` and `least-response-time`; hashing
    /// methods keep their keys where they are. `"0s"` = off. Default: `"0s"`.
    pub slow_start: Option<Spanned<DurationValue>>,
    /// How often the DNS names among the servers' addresses are resolved again (`"30s"`);
    /// `"0s"` = only when a config is applied (start, reload). A failed lookup keeps the last
    /// address and is counted. Default: `"30s"`.
    pub dns_refresh: Option<Spanned<DurationValue>>,
    /// For a server name that has both IPv4 and IPv6 addresses, which to connect to: `"ipv4"`
    /// or `"ipv6"` (the other family is used when the name has none of this one). Default:
    /// `"ipv4"`.
    pub dns_prefer: Option<Spanned<String>>,
    /// Start every connection to the servers with a PROXY protocol header (HAProxy's) naming
    /// the client and the address it connected to: `"v1"` (text) or `"v2"` (binary). For
    /// servers that need the client's address below HTTP: a `tcp` virtual server's servers
    /// (mail, databases, another proxy listening with `accept-proxy`). Behind an `http` or
    /// `https` virtual server a server connection then carries one client connection's header,
    /// so it is reused only for that client connection's later requests. The group's monitor
    /// starts its checks with a header too (v1 `UNKNOWN`, v2 `LOCAL`: a check of the server
    /// itself). Default: none.
    pub send_proxy_protocol: Option<Spanned<String>>,
    /// The HTTP version spoken to the servers: `"http1"` (HTTP/1.1, a pooled connection per
    /// request in flight) or `"h2"` (HTTP/2: every request a stream of its own on a connection
    /// per server and worker, another opened when the server's limit of concurrent streams
    /// fills one, with trailers passed both ways — what gRPC services need; cleartext with
    /// prior knowledge, or negotiated by ALPN under
    /// `[server_group.tls]`). Protocol upgrades (WebSocket) to an `"h2"` group are served as
    /// plain requests. Not with `send_proxy_protocol`. Default: `"http1"`.
    pub protocol: Option<Spanned<String>>,
    /// Session persistence (`[server_group.persistence]`). Default: none.
    pub persistence: Option<Spanned<PersistenceSection>>,
    /// Connect to the servers over TLS, verifying their certificates (`[server_group.tls]`).
    /// Default: none (cleartext HTTP to the servers).
    pub tls: Option<Spanned<GroupTlsSection>>,
    /// The servers (`[[server_group.server]]`); at least one.
    #[serde(default)]
    pub server: Vec<ServerSection>,
}

/// `[server_group.persistence]`: keep a client on the server it was first sent to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersistenceSection {
    /// `"cookie"` (an inserted cookie names the server; HTTP only) or `"source-ip"` (the
    /// client's address, masked). Required.
    pub kind: Spanned<String>,
    /// Cookie: its name. Default: `"HWSRV"`.
    pub cookie: Option<Spanned<String>>,
    /// Cookie: its `Path`. Default: `"/"`.
    pub path: Option<Spanned<String>>,
    /// Cookie: `Max-Age` (`"1h"`); `"0s"` makes a session cookie. Source IP: how long an idle
    /// entry is kept. Default: cookie `"0s"`, source IP `"2m"`.
    pub timeout: Option<Spanned<DurationValue>>,
    /// Cookie: the `Secure` attribute. Default: false.
    pub secure: Option<bool>,
    /// Cookie: the `HttpOnly` attribute. Default: true.
    pub http_only: Option<bool>,
    /// Cookie: the `SameSite` attribute, `"strict"`, `"lax"` or `"none"` (`"none"` needs
    /// `secure`). Default: none (not sent).
    pub same_site: Option<Spanned<String>>,
    /// Source IP: IPv4 prefix length that groups clients (`24` = one server per /24), 1–32.
    /// Default: 32.
    pub mask: Option<Spanned<u8>>,
    /// Source IP: IPv6 prefix length, 1–128. Default: 64.
    pub mask_v6: Option<Spanned<u8>>,
    /// Source IP: most entries kept (oldest dropped first). Default: 1000000.
    pub capacity: Option<Spanned<u32>>,
}

/// `[[server_group.server]]`: one server of the group.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Where the server listens: an IP address and a port (`"10.0.0.5:80"`,
    /// `"[2001:db8::5]:80"`) or a DNS name and a port (`"app1.internal:80"`). A name is resolved
    /// by the system's resolver (`/etc/hosts`, then DNS) when the config is applied — a name
    /// that does not resolve then refuses the config, unless the running one already has an
    /// address for it, which is kept — and again every `dns_refresh` of the group; when its
    /// address changes, new requests go to the new one without dropping a connection (as a
    /// reload does). A name with several addresses: the one in use stays while the name still
    /// has it, else the first of the group's `dns_prefer` family. TLS to a named server sends
    /// and verifies the name (unless the group sets `server_name`). Required.
    pub address: Spanned<String>,
    /// Its name in the admin API, metrics and logs: letters, digits, `-`, `_`, `.`, `:`, `[`,
    /// `]`; unique in the group. Default: the address.
    pub name: Option<Spanned<String>>,
    /// Share of new clients relative to the others, 0–1000 (0 = only when every other server
    /// has weight 0 too). Default: 1.
    pub weight: Option<Spanned<u32>>,
    /// Requests in flight at once to this server; 0 = unlimited. Default: the group's
    /// `max_connections`.
    pub max_connections: Option<Spanned<u32>>,
    /// A backup server gets requests only when every primary server is down. Default: false.
    pub backup: Option<bool>,
    /// The administrative state at start: `"enabled"`, `"disabled"` (no requests) or
    /// `"draining"` (no new clients; persistent sessions and in-flight requests finish).
    /// Default: `"enabled"`.
    pub state: Option<Spanned<String>>,
}

/// `[[virtual_server]]`: a listener that takes clients and sends them to server groups.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtualServerSection {
    /// The virtual server's name in the admin API, metrics and logs. Required.
    pub name: Spanned<String>,
    /// `"http"` (HTTP/1.1 and HTTP/2 with prior knowledge, layer 7), `"https"` (the same over
    /// TLS, terminated here; needs `[virtual_server.tls]`) or `"tcp"` (bytes both ways, layer 4).
    /// Required.
    pub kind: Spanned<String>,
    /// The TCP socket address to listen on (`"0.0.0.0:80"`). Required.
    pub listen: Spanned<String>,
    /// The default server group (for requests no rule matches). Required, except on an `http`
    /// or `https` virtual server that answers every request no rule matches itself, with
    /// `redirect` or `respond` instead.
    pub group: Option<Spanned<String>>,
    /// HTTP: answer requests no rule matches with a redirect instead of sending them to a
    /// group (`redirect = { location = "https://{host}{uri}", status = 301 }`, the usual port
    /// 80 of a site served over HTTPS). See `[virtual_server.redirect]`. Not with `group` or
    /// `respond`.
    pub redirect: Option<Spanned<RedirectSection>>,
    /// HTTP: answer requests no rule matches with a fixed response instead of sending them to a
    /// group (`respond = { status = 503, body = "down for maintenance" }`). See
    /// `[virtual_server.respond]`. Not with `group` or `redirect`.
    pub respond: Option<Spanned<RespondSection>>,
    /// Close a client connection idle for this long (between requests, or without bytes in
    /// either direction for `tcp`) (`"180s"`). Default: `"180s"`.
    pub client_idle_timeout: Option<Spanned<DurationValue>>,
    /// HTTP: time allowed to receive a whole request header (`"10s"`); for `https` also the time
    /// allowed for the TLS handshake. Default: `"10s"`.
    pub request_header_timeout: Option<Spanned<DurationValue>>,
    /// HTTP: the largest request header, in bytes (`"32KiB"`); larger gets 431. Default:
    /// `"32KiB"`.
    pub max_header_bytes: Option<Spanned<ByteSize>>,
    /// HTTP: the largest request body taken (`"10MiB"`): a request that says in its
    /// `Content-Length` that its body is larger gets 413 at once, before any server is asked; one
    /// whose body turns out larger as it streams (chunked, HTTP/2) is cut off at the limit,
    /// its server connection closed, and answered 413. The client connection closes after a
    /// 413. Default: none (no limit).
    pub max_body_bytes: Option<Spanned<ByteSize>>,
    /// HTTP: the most header fields in a request, 1–1000; more gets 431. Default: 100.
    pub max_headers: Option<Spanned<u32>>,
    /// Connections open at once from one client address; 0 = unlimited. Default: 0.
    pub max_connections_per_client: Option<Spanned<u32>>,
    /// New connections (`tcp`) or requests (`http`) per second from one client address; 0 =
    /// unlimited. Default: 0.
    pub rate_per_client: Option<Spanned<u32>>,
    /// TCP settings of the client connections: a `[[tcp_profile]]` or a built-in preset
    /// (`"aol-dialup"`). Default: none (TCP_NODELAY on, the rest Linux's defaults).
    pub tcp_profile: Option<Spanned<String>>,
    /// Listen backlog: connections that completed the handshake and wait to be accepted, from
    /// 1 to 1000000. Linux caps it at `net.core.somaxconn` (Headway warns when it does); with
    /// SYN cookies on, a SYN flood cannot fill it. Default: 4096.
    pub backlog: Option<Spanned<u32>>,
    /// Every client connection starts with a PROXY protocol header (HAProxy's, version 1 or 2,
    /// either is taken) from a load balancer in front, naming the client: its address is then
    /// the client's address everywhere (X-Forwarded-For, per-client limits, source-IP
    /// persistence, the access log, a PROXY header sent on to servers). A connection whose first
    /// bytes are not a whole header within `request_header_timeout` (10 s on `tcp`) is closed
    /// and counted. Only for listeners that nothing but such balancers can reach: whoever
    /// connects can claim any address. Default: false.
    pub accept_proxy_protocol: Option<bool>,
    /// With `accept_proxy_protocol`: the addresses or networks of the balancers in front
    /// (`["10.0.0.0/8", "192.0.2.10"]`); a connection from anywhere else is closed before its
    /// header is read, and counted with the bad headers. Default: any address.
    pub proxy_protocol_from: Option<Spanned<Vec<Spanned<String>>>>,
    /// Only clients in these networks are served (`["10.0.0.0/8", "2001:db8::/32",
    /// "192.0.2.10"]`): a connection from anywhere else is closed as soon as it is accepted
    /// (behind a balancer with `accept_proxy_protocol`, once its header names the client),
    /// before any byte is read or a server asked, and counted (`adc_denied_connections_total`).
    /// Also for `tcp`. Default: every client.
    pub allow: Option<Spanned<Vec<Spanned<String>>>>,
    /// Clients in these networks are never served (closed at once and counted, as for
    /// `allow`), even when `allow` names a network that holds them: a known scanner, a
    /// range under attack. Default: none.
    pub deny: Option<Spanned<Vec<Spanned<String>>>>,
    /// HTTP: accept HTTP/2 beside HTTP/1.1 — with prior knowledge on `http`, offered by ALPN
    /// (`h2`, then `http/1.1`) on `https`. Default: true.
    pub http2: Option<bool>,
    /// HTTP: pass protocol upgrades (WebSocket) through to the servers. A request asking for
    /// one (`Connection: upgrade` and an `Upgrade` field other than `h2c`) goes to the server
    /// with both fields; if the server answers `101 Switching Protocols`, the client connection
    /// becomes a tunnel to that server connection — bytes both ways, half-closes carried —
    /// until both sides have closed or it idles for `tunnel_idle_timeout`. If it answers
    /// anything else, the answer goes to the client and the client connection closes after it.
    /// `false`: the `Upgrade` field is removed and the request is served as a plain one, the
    /// connection closing after it (also always for `h2c`, the cleartext HTTP/2 upgrade; use
    /// HTTP/2 with prior knowledge). `CONNECT` gets 501 either way (forward proxying). A tunnel
    /// counts as one request of the server it went to for as long as it is open (its connection
    /// limits, least connection). Default: true.
    pub upgrades: Option<bool>,
    /// HTTP: close an upgraded connection (a WebSocket) with no bytes in either direction for
    /// this long (`"1h"`). Applications that keep quiet connections open send pings more often
    /// than this. Default: `"1h"`.
    pub tunnel_idle_timeout: Option<Spanned<DurationValue>>,
    /// HTTP: append the client's address to `X-Forwarded-For`. Default: true.
    pub x_forwarded_for: Option<bool>,
    /// HTTP: set `X-Forwarded-Proto` (`http`, or `https` on `https` virtual servers). Default:
    /// true.
    pub x_forwarded_proto: Option<bool>,
    /// HTTP: append an RFC 7239 `Forwarded` element (`for=…;proto=…;host=…`). Default: false.
    pub forwarded: Option<bool>,
    /// HTTP: a request ID in this header (`"X-Request-ID"`): a request that arrives with one
    /// (1–128 visible ASCII characters, from a balancer or client in front) keeps it, any other
    /// gets a new one (32 hex digits, unique per process and random across restarts); the
    /// server receives it, the client gets it back in the response (the proxy's own answers
    /// too), and the access log records it (`request_id` in JSON, a last quoted field in the
    /// combined format). Default: none.
    pub request_id: Option<Spanned<String>>,
    /// HTTP: shadow traffic to this `[[server_group]]` (`mirror = "next"`): a copy of each
    /// request without a body that goes to a server is sent to a server of this group as well,
    /// as that server would get it (forwarding headers, header rules, path rewrite), and its
    /// answer read and dropped — a new version tried with real requests. The copy never delays
    /// or changes the client's answer, and its server's failures count only on that group. At
    /// most 64 copies are in flight per virtual server; beyond, copies are skipped. Counted in
    /// `adc_mirror_*` and `headway ctl adc`. Requests with a body, upgrades and answers from
    /// the cache are not copied. Default: none.
    pub mirror: Option<Spanned<String>>,
    /// HTTP: header rules applied to requests before they go to a server.
    pub request_headers: Option<Spanned<HeaderRulesSection>>,
    /// HTTP: header rules applied to responses before they go to the client.
    pub response_headers: Option<Spanned<HeaderRulesSection>>,
    /// Where the access log goes: a file path (relative to the config file), or `"-"` for
    /// standard output. Default: none (no access log). Rotation needs no signal: a file moved
    /// aside or deleted (logrotate's default) is noticed within a second and the path opened
    /// again; `SIGUSR1` reopens at once. Lost lines show in `headway ctl adc` and
    /// `adc_access_log_*` metrics.
    pub access_log: Option<Spanned<PathBuf>>,
    /// The access log's format: `"combined"` (Apache/NGINX combined log format) or `"json"`
    /// (one object per line; a gRPC call's line also has its `grpc_status`). Default:
    /// `"combined"`.
    pub access_log_format: Option<Spanned<String>>,
    /// HTTPS: TLS termination (`[virtual_server.tls]`): certificates, versions, resumption,
    /// client certificates. Required for `https`, refused for the other kinds.
    pub tls: Option<Spanned<VsTlsSection>>,
    /// HTTP: compress responses for clients that accept it (`[virtual_server.compression]`).
    /// Default: none (responses pass as the servers send them).
    pub compression: Option<Spanned<CompressionSection>>,
    /// HTTP: content-switching rules (`[[virtual_server.rule]]`), first match wins. Default:
    /// none (every request goes to `group`).
    #[serde(default)]
    pub rule: Vec<RuleSection>,
    /// HTTP: pages of your own for the errors the proxy answers itself
    /// (`[[virtual_server.error_page]]`): every server down or the surge queue full (503), a
    /// server that failed (502) or did not answer in time (504), too many requests (429), a
    /// body too large (413), a request refused for its framing or host (400). Answers of the
    /// servers are passed as they come; a request whose head cannot be read as HTTP at all
    /// may still get the short text. Default: none (a short text of what happened).
    #[serde(default)]
    pub error_page: Vec<ErrorPageSection>,
}

/// `[[virtual_server.error_page]]`: the page sent instead of the proxy's own text for some
/// statuses, HAProxy's `errorfile` and NGINX's `error_page`. The status, `Retry-After` and
/// `Connection: close` of the answer stay what they were.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorPageSection {
    /// The statuses it is for, 400–599 (`[502, 503, 504]`); each status in at most one page.
    /// Required.
    pub status: Spanned<Vec<Spanned<u16>>>,
    /// The file (relative to the config file), at most 64 KiB of UTF-8 text, read when the
    /// config is loaded (a reload reads it again). Required.
    pub file: Spanned<PathBuf>,
    /// Its `Content-Type`. Default: `"text/html; charset=utf-8"`.
    pub content_type: Option<Spanned<String>>,
}

/// `[[certificate]]`: a certificate chain and its private key, named so that `https` virtual
/// servers (and server groups presenting a client certificate) can use it. Both files are read
/// and checked when the config is loaded and on every reload: PEM syntax, X.509 structure, a
/// supported key type, and that the key belongs to the certificate. A reload that changes a
/// file serves new connections with the new certificate; connections already open keep theirs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateSection {
    /// The certificate's name, used by `virtual_server.tls.certificates` and
    /// `server_group.tls.certificate`: letters, digits, `-`, `_`, `.`. Required.
    pub name: Spanned<String>,
    /// PEM file holding the certificate, then the intermediate CA certificates that clients need
    /// to reach a trusted root (leaf first, as servers send them); relative to the config file.
    /// Required.
    pub cert_file: Spanned<PathBuf>,
    /// PEM file holding the certificate's private key, unencrypted: PKCS#8 (`BEGIN PRIVATE
    /// KEY`), SEC1 (`BEGIN EC PRIVATE KEY`) or PKCS#1 (`BEGIN RSA PRIVATE KEY`); RSA (2048 bits or
    /// more), ECDSA P-256 or P-384, or Ed25519. Relative to the config file. Required.
    pub key_file: Spanned<PathBuf>,
}

/// `[virtual_server.tls]`: TLS termination of an `https` virtual server. TLS 1.2 and 1.3 only,
/// with AEAD cipher suites and ephemeral (EC)DHE key exchange only: AES-GCM and
/// ChaCha20-Poly1305, never CBC, RC4, 3DES or RSA key exchange.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VsTlsSection {
    /// The `[[certificate]]`s served, by name (`["www-ecdsa", "www-rsa", "api"]`). Each
    /// connection gets the certificate whose DNS names (subjectAltName) match the name the
    /// client asks for with SNI: an exact name first, then a `*.example.com` wildcard (one
    /// label). When several match, the first in this list whose key the client can verify wins
    /// (list an ECDSA certificate before an RSA one with the same names). The first certificate
    /// is the default, for clients that send no name or a name no certificate holds. Required,
    /// at least one.
    pub certificates: Spanned<Vec<Spanned<String>>>,
    /// The lowest TLS version accepted: `"1.2"` or `"1.3"`. SSL 3, TLS 1.0 and TLS 1.1 are never
    /// accepted. Default: `"1.2"`.
    pub min_version: Option<Spanned<String>>,
    /// Resume sessions from tickets the client keeps (RFC 5077 tickets in TLS 1.2, PSK tickets
    /// in TLS 1.3). The ticket keys belong to the virtual server and survive reloads; a new key
    /// is made every 6 hours and a ticket is accepted for at most 12 hours. Default: true.
    pub session_tickets: Option<bool>,
    /// Sessions the server keeps for resumption by session id (TLS 1.2, and TLS 1.3 when
    /// `session_tickets` is false), 0–10000000; 0 = no cache. The oldest are dropped first; a
    /// session takes a few hundred bytes. The cache survives reloads while its size stays.
    /// Default: 20000.
    pub session_cache: Option<Spanned<u32>>,
    /// Client certificates: `"none"`, `"optional"` (asked for; a client may send none, but a
    /// certificate it sends must chain to `client_ca_file`) or `"required"` (a client without a
    /// valid certificate is refused in the handshake). Default: `"none"`.
    pub client_auth: Option<Spanned<String>>,
    /// PEM file of the CA certificates client certificates must chain to; relative to the
    /// config file. Required with `client_auth` `"optional"` or `"required"`, refused without.
    pub client_ca_file: Option<Spanned<PathBuf>>,
}

/// `[server_group.tls]`: the group's servers are reached over TLS, and each server's
/// certificate is verified: it must chain to `ca_file` and hold `server_name` (or the server's
/// IP address). Requests to the servers stay HTTP/1.1 (ALPN `http/1.1`); TLS sessions are
/// resumed across pooled connections. The group's HTTP monitor checks over TLS the same way.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupTlsSection {
    /// PEM file of the CA certificates the servers' certificates must chain to; relative to the
    /// config file. Required.
    pub ca_file: Spanned<PathBuf>,
    /// The DNS name sent with SNI and checked against every server's certificate
    /// (`"app.internal"`). Default: each server's IP address, which its certificate must then
    /// hold as an IP-address subjectAltName.
    pub server_name: Option<Spanned<String>>,
    /// The lowest TLS version used: `"1.2"` or `"1.3"`. Default: `"1.2"`.
    pub min_version: Option<Spanned<String>>,
    /// A `[[certificate]]` presented to servers that ask for a client certificate. Default: none.
    pub certificate: Option<Spanned<String>>,
}

/// `[virtual_server.compression]`: HTTP compression of server responses (gzip, brotli, zstd),
/// streamed as the body arrives, never buffered whole. The codec is the best one in `codecs`
/// that the client's `Accept-Encoding` accepts (highest q-value first, then this order). A
/// response is left as it is when it is already encoded (`Content-Encoding`), a range (206 or
/// `Content-Range`), marked `Cache-Control: no-transform`, has no body (HEAD, 204, 304), is not
/// of one of `types`, or is smaller than `min_size`; image (except SVG), audio and video types
/// are never compressed. A compressed response loses `Content-Length` and `Accept-Ranges`, gets
/// `Content-Encoding`, and its strong `ETag` becomes weak (`W/"…"`); every response whose
/// encoding depends on `Accept-Encoding` gets `Vary: Accept-Encoding`. Above `cpu_bypass`
/// utilisation new responses go uncompressed until it falls below `cpu_release` (NetScaler's
/// compression bypass; AOL set 20 %).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompressionSection {
    /// Compress at all; `false` keeps the section but switches compression off. Default: true.
    pub enabled: Option<bool>,
    /// The codecs offered, best first: `"zstd"`, `"br"` (brotli) and `"gzip"`, each at most
    /// once. Default: `["zstd", "br", "gzip"]`: zstd (Chrome, Firefox) compresses HTML as well
    /// as gzip at about three times its speed, and repeated content far better (its window is
    /// not gzip's 32 KiB); brotli (Safari) compresses better than gzip at about its speed; gzip
    /// is what every client takes.
    pub codecs: Option<Spanned<Vec<Spanned<String>>>>,
    /// Media types compressed, as prefixes of the response's `Content-Type` (without
    /// parameters, case-insensitive): `"text/"` (or `"text/*"`) is every text type. Default:
    /// `text/`, `application/json`, `application/javascript`, `application/x-javascript`,
    /// `application/xml`, `application/xhtml+xml`, `application/rss+xml`,
    /// `application/atom+xml`, `application/ld+json`, `application/manifest+json`,
    /// `application/wasm`, `application/vnd.ms-fontobject`, `font/ttf`, `font/otf`,
    /// `image/svg+xml`.
    pub types: Option<Spanned<Vec<Spanned<String>>>>,
    /// Responses whose `Content-Length` is below this stay uncompressed (`"1KiB"`); responses
    /// of unknown length are compressed. Default: `"1KiB"` (a smaller body fits in one packet
    /// either way).
    pub min_size: Option<Spanned<ByteSize>>,
    /// gzip level, 1 (fastest) to 9 (smallest). Default: 2, which compresses HTML at least as
    /// well as zlib's level 1 (NGINX's default); 1 is the same as 2 (zlib-rs's level 1 is a much
    /// weaker parser). A body of known length up to 64 KiB is compressed whole by libdeflate
    /// at level − 1 (about the same ratio, faster); others stream through zlib-rs.
    pub gzip_level: Option<Spanned<u32>>,
    /// Brotli quality, 0 (fastest) to 11 (smallest); above 4 a response costs far more CPU,
    /// small ones most. Default: 2.
    pub brotli_level: Option<Spanned<u32>>,
    /// zstd level, 1 (fastest) to 19 (smallest; the window stays within the 8 MiB that HTTP's
    /// `zstd` coding allows, RFC 9659). Default: 2.
    pub zstd_level: Option<Spanned<u32>>,
    /// CPU utilisation at or above which new responses go uncompressed (`"90%"`), or `"off"`.
    /// Default: `"90%"`.
    pub cpu_bypass: Option<Spanned<String>>,
    /// CPU utilisation below which compression resumes after a bypass (`"70%"`); below
    /// `cpu_bypass`. Default: 20 points below `cpu_bypass`, or half of it when that is lower
    /// (`"90%"` → `"70%"`, `"20%"` → `"10%"`).
    pub cpu_release: Option<Spanned<String>>,
    /// Whose CPU: `"system"` (all CPUs of the machine, from `/proc/stat`) or `"process"`
    /// (Headway's own CPU time as a share of all CPUs, from `/proc/self/stat`), sampled every
    /// 250 ms. Default: `"system"`.
    pub cpu_source: Option<Spanned<String>>,
}

/// `[virtual_server.request_headers]` / `[virtual_server.response_headers]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderRulesSection {
    /// Header names to remove (case-insensitive). Default: none.
    #[serde(default)]
    pub remove: Vec<Spanned<String>>,
    /// Headers to set, replacing any of the same name: `{ "X-Env" = "lab" }`. A value may hold
    /// what is known of the request: `{client_ip}` (`{ "X-Real-IP" = "{client_ip}" }`),
    /// `{client_port}`, `{request_id}` (with the virtual server's `request_id`),
    /// `{virtual_server}`, `{scheme}`; `{{` and `}}` write a brace. Default: none.
    #[serde(default)]
    pub set: BTreeMap<String, Spanned<String>>,
    /// Headers to add beside any of the same name, with the same placeholders as `set`.
    /// Default: none.
    #[serde(default)]
    pub add: BTreeMap<String, Spanned<String>>,
    /// Values to rewrite: in every field named `name`, the first match of `from` (a regular
    /// expression, Rust `regex`) is replaced by `to` (`$1`, `${name}` for captured groups).
    /// The redirects of a server behind a `path_rewrite`, or one that names itself:
    /// `replace = [{ name = "Location", from = "^http://app1\\.internal:8080/", to =
    /// "https://www.example.com/api/" }]`. Applied after `remove` and before `set` and `add`; a
    /// value that would hold characters a header cannot is left as it was. Default: none.
    #[serde(default)]
    pub replace: Vec<Spanned<HeaderReplaceSection>>,
}

/// `[[virtual_server.response_headers.replace]]` (and `request_headers`): one value rewrite,
/// written inline in the `replace` list.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderReplaceSection {
    /// The header's name. Required.
    pub name: Spanned<String>,
    /// The regular expression matched against each of its values. Required.
    pub from: Spanned<String>,
    /// The replacement. Required.
    pub to: Spanned<String>,
}

/// `[[virtual_server.rule]]`: requests matching every condition given go to `group`, or are
/// answered by the proxy itself with `redirect` or `respond` (exactly one of the three). At
/// least one condition is required.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSection {
    /// The rule's name in metrics and logs. Default: `rule-N` (N counts from 1 in file order).
    pub name: Option<Spanned<String>>,
    /// The server group matching requests go to. Required unless `redirect` or `respond` is
    /// given.
    pub group: Option<Spanned<String>>,
    /// Answer matching requests with a redirect (`[virtual_server.redirect]`): `redirect = {
    /// location = "https://{host}{uri}", status = 301 }`.
    pub redirect: Option<Spanned<RedirectSection>>,
    /// Answer matching requests with a fixed response (`[virtual_server.respond]`): `respond =
    /// { status = 403, body = "forbidden" }`.
    pub respond: Option<Spanned<RespondSection>>,
    /// Host (port ignored, case-insensitive): `"www.example.com"` or `"*.example.com"`.
    pub host: Option<Spanned<String>>,
    /// The path (before `?`) equals this.
    pub path: Option<Spanned<String>>,
    /// The path starts with this.
    pub path_prefix: Option<Spanned<String>>,
    /// The path contains this (as NetScaler's `URL CONTAINS`).
    pub path_contains: Option<Spanned<String>>,
    /// The path matches this regular expression (Rust `regex` syntax, unanchored).
    pub path_regex: Option<Spanned<String>>,
    /// The path's extension is one of these, case-insensitive, without the dot (`["jpg",
    /// "gif"]`).
    pub path_extension: Option<Spanned<Vec<String>>>,
    /// The method is one of these (`["GET", "HEAD"]`).
    pub method: Option<Spanned<Vec<String>>>,
    /// A header is present (`{ name = "X-Beta" }`), equals a value (`value = "1"`), or matches a
    /// regular expression (`regex = "^1"`).
    pub header: Option<Spanned<HeaderMatchSection>>,
    /// A cookie of the request is present (`{ name = "beta" }`), equals a value (`value =
    /// "1"`), or matches a regular expression (`regex = "^v2"`); the value is compared as sent
    /// (without the quotes a quoted value has).
    pub cookie: Option<Spanned<HeaderMatchSection>>,
    /// A query parameter is present (`{ name = "version" }`), equals a value (`value = "2"`),
    /// or matches a regular expression; the first parameter of that name counts, compared as
    /// received (not percent-decoded, as the path is).
    pub query: Option<Spanned<HeaderMatchSection>>,
    /// The client's address is in one of these networks (`["10.0.0.0/8", "2001:db8::/32",
    /// "192.0.2.10"]`). Behind a balancer that sends PROXY headers (`accept_proxy_protocol`),
    /// the address the header names. With `respond = { status = 403 }` and `source_not`, an
    /// access list.
    pub source: Option<Spanned<Vec<Spanned<String>>>>,
    /// Rewrite the path of the requests this rule sends to its group (`group` only): `from` is
    /// a regular expression (Rust `regex`) matched against the path, `to` its replacement with
    /// `$1`, `${name}` for captured groups (`{ from = "^/api(/.*)?$", to = "$1" }` strips the
    /// prefix `/api`). The query is kept; a path that comes out empty is `/`. The access log
    /// records the request as received. Default: the path as received.
    pub path_rewrite: Option<Spanned<PathRewriteSection>>,
    /// A share of the clients, `"10%"` (0.01 %–100 %): each client address falls on the same
    /// side every time (a hash of the address and the rule's name), so a canary group gets
    /// that share of the users, and each of them stays on it. Default: every client.
    pub share: Option<Spanned<String>>,
    /// The client's address is in none of these networks (`source_not = ["10.0.0.0/8"]` with
    /// `path_prefix = "/admin"` and `respond = { status = 403 }`: the admin pages only from
    /// inside).
    pub source_not: Option<Spanned<Vec<Spanned<String>>>>,
    /// Limit how fast the requests this rule matches are taken: `rate_limit = { requests = 5,
    /// per = "1m" }` (each client 5 a minute: a login page), `by = "all"` (the rule's requests
    /// together: a fragile backend), `by = "header", header = "X-API-Key"` (each API key). See
    /// `[virtual_server.rule.rate_limit]`. Default: no limit.
    pub rate_limit: Option<Spanned<RateLimitSection>>,
    /// Ask for a user name and password (HTTP basic authentication) before the rule's action:
    /// `auth = { realm = "admin", users_file = "admin.htpasswd" }`. See
    /// `[virtual_server.rule.auth]`. Default: none.
    pub auth: Option<Spanned<AuthSection>>,
}

/// `[virtual_server.rule.auth]`: HTTP basic authentication on the requests a rule matches,
/// written inline (`auth = { realm = "admin", users_file = "admin.htpasswd" }`). A request
/// without valid credentials is answered by the proxy with 401 and `WWW-Authenticate: Basic
/// realm="…"` (browsers then ask for them), no server asked, and the rule counts it
/// (`adc_rule_unauthorized_total`, `headway ctl adc`); with them, the rule's action follows
/// and the `Authorization` field goes on to the server as it came. Passwords are checked
/// against bcrypt hashes off the event loop, at most two at once; a user name and password
/// that passed are remembered (as a digest, never in clear) for 10 minutes, also across
/// reloads that leave the users file and realm as they were, so a browser's every request
/// does not cost a bcrypt check. Basic authentication sends the password with
/// every request: use it on `https` virtual servers. The file is read again on every reload.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// The realm browsers show, 1–128 printable ASCII characters without `"` or `\`.
    /// Default: `"restricted"`.
    pub realm: Option<Spanned<String>>,
    /// The users: an htpasswd file of bcrypt hashes (`htpasswd -B -c admin.htpasswd alice`),
    /// `name:hash` per line, `#` comments; relative to the config file. MD5 (`$apr1$`), SHA-1
    /// and crypt hashes are refused. Required.
    pub users_file: Spanned<PathBuf>,
}

/// `[virtual_server.rule.rate_limit]`: how many of the requests a rule matches are taken,
/// written inline (`rate_limit = { requests = 100, per = "1m", by = "client" }`). Each key
/// (a client, a header's value, or the rule as a whole) has a bucket of `requests` tokens
/// refilled at `requests` per `per`: up to `requests` at once, then at that rate. A request
/// over it is answered by the proxy with 429 and `Retry-After` (the seconds until it would be
/// taken; the virtual server's `error_page` for 429 applies), no server is asked, and the rule
/// counts it (`adc_rule_limited_total`, `headway ctl adc`). The buckets last across reloads
/// while the rule keeps its name and its limit, and are shared by all workers; idle buckets
/// are forgotten once full again, and at most 1,000,000 are kept (a request with a new key
/// beyond that is refused).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSection {
    /// Requests taken per `per`, 1–1,000,000; also the most taken at once. Required.
    pub requests: Spanned<u32>,
    /// The period (`"1s"`, `"1m"`, `"1h"`), from 1 ms to 24 hours. Default: `"1s"`.
    pub per: Option<Spanned<DurationValue>>,
    /// Whose requests share a bucket: `"client"` (each client address, the PROXY header's
    /// behind a balancer; IPv6 clients by their /64), `"all"` (every request the rule matches)
    /// or `"header"` (each value of `header`; requests without it share one bucket). Default:
    /// `"client"`.
    pub by: Option<Spanned<String>>,
    /// With `by = "header"`: the request header whose value names the caller (`"X-API-Key"`).
    pub header: Option<Spanned<String>>,
}

/// `[virtual_server.rule.path_rewrite]`: how a rule rewrites the path it sends to its group,
/// written inline: `path_rewrite = { from = "^/api(/.*)?$", to = "$1" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRewriteSection {
    /// The regular expression matched against the path. Required.
    pub from: Spanned<String>,
    /// The replacement (`$1`, `${name}`, `$$` for a dollar sign). Required.
    pub to: Spanned<String>,
}

/// A rule's header condition.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderMatchSection {
    /// The header's name (case-insensitive). Required.
    pub name: Spanned<String>,
    /// The value equals this (exactly). Default: any value.
    pub value: Option<Spanned<String>>,
    /// The value matches this regular expression. Not together with `value`.
    pub regex: Option<Spanned<String>>,
}

/// `[virtual_server.redirect]` (also a rule's `redirect`): the proxy answers with a redirect
/// itself; no server is asked. `location` is a template: `{scheme}` (`http` or `https`, the
/// virtual server's), `{host}` (the request's `Host` or `:authority`, lower case, without its
/// port), `{path}` (the path as received), `{query}` (`?` and the query as received, or nothing
/// when there is none) and `{uri}` (`{path}{query}`); every other character is copied. A
/// request whose host is needed but missing, or holds other characters than letters, digits,
/// `.`, `-`, `:`, `[` and `]`, gets 400.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedirectSection {
    /// Where to: an absolute `http://` or `https://` URL, or a path starting with `/`, with the
    /// placeholders above (`"https://{host}{uri}"`, `"https://www.example.com{uri}"`,
    /// `"/maintenance.html"`). Required.
    pub location: Spanned<String>,
    /// The status: 301 (moved permanently), 302 (found), 303 (see other), 307 (temporary) or
    /// 308 (permanent; 307 and 308 keep the method and body). Browsers cache 301 and 308.
    /// Default: 302.
    pub status: Option<Spanned<u16>>,
}

/// `[virtual_server.respond]` (also a rule's `respond`): the proxy answers with a fixed
/// response itself (a maintenance page, a refusal, a health answer); no server is asked.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RespondSection {
    /// The status, 200–599. Required.
    pub status: Spanned<u16>,
    /// The body, up to 64 KiB; not with 204 or 304. Default: the status's reason phrase and a
    /// newline (`"Service Unavailable\n"`), or nothing for 204 and 304.
    pub body: Option<Spanned<String>>,
    /// The body's `Content-Type`. Default: `"text/plain; charset=utf-8"`.
    pub content_type: Option<Spanned<String>>,
}
