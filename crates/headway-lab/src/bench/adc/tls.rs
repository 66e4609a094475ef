//! `headway bench adc --tls`: TLS termination by HAProxy, NGINX and Headway side by side on
//! loopback (issue 5): new handshakes/s, resumed handshakes/s and HTTPS throughput.
//!
//! One `headway origin` serves `/corpus/random/SIZE` in clear text; each proxy terminates TLS in
//! front of it with the same number of workers, two listeners each — one with an ECDSA P-256
//! certificate, one with an RSA-2048 certificate, both made at run time with the `openssl` CLI
//! into the run's temp dir. The cells:
//!
//! | cell | what | client |
//! |---|---|---|
//! | `new-ecdsa`, `new-rsa` | full handshakes/s, one HTTP/1.0 request per connection, no resumption | `openssl s_time -new` |
//! | `resumed` | handshakes/s resuming the session of an earlier connection (ECDSA listener) | `openssl s_time -reuse` |
//! | `tput-SIZE` | requests/s and MB/s over keep-alive TLS connections (ECDSA listener) | wrk |
//!
//! `s_time` is single-threaded and blocking, so [`clients`] of them run in parallel and the rate
//! is their connections over the wall time of the whole run. It prints one mark per connection:
//! `r` when OpenSSL's `SSL_session_reused` says the connection was resumed, `*` for a full TLS 1.3
//! handshake; [`parse_s_time`] counts them, which proves (client side) what a cell measured.
//! Server side, Headway's admin snapshot counts full and resumed handshakes per virtual server,
//! and HAProxy's `show stat` (stats socket) per frontend (`ssl_sess`, `ssl_reused_sess`), both
//! read before and after each run; NGINX has no such counter without an access log.
//!
//! Every client gets one OpenSSL config ([`client_openssl_conf`], through `OPENSSL_CONF`) that
//! offers TLS 1.3's `TLS_AES_128_GCM_SHA256` and the X25519 group only; HAProxy and NGINX are
//! configured to accept only those too (Headway's TLS has no cipher setting, and the client's
//! offer decides). One `openssl s_client` probe per listener records what was negotiated.
//!
//! For every cell and proxy: the rate and the proxy's CPU-seconds (user + system of all its
//! processes, `/proc/PID/stat`) per 1,000 handshakes or per 100,000 requests — on a small
//! machine the client saturates first, so CPU per handshake is the fair comparison — medians
//! over `--repeats`, proxies taking turns in a rotating order, ratios to HAProxy.
//!
//! It does not tune the host, and it does not measure TLS 1.2 or HTTP/2 over TLS. Every process
//! started here is stopped at the end, on error and on Ctrl-C ([`crate::interrupt`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use headway_core::SystemClock;

use super::load::{self, Load, PerConnection};
use super::procs::{self, Proc, TempDir};
use super::{
    command_line, config, fmt_cpu, host_line, is_interrupt, launch, load_average, size_label,
    start_origin, thousands, AdcArgs, Ends, Instance, Target, Versions,
};
use crate::interrupt;

/// The one TLS 1.3 cipher suite every client offers.
pub const CIPHERSUITE: &str = "TLS_AES_128_GCM_SHA256";
/// The one key-exchange group every client offers.
pub const GROUP: &str = "X25519";
/// The path of the handshake cells' one request per connection.
pub const HANDSHAKE_PATH: &str = "/corpus/random/128";

/// A certificate's key type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// ECDSA on P-256.
    Ecdsa,
    /// RSA, 2048 bits.
    Rsa,
}

impl Key {
    /// Both, in report order.
    pub const ALL: [Key; 2] = [Key::Ecdsa, Key::Rsa];

    /// Its name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Key::Ecdsa => "ECDSA P-256",
            Key::Rsa => "RSA-2048",
        }
    }

    /// Its name in files, configs and CSV.
    pub fn key(self) -> &'static str {
        match self {
            Key::Ecdsa => "ecdsa",
            Key::Rsa => "rsa",
        }
    }

    /// `openssl req` arguments that make the key.
    fn newkey(self) -> [&'static str; 4] {
        match self {
            Key::Ecdsa => ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
            Key::Rsa => ["-newkey", "rsa", "-pkeyopt", "rsa_keygen_bits:2048"],
        }
    }
}

/// What a cell measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Full handshakes with this certificate, one request per connection.
    New(Key),
    /// Resumed handshakes (ECDSA listener), one request per connection.
    Resumed,
    /// Keep-alive HTTPS requests of this response size (ECDSA listener).
    Throughput(u64),
}

impl Kind {
    /// Its name in tables.
    pub fn label(self) -> String {
        match self {
            Kind::New(k) => format!("new, {}", k.label()),
            Kind::Resumed => "resumed (session ticket)".into(),
            Kind::Throughput(size) => size_label(size),
        }
    }

    /// Its name in CSV.
    pub fn key(self) -> String {
        match self {
            Kind::New(k) => format!("new-{}", k.key()),
            Kind::Resumed => "resumed".into(),
            Kind::Throughput(size) => format!("tput-{size}"),
        }
    }

    /// The certificate of the listener it runs against.
    pub fn cert(self) -> Key {
        match self {
            Kind::New(k) => k,
            _ => Key::Ecdsa,
        }
    }

    /// Whether it counts handshakes (else requests).
    pub fn is_handshake(self) -> bool {
        !matches!(self, Kind::Throughput(_))
    }
}

/// The cells of a run, in report order: both new-handshake cells, the resumed one, then
/// throughput at `sizes` (the seed's five when empty; 128 B and 64 KiB with `quick`).
pub fn cells(quick: bool, sizes: &[u64]) -> Vec<Kind> {
    let sizes: Vec<u64> = if !sizes.is_empty() {
        sizes.to_vec()
    } else if quick {
        vec![128, 64 << 10]
    } else {
        super::SIZES.to_vec()
    };
    let mut out: Vec<Kind> = Key::ALL.into_iter().map(Kind::New).collect();
    out.push(Kind::Resumed);
    out.extend(sizes.into_iter().map(Kind::Throughput));
    out
}

/// How many `openssl s_time` processes run in parallel for `threads` load-tool threads: two
/// per thread, so that one waits on the network while the other computes.
pub fn clients(threads: u32) -> u32 {
    threads.max(1) * 2
}

/// The OpenSSL config every client runs with (`OPENSSL_CONF`): its `system_default` section
/// applies to every `SSL_CTX` of s_time, s_client and wrk.
pub fn client_openssl_conf() -> String {
    format!(
        "# headway bench adc --tls: what every client offers.\n\
         openssl_conf = default_conf\n\n[default_conf]\nssl_conf = ssl_sect\n\n\
         [ssl_sect]\nsystem_default = system_default_sect\n\n\
         [system_default_sect]\nMinProtocol = TLSv1.3\nCiphersuites = {CIPHERSUITE}\n\
         Groups = {GROUP}\n"
    )
}

