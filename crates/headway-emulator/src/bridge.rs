//! A running emulator between two interfaces, and the handle the admin side holds.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use headway_core::SystemClock;
use headway_io::packet::{OpenError, RecvSocket, SendSocket};
use headway_io::timer::{Sleeper, Wake};
use headway_io::{iface, offload, InterfaceError, OffloadError};
use headway_link::{Link, Params};
use serde::{Deserialize, Serialize};

use crate::pump::{DirShared, Frame, Port, Precision, Pump};
use crate::stats::{BridgeStats, DirectionStats};

/// Ethernet header plus one VLAN tag: what a frame adds to the interface MTU.
const L2_HEADROOM: usize = 14 + 4;

/// What to bridge and how each direction behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct BridgeConfig {
    /// A name for logs and metrics (`link` label).
    pub name: String,
    /// Interface A (in the calling thread's network namespace).
    pub a: String,
    /// Interface B.
    pub b: String,
    /// The link model for frames read on A and written to B.
    pub a_to_b: Params,
    /// The link model for frames read on B and written to A.
    pub b_to_a: Params,
    /// Seed of the models' randomness (B→A uses a value derived from it).
    pub seed: u64,
}

/// Knobs of the I/O shell that do not change the model; [`Tuning::default`] is what
/// [`Bridge::start`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// How released frames are handed to the kernel.
    pub send: SendMode,
    /// Spin margin of the precise wait; `None` adapts it to the measured wake-up latency.
    pub spin_margin: Option<Duration>,
    /// Receive and send socket buffer size, bytes.
    pub socket_buffer: usize,
    /// How sent frames enter the out-interface.
    pub queueing: TxPath,
    /// Scheduler time slice asked for the pump threads (`headway_io::sched::set_slice`); a short
    /// one may let them preempt other work sooner when a frame falls due (no gain was measurable
    /// on a busy 2-core VM, so it is off by default). `None`: the scheduler default.
    pub slice: Option<Duration>,
    /// Run the pump threads under the real-time `SCHED_FIFO` policy at this priority (1–99), so
    /// releases are not delayed behind other runnable tasks on a busy machine (needs root or
    /// CAP_SYS_NICE; if refused, the bridge runs at normal priority and says so). `None`: normal
    /// priority.
    pub realtime: Option<u8>,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            send: SendMode::Batch,
            spin_margin: None,
            socket_buffer: 32 << 20,
            queueing: TxPath::BypassQdisc,
            slice: None,
            realtime: None,
        }
    }
}

/// How released frames are handed to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendMode {
    /// All frames due at once in one `sendmmsg`.
    Batch,
    /// One `send` per frame.
    PerFrame,
}

/// Which path sent frames take into the out-interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxPath {
    /// Through the interface's queueing discipline, like any other traffic.
    Qdisc,
    /// Straight to the driver (`PACKET_QDISC_BYPASS`): cheaper; the emulator is the queue.
    BypassQdisc,
}

/// One direction of a bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Direction {
    /// Frames read on A, written to B.
    #[serde(rename = "a_to_b")]
    AtoB,
    /// Frames read on B, written to A.
    #[serde(rename = "b_to_a")]
    BtoA,
}

impl Direction {
    /// Both directions, A→B first.
    pub const ALL: [Direction; 2] = [Direction::AtoB, Direction::BtoA];

    /// The name used in text, metrics and the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::AtoB => "a_to_b",
            Direction::BtoA => "b_to_a",
        }
    }

    fn index(self) -> usize {
        match self {
            Direction::AtoB => 0,
            Direction::BtoA => 1,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A direction name that is neither `a_to_b` nor `b_to_a`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown direction {0:?}: use a_to_b or b_to_a")]
pub struct ParseDirectionError(String);

impl FromStr for Direction {
    type Err = ParseDirectionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "a_to_b" => Ok(Direction::AtoB),
            "b_to_a" => Ok(Direction::BtoA),
            _ => Err(ParseDirectionError(s.to_owned())),
        }
    }
}

