//! The config files `headway bench adc` runs each proxy with, and wrk's 10-per-connection script.
//!
//! Pure text generation: each function takes the origin's address, the worker count and the
//! listeners, and returns the file's text; the caller writes it into the run's temp dir. Every
//! proxy gets the same treatment, so the comparison is of the proxies and not of their tuning:
//!
//! - the same number of data-plane workers (HAProxy `nbthread`, NGINX `worker_processes`,
//!   Headway `[runtime] workers`);
//! - keep-alive to the origin, idle connections shared between client connections (HAProxy
//!   `http-reuse always`; NGINX `upstream { keepalive 64; }` with HTTP/1.1 and an empty
//!   `Connection` header; Headway's server pool by default);
//! - the client's address appended to `X-Forwarded-For` and the scheme in `X-Forwarded-Proto`
//!   on every request to the origin, as a reverse proxy in front of an application does
//!   (HAProxy `option forwardfor` and `http-request set-header`, [`haproxy_forwarding`];
//!   NGINX `proxy_set_header … $proxy_add_x_forwarded_for` and `$scheme`,
//!   [`NGINX_FORWARDING`]; Headway's defaults);
//! - no access log;
//! - no limit on requests per client connection (NGINX's `keepalive_requests` would close every
//!   1,000th, HAProxy has none), so "unlimited" means unlimited for all;
//! - an L4 (`tcp`) listener, an L7 (HTTP/1.1) listener and, where the proxy needs its own, an
//!   HTTP/2 prior-knowledge (h2c) listener.
//!
//! It does not start anything or pick ports (that is the parent module).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

/// Where one proxy listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listeners {
    /// HTTP/1.1 (layer 7).
    pub l7: SocketAddr,
    /// TCP (layer 4).
    pub l4: SocketAddr,
    /// HTTP/2 with prior knowledge; `None` when the L7 listener takes it too.
    pub h2: Option<SocketAddr>,
    /// HTTP/2 with prior knowledge whose requests go to the origin over HTTP/2 too.
    pub h2_both: Option<SocketAddr>,
    /// The admin API (Headway only).
    pub admin: Option<SocketAddr>,
}

/// The connection limit each proxy is configured with: far above the load tool's connections,
/// within the file-descriptor limit of a default shell (HAProxy refuses to start when
/// `2 × maxconn` exceeds it).
pub fn max_connections(load_connections: u32) -> u32 {
    load_connections.saturating_mul(4).max(4096)
}

/// The lines of an HAProxy `mode http` backend that add what Headway adds to a request by
/// default (`x_forwarded_for`, `x_forwarded_proto`): the client's address in
/// `X-Forwarded-For`, `proto` (`http` or `https`) in `X-Forwarded-Proto`.
pub fn haproxy_forwarding(proto: &str) -> String {
    format!("    option forwardfor\n    http-request set-header X-Forwarded-Proto {proto}\n")
}

/// The lines of an NGINX `location` with `proxy_pass` that add what Headway adds to a request
/// by default (see [`haproxy_forwarding`]); `$scheme` is `https` in a TLS `server {}`.
pub const NGINX_FORWARDING: &str =
    "            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n\
     \x20           proxy_set_header X-Forwarded-Proto $scheme;\n";

/// HAProxy's config (`haproxy -f FILE -db`): `nbthread`, no `log` line (so no logging),
/// `http-reuse always` to the origin, an `mode tcp` listener, and a `proto h2` bind for
/// HTTP/2 prior knowledge.
pub fn haproxy(origin: SocketAddr, workers: u32, l: &Listeners, maxconn: u32) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# headway bench adc: HAProxy in front of `headway origin` at {origin}.\n\
         global\n    nbthread {workers}\n    maxconn {maxconn}\n    # no `log` line: nothing is logged\n\n\
         defaults\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n\n\
         frontend l7\n    mode http\n    bind {}\n    default_backend origin\n",
        l.l7
    );
    if let Some(h2) = l.h2 {
        let _ = writeln!(
            s,
            "frontend h2\n    mode http\n    bind {h2} proto h2\n    default_backend origin\n"
        );
    }
    let forwarding = haproxy_forwarding("http");
    if let Some(h2) = l.h2_both {
        let _ = writeln!(
            s,
            "frontend h2_both\n    mode http\n    bind {h2} proto h2\n    default_backend origin_h2\n\n\
             backend origin_h2\n    mode http\n    http-reuse always\n{forwarding}    \
             server origin {origin} proto h2\n"
        );
    }
    let _ = write!(
        s,
        "backend origin\n    mode http\n    # keep-alive to the origin; idle connections shared by all client connections\n    \
         http-reuse always\n{forwarding}    server origin {origin}\n\n\
         listen l4\n    mode tcp\n    bind {}\n    server origin {origin}\n",
        l.l4
    );
    s
}

