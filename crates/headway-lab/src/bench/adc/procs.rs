//! Processes, CPU time, ports and the temp dir of `headway bench adc`.
//!
//! - [`Proc`]: a child process in the host namespace, in its own process group (so Ctrl-C at
//!   the terminal reaches the bench, which then stops it, and not the child directly), its
//!   stdout and stderr in a log file; stopped (SIGTERM to the group, then SIGKILL) on drop;
//! - [`parse_stat`] / [`tree_ticks`] / [`cpu_ticks`]: user + system CPU time of a process and
//!   all its descendants (NGINX's master and workers) from `/proc/PID/stat`, in clock ticks;
//!   [`clock_ticks_per_second`] from `getconf CLK_TCK`;
//! - [`free_ports`]: ports on 127.0.0.1 nobody listens on;
//! - [`TempDir`]: a directory removed on drop.
//!
//! Every wait here is bounded and polls [`crate::interrupt::check`].

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use headway_core::SystemClock;

use crate::{interrupt, netns};

/// A child process, stopped with its process group on drop.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    command: String,
    log: PathBuf,
}

impl Proc {
    /// Starts `argv` with stdin closed and stdout + stderr written to `log` (truncated).
    pub fn spawn(argv: &[String], log: &Path) -> Result<Proc> {
        let (program, args) = argv.split_first().context("no command to run")?;
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        let command = netns::display_command(&refs);
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    anyhow!("`{program}` is not installed: run `bash scripts/setup.sh` (as root)")
                } else {
                    anyhow!("cannot start `{command}`: {e}")
                }
            })?;
        Ok(Proc {
            child,
            command,
            log: log.to_path_buf(),
        })
    }

    /// The process id (also its process group id).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits until the log has a line reading exactly `line` (if given) and every address in
    /// `addrs` accepts a TCP connection; fails if the process exits first or `timeout` passes.
    pub fn wait_ready(
        &mut self,
        line: Option<&str>,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = SystemClock::now() + timeout;
        loop {
            interrupt::check()?;
            if let Some(status) = self.exited() {
                bail!("exited ({status}) before it was ready");
            }
            let said = line.is_none_or(|want| {
                std::fs::read_to_string(&self.log)
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l.trim() == want)
            });
            if said
                && addrs
                    .iter()
                    .all(|a| TcpStream::connect_timeout(a, Duration::from_millis(200)).is_ok())
            {
                return Ok(());
            }
            if SystemClock::now() >= deadline {
                bail!("not ready after {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `timeout` for the process to exit; past it, stops the process and fails.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = SystemClock::now() + timeout;
        loop {
            interrupt::check()?;
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if SystemClock::now() >= deadline {
                self.stop();
                bail!("`{}` did not finish within {timeout:?}", self.command);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The command line, for messages.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The whole log.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the log, on one line (` | ` between lines), for error rows.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let t = crate::lab::tail(text.trim_end(), n);
        if t.trim().is_empty() {
            "(it printed nothing)".into()
        } else {
            t.lines().map(str::trim).collect::<Vec<_>>().join(" | ")
        }
    }

    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = netns::terminate(self.pid(), Duration::from_secs(3));
        }
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One line of `/proc/PID/stat`, the parts the bench needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// The process id.
    pub pid: i32,
    /// Its parent's id.
    pub ppid: i32,
    /// User + system CPU time, clock ticks (all threads).
    pub ticks: u64,
}

/// Parses `/proc/PID/stat`: `pid (comm) state ppid … utime stime …` (proc(5): utime and stime
/// are fields 14 and 15). The command name may hold spaces and parentheses, so the fields after
/// it are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the `)`: state is field 3, so field k is at index k − 3.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(Stat {
        pid,
        ppid,
        ticks: utime + stime,
    })
}

/// The CPU ticks of `root` and all its descendants in `stats`; `None` when `root` is not there.
pub fn tree_ticks(stats: &[Stat], root: i32) -> Option<u64> {
    let mut total = stats.iter().find(|s| s.pid == root)?.ticks;
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for s in stats.iter().filter(|s| s.ppid == parent && s.pid != parent) {
            total += s.ticks;
            frontier.push(s.pid);
        }
    }
    Some(total)
}

/// The CPU ticks of process `root` and its descendants, now.
pub fn cpu_ticks(root: i32) -> Result<u64> {
    let mut stats = Vec::new();
    for entry in std::fs::read_dir("/proc").context("reading /proc")? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // A process may vanish between listing and reading: skip it.
        if let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) {
            stats.extend(parse_stat(&text));
        }
    }
    tree_ticks(&stats, root).ok_or_else(|| anyhow!("process {root} is gone"))
}

