//! Namespace tests of the lab's plumbing: each topology is built with a Linux bridge in its WAN
//! namespaces (no emulator), checked with ping, and torn down; a crashed run's leftovers are
//! cleaned by the next `up`. They need root; without it each test says so and passes vacuously.
//!
//! Every test uses its own namespace prefix (`hwt<pid><tag>-`) and state directory, so tests run
//! in parallel and never touch a lab the user has up (`hw-`).

use std::path::Path;
use std::time::Duration;

use headway_lab::lab::{cleanup, LabState, STATE_FILE};
use headway_lab::netns;
use headway_lab::{Lab, LabOptions, TopologyKind, WanMode};

fn can_run() -> bool {
    if !netns::is_root() {
        eprintln!("skipping: the lab tests need root (CAP_NET_ADMIN)");
        return false;
    }
    true
}

fn prefix(tag: &str) -> String {
    format!("hwt{}{tag}-", std::process::id())
}

fn options(kind: TopologyKind, tag: &str, dir: &Path) -> LabOptions {
    let mut o = LabOptions::new(kind);
    o.wan = WanMode::Bridge;
    o.prefix = prefix(tag);
    o.state_dir = dir.to_path_buf();
    o
}

fn lab_namespaces(prefix: &str) -> Vec<String> {
    netns::namespaces()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// Pings `addr` once from `host`; returns ping's output when it succeeded.
fn ping(lab: &Lab, host: &str, addr: &str) -> Option<String> {
    let out = lab
        .exec(host, &["ping", "-n", "-c", "1", "-W", "3", addr])
        .expect("ping runs (iputils-ping is installed by scripts/setup.sh)");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether new TCP connections in `host` use cubic: the namespace default says so, or (where
/// the kernel refuses that default) every route carries `congctl cubic`.
fn uses_cubic(lab: &Lab, host: &str) -> bool {
    let cc = lab
        .exec(host, &["sysctl", "-n", "net.ipv4.tcp_congestion_control"])
        .unwrap();
    if String::from_utf8_lossy(&cc.stdout).trim() == "cubic" {
        return true;
    }
    let routes = lab.exec(host, &["ip", "-4", "route", "show"]).unwrap();
    let routes = String::from_utf8_lossy(&routes.stdout).into_owned();
    routes.lines().count() > 0 && routes.lines().all(|l| l.contains("congctl cubic"))
}

fn assert_gone(prefix: &str, dir: &Path) {
    assert_eq!(lab_namespaces(prefix), Vec::<String>::new());
    assert!(!dir.join(STATE_FILE).exists());
}

#[test]
fn pair_reaches_the_server_through_the_wan_and_directly() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::up(options(TopologyKind::Pair, "p", dir.path())).unwrap();
    let p = prefix("p");
    assert_eq!(lab_namespaces(&p).len(), 3);
    let a = lab.addresses().clone();
    assert!(ping(&lab, "client", &a.server.to_string()).is_some());
    assert!(ping(&lab, "client", &a.server_direct.unwrap().to_string()).is_some());

    // The state file describes the lab.
    let state = LabState::load(dir.path()).unwrap().unwrap();
    assert_eq!(state.topology, TopologyKind::Pair);
    assert_eq!(state.namespace("wan"), Some(format!("{p}wan").as_str()));

    // Offloads are off on lab interfaces; hosts use cubic, not the host's default.
    let k = lab.exec("client", &["ethtool", "-k", "c-wan"]).unwrap();
    let k = String::from_utf8_lossy(&k.stdout);
    assert!(k.contains("generic-receive-offload: off"), "{k}");
    assert!(k.contains("tcp-segmentation-offload: off"), "{k}");
    for host in ["client", "server"] {
        assert!(uses_cubic(&lab, host), "{host} does not use cubic");
    }

    lab.down().unwrap();
    assert_gone(&p, dir.path());
}

#[test]
fn branch_routes_client_to_server_through_both_appliances() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::up(options(TopologyKind::Branch, "b", dir.path())).unwrap();
    let out = ping(&lab, "client", &lab.server_addr().to_string()).expect("server reachable");
    // Two routers on the way back: the reply's TTL is 64 − 2.
    assert!(out.contains("ttl=62"), "{out}");
    for host in ["client", "branch", "dc", "server"] {
        assert!(uses_cubic(&lab, host), "{host} does not use cubic");
    }
    let fwd = lab
        .exec("branch", &["sysctl", "-n", "net.ipv4.ip_forward"])
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&fwd.stdout).trim(), "1");
    // The LANs keep the kernel's offloads; the interfaces towards the WAN have them off.
    let offloads = |host: &str, ifname: &str| {
        let k = lab.exec(host, &["ethtool", "-k", ifname]).unwrap();
        String::from_utf8_lossy(&k.stdout).into_owned()
    };
    for (host, ifname) in [("branch", "br-c"), ("client", "c-br"), ("dc", "dc-s")] {
        let k = offloads(host, ifname);
        assert!(k.contains("tcp-segmentation-offload: on"), "{ifname}: {k}");
    }
    for (host, ifname) in [("branch", "br-wan"), ("dc", "dc-wan")] {
        let k = offloads(host, ifname);
        assert!(k.contains("tcp-segmentation-offload: off"), "{ifname}: {k}");
        assert!(k.contains("generic-receive-offload: off"), "{ifname}: {k}");
    }
    let p = prefix("b");
    lab.down().unwrap();
    assert_gone(&p, dir.path());
}