/// NGINX's config (`nginx -c FILE -g 'daemon off;'`), with its pid file, error log and temp
/// paths in `dir`. `stream_module` is the dynamic `ngx_stream_module.so` to load (Debian's
/// libnginx-mod-stream), `None` when the stream module is built in.
///
/// `proxy_max_temp_file_size 0` keeps NGINX from spilling large responses to disk when the
/// client reads slower than the origin sends (it then waits, as HAProxy and Headway do).
/// NGINX 1.22 (Debian 12) has no `http2 on;` (1.25.1+): `listen … http2` on a plain-text socket
/// serves HTTP/2 with prior knowledge only, so it gets a listener of its own.
pub fn nginx(
    origin: SocketAddr,
    workers: u32,
    l: &Listeners,
    maxconn: u32,
    dir: &Path,
    stream_module: Option<&Path>,
) -> String {
    let d = dir.display();
    let mut s = String::from("# headway bench adc: NGINX in front of `headway origin`.\n");
    if let Some(m) = stream_module {
        let _ = writeln!(s, "load_module {};", m.display());
    }
    let _ = writeln!(
        s,
        "worker_processes {workers};\n\
         worker_rlimit_nofile {nofile};\n\
         pid {d}/nginx.pid;\n\
         error_log {d}/nginx-error.log warn;\n\n\
         events {{\n    worker_connections {maxconn};\n}}\n\n\
         http {{\n    access_log off;\n    keepalive_requests 1000000;\n\
         \x20   client_body_temp_path {d}/nginx-client-body;\n\
         \x20   proxy_temp_path {d}/nginx-proxy;\n\
         \x20   fastcgi_temp_path {d}/nginx-fastcgi;\n\
         \x20   uwsgi_temp_path {d}/nginx-uwsgi;\n\
         \x20   scgi_temp_path {d}/nginx-scgi;\n\n\
         \x20   upstream origin {{\n        server {origin};\n        keepalive 64;\n        keepalive_requests 1000000;\n    }}\n\n\
         \x20   server {{\n        listen {};",
        l.l7,
        nofile = maxconn.saturating_mul(2),
    );
    if let Some(h2) = l.h2 {
        let _ = writeln!(s, "        listen {h2} http2;");
    }
    let _ = write!(
        s,
        "        location / {{\n            proxy_pass http://origin;\n            proxy_http_version 1.1;\n\
         \x20           proxy_set_header Connection \"\";\n{NGINX_FORWARDING}\
         \x20           proxy_max_temp_file_size 0;\n        }}\n    }}\n"
    );
    if let Some(h2) = l.h2_both {
        // NGINX's HTTP/2 to servers is its gRPC proxy (any HTTP/2 answer passes).
        let _ = write!(
            s,
            "\n    upstream origin_h2 {{\n        server {origin};\n        keepalive 64;\n        keepalive_requests 1000000;\n    }}\n\n\
             \x20   server {{\n        listen {h2} http2;\n        http2_max_requests 1000000;\n\
             \x20       location / {{\n            grpc_pass grpc://origin_h2;\n{}        }}\n    }}\n",
            NGINX_FORWARDING.replace("proxy_set_header", "grpc_set_header")
        );
    }
    let _ = write!(
        s,
        "}}\n\n\
         stream {{\n    upstream origin {{\n        server {origin};\n    }}\n\n\
         \x20   server {{\n        listen {};\n        proxy_pass origin;\n    }}\n}}\n",
        l.l4
    );
    s
}