/// Where one proxy listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen {
    /// The listener with the ECDSA certificate.
    pub ecdsa: SocketAddr,
    /// The listener with the RSA certificate.
    pub rsa: SocketAddr,
}

impl Listen {
    /// The listener with `key`'s certificate.
    pub fn of(&self, key: Key) -> SocketAddr {
        match key {
            Key::Ecdsa => self.ecdsa,
            Key::Rsa => self.rsa,
        }
    }
}

/// HAProxy's config: a TLS frontend per certificate (`dir/KEY.pem`, certificate then key), only
/// [`CIPHERSUITE`] and [`GROUP`], keep-alive to the origin, and a stats socket
/// (`dir/haproxy.sock`) for `show stat`.
pub fn haproxy(origin: SocketAddr, workers: u32, l: &Listen, maxconn: u32, dir: &Path) -> String {
    let d = dir.display();
    let mut s = format!(
        "# headway bench adc --tls: HAProxy terminating TLS in front of `headway origin`.\n\
         global\n    nbthread {workers}\n    maxconn {maxconn}\n    \
         ssl-default-bind-ciphersuites {CIPHERSUITE}\n    \
         ssl-default-bind-options ssl-min-ver TLSv1.2\n    \
         stats socket {d}/haproxy.sock level user\n    # no `log` line: nothing is logged\n\n\
         defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    \
         timeout server 30s\n\n"
    );
    for key in Key::ALL {
        let _ = write!(
            s,
            "frontend {k}\n    bind {} ssl crt {d}/{k}.pem curves {GROUP}\n    \
             default_backend origin\n\n",
            l.of(key),
            k = key.key(),
        );
    }
    let _ = write!(
        s,
        "backend origin\n    http-reuse always\n{}    server origin {origin}\n",
        config::haproxy_forwarding("https")
    );
    s
}

/// NGINX's config: a TLS `server {}` per certificate (`dir/KEY.crt`, `dir/KEY.key`), only
/// [`CIPHERSUITE`] (`ssl_conf_command`) and [`GROUP`], a shared session cache like the others'
/// (unused by TLS 1.3's stateless tickets), keep-alive to the origin, no access log.
pub fn nginx(origin: SocketAddr, workers: u32, l: &Listen, maxconn: u32, dir: &Path) -> String {
    let d = dir.display();
    let mut s = format!(
        "# headway bench adc --tls: NGINX terminating TLS in front of `headway origin`.\n\
         worker_processes {workers};\nworker_rlimit_nofile {nofile};\npid {d}/nginx.pid;\n\
         error_log {d}/nginx-error.log warn;\n\n\
         events {{\n    worker_connections {maxconn};\n}}\n\n\
         http {{\n    access_log off;\n    keepalive_requests 1000000;\n\
         \x20   client_body_temp_path {d}/nginx-client-body;\n\
         \x20   proxy_temp_path {d}/nginx-proxy;\n\
         \x20   fastcgi_temp_path {d}/nginx-fastcgi;\n\
         \x20   uwsgi_temp_path {d}/nginx-uwsgi;\n\
         \x20   scgi_temp_path {d}/nginx-scgi;\n\n\
         \x20   ssl_protocols TLSv1.2 TLSv1.3;\n\
         \x20   ssl_conf_command Ciphersuites {CIPHERSUITE};\n\
         \x20   ssl_ecdh_curve {GROUP};\n\
         \x20   ssl_session_cache shared:TLS:8m;\n\n\
         \x20   upstream origin {{\n        server {origin};\n        keepalive 64;\n\
         \x20       keepalive_requests 1000000;\n    }}\n",
        nofile = maxconn.saturating_mul(2),
    );
    for key in Key::ALL {
        let _ = write!(
            s,
            "\n    server {{\n        listen {} ssl;\n        ssl_certificate {d}/{k}.crt;\n\
             \x20       ssl_certificate_key {d}/{k}.key;\n        location / {{\n\
             \x20           proxy_pass http://origin;\n            proxy_http_version 1.1;\n\
             \x20           proxy_set_header Connection \"\";\n{}\
             \x20           proxy_max_temp_file_size 0;\n        }}\n    }}\n",
            l.of(key),
            config::NGINX_FORWARDING,
            k = key.key(),
        );
    }
    s.push_str("}\n");
    s
}

/// Headway's config: a `[[certificate]]` per key (`dir/KEY.crt`, `dir/KEY.key`) and an `https`
/// virtual server per certificate, named after the key, with the default TLS settings (1.2 and
/// 1.3, session tickets on).
pub fn headway(
    origin: SocketAddr,
    workers: u32,
    l: &Listen,
    admin: SocketAddr,
    dir: &Path,
) -> String {
    let d = dir.display();
    let mut s = format!(
        "# headway bench adc --tls: Headway terminating TLS in front of `headway origin`.\n\
         [admin]\nlisten = \"{admin}\"\n\n[runtime]\nworkers = {workers}\n\n"
    );
    for key in Key::ALL {
        let _ = write!(
            s,
            "[[certificate]]\nname = \"{k}\"\ncert_file = \"{d}/{k}.crt\"\n\
             key_file = \"{d}/{k}.key\"\n\n",
            k = key.key()
        );
    }
    let _ = write!(
        s,
        "[[server_group]]\nname = \"origin\"\n[[server_group.server]]\naddress = \"{origin}\"\n"
    );
    for key in Key::ALL {
        let _ = write!(
            s,
            "\n[[virtual_server]]\nname = \"{k}\"\nkind = \"https\"\nlisten = \"{}\"\n\
             group = \"origin\"\n[virtual_server.tls]\ncertificates = [\"{k}\"]\n",
            l.of(key),
            k = key.key()
        );
    }
    s
}

/// Makes `dir/KEY.crt` and `dir/KEY.key` (self-signed for `localhost` and 127.0.0.1, PKCS#8
/// key) for both keys, and `dir/KEY.pem` (both in one file) for HAProxy.
fn make_certificates(dir: &Path) -> Result<()> {
    for key in Key::ALL {
        let crt = dir.join(format!("{}.crt", key.key()));
        let pem = dir.join(format!("{}.pem", key.key()));
        let keyfile = dir.join(format!("{}.key", key.key()));
        let mut argv: Vec<String> = ["openssl", "req", "-x509", "-nodes", "-days", "2"]
            .map(String::from)
            .to_vec();
        argv.extend(key.newkey().map(String::from));
        argv.extend([
            "-keyout".into(),
            keyfile.display().to_string(),
            "-out".into(),
            crt.display().to_string(),
            "-subj".into(),
            "/CN=localhost".into(),
            "-addext".into(),
            "subjectAltName=DNS:localhost,IP:127.0.0.1".into(),
        ]);
        let mut p = Proc::spawn(&argv, &dir.join("openssl-req.log"))?;
        let status = p.wait_exit(Duration::from_secs(60))?;
        if !status.success() {
            bail!("`{}` failed ({status}): {}", p.command(), p.log_tail(4));
        }
        let both = std::fs::read_to_string(&crt)? + &std::fs::read_to_string(&keyfile)?;
        std::fs::write(&pem, both).with_context(|| format!("writing {}", pem.display()))?;
    }
    Ok(())
}

