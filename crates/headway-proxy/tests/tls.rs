//! End-to-end tests of TLS termination and TLS to servers with real clients: `openssl s_client`,
//! `curl` and `h2load` against the proxy on loopback, in front of `headway origin` servers.
//! Certificates are made at test time (rcgen; RSA keys by `openssl genpkey`) in a temporary
//! directory; no key is ever committed.
//!
//! The clients must be installed (`scripts/setup.sh` installs openssl, curl and nghttp2-client);
//! a missing one fails the test with its name. Every wait has a deadline; nothing measures speed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use headway_config::Config;
use headway_origin::OriginConfig;
use headway_proxy::stats::TlsSnapshot;
use headway_proxy::Proxy;

/// Reading one HTTP/1 answer off a client connection.
#[path = "common/answer.rs"]
mod answer;
use answer::one_answer;

/// A test CA and the certificates it issues, in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Headway Test CA");
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        std::fs::write(
            dir.path().join("ca.pem"),
            params.self_signed(&key).unwrap().pem(),
        )
        .unwrap();
        Pki {
            dir,
            ca: rcgen::Issuer::new(params, key),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Issues `{stem}.pem` and `{stem}.key` for `names`, subject `CN=<first name>, O=<org>`;
    /// an RSA-2048 key (made by openssl) when `rsa`, else ECDSA P-256.
    fn issue(&self, stem: &str, names: &[&str], org: &str, rsa: bool) {
        let key = if rsa {
            let out = std::process::Command::new("openssl")
                .args([
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    "rsa_keygen_bits:2048",
                ])
                .output()
                .expect("openssl runs (scripts/setup.sh installs it)");
            assert!(out.status.success(), "openssl genpkey failed");
            rcgen::KeyPair::from_pem(std::str::from_utf8(&out.stdout).unwrap()).unwrap()
        } else {
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap()
        };
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0]);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, org);
        let cert = params.signed_by(&key, &self.ca).unwrap();
        std::fs::write(self.path(&format!("{stem}.pem")), cert.pem()).unwrap();
        std::fs::write(self.path(&format!("{stem}.key")), key.serialize_pem()).unwrap();
    }

    /// A `[[certificate]]` section for `{stem}.pem` / `{stem}.key`.
    fn section(&self, name: &str, stem: &str) -> String {
        format!(
            "[[certificate]]\nname = \"{name}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            self.path(&format!("{stem}.pem")).display(),
            self.path(&format!("{stem}.key")).display()
        )
    }

    /// The config file's path (relative files resolve against it).
    fn config_path(&self) -> String {
        self.path("headway.toml").display().to_string()
    }
}

/// A `headway origin` on a loopback port (it answers `/echo` with the request's headers).
async fn origin(name: &str) -> SocketAddr {
    let listener = headway_origin::listen("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = OriginConfig {
        listen: addr,
        name: Some(name.to_string()),
        ..OriginConfig::default()
    };
    tokio::spawn(async move {
        let _ = headway_origin::serve(listener, cfg, std::future::pending()).await;
    });
    addr
}

/// A group of one server; `extra` is written before the server (keys, then tables).
fn group(name: &str, server: SocketAddr, extra: &str) -> String {
    format!(
        "[[server_group]]\nname = \"{name}\"\n{extra}\n[[server_group.server]]\naddress = \"{server}\"\n"
    )
}

/// An `https` virtual server named `front` with `tls` as its `[virtual_server.tls]` body.
fn https(group: &str, tls: &str) -> String {
    format!(
        "[[virtual_server]]\nname = \"front\"\nkind = \"https\"\nlisten = \"127.0.0.1:0\"\n\
         group = \"{group}\"\nrequest_header_timeout = \"5s\"\n[virtual_server.tls]\n{tls}\n"
    )
}

async fn start(pki: &Pki, text: &str) -> (Proxy, SocketAddr) {
    let cfg = Config::parse(text, &pki.config_path()).unwrap_or_else(|e| panic!("{e}"));
    let p = Proxy::start(cfg.adc, 7).await.expect("proxy starts");
    let addr = p.bound_addrs()[0].1;
    (p, addr)
}

/// The usual front: certificates `a` (ECDSA, a.example) and `b` (RSA, b.example and
/// *.b.example), `a` the default, before one origin.
async fn front(pki: &Pki, tls_extra: &str) -> (Proxy, SocketAddr, String) {
    pki.issue("a", &["a.example"], "A", false);
    pki.issue("b", &["b.example", "*.b.example"], "B", true);
    let o = origin("o1").await;
    let text = format!(
        "{}{}{}{}",
        pki.section("a", "a"),
        pki.section("b", "b"),
        group("web", o, ""),
        https(
            "web",
            &format!("certificates = [\"a\", \"b\"]\n{tls_extra}")
        )
    );
    let (p, addr) = start(pki, &text).await;
    (p, addr, text)
}

