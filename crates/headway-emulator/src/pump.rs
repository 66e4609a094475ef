//! The loop that moves one direction's frames: receive → link model → release → wait.
//!
//! A [`Pump`] owns the buffers and a [`Port`] (the I/O: a receive socket on the in-interface,
//! a send socket on the out-interface, and a precise waiter), and shares the direction's
//! [`Link`] and histograms with the admin side through [`DirShared`]. One call to
//! [`Pump::step`]:
//!
//! 1. reads one batch of waiting frames, stamps it with `now`, and hands the frames to the link
//!    under its lock;
//! 2. takes every frame due at `now` out of the link (same lock, held only for these calls),
//!    hands them to the kernel outside the lock, and records `send instant - due`;
//!    steps 1–2 repeat up to [`RECV_ROUNDS`] times while batches come back full, so neither a
//!    long burst nor a long release list starves the other;
//! 3. waits until the in-interface is readable or the next frame is due — precisely (kernel
//!    sleep, then spin) when a frame is due within [`IDLE_WAIT`], coarsely otherwise. The wait is
//!    never longer than [`IDLE_WAIT`], which bounds how long a stop request goes unnoticed.
//!
//! Buffers are reused: a frame's buffer goes back to the pool after it is sent, and the pool
//! refills the receive slots, so the steady state allocates nothing. Frames the model drops (or
//! duplicates) do cost an allocation, because the model owns them from `handle_packet` on.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use headway_core::SystemClock;
use headway_link::Link;
use parking_lot::Mutex;

use crate::stats::{self, Histograms};

/// Frames read per receive batch.
pub(crate) const RECV_BATCH: usize = 64;
/// Receive batches per step before releases get their turn.
pub(crate) const RECV_ROUNDS: usize = 4;
/// Longest wait: the stop flag and the kernel drop counter are checked at least this often.
pub(crate) const IDLE_WAIT: Duration = Duration::from_millis(50);
/// Most spare buffers kept for reuse.
const POOL_CAP: usize = 16_384;

/// One frame as read from the in-interface. `buf` always keeps its full length (so it can be
/// offered to the next receive as is); `len` bytes of it are the frame.
#[derive(Clone)]
pub(crate) struct Frame {
    buf: Vec<u8>,
    len: usize,
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Frame({} bytes)", self.len)
    }
}

/// What one direction shares between its pump thread and the admin side.
#[derive(Debug)]
pub(crate) struct DirShared {
    pub(crate) link: Mutex<Link<Frame>>,
    pub(crate) hist: Mutex<Histograms>,
    pub(crate) send_errors: AtomicU64,
    pub(crate) truncated: AtomicU64,
    pub(crate) kernel_drops: AtomicU64,
}

impl DirShared {
    pub(crate) fn new(link: Link<Frame>) -> Self {
        DirShared {
            link: Mutex::new(link),
            hist: Mutex::new(Histograms::new()),
            send_errors: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
            kernel_drops: AtomicU64::new(0),
        }
    }
}

/// How precisely a wait must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Precision {
    /// A frame falls due at the deadline: sleep, then spin.
    Precise,
    /// Nothing is due: a plain kernel wait is enough.
    Coarse,
}

/// The I/O a pump needs; the real one is [`crate::bridge::SocketPort`], tests use memory.
pub(crate) trait Port {
    /// Reads waiting frames without blocking; see `headway_io::RecvSocket::recv_batch`.
    fn recv(&mut self, bufs: &mut [Vec<u8>], lens: &mut [usize]) -> io::Result<usize>;
    /// Sends frames in order; returns how many the kernel took (an error: the first was not).
    fn send(&mut self, frames: &[Frame]) -> io::Result<usize>;
    /// Returns when frames may be waiting or `deadline` has passed.
    fn wait(&mut self, deadline: Instant, precision: Precision) -> io::Result<()>;
    /// Frames the kernel dropped before we could read them, since the previous call.
    fn kernel_drops(&mut self) -> u64;
}

/// One direction's loop state. See the module docs.
pub(crate) struct Pump<P> {
    port: P,
    shared: Arc<DirShared>,
    frame_size: usize,
    rx: Vec<Vec<u8>>,
    lens: Vec<usize>,
    pool: Vec<Vec<u8>>,
    out: Vec<Frame>,
    dues: Vec<Instant>,
    queueing: Vec<Duration>,
    errors: Vec<Duration>,
    last_kernel_check: Instant,
}

impl<P: Port> Pump<P> {
    /// A pump whose receive buffers hold frames of up to `frame_size` bytes.
    pub(crate) fn new(port: P, shared: Arc<DirShared>, frame_size: usize) -> Self {
        Pump {
            port,
            shared,
            frame_size,
            rx: (0..RECV_BATCH).map(|_| vec![0; frame_size]).collect(),
            lens: vec![0; RECV_BATCH],
            pool: Vec::new(),
            out: Vec::with_capacity(256),
            dues: Vec::with_capacity(256),
            queueing: Vec::with_capacity(256),
            errors: Vec::with_capacity(256),
            last_kernel_check: SystemClock::now(),
        }
    }