/// [`nginx`]'s config with one HTTP listener at `listen` and its `http {}` block only (no
/// stream module): what the other matrices start from and change.
pub fn nginx_http(
    origin: SocketAddr,
    workers: u32,
    listen: SocketAddr,
    maxconn: u32,
    dir: &Path,
) -> String {
    let l = Listeners {
        l7: listen,
        l4: listen,
        h2: None,
        h2_both: None,
        admin: None,
    };
    let base = nginx(origin, workers, &l, maxconn, dir, None);
    // The stream block would listen on `l4` too.
    let http_end = base.find("\nstream {").unwrap_or(base.len());
    format!("{}\n", &base[..http_end])
}

/// Headway's config (`headway run -c FILE`): one round-robin server group with the origin, an
/// `http` virtual server (HTTP/1.1 and HTTP/2 prior knowledge on one listener) and a `tcp` one.
pub fn headway(origin: SocketAddr, workers: u32, l: &Listeners) -> String {
    let admin = l
        .admin
        .map_or_else(|| "127.0.0.1:0".to_string(), |a| a.to_string());
    format!(
        "# headway bench adc: Headway in front of `headway origin`.\n\
         [admin]\nlisten = \"{admin}\"\n\n\
         [runtime]\nworkers = {workers}\n\n\
         [[server_group]]\nname = \"origin\"\nmethod = \"round-robin\"\n\
         [[server_group.server]]\naddress = \"{origin}\"\n\n\
         [[virtual_server]]\nname = \"l7\"\nkind = \"http\"\nlisten = \"{}\"\ngroup = \"origin\"\n\n\
         [[virtual_server]]\nname = \"l4\"\nkind = \"tcp\"\nlisten = \"{}\"\ngroup = \"origin\"\n{}",
        l.l7,
        l.l4,
        l.h2_both.map_or_else(String::new, |h2| format!(
            "\n[[server_group]]\nname = \"origin_h2\"\nmethod = \"round-robin\"\nprotocol = \"h2\"\n\
             [[server_group.server]]\naddress = \"{origin}\"\n\n\
             [[virtual_server]]\nname = \"h2_both\"\nkind = \"http\"\nlisten = \"{h2}\"\n\
             group = \"origin_h2\"\n"
        ))
    )
}

/// wrk's Lua script for the 10-requests-per-connection cells.
///
/// Each wrk thread counts its requests and sends `Connection: close` on every 10th; the server
/// answers that request and closes, and wrk opens a new connection. A thread's requests are
/// spread over its connections, so one connection may carry more or fewer than 10, but there is
/// exactly one close per 10 requests: 10 requests per connection on average.
pub const TEN_PER_CONNECTION_LUA: &str = r#"-- headway bench adc: 10 requests per connection on average.
-- Every 10th request of a thread asks the server to close the connection; wrk then reconnects.
local n = 0
local keep, close

function init(args)
  keep = wrk.format()
  close = wrk.format(nil, nil, { ["Connection"] = "close" })
end

function request()
  n = n + 1
  if n % 10 == 0 then
    return close
  end
  return keep
end
"#;

/// wrk's Lua script for a paced load (`headway bench adc --paced`).
///
/// Arguments after wrk's `--`: requests per connection (`0`: keep-alive; `1`: `Connection:
/// close` on every request; `N`: on every Nth request of the thread, as
/// [`TEN_PER_CONNECTION_LUA`]) and the milliseconds between two requests of a wrk thread.
/// Each thread keeps a schedule of request times that period apart, whatever the answers'
/// latency: before each request (wrk's `delay`, whole milliseconds) a connection waits for the
/// next free time (the monotonic clock, read through LuaJIT's FFI). So the offered rate does
/// not depend on how fast the target answers, as a fixed think time would, and every target
/// gets the same load as long as the thread has a connection free at each time. A schedule
/// that falls more than 50 ms behind (a target that cannot keep up) restarts from the present
/// rather than sending the missed requests at once.
pub const PACED_LUA: &str = r#"-- headway bench adc --paced: a paced load.
-- Arguments: requests per connection (0: keep-alive), milliseconds between a thread's requests.
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } headway_timespec;
int clock_gettime(int clock, headway_timespec *ts);
]]
local ts = ffi.new("headway_timespec")
local CLOCK_MONOTONIC = 1

local function now_ms()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local n = 0
local per, period = 0, 1
local slot = nil
local keep, close

function init(args)
  per = tonumber(args[1]) or 0
  period = tonumber(args[2]) or 1
  keep = wrk.format()
  close = wrk.format(nil, nil, { ["Connection"] = "close" })
