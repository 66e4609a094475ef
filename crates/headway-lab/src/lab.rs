//! The [`Lab`] guard, its state file, and cleanup of leftovers.
//!
//! This module owns a running lab's life cycle: [`Lab::up`] removes leftovers of any earlier run
//! with the same prefix ([`cleanup`]), builds the topology ([`crate::topology::build`]), starts
//! one `headway emulate` per WAN namespace, waits for each to print `ready`, and writes a
//! [`LabState`] (JSON) to the state directory. Dropping the [`Lab`] (or [`Lab::down`]) stops the
//! emulators and every other process in the lab's namespaces and deletes the namespaces and the
//! state. [`Lab::detach`] leaves everything running (what `headway lab up` does); a later
//! `headway lab down` — or the next `up` — finds it by prefix and state file.
//!
//! Processes started in the lab ([`Lab::spawn`]) are [`Background`] guards that stop their
//! process group on drop.

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use headway_config::LinkSpec;
use headway_core::SystemClock;
use headway_link::Params;
use serde::{Deserialize, Serialize};

use crate::interrupt;
use crate::netns;
use crate::spec::{brief, Dir, LinkSetting};
use crate::topology::{self, Addresses, Plan, TopologyKind, WanFill};

/// The default namespace prefix.
pub const DEFAULT_PREFIX: &str = "hw-";
/// The real-time (SCHED_FIFO) priority of the lab's emulator threads.
pub const EMULATOR_PRIORITY: u8 = 50;

/// The default state directory.
pub const DEFAULT_STATE_DIR: &str = "/run/headway-lab";
/// The state file's name inside the state directory.
pub const STATE_FILE: &str = "state.json";

/// What runs in the WAN namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WanMode {
    /// `BINARY emulate …` (the `headway` binary) bridges each link's two interfaces.
    Emulator {
        /// The `headway` binary.
        binary: PathBuf,
        /// The first link's RNG seed (link `i` gets `seed + i`); `None` lets the emulator pick.
        seed: Option<u64>,
    },
    /// A Linux bridge joins the interfaces (plumbing tests; no emulation, no admin API).
    Bridge,
    /// A Linux bridge, and the lab's interfaces keep the kernel's offloads (GSO/GRO/TSO,
    /// checksums), as production NICs do: the unconstrained link of throughput benchmarks.
    BridgeOffloaded,
}

/// How to bring a lab up.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The topology.
    pub topology: TopologyKind,
    /// What bridges the WAN namespaces.
    pub wan: WanMode,
    /// The initial setting of every emulated link.
    pub link: LinkSetting,
    /// Namespace name prefix; every namespace starting with it belongs to this lab and is removed
    /// by cleanup. Default `hw-`.
    pub prefix: String,
    /// Where the state file and the logs go. Default `/run/headway-lab`.
    pub state_dir: PathBuf,
    /// How long to wait for each emulator's `ready`.
    pub ready_timeout: Duration,
}

impl LabOptions {
    /// Defaults: the emulator from this very binary (`current_exe()`), transparent links,
    /// prefix `hw-`, state in `/run/headway-lab`, 15 s to get ready.
    pub fn new(topology: TopologyKind) -> Self {
        let binary = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("headway"));
        LabOptions {
            topology,
            wan: WanMode::Emulator { binary, seed: None },
            link: LinkSetting::default(),
            prefix: DEFAULT_PREFIX.into(),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            ready_timeout: Duration::from_secs(15),
        }
    }
}

/// One emulated link as recorded in the state file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkState {
    /// The link's name (`wan`, `wan1`, `wan2`).
    pub name: String,
    /// Its WAN namespace.
    pub namespace: String,
    /// Interface facing the client / branch.
    pub a_if: String,
    /// Interface facing the server / DC.
    pub b_if: String,
    /// Admin API port on 127.0.0.1 inside the namespace.
    pub admin_port: u16,
    /// The parameters it was started with, a → b, in [`brief`] form.
    pub a_to_b: String,
    /// The parameters it was started with, b → a, in [`brief`] form.
    pub b_to_a: String,
    /// The emulator's pid, if one was started.
    pub pid: Option<i32>,
    /// The emulator's log file.
    pub log: Option<PathBuf>,
}