/// Why a bridge could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmulateError {
    /// A and B name the same interface.
    #[error("both sides of bridge {name} are interface {iface}: use two different interfaces")]
    SameInterface {
        /// The bridge.
        name: String,
        /// The interface named twice.
        iface: String,
    },
    /// An interface could not be looked up.
    #[error(transparent)]
    Interface(#[from] InterfaceError),
    /// Offloads could not be switched off.
    #[error(transparent)]
    Offload(#[from] OffloadError),
    /// A packet socket could not be opened.
    #[error(transparent)]
    Socket(#[from] OpenError),
    /// A pump thread could not be started.
    #[error("starting the emulator thread for {name} failed: {source}")]
    Spawn {
        /// The bridge.
        name: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A running emulator between two interfaces: one thread per direction. Dropping it stops the
/// threads, like [`Bridge::stop`].
#[derive(Debug)]
pub struct Bridge {
    handle: BridgeHandle,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Bridge {
    /// Starts bridging `cfg.a` and `cfg.b` with [`Tuning::default`]. See [`Bridge::start_with`].
    pub fn start(cfg: BridgeConfig) -> Result<Bridge, EmulateError> {
        Self::start_with(cfg, Tuning::default())
    }

    /// Switches offloads off on both interfaces, opens the packet sockets (in the calling
    /// thread's network namespace) and starts one pump thread per direction.
    ///
    /// Needs root (CAP_NET_RAW for the sockets, CAP_NET_ADMIN for offloads).
    pub fn start_with(cfg: BridgeConfig, tuning: Tuning) -> Result<Bridge, EmulateError> {
        if cfg.a == cfg.b {
            return Err(EmulateError::SameInterface {
                name: cfg.name,
                iface: cfg.a,
            });
        }
        let mtu = iface::mtu(&cfg.a)?.max(iface::mtu(&cfg.b)?);
        let frame_size = mtu as usize + L2_HEADROOM;
        for name in [&cfg.a, &cfg.b] {
            let after = offload::disable(name)?;
            if !after.all_off() {
                tracing::warn!(iface = %name, offloads = ?after, "some offloads stay on");
            }
        }
        let buf = tuning.socket_buffer;
        let open = |rx: &str, tx: &str| -> Result<SocketPort, EmulateError> {
            let rx = RecvSocket::open(rx, buf)?;
            let tx = SendSocket::open(tx, buf)?;
            if tuning.queueing == TxPath::BypassQdisc {
                // Not fatal: without it frames take the qdisc path.
                if let Err(e) = tx.bypass_qdisc() {
                    tracing::warn!(iface = tx.interface(), error = %e, "no qdisc bypass");
                }
            }
            let sleeper = match tuning.spin_margin {
                Some(m) => Sleeper::with_fixed_margin(m),
                None => Sleeper::new(),
            };
            Ok(SocketPort {
                rx,
                tx,
                sleeper,
                mode: tuning.send,
            })
        };
        let ports = [open(&cfg.a, &cfg.b)?, open(&cfg.b, &cfg.a)?];

        let seeds = [cfg.seed, cfg.seed ^ 0x9e37_79b9_7f4a_7c15];
        let dirs = [
            Arc::new(DirShared::new(Link::new(cfg.a_to_b, seeds[0]))),
            Arc::new(DirShared::new(Link::new(cfg.b_to_a, seeds[1]))),
        ];
        let handle = BridgeHandle {
            inner: Arc::new(Inner {
                name: cfg.name.clone(),
                a: cfg.a,
                b: cfg.b,
                dirs: dirs.clone(),
            }),
        };
        let mut bridge = Bridge {
            handle,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        for ((port, shared), dir) in ports.into_iter().zip(dirs).zip(Direction::ALL) {
            let stop = bridge.stop.clone();
            let label = format!("{}/{}", cfg.name, dir);
            let pump = Pump::new(port, shared, frame_size);
            let slice = tuning.slice;
            let realtime = tuning.realtime;
            let thread = std::thread::Builder::new()
                .name(format!("emu-{}", dir.as_str()))
                .spawn(move || {
                    if let Some(slice) = slice {
                        // Only a hint: without it releases are just less punctual.
                        if let Err(e) = headway_io::sched::set_slice(slice) {
                            tracing::debug!(error = %e, "no short scheduler slice");
                        }
                    }
                    if let Some(prio) = realtime {
                        if let Err(e) = headway_io::sched::set_realtime(prio) {
                            tracing::warn!(error = %e, "real-time priority refused; releases may be late under load");
                        }
                    }
                    pump.run(&stop, &label)
                })
                .map_err(|source| EmulateError::Spawn {
                    name: cfg.name.clone(),
                    source,
                })?;
            // On an early return `bridge` is dropped, which stops the thread started so far.
            bridge.threads.push(thread);
        }
        tracing::info!(link = %cfg.name, a = %bridge.handle.inner.a, b = %bridge.handle.inner.b, mtu, "emulator started");
        Ok(bridge)
    }

    /// A handle for reading stats and changing parameters while the bridge runs.
    pub fn handle(&self) -> BridgeHandle {
        self.handle.clone()
    }

    /// Stops both threads (within about 50 ms), waits for them and returns the final stats.
    /// Frames still held by the model are discarded.
    pub fn stop(mut self) -> BridgeStats {
        self.shutdown();
        self.handle.stats()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::error!(link = %self.handle.inner.name, "emulator thread panicked");
            }
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A cheap, cloneable view of a running bridge for the admin side (`Send + Sync`).
///
/// Parameter changes and stats reads take the direction's lock for a few hundred nanoseconds;
/// the pump thread holds the same lock only while handing frames to and taking them from the
/// model, never across a system call.
#[derive(Clone)]
pub struct BridgeHandle {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    a: String,
    b: String,
    dirs: [Arc<DirShared>; 2],
}

impl BridgeHandle {
    /// The bridge's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Interfaces A and B.
    pub fn interfaces(&self) -> (String, String) {
        (self.inner.a.clone(), self.inner.b.clone())
    }

    /// The parameters in force in one direction.
    pub fn params(&self, dir: Direction) -> Params {
        self.inner.dirs[dir.index()].link.lock().params().clone()
    }

    /// Replaces one direction's parameters at once; frames already scheduled keep their
    /// schedule, the next arriving frame sees the new ones.
    pub fn set_params(&self, dir: Direction, p: Params) {
        let now = SystemClock::now();
        self.inner.dirs[dir.index()].link.lock().set_params(p, now);
        tracing::info!(link = %self.inner.name, direction = %dir, "link parameters changed");
    }

    /// A snapshot of both directions' counters and delay summaries.
    pub fn stats(&self) -> BridgeStats {
        BridgeStats {
            name: self.inner.name.clone(),
            a: self.inner.a.clone(),
            b: self.inner.b.clone(),
            a_to_b: direction_stats(&self.inner.dirs[0]),
            b_to_a: direction_stats(&self.inner.dirs[1]),
        }
    }
}

impl fmt::Debug for BridgeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BridgeHandle")
            .field("name", &self.inner.name)
            .field("a", &self.inner.a)
            .field("b", &self.inner.b)
            .finish()
    }
}

fn direction_stats(d: &DirShared) -> DirectionStats {
    let (s, in_flight) = {
        let link = d.link.lock();
        (link.stats().clone(), link.len() as u64)
    };
    let (queueing_us, timing_error_us) = d.hist.lock().summaries();
    DirectionStats {
        link: s,
        in_flight,
        send_errors: d.send_errors.load(Ordering::Relaxed),
        truncated: d.truncated.load(Ordering::Relaxed),
        kernel_drops: d.kernel_drops.load(Ordering::Relaxed),
        queueing_us,
        timing_error_us,
    }
}

/// The real I/O of one direction: receive on the in-interface, send on the out-interface.
pub(crate) struct SocketPort {
    rx: RecvSocket,
    tx: SendSocket,
    sleeper: Sleeper,
    mode: SendMode,
}

impl Port for SocketPort {
    fn recv(&mut self, bufs: &mut [Vec<u8>], lens: &mut [usize]) -> std::io::Result<usize> {
        self.rx.recv_batch(bufs, lens)
    }

    fn send(&mut self, frames: &[Frame]) -> std::io::Result<usize> {
        match self.mode {
            SendMode::Batch => self.tx.send_batch(frames),
            SendMode::PerFrame => {
                let first = frames.first().map(AsRef::as_ref).unwrap_or(&[]);
                self.tx.send(first)?;
                Ok(1)
            }
        }
    }

    fn wait(&mut self, deadline: Instant, precision: Precision) -> std::io::Result<()> {
        use std::os::fd::AsFd;
        // Whether it woke for data or the deadline, the pump's next step reads and releases.
        let _: Wake = match precision {
            Precision::Precise => self.sleeper.wait_readable(self.rx.as_fd(), deadline)?,
            Precision::Coarse => self.sleeper.poll_readable(self.rx.as_fd(), deadline)?,
        };
        Ok(())
    }

    fn kernel_drops(&mut self) -> u64 {
        self.rx.take_statistics().map(|s| s.drops).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direction_round_trips_through_text_and_serde() {
        for d in Direction::ALL {
            assert_eq!(d.to_string().parse::<Direction>().unwrap(), d);
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{d}\""));
            assert_eq!(serde_json::from_str::<Direction>(&json).unwrap(), d);
        }
        let err = "up".parse::<Direction>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown direction \"up\": use a_to_b or b_to_a"
        );
    }

    #[test]
    fn bad_configs_fail_with_a_clear_error() {
        let cfg = |a: &str, b: &str| BridgeConfig {
            name: "t".into(),
            a: a.into(),
            b: b.into(),
            a_to_b: Params::default(),
            b_to_a: Params::default(),
            seed: 1,
        };
        let err = Bridge::start(cfg("lo", "lo")).unwrap_err();
        assert!(matches!(err, EmulateError::SameInterface { .. }), "{err:?}");
        let err = Bridge::start(cfg("lo", "hwt-nope0")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no interface named hwt-nope0 in this network namespace"
        );
    }
}
