//! End-to-end tests of the `headway` binary: real processes, real namespaces, real veth links,
//! the real emulator. Tests that need root (namespaces, AF_PACKET) print a note and return when
//! not run as root; CI runs them as root.
//!
//! Each lab test uses its own namespace prefix and state directory so tests can run in parallel
//! and never touch a lab the user has up.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use headway_core::SystemClock;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_headway")
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

macro_rules! require_root {
    () => {
        if !is_root() {
            eprintln!("skipped: needs root (namespaces, AF_PACKET)");
            return;
        }
    };
}

fn headway(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run headway")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("headway-e2e-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Asserts a usage failure: exit 64 and exactly one line on stderr containing `needle`.
fn assert_usage_error(out: &Output, needle: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "stderr: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected, got: {err}"
    );
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_usage_and_bad_config_exit_64_with_one_clear_line() {
    let out = headway(&["emulate", "--a", "x0", "--b", "x1", "--both", "rate=fast"]);
    assert_usage_error(&out, "`fast` is not a rate");
    let out = headway(&["emulate", "--a", "x0", "--b", "x1", "--both", "dely=10ms"]);
    assert_usage_error(&out, "did you mean `delay`");
    let out = headway(&["no-such-command"]);
    assert_eq!(out.status.code(), Some(64));

    let dir = TempDir::new("check");
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[admin]\nlisten = \"127.0.0.1:9090\"\n\n[[link]]\nname = \"wan\"\na = \"a0\"\nb = \"b0\"\nboth = \"rate=1mbit\"\ndely = \"10ms\"\n",
    )
    .unwrap();
    let out = headway(&["check", "-c", bad.to_str().unwrap()]);
    assert_usage_error(&out, "bad.toml:9:1");
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "[[link]]\nname = \"wan\"\na = \"a0\"\nb = \"b0\"\nboth = \"rate=1.5mbit delay=150ms loss=1%\"\n",
    )
    .unwrap();
    let out = headway(&["check", "-c", good.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("rate=1.5mbit"),
        "{}",
        text(&out.stdout)
    );
}

/// `check` lists each group's servers: an unnamed server (its name is its address) once, a
/// named one by name and address.
#[test]
fn check_names_each_server_once() {
    let dir = TempDir::new("check-servers");
    let cfg = dir.path().join("adc.toml");
    std::fs::write(
        &cfg,
        "[[server_group]]\nname = \"web\"\n\
         [[server_group.server]]\naddress = \"127.0.0.1:8080\"\n\
         [[server_group.server]]\nname = \"spare\"\naddress = \"127.0.0.1:8081\"\nbackup = true\n\n\
         [[virtual_server]]\nname = \"front\"\nkind = \"http\"\nlisten = \"127.0.0.1:0\"\ngroup = \"web\"\n",
    )
    .unwrap();
    let out = headway(&["check", "-c", cfg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("group web (round-robin): 127.0.0.1:8080, spare 127.0.0.1:8081 (backup)"),
        "{said}"
    );
}

#[test]
fn origin_on_a_port_in_use_exits_64() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = headway(&["origin", "--listen", &addr]);
    assert_usage_error(&out, "address already in use");
}

#[test]
fn root_only_commands_run_unprivileged_exit_64_and_say_so() {
    // As root (CI), drop to `nobody` with setpriv to exercise the unprivileged path for real.
    let dir = TempDir::new("noroot");
    let run = |args: &[&str]| -> Output {
        if is_root() {
            // A copy the unprivileged user can reach (the build dir may be under /root).
            let copy = dir.path().join("headway");
            if !copy.exists() {
                std::fs::copy(bin(), &copy).unwrap();
            }
            let mut perms = std::fs::metadata(dir.path()).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(dir.path(), perms).unwrap();
            Command::new("setpriv")
                .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
                .arg(&copy)
                .args(args)
                .env("RUST_BACKTRACE", "0")
                .output()
                .expect("setpriv (util-linux)")
        } else {
            headway(args)
        }
    };
    assert_usage_error(&run(&["lab", "up"]), "needs root");
    assert_usage_error(&run(&["demo"]), "needs root");
    assert_usage_error(&run(&["bench", "emulator"]), "needs root");
    let out = run(&["emulate", "--a", "lo", "--b", "lo2"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
}

#[test]
fn emulate_on_an_unknown_interface_exits_64() {
    require_root!();
    let out = headway(&["emulate", "--a", "nosuch0", "--b", "nosuch1"]);
    assert_usage_error(&out, "no interface named nosuch0");
}

/// A lab with its own prefix and state dir, torn down on drop.
struct LabEnv {
    prefix: String,
    dir: TempDir,
}

impl LabEnv {
    fn new(tag: &str) -> LabEnv {
        LabEnv {
            prefix: format!("hwe{}{tag}-", std::process::id()),
            dir: TempDir::new(tag),
        }
    }
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .args(args)
            .env("HEADWAY_LAB_PREFIX", &self.prefix)
            .env("HEADWAY_LAB_DIR", self.dir.path())
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("run headway")
    }
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args);
        assert!(
            out.status.success(),
            "headway {args:?} failed: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }
    fn namespaces(&self) -> Vec<String> {
        let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
        text(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&self.prefix))
            .map(str::to_string)
            .collect()
    }
    /// Mean RTT in ms of `count` pings from the client host to `to`.
    fn ping_to_ms(&self, to: &str, count: u32) -> f64 {
        let count = count.to_string();
        let out = self.ok(&[
            "lab", "exec", "client", "--", "ping", "-q", "-c", &count, "-i", "0.2", "-W", "3", to,
        ]);
        let line = out.lines().find(|l| l.contains("min/avg/max")).expect(&out);
        let stats = line.split('=').nth(1).unwrap().trim();
        stats.split('/').nth(1).unwrap().parse().unwrap()
    }

    /// Mean RTT in ms of `count` pings from client to server through the WAN (pair topology).
    fn ping_ms(&self, count: u32) -> f64 {
        self.ping_to_ms("198.18.0.2", count)
    }
}

impl Drop for LabEnv {
    fn drop(&mut self) {
        let _ = self.cmd(&["lab", "down"]);
    }
}