/// What a running lab looks like; written as JSON to `STATE_DIR/state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    /// The topology.
    pub topology: TopologyKind,
    /// The namespace prefix.
    pub prefix: String,
    /// Namespace names, by role.
    pub namespaces: Vec<(String, String)>,
    /// Addresses for programs.
    pub addresses: Addresses,
    /// The veth pairs and their addresses.
    pub plan: Plan,
    /// The emulated links.
    pub links: Vec<LinkState>,
    /// The binary that runs the emulators (and `ctl`), if any.
    pub binary: Option<PathBuf>,
}

impl LabState {
    /// Reads the state file in `dir`; `Ok(None)` when there is none.
    pub fn load(dir: &Path) -> Result<Option<LabState>> {
        let path = dir.join(STATE_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                Ok(Some(serde_json::from_str(&text).with_context(|| {
                    format!("reading lab state {}", path.display())
                })?))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading lab state {}", path.display())),
        }
    }

    /// Writes the state file into `dir` (created if needed).
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating lab state directory {}", dir.display()))?;
        let path = dir.join(STATE_FILE);
        let tmp = dir.join(format!("{STATE_FILE}.tmp"));
        std::fs::write(&tmp, serde_json::to_string_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }

    /// The namespace of `role` (`client`, `server`, `wan`, …).
    pub fn namespace(&self, role: &str) -> Option<&str> {
        self.namespaces
            .iter()
            .find(|(r, _)| r == role)
            .map(|(_, n)| n.as_str())
    }

    /// The link called `name`.
    pub fn link(&self, name: &str) -> Option<&LinkState> {
        self.links.iter().find(|l| l.name == name)
    }
}

/// What [`cleanup`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cleaned {
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
    /// Processes stopped.
    pub processes: usize,
}

/// Removes everything a lab with `prefix` may have left behind: the processes recorded in the
/// state file in `state_dir` (only if they still live in a namespace with that prefix — a pid
/// may have been reused), every process inside a namespace whose name starts with `prefix`,
/// those namespaces, and the state file. Succeeds when there is nothing to remove.
pub fn cleanup(prefix: &str, state_dir: &Path) -> Result<Cleaned> {
    anyhow::ensure!(!prefix.is_empty(), "the namespace prefix must not be empty");
    let mut cleaned = Cleaned::default();
    let grace = Duration::from_secs(3);
    if let Ok(Some(state)) = LabState::load(state_dir) {
        for pid in state.links.iter().filter_map(|l| l.pid) {
            if netns::namespace_of(pid).is_some_and(|ns| ns.starts_with(prefix)) {
                netns::terminate(pid, grace)?;
                cleaned.processes += 1;
            }
        }
    }
    for ns in netns::namespaces()?
        .into_iter()
        .filter(|n| n.starts_with(prefix))
    {
        for pid in netns::namespace_pids(&ns)? {
            netns::terminate(pid, grace)?;
            cleaned.processes += 1;
        }
        netns::delete_namespace(&ns)?;
        cleaned.namespaces.push(ns);
    }
    match std::fs::remove_file(state_dir.join(STATE_FILE)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context("removing the lab state file"),
    }
    Ok(cleaned)
}

/// A running lab; dropping it tears everything down.
#[derive(Debug)]
pub struct Lab {
    state: LabState,
    state_dir: PathBuf,
    emulators: Vec<Child>,
    armed: bool,
}