end

function delay()
  local now = now_ms()
  if slot == nil or slot < now - 50 then
    slot = now
  end
  slot = slot + period
  local wait = slot - now
  if wait < 1 then
    return 0
  end
  return math.floor(wait)
end

function request()
  n = n + 1
  if per > 0 and n % per == 0 then
    return close
  end
  return keep
end
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn listeners(h2: bool) -> Listeners {
        Listeners {
            l7: addr(8001),
            l4: addr(8002),
            h2: h2.then(|| addr(8003)),
            h2_both: h2.then(|| addr(8004)),
            admin: Some(addr(9290)),
        }
    }

    /// Writes `text` to `file` and asserts that `tool ARGS… FILE` (a config check) accepts it.
    fn accepts(text: &str, file: &Path, tool: &str, args: &[&str]) {
        std::fs::write(file, text).unwrap();
        let out = std::process::Command::new(tool)
            .args(args)
            .arg(file)
            .output()
            .unwrap_or_else(|e| panic!("{tool}: {e} (installed by `bash scripts/setup.sh`)"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{tool} refused:\n{text}\n{err}");
    }

    /// Every HTTP path of HAProxy's and NGINX's configs adds the forwarding fields Headway adds
    /// by default, and the real HAProxy and NGINX (installed by `scripts/setup.sh`) accept the
    /// configs of the main matrix and of the compression and WebSocket runs.
    #[test]
    fn haproxy_and_nginx_forward_as_headway_does_and_take_the_configs() {
        let dir = std::env::temp_dir().join(format!("headway-adc-configs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let module = Path::new(crate::bench::adc::NGINX_STREAM_MODULE);
        let module = module.exists().then_some(module);
        let l = listeners(true);
        let haproxies = [
            haproxy(addr(8080), 2, &l, 4096),
            super::super::compression::haproxy(addr(8080), 2, addr(8001), 4096),
            super::super::websocket::haproxy(addr(8080), 2, addr(8001), 4096),
        ];
        let nginxes = [
            nginx(addr(8080), 2, &l, 4096, &dir, module),
            super::super::compression::nginx(addr(8080), 2, addr(8001), 4096, &dir),
            super::super::websocket::nginx(addr(8080), 2, addr(8001), 4096, &dir),
        ];
        for (i, c) in haproxies.iter().enumerate() {
            // One per `mode http` backend.
            let backends =
                c.matches("backend origin").count() - c.matches("default_backend origin").count();
            assert_eq!(c.matches("option forwardfor\n").count(), backends, "{c}");
            assert_eq!(
                c.matches("set-header X-Forwarded-Proto http\n").count(),
                backends,
                "{c}"
            );
            accepts(
                c,
                &dir.join(format!("haproxy-{i}.cfg")),
                "haproxy",
                &["-c", "-f"],
            );
        }
        for (i, c) in nginxes.iter().enumerate() {
            // One per location that proxies.
            let locations = c.matches("location / {").count();
            let set = c
                .matches("_set_header X-Forwarded-For $proxy_add_x_forwarded_for;")
                .count();
            assert_eq!(set, locations, "{c}");
            assert_eq!(
                c.matches("_set_header X-Forwarded-Proto $scheme;").count(),
                locations
            );
            accepts(
                c,
                &dir.join(format!("nginx-{i}.conf")),
                "nginx",
                &["-t", "-c"],
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn haproxy_has_threads_reuse_l4_and_an_h2_bind_and_no_log() {
        let c = haproxy(addr(8080), 2, &listeners(true), 4096);
        for want in [
            "nbthread 2",
            "maxconn 4096",
            "bind 127.0.0.1:8001\n",
            "bind 127.0.0.1:8003 proto h2",
            "http-reuse always",
            "server origin 127.0.0.1:8080",
            "listen l4\n    mode tcp\n    bind 127.0.0.1:8002",
            "bind 127.0.0.1:8004 proto h2\n    default_backend origin_h2",
            "server origin 127.0.0.1:8080 proto h2",
        ] {
            assert!(c.contains(want), "missing {want:?} in\n{c}");
        }
        assert!(!c.lines().any(|l| l.trim_start().starts_with("log ")));
        assert!(!haproxy(addr(8080), 2, &listeners(false), 4096).contains("proto h2"));
    }

    #[test]
    fn nginx_has_workers_upstream_keepalive_stream_and_paths_in_the_temp_dir() {
        let module = Path::new("/usr/lib/nginx/modules/ngx_stream_module.so");
        let c = nginx(
            addr(8080),
            3,
            &listeners(true),
            4096,
            Path::new("/tmp/x"),
            Some(module),
        );
        for want in [
            "load_module /usr/lib/nginx/modules/ngx_stream_module.so;",
            "worker_processes 3;",
            "worker_connections 4096;",
            "pid /tmp/x/nginx.pid;",
            "error_log /tmp/x/nginx-error.log warn;",
            "access_log off;",
            "keepalive_requests 1000000;",
            "keepalive 64;",
            "listen 127.0.0.1:8001;",
            "listen 127.0.0.1:8003 http2;",
            "proxy_http_version 1.1;",
            "proxy_set_header Connection \"\";",
            "proxy_max_temp_file_size 0;",
            "stream {",
            "listen 127.0.0.1:8002;",
            "listen 127.0.0.1:8004 http2;",
            "grpc_pass grpc://origin_h2;",
        ] {
            assert!(c.contains(want), "missing {want:?} in\n{c}");
        }
        // Every temp path is in the run's directory, none in /var/lib/nginx.
        for l in c.lines().filter(|l| l.contains("_temp_path")) {
            assert!(l.contains("/tmp/x/"), "{l}");
        }
        // Braces balance, so nginx can parse it.
        assert_eq!(c.matches('{').count(), c.matches('}').count());
        let builtin = nginx(
            addr(8080),
            1,
            &listeners(false),
            4096,
            Path::new("/t"),
            None,
        );
        assert!(!builtin.contains("load_module"));
        assert!(!builtin.contains("http2"));
    }

    #[test]
    fn headway_follows_the_config_contract() {
        let c = headway(addr(8080), 2, &listeners(false));
        let v: toml::Value = toml::from_str(&c).unwrap();
        assert_eq!(v["admin"]["listen"].as_str(), Some("127.0.0.1:9290"));
        assert_eq!(v["runtime"]["workers"].as_integer(), Some(2));
        let g = &v["server_group"][0];
        assert_eq!(g["name"].as_str(), Some("origin"));
        assert_eq!(g["method"].as_str(), Some("round-robin"));
        assert_eq!(g["server"][0]["address"].as_str(), Some("127.0.0.1:8080"));
        let vs = v["virtual_server"].as_array().unwrap();
        let kinds: Vec<_> = vs
            .iter()
            .map(|s| {
                (
                    s["kind"].as_str().unwrap(),
                    s["listen"].as_str().unwrap(),
                    s["group"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("http", "127.0.0.1:8001", "origin"),
                ("tcp", "127.0.0.1:8002", "origin")
            ]
        );
    }

    #[test]
    fn headway_speaks_http2_to_the_origin_on_the_h2_both_listener() {
        let c = headway(addr(8080), 2, &listeners(true));
        let v: toml::Value = toml::from_str(&c).unwrap();
        let g = &v["server_group"][1];
        assert_eq!(g["name"].as_str(), Some("origin_h2"));
        assert_eq!(g["protocol"].as_str(), Some("h2"));
        assert_eq!(g["server"][0]["address"].as_str(), Some("127.0.0.1:8080"));
        let vs = &v["virtual_server"][2];
        assert_eq!(vs["listen"].as_str(), Some("127.0.0.1:8004"));
        assert_eq!(vs["group"].as_str(), Some("origin_h2"));
        // It is a config Headway takes.
        headway_config::Config::parse(&c, "headway.toml").unwrap();
    }

    #[test]
    fn the_lua_script_closes_every_tenth_request() {
        assert!(TEN_PER_CONNECTION_LUA.contains("n % 10 == 0"));
        assert!(TEN_PER_CONNECTION_LUA.contains(r#"["Connection"] = "close""#));
        assert!(TEN_PER_CONNECTION_LUA.contains("function request()"));
    }

    #[test]
    fn max_connections_is_far_above_the_load() {
        assert_eq!(max_connections(64), 4096);
        assert_eq!(max_connections(2000), 8000);
    }
}
