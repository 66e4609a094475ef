//! CPU utilisation for the compression bypass: one sampler per process, and [`Gate`]s that
//! engage and release with hysteresis.
//!
//! The sampler is a thread (`headway-cpu`) started the first time a gate is asked for; every
//! [`INTERVAL`] it reads `/proc/stat` (the machine's busy and total CPU time) and
//! `/proc/self/stat` (this process's CPU time), turns the differences into utilisations, and
//! updates every live gate. A gate is shared by every virtual server with the same thresholds
//! and source, and survives reloads while one holds it, so its state carries over. Reading a
//! gate on the request path is one atomic load.
//!
//! The sampler thread lives as long as the process; it costs two small file reads four times a
//! second. The arithmetic ([`Times`], [`Times::utilisation`], [`next_engaged`]) is pure and
//! tested on its own.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use headway_config::compress::{CpuBypass, CpuSource};
use parking_lot::Mutex;

/// Time between two samples.
pub const INTERVAL: Duration = Duration::from_millis(250);

/// Utilisation is kept in parts per million.
const PPM: f64 = 1e6;

/// CPU times from `/proc`, in clock ticks (`USER_HZ`; the unit cancels out in the ratios).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Times {
    /// All CPUs' time, busy or not (`/proc/stat`'s `cpu` line, guest time excluded as it is
    /// counted in user time already).
    pub total: u64,
    /// All CPUs' busy time (total less idle and iowait).
    pub busy: u64,
    /// This process's user and system time (`/proc/self/stat` fields 14 and 15).
    pub process: u64,
}

impl Times {
    /// Reads the `cpu` line of `/proc/stat`: `cpu user nice system idle iowait irq softirq
    /// steal guest guest_nice`.
    pub fn parse_system(proc_stat: &str) -> Option<(u64, u64)> {
        let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        if v.len() < 4 {
            return None;
        }
        let total: u64 = v.iter().take(8).sum();
        let idle = v[3] + v.get(4).copied().unwrap_or(0);
        Some((total, total.saturating_sub(idle)))
    }

    /// Reads `utime + stime` from `/proc/self/stat` (after the command name, which may hold
    /// spaces and parentheses, so the fields are counted from its last `)`).
    pub fn parse_process(self_stat: &str) -> Option<u64> {
        let rest = &self_stat[self_stat.rfind(')')? + 1..];
        let mut f = rest.split_whitespace();
        // `rest` starts at field 3 (state); utime and stime are fields 14 and 15.
        let utime: u64 = f.nth(11)?.parse().ok()?;
        let stime: u64 = f.next()?.parse().ok()?;
        Some(utime + stime)
    }

    /// Reads both files now.
    fn read() -> Option<Times> {
        let (total, busy) = Times::parse_system(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let process = Times::parse_process(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        Some(Times {
            total,
            busy,
            process,
        })
    }

    /// The utilisation of `source` (0–1) between `earlier` and `self`; `None` when no CPU time
    /// passed.
    pub fn utilisation(&self, earlier: &Times, source: CpuSource) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total).filter(|t| *t > 0)?;
        let used = match source {
            CpuSource::System => self.busy.saturating_sub(earlier.busy),
            CpuSource::Process => self.process.saturating_sub(earlier.process),
        };
        Some((used as f64 / total as f64).min(1.0))
    }
}

/// The hysteresis: engaged at or above `engage`, released below `release`, unchanged between.
pub fn next_engaged(engaged: bool, utilisation: f64, b: &CpuBypass) -> bool {
    if engaged {
        utilisation >= b.release
    } else {
        utilisation >= b.engage
    }
}

/// One bypass setting's state, updated by the sampler.
#[derive(Debug)]
pub struct Gate {
    bypass: CpuBypass,
    engaged: AtomicBool,
    /// The last utilisation of `bypass.source`, parts per million.
    utilisation: AtomicU32,
    /// Times the bypass engaged.
    engagements: AtomicU64,
}

impl Gate {
    fn new(bypass: CpuBypass) -> Gate {
        Gate {
            bypass,
            engaged: AtomicBool::new(false),
            utilisation: AtomicU32::new(0),
            engagements: AtomicU64::new(0),
        }
    }

    /// Whether new responses go uncompressed now.
    #[inline]
    pub fn engaged(&self) -> bool {
        self.engaged.load(Relaxed)
    }

    /// The last sampled utilisation of the gate's source, 0–1.
    pub fn utilisation(&self) -> f64 {
        f64::from(self.utilisation.load(Relaxed)) / PPM
    }

    /// Times the bypass engaged since the gate was made.
    pub fn engagements(&self) -> u64 {
        self.engagements.load(Relaxed)
    }

    /// The thresholds and source.
    pub fn bypass(&self) -> &CpuBypass {
        &self.bypass
    }

    fn update(&self, utilisation: f64) {
        self.utilisation
            .store((utilisation * PPM).round() as u32, Relaxed);
        let was = self.engaged();
        let now = next_engaged(was, utilisation, &self.bypass);
        if now != was {
            self.engaged.store(now, Relaxed);
            if now {
                self.engagements.fetch_add(1, Relaxed);
            }
            tracing::info!(
                source = self.bypass.source.as_str(),
                utilisation = format!("{:.0}%", utilisation * 100.0),
                engage = format!("{:.0}%", self.bypass.engage * 100.0),
                release = format!("{:.0}%", self.bypass.release * 100.0),
                "compression bypass {}",
                if now { "engaged" } else { "released" }
            );
        }
    }
}

/// The process's sampler: the gates it updates.
#[derive(Default)]
struct Sampler {
    gates: Mutex<Vec<Weak<Gate>>>,
}

static SAMPLER: OnceLock<Arc<Sampler>> = OnceLock::new();

/// The gate for `bypass`: the live one with the same thresholds and source, or a new one.
/// Starts the sampler thread on first use.
pub fn gate(bypass: CpuBypass) -> Arc<Gate> {
    let sampler = SAMPLER.get_or_init(|| {
        let s = Arc::new(Sampler::default());
        let weak = Arc::downgrade(&s);
        let spawned = std::thread::Builder::new()
            .name("headway-cpu".into())
            .spawn(move || sample_forever(&weak));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the CPU sampler; the compression bypass will not engage");
        }
        s
    });
    let mut gates = sampler.gates.lock();
    gates.retain(|g| g.strong_count() > 0);
    if let Some(g) = gates
        .iter()
        .filter_map(Weak::upgrade)
        .find(|g| g.bypass == bypass)
    {
        return g;
    }
    let g = Arc::new(Gate::new(bypass));
    gates.push(Arc::downgrade(&g));
    g
}

fn sample_forever(sampler: &Weak<Sampler>) {
    let Some(mut last) = Times::read() else {
        tracing::warn!(
            "cannot read /proc/stat or /proc/self/stat; the compression bypass will not engage"
        );
        return;
    };
    loop {
        std::thread::sleep(INTERVAL);
        let Some(sampler) = sampler.upgrade() else {
            return;
        };
        let Some(now) = Times::read() else {
            continue;
        };
        let gates: Vec<Arc<Gate>> = sampler
            .gates
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for g in gates {
            if let Some(u) = now.utilisation(&last, g.bypass.source) {
                g.update(u);
            }
        }
        last = now;
    }
}