/// Runs `program` with `args` and `stdin`; whether it succeeded, and stdout then stderr.
async fn run(program: &str, args: &[&str], stdin: &[u8]) -> (bool, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program} ({e}); scripts/setup.sh installs it"));
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin).await;
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{program} {args:?} did not finish"))
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `openssl s_client` to `addr` with `args`; it sends an HTTP/1.0 request and reads until the
/// server closes, so TLS 1.3 session tickets arrive before it ends.
async fn s_client(addr: SocketAddr, args: &[&str]) -> (bool, String) {
    let connect = addr.to_string();
    let mut all = vec!["s_client", "-connect", connect.as_str(), "-ign_eof"];
    all.extend_from_slice(args);
    run("openssl", &all, b"GET /healthz HTTP/1.0\r\n\r\n").await
}

/// `curl` to `https://{host}:{port}{path}` resolved to the proxy, trusting the test CA.
async fn curl(
    pki: &Pki,
    addr: SocketAddr,
    host: &str,
    path: &str,
    args: &[&str],
) -> (bool, String) {
    let resolve = format!("{host}:{}:{}", addr.port(), addr.ip());
    let url = format!("https://{host}:{}{path}", addr.port());
    let ca = pki.path("ca.pem").display().to_string();
    let mut all = vec![
        "-sS",
        "--max-time",
        "20",
        "--resolve",
        resolve.as_str(),
        "--cacert",
        ca.as_str(),
    ];
    all.extend_from_slice(args);
    all.push(url.as_str());
    run("curl", &all, b"").await
}

fn tls(p: &Proxy) -> TlsSnapshot {
    p.snapshot().virtual_servers[0]
        .tls
        .clone()
        .expect("https has TLS counters")
}

fn failures(t: &TlsSnapshot, reason: &str) -> u64 {
    t.failures
        .iter()
        .find(|(r, _)| r == reason)
        .map_or(0, |(_, n)| *n)
}