/// Clock ticks per second of `/proc/PID/stat` times (`getconf CLK_TCK`).
pub fn clock_ticks_per_second() -> Result<u64> {
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .stdin(Stdio::null())
        .output()
        .context("running `getconf CLK_TCK`")?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.trim().parse::<u64>() {
        Ok(n) if n > 0 && out.status.success() => Ok(n),
        _ => bail!("`getconf CLK_TCK` printed {:?}", text.trim()),
    }
}

/// `n` distinct ports on 127.0.0.1 that nobody listened on a moment ago (the kernel picks
/// them: all are bound at once, so they differ, then released).
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").context("binding a port on 127.0.0.1"))
        .collect::<Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// Addresses on 127.0.0.1 for the processes of one run, handed out one per call: the first
/// `hint` were free a moment ago (see [`free_ports`]); past them, each call asks the kernel for
/// another free port, so a miscount never yields port 0 (which nothing could connect to).
pub fn port_source(hint: usize) -> Result<impl FnMut() -> SocketAddr> {
    let mut ports = free_ports(hint)?.into_iter();
    Ok(move || {
        let port = ports
            .next()
            .or_else(|| free_ports(1).ok().and_then(|v| v.first().copied()))
            .expect("a free port on 127.0.0.1");
        SocketAddr::from(([127, 0, 0, 1], port))
    })
}

/// A directory removed (with its contents) on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/NAME-PID`, replacing a leftover of a crashed run with the same pid.
    pub fn new(name: &str) -> Result<TempDir> {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir(path))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_are_read() {
        let line = "4242 (nginx: worker (x) y) S 4200 4200 4200 0 -1 4194624 1 0 0 0 \
                    150 25 0 0 20 0 1 0 100 1000 10 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                pid: 4242,
                ppid: 4200,
                ticks: 175
            })
        );
        assert_eq!(parse_stat("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn tree_ticks_sum_the_master_and_its_workers_only() {
        let s = |pid, ppid, ticks| Stat { pid, ppid, ticks };
        let stats = [
            s(1, 0, 1000),
            s(10, 1, 5),   // the master
            s(11, 10, 20), // a worker
            s(12, 10, 30), // a worker
            s(13, 12, 1),  // a worker's child
            s(20, 1, 999), // someone else
        ];
        assert_eq!(tree_ticks(&stats, 10), Some(56));
        assert_eq!(tree_ticks(&stats, 20), Some(999));
        assert_eq!(tree_ticks(&stats, 99), None);
    }

    #[test]
    fn this_process_has_cpu_time_and_ticks_per_second_are_known() {
        // Burn a little CPU so the count cannot be zero at 100 Hz.
        let mut x = 0u64;
        let start = SystemClock::now();
        while SystemClock::now() - start < Duration::from_millis(50) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert_ne!(x, 1);
        let me = std::process::id() as i32;
        assert!(cpu_ticks(me).unwrap() > 0);
        assert!(clock_ticks_per_second().unwrap() >= 1);
        assert!(cpu_ticks(i32::MAX).is_err());
    }

    #[test]
    fn free_ports_are_distinct_and_bindable() {
        let ports = free_ports(5).unwrap();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 5);
        assert!(ports.iter().all(|&p| p > 0));
        TcpListener::bind(("127.0.0.1", ports[0])).unwrap();
    }

    #[test]
    fn a_proc_that_exits_early_is_not_ready_and_its_log_is_kept() {
        let dir = TempDir::new("headway-adc-procs-test").unwrap();
        let log = dir.path().join("p.log");
        let argv: Vec<String> = ["sh", "-c", "echo first; echo oops >&2; exit 3"]
            .map(String::from)
            .to_vec();
        let mut p = Proc::spawn(&argv, &log).unwrap();
        let e = p
            .wait_ready(Some("ready"), &[], Duration::from_secs(10))
            .unwrap_err();
        assert!(e.to_string().contains("exited"), "{e}");
        assert_eq!(p.log_tail(5), "first | oops");
        let missing = Proc::spawn(&["headway-no-such-program".to_string()], &log).unwrap_err();
        assert!(missing.to_string().contains("setup.sh"), "{missing}");
    }

    #[test]
    fn a_ready_proc_is_stopped_on_drop() {
        let dir = TempDir::new("headway-adc-procs-test2").unwrap();
        let log = dir.path().join("p.log");
        let argv: Vec<String> = ["sh", "-c", "echo ready; exec sleep 60"]
            .map(String::from)
            .to_vec();
        let mut p = Proc::spawn(&argv, &log).unwrap();
        p.wait_ready(Some("ready"), &[], Duration::from_secs(10))
            .unwrap();
        let pid = p.pid();
        assert!(netns::is_alive(pid));
        drop(p);
        assert!(!netns::is_alive(pid));
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
    }
}
