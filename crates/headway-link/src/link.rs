//! The link state machine: [`Link`] and what it hands back.
//!
//! This module owns the per-direction state (serialiser timeline, drop-tail queue occupancy, the
//! Gilbert–Elliott state, the random streams and the release schedule). It does no I/O and never
//! reads a clock. Call order: [`Link::handle_packet`] for each arriving frame, then
//! [`Link::poll_release`] until it returns `None`, then wait until [`Link::poll_timeout`].
//!
//! ## How a frame is scheduled
//! Everything about a frame is decided when it arrives: whether it fits, when its serialisation
//! starts and ends, whether it is lost, and when it (and a duplicate) will be released. This is
//! equivalent to deciding each step when the frame reaches it, because no later arrival can
//! change an earlier frame's fate (the queue is FIFO and drop-tail), and it keeps the per-frame
//! cost to a few arithmetic operations, four random draws at most and one push.
//!
//! - The serialiser timeline is kept as the start of the current busy period and the wire bytes
//!   sent in it, so `departure = busy_start + transmit_time(bytes so far)`: rounding to whole
//!   nanoseconds never accumulates and the long-run rate is exact.
//! - A lost frame takes its place on the timeline and is then discarded; it is counted in
//!   [`Stats::lost`] at arrival (and `handle_packet` returns [`Verdict::Queued`] for it).
//! - Frames not held back by reordering have non-decreasing release times, so they wait in a
//!   FIFO; held-back frames (and their duplicates) wait in a binary heap. `poll_release` takes
//!   the earlier of the two heads: O(1) per ordinary frame, O(log n) per held-back one.
//!
//! ## Random streams
//! The seed is split into four independent streams (loss, jitter, duplication, reordering). Each
//! frame accepted by the queue — lost or not — takes its draws from every enabled stream, so
//! changing one parameter (say the loss rate) does not shift which jitter, duplication or
//! reordering draw the other frames get.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use headway_core::Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::{JitterDistribution, Loss, Params};

/// Bytes of Ethernet header that the MTU does not include (destination, source, EtherType).
const ETHERNET_HEADER: u64 = 14;

/// One direction of an emulated link. See the crate docs for the model and call order.
#[derive(Debug)]
pub struct Link<T> {
    params: Params,
    stats: Stats,
    /// Frames whose serialisation had not finished at the last arrival, oldest first.
    serialiser: VecDeque<InService>,
    /// Sum of the frame lengths in `serialiser`.
    serialiser_bytes: u64,
    /// Start of the serialiser's current busy period.
    busy_start: Option<Instant>,
    /// Wire bytes (frame + overhead) serialised since `busy_start`.
    busy_bytes: u64,
    /// When the last accepted frame finishes serialisation.
    last_departure: Option<Instant>,
    /// The latest arrival seen; earlier `now`s are raised to it.
    last_arrival: Option<Instant>,
    /// Release time of the last frame not held back by reordering.
    last_release: Option<Instant>,
    /// Gilbert–Elliott: whether the channel is in the Bad state.
    bad: bool,
    /// Tie-breaker for frames due at the same instant: arrival order.
    next_seq: u64,
    /// Frames (and duplicates) in release order, not held back.
    ready: VecDeque<Entry<T>>,
    /// Frames held back by reordering (and their duplicates), earliest first.
    held: BinaryHeap<Held<T>>,
    loss_rng: Rng,
    jitter_rng: Rng,
    duplicate_rng: Rng,
    reorder_rng: Rng,
}

/// What happened to a frame handed to [`Link::handle_packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The frame is scheduled (or lost after serialisation: the loss decision is made at arrival
    /// for the moment its serialisation ends, and such a frame simply never comes out of
    /// `poll_release`; it is counted in [`Stats::lost`]).
    Queued,
    /// The frame was refused on arrival.
    Dropped(DropReason),
}

/// Why a frame did not pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// Lost by the loss model. ([`Link::handle_packet`] does not return this: lost frames are
    /// reported as [`Verdict::Queued`] and counted in [`Stats::lost`].)
    Loss,
    /// The queue was full.
    QueueOverflow,
    /// Longer than the MTU allows.
    Oversize,
}

