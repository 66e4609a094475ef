//! A throw-away client — wan — server topology of network namespaces, shared by the
//! integration test and the measuring example (included with `#[path]`).
//!
//! ```text
//!  ns {prefix}-c: c0 10.77.0.1/24 ══veth══ wa  ns {prefix}-w  wb ══veth══ s0 10.77.0.2/24 :ns {prefix}-s
//! ```
//!
//! The interfaces of the wan namespace have no addresses; IPv6 is off everywhere so nothing but
//! the test's own traffic crosses the bridge; TSO, GSO, GRO and tx checksum offload are off on
//! c0 and s0 so the bridge sees complete ≤ MTU frames. Dropping the [`Topology`] deletes the
//! namespaces (and with them the veth pairs), also when a test panics.
#![allow(dead_code)]

use std::io;
use std::process::{Command, Output};

/// Client address.
pub const CLIENT_IP: &str = "10.77.0.1";
/// Server address.
pub const SERVER_IP: &str = "10.77.0.2";

/// Whether this process may create namespaces and raw sockets.
pub fn is_root() -> bool {
    // Reading /proc avoids an unsafe geteuid() in a forbid(unsafe_code) crate.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Runs a command; an error carries its stderr.
pub fn run(program: &str, args: &[&str]) -> io::Result<Output> {
    let out = Command::new(program).args(args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}

/// The three namespaces; deleted on drop.
#[derive(Debug)]
pub struct Topology {
    /// Client namespace (interface `c0`).
    pub client: String,
    /// Middle namespace (interfaces `wa` towards the client, `wb` towards the server).
    pub wan: String,
    /// Server namespace (interface `s0`).
    pub server: String,
}

impl Topology {
    /// Builds the topology; namespace names are `hwt-emu-<pid>-<tag>-{c,w,s}`.
    pub fn new(tag: &str) -> io::Result<Topology> {
        let prefix = format!("hwt-emu-{}-{tag}", std::process::id());
        let t = Topology {
            client: format!("{prefix}-c"),
            wan: format!("{prefix}-w"),
            server: format!("{prefix}-s"),
        };
        // From here on, Drop cleans up whatever part was made.
        for ns in [&t.client, &t.wan, &t.server] {
            run("ip", &["netns", "add", ns])?;
            for key in ["all", "default"] {
                run(
                    "ip",
                    &[
                        "netns",
                        "exec",
                        ns,
                        "sysctl",
                        "-qw",
                        &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
                    ],
                )?;
            }
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        run(
            "ip",
            &[
                "-n", &t.client, "link", "add", "c0", "type", "veth", "peer", "name", "wa",
                "netns", &t.wan,
            ],
        )?;
        run(
            "ip",
            &[
                "-n", &t.server, "link", "add", "s0", "type", "veth", "peer", "name", "wb",
                "netns", &t.wan,
            ],
        )?;
        run(
            "ip",
            &[
                "-n",
                &t.client,
                "addr",
                "add",
                &format!("{CLIENT_IP}/24"),
                "dev",
                "c0",
            ],
        )?;
        run(
            "ip",
            &[
                "-n",
                &t.server,
                "addr",
                "add",
                &format!("{SERVER_IP}/24"),
                "dev",
                "s0",
            ],
        )?;
        for (ns, dev) in [(&t.client, "c0"), (&t.server, "s0")] {
            let after =
                in_netns(ns, || headway_io::offload::disable(dev)).map_err(io::Error::other)?;
            if !after.all_off() {
                return Err(io::Error::other(format!(
                    "offloads stay on for {dev}: {after:?}"
                )));
            }
            run("ip", &["-n", ns, "link", "set", dev, "up"])?;
        }
        for dev in ["wa", "wb"] {
            run("ip", &["-n", &t.wan, "link", "set", dev, "up"])?;
        }
        Ok(t)
    }

    /// Pins each end's neighbour entry for the other, so no ARP crosses the bridge afterwards.
    pub fn pin_neighbours(&self) -> io::Result<()> {
        let mac = |ns: &str, dev: &str| -> io::Result<String> {
            let out = run("ip", &["-n", ns, "-br", "link", "show", dev])?;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            text.split_whitespace()
                .nth(2)
                .map(str::to_owned)
                .ok_or_else(|| io::Error::other(format!("no MAC in {text:?}")))
        };
        let (cmac, smac) = (mac(&self.client, "c0")?, mac(&self.server, "s0")?);
        run(
            "ip",
            &[
                "-n",
                &self.client,
                "neigh",
                "replace",
                SERVER_IP,
                "lladdr",
                &smac,
                "dev",
                "c0",
                "nud",
                "permanent",
            ],
        )?;
        run(
            "ip",
            &[
                "-n",
                &self.server,
                "neigh",
                "replace",
                CLIENT_IP,
                "lladdr",
                &cmac,
                "dev",
                "s0",
                "nud",
                "permanent",
            ],
        )?;
        Ok(())
    }

    /// `ip netns exec NS program args...` as a command to run or spawn.
    pub fn exec(&self, ns: &str, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]).args(args);
        c
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.client, &self.wan, &self.server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Runs `f` on a thread that has entered network namespace `ns`; sockets `f` creates belong to
/// that namespace for life.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let _guard = headway_io::NetnsGuard::enter(ns).expect("enter namespace");
            f()
        })
        .join()
        .expect("namespace thread panicked")
    })
}