/// What one `openssl s_time` process printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct STime {
    /// Connections it counted (its summary line).
    pub connections: u64,
    /// Connections marked `r`: `SSL_session_reused` was true.
    pub resumed: u64,
    /// Connections marked otherwise (`*` for TLS 1.3, `t`, `3`): full handshakes.
    pub full: u64,
}

impl std::ops::Add for STime {
    type Output = STime;

    fn add(self, o: STime) -> STime {
        STime {
            connections: self.connections + o.connections,
            resumed: self.resumed + o.resumed,
            full: self.full + o.full,
        }
    }
}

/// Reads `openssl s_time`'s output: the marks lines (one character per connection, no
/// separators) and the summary `N connections in X.XXs; Y connections/user sec, …`.
pub fn parse_s_time(text: &str) -> Result<STime> {
    let mut out = STime::default();
    let mut summary = None;
    for line in text.lines().map(str::trim) {
        if !line.is_empty() && line.bytes().all(|b| matches!(b, b'r' | b'*' | b't' | b'3')) {
            let r = line.bytes().filter(|&b| b == b'r').count() as u64;
            out.resumed += r;
            out.full += line.len() as u64 - r;
        } else if line.contains("connections/user sec") && summary.is_none() {
            summary = line
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok());
        }
    }
    let Some(n) = summary else {
        bail!(
            "no `N connections in …` line in s_time's output: {}",
            crate::lab::tail(text.trim_end(), 3).replace('\n', " | ")
        );
    };
    out.connections = n;
    Ok(out)
}

/// What `openssl s_client` says was negotiated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Negotiated {
    /// `TLSv1.3`.
    pub protocol: String,
    /// `TLS_AES_128_GCM_SHA256`.
    pub cipher: String,
    /// The key exchange: `X25519`.
    pub group: String,
    /// The server's signature: `ECDSA`, `RSA-PSS`.
    pub signature: String,
    /// The server key's size, bits.
    pub key_bits: Option<u32>,
    /// The status of the answer to the handshake cells' request, as `s_time` sends it.
    pub status: Option<u16>,
}

impl Negotiated {
    /// `TLSv1.3, TLS_AES_128_GCM_SHA256, X25519, ECDSA 256-bit key; HTTP 200`.
    pub fn line(&self) -> String {
        let bits = self
            .key_bits
            .map_or(String::new(), |b| format!(" {b}-bit key"));
        let status = self
            .status
            .map_or("no HTTP answer".into(), |s| format!("HTTP {s}"));
        format!(
            "{}, {}, {}, {}{bits}; {status}",
            self.protocol, self.cipher, self.group, self.signature
        )
    }
}

/// Reads `openssl s_client`'s report: `New, TLSv1.3, Cipher is …`, `Server Temp Key: X25519,
/// 253 bits`, `Peer signature type: ECDSA`, `Server public key is 256 bit`, and the status line
/// of the HTTP answer that follows (`HTTP/1.1 200 OK`).
pub fn parse_s_client(text: &str) -> Result<Negotiated> {
    let mut n = Negotiated::default();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line
            .strip_prefix("New, ")
            .or_else(|| line.strip_prefix("Reused, "))
        {
            if let Some((proto, cipher)) = rest.split_once(", Cipher is ") {
                n.protocol = proto.trim().to_string();
                n.cipher = cipher.trim().to_string();
            }
        } else if let Some(rest) = line.strip_prefix("Server Temp Key:") {
            n.group = rest.split(',').next().unwrap_or("").trim().to_string();
        } else if let Some(rest) = line.strip_prefix("Peer signature type:") {
            n.signature = rest.trim().to_string();
        } else if let Some(rest) = line.strip_prefix("Server public key is ") {
            n.key_bits = rest.split_whitespace().next().and_then(|b| b.parse().ok());
        } else if line.starts_with("HTTP/1.") && n.status.is_none() {
            n.status = line.split_whitespace().nth(1).and_then(|c| c.parse().ok());
        }
    }
    if n.protocol.is_empty() || n.cipher.is_empty() {
        bail!(
            "no `New, PROTOCOL, Cipher is …` line in s_client's output: {}",
            crate::lab::tail(text.trim_end(), 3).replace('\n', " | ")
        );
    }
    Ok(n)
}

/// Full and resumed handshakes of `frontend` in HAProxy's `show stat` CSV (its SSL module's
/// `ssl_sess` and `ssl_reused_sess` columns, on the `FRONTEND` row).
pub fn haproxy_handshakes(csv: &str, frontend: &str) -> Option<(u64, u64)> {
    let mut lines = csv.lines();
    let head: Vec<&str> = lines
        .next()?
        .trim_start_matches('#')
        .trim()
        .split(',')
        .collect();
    let col = |name: &str| head.iter().position(|h| *h == name);
    let (px, sv) = (col("pxname")?, col("svname")?);
    let (full, resumed) = (col("ssl_sess")?, col("ssl_reused_sess")?);
    lines.find_map(|l| {
        let f: Vec<&str> = l.split(',').collect();
        if f.get(px) != Some(&frontend) || f.get(sv) != Some(&"FRONTEND") {
            return None;
        }
        Some((f.get(full)?.parse().ok()?, f.get(resumed)?.parse().ok()?))
    })
}

/// Full and resumed handshakes of virtual server `vs` in Headway's `GET /api/v1/adc` JSON.
pub fn headway_handshakes(adc: &serde_json::Value, vs: &str) -> Option<(u64, u64)> {
    let v = adc["virtual_servers"]
        .as_array()?
        .iter()
        .find(|v| v["name"].as_str() == Some(vs))?;
    let tls = &v["tls"];
    Some((
        tls["handshakes_full"].as_u64()?,
        tls["handshakes_resumed"].as_u64()?,
    ))
}

/// The server's count of a handshake run's handshakes (Headway's or HAProxy's counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerView {
    /// Full handshakes.
    pub full: u64,
    /// Resumed handshakes.
    pub resumed: u64,
}

impl ServerView {
    /// The resumed fraction, 0–1; `None` without handshakes.
    pub fn resumed_fraction(self) -> Option<f64> {
        let n = self.full + self.resumed;
        (n > 0).then(|| self.resumed as f64 / n as f64)
    }
}