/// Waits (bounded) until `f` holds on the proxy's snapshot.
async fn until(p: &Proxy, what: &str, f: impl Fn(&headway_proxy::AdcSnapshot) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !f(&p.snapshot()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn count(text: &str, what: &str) -> usize {
    text.matches(what).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_chooses_the_certificate_and_clients_verify_it() {
    let pki = Pki::new();
    let (p, addr, _) = front(&pki, "").await;
    let (_, out) = s_client(addr, &["-servername", "a.example"]).await;
    assert!(out.contains("subject=CN = a.example, O = A"), "{out}");
    let (_, out) = s_client(addr, &["-servername", "b.example"]).await;
    assert!(out.contains("subject=CN = b.example, O = B"), "{out}");
    assert!(out.contains("Server public key is 2048 bit"), "{out}");
    // The wildcard covers one label; an unknown name and no name get the default.
    let (_, out) = s_client(addr, &["-servername", "www.b.example"]).await;
    assert!(out.contains("subject=CN = b.example, O = B"), "{out}");
    let (_, out) = s_client(addr, &["-servername", "x.www.b.example"]).await;
    assert!(out.contains("subject=CN = a.example, O = A"), "{out}");
    let (_, out) = s_client(addr, &["-noservername"]).await;
    assert!(out.contains("subject=CN = a.example, O = A"), "{out}");
    assert_eq!(tls(&p).sni_default, 2);

    // curl checks the chain and the name against the test CA, and the server sees https.
    for host in ["a.example", "b.example", "api.b.example"] {
        let (ok, out) = curl(&pki, addr, host, "/echo", &["-v"]).await;
        assert!(ok, "{host}: {out}");
        assert!(out.contains(r#""x-forwarded-proto":["https"]"#), "{out}");
        assert!(out.contains("SSL certificate verify ok"), "{out}");
    }
    let t = tls(&p);
    assert_eq!(t.failures.iter().map(|(_, n)| n).sum::<u64>(), 0, "{t:?}");
    assert!(t.handshakes() >= 8, "{t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_resume_from_tickets_and_from_the_cache() {
    let pki = Pki::new();
    let (p, addr, _) = front(&pki, "").await;
    // TLS 1.2 with tickets (RFC 5077): the first connection is new, the five reconnects resume.
    let (_, out) = s_client(addr, &["-servername", "a.example", "-tls1_2", "-reconnect"]).await;
    assert_eq!(count(&out, "New, TLSv1.2"), 1, "{out}");
    assert_eq!(count(&out, "Reused, TLSv1.2"), 5, "{out}");
    assert!(out.contains("TLS session ticket lifetime hint"), "{out}");
    // TLS 1.2 without tickets: the server's session cache (session ids).
    let (_, out) = s_client(
        addr,
        &[
            "-servername",
            "a.example",
            "-tls1_2",
            "-no_ticket",
            "-reconnect",
        ],
    )
    .await;
    assert_eq!(count(&out, "Reused, TLSv1.2"), 5, "{out}");
    assert!(!out.contains("TLS session ticket:"), "{out}");
    // TLS 1.3: a ticket saved by one connection resumes the next.
    let sess = pki.path("s13").display().to_string();
    let (_, out) = s_client(addr, &["-servername", "a.example", "-sess_out", &sess]).await;
    assert!(out.contains("New, TLSv1.3"), "{out}");
    // One ticket per handshake (OpenSSL's servers send two on a full handshake).
    assert_eq!(count(&out, "New Session Ticket arrived"), 1, "{out}");
    let (_, out) = s_client(addr, &["-servername", "a.example", "-sess_in", &sess]).await;
    assert!(out.contains("Reused, TLSv1.3"), "{out}");
    let t = tls(&p);
    assert_eq!(t.handshakes_resumed, 11, "{t:?}");
    assert_eq!(t.handshakes_full, 3, "{t:?}");
    assert_eq!((t.tls12, t.tls13), (12, 2), "{t:?}");

    // With both off, nothing resumes.
    let pki = Pki::new();
    let (_p, addr, _) = front(&pki, "session_tickets = false\nsession_cache = 0").await;
    let (_, out) = s_client(addr, &["-servername", "a.example", "-tls1_2", "-reconnect"]).await;
    assert_eq!(count(&out, "New, TLSv1.2"), 6, "{out}");
    assert_eq!(count(&out, "Reused"), 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_over_tls_with_curl_and_h2load() {
    let pki = Pki::new();
    let (p, addr, _) = front(&pki, "").await;
    let (ok, out) = curl(
        &pki,
        addr,
        "a.example",
        "/echo",
        &["--http2", "-w", "\nversion=%{http_version}\n"],
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.contains("version=2"), "{out}");
    assert!(out.contains(r#""x-forwarded-proto":["https"]"#), "{out}");
    let (ok, out) = curl(
        &pki,
        addr,
        "a.example",
        "/healthz",
        &["--http1.1", "-w", "\nversion=%{http_version}\n"],
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.contains("version=1.1"), "{out}");
    let url = format!("https://127.0.0.1:{}/healthz", addr.port());
    let (ok, out) = run("h2load", &["-n", "200", "-c", "4", "-m", "8", &url], b"").await;
    assert!(ok, "{out}");
    assert!(out.contains("Application protocol: h2"), "{out}");
    assert!(out.contains("200 succeeded, 0 failed"), "{out}");
    let t = tls(&p);
    assert!(t.alpn_h2 >= 5, "{t:?}");
    assert_eq!(t.alpn_http11, 1, "{t:?}");
    let s = p.snapshot();
    assert!(s.virtual_servers[0].responses[1] >= 202, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_versions_and_weak_suites_are_refused() {
    let pki = Pki::new();
    let (p, addr, _) = front(&pki, "").await;
    // SECLEVEL=0 lets this OpenSSL offer what it would refuse itself, so the refusal seen is
    // the server's.
    for v in ["-tls1", "-tls1_1"] {
        let (ok, out) = s_client(
            addr,
            &[
                "-servername",
                "a.example",
                v,
                "-cipher",
                "DEFAULT@SECLEVEL=0",
            ],
        )
        .await;
        assert!(!ok, "{v}: {out}");
        // rustls answers with a handshake_failure alert (40); the counter says why.
        assert!(out.contains("SSL alert number 40"), "{v}: {out}");
        assert!(out.contains("Cipher is (NONE)"), "{v}: {out}");
    }
    assert_eq!(failures(&tls(&p), "version"), 2, "{:?}", tls(&p));
    // CBC suites (with RSA or ECDHE key exchange) and RSA key exchange (even with GCM): none
    // is offered.
    for suite in [
        "AES128-SHA",
        "AES256-GCM-SHA384",
        "ECDHE-RSA-AES128-SHA",
        "ECDHE-RSA-AES256-SHA384",
    ] {
        let (ok, out) = s_client(
            addr,
            &[
                "-servername",
                "b.example",
                "-tls1_2",
                "-cipher",
                &format!("{suite}@SECLEVEL=0"),
            ],
        )
        .await;
        assert!(!ok, "{suite}: {out}");
        assert!(out.contains("handshake failure"), "{suite}: {out}");
    }
    assert_eq!(failures(&tls(&p), "cipher"), 4);
    // What is offered: TLS 1.2 with ECDHE and AEAD.
    let (ok, out) = s_client(
        addr,
        &[
            "-servername",
            "b.example",
            "-tls1_2",
            "-cipher",
            "ECDHE-RSA-AES128-GCM-SHA256",
        ],
    )
    .await;
    assert!(ok, "{out}");
    assert!(
        out.contains("Cipher is ECDHE-RSA-AES128-GCM-SHA256"),
        "{out}"
    );
    // A 1.3-only virtual server refuses TLS 1.2.
    let pki = Pki::new();
    let (p, addr, _) = front(&pki, "min_version = \"1.3\"").await;
    let (ok, out) = s_client(addr, &["-servername", "a.example", "-tls1_2"]).await;
    assert!(!ok, "{out}");
    assert_eq!(failures(&tls(&p), "version"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_certificates_and_a_bad_file_changes_nothing() {
    let pki = Pki::new();
    let (p, addr, text) = front(&pki, "").await;
    // A TLS 1.3 ticket from before the reloads.
    let sess = pki.path("s13").display().to_string();
    let (_, out) = s_client(addr, &["-servername", "a.example", "-sess_out", &sess]).await;
    assert!(out.contains("New, TLSv1.3"), "{out}");
    // One ticket per handshake (OpenSSL's servers send two on a full handshake).
    assert_eq!(count(&out, "New Session Ticket arrived"), 1, "{out}");

    // A broken certificate file: the new config is refused, with the file and its line.
    let good = std::fs::read_to_string(pki.path("b.pem")).unwrap();
    std::fs::write(pki.path("b.pem"), "-----BEGIN CERTIFICATE-----\nAAAA\n").unwrap();
    let e = Config::parse(&text, &pki.config_path())
        .unwrap_err()
        .to_string();
    let b_line = text.lines().position(|l| l.contains("b.pem")).unwrap() + 1;
    assert!(
        e.starts_with(&format!("{}:{b_line}:", pki.config_path())),
        "{e}"
    );
    assert!(e.contains("certificate `b`"), "{e}");
    assert!(e.contains(&pki.path("b.pem").display().to_string()), "{e}");
    // The running certificates stay.
    let (_, out) = s_client(addr, &["-servername", "b.example"]).await;
    assert!(out.contains("subject=CN = b.example, O = B"), "{out}");
    std::fs::write(pki.path("b.pem"), good).unwrap();

    // A new certificate for b: served to new connections after the reload.
    pki.issue("b", &["b.example"], "B2", false);
    let cfg = Config::parse(&text, &pki.config_path()).unwrap();
    p.replace(cfg.adc).await.unwrap();
    let (_, out) = s_client(addr, &["-servername", "b.example"]).await;
    assert!(out.contains("subject=CN = b.example, O = B2"), "{out}");
    let (_, out) = s_client(addr, &["-servername", "a.example"]).await;
    assert!(out.contains("subject=CN = a.example, O = A"), "{out}");
    assert_eq!(p.snapshot().certificates[1].subject, "CN=b.example, O=B2");
    // Ticket keys and counters outlive the reload.
    let (_, out) = s_client(addr, &["-servername", "a.example", "-sess_in", &sess]).await;
    assert!(out.contains("Reused, TLSv1.3"), "{out}");
    let t = tls(&p);
    assert_eq!((t.handshakes_full, t.handshakes_resumed), (4, 1), "{t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_required_and_optional() {
    let pki = Pki::new();
    pki.issue("client", &["client.example"], "Client", false);
    let ca = pki.path("ca.pem").display().to_string();
    let cert = pki.path("client.pem").display().to_string();
    let key = pki.path("client.key").display().to_string();
    let (p, addr, _) = front(
        &pki,
        &format!("client_auth = \"required\"\nclient_ca_file = \"{ca}\""),
    )
    .await;
    let (ok, out) = curl(&pki, addr, "a.example", "/healthz", &[]).await;
    assert!(!ok, "{out}");
    let (ok, out) = curl(
        &pki,
        addr,
        "a.example",
        "/healthz",
        &["--cert", &cert, "--key", &key],
    )
    .await;
    assert!(ok, "{out}");
    let t = tls(&p);
    assert_eq!(t.client_certificates, 1, "{t:?}");
    assert_eq!(failures(&t, "client_certificate"), 1, "{t:?}");

    let pki = Pki::new();
    pki.issue("client", &["client.example"], "Client", false);
    let ca = pki.path("ca.pem").display().to_string();
    let (p, addr, _) = front(
        &pki,
        &format!("client_auth = \"optional\"\nclient_ca_file = \"{ca}\""),
    )
    .await;
    let (ok, out) = curl(&pki, addr, "a.example", "/healthz", &[]).await;
    assert!(ok, "{out}");
    // A certificate from another CA is refused even when optional.
    let other = Pki::new();
    other.issue("stranger", &["stranger.example"], "X", false);
    let cert = other.path("stranger.pem").display().to_string();
    let key = other.path("stranger.key").display().to_string();
    let (ok, out) = curl(
        &pki,
        addr,
        "a.example",
        "/healthz",
        &["--cert", &cert, "--key", &key],
    )
    .await;
    assert!(!ok, "{out}");
    assert_eq!(failures(&tls(&p), "client_certificate"), 1);
}

/// A server that speaks TLS: an `https` virtual server whose certificate holds `name` alone,
/// before an origin named `behind-tls`; the proxy, its address and the origin's.
async fn tls_backend(pki: &Pki, name: &str) -> (Proxy, SocketAddr, SocketAddr) {
    pki.issue("backend", &[name], "Backend", false);
    let o = origin("behind-tls").await;
    let backend_text = format!(
        "{}{}{}",
        pki.section("backend", "backend"),
        group("origin", o, ""),
        https("origin", "certificates = [\"backend\"]")
    );
    let (backend, addr) = start(pki, &backend_text).await;
    (backend, addr, o)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_servers_is_verified_and_reused() {
    // The server: an https virtual server for backend.internal before an origin.
    let pki = Pki::new();
    let (backend, backend_addr, o) = tls_backend(&pki, "backend.internal").await;

    // The proxy under test: cleartext in, TLS to the server, verified against the CA; its
    // HTTP monitor checks over TLS too. One failed check takes the server down (fall = 1),
    // so the checks have a timeout no TLS check of a healthy server comes near even while
    // curl moves megabytes; a server that does not verify fails its first check at once.
    let front_text = |tls: &str| {
        format!(
            "[[monitor]]\nname = \"check\"\nkind = \"http\"\npath = \"/healthz\"\n\
             interval = \"2s\"\ntimeout = \"2s\"\nrise = 1\nfall = 1\n{}\
             [[virtual_server]]\nname = \"plain\"\nkind = \"http\"\nlisten = \"127.0.0.1:0\"\n\
             group = \"secure\"\n",
            group(
                "secure",
                backend_addr,
                &format!("retries = 0\nmonitor = \"check\"\n[server_group.tls]\n{tls}")
            )
        )
    };
    let ca = pki.path("ca.pem").display().to_string();
    let good = front_text(&format!(
        "ca_file = \"{ca}\"\nserver_name = \"backend.internal\""
    ));
    let (p, addr) = start(&pki, &good).await;
    until(&p, "a passed TLS health check", |s| {
        s.groups[0].servers[0].checks_ok > 0
    })
    .await;
    assert_eq!(p.snapshot().groups[0].servers[0].health, "up");
    let url = format!("http://{addr}/echo");
    for _ in 0..3 {
        let (ok, out) = run("curl", &["-sS", "--max-time", "20", &url], b"").await;
        assert!(ok, "{out}");
        assert!(out.contains(r#""server":"behind-tls""#), "{out}");
    }
    // Large bodies both ways: the response read in pieces from TLS, the request body flushed.
    let big = format!("http://{addr}/corpus/random/3MiB");
    let direct = format!("http://{o}/corpus/random/3MiB");
    let (ok, through) = run("sh", &["-c", &format!("curl -sS {big} | sha256sum")], b"").await;
    assert!(ok, "{through}");
    let (_, origin_sum) = run(
        "sh",
        &["-c", &format!("curl -sS {direct} | sha256sum")],
        b"",
    )
    .await;
    assert_eq!(through, origin_sum);
    let upload = pki.path("upload.bin");
    std::fs::write(&upload, vec![7u8; 2 << 20]).unwrap();
    let data = format!("@{}", upload.display());
    let (ok, out) = run("curl", &["-sS", "--data-binary", &data, &url], b"").await;
    assert!(ok, "{out}");
    assert!(out.contains(r#""body_bytes":2097152"#), "{out}");
    let s = p.snapshot();
    let server = &s.groups[0].servers[0];
    assert_eq!(
        server.connections_opened, 1,
        "pooled TLS connections are reused: {s:?}"
    );
    assert_eq!(server.reused, 4, "{s:?}");
    // One handshake for the requests' pooled connection, the others are the monitor's.
    let checks = p.snapshot().groups[0].servers[0].checks_ok;
    assert!(
        tls(&backend).handshakes() <= 1 + checks + 1,
        "{:?}",
        tls(&backend)
    );

    // A name the certificate does not hold, or another CA: refused, the request gets 503.
    let wrong_name = front_text(&format!(
        "ca_file = \"{ca}\"\nserver_name = \"other.internal\""
    ));
    let other = Pki::new();
    let other_ca = other.path("ca.pem").display().to_string();
    let wrong_ca = front_text(&format!(
        "ca_file = \"{other_ca}\"\nserver_name = \"backend.internal\""
    ));
    for text in [wrong_name, wrong_ca] {
        let (p, addr) = start(&pki, &text).await;
        down_by_a_failed_check(&p).await;
        // Down by its monitor, then by the handshake when the monitor is off.
        let text = text.replace("monitor = \"check\"\n", "");
        p.replace(Config::parse(&text, &pki.config_path()).unwrap().adc)
            .await
            .unwrap();
        assert_eq!(status_of(&format!("http://{addr}/echo")).await, "503");
        assert_eq!(p.snapshot().groups[0].servers[0].connect_failures, 1);
    }
    assert!(
        failures(&tls(&backend), "alert") >= 2,
        "{:?}",
        tls(&backend)
    );
}

/// A server given by DNS name is sent and verified by that name (no `server_name` in the
/// group), by requests and by its HTTP monitor; by its IP address the same certificate fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_a_server_given_by_name_sends_and_verifies_the_name() {
    let pki = Pki::new();
    let (backend, backend_addr, _) = tls_backend(&pki, "localhost").await;
    let ca = pki.path("ca.pem").display().to_string();
    // One failed check takes the server down (fall = 1): a timeout no check of a healthy
    // server comes near; the certificate that does not hold the address fails at once.
    let front_text = |server: &str| {
        format!(
            "[[monitor]]\nname = \"check\"\nkind = \"http\"\npath = \"/healthz\"\n\
             interval = \"2s\"\ntimeout = \"2s\"\nrise = 1\nfall = 1\n\
             [[server_group]]\nname = \"secure\"\nretries = 0\nmonitor = \"check\"\n\
             [server_group.tls]\nca_file = \"{ca}\"\n\
             [[server_group.server]]\naddress = \"{server}\"\n\
             [[virtual_server]]\nname = \"plain\"\nkind = \"http\"\nlisten = \"127.0.0.1:0\"\n\
             group = \"secure\"\n"
        )
    };
    let (p, addr) = start(
        &pki,
        &front_text(&format!("localhost:{}", backend_addr.port())),
    )
    .await;
    until(&p, "a passed TLS health check", |s| {
        s.groups[0].servers[0].checks_ok > 0
    })
    .await;
    let url = format!("http://{addr}/echo");
    for _ in 0..2 {
        let (ok, out) = run("curl", &["-sS", "--max-time", "20", &url], b"").await;
        assert!(ok, "{out}");
        assert!(out.contains(r#""server":"behind-tls""#), "{out}");
    }
    assert_eq!(
        tls(&backend).sni_default,
        0,
        "every handshake named localhost"
    );
    assert!(tls(&backend).handshakes() >= 2);

    let (p, addr) = start(&pki, &front_text(&backend_addr.to_string())).await;
    down_by_a_failed_check(&p).await;
    assert_eq!(status_of(&format!("http://{addr}/echo")).await, "503");
}

/// Waits for the first server's failed TLS health check, then checks that it is down.
async fn down_by_a_failed_check(p: &Proxy) {
    until(p, "a failed TLS health check", |s| {
        s.groups[0].servers[0].checks_failed > 0
    })
    .await;
    assert_eq!(p.snapshot().groups[0].servers[0].health, "down");
}

/// The status of a GET of `url` (curl's).
async fn status_of(url: &str) -> String {
    let (_, out) = run(
        "curl",
        &["-sS", "-o", "/dev/null", "-w", "%{http_code}", url],
        b"",
    )
    .await;
    out.trim().to_string()
}

/// A connection's last answer is kept for its close and sent with the close_notify and the
/// FIN: whole, at every size around the bound of what is kept, for HTTP/1.0 (ALPN
/// "http/1.0" offered alone), `Connection: close`, and HTTP/1.0 keep-alive (where nothing is
/// kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_connections_get_their_last_answer_whole() {
    let pki = Pki::new();
    let (p, addr, _) = front(&pki, "").await;
    for size in [0usize, 1, 128, 16_000, 65_000, 66_000, 70_000, 1_000_000] {
        let path = format!("/corpus/random/{size}");
        let cases: [&[&str]; 3] = [
            &["--http1.0"],
            &["-H", "Connection: close"],
            &["--http1.0", "-H", "Connection: keep-alive"],
        ];
        for (i, args) in cases.iter().enumerate() {
            let file = pki.path(&format!("got-{size}-{i}"));
            let file_arg = file.display().to_string();
            let mut all = args.to_vec();
            all.extend_from_slice(&["-o", &file_arg, "-w", "%{http_code} %{size_download}\\n"]);
            let (ok, out) = curl(&pki, addr, "a.example", &path, &all).await;
            assert!(ok, "{size} {args:?}: {out}");
            assert!(
                out.starts_with(&format!("200 {size}")),
                "{size} {args:?}: {out}"
            );
            let got = std::fs::read(&file).unwrap();
            assert_eq!(got.len(), size, "{size} {args:?}");
            // The corpus is the same bytes every time: the first answer is the reference.
            let first = std::fs::read(pki.path(&format!("got-{size}-0"))).unwrap();
            assert!(got == first, "{size} {args:?}: the bytes differ");
        }
    }
    // Two answers in one curl run (on one connection or two: hyper keeps it, but its HTTP/1.0
    // answer does not say keep-alive, so curl closes it), each whole.
    let url = format!("https://a.example:{}/corpus/random/70000", addr.port());
    let (f1, f2) = (pki.path("ka-1"), pki.path("ka-2"));
    let (f1s, f2s) = (f1.display().to_string(), f2.display().to_string());
    let (ok, out) = curl(
        &pki,
        addr,
        "a.example",
        "/corpus/random/128",
        &[
            "--http1.0",
            "-H",
            "Connection: keep-alive",
            "-v",
            "-o",
            &f1s,
            &url,
            "-o",
            &f2s,
        ],
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(std::fs::read(&f1).unwrap().len(), 70_000);
    assert_eq!(std::fs::read(&f2).unwrap().len(), 128);
    let t = tls(&p);
    assert_eq!(t.failures.iter().map(|(_, n)| n).sum::<u64>(), 0, "{t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_nagle_over_tls_is_not_left_waiting_for_an_ack() {
    // As over cleartext (`adc.rs`, segments): an https listener delays its acknowledgements
    // so they ride on answers, and a TLS client that keeps Nagle's algorithm on writes the
    // second record of a request only once the first is acknowledged. The proxy acknowledges
    // at once when it waits for the rest of a request. Timed with a wide margin against a
    // loaded machine, which slows some requests but not all: of ten requests, at least two
    // under 30 ms (they take about a millisecond). The delayed-ACK timer would make every one
    // 40 ms or more — or all but the first if the proxy acknowledged once per connection
    // instead of once per request.
    use tokio::io::AsyncWriteExt as _;
    let pki = Pki::new();
    let (_p, addr, _) = front(&pki, "").await;
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert!(!tcp.nodelay().unwrap());
    let mut s = tls_client(&pki, tcp, "a.example").await;
    let mut took = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    for _ in 0..10 {
        let t = headway_core::SystemClock::now();
        // Head and body in two records, each written out on its own.
        s.write_all(b"POST /echo HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n\r\n")
            .await
            .unwrap();
        s.flush().await.unwrap();
        s.write_all(b"hello").await.unwrap();
        s.flush().await.unwrap();
        let (head, body) = one_answer(&mut s, &mut pending, false).await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        took.push(headway_core::SystemClock::now().saturating_duration_since(t));
        assert!(String::from_utf8_lossy(&body).contains("\"body_bytes\":5"));
    }
    took.sort();
    assert!(
        took[1] < Duration::from_millis(30),
        "requests took {took:?}"
    );
}

/// A rustls client (HTTP/1.1, no ALPN) over `tcp`, trusting the test CA, for `name`.
async fn tls_client(
    pki: &Pki,
    tcp: tokio::net::TcpStream,
    name: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki.path("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg));
    let name = ServerName::try_from(name.to_string()).unwrap();
    connector.connect(name, tcp).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_over_tls_reach_the_server() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    let pki = Pki::new();
    let (p, addr, _) = front(&pki, "").await;
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tls_client(&pki, tcp, "a.example").await;
    let (mut ws, resp) = tokio_tungstenite::client_async("wss://a.example/ws/echo", tls)
        .await
        .expect("the WebSocket handshake over TLS succeeds");
    assert_eq!(resp.status(), 101);
    for i in 0..20usize {
        let m = Message::binary(vec![i as u8; i * 7919]);
        ws.send(m.clone()).await.unwrap();
        let back = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("an echo in time")
            .expect("open")
            .unwrap();
        assert_eq!(back, m);
    }
    until(&p, "one tunnel", |s| s.virtual_servers[0].tunnels == 1).await;
    ws.close(None).await.unwrap();
    while let Some(Ok(_)) = ws.next().await {}
    drop(ws);
    until(&p, "no tunnel", |s| s.virtual_servers[0].tunnels == 0).await;
    assert_eq!(p.snapshot().virtual_servers[0].upgrades, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_protocol_header_comes_before_the_handshake() {
    use headway_proxy::proxy_protocol::{encode, Version};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let pki = Pki::new();
    let (_plain, _, text) = front(&pki, "").await;
    let text = text.replace(
        "request_header_timeout = \"5s\"\n",
        "request_header_timeout = \"5s\"\naccept_proxy_protocol = true\n",
    );
    let (p, addr) = start(&pki, &text).await;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let client: std::net::SocketAddr = "203.0.113.9:5555".parse().unwrap();
    tcp.write_all(&encode(Version::V2, client, addr))
        .await
        .unwrap();
    let mut tls = tls_client(&pki, tcp, "a.example").await;
    tls.write_all(b"GET /echo HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tls.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let body = text.split_once("\r\n\r\n").unwrap().1;
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["headers"]["x-forwarded-for"][0], "203.0.113.9");
    assert_eq!(v["headers"]["x-forwarded-proto"][0], "https");
    // A TLS client that sends no header is closed before its handshake is answered.
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("a.example").unwrap();
    let refused = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(name, tcp)
        .await;
    assert!(refused.is_err());
    until(&p, "one bad header counted", |s| {
        s.virtual_servers[0].bad_proxy_headers == 1
    })
    .await;
}

/// A group with `protocol = "h2"` and TLS negotiates `h2` by ALPN with a verified server (a
/// Headway `https` virtual server here, itself speaking HTTP/2 to its origin), carries the
/// requests of many clients on one TLS connection, passes trailers through both (a gRPC call's
/// status), and its HTTP monitor checks over HTTP/2 on TLS too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_over_tls_to_servers_is_negotiated_and_shared() {
    let pki = Pki::new();
    pki.issue("backend", &["backend.internal"], "Backend", false);
    let o = origin("behind-tls").await;
    let (backend, backend_addr) = start(
        &pki,
        &format!(
            "{}{}{}",
            pki.section("backend", "backend"),
            group("origin", o, "protocol = \"h2\""),
            https("origin", "certificates = [\"backend\"]")
        ),
    )
    .await;
    let ca = pki.path("ca.pem").display().to_string();
    let text = format!(
        "[[monitor]]\nname = \"check\"\nkind = \"http\"\npath = \"/healthz\"\n\
         interval = \"2s\"\ntimeout = \"2s\"\nrise = 1\nfall = 1\n{}\
         [[virtual_server]]\nname = \"plain\"\nkind = \"http\"\nlisten = \"127.0.0.1:0\"\n\
         group = \"secure\"\n",
        group(
            "secure",
            backend_addr,
            &format!(
                "protocol = \"h2\"\nretries = 0\nmonitor = \"check\"\n[server_group.tls]\n\
                 ca_file = \"{ca}\"\nserver_name = \"backend.internal\""
            )
        )
    );
    let (p, addr) = start(&pki, &text).await;
    until(&p, "a passed check over HTTP/2 on TLS", |s| {
        s.groups[0].servers[0].checks_ok > 0
    })
    .await;
    let url = format!("http://{addr}/echo");
    let mut clients = Vec::new();
    for _ in 0..8 {
        let url = url.clone();
        clients.push(tokio::spawn(async move {
            run("curl", &["-sS", "--max-time", "20", &url], b"").await
        }));
    }
    for c in clients {
        let (ok, out) = c.await.unwrap();
        assert!(ok, "{out}");
        assert!(out.contains(r#""server":"behind-tls""#), "{out}");
        assert!(out.contains(r#""version":"HTTP/2.0""#), "{out}");
    }
    // gRPC's shape through both proxies, HTTP/2 all the way: curl shows the trailers among
    // the fields it received (`-v`).
    let (ok, out) = run(
        "curl",
        &[
            "-sSv",
            "--http2-prior-knowledge",
            "-H",
            "TE: trailers",
            "-H",
            "content-type: application/grpc",
            "--data-binary",
            "hello",
            &format!("http://{addr}/trailers"),
        ],
        b"",
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.contains("< grpc-status: 0"), "{out}");
    assert!(out.contains("< x-body-bytes: 5"), "{out}");
    let s = p.snapshot();
    let server = &s.groups[0].servers[0];
    assert_eq!(server.requests, 9, "{server:?}");
    assert_eq!(server.connections_opened, 1, "{server:?}");
    let t = tls(&backend);
    // The requests' connection and each check's chose h2; none chose HTTP/1.1.
    assert!(t.alpn_h2 >= 2, "{t:?}");
    assert_eq!(t.alpn_http11, 0, "{t:?}");
}