/// A frame whose time has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release<T> {
    /// The frame.
    pub packet: T,
    /// When the model wanted it released; the caller's lateness is `now - due`.
    pub due: Instant,
    /// Time it waited in the queue before its serialisation started.
    pub queueing: Duration,
    /// Whether this is the extra copy made by duplication.
    pub duplicate: bool,
    /// Whether this frame was deliberately held back by reordering.
    pub reordered: bool,
}

/// Counters of one link direction since it was created.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Frames handed in.
    pub received: u64,
    /// Bytes handed in.
    pub received_bytes: u64,
    /// Frames released (including duplicates).
    pub passed: u64,
    /// Bytes released (including duplicates).
    pub passed_bytes: u64,
    /// Frames dropped by the loss model (counted when they arrive).
    pub lost: u64,
    /// Frames dropped because the queue was full.
    pub overflow: u64,
    /// Frames dropped for exceeding the MTU.
    pub oversize: u64,
    /// Extra copies made (counted when scheduled).
    pub duplicated: u64,
    /// Frames held back by reordering (counted when scheduled).
    pub reordered: u64,
}

/// Occupancy of the drop-tail queue in front of the serialiser at some instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Frames whose serialisation has not finished (including the one being serialised).
    pub packets: usize,
    /// Sum of their lengths in bytes (frame length, without the wire overhead).
    pub bytes: u64,
}

/// A frame on the serialiser's timeline.
#[derive(Debug, Clone, Copy)]
struct InService {
    departure: Instant,
    len: u64,
}

/// A frame waiting for its release.
#[derive(Debug)]
struct Entry<T> {
    due: Instant,
    seq: u64,
    queueing: Duration,
    len: u32,
    duplicate: bool,
    reordered: bool,
    packet: T,
}

impl<T> Entry<T> {
    fn key(&self) -> (Instant, u64) {
        (self.due, self.seq)
    }
}

/// Heap wrapper ordering entries earliest-first (a min-heap on `(due, seq)`).
#[derive(Debug)]
struct Held<T>(Entry<T>);

impl<T: Clone> Link<T> {
    /// A link with these parameters whose randomness is fully determined by `seed`.
    ///
    /// `params` should have passed [`Params::validate`]; if not, the link still behaves
    /// sensibly (a zero queue limit or a zero rate drops every frame as overflow).
    pub fn new(params: Params, seed: u64) -> Self {
        let mut root = Rng::from_seed(seed);
        // Fixed fork order: the streams of a seed never change meaning.
        let loss_rng = root.fork();
        let jitter_rng = root.fork();
        let duplicate_rng = root.fork();
        let reorder_rng = root.fork();
        Link {
            params,
            stats: Stats::default(),
            serialiser: VecDeque::new(),
            serialiser_bytes: 0,
            busy_start: None,
            busy_bytes: 0,
            last_departure: None,
            last_arrival: None,
            last_release: None,
            bad: false,
            next_seq: 0,
            ready: VecDeque::new(),
            held: BinaryHeap::new(),
            loss_rng,
            jitter_rng,
            duplicate_rng,
            reorder_rng,
        }
    }

    /// The parameters in force.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Replaces the parameters; frames already scheduled keep their schedule, the next arriving
    /// frame sees the new ones.
    ///
    /// The serialiser timeline continues: a frame arriving while earlier frames are still being
    /// serialised starts after them, at the new rate; no credit accrues from idle time. A
    /// Gilbert–Elliott state carries over if the new loss model is also Gilbert–Elliott.
    pub fn set_params(&mut self, params: Params, now: Instant) {
        self.expire(self.arrival_time(now));
        // Restart the busy-period accounting at the last departure so the new rate applies only
        // to bytes serialised from now on.
        if let Some(d) = self.last_departure {
            self.busy_start = Some(d);
            self.busy_bytes = 0;
        }
        if !matches!(params.loss, Loss::GilbertElliott { .. }) {
            self.bad = false;
        }
        self.params = params;
    }