impl Lab {
    /// Cleans leftovers with the same prefix, builds the topology, starts the emulators and
    /// waits until each is ready, and writes the state file.
    ///
    /// On any error (or an interrupt, see [`crate::interrupt`]) everything built so far is
    /// removed before the error is returned.
    pub fn up(opts: LabOptions) -> Result<Lab> {
        if !netns::is_root() {
            bail!("the lab needs root (CAP_NET_ADMIN): run it with sudo");
        }
        opts.link
            .validate()
            .context("checking the initial link setting")?;
        cleanup(&opts.prefix, &opts.state_dir).context("removing leftovers of an earlier lab")?;
        std::fs::create_dir_all(&opts.state_dir).with_context(|| {
            format!("creating lab state directory {}", opts.state_dir.display())
        })?;
        let plan = Plan::new(opts.topology);
        let binary = match &opts.wan {
            WanMode::Emulator { binary, .. } => Some(binary.clone()),
            WanMode::Bridge | WanMode::BridgeOffloaded => None,
        };
        let state = LabState {
            topology: opts.topology,
            prefix: opts.prefix.clone(),
            namespaces: plan
                .roles
                .iter()
                .map(|r| (r.clone(), topology::namespace(&opts.prefix, r)))
                .collect(),
            addresses: plan.addresses.clone(),
            links: plan
                .links
                .iter()
                .map(|l| LinkState {
                    name: l.name.clone(),
                    namespace: topology::namespace(&opts.prefix, &l.role),
                    a_if: l.a_if.clone(),
                    b_if: l.b_if.clone(),
                    admin_port: l.admin_port,
                    a_to_b: brief(&opts.link.a_to_b),
                    b_to_a: brief(&opts.link.b_to_a),
                    pid: None,
                    log: None,
                })
                .collect(),
            plan,
            binary,
        };
        // From here on the guard owns whatever exists and removes it on an early return.
        let mut lab = Lab {
            state,
            state_dir: opts.state_dir.clone(),
            emulators: Vec::new(),
            armed: true,
        };
        lab.state.save(&lab.state_dir)?;
        let fill = match opts.wan {
            WanMode::Emulator { .. } => WanFill::Emulator,
            WanMode::Bridge => WanFill::Bridge,
            WanMode::BridgeOffloaded => WanFill::BridgeOffloaded,
        };
        topology::build(&lab.state.plan, &opts.prefix, fill)
            .with_context(|| format!("building the {} topology", opts.topology.as_str()))?;
        if let WanMode::Emulator { binary, seed } = &opts.wan {
            for i in 0..lab.state.links.len() {
                interrupt::check()?;
                let seed = seed.map(|s| s + i as u64);
                lab.start_emulator(i, binary, &opts.link, seed, opts.ready_timeout)?;
                lab.state.save(&lab.state_dir)?;
            }
        }
        lab.state.save(&lab.state_dir)?;
        Ok(lab)
    }

    fn start_emulator(
        &mut self,
        i: usize,
        binary: &Path,
        setting: &LinkSetting,
        seed: Option<u64>,
        timeout: Duration,
    ) -> Result<()> {
        let link = self.state.links[i].clone();
        let log = self.state_dir.join(format!("emulator-{}.log", link.name));
        // A fresh log per run, so `ready` from an earlier run cannot be mistaken for this one.
        let _ = std::fs::remove_file(&log);
        let bin = binary.to_string_lossy().into_owned();
        let admin = format!("127.0.0.1:{}", link.admin_port);
        let mut argv: Vec<String> = vec![
            bin,
            "emulate".into(),
            "--a".into(),
            link.a_if.clone(),
            "--b".into(),
            link.b_if.clone(),
            "--name".into(),
            link.name.clone(),
            "--admin".into(),
            admin,
            // The lab is a measuring instrument: its emulators release frames at real-time
            // priority so other lab processes (senders, receivers, the build) cannot delay them.
            "--realtime".into(),
            EMULATOR_PRIORITY.to_string(),
        ];
        argv.extend(setting.emulate_args());
        if let Some(s) = seed {
            argv.extend(["--seed".into(), s.to_string()]);
        }
        let argv_ref: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut child = netns::spawn_logged(&link.namespace, &argv_ref, &log)?;
        self.state.links[i].pid = Some(child.id() as i32);
        self.state.links[i].log = Some(log.clone());
        let outcome = wait_for_ready(&mut child, &log, timeout);
        self.emulators.push(child);
        outcome.with_context(|| {
            format!(
                "starting the emulator of link `{}`: {}",
                link.name,
                netns::display_command(&argv_ref)
            )
        })
    }

    /// The lab's state (topology, namespaces, addresses, links).
    pub fn state(&self) -> &LabState {
        &self.state
    }

    /// The addresses programs use.
    pub fn addresses(&self) -> &Addresses {
        &self.state.addresses
    }

    /// The server's address through the WAN.
    pub fn server_addr(&self) -> Ipv4Addr {
        self.state.addresses.server
    }

    /// The server's address on the direct veth (pair topology only).
    pub fn server_direct_addr(&self) -> Option<Ipv4Addr> {
        self.state.addresses.server_direct
    }

    /// The directory of the state file and the logs.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The namespace of `host` (`client`, `server`, `branch`, `dc`, `wan`, …).
    pub fn namespace(&self, host: &str) -> Result<&str> {
        self.state.namespace(host).ok_or_else(|| {
            let known: Vec<_> = self
                .state
                .namespaces
                .iter()
                .map(|(r, _)| r.as_str())
                .collect();
            anyhow!("no host `{host}` in this lab (hosts: {})", known.join(", "))
        })
    }

