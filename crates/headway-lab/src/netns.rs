//! Network-namespace plumbing through iproute2, ethtool and sysctl.
//!
//! This module owns every external command the lab runs to shape the host: it runs `ip`
//! (iproute2), `ethtool` and `sysctl` with [`std::process::Command`], and turns failures into
//! [`NetnsError`]s that name the failing command and quote its stderr. It also starts processes
//! inside a namespace (`ip netns exec NS …`, each in its own process group) and stops them.
//!
//! It does not decide names or addresses (that is [`crate::topology`]) and keeps no state.
//! Every function is blocking; none installs signal handlers.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use headway_core::SystemClock;
use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// Why a plumbing command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetnsError {
    /// The command was refused for lack of privileges.
    #[error("the lab needs root (CAP_NET_ADMIN): run it with sudo (`{command}`: {stderr})")]
    NotRoot {
        /// The command line that was refused.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The program is not installed.
    #[error("`{program}` is not installed or not on PATH (scripts/setup.sh installs it)")]
    Missing {
        /// The program that was not found.
        program: String,
    },
    /// The program could not be started.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// The command ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },
    /// A log file could not be opened.
    #[error("cannot open log file {path}: {source}")]
    Log {
        /// The log file.
        path: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// Sending a signal failed for a reason other than "no such process".
    #[error("cannot signal process {pid}: {source}")]
    Signal {
        /// The target process.
        pid: i32,
        /// The error.
        source: Errno,
    },
}

/// Renders an argument vector as a shell-like command line for messages.
pub fn display_command(argv: &[&str]) -> String {
    argv.iter()
        .map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("'{a}'")
            } else {
                (*a).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `argv` to completion and returns its stdout; a non-zero exit is an error.
pub fn run(argv: &[&str]) -> Result<String, NetnsError> {
    let out = output(argv)?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(failure(argv, &out))
}

/// Runs `argv` to completion and returns its output whatever its exit status.
pub fn output(argv: &[&str]) -> Result<Output, NetnsError> {
    let (program, args) = argv.split_first().expect("argv is never empty");
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| spawn_error(argv, e))
}

fn spawn_error(argv: &[&str], e: io::Error) -> NetnsError {
    if e.kind() == io::ErrorKind::NotFound {
        NetnsError::Missing {
            program: argv[0].to_string(),
        }
    } else {
        NetnsError::Spawn {
            command: display_command(argv),
            source: e,
        }
    }
}

/// The error for a command that exited unsuccessfully with `out`.
fn failure(argv: &[&str], out: &Output) -> NetnsError {
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let command = display_command(argv);
    let denied = stderr.contains("Operation not permitted")
        || stderr.contains("Permission denied")
        || stderr.contains("must be root");
    if denied && !nix::unistd::geteuid().is_root() {
        return NetnsError::NotRoot { command, stderr };
    }
    NetnsError::Failed {
        command,
        status: out.status.to_string(),
        stderr,
    }
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Runs `ip ARGS…` in the root namespace.
pub fn ip(args: &[&str]) -> Result<String, NetnsError> {
    let mut argv = vec!["ip"];
    argv.extend_from_slice(args);
    run(&argv)
}

/// Runs `ip -n NS ARGS…`: an `ip` command acting inside namespace `ns`.
pub fn ip_in(ns: &str, args: &[&str]) -> Result<String, NetnsError> {
    let mut argv = vec!["ip", "-n", ns];
    argv.extend_from_slice(args);
    run(&argv)
}

/// The names of all named network namespaces (`ip netns list`).
pub fn namespaces() -> Result<Vec<String>, NetnsError> {
    let out = ip(&["netns", "list"])?;
    Ok(parse_netns_list(&out))
}

/// Parses `ip netns list` output (`name (id: 3)` or `name` per line) into names.
pub fn parse_netns_list(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Creates namespace `ns` and sets its loopback up.
pub fn add_namespace(ns: &str) -> Result<(), NetnsError> {
    ip(&["netns", "add", ns])?;
    ip_in(ns, &["link", "set", "lo", "up"])?;
    Ok(())
}

/// Deletes namespace `ns`; a namespace that does not exist is not an error.
pub fn delete_namespace(ns: &str) -> Result<(), NetnsError> {
    match ip(&["netns", "del", ns]) {
        Ok(_) => Ok(()),
        Err(NetnsError::Failed { stderr, .. }) if stderr.contains("No such file") => Ok(()),
        Err(e) => Err(e),
    }
}

/// The pids of the processes inside namespace `ns` (`ip netns pids`).
pub fn namespace_pids(ns: &str) -> Result<Vec<i32>, NetnsError> {
    let out = ip(&["netns", "pids", ns])?;
    Ok(out
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// The namespace process `pid` lives in (`ip netns identify`), if it is a named one.
pub fn namespace_of(pid: i32) -> Option<String> {
    let out = ip(&["netns", "identify", &pid.to_string()]).ok()?;
    let name = out.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// Creates a veth pair: `if_a` in namespace `ns_a`, `if_b` in `ns_b`; MTU 1500, both up.
pub fn add_veth(ns_a: &str, if_a: &str, ns_b: &str, if_b: &str) -> Result<(), NetnsError> {
    ip_in(
        ns_a,
        &[
            "link", "add", if_a, "type", "veth", "peer", "name", if_b, "netns", ns_b,
        ],
    )?;
    for (ns, ifname) in [(ns_a, if_a), (ns_b, if_b)] {
        ip_in(ns, &["link", "set", "dev", ifname, "mtu", "1500"])?;
    }
    Ok(())
}

/// Sets interface `ifname` in `ns` up.
pub fn link_up(ns: &str, ifname: &str) -> Result<(), NetnsError> {
    ip_in(ns, &["link", "set", "dev", ifname, "up"]).map(drop)
}

/// Adds address `cidr` (e.g. `198.18.0.1/24`) to `ifname` in `ns`.
pub fn add_address(ns: &str, ifname: &str, cidr: &str) -> Result<(), NetnsError> {
    ip_in(ns, &["addr", "add", cidr, "dev", ifname]).map(drop)
}

/// Adds a route to `dest` (a prefix or `default`) via gateway `via` in `ns`.
pub fn add_route(ns: &str, dest: &str, via: &str) -> Result<(), NetnsError> {
    ip_in(ns, &["route", "add", dest, "via", via]).map(drop)
}

/// Sets TCP congestion control `algo` on every IPv4 route of `ns` (`ip route replace ROUTE
/// congctl ALGO`): connections over a route use its algorithm whatever the namespace default.
pub fn set_route_congestion_control(ns: &str, algo: &str) -> Result<(), NetnsError> {
    let routes = ip_in(ns, &["-4", "route", "show"])?;
    for line in routes.lines().filter(|l| !l.trim().is_empty()) {
        let mut args = vec!["route", "replace"];
        args.extend(line.split_whitespace().filter(|w| *w != "linkdown"));
        if args.contains(&"congctl") {
            continue;
        }
        args.extend(["congctl", algo]);
        ip_in(ns, &args)?;
    }
    Ok(())
}

/// Runs `sysctl -qw KEY=VALUE…` inside `ns`.
pub fn sysctl(ns: &str, settings: &[(&str, &str)]) -> Result<(), NetnsError> {
    let pairs: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut argv = vec!["ip", "netns", "exec", ns, "sysctl", "-qw"];
    argv.extend(pairs.iter().map(String::as_str));
    run(&argv).map(drop)
}

/// The offloads the lab turns off on every interface whose frames an emulator reads (the
/// WAN side of each host and appliance; LANs keep theirs), so frames are real packets (GRO would
/// merge them, TSO/GSO would hand the emulator 64 KB "frames"), and finished ones: with transmit
/// checksum offload (`tx`) a veth leaves TCP/UDP checksums to be completed "by the hardware"
/// (CHECKSUM_PARTIAL), which never happens to a frame copied through AF_PACKET, so the receiver
/// would drop every TCP and UDP frame that crossed the emulator.
pub const OFFLOADS: [&str; 5] = ["tso", "gso", "gro", "lro", "tx"];

/// Turns every [`OFFLOADS`] feature off on `ifname` in `ns`, one `ethtool -K` per feature, so a
/// feature the driver does not support (or has fixed) is skipped instead of failing the rest.
pub fn disable_offloads(ns: &str, ifname: &str) -> Result<(), NetnsError> {
    for feature in OFFLOADS {
        let argv = [
            "ip", "netns", "exec", ns, "ethtool", "-K", ifname, feature, "off",
        ];
        let out = output(&argv)?;
        if out.status.success() {
            continue;
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        if offload_refusal_is_benign(&stderr) {
            continue;
        }
        return Err(failure(&argv, &out));
    }
    Ok(())
}

/// Whether ethtool's complaint only says this feature cannot be changed on this device.
pub fn offload_refusal_is_benign(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    s.contains("not supported")
        || s.contains("could not change")
        || s.contains("cannot change")
        || s.contains("fixed")
}

/// A command that runs `argv` inside namespace `ns` (`ip netns exec NS ARGV…`), in its own
/// process group (so a Ctrl-C at the terminal reaches the lab, which then stops it, and not the
/// child directly), with stdin closed.
pub fn command_in(ns: &str, argv: &[&str]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]).args(argv);
    cmd.stdin(Stdio::null()).process_group(0);
    cmd
}

/// Runs `argv` inside `ns` to completion, capturing its output (the exit status is the
/// caller's to judge).
pub fn exec(ns: &str, argv: &[&str]) -> Result<Output, NetnsError> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .args(argv)
        .stdin(Stdio::null());
    cmd.output().map_err(|e| spawn_error(&["ip"], e))
}

/// Starts `argv` inside `ns` in the background, its stdout and stderr appended to `log`.
///
/// The process is its own process-group leader (its pgid is its pid, which is also the pid of
/// the final program since `ip netns exec` execs it), so [`terminate`] can stop it and its
/// children. It outlives this process unless stopped.
pub fn spawn_logged(ns: &str, argv: &[&str], log: &Path) -> Result<Child, NetnsError> {
    let file = open_log(log)?;
    let file2 = file.try_clone().map_err(|e| NetnsError::Log {
        path: log.display().to_string(),
        source: e,
    })?;
    let mut cmd = command_in(ns, argv);
    cmd.stdout(file).stderr(file2);
    let mut full = vec!["ip", "netns", "exec", ns];
    full.extend_from_slice(argv);
    cmd.spawn().map_err(|e| spawn_error(&full, e))
}

/// Opens `path` for appending, creating it.
pub fn open_log(path: &Path) -> Result<File, NetnsError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| NetnsError::Log {
            path: path.display().to_string(),
            source: e,
        })
}

/// Whether process `pid` still exists (a zombie counts as gone).
pub fn is_alive(pid: i32) -> bool {
    match kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => false,
        _ => !is_zombie(pid),
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Stops process `pid` and its process group: SIGTERM, up to `grace` for it to exit, then
/// SIGKILL. Returns once the process is gone (or a bounded wait after SIGKILL has passed). A
/// process that does not exist is not an error.
///
/// If the process is this process's child, the caller should still `wait()` on its [`Child`]
/// afterwards to reap it.
pub fn terminate(pid: i32, grace: Duration) -> Result<(), NetnsError> {
    if pid <= 1 {
        return Ok(());
    }
    signal(pid, Signal::SIGTERM)?;
    if wait_gone(pid, grace) {
        return Ok(());
    }
    signal(pid, Signal::SIGKILL)?;
    wait_gone(pid, Duration::from_secs(2));
    Ok(())
}

/// Sends `sig` to the process group led by `pid` and to `pid` itself.
fn signal(pid: i32, sig: Signal) -> Result<(), NetnsError> {
    let p = Pid::from_raw(pid);
    // The group may not exist when `pid` is not a group leader; then signal the process alone.
    let _ = killpg(p, sig);
    match kill(p, sig) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(e) => Err(NetnsError::Signal { pid, source: e }),
    }
}

/// Polls until `pid` is gone or `limit` has passed; true when it is gone.
fn wait_gone(pid: i32, limit: Duration) -> bool {
    let deadline = SystemClock::now() + limit;
    loop {
        if !is_alive(pid) {
            return true;
        }
        if SystemClock::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netns_list_parsing_takes_the_first_word() {
        let out = "hw-client (id: 2)\nhw-wan (id: 1)\nother\n\n";
        assert_eq!(parse_netns_list(out), ["hw-client", "hw-wan", "other"]);
    }

    #[test]
    fn commands_are_displayed_with_quotes_where_needed() {
        assert_eq!(display_command(&["ip", "a b", ""]), "ip 'a b' ''");
    }

    #[test]
    fn ethtool_fixed_features_are_tolerated_but_real_errors_are_not() {
        assert!(offload_refusal_is_benign(
            "Cannot change large-receive-offload"
        ));
        assert!(offload_refusal_is_benign(
            "Could not change any device features"
        ));
        assert!(!offload_refusal_is_benign("netlink error: No such device"));
    }

    #[test]
    fn a_missing_program_is_reported_by_name() {
        let e = run(&["headway-no-such-program-xyz"]).unwrap_err();
        assert!(
            matches!(e, NetnsError::Missing { ref program } if program == "headway-no-such-program-xyz")
        );
    }

    #[test]
    fn a_failing_command_names_itself_and_its_stderr() {
        let e = run(&["sh", "-c", "echo oops >&2; exit 3"]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("sh -c"), "{msg}");
        assert!(msg.contains("oops"), "{msg}");
    }
}