    /// Hands in a frame of `len` bytes (the whole L2 frame as read from the interface) that
    /// arrived at `now`.
    ///
    /// `now` should not decrease between calls; an earlier `now` is treated as the latest one
    /// seen. The returned [`Verdict::Queued`] includes frames the loss model will drop.
    pub fn handle_packet(&mut self, now: Instant, len: usize, packet: T) -> Verdict {
        let now = self.arrival_time(now);
        self.last_arrival = Some(now);
        let len = len as u64;
        self.stats.received += 1;
        self.stats.received_bytes += len;

        // 1. MTU.
        if len > u64::from(self.params.mtu) + ETHERNET_HEADER {
            self.stats.oversize += 1;
            return Verdict::Dropped(DropReason::Oversize);
        }

        // 2. Drop-tail queue: frames whose serialisation has not finished at `now`.
        self.expire(now);
        let limit = self.params.queue;
        let over_packets = limit
            .packets
            .is_some_and(|max| self.serialiser.len() as u64 >= u64::from(max));
        let over_bytes = limit
            .bytes
            .is_some_and(|max| self.serialiser_bytes + len > max);
        if over_packets || over_bytes {
            self.stats.overflow += 1;
            return Verdict::Dropped(DropReason::QueueOverflow);
        }

        // 3. Serialisation on the virtual timeline.
        let start = match self.last_departure {
            Some(d) if d > now => d,
            _ => now,
        };
        let departure = match self.params.rate {
            None => start,
            Some(rate) => {
                let wire = len + u64::from(self.params.overhead);
                let (busy_start, busy_bytes) = match self.busy_start {
                    // The serialiser is still busy: continue its busy period.
                    Some(b) if start > now => (b, self.busy_bytes + wire),
                    // Idle: a new busy period starts with this frame.
                    _ => (now, wire),
                };
                let Some(t) = rate.transmit_time(busy_bytes) else {
                    // A zero rate never finishes serialising anything.
                    self.stats.overflow += 1;
                    return Verdict::Dropped(DropReason::QueueOverflow);
                };
                self.busy_start = Some(busy_start);
                self.busy_bytes = busy_bytes;
                busy_start + t
            }
        };
        self.last_departure = Some(departure);
        if departure > now {
            self.serialiser.push_back(InService { departure, len });
            self.serialiser_bytes += len;
        }

        // 4.–7. Every accepted frame takes its draws from each enabled stream (see module doc).
        let lost = self.draw_loss();
        let delay = self.draw_delay();
        let reorder = self.params.reorder;
        let held_back = self.reorder_rng.chance(reorder.probability.value());
        let duplicated = self.duplicate_rng.chance(self.params.duplicate.value());
        if lost {
            self.stats.lost += 1;
            return Verdict::Queued;
        }

        // 5. Delay and jitter, never before the previous (not held-back) frame.
        let mut due = departure + delay;
        if let Some(prev) = self.last_release {
            due = due.max(prev);
        }
        // 6. Reordering holds this frame back without holding back the ones behind it.
        if held_back {
            due += reorder.gap;
            self.stats.reordered += 1;
        } else {
            self.last_release = Some(due);
        }

        let seq = self.next_seq;
        self.next_seq += 2;
        let entry = Entry {
            due,
            seq,
            queueing: start - now,
            // The MTU check bounds `len` far below u32::MAX.
            len: len as u32,
            duplicate: false,
            reordered: held_back,
            packet,
        };
        // 7. Duplication: a copy right after the original.
        let copy = duplicated.then(|| Entry {
            seq: seq + 1,
            duplicate: true,
            packet: entry.packet.clone(),
            ..entry
        });
        self.schedule(entry);
        if let Some(copy) = copy {
            self.stats.duplicated += 1;
            self.schedule(copy);
        }
        Verdict::Queued
    }