/// One run of one cell against one proxy.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Handshakes (connections) or requests completed.
    pub count: u64,
    /// Wall seconds (handshakes) or wrk's measured seconds (throughput).
    pub seconds: f64,
    /// User + system seconds of the proxy's processes during the run.
    pub cpu_seconds: f64,
    /// Handshake runs: the client's marks.
    pub client: Option<STime>,
    /// Handshake runs: the server's view, where it has one.
    pub server: Option<ServerView>,
    /// Socket errors and error statuses (throughput runs).
    pub trouble: u64,
}

impl Run {
    /// Handshakes or requests per second.
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.count as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// CPU-seconds per `per` handshakes or requests.
    pub fn cpu_per(&self, per: f64) -> Option<f64> {
        (self.count > 0).then(|| self.cpu_seconds / self.count as f64 * per)
    }
}

/// The runs of one cell and proxy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entry {
    /// Runs with numbers.
    pub runs: Vec<Run>,
    /// Runs that failed, with why.
    pub errors: Vec<String>,
}

impl Entry {
    /// Median rate.
    pub fn rate(&self) -> Option<f64> {
        let v: Vec<f64> = self.runs.iter().map(Run::rate).collect();
        crate::bench::median(&v)
    }

    /// Median CPU-seconds per `per`.
    pub fn cpu_per(&self, per: f64) -> Option<f64> {
        let v: Vec<f64> = self.runs.iter().filter_map(|r| r.cpu_per(per)).collect();
        crate::bench::median(&v)
    }

    /// All runs' client marks added up.
    pub fn client(&self) -> Option<STime> {
        self.runs
            .iter()
            .filter_map(|r| r.client)
            .reduce(|a, b| a + b)
    }

    /// All runs' server counts added up.
    pub fn server(&self) -> Option<ServerView> {
        self.runs
            .iter()
            .filter_map(|r| r.server)
            .reduce(|a, b| ServerView {
                full: a.full + b.full,
                resumed: a.resumed + b.resumed,
            })
    }
}

/// A started proxy: where it listens and how to ask it about resumption.
struct Proxy {
    instance: Instance,
    listen: Listen,
    admin: Option<SocketAddr>,
    socket: Option<PathBuf>,
}

/// The run's fixed context.
struct Ctx {
    dir: PathBuf,
    conf: PathBuf,
    seconds: u32,
    ticks: u64,
    clients: u32,
    threads: u32,
    connections: u32,
}

/// Runs the TLS benchmark.
pub fn run(args: &AdcArgs) -> Result<()> {
    let seconds = args.seconds_or(2, 5).max(1);
    let repeats = args.repeats_or(1, 2).max(1);
    let sizes: Vec<u64> = args.sizes.iter().map(|s| s.bytes()).collect();
    let kinds = cells(args.quick, &sizes);
    let versions = Versions::probe();
    if versions.wrk.is_none() {
        bail!("`wrk` is not installed: run `bash scripts/setup.sh` (as root) first");
    }
    let openssl = super::tool_version(&["openssl", "version"])
        .context("the `openssl` command is not installed")?;
    // `OpenSSL 3.0.19 27 Jan 2026 (Library: …)` → `OpenSSL 3.0.19`.
    let openssl = openssl
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let load_at_start = load_average();
    let tmp = TempDir::new("headway-bench-tls")?;
    let dir = tmp.path().to_path_buf();
    let ticks = procs::clock_ticks_per_second()?;
    let exe = std::env::current_exe().context("cannot find the headway binary")?;
    let exe = exe.to_string_lossy().into_owned();
    make_certificates(&dir)?;
    let conf = dir.join("client-openssl.cnf");
    std::fs::write(&conf, client_openssl_conf())?;
    let mut port = procs::port_source(8)?;
    let workers = args.workers.max(1);
    let maxconn = config::max_connections(args.connections);

    let origin = port();
    let origin_proc = start_origin(&exe, origin, args, &dir)?;
    let mut proxies: Vec<Proxy> = Vec::new();
    let mut configs: Vec<(String, String)> = Vec::new();
    for target in [Target::Haproxy, Target::Nginx, Target::Headway] {
        if !args.proxies.contains(&target) {
            continue;
        }
        let l = Listen {
            ecdsa: port(),
            rsa: port(),
        };
        let (mut admin, mut socket) = (None, None);
        let (file, text) = match target {
            Target::Haproxy => {
                socket = Some(dir.join("haproxy.sock"));
                (
                    "haproxy-tls.cfg",
                    haproxy(origin, workers, &l, maxconn, &dir),
                )
            }
            Target::Nginx => ("nginx-tls.conf", nginx(origin, workers, &l, maxconn, &dir)),
            _ => {
                let a = port();
                admin = Some(a);
                ("headway-tls.toml", headway(origin, workers, &l, a, &dir))
            }
        };
        let ends = Ends {
            l7: l.ecdsa,
            l4: l.rsa,
            h2: None,
            h2_both: None,
        };
        let instance = launch(target, ends, &[l.ecdsa, l.rsa], file, &text, &dir, &exe)?;
        if let Some(f) = &instance.failure {
            eprintln!("{}: {f}", target.key());
        }
        configs.push((file.to_string(), text));
        proxies.push(Proxy {
            instance,
            listen: l,
            admin,
            socket,
        });
    }

    // What each listener negotiates with the clients' OpenSSL config.
    let mut negotiated: BTreeMap<(Target, Key), Result<Negotiated, String>> = BTreeMap::new();
    for p in proxies.iter().filter(|p| p.instance.proc.is_some()) {
        for key in Key::ALL {
            let n = probe(p.listen.of(key), &conf, &dir).map_err(|e| format!("{e:#}"));
            interrupt::check()?;
            negotiated.insert((p.instance.target, key), n);
        }
    }

    let ctx = Ctx {
        dir: dir.clone(),
        conf: conf.clone(),
        seconds,
        ticks,
        clients: clients(args.threads),
        threads: args.threads.max(1),
        connections: args.load_connections(),
    };
    let running = proxies.iter().filter(|p| p.instance.proc.is_some()).count();
    eprintln!(
        "adc --tls: {} cells × {running} proxies × {repeats} runs of {seconds} s: about {} min",
        kinds.len(),
        ((kinds.len() * running * repeats as usize) as f64 * (seconds as f64 + 0.8) / 60.0).ceil()
    );
    let mut results: BTreeMap<(Kind, Target), Entry> = BTreeMap::new();
    for &kind in &kinds {
        for round in 0..repeats as usize {
            for k in 0..proxies.len() {
                interrupt::check()?;
                let p = &proxies[(k + round) % proxies.len()];
                let Some(proc) = p.instance.proc.as_ref() else {
                    continue;
                };
                let target = p.instance.target;
                let entry = results.entry((kind, target)).or_default();
                let r = if kind.is_handshake() {
                    run_handshakes(&ctx, kind, p, proc.pid())
                } else {
                    run_throughput(&ctx, kind, p, proc.pid())
                };
                match r {
                    Ok(run) => {
                        let per = if kind.is_handshake() { 1e3 } else { 1e5 };
                        eprintln!(
                            "  {} · {} · run {}: {:.0}/s, {} CPU-s/{}{}",
                            kind.key(),
                            target.key(),
                            round + 1,
                            run.rate(),
                            run.cpu_per(per).map_or("–".into(), fmt_cpu),
                            if kind.is_handshake() { "1k" } else { "100k" },
                            run.client.map_or(String::new(), |c| format!(
                                ", {} of {} resumed (client)",
                                c.resumed,
                                c.resumed + c.full
                            )),
                        );
                        entry.runs.push(run);
                    }
                    Err(e) if is_interrupt(&e) => return Err(e),
                    Err(e) => {
                        eprintln!("  {} · {}: {e:#}", kind.key(), target.key());
                        entry.errors.push(format!("{e:#}"));
                    }
                }
            }
        }
    }
    let status: Vec<String> = proxies
        .iter()
        .map(|p| match &p.instance.failure {
            Some(f) => format!("{}: {}", p.instance.target.label(), f.replace('|', "\\|")),
            None => format!(
                "{}: ran (pid {}), ECDSA on {}, RSA on {}",
                p.instance.target.label(),
                p.instance.proc.as_ref().map_or(0, procs::Proc::pid),
                p.listen.ecdsa,
                p.listen.rsa
            ),
        })
        .collect();
    let targets: Vec<Target> = proxies.iter().map(|p| p.instance.target).collect();
    drop(proxies);
    drop(origin_proc);

    let mut md = String::new();
    let _ = writeln!(
        md,
        "## TLS termination on loopback: HAProxy, NGINX and Headway in front of one `headway origin`\n\n\
         Command: `{}`\n\nHost: {}; load average (1 / 5 / 15 min) {} at the start, {} at the end. \
         Versions: {}, {openssl}.\n\n\
         Setup: TLS 1.3 only on the client side, offering `{CIPHERSUITE}` and `{GROUP}` alone \
         (an `OPENSSL_CONF` for every client; HAProxy and NGINX also accept only those, Headway \
         has no cipher setting). Certificates made for this run: ECDSA P-256 and RSA-2048, \
         self-signed, one listener each. {workers} workers per proxy (HAProxy `nbthread`, NGINX \
         `worker_processes`, Headway `[runtime] workers`), clear-text keep-alive to the origin, \
         no access log. Handshake cells: {} parallel `openssl s_time` (`-new`: a full handshake \
         per connection; `-reuse`: every connection offers the session ticket of an earlier one), \
         one `GET {HANDSHAKE_PATH} HTTP/1.0` per connection, the rate is all connections over the \
         wall time. Throughput: `wrk -t {} -c {}` over keep-alive TLS connections to \
         `/corpus/random/SIZE`. {seconds} s per run, the median of {repeats} run(s), proxies \
         taking turns in a rotating order.\n",
        command_line(),
        host_line(),
        load_at_start,
        load_average(),
        versions.line(),
        ctx.clients,
        ctx.threads,
        ctx.connections,
    );
    for s in &status {
        let _ = writeln!(md, "- {s}");
    }
    md += &render(&kinds, &targets, &results, &negotiated);
    let csv = render_csv(&kinds, &targets, &results);
    println!("{md}");
    super::write_report(
        &args.out,
        &[("tls.md", &md), ("tls.csv", &csv)],
        "adc-configs",
        &configs,
    )
}