    /// Steps until `stop` is set.
    pub(crate) fn run(mut self, stop: &AtomicBool, label: &str) {
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = self.step() {
                tracing::warn!(direction = label, error = %e, "emulator i/o error");
                // A persistent error (interface gone) must not turn into a busy loop.
                let _ = self.port.wait(
                    SystemClock::now() + Duration::from_millis(10),
                    Precision::Coarse,
                );
            }
        }
    }

    /// One receive / release / wait round. See the module docs.
    pub(crate) fn step(&mut self) -> io::Result<()> {
        // Release after every batch, so frames already due never wait behind a long burst.
        let mut more_waiting = true;
        for _ in 0..RECV_ROUNDS {
            let n = self.receive_batch()?;
            self.release();
            if n < self.rx.len() {
                more_waiting = false;
                break;
            }
        }
        let now = SystemClock::now();
        if now.saturating_duration_since(self.last_kernel_check) >= IDLE_WAIT {
            self.last_kernel_check = now;
            let drops = self.port.kernel_drops();
            self.shared.kernel_drops.fetch_add(drops, Ordering::Relaxed);
        }
        if more_waiting {
            return Ok(());
        }
        let next = self.shared.link.lock().poll_timeout();
        match next {
            Some(due) if due <= now => Ok(()),
            Some(due) if due - now <= IDLE_WAIT => self.port.wait(due, Precision::Precise),
            _ => self.port.wait(now + IDLE_WAIT, Precision::Coarse),
        }
    }

    /// Reads one batch of waiting frames into the link; returns how many were read.
    fn receive_batch(&mut self) -> io::Result<usize> {
        let n = self.port.recv(&mut self.rx, &mut self.lens)?;
        if n == 0 {
            return Ok(0);
        }
        let now = SystemClock::now();
        let mut truncated = 0;
        {
            let mut link = self.shared.link.lock();
            for i in 0..n {
                let len = self.lens[i];
                if len > self.frame_size {
                    // Only part of it was read; forwarding that would corrupt it.
                    truncated += 1;
                    continue;
                }
                let spare = self.pool.pop().unwrap_or_else(|| vec![0; self.frame_size]);
                let buf = std::mem::replace(&mut self.rx[i], spare);
                // The verdict is counted in the link's stats; a dropped frame's buffer is
                // freed with it.
                let _ = link.handle_packet(now, len, Frame { buf, len });
            }
        }
        if truncated > 0 {
            self.shared
                .truncated
                .fetch_add(truncated, Ordering::Relaxed);
        }
        Ok(n)
    }

    /// Sends every frame due now and records its timing.
    fn release(&mut self) {
        let now = SystemClock::now();
        {
            let mut link = self.shared.link.lock();
            while let Some(r) = link.poll_release(now) {
                self.out.push(r.packet);
                self.dues.push(r.due);
                self.queueing.push(r.queueing);
            }
        }
        if self.out.is_empty() {
            return;
        }
        let mut sent = 0;
        let mut failed = 0;
        while sent < self.out.len() {
            let t = SystemClock::now();
            match self.port.send(&self.out[sent..]) {
                Ok(k) if k > 0 => {
                    for due in &self.dues[sent..sent + k] {
                        self.errors.push(t.saturating_duration_since(*due));
                    }
                    sent += k;
                }
                // The first frame was refused; count it and go on with the rest.
                Ok(_) | Err(_) => {
                    failed += 1;
                    sent += 1;
                }
            }
        }
        if failed > 0 {
            self.shared.send_errors.fetch_add(failed, Ordering::Relaxed);
        }
        {
            let mut h = self.shared.hist.lock();
            for q in self.queueing.drain(..) {
                stats::record(&mut h.queueing, q);
            }
            for e in self.errors.drain(..) {
                stats::record(&mut h.timing_error, e);
            }
        }
        self.dues.clear();
        for f in self.out.drain(..) {
            if self.pool.len() < POOL_CAP && f.buf.len() == self.frame_size {
                self.pool.push(f.buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    use headway_link::{Loss, Params};

    /// A port fed from memory that records what is sent and with which timing.
    #[derive(Default)]
    struct MemPort {
        incoming: VecDeque<Vec<u8>>,
        sent: Vec<(Instant, Vec<u8>)>,
        refuse_next: usize,
        drops: u64,
    }

    impl Port for MemPort {
        fn recv(&mut self, bufs: &mut [Vec<u8>], lens: &mut [usize]) -> io::Result<usize> {
            let mut n = 0;
            while n < bufs.len() {
                let Some(f) = self.incoming.pop_front() else {
                    break;
                };
                let room = bufs[n].len().min(f.len());
                bufs[n][..room].copy_from_slice(&f[..room]);
                lens[n] = f.len();
                n += 1;
            }
            Ok(n)
        }
        fn send(&mut self, frames: &[Frame]) -> io::Result<usize> {
            if self.refuse_next > 0 {
                self.refuse_next -= 1;
                return Err(io::Error::from(io::ErrorKind::WouldBlock));
            }
            let t = SystemClock::now();
            for f in frames {
                self.sent.push((t, f.as_ref().to_vec()));
            }
            Ok(frames.len())
        }
        fn wait(&mut self, deadline: Instant, _: Precision) -> io::Result<()> {
            // Nothing can arrive while waiting in memory: just sleep to the deadline.
            headway_io::sleep_until(deadline);
            Ok(())
        }
        fn kernel_drops(&mut self) -> u64 {
            std::mem::take(&mut self.drops)
        }
    }

    fn frame(i: u32, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..4].copy_from_slice(&i.to_be_bytes());
        f
    }

    fn pump(params: Params) -> Pump<MemPort> {
        let shared = Arc::new(DirShared::new(Link::new(params, 7)));
        Pump::new(MemPort::default(), shared, 1518)
    }

    fn run_until_sent(p: &mut Pump<MemPort>, n: usize) {
        let deadline = SystemClock::now() + Duration::from_secs(10);
        while p.port.sent.len() < n && SystemClock::now() < deadline {
            p.step().unwrap();
        }
    }

    #[test]
    fn frames_pass_in_order_and_buffers_are_reused() {
        let mut p = pump(Params::default());
        for i in 0..300 {
            p.port.incoming.push_back(frame(i, 60 + i as usize));
        }
        run_until_sent(&mut p, 300);
        assert_eq!(p.port.sent.len(), 300);
        for (i, (_, f)) in p.port.sent.iter().enumerate() {
            assert_eq!(f, &frame(i as u32, 60 + i), "frame {i} intact and in order");
        }
        let link = p.shared.link.lock();
        assert_eq!(link.stats().passed, 300);
        assert_eq!(
            link.stats().received_bytes,
            (0..300).map(|i| 60 + i as u64).sum::<u64>()
        );
        drop(link);
        let (_, timing) = p.shared.hist.lock().summaries();
        assert_eq!(timing.count, 300);
        // Every buffer came back: the pool plus the receive slots hold all of them.
        assert!(!p.pool.is_empty());
        assert!(p.pool.iter().chain(&p.rx).all(|b| b.len() == 1518));

        // A second wave allocates nothing new: the pool shrinks, then refills.
        let before = p.pool.len();
        for i in 0..50 {
            p.port.incoming.push_back(frame(i, 100));
        }
        run_until_sent(&mut p, 350);
        assert_eq!(p.pool.len(), before);
    }

    #[test]
    fn delay_is_applied_and_timing_error_recorded() {
        let delay = Duration::from_millis(20);
        let mut p = pump(Params {
            delay,
            ..Params::default()
        });
        let t0 = SystemClock::now();
        p.port.incoming.push_back(frame(1, 100));
        run_until_sent(&mut p, 1);
        assert_eq!(p.port.sent.len(), 1);
        assert!(
            p.port.sent[0].0 - t0 >= delay,
            "released no earlier than the delay"
        );
        let (q, t) = p.shared.hist.lock().summaries();
        assert_eq!((q.count, t.count), (1, 1));
    }

    #[test]
    fn oversize_for_the_buffer_is_counted_not_forwarded() {
        let mut p = pump(Params::default());
        p.port.incoming.push_back(frame(1, 4000));
        p.port.incoming.push_back(frame(2, 100));
        run_until_sent(&mut p, 1);
        assert_eq!(p.port.sent.len(), 1);
        assert_eq!(p.port.sent[0].1, frame(2, 100));
        assert_eq!(p.shared.truncated.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn send_errors_are_counted_and_the_rest_still_goes() {
        let mut p = pump(Params::default());
        p.port.refuse_next = 1;
        p.port.drops = 3;
        for i in 0..5 {
            p.port.incoming.push_back(frame(i, 80));
        }
        run_until_sent(&mut p, 4);
        p.last_kernel_check -= IDLE_WAIT;
        p.step().unwrap();
        assert_eq!(p.port.sent.len(), 4);
        assert_eq!(
            p.port.sent[0].1,
            frame(1, 80),
            "the refused first frame is skipped"
        );
        assert_eq!(p.shared.send_errors.load(Ordering::Relaxed), 1);
        assert_eq!(p.shared.kernel_drops.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn lost_frames_never_come_out() {
        let loss = Loss::Bernoulli(headway_core::Probability::new(1.0).unwrap());
        let mut p = pump(Params {
            loss,
            ..Params::default()
        });
        for i in 0..10 {
            p.port.incoming.push_back(frame(i, 80));
        }
        for _ in 0..5 {
            p.step().unwrap();
        }
        assert!(p.port.sent.is_empty());
        assert_eq!(p.shared.link.lock().stats().lost, 10);
    }
}
