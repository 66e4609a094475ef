//! gRPC through Headway with real gRPC peers on both sides: grpcio (Debian's python3-grpcio)
//! as client and server (`tests/grpc/peer.py`), the proxy between them an `http` virtual
//! server with an HTTP/2 group. Unary, server- and client-streaming calls, an error status,
//! metadata both ways, trailers, and 100 calls at once on one channel.

use super::*;

/// Debian's interpreter, where python3-grpcio is installed (`scripts/setup.sh`); another
/// `python3` earlier on the PATH may not have it.
const PYTHON: &str = "/usr/bin/python3";

fn peer_script() -> String {
    format!("{}/tests/grpc/peer.py", env!("CARGO_MANIFEST_DIR"))
}

/// A grpcio server on a loopback port, stopped when dropped (its stdin closes; killed too).
pub(super) struct GrpcServer {
    pub(super) addr: SocketAddr,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl GrpcServer {
    pub(super) fn start(name: &str) -> GrpcServer {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let child = std::process::Command::new(PYTHON)
            .arg(peer_script())
            .args(["serve", name])
            .arg(&port_file)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs the gRPC peer (scripts/setup.sh installs python3-grpcio)");
        let deadline = SystemClock::now() + Duration::from_secs(20);
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p.trim().parse::<u16>().unwrap();
            }
            assert!(
                SystemClock::now() < deadline,
                "the gRPC server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        GrpcServer {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            child,
            _dir: dir,
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the grpcio client's calls against `target`; what came back.
async fn calls(target: SocketAddr) -> serde_json::Value {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(PYTHON)
            .arg(peer_script())
            .arg("call")
            .arg(target.to_string())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the gRPC client finished in time")
    .expect("python3 runs");
    assert!(
        out.status.success(),
        "gRPC client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_pass_between_real_grpc_peers() {
    let server = GrpcServer::start("s1");
    // The peers themselves, for reference.
    let direct = calls(server.addr).await;
    let text = format!(
        "{}{}",
        group("g", "protocol = \"h2\"", &[(server.addr, "")]),
        vs("g", "")
    );
    let (p, addr) = proxy_with(&text, 1).await;
    let through = calls(addr).await;
    assert_eq!(through, direct);
    assert_eq!(through["unary"], "hello");
    assert_eq!(through["unary_code"], "OK");
    assert_eq!(through["unary_trailers"]["x-served-by"], "s1");
    assert_eq!(through["unary_trailers"]["x-seen-client"], "t1");
    assert_eq!(
        through["fail"],
        serde_json::json!(["NOT_FOUND", "no such thing"])
    );
    assert_eq!(through["stream_count"], 500);
    assert_eq!(through["stream_ok"], true);
    assert_eq!(through["collect"], "1000000");
    assert_eq!(through["parallel_ok"], true);
    assert_eq!(through["health"], "0801");
    let s = p.snapshot();
    let sv = &s.groups[0].servers[0];
    // unary, fail, stream, collect, 100 at once, health.
    assert_eq!(sv.requests, 105, "{sv:?}");
    assert_eq!(sv.connections_opened, 1, "{sv:?}");
    assert_eq!(sv.responses[1], 105, "{sv:?}");
    assert_eq!(sv.bytes_in, answer_bytes(), "{sv:?}");
}

/// The gRPC message bytes the server sends in [`calls`] (5-byte frame headers included):
/// unary 5 + 100 answers of their numbers, the 500 streamed messages, the total, the health
/// answer; the failed call sends none.
fn answer_bytes() -> u64 {
    let frame = |n: u64| 5 + n;
    let parallel: u64 = (0..100u64).map(|i| frame(i.to_string().len() as u64)).sum();
    frame(5) + 500 * frame(1000) + frame(7) + parallel + frame(2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_monitors_ask_the_health_service() {
    let server = GrpcServer::start("s1");
    let not_grpc = Origin::start("web", Duration::ZERO).await;
    // (service, server, up): the grpcio server is SERVING for the server as a whole and for
    // `shop.Cart`, NOT_SERVING for `down`; a plain web server is not a gRPC server. Each
    // failing case fails on the answer, at once; the timeout is one no check of the (Python)
    // server comes near on a loaded machine. The four cases run at once, each with its own
    // proxy: two checks take an interval.
    let mut cases = Vec::new();
    for (service, addr, up) in [
        ("", server.addr, true),
        ("shop.Cart", server.addr, true),
        ("down", server.addr, false),
        ("", not_grpc.addr, false),
    ] {
        let text = format!(
            "[[monitor]]\nname = \"m\"\nkind = \"grpc\"\nservice = \"{service}\"\n\
             interval = \"2s\"\ntimeout = \"2s\"\nfall = 1\nrise = 1\n{}{}",
            group("g", "protocol = \"h2\"\nmonitor = \"m\"", &[(addr, "")]),
            vs("g", "")
        );
        let (p, _) = proxy(&text).await;
        cases.push((service, addr, up, p));
    }
    for (service, addr, up, p) in cases {
        let s = after_two_checks(&p).await;
        let sv = &s.groups[0].servers[0];
        assert_eq!(
            (sv.checks_ok >= 2, sv.checks_failed >= 2, sv.health.as_str()),
            (up, !up, if up { "up" } else { "down" }),
            "service {service:?} at {addr}: {sv:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_says_each_calls_grpc_status() {
    let server = GrpcServer::start("s1");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.json");
    let text = format!(
        "{}{}",
        group("g", "protocol = \"h2\"", &[(server.addr, "")]),
        vs(
            "g",
            &format!(
                "access_log = \"{}\"\naccess_log_format = \"json\"",
                log.display()
            )
        )
    );
    let (_p, addr) = proxy_with(&text, 1).await;
    calls(addr).await;
    let lines = json_log_lines(&log, 105).await;
    let count = |uri: &str, status: u64| {
        lines
            .iter()
            .filter(|l| l["uri"] == uri && l["grpc_status"] == status)
            .count()
    };
    // 101 good unary calls (status 0 in the trailers), the failed one (NOT_FOUND, 5, in a
    // trailers-only answer), and the streaming and health calls.
    assert_eq!(count("/test.Echo/Unary", 0), 101, "{lines:?}");
    assert_eq!(count("/test.Echo/Unary", 5), 1, "{lines:?}");
    assert_eq!(count("/test.Echo/Stream", 0), 1);
    assert_eq!(count("/test.Echo/Collect", 0), 1);
    assert_eq!(count("/grpc.health.v1.Health/Check", 0), 1);
    assert!(lines
        .iter()
        .all(|l| l["status"] == 200 && l["version"] == "HTTP/2.0"));
}