/// One `openssl s_client` handshake with the clients' config and the handshake cells' request
/// (HTTP/1.0, no `Host`, as `s_time -www` sends it): what was negotiated and the answer's status.
fn probe(addr: SocketAddr, conf: &Path, dir: &Path) -> Result<Negotiated> {
    let argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "printf 'GET {HANDSHAKE_PATH} HTTP/1.0\\r\\n\\r\\n' | exec env OPENSSL_CONF='{}' \
             openssl s_client -connect {addr} -servername localhost -ign_eof",
            conf.display()
        ),
    ];
    let log = dir.join("s_client.log");
    let mut p = Proc::spawn(&argv, &log)?;
    p.wait_exit(Duration::from_secs(15))?;
    // The answer's body is random bytes: read the log lossily.
    parse_s_client(&String::from_utf8_lossy(&std::fs::read(&log)?))
}

/// `env OPENSSL_CONF=CONF openssl ARGS…`.
fn openssl_argv(conf: &Path, args: &[&str]) -> Vec<String> {
    let mut v = vec![
        "env".to_string(),
        format!("OPENSSL_CONF={}", conf.display()),
        "openssl".to_string(),
    ];
    v.extend(args.iter().map(|a| a.to_string()));
    v
}

/// `clients` `openssl s_time` processes at once against the cell's listener, with the proxy's
/// CPU time and server-side handshake counts read around them.
fn run_handshakes(ctx: &Ctx, kind: Kind, p: &Proxy, pid: i32) -> Result<Run> {
    let addr = p.listen.of(kind.cert());
    let mode = if kind == Kind::Resumed {
        "-reuse"
    } else {
        "-new"
    };
    let vs = kind.cert().key();
    let admin = p
        .admin
        .map(|a| headway_admin::Client::new(format!("http://{a}"), None));
    let counts = || -> Option<(u64, u64)> {
        if let Some(c) = &admin {
            headway_handshakes(&c.adc_json().ok()?, vs)
        } else {
            haproxy_handshakes(&haproxy_stat(p.socket.as_deref()?).ok()?, vs)
        }
    };
    let before_counts = counts();
    let before = procs::cpu_ticks(pid)?;
    let start = SystemClock::now();
    let mut tools = Vec::new();
    for i in 0..ctx.clients {
        let argv = openssl_argv(
            &ctx.conf,
            &[
                "s_time",
                "-connect",
                &addr.to_string(),
                mode,
                "-time",
                &ctx.seconds.to_string(),
                "-www",
                HANDSHAKE_PATH,
            ],
        );
        tools.push(Proc::spawn(
            &argv,
            &ctx.dir.join(format!("s_time-{i}.log")),
        )?);
    }
    let mut total = STime::default();
    let mut failures = Vec::new();
    for t in &mut tools {
        let status = t.wait_exit(Duration::from_secs(u64::from(ctx.seconds) + 30))?;
        match parse_s_time(&t.log_text()) {
            Ok(s) => total = total + s,
            Err(e) => failures.push(format!("`{}` ({status}): {e:#}", t.command())),
        }
    }
    let wall = (SystemClock::now() - start).as_secs_f64();
    let after = procs::cpu_ticks(pid)?;
    let after_counts = counts();
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    if total.connections == 0 {
        bail!("no connection completed");
    }
    let server = before_counts.zip(after_counts).map(|(b, a)| ServerView {
        full: a.0.saturating_sub(b.0),
        resumed: a.1.saturating_sub(b.1),
    });
    Ok(Run {
        count: total.connections,
        seconds: wall,
        cpu_seconds: after.saturating_sub(before) as f64 / ctx.ticks as f64,
        client: Some(total),
        server,
        trouble: 0,
    })
}