    /// The next frame due at or before `now`, in release order; `None` when none is due.
    ///
    /// Frames due at the same instant come out in arrival order, a duplicate right after its
    /// original.
    pub fn poll_release(&mut self, now: Instant) -> Option<Release<T>> {
        let from_ready = match (self.ready.front(), self.held.peek()) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(r), Some(h)) => r.key() <= h.0.key(),
        };
        let head_due = if from_ready {
            self.ready.front().map(|e| e.due)
        } else {
            self.held.peek().map(|h| h.0.due)
        };
        if head_due? > now {
            return None;
        }
        let entry = if from_ready {
            self.ready.pop_front()?
        } else {
            self.held.pop()?.0
        };
        self.stats.passed += 1;
        self.stats.passed_bytes += u64::from(entry.len);
        Some(Release {
            packet: entry.packet,
            due: entry.due,
            queueing: entry.queueing,
            duplicate: entry.duplicate,
            reordered: entry.reordered,
        })
    }

    /// When the next frame falls due; `None` when the link holds no frames.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let ready = self.ready.front().map(|e| e.due);
        let held = self.held.peek().map(|h| h.0.due);
        match (ready, held) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Frames currently held (queued, in flight or waiting for release), duplicates included.
    pub fn len(&self) -> usize {
        self.ready.len() + self.held.len()
    }

    /// Whether the link holds no frames.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters since creation.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Occupancy of the queue in front of the serialiser at `now` (frames whose serialisation
    /// has not finished), as the next arriving frame would see it.
    pub fn backlog(&mut self, now: Instant) -> Backlog {
        self.expire(self.arrival_time(now));
        Backlog {
            packets: self.serialiser.len(),
            bytes: self.serialiser_bytes,
        }
    }

    /// `now`, raised to the latest arrival seen so the timeline never runs backwards.
    fn arrival_time(&self, now: Instant) -> Instant {
        match self.last_arrival {
            Some(last) if last > now => last,
            _ => now,
        }
    }

    /// Forgets frames whose serialisation has finished by `now`.
    fn expire(&mut self, now: Instant) {
        while let Some(f) = self.serialiser.front() {
            if f.departure > now {
                break;
            }
            self.serialiser_bytes -= f.len;
            self.serialiser.pop_front();
        }
    }

    /// Step 4: whether the loss model drops the next frame.
    fn draw_loss(&mut self) -> bool {
        match self.params.loss {
            Loss::None => false,
            Loss::Bernoulli(p) => self.loss_rng.chance(p.value()),
            Loss::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => {
                // The state moves before each frame, then the frame meets that state.
                let flip = if self.bad { r } else { p };
                if self.loss_rng.chance(flip.value()) {
                    self.bad = !self.bad;
                }
                let loss = if self.bad { loss_bad } else { loss_good };
                self.loss_rng.chance(loss.value())
            }
        }
    }

    /// Step 5: the propagation delay with jitter applied, clamped at zero.
    fn draw_delay(&mut self) -> Duration {
        let Params { delay, jitter, .. } = self.params;
        if jitter.amount.is_zero() {
            return delay;
        }
        let amount = jitter.amount.as_nanos() as f64;
        let offset = match jitter.distribution {
            JitterDistribution::Uniform => amount * (2.0 * self.jitter_rng.unit() - 1.0),
            JitterDistribution::Normal => {
                let z: f64 = StandardNormal.sample(&mut self.jitter_rng);
                amount * z
            }
        };
        let ns = delay.as_nanos() as f64 + offset;
        if ns <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(ns.round() as u64)
        }
    }

    /// Puts an entry in the FIFO (release times non-decreasing) or, if held back, the heap.
    fn schedule(&mut self, entry: Entry<T>) {
        if entry.reordered {
            self.held.push(Held(entry));
        } else {
            debug_assert!(self.ready.back().is_none_or(|b| b.key() <= entry.key()));
            self.ready.push_back(entry);
        }
    }
}

impl<T> PartialEq for Held<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl<T> Eq for Held<T> {}

impl<T> PartialOrd for Held<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Held<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: `BinaryHeap` is a max-heap and we want the earliest first.
        other.0.key().cmp(&self.0.key())
    }
}

#[cfg(test)]
mod tests;