    /// Runs `cmd` in `host`'s namespace to completion and returns its output.
    pub fn exec(&self, host: &str, cmd: &[&str]) -> Result<Output> {
        anyhow::ensure!(!cmd.is_empty(), "no command to run");
        Ok(netns::exec(self.namespace(host)?, cmd)?)
    }

    /// Starts `cmd` in `host`'s namespace with its stdout piped (read it with
    /// [`Background::wait_line`] / [`Background::finish`]) and its stderr appended to a log in
    /// the state directory. The returned guard stops the process on drop.
    pub fn spawn(&self, host: &str, cmd: &[&str]) -> Result<Background> {
        anyhow::ensure!(!cmd.is_empty(), "no command to run");
        let ns = self.namespace(host)?;
        let program = Path::new(cmd[0])
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let log = self.state_dir.join(format!("{host}-{program}.log"));
        Background::start(ns, cmd, &log)
    }

    /// Replaces link `name`'s parameters in direction(s) `dir` with `params`, live, through its
    /// emulator's admin API (`headway ctl` inside the WAN namespace). The spec sent is the full
    /// `LinkSpec::from(params)`, so nothing set earlier survives; for a partial change send
    /// spec text with [`set_link`].
    pub fn set_link(&self, name: &str, dir: Dir, params: &Params) -> Result<()> {
        params
            .validate()
            .with_context(|| format!("setting link `{name}`"))?;
        set_link(&self.state, name, dir, &LinkSpec::from(params).to_string())
    }