/// One wrk run over keep-alive TLS connections, with the proxy's CPU time around it.
fn run_throughput(ctx: &Ctx, kind: Kind, p: &Proxy, pid: i32) -> Result<Run> {
    let Kind::Throughput(size) = kind else {
        bail!("not a throughput cell");
    };
    let load = Load {
        url: format!("https://{}/corpus/random/{size}", p.listen.of(kind.cert())),
        threads: ctx.threads,
        connections: ctx.connections,
        seconds: ctx.seconds,
    };
    let mut argv = vec![
        "env".to_string(),
        format!("OPENSSL_CONF={}", ctx.conf.display()),
    ];
    argv.extend(load::wrk_argv(
        &load,
        PerConnection::Unlimited,
        &ctx.dir.join("unused.lua"),
    ));
    let before = procs::cpu_ticks(pid)?;
    let mut tool = Proc::spawn(&argv, &ctx.dir.join("wrk.log"))?;
    let status = tool.wait_exit(Duration::from_secs(u64::from(ctx.seconds) + 30))?;
    let after = procs::cpu_ticks(pid)?;
    let outcome = load::parse_wrk(&tool.log_text())
        .with_context(|| format!("`{}` ({status})", tool.command()))?;
    if outcome.good == 0 {
        bail!("no good response ({} socket errors)", outcome.socket_errors);
    }
    Ok(Run {
        count: outcome.good,
        seconds: outcome.seconds,
        cpu_seconds: after.saturating_sub(before) as f64 / ctx.ticks as f64,
        client: None,
        server: None,
        trouble: outcome.socket_errors + outcome.bad_status(),
    })
}