#[test]
fn lab_with_the_real_emulator_applies_presets_and_live_changes() {
    require_root!();
    let lab = LabEnv::new("lab");
    let up = lab.ok(&[
        "lab",
        "up",
        "--topology",
        "pair",
        "--preset",
        "branch_us_asia",
        "--seed",
        "7",
    ]);
    assert!(up.contains("rate=1.5mbit"), "{up}");
    assert_eq!(lab.namespaces().len(), 3, "{:?}", lab.namespaces());

    // 150 ms each way: a ping's RTT is at least 300 ms (ICMP is tiny, serialisation < 1 ms).
    let rtt = lab.ping_ms(3);
    assert!(rtt >= 300.0, "rtt {rtt} ms through a 300 ms RTT preset");

    lab.ok(&["lab", "set", "delay=5ms", "loss=0%"]);
    let rtt = lab.ping_ms(3);
    assert!(
        (10.0..300.0).contains(&rtt),
        "rtt {rtt} ms after setting 5 ms each way"
    );

    // A malformed update is refused and the link keeps running as it was.
    let bad = lab.cmd(&["lab", "set", "delay=soon"]);
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("soon"), "{}", text(&bad.stderr));
    let rtt = lab.ping_ms(3);
    assert!(
        (10.0..300.0).contains(&rtt),
        "rtt {rtt} ms after a refused update"
    );

    let status = lab.ok(&["lab", "status"]);
    assert!(
        status.contains("delay") || status.contains("DELAY"),
        "{status}"
    );
    assert!(status.contains("5ms"), "{status}");

    lab.ok(&["lab", "down"]);
    assert!(
        lab.namespaces().is_empty(),
        "left behind: {:?}",
        lab.namespaces()
    );
}

#[test]
fn branch_and_dual_wan_route_through_real_emulators() {
    require_root!();
    let lab = LabEnv::new("br");
    lab.ok(&["lab", "up", "--topology", "branch", "--spec", "delay=10ms"]);
    // client → branch appliance → emulated WAN → DC appliance → server: two routers, 20 ms RTT
    let server = "198.18.2.2";
    let out = lab.ok(&[
        "lab", "exec", "client", "--", "ping", "-c", "1", "-W", "3", server,
    ]);
    assert!(out.contains("ttl=62"), "{out}");
    assert!(lab.ping_to_ms(server, 2) >= 20.0);
    lab.ok(&["lab", "down"]);

    lab.ok(&["lab", "up", "--topology", "dual-wan"]);
    let status = lab.ok(&["lab", "status"]);
    assert!(
        status.contains("wan1") && status.contains("wan2"),
        "{status}"
    );
    // The default route crosses wan1: delaying wan2 must not change the RTT, delaying wan1 must.
    lab.ok(&["lab", "set", "--link", "wan2", "delay=100ms"]);
    assert!(lab.ping_to_ms(server, 2) < 100.0);
    lab.ok(&["lab", "set", "--link", "wan1", "delay=30ms"]);
    assert!(lab.ping_to_ms(server, 2) >= 60.0);
    lab.ok(&["lab", "down"]);
    assert!(
        lab.namespaces().is_empty(),
        "left behind: {:?}",
        lab.namespaces()
    );
}

#[test]
fn a_killed_lab_is_cleaned_by_the_next_up() {
    require_root!();
    let lab = LabEnv::new("kill");
    lab.ok(&["lab", "up"]);
    // Kill every emulator of this lab the hard way, as a crash would.
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(lab.dir.path().join("state.json")).unwrap()).unwrap();
    for l in state["links"].as_array().unwrap() {
        let pid = l["pid"].as_i64().unwrap();
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    lab.ok(&["lab", "up"]);
    assert!(lab.ping_ms(1) >= 0.0);
    lab.ok(&["lab", "down"]);
    assert!(lab.namespaces().is_empty());
}

#[test]
fn run_with_a_config_file_serves_links_and_the_admin_api() {
    require_root!();
    let ns = format!("hwr{}", std::process::id());
    let _guard = NsGuard(ns.clone());
    let sh = |cmd: &str| {
        let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
        assert!(st.success(), "{cmd}");
    };
    sh(&format!("ip netns add {ns}"));
    sh(&format!("ip -n {ns} link add ra type veth peer name ra2"));
    sh(&format!("ip -n {ns} link add rb type veth peer name rb2"));
    for i in ["lo", "ra", "ra2", "rb", "rb2"] {
        sh(&format!("ip -n {ns} link set {i} up"));
    }
    let dir = TempDir::new("run");
    let cfg = dir.path().join("headway.toml");
    std::fs::write(
        &cfg,
        "[admin]\nlisten = \"127.0.0.1:9390\"\n\n[[link]]\nname = \"lab\"\na = \"ra\"\nb = \"rb\"\nseed = 1\nrealtime = 10\nboth = \"rate=10mbit delay=20ms\"\n[link.b_to_a]\nloss = \"2%\"\n",
    )
    .unwrap();
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            bin(),
            "run",
            "-c",
            cfg.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_ready(&mut child);
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            bin(),
            "ctl",
            "--admin",
            "http://127.0.0.1:9390",
            "links",
        ])
        .output()
        .unwrap();
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        table.contains("10mbit") && table.contains("20ms") && table.contains("2%"),
        "{table}"
    );
    // A second instance on the same admin port is refused with one clear line.
    let second = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            bin(),
            "run",
            "-c",
            cfg.to_str().unwrap(),
        ])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert_usage_error(&second, "127.0.0.1:9390");
    let metrics = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            bin(),
            "ctl",
            "--admin",
            "http://127.0.0.1:9390",
            "metrics",
        ])
        .output()
        .unwrap();
    assert!(
        text(&metrics.stdout).contains("link=\"lab\""),
        "{}",
        text(&metrics.stdout)
    );
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "SIGTERM should stop `headway run` cleanly: {status}"
    );
}

/// Waits (bounded) for the `ready` line of a `headway run`/`emulate` child.
fn wait_for_ready(child: &mut Child) {
    use std::io::BufRead;
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let deadline = SystemClock::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(SystemClock::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.trim() == "ready" => return,
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                panic!("no `ready` line: {err}");
            }
        }
    }
}

struct NsGuard(String);