#[test]
fn dual_wan_uses_wan1_by_default_and_wan2_is_reachable() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::up(options(TopologyKind::DualWan, "d", dir.path())).unwrap();
    let out = ping(&lab, "client", &lab.server_addr().to_string()).expect("server reachable");
    assert!(out.contains("ttl=62"), "{out}");
    let a = lab.addresses().clone();
    assert_eq!(a.dc_wan.len(), 2);
    assert!(ping(&lab, "branch", &a.dc_wan[1].to_string()).is_some());
    let route = lab
        .exec("branch", &["ip", "route", "get", &a.server.to_string()])
        .unwrap();
    let route = String::from_utf8_lossy(&route.stdout);
    assert!(route.contains(&format!("via {}", a.dc_wan[0])), "{route}");
    let p = prefix("d");
    // Dropping the guard tears down, like `down`.
    drop(lab);
    assert_gone(&p, dir.path());
}

#[test]
fn up_after_a_crash_removes_the_leftovers_and_succeeds() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = prefix("c");
    let first = Lab::up(options(TopologyKind::Pair, "c", dir.path())).unwrap();
    let client_ns = first.namespace("client").unwrap().to_string();
    // A crash: the guard never runs, a stray process keeps living in a namespace.
    let _state = first.detach();
    let mut stray =
        netns::spawn_logged(&client_ns, &["sleep", "600"], &dir.path().join("stray.log")).unwrap();
    let stray_pid = stray.id() as i32;
    assert!(netns::is_alive(stray_pid));
    assert_eq!(lab_namespaces(&p).len(), 3);

    let second = Lab::up(options(TopologyKind::Pair, "c", dir.path())).unwrap();
    // The stray process was stopped (reap it: it is our child).
    let status = stray.wait().unwrap();
    assert!(!status.success());
    assert!(!netns::is_alive(stray_pid));
    assert!(ping(&second, "client", &second.server_addr().to_string()).is_some());
    second.down().unwrap();
    assert_gone(&p, dir.path());
}

#[test]
fn down_succeeds_when_nothing_is_up() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cleaned = cleanup(&prefix("n"), dir.path()).unwrap();
    assert!(cleaned.namespaces.is_empty());
    assert_eq!(cleaned.processes, 0);
    assert!(
        cleanup("", dir.path()).is_err(),
        "an empty prefix would match every namespace"
    );
}

#[test]
fn an_emulator_that_fails_to_start_leaves_nothing_behind() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(TopologyKind::Pair, "f", dir.path());
    // `false emulate …` exits at once without printing `ready`.
    o.wan = WanMode::Emulator {
        binary: "false".into(),
        seed: None,
    };
    o.ready_timeout = Duration::from_secs(30);
    let err = Lab::up(o).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("before it was ready"), "{msg}");
    assert!(msg.contains("emulate --a wan-c --b wan-s"), "{msg}");
    assert_gone(&prefix("f"), dir.path());
}