    /// The counters of link `name` as its emulator reports them (`headway ctl links --json`):
    /// `{"a_to_b": {…}, "b_to_a": {…}}`, each direction's frames and bytes received, passed and
    /// lost, queueing and timing summaries.
    pub fn link_stats(&self, name: &str) -> Result<serde_json::Value> {
        let (link, binary) = emulated_link(&self.state, name, "no link counters")?;
        let out = ctl(binary, link, &["links", "--json"])?;
        if !out.status.success() {
            bail!(
                "reading link `{name}`'s counters failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("link `{name}`'s counters are not JSON"))?;
        v["links"]
            .as_array()
            .and_then(|links| links.iter().find(|l| l["name"] == name))
            .map(|l| l["stats"].clone())
            .ok_or_else(|| anyhow!("link `{name}`'s emulator does not report it"))
    }

    /// Tears the lab down now, reporting errors (dropping it does the same, silently).
    pub fn down(mut self) -> Result<()> {
        self.armed = false;
        self.teardown()
    }

    /// Leaves the lab running and returns its state; `headway lab down` or the next `up`
    /// removes it.
    pub fn detach(mut self) -> LabState {
        self.armed = false;
        self.state.clone()
    }

    fn teardown(&mut self) -> Result<()> {
        for child in &mut self.emulators {
            let _ = netns::terminate(child.id() as i32, Duration::from_secs(3));
            let _ = child.wait();
        }
        self.emulators.clear();
        cleanup(&self.state.prefix, &self.state_dir).map(drop)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            if let Err(e) = self.teardown() {
                eprintln!("warning: lab teardown failed: {e:#}");
            }
        }
    }
}

/// Polls `log` until a line reads `ready`, the child exits, or `timeout` passes.
fn wait_for_ready(child: &mut Child, log: &Path, timeout: Duration) -> Result<()> {
    let deadline = SystemClock::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.lines().any(|l| l.trim() == "ready") {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "it exited ({status}) before it was ready; its log says:\n{}",
                tail(&text, 20)
            );
        }
        interrupt::check()?;
        if SystemClock::now() >= deadline {
            bail!(
                "it was not ready after {timeout:?}; its log says:\n{}",
                tail(&text, 20)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<_> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `headway ctl --admin http://127.0.0.1:PORT link set NAME --dir DIR SPEC` in the link's
/// WAN namespace. `spec` is [`LinkSpec`] text and partial: keys it does not name stay as they are.
pub fn set_link(state: &LabState, name: &str, dir: Dir, spec: &str) -> Result<()> {
    let (link, binary) = emulated_link(state, name, "links cannot be set")?;
    let out = ctl(
        binary,
        link,
        &["link", "set", name, "--dir", dir.as_str(), spec],
    )?;
    if !out.status.success() {
        bail!(
            "setting link `{name}` failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(())
}

/// Link `name` of the lab and the binary its emulator runs; `bridge_mode` says what cannot be
/// done when the lab runs no emulator.
fn emulated_link<'a>(
    state: &'a LabState,
    name: &str,
    bridge_mode: &str,
) -> Result<(&'a LinkState, &'a Path)> {
    let link = state.link(name).ok_or_else(|| {
        let names: Vec<_> = state.links.iter().map(|l| l.name.as_str()).collect();
        anyhow!("no link `{name}` in this lab (links: {})", names.join(", "))
    })?;
    let binary = state
        .binary
        .as_deref()
        .ok_or_else(|| anyhow!("this lab runs no emulator (bridge mode): {bridge_mode}"))?;
    Ok((link, binary))
}

/// Runs `BINARY ctl --admin URL ARGS…` in `link`'s namespace.
pub fn ctl(binary: &Path, link: &LinkState, args: &[&str]) -> Result<Output> {
    let bin = binary.to_string_lossy();
    let url = format!("http://127.0.0.1:{}", link.admin_port);
    let mut argv = vec![bin.as_ref(), "ctl", "--admin", &url];
    argv.extend_from_slice(args);
    Ok(netns::exec(&link.namespace, &argv)?)
}

/// A process running in a lab namespace; stopped (its whole process group) on drop.
///
/// Its stdout is read line by line by a helper thread, so reads can have deadlines.
#[derive(Debug)]
pub struct Background {
    child: Child,
    lines: mpsc::Receiver<String>,
    command: String,
    log: PathBuf,
}

impl Background {
    /// Starts `argv` in namespace `ns`, stdout piped, stderr appended to `log`.
    pub fn start(ns: &str, argv: &[&str], log: &Path) -> Result<Background> {
        let stderr = netns::open_log(log)?;
        let mut cmd = netns::command_in(ns, argv);
        cmd.stdout(Stdio::piped()).stderr(stderr);
        let command = format!("ip netns exec {ns} {}", netns::display_command(argv));
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting `{command}`"))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Background {
            child,
            lines: rx,
            command,
            log: log.to_path_buf(),
        })
    }

    /// The process id (also its process group id).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits until a stdout line satisfies `pred`, returning it; fails if the process exits
    /// first or `timeout` passes.
    pub fn wait_line(&mut self, timeout: Duration, pred: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = SystemClock::now() + timeout;
        loop {
            interrupt::check()?;
            let now = SystemClock::now();
            if now >= deadline {
                bail!(
                    "`{}` printed no expected line within {timeout:?}{}",
                    self.command,
                    self.log_tail()
                );
            }
            let step = (deadline - now).min(Duration::from_millis(100));
            match self.lines.recv_timeout(step) {
                Ok(line) if pred(&line) => return Ok(line),
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait()?;
                    bail!(
                        "`{}` exited ({status}) before printing the expected line{}",
                        self.command,
                        self.log_tail()
                    );
                }
            }
        }
    }

    /// Waits up to `timeout` for the process to exit and returns its status and every stdout
    /// line not yet consumed by [`Background::wait_line`]. A process still running at the
    /// deadline is stopped and reported as an error.
    pub fn finish(mut self, timeout: Duration) -> Result<(ExitStatus, Vec<String>)> {
        let deadline = SystemClock::now() + timeout;
        let mut lines = Vec::new();
        loop {
            interrupt::check()?;
            let now = SystemClock::now();
            if now >= deadline {
                bail!(
                    "`{}` did not finish within {timeout:?}{}",
                    self.command,
                    self.log_tail()
                );
            }
            match self
                .lines
                .recv_timeout((deadline - now).min(Duration::from_millis(100)))
            {
                Ok(line) => lines.push(line),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait()?;
                    return Ok((status, lines));
                }
            }
        }
    }

    /// Stops the process now (SIGTERM to its group, then SIGKILL) and reaps it.
    pub fn stop(mut self) -> Result<()> {
        self.kill()
    }

    fn kill(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_none() {
            netns::terminate(self.pid(), Duration::from_secs(2))?;
        }
        self.child.wait()?;
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let t = tail(&text, 10);
        if t.is_empty() {
            String::new()
        } else {
            format!("; its stderr ({}) ends with:\n{t}", self.log.display())
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