impl Drop for NsGuard {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "pids", &self.0])
            .output()
            .map(|o| {
                for pid in text(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            });
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn calibrate_quick_reproduces_the_dummynet_rows() {
    require_root!();
    let dir = TempDir::new("cal");
    let out = Command::new(bin())
        .args(["lab", "calibrate", "--quick", "--out"])
        .arg(dir.path())
        .env("HEADWAY_LAB_DIR", dir.path())
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let csv = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "csv"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .unwrap_or_else(|| panic!("no CSV report in {}: {stdout}", dir.path().display()));
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let (kind, verdict) = (col("kind"), col("verdict"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.len() >= 5, "{csv}");
    for r in &rows {
        // The rate (measured at the receiver over many frames) and the seeded loss count do not
        // depend on scheduling; delay rows do, so they are reported but not judged here.
        if r[kind] == "rate" || r[kind] == "loss" {
            assert_eq!(r[verdict], "PASS", "row {r:?} of\n{csv}");
        }
    }
}

#[test]
fn demo_downloads_and_verifies_a_file_over_lan_and_wan() {
    require_root!();
    let dir = TempDir::new("demo");
    let out = Command::new(bin())
        .args(["demo", "--file", "doc_small", "--out"])
        .arg(dir.path())
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("matches the corpus"), "{stdout}");
    assert!(stdout.contains("branch_us_asia"), "{stdout}");
    for f in ["demo.md", "demo.csv", "demo.svg"] {
        assert!(dir.path().join(f).is_file(), "missing {f}");
    }
}

/// A child process killed (and reaped) on drop, so a failing test leaves nothing running.
struct Running(Child);

impl Running {
    /// Sends SIGTERM and returns how the process ended.
    fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        self.0.wait().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port that was free a moment ago (TCP or UDP), never the same twice in this
/// process, and below Linux's ephemeral range (32768 and up by default): a port the kernel
/// picked for `:0` could be handed out again as the source port of some client connection of a
/// test running beside this one before the process under test binds it.
fn free_port(udp: bool) -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    // Tests of one binary run in parallel threads; binaries run one after another. The pid
    // spreads the start so a leftover process of an earlier run is unlikely to sit there.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(
        0,
        20_000 + (std::process::id() % 64) as u16 * 100,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    loop {
        let port = NEXT.fetch_add(1, Ordering::SeqCst);
        assert!(port < 32_000, "no free test port below the ephemeral range");
        let free = if udp {
            std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok()
        } else {
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        };
        if free {
            return port;
        }
    }
}

/// `headway run -c cfg`, waited for until it prints `ready`.
fn run_until_ready(cfg: &Path) -> Running {
    let child = Command::new(bin())
        .args(["run", "-c"])
        .arg(cfg)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    wait_for_ready(&mut running.0);
    running
}

/// `headway origin` on `addr`, waited for until it answers `/healthz`.
fn origin(addr: std::net::SocketAddr) -> Running {
    let child = Command::new(bin())
        .args(["origin", "--workers", "1", "--listen", &addr.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = Running(child);
    let deadline = SystemClock::now() + Duration::from_secs(20);
    while headway_origin::fetch_blocking(addr, "/healthz")
        .map(|f| f.status)
        .ok()
        != Some(200)
    {
        assert!(
            SystemClock::now() < deadline,
            "origin on {addr} never answered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    running
}

/// Runs `headway args…` and returns its stdout, asserting success.
fn headway_ok(args: &[&str]) -> String {
    let out = headway(args);
    assert!(
        out.status.success(),
        "headway {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The status of one GET of `path` from `addr`.
fn status(addr: std::net::SocketAddr, path: &str) -> u16 {
    headway_origin::fetch_blocking(addr, path).unwrap().status
}

/// Asserts that `headway ctl metrics` of the instance at `admin` has every line in `lines`.
fn assert_metrics(admin: &str, lines: &[&str]) {
    let metrics = headway_ok(&["ctl", "--admin", admin, "metrics"]);
    for line in lines {
        assert!(metrics.contains(line), "`{line}` not in:\n{metrics}");
    }
}

/// One appliance's `[admin]` + `[wanopt]` config.
fn wanopt_config(
    admin: u16,
    tunnel: u16,
    me: &str,
    peer: &str,
    peer_tunnel: u16,
    peer_fp: &str,
    extra: &str,
) -> String {
    format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[wanopt]\ntunnel_listen = \"127.0.0.1:{tunnel}\"\n\
         cert_file = \"{me}.crt\"\nkey_file = \"{me}.key\"\ndedup_key_file = \"deployment.key\"\n\
         memory_store = \"64MiB\"\n\n[[wanopt.peer]]\nname = \"{peer}\"\n\
         address = \"127.0.0.1:{peer_tunnel}\"\nfingerprint = \"{peer_fp}\"\n\
         link_rate = \"1gbit\"\nrtt = \"10ms\"\n{extra}"
    )
}

/// The WAN-optimizer files of a branch/dc pair in `dir`, made with `headway wanopt …`;
/// returns the fingerprints (branch, dc).
fn wanopt_identities(dir: &Path) -> (String, String) {
    let p = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let mut fps = Vec::new();
    for side in ["branch", "dc"] {
        let (crt, key) = (p(&format!("{side}.crt")), p(&format!("{side}.key")));
        let fp = headway_ok(&["wanopt", "identity", "--cert", &crt, "--key", &key]);
        let fp = fp.trim().to_string();
        assert_eq!(fp.len(), 64, "{fp}");
        assert_eq!(
            headway_ok(&["wanopt", "fingerprint", "--cert", &crt]).trim(),
            fp
        );
        fps.push(fp);
    }
    headway_ok(&["wanopt", "dedup-key", "--out", &p("deployment.key")]);
    let key = std::fs::read_to_string(dir.join("deployment.key")).unwrap();
    assert_eq!(key.trim().len(), 64, "{key}");
    let mode = std::fs::metadata(dir.join("deployment.key")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    (fps.remove(0), fps.remove(0))
}

/// The branch appliance's counters for peer `dc`, class `dedup-memory`, from
/// `headway ctl wanopt stats --json`.
fn dc_group(admin: u16) -> serde_json::Value {
    let url = format!("http://127.0.0.1:{admin}");
    let json = headway_ok(&["ctl", "--admin", &url, "wanopt", "stats", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["groups"]
        .as_array()
        .and_then(|g| {
            g.iter()
                .find(|g| g["peer"] == "dc" && g["class"] == "dedup-memory")
        })
        .cloned()
        .unwrap_or_else(|| panic!("no dc/dedup-memory group in {json}"))
}

fn wan_bytes(group: &serde_json::Value) -> u64 {
    group["wan_in"].as_u64().unwrap() + group["wan_out"].as_u64().unwrap()
}

#[test]
fn wanopt_pair_on_loopback_serves_the_file_and_dedups_the_second_fetch() {
    let dir = TempDir::new("wanopt");
    let (fp_branch, fp_dc) = wanopt_identities(dir.path());
    let crt = dir.path().join("branch.crt");
    let again = headway(&[
        "wanopt",
        "identity",
        "--cert",
        crt.to_str().unwrap(),
        "--key",
        dir.path().join("other.key").to_str().unwrap(),
    ]);
    assert_usage_error(&again, "already exists");

    let origin_addr: std::net::SocketAddr =
        format!("127.0.0.1:{}", free_port(false)).parse().unwrap();
    let service: std::net::SocketAddr = format!("127.0.0.1:{}", free_port(false)).parse().unwrap();
    let (branch_admin, dc_admin) = (free_port(false), free_port(false));
    let (branch_tunnel, dc_tunnel) = (free_port(true), free_port(true));
    let branch_cfg = dir.path().join("branch.toml");
    std::fs::write(
        &branch_cfg,
        wanopt_config(
            branch_admin,
            branch_tunnel,
            "branch",
            "dc",
            dc_tunnel,
            &fp_dc,
            &format!(
                "\n[[wanopt.service]]\nid = 1\nlisten = \"{service}\"\ntarget = \"{origin_addr}\"\n\
                 peer = \"dc\"\nclass = \"dedup-memory\"\n"
            ),
        ),
    )
    .unwrap();
    let dc_cfg = dir.path().join("dc.toml");
    std::fs::write(
        &dc_cfg,
        wanopt_config(
            dc_admin,
            dc_tunnel,
            "dc",
            "branch",
            branch_tunnel,
            &fp_branch,
            "",
        ),
    )
    .unwrap();
    let check = headway_ok(&["check", "-c", branch_cfg.to_str().unwrap()]);
    assert!(check.contains("via dc (dedup-memory)"), "{check}");

    let _origin = origin(origin_addr);
    let dc = run_until_ready(&dc_cfg);
    let branch = run_until_ready(&branch_cfg);

    let doc = headway_origin::corpus::file("doc_small").unwrap();
    let first = headway_origin::fetch_blocking(service, "/files/doc_small").unwrap();
    assert_eq!(first.status, 200);
    assert_eq!(first.bytes, doc.size());
    assert_eq!(first.sha256, doc.sha256(), "first fetch corrupted");
    let after_first = dc_group(branch_admin);
    let second = headway_origin::fetch_blocking(service, "/files/doc_small").unwrap();
    assert_eq!(second.sha256, doc.sha256(), "second fetch corrupted");
    let after_second = dc_group(branch_admin);

    assert!(
        after_second["flows_optimized"].as_u64().unwrap() >= 2,
        "{after_second}"
    );
    assert_eq!(after_second["flows_failed"], 0, "{after_second}");
    let first_wan = wan_bytes(&after_first);
    let second_wan = wan_bytes(&after_second) - first_wan;
    eprintln!(
        "doc_small ({} bytes): first pass {first_wan} WAN bytes, second pass {second_wan}",
        doc.size()
    );
    assert!(first_wan > 0 && first_wan < doc.size(), "{after_first}");
    assert!(
        second_wan * 20 < first_wan,
        "second pass {second_wan} WAN bytes vs first {first_wan}: not deduplicated"
    );

    let url = format!("http://127.0.0.1:{branch_admin}");
    let table = headway_ok(&["ctl", "--admin", &url, "wanopt", "stats"]);
    assert!(
        table.contains("REDUCTION") && table.contains("dedup-memory"),
        "{table}"
    );
    // The downloads are over: no flow is carried now. (And SIGUSR1, logrotate's signal, does
    // not end an instance without access logs.)
    let _ = Command::new("kill")
        .args(["-USR1", &branch.0.id().to_string()])
        .status();
    std::thread::sleep(Duration::from_millis(200));
    let flows = headway_ok(&["ctl", "--admin", &url, "wanopt", "flows"]);
    assert_eq!(flows.trim(), "no flows");
    let flows = headway_ok(&["ctl", "--admin", &url, "wanopt", "flows", "--json"]);
    assert_eq!(flows.trim(), "[]");
    let metrics = headway_ok(&["ctl", "--admin", &url, "metrics"]);
    assert!(
        metrics.contains(
            "headway_wanopt_flows_total{peer=\"dc\",class=\"dedup-memory\",outcome=\"optimized\""
        ),
        "{metrics}"
    );
    // The far side sees the same flows from its end.
    let dc_url = format!("http://127.0.0.1:{dc_admin}");
    let dc_json = headway_ok(&["ctl", "--admin", &dc_url, "wanopt", "stats", "--json"]);
    assert!(dc_json.contains("\"branch\""), "{dc_json}");

    for (name, p) in [("branch", branch), ("dc", dc)] {
        let status = p.terminate();
        assert!(
            status.success(),
            "SIGTERM should stop the {name} appliance cleanly: {status}"
        );
    }
}

#[test]
fn wanopt_mistakes_exit_64_with_one_line_before_ready() {
    let dir = TempDir::new("wanopt-bad");
    let (_, fp_dc) = wanopt_identities(dir.path());
    let cfg = dir.path().join("bad.toml");
    let base = wanopt_config(
        free_port(false),
        free_port(true),
        "branch",
        "dc",
        9,
        &fp_dc,
        "",
    );
    let service = |listen: &str, peer: &str| {
        format!(
            "{base}\n[[wanopt.service]]\nid = 1\nlisten = \"{listen}\"\ntarget = \"127.0.0.1:9\"\n\
             peer = \"{peer}\"\nclass = \"dedup-memory\"\n"
        )
    };
    let cfg_arg = cfg.to_str().unwrap();

    // An unknown peer: file:line:col and the fix, from `check` and from `run`.
    std::fs::write(&cfg, service("127.0.0.1:0", "dcc")).unwrap();
    let line = service("127.0.0.1:0", "dcc")
        .lines()
        .position(|l| l == "peer = \"dcc\"")
        .unwrap()
        + 1;
    for cmd in ["check", "run"] {
        let out = headway(&[cmd, "-c", cfg_arg]);
        assert_usage_error(
            &out,
            &format!("bad.toml:{line}:8: service 1: unknown peer `dcc`"),
        );
        assert!(text(&out.stderr).contains("did you mean `dc`?"));
        assert!(!text(&out.stdout).contains("ready"));
    }

    // A missing dedup key file names the file and the command that makes one.
    std::fs::write(&cfg, base.replace("deployment.key", "missing.key")).unwrap();
    let out = headway(&["check", "-c", cfg_arg]);
    assert_usage_error(&out, "missing.key");
    assert!(
        text(&out.stderr).contains("headway wanopt dedup-key --out missing.key"),
        "{}",
        text(&out.stderr)
    );

    // A certificate that looks like PEM but does not load.
    std::fs::write(
        dir.path().join("broken.crt"),
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(&cfg, base.replace("branch.crt", "broken.crt")).unwrap();
    let out = headway(&["run", "-c", cfg_arg]);
    assert_usage_error(&out, "the certificate or key is not usable");
    assert!(
        text(&out.stderr).contains("broken.crt"),
        "{}",
        text(&out.stderr)
    );
    assert!(!text(&out.stdout).contains("ready"));

    // A service port already in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    std::fs::write(&cfg, service(&addr, "dc")).unwrap();
    let out = headway(&["run", "-c", cfg_arg]);
    assert_usage_error(&out, "cannot start the WAN optimizer");
    assert!(text(&out.stderr).contains(&addr), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("ready"));

    // No appliance: the stats route says so.
    let admin = free_port(false);
    std::fs::write(&cfg, format!("[admin]\nlisten = \"127.0.0.1:{admin}\"\n")).unwrap();
    let plain = run_until_ready(&cfg);
    let out = headway(&[
        "ctl",
        "--admin",
        &format!("http://127.0.0.1:{admin}"),
        "wanopt",
        "stats",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no WAN optimizer runs"),
        "{}",
        text(&out.stderr)
    );
    assert!(plain.terminate().success());
}

/// An origin to put an ADC in front of, a directory for the ADC's config file, and the
/// ports that config gets.
struct AdcFront {
    dir: TempDir,
    /// `adc.toml` in `dir`.
    cfg: PathBuf,
    _origin: Running,
    server: std::net::SocketAddr,
    admin: u16,
    listen: u16,
    /// The admin API's address, as `ctl --admin` takes it.
    admin_url: String,
    /// The virtual server's address.
    front: std::net::SocketAddr,
}

impl AdcFront {
    fn start(name: &str) -> AdcFront {
        let dir = TempDir::new(name);
        let server: std::net::SocketAddr =
            format!("127.0.0.1:{}", free_port(false)).parse().unwrap();
        let (admin, listen) = (free_port(false), free_port(false));
        AdcFront {
            cfg: dir.path().join("adc.toml"),
            dir,
            _origin: origin(server),
            server,
            admin,
            listen,
            admin_url: format!("127.0.0.1:{admin}"),
            front: format!("127.0.0.1:{listen}").parse().unwrap(),
        }
    }

    /// [`adc_config`] for these ports, with `extra` after the virtual server.
    fn config(&self, extra: &str) -> String {
        adc_config(self.admin, self.listen, self.server, extra)
    }
}

/// The ADC config of the binary tests: one HTTP virtual server in front of `server`.
fn adc_config(admin: u16, listen: u16, server: std::net::SocketAddr, extra: &str) -> String {
    format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[runtime]\nworkers = 2\n\n\
         [[monitor]]\nname = \"tcp\"\nkind = \"tcp\"\ninterval = \"200ms\"\n\n\
         [[server_group]]\nname = \"web\"\nmethod = \"least-connection\"\nmonitor = \"tcp\"\n\
         [[server_group.server]]\nname = \"s1\"\naddress = \"{server}\"\n\n\
         [[virtual_server]]\nname = \"front\"\nkind = \"http\"\nlisten = \"127.0.0.1:{listen}\"\ngroup = \"web\"\n{extra}"
    )
}

#[test]
fn adc_serves_and_is_operated_live_through_ctl_sighup_and_the_admin_api() {
    let adc = AdcFront::start("adc");
    let (cfg, admin_url, front) = (adc.cfg.clone(), adc.admin_url.clone(), adc.front);
    std::fs::write(&cfg, adc.config("")).unwrap();
    let out = headway_ok(&["check", "-c", cfg.to_str().unwrap()]);
    assert!(out.contains("virtual server front (http)"), "{out}");
    let running = run_until_ready(&cfg);

    let f = headway_origin::fetch_blocking(front, "/corpus/doc/100KiB").unwrap();
    assert_eq!((f.status, f.bytes), (200, 100 * 1024));
    let table = headway_ok(&["ctl", "--admin", &admin_url, "adc"]);
    assert!(table.contains("front") && table.contains("s1"), "{table}");

    // Drain through ctl: the state shows, and requests still succeed (no other server, so
    // the drained one is not chosen: 503 with a clear body).
    let out = headway_ok(&["ctl", "--admin", &admin_url, "server", "drain", "web", "s1"]);
    assert!(out.contains("draining"), "{out}");
    let f = headway_origin::fetch_blocking(front, "/healthz").unwrap();
    assert_eq!(f.status, 503);
    headway_ok(&[
        "ctl", "--admin", &admin_url, "server", "enable", "web", "s1",
    ]);
    assert_eq!(status(front, "/healthz"), 200);
    // A weight set live; one out of range is refused with the range.
    let out = headway_ok(&[
        "ctl", "--admin", &admin_url, "server", "weight", "web", "s1", "7",
    ]);
    assert!(out.contains("web/s1: enabled (up), weight 7"), "{out}");
    let out = headway(&[
        "ctl", "--admin", &admin_url, "server", "weight", "web", "s1", "1001",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("weight 1001 is out of range: use 0 to 1000"),
        "{}",
        text(&out.stderr)
    );

    // A new rule in the file, applied by SIGHUP.
    std::fs::write(
        &cfg,
        adc.config(
            "[[virtual_server.rule]]\nname = \"docs\"\npath_prefix = \"/files/\"\ngroup = \"web\"\n",
        ),
    )
    .unwrap();
    let _ = Command::new("kill")
        .args(["-HUP", &running.0.id().to_string()])
        .status();
    let deadline = SystemClock::now() + Duration::from_secs(20);
    loop {
        let json = headway_ok(&["ctl", "--admin", &admin_url, "adc", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        if v["generation"] == 2 {
            assert_eq!(v["virtual_servers"][0]["rules"][0][0], "docs");
            // The file left s1's weight as it was: the live one stays.
            assert_eq!(v["groups"][0]["servers"][0]["weight"], 7);
            break;
        }
        assert!(
            SystemClock::now() < deadline,
            "SIGHUP reload never applied: {json}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A bad config through ctl is refused with its line; generation 2 keeps running.
    let bad = adc.dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        adc.config("")
            .replace("least-connection", "least-connections"),
    )
    .unwrap();
    let out = headway(&[
        "ctl",
        "--admin",
        &admin_url,
        "config",
        "replace",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains(":14:10: group `web`: unknown method"), "{err}");
    assert!(err.contains("did you mean `least-connection`"), "{err}");
    let shown = headway_ok(&["ctl", "--admin", &admin_url, "config", "show"]);
    assert!(shown.contains("name = \"docs\""), "{shown}");
    assert_eq!(status(front, "/files/pdf_small"), 200);

    assert_metrics(
        &admin_url,
        &[
            "headway_adc_requests_total{virtual_server=\"front\"}",
            "headway_adc_reloads_failed_total 1",
        ],
    );
    assert!(running.terminate().success());
}

#[test]
fn servers_are_added_to_and_removed_from_a_running_group_through_ctl() {
    let adc = AdcFront::start("adc-servers");
    let (cfg, admin_url, front) = (adc.cfg.clone(), adc.admin_url.clone(), adc.front);
    let second: std::net::SocketAddr = format!("127.0.0.1:{}", free_port(false)).parse().unwrap();
    let _second = origin(second);
    std::fs::write(&cfg, adc.config("")).unwrap();
    let running = run_until_ready(&cfg);
    let ctl = |args: &[&str]| {
        let mut all = vec!["ctl", "--admin", admin_url.as_str()];
        all.extend_from_slice(args);
        headway(&all)
    };
    // Requests each server of `web` answered, by name.
    let requests = || -> Vec<(String, u64)> {
        let json = headway_ok(&["ctl", "--admin", &admin_url, "adc", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v["groups"][0]["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_string(),
                    s["requests"].as_u64().unwrap(),
                )
            })
            .collect()
    };

    let second_s = second.to_string();
    let out = ctl(&["server", "add", "web", "s2", &second_s, "--weight", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "web/s2 added: config generation 2"
    );
    let shown = headway_ok(&["ctl", "--admin", &admin_url, "config", "show"]);
    assert!(
        shown.contains("name = \"s2\"") && shown.contains(&format!("address = \"{second}\"")),
        "{shown}"
    );
    for _ in 0..40 {
        assert_eq!(status(front, "/healthz"), 200);
    }
    let counts = requests();
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(counts.iter().all(|(_, n)| *n > 0), "both serve: {counts:?}");

    // Refused, each with its reason, and nothing changed.
    for (args, why) in [
        (
            vec!["server", "add", "web", "s2", second_s.as_str()],
            "already has a server named \"s2\"",
        ),
        (
            vec!["server", "add", "nope", "s3", second_s.as_str()],
            "no server group named \"nope\"",
        ),
        (
            vec!["server", "add", "web", "s3", "not an address"],
            "server address `not an address`",
        ),
        (
            vec!["server", "remove", "web", "s9"],
            "has no server named \"s9\"",
        ),
    ] {
        let out = ctl(&args);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            text(&out.stderr).contains(why),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }

    // s1 removed: everything goes to s2 from now on.
    let out = ctl(&["server", "remove", "web", "s1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "web/s1 removed: config generation 3"
    );
    let before = requests();
    assert_eq!(before.len(), 1, "{before:?}");
    for _ in 0..10 {
        assert_eq!(status(front, "/healthz"), 200);
    }
    let after = requests();
    assert_eq!((after[0].0.as_str(), after[0].1), ("s2", before[0].1 + 10));
    // The last server cannot go: a group needs one.
    let out = ctl(&["server", "remove", "web", "s2"]);
    assert!(!out.status.success(), "the last server was removed");
    assert!(
        text(&out.stderr).contains("server group `web` has no servers"),
        "{}",
        text(&out.stderr)
    );
    // A reload from the file runs what the file says again.
    let out = ctl(&["config", "reload"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let names: Vec<String> = requests().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["s1"]);
    assert!(running.terminate().success());
}

#[test]
fn a_rotated_access_log_is_followed_without_a_signal_and_sigusr1_reopens_it() {
    let adc = AdcFront::start("adc-log");
    let (cfg, admin_url, front) = (adc.cfg.clone(), adc.admin_url.clone(), adc.front);
    std::fs::write(&cfg, adc.config("access_log = \"access.log\"\n")).unwrap();
    let running = run_until_ready(&cfg);
    let log = adc.dir.path().join("access.log");
    let rotated = adc.dir.path().join("access.log.1");
    assert_eq!(status(front, "/healthz?before"), 200);
    wait_logged(&log, "/healthz?before");

    // logrotate's default: the file moved aside, no signal sent.
    std::fs::rename(&log, &rotated).unwrap();
    wait_made(&log);
    assert_eq!(status(front, "/healthz?after"), 200);
    let now = wait_logged(&log, "/healthz?after");
    assert!(!now.contains("?before"), "{now}");
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert!(old.contains("?before") && !old.contains("?after"), "{old}");

    // SIGUSR1 reopens at once, and the process serves on.
    let _ = Command::new("kill")
        .args(["-USR1", &running.0.id().to_string()])
        .status();
    let deadline = SystemClock::now() + Duration::from_secs(20);
    loop {
        let json = headway_ok(&["ctl", "--admin", &admin_url, "adc", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        if v["access_logs"][0]["reopened"] == 2 {
            assert!(
                v["access_logs"][0]["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("access.log")),
                "{json}"
            );
            break;
        }
        assert!(
            SystemClock::now() < deadline,
            "SIGUSR1 never reopened: {json}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status(front, "/healthz?usr1"), 200);
    wait_logged(&log, "/healthz?usr1");
    let table = headway_ok(&["ctl", "--admin", &admin_url, "adc"]);
    assert!(
        table.contains("(combined): 0 line(s) dropped, 0 write error(s), reopened 2 time(s)"),
        "{table}"
    );
    assert_metrics(&admin_url, &["headway_adc_access_log_reopened_total{log="]);
    assert!(running.terminate().success());
}

/// Waits (bounded) until the access log at `path` has a line for a GET of `uri`; its text.
fn wait_logged(path: &Path, uri: &str) -> String {
    let deadline = SystemClock::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(&format!("GET {uri} HTTP/1.1")) {
            return text;
        }
        assert!(
            SystemClock::now() < deadline,
            "{uri} not in {}: {text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (bounded) until a moved or deleted access log at `path` is made again.
fn wait_made(path: &Path) {
    let deadline = SystemClock::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            SystemClock::now() < deadline,
            "{} was never made again",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A command line of `packaging/`'s unit (`Exec…=` value), split into its words.
fn exec_words(unit: &str, key: &str) -> Vec<Vec<String>> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key))
        .map(|v| v.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[test]
fn the_packaged_service_unit_verifies_and_its_logrotate_file_rotates_a_running_log() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let adc = AdcFront::start("packaging");
    std::fs::create_dir(adc.dir.path().join("log")).unwrap();
    std::fs::write(&adc.cfg, adc.config("access_log = \"log/front.log\"\n")).unwrap();
    let cfg = adc.cfg.to_str().unwrap();

    // The unit with its paths pointed at this build and config: systemd's own check of it,
    // and its commands run as written.
    let unit = std::fs::read_to_string(repo.join("packaging/systemd/headway.service"))
        .unwrap()
        .replace("/usr/local/bin/headway", bin())
        .replace("/etc/headway/headway.toml", cfg);
    let unit_path = adc.dir.path().join("headway.service");
    std::fs::write(&unit_path, &unit).unwrap();
    match Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit_path)
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "systemd-analyze verify: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        ),
        Err(e) => eprintln!("skipping systemd-analyze verify (not installed: {e})"),
    }
    let checks: Vec<Vec<String>> = exec_words(&unit, "ExecStartPre=")
        .into_iter()
        .chain(exec_words(&unit, "ExecReload=").into_iter().take(1))
        .collect();
    assert_eq!(checks.len(), 2, "{unit}");
    for argv in checks {
        assert_eq!(argv[..2], [bin(), "check"], "{argv:?}");
        let out = Command::new(&argv[0]).args(&argv[1..]).output().unwrap();
        assert!(out.status.success(), "{argv:?}: {}", text(&out.stderr));
    }
    let start = exec_words(&unit, "ExecStart=").remove(0);
    assert_eq!(start[..4], [bin(), "run", "-c", cfg], "{start:?}");
    let child = Command::new(&start[0])
        .args(&start[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Running(child);
    wait_for_ready(&mut running.0);

    // logrotate with the packaged file, pointed at this log directory: forced, with a state
    // file of its own; no signal is sent.
    let log = adc.dir.path().join("log/front.log");
    assert_eq!(status(adc.front, "/healthz?before"), 200);
    wait_logged(&log, "/healthz?before");
    let conf = std::fs::read_to_string(repo.join("packaging/logrotate/headway"))
        .unwrap()
        .replace(
            "/var/log/headway",
            adc.dir.path().join("log").to_str().unwrap(),
        );
    let conf_path = adc.dir.path().join("logrotate.conf");
    std::fs::write(&conf_path, conf).unwrap();
    match Command::new("logrotate")
        .arg("-f")
        .arg("-s")
        .arg(adc.dir.path().join("logrotate.state"))
        .arg(&conf_path)
        .output()
    {
        Ok(out) => {
            assert!(out.status.success(), "logrotate: {}", text(&out.stderr));
            let rotated = adc.dir.path().join("log/front.log.1");
            assert!(
                std::fs::read_to_string(&rotated)
                    .unwrap()
                    .contains("?before"),
                "delaycompress leaves the moved file as it was"
            );
            wait_made(&log);
            assert_eq!(status(adc.front, "/healthz?after"), 200);
            let now = wait_logged(&log, "/healthz?after");
            assert!(!now.contains("?before"), "{now}");
            assert!(!std::fs::read_to_string(&rotated)
                .unwrap()
                .contains("?after"));
        }
        Err(e) => eprintln!("skipping the logrotate run (not installed: {e})"),
    }
    assert!(running.terminate().success());
}

#[test]
fn adc_cache_is_seen_and_purged_through_ctl_the_admin_api_and_metrics() {
    let adc = AdcFront::start("adc-cache");
    let (cfg, admin_url, front) = (adc.cfg.clone(), adc.admin_url.clone(), adc.front);
    let cache = "\n[cache]\ndefault_group = \"pages\"\n[[cache.group]]\nname = \"pages\"\n";
    std::fs::write(&cfg, adc.config(cache)).unwrap();
    let running = run_until_ready(&cfg);
    let group = |field: &str| -> u64 {
        let json = headway_ok(&["ctl", "--admin", &admin_url, "cache", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v["groups"][0][field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field} in {json}"))
    };
    let url = "/dynamic?max_age=60";
    for _ in 0..3 {
        assert_eq!(status(front, url), 200);
    }
    assert_eq!((group("misses"), group("hits")), (1, 2));
    let table = headway_ok(&["ctl", "--admin", &admin_url, "cache"]);
    assert!(table.contains("pages"), "{table}");
    // Purge the URL through ctl: the next request is a miss again.
    let out = headway_ok(&["ctl", "--admin", &admin_url, "cache", "purge", "--url", url]);
    assert!(out.contains("purged 1 object"), "{out}");
    assert_eq!(status(front, url), 200);
    assert_eq!(group("misses"), 2);
    // A purge naming nothing is refused with one clear line, and nothing changes.
    let out = headway(&["ctl", "--admin", &admin_url, "cache", "purge"]);
    assert!(!out.status.success());
    assert_eq!(group("objects"), 1);
    assert_metrics(
        &admin_url,
        &[
            "headway_adc_cache_hits_total{group=\"pages\"} 2",
            "headway_adc_cache_purged_total{group=\"pages\"} 1",
        ],
    );
    assert!(running.terminate().success());
}

#[test]
fn adc_config_mistakes_exit_64_with_file_line_and_the_fix() {
    let dir = TempDir::new("adc-bad");
    let cfg = dir.path().join("adc.toml");
    let server: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let cases = [
        (
            adc_config(1, 2, server, "").replace("group = \"web\"\n", "group = \"wbe\"\n"),
            "adc.toml:24:9: unknown server group `wbe`",
        ),
        (
            adc_config(1, 2, server, "").replace("kind = \"http\"", "kind = \"htp\""),
            "did you mean `http`",
        ),
        (
            adc_config(1, 2, server, "").replace("kind = \"http\"", "kind = \"https\""),
            "adc.toml:22:8: virtual server `front` is `https` but has no [virtual_server.tls]",
        ),
        (
            adc_config(1, 2, server, "max_headers = 0\n"),
            "max_headers 0 is out of range: use 1 to 1000",
        ),
    ];
    for (text, needle) in cases {
        std::fs::write(&cfg, text).unwrap();
        let out = headway(&["check", "-c", cfg.to_str().unwrap()]);
        assert_usage_error(&out, needle);
        let out = headway(&["run", "-c", cfg.to_str().unwrap()]);
        assert_usage_error(&out, needle);
    }
    // A listen address in use: exit 64 before ready.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    std::fs::write(&cfg, adc_config(free_port(false), port, server, "")).unwrap();
    let out = headway(&["run", "-c", cfg.to_str().unwrap()]);
    assert_usage_error(&out, "cannot listen on 127.0.0.1:");
}

/// A self-signed certificate for `name` with organisation `org`, made by openssl (valid 30 days),
/// as `{stem}.pem` and `{stem}.key` in `dir`.
fn openssl_cert(dir: &Path, stem: &str, name: &str, org: &str) {
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .arg("-keyout")
        .arg(dir.join(format!("{stem}.key")))
        .arg("-out")
        .arg(dir.join(format!("{stem}.pem")))
        .args(["-days", "30", "-subj", &format!("/CN={name}/O={org}")])
        .args(["-addext", &format!("subjectAltName=DNS:{name}")])
        .output()
        .expect("openssl runs (scripts/setup.sh installs it)");
    assert!(out.status.success(), "openssl req: {}", text(&out.stderr));
}

/// The subject line `openssl s_client` prints for `addr` with SNI `name`.
fn served_subject(addr: std::net::SocketAddr, name: &str) -> String {
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            name,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    text(&out.stdout)
        .lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn https_certificates_through_ctl_and_a_refused_reload_keeps_them() {
    let adc = AdcFront::start("adc-tls");
    let (cfg, admin_url, front) = (adc.cfg.clone(), adc.admin_url.clone(), adc.front);
    openssl_cert(adc.dir.path(), "a", "a.example", "First");
    let config = format!(
        "{}\n[virtual_server.tls]\ncertificates = [\"a\"]\n\n\
         [[certificate]]\nname = \"a\"\ncert_file = \"a.pem\"\nkey_file = \"a.key\"\n",
        adc.config("")
            .replace("kind = \"http\"", "kind = \"https\"")
    );
    std::fs::write(&cfg, &config).unwrap();
    let out = headway_ok(&["check", "-c", cfg.to_str().unwrap()]);
    assert!(out.contains("virtual server front (https)"), "{out}");
    assert!(out.contains("certificates a"), "{out}");
    assert!(
        out.contains("certificate a: a.example (ECDSA P-256, issued by CN=a.example, O=First)"),
        "{out}"
    );
    let running = run_until_ready(&cfg);
    let curl = Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "20",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
        ])
        .arg(format!("https://{front}/healthz"))
        .output()
        .expect("curl runs");
    assert_eq!(
        text(&curl.stdout),
        "200 2",
        "curl negotiates HTTP/2 by ALPN"
    );
    assert!(served_subject(front, "a.example").contains("O = First"));

    let table = headway_ok(&["ctl", "--admin", &admin_url, "certs"]);
    for part in [
        "CERTIFICATE",
        "a.example",
        "CN=a.example, O=First",
        "ECDSA P-256",
        "vs front",
    ] {
        assert!(table.contains(part), "`{part}` not in:\n{table}");
    }
    assert!(
        table.contains("in 29 days") || table.contains("in 30 days"),
        "{table}"
    );
    let json = headway_ok(&["ctl", "--admin", &admin_url, "certs", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[0]["dns_names"][0], "a.example");
    assert_eq!(v[0]["virtual_servers"][0], "front");

    // A broken certificate file: the reload is refused with the line that names it, and the
    // running certificate stays.
    let good = std::fs::read_to_string(adc.dir.path().join("a.pem")).unwrap();
    std::fs::write(adc.dir.path().join("a.pem"), "not a certificate\n").unwrap();
    let out = headway(&["ctl", "--admin", &admin_url, "config", "reload"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    let line = config.lines().position(|l| l.contains("a.pem")).unwrap() + 1;
    assert!(
        err.contains(&format!(
            "adc.toml:{line}:13: cannot use the certificate file of certificate `a` in"
        )),
        "{err}"
    );
    assert!(err.contains("a.pem`: it holds no PEM certificate"), "{err}");
    assert!(served_subject(front, "a.example").contains("O = First"));
    std::fs::write(adc.dir.path().join("a.pem"), good).unwrap();

    // A new certificate, applied by SIGHUP, serves new connections.
    openssl_cert(adc.dir.path(), "a", "a.example", "Second");
    let _ = Command::new("kill")
        .args(["-HUP", &running.0.id().to_string()])
        .status();
    let deadline = SystemClock::now() + Duration::from_secs(20);
    while !served_subject(front, "a.example").contains("O = Second") {
        assert!(
            SystemClock::now() < deadline,
            "SIGHUP never swapped the certificate"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let table = headway_ok(&["ctl", "--admin", &admin_url, "certs"]);
    assert!(table.contains("CN=a.example, O=Second"), "{table}");
    assert_metrics(
        &admin_url,
        &[
            "headway_adc_reloads_failed_total 1",
            "headway_adc_tls_handshakes_total{virtual_server=\"front\",kind=\"full\"}",
            "headway_adc_tls_certificate_not_after_seconds{certificate=\"a\"}",
        ],
    );
    assert!(running.terminate().success());
}