/// HAProxy's `show stat` (CSV) over its stats socket.
fn haproxy_stat(sock: &Path) -> Result<String> {
    let mut s =
        UnixStream::connect(sock).with_context(|| format!("connecting {}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"show stat\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text)
}

/// The Markdown tables.
fn render(
    kinds: &[Kind],
    targets: &[Target],
    results: &BTreeMap<(Kind, Target), Entry>,
    negotiated: &BTreeMap<(Target, Key), Result<Negotiated, String>>,
) -> String {
    let cols: String = targets
        .iter()
        .map(|t| format!(" {} |", t.label()))
        .collect();
    let rule: String = targets.iter().map(|_| "---:|").collect();
    let table = |title: &str,
                 rows: &[Kind],
                 value: &dyn Fn(Kind, &Entry) -> Option<f64>,
                 fmt: &dyn Fn(f64) -> String| {
        let mut s = format!("\n### {title}\n\n| cell |{cols}\n|---|{rule}\n");
        for &kind in rows {
            let _ = write!(s, "| {} |", kind.label());
            let base = results
                .get(&(kind, Target::Haproxy))
                .and_then(|e| value(kind, e));
            for &t in targets {
                let text = match results.get(&(kind, t)) {
                    Some(e) => match value(kind, e) {
                        Some(v) => {
                            let mut x = fmt(v);
                            if let (Some(b), true) = (base, t != Target::Haproxy) {
                                if b > 0.0 {
                                    let _ = write!(x, " ({:.2}×)", v / b);
                                }
                            }
                            if !e.errors.is_empty() || e.runs.iter().any(|r| r.trouble > 0) {
                                x.push_str(" †");
                            }
                            x
                        }
                        None if !e.errors.is_empty() => "error †".into(),
                        None => "–".into(),
                    },
                    None => "failed".into(),
                };
                let _ = write!(s, " {text} |");
            }
            s.push('\n');
        }
        s
    };
    let hs: Vec<Kind> = kinds.iter().copied().filter(|k| k.is_handshake()).collect();
    let tp: Vec<Kind> = kinds
        .iter()
        .copied()
        .filter(|k| !k.is_handshake())
        .collect();
    let mut md = table(
        "Handshakes/s, one request per connection (median; × HAProxy; higher is better)",
        &hs,
        &|_, e| e.rate(),
        &|v| thousands(v.round() as u64),
    );
    md += &table(
        "CPU-seconds per 1,000 handshakes, the proxy's own (median; × HAProxy; lower is better)",
        &hs,
        &|_, e| e.cpu_per(1e3),
        &fmt_cpu,
    );
    // Resumption, as the client and the server saw it.
    let _ = write!(
        md,
        "\n### Resumed fraction of the handshakes: client (`s_time` marks) / server\n\n\
         | cell |{cols}\n|---|{rule}\n"
    );
    for &kind in &hs {
        let _ = write!(md, "| {} |", kind.label());
        for &t in targets {
            let text = match results.get(&(kind, t)) {
                Some(e) => {
                    let client = e.client().map_or("–".into(), |c| {
                        let n = c.resumed + c.full;
                        format!(
                            "{} of {} ({:.1} %)",
                            thousands(c.resumed),
                            thousands(n),
                            if n > 0 {
                                c.resumed as f64 * 100.0 / n as f64
                            } else {
                                0.0
                            }
                        )
                    });
                    let server = match (t, e.server()) {
                        (Target::Nginx, _) => "no counter".to_string(),
                        (_, Some(v)) => format!(
                            "{} of {}",
                            thousands(v.resumed),
                            thousands(v.full + v.resumed)
                        ),
                        (_, None) => "–".to_string(),
                    };
                    format!("{client} / {server}")
                }
                None => "failed".into(),
            };
            let _ = write!(md, " {text} |");
        }
        md.push('\n');
    }
    if !tp.is_empty() {
        md += &table(
            "HTTPS requests/s over keep-alive connections (median; × HAProxy; higher is better)",
            &tp,
            &|_, e| e.rate(),
            &|v| thousands(v.round() as u64),
        );
        md += &table(
            "HTTPS MB/s of response bodies (median; × HAProxy)",
            &tp,
            &|k, e| match k {
                Kind::Throughput(size) => e.rate().map(|r| r * size as f64 / 1e6),
                _ => None,
            },
            &|v| format!("{v:.1}"),
        );
        md += &table(
            "CPU-seconds per 100,000 HTTPS requests, the proxy's own (median; × HAProxy; lower \
             is better)",
            &tp,
            &|_, e| e.cpu_per(1e5),
            &fmt_cpu,
        );
    }
    // What was negotiated.
    let _ = write!(
        md,
        "\n### Negotiated, and the answer to `GET {HANDSHAKE_PATH} HTTP/1.0` (one `openssl \
         s_client` per listener with the clients' config)\n\n\
         | certificate |{cols}\n|---|{rule}\n"
    );
    for key in Key::ALL {
        let _ = write!(md, "| {} |", key.label());
        for &t in targets {
            let text = match negotiated.get(&(t, key)) {
                Some(Ok(n)) => n.line(),
                Some(Err(e)) => format!("error: {}", e.replace('|', "\\|")),
                None => "failed".into(),
            };
            let _ = write!(md, " {text} |");
        }
        md.push('\n');
    }
    // The targets, by rate and by CPU per handshake.
    let _ = write!(
        md,
        "\n### Issue 5's targets: Headway over HAProxy\n\n\
         | cell | target | by handshakes/s | by CPU per handshake (HAProxy's ÷ Headway's) |\n\
         |---|---:|---:|---:|\n"
    );
    for &kind in &hs {
        let goal = if kind == Kind::Resumed { 2.0 } else { 1.5 };
        let get = |t| results.get(&(kind, t));
        let (h, x) = (get(Target::Headway), get(Target::Haproxy));
        let verdict = |v: Option<f64>| match v {
            Some(v) if v.is_finite() => {
                format!("{v:.2}× {}", if v >= goal { "met" } else { "not met" })
            }
            _ => "–".into(),
        };
        let by_rate = h
            .and_then(Entry::rate)
            .zip(x.and_then(Entry::rate))
            .map(|(a, b)| a / b);
        let by_cpu = h
            .and_then(|e| e.cpu_per(1e3))
            .zip(x.and_then(|e| e.cpu_per(1e3)))
            .map(|(a, b)| b / a);
        let _ = writeln!(
            md,
            "| {} | ≥ {goal}× | {} | {} |",
            kind.label(),
            verdict(by_rate),
            verdict(by_cpu)
        );
    }
    let _ = writeln!(
        md,
        "\nHow to read it: a handshake is a TCP connection with a TLS 1.3 handshake and one \
         HTTP/1.0 request for 128 B, closed after the answer; the rate counts all `s_time` \
         connections over the run's wall time, with the client, the proxy and the origin sharing \
         the host's CPUs, so when the client saturates first the rates converge and CPU per \
         handshake shows the proxy's cost. CPU is user + system time of the proxy's processes \
         (`/proc/PID/stat`) during the run. Resumption, client side: `s_time` prints `r` for a \
         connection OpenSSL reports as resumed (`SSL_session_reused`), `*` for a full TLS 1.3 \
         handshake; server side: Headway's per-virtual-server `handshakes_resumed` of \
         `handshakes_full` + `handshakes_resumed`, HAProxy's per-frontend `ssl_reused_sess` of \
         `ssl_sess` + `ssl_reused_sess` (`show stat`), read before and after each run; NGINX keeps \
         no such counter. Throughput: wrk's 2xx/3xx \
         responses per second over keep-alive TLS connections (one handshake per connection); \
         MB/s is requests/s × the body size; wrk reads the clients' `OPENSSL_CONF` too (checked by \
         hand: with it, wrk cannot connect to an `openssl s_server` that accepts only \
         `TLS_AES_256_GCM_SHA384`). † marks \
         runs with errors."
    );
    md
}

/// The CSV: a row per run and a `median` row per cell and proxy.
fn render_csv(
    kinds: &[Kind],
    targets: &[Target],
    results: &BTreeMap<(Kind, Target), Entry>,
) -> String {
    let mut csv = String::from(
        "cell,target,run,count,seconds,per_second,mb_per_s,cpu_seconds,cpu_s_per_unit,unit,\
         client_resumed,client_full,server_resumed_fraction,errors\n",
    );
    let opt = |v: Option<f64>, d: usize| v.map_or(String::new(), |v| format!("{v:.d$}"));
    for &kind in kinds {
        let (per, unit) = if kind.is_handshake() {
            (1e3, "1k_handshakes")
        } else {
            (1e5, "100k_requests")
        };
        let mb = |rate: f64| match kind {
            Kind::Throughput(size) => format!("{:.3}", rate * size as f64 / 1e6),
            _ => String::new(),
        };
        for &t in targets {
            let Some(e) = results.get(&(kind, t)) else {
                continue;
            };
            for (i, r) in e.runs.iter().enumerate() {
                let _ = writeln!(
                    csv,
                    "{},{},{},{},{:.3},{:.1},{},{:.3},{},{unit},{},{},{},{}",
                    kind.key(),
                    t.key(),
                    i + 1,
                    r.count,
                    r.seconds,
                    r.rate(),
                    mb(r.rate()),
                    r.cpu_seconds,
                    opt(r.cpu_per(per), 4),
                    r.client.map_or(String::new(), |c| c.resumed.to_string()),
                    r.client.map_or(String::new(), |c| c.full.to_string()),
                    opt(r.server.and_then(ServerView::resumed_fraction), 4),
                    r.trouble,
                );
            }
            let _ = writeln!(
                csv,
                "{},{},median,,,{},{},,{},{unit},,,{},{}",
                kind.key(),
                t.key(),
                opt(e.rate(), 1),
                e.rate().map_or(String::new(), mb),
                opt(e.cpu_per(per), 4),
                opt(e.server().and_then(ServerView::resumed_fraction), 4),
                e.errors.len(),
            );
        }
    }
    csv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn listen() -> Listen {
        Listen {
            ecdsa: addr(8443),
            rsa: addr(8444),
        }
    }

    #[test]
    fn s_time_output_is_counted_by_marks_and_summary() {
        let new = "Collecting connection statistics for 2 seconds\n\
                   *****\n****\n\n\
                   9 connections in 0.01s; 900.00 connections/user sec, bytes read 4000\n\
                   9 connections in 3 real seconds, 444 bytes read per connection\n";
        assert_eq!(
            parse_s_time(new).unwrap(),
            STime {
                connections: 9,
                resumed: 0,
                full: 9
            }
        );
        let reuse = "\n\nNow timing with session id reuse.\nstarting\nrrrr*r\n\n\
                     6 connections in 0.39s; 15.38 connections/user sec, bytes read 8300\n\
                     6 connections in 2 real seconds, 4399 bytes read per connection\n";
        let s = parse_s_time(reuse).unwrap();
        assert_eq!((s.connections, s.resumed, s.full), (6, 5, 1));
        assert_eq!((s + s).resumed, 10);
        let e = parse_s_time("Collecting…\nUnable to get connection\n").unwrap_err();
        assert!(e.to_string().contains("Unable to get connection"), "{e}");
    }

    #[test]
    fn s_client_output_names_what_was_negotiated() {
        let text = "CONNECTED(00000003)\n---\nPeer signing digest: SHA256\n\
                    Peer signature type: ECDSA\nServer Temp Key: X25519, 253 bits\n---\n\
                    New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256\n\
                    Server public key is 256 bit\nSecure Renegotiation IS NOT supported\n\
                    ---\nHTTP/1.1 200 OK\r\ncontent-length: 128\r\n\r\nHTTP/1.1 400 x\n";
        let n = parse_s_client(text).unwrap();
        assert_eq!(
            n,
            Negotiated {
                protocol: "TLSv1.3".into(),
                cipher: "TLS_AES_128_GCM_SHA256".into(),
                group: "X25519".into(),
                signature: "ECDSA".into(),
                key_bits: Some(256),
                status: Some(200),
            }
        );
        assert_eq!(
            n.line(),
            "TLSv1.3, TLS_AES_128_GCM_SHA256, X25519, ECDSA 256-bit key; HTTP 200"
        );
        assert!(parse_s_client("CONNECTED(00000003)\nerrno=104\n").is_err());
    }

    #[test]
    fn server_counters_are_read() {
        let stat = "# pxname,svname,qcur,-,ssl_sess,ssl_reused_sess,ssl_failed_handshake,\n\
                    ecdsa,FRONTEND,,,3,2954,0,\n\
                    rsa,FRONTEND,,,40,1,0,\n\
                    origin,origin,0,,,,,\n";
        assert_eq!(haproxy_handshakes(stat, "ecdsa"), Some((3, 2954)));
        assert_eq!(haproxy_handshakes(stat, "rsa"), Some((40, 1)));
        assert_eq!(haproxy_handshakes(stat, "origin"), None);
        assert_eq!(
            haproxy_handshakes("# pxname,svname\nrsa,FRONTEND\n", "rsa"),
            None
        );
        let adc = serde_json::json!({"virtual_servers": [
            {"name": "rsa", "tls": {"handshakes_full": 1, "handshakes_resumed": 2}},
            {"name": "ecdsa", "tls": {"handshakes_full": 30, "handshakes_resumed": 970}},
            {"name": "plain"},
        ]});
        assert_eq!(headway_handshakes(&adc, "ecdsa"), Some((30, 970)));
        assert_eq!(headway_handshakes(&adc, "plain"), None);
        assert_eq!(headway_handshakes(&adc, "nope"), None);
        let v = ServerView {
            full: 30,
            resumed: 970,
        };
        assert_eq!(v.resumed_fraction(), Some(0.97));
        let none = ServerView {
            full: 0,
            resumed: 0,
        };
        assert_eq!(none.resumed_fraction(), None);
    }

    #[test]
    fn cells_and_medians() {
        assert_eq!(
            cells(true, &[]),
            [
                Kind::New(Key::Ecdsa),
                Kind::New(Key::Rsa),
                Kind::Resumed,
                Kind::Throughput(128),
                Kind::Throughput(65536)
            ]
        );
        assert_eq!(cells(false, &[]).len(), 8);
        assert_eq!(cells(false, &[1000]).last(), Some(&Kind::Throughput(1000)));
        assert_eq!(Kind::Resumed.cert(), Key::Ecdsa);
        assert_eq!(Kind::New(Key::Rsa).key(), "new-rsa");
        assert!(!Kind::Throughput(128).is_handshake());
        assert_eq!(clients(2), 4);
        let run = |count, cpu, resumed| Run {
            count,
            seconds: 2.0,
            cpu_seconds: cpu,
            client: Some(STime {
                connections: count,
                resumed,
                full: count - resumed,
            }),
            server: Some(ServerView {
                full: count - resumed,
                resumed,
            }),
            trouble: 0,
        };
        let e = Entry {
            runs: vec![
                run(2000, 1.0, 1900),
                run(4000, 1.0, 4000),
                run(3000, 3.0, 0),
            ],
            errors: vec![],
        };
        assert_eq!(e.rate(), Some(1500.0));
        assert_eq!(e.cpu_per(1e3), Some(0.5));
        assert_eq!(e.client().map(|c| c.resumed), Some(5900));
        assert_eq!(e.server().map(|v| (v.full, v.resumed)), Some((3100, 5900)));
    }

    #[test]
    fn the_client_config_offers_one_suite_and_one_group() {
        let c = client_openssl_conf();
        for want in [
            "openssl_conf = default_conf",
            "system_default = system_default_sect",
            "Ciphersuites = TLS_AES_128_GCM_SHA256",
            "Groups = X25519",
            "MinProtocol = TLSv1.3",
        ] {
            assert!(c.contains(want), "{want} in\n{c}");
        }
    }

    #[test]
    fn configs_terminate_tls_with_both_certificates() {
        let dir = Path::new("/tmp/x");
        let h = haproxy(addr(8080), 2, &listen(), 4096, dir);
        for want in [
            "nbthread 2",
            "ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256",
            "stats socket /tmp/x/haproxy.sock",
            "bind 127.0.0.1:8443 ssl crt /tmp/x/ecdsa.pem curves X25519",
            "bind 127.0.0.1:8444 ssl crt /tmp/x/rsa.pem curves X25519",
            "http-reuse always",
            "server origin 127.0.0.1:8080",
        ] {
            assert!(h.contains(want), "{want} in\n{h}");
        }
        let n = nginx(addr(8080), 2, &listen(), 4096, dir);
        for want in [
            "worker_processes 2;",
            "listen 127.0.0.1:8443 ssl;",
            "ssl_certificate /tmp/x/ecdsa.crt;",
            "ssl_certificate_key /tmp/x/rsa.key;",
            "ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;",
            "ssl_ecdh_curve X25519;",
            "keepalive 64;",
            "access_log off;",
        ] {
            assert!(n.contains(want), "{want} in\n{n}");
        }
        assert_eq!(n.matches('{').count(), n.matches('}').count());
        let t = headway(addr(8080), 2, &listen(), addr(9290), dir);
        let v: toml::Value = toml::from_str(&t).unwrap();
        assert_eq!(v["runtime"]["workers"].as_integer(), Some(2));
        assert_eq!(v["admin"]["listen"].as_str(), Some("127.0.0.1:9290"));
        let certs = v["certificate"].as_array().unwrap();
        assert_eq!(certs[1]["key_file"].as_str(), Some("/tmp/x/rsa.key"));
        let vs = v["virtual_server"].as_array().unwrap();
        let got: Vec<_> = vs
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap(),
                    s["kind"].as_str().unwrap(),
                    s["listen"].as_str().unwrap(),
                    s["tls"]["certificates"][0].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("ecdsa", "https", "127.0.0.1:8443", "ecdsa"),
                ("rsa", "https", "127.0.0.1:8444", "rsa")
            ]
        );
    }
}
